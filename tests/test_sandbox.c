// SPDX-License-Identifier: MIT
/*
 * test_sandbox.c: the sandboxed symbolizer processes (agent/symhelper.c, symbolizer/): what a
 * helper may do (read from /proc/HELPERPID/status, and the filter tried from inside), and
 * what the daemon side does when one crashes, hangs or is killed in the middle of a snapshot,
 * and that each uid has its own. This process plays the daemon: it symbolizes functions of
 * its own binary; one test runs llgo-heapd itself. The misbehaviour comes from build/tests/llgo-heap-symbolizer-hooks, a helper
 * built with test hooks: a lookup that lands in sandbox_test_crash aborts it, one in
 * sandbox_test_hang never answers, one in sandbox_test_open tries open(2) and socket(2), one
 * in sandbox_test_lie sends an answer that runs past its message.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../agent/internal.h"
#include "../agent/output/snapshot.h"
#include "life_util.h"

#define SBX_HOOKS LLGO_BUILD_DIR "/tests/llgo-heap-symbolizer-hooks"
/* The default --symbolizer-uids: the uids root's and system users' helpers run as. */
#define SBX_UID_FIRST 60578u
#define SBX_UID_LAST 61183u
#define KEEP(x) __asm__ volatile("" : : "r"(x) : "memory")

/* ---- Code to symbolize: the hooks look for these names ---------------------------------- */

__attribute__((noinline, used)) uint64_t sandbox_test_crash(uint64_t x)
{
	KEEP(x);
	return x * 3 + 1;
}

__attribute__((noinline, used)) uint64_t sandbox_test_hang(uint64_t x)
{
	KEEP(x);
	return x * 5 + 2;
}

__attribute__((noinline, used)) uint64_t sandbox_test_open(uint64_t x)
{
	KEEP(x);
	return x * 7 + 3;
}

__attribute__((noinline, used)) uint64_t sandbox_test_lie(uint64_t x)
{
	KEEP(x);
	return x * 17 + 6;
}

__attribute__((noinline, used)) uint64_t sbx_plain_one(uint64_t x)
{
	KEEP(x);
	return x * 11 + 4;
}

__attribute__((noinline, used)) uint64_t sbx_plain_two(uint64_t x)
{
	KEEP(x);
	return x * 13 + 5;
}

/* ---- Helpers -------------------------------------------------------------------------- */

/* The uid whose helper serves procmaps_new(getpid()): /proc/self's owner. */
static uid_t sbx_self_uid(void)
{
	struct stat st;
	cr_assert_eq(stat("/proc/self", &st), 0);
	return st.st_uid;
}

static uint64_t sbx_addr(uint64_t (*fn)(uint64_t))
{
	return (uint64_t)(uintptr_t)fn;
}

/* The function symbolize_pc names at fn's first byte, or "" when none. */
static const char *sbx_name(struct procmaps *pm, uint64_t (*fn)(uint64_t), struct sym_result *r)
{
	const struct mapping *m = procmaps_find(pm, sbx_addr(fn));
	cr_assert(m && m->file, "the test binary is mapped with its file");
	int n = symbolize_pc(m, sbx_addr(fn), r);
	return n > 0 && r->frames[n - 1].function ? r->frames[n - 1].function : "";
}

/* The value of the line "Key:\t..." of /proc/PID/status (the test fails without one). */
static char *sbx_status(pid_t pid, const char *key)
{
	char path[64], text[16384], *out = NULL;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r"); /* its size says 0: read to the end */
	cr_assert(f, "open %s: %s", path, strerror(errno));
	size_t len = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[len] = '\0';
	size_t kl = strlen(key);
	for (char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, key, kl) == 0 && l[kl] == ':') {
			size_t n = strcspn(l, "\n");
			out = strndup(l + kl + 1, n - kl - 1);
			break;
		}
	}
	cr_assert(out, "%s: no %s line", path, key);
	return out;
}

static double sbx_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sbx_use_hooks(unsigned timeout_ms, unsigned backoff_ms)
{
	cr_assert_eq(access(SBX_HOOKS, X_OK), 0, "%s: %s", SBX_HOOKS, strerror(errno));
	setenv("LLGO_HEAP_SYMBOLIZER", SBX_HOOKS, 1);
	symhelper_set_timing(timeout_ms, backoff_ms);
}

/* ---- What a helper may do ------------------------------------------------------------- */

/* The installed helper (found next to the test's build, ../bin/) runs as another uid than
 * root, without capabilities, groups or the means to gain them, under its seccomp filter. */
