/* SPDX-License-Identifier: MIT */
/*
 * life_util.h: helpers for the lifecycle, stress and crash tests (test_lifecycle.c,
 * test_stress.c, test_crash.c), on top of e2e_util.h: a private llgo-heapd with options and
 * its log in the test's folder, profiled programs started directly (LD_PRELOAD of the plain
 * shim, LLGO_HEAP_SOCKET, rate and ring size in their environment), a client that speaks the
 * socket protocol itself (LIST, SNAPSHOT: faster than the CLI and able to misbehave), and
 * readers of /proc for peak RSS and CPU time. Header-only, like e2e_util.h.
 */
#ifndef LLGO_TESTS_LIFE_UTIL_H
#define LLGO_TESTS_LIFE_UTIL_H

#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/prctl.h>

#include "e2e_util.h"
#include "../shared/proto.h"

#ifndef LLGO_PLAIN_SHIM
#error "LLGO_PLAIN_SHIM must be set by the Makefile"
#endif

/* The sanitizers the daemon and this test run under ("" for none): from `make unit`. */
static inline const char *lu_san(void)
{
	const char *s = getenv("LLGO_SAN");
	return s ? s : "";
}

static inline bool lu_san_thread(void)
{
	return strstr(lu_san(), "thread") != NULL;
}

static inline long lu_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static inline void lu_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- the daemon ------------------------------------------------------------------------ */

struct lu_daemon {
	pid_t pid;
	char sock[256];
	char log[256];
};

static inline int lu_connect(const char *sock)
{
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	cr_assert(s >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	cr_assert(strlen(sock) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(s);
		return -1;
	}
	return s;
}

/* A private llgo-heapd on dir/heapd.sock with extra options (NULL-terminated, may be NULL);
 * it dies with the test process (PR_SET_PDEATHSIG), its stderr goes to dir/heapd.log. */
static inline void lu_daemon_start(struct lu_daemon *d, const char *dir, const char *const *extra)
{
	snprintf(d->sock, sizeof(d->sock), "%s/heapd.sock", dir);
	snprintf(d->log, sizeof(d->log), "%s/heapd.log", dir);
	const char *argv[32] = { "llgo-heapd", "--socket", d->sock, "--foreground" };
	int n = 4;
	for (int i = 0; extra && extra[i] && n < 31; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid_t parent = getpid();
	d->pid = fork();
	cr_assert(d->pid >= 0);
	if (d->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(126);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
		}
		unsetenv("LD_PRELOAD");
		execv(E2E_BIN "/llgo-heapd", (char **)argv);
		_exit(127);
	}
	for (int i = 0; i < 2000; i++) {
		int s = lu_connect(d->sock);
		if (s >= 0) {
			close(s);
			return;
		}
		int st;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			char *log = e2e_read_file(d->log);
			cr_assert_fail("llgo-heapd exited early:\n%s", log ? log : "");
		}
		lu_sleep_ms(5);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, NULL, 0);
	cr_assert_fail("llgo-heapd did not start on %s", d->sock);
}

/* SIGTERM, then the exit status (-1 when it had to be killed after 10 s). */
static inline int lu_daemon_stop(struct lu_daemon *d)
{
	if (d->pid <= 0)
		return 0;
	kill(d->pid, SIGTERM);
	int st = 0;
	for (int i = 0; i < 2000; i++) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return st;
		}
		lu_sleep_ms(5);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

/* ---- profiled programs ------------------------------------------------------------------ */

struct lu_proc {
	pid_t pid;
	FILE *in, *out;
};

/* Start argv under the shim with the daemon d, rate and ring size (KiB, 0: default), plus
 * extra "K=V" settings (NULL-terminated, may be NULL). preload overrides LD_PRELOAD. */
static inline void lu_start(struct lu_proc *p, const struct lu_daemon *d, const char *rate,
			    unsigned ring_kb, const char *preload, char *const argv[],
			    const char *const *extra)
{
	static char env[16][2048];
	char *envp[17];
	int n = 0;
	snprintf(env[n], sizeof(env[n]), "LD_PRELOAD=%s", preload ? preload : LLGO_PLAIN_SHIM);
	envp[n] = env[n];
	n++;
	snprintf(env[n], sizeof(env[n]), "LLGO_HEAP_SOCKET=%s", d->sock);
	envp[n] = env[n];
	n++;
	snprintf(env[n], sizeof(env[n]), "LLGO_HEAP_RATE=%s", rate);
	envp[n] = env[n];
	n++;
	snprintf(env[n], sizeof(env[n]), "LLGO_HEAP_RING_KB=%u", ring_kb ? ring_kb : 256);
	envp[n] = env[n];
	n++;
	for (int i = 0; extra && extra[i] && n < 16; i++, n++) {
		snprintf(env[n], sizeof(env[n]), "%s", extra[i]);
		envp[n] = env[n];
	}
	envp[n] = NULL;
	p->pid = e2e_spawn(argv, envp, &p->in, &p->out);
	/* programs started later must not hold this one's pipes (EOF on stdin ends some) */
	fcntl(fileno(p->in), F_SETFD, FD_CLOEXEC);
	fcntl(fileno(p->out), F_SETFD, FD_CLOEXEC);
}

