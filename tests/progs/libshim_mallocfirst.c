// SPDX-License-Identifier: MIT
/*
 * libshim_mallocfirst.c: a malloc replacement preloaded before the shim (as a jemalloc or
 * tcmalloc would be), for test_shim.c. It serves every call from glibc's own entry points and
 * counts the calls in mallocfirst_calls, read by the program through dlsym: libstdc++'s
 * operators new and delete call malloc, aligned_alloc and free through their PLT, so they
 * reach these, with or without the shim loaded after it.
 */
#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

__attribute__((visibility("default"))) long mallocfirst_calls;

void *malloc(size_t n)
{
	mallocfirst_calls++;
	return __libc_malloc(n);
}

void free(void *p)
{
	mallocfirst_calls++;
	__libc_free(p);
}

void *calloc(size_t n, size_t size)
{
	mallocfirst_calls++;
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	mallocfirst_calls++;
	return __libc_realloc(p, n);
}

void *aligned_alloc(size_t al, size_t n)
{
	mallocfirst_calls++;
	return __libc_memalign(al, n);
}

void *memalign(size_t al, size_t n)
{
	mallocfirst_calls++;
	return __libc_memalign(al, n);
}

int posix_memalign(void **pp, size_t al, size_t n)
{
	mallocfirst_calls++;
	if (al < sizeof(void *) || (al & (al - 1)))
		return EINVAL;
	void *p = __libc_memalign(al, n);
	if (!p)
		return ENOMEM;
	*pp = p;
	return 0;
}