Test(sandbox, helper_runs_unprivileged_and_filtered)
{
	unsetenv("LLGO_HEAP_SYMBOLIZER");
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct sym_result r;
	cr_assert_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	pid_t pid = symhelper_pid(sbx_self_uid());
	cr_assert_gt(pid, 0, "a helper serves this uid");
	cr_assert_neq(pid, getpid());
	/* root's processes: a uid of the helper's own (--symbolizer-uids, by default
	 * SBX_UID_FIRST..SBX_UID_LAST), no other process's; as another user, that user */
	unsigned u[4] = { 0 }, g[4] = { 0 };
	char *uid = sbx_status(pid, "Uid"), *gid = sbx_status(pid, "Gid");
	cr_assert(uid && sscanf(uid, "%u %u %u %u", &u[0], &u[1], &u[2], &u[3]) == 4, "%s", uid);
	cr_assert(gid && sscanf(gid, "%u %u %u %u", &g[0], &g[1], &g[2], &g[3]) == 4, "%s", gid);
	for (int i = 0; i < 4; i++) {
		if (geteuid() == 0) {
			cr_expect(u[i] >= SBX_UID_FIRST && u[i] <= SBX_UID_LAST && u[i] == u[0],
				  "Uid:%s (want one uid in %u..%u)", uid, SBX_UID_FIRST,
				  SBX_UID_LAST);
			cr_expect_eq(g[i], u[0], "Gid:%s (want the uid's number)", gid);
		} else {
			cr_expect_eq(u[i], (unsigned)getuid(), "Uid:%s", uid);
		}
	}
	free(gid);
	if (geteuid() == 0) {
		char *groups = sbx_status(pid, "Groups");
		cr_expect(groups && strspn(groups, " \t") == strlen(groups), "Groups:%s", groups);
		free(groups);
	}
	static const char *const caps[] = { "CapInh", "CapPrm", "CapEff", "CapAmb" };
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		char *c = sbx_status(pid, caps[i]);
		cr_expect(c && strtoull(c, NULL, 16) == 0, "%s:%s", caps[i], c);
		free(c);
	}
	char *nnp = sbx_status(pid, "NoNewPrivs"), *sec = sbx_status(pid, "Seccomp");
	cr_expect(nnp && atoi(nnp) == 1, "NoNewPrivs:%s", nnp);
	cr_expect(sec && atoi(sec) == 2, "Seccomp:%s (2: filter)", sec);
	free(uid);
	free(nnp);
	free(sec);
	procmaps_free(pm);
}

/* Inside the helper, open(2) and socket(2) fail: the hook aborts it if either works, and it
 * then could not have answered. */
Test(sandbox, filter_refuses_open_and_socket)
{
	sbx_use_hooks(10000, 50);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct sym_result r;
	cr_assert_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	pid_t pid = symhelper_pid(sbx_self_uid());
	cr_expect_str_eq(sbx_name(pm, sandbox_test_open, &r), "sandbox_test_open");
	cr_expect_eq(symhelper_pid(sbx_self_uid()), pid, "the same helper answered");
	procmaps_free(pm);
}

/* ---- When a helper fails -------------------------------------------------------------- */

/* A file that makes the helper crash costs that address its name, not the caller: the
 * helper is reaped, and after the backoff a new one answers. */
Test(sandbox, crash_leaves_the_caller_serving)
{
	sbx_use_hooks(10000, 100);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct sym_result r;
	cr_assert_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	pid_t first = symhelper_pid(sbx_self_uid());
	cr_assert_gt(first, 0);
	cr_expect_str_eq(sbx_name(pm, sandbox_test_crash, &r), "", "shown unsymbolized");
	cr_expect_eq(symhelper_pid(sbx_self_uid()), 0, "the crashed helper is reaped");
	cr_expect_eq(kill(first, 0), -1, "pid %d is gone", (int)first);
	/* while backing off, answers come at once, unsymbolized (and are not remembered) */
	cr_expect_str_eq(sbx_name(pm, sbx_plain_two, &r), "");
	usleep(300 * 1000);
	cr_expect_str_eq(sbx_name(pm, sbx_plain_two, &r), "sbx_plain_two");
	pid_t second = symhelper_pid(sbx_self_uid());
	cr_expect(second > 0 && second != first, "a new helper: %d after %d", (int)second,
		  (int)first);
	/* what was answered before the crash is still remembered */
	cr_expect_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	procmaps_free(pm);
}

/* An answer that does not hold together (a string longer than the message) is used for
 * nothing: the helper is killed, the address shown unsymbolized, the caller serves on. */
Test(sandbox, malformed_answer_is_refused)
{
	sbx_use_hooks(10000, 100);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct sym_result r;
	cr_assert_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	pid_t first = symhelper_pid(sbx_self_uid());
	cr_expect_eq(symbolize_pc(procmaps_find(pm, sbx_addr(sandbox_test_lie)),
				  sbx_addr(sandbox_test_lie), &r), 0, "nothing of the lie is used");
	cr_expect_eq(symhelper_pid(sbx_self_uid()), 0);
	cr_expect_eq(kill(first, 0), -1, "the lying helper %d is killed", (int)first);
	usleep(300 * 1000);
	cr_expect_str_eq(sbx_name(pm, sbx_plain_two, &r), "sbx_plain_two");
	procmaps_free(pm);
}

