// SPDX-License-Identifier: MIT
/*
 * pprof.c: a profile as perftools.profiles.Profile (google/pprof proto/profile.proto),
 * gzipped, the way Go's runtime/pprof writes the heap and allocs profiles.
 *
 * Layout, as Go's writeHeapProto: sample types alloc_objects/count, alloc_space/bytes,
 * inuse_objects/count, inuse_space/bytes in that order; period type space/bytes; period
 * the sampling rate; default_sample_type "alloc_space" only for the allocs view. The peak
 * view (peak.c, meta.peak) has two sample types instead, peak_inuse_objects/count and
 * peak_inuse_space/bytes (the in-use pair at the peak; default_sample_type the latter). Each
 * sample carries Go's scaled estimates, the alloc and in-use pairs scaled separately;
 * buckets that differ only by rate are scaled each with its own rate and summed into one
 * Sample, so a rate change mid-run still gives unbiased totals. A Label bytes=<block size>
 * tells the size. One Location per distinct return address (address = pc - 1, inside the
 * call instruction), with one Line per inlined frame, leaf first; Functions deduplicated
 * by (name, file); Mappings are the process's executable mappings in address order, with
 * has_* saying what symbolization found, so `go tool pprof` never needs to ask
 * /debug/pprof/symbol for a file we could read. IDs are 1..n in first-seen order.
 * Accounting (sampled/delivered/dropped/corrupt) is always in a comment.
 *
 * The encoder is hand-written: varints, length-delimited fields and packed repeated
 * fields are all the message needs. Nested messages are built in a scratch buffer and
 * copied in with their length.
 *
 * Left to others: what the samples are (profile.c), symbols (symbolize.c), gzip (buf.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

/* ---- Protobuf encoding ---------------------------------------------------------------- */

enum { WT_VARINT = 0, WT_LEN = 2 };

/* The function name standing for the overflow bucket's missing stack (as in folded.c and
 * top.c). */
#define PPROF_NO_STACK "[no stack]"

static void pb_varint(struct buf *b, uint64_t v)
{
	unsigned char tmp[10];
	size_t n = 0;
	while (v >= 0x80) {
		tmp[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (unsigned char)v;
	buf_append(b, tmp, n);
}

static void pb_key(struct buf *b, uint32_t field, int wt)
{
	pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wt);
}

/* A varint field, omitted when zero (proto3 default). int64 values are encoded as their
 * two's complement, as protobuf's int64 (not sint64) does. */
static void pb_uint(struct buf *b, uint32_t field, uint64_t v)
{
	if (!v)
		return;
	pb_key(b, field, WT_VARINT);
	pb_varint(b, v);
}

static void pb_bool(struct buf *b, uint32_t field, bool v)
{
	pb_uint(b, field, v ? 1 : 0);
}

static void pb_bytes(struct buf *b, uint32_t field, const void *p, size_t n)
{
	pb_key(b, field, WT_LEN);
	pb_varint(b, n);
	buf_append(b, p, n);
}

/* A nested message held in msg, then msg is reset for the next one. */
static void pb_msg(struct buf *b, uint32_t field, struct buf *msg)
{
	pb_bytes(b, field, msg->data, msg->len);
	if (msg->failed)
		b->failed = true;
	buf_reset(msg);
}

static void pb_packed(struct buf *b, struct buf *tmp, uint32_t field, const uint64_t *v,
		      size_t n)
{
	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++)
		pb_varint(tmp, v[i]);
	pb_msg(b, field, tmp);
}

