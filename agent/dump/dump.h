/* SPDX-License-Identifier: MIT */
/*
 * dump.h: llgo-heapd's snapshots it takes on its own (dump.c): every --dump-every SECONDS a
 * pprof snapshot of each live profiled process, written under --dump-dir (dump_dir.c) and/or
 * sent to a Pyroscope-compatible --push URL (push.c); and, when the kernel's OOM killer picks
 * a profiled process (oom.c), that process's final profile, written before its session is
 * evicted. One thread of its own: the drain, the event loop and the client workers never
 * wait for a disk or an HTTP endpoint.
 *
 * Life cycle, as server.c's and http.c's: dumper_new checks the options and the folder (so a
 * bad folder is reported before the daemon detaches) and starts no thread; dumper_start
 * starts it; dumper_free stops it (an HTTP push in flight is cut short) and frees. A reload
 * whose dump options changed replaces the dumper (daemon.c).
 */
#ifndef LLGO_AGENT_DUMP_H
#define LLGO_AGENT_DUMP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../server/server.h"

enum dump_oom_mode {
	DUMP_OOM_AUTO = 0, /* the BPF tracepoint, else the cgroups' counters */
	DUMP_OOM_BPF,      /* the BPF tracepoint only (an error is logged when it cannot load) */
	DUMP_OOM_CGROUP,   /* the cgroups' oom_kill counters only */
	DUMP_OOM_OFF,
};

#define DUMP_DEFAULT_KEEP 5u
#define DUMP_DEFAULT_MAX_BYTES_PER_UID (64ull << 20)
#define DUMP_DEFAULT_MAX_BYTES (1ull << 30)
#define DUMP_DEFAULT_PUSH_TIMEOUT_S 10u
#define DUMP_MAX_KEEP 100000u

struct dump_opts {
	const char *dir;            /* --dump-dir: NULL, no files (and no OOM snapshots) */
	unsigned every_s;           /* --dump-every: 0, no periodic snapshots */
	unsigned keep;              /* --dump-keep: periodic snapshots kept per process (0: default) */
	uint64_t max_bytes_per_uid; /* --dump-max-bytes-per-uid (0: default) */
	uint64_t max_bytes;         /* --dump-max-bytes, all users (0: default) */
	int oom;                    /* --dump-oom, enum dump_oom_mode */
	const char *push_url;       /* --push: NULL, none */
	unsigned push_timeout_s;    /* --push-timeout (0: default) */
};

struct dumper;

/* Nothing to do (no folder, no push): *out NULL and 0. Else checks the folder (absolute, no
 * symbolic link on the way, every folder on it owned by root or us and not writable by
 * others unless sticky, the last one not writable by others at all; made 0711 when missing)
 * and reads what earlier runs left in it (the budgets count it). push_uids: whose processes
 * are pushed (--http-uids; NULL or n 0: the daemon's effective uid). Starts no thread. */
int dumper_new(struct server *srv, const struct dump_opts *o, const uid_t *push_uids,
	       size_t npush_uids, struct dumper **out, char *err, size_t errlen);
int dumper_start(struct dumper *d, char *err, size_t errlen);
/* Stop the thread (an HTTP push in flight is aborted) and free; accepts NULL. Call before
 * server_free: the dumper holds sessions. */
void dumper_free(struct dumper *d);

/* Whether two option sets mean the same dumper (a reload keeps it). */
bool dump_opts_same(const struct dump_opts *a, const struct dump_opts *b);

#endif
