// SPDX-License-Identifier: MIT
/*
 * test_fidelity.c: end-to-end checks that profiles are right, in the sense Go's own tests
 * use: the scaled estimate per source line is within 10% of the truth (the method of Go's
 * test/heapsampling.go, with its retry rule); every site shows its file:line in
 * `go tool pprof`, inlined and dlopen'ed sites included; the rate of a running process can
 * be changed and each phase is counted as it should be; and programs nobody here wrote run
 * unchanged under the shim.
 */
#include <math.h>

#include "helpers.h"

#define RUN TH_BIN "/llgo-heap run"

struct truth {
	int line;
	long size, count;
};

static int parse_truth(const char *out, struct truth *t, int max)
{
	int n = 0;
	for (const char *p = strstr(out, "site "); p && n < max; p = strstr(p + 1, "\nsite ")) {
		if (*p == '\n')
			p++;
		if (sscanf(p, "site %d %ld %ld", &t[n].line, &t[n].size, &t[n].count) == 3)
			n++;
	}
	return n;
}

/* Run the heapsampling program in mode at rate, up to three times; pass when one run has
 * every per-line estimate within 10%, fail only when all runs are on one side of the
 * margin for some value (Go's checkValue rule). */
static void heapsampling(const char *mode, long n, long rate)
{
	enum { MAXS = 8, RUNS = 3 };
	double lo[MAXS][2], hi[MAXS][2];
	struct truth t[MAXS];
	int nt = 0;
	for (int r = 0; r < RUNS; r++) {
		char *dir = th_tmpdir(), *out = NULL;
		/* LLGO_HEAP_FULL=wait: the estimates are measured, not how a burst is cut when
		 * the daemon falls behind on a loaded machine (that drops and counts) */
		int rc = th_sh(&out, "cd %s && LLGO_HEAP_RING_KB=8192 LLGO_HEAP_FULL=wait " RUN
				" -r %ld -f text -o hs.heap -- " TH_PROGS "/heapsampling %s %ld",
				dir, rate, mode, n);
		cr_assert_eq(rc, 0, "run failed:\n%s", out);
		nt = parse_truth(out, t, MAXS);
		cr_assert_geq(nt, 3, "program output:\n%s", out);
		free(out);
		char path[4200];
		snprintf(path, sizeof(path), "%s/hs.heap", dir);
		char *text = th_read_file(path);
		cr_assert(text);
		static struct th_text_rec recs[8192];
		long period;
		int nrec = th_parse_text(text, &period, recs, 8192);
		cr_assert_eq(period, 2 * rate);
		unsigned long long s, d, dr, c;
		const char *acc = strstr(text, "# llgo-heap: sampled=");
		cr_assert(acc && sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu "
					"dropped=%llu corrupt=%llu", &s, &d, &dr, &c) == 4);
		cr_assert_eq(dr + c, 0, "records lost: %s", acc);

		bool all_ok = true;
		for (int i = 0; i < nt; i++) {
			char loc[64];
			snprintf(loc, sizeof(loc), "heapsampling.c:%d", t[i].line);
			double objs = 0, bytes = 0;
			for (int k = 0; k < nrec; k++) {
				const char *l = recs[k].loc0;
				size_t ll = strlen(l), ml = strlen(loc);
				if (ll >= ml && strcmp(l + ll - ml, loc) == 0) {
					objs += recs[k].alloc_objects;
					bytes += recs[k].alloc_bytes;
				}
			}
			double eo, eb;
			th_go_scale(objs, bytes, (double)rate, &eo, &eb);
			double want[2] = { (double)t[i].count, (double)t[i].count * t[i].size };
			double got[2] = { eo, eb };
			for (int v = 0; v < 2; v++) {
				if (r == 0 || got[v] < lo[i][v])
					lo[i][v] = got[v];
				if (r == 0 || got[v] > hi[i][v])
					hi[i][v] = got[v];
				double margin = want[v] / 10;
				bool ok = fabs(got[v] - want[v]) <= margin;
				all_ok &= ok;
				cr_log_info("%s rate %ld run %d line %d size %ld %s: estimate %.0f, "
					    "truth %.0f (%+.1f%%, %.0f samples)%s", mode, rate, r + 1,
					    t[i].line, t[i].size, v ? "bytes" : "objects", got[v],
					    want[v], 100 * (got[v] - want[v]) / want[v], objs,
					    ok ? "" : " OUTSIDE 10%");
				if (r == RUNS - 1)
					cr_expect(!(lo[i][v] > want[v] + margin ||
						    hi[i][v] < want[v] - margin),
						  "line %d %s: all %d runs outside 10%% on one side "
						  "(min %.0f max %.0f want %.0f)", t[i].line,
						  v ? "bytes" : "objects", RUNS, lo[i][v], hi[i][v],
						  want[v]);
			}
		}
		free(text);
		th_rmdir(dir);
		if (all_ok)
			return;
	}
}

