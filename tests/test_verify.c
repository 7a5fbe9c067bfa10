// SPDX-License-Identifier: MIT
/*
 * test_verify.c: the eBPF cross-check end to end (real daemon, real BPF program, real
 * programs under the plain shim, the real CLI):
 *   - a frame-pointer program at a sampled rate: every matched sample agrees (100%), and
 *     the last line has the exact form `verify: N samples, M agree (P%)`;
 *   - LLGO_HEAP_TEST_CORRUPT_STACK=10 corrupts frame 0 of one sample in ten: verify reports
 *     the disagreements with both stacks and exits 1; --min-agree below the rate passes;
 *   - C++: the real operator new between the shim and the program is dropped as the shim
 *     drops it; samples the kernel cannot walk (aligned new clobbers rbp) are not compared;
 *   - llgo-heapd --verify-every N: the result reaches `llgo-heap list` and the profile;
 *   - errors: no such process, bad options, a daemon without BPF rights (run as nobody
 *     without capabilities), a shim without the probe (built with LLGO_HEAP_TEST_NO_PROBE,
 *     standing in for an older one): one line naming the cause, exit status 2, profiling
 *     goes on.
 * Where BPF cannot work at all (not root, no BTF, kernel before 5.8) the BPF tests are
 * skipped with the reason printed.
 *   - dwarf mode: the same program built without frame pointers, its shim copying stacks
 *     (LLGO_HEAP_UNWIND=dwarf): the daemon's unwind of the kernel's stack copy agrees with
 *     its unwind of the shim's copy for every sample; a wrong pc in one copy in ten is
 *     reported as a dwarf-mode disagreement.
 */
#include "bpf_util.h"
#include "life_util.h"

#define PROG(name) E2E_PROGS "/" name
#define CLI E2E_BIN "/llgo-heap"

#define VT_NEED_BPF() BPF_UTIL_NEED("test_verify")

/* The last line of out (static copy). */
static const char *vt_last_line(const char *out)
{
	static char line[512];
	size_t n = strlen(out);
	while (n && out[n - 1] == '\n')
		n--;
	size_t b = n;
	while (b && out[b - 1] != '\n')
		b--;
	snprintf(line, sizeof(line), "%.*s", (int)(n - b), out + b);
	return line;
}

/* Start verify_fp for `seconds` under the shim at `rate` with extra settings; wait for its
 * "ready" line. */
static void vt_start_named(struct lu_proc *p, struct heapd *d, const char *prog,
			   const char *rate, const char *seconds, const char *const *extra)
{
	char *argv[] = { (char *)prog, (char *)seconds, "2", NULL };
	lu_start(p, d, rate, 1024, NULL, argv, extra);
	char line[128];
	cr_assert(lu_read_line(p, line, sizeof(line), 10000), "verify_fp did not start");
	cr_assert(strncmp(line, "ready ", 6) == 0, "verify_fp said: %s", line);
	/* threads running, their rings registered with the daemon (a loaded machine may take
	 * seconds to get there: waiting a fixed time once asked verify about a pid the daemon
	 * had not heard of yet) */
	struct llgo_list_entry e;
	for (int waited = 0; waited < 20000; waited += 50) {
		if (heapd_list_pid(d->sock, p->pid, &e) && e.rings >= 1 && e.delivered > 0)
			break;
		lu_sleep_ms(50);
	}
}

/* verify_fp in frame-pointer mode: under the default (auto) a busy start copies stacks
 * until the daemon's tables arrive, and those samples are checked in dwarf mode instead. */
static void vt_start_prog(struct lu_proc *p, struct heapd *d, const char *rate,
			  const char *seconds, const char *const *extra)
{
	const char *env[8] = { "LLGO_HEAP_UNWIND=fp" };
	for (int i = 0; extra && extra[i] && i < 6; i++)
		env[i + 1] = extra[i];
	vt_start_named(p, d, PROG("verify_fp"), rate, seconds, env);
}

