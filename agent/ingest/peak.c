// SPDX-License-Identifier: MIT
/*
 * peak.c: the peak view: the highest sampled in-use total of a process and which sites held
 * it then (`llgo-heap top PID --peak`, `snapshot PID --peak`, /debug/pprof/heap?peak=1), like
 * tcmalloc's peak heap profile and heaptrack's peak consumers.
 *
 * The daemon sees allocations as it drains their records, but no frees: a free only changes
 * the shim's live-object table, which a scan reads (inuse.c). So the in-use total is known at
 * scans, and in between it is bounded: the total the last scan found (peak_base) plus what
 * the records drained since can add (peak_since: size + rate per sample, at least its scaled
 * bytes, Go's size / (1 - exp(-size/rate))). The drain keeps that bound (peak_pass_locked:
 * one add per record, a few tests per pass) and asks the peak thread for a scan when
 *   - grow:   the bound passed the kept total by more than 1/PEAK_MARGIN, or
 *   - settle: a pass found no record of the process (it paused), some came since the last
 *             scan, the bound is above the kept total, and PEAK_SETTLE_NS passed since then;
 * and never before peak_next_ns: seven times the last scan's CPU time after it (a session
 * takes at most an eighth of a core for its scans), and after a scan that found no new peak a gap
 * doubling from PEAK_GAP_MIN_NS to PEAK_GAP_MAX_NS (a plateau with churn, where the bound
 * keeps rising over a total that does not, costs at most a scan a second). A scan is the
 * snapshot's cut and in-use scan (snapshot_cut, under the session's snapshot lock): every
 * snapshot is one too. The scan with the highest total is kept (peak_keep): the buckets with
 * objects in use then, their values, and the moment. The process's exit is a candidate too
 * (its frozen in-use values, peak_exit_locked), and a request for the peak view scans first.
 *
 * What the view states: the in-use values of the scan with the highest total, and that total
 * and moment; the true sampled peak lies between that total and peak_bound (the highest the
 * bound reached: allocations the daemon saw but no scan followed before frees it could not
 * see), outside the scans' own duration (an object freed while the scan runs is not
 * counted). A program that holds its peak for PEAK_SETTLE_NS plus a drain poll gets it
 * exactly (at rate 1, byte for byte); one that grows gets a scan each 1/32 of growth, so the
 * kept total is within about 1/32 of the highest it reached before it freed, unless the duty
 * limit above delayed the scans. Scans made: at most about log(peak/first)/log(33/32) for
 * growth, plus one settle scan per pause (at most one per PEAK_SETTLE_NS), plus the wasted
 * ones of a plateau (at most one per PEAK_GAP_MAX_NS).
 *
 * Memory: the capture holds one psample per bucket with objects in use (at most the table's
 * buckets, 56 bytes each), charged to the uid's bucket memory (session_charge_buckets); a
 * session whose uid is over that budget asks for no scans. Time: the peak thread scans one
 * session at a time, never waiting for a snapshot (trylock: the drain asks again at its next
 * pass); a user's sessions can delay other users' peak scans, never their drains or snapshots.
 *
 * Left to others: the thread that makes the scans (peak_thread.c), the comment line every
 * format carries for a peak profile (profile_peak_line), the cut and scan (snapshot.c,
 * inuse.c), the writers' sample types (pprof.c, top.c, text.c, folded.c), the budget
 * (session.c: the drain charges the capture after peak_exit_locked).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "session.h"

#define PEAK_MARGIN 32u
#define PEAK_SETTLE_NS 100000000ull  /* 100 ms */
#define PEAK_GAP_MIN_NS 10000000ull  /* 10 ms */
#define PEAK_GAP_MAX_NS 1000000000ull /* 1 s */
#define PEAK_DUTY 7u                 /* a scan waits this many times its duration */
static uint64_t peak_sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