/* A helper that never answers is killed at the deadline; the caller is not held longer. */
Test(sandbox, hang_is_killed_at_the_deadline)
{
	sbx_use_hooks(700, 100);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct sym_result r;
	cr_assert_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	pid_t first = symhelper_pid(sbx_self_uid());
	double t0 = sbx_now();
	cr_expect_str_eq(sbx_name(pm, sandbox_test_hang, &r), "");
	double dt = sbx_now() - t0;
	cr_expect(dt >= 0.6 && dt < 10, "answered after %.2f s (deadline 0.7 s)", dt);
	cr_expect_eq(kill(first, 0), -1, "the hung helper %d is killed and reaped", (int)first);
	usleep(300 * 1000);
	cr_expect_str_eq(sbx_name(pm, sbx_plain_two, &r), "sbx_plain_two");
	procmaps_free(pm);
}

/* Whether pid is gone (or a zombie: dead, its reaper has yet to collect it). */
static bool sbx_gone(pid_t pid)
{
	char path[64], stat[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return true;
	size_t len = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[len] = '\0';
	const char *end = strrchr(stat, ')');
	return !end || end[2] == 'Z' || !strstr(stat, "(llgo-heap-symbo");
}

/* Wait (5 s at most) until pid is stopped: kill(SIGSTOP) returns before the target takes
 * the signal, and until then the daemon finds it running. */
static void sbx_wait_stopped(pid_t pid)
{
	char path[64], stat[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 500; i++, usleep(10 * 1000)) {
		FILE *f = fopen(path, "r");
		cr_assert(f, "%s: %s", path, strerror(errno));
		size_t len = fread(stat, 1, sizeof(stat) - 1, f);
		fclose(f);
		stat[len] = '\0';
		const char *end = strrchr(stat, ')');
		if (end && end[2] == 'T')
			return;
	}
	cr_assert_fail("pid %d did not stop", (int)pid);
}

/* sig to pid if it still is a helper (a pid reaped already may be another process's). */
static void sbx_signal_helper(pid_t pid, int sig)
{
	if (!sbx_gone(pid))
		kill(pid, sig);
}

/* A helper someone stopped (SIGSTOP) is not waited for: it is killed and a new one answers
 * the next request at once, not after the 20 s deadline (the unfixed daemon waited it out,
 * then showed the address unsymbolized). */
Test(sandbox, stopped_helper_is_replaced)
{
	sbx_use_hooks(20000, 100);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct sym_result r;
	cr_assert_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	pid_t first = symhelper_pid(sbx_self_uid());
	cr_assert_gt(first, 0);
	cr_assert_eq(kill(first, SIGSTOP), 0);
	sbx_wait_stopped(first);
	double t0 = sbx_now();
	cr_expect_str_eq(sbx_name(pm, sbx_plain_two, &r), "sbx_plain_two");
	double dt = sbx_now() - t0;
	cr_expect_lt(dt, 10.0, "answered after %.2f s (deadline 20 s)", dt);
	pid_t second = symhelper_pid(sbx_self_uid());
	cr_expect(second > 0 && second != first, "a new helper: %d after %d", (int)second,
		  (int)first);
	cr_expect(sbx_gone(first), "the stopped helper %d is killed", (int)first);
	sbx_signal_helper(first, SIGKILL);
	procmaps_free(pm);
}

/* The name of sandbox_test_hang (strdup'ed; "" when none), on a thread of its own. */
static void *sbx_name_hang(void *arg)
{
	const struct mapping *m = procmaps_find(arg, sbx_addr(sandbox_test_hang));
	struct sym_result r;
	int n = m ? symbolize_pc(m, sbx_addr(sandbox_test_hang), &r) : 0;
	return strdup(n > 0 && r.frames[n - 1].function ? r.frames[n - 1].function : "");
}

/* A helper stopped in the middle of a request is given up on within a second or so, not at
 * the deadline (20 s); the next request is answered by a new one. */
Test(sandbox, stopped_mid_request_is_not_waited_for)
{
	sbx_use_hooks(20000, 100);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct sym_result r;
	cr_assert_str_eq(sbx_name(pm, sbx_plain_one, &r), "sbx_plain_one");
	pid_t first = symhelper_pid(sbx_self_uid());
	cr_assert_gt(first, 0);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, sbx_name_hang, pm), 0);
	usleep(300 * 1000); /* the request is at the hang by now */
	double t0 = sbx_now();
	cr_assert_eq(kill(first, SIGSTOP), 0);
	void *name;
	pthread_join(t, &name);
	double dt = sbx_now() - t0;
	cr_expect_str_eq(name, "", "the hung address stays unsymbolized");
	free(name);
	cr_expect_lt(dt, 10.0, "given up after %.2f s (deadline 20 s)", dt);
	cr_expect(sbx_gone(first), "the stopped helper %d is killed", (int)first);
	sbx_signal_helper(first, SIGKILL);
	usleep(300 * 1000); /* past any backoff */
	cr_expect_str_eq(sbx_name(pm, sbx_plain_two, &r), "sbx_plain_two");
	procmaps_free(pm);
}

