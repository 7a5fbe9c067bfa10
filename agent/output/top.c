// SPDX-License-Identifier: MIT
/*
 * top.c: a human-readable table of the top allocation sites.
 *
 *   llgo-heap: pid 4242 (server), 3 of 57 sites by alloc_space, rate 524288
 *    alloc_space       %  alloc_objects  inuse_space  site
 *       12.5MiB   45.21%           1200       1.2MiB  parse_line parse.c:42
 *   ...
 *   # llgo-heap: sampled=N delivered=N dropped=N corrupt=N
 *
 * A site is the allocating call site: frame 0 of the stack, and inside it the innermost
 * inlined frame ("function file:line", the file's base name). Samples at one site are
 * summed whatever the rest of their stacks. Values are Go's scaled estimates. Rows are
 * ranked by allocated bytes, or in-use bytes with LLGO_SNAP_INUSE, or the matching object
 * counts with LLGO_SNAP_OBJECTS; "%" is the row's share of that total over all sites.
 * Ranked by in-use values the columns lead with in-use space and objects, and sites with
 * nothing in use are left out (the leak report of `llgo-heap run`). A peak profile (peak.c)
 * is ranked by its in-use values at the peak, with a second header line saying how high and
 * when, and the peak's comment line at the end. sites_write gives every
 * site's four values as tab-separated lines for `llgo-heap top --watch`.
 *
 * Left to others: the samples (profile.c), symbols (symbolize.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../internal.h"
#include "../../common/escape.h"
#include "../../common/sane.h"

struct site {
	char *name;
	struct profile_values v;
	int64_t key;
};

static int site_name_cmp(const void *x, const void *y)
{
	const struct site *a = x, *b = y;
	return strcmp(a->name, b->name);
}

static int site_key_cmp(const void *x, const void *y)
{
	const struct site *a = x, *b = y;
	if (a->key != b->key)
		return a->key > b->key ? -1 : 1;
	return strcmp(a->name, b->name);
}

static char *site_name_raw(const struct stack *st, struct procmaps *maps)
{
	char *s = NULL;
	if (!st || st->npcs == 0 || st->pcs[0] == 0)
		return strdup("[no stack]");
	uint64_t addr = st->pcs[0] - 1;
	const struct mapping *m;
	struct sym_result r;
	int nf = profile_frame(maps, st->pcs[0], &m, &r);
	if (nf == 0) {
		char name[320];
		profile_addr_name(name, sizeof(name), m, addr);
		return strdup(name);
	}
	const struct sym_frame *f = &r.frames[0];
	if (!f->file)
		return strdup(f->function);
	const char *base = strrchr(f->file, '/');
	base = base ? base + 1 : f->file;
	if (asprintf(&s, "%s %s:%d", f->function, base, f->line) < 0)
		return NULL;
	return s;
}

/* The name shown on a terminal: escaped (escape.c), a symbol may hold ESC sequences. */
static char *site_name(const struct stack *st, struct procmaps *maps)
{
	char *raw = site_name_raw(st, maps);
	if (!raw || !escape_needed(raw))
		return raw;
	char *e = escape_dup(raw);
	free(raw);
	return e;
}

/* Bytes in binary units, like "12.5MiB" or "512B". */
static void human(char *out, size_t n, int64_t v)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	const char *sign = v < 0 ? "-" : "";
	uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	if (a < 1024) {
		snprintf(out, n, "%s%lluB", sign, (unsigned long long)a);
		return;
	}
	double d = (double)a;
	size_t u = 0;
	while (d >= 1024 && u + 1 < LLGO_ARRAY_SIZE(units)) {
		d /= 1024;
		u++;
	}
	snprintf(out, n, "%s%.1f%s", sign, d, units[u]);
}

static int64_t rank_value(const struct profile_values *v, uint32_t flags)
{
	bool inuse = flags & LLGO_SNAP_INUSE, objects = flags & LLGO_SNAP_OBJECTS;
	if (inuse)
		return objects ? v->inuse_objects : v->inuse_bytes;
	return objects ? v->alloc_objects : v->alloc_bytes;
}

