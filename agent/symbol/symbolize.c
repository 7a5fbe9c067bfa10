// SPDX-License-Identifier: MIT
/*
 * symbolize.c: addresses to function names, files, lines and inline chains, as the daemon
 * serves them. The answers come from the sandboxed symbolizer process of the file's uid
 * (symhelper.c; how they are found: symbolizer/symparse.c) and are remembered here, by file
 * offset, for the life of the file (up to SYMBOLIZE_MEMO_MAX answers), so each address is
 * asked once. An address the helper could not answer (it failed, timed out or is being
 * restarted) is shown unsymbolized this time and asked again the next; one whose own
 * request made the helper fail is never asked again (a hostile file's poison), and a file
 * whose batch made it fail is asked one address at a time, so the poison is found.
 *
 * symbolize_many() asks for a whole profile's addresses first, in batches per file (one
 * exchange per SYMPROTO_BATCH_MAX addresses), so the writers' symbolize_pc() calls are served
 * from the memo.
 *
 * Ownership: the strings of an answer are copied from the helper's message (it is hostile:
 * lengths checked by symhelper.c, bytes kept as they are; the writers escape them on output)
 * into the file's string table, each distinct string once, valid while the symfile is
 * referenced. Left to others: the files and debug files (symfile.c), the helper
 * (symhelper.c), choosing which addresses to symbolize (the writers).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "symfile.h"
#include "../../shared/symproto.h"

/* Answers each file may remember; beyond that, lookups are asked again. */
#define SYMBOLIZE_MEMO_MAX (1u << 18)
/* Bytes of strings each file may keep; beyond that, answers needing new ones are dropped. */
#define SYMBOLIZE_STRINGS_MAX ((size_t)64 << 20)

/* ---- Memo ----------------------------------------------------------------------------- */

static size_t memo_slot(uint64_t key, size_t cap)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

static struct symfile_memo_entry *memo_find(const struct symfile_memo *m, uint64_t key)
{
	for (size_t i = m->cap ? memo_slot(key, m->cap) : 0; m->cap; i = (i + 1) & (m->cap - 1)) {
		struct symfile_memo_entry *e = m->slots[i];
		if (!e || e->key == key)
			return e;
	}
	return NULL;
}

/* Remember n frames under key; false when full or out of memory. */
static bool memo_insert(struct symfile_memo *m, uint64_t key, uint64_t entry_back, int n,
			const struct sym_frame *fr)
{
	if (m->n >= SYMBOLIZE_MEMO_MAX)
		return false;
	if ((m->n + 1) * 2 > m->cap) {
		size_t nc = m->cap ? m->cap * 2 : 256;
		struct symfile_memo_entry **t = calloc(nc, sizeof(*t));
		if (!t)
			return false;
		for (size_t i = 0; i < m->cap; i++) {
			struct symfile_memo_entry *o = m->slots[i];
			size_t j = o ? memo_slot(o->key, nc) : 0;
			while (o && t[j])
				j = (j + 1) & (nc - 1);
			if (o)
				t[j] = o;
		}
		free(m->slots);
		m->slots = t;
		m->cap = nc;
	}
	struct symfile_memo_entry *e = malloc(sizeof(*e) + (size_t)n * sizeof(*fr));
	if (!e)
		return false;
	e->key = key;
	e->entry_back = entry_back;
	e->nframes = n;
	if (n)
		memcpy(e->frames, fr, (size_t)n * sizeof(*fr));
	size_t j = memo_slot(key, m->cap);
	while (m->slots[j])
		j = (j + 1) & (m->cap - 1);
	m->slots[j] = e;
	m->n++;
	return true;
}

static void memo_free(struct symfile_memo *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i]);
	free(m->slots);
}

/* ---- Strings -------------------------------------------------------------------------- */

static uint64_t strings_hash(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
	return h;
}

/* The table's copy of p[0..n) (a NUL inside ends it, as C strings do), or NULL when full or
 * out of memory (f->lock held). */
