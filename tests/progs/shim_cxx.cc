// SPDX-License-Identifier: MIT
// shim_cxx.cc: C++ allocation behaviour under the shim, run by tests/test_shim.c.
//   check     every operator new/delete form behaves as libstdc++'s: alignment, nothrow
//             returning nullptr, bad_alloc thrown through the shim's wrappers, the
//             new_handler loop, sized and aligned deletes. Prints "check ok".
//   sites N   N allocations at each extern "C" site (plain names for the test's symbol
//             lookup); prints "main 0x...".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static int failures;
#define CHECK(cond) \
	do { \
		if (!(cond)) { \
			failures++; \
			std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		} \
	} while (0)

struct alignas(128) Wide {
	char bytes[200];
};

static std::size_t opaque(std::size_t v)
{
	__asm__ volatile("" : "+r"(v));
	return v;
}

static void *reserve;
static int handler_calls;
static void handler()
{
	handler_calls++;
	std::free(reserve);
	reserve = nullptr;
	std::set_new_handler(nullptr); // next failure throws
}

static int check()
{
	for (int round = 0; round < 50; round++) {
		int *a = new int[opaque(10)];
		a[9] = 1;
		delete[] a;
		std::string *s = new std::string(opaque(100), 'x');
		CHECK(s->size() == 100);
		delete s;
		Wide *w = new Wide;
		CHECK(((std::uintptr_t)w & 127) == 0);
		delete w;
		Wide *wa = new Wide[opaque(3)];
		CHECK(((std::uintptr_t)wa & 127) == 0);
		delete[] wa;
		Wide *wn = new (std::nothrow) Wide;
		CHECK(wn && ((std::uintptr_t)wn & 127) == 0);
		delete wn;
		void *raw = ::operator new(opaque(64), std::align_val_t(4096));
		CHECK(((std::uintptr_t)raw & 4095) == 0);
		::operator delete(raw, opaque(64), std::align_val_t(4096));
		raw = ::operator new[](opaque(64), std::align_val_t(256), std::nothrow);
		CHECK(raw && ((std::uintptr_t)raw & 255) == 0);
		::operator delete[](raw, std::align_val_t(256), std::nothrow);
		raw = ::operator new(opaque(33));
		::operator delete(raw, opaque(33));
		std::vector<int> v;
		for (int i = 0; i < 1000; i++)
			v.push_back(i);
		CHECK(v[999] == 999);
	}
	// nothrow forms return nullptr on failure
	char *n1 = new (std::nothrow) char[opaque(SIZE_MAX / 2)];
	CHECK(n1 == nullptr);
	void *n2 = ::operator new(opaque(SIZE_MAX / 2), std::align_val_t(64), std::nothrow);
	CHECK(n2 == nullptr);
	// throwing forms throw through the shim's wrappers
	bool thrown = false;
	try {
		char *p = new char[opaque(SIZE_MAX / 2)];
		KEEP(p);
	} catch (const std::bad_alloc &) {
		thrown = true;
	}
	CHECK(thrown);
	thrown = false;
	try {
		void *p = ::operator new(opaque(SIZE_MAX / 2), std::align_val_t(64));
		KEEP(p);
	} catch (const std::bad_alloc &) {
		thrown = true;
	}
	CHECK(thrown);
	// the new_handler runs, then the next failure throws
	reserve = std::malloc(16);
	std::set_new_handler(handler);
	thrown = false;
	try {
		void *p = ::operator new(opaque(SIZE_MAX / 2));
		KEEP(p);
	} catch (const std::bad_alloc &) {
		thrown = true;
	}
	CHECK(thrown && handler_calls == 1);
	std::printf("check %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures ? 1 : 0;
}

extern "C" {
__attribute__((noinline)) void *cxx_site_new(void) { int *p = new int[opaque(7)]; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_object(void) { auto *p = new std::vector<int>(opaque(5)); KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_aligned(void) { Wide *p = new Wide; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_nothrow(void) { char *p = new (std::nothrow) char[opaque(300)]; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_aligned_array(void) { Wide *p = new Wide[opaque(2)]; KEEP(p); return p; }
}

int main(int argc, char **argv)
{
	if (argc > 1 && std::strcmp(argv[1], "sites") == 0) {
		int n = argc > 2 ? std::atoi(argv[2]) : 100;
		std::printf("main %p\n", (void *)(std::uintptr_t)&main);
		std::fflush(stdout);
		for (int i = 0; i < n; i++) {
			delete[] (int *)cxx_site_new();
			auto *v = (std::vector<int> *)cxx_site_object();
			delete v;
			delete (Wide *)cxx_site_aligned();
			delete[] (char *)cxx_site_nothrow();
			delete[] (Wide *)cxx_site_aligned_array();
		}
		std::printf("sites done\n");
		return 0;
	}
	return check();
}
