// SPDX-License-Identifier: MIT
/*
 * sel_main.c: the program around sel_alloc.c's allocator. Usage: sel N. Allocates N blocks of
 * 48 bytes from sel_site through myalloc_alloc; with LLGO_HEAP_PROFILING it first trims the
 * allocator (llgo_heap_trim_add("myalloc_")) and prints "trim K". Prints "pid PID" first and
 * "done" last.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../include/llgo_heap.h"

#include "sel.h"

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) static void sel_site(int n)
{
	for (int i = 0; i < n; i++) {
		void *p = myalloc_alloc(48);
		KEEP(p);
	}
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	printf("pid %d\n", (int)getpid());
#ifdef LLGO_HEAP_PROFILING
	printf("trim %d\n", llgo_heap_trim_add("myalloc_"));
#endif
	fflush(stdout);
	sel_site(n);
	sel_hook_only(NULL, 0); /* reached, so that no build can drop it */
	printf("done\n");
	return 0;
}
