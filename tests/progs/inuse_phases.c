// SPDX-License-Identifier: MIT
/*
 * inuse_phases.c: objects that outlive a rate change or a fork, for tests/test_inuse.c.
 *   inuse_phases rate N   N x malloc(128) at site_before, kept; prints "ready"; on a line of
 *                         stdin frees them all, makes N x malloc(256) at site_after (kept),
 *                         prints "ready"; exits at the next line (or EOF).
 *   inuse_phases fork N   N x malloc(128) at site_before, kept; forks: the child frees them
 *                         all, makes N x malloc(512) at site_child (kept) and exits; the parent
 *                         waits for it, prints "ready <childpid>" and exits at the next line.
 *   inuse_phases forkrace N
 *                         N x malloc(1000) at site_before, kept; forks: the parent frees them
 *                         all and makes N x malloc(1000) again (placed objects at new offsets,
 *                         the same addresses) while the child waits, then the child grows
 *                         half of its copies with realloc (contents and usable size checked),
 *                         frees them all and exits 0; the parent prints "ready <child's wait
 *                         status>" (and exits 6 if a calloc'ed block was not zero).
 *   inuse_phases churn N K  N x malloc(32) at site_churn, each freed at once, then K x
 *                         malloc(64) at site_kept, kept; prints "ready"; exits at the next
 *                         line (or EOF).
 *   inuse_phases peak N MS  the peak view (tests/test_peak.c): N x malloc(1024) at
 *                         site_peak_a, held for MS ms, all freed, then N/4 x malloc(1024) at
 *                         site_peak_b, kept; prints "ready"; exits at the next line (or EOF).
 *   inuse_phases climb N    N x malloc(16) at site_climb, kept: every allocation a new
 *                         highest in-use total; prints "ready"; exits at the next line.
 */
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void *site_before(void) { void *p = malloc(128); KEEP(p); return p; }
__attribute__((noinline)) void *site_after(void) { void *p = malloc(256); KEEP(p); return p; }
__attribute__((noinline)) void *site_child(void) { void *p = malloc(512); KEEP(p); return p; }
__attribute__((noinline)) void *site_race(void) { void *p = malloc(1000); KEEP(p); return p; }
__attribute__((noinline)) void *site_churn(void) { void *p = malloc(32); KEEP(p); return p; }
__attribute__((noinline)) void *site_kept(void) { void *p = malloc(64); KEEP(p); return p; }
__attribute__((noinline)) void *site_peak_a(void) { void *p = malloc(1024); KEEP(p); return p; }
__attribute__((noinline)) void *site_peak_b(void) { void *p = malloc(1024); KEEP(p); return p; }
__attribute__((noinline)) void *site_climb(void) { void *p = malloc(16); KEEP(p); return p; }

/* stdin's buffer, not one glibc would allocate at the first fgets after "ready"; and an
 * array of n + 1 pointers (NULL: out of memory). */
static void **phases_start(long n)
{
	static char inbuf[4096];
	setvbuf(stdin, inbuf, _IOFBF, sizeof(inbuf));
	return calloc((size_t)n + 1, sizeof(void *));
}

/* Wait for a line of stdin (or EOF) after saying "ready". */
static int phases_ready_wait(void)
{
	char line[64];
	printf("ready\n");
	fflush(stdout);
	(void)!fgets(line, sizeof(line), stdin);
	return 0;
}

static int phases_peak(long n, long hold_ms)
{
	void **v = phases_start(n);
	if (!v)
		return 1;
	for (long i = 0; i < n; i++)
		v[i] = site_peak_a();
	struct timespec ts = { hold_ms / 1000, (hold_ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
	for (long i = 0; i < n; i++)
		free(v[i]);
	for (long i = 0; i < n / 4; i++)
		v[i] = site_peak_b();
	return phases_ready_wait();
}

static int phases_climb(long n)
{
	void **v = phases_start(n);
	if (!v)
		return 1;
	for (long i = 0; i < n; i++)
		v[i] = site_climb();
	return phases_ready_wait();
}

static int phases_churn(long n, long k)
{
	void **v = phases_start(k);
	if (!v)
		return 1;
	for (long i = 0; i < n; i++)
		free(site_churn());
	for (long i = 0; i < k; i++)
		v[i] = site_kept();
	return phases_ready_wait();
}

/* The parent changes its table after fork, before the child first touches the shim. */
static int phases_forkrace(long n)
{
	void **v = calloc((size_t)n, sizeof(void *));
	for (long i = 0; i < n; i++)
		v[i] = site_race();
	int go[2];
	if (!v || pipe(go) != 0)
		return 1;
	pid_t c = fork();
	if (c < 0)
		return 1;
	if (c == 0) {
		char b;
		close(go[1]);
		if (read(go[0], &b, 1) != 1)
			_exit(3);
		/* every other copy grows first: realloc and malloc_usable_size of inherited
		 * objects, with their contents kept */
		for (long i = 0; i < n; i += 2) {
			memset(v[i], (int)(i & 0x7f), 1000);
			if (malloc_usable_size(v[i]) < 1000)
				_exit(4);
			unsigned char *q = realloc(v[i], 3000);
			if (!q || q[0] != (unsigned char)(i & 0x7f) || q[999] != q[0])
				_exit(5);
			v[i] = q;
		}
		for (long i = 0; i < n; i++)
			free(v[i]);
		_exit(0);
	}
	close(go[0]);
	for (long i = 0; i < n; i++) {
		memset(v[i], 0xee, 1000);
		free(v[i]);
	}
	/* blocks freed dirty come back zeroed through calloc */
	for (long i = 0; i < n; i++) {
		unsigned char *z = calloc(1, 1000);
		for (int k = 0; z && k < 1000; k++)
			if (z[k])
				return 6;
		free(z);
	}
	for (long i = 0; i < n; i++)
		v[i] = site_race();
	if (write(go[1], "g", 1) != 1)
		return 1;
	int st = 0;
	waitpid(c, &st, 0);
	printf("ready %d\n", st);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	long n = atol(argv[2]);
	if (strcmp(argv[1], "forkrace") == 0)
		return phases_forkrace(n);
	if (strcmp(argv[1], "churn") == 0)
		return phases_churn(n, argc > 3 ? atol(argv[3]) : 0);
	if (strcmp(argv[1], "peak") == 0)
		return phases_peak(n, argc > 3 ? atol(argv[3]) : 0);
	if (strcmp(argv[1], "climb") == 0)
		return phases_climb(n);
	void **v = calloc((size_t)n, sizeof(void *));
	char line[64];
	/* stdin's buffer, not one glibc would allocate at the first fgets after "ready" */
	static char inbuf[4096];
	setvbuf(stdin, inbuf, _IOFBF, sizeof(inbuf));
	for (long i = 0; i < n; i++)
		v[i] = site_before();
	if (strcmp(argv[1], "rate") == 0) {
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		for (long i = 0; i < n; i++)
			free(v[i]);
		for (long i = 0; i < n; i++)
			v[i] = site_after();
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 0;
		return 0;
	}
	pid_t c = fork();
	if (c < 0)
		return 1;
	if (c == 0) {
		for (long i = 0; i < n; i++)
			free(v[i]);
		for (long i = 0; i < n; i++)
			v[i] = site_child();
		_exit(0);
	}
	int st;
	waitpid(c, &st, 0);
	printf("ready %d\n", (int)c);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 0;
	return 0;
}
