// SPDX-License-Identifier: MIT
/*
 * test_liveness.c: a profiled program never waits on a daemon that is stopped, dead or
 * restarting, end to end (real daemon, real programs under the plain shim):
 *   - start-up and exit with a SIGSTOPped daemon add little to a plain run (/bin/true at the
 *     default rate and at rate 1, a threaded program that allocates at rate 1); after SIGCONT
 *     a process started afterwards is attached, listed live and counted exactly;
 *   - fork, vfork + exec and posix_spawn from a multi-threaded parent
 *     (tests/progs/life_fork.c): `llgo-heap list` shows every child once, and with the daemon
 *     stopped the parent and its children still finish;
 *   - the daemon SIGKILLed and restarted on the same socket while a program allocates at rate
 *     1 (tests/progs/life_restart.c): the program runs on and exits 0, its allocations after
 *     it is back are in the new daemon's profile exactly, and the accounting line states what
 *     was lost (detached, earlier_daemon) and reconnects=1;
 *   - a daemon out of file descriptors (its limit lowered while it runs, as a storm of
 *     profiled processes would use them up) refuses connections without spinning, the
 *     programs run on, and it serves again once they are gone.
 * Timings are logged; their bounds are loose (behaviour, not speed: bench/ measures speed).
 */
#include <dirent.h>
#include <spawn.h>
#include <sys/resource.h>

#include "helpers.h"

#define PROG(name) TH_PROGS "/" name

extern char **environ;

/* Wall time in microseconds of argv run to completion with stdout and stderr on /dev/null,
 * under the shim (sock given: LD_PRELOAD, socket, rate) or plainly (sock NULL). Asserts exit
 * status 0 within limit_ms. */
static long lv_time_run(char *const argv[], const char *sock, const char *rate, long limit_ms)
{
	char e_pre[1024], e_sock[512], e_rate[64];
	char *envp[8];
	int n = 0;
	envp[n++] = "PATH=/usr/bin:/bin";
	if (sock) {
		snprintf(e_pre, sizeof(e_pre), "LD_PRELOAD=%s", LLGO_PLAIN_SHIM);
		snprintf(e_sock, sizeof(e_sock), "LLGO_HEAP_SOCKET=%s", sock);
		snprintf(e_rate, sizeof(e_rate), "LLGO_HEAP_RATE=%s", rate);
		envp[n++] = e_pre;
		envp[n++] = e_sock;
		envp[n++] = e_rate;
	}
	envp[n] = NULL;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid;
	int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	cr_assert_eq(rc, 0, "posix_spawn %s: %s", argv[0], strerror(rc));
	int st = 0;
	long deadline = th_now_ms() + limit_ms;
	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			break;
		if (th_now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			cr_assert_fail("%s (rate %s) did not finish in %ld ms", argv[0],
				       rate ? rate : "-", limit_ms);
		}
		struct timespec ts = { 0, 200 * 1000 };
		nanosleep(&ts, NULL);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s (rate %s): status 0x%x", argv[0],
		  rate ? rate : "-", st);
	return (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
}

static int lv_cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* Median and maximum of `runs` timed runs (microseconds). */
static void lv_time_runs(char *const argv[], const char *sock, const char *rate, int runs,
			 long *median, long *max)
{
	long t[32];
	cr_assert(runs <= 32);
	for (int i = 0; i < runs; i++)
		t[i] = lv_time_run(argv, sock, rate, 10000);
	qsort(t, (size_t)runs, sizeof(long), lv_cmp_long);
	*median = t[runs / 2];
	*max = t[runs - 1];
}

/* Wait until pid is in the daemon's list (live when want_live); false after timeout_ms. */
static bool lv_wait_listed(const char *sock, pid_t pid, bool want_live, int timeout_ms)
{
	long deadline = th_now_ms() + timeout_ms;
	do {
		struct llgo_list_entry e;
		if (heapd_list_pid(sock, pid, &e) && (!want_live || e.state == LLGO_PROC_LIVE))
			return true;
		th_sleep_ms(10);
	} while (th_now_ms() < deadline);
	return false;
}

