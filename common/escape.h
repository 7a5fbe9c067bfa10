/* SPDX-License-Identifier: MIT */
/*
 * escape.h: names from a profiled process's files (symbols, source paths, mapping paths)
 * made safe for line-oriented text and terminals (escape.c).
 */
#ifndef LLGO_COMMON_ESCAPE_H
#define LLGO_COMMON_ESCAPE_H

#include <stdbool.h>

#include "buf.h"

/* Whether s holds anything escape_append would change. */
bool escape_needed(const char *s);
/* Append s with control characters (C0, DEL, C1), bytes that are not UTF-8 and backslash
 * written as \xNN (backslash as \\): the result holds no line break, no terminal escape. */
int escape_append(struct buf *b, const char *s);
/* s escaped as above, in a new string (free it); NULL when out of memory. */
char *escape_dup(const char *s);

#endif
