// SPDX-License-Identifier: MIT
/*
 * passthrough_shim.c: the floor of LD_PRELOAD interposition, for comparison only. malloc and
 * free are one indirect jump each into glibc (__libc_malloc, __libc_free) and do nothing
 * else, so any cost this library adds over the allocator alone is the cost of interposing at
 * all (an extra indirect branch per call), which no profiler loaded this way can avoid.
 * Built with -fno-plt so each function is a single `jmp *GOT(%rip)`.
 */
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

__attribute__((visibility("default"))) void *malloc(size_t n)
{
	return __libc_malloc(n);
}

__attribute__((visibility("default"))) void free(void *p)
{
	__libc_free(p);
}
