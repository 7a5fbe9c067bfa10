// SPDX-License-Identifier: MIT
/*
 * test_fallback.c: the size-class fallback recorder (shim/fallback/), for targets without a
 * stack source. Unit tests of the recorder compiled natively (size classes, the threshold
 * draw, rate 0 / rate 1 / rate changes, the sampling probability, the text writer and
 * `go tool pprof` reading it), then Go's heapsampling check on the recorder's printed text,
 * run natively, as wasm32-wasi under Node's WASI and on a bare-metal Cortex-M3 under
 * qemu-system-arm with semihosting. The target programs are built by the Makefile's
 * fallback section (build/fallback/); a target whose toolchain is missing is skipped with the
 * reason the Makefile wrote next to it.
 */
#include <math.h>

#include "helpers.h"

/* The recorder itself, compiled into this test (it depends on nothing else). */
#include "../shim/fallback/llgo_fallback.c"

#define FB_DIR LLGO_BUILD_DIR "/fallback"

/* ---- helpers ---------------------------------------------------------------------------- */

struct fb_buf {
	char *s;
	size_t n, cap;
	int calls, fail_at;
};

static int fb_buf_write(void *ctx, const char *s, size_t n)
{
	struct fb_buf *b = ctx;
	if (++b->calls == b->fail_at)
		return 7;
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->s = realloc(b->s, b->cap);
		cr_assert(b->s);
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = '\0';
	return 0;
}

static char *fb_text(const struct llgo_fallback *f)
{
	struct fb_buf b = { 0 };
	cr_assert_eq(llgo_fallback_write(f, fb_buf_write, &b), 0);
	return b.s;
}

/* One record of the fallback's text: counts and its class range. */
struct fb_rec {
	long io, ib, ao, ab;
	unsigned long lo, hi;
};

/* Parse header and records; checks the layout as it goes. Returns the record count. */
static int fb_parse(const char *text, long *period, long hdr[4], struct fb_rec *r, int max)
{
	int n = 0;
	*period = -1;
	const char *h = strstr(text, "heap profile: ");
	cr_assert(h, "no header in:\n%s", text);
	cr_assert_eq(sscanf(h, "heap profile: %ld: %ld [%ld: %ld] @ heap/%ld", &hdr[0], &hdr[1],
			    &hdr[2], &hdr[3], period), 5, "header: %.80s", h);
	for (const char *l = strchr(h, '\n'); l && *l; l = strchr(l + 1, '\n')) {
		struct fb_rec x;
		/* sscanf would skip the newline of a blank line: start at a digit */
		if (l[1] < '0' || l[1] > '9' ||
		    sscanf(l + 1, "%ld: %ld [%ld: %ld] @", &x.io, &x.ib, &x.ao, &x.ab) != 4)
			continue;
		const char *c = strchr(l + 1, '\n');
		cr_assert(c && sscanf(c + 1, "# size class %lu-%lu", &x.lo, &x.hi) == 2,
			  "record without its class line: %.80s", l + 1);
		/* "@" ends the record line: no frames */
		cr_assert_eq(c[-1], '@', "record line: %.80s", l + 1);
		cr_assert(n < max);
		r[n++] = x;
	}
	return n;
}

/* ---- unit tests ------------------------------------------------------------------------- */

Test(fallback, size_classes)
{
	uint64_t lo, hi, plo = 0, phi = 0;
	unsigned prev = 0;
	cr_assert_eq(llgo_fallback_class_of(0, &lo, &hi), 0);
	cr_assert_eq(hi, 16);
	cr_assert_eq(llgo_fallback_class_of(16, &lo, &hi), 0);
	cr_assert_eq(llgo_fallback_class_of(17, &lo, &hi), 1);
	cr_assert(lo == 17 && hi == 20);
	cr_assert_eq(llgo_fallback_class_of(1024, &lo, &hi), llgo_fallback_class_of(897, &lo, &hi));
	cr_assert(lo == 897 && hi == 1024);
	cr_assert_eq(llgo_fallback_class_of(17408, &lo, &hi), llgo_fallback_class_of(18432, &lo, &hi));
	cr_assert(lo == 16385 && hi == 20480);
	/* every size up to 1 MiB and around every power of two: contiguous, within 25% */
	for (uint64_t s = 0; s <= (1u << 20) + 64; s++) {
		unsigned i = llgo_fallback_class_of((size_t)s, &lo, &hi);
		cr_assert(lo <= s && s <= hi, "size %lu in [%lu, %lu]", (unsigned long)s,
			  (unsigned long)lo, (unsigned long)hi);
		cr_assert(i == prev || i == prev + 1, "size %lu: class %u after %u",
			  (unsigned long)s, i, prev);
		if (i == prev + 1)
			cr_assert(lo == phi + 1 && lo > plo, "size %lu", (unsigned long)s);
		if (i > 0)
			cr_assert_leq(4 * (hi - lo + 1), lo - 1, "class %u is wider than 25%%", i);
		prev = i;
		plo = lo;
		phi = hi;
	}
	for (unsigned k = 5; k <= LLGO_FALLBACK_MAX_LOG2; k++) {
		size_t p = (size_t)1 << k;
		unsigned a = llgo_fallback_class_of(p, &lo, &hi);
		cr_assert_eq(hi, p, "2^%u is its class's largest size", k);
		cr_assert_eq(llgo_fallback_class_of(p + 1, &lo, &hi), a + 1);
		cr_assert_lt(a + 1, LLGO_FALLBACK_NCLASSES);
	}
	cr_assert_eq(llgo_fallback_class_of(SIZE_MAX, &lo, &hi), LLGO_FALLBACK_NCLASSES - 1);
}

