// SPDX-License-Identifier: MIT
/*
 * http_sites.c: a long-running profiled program for the HTTP tests. Each round allocates
 * from two sites (http_site_keep: blocks kept until exit; http_site_churn: freed at once),
 * then prints "ready R" and waits for a line on stdin: "more" runs another round, from a
 * third site the first round never used (http_site_late), "nodump" makes the process not
 * dumpable (its /proc/PID becomes root's, as after a setuid exec) and runs another round,
 * EOF or "quit" exits.
 * Usage: http_sites N (allocations per site and round).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void *http_site_keep(void) { void *p = malloc(4096); KEEP(p); return p; }
__attribute__((noinline)) void http_site_churn(void) { void *p = malloc(512); KEEP(p); free(p); }
__attribute__((noinline)) void *http_site_late(void) { void *p = malloc(8192); KEEP(p); return p; }

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	size_t cap = (size_t)n * 16, k = 0;
	void **keep = calloc(cap, sizeof(void *));
	char line[64];
	for (int round = 0;; round++) {
		for (int i = 0; i < n && k < cap; i++) {
			keep[k++] = round ? http_site_late() : http_site_keep();
			http_site_churn();
		}
		printf("ready %d\n", round);
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			break;
		if (strncmp(line, "nodump", 6) == 0)
			prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
		else if (strncmp(line, "more", 4) != 0)
			break;
	}
	for (size_t i = 0; i < k; i++)
		free(keep[i]);
	free(keep);
	return 0;
}
