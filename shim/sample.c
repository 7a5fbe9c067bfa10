// SPDX-License-Identifier: MIT
/*
 * sample.c: the sampler's slow path. The fast paths (override.c for the malloc family, the
 * inline hook in include/llgo_heap.h) subtract each size from the thread's countdown and come
 * here when it runs out, or for every allocation at rate 1. Here the real allocation is made,
 * the decision is taken with Go's semantics, and a sampled allocation gets its stack
 * (stack.c) and a record in the thread's ring (emit.c).
 *
 * Sampling (Go's runtime/malloc.go, nextSample): the bytes between two samples are drawn from
 * an exponential distribution of mean `rate`, so each byte is sampled with probability
 * 1/rate independently of allocation sizes, and an allocation of S bytes is sampled with
 * probability 1 - exp(-S/rate), which is what pprof's scaling inverts (see
 * docs/sampling.md). The draw is -ln(u) * rate for u uniform in (0, 1], rounded up to whole
 * bytes (an integer size S crosses a countdown c exactly when S >= c, so ceil keeps
 * P(sampled) exact), and clamped to 64 * rate, like LLGo's runtime.
 *
 * In-use tracking: the decision is taken before the real allocation, so that an object
 * sampled at a rate > 1 can be placed on a page boundary inside a real block (live.c), where
 * free finds it by its low 12 bits; at rate 1 objects stay where the real function puts them.
 * A sampled object whose record was published is entered in the live-object table.
 *
 * Re-entrancy: everything below the guard may call into libc (a ring's first mmap, a
 * sendmsg, pthread_setspecific) and so into malloc; such nested calls see the guard and are
 * never sampled. Nothing below takes a lock or calls a pthread function that does: a thread
 * may be sampled while glibc holds its own locks (pthread_getattr_np allocates under one). errno
 * is saved right after the real call and restored before returning, so the program sees the
 * real allocator's errno. What is left to others: stack capture and trimming (stack.c),
 * rings (emit.c), whether the process may record at all (lifecycle.c).
 */
#include <errno.h>
#include <unistd.h>

#include "internal.h"

/* Zero in a new thread: countdown 0 sends the first allocation to the slow path, and gen 0
 * never equals emit_generation(), so the slow path initialises the thread. */
llgo_export __thread struct llgo_heap_thread llgo_heap_tls llgo_tls_ie;

/* ---- random numbers and the threshold draw ------------------------------------------- */

uint64_t sample_rng_next(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545f4914f6cdd1dULL;
}

/*
 * ln(x) = e*ln2 + ln(m) with x = m * 2^e, m in [sqrt(1/2), sqrt(2)); ln(m) = 2 atanh(s) with
 * s = (m-1)/(m+1), |s| <= 0.1716, summed as 2s(1 + s^2/3 + s^4/5 + ... + s^16/17): the first
 * omitted term is below 2^-53 relative. Accuracy ~1e-15, plenty for a sampling threshold.
 */
double sample_log(double x)
{
	if (!(x > 0))
		return x == 0 ? -__builtin_inf() : __builtin_nan("");
	uint64_t bits;
	memcpy(&bits, &x, sizeof(bits));
	int e = (int)((bits >> 52) & 0x7ff);
	if (e == 0x7ff)
		return x;
	if (e == 0) { /* subnormal: scale into the normal range */
		x *= 0x1p54;
		memcpy(&bits, &x, sizeof(bits));
		e = (int)((bits >> 52) & 0x7ff) - 54;
	}
	e -= 1023;
	bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
	double m;
	memcpy(&m, &bits, sizeof(m));
	if (m > 1.4142135623730951) {
		m *= 0.5;
		e++;
	}
	double s = (m - 1.0) / (m + 1.0), s2 = s * s;
	double p = 1.0 / 17;
	p = 1.0 / 15 + s2 * p;
	p = 1.0 / 13 + s2 * p;
	p = 1.0 / 11 + s2 * p;
	p = 1.0 / 9 + s2 * p;
	p = 1.0 / 7 + s2 * p;
	p = 1.0 / 5 + s2 * p;
	p = 1.0 / 3 + s2 * p;
	return (double)e * 0.69314718055994530942 + 2.0 * s * (1.0 + s2 * p);
}

int64_t sample_next_threshold(uint64_t *rng, uint64_t rate)
{
	if (rate > LLGO_RATE_MAX)
		rate = LLGO_RATE_MAX;
	/* u in (0, 1]: 53 random bits, never 0 so the log is finite */
	double u = (double)((sample_rng_next(rng) >> 11) + 1) * 0x1p-53;
	double v = -sample_log(u) * (double)rate;
	double max = 64.0 * (double)rate;
	if (v > max)
		v = max;
	int64_t c = (int64_t)v;
	if ((double)c < v)
		c++;
	return c < 1 ? 1 : c;
}

