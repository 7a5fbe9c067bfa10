// SPDX-License-Identifier: MIT
/*
 * hosted_main.c: hs.c's glue where a C library exists: wasm32-wasi (wasi-libc, run under
 * Node's WASI) and the native build. The libc's malloc is the allocator underneath; output
 * goes to standard output with write(2) (WASI fd_write).
 */
#include <stdlib.h>
#include <unistd.h>

#include "hs.h"

void *hs_raw_alloc(size_t size)
{
	return malloc(size);
}

void hs_raw_free(void *p)
{
	free(p);
}

int hs_write(void *ctx, const char *s, size_t n)
{
	(void)ctx;
	while (n) {
		ssize_t w = write(1, s, n);
		if (w <= 0)
			return 1;
		s += w;
		n -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	return hs_main(argc, argv);
}
