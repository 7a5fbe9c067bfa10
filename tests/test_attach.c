// SPDX-License-Identifier: MIT
/*
 * test_attach.c: `llgo-heap attach PID` and `llgo-heap detach PID` on running programs
 * (client/attach.c, shim/override_got.c): a C program, a C++ one (libstdc++'s operator new),
 * Debian's python3 and a multi-threaded one, each attached while it allocates; its sites show
 * in the daemon's profile; detached; the program ends with the report an unattached run of the
 * same work prints (its own checksum of every block it wrote, and of every block it checked
 * before freeing it). A hundred attach/detach cycles on a busy four-thread program. Blocks made
 * before the attach never count as sampled ones. The refusals: a static executable, a seccomp
 * filter, another user's process, a process attached already or running the shim preloaded;
 * each one line on stderr, exit status 2, and the process runs on.
 *
 * The programs are plain (never sanitized); the CLI and the daemon are the build's (sanitized
 * under SAN=).
 */
#include <poll.h>

#include "helpers.h"

#define AT_CLI TH_BIN "/llgo-heap"
#define AT_PYTHON "/usr/bin/python3"

struct at_proc {
	pid_t pid;
	FILE *in, *out;
};

/* A line of the program's output within timeout_ms (the newline dropped); asserts. */
static void at_line(struct at_proc *p, char *buf, size_t n, unsigned timeout_ms)
{
	/* p->out is unbuffered (at_start): no line waits in stdio while poll says nothing */
	struct pollfd pf = { .fd = fileno(p->out), .events = POLLIN };
	cr_assert(poll(&pf, 1, (int)timeout_ms) == 1, "no output from %d in %u ms", (int)p->pid,
		  timeout_ms);
	cr_assert(fgets(buf, (int)n, p->out) != NULL, "%d closed its output", (int)p->pid);
	buf[strcspn(buf, "\n")] = '\0';
}

static void at_start(struct at_proc *p, char *const argv[], char *const env[])
{
	p->pid = th_spawn(argv, env, &p->in, &p->out);
	setvbuf(p->out, NULL, _IONBF, 0);
	char line[256];
	at_line(p, line, sizeof(line), 20000);
	cr_assert_str_eq(line, "ready", "%s said: %s", argv[0], line);
}

static void at_say(struct at_proc *p, const char *cmd)
{
	fprintf(p->in, "%s\n", cmd);
	fflush(p->in);
}

/* The program's exit status once it ended (within 60 s). */
static int at_reap(struct at_proc *p)
{
	for (int i = 0; i < 6000; i++) {
		int st;
		pid_t r = waitpid(p->pid, &st, WNOHANG);
		if (r == p->pid) {
			fclose(p->in);
			fclose(p->out);
			p->pid = 0;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		}
		th_sleep_ms(10);
	}
	kill(p->pid, SIGKILL);
	cr_assert_fail("%d did not end", (int)p->pid);
	return -1;
}