Test(fallback, neglog_matches_libm)
{
	uint64_t s = 12345;
	for (int i = 0; i < 200000; i++) {
		double u = (double)((fallback_rng(&s) >> 11) + 1) * 0x1p-53;
		double want = -log(u), got = fallback_neglog(u);
		cr_assert(fabs(got - want) <= 1e-12 * (want > 1 ? want : 1), "u %.17g: %.17g vs %.17g",
			  u, got, want);
	}
	cr_assert_eq(fallback_neglog(1.0), 0.0);
	cr_assert(fabs(fallback_neglog(0x1p-53) - 53 * log(2)) < 1e-12);
}

Test(fallback, rate_zero_records_nothing)
{
	static struct llgo_fallback f;
	llgo_fallback_init(&f, 0, 1);
	for (int i = 0; i < 10000; i++)
		cr_assert(!llgo_fallback_alloc(&f, (size_t)i * 7));
	char *t = fb_text(&f);
	cr_assert(strncmp(t, "heap profile: 0: 0 [0: 0] @ heap/0\n# llgo-heap fallback: rate=0 "
			     "samples=0", 59) == 0, "%s", t);
	free(t);
}

Test(fallback, rate_one_counts_exactly)
{
	static struct llgo_fallback f;
	llgo_fallback_init(&f, 1, 2);
	cr_assert_eq(llgo_fallback_rate(&f), 1);
	long want_objs = 0, want_bytes = 0, live_objs = 0, live_bytes = 0;
	for (size_t i = 0; i < 3000; i++) {
		size_t size = (i * 37) % 5000;
		cr_assert(llgo_fallback_alloc(&f, size), "allocation %zu not recorded", i);
		want_objs++;
		want_bytes += (long)size;
		if (i % 3 == 0) {
			llgo_fallback_free(&f, size);
		} else {
			live_objs++;
			live_bytes += (long)size;
		}
	}
	cr_assert_eq(f.samples, 3000);
	char *t = fb_text(&f);
	static struct fb_rec r[LLGO_FALLBACK_NCLASSES];
	long period, hdr[4];
	int n = fb_parse(t, &period, hdr, r, LLGO_FALLBACK_NCLASSES);
	cr_assert_eq(period, 2);
	cr_assert(hdr[0] == live_objs && hdr[1] == live_bytes && hdr[2] == want_objs &&
		  hdr[3] == want_bytes, "header %ld %ld %ld %ld", hdr[0], hdr[1], hdr[2], hdr[3]);
	long s[4] = { 0 };
	for (int i = 0; i < n; i++) {
		s[0] += r[i].io;
		s[1] += r[i].ib;
		s[2] += r[i].ao;
		s[3] += r[i].ab;
		cr_assert(r[i].ao > 0 && r[i].ab / r[i].ao >= (long)r[i].lo - 1 &&
			  r[i].ab / r[i].ao <= (long)r[i].hi, "class %lu-%lu: %ld bytes / %ld",
			  r[i].lo, r[i].hi, r[i].ab, r[i].ao);
		if (i > 0)
			cr_assert(r[i - 1].ib > r[i].ib ||
					  (r[i - 1].ib == r[i].ib && r[i - 1].ab >= r[i].ab),
				  "records out of order at %d", i);
	}
	for (int v = 0; v < 4; v++)
		cr_assert_eq(s[v], hdr[v], "column %d: records %ld, header %ld", v, s[v], hdr[v]);
	free(t);
}

