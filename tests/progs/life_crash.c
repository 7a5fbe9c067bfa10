// SPDX-License-Identifier: MIT
/*
 * life_crash.c: processes that die, or outlive their daemon, for the crash tests. Usage:
 *   life_crash selfkill K   K allocations of 1234 bytes at crash_site, then SIGKILL itself
 *                           at once: the records are still in its ring when it dies
 *   life_crash ready K      the same K allocations, then prints "ready" and sleeps until
 *                           killed
 *   life_crash survive MS T T threads allocate at rate-1 speed at survive_site for MS
 *                           milliseconds; every 100 ms one more short-lived thread makes
 *                           100 allocations (new rings are asked for after the daemon died);
 *                           prints "started" once allocating, and at the end
 *                           "site survive_site 64 COUNT" and "elapsed_ms MS"
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void crash_site(void) { void *p = malloc(1234); KEEP(p); free(p); }
__attribute__((noinline)) void survive_site(void) { void *p = malloc(64); KEEP(p); free(p); }

static atomic_int stop;
static atomic_long total;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void *survivor(void *arg)
{
	long n = 0, max = (long)(intptr_t)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed) && (max == 0 || n < max)) {
		survive_site();
		n++;
	}
	atomic_fetch_add(&total, n);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	alarm(60);
	const char *mode = argv[1];
	long k = atol(argv[2]);
	if (strcmp(mode, "selfkill") == 0 || strcmp(mode, "ready") == 0) {
		/* Attaching does not hold up main: the daemon reads our mappings a moment after
		 * we start. A process SIGKILLed before that cannot be symbolized (it never
		 * reaches the exit handshake); give the daemon that moment. */
		usleep(300 * 1000);
		for (long i = 0; i < k; i++)
			crash_site();
		if (mode[0] == 's')
			kill(getpid(), SIGKILL);
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	if (strcmp(mode, "survive") == 0) {
		int t = argc > 3 ? atoi(argv[3]) : 4;
		if (t < 1 || t > 64)
			t = 4;
		long t0 = now_ms();
		pthread_t th[64];
		for (int i = 0; i < t; i++)
			if (pthread_create(&th[i], NULL, survivor, NULL) != 0)
				return 1;
		printf("started\n");
		fflush(stdout);
		while (now_ms() - t0 < k) {
			struct timespec ts = { 0, 100 * 1000000L };
			nanosleep(&ts, NULL);
			pthread_t x;
			if (pthread_create(&x, NULL, survivor, (void *)(intptr_t)100) != 0)
				return 1;
			pthread_join(x, NULL);
		}
		atomic_store(&stop, 1);
		for (int i = 0; i < t; i++)
			pthread_join(th[i], NULL);
		printf("site survive_site 64 %ld\n", atomic_load(&total));
		printf("elapsed_ms %ld\n", now_ms() - t0);
		return 0;
	}
	return 2;
}
