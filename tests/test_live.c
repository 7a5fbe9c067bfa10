// SPDX-License-Identifier: MIT
/*
 * test_live.c: the live-object table (shared/live.h). The shim's side (shim/live.c) in
 * process: insert, remove, address reuse, levels, a full table counted as untracked, frees
 * from other threads. The daemon's side (agent/inuse.c) on a session with a ring: in-use
 * values per bucket from the table, pending, unmatched and forked entries, hostile
 * descriptors and header, the freeze at exit. End to end: test_inuse.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../agent/ingest/drain.h"
#include "../shim/internal.h"
#include "helpers.h"

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

/* ---- the daemon's side (agent/inuse.c) --------------------------------------------------- */

static int live_sealed_memfd(size_t size, bool seal)
{
	int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	if (seal)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	return fd;
}

static struct session *live_session(struct session_registry *reg, struct emit_ring *ring)
{
	struct session *s = session_new(reg, getpid(), getuid(), getgid(), "test",
					LLGO_RING_MIN_DATA);
	cr_assert(s);
	int cfd = live_sealed_memfd(LLGO_CTL_SIZE, true);
	struct llgo_ctl *ctl = th_ctl_page(cfd, -1);
	cr_assert_not_null(ctl);
	cr_assert_eq(session_attach_ctl(s, cfd), 0);
	close(cfd);
	munmap(ctl, LLGO_CTL_SIZE);
	session_register(s);
	size_t len = LLGO_RING_HEADER_SIZE + LLGO_RING_MIN_DATA;
	int rfd = live_sealed_memfd(len, true);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(emit_ring_format(ring, p, len, LLGO_RING_MIN_DATA, 0, 0), 0);
	cr_assert_eq(session_add_ring(s, 0, rfd, LLGO_RING_MIN_DATA), 0);
	close(rfd);
	return s;
}

static void live_put(struct llgo_live_header *h, uint64_t slot, uint64_t addr, uint64_t key,
		     uint64_t ref)
{
	struct llgo_live_entry *e = (struct llgo_live_entry *)(void *)((unsigned char *)h +
								       LLGO_LIVE_HEADER_SIZE);
	e[slot].key = key;
	e[slot].ref = ref;
	e[slot].size = 0;
	atomic_store(&e[slot].addr, addr);
}

/* A live-object table for the daemon (magic, version, top) in a new sealed memfd *fd. */
static struct llgo_live_header *live_new_table(int *fd, uint32_t top)
{
	*fd = live_sealed_memfd(LLGO_LIVE_MAP_SIZE, true);
	struct llgo_live_header *h = mmap(NULL, LLGO_LIVE_MAP_SIZE, PROT_READ | PROT_WRITE,
					  MAP_SHARED | MAP_NORESERVE, *fd, 0);
	cr_assert_neq(h, MAP_FAILED);
	h->magic = LLGO_LIVE_MAGIC;
	h->version = LLGO_LIVE_VERSION;
	atomic_store(&h->top, top);
	return h;
}

static const struct psample *live_sample(const struct profile *p, uint64_t size)
{
	for (size_t i = 0; i < p->nsamples; i++)
		if (p->samples[i].size == size)
			return &p->samples[i];
	return NULL;
}

/* Records drained, a table mapped: in use = live entries per bucket; entries whose record is
 * not drained yet are pending, unknown keys unmatched, a fork child's copies skipped, torn or
 * busy slots ignored; at exit the table is frozen into the buckets. */