bool sample_decide(struct llgo_heap_thread *t, int64_t w, size_t size)
{
	if (w < 0)
		return true;
	if (!t->started) {
		int64_t d = sample_next_threshold(&t->rng, (uint64_t)w);
		t->started = 1;
		if (size >= (uint64_t)d) {
			t->countdown = sample_next_threshold(&t->rng, (uint64_t)w);
			return true;
		}
		t->countdown = d - (int64_t)size;
		return false;
	}
	/* Here after a rate change from "every" (the fast path skipped the countdown) */
	if (t->countdown > 0)
		return false;
	t->countdown = sample_next_threshold(&t->rng, (uint64_t)w);
	return true;
}

/* ---- the slow path --------------------------------------------------------------------- */

/* First slow path of a thread the shim did not see start (its pthread_create wrapper and the
 * constructor set this up beforehand), or first after a fork (generation changed). No lock,
 * no pthread call: the stack bounds are found by stack.c when the walk needs them. */
static llgo_noinline void sample_thread_init(struct llgo_heap_thread *t)
{
	if (t->gen != 0) {
		/* A fork child, or a memfd replaced: the ring was the old one. */
		t->ring.hdr = NULL;
		t->ring_failed = 0;
	}
	lifecycle_thread_adopt(t);
}

/*
 * The decision, taken before the real allocation so that a sampled object can be placed where
 * free will look for it (live.c). Returns the rate word when this allocation is sampled, with
 * the guard held (sample_record releases it); 0 when it is not (guard untouched).
 */
static inline __attribute__((always_inline)) int64_t sample_begin(struct llgo_heap_thread *t,
								 size_t size)
{
	if (t->guard)
		return 0;
	/* Inside fork() (forking 1: between the handlers, in the parent or the child) nothing
	 * is recorded; a child's first slow path after it (fork, or a raw clone: the process
	 * mark reads 0) makes the control page and the rings its own. */
	if (llgo_unlikely(t->forking == 1))
		return 0;
	lifecycle_settled(t);
	int64_t w = atomic_load_explicit(&attach_ctl.rate_word, memory_order_relaxed);
	if (w == 0)
		return 0;
	t->guard = 1;
	if (llgo_unlikely(t->gen != emit_generation()))
		sample_thread_init(t);
	if (w < 0 || sample_decide(t, w, size)) { /* (sample_decide's first case, inline) */
		if (llgo_likely(link_enter())) /* left where the guard is released */
			return w;
	}
	t->guard = 0;
	return 0;
}

/* The guard of a sampled allocation released (sample_begin returned non-zero). */
static inline void sample_end(struct llgo_heap_thread *t)
{
	t->guard = 0;
	link_leave();
}

/*
 * Record the sampled allocation p (NULL: it failed, nothing is recorded), track it when asked,
 * and release the guard. Returns the block for the program: p, or, when p lies inside its
 * real block (off != 0) and could not be tracked (its record dropped, the table full), a
 * copy in a plain block (free would not find p's real block): NULL and *err = ENOMEM when
 * even that fails. asked: the bytes of p the program may use (what a copy takes).
 */
static void *sample_record(struct llgo_heap_thread *t, int64_t w, size_t size, size_t asked,
			   void *p, uint32_t off, void *ra, void *frame, bool track, int *err)
{
	bool tracked = false;
	if (p) {
		/* Nested allocations below (first ring, pthread_setspecific) must not eat the
		 * fresh threshold: they are not the program's. */
		int64_t keep = t->countdown;
		if (llgo_unlikely(!lifecycle_ready(t))) {
			/* No daemon to give it to: no stack walk, counted for the next profile. */
			atomic_fetch_add_explicit(&attach_ctl.lost_detached, 1,
						  memory_order_relaxed);
		} else {
			uint32_t n = stack_sample(t, ra, frame);
			const uint64_t *frames = t->memo.raw + t->memo.skip;
			uint64_t rate = llgo_rate_from_word(w), ref = 0;
			struct stackcopy sc;
			bool raw = stackcopy_wanted(frames, n, &t->memo) &&
				   stackcopy_fill(&sc, t, ra, frame, 0);
			if (emit_sample(t, size, rate, (uint64_t)(uintptr_t)p, frames, n,
					raw ? &sc : NULL, &ref) &&
			    track)
				tracked = live_track(w, (uint64_t)(uintptr_t)p,
						     llgo_live_key_finish(t->memo.key, size, rate),
						     ref, size, off);
		}
		t->countdown = keep;
	}
	sample_end(t);
	if (p && off && !tracked) {
		/* p goes away: for otel_memory, freed (an alloc it never reported when the record
		 * was dropped: collectors ignore a free of an address they do not hold) */
		if (probe_otel_free_enabled())
			probe_otel_free((uint64_t)(uintptr_t)p);
		void *q = live_malloc_real(asked);
		if (q)
			memcpy(q, p, asked);
		else
			*err = ENOMEM;
		live_unplace(p, off);
		p = q;
	}
	return p;
}

