// SPDX-License-Identifier: MIT
/*
 * life_early.c: the program half of liblife_early.c (see there). Usage: life_early N.
 * Without the library preloaded it fails. Prints "site early_site 96 COUNT".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	int (*go)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "life_early_go");
	void (*join)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "life_early_join");
	if (!go || !join) {
		fprintf(stderr, "liblife_early.so is not preloaded\n");
		return 2;
	}
	int threads = go(n);
	join();
	printf("site early_site 96 %ld\n", (long)threads * n);
	return 0;
}
