// SPDX-License-Identifier: MIT
/*
 * lifecycle_bench.c: what the shim's lifecycle costs a process, in wall time, side by side
 * with no shim in the same run (docs/performance.md, "Process lifecycle").
 *
 *   lifecycle_bench spawn SHIM SOCKET N CMD [ARG...]
 *       Runs CMD N times with LD_PRELOAD=SHIM (LLGO_HEAP_SOCKET=SOCKET) and N times without,
 *       interleaved, each start to exit (posix_spawn .. waitpid); prints the medians and the
 *       difference in microseconds.
 *   lifecycle_bench fork N THREADS
 *       With THREADS busy threads, fork()s N children that _exit(0) at once, timing fork()
 *       in the parent and fork to the child's reaping; prints medians in microseconds, and the
 *       median CPU time fork() took in the forking thread (CLOCK_THREAD_CPUTIME_ID: the
 *       kernel's copy and the fork handlers, without the time the busy threads held the
 *       CPU). Run it with and without the shim preloaded (bench.sh does) to compare.
 *
 * Timing is CLOCK_MONOTONIC around each operation; the medians are robust to the other work
 * on a shared 2-core machine, and every comparison is made inside one run.
 */
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double bench_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double bench_cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The environment without LD_PRELOAD and LLGO_HEAP_*, plus extra (may be NULL). */
static char **bench_env(const char *extra1, const char *extra2)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 3, sizeof(*env));
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) && strncmp(environ[i], "LLGO_HEAP_", 10))
			env[k++] = environ[i];
	if (extra1)
		env[k++] = (char *)extra1;
	if (extra2)
		env[k++] = (char *)extra2;
	return env;
}

static double bench_spawn_once(char **argv, char **env)
{
	double t0 = bench_now_us();
	pid_t pid;
	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, env) != 0)
		return -1;
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return bench_now_us() - t0;
}

static int bench_spawn(const char *shim, const char *sock, int n, char **argv)
{
	char pre[4096], sk[4096];
	snprintf(pre, sizeof(pre), "LD_PRELOAD=%s", shim);
	snprintf(sk, sizeof(sk), "LLGO_HEAP_SOCKET=%s", sock);
	char **with = bench_env(pre, sk), **without = bench_env(NULL, NULL);
	double *a = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double));
	for (int i = 0; i < 5; i++) { /* warm the page cache */
		bench_spawn_once(argv, without);
		bench_spawn_once(argv, with);
	}
	for (int i = 0; i < n; i++) {
		a[i] = bench_spawn_once(argv, without);
		b[i] = bench_spawn_once(argv, with);
		if (a[i] < 0 || b[i] < 0) {
			fprintf(stderr, "lifecycle_bench: %s failed\n", argv[0]);
			return 1;
		}
	}
	double ma = bench_median(a, n), mb = bench_median(b, n);
	printf("plain_us %.1f shim_us %.1f added_us %.1f\n", ma, mb, mb - ma);
	return 0;
}

static atomic_int bench_stop;

static void *bench_busy(void *arg)
{
	volatile unsigned long x = 0;
	while (!atomic_load_explicit(&bench_stop, memory_order_relaxed)) {
		void *p = malloc(64 + (x & 255));
		x += (unsigned long)(uintptr_t)p;
		free(p);
	}
	return arg;
}

static int bench_fork(int n, int nthreads)
{
	pthread_t th[64];
	if (nthreads > 64)
		nthreads = 64;
	for (int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, bench_busy, NULL);
	double *f = calloc((size_t)n, sizeof(double)), *r = calloc((size_t)n, sizeof(double));
	double *c = calloc((size_t)n, sizeof(double));
	for (int i = 0; i < n; i++) {
		double c0 = bench_cpu_us(), t0 = bench_now_us();
		pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		double t1 = bench_now_us();
		c[i] = bench_cpu_us() - c0;
		int st;
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			return 1;
		f[i] = t1 - t0;
		r[i] = bench_now_us() - t0;
	}
	atomic_store(&bench_stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	printf("fork_us %.1f fork_to_reaped_us %.1f fork_cpu_us %.1f\n", bench_median(f, n),
	       bench_median(r, n), bench_median(c, n));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 6 && strcmp(argv[1], "spawn") == 0)
		return bench_spawn(argv[2], argv[3], atoi(argv[4]), argv + 5);
	if (argc == 4 && strcmp(argv[1], "fork") == 0)
		return bench_fork(atoi(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: lifecycle_bench spawn SHIM SOCKET N CMD [ARG...] | fork N THREADS\n");
	return 2;
}
