// SPDX-License-Identifier: MIT
/*
 * unwind_fp.c: a frame-pointer program (the Makefile's default flags) calling into libc, which
 * has none: fopen from load_file and printf from report, for test_unwind (the caller of fopen
 * must be present). Lines the test checks carry markers ("@NAME").
 *
 * usage: unwind_fp N FILE
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *idle(void *arg)
{
	return arg;
}

__attribute__((noinline)) static long load_file(const char *path)
{
	FILE *f = fopen(path, "r"); /* @load_file */
	if (!f)
		return -1;
	long n = 0;
	while (fgetc(f) != EOF)
		n++;
	fclose(f);
	return n;
}

__attribute__((noinline)) static void report(long n)
{
	printf("read %ld bytes\n", n); /* @report */
	fflush(stdout); /* printf is not a tail call */
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10;
	const char *path = argc > 2 ? argv[2] : "/etc/hostname";
	long total = 0;
	/* One thread first, so that stdio takes its locks from the start, as it does under
	 * heaptrack (whose own thread makes every program multi-threaded): unlocked, getc
	 * reaches __uflow by a tail call and has no frame of its own. */
	pthread_t t;
	if (pthread_create(&t, NULL, idle, NULL) != 0 || pthread_join(t, NULL) != 0)
		return 1;
	for (int i = 0; i < n; i++)
		total += load_file(path); /* @main_load */
	report(total); /* @main_report */
	return 0;
}
