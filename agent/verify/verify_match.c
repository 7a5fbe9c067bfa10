// SPDX-License-Identifier: MIT
/*
 * verify_match.c: pairing and comparing, for the eBPF cross-check (verify.c loads and
 * attaches). Both halves of a sample, the kernel's (from the BPF ring buffer thread,
 * verify_match_event) and the record's (from drain.c, verify_match_record), meet in a table
 * keyed by (ring id, seq); a pair is compared as soon as it is complete, and counted per
 * unwinding mode.
 *
 * Comparison, frame-pointer mode. The kernel's stack starts at the probe site, inside the
 * shim; its leading frames in the shim's own text are dropped (the executable mappings of
 * the file that holds the probe when that file is libllgoheap.so; the shim's function names
 * when the shim is linked into the program), then leading frames in the real C++ operator
 * new/new[] (plumbing the shim never records). The rest must equal the record's frames one
 * by one, and have the same length, except where one side was cut by its depth limit (the
 * record at LLGO_MAX_FRAMES, the kernel at its buffer or kernel.perf_event_max_stack): then
 * the shorter must be a prefix of the longer.
 *
 * Dwarf mode. A sample whose record carries a stack copy (ALLOC_RAW) is unwound by the drain
 * from the shim's copy; the kernel sends, instead of its frame-pointer walk, the registers at
 * the probe and its own copy of the stack (verify.bpf.c), which the ring buffer thread
 * unwinds with an unwinder and maps of the target's own, from the probe site through the
 * shim's frames. After trimming, both unwinds must give the same frames; lengths may differ
 * only where the shorter unwind was cut by the end of its copy. This checks the shim's copy
 * (registers, bytes, placement) against the kernel's, and the drain's unwinding state
 * against a fresh one; both use the same CFI and the same unwinder code.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verify_impl.h"

/* ---- comparison -------------------------------------------------------------------------- */

