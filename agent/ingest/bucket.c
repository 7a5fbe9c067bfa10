// SPDX-License-Identifier: MIT
/*
 * bucket.c: the per-process aggregation table. Every delivered ALLOC record lands in the
 * bucket keyed by (stack, size, rate); stacks are interned in a second table so a stack shared
 * by many buckets is stored once. What a bucket means (scaling, formats) is left to profile.c
 * and the writers; who feeds the table (one drain at a time per session) to drain.c.
 *
 * Concurrency. Lookups take no lock: both tables are arrays of atomic chain heads, and every
 * node (struct stack, struct bucket) is fully initialised before it is published with a
 * release store (chain head or next pointer), which pairs with the acquire loads of the
 * readers. Key fields never change after publication; counters are atomics updated with
 * relaxed fetch_add (they are statistics: no other memory is published through them).
 * A miss takes t->lock, looks again and inserts. Snapshots walk the `all` list (newest first)
 * from an acquire load of its head and never block writers.
 *
 * Growth. Each table starts with BT_MIN_SLOTS heads and doubles (under t->lock) when it holds
 * more nodes than slots, up to BT_MAX_SLOTS. A resize builds the new head array by relinking
 * the existing nodes (release stores to their next pointers), then publishes the array with a
 * release store. Old arrays are kept until the table is freed (a reader may still be walking
 * one; together they cost less than the newest). A reader that walks an old array while nodes
 * move may miss a node that exists, never see a torn one, and never loop: nodes are relinked in
 * old-chain order, so a node only ever points to nodes already moved or to its old successor.
 * A miss is always confirmed under the lock against the current array, so a false miss costs
 * a lock, not a duplicate bucket.
 *
 * Cuts. A snapshot reads the table while the drain goes on adding to it, and still sees one
 * consistent state: the table as of its cut. bucket_table_cut (made while no add runs: the
 * caller's drain lock) notes the head of the `all` list and publishes a cut id in t->cut.
 * While a cut is in force, the first write to a bucket's counters copies them to b->kept and
 * stores the id in b->cut (claimed with a CAS to BUCKET_CUT_SAVING first, so concurrent
 * writers copy once) before it changes them. The reader walks from the noted head (buckets
 * inserted after the cut are newer: not reached) and, per bucket, takes b->kept when b->cut
 * names its cut, else the live counters, checking b->cut again after reading them. The pairs:
 *   - the saver's release store of b->cut (after kept) with the reader's acquire load of it:
 *     a reader that sees the id sees the kept values;
 *   - every counter write made while a cut is in force is a release (after the writer made
 *     sure b->cut names the cut: its own store, or an acquire load of the saver's), and the
 *     reader loads the counters with acquire before it loads b->cut again: a reader that
 *     loaded any value written after the cut then sees b->cut naming the cut, and takes
 *     kept instead.
 * A reader that sees neither read counters no post-cut write touched: the cut's values
 * (everything written before the cut happens-before it through the drain lock).
 *
 * Memory. Nodes come from an arena of chunks owned by the table (freed only with the table).
 * Caps: max_buckets and max_bytes (nodes + head arrays). When an insertion would pass a cap,
 * the table turns `full`: every record without a bucket is counted in one overflow bucket
 * (a private empty stack, size 0, the rate of the first record it took), and cap_hits counts
 * those records. Once full, no node is inserted again, so the overflow path needs no lock.
 *
 * About 680 lines, on purpose: lookups, insertion, growth, caps and cuts all rest on the
 * node layout and the memory-ordering pairs stated above; apart, each would restate them.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

#define BT_DEFAULT_MAX_BUCKETS 1000000ull
#define BT_DEFAULT_MAX_BYTES (512ull << 20)
#define BT_MIN_SLOTS 256u
#define BT_MAX_SLOTS (1u << 22)
#define BT_CHUNK_MIN 4096u
#define BT_CHUNK_MAX (64u << 10)
#define BT_ALIGN 16u

struct bt_bheads {
	size_t mask;
	struct bt_bheads *older; /* retired arrays, freed with the table */
	struct bucket *_Atomic h[];
};

struct bt_sheads {
	size_t mask;
	struct bt_sheads *older;
	struct stack *_Atomic h[];
};

struct bt_chunk {
	struct bt_chunk *next;
	size_t size; /* bytes after the header */
	size_t used;
	_Alignas(BT_ALIGN) unsigned char mem[];
};

