// SPDX-License-Identifier: MIT
/* sel.h: the allocator of sel_alloc.c as sel_main.c calls it. */
#ifndef LLGO_TESTS_SELECT_SEL_H
#define LLGO_TESTS_SELECT_SEL_H

#include <stddef.h>

void sel_hook_only(void *p, size_t size);
void *myalloc_alloc(size_t size);

#endif
