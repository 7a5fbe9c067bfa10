// SPDX-License-Identifier: MIT
/*
 * buf.c: a growable byte buffer (buf.h) for the output writers, socket answers and the
 * client side's collected answers. A buffer whose allocation failed once stays failed
 * (b->failed) and ignores further appends, so writers check once at the end. Compression is
 * gzip.c's, so that the client links without zlib.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

void buf_init(struct buf *b)
{
	memset(b, 0, sizeof(*b));
}

void buf_free(struct buf *b)
{
	free(b->data);
	buf_init(b);
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	b->failed = false;
}

int buf_reserve(struct buf *b, size_t extra)
{
	if (b->failed)
		return -ENOMEM;
	if (extra <= b->cap - b->len)
		return 0;
	size_t need = b->len + extra;
	if (need < b->len)
		goto fail;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			goto fail;
		cap *= 2;
	}
	unsigned char *p = realloc(b->data, cap);
	if (!p)
		goto fail;
	b->data = p;
	b->cap = cap;
	return 0;
fail:
	b->failed = true;
	return -ENOMEM;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	if (n == 0)
		return b->failed ? -ENOMEM : 0;
	int err = buf_reserve(b, n);
	if (err)
		return err;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

int buf_putc(struct buf *b, char c)
{
	return buf_append(b, &c, 1);
}

int buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return -EINVAL;
	/* +1 for vsnprintf's terminator, which is not counted in len */
	int err = buf_reserve(b, (size_t)n + 1);
	if (err)
		return err;
	vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int err = buf_vprintf(b, fmt, ap);
	va_end(ap);
	return err;
}
