// SPDX-License-Identifier: MIT
/*
 * libsel_pool.c: a shared library with its own custom allocator that links the hook library
 * (libllgoheap.a) itself, as a plugin built against llgo-heap would. Loaded into a program
 * that runs under the preloaded shim, the process holds two copies of the sampler: exactly
 * one of them may sample and talk to the daemon (tests/test_select.c). pool_alloc is the
 * allocator entry point (the hook is in it), pool_site the caller to attribute.
 */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "../../include/llgo_heap.h"

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static unsigned char *pool_base;
static size_t pool_used;

__attribute__((noinline)) void *pool_alloc(size_t size)
{
	size = (size + 15) & ~(size_t)15;
	if (!pool_base || pool_used + size > (1u << 20)) {
		void *m = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
		if (m == MAP_FAILED)
			return NULL;
		pool_base = m;
		pool_used = 0;
	}
	void *p = pool_base + pool_used;
	pool_used += size;
	llgo_heap_alloc_hook(p, size);
	return p;
}

__attribute__((noinline)) void pool_site(int n)
{
	for (int i = 0; i < n; i++) {
		void *p = pool_alloc(96);
		KEEP(p);
	}
}

/* The rate this copy of the API reports (through whichever copy the symbols bind to). */
uint64_t pool_rate(void)
{
	return llgo_heap_rate();
}
