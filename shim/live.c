// SPDX-License-Identifier: MIT
/*
 * live.c: the shim's side of the live-object table (shared/live.h) and the free slow path.
 * (About 640 lines: placement, the table and the free path share one set of invariants.)
 *
 * Which frees are looked at: those of p with p & live_mask == 0. realloc and
 * malloc_usable_size test the mask (override.c: one test with the mask in memory, one branch);
 * free jumps through an entry that live_on_mask's hook moves with the mask (the real free
 * while it is ~0, then a test of the low 12 bits, then this file for every pointer):
 *   ~0     nothing tracked yet: only NULL matches (realloc and malloc_usable_size);
 *   0xfff  objects sampled at a rate > 1 are tracked: they are placed on a page boundary
 *          (live_place), so only page-aligned pointers come here;
 *   0      rate 1 was used: every allocation is tracked where it lies, every free comes here.
 * The mask only ever loses bits (fetch_and). It is stored before the first object it
 * concerns is inserted, in the allocating thread, before the pointer is returned: whatever
 * hands the pointer to a freeing thread orders the store before that thread's free. Rate 1
 * leaves the mask at 0 for the rest of the process (objects tracked at unaligned addresses
 * may be live long after the rate changed).
 *
 * Placement: a placed object lies in the shim's own arena (below, offset LIVE_OFF_ARENA) or
 * `off` bytes inside a real block of size + off bytes (the offset is kept in its entry, high
 * bits of size): free, realloc and malloc_usable_size give the real allocator the real block,
 * or the arena its run. A placed object must therefore always be in the table while the
 * program holds it (arena objects are also known by their address); one that cannot be
 * inserted is moved to a plain block before the program sees it (sample.c).
 *
 * The table is created on the first tracked sample (memfd, sealed, sent to the daemon with
 * LLGO_MSG_ADD_LIVE); entries are inserted after the sample's record was pushed, and removed
 * before the real block is freed, so an address the allocator hands out again is never found
 * stale. Inserts claim slots with CAS, removes store a tombstone: no lock, no allocation, no
 * syscall on any path a free can take. A sample that finds no slot is counted untracked. The
 * one wait: threads whose first tracked sample meets the table's creation by another thread
 * yield until it is made (bounded), once in the process's life.
 *
 * After fork the child must not write its parent's table (shared memory), nor trust it: the
 * parent goes on freeing and placing objects in it while the child runs. The offsets of
 * placed objects are therefore also kept in private memory (live_shadow), which fork copies
 * at the instant of the clone; the child builds a table of its own from that copy, with no
 * record reference, and sends it to its own session on its first tracked sample. What is left to others: the sampling decision and the slow paths that
 * place (sample.c), the fast paths (override.c), the connection (attach.c).
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* A fork child's state is settled before the table is used (lifecycle.c, live_fork_child). */
static inline void live_settle(void)
{
	lifecycle_settled(&llgo_heap_tls);
}

llgo_hidden _Atomic uintptr_t live_mask = ~(uintptr_t)0;

#define LIVE_CREATE_YIELDS 100000

enum { LIVE_NONE = 0, LIVE_CREATING = 1, LIVE_READY = 2, LIVE_FAILED = 3 };

static _Atomic int live_state;
static struct llgo_live_header *_Atomic live_hdr;
/* Samples not tracked while the table was being made by another thread; folded into the
 * header's counters by the next insert. */
static _Atomic uint64_t live_lost, live_lost_bytes;

/* The real allocator, for placement (override.c; NULL in the fully static archive). */
static void *(*live_real_malloc)(size_t);
static void (*live_real_free)(void *);
static size_t (*live_real_usable)(void *);
static void *(*live_real_realloc)(void *, size_t);
/* The table was made in a fork child and not yet sent to the daemon. */
static _Atomic bool live_unsent;

static void (*_Atomic live_mask_hook)(uintptr_t mask);

void live_on_mask(void (*fn)(uintptr_t mask))
{
	atomic_store_explicit(&live_mask_hook, fn, memory_order_relaxed);
}

void live_set_allocator(void *(*malloc_fn)(size_t), void (*free_fn)(void *),
			size_t (*usable_fn)(void *), void *(*realloc_fn)(void *, size_t))
{
	live_real_realloc = realloc_fn;
	live_real_malloc = malloc_fn;
	live_real_free = free_fn;
	live_real_usable = usable_fn;
}

static struct llgo_live_entry *live_entries(struct llgo_live_header *h)
{
	return (struct llgo_live_entry *)(void *)((unsigned char *)h + LLGO_LIVE_HEADER_SIZE);
}

/*
 * The shadow: for each slot of the shared table that holds a placed object (offset != 0),
 * that object's address | offset (an object on a page boundary: the low 12 bits are free), at
 * the same index, in private anonymous memory (LLGO_LIVE_ENTRIES words, reserved, touched as
 * the table is). Written only by the thread that holds the slot (a CAS on the shared entry
 * gives it): set after the entry's fields, cleared on removal, one 8-byte store each, so a
 * fork child's copy holds every placed object its parent held when the clone happened (an
 * insert or a removal in flight concerns a block the child's program never sees).
 */
#define LIVE_SHADOW_SIZE ((size_t)LLGO_LIVE_ENTRIES * sizeof(uint64_t))
static _Atomic uint64_t *live_shadow;

/* The inherited shadow of a fork child that could make no table of its own (live_fork_child),
 * and the parent's top level then. */
static _Atomic uint64_t *live_fork_shadow;
static uint32_t live_fork_top;

