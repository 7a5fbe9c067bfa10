// SPDX-License-Identifier: MIT
/*
 * test_service.c: llgo-heapd as a host service. `make install` into a private prefix, with
 * the installed units checked by Debian's systemd-analyze (verify, and the security
 * exposure of the hardening); socket activation by systemd-socket-activate (no systemd as
 * PID 1 needed) serving a profiled program and the CLI; SIGHUP reloading the configuration
 * file (a limit and --trim change what clients see; a bad file keeps the old one); SIGTERM
 * exiting 0, removing the daemon's own socket while the profiled program runs on; log levels
 * on a plain stderr and on a journal stream; the sd_notify messages systemd's Type=notify
 * waits for. Every daemon here is the real llgo-heapd binary on a private socket. Last, the
 * configuration parser in-process (config.c).
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "../agent/server/config.h"
#include "../shared/compiler.h"
#include "life_util.h"

#define SVC_SRC LLGO_SRC_DIR
#define SVC_CLI E2E_BIN "/llgo-heap"

/* Occurrences of needle in the file at path. */
static int svc_count(const char *path, const char *needle)
{
	char *s = e2e_read_file(path);
	int n = 0;
	for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	free(s);
	return n;
}

/* Wait (up to timeout_ms) until the file at path holds needle at least n times. */
static bool svc_wait_log(const char *path, const char *needle, int n, int timeout_ms)
{
	long deadline = lu_now_ms() + timeout_ms;
	while (svc_count(path, needle) < n) {
		if (lu_now_ms() > deadline)
			return false;
		lu_sleep_ms(10);
	}
	return true;
}

static bool svc_wait_listed(const char *sock, pid_t pid, int timeout_ms)
{
	struct llgo_list_entry e;
	long deadline = lu_now_ms() + timeout_ms;
	while (!heapd_list_pid(sock, pid, &e)) {
		if (lu_now_ms() > deadline)
			return false;
		lu_sleep_ms(10);
	}
	return true;
}

/* Replace the file at path with text, in one rename (the daemon never reads half of it). */
static void svc_write_file(const char *path, const char *text)
{
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	FILE *f = fopen(tmp, "w");
	cr_assert(f != NULL, "%s: %s", tmp, strerror(errno));
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
	cr_assert_eq(rename(tmp, path), 0, "rename %s: %s", path, strerror(errno));
}

/* Run argv, which is or ends up running llgo-heapd on dir/sockname (systemd-socket-activate
 * execs it under its own pid), stderr in dir/heapd.log, dying with the test; stopped (SIGSTOP)
 * before the exec when asked. Returns at once. Not tests/heapd.c's launcher: here the daemon
 * is started by another program (the activator) or must stop before its exec (strace). */
static void svc_spawn(struct heapd *d, const char *dir, const char *sockname,
		      char *const argv[], bool stopped)
{
	snprintf(d->sock, sizeof(d->sock), "%s/%s", dir, sockname);
	snprintf(d->log, sizeof(d->log), "%s/heapd.log", dir);
	d->pid = fork();
	cr_assert(d->pid >= 0);
	if (d->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		unsetenv("LD_PRELOAD");
		if (stopped)
			raise(SIGSTOP);
		execvp(argv[0], argv);
		_exit(127);
	}
}

/* A daemon on dir with --config dir/heapd.conf holding text; the file's path in conf. */
static void svc_start_with_config(struct heapd *d, const char *dir, char *conf, size_t n,
				  const char *text)
{
	snprintf(conf, n, "%s/heapd.conf", dir);
	svc_write_file(conf, text);
	const char *extra[] = { "--config", conf, NULL };
	heapd_start(d, dir, extra);
}

/* life_idle under the shim of daemon d (rate 1), once it said "ready". */
static void svc_start_idle(struct lu_proc *p, const struct heapd *d)
{
	char *argv[] = { E2E_PROGS "/life_idle", "20", NULL };
	lu_start(p, d, "1", 0, NULL, argv, NULL);
	char line[64];
	cr_assert(lu_read_line(p, line, sizeof(line), 10000), "life_idle did not start");
	cr_assert_str_eq(line, "ready");
}

