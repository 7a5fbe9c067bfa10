// SPDX-License-Identifier: MIT
/*
 * internal.h: what the shim's files share, grouped by the file that defines it, plus the
 * single-producer ring writer as inline functions (so the ring tests compile the very code the
 * shim runs, under their sanitizers). Nothing here is public: the public API is
 * include/llgo_heap.h and the cross-process contract is shared/.
 *
 * Rules for everything declared here: no malloc, no stdio, no locks on any path a malloc can
 * reach; anything that may allocate runs under the thread's re-entrancy guard (sample.c).
 */
#ifndef LLGO_SHIM_INTERNAL_H
#define LLGO_SHIM_INTERNAL_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../shared/compiler.h"
#include "../shared/proto.h"
#include "../shared/ring.h"

/* Declarations too are hidden, so that code reaches the shim's objects RIP-relative (one load
 * of the control page on the fast path) instead of through the GOT. */
#pragma GCC visibility push(hidden)

/* ---- emit.c: per-thread rings (writer side of shared/ring.h) --------------------------- */

/* A ring as its producer sees it. The geometry is the shim's own, never re-read from the
 * shared header (the daemon can write there). hdr == NULL: no ring. */
struct emit_ring {
	struct llgo_ring_header *hdr;
	unsigned char *data;
	uint64_t mask; /* data_size - 1 */
};

/* ---- sample.c: the per-thread sampler state -------------------------------------------- */

/*
 * The one TLS variable of the shim (initial-exec). countdown is its first field: the malloc
 * fast path (override.c) and the public hook (include/llgo_heap.h) subtract the size from it
 * and enter the slow path when it reaches <= 0. It is 0 in a new thread, so a thread's first
 * allocation at a positive rate starts its sample stream in the slow path. Every other field
 * is touched only by the slow path, under `guard`.
 */
struct llgo_heap_thread {
	int64_t countdown;
	uint8_t guard;       /* in the slow path: nested allocations are passed through */
	uint8_t inited;      /* rng, tid and stack bounds are set for generation `gen` */
	uint8_t started;     /* countdown holds a drawn threshold */
	uint8_t exiting;     /* the ring was given back at thread exit: samples are lost */
	uint8_t ring_failed; /* no ring could be had in this generation; do not retry */
	uint8_t resolving;   /* override.c: this thread is inside dlsym (bootstrap pool) */
	uint8_t forking;     /* attach.c: this thread is in fork() (prepare ran, parent or child
				handler not yet): it records nothing meanwhile */
	uint8_t pad[1];
	uint32_t tid;
	uint32_t gen; /* emit_generation() the ring, tid and rng belong to */
	uint64_t rng;
	uintptr_t stack_lo, stack_hi;
	/* Frame of the outermost C++ operator new wrapper in progress (override_cxx.c), or 0:
	 * libstdc++'s operators have no frame pointer and may use rbp as a plain register, so a
	 * sample whose frame 0 is inside one walks from here instead. */
	uintptr_t cxx_frame;
	uint64_t cxx_size; /* the size the program asked of that wrapper (aligned new rounds up) */
	uint64_t wake_head; /* ring head when this thread last sent LLGO_MSG_WAKE (emit.c) */
	struct emit_ring ring;
};

_Static_assert(offsetof(struct llgo_heap_thread, countdown) == 0,
	       "the fast paths subtract from the first word of llgo_heap_tls");

extern __thread struct llgo_heap_thread llgo_heap_tls llgo_tls_ie llgo_export;

/* Slow paths of the interposed functions (override.c). Each calls fn (the real function),
 * then decides and records with errno preserved. ra is the interposed function's return
 * address (frame 0); the frame chain is followed from the caller's frame pointer, which these
 * functions find as their own saved frame pointer (the interposed functions are frameless). */
