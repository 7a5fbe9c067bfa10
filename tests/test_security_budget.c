// SPDX-License-Identifier: MIT
/*
 * test_security_budget.c: llgo-heapd on a shared host, where an unprivileged local user
 * (uid nobody, from a forked child that drops root) tries to take more than its share:
 * profiled processes, rings (per uid and of the global budget), bucket memory, exited
 * sessions kept, unread answers, the client workers and the exit workers (an exit flood, a
 * table that asks for a long scan, a BYE flood). Each test checks that root's processes in
 * the same daemon are still served. Against the real daemon binary; LLGO_TEST_HEAPD=path
 * runs them against another build.
 */
#include "../agent/internal.h"
#include "helpers.h"

#include <sys/resource.h>

#include "../shared/live.h"

/* Fork n processes as nobody that each attach (fake shim, control page) and stay alive until
 * the pipe closes; their pids in pids. */
static void nobody_procs(struct heapd *d, int n, pid_t *pids, int *release)
{
	int p[2];
	th_pipe(p);
	for (int i = 0; i < n; i++) {
		pids[i] = th_fork();
		if (pids[i] == 0) {
			close(p[1]);
			th_become_nobody();
			int s = heapd_connect(d->sock);
			if (s < 0 || th_hello_noack(s, NULL, NULL) != 0)
				_exit(1);
			th_hold(p[0]);
			_exit(0);
		}
	}
	close(p[0]);
	*release = p[1];
}

static void reap(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
}

/* As root (the test is skipped otherwise): a daemon with the budget options opts. */
static void bd_start(struct heapd *d, const char *const *opts)
{
	th_need_root();
	heapd_start(d, NULL, opts);
}

/* A process of root's that attaches (no ACK asked for) and exits at once: its pid, reaped. */
static pid_t root_attached_and_gone(const struct heapd *d)
{
	pid_t p = th_fork();
	if (p == 0) {
		int s = heapd_connect(d->sock);
		_exit(s < 0 || th_hello_noack(s, NULL, NULL) != 0);
	}
	waitpid(p, NULL, 0);
	return p;
}

/* nobody may have 3 profiled processes; the 4th to 6th are refused, root's is not. */
Test(budget, processes_per_uid, .timeout = 60)
{
	struct heapd d;
	bd_start(&d, (const char *[]){ "--max-processes-per-uid", "3", NULL });
	pid_t pids[6];
	int rel;
	nobody_procs(&d, 6, pids, &rel);
	th_sleep_ms(500);
	struct th_shim sh;
	cr_assert_eq(th_shim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0, "root refused");
	uint32_t flags = 0;
	int live = th_count_state(d.sock, th_nobody_uid(), LLGO_PROC_LIVE, &flags);
	cr_expect_eq(live, 3, "nobody has %d live sessions", live);
	cr_expect(flags & LLGO_BUDGET_SESSIONS, "not flagged in list: %#x", flags);
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(d.sock, getpid(), &e) && e.state == LLGO_PROC_LIVE && !e.budget_flags);
	char *log = heapd_log(&d);
	cr_expect_eq(th_count(log, "sessions budget reached"), 1, "logged once:\n%s", log);
	free(log);
	close(rel);
	reap(pids, 6);
	th_shim_close(&sh);
	heapd_finish(&d);
}

/* nobody's process adds 6 rings with a budget of 2: 2 are read, its connection stays, and
 * root's process gets all of its rings. */
Test(budget, rings_per_uid, .timeout = 60)
{
	struct heapd d;
	bd_start(&d, (const char *[]){ "--max-rings-per-uid", "2", NULL });
	int go[2];
	th_pipe(go);
	pid_t child = th_ring_taker(&d, th_nobody_uid(), 6, go);
	close(go[0]);
	struct th_shim sh;
	cr_assert_eq(th_shim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	cr_assert_eq(th_shim_add_rings(&sh, 6), 0);
	th_sleep_ms(400);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, child, &e), "nobody's session is gone");
	cr_expect_eq(e.state, LLGO_PROC_LIVE, "nobody's connection was dropped");
	cr_expect_eq(e.rings, 2, "nobody's rings: %u", e.rings);
	cr_expect(e.budget_flags & LLGO_BUDGET_RINGS, "flags %#x", e.budget_flags);
	cr_assert(heapd_list_pid(d.sock, getpid(), &e));
	cr_expect_eq(e.rings, 6, "root's rings: %u", e.rings);
	cr_expect_eq(e.budget_flags, 0);
	close(go[1]);
	waitpid(child, NULL, 0);
	th_shim_close(&sh);
	heapd_finish(&d);
}

