// SPDX-License-Identifier: MIT
/*
 * buf.c: a growable byte buffer for the output writers and socket answers, and gzip
 * framing of a buffer through zlib. A buffer whose allocation failed once stays failed
 * (b->failed) and ignores further appends, so writers check once at the end.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "internal.h"

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

int buf_gzip(struct buf *out, const void *in, size_t n, int level)
{
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	/* windowBits 15 + 16 selects the gzip wrapper (RFC 1952) */
	if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	int err = 0;
	zs.next_in = (Bytef *)(uintptr_t)in;
	size_t left = n;
	int flush;
	do {
		uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
		zs.avail_in = chunk;
		left -= chunk;
		flush = left ? Z_NO_FLUSH : Z_FINISH;
		do {
			if ((err = buf_reserve(out, 65536)) != 0)
				goto out;
			zs.next_out = out->data + out->len;
			zs.avail_out = (uInt)(out->cap - out->len);
			int rc = deflate(&zs, flush);
			if (rc == Z_STREAM_ERROR) {
				err = -EIO;
				goto out;
			}
			out->len = out->cap - zs.avail_out;
		} while (zs.avail_out == 0);
	} while (flush != Z_FINISH);
out:
	deflateEnd(&zs);
	return err;
}
