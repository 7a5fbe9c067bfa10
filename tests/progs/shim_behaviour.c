// SPDX-License-Identifier: MIT
/*
 * shim_behaviour.c: a program run by tests/test_shim.c with and without the preloaded shim.
 * Modes:
 *   check          the allocation API behaves as glibc's: sizes, usable sizes, alignment of
 *                  every aligned API, calloc zeroing, errno and results on failures, realloc
 *                  and reallocarray semantics, free(NULL). Prints "check ok" or the failures.
 *   sites N        N allocations at each of several noinline sites; prints the runtime
 *                  address of main ("main 0x...") so the test can map frames to symbols.
 *   paced N        as sites, with a 2 ms pause every 8 rounds (time for a woken daemon).
 *   threads T N    T threads at a time, three rounds, each N allocations at thread_site.
 *   fork N         N allocations at parent_site, then a fork()ed child (no exec) makes N at
 *                  child_site; prints "child PID".
 *   rate           prints the rate seen by llgo_heap_rate() when the shim is loaded.
 *   bytes MB SIZE  allocates and frees MB megabytes in SIZE-byte blocks at bytes_site.
 *   churn N SIZE   N rounds of four blocks of SIZE/4 to SIZE bytes (sizes vary from round to
 *                  round), written whole and then freed (short-lived sampled objects); prints
 *                  "faults F": the minor page faults of the last N/2 rounds.
 *   peak N SIZE    N SIZE-byte blocks written whole and held, then all freed; prints
 *                  "held_kib H left_kib L": resident growth over the start while they are
 *                  held, and after they are freed.
 * Exit status 0 when every check held.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

int main(int argc, char **argv);

static int failures;

#define CHECK(cond, ...) \
	do { \
		if (!(cond)) { \
			failures++; \
			printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			printf(__VA_ARGS__); \
			printf("\n"); \
		} \
	} while (0)

static int aligned_to(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

/* Keep the compiler from folding allocations away or proving sizes. */
static size_t opaque(size_t v)
{
	__asm__ volatile("" : "+r"(v));
	return v;
}

static void check_basic(void)
{
	for (size_t n = 0; n < 5000; n = n * 3 + 1) {
		unsigned char *p = malloc(opaque(n));
		CHECK(p != NULL, "malloc(%zu)", n);
		CHECK(aligned_to(p, 16), "malloc(%zu) = %p", n, (void *)p);
		CHECK(malloc_usable_size(p) >= n, "usable %zu < %zu", malloc_usable_size(p), n);
		memset(p, 0xab, n);
		free(p);
	}
	void *z = malloc(opaque(0));
	CHECK(z != NULL, "malloc(0) is a unique pointer in glibc");
	free(z);
	free(NULL);
	CHECK(malloc_usable_size(NULL) == 0, "usable(NULL)");
}

static void check_calloc(void)
{
	for (int round = 0; round < 50; round++) {
		/* dirty memory first, so a zeroing bug shows */
		unsigned char *d = malloc(opaque(4096));
		memset(d, 0x5a, 4096);
		free(d);
		unsigned char *p = calloc(opaque(64), opaque(64));
		CHECK(p != NULL, "calloc");
		size_t bad = 0;
		for (size_t i = 0; i < 4096; i++)
			bad += p[i] != 0;
		CHECK(bad == 0, "calloc left %zu non-zero bytes", bad);
		free(p);
	}
	errno = 0;
	void *o = calloc(opaque(SIZE_MAX / 2), opaque(4));
	CHECK(o == NULL && errno == ENOMEM, "calloc overflow: %p errno %d", o, errno);
	void *z = calloc(opaque(0), opaque(0));
	CHECK(z != NULL, "calloc(0, 0)");
	free(z);
}

