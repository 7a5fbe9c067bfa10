// SPDX-License-Identifier: MIT
/*
 * pprofread.c: reads a pprof profile (google/pprof proto/profile.proto), as `go tool pprof`
 * does, from a file or a buffer that nobody vouches for: gzip (several members, as Go's
 * reader) or a plain protobuf, at most PPROFREAD_MAX_BYTES either way.
 *
 * Three walks over the message, each field framed and bounds-checked by pprofread_next:
 * the first counts (so every string index can be checked as it is read), the second keeps
 * sample types, mappings, functions and locations (a location keeps its first Line only:
 * the innermost inlined frame, all a site needs), the third, once ids are sorted, resolves
 * every id a sample or a Line names and keeps each sample's frame-0 location and values.
 * What pprof rejects is rejected here, with the reason and the byte offset: a string index
 * out of range, string_table[0] not "", an id that is zero, repeated or unknown, a sample
 * whose value count differs from sample_type's, a known field with the wrong wire type.
 * Unknown fields are skipped. Values are int64 as written (two's complement varints).
 *
 * Left to others: what a site is and the diff (diff.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "pprofread.h"

/* ---- protobuf framing ------------------------------------------------------------------ */

/* At most 10 bytes; the tenth may only hold the 64th bit. */
static int varint_read(const unsigned char **pp, const unsigned char *end, uint64_t *v)
{
	uint64_t x = 0;
	const unsigned char *p = *pp;
	for (unsigned shift = 0; shift <= 63; shift += 7) {
		if (p >= end)
			return -1;
		unsigned char b = *p++;
		if (shift == 63 && b > 1)
			return -1;
		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*pp = p;
			*v = x;
			return 0;
		}
	}
	return -1;
}

int pprofread_varint(struct pprofread_cur *c, uint64_t *v)
{
	if (c->p >= c->end)
		return 0;
	return varint_read(&c->p, c->end, v) ? -1 : 1;
}

static uint64_t le_read(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

int pprofread_next(struct pprofread_cur *c, struct pprofread_field *f, char *err, size_t errlen)
{
	if (c->p >= c->end)
		return 0;
	uint64_t key;
	if (varint_read(&c->p, c->end, &key)) {
		snprintf(err, errlen, "bad or truncated field key");
		return -1;
	}
	if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
		snprintf(err, errlen, "field number %llu out of range", (unsigned long long)(key >> 3));
		return -1;
	}
	f->num = (uint32_t)(key >> 3);
	f->wt = (unsigned)(key & 7);
	f->data = NULL;
	size_t left;
	switch (f->wt) {
	case PPROFREAD_VARINT:
		if (varint_read(&c->p, c->end, &f->v)) {
			snprintf(err, errlen, "field %u: bad or truncated varint", f->num);
			return -1;
		}
		return 1;
	case PPROFREAD_I64:
	case PPROFREAD_I32: {
		unsigned n = f->wt == PPROFREAD_I64 ? 8 : 4;
		if ((size_t)(c->end - c->p) < n) {
			snprintf(err, errlen, "field %u: truncated fixed%u", f->num, 8 * n);
			return -1;
		}
		f->v = le_read(c->p, n);
		c->p += n;
		return 1;
	}
	case PPROFREAD_LEN:
		if (varint_read(&c->p, c->end, &f->v)) {
			snprintf(err, errlen, "field %u: bad or truncated length", f->num);
			return -1;
		}
		left = (size_t)(c->end - c->p);
		if (f->v > left) {
			snprintf(err, errlen, "field %u: length %llu past the end of its message (%zu "
				 "bytes left)", f->num, (unsigned long long)f->v, left);
			return -1;
		}
		f->data = c->p;
		c->p += f->v;
		return 1;
	default:
		snprintf(err, errlen, "field %u: wire type %u not supported", f->num, f->wt);
		return -1;
	}
}

/* ---- the reader's state ---------------------------------------------------------------- */

struct rd {
	struct pprofread *p;
	const unsigned char *base;
	char *err;
	size_t errlen;
	/* counted by the first walk: the arrays' sizes */
	size_t nstrs, ntypes, nlocs, nfuncs, nmaps, nsamples;
	/* per location (in the order read): the mapping and first Line's function ids */
	uint64_t *loc_map_id, *loc_func_id;
};