static struct stack *sbx_stack(uint64_t (*const *fns)(uint64_t), uint32_t n)
{
	struct stack *s = calloc(1, sizeof(*s) + n * sizeof(uint64_t));
	cr_assert(s);
	s->npcs = n;
	for (uint32_t i = 0; i < n; i++)
		s->pcs[i] = sbx_addr(fns[i]) + 1; /* return addresses: the writers step back 1 */
	return s;
}

struct sbx_snapshot {
	struct profile *p;
	struct procmaps *pm;
	struct buf out;
	int rc;
};

static void *sbx_write(void *arg)
{
	struct sbx_snapshot *s = arg;
	buf_init(&s->out);
	s->rc = snapshot_write(&s->out, s->p, s->pm, LLGO_FORMAT_TEXT, 0, 0);
	buf_putc(&s->out, '\0');
	return NULL;
}

/* A helper killed while it works on a snapshot: the snapshot completes, its frames of that
 * file unsymbolized; a later snapshot is symbolized again. */
Test(sandbox, killed_mid_snapshot)
{
	sbx_use_hooks(20000, 500);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	uint64_t (*const hung[])(uint64_t) = { sbx_plain_one, sandbox_test_hang };
	uint64_t (*const plain[])(uint64_t) = { sbx_plain_one, sbx_plain_two };
	struct stack *s1 = sbx_stack(hung, 2), *s2 = sbx_stack(plain, 2);
	struct psample ps1 = { s1, 64, 1, 1, 64, 0, 0 }, ps2 = { s2, 64, 1, 1, 64, 0, 0 };
	struct profile p1 = { .meta = { .pid = getpid(), .comm = "sbx", .rate = 1 },
			      .samples = &ps1, .nsamples = 1 };
	struct profile p2 = p1;
	p2.samples = &ps2;

	struct sbx_snapshot snap = { .p = &p1, .pm = pm };
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, sbx_write, &snap), 0);
	pid_t pid = 0;
	for (int i = 0; i < 500 && pid == 0; i++, usleep(10 * 1000))
		pid = symhelper_pid(sbx_self_uid());
	cr_assert_gt(pid, 0, "a helper works on the snapshot");
	usleep(300 * 1000); /* at the hang by now; the deadline is 20 s away */
	double t0 = sbx_now();
	cr_assert_eq(kill(pid, SIGKILL), 0);
	pthread_join(t, NULL);
	cr_expect_lt(sbx_now() - t0, 5.0, "the snapshot did not wait for the deadline");
	cr_assert_eq(snap.rc, 0, "the snapshot completes");
	cr_expect_null(strstr((char *)snap.out.data, "sbx_plain_one"), "unsymbolized:\n%s", (char *)snap.out.data);
	cr_expect_null(strstr((char *)snap.out.data, "sandbox_test_hang"), "%s", (char *)snap.out.data);
	buf_free(&snap.out);

	usleep(700 * 1000); /* past the backoff */
	struct sbx_snapshot later = { .p = &p2, .pm = pm };
	sbx_write(&later);
	cr_assert_eq(later.rc, 0);
	cr_expect_not_null(strstr((char *)later.out.data, "sbx_plain_one"), "%s", (char *)later.out.data);
	cr_expect_not_null(strstr((char *)later.out.data, "sbx_plain_two"), "%s", (char *)later.out.data);
	buf_free(&later.out);
	free(s1);
	free(s2);
	procmaps_free(pm);
}

/* ---- One helper per uid --------------------------------------------------------------- */

/* The same binary profiled for two uids: two symfiles, two helpers, each running as its own
 * uid (nobody for root's); the crash of one user's helper leaves the other's serving. */
