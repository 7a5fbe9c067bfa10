/* SPDX-License-Identifier: MIT */
/*
 * gzip.h: gzip (RFC 1952) framing of a buffer through zlib (gzip.c), for the pprof writer and
 * `llgo-heap diff` (Go's profiles are gzipped protobuf).
 */
#ifndef LLGO_COMMON_GZIP_H
#define LLGO_COMMON_GZIP_H

#include <stddef.h>

#include "buf.h"

/* Append the gzip (RFC 1952) compression of in[0..n) to out; level as zlib's. */
int gzip_append(struct buf *out, const void *in, size_t n, int level);

#endif