static int rd_fail(struct rd *r, const unsigned char *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int rd_fail(struct rd *r, const unsigned char *at, const char *fmt, ...)
{
	char msg[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(r->err, r->errlen, "malformed profile: %s (at byte %zu)", msg,
		 (size_t)(at - r->base));
	return -1;
}

/* The next field of c; at: where it starts (for messages). */
static int rd_next(struct rd *r, struct pprofread_cur *c, struct pprofread_field *f,
		   const unsigned char **at)
{
	*at = c->p;
	char msg[160];
	int rc = pprofread_next(c, f, msg, sizeof(msg));
	if (rc < 0)
		return rd_fail(r, *at, "%s", msg);
	return rc;
}

static int rd_wt(struct rd *r, const struct pprofread_field *f, const unsigned char *at,
		 unsigned wt, const char *what)
{
	if (f->wt == wt)
		return 0;
	return rd_fail(r, at, "%s (field %u) has wire type %u, not %u", what, f->num, f->wt, wt);
}

static int rd_str(struct rd *r, uint64_t i, const unsigned char *at, const char *what)
{
	if (i < r->nstrs)
		return 0;
	return rd_fail(r, at, "%s: string index %llu out of range (%zu strings)", what,
		       (unsigned long long)i, r->nstrs);
}

/* A repeated varint field, packed (LEN) or one value (VARINT). */
struct rd_rep {
	struct pprofread_cur c;
	uint64_t one;
	int ones_left; /* -1: packed */
};

static int rep_init(struct rd *r, struct rd_rep *it, const struct pprofread_field *f,
		    const unsigned char *at, const char *what)
{
	memset(it, 0, sizeof(*it));
	if (f->wt == PPROFREAD_VARINT) {
		it->one = f->v;
		it->ones_left = 1;
		return 0;
	}
	if (f->wt != PPROFREAD_LEN)
		return rd_fail(r, at, "%s (field %u) has wire type %u", what, f->num, f->wt);
	it->c = (struct pprofread_cur){ f->data, f->data + f->v };
	it->ones_left = -1;
	return 0;
}

/* 1: *v is the next value; 0: none left; -1: a packed run ends inside a varint. */
static int rep_next(struct rd *r, struct rd_rep *it, uint64_t *v, const char *what)
{
	if (it->ones_left >= 0) {
		if (!it->ones_left)
			return 0;
		it->ones_left = 0;
		*v = it->one;
		return 1;
	}
	int rc = pprofread_varint(&it->c, v);
	if (rc < 0)
		return rd_fail(r, it->c.p, "%s: truncated packed varint", what);
	return rc;
}

/* ---- messages -------------------------------------------------------------------------- */

/* ValueType: type=1, unit=2 (string indices). */
static int rd_vtype(struct rd *r, const struct pprofread_field *m, struct pprofread_vtype *vt)
{
	struct pprofread_cur c = { m->data, m->data + m->v };
	struct pprofread_field f;
	const unsigned char *at;
	int rc;
	memset(vt, 0, sizeof(*vt));
	while ((rc = rd_next(r, &c, &f, &at)) > 0) {
		if (f.num != 1 && f.num != 2)
			continue;
		if (rd_wt(r, &f, at, PPROFREAD_VARINT, "ValueType.type/unit") ||
		    rd_str(r, f.v, at, "ValueType"))
			return -1;
		if (f.num == 1)
			vt->type = f.v;
		else
			vt->unit = f.v;
	}
	return rc;
}

/* Mapping: id=1 start=2 limit=3 offset=4 filename=5 build_id=6, has_*=7..10. */
static int rd_mapping(struct rd *r, const struct pprofread_field *m, struct pprofread_map *out)
{
	struct pprofread_cur c = { m->data, m->data + m->v };
	struct pprofread_field f;
	const unsigned char *at;
	int rc;
	memset(out, 0, sizeof(*out));
	while ((rc = rd_next(r, &c, &f, &at)) > 0) {
		if (f.num < 1 || f.num > 10)
			continue;
		if (rd_wt(r, &f, at, PPROFREAD_VARINT, "Mapping field"))
			return -1;
		switch (f.num) {
		case 1: out->id = f.v; break;
		case 2: out->start = f.v; break;
		case 3: out->limit = f.v; break;
		case 4: out->offset = f.v; break;
		case 5:
			if (rd_str(r, f.v, at, "Mapping.filename"))
				return -1;
			out->filename = f.v;
			break;
		case 6:
			if (rd_str(r, f.v, at, "Mapping.build_id"))
				return -1;
			break;
		}
	}
	return rc;
}

/* Function: id=1 name=2 system_name=3 filename=4 start_line=5. */
static int rd_function(struct rd *r, const struct pprofread_field *m, struct pprofread_func *out)
{
	struct pprofread_cur c = { m->data, m->data + m->v };
	struct pprofread_field f;
	const unsigned char *at;
	int rc;
	memset(out, 0, sizeof(*out));
	while ((rc = rd_next(r, &c, &f, &at)) > 0) {
		if (f.num < 1 || f.num > 5)
			continue;
		if (rd_wt(r, &f, at, PPROFREAD_VARINT, "Function field"))
			return -1;
		if (f.num >= 2 && f.num <= 4 && rd_str(r, f.v, at, "Function name or file"))
			return -1;
		if (f.num == 1)
			out->id = f.v;
		else if (f.num == 2)
			out->name = f.v;
		else if (f.num == 4)
			out->filename = f.v;
	}
	return rc;
}

/* Line: function_id=1 line=2 column=3. */
static int rd_line(struct rd *r, const struct pprofread_field *m, uint64_t *func_id,
		   int64_t *line)
{
	struct pprofread_cur c = { m->data, m->data + m->v };
	struct pprofread_field f;
	const unsigned char *at;
	int rc;
	*func_id = 0;
	*line = 0;
	while ((rc = rd_next(r, &c, &f, &at)) > 0) {
		if (f.num < 1 || f.num > 3)
			continue;
		if (rd_wt(r, &f, at, PPROFREAD_VARINT, "Line field"))
			return -1;
		if (f.num == 1)
			*func_id = f.v;
		else if (f.num == 2)
			*line = (int64_t)f.v;
	}
	return rc;
}

/* Location: id=1 mapping_id=2 address=3 line=4 (repeated) is_folded=5. With funcs_sorted,
 * every Line's function id must resolve (the third walk); before, the first Line's is kept
 * in *first_func. */
static int rd_location(struct rd *r, const struct pprofread_field *m, struct pprofread_loc *out,
		       uint64_t *map_id, uint64_t *first_func, bool funcs_sorted)
{
	struct pprofread_cur c = { m->data, m->data + m->v };
	struct pprofread_field f;
	const unsigned char *at;
	int rc;
	bool first = true;
	memset(out, 0, sizeof(*out));
	*map_id = *first_func = 0;
	while ((rc = rd_next(r, &c, &f, &at)) > 0) {
		if (f.num < 1 || f.num > 5)
			continue;
		if (rd_wt(r, &f, at, f.num == 4 ? PPROFREAD_LEN : PPROFREAD_VARINT,
			  "Location field"))
			return -1;
		if (f.num == 1) {
			out->id = f.v;
		} else if (f.num == 2) {
			*map_id = f.v;
		} else if (f.num == 3) {
			out->address = f.v;
		} else if (f.num == 4) {
			uint64_t fid;
			int64_t line;
			if (rd_line(r, &f, &fid, &line))
				return -1;
			if (funcs_sorted && fid && pprofread_func_index(r->p, fid) < 0)
				return rd_fail(r, at, "Line names function id %llu, which is not in "
					       "the profile", (unsigned long long)fid);
			if (first) {
				*first_func = fid;
				out->line = line;
			}
			first = false;
		}
	}
	return rc;
}

/* Sample: location_id=1 value=2 (repeated, packed or not) label=3. The third walk. */
static int rd_sample(struct rd *r, const struct pprofread_field *m, size_t idx)
{
	struct pprofread *p = r->p;
	struct pprofread_cur c = { m->data, m->data + m->v };
	struct pprofread_field f;
	const unsigned char *at;
	int rc;
	size_t nvalues = 0;
	int64_t *values = p->values + idx * p->ntypes;
	p->sample_loc[idx] = PPROFREAD_NO_LOC;
	bool first = true;
	while ((rc = rd_next(r, &c, &f, &at)) > 0) {
		if (f.num == 1 || f.num == 2) {
			struct rd_rep it;
			uint64_t v = 0;
			int k;
			const char *what = f.num == 1 ? "Sample.location_id" : "Sample.value";
			if (rep_init(r, &it, &f, at, what))
				return -1;
			while ((k = rep_next(r, &it, &v, what)) > 0) {
				if (f.num == 2) {
					if (nvalues == p->ntypes)
						return rd_fail(r, at, "a sample has more values than "
							       "the %zu sample types", p->ntypes);
					values[nvalues++] = (int64_t)v;
					continue;
				}
				long li = pprofread_loc_index(p, v);
				if (li < 0)
					return rd_fail(r, at, "a sample names location id %llu, which "
						       "is not in the profile", (unsigned long long)v);
				if (first)
					p->sample_loc[idx] = (size_t)li;
				first = false;
			}
			if (k < 0)
				return -1;
		} else if (f.num == 3) {
			if (rd_wt(r, &f, at, PPROFREAD_LEN, "Sample.label"))
				return -1;
			/* Label: key=1 str=2 num=3 num_unit=4 */
			struct pprofread_cur lc = { f.data, f.data + f.v };
			struct pprofread_field lf;
			const unsigned char *lat;
			int lrc;
			while ((lrc = rd_next(r, &lc, &lf, &lat)) > 0) {
				if (lf.num < 1 || lf.num > 4)
					continue;
				if (rd_wt(r, &lf, lat, PPROFREAD_VARINT, "Label field") ||
				    (lf.num != 3 && rd_str(r, lf.v, lat, "Label")))
					return -1;
			}
			if (lrc < 0)
				return -1;
		}
	}
	if (rc < 0)
		return -1;
	if (nvalues != p->ntypes)
		return rd_fail(r, m->data, "a sample has %zu values for %zu sample types", nvalues,
			       p->ntypes);
	return 0;
}

/* ---- the three walks ------------------------------------------------------------------- */

enum { WALK_COUNT, WALK_KEEP, WALK_RESOLVE };

static int rd_walk(struct rd *r, int walk)
{
	struct pprofread *p = r->p;
	struct pprofread_cur c = { p->raw.data, p->raw.data + p->raw.len };
	struct pprofread_field f;
	const unsigned char *at;
	size_t nstr = 0, ntype = 0, nloc = 0, nfunc = 0, nmap = 0, nsample = 0;
	int rc;
	while ((rc = rd_next(r, &c, &f, &at)) > 0) {
		switch (f.num) {
		case 1: /* sample_type */
		case 2: /* sample */
		case 3: /* mapping */
		case 4: /* location */
		case 5: /* function */
		case 11: /* period_type */
			if (rd_wt(r, &f, at, PPROFREAD_LEN, "a message field of Profile"))
				return -1;
			break;
		case 6: /* string_table */
			if (rd_wt(r, &f, at, PPROFREAD_LEN, "string_table"))
				return -1;
			break;
		case 13: /* comment: repeated string index */
			break;
		case 7: case 8: case 9: case 10: case 12: case 14: case 15:
			if (rd_wt(r, &f, at, PPROFREAD_VARINT, "a number field of Profile"))
				return -1;
			break;
		default:
			continue;
		}
		if (walk == WALK_COUNT) {
			nstr += f.num == 6;
			ntype += f.num == 1;
			nsample += f.num == 2;
			nmap += f.num == 3;
			nloc += f.num == 4;
			nfunc += f.num == 5;
			continue;
		}
		if (walk == WALK_RESOLVE) {
			if (f.num == 2 && rd_sample(r, &f, nsample++))
				return -1;
			if (f.num == 4) {
				struct pprofread_loc l;
				uint64_t mid, fid;
				if (rd_location(r, &f, &l, &mid, &fid, true))
					return -1;
			}
			continue;
		}
		switch (f.num) {
		case 1:
			if (rd_vtype(r, &f, &p->types[ntype++]))
				return -1;
			break;
		case 11:
			if (rd_vtype(r, &f, &p->period_type))
				return -1;
			break;
		case 3:
			if (rd_mapping(r, &f, &p->maps[nmap++]))
				return -1;
			break;
		case 5:
			if (rd_function(r, &f, &p->funcs[nfunc++]))
				return -1;
			break;
		case 4:
			if (rd_location(r, &f, &p->locs[nloc], &r->loc_map_id[nloc],
					&r->loc_func_id[nloc], false))
				return -1;
			nloc++;
			break;
		case 6:
			p->strs[nstr++] = (struct pprofread_str){ f.data, f.v };
			break;
		case 7: case 8: case 14: case 15:
			if (rd_str(r, f.v, at, "a string field of Profile"))
				return -1;
			break;
		case 13: {
			struct rd_rep it;
			uint64_t v = 0;
			int k;
			if (rep_init(r, &it, &f, at, "Profile.comment"))
				return -1;
			while ((k = rep_next(r, &it, &v, "Profile.comment")) > 0)
				if (rd_str(r, v, at, "Profile.comment"))
					return -1;
			if (k < 0)
				return -1;
			break;
		}
		}
	}
	if (rc < 0)
		return -1;
	if (walk == WALK_COUNT) {
		r->nstrs = nstr;
		r->ntypes = ntype;
		r->nlocs = nloc;
		r->nfuncs = nfunc;
		r->nmaps = nmap;
		r->nsamples = nsample;
	}
	return 0;
}

/* ---- ids ------------------------------------------------------------------------------- */

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int loc_cmp(const void *x, const void *y)
{
	return cmp_u64(((const struct pprofread_loc *)x)->id, ((const struct pprofread_loc *)y)->id);
}

static int func_cmp(const void *x, const void *y)
{
	return cmp_u64(((const struct pprofread_func *)x)->id,
		       ((const struct pprofread_func *)y)->id);
}

static int map_cmp(const void *x, const void *y)
{
	return cmp_u64(((const struct pprofread_map *)x)->id, ((const struct pprofread_map *)y)->id);
}

/* The records are sorted and searched by their leading id. */
_Static_assert(offsetof(struct pprofread_loc, id) == 0, "id leads");
_Static_assert(offsetof(struct pprofread_func, id) == 0, "id leads");
_Static_assert(offsetof(struct pprofread_map, id) == 0, "id leads");

/* Binary search of id in n records of size sz sorted by a leading uint64 id. */
static long id_find(const void *arr, size_t n, size_t sz, uint64_t id)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t v;
		memcpy(&v, (const unsigned char *)arr + mid * sz, sizeof(v));
		if (v == id)
			return (long)mid;
		if (v < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

long pprofread_loc_index(const struct pprofread *p, uint64_t id)
{
	return id_find(p->locs, p->nlocs, sizeof(*p->locs), id);
}

long pprofread_func_index(const struct pprofread *p, uint64_t id)
{
	return id_find(p->funcs, p->nfuncs, sizeof(*p->funcs), id);
}

long pprofread_map_index(const struct pprofread *p, uint64_t id)
{
	return id_find(p->maps, p->nmaps, sizeof(*p->maps), id);
}

/* Sorted ids must be non-zero and distinct. */
static int ids_check(struct rd *r, const void *arr, size_t n, size_t sz, const char *what)
{
	uint64_t prev = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t v;
		memcpy(&v, (const unsigned char *)arr + i * sz, sizeof(v));
		if (v == 0 || (i && v == prev)) {
			snprintf(r->err, r->errlen, "malformed profile: %s id %llu %s", what,
				 (unsigned long long)v, v ? "appears twice" : "(ids start at 1)");
			return -1;
		}
		prev = v;
	}
	return 0;
}

/* Sort locations by id, carrying the ids read with each, then resolve them. */
static int rd_resolve_locs(struct rd *r)
{
	struct pprofread *p = r->p;
	/* the kept ids ride in the records while sorting: map, func hold their order index */
	for (size_t i = 0; i < p->nlocs; i++)
		p->locs[i].map = i;
	qsort(p->locs, p->nlocs, sizeof(*p->locs), loc_cmp);
	if (ids_check(r, p->locs, p->nlocs, sizeof(*p->locs), "location"))
		return -1;
	for (size_t i = 0; i < p->nlocs; i++) {
		struct pprofread_loc *l = &p->locs[i];
		size_t read_at = l->map;
		uint64_t mid = r->loc_map_id[read_at], fid = r->loc_func_id[read_at];
		long mi = mid ? pprofread_map_index(p, mid) : -1;
		long fi = fid ? pprofread_func_index(p, fid) : -1;
		if (mid && mi < 0) {
			snprintf(r->err, r->errlen, "malformed profile: location %llu names mapping "
				 "id %llu, which is not in the profile", (unsigned long long)l->id,
				 (unsigned long long)mid);
			return -1;
		}
		if (fid && fi < 0) {
			snprintf(r->err, r->errlen, "malformed profile: location %llu names function "
				 "id %llu, which is not in the profile", (unsigned long long)l->id,
				 (unsigned long long)fid);
			return -1;
		}
		l->map = mi < 0 ? SIZE_MAX : (size_t)mi;
		l->func = fi < 0 ? SIZE_MAX : (size_t)fi;
	}
	return 0;
}

/* ---- loading ----------------------------------------------------------------------------- */

/* Gzip members one after another (Go's reader is multistream), at most PPROFREAD_MAX_BYTES
 * out. */
static int gunzip(const unsigned char *in, size_t n, struct buf *out, char *err, size_t errlen)
{
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, 15 + 16) != Z_OK) { /* 15 + 16: the gzip wrapper only */
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	int ret = -1;
	zs.next_in = (Bytef *)(uintptr_t)in;
	zs.avail_in = (uInt)n; /* n <= PPROFREAD_MAX_BYTES < UINT_MAX */
	for (;;) {
		/* At the cap, one byte more of output (into spill) is the error: the buffer
		 * never grows past PPROFREAD_MAX_BYTES (a power of two, as its capacities). */
		unsigned char spill;
		size_t left = PPROFREAD_MAX_BYTES - out->len;
		if (left && buf_reserve(out, left < 65536 ? left : 65536) != 0) {
			snprintf(err, errlen, "out of memory");
			break;
		}
		size_t room = left ? out->cap - out->len : 1;
		if (room > left && left)
			room = left;
		zs.next_out = left ? out->data + out->len : &spill;
		zs.avail_out = (uInt)room;
		int rc = inflate(&zs, Z_NO_FLUSH);
		size_t got = room - zs.avail_out;
		if (!left && got) {
			snprintf(err, errlen, "more than %u MiB once decompressed",
				 PPROFREAD_MAX_BYTES >> 20);
			break;
		}
		if (left)
			out->len += got;
		if (rc == Z_STREAM_END) {
			if (zs.avail_in == 0) {
				ret = 0;
				break;
			}
			if (zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
				inflateReset(&zs);
				continue;
			}
			snprintf(err, errlen, "%u bytes of data after the gzip stream", zs.avail_in);
			break;
		}
		if (rc == Z_OK)
			continue;
		if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
			snprintf(err, errlen, "gzip data ends early (a truncated file?)");
			break;
		}
		if (rc == Z_MEM_ERROR)
			snprintf(err, errlen, "out of memory");
		else
			snprintf(err, errlen, "bad gzip data (%s)", zs.msg ? zs.msg : "zlib error");
		break;
	}
	inflateEnd(&zs);
	return ret;
}

