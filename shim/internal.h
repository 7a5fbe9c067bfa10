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
#include <sys/types.h>

#include "../shared/compiler.h"
#include "../shared/live.h"
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
 * stack.c: a thread's last sampled stack and what was derived from it, so that a loop that
 * allocates at one site pays for the frame walk only. raw[0..n) is the walk (frame 0 the
 * allocating call site, plumbing not yet trimmed); it is compared with the previous walk as it
 * is written. When they are equal and the plumbing ranges have not changed (nranges), skip
 * and key still hold; the auto rule's verdict (stackcopy.c) holds while fp_seq is unchanged.
 */
struct stack_memo {
	uint32_t n;       /* frames in raw (0: none yet) */
	uint32_t skip;    /* leading plumbing frames: the sample's stack is raw + skip */
	uint32_t nranges; /* plumbing ranges published when skip was found */
	uint32_t fp_seq;  /* ctl.fp_seq of the verdict `trusted`; 0: no verdict */
	bool trusted;
	uint64_t key; /* llgo_live_key_frames of the sample's stack */
	uint64_t raw[LLGO_MAX_FRAMES + 8]; /* room for plumbing frames that trimming removes */
};

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
	uint8_t forking;     /* lifecycle.c: 1: this thread ran fork()'s prepare handler and
				not yet the parent's or (in the child) the shim's child handler;
				2: it is a fork child's thread after that handler. In a fork
				child the state is its parent's until lifecycle_fork_check. */
	uint8_t bounded;     /* stack_hi was set at thread start (lifecycle.c) or found */
	uint32_t tid;
	uint32_t gen; /* emit_generation() the ring, tid and rng belong to */
	uint32_t fork_pid; /* lifecycle.c: the process that called fork() (with forking) */
	uint32_t ready_calls; /* lifecycle.c: samples since this thread last read the clock */
	uint64_t rng;
	/* The thread's own stack: every frame of the program lies below stack_hi (set at thread
	 * start without any lock: the start routine's frame, or __libc_stack_end for the main
	 * thread; else found once in /proc/self/maps with raw reads). */
	uintptr_t stack_lo, stack_hi;
	/* The end of the thread's stack memory, for stack copies (stackcopy.c): above stack_hi
	 * lie the frames of the thread library's start, which a DWARF unwinding reads. */
	uintptr_t stack_end;
	/* Another stack this thread was last seen running on (sigaltstack, a coroutine), found
	 * in /proc/self/maps; alt_scan_ns rate-limits those scans. */
	uintptr_t alt_lo, alt_hi;
	uint64_t alt_scan_ns;
	uint64_t wake_head; /* ring head when this thread last sent LLGO_MSG_WAKE (emit.c) */
	uint64_t full_stall; /* full.c: 1 + the tail a wait gave up at; 0 when none */
	struct emit_ring ring;
	struct stack_memo memo;
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
/* realloc of a non-NULL p that free would look up (p & live_mask == 0): may be tracked.
 * Reached by a tail call, it takes its own return address as the program's call site (so the
 * interposed function needs no frame to pass it). */
void *sample_realloc_tracked(void *(*fn)(void *, size_t), void *p, size_t size);
void *sample_memalign(void *(*fn)(size_t, size_t), size_t align, size_t size, void *ra);
int sample_posix_memalign(int (*fn)(void **, size_t, size_t), void **pp, size_t align,
			  size_t size, void *ra);
/* C++ operator new's sampled path (override_cxx.c): the block of size bytes (aligned to
 * align when aligned), placed and tracked as sample_malloc does; alloc makes an unplaced one.
 * NULL when the allocation failed (the caller runs the new_handler loop, unsampled). */