Test(live, daemon_counts_live_entries)
{
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct emit_ring ring;
	struct session *s = live_session(reg, &ring);
	uint64_t fa[3] = { 0x401000, 0x402000, 0x403000 }, fb[2] = { 0x404000, 0x405000 };
	for (int i = 0; i < 3; i++)
		cr_assert(emit_push_alloc(&ring, 100, 1, 0x10000 + 16 * i, 0, fa, 3)); /* seq 1..3 */
	cr_assert(emit_push_alloc(&ring, 200, 1, 0x20000, 0, fb, 2));                /* seq 4 */
	drain_session(s);

	int fd;
	struct llgo_live_header *h = live_new_table(&fd, 1000); /* top hostile: clamped */
	atomic_store(&h->untracked, 7);
	uint64_t ka = llgo_live_key(fa, 3, 100, 1), kb = llgo_live_key(fb, 2, 200, 1);
	live_put(h, 0, 0x10000, ka, LLGO_LIVE_REF(0, 1));
	live_put(h, 5, 0x10010, ka, LLGO_LIVE_REF(0, 2));
	live_put(h, 9, 0x20000, kb, LLGO_LIVE_REF(0, 4));
	live_put(h, 17, 0x30000, kb, LLGO_LIVE_REF(0, 99));            /* not drained: pending */
	live_put(h, 18, 0x30010, kb, LLGO_LIVE_REF(5, 1));             /* unknown ring: pending */
	live_put(h, 20, 0x40000, 12345, LLGO_LIVE_REF(0, 3));          /* unmatched */
	live_put(h, 30, 0x50000, ka, LLGO_LIVE_REF(LLGO_LIVE_RING_NONE, 0)); /* fork copy */
	live_put(h, 31, LLGO_LIVE_BUSY, ka, LLGO_LIVE_REF(0, 1));      /* being written */
	live_put(h, 32, LLGO_LIVE_TOMB, ka, LLGO_LIVE_REF(0, 1));      /* freed */
	live_put(h, LLGO_LIVE_ENTRIES - 1, 0x60000, ka, LLGO_LIVE_REF(0, 2)); /* last slot */

	/* hostile descriptors first */
	int unsealed = live_sealed_memfd(LLGO_LIVE_MAP_SIZE, false);
	int fcntl_rc = fcntl(unsealed, F_ADD_SEALS, F_SEAL_SEAL); /* cannot be sealed later */
	cr_assert_eq(fcntl_rc, 0);
	cr_expect_eq(inuse_map(s, unsealed), -EPERM);
	close(unsealed);
	int small = live_sealed_memfd(4096, true);
	cr_expect_eq(inuse_map(s, small), -EINVAL);
	close(small);
	cr_assert_eq(inuse_map(s, fd), 0);
	/* the same table again (a reconnect, or a daemon that took the process back and then
	 * hears from it): accepted, nothing changes; another table: refused */
	cr_expect_eq(inuse_map(s, fd), 0, "the same table again");
	int other;
	struct llgo_live_header *oh = live_new_table(&other, 0);
	cr_expect_eq(inuse_map(s, other), -EEXIST, "a second table");
	munmap(oh, LLGO_LIVE_MAP_SIZE);
	close(other);

	struct profile p;
	memset(&p, 0, sizeof(p)); /* as server_collect does: collect fills samples, not meta */
	pthread_mutex_lock(&s->drain_lock);
	cr_assert_eq(profile_collect(&p, s->buckets), 0);
	cr_assert_eq(inuse_apply_locked(s, &p), 0);
	pthread_mutex_unlock(&s->drain_lock);
	const struct psample *a = live_sample(&p, 100), *b = live_sample(&p, 200);
	cr_assert(a && b);
	cr_expect_eq(a->alloc_objects, 3);
	cr_expect_eq(a->alloc_objects - a->free_objects, 3, "A: 3 live (one in the last slot)");
	cr_expect_eq(a->alloc_bytes - a->free_bytes, 300);
	cr_expect_eq(b->alloc_objects - b->free_objects, 1);
	cr_expect_eq(p.meta.inuse, PROFILE_INUSE_TRACKED);
	cr_expect_eq(p.meta.inuse_counts.pending, 2);
	cr_expect_eq(p.meta.inuse_counts.unmatched, 1);
	cr_expect_eq(p.meta.inuse_counts.untracked, 7);
	profile_release(&p);
	/* The scan (top forged to the last level) allocated none of the file's holes. */
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	cr_expect_lt((long long)st.st_blocks * 512, 1ll << 20, "the table file grew to %lld bytes",
		     (long long)st.st_blocks * 512);

	/* The program frees one A object and exits: the table is frozen into the buckets. */
	live_put(h, 0, LLGO_LIVE_TOMB, ka, 0);
	drain_session_exit(s);
	cr_expect(!session_is_live(s));
	memset(&p, 0, sizeof(p));
	pthread_mutex_lock(&s->drain_lock);
	cr_assert_eq(profile_collect(&p, s->buckets), 0);
	cr_assert_eq(inuse_apply_locked(s, &p), 0);
	pthread_mutex_unlock(&s->drain_lock);
	a = live_sample(&p, 100);
	cr_assert(a);
	cr_expect_eq(a->alloc_objects - a->free_objects, 2, "A at exit");
	cr_expect_eq(p.meta.inuse, PROFILE_INUSE_TRACKED);
	profile_release(&p);
	munmap(h, LLGO_LIVE_MAP_SIZE);
	close(fd);
	session_put(s);
	session_registry_free(reg);
}

