// SPDX-License-Identifier: MIT
/*
 * inuse.c: in-use values from a process's live-object table (shared/live.h).
 *
 * The shim keeps one entry per tracked sampled object that is still allocated; the daemon
 * never writes the table. At a snapshot (inuse_apply_locked) every bucket's key is computed
 * as the shim computed it for the record (frames, size, rate), the table is scanned, and each
 * live entry counts one object in use for the bucket with its key, so
 * free_objects = alloc_objects - live and free_bytes = free_objects * size: pprof's
 * inuse_objects/inuse_space are then exactly the live sampled objects, scaled by the writers
 * as Go scales them. Entries whose record this daemon has not drained yet (ref seq at or past
 * the ring's next expected seq) are pending and not counted; entries whose key matches no
 * bucket (a record lost as corrupt, the bucket cap's overflow bucket) are counted as
 * unmatched; the shim's untracked counter says how many sampled objects it could not track
 * (the table full). All three go into the profile's accounting line.
 *
 * When the process exits, the final drain freezes the table into the buckets' free counters
 * (inuse_freeze_locked) and unmaps it: an exited session's in-use values are what the program
 * never freed (leaks at exit).
 *
 * The table is hostile memory: the scan copies each entry, re-reads its address and ref
 * to drop a torn one (inuse_read_entry), and trusts only this file's constants for the
 * geometry; a forged table can only misstate its own process's in-use values. The scan visits only the pages the file holds
 * (SEEK_DATA/SEEK_HOLE on a duplicate of the memfd): reading a hole through the mapping
 * would allocate it, and a forged `top` would then make every snapshot fill 512 MiB. And it
 * reads at most the slots its process's own samples justify (inuse_scan_budget): a full
 * table of 16 M slots costs a process with few samples what a small one does. A table backs
 * one session only (the registry's claims, taken in inuse_map). Left to others: the ring
 * readers' sequence numbers (ring.c), buckets (bucket.c), the writers (profile.c and the
 * formats).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../shared/live.h"
#include "session.h"

int inuse_map(struct session *s, int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < LLGO_LIVE_MAP_SIZE)
		return -EINVAL;
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	void *p = mmap(NULL, LLGO_LIVE_MAP_SIZE, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	const struct llgo_live_header *h = p;
	if (h->magic != LLGO_LIVE_MAGIC || h->version != LLGO_LIVE_VERSION) {
		munmap(p, LLGO_LIVE_MAP_SIZE);
		return -EPROTO;
	}
	int err = 0;
	int keep = fcntl(fd, F_DUPFD_CLOEXEC, 3); /* the scan seeks over the file's holes */
	if (keep < 0) {
		munmap(p, LLGO_LIVE_MAP_SIZE);
		return -errno;
	}
	pthread_mutex_lock(&s->lock);
	struct stat had;
	if (!session_is_live(s))
		err = -ESRCH;
	else if (s->live && s->live_fd >= 0 && fstat(s->live_fd, &had) == 0 &&
		 had.st_dev == st.st_dev && had.st_ino == st.st_ino)
		err = 1; /* the same table again (a reconnect to a session that has it) */
	else if (s->live || s->live_state != SESSION_LIVE_NONE)
		err = -EEXIST;
	/* one session per table: another process's session holding it refuses it here */
	else if ((err = claims_take(s->claims, (uint64_t)st.st_dev, (uint64_t)st.st_ino, s)) ==
		 0) {
		/* release: pairs with inuse_note_record_locked's acquire (the drain thread
		 * looks at s->live under its drain lock, not s->lock) */
		__atomic_store_n(&s->live, p, __ATOMIC_RELEASE);
		s->live_fd = keep;
		s->live_dev = (uint64_t)st.st_dev;
		s->live_ino = (uint64_t)st.st_ino;
		s->live_state = SESSION_LIVE_MAPPED;
	}
	pthread_mutex_unlock(&s->lock);
	if (err) {
		munmap(p, LLGO_LIVE_MAP_SIZE);
		close(keep);
	}
	return err > 0 ? 0 : err;
}