static inline void live_shadow_set(uint64_t slot, uint64_t addr, uint64_t size)
{
	uint32_t off = LLGO_LIVE_OFF(size);
	/* (arena objects need no offset: their address says where they are) */
	if (off && off < LIVE_PAGE && live_shadow)
		atomic_store_explicit(&live_shadow[slot], addr | off, memory_order_relaxed);
}

static inline void live_shadow_clear(uint64_t slot, uint64_t size)
{
	uint32_t off = LLGO_LIVE_OFF(size);
	if (off && off < LIVE_PAGE && live_shadow)
		atomic_store_explicit(&live_shadow[slot], 0, memory_order_relaxed);
}

const struct llgo_live_header *live_table(void)
{
	live_settle();
	return atomic_load_explicit(&live_hdr, memory_order_acquire);
}

/* ---- creation (slow path, under the thread's guard) ------------------------------------ */

/* The table's memfd, kept open so that a fork child can send its copy's and a reconnect (or
 * a daemon taking the process back, adopt.c) can have it again; with its identity, so that a
 * number the program reused is never sent. */
static int live_fd = -1;
static struct attach_fd live_fdid = { .fd = -1 };

static void live_send(int fd)
{
	if (fd != live_fdid.fd || !attach_fd_owned(&live_fdid))
		return;
	struct llgo_msg_header m;
	attach_header(&m, LLGO_MSG_ADD_LIVE, sizeof(m));
	link_send_fd(&m, sizeof(m), fd);
}

void live_resend(void)
{
	live_settle();
	if (atomic_load_explicit(&live_state, memory_order_acquire) == LIVE_READY &&
	    !atomic_load_explicit(&live_unsent, memory_order_relaxed) && live_fd >= 0)
		live_send(live_fd);
}

static void live_send_table(struct llgo_live_header *h)
{
	(void)h;
	if (live_fd >= 0)
		live_send(live_fd);
}

