// SPDX-License-Identifier: MIT
/*
 * profile.c: snapshots of a bucket table, deltas between snapshots, Go's sample scaling,
 * and the helpers every output writer shares.
 *
 * A struct profile holds raw counters, one psample per bucket, i.e. per (stack, size,
 * rate). Raw counts are never corrected here: each writer applies profile_scale (Go's
 * scaleHeapSample) with the rate a sample was taken at, or writes raw counts where the
 * format wants them (Go's legacy text). Stacks are borrowed from the bucket table, which
 * never frees them while it lives; the session keeps the table alive while a profile of
 * it exists.
 *
 * Left to others: the counters (bucket.c), the metadata (snapshot.c fills p->meta: pid,
 * comm, times, rate, accounting), the formats (pprof.c, text.c, folded.c, top.c) and which
 * of them a request gets (snapshot.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../internal.h"
#include "../../common/sane.h"

/* ---- Scaling -------------------------------------------------------------------------- */

/*
 * Go's scaleHeapSample (runtime/pprof/protomem.go): a block of avg = size/count bytes is
 * sampled with probability 1 - exp(-avg/rate), so each sampled one stands for
 * 1 / (1 - exp(-avg/rate)) blocks. Results are truncated toward zero like Go's int64().
 */
void profile_scale(uint64_t count, uint64_t size, uint64_t rate, int64_t *out_count,
		   int64_t *out_size)
{
	if (count == 0 || size == 0) {
		*out_count = 0;
		*out_size = 0;
		return;
	}
	if (rate <= 1) {
		/* Every allocation was recorded. */
		*out_count = sane_i64(count);
		*out_size = sane_i64(size);
		return;
	}
	double avg = (double)size / (double)count;
	double scale = 1 / (1 - exp(-avg / (double)rate));
	*out_count = sane_from_double((double)count * scale);
	*out_size = sane_from_double((double)size * scale);
}

/* Signed pairs (in-use in a delta can be negative): Go's formula gives the same magnitude
 * for (-c, -s) as for (c, s), truncation being toward zero. */
static void scale_signed(int64_t count, int64_t size, uint64_t rate, int64_t *oc, int64_t *os)
{
	if ((count < 0) != (size < 0) && count != 0 && size != 0) {
		/* Inconsistent signs cannot come from real counters; report them raw. */
		*oc = count;
		*os = size;
		return;
	}
	bool neg = count < 0 || size < 0;
	uint64_t c = neg ? (uint64_t)0 - (uint64_t)count : (uint64_t)count;
	uint64_t s = neg ? (uint64_t)0 - (uint64_t)size : (uint64_t)size;
	profile_scale(c, s, rate, oc, os);
	if (neg) {
		*oc = -*oc;
		*os = -*os;
	}
}

/* a - b as a signed value, saturating (counters may sit at 2^64-1, see bucket.c) */
static int64_t profile_diff(uint64_t a, uint64_t b)
{
	return a >= b ? sane_i64(a - b) : -sane_i64(b - a);
}

void profile_sample_raw(const struct psample *s, struct profile_values *v)
{
	v->alloc_objects = sane_i64(s->alloc_objects);
	v->alloc_bytes = v->alloc_objects ? sane_i64(s->alloc_bytes) : 0;
	v->inuse_objects = profile_diff(s->alloc_objects, s->free_objects);
	v->inuse_bytes = v->inuse_objects ? profile_diff(s->alloc_bytes, s->free_bytes) : 0;
}

void profile_sample_scaled(const struct psample *s, struct profile_values *v)
{
	profile_scale(s->alloc_objects, s->alloc_bytes, s->rate, &v->alloc_objects,
		      &v->alloc_bytes);
	scale_signed(profile_diff(s->alloc_objects, s->free_objects),
		     profile_diff(s->alloc_bytes, s->free_bytes), s->rate, &v->inuse_objects,
		     &v->inuse_bytes);
}

/* ---- Collect, subtract, release ------------------------------------------------------- */

struct collect_ctx {
	struct profile *p;
	size_t cap;
	int err;
};