void pprofread_free(struct pprofread *p)
{
	buf_free(&p->raw);
	free(p->strs);
	free(p->types);
	free(p->locs);
	free(p->funcs);
	free(p->maps);
	free(p->sample_loc);
	free(p->values);
	memset(p, 0, sizeof(*p));
}

static int rd_alloc(struct rd *r)
{
	struct pprofread *p = r->p;
	size_t nvalues;
	if (__builtin_mul_overflow(r->nsamples, r->ntypes, &nvalues))
		return -1;
	/* +1: calloc(0) may return NULL */
	p->strs = calloc(r->nstrs + 1, sizeof(*p->strs));
	p->types = calloc(r->ntypes + 1, sizeof(*p->types));
	p->locs = calloc(r->nlocs + 1, sizeof(*p->locs));
	p->funcs = calloc(r->nfuncs + 1, sizeof(*p->funcs));
	p->maps = calloc(r->nmaps + 1, sizeof(*p->maps));
	p->sample_loc = calloc(r->nsamples + 1, sizeof(*p->sample_loc));
	p->values = calloc(nvalues + 1, sizeof(*p->values));
	r->loc_map_id = calloc(r->nlocs + 1, sizeof(*r->loc_map_id));
	r->loc_func_id = calloc(r->nlocs + 1, sizeof(*r->loc_func_id));
	if (!p->strs || !p->types || !p->locs || !p->funcs || !p->maps || !p->sample_loc ||
	    !p->values || !r->loc_map_id || !r->loc_func_id)
		return -1;
	p->nstrs = r->nstrs;
	p->ntypes = r->ntypes;
	p->nlocs = r->nlocs;
	p->nfuncs = r->nfuncs;
	p->nmaps = r->nmaps;
	p->nsamples = r->nsamples;
	return 0;
}