bool peak_pass_locked(struct session *s, size_t records)
{
	uint64_t bound = peak_sat_add(s->peak_base, s->peak_since);
	if (bound > s->peak_bound)
		s->peak_bound = bound;
	if (s->peak_since == 0 || atomic_load_explicit(&s->peak_want, memory_order_relaxed))
		return false;
	uint64_t best = atomic_load_explicit(&s->peak_best, memory_order_relaxed);
	bool grow = bound > peak_sat_add(best, best / PEAK_MARGIN);
	bool settle = records == 0 && bound > best;
	if (!grow && !settle)
		return false;
	if (atomic_load_explicit(&s->buckets_over, memory_order_relaxed))
		return false;
	uint64_t now = session_now_ns(CLOCK_MONOTONIC);
	if (now < atomic_load_explicit(&s->peak_next_ns, memory_order_relaxed))
		return false;
	if (!grow && now - s->peak_last_ns < PEAK_SETTLE_NS)
		return false;
	atomic_store_explicit(&s->peak_want, true, memory_order_relaxed);
	return true;
}

void peak_cut_locked(struct session *s, struct peak_cut *c)
{
	memset(c, 0, sizeof(*c));
	/* records drained from here on are after the cut: the next bound's since */
	c->since = s->peak_since;
	s->peak_since = 0;
	c->real_ns = session_now_ns(CLOCK_REALTIME);
	c->mono_ns = session_now_ns(CLOCK_MONOTONIC);
	c->cpu_ns = session_now_ns(CLOCK_THREAD_CPUTIME_ID);
}

/* p's in-use values summed, scaled as the writers scale them. */
static void peak_totals(const struct profile *p, uint64_t *bytes, uint64_t *objects)
{
	uint64_t b = 0, o = 0;
	for (size_t i = 0; i < p->nsamples; i++) {
		struct profile_values v;
		profile_sample_scaled(&p->samples[i], &v);
		if (v.inuse_objects > 0 && v.inuse_bytes > 0) {
			b = peak_sat_add(b, (uint64_t)v.inuse_bytes);
			o = peak_sat_add(o, (uint64_t)v.inuse_objects);
		}
	}
	*bytes = b;
	*objects = o;
}

bool peak_rebase_locked(struct session *s, struct peak_cut *c, const struct profile *p)
{
	uint64_t now = session_now_ns(CLOCK_MONOTONIC);
	atomic_store_explicit(&s->peak_want, false, memory_order_relaxed);
	if (!p) {
		/* no total: the bound keeps what it had (the cut's since back) */
		s->peak_base = peak_sat_add(s->peak_base, c->since);
		return false;
	}
	peak_totals(p, &c->bytes, &c->objects);
	s->peak_base = c->bytes;
	if (c->bytes > s->peak_bound)
		s->peak_bound = c->bytes;
	/* caller holds snapshot_lock, under which alone s->peak changes */
	bool highest = !s->peak || c->bytes > s->peak->total_bytes;
	if (highest)
		s->peak_gap_ns = 0;
	else
		s->peak_gap_ns = s->peak_gap_ns ? s->peak_gap_ns * 2 : PEAK_GAP_MIN_NS;
	if (s->peak_gap_ns > PEAK_GAP_MAX_NS)
		s->peak_gap_ns = PEAK_GAP_MAX_NS;
	/* the scan's cost is the CPU time of the thread that made it (cut to here): waits
	 * for the drain lock and a busy machine's queue cost nobody */
	uint64_t cpu = session_now_ns(CLOCK_THREAD_CPUTIME_ID) - c->cpu_ns;
	uint64_t wait = cpu * PEAK_DUTY;
	if (wait < s->peak_gap_ns)
		wait = s->peak_gap_ns;
	atomic_store_explicit(&s->peak_next_ns, now + wait, memory_order_relaxed);
	s->peak_last_ns = now;
	s->peak_scans++;
	log_debug("peak: pid %d scan %llu: %llu bytes in use (%s), %.3f ms, %.3f ms of CPU",
		  (int)s->pid, (unsigned long long)s->peak_scans, (unsigned long long)c->bytes,
		  highest ? "highest" : "not higher", (double)(now - c->mono_ns) / 1e6,
		  (double)cpu / 1e6);
	return highest;
}