/* ---- Hash tables ---------------------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t hash_u64(uint64_t v)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdULL;
	v ^= v >> 33;
	return v;
}

/* Grow an open-addressing table of uint32 slots (0 = empty) holding 1-based indices. */
static int table_grow(uint32_t **tab, size_t *cap, size_t used)
{
	if ((used + 1) * 2 <= *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 1024;
	uint32_t *t = calloc(nc, sizeof(*t));
	if (!t)
		return -ENOMEM;
	free(*tab);
	*tab = t;
	*cap = nc;
	return 1; /* caller rehashes */
}

struct pstr {
	char *s;
	size_t len;
	uint64_t hash;
};

struct pfunc {
	const char *name, *file;
	int start_line;
	uint64_t hash;
};

struct ploc {
	uint64_t pc;
};

struct pmap_flags {
	bool used, unresolved;
	bool has_functions, has_filenames, has_lines, has_inlines;
};

struct pprof_ctx {
	struct buf body, tmp, tmp2;
	/* strings */
	struct pstr *strs;
	size_t nstrs, capstrs;
	uint32_t *stab;
	size_t stab_cap;
	/* functions */
	struct pfunc *funcs;
	size_t nfuncs, capfuncs;
	uint32_t *ftab;
	size_t ftab_cap;
	/* locations */
	struct ploc *locs;
	size_t nlocs, caplocs;
	uint32_t *ltab;
	size_t ltab_cap;
	/* mappings */
	const struct mapping **maps;
	size_t nmaps;
	struct pmap_flags *mflags;
	int err;
};

static int64_t str_index(struct pprof_ctx *c, const char *s)
{
	if (!s)
		s = "";
	size_t len = strlen(s);
	uint64_t h = hash_bytes(s, len, 0xcbf29ce484222325ULL);
	for (;;) {
		if (c->stab_cap) {
			size_t j = h & (c->stab_cap - 1);
			for (; c->stab[j]; j = (j + 1) & (c->stab_cap - 1)) {
				struct pstr *e = &c->strs[c->stab[j] - 1];
				if (e->hash == h && e->len == len && memcmp(e->s, s, len) == 0)
					return (int64_t)(c->stab[j] - 1);
			}
		}
		int g = table_grow(&c->stab, &c->stab_cap, c->nstrs);
		if (g < 0)
			goto oom;
		if (g == 0)
			break;
		for (size_t i = 0; i < c->nstrs; i++) {
			size_t j = c->strs[i].hash & (c->stab_cap - 1);
			while (c->stab[j])
				j = (j + 1) & (c->stab_cap - 1);
			c->stab[j] = (uint32_t)(i + 1);
		}
	}
	if (c->nstrs == c->capstrs) {
		size_t nc = c->capstrs ? c->capstrs * 2 : 256;
		struct pstr *p = realloc(c->strs, nc * sizeof(*p));
		if (!p)
			goto oom;
		c->strs = p;
		c->capstrs = nc;
	}
	char *copy = malloc(len + 1);
	if (!copy)
		goto oom;
	memcpy(copy, s, len + 1);
	c->strs[c->nstrs] = (struct pstr){ copy, len, h };
	size_t j = h & (c->stab_cap - 1);
	while (c->stab[j])
		j = (j + 1) & (c->stab_cap - 1);
	c->stab[j] = (uint32_t)(++c->nstrs);
	return (int64_t)(c->nstrs - 1);
oom:
	c->err = -ENOMEM;
	return 0;
}

static bool str_eq(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") == 0;
}

/* The id of the Function (name, file), created on first use. */
static uint64_t func_id(struct pprof_ctx *c, const struct sym_frame *fr)
{
	const char *name = fr->function, *file = fr->file ? fr->file : "";
	uint64_t h = hash_bytes(name, strlen(name), 0xcbf29ce484222325ULL);
	h = hash_bytes(file, strlen(file) + 1, h ^ 0xff);
	for (;;) {
		if (c->ftab_cap) {
			size_t j = h & (c->ftab_cap - 1);
			for (; c->ftab[j]; j = (j + 1) & (c->ftab_cap - 1)) {
				struct pfunc *e = &c->funcs[c->ftab[j] - 1];
				if (e->hash == h && strcmp(e->name, name) == 0 && str_eq(e->file, file))
					return c->ftab[j];
			}
		}
		int g = table_grow(&c->ftab, &c->ftab_cap, c->nfuncs);
		if (g < 0)
			goto oom;
		if (g == 0)
			break;
		for (size_t i = 0; i < c->nfuncs; i++) {
			size_t j = c->funcs[i].hash & (c->ftab_cap - 1);
			while (c->ftab[j])
				j = (j + 1) & (c->ftab_cap - 1);
			c->ftab[j] = (uint32_t)(i + 1);
		}
	}
	if (c->nfuncs == c->capfuncs) {
		size_t nc = c->capfuncs ? c->capfuncs * 2 : 256;
		struct pfunc *p = realloc(c->funcs, nc * sizeof(*p));
		if (!p)
			goto oom;
		c->funcs = p;
		c->capfuncs = nc;
	}
	c->funcs[c->nfuncs] = (struct pfunc){ name, file, fr->start_line, h };
	size_t j = h & (c->ftab_cap - 1);
	while (c->ftab[j])
		j = (j + 1) & (c->ftab_cap - 1);
	c->ftab[j] = (uint32_t)(++c->nfuncs);
	return c->nfuncs;
oom:
	c->err = -ENOMEM;
	return 0;
}

/* The id of the Location for return address pc, created on first use. */
static uint64_t loc_id(struct pprof_ctx *c, uint64_t pc)
{
	uint64_t h = hash_u64(pc);
	for (;;) {
		if (c->ltab_cap) {
			size_t j = h & (c->ltab_cap - 1);
			for (; c->ltab[j]; j = (j + 1) & (c->ltab_cap - 1))
				if (c->locs[c->ltab[j] - 1].pc == pc)
					return c->ltab[j];
		}
		int g = table_grow(&c->ltab, &c->ltab_cap, c->nlocs);
		if (g < 0)
			goto oom;
		if (g == 0)
			break;
		for (size_t i = 0; i < c->nlocs; i++) {
			size_t j = hash_u64(c->locs[i].pc) & (c->ltab_cap - 1);
			while (c->ltab[j])
				j = (j + 1) & (c->ltab_cap - 1);
			c->ltab[j] = (uint32_t)(i + 1);
		}
	}
	if (c->nlocs == c->caplocs) {
		size_t nc = c->caplocs ? c->caplocs * 2 : 256;
		struct ploc *p = realloc(c->locs, nc * sizeof(*p));
		if (!p)
			goto oom;
		c->locs = p;
		c->caplocs = nc;
	}
	c->locs[c->nlocs].pc = pc;
	size_t j = h & (c->ltab_cap - 1);
	while (c->ltab[j])
		j = (j + 1) & (c->ltab_cap - 1);
	c->ltab[j] = (uint32_t)(++c->nlocs);
	return c->nlocs;
oom:
	c->err = -ENOMEM;
	return 0;
}

/* Index of the mapping holding addr in the snapshot, or -1. */
static long map_index(const struct pprof_ctx *c, uint64_t addr)
{
	size_t lo = 0, hi = c->nmaps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->maps[mid]->start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || addr >= c->maps[lo - 1]->end)
		return -1;
	return (long)(lo - 1);
}

