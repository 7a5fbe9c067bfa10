// SPDX-License-Identifier: MIT
/*
 * shim_hook.c: a custom allocator (a bump arena on mmap) that reports its allocations through
 * llgo_heap_alloc_hook. Built by the Makefile without LLGO_HEAP_PROFILING (the hook must
 * compile out: no llgo_heap symbol in the binary), and by tests/test_shim.c with it, linked
 * with libllgoheap.a: then every allocation at hook_site is sampled at rate 1 with the
 * allocator's own functions (myalloc_*) trimmed by llgo_heap_trim_add.
 * Usage: shim_hook N. Prints "main 0x..." and, when profiling, "trim K".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "../../include/llgo_heap.h"

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

int main(int argc, char **argv);

static unsigned char *arena;
static size_t arena_used, arena_size;

__attribute__((noinline)) int myalloc_refill(size_t need)
{
	size_t size = need > (1u << 20) ? need : (1u << 20);
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -1;
	arena = m;
	arena_used = 0;
	arena_size = size;
	return 0;
}

/* The allocator's entry point: the hook goes here, so frame 0 of a sample is this function
 * (trimmed) and frame 1 the program's call site. */
__attribute__((noinline)) void *myalloc_alloc(size_t size)
{
	size = (size + 15) & ~(size_t)15;
	if (!arena || arena_size - arena_used < size)
		if (myalloc_refill(size) != 0)
			return NULL;
	void *p = arena + arena_used;
	arena_used += size;
	llgo_heap_alloc_hook(p, size);
	return p;
}

__attribute__((noinline)) void *hook_site(void)
{
	void *p = myalloc_alloc(48);
	KEEP(p);
	return p;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	printf("main %p\n", (void *)(uintptr_t)main);
#ifdef LLGO_HEAP_PROFILING
	printf("trim %d\n", llgo_heap_trim_add("myalloc_"));
#endif
	fflush(stdout);
	for (int i = 0; i < n; i++)
		hook_site();
	printf("hook done\n");
	return 0;
}
