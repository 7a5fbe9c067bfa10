// SPDX-License-Identifier: MIT
/*
 * heapd.c: the tests' private llgo-heapd and their requests to it (heapd.h). Every test
 * binary links this one copy; the protocol is client/client.c's, as in the CLI. Processes are
 * stopped by pid, never by name. Assertions end the test as in the test files themselves.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heapd.h"
#include "helpers.h"

#ifndef LLGO_BUILD_DIR
#error "LLGO_BUILD_DIR must be set by the Makefile"
#endif

const char *heapd_path(void)
{
	const char *env = getenv("LLGO_TEST_HEAPD");
	return env && *env ? env : LLGO_BUILD_DIR "/bin/llgo-heapd";
}

void heapd_init(struct heapd *d, const char *dir)
{
	memset(d, 0, sizeof(*d));
	if (dir) {
		cr_assert_lt(strlen(dir), sizeof(d->dir));
		memcpy(d->dir, dir, strlen(dir) + 1);
	} else {
		snprintf(d->dir, sizeof(d->dir), "/tmp/llgo-heapd.XXXXXX");
		cr_assert(mkdtemp(d->dir), "mkdtemp: %s", strerror(errno));
		/* other users (the permission tests) must reach the socket inside */
		chmod(d->dir, 0755);
		d->own_dir = true;
	}
	cr_assert_lt((size_t)snprintf(d->sock, sizeof(d->sock), "%s/heapd.sock", d->dir),
		     sizeof(d->sock), "socket path too long in %s", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/heapd.log", d->dir);
}

pid_t heapd_spawn(struct heapd *d, const char *const *extra)
{
	const char *argv[48];
	int n = 0;
	for (int i = 0; d->wrap && d->wrap[i] && n < 16; i++)
		argv[n++] = d->wrap[i];
	argv[n++] = heapd_path();
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	if (!d->detach)
		argv[n++] = "--foreground";
	d->http = false;
	for (int i = 0; extra && extra[i] && n < 47; i++) {
		argv[n++] = extra[i];
		d->http |= strncmp(extra[i], "--http", 6) == 0 && (extra[i][6] == '\0' ||
								   extra[i][6] == '=');
	}
	argv[n] = NULL;
	struct stat lst;
	d->log_start = stat(d->log, &lst) == 0 ? (long)lst.st_size : 0;
	/* the daemon must never profile itself: th_spawn_logged unsets LD_PRELOAD */
	return th_spawn_logged((char *const *)argv, d->log, true, SIGTERM);
}

/* The last "serving http://HOST:PORT/..." in the log (appended to by every daemon started
 * in the same folder): PORT, or 0. */
static int heapd_log_port(const struct heapd *d)
{
	char *log = heapd_log(d);
	int port = 0;
	const char *at = NULL;
	size_t len = strlen(log), from = d->log_start > 0 && (size_t)d->log_start <= len
						? (size_t)d->log_start : 0;
	for (const char *c = log + from; (c = strstr(c, "serving http://")) != NULL; c++)
		at = c;
	if (at) {
		at += strlen("serving http://");
		const char *end = at + strcspn(at, "/ \n");
		const char *colon = NULL;
		for (const char *c = at; c < end; c++)
			if (*c == ':')
				colon = c;
		if (colon)
			port = atoi(colon + 1);
	}
	free(log);
	return port;
}

bool heapd_wait(struct heapd *d)
{
	for (int i = 0; i < 2000; i++) {
		int s = heapd_connect(d->sock);
		if (s >= 0) {
			close(s);
			if (d->http)
				d->port = heapd_log_port(d);
			if (!d->http || d->port > 0)
				return true;
		}
		int st;
		if (d->pid > 0 && waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return false;
		}
		th_sleep_ms(5);
	}
	return false;
}

void heapd_start(struct heapd *d, const char *dir, const char *const *extra)
{
	heapd_init(d, dir);
	heapd_run(d, extra);
}

void heapd_run(struct heapd *d, const char *const *extra)
{
	d->pid = heapd_spawn(d, extra);
	if (heapd_wait(d))
		return;
	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, NULL, 0);
		d->pid = 0;
	}
	char *log = heapd_log(d);
	cr_assert_fail("llgo-heapd did not start on %s%s:\n%s", d->sock,
		       d->http ? " (or logged no HTTP port)" : "", log);
}

