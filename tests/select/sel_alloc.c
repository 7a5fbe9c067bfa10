// SPDX-License-Identifier: MIT
/*
 * sel_alloc.c: a custom allocator (a bump arena on mmap) that reports its allocations through
 * llgo_heap_alloc_hook, in its own translation unit so that -flto builds can inline across
 * it. Built by the Makefile (build/select/) with and without LLGO_HEAP_PROFILING, with and
 * without -flto; tests/test_select.c reads the symbol tables and the disassembly:
 *   sel_hook_only  the hook alone, so its listing is exactly the hook's code
 *   myalloc_alloc  the allocator's entry point, the hook inlined at its end
 */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "../../include/llgo_heap.h"

#include "sel.h"

static unsigned char *myalloc_arena;
static size_t myalloc_used, myalloc_size;

__attribute__((noinline, used)) void sel_hook_only(void *p, size_t size)
{
	llgo_heap_alloc_hook(p, size);
}

__attribute__((noinline)) static int myalloc_refill(size_t need)
{
	size_t size = need > (1u << 20) ? need : (1u << 20);
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return -1;
	myalloc_arena = m;
	myalloc_used = 0;
	myalloc_size = size;
	return 0;
}

__attribute__((noinline)) void *myalloc_alloc(size_t size)
{
	size = (size + 15) & ~(size_t)15;
	if (!myalloc_arena || myalloc_size - myalloc_used < size)
		if (myalloc_refill(size) != 0)
			return NULL;
	void *p = myalloc_arena + myalloc_used;
	myalloc_used += size;
	llgo_heap_alloc_hook(p, size);
	return p;
}
