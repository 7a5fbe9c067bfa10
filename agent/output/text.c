// SPDX-License-Identifier: MIT
/*
 * text.c: Go's legacy heap profile text (runtime/pprof writeHeapInternal, debug=1), which
 * `go tool pprof` reads through its legacy parser (profile/legacy_profile.go parseHeap).
 *
 *   heap profile: <inuse objs>: <inuse bytes> [<alloc objs>: <alloc bytes>] @ heap/<2*rate>
 *   # llgo-heap: sampled=N delivered=N dropped=N corrupt=N
 *   <inuse objs>: <inuse bytes> [<alloc objs>: <alloc bytes>] @ 0x<pc> 0x<pc> ...
 *   #	0x<pc-1>	<function>+0x<offset>	<file>:<line>      (one per frame, inline expanded)
 *   <blank line>
 *   ...
 *   MAPPED_LIBRARIES:
 *   <start>-<end> <perms> <offset> <dev> <inode>   <path>     (as /proc/PID/maps)
 *
 * Counts are raw (unscaled): pprof scales them with the header's rate (heap/N means a
 * rate of N/2, "early versions of the C++ heap profiler reported 2*MemProfileRate").
 * Records are Go's (stack, size) buckets, so buckets that differ only by rate are summed
 * raw; the header can state one rate only, so when samples were taken at several rates a
 * comment says the scaled values are approximate (the pprof format is exact). Records are
 * sorted by in-use bytes, largest first. The frame comment lines go through Go's
 * tabwriter (minwidth 1, tabwidth 8, padding 1, padchar '\t'), which this file emulates
 * so the output is byte-for-byte what Go would print for the same frames. pprof skips
 * '#' lines; the MAPPED_LIBRARIES section gives it the mappings to symbolize the return
 * addresses from the binaries.
 *
 * A peak profile (peak.c) has free counters of 0: both pairs are its in-use values at the
 * peak, and a comment says when that was.
 *
 * Left to others: the samples (profile.c), symbols (symbolize.c), mappings (procmaps.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "../../common/escape.h"
#include "../../common/sane.h"

/* ---- Go's text/tabwriter, for the cells we write ------------------------------------- */

#define TW_MAX_CELLS 4

struct tw_line {
	int ncells;
	size_t off[TW_MAX_CELLS]; /* into the text buffer */
	size_t len[TW_MAX_CELLS];
	int width[TW_MAX_CELLS]; /* in runes, as tabwriter counts */
};

struct tw {
	struct buf text;
	struct tw_line *lines;
	size_t n, cap;
	int widths[TW_MAX_CELLS];
};

static int utf8_width(const char *s, size_t n)
{
	int w = 0;
	for (size_t i = 0; i < n; i++)
		w += ((unsigned char)s[i] & 0xc0) != 0x80;
	return w;
}

