// SPDX-License-Identifier: MIT
/*
 * test_crash.c: exits nobody announced, end to end.
 *   - A profiled process killed with SIGKILL while its ring holds records (it kills itself
 *     right after allocating, or the test kills it as soon as it says "ready"): the daemon
 *     still drains the ring it holds mapped, and the exited process's profile has every
 *     record, nothing dropped or corrupt.
 *   - llgo-heapd killed with SIGKILL while a program allocates at rate 1 in several threads
 *     and keeps starting new ones: the program is not disturbed (no signal, no blocking, no
 *     crash) and exits with status 0 in its own time.
 */
#include "helpers.h"

#define PROG(name) TH_PROGS "/" name

static void check_exact(const struct heapd *d, pid_t pid, long k, const char *how)
{
	struct th_acct a;
	free(th_expect_exact(d->sock, pid, "crash_site", 1234, k, how, &a));
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d->sock, pid, &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED);
	cr_expect_eq(e.delivered, a.delivered);
}

Test(crash, sigkill_keeps_records_in_rings, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	const long k = 5000;
	char ks[32];
	snprintf(ks, sizeof(ks), "%ld", k);
	/* 5000 records of 1234 bytes fit a 4 MiB ring: nothing is dropped, most of them are
	 * still in the ring when the process dies */
	for (int round = 0; round < 3; round++) {
		struct th_proc p;
		char *argv[] = { PROG("life_crash"), "selfkill", ks, NULL };
		th_start(&p, &d, "1", 4096, NULL, argv, NULL);
		int st = th_wait(&p, 30000);
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status 0x%x", st);
		check_exact(&d, p.pid, k, "killed itself");
	}
	for (int round = 0; round < 3; round++) {
		struct th_proc p;
		char *argv[] = { PROG("life_crash"), "ready", ks, NULL };
		th_start(&p, &d, "1", 4096, NULL, argv, NULL);
		cr_assert_str_eq(th_ready(&p, 30000), "ready");
		kill(p.pid, SIGKILL);
		int st = th_wait(&p, 30000);
		cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "status 0x%x", st);
		check_exact(&d, p.pid, k, "killed by the test");
	}
	heapd_end(&d);
}

Test(crash, daemon_sigkill_leaves_programs_running, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	/* 4 threads flat out at rate 1 with small rings: the rings fill as soon as the daemon
	 * is gone, and every later sample is a drop or a lost_no_ring, never a wait */
	struct th_proc p;
	char *argv[] = { PROG("life_crash"), "survive", "1500", "4", NULL };
	th_start(&p, &d, "1", 64, NULL, argv, NULL);
	cr_assert_str_eq(th_ready(&p, 30000), "started");
	th_sleep_ms(200);
	struct llgo_list_entry e;
	/* LIST's counts move with the drain: a sanitized daemon on a loaded machine may not
	 * have drained yet 200 ms in */
	for (int waited = 0; waited < 10000; waited += 20) {
		cr_assert(heapd_list_pid(d.sock, p.pid, &e) && e.state == LLGO_PROC_LIVE);
		if (e.sampled > 0)
			break;
		th_sleep_ms(20);
	}
	cr_assert_gt(e.sampled, 0);
	heapd_kill(&d);
	long t0 = th_now_ms();
	int st;
	char *out = th_output(&p, 30000, &st);
	long waited = th_now_ms() - t0;
	long elapsed = -1, count = th_site_truth(out, "survive_site");
	const char *el = strstr(out, "elapsed_ms ");
	if (el)
		elapsed = atol(el + 11);
	cr_log_info("daemon killed 200 ms in: program ran %ld ms in all (1500 asked), %ld "
		    "allocations at survive_site, status 0x%x", elapsed, count, st);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "program status 0x%x:\n%s", st, out);
	cr_expect(count > 0 && elapsed >= 1500 && elapsed < 4000, "output:\n%s", out);
	cr_expect_lt(waited, 5000);
	free(out);
	heapd_cleanup(&d);
}
