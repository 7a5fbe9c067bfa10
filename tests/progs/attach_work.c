// SPDX-License-Identifier: MIT
/*
 * attach_work.c: a C program that allocates all the time, for tests/test_attach.c (llgo-heap
 * attach and detach while it runs).
 *
 *   attach_work run THREADS     rounds on THREADS threads until stdin says "stop"
 *   attach_work fixed ROUNDS THREADS   exactly ROUNDS rounds, then the same report
 *
 * A round's work depends on its number only (the threads take numbers from one counter), so
 * the report "rounds=R sum=S bad=B" of a run stopped after R rounds equals `fixed R`'s,
 * whatever was attached meanwhile. Each round uses every allocation function the shim routes
 * (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc,
 * malloc_usable_size, free) and keeps blocks across rounds in a ring per thread, so blocks
 * made before an attach are freed, realloc'ed and measured while attached, and blocks made
 * while attached after the detach. Every block carries its round and size in its first bytes
 * and a fill pattern, checked before it is realloc'ed or freed: a block the shim moved,
 * shrank or freed wrongly counts in bad.
 *
 * Commands on stdin (one a line), answered on stdout: "where" prints which object the
 * program's malloc, free and realloc entries lead to (its GOT: libllgoheap.so while attached,
 * libc.so.6 otherwise); "plugin PATH" dlopens PATH and calls its attach_plug_alloc 2000 times
 * (a module loaded while attached); "stop" ends the rounds and prints the report.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEEP 512
#define PER_ROUND 64
#define MAX_THREADS 16

static pthread_mutex_t claim_lock = PTHREAD_MUTEX_INITIALIZER;
static long next_round;
static long max_rounds = -1; /* fixed: the last round + 1 */
static _Atomic int stopping;
static _Atomic unsigned long long total_sum, total_bad;

struct blk {
	uint64_t round, size;
};

static size_t size_of(long round, int j)
{
	uint64_t x = (uint64_t)round * 2654435761u + (uint64_t)j * 40503u;
	x ^= x >> 13;
	switch (j % 8) {
	case 0:
		return 5000 + x % 60000; /* large */
	case 1:
		return 4096 * (1 + x % 4); /* page multiples */
	default:
		return 16 + x % 1500;
	}
}

static void fill(unsigned char *p, size_t n, uint64_t round)
{
	struct blk b = { round, n };
	memcpy(p, &b, sizeof(b));
	for (size_t i = sizeof(b); i < n; i++)
		p[i] = (unsigned char)(round + i);
}

/* The block's own header and pattern, up to n bytes; 1 when wrong. */
static int check(const unsigned char *p, size_t n)
{
	struct blk b;
	memcpy(&b, p, sizeof(b));
	if (b.size < sizeof(b) || (n && b.size < n))
		return 1;
	size_t upto = n ? n : b.size;
	for (size_t i = sizeof(b); i < upto; i += 97)
		if (p[i] != (unsigned char)(b.round + i))
			return 1;
	return 0;
}