/* llgo-heap CMD... --socket SOCK; its exit status, its output (stdout and stderr) in out. */
static int at_cli(char **out, const struct heapd *d, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int at_cli(char **out, const struct heapd *d, const char *fmt, ...)
{
	char *args;
	va_list ap;
	va_start(ap, fmt);
	cr_assert(vasprintf(&args, fmt, ap) >= 0);
	va_end(ap);
	int rc = th_sh(out, "%s %s --socket %s", AT_CLI, args, d->sock);
	free(args);
	return rc;
}

static void at_attach(const struct heapd *d, pid_t pid, const char *rate)
{
	char *out;
	int rc = at_cli(&out, d, "attach %d -r %s", (int)pid, rate);
	cr_assert_eq(rc, 0, "attach %d exited %d: %s", (int)pid, rc, out);
	cr_assert(strstr(out, "attached to") != NULL, "%s", out);
	free(out);
}

static void at_detach(const struct heapd *d, pid_t pid)
{
	char *out;
	int rc = at_cli(&out, d, "detach %d", (int)pid);
	cr_assert_eq(rc, 0, "detach %d exited %d: %s", (int)pid, rc, out);
	cr_assert(strstr(out, "detached from") != NULL, "%s", out);
	free(out);
}

/* The daemon's row of pid once it has at least min samples (within 30 s). */
static void at_wait_samples(const struct heapd *d, pid_t pid, uint64_t min,
			    struct llgo_list_entry *e)
{
	for (int i = 0; i < 3000; i++) {
		if (heapd_list_pid(d->sock, pid, e) && e->sampled >= min)
			return;
		th_sleep_ms(10);
	}
	cr_assert_fail("pid %d: %llu samples, not %llu, in 30 s", (int)pid,
		       (unsigned long long)e->sampled, (unsigned long long)min);
}

/* Stop a rounds program (stdin "stop"), read its report and compare it with `fixed R`'s. */
static void at_finish(struct at_proc *p, const char *fixed_fmt)
{
	at_say(p, "stop");
	char report[256];
	at_line(p, report, sizeof(report), 60000);
	long rounds = -1;
	cr_assert(sscanf(report, "rounds=%ld", &rounds) == 1, "report: %s", report);
	cr_assert(strstr(report, " bad=0") != NULL, "the program found broken blocks: %s",
		  report);
	cr_assert_eq(at_reap(p), 0, "the program did not exit 0");
	char *ref;
	int rc = th_sh(&ref, fixed_fmt, rounds);
	cr_assert_eq(rc, 0, "the unattached run: %s", ref);
	ref[strcspn(ref, "\n")] = '\0';
	cr_assert_str_eq(report, ref, "attached run and unattached run differ");
	free(ref);
}

static struct heapd at_d;
static char *at_dir;

/* Every test: a private daemon in a folder of its own (each test runs in a process of its
 * own: the daemon dies with it, PR_SET_PDEATHSIG, whatever assertion ends it). */
static void at_setup(void)
{
	at_dir = th_tmpdir();
	heapd_start(&at_d, at_dir, NULL);
}

static void at_teardown(void)
{
	heapd_stop(&at_d);
	th_rmdir(at_dir);
}

/* ---- programs attached while they allocate ---------------------------------------------------- */

Test(attach, c_program_profiled_then_detached, .timeout = 300)
{
	at_setup();
	struct at_proc p;
	char *const argv[] = { TH_PROGS "/attach_work", "run", "1", NULL };
	at_start(&p, argv, NULL);
	char line[512];
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where malloc=libc.so.6 free=libc.so.6 realloc=libc.so.6");
	th_sleep_ms(200); /* blocks of before the attach, in its ring, freed while attached */

	at_attach(&at_d, p.pid, "65536");
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where malloc=libllgoheap.so free=libllgoheap.so "
			       "realloc=libllgoheap.so");
	/* a library loaded while attached is routed too */
	at_say(&p, "plugin " TH_PROGS "/libattach_plug.so");
	at_line(&p, line, sizeof(line), 30000);
	cr_assert_str_eq(line, "plugin allocs=2000 malloc=libllgoheap.so");
	struct llgo_list_entry e;
	at_wait_samples(&at_d, p.pid, 300, &e);
	cr_assert_eq(e.state, LLGO_PROC_LIVE);
	char *top;
	int rc = at_cli(&top, &at_d, "top %d -n 20", (int)p.pid);
	cr_assert_eq(rc, 0, "%s", top);
	cr_expect(strstr(top, "c_site_malloc attach_work.c") != NULL, "%s", top);
	cr_expect(strstr(top, "c_site_calloc attach_work.c") != NULL, "%s", top);
	cr_expect(strstr(top, "c_site_realloc attach_work.c") != NULL, "%s", top);
	cr_expect(strstr(top, "attach_plug_alloc libattach_plug.c") != NULL, "%s", top);
	free(top);

	at_detach(&at_d, p.pid);
	cr_assert(heapd_list_pid(at_d.sock, p.pid, &e));
	cr_expect_eq(e.state, LLGO_PROC_DETACHED, "listed as %u", e.state);
	char *list;
	at_cli(&list, &at_d, "list");
	cr_expect(strstr(list, "detached") != NULL, "%s", list);
	free(list);
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where malloc=libc.so.6 free=libc.so.6 realloc=libc.so.6");
	at_say(&p, "plugin " TH_PROGS "/libattach_plug.so");
	at_line(&p, line, sizeof(line), 30000);
	cr_assert_str_eq(line, "plugin allocs=2000 malloc=libc.so.6");
	/* nothing more reaches the daemon */
	uint64_t before = e.sampled;
	th_sleep_ms(300);
	cr_assert(heapd_list_pid(at_d.sock, p.pid, &e));
	cr_expect_eq(e.sampled, before, "samples after the detach");
	at_finish(&p, TH_PROGS "/attach_work fixed %ld 1");
	at_teardown();
}

