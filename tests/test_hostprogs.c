// SPDX-License-Identifier: MIT
/*
 * test_hostprogs.c: real programs nobody here wrote, profiled end to end with
 * `llgo-heap run` at the default rate and at rate 1, each compared with a plain run of the
 * same command: the same exit status, the same output where it is deterministic, no hang (a
 * time limit kills the whole run), and every profile written (the command's and those of the
 * processes it started) accounts for every sample: sampled = delivered + dropped + corrupt.
 * The programs: a Rust program with std::thread built here with Debian's rustc -O (every
 * Rust thread start calls pthread_getattr_np, which once deadlocked the shim), java -version,
 * node -e, python3 -c, perl -e, sqlite3, git log, gcc -c and make -n.
 * Also a C thread whose first call is pthread_getattr_np(pthread_self()) and a thread made
 * with clone(2) directly, counted exactly at rate 1 (tests/progs/host_threads.c).
 */
#include "helpers.h"

#define HP_LIMIT_S 120 /* per run; `timeout` kills the run's whole process group */

/* One run of cmd in dir (plain when rate is NULL; "" is the default rate), stdout and stderr
 * in dir/TAG.out and dir/TAG.err, the profiles in dir/TAG.prof (the command's) and
 * dir/TAG.prof.PID (the processes it started). */
static void hp_run_one(const char *dir, const char *tag, const char *rate, const char *cmd,
		       long *ms, int *status)
{
	char *out = NULL;
	long t0 = th_now_ms();
	if (!rate)
		*status = th_sh(&out, "cd '%s' && timeout -k 5 %d %s > %s.out 2> %s.err", dir,
				 HP_LIMIT_S, cmd, tag, tag);
	else
		*status = th_sh(&out,
				 "cd '%s' && timeout -k 5 %d '%s/llgo-heap' run %s%s -f text "
				 "-o %s.prof -- %s > %s.out 2> %s.err",
				 dir, HP_LIMIT_S, TH_BIN, rate[0] ? "-r " : "", rate, tag, cmd, tag,
				 tag);
	*ms = th_now_ms() - t0;
	/* timeout(1): 124 after TERM, 128+9 when TERM was not enough */
	cr_assert(*status != 124 && *status != 128 + SIGKILL,
		  "%s: '%s' did not finish in %d s (hang): status %d", tag, cmd, HP_LIMIT_S,
		  *status);
	free(out);
}

static char *hp_file(const char *dir, const char *tag, const char *ext)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s.%s", dir, tag, ext);
	char *s = th_read_file(path);
	return s ? s : strdup("");
}

/* Every profile of the run (tag.prof, tag.prof.PID): accounting consistent, nothing corrupt.
 * Returns the number of profiles; *main_sampled gets the command's own sampled count. */
static int hp_check_profiles(const char *dir, const char *tag, unsigned long long *main_sampled)
{
	char *list = NULL;
	int rc = th_sh(&list, "cd '%s' && ls %s.prof %s.prof.* 2>/dev/null", dir, tag, tag);
	(void)rc;
	int n = 0;
	*main_sampled = 0;
	bool main_seen = false;
	char main_name[256];
	snprintf(main_name, sizeof(main_name), "%s.prof", tag);
	for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
		char path[1024];
		snprintf(path, sizeof(path), "%s/%s", dir, line);
		char *text = th_read_file(path);
		cr_assert(text, "cannot read %s", path);
		struct th_acct a;
		cr_assert(th_text_acct(text, &a), "%s: no accounting line:\n%.2000s", path, text);
		const char *acct = strstr(text, "# llgo-heap: sampled=");
		const char *nl = strchr(acct, '\n');
		cr_log_info("%s: %.*s", line, (int)(nl ? nl - acct : 200), acct);
		cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt,
			     "%s: sampled=%llu delivered=%llu dropped=%llu corrupt=%llu", path,
			     a.sampled, a.delivered, a.dropped, a.corrupt);
		cr_expect_eq(a.corrupt, 0, "%s: corrupt records", path);
		if (strcmp(line, main_name) == 0) {
			main_seen = true;
			*main_sampled = a.sampled;
		}
		free(text);
		n++;
	}
	free(list);
	cr_expect(main_seen, "%s: no profile of the command itself", tag);
	return n;
}