/* SIGHUP, and wait for the daemon to log the reload (good) or the refused file. */
static void svc_sighup(const struct heapd *d, bool good)
{
	const char *says = good ? "reloaded " : "keeping the previous configuration";
	int before = svc_count(d->log, says);
	cr_assert_eq(kill(d->pid, SIGHUP), 0);
	cr_assert(svc_wait_log(d->log, says, before + 1, 10000), "no \"%s\" in the log:\n%s",
		  says, e2e_read_file(d->log));
}

/* Make runs from inside `make unit`: its jobserver descriptors are not ours. */
#define SVC_MAKE "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C " \
	SVC_SRC " SAN='%s' "

Test(service, install_and_systemd_analyze_verify, .timeout = 600)
{
	char *dir = e2e_tmpdir(), *out = NULL;
	/* DESTDIR: everything under it, the units naming PREFIX's paths. */
	int rc = e2e_sh(&out, SVC_MAKE "install DESTDIR=%s/root PREFIX=/opt/llgo", lu_san(), dir);
	cr_assert_eq(rc, 0, "make install: %s", out);
	free(out);
	const char *files[] = { "bin/llgo-heapd", "bin/llgo-heap", "lib/libllgoheap.so",
				"lib/libllgoheap.a", "include/llgo_heap.h",
				"share/doc/llgo-heap/operations.md", "share/doc/llgo-heap/usage.md",
				"share/doc/llgo-heap/llgo-heapd.conf.example",
				"lib/systemd/system/llgo-heapd.service",
				"lib/systemd/system/llgo-heapd.socket" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(files); i++) {
		char path[4400];
		struct stat st;
		snprintf(path, sizeof(path), "%s/root/opt/llgo/%s", dir, files[i]);
		cr_expect_eq(stat(path, &st), 0, "not installed: %s", path);
	}
	char unit[4400];
	snprintf(unit, sizeof(unit), "%s/root/opt/llgo/lib/systemd/system/llgo-heapd.service", dir);
	cr_expect_eq(svc_count(unit, "ExecStart=/opt/llgo/bin/llgo-heapd "), 1);
	cr_expect_eq(svc_count(unit, "/usr/local"), 0, "a path not rewritten to PREFIX");

	/* PREFIX alone: the unit's ExecStart exists, so systemd-analyze checks everything. */
	rc = e2e_sh(&out, SVC_MAKE "install PREFIX=%s/pfx", lu_san(), dir);
	cr_assert_eq(rc, 0, "make install: %s", out);
	free(out);
	rc = e2e_sh(&out, "cd %s/pfx/lib/systemd/system && systemd-analyze verify "
			  "./llgo-heapd.socket ./llgo-heapd.service", dir);
	cr_expect_eq(rc, 0, "systemd-analyze verify: %s", out);
	cr_expect_str_eq(out, "", "systemd-analyze verify complains:\n%s", out);
	free(out);
	/* The hardening, as systemd scores it (0 safest .. 10; the unhardened unit was 6.9). */
	rc = e2e_sh(&out, "systemd-analyze security --offline=true --no-pager "
			  "%s/pfx/lib/systemd/system/llgo-heapd.service", dir);
	const char *lvl = strstr(out, "Overall exposure level for llgo-heapd.service: ");
	cr_assert_not_null(lvl, "rc %d: %s", rc, out);
	double exposure = atof(lvl + strlen("Overall exposure level for llgo-heapd.service: "));
	cr_expect_leq(exposure, 3.5, "exposure %.1f:\n%s", exposure, out);
	free(out);
	/* The installed daemon runs from its prefix. */
	rc = e2e_sh(&out, "%s/pfx/bin/llgo-heapd --help", dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect_not_null(strstr(out, "--config FILE"), "%s", out);
	free(out);

	rc = e2e_sh(&out, SVC_MAKE "uninstall PREFIX=%s/pfx && find %s/pfx -type f", lu_san(),
		    dir, dir);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect_str_eq(out, "", "left after make uninstall:\n%s", out);
	free(out);
	e2e_rmdir(dir);
}

Test(service, socket_activation_without_systemd, .timeout = 120)
{
	char *dir = e2e_tmpdir(), sock[4200];
	struct heapd d;
	snprintf(sock, sizeof(sock), "%s/act.sock", dir);
	/* It binds the socket, waits for the first connection, then execs llgo-heapd (same
	 * pid) with LISTEN_FDS=1 and LISTEN_PID set. */
	char *argv[] = { "systemd-socket-activate", "--seqpacket", "-l", sock,
			 E2E_BIN "/llgo-heapd", "--foreground", "--socket", sock, NULL };
	svc_spawn(&d, dir, "act.sock", argv, false);
	struct stat st;
	for (int i = 0; i < 1000 && !(stat(d.sock, &st) == 0 && S_ISSOCK(st.st_mode)); i++)
		lu_sleep_ms(5);
	cr_assert(S_ISSOCK(st.st_mode), "systemd-socket-activate did not bind %s", d.sock);
	char exe[64], target[4200] = "";
	snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)d.pid);
	cr_expect_gt(readlink(exe, target, sizeof(target) - 1), 0);
	cr_expect_not_null(strstr(target, "systemd-socket-activate"),
			   "llgo-heapd started before any connection: %s", target);

	/* The program's HELLO is the first connection: it starts the daemon. */
	struct lu_proc p;
	svc_start_idle(&p, &d);
	cr_assert(svc_wait_listed(d.sock, p.pid, 10000), "not listed; log:\n%s",
		  e2e_read_file(d.log));
	memset(target, 0, sizeof(target));
	cr_expect_gt(readlink(exe, target, sizeof(target) - 1), 0);
	cr_expect_not_null(strstr(target, "/llgo-heapd"), "pid %d is %s", (int)d.pid, target);
	fputs("more\n", p.in);
	char line[64];
	cr_assert(lu_read_line(&p, line, sizeof(line), 10000));
	char *out = NULL;
	int rc = e2e_sh(&out, SVC_CLI " top %d --socket %s", (int)p.pid, d.sock);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect_not_null(strstr(out, "idle_site"), "%s", out);
	cr_expect_not_null(strstr(out, "idle_more_site"), "%s", out);
	free(out);
	int status = heapd_stop(&d);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x; log:\n%s", status,
		  e2e_read_file(d.log));
	/* The socket is the activator's (systemd's): the daemon leaves it in place. */
	cr_expect_eq(lstat(d.sock, &st), 0, "a socket-activated daemon removed %s", d.sock);
	cr_expect_eq(lu_wait(&p, 10000), 0);
	e2e_rmdir(dir);
}

