// SPDX-License-Identifier: MIT
/*
 * sandbox_crash.c: a program whose code makes the test build of the symbolizer crash
 * (tests/test_sandbox.c). Usage: sandbox_crash K. Makes K allocations of 888 bytes at
 * sbx_prog_site and K of 777 at sandbox_test_crash (the name the hooked symbolizer aborts
 * on), prints "ready", and exits at EOF on stdin.
 */
#include <stdio.h>
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void sbx_prog_site(void) { void *p = malloc(888); KEEP(p); free(p); }
__attribute__((noinline)) void sandbox_test_crash(void) { void *p = malloc(777); KEEP(p); free(p); }

int main(int argc, char **argv)
{
	long k = argc > 1 ? atol(argv[1]) : 100;
	char line[64];
	for (long i = 0; i < k; i++) {
		sbx_prog_site();
		sandbox_test_crash();
	}
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
