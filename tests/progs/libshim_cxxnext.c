// SPDX-License-Identifier: MIT
/*
 * libshim_cxxnext.c: a library that defines every C++ operator new and delete itself, as a
 * preloaded tcmalloc or jemalloc does, for test_shim.c: preloaded after the shim, it is the
 * shim's next definition, so the shim must forward every operator to it. Each operator counts
 * its calls in cxx_next_calls (read by the program through dlsym) and allocates with malloc
 * and aligned_alloc, through the shim's interposed ones when the shim is loaded first.
 */
#include <stdio.h>
#include <stdlib.h>

/* The size, alignment and nothrow arguments of the deletes are not needed. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

__attribute__((visibility("default"))) long cxx_next_calls;

static void *cxx_next_alloc(size_t n, size_t al, int nothrow)
{
	cxx_next_calls++;
	void *p = al ? aligned_alloc(al, (n + al - 1) / al * al) : malloc(n ? n : 1);
	if (!p && !nothrow) {
		fputs("libshim_cxxnext: out of memory\n", stderr);
		abort();
	}
	return p;
}

static void cxx_next_free(void *p)
{
	cxx_next_calls++;
	free(p);
}

#define NEW(sym, params, n, al, nothrow) \
	void *sym params; \
	__attribute__((noinline)) void *sym params \
	{ \
		return cxx_next_alloc(n, al, nothrow); \
	}
#define DEL(sym, params) \
	void sym params; \
	void sym params \
	{ \
		cxx_next_free(p); \
	}

NEW(_Znwm, (size_t n), n, 0, 0)
NEW(_Znam, (size_t n), n, 0, 0)
NEW(_ZnwmRKSt9nothrow_t, (size_t n, const void *nt), n, 0, 1)
NEW(_ZnamRKSt9nothrow_t, (size_t n, const void *nt), n, 0, 1)
NEW(_ZnwmSt11align_val_t, (size_t n, size_t al), n, al, 0)
NEW(_ZnamSt11align_val_t, (size_t n, size_t al), n, al, 0)
NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), n, al, 1)
NEW(_ZnamSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), n, al, 1)
DEL(_ZdlPv, (void *p))
DEL(_ZdaPv, (void *p))
DEL(_ZdlPvm, (void *p, size_t n))
DEL(_ZdaPvm, (void *p, size_t n))
DEL(_ZdlPvRKSt9nothrow_t, (void *p, const void *nt))
DEL(_ZdaPvRKSt9nothrow_t, (void *p, const void *nt))
DEL(_ZdlPvSt11align_val_t, (void *p, size_t al))
DEL(_ZdaPvSt11align_val_t, (void *p, size_t al))
DEL(_ZdlPvmSt11align_val_t, (void *p, size_t n, size_t al))
DEL(_ZdaPvmSt11align_val_t, (void *p, size_t n, size_t al))
DEL(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt))
DEL(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt))
