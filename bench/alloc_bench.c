// SPDX-License-Identifier: MIT
/*
 * alloc_bench.c: the allocation microbenchmark every configuration of `make bench` and
 * `make bench-peers` runs (plain, under the shim, under heaptrack, with jemalloc or tcmalloc
 * preloaded). It knows nothing of any profiler: the driver (alloc_driver.c) picks the
 * allocator and the profiler through the environment and reads one RESULT line.
 *
 * Method (the original proposal's): W warm-up and N measured batches of B escaping
 * malloc+free pairs per thread; each batch is timed with CLOCK_MONOTONIC and reported as
 * ns per pair; the process prints the median, minimum and maximum of its measured batches.
 *
 * Workloads:
 *   small  16-byte blocks;
 *   mixed  sizes from a fixed pseudo-random table, log-uniform over 16 B .. 4 KiB
 *          (mean ~740 B), the same sequence in every run;
 *   new    C++ operator new(16) and the sized operator delete(p, 16) a `delete` of a 16-byte
 *          object compiles to, called by their Itanium-ABI names (libstdc++ is linked);
 *   new-aligned  operator new(64, std::align_val_t(64)) and the sized aligned delete;
 *   with -t 2 each of two threads runs the workload at once, batch by batch (a barrier
 *   separates batches, outside the timed region); the batches of both threads are pooled.
 * Every pointer escapes through an asm barrier with a memory clobber, so the compiler can
 * neither drop nor merge the malloc/free pair.
 *
 * Other modes: --seconds S runs the workload flat out for S seconds (the drop test) and
 * prints pairs done; --rss prints VmRSS and its parts at the end; --pairs N runs one
 * untimed loop of N pairs in bench_loop() (the function callgrind is told to collect);
 * --live L with --pairs N keeps a live heap of L blocks (each step frees the oldest block and
 * allocates a new one, FIFO), for the resident-memory cost of in-use tracking; with --touch
 * every block is written whole, as a program fills what it allocates (untouched blocks
 * placed in pages of their own would never become resident); --seed K draws another table of
 * mixed sizes (glibc's heap ends at sizes that differ by a megabyte from one sequence to the
 * next: compare configurations over the same seeds).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIXED_TABLE 4096u

enum workload { WL_SMALL, WL_MIXED, WL_NEW, WL_NEW_ALIGNED };
static const char *const workload_names[] = { "small", "mixed", "new", "new-aligned" };

/* libstdc++'s operator new(size_t), operator delete(void *, size_t) and their aligned forms
 * (std::align_val_t is a size_t) */
void *_Znwm(size_t n);
void _ZdlPvm(void *p, size_t n);
void *_ZnwmSt11align_val_t(size_t n, size_t al);
void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al);

struct config {
	enum workload wl;
	int threads;
	int warmup;
	int batches;
	long batch;
	double seconds;
	long pairs;
	long live;
	int rss;
	int touch;
	int verbose;
	unsigned long seed;
};

static struct config cfg = { WL_SMALL, 1, 5, 61, 250000, 0, 0, 0, 0, 0, 0, 0 };
static uint16_t mixed_sizes[MIXED_TABLE];
static pthread_barrier_t barrier;
static volatile int stop_flag;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Log-uniform sizes 16 .. 4096 from a fixed xorshift sequence: the same table every run with
 * the same --seed (0 unless given). */
static void mixed_init(uint64_t seed)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL ^ (seed * 0xbf58476d1ce4e5b9ULL);
	if (!x)
		x = 1;
	for (unsigned i = 0; i < MIXED_TABLE; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		double u = (double)(x >> 11) / (double)(1ULL << 53);
		double s = 16.0;
		/* 16 * 2^(8u) without libm */
		double e = 8.0 * u;
		int ip = (int)e;
		double fp = e - ip;
		for (int k = 0; k < ip; k++)
			s *= 2.0;
		/* 2^fp by a short series; precision is irrelevant, determinism is not */
		double t = fp * 0.6931471805599453, term = 1.0, sum = 1.0;
		for (int k = 1; k < 12; k++) {
			term *= t / k;
			sum += term;
		}
		s *= sum;
		unsigned v = (unsigned)s;
		if (v < 16)
			v = 16;
		if (v > 4096)
			v = 4096;
		mixed_sizes[i] = (uint16_t)v;
	}
}

static double mixed_mean(void)
{
	double sum = 0;
	for (unsigned i = 0; i < MIXED_TABLE; i++)
		sum += mixed_sizes[i];
	return sum / MIXED_TABLE;
}

static double bench_mean_size(void)
{
	return cfg.wl == WL_MIXED ? mixed_mean() : cfg.wl == WL_NEW_ALIGNED ? 64.0 : 16.0;
}