/* ---- key -> index map (open addressing over the buckets' keys) ------------------------ */

struct inuse_map {
	uint64_t *keys;
	uint32_t *idx; /* index + 1; 0 = empty */
	uint64_t mask;
};

static int inuse_map_init(struct inuse_map *m, size_t n)
{
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)n)
		cap <<= 1;
	m->keys = calloc(cap, sizeof(*m->keys));
	m->idx = calloc(cap, sizeof(*m->idx));
	m->mask = cap - 1;
	if (!m->keys || !m->idx) {
		free(m->keys);
		free(m->idx);
		return -ENOMEM;
	}
	return 0;
}

static void inuse_map_put(struct inuse_map *m, uint64_t key, uint32_t i)
{
	for (uint64_t h = (key * 0x9e3779b97f4a7c15ULL) >> 20;; h++) {
		uint64_t s = h & m->mask;
		if (!m->idx[s]) {
			m->keys[s] = key;
			m->idx[s] = i + 1;
			return;
		}
		if (m->keys[s] == key)
			return; /* same key twice (cannot happen for distinct buckets): first wins */
	}
}

static int64_t inuse_map_get(const struct inuse_map *m, uint64_t key)
{
	for (uint64_t h = (key * 0x9e3779b97f4a7c15ULL) >> 20;; h++) {
		uint64_t s = h & m->mask;
		if (!m->idx[s])
			return -1;
		if (m->keys[s] == key)
			return (int64_t)m->idx[s] - 1;
	}
}

/* ---- records whose bucket stack is not the shim's -------------------------------------- */

/*
 * The shim keys a live entry by the stack it walked (frame pointers). When the daemon buckets
 * a record under another stack (unwound from its stack copy, completed with a known tail in
 * auto mode, or marked truncated), the entry's key names no bucket: such records are noted
 * here by their reference (ring, seq) with the key of the bucket they went to. The scan looks
 * entries up here when their key matches no bucket, and keeps only the references it found
 * live (the rest were freed), so the map holds at most the live objects plus what was drained
 * since the last snapshot. Bounded: beyond INUSE_REKEY_MAX notes, new ones are not kept (their
 * objects count as unmatched).
 */
#define INUSE_REKEY_MAX (1u << 22)
#define INUSE_REKEY_NOTABLE (1u << 16)

struct inuse_rekey {
	uint64_t *refs; /* 0: empty */
	uint64_t *keys;
	size_t cap, n;
};

static void inuse_rekey_free(struct inuse_rekey *r)
{
	if (!r)
		return;
	free(r->refs);
	free(r->keys);
	free(r);
}

static struct inuse_rekey *inuse_rekey_new(size_t cap)
{
	struct inuse_rekey *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->cap = cap;
	r->refs = calloc(cap, sizeof(*r->refs));
	r->keys = calloc(cap, sizeof(*r->keys));
	if (!r->refs || !r->keys) {
		inuse_rekey_free(r);
		return NULL;
	}
	return r;
}

static void inuse_rekey_insert(struct inuse_rekey *r, uint64_t ref, uint64_t key)
{
	for (uint64_t h = (ref * 0x9e3779b97f4a7c15ULL) >> 17;; h++) {
		size_t i = (size_t)(h & (r->cap - 1));
		if (r->refs[i] == 0 || r->refs[i] == ref) {
			r->n += r->refs[i] == 0;
			r->refs[i] = ref;
			r->keys[i] = key;
			return;
		}
	}
}

static bool inuse_rekey_put(struct inuse_rekey **rp, uint64_t ref, uint64_t key)
{
	struct inuse_rekey *r = *rp;
	if (ref == 0)
		return false;
	if (!r || (r->n + 1) * 2 > r->cap) {
		size_t cap = r ? r->cap * 2 : 1024;
		if (r && r->n >= INUSE_REKEY_MAX)
			return false;
		struct inuse_rekey *g = inuse_rekey_new(cap);
		if (!g)
			return false;
		for (size_t i = 0; r && i < r->cap; i++)
			if (r->refs[i])
				inuse_rekey_insert(g, r->refs[i], r->keys[i]);
		inuse_rekey_free(r);
		*rp = r = g;
	}
	inuse_rekey_insert(r, ref, key);
	return true;
}

