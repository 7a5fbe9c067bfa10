// SPDX-License-Identifier: MIT
/*
 * test_sampler.c: the sampling decision of shim/sample.c. The thresholds are exponential with
 * mean = rate (mean within 1% over 10^6 draws, Kolmogorov-Smirnov at the 1% level); the
 * logarithm the shim carries (it does not link libm) matches libm's; Go's semantics hold:
 * a crossing samples once at full size and redraws, a stream starts with a draw, an
 * allocation of S bytes is sampled with probability 1 - exp(-S/rate); rate 1 records every
 * allocation and rate 0 none (through the real slow path, not attached to a daemon).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../shim/internal.h"

/* criterion's runner sometimes leaks the 48-byte record of a test's timeout when the test
 * ends as the timer is armed (libcriterion 2.4.1, calloc in its setup_timeout); that is not
 * this code's leak, so LeakSanitizer is told to ignore allocations made by libcriterion. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libcriterion.so\n";
}

#define NDRAWS 1000000

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void check_exponential(uint64_t rate, uint64_t seed)
{
	double *v = malloc(NDRAWS * sizeof(double));
	cr_assert(v);
	uint64_t rng = sample_rng_seed(seed, 42);
	double sum = 0;
	for (int i = 0; i < NDRAWS; i++) {
		int64_t t = sample_next_threshold(&rng, rate);
		cr_assert(t >= 1 && (uint64_t)t <= 64 * rate, "threshold %lld out of [1, 64*rate]",
			  (long long)t);
		v[i] = (double)t;
		sum += v[i];
	}
	double mean = sum / NDRAWS;
	cr_expect(fabs(mean - (double)rate) < 0.01 * (double)rate,
		  "rate %llu: mean %.1f is not within 1%%", (unsigned long long)rate, mean);
	/* Kolmogorov-Smirnov against F(x) = 1 - exp(-x/rate). The draws are rounded up to whole
	 * bytes, so compare at x - 0.5 (a shift far below the critical value at these rates). */
	qsort(v, NDRAWS, sizeof(double), cmp_double);
	double d = 0;
	for (int i = 0; i < NDRAWS; i++) {
		double f = 1.0 - exp(-(v[i] - 0.5) / (double)rate);
		double lo = f - (double)i / NDRAWS, hi = (double)(i + 1) / NDRAWS - f;
		if (lo > d)
			d = lo;
		if (hi > d)
			d = hi;
	}
	double crit = 1.63 / sqrt((double)NDRAWS);
	cr_expect(d < crit, "rate %llu: KS D = %.6f >= %.6f", (unsigned long long)rate, d, crit);
	free(v);
}

Test(sampler, thresholds_are_exponential_default_rate, .timeout = 120)
{
	check_exponential(LLGO_RATE_DEFAULT, 1);
}

Test(sampler, thresholds_are_exponential_small_rate, .timeout = 120)
{
	check_exponential(4096, 7);
}

Test(sampler, log_matches_libm)
{
	uint64_t rng = sample_rng_seed(3, 4);
	double worst = 0;
	for (int i = 0; i < 200000; i++) {
		double u = (double)((sample_rng_next(&rng) >> 11) + 1) * 0x1p-53;
		double x = i % 2 ? u : u * 1e6 + 1e-300;
		double rel = fabs(sample_log(x) - log(x)) / fmax(fabs(log(x)), 1e-300);
		if (rel > worst)
			worst = rel;
	}
	cr_expect(worst < 1e-13, "worst relative error %g", worst);
	cr_expect_eq(sample_log(1.0), 0.0);
	cr_expect(fabs(sample_log(0x1p-1070) - log(0x1p-1070)) < 1e-9, "subnormal");
	cr_expect(isinf(sample_log(0.0)) && sample_log(0.0) < 0);
}

static struct llgo_heap_thread fresh(uint64_t seed)
{
	struct llgo_heap_thread t;
	memset(&t, 0, sizeof(t));
	t.rng = sample_rng_seed(seed, 99);
	return t;
}

/* What the fast path does before the slow path. */
static bool alloc(struct llgo_heap_thread *t, int64_t w, size_t size)
{
	if (w == 0)
		return false;
	if (w > 0) {
		t->countdown = (int64_t)((uint64_t)t->countdown - size);
		if (t->countdown > 0)
			return false;
	}
	return sample_decide(t, w, size);
}