/* ---- Messages ------------------------------------------------------------------------- */

static void write_value_type(struct pprof_ctx *c, uint32_t field, const char *type,
			     const char *unit)
{
	pb_uint(&c->tmp, 1, (uint64_t)str_index(c, type));
	pb_uint(&c->tmp, 2, (uint64_t)str_index(c, unit));
	pb_msg(&c->body, field, &c->tmp);
}

static void write_samples(struct pprof_ctx *c, const struct profile *p)
{
	size_t *order, *starts, ngroups;
	if (profile_group(p, &order, &starts, &ngroups) != 0) {
		c->err = -ENOMEM;
		return;
	}
	uint64_t *ids = malloc((LLGO_MAX_FRAMES + 1) * sizeof(*ids));
	size_t idcap = LLGO_MAX_FRAMES + 1;
	if (!ids) {
		c->err = -ENOMEM;
		goto out;
	}
	for (size_t g = 0; g < ngroups && !c->err; g++) {
		const struct psample *first = &p->samples[order[starts[g]]];
		int64_t v[4] = { 0, 0, 0, 0 };
		uint64_t raw_objects = 0, raw_bytes = 0;
		for (size_t k = starts[g]; k < starts[g + 1]; k++) {
			const struct psample *s = &p->samples[order[k]];
			struct profile_values pv;
			profile_sample_scaled(s, &pv);
			v[0] += pv.alloc_objects;
			v[1] += pv.alloc_bytes;
			v[2] += pv.inuse_objects;
			v[3] += pv.inuse_bytes;
			struct profile_values rv;
			profile_sample_raw(s, &rv);
			raw_objects += (uint64_t)rv.alloc_objects;
			raw_bytes += (uint64_t)rv.alloc_bytes;
		}
		uint32_t npcs = first->stack ? first->stack->npcs : 0;
		if (npcs > idcap) {
			uint64_t *ni = realloc(ids, npcs * sizeof(*ni));
			if (!ni) {
				c->err = -ENOMEM;
				break;
			}
			ids = ni;
			idcap = npcs;
		}
		size_t nids = 0;
		for (uint32_t i = 0; i < npcs; i++) {
			uint64_t pc = first->stack->pcs[i];
			if (pc == 0)
				break; /* a stack ends at its first zero, as Go's Stack0 */
			ids[nids++] = loc_id(c, pc);
		}
		/* The overflow bucket has no stack; pprof would hide a sample without
		 * locations, so it gets a location of its own (the pc 0 marker). */
		if (nids == 0)
			ids[nids++] = loc_id(c, 0);
		pb_packed(&c->tmp, &c->tmp2, 1, ids, nids);
		/* a peak profile has the in-use pair only (its alloc pair is the same) */
		bool peak = p->meta.peak.on;
		uint64_t uv[4];
		for (int i = 0; i < 4; i++)
			uv[i] = (uint64_t)v[peak ? 2 + i % 2 : i];
		pb_packed(&c->tmp, &c->tmp2, 2, uv, peak ? 2 : 4);
		uint64_t block = raw_objects ? raw_bytes / raw_objects : 0;
		if (block) {
			pb_uint(&c->tmp2, 1, (uint64_t)str_index(c, "bytes"));
			pb_uint(&c->tmp2, 3, block);
			pb_msg(&c->tmp, 3, &c->tmp2);
		}
		pb_msg(&c->body, 2, &c->tmp);
	}
out:
	free(ids);
	free(order);
	free(starts);
}

