// SPDX-License-Identifier: MIT
// libshim_cxxplug.cc: a C++ library that a C program (shim_cxx_dlopen) opens with dlopen
// RTLD_LOCAL, for tests/test_shim.c: libstdc++ arrives with it, after the shim's constructor
// ran, and outside the global scope. Its operators must still behave as libstdc++'s: every
// check of plug_run() passes, the count of passed checks is returned.
#include <cstdint>
#include <new>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static std::size_t opaque(std::size_t v)
{
	__asm__ volatile("" : "+r"(v));
	return v;
}

static int calls;
static void handler()
{
	if (++calls == 3)
		throw std::bad_alloc();
}

extern "C" __attribute__((visibility("default"))) int plug_run(int *total)
{
	int ok = 0;
	*total = 6;
	int *a = new int[opaque(10)];
	a[9] = 1;
	ok += a[9] == 1;
	delete[] a;
	try {
		void *p = ::operator new(opaque(SIZE_MAX / 2));
		KEEP(p);
	} catch (const std::bad_alloc &) {
		ok++;
	}
	ok += ::operator new(opaque(SIZE_MAX / 2), std::nothrow) == nullptr;
	void *al = ::operator new(opaque(100), std::align_val_t(256));
	ok += ((std::uintptr_t)al & 255) == 0;
	::operator delete(al, std::align_val_t(256));
	std::set_new_handler(handler);
	try {
		void *p = ::operator new[](opaque(SIZE_MAX / 2), std::align_val_t(64));
		KEEP(p);
	} catch (const std::bad_alloc &) {
		ok += calls == 3;
	}
	std::set_new_handler(nullptr);
	for (int i = 0; i < 1000; i++) {
		long *p = new long(i);
		KEEP(p);
		delete p;
	}
	ok++;
	return ok;
}