Test(sandbox, each_uid_has_its_own_helper)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: helpers of other uids");
	sbx_use_hooks(10000, 100);
	const uid_t other = 4242;
	struct procmaps *mine = procmaps_new_as(getpid(), 0), *theirs = procmaps_new_as(getpid(), other);
	cr_assert(mine && theirs);
	const struct mapping *a = procmaps_find(mine, sbx_addr(sbx_plain_one));
	const struct mapping *b = procmaps_find(theirs, sbx_addr(sbx_plain_one));
	cr_assert(a && b && a->file && b->file);
	cr_expect_neq(a->file, b->file, "files are never shared across uids");
	struct sym_result r;
	cr_assert_str_eq(sbx_name(mine, sbx_plain_one, &r), "sbx_plain_one");
	cr_assert_str_eq(sbx_name(theirs, sbx_plain_one, &r), "sbx_plain_one");
	pid_t p0 = symhelper_pid(0), p1 = symhelper_pid(other);
	cr_assert(p0 > 0 && p1 > 0 && p0 != p1, "helpers %d and %d", (int)p0, (int)p1);
	char *u0 = sbx_status(p0, "Uid"), *u1 = sbx_status(p1, "Uid");
	unsigned run0 = (unsigned)strtoul(u0, NULL, 10);
	cr_expect(run0 >= SBX_UID_FIRST && run0 <= SBX_UID_LAST,
		  "root's processes: a uid of the helper's own (Uid:%s)", u0);
	cr_expect_eq(atoi(u1), (int)other, "uid %u's: its own (Uid:%s)", (unsigned)other, u1);
	free(u0);
	free(u1);
	/* the other user's file crashes their helper; ours is untouched */
	cr_expect_str_eq(sbx_name(theirs, sandbox_test_crash, &r), "");
	cr_expect_eq(symhelper_pid(other), 0);
	cr_expect_eq(symhelper_pid(0), p0);
	cr_expect_str_eq(sbx_name(mine, sbx_plain_two, &r), "sbx_plain_two");
	cr_expect_eq(symhelper_pid(0), p0, "served by the same helper");
	procmaps_free(mine);
	procmaps_free(theirs);
}

/* ---- The daemon ----------------------------------------------------------------------- */

/* llgo-heapd whose helper crashes on a program's code: every snapshot completes, the daemon
 * serves on, the crash is logged, and the program's other functions get their names once the
 * poisonous address is found (its file is then asked one address at a time). */
