// SPDX-License-Identifier: MIT
/*
 * llgo_fallback.c: the size-class fallback recorder (llgo_fallback.h): threshold draws, the
 * sampling decision, size classes and the Go legacy heap text writer. Freestanding: no libc
 * call, no allocation, no lock, no thread; this file depends on nothing else of llgo-heap, so
 * it builds alone for wasm32-wasi, for bare-metal Cortex-M and natively. What it leaves to
 * the caller: owning the recorder from one thread of control, remembering which blocks were
 * sampled (for in-use counts), a seed, and where the text goes.
 *
 * Sampling (Go's runtime/malloc.go nextSample and docs/sampling.md): the bytes between two
 * samples follow an exponential distribution of mean `rate`, drawn as -ln(u) * rate with u
 * uniform in (0, 1], rounded up to whole bytes and clamped to [1, 64 * rate] as the native
 * shim does. An allocation that runs the countdown out is sampled once at its full size and
 * the overshoot is discarded; the first allocation of a stream draws and is sampled only if
 * its size reaches the draw. So an allocation of S bytes is sampled with probability
 * 1 - exp(-S/rate), which is what pprof's scaling (scaleHeapSample) inverts.
 */
#include "llgo_fallback.h"

/* ---- random numbers and the threshold draw --------------------------------------------- */