int heapd_refusal(struct heapd *d, const char *const *extra, char **log)
{
	pid_t pid = heapd_spawn(d, extra);
	int st = -1;
	for (int i = 0; i < 2000; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
		st = -1;
		th_sleep_ms(5);
	}
	if (st == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	if (log)
		*log = heapd_log(d);
	return st;
}

bool heapd_alive(struct heapd *d)
{
	int st;
	return d->pid > 0 && waitpid(d->pid, &st, WNOHANG) == 0;
}

/* Whether every thread of pid is in the stopped state ('T' in /proc/PID/task/TID/stat). */
static bool heapd_all_stopped(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return false;
	bool all = true;
	struct dirent *e;
	while (all && (e = readdir(dir)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char stat[352], buf[512];
		snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
		FILE *f = fopen(stat, "r");
		const char *paren = NULL;
		if (f && fgets(buf, sizeof(buf), f))
			paren = strrchr(buf, ')');
		all = paren && paren[1] == ' ' && paren[2] == 'T';
		if (f)
			fclose(f);
	}
	closedir(dir);
	return all;
}

void heapd_pause(struct heapd *d)
{
	cr_assert_eq(kill(d->pid, SIGSTOP), 0);
	for (int i = 0; i < 2000 && !heapd_all_stopped(d->pid); i++)
		th_sleep_ms(1);
	cr_assert(heapd_all_stopped(d->pid), "llgo-heapd %d did not stop", (int)d->pid);
}

void heapd_resume(struct heapd *d)
{
	cr_assert_eq(kill(d->pid, SIGCONT), 0);
}

int heapd_stop(struct heapd *d)
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
		th_sleep_ms(5);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

void heapd_kill(struct heapd *d)
{
	cr_assert_eq(kill(d->pid, SIGKILL), 0);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
}

void heapd_stop_clean(struct heapd *d)
{
	cr_assert(heapd_alive(d), "llgo-heapd died:\n%s", heapd_log(d));
	int st = heapd_stop(d);
	cr_assert_neq(st, -1, "llgo-heapd did not stop on SIGTERM");
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "llgo-heapd exit status %d:\n%s", st,
		  heapd_log(d));
	struct stat sb;
	cr_expect(lstat(d->sock, &sb) < 0, "socket left behind after SIGTERM");
}

void heapd_cleanup(struct heapd *d)
{
	heapd_stop(d);
	if (!d->own_dir || getenv("LLGO_KEEP_TMP"))
		return;
	char cmd[320];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "warning: could not remove %s\n", d->dir);
}

void heapd_finish(struct heapd *d)
{
	heapd_stop_clean(d);
	heapd_cleanup(d);
}

void heapd_end(struct heapd *d)
{
	int st = heapd_stop(d);
	cr_expect_eq(st, 0, "llgo-heapd stop status %d", st);
	heapd_cleanup(d);
}

char *heapd_log(const struct heapd *d)
{
	return th_read_all(d->log);
}

/* ---- requests -------------------------------------------------------------------------------- */

int heapd_connect(const char *sock)
{
	int s, err = client_connect(sock, HEAPD_CONNECT_TIMEOUT_MS, &s);
	return err ? err : s;
}

int heapd_request(const char *sock, const void *req, size_t n, struct client_answer *a)
{
	return client_request(sock, req, n, HEAPD_ANSWER_TIMEOUT_MS, a);
}

int heapd_snapshot_answer(const char *sock, pid_t pid, uint32_t fmt, struct client_answer *a)
{
	struct llgo_msg_snapshot m;
	client_snapshot_req(&m, pid, fmt, 0, 0);
	return heapd_request(sock, &m, sizeof(m), a);
}

int heapd_set_rate(const char *sock, pid_t pid, uint64_t rate, struct client_answer *a)
{
	struct llgo_msg_set_rate m;
	client_set_rate_req(&m, pid, rate);
	return heapd_request(sock, &m, sizeof(m), a);
}

/* The last lines of the log of the daemon whose socket is sock, when heapd_start made it
 * (heapd.log beside heapd.sock): why a request failed, in the failure's message. */
static char *heapd_log_tail_of(const char *sock)
{
	char path[sizeof(((struct heapd *)0)->log)];
	const char *slash = strrchr(sock, '/');
	int n = slash ? (int)(slash - sock) : 0;
	if (!slash || snprintf(path, sizeof(path), "%.*s/heapd.log", n, sock) >= (int)sizeof(path))
		return strdup("");
	char *log = th_read_all(path);
	if (!log)
		return strdup("");
	size_t len = strlen(log), keep = 4000;
	if (len > keep)
		memmove(log, log + len - keep, keep + 1);
	return log;
}

char *heapd_snapshot(const char *sock, pid_t pid, uint32_t fmt, size_t *len)
{
	struct client_answer a;
	int rc = heapd_snapshot_answer(sock, pid, fmt, &a);
	if (rc != 0 || a.status != 0)
		cr_assert_fail("SNAPSHOT %d failed: %d, status %d %s\nthe daemon's log ends:\n%s",
			       (int)pid, rc, a.status, a.message, heapd_log_tail_of(sock));
	if (len)
		*len = a.data.len;
	return (char *)a.data.data; /* client.c keeps a NUL after the payload */
}

size_t heapd_list_all(const char *sock, struct llgo_list_entry **rows)
{
	struct llgo_msg_header h;
	client_list_req(&h);
	struct client_answer a;
	int rc = heapd_request(sock, &h, sizeof(h), &a);
	cr_assert_eq(rc, 0, "LIST failed: %d", rc);
	cr_assert_eq(a.status, 0, "LIST failed: %s", a.message);
	cr_assert_eq(a.data.len % sizeof(struct llgo_list_entry), 0);
	*rows = (struct llgo_list_entry *)(void *)a.data.data;
	return a.data.len / sizeof(struct llgo_list_entry);
}

size_t heapd_list(const char *sock, struct llgo_list_entry *out, size_t max)
{
	struct llgo_list_entry *rows;
	size_t n = heapd_list_all(sock, &rows);
	memcpy(out, rows, (n < max ? n : max) * sizeof(*rows));
	free(rows);
	return n;
}

bool heapd_list_pid(const char *sock, pid_t pid, struct llgo_list_entry *out)
{
	struct llgo_list_entry *rows;
	size_t n = heapd_list_all(sock, &rows);
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