Test(verify, frame_pointer_program_agrees, .timeout = 120)
{
	VT_NEED_BPF();
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct lu_proc p;
	vt_start_prog(&p, &d, "65536", "8", NULL);
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify %d --seconds 2 --socket %s", (int)p.pid, d.sock);
	cr_log_info("verify output:\n%s", out);
	unsigned long long n = 0, m = 0;
	char pct[32] = "";
	const char *last = vt_last_line(out);
	cr_assert_eq(sscanf(last, "verify: %llu samples, %llu agree (%31[^)])", &n, &m, pct), 3,
		     "last line: '%s'", last);
	cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
	cr_expect_gt(n, 1000, "only %llu samples matched:\n%s", n, out);
	cr_expect_eq(m, n, "%llu of %llu agree:\n%s", m, n, out);
	cr_expect_str_eq(pct, "100.0%");
	cr_expect(strstr(out, "frame-pointer mode:") != NULL);
	cr_expect(strstr(out, "dwarf mode: no samples") != NULL);
	cr_expect(strstr(out, " 0 kernel captures without a record") != NULL,
		  "captures without records:\n%s", out);
	free(out);

	/* A second verify of the same process works too (attach, detach, attach). */
	rc = e2e_sh(&out, CLI " verify %d --seconds 1 --socket %s", (int)p.pid, d.sock);
	cr_expect_eq(rc, 0, "second verify: exit %d:\n%s", rc, out);
	free(out);
	int st = lu_wait(&p, 30000);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "verify_fp status 0x%x", st);
	/* The profile is untouched by the verify: every sample accounted. */
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, p.pid, &e));
	cr_expect_eq(e.sampled, e.delivered + e.dropped + e.corrupt);
	cr_expect_eq(e.corrupt, 0);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

Test(verify, corrupted_stacks_are_reported, .timeout = 120)
{
	VT_NEED_BPF();
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct lu_proc p;
	const char *extra[] = { "LLGO_HEAP_TEST_CORRUPT_STACK=10", NULL };
	vt_start_prog(&p, &d, "65536", "8", extra);
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify %d --seconds 2 --socket %s", (int)p.pid, d.sock);
	cr_log_info("verify output (first 3000 bytes):\n%.3000s", out);
	unsigned long long n = 0, m = 0;
	const char *last = vt_last_line(out);
	cr_assert_eq(sscanf(last, "verify: %llu samples, %llu agree (", &n, &m), 2, "last: '%s'",
		     last);
	cr_expect_eq(rc, 1, "exit %d, want 1:\n%s", rc, out);
	cr_assert_gt(n, 1000);
	/* one in ten of each thread's samples is corrupted: 10% disagree */
	double bad = (double)(n - m) / (double)n;
	cr_expect(bad > 0.08 && bad < 0.12, "%llu of %llu disagree (%.3f)", n - m, n, bad);
	cr_expect(strstr(out, "disagreement 1 (frame-pointer mode): ring ") != NULL,
		  "no disagreement shown:\n%s", out);
	cr_expect(strstr(out, "<- differs") != NULL);
	/* both stacks symbolized: the program's functions appear on both sides */
	cr_expect(strstr(out, "descend+0x") != NULL || strstr(out, "worker+0x") != NULL,
		  "stacks not symbolized:\n%s", out);
	free(out);

	rc = e2e_sh(&out, CLI " verify %d --seconds 1 --min-agree 80 --socket %s", (int)p.pid,
		    d.sock);
	cr_expect_eq(rc, 0, "--min-agree 80: exit %d:\n%s", rc, out);
	free(out);
	lu_wait(&p, 30000);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

Test(verify, verify_every_reaches_list_and_profile, .timeout = 120)
{
	VT_NEED_BPF();
	char *dir = e2e_tmpdir();
	struct heapd d;
	const char *opts[] = { "--verify-every", "7", NULL };
	heapd_start(&d, dir, opts);
	struct lu_proc p;
	vt_start_prog(&p, &d, "65536", "3", NULL);
	/* a one-off verify while the continuous one runs */
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify %d --seconds 1 --socket %s", (int)p.pid, d.sock);
	cr_expect_eq(rc, 0, "verify under --verify-every: exit %d:\n%s", rc, out);
	free(out);
	int st = lu_wait(&p, 30000);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	lu_sleep_ms(200);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, p.pid, &e));
	cr_log_info("--verify-every 7: %llu samples compared, %llu agree (of %llu sampled)",
		    (unsigned long long)e.verify_samples, (unsigned long long)e.verify_agree,
		    (unsigned long long)e.sampled);
	cr_expect_gt(e.verify_samples, 100);
	cr_expect_eq(e.verify_agree, e.verify_samples);
	cr_expect_leq(e.verify_samples, e.sampled);

	rc = e2e_sh(&out, CLI " list --socket %s", d.sock);
	cr_expect_eq(rc, 0);
	char want[64];
	snprintf(want, sizeof(want), "%llu/%llu", (unsigned long long)e.verify_agree,
		 (unsigned long long)e.verify_samples);
	cr_expect(strstr(out, "VERIFIED") && strstr(out, want), "list:\n%s", out);
	free(out);
	char *text = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	cr_expect(strstr(text, " verified=") != NULL, "no verify comment:\n%.400s", text);
	free(text);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