static bool inuse_rekey_get(const struct inuse_rekey *r, uint64_t ref, uint64_t *key)
{
	if (!r || ref == 0)
		return false;
	for (uint64_t h = (ref * 0x9e3779b97f4a7c15ULL) >> 17;; h++) {
		size_t i = (size_t)(h & (r->cap - 1));
		if (r->refs[i] == 0)
			return false;
		if (r->refs[i] == ref) {
			*key = r->keys[i];
			return true;
		}
	}
}

/*
 * By stack. A record whose bucket stack the daemon derived from the shim's own walk (the
 * walk stopped at a learned root and the known tail was added, or it was marked truncated)
 * goes to the same bucket as every other record of that walk, as long as what the daemon
 * knows does not change (a root learned later completes later records differently). So
 * the map from shim key to bucket key is kept once per stack; a record whose stack already
 * maps to another bucket key is noted by reference instead, which the scan consults first.
 * Without this, an FP program at rate 1 noted every record, and after INUSE_REKEY_MAX of
 * them without a snapshot the objects allocated next were shown as not in use.
 */
static bool inuse_stacks_note(struct session *s, uint64_t shim_key, uint64_t bucket_key)
{
	uint64_t k;
	if (shim_key == 0)
		return false; /* 0 marks an empty slot */
	if (inuse_rekey_get(s->stacks_base, shim_key, &k) || inuse_rekey_get(s->stacks, shim_key, &k))
		return k == bucket_key;
	return inuse_rekey_put(&s->stacks, shim_key, bucket_key);
}

bool inuse_note_record_locked(struct session *s, uint32_t ring_id, uint64_t seq,
			      uint64_t shim_key, uint64_t bucket_key, bool derived)
{
	if (shim_key == bucket_key)
		return true;
	if (derived && inuse_stacks_note(s, shim_key, bucket_key))
		return true;
	/* Before the table arrives (ADD_LIVE follows the first tracked sample) notes are kept
	 * for it; a process that never sends one keeps at most INUSE_REKEY_NOTABLE of them. */
	if (!__atomic_load_n(&s->live, __ATOMIC_ACQUIRE) && s->rekey &&
	    s->rekey->n >= INUSE_REKEY_NOTABLE) {
		inuse_rekey_free(s->rekey);
		s->rekey = NULL;
	}
	inuse_rekey_put(&s->rekey, LLGO_LIVE_REF(ring_id, seq), bucket_key);
	return false;
}

/* ---- the scan ---------------------------------------------------------------------------- */

/* Count the live entries of table h per key in keys[0..n); live[i] gets bucket i's count.
 * next_seq[ring] (nrings entries) is the seq each ring's reader expects next. */
/*
 * The next stretch of entries [*lo, *hi) at or after entry `from` (and before `end`) that lies
 * in pages the file holds. Reading a hole of a shared memfd through a mapping allocates a page
 * for it: a scan of the whole range a (possibly forged) top names would fill the file, up to
 * 512 MiB. SEEK_DATA/SEEK_HOLE find the pages the shim wrote; holes are empty slots.
 */
static bool inuse_next_data(int fd, uint64_t from, uint64_t end, uint64_t *lo, uint64_t *hi)
{
	const uint64_t esz = sizeof(struct llgo_live_entry), base = LLGO_LIVE_HEADER_SIZE;
	if (from >= end)
		return false;
	off_t d = lseek(fd, (off_t)(base + from * esz), SEEK_DATA);
	if (d < 0)
		return false; /* ENXIO: no data after from */
	off_t h = lseek(fd, d, SEEK_HOLE);
	if (h < 0)
		h = (off_t)LLGO_LIVE_MAP_SIZE;
	uint64_t a = ((uint64_t)d - base) / esz, b = ((uint64_t)h - base + esz - 1) / esz;
	if (a < from)
		a = from;
	if (b > end)
		b = end;
	if (a >= b)
		return false;
	*lo = a;
	*hi = b;
	return true;
}

