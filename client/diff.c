// SPDX-License-Identifier: MIT
/*
 * diff.c: growth per allocation site between two pprof profiles, as `go tool pprof -base
 * BASE NEW` computes it: NEW's values minus BASE's, for sample types matched by type and
 * unit.
 *
 * A site is what `top` (agent/output/top.c) calls one: frame 0 of a sample, and in it the innermost
 * inlined frame, named "function file:line" with the file's base name (the function alone
 * when the file is unknown; "module+0xOFFSET" or "0xADDRESS" when the location has no
 * function). Sites of the two profiles are matched by that name, so profiles of two runs of
 * a program (other addresses) compare. Names are escaped for the terminal (escape.c) before
 * they are compared: the escaping is one to one.
 *
 * diff_table: per site the change of the ranked value (alloc or in-use, space or objects),
 * its share of BASE's total, both values and the change of the companion value (objects for
 * space, space for objects); rows sorted by absolute change, largest first, as pprof sorts;
 * sites that did not change are left out. Sums saturate (sane.h): the values are the files'.
 *
 * diff_profile: NEW's protobuf as it is, followed by BASE's samples, locations, functions,
 * mappings and strings re-encoded with every value negated and every id and string index
 * moved past NEW's (a protobuf message concatenated with another is their merge: repeated
 * fields append). pprof merges equal locations again when it reads it.
 *
 * Left to others: reading and checking the files (pprofread.c), the command line (cli.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/escape.h"
#include "../common/gzip.h"
#include "../common/sane.h"
#include "cli.h"
#include "diff.h"

/* ---- sites ----------------------------------------------------------------------------- */

/* Bytes of a profile's string, escaped; a NUL inside it as \x00. */
static void diff_name_append(struct buf *b, const unsigned char *s, size_t n)
{
	while (n) {
		const unsigned char *z = memchr(s, 0, n);
		size_t seg = z ? (size_t)(z - s) : n;
		char *part = strndup((const char *)s, seg);
		if (!part) {
			b->failed = true;
			return;
		}
		escape_append(b, part);
		free(part);
		if (z) {
			buf_puts(b, "\\x00");
			seg++;
		}
		s += seg;
		n -= seg;
	}
}

/* The part of string i after its last '/'. */
static void diff_base_name_append(struct buf *b, const struct pprofread *p, uint64_t i)
{
	const unsigned char *s = p->strs[i].s;
	size_t n = p->strs[i].len;
	for (size_t k = n; k > 0; k--) {
		if (s[k - 1] == '/') {
			s += k;
			n -= k;
			break;
		}
	}
	diff_name_append(b, s, n);
}

/* The site of location li (PPROFREAD_NO_LOC: a sample without one), malloc'ed. */
static char *diff_site_name(const struct pprofread *p, size_t li)
{
	struct buf b;
	buf_init(&b);
	if (li == PPROFREAD_NO_LOC) {
		buf_puts(&b, "[no stack]");
	} else {
		const struct pprofread_loc *l = &p->locs[li];
		const struct pprofread_map *m = l->map == SIZE_MAX ? NULL : &p->maps[l->map];
		if (l->func != SIZE_MAX) {
			const struct pprofread_func *f = &p->funcs[l->func];
			diff_name_append(&b, p->strs[f->name].s, p->strs[f->name].len);
			if (p->strs[f->filename].len) {
				buf_putc(&b, ' ');
				diff_base_name_append(&b, p, f->filename);
				buf_printf(&b, ":%lld", (long long)l->line);
			}
		} else if (m && p->strs[m->filename].len) {
			diff_base_name_append(&b, p, m->filename);
			buf_printf(&b, "+0x%llx",
				   (unsigned long long)(l->address - m->start + m->offset));
		} else {
			buf_printf(&b, "0x%llx", (unsigned long long)l->address);
		}
	}
	if (buf_putc(&b, '\0') != 0 || b.failed) {
		buf_free(&b);
		return NULL;
	}
	return (char *)b.data;
}

struct diff_site {
	const char *name;
	int64_t v[2]; /* the ranked value, its companion */
};

struct diff_side {
	char **names; /* per location, and one more for PPROFREAD_NO_LOC */
	size_t nnames;
	struct diff_site *sites; /* by name, one per site */
	size_t n;
	int64_t total[2];
};

static void diff_side_free(struct diff_side *s)
{
	for (size_t i = 0; s->names && i < s->nnames; i++)
		free(s->names[i]);
	free(s->names);
	free(s->sites);
	memset(s, 0, sizeof(*s));
}