/* splitmix64's output function: spreads any seed (0, 1, 2, ...) over the whole state. */
static uint64_t fallback_mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* xorshift64* (Vigna): period 2^64 - 1; the state is never 0. */
static uint64_t fallback_rng(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/*
 * -ln(u) for u in (0, 1], without libm. With u = m * 2^-e, m in [1/sqrt2, sqrt2):
 * -ln(u) = e * ln2 - ln(m), and ln(m) = 2 atanh(t) with t = (m - 1)/(m + 1), |t| < 0.172,
 * summed to t^15 (the next term is below 1e-13 relative). Plenty for a sampling threshold.
 */
static double fallback_neglog(double u)
{
	int e = 0;
	double m = u;
	while (m < 0.7071067811865476) {
		m *= 2;
		e++;
	}
	double t = (m - 1) / (m + 1), t2 = t * t;
	double sum = 1.0 / 15;
	sum = 1.0 / 13 + t2 * sum;
	sum = 1.0 / 11 + t2 * sum;
	sum = 1.0 / 9 + t2 * sum;
	sum = 1.0 / 7 + t2 * sum;
	sum = 1.0 / 5 + t2 * sum;
	sum = 1.0 / 3 + t2 * sum;
	sum = 1.0 + t2 * sum;
	return (double)e * 0.6931471805599453 - 2 * t * sum;
}

static int64_t fallback_draw(struct llgo_fallback *f)
{
	/* u in (0, 1]: 53 random bits plus one, so the log is finite */
	double u = (double)((fallback_rng(&f->rng) >> 11) + 1) * (1.0 / 9007199254740992.0);
	double rate = (double)f->rate;
	double v = fallback_neglog(u) * rate;
	if (v > 64 * rate)
		v = 64 * rate;
	int64_t c = (int64_t)v;
	if ((double)c < v)
		c++;
	return c < 1 ? 1 : c;
}

/* ---- rate and state -------------------------------------------------------------------- */

void llgo_fallback_set_rate(struct llgo_fallback *f, uint64_t rate)
{
	if (rate > LLGO_FALLBACK_RATE_MAX)
		rate = LLGO_FALLBACK_RATE_MAX;
	f->rate = rate;
	f->started = 0;
	f->countdown = 0; /* the next allocation enters the slow path and draws */
}

uint64_t llgo_fallback_rate(const struct llgo_fallback *f)
{
	return f->rate;
}

void llgo_fallback_init(struct llgo_fallback *f, uint64_t rate, uint64_t seed)
{
	unsigned char *b = (unsigned char *)f;
	for (size_t i = 0; i < sizeof(*f); i++)
		b[i] = 0;
	f->rng = fallback_mix(seed);
	if (!f->rng)
		f->rng = 0x853c49e6748fea9bull;
	llgo_fallback_set_rate(f, rate);
}

/* ---- size classes ---------------------------------------------------------------------- */

/* The smallest (lo) and the largest (hi) size of class idx. */
static void fallback_range(unsigned idx, uint64_t *lo, uint64_t *hi)
{
	if (idx == 0) {
		*lo = 0;
		*hi = 16;
		return;
	}
	unsigned k = 4 + (idx - 1) / 4, sub = 1 + (idx - 1) % 4;
	uint64_t base = 1ull << k, step = base >> 2;
	*lo = base + (uint64_t)(sub - 1) * step + 1;
	*hi = base + (uint64_t)sub * step;
}

unsigned llgo_fallback_class_of(size_t size, uint64_t *lo, uint64_t *hi)
{
	uint64_t s = size;
	unsigned idx = 0;
	if (s > 16) {
		/* k: s in (2^k, 2^(k+1)], cut into four classes of width 2^(k-2) */
		unsigned k = 63u - (unsigned)__builtin_clzll(s - 1);
		unsigned sub = 4;
		if (k <= LLGO_FALLBACK_MAX_LOG2) {
			uint64_t base = 1ull << k, step = base >> 2;
			sub = (unsigned)((s - base + step - 1) / step);
		} else {
			k = LLGO_FALLBACK_MAX_LOG2;
		}
		idx = 1 + 4 * (k - 4) + (sub - 1);
	}
	fallback_range(idx, lo, hi);
	return idx;
}

/* ---- the slow path --------------------------------------------------------------------- */

static void fallback_record(struct llgo_fallback *f, size_t size)
{
	uint64_t lo, hi;
	struct llgo_fallback_class *c = &f->classes[llgo_fallback_class_of(size, &lo, &hi)];
	c->alloc_objects++;
	c->alloc_bytes += size;
	f->samples++;
}

bool llgo_fallback_sample(struct llgo_fallback *f, size_t size)
{
	if (f->rate == 0)
		return false;
	if (f->rate == 1) {
		f->countdown = 0;
		fallback_record(f, size);
		return true;
	}
	if (!f->started) {
		/* A new stream (init or rate change): the fast path's subtraction from 0 is
		 * meaningless; draw the first threshold and compare the whole size with it. */
		int64_t d = fallback_draw(f);
		f->started = 1;
		if ((uint64_t)size < (uint64_t)d) {
			f->countdown = d - (int64_t)size;
			return false;
		}
	} else if (f->countdown > 0) {
		return false;
	}
	f->countdown = fallback_draw(f);
	fallback_record(f, size);
	return true;
}

void llgo_fallback_free(struct llgo_fallback *f, size_t size)
{
	uint64_t lo, hi;
	struct llgo_fallback_class *c = &f->classes[llgo_fallback_class_of(size, &lo, &hi)];
	c->free_objects++;
	c->free_bytes += size;
}

/* ---- Go legacy heap text --------------------------------------------------------------- */

/* A small output buffer, so that the caller's write sees lines rather than single numbers. */
struct fallback_out {
	llgo_fallback_write_fn write;
	void *ctx;
	int err;
	size_t n;
	char buf[256];
};

static void fallback_flush(struct fallback_out *o)
{
	if (o->n && !o->err)
		o->err = o->write(o->ctx, o->buf, o->n);
	o->n = 0;
}

static void fallback_puts(struct fallback_out *o, const char *s)
{
	for (; *s; s++) {
		if (o->n == sizeof(o->buf))
			fallback_flush(o);
		o->buf[o->n++] = *s;
	}
}

static void fallback_putu(struct fallback_out *o, uint64_t v)
{
	char tmp[24];
	size_t n = sizeof(tmp) - 1;
	tmp[n] = '\0';
	do {
		tmp[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	fallback_puts(o, tmp + n);
}

/* "<io>: <ib> [<ao>: <ab>] @" */
static void fallback_counts(struct fallback_out *o, uint64_t io, uint64_t ib, uint64_t ao,
			    uint64_t ab)
{
	fallback_putu(o, io);
	fallback_puts(o, ": ");
	fallback_putu(o, ib);
	fallback_puts(o, " [");
	fallback_putu(o, ao);
	fallback_puts(o, ": ");
	fallback_putu(o, ab);
	fallback_puts(o, "] @");
}

/* In-use counts of a class; a free reported without its allocation cannot make them
 * negative. */
static void fallback_inuse(const struct llgo_fallback_class *c, uint64_t *objs, uint64_t *bytes)
{
	*objs = c->alloc_objects > c->free_objects ? c->alloc_objects - c->free_objects : 0;
	*bytes = c->alloc_bytes > c->free_bytes ? c->alloc_bytes - c->free_bytes : 0;
}

/* Does class a come before class b in the output (in-use bytes, then allocated bytes,
 * descending; then by size)? */
static bool fallback_before(const struct llgo_fallback *f, unsigned a, unsigned b)
{
	uint64_t ao, ab, bo, bb;
	fallback_inuse(&f->classes[a], &ao, &ab);
	fallback_inuse(&f->classes[b], &bo, &bb);
	if (ab != bb)
		return ab > bb;
	if (f->classes[a].alloc_bytes != f->classes[b].alloc_bytes)
		return f->classes[a].alloc_bytes > f->classes[b].alloc_bytes;
	return a < b;
}

int llgo_fallback_write(const struct llgo_fallback *f, llgo_fallback_write_fn write, void *ctx)
{
	struct fallback_out o = { .write = write, .ctx = ctx };
	uint64_t io = 0, ib = 0, ao = 0, ab = 0;
	for (unsigned i = 0; i < LLGO_FALLBACK_NCLASSES; i++) {
		uint64_t co, cb;
		fallback_inuse(&f->classes[i], &co, &cb);
		io += co;
		ib += cb;
		ao += f->classes[i].alloc_objects;
		ab += f->classes[i].alloc_bytes;
	}
	/* heap/<2*rate>: Go's legacy header (pprof halves it back to the sampling period) */
	fallback_puts(&o, "heap profile: ");
	fallback_counts(&o, io, ib, ao, ab);
	fallback_puts(&o, " heap/");
	fallback_putu(&o, 2 * f->rate);
	fallback_puts(&o, "\n");

	/* Classes in output order, without a sort buffer: each round prints the first class
	 * not yet printed (a bit set on the stack, NCLASSES bits). */
	uint32_t done[(LLGO_FALLBACK_NCLASSES + 31) / 32] = { 0 };
	for (;;) {
		unsigned best = LLGO_FALLBACK_NCLASSES;
		for (unsigned i = 0; i < LLGO_FALLBACK_NCLASSES; i++) {
			if ((done[i / 32] >> (i % 32)) & 1u)
				continue;
			if (f->classes[i].alloc_objects == 0 && f->classes[i].free_objects == 0) {
				done[i / 32] |= 1u << (i % 32);
				continue;
			}
			if (best == LLGO_FALLBACK_NCLASSES || fallback_before(f, i, best))
				best = i;
		}
		if (best == LLGO_FALLBACK_NCLASSES)
			break;
		done[best / 32] |= 1u << (best % 32);
		const struct llgo_fallback_class *c = &f->classes[best];
		uint64_t co, cb, lo, hi;
		fallback_inuse(c, &co, &cb);
		fallback_counts(&o, co, cb, c->alloc_objects, c->alloc_bytes);
		fallback_range(best, &lo, &hi);
		fallback_puts(&o, "\n# size class ");
		fallback_putu(&o, lo);
		fallback_puts(&o, "-");
		fallback_putu(&o, hi);
		fallback_puts(&o, "\n\n");
	}
	fallback_puts(&o, "# llgo-heap fallback: rate=");
	fallback_putu(&o, f->rate);
	fallback_puts(&o, " samples=");
	fallback_putu(&o, f->samples);
	fallback_puts(&o, " stack=none (buckets are size classes)\n");
	fallback_flush(&o);
	return o.err;
}
