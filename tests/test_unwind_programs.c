// SPDX-License-Identifier: MIT
/*
 * test_unwind_programs.c: whole stacks (as test_unwind.c checks them) of an -O2 C++ program
 * without frame pointers through libstdc++, of frame-pointer code calling into libc (which
 * keeps none), and of Debian's own sqlite3 and python3, which must reach their threads'
 * starts; and the fast path (unwind_fast.c) against libunwind on the same programs.
 */
#include <dwarf.h>
#include <fcntl.h>
#include <grp.h>
#include <regex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "helpers.h"
#include "../agent/internal.h"
#include "../shim/internal.h"

/* ---- an -O2 C++ program without frame pointers, through libstdc++ ---------------------- */

#define CXX "nofp_cxx.cc"

static void uw_check_cxx(const char *mode)
{
	char *dir = th_tmpdir();
	const int n = 20;
	struct th_prof p;
	th_prof_run(&p, dir, mode, TH_PROGS "/nofp_cxx 20");
	bool bad = false;
	const struct th_want str[] = { { "_Z11make_stringB5cxx11i", CXX, "make_string" },
				       { "main", CXX, "main_string" } };
	const struct th_want vec[] = { { "_Z11grow_vectori", CXX, "grow_vector" },
				       { "main", CXX, "main_vector" } };
	const struct th_want map[] = { { "_Z8fill_mapi", CXX, "fill_map" },
				       { "main", CXX, "main_map" } };
	const struct th_want node[] = { { "_Z9make_nodev", CXX, "make_node" },
					{ "main", CXX, "main_node" } };
	const struct th_want thr[] = { { "_Z9throw_onei", CXX, "throw_one" },
				       { "main", CXX, "main_throw" } };
	const struct th_want exc[] = { { "__cxa_allocate_exception", NULL, NULL },
				       { "_Z9throw_onei", CXX, "throw_one" },
				       { "main", CXX, "main_throw" } };
	/* std::string's buffer (allocated inside libstdc++), a vector growing 1, 2, 4, three
	 * map nodes, one make_shared block, and per throw the exception object and the
	 * runtime_error's message */
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, str, 2, th_main_root, 3), n, "%s: std::string",
			mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, vec, 2, th_main_root, 3), 3 * n,
			"%s: std::vector", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, map, 2, th_main_root, 3), 3 * n,
			"%s: std::map", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, node, 2, th_main_root, 3), n,
			"%s: std::make_shared", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, thr, 2, th_main_root, 3), 2 * n, "%s: throw",
			mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, exc, 3, th_main_root, 3), n,
			"%s: __cxa_allocate_exception", mode);
	/* a destructor run from throw_one's landing pad while the exception propagates */
	const struct th_want pad[] = { { "_ZN5GuardD2Ev", CXX, "guard_dtor" },
				       { "_Z9throw_onei", NULL, NULL },
				       { "main", CXX, "main_throw" } };
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, pad, 3, th_main_root, 3), n, "%s: landing pad",
			mode);
	th_prof_expect_whole(&p);
	if (bad || p.truncated)
		th_prof_dump(&p);
	th_prof_free(&p);
	th_rmdir(dir);
}

Test(unwind, nofp_cxx_dwarf, .timeout = 300)
{
	uw_check_cxx("dwarf");
}

Test(unwind, nofp_cxx_auto, .timeout = 300)
{
	uw_check_cxx("auto");
}

/* ---- frame-pointer code calling into libc, which keeps none --------------------------- */

#define FP "unwind_fp.c"

/* The caller of fopen is load_file (a frame-pointer walk from load_file's frame skips it
 * and shows fopen called from main), and printf's buffer has its callers. */