/* A capture of p's buckets with objects in use (alloc_* = in use, free_* = 0). */
static struct peak_capture *peak_capture_of(const struct profile *p, uint64_t bytes,
					    uint64_t objects, uint64_t real_ns, uint64_t mono_ns)
{
	size_t n = 0;
	for (size_t i = 0; i < p->nsamples; i++)
		n += p->samples[i].alloc_objects > p->samples[i].free_objects;
	struct peak_capture *c = malloc(sizeof(*c) + n * sizeof(c->v[0]));
	if (!c)
		return NULL;
	memset(c, 0, sizeof(*c));
	c->total_bytes = bytes;
	c->total_objects = objects;
	c->time_ns = real_ns;
	c->mono_ns = mono_ns;
	c->inuse_state = (uint64_t)p->meta.inuse;
	c->counts = p->meta.inuse_counts;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct psample *ps = &p->samples[i];
		if (ps->alloc_objects <= ps->free_objects)
			continue;
		struct psample *d = &c->v[c->n++];
		*d = *ps;
		d->alloc_objects = ps->alloc_objects - ps->free_objects;
		d->alloc_bytes = ps->alloc_bytes > ps->free_bytes ? ps->alloc_bytes - ps->free_bytes
								   : 0;
		d->free_objects = d->free_bytes = 0;
	}
	return c;
}

static void peak_install(struct session *s, struct peak_capture *c)
{
	free(s->peak);
	s->peak = c;
	atomic_store_explicit(&s->peak_best, c->total_bytes, memory_order_relaxed);
	atomic_store_explicit(&s->peak_mem, sizeof(*c) + c->n * sizeof(c->v[0]),
			      memory_order_relaxed);
}

void peak_keep(struct session *s, const struct peak_cut *c, const struct profile *p)
{
	struct peak_capture *k = peak_capture_of(p, c->bytes, c->objects, c->real_ns, c->mono_ns);
	if (k)
		peak_install(s, k);
}

void peak_exit_locked(struct session *s)
{
	/* Nothing writes the buckets any more (the final drain is done, the table frozen into
	 * their free counters): the values now are those at exit. */
	struct profile p;
	memset(&p, 0, sizeof(p));
	if (profile_collect(&p, s->buckets) != 0)
		return;
	p.meta.inuse = PROFILE_INUSE_UNTRACKED;
	pthread_mutex_lock(&s->lock);
	if (s->live_state == SESSION_LIVE_FROZEN) {
		p.meta.inuse = PROFILE_INUSE_TRACKED;
		p.meta.inuse_counts = s->live_frozen;
	}
	pthread_mutex_unlock(&s->lock);
	struct peak_cut c;
	peak_cut_locked(s, &c);
	if (peak_rebase_locked(s, &c, &p)) {
		struct peak_capture *k =
			peak_capture_of(&p, c.bytes, c.objects, c.real_ns, c.mono_ns);
		if (k) {
			k->at_exit = true;
			peak_install(s, k);
		}
	}
	profile_release(&p);
}

int peak_copy(struct session *s, struct profile *p)
{
	const struct peak_capture *c = s->peak;
	free(p->samples);
	p->samples = NULL;
	p->nsamples = 0;
	if (c && c->n) {
		p->samples = malloc(c->n * sizeof(c->v[0]));
		if (!p->samples)
			return -ENOMEM;
		memcpy(p->samples, c->v, c->n * sizeof(c->v[0]));
		p->nsamples = c->n;
	}
	struct profile_peak *m = &p->meta.peak;
	m->on = true;
	m->scans = s->peak_scans;
	pthread_mutex_lock(&s->drain_lock);
	m->bound = s->peak_bound;
	pthread_mutex_unlock(&s->drain_lock);
	if (!c)
		return 0; /* (the cut just made failed to keep one: out of memory) */
	m->at_exit = c->at_exit;
	m->bytes = c->total_bytes;
	m->objects = c->total_objects;
	if (m->bound < m->bytes)
		m->bound = m->bytes;
	m->after_ns = c->time_ns > s->attach_ns ? c->time_ns - s->attach_ns : 0;
	p->meta.time_nanos = c->time_ns;
	p->meta.inuse = (int)c->inuse_state;
	p->meta.inuse_counts = c->counts;
	return 0;
}

uint64_t peak_bytes(struct session *s)
{
	return atomic_load_explicit(&s->peak_mem, memory_order_relaxed);
}

void peak_release(struct session *s)
{
	free(s->peak);
	s->peak = NULL;
	atomic_store_explicit(&s->peak_mem, 0, memory_order_relaxed);
}