Test(service, sighup_changes_a_limit_and_a_bad_file_keeps_the_old, .timeout = 120)
{
	char *dir = e2e_tmpdir(), conf[4200];
	struct heapd d;
	/* root is held by the totals only: max-processes, not its per-uid twin */
	svc_start_with_config(&d, dir, conf, sizeof(conf),
			      "# two programs would be one too many\nmax-processes = 1\n");

	struct lu_proc a, b, c, e;
	svc_start_idle(&a, &d);
	cr_assert(svc_wait_listed(d.sock, a.pid, 10000));
	char refused[128];
	svc_start_idle(&b, &d);
	snprintf(refused, sizeof(refused), "pid %d uid 0: HELLO refused", (int)b.pid);
	cr_assert(svc_wait_log(d.log, refused, 1, 10000), "second process not refused:\n%s",
		  e2e_read_file(d.log));
	struct llgo_list_entry le;
	cr_expect(!heapd_list_pid(d.sock, b.pid, &le));

	/* A file that does not parse: logged, nothing changes (still one process). */
	svc_write_file(conf, "max-processes = 8\nmax-processes-per-fortnight = 3\n");
	svc_sighup(&d, false);
	cr_expect_eq(svc_count(d.log, "heapd.conf:2: unknown key 'max-processes-per-fortnight'"),
		     1, "%s", e2e_read_file(d.log));
	svc_start_idle(&c, &d);
	snprintf(refused, sizeof(refused), "pid %d uid 0: HELLO refused", (int)c.pid);
	cr_assert(svc_wait_log(d.log, refused, 1, 10000),
		  "the bad file changed the limit:\n%s", e2e_read_file(d.log));
	cr_expect(!heapd_list_pid(d.sock, c.pid, &le));

	svc_write_file(conf, "max-processes = 8\n");
	svc_sighup(&d, true);
	svc_start_idle(&e, &d);
	cr_expect(svc_wait_listed(d.sock, e.pid, 10000), "limit unchanged after SIGHUP:\n%s",
		  e2e_read_file(d.log));
	cr_expect(svc_wait_listed(d.sock, a.pid, 1000));

	cr_expect_eq(heapd_stop(&d), 0);
	lu_wait(&a, 10000);
	lu_wait(&b, 10000);
	lu_wait(&c, 10000);
	lu_wait(&e, 10000);
	e2e_rmdir(dir);
}