/* Five uids take the rings of a global budget in turn, each as many as its per-uid budget
 * allows: the later ones still get some (none holds more than it leaves to the others), and
 * root's process gets at least the eighth kept for root. (Per-uid budgets alone: 6, 6 and 4
 * rings took all 16; the fourth and fifth uids and root got none.) */
Test(budget, global_rings_keep_shares_for_root_and_each_uid, .timeout = 60)
{
	struct heapd d;
	bd_start(&d, (const char *[]){ "--max-rings", "16", "--max-rings-per-uid", "6", NULL });
	int go[2];
	th_pipe(go);
	const uid_t uids[] = { th_nobody_uid(), 4242, 4243, 4244, 4245 };
	pid_t kids[5];
	uint32_t got[5], sum = 0;
	for (int i = 0; i < 5; i++) {
		kids[i] = th_ring_taker(&d, uids[i], 6, go);
		got[i] = th_rings_taken(&d, kids[i], 6);
		sum += got[i];
	}
	close(go[0]);
	struct th_shim sh;
	cr_assert_eq(th_shim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	cr_assert_eq(th_shim_add_rings(&sh, 6), 0);
	uint32_t root = th_rings_taken(&d, getpid(), 6);
	cr_log_info("rings of 16: uids %u %u %u %u %u, root %u", got[0], got[1], got[2], got[3],
		    got[4], root);
	for (int i = 0; i < 4; i++)
		cr_expect_geq(got[i], 1, "uid %u got no ring (%u %u %u %u %u)", (unsigned)uids[i],
			      got[0], got[1], got[2], got[3], got[4]);
	cr_expect_leq(sum, 14, "the users took %u of 16 rings", sum);
	cr_expect_geq(root, 2, "root got %u rings after five uids took %u", root, sum);
	cr_expect_leq(sum + root, 16);
	close(go[1]);
	reap(kids, 5);
	th_shim_close(&sh);
	heapd_finish(&d);
}

/* A process of nobody's (a fake shim with a 64 KiB ring) that writes n records of n distinct
 * stacks, runs then(d) when given, and lives until *release is closed. */
static pid_t nobody_distinct(const struct heapd *d, unsigned n, void (*then)(const struct heapd *d),
			     int *release)
{
	int go[2];
	th_pipe(go);
	pid_t child = th_fork();
	if (child == 0) {
		close(go[1]);
		th_become_nobody();
		struct th_shim sh;
		struct th_ring r;
		if (th_shim_open(&sh, &r, d->sock, 1u << 16, 512) != 0)
			_exit(1);
		th_ring_push_distinct(&r, n);
		if (then)
			then(d);
		th_hold(go[0]);
		_exit(0);
	}
	close(go[0]);
	*release = go[1];
	return child;
}

/* Let nobody_distinct's child go, and reap it. */
static void nobody_distinct_end(pid_t child, int release)
{
	close(release);
	waitpid(child, NULL, 0);
}

/* nobody's process fills its bucket memory budget with distinct stacks: its later records
 * are counted, not aggregated; root's process in the same daemon loses nothing. */
Test(budget, bucket_memory_per_uid, .timeout = 60)
{
	struct heapd d;
	bd_start(&d, (const char *[]){ "--max-bucket-memory-per-uid", "256K", NULL });
	int release;
	pid_t child = nobody_distinct(&d, 20000, NULL, &release);
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	for (int i = 0; i < 1000 && !(heapd_list_pid(d.sock, child, &e) && e.delivered >= 20000); i++)
		th_sleep_ms(10);
	cr_expect_eq(e.delivered, 20000);
	cr_expect(e.budget_flags & LLGO_BUDGET_BUCKET_BYTES, "flags %#x", e.budget_flags);
	cr_expect_gt(e.budget_dropped, 0, "no record degraded");
	/* root: every record aggregated */
	struct th_shim sh;
	struct th_ring r;
	cr_assert_eq(th_shim_open(&sh, &r, d.sock, 1u << 16, 512), 0);
	th_ring_push_distinct(&r, 2000);
	struct llgo_list_entry me = th_wait_delivered(d.sock, getpid(), 2000);
	cr_expect_eq(me.budget_flags, 0);
	cr_expect_eq(me.budget_dropped, 0);
	cr_expect_eq(me.buckets, 2000, "root's buckets: %llu", (unsigned long long)me.buckets);
	nobody_distinct_end(child, release);
	th_shim_close(&sh);
	heapd_finish(&d);
}

/* nobody's short-lived processes do not push root's exited sessions out; kept per uid. */
Test(budget, exited_sessions_per_uid, .timeout = 60)
{
	struct heapd d;
	bd_start(&d, (const char *[]){ "--keep-exited-per-uid", "2", "--keep-exited", "4",
						NULL });
	pid_t mine = root_attached_and_gone(&d);
	for (int round = 0; round < 3; round++) {
		pid_t pids[3];
		int rel;
		nobody_procs(&d, 3, pids, &rel);
		th_sleep_ms(200);
		close(rel);
		reap(pids, 3);
	}
	th_sleep_ms(400);
	int theirs = th_count_state(d.sock, th_nobody_uid(), LLGO_PROC_EXITED, NULL);
	cr_expect_eq(theirs, 2, "nobody's exited sessions kept: %d", theirs);
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(d.sock, mine, &e) && e.state == LLGO_PROC_EXITED,
		  "root's exited session was pushed out");
	heapd_finish(&d);
}