struct bucket_table {
	/* Read without the lock. */
	struct bt_bheads *_Atomic bheads;
	struct bt_sheads *_Atomic sheads;
	struct bucket *_Atomic all;
	struct bucket *_Atomic overflow; /* published (release) before full is set */
	_Atomic bool full;
	_Atomic uint64_t cap_hits;
	/* The cut in force (0: none) and the head of `all` when it was made. cuts: ids given. */
	_Atomic uint64_t cut;
	struct bucket *_Atomic cut_all;
	_Atomic uint64_t cuts;
	/* Written under lock, read (relaxed) by stats. */
	_Atomic uint64_t nbuckets; /* excluding the overflow bucket */
	_Atomic uint64_t nstacks;
	_Atomic uint64_t bytes;

	pthread_mutex_t lock; /* insertions, resizes, the arena */
	uint64_t max_buckets;
	uint64_t max_bytes;
	struct bt_chunk *chunks;
	size_t next_chunk;
	struct stack *overflow_stack;
};

/* ---- hashing ------------------------------------------------------------------------- */

static inline uint64_t bt_mix(uint64_t h)
{
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
}

static uint64_t bt_stack_hash(const uint64_t *pcs, uint32_t npcs)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ npcs;
	for (uint32_t i = 0; i < npcs; i++)
		h = bt_mix(h ^ pcs[i]) + i;
	return bt_mix(h);
}

static inline uint64_t bt_bucket_hash(const struct stack *s, uint64_t size, uint64_t rate)
{
	return bt_mix(s->hash ^ bt_mix(size + 0x632be59bd9b4e019ULL) ^
		      (rate * 0x9e3779b97f4a7c15ULL));
}

/* ---- lock-free lookups ------------------------------------------------------------------ */

static struct stack *bt_stack_find(const struct bt_sheads *a, uint64_t h, const uint64_t *pcs,
				   uint32_t npcs)
{
	/* acquire: pairs with the release store that published each node (insert or resize) */
	for (struct stack *s = atomic_load_explicit(&a->h[h & a->mask], memory_order_acquire); s;
	     s = atomic_load_explicit(&s->next, memory_order_acquire)) {
		if (s->hash == h && s->npcs == npcs &&
		    (npcs == 0 || memcmp(s->pcs, pcs, (size_t)npcs * 8u) == 0))
			return s;
	}
	return NULL;
}

static struct bucket *bt_bucket_find(const struct bt_bheads *a, uint64_t h,
				     const struct stack *st, uint64_t size, uint64_t rate)
{
	for (struct bucket *b = atomic_load_explicit(&a->h[h & a->mask], memory_order_acquire); b;
	     b = atomic_load_explicit(&b->next, memory_order_acquire)) {
		if (b->stack == st && b->size == size && b->rate == rate)
			return b;
	}
	return NULL;
}

/* While cut is in force: keep b's counters as of the cut, once (see the file comment). */
static void bt_keep(struct bucket *b, uint64_t cut)
{
	uint64_t bc = atomic_load_explicit(&b->cut, memory_order_acquire);
	for (;;) {
		if (bc == cut)
			return;
		if (bc == BUCKET_CUT_SAVING) { /* another writer copies them: a few loads */
			sched_yield();
			bc = atomic_load_explicit(&b->cut, memory_order_acquire);
			continue;
		}
		if (atomic_compare_exchange_weak_explicit(&b->cut, &bc, BUCKET_CUT_SAVING,
							  memory_order_acquire,
							  memory_order_acquire))
			break;
	}
	_Atomic uint64_t *const live[4] = { &b->alloc_objects, &b->alloc_bytes, &b->free_objects,
					    &b->free_bytes };
	for (int i = 0; i < 4; i++)
		atomic_store_explicit(&b->kept[i],
				      atomic_load_explicit(live[i], memory_order_relaxed),
				      memory_order_relaxed);
	/* release: pairs with the reader's acquire load of b->cut (kept is complete) */
	atomic_store_explicit(&b->cut, cut, memory_order_release);
}

/* Before any write to b's counters; returns the order the writes take: release while a cut
 * is in force (they pair with bt_read_cut's acquire loads of the counters: a reader that
 * loads a value written after the cut then sees b->cut naming it), relaxed otherwise. */