Test(sandbox, daemon_serves_on_when_a_file_crashes_its_helper, .timeout = 120)
{
	cr_assert_eq(access(SBX_HOOKS, X_OK), 0);
	setenv("LLGO_HEAP_SYMBOLIZER", SBX_HOOKS, 1); /* the daemon's environment */
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct lu_proc p;
	char *argv[] = { E2E_PROGS "/sandbox_crash", "200", NULL };
	lu_start(&p, &d, "1", 0, NULL, argv, NULL);
	char line[64];
	cr_assert(lu_read_line(&p, line, sizeof(line), 20000), "the program did not start");
	bool named = false;
	int snapshots = 0;
	for (long until = lu_now_ms() + 60000; !named && lu_now_ms() < until; snapshots++) {
		char *text = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
		cr_assert(text, "snapshot %d failed", snapshots + 1);
		cr_assert(heapd_alive(&d), "the daemon died");
		cr_expect_eq(lu_text_count(text, "sandbox_test_crash", 777), 0, "the poison is named");
		named = lu_text_count(text, "sbx_prog_site", 888) > 0;
		free(text);
		lu_sleep_ms(300); /* past the backoff */
	}
	cr_expect(named, "sbx_prog_site never named in %d snapshots", snapshots);
	cr_log_info("sbx_prog_site named at snapshot %d", snapshots);
	char *log = heapd_log(&d);
	cr_assert(log);
	cr_expect(strstr(log, "symbolizer for uid") && strstr(log, "Aborted"),
		  "the crash is logged:\n%s", log);
	cr_expect(strstr(log, "shown unsymbolized from now on"), "%s", log);
	free(log);
	lu_wait(&p, 10000);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

/* ---- Who may touch a helper ---------------------------------------------------------- */

#define SBX_SITES E2E_PROGS "/http_sites"

/* setpriv in front of the daemon: the capability bounding set of systemd/llgo-heapd.service,
 * so the daemon has what the unit gives it and nothing more. */
static const char *const *sbx_unit_wrap(void)
{
	static char bset[1024];
	static const char *wrap[4] = { "/usr/bin/setpriv", bset, "--", NULL };
	if (access(wrap[0], X_OK) != 0)
		cr_skip_test("no /usr/bin/setpriv (util-linux)");
	char *unit = e2e_read_file(LLGO_SRC_DIR "/systemd/llgo-heapd.service");
	const char *at = unit ? strstr(unit, "\nCapabilityBoundingSet=") : NULL;
	cr_assert(at, "no CapabilityBoundingSet= in the unit");
	at += strlen("\nCapabilityBoundingSet=");
	size_t n = (size_t)snprintf(bset, sizeof(bset), "--bounding-set=-all");
	while (*at && *at != '\n') {
		size_t len = strcspn(at, " \n");
		cr_assert(len > 4 && strncmp(at, "CAP_", 4) == 0, "%.*s", (int)len, at);
		n += (size_t)snprintf(bset + n, sizeof(bset) - n, ",+");
		for (size_t i = 4; i < len && n + 1 < sizeof(bset); i++)
			bset[n++] = (char)tolower((unsigned char)at[i]);
		bset[n] = '\0';
		at += len;
		at += strspn(at, " ");
	}
	free(unit);
	return wrap;
}

/* The daemon's llgo-heap-symbolizer children (found in /proc by their parent): how many,
 * their pids in out[max]. */
static int sbx_helpers_of(pid_t daemon, pid_t *out, int max)
{
	int n = 0;
	char *list = NULL;
	cr_assert_eq(e2e_sh(&list, "ls /proc"), 0);
	for (char *tok = strtok(list, "\n"); tok && n < max; tok = strtok(NULL, "\n")) {
		if (!(*tok >= '1' && *tok <= '9'))
			continue;
		char path[64], stat[512];
		snprintf(path, sizeof(path), "/proc/%s/stat", tok);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t len = fread(stat, 1, sizeof(stat) - 1, f);
		fclose(f);
		stat[len] = '\0';
		const char *name = strchr(stat, '('), *end = strrchr(stat, ')');
		int ppid = 0;
		if (name && end && strncmp(name + 1, "llgo-heap-symbo", 15) == 0 &&
		    sscanf(end + 2, "%*c %d", &ppid) == 1 && ppid == daemon)
			out[n++] = atoi(tok);
	}
	free(list);
	return n;
}

/* The helper the daemon started since it had the nbefore helpers of before[] (asserts one). */
static pid_t sbx_new_helper(pid_t daemon, const pid_t *before, int nbefore)
{
	pid_t now[64];
	int n = sbx_helpers_of(daemon, now, 64);
	for (int i = 0; i < n; i++) {
		bool old = false;
		for (int k = 0; k < nbefore; k++)
			old |= now[i] == before[k];
		if (!old)
			return now[i];
	}
	cr_assert_fail("no new symbolizer among the daemon's %d", n);
	return 0;
}

/* What a process of uid could do to pid: "" when nothing; else each of "kill(0)", "SIGSTOP"
 * (sent), "ptrace" (attached) and "environ" (its /proc file opened) that worked. */
static char *sbx_reach_as(uid_t uid, pid_t pid)
{
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t c = fork();
	cr_assert_geq(c, 0);
	if (c == 0) {
		close(pfd[0]);
		if (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid))
			_exit(1);
		char out[128] = "", path[64];
		if (kill(pid, 0) == 0)
			strcat(out, " kill(0)");
		if (kill(pid, SIGSTOP) == 0)
			strcat(out, " SIGSTOP");
		if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) == 0)
			strcat(out, " ptrace");
		snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
		int fd = open(path, O_RDONLY);
		if (fd >= 0)
			strcat(out, " environ");
		if (write(pfd[1], out, strlen(out)) < 0)
			_exit(1);
		_exit(0);
	}
	close(pfd[1]);
	char buf[128] = "";
	ssize_t len = read(pfd[0], buf, sizeof(buf) - 1);
	close(pfd[0]);
	int st;
	waitpid(c, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child as uid %u failed",
		  (unsigned)uid);
	buf[len > 0 ? len : 0] = '\0';
	return strdup(buf);
}

/* The first uid of /proc/pid/status's Uid line. */
static unsigned sbx_uid_of(pid_t pid)
{
	char *u = sbx_status(pid, "Uid");
	unsigned uid = (unsigned)strtoul(u, NULL, 10);
	free(u);
	return uid;
}

/* http_sites (copied where every uid reaches it) as uid (or as the test, when uid < 0),
 * attached to d: "ready 0" read, a snapshot taken (which starts its uid's helper); the new
 * helper's pid in *helper. */
