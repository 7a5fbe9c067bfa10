// SPDX-License-Identifier: MIT
// shim_cxx_replaced.cc: a program that replaces only operator new(size_t) and operator
// delete(void*), as C++ allows, for tests/test_shim.c. libstdc++'s array, nothrow and sized
// forms call the replacements, so every allocation and free below reaches them; under the
// shim too. Prints "replaced new N delete M" (N = M = 8 without the shim).
#include <cstdio>
#include <cstdlib>
#include <new>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

// Deliberately only these two: libstdc++'s sized delete calls this one.
#pragma GCC diagnostic ignored "-Wsized-deallocation"

static long news, deletes;

__attribute__((noinline)) void *operator new(std::size_t n)
{
	news++;
	void *p = std::malloc(n ? n : 1);
	if (!p)
		throw std::bad_alloc();
	return p;
}

__attribute__((noinline)) void operator delete(void *p) noexcept
{
	deletes++;
	std::free(p);
}

static std::size_t opaque(std::size_t v)
{
	__asm__ volatile("" : "+r"(v));
	return v;
}

int main()
{
	int *a = new int[opaque(10)];
	KEEP(a);
	delete[] a;
	int *b = new (std::nothrow) int;
	KEEP(b);
	delete b;
	char *c = new (std::nothrow) char[opaque(5)];
	KEEP(c);
	delete[] c;
	void *d = ::operator new(opaque(8));
	::operator delete(d, 8);
	void *e = ::operator new[](opaque(8));
	::operator delete[](e, 8);
	void *f = ::operator new(opaque(8), std::nothrow);
	::operator delete(f, std::nothrow);
	void *g = ::operator new[](opaque(8), std::nothrow);
	::operator delete[](g, std::nothrow);
	void *i = ::operator new(opaque(8));
	::operator delete(i);
	std::printf("replaced new %ld delete %ld\n", news, deletes);
	return 0;
}