/* Read one line of the program's stdout into line (without the newline); false at EOF or
 * after timeout_ms. */
static inline bool lu_read_line(struct lu_proc *p, char *line, size_t cap, int timeout_ms)
{
	int fd = fileno(p->out);
	size_t n = 0;
	long deadline = lu_now_ms() + timeout_ms;
	while (n + 1 < cap) {
		long left = deadline - lu_now_ms();
		if (left <= 0)
			return false;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, (int)left) <= 0)
			continue;
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r <= 0)
			return false;
		if (c == '\n')
			break;
		line[n++] = c;
	}
	line[n] = '\0';
	return true;
}

/* Everything left on the program's stdout (until EOF), malloc'ed. */
static inline char *lu_read_rest(struct lu_proc *p, int timeout_ms)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	int fd = fileno(p->out);
	long deadline = lu_now_ms() + timeout_ms;
	for (;;) {
		long left = deadline - lu_now_ms();
		if (left <= 0)
			break;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, (int)left) <= 0)
			continue;
		if (cap - len < 1024)
			buf = realloc(buf, cap *= 2);
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	return buf;
}

/* Close its stdin and wait for the program; its wait status, or -1 after timeout_ms (it is
 * then killed). */
static inline int lu_wait(struct lu_proc *p, int timeout_ms)
{
	if (p->in)
		fclose(p->in);
	p->in = NULL;
	long deadline = lu_now_ms() + timeout_ms;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(p->pid, &st, WNOHANG);
		if (r == p->pid)
			break;
		if (lu_now_ms() > deadline) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			st = -1;
			break;
		}
		lu_sleep_ms(2);
	}
	if (p->out)
		fclose(p->out);
	p->out = NULL;
	return st;
}

/* The COUNT of "site NAME [SIZE] COUNT" in a program's output (-1 when absent). */
static inline long lu_site_truth(const char *out, const char *name)
{
	char key[128];
	snprintf(key, sizeof(key), "site %s ", name);
	const char *p = strstr(out, key);
	if (!p)
		return -1;
	const char *nl = strchr(p, '\n');
	const char *sp = p + strlen(key);
	const char *last = sp;
	for (const char *c = sp; *c && c != nl; c++)
		if (*c == ' ')
			last = c + 1;
	return atol(last);
}

/* ---- the socket protocol as a client ----------------------------------------------------- */

/* Read an answer (DATA... END) on s within timeout_ms. Returns END's status (0 or an errno),
 * -ETIMEDOUT, or -EPROTO (EOF or a bad packet); *data (malloc'ed, NUL-terminated) gets the
 * payload received. */
static inline int lu_read_answer(int s, char **data, size_t *len, int timeout_ms)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap + 1);
	unsigned char *pkt = malloc(LLGO_MSG_MAX);
	long deadline = lu_now_ms() + timeout_ms;
	int rc = -EPROTO;
	for (;;) {
		long left = deadline - lu_now_ms();
		if (left <= 0) {
			rc = -ETIMEDOUT;
			break;
		}
		struct pollfd pf = { .fd = s, .events = POLLIN };
		if (poll(&pf, 1, (int)left) <= 0)
			continue;
		ssize_t r = recv(s, pkt, LLGO_MSG_MAX, 0);
		if (r < (ssize_t)sizeof(struct llgo_msg_header))
			break;
		struct llgo_msg_header h;
		memcpy(&h, pkt, sizeof(h));
		if (h.type == LLGO_MSG_DATA) {
			size_t k = (size_t)r - sizeof(h);
			while (n + k > cap)
				buf = realloc(buf, (cap *= 2) + 1);
			memcpy(buf + n, pkt + sizeof(h), k);
			n += k;
			continue;
		}
		if (h.type == LLGO_MSG_END && (size_t)r == sizeof(struct llgo_msg_end)) {
			struct llgo_msg_end e;
			memcpy(&e, pkt, sizeof(e));
			rc = e.status;
		}
		break;
	}
	free(pkt);
	buf[n] = '\0';
	*data = buf;
	*len = n;
	return rc;
}

