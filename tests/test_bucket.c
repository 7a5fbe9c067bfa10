// SPDX-License-Identifier: MIT
/*
 * test_bucket.c: the (stack, size, rate) table of agent/bucket.c: keys, interning, growth,
 * caps and the overflow bucket, and a stress test with many writers and a concurrent snapshot
 * walker (counts never go back, no half-built node is ever seen, final counts exact). The
 * stress test shrinks under ThreadSanitizer (LLGO_SAN contains "thread").
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../agent/internal.h"
#include "helpers.h"

/* Stack k: 1 + k % 16 frames, pcs derived from k so a reader can check a whole stack. */
#define STACK_BASE 0x400000ull
static uint32_t stack_of(uint32_t k, uint64_t *pcs)
{
	uint32_t n = 1 + k % 16;
	for (uint32_t j = 0; j < n; j++)
		pcs[j] = STACK_BASE + (uint64_t)k * 0x1000 + j * 8;
	return n;
}

static bool stack_valid(const struct stack *s, uint32_t nstacks)
{
	if (!s || s->npcs < 1 || s->npcs > 16)
		return false;
	if (s->pcs[0] < STACK_BASE || (s->pcs[0] - STACK_BASE) % 0x1000)
		return false;
	uint64_t k = (s->pcs[0] - STACK_BASE) / 0x1000;
	if (k >= nstacks || s->npcs != 1 + k % 16)
		return false;
	for (uint32_t j = 0; j < s->npcs; j++)
		if (s->pcs[j] != STACK_BASE + k * 0x1000 + j * 8)
			return false;
	return true;
}

struct found {
	const struct bucket *want_overflow;
	size_t n;
	uint64_t objects, bytes;
};

static int count_visit(void *arg, const struct bucket *b)
{
	struct found *f = arg;
	f->n++;
	f->objects += atomic_load(&b->alloc_objects);
	f->bytes += atomic_load(&b->alloc_bytes);
	return 0;
}

Test(bucket, same_key_counts_in_one_bucket)
{
	struct bucket_table *t = bucket_table_new(0, 0);
	cr_assert(t);
	uint64_t pcs[3] = { 0x1000, 0x2000, 0x3000 };
	cr_expect_eq(bucket_table_add(t, pcs, 3, 24, 512), 1, "first add: a new stack");
	cr_expect_eq(bucket_table_add(t, pcs, 3, 24, 512), 0);
	cr_expect_eq(bucket_table_add(t, pcs, 3, 24, 512), 0);
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	cr_expect_eq(st.buckets, 1);
	cr_expect_eq(st.stacks, 1);
	cr_expect_eq(st.cap_hits, 0);
	cr_expect_gt(st.bytes, 0);
	struct found f = { 0 };
	bucket_table_foreach(t, count_visit, &f);
	cr_expect_eq(f.n, 1);
	cr_expect_eq(f.objects, 3);
	cr_expect_eq(f.bytes, 72);
	bucket_table_free(t);
}

struct collect {
	const struct bucket *b[16];
	size_t n;
};

static int collect_visit(void *arg, const struct bucket *b)
{
	struct collect *c = arg;
	if (c->n < 16)
		c->b[c->n] = b;
	c->n++;
	return 0;
}

Test(bucket, size_and_rate_are_part_of_the_key_stacks_are_interned)
{
	struct bucket_table *t = bucket_table_new(0, 0);
	uint64_t a[2] = { 0x10, 0x20 }, b[2] = { 0x10, 0x21 };
	cr_expect_eq(bucket_table_add(t, a, 2, 8, 100), 1);
	cr_expect_eq(bucket_table_add(t, a, 2, 16, 100), 0, "known stack, new size");
	cr_expect_eq(bucket_table_add(t, a, 2, 8, 200), 0, "known stack, new rate");
	cr_expect_eq(bucket_table_add(t, b, 2, 8, 100), 1);
	cr_expect_eq(bucket_table_add(t, a, 1, 8, 100), 1, "a prefix is another stack");
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	cr_expect_eq(st.buckets, 5);
	cr_expect_eq(st.stacks, 3);

	struct collect c = { .n = 0 };
	bucket_table_foreach(t, collect_visit, &c);
	cr_assert_eq(c.n, 5);
	/* newest first; the three buckets of stack a share one struct stack */
	cr_expect_eq(c.b[4]->stack, c.b[3]->stack);
	cr_expect_eq(c.b[4]->stack, c.b[2]->stack);
	cr_expect_neq(c.b[1]->stack, c.b[2]->stack);
	cr_expect_eq(c.b[4]->stack->id, 1, "ids in insertion order");
	cr_expect_eq(c.b[1]->stack->id, 2);
	cr_expect_eq(c.b[0]->stack->id, 3);
	cr_expect_eq(c.b[4]->size, 8);
	cr_expect_eq(c.b[3]->size, 16);
	cr_expect_eq(c.b[2]->rate, 200);
	cr_expect_eq(c.b[0]->stack->npcs, 1);
	bucket_table_free(t);
}

