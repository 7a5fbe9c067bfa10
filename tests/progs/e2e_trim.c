// SPDX-License-Identifier: MIT
/*
 * e2e_trim.c: a toy allocator layered over malloc (pool_alloc -> pool_refill), called from
 * user code, for the daemon's --trim option: with `--trim 'pool_*'` frame 0 must be the
 * user's function. Usage: e2e_trim N
 */
#include <stdio.h>
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void *pool_refill(size_t n)
{
	void *p = malloc(n);
	KEEP(p);
	return p;
}

__attribute__((noinline)) void *pool_alloc(size_t n)
{
	void *p = pool_refill(n);
	KEEP(p);
	return p;
}

__attribute__((noinline)) void user_builds_index(void)
{
	void *p = pool_alloc(4000);
	KEEP(p);
	free(p);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	for (int i = 0; i < n; i++)
		user_builds_index();
	printf("trim done %d\n", n);
	return 0;
}