static void write_locations(struct pprof_ctx *c, struct procmaps *maps)
{
	uint64_t *fids = malloc(SYM_MAX_INLINE * sizeof(*fids));
	if (!fids) {
		c->err = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < c->nlocs && !c->err; i++) {
		if (c->locs[i].pc == 0 || c->locs[i].pc == PROFILE_PC_TRUNCATED) {
			struct sym_frame none = { .function = c->locs[i].pc ? PROFILE_TRUNCATED_NAME
									    : PPROF_NO_STACK };
			pb_uint(&c->tmp, 1, i + 1);
			pb_uint(&c->tmp2, 1, func_id(c, &none));
			pb_msg(&c->tmp, 4, &c->tmp2);
			pb_msg(&c->body, 4, &c->tmp);
			continue;
		}
		uint64_t addr = c->locs[i].pc - 1; /* a return address: step into the call */
		long mi = map_index(c, addr);
		struct sym_result r;
		int n = 0;
		if (mi >= 0) {
			n = symbolize_pc(c->maps[mi], addr, &r);
			n = n > 0 ? profile_hide_new_inlines(&r) : 0;
			struct pmap_flags *mf = &c->mflags[mi];
			if (!mf->used) {
				mf->has_functions = r.has_functions;
				mf->has_filenames = r.has_filenames;
				mf->has_lines = r.has_lines;
				mf->has_inlines = r.has_inlines;
			}
			mf->used = true;
			if (n == 0)
				mf->unresolved = true;
		}
		pb_uint(&c->tmp, 1, i + 1);
		if (mi >= 0)
			pb_uint(&c->tmp, 2, (uint64_t)mi + 1);
		pb_uint(&c->tmp, 3, addr);
		for (int k = 0; k < n; k++) {
			fids[k] = func_id(c, &r.frames[k]);
			pb_uint(&c->tmp2, 1, fids[k]);
			if (r.frames[k].line > 0)
				pb_uint(&c->tmp2, 2, (uint64_t)r.frames[k].line);
			pb_msg(&c->tmp, 4, &c->tmp2);
		}
		pb_msg(&c->body, 4, &c->tmp);
	}
	free(fids);
	(void)maps;
}