/* A formatted table in a new sealed memfd (live_fd); not sent. */
static struct llgo_live_header *live_make(void)
{
	int fd = memfd_create("llgo-heap-live", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return NULL;
	void *mem = MAP_FAILED;
	if (ftruncate(fd, (off_t)LLGO_LIVE_MAP_SIZE) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		goto out;
	mem = mmap(NULL, LLGO_LIVE_MAP_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
		   fd, 0);
	if (mem == MAP_FAILED)
		goto out;
	void *shadow = mmap(NULL, LIVE_SHADOW_SIZE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (shadow == MAP_FAILED) {
		munmap(mem, LLGO_LIVE_MAP_SIZE);
		goto out;
	}
	live_shadow = shadow;
	struct llgo_live_header *h = mem;
	h->magic = LLGO_LIVE_MAGIC;
	h->version = LLGO_LIVE_VERSION;
	h->header_size = LLGO_LIVE_HEADER_SIZE;
	h->levels = LLGO_LIVE_LEVELS;
	h->level0 = LLGO_LIVE_LEVEL0;
	live_fd = fd;
	struct stat st;
	if (fstat(fd, &st) == 0) {
		live_fdid.fd = fd;
		live_fdid.dev = (uint64_t)st.st_dev;
		live_fdid.ino = (uint64_t)st.st_ino;
	}
	return h;
out:
	close(fd);
	return NULL;
}

static struct llgo_live_header *live_create(void)
{
	struct llgo_live_header *h = live_make();
	/* A failed send leaves the table working in-process (frees stay correct); the daemon
	 * then reports that frees were not tracked. */
	if (h)
		live_send(live_fd);
	return h;
}

static struct llgo_live_header *live_get_first(void);

/* The table, created on first use; NULL while another thread creates it or after a failure. */
static inline struct llgo_live_header *live_get(void)
{
	live_settle();
	struct llgo_live_header *h = atomic_load_explicit(&live_hdr, memory_order_acquire);
	if (llgo_likely(h != NULL))
		return atomic_load_explicit(&live_state, memory_order_relaxed) == LIVE_READY ? h
											: NULL;
	return live_get_first();
}

static llgo_noinline struct llgo_live_header *live_get_first(void)
{
	struct llgo_live_header *h;
	/* no table (memfd_create, mmap) once the program forbade syscalls (lifecycle.c) */
	if (link_state() == LLGO_SHIM_OFF)
		return NULL;
	int expect = LIVE_NONE;
	if (!atomic_compare_exchange_strong_explicit(&live_state, &expect, LIVE_CREATING,
						     memory_order_acq_rel, memory_order_relaxed)) {
		/* Another thread is creating it (a few syscalls): wait for it, a bounded number
		 * of yields, once in the process's life, rather than leave this object
		 * untracked (at rate 1 every thread's first sample meets here). */
		for (int i = 0; i < LIVE_CREATE_YIELDS &&
				atomic_load_explicit(&live_state, memory_order_acquire) ==
					LIVE_CREATING;
		     i++)
			sched_yield();
		return atomic_load_explicit(&live_hdr, memory_order_acquire);
	}
	h = live_create();
	/* release: pairs with the acquire loads of live_hdr (formatted header, mapping) */
	atomic_store_explicit(&live_hdr, h, memory_order_release);
	atomic_store_explicit(&live_state, h ? LIVE_READY : LIVE_FAILED, memory_order_release);
	return h;
}

/* ---- placement (slow path, under the thread's guard) ------------------------------------ */

bool live_can_place(void)
{
	return live_real_malloc && live_get() != NULL;
}

/*
 * The arena: sampled objects of at most LIVE_ARENA_MAXPG pages are placed in whole pages of
 * memory the shim owns (one reservation, opened as used) instead of inside a real block.
 * The real allocator never sees them: no arena lock of glibc's is taken on the sampled path
 * (fork() takes them all, so busy threads that sampled stalled it), and its heap is not
 * fragmented by odd-sized blocks and tails. Runs of n pages are kept on a free list per n
 * (Treiber stacks of page indices with a tag against ABA; the next index of each free run and
 * the length of each object live in a side table), and made by bumping a page cursor when the
 * list is empty. Freed runs stay resident for reuse (their contents are stale: calloc clears
 * its object), up to a 32nd of the pages in objects plus LIVE_ARENA_KEEP (1 MiB): a run
 * freed beyond that is given back first (MADV_DONTNEED: zero when next used), so that the
 * arena's resident pages follow the live sampled objects, not their peak. The floor is what
 * keeps short-lived samples of mixed sizes (free lists are per page count) from paying a
 * madvise and a fault per page each. Everything is private
 * memory: a fork child inherits the arena and its lists as they were at the clone, and frees
 * its inherited objects by address alone. Objects placed
 * here carry the offset LIVE_OFF_ARENA.
 */
#define LIVE_ARENA_PAGES (1u << 18) /* 1 GiB reserved */
#define LIVE_ARENA_MAXPG 16u
#define LIVE_ARENA_SIZE ((size_t)LIVE_ARENA_PAGES * LIVE_PAGE)

struct live_arena_meta {
	_Atomic uint32_t next; /* a free run: the next run's index + 1 (0: none) */
	_Atomic uint32_t len;  /* pages of the run that starts here */
};

static unsigned char *_Atomic live_arena;
static struct live_arena_meta *live_arena_meta;
static _Atomic uint32_t live_arena_top;
/* Pages made writable so far: the reservation is PROT_NONE (no commit charge under strict
 * overcommit) and opens LIVE_ARENA_STEP pages at a time as the cursor passes. */
#define LIVE_ARENA_STEP 256u
static _Atomic uint32_t live_arena_rw;
static _Atomic uint64_t live_arena_free[LIVE_ARENA_MAXPG + 1]; /* tag << 32 | index + 1 */
/* Pages in objects given out, and in free runs (approximate under races: a policy, not an
 * invariant). */
static _Atomic uint32_t live_arena_busy, live_arena_idle;
#define LIVE_ARENA_KEEP 256u
static _Atomic int live_arena_state;

/* The reservation, made once (under the guard; a failure leaves placement to live_place's
 * real blocks). */
static unsigned char *live_arena_get(void)
{
	unsigned char *a = atomic_load_explicit(&live_arena, memory_order_acquire);
	if (llgo_likely(a != NULL))
		return a;
	int expect = 0;
	if (!atomic_compare_exchange_strong_explicit(&live_arena_state, &expect, 1,
						     memory_order_acq_rel, memory_order_relaxed))
		return NULL; /* made by another thread just now, or failed for good */
	/* The side table first, then the pages: the opened part of the arena and the side
	 * table are one mapping (each one more is copied by every fork). */
	size_t meta = LIVE_ARENA_PAGES * sizeof(struct live_arena_meta);
	unsigned char *md = mmap(NULL, meta + LIVE_ARENA_SIZE, PROT_NONE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (md == MAP_FAILED)
		return NULL;
	if (mprotect(md, meta, PROT_READ | PROT_WRITE) != 0) {
		munmap(md, meta + LIVE_ARENA_SIZE);
		return NULL;
	}
	unsigned char *m = md + meta;
	live_arena_meta = (struct live_arena_meta *)(void *)md;
	/* release: the meta pointer before the arena (readers load the arena with acquire) */
	atomic_store_explicit(&live_arena, (unsigned char *)m, memory_order_release);
	return m;
}

static inline bool live_in_arena(const void *p)
{
	unsigned char *a = atomic_load_explicit(&live_arena, memory_order_acquire);
	return a && (uintptr_t)p - (uintptr_t)a < LIVE_ARENA_SIZE;
}

static void *live_arena_alloc(size_t size)
{
	size_t n = (size + LIVE_PAGE - 1) / LIVE_PAGE;
	if (n == 0)
		n = 1;
	if (n > LIVE_ARENA_MAXPG)
		return NULL;
	unsigned char *a = live_arena_get();
	if (!a)
		return NULL;
	_Atomic uint64_t *head = &live_arena_free[n];
	uint64_t h = atomic_load_explicit(head, memory_order_acquire);
	uint32_t idx = UINT32_MAX;
	while ((uint32_t)h) {
		uint32_t i = (uint32_t)h - 1;
		uint32_t nx = atomic_load_explicit(&live_arena_meta[i].next, memory_order_relaxed);
		uint64_t nh = (((h >> 32) + 1) << 32) | nx;
		/* acquire: the run's next index and contents, published by its push */
		if (atomic_compare_exchange_weak_explicit(head, &h, nh, memory_order_acquire,
							  memory_order_acquire)) {
			idx = i;
			atomic_fetch_sub_explicit(&live_arena_idle, (uint32_t)n,
						  memory_order_relaxed);
			break;
		}
	}
	if (idx == UINT32_MAX) {
		uint32_t top = atomic_fetch_add_explicit(&live_arena_top, (uint32_t)n,
							 memory_order_relaxed);
		if (top > LIVE_ARENA_PAGES - n)
			return NULL; /* full: the cursor stays past the end */
		uint32_t end = top + (uint32_t)n;
		if (end > atomic_load_explicit(&live_arena_rw, memory_order_acquire)) {
			/* Threads that race here open overlapping steps: harmless. */
			uint32_t lo = top / LIVE_ARENA_STEP * LIVE_ARENA_STEP;
			uint32_t hi = (end + LIVE_ARENA_STEP - 1) / LIVE_ARENA_STEP * LIVE_ARENA_STEP;
			if (mprotect(a + (size_t)lo * LIVE_PAGE, (size_t)(hi - lo) * LIVE_PAGE,
				     PROT_READ | PROT_WRITE) != 0)
				return NULL; /* these pages are lost to the cursor; harmless */
			uint32_t rw = atomic_load_explicit(&live_arena_rw, memory_order_relaxed);
			while (rw < hi && !atomic_compare_exchange_weak_explicit(
						  &live_arena_rw, &rw, hi, memory_order_release,
						  memory_order_relaxed))
				;
		}
		idx = top;
	}
	atomic_store_explicit(&live_arena_meta[idx].len, (uint32_t)n, memory_order_relaxed);
	atomic_fetch_add_explicit(&live_arena_busy, (uint32_t)n, memory_order_relaxed);
	return a + (size_t)idx * LIVE_PAGE;
}

static size_t live_arena_usable(const void *p)
{
	unsigned char *a = atomic_load_explicit(&live_arena, memory_order_acquire);
	size_t idx = ((uintptr_t)p - (uintptr_t)a) / LIVE_PAGE;
	return (size_t)atomic_load_explicit(&live_arena_meta[idx].len, memory_order_relaxed) *
	       LIVE_PAGE;
}

static void live_arena_release(void *p)
{
	unsigned char *a = atomic_load_explicit(&live_arena, memory_order_acquire);
	uint32_t idx = (uint32_t)(((uintptr_t)p - (uintptr_t)a) / LIVE_PAGE);
	uint32_t n = atomic_load_explicit(&live_arena_meta[idx].len, memory_order_relaxed);
	if (n == 0 || n > LIVE_ARENA_MAXPG)
		return; /* not an object's first page: never given out, left alone */
	uint32_t busy = atomic_fetch_sub_explicit(&live_arena_busy, n, memory_order_relaxed) - n;
	uint32_t idle = atomic_load_explicit(&live_arena_idle, memory_order_relaxed);
	if (idle > busy / 32 + LIVE_ARENA_KEEP && link_state() != LLGO_SHIM_OFF)
		(void)madvise(p, (size_t)n * LIVE_PAGE, MADV_DONTNEED); /* no syscall once sandboxed */
	atomic_fetch_add_explicit(&live_arena_idle, n, memory_order_relaxed);
	_Atomic uint64_t *head = &live_arena_free[n];
	uint64_t h = atomic_load_explicit(head, memory_order_relaxed), nh;
	do {
		atomic_store_explicit(&live_arena_meta[idx].next, (uint32_t)h, memory_order_relaxed);
		nh = (((h >> 32) + 1) << 32) | (idx + 1u);
		/* release: the next index (and the run's last contents) before it is visible */
	} while (!atomic_compare_exchange_weak_explicit(head, &h, nh, memory_order_release,
							memory_order_relaxed));
}

/* The bytes the program may use from p, an object placed at offset off (LIVE_OFF_ARENA: in the
 * arena), and its release. */
static size_t live_block_usable(void *p, uint32_t off)
{
	if (off == LIVE_OFF_ARENA)
		return live_arena_usable(p);
	return live_real_usable((unsigned char *)p - off) - off;
}

/*
 * A block whose address is on a page boundary: the real allocator's block of size + 4080
 * bytes (its blocks are 16-aligned, so a page boundary lies within the first 4080 bytes),
 * used from that boundary on. The offset is kept in the object's entry, so free, realloc and
 * malloc_usable_size find the real block. (memalign(4096) would do without an offset, but
 * glibc then splits a lead and a tail off every such block and the heap fragments: measured
 * on the live mixed-size benchmark, about four times the resident memory of this.)
 */
/* llgo-heap attach: the real allocator's page-aligned blocks (see internal.h). */
static void *(*_Atomic live_placer)(size_t size);

void live_set_placer(void *(*fn)(size_t size))
{
	atomic_store_explicit(&live_placer, fn, memory_order_release);
}

void *live_place(size_t size, uint32_t *off)
{
	void *(*placer)(size_t) = atomic_load_explicit(&live_placer, memory_order_acquire);
	if (placer) {
		*off = 0;
		return placer(size);
	}
	void *arena = live_arena_alloc(size);
	if (arena) {
		*off = LIVE_OFF_ARENA;
		return arena;
	}
	size_t total;
	if (__builtin_add_overflow(size, (size_t)(LIVE_PAGE - 16), &total)) {
		errno = ENOMEM;
		return NULL;
	}
	unsigned char *base = live_real_malloc(total);
	if (!base)
		return NULL;
	uintptr_t p = ((uintptr_t)base + LIVE_PAGE - 1) & ~(uintptr_t)(LIVE_PAGE - 1);
	*off = (uint32_t)(p - (uintptr_t)base);
	/* Give the unused tail back: glibc shrinks in place and frees the rest. An allocator
	 * that moves the block instead gets its copy back and the unshrunk block is made again. */
	size_t keep = *off + size;
	if (live_real_realloc && keep && keep + 64 <= total) {
		unsigned char *b2 = live_real_realloc(base, keep);
		if (b2 != base) {
			if (b2)
				live_real_free(b2);
			else
				return (void *)p; /* failed: the block is untouched */
			base = live_real_malloc(total);
			if (!base)
				return NULL;
			p = ((uintptr_t)base + LIVE_PAGE - 1) & ~(uintptr_t)(LIVE_PAGE - 1);
			*off = (uint32_t)(p - (uintptr_t)base);
		}
	}
	return (void *)p;
}

void live_unplace(void *p, uint32_t off)
{
	if (off == LIVE_OFF_ARENA)
		live_arena_release(p);
	else
		live_real_free((unsigned char *)p - off);
}

size_t live_placed_usable(void *p, uint32_t off)
{
	return live_block_usable(p, off);
}

uint32_t live_inherited_off(const void *p)
{
	return live_in_arena(p) ? LIVE_OFF_ARENA : 0;
}

void *live_malloc_real(size_t size)
{
	return live_real_malloc(size);
}

void live_free_real(void *p)
{
	live_real_free(p);
}

size_t live_usable_real(void *p)
{
	return live_real_usable(p);
}

/* ---- insert, remove --------------------------------------------------------------------- */

/* Claim a free slot for addr in level k's window and fill it. */
/*
 * Pages of the table this process ever wrote an entry into, one bit each (shim memory). A
 * slot in a page without its bit is empty, and is not read: reading a hole of the shared file
 * through the mapping allocates it, and the lookups of a table whose top went up would
 * otherwise fill every level they probe. The bit is set before the entry is written; a lookup
 * happens after its object's insert, so it sees the bit.
 */
#define LIVE_ENTRIES_PER_PAGE (4096u / sizeof(struct llgo_live_entry))
static _Atomic uint64_t live_pages[(LLGO_LIVE_ENTRIES / LIVE_ENTRIES_PER_PAGE + 63) / 64];

static inline bool live_page_used(uint64_t slot)
{
	uint64_t pg = slot / LIVE_ENTRIES_PER_PAGE;
	return atomic_load_explicit(&live_pages[pg / 64], memory_order_relaxed) &
	       (1ull << (pg % 64));
}

static inline void live_page_mark(uint64_t slot)
{
	uint64_t pg = slot / LIVE_ENTRIES_PER_PAGE, bit = 1ull << (pg % 64);
	if (!(atomic_load_explicit(&live_pages[pg / 64], memory_order_relaxed) & bit))
		atomic_fetch_or_explicit(&live_pages[pg / 64], bit, memory_order_relaxed);
}

static inline __attribute__((always_inline)) bool
live_insert_level(struct llgo_live_header *h, uint32_t k, uint64_t addr, uint64_t key,
		  uint64_t ref, uint64_t size, uint32_t probes)
{
	struct llgo_live_entry *e = live_entries(h);
	uint64_t base = llgo_live_level_start(k), mask = ((uint64_t)LLGO_LIVE_LEVEL0 << k) - 1;
	uint64_t home = llgo_live_home(addr, k);
	for (uint32_t i = 0; i < probes; i++) {
		uint64_t slot = base + ((home + i) & mask);
		struct llgo_live_entry *s = &e[slot];
		uint64_t a = live_page_used(slot)
				     ? atomic_load_explicit(&s->addr, memory_order_relaxed)
				     : LLGO_LIVE_EMPTY;
		if (a != LLGO_LIVE_EMPTY && a != LLGO_LIVE_TOMB)
			continue;
		live_page_mark(slot);
		if (!atomic_compare_exchange_strong_explicit(&s->addr, &a, LLGO_LIVE_BUSY,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		/* Seqlock-like, with ref (unique per record) as the version, for the daemon's
		 * scan (inuse_read_entry), which reads addr, ref, key, then addr and ref again:
		 * release on key orders the BUSY claim before it, release on ref orders key. */
		__atomic_store_n(&s->key, key, __ATOMIC_RELEASE);
		__atomic_store_n(&s->ref, ref, __ATOMIC_RELEASE);
		s->size = size;
		/* release: the fields above before the address (daemon's acquire) */
		atomic_store_explicit(&s->addr, addr, memory_order_release);
		live_shadow_set(slot, addr, size);
		return true;
	}
	return false;
}

/*
 * A counting filter in front of the table, in the shim's own memory: how many tracked objects
 * hash to each counter. free's slow path is taken by every page-aligned pointer, tracked or
 * not, and the allocator hands a page-aligned block out again and again once a sampled block
 * there was freed (glibc's tcache reuses it for every malloc of its size): a zero counter
 * answers "not tracked" with one load instead of a search of every level. A counter is
 * raised before its object's entry is inserted and lowered after the entry is removed, so a
 * tracked object's counter is never zero while the object is live (the free of an object
 * happens after its insert).
 */
static inline __attribute__((always_inline)) bool
live_insert_slot(struct llgo_live_header *h, uint64_t addr, uint64_t key, uint64_t ref,
		 uint64_t size);

#define LIVE_FILTER_BITS 13u
static _Atomic uint32_t live_filter[1u << LIVE_FILTER_BITS];

static inline _Atomic uint32_t *live_filter_at(uint64_t addr)
{
	return &live_filter[((addr >> 4) * 0x9e3779b97f4a7c15ULL) >> (64u - LIVE_FILTER_BITS)];
}

/* The filter is kept while live_mask != 0. Once rate 1 made every free look (mask 0, which
 * never comes back), every lookup searches anyway: its two locked updates per object are
 * skipped for good, and counts left over stay harmless. acquire, pairing with the release
 * that cleared the mask: an inserter that saw 0 (and did not count) happens before the lookup
 * of its object, which then sees 0 too. */
static inline bool live_filter_on(void)
{
	return atomic_load_explicit(&live_mask, memory_order_acquire) != 0;
}

static inline __attribute__((always_inline)) bool
live_insert(struct llgo_live_header *h, uint64_t addr, uint64_t key, uint64_t ref, uint64_t size)
{
	bool f = live_filter_on();
	if (f)
		atomic_fetch_add_explicit(live_filter_at(addr), 1, memory_order_relaxed);
	if (live_insert_slot(h, addr, key, ref, size))
		return true;
	if (f)
		atomic_fetch_sub_explicit(live_filter_at(addr), 1, memory_order_relaxed);
	return false;
}

/* Every level's window: the top level first (the largest in use), then the lower ones (their
 * tombstones), then new levels: top moves up only when every level in use is full around
 * addr. */
static llgo_noinline bool live_insert_search(struct llgo_live_header *h, uint32_t top,
					     uint64_t addr, uint64_t key, uint64_t ref,
					     uint64_t size)
{
	for (uint32_t k = top + 1; k-- > 0;)
		if (live_insert_level(h, k, addr, key, ref, size, LLGO_LIVE_PROBE))
			return true;
	for (uint32_t k = top + 1; k < LLGO_LIVE_LEVELS; k++) {
		/* later inserts start here; a lookup searches up to the top it reads */
		uint32_t cur = atomic_load_explicit(&h->top, memory_order_relaxed);
		while (cur < k && !atomic_compare_exchange_weak_explicit(&h->top, &cur, k,
									 memory_order_acq_rel,
									 memory_order_relaxed))
			;
		if (live_insert_level(h, k, addr, key, ref, size, LLGO_LIVE_PROBE))
			return true;
	}
	return false;
}

/* addr's home slot in the top level first, inline: free at rate 1 leaves its tombstone where
 * the next object of the same address (the allocator's favourite) lands. */
static inline __attribute__((always_inline)) bool
live_insert_slot(struct llgo_live_header *h, uint64_t addr, uint64_t key, uint64_t ref,
		 uint64_t size)
{
	uint32_t top = atomic_load_explicit(&h->top, memory_order_acquire);
	if (top >= LLGO_LIVE_LEVELS)
		top = LLGO_LIVE_LEVELS - 1;
	return live_insert_level(h, top, addr, key, ref, size, 1) ||
	       live_insert_search(h, top, addr, key, ref, size);
}

static uint32_t live_shadow_lookup(uint64_t addr, bool remove);

#define LIVE_NO_SLOT UINT64_MAX

/* The slot holding addr in levels top..0 (each level's window from addr's home), or
 * LIVE_NO_SLOT. */
static llgo_noinline uint64_t live_lookup_search(struct llgo_live_entry *e, uint32_t top,
						 uint64_t addr)
{
	for (uint32_t k = top + 1; k-- > 0;) {
		uint64_t base = llgo_live_level_start(k), mask = ((uint64_t)LLGO_LIVE_LEVEL0 << k) - 1;
		uint64_t home = llgo_live_home(addr, k);
		for (uint32_t i = 0; i < LLGO_LIVE_PROBE; i++) {
			uint64_t slot = base + ((home + i) & mask);
			if (live_page_used(slot) &&
			    atomic_load_explicit(&e[slot].addr, memory_order_acquire) == addr)
				return slot;
		}
	}
	return LIVE_NO_SLOT;
}

static inline __attribute__((always_inline)) bool live_lookup(uint64_t addr,
							      struct llgo_live_entry *out,
							      bool remove)
{
	live_settle();
	struct llgo_live_header *h = atomic_load_explicit(&live_hdr, memory_order_acquire);
	if (llgo_unlikely(!h) && live_fork_shadow && addr > LLGO_LIVE_BUSY) {
		uint32_t off = live_shadow_lookup(addr, remove);
		if (off && out) {
			out->key = 0;
			out->ref = LLGO_LIVE_REF(LLGO_LIVE_RING_NONE, 0);
			out->size = LLGO_LIVE_SIZE_OFF(0, off);
		}
		return off != 0;
	}
	if (!h || addr <= LLGO_LIVE_BUSY)
		return false;
	bool f = live_filter_on();
	if (f && !atomic_load_explicit(live_filter_at(addr), memory_order_relaxed))
		return false;
	struct llgo_live_entry *e = live_entries(h);
	uint32_t top = atomic_load_explicit(&h->top, memory_order_acquire);
	if (top >= LLGO_LIVE_LEVELS)
		top = LLGO_LIVE_LEVELS - 1;
	/* addr's home slot in the top level, inline (where live_insert_slot puts it first) */
	uint64_t slot = llgo_live_level_start(top) + llgo_live_home(addr, top);
	if (llgo_unlikely(!live_page_used(slot) ||
			  atomic_load_explicit(&e[slot].addr, memory_order_acquire) != addr)) {
		slot = live_lookup_search(e, top, addr);
		if (slot == LIVE_NO_SLOT)
			return false;
	}
	struct llgo_live_entry *s = &e[slot];
	if (out) {
		out->key = s->key;
		out->ref = s->ref;
		out->size = s->size;
	}
	if (!remove)
		return true;
	/* Only the thread freeing addr removes it: a store, not a CAS loop. */
	live_shadow_clear(slot, s->size);
	atomic_store_explicit(&s->addr, LLGO_LIVE_TOMB, memory_order_release);
	if (f)
		atomic_fetch_sub_explicit(live_filter_at(addr), 1, memory_order_relaxed);
	return true;
}

/* The removals of live_remove and live_free are frees (or a realloc's move) of tracked
 * objects: otel_memory:free, after the entry is gone and before the memory is released
 * (probe.h). A fork child's inherited objects (ring LLGO_LIVE_RING_NONE) were never
 * alloc-probed in this process. */
static inline void live_probe_free(uint64_t addr, const struct llgo_live_entry *e)
{
	if (probe_otel_free_enabled() && LLGO_LIVE_REF_RING(e->ref) != LLGO_LIVE_RING_NONE)
		probe_otel_free(addr);
}

bool live_remove(uint64_t addr, struct llgo_live_entry *out)
{
	live_settle();
	struct llgo_live_entry e;
	if (!live_lookup(addr, &e, true))
		return false;
	live_probe_free(addr, &e);
	if (out)
		*out = e;
	return true;
}

bool live_find(uint64_t addr, struct llgo_live_entry *out)
{
	live_settle();
	return live_lookup(addr, out, false);
}

/* live_mask &= keep, written only when it changes: every free reads that line, so a store
 * per sample (even of the same value) would take it from every other core. */
static inline void live_mask_clear(uintptr_t keep)
{
	/* release: pairs with live_filter_on's acquire */
	if (!(atomic_load_explicit(&live_mask, memory_order_relaxed) & ~keep))
		return;
	uintptr_t now = atomic_fetch_and_explicit(&live_mask, keep, memory_order_release) & keep;
	void (*hook)(uintptr_t) = atomic_load_explicit(&live_mask_hook, memory_order_relaxed);
	if (hook)
		hook(now);
}

static void live_count_untracked(struct llgo_live_header *h, uint64_t size)
{
	if (h) {
		atomic_fetch_add_explicit(&h->untracked, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&h->untracked_bytes, size, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&live_lost, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&live_lost_bytes, size, memory_order_relaxed);
	}
}

bool live_track(int64_t w, uint64_t addr, uint64_t key, uint64_t ref, uint64_t size,
		uint32_t off)
{
	live_settle();
	if (w < 0)
		live_mask_clear((uintptr_t)0);
	else if (addr & (LIVE_PAGE - 1)) {
		/* not on a page: free would not look for it */
		live_count_untracked(atomic_load_explicit(&live_hdr, memory_order_acquire), size);
		return false;
	}
	struct llgo_live_header *h = live_get();
	if (!h) {
		live_count_untracked(NULL, size);
		return false;
	}
	if (llgo_unlikely(atomic_load_explicit(&live_unsent, memory_order_relaxed)) &&
	    atomic_exchange_explicit(&live_unsent, false, memory_order_relaxed))
		live_send_table(h);
	if (w > 0)
		live_mask_clear((uintptr_t)(LIVE_PAGE - 1));
	uint64_t lost = atomic_load_explicit(&live_lost, memory_order_relaxed);
	if (llgo_unlikely(lost)) {
		lost = atomic_exchange_explicit(&live_lost, 0, memory_order_relaxed);
		atomic_fetch_add_explicit(&h->untracked, lost, memory_order_relaxed);
		atomic_fetch_add_explicit(&h->untracked_bytes,
					  atomic_exchange_explicit(&live_lost_bytes, 0,
								   memory_order_relaxed),
					  memory_order_relaxed);
	}
	if (live_insert(h, addr, key, ref, LLGO_LIVE_SIZE_OFF(size, off)))
		return true;
	live_count_untracked(h, size);
	return false;
}

bool live_restore(uint64_t addr, const struct llgo_live_entry *e)
{
	live_settle();
	struct llgo_live_header *h = atomic_load_explicit(&live_hdr, memory_order_acquire);
	return h && live_insert(h, addr, e->key, e->ref, e->size);
}

/* ---- the free slow path ------------------------------------------------------------------ */

/* An arena object is one whatever the table says (a fork child's inherited objects are not
 * in its table). */
void live_free(void (*fn)(void *), void *p)
{
	if (!p)
		return;
	struct llgo_live_entry e;
	uint32_t off = 0;
	/* a closed gate (detach): the table is going; objects of a late copy are real blocks */
	if (!link_enter()) {
		fn(p);
		return;
	}
	if (live_lookup((uint64_t)(uintptr_t)p, &e, true)) {
		off = LLGO_LIVE_OFF(e.size);
		live_probe_free((uint64_t)(uintptr_t)p, &e);
	}
	link_leave();
	if (off == LIVE_OFF_ARENA || live_in_arena(p))
		live_arena_release(p);
	else
		fn((unsigned char *)p - off);
}

size_t live_usable(size_t (*fn)(void *), void *p)
{
	struct llgo_live_entry e;
	if (p && live_in_arena(p))
		return live_arena_usable(p);
	if (!link_enter())
		return fn(p);
	bool found = p && live_lookup((uint64_t)(uintptr_t)p, &e, false);
	link_leave();
	if (found) {
		uint32_t off = LLGO_LIVE_OFF(e.size);
		return fn((unsigned char *)p - off) - off;
	}
	return fn(p);
}

void live_release(bool unmap)
{
	struct llgo_live_header *h = atomic_load_explicit(&live_hdr, memory_order_relaxed);
	atomic_store_explicit(&live_hdr, NULL, memory_order_relaxed);
	atomic_store_explicit(&live_state, LIVE_NONE, memory_order_relaxed);
	if (unmap) {
		if (h)
			munmap(h, LLGO_LIVE_MAP_SIZE);
		if (live_shadow)
			munmap((void *)live_shadow, LIVE_SHADOW_SIZE);
		attach_fd_close(&live_fdid);
	} else {
		attach_fd_forget(&live_fdid); /* a path still in it may send it: left open */
	}
	live_shadow = NULL;
	live_fd = -1;
	atomic_store_explicit(&live_lost, 0, memory_order_relaxed);
	atomic_store_explicit(&live_lost_bytes, 0, memory_order_relaxed);
	atomic_store_explicit(&live_unsent, false, memory_order_relaxed);
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(live_pages); i++)
		atomic_store_explicit(&live_pages[i], 0, memory_order_relaxed);
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(live_filter); i++)
		atomic_store_explicit(&live_filter[i], 0, memory_order_relaxed);
	/* release: the table's reset before the mask says "nothing tracked" */
	atomic_store_explicit(&live_mask, ~(uintptr_t)0, memory_order_release);
}

/* ---- fork ---------------------------------------------------------------------------------- */

/* In the child, inside fork() (lifecycle.c's handler): the parent's table descriptor is
 * closed if still ours; nothing of the shim's memory is written. */
void live_fork_drop(void)
{
	attach_fd_drop(&live_fdid);
}

/*
 * The child's first use of the shim's state (lifecycle_fork_check): a table of the child's
 * own holding the placed objects it inherited (their offsets are needed to free them),
 * built from its private copy of the shadow, which is exact at the clone (the shared table
 * is not: the parent changes it). Objects tracked where they lay (rate 1) need nothing to be
 * freed and are left out. If no table can be made, the inherited shadow stays the child's
 * table of offsets (live_shadow_lookup) and nothing new is tracked.
 */

void live_fork_child(bool close_fds)
{
	struct llgo_live_header *old = atomic_load_explicit(&live_hdr, memory_order_relaxed);
	_Atomic uint64_t *old_shadow = live_shadow;
	/* closed by live_fork_drop if still ours (or here, if the child got here first) */
	if (close_fds)
		attach_fd_close(&live_fdid);
	else
		attach_fd_forget(&live_fdid);
	live_fd = -1;
	live_shadow = NULL;
	atomic_store_explicit(&live_hdr, NULL, memory_order_relaxed);
	atomic_store_explicit(&live_state, LIVE_NONE, memory_order_relaxed);
	atomic_store_explicit(&live_lost, 0, memory_order_relaxed);
	atomic_store_explicit(&live_lost_bytes, 0, memory_order_relaxed);
	if (!old)
		return;
	uint32_t top = atomic_load_explicit(&old->top, memory_order_relaxed);
	if (top >= LLGO_LIVE_LEVELS)
		top = LLGO_LIVE_LEVELS - 1;
	munmap(old, LLGO_LIVE_MAP_SIZE); /* the parent's: never read again here */
	if (!old_shadow)
		return;
	/* The pages of the parent's table its entries were written to (live_pages, copied by
	 * fork too) say which shadow words can be set; kept aside while the new table's pages
	 * are marked in live_pages. */
	uint64_t *used = mmap(NULL, sizeof(live_pages), PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct llgo_live_header *h = NULL;
	if (used != MAP_FAILED && link_state() != LLGO_SHIM_OFF)
		h = live_make();
	if (!h) {
		if (used != MAP_FAILED)
			munmap(used, sizeof(live_pages));
		live_fork_shadow = old_shadow;
		live_fork_top = top;
		atomic_store_explicit(&live_state, LIVE_FAILED, memory_order_relaxed);
		return;
	}
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(live_pages); i++)
		used[i] = atomic_exchange_explicit(&live_pages[i], 0, memory_order_relaxed);
	memset(live_filter, 0, sizeof(live_filter)); /* live_insert counts the copies again */
	uint64_t end = llgo_live_level_start(top + 1);
	for (uint64_t w = 0; w < LLGO_ARRAY_SIZE(live_pages); w++) {
		for (uint64_t bits = used[w]; bits; bits &= bits - 1) {
			uint64_t pg = w * 64 + (uint64_t)__builtin_ctzll(bits);
			uint64_t lo = pg * LIVE_ENTRIES_PER_PAGE, hi = lo + LIVE_ENTRIES_PER_PAGE;
			for (uint64_t i = lo; i < hi && i < end; i++) {
				uint64_t v = atomic_load_explicit(&old_shadow[i],
								  memory_order_relaxed);
				uint64_t a = v & ~(uint64_t)(LIVE_PAGE - 1);
				uint32_t off = (uint32_t)(v & (LIVE_PAGE - 1));
				if (a && off)
					live_insert(h, a, 0, LLGO_LIVE_REF(LLGO_LIVE_RING_NONE, 0),
						    LLGO_LIVE_SIZE_OFF(0, off));
			}
		}
	}
	munmap(used, sizeof(live_pages));
	munmap((void *)old_shadow, LIVE_SHADOW_SIZE);
	atomic_store_explicit(&live_hdr, h, memory_order_relaxed);
	atomic_store_explicit(&live_state, LIVE_READY, memory_order_relaxed);
	atomic_store_explicit(&live_unsent, true, memory_order_relaxed);
}

/* The offset of addr in the inherited shadow (a fork child that could make no table). */
static uint32_t live_shadow_lookup(uint64_t addr, bool remove)
{
	_Atomic uint64_t *sh = live_fork_shadow;
	if (!sh || (addr & (LIVE_PAGE - 1)))
		return 0;
	for (uint32_t k = live_fork_top + 1; k-- > 0;) {
		uint64_t base = llgo_live_level_start(k), mask = ((uint64_t)LLGO_LIVE_LEVEL0 << k) - 1;
		uint64_t home = llgo_live_home(addr, k);
		for (uint32_t i = 0; i < LLGO_LIVE_PROBE; i++) {
			uint64_t slot = base + ((home + i) & mask);
			if (!live_page_used(slot))
				continue;
			uint64_t v = atomic_load_explicit(&sh[slot], memory_order_relaxed);
			if (v && (v & ~(uint64_t)(LIVE_PAGE - 1)) == addr) {
				if (remove)
					atomic_store_explicit(&sh[slot], 0, memory_order_relaxed);
				return (uint32_t)(v & (LIVE_PAGE - 1));
			}
		}
	}
	return 0;
}
