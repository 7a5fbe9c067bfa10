/* SPDX-License-Identifier: MIT */
/*
 * sane.h: the ranges llgo-heapd accepts for values that come from a profiled process (ring
 * records, ring and control-page counters), and saturating arithmetic for the sums the output
 * writers make of them. Whatever a hostile process writes, no sum wraps and no signed value
 * overflows (UBSan-clean): values outside the ranges are rejected where they are read
 * (ring.c, session.c), and outputs saturate at INT64_MAX. Sizes are not bounded: a program
 * may ask for SIZE_MAX (and fail), and that sample is real.
 */
#ifndef LLGO_COMMON_SANE_H
#define LLGO_COMMON_SANE_H

#include <stdint.h>

/* Largest value of a per-ring or per-process event counter (sampled, dropped, lost_*): 2^40
 * events; 65536 rings of them, plus the control page's, still sum below 2^63. */
#define LLGO_SANE_COUNT_MAX (1ull << 40)

static inline int64_t sane_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static inline int64_t sane_i64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* A double to int64, saturating (a cast out of range is undefined). */
static inline int64_t sane_from_double(double d)
{
	if (!(d == d))
		return 0;
	if (d >= 9.2233720368547748e18)
		return INT64_MAX;
	if (d <= -9.2233720368547748e18)
		return INT64_MIN;
	return (int64_t)d;
}

#endif