static int collect_one(void *arg, const struct bucket *b, const struct bucket_counts *bc)
{
	struct collect_ctx *c = arg;
	struct profile *p = c->p;
	if (p->nsamples == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 256;
		struct psample *ns = realloc(p->samples, nc * sizeof(*ns));
		if (!ns) {
			c->err = -ENOMEM;
			return 1;
		}
		p->samples = ns;
		c->cap = nc;
	}
	struct psample *s = &p->samples[p->nsamples];
	s->stack = b->stack;
	s->size = b->size;
	s->rate = b->rate;
	s->free_objects = bc->free_objects;
	s->free_bytes = bc->free_bytes;
	s->alloc_objects = bc->alloc_objects;
	s->alloc_bytes = bc->alloc_bytes;
	/* A bucket of one size holds whole blocks; recompute bytes so a concurrent add
	 * caught between its two counters cannot leave a count without its bytes. (The
	 * overflow bucket, with no stack, may mix sizes: its counters are taken as read.) */
	if (s->size && s->stack && s->stack->npcs) {
		s->alloc_bytes = s->alloc_objects * s->size;
		s->free_bytes = s->free_objects * s->size;
	}
	if (s->free_objects > s->alloc_objects) {
		s->free_objects = s->alloc_objects;
		s->free_bytes = s->alloc_bytes;
	}
	if (s->free_bytes > s->alloc_bytes)
		s->free_bytes = s->alloc_bytes;
	p->nsamples++;
	return 0;
}

int profile_collect_cut(struct profile *p, struct bucket_table *t, uint64_t cut)
{
	struct collect_ctx c = { .p = p };
	p->samples = NULL;
	p->nsamples = 0;
	int rc = bucket_table_foreach_cut(t, cut, collect_one, &c);
	if (c.err || rc < 0) {
		profile_release(p);
		return c.err ? c.err : rc;
	}
	return 0;
}

int profile_collect(struct profile *p, struct bucket_table *t)
{
	int rc = profile_collect_cut(p, t, 0);
	if (rc)
		return rc;
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	p->meta.cap_hits = st.cap_hits;
	if (profile_mixed_rates(p))
		p->meta.mixed_rates = true;
	return 0;
}

void profile_release(struct profile *p)
{
	if (!p)
		return;
	free(p->samples);
	p->samples = NULL;
	p->nsamples = 0;
	for (size_t i = 0; i < p->nowned; i++)
		free(p->owned[i]);
	free(p->owned);
	p->owned = NULL;
	p->nowned = 0;
}

static bool trim_match(const char *name, char *const *patterns, size_t n)
{
	if (!name)
		return false;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(patterns[i]);
		if (len && patterns[i][len - 1] == '*') {
			if (strncmp(name, patterns[i], len - 1) == 0)
				return true;
		} else if (strcmp(name, patterns[i]) == 0) {
			return true;
		}
	}
	return false;
}

/* The C++ operators new, by their Itanium-ABI names (size_t is `m`). A program that
 * replaces one (or a shim forwarding to libstdc++'s, or to a linked allocator's) calls
 * malloc from it, so a sample's leading frame is the operator, not the program's call
 * site; heaptrack and Go's profiles (runtime.newobject) show the caller of new. The
 * operator's frames are trimmed where it is the physical function (profile_trim) and left
 * out of inline chains (profile_hide_new_inlines). */
static const char *const profile_operator_new[] = {
	"_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
	"_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t",
	"_ZnamSt11align_val_tRKSt9nothrow_t",
};

static bool profile_is_operator_new(const char *name)
{
	for (size_t i = 0; name && i < LLGO_ARRAY_SIZE(profile_operator_new); i++)
		if (strcmp(name, profile_operator_new[i]) == 0)
			return true;
	return false;
}

int profile_hide_new_inlines(struct sym_result *r)
{
	int k = 0;
	while (k < r->nframes - 1 && profile_is_operator_new(r->frames[k].function))
		k++;
	if (k) {
		memmove(r->frames, r->frames + k, (size_t)(r->nframes - k) * sizeof(r->frames[0]));
		r->nframes -= k;
	}
	return r->nframes;
}

