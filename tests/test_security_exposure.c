// SPDX-License-Identifier: MIT
/*
 * test_security_exposure.c: llgo-heapd on a shared host, and what an unprivileged local user
 * (uid nobody, or another uid, from a forked child that drops root) can reach or hold: the
 * socket's mode and its connections, LIST, the CLI's output file (planted links, devices,
 * FIFOs), a stopped daemon, and the HTTP endpoint (slow deltas, slow clients, the bearer
 * token file, each local uid served its own). Against the real daemon binary and CLI;
 * LLGO_TEST_HEAPD=path and LLGO_TEST_CLI=path run them against another build.
 */
#include "../agent/internal.h"
#include "helpers.h"

#include <netinet/in.h>
#include <sys/sysmacros.h>

/* nobody holds its connection budget; root still connects and is answered. Nobody's LIST
 * shows none of root's processes. */
Test(exposure, connections_per_uid_and_list, .timeout = 60)
{
	th_need_root();
	struct th_attached t;
	th_attached_shim(&t, (const char *[]){ "--max-conns-per-uid", "8", NULL }, 512);
	int go[2], res[2];
	th_pipe(go);
	th_pipe(res);
	pid_t child = th_fork();
	if (child == 0) {
		close(go[1]);
		th_become_nobody();
		/* LIST as nobody: root's process is not shown */
		struct llgo_list_entry v[16];
		size_t n = heapd_list(t.d.sock, v, 16);
		char verdict = n == 0 ? 'y' : 'n';
		for (int i = 0; i < 50; i++)
			heapd_connect(t.d.sock);
		if (write(res[1], &verdict, 1) != 1)
			_exit(3);
		th_hold(go[0]);
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	char verdict = 0;
	cr_assert_eq(read(res[0], &verdict, 1), 1);
	cr_expect_eq(verdict, 'y', "nobody's LIST shows root's processes");
	th_sleep_ms(200);
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(t.d.sock, getpid(), &e), "root is locked out");
	char *log = heapd_log(&t.d);
	cr_expect_eq(th_count(log, "connections budget reached"), 1, "%s", log);
	free(log);
	close(go[1]);
	waitpid(child, NULL, 0);
	th_attached_end(&t);
}

/* A stopped daemon: the CLI gives up with a clear error and a nonzero status. */
Test(exposure, cli_times_out_on_a_stopped_daemon, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	heapd_pause(&d);
	char *out;
	long t0 = th_now_ms();
	int rc = th_sh(&out, "%s list --socket %s --timeout 2", TH_CLI, d.sock);
	double secs = (double)(th_now_ms() - t0) / 1e3;
	heapd_resume(&d);
	cr_expect_lt(secs, 10.0, "the CLI waited %.1f s", secs);
	cr_expect(strstr(out, "did not answer") != NULL, "%s", out);
	cr_expect_neq(rc, 0, "exit=%d: %s", rc, out);
	free(out);
	heapd_finish(&d);
}

/* Root writes a profile with -o into a folder where nobody planted symlinks (at the old
 * predictable temporary name, and at the name itself): no file they point to is written. */
