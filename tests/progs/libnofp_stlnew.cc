// SPDX-License-Identifier: MIT
/*
 * libnofp_stlnew.cc: operator new and delete defined by a library built -O2 without frame
 * pointers, preloaded after the shim (LD_PRELOAD="libllgoheap.so libnofp_stlnew.so"), as an
 * allocator library that brings its own operators would be: the shim forwards every operator
 * new to this one (its forward mode), which calls malloc. For test_unwind, with nofp_stl.
 */
#include <cstdlib>
#include <new>

/* gcc sees the delete below free what new returned, which is this library's own pairing */
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void *operator new(std::size_t n)
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