Test(service, sighup_trim_shows_in_top, .timeout = 120)
{
	char *dir = e2e_tmpdir(), *out = NULL, conf[4200];
	struct heapd d;
	svc_start_with_config(&d, dir, conf, sizeof(conf), "log-level = info\n");
	int rc = e2e_sh(&out, "LD_PRELOAD=" LLGO_PLAIN_SHIM " LLGO_HEAP_SOCKET=%s "
			      "LLGO_HEAP_RATE=1 " E2E_PROGS "/e2e_trim 100", d.sock);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	rc = e2e_sh(&out, SVC_CLI " list --socket %s | awk '/e2e_trim/ {print $1}'", d.sock);
	int pid = atoi(out);
	free(out);
	cr_assert_gt(pid, 0, "e2e_trim not listed");
	rc = e2e_sh(&out, SVC_CLI " top %d --socket %s", pid, d.sock);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect_not_null(strstr(out, "pool_refill"), "before the reload:\n%s", out);
	free(out);

	svc_write_file(conf, "log-level = info\ntrim = pool_*\n");
	svc_sighup(&d, true);
	rc = e2e_sh(&out, SVC_CLI " top %d --socket %s", pid, d.sock);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect_null(strstr(out, "pool_"), "trimmed frames still shown:\n%s", out);
	cr_expect_not_null(strstr(out, "user_builds_index"), "after the reload:\n%s", out);
	free(out);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

/* The port of the n-th (1..) "serving http://127.0.0.1:PORT" line of the log, 0 if none. */
static int svc_http_port(const char *log, int n)
{
	const char *needle = "serving http://127.0.0.1:";
	char *s = e2e_read_file(log);
	const char *at = s ? strstr(s, needle) : NULL;
	for (int i = 1; at && i < n; i++)
		at = strstr(at + 1, needle);
	int port = at ? atoi(at + strlen(needle)) : 0;
	free(s);
	return port;
}

/* Python's HTTP client on 127.0.0.1:port/debug/pprof/: the status, or -1 if nothing answers. */
static int svc_http_status(int port)
{
	char *out = NULL;
	int rc = e2e_sh(&out, "python3 -c 'import sys, urllib.request as u; "
			      "print(u.urlopen(sys.argv[1], timeout=5).status)' "
			      "http://127.0.0.1:%d/debug/pprof/", port);
	int status = rc == 0 ? atoi(out) : -1;
	free(out);
	return status;
}

Test(service, sighup_reopens_http_with_new_settings, .timeout = 120)
{
	char *dir = e2e_tmpdir(), conf[4200];
	struct heapd d;
	svc_start_with_config(&d, dir, conf, sizeof(conf), "http = 127.0.0.1:0\n");
	cr_assert(svc_wait_log(d.log, "serving http://", 1, 10000), "%s", e2e_read_file(d.log));
	int first = svc_http_port(d.log, 1);
	cr_expect_eq(svc_http_status(first), 200);

	/* new settings: the listener is made again (port 0: another port) */
	svc_write_file(conf, "http = 127.0.0.1:0\nhttp-uids = 0\n");
	svc_sighup(&d, true);
	cr_assert(svc_wait_log(d.log, "serving http://", 2, 10000), "%s", e2e_read_file(d.log));
	int second = svc_http_port(d.log, 2);
	cr_expect_eq(svc_http_status(second), 200);
	if (second != first)
		cr_expect_eq(svc_http_status(first), -1, "old listener on %d still open", first);

	/* an unknown user: the whole file is refused, HTTP included */
	svc_write_file(conf, "http = 127.0.0.1:0\nhttp-uids = no-such-user-llgo\n");
	svc_sighup(&d, false);
	cr_expect_eq(svc_http_status(second), 200);

	/* no http any more */
	svc_write_file(conf, "log-level = info\n");
	svc_sighup(&d, true);
	cr_expect_eq(svc_count(d.log, "HTTP server stopped"), 1, "%s", e2e_read_file(d.log));
	cr_expect_eq(svc_http_status(second), -1);
	cr_expect_eq(heapd_stop(&d), 0);
	e2e_rmdir(dir);
}

Test(service, sigterm_exits_0_removes_its_socket_program_runs_on, .timeout = 120)
{
	char *dir = e2e_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct lu_proc p;
	svc_start_idle(&p, &d);
	cr_assert(svc_wait_listed(d.sock, p.pid, 10000));
	int status = heapd_stop(&d);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x; log:\n%s", status,
		  e2e_read_file(d.log));
	cr_expect_eq(svc_count(d.log, "signal 15: exiting"), 1, "%s", e2e_read_file(d.log));
	struct stat st;
	cr_expect(lstat(d.sock, &st) != 0 && errno == ENOENT, "%s left behind", d.sock);
	/* The program keeps allocating (and sampling) without its daemon. */
	for (int i = 0; i < 3; i++) {
		fputs("more\n", p.in);
		char line[64];
		cr_assert(lu_read_line(&p, line, sizeof(line), 10000), "program stopped answering");
		cr_expect_str_eq(line, "ready");
	}
	cr_expect_eq(lu_wait(&p, 10000), 0);
	e2e_rmdir(dir);
}

