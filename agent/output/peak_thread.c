// SPDX-License-Identifier: MIT
/*
 * peak_thread.c: the thread that makes the peak view's background scans (peak.c): the drain
 * asks for one by setting a session's peak_want at a pass (peak_pass_locked) and waking this
 * thread (the waker server.c gave it, drain_on_peak); the thread scans those sessions one at
 * a time with the snapshot's cut (snapshot_cut, which peak.c's cut, rebase and keep follow),
 * never waiting for a snapshot (trylock: the drain asks again at its next pass).
 *
 * Left to others: when a scan is due and what is kept (peak.c), the cut (snapshot.c), its
 * start and stop beside the drain thread (server.c).
 */
#include <stdlib.h>

#include "../ingest/wthread.h"
#include "snapshot.h"

#define PEAK_THREAD_IDLE_WAIT_NS 1000000000ull

struct peak_thread {
	struct session_registry *reg;
	struct wthread w;
};

/* One background scan of s, unless a snapshot holds it (the drain asks again). */
static void peak_thread_scan(struct session *s)
{
	if (pthread_mutex_trylock(&s->snapshot_lock) != 0)
		return;
	if (atomic_load_explicit(&s->peak_want, memory_order_relaxed) && session_is_live(s)) {
		struct profile p;
		struct snapshot_cut_info ci;
		snapshot_cut(s, &p, &ci);
		profile_release(&p);
	}
	pthread_mutex_unlock(&s->snapshot_lock);
}

static void *peak_thread_main(void *arg)
{
	struct peak_thread *t = arg;
	while (wthread_sleep(&t->w, PEAK_THREAD_IDLE_WAIT_NS) >= 0) {
		struct session **v;
		size_t n = session_list(t->reg, true, &v);
		for (size_t i = 0; i < n; i++)
			if (atomic_load_explicit(&v[i]->peak_want, memory_order_relaxed))
				peak_thread_scan(v[i]);
		session_list_release(v, n);
	}
	return NULL;
}

struct peak_thread *peak_thread_new(struct session_registry *reg)
{
	struct peak_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->reg = reg;
	wthread_init(&t->w);
	return t;
}

int peak_thread_start(struct peak_thread *t)
{
	return wthread_start(&t->w, peak_thread_main, t, "heapd-peak");
}

void peak_thread_wake(void *thread)
{
	struct peak_thread *t = thread;
	if (t)
		wthread_wake(&t->w);
}

void peak_thread_stop(struct peak_thread *t)
{
	if (t)
		wthread_stop(&t->w);
}

void peak_thread_free(struct peak_thread *t)
{
	if (!t)
		return;
	wthread_destroy(&t->w);
	free(t);
}