/* In nobody's process: ask for big profiles of itself on 12 connections, never read. */
static void unread_snapshots(const struct heapd *d)
{
	struct llgo_msg_snapshot m;
	client_snapshot_req(&m, getpid(), LLGO_FORMAT_TEXT, 0, 0);
	for (int i = 0; i < 12; i++) {
		int s = heapd_connect(d->sock);
		if (s >= 0)
			client_send(s, &m, sizeof(m));
	}
}

/* nobody asks for big profiles of its process on many connections and never reads them:
 * its unread answers stop at its budget, root is still answered. */
Test(budget, unread_answers_per_uid, .timeout = 90)
{
	struct heapd d;
	bd_start(&d, (const char *[]){ "--max-unread-per-uid", "1M", NULL });
	int release;
	pid_t child = nobody_distinct(&d, 6000, unread_snapshots, &release);
	char *log = th_wait_log(&d, "unread answers budget reached", 20000);
	cr_expect(strstr(log, "unread answers budget reached") != NULL, "%s", log);
	free(log);
	struct th_shim sh;
	cr_assert_eq(th_shim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d.sock, getpid(), LLGO_FORMAT_TEXT, &a), 0);
	cr_expect_eq(a.status, 0, "root's snapshot: %s", a.message);
	buf_free(&a.data);
	nobody_distinct_end(child, release);
	th_shim_close(&sh);
	heapd_finish(&d);
}

/* Exited sessions are kept for --keep-exited-age seconds at most, and the evictions are
 * counted (in the daemon's exit line). */
Test(budget, exited_sessions_by_age, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, (const char *[]){ "--keep-exited-age", "1", NULL });
	pid_t p = root_attached_and_gone(&d);
	cr_assert(th_wait_state(d.sock, p, LLGO_PROC_EXITED, 1000),
		  "the exited session was never listed");
	th_sleep_ms(2200);
	struct llgo_list_entry e;
	cr_expect(!heapd_list_pid(d.sock, p, &e), "an exited session older than 1 s is still kept");
	heapd_stop_clean(&d);
	char *log = heapd_log(&d);
	cr_expect(strstr(log, "1 exited processes evicted") != NULL, "%s", log);
	free(log);
	heapd_cleanup(&d);
}

/*
 * Fairness of the client workers: one user's slow requests never hold them all. nobody asks
 * for eight snapshots of a 40,000-bucket profile of its own (each takes the time of a huge
 * text answer, more than the four workers can build at once); root's snapshot of a small
 * process, asked meanwhile, is answered in a fraction of that time, by a worker nobody may
 * not take (at most half of them per uid other than root, workq.c).
 */
