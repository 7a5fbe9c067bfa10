// SPDX-License-Identifier: MIT
/*
 * folded.c: folded stacks, the input of flamegraph.pl, inferno and speedscope:
 *
 *   # llgo-heap: sampled=N delivered=N dropped=N corrupt=N
 *   main;parse;xstrdup 1048576
 *
 * One line per distinct stack, root first, frames separated by ';', inlined frames
 * expanded (caller before callee), a space and the value. Addresses no symbol covers
 * read "file+0xoffset" (file offset inside the mapped file) or "0x<addr>" outside every
 * mapping. The value is Go's scaled estimate: allocated bytes by default, in-use with
 * LLGO_SNAP_INUSE (a peak profile's: in use at the peak), objects with LLGO_SNAP_OBJECTS. Stacks that fold to
 * the same text are merged; lines are sorted; stacks worth nothing (or less, in a delta)
 * are left out.
 *
 * The accounting comment is always the first line. Folded-stack readers drop lines they
 * cannot parse: flamegraph.pl needs the line to end in whitespace + digits, and this one
 * ends in "corrupt=N" (digits after '='), so it is counted as an ignored line and draws
 * nothing. Comment lines written here never end in a bare number.
 *
 * Left to others: the samples (profile.c), symbols (symbolize.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "../../common/escape.h"
#include "../../common/sane.h"

struct fline {
	size_t off, len;  /* folded text in the arena */
	const char *text; /* arena + off, once the arena stops growing */
	int64_t value;
};

struct fctx {
	struct buf arena;
	struct fline *lines;
	size_t n, cap;
};

/* Append a frame name, with the characters that would break the format replaced. */
static void put_name(struct buf *b, const char *s)
{
	size_t start = b->len;
	escape_append(b, s); /* no control character, no line break (escape.c) */
	if (b->failed)
		return;
	for (size_t i = start; i < b->len; i++) {
		if (b->data[i] == ';')
			b->data[i] = '_';
	}
}

static void put_frames(struct buf *b, const struct stack *st, struct procmaps *maps)
{
	uint32_t n = st ? st->npcs : 0;
	bool first = true;
	uint32_t depth = 0; /* a stack ends at its first zero */
	while (depth < n && st->pcs[depth])
		depth++;
	if (depth == 0) {
		buf_puts(b, "[no stack]");
		return;
	}
	for (uint32_t i = depth; i-- > 0;) {
		uint64_t addr = st->pcs[i] - 1;
		const struct mapping *m;
		struct sym_result r;
		int nf = profile_frame(maps, st->pcs[i], &m, &r);
		if (nf == 0) {
			char name[320];
			profile_addr_name(name, sizeof(name), m, addr);
			if (!first)
				buf_putc(b, ';');
			put_name(b, name);
			first = false;
			continue;
		}
		for (int k = nf; k-- > 0;) { /* physical function first, leaf last */
			if (!first)
				buf_putc(b, ';');
			put_name(b, r.frames[k].function);
			first = false;
		}
	}
}

static int fline_cmp(const void *x, const void *y)
{
	const struct fline *a = x, *b = y;
	size_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(a->text, b->text, n);
	if (c)
		return c;
	return a->len < b->len ? -1 : a->len > b->len;
}

static int64_t pick(const struct profile_values *v, uint32_t flags)
{
	bool inuse = flags & LLGO_SNAP_INUSE, objects = flags & LLGO_SNAP_OBJECTS;
	if (inuse)
		return objects ? v->inuse_objects : v->inuse_bytes;
	return objects ? v->alloc_objects : v->alloc_bytes;
}

int folded_write(struct buf *out, const struct profile *p, struct procmaps *maps,
		 uint32_t flags)
{
	struct fctx c;
	memset(&c, 0, sizeof(c));
	buf_init(&c.arena);
	int err = 0;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct psample *s = &p->samples[i];
		struct profile_values v;
		profile_sample_scaled(s, &v);
		int64_t value = pick(&v, p->meta.peak.on ? flags | LLGO_SNAP_INUSE : flags);
		if (value <= 0)
			continue;
		if (c.n == c.cap) {
			size_t nc = c.cap ? c.cap * 2 : 256;
			struct fline *np = realloc(c.lines, nc * sizeof(*np));
			if (!np) {
				err = -ENOMEM;
				goto out;
			}
			c.lines = np;
			c.cap = nc;
		}
		size_t off = c.arena.len;
		put_frames(&c.arena, s->stack, maps);
		c.lines[c.n++] = (struct fline){ off, c.arena.len - off, NULL, value };
	}
	if (c.arena.failed) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < c.n; i++)
		c.lines[i].text = (const char *)c.arena.data + c.lines[i].off;
	if (c.n > 1)
		qsort(c.lines, c.n, sizeof(*c.lines), fline_cmp);

	struct buf b;
	buf_init(&b);
	profile_comment_lines(&b, p);
	if (profile_mixed_rates(p))
		buf_puts(&b, "# llgo-heap: samples were taken at several rates; each sample is "
			     "scaled with its own rate\n");
	for (size_t i = 0; i < c.n;) {
		size_t j = i;
		int64_t sum = 0;
		while (j < c.n && fline_cmp(&c.lines[j], &c.lines[i]) == 0)
			sum = sane_add(sum, c.lines[j++].value);
		buf_append(&b, c.lines[i].text, c.lines[i].len);
		buf_printf(&b, " %lld\n", (long long)sum);
		i = j;
	}
	err = b.failed ? -ENOMEM : buf_append(out, b.data, b.len);
	buf_free(&b);
out:
	buf_free(&c.arena);
	free(c.lines);
	return err;
}