int profile_frame(struct procmaps *maps, uint64_t pc, const struct mapping **m,
		  struct sym_result *r)
{
	if (pc == PROFILE_PC_TRUNCATED) {
		*m = NULL;
		memset(r, 0, sizeof(*r));
		r->nframes = 1;
		r->frames[0].function = PROFILE_TRUNCATED_NAME;
		return 1;
	}
	*m = maps ? procmaps_find(maps, pc - 1) : NULL;
	r->nframes = 0;
	r->unavailable = false;
	int nf = *m ? symbolize_pc(*m, pc - 1, r) : 0;
	return nf > 0 ? profile_hide_new_inlines(r) : 0;
}

/* The distinct pcs of a profile: open addressing, 0 for empty (no frame is at address 0). */
struct prefetch_set {
	uint64_t *slots;
	size_t cap, n;
};

static bool prefetch_add(struct prefetch_set *s, uint64_t pc)
{
	if ((s->n + 1) * 2 > s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 4096;
		uint64_t *t = calloc(nc, sizeof(*t));
		if (!t)
			return false;
		for (size_t i = 0; i < s->cap; i++) {
			size_t j = s->slots[i] ? (size_t)((s->slots[i] * 0x9e3779b97f4a7c15ULL) >> 20) &
							 (nc - 1)
					       : 0;
			while (s->slots[i] && t[j])
				j = (j + 1) & (nc - 1);
			if (s->slots[i])
				t[j] = s->slots[i];
		}
		free(s->slots);
		s->slots = t;
		s->cap = nc;
	}
	size_t j = (size_t)((pc * 0x9e3779b97f4a7c15ULL) >> 20) & (s->cap - 1);
	for (; s->slots[j]; j = (j + 1) & (s->cap - 1))
		if (s->slots[j] == pc)
			return true;
	s->slots[j] = pc;
	s->n++;
	return true;
}

void profile_prefetch(const struct profile *p, struct procmaps *maps)
{
	struct prefetch_set set = { 0 };
	bool ok = maps != NULL;
	for (size_t i = 0; ok && i < p->nsamples; i++) {
		const struct stack *st = p->samples[i].stack;
		for (uint32_t j = 0; ok && st && j < st->npcs; j++)
			if (st->pcs[j] > 1 && st->pcs[j] != PROFILE_PC_TRUNCATED)
				ok = prefetch_add(&set, st->pcs[j] - 1); /* as profile_frame looks */
	}
	const struct mapping **ms = ok && set.n ? malloc(set.n * sizeof(*ms)) : NULL;
	size_t u = 0;
	for (size_t i = 0; ms && i < set.cap; i++)
		if (set.slots[i]) {
			set.slots[u] = set.slots[i]; /* compacted in place: u <= i */
			ms[u++] = procmaps_find(maps, set.slots[i]);
		}
	if (ms)
		symbolize_many(ms, set.slots, u);
	free(ms);
	free(set.slots);
}

/*
 * Whether the frame at return address pc lies in a function to trim: for the patterns, any
 * function of its inline chain counts, so an inlined allocator helper is trimmed with its
 * host; an operator new only as the physical function (the ELF symbol holding pc), so that
 * a function into which a replacement operator new was inlined stays.
 */
static bool trim_frame(struct procmaps *maps, uint64_t pc, char *const *patterns, size_t n)
{
	const struct mapping *m;
	struct sym_result r;
	if (profile_frame(maps, pc, &m, &r) == 0)
		return false;
	if (profile_is_operator_new(r.frames[r.nframes - 1].function))
		return true;
	for (int i = 0; i < r.nframes; i++)
		if (trim_match(r.frames[i].function, patterns, n))
			return true;
	return false;
}