Test(bucket, empty_and_overlong_stacks)
{
	struct bucket_table *t = bucket_table_new(0, 0);
	cr_expect_eq(bucket_table_add(t, NULL, 0, 10, 1), 1, "an empty stack is a stack");
	cr_expect_eq(bucket_table_add(t, NULL, 0, 10, 1), 0);
	uint64_t pcs[LLGO_MAX_FRAMES + 1];
	for (unsigned i = 0; i <= LLGO_MAX_FRAMES; i++)
		pcs[i] = 0x1000 + i;
	cr_expect_eq(bucket_table_add(t, pcs, LLGO_MAX_FRAMES + 1, 10, 1), -EINVAL);
	cr_expect_eq(bucket_table_add(t, pcs, LLGO_MAX_FRAMES, 10, 1), 1);
	cr_expect_eq(bucket_table_add(t, NULL, 3, 10, 1), -EINVAL);
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	cr_expect_eq(st.buckets, 2);
	bucket_table_free(t);
}

static int stop_at_third(void *arg, const struct bucket *b)
{
	int *n = arg;
	return ++*n == 3 ? 42 : 0;
}

Test(bucket, foreach_stops_on_nonzero)
{
	struct bucket_table *t = bucket_table_new(0, 0);
	for (uint64_t i = 0; i < 10; i++)
		bucket_table_add(t, &i, 1, 1, 1);
	int n = 0;
	cr_expect_eq(bucket_table_foreach(t, stop_at_third, &n), 42);
	cr_expect_eq(n, 3);
	bucket_table_free(t);
}

/* Many buckets: the head arrays grow several times; every key must still be found (the
 * second round adds no bucket). */
Test(bucket, growth_keeps_every_bucket)
{
	struct bucket_table *t = bucket_table_new(0, 0);
	const uint32_t n = 50000;
	uint64_t pcs[16];
	for (uint32_t round = 0; round < 2; round++) {
		for (uint32_t k = 0; k < n; k++) {
			uint32_t np = stack_of(k, pcs);
			int r = bucket_table_add(t, pcs, np, 8 + k % 3, 512);
			cr_assert_eq(r, round == 0 ? 1 : 0, "round %u key %u: %d", round, k, r);
		}
	}
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	cr_expect_eq(st.buckets, n);
	cr_expect_eq(st.stacks, n);
	struct found f = { 0 };
	bucket_table_foreach(t, count_visit, &f);
	cr_expect_eq(f.n, n);
	cr_expect_eq(f.objects, 2ull * n);
	bucket_table_free(t);
}

struct overflow_find {
	const struct bucket *ov;
	size_t normal;
};

static int find_overflow(void *arg, const struct bucket *b)
{
	struct overflow_find *o = arg;
	if (b->stack->npcs == 0 && b->size == 0)
		o->ov = b;
	else
		o->normal++;
	return 0;
}

Test(bucket, bucket_cap_goes_to_overflow)
{
	struct bucket_table *t = bucket_table_new(10, 0);
	uint64_t pcs[16];
	for (uint32_t k = 0; k < 25; k++) {
		uint32_t np = stack_of(k, pcs);
		cr_assert_geq(bucket_table_add(t, pcs, np, 100, 512), 0);
	}
	/* existing keys keep counting in their own buckets */
	uint32_t np = stack_of(3, pcs);
	cr_expect_eq(bucket_table_add(t, pcs, np, 100, 512), 0);
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	cr_expect_eq(st.buckets, 11, "10 + the overflow bucket, got %llu",
		     (unsigned long long)st.buckets);
	cr_expect_eq(st.cap_hits, 15);
	struct overflow_find o = { 0 };
	bucket_table_foreach(t, find_overflow, &o);
	cr_assert(o.ov, "no overflow bucket");
	cr_expect_eq(o.normal, 10);
	cr_expect_eq(atomic_load(&o.ov->alloc_objects), 15);
	cr_expect_eq(atomic_load(&o.ov->alloc_bytes), 1500);
	cr_expect_eq(o.ov->rate, 512);
	struct found f = { 0 };
	bucket_table_foreach(t, count_visit, &f);
	cr_expect_eq(f.objects, 26, "nothing lost: every record counted once");
	bucket_table_free(t);
}

