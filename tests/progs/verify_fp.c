// SPDX-License-Identifier: MIT
/*
 * verify_fp.c: a frame-pointer program for `llgo-heap verify`: allocates and frees without
 * pause for SECONDS (default 10), from several call sites at several depths, in THREADS
 * threads (default 2). Prints "ready PID" once running. Usage: verify_fp [SECONDS [THREADS]].
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static double seconds = 10;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) static void leaf_malloc(size_t n)
{
	void *p = malloc(n);
	KEEP(p);
	free(p);
}

__attribute__((noinline)) static void leaf_calloc(size_t n)
{
	void *p = calloc(n / 16 + 1, 16);
	KEEP(p);
	free(p);
}

__attribute__((noinline)) static void leaf_realloc(size_t n)
{
	void *p = realloc(malloc(8), n);
	KEEP(p);
	free(p);
}

/* depth distinct frames between the thread's loop and the allocation */
__attribute__((noinline)) static void descend(int depth, int kind, size_t n)
{
	if (depth > 0) {
		descend(depth - 1, kind, n);
		KEEP(depth);
		return;
	}
	if (kind == 0)
		leaf_malloc(n);
	else if (kind == 1)
		leaf_calloc(n);
	else
		leaf_realloc(n);
}

static void *worker(void *arg)
{
	unsigned i = (unsigned)(size_t)arg;
	double end = now() + seconds;
	while (now() < end) {
		for (int k = 0; k < 1000; k++, i++)
			descend((int)(i % 7), (int)(i % 3), 16 + (i % 64) * 8);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = atof(argv[1]);
	int threads = argc > 2 ? atoi(argv[2]) : 2;
	if (threads < 1 || threads > 64)
		threads = 2;
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	pthread_t t[64];
	for (int i = 1; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(size_t)(i * 7919));
	worker(NULL);
	for (int i = 1; i < threads; i++)
		pthread_join(t[i], NULL);
	return 0;
}