static const char *strings_intern(struct symfile_strings *t, const char *p, size_t n)
{
	n = strnlen(p, n);
	if ((t->n + 1) * 2 > t->cap) {
		size_t nc = t->cap ? t->cap * 2 : 1024;
		char **s = calloc(nc, sizeof(*s));
		if (!s)
			return NULL;
		for (size_t i = 0; i < t->cap; i++) {
			size_t j = t->slots[i] ? strings_hash(t->slots[i], strlen(t->slots[i])) & (nc - 1)
					       : 0;
			while (t->slots[i] && s[j])
				j = (j + 1) & (nc - 1);
			if (t->slots[i])
				s[j] = t->slots[i];
		}
		free(t->slots);
		t->slots = s;
		t->cap = nc;
	}
	size_t j = strings_hash(p, n) & (t->cap - 1);
	for (; t->slots[j]; j = (j + 1) & (t->cap - 1))
		if (strncmp(t->slots[j], p, n) == 0 && t->slots[j][n] == '\0')
			return t->slots[j];
	if (t->bytes + n + 1 > SYMBOLIZE_STRINGS_MAX)
		return NULL;
	char *c = malloc(n + 1);
	if (!c)
		return NULL;
	memcpy(c, p, n);
	c[n] = '\0';
	t->slots[j] = c;
	t->n++;
	t->bytes += n + 1;
	return c;
}

void symbolize_forget(struct symfile *f)
{
	memo_free(&f->results);
	for (size_t i = 0; i < f->strings.cap; i++)
		free(f->strings.slots[i]);
	free(f->strings.slots);
}

/* ---- Answers -------------------------------------------------------------------------- */

struct symbolize_batch {
	struct symfile *f;
	const uint64_t *offs;
	struct sym_result *out; /* the one address's answer, or NULL */
	uint64_t pc;
};

/* One answer of the helper: kept as the file's strings, remembered, and given to b->out. */
static void symbolize_answer(void *arg, size_t i, int n, const struct symhelper_frame *hf,
			     uint64_t entry_back)
{
	struct symbolize_batch *b = arg;
	struct symfile *f = b->f;
	struct sym_frame fr[SYM_MAX_INLINE];
	if (n < 0 || n > SYM_MAX_INLINE)
		return;
	pthread_mutex_lock(&f->lock);
	bool ok = true;
	for (int k = 0; k < n && ok; k++) {
		fr[k] = (struct sym_frame){ NULL, NULL, hf[k].line, hf[k].start_line };
		if (hf[k].function)
			ok = (fr[k].function = strings_intern(&f->strings, hf[k].function,
							      hf[k].function_len)) != NULL;
		if (ok && hf[k].file)
			ok = (fr[k].file = strings_intern(&f->strings, hf[k].file,
							  hf[k].file_len)) != NULL;
	}
	if (ok && !memo_find(&f->results, b->offs[i]))
		memo_insert(&f->results, b->offs[i], entry_back, n, fr);
	pthread_mutex_unlock(&f->lock);
	if (ok && b->out) {
		b->out->nframes = n;
		memcpy(b->out->frames, fr, (size_t)n * sizeof(fr[0]));
		if (entry_back != UINT64_MAX && entry_back <= b->pc)
			b->out->entry = b->pc - entry_back;
	}
}

/* Ask f's helper about offs[0..n) (b->out, when set, gets the single answer), and keep the
 * file's flags. An address whose own request made the helper fail is remembered as having
 * no symbol (logged): it is never asked again. A batch that did is not told apart: its file
 * is asked one address at a time from then on. */
static void symbolize_ask(struct symfile *f, const uint64_t *offs, size_t n,
			  struct symbolize_batch *b)
{
	uint32_t flags = 0;
	b->f = f;
	b->offs = offs;
	int rc = symhelper_lookup(f, offs, n, symbolize_answer, b, &flags);
	pthread_mutex_lock(&f->lock);
	if (rc == -EIO && n > 1) {
		f->suspect = true;
	} else if (rc == -EIO && n == 1 && !memo_find(&f->results, offs[0]) &&
		   memo_insert(&f->results, offs[0], UINT64_MAX, 0, NULL)) {
		log_warn("symbolizer: %s at offset %#llx made the helper of uid %u fail: shown "
			 "unsymbolized from now on", f->path ? f->path : "(a file)",
			 (unsigned long long)offs[0], (unsigned)f->uid);
	}
	if (rc == 0) {
		f->flags_known = true;
		f->has_functions = flags & SYMPROTO_HAS_FUNCTIONS;
		f->has_filenames = flags & SYMPROTO_HAS_FILENAMES;
		f->has_lines = flags & SYMPROTO_HAS_LINES;
		f->has_inlines = flags & SYMPROTO_HAS_INLINES;
	} else if (rc == -ENOEXEC) {
		f->not_elf = f->flags_known = true;
	}
	pthread_mutex_unlock(&f->lock);
}