/* The plain stderr's lines all appear in the profiled run's stderr (which adds ours). */
static void hp_expect_lines_in(const char *tag, const char *plain, const char *run)
{
	char *copy = strdup(plain);
	for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n"))
		cr_expect(strstr(run, line) != NULL, "%s: stderr lacks the line '%s':\n%s", tag,
			  line, run);
	free(copy);
}

/*
 * Run cmd (a shell command line, run in dir) plainly, then under `llgo-heap run` at the
 * default rate and at rate 1: stdout must be the same.
 */
static void hp_check(const char *dir, const char *name, const char *cmd)
{
	char plain_tag[128];
	snprintf(plain_tag, sizeof(plain_tag), "%s.plain", name);
	long plain_ms;
	int plain_st;
	hp_run_one(dir, plain_tag, NULL, cmd, &plain_ms, &plain_st);
	char *plain_out = hp_file(dir, plain_tag, "out");
	char *plain_err = hp_file(dir, plain_tag, "err");
	cr_assert_eq(plain_st, 0, "%s: the plain run failed (%d):\n%s%s", name, plain_st,
		     plain_out, plain_err);

	const char *rates[] = { "", "1" };
	for (int r = 0; r < 2; r++) {
		char tag[128];
		snprintf(tag, sizeof(tag), "%s.r%s", name, r ? "1" : "default");
		long ms;
		int st;
		hp_run_one(dir, tag, rates[r], cmd, &ms, &st);
		char *out = hp_file(dir, tag, "out");
		char *err = hp_file(dir, tag, "err");
		cr_expect_eq(st, plain_st, "%s: exit status %d, plain %d; stderr:\n%s", tag, st,
			     plain_st, err);
		cr_expect_str_eq(out, plain_out, "%s: stdout differs from the plain run", tag);
		hp_expect_lines_in(tag, plain_err, err);
		cr_expect(strstr(err, "was not profiled") == NULL, "%s: %s", tag, err);
		unsigned long long sampled;
		int nprof = hp_check_profiles(dir, tag, &sampled);
		cr_log_info("%s: '%s' %ld ms (plain %ld ms), exit %d, %d profile(s), the command "
			    "sampled %llu", tag, cmd, ms, plain_ms, st, nprof, sampled);
		if (r == 1)
			cr_expect_gt(sampled, 0, "%s: nothing sampled at rate 1", tag);
		free(out);
		free(err);
	}
	free(plain_out);
	free(plain_err);
}

static bool hp_have(const char *prog)
{
	char *out = NULL;
	int rc = th_sh(&out, "command -v %s", prog);
	free(out);
	return rc == 0;
}

/* A folder for a case of prog (which must be there: the Debian package pkg), holding file
 * with text when file is not NULL. */
static char *hp_dir(const char *prog, const char *pkg, const char *file, const char *text)
{
	cr_assert(hp_have(prog), "%s is missing: install the Debian package %s (make deps)",
		  prog, pkg);
	char *dir = th_tmpdir();
	if (file) {
		char path[1024];
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		th_write_file(path, text);
	}
	return dir;
}

/* hp_check of cmd in dir, then dir removed. */
static void hp_done(const char *name, const char *cmd, char *dir)
{
	hp_check(dir, name, cmd);
	th_rmdir(dir);
}

/* ---- real programs ------------------------------------------------------------------------ */