static inline memory_order bt_before_write(struct bucket_table *t, struct bucket *b)
{
	/* relaxed: a cut is made while no add runs, ordered with them by the caller's lock */
	uint64_t cut = atomic_load_explicit(&t->cut, memory_order_relaxed);
	if (llgo_likely(cut == 0))
		return memory_order_relaxed;
	bt_keep(b, cut);
	return memory_order_release;
}

static inline void bt_count(struct bucket_table *t, struct bucket *b, uint64_t size)
{
	memory_order mo = bt_before_write(t, b);
	atomic_fetch_add_explicit(&b->alloc_objects, 1, mo);
	/* Saturating: a process may ask for SIZE_MAX (and fail) over and over; its bytes stop
	 * at 2^64-1 instead of wrapping to a small (or, in use, negative) value. */
	uint64_t old = atomic_load_explicit(&b->alloc_bytes, memory_order_relaxed), nv;
	do {
		nv = old + size < old ? UINT64_MAX : old + size;
	} while (!atomic_compare_exchange_weak_explicit(&b->alloc_bytes, &old, nv, mo,
							memory_order_relaxed));
}

/* ---- allocation (under t->lock) -------------------------------------------------------- */

/* bytes has one writer at a time (t->lock holder); stats read it relaxed */
static void bt_add_bytes(struct bucket_table *t, uint64_t n)
{
	atomic_store_explicit(&t->bytes, atomic_load_explicit(&t->bytes, memory_order_relaxed) + n,
			      memory_order_relaxed);
}


static void *bt_alloc(struct bucket_table *t, size_t n, bool capped)
{
	n = (n + BT_ALIGN - 1) & ~(size_t)(BT_ALIGN - 1);
	struct bt_chunk *c = t->chunks;
	if (!c || c->size - c->used < n) {
		/* the overflow bucket (uncapped) gets a chunk of its own size, not a big one */
		size_t size = capped ? t->next_chunk : n;
		while (size < n)
			size *= 2;
		uint64_t cost = sizeof(struct bt_chunk) + size;
		if (capped && atomic_load_explicit(&t->bytes, memory_order_relaxed) + cost >
				      t->max_bytes)
			return NULL;
		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = 0;
		if (capped || !t->chunks) {
			c->next = t->chunks;
			t->chunks = c;
		} else {
			/* keep bump-allocating from the current chunk */
			c->next = t->chunks->next;
			t->chunks->next = c;
		}
		if (capped && t->next_chunk < BT_CHUNK_MAX)
			t->next_chunk *= 2;
		bt_add_bytes(t, cost);
	}
	void *p = c->mem + c->used;
	c->used += n;
	return p;
}

static struct bt_bheads *bt_bheads_new(size_t nslots)
{
	struct bt_bheads *a = calloc(1, sizeof(*a) + nslots * sizeof(a->h[0]));
	if (a)
		a->mask = nslots - 1;
	return a;
}

static struct bt_sheads *bt_sheads_new(size_t nslots)
{
	struct bt_sheads *a = calloc(1, sizeof(*a) + nslots * sizeof(a->h[0]));
	if (a)
		a->mask = nslots - 1;
	return a;
}

/* Double the bucket head array. Growth is best effort: on failure chains get longer. */
static void bt_bheads_grow(struct bucket_table *t)
{
	struct bt_bheads *old = atomic_load_explicit(&t->bheads, memory_order_relaxed);
	size_t n = (old->mask + 1) * 2;
	uint64_t cost = sizeof(*old) + n * sizeof(old->h[0]);
	if (n > BT_MAX_SLOTS ||
	    atomic_load_explicit(&t->bytes, memory_order_relaxed) + cost > t->max_bytes)
		return;
	struct bt_bheads *a = bt_bheads_new(n);
	if (!a)
		return;
	/* Relink in old-chain order (see the file comment: no reader can loop). The release
	 * stores pair with readers' acquire loads of next; node contents were published before
	 * (and we hold the lock their inserter released). */
	for (size_t i = 0; i <= old->mask; i++) {
		struct bucket *b = atomic_load_explicit(&old->h[i], memory_order_relaxed);
		while (b) {
			struct bucket *next = atomic_load_explicit(&b->next, memory_order_relaxed);
			size_t slot = bt_bucket_hash(b->stack, b->size, b->rate) & a->mask;
			atomic_store_explicit(&b->next,
					      atomic_load_explicit(&a->h[slot],
								   memory_order_relaxed),
					      memory_order_release);
			atomic_store_explicit(&a->h[slot], b, memory_order_relaxed);
			b = next;
		}
	}
	a->older = old;
	bt_add_bytes(t, cost);
	/* release: pairs with the acquire load of t->bheads in bucket_table_add */
	atomic_store_explicit(&t->bheads, a, memory_order_release);
}