/*
 * The scan's budget, in slots read: a base every table gets, plus INUSE_SCAN_SLOTS_PER_SAMPLE
 * per record of the process this daemon drained (bucketed or, over the uid's bucket memory,
 * counted). The shim inserts one entry per record and raises `top` only when every level is
 * full around an address, so the levels in use hold about 2 to 4.3 slots per entry (measured
 * from 1,000 to 8 M inserts of sequential, page-strided and random addresses): a real
 * process's table is read whole, with room to spare. The base (levels 0 to 6, 4 MiB) covers
 * what no record of this daemon's accounts for: a fork child's copies of its parent's placed
 * objects, a process taken back after a restart. A forged table (top at the last level, all
 * 16 M slots full) is read only as far as its process's own samples justify, whatever its
 * size, and the slots left are counted (`unscanned`).
 */
#define INUSE_SCAN_BASE_SLOTS ((uint64_t)LLGO_LIVE_LEVEL0 << 7)
#define INUSE_SCAN_SLOTS_PER_SAMPLE 16u
/* A run of data pages costs two lseeks besides its slots: charged as one page more. */
#define INUSE_SCAN_RUN_SLOTS ((uint64_t)(4096u / sizeof(struct llgo_live_entry)))

static uint64_t inuse_scan_budget(struct session *s)
{
	uint64_t samples = s->records +
			   atomic_load_explicit(&s->budget_dropped, memory_order_relaxed);
	if (samples > LLGO_LIVE_ENTRIES)
		samples = LLGO_LIVE_ENTRIES;
	return INUSE_SCAN_BASE_SLOTS + samples * INUSE_SCAN_SLOTS_PER_SAMPLE;
}

/*
 * One live entry's key and ref, consistent: false when the slot holds no object. The table
 * changes while we read it: addr, ref, key, then addr and ref again, every load acquire so
 * that each is read after the one before. The address alone cannot tell an object freed and
 * another placed at the same address in the same slot meanwhile (realloc in place does
 * that); ref is unique per record and serves as the version. Pairs with live.c's inserter:
 * a key read from a re-insertion (release store after its BUSY claim) makes the re-read of
 * addr see BUSY or later; a re-read addr from a re-insertion (release store after ref)
 * makes its new ref visible, so the ref check fails. A slot that keeps changing is read a
 * few times, then left out of this snapshot.
 */
static bool inuse_read_entry(const struct llgo_live_entry *e, uint64_t *key, uint64_t *ref)
{
	_Atomic uint64_t *ap = (_Atomic uint64_t *)&e->addr;
	for (int tries = 0; tries < 4; tries++) {
		uint64_t a = atomic_load_explicit(ap, memory_order_acquire);
		if (a <= LLGO_LIVE_BUSY)
			return false;
		*ref = __atomic_load_n(&e->ref, __ATOMIC_ACQUIRE);
		*key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
		if (atomic_load_explicit(ap, memory_order_acquire) == a &&
		    __atomic_load_n(&e->ref, __ATOMIC_RELAXED) == *ref)
			return true;
	}
	return false;
}

/*
 * The shim inserts an object's entry after it published the object's record (live.c), so
 * the newest record drained from a ring may be one whose entry is not in the table yet (its
 * thread between the two, or stopped there): its note must outlive a scan that did not see
 * the entry. Any older record of the ring was inserted before: its thread published the
 * next record only after that, and the drain's acquire of head makes the insert visible
 * (the guard keeps a signal handler's allocation from sampling in between). So at most one
 * note per ring is kept unseen, and a note absent below it is an object freed.
 */
static void inuse_rekey_keep_newest(const struct inuse_rekey *old, struct inuse_rekey **kept,
				    const uint64_t *next_seq, size_t nrings)
{
	for (size_t ring = 0; old && ring < nrings; ring++) {
		uint64_t key;
		uint64_t ref = LLGO_LIVE_REF(ring, next_seq[ring] - 1);
		if (next_seq[ring] > 1 && inuse_rekey_get(old, ref, &key))
			inuse_rekey_put(kept, ref, key);
	}
}