/* The measured loops. noinline so callgrind can collect exactly them (--toggle-collect). */
__attribute__((noinline)) void bench_loop_small(long n)
{
	for (long i = 0; i < n; i++) {
		void *p = malloc(16);
		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
}

__attribute__((noinline)) void bench_loop_mixed(long n, unsigned start)
{
	for (long i = 0; i < n; i++) {
		void *p = malloc(mixed_sizes[(start + (unsigned)i) & (MIXED_TABLE - 1)]);
		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
}

/* A live heap of cfg.live blocks, replaced oldest first: n replacements. */
static void bench_loop_live(long n)
{
	void **ring = calloc((size_t)cfg.live, sizeof(void *));
	if (!ring)
		exit(1);
	for (long i = 0; i < cfg.live + n; i++) {
		size_t sz = cfg.wl == WL_SMALL ? 16 : mixed_sizes[(unsigned)i & (MIXED_TABLE - 1)];
		long k = i % cfg.live;
		free(ring[k]);
		ring[k] = malloc(sz);
		if (cfg.touch && ring[k])
			memset(ring[k], 0x5a, sz);
		__asm__ volatile("" : : "r"(ring[k]) : "memory");
	}
	/* the heap stays live until the RSS is read */
}

__attribute__((noinline)) void bench_loop_new(long n)
{
	for (long i = 0; i < n; i++) {
		void *p = _Znwm(16);
		__asm__ volatile("" : : "r"(p) : "memory");
		_ZdlPvm(p, 16);
	}
}

__attribute__((noinline)) void bench_loop_new_aligned(long n)
{
	for (long i = 0; i < n; i++) {
		void *p = _ZnwmSt11align_val_t(64, 64);
		__asm__ volatile("" : : "r"(p) : "memory");
		_ZdlPvmSt11align_val_t(p, 64, 64);
	}
}

/* n pairs of the configured workload (mixed: from table entry start on). */
static void bench_batch(long n, unsigned start)
{
	switch (cfg.wl) {
	case WL_SMALL:
		bench_loop_small(n);
		break;
	case WL_MIXED:
		bench_loop_mixed(n, start);
		break;
	case WL_NEW:
		bench_loop_new(n);
		break;
	case WL_NEW_ALIGNED:
		bench_loop_new_aligned(n);
		break;
	}
}

__attribute__((noinline)) void bench_loop(long n)
{
	if (cfg.live > 0) {
		bench_loop_live(n);
		return;
	}
	bench_batch(n, 0);
}

struct worker {
	pthread_t th;
	int id;
	double *ns; /* per measured batch */
	long done;  /* --seconds mode */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	unsigned start = (unsigned)w->id * 1021u;
	if (cfg.seconds > 0) {
		pthread_barrier_wait(&barrier);
		while (!stop_flag) {
			bench_batch(10000, start);
			start += 10000;
			w->done += 10000;
		}
		return NULL;
	}
	for (int b = 0; b < cfg.warmup + cfg.batches; b++) {
		pthread_barrier_wait(&barrier);
		double t0 = now_ns();
		bench_batch(cfg.batch, start);
		double t1 = now_ns();
		start += (unsigned)cfg.batch;
		if (b >= cfg.warmup)
			w->ns[b - cfg.warmup] = (t1 - t0) / (double)cfg.batch;
	}
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void print_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long vmrss = -1, anon = -1, file = -1, shmem = -1;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "VmRSS: %ld", &vmrss);
		sscanf(line, "RssAnon: %ld", &anon);
		sscanf(line, "RssFile: %ld", &file);
		sscanf(line, "RssShmem: %ld", &shmem);
	}
	fclose(f);
	/* the [heap] mapping's resident part: glibc's main heap, whose size moves by a megabyte
	 * with the exact sequence of sizes (--seed); the rest is what libraries and the shim add */
	long heap = 0;
	bool in_heap = false;
	if ((f = fopen("/proc/self/smaps", "r"))) {
		while (fgets(line, sizeof(line), f)) {
			if (strchr(line, '-') && strstr(line, " rw") && strchr(line, ':'))
				in_heap = strstr(line, "[heap]") != NULL;
			if (in_heap && sscanf(line, "Rss: %ld", &heap) == 1)
				in_heap = false;
		}
		fclose(f);
	}
	printf("RSS vmrss_kb=%ld anon_kb=%ld file_kb=%ld shmem_kb=%ld heap_kb=%ld\n", vmrss, anon,
	       file, shmem, heap);
	/* ALLOC_BENCH_SMAPS=FILE: the mappings behind those figures (where resident memory is) */
	const char *dump = getenv("ALLOC_BENCH_SMAPS");
	FILE *in = dump ? fopen("/proc/self/smaps", "r") : NULL, *out = in ? fopen(dump, "w") : NULL;
	while (out && fgets(line, sizeof(line), in))
		fputs(line, out);
	if (out)
		fclose(out);
	if (in)
		fclose(in);
}

