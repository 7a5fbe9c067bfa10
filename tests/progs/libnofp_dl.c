// SPDX-License-Identifier: MIT
/* libnofp_dl.c: an -O2 library without frame pointers that nofp_chains dlopens. */
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) static void *dl_inner(size_t n)
{
	void *p = malloc(n); /* @dl_inner */
	KEEP(p);
	return p;
}

__attribute__((noinline)) void *dl_alloc(size_t n)
{
	void *p = dl_inner(n + 1); /* @dl_alloc */
	KEEP(p);
	return p;
}