static void write_functions(struct pprof_ctx *c)
{
	for (size_t i = 0; i < c->nfuncs && !c->err; i++) {
		const struct pfunc *f = &c->funcs[i];
		int64_t name = str_index(c, f->name);
		pb_uint(&c->tmp, 1, i + 1);
		pb_uint(&c->tmp, 2, (uint64_t)name);
		pb_uint(&c->tmp, 3, (uint64_t)name);
		pb_uint(&c->tmp, 4, (uint64_t)str_index(c, f->file));
		if (f->start_line > 0)
			pb_uint(&c->tmp, 5, (uint64_t)f->start_line);
		pb_msg(&c->body, 5, &c->tmp);
	}
}

static void write_mappings(struct pprof_ctx *c)
{
	for (size_t i = 0; i < c->nmaps && !c->err; i++) {
		const struct mapping *m = c->maps[i];
		struct pmap_flags *mf = &c->mflags[i];
		if (!mf->used) {
			/* No sample here: ask the file what it can tell, without a lookup (an
			 * address outside the mapping only fills the flags). */
			struct sym_result r;
			symbolize_pc(m, m->end, &r);
			mf->has_functions = r.has_functions;
			mf->has_filenames = r.has_filenames;
			mf->has_lines = r.has_lines;
			mf->has_inlines = r.has_inlines;
		} else if (!mf->unresolved) {
			/* Every address in it got a function (Go's "all lookups succeeded"). */
			mf->has_functions = true;
		}
		pb_uint(&c->tmp, 1, i + 1);
		pb_uint(&c->tmp, 2, m->start);
		pb_uint(&c->tmp, 3, m->end);
		pb_uint(&c->tmp, 4, m->offset);
		pb_uint(&c->tmp, 5, (uint64_t)str_index(c, m->path));
		pb_uint(&c->tmp, 6, (uint64_t)str_index(c, m->build_id));
		pb_bool(&c->tmp, 7, mf->has_functions);
		pb_bool(&c->tmp, 8, mf->has_filenames);
		pb_bool(&c->tmp, 9, mf->has_lines);
		pb_bool(&c->tmp, 10, mf->has_inlines);
		pb_msg(&c->body, 3, &c->tmp);
	}
}

static void write_comment(struct pprof_ctx *c, struct buf *line)
{
	if (buf_putc(line, '\0') != 0) {
		c->err = -ENOMEM;
		return;
	}
	pb_uint(&c->body, 13, (uint64_t)str_index(c, (const char *)line->data));
	buf_reset(line);
}