int profile_trim(struct profile *p, struct procmaps *maps, char *const *patterns, size_t n)
{
	profile_prefetch(p, maps);
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct stack *st = p->samples[i].stack;
		if (!st)
			continue;
		uint32_t k = 0;
		while (k < st->npcs && trim_frame(maps, st->pcs[k], patterns, n))
			k++;
		if (k == 0 || k == st->npcs)
			continue;
		struct stack *t = calloc(1, sizeof(*t) + (st->npcs - k) * sizeof(uint64_t));
		struct stack **owned = realloc(p->owned, (p->nowned + 1) * sizeof(*owned));
		if (!t || !owned) {
			free(t);
			if (owned)
				p->owned = owned;
			return -ENOMEM;
		}
		p->owned = owned;
		p->owned[p->nowned++] = t;
		t->npcs = st->npcs - k;
		t->hash = st->hash;
		t->id = st->id;
		memcpy(t->pcs, st->pcs + k, t->npcs * sizeof(uint64_t));
		p->samples[i].stack = t;
	}
	return 0;
}

static uint64_t stack_hash(const struct stack *st)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	uint32_t n = st ? st->npcs : 0;
	for (uint32_t i = 0; i < n; i++) {
		h ^= st->pcs[i];
		h *= 0x100000001b3ULL;
		h ^= h >> 29;
	}
	return h ^ n;
}

static bool stack_equal(const struct stack *a, const struct stack *b)
{
	if (a == b)
		return true;
	uint32_t na = a ? a->npcs : 0, nb = b ? b->npcs : 0;
	if (na != nb)
		return false;
	return na == 0 || memcmp(a->pcs, b->pcs, na * sizeof(a->pcs[0])) == 0;
}

static uint64_t sample_key_hash(const struct psample *s, bool with_rate)
{
	uint64_t h = stack_hash(s->stack) ^ (s->size * 0x9e3779b97f4a7c15ULL);
	if (with_rate)
		h ^= s->rate * 0xc2b2ae3d27d4eb4fULL;
	return h ^ (h >> 31);
}

