// SPDX-License-Identifier: MIT
// inuse_sites.cc: allocation sites with a known number of live objects, for the in-use tests
// (tests/test_inuse.c). Usage: inuse_sites N [aligned]. Phase 1 makes, per site, N objects:
//   site_kept       malloc(100), kept until phase 2
//   site_freed      malloc(200), freed at once
//   site_grow       malloc(64), then site_grow_realloc grows it to 5000 (kept)
//   site_calloc     calloc(10, 30), kept
//   site_thread     malloc(400), freed by another thread
//   site_new_kept   new Obj600 (600 bytes), kept
//   site_new_freed  new Obj700 (700 bytes), deleted (sized delete)
//   site_new_arr    new char[900], deleted with delete[]
//   site_memalign   posix_memalign 64, 1000 bytes, every other one freed (N/2 live, N even)
//   site_leak       malloc(48), never freed
//   site_chain      malloc(8), then site_chain_realloc grows it 10 times (16 .. 8192), kept
//   site_realloc0   malloc(111), then realloc(p, 0) (frees it)
//   site_realloc_fail  malloc(222), then a realloc that fails (p stays, kept)
//   "aligned": site_aligned_new  new Al (alignas(128), 256 bytes), kept
// (extern "C": unmangled names in the profile) prints "ready", waits for a line on stdin, frees site_kept's objects (phase 2), prints
// "done" and exits without freeing the rest: those are the leaks at exit.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <pthread.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")
#define NOINLINE __attribute__((noinline))

struct Obj600 {
	char b[600];
};
struct Obj700 {
	char b[700];
};
struct alignas(128) Al {
	char b[256];
};

extern "C" {
NOINLINE void *site_kept() { void *p = malloc(100); KEEP(p); return p; }
NOINLINE void *site_freed() { void *p = malloc(200); KEEP(p); return p; }
NOINLINE void *site_grow() { void *p = malloc(64); KEEP(p); return p; }
NOINLINE void *site_grow_realloc(void *p) { void *q = realloc(p, 5000); KEEP(q); return q; }
NOINLINE void *site_calloc() { void *p = calloc(10, 30); KEEP(p); return p; }
NOINLINE void *site_thread() { void *p = malloc(400); KEEP(p); return p; }
NOINLINE Obj600 *site_new_kept() { Obj600 *p = new Obj600; KEEP(p); return p; }
NOINLINE Obj700 *site_new_freed() { Obj700 *p = new Obj700; KEEP(p); return p; }
NOINLINE char *site_new_arr() { char *p = new char[900]; KEEP(p); return p; }
NOINLINE void *site_memalign() { void *p = nullptr; if (posix_memalign(&p, 64, 1000)) abort(); KEEP(p); return p; }
NOINLINE void *site_leak() { void *p = malloc(48); KEEP(p); return p; }
NOINLINE void *site_chain() { void *p = malloc(8); KEEP(p); return p; }
NOINLINE void *site_chain_realloc(void *p, size_t n) { void *q = realloc(p, n); KEEP(q); return q; }
NOINLINE void *site_realloc0() { void *p = malloc(111); KEEP(p); return p; }
NOINLINE void *site_realloc_fail() { void *p = malloc(222); KEEP(p); return p; }
NOINLINE Al *site_aligned_new() { Al *p = new Al; KEEP(p); return p; }
}

/* realloc(p, 0) through a value the compiler cannot see (no -Walloc-size warnings) */
static volatile size_t opaque_zero = 0;

struct handoff {
	void **v;
	int n;
};

static void *freer(void *arg)
{
	handoff *h = static_cast<handoff *>(arg);
	for (int i = 0; i < h->n; i++)
		free(h->v[i]);
	return nullptr;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 100;
	bool aligned = argc > 2 && std::strcmp(argv[2], "aligned") == 0;
	void **kept = static_cast<void **>(calloc(n, sizeof(void *)));
	void **keep_all = static_cast<void **>(calloc(10 * (size_t)n, sizeof(void *)));
	void **handed = static_cast<void **>(calloc(n, sizeof(void *)));
	size_t k = 0;
	for (int i = 0; i < n; i++) {
		kept[i] = site_kept();
		free(site_freed());
		keep_all[k++] = site_grow_realloc(site_grow());
		keep_all[k++] = site_calloc();
		handed[i] = site_thread();
		keep_all[k++] = site_new_kept();
		Obj700 *o = site_new_freed();
		delete o;
		char *a = site_new_arr();
		delete[] a;
		void *m = site_memalign();
		if (i % 2)
			free(m);
		else
			keep_all[k++] = m;
		keep_all[k++] = site_leak();
		void *c = site_chain();
		for (size_t sz = 16; sz <= 8192; sz *= 2)
			c = site_chain_realloc(c, sz);
		keep_all[k++] = c;
		void *z = realloc(site_realloc0(), opaque_zero);
		KEEP(z);
		void *f = site_realloc_fail();
		if (realloc(f, (size_t)-1 / 2) != nullptr)
			abort();
		keep_all[k++] = f;
		if (aligned)
			keep_all[k++] = site_aligned_new();
	}
	handoff h = { handed, n };
	pthread_t t;
	if (pthread_create(&t, nullptr, freer, &h) != 0)
		return 1;
	pthread_join(t, nullptr);
	// stdin's buffer is the program's, not a site's: a buffer glibc allocated at the first
	// fgets, after "ready", would be an object sampled while the test reads the profile.
	static char inbuf[4096];
	std::setvbuf(stdin, inbuf, _IOFBF, sizeof(inbuf));
	std::printf("ready\n");
	std::fflush(stdout);
	char line[64];
	if (!std::fgets(line, sizeof(line), stdin))
		return 1;
	for (int i = 0; i < n; i++)
		free(kept[i]);
	std::printf("done %zu\n", k);
	std::fflush(stdout);
	return 0;
}
