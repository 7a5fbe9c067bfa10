// SPDX-License-Identifier: MIT
/*
 * emit.c: the per-thread rings of shared/ring.h, producer side. A thread gets a ring on its
 * first sample (never on the fast path): first a RETIRED ring the daemon has drained
 * (tail == head) is claimed with a CAS on its state, else a new ring is made in the process
 * memfd (lifecycle.c) at the next ring id's offset: the memfd grows (it is sealed against
 * shrinking only), the ring is mapped MADV_DONTFORK, formatted, registered in a static table,
 * counted in ctl.ring_count (store-release: a daemon that finds the memfd on its own maps ids
 * below it) and announced with LLGO_MSG_ADD_RING (no descriptor; a hint the daemon may also
 * miss: it checks ring_count as it drains). A pthread key destructor gives the ring back
 * (RETIRED) at thread exit. Records are pushed by emit_push_alloc (internal.h); a full ring drops and
 * counts, never blocks. A push that takes a ring past half full (or finds it full) sends
 * LLGO_MSG_WAKE, without waiting, so bursts are drained before the ring fills. A sample that
 * finds no ring is counted in ctl.lost_no_ring.
 *
 * The first rings share one mapping of the memfd (emit_window: as many rings as fit in
 * EMIT_WINDOW_BYTES, mapped at the first ring's creation), since every mapping a process has
 * is work for each fork() it makes; rings past the window, or made while another thread maps
 * it, get mappings of their own. The window reaches past the memfd's end: a ring in it is
 * touched only once the memfd was grown to hold it.
 *
 * After fork() the child forgets every ring (emit_forget_all): they are unmapped, the table is
 * cleared, and the generation counter changes so that no thread state refers to them.
 * What is left to others: the daemon connection (attach.c), the decision and stack (sample.c,
 * stack.c).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "probe.h"

/* Rings this process created, by ring id. Pointers are published with release after the
 * header is formatted; a claiming thread loads them with acquire. Slots are never reused
 * within a generation. */
static struct llgo_ring_header *_Atomic emit_table[LLGO_MAX_RINGS];
static _Atomic uint32_t emit_nslots;
/* Starts at 1: a new thread's gen (0) never matches, which initialises its state. */
_Atomic uint32_t emit_gen = 1;
static uint32_t emit_size = LLGO_RING_DEFAULT_DATA;
static pthread_key_t emit_key;
static bool emit_key_ok;

uint32_t emit_data_size(void)
{
	return emit_size;
}

static size_t emit_map_len(void)
{
	return (size_t)llgo_ring_span(emit_size, attach_page_size);
}

static void emit_bind(struct emit_ring *r, struct llgo_ring_header *h)
{
	r->hdr = h;
	r->data = (unsigned char *)h + LLGO_RING_HEADER_SIZE;
	r->mask = (uint64_t)emit_size - 1;
}

/* Key destructor: the thread exits. Release pairs with the acquire load of state by a thread
 * claiming the ring, which then sees this thread's final head and counters. */
static void emit_thread_exit(void *v)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	if (!link_enter()) { /* a detach is giving the rings back */
		t->exiting = 1;
		t->ring.hdr = NULL;
		return;
	}
	/* a child that has not settled yet (fork, raw clone): the ring is its parent's and not
	 * mapped here; settling changes the generation */
	lifecycle_settled(t);
	t->exiting = 1;
	if (t->ring.hdr && (void *)t->ring.hdr == v && t->gen == emit_generation() && !t->forking)
		atomic_store_explicit(&t->ring.hdr->state, LLGO_RING_RETIRED, memory_order_release);
	t->ring.hdr = NULL;
	link_leave();
}

/* Processes that start at a rate below EMIT_LOW_RATE get rings of EMIT_LOW_RATE_DATA bytes: at
 * such rates a thread publishes records in bursts a default ring cannot hold between two
 * drains (rate 1 writes one per allocation). Pages are touched only as the ring cycles. */
#define EMIT_LOW_RATE 65536u
#define EMIT_LOW_RATE_DATA (4u << 20)