static const char *lv_acct_line(const char *text, char *out, size_t cap)
{
	const char *line = strstr(text, "# llgo-heap: sampled=");
	const char *nl = line ? strchr(line, '\n') : NULL;
	snprintf(out, cap, "%.*s", line ? (int)(nl ? nl - line : 400) : 0, line ? line : "");
	return out;
}

/* ---- start-up with a stopped daemon ----------------------------------------------------------- */

Test(liveness, stopped_daemon_startup, .timeout = 300)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char *true_argv[] = { "/bin/true", NULL };
	char *threads_argv[] = { PROG("host_threads"), "2", "200", NULL };
	const int runs = 7;
	long plain_true, plain_true_max, plain_thr, plain_thr_max;
	lv_time_runs(true_argv, NULL, NULL, runs, &plain_true, &plain_true_max);
	lv_time_runs(threads_argv, NULL, NULL, runs, &plain_thr, &plain_thr_max);
	long live_true, live_true_max;
	lv_time_runs(true_argv, d.sock, "524288", runs, &live_true, &live_true_max);

	heapd_pause(&d);
	struct {
		char *const *argv;
		const char *rate;
		long plain;
	} cases[] = {
		{ true_argv, "524288", plain_true },
		{ true_argv, "1", plain_true },
		{ threads_argv, "1", plain_thr },
	};
	long added_max = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long med, max;
		lv_time_runs(cases[i].argv, d.sock, cases[i].rate, runs, &med, &max);
		long added = med - cases[i].plain;
		cr_log_info("stopped daemon: %s at rate %s: median %ld us, max %ld us over %d runs; "
			    "plain median %ld us: +%ld us", cases[i].argv[0], cases[i].rate, med,
			    max, runs, cases[i].plain, added);
		/* the goal is 20 ms (docs/performance.md measures it); this is a behaviour
		 * bound: no start-up or exit wait of seconds */
		cr_expect_lt(added, 200 * 1000, "%s at rate %s: +%ld us with a stopped daemon",
			     cases[i].argv[0], cases[i].rate, added);
		cr_expect_lt(max, plain_thr_max + 1000 * 1000, "%s at rate %s: a run took %ld us",
			     cases[i].argv[0], cases[i].rate, max);
		if (added > added_max)
			added_max = added;
	}
	cr_log_info("healthy daemon: /bin/true median %ld us (plain %ld us)", live_true,
		    plain_true);

	/* Started while the daemon is stopped, still running when it continues. */
	struct th_proc early;
	char *idle_argv[] = { PROG("life_idle"), "100", NULL };
	th_start(&early, &d, "1", 0, NULL, idle_argv, NULL);
	char line[256];
	cr_assert(th_read_line(&early, line, sizeof(line), 10000) && strcmp(line, "ready") == 0,
		  "a process started while the daemon is stopped did not reach main quickly");

	heapd_resume(&d);
	struct th_proc p;
	th_start(&p, &d, "1", 0, NULL, idle_argv, NULL);
	cr_assert(th_read_line(&p, line, sizeof(line), 10000) && strcmp(line, "ready") == 0);
	cr_expect(lv_wait_listed(d.sock, p.pid, true, 5000),
		  "pid %d (started after SIGCONT) not listed live", (int)p.pid);
	cr_expect(lv_wait_listed(d.sock, early.pid, true, 5000),
		  "pid %d (started while the daemon was stopped) not listed live", (int)early.pid);
	struct th_proc *both[] = { &early, &p };
	for (int i = 0; i < 2; i++) {
		fputs("more\n", both[i]->in);
		cr_assert(th_read_line(both[i], line, sizeof(line), 10000));
		pid_t pid = both[i]->pid;
		int st = th_wait(both[i], 10000);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
		char *text = heapd_snapshot(d.sock, pid, LLGO_FORMAT_TEXT, NULL);
		struct th_acct a;
		cr_assert(th_text_acct(text, &a));
		long idle = th_text_count(text, "idle_site", 333);
		long more = th_text_count(text, "idle_more_site", 555);
		char acct[512];
		cr_log_info("%s: idle_site %ld/100, idle_more_site %ld/100; %s",
			    i ? "started after SIGCONT" : "started while stopped", idle, more,
			    lv_acct_line(text, acct, sizeof(acct)));
		cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
		cr_expect_eq(a.corrupt, 0);
		cr_expect_eq(idle, 100, "pid %d: idle_site %ld of 100", (int)pid, idle);
		cr_expect_eq(more, 100, "pid %d: idle_more_site %ld of 100", (int)pid, more);
		free(text);
	}
	/* the processes that came and went while it was stopped: accounted too */
	struct llgo_list_entry *rows;
	size_t n = heapd_list_all(d.sock, &rows);
	for (size_t i = 0; i < n; i++)
		cr_expect_eq(rows[i].sampled, rows[i].delivered + rows[i].dropped + rows[i].corrupt,
			     "pid %u: sampled=%llu delivered=%llu dropped=%llu corrupt=%llu",
			     rows[i].pid, (unsigned long long)rows[i].sampled,
			     (unsigned long long)rows[i].delivered,
			     (unsigned long long)rows[i].dropped,
			     (unsigned long long)rows[i].corrupt);
	cr_log_info("%zu processes listed; largest added start+exit time with the daemon "
		    "stopped: %ld us", n, added_max);
	free(rows);
	heapd_end(&d);
}

