/* SPDX-License-Identifier: MIT */
/*
 * pprofread.h: a pprof profile (perftools.profiles.Profile, gzipped or not) read from a file
 * or a buffer (pprofread.c), for `llgo-heap diff` and `top --base` (diff.c). The input is
 * hostile: every length is checked, sizes are capped, every reference is resolved, and a
 * malformed profile is one error message, never a crash.
 */
#ifndef LLGO_CLIENT_PPROFREAD_H
#define LLGO_CLIENT_PPROFREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/buf.h"

/* Largest profile accepted, compressed or once decompressed. */
#define PPROFREAD_MAX_BYTES (256u << 20)
/* Frame 0 of a sample without locations. */
#define PPROFREAD_NO_LOC SIZE_MAX

/* Protobuf wire types. */
enum { PPROFREAD_VARINT = 0, PPROFREAD_I64 = 1, PPROFREAD_LEN = 2, PPROFREAD_I32 = 5 };

/* A string of the string table: bytes inside raw (not NUL-terminated, may hold NULs). */
struct pprofread_str {
	const unsigned char *s;
	size_t len;
};

struct pprofread_vtype {
	uint64_t type, unit; /* string indices */
};

struct pprofread_loc {
	uint64_t id, address;
	size_t map;  /* index in maps, SIZE_MAX: none */
	size_t func; /* the first (innermost) Line's function, SIZE_MAX: no Line or no function */
	int64_t line; /* that Line's line number */
};

struct pprofread_func {
	uint64_t id, name, filename; /* string indices */
};

struct pprofread_map {
	uint64_t id, start, limit, offset, filename;
};

struct pprofread {
	struct buf raw; /* the decoded protobuf: strings point into it */
	struct pprofread_str *strs;
	size_t nstrs;
	struct pprofread_vtype *types; /* sample_type, in order */
	size_t ntypes;
	struct pprofread_vtype period_type; /* 0, 0 ("", ""): none */
	/* locations, functions and mappings sorted by id (ids are unique and non-zero) */
	struct pprofread_loc *locs;
	size_t nlocs;
	struct pprofread_func *funcs;
	size_t nfuncs;
	struct pprofread_map *maps;
	size_t nmaps;
	/* per sample: frame 0's location (index in locs, PPROFREAD_NO_LOC) and ntypes values */
	size_t nsamples;
	size_t *sample_loc;
	int64_t *values;
};

/* A cursor over a message's fields. */
struct pprofread_cur {
	const unsigned char *p, *end;
};

struct pprofread_field {
	uint32_t num;
	unsigned wt;
	uint64_t v; /* VARINT, I64, I32: the value; LEN: the length */
	const unsigned char *data; /* LEN: the bytes */
};

/* Decode data (gzip, several members allowed, or a plain protobuf) into p. 0, or -1 with the
 * reason in err (p is then freed). */
int pprofread_load(struct pprofread *p, const void *data, size_t len, char *err, size_t errlen);
/* The same for a file (a FIFO too); err names what went wrong, not the file. */
int pprofread_file(struct pprofread *p, const char *path, char *err, size_t errlen);
void pprofread_free(struct pprofread *p);

/* The next field at c: 1, 0 at the end, -1 when malformed (err). */
int pprofread_next(struct pprofread_cur *c, struct pprofread_field *f, char *err, size_t errlen);
/* The next varint of a packed run: 1, 0 at the end, -1 when malformed. */
int pprofread_varint(struct pprofread_cur *c, uint64_t *v);

/* Whether string i equals s. */
bool pprofread_str_is(const struct pprofread *p, uint64_t i, const char *s);
/* The index of the sample type (type, unit), or -1. */
long pprofread_type(const struct pprofread *p, const char *type, const char *unit);
/* Indices of the location, function or mapping with this id, or -1. */
long pprofread_loc_index(const struct pprofread *p, uint64_t id);
long pprofread_func_index(const struct pprofread *p, uint64_t id);
long pprofread_map_index(const struct pprofread *p, uint64_t id);

#endif