static void write_comments(struct pprof_ctx *c, const struct profile *p)
{
	struct buf line;
	buf_init(&line);
	/* pb_uint omits zero, but a comment index is never 0 (string 0 is ""). */
	profile_accounting(&line, p);
	write_comment(c, &line);
	if (profile_unwind_line(&line, p) > 0)
		write_comment(c, &line);
	if (profile_peak_line(&line, p) > 0)
		write_comment(c, &line);
	if (profile_mixed_rates(p)) {
		buf_puts(&line, "llgo-heap: samples were taken at several rates; each sample is "
				"scaled with its own rate");
		write_comment(c, &line);
	}
	if (p->meta.cap_hits) {
		buf_printf(&line, "llgo-heap: bucket cap reached: %llu samples counted without "
				  "their stack", (unsigned long long)p->meta.cap_hits);
		write_comment(c, &line);
	}
	if (p->meta.pid) {
		char comm[LLGO_COMM_LEN + 1];
		memcpy(comm, p->meta.comm, LLGO_COMM_LEN);
		comm[LLGO_COMM_LEN] = '\0';
		buf_printf(&line, "llgo-heap: pid=%d comm=%s", (int)p->meta.pid, comm);
		write_comment(c, &line);
	}
	buf_free(&line);
}

static void ctx_free(struct pprof_ctx *c)
{
	buf_free(&c->body);
	buf_free(&c->tmp);
	buf_free(&c->tmp2);
	for (size_t i = 0; i < c->nstrs; i++)
		free(c->strs[i].s);
	free(c->strs);
	free(c->stab);
	free(c->funcs);
	free(c->ftab);
	free(c->locs);
	free(c->ltab);
	free(c->mflags);
}

int pprof_write(struct buf *out, const struct profile *p, struct procmaps *maps,
		uint32_t flags)
{
	struct pprof_ctx c;
	memset(&c, 0, sizeof(c));
	buf_init(&c.body);
	buf_init(&c.tmp);
	buf_init(&c.tmp2);
	str_index(&c, ""); /* string_table[0] must be "" */
	c.nmaps = procmaps_list(maps, &c.maps);
	c.mflags = calloc(c.nmaps + 1, sizeof(*c.mflags));
	if (!c.mflags)
		c.err = -ENOMEM;

	if (!c.err && p->meta.peak.on) {
		write_value_type(&c, 1, "peak_inuse_objects", "count");
		write_value_type(&c, 1, "peak_inuse_space", "bytes");
		write_samples(&c, p);
	} else if (!c.err) {
		write_value_type(&c, 1, "alloc_objects", "count");
		write_value_type(&c, 1, "alloc_space", "bytes");
		write_value_type(&c, 1, "inuse_objects", "count");
		write_value_type(&c, 1, "inuse_space", "bytes");
		write_samples(&c, p);
	}
	if (!c.err)
		write_locations(&c, maps);
	if (!c.err)
		write_functions(&c);
	if (!c.err)
		write_mappings(&c);
	if (!c.err) {
		write_comments(&c, p);
		pb_uint(&c.body, 9, p->meta.time_nanos);
		pb_uint(&c.body, 10, p->meta.duration_nanos);
		write_value_type(&c, 11, "space", "bytes");
		pb_uint(&c.body, 12, p->meta.rate ? p->meta.rate : profile_main_rate(p));
		if (p->meta.peak.on)
			pb_uint(&c.body, 14, (uint64_t)str_index(&c, "peak_inuse_space"));
		else if (flags & LLGO_SNAP_ALLOCS)
			pb_uint(&c.body, 14, (uint64_t)str_index(&c, "alloc_space"));
		for (size_t i = 0; i < c.nstrs; i++)
			pb_bytes(&c.body, 6, c.strs[i].s, c.strs[i].len);
	}
	if (!c.err && (c.body.failed || c.tmp.failed || c.tmp2.failed))
		c.err = -ENOMEM;
	int err = c.err;
	if (!err)
		err = gzip_append(out, c.body.data, c.body.len, 1); /* Go: gzip.BestSpeed */
	ctx_free(&c);
	return err;
}