/* Every site of p with its scaled values summed (sorted by name); *out is malloc'ed, each
 * name too (top_sites_free). */
static int top_sites(const struct profile *p, struct procmaps *maps, struct site **out,
		     size_t *nout)
{
	struct site *sites = calloc(p->nsamples + 1, sizeof(*sites));
	size_t n = 0;
	if (!sites)
		return -ENOMEM;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct psample *s = &p->samples[i];
		sites[n].name = site_name(s->stack, maps);
		if (!sites[n].name) {
			for (size_t j = 0; j < n; j++)
				free(sites[j].name);
			free(sites);
			return -ENOMEM;
		}
		profile_sample_scaled(s, &sites[n].v);
		n++;
	}
	/* Sum by site. */
	if (n > 1)
		qsort(sites, n, sizeof(*sites), site_name_cmp);
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		if (w > 0 && strcmp(sites[w - 1].name, sites[i].name) == 0) {
			struct profile_values *d = &sites[w - 1].v;
			d->alloc_objects = sane_add(d->alloc_objects, sites[i].v.alloc_objects);
			d->alloc_bytes = sane_add(d->alloc_bytes, sites[i].v.alloc_bytes);
			d->inuse_objects = sane_add(d->inuse_objects, sites[i].v.inuse_objects);
			d->inuse_bytes = sane_add(d->inuse_bytes, sites[i].v.inuse_bytes);
			free(sites[i].name);
			sites[i].name = NULL;
			continue;
		}
		if (w != i) {
			sites[w] = sites[i];
			sites[i].name = NULL;
		}
		w++;
	}
	*out = sites;
	*nout = w;
	return 0;
}

static void top_sites_free(struct site *sites, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(sites[i].name);
	free(sites);
}