/* ---- fork, vfork, posix_spawn: one session per child -------------------------------------- */

/* Run life_fork THREADS ROUNDS K at rate 1; returns its output; *ms its wall time. */
static char *lv_life_fork(const struct heapd *d, const char *rounds, long *ms, pid_t *pid)
{
	struct th_proc p;
	char *argv[] = { PROG("life_fork"), "4", (char *)rounds, "50", NULL };
	long t0 = th_now_ms();
	th_start(&p, d, "1", 1024, NULL, argv, NULL);
	char *out = th_read_rest(&p, 90000);
	int st = th_wait(&p, 90000);
	*ms = th_now_ms() - t0;
	*pid = p.pid;
	cr_assert(st != -1, "life_fork hung (killed after 90 s):\n%s", out);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "life_fork: status 0x%x (a deadlock ends in SIGALRM):\n%s", st, out);
	return out;
}

/* How many rows of `llgo-heap list` (text) are for pid. */
static int lv_rows_of(const char *list, int pid)
{
	int seen = 0;
	for (const char *r = list; r && *r; r = strchr(r, '\n'), r = r ? r + 1 : NULL)
		if (atoi(r) == pid)
			seen++;
	return seen;
}

/* Every child of out ("fork PID", "exec PID", "spawn PID") appears exactly once in
 * `llgo-heap list`, and so does the parent (waits up to 10 s for the daemon to take HELLOs
 * queued while it was stopped). Returns the number of children. */
static int lv_check_list_once(const char *sock, const char *out, pid_t parent)
{
	int pids[1024], nchild = 0;
	char kinds[1024][16];
	for (const char *l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		int pid;
		char kind[16];
		if (sscanf(l, "%15s %d", kind, &pid) != 2 ||
		    (strcmp(kind, "fork") && strcmp(kind, "exec") && strcmp(kind, "spawn")))
			continue;
		cr_assert_lt(nchild, 1024);
		snprintf(kinds[nchild], sizeof(kinds[nchild]), "%s", kind);
		pids[nchild++] = pid;
	}
	char *list = NULL;
	long deadline = th_now_ms() + 10000;
	for (;;) {
		int rc = th_sh(&list, "'%s/llgo-heap' list --socket '%s'", TH_BIN, sock);
		cr_assert_eq(rc, 0, "llgo-heap list failed:\n%s", list);
		bool all = lv_rows_of(list, parent) > 0;
		for (int i = 0; all && i < nchild; i++)
			all = lv_rows_of(list, pids[i]) > 0;
		if (all || th_now_ms() > deadline)
			break;
		free(list);
		th_sleep_ms(50);
	}
	for (int i = 0; i < nchild; i++) {
		int seen = lv_rows_of(list, pids[i]);
		cr_expect_eq(seen, 1, "%s child %d is listed %d times:\n%s", kinds[i], pids[i],
			     seen, list);
	}
	int seen = lv_rows_of(list, parent);
	cr_expect_eq(seen, 1, "the parent %d is listed %d times", (int)parent, seen);
	free(list);
	return nchild;
}

