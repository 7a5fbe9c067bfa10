// SPDX-License-Identifier: MIT
/*
 * test_inuse.c: in-use values end to end (real daemon, real programs under the plain shim).
 *   - rate 1: per site exact live objects and bytes (kept, freed, realloc-grown, freed by
 *     another thread, calloc, C++ new/delete, new[]/delete[], posix_memalign), in a snapshot
 *     while the program runs and after it exited (leaks at exit);
 *   - a sampled rate: sampled objects are placed on pages; estimates of the live set within
 *     Go's heapsampling margin, freed sites near zero;
 *   - rate changes: objects sampled before a change to rate 0 are still seen freed;
 *   - fork: the child's frees do not touch the parent's table.
 */
#include <math.h>

#include "life_util.h"

#define PROG(name) E2E_PROGS "/" name
#define INUSE_N(a) (sizeof(a) / sizeof((a)[0]))

struct inuse_site {
	long alloc_objects, inuse_objects, inuse_bytes;
	double s_alloc_objects, s_inuse_objects, s_inuse_bytes; /* scaled (Go's formula) */
};

static void inuse_scale(long count, long size, long rate, double *oc, double *os)
{
	if (count == 0 || size == 0) {
		*oc = *os = 0;
		return;
	}
	if (rate <= 1) {
		*oc = (double)count;
		*os = (double)size;
		return;
	}
	double avg = (double)size / (double)count;
	double scale = 1 / (1 - exp(-avg / (double)rate));
	*oc = (double)count * scale;
	*os = (double)size * scale;
}

/* Sum the records whose frame 0 is func. */
static struct inuse_site inuse_site(const char *text, const char *func)
{
	static struct e2e_text_rec recs[65536];
	long period;
	int n = e2e_parse_text(text, &period, recs, 65536);
	struct inuse_site s;
	memset(&s, 0, sizeof(s));
	for (int i = 0; i < n; i++) {
		if (strcmp(recs[i].frame0, func) != 0)
			continue;
		s.alloc_objects += recs[i].alloc_objects;
		s.inuse_objects += recs[i].inuse_objects;
		s.inuse_bytes += recs[i].inuse_bytes;
		double a, b;
		inuse_scale(recs[i].alloc_objects, recs[i].alloc_bytes, period / 2, &a, &b);
		s.s_alloc_objects += a;
		inuse_scale(recs[i].inuse_objects, recs[i].inuse_bytes, period / 2, &a, &b);
		s.s_inuse_objects += a;
		s.s_inuse_bytes += b;
	}
	return s;
}

struct expect {
	const char *func;
	long size, alloc, live;
};

static void inuse_check(const char *text, const struct expect *e, size_t n, const char *when)
{
	for (size_t i = 0; i < n; i++) {
		struct inuse_site s = inuse_site(text, e[i].func);
		cr_expect_eq(s.alloc_objects, e[i].alloc, "%s: %s: %ld allocations, expected %ld",
			     when, e[i].func, s.alloc_objects, e[i].alloc);
		cr_expect_eq(s.inuse_objects, e[i].live, "%s: %s: %ld in use, expected %ld", when,
			     e[i].func, s.inuse_objects, e[i].live);
		cr_expect_eq(s.inuse_bytes, e[i].live * e[i].size,
			     "%s: %s: %ld bytes in use, expected %ld", when, e[i].func, s.inuse_bytes,
			     e[i].live * e[i].size);
	}
}

Test(inuse, exact_at_rate_1_running_and_at_exit, .timeout = 120)
{
	char *dir = e2e_tmpdir();
	struct lu_daemon d;
	lu_daemon_start(&d, dir, NULL);
	const long n = 400;
	struct lu_proc p;
	char *argv[] = { PROG("inuse_sites"), "400", "aligned", NULL };
	lu_start(&p, &d, "1", 0, NULL, argv, NULL);
	char line[256];
	cr_assert(lu_read_line(&p, line, sizeof(line), 60000), "program did not get ready");
	cr_assert_str_eq(line, "ready");

	struct expect running[] = {
		{ "site_kept", 100, n, n },          { "site_freed", 200, n, 0 },
		{ "site_grow", 64, n, 0 },           { "site_grow_realloc", 5000, n, n },
		{ "site_calloc", 300, n, n },        { "site_thread", 400, n, 0 },
		{ "site_new_kept", 600, n, n },      { "site_new_freed", 700, n, 0 },
		{ "site_new_arr", 900, n, 0 },       { "site_memalign", 1000, n, n / 2 },
		{ "site_leak", 48, n, n },           { "site_aligned_new", 256, n, n },
	};
	char *text = lu_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	inuse_check(text, running, INUSE_N(running), "running");
	struct lu_acct a;
	cr_assert(lu_text_acct(text, &a), "no accounting line");
	cr_expect_eq(a.dropped, 0);
	cr_expect(strstr(text, "untracked=") == NULL && strstr(text, "frees=untracked") == NULL,
		  "in-use accounting not clean: %s", strstr(text, "# llgo-heap:"));
	free(text);

	fputs("go\n", p.in);
	fflush(p.in);
	cr_assert(lu_read_line(&p, line, sizeof(line), 60000));
	int st = lu_wait(&p, 60000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);

	/* After exit: the kept objects were freed in phase 2, everything else leaked. */
	running[0].live = 0;
	for (int i = 0; i < 100; i++) {
		struct llgo_list_entry e;
		if (lu_list_pid(d.sock, p.pid, &e) && e.state == LLGO_PROC_EXITED)
			break;
		lu_sleep_ms(50);
	}
	text = lu_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	inuse_check(text, running, INUSE_N(running), "at exit");
	free(text);
	lu_daemon_stop(&d);
	e2e_rmdir(dir);
}

/* At a sampled rate sampled objects are page-aligned and tracked; estimates as Go's. */
Test(inuse, estimates_at_sampled_rate, .timeout = 120)
{
	char *dir = e2e_tmpdir();
	struct lu_daemon d;
	lu_daemon_start(&d, dir, NULL);
	const long n = 50000;
	struct lu_proc p;
	char *argv[] = { PROG("inuse_sites"), "50000", NULL };
	lu_start(&p, &d, "16384", 0, NULL, argv, NULL);
	char line[256];
	cr_assert(lu_read_line(&p, line, sizeof(line), 60000), "program did not get ready");
	char *text = lu_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	struct {
		const char *func;
		long live;
	} want[] = {
		{ "site_kept", n },     { "site_freed", 0 },      { "site_grow_realloc", n },
		{ "site_calloc", n },   { "site_thread", 0 },     { "site_new_kept", n },
		{ "site_new_freed", 0 }, { "site_memalign", n / 2 }, { "site_leak", n },
	};
	for (size_t i = 0; i < INUSE_N(want); i++) {
		struct inuse_site s = inuse_site(text, want[i].func);
		double est = s.s_inuse_objects;
		if (want[i].live == 0) {
			cr_expect_eq(s.inuse_objects, 0, "%s: %ld sampled objects still in use",
				     want[i].func, s.inuse_objects);
			cr_expect(s.alloc_objects > 0, "%s: nothing sampled", want[i].func);
		} else {
			double margin = (double)want[i].live / 10;
			cr_expect(fabs(est - (double)want[i].live) <= margin,
				  "%s: estimated %.0f in use, made %ld (margin %.0f)", want[i].func,
				  est, want[i].live, margin);
		}
	}
	free(text);
	fputs("go\n", p.in);
	fflush(p.in);
	int st = lu_wait(&p, 60000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
	lu_daemon_stop(&d);
	e2e_rmdir(dir);
}
