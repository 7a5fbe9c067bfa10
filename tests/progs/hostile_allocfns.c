// SPDX-License-Identifier: MIT
/*
 * hostile_allocfns.c: every allocation function the shim interposes, each called from a site
 * of its own, for test_hostile.c (run with jemalloc preloaded before or after the shim).
 * Usage: hostile_allocfns K [pvalloc]
 * Each site makes K calls and checks what it got (size usable, alignment, contents kept by
 * realloc/reallocarray, zeroes from calloc, errors where the function must fail); "pvalloc"
 * adds pvalloc (glibc only: an allocator that lacks it leaves glibc's, whose blocks the other
 * allocator's free cannot take). Prints "site FUNC_site SIZE K" per site and "checks ok" or
 * the first failure, with exit status 1 on failure.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static int failures;
/* a count the compiler cannot see through (no overflow warning at build time) */
static volatile size_t huge = SIZE_MAX / 2;
static long k = 100;

#define CHECK(cond, what)                                                        \
	do {                                                                     \
		if (!(cond) && failures++ < 5)                                   \
			fprintf(stderr, "%s:%d: %s\n", __func__, __LINE__, what); \
	} while (0)

static int aligned(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

__attribute__((noinline)) void malloc_site(void)
{
	char *p = malloc(200);
	CHECK(p && malloc_usable_size(p) >= 200, "malloc");
	if (p)
		memset(p, 1, 200);
	free(p);
}

__attribute__((noinline)) void calloc_site(void)
{
	unsigned char *p = calloc(30, 10);
	int zero = p != NULL;
	for (int i = 0; p && i < 300; i++)
		zero &= p[i] == 0;
	CHECK(zero, "calloc zeroes");
	free(p);
	errno = 0;
	void *q = calloc(huge, 4);
	CHECK(q == NULL && errno == ENOMEM, "calloc overflow");
}

__attribute__((noinline)) void realloc_site(void)
{
	char *p = realloc(NULL, 100);
	CHECK(p != NULL, "realloc(NULL)");
	if (!p)
		return;
	memset(p, 0x5a, 100);
	char *q = realloc(p, 4000);
	int kept = q != NULL;
	for (int i = 0; q && i < 100; i++)
		kept &= q[i] == 0x5a;
	CHECK(kept, "realloc keeps contents");
	q = realloc(q, 50);
	CHECK(q && q[49] == 0x5a, "realloc shrink");
	free(q);
}

__attribute__((noinline)) void reallocarray_site(void)
{
	char *p = reallocarray(NULL, 25, 20);
	CHECK(p != NULL, "reallocarray(NULL)");
	if (!p)
		return;
	memset(p, 0x3c, 500);
	char *q = reallocarray(p, 100, 30);
	int kept = q != NULL;
	for (int i = 0; q && i < 500; i++)
		kept &= q[i] == 0x3c;
	CHECK(kept, "reallocarray keeps contents");
	errno = 0;
	void *r = reallocarray(q, huge, 4);
	CHECK(r == NULL && errno == ENOMEM, "reallocarray overflow");
	/* a failed reallocarray leaves the block as it was */
	free(r ? r : q);
}

__attribute__((noinline)) void posix_memalign_site(void)
{
	void *p = NULL;
	int rc = posix_memalign(&p, 256, 300);
	CHECK(rc == 0 && p && aligned(p, 256), "posix_memalign");
	free(p);
	void *q = (void *)1;
	rc = posix_memalign(&q, 3, 300);
	CHECK(rc == EINVAL && q == (void *)1, "posix_memalign bad alignment");
}

__attribute__((noinline)) void aligned_alloc_site(void)
{
	void *p = aligned_alloc(128, 384);
	CHECK(p && aligned(p, 128), "aligned_alloc");
	free(p);
}

__attribute__((noinline)) void memalign_site(void)
{
	void *p = memalign(64, 320);
	CHECK(p && aligned(p, 64), "memalign");
	free(p);
}

__attribute__((noinline)) void valloc_site(void)
{
	void *p = valloc(700);
	CHECK(p && aligned(p, (size_t)sysconf(_SC_PAGESIZE)), "valloc");
	free(p);
}

__attribute__((noinline)) void pvalloc_site(void)
{
	void *p = pvalloc(900);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	CHECK(p && aligned(p, page) && malloc_usable_size(p) >= page, "pvalloc");
	free(p);
}

int main(int argc, char **argv)
{
	k = argc > 1 ? atol(argv[1]) : 100;
	int with_pvalloc = argc > 2 && strcmp(argv[2], "pvalloc") == 0;
	struct {
		const char *name;
		void (*fn)(void);
		long size;
	} sites[] = {
		{ "malloc_site", malloc_site, 200 },
		{ "calloc_site", calloc_site, 300 },
		{ "realloc_site", realloc_site, 100 },
		{ "reallocarray_site", reallocarray_site, 500 },
		{ "posix_memalign_site", posix_memalign_site, 300 },
		{ "aligned_alloc_site", aligned_alloc_site, 384 },
		{ "memalign_site", memalign_site, 320 },
		{ "valloc_site", valloc_site, 700 },
		{ "pvalloc_site", pvalloc_site, 900 },
	};
	int n = (int)(sizeof(sites) / sizeof(sites[0])) - (with_pvalloc ? 0 : 1);
	for (int s = 0; s < n; s++) {
		for (long i = 0; i < k; i++)
			sites[s].fn();
		printf("site %s %ld %ld\n", sites[s].name, sites[s].size, k);
	}
	printf(failures ? "checks failed %d\n" : "checks ok\n", failures);
	return failures ? 1 : 0;
}