Test(exposure, output_file_follows_no_planted_symlink, .timeout = 60)
{
	th_need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct th_shim sh;
	cr_assert_eq(th_shim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	char shared[128], victim[160], victim2[160], target[160];
	snprintf(shared, sizeof(shared), "%s/shared", d.dir);
	cr_assert_eq(mkdir(shared, 01777), 0);
	chmod(shared, 01777);
	snprintf(victim, sizeof(victim), "%s/victim", d.dir);
	snprintf(victim2, sizeof(victim2), "%s/victim2", d.dir);
	snprintf(target, sizeof(target), "%s/heap.pb.gz", shared);
	th_write_file(victim, "root's file\n");
	th_write_file(victim2, "root's other file\n");
	int go[2];
	th_pipe(go);
	pid_t cli = th_fork();
	if (cli == 0) {
		char c;
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(126);
		char pid[32];
		snprintf(pid, sizeof(pid), "%d", (int)getppid());
		execl(TH_CLI, "llgo-heap", "snapshot", pid, "--socket", d.sock, "-o", target,
		      (char *)NULL);
		_exit(127);
	}
	/* nobody plants the links (in a sticky world-writable folder, as in /tmp) */
	pid_t planter = th_fork();
	if (planter == 0) {
		th_become_nobody();
		char tmp[256];
		snprintf(tmp, sizeof(tmp), "%s.tmp.%d", target, (int)cli);
		_exit(symlink(victim, tmp) != 0 || symlink(victim2, target) != 0);
	}
	int st;
	waitpid(planter, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "planting failed");
	cr_assert_eq(write(go[1], "g", 1), 1);
	close(go[1]);
	waitpid(cli, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "snapshot -o: status %d", st);
	char *v = th_read_all(victim), *v2 = th_read_all(victim2);
	cr_expect_str_eq(v, "root's file\n", "the planted temporary link was followed");
	cr_expect_str_eq(v2, "root's other file\n", "the planted link at FILE was followed");
	free(v);
	free(v2);
	struct stat sb;
	cr_expect(lstat(target, &sb) == 0 && S_ISREG(sb.st_mode), "no profile at %s", target);
	cr_expect_eq(th_sh(NULL, "gzip -t %s", target), 0, "not a gzip file");
	th_shim_close(&sh);
	heapd_finish(&d);
}

/* llgo-heap snapshot (this process) -o TARGET; its exit status, -1 when it did not exit. */
static int cli_snapshot_to(const char *sock, const char *target)
{
	char pid[32];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	pid_t cli = th_fork();
	if (cli == 0) {
		int nul = open("/dev/null", O_WRONLY); /* the CLI's stderr is not the test's */
		if (nul >= 0)
			dup2(nul, 2);
		execl(TH_CLI, "llgo-heap", "snapshot", pid, "--socket", sock, "-o", target,
		      (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(cli, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whether the node at path is still the one `before` describes (a device, the same inode). */
static bool same_device(const char *path, const struct stat *before)
{
	struct stat after;
	cr_assert_eq(lstat(path, &after), 0);
	bool same = S_ISCHR(after.st_mode) && after.st_ino == before->st_ino &&
		    after.st_rdev == before->st_rdev;
	cr_expect(same, "-o replaced the device node %s (mode %o)", path, after.st_mode);
	return same;
}

/* -o to an existing device or FIFO writes it in place: a temporary and a rename would
 * replace /dev/null itself with a regular file (root can write /dev). A private device node
 * is tried first, so a CLI that still renames is caught without touching /dev/null. A
 * symlink to a device (/dev/stdout) is refused and left as it is. */
Test(exposure, output_to_a_device_is_written_in_place, .timeout = 60)
{
	struct th_attached t;
	th_attached_shim(&t, NULL, 512);
	struct stat before, after;
	char path[160];

	/* a private character device (root only): the same node as /dev/null */
	bool private_ok = true;
	if (geteuid() == 0) {
		snprintf(path, sizeof(path), "%s/null", t.d.dir);
		cr_assert_eq(mknod(path, S_IFCHR | 0666, makedev(1, 3)), 0, "mknod: %s",
			     strerror(errno));
		cr_assert_eq(lstat(path, &before), 0);
		cr_expect_eq(cli_snapshot_to(t.d.sock, path), 0, "snapshot -o %s", path);
		private_ok = same_device(path, &before);
	}

	/* /dev/null itself, only once a private node was left alone */
	if (private_ok) {
		cr_assert_eq(stat("/dev/null", &before), 0);
		cr_assert(S_ISCHR(before.st_mode), "/dev/null is not a device before the test");
		cr_expect_eq(cli_snapshot_to(t.d.sock, "/dev/null"), 0, "snapshot -o /dev/null");
		if (!same_device("/dev/null", &before) && geteuid() == 0) {
			/* put the shared machine's /dev/null back */
			unlink("/dev/null");
			mknod("/dev/null", S_IFCHR | 0666, makedev(1, 3));
			chmod("/dev/null", 0666);
		}
	}

	/* a FIFO: written in place. The read end is open (without blocking) before the CLI
	 * runs and holds the whole profile, so a CLI that never opens the FIFO fails the test
	 * instead of leaving a reader blocked. */
	snprintf(path, sizeof(path), "%s/fifo", t.d.dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	int rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	cr_assert_geq(rfd, 0, "open FIFO: %s", strerror(errno));
	fcntl(rfd, F_SETPIPE_SZ, 1 << 20);
	cr_expect_eq(cli_snapshot_to(t.d.sock, path), 0, "snapshot -o FIFO");
	char buf[4096];
	size_t total = 0;
	ssize_t n;
	while ((n = read(rfd, buf, sizeof(buf))) > 0)
		total += (size_t)n;
	close(rfd);
	cr_expect_gt(total, 0, "nothing was written to the FIFO");
	cr_expect(lstat(path, &after) == 0 && S_ISFIFO(after.st_mode), "the FIFO was replaced");

	/* a symlink to a device: refused, the link left as it was */
	snprintf(path, sizeof(path), "%s/stdout", t.d.dir);
	cr_assert_eq(symlink("/dev/null", path), 0);
	cr_expect_neq(cli_snapshot_to(t.d.sock, path), 0, "-o through a symlink to a device");
	char link[64] = "";
	ssize_t ln = readlink(path, link, sizeof(link) - 1);
	cr_expect(ln == (ssize_t)strlen("/dev/null") && memcmp(link, "/dev/null", (size_t)ln) == 0,
		  "the symlink was replaced");

	th_attached_end(&t);
}

/* The socket is mode 0666 (any user's shim attaches) without a chmod by path. */
Test(exposure, socket_mode, .timeout = 30)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct stat sb;
	cr_assert_eq(lstat(d.sock, &sb), 0);
	cr_expect(S_ISSOCK(sb.st_mode));
	cr_expect_eq(sb.st_mode & 0777, 0666, "mode %o", sb.st_mode & 0777);
	heapd_finish(&d);
}

/* ---- HTTP: raw connections, as an attacker holds them -------------------------------------- */

static int http_connect(int port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return s;
}

/* GET path on s, with the bearer token when given: 0, or -1 when it was not sent whole. */
static int http_send(int s, const char *path, const char *token)
{
	char req[512], auth[300] = "";
	if (token)
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n",
			 path, auth);
	return write(s, req, (size_t)n) == n ? 0 : -1;
}

/* The HTTP status of the answer on s (0: none within the timeout). */
static int http_status(int s)
{
	char buf[64] = "";
	ssize_t n = read(s, buf, sizeof(buf) - 1);
	if (n < 12)
		return 0;
	buf[n] = '\0';
	return atoi(buf + 9);
}

/* GET path on a new connection: the status (0: no answer within 5 s, -1: not sent). */
static int http_get_status(int port, const char *path, const char *token)
{
	int s = http_connect(port);
	int st = s >= 0 && http_send(s, path, token) == 0 ? http_status(s) : -1;
	if (s >= 0)
		close(s);
	return st;
}

/* 70 clients ask for seconds=60 deltas (each would hold a connection for a minute): the
 * endpoint still answers a plain profile request at once. */
Test(exposure, http_slow_deltas_do_not_lock_the_endpoint, .timeout = 60)
{
	struct th_attached t;
	th_attached_shim(&t, (const char *[]){ "--http", "127.0.0.1:0", NULL }, 512);
	char path[128];
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&seconds=60", (int)getpid());
	int socks[70];
	for (int i = 0; i < 70; i++) {
		socks[i] = http_connect(t.d.port);
		if (socks[i] >= 0)
			http_send(socks[i], path, NULL);
	}
	th_sleep_ms(500);
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d", (int)getpid());
	int st = http_get_status(t.d.port, path, NULL);
	cr_assert_geq(st, 0, "cannot connect");
	cr_expect_eq(st, 200, "a plain request got %d behind 70 slow deltas", st);
	for (int i = 0; i < 70; i++)
		if (socks[i] >= 0)
			close(socks[i]);
	th_attached_end(&t);
}

/* A connection that never sends anything is closed after 10 s: idle connections do not
 * pile up. */
Test(exposure, idle_connections_are_closed, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int s = heapd_connect(d.sock);
	cr_assert_geq(s, 0);
	struct timeval tv = { .tv_sec = 30 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char b;
	ssize_t r = recv(s, &b, 1, 0);
	cr_expect_eq(r, 0, "the idle connection was not closed in 30 s (recv %zd, %s)", r,
		     strerror(errno));
	close(s);
	heapd_finish(&d);
}

/* As root (the test is skipped otherwise): a daemon's folder (heapd_init, not started yet)
 * holding a token file (its path in token) with the token s3cret. */
static void token_daemon(struct heapd *d, char *token, size_t n)
{
	th_need_root();
	heapd_init(d, NULL);
	snprintf(token, n, "%s/token", d->dir);
	th_write_file(token, "s3cret\n");
}

/* The bearer token decides who reads profiles over HTTP: a token file others than its owner
 * may write, or owned by a uid other than root or the daemon's, is refused as the
 * configuration file is (at start, with the reason; at SIGHUP, keeping the token in force). */
Test(exposure, token_file_writable_by_others_is_refused, .timeout = 60)
{
	struct heapd d;
	char token[160];
	token_daemon(&d, token, sizeof(token));
	const char *extra[] = { "--http", "127.0.0.1:0", "--http-token-file", token, NULL };
	const struct { mode_t mode; uid_t owner; } bad[] = {
		{ 0666, 0 }, { 0620, 0 }, { 0602, 0 }, { 0600, 65534 },
	};
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(bad); i++) {
		cr_assert_eq(chown(token, bad[i].owner, 0), 0);
		cr_assert_eq(chmod(token, bad[i].mode), 0);
		pid_t pid = heapd_spawn(&d, extra);
		int st = 0;
		bool exited = false;
		for (int k = 0; k < 500 && !exited; k++) {
			exited = waitpid(pid, &st, WNOHANG) == pid;
			if (!exited)
				th_sleep_ms(10);
		}
		if (!exited)
			th_kill(pid);
		char *log = heapd_log(&d);
		cr_expect(exited && WIFEXITED(st) && WEXITSTATUS(st) != 0,
			  "mode %o uid %u: the token file was accepted:\n%s", (unsigned)bad[i].mode,
			  (unsigned)bad[i].owner, log);
		cr_expect(strstr(log, "writable by others than its owner"),
			  "mode %o uid %u: no reason given:\n%s", (unsigned)bad[i].mode,
			  (unsigned)bad[i].owner, log);
		free(log);
	}
	/* A good file, then made world-writable with another token in it: SIGHUP keeps the
	 * first token. */
	cr_assert_eq(chown(token, 0, 0), 0);
	cr_assert_eq(chmod(token, 0600), 0);
	heapd_run(&d, extra);
	th_write_file(token, "planted\n");
	cr_assert_eq(chmod(token, 0666), 0);
	kill(d.pid, SIGHUP);
	char *log = th_wait_log(&d, "writable by others than its owner", 5000);
	cr_expect(strstr(log, "writable by others than its owner"), "reload accepted it:\n%s", log);
	free(log);
	const char *tokens[] = { "planted", "s3cret" };
	const int want[] = { 401, 200 };
	for (int i = 0; i < 2; i++) {
		int st = http_get_status(d.port, "/metrics", tokens[i]);
		cr_assert_geq(st, 0);
		cr_expect_eq(st, want[i], "token '%s': status %d, want %d", tokens[i], st, want[i]);
	}
	heapd_finish(&d);
}

/* GET path as uid (a forked child that drops root), with the bearer token when given: the
 * HTTP status (0: no answer within the socket's 5 s). */
static int http_status_as(uid_t uid, int port, const char *path, const char *token)
{
	int p[2];
	th_pipe(p);
	pid_t child = th_fork();
	if (child == 0) {
		close(p[0]);
		if (uid)
			th_become_uid(uid, uid);
		int st = http_get_status(port, path, token);
		_exit(write(p[1], &st, sizeof(st)) == sizeof(st) ? 0 : 1);
	}
	close(p[1]);
	int st = -1;
	cr_assert_eq(read(p[0], &st, sizeof(st)), (ssize_t)sizeof(st));
	close(p[0]);
	waitpid(child, NULL, 0);
	return st;
}

/* --http alone (no token, no --http-uids): each local client is served its own processes
 * (the uid owning its socket), root every process; nobody is answered 404 for root's, as for
 * an unknown pid. (The daemon's own uid was served to everyone: nobody got root's profile.) */
Test(exposure, http_default_serves_each_local_uid_its_own, .timeout = 60)
{
	th_need_root();
	struct th_attached t;
	th_attached_shim(&t, (const char *[]){ "--http", "127.0.0.1:0", NULL }, 512);
	int go[2];
	th_pipe(go);
	pid_t mine = th_ring_taker(&t.d, th_nobody_uid(), 1, go);
	close(go[0]);
	th_rings_taken(&t.d, mine, 1);
	char root_path[128], nobody_path[128];
	snprintf(root_path, sizeof(root_path), "/debug/pprof/heap?pid=%d&debug=1", (int)getpid());
	snprintf(nobody_path, sizeof(nobody_path), "/debug/pprof/heap?pid=%d&debug=1", (int)mine);
	int st = http_status_as(th_nobody_uid(), t.d.port, root_path, NULL);
	cr_expect_eq(st, 404, "nobody asked for root's profile: %d", st);
	st = http_status_as(th_nobody_uid(), t.d.port, nobody_path, NULL);
	cr_expect_eq(st, 200, "nobody asked for its own profile: %d", st);
	st = http_status_as(4242, t.d.port, nobody_path, NULL);
	cr_expect_eq(st, 404, "uid 4242 asked for nobody's profile: %d", st);
	st = http_status_as(0, t.d.port, root_path, NULL);
	cr_expect_eq(st, 200, "root asked for its own profile: %d", st);
	st = http_status_as(0, t.d.port, nobody_path, NULL);
	cr_expect_eq(st, 200, "root asked for nobody's profile: %d", st);
	close(go[1]);
	waitpid(mine, NULL, 0);
	th_attached_end(&t);
}

/* One slow client of uid: nconns connections to port that send a request a byte every
 * 500 ms, each reopened when the server closes it, until the process is killed. */
static pid_t http_slowloris(uid_t uid, int port, int nconns)
{
	pid_t child = th_fork();
	if (child != 0)
		return child;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	th_become_uid(uid, uid);
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
				  "\r\n\r\n";
	int socks[256];
	size_t sent[256];
	for (int i = 0; i < nconns; i++)
		socks[i] = -1;
	for (;;) {
		for (int i = 0; i < nconns; i++) {
			if (socks[i] < 0) {
				socks[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
				struct sockaddr_in sa = { .sin_family = AF_INET,
							  .sin_port = htons((uint16_t)port),
							  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
				connect(socks[i], (struct sockaddr *)&sa, sizeof(sa));
				sent[i] = 0;
				continue;
			}
			char c;
			ssize_t r = recv(socks[i], &c, 1, MSG_DONTWAIT);
			bool gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
					       errno != ENOTCONN);
			if (!gone && sent[i] + 1 < sizeof(req)) {
				ssize_t w = send(socks[i], req + sent[i], 1, MSG_NOSIGNAL);
				if (w == 1)
					sent[i]++;
				else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)
					gone = true;
			}
			if (gone) {
				close(socks[i]);
				socks[i] = -1;
			}
		}
		th_sleep_ms(500);
	}
}

/* 200 connections of five users trickle a byte every 500 ms (each byte restarts the idle
 * timeout, so without more they held all 64 HTTP connections for good): a request with the
 * token is still answered within 5 s, thanks to the deadline for a whole request, the
 * per-peer limit and slow connections closed first when the server is full. */
Test(exposure, http_slowloris_leaves_room_for_a_token_request, .timeout = 120)
{
	struct heapd d;
	char token[160];
	token_daemon(&d, token, sizeof(token));
	cr_assert_eq(chmod(token, 0600), 0);
	heapd_run(&d, (const char *[]){ "--http", "127.0.0.1:0", "--http-token-file", token, NULL });
	const uid_t uids[] = { th_nobody_uid(), 4242, 4243, 4244, 4245 };
	pid_t slow[5];
	for (int i = 0; i < 5; i++)
		slow[i] = http_slowloris(uids[i], d.port, 40);
	th_sleep_ms(3000); /* every connection opened and trickling */
	for (int round = 0; round < 3; round++) {
		long t0 = th_now_ms();
		int st = http_status_as(0, d.port, "/metrics", "s3cret");
		long ms = th_now_ms() - t0;
		cr_log_info("slowloris: /metrics with the token: %d after %ld ms", st, ms);
		cr_expect_eq(st, 200, "round %d: /metrics with the token: %d after %ld ms", round,
			     st, ms);
		cr_expect_lt(ms, 5000, "round %d: answered after %ld ms", round, ms);
		th_sleep_ms(1000);
	}
	for (int i = 0; i < 5; i++)
		th_kill(slow[i]);
	heapd_finish(&d);
}