static void bt_sheads_grow(struct bucket_table *t)
{
	struct bt_sheads *old = atomic_load_explicit(&t->sheads, memory_order_relaxed);
	size_t n = (old->mask + 1) * 2;
	uint64_t cost = sizeof(*old) + n * sizeof(old->h[0]);
	if (n > BT_MAX_SLOTS ||
	    atomic_load_explicit(&t->bytes, memory_order_relaxed) + cost > t->max_bytes)
		return;
	struct bt_sheads *a = bt_sheads_new(n);
	if (!a)
		return;
	for (size_t i = 0; i <= old->mask; i++) {
		struct stack *s = atomic_load_explicit(&old->h[i], memory_order_relaxed);
		while (s) {
			struct stack *next = atomic_load_explicit(&s->next, memory_order_relaxed);
			size_t slot = s->hash & a->mask;
			atomic_store_explicit(&s->next,
					      atomic_load_explicit(&a->h[slot],
								   memory_order_relaxed),
					      memory_order_release);
			atomic_store_explicit(&a->h[slot], s, memory_order_relaxed);
			s = next;
		}
	}
	a->older = old;
	bt_add_bytes(t, cost);
	atomic_store_explicit(&t->sheads, a, memory_order_release);
}

static struct stack *bt_stack_init(void *mem, uint64_t h, const uint64_t *pcs, uint32_t npcs,
				   uint32_t id)
{
	struct stack *s = mem;
	atomic_init(&s->next, NULL);
	s->hash = h;
	s->npcs = npcs;
	s->id = id;
	if (npcs)
		memcpy(s->pcs, pcs, (size_t)npcs * 8u);
	return s;
}

static struct bucket *bt_bucket_init(struct bucket_table *t, void *mem, const struct stack *st,
				     uint64_t size, uint64_t rate)
{
	struct bucket *b = mem;
	/* inserted after the cut in force (if any): its walk never reaches it, nothing to keep */
	atomic_init(&b->cut, atomic_load_explicit(&t->cut, memory_order_relaxed));
	for (int i = 0; i < 4; i++)
		atomic_init(&b->kept[i], 0);
	atomic_init(&b->next, NULL);
	atomic_init(&b->all, NULL);
	b->stack = st;
	b->size = size;
	b->rate = rate;
	atomic_init(&b->alloc_objects, 0);
	atomic_init(&b->alloc_bytes, 0);
	atomic_init(&b->free_objects, 0);
	atomic_init(&b->free_bytes, 0);
	return b;
}

/* Link a fully built bucket into the `all` list. release: pairs with the acquire loads in
 * bucket_table_foreach, so a visitor sees the node's key fields. */