/* Sampled at a rate > 1 with placement available: the object goes on a page boundary, so
 * that free finds it by its low 12 bits (live.c). */
static inline bool sample_placing(int64_t w)
{
	return w > 0 && live_can_place();
}

static inline bool sample_pow2(size_t x)
{
	return x && !(x & (x - 1));
}

/*
 * The entry points below are reached by a tail call from a frameless interposed function, so
 * their own frame's saved frame pointer is the program's frame at the allocating call. They
 * are noinline (the frame must exist) and cold (kept away from hot text).
 */
#define SAMPLE_SLOW llgo_hidden llgo_noinline llgo_cold

SAMPLE_SLOW void *sample_malloc(void *(*fn)(size_t), size_t size, void *ra)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	int64_t w = sample_begin(t, size);
	if (!w)
		return fn(size);
	bool place = sample_placing(w);
	uint32_t off = 0;
	void *p = place ? live_place(size, &off) : fn(size);
	int e = errno;
	p = sample_record(t, w, size, size, p, off, ra, __builtin_frame_address(0),
			  w < 0 || place, &e);
	errno = e;
	return p;
}

SAMPLE_SLOW void *sample_calloc(void *(*fn)(size_t, size_t), size_t n, size_t size, void *ra)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	size_t total = n * size; /* the fast path checked the product for overflow */
	int64_t w = sample_begin(t, total);
	if (!w)
		return fn(n, size);
	bool place = sample_placing(w);
	uint32_t off = 0;
	void *p;
	if (place) {
		p = live_place(total, &off);
		if (p)
			memset(p, 0, total);
	} else {
		p = fn(n, size);
	}
	int e = errno;
	p = sample_record(t, w, total, total, p, off, ra, __builtin_frame_address(0),
			  w < 0 || place, &e);
	errno = e;
	return p;
}

/*
 * realloc of p, which lies old_off bytes inside its real block (0: p is the real block).
 * w != 0: this realloc is sampled (guard held). realloc counts as an allocation of the new
 * size when it returns a block; realloc(p, 0) goes to the real realloc (glibc frees p and
 * returns NULL: nothing sampled); realloc(NULL, n) is malloc(n). When p is a real block and
 * the new one need not be placed, the real realloc does everything. Otherwise the new block
 * is made (placed when sampled at a rate > 1), the bytes the program could use are copied,
 * and the old real block is freed, only once the new one is final: a failure returns NULL
 * with ENOMEM and leaves p as it was (the caller puts back its entry). A placed p's entry is
 * removed just before its real block is freed.
 */
static void *sample_realloc_common(struct llgo_heap_thread *t, int64_t w,
				   void *(*fn)(void *, size_t), void *p, uint32_t old_off,
				   size_t size, void *ra, void *frame)
{
	unsigned char *base = p && old_off != LIVE_OFF_ARENA ? (unsigned char *)p - old_off : NULL;
	if (p && size == 0) {
		if (w)
			sample_end(t);
		if (old_off)
			live_remove((uint64_t)(uintptr_t)p, NULL);
		if (old_off == LIVE_OFF_ARENA) {
			live_unplace(p, old_off); /* as glibc's realloc(p, 0): freed, NULL */
			return NULL;
		}
		return fn(base, 0);
	}
	bool place = w && sample_placing(w);
	int e;
	if (!old_off && !place) {
		void *q = fn(p, size);
		if (!w)
			return q;
		e = errno;
		q = sample_record(t, w, size, size, q, 0, ra, frame, w < 0, &e);
		errno = e;
		return q;
	}
	uint32_t off = 0;
	void *q = place ? live_place(size, &off) : live_malloc_real(size);
	if (q && p) {
		size_t old = old_off ? live_placed_usable(p, old_off) : live_usable_real(p);
		memcpy(q, p, old < size ? old : size);
	}
	e = errno;
	if (w)
		q = sample_record(t, w, size, size, q, off, ra, frame, true, &e);
	if (q && p) {
		if (old_off) {
			live_remove((uint64_t)(uintptr_t)p, NULL);
			live_unplace(p, old_off);
		} else {
			live_free_real(p);
		}
	}
	errno = e;
	return q;
}

SAMPLE_SLOW void *sample_realloc(void *(*fn)(void *, size_t), void *p, size_t size, void *ra)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	int64_t w = sample_begin(t, size);
	return sample_realloc_common(t, w, fn, p, 0, size, ra, __builtin_frame_address(0));
}