__attribute__((noinline)) void *c_site_malloc(size_t n)
{
	void *p = malloc(n);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

__attribute__((noinline)) void *c_site_calloc(size_t n)
{
	void *p = calloc(1, n);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

__attribute__((noinline)) void *c_site_aligned(int kind, size_t n)
{
	void *p = NULL;
	switch (kind) {
	case 0:
		if (posix_memalign(&p, 64, n) != 0)
			p = NULL;
		break;
	case 1:
		p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
		break;
	case 2:
		p = memalign(256, n);
		break;
	default:
		p = valloc(n);
		break;
	}
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

__attribute__((noinline)) void *c_site_realloc(void *p, size_t n)
{
	void *q = realloc(p, n);
	__asm__ volatile("" : : "r"(q) : "memory");
	return q;
}

static void round_work(long round, unsigned char **keep, unsigned long long *sum,
		       unsigned long long *bad)
{
	for (int j = 0; j < PER_ROUND; j++) {
		size_t n = size_of(round, j);
		unsigned char *p;
		if (j % 4 == 0)
			p = c_site_malloc(n);
		else if (j % 4 == 1)
			p = c_site_calloc(n);
		else if (j % 8 == 2)
			p = c_site_aligned((int)((round + j) % 4), n);
		else
			p = c_site_malloc(n);
		if (!p) {
			(*bad)++;
			continue;
		}
		if (j % 4 == 1 && (p[0] | p[n / 2] | p[n - 1]))
			(*bad)++; /* calloc must clear */
		fill(p, n, (uint64_t)round);
		if (malloc_usable_size(p) < n)
			(*bad)++;
		*sum += n + p[n - 1];
		size_t slot = ((size_t)round * PER_ROUND + (size_t)j) * 7919u % KEEP;
		unsigned char *old = keep[slot];
		if (old) {
			struct blk b;
			memcpy(&b, old, sizeof(b));
			*bad += (unsigned long long)check(old, 0);
			if (j % 3 == 0) {
				/* an older block grown or shrunk: its first bytes stay */
				size_t nn = size_of(round, j + 1000);
				size_t keepn = nn < b.size ? nn : b.size;
				unsigned char *q = c_site_realloc(old, nn);
				if (!q) {
					(*bad)++;
				} else {
					struct blk b2;
					memcpy(&b2, q, sizeof(b2));
					if (b2.round != b.round || check(q, keepn))
						(*bad)++;
					free(q);
				}
			} else {
				free(old);
			}
		}
		keep[slot] = p;
	}
}

static void *worker(void *arg)
{
	(void)arg;
	unsigned char **keep = calloc(KEEP, sizeof(*keep));
	unsigned long long sum = 0, bad = 0;
	for (;;) {
		/* rounds [0, next_round) are the ones done: claimed under the lock that stop
		 * takes too */
		pthread_mutex_lock(&claim_lock);
		long r = next_round;
		bool go = max_rounds >= 0 ? r < max_rounds : !atomic_load(&stopping);
		if (go)
			next_round = r + 1;
		pthread_mutex_unlock(&claim_lock);
		if (!go)
			break;
		round_work(r, keep, &sum, &bad);
	}
	for (int i = 0; i < KEEP; i++)
		if (keep[i]) {
			bad += (unsigned long long)check(keep[i], 0);
			free(keep[i]);
		}
	free(keep);
	atomic_fetch_add(&total_sum, sum);
	atomic_fetch_add(&total_bad, bad);
	return NULL;
}

/* The object an address lies in, by its file's base name. */
static const char *object_of(void *f)
{
	Dl_info di;
	if (!dladdr(f, &di) || !di.dli_fname)
		return "?";
	const char *s = strrchr(di.dli_fname, '/');
	return s ? s + 1 : di.dli_fname;
}

/* What the program's GOT holds now (read with an instruction the compiler cannot fold). */
static void where(void)
{
	void *m, *f, *r;
	__asm__ volatile("movq malloc@GOTPCREL(%%rip), %0" : "=r"(m));
	__asm__ volatile("movq free@GOTPCREL(%%rip), %0" : "=r"(f));
	__asm__ volatile("movq realloc@GOTPCREL(%%rip), %0" : "=r"(r));
	printf("where malloc=%s free=%s realloc=%s\n", object_of(m), object_of(f), object_of(r));
	fflush(stdout);
}

static void plugin(const char *path)
{
	void *h = dlopen(path, RTLD_NOW);
	if (!h) {
		printf("plugin error %s\n", dlerror());
		fflush(stdout);
		return;
	}
	void *(*alloc)(size_t) = (void *(*)(size_t))dlsym(h, "attach_plug_alloc");
	const char *(*got)(void) = (const char *(*)(void))dlsym(h, "attach_plug_malloc_object");
	unsigned long long n = 0;
	for (int i = 0; alloc && i < 2000; i++) {
		void *p = alloc(100000);
		n += p != NULL;
		free(p);
	}
	printf("plugin allocs=%llu malloc=%s\n", n, got ? got() : "?");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int threads = 1;
	if (argc >= 3 && strcmp(argv[1], "run") == 0) {
		threads = atoi(argv[2]);
	} else if (argc >= 4 && strcmp(argv[1], "fixed") == 0) {
		max_rounds = atol(argv[2]);
		threads = atoi(argv[3]);
	} else {
		fprintf(stderr, "usage: attach_work run THREADS | fixed ROUNDS THREADS\n");
		return 2;
	}
	if (threads < 1 || threads > MAX_THREADS)
		threads = 1;
	pthread_t t[MAX_THREADS];
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	if (max_rounds < 0) {
		printf("ready\n");
		fflush(stdout);
		char line[4096];
		while (fgets(line, sizeof(line), stdin)) {
			line[strcspn(line, "\n")] = '\0';
			if (strcmp(line, "where") == 0)
				where();
			else if (strncmp(line, "plugin ", 7) == 0)
				plugin(line + 7);
			else if (strcmp(line, "rounds") == 0) {
				pthread_mutex_lock(&claim_lock);
				printf("rounds %ld\n", next_round);
				pthread_mutex_unlock(&claim_lock);
				fflush(stdout);
			} else if (strcmp(line, "stop") == 0)
				break;
		}
		pthread_mutex_lock(&claim_lock);
		atomic_store(&stopping, 1);
		pthread_mutex_unlock(&claim_lock);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	printf("rounds=%ld sum=%llu bad=%llu\n",
	       next_round,
	       (unsigned long long)atomic_load(&total_sum),
	       (unsigned long long)atomic_load(&total_bad));
	return 0;
}
