// SPDX-License-Identifier: MIT
/*
 * hs.h: what the heapsampling workload (hs.c) needs from its target's glue: an allocator
 * underneath the profiled one, an output, and a main that passes the arguments.
 */
#ifndef LLGO_TESTS_FALLBACK_HS_H
#define LLGO_TESTS_FALLBACK_HS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void *hs_raw_alloc(size_t size);
void hs_raw_free(void *p);
/* Write n bytes to the program's output; 0 or non-zero on failure (llgo_fallback_write_fn). */
int hs_write(void *ctx, const char *s, size_t n);
/* argv[1..4]: MODE N SEED RATE. Returns the exit status. */
int hs_main(int argc, char **argv);

#endif