static void bt_publish_all(struct bucket_table *t, struct bucket *b)
{
	atomic_store_explicit(&b->all, atomic_load_explicit(&t->all, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&t->all, b, memory_order_release);
}

/* The overflow bucket, created on the first cap hit. Exempt from the caps (one node). */
static struct bucket *bt_overflow_locked(struct bucket_table *t, uint64_t rate)
{
	struct bucket *ov = atomic_load_explicit(&t->overflow, memory_order_relaxed);
	if (ov)
		return ov;
	if (!t->overflow_stack) {
		void *m = bt_alloc(t, sizeof(struct stack), false);
		if (!m)
			return NULL;
		uint64_t id = atomic_load_explicit(&t->nstacks, memory_order_relaxed) + 1;
		/* not interned: its identity must differ from a real empty stack */
		t->overflow_stack = bt_stack_init(m, 0, NULL, 0, (uint32_t)id);
		atomic_store_explicit(&t->nstacks, id, memory_order_relaxed);
	}
	void *m = bt_alloc(t, sizeof(struct bucket), false);
	if (!m)
		return NULL;
	ov = bt_bucket_init(t, m, t->overflow_stack, 0, rate);
	bt_publish_all(t, ov);
	atomic_store_explicit(&t->overflow, ov, memory_order_release);
	return ov;
}

/* ---- API ------------------------------------------------------------------------------- */

struct bucket_table *bucket_table_new(uint64_t max_buckets, uint64_t max_bytes)
{
	struct bucket_table *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->max_buckets = max_buckets ? max_buckets : BT_DEFAULT_MAX_BUCKETS;
	t->max_bytes = max_bytes ? max_bytes : BT_DEFAULT_MAX_BYTES;
	t->next_chunk = BT_CHUNK_MIN;
	pthread_mutex_init(&t->lock, NULL);
	struct bt_bheads *bh = bt_bheads_new(BT_MIN_SLOTS);
	struct bt_sheads *sh = bt_sheads_new(BT_MIN_SLOTS);
	if (!bh || !sh) {
		free(bh);
		free(sh);
		pthread_mutex_destroy(&t->lock);
		free(t);
		return NULL;
	}
	atomic_init(&t->bheads, bh);
	atomic_init(&t->sheads, sh);
	atomic_init(&t->bytes, sizeof(*t) + 2 * (sizeof(*bh) + BT_MIN_SLOTS * sizeof(void *)));
	return t;
}

void bucket_table_free(struct bucket_table *t)
{
	if (!t)
		return;
	struct bt_bheads *bh = atomic_load_explicit(&t->bheads, memory_order_relaxed);
	while (bh) {
		struct bt_bheads *o = bh->older;
		free(bh);
		bh = o;
	}
	struct bt_sheads *sh = atomic_load_explicit(&t->sheads, memory_order_relaxed);
	while (sh) {
		struct bt_sheads *o = sh->older;
		free(sh);
		sh = o;
	}
	struct bt_chunk *c = t->chunks;
	while (c) {
		struct bt_chunk *n = c->next;
		free(c);
		c = n;
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* Returns 1 when the stack was new to the table, 0 when it was known (or the record went to
 * the overflow bucket), -EINVAL for a stack longer than LLGO_MAX_FRAMES, -ENOMEM. */
int bucket_table_add(struct bucket_table *t, const uint64_t *pcs, uint32_t npcs, uint64_t size,
		     uint64_t rate)
{
	return bucket_table_add_at(t, pcs, npcs, size, rate, NULL);
}

void bucket_table_count(struct bucket_table *t, struct bucket *b, uint64_t size)
{
	bt_count(t, b, size);
}

int bucket_table_add_at(struct bucket_table *t, const uint64_t *pcs, uint32_t npcs,
			uint64_t size, uint64_t rate, struct bucket **at)
{
	if (at)
		*at = NULL;
	if (npcs > LLGO_MAX_FRAMES || (npcs && !pcs))
		return -EINVAL;
	uint64_t sh = bt_stack_hash(pcs, npcs);

	/* Fast path: no lock, no store but the counters. acquire on the arrays pairs with the
	 * release that published them after they were filled. */
	struct stack *st = bt_stack_find(atomic_load_explicit(&t->sheads, memory_order_acquire), sh,
					 pcs, npcs);
	uint64_t bh = 0;
	if (llgo_likely(st != NULL)) {
		bh = bt_bucket_hash(st, size, rate);
		struct bucket *b = bt_bucket_find(
			atomic_load_explicit(&t->bheads, memory_order_acquire), bh, st, size, rate);
		if (llgo_likely(b != NULL)) {
			bt_count(t, b, size);
			if (at)
				*at = b;
			return 0;
		}
	}

	/* A full table inserts nothing more, so the current arrays (loaded after full, which
	 * was stored with release after the last resize) are final: look once more, then
	 * overflow. */
	if (atomic_load_explicit(&t->full, memory_order_acquire)) {
		st = bt_stack_find(atomic_load_explicit(&t->sheads, memory_order_acquire), sh, pcs,
				   npcs);
		if (st) {
			struct bucket *b = bt_bucket_find(
				atomic_load_explicit(&t->bheads, memory_order_acquire),
				bt_bucket_hash(st, size, rate), st, size, rate);
			if (b) {
				bt_count(t, b, size);
				if (at)
					*at = b;
				return 0;
			}
		}
		struct bucket *ov = atomic_load_explicit(&t->overflow, memory_order_acquire);
		bt_count(t, ov, size);
		atomic_fetch_add_explicit(&t->cap_hits, 1, memory_order_relaxed);
		return 0;
	}

	int ret = 0;
	struct bucket *b = NULL;
	pthread_mutex_lock(&t->lock);
	if (!st)
		st = bt_stack_find(atomic_load_explicit(&t->sheads, memory_order_relaxed), sh, pcs,
				   npcs);
	if (st) {
		bh = bt_bucket_hash(st, size, rate);
		b = bt_bucket_find(atomic_load_explicit(&t->bheads, memory_order_relaxed), bh, st,
				   size, rate);
		if (b)
			goto count;
	}
	if (atomic_load_explicit(&t->full, memory_order_relaxed))
		goto overflow;

	/* Insert: the stack (when new) and the bucket, within the caps. */
	if (atomic_load_explicit(&t->nbuckets, memory_order_relaxed) >= t->max_buckets)
		goto full;
	size_t ssize = st ? 0 : sizeof(struct stack) + (size_t)npcs * 8u;
	if (atomic_load_explicit(&t->bytes, memory_order_relaxed) + ssize + sizeof(struct bucket) >
	    t->max_bytes)
		goto full;
	if (!st) {
		void *m = bt_alloc(t, ssize, true);
		if (!m)
			goto full;
		uint64_t id = atomic_load_explicit(&t->nstacks, memory_order_relaxed) + 1;
		st = bt_stack_init(m, sh, pcs, npcs, (uint32_t)id);
		struct bt_sheads *a = atomic_load_explicit(&t->sheads, memory_order_relaxed);
		size_t slot = sh & a->mask;
		atomic_store_explicit(&st->next,
				      atomic_load_explicit(&a->h[slot], memory_order_relaxed),
				      memory_order_relaxed);
		/* release: the node is complete; pairs with bt_stack_find's acquire loads */
		atomic_store_explicit(&a->h[slot], st, memory_order_release);
		atomic_store_explicit(&t->nstacks, id, memory_order_relaxed);
		if (id > a->mask + 1)
			bt_sheads_grow(t);
		ret = 1;
		bh = bt_bucket_hash(st, size, rate);
	}
	void *m = bt_alloc(t, sizeof(struct bucket), true);
	if (!m)
		goto full; /* the stack stays interned; it is only memory */
	b = bt_bucket_init(t, m, st, size, rate);
	struct bt_bheads *a = atomic_load_explicit(&t->bheads, memory_order_relaxed);
	size_t slot = bh & a->mask;
	atomic_store_explicit(&b->next, atomic_load_explicit(&a->h[slot], memory_order_relaxed),
			      memory_order_relaxed);
	/* release: pairs with bt_bucket_find's acquire loads */
	atomic_store_explicit(&a->h[slot], b, memory_order_release);
	bt_publish_all(t, b);
	uint64_t nb = atomic_load_explicit(&t->nbuckets, memory_order_relaxed) + 1;
	atomic_store_explicit(&t->nbuckets, nb, memory_order_relaxed);
	if (nb > a->mask + 1)
		bt_bheads_grow(t);
	goto count;

full:
	if (!bt_overflow_locked(t, rate)) {
		pthread_mutex_unlock(&t->lock);
		return -ENOMEM;
	}
	/* release: pairs with the acquire load of full on the lock-free path; everything
	 * inserted and resized before is visible to whoever sees full set */
	atomic_store_explicit(&t->full, true, memory_order_release);
overflow:
	b = atomic_load_explicit(&t->overflow, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->cap_hits, 1, memory_order_relaxed);
	bt_count(t, b, size);
	pthread_mutex_unlock(&t->lock);
	return 0; /* (not given to *at: each record there is a cap hit) */
count:
	bt_count(t, b, size);
	pthread_mutex_unlock(&t->lock);
	if (at)
		*at = b;
	return ret;
}

int bucket_table_foreach(struct bucket_table *t, bucket_visit_fn fn, void *arg)
{
	/* acquire on the head and on every `all` link: pairs with bt_publish_all's release, so
	 * each visited bucket (and its stack) is complete */
	for (struct bucket *b = atomic_load_explicit(&t->all, memory_order_acquire); b;
	     b = atomic_load_explicit(&b->all, memory_order_acquire)) {
		int r = fn(arg, b);
		if (r)
			return r;
	}
	return 0;
}

void bucket_table_set_free(struct bucket_table *t, struct bucket *b, uint64_t objects,
			   uint64_t bytes)
{
	memory_order mo = bt_before_write(t, b);
	atomic_store_explicit(&b->free_objects, objects, mo);
	atomic_store_explicit(&b->free_bytes, bytes, mo);
}

uint64_t bucket_table_cut(struct bucket_table *t)
{
	uint64_t id = atomic_load_explicit(&t->cuts, memory_order_relaxed) + 1;
	if (id == BUCKET_CUT_SAVING)
		id = 1;
	atomic_store_explicit(&t->cuts, id, memory_order_relaxed);
	/* acquire: pairs with bt_publish_all's release (the walk from here sees whole nodes) */
	atomic_store_explicit(&t->cut_all, atomic_load_explicit(&t->all, memory_order_acquire),
			      memory_order_relaxed);
	/* Buckets that still name an earlier use of this id (after 2^64-1 cuts, or a table
	 * made before ids wrapped) would be taken as kept: ids only grow, so none can. */
	atomic_store_explicit(&t->cut, id, memory_order_release);
	return id;
}

void bucket_table_cut_end(struct bucket_table *t, uint64_t cut)
{
	/* A writer that still sees the old id keeps values nobody reads: harmless. */
	uint64_t want = cut;
	atomic_compare_exchange_strong_explicit(&t->cut, &want, 0, memory_order_relaxed,
						memory_order_relaxed);
}

/* b's counters as of cut (0: now). Frees are read before allocations: each free follows its
 * allocation, so this order never sees more frees than allocations of a consistent table. */
static void bt_read_cut(const struct bucket *b, uint64_t cut, struct bucket_counts *c)
{
	struct bucket *w = (struct bucket *)b; /* C11 atomics take non-const pointers */
	/* acquire loads while a cut is read: pair with the writers' release writes */
	memory_order mo = cut ? memory_order_acquire : memory_order_relaxed;
	uint64_t bc = cut ? atomic_load_explicit(&w->cut, memory_order_acquire) : 0;
	if (!cut || (bc != cut && bc != BUCKET_CUT_SAVING)) {
		c->free_objects = atomic_load_explicit(&w->free_objects, mo);
		c->free_bytes = atomic_load_explicit(&w->free_bytes, mo);
		c->alloc_objects = atomic_load_explicit(&w->alloc_objects, mo);
		c->alloc_bytes = atomic_load_explicit(&w->alloc_bytes, mo);
		if (!cut)
			return;
		bc = atomic_load_explicit(&w->cut, memory_order_acquire);
		if (bc != cut && bc != BUCKET_CUT_SAVING)
			return; /* no write since the cut reached what we read */
	}
	while (bc == BUCKET_CUT_SAVING) {
		sched_yield();
		bc = atomic_load_explicit(&w->cut, memory_order_acquire);
	}
	/* bc == cut, loaded with acquire: pairs with bt_keep's release store after kept */
	c->alloc_objects = atomic_load_explicit(&w->kept[0], memory_order_relaxed);
	c->alloc_bytes = atomic_load_explicit(&w->kept[1], memory_order_relaxed);
	c->free_objects = atomic_load_explicit(&w->kept[2], memory_order_relaxed);
	c->free_bytes = atomic_load_explicit(&w->kept[3], memory_order_relaxed);
}

int bucket_table_foreach_cut(struct bucket_table *t, uint64_t cut, bucket_cut_visit_fn fn,
			     void *arg)
{
	/* acquire on every `all` link: pairs with bt_publish_all's release (whole nodes); the
	 * cut's head was loaded with acquire by bucket_table_cut */
	struct bucket *b = cut ? atomic_load_explicit(&t->cut_all, memory_order_relaxed)
			       : atomic_load_explicit(&t->all, memory_order_acquire);
	for (; b; b = atomic_load_explicit(&b->all, memory_order_acquire)) {
		struct bucket_counts c;
		bt_read_cut(b, cut, &c);
		int r = fn(arg, b, &c);
		if (r)
			return r;
	}
	return 0;
}

void bucket_table_stats(struct bucket_table *t, struct bucket_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->buckets = atomic_load_explicit(&t->nbuckets, memory_order_relaxed);
	if (atomic_load_explicit(&t->overflow, memory_order_acquire))
		out->buckets++;
	out->stacks = atomic_load_explicit(&t->nstacks, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&t->bytes, memory_order_relaxed);
	out->cap_hits = atomic_load_explicit(&t->cap_hits, memory_order_relaxed);
}
