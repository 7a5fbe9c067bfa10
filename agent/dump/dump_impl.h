/* SPDX-License-Identifier: MIT */
/*
 * dump_impl.h: the parts of llgo-heapd's own snapshots (dump.h), shared by the files that
 * make them and included by nothing else:
 *   dump.c      the dumper's thread: when to take which snapshot, of whom, and where it goes;
 *   dump_dir.c  the folder: its checks, one subfolder per uid owned by that uid, files made
 *               with O_EXCL as the uid itself (setfsuid), budgets and rotation;
 *   oom.c       who the OOM killer chose: the oom:mark_victim tracepoint (oom.bpf.c), or the
 *               oom_kill counters of the profiled processes' memory cgroups;
 *   push.c      an HTTP POST of a snapshot to Pyroscope's /ingest (libcurl).
 */
#ifndef LLGO_AGENT_DUMP_IMPL_H
#define LLGO_AGENT_DUMP_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dump.h"
#include "../ingest/session.h"

/* ---- dump_dir.c ------------------------------------------------------------------------ */

enum dump_kind {
	DUMP_KIND_HEAP, /* periodic: "<comm>.<pid>.<time>.heap.pb.gz" */
	DUMP_KIND_OOM,  /* chosen by the OOM killer: "<comm>.<pid>.<time>.oom.pb.gz" */
};

/* Files of one uid beyond which its oldest go, whatever their bytes. */
#define DUMP_MAX_FILES_PER_UID 1024u
/* Longest file name the folder holds (escaped comm cut to 32 bytes, pid, time, suffix). */
#define DUMP_NAME_MAX 96u

struct dump_dir;

/* Check and open the folder (see dumper_new), and index the snapshots earlier runs left. */
struct dump_dir *dump_dir_open(const char *path, unsigned keep, uint64_t max_bytes_per_uid,
			       uint64_t max_bytes, char *err, size_t errlen);
void dump_dir_close(struct dump_dir *dd);
/* Write data as DIR/<uid>/<name> owned by uid:gid (made as that uid: setfsuid). Before it
 * gets its name, room is made with it counted, oldest first: periodic snapshots of (uid,
 * pid) beyond keep, then the uid's files beyond its bytes or DUMP_MAX_FILES_PER_UID, then,
 * beyond the total, the oldest of the uid holding the most. Nothing is written over: the
 * file is made with O_EXCL under a temporary name and renamed without replacing
 * (RENAME_NOREPLACE). A failure (a full disk, a quota)
 * removes the partial file and nothing else. 0 with the name in name (DUMP_NAME_MAX), or
 * -errno with a reason in err. */
int dump_dir_write(struct dump_dir *dd, uid_t uid, gid_t gid, const char *comm, pid_t pid,
		   enum dump_kind kind, const void *data, size_t len, char *name, char *err,
		   size_t errlen);
/* comm as it may appear in a file or label name: [A-Za-z0-9_-] kept, anything else (dots,
 * slashes, control bytes, UTF-8) '_', at most max - 1 bytes, never empty. */
void dump_safe_name(const char *comm, char *out, size_t max);

/* ---- oom.c ----------------------------------------------------------------------------- */

/* A victim of the OOM killer: pid, and its start time in clock ticks since boot (as
 * /proc/PID/stat's starttime and session->proc_start) when known, else 0. Called on oom.c's
 * reader thread (BPF) or in oom_cgroups_poll. */
typedef void (*oom_victim_fn)(void *arg, pid_t pid, uint64_t start_ticks);

struct oom_bpf;
/* Load the tracepoint program, attach it, start its reader thread. -errno and a reason
 * (no privilege, no BTF, no such tracepoint) on failure. */
int oom_bpf_open(struct oom_bpf **out, oom_victim_fn fn, void *arg, char *err, size_t errlen);
void oom_bpf_close(struct oom_bpf *b);

struct oom_cgroups;
/* The cgroup mounts (v2's memory.events, v1's memory.oom_control); NULL with a reason when
 * neither has a memory controller. */
struct oom_cgroups *oom_cgroups_new(char *err, size_t errlen);
void oom_cgroups_free(struct oom_cgroups *c);
/* One pass: start watching the memory cgroups of sessions that attached since the last pass;
 * a watched session that exited within OOM_CGROUP_WINDOW_NS of a rise of its cgroup's
 * oom_kill counter (seen after it was first watched) is reported as a victim. Call every
 * OOM_CGROUP_POLL_MS. */
#define OOM_CGROUP_POLL_MS 100u
#define OOM_CGROUP_WINDOW_NS (5ull * 1000000000ull)
void oom_cgroups_poll(struct oom_cgroups *c, struct session_registry *reg, oom_victim_fn fn,
		      void *arg);

/* ---- push.c ---------------------------------------------------------------------------- */

struct push;
/* url: http:// or https://, the server's base (…/ingest is appended). */
struct push *push_new(const char *url, unsigned timeout_s, char *err, size_t errlen);
void push_free(struct push *p);
/* From any thread: the POST in flight (and every later one) gives up at once. */
void push_cancel(struct push *p);
/* POST data (a gzipped pprof) to URL/ingest?name=APP.memory{pid=N,uid=U}&from=&until=
 * &format=pprof&spyName=llgo-heap (app: [A-Za-z0-9_-] of service). 0 on a 2xx answer, else
 * -errno with a reason (the HTTP status, curl's error) in err. */
int push_send(struct push *p, const char *service, pid_t pid, uid_t uid, uint64_t from_s,
	      uint64_t until_s, const void *data, size_t len, char *err, size_t errlen);

#endif