Test(bucket, memory_cap_goes_to_overflow)
{
	const uint64_t cap = 256 << 10;
	struct bucket_table *t = bucket_table_new(0, cap);
	uint64_t pcs[16];
	const uint32_t n = 20000;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t np = stack_of(k, pcs);
		cr_assert_geq(bucket_table_add(t, pcs, np, 64, 512), 0);
	}
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	cr_expect_gt(st.cap_hits, 0, "the cap must be hit");
	cr_expect_lt(st.buckets, n);
	/* the overflow bucket is the only allocation allowed past the cap */
	cr_expect_leq(st.bytes, cap + 4096, "bytes %llu over cap %llu",
		      (unsigned long long)st.bytes, (unsigned long long)cap);
	struct found f = { 0 };
	bucket_table_foreach(t, count_visit, &f);
	cr_expect_eq(f.objects, n);
	cr_expect_eq(f.bytes, 64ull * n);
	bucket_table_free(t);
}

/* ---- stress --------------------------------------------------------------------------- */

#define STRESS_STACKS 3000u
#define STRESS_SIZES 4u
#define STRESS_RATES 2u
#define STRESS_KEYS (STRESS_STACKS * STRESS_SIZES * STRESS_RATES)

static const uint64_t stress_sizes[STRESS_SIZES] = { 8, 24, 640, 100000 };
static const uint64_t stress_rates[STRESS_RATES] = { 1, 524288 };

struct stress {
	struct bucket_table *t;
	unsigned iters;
	_Atomic bool done;
	_Atomic uint64_t errors;
	_Atomic uint64_t walks;
	uint64_t expect[STRESS_KEYS]; /* summed after the writers joined */
};

struct writer {
	struct stress *st;
	unsigned id;
	uint32_t counts[STRESS_KEYS];
};

static void key_parts(uint32_t key, uint32_t *k, uint32_t *si, uint32_t *ri)
{
	*k = key / (STRESS_SIZES * STRESS_RATES);
	*si = (key / STRESS_RATES) % STRESS_SIZES;
	*ri = key % STRESS_RATES;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t x = 0x9e3779b97f4a7c15ULL * (w->id + 1);
	uint64_t pcs[16];
	for (unsigned i = 0; i < w->st->iters; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* skewed: most records hit a few hot keys (the lock-free path), some reach
		 * new stacks late in the run (inserts and resizes under the walker) */
		uint32_t key = (x & 3) ? (uint32_t)((x >> 8) % 64) :
					 (uint32_t)((x >> 8) % STRESS_KEYS);
		uint32_t k, si, ri;
		key_parts(key, &k, &si, &ri);
		uint32_t np = stack_of(k, pcs);
		if (bucket_table_add(w->st->t, pcs, np, stress_sizes[si], stress_rates[ri]) < 0)
			atomic_fetch_add(&w->st->errors, 1);
		w->counts[key]++;
	}
	return NULL;
}

struct seen {
	const struct bucket *b;
	uint64_t objects, bytes;
};

struct walk {
	struct stress *st;
	struct seen *map; /* open addressing by bucket pointer */
	size_t cap;
	size_t visited;
};

static bool key_valid(const struct bucket *b)
{
	bool size_ok = false, rate_ok = false;
	for (unsigned i = 0; i < STRESS_SIZES; i++)
		size_ok |= b->size == stress_sizes[i];
	for (unsigned i = 0; i < STRESS_RATES; i++)
		rate_ok |= b->rate == stress_rates[i];
	return size_ok && rate_ok && stack_valid(b->stack, STRESS_STACKS);
}