static void uw_check_fp(const char *mode)
{
	char *dir = th_tmpdir();
	const int n = 20;
	struct th_prof p;
	th_prof_run(&p, dir, mode, TH_PROGS "/unwind_fp 20 " TH_PROGS_SRC "/unwind_fp.c");
	bool bad = false;
	const struct th_want load[] = { { "load_file", FP, "load_file" },
					{ "main", FP, "main_load" } };
	const struct th_want rep[] = { { "report", FP, "report" }, { "main", FP, "main_report" } };
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, load, 2, th_main_root, 3), n,
			"%s: fopen from load_file", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, rep, 2, th_main_root, 3), 1,
			"%s: printf from report", mode);
	/* the frame right above load_file is libc's fopen */
	long fopen_frames = 0;
	for (int i = 0; i < p.n; i++) {
		const struct th_prof_rec *r = &p.r[i];
		for (int k = 1; k < r->nframes; k++)
			if (strcmp(r->f[k].func, "load_file") == 0 && strstr(r->f[k - 1].func, "fopen"))
				fopen_frames += r->count;
	}
	TH_EXPECT_EQ_OR(bad, fopen_frames, n, "%s: fopen right above load_file", mode);
	th_prof_expect_whole(&p);
	if (bad || p.truncated)
		th_prof_dump(&p);
	th_prof_free(&p);
	th_rmdir(dir);
}

Test(unwind, fp_program_calls_libc_auto, .timeout = 300)
{
	uw_check_fp("auto");
}

Test(unwind, fp_program_calls_libc_dwarf, .timeout = 300)
{
	uw_check_fp("dwarf");
}

/* ---- programs as Debian ships them ------------------------------------------------------- */

/* Share of sampled allocations whose stack reaches __libc_start_call_main or start_thread. */
static double uw_rooted(const struct th_prof *p, long *total)
{
	long rooted = 0;
	*total = 0;
	for (int i = 0; i < p->n; i++) {
		const struct th_prof_rec *r = &p->r[i];
		*total += r->count;
		for (int k = 0; k < r->nframes; k++) {
			if (strcmp(r->f[k].func, "__libc_start_call_main") == 0 ||
			    strcmp(r->f[k].func, "start_thread") == 0) {
				rooted += r->count;
				break;
			}
		}
	}
	return *total ? (double)rooted / (double)*total : 0;
}

/* dir/script, the input of the programs below */
static void uw_write_script(const char *dir, const char *script)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/script", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(script, f);
	fclose(f);
}

static void uw_check_debian(const char *what, const char *prog, const char *script, double want)
{
	char *dir = th_tmpdir(), *out = NULL;
	char path[4200];
	uw_write_script(dir, script);
	/* LLGO_HEAP_FULL=wait: what is measured is how far stacks unwind, not how a burst
	 * degrades them when the daemon falls behind on a loaded machine */
	int rc = th_sh(&out, "cd %s && LLGO_HEAP_FULL=wait " TH_RUN " --unwind auto -r 16384 -f text "
			"-o prof.heap -- %s < script", dir, prog);
	cr_assert_eq(rc, 0, "%s failed (%d):\n%.3000s", prog, rc, out);
	free(out);
	snprintf(path, sizeof(path), "%s/prof.heap", dir);
	char *text = th_read_file(path);
	cr_assert(text);
	struct th_prof p;
	th_prof_parse(text, &p);
	free(text);
	long total;
	double share = uw_rooted(&p, &total);
	fprintf(stderr, "%s (--unwind auto): %.1f%% of %ld sampled allocations reach the thread's "
			"start; %llu stacks unwound, %llu truncated, %llu of %llu samples dropped\n",
		what, 100 * share, total, p.unwound, p.truncated, p.dropped, p.sampled);
	cr_expect_gt(total, 100, "%s: only %ld samples", what, total);
	cr_expect_geq(share, want, "%s: %.1f%% of stacks reach the thread's start", what,
		      100 * share);
	cr_expect_eq(p.sampled, p.delivered + p.dropped + p.corrupt);
	th_prof_free(&p);
	th_rmdir(dir);
}

static const char uw_sqlite_script[] =
	"create table t(a integer primary key, b text, c real);\n"
	"with recursive n(x) as (select 1 union all select x + 1 from n where x < 20000)\n"
	"  insert into t select x, printf('row %d %s', x, hex(randomblob(20))), x * 1.5 from n;\n"
	"create index ib on t(b);\n"
	"select count(*), sum(length(b)) from t where b like 'row 1%';\n"
	"select b from t order by c desc limit 3;\n";

static const char uw_python_script[] =
	"import json, re, threading\n"
	"def work(k):\n"
	"    for i in range(200):\n"
	"        d = {str(j): [j] * 10 for j in range(50)}\n"
	"        s = json.dumps(d)\n"
	"        json.loads(s)\n"
	"        re.compile('a+b%d_%d' % (k, i))\n"
	"t = threading.Thread(target=work, args=(1,))\n"
	"t.start()\n"
	"work(0)\n"
	"t.join()\n";