/* Add one line; fmt's output is split into cells at tabs. */
static int tw_addf(struct tw *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tw_addf(struct tw *t, const char *fmt, ...)
{
	if (t->n == t->cap) {
		size_t nc = t->cap ? t->cap * 2 : 64;
		struct tw_line *p = realloc(t->lines, nc * sizeof(*p));
		if (!p)
			return -ENOMEM;
		t->lines = p;
		t->cap = nc;
	}
	size_t start = t->text.len;
	va_list ap;
	va_start(ap, fmt);
	int err = buf_vprintf(&t->text, fmt, ap);
	va_end(ap);
	if (err)
		return err;
	struct tw_line *l = &t->lines[t->n++];
	memset(l, 0, sizeof(*l));
	size_t cell = start;
	for (size_t i = start;; i++) {
		if (i == t->text.len || t->text.data[i] == '\t') {
			if (l->ncells < TW_MAX_CELLS) {
				l->off[l->ncells] = cell;
				l->len[l->ncells] = i - cell;
				l->width[l->ncells] = utf8_width((char *)t->text.data + cell, i - cell);
				l->ncells++;
			}
			cell = i + 1;
			if (i == t->text.len)
				break;
		}
	}
	return 0;
}

/* tabwriter's writePadding with padchar '\t': pad to the column width rounded up to a
 * multiple of the tab width, with as many tabs as that takes. */
static void tw_pad(struct buf *b, int textw, int cellw)
{
	cellw = (cellw + 7) / 8 * 8;
	for (int n = (cellw - textw + 7) / 8; n > 0; n--)
		buf_putc(b, '\t');
}

static void tw_write_lines(struct tw *t, struct buf *b, size_t line0, size_t line1, int nw)
{
	for (size_t i = line0; i < line1; i++) {
		const struct tw_line *l = &t->lines[i];
		for (int j = 0; j < l->ncells; j++) {
			buf_append(b, t->text.data + l->off[j], l->len[j]);
			if (j < nw && j < l->ncells - 1)
				tw_pad(b, l->width[j], t->widths[j]);
		}
		buf_putc(b, '\n');
	}
}

/* tabwriter's format: a column block is a run of lines that have a tab-terminated cell in
 * that column; its width is the widest cell plus padding. */
static void tw_format(struct tw *t, struct buf *b, size_t line0, size_t line1, int nw)
{
	int column = nw;
	for (size_t this = line0; this < line1; this++) {
		if (column >= t->lines[this].ncells - 1)
			continue;
		tw_write_lines(t, b, line0, this, nw);
		line0 = this;
		int width = 1; /* minwidth */
		for (; this < line1; this++) {
			const struct tw_line *l = &t->lines[this];
			if (column >= l->ncells - 1)
				break;
			if (l->width[column] + 1 > width) /* padding 1 */
				width = l->width[column] + 1;
		}
		t->widths[nw] = width;
		tw_format(t, b, line0, this, nw + 1);
		line0 = this;
	}
	tw_write_lines(t, b, line0, line1, nw);
}

static void tw_flush(struct tw *t, struct buf *b)
{
	tw_format(t, b, 0, t->n, 0);
	if (t->text.failed)
		b->failed = true;
	t->n = 0;
	buf_reset(&t->text);
}

/* ---- Records -------------------------------------------------------------------------- */

struct trec {
	struct profile_values v; /* raw */
	const struct stack *stack;
	size_t group;
};

static int trec_cmp(const void *x, const void *y)
{
	const struct trec *a = x, *b = y;
	if (a->v.inuse_bytes != b->v.inuse_bytes)
		return a->v.inuse_bytes > b->v.inuse_bytes ? -1 : 1;
	if (a->v.alloc_bytes != b->v.alloc_bytes)
		return a->v.alloc_bytes > b->v.alloc_bytes ? -1 : 1;
	return a->group < b->group ? -1 : a->group > b->group;
}

/* Go's printStackRecord: one comment line per frame, inlined frames expanded (each with
 * the same pc), the offset measured from the physical function's entry. */
static int text_frames(struct tw *t, const struct stack *st, struct procmaps *maps)
{
	uint32_t n = st ? st->npcs : 0;
	for (uint32_t i = 0; i < n; i++) {
		if (st->pcs[i] == 0)
			break;
		uint64_t addr = st->pcs[i] - 1;
		const struct mapping *m;
		struct sym_result r;
		int nf = profile_frame(maps, st->pcs[i], &m, &r);
		int err;
		if (nf == 0) {
			err = tw_addf(t, "#\t0x%llx", (unsigned long long)addr);
		} else {
			unsigned long long off = r.entry && r.entry <= addr ? addr - r.entry : 0;
			for (int k = 0; k < nf; k++) {
				const struct sym_frame *f = &r.frames[k];
				/* names from the process's files: escaped (escape.c) */
				char *fn = escape_dup(f->function);
				char *file = escape_dup(f->file ? f->file : "??");
				err = fn && file ? tw_addf(t, "#\t0x%llx\t%s+0x%llx\t%s:%d",
							   (unsigned long long)addr, fn, off, file,
							   f->line)
						 : -ENOMEM;
				free(fn);
				free(file);
				if (err)
					return err;
			}
			err = 0;
		}
		if (err)
			return err;
	}
	return 0;
}

static void text_mapped_libraries(struct buf *b, struct procmaps *maps)
{
	const struct mapping **v;
	size_t n = procmaps_list(maps, &v);
	buf_puts(b, "MAPPED_LIBRARIES:\n");
	for (size_t i = 0; i < n; i++) {
		const struct mapping *m = v[i];
		/* The kernel's show_map_vma layout: the header is padded to 72 columns, then
		 * one space and the path. */
		size_t before = b->len;
		buf_printf(b, "%08llx-%08llx %s %08llx %02x:%02x %llu ", (unsigned long long)m->start,
			   (unsigned long long)m->end, m->perms[0] ? m->perms : "r-xp",
			   (unsigned long long)m->offset, m->dev_major, m->dev_minor,
			   (unsigned long long)m->inode);
		int len = b->failed ? 72 : (int)(b->len - before);
		buf_printf(b, "%*s ", len < 72 ? 72 - len : 0, "");
		escape_append(b, m->path);
		buf_putc(b, '\n');
	}
}

int text_write(struct buf *out, const struct profile *p, struct procmaps *maps)
{
	size_t *order, *starts, ngroups;
	int err = profile_group(p, &order, &starts, &ngroups);
	if (err)
		return err;
	struct trec *recs = calloc(ngroups + 1, sizeof(*recs));
	struct tw t;
	memset(&t, 0, sizeof(t));
	buf_init(&t.text);
	struct buf b;
	buf_init(&b);
	if (!recs) {
		err = -ENOMEM;
		goto out;
	}
	struct profile_values total = { 0, 0, 0, 0 };
	for (size_t g = 0; g < ngroups; g++) {
		struct trec *r = &recs[g];
		r->group = g;
		r->stack = p->samples[order[starts[g]]].stack;
		for (size_t k = starts[g]; k < starts[g + 1]; k++) {
			struct profile_values v;
			profile_sample_raw(&p->samples[order[k]], &v);
			r->v.alloc_objects = sane_add(r->v.alloc_objects, v.alloc_objects);
			r->v.alloc_bytes = sane_add(r->v.alloc_bytes, v.alloc_bytes);
			r->v.inuse_objects = sane_add(r->v.inuse_objects, v.inuse_objects);
			r->v.inuse_bytes = sane_add(r->v.inuse_bytes, v.inuse_bytes);
		}
		total.alloc_objects = sane_add(total.alloc_objects, r->v.alloc_objects);
		total.alloc_bytes = sane_add(total.alloc_bytes, r->v.alloc_bytes);
		total.inuse_objects = sane_add(total.inuse_objects, r->v.inuse_objects);
		total.inuse_bytes = sane_add(total.inuse_bytes, r->v.inuse_bytes);
	}
	if (ngroups > 1)
		qsort(recs, ngroups, sizeof(*recs), trec_cmp);

	uint64_t rate = profile_main_rate(p);
	buf_printf(&b, "heap profile: %lld: %lld [%lld: %lld] @ heap/%llu\n",
		   (long long)total.inuse_objects, (long long)total.inuse_bytes,
		   (long long)total.alloc_objects, (long long)total.alloc_bytes,
		   (unsigned long long)(2 * rate));
	profile_comment_lines(&b, p);
	if (profile_mixed_rates(p))
		buf_printf(&b, "# llgo-heap: samples were taken at several rates; this text states "
			       "one (%llu) for all, so values scaled from it are approximate "
			       "(the pprof format scales each sample with its own rate)\n",
			   (unsigned long long)rate);
	if (p->meta.cap_hits)
		buf_printf(&b, "# llgo-heap: bucket cap reached: %llu samples counted without "
			       "their stack\n", (unsigned long long)p->meta.cap_hits);
	if (p->meta.pid) {
		char comm[LLGO_COMM_LEN + 1];
		memcpy(comm, p->meta.comm, LLGO_COMM_LEN);
		comm[LLGO_COMM_LEN] = '\0';
		buf_printf(&b, "# llgo-heap: pid=%d comm=%s\n", (int)p->meta.pid, comm);
	}
	for (size_t g = 0; g < ngroups && !err; g++) {
		const struct trec *r = &recs[g];
		buf_printf(&b, "%lld: %lld [%lld: %lld] @", (long long)r->v.inuse_objects,
			   (long long)r->v.inuse_bytes, (long long)r->v.alloc_objects,
			   (long long)r->v.alloc_bytes);
		uint32_t n = r->stack ? r->stack->npcs : 0;
		for (uint32_t i = 0; i < n && r->stack->pcs[i]; i++)
			buf_printf(&b, " 0x%llx", (unsigned long long)r->stack->pcs[i]);
		buf_putc(&b, '\n');
		err = text_frames(&t, r->stack, maps);
		tw_flush(&t, &b);
		buf_putc(&b, '\n');
	}
	buf_putc(&b, '\n');
	text_mapped_libraries(&b, maps);
	if (!err && b.failed)
		err = -ENOMEM;
	if (!err)
		err = buf_append(out, b.data, b.len);
out:
	buf_free(&b);
	buf_free(&t.text);
	free(t.lines);
	free(recs);
	free(order);
	free(starts);
	return err;
}
