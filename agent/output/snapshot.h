/* SPDX-License-Identifier: MIT */
/*
 * snapshot.h: the snapshot service, one path for every way a profile leaves llgo-heapd: the
 * socket's SNAPSHOT (server.c's client workers), the HTTP endpoints (http.c) and the
 * daemon's own dumps (dump.c). It finds the session, checks who asks, settles the socket,
 * drains, collects the buckets and the accounting as one consistent cut, trims, and writes
 * the profile through the writers (pprof.c, text.c, folded.c, top.c). The model it fills
 * (struct profile) is profile.c's; the session's records are drain.c's.
 */
#ifndef LLGO_AGENT_SNAPSHOT_H
#define LLGO_AGENT_SNAPSHOT_H

#include "../ingest/drain.h"

/* What the snapshot service asks of the socket server, which it knows only through this
 * (server.c fills one in: server_snapshot_source). */
struct snapshot_source {
	void *arg;
	/* pid's session (a reference; NULL: none), after waiting briefly for a HELLO of pid
	 * still in flight */
	struct session *(*lookup)(void *arg, pid_t pid);
	/* wait briefly until every packet s's shim sent so far was handled */
	void (*settle)(void *arg, struct session *s);
	/* hide the --trim functions from the top of p's stacks (a reload changes them) */
	int (*trim)(void *arg, struct profile *p, struct procmaps *maps);
};

/* Everything s published before now, as a profile: settle its connections, drain, then copy
 * the buckets and the accounting as of one cut (they describe the same records). Shared by
 * SNAPSHOT and the HTTP endpoints (which subtract two for delta profiles). */
int snapshot_collect(const struct snapshot_source *src, struct session *s, struct profile *p);

/* The same, but p's samples are the peak's capture (peak.c): the in-use values at the
 * highest in-use total seen, described in p->meta.peak. */
int snapshot_collect_peak(const struct snapshot_source *src, struct session *s,
			  struct profile *p);

/* The cut alone (caller holds s->snapshot_lock; no settle, no drain, no trim): the buckets,
 * their in-use values and the accounting as of one moment, offered to the peak view. */
struct snapshot_cut_info {
	struct session_counts cnt;
	struct bucket_stats bs;
	bool mixed;
	uint64_t last_rate;
};
int snapshot_cut(struct session *s, struct profile *p, struct snapshot_cut_info *ci);

/* peak_thread.c: the thread that makes the peak view's scans the drain asks for (peak_want),
 * one session at a time, through snapshot_cut. peak_thread_wake's argument is the thread (a
 * drain waker, drain_on_peak). */
struct peak_thread;
struct peak_thread *peak_thread_new(struct session_registry *reg);
int peak_thread_start(struct peak_thread *t);
void peak_thread_wake(void *thread);
void peak_thread_stop(struct peak_thread *t);
void peak_thread_free(struct peak_thread *t);

/* Write p in format fmt (enum llgo_format) with LLGO_SNAP_* flags to out (top_n: rows of
 * LLGO_FORMAT_TOP, 0 = 10). -EINVAL for an unknown format. */
int snapshot_write(struct buf *out, const struct profile *p, struct procmaps *maps, int fmt,
		   uint32_t flags, uint32_t top_n);

/* The whole path: look pid up (src->lookup), check that requester may read it, collect,
 * write fmt into out. Returns 0, or -errno with a one-line reason in err (-ESRCH unknown
 * pid, -EACCES, -EINVAL bad format). */
int snapshot_take(const struct snapshot_source *src, pid_t pid, uid_t requester, int fmt,
		  uint32_t flags, uint32_t top_n, struct buf *out, char *err, size_t errlen);

#endif