Test(fidelity, heapsampling_interleaved_rate_16384, .timeout = 600)
{
	heapsampling("interleaved", 50000, 16384);
}

Test(fidelity, heapsampling_small_rate_16384, .timeout = 600)
{
	heapsampling("small", 50000, 16384);
}

Test(fidelity, heapsampling_default_rate, .timeout = 600)
{
	heapsampling("large", 50000, 524288);
}

/* go tool pprof -top -lines and -traces show file:line of every site: a plain site, a
 * static inline helper inlined into two callers, and a site in a dlopen'ed library. */
Test(fidelity, pprof_lines_inline_and_dlopen, .timeout = 600)
{
	char *dir = th_tmpdir(), *out = NULL;
	int rc = th_sh(&out, "cd %s && " RUN " -r 1 -o lines.pb.gz -- " TH_PROGS
			"/e2e_lines " TH_PROGS "/libe2e_plugin.so 200", dir);
	cr_assert_eq(rc, 0, "run failed:\n%s", out);
	free(out);
	rc = th_pprof(&out, dir, "-top -lines "
		    "-nodefraction=0 -nodecount=100000 -sample_index=alloc_objects lines.pb.gz");
	cr_assert_eq(rc, 0, "%s", out);
	const char *want[] = {
		"inline_helper " TH_PROGS_SRC "/e2e_lines.c:15 (inline)",
		"caller_one " TH_PROGS_SRC "/e2e_lines.c:22",
		"caller_two " TH_PROGS_SRC "/e2e_lines.c:27",
		"plain_site " TH_PROGS_SRC "/e2e_lines.c:32",
		"plugin_alloc " TH_PROGS_SRC "/libe2e_plugin.c:10",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_expect(strstr(out, want[i]) != NULL, "-top -lines lacks '%s':\n%s", want[i],
			  out);
	/* 200 each from the two inlined copies: 400 at the helper's line */
	cr_expect(strstr(out, "400") != NULL, "inline helper count:\n%s", out);
	free(out);

	rc = th_pprof(&out, dir, "-traces "
		    "-lines lines.pb.gz");
	cr_assert_eq(rc, 0, "%s", out);
	/* a trace of the inlined site: helper line, then its caller, in one location */
	cr_expect(strstr(out, "inline_helper") && strstr(out, "caller_one") &&
			  strstr(out, "caller_two") && strstr(out, "plugin_alloc"),
		  "-traces:\n%s", out);
	cr_expect(strstr(out, "e2e_lines.c:15") != NULL, "-traces lacks file:line:\n%s", out);
	free(out);
	th_rmdir(dir);
}

/* A linked allocator's plumbing named by llgo-heapd --trim disappears from the top of every
 * stack, so frame 0 is the user's function (the public header's llgo_heap_trim_add does the
 * same from inside the process; tests/test_shim.c covers it). */
Test(fidelity, daemon_trim_option, .timeout = 120)
{
	char *dir = th_tmpdir(), *out = NULL;
	const char *trim[] = { "--trim", "pool_*", NULL };
	struct heapd d;
	heapd_start(&d, dir, trim);
	const char *sock = d.sock;
	int rc = th_sh(&out, "cd %s && LD_PRELOAD=" LLGO_PLAIN_SHIM " LLGO_HEAP_SOCKET=%s "
			"LLGO_HEAP_RATE=1 " TH_PROGS "/e2e_trim 100 > prog.out; "
			"sed -n 1p prog.out", dir, sock);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	/* the program has exited; its session is kept */
	rc = th_sh(&out, TH_BIN "/llgo-heap list --socket %s | awk '$7 != \"\" && "
		    "/e2e_trim/ {print $1}'", sock);
	cr_assert_eq(rc, 0, "%s", out);
	int pid = atoi(out);
	free(out);
	cr_assert_gt(pid, 0, "e2e_trim not listed");
	rc = th_sh(&out, TH_BIN "/llgo-heap snapshot %d -f text -o - --socket %s", pid, sock);
	cr_assert_eq(rc, 0, "%s", out);
	static struct th_text_rec recs[256];
	long period;
	int n = th_parse_text(out, &period, recs, 256);
	cr_expect_eq(th_recs_count(recs, n, "user_builds_index", 4000), 100, "%s", out);
	cr_expect_eq(th_recs_count(recs, n, "pool_refill", 0), 0, "%s", out);
	cr_expect_eq(th_recs_count(recs, n, "pool_alloc", 0), 0, "%s", out);
	free(out);
	heapd_stop(&d);
	th_rmdir(dir);
}

/* Read "sampled" and the count at ratectl_site from a text snapshot. */
static long ratectl_count(const char *sock, pid_t pid, char **acc_line)
{
	char *out = NULL;
	int rc = th_sh(&out, TH_BIN "/llgo-heap snapshot %d -f text -o - --socket %s",
			(int)pid, sock);
	cr_assert_eq(rc, 0, "snapshot: %s", out);
	static struct th_text_rec recs[1024];
	long period;
	int n = th_parse_text(out, &period, recs, 1024);
	long c = th_recs_count(recs, n, "ratectl_site", 0);
	if (acc_line) {
		const char *a = strstr(out, "# llgo-heap: sampled=");
		*acc_line = strndup(a ? a : "", a ? strcspn(a, "\n") : 0);
	}
	free(out);
	return c;
}

static void ratectl_step(FILE *in, FILE *outp, long n, long size)
{
	fprintf(in, "%ld %ld\n", n, size);
	char line[128];
	cr_assert(fgets(line, sizeof(line), outp) != NULL);
	cr_assert(strncmp(line, "ok ", 3) == 0, "program said %s", line);
}

static void set_rate(const char *sock, pid_t pid, long rate)
{
	char *out = NULL;
	int rc = th_sh(&out, TH_BIN "/llgo-heap rate %d %ld --socket %s", (int)pid, rate, sock);
	cr_assert_eq(rc, 0, "rate: %s", out);
	free(out);
}

/* A process started at rate 0 is attached and listed, records nothing, and is switched
 * 0 -> 1 -> 0 -> 524288 while it runs; what was gathered is kept at each step. */
Test(fidelity, runtime_rate_changes, .timeout = 300)
{
	char *dir = th_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	const char *sock = d.sock;
	char env_sock[4300], *env[] = { env_sock, "LLGO_HEAP_RATE=0",
					"LD_PRELOAD=" LLGO_PLAIN_SHIM, NULL };
	snprintf(env_sock, sizeof(env_sock), "LLGO_HEAP_SOCKET=%s", sock);
	char *argv[] = { TH_PROGS "/e2e_ratectl", NULL };
	FILE *in, *outp;
	pid_t p = th_spawn(argv, env, &in, &outp);
	char line[128];
	cr_assert(fgets(line, sizeof(line), outp) && strcmp(line, "ready\n") == 0);

	char *out = NULL;
	cr_assert_eq(th_sh(&out, TH_BIN "/llgo-heap list --socket %s", sock), 0);
	char pidstr[32];
	snprintf(pidstr, sizeof(pidstr), "%d ", (int)p);
	const char *row = strstr(out, pidstr);
	cr_assert(row, "not listed:\n%s", out);
	long lrate = -1;
	char state[16];
	sscanf(row, "%*d %15s %ld", state, &lrate);
	cr_expect_eq(lrate, 0, "listed rate %ld:\n%s", lrate, out);
	free(out);

	ratectl_step(in, outp, 1000, 100);
	cr_expect_eq(ratectl_count(sock, p, NULL), 0, "rate 0 recorded something");

	set_rate(sock, p, 1);
	ratectl_step(in, outp, 1000, 100);
	cr_expect_eq(ratectl_count(sock, p, NULL), 1000, "rate 1: every allocation");

	set_rate(sock, p, 0);
	ratectl_step(in, outp, 1000, 100);
	cr_expect_eq(ratectl_count(sock, p, NULL), 1000, "rate 0 again: nothing new, kept");

	set_rate(sock, p, 524288);
	/* 2000 x 1 MiB: each is sampled with probability 1 - exp(-2) = 0.865 */
	ratectl_step(in, outp, 2000, 1 << 20);
	char *acc = NULL;
	long c = ratectl_count(sock, p, &acc);
	cr_log_info("rate 524288: %ld samples at ratectl_site in all (1000 at rate 1 + about "
		    "2000 x 0.865 expected); %s", c, acc);
	cr_expect(c > 1000 + 1500 && c < 1000 + 1950, "rate 524288: %ld samples in all", c);
	unsigned long long s, dl, dr, co;
	cr_assert(sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu corrupt=%llu",
			 &s, &dl, &dr, &co) == 4, "%s", acc);
	cr_expect_eq(s, dl + dr + co);
	free(acc);

	/* the proto scales each part with its own rate: 1000 at rate 1 + ~2000 at 524288 */
	cr_assert_eq(th_sh(&out, TH_BIN "/llgo-heap snapshot %d -o %s/r.pb.gz --socket %s && "
			    "HOME=%s GOCACHE=%s/gocache go tool pprof -raw %s/r.pb.gz",
			    (int)p, dir, sock, dir, dir, dir), 0, "%s", out);
	cr_expect(strstr(out, "several rates") != NULL, "no mixed-rate comment:\n%.2000s", out);
	free(out);

	fclose(in);
	fclose(outp);
	int st;
	waitpid(p, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	heapd_stop(&d);
	th_rmdir(dir);
}

/* Programs nobody here wrote: stripped, no frame pointers. Output unchanged, the profile
 * reads in go tool pprof, and every function name shown is one the binary really has. */
Test(fidelity, sqlite3_and_python3_unchanged, .timeout = 600)
{
	char *dir = th_tmpdir(), *plain = NULL, *prof = NULL;
	const char *sql = "create table t(a integer primary key, b text);"
			  "with recursive c(x) as (select 1 union all select x+1 from c "
			  "where x<20000) insert into t select x, hex(randomblob(40)) from c;"
			  "create index tb on t(b);"
			  "select count(*), sum(length(b)) from t;"
			  "select a, length(b) from t order by a desc limit 3;";
	int rc1 = th_sh(&plain, "cd %s && echo '%s' | sqlite3 :memory:", dir, sql);
	int rc2 = th_sh(&prof, "cd %s && echo '%s' | " RUN " -r 4096 -o sq.pb.gz -- sqlite3 "
			 ":memory: 2>/dev/null", dir, sql);
	cr_assert_eq(rc1, 0, "%s", plain);
	cr_assert_eq(rc2, 0, "%s", prof);
	cr_expect_str_eq(prof, plain, "sqlite3 output changed under the shim");
	free(plain);
	free(prof);
	char *out = NULL;
	int rc = th_pprof(&out, dir, "-top "
			"-nodefraction=0 -sample_index=alloc_space sq.pb.gz");
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "llgo-heap: sampled=") != NULL, "%s", out);
	free(out);
	/* Every function name in the profile must be a symbol of a file the process mapped
	 * (these binaries are stripped: their dynamic symbols, or a separate debug file's
	 * symbols where one is installed), never a nearest-name guess. Only physical frames
	 * (the last name at each address: inlined functions are named by DWARF, not symbols)
	 * are checked, and the [truncated] marker is no name. */
	rc = th_sh(&out, "cd %s && echo '%s' | " RUN " -r 4096 -f text -o sq.heap -- sqlite3 "
		    ":memory: >/dev/null 2>&1 && "
		    "awk '/^MAPPED_LIBRARIES:/{m=1;next} m && $6 ~ /^\\// {print $6}' sq.heap "
		    "| sort -u | while read f; do nm -D --defined-only \"$f\" 2>/dev/null; "
		    "nm --defined-only \"$f\" 2>/dev/null; "
		    "id=$(readelf -n \"$f\" 2>/dev/null | awk '/Build ID/{print $3}'); "
		    "[ -n \"$id\" ] && nm --defined-only /usr/lib/debug/.build-id/$(echo $id | "
		    "cut -c1-2)/$(echo $id | cut -c3-).debug 2>/dev/null; done | awk '{print $NF}' | "
		    "sed 's/@.*//' | sort -u > syms && "
		    "grep -P '^#\\t0x' sq.heap | awk -F'\\t' '{n[$2] = $3} END {for (a in n) "
		    "print n[a]}' | grep -v -e '^0x' -e '^$' -e '^\\[truncated\\]' | "
		    "sed 's/+0x[0-9a-f]*$//' | sort -u > shown && "
		    "test -s shown && comm -23 shown syms", dir, sql);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect_str_eq(out, "", "names shown that no mapped file defines:\n%s", out);
	free(out);

	const char *py = "import json\n"
			 "d = {str(i): [i] * 10 for i in range(20000)}\n"
			 "print(len(json.dumps(d)))\n";
	char pyfile[4300];
	snprintf(pyfile, sizeof(pyfile), "%s/w.py", dir);
	FILE *f = fopen(pyfile, "w");
	cr_assert(f);
	fputs(py, f);
	fclose(f);
	rc1 = th_sh(&plain, "cd %s && python3 w.py", dir);
	rc2 = th_sh(&prof, "cd %s && " RUN " -o py.pb.gz -- python3 w.py 2>/dev/null", dir);
	cr_assert_eq(rc1, 0, "%s", plain);
	cr_assert_eq(rc2, 0, "%s", prof);
	cr_expect_str_eq(prof, plain, "python3 output changed under the shim");
	free(plain);
	free(prof);
	rc = th_pprof(&out, dir, "-top "
		    "-sample_index=alloc_space py.pb.gz");
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	th_rmdir(dir);
}