void *sample_new(void *(*alloc)(size_t, size_t), size_t size, size_t align, void *ra,
		 void *frame);
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
/* A non-zero seed from a and b (lifecycle.c seeds each thread's rng at its start). */
static inline uint64_t sample_rng_seed(uint64_t a, uint64_t b)
{
	/* splitmix64 finaliser over both inputs: nearby tids and times give unrelated seeds */
	uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ b;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z ? z : 0x853c49e6748fea9bULL;
}
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
 * path's own frame (its saved frame pointer is the interposed function's caller's). Leading
 * plumbing frames (the shim's text, registered ranges such as the real C++ operators new) are
 * trimmed unless nothing else would remain. lo2..hi2: a second range the walk may cross into
 * once (stack_bounds_for). */
uint32_t stack_capture(uint64_t *out, uint32_t max, void *ra, void *frame, uintptr_t lo,
		       uintptr_t hi, uintptr_t lo2, uintptr_t hi2);
/* Drop the leading frames that are allocator plumbing; returns how many remain at out[0]. */
uint32_t stack_trim(uint64_t *frames, uint32_t n);
/* The sampled path's capture (stack_bounds_for, then stack_capture's walk and trimming) into
 * t->memo: returns the number of frames of the sample's stack, which starts at
 * t->memo.raw + t->memo.skip (at most LLGO_MAX_FRAMES); t->memo.key is its key's frame part. */
uint32_t stack_sample(struct llgo_heap_thread *t, void *ra, void *frame);
/* pc is a return address: the calling instruction is at pc - 1. */
bool stack_is_plumbing(uint64_t pc);
/* Register [lo, hi) as plumbing; returns 0 or -ENOSPC. Lock-free, callable any time. */
int stack_add_range(uintptr_t lo, uintptr_t hi);
/* Register every function whose symbol name starts with prefix in the loaded objects'
 * symbol tables (.symtab, else .dynsym). Returns the number of functions found or -errno. */
int stack_add_prefix(const char *prefix);
/* The mapping that holds address sp, from /proc/self/maps read with raw open/read (no
 * malloc, no stdio, no lock). Returns false when it cannot be read. */
bool stack_mapping_of(uintptr_t sp, uintptr_t *lo, uintptr_t *hi);
/* Stack bounds for the walk of thread t from frame: its own stack when frame is on it, else
 * the other stack it runs on (found and cached, rate-limited). lo..hi may be 0..0 (walk
 * nothing beyond frame 0). */
void stack_bounds_for(struct llgo_heap_thread *t, uintptr_t frame, uintptr_t *lo, uintptr_t *hi,
		      uintptr_t *lo2, uintptr_t *hi2);

struct stackcopy;

/* ---- emit.c ------------------------------------------------------------------------------ */

/* Ring data size from LLGO_HEAP_RING_KB (power of two, clamped), read once at init. */
uint32_t emit_data_size(void);
/* Ring size (LLGO_HEAP_RING_KB, else by the starting rate) and the thread-exit key. */
void emit_init(uint64_t rate);
/* Every ring of the previous process image is forgotten (fork child: they were mapped
 * MADV_DONTFORK, so the child has none of them mapped). */
void emit_forget_all(void);
/* llgo-heap detach (lifecycle_detach): every ring forgotten as by emit_forget_all, and, when
 * unmap (no thread can be writing one: the attach gate is quiet), unmapped. */
void emit_release(bool unmap);
/* Whether every ring's records were consumed by the daemon (tail == head). */
bool emit_all_drained(void);
extern _Atomic uint32_t emit_gen; /* emit.c's; read through emit_generation() */
static inline uint32_t emit_generation(void)
{
	return atomic_load_explicit(&emit_gen, memory_order_relaxed);
}
/* emit_sample for whatever its inline part does not do (below: first ring, stack copies, an
 * attached probe). */
bool emit_sample_slow(struct llgo_heap_thread *t, uint64_t size, uint64_t rate, uint64_t addr,
		      const uint64_t *frames, uint32_t n, const struct stackcopy *raw,
		      uint64_t *ref);

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

/* emit_push_alloc's record when it wraps around the ring's end: assembled on the stack. */
static llgo_noinline __attribute__((unused)) void
emit_push_wrapped(const struct emit_ring *r, uint64_t head, uint64_t w0, uint64_t seq,
		  uint64_t size, uint64_t rate, uint64_t addr, uint64_t w5, const uint64_t *frames,
		  uint32_t n)
{
	uint64_t u[LLGO_RECORD_MAX_LEN / 8] = { w0, seq, size, rate, addr, w5, 0 };
	uint32_t len = llgo_record_alloc_len(n);
	if (n)
		memcpy(u + LLGO_REC_CHECKSUM_WORD + 1, frames, 8u * n);
	u[LLGO_REC_CHECKSUM_WORD] = llgo_record_checksum(u, len);
	llgo_ring_copy_in(r->data, r->mask, head, u, len);
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
 *
 * A record that does not wrap (and starts 8-aligned: head is the shim's own, but the daemon
 * could write it) is stored straight into the ring a word at a time, its checksum summed as
 * the words go; one that wraps is assembled on the stack first. Bytes past head are the
 * producer's alone (the daemon reads [tail, head)), so storing them in place is safe.
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
	uint64_t off = head & r->mask;
	uint64_t w0 = llgo_record_word0(LLGO_REC_ALLOC, (uint16_t)n, len);
	uint64_t w5 = llgo_record_word5(tid, 0);
	if (llgo_likely(off + len <= cap && !(off & 7))) {
		uint64_t *d = (uint64_t *)(void *)(r->data + off);
		struct llgo_sum sum = LLGO_SUM_INIT;
		d[0] = w0;
		llgo_sum_word(&sum, w0);
		d[1] = sampled + 1;
		llgo_sum_word(&sum, sampled + 1);
		d[2] = size;
		llgo_sum_word(&sum, size);
		d[3] = rate;
		llgo_sum_word(&sum, rate);
		d[4] = addr;
		llgo_sum_word(&sum, addr);
		d[5] = w5;
		llgo_sum_word(&sum, w5);
		llgo_sum_word(&sum, 0); /* the checksum word */
		uint64_t *fd = d + LLGO_REC_CHECKSUM_WORD + 1;
		for (uint32_t i = 0; i < n; i++) {
			fd[i] = frames[i];
			llgo_sum_word(&sum, frames[i]);
		}
		d[LLGO_REC_CHECKSUM_WORD] = llgo_sum_final(&sum, len);
	} else {
		emit_push_wrapped(r, head, w0, sampled + 1, size, rate, addr, w5, frames, n);
	}
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
extern uint32_t stackcopy_mode; /* enum llgo_unwind_mode, set once by stackcopy_init */
static inline uint32_t stackcopy_get_mode(void)
{
	return stackcopy_mode;
}
uint32_t stackcopy_stack_cap(void);
/* The mode, for HELLO's flags. */
uint64_t stackcopy_hello_flags(void);
/* Smallest ring data size for the mode and cap (0: no requirement). */
uint32_t stackcopy_ring_min(void);
/* auto mode: whether the frame-pointer walk frames[0..n) can be trusted (ctl tables). */
/* m: the memo of the walk these frames come from (its verdict is reused and kept), or NULL. */
bool stackcopy_fp_trusted(const uint64_t *frames, uint32_t n, struct stack_memo *m);
/* Whether this sample wants its stack copied (the mode, and in auto mode the rule above). */
bool stackcopy_wanted_slow(const uint64_t *frames, uint32_t n, struct stack_memo *m);
/* stackcopy_wanted: inline, at the end of this file (it reads the control page) */
/* stackcopy_take once the copy is wanted: fill sc (sc->copy false when none can be made);
 * false when the sample stays a plain ALLOC record. */
bool stackcopy_fill(struct stackcopy *sc, const struct llgo_heap_thread *t, void *ra,
		    void *frame, uintptr_t cxx);
/* Decide whether this sample (frames from stack_capture; ra, frame and cxx as given to it)
 * wants its stack copied, and fill sc; false: a plain ALLOC record (emit_push_alloc). */
bool stackcopy_take(struct stackcopy *sc, const struct llgo_heap_thread *t,
		    const uint64_t *frames, uint32_t n, void *ra, void *frame, uintptr_t cxx);
/* Push an ALLOC_RAW record, or the flagged ALLOC record that replaces it (emit_push_alloc's
 * protocol); false when dropped. */
bool stackcopy_push(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		    uint32_t tid, const uint64_t *frames, uint32_t n, const struct stackcopy *sc);

/* ---- live.c: the live-object table and the free slow path ------------------------------ */

#define LIVE_PAGE 4096u

/* Which pointers may be tracked: p & live_mask == 0 (see live.c). */
extern _Atomic uintptr_t live_mask;

/* Tracked sampled objects are page-aligned (or, once rate 1 was used, anywhere): one test of
 * p against live_mask sends the candidates to live.c; see live.c for the mask's values.
 * realloc and malloc_usable_size test it; free and every C++ delete jump through
 * override_free_entry, which follows the mask (live_on_mask). */
static inline __attribute__((always_inline)) bool override_maybe_tracked(const void *p)
{
#if defined(__x86_64__)
	/* one `test %reg, mem` (a relaxed load of the mask folded into the test) */
	__asm__ goto("testq %[p], live_mask(%%rip)\n\t"
		     "je %l[maybe]"
		     :
		     : [p] "r"(p)
		     : "cc"
		     : maybe);
	return false;
maybe:
	return true;
#else
	return !((uintptr_t)p & atomic_load_explicit(&live_mask, memory_order_relaxed));
#endif
}
/* override.c hands over the real allocator (never called in the fully static archive). */
void live_set_allocator(void *(*malloc_fn)(size_t), void (*free_fn)(void *),
			size_t (*usable_fn)(void *), void *(*realloc_fn)(void *, size_t));
/* Called with live_mask's new value each time it loses bits, before the object that caused
 * it is inserted (override.c sets it: free's entry follows the mask; NULL in the hook
 * library). */
void live_on_mask(void (*fn)(uintptr_t mask));
/* Whether sampled objects can be placed on a page and tracked (creates the table; under the
 * guard). */
bool live_can_place(void);
/* A block of at least size bytes at a page boundary: in the arena (*off = LIVE_OFF_ARENA),
 * else inside a real block, *off bytes in; NULL (errno from the real malloc, or ENOMEM) when
 * none. live_unplace frees it untracked. */
void *live_place(size_t size, uint32_t *off);
void live_unplace(void *p, uint32_t off);
/* The offset of an object placed in the shim's own pages (live.c's arena): no real block. */
#define LIVE_OFF_ARENA 0xffffu
/* The bytes the program may use from a placed object p (offset off). */
size_t live_placed_usable(void *p, uint32_t off);
/* LIVE_OFF_ARENA when p lies in the arena (an object a fork child inherited may not be in its
 * table), else 0. */
uint32_t live_inherited_off(const void *p);
/* The real allocator's functions (for moving blocks). */
void *live_malloc_real(size_t size);
void live_free_real(void *p);
size_t live_usable_real(void *p);
/* Track a sampled object whose record was published (under the guard: may create the
 * table). w is the rate word it was sampled at: < 0 tracks it wherever it lies. off: its
 * offset in the real block. false: not tracked (counted untracked), and a placed object
 * (off != 0) must not be handed to the program (free would not find its block). */
bool live_track(int64_t w, uint64_t addr, uint64_t key, uint64_t ref, uint64_t size,
		uint32_t off);
/* Forget addr if tracked (copying its entry to out when not NULL); lock-free. */
bool live_remove(uint64_t addr, struct llgo_live_entry *out);
/* The entry of addr, if tracked; lock-free. */
bool live_find(uint64_t addr, struct llgo_live_entry *out);
/* Track addr again with e's fields (a realloc that failed); false when no slot was found. */
bool live_restore(uint64_t addr, const struct llgo_live_entry *e);
/* Send the table again (ADD_LIVE) on a new daemon connection, e.g. after the daemon
 * restarted: the new daemon then knows every object still live. */
void live_resend(void);
/* fork: the child's handler closes the parent's table descriptor (if still ours); the
 * child's first use of the shim's state then calls live_fork_child (lifecycle.c). */
void live_fork_drop(void);
/* close_fds false: the parent's table descriptor is forgotten, not closed (a child sharing
 * the parent's descriptor table), and no table is made (the child is OFF). */
void live_fork_child(bool close_fds);
/* The table (NULL before the first tracked sample); for tests and benchmarks. */
const struct llgo_live_header *live_table(void);
/* free's slow path: forget p, then fn(p's real block). */
void live_free(void (*fn)(void *), void *p);
/* malloc_usable_size's slow path: fn of p's real block, less p's offset in it. */
size_t live_usable(size_t (*fn)(void *), void *p);
/* llgo-heap attach (override_got.c): sampled objects are placed in blocks of the real
 * allocator's own, on a page, by fn(size) (a block it frees and reallocates as any other), so
 * that a detached process may free them without the shim; NULL: live_place's arena and
 * offsets (LD_PRELOAD). */
void live_set_placer(void *(*fn)(size_t size));
/* llgo-heap detach (lifecycle_detach): the table is forgotten (unmapped when unmap: no thread
 * can be in it), the mask is ~0 again and the filter empty; the next tracked sample makes a
 * new table for the next session. */
void live_release(bool unmap);

/* ---- full.c: what a full ring does ---------------------------------------------------- */

static inline bool full_has_room(const struct emit_ring *r, uint64_t tail, uint32_t len)
{
	uint64_t head = atomic_load_explicit(&r->hdr->head, memory_order_relaxed);
	uint64_t used = head - tail, cap = r->mask + 1;
	return used <= cap && cap - used >= len;
}
/* full_wait when the ring has no room at tail. */
void full_block(struct llgo_heap_thread *t, const struct emit_ring *r, uint32_t len,
		uint64_t rate, uint64_t tail);
/* Wait (bounded) until r has room for len bytes, if the policy says so (LLGO_HEAP_FULL, else
 * wait at rate 1 and drop otherwise). Called by the owner before a push. */
static inline void full_wait(struct llgo_heap_thread *t, const struct emit_ring *r, uint32_t len,
			     uint64_t rate)
{
	/* acquire: pairs with the daemon's release of tail (as in emit_push_alloc) */
	uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	if (llgo_unlikely(!full_has_room(r, tail, len)))
		full_block(t, r, len, rate, tail);
}
/* Whether records of this rate wait for room rather than drop (LLGO_HEAP_FULL). */
bool full_waits(uint64_t rate);
/* Whether the daemon serves this process fully yet (maps read; auto unwinding's tables). */
bool full_daemon_serving(void);

/* ---- attach.c: the transport to llgo-heapd (a leaf: no state machine) ----------------- */

/* The largest page the architecture's kernels use: x86-64 has 4 KiB base pages only; others
 * (arm64, ppc64) may run 16 or 64 KiB pages. A process whose page is larger stays detached. */
#if defined(__x86_64__) || defined(__i386__)
#define ATTACH_AREA_SIZE 4096u
#else
#define ATTACH_AREA_SIZE LLGO_PAGE_MAX
#endif
_Static_assert(ATTACH_AREA_SIZE >= LLGO_PAGE_MIN && ATTACH_AREA_SIZE <= LLGO_PAGE_MAX,
	       "the reservation is one page the layout allows");

/* The control page: the first page of an ATTACH_AREA_SIZE-aligned reservation in the shim's
 * .bss, replaced (MAP_FIXED) by the first page of the process memfd at attach, so that the
 * fast path reads rate_word with one RIP-relative load whatever the kernel's page size. The
 * reservation is no larger than the architecture's largest page: a 64 KiB alignment on x86-64
 * made the linker add a segment, or, linked with a 64 KiB max page size, three PROT_NONE gaps
 * between the library's segments; every mapping more is work for each fork(). */
union attach_area {
	struct llgo_ctl ctl;
	unsigned char bytes[ATTACH_AREA_SIZE];
};
extern union attach_area attach_area;
#define attach_ctl (attach_area.ctl)

/* The run-time page size (getauxval(AT_PAGESZ)); set by lifecycle_init. */
extern uint32_t attach_page_size;

/* A descriptor the shim opened, with the identity it had then: the program may close it and
 * get the same number back for something else (close-all loops), so every use first checks
 * that the number still names the same file. */
struct attach_fd {
	int fd;
	uint64_t dev, ino;
};

/* Non-blocking connect to the Unix socket at path (SOCK_SEQPACKET, close-on-exec).
 * Returns 0 or -errno (-ENOENT: no such socket, -ECONNREFUSED: nobody listens). */
int attach_connect(const char *path, struct attach_fd *out);
/* Whether d still names the file it was opened as (one fstat). */
bool attach_fd_owned(const struct attach_fd *d);
/* Close d if it is still ours, without writing d (a fork child's handler: no page of the
 * shim's data is copied for it). */
void attach_fd_drop(const struct attach_fd *d);
/* Close d only if it is still ours; forget it either way. */
void attach_fd_close(struct attach_fd *d);
/* Forget d without closing it (the descriptor table is not ours alone). */
void attach_fd_forget(struct attach_fd *d);
/* Send one packet (with fd when >= 0) without ever waiting; 0 or -errno. -EBADF when d no
 * longer names our socket (nothing is written then). */
int attach_sendmsg(const struct attach_fd *d, const void *pkt, size_t n, int fd);
/* Receive one packet of the given type within timeout_ms (descriptors attached by the peer
 * are closed). Returns its length or -errno. */
ssize_t attach_recv(const struct attach_fd *d, void *buf, size_t cap, uint16_t type,
		    int timeout_ms);
/* POLLHUP/POLLRDHUP/POLLERR on d without waiting (the daemon closed or died); unexpected
 * packets are read and discarded. */
bool attach_peer_gone(const struct attach_fd *d);
/* A header for a shim -> daemon packet. */
void attach_header(struct llgo_msg_header *h, uint16_t type, uint32_t length);
uint64_t attach_now_ns(void);
/* Find the vDSO's clock for attach_now_ns (the constructor, before threads of ours). */
void attach_clock_init(void);

static inline void attach_count_lost(void)
{
	atomic_fetch_add_explicit(&attach_ctl.lost_no_ring, 1, memory_order_relaxed);
}

/* ---- link.c: the link to the daemon: state, descriptors, sends, loss ------------------- */

/*
 * The process's state (enum llgo_shim_state, mirrored in ctl.shim_state) lives in link.c
 * alone. Transitions: DETACHED -> (constructor) ATTACHED | LOST; ATTACHED -> LOST on a failed
 * send or a closed peer (link_lose); LOST -> ATTACHED on a reconnect (backoff, from the slow
 * path); fork child -> ATTACHING (lazy: attaches at its first sample); anything -> OFF when
 * the program sandboxes itself (seccomp) or the memfd cannot be had. All but the loss are
 * lifecycle.c's.
 */
extern _Atomic uint32_t link_st; /* read it through link_state() */
static inline uint32_t link_state(void)
{
	return atomic_load_explicit(&link_st, memory_order_acquire);
}
/* Set the state (and its mirror in the control page). */
void link_set(uint32_t st);
/* The socket and the process memfd (rings live in it); lifecycle.c opens and closes them. */
extern struct attach_fd link_sock, link_mem;
static inline const struct attach_fd *link_memfd(void)
{
	return &link_mem;
}
/* Send a packet to the daemon if attached; a failure other than a full socket makes the
 * process LOST. Returns 0 or -errno. */
int link_send(const void *pkt, size_t n);
/* The same, with a descriptor (SCM_RIGHTS). */
int link_send_fd(const void *pkt, size_t n, int fd);
/* Ask the daemon to drain now (LLGO_MSG_WAKE), without waiting. */
void link_wake(void);
/* ATTACHED -> LOST (once: whoever wins the CAS logs and schedules the first retry). */
void link_lose(const char *why);
/* The reconnect schedule: backoff from LINK_BACKOFF_MIN_NS doubling to LINK_BACKOFF_MAX_NS,
 * the next retry's time, the HELLO flags of the next attempt (only the thread in ATTACHING
 * touches them). */
#define LINK_BACKOFF_MIN_NS (10ull * 1000000)
#define LINK_BACKOFF_MAX_NS (2000ull * 1000000)
extern uint64_t link_backoff_ns, link_hello_flags;
extern _Atomic uint64_t link_retry_ns;
void link_schedule_retry(void);
/* The daemon (SO_PEERCRED of the socket, set at connect). Whether it is alive and working
 * (not stopped, and running, runnable or using CPU since the last call); reads /proc: for
 * waits only. Its scheduler state and CPU ticks, and whether a thread of it runs. */
extern pid_t link_daemon_pid;
bool link_daemon_active(void);
bool link_daemon_stat(char *state, uint64_t *ticks);
bool link_daemon_runnable(void);
/* LLGO_HEAP_DEBUG=1: one line on stderr per event (never once OFF). */
extern bool link_debug;
void link_say(const char *a, const char *b);
void link_say_err(const char *what, int rc);
size_t link_utoa(char *out, unsigned v);
/* The fork check lifecycle.c registers at start, which lifecycle_settled calls. */
void link_on_settle(void (*fn)(struct llgo_heap_thread *t));
void link_settle(struct llgo_heap_thread *t);

/*
 * llgo-heap attach and detach (override_got.c, client/attach.c). A copy of the shim loaded
 * late (dlopen into a running process) is `late`: its constructor connects to nothing (the
 * first sample, or lifecycle_attach_now, does), and every slow path of it passes the attach
 * gate: link_enter counts the thread in (false: the gate is closed, touch no ring, table
 * or socket and pass the call through), link_leave out. lifecycle_detach closes the gate
 * (link_gate_close) and waits for the count to reach 0 before it unmaps what those paths
 * use. A copy loaded at start never counts (one load of link_late, a branch). The gate is
 * here, below every file that passes it; lifecycle.c sets link_late.
 */
extern _Atomic uint32_t link_late;
extern _Atomic uint64_t link_inflight;
bool link_enter_late(void);
static inline __attribute__((always_inline)) bool link_enter(void)
{
	if (llgo_likely(!atomic_load_explicit(&link_late, memory_order_relaxed)))
		return true;
	return link_enter_late();
}
/* After a link_enter that returned true. release: what the path wrote before it, before
 * a detach that sees the count at 0 unmaps it. */
static inline __attribute__((always_inline)) void link_leave(void)
{
	if (llgo_unlikely(atomic_load_explicit(&link_late, memory_order_relaxed)))
		atomic_fetch_sub_explicit(&link_inflight, 1, memory_order_release);
}
/* Open the gate (an attach), or close it and wait (at most 3 s) until no path is inside:
 * true when none is (what those paths use may then be unmapped). */
void link_gate_open(void);
bool link_gate_close(void);

/* ---- lifecycle.c: process and thread lifecycle ----------------------------------------- */
/* The clock is read at one sample in LIFECYCLE_CHECK_EVERY of a thread (at rate 1 a read at
 * every sample was a sixth of the sampled path's time): a dead daemon is noticed within
 * 100 ms or that many samples, whichever comes later. */
#define LIFECYCLE_CHECK_EVERY 32u
bool lifecycle_ready_slow(struct llgo_heap_thread *t);
/* Called by the slow path for each sampled allocation. Returns true when the sample may be
 * recorded: the process is ATTACHED (perhaps just now: lazy fork attach, reconnect). Inline
 * while ATTACHED; lifecycle_ready_slow handles the other states and, once in
 * LIFECYCLE_CHECK_EVERY calls, looks for a dead daemon. Never blocks. */
static inline bool lifecycle_ready(struct llgo_heap_thread *t)
{
	if (llgo_likely(atomic_load_explicit(&link_st, memory_order_acquire) ==
				LLGO_SHIM_ATTACHED &&
			++t->ready_calls < LIFECYCLE_CHECK_EVERY))
		return true;
	return lifecycle_ready_slow(t);
}
/* The exit handshake: wait (bounded) for the daemon only if it has not drained us or lacks
 * our mappings. The destructor; also called from _exit. */
void lifecycle_exit(void);
/* No syscalls from now on (the program installs a seccomp filter). */
void lifecycle_sandboxed(void);
/* Connect now to the daemon at path (NULL: the one found at start) at rate: a late copy that
 * is DETACHED or LOST becomes ATTACHED with a new session (0), else -errno (-EALREADY: it is
 * attached already). */
int lifecycle_attach_now(const char *path, uint64_t rate);
/* End the session (LLGO_MSG_DETACH: the daemon drains, freezes the in-use view and lists the
 * process as detached) and give back rings, table, memfd and socket; rate 0, DETACHED.
 * 0, or -EBUSY when a slow path did not leave the gate in time (its memory is then left
 * mapped, forgotten). */
int lifecycle_detach(void);
/* Called every LIFECYCLE_CHECK_NS of sampling, from a slow path (override_got.c: modules
 * loaded since the last look). */
extern void (*_Atomic lifecycle_tick)(void);
/* Thread start (lifecycle's pthread_create wrapper, or the main thread): bounds, tid, rng,
 * without any lock. frame: the outermost frame of the thread that the program can see. */
void lifecycle_thread_start(struct llgo_heap_thread *t, uintptr_t frame);
/* The process's thread state for a thread the shim did not see start (created before the
 * shim, or by clone directly): tid and rng. */
void lifecycle_thread_adopt(struct llgo_heap_thread *t);
/* t ran fork()'s prepare handler, or the process mark reads 0: if this is a child, make the
 * child's state its own now (the fork child handler only closes descriptors; see
 * lifecycle.c). */
void lifecycle_fork_check(struct llgo_heap_thread *t);
/* The process mark (lifecycle.c): a word on a page of its own, MADV_WIPEONFORK, set to 1 by
 * the process the shared state (control page, rings, live table) belongs to. Any copy of the
 * address space (fork, clone or clone3 without CLONE_VM, whose children run no fork
 * handler) reads 0 there; threads and CLONE_VM children share it. Before the first attach it
 * points at a constant 1 (nothing is shared yet); where the kernel refuses MADV_WIPEONFORK,
 * at a constant 0 (every check asks getpid()). Relaxed loads: a stale 0 only costs a
 * getpid(), a stale pointer to the constant 1 dates from before anything was shared. */
extern _Atomic uint32_t *_Atomic lifecycle_mark;
static inline __attribute__((always_inline)) bool lifecycle_marked(void)
{
	return atomic_load_explicit(atomic_load_explicit(&lifecycle_mark, memory_order_relaxed),
				    memory_order_relaxed) != 0;
}
/* Call before anything that reads or writes the process's shim state outside the fast path
 * (slow paths, the live table, the API, thread creation). The check itself is
 * lifecycle_fork_check, reached through link.c (link_settle: registered at start) so that the
 * files below lifecycle.c settle a child without calling up into it. */
static inline __attribute__((always_inline)) void lifecycle_settled(struct llgo_heap_thread *t)
{
	if (llgo_unlikely(t->forking) || llgo_unlikely(!lifecycle_marked()))
		link_settle(t);
}

/* ---- override.c: the real allocator and the fast path ----------------------------------- */

/* The real malloc, aligned_alloc and free (the next definitions, resolved by override.c; a
 * bootstrap function until then, so always callable). Written with atomic stores; read them
 * with relaxed atomic loads. The C++ operators (override_cxx.c) allocate and free through
 * them directly, as libstdc++'s operators would through the shim's malloc, so that the
 * countdown is charged once. */
extern void *(*override_malloc)(size_t);
extern void *(*override_aligned_alloc)(size_t, size_t);
extern void (*override_free)(void *);
/* What free jumps to: override_free itself while no object is tracked, then a function that
 * first tests the pointer as live_mask says (override.c). Read with relaxed atomic loads. */
extern void (*override_free_entry)(void *);
/* llgo-heap attach (override_got.c): the real functions become the process's definitions
 * (definition(name): those its modules bind to); a copy loaded late found the next ones after
 * itself (RTLD_NEXT: libc's, whatever the program preloaded). */
void override_resolve_global(void *(*definition)(const char *name));
/* free's entry back to the real free (nothing tracked: live_release came first). */
void override_free_untrack(void);
/* override_cxx.c, llgo-heap attach: the inline mode over the process's libstdc++ operators
 * (true), or nothing (false: a replaced operator, another runtime, none); *names: the
 * operators' symbols, *n of them. */
bool override_cxx_attach(void *(*definition)(const char *name), const char *const **names,
			 size_t *n);

/* The rate word, loaded (one RIP-relative load of the control page). */
static inline __attribute__((always_inline)) int64_t override_rate(void)
{
	return atomic_load_explicit(&attach_ctl.rate_word, memory_order_relaxed);
}

/* The sign of the rate word (1: a rate, 0: off, -1: every allocation). On x86-64 one compare
 * of the word in memory with 0 (a relaxed load: one aligned 8-byte read), whose flags the
 * callers' two branches both use; gcc would otherwise load it into a register and test it. */
static inline __attribute__((always_inline)) int override_rate_sign(void)
{
#if defined(__x86_64__)
	/* asm goto (with flag outputs gcc materialises the second condition: setne, test), and
	 * the symbol named in the template (an "m" operand of asm goto costs a lea) */
	__asm__ goto("cmpq $0, attach_area+%c[off](%%rip)\n\t"
		     "jg %l[pos]\n\t"
		     "jne %l[neg]"
		     :
		     : [off] "i"(offsetof(struct llgo_ctl, rate_word))
		     : "cc"
		     : pos, neg);
	return 0;
pos:
	return 1;
neg:
	return -1;
#else
	int64_t w = override_rate();
	return w > 0 ? 1 : w < 0 ? -1 : 0;
#endif
}

/* countdown -= size; true while it stays > 0 (no sample due). */
static inline __attribute__((always_inline)) bool override_countdown(size_t size)
{
#if defined(__x86_64__)
	bool due;
	uintptr_t off;
	/* jle after sub: (countdown - size) <= 0 as exact signed arithmetic */
	__asm__("movq llgo_heap_tls@gottpoff(%%rip), %[off]\n\t"
		"subq %[size], %%fs:(%[off])"
		: [off] "=&r"(off), "=@ccle"(due)
		: [size] "r"(size)
		: "memory");
	return !due;
#else
	struct llgo_heap_thread *t = &llgo_heap_tls;
	int64_t left = (int64_t)((uint64_t)t->countdown - (uint64_t)size);
	t->countdown = left;
	return left > 0;
#endif
}

/* The malloc family's decision for an allocation of size bytes: true to call the real
 * function (rate 0, or the countdown did not run out), false for the slow path (a sample is
 * due, or every allocation is recorded). Rate 0: cmp, jg, jne, then the caller's tail jump;
 * a positive rate: cmp, jg, the TLS offset load, sub, jle, then the tail jump. */
static inline __attribute__((always_inline)) bool override_pass(size_t size)
{
	int s = override_rate_sign();
	if (s > 0)
		return llgo_likely(override_countdown(size));
	return s == 0;
}

/* ---- owner.c: one sampler per process ------------------------------------------------- */

/* The process's sampler when it is another copy of the shim: its functions, looked up by
 * name. hook == NULL: this copy is the sampler. Written once by owner_elect (constructor). */
struct owner_winner {
	void (*hook)(void *p, size_t size, void *ra, void *frame); /* llgo_heap__hook_forward */
	uint64_t (*rate)(void);
	int (*set_rate)(uint64_t rate);
	int (*trim_add)(const char *name_or_prefix);
};
extern struct owner_winner owner_winner;
/* True when this copy of the shim is the process's sampler (the one the public symbols bind
 * to); a copy that is not must not attach, and forwards to the winner (owner_winner). */
bool owner_elect(void);
/* This copy forwards to another (owner_winner.hook set): its rate word says "every
 * allocation" for its hook's sake, and its interposed functions, reached when they come first
 * in the lookup order (a program that linked libllgoheap.a, run under the preloaded shim),
 * hand every call to the next definition untouched instead of sampling. Read only on their
 * slow branches. */
static inline bool owner_defers(void)
{
	return __atomic_load_n(&owner_winner.hook, __ATOMIC_RELAXED) != NULL;
}

/* ---- stackcopy.c, inline (after the control page's definition) ----------------------- */

static inline bool stackcopy_wanted(const uint64_t *frames, uint32_t n, struct stack_memo *m)
{
	/* auto, and a verdict on this walk under the tables as they are (stackcopy_fp_trusted) */
	if (llgo_likely(stackcopy_mode == LLGO_UNWIND_AUTO && m && m->fp_seq &&
			m->fp_seq == atomic_load_explicit(&attach_ctl.fp_seq,
							  memory_order_acquire)))
		return !m->trusted;
	return stackcopy_wanted_slow(frames, n, m);
}

/* ---- emit.c, inline (after the ring writer and full.c's wait) ------------------------- */

/* ---- probe.c: the USDT probes' semaphores (probe.h) ------------------------------------- */

/* Written by the kernel (uprobe reference counters), read here. llgo_heap:sample's and
 * otel_memory:alloc's are the halves of one aligned word, so that emit_sample tests both with
 * one load; probe.c gives each half the name <sys/sdt.h> refers to. */
union probe_alloc_semaphores {
	uint32_t any;
	uint16_t each[2]; /* [0] llgo_heap:sample, [1] otel_memory:alloc */
};
extern volatile union probe_alloc_semaphores probe_alloc_semaphores;
extern volatile unsigned short otel_memory_free_semaphore;

/* LLGO_HEAP_BENCH_NO_OTEL: bench/'s shim without the OpenTelemetry probes, the baseline of
 * their cost (make bench). */
#ifndef LLGO_HEAP_BENCH_NO_OTEL
/* A probe of the sampled path is attached (emit_sample's one load for both). */
static inline bool probe_enabled(void)
{
	return llgo_unlikely(probe_alloc_semaphores.any != 0);
}
static inline bool probe_otel_alloc_enabled(void)
{
	return llgo_unlikely(probe_alloc_semaphores.each[1] != 0);
}
static inline bool probe_otel_free_enabled(void)
{
	return llgo_unlikely(otel_memory_free_semaphore != 0);
}
#else
static inline bool probe_enabled(void)
{
	return llgo_unlikely(probe_alloc_semaphores.each[0] != 0);
}
static inline bool probe_otel_alloc_enabled(void)
{
	return false;
}
static inline bool probe_otel_free_enabled(void)
{
	return false;
}
#endif
static inline bool probe_sample_enabled(void)
{
	return probe_alloc_semaphores.each[0] != 0;
}
/* otel_memory:alloc(addr, size, probe_otel_weight(size, rate)): the sampled allocation at
 * addr, whose record was committed. Only called while probe_otel_alloc_enabled(). */
void probe_otel_alloc(uint64_t addr, uint64_t size, uint64_t rate);
/* otel_memory:free(addr): an object otel_memory:alloc may have reported goes away (a tracked
 * object freed or moved by realloc, live.c; a placed object that could not be tracked and is
 * moved, sample.c), before its memory is released, so that the free precedes any new alloc
 * at that address. Only called while probe_otel_free_enabled(). */
void probe_otel_free(uint64_t addr);
/* The bytes a sample of size bytes at rate stands for: size / (1 - exp(-size/rate)) rounded
 * (docs/sampling.md; summed per (stack, size, rate) bucket it is the profile's scaled bytes),
 * size itself at rate <= 1 (every allocation recorded). */
uint64_t probe_otel_weight(uint64_t size, uint64_t rate);

/*
 * After a push that started at head `before`: the record's LLGO_LIVE_REF in *ref when it was
 * pushed, and LLGO_MSG_WAKE when this push took the ring past half full, or when it was
 * dropped (once per stall: head does not move while the ring is full), so a burst is drained
 * before the ring fills instead of at the daemon's next idle poll. tail is only a hint here
 * (relaxed); a wrong one costs a spurious wake or a poll's delay.
 */
static inline bool emit_pushed(struct llgo_heap_thread *t, uint64_t before, bool pushed,
			       uint64_t *ref)
{
	struct llgo_ring_header *h = t->ring.hdr;
	if (pushed)
		*ref = LLGO_LIVE_REF(h->ring_id,
				     atomic_load_explicit(&h->sampled, memory_order_relaxed));
	uint64_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&h->tail, memory_order_relaxed);
	uint64_t half = (t->ring.mask + 1) / 2;
	bool crossed = pushed && before - tail < half && head - tail >= half;
	if (llgo_unlikely((crossed || !pushed) && t->wake_head != head)) {
		t->wake_head = head;
		link_wake();
	}
	return pushed;
}

/* Record one sample into the calling thread's ring (claimed or created on first use); counts
 * it in ctl.lost_no_ring when no ring can be had. raw != NULL: an ALLOC_RAW record. Returns
 * whether the record was published, and then its LLGO_LIVE_REF (ring id, seq) in *ref. A full
 * ring waits for the daemon first when full.c says so. Inline: a plain record into a ring the
 * thread has, nobody verifying. */
static inline bool emit_sample(struct llgo_heap_thread *t, uint64_t size, uint64_t rate,
			       uint64_t addr, const uint64_t *frames, uint32_t n,
			       const struct stackcopy *raw, uint64_t *ref)
{
	if (llgo_unlikely(!t->ring.hdr || raw || probe_enabled()))
		return emit_sample_slow(t, size, rate, addr, frames, n, raw, ref);
	if (n > LLGO_MAX_FRAMES)
		n = LLGO_MAX_FRAMES;
	full_wait(t, &t->ring, llgo_record_alloc_len(n), rate);
	uint64_t before = atomic_load_explicit(&t->ring.hdr->head, memory_order_relaxed);
	bool pushed = emit_push_alloc(&t->ring, size, rate, addr, t->tid, frames, n);
	return emit_pushed(t, before, pushed, ref);
}

#pragma GCC visibility pop

#endif
