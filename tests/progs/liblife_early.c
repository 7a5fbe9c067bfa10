// SPDX-License-Identifier: MIT
/*
 * liblife_early.c: threads that exist before the shim attaches. Preloaded after the shim
 * (LD_PRELOAD="libllgoheap.so liblife_early.so"), so its constructor runs before the
 * shim's: it starts EARLY_THREADS threads that allocate at early_pre_site in a loop, and
 * returns only once each has allocated, so the shim resolves the allocator, connects and
 * waits for the daemon's answer while these threads allocate. life_early (the program) then
 * calls life_early_go(n): each thread makes exactly n allocations of 96 bytes at early_site
 * and exits; life_early_join() waits for them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")
#define EARLY_THREADS 4

static pthread_t early_th[EARLY_THREADS];
static atomic_int early_phase;
static atomic_int early_ready;
static atomic_int early_n;

__attribute__((noinline)) void early_pre_site(void)
{
	void *p = malloc(24);
	KEEP(p);
	free(p);
}

__attribute__((noinline)) void early_site(void)
{
	void *p = malloc(96);
	KEEP(p);
	free(p);
}

static void *early_thread(void *arg)
{
	(void)arg;
	early_pre_site();
	atomic_fetch_add(&early_ready, 1);
	while (atomic_load(&early_phase) == 0)
		early_pre_site();
	int n = atomic_load(&early_n);
	for (int i = 0; i < n; i++)
		early_site();
	return NULL;
}

__attribute__((constructor)) static void early_start(void)
{
	for (int i = 0; i < EARLY_THREADS; i++)
		if (pthread_create(&early_th[i], NULL, early_thread, NULL) != 0)
			abort();
	while (atomic_load(&early_ready) < EARLY_THREADS)
		;
}

int life_early_go(int n)
{
	atomic_store(&early_n, n);
	atomic_store(&early_phase, 1);
	return EARLY_THREADS;
}

void life_early_join(void)
{
	for (int i = 0; i < EARLY_THREADS; i++)
		pthread_join(early_th[i], NULL);
}