Test(budget, one_users_slow_snapshots_leave_workers_to_others, .timeout = 120)
{
	struct heapd d;
	bd_start(&d, NULL);
	pid_t big = th_run_profiled(&d, th_nobody_uid(), TH_PROGS "/stress_stacks", "40000");
	pid_t small = th_run_profiled(&d, 0, TH_PROGS "/stress_stacks", "10");
	long t0 = th_now_ms();
	free(heapd_snapshot(d.sock, big, LLGO_FORMAT_TEXT, NULL));
	long huge_ms = th_now_ms() - t0;
	t0 = th_now_ms();
	free(heapd_snapshot(d.sock, small, LLGO_FORMAT_TEXT, NULL));
	long quiet_ms = th_now_ms() - t0;

	int go[2], ready[2];
	th_pipe(go);
	th_pipe(ready);
	pid_t child = th_fork();
	if (child == 0) {
		close(go[1]);
		close(ready[0]);
		th_become_nobody();
		struct llgo_msg_snapshot m;
		client_snapshot_req(&m, big, LLGO_FORMAT_TEXT, 0, 0);
		int socks[8];
		for (int i = 0; i < 8; i++) {
			socks[i] = heapd_connect(d.sock);
			if (socks[i] < 0 || client_send(socks[i], &m, sizeof(m)) != 0)
				_exit(1);
		}
		if (write(ready[1], "r", 1) != 1)
			_exit(2);
		char c;
		(void)!read(go[0], &c, 1); /* the answers stay unread until root has its own */
		_exit(0);
	}
	close(go[0]);
	close(ready[1]);
	char c;
	cr_assert_eq(read(ready[0], &c, 1), 1, "nobody's requests were not sent");
	th_sleep_ms(20); /* the workers have taken nobody's requests */
	t0 = th_now_ms();
	free(heapd_snapshot(d.sock, small, LLGO_FORMAT_TEXT, NULL));
	long busy_ms = th_now_ms() - t0;
	cr_assert_eq(write(go[1], "g", 1), 1);
	int st;
	waitpid(child, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's client: status 0x%x", st);
	cr_log_info("fairness: a huge snapshot takes %ld ms; root's small snapshot %ld ms quiet, "
		    "%ld ms while nobody's 8 huge ones are built", huge_ms, quiet_ms, busy_ms);
	/* waiting for one of nobody's jobs would take about huge_ms */
	cr_expect_lt(busy_ms, huge_ms / 2 + quiet_ms, "root waited %ld ms (a huge snapshot: "
		     "%ld ms)", busy_ms, huge_ms);
	int stop = heapd_stop(&d);
	cr_expect_eq(stop, 0, "llgo-heapd stop status %d:\n%s", stop, heapd_log(&d));
	heapd_cleanup(&d);
}

/* A process of root's (fake shim, memfd session) that lives until *release is closed;
 * processes forked after it must close *release. */
static pid_t root_memfd_proc(const char *sock, int *release)
{
	int p[2];
	th_pipe(p);
	pid_t pid = th_fork();
	if (pid == 0) {
		close(p[1]);
		int st, memfd = th_proc_memfd();
		int s = memfd < 0 ? -1 : th_memfd_hello(sock, memfd, &st);
		if (s < 0 || st != 0)
			_exit(2);
		th_hold(p[0]);
		_exit(0);
	}
	close(p[0]);
	*release = p[1];
	return pid;
}

/* End root_memfd_proc's pid: the ms until LIST shows it exited (th_ms_until_exited). */
static long root_memfd_proc_end(const char *sock, pid_t pid, int release, long wait_ms)
{
	close(release);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "root's process: status 0x%x", st);
	return th_ms_until_exited(sock, pid, wait_ms);
}

/* The exit-worker tests: as root, a daemon; a process of root's with a memfd session (mine,
 * ended by root_memfd_proc_end with release); and the attacker, a forked child, nobody from
 * then on, that closes the pipe ends it must not hold and runs body(d, go's read end, ready's
 * write end), whose result is its exit status. The test reads ready[0] and closes go[1]. */
struct flood {
	struct heapd d;
	int go[2], ready[2], release;
	pid_t mine, atk;
};

static void flood_start(struct flood *f, int (*body)(const struct heapd *d, int go, int ready))
{
	bd_start(&f->d, NULL);
	f->mine = root_memfd_proc(f->d.sock, &f->release);
	th_pipe(f->go);
	th_pipe(f->ready);
	f->atk = th_fork();
	if (f->atk == 0) {
		close(f->go[1]);
		close(f->ready[0]);
		close(f->release);
		th_become_nobody();
		_exit(body(&f->d, f->go[0], f->ready[1]));
	}
	close(f->go[0]);
	close(f->ready[1]);
}