/* The in-use values of s's profile now (its accounting line in acct, NUL-terminated). */
static void live_profile(struct session *s, struct profile *p, char *acct, size_t n)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&s->drain_lock);
	cr_assert_eq(profile_collect(p, s->buckets), 0);
	cr_assert_eq(inuse_apply_locked(s, p), 0);
	pthread_mutex_unlock(&s->drain_lock);
	struct buf b;
	buf_init(&b);
	profile_accounting(&b, p);
	snprintf(acct, n, "%.*s", (int)b.len, b.data ? (const char *)b.data : "");
	buf_free(&b);
}

/*
 * The shim publishes a record, then inserts its object's entry. A record whose bucket stack
 * is not the shim's (a stack copy the daemon unwound) is noted by reference; a scan between
 * the drain and the insert (a peak scan, a snapshot) must keep that note, or the object,
 * inserted a moment later, is unmatched from then on (otel::every_allocation_at_rate_1 saw
 * 4,680 bytes of in-use missing once). Notes of older records the scan does not find are
 * objects freed: pruned.
 */
Test(live, newest_note_outlives_a_scan_before_its_insert)
{
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct emit_ring ring;
	struct session *s = live_session(reg, &ring);
	uint64_t fa[2] = { 0x401000, 0x402000 }, shim_key = 0x5eed;
	cr_assert(emit_push_alloc(&ring, 64, 1, 0x10000, 0, fa, 2)); /* seq 1 */
	drain_session(s);
	uint64_t ka = llgo_live_key(fa, 2, 64, 1);
	pthread_mutex_lock(&s->drain_lock);
	inuse_note_record_locked(s, 0, 1, shim_key, ka, false); /* as for an unwound copy */
	pthread_mutex_unlock(&s->drain_lock);
	int fd;
	struct llgo_live_header *h = live_new_table(&fd, 0);
	cr_assert_eq(inuse_map(s, fd), 0);

	struct profile p;
	char acct[512];
	live_profile(s, &p, acct, sizeof(acct)); /* the entry is not in yet */
	const struct psample *a = live_sample(&p, 64);
	cr_assert(a);
	cr_expect_eq(a->alloc_objects - a->free_objects, 0);
	profile_release(&p);
	live_put(h, 3, 0x10000, shim_key, LLGO_LIVE_REF(0, 1)); /* the insert, after the scan */
	live_profile(s, &p, acct, sizeof(acct));
	a = live_sample(&p, 64);
	cr_assert(a);
	cr_expect_eq(a->alloc_objects - a->free_objects, 1, "the object inserted after a scan: %s",
		     acct);
	cr_expect_eq(p.meta.inuse_counts.unmatched, 0, "%s", acct);
	profile_release(&p);

	/* freed, and a newer record drained: the note of seq 1 goes at the next scan */
	live_put(h, 3, LLGO_LIVE_TOMB, shim_key, 0);
	cr_assert(emit_push_alloc(&ring, 64, 1, 0x20000, 0, fa, 2)); /* seq 2 */
	drain_session(s);
	live_put(h, 4, 0x20000, ka, LLGO_LIVE_REF(0, 2));
	live_profile(s, &p, acct, sizeof(acct));
	profile_release(&p);
	live_put(h, 5, 0x30000, shim_key, LLGO_LIVE_REF(0, 1)); /* forged: seq 1 is gone */
	live_profile(s, &p, acct, sizeof(acct));
	a = live_sample(&p, 64);
	cr_assert(a);
	cr_expect_eq(a->alloc_objects - a->free_objects, 1, "%s", acct);
	cr_expect_eq(p.meta.inuse_counts.unmatched, 1, "%s", acct);
	profile_release(&p);
	munmap(h, LLGO_LIVE_MAP_SIZE);
	close(fd);
	session_put(s);
	session_registry_free(reg);
}

