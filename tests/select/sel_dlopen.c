// SPDX-License-Identifier: MIT
/*
 * sel_dlopen.c: loads a plugin (argv[1], libsel_pool.so) that carries its own copy of the
 * sampler, calls its allocator N times (pool_site) and mallocs N blocks of 200 bytes from
 * malloc_site. Prints "pid PID", then "pool_rate R" and "done".
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) static void malloc_site(int n)
{
	for (int i = 0; i < n; i++) {
		void *p = malloc(200);
		KEEP(p);
		free(p);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	int n = atoi(argv[2]);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	void (*site)(int) = (void (*)(int))dlsym(h, "pool_site");
	uint64_t (*rate)(void) = (uint64_t(*)(void))dlsym(h, "pool_rate");
	if (!site || !rate)
		return 1;
	site(n);
	malloc_site(n);
	printf("pool_rate %llu\ndone\n", (unsigned long long)rate());
	return 0;
}
