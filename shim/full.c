// SPDX-License-Identifier: MIT
/*
 * full.c: what a sampling thread does when its ring has no room for a record.
 *
 * Policy (LLGO_HEAP_FULL, read once): `drop` drops and counts (the ring's dropped counter),
 * `wait` waits for the daemon to drain; unset, records taken at rate 1 wait (users of rate 1
 * expect exact counts, as heaptrack gives) and records taken at a sampled rate drop (a sample
 * lost is a sample, the estimate stays unbiased), except until the daemon serves the process
 * fully (full_daemon_serving): then they wait too, bounded as below.
 *
 * Waiting: the thread sends WAKE, raises the ring's `waiting` word, fences, and sleeps with
 * FUTEX_WAIT on the low 32 bits of tail (shared futex: the ring is a MAP_SHARED memfd), in
 * slices of FULL_SLICE_MS; the daemon, after it publishes a new tail, fences, sees `waiting`
 * and wakes the futex (agent/ingest/ring.c). No spinning. Bounded: if tail does not move for
 * FULL_BOUND_MS while the daemon shows no sign of work (stopped, gone or hung: it neither runs
 * nor uses CPU; a working one is given up to FULL_ACTIVE_MAX_MS), the thread gives up, drops, and
 * remembers that tail: later records of this thread drop at once until the daemon has moved
 * tail again. A stopped daemon thus costs each allocating thread one pause of FULL_BOUND_MS,
 * never a hang. Without a connection nothing waits.
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define FULL_SLICE_MS 10
#define FULL_BOUND_MS 500
#define FULL_ACTIVE_MAX_MS 10000

enum { FULL_UNSET = 0, FULL_DEFAULT = 1, FULL_WAIT = 2, FULL_DROP = 3 };

static _Atomic int full_policy;

static int full_get_policy(void)
{
	int p = atomic_load_explicit(&full_policy, memory_order_relaxed);
	if (llgo_likely(p != FULL_UNSET))
		return p;
	const char *e = getenv("LLGO_HEAP_FULL");
	p = FULL_DEFAULT;
	if (e && strcmp(e, "wait") == 0)
		p = FULL_WAIT;
	else if (e && strcmp(e, "drop") == 0)
		p = FULL_DROP;
	atomic_store_explicit(&full_policy, p, memory_order_relaxed);
	return p;
}


static int64_t full_now_ms(void)
{
	return (int64_t)(attach_now_ns() / 1000000u);
}

/* Whether the daemon serves this process fully: it has read our maps (daemon_beat) and, in
 * auto unwinding, sent the tables that spare most samples their stack copy (fp_seq). Before,
 * a burst fills the ring with what the daemon cannot drain yet, or only slowly. */
bool full_waits(uint64_t rate)
{
	int p = full_get_policy();
	return p == FULL_WAIT || (p == FULL_DEFAULT && rate == 1);
}

bool full_daemon_serving(void)
{
	if (!atomic_load_explicit(&attach_ctl.daemon_beat, memory_order_relaxed))
		return false;
	return stackcopy_get_mode() != LLGO_UNWIND_AUTO ||
	       atomic_load_explicit(&attach_ctl.fp_seq, memory_order_relaxed) != 0;
}

void full_block(struct llgo_heap_thread *t, const struct emit_ring *r, uint32_t len,
		uint64_t rate, uint64_t tail)
{
	struct llgo_ring_header *h = r->hdr;
	int p = full_get_policy();
	/* Sampled rates drop by default, except before the daemon has started serving this
	 * process (it reads our maps before it drains us; the process does not wait for that at
	 * start): a burst at start would otherwise lose what a later one keeps. */
	if (p == FULL_DROP || (p == FULL_DEFAULT && rate != 1 && full_daemon_serving()) ||
	    link_state() != LLGO_SHIM_ATTACHED)
		return;
	if (t->full_stall == tail + 1)
		return; /* gave up at this tail already: drop until the daemon moves it */
	t->full_stall = 0;
	link_wake();
	int64_t last_move = full_now_ms(), first_wait = last_move;
	uint64_t seen = tail;
	for (;;) {
		atomic_store_explicit(&h->waiting, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		tail = atomic_load_explicit(&h->tail, memory_order_acquire);
		if (full_has_room(r, tail, len))
			break;
		if (tail != seen) {
			seen = tail;
			last_move = full_now_ms();
		}
		int64_t left = FULL_BOUND_MS - (full_now_ms() - last_move);
		/* A daemon that is at work but has not moved our tail (busy on a loaded machine,
		 * sanitized, or reading every object's unwind tables before it serves us) is
		 * waited for, up to FULL_ACTIVE_MAX_MS in all: it is not stopped. */
		if (left <= 0 && full_now_ms() - first_wait < FULL_ACTIVE_MAX_MS &&
		    link_daemon_active()) {
			last_move = full_now_ms();
			left = FULL_SLICE_MS;
		}
		if (left <= 0) {
			t->full_stall = tail + 1;
			break;
		}
		struct timespec ts = { 0, (long)(left < FULL_SLICE_MS ? left : FULL_SLICE_MS) *
						  1000000L };
		/* Sleeps only while tail's low word is still what we read: a drain between the
		 * load and here makes it return at once. */
		syscall(SYS_futex, (void *)&h->tail, FUTEX_WAIT, (uint32_t)tail, &ts, NULL, 0);
	}
	atomic_store_explicit(&h->waiting, 0, memory_order_relaxed);
}
