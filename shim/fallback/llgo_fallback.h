// SPDX-License-Identifier: MIT
/*
 * llgo_fallback.h: the size-class fallback recorder, for targets that have no stack source
 * (WebAssembly, bare-metal microcontrollers, host tools), as the original proposal keeps it.
 *
 * It samples allocations with the same exponential thresholds as the native shim and as Go
 * (on average one sample per `rate` bytes, each byte sampled with probability 1/rate, raw
 * counts kept so that pprof applies Go's Poisson correction), but keys its buckets by size
 * class instead of by stack, and writes Go's legacy heap profile text (the format of
 * runtime/pprof's heap profile at debug=1) through a write function the caller supplies.
 *
 * Freestanding: the recorder needs only <stddef.h>, <stdint.h> and <stdbool.h> and the
 * compiler's runtime (libgcc / compiler-rt: 64-bit division and soft floating point on
 * targets without them). It calls no libc function, allocates nothing (the caller provides
 * the struct, usually a static), starts no thread and takes no lock. The compiler may still
 * emit calls to memset/memcpy, which freestanding C requires the environment to provide.
 *
 * Concurrency: a recorder is owned by one thread of control. A target with threads or
 * allocating interrupt handlers keeps one recorder per thread (or core) and writes each, or
 * serializes the calls itself (e.g. with interrupts masked around the allocator).
 *
 * Use from an allocator:
 *     static struct llgo_fallback prof;
 *     llgo_fallback_init(&prof, LLGO_FALLBACK_DEFAULT_RATE, seed);
 *     void *my_malloc(size_t n) {
 *             void *p = ...;
 *             if (p && llgo_fallback_alloc(&prof, n))
 *                     mark_sampled(p);        // optional: for in-use accounting
 *             return p;
 *     }
 *     void my_free(void *p) { if (was_sampled(p)) llgo_fallback_free(&prof, size_of(p)); ... }
 *     llgo_fallback_write(&prof, my_write, ctx);  // Go's legacy heap text
 */
#ifndef LLGO_FALLBACK_H
#define LLGO_FALLBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLGO_FALLBACK_DEFAULT_RATE 524288u
/* Rates above this are clamped (so that 64 * rate, the largest threshold, fits anywhere). */
#define LLGO_FALLBACK_RATE_MAX (1ull << 40)

/*
 * Size classes: every size up to 16 bytes is class 16 (as Go's tiny allocations); above, each
 * power-of-two interval (2^k, 2^(k+1)] is cut into four classes of equal width, so that the
 * sizes sharing a class differ by at most 25% (20, 24, 28, 32, 40, 48, ... 1024, 1280, ...).
 * Class sizes go up to 2^(bits of size_t) on 32-bit targets and to 2^48 on 64-bit ones
 * (larger requests are counted in the last class).
 */
#if SIZE_MAX > 0xffffffffu
#define LLGO_FALLBACK_MAX_LOG2 47
#else
#define LLGO_FALLBACK_MAX_LOG2 31
#endif
#define LLGO_FALLBACK_NCLASSES (1 + 4 * (LLGO_FALLBACK_MAX_LOG2 - 3))

/* Raw (unscaled) counts of one size class, as Go keeps per bucket. */
struct llgo_fallback_class {
	uint64_t alloc_objects, alloc_bytes;
	uint64_t free_objects, free_bytes;
};

/*
 * One recorder. countdown is the bytes left before the next sample: the inline fast path
 * subtracts each size and calls llgo_fallback_sample when it reaches <= 0. Everything else is
 * touched only by the out-of-line functions. Treat the fields as private.
 */
struct llgo_fallback {
	int64_t countdown;
	uint64_t rate;    /* 0 off, 1 every allocation, N mean bytes between samples */
	uint64_t rng;     /* xorshift64* state, never 0 */
	uint32_t started; /* countdown holds a drawn threshold */
	uint32_t pad;
	uint64_t samples; /* allocations recorded since init */
	struct llgo_fallback_class classes[LLGO_FALLBACK_NCLASSES];
};

/* Start a recorder at rate (see llgo_fallback_set_rate); seed picks the random stream (any
 * value; give each run and each recorder its own, e.g. from a timer or a hardware RNG). */
void llgo_fallback_init(struct llgo_fallback *f, uint64_t rate, uint64_t seed);

/* Go's runtime.MemProfileRate: 0 stops recording at the next allocation, 1 records every
 * allocation, N samples one allocation per N bytes on average. Counts gathered so far are
 * kept. The sample stream restarts with a fresh draw at the new rate (the exponential
 * distribution is memoryless, so the estimate stays unbiased). */
void llgo_fallback_set_rate(struct llgo_fallback *f, uint64_t rate);
uint64_t llgo_fallback_rate(const struct llgo_fallback *f);

/* The slow path: decides with Go's semantics after the fast path ran the countdown out, and
 * records a sampled allocation in its size class. Returns true when it was recorded. */
bool llgo_fallback_sample(struct llgo_fallback *f, size_t size);

/*
 * Report an allocation of size bytes. Returns true when it was sampled (recorded): an
 * allocator that wants in-use counts remembers that for the block and calls
 * llgo_fallback_free with the same size when it frees it. Cost when no sample is due: a load
 * and a branch at rate 0; the countdown update and a second branch otherwise.
 */
static inline bool llgo_fallback_alloc(struct llgo_fallback *f, size_t size)
{
	if (__builtin_expect(f->rate == 0, 1))
		return false;
	/* At rate 1 the slow path keeps countdown at 0, so every allocation goes there. */
	int64_t left = (int64_t)((uint64_t)f->countdown - (uint64_t)size);
	f->countdown = left;
	if (__builtin_expect(left > 0, 1))
		return false;
	return llgo_fallback_sample(f, size);
}

/* The block of size bytes whose allocation was sampled (llgo_fallback_alloc returned true)
 * is freed: it leaves the in-use counts of its class. */
void llgo_fallback_free(struct llgo_fallback *f, size_t size);

/* The class of size: its index in f->classes and, through *lo and *hi, the smallest and the
 * largest size it holds. */
unsigned llgo_fallback_class_of(size_t size, uint64_t *lo, uint64_t *hi);

/*
 * Write Go's legacy heap profile text (runtime/pprof, debug=1; `go tool pprof` reads it):
 *     heap profile: <inuse objs>: <inuse bytes> [<alloc objs>: <alloc bytes>] @ heap/<2*rate>
 *     <inuse objs>: <inuse bytes> [<alloc objs>: <alloc bytes>] @
 *     # size class <lo>-<hi>
 *     (blank line)
 * one stackless record per class with samples, by in-use bytes then allocated bytes,
 * descending; counts are raw, as Go writes them. The text ends with a comment giving the
 * recorder's rate and sample count. write(ctx, s, n) is called with pieces of the text; a
 * non-zero return stops the output and is returned. Returns 0 when everything was written.
 */
typedef int (*llgo_fallback_write_fn)(void *ctx, const char *s, size_t n);
int llgo_fallback_write(const struct llgo_fallback *f, llgo_fallback_write_fn write, void *ctx);

#ifdef __cplusplus
}
#endif

#endif