/* Each allocation of S bytes is sampled with probability 1 - exp(-S/rate), independently. */
Test(fallback, sampling_probability)
{
	static struct llgo_fallback f;
	const double rate = 4096;
	const size_t sizes[] = { 512, 4096, 20000 };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		llgo_fallback_init(&f, (uint64_t)rate, 100 + k);
		const long n = 200000;
		long hits = 0;
		for (long i = 0; i < n; i++)
			hits += llgo_fallback_alloc(&f, sizes[k]);
		double p = 1 - exp(-(double)sizes[k] / rate), got = (double)hits / (double)n;
		double sigma = sqrt(p * (1 - p) / (double)n);
		cr_log_info("size %zu: sampled %.5f, expected %.5f (sigma %.5f)", sizes[k], got, p,
			    sigma);
		cr_expect(fabs(got - p) < 6 * sigma, "size %zu: sampled %.5f, expected %.5f",
			  sizes[k], got, p);
	}
}

Test(fallback, rate_changes)
{
	static struct llgo_fallback f;
	llgo_fallback_init(&f, 1, 3);
	for (int i = 0; i < 100; i++)
		llgo_fallback_alloc(&f, 64);
	llgo_fallback_set_rate(&f, 0);
	for (int i = 0; i < 100; i++)
		cr_assert(!llgo_fallback_alloc(&f, 64));
	cr_assert_eq(f.samples, 100);
	llgo_fallback_set_rate(&f, 1);
	for (int i = 0; i < 50; i++)
		cr_assert(llgo_fallback_alloc(&f, 64));
	cr_assert_eq(f.samples, 150, "counts gathered before are kept");
	/* a positive rate: about one sample per rate bytes from the change on */
	llgo_fallback_set_rate(&f, 1000);
	for (int i = 0; i < 100000; i++)
		llgo_fallback_alloc(&f, 100);
	long got = (long)f.samples - 150; /* expected 100000 * (1 - exp(-0.1)) = 9516 */
	cr_expect(got > 9516 - 600 && got < 9516 + 600, "samples at rate 1000: %ld", got);
	llgo_fallback_set_rate(&f, UINT64_MAX);
	cr_assert_eq(llgo_fallback_rate(&f), LLGO_FALLBACK_RATE_MAX);
}

Test(fallback, write_error_stops_output)
{
	static struct llgo_fallback f;
	llgo_fallback_init(&f, 1, 4);
	for (size_t s = 1; s < 100000; s = s * 3 + 1)
		llgo_fallback_alloc(&f, s);
	struct fb_buf b = { .fail_at = 2 };
	cr_assert_eq(llgo_fallback_write(&f, fb_buf_write, &b), 7);
	cr_assert_eq(b.calls, 2, "no write after the failing one");
	free(b.s);
}

/* go tool pprof reads the text: its scaled total equals the per-class Poisson correction
 * (nothing is freed, so pprof sees two sample types, objects and space: index 0 is objects). */
Test(fallback, go_pprof_reads_the_text, .timeout = 300)
{
	static struct llgo_fallback f;
	llgo_fallback_init(&f, 16384, 5);
	for (int i = 0; i < 20000; i++) {
		llgo_fallback_alloc(&f, 1024);
		llgo_fallback_alloc(&f, 17408);
		llgo_fallback_alloc(&f, 100);
	}
	char *t = fb_text(&f);
	static struct fb_rec r[LLGO_FALLBACK_NCLASSES];
	long period, hdr[4];
	int n = fb_parse(t, &period, hdr, r, LLGO_FALLBACK_NCLASSES);
	cr_assert_eq(n, 3, "%s", t);
	double total = 0;
	for (int i = 0; i < n; i++) {
		double c, s;
		th_go_scale((double)r[i].ao, (double)r[i].ab, 16384, &c, &s);
		total += c;
	}
	char *dir = th_tmpdir(), path[4200], *out = NULL;
	snprintf(path, sizeof(path), "%s/fb.heap", dir);
	FILE *fp = fopen(path, "w");
	cr_assert(fp);
	fputs(t, fp);
	fclose(fp);
	int rc = th_pprof(&out, dir, "-raw fb.heap");
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "Period: 16384"), "%s", out);
	free(out);
	rc = th_pprof(&out, dir, "-top "
		    "-sample_index=0 fb.heap");
	cr_assert_eq(rc, 0, "%s", out);
	const char *of = strstr(out, "% of ");
	cr_assert(of, "%s", out);
	double shown = atof(of + 5);
	/* pprof prints e.g. "60006 total" or "60.01k total" */
	const char *unit = of + 5 + strspn(of + 5, "0123456789.");
	if (*unit == 'k')
		shown *= 1000;
	cr_expect(fabs(shown - total) <= total * 0.001 + 1, "pprof total %.0f, expected %.0f:\n%s",
		  shown, total, out);
	cr_expect(fabs(total - 60000) < 6000, "estimated objects %.0f, truth 60000", total);
	free(out);
	free(t);
	th_rmdir(dir);
}