/*
 * realloc of a block free would look up (p & live_mask == 0, p != NULL): it may be tracked.
 * A tracked real block's entry goes first (the real realloc frees p, and its address may be
 * handed out again at once); if that realloc fails p is live again and its entry is put
 * back. A placed object's entry stays until its real block is freed (its offset is needed
 * to free it). Then the sampling decision the fast path skipped.
 */
SAMPLE_SLOW void *sample_realloc_tracked(void *(*fn)(void *, size_t), void *p, size_t size)
{
	void *ra = __builtin_return_address(0); /* a tail call: the program's call site */
	struct llgo_heap_thread *t = &llgo_heap_tls;
	/* a closed gate (detach): the table is going; a late copy's objects are real blocks */
	if (!link_enter())
		return fn(p, size);
	struct llgo_live_entry old;
	uint32_t old_off = 0;
	bool had = live_find((uint64_t)(uintptr_t)p, &old);
	if (had) {
		old_off = LLGO_LIVE_OFF(old.size);
		if (!old_off)
			live_remove((uint64_t)(uintptr_t)p, NULL);
	} else {
		old_off = live_inherited_off(p); /* an arena object a fork child inherited */
	}
	int64_t w = atomic_load_explicit(&attach_ctl.rate_word, memory_order_relaxed);
	bool due = w < 0;
	if (w > 0) {
		int64_t left = (int64_t)((uint64_t)t->countdown - (uint64_t)size);
		t->countdown = left;
		due = left <= 0;
	}
	w = due ? sample_begin(t, size) : 0;
	void *q = sample_realloc_common(t, w, fn, p, old_off, size, ra,
					__builtin_frame_address(0));
	if (!q && size && had && !old_off) {
		int e = errno;
		live_restore((uint64_t)(uintptr_t)p, &old);
		errno = e;
	}
	link_leave();
	return q;
}

SAMPLE_SLOW void *sample_memalign(void *(*fn)(size_t, size_t), size_t align, size_t size,
				  void *ra)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	int64_t w = sample_begin(t, size);
	if (!w)
		return fn(align, size);
	/* An alignment of a page or more is on a page already; an invalid one is left to the
	 * real function (its error), the object untracked. */
	bool place = align < LIVE_PAGE && (align == 0 || sample_pow2(align)) && sample_placing(w);
	uint32_t off = 0;
	void *p = place ? live_place(size, &off) : fn(align, size);
	int e = errno;
	p = sample_record(t, w, size, size, p, off, ra, __builtin_frame_address(0), true, &e);
	errno = e;
	return p;
}

SAMPLE_SLOW int sample_posix_memalign(int (*fn)(void **, size_t, size_t), void **pp,
				      size_t align, size_t size, void *ra)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	int64_t w = sample_begin(t, size);
	if (!w)
		return fn(pp, align, size);
	int e0 = errno;
	bool place = align < LIVE_PAGE && sample_pow2(align) && align >= sizeof(void *) &&
		     sample_placing(w);
	int rc;
	uint32_t off = 0;
	void *p = NULL;
	if (place) {
		p = live_place(size, &off);
		rc = p ? 0 : ENOMEM;
	} else {
		rc = fn(&p, align, size);
	}
	errno = e0; /* posix_memalign reports through its result, not errno */
	int e = errno;
	if (rc == 0) {
		p = sample_record(t, w, size, size, p, off, ra, __builtin_frame_address(0), true,
				  &e);
		if (p)
			*pp = p;
		else
			rc = ENOMEM;
	} else {
		sample_end(t);
	}
	errno = e0;
	return rc;
}

SAMPLE_SLOW void *sample_new(void *(*alloc)(size_t, size_t), size_t size, size_t align,
			     void *ra, void *frame)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	int64_t w = sample_begin(t, size);
	if (!w)
		return alloc(size, align);
	/* a page boundary suits every alignment below a page; the block holds what the real
	 * aligned operator's would: the size rounded up to the alignment */
	bool place = align < LIVE_PAGE && sample_placing(w);
	size_t asked = size ? size : 1;
	if (align > 1)
		asked = (asked + align - 1) & ~(align - 1);
	uint32_t off = 0;
	void *p = place ? live_place(asked, &off) : alloc(size, align);
	int e = errno;
	p = sample_record(t, w, size, asked, p, off, ra, frame, w < 0 || place, &e);
	errno = e;
	return p;
}

/* A linked allocator's block: recorded, never tracked (its frees are not seen). */
void sample_hooked(void *p, size_t size, void *ra, void *frame)
{
	int e = errno;
	struct llgo_heap_thread *t = &llgo_heap_tls;
	int64_t w = sample_begin(t, size);
	int e2 = 0;
	if (w)
		sample_record(t, w, size, size, p, 0, ra, frame, false, &e2);
	errno = e;
}
