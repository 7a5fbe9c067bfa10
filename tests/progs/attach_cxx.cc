// SPDX-License-Identifier: MIT
// attach_cxx.cc: a C++ program that allocates all the time through libstdc++'s operator new
// (strings, vectors, maps, arrays, aligned new), for tests/test_attach.c.
//
//   attach_cxx run THREADS            rounds until stdin says "stop"
//   attach_cxx fixed ROUNDS THREADS   exactly ROUNDS rounds
//
// As attach_work.c: a round's work depends on its number only, and the report
// "rounds=R sum=S bad=B" of a stopped run equals `fixed R`'s. "where" on stdin prints where
// the program's operator new and delete entries lead.
#include <atomic>
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

static std::mutex claim;
static long next_round, max_rounds = -1;
static bool stopping;
static std::atomic<unsigned long long> total_sum, total_bad;

struct alignas(64) Aligned {
	unsigned char b[192];
};

__attribute__((noinline)) std::vector<std::string> cxx_site_strings(long round)
{
	std::vector<std::string> v;
	for (int i = 0; i < 40; i++)
		v.push_back(std::string(20 + (size_t)((round + i) % 300), (char)('a' + i % 26)));
	return v;
}

__attribute__((noinline)) std::map<long, std::vector<char>> cxx_site_map(long round)
{
	std::map<long, std::vector<char>> m;
	for (long i = 0; i < 30; i++)
		m[round * 31 + i] = std::vector<char>((size_t)(100 + (round * 7 + i) % 5000),
						      (char)i);
	return m;
}

__attribute__((noinline)) unsigned char *cxx_site_array(long round)
{
	unsigned char *a = new unsigned char[(size_t)(1000 + round % 30000)];
	__asm__ volatile("" : : "r"(a) : "memory"); /* a frame of its own: no tail call */
	return a;
}

__attribute__((noinline)) Aligned *cxx_site_aligned(long round)
{
	Aligned *a = new Aligned[(size_t)(1 + round % 8)];
	__asm__ volatile("" : : "r"(a) : "memory");
	return a;
}

static void round_work(long round, std::vector<std::string> *keep, unsigned long long &sum,
		       unsigned long long &bad)
{
	std::vector<std::string> v = cxx_site_strings(round);
	for (const std::string &s : v)
		sum += s.size() + (unsigned char)s[0];
	std::map<long, std::vector<char>> m = cxx_site_map(round);
	for (const auto &kv : m) {
		sum += kv.second.size();
		if (kv.second.empty() || kv.second[0] != (char)(kv.first - round * 31))
			bad++;
	}
	unsigned char *a = cxx_site_array(round);
	size_t an = (size_t)(1000 + round % 30000);
	memset(a, (int)(round & 0xff), an);
	sum += a[an - 1];
	delete[] a;
	Aligned *al = cxx_site_aligned(round);
	if ((uintptr_t)al % 64)
		bad++;
	al[0].b[0] = 1;
	sum += al[0].b[0];
	delete[] al;
	/* kept across rounds: made before an attach, freed while attached, and the reverse */
	std::vector<std::string> &slot = keep[round % 64];
	for (size_t i = 0; i < slot.size(); i++) {
		const std::string &k = slot[i];
		if (k.size() < 20 || k[0] != (char)('a' + i % 26) ||
		    k[k.size() - 1] != k[0] || k[k.size() / 2] != k[0])
			bad++;
	}
	slot = std::move(v);
}

static void worker()
{
	std::vector<std::string> *keep = new std::vector<std::string>[64];
	unsigned long long sum = 0, bad = 0;
	for (;;) {
		long r;
		{
			std::lock_guard<std::mutex> g(claim);
			r = next_round;
			bool go = max_rounds >= 0 ? r < max_rounds : !stopping;
			if (!go)
				break;
			next_round = r + 1;
		}
		round_work(r, keep, sum, bad);
	}
	delete[] keep;
	total_sum += sum;
	total_bad += bad;
}

/* The object an address lies in, by its file's base name. */
static const char *object_of(void *f)
{
	Dl_info di;
	if (!dladdr(f, &di) || !di.dli_fname)
		return "?";
	const char *s = strrchr(di.dli_fname, '/');
	return s ? s + 1 : di.dli_fname;
}

/* Where this program's GOT entries of operator new and delete lead (libllgoheap.so while
 * attached, libstdc++.so.6 otherwise). */
static void where()
{
	void *n, *d;
	__asm__ volatile("movq _Znwm@GOTPCREL(%%rip), %0" : "=r"(n));
	__asm__ volatile("movq _ZdlPvm@GOTPCREL(%%rip), %0" : "=r"(d));
	printf("where new=%s delete=%s\n", object_of(n), object_of(d));
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int threads = 1;
	if (argc >= 3 && strcmp(argv[1], "run") == 0) {
		threads = atoi(argv[2]);
	} else if (argc >= 4 && strcmp(argv[1], "fixed") == 0) {
		max_rounds = atol(argv[2]);
		threads = atoi(argv[3]);
	} else {
		fprintf(stderr, "usage: attach_cxx run THREADS | fixed ROUNDS THREADS\n");
		return 2;
	}
	if (threads < 1 || threads > 16)
		threads = 1;
	std::vector<std::thread> t;
	for (int i = 0; i < threads; i++)
		t.emplace_back(worker);
	if (max_rounds < 0) {
		printf("ready\n");
		fflush(stdout);
		char line[256];
		while (fgets(line, sizeof(line), stdin)) {
			if (strncmp(line, "stop", 4) == 0)
				break;
			if (strncmp(line, "where", 5) == 0)
				where();
		}
		std::lock_guard<std::mutex> g(claim);
		stopping = true;
	}
	for (auto &x : t)
		x.join();
	printf("rounds=%ld sum=%llu bad=%llu\n", next_round, total_sum.load(), total_bad.load());
	return 0;
}