Test(attach, cxx_program_through_libstdcxx_operator_new, .timeout = 300)
{
	at_setup();
	struct at_proc p;
	char *const argv[] = { TH_PROGS "/attach_cxx", "run", "2", NULL };
	at_start(&p, argv, NULL);
	char line[256];
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where new=libstdc++.so.6 delete=libstdc++.so.6");
	th_sleep_ms(200);
	at_attach(&at_d, p.pid, "65536");
	/* the operators themselves lead to the shim (libstdc++'s, not replaced: inline mode) */
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where new=libllgoheap.so delete=libllgoheap.so");
	struct llgo_list_entry e;
	at_wait_samples(&at_d, p.pid, 300, &e);
	char *folded = heapd_snapshot(at_d.sock, p.pid, LLGO_FORMAT_FOLDED, NULL);
	cr_expect(strstr(folded, "cxx_site_strings") != NULL, "%.3000s", folded);
	cr_expect(strstr(folded, "cxx_site_map") != NULL, "%.3000s", folded);
	cr_expect(strstr(folded, "cxx_site_array") != NULL, "%.3000s", folded);
	free(folded);
	at_detach(&at_d, p.pid);
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where new=libstdc++.so.6 delete=libstdc++.so.6");
	at_finish(&p, TH_PROGS "/attach_cxx fixed %ld 2");
	at_teardown();
}

Test(attach, debian_python3, .timeout = 300)
{
	if (access(AT_PYTHON, X_OK) != 0)
		cr_skip_test("no " AT_PYTHON);
	at_setup();
	struct at_proc p;
	char *const argv[] = { AT_PYTHON, TH_PROGS_SRC "/attach_py.py", "run", NULL };
	at_start(&p, argv, NULL);
	th_sleep_ms(200);
	at_attach(&at_d, p.pid, "1048576");
	struct llgo_list_entry e;
	at_wait_samples(&at_d, p.pid, 50, &e);
	/* 2 GB the interpreter allocates through its own malloc entry (python3.11 is not PIE
	 * and takes malloc's address: a canonical PLT entry): about 1900 samples at 1 MiB */
	uint64_t before = e.sampled;
	char line[64];
	at_say(&p, "burst");
	at_line(&p, line, sizeof(line), 120000);
	cr_assert_str_eq(line, "burst done");
	/* LIST's counts are the drain's latest (a sanitized daemon's lag behind) */
	at_wait_samples(&at_d, p.pid, before + 1000, &e);
	char *folded = heapd_snapshot(at_d.sock, p.pid, LLGO_FORMAT_FOLDED, NULL);
	/* the interpreter's own functions (python3.11 keeps its API in .dynsym) */
	cr_expect(strstr(folded, "python3") != NULL || strstr(folded, "Py") != NULL, "%.3000s",
		  folded);
	free(folded);
	at_detach(&at_d, p.pid);
	at_finish(&p, AT_PYTHON " " TH_PROGS_SRC "/attach_py.py fixed %ld");
	at_teardown();
}

Test(attach, multi_threaded_program, .timeout = 300)
{
	at_setup();
	struct at_proc p;
	char *const argv[] = { TH_PROGS "/attach_work", "run", "4", NULL };
	at_start(&p, argv, NULL);
	th_sleep_ms(200);
	at_attach(&at_d, p.pid, "65536");
	struct llgo_list_entry e;
	at_wait_samples(&at_d, p.pid, 1000, &e);
	cr_expect_geq(e.rings, 2, "the threads' samples came from %u ring(s)", e.rings);
	char *folded = heapd_snapshot(at_d.sock, p.pid, LLGO_FORMAT_FOLDED, NULL);
	cr_expect(strstr(folded, "worker;round_work;c_site_malloc") != NULL, "%.3000s", folded);
	free(folded);
	at_detach(&at_d, p.pid);
	at_finish(&p, TH_PROGS "/attach_work fixed %ld 4");
	at_teardown();
}

/* jemalloc preloaded: the process's malloc is jemalloc's, and so must the shim's real one be
 * (a block jemalloc made, freed by glibc, or the reverse, aborts the program). */
Test(attach, program_with_jemalloc_preloaded, .timeout = 300)
{
	const char *je = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
	if (access(je, R_OK) != 0)
		cr_skip_test("no %s", je);
	at_setup();
	struct at_proc p;
	char env_pre[256];
	snprintf(env_pre, sizeof(env_pre), "LD_PRELOAD=%s", je);
	char *const env[] = { env_pre, NULL };
	char *const argv[] = { TH_PROGS "/attach_work", "run", "2", NULL };
	at_start(&p, argv, env);
	char line[512];
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where malloc=libjemalloc.so.2 free=libjemalloc.so.2 "
			       "realloc=libjemalloc.so.2");
	th_sleep_ms(100);
	at_attach(&at_d, p.pid, "65536");
	struct llgo_list_entry e;
	at_wait_samples(&at_d, p.pid, 300, &e);
	at_detach(&at_d, p.pid);
	at_say(&p, "where");
	at_line(&p, line, sizeof(line), 10000);
	cr_assert_str_eq(line, "where malloc=libjemalloc.so.2 free=libjemalloc.so.2 "
			       "realloc=libjemalloc.so.2");
	/* the unattached run preloads jemalloc too */
	char fixed[512];
	snprintf(fixed, sizeof(fixed), "LD_PRELOAD=%s %s/attach_work fixed %%ld 2", je,
		 TH_PROGS);
	at_finish(&p, fixed);
	at_teardown();
}