void *sample_malloc(void *(*fn)(size_t), size_t size, void *ra);
void *sample_calloc(void *(*fn)(size_t, size_t), size_t n, size_t size, void *ra);
void *sample_realloc(void *(*fn)(void *, size_t), void *p, size_t size, void *ra);
void *sample_memalign(void *(*fn)(size_t, size_t), size_t align, size_t size, void *ra);
int sample_posix_memalign(int (*fn)(void **, size_t, size_t), void **pp, size_t align,
			  size_t size, void *ra);
/* The hook API's slow path (api.c): p was allocated by a custom allocator. */
void sample_hooked(void *p, size_t size, void *ra, void *frame);

/* The sampling decision for one allocation of size bytes at rate word w (w != 0), after the
 * fast path subtracted size from t->countdown. Go semantics: a crossing samples once at full
 * size and draws a fresh countdown (overshoot discarded); the first allocation of a stream
 * draws and is sampled only if size >= the draw. Requires t->rng seeded. */
bool sample_decide(struct llgo_heap_thread *t, int64_t w, size_t size);
/* Next countdown for a mean of rate bytes: -ln(u) * rate, clamped to [1, 64 * rate]. */
int64_t sample_next_threshold(uint64_t *rng, uint64_t rate);
/* xorshift64*; state must be non-zero. */
uint64_t sample_rng_next(uint64_t *state);
uint64_t sample_rng_seed(uint64_t a, uint64_t b);
/* Natural logarithm for x > 0 without libm (the shim does not link it). */
double sample_log(double x);

/* ---- stack.c: frame-pointer walk and trimming ------------------------------------------ */

#define STACK_MAX_RANGES 256u

/* Compute the shim's own text range (nothing when the shim is linked into the program). */
void stack_init(void);
/* Bounding box of the shim's text (0, 0 when linked into the program). */
void stack_shim_text(uintptr_t *lo, uintptr_t *hi);
/* Frame pointers followed from fp: each must be 8-aligned, inside [lo, hi - 16) and above the
 * previous one, so a broken chain ends the walk instead of faulting. Writes up to max return
 * addresses, stops at a zero one. */
uint32_t stack_walk(uint64_t *out, uint32_t max, uintptr_t fp, uintptr_t lo, uintptr_t hi);
/* Capture the stack of a sampled allocation into out (up to max frames, frame 0 = the user's
 * allocating call site): ra is the interposed function's return address, frame the slow
 * path's own frame (its saved frame pointer is the interposed function's caller's). A non-zero
 * cxx_frame (the caller found ra inside a real C++ operator new under a wrapper, see struct
 * llgo_heap_thread) starts the walk there instead. Leading plumbing frames (the
 * shim's text, the real operators, registered ranges) are trimmed unless nothing else would
 * remain. */
uint32_t stack_capture(uint64_t *out, uint32_t max, void *ra, void *frame, uintptr_t cxx_frame,
		       uintptr_t lo, uintptr_t hi);
/* Drop the leading frames that are allocator plumbing; returns how many remain at out[0]. */
uint32_t stack_trim(uint64_t *frames, uint32_t n);
/* pc is a return address: the calling instruction is at pc - 1. */
bool stack_is_plumbing(uint64_t pc);
bool stack_is_cxx_operator(uint64_t pc);
/* Register [lo, hi) as plumbing; returns 0 or -ENOSPC. Lock-free, callable any time. */
int stack_add_range(uintptr_t lo, uintptr_t hi);
/* Register a real C++ operator new function (plumbing, and the cxx_frame rule above). */
int stack_add_cxx_range(uintptr_t lo, uintptr_t hi);
/* Register every function whose symbol name starts with prefix in the loaded objects'
 * symbol tables (.symtab, else .dynsym). Returns the number of functions found or -errno. */
int stack_add_prefix(const char *prefix);
/* The calling thread's stack bounds (0, 0 when unknown). May allocate: call under guard. */
void stack_thread_bounds(uintptr_t *lo, uintptr_t *hi);

