// SPDX-License-Identifier: MIT
// shim_cxx.cc: C++ allocation behaviour under the shim, run by tests/test_shim.c.
//   check      every operator new/delete form behaves as libstdc++'s: alignment (and a usable
//              size covering the size rounded up to the alignment), nothrow returning nullptr,
//              bad_alloc thrown through the shim's operators, the new_handler loop (a handler
//              that frees memory under RLIMIT_AS, then the allocation succeeds; a handler
//              that throws), every delete form freeing its block. Prints "check ok".
//   semantics  one line per edge case (results, exceptions, handler calls), for the test to
//              compare a run under the shim with a plain run.
//   next       every operator new and delete form once; prints how many calls the library
//              libshim_cxxnext.so (preloaded after the shim: its next definitions) counted.
//   first      plain and aligned new/delete pairs; prints how many of their malloc,
//              aligned_alloc and free calls libshim_mallocfirst.so (preloaded before the shim)
//              counted.
//   sites N    N allocations at each extern "C" site (plain names for the test's symbol
//              lookup); prints "main 0x...".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <malloc.h>
#include <new>
#include <string>
#include <sys/resource.h>
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

struct Obj40 {
	char bytes[40];
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


// ---- the new_handler loop, alignment and sizes, every delete --------------------------------

static const std::size_t MiB = std::size_t(1) << 20;
static void *limit_reserve;
static int limit_calls;

static void limit_handler()
{
	limit_calls++;
	std::free(limit_reserve);
	limit_reserve = nullptr;
}

static std::size_t vm_size()
{
	std::FILE *f = std::fopen("/proc/self/status", "r");
	char line[256];
	std::size_t kb = 0;
	while (f && std::fgets(line, sizeof(line), f))
		if (std::sscanf(line, "VmSize: %zu kB", &kb) == 1)
			break;
	if (f)
		std::fclose(f);
	return kb * 1024;
}

// A 256 MiB block is held under an address-space limit that leaves 64 MiB free, so alloc of
// 128 MiB fails until the new_handler frees the block; then it must succeed.
template <class Alloc> static void *with_freeing_handler(Alloc alloc)
{
	struct rlimit old, lim;
	CHECK(getrlimit(RLIMIT_AS, &old) == 0);
	limit_reserve = std::malloc(256 * MiB);
	CHECK(limit_reserve != nullptr);
	lim = old;
	lim.rlim_cur = vm_size() + 64 * MiB;
	CHECK(setrlimit(RLIMIT_AS, &lim) == 0);
	limit_calls = 0;
	std::set_new_handler(limit_handler);
	void *p = alloc(opaque(128 * MiB));
	std::set_new_handler(nullptr);
	CHECK(setrlimit(RLIMIT_AS, &old) == 0);
	std::free(limit_reserve);
	limit_reserve = nullptr;
	return p;
}

struct custom_error {};
static void throwing_handler()
{
	limit_calls++;
	throw custom_error();
}

static std::size_t in_use()
{
	return mallinfo2().uordblks;
}

static int check_handlers()
{
	void *p = with_freeing_handler([](std::size_t n) { return ::operator new(n); });
	CHECK(p && limit_calls == 1);
	::operator delete(p);
	p = with_freeing_handler([](std::size_t n) { return ::operator new[](n); });
	CHECK(p && limit_calls == 1);
	::operator delete[](p);
	p = with_freeing_handler([](std::size_t n) { return ::operator new(n, std::nothrow); });
	CHECK(p && limit_calls == 1);
	::operator delete(p, std::nothrow);
	p = with_freeing_handler([](std::size_t n) { return (void *)new (std::nothrow) char[n]; });
	CHECK(p && limit_calls == 1);
	delete[] (char *)p;
	p = with_freeing_handler(
		[](std::size_t n) { return ::operator new(n, std::align_val_t(4096)); });
	CHECK(p && limit_calls == 1 && ((std::uintptr_t)p & 4095) == 0);
	::operator delete(p, std::align_val_t(4096));
	p = with_freeing_handler(
		[](std::size_t n) { return ::operator new[](n, std::align_val_t(64)); });
	CHECK(p && limit_calls == 1 && ((std::uintptr_t)p & 63) == 0);
	::operator delete[](p, std::align_val_t(64));
	p = with_freeing_handler([](std::size_t n) {
		return ::operator new(n, std::align_val_t(128), std::nothrow);
	});
	CHECK(p && limit_calls == 1 && ((std::uintptr_t)p & 127) == 0);
	::operator delete(p, std::align_val_t(128), std::nothrow);

	// a handler that throws: the exception leaves a throwing new, a nothrow new returns nullptr
	std::set_new_handler(throwing_handler);
	const std::size_t huge = SIZE_MAX / 2;
	limit_calls = 0;
	bool custom = false;
	try {
		void *q = ::operator new(opaque(huge));
		KEEP(q);
	} catch (const custom_error &) {
		custom = true;
	}
	CHECK(custom && limit_calls == 1);
	custom = false;
	try {
		void *q = ::operator new[](opaque(huge), std::align_val_t(64));
		KEEP(q);
	} catch (const custom_error &) {
		custom = true;
	}
	CHECK(custom && limit_calls == 2);
	CHECK(::operator new(opaque(huge), std::nothrow) == nullptr && limit_calls == 3);
	CHECK(::operator new[](opaque(huge), std::align_val_t(256), std::nothrow) == nullptr &&
	      limit_calls == 4);
	std::set_new_handler(nullptr);

	// alignments that are not powers of two
	bool thrown = false;
	try {
		void *q = ::operator new(opaque(16), std::align_val_t(opaque(24)));
		KEEP(q);
	} catch (const std::bad_alloc &) {
		thrown = true;
	}
	CHECK(thrown);
	CHECK(::operator new(opaque(16), std::align_val_t(opaque(0)), std::nothrow) == nullptr);
	return 0;
}

static int check_sizes_and_deletes()
{
	// new(0) gives distinct blocks
	void *z1 = ::operator new(opaque(0)), *z2 = ::operator new(opaque(0));
	CHECK(z1 && z2 && z1 != z2);
	::operator delete(z1);
	::operator delete(z2);
	// aligned: the block is aligned and holds the size rounded up to the alignment
	static const std::size_t aligns[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 4096 };
	static const std::size_t sizes[] = { 0, 1, 7, 100, 1000, 5000 };
	for (std::size_t al : aligns) {
		for (std::size_t n : sizes) {
			std::size_t want = ((n ? n : 1) + al - 1) & ~(al - 1);
			void *p = ::operator new(opaque(n), std::align_val_t(al));
			CHECK(((std::uintptr_t)p & (al - 1)) == 0);
			CHECK(malloc_usable_size(p) >= want);
			::operator delete(p, n, std::align_val_t(al));
			p = ::operator new[](opaque(n), std::align_val_t(al), std::nothrow);
			CHECK(p && ((std::uintptr_t)p & (al - 1)) == 0);
			CHECK(malloc_usable_size(p) >= want);
			::operator delete[](p, std::align_val_t(al), std::nothrow);
		}
	}
	// every delete form frees its block: 2000 blocks of 1000 bytes leave nothing in use
	const std::size_t n = 1000;
	const std::align_val_t al = std::align_val_t(64);
	for (int form = 0; form < 12; form++) {
		std::size_t before = in_use();
		for (int i = 0; i < 2000; i++) {
			void *p;
			switch (form) {
			case 0:
				p = ::operator new(opaque(n));
				::operator delete(p);
				break;
			case 1:
				p = ::operator new[](opaque(n));
				::operator delete[](p);
				break;
			case 2:
				p = ::operator new(opaque(n));
				::operator delete(p, n);
				break;
			case 3:
				p = ::operator new[](opaque(n));
				::operator delete[](p, n);
				break;
			case 4:
				p = ::operator new(opaque(n), std::nothrow);
				::operator delete(p, std::nothrow);
				break;
			case 5:
				p = ::operator new[](opaque(n), std::nothrow);
				::operator delete[](p, std::nothrow);
				break;
			case 6:
				p = ::operator new(opaque(n), al);
				::operator delete(p, al);
				break;
			case 7:
				p = ::operator new[](opaque(n), al);
				::operator delete[](p, al);
				break;
			case 8:
				p = ::operator new(opaque(n), al);
				::operator delete(p, n, al);
				break;
			case 9:
				p = ::operator new[](opaque(n), al);
				::operator delete[](p, n, al);
				break;
			case 10:
				p = ::operator new(opaque(n), al, std::nothrow);
				::operator delete(p, al, std::nothrow);
				break;
			default:
				p = ::operator new[](opaque(n), al, std::nothrow);
				::operator delete[](p, al, std::nothrow);
				break;
			}
		}
		long grown = (long)in_use() - (long)before;
		if (grown > 64 * 1024)
			std::printf("delete form %d: %ld bytes still in use\n", form, grown);
		CHECK(grown <= 64 * 1024);
	}
	return 0;
}

// ---- semantics: outcomes to compare with a plain run ---------------------------------------

static int sem_limit;
static void counting_handler()
{
	if (++limit_calls >= sem_limit)
		throw std::bad_alloc();
}
static void uninstalling_handler()
{
	limit_calls++;
	std::set_new_handler(nullptr);
}

template <class F> static void outcome(const char *name, F f)
{
	limit_calls = 0;
	const char *what;
	try {
		void *p = f();
		what = p ? "block" : "nullptr";
	} catch (const std::bad_alloc &) {
		what = "bad_alloc";
	} catch (const custom_error &) {
		what = "custom_error";
	}
	std::printf("%s: %s, handler called %d\n", name, what, limit_calls);
}

static int semantics()
{
	const std::size_t max = SIZE_MAX, huge = SIZE_MAX / 2;
	for (int h = 0; h < 4; h++) {
		const char *hn[] = { "no handler", "handler x3 then bad_alloc", "self-removing handler",
				     "throwing handler" };
		std::printf("-- %s\n", hn[h]);
		sem_limit = 3;
		std::set_new_handler(h == 0 ? nullptr
				     : h == 1 ? counting_handler
				     : h == 2 ? uninstalling_handler
					      : throwing_handler);
#define O(expr) \
	do { \
		if (h == 2) \
			std::set_new_handler(uninstalling_handler); \
		outcome(#expr, [&]() { return (void *)(expr); }); \
	} while (0)
		O(::operator new(opaque(max)));
		O(::operator new[](opaque(huge)));
		O(::operator new(opaque(huge), std::nothrow));
		O(::operator new[](opaque(max), std::nothrow));
		O(::operator new(opaque(huge), std::align_val_t(64)));
		O(::operator new[](opaque(huge), std::align_val_t(4096), std::nothrow));
		O(::operator new(opaque(max - 8), std::align_val_t(64)) != nullptr);
		O(::operator new[](opaque(max - 8), std::align_val_t(64), std::nothrow) != nullptr);
		O(::operator new(opaque(16), std::align_val_t(opaque(0))));
		O(::operator new(opaque(16), std::align_val_t(opaque(3))));
		O(::operator new[](opaque(16), std::align_val_t(opaque(24)), std::nothrow));
		O(::operator new(opaque(16), std::align_val_t(opaque(std::size_t(1) << 62))));
		O(::operator new(opaque(16), std::align_val_t(opaque(std::size_t(1) << 62)),
				 std::nothrow));
		O(::operator new(opaque(0)) != nullptr);
		O(::operator new[](opaque(0), std::align_val_t(16)) != nullptr);
#undef O
	}
	std::set_new_handler(nullptr);
	return 0;
}


// ---- next: every form once, for a library that defines the operators itself ------------------

static int next_calls()
{
	const long *calls = (const long *)dlsym(RTLD_DEFAULT, "cxx_next_calls");
	const std::align_val_t al = std::align_val_t(64);
	const std::size_t n = 10;
	void *p;
	p = ::operator new(opaque(n)); ::operator delete(p);
	p = ::operator new[](opaque(n)); ::operator delete[](p);
	p = ::operator new(opaque(n), std::nothrow); ::operator delete(p, std::nothrow);
	p = ::operator new[](opaque(n), std::nothrow); ::operator delete[](p, std::nothrow);
	p = ::operator new(opaque(n), al); ::operator delete(p, al);
	p = ::operator new[](opaque(n), al); ::operator delete[](p, al);
	p = ::operator new(opaque(n), al, std::nothrow); ::operator delete(p, al, std::nothrow);
	p = ::operator new[](opaque(n), al, std::nothrow); ::operator delete[](p, al, std::nothrow);
	p = ::operator new(opaque(n)); ::operator delete(p, n);
	p = ::operator new[](opaque(n)); ::operator delete[](p, n);
	p = ::operator new(opaque(n), al); ::operator delete(p, n, al);
	p = ::operator new[](opaque(n), al); ::operator delete[](p, n, al);
	std::printf("next calls %ld\n", calls ? *calls : -1L);
	return 0;
}


// ---- first: a malloc preloaded before the shim must still serve new and delete ---------------

static int first_calls()
{
	const long *calls = (const long *)dlsym(RTLD_DEFAULT, "mallocfirst_calls");
	long before = calls ? *calls : 0;
	for (int i = 0; i < 5; i++) {
		void *p = ::operator new(opaque(24));
		::operator delete(p, 24);
		p = ::operator new[](opaque(100), std::align_val_t(64));
		::operator delete[](p, std::align_val_t(64));
	}
	long after = calls ? *calls : 0;
	std::printf("first calls %ld\n", calls ? after - before : -1L);
	return 0;
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
	check_handlers();
	check_sizes_and_deletes();
	std::printf("check %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures ? 1 : 0;
}

extern "C" {
__attribute__((noinline)) void *cxx_site_new(void) { int *p = new int[opaque(7)]; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_object(void) { auto *p = new std::vector<int>(opaque(5)); KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_aligned(void) { Wide *p = new Wide; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_nothrow(void) { char *p = new (std::nothrow) char[opaque(300)]; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_aligned_array(void) { Wide *p = new Wide[opaque(2)]; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_aligned_nothrow(void) { Wide *p = new (std::nothrow) Wide[opaque(3)]; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_wide_nothrow(void) { Wide *p = new (std::nothrow) Wide; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_object_nothrow(void) { Obj40 *p = new (std::nothrow) Obj40; KEEP(p); return p; }
__attribute__((noinline)) void *cxx_site_array_nothrow(void) { int *p = new (std::nothrow) int[opaque(11)]; KEEP(p); return p; }
// asks 100 bytes aligned to 64: libstdc++ allocates 128, the record must say 100
__attribute__((noinline)) void *cxx_site_aligned_odd(void) { void *p = ::operator new(opaque(100), std::align_val_t(64)); KEEP(p); return p; }
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
			delete[] (Wide *)cxx_site_aligned_nothrow();
			delete[] (int *)cxx_site_array_nothrow();
			delete (Obj40 *)cxx_site_object_nothrow();
			delete (Wide *)cxx_site_wide_nothrow();
			::operator delete(cxx_site_aligned_odd(), 100, std::align_val_t(64));
		}
		std::printf("sites done\n");
		return 0;
	}
	if (argc > 1 && std::strcmp(argv[1], "semantics") == 0)
		return semantics();
	if (argc > 1 && std::strcmp(argv[1], "next") == 0)
		return next_calls();
	if (argc > 1 && std::strcmp(argv[1], "first") == 0)
		return first_calls();
	return check();
}