static void usage(void)
{
	fprintf(stderr, "usage: alloc_bench [-w small|mixed|new|new-aligned] [-t THREADS] "
			"[-W WARMUP] [-n BATCHES] [-b BATCH] [--seconds S] [--pairs N [--live L [--touch]]] "
			"[--seed K] [--rss] [-v]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--rss") == 0) {
			cfg.rss = 1;
			continue;
		}
		if (strcmp(a, "--touch") == 0) {
			cfg.touch = 1;
			continue;
		}
		if (strcmp(a, "-v") == 0) {
			cfg.verbose = 1;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (strcmp(a, "-w") == 0) {
			if (strcmp(v, "small") == 0)
				cfg.wl = WL_SMALL;
			else if (strcmp(v, "mixed") == 0)
				cfg.wl = WL_MIXED;
			else if (strcmp(v, "new") == 0)
				cfg.wl = WL_NEW;
			else if (strcmp(v, "new-aligned") == 0)
				cfg.wl = WL_NEW_ALIGNED;
			else
				usage();
		} else if (strcmp(a, "-t") == 0) {
			cfg.threads = atoi(v);
		} else if (strcmp(a, "-W") == 0) {
			cfg.warmup = atoi(v);
		} else if (strcmp(a, "-n") == 0) {
			cfg.batches = atoi(v);
		} else if (strcmp(a, "-b") == 0) {
			cfg.batch = atol(v);
		} else if (strcmp(a, "--seconds") == 0) {
			cfg.seconds = atof(v);
		} else if (strcmp(a, "--pairs") == 0) {
			cfg.pairs = atol(v);
		} else if (strcmp(a, "--live") == 0) {
			cfg.live = atol(v);
		} else if (strcmp(a, "--seed") == 0) {
			cfg.seed = strtoul(v, NULL, 10);
		} else {
			usage();
		}
	}
	if (cfg.threads < 1 || cfg.threads > 64 || cfg.batches < 1 || cfg.warmup < 0 ||
	    cfg.batch < 1)
		usage();
	mixed_init(cfg.seed);

	if (cfg.pairs > 0) {
		bench_loop(cfg.pairs);
		printf("PAIRS %ld workload=%s mean_size=%.1f\n", cfg.pairs,
		       workload_names[cfg.wl], bench_mean_size());
		if (cfg.rss)
			print_rss();
		return 0;
	}

	struct worker *w = calloc((size_t)cfg.threads, sizeof(*w));
	if (!w)
		return 1;
	pthread_barrier_init(&barrier, NULL, (unsigned)cfg.threads);
	for (int t = 0; t < cfg.threads; t++) {
		w[t].id = t;
		w[t].ns = calloc((size_t)cfg.batches, sizeof(double));
		if (!w[t].ns)
			return 1;
	}
	double t0 = now_ns();
	/* Thread 0 is the main thread, so a single-threaded run creates no thread at all. */
	for (int t = 1; t < cfg.threads; t++) {
		int rc = pthread_create(&w[t].th, NULL, worker_main, &w[t]);
		if (rc) {
			fprintf(stderr, "alloc_bench: pthread_create: %s\n", strerror(rc));
			return 1;
		}
	}
	if (cfg.seconds > 0) {
		/* The main thread allocates too and checks the clock between chunks of 10,000
		 * pairs; no timer thread or signal perturbs the run. */
		double stop_at = now_ns() + cfg.seconds * 1e9;
		pthread_barrier_wait(&barrier);
		unsigned start = 0;
		while (now_ns() < stop_at) {
			bench_batch(10000, start);
			start += 10000;
			w[0].done += 10000;
		}
		stop_flag = 1;
	} else {
		worker_main(&w[0]);
	}
	for (int t = 1; t < cfg.threads; t++)
		pthread_join(w[t].th, NULL);
	double elapsed = (now_ns() - t0) / 1e9;

	if (cfg.seconds > 0) {
		long total = 0;
		for (int t = 0; t < cfg.threads; t++)
			total += w[t].done;
		printf("DONE pairs=%ld seconds=%.2f threads=%d pid=%d\n", total, elapsed,
		       cfg.threads, (int)getpid());
		if (cfg.rss)
			print_rss();
		return 0;
	}

	size_t n = (size_t)cfg.batches * (size_t)cfg.threads;
	double *all = malloc(n * sizeof(double));
	if (!all)
		return 1;
	for (int t = 0; t < cfg.threads; t++)
		memcpy(all + (size_t)t * (size_t)cfg.batches, w[t].ns,
		       (size_t)cfg.batches * sizeof(double));
	if (cfg.verbose)
		for (size_t i = 0; i < n; i++)
			printf("BATCH %zu %.3f\n", i, all[i]);
	qsort(all, n, sizeof(double), cmp_double);
	double med = n % 2 ? all[n / 2] : (all[n / 2 - 1] + all[n / 2]) / 2;
	printf("RESULT median=%.3f min=%.3f max=%.3f workload=%s threads=%d batches=%d "
	       "batch=%ld mean_size=%.1f seconds=%.2f\n",
	       med, all[0], all[n - 1], workload_names[cfg.wl], cfg.threads, cfg.batches,
	       cfg.batch, bench_mean_size(), elapsed);
	if (cfg.rss)
		print_rss();
	fflush(stdout);
	return 0;
}