static uint64_t sub_clamp(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

int profile_subtract(struct profile *p, const struct profile *base)
{
	if (!base || base->nsamples == 0)
		return 0;
	size_t cap = 16;
	while (cap < base->nsamples * 2)
		cap *= 2;
	size_t *tab = malloc(cap * sizeof(*tab)); /* index + 1 into base->samples, 0 empty */
	if (!tab)
		return -ENOMEM;
	memset(tab, 0, cap * sizeof(*tab));
	for (size_t i = 0; i < base->nsamples; i++) {
		size_t j = sample_key_hash(&base->samples[i], true) & (cap - 1);
		while (tab[j])
			j = (j + 1) & (cap - 1);
		tab[j] = i + 1;
	}
	size_t w = 0;
	for (size_t i = 0; i < p->nsamples; i++) {
		struct psample *s = &p->samples[i];
		size_t j = sample_key_hash(s, true) & (cap - 1);
		for (; tab[j]; j = (j + 1) & (cap - 1)) {
			const struct psample *b = &base->samples[tab[j] - 1];
			if (b->size != s->size || b->rate != s->rate || !stack_equal(b->stack, s->stack))
				continue;
			/* Counters only grow, so each difference is what happened in between. */
			s->alloc_objects = sub_clamp(s->alloc_objects, b->alloc_objects);
			s->alloc_bytes = sub_clamp(s->alloc_bytes, b->alloc_bytes);
			s->free_objects = sub_clamp(s->free_objects, b->free_objects);
			s->free_bytes = sub_clamp(s->free_bytes, b->free_bytes);
			break;
		}
		if (s->alloc_objects | s->alloc_bytes | s->free_objects | s->free_bytes)
			p->samples[w++] = *s;
	}
	p->nsamples = w;
	free(tab);
	return 0;
}

/* ---- Helpers for the writers ---------------------------------------------------------- */

static int group_cmp(const struct psample *a, const struct psample *b)
{
	uint32_t na = a->stack ? a->stack->npcs : 0, nb = b->stack ? b->stack->npcs : 0;
	uint32_t n = na < nb ? na : nb;
	for (uint32_t i = 0; i < n; i++)
		if (a->stack->pcs[i] != b->stack->pcs[i])
			return a->stack->pcs[i] < b->stack->pcs[i] ? -1 : 1;
	if (na != nb)
		return na < nb ? -1 : 1;
	if (a->size != b->size)
		return a->size < b->size ? -1 : 1;
	if (a->rate != b->rate)
		return a->rate < b->rate ? -1 : 1;
	return 0;
}

/* qsort has no context argument in C11; merge sort over indices does the job. */
static void msort(size_t *v, size_t *tmp, size_t n, const struct psample *s)
{
	if (n < 2)
		return;
	size_t h = n / 2;
	msort(v, tmp, h, s);
	msort(v + h, tmp, n - h, s);
	size_t i = 0, j = h, k = 0;
	while (i < h && j < n)
		tmp[k++] = group_cmp(&s[v[j]], &s[v[i]]) < 0 ? v[j++] : v[i++];
	while (i < h)
		tmp[k++] = v[i++];
	while (j < n)
		tmp[k++] = v[j++];
	memcpy(v, tmp, n * sizeof(*v));
}

int profile_group(const struct profile *p, size_t **order_out, size_t **starts_out,
		  size_t *ngroups)
{
	size_t n = p->nsamples;
	size_t *order = malloc((n + 1) * sizeof(*order));
	size_t *tmp = malloc((n + 1) * sizeof(*tmp));
	size_t *starts = malloc((n + 1) * sizeof(*starts));
	if (!order || !tmp || !starts) {
		free(order);
		free(tmp);
		free(starts);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		order[i] = i;
	msort(order, tmp, n, p->samples);
	free(tmp);
	size_t g = 0;
	for (size_t i = 0; i < n; i++) {
		const struct psample *a = &p->samples[order[i]];
		if (i == 0) {
			starts[g++] = 0;
			continue;
		}
		const struct psample *b = &p->samples[order[i - 1]];
		if (a->size != b->size || !stack_equal(a->stack, b->stack))
			starts[g++] = i;
	}
	starts[g] = n;
	*order_out = order;
	*starts_out = starts;
	*ngroups = g;
	return 0;
}

bool profile_mixed_rates(const struct profile *p)
{
	if (p->meta.mixed_rates)
		return true;
	uint64_t seen = 0;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct psample *s = &p->samples[i];
		if (!(s->alloc_objects | s->free_objects))
			continue;
		if (seen && s->rate != seen)
			return true;
		seen = s->rate;
	}
	return false;
}

uint64_t profile_main_rate(const struct profile *p)
{
	/* A handful of distinct rates at most: a small linear table is enough. */
	struct {
		uint64_t rate, bytes;
	} t[16];
	size_t nt = 0;
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct psample *s = &p->samples[i];
		if (!(s->alloc_objects | s->free_objects))
			continue;
		size_t j = 0;
		while (j < nt && t[j].rate != s->rate)
			j++;
		if (j == nt) {
			if (nt == LLGO_ARRAY_SIZE(t))
				continue;
			t[nt].rate = s->rate;
			t[nt++].bytes = 0;
		}
		t[j].bytes += s->alloc_bytes + 1;
	}
	if (nt == 0)
		return p->meta.rate;
	size_t best = 0;
	for (size_t j = 1; j < nt; j++)
		if (t[j].bytes > t[best].bytes ||
		    (t[j].bytes == t[best].bytes && t[j].rate == p->meta.rate))
			best = j;
	return t[best].rate;
}

/* One line; the parts of dropped follow when any sample was dropped for a reason other than a
 * full ring (ring_full is the rest), and reconnects when the shim lost its daemon. */
