// SPDX-License-Identifier: MIT
/*
 * e2e_ratectl.c: a long-running program driven over stdin, for runtime rate changes.
 * Each input line "N SIZE" makes N allocations of SIZE bytes at one site and answers
 * "ok N SIZE"; EOF ends the program.
 */
#include <stdio.h>
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void ratectl_site(size_t size)
{
	void *p = malloc(size);
	KEEP(p);
	free(p);
}

int main(void)
{
	long n;
	size_t size;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (scanf("%ld %zu", &n, &size) == 2) {
		for (long i = 0; i < n; i++)
			ratectl_site(size);
		printf("ok %ld %zu\n", n, size);
	}
	return 0;
}