/* ---- Go's heapsampling check on the targets ---------------------------------------------- */

struct fb_truth {
	long size, count;
};

/* The command that runs the target's program with the arguments; NULL and a skip when the
 * target was not built. */
static const char *fb_runner(const char *target)
{
	static char cmd[8192];
	char skip[4200];
	snprintf(skip, sizeof(skip), FB_DIR "/%s.skip", target);
	if (access(skip, F_OK) == 0) {
		char *why = th_read_file(skip);
		cr_skip_test("%s not built: %s", target, why ? why : "?");
	}
	bool native = strcmp(target, "native") == 0, wasm = strcmp(target, "wasm32-wasi") == 0;
	const char *prog = native ? FB_DIR "/hs-native" :
			   wasm	  ? FB_DIR "/hs.wasm" :
				    FB_DIR "/hs-cortex-m3.elf";
	cr_assert(access(prog, F_OK) == 0, "%s: neither built nor skipped", prog);
	if (native)
		snprintf(cmd, sizeof(cmd), "%s", prog);
	else if (wasm)
		snprintf(cmd, sizeof(cmd), "node --no-warnings " LLGO_SRC_DIR
			 "/tests/fallback/wasi_run.mjs %s", prog);
	else /* the program's arguments follow as ,arg=... (fb_run) */
		snprintf(cmd, sizeof(cmd), "timeout 300 qemu-system-arm -M lm3s6965evb "
			 "-nographic -monitor none -serial none -kernel %s "
			 "-semihosting-config enable=on,target=native,arg=hs", prog);
	return cmd;
}

static int fb_run(char **out, const char *target, const char *dir, const char *mode, long n,
		  long seed, long rate)
{
	const char *cmd = fb_runner(target);
	if (strstr(cmd, "qemu-system-arm"))
		return th_sh(out, "cd %s && %s,arg=%s,arg=%ld,arg=%ld,arg=%ld 2>qemu.err", dir, cmd,
			      mode, n, seed, rate);
	return th_sh(out, "cd %s && %s %s %ld %ld %ld", dir, cmd, mode, n, seed, rate);
}

/* Go's test/heapsampling.go method on the fallback's text: the scaled estimate per size class
 * is within 10% of the truth (the allocations whose sizes fall in the class); up to three
 * runs with different seeds, failing only when every run is off on the same side. */
