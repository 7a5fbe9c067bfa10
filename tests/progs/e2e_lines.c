// SPDX-License-Identifier: MIT
/*
 * e2e_lines.c: allocation sites for file:line attribution: a plain noinline site, a
 * `static inline` helper inlined into two callers, and a site in a library loaded with
 * dlopen after start. Usage: e2e_lines PLUGIN.so N
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static inline __attribute__((always_inline)) void *inline_helper(size_t n)
{
	void *p = malloc(n); /* inline_helper_site */
	KEEP(p);
	return p;
}

__attribute__((noinline)) void *caller_one(void)
{
	return inline_helper(111);
}

__attribute__((noinline)) void *caller_two(void)
{
	return inline_helper(222);
}

__attribute__((noinline)) void *plain_site(void)
{
	void *p = malloc(333); /* plain_site_line */
	KEEP(p);
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: e2e_lines PLUGIN.so N\n");
		return 2;
	}
	int n = atoi(argv[2]);
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	void *(*plugin_alloc)(size_t) = (void *(*)(size_t))dlsym(h, "plugin_alloc");
	for (int i = 0; i < n; i++) {
		free(caller_one());
		free(caller_two());
		free(plain_site());
		free(plugin_alloc(444));
	}
	printf("lines done %d\n", n);
	return 0;
}