Test(liveness, fork_vfork_spawn_one_session_each, .timeout = 300)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	long ms;
	pid_t parent;
	char *out = lv_life_fork(&d, "3", &ms, &parent);
	int n = lv_check_list_once(d.sock, out, parent);
	cr_expect_eq(n, 4 * 3 * 3);
	cr_log_info("life_fork 4 threads x 3 rounds, healthy daemon: %ld ms, %d children, each "
		    "listed once", ms, n);
	free(out);

	/* The daemon stopped: fork never waits for it, the children attach lazily (connect and
	 * send only) and wait at most briefly at exit. */
	heapd_pause(&d);
	long stopped_ms;
	out = lv_life_fork(&d, "3", &stopped_ms, &parent);
	heapd_resume(&d);
	cr_log_info("life_fork with the daemon stopped: %ld ms (healthy: %ld ms)", stopped_ms, ms);
	cr_expect_lt(stopped_ms, ms + 20000, "with a stopped daemon life_fork took %ld ms",
		     stopped_ms);
	/* after SIGCONT the daemon takes the queued HELLOs: still one session per child */
	n = lv_check_list_once(d.sock, out, parent);
	cr_expect_eq(n, 4 * 3 * 3);
	free(out);
	heapd_end(&d);
}

/* ---- the daemon killed and restarted while the program allocates ------------------------------ */