Test(unwind, debian_sqlite3_reaches_start, .timeout = 300)
{
	uw_check_debian("sqlite3", "/usr/bin/sqlite3 :memory:", uw_sqlite_script, 0.95);
}

Test(unwind, debian_python3_reaches_start, .timeout = 300)
{
	uw_check_debian("python3", "/usr/bin/python3 -", uw_python_script, 0.95);
}

/* ---- the fast path against libunwind (issue 21) ------------------------------------------ */

/* Sums of a check-mode daemon's per-process lines (unwind.c's unwind_free). */
struct uw_fast_counts {
	unsigned long stacks, fast, checked, differ, slow;
	int procs;
	unsigned long logged_differ; /* "differs from libunwind" lines */
	/* drain.c's memo of stack copies (LLGO_HEAP_UNWIND_MEMO=check): hits, each unwound
	 * again, and those whose stack differed from the memo's */
	unsigned long memo_hits, memo_checked, memo_differ;
};

/*
 * Run cmd (a shell command line, in a folder of its own holding `script`, its input when
 * not NULL) under the shim in unwinding mode `mode` at `rate`, against a private daemon with
 * LLGO_HEAP_UNWIND_FAST=check: every stack copy is unwound by unwind_fast.c's walk and by
 * libunwind alone and the two compared, frame by frame (pcs, truncation, unknown pc); and
 * LLGO_HEAP_UNWIND_MEMO=check: every copy the memo of stack copies (rawmemo.h) would have
 * answered is unwound too and its stack compared with the memo's. The daemon logs the
 * counts of each process when it stops. None may differ; at least min_stacks stacks,
 * min_share of them by the fast path.
 */
static void uw_fast_check(struct uw_fast_counts *k, const char *mode, long rate, const char *cmd,
			  const char *script, unsigned long min_stacks, double min_share)
{
	memset(k, 0, sizeof(*k));
	char *dir = th_tmpdir(), *out = NULL;
	if (script)
		uw_write_script(dir, script);
	struct heapd d;
	heapd_init(&d, NULL);
	static const char *const wrap[] = { "/usr/bin/env", "LLGO_HEAP_UNWIND_FAST=check",
					    "LLGO_HEAP_UNWIND_MEMO=check", NULL };
	d.wrap = wrap;
	heapd_run(&d, NULL);
	/* LLGO_HEAP_FULL=wait: every sample reaches the daemon, whatever the machine's load */
	int rc = th_sh(&out, "cd %s && LD_PRELOAD=" LLGO_PLAIN_SHIM " LLGO_HEAP_SOCKET=%s "
			"LLGO_HEAP_UNWIND=%s LLGO_HEAP_RATE=%ld LLGO_HEAP_FULL=wait %s%s",
			dir, d.sock, mode, rate, cmd, script ? " < script" : "");
	cr_assert_eq(rc, 0, "%s failed (%d):\n%.3000s", cmd, rc, out);
	free(out);
	heapd_stop_clean(&d);
	char *log = heapd_log(&d);
	for (const char *l = log; (l = strstr(l, "unwind: pid ")) != NULL; l++) {
		unsigned long s, f, c, x, b;
		if (sscanf(l, "unwind: pid %*d: %lu stacks, %lu by the fast path (%lu checked against "
			      "libunwind, %lu differ), %lu left to libunwind", &s, &f, &c, &x, &b) != 5)
			continue;
		k->procs++;
		k->stacks += s;
		k->fast += f;
		k->checked += c;
		k->differ += x;
		k->slow += b;
	}
	for (const char *l = log; (l = strstr(l, "differs from libunwind")) != NULL; l++)
		k->logged_differ++;
	for (const char *l = log; (l = strstr(l, "unwind memo: pid ")) != NULL; l++) {
		unsigned long h, c, x;
		if (sscanf(l, "unwind memo: pid %*d: %lu hits, %lu checked, %lu differ", &h, &c,
			   &x) != 3)
			continue;
		k->memo_hits += h;
		k->memo_checked += c;
		k->memo_differ += x;
	}
	fprintf(stderr, "fast path vs libunwind (%s, --unwind %s, rate %ld): %d processes, %lu "
			"stacks, %lu by the fast path, %lu differ, %lu left to libunwind\n",
		cmd, mode, rate, k->procs, k->stacks, k->fast, k->differ, k->slow);
	cr_expect_eq(k->differ, 0, "the fast path and libunwind differ on %lu of %lu stacks:\n%.6000s",
		     k->differ, k->checked, log);
	cr_expect_eq(k->logged_differ, 0, "%.6000s", log);
	fprintf(stderr, "memo of stack copies: %lu hits of %lu stacks, %lu differ\n", k->memo_hits,
		k->stacks, k->memo_differ);
	cr_expect_eq(k->memo_differ, 0, "the memo's stack differs on %lu of %lu hits:\n%.6000s",
		     k->memo_differ, k->memo_hits, log);
	cr_expect_eq(k->memo_checked, k->memo_hits);
	cr_expect_eq(k->checked, k->fast, "check mode compared %lu of %lu fast stacks", k->checked,
		     k->fast);
	cr_expect_eq(k->fast + k->slow, k->stacks);
	cr_expect_geq(k->stacks, min_stacks, "%s: only %lu stacks", cmd, k->stacks);
	cr_expect_geq((double)k->fast, min_share * (double)k->stacks,
		      "%s: %lu of %lu stacks by the fast path", cmd, k->fast, k->stacks);
	free(log);
	heapd_cleanup(&d);
	th_rmdir(dir);
}