static bool verify_match_shim_name(const char *f)
{
	/* the shim's functions when it is linked into the program (libllgoheap.a) */
	static const char *const prefixes[] = { "probe_", "emit_", "sample_", "llgo_heap_sample",
						"stack_" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(prefixes); i++)
		if (strncmp(f, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

enum { VERIFY_PC_KNOWN = 1, VERIFY_PC_SHIM_NAME = 2, VERIFY_PC_CXX_NEW = 4 };

/* What the function holding address at is, by name: symbolized once per address (a small
 * direct-mapped cache per target: a busy process repeats a few call sites). Caller holds
 * t->lock. */
static uint8_t verify_match_pc_flags(struct verify_target *t, uint64_t at)
{
	struct verify_pcinfo *c = &t->pcache[(at ^ (at >> 12)) % VERIFY_PCACHE];
	if (c->flags && c->at == at)
		return c->flags;
	uint8_t flags = VERIFY_PC_KNOWN;
	const struct mapping *m;
	struct sym_result r;
	unsigned rd = procmaps_read_begin(t->s->maps);
	if (profile_frame(t->s->maps, at + 1, &m, &r) > 0) { /* profile_frame looks at pc - 1 */
		const char *f = r.frames[r.nframes - 1].function;
		if (f && verify_match_shim_name(f))
			flags |= VERIFY_PC_SHIM_NAME;
		if (f && (strncmp(f, "_Znwm", 5) == 0 || strncmp(f, "_Znam", 5) == 0 ||
			  strncmp(f, "operator new", 12) == 0))
			flags |= VERIFY_PC_CXX_NEW;
	}
	procmaps_read_end(t->s->maps, rd);
	if (r.unavailable)
		return flags; /* asked again next time */
	c->at = at;
	c->flags = flags;
	return flags;
}

static bool verify_match_is_shim(struct verify_target *t, uint64_t pc, bool first)
{
	/* frame 0 is the probe site itself, every other frame a return address */
	uint64_t at = first ? pc : pc - 1;
	if (!t->by_name) {
		for (size_t i = 0; i < t->nranges; i++)
			if (at >= t->lo[i] && at < t->hi[i])
				return true;
		return false;
	}
	return verify_match_pc_flags(t, at) & VERIFY_PC_SHIM_NAME;
}

static bool verify_match_is_cxx_new(struct verify_target *t, uint64_t pc)
{
	return verify_match_pc_flags(t, pc - 1) & VERIFY_PC_CXX_NEW;
}

/* Leading kernel frames that are not the program's: the shim's, then operator new's. */
static uint32_t verify_match_trim(struct verify_target *t, const uint64_t *k, uint32_t nk)
{
	uint32_t i = 0;
	while (i < nk && verify_match_is_shim(t, k[i], i == 0))
		i++;
	while (i < nk && verify_match_is_cxx_new(t, k[i]))
		i++;
	return i;
}

/* Whether the trimmed kernel stack k[0..nk) and the record's r[0..nr) are the same stack.
 * Lengths may differ only where the shorter side was cut: by its depth limit (frame-pointer
 * mode: the record at LLGO_MAX_FRAMES, the kernel's walk at its buffer or sysctl), or, in
 * dwarf mode, by the end of its stack copy (an unwind stated as truncated). */
static bool verify_match_same(struct verify_target *t, const struct verify_entry *ke,
			const uint64_t *k, uint32_t nk, const struct verify_entry *re)
{
	uint32_t nr = re->nframes, n = nk < nr ? nk : nr;
	if (memcmp(k, re->frames, 8u * n) != 0)
		return false;
	if (nk == nr)
		return true;
	if (re->mode == VERIFY_MODE_DWARF)
		return nk < nr ? ke->truncated : re->truncated;
	bool kernel_cut = ke->nframes >= t->v->max_stack;
	return (nr < nk && nr == LLGO_MAX_FRAMES) || (nk < nr && kernel_cut);
}

/* Caller holds t->lock. */
static void verify_match_compare(struct verify_target *t, const struct verify_entry *ke,
			   const struct verify_entry *re)
{
	uint32_t skip = verify_match_trim(t, ke->frames, ke->nframes);
	const uint64_t *k = ke->frames + skip;
	uint32_t nk = ke->nframes - skip, nr = re->nframes;
	struct llgo_verify_summary *w = &t->win.mode[re->mode];
	if (nk == 0 && nr > 0) {
		/* The kernel's walk ended inside the shim or the allocator: frameless code (e.g.
		 * libstdc++'s aligned operator new, which uses rbp as a plain register) broke the
		 * chain the shim bridges with its own frame. Nothing to compare. */
		if (t->window)
			w->incomparable++;
		return;
	}
	bool same = verify_match_same(t, ke, k, nk, re);
	uint64_t agree = same ? 1 : 0;
	atomic_fetch_add(&t->s->verify_samples, 1);
	atomic_fetch_add(&t->s->verify_agree, agree);
	if (!t->window)
		return;
	w->samples++;
	w->agree += agree;
	if (same || t->ndis >= VERIFY_KEEP_DISAGREE)
		return;
	struct verify_disagree *d = calloc(1, sizeof(*d));
	if (!d)
		return;
	d->ring_id = re->ring_id;
	d->mode = re->mode;
	d->seq = re->seq;
	d->size = re->size;
	d->nk = nk < UNWIND_MAX_FRAMES ? nk : UNWIND_MAX_FRAMES;
	d->nr = nr < UNWIND_MAX_FRAMES ? nr : UNWIND_MAX_FRAMES;
	d->trimmed = skip;
	memcpy(d->k, k, 8u * d->nk);
	memcpy(d->r, re->frames, 8u * d->nr);
	t->dis[t->ndis++] = d;
}

/* ---- the pairing table -------------------------------------------------------------------- */

static size_t verify_match_bucket(uint32_t ring_id, uint64_t seq)
{
	uint64_t h = (seq * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)ring_id * 0xc2b2ae3d27d4eb4fULL);
	return (size_t)(h >> 40) % VERIFY_BUCKETS;
}

static void verify_match_range(struct verify_target *t, uint32_t ring_id, uint64_t seq,
			      uint8_t side)
{
	if (ring_id >= LLGO_MAX_RINGS)
		return;
	if (ring_id >= t->nseqranges) {
		size_t n = t->nseqranges ? t->nseqranges : 16;
		while (n <= ring_id)
			n *= 2;
		struct verify_seqrange *r = realloc(t->ranges, n * sizeof(*r));
		if (!r)
			return;
		memset(r + t->nseqranges, 0, (n - t->nseqranges) * sizeof(*r));
		t->ranges = r;
		t->nseqranges = n;
	}
	struct verify_seqrange *r = &t->ranges[ring_id];
	uint64_t *lo = side == VERIFY_KERNEL ? &r->klo : &r->rlo;
	uint64_t *hi = side == VERIFY_KERNEL ? &r->khi : &r->rhi;
	if (*hi == 0 || seq < *lo)
		*lo = seq;
	if (seq > *hi)
		*hi = seq;
}

/* Pair e with its other half, or keep it waiting. Takes e. Caller holds t->lock. */
static void verify_match_offer(struct verify_target *t, struct verify_entry *e)
{
	size_t b = verify_match_bucket(e->ring_id, e->seq);
	for (struct verify_entry **pp = &t->table[b]; *pp; pp = &(*pp)->next) {
		struct verify_entry *o = *pp;
		if (o->ring_id != e->ring_id || o->seq != e->seq)
			continue;
		if (o->side == e->side) {
			/* a replayed seq (a hostile or restarted ring): keep the first */
			free(e);
			return;
		}
		*pp = o->next;
		t->pending--;
		if (e->side == VERIFY_KERNEL)
			verify_match_compare(t, e, o);
		else
			verify_match_compare(t, o, e);
		free(o);
		free(e);
		return;
	}
	if (t->pending >= VERIFY_MAX_PENDING) {
		/* Full: a record past its ring's last capture is one pushed after the capture
		 * window (the uprobe is slow to go away); anything else is lost for the count. */
		const struct verify_seqrange *r =
			e->ring_id < t->nseqranges ? &t->ranges[e->ring_id] : NULL;
		if (e->side == VERIFY_RECORD && r && e->seq > r->khi) {
			if (t->window)
				t->win.mode[e->mode].outside++;
		} else {
			t->overflow++;
		}
		free(e);
		return;
	}
	e->next = t->table[b];
	t->table[b] = e;
	t->pending++;
}

static struct verify_entry *verify_match_entry(uint32_t ring_id, uint64_t seq, uint8_t side,
					     uint8_t mode, uint64_t size, const uint64_t *frames,
					     uint32_t n)
{
	struct verify_entry *e = malloc(sizeof(*e) + 8u * n);
	if (!e)
		return NULL;
	e->next = NULL;
	e->ring_id = ring_id;
	e->seq = seq;
	e->side = side;
	e->mode = mode;
	e->truncated = false;
	e->size = size;
	e->when_ns = verify_now();
	e->nframes = n;
	memcpy(e->frames, frames, 8u * n);
	return e;
}

void verify_match_record(struct verify_target *t, uint32_t ring_id, const struct llgo_record *rec,
			const uint64_t *frames, uint32_t n, bool truncated)
{
	uint32_t every = atomic_load_explicit(&t->every, memory_order_relaxed);
	if (every > 1 && rec->seq % every != 0)
		return;
	if (n > UNWIND_MAX_FRAMES)
		n = UNWIND_MAX_FRAMES;
	uint8_t mode = rec->kind == LLGO_REC_ALLOC_RAW ? VERIFY_MODE_DWARF : VERIFY_MODE_FP;
	struct verify_entry *e = verify_match_entry(ring_id, rec->seq, VERIFY_RECORD, mode,
						  rec->size, frames, n);
	if (e)
		e->truncated = truncated;
	pthread_mutex_lock(&t->lock);
	/* Once the window has closed (the link is gone and the reader has read every capture),
	 * a record after its ring's last capture was pushed after the window. */
	const struct verify_seqrange *r = ring_id < t->nseqranges ? &t->ranges[ring_id] : NULL;
	if (t->closing && (!r || !r->khi || rec->seq > r->khi)) {
		if (t->window)
			t->win.mode[mode].outside++;
		pthread_mutex_unlock(&t->lock);
		free(e);
		return;
	}
	verify_match_range(t, ring_id, rec->seq, VERIFY_RECORD);
	if (e)
		verify_match_offer(t, e);
	else
		t->overflow++;
	pthread_mutex_unlock(&t->lock);
}

/* Drop what waits; count it when a window is open (final: the window closes). Caller holds
 * t->lock. older_than == 0: everything. */
void verify_match_flush(struct verify_target *t, uint64_t older_than, bool count)
{
	for (size_t b = 0; b < VERIFY_BUCKETS; b++) {
		for (struct verify_entry **pp = &t->table[b]; *pp;) {
			struct verify_entry *e = *pp;
			if (older_than && e->when_ns >= older_than) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			t->pending--;
			if (count) {
				/* inside the window when the other side saw seqs on both sides
				 * of this one on the same ring */
				const struct verify_seqrange *r =
					e->ring_id < t->nseqranges ? &t->ranges[e->ring_id] : NULL;
				bool k = e->side == VERIFY_KERNEL;
				uint64_t lo = r ? (k ? r->rlo : r->klo) : 0;
				uint64_t hi = r ? (k ? r->rhi : r->khi) : 0;
				struct llgo_verify_summary *w = &t->win.mode[e->mode];
				if (!hi || e->seq < lo || e->seq > hi)
					w->outside++;
				else if (k)
					w->kernel_unmatched++;
				else
					w->record_unmatched++;
			}
			free(e);
		}
	}
}

/* The kernel's walk of a frame-pointer sample, as an entry (NULL: no memory). The event is
 * read in place: the ring buffer's consumer pages are read-only, the kernel does not write a
 * submitted record again; only the frames it holds are taken. */
static struct verify_entry *verify_match_stack(const void *data, size_t len)
{
	const size_t head = offsetof(struct llgo_verify_event, frames);
	struct llgo_verify_event ev;
	memcpy(&ev, data, head);
	uint32_t n = (uint32_t)ev.stack_len / 8u;
	if (n > (len - head) / 8u)
		n = (uint32_t)((len - head) / 8u);
	if (n > LLGO_VERIFY_MAX_FRAMES)
		n = LLGO_VERIFY_MAX_FRAMES;
	return verify_match_entry(ev.h.ring_id, ev.h.seq, VERIFY_KERNEL, VERIFY_MODE_FP, ev.h.size,
				(const uint64_t *)(const void *)((const unsigned char *)data + head),
				n);
}

/*
 * The kernel's copy of a dwarf sample's stack, unwound here with an unwinder and maps of the
 * target's own (the drain's are its record side's: the two unwinds share only the files'
 * CFI). Frame 0 is the probe site, as in the kernel's walk. NULL when the copy is unusable
 * (counted as a kernel error) or on no memory (*nomem). Caller: the ring buffer thread, the
 * only user of t->copy_unwind and t->copy_maps.
 */
static struct verify_entry *verify_match_copy(struct verify_target *t, const void *data,
					      size_t len, bool *nomem)
{
	const struct llgo_verify_copy *c = data;
	*nomem = false;
	if (len < sizeof(*c) || c->copy_len > LLGO_VERIFY_COPY_BYTES || c->sp < c->copy_lo ||
	    c->sp - c->copy_lo >= c->copy_len)
		return NULL;
	/* what is read of the process as root is bracketed by its identity checks, as the
	 * session's own reads are (a pid reused, a setuid exec) */
	if (!session_may_read(t->s))
		return NULL;
	if (!t->copy_maps) {
		t->copy_maps = procmaps_new_as(t->pid, t->s->uid);
		t->copy_unwind = t->copy_maps ? session_new_unwind(t->s, false) : NULL;
		if (!t->copy_unwind) {
			procmaps_free(t->copy_maps);
			t->copy_maps = NULL;
			*nomem = true;
			return NULL;
		}
	}
	struct llgo_raw_regs regs;
	memset(&regs, 0, sizeof(regs));
	regs.ip = c->ip;
	regs.sp = c->sp;
	regs.bp = c->bp;
	regs.stack_len = (uint32_t)((c->copy_lo + c->copy_len - c->sp) & ~(uint64_t)7);
	const unsigned char *stack = c->copy + (c->sp - c->copy_lo);
	uint64_t pcs[UNWIND_MAX_FRAMES];
	bool truncated, unknown;
	uint32_t n = unwind_stack(t->copy_unwind, t->copy_maps, &regs, stack, NULL, 0, pcs,
				  UNWIND_MAX_FRAMES, &truncated, &unknown);
	if (unknown && procmaps_refresh(t->copy_maps, t->pid) == 0) /* a library loaded since */
		n = unwind_stack(t->copy_unwind, t->copy_maps, &regs, stack, NULL, 0, pcs,
				 UNWIND_MAX_FRAMES, &truncated, &unknown);
	if (!session_may_have_read(t->s))
		return NULL;
	struct verify_entry *e = verify_match_entry(c->h.ring_id, c->h.seq, VERIFY_KERNEL,
						  VERIFY_MODE_DWARF, c->h.size, pcs, n);
	if (!e)
		*nomem = true;
	else
		e->truncated = truncated;
	return e;
}

/* The reader read an event charged to a share (its head): the bytes go back (verify.c
 * hands the shares out and back). */
static void verify_match_share_read(struct verifier *v, const struct llgo_verify_head *h)
{
	if (!v->shares || !h->charge || h->share == LLGO_VERIFY_SHARE_ALL ||
	    h->share >= LLGO_VERIFY_SHARES)
		return;
	/* the program reads these with plain loads: a late update only holds a user back */
	__atomic_fetch_add(&v->shares[h->share].read, h->charge, __ATOMIC_RELAXED);
	__atomic_fetch_add(&v->shares[LLGO_VERIFY_SHARE_ALL].read, h->charge, __ATOMIC_RELAXED);
}

int verify_match_event(void *ctx, void *data, size_t len)
{
	struct verifier *v = ctx;
	struct llgo_verify_head h;
	if (len < sizeof(h))
		return 0;
	memcpy(&h, data, sizeof(h));
	verify_match_share_read(v, &h); /* read: its bytes are its user's again */
	if (len < offsetof(struct llgo_verify_event, frames))
		return 0;
	pthread_mutex_lock(&v->lock);
	struct verify_target *t = v->targets;
	while (t && t->pid != (pid_t)h.tgid)
		t = t->next;
	if (!t) {
		pthread_mutex_unlock(&v->lock);
		return 0;
	}
	/* the dwarf unwind runs before t->lock: records keep pairing meanwhile */
	bool copy = h.kind == LLGO_VERIFY_EV_COPY, nomem = false;
	struct verify_entry *e = NULL;
	int32_t stack_len = 0;
	if (copy) {
		e = verify_match_copy(t, data, len, &nomem);
	} else if (h.kind == LLGO_VERIFY_EV_STACK) {
		memcpy(&stack_len, (const unsigned char *)data +
				   offsetof(struct llgo_verify_event, stack_len),
		       sizeof(stack_len));
		if (stack_len >= 0 && !(e = verify_match_stack(data, len)))
			nomem = true;
	}
	pthread_mutex_lock(&t->lock);
	uint8_t mode = copy ? VERIFY_MODE_DWARF : VERIFY_MODE_FP;
	if (e) {
		verify_match_range(t, h.ring_id, h.seq, VERIFY_KERNEL);
		verify_match_offer(t, e);
	} else if (nomem) {
		t->overflow++;
	} else if (t->window) {
		t->win.mode[mode].kernel_errors++; /* unreadable stack, or an unknown kind */
	}
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_unlock(&v->lock);
	return 0;
}