static int rd_decode(struct rd *r)
{
	struct pprofread *p = r->p;
	if (p->raw.len == 0) {
		snprintf(r->err, r->errlen, "empty profile");
		return -1;
	}
	if (rd_walk(r, WALK_COUNT))
		return -1;
	if (rd_alloc(r)) {
		snprintf(r->err, r->errlen, "out of memory");
		return -1;
	}
	if (rd_walk(r, WALK_KEEP))
		return -1;
	if (p->nstrs == 0 || p->strs[0].len != 0) {
		snprintf(r->err, r->errlen, "malformed profile: string_table[0] must be \"\"");
		return -1;
	}
	qsort(p->funcs, p->nfuncs, sizeof(*p->funcs), func_cmp);
	qsort(p->maps, p->nmaps, sizeof(*p->maps), map_cmp);
	if (ids_check(r, p->funcs, p->nfuncs, sizeof(*p->funcs), "function") ||
	    ids_check(r, p->maps, p->nmaps, sizeof(*p->maps), "mapping") || rd_resolve_locs(r))
		return -1;
	return rd_walk(r, WALK_RESOLVE);
}

int pprofread_load(struct pprofread *p, const void *data, size_t len, char *err, size_t errlen)
{
	const unsigned char *d = data;
	memset(p, 0, sizeof(*p));
	buf_init(&p->raw);
	int rc;
	if (len > PPROFREAD_MAX_BYTES) {
		snprintf(err, errlen, "larger than %u MiB", PPROFREAD_MAX_BYTES >> 20);
		rc = -1;
	} else if (len >= 2 && d[0] == 0x1f && d[1] == 0x8b) {
		rc = gunzip(d, len, &p->raw, err, errlen);
	} else if (len >= 13 && memcmp(d, "heap profile:", 13) == 0) {
		snprintf(err, errlen, "a legacy text profile: only pprof protobuf files are read "
			 "(llgo-heap snapshot -f pprof)");
		rc = -1;
	} else {
		rc = len ? buf_append(&p->raw, d, len) : 0;
		if (rc)
			snprintf(err, errlen, "out of memory");
	}
	if (rc == 0) {
		struct rd r = { .p = p, .base = p->raw.data, .err = err, .errlen = errlen };
		rc = rd_decode(&r);
		free(r.loc_map_id);
		free(r.loc_func_id);
	}
	if (rc)
		pprofread_free(p);
	return rc ? -1 : 0;
}

