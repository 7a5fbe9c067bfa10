// SPDX-License-Identifier: MIT
/*
 * snapshot.c: the snapshot service. Every profile llgo-heapd hands out, over its socket
 * (SNAPSHOT, server.c's client workers) or over HTTP (http.c), is made here: look the process
 * up, check who asks, settle the socket (the shim's packets sent before the request are
 * handled first), drain, collect the buckets and the accounting as one cut, apply the in-use
 * table, trim, and write the format asked for through its writer.
 *
 * Left to others: the socket and its settling (server.c), the records and the drain lock
 * (drain.c), the table (bucket.c), the in-use table (inuse.c), the model and its helpers
 * (profile.c), each format (pprof.c, text.c, folded.c, top.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "snapshot.h"

#define SNAPSHOT_EXIT_WAIT_MS 2000u

int snapshot_collect(struct server *srv, struct session *s, struct profile *p)
{
	memset(p, 0, sizeof(*p));
	server_settle(srv, s);
	/* The process is gone but its EOF not handled yet (packets may still be queued on its
	 * connection): wait for the final drain rather than miss its last rings. */
	if (session_is_live(s) && !session_process_alive(s))
		session_wait_exited(s, SNAPSHOT_EXIT_WAIT_MS);
	drain_session(s);
	drain_refresh_maps(s, false);

	/* The cut: what the accounting, the rings' sequence numbers and the buckets say at one
	 * moment, taken under the drain lock (a few loads per ring). The walk of the table and
	 * the in-use scan then run beside the drain, which goes on adding (bucket.c keeps the
	 * cut's values of what it touches). */
	struct session_counts cnt;
	struct inuse_cut ic;
	struct bucket_stats bs;
	pthread_mutex_lock(&s->snapshot_lock);
	pthread_mutex_lock(&s->drain_lock);
	uint64_t cut = bucket_table_cut(s->buckets);
	session_account_locked(s, &cnt);
	int rc = inuse_cut_locked(s, &ic);
	bucket_table_stats(s->buckets, &bs);
	bool mixed = s->mixed_rates;
	uint64_t last_rate = s->last_rate;
	p->meta.unwound = atomic_load_explicit(&s->unwound, memory_order_relaxed);
	p->meta.truncated = atomic_load_explicit(&s->truncated, memory_order_relaxed);
	pthread_mutex_unlock(&s->drain_lock);

	if (!rc)
		rc = profile_collect_cut(p, s->buckets, cut);
	bucket_table_cut_end(s->buckets, cut);
	p->meta.sampled = cnt.sampled;
	if (!rc)
		rc = inuse_apply_cut(s, &ic, p);
	pthread_mutex_lock(&s->drain_lock);
	inuse_cut_end_locked(s, &ic);
	pthread_mutex_unlock(&s->drain_lock);
	pthread_mutex_unlock(&s->snapshot_lock);

	if (!rc) {
		unsigned rd = procmaps_read_begin(s->maps);
		rc = server_trim(srv, p, s->maps);
		procmaps_read_end(s->maps, rd);
	}
	if (rc) {
		profile_release(p);
		return rc;
	}
	p->meta.pid = s->pid;
	memcpy(p->meta.comm, s->comm, sizeof(p->meta.comm));
	p->meta.time_nanos = session_now_ns(CLOCK_REALTIME);
	p->meta.rate = session_rate(s);
	/* Sampling is off now: state the rate the samples were taken at. */
	if (p->meta.rate == 0)
		p->meta.rate = last_rate ? last_rate : LLGO_RATE_DEFAULT;
	p->meta.mixed_rates = mixed || profile_mixed_rates(p);
	p->meta.sampled = cnt.sampled;
	p->meta.delivered = cnt.delivered;
	p->meta.dropped = cnt.dropped;
	p->meta.corrupt = cnt.corrupt;
	p->meta.dropped_prior = cnt.prior;
	p->meta.dropped_no_ring = cnt.no_ring;
	p->meta.dropped_detached = cnt.detached;
	p->meta.reconnects = cnt.reconnects;
	p->meta.cap_hits = bs.cap_hits;
	p->meta.verify_samples = atomic_load(&s->verify_samples);
	p->meta.verify_agree = atomic_load(&s->verify_agree);
	p->meta.unwind_mode = __atomic_load_n(&s->unwind_mode, __ATOMIC_RELAXED); /* a join sets it */
	return 0;
}

int snapshot_write(struct buf *out, const struct profile *p, struct procmaps *maps, int fmt,
		   uint32_t flags, uint32_t top_n)
{
	int rc = -EINVAL;
	unsigned rd = procmaps_read_begin(maps); /* the drain may refresh meanwhile */
	/* every address to the symbolizer in batches, before the writers ask one by one */
	profile_prefetch(p, maps);
	switch (fmt) {
	case LLGO_FORMAT_PPROF:
		rc = pprof_write(out, p, maps, flags);
		break;
	case LLGO_FORMAT_TEXT:
		rc = text_write(out, p, maps);
		break;
	case LLGO_FORMAT_FOLDED:
		rc = folded_write(out, p, maps, flags);
		break;
	case LLGO_FORMAT_TOP:
		rc = top_write(out, p, maps, flags, top_n ? top_n : 10);
		break;
	case LLGO_FORMAT_SITES:
		rc = sites_write(out, p, maps);
		break;
	}
	procmaps_read_end(maps, rd);
	return rc;
}

int snapshot_take(struct server *srv, pid_t pid, uid_t requester, int fmt, uint32_t flags,
		  uint32_t top_n, struct buf *out, char *err, size_t errlen)
{
	if (fmt < LLGO_FORMAT_PPROF || fmt > LLGO_FORMAT_SITES) {
		snprintf(err, errlen, "unknown format %d", fmt);
		return -EINVAL;
	}
	struct session *s = server_lookup(srv, pid);
	if (!s) {
		snprintf(err, errlen, "no such profiled process: %d", (int)pid);
		return -ESRCH;
	}
	if (!session_allowed(s, requester)) {
		snprintf(err, errlen, "permission denied: pid %d belongs to uid %u", (int)pid,
			 (unsigned)s->uid);
		session_put(s);
		return -EACCES;
	}
	struct profile p;
	int rc = snapshot_collect(srv, s, &p);
	if (rc) {
		snprintf(err, errlen, "collecting the profile: %s", strerror(-rc));
		session_put(s);
		return rc;
	}
	rc = snapshot_write(out, &p, s->maps, fmt, flags, top_n);
	profile_release(&p);
	session_put(s);
	if (!rc && out->failed)
		rc = -ENOMEM;
	if (rc)
		snprintf(err, errlen, "writing the profile: %s", strerror(-rc));
	return rc;
}