static void check_errno(void)
{
	errno = 0;
	void *p = malloc(opaque(SIZE_MAX - 4096));
	CHECK(p == NULL && errno == ENOMEM, "huge malloc: %p errno %d", p, errno);
	errno = 0;
	p = malloc(opaque((size_t)1 << 62));
	CHECK(p == NULL && errno == ENOMEM, "2^62 malloc: %p errno %d", p, errno);
	/* a successful allocation leaves errno alone */
	errno = 12345;
	p = malloc(opaque(100));
	CHECK(p && errno == 12345, "errno changed by a successful malloc: %d", errno);
	free(p);
	errno = 4321;
	p = calloc(opaque(3), opaque(100));
	CHECK(p && errno == 4321, "errno changed by a successful calloc: %d", errno);
	free(p);
}

/* A failed realloc keeps the block: using it afterwards is the point of the check. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuse-after-free"
static void check_realloc(void)
{
	unsigned char *p = realloc(NULL, opaque(10));
	CHECK(p != NULL, "realloc(NULL, 10)");
	for (int i = 0; i < 10; i++)
		p[i] = (unsigned char)i;
	p = realloc(p, opaque(100000));
	CHECK(p != NULL, "grow");
	int same = 1;
	for (int i = 0; i < 10; i++)
		same &= p[i] == i;
	CHECK(same, "realloc kept the contents");
	p = realloc(p, opaque(5));
	CHECK(p != NULL && p[4] == 4, "shrink");
	errno = 0;
	void *q = realloc(p, opaque(SIZE_MAX - 100));
	CHECK(q == NULL && errno == ENOMEM, "failed realloc: %p errno %d", q, errno);
	CHECK(p[3] == 3, "failed realloc keeps the block");
	/* glibc: realloc(p, 0) frees p and returns NULL */
	q = realloc(p, opaque(0));
	CHECK(q == NULL, "realloc(p, 0) = %p", q);
	q = realloc(NULL, opaque(0));
	CHECK(q != NULL, "realloc(NULL, 0) is malloc(0)");
	free(q);

	unsigned char *a = reallocarray(NULL, opaque(10), opaque(10));
	CHECK(a != NULL && malloc_usable_size(a) >= 100, "reallocarray");
	errno = 0;
	void *b = reallocarray(a, opaque(SIZE_MAX / 2), opaque(3));
	CHECK(b == NULL && errno == ENOMEM, "reallocarray overflow: %p errno %d", b, errno);
	a[99] = 7;
	CHECK(a[99] == 7, "block kept after overflow");
	free(a);
}
#pragma GCC diagnostic pop

static void check_aligned(void)
{
	for (size_t al = sizeof(void *); al <= 65536; al *= 2) {
		void *p = NULL;
		int rc = posix_memalign(&p, opaque(al), opaque(al + 3));
		CHECK(rc == 0 && p && aligned_to(p, al), "posix_memalign(%zu) = %d %p", al, rc, p);
		CHECK(malloc_usable_size(p) >= al + 3, "usable");
		free(p);
		p = aligned_alloc(opaque(al), opaque(al * 2));
		CHECK(p && aligned_to(p, al), "aligned_alloc(%zu) = %p", al, p);
		free(p);
		p = memalign(opaque(al), opaque(77));
		CHECK(p && aligned_to(p, al), "memalign(%zu) = %p", al, p);
		free(p);
	}
	long page = sysconf(_SC_PAGESIZE);
	void *v = valloc(opaque(100));
	CHECK(v && aligned_to(v, (size_t)page), "valloc %p", v);
	free(v);
	v = pvalloc(opaque(100));
	CHECK(v && aligned_to(v, (size_t)page) && malloc_usable_size(v) >= (size_t)page,
	      "pvalloc %p usable %zu", v, v ? malloc_usable_size(v) : 0);
	free(v);

	/* errors: returned, errno untouched */
	void *p = (void *)0x1;
	errno = 777;
	int rc = posix_memalign(&p, opaque(3), opaque(10));
	CHECK(rc == EINVAL && p == (void *)0x1 && errno == 777,
	      "posix_memalign(3): rc %d p %p errno %d", rc, p, errno);
	errno = 777;
	rc = posix_memalign(&p, opaque(64), opaque(SIZE_MAX - 1000));
	CHECK(rc == ENOMEM && errno == 777, "posix_memalign(huge): rc %d errno %d", rc, errno);
	errno = 0;
	p = aligned_alloc(opaque(64), opaque(SIZE_MAX - 1000));
	CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(huge) %p errno %d", p, errno);
	errno = 0;
	p = memalign(opaque(64), opaque(SIZE_MAX - 1000));
	CHECK(p == NULL && errno == ENOMEM, "memalign(huge) %p errno %d", p, errno);
}