static void sbx_sites_as(struct lu_proc *p, const struct heapd *d, long uid, pid_t *helper)
{
	char exe[256], as[32], preload[600];
	snprintf(exe, sizeof(exe), "%s/sbx_sites", d->dir);
	cr_assert_eq(e2e_sh(NULL, "test -x '%s' || cp '%s' '%s'", exe, SBX_SITES, exe), 0);
	snprintf(as, sizeof(as), "%ld", uid);
	char reuid[48], regid[48];
	snprintf(reuid, sizeof(reuid), "--reuid=%s", as);
	snprintf(regid, sizeof(regid), "--regid=%s", as);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", LLGO_PLAIN_SHIM);
	char *plain[] = { exe, "50", NULL };
	char *setpriv[] = { "/usr/bin/setpriv", reuid, regid, "--clear-groups", "/usr/bin/env",
			    preload, exe, "50", NULL };
	lu_start(p, d, "1", 0, uid >= 0 ? "" : NULL, uid >= 0 ? setpriv : plain, NULL);
	char line[64];
	cr_assert(lu_read_line(p, line, sizeof(line), 30000), "sbx_sites as %s did not start", as);
	cr_assert_str_eq(line, "ready 0");
	struct llgo_list_entry e;
	for (int i = 0; i < 2000 && !heapd_list_pid(d->sock, p->pid, &e); i++)
		lu_sleep_ms(5);
	pid_t before[64];
	int nbefore = sbx_helpers_of(d->pid, before, 64);
	char *text = heapd_snapshot(d->sock, p->pid, LLGO_FORMAT_TEXT, NULL);
	cr_expect_gt(lu_text_count(text, "http_site_keep", 4096), 0, "as %s:\n%s", as, text);
	free(text);
	*helper = sbx_new_helper(d->pid, before, nbefore);
}

/* A new site in p (its "more" round), and a snapshot that must name it within 15 s (the
 * daemon's deadline for a helper is 30 s). */
static void sbx_more_is_named(struct lu_proc *p, const struct heapd *d, const char *who)
{
	fprintf(p->in, "more\n");
	fflush(p->in);
	char line[64];
	cr_assert(lu_read_line(p, line, sizeof(line), 30000));
	cr_assert_str_eq(line, "ready 1");
	long t0 = lu_now_ms();
	char *text = heapd_snapshot(d->sock, p->pid, LLGO_FORMAT_TEXT, NULL);
	long dt = lu_now_ms() - t0;
	cr_expect_gt(lu_text_count(text, "http_site_late", 8192), 0,
		     "%s: the new site unsymbolized after %ld ms:\n%s", who, dt, text);
	cr_expect_lt(dt, 15000, "%s: the snapshot took %ld ms", who, dt);
	free(text);
}

static bool sbx_all_gone(const pid_t *pids, int n, long timeout_ms)
{
	for (long until = lu_now_ms() + timeout_ms;; lu_sleep_ms(20)) {
		bool gone = true;
		for (int i = 0; i < n; i++)
			gone &= sbx_gone(pids[i]);
		if (gone || lu_now_ms() > until)
			return gone;
	}
}

/* Root's helper runs as a uid of its own (from --symbolizer-uids), not nobody's: a nobody
 * process can neither signal, trace nor read it (the unfixed daemon ran it as 65534, and a
 * SIGSTOP from nobody made root's next snapshot wait 30 s and come back unsymbolized). */
Test(sandbox, nobody_cannot_touch_roots_helper, .timeout = 120)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: the daemon as root, a process as nobody");
	unsetenv("LLGO_HEAP_SYMBOLIZER");
	struct heapd d;
	heapd_init(&d, NULL);
	d.wrap = sbx_unit_wrap();
	heapd_run(&d, NULL);
	struct lu_proc p;
	pid_t helper;
	sbx_sites_as(&p, &d, -1, &helper);
	unsigned uid = sbx_uid_of(helper);
	cr_expect(uid >= SBX_UID_FIRST && uid <= SBX_UID_LAST, "root's helper runs as uid %u",
		  uid);
	char *reach = sbx_reach_as(65534, helper);
	cr_expect_str_eq(reach, "", "nobody reached root's helper (uid %u):%s", uid, reach);
	free(reach);
	sbx_more_is_named(&p, &d, "root");
	sbx_signal_helper(helper, SIGCONT);
	lu_wait(&p, 10000);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* System users' helpers (uid 1, nobody's own processes) run as uids of their own too, from
 * the range --symbolizer-uids gives: no
 * process of that system uid (other services share it) nor nobody reaches them, and each
 * has a different uid. A regular user's helper runs as that user (its processes are its
 * own business). */