Test(hostprogs, rust_threads, .timeout = 600)
{
	/* Debian's rustc (make deps); a rustup toolchain elsewhere on PATH is not what users of
	 * the distribution have */
	const char *rustc = access("/usr/bin/rustc", X_OK) == 0 ? "/usr/bin/rustc" : NULL;
	if (!rustc && hp_have("rustc"))
		rustc = "rustc";
	if (!rustc) {
		fprintf(stderr, "hostprogs::rust_threads: skipped: rustc is not installed (Debian "
				"package rustc, make deps)\n");
		cr_skip_test("rustc is not installed (Debian package rustc)");
	}
	char *dir = th_tmpdir();
	char *out = NULL;
	int rc = th_sh(&out, "cd '%s' && %s -O -o rust_threads '%s/host_rust_threads.rs'", dir,
			rustc, TH_PROGS_SRC);
	cr_assert_eq(rc, 0, "%s -O failed:\n%s", rustc, out);
	free(out);
	hp_done("rust", "./rust_threads", dir);
}

Test(hostprogs, java_version, .timeout = 600)
{
	hp_done("java", "java -version", hp_dir("java", "default-jre-headless", NULL, NULL));
}

Test(hostprogs, node, .timeout = 600)
{
	hp_done("node",
		"node -e 'const m = new Map(); for (let i = 0; i < 200000; i++) m.set(\"k\" + i, "
		"{ i, s: String(i) }); let t = 0; for (const v of m.values()) t += v.s.length; "
		"console.log(m.size, t, JSON.stringify([...m.keys()].slice(0, 3)))'",
		hp_dir("node", "nodejs", NULL, NULL));
}

Test(hostprogs, python3, .timeout = 600)
{
	hp_done("python3",
		"/usr/bin/python3 -c 'import json, collections, threading\n"
		"d = collections.Counter(str(i % 977) for i in range(200000))\n"
		"out = []\n"
		"ts = [threading.Thread(target=lambda k=k: out.append(len(json.dumps([{\"k\": k, "
		"\"v\": list(range(k % 50))} for _ in range(2000)])))) for k in range(4)]\n"
		"[t.start() for t in ts]; [t.join() for t in ts]\n"
		"print(len(d), sum(d.values()), sorted(out))'",
		hp_dir("/usr/bin/python3", "python3", NULL, NULL));
}

Test(hostprogs, perl, .timeout = 600)
{
	hp_done("perl",
		"perl -e 'my %h; $h{$_} = [($_) x 3] for 1 .. 100000; my $s = 0; "
		"$s += $_->[0] for values %h; my $j = join(\",\", map { $_ * 2 } 1 .. 50000); "
		"print scalar(keys %h), \" $s \", length($j), \"\\n\"'",
		hp_dir("perl", "perl", NULL, NULL));
}

Test(hostprogs, sqlite3, .timeout = 600)
{
	hp_done("sqlite3", "sqlite3 -batch test.db < script.sql",
		hp_dir("sqlite3", "sqlite3", "script.sql",
		       "drop table if exists t;\n"
		       "create table t(a integer primary key, b text, c real);\n"
		       "with recursive n(x) as (select 1 union all select x + 1 from n where x < 20000)\n"
		       "  insert into t select x, printf('row %05d', x), x * 0.5 from n;\n"
		       "create index tb on t(b);\n"
		       "select count(*), sum(a), min(b), max(b), round(avg(c), 3) from t;\n"
		       "select b from t where a % 5000 = 0 order by b;\n"
		       "select length(group_concat(b)) from t where a < 1000;\n"));
}

Test(hostprogs, git_log, .timeout = 600)
{
	char *dir = hp_dir("git", "git", NULL, NULL);
	char *out = NULL;
	int rc = th_sh(&out,
			"cd '%s' && git init -q repo && cd repo && "
			"for i in 1 2 3 4 5 6 7 8; do echo \"line $i\" >> f.txt && git add f.txt && "
			"GIT_AUTHOR_DATE=\"2026-01-0$i 12:00:00 +0000\" "
			"GIT_COMMITTER_DATE=\"2026-01-0$i 12:00:00 +0000\" "
			"git -c user.name=test -c user.email=test@example.com commit -q -m \"commit $i\" "
			"|| exit 1; done",
			dir);
	cr_assert_eq(rc, 0, "making the repository failed:\n%s", out);
	free(out);
	/* no pager, no config of the user running the test */
	hp_done("git",
		"env GIT_CONFIG_NOSYSTEM=1 HOME=. git --no-pager -C repo log --stat "
		"--format='%H %an %ad %s'",
		dir);
}

