/* SPDX-License-Identifier: MIT */
/*
 * buf.h: a growable byte buffer (buf.c), used by the daemon's writers and answers and by the
 * client side (client/) to collect answers. A buffer whose allocation failed once stays
 * failed (b->failed) and ignores further appends, so writers check once at the end.
 */
#ifndef LLGO_COMMON_BUF_H
#define LLGO_COMMON_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

struct buf {
	unsigned char *data;
	size_t len;
	size_t cap;
	bool failed; /* an allocation failed; further appends are ignored */
};

void buf_init(struct buf *b);
void buf_free(struct buf *b);
void buf_reset(struct buf *b);
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_putc(struct buf *b, char c);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);

#endif
