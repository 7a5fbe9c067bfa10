// SPDX-License-Identifier: MIT
/* libe2e_plugin.c: a shared library the e2e_lines program dlopens after start, so that its
 * allocation site is in a mapping the daemon learns about only after dlopen. */
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void *plugin_alloc(size_t n)
{
	void *p = malloc(n);
	KEEP(p);
	return p;
}