/* Wait for the attacker to exit with status 0. */
static void exit_attacker_end(pid_t atk)
{
	int st;
	cr_assert_eq(waitpid(atk, &st, 0), atk);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's process: status 0x%x", st);
}

enum { FLOOD_N = 100 };

/* FLOOD_N processes, each attached with a process memfd of its own and presenting one live
 * table of 512 MiB, every slot full; each says so on ready and lives until go closes. */
static int exit_flood(const struct heapd *d, int go, int ready)
{
	int live = th_live_table(LLGO_LIVE_ENTRIES);
	if (live < 0)
		return 1;
	pid_t kids[FLOOD_N];
	for (int i = 0; i < FLOOD_N; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			int st, memfd = th_proc_memfd();
			int s = memfd < 0 ? -1 : th_memfd_hello(d->sock, memfd, &st);
			if (s < 0 || st != 0 || th_add_live(s, live) != 0)
				_exit(2);
			if (write(ready, "r", 1) != 1)
				_exit(3);
			th_hold(go);
			_exit(0);
		}
	}
	int bad = 0;
	for (int i = 0; i < FLOOD_N; i++) {
		int st;
		bad += kids[i] < 0 || waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) ||
		       WEXITSTATUS(st) != 0;
	}
	return bad ? 4 : 0;
}

/*
 * The reported attack on the exit workers: nobody's 100 processes each attach with a
 * process memfd of their own and all present one live-object table of 512 MiB, every slot
 * full, then exit together. Each final scan of that table took 0.5 to 0.8 s on one of the
 * two exit workers, so root's process, exiting just after, was listed as exited half a
 * minute or more later (the review saw 128 s with 400). Now a table backs one session only
 * (the others' ADD_LIVE is refused), a scan reads at most what its own samples justify, and
 * nobody's exits run on at most half of the exit workers: root's is listed in well under
 * 10 s (0.3 to 0.6 s on an idle machine).
 */
Test(budget, one_users_exits_leave_exit_workers_to_others, .timeout = 150)
{
	struct flood f;
	flood_start(&f, exit_flood);
	int n = 0;
	char c;
	while (n < FLOOD_N && read(f.ready[0], &c, 1) == 1)
		n++;
	cr_assert_eq(n, FLOOD_N, "only %d of nobody's processes attached", n);
	th_sleep_ms(500); /* their ADD_LIVE handled */
	int held = th_count_state(f.d.sock, th_nobody_uid(), LLGO_PROC_LIVE, NULL);
	close(f.go[1]); /* nobody's processes exit */
	th_sleep_ms(300);
	long delay = root_memfd_proc_end(f.d.sock, f.mine, f.release, 30000); /* then root's */
	exit_attacker_end(f.atk);
	cr_log_info("exit flood: nobody's live sessions with the table %d of %d; root's process "
		    "listed as exited %ld ms after it ended", held, FLOOD_N, delay);
	cr_expect_lt(delay, 10000, "root's exited process was listed %ld ms after its exit "
		     "(nobody's %d sessions holding the table)", delay, held);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(f.d.sock, f.mine, LLGO_FORMAT_TEXT, &a), 0);
	cr_expect_eq(a.status, 0, "root's final profile: %s", a.message);
	client_answer_free(&a);
	heapd_cleanup(&f.d);
}