/* The peak view's second line: how high, when, and how far the scans may have missed it. */
static void top_peak_header(struct buf *b, const struct profile *p)
{
	const struct profile_peak *k = &p->meta.peak;
	char total[32], bound[32], when[32] = "?";
	human(total, sizeof(total), sane_i64(k->bytes));
	human(bound, sizeof(bound), sane_i64(k->bound));
	time_t t = (time_t)(p->meta.time_nanos / 1000000000ull);
	struct tm tm;
	if (p->meta.time_nanos && gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	buf_printf(b, "llgo-heap: peak %s in use (%llu objects) at %s, %llu.%03llus after attach%s",
		   total, (unsigned long long)k->objects, when,
		   (unsigned long long)(k->after_ns / 1000000000ull),
		   (unsigned long long)(k->after_ns / 1000000ull % 1000),
		   k->at_exit ? " (at exit)" : "");
	if (k->bound > k->bytes)
		buf_printf(b, "; at most %s between scans", bound);
	buf_putc(b, '\n');
}

int top_write(struct buf *out, const struct profile *p, struct procmaps *maps, uint32_t flags,
	      uint32_t top_n)
{
	struct site *sites;
	size_t n;
	int err = top_sites(p, maps, &sites, &n);
	if (err)
		return err;
	struct buf b;
	buf_init(&b);
	bool peak = p->meta.peak.on;
	if (peak)
		flags |= LLGO_SNAP_INUSE;
	bool inuse = flags & LLGO_SNAP_INUSE;
	int64_t total = 0;
	size_t nonzero = 0;
	for (size_t i = 0; i < n; i++) {
		sites[i].key = rank_value(&sites[i].v, flags);
		total = sane_add(total, sites[i].key);
		nonzero += sites[i].key != 0;
	}
	if (n > 1)
		qsort(sites, n, sizeof(*sites), site_key_cmp);
	/* Ranked by in-use values, sites with nothing in use are not rows (as pprof drops
	 * samples whose selected value is zero): a leak report lists leaks only. */
	size_t shown = inuse ? nonzero : n;

	const char *metric = inuse ? ((flags & LLGO_SNAP_OBJECTS) ? "inuse_objects" : "inuse_space")
				   : ((flags & LLGO_SNAP_OBJECTS) ? "alloc_objects" : "alloc_space");
	if (peak)
		metric = (flags & LLGO_SNAP_OBJECTS) ? "peak_inuse_objects" : "peak_inuse_space";
	size_t rows = shown < top_n ? shown : top_n;
	char comm[LLGO_COMM_LEN + 1];
	memcpy(comm, p->meta.comm, LLGO_COMM_LEN);
	comm[LLGO_COMM_LEN] = '\0';
	buf_printf(&b, "llgo-heap: pid %d (%s), %zu of %zu sites by %s, rate %llu\n",
		   (int)p->meta.pid, comm[0] ? comm : "?", rows, shown, metric,
		   (unsigned long long)profile_main_rate(p));
	if (peak)
		top_peak_header(&b, p);
	if (peak)
		buf_printf(&b, "%17s %8s %18s  %s\n", "peak_inuse_space", "%", "peak_inuse_objects",
			   "site");
	else if (inuse)
		buf_printf(&b, "%12s %8s %14s %12s  %s\n", "inuse_space", "%", "inuse_objects",
			   "alloc_space", "site");
	else
		buf_printf(&b, "%12s %8s %14s %12s  %s\n", "alloc_space", "%", "alloc_objects",
			   "inuse_space", "site");
	for (size_t i = 0; i < rows; i++) {
		const struct site *s = &sites[i];
		char as[32], is[32];
		human(as, sizeof(as), s->v.alloc_bytes);
		human(is, sizeof(is), s->v.inuse_bytes);
		double pct = total ? 100.0 * (double)s->key / (double)total : 0;
		if (peak)
			buf_printf(&b, "%17s %7.2f%% %18lld  %s\n", is, pct,
				   (long long)s->v.inuse_objects, s->name);
		else if (inuse)
			buf_printf(&b, "%12s %7.2f%% %14lld %12s  %s\n", is, pct,
				   (long long)s->v.inuse_objects, as, s->name);
		else
			buf_printf(&b, "%12s %7.2f%% %14lld %12s  %s\n", as, pct,
				   (long long)s->v.alloc_objects, is, s->name);
	}
	if (profile_mixed_rates(p))
		buf_puts(&b, "# llgo-heap: samples were taken at several rates; each sample is "
			     "scaled with its own rate\n");
	if (p->meta.cap_hits)
		buf_printf(&b, "# llgo-heap: bucket cap reached: %llu samples counted without "
			       "their stack\n", (unsigned long long)p->meta.cap_hits);
	buf_puts(&b, "# ");
	profile_accounting(&b, p);
	buf_putc(&b, '\n');
	if (peak) {
		buf_puts(&b, "# ");
		profile_peak_line(&b, p);
		buf_putc(&b, '\n');
	}
	err = b.failed ? -ENOMEM : buf_append(out, b.data, b.len);
	top_sites_free(sites, n);
	buf_free(&b);
	return err;
}

/*
 * LLGO_FORMAT_SITES: every site, one line each, for programs (`llgo-heap top --watch`):
 *   alloc_objects \t alloc_space \t inuse_objects \t inuse_space \t site \n
 * scaled values as in top_write, sorted by site name; then the accounting comment line.
 * Tabs and newlines cannot occur in a site name (symbol names and file names are printed
 * with them replaced by spaces).
 */
int sites_write(struct buf *out, const struct profile *p, struct procmaps *maps)
{
	struct site *sites;
	size_t n;
	int err = top_sites(p, maps, &sites, &n);
	if (err)
		return err;
	struct buf b;
	buf_init(&b);
	for (size_t i = 0; i < n; i++) {
		for (char *c = sites[i].name; *c; c++)
			if (*c == '\t' || *c == '\n')
				*c = ' ';
		buf_printf(&b, "%lld\t%lld\t%lld\t%lld\t%s\n", (long long)sites[i].v.alloc_objects,
			   (long long)sites[i].v.alloc_bytes, (long long)sites[i].v.inuse_objects,
			   (long long)sites[i].v.inuse_bytes, sites[i].name);
	}
	buf_puts(&b, "# ");
	profile_accounting(&b, p);
	buf_putc(&b, '\n');
	err = b.failed ? -ENOMEM : buf_append(out, b.data, b.len);
	top_sites_free(sites, n);
	buf_free(&b);
	return err;
}