int pprofread_file(struct pprofread *p, const char *path, char *err, size_t errlen)
{
	memset(p, 0, sizeof(*p));
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open: %s", strerror(errno));
		return -1;
	}
	struct buf in;
	buf_init(&in);
	int rc = 0;
	for (;;) {
		/* as gunzip: at the cap, one byte more is the error */
		unsigned char spill;
		size_t left = PPROFREAD_MAX_BYTES - in.len;
		if (left && buf_reserve(&in, left < 65536 ? left : 65536) != 0) {
			snprintf(err, errlen, "out of memory");
			rc = -1;
			break;
		}
		size_t room = in.cap - in.len < left ? in.cap - in.len : left;
		ssize_t n = left ? read(fd, in.data + in.len, room) : read(fd, &spill, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "cannot read: %s", strerror(errno));
			rc = -1;
			break;
		}
		if (n == 0)
			break;
		if (!left) {
			snprintf(err, errlen, "larger than %u MiB", PPROFREAD_MAX_BYTES >> 20);
			rc = -1;
			break;
		}
		in.len += (size_t)n;
	}
	close(fd);
	if (rc == 0)
		rc = pprofread_load(p, in.data, in.len, err, errlen);
	buf_free(&in);
	return rc;
}

/* ---- queries --------------------------------------------------------------------------- */

bool pprofread_str_is(const struct pprofread *p, uint64_t i, const char *s)
{
	size_t n = strlen(s);
	return i < p->nstrs && p->strs[i].len == n && memcmp(p->strs[i].s, s, n) == 0;
}

long pprofread_type(const struct pprofread *p, const char *type, const char *unit)
{
	for (size_t i = 0; i < p->ntypes; i++)
		if (pprofread_str_is(p, p->types[i].type, type) &&
		    pprofread_str_is(p, p->types[i].unit, unit))
			return (long)i;
	return -1;
}