/* The number after `key` in text (0 when absent). */
static unsigned long long acct_field(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/*
 * The exit scan of nobody's process, which sent no sample, over its table of 4 M full
 * slots (top at the last level): its final profile says what the scan read (every entry it
 * met is pending: no record of it was drained) and what it left unread. Before, every
 * slot; now at most the base a process without samples gets (128 Ki slots).
 */
Test(budget, exit_scan_reads_what_the_samples_justify, .timeout = 60)
{
	struct heapd d;
	bd_start(&d, NULL);
	pid_t atk = th_fork();
	if (atk == 0) {
		th_become_nobody();
		int st, live = th_live_table(4ull << 20), memfd = th_proc_memfd();
		int s = live < 0 || memfd < 0 ? -1 : th_memfd_hello(d.sock, memfd, &st);
		if (s < 0 || st != 0 || th_add_live(s, live) != 0)
			_exit(2);
		th_sleep_ms(300); /* ADD_LIVE handled */
		_exit(0);
	}
	int st;
	cr_assert_eq(waitpid(atk, &st, 0), atk);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's process: status 0x%x", st);
	long delay = th_ms_until_exited(d.sock, atk, 20000);
	char *text = heapd_snapshot(d.sock, atk, LLGO_FORMAT_TEXT, NULL);
	const char *line = strstr(text, "llgo-heap: sampled=");
	cr_assert(line, "no accounting line:\n%.500s", text);
	cr_log_info("exit scan: listed %ld ms after the exit; %.*s", delay,
		    (int)strcspn(line, "\n"), line);
	cr_expect_leq(acct_field(line, " pending="), 128u << 10, "the exit scan read %llu entries",
		      acct_field(line, " pending="));
	cr_expect_gt(acct_field(line, " unscanned="), (4ull << 20) - (128u << 10),
		     "the slots left unread not said: %.*s", (int)strcspn(line, "\n"), line);
	free(text);
	heapd_finish(&d);
}

enum { BYE_CONNS = 300, BYE_MAPS = 40000 };

/* One process that maps a small file BYE_MAPS times, joins its session on BYE_CONNS
 * connections and says BYE on each, again at every answer, until go closes. */
static int bye_flood(const struct heapd *d, int go, int ready)
{
	struct rlimit rl = { 4096, 4096 };
	setrlimit(RLIMIT_NOFILE, &rl);
	int code = memfd_create("atk-code", MFD_CLOEXEC);
	if (code < 0 || ftruncate(code, 4096) != 0)
		return 1;
	for (int i = 0; i < BYE_MAPS; i++)
		if (mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, code, 0) == MAP_FAILED)
			return 2;
	int st, memfd = th_proc_memfd();
	int first = memfd < 0 ? -1 : th_memfd_hello(d->sock, memfd, &st);
	if (first < 0 || st != 0)
		return 3;
	struct pollfd p[BYE_CONNS + 1];
	struct llgo_msg_header bye;
	msg_header_init(&bye, LLGO_MSG_BYE, sizeof(bye));
	for (int i = 0; i < BYE_CONNS; i++) {
		p[i].fd = th_memfd_hello(d->sock, memfd, NULL); /* joins the session */
		p[i].events = POLLIN;
		if (p[i].fd < 0)
			return 4;
	}
	th_sleep_ms(300);
	for (int i = 0; i < BYE_CONNS; i++)
		if (msg_send(p[i].fd, &bye, sizeof(bye), -1) != 0)
			return 5;
	if (write(ready, "r", 1) != 1)
		return 6;
	p[BYE_CONNS].fd = go;
	p[BYE_CONNS].events = POLLIN;
	while (!p[BYE_CONNS].revents) { /* every answer asks for another BYE, until go closes */
		if (poll(p, BYE_CONNS + 1, -1) < 0)
			return 7;
		for (int i = 0; i < BYE_CONNS; i++) {
			if (!(p[i].revents & POLLIN))
				continue;
			unsigned char pkt[LLGO_MSG_MAX];
			if (msg_recv(p[i].fd, pkt, sizeof(pkt), NULL) <= 0 ||
			    msg_send(p[i].fd, &bye, sizeof(bye), -1) != 0)
				return 8;
		}
	}
	return 0;
}

/*
 * The same fairness with nothing the scan's budget or the claims limit: nobody's process
 * maps one small file 40,000 times (each a mapping of its own), joins its session on 300
 * connections and says BYE on each, again and again. Each BYE is an exit job that re-reads
 * its mappings (about 0.1 s, under the session's drain lock), so the exit queue always holds
 * 300 of them: root's process, exiting meanwhile, was listed 30 s later or more. nobody runs
 * on one of the two exit workers at most, so root's exit job gets the other.
 */
Test(budget, one_users_bye_flood_leaves_exit_workers_to_others, .timeout = 150)
{
	struct flood f;
	flood_start(&f, bye_flood);
	char c;
	cr_assert_eq(read(f.ready[0], &c, 1), 1, "nobody's BYE flood did not start");
	th_sleep_ms(1000); /* the exit queue is full of BYEs */
	long delay = root_memfd_proc_end(f.d.sock, f.mine, f.release, 20000);
	close(f.go[1]);
	exit_attacker_end(f.atk);
	cr_log_info("BYE flood: root's process listed as exited %ld ms after it ended", delay);
	cr_expect_lt(delay, 10000, "root's exited process was listed %ld ms after its exit",
		     delay);
	heapd_cleanup(&f.d);
}
