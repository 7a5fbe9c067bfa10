// SPDX-License-Identifier: MIT
// e2e_cxx.cc: C++ allocation sites through every common operator new form, for the check
// that frame 0 of a `new` sample is the function that called new.
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

struct alignas(64) Wide {
	char bytes[128];
};

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) int *cxx_new_scalar() { int *p = new int[5]; KEEP(p); return p; }
__attribute__((noinline)) std::string *cxx_new_object() { auto *p = new std::string("x"); KEEP(p); return p; }
__attribute__((noinline)) Wide *cxx_new_aligned() { Wide *p = new Wide; KEEP(p); return p; }
__attribute__((noinline)) char *cxx_new_nothrow() { char *p = new (std::nothrow) char[300]; KEEP(p); return p; }
__attribute__((noinline)) Wide *cxx_new_aligned_nothrow() { Wide *p = new (std::nothrow) Wide; KEEP(p); return p; }
__attribute__((noinline)) Wide *cxx_new_aligned_array() { Wide *p = new Wide[3]; KEEP(p); return p; }
// 100 bytes aligned to 64: libstdc++ allocates 128 bytes, the profile must show 100
__attribute__((noinline)) void *cxx_new_aligned_odd() { void *p = ::operator new(100, std::align_val_t(64)); KEEP(p); return p; }

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 100;
	for (int i = 0; i < n; i++) {
		int *a = cxx_new_scalar();
		std::string *s = cxx_new_object();
		Wide *w = cxx_new_aligned();
		char *c = cxx_new_nothrow();
		Wide *wn = cxx_new_aligned_nothrow();
		Wide *wa = cxx_new_aligned_array();
		void *odd = cxx_new_aligned_odd();
		delete[] a;
		delete s;
		delete w;
		delete[] c;
		delete wn;
		delete[] wa;
		::operator delete(odd, 100, std::align_val_t(64));
	}
	std::printf("cxx done %d\n", n);
	return 0;
}