Test(verify, errors_exit_2_with_one_line, .timeout = 120)
{
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify 999999 --seconds 1 --socket %s", d.sock);
	cr_expect_eq(rc, 2, "unknown pid: exit %d: %s", rc, out);
	cr_expect(strstr(out, "no such profiled process") != NULL, "%s", out);
	free(out);
	rc = e2e_sh(&out, CLI " verify 1 --seconds 0 --socket %s", d.sock);
	cr_expect_eq(rc, 2, "--seconds 0: exit %d: %s", rc, out);
	free(out);
	rc = e2e_sh(&out, CLI " verify 1 --min-agree 101 --socket %s", d.sock);
	cr_expect_eq(rc, 2, "--min-agree 101: exit %d: %s", rc, out);
	free(out);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

/* A daemon without BPF rights: uid nobody, no capabilities (setpriv). */
Test(verify, no_bpf_rights_exit_2_and_profiling_goes_on, .timeout = 120)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to start a daemon as another uid");
	if (access("/usr/bin/setpriv", X_OK) != 0)
		cr_skip_test("no /usr/bin/setpriv (util-linux)");
	char *dir = e2e_tmpdir();
	cr_assert(chmod(dir, 0777) == 0);
	/* the daemon as nobody, without capabilities */
	const char *const setpriv[] = { "/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
					"--clear-groups", "--inh-caps=-all",
					"--bounding-set=-all", "--", NULL };
	struct heapd d;
	heapd_init(&d, dir);
	d.wrap = setpriv;
	heapd_run(&d, NULL);
	struct lu_proc p;
	char *argv[] = { PROG("verify_fp"), "3", "1", NULL };
	lu_start(&p, &d, "65536", 0, NULL, argv, NULL);
	char line[128];
	cr_assert(lu_read_line(&p, line, sizeof(line), 10000));
	lu_sleep_ms(200);
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify %d --seconds 1 --socket %s", (int)p.pid, d.sock);
	cr_log_info("verify against a daemon without BPF rights: exit %d: %s", rc, out);
	cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "BPF unavailable") != NULL && strstr(out, "permission denied"),
		  "cause not named: %s", out);
	/* one line */
	char *nl = strchr(out, '\n');
	cr_expect(nl && nl[1] == '\0', "more than one line: %s", out);
	free(out);
	/* everything else keeps working: the profile is there */
	lu_wait(&p, 30000);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, p.pid, &e));
	cr_expect_gt(e.delivered, 0);
	cr_expect_eq(e.sampled, e.delivered + e.dropped + e.corrupt);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

/* A process whose shim predates the probe: one line naming it, exit 2. */
Test(verify, shim_without_probe_exit_2, .timeout = 120)
{
	VT_NEED_BPF();
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct lu_proc p;
	char *argv[] = { PROG("verify_fp"), "3", "1", NULL };
	lu_start(&p, &d, "65536", 0, E2E_PROGS "/libllgoheap-noprobe.so", argv, NULL);
	char line[128];
	cr_assert(lu_read_line(&p, line, sizeof(line), 10000));
	lu_sleep_ms(200);
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify %d --seconds 1 --socket %s", (int)p.pid, d.sock);
	cr_log_info("verify of a shim without the probe: exit %d: %s", rc, out);
	cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
	cr_expect(strstr(out, "the probe llgo_heap:sample is not in") != NULL, "%s", out);
	char *nl = strchr(out, '\n');
	cr_expect(nl && nl[1] == '\0', "more than one line: %s", out);
	free(out);
	lu_wait(&p, 30000);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, p.pid, &e));
	cr_expect_gt(e.delivered, 0, "the old shim's process was still profiled");
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

