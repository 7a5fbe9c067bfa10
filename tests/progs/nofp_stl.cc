// SPDX-License-Identifier: MIT
/*
 * nofp_stl.cc: a C++ program built -O2 as Debian builds (no frame pointers) whose
 * allocations go through libstdc++'s containers, each at its own site three non-inlined
 * calls below main: std::vector grown by push_back and by reserve, std::string constructed
 * (libstdc++'s _M_construct) and appended to (its _M_append and _M_mutate), a string sum
 * (inlined _M_construct, libstdc++'s _M_append), std::map emplace and std::map<string, ...>
 * operator[] (nodes from inlined _Rb_tree code, keys from libstdc++). test_unwind compares
 * its stacks, function by function, inlined frames included, with heaptrack's.
 *
 * The Makefile builds it four ways: nofp_stl (as above), fp_stl (with frame pointers, so
 * that auto mode trusts frame-pointer walks up to the libstdc++ frames that keep none),
 * nofp_stl_newrep (-DSTL_REPLACE_NEW: the program replaces operator new, out of line, so
 * every C++ allocation reaches malloc from the program's own operator) and nofp_stl_newinl
 * (the same replacement, also inlined into this file's callers).
 *
 * usage: nofp_stl N   (N rounds; each makes the same allocations)
 */
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#define NOINLINE __attribute__((noinline))
/* Keeps a value alive and a call from being a tail call. */
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

#ifdef STL_REPLACE_NEW
/* STL_NEW_INLINE: gcc inlines it into this file's callers (libstdc++ calls it out of line) */
#ifdef STL_NEW_INLINE
#define STL_NEW_ATTR inline
#else
#define STL_NEW_ATTR NOINLINE
#endif
#include "stl_new.h"
#endif

struct Record {
	char bytes[200];
};

NOINLINE size_t stl_vector_push(int n)
{
	std::vector<long> v;
	for (int i = 0; i < n; i++)
		v.push_back(i);
	KEEP(v.data());
	return v.size();
}

NOINLINE size_t stl_vector_reserve(size_t n)
{
	std::vector<Record> v;
	v.reserve(n);
	KEEP(v.data());
	return v.capacity();
}

NOINLINE size_t stl_string_make(size_t n)
{
	std::string s(n, 'x');
	KEEP(s.data());
	return s.size();
}

NOINLINE size_t stl_string_append(const char *tail)
{
	std::string s("head");
	s.append(tail);
	KEEP(s.data());
	return s.size();
}

NOINLINE size_t stl_string_sum(const std::string &a, const std::string &b)
{
	std::string s = a + b;
	KEEP(s.data());
	return s.size();
}

NOINLINE size_t stl_map_emplace(int n)
{
	std::map<int, long> m;
	for (int i = 0; i < n; i++)
		m.emplace(i, i);
	return m.size();
}

NOINLINE size_t stl_map_string_key(int n)
{
	std::map<std::string, int> m;
	for (int i = 0; i < n; i++)
		m[std::string(40, (char)('a' + i))] = i;
	return m.size();
}

NOINLINE size_t stl_level3(int round)
{
	size_t t = stl_vector_push(5);
	t += stl_vector_reserve(3);
	t += stl_string_make(100 + (size_t)(round & 3));
	t += stl_string_append("a tail well past the sixteen bytes a string keeps inside");
	/* 30 bytes: past std::string's 15-byte buffer, so each allocates */
	std::string a(30, 'a'), b(30, 'b');
	t += stl_string_sum(a, b);
	t += stl_map_emplace(3);
	t += stl_map_string_key(2);
	KEEP(t);
	return t;
}

NOINLINE size_t stl_level2(int round)
{
	size_t t = stl_level3(round);
	KEEP(t);
	return t;
}

NOINLINE size_t stl_level1(int round)
{
	size_t t = stl_level2(round);
	KEEP(t);
	return t;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 10;
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += stl_level1(i);
	std::printf("total %zu\n", total);
	return 0;
}
