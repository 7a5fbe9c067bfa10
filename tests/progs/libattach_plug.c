// SPDX-License-Identifier: MIT
/* libattach_plug.c: a library attach_work dlopens while it is attached (tests/test_attach.c):
 * its allocation site must show in the profile, and its GOT must lead to the shim. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void *attach_plug_alloc(size_t n)
{
	void *p = malloc(n);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

/* The object this library's malloc entry leads to. */
const char *attach_plug_malloc_object(void)
{
	void *m;
	__asm__ volatile("movq malloc@GOTPCREL(%%rip), %0" : "=r"(m));
	Dl_info di;
	if (!dladdr(m, &di) || !di.dli_fname)
		return "?";
	const char *s = strrchr(di.dli_fname, '/');
	return s ? s + 1 : di.dli_fname;
}