/*
 * A process with 3 samples and a table of 2 M full slots (top at the last level: the way
 * nobody's processes made every exit scan read 512 MiB): the scan, at a snapshot and at the
 * exit's freeze, reads at most what 3 samples justify (a base of 128 Ki slots and 16 per
 * sample), counted by the entries it classified (here all unmatched but the two live ones
 * at its start), and says how many slots it left unread.
 */
Test(live, scan_reads_what_the_samples_justify, .timeout = 120)
{
	const uint64_t full = 2ull << 20, budget = (128ull << 10) + 16 * 3;
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct emit_ring ring;
	struct session *s = live_session(reg, &ring);
	uint64_t fa[3] = { 0x401000, 0x402000, 0x403000 };
	for (int i = 0; i < 3; i++)
		cr_assert(emit_push_alloc(&ring, 100, 1, 0x10000 + 16 * i, 0, fa, 3)); /* seq 1..3 */
	drain_session(s);
	int fd;
	struct llgo_live_header *h = live_new_table(&fd, LLGO_LIVE_LEVELS - 1);
	uint64_t ka = llgo_live_key(fa, 3, 100, 1);
	live_put(h, 0, 0x10000, ka, LLGO_LIVE_REF(0, 1));
	live_put(h, 1, 0x10010, ka, LLGO_LIVE_REF(0, 2));
	for (uint64_t i = 2; i < full; i++)
		live_put(h, i, 0x20000000 + 16 * i, 0xbad0000 + i, LLGO_LIVE_REF(0, 3));
	cr_assert_eq(inuse_map(s, fd), 0);

	struct profile p;
	char acct[512];
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	live_profile(s, &p, acct, sizeof(acct));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	const struct psample *a = live_sample(&p, 100);
	cr_assert(a);
	cr_expect_eq(a->alloc_objects - a->free_objects, 2, "the live objects before the cut");
	cr_log_info("snapshot scan: %.1f ms; %s",
		    (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
		    acct);
	cr_expect_leq(p.meta.inuse_counts.unmatched, budget, "the snapshot read %llu entries",
		      (unsigned long long)p.meta.inuse_counts.unmatched);
	cr_expect_gt(p.meta.inuse_counts.unmatched, budget - 1024, "read %llu entries",
		     (unsigned long long)p.meta.inuse_counts.unmatched);
	cr_expect(strstr(acct, " unscanned=") != NULL, "not said: %s", acct);
	profile_release(&p);

	drain_session_exit(s); /* the freeze */
	cr_expect(!session_is_live(s));
	live_profile(s, &p, acct, sizeof(acct));
	cr_log_info("frozen: %s", acct);
	cr_expect_leq(p.meta.inuse_counts.unmatched, budget, "the freeze read %llu entries",
		      (unsigned long long)p.meta.inuse_counts.unmatched);
	cr_expect(strstr(acct, " unscanned=") != NULL, "not said: %s", acct);
	a = live_sample(&p, 100);
	cr_assert(a);
	cr_expect_eq(a->alloc_objects - a->free_objects, 2, "at exit");
	profile_release(&p);
	munmap(h, LLGO_LIVE_MAP_SIZE);
	close(fd);
	session_put(s);
	session_registry_free(reg);
}

static long live_rss_shmem_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "RssShmem: %ld", &v);
	if (f)
		fclose(f);
	return v;
}

/* Entries in the low levels, top raised high (as after a burst): removes probe every level
 * from the top down, and must not read (so allocate) the empty pages of the high levels. */
Test(live, lookups_do_not_fill_empty_levels)
{
	uint64_t base = 0x7e0000000000ull;
	for (uint64_t i = 0; i < 500; i++)
		live_track(-1, base + 4096 * i, i, LLGO_LIVE_REF(1, i + 1), 64, 0);
	struct llgo_live_header *h = (struct llgo_live_header *)live_table();
	cr_assert(h);
	atomic_store(&h->top, LLGO_LIVE_LEVELS - 1);
	long before = live_rss_shmem_kb();
	for (uint64_t i = 0; i < 500; i++)
		cr_expect(live_remove(base + 4096 * i, NULL), "entry %lu lost", (unsigned long)i);
	long after = live_rss_shmem_kb();
	cr_expect_lt(after - before, 256, "removes touched %ld KiB of empty table pages",
		     after - before);
}
