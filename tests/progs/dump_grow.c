// SPDX-License-Identifier: MIT
/*
 * dump_grow.c: a process that keeps memory at one site, for llgo-heapd's own snapshots
 * (tests/test_dump.c). dump_grow MB: dump_grow_site allocates and touches 1 MiB blocks and
 * keeps them, dump_small_site a few small blocks beside; after MB MiB (0: never, until the
 * OOM killer comes) it prints "grown" and sleeps until killed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile keep_small[64];

__attribute__((noinline)) static void *dump_grow_site(size_t n)
{
	void *p = malloc(n);
	if (p)
		memset(p, 0x5a, n); /* resident: the memory cgroup counts it */
	return p;
}

__attribute__((noinline)) static void dump_small_site(int i)
{
	keep_small[i % 64] = malloc(4096);
}

int main(int argc, char **argv)
{
	long mb = argc > 1 ? atol(argv[1]) : 0;
	void **blocks = calloc(1 << 16, sizeof(*blocks));
	for (long i = 0; mb == 0 || i < mb; i++) {
		blocks[i % (1 << 16)] = dump_grow_site(1 << 20);
		if (i % 16 == 0)
			dump_small_site((int)i);
		if (mb == 0 && i % 8 == 0)
			usleep(2000); /* leave the daemon time to drain before the end */
	}
	printf("grown\n");
	fflush(stdout);
	for (;;)
		pause();
}
