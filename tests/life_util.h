/* SPDX-License-Identifier: MIT */
/*
 * life_util.h: helpers for the lifecycle, stress and crash tests (test_lifecycle.c,
 * test_stress.c, test_crash.c and others), on top of e2e_util.h and heapd.h (the private
 * llgo-heapd and the requests to it): profiled programs started directly (LD_PRELOAD of the
 * plain shim, LLGO_HEAP_SOCKET, rate and ring size in their environment), what a legacy-text
 * profile says, and readers of /proc for peak RSS and CPU time. Header-only, like e2e_util.h.
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

/* ---- profiled programs ------------------------------------------------------------------ */

struct lu_proc {
	pid_t pid;
	FILE *in, *out;
};

/* Start argv under the shim with the daemon d, rate and ring size (KiB, 0: default), plus
 * extra "K=V" settings (NULL-terminated, may be NULL). preload overrides LD_PRELOAD. */
static inline void lu_start(struct lu_proc *p, const struct heapd *d, const char *rate,
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
