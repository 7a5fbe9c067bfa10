/* SPDX-License-Identifier: MIT */
/*
 * e2e_util.h: helpers for end-to-end tests that run real programs and real clients:
 * a private temporary folder, shell commands with captured output, Go's pprof tool, and a
 * parser of Go's legacy heap text. Header-only; the private llgo-heapd and the requests to it
 * are heapd.h's (one copy, tests/heapd.c, linked into every test).
 */
#ifndef LLGO_TESTS_E2E_UTIL_H
#define LLGO_TESTS_E2E_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "heapd.h"

#ifndef LLGO_BUILD_DIR
#error "LLGO_BUILD_DIR must be set by the Makefile"
#endif

#define E2E_BIN LLGO_BUILD_DIR "/bin"
#define E2E_PROGS LLGO_BUILD_DIR "/progs"
#define E2E_PROGS_SRC LLGO_SRC_DIR "/tests/progs"

/* A private folder per test, removed at the end unless LLGO_KEEP_TMP is set. */
static inline char *e2e_tmpdir(void)
{
	char *t = strdup("/tmp/llgo-e2e.XXXXXX");
	cr_assert(mkdtemp(t) != NULL, "mkdtemp: %s", strerror(errno));
	return t;
}

static inline void e2e_rmdir(char *dir)
{
	if (!getenv("LLGO_KEEP_TMP")) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", dir);
	}
	free(dir);
}

/* Run a shell command, capture stdout and stderr together (malloc'ed, NUL-terminated) and
 * return its exit status (128+signal when killed). */
static inline int e2e_sh(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int e2e_sh(char **out, const char *fmt, ...)
{
	char *cmd, *full;
	va_list ap;
	va_start(ap, fmt);
	cr_assert(vasprintf(&cmd, fmt, ap) >= 0);
	va_end(ap);
	cr_assert(asprintf(&full, "( %s ) 2>&1", cmd) >= 0);
	FILE *p = popen(full, "r");
	cr_assert(p != NULL, "popen %s", cmd);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	size_t n;
	while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (cap - len < 2048) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
	}
	buf[len] = '\0';
	int st = pclose(p);
	free(full);
	free(cmd);
	if (out)
		*out = buf;
	else
		free(buf);
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}


/* One record of Go's legacy heap text. */
struct e2e_text_rec {
	long inuse_objects, inuse_bytes, alloc_objects, alloc_bytes;
	char frame0[256]; /* function of the first "#\t0x..\tfunc+0x.." line */
	char loc0[512];   /* its "file:line" */
};

/* Parse the legacy text in s: the header's period (N in heap/N) and the records. */
static inline int e2e_parse_text(const char *s, long *period, struct e2e_text_rec *recs, int max)
{
	int n = 0;
	const char *line = s;
	*period = -1;
	struct e2e_text_rec *cur = NULL;
	while (line && *line) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char tmp[1024];
		if (len >= sizeof(tmp))
			len = sizeof(tmp) - 1;
		memcpy(tmp, line, len);
		tmp[len] = '\0';
		long a, b, c, d;
		if (strncmp(tmp, "heap profile:", 13) == 0) {
			char *at = strstr(tmp, "@ heap/");
			if (at)
				*period = atol(at + 7);
		} else if (sscanf(tmp, "%ld: %ld [%ld: %ld] @", &a, &b, &c, &d) == 4) {
			if (n < max) {
				cur = &recs[n++];
				memset(cur, 0, sizeof(*cur));
				cur->inuse_objects = a;
				cur->inuse_bytes = b;
				cur->alloc_objects = c;
				cur->alloc_bytes = d;
			} else {
				cur = NULL;
			}
		} else if (cur && tmp[0] == '#' && tmp[1] == '\t' && !cur->frame0[0]) {
			/* "#\t0x<pc>\t<func>+0x<off>\t<file>:<line>" */
			char *f = strchr(tmp + 2, '\t');
			if (f) {
				/* columns are aligned with tabs: a stack holding a wider address
				 * (the [truncated] marker) has more than one */
				while (*f == '\t')
					f++;
				char *loc = strrchr(f, '\t');
				if (loc)
					snprintf(cur->loc0, sizeof(cur->loc0), "%s", loc + 1);
				char *end = strpbrk(f, "+\t ");
				if (end)
					*end = '\0';
				snprintf(cur->frame0, sizeof(cur->frame0), "%s", f);
			}
		} else if (tmp[0] == '\0') {
			cur = NULL;
		}
		line = nl ? nl + 1 : NULL;
	}
	return n;
}

/* Sum alloc objects of records whose frame 0 is func and whose block size is size (0: any). */
static inline long e2e_count(const struct e2e_text_rec *r, int n, const char *func, long size)
{
	long total = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(r[i].frame0, func) != 0 || r[i].alloc_objects == 0)
			continue;
		if (size && r[i].alloc_bytes / r[i].alloc_objects != size)
			continue;
		total += r[i].alloc_objects;
	}
	return total;
}

static inline char *e2e_read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	size_t r = fread(s, 1, (size_t)n, f);
	s[r] = '\0';
	fclose(f);
	return s;
}

/* Start argv with extra environment (NULL-terminated "K=V" list), stdin and stdout piped. */
static inline pid_t e2e_spawn(char *const argv[], char *const env[], FILE **in, FILE **out)
{
	int pin[2], pout[2];
	cr_assert(pipe(pin) == 0 && pipe(pout) == 0);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(pin[0], 0);
		dup2(pout[1], 1);
		close(pin[0]);
		close(pin[1]);
		close(pout[0]);
		close(pout[1]);
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pin[0]);
	close(pout[1]);
	*in = fdopen(pin[1], "w");
	*out = fdopen(pout[0], "r");
	setvbuf(*in, NULL, _IOLBF, 0);
	return pid;
}

#endif