void emit_init(uint64_t rate)
{
	const char *kb = getenv("LLGO_HEAP_RING_KB");
	emit_size = LLGO_RING_DEFAULT_DATA; /* (called again by an attach, at its rate) */
	if ((!kb || !*kb) && rate >= 1 && rate < EMIT_LOW_RATE)
		emit_size = EMIT_LOW_RATE_DATA;
	if (kb && *kb) {
		uint64_t v = 0;
		for (const char *c = kb; *c >= '0' && *c <= '9' && v < (1ULL << 40); c++)
			v = v * 10 + (uint64_t)(*c - '0');
		v <<= 10;
		uint64_t size = LLGO_RING_MIN_DATA;
		while (size < v && size < LLGO_RING_MAX_DATA)
			size <<= 1;
		emit_size = (uint32_t)size;
	}
	stackcopy_init();
	if ((!kb || !*kb) && emit_size < stackcopy_ring_min()) /* room for stack copies */
		emit_size = stackcopy_ring_min();
	if (!emit_key_ok && pthread_key_create(&emit_key, emit_thread_exit) == 0)
		emit_key_ok = true;
}

/* A ring whose thread exited and that the daemon drained. */
static bool emit_claim_retired(struct llgo_heap_thread *t)
{
	uint32_t n = atomic_load_explicit(&emit_nslots, memory_order_acquire);
	if (n > LLGO_MAX_RINGS)
		n = LLGO_MAX_RINGS;
	for (uint32_t i = 0; i < n; i++) {
		struct llgo_ring_header *h =
			atomic_load_explicit(&emit_table[i], memory_order_acquire);
		if (!h || atomic_load_explicit(&h->state, memory_order_acquire) != LLGO_RING_RETIRED)
			continue;
		/* tail pairs with the daemon's release store after copying out */
		if (atomic_load_explicit(&h->tail, memory_order_acquire) !=
		    atomic_load_explicit(&h->head, memory_order_relaxed))
			continue;
		uint32_t expect = LLGO_RING_RETIRED;
		if (!atomic_compare_exchange_strong_explicit(&h->state, &expect, LLGO_RING_OWNED,
							     memory_order_acq_rel,
							     memory_order_relaxed))
			continue;
		atomic_store_explicit(&h->owner_tid, t->tid, memory_order_relaxed);
		emit_bind(&t->ring, h);
		return true;
	}
	return false;
}

/* Grow the memfd to at least len bytes. Concurrent creators may race: a truncation to a
 * smaller size than another's is refused by the seal (EPERM) and then already satisfied. */
static bool emit_grow(int fd, uint64_t len)
{
	for (int tries = 0; tries < 4; tries++) {
		struct stat st;
		if (fstat(fd, &st) != 0)
			return false;
		if ((uint64_t)st.st_size >= len)
			return true;
		if (ftruncate(fd, (off_t)len) != 0 && errno != EPERM)
			return false;
	}
	return false;
}

static void emit_count_ring(uint32_t slot)
{
	uint32_t n = atomic_load_explicit(&attach_ctl.ring_count, memory_order_relaxed);
	/* release: a daemon that loads ring_count (acquire) finds the headers formatted */
	while (n < slot + 1 &&
	       !atomic_compare_exchange_weak_explicit(&attach_ctl.ring_count, &n, slot + 1,
						      memory_order_release, memory_order_relaxed))
		;
}

#define EMIT_WINDOW_BYTES (64u << 20)
enum { EMIT_WINDOW_NONE, EMIT_WINDOW_MAKING, EMIT_WINDOW_READY, EMIT_WINDOW_FAILED };
static unsigned char *_Atomic emit_window;
static _Atomic int emit_window_state;

/* Rings in the window: at least one. */
static uint32_t emit_window_rings(void)
{
	uint64_t n = EMIT_WINDOW_BYTES / emit_map_len();
	return n ? (uint32_t)n : 1u;
}

/* Where ring `slot` lies in the window, mapping the window first if no thread has; NULL: the
 * ring gets a mapping of its own. */