/* A hundred attach/detach cycles while four threads allocate: every cycle attaches and
 * detaches, the program's blocks are all intact and its report is an unattached run's. */
Test(attach, hundred_cycles_lose_nothing, .timeout = 900)
{
	at_setup();
	struct at_proc p;
	char *const argv[] = { TH_PROGS "/attach_work", "run", "4", NULL };
	at_start(&p, argv, NULL);
	uint64_t sampled = 0;
	for (int i = 0; i < 100; i++) {
		/* rate 1 now and then: every allocation recorded (a sanitized daemon drains
		 * those slowly, so only a few) */
		at_attach(&at_d, p.pid, i % 33 == 32 ? "1" : "1048576");
		struct llgo_list_entry e;
		if (i % 25 == 0) {
			at_wait_samples(&at_d, p.pid, 50, &e);
			sampled += e.sampled;
		} else {
			th_sleep_ms(5);
		}
		at_detach(&at_d, p.pid);
		cr_assert(heapd_list_pid(at_d.sock, p.pid, &e));
		cr_assert_eq(e.state, LLGO_PROC_DETACHED, "cycle %d: listed as %u", i, e.state);
		at_say(&p, "rounds");
		char line[128];
		at_line(&p, line, sizeof(line), 10000);
		cr_assert(strncmp(line, "rounds ", 7) == 0, "cycle %d: %s", i, line);
	}
	cr_assert(heapd_alive(&at_d));
	cr_expect_gt(sampled, 0);
	at_finish(&p, TH_PROGS "/attach_work fixed %ld 4");
	at_teardown();
}

/* ---- blocks of before the attach ---------------------------------------------------------- */

/* Legacy text records of site (frame 0): in-use objects and bytes, summed. */
static void at_inuse(const char *text, const char *site, long *objects, long *bytes)
{
	static struct th_text_rec recs[2048];
	long period;
	int n = th_parse_text(text, &period, recs, 2048);
	*objects = *bytes = 0;
	for (int i = 0; i < n; i++) {
		if (site && strcmp(recs[i].frame0, site) != 0)
			continue;
		*objects += recs[i].inuse_objects;
		*bytes += recs[i].inuse_bytes;
	}
}

/* At rate 1 every allocation after the attach is sampled and every free is looked up: the
 * page-aligned blocks of before, freed, and the blocks of before realloc'ed, must leave the
 * in-use view exactly what was allocated since and is still held. */