static void fb_heapsampling(const char *target, const char *mode, long n, long rate)
{
	enum { MAXS = 8, RUNS = 3 };
	double lo[MAXS][2], hi[MAXS][2];
	for (int run = 0; run < RUNS; run++) {
		char *dir = th_tmpdir(), *out = NULL;
		long seed = 0; /* a fresh random stream per run */
		FILE *ur = fopen("/dev/urandom", "rb");
		cr_assert(ur && fread(&seed, sizeof(seed), 1, ur) == 1);
		fclose(ur);
		seed &= 0x7fffffffffffffffL;
		int rc = fb_run(&out, target, dir, mode, n, seed, rate);
		cr_assert_eq(rc, 0, "%s exited %d:\n%s", target, rc, out);
		struct fb_truth t[MAXS];
		int nt = 0;
		for (const char *p = strstr(out, "site "); p && nt < MAXS;
		     p = strstr(p + 1, "\nsite ")) {
			if (*p == '\n')
				p++;
			if (sscanf(p, "site %ld %ld", &t[nt].size, &t[nt].count) == 2)
				nt++;
		}
		cr_assert_geq(nt, 3, "output:\n%s", out);
		static struct fb_rec r[LLGO_FALLBACK_NCLASSES];
		long period, hdr[4];
		int nr = fb_parse(out, &period, hdr, r, LLGO_FALLBACK_NCLASSES);
		cr_assert_eq(period, 2 * rate);
		cr_assert(hdr[0] == 0 && hdr[1] == 0, "every block was freed: in-use %ld: %ld",
			  hdr[0], hdr[1]);
		/* the classes that hold the workload's sizes, and their truth */
		int cls[MAXS], ncls = 0;
		double want[MAXS][2] = { { 0 } };
		for (int i = 0; i < nt; i++) {
			int k = 0;
			while (k < nr && !(r[k].lo <= (unsigned long)t[i].size &&
					   (unsigned long)t[i].size <= r[k].hi))
				k++;
			cr_assert_lt(k, nr, "no record for size %ld:\n%s", t[i].size, out);
			int c = 0;
			while (c < ncls && cls[c] != k)
				c++;
			if (c == ncls)
				cls[ncls++] = k;
			want[c][0] += (double)t[i].count;
			want[c][1] += (double)(t[i].count * t[i].size);
		}
		cr_assert_eq(nr, ncls, "records for sizes never allocated:\n%s", out);
		bool all_ok = true;
		for (int c = 0; c < ncls; c++) {
			const struct fb_rec *x = &r[cls[c]];
			double got[2];
			th_go_scale((double)x->ao, (double)x->ab, (double)rate, &got[0], &got[1]);
			for (int v = 0; v < 2; v++) {
				if (run == 0 || got[v] < lo[c][v])
					lo[c][v] = got[v];
				if (run == 0 || got[v] > hi[c][v])
					hi[c][v] = got[v];
				double margin = want[c][v] / 10;
				bool ok = fabs(got[v] - want[c][v]) <= margin;
				all_ok &= ok;
				cr_log_info("%s %s rate %ld run %d class %lu-%lu %s: estimate %.0f, "
					    "truth %.0f (%+.1f%%, %ld samples)%s", target, mode, rate,
					    run + 1, x->lo, x->hi, v ? "bytes" : "objects", got[v],
					    want[c][v], 100 * (got[v] - want[c][v]) / want[c][v], x->ao,
					    ok ? "" : " OUTSIDE 10%");
				if (run == RUNS - 1)
					cr_expect(!(lo[c][v] > want[c][v] + margin ||
						    hi[c][v] < want[c][v] - margin),
						  "%s class %lu-%lu %s: all %d runs outside 10%% on one "
						  "side (min %.0f max %.0f want %.0f)", target, x->lo,
						  x->hi, v ? "bytes" : "objects", RUNS, lo[c][v],
						  hi[c][v], want[c][v]);
			}
		}
		free(out);
		th_rmdir(dir);
		if (all_ok)
			return;
	}
}

/* A heapsampling test: fb_heapsampling(target, workload, n, rate) under its own name. */
#define FB_HEAPSAMPLING(name, target, workload, n, rate)                                      \
	Test(heapsampling, name, .timeout = 300)                                            \
	{                                                                                  \
		fb_heapsampling(target, workload, n, rate);                                \
	}

FB_HEAPSAMPLING(native_interleaved, "native", "interleaved", 50000, 16384)
FB_HEAPSAMPLING(native_small, "native", "small", 50000, 16384)
FB_HEAPSAMPLING(native_large_default_rate, "native", "large", 50000, 524288)
FB_HEAPSAMPLING(wasm32_wasi_interleaved, "wasm32-wasi", "interleaved", 50000, 16384)
FB_HEAPSAMPLING(wasm32_wasi_small, "wasm32-wasi", "small", 50000, 16384)
FB_HEAPSAMPLING(wasm32_wasi_large_default_rate, "wasm32-wasi", "large", 50000, 524288)
/* 64 KiB of RAM: the workloads whose blocks fit (the large one needs 4 MiB blocks). */
FB_HEAPSAMPLING(cortex_m3_interleaved, "cortex-m3", "interleaved", 50000, 16384)
FB_HEAPSAMPLING(cortex_m3_small, "cortex-m3", "small", 50000, 16384)

/* The recorder computes the same thing everywhere: with one seed, the native, wasm32 and
 * Cortex-M3 (soft-float) builds print the same profile, byte for byte. */
Test(heapsampling, same_seed_same_profile_on_every_target, .timeout = 300)
{
	const char *targets[] = { "native", "wasm32-wasi", "cortex-m3" };
	char *first = NULL;
	for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
		char *dir = th_tmpdir(), *out = NULL;
		int rc = fb_run(&out, targets[i], dir, "interleaved", 20000, 42, 16384);
		cr_assert_eq(rc, 0, "%s: %s", targets[i], out);
		char *prof = strstr(out, "heap profile: ");
		cr_assert(prof, "%s: %s", targets[i], out);
		if (!first)
			first = strdup(prof);
		else
			cr_expect_str_eq(prof, first, "%s differs from native", targets[i]);
		free(out);
		th_rmdir(dir);
	}
	free(first);
}
