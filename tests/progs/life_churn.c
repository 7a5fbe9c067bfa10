// SPDX-License-Identifier: MIT
/*
 * life_churn.c: thread churn for the lifecycle tests. Usage:
 *   life_churn NTHREADS ALLOCS CONC
 * starts and joins NTHREADS short-lived threads, CONC at a time, each making ALLOCS
 * allocations of 40 bytes at churn_site. Two more threads are started from a constructor
 * (before main) and make CTOR_ALLOCS allocations of 72 bytes at ctor_site. Prints
 *   site churn_site 40 COUNT
 *   site ctor_site 72 COUNT
 *   hwm_kb_early KB    (VmHWM after a tenth of the threads)
 *   hwm_kb_end KB      (VmHWM at the end)
 * so the test can compare the counts with the profile and bound the peak RSS.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")
#define CTOR_THREADS 2
#define CTOR_ALLOCS 1000

static int allocs = 4;
static pthread_t ctor_threads[CTOR_THREADS];

__attribute__((noinline)) void churn_site(void)
{
	void *p = malloc(40);
	KEEP(p);
	free(p);
}

__attribute__((noinline)) void ctor_site(void)
{
	void *p = malloc(72);
	KEEP(p);
	free(p);
}

static void *ctor_thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < CTOR_ALLOCS; i++)
		ctor_site();
	return NULL;
}

static void *churn_thread(void *arg)
{
	(void)arg;
	for (int i = 0; i < allocs; i++)
		churn_site();
	return NULL;
}

__attribute__((constructor)) static void start_early_threads(void)
{
	for (int i = 0; i < CTOR_THREADS; i++)
		if (pthread_create(&ctor_threads[i], NULL, ctor_thread, NULL) != 0)
			abort();
}

static long hwm_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "VmHWM:", 6) == 0)
			v = atol(line + 6);
	if (f)
		fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	allocs = argc > 2 ? atoi(argv[2]) : 4;
	int conc = argc > 3 ? atoi(argv[3]) : 1;
	if (conc < 1 || conc > 256)
		conc = 1;
	for (int i = 0; i < CTOR_THREADS; i++)
		pthread_join(ctor_threads[i], NULL);
	pthread_t th[256];
	long early = -1;
	int started = 0;
	while (started < n) {
		int k = n - started < conc ? n - started : conc;
		for (int i = 0; i < k; i++)
			if (pthread_create(&th[i], NULL, churn_thread, NULL) != 0) {
				perror("pthread_create");
				return 1;
			}
		for (int i = 0; i < k; i++)
			pthread_join(th[i], NULL);
		started += k;
		if (early < 0 && started >= n / 10)
			early = hwm_kb();
	}
	printf("site churn_site 40 %ld\n", (long)n * allocs);
	printf("site ctor_site 72 %d\n", CTOR_THREADS * CTOR_ALLOCS);
	printf("hwm_kb_early %ld\n", early);
	printf("hwm_kb_end %ld\n", hwm_kb());
	return 0;
}