int profile_accounting(struct buf *b, const struct profile *p)
{
	const struct profile_meta *m = &p->meta;
	int rc = buf_printf(b, "llgo-heap: sampled=%llu delivered=%llu dropped=%llu corrupt=%llu",
			    (unsigned long long)m->sampled, (unsigned long long)m->delivered,
			    (unsigned long long)m->dropped, (unsigned long long)m->corrupt);
	uint64_t parts = m->dropped_prior + m->dropped_no_ring + m->dropped_detached;
	if (rc == 0 && parts && parts <= m->dropped)
		rc = buf_printf(b, " (dropped: ring_full=%llu no_ring=%llu detached=%llu "
				   "earlier_daemon=%llu)",
				(unsigned long long)(m->dropped - parts),
				(unsigned long long)m->dropped_no_ring,
				(unsigned long long)m->dropped_detached,
				(unsigned long long)m->dropped_prior);
	if (rc == 0 && m->reconnects)
		rc = buf_printf(b, " reconnects=%llu", (unsigned long long)m->reconnects);
	/* llgo-heapd --verify-every: stacks compared with the kernel's (verify.c) */
	if (!rc && p->meta.verify_samples)
		rc = buf_printf(b, " verified=%llu agree=%llu",
				(unsigned long long)p->meta.verify_samples,
				(unsigned long long)p->meta.verify_agree);
	/* In-use accounting (inuse.c), only when there is something to say. */
	const struct inuse_counts *c = &p->meta.inuse_counts;
	if (!rc && p->meta.inuse == PROFILE_INUSE_UNTRACKED)
		rc = buf_puts(b, " frees=untracked");
	else if (!rc && p->meta.inuse == PROFILE_INUSE_TRACKED &&
		 (c->untracked | c->unmatched | c->pending | c->unscanned))
		rc = buf_printf(b, " untracked=%llu unmatched=%llu pending=%llu",
				(unsigned long long)c->untracked, (unsigned long long)c->unmatched,
				(unsigned long long)c->pending);
	if (!rc && p->meta.inuse == PROFILE_INUSE_TRACKED && c->unscanned)
		rc = buf_printf(b, " unscanned=%llu", (unsigned long long)c->unscanned);
	return rc;
}

void profile_comment_lines(struct buf *b, const struct profile *p)
{
	buf_puts(b, "# ");
	profile_accounting(b, p);
	buf_putc(b, '\n');
	size_t at = b->len;
	buf_puts(b, "# ");
	if (profile_unwind_line(b, p) > 0)
		buf_putc(b, '\n');
	else
		b->len = at;
	at = b->len;
	buf_puts(b, "# ");
	if (profile_peak_line(b, p) > 0)
		buf_putc(b, '\n');
	else
		b->len = at;
}

int profile_unwind_line(struct buf *b, const struct profile *p)
{
	if (p->meta.unwind_mode == LLGO_UNWIND_UNKNOWN && !p->meta.unwound)
		return 0;
	size_t before = b->len;
	buf_printf(b, "llgo-heap: unwind=%s unwound=%llu truncated=%llu",
			  unwind_mode_name(p->meta.unwind_mode),
			  (unsigned long long)p->meta.unwound,
			  (unsigned long long)p->meta.truncated);
	return b->failed ? -ENOMEM : (int)(b->len - before);
}

int profile_peak_line(struct buf *b, const struct profile *p)
{
	const struct profile_peak *k = &p->meta.peak;
	if (!k->on)
		return 0;
	size_t before = b->len;
	time_t t = (time_t)(p->meta.time_nanos / 1000000000ull);
	struct tm tm;
	char when[32] = "?";
	if (p->meta.time_nanos && gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	buf_printf(b, "llgo-heap: peak inuse_space=%llu inuse_objects=%llu at=%s.%03lluZ "
		      "after_attach=%llu.%03llus%s at_most=%llu scans=%llu",
		   (unsigned long long)k->bytes, (unsigned long long)k->objects, when,
		   (unsigned long long)(p->meta.time_nanos / 1000000ull % 1000),
		   (unsigned long long)(k->after_ns / 1000000000ull),
		   (unsigned long long)(k->after_ns / 1000000ull % 1000),
		   k->at_exit ? " (at exit)" : "", (unsigned long long)k->bound,
		   (unsigned long long)k->scans);
	return b->failed ? -ENOMEM : (int)(b->len - before);
}

void profile_addr_name(char *out, size_t n, const struct mapping *m, uint64_t addr)
{
	if (!m || !m->path || !m->path[0]) {
		snprintf(out, n, "0x%llx", (unsigned long long)addr);
		return;
	}
	const char *base = strrchr(m->path, '/');
	base = base ? base + 1 : m->path;
	snprintf(out, n, "%s+0x%llx", base, (unsigned long long)(addr - m->start + m->offset));
}