/* C++: the real operator new (libstdc++, no frame pointer) sits between the shim and the
 * program in the kernel's stack; verify drops it as the shim does. Aligned new clobbers rbp,
 * so the kernel cannot walk past it: those samples are "not compared", never disagreements. */
Test(verify, cxx_operator_new_agrees, .timeout = 120)
{
	VT_NEED_BPF();
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct lu_proc p;
	char *argv[] = { PROG("e2e_cxx"), "100000000", NULL };
	lu_start(&p, &d, "4096", 1024, NULL, argv, NULL);
	lu_sleep_ms(500);
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify %d --seconds 1 --socket %s", (int)p.pid, d.sock);
	cr_log_info("verify of e2e_cxx:\n%s", out);
	unsigned long long n = 0, m = 0;
	const char *last = vt_last_line(out);
	cr_assert_eq(sscanf(last, "verify: %llu samples, %llu agree (", &n, &m), 2, "last: '%s'",
		     last);
	cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
	cr_expect_gt(n, 1000);
	cr_expect_eq(m, n);
	free(out);
	kill(p.pid, SIGKILL);
	lu_wait(&p, 30000);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

/* "kernel: H probe hits, L captures lost" of a verify report: false when absent. */
static bool vt_hits_lost(const char *out, unsigned long long *hits, unsigned long long *lost)
{
	const char *k = strstr(out, "\nkernel: ");
	return k && sscanf(k, "\nkernel: %llu probe hits, %llu captures lost", hits, lost) == 2;
}

/*
 * One user's verify flood leaves root's verify its captures: nobody verifies its own program
 * that copies a 48 KiB stack at every 4 KiB allocated (far more than the reader keeps up
 * with), and root's verify of its own program, meanwhile, loses none (at most 1%) of its
 * captures. (With one ring buffer for everyone, nobody's copies filled it: root lost 35% of
 * its captures.) The users together get half of the buffer, root the rest.
 */
Test(verify, one_users_flood_leaves_roots_captures, .timeout = 180)
{
	VT_NEED_BPF();
	if (access("/usr/bin/setpriv", X_OK) != 0)
		cr_skip_test("no /usr/bin/setpriv (util-linux)");
	char *dir = e2e_tmpdir();
	cr_assert_eq(chmod(dir, 0755), 0);
	struct heapd d;
	heapd_start(&d, dir, NULL);
	/* nobody's flood: the shim only in the program (env), not in setpriv */
	char preload[600], sock[200];
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", LLGO_PLAIN_SHIM);
	snprintf(sock, sizeof(sock), "LLGO_HEAP_SOCKET=%s", d.sock);
	char *fargv[] = { "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			  "--", "/usr/bin/env", preload, sock, "LLGO_HEAP_RATE=4096",
			  "LLGO_HEAP_UNWIND=dwarf", PROG("nofp_verify"), "30", "2", NULL };
	struct lu_proc flood;
	flood.pid = e2e_spawn(fargv, NULL, &flood.in, &flood.out);
	char line[128];
	cr_assert(lu_read_line(&flood, line, sizeof(line), 10000), "nofp_verify did not start");
	cr_assert(strncmp(line, "ready ", 6) == 0, "nofp_verify said: %s", line);
	struct lu_proc p;
	vt_start_prog(&p, &d, "65536", "30", NULL);
	struct llgo_list_entry e;
	for (int waited = 0; waited < 20000; waited += 50) {
		if (heapd_list_pid(d.sock, flood.pid, &e) && e.rings >= 1 && e.delivered > 0)
			break;
		lu_sleep_ms(50);
	}
	cr_assert_eq(e.uid, 65534u, "nobody's program is not listed as nobody's");

	char nobody_out[300];
	snprintf(nobody_out, sizeof(nobody_out), "%s/nobody-verify.txt", dir);
	pid_t nv = fork();
	cr_assert_geq(nv, 0);
	if (nv == 0) {
		int fd = open(nobody_out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		char pid[16];
		snprintf(pid, sizeof(pid), "%d", (int)flood.pid);
		execl("/usr/bin/setpriv", "setpriv", "--reuid=65534", "--regid=65534",
		      "--clear-groups", "--", CLI, "verify", pid, "--seconds", "12", "--socket",
		      d.sock, (char *)NULL);
		_exit(127);
	}
	lu_sleep_ms(4000); /* nobody's window is open and its copies flood the buffer */
	char *out = NULL;
	int rc = e2e_sh(&out, CLI " verify %d --seconds 2 --socket %s", (int)p.pid, d.sock);
	cr_log_info("root's verify during nobody's flood:\n%s", out);
	unsigned long long hits = 0, lost = 0;
	cr_assert(vt_hits_lost(out, &hits, &lost), "exit %d:\n%s", rc, out);
	cr_expect_gt(hits, 1000, "root's program: %llu probe hits", hits);
	cr_expect_leq(lost * 100, hits, "root's verify lost %llu of %llu captures to nobody's "
		      "flood:\n%s", lost, hits, out);
	free(out);

	int st;
	cr_assert_eq(waitpid(nv, &st, 0), nv);
	char *nout = NULL;
	cr_assert_eq(e2e_sh(&nout, "cat %s", nobody_out), 0);
	cr_log_info("nobody's verify:\n%s", nout);
	unsigned long long nhits = 0, nlost = 0;
	cr_expect(WIFEXITED(st) && vt_hits_lost(nout, &nhits, &nlost), "nobody's verify:\n%s",
		  nout);
	cr_expect_gt(nlost, 0, "no flood: nobody's verify lost no capture:\n%s", nout);
	free(nout);
	kill(flood.pid, SIGKILL);
	lu_wait(&flood, 30000);
	kill(p.pid, SIGKILL);
	lu_wait(&p, 30000);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

/* ---- dwarf mode -------------------------------------------------------------------------- */

/* verify of nofp_verify under LLGO_HEAP_UNWIND=dwarf (plus extra): the CLI's output and exit
 * status, the last line parsed into n and m. */
static int vt_verify_dwarf(const char *corrupt, char **out, unsigned long long *n,
			   unsigned long long *m)
{
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct lu_proc p;
	const char *extra[] = { "LLGO_HEAP_UNWIND=dwarf", corrupt, NULL };
	/* each sample costs the kernel a 48 KiB copy: a rate that keeps the ring buffer
	 * ahead */
	vt_start_named(&p, &d, PROG("nofp_verify"), "524288", "6", extra);
	int rc = e2e_sh(out, CLI " verify %d --seconds 2 --socket %s", (int)p.pid, d.sock);
	cr_log_info("verify output (first 3000 bytes):\n%.3000s", *out);
	const char *last = vt_last_line(*out);
	cr_assert_eq(sscanf(last, "verify: %llu samples, %llu agree (", n, m), 2, "last: '%s'",
		     last);
	int st = lu_wait(&p, 30000);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nofp_verify status 0x%x", st);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, p.pid, &e));
	cr_expect_eq(e.corrupt, 0);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
	return rc;
}

Test(verify, dwarf_mode_copies_agree, .timeout = 120)
{
	VT_NEED_BPF();
	char *out = NULL;
	unsigned long long n = 0, m = 0;
	int rc = vt_verify_dwarf(NULL, &out, &n, &m);
	cr_expect_eq(rc, 0, "exit %d:\n%s", rc, out);
	cr_expect_gt(n, 100, "only %llu samples matched:\n%s", n, out);
	cr_expect_eq(m, n, "%llu of %llu agree:\n%s", m, n, out);
	char want[96];
	snprintf(want, sizeof(want), "dwarf mode: %llu samples matched, %llu agree", n, n);
	cr_expect(strstr(out, want) != NULL, "want '%s':\n%s", want, out);
	cr_expect(strstr(out, "frame-pointer mode: no samples") != NULL, "%s", out);
	free(out);
}

Test(verify, dwarf_mode_corrupted_copies_are_reported, .timeout = 120)
{
	VT_NEED_BPF();
	char *out = NULL;
	unsigned long long n = 0, m = 0;
	int rc = vt_verify_dwarf("LLGO_HEAP_TEST_CORRUPT_STACK=10", &out, &n, &m);
	cr_expect_eq(rc, 1, "exit %d, want 1:\n%s", rc, out);
	cr_assert_gt(n, 100, "%s", out);
	double bad = (double)(n - m) / (double)n;
	cr_expect(bad > 0.05 && bad < 0.15, "%llu of %llu disagree (%.3f)", n - m, n, bad);
	cr_expect(strstr(out, "disagreement 1 (dwarf mode): ring ") != NULL,
		  "no disagreement shown:\n%s", out);
	free(out);
}
