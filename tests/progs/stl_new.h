/* SPDX-License-Identifier: MIT */
/*
 * stl_new.h: operator new and delete over malloc and free, as an allocator library or a
 * program that replaces them defines them, for nofp_stl.cc (compiled in with
 * -DSTL_REPLACE_NEW) and libnofp_stlnew.cc. STL_NEW_ATTR goes before operator new (inline,
 * noinline, or nothing).
 */
#ifndef LLGO_TESTS_STL_NEW_H
#define LLGO_TESTS_STL_NEW_H

#include <cstdlib>
#include <new>

/* gcc sees the delete below free what new returned, which is this file's own pairing */
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

STL_NEW_ATTR void *operator new(std::size_t n)
{
	void *p = std::malloc(n ? n : 1);
	if (!p)
		throw std::bad_alloc();
	return p;
}

void operator delete(void *p) noexcept
{
	std::free(p);
}

void operator delete(void *p, std::size_t) noexcept
{
	std::free(p);
}

#endif
