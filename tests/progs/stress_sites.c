// SPDX-License-Identifier: MIT
/*
 * stress_sites.c: many threads allocating from several sites, for the stress and overload
 * tests. Usage:
 *   stress_sites THREADS time MS [BURST US]   run for MS milliseconds; with BURST, each
 *                                             thread sleeps US microseconds after every
 *                                             BURST allocations (a paced load)
 *   stress_sites THREADS count N              N allocations per thread, flat out
 * Thread t's i-th allocation is made at site (t + i) % 5; every block is freed at once.
 * Prints "started" when every thread runs (time mode), then one line per site,
 * "site NAME SIZE COUNT", with the allocations made there.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")
#define NSITES 5
#define MAXT 64

__attribute__((noinline)) void stress_a(void) { void *p = malloc(16); KEEP(p); free(p); }
__attribute__((noinline)) void stress_b(void) { void *p = malloc(200); KEEP(p); free(p); }
__attribute__((noinline)) void stress_c(void) { void *p = calloc(4, 250); KEEP(p); free(p); }
__attribute__((noinline)) void stress_d(void) { void *p = malloc(3000); KEEP(p); free(p); }
__attribute__((noinline)) void stress_e(void)
{
	void *p = aligned_alloc(64, 640);
	KEEP(p);
	free(p);
}

static void (*const sites[NSITES])(void) = { stress_a, stress_b, stress_c, stress_d, stress_e };
static const char *const names[NSITES] = { "stress_a", "stress_b", "stress_c", "stress_d",
					    "stress_e" };
static const long sizes[NSITES] = { 16, 200, 1000, 3000, 640 };

static atomic_int stop, running;
static long per_thread = -1;
static long burst, pause_us;
static long counts[MAXT][NSITES];

static void *worker(void *arg)
{
	long t = (long)arg;
	atomic_fetch_add(&running, 1);
	for (long i = 0; per_thread < 0 ? !atomic_load_explicit(&stop, memory_order_relaxed)
					: i < per_thread; i++) {
		int s = (int)((t + i) % NSITES);
		sites[s]();
		counts[t][s]++;
		if (burst > 0 && (i + 1) % burst == 0) {
			struct timespec ts = { 0, pause_us * 1000L };
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	int nt = atoi(argv[1]);
	if (nt < 1 || nt > MAXT)
		return 2;
	long arg = atol(argv[3]);
	bool timed = strcmp(argv[2], "time") == 0;
	if (!timed)
		per_thread = arg;
	if (timed && argc > 5) {
		burst = atol(argv[4]);
		pause_us = atol(argv[5]);
		if (pause_us < 0 || pause_us > 999999)
			return 2;
	}
	pthread_t th[MAXT];
	for (long t = 0; t < nt; t++)
		if (pthread_create(&th[t], NULL, worker, (void *)t) != 0)
			return 1;
	if (timed) {
		while (atomic_load(&running) < nt)
			;
		printf("started\n");
		fflush(stdout);
		struct timespec ts = { arg / 1000, (arg % 1000) * 1000000L };
		nanosleep(&ts, NULL);
		atomic_store(&stop, 1);
	}
	for (int t = 0; t < nt; t++)
		pthread_join(th[t], NULL);
	for (int s = 0; s < NSITES; s++) {
		long c = 0;
		for (int t = 0; t < nt; t++)
			c += counts[t][s];
		printf("site %s %ld %ld\n", names[s], sizes[s], c);
	}
	return 0;
}