static int diff_site_cmp(const void *x, const void *y)
{
	return strcmp(((const struct diff_site *)x)->name, ((const struct diff_site *)y)->name);
}

/* Values ti[0], ti[1] of every sample of p summed by site. */
static int diff_side_make(struct diff_side *s, const struct pprofread *p, const long ti[2])
{
	memset(s, 0, sizeof(*s));
	s->nnames = p->nlocs + 1;
	s->names = calloc(s->nnames, sizeof(*s->names));
	s->sites = calloc(p->nsamples + 1, sizeof(*s->sites));
	if (!s->names || !s->sites)
		return -1;
	for (size_t i = 0; i < p->nsamples; i++) {
		size_t li = p->sample_loc[i];
		size_t slot = li == PPROFREAD_NO_LOC ? p->nlocs : li;
		if (!s->names[slot] && !(s->names[slot] = diff_site_name(p, li)))
			return -1;
		struct diff_site *d = &s->sites[i];
		d->name = s->names[slot];
		for (int k = 0; k < 2; k++) {
			d->v[k] = p->values[i * p->ntypes + (size_t)ti[k]];
			s->total[k] = sane_add(s->total[k], d->v[k]);
		}
	}
	if (p->nsamples > 1)
		qsort(s->sites, p->nsamples, sizeof(*s->sites), diff_site_cmp);
	size_t w = 0;
	for (size_t i = 0; i < p->nsamples; i++) {
		if (w && strcmp(s->sites[w - 1].name, s->sites[i].name) == 0) {
			for (int k = 0; k < 2; k++)
				s->sites[w - 1].v[k] = sane_add(s->sites[w - 1].v[k], s->sites[i].v[k]);
			continue;
		}
		s->sites[w++] = s->sites[i];
	}
	s->n = w;
	return 0;
}

/* ---- the table --------------------------------------------------------------------------- */

struct diff_row {
	const char *name;
	int64_t base[2], cur[2], change[2];
};