static int mode_check(void)
{
	/* several rounds so that sampled allocations (at any rate) hit every function */
	for (int round = 0; round < 20; round++) {
		check_basic();
		check_calloc();
		check_errno();
		check_realloc();
		check_aligned();
	}
	printf("check %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
	return failures ? 1 : 0;
}

/* ---- sites ------------------------------------------------------------------------------- */

__attribute__((noinline)) void *site_malloc(void) { void *p = malloc(opaque(40)); KEEP(p); return p; }
__attribute__((noinline)) void *site_calloc(void) { void *p = calloc(opaque(5), opaque(24)); KEEP(p); return p; }
__attribute__((noinline)) void *site_realloc(void *o) { void *p = realloc(o, opaque(300)); KEEP(p); return p; }
__attribute__((noinline)) void *site_aligned(void) { void *p = aligned_alloc(opaque(64), opaque(128)); KEEP(p); return p; }
__attribute__((noinline)) void *site_memalign(void) { void *p = memalign(opaque(256), opaque(256)); KEEP(p); return p; }
__attribute__((noinline)) void *site_posix_memalign(void) { void *p = NULL; int rc = posix_memalign(&p, opaque(32), opaque(96)); KEEP(rc); return p; }
__attribute__((noinline)) void *site_reallocarray(void) { void *p = reallocarray(NULL, opaque(7), opaque(9)); KEEP(p); return p; }
__attribute__((noinline)) void *site_valloc(void) { void *p = valloc(opaque(200)); KEEP(p); return p; }
__attribute__((noinline)) void *site_deep3(void) { void *p = malloc(opaque(1234)); KEEP(p); return p; }
__attribute__((noinline)) void *site_deep2(void) { void *p = site_deep3(); KEEP(p); return p; }
__attribute__((noinline)) void *site_deep1(void) { void *p = site_deep2(); KEEP(p); return p; }

static int mode_sites(int n, bool paced)
{
	printf("main %p\n", (void *)(uintptr_t)main);
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		if (paced && i % 8 == 7)
			usleep(2000);
		free(site_malloc());
		free(site_calloc());
		free(site_realloc(NULL));
		free(site_aligned());
		free(site_memalign());
		free(site_posix_memalign());
		free(site_reallocarray());
		free(site_valloc());
		free(site_deep1());
	}
	printf("sites done\n");
	return 0;
}

/* ---- threads ----------------------------------------------------------------------------- */

static int thread_n;

__attribute__((noinline)) void *thread_site(void) { void *p = malloc(opaque(72)); KEEP(p); return p; }

static void *thread_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < thread_n; i++)
		free(thread_site());
	return NULL;
}

static int mode_threads(int t, int n)
{
	thread_n = n;
	pthread_t th[256];
	if (t > 256)
		t = 256;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < t; i++)
			pthread_create(&th[i], NULL, thread_main, NULL);
		for (int i = 0; i < t; i++)
			pthread_join(th[i], NULL);
		/* let the daemon drain the retired rings, so the next round can reuse them */
		usleep(100000);
	}
	printf("threads done\n");
	return 0;
}

/* ---- fork -------------------------------------------------------------------------------- */

