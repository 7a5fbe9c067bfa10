// SPDX-License-Identifier: MIT
/*
 * life_restart.c: a program that keeps allocating while its daemon is killed and restarted,
 * for test_liveness.c. Usage: life_restart K N
 *   1. bursts of K allocations of 72 bytes at before_site, 2 ms apart, until a line arrives on
 *      stdin (the test kills and restarts the daemon meanwhile; these samples take the shim
 *      to the new daemon);
 *   2. then exactly N allocations of 144 bytes at after_site (made only after the test saw
 *      the process back in the new daemon's list), and "site after_site 144 N";
 *   3. "site before_site 72 M" (M made in step 1), then it waits for EOF on stdin and exits 0.
 * An alarm ends a hung run (killed by SIGALRM).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void before_site(void) { void *p = malloc(72); KEEP(p); free(p); }
__attribute__((noinline)) void after_site(void) { void *p = malloc(144); KEEP(p); free(p); }

int main(int argc, char **argv)
{
	long k = argc > 1 ? atol(argv[1]) : 50;
	long n = argc > 2 ? atol(argv[2]) : 1000;
	long before = 0;
	alarm(120);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		for (long i = 0; i < k; i++)
			before_site();
		before += k;
		struct pollfd pf = { .fd = 0, .events = POLLIN };
		if (poll(&pf, 1, 2) > 0)
			break;
	}
	char line[64];
	if (!fgets(line, sizeof(line), stdin))
		return 2;
	for (long i = 0; i < n; i++)
		after_site();
	printf("site after_site 144 %ld\n", n);
	printf("site before_site 72 %ld\n", before);
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin))
		;
	return 0;
}
