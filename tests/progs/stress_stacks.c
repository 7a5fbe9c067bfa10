// SPDX-License-Identifier: MIT
/*
 * stress_stacks.c: many distinct buckets. Usage: stress_stacks N [wait].
 * Makes N allocations at stacks_site, allocation i of 16 + i bytes from recursion depth
 * i % 8, so every allocation is a bucket of its own (size and stack differ). Prints
 * "site stacks_site N". With "wait", then prints "ready" and waits for EOF on stdin.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void stacks_site(size_t size)
{
	void *p = malloc(size);
	KEEP(p);
	free(p);
}

__attribute__((noinline)) void stacks_descend(int depth, size_t size)
{
	if (depth > 0)
		stacks_descend(depth - 1, size);
	else
		stacks_site(size);
	__asm__ volatile("" ::: "memory"); /* no tail call: every level keeps its frame */
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	for (long i = 0; i < n; i++)
		stacks_descend((int)(i % 8), 16 + (size_t)i);
	printf("site stacks_site %ld\n", n);
	fflush(stdout);
	if (argc > 2 && strcmp(argv[2], "wait") == 0) {
		char line[64];
		printf("ready\n");
		fflush(stdout);
		while (fgets(line, sizeof(line), stdin))
			;
	}
	return 0;
}