static int walk_visit(void *arg, const struct bucket *b)
{
	struct walk *w = arg;
	w->visited++;
	if (!key_valid(b)) {
		atomic_fetch_add(&w->st->errors, 1);
		return 0;
	}
	uint64_t o = atomic_load_explicit(&b->alloc_objects, memory_order_relaxed);
	uint64_t by = atomic_load_explicit(&b->alloc_bytes, memory_order_relaxed);
	size_t h = ((uintptr_t)b >> 4) * 0x9e3779b97f4a7c15ULL % w->cap;
	while (w->map[h].b && w->map[h].b != b)
		h = (h + 1) % w->cap;
	if (w->map[h].b) {
		if (o < w->map[h].objects || by < w->map[h].bytes)
			atomic_fetch_add(&w->st->errors, 1); /* a count went back */
	}
	w->map[h].b = b;
	w->map[h].objects = o;
	w->map[h].bytes = by;
	return 0;
}

static void *walker_main(void *arg)
{
	struct stress *st = arg;
	struct walk w = { .st = st, .cap = 4 * STRESS_KEYS };
	w.map = calloc(w.cap, sizeof(*w.map));
	size_t last = 0;
	while (!atomic_load(&st->done)) {
		w.visited = 0;
		bucket_table_foreach(st->t, walk_visit, &w);
		if (w.visited < last)
			atomic_fetch_add(&st->errors, 1); /* published buckets never vanish */
		last = w.visited;
		atomic_fetch_add(&st->walks, 1);
		struct timespec ts = { 0, 2 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	free(w.map);
	return NULL;
}

struct final_ctx {
	struct stress *st;
	uint64_t got[STRESS_KEYS];
	size_t n;
};

static int final_visit(void *arg, const struct bucket *b)
{
	struct final_ctx *f = arg;
	f->n++;
	if (!key_valid(b))
		return 1;
	uint32_t k = (uint32_t)((b->stack->pcs[0] - STACK_BASE) / 0x1000);
	uint32_t si = 0, ri = 0;
	while (stress_sizes[si] != b->size)
		si++;
	while (stress_rates[ri] != b->rate)
		ri++;
	uint32_t key = (k * STRESS_SIZES + si) * STRESS_RATES + ri;
	if (f->got[key])
		return 2; /* two buckets for one key */
	f->got[key] = atomic_load(&b->alloc_objects);
	if (atomic_load(&b->alloc_bytes) != f->got[key] * b->size)
		return 3;
	return 0;
}

Test(bucket, stress_writers_and_walker, .timeout = 300)
{
	bool tsan = th_san_thread();
	unsigned nthreads = tsan ? 4 : 16;
	struct stress *st = calloc(1, sizeof(*st));
	st->t = bucket_table_new(0, 0);
	st->iters = tsan ? 20000 : 200000;
	pthread_t walker, th[16];
	struct writer *w = calloc(nthreads, sizeof(*w));
	cr_assert_eq(pthread_create(&walker, NULL, walker_main, st), 0);
	for (unsigned i = 0; i < nthreads; i++) {
		w[i].st = st;
		w[i].id = i;
		cr_assert_eq(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	atomic_store(&st->done, true);
	pthread_join(walker, NULL);
	cr_expect_eq(atomic_load(&st->errors), 0, "%llu consistency errors",
		     (unsigned long long)atomic_load(&st->errors));
	cr_expect_gt(atomic_load(&st->walks), 0);

	for (unsigned i = 0; i < nthreads; i++)
		for (uint32_t k = 0; k < STRESS_KEYS; k++)
			st->expect[k] += w[i].counts[k];
	struct final_ctx *f = calloc(1, sizeof(*f));
	f->st = st;
	cr_assert_eq(bucket_table_foreach(st->t, final_visit, f), 0, "bad bucket in final walk");
	size_t keys = 0;
	for (uint32_t k = 0; k < STRESS_KEYS; k++) {
		keys += st->expect[k] != 0;
		cr_expect_eq(f->got[k], st->expect[k], "key %u: %llu counted, %llu added", k,
			     (unsigned long long)f->got[k], (unsigned long long)st->expect[k]);
	}
	cr_expect_eq(f->n, keys, "one bucket per key used");
	struct bucket_stats bs;
	bucket_table_stats(st->t, &bs);
	cr_expect_eq(bs.buckets, keys);
	cr_expect_eq(bs.cap_hits, 0);
	free(f);
	free(w);
	bucket_table_free(st->t);
	free(st);
}

/* Writers racing into a tiny cap: the overflow path runs lock-free for everyone while
 * counts stay exact. */
Test(bucket, stress_caps, .timeout = 300)
{
	bool tsan = th_san_thread();
	unsigned nthreads = tsan ? 4 : 8;
	struct stress *st = calloc(1, sizeof(*st));
	st->t = bucket_table_new(100, 0);
	st->iters = tsan ? 10000 : 100000;
	pthread_t th[16];
	struct writer *w = calloc(nthreads, sizeof(*w));
	for (unsigned i = 0; i < nthreads; i++) {
		w[i].st = st;
		w[i].id = i + 100;
		cr_assert_eq(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	cr_expect_eq(atomic_load(&st->errors), 0);
	struct bucket_stats bs;
	bucket_table_stats(st->t, &bs);
	cr_expect_eq(bs.buckets, 101);
	cr_expect_gt(bs.cap_hits, 0);
	struct found fo = { 0 };
	bucket_table_foreach(st->t, count_visit, &fo);
	cr_expect_eq(fo.objects, (uint64_t)nthreads * st->iters);
	struct overflow_find o = { 0 };
	bucket_table_foreach(st->t, find_overflow, &o);
	cr_assert(o.ov);
	cr_expect_eq(atomic_load(&o.ov->alloc_objects), bs.cap_hits);
	free(w);
	bucket_table_free(st->t);
	free(st);
}

/* ---- cuts: consistent views while writers go on -------------------------------------------- */

/*
 * Writers add under the shared side of a rwlock (many at once, as a table allows); a snapshot
 * thread takes the exclusive side only to make a cut and to read each writer's count of adds
 * done (the session's drain lock plays that part in the daemon), then walks the table beside
 * the writers. At every cut, each writer's buckets must hold exactly the adds it had done,
 * and the walk must visit exactly the buckets that existed: whatever the writers did after.
 * Writers also keep setting free counters (as the final drain's freeze does) to the
 * alloc count they had at that moment, so a cut must see frees <= allocs taken together.
 */
#define CUT_WRITERS 6
#define CUT_KEYS 512u /* stacks per writer: new buckets keep coming for a while */

struct cut_writer {
	struct bucket_table *t;
	pthread_rwlock_t *lock;
	uint32_t id;
	_Atomic uint64_t done; /* adds done; read by the snapshot under the exclusive lock */
	_Atomic bool *stop;
};

static void *cut_writer_main(void *arg)
{
	struct cut_writer *w = arg;
	uint64_t pcs[3];
	for (uint64_t i = 0; !atomic_load(w->stop); i++) {
		uint32_t k = (uint32_t)((i * 7919u) % (i < 4 * CUT_KEYS ? i / 4 + 1 : CUT_KEYS));
		pcs[0] = 0x900000ull + (uint64_t)w->id * 0x100000 + (uint64_t)k * 16;
		pcs[1] = 0xa00000ull + w->id;
		pcs[2] = 0xb00000ull;
		pthread_rwlock_rdlock(w->lock);
		int rc = bucket_table_add(w->t, pcs, 3, 64, 1);
		if (rc >= 0)
			atomic_fetch_add_explicit(&w->done, 1, memory_order_relaxed);
		pthread_rwlock_unlock(w->lock);
		cr_assert_geq(rc, 0);
	}
	return NULL;
}

/* Writer 0 also plays the freeze: free counters set to what the bucket allocated by then. */
struct cut_freer {
	struct bucket_table *t;
	pthread_rwlock_t *lock;
	_Atomic bool *stop;
};

static int cut_free_visit(void *arg, const struct bucket *b)
{
	struct bucket_table *t = arg;
	uint64_t a = atomic_load_explicit(&((struct bucket *)b)->alloc_objects, memory_order_relaxed);
	bucket_table_set_free(t, (struct bucket *)b, a / 2, a / 2 * b->size);
	return 0;
}

static void *cut_freer_main(void *arg)
{
	struct cut_freer *f = arg;
	while (!atomic_load(f->stop)) {
		pthread_rwlock_rdlock(f->lock);
		bucket_table_foreach(f->t, cut_free_visit, f->t);
		pthread_rwlock_unlock(f->lock);
		sched_yield();
	}
	return NULL;
}

struct cut_sum {
	uint64_t objects[CUT_WRITERS], bytes[CUT_WRITERS];
	uint64_t buckets;
	bool bad;
};

static int cut_sum_visit(void *arg, const struct bucket *b, const struct bucket_counts *c)
{
	struct cut_sum *s = arg;
	uint64_t w = (b->stack->pcs[1] - 0xa00000ull);
	if (w >= CUT_WRITERS || b->size != 64 || c->free_objects > c->alloc_objects ||
	    c->alloc_bytes != c->alloc_objects * 64 || c->free_bytes != c->free_objects * 64) {
		s->bad = true;
		return 1;
	}
	s->objects[w] += c->alloc_objects;
	s->bytes[w] += c->alloc_bytes;
	s->buckets++;
	return 0;
}

Test(bucket, cuts_are_exact_while_writers_go_on, .timeout = 300)
{
	struct bucket_table *t = bucket_table_new(0, 0);
	cr_assert(t);
	pthread_rwlock_t lock;
	pthread_rwlockattr_t la;
	pthread_rwlockattr_init(&la);
	/* the cuts must not starve behind a stream of adds */
	pthread_rwlockattr_setkind_np(&la, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&lock, &la);
	pthread_rwlockattr_destroy(&la);
	_Atomic bool stop = false;
	unsigned want_cuts = th_san_thread() ? 30 : 100;
	struct cut_writer w[CUT_WRITERS];
	pthread_t th[CUT_WRITERS], freer;
	for (uint32_t i = 0; i < CUT_WRITERS; i++) {
		w[i] = (struct cut_writer){ .t = t, .lock = &lock, .id = i, .stop = &stop };
		atomic_init(&w[i].done, 0);
		cr_assert_eq(pthread_create(&th[i], NULL, cut_writer_main, &w[i]), 0);
	}
	struct cut_freer f = { .t = t, .lock = &lock, .stop = &stop };
	cr_assert_eq(pthread_create(&freer, NULL, cut_freer_main, &f), 0);

	unsigned cuts = 0, moved = 0;
	while (cuts < want_cuts) {
		uint64_t want[CUT_WRITERS], total = 0;
		struct bucket_stats bs;
		pthread_rwlock_wrlock(&lock);
		uint64_t cut = bucket_table_cut(t);
		for (int i = 0; i < CUT_WRITERS; i++)
			total += want[i] = atomic_load_explicit(&w[i].done, memory_order_relaxed);
		bucket_table_stats(t, &bs);
		pthread_rwlock_unlock(&lock);

		/* let the writers add after the cut (and the freer rewrite frees) before the walk */
		for (unsigned spin = 0; spin < 100000; spin++) {
			uint64_t n = 0;
			for (int i = 0; i < CUT_WRITERS; i++)
				n += atomic_load(&w[i].done);
			if (n >= total + 64)
				break;
			sched_yield();
		}
		struct cut_sum s;
		memset(&s, 0, sizeof(s));
		cr_assert_eq(bucket_table_foreach_cut(t, cut, cut_sum_visit, &s), 0,
			     "a bucket's counters as of cut %u are not whole", cuts);
		cr_assert(!s.bad);
		/* writers went on meanwhile: seen again now, the table has more */
		struct bucket_stats after;
		bucket_table_stats(t, &after);
		uint64_t now = 0;
		for (int i = 0; i < CUT_WRITERS; i++)
			now += atomic_load(&w[i].done);
		moved += now > total || after.buckets > bs.buckets;
		bucket_table_cut_end(t, cut);
		cr_assert_eq(s.buckets, bs.buckets, "cut %u: walked %llu buckets, %llu existed", cuts,
			     (unsigned long long)s.buckets, (unsigned long long)bs.buckets);
		for (int i = 0; i < CUT_WRITERS; i++) {
			cr_assert_eq(s.objects[i], want[i],
				     "cut %u, writer %d: %llu objects in its buckets, %llu adds done",
				     cuts, i, (unsigned long long)s.objects[i],
				     (unsigned long long)want[i]);
			cr_assert_eq(s.bytes[i], want[i] * 64);
		}
		cuts++;
	}
	atomic_store(&stop, true);
	for (int i = 0; i < CUT_WRITERS; i++)
		pthread_join(th[i], NULL);
	pthread_join(freer, NULL);
	cr_log_info("%u cuts, %u of them while the writers added", cuts, moved);
	cr_expect_geq(moved, cuts / 2, "only %u of %u cuts were walked after the writers added",
		      moved, cuts);
	pthread_rwlock_destroy(&lock);
	bucket_table_free(t);
}