__attribute__((noinline)) void *parent_site(void) { void *p = malloc(opaque(1000)); KEEP(p); return p; }
__attribute__((noinline)) void *child_site(void) { void *p = malloc(opaque(2000)); KEEP(p); return p; }

static int mode_fork(int n)
{
	for (int i = 0; i < n; i++)
		free(parent_site());
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		for (int i = 0; i < n; i++)
			free(child_site());
		exit(0); /* runs the destructors: BYE */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	/* the parent keeps allocating after the fork, into its own rings */
	for (int i = 0; i < n; i++)
		free(parent_site());
	printf("child %d status %d\n", (int)pid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* ---- rate, bytes ------------------------------------------------------------------------- */

static int mode_rate(void)
{
	uint64_t (*rate)(void) = (uint64_t(*)(void))(uintptr_t)dlsym(RTLD_DEFAULT, "llgo_heap_rate");
	if (!rate) {
		printf("rate none\n");
		return 1;
	}
	printf("rate %llu\n", (unsigned long long)rate());
	return 0;
}

__attribute__((noinline)) void *bytes_site(size_t size) { void *p = malloc(opaque(size)); KEEP(p); return p; }

static int mode_bytes(long mb, long size)
{
	long n = mb * 1024 * 1024 / size;
	for (long i = 0; i < n; i++)
		free(bytes_site((size_t)size));
	printf("bytes done %ld\n", n);
	return 0;
}

static long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static long resident_kib(void)
{
	long pages = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int mode_churn(long n, long size)
{
	long f0 = 0;
	uint64_t x = 88172645463325252ull;
	for (long i = 0; i < n; i++) {
		if (i == n / 2)
			f0 = minor_faults();
		char *p[4];
		for (int k = 0; k < 4; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			size_t sz = (size_t)size / 4 + (size_t)(x % (uint64_t)(size - size / 4 + 1));
			p[k] = bytes_site(sz);
			memset(p[k], (int)i, sz);
		}
		for (int k = 0; k < 4; k++)
			free(p[k]);
	}
	printf("faults %ld\n", minor_faults() - f0);
	return 0;
}

static int mode_peak(long n, long size)
{
	char **held = calloc((size_t)n, sizeof(*held));
	if (!held)
		return 1;
	long r0 = resident_kib();
	for (long i = 0; i < n; i++) {
		held[i] = bytes_site((size_t)size);
		memset(held[i], 1, (size_t)size);
	}
	long r1 = resident_kib();
	for (long i = 0; i < n; i++)
		free(held[i]);
	long r2 = resident_kib();
	free(held);
	printf("held_kib %ld left_kib %ld\n", r1 - r0, r2 - r0);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "check";
	if (strcmp(mode, "check") == 0)
		return mode_check();
	if (strcmp(mode, "sites") == 0)
		return mode_sites(argc > 2 ? atoi(argv[2]) : 100, false);
	if (strcmp(mode, "paced") == 0)
		return mode_sites(argc > 2 ? atoi(argv[2]) : 100, true);
	if (strcmp(mode, "threads") == 0)
		return mode_threads(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 100);
	if (strcmp(mode, "fork") == 0)
		return mode_fork(argc > 2 ? atoi(argv[2]) : 100);
	if (strcmp(mode, "rate") == 0)
		return mode_rate();
	if (strcmp(mode, "bytes") == 0)
		return mode_bytes(argc > 2 ? atol(argv[2]) : 64, argc > 3 ? atol(argv[3]) : 1024);
	if (strcmp(mode, "churn") == 0)
		return mode_churn(argc > 2 ? atol(argv[2]) : 10000, argc > 3 ? atol(argv[3]) : 32768);
	if (strcmp(mode, "peak") == 0)
		return mode_peak(argc > 2 ? atol(argv[2]) : 2048, argc > 3 ? atol(argv[3]) : 32768);
	fprintf(stderr, "unknown mode %s\n", mode);
	return 2;
}
