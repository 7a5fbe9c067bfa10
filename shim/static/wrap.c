// SPDX-License-Identifier: MIT
/*
 * wrap.c: the allocation functions of a fully static executable (glibc static), for
 * libllgoheap-static.a. A static program has no dynamic loader, so LD_PRELOAD and
 * dlsym(RTLD_NEXT) (override.c) do not exist, and defining malloc next to libc.a's malloc.o is
 * a multiple definition. Instead the program is linked with the linker's --wrap option for
 * each function below (the link line of llgoheap-static.pc): every undefined reference to
 * malloc, in the program and in libc.a's own objects (strdup, fopen, pthread_create, ...),
 * binds to __wrap_malloc here, and __real_malloc is glibc's. Calls inside glibc's malloc.o
 * (realloc growing through its own malloc) are not wrapped, as inside libc.so they do not go
 * through the PLT either.
 *
 * The fast path is override.c's, instruction for instruction (rate test, TLS countdown,
 * tail call), and the slow paths are sample.c's; sampling, attach, rings and profiles are
 * the preloaded shim's. free and malloc_usable_size need no wrapper (nothing to record).
 * reallocarray is wrapped with glibc's definition over __real_realloc, so that it is
 * recorded once at the program's call site (glibc's own reallocarray would call the wrapped
 * realloc from inside libc).
 */
#include <stdlib.h>

#include "../internal.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
int __real_posix_memalign(void **pp, size_t align, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);
void *__real_memalign(size_t align, size_t size);
void *__real_valloc(size_t size);
void *__real_pvalloc(size_t size);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void *__wrap_reallocarray(void *p, size_t n, size_t size);
int __wrap_posix_memalign(void **pp, size_t align, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);
void *__wrap_memalign(size_t align, size_t size);
void *__wrap_valloc(size_t size);
void *__wrap_pvalloc(size_t size);

/* ---- fast path: override.c's, from internal.h (override_pass) ---------------------------- */

llgo_export void *__wrap_malloc(size_t size)
{
	if (llgo_likely(override_pass(size)))
		return __real_malloc(size);
	return sample_malloc(__real_malloc, size, __builtin_return_address(0));
}

llgo_export void *__wrap_calloc(size_t n, size_t size)
{
	int s = override_rate_sign();
	if (llgo_likely(s == 0))
		return __real_calloc(n, size);
	size_t total;
	if (__builtin_mul_overflow(n, size, &total))
		return __real_calloc(n, size); /* fails as the real calloc fails: ENOMEM */
	if (s > 0 && llgo_likely(override_countdown(total)))
		return __real_calloc(n, size);
	return sample_calloc(__real_calloc, n, size, __builtin_return_address(0));
}

llgo_export void *__wrap_realloc(void *p, size_t size)
{
	if (llgo_likely(override_pass(size)))
		return __real_realloc(p, size);
	return sample_realloc(__real_realloc, p, size, __builtin_return_address(0));
}

llgo_export void *__wrap_reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	if (llgo_unlikely(__builtin_mul_overflow(n, size, &total))) {
		errno = ENOMEM;
		return NULL;
	}
	if (llgo_likely(override_pass(total)))
		return __real_realloc(p, total);
	return sample_realloc(__real_realloc, p, total, __builtin_return_address(0));
}

llgo_export int __wrap_posix_memalign(void **pp, size_t align, size_t size)
{
	if (llgo_likely(override_pass(size)))
		return __real_posix_memalign(pp, align, size);
	return sample_posix_memalign(__real_posix_memalign, pp, align, size,
				     __builtin_return_address(0));
}

llgo_export void *__wrap_aligned_alloc(size_t align, size_t size)
{
	if (llgo_likely(override_pass(size)))
		return __real_aligned_alloc(align, size);
	return sample_memalign(__real_aligned_alloc, align, size, __builtin_return_address(0));
}

llgo_export void *__wrap_memalign(size_t align, size_t size)
{
	if (llgo_likely(override_pass(size)))
		return __real_memalign(align, size);
	return sample_memalign(__real_memalign, align, size, __builtin_return_address(0));
}

llgo_export void *__wrap_valloc(size_t size)
{
	if (llgo_likely(override_pass(size)))
		return __real_valloc(size);
	return sample_malloc(__real_valloc, size, __builtin_return_address(0));
}

/* The recorded size is the size asked, not pvalloc's page-rounded one. */
llgo_export void *__wrap_pvalloc(size_t size)
{
	if (llgo_likely(override_pass(size)))
		return __real_pvalloc(size);
	return sample_malloc(__real_pvalloc, size, __builtin_return_address(0));
}