Test(sandbox, system_uids_helpers_are_their_own, .timeout = 120)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: the daemon as root, programs as other uids");
	unsetenv("LLGO_HEAP_SYMBOLIZER");
	struct heapd d;
	heapd_init(&d, NULL);
	d.wrap = sbx_unit_wrap();
	const char *const extra[] = { "--symbolizer-uids", "61100-61149", NULL };
	heapd_run(&d, extra);
	const long uids[] = { 1, 65534, 4242 };
	struct lu_proc p[3];
	pid_t helper[3];
	unsigned run[3];
	for (int i = 0; i < 3; i++) {
		sbx_sites_as(&p[i], &d, uids[i], &helper[i]);
		run[i] = sbx_uid_of(helper[i]);
	}
	for (int i = 0; i < 2; i++) {
		cr_expect(run[i] >= 61100 && run[i] <= 61149,
			  "uid %ld's helper runs as uid %u (--symbolizer-uids 61100-61149)",
			  uids[i], run[i]);
		char *own = sbx_reach_as((uid_t)uids[i], helper[i]);
		char *nobody = sbx_reach_as(65534, helper[i]);
		cr_expect_str_eq(own, "", "uid %ld reached its helper (uid %u):%s", uids[i], run[i],
				 own);
		cr_expect_str_eq(nobody, "", "nobody reached uid %ld's helper:%s", uids[i], nobody);
		free(own);
		free(nobody);
	}
	cr_expect_neq(run[0], run[1], "uid 1 and nobody share helper uid %u", run[0]);
	cr_expect_eq(run[2], 4242u, "a regular user's helper runs as that user");
	for (int i = 0; i < 3; i++) {
		sbx_signal_helper(helper[i], SIGCONT);
		lu_wait(&p[i], 10000);
	}
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* A user who stops their own helper (SIGSTOP) does not stall their snapshots: the daemon
 * sees it stopped, kills it, and a new one names the program's new site at once (the unfixed
 * daemon waited 30 s and showed it unsymbolized). */
Test(sandbox, users_stopped_helper_is_replaced, .timeout = 120)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: a program as another uid");
	unsetenv("LLGO_HEAP_SYMBOLIZER");
	struct heapd d;
	heapd_init(&d, NULL);
	d.wrap = sbx_unit_wrap();
	heapd_run(&d, NULL);
	struct lu_proc p;
	pid_t helper;
	sbx_sites_as(&p, &d, 4242, &helper);
	cr_assert_eq(sbx_uid_of(helper), 4242u);
	char *reach = sbx_reach_as(4242, helper);
	cr_assert(strstr(reach, "SIGSTOP"), "the user could not stop its own helper:%s", reach);
	free(reach);
	sbx_wait_stopped(helper);
	sbx_more_is_named(&p, &d, "uid 4242");
	cr_expect(sbx_all_gone(&helper, 1, 5000), "the stopped helper %d is still there",
		  (int)helper);
	sbx_signal_helper(helper, SIGKILL);
	lu_wait(&p, 10000);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* The daemon stops (SIGTERM): no helper outlives it, not even one that was stopped (SIGSTOP),
 * which never reads the hang-up of its socket. */
Test(sandbox, no_helper_outlives_the_daemon, .timeout = 120)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: helpers of other uids");
	unsetenv("LLGO_HEAP_SYMBOLIZER");
	struct heapd d;
	heapd_init(&d, NULL);
	d.wrap = sbx_unit_wrap();
	heapd_run(&d, NULL);
	struct lu_proc p[2];
	pid_t helper[2];
	sbx_sites_as(&p[0], &d, -1, &helper[0]);
	sbx_sites_as(&p[1], &d, 4242, &helper[1]);
	cr_assert_eq(kill(helper[0], SIGSTOP), 0);
	heapd_stop_clean(&d);
	bool gone = sbx_all_gone(helper, 2, 5000);
	cr_expect(gone, "helpers %d (stopped) and %d outlive the daemon: %s %s", (int)helper[0],
		  (int)helper[1], sbx_gone(helper[0]) ? "gone" : "there",
		  sbx_gone(helper[1]) ? "gone" : "there");
	for (int i = 0; i < 2; i++) {
		sbx_signal_helper(helper[i], SIGKILL);
		lu_wait(&p[i], 10000);
	}
	heapd_cleanup(&d);
}

/* The daemon is killed (SIGKILL: no orderly stop): its helpers die with it (their parent-death
 * signal), a stopped one too. */
Test(sandbox, helpers_die_with_a_killed_daemon, .timeout = 120)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: helpers of other uids");
	unsetenv("LLGO_HEAP_SYMBOLIZER");
	struct heapd d;
	heapd_init(&d, NULL);
	d.wrap = sbx_unit_wrap();
	heapd_run(&d, NULL);
	struct lu_proc p[2];
	pid_t helper[2];
	sbx_sites_as(&p[0], &d, -1, &helper[0]);
	sbx_sites_as(&p[1], &d, 4242, &helper[1]);
	cr_assert_eq(kill(helper[0], SIGSTOP), 0);
	cr_assert_eq(kill(d.pid, SIGKILL), 0);
	int st;
	waitpid(d.pid, &st, 0);
	d.pid = 0;
	bool gone = sbx_all_gone(helper, 2, 5000);
	cr_expect(gone, "helpers %d (stopped) and %d outlive the daemon: %s %s", (int)helper[0],
		  (int)helper[1], sbx_gone(helper[0]) ? "gone" : "there",
		  sbx_gone(helper[1]) ? "gone" : "there");
	for (int i = 0; i < 2; i++) {
		sbx_signal_helper(helper[i], SIGKILL);
		lu_wait(&p[i], 10000);
	}
	heapd_cleanup(&d);
}