/* Send one request on a new connection and read the answer (as lu_read_answer). */
static inline int lu_request(const char *sock, const void *req, size_t reqlen, char **data,
			     size_t *len, int timeout_ms)
{
	*data = NULL;
	*len = 0;
	int s = lu_connect(sock);
	if (s < 0)
		return -ECONNREFUSED;
	if (send(s, req, reqlen, MSG_NOSIGNAL) != (ssize_t)reqlen) {
		close(s);
		return -EPIPE;
	}
	int rc = lu_read_answer(s, data, len, timeout_ms);
	close(s);
	return rc;
}

static inline void lu_header(struct llgo_msg_header *h, uint16_t type, uint32_t len)
{
	memset(h, 0, sizeof(*h));
	h->magic = LLGO_PROTO_MAGIC;
	h->version = LLGO_PROTO_VERSION;
	h->type = type;
	h->length = len;
}

/* The LIST answer as an array (malloc'ed); returns the number of rows. */
static inline size_t lu_list(const char *sock, struct llgo_list_entry **rows)
{
	struct llgo_msg_header h;
	lu_header(&h, LLGO_MSG_LIST, sizeof(h));
	char *data;
	size_t len;
	int rc = lu_request(sock, &h, sizeof(h), &data, &len, 30000);
	cr_assert_eq(rc, 0, "LIST failed: %d", rc);
	cr_assert_eq(len % sizeof(struct llgo_list_entry), 0);
	*rows = (struct llgo_list_entry *)(void *)data;
	return len / sizeof(struct llgo_list_entry);
}

/* The LIST row of pid (the one `snapshot PID` means); false when absent. */
static inline bool lu_list_pid(const char *sock, pid_t pid, struct llgo_list_entry *out)
{
	struct llgo_list_entry *rows;
	size_t n = lu_list(sock, &rows);
	bool found = false;
	for (size_t i = 0; i < n; i++) {
		if (rows[i].pid == (uint32_t)pid) {
			memcpy(out, &rows[i], sizeof(*out));
			found = true;
		}
	}
	free(rows);
	return found;
}

static inline void lu_snapshot_req(struct llgo_msg_snapshot *m, pid_t pid, uint32_t fmt)
{
	memset(m, 0, sizeof(*m));
	lu_header(&m->h, LLGO_MSG_SNAPSHOT, sizeof(*m));
	m->pid = (uint32_t)pid;
	m->format = fmt;
}

/* A snapshot of pid in fmt (NUL-terminated, malloc'ed); asserts success. */
/* (noinline: gcc 12 otherwise warns of a dangling pointer through its callers' parsers) */
__attribute__((noinline, unused)) static char *lu_snapshot(const char *sock, pid_t pid,
								   uint32_t fmt, size_t *len)
{
	struct llgo_msg_snapshot m;
	lu_snapshot_req(&m, pid, fmt);
	char *data = NULL;
	size_t n = 0;
	int rc = lu_request(sock, &m, sizeof(m), &data, &n, 60000);
	if (rc != 0)
		cr_assert_fail("SNAPSHOT %d failed: %d %s", (int)pid, rc, data);
	if (len)
		*len = n;
	return data;
}

/* ---- what a legacy-text profile says ---------------------------------------------------- */

struct lu_acct {
	unsigned long long sampled, delivered, dropped, corrupt;
};

static inline bool lu_text_acct(const char *text, struct lu_acct *a)
{
	const char *p = strstr(text, "# llgo-heap: sampled=");
	return p && sscanf(p, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu corrupt=%llu",
			   &a->sampled, &a->delivered, &a->dropped, &a->corrupt) == 4;
}

/* Allocations at function func (frame 0) in a legacy-text profile, of size bytes (0: any). */
static inline long lu_text_count(const char *text, const char *func, long size)
{
	static struct e2e_text_rec recs[65536];
	long period;
	int n = e2e_parse_text(text, &period, recs, 65536);
	return e2e_count(recs, n, func, size);
}

/* Sum of allocated objects over every record of the profile. */
static inline long lu_text_total(const char *text)
{
	static struct e2e_text_rec recs[65536];
	long period;
	int n = e2e_parse_text(text, &period, recs, 65536);
	long t = 0;
	for (int i = 0; i < n; i++)
		t += recs[i].alloc_objects;
	return t;
}

/* ---- /proc --------------------------------------------------------------------------------- */

/* A "Key:  N kB" field of /proc/PID/status (pid 0: self), or -1. */
static inline long lu_status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/status");
	FILE *f = fopen(path, "r");
	long v = -1;
	size_t kl = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':')
			v = atol(line + kl + 1);
	if (f)
		fclose(f);
	return v;
}

/* utime + stime of pid in clock ticks, or -1. */
static inline long lu_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	unsigned long ut = 0, st = 0;
	/* fields after ")": 3 state ... 14 utime 15 stime */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

#endif
