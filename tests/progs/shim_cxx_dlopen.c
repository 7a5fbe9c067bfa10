// SPDX-License-Identifier: MIT
/*
 * shim_cxx_dlopen.c: a C program that links no C++ runtime and opens a C++ library with
 * dlopen RTLD_LOCAL (argv[1]), for tests/test_shim.c: the shim's operators are resolved at the
 * library's first new, and libstdc++ is found outside the global scope. Prints
 * "plug OK of TOTAL".
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
	int (*run)(int *) = (int (*)(int *))dlsym(h, "plug_run");
	if (!run)
		return 1;
	int total = 0, ok = run(&total);
	printf("plug %d of %d\n", ok, total);
	return 0;
}
