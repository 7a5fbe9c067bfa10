// SPDX-License-Identifier: MIT
/*
 * nofp_cxx.cc: an -O2 C++ program without frame pointers whose allocations go through
 * Debian's libstdc++ (std::string, std::vector, std::map, std::make_shared, a thrown
 * exception, a destructor that allocates in a landing pad), for test_unwind. Lines the test checks carry markers ("@NAME").
 *
 * usage: nofp_cxx N
 */
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

struct Node {
	char payload[120];
};

__attribute__((noinline)) std::string make_string(int i)
{
	return std::string(64 + (i & 1), 'x'); /* @make_string */
}

__attribute__((noinline)) size_t grow_vector(int n)
{
	std::vector<long> v;
	for (int i = 0; i < n; i++)
		v.push_back(i); /* @grow_vector */
	return v.size();
}

__attribute__((noinline)) size_t fill_map(int n)
{
	std::map<int, long> m;
	for (int i = 0; i < n; i++)
		m[i] = i; /* @fill_map */
	return m.size();
}

__attribute__((noinline)) std::shared_ptr<Node> make_node()
{
	return std::make_shared<Node>(); /* @make_node */
}

static void *volatile sink;

/* Runs in throw_one's landing pad while the exception propagates. */
struct Guard {
	__attribute__((noinline)) ~Guard()
	{
		sink = std::malloc(55); /* @guard_dtor */
		std::free(sink);
	}
};

__attribute__((noinline)) void throw_one(int i)
{
	Guard g;
	if (i >= 0)
		throw std::runtime_error("thrown"); /* @throw_one */
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 10;
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		total += make_string(i).size(); /* @main_string */
		total += grow_vector(4);        /* @main_vector */
		total += fill_map(3);           /* @main_map */
		total += make_node() ? 1 : 0;   /* @main_node */
		try {
			throw_one(i); /* @main_throw */
		} catch (const std::exception &e) {
			total += e.what()[0];
		}
	}
	std::printf("total %zu\n", total);
	return 0;
}