static void symbolize_flags(struct symfile *f, struct sym_result *out)
{
	out->has_functions = f->has_functions;
	out->has_filenames = f->has_filenames;
	out->has_lines = f->has_lines;
	out->has_inlines = f->has_inlines;
}

int symbolize_pc(const struct mapping *m, uint64_t pc, struct sym_result *out)
{
	memset(out, 0, sizeof(*out));
	if (!m || !m->file)
		return 0;
	struct symfile *f = m->file;
	struct symbolize_batch b = { .out = out, .pc = pc };
	pthread_mutex_lock(&f->lock);
	bool known = f->flags_known;
	pthread_mutex_unlock(&f->lock);
	/* Outside the mapping: nothing resolved, but the has_* flags say what the file can
	 * tell (the pprof writer asks this way for mappings without samples); the helper is
	 * asked only to open the file, which starts no debug file search. */
	if (pc < m->start || pc >= m->end) {
		b.out = NULL;
		if (!known)
			symbolize_ask(f, NULL, 0, &b);
		pthread_mutex_lock(&f->lock);
		symbolize_flags(f, out);
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	uint64_t off = pc - m->start + m->offset;
	pthread_mutex_lock(&f->lock);
	const struct symfile_memo_entry *e = memo_find(&f->results, off);
	bool ask = !e && !f->not_elf;
	if (e) {
		out->nframes = e->nframes;
		memcpy(out->frames, e->frames, (size_t)e->nframes * sizeof(e->frames[0]));
		if (e->entry_back != UINT64_MAX && e->entry_back <= pc)
			out->entry = pc - e->entry_back;
	}
	pthread_mutex_unlock(&f->lock);
	if (ask) {
		symbolize_ask(f, &off, 1, &b);
		pthread_mutex_lock(&f->lock);
		out->unavailable = !f->not_elf && !memo_find(&f->results, off) && out->nframes == 0;
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_lock(&f->lock);
	symbolize_flags(f, out);
	pthread_mutex_unlock(&f->lock);
	return out->nframes;
}

/* ---- Many addresses at once ----------------------------------------------------------- */

struct symbolize_want {
	struct symfile *f;
	uint64_t off;
};

static int want_cmp(const void *x, const void *y)
{
	const struct symbolize_want *a = x, *b = y;
	if (a->f != b->f)
		return (uintptr_t)a->f < (uintptr_t)b->f ? -1 : 1;
	return a->off < b->off ? -1 : a->off > b->off;
}

void symbolize_many(const struct mapping *const *maps, const uint64_t *pcs, size_t n)
{
	struct symbolize_want *w = n ? malloc(n * sizeof(*w)) : NULL;
	uint64_t *offs = w ? malloc(SYMPROTO_BATCH_MAX * sizeof(*offs)) : NULL;
	size_t k = 0;
	for (size_t i = 0; offs && i < n; i++) {
		const struct mapping *m = maps[i];
		if (m && m->file && pcs[i] >= m->start && pcs[i] < m->end)
			w[k++] = (struct symbolize_want){ m->file, pcs[i] - m->start + m->offset };
	}
	if (k > 1)
		qsort(w, k, sizeof(*w), want_cmp);
	for (size_t i = 0; i < k;) {
		struct symfile *f = w[i].f;
		size_t nq = 0;
		pthread_mutex_lock(&f->lock);
		bool skip = f->not_elf;
		size_t batch = f->suspect ? 1 : SYMPROTO_BATCH_MAX;
		pthread_mutex_unlock(&f->lock);
		for (; i < k && w[i].f == f; i++) {
			if (skip || (nq && offs[nq - 1] == w[i].off))
				continue;
			pthread_mutex_lock(&f->lock);
			bool have = memo_find(&f->results, w[i].off) != NULL;
			pthread_mutex_unlock(&f->lock);
			if (!have)
				offs[nq++] = w[i].off;
			if (nq == batch) {
				struct symbolize_batch b = { 0 };
				symbolize_ask(f, offs, nq, &b);
				nq = 0;
			}
		}
		if (nq) {
			struct symbolize_batch b = { 0 };
			symbolize_ask(f, offs, nq, &b);
		}
	}
	free(offs);
	free(w);
}