static int inuse_scan(const struct llgo_live_header *h, int fd, uint64_t budget,
		      const uint64_t *keys, size_t n, const uint64_t *next_seq, size_t nrings,
		      uint64_t *live, struct inuse_counts *c, struct inuse_rekey **rekey,
		      const struct inuse_rekey *stacks)
{
	struct inuse_rekey *kept = NULL; /* the notes of objects still live */
	struct inuse_map m;
	int err = inuse_map_init(&m, n);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++)
		inuse_map_put(&m, keys[i], (uint32_t)i);
	const struct llgo_live_entry *e =
		(const struct llgo_live_entry *)(const void *)((const unsigned char *)h +
							       LLGO_LIVE_HEADER_SIZE);
	uint32_t top = atomic_load_explicit(&((struct llgo_live_header *)h)->top,
					    memory_order_relaxed);
	if (top >= LLGO_LIVE_LEVELS)
		top = LLGO_LIVE_LEVELS - 1;
	uint64_t end = llgo_live_level_start(top + 1), lo, hi = 0, spent = 0;
	while (inuse_next_data(fd, hi, end, &lo, &hi)) {
		spent += INUSE_SCAN_RUN_SLOTS;
		if (spent >= budget || hi - lo > budget - spent) {
			/* over budget: read what is left of it, count the rest of the levels unread */
			uint64_t stop = spent >= budget ? lo : lo + (budget - spent);
			c->unscanned = end - stop;
			hi = stop;
		}
		spent += hi - lo;
		for (uint64_t i = lo; i < hi; i++) {
			uint64_t key, ref;
			if (!inuse_read_entry(&e[i], &key, &ref))
				continue;
			uint32_t ring = LLGO_LIVE_REF_RING(ref);
			uint64_t seq = LLGO_LIVE_REF_SEQ(ref);
			if (ring == LLGO_LIVE_RING_NONE)
				continue; /* a fork child's copy of its parent's object */
			if (ring >= nrings || seq >= next_seq[ring]) {
				c->pending++;
				continue;
			}
			int64_t b = inuse_map_get(&m, key);
			uint64_t k2;
			if (b < 0 && inuse_rekey_get(*rekey, ref, &k2)) {
				b = inuse_map_get(&m, k2);
				if (b >= 0)
					inuse_rekey_put(&kept, ref, k2);
			}
			if (b < 0 && inuse_rekey_get(stacks, key, &k2))
				b = inuse_map_get(&m, k2);
			if (b < 0) {
				c->unmatched++;
				continue;
			}
			live[b]++;
		}
		if (c->unscanned)
			break;
	}
	/* Notes are pruned to the objects seen live; a scan cut short saw not all of them. */
	if (c->unscanned) {
		inuse_rekey_free(kept);
	} else {
		inuse_rekey_keep_newest(*rekey, &kept, next_seq, nrings);
		inuse_rekey_free(*rekey);
		*rekey = kept;
	}
	c->untracked = atomic_load_explicit(&((struct llgo_live_header *)h)->untracked,
					    memory_order_relaxed);
	free(m.keys);
	free(m.idx);
	return 0;
}

/* The reader's next expected seq per ring id (the ring ids a session uses are small). */
static int inuse_ring_seqs(struct session *s, uint64_t **out, size_t *n)
{
	size_t max = 0;
	for (size_t i = 0; i < s->nrings_adopted; i++)
		if (s->rings[i].ring_id + 1u > max)
			max = s->rings[i].ring_id + 1u;
	uint64_t *v = calloc(max ? max : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < s->nrings_adopted; i++)
		v[s->rings[i].ring_id] = s->rings[i].next_seq;
	*out = v;
	*n = max;
	return 0;
}

static uint64_t inuse_sample_key(const struct psample *ps)
{
	const struct stack *st = ps->stack;
	return llgo_live_key(st ? st->pcs : NULL, st ? st->npcs : 0, ps->size, ps->rate);
}

/* The drain's new stack entries into the base the scans read (drain_lock held, no scan
 * running). An entry that cannot be moved (out of memory) stays in s->stacks. */