Test(liveness, daemon_killed_and_restarted, .timeout = 120)
{
	char *dir = th_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	const long after_n = 5000;
	char nbuf[16];
	snprintf(nbuf, sizeof(nbuf), "%ld", after_n);
	struct th_proc p;
	char *argv[] = { PROG("life_restart"), "50", nbuf, NULL };
	th_start(&p, &d, "1", 1024, NULL, argv, NULL);
	cr_assert_str_eq(th_ready(&p, 10000), "ready");
	cr_assert(lv_wait_listed(d.sock, p.pid, true, 5000));
	th_sleep_ms(300); /* records delivered to the first daemon */
	struct llgo_list_entry e1;
	cr_assert(heapd_list_pid(d.sock, p.pid, &e1));

	long t_kill = th_now_ms();
	cr_assert_eq(kill(d.pid, SIGKILL), 0);
	waitpid(d.pid, NULL, 0);
	d.pid = 0;
	th_sleep_ms(300); /* the program allocates with no daemon */
	cr_assert_eq(kill(p.pid, 0), 0, "the program died with its daemon");

	char oldlog[512];
	snprintf(oldlog, sizeof(oldlog), "%s.first", d.log);
	rename(d.log, oldlog);
	struct heapd d2;
	heapd_start(&d2, dir, NULL); /* the same socket path */
	long t_up = th_now_ms();
	cr_assert(lv_wait_listed(d2.sock, p.pid, true, 10000),
		  "the restarted daemon does not list pid %d", (int)p.pid);
	long t_back = th_now_ms();

	/* Only now the second site: every one of its samples is for the new daemon. */
	fputs("go\n", p.in);
	char *out = th_read_rest(&p, 200);
	while (!strstr(out, "site before_site")) {
		char *more = th_read_rest(&p, 200);
		size_t a = strlen(out), b = strlen(more);
		out = realloc(out, a + b + 1);
		memcpy(out + a, more, b + 1);
		free(more);
		cr_assert(th_now_ms() - t_back < 30000, "no result from life_restart:\n%s", out);
	}
	int st = th_wait(&p, 30000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x:\n%s", st, out);
	long after_truth = th_site_truth(out, "after_site");
	long before_truth = th_site_truth(out, "before_site");
	cr_assert_eq(after_truth, after_n, "%s", out);

	char *text = heapd_snapshot(d2.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	struct th_acct a;
	cr_assert(th_text_acct(text, &a));
	long got_after = th_text_count(text, "after_site", 144);
	long got_before = th_text_count(text, "before_site", 72);
	unsigned long long detached = th_acct_field(text, "detached");
	unsigned long long earlier = th_acct_field(text, "earlier_daemon");
	unsigned long long reconnects = th_acct_field(text, "reconnects");
	char acct[512];
	cr_log_info("restart: the first daemon had delivered %llu; killed, restarted after "
		    "%ld ms, pid back in the list %ld ms later; after_site %ld/%ld, before_site "
		    "%ld of %ld made; %s",
		    (unsigned long long)e1.delivered, t_up - t_kill, t_back - t_up, got_after,
		    after_truth, got_before, before_truth, lv_acct_line(text, acct, sizeof(acct)));
	cr_expect_eq(got_after, after_truth, "after the restart: %ld of %ld", got_after,
		     after_truth);
	cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
	cr_expect_eq(a.corrupt, 0);
	cr_expect_eq(th_text_total(text), (long)a.delivered);
	/* every sample the process took is counted (a few more: stdio's buffers) */
	cr_expect_geq(a.sampled, (unsigned long long)(before_truth + after_truth));
	cr_expect_leq(a.sampled, (unsigned long long)(before_truth + after_truth + 16));
	cr_expect_eq(reconnects, 1, "reconnects=%llu", reconnects);
	cr_expect_gt(detached, 0, "nothing counted while the program had no daemon");
	cr_expect_geq(earlier, e1.delivered, "earlier_daemon=%llu, the first daemon had %llu",
		      earlier, (unsigned long long)e1.delivered);
	cr_expect_leq(got_before + (long)detached + (long)earlier, before_truth + 16);
	cr_expect_geq(got_before + (long)a.dropped, before_truth);
	free(text);
	free(out);
	cr_expect_eq(heapd_stop(&d2), 0);
	th_rmdir(dir);
}

/* ---- a daemon out of file descriptors -------------------------------------------------------- */

static long lv_count_fds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	long n = 0;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

Test(liveness, out_of_descriptors_refuses_without_spinning, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	/* each profiled process holds three of the daemon's descriptors: 60 need 180 */
	struct rlimit rl = { 96, 96 };
	cr_assert_eq(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL), 0);
	enum { N = 60 };
	struct th_proc p[N];
	char *argv[] = { "/bin/sleep", "3", NULL };
	for (int i = 0; i < N; i++)
		th_start(&p[i], &d, "524288", 0, NULL, argv, NULL);
	th_sleep_ms(1000);
	long t0 = th_cpu_ticks(d.pid);
	th_sleep_ms(1000);
	long busy = th_cpu_ticks(d.pid) - t0, hz = sysconf(_SC_CLK_TCK);
	cr_log_info("daemon CPU over 1 s with %d processes and 96 descriptors: %ld ticks of %ld",
		    N, busy, hz);
	cr_expect_lt(busy, hz / 2, "the daemon spun: %ld ticks in 1 s", busy);
	for (int i = 0; i < N; i++)
		cr_expect_eq(th_wait(&p[i], 30000), 0, "sleep %d did not end well", i);
	cr_assert(heapd_alive(&d), "llgo-heapd died");
	/* the exited processes' descriptors are given back (an exited session keeps none) */
	long fds = -1;
	for (int i = 0; i < 200; i++) {
		fds = lv_count_fds(d.pid);
		if (fds >= 0 && fds < 64)
			break;
		th_sleep_ms(50);
	}
	cr_expect_lt(fds, 64, "llgo-heapd still holds %ld descriptors", fds);
	/* serving again: a program started now is attached and listed */
	char *argv2[] = { "/bin/sleep", "2", NULL };
	struct th_proc q;
	th_start(&q, &d, "524288", 0, NULL, argv2, NULL);
	struct llgo_list_entry e;
	bool listed = false;
	for (int i = 0; i < 100 && !listed; i++) {
		listed = heapd_list_pid(d.sock, q.pid, &e);
		if (!listed)
			th_sleep_ms(50);
	}
	cr_expect(listed, "a process started after the storm was not listed");
	cr_expect_eq(th_wait(&q, 30000), 0);
	char *log = heapd_log(&d);
	cr_expect(strstr(log, "out of file descriptors"), "log:\n%s", log);
	free(log);
	cr_expect_eq(heapd_stop(&d), 0);
	heapd_cleanup(&d);
}
