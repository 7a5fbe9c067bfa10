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
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../agent/buf.h"
#include "../agent/internal.h"
#include "../agent/snapshot.h"
#include "life_util.h"

#define SBX_HOOKS LLGO_BUILD_DIR "/tests/llgo-heap-symbolizer-hooks"
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
	unsigned want = geteuid() == 0 ? 65534 : (unsigned)getuid(), u[4] = { 0 };
	char *uid = sbx_status(pid, "Uid");
	cr_assert(uid && sscanf(uid, "%u %u %u %u", &u[0], &u[1], &u[2], &u[3]) == 4, "%s", uid);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(u[i], want, "Uid:%s (want %u)", uid, want);
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
	cr_expect_eq(atoi(u0), 65534, "root's processes: nobody (Uid:%s)", u0);
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
