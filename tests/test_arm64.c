// SPDX-License-Identifier: MIT
/*
 * test_arm64.c: the shim on aarch64 Linux. The shim and test programs are cross-built into
 * build-arm64/ (Makefile section "arm64 Linux") and run here under qemu-aarch64 (user mode,
 * the aarch64 libc from the cross sysroot) against the native x86-64 daemon: the aarch64
 * frame-record walk (x29/x30), the plain-C TLS countdown, the hook library, the fully static
 * build, attach, rings and the daemon's symbolization of aarch64 ELF files are all on the
 * path. Skipped, with the reason, where the cross toolchain or qemu cannot be installed.
 */
#include <math.h>

#include "helpers.h"

#define A64 LLGO_SRC_DIR "/build-arm64"
#define SYSROOT "/usr/aarch64-linux-gnu"

static void a64_need(void)
{
	char *why = th_read_file(LLGO_BUILD_DIR "/arm64.skip");
	if (why)
		cr_skip_test("arm64: %s", why);
	cr_assert(access(A64 "/lib/libllgoheap.so", F_OK) == 0,
		  "build-arm64 was neither built nor skipped (make arm64-progs)");
}

struct a64_run {
	char *out, *profile;
	int pid;
};

/* Run an aarch64 program (args: its path and arguments) under qemu with a private daemon
 * at rate; preload the aarch64 shim when preload. Returns the text snapshot. */
static void a64_profile(struct a64_run *r, bool preload, long rate, const char *args)
{
	char *dir = th_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	const char *sock = d.sock;
	int rc = th_sh(&r->out, "cd %s && LLGO_HEAP_SOCKET=%s LLGO_HEAP_RATE=%ld "
			"LLGO_HEAP_RING_KB=8192 LLGO_HEAP_DEBUG=1 sh -c 'echo pid $$; exec "
			"qemu-aarch64 -L " SYSROOT " %s %s'", dir, sock, rate,
			preload ? "-E LD_PRELOAD=" A64 "/lib/libllgoheap.so" : "", args);
	cr_assert_eq(rc, 0, "%s:\n%s", args, r->out);
	cr_expect(strstr(r->out, "llgo-heap: attached to") != NULL, "did not attach:\n%s",
		  r->out);
	const char *p = strstr(r->out, "pid ");
	cr_assert(p && sscanf(p, "pid %d", &r->pid) == 1, "%s", r->out);
	rc = th_sh(&r->profile, TH_BIN "/llgo-heap snapshot %d -f text -o - --socket %s",
		    r->pid, sock);
	cr_assert_eq(rc, 0, "snapshot: %s", r->profile);
	heapd_stop(&d);
	th_rmdir(dir);
}

static void a64_expect_accounting(const char *profile)
{
	unsigned long long sa, de, dr, co;
	const char *acc = strstr(profile, "# llgo-heap: sampled=");
	cr_assert(acc && sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu "
				"corrupt=%llu", &sa, &de, &dr, &co) == 4, "%s", profile);
	cr_expect(sa == de + dr + co && dr == 0 && co == 0, "%.120s", acc);
	cr_expect_gt(sa, 0);
}

/* Every "site NAME SIZE COUNT" line of the program's output matches the profile exactly:
 * the walk found the site's frame and the daemon named it from the aarch64 ELF. */
static void a64_expect_exact(bool preload, const char *args, const char *caller)
{
	a64_need();
	struct a64_run r;
	a64_profile(&r, preload, 1, args);
	static struct th_text_rec recs[4096];
	long period;
	int n = th_parse_text(r.profile, &period, recs, 4096), nsites = 0;
	cr_expect_eq(period, 2);
	for (const char *p = strstr(r.out, "site "); p; p = strstr(p + 1, "\nsite ")) {
		char name[64];
		long size, count;
		if (*p == '\n')
			p++;
		if (sscanf(p, "site %63s %ld %ld", name, &size, &count) != 3)
			continue;
		nsites++;
		long got = th_recs_count(recs, n, name, size);
		cr_expect_eq(got, count, "%s size %ld: %ld in the profile, %ld made\n%s", name,
			     size, got, count, r.profile);
	}
	cr_expect_geq(nsites, 5, "no sites in:\n%s", r.out);
	/* the caller of a site is found too: a two-frame walk through aarch64 frame records */
	if (caller)
		cr_expect(strstr(r.profile, caller) != NULL, "no frame in %s:\n%s", caller,
			  r.profile);
	a64_expect_accounting(r.profile);
	free(r.out);
	free(r.profile);
}

Test(arm64, preloaded_exact_counts, .timeout = 300)
{
	a64_expect_exact(true, A64 "/progs/e2e_sites 1000", "\tmain+0x");
}

Test(arm64, preloaded_threads, .timeout = 300)
{
	a64_expect_exact(true, A64 "/progs/stress_sites 4 count 2000", NULL);
}

Test(arm64, static_glibc_linked, .timeout = 300)
{
	a64_expect_exact(false, A64 "/linked/sites-static 1000", "\tmain+0x");
}

/* The hook's countdown on aarch64 is plain C on the TLS word: 700 hooked allocations at
 * rate 1, trimmed to the program's site. */
Test(arm64, hook_static_archive, .timeout = 300)
{
	a64_need();
	struct a64_run r;
	a64_profile(&r, false, 1, A64 "/select/sel-archive 700");
	cr_expect(strstr(r.out, "trim 2") != NULL, "%s", r.out);
	static struct th_text_rec recs[1024];
	long period;
	int n = th_parse_text(r.profile, &period, recs, 1024);
	cr_expect_eq(th_recs_count(recs, n, "sel_site", 48), 700, "%s", r.profile);
	a64_expect_accounting(r.profile);
	free(r.out);
	free(r.profile);
}