struct stackcopy;

/* ---- emit.c ------------------------------------------------------------------------------ */

/* Ring data size from LLGO_HEAP_RING_KB (power of two, clamped), read once at init. */
uint32_t emit_data_size(void);
/* Ring size (LLGO_HEAP_RING_KB, else by the starting rate) and the thread-exit key. */
void emit_init(uint64_t rate);
/* Every ring of the previous process image is forgotten (fork child). */
void emit_forget_all(void);
uint32_t emit_generation(void);
/* Record one sample into the calling thread's ring (claimed or created on first use); counts
 * it in ctl.lost_no_ring when no ring can be had. raw != NULL: an ALLOC_RAW record. */
void emit_sample(struct llgo_heap_thread *t, uint64_t size, uint64_t rate, uint64_t addr,
		 const uint64_t *frames, uint32_t n, const struct stackcopy *raw);

/* Format a ring in mem (len >= LLGO_RING_HEADER_SIZE + data_size) and bind r to it. */
static inline int emit_ring_format(struct emit_ring *r, void *mem, size_t len, uint64_t data_size,
				   uint32_t ring_id, uint32_t tid)
{
	if (data_size < LLGO_RING_MIN_DATA || data_size > LLGO_RING_MAX_DATA ||
	    (data_size & (data_size - 1)) || len < LLGO_RING_HEADER_SIZE + data_size)
		return -EINVAL;
	struct llgo_ring_header *h = (struct llgo_ring_header *)mem;
	memset(h, 0, sizeof(*h));
	h->magic = LLGO_RING_MAGIC;
	h->version = LLGO_RING_VERSION;
	h->header_size = LLGO_RING_HEADER_SIZE;
	h->data_size = data_size;
	h->ring_id = ring_id;
	atomic_store_explicit(&h->state, LLGO_RING_OWNED, memory_order_relaxed);
	atomic_store_explicit(&h->owner_tid, tid, memory_order_relaxed);
	r->hdr = h;
	r->data = (unsigned char *)mem + LLGO_RING_HEADER_SIZE;
	r->mask = data_size - 1;
	return 0;
}

/*
 * Push one ALLOC record; returns false when it was dropped (ring full). Single producer: only
 * the owning thread calls this for r, so head, sampled and dropped are read relaxed (they are
 * its own stores) and written with release stores in the order shared/ring.h fixes:
 *   delivered: record bytes, then head (release; pairs with the daemon's acquire of head
 *              before it copies), then sampled (release; the daemon loads it before head);
 *   dropped:   dropped + 1 (release), then sampled + 1 (release).
 * tail is loaded with acquire, pairing with the daemon's release store after it copied the
 * bytes out, so this thread never overwrites bytes the daemon is still reading. A tail that
 * makes no sense (ahead of head, or more than a ring behind) makes the ring look full: the
 * sample is dropped, never written out of place.
 */
