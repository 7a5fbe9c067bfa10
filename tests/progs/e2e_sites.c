// SPDX-License-Identifier: MIT
/*
 * e2e_sites.c: allocation sites as distinct noinline functions, for exact-count checks at
 * rate 1. Usage: e2e_sites N. Prints one line per site: "site NAME SIZE COUNT".
 * Every block is freed at the end; the counts are of allocations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void *site_malloc_small(void) { void *p = malloc(24); KEEP(p); return p; }
__attribute__((noinline)) void *site_malloc_large(void) { void *p = malloc(100000); KEEP(p); return p; }
__attribute__((noinline)) void *site_calloc(void) { void *p = calloc(10, 48); KEEP(p); return p; }
__attribute__((noinline)) void *site_realloc(void *old) { void *p = realloc(old, 777); KEEP(p); return p; }
__attribute__((noinline)) void *site_aligned(void) { void *p = aligned_alloc(64, 640); KEEP(p); return p; }
__attribute__((noinline)) void *site_two_sizes(int i) { void *p = malloc(i % 2 ? 64 : 256); KEEP(p); return p; }

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	void **keep = calloc((size_t)n * 6 + 1, sizeof(void *));
	size_t k = 0;
	for (int i = 0; i < n; i++) {
		keep[k++] = site_malloc_small();
		keep[k++] = site_malloc_large();
		keep[k++] = site_calloc();
		keep[k++] = site_realloc(malloc(8));
		keep[k++] = site_aligned();
		keep[k++] = site_two_sizes(i);
	}
	for (size_t i = 0; i < k; i++)
		free(keep[i]);
	free(keep);
	printf("site site_malloc_small 24 %d\n", n);
	printf("site site_malloc_large 100000 %d\n", n);
	printf("site site_calloc 480 %d\n", n);
	printf("site site_realloc 777 %d\n", n);
	printf("site site_aligned 640 %d\n", n);
	printf("site site_two_sizes 64 %d\n", n / 2);
	printf("site site_two_sizes 256 %d\n", n - n / 2);
	return 0;
}