/* A packet no shim or client sends: logged at warn level ("dropping connection"). */
static void svc_send_junk(const char *sock)
{
	int s = heapd_connect(sock);
	cr_assert(s >= 0);
	static const char junk[64] = "not the protocol";
	cr_assert_eq(write(s, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	char c;
	struct pollfd pf = { .fd = s, .events = POLLIN };
	poll(&pf, 1, 5000);
	(void)!read(s, &c, 1);
	close(s);
}

/* Start a daemon with extra options, send junk, stop it; its log. */
static char *svc_log_of(const char *dir, const char *const *extra, const char *journal)
{
	struct heapd d;
	char log[4200];
	snprintf(log, sizeof(log), "%s/heapd.log", dir);
	/* this daemon's lines only: the launcher appends to the log of the folder */
	FILE *f = fopen(log, "w");
	cr_assert(f);
	struct stat st;
	cr_assert_eq(fstat(fileno(f), &st), 0);
	fclose(f);
	if (journal) {
		/* the stream journald would give it: JOURNAL_STREAM names the log file itself
		 * (truncated above, the inode stays) */
		char js[64];
		snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
		setenv("JOURNAL_STREAM", js, 1);
	}
	heapd_start(&d, dir, extra);
	unsetenv("JOURNAL_STREAM");
	svc_send_junk(d.sock); /* returns once the daemon closed the connection (after logging) */
	cr_expect_eq(heapd_stop(&d), 0);
	return e2e_read_file(d.log);
}

Test(service, log_levels_plain_and_journal, .timeout = 120)
{
	char *dir = e2e_tmpdir(), *log;

	log = svc_log_of(dir, NULL, NULL);
	cr_expect_not_null(strstr(log, "llgo-heapd: info: listening on "), "%s", log);
	cr_expect_not_null(strstr(log, "llgo-heapd: warn: dropping connection from pid "), "%s",
			   log);
	free(log);

	const char *warn[] = { "--log-level", "warn", NULL };
	log = svc_log_of(dir, warn, NULL);
	cr_expect_null(strstr(log, "info:"), "%s", log);
	cr_expect_not_null(strstr(log, "llgo-heapd: warn: dropping connection"), "%s", log);
	free(log);

	const char *error[] = { "--log-level=error", NULL };
	log = svc_log_of(dir, error, NULL);
	cr_expect_null(strstr(log, "info:"), "%s", log);
	cr_expect_null(strstr(log, "dropping connection"), "%s", log);
	free(log);

	/* stderr is the journal: sd-daemon priority prefixes, no name (journald adds it) */
	log = svc_log_of(dir, NULL, "journal");
	cr_expect_not_null(strstr(log, "<6>listening on "), "%s", log);
	cr_expect_not_null(strstr(log, "<4>dropping connection from pid "), "%s", log);
	cr_expect_null(strstr(log, "llgo-heapd: "), "%s", log);
	free(log);

	char *out = NULL;
	int rc = e2e_sh(&out, E2E_BIN "/llgo-heapd --foreground --socket %s/x.sock "
			      "--log-level loud", dir);
	cr_expect_eq(rc, 2, "%s", out);
	cr_expect_not_null(strstr(out, "--log-level: want error, warn, info or debug: loud"), "%s",
			   out);
	free(out);
	e2e_rmdir(dir);
}

/* The messages systemd's Type=notify reads, on a NOTIFY_SOCKET of our own. */
Test(service, sd_notify_ready_reloading_stopping, .timeout = 120)
{
	char *dir = e2e_tmpdir();
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", dir);
	int ns = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert(ns >= 0);
	cr_assert_eq(bind(ns, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	struct heapd d;
	heapd_start(&d, dir, NULL);
	unsetenv("NOTIFY_SOCKET");
	const char *want[] = { "READY=1", "RELOADING=1", "READY=1", "STOPPING=1" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(want); i++) {
		if (i == 1)
			kill(d.pid, SIGHUP);
		if (i == 3)
			kill(d.pid, SIGTERM);
		struct pollfd pf = { .fd = ns, .events = POLLIN };
		cr_assert_eq(poll(&pf, 1, 10000), 1, "no %s", want[i]);
		char msg[256];
		ssize_t n = recv(ns, msg, sizeof(msg) - 1, 0);
		cr_assert_gt(n, 0);
		msg[n] = '\0';
		cr_expect_str_eq(msg, want[i]);
	}
	cr_expect_eq(heapd_stop(&d), 0);
	close(ns);
	e2e_rmdir(dir);
}

/* llgo-heapd with argv (argv[0] its path), traced by `strace -f -o trace` from its exec on.
 * The daemon is the test's child (it dies with the test: a tracee would outlive a killed
 * strace), stopped until strace has attached. Returns strace's pid. */
static pid_t svc_spawn_traced(struct heapd *d, const char *dir, const char *trace,
			      char *const argv[])
{
	svc_spawn(d, dir, "heapd.sock", argv, true);
	int st;
	cr_assert_eq(waitpid(d->pid, &st, WUNTRACED), d->pid);
	cr_assert(WIFSTOPPED(st));
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)d->pid);
	pid_t tracer = fork();
	cr_assert(tracer >= 0);
	if (tracer == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execlp("strace", "strace", "-f", "-qq", "-o", trace, "-p", pid, (char *)NULL);
		_exit(127);
	}
	char status[64], text[4096] = "", want[64];
	snprintf(status, sizeof(status), "/proc/%d/status", (int)d->pid);
	snprintf(want, sizeof(want), "TracerPid:\t%d\n", (int)tracer);
	for (int i = 0; i < 1000 && !strstr(text, want); i++) {
		lu_sleep_ms(5);
		int fd = open(status, O_RDONLY | O_CLOEXEC); /* procfs: no size to ftell */
		ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
		text[n > 0 ? n : 0] = '\0';
		if (fd >= 0)
			close(fd);
	}
	cr_assert_not_null(strstr(text, want), "strace did not attach:\n%s", e2e_read_file(d->log));
	kill(d->pid, SIGCONT);
	return tracer;
}

/* The system calls of a strace output (one name a line, sorted, unique) into dir/NAME. */
#define SVC_TRACE_NAMES "grep -ohE '^[0-9]+ +[a-z_0-9]+\\(|<\\.\\.\\. [a-z_0-9]+ resumed>' %s/trace.* " \
	"| sed -E 's/^[0-9]+ +//; s/^<\\.\\.\\. //; s/[(]$//; s/ resumed>$//' | sort -u"

/* The unit's SystemCallFilter=, groups expanded by systemd-analyze, one name a line. */
#define SVC_FILTER_NAMES \
	"expand() { systemd-analyze syscall-filter --no-pager \"$1\" | sed -n '2,$p' | " \
	"awk '$1 !~ /^#/ {print $1}' | while read -r x; do case $x in @*) expand $x;; " \
	"*) echo $x;; esac; done; }; for t in $(sed -n 's/^SystemCallFilter=//p' " \
	SVC_SRC "/systemd/llgo-heapd.service); do case $t in @*) expand $t;; *) echo $t;; esac; " \
	"done | sort -u"

/* Every system call the daemon makes while it starts, serves a profiled program, the CLI,
 * HTTP and a verify, is killed, takes the program back, reloads and stops is allowed by the
 * unit's filter (systemd would fail any other with EPERM). */
Test(service, unit_syscall_filter_allows_what_the_daemon_does, .timeout = 300)
{
	if (*lu_san())
		cr_skip_test("sanitizer runtimes make system calls of their own");
	char *dir = e2e_tmpdir(), *out = NULL;
	char trace[4200], sock[4200];
	snprintf(trace, sizeof(trace), "%s/trace.1", dir);
	snprintf(sock, sizeof(sock), "%s/heapd.sock", dir);
	struct heapd d;
	char *argv1[] = { E2E_BIN "/llgo-heapd", "--foreground", "--socket", sock, "--http", "127.0.0.1:0",
			  "--verify-every", "1", NULL };
	pid_t tracer = svc_spawn_traced(&d, dir, trace, argv1);
	cr_assert(svc_wait_log(d.log, "serving http://", 1, 20000), "%s", e2e_read_file(d.log));
	/* allocates all along, until a line on stdin (then once more, and waits for EOF) */
	struct lu_proc p;
	char *prog[] = { E2E_PROGS "/life_restart", "20", "100", NULL };
	lu_start(&p, &d, "1", 0, NULL, prog, NULL);
	char line[64];
	cr_assert(lu_read_line(&p, line, sizeof(line), 10000));
	cr_assert(svc_wait_listed(d.sock, p.pid, 10000));
	/* idle across the restart, so the next daemon takes it back (the busy one may reconnect
	 * by itself first) */
	struct lu_proc q;
	svc_start_idle(&q, &d);
	cr_assert(svc_wait_listed(d.sock, q.pid, 10000));
	cr_expect_eq(e2e_sh(&out, SVC_CLI " top %d --socket %s && " SVC_CLI " verify %d "
				  "--seconds 1 --socket %s", (int)p.pid, sock, (int)p.pid, sock), 0,
		     "%s", out);
	free(out);
	cr_expect_eq(svc_http_status(svc_http_port(d.log, 1)), 200);
	/* kill -9 the daemon, and start another that takes the program back */
	kill(d.pid, SIGKILL);
	int st;
	waitpid(d.pid, &st, 0);
	waitpid(tracer, &st, 0);
	snprintf(trace, sizeof(trace), "%s/trace.2", dir);
	char *argv2[] = { E2E_BIN "/llgo-heapd", "--foreground", "--socket", sock, NULL };
	tracer = svc_spawn_traced(&d, dir, trace, argv2);
	char taken[64];
	snprintf(taken, sizeof(taken), "pid %d (life_idle): taken back", (int)q.pid);
	cr_assert(svc_wait_log(d.log, taken, 1, 20000), "%s", e2e_read_file(d.log));
	cr_expect(svc_wait_listed(d.sock, p.pid, 10000));
	fputs("go\n", p.in);
	cr_expect(lu_read_line(&p, line, sizeof(line), 10000));
	kill(d.pid, SIGHUP);
	cr_expect(svc_wait_log(d.log, "reloaded ", 1, 10000), "%s", e2e_read_file(d.log));
	cr_expect_eq(heapd_stop(&d), 0);
	waitpid(tracer, &st, 0); /* the trace is complete */

	char *used = NULL, *allowed = NULL;
	cr_assert_eq(e2e_sh(&used, SVC_TRACE_NAMES, dir), 0, "%s", used);
	cr_assert_eq(e2e_sh(&allowed, SVC_FILTER_NAMES), 0, "%s", allowed);
	int n = 0;
	for (char *save = NULL, *name = strtok_r(used, "\n", &save); name;
	     name = strtok_r(NULL, "\n", &save), n++) {
		char key[128];
		snprintf(key, sizeof(key), "\n%s\n", name);
		char *in = NULL;
		cr_assert(asprintf(&in, "\n%s", allowed) > 0);
		cr_expect_not_null(strstr(in, key), "llgo-heapd calls %s, which the unit filters out",
				   name);
		free(in);
	}
	cr_expect_gt(n, 40, "only %d system calls seen", n);
	cr_log_info("llgo-heapd made %d distinct system calls, all allowed by the unit", n);
	free(used);
	free(allowed);
	lu_wait(&p, 10000);
	lu_wait(&q, 10000);
	e2e_rmdir(dir);
}

/* ---- config.c in-process: the file, the command line over it, refusals --------------------- */

static int svc_load(struct config *c, const char *file_text, char *err, size_t errlen,
		    const char *const *args)
{
	char *dir = e2e_tmpdir(), conf[4200];
	snprintf(conf, sizeof(conf), "%s/c.conf", dir);
	svc_write_file(conf, file_text);
	char *argv[32] = { "llgo-heapd", "--config", conf };
	int n = 3;
	for (; args && *args && n < 31; args++)
		argv[n++] = (char *)*args;
	argv[n] = NULL;
	int rc = config_load(c, n, argv, false, err, errlen);
	e2e_rmdir(dir);
	return rc;
}

Test(config, command_line_wins_and_trim_adds_up)
{
	struct config c;
	char err[512] = "";
	const char *args[] = { "--socket", "/tmp/cli.sock", "--max-processes=7", "--trim", "b*",
			       NULL };
	cr_assert_eq(svc_load(&c, "# comment\n\n  socket = /tmp/file.sock  \nmax-processes = 3\n"
				  "max-processes-per-uid = 2\ntrim = a,c*\nforeground = yes\n"
				  "log-level = debug\nmax-ring-memory = 3M\n"
				  "symbolizer-uids = 61000-61010\n",
			      err, sizeof(err), args), 0, "%s", err);
	cr_expect_str_eq(c.server.socket_path, "/tmp/cli.sock");
	cr_expect_eq(c.budget.total[BUDGET_SESSIONS], 7);
	cr_expect_eq(c.budget.per_uid[BUDGET_SESSIONS], 2);
	cr_expect_eq(c.budget.total[BUDGET_RING_BYTES], 3u << 20);
	cr_expect_eq(c.server.ntrim, 3);
	cr_expect(c.foreground);
	cr_expect_eq(c.log_level, LOG_LEVEL_DEBUG);
	cr_expect_eq(c.symbolizer_uid_first, 61000);
	cr_expect_eq(c.symbolizer_uid_last, 61010);
	cr_expect(c.server.budget == &c.budget);
	config_free(&c);
}

Test(config, refusals_name_the_line)
{
	struct config c;
	char err[512];
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "max-processes = 1\nmax-processes-per-week = 2\n",
		  "c.conf:2: unknown key 'max-processes-per-week'" },
		{ "\n\nmax-memory = 12\n", "c.conf:3: --max-memory: want a size of at least 64K: 12" },
		{ "log-level = loud\n", "c.conf:1: --log-level: want error, warn, info or debug" },
		{ "foreground = maybe\n", "c.conf:1: --foreground: want yes or no: maybe" },
		{ "trim\n", "c.conf:1: trim needs a value" },
		{ "config = /etc/other.conf\n", "c.conf:1: unknown key 'config'" },
		{ "symbolizer-uids = 61000\n", "c.conf:1: --symbolizer-uids: want FIRST-LAST" },
		{ "symbolizer-uids = 61010-61000\n", "c.conf:1: --symbolizer-uids: want FIRST-LAST" },
		{ "symbolizer-uids = 0-10\n", "c.conf:1: --symbolizer-uids: want FIRST-LAST" },
		{ "symbolizer-uids = 1-2147483648\n", "c.conf:1: --symbolizer-uids: want" },
	};
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(cases); i++) {
		err[0] = '\0';
		cr_expect_eq(svc_load(&c, cases[i].text, err, sizeof(err), NULL), 2, "%s",
			     cases[i].text);
		cr_expect_not_null(strstr(err, cases[i].want), "%s: got '%s'", cases[i].want, err);
	}
}

Test(config, a_file_others_may_write_is_refused)
{
	char *dir = e2e_tmpdir(), conf[4200], err[512] = "";
	snprintf(conf, sizeof(conf), "%s/c.conf", dir);
	svc_write_file(conf, "max-processes = 1\n");
	cr_assert_eq(chmod(conf, 0666), 0);
	char *argv[] = { "llgo-heapd", "--config", conf, NULL };
	struct config c;
	cr_expect_eq(config_load(&c, 3, argv, false, err, sizeof(err)), 2);
	cr_expect_not_null(strstr(err, "writable by others than its owner"), "%s", err);
	e2e_rmdir(dir);
}

Test(config, default_file_for_the_host_daemon_only)
{
	char *own[] = { "llgo-heapd", "--foreground", "--socket", "/tmp/private.sock", NULL };
	char *host[] = { "llgo-heapd", "--foreground", NULL };
	cr_expect(config_use_default(2, host));
	cr_expect(!config_use_default(4, own), "a private daemon (llgo-heap run) read it");
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("LISTEN_PID", pid, 1);
	setenv("LISTEN_FDS", "1", 1);
	cr_expect(config_use_default(4, own), "the socket-activated daemon did not read it");
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
}
