// SPDX-License-Identifier: MIT
/* debuginfod_prog.c: allocations in static functions, for tests/test_debuginfod.c (which
 * strips a copy of it and serves its debug info). The lines marked @ are checked. */
#include <stdio.h>
#include <stdlib.h>

static __attribute__((noinline)) void *dbgd_leaf(size_t n)
{
	void *p = malloc(n); /* @leaf */
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

static __attribute__((noinline)) void dbgd_caller(void)
{
	for (int i = 0; i < 1000; i++)
		free(dbgd_leaf(4096 + (size_t)i)); /* @caller */
}

int main(void)
{
	dbgd_caller(); /* @main */
	puts("done");
	return 0;
}
