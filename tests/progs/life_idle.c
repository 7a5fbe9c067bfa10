// SPDX-License-Identifier: MIT
/*
 * life_idle.c: an attached process that does nothing until told. Usage: life_idle K.
 * Makes K allocations of 333 bytes at idle_site, prints "ready", then for every line read
 * on stdin makes K more at idle_more_site (555 bytes) and prints "ready" again. Exits at EOF.
 */
#include <stdio.h>
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void idle_site(void) { void *p = malloc(333); KEEP(p); free(p); }
__attribute__((noinline)) void idle_more_site(void) { void *p = malloc(555); KEEP(p); free(p); }

int main(int argc, char **argv)
{
	long k = argc > 1 ? atol(argv[1]) : 100;
	char line[64];
	for (long i = 0; i < k; i++)
		idle_site();
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		for (long i = 0; i < k; i++)
			idle_more_site();
		printf("ready\n");
		fflush(stdout);
	}
	return 0;
}