static void inuse_stacks_merge(struct session *s)
{
	struct inuse_rekey *n = s->stacks;
	if (!n)
		return;
	if (!s->stacks_base) {
		s->stacks_base = n;
		s->stacks = NULL;
		return;
	}
	bool all = true;
	for (size_t i = 0; i < n->cap; i++)
		if (n->refs[i] && !inuse_rekey_put(&s->stacks_base, n->refs[i], n->keys[i]))
			all = false;
	if (all) {
		inuse_rekey_free(n);
		s->stacks = NULL;
	}
}

int inuse_cut_locked(struct session *s, struct inuse_cut *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_lock(&s->lock);
	c->state = s->live_state;
	c->h = s->live;
	c->fd = s->live_fd;
	c->frozen = s->live_frozen;
	pthread_mutex_unlock(&s->lock);
	if (c->state != SESSION_LIVE_MAPPED)
		return 0;
	/* The notes of records drained so far go with the cut; the drain starts new ones. */
	c->rekey = s->rekey;
	s->rekey = NULL;
	inuse_stacks_merge(s);
	c->stacks = s->stacks_base;
	c->budget = inuse_scan_budget(s);
	return inuse_ring_seqs(s, &c->seqs, &c->nrings);
}

int inuse_apply_cut(struct session *s, struct inuse_cut *cut, struct profile *p)
{
	if (cut->state == SESSION_LIVE_FROZEN) {
		p->meta.inuse = PROFILE_INUSE_TRACKED;
		p->meta.inuse_counts = cut->frozen;
		return 0; /* the buckets' free counters hold it */
	}
	if (cut->state != SESSION_LIVE_MAPPED) {
		p->meta.inuse = p->meta.sampled || p->nsamples ? PROFILE_INUSE_UNTRACKED : 0;
		return 0;
	}
	if (!cut->seqs)
		return -ENOMEM;
	uint64_t *keys = calloc(p->nsamples + 1, sizeof(*keys));
	uint64_t *live = calloc(p->nsamples + 1, sizeof(*live));
	int err = (!keys || !live) ? -ENOMEM : 0;
	if (err)
		goto out;
	for (size_t i = 0; i < p->nsamples; i++)
		keys[i] = inuse_sample_key(&p->samples[i]);
	struct inuse_counts c = { 0 };
	err = inuse_scan(cut->h, cut->fd, cut->budget, keys, p->nsamples, cut->seqs, cut->nrings,
			 live, &c, &cut->rekey, cut->stacks);
	if (err)
		goto out;
	for (size_t i = 0; i < p->nsamples; i++) {
		struct psample *ps = &p->samples[i];
		uint64_t l = live[i] < ps->alloc_objects ? live[i] : ps->alloc_objects;
		ps->free_objects = ps->alloc_objects - l;
		ps->free_bytes = ps->alloc_bytes - (ps->size && ps->stack && ps->stack->npcs
							    ? l * ps->size
							    : (ps->alloc_objects
								       ? ps->alloc_bytes / ps->alloc_objects * l
								       : 0));
	}
	p->meta.inuse = PROFILE_INUSE_TRACKED;
	p->meta.inuse_counts = c;
out:
	free(keys);
	free(live);
	(void)s;
	return err;
}

void inuse_cut_end_locked(struct session *s, struct inuse_cut *c)
{
	/* The cut's notes (pruned to the objects still live when the scan ran it) and those the
	 * drain made since, together again: the smaller set goes into the larger. */
	struct inuse_rekey *a = c->rekey, *b = s->rekey;
	if (a && b && a->n < b->n) {
		struct inuse_rekey *t = a;
		a = b;
		b = t;
	}
	for (size_t i = 0; a && b && i < b->cap; i++)
		if (b->refs[i])
			inuse_rekey_put(&a, b->refs[i], b->keys[i]);
	if (a && b)
		inuse_rekey_free(b);
	s->rekey = a ? a : b;
	c->rekey = NULL;
	free(c->seqs);
	c->seqs = NULL;
}