static void *emit_window_slot(int fd, uint32_t slot)
{
	if (slot >= emit_window_rings())
		return NULL;
	int st = atomic_load_explicit(&emit_window_state, memory_order_acquire);
	if (st == EMIT_WINDOW_NONE &&
	    atomic_compare_exchange_strong_explicit(&emit_window_state, &st, EMIT_WINDOW_MAKING,
						    memory_order_acquire, memory_order_acquire)) {
		size_t len = (size_t)emit_window_rings() * emit_map_len();
		void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			       (off_t)llgo_ring_offset(0, emit_size, attach_page_size));
		if (m != MAP_FAILED)
			madvise(m, len, MADV_DONTFORK);
		atomic_store_explicit(&emit_window, m == MAP_FAILED ? NULL : (unsigned char *)m,
				      memory_order_relaxed);
		/* release: the window's address before READY */
		atomic_store_explicit(&emit_window_state,
				      m == MAP_FAILED ? EMIT_WINDOW_FAILED : EMIT_WINDOW_READY,
				      memory_order_release);
		st = m == MAP_FAILED ? EMIT_WINDOW_FAILED : EMIT_WINDOW_READY;
	}
	if (st != EMIT_WINDOW_READY)
		return NULL;
	unsigned char *w = atomic_load_explicit(&emit_window, memory_order_relaxed);
	return w + (size_t)slot * emit_map_len();
}

static bool emit_create(struct llgo_heap_thread *t)
{
	const struct attach_fd *mem = link_memfd();
	if (link_state() != LLGO_SHIM_ATTACHED || !attach_fd_owned(mem))
		return false;
	uint32_t slot = atomic_fetch_add_explicit(&emit_nslots, 1, memory_order_relaxed);
	if (slot >= LLGO_MAX_RINGS)
		return false;
	size_t len = emit_map_len();
	uint64_t off = llgo_ring_offset(slot, emit_size, attach_page_size);
	if (!emit_grow(mem->fd, off + len))
		return false;
	/* A fork child must never write its parent's rings: it does not even map them. */
	void *m = emit_window_slot(mem->fd, slot);
	bool own = !m;
	if (own) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mem->fd, (off_t)off);
		if (m == MAP_FAILED)
			return false;
		madvise(m, len, MADV_DONTFORK);
	}
	struct emit_ring r;
	if (emit_ring_format(&r, m, len, emit_size, slot, t->tid) != 0) {
		if (own)
			munmap(m, len);
		return false;
	}
	atomic_store_explicit(&emit_table[slot], r.hdr, memory_order_release);
	emit_count_ring(slot);
	t->ring = r;
	struct llgo_msg_add_ring msg;
	memset(&msg, 0, sizeof(msg));
	attach_header(&msg.h, LLGO_MSG_ADD_RING, sizeof(msg));
	msg.ring_id = slot;
	msg.data_size = emit_size;
	link_send(&msg, sizeof(msg));
	return true;
}

/* Under the thread's guard (may allocate: pthread_setspecific). */
static bool emit_claim(struct llgo_heap_thread *t)
{
	if (t->exiting || t->ring_failed)
		return false;
	if (!emit_claim_retired(t) && !emit_create(t)) {
		t->ring_failed = 1;
		return false;
	}
	if (emit_key_ok)
		pthread_setspecific(emit_key, t->ring.hdr);
	return true;
}

