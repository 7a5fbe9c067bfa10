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
 * Re-entrancy: everything below the guard may call into libc (pthread_getattr_np, memfd,
 * sendmsg) and so into malloc; such nested calls see the guard and are never sampled. errno
 * is saved right after the real call and restored before returning, so the program sees the
 * real allocator's errno. What is left to others: stack capture and trimming (stack.c),
 * rings (emit.c), rate and connection (attach.c).
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Zero in a new thread: countdown 0 sends the first allocation to the slow path, and gen 0
 * never equals emit_generation(), so the slow path initialises the thread. */
llgo_export __thread struct llgo_heap_thread llgo_heap_tls llgo_tls_ie;

/* ---- random numbers and the threshold draw ------------------------------------------- */

uint64_t sample_rng_seed(uint64_t a, uint64_t b)
{
	/* splitmix64 finaliser over both inputs: nearby tids and times give unrelated seeds */
	uint64_t z = a * 0x9e3779b97f4a7c15ULL ^ b;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z ? z : 0x853c49e6748fea9bULL;
}

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

/* First slow path of a thread, or first after a fork (generation changed). Under guard. */
static llgo_noinline void sample_thread_init(struct llgo_heap_thread *t)
{
	uint32_t gen = emit_generation();
	if (t->gen != 0 && t->gen != gen) {
		/* A fork child: the ring was the parent's and is unmapped already. */
		t->ring.hdr = NULL;
		t->ring_failed = 0;
	}
	t->tid = (uint32_t)gettid();
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	t->rng = sample_rng_seed(((uint64_t)t->tid << 32) ^ (uint64_t)(uintptr_t)t ^ t->rng, now);
	if (!t->stack_hi)
		stack_thread_bounds(&t->stack_lo, &t->stack_hi);
	t->gen = gen;
	t->inited = 1;
}

static inline void sample_take(size_t size, void *p, void *ra, void *frame)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	if (t->guard)
		return;
	int64_t w = atomic_load_explicit(&attach_ctl.rate_word, memory_order_relaxed);
	/* rate 0, or this thread is forking: until the child handler ran, the control page and
	 * the rings a child would see are its parent's (other threads record on) */
	if (w == 0 || t->forking)
		return;
	t->guard = 1;
	if (llgo_unlikely(t->gen != emit_generation()))
		sample_thread_init(t);
	if (sample_decide(t, w, size) && p) {
		/* Nested allocations below (first ring, pthread_setspecific) must not eat the
		 * fresh threshold: they are not the program's. */
		int64_t keep = t->countdown;
		uint64_t frames[LLGO_MAX_FRAMES];
		/* Called from a real C++ operator new under one of our wrappers: walk from the
		 * wrapper and record the size the program asked of it. */
		uintptr_t cxx = 0;
		if (t->cxx_frame && stack_is_cxx_operator((uint64_t)(uintptr_t)ra)) {
			cxx = t->cxx_frame;
			size = t->cxx_size;
		}
		uint32_t n = stack_capture(frames, LLGO_MAX_FRAMES, ra, frame, cxx, t->stack_lo,
					   t->stack_hi);
		struct stackcopy sc;
		bool raw = stackcopy_take(&sc, t, frames, n, ra, frame, cxx);
		emit_sample(t, size, llgo_rate_from_word(w), (uint64_t)(uintptr_t)p, frames, n,
			    raw ? &sc : NULL);
		t->countdown = keep;
	}
	t->guard = 0;
}

/*
 * The entry points below are reached by a tail call from a frameless interposed function, so
 * their own frame's saved frame pointer is the program's frame at the allocating call. They
 * are noinline (the frame must exist) and cold (kept away from hot text).
 */
#define SAMPLE_SLOW llgo_hidden llgo_noinline llgo_cold

SAMPLE_SLOW void *sample_malloc(void *(*fn)(size_t), size_t size, void *ra)
{
	void *p = fn(size);
	int e = errno;
	sample_take(size, p, ra, __builtin_frame_address(0));
	errno = e;
	return p;
}

SAMPLE_SLOW void *sample_calloc(void *(*fn)(size_t, size_t), size_t n, size_t size, void *ra)
{
	void *p = fn(n, size);
	int e = errno;
	/* n * size cannot overflow when the real calloc succeeded */
	sample_take(p ? n * size : 0, p, ra, __builtin_frame_address(0));
	errno = e;
	return p;
}

/* realloc counts as an allocation of the new size when it returns a block: realloc(p, 0)
 * frees p and returns NULL in glibc (nothing sampled); realloc(NULL, 0) is malloc(0). */
SAMPLE_SLOW void *sample_realloc(void *(*fn)(void *, size_t), void *p, size_t size, void *ra)
{
	void *q = fn(p, size);
	int e = errno;
	sample_take(size, q, ra, __builtin_frame_address(0));
	errno = e;
	return q;
}

SAMPLE_SLOW void *sample_memalign(void *(*fn)(size_t, size_t), size_t align, size_t size,
				  void *ra)
{
	void *p = fn(align, size);
	int e = errno;
	sample_take(size, p, ra, __builtin_frame_address(0));
	errno = e;
	return p;
}

SAMPLE_SLOW int sample_posix_memalign(int (*fn)(void **, size_t, size_t), void **pp,
				      size_t align, size_t size, void *ra)
{
	int rc = fn(pp, align, size);
	int e = errno;
	sample_take(size, rc == 0 ? *pp : NULL, ra, __builtin_frame_address(0));
	errno = e;
	return rc;
}

void sample_hooked(void *p, size_t size, void *ra, void *frame)
{
	int e = errno;
	sample_take(size, p, ra, frame);
	errno = e;
}
