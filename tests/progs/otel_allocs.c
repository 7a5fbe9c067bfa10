// SPDX-License-Identifier: MIT
/*
 * otel_allocs.c: objects whose addresses and sizes the program states, for tests/test_otel.c
 * (OpenTelemetry's otel_memory probes).
 *   otel_allocs N T   T threads each make N objects, in turn with malloc, calloc, realloc (a
 *                     malloc grown by realloc), posix_memalign and aligned_alloc, sizes from
 *                     a fixed sequence of 1 B..40 KB, and keep them all; then prints
 *                     "obj ADDRESS SIZE" (hex address, decimal size asked) for each and
 *                     "held"; at a line of stdin frees them all and prints "freed"; exits 0
 *                     at the next line (or EOF). Exits 1 when an allocation fails.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct otel_obj {
	void *p;
	size_t size;
};

struct otel_worker {
	pthread_t th;
	long n, first;
	struct otel_obj *objs;
	int failed;
};

static size_t otel_size(long i)
{
	return 1 + (size_t)((i * 7919) % 40000);
}

static void *otel_make(long i, size_t size)
{
	void *p = NULL;
	switch (i % 5) {
	case 0:
		return malloc(size);
	case 1:
		return calloc(1, size);
	case 2:
		p = malloc(size / 2 + 1);
		return p ? realloc(p, size) : NULL;
	case 3:
		return posix_memalign(&p, 64, size) == 0 ? p : NULL;
	default:
		return aligned_alloc(32, (size + 31) & ~(size_t)31);
	}
}

static void *otel_work(void *arg)
{
	struct otel_worker *w = arg;
	for (long k = 0; k < w->n; k++) {
		long i = w->first + k;
		size_t size = otel_size(i);
		if (i % 5 == 4)
			size = (size + 31) & ~(size_t)31; /* what aligned_alloc was asked */
		void *p = otel_make(i, size);
		if (!p) {
			w->failed = 1;
			break;
		}
		memset(p, (int)(i & 0xff), size);
		w->objs[k].p = p;
		w->objs[k].size = size;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000, threads = argc > 2 ? atol(argv[2]) : 2;
	if (n < 1 || threads < 1 || threads > 16)
		return 2;
	static char inbuf[4096];
	setvbuf(stdin, inbuf, _IOFBF, sizeof(inbuf));
	struct otel_worker w[16];
	memset(w, 0, sizeof(w));
	for (long t = 0; t < threads; t++) {
		w[t].n = n;
		w[t].first = t * n;
		w[t].objs = calloc((size_t)n, sizeof(struct otel_obj));
		if (!w[t].objs || pthread_create(&w[t].th, NULL, otel_work, &w[t]) != 0)
			return 1;
	}
	int failed = 0;
	for (long t = 0; t < threads; t++) {
		pthread_join(w[t].th, NULL);
		failed |= w[t].failed;
	}
	if (failed)
		return 1;
	for (long t = 0; t < threads; t++)
		for (long k = 0; k < n; k++)
			printf("obj %lx %zu\n", (unsigned long)(uintptr_t)w[t].objs[k].p,
			       w[t].objs[k].size);
	printf("held\n");
	fflush(stdout);
	char line[64];
	(void)!fgets(line, sizeof(line), stdin);
	for (long t = 0; t < threads; t++)
		for (long k = 0; k < n; k++)
			free(w[t].objs[k].p);
	printf("freed\n");
	fflush(stdout);
	(void)!fgets(line, sizeof(line), stdin);
	return 0;
}