Test(attach, blocks_of_before_never_count_as_sampled, .timeout = 300)
{
	at_setup();
	struct at_proc p;
	char *const argv[] = { TH_PROGS "/attach_pre", NULL };
	at_start(&p, argv, NULL);
	at_attach(&at_d, p.pid, "1");
	char line[128];
	at_say(&p, "go");
	at_line(&p, line, sizeof(line), 20000);
	cr_assert_str_eq(line, "done bad=0");
	char *text = heapd_snapshot(at_d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	long objs, bytes;
	at_inuse(text, "pre_site_new", &objs, &bytes);
	cr_expect_eq(objs, 50, "pre_site_new in use: %ld\n%s", objs, text);
	cr_expect_eq(bytes, 50 * 7000, "pre_site_new bytes: %ld", bytes);
	at_inuse(text, "pre_site_realloc", &objs, &bytes);
	cr_expect_eq(objs, 100, "pre_site_realloc in use: %ld\n%s", objs, text);
	cr_expect_eq(bytes, 100 * 9000, "pre_site_realloc bytes: %ld", bytes);
	at_inuse(text, NULL, &objs, &bytes);
	cr_expect_eq(objs, 150, "in use in all: %ld\n%s", objs, text);
	free(text);
	at_say(&p, "free");
	at_line(&p, line, sizeof(line), 20000);
	cr_assert_str_eq(line, "freed");
	text = heapd_snapshot(at_d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	at_inuse(text, NULL, &objs, &bytes);
	cr_expect_eq(objs, 0, "in use after every block was freed: %ld\n%s", objs, text);
	free(text);
	at_detach(&at_d, p.pid);
	at_say(&p, "stop");
	at_line(&p, line, sizeof(line), 20000);
	cr_assert_str_eq(line, "bye");
	cr_assert_eq(at_reap(&p), 0);
	at_teardown();
}

/* ---- refusals ------------------------------------------------------------------------------ */

/* attach PID refused: exit 2, exactly one line (containing why), and the process runs on. */
static void at_refused(struct at_proc *p, const char *cli_prefix, const char *why)
{
	char *out;
	int rc = th_sh(&out, "%s%s attach %d --socket %s", cli_prefix, AT_CLI, (int)p->pid,
			at_d.sock);
	cr_expect_eq(rc, 2, "exit %d: %s", rc, out);
	cr_expect(strstr(out, why) != NULL, "expected '%s' in: %s", why, out);
	size_t len = strlen(out);
	cr_expect(len > 0 && out[len - 1] == '\n' && strchr(out, '\n') == out + len - 1,
		  "not one line: %s", out);
	cr_expect(strncmp(out, "llgo-heap: ", 11) == 0, "%s", out);
	free(out);
	char line[128];
	at_say(p, "x");
	at_line(p, line, sizeof(line), 10000);
	cr_expect(strncmp(line, "alive ", 6) == 0, "after the refusal: %s", line);
}

static void at_end_idle(struct at_proc *p)
{
	char line[128];
	at_say(p, "stop");
	at_line(p, line, sizeof(line), 10000);
	cr_expect(strncmp(line, "done ", 5) == 0, "%s", line);
	cr_expect_eq(at_reap(p), 0);
}

/* prog (argv, env) started, refused, and ended normally. */
static void at_refuse_program(char *const argv[], char *const env[], const char *cli_prefix,
			      const char *why)
{
	struct at_proc p;
	at_start(&p, argv, env);
	at_refused(&p, cli_prefix, why);
	at_end_idle(&p);
}

Test(attach, refuses_a_static_executable, .timeout = 300)
{
	at_setup();
	char *const argv[] = { TH_PROGS "/attach_idle_static", "plain", NULL };
	at_refuse_program(argv, NULL, "", "statically linked");
	at_teardown();
}

Test(attach, refuses_a_seccomp_filtered_process, .timeout = 300)
{
	at_setup();
	char *const argv[] = { TH_PROGS "/attach_idle", "seccomp", NULL };
	at_refuse_program(argv, NULL, "", "seccomp");
	at_teardown();
}

/* The target runs as nobody, the CLI as another uid that is not root. */
Test(attach, refuses_another_users_process, .timeout = 300)
{
	th_need_root();
	at_setup();
	char uid[32], gid[32];
	snprintf(uid, sizeof(uid), "--reuid=%u", (unsigned)th_nobody_uid());
	snprintf(gid, sizeof(gid), "--regid=%u", (unsigned)th_nobody_gid());
	char *const argv[] = { "/usr/bin/setpriv", uid, gid, "--clear-groups",
			       TH_PROGS "/attach_idle", "plain", NULL };
	at_refuse_program(argv, NULL, "setpriv --reuid=4242 --regid=4242 --clear-groups ",
			  "belongs to uid");
	at_teardown();
}

Test(attach, refuses_a_process_attached_already, .timeout = 300)
{
	at_setup();
	struct at_proc p;
	char *const argv[] = { TH_PROGS "/attach_idle", "plain", NULL };
	at_start(&p, argv, NULL);
	at_attach(&at_d, p.pid, "1");
	at_refused(&p, "", "attached already");
	at_detach(&at_d, p.pid);
	/* and once detached, attached again */
	at_attach(&at_d, p.pid, "1");
	at_detach(&at_d, p.pid);
	at_end_idle(&p);
	at_teardown();
}

Test(attach, refuses_a_process_running_the_shim_preloaded, .timeout = 300)
{
	at_setup();
	char env_pre[256], env_sock[256];
	snprintf(env_pre, sizeof(env_pre), "LD_PRELOAD=%s", LLGO_PLAIN_SHIM);
	snprintf(env_sock, sizeof(env_sock), "LLGO_HEAP_SOCKET=%s", at_d.sock);
	char *const env[] = { env_pre, env_sock, NULL };
	char *const argv[] = { TH_PROGS "/attach_idle", "plain", NULL };
	at_refuse_program(argv, env, "", "preloaded");
	at_teardown();
}