bool emit_sample_slow(struct llgo_heap_thread *t, uint64_t size, uint64_t rate, uint64_t addr,
		      const uint64_t *frames, uint32_t n, const struct stackcopy *raw,
		      uint64_t *ref)
{
	if (llgo_unlikely(!t->ring.hdr) && !emit_claim(t)) {
		attach_count_lost();
		return false;
	}
	struct llgo_ring_header *h = t->ring.hdr;
	/* Room for the record this sample will be: a stack copy's when it has one that fits. */
	uint32_t nn = n < LLGO_MAX_FRAMES ? n : LLGO_MAX_FRAMES;
	uint64_t need = llgo_record_alloc_len(nn);
	if (raw && raw->copy) {
		uint64_t rl = llgo_record_raw_fixed_len(nn) + (uint64_t)raw->regs.stack_len +
			      raw->regs.stack2_len;
		if (rl <= t->ring.mask + 1)
			need = rl;
	}
	full_wait(t, &t->ring, (uint32_t)need, rate);
	uint64_t before = atomic_load_explicit(&h->head, memory_order_relaxed);
	/* llgo-heap verify: one load and a branch while nothing is attached (probe.h) */
	bool pushed;
	if (probe_sample_enabled())
		pushed = raw ? probe_push_raw(&t->ring, size, rate, addr, t->tid, frames, n, raw)
			     : probe_push(&t->ring, size, rate, addr, t->tid, frames, n);
	else
		pushed = raw ? stackcopy_push(&t->ring, size, rate, addr, t->tid, frames, n, raw)
			     : emit_push_alloc(&t->ring, size, rate, addr, t->tid, frames, n);
	/* OpenTelemetry's collectors see exactly the samples the profile holds */
	if (pushed && probe_otel_alloc_enabled())
		probe_otel_alloc(addr, size, rate);
	return emit_pushed(t, before, pushed, ref);
}

void emit_forget_all(void)
{
	uint32_t n = atomic_load_explicit(&emit_nslots, memory_order_relaxed);
	if (n > LLGO_MAX_RINGS)
		n = LLGO_MAX_RINGS;
	/* Not unmapped: in a fork child they are not mapped (MADV_DONTFORK); in a process whose
	 * memfd the program closed, other threads may still be writing them. */
	for (uint32_t i = 0; i < n; i++)
		atomic_store_explicit(&emit_table[i], NULL, memory_order_relaxed);
	atomic_store_explicit(&emit_nslots, 0, memory_order_relaxed);
	/* (the window, like the rings, stays mapped where it was mapped: see above) */
	atomic_store_explicit(&emit_window, NULL, memory_order_relaxed);
	atomic_store_explicit(&emit_window_state, EMIT_WINDOW_NONE, memory_order_relaxed);
	uint32_t g = atomic_load_explicit(&emit_gen, memory_order_relaxed) + 1;
	atomic_store_explicit(&emit_gen, g ? g : 1, memory_order_relaxed);
	struct llgo_heap_thread *t = &llgo_heap_tls;
	t->ring.hdr = NULL;
	t->ring_failed = 0;
	if (emit_key_ok) {
		uint8_t guard = t->guard;
		t->guard = 1;
		pthread_setspecific(emit_key, NULL);
		t->guard = guard;
	}
}

void emit_release(bool unmap)
{
	uint32_t n = atomic_load_explicit(&emit_nslots, memory_order_relaxed);
	if (n > LLGO_MAX_RINGS)
		n = LLGO_MAX_RINGS;
	unsigned char *w = atomic_load_explicit(&emit_window, memory_order_relaxed);
	size_t len = emit_map_len(), wlen = (size_t)emit_window_rings() * len;
	for (uint32_t i = 0; unmap && i < n; i++) {
		unsigned char *h =
			(unsigned char *)atomic_load_explicit(&emit_table[i], memory_order_relaxed);
		if (h && !(w && h >= w && h < w + wlen))
			munmap(h, len);
	}
	if (unmap && w)
		munmap(w, wlen);
	/* the table, the window and the generation, as a fork child forgets them: no thread
	 * state refers to these rings from now on */
	emit_forget_all();
}

bool emit_all_drained(void)
{
	uint32_t n = atomic_load_explicit(&emit_nslots, memory_order_acquire);
	if (n > LLGO_MAX_RINGS)
		n = LLGO_MAX_RINGS;
	for (uint32_t i = 0; i < n; i++) {
		struct llgo_ring_header *h =
			atomic_load_explicit(&emit_table[i], memory_order_acquire);
		/* tail: the daemon's release store after copying out */
		if (h && atomic_load_explicit(&h->tail, memory_order_acquire) !=
				 atomic_load_explicit(&h->head, memory_order_relaxed))
			return false;
	}
	return true;
}
