// SPDX-License-Identifier: MIT
/*
 * snapshot.c: the snapshot service. Every profile llgo-heapd hands out, over its socket
 * (SNAPSHOT, server.c's client workers) or over HTTP (http.c), is made here: look the process
 * up, check who asks, settle the socket (the shim's packets sent before the request are
 * handled first), drain, collect the buckets and the accounting as one cut, apply the in-use
 * table (each such cut is a scan for the peak view, peak.c, which LLGO_SNAP_PEAK answers
 * with instead), trim, and write the format asked for through its writer.
 *
 * Left to others: the socket and its settling (server.c, which this file reaches only
 * through the struct snapshot_source it is given), the records and the drain lock (drain.c),
 * the table (bucket.c), the in-use table (inuse.c), the model and its helpers (profile.c),
 * each format (pprof.c, text.c, folded.c, top.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "snapshot.h"

#define SNAPSHOT_EXIT_WAIT_MS 2000u

int snapshot_cut(struct session *s, struct profile *p, struct snapshot_cut_info *ci)
{
	/* The cut: what the accounting, the rings' sequence numbers and the buckets say at one
	 * moment, taken under the drain lock (a few loads per ring). The walk of the table and
	 * the in-use scan then run beside the drain, which goes on adding (bucket.c keeps the
	 * cut's values of what it touches). Every cut is a scan for the peak view too (peak.c). */
	struct inuse_cut ic;
	struct peak_cut pc;
	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&s->drain_lock);
	uint64_t cut = bucket_table_cut(s->buckets);
	session_account_locked(s, &ci->cnt);
	int rc = inuse_cut_locked(s, &ic);
	peak_cut_locked(s, &pc);
	bucket_table_stats(s->buckets, &ci->bs);
	ci->mixed = s->mixed_rates;
	ci->last_rate = s->last_rate;
	p->meta.unwound = atomic_load_explicit(&s->unwound, memory_order_relaxed);
	p->meta.truncated = atomic_load_explicit(&s->truncated, memory_order_relaxed);
	pthread_mutex_unlock(&s->drain_lock);

	if (!rc)
		rc = profile_collect_cut(p, s->buckets, cut);
	bucket_table_cut_end(s->buckets, cut);
	p->meta.sampled = ci->cnt.sampled;
	if (!rc)
		rc = inuse_apply_cut(s, &ic, p);
	pthread_mutex_lock(&s->drain_lock);
	inuse_cut_end_locked(s, &ic);
	bool highest = peak_rebase_locked(s, &pc, rc ? NULL : p);
	pthread_mutex_unlock(&s->drain_lock);
	if (highest)
		peak_keep(s, &pc, p);
	if (rc)
		profile_release(p);
	return rc;
}

/* Settle, drain, cut (as snapshot_cut; peak: then the highest capture instead of now's
 * values), trim and describe. */
static int snapshot_collect_view(const struct snapshot_source *src, struct session *s,
				 struct profile *p, bool peak)
{
	memset(p, 0, sizeof(*p));
	src->settle(src->arg, s);
	/* The process is gone but its EOF not handled yet (packets may still be queued on its
	 * connection): wait for the final drain rather than miss its last rings. */
	if (session_is_live(s) && !session_process_alive(s))
		session_wait_exited(s, SNAPSHOT_EXIT_WAIT_MS);
	drain_session(s);
	drain_refresh_maps(s, false);

	struct snapshot_cut_info ci;
	pthread_mutex_lock(&s->snapshot_lock);
	int rc = snapshot_cut(s, p, &ci);
	if (!rc && peak)
		rc = peak_copy(s, p);
	pthread_mutex_unlock(&s->snapshot_lock);

	if (!rc) {
		unsigned rd = procmaps_read_begin(s->maps);
		rc = src->trim(src->arg, p, s->maps);
		procmaps_read_end(s->maps, rd);
	}
	if (rc) {
		profile_release(p);
		return rc;
	}
	p->meta.pid = s->pid;
	memcpy(p->meta.comm, s->comm, sizeof(p->meta.comm));
	if (!peak) /* (a peak profile's time is its capture's) */
		p->meta.time_nanos = session_now_ns(CLOCK_REALTIME);
	p->meta.rate = session_rate(s);
	/* Sampling is off now: state the rate the samples were taken at. */
	if (p->meta.rate == 0)
		p->meta.rate = ci.last_rate ? ci.last_rate : LLGO_RATE_DEFAULT;
	p->meta.mixed_rates = ci.mixed || profile_mixed_rates(p);
	p->meta.sampled = ci.cnt.sampled;
	p->meta.delivered = ci.cnt.delivered;
	p->meta.dropped = ci.cnt.dropped;
	p->meta.corrupt = ci.cnt.corrupt;
	p->meta.dropped_prior = ci.cnt.prior;
	p->meta.dropped_no_ring = ci.cnt.no_ring;
	p->meta.dropped_detached = ci.cnt.detached;
	p->meta.reconnects = ci.cnt.reconnects;
	p->meta.cap_hits = ci.bs.cap_hits;
	p->meta.verify_samples = atomic_load(&s->verify_samples);
	p->meta.verify_agree = atomic_load(&s->verify_agree);
	p->meta.unwind_mode = __atomic_load_n(&s->unwind_mode, __ATOMIC_RELAXED); /* a join sets it */
	return 0;
}

int snapshot_collect(const struct snapshot_source *src, struct session *s, struct profile *p)
{
	return snapshot_collect_view(src, s, p, false);
}

int snapshot_collect_peak(const struct snapshot_source *src, struct session *s,
			  struct profile *p)
{
	return snapshot_collect_view(src, s, p, true);
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

int snapshot_take(const struct snapshot_source *src, pid_t pid, uid_t requester, int fmt,
		  uint32_t flags, uint32_t top_n, struct buf *out, char *err, size_t errlen)
{
	if (fmt < LLGO_FORMAT_PPROF || fmt > LLGO_FORMAT_SITES) {
		snprintf(err, errlen, "unknown format %d", fmt);
		return -EINVAL;
	}
	struct session *s = src->lookup(src->arg, pid);
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
	int rc = snapshot_collect_view(src, s, &p, flags & LLGO_SNAP_PEAK);
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