static int64_t diff_sub(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_sub_overflow(a, b, &r))
		return b < 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static uint64_t diff_abs(int64_t v)
{
	return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

static int diff_row_cmp(const void *x, const void *y)
{
	const struct diff_row *a = x, *b = y;
	for (int k = 0; k < 2; k++) {
		uint64_t ka = diff_abs(a->change[k]), kb = diff_abs(b->change[k]);
		if (ka != kb)
			return ka > kb ? -1 : 1;
	}
	return strcmp(a->name, b->name);
}

/* A value of the table: bytes (human or exact) or objects; signed: a change ("+12"). */
static void diff_value(char *out, size_t n, int64_t v, bool bytes, bool exact, bool signed_)
{
	if (bytes && !exact)
		human_bytes(out, n, (double)v, signed_ ? "+" : "");
	else
		snprintf(out, n, signed_ ? "%+lld" : "%lld", (long long)v);
}

/* change as a percentage of base ("-" when base is 0). */
static void diff_pct(char *out, size_t n, int64_t change, int64_t base)
{
	if (base == 0)
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%+.2f%%", 100.0 * (double)change / (double)base);
}

int diff_table(struct buf *out, const struct pprofread *base, const struct pprofread *cur,
	       const struct diff_opts *o, char *err, size_t errlen)
{
	const char *fam = o->inuse ? "inuse" : "alloc";
	char tname[2][32];
	const char *unit[2] = { o->objects ? "count" : "bytes", o->objects ? "bytes" : "count" };
	snprintf(tname[0], sizeof(tname[0]), "%s_%s", fam, o->objects ? "objects" : "space");
	snprintf(tname[1], sizeof(tname[1]), "%s_%s", fam, o->objects ? "space" : "objects");
	long ti[2][2]; /* [profile][value] */
	const struct pprofread *prof[2] = { base, cur };
	const char *pname[2] = { o->base_name, o->new_name };
	for (int p = 0; p < 2; p++) {
		for (int k = 0; k < 2; k++) {
			ti[p][k] = pprofread_type(prof[p], tname[k], unit[k]);
			if (ti[p][k] < 0) {
				snprintf(err, errlen, "%s has no %s/%s values (not a heap profile?)",
					 pname[p], tname[k], unit[k]);
				return -1;
			}
		}
	}
	struct diff_side side[2];
	memset(side, 0, sizeof(side));
	struct diff_row *rows = NULL;
	struct buf b;
	buf_init(&b);
	int rc = -1;
	if (diff_side_make(&side[0], base, ti[0]) || diff_side_make(&side[1], cur, ti[1]))
		goto oom;
	rows = calloc(side[0].n + side[1].n + 1, sizeof(*rows));
	if (!rows)
		goto oom;
	/* both sides are sorted by name: merge them */
	size_t nrows = 0;
	for (size_t i = 0, j = 0; i < side[0].n || j < side[1].n;) {
		int c = i == side[0].n ? 1 : j == side[1].n ? -1
			: strcmp(side[0].sites[i].name, side[1].sites[j].name);
		struct diff_row *r = &rows[nrows];
		memset(r, 0, sizeof(*r));
		if (c <= 0) {
			r->name = side[0].sites[i].name;
			memcpy(r->base, side[0].sites[i++].v, sizeof(r->base));
		}
		if (c >= 0) {
			r->name = side[1].sites[j].name;
			memcpy(r->cur, side[1].sites[j++].v, sizeof(r->cur));
		}
		for (int k = 0; k < 2; k++)
			r->change[k] = diff_sub(r->cur[k], r->base[k]);
		nrows += r->change[0] || r->change[1];
	}
	if (nrows > 1)
		qsort(rows, nrows, sizeof(*rows), diff_row_cmp);
	size_t shown = o->top_n ? o->top_n : 10;
	if (shown > nrows)
		shown = nrows;

	bool bytes[2] = { !o->objects, o->objects };
	buf_printf(&b, "llgo-heap: growth by %s from %s (base) to %s: %zu of %zu changed sites, "
		       "largest change first\n", tname[0], o->base_name, o->new_name, shown, nrows);
	for (int k = 0; k < 2; k++) {
		char bs[32], ns[32], cs[32], ps[32];
		int64_t change = diff_sub(side[1].total[k], side[0].total[k]);
		diff_value(bs, sizeof(bs), side[0].total[k], bytes[k], o->exact, false);
		diff_value(ns, sizeof(ns), side[1].total[k], bytes[k], o->exact, false);
		diff_value(cs, sizeof(cs), change, bytes[k], o->exact, true);
		diff_pct(ps, sizeof(ps), change, side[0].total[k]);
		buf_printf(&b, "total %s: base %s, new %s, change %s (%s)\n", tname[k], bs, ns, cs, ps);
	}
	buf_printf(&b, "%12s %10s %12s %12s %14s  %s\n", "change", "% of base", "base", "new",
		   o->objects ? "space change" : "objects change", "site");
	for (size_t i = 0; i < shown; i++) {
		const struct diff_row *r = &rows[i];
		char cs[32], ps[32], bs[32], ns[32], os[32];
		diff_value(cs, sizeof(cs), r->change[0], bytes[0], o->exact, true);
		diff_pct(ps, sizeof(ps), r->change[0], side[0].total[0]);
		diff_value(bs, sizeof(bs), r->base[0], bytes[0], o->exact, false);
		diff_value(ns, sizeof(ns), r->cur[0], bytes[0], o->exact, false);
		diff_value(os, sizeof(os), r->change[1], bytes[1], o->exact, true);
		buf_printf(&b, "%12s %10s %12s %12s %14s  %s\n", cs, ps, bs, ns, os, r->name);
	}
	if (!b.failed && buf_append(out, b.data, b.len) == 0)
		rc = 0;
oom:
	if (rc)
		snprintf(err, errlen, "out of memory");
	buf_free(&b);
	free(rows);
	diff_side_free(&side[0]);
	diff_side_free(&side[1]);
	return rc;
}

/* ---- the diff profile ------------------------------------------------------------------- */

static void diff_varint(struct buf *b, uint64_t v)
{
	unsigned char tmp[10];
	size_t n = 0;
	for (; v >= 0x80; v >>= 7)
		tmp[n++] = (unsigned char)(v | 0x80);
	tmp[n++] = (unsigned char)v;
	buf_append(b, tmp, n);
}

static void diff_put(struct buf *b, uint32_t num, uint64_t v)
{
	diff_varint(b, (uint64_t)num << 3 | PPROFREAD_VARINT);
	diff_varint(b, v);
}

static void diff_put_bytes(struct buf *b, uint32_t num, const void *p, size_t n)
{
	diff_varint(b, (uint64_t)num << 3 | PPROFREAD_LEN);
	diff_varint(b, n);
	buf_append(b, p, n);
}

/* m as field num of b, then m is emptied for the next message. */
static void diff_put_msg(struct buf *b, uint32_t num, struct buf *m)
{
	diff_put_bytes(b, num, m->data, m->len);
	b->failed |= m->failed;
	buf_reset(m);
}

/* How base's ids and string indices move past cur's. */
struct diff_tx {
	const struct pprofread *a;
	uint64_t str, loc, func, map; /* cur's string count, its largest ids */
	struct buf m, sub2; /* a message, a message inside it */
	int bad; /* a field did not frame (never, for a profile pprofread accepted) */
};

static uint64_t diff_new_id(struct diff_tx *t, long index, uint64_t shift)
{
	if (index < 0) {
		t->bad = 1;
		return 0;
	}
	return shift + 1 + (uint64_t)index;
}

/* Each field of message in: fn(t, field, out). */
static void diff_tx_fields(struct diff_tx *t, const struct pprofread_field *in, struct buf *out,
			   void (*fn)(struct diff_tx *, const struct pprofread_field *, struct buf *))
{
	struct pprofread_cur c = { in->data, in->data + in->v };
	struct pprofread_field f;
	char err[160];
	int rc;
	while ((rc = pprofread_next(&c, &f, err, sizeof(err))) > 0)
		fn(t, &f, out);
	if (rc < 0)
		t->bad = 1;
}

static void diff_tx_line(struct diff_tx *t, const struct pprofread_field *f, struct buf *out)
{
	if (f->wt != PPROFREAD_VARINT)
		return;
	if (f->num == 1)
		diff_put(out, 1, f->v ? diff_new_id(t, pprofread_func_index(t->a, f->v), t->func) : 0);
	else if (f->num <= 3)
		diff_put(out, f->num, f->v);
}

static void diff_tx_location(struct diff_tx *t, const struct pprofread_field *f, struct buf *out)
{
	if (f->num == 4 && f->wt == PPROFREAD_LEN) {
		diff_tx_fields(t, f, &t->sub2, diff_tx_line);
		diff_put_msg(out, 4, &t->sub2);
	} else if (f->wt != PPROFREAD_VARINT) {
		return;
	} else if (f->num == 1) {
		diff_put(out, 1, diff_new_id(t, pprofread_loc_index(t->a, f->v), t->loc));
	} else if (f->num == 2) {
		diff_put(out, 2, f->v ? diff_new_id(t, pprofread_map_index(t->a, f->v), t->map) : 0);
	} else if (f->num == 3 || f->num == 5) {
		diff_put(out, f->num, f->v);
	}
}

static void diff_tx_function(struct diff_tx *t, const struct pprofread_field *f, struct buf *out)
{
	if (f->wt != PPROFREAD_VARINT)
		return;
	if (f->num == 1)
		diff_put(out, 1, diff_new_id(t, pprofread_func_index(t->a, f->v), t->func));
	else if (f->num >= 2 && f->num <= 4)
		diff_put(out, f->num, f->v + t->str);
	else if (f->num == 5)
		diff_put(out, 5, f->v);
}

static void diff_tx_mapping(struct diff_tx *t, const struct pprofread_field *f, struct buf *out)
{
	if (f->wt != PPROFREAD_VARINT || f->num > 10)
		return;
	if (f->num == 1)
		diff_put(out, 1, diff_new_id(t, pprofread_map_index(t->a, f->v), t->map));
	else if (f->num == 5 || f->num == 6)
		diff_put(out, f->num, f->v + t->str);
	else
		diff_put(out, f->num, f->v);
}

static void diff_tx_label(struct diff_tx *t, const struct pprofread_field *f, struct buf *out)
{
	if (f->wt != PPROFREAD_VARINT || f->num > 4)
		return;
	diff_put(out, f->num, f->num == 3 ? f->v : f->v + t->str);
}

/* Sample: location ids moved, values negated (packed), labels' strings moved. */
static void diff_tx_sample(struct diff_tx *t, const struct pprofread_field *f, struct buf *out)
{
	if (f->num == 3 && f->wt == PPROFREAD_LEN) {
		diff_tx_fields(t, f, &t->sub2, diff_tx_label);
		diff_put_msg(out, 3, &t->sub2);
		return;
	}
	if (f->num != 1 && f->num != 2)
		return;
	/* one value (VARINT) or a packed run (LEN) */
	struct pprofread_cur c = { NULL, NULL };
	if (f->wt == PPROFREAD_LEN)
		c = (struct pprofread_cur){ f->data, f->data + f->v };
	uint64_t v = f->v;
	int rc = f->wt == PPROFREAD_VARINT ? 1 : f->wt == PPROFREAD_LEN ? pprofread_varint(&c, &v) : -1;
	while (rc > 0) {
		if (f->num == 1)
			diff_varint(&t->sub2, diff_new_id(t, pprofread_loc_index(t->a, v), t->loc));
		else
			diff_varint(&t->sub2, (uint64_t)0 - v); /* int64 negated, two's complement */
		rc = f->wt == PPROFREAD_VARINT ? 0 : pprofread_varint(&c, &v);
	}
	if (rc < 0)
		t->bad = 1;
	diff_put_msg(out, f->num, &t->sub2);
}

static uint64_t diff_max_id(const void *arr, size_t n, size_t sz)
{
	uint64_t v = 0;
	if (n) /* sorted by a leading id (pprofread.h) */
		memcpy(&v, (const unsigned char *)arr + (n - 1) * sz, sizeof(v));
	return v;
}

static bool diff_same_vtype(const struct pprofread *a, const struct pprofread_vtype *x,
			    const struct pprofread *b, const struct pprofread_vtype *y)
{
	const struct pprofread_str *s[4] = { &a->strs[x->type], &a->strs[x->unit],
					     &b->strs[y->type], &b->strs[y->unit] };
	for (int k = 0; k < 2; k++)
		if (s[k]->len != s[k + 2]->len || memcmp(s[k]->s, s[k + 2]->s, s[k]->len) != 0)
			return false;
	return true;
}

int diff_profile(struct buf *out, const struct pprofread *base, const struct pprofread *cur,
		 const char *comment, char *err, size_t errlen)
{
	bool same = base->ntypes == cur->ntypes &&
		    diff_same_vtype(base, &base->period_type, cur, &cur->period_type);
	for (size_t i = 0; same && i < base->ntypes; i++)
		same = diff_same_vtype(base, &base->types[i], cur, &cur->types[i]);
	if (!same) {
		snprintf(err, errlen, "the profiles have different sample or period types: pprof "
			 "cannot subtract them");
		return -1;
	}
	struct diff_tx t = { .a = base, .str = cur->nstrs };
	t.loc = diff_max_id(cur->locs, cur->nlocs, sizeof(*cur->locs));
	t.func = diff_max_id(cur->funcs, cur->nfuncs, sizeof(*cur->funcs));
	t.map = diff_max_id(cur->maps, cur->nmaps, sizeof(*cur->maps));
	if (t.loc > UINT64_MAX - base->nlocs - 1 || t.func > UINT64_MAX - base->nfuncs - 1 ||
	    t.map > UINT64_MAX - base->nmaps - 1) {
		snprintf(err, errlen, "ids too large to add the base's after the new profile's");
		return -1;
	}
	buf_init(&t.m);
	buf_init(&t.sub2);
	struct buf body;
	buf_init(&body);
	buf_append(&body, cur->raw.data, cur->raw.len);

	static void (*const tx[])(struct diff_tx *, const struct pprofread_field *, struct buf *) = {
		[2] = diff_tx_sample,   [3] = diff_tx_mapping, [4] = diff_tx_location,
		[5] = diff_tx_function,
	};
	struct pprofread_cur c = { base->raw.data, base->raw.data + base->raw.len };
	struct pprofread_field f;
	int rc;
	while ((rc = pprofread_next(&c, &f, err, errlen)) > 0) {
		if (f.num == 6 && f.wt == PPROFREAD_LEN) {
			diff_put_bytes(&body, 6, f.data, f.v);
		} else if (f.num >= 2 && f.num <= 5 && f.wt == PPROFREAD_LEN) {
			diff_tx_fields(&t, &f, &t.m, tx[f.num]);
			diff_put_msg(&body, f.num, &t.m);
		}
	}
	if (rc < 0)
		t.bad = 1;
	diff_put_bytes(&body, 6, comment, strlen(comment));
	diff_put(&body, 13, cur->nstrs + base->nstrs);
	rc = -1;
	if (t.bad)
		snprintf(err, errlen, "the base profile did not re-encode");
	else if (body.failed || t.m.failed || t.sub2.failed ||
		 gzip_append(out, body.data, body.len, 1) != 0)
		snprintf(err, errlen, "out of memory");
	else
		rc = 0;
	buf_free(&body);
	buf_free(&t.m);
	buf_free(&t.sub2);
	return rc;
}