Test(hostprogs, gcc_c, .timeout = 600)
{
	char *dir = hp_dir("gcc", "gcc", "unit.c",
			   "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
			   "struct node { struct node *next; char name[32]; };\n"
			   "struct node *push(struct node *h, const char *s) {\n"
			   "  struct node *n = malloc(sizeof(*n));\n  if (!n) return h;\n"
			   "  snprintf(n->name, sizeof(n->name), \"%s\", s);\n  n->next = h;\n"
			   "  return n;\n}\n"
			   "size_t count(const struct node *h) { size_t c = 0; for (; h; h = h->next) "
			   "c++; return c; }\n");
	/* gcc starts cc1 and as: each is profiled (a profile each) */
	hp_check(dir, "gcc", "gcc -O2 -c unit.c -o unit.o");
	char *out = NULL;
	int rc = th_sh(&out, "cd '%s' && nm unit.o", dir);
	cr_expect(rc == 0 && strstr(out, " T push") && strstr(out, " T count"),
		  "unit.o made under the profiler:\n%s", out);
	free(out);
	th_rmdir(dir);
}

Test(hostprogs, make_n, .timeout = 600)
{
	hp_done("make", "make -n CC=cc",
		hp_dir("make", "make", "Makefile",
		       "SRCS := $(foreach i,1 2 3 4 5 6 7 8 9,src$(i).c)\n"
		       "OBJS := $(SRCS:.c=.o)\n"
		       "all: prog\n"
		       "prog: $(OBJS)\n\t$(CC) -o $@ $^\n"
		       "%.o: %.c\n\t$(CC) -c $< -o $@\n"
		       "$(SRCS):\n\techo 'int f_$(basename $@)(void){return 1;}' > $@\n"));
}

/* ---- threads that start the way runtimes start them --------------------------------------- */

Test(hostprogs, getattr_first_and_clone_threads, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	const long threads = 4, k = 1000;
	char tbuf[16], kbuf[16];
	snprintf(tbuf, sizeof(tbuf), "%ld", threads);
	snprintf(kbuf, sizeof(kbuf), "%ld", k);
	for (int round = 0; round < 2; round++) {
		struct th_proc p;
		char *argv[] = { TH_PROGS "/host_threads", tbuf, kbuf, NULL };
		long t0 = th_now_ms();
		th_start(&p, &d, "1", 0, NULL, argv, NULL);
		char *out = th_read_rest(&p, 60000);
		int st = th_wait(&p, 60000);
		long ms = th_now_ms() - t0;
		cr_assert(st != -1, "host_threads hung (killed after 60 s):\n%s", out);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			  "status 0x%x (SIGALRM: a thread start hung):\n%s", st, out);
		long truth_g = th_site_truth(out, "getattr_site");
		long truth_c = th_site_truth(out, "clone_site");
		cr_assert_eq(truth_g, threads * k, "%s", out);
		cr_assert_eq(truth_c, k, "%s", out);
		char *text = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
		struct th_acct a;
		cr_assert(th_text_acct(text, &a));
		long got_g = th_text_count(text, "getattr_site", 64);
		long got_c = th_text_count(text, "clone_site", 80);
		cr_log_info("host_threads round %d: %ld ms; getattr_site %ld/%ld, clone_site "
			    "%ld/%ld; sampled=%llu delivered=%llu dropped=%llu corrupt=%llu",
			    round, ms, got_g, truth_g, got_c, truth_c, a.sampled, a.delivered,
			    a.dropped, a.corrupt);
		cr_expect_eq(got_g, truth_g);
		cr_expect_eq(got_c, truth_c, "the clone(2) thread's samples: %ld of %ld", got_c,
			     truth_c);
		cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
		cr_expect_eq(a.dropped, 0);
		cr_expect_eq(a.corrupt, 0);
		free(text);
		free(out);
	}
	heapd_end(&d);
}