/* -O2 C without frame pointers: plain and inlined chains, recursion, a thread, a dlopen'ed
 * library, stdio's buffer in libc, and signal handlers (on the thread's stack and on a
 * sigaltstack), whose trampolines the fast path leaves to libunwind. */
Test(unwind, fast_path_matches_libunwind_c, .timeout = 300)
{
	struct uw_fast_counts k;
	/* the five chains without a signal frame (20 each) and stdio's buffer by the fast
	 * path; the two signal handlers' stacks (20 each) by libunwind: the trampoline's CFI
	 * is expressions (and a few of the program's start, which vary) */
	uw_fast_check(&k, "dwarf", 1, TH_PROGS "/nofp_chains 20 " TH_PROGS "/libnofp_dl.so",
		      NULL, 140, 0.6);
	cr_expect_geq(k.slow, 40, "%lu stacks left to libunwind", k.slow);
	/* each chain's 20 copies from one depth: all but the first few found in the memo (75
	 * of 150 stacks when it was made) */
	cr_expect_geq(k.memo_hits, 40, "%lu of %lu stacks from the memo", k.memo_hits, k.stacks);
}

/* -O2 C++ without frame pointers: allocations through Debian's libstdc++ (std::string,
 * std::vector, std::map, std::make_shared, a thrown exception, a landing pad). */
Test(unwind, fast_path_matches_libunwind_cxx, .timeout = 300)
{
	struct uw_fast_counts k;
	uw_fast_check(&k, "dwarf", 1, TH_PROGS "/nofp_cxx 50", NULL, 300, 0.9);
}

/* Debian's own -O2 binaries: python3 (libpython in the executable, libc, libm, extension
 * modules, two threads) in both copying modes, and sqlite3 (libsqlite3, libreadline). */
Test(unwind, fast_path_matches_libunwind_debian_python3, .timeout = 300)
{
	struct uw_fast_counts k;
	uw_fast_check(&k, "dwarf", 64, "/usr/bin/python3 -", uw_python_script, 2000, 0.9);
	uw_fast_check(&k, "auto", 64, "/usr/bin/python3 -", uw_python_script, 500, 0.9);
}

Test(unwind, fast_path_matches_libunwind_debian_sqlite3, .timeout = 300)
{
	struct uw_fast_counts k;
	uw_fast_check(&k, "dwarf", 256, "/usr/bin/sqlite3 :memory:", uw_sqlite_script, 2000, 0.9);
	/* a loop of statements: about half its copies from the memo (10,949 of 21,534) */
	cr_expect_geq(k.memo_hits, k.stacks / 5, "%lu of %lu stacks from the memo", k.memo_hits,
		      k.stacks);
}