Test(sampler, rate_1_samples_every_allocation)
{
	struct llgo_heap_thread t = fresh(1);
	for (size_t i = 0; i < 10000; i++)
		cr_assert(alloc(&t, LLGO_RATE_WORD_EVERY, i % 100));
	cr_expect_eq(t.countdown, 0, "rate 1 does not touch the countdown");
	cr_expect_eq(llgo_rate_to_word(1), LLGO_RATE_WORD_EVERY);
	cr_expect_eq(llgo_rate_from_word(LLGO_RATE_WORD_EVERY), 1);
}

Test(sampler, rate_0_samples_nothing)
{
	struct llgo_heap_thread t = fresh(2);
	for (size_t i = 0; i < 10000; i++)
		cr_assert(!alloc(&t, 0, 1u << 20));
	cr_expect_eq(t.started, 0);
}

Test(sampler, large_allocation_is_sampled_once_and_redraws)
{
	const int64_t rate = 4096;
	for (uint64_t seed = 1; seed < 200; seed++) {
		struct llgo_heap_thread t = fresh(seed);
		t.started = 1;
		t.countdown = 100;
		/* 100 KB, far above the 100 bytes left: one sample, not 25 */
		cr_assert(alloc(&t, rate, 100000));
		cr_assert(t.countdown >= 1 && t.countdown <= 64 * rate,
			  "fresh draw expected, countdown %lld", (long long)t.countdown);
		/* the overshoot was discarded: the next small allocation is usually not sampled */
		int64_t before = t.countdown;
		bool s = alloc(&t, rate, 1);
		cr_assert_eq(s, before <= 1);
	}
}

Test(sampler, stream_starts_with_a_draw)
{
	const int64_t rate = 1000;
	int sampled_big = 0, sampled_zero = 0;
	for (uint64_t seed = 1; seed <= 2000; seed++) {
		struct llgo_heap_thread t = fresh(seed);
		sampled_big += alloc(&t, rate, 64 * rate);
		cr_assert(t.started && t.countdown >= 1);
		struct llgo_heap_thread u = fresh(seed + 100000);
		sampled_zero += alloc(&u, rate, 0);
		cr_assert(u.countdown >= 1, "not sampled: countdown = draw - size");
	}
	cr_expect_eq(sampled_big, 2000, "an allocation of 64 * rate always crosses the first draw");
	cr_expect_eq(sampled_zero, 0);
}

/* P(an allocation of S bytes is sampled) = 1 - exp(-S/rate), whatever came before. */
Test(sampler, sampling_probability_matches_pprof_scaling, .timeout = 60)
{
	const int64_t rate = 4096;
	const size_t sizes[] = { 100, 1024, 4096, 20000 };
	for (size_t k = 0; k < LLGO_ARRAY_SIZE(sizes); k++) {
		struct llgo_heap_thread t = fresh(k + 11);
		const int n = 400000;
		int hits = 0;
		for (int i = 0; i < n; i++)
			hits += alloc(&t, rate, sizes[k]);
		double p = 1.0 - exp(-(double)sizes[k] / (double)rate);
		double got = (double)hits / n, sd = sqrt(p * (1 - p) / n);
		cr_expect(fabs(got - p) < 5 * sd + 1e-4, "size %zu: sampled %.5f, want %.5f",
			  sizes[k], got, p);
	}
}

/* The real slow path, not attached to a daemon: rate 0 records nothing; rate 1 takes every
 * sample and, with no daemon to give it to, counts it in lost_detached without a walk. */
Test(sampler, slow_path_rate_1_and_rate_0)
{
	if (link_state() == LLGO_SHIM_ATTACHED)
		cr_skip_test("a daemon is listening on the default socket");
	int x;
	uint64_t lost = atomic_load(&attach_ctl.lost_detached);
	atomic_store(&attach_ctl.rate_word, 0);
	for (int i = 0; i < 100; i++)
		sample_hooked(&x, 16, __builtin_return_address(0), __builtin_frame_address(0));
	cr_expect_eq(atomic_load(&attach_ctl.lost_detached), lost);
	atomic_store(&attach_ctl.rate_word, LLGO_RATE_WORD_EVERY);
	errno = 1234;
	for (int i = 0; i < 100; i++)
		sample_hooked(&x, 16, __builtin_return_address(0), __builtin_frame_address(0));
	cr_expect_eq(errno, 1234, "the slow path preserves errno");
	cr_expect_eq(atomic_load(&attach_ctl.lost_detached), lost + 100);
	/* NULL: the allocation failed, nothing is recorded */
	sample_hooked(NULL, 16, __builtin_return_address(0), __builtin_frame_address(0));
	cr_expect_eq(atomic_load(&attach_ctl.lost_detached), lost + 100);
	atomic_store(&attach_ctl.rate_word, 0);
}
