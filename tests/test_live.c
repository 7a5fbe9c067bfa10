// SPDX-License-Identifier: MIT
/*
 * test_live.c: the live-object table of shim/live.c (shared/live.h) in process: insert,
 * remove, address reuse, levels, a full table counted as untracked, and the daemon's view of
 * it (agent/inuse.c through a session-less scan is covered end to end in test_inuse.c).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>

#include "../shim/internal.h"

/* Addresses whose home slot is the same in every level: equal top 23 bits of the hash. */
static uint64_t live_colliding(uint64_t i)
{
	const uint64_t k = 0x9e3779b97f4a7c15ULL;
	uint64_t inv = k; /* Newton's iteration for k^-1 mod 2^64 */
	for (int j = 0; j < 6; j++)
		inv *= 2 - k * inv;
	for (uint64_t low = i * 64;; low++) {
		uint64_t h = (0x2aaaaaull << 41) | (low & ((1ull << 41) - 1));
		uint64_t x = h * inv;
		if (x >> 44 == 0 && x) /* a plausible user address, 16-aligned */
			return x << 4;
	}
}

Test(live, insert_remove_reuse)
{
	uint64_t base = 0x7f0000001000ull;
	for (uint64_t i = 0; i < 1000; i++)
		live_track(-1, base + 16 * i, 1000 + i, LLGO_LIVE_REF(3, i + 1), 16, 0);
	const struct llgo_live_header *h = live_table();
	cr_assert(h != NULL);
	cr_expect_eq(h->magic, LLGO_LIVE_MAGIC);
	struct llgo_live_entry e;
	for (uint64_t i = 0; i < 1000; i += 2) {
		cr_assert(live_remove(base + 16 * i, &e), "entry %lu lost", (unsigned long)i);
		cr_expect_eq(e.key, 1000 + i);
		cr_expect_eq(e.ref, LLGO_LIVE_REF(3, i + 1));
		cr_expect(!live_remove(base + 16 * i, NULL), "removed twice");
	}
	/* Reuse: a freed address comes back as another object. */
	live_track(-1, base, 77, LLGO_LIVE_REF(4, 9), 32, 0);
	cr_assert(live_remove(base, &e));
	cr_expect_eq(e.key, 77);
	cr_expect_eq(LLGO_LIVE_SIZE(e.size), 32);
	cr_expect_eq(LLGO_LIVE_OFF(e.size), 0);
	for (uint64_t i = 1; i < 1000; i += 2)
		cr_expect(live_remove(base + 16 * i, NULL), "entry %lu lost", (unsigned long)i);
	cr_expect(!live_remove(0x1234560, NULL));
	cr_expect(!live_remove(0, NULL));
	cr_expect_eq(atomic_load(&h->untracked), 0);
}

/* One address's probe windows hold LLGO_LIVE_PROBE entries per level: colliding inserts go
 * up level by level, stay findable, and past the last level are counted untracked. */
Test(live, levels_and_full)
{
	const uint32_t per_table = LLGO_LIVE_PROBE * LLGO_LIVE_LEVELS;
	uint64_t *a = calloc(per_table + 5, sizeof(*a));
	for (uint32_t i = 0; i < per_table + 5; i++) {
		a[i] = live_colliding(i);
		for (uint32_t k = 0; k < LLGO_LIVE_LEVELS; k++)
			cr_assert_eq(llgo_live_home(a[i], k), llgo_live_home(a[0], k));
	}
	for (uint32_t i = 0; i < per_table + 5; i++)
		live_track(-1, a[i], i, LLGO_LIVE_REF(1, i + 1), 100, 0);
	const struct llgo_live_header *h = live_table();
	cr_expect_eq(atomic_load(&h->top), LLGO_LIVE_LEVELS - 1);
	cr_expect_eq(atomic_load(&h->untracked), 5);
	cr_expect_eq(atomic_load(&h->untracked_bytes), 500);
	for (uint32_t i = 0; i < per_table; i++)
		cr_expect(live_remove(a[i], NULL), "entry %u lost", i);
	for (uint32_t i = per_table; i < per_table + 5; i++)
		cr_expect(!live_remove(a[i], NULL), "untracked entry %u found", i);
	/* Tombstones are reused: the table takes them all again. */
	for (uint32_t i = 0; i < per_table; i++)
		live_track(-1, a[i], i, LLGO_LIVE_REF(1, i + 1), 100, 0);
	cr_expect_eq(atomic_load(&h->untracked), 5);
	free(a);
}

/* Objects inserted by some threads and removed by others, concurrently. */
#define LIVE_T 8
#define LIVE_N 20000

static _Atomic uint64_t live_slots[LIVE_T][LIVE_N];

static void *live_worker(void *arg)
{
	uintptr_t t = (uintptr_t)arg;
	uint64_t base = 0x600000000000ull + t * 0x10000000ull;
	for (uint64_t i = 0; i < LIVE_N; i++) {
		live_track(-1, base + 16 * i, i, LLGO_LIVE_REF(t, i + 1), 16, 0);
		atomic_store(&live_slots[t][i], base + 16 * i);
	}
	/* free the previous thread's objects */
	uintptr_t o = (t + 1) % LIVE_T;
	for (uint64_t i = 0; i < LIVE_N; i++) {
		uint64_t a;
		while (!(a = atomic_load(&live_slots[o][i])))
			sched_yield();
		if (!live_remove(a, NULL))
			return (void *)1;
	}
	return NULL;
}

Test(live, cross_thread_frees)
{
	pthread_t th[LIVE_T];
	for (uintptr_t t = 0; t < LIVE_T; t++)
		pthread_create(&th[t], NULL, live_worker, (void *)t);
	for (int t = 0; t < LIVE_T; t++) {
		void *r;
		pthread_join(th[t], &r);
		cr_expect(r == NULL, "thread %d missed an entry", t);
	}
	const struct llgo_live_header *h = live_table();
	cr_expect_eq(atomic_load(&h->untracked), 0);
}