static inline bool emit_push_alloc(const struct emit_ring *r, uint64_t size, uint64_t rate,
				   uint64_t addr, uint32_t tid, const uint64_t *frames, uint32_t n)
{
	struct llgo_ring_header *h = r->hdr;
	if (n > LLGO_MAX_FRAMES)
		n = LLGO_MAX_FRAMES;
	uint32_t len = llgo_record_alloc_len(n);
	uint64_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
	uint64_t sampled = atomic_load_explicit(&h->sampled, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
	uint64_t used = head - tail, cap = r->mask + 1;
	if (used > cap || cap - used < len) {
		uint64_t dropped = atomic_load_explicit(&h->dropped, memory_order_relaxed);
		atomic_store_explicit(&h->dropped, dropped + 1, memory_order_release);
		atomic_store_explicit(&h->sampled, sampled + 1, memory_order_release);
		return false;
	}
	union {
		struct llgo_record rec;
		unsigned char bytes[LLGO_RECORD_MAX_LEN];
	} u;
	memset(&u.rec, 0, sizeof(u.rec));
	u.rec.kind = LLGO_REC_ALLOC;
	u.rec.version = LLGO_REC_VERSION;
	u.rec.nframes = (uint16_t)n;
	u.rec.length = len;
	u.rec.seq = sampled + 1;
	u.rec.size = size;
	u.rec.rate = rate;
	u.rec.addr = addr;
	u.rec.tid = tid;
	if (n)
		memcpy(u.bytes + sizeof(struct llgo_record), frames, 8u * n);
	u.rec.checksum = llgo_record_checksum(u.bytes, len);
	llgo_ring_copy_in(r->data, r->mask, head, u.bytes, len);
	atomic_store_explicit(&h->head, head + len, memory_order_release);
	atomic_store_explicit(&h->sampled, sampled + 1, memory_order_release);
	return true;
}

/* ---- stackcopy.c: registers and raw stack for the daemon's DWARF unwinding ------------- */

/* What an ALLOC_RAW record carries besides the ALLOC fields; stack points into the live
 * stack of the sampling thread. copy false: a copy was wanted but cannot be made (an ALLOC
 * record flagged LLGO_REC_FLAG_NO_COPY). */
struct stackcopy {
	struct llgo_raw_regs regs;
	const unsigned char *stack;
	const unsigned char *stack2; /* regs.stack2_len bytes (sigaltstack handlers) */
	bool copy;
};

/* Read LLGO_HEAP_UNWIND and LLGO_HEAP_STACK_KB (once, at start). */
void stackcopy_init(void);
uint32_t stackcopy_get_mode(void); /* enum llgo_unwind_mode */
uint32_t stackcopy_stack_cap(void);
/* The mode, for HELLO's flags. */
uint64_t stackcopy_hello_flags(void);
/* Smallest ring data size for the mode and cap (0: no requirement). */
uint32_t stackcopy_ring_min(void);
/* auto mode: whether the frame-pointer walk frames[0..n) can be trusted (ctl tables). */
bool stackcopy_fp_trusted(const uint64_t *frames, uint32_t n);
/* Decide whether this sample (frames from stack_capture; ra, frame and cxx as given to it)
 * wants its stack copied, and fill sc; false: a plain ALLOC record (emit_push_alloc). */
bool stackcopy_take(struct stackcopy *sc, const struct llgo_heap_thread *t,
		    const uint64_t *frames, uint32_t n, void *ra, void *frame, uintptr_t cxx);
/* Push an ALLOC_RAW record, or the flagged ALLOC record that replaces it (emit_push_alloc's
 * protocol); false when dropped. */
bool stackcopy_push(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		    uint32_t tid, const uint64_t *frames, uint32_t n, const struct stackcopy *sc);

/* ---- attach.c: the control page and the daemon connection ------------------------------ */

/* The control page: a page of the shim's .bss, replaced (MAP_FIXED) by the shared memfd at
 * attach so that the fast path reads rate_word with one RIP-relative load. */
extern struct llgo_ctl attach_ctl;

/* Send one packet (with fd when >= 0) on the daemon socket; 0 or -errno. Never blocks for
 * long: the socket is non-blocking and a full socket is waited for at most ~50 ms, or not at
 * all unless wait. */
int attach_send(const void *pkt, size_t n, int fd, bool wait);
bool attach_connected(void);
static inline void attach_count_lost(void)
{
	atomic_fetch_add_explicit(&attach_ctl.lost_no_ring, 1, memory_order_relaxed);
}

/* ---- override.c: the real allocator ---------------------------------------------------- */

/* Nothing is shared: the malloc family (override.c) resolves its real functions in a
 * constructor and reaches sample.c only through the sample_* slow paths; the C++ operators
 * (override_cxx.c) resolve lazily and register the real operators with stack.c. */

#pragma GCC visibility pop

#endif
