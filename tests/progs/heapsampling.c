// SPDX-License-Identifier: MIT
/*
 * heapsampling.c: the workload of Go's test/heapsampling.go, in C. Each allocation site is
 * one line; the program prints "site LINE SIZE COUNT" for every site so the test can compare
 * the profile's per-line estimate with the truth.
 *
 *   heapsampling interleaved N   six sizes (17K, 1K, 18K, 512, 16K, 256) N times each
 *   heapsampling small N         three sizes (1K, 512, 256) N times each
 *   heapsampling large N         4 KiB and 64 KiB N times, 600 KiB and 4 MiB N/25 times:
 *                                sizes below, around and far above the default rate
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static void *sink;

static int lines[8];
static size_t sizes[8];
static long counts[8];
static int nsites;

/* Count one allocation of size at line; the table is tiny and allocates nothing. */
static void note(int line, size_t size)
{
	for (int i = 0; i < nsites; i++) {
		if (lines[i] == line) {
			counts[i]++;
			return;
		}
	}
	lines[nsites] = line;
	sizes[nsites] = size;
	counts[nsites] = 1;
	nsites++;
}

/* One line per site: the line number identifies the site in the profile. */
#define SITE(size)                                                                         \
	do {                                                                               \
		note(__LINE__, size); void *p = malloc(size); KEEP(p); sink = p; free(p);  \
	} while (0)

__attribute__((noinline)) static void alloc_interleaved(int n)
{
	for (int i = 0; i < n; i++) {
		SITE(17 * 1024);
		SITE(1024);
		SITE(18 * 1024);
		SITE(512);
		SITE(16 * 1024);
		SITE(256);
	}
}

__attribute__((noinline)) static void alloc_small(int n)
{
	for (int i = 0; i < n; i++) {
		SITE(1024);
		SITE(512);
		SITE(256);
	}
}

__attribute__((noinline)) static void alloc_large(int n)
{
	for (int i = 0; i < n; i++) {
		SITE(4096);
		SITE(64 * 1024);
		if (i % 25 == 0) {
			SITE(600 * 1024);
			SITE(4 * 1024 * 1024);
		}
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "interleaved";
	int n = argc > 2 ? atoi(argv[2]) : 50000;
	if (strcmp(mode, "interleaved") == 0)
		alloc_interleaved(n);
	else if (strcmp(mode, "small") == 0)
		alloc_small(n);
	else
		alloc_large(n);
	for (int i = 0; i < nsites; i++)
		printf("site %d %zu %ld\n", lines[i], sizes[i], counts[i]);
	return 0;
}
