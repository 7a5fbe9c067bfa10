// SPDX-License-Identifier: MIT
/*
 * gzip.c: gzip (RFC 1952) framing of a buffer through zlib, for the pprof writer (Go's
 * profiles are gzipped protobuf). Kept apart from buf.c so the client links without zlib.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "gzip.h"

int gzip_append(struct buf *out, const void *in, size_t n, int level)
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