int inuse_apply_locked(struct session *s, struct profile *p)
{
	struct inuse_cut c;
	int err = inuse_cut_locked(s, &c);
	if (!err)
		err = inuse_apply_cut(s, &c, p);
	inuse_cut_end_locked(s, &c);
	return err;
}

/* Bucket visitor: collect keys and bucket pointers. */
struct inuse_freeze_ctx {
	struct bucket **b;
	uint64_t *keys;
	size_t n, cap;
	int err;
};

static int inuse_freeze_visit(void *arg, const struct bucket *b)
{
	struct inuse_freeze_ctx *c = arg;
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 256;
		struct bucket **nb = realloc(c->b, nc * sizeof(*nb));
		if (nb)
			c->b = nb;
		uint64_t *nk = nb ? realloc(c->keys, nc * sizeof(*nk)) : NULL;
		if (nk)
			c->keys = nk;
		if (!nb || !nk) {
			c->err = -ENOMEM;
			return 1;
		}
		c->cap = nc;
	}
	const struct stack *st = b->stack;
	c->keys[c->n] = llgo_live_key(st ? st->pcs : NULL, st ? st->npcs : 0, b->size, b->rate);
	c->b[c->n++] = (struct bucket *)b; /* written through bucket_table_set_free (a cut) */
	return 0;
}

void inuse_freeze_locked(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	struct llgo_live_header *h = s->live;
	int fd = s->live_fd;
	s->live = NULL;
	s->live_fd = -1;
	pthread_mutex_unlock(&s->lock);
	if (!h)
		return;
	struct inuse_freeze_ctx c = { 0 };
	uint64_t *seqs = NULL, *live = NULL;
	size_t nrings = 0;
	struct inuse_counts cnt = { 0 };
	bucket_table_foreach(s->buckets, inuse_freeze_visit, &c);
	int err = c.err;
	if (!err)
		err = inuse_ring_seqs(s, &seqs, &nrings);
	if (!err && !(live = calloc(c.n + 1, sizeof(*live))))
		err = -ENOMEM;
	inuse_stacks_merge(s);
	if (!err)
		err = inuse_scan(h, fd, inuse_scan_budget(s), c.keys, c.n, seqs, nrings, live,
				 &cnt, &s->rekey, s->stacks_base);
	inuse_rekey_free(s->rekey);
	s->rekey = NULL;
	if (!err) {
		for (size_t i = 0; i < c.n; i++) {
			struct bucket *b = c.b[i];
			uint64_t ao = atomic_load_explicit(&b->alloc_objects, memory_order_relaxed);
			uint64_t ab = atomic_load_explicit(&b->alloc_bytes, memory_order_relaxed);
			uint64_t l = live[i] < ao ? live[i] : ao;
			uint64_t fb = b->size && b->stack && b->stack->npcs
					      ? (ao - l) * b->size
					      : (ao ? ab - ab / ao * l : 0);
			bucket_table_set_free(s->buckets, b, ao - l, fb);
		}
	}
	pthread_mutex_lock(&s->lock);
	s->live_frozen = cnt;
	/* Without a scan (out of memory) the in-use values stay unknown: say untracked. */
	s->live_state = err ? SESSION_LIVE_NONE : SESSION_LIVE_FROZEN;
	pthread_mutex_unlock(&s->lock);
	munmap(h, LLGO_LIVE_MAP_SIZE);
	close(fd);
	claims_give(s->claims, s->live_dev, s->live_ino, s);
	free(c.b);
	free(c.keys);
	free(seqs);
	free(live);
}

void inuse_release(struct session *s)
{
	inuse_rekey_free(s->rekey);
	s->rekey = NULL;
	inuse_rekey_free(s->stacks);
	inuse_rekey_free(s->stacks_base);
	s->stacks = s->stacks_base = NULL;
	s->stacks_gen++;
	if (s->live) {
		munmap(s->live, LLGO_LIVE_MAP_SIZE);
		s->live = NULL;
	}
	if (s->live_fd >= 0) {
		close(s->live_fd);
		s->live_fd = -1;
		claims_give(s->claims, s->live_dev, s->live_ino, s);
	}
}