/* Go's heapsampling check (as tests/test_fidelity.c does natively) on aarch64: at rate
 * 16384, each line's scaled estimate within 10%, up to three runs, failing only when all
 * runs are off on one side. */
Test(arm64, heapsampling_small, .timeout = 600)
{
	a64_need();
	enum { MAXS = 8, RUNS = 3 };
	const long rate = 16384;
	double lo[MAXS][2], hi[MAXS][2];
	for (int run = 0; run < RUNS; run++) {
		struct a64_run r;
		a64_profile(&r, true, rate, A64 "/progs/heapsampling small 50000");
		static struct th_text_rec recs[8192];
		long period;
		int nrec = th_parse_text(r.profile, &period, recs, 8192), nt = 0;
		cr_assert_eq(period, 2 * rate);
		bool all_ok = true;
		for (const char *p = strstr(r.out, "site "); p && nt < MAXS;
		     p = strstr(p + 1, "\nsite ")) {
			int line;
			long size, count;
			if (*p == '\n')
				p++;
			if (sscanf(p, "site %d %ld %ld", &line, &size, &count) != 3)
				continue;
			char loc[64];
			snprintf(loc, sizeof(loc), "heapsampling.c:%d", line);
			double objs = 0, bytes = 0;
			for (int k = 0; k < nrec; k++) {
				size_t ll = strlen(recs[k].loc0), ml = strlen(loc);
				if (ll >= ml && strcmp(recs[k].loc0 + ll - ml, loc) == 0) {
					objs += (double)recs[k].alloc_objects;
					bytes += (double)recs[k].alloc_bytes;
				}
			}
			double f = objs > 0 ? 1 / (1 - exp(-(bytes / objs) / (double)rate)) : 0;
			double got[2] = { (double)(int64_t)(objs * f), (double)(int64_t)(bytes * f) };
			double want[2] = { (double)count, (double)count * (double)size };
			for (int v = 0; v < 2; v++) {
				if (run == 0 || got[v] < lo[nt][v])
					lo[nt][v] = got[v];
				if (run == 0 || got[v] > hi[nt][v])
					hi[nt][v] = got[v];
				double margin = want[v] / 10;
				bool ok = fabs(got[v] - want[v]) <= margin;
				all_ok &= ok;
				cr_log_info("arm64 run %d line %d size %ld %s: estimate %.0f, truth "
					    "%.0f (%+.1f%%)%s", run + 1, line, size,
					    v ? "bytes" : "objects", got[v], want[v],
					    100 * (got[v] - want[v]) / want[v], ok ? "" : " OUTSIDE 10%");
				if (run == RUNS - 1)
					cr_expect(!(lo[nt][v] > want[v] + margin ||
						    hi[nt][v] < want[v] - margin),
						  "line %d: all runs outside 10%% on one side", line);
			}
			nt++;
		}
		cr_assert_eq(nt, 3, "output:\n%s", r.out);
		a64_expect_accounting(r.profile);
		free(r.out);
		free(r.profile);
		if (all_ok)
			return;
	}
}

/* No daemon: the preloaded aarch64 shim stays idle and the program runs unchanged. */
Test(arm64, no_daemon_runs_unchanged, .timeout = 120)
{
	a64_need();
	char *out = NULL;
	int rc = th_sh(&out, "LLGO_HEAP_SOCKET=/nonexistent/s qemu-aarch64 -L " SYSROOT
			" -E LD_PRELOAD=" A64 "/lib/libllgoheap.so " A64 "/progs/e2e_sites 100");
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "site site_calloc 480 100") != NULL, "%s", out);
	free(out);
}

/* The preloaded malloc's fast path on aarch64 (aarch64-linux-gnu-objdump): no call, the
 * rate word read once, one thread-pointer read (mrs tpidr_el0) for the countdown, which is
 * one ldr/sub/str; the slow path is a tail branch to sample_malloc. */
Test(arm64, malloc_fast_path_listing)
{
	a64_need();
	char *out = NULL;
	int rc = th_sh(&out, "aarch64-linux-gnu-objdump -d --no-show-raw-insn --disassemble=malloc "
			A64 "/lib/libllgoheap.so | grep -P '^\\s+[0-9a-f]+:'");
	cr_assert_eq(rc, 0, "%s", out);
	int n = 0, bl = 0, mrs = 0, subs = 0, attach = 0, slow = 0;
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
		n++;
		bl += strstr(l, "\tbl\t") != NULL || strstr(l, "\tblr\t") != NULL;
		mrs += strstr(l, "tpidr_el0") != NULL;
		subs += strstr(l, "\tsub\t") != NULL;
		attach += strstr(l, "<attach_area>") != NULL;
		slow += strstr(l, "\tb\t") && strstr(l, "<sample_malloc>");
	}
	cr_log_info("aarch64 malloc: %d instructions", n);
	cr_expect_eq(bl, 0, "calls in malloc's fast path");
	cr_expect_eq(mrs, 1, "thread-pointer reads: %d", mrs);
	cr_expect_eq(subs, 1, "countdown updates: %d", subs);
	cr_expect_eq(attach, 1, "rate word reads: %d", attach);
	cr_expect_eq(slow, 1, "tail branches to sample_malloc: %d", slow);
	free(out);
}
