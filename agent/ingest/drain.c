// SPDX-License-Identifier: MIT
/*
 * drain.c: moves records from a session's rings into its bucket table, and the drain thread
 * that does so for every live session.
 *
 * One consumer per ring: every drain of a session runs under session->drain_lock, whoever
 * calls it (the drain thread, a snapshot worker, the final drain at exit). ring.c copies and
 * validates each record; here a valid ALLOC record becomes bucket_table_add(frames, size,
 * rate). When a new stack holds a pc outside every known mapping (a library dlopen'ed after
 * the last read of /proc/PID/maps), the maps are re-read, at most every DRAIN_REFRESH_MS per
 * session; a refresh skipped by that limit stays pending (maps_stale) for the next drain or
 * snapshot.
 *
 * Polling. The drain thread sleeps DRAIN_POLL_MIN_NS after a pass that drained an eighth
 * of some ring (DRAIN_FILL_BUSY) and doubles its sleep after any other pass, up to
 * DRAIN_POLL_MAX_NS: an idle daemon wakes ten times a second, and a steady light load is
 * drained in passes of about a sixteenth to an eighth of its fullest ring. A busy ring is
 * kept from filling by its WAKE at half full, not by the poll: a shorter poll costs a sleep,
 * a wake-up and a visit of every session for a few records (design.md). Under pgbench -S,
 * with 10 backends each sending a few hundred stack copies a second, the 10 ms poll of any
 * pass with records had the drain thread visit every session a hundred times a second.
 * drain_wake (a new ring, a WAKE) ends the sleep at once. A snapshot never waits for the thread: it calls drain_session itself; nor does
 * the thread wait for a snapshot, which holds the drain lock only for its cut (snapshot.c).
 * Each pass also keeps the bound of the peak view (peak.c) and wakes the peak thread
 * (peak_thread.c, through the waker drain_on_peak gave) when a session asks for a scan.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../shared/live.h"
#include "drain.h"
#include "rawmemo.h"
#include "../verify/verify.h"
#include "wthread.h"

#define DRAIN_POLL_MIN_NS 10000000ull   /* 10 ms */
#define DRAIN_POLL_MAX_NS 100000000ull  /* 100 ms */
/* A pass that drained this share of some ring (in 1/1024ths) keeps the poll short. */
#define DRAIN_FILL_BUSY 128u
#define DRAIN_REFRESH_MS 100u
#define DRAIN_UNWIND_REFRESH_MS 10u

struct drain {
	struct session_registry *reg;
	/* drain_on_peak: who makes the scans a pass asks for (the peak thread); NULL: none */
	void (*peak_wake)(void *arg);
	void *peak_arg;
	struct wthread w;
};

struct drain_ctx {
	struct session *s;
	struct ring_reader *reader; /* the ring being drained */
	uint32_t ring_id; /* of the ring being drained */
	size_t records;
	bool unknown_pc;
	uint64_t pcs[UNWIND_MAX_FRAMES]; /* an unwound stack */
	struct unwind_reads reads;       /* the words its unwind read (rawmemo.h) */
};

/* What drain_unwind tells the memo of stack copies. */
struct drain_unwound {
	bool memo;    /* the stack may be kept (whole, every pc known, one unwind, logged) */
	bool learned; /* unwind_learn has nothing more to learn from it */
	uint64_t epoch;
};

/* LLGO_HEAP_UNWIND_MEMO in the daemon's environment: "0" no memo of stack copies, "check"
 * every hit unwound again and compared (differences logged and counted, the unwind kept),
 * else on. Read once, by drain_new, before any drain. */
enum { DRAIN_RAWMEMO_ON, DRAIN_RAWMEMO_OFF, DRAIN_RAWMEMO_CHECK };
static int drain_rawmemo_mode = DRAIN_RAWMEMO_ON;

/* ---- one session ------------------------------------------------------------------------ */

static void drain_refresh_locked(struct session *s, bool force);

/* An ALLOC_RAW record's stack, unwound (unwind.c) into ctx->pcs; a stack that did not reach
 * the thread's start ends in PROFILE_PC_TRUNCATED. */
/* Whether pc lies in the preloaded shim (libllgoheap*.so): its wrappers (pthread_create, a
 * thread's start) sit between the program's frames in an unwound stack and are never the
 * program's code. */
static bool drain_in_shim(struct session *s, uint64_t pc)
{
	const struct mapping *m = s->maps ? procmaps_find(s->maps, pc - 1) : NULL;
	if (!m || !m->path)
		return false;
	const char *base = strrchr(m->path, '/');
	base = base ? base + 1 : m->path;
	return strncmp(base, "libllgoheap", 11) == 0;
}

/* Drop the shim's frames from the inside of an unwound stack (not frame 0: a stack that is
 * only the shim's stays as it is, as stack_trim does in the shim). */
static uint32_t drain_drop_shim_frames(struct session *s, uint64_t *pcs, uint32_t n)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (i == 0 || pcs[i] == PROFILE_PC_TRUNCATED || !drain_in_shim(s, pcs[i]))
			pcs[k++] = pcs[i];
	return k;
}

/* A session taken back by adopt.c learns its mode from the HELLO that joins it, on a
 * worker thread while this one drains: set once, read relaxed. */
static uint32_t drain_unwind_mode(struct session *s)
{
	return __atomic_load_n(&s->unwind_mode, __ATOMIC_RELAXED);
}

/* An ALLOC_RAW record's registers (they follow its frames) and its stack bytes after them. */
static const unsigned char *drain_raw_regs(const struct llgo_record *rec, const uint64_t *frames,
					   struct llgo_raw_regs *regs)
{
	const unsigned char *raw = (const unsigned char *)(frames + rec->nframes);
	memcpy(regs, raw, sizeof(*regs));
	return raw + sizeof(*regs);
}

static uint32_t drain_unwind(struct drain_ctx *ctx, const struct llgo_record *rec,
			     const uint64_t *frames, struct drain_unwound *how)
{
	struct session *s = ctx->s;
	const unsigned char *raw = (const unsigned char *)(frames + rec->nframes);
	struct llgo_raw_regs regs;
	memcpy(&regs, raw, sizeof(regs));
	if (!s->unwind)
		s->unwind = session_new_unwind(s, drain_unwind_mode(s) == LLGO_UNWIND_AUTO);
	bool truncated = true, unknown = false;
	how->epoch = unwind_epoch(s->unwind);
	how->learned = false;
	uint32_t n = unwind_stack_logged(s->unwind, s->maps, &regs, raw + sizeof(regs), frames,
					 rec->nframes, ctx->pcs, UNWIND_MAX_FRAMES - 1, &truncated,
					 &unknown, &ctx->reads);
	how->memo = s->unwind && !unknown && !truncated && how->epoch == unwind_epoch(s->unwind);
	/* A pc in no known mapping: a library loaded since the maps were read (dlopen). The
	 * unwind needs its CFI now, so the maps are re-read at once (at most every
	 * DRAIN_UNWIND_REFRESH_MS: code that is in no file, a JIT's, would ask every time). */
	uint64_t now = session_now_ns(CLOCK_MONOTONIC);
	if (unknown && s->maps && session_is_live(s) &&
	    now - s->last_refresh_ns >= DRAIN_UNWIND_REFRESH_MS * 1000000ull) {
		drain_refresh_locked(s, true);
		n = unwind_stack(s->unwind, s->maps, &regs, raw + sizeof(regs), frames,
				 rec->nframes, ctx->pcs, UNWIND_MAX_FRAMES - 1, &truncated, &unknown);
		how->memo = false;
	}
	atomic_fetch_add_explicit(&s->unwound, 1, memory_order_relaxed);
	if (truncated && n <= 1 && rec->nframes > 1) {
		/* The unwinder could not even start (the allocating code's object has no unwind
		 * tables it reads: a static executable without .eh_frame_hdr): the frame-pointer
		 * walk the shim recorded is the better stack. Still stated as truncated, unless it
		 * ends at _start or a thread's start as a whole walk does (its last pc is where a
		 * walk stops). */
		memcpy(ctx->pcs, frames, rec->nframes * sizeof(frames[0]));
		n = rec->nframes;
		truncated = !unwind_is_start(s->maps, ctx->pcs[n - 1]);
		how->memo = false;
	}
	n = drain_drop_shim_frames(s, ctx->pcs, n);
	/* A stack that ends where stacks start is whole, whatever stopped the unwinder there
	 * (a thread library without CFI for its start, in a static executable). */
	if (truncated && n > 1 && unwind_is_start(s->maps, ctx->pcs[n - 1]))
		truncated = false;
	if (!truncated && drain_unwind_mode(s) == LLGO_UNWIND_AUTO) {
		how->learned = unwind_learn(s->unwind, ctx->pcs, n);
		/* a root just became trusted: tell the shim now, not after this whole pass (a
		 * pass over many threads' copies can be long, and they copy until told); a no-op
		 * unless the tables changed */
		session_send_fp_tables(s);
	} else if (!truncated) {
		how->learned = true; /* nothing is learned outside auto mode */
	}
	if (truncated) {
		ctx->pcs[n++] = PROFILE_PC_TRUNCATED;
		atomic_fetch_add_explicit(&s->truncated, 1, memory_order_relaxed);
		how->memo = false;
	}
	return n;
}

/* One more record counted from ctx's session: size bytes at rate. */
static inline void drain_counted(struct drain_ctx *ctx, uint64_t size, uint64_t rate)
{
	struct session *s = ctx->s;
	ctx->records++;
	s->records++;
	peak_note(s, size, rate);
	if (s->first_rate == 0)
		s->first_rate = rate;
	else if (rate != s->first_rate)
		s->mixed_rates = true;
	s->last_rate = rate;
}

/*
 * The memo: a thread that allocates in a loop sends the same stack, size and rate record after
 * record (at rate 1, millions of times), and each went through the same steps: the stack
 * completed from the learned roots, hashed and found in the bucket table, two in-use keys
 * hashed and the note found. So each ring remembers what its last plain ALLOC record (no
 * stack copy, no NO_COPY flag, no verify run) became: the bucket it was counted in, whether a
 * [truncated] frame was added, whether its in-use note was settled per stack. A record equal
 * to it in flags, frames, size and rate is counted in that bucket directly, as long as
 * nothing that decided the outcome changed: the maps (procmaps_version), the roots
 * unwind_complete uses (unwind_roots_gen) and the stack notes (stacks_gen). Buckets live as
 * long as the table.
 */
static bool drain_memo_hit(struct drain_ctx *ctx, const struct llgo_record *rec,
			   const uint64_t *frames)
{
	struct session *s = ctx->s;
	const struct ring_memo *m = &ctx->reader->memo;
	if (!m->valid || rec->kind != LLGO_REC_ALLOC || rec->flags != m->flags ||
	    rec->nframes != m->nframes || rec->size != m->size || rec->rate != m->rate ||
	    memcmp(frames, m->frames, (size_t)rec->nframes * sizeof(frames[0])) != 0 ||
	    m->maps_version != (s->maps ? procmaps_version(s->maps) : 0) ||
	    m->roots_gen != unwind_roots_gen(s->unwind) || m->stacks_gen != s->stacks_gen)
		return false;
	bucket_table_count(s->buckets, m->bucket, rec->size);
	if (m->truncated)
		atomic_fetch_add_explicit(&s->truncated, 1, memory_order_relaxed);
	if (!m->noted) {
		uint64_t shim_key = llgo_live_key(frames, rec->nframes, rec->size, rec->rate);
		inuse_note_record_locked(s, ctx->ring_id, rec->seq, shim_key, m->bucket_key, true);
	}
	return true;
}

static void drain_memo_set(struct drain_ctx *ctx, const struct llgo_record *rec,
			   const uint64_t *frames, struct bucket *b, bool truncated, bool noted,
			   uint64_t bucket_key)
{
	struct session *s = ctx->s;
	struct ring_memo *m = &ctx->reader->memo;
	m->valid = b && rec->kind == LLGO_REC_ALLOC && !(rec->flags & LLGO_REC_FLAG_NO_COPY) &&
		   !s->verify && rec->nframes <= LLGO_MAX_FRAMES;
	if (!m->valid)
		return;
	m->truncated = truncated;
	m->noted = noted;
	m->bucket_key = bucket_key;
	m->flags = rec->flags;
	m->nframes = rec->nframes;
	m->size = rec->size;
	m->rate = rec->rate;
	m->maps_version = s->maps ? procmaps_version(s->maps) : 0;
	m->roots_gen = unwind_roots_gen(s->unwind);
	m->stacks_gen = s->stacks_gen;
	m->bucket = b;
	memcpy(m->frames, frames, (size_t)rec->nframes * sizeof(frames[0]));
}

/* The memo entry an ALLOC_RAW record's copy would unwind like (rawmemo.h), or NULL. */
static struct rawmemo_entry *drain_rawmemo_find(struct drain_ctx *ctx,
						const struct llgo_record *rec,
						const uint64_t *frames)
{
	struct session *s = ctx->s;
	if (s->verify || drain_rawmemo_mode == DRAIN_RAWMEMO_OFF || !ctx->reader->rawmemo ||
	    !s->unwind)
		return NULL;
	struct llgo_raw_regs regs;
	const unsigned char *stack = drain_raw_regs(rec, frames, &regs);
	return rawmemo_find(ctx->reader->rawmemo, &regs, stack, frames, rec->nframes,
			    s->maps ? procmaps_version(s->maps) : 0, unwind_epoch(s->unwind));
}

/* Count an ALLOC_RAW record as the unwind e kept: what drain_record does after its unwind. */
static void drain_rawmemo_count(struct drain_ctx *ctx, const struct llgo_record *rec,
				const uint64_t *frames, struct rawmemo_entry *e)
{
	struct session *s = ctx->s;
	atomic_fetch_add_explicit(&s->unwound, 1, memory_order_relaxed);
	unwind_count_memo(s->unwind, false, false);
	if (!e->learned && drain_unwind_mode(s) == LLGO_UNWIND_AUTO) {
		e->learned = unwind_learn(s->unwind, e->pcs, e->npcs);
		session_send_fp_tables(s);
	}
	if (e->bucket && rec->size == e->size && rec->rate == e->rate) {
		bucket_table_count(s->buckets, e->bucket, rec->size);
	} else {
		struct bucket *b;
		if (bucket_table_add_at(s->buckets, e->pcs, e->npcs, rec->size, rec->rate, &b) < 0) {
			s->bucket_errors++;
			return;
		}
		e->bucket = b;
		e->size = rec->size;
		e->rate = rec->rate;
		e->bucket_key = llgo_live_key(e->pcs, e->npcs, rec->size, rec->rate);
		e->shim_key = llgo_live_key(frames, rec->nframes, rec->size, rec->rate);
	}
	inuse_note_record_locked(s, ctx->ring_id, rec->seq, e->shim_key, e->bucket_key, false);
	drain_counted(ctx, rec->size, rec->rate);
}

static void drain_record(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	struct drain_ctx *ctx = arg;
	struct session *s = ctx->s;
	if (rec->kind != LLGO_REC_ALLOC && rec->kind != LLGO_REC_ALLOC_RAW)
		return; /* FREE is reserved; ring.c counts what it hands us */
	/* llgo-heap verify: the kernel's capture of this sample may come; a stack copy is
	 * compared as unwound (below) */
	if (s->verify && rec->kind == LLGO_REC_ALLOC)
		verify_match_record(s->verify, ctx->ring_id, rec, frames, rec->nframes, false);
	uint64_t rate = rec->rate;
	if (atomic_load_explicit(&s->buckets_over, memory_order_relaxed)) {
		/* its uid is over its bucket memory budget (budget.c): degraded, counted */
		atomic_fetch_add_explicit(&s->budget_dropped, 1, memory_order_relaxed);
		return;
	}
	if (!s->verify && drain_memo_hit(ctx, rec, frames)) {
		drain_counted(ctx, rec->size, rate);
		return;
	}
	uint32_t npcs = rec->nframes;
	const uint64_t *shim_frames = frames;
	bool truncated = false;
	struct drain_unwound how = { .memo = false };
	if (rec->kind == LLGO_REC_ALLOC_RAW) {
		struct rawmemo_entry *e = drain_rawmemo_find(ctx, rec, frames);
		if (e && drain_rawmemo_mode != DRAIN_RAWMEMO_CHECK) {
			drain_rawmemo_count(ctx, rec, frames, e);
			return;
		}
		npcs = drain_unwind(ctx, rec, frames, &how);
		if (e)
			unwind_count_memo(s->unwind, true,
					  e->npcs != npcs || memcmp(e->pcs, ctx->pcs,
								   npcs * sizeof(ctx->pcs[0])) != 0);
		frames = ctx->pcs;
		if (s->verify) {
			bool cut = npcs && frames[npcs - 1] == PROFILE_PC_TRUNCATED;
			verify_match_record(s->verify, ctx->ring_id, rec, frames, npcs - cut, cut);
		}
	} else if (drain_unwind_mode(s) == LLGO_UNWIND_AUTO || (rec->flags & LLGO_REC_FLAG_NO_COPY)) {
		/* A trusted frame-pointer walk ends at a root: the rest of the stack is known. A
		 * walk that wanted a copy and got none is stated as truncated unless it ends at
		 * such a root too. */
		memcpy(ctx->pcs, frames, npcs * sizeof(frames[0]));
		uint32_t n = unwind_complete(s->unwind, ctx->pcs, npcs, UNWIND_MAX_FRAMES - 1);
		if (n == npcs && (rec->flags & LLGO_REC_FLAG_NO_COPY) &&
		    !(n > 1 && unwind_is_start(s->maps, ctx->pcs[n - 1]))) {
			ctx->pcs[n++] = PROFILE_PC_TRUNCATED;
			atomic_fetch_add_explicit(&s->truncated, 1, memory_order_relaxed);
			truncated = true;
		}
		npcs = n;
		frames = ctx->pcs;
	}
	struct bucket *b;
	int r = bucket_table_add_at(s->buckets, frames, npcs, rec->size, rate, &b);
	if (r < 0) {
		s->bucket_errors++;
		return;
	}
	/* in-use: the shim keyed its live entry by the stack it walked; this bucket's differs */
	bool noted = true;
	uint64_t bucket_key = 0;
	if (frames != shim_frames) {
		bucket_key = llgo_live_key(frames, npcs, rec->size, rate);
		noted = inuse_note_record_locked(
			s, ctx->ring_id, rec->seq,
			llgo_live_key(shim_frames, rec->nframes, rec->size, rate), bucket_key,
			rec->kind != LLGO_REC_ALLOC_RAW);
	}
	drain_memo_set(ctx, rec, shim_frames, b, truncated, noted, bucket_key);
	if (how.memo && !s->verify && drain_rawmemo_mode != DRAIN_RAWMEMO_OFF) {
		struct llgo_raw_regs regs;
		drain_raw_regs(rec, shim_frames, &regs);
		struct rawmemo_entry *e = rawmemo_put(
			&ctx->reader->rawmemo, &regs, shim_frames, rec->nframes, &ctx->reads, frames,
			npcs, how.learned, s->maps ? procmaps_version(s->maps) : 0, how.epoch);
		if (e) {
			e->bucket = b;
			e->size = rec->size;
			e->rate = rate;
			e->bucket_key = bucket_key;
			e->shim_key = llgo_live_key(shim_frames, rec->nframes, rec->size, rate);
		}
	}
	drain_counted(ctx, rec->size, rate);
	/* Only a stack new to the table can hold a pc we have not checked yet. */
	if (r == 1 && s->maps && !ctx->unknown_pc) {
		for (uint32_t i = 0; i < npcs; i++) {
			if (frames[i] != PROFILE_PC_TRUNCATED && !procmaps_find(s->maps, frames[i])) {
				ctx->unknown_pc = true;
				break;
			}
		}
	}
}

static void drain_refresh_locked(struct session *s, bool force)
{
	if (!s->maps || !session_is_live(s))
		return;
	if (!force && !s->maps_stale)
		return;
	uint64_t now = session_now_ns(CLOCK_MONOTONIC);
	if (!force && s->last_refresh_ns &&
	    now - s->last_refresh_ns < DRAIN_REFRESH_MS * 1000000ull)
		return;
	s->last_refresh_ns = now;
	/* A reused pid, or a setuid exec, would give us maps its owner may not read: checked
	 * before and after (after: the session is then shown to root only). */
	if (!session_may_read(s))
		return;
	procmaps_refresh(s->maps, s->pid);
	session_may_read(s);
	s->maps_stale = false;
}

/* *fill (when not NULL): the largest share of a ring the pass drained, in 1/1024ths. */
static size_t drain_session_locked(struct session *s, uint32_t *fill)
{
	if (!session_is_live(s))
		return 0;
	session_sync_rings(s);
	session_adopt_rings_locked(s);
	struct drain_ctx *ctx = malloc(sizeof(*ctx));
	if (!ctx)
		return 0;
	ctx->s = s;
	ctx->records = 0;
	ctx->unknown_pc = false;
	for (size_t i = 0; i < s->nrings_adopted; i++) {
		ctx->ring_id = s->rings[i].ring_id;
		ctx->reader = &s->rings[i];
		uint64_t from = s->rings[i].tail;
		ring_reader_drain(&s->rings[i], drain_record, ctx);
		uint64_t share = (s->rings[i].tail - from) * 1024 / s->rings[i].data_size;
		if (fill && share > *fill)
			*fill = share > 1024 ? 1024 : (uint32_t)share;
	}
	bool unknown = ctx->unknown_pc;
	size_t records = ctx->records;
	free(ctx);
	if (s->unwind && drain_unwind_mode(s) == LLGO_UNWIND_AUTO)
		session_send_fp_tables(s);
	if (unknown)
		s->maps_stale = true;
	drain_refresh_locked(s, false);
	/* Tell the shim whether it must wait for us at exit (a pc we could not place yet). */
	pthread_mutex_lock(&s->lock);
	if (s->ctl) {
		atomic_store_explicit(&s->ctl->maps_stale, s->maps_stale ? 1u : 0u,
				      memory_order_relaxed);
		if (s->maps)
			atomic_fetch_add_explicit(&s->ctl->daemon_beat, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&s->lock);
	struct session_counts c;
	session_account_locked(s, &c); /* refreshes the cached counts LIST shows */
	session_charge_buckets(s);
	peak_pass_locked(s, records);
	return records;
}

size_t drain_session(struct session *s)
{
	pthread_mutex_lock(&s->drain_lock);
	size_t n = drain_session_locked(s, NULL);
	pthread_mutex_unlock(&s->drain_lock);
	return n;
}

void drain_session_exit(struct session *s)
{
	/* after a snapshot's cut in progress: its in-use scan reads the live table we unmap */
	pthread_mutex_lock(&s->snapshot_lock);
	pthread_mutex_lock(&s->drain_lock);
	drain_session_locked(s, NULL);
	/* The mappings of the rings stay valid after the process is gone: the final drain above
	 * saw everything it published. What its live table still holds was never freed. */
	if (session_is_live(s)) {
		inuse_freeze_locked(s);
		peak_exit_locked(s);
		session_charge_buckets(s);
	}
	if (session_retire_locked(s) && s->reg)
		session_registry_exited(s->reg, s);
	pthread_mutex_unlock(&s->drain_lock);
	pthread_mutex_unlock(&s->snapshot_lock);
}

void drain_prepare_unwind(struct session *s)
{
	if (drain_unwind_mode(s) != LLGO_UNWIND_AUTO || !s->maps)
		return;
	/* Slow (every mapped object's CFI is read): outside drain_lock, so that the session's
	 * rings drain meanwhile; a drain that needed an unwinder first made its own, which
	 * then gets the tables. */
	struct unwind *u = session_new_unwind(s, true);
	if (u)
		unwind_prepare(u, s->maps);
	pthread_mutex_lock(&s->drain_lock);
	if (!s->unwind) {
		s->unwind = u;
		u = NULL;
	} else if (u) {
		unwind_prepare(s->unwind, s->maps);
	}
	if (s->unwind)
		session_send_fp_tables(s);
	pthread_mutex_unlock(&s->drain_lock);
	if (u)
		unwind_free(u);
}

void drain_refresh_maps(struct session *s, bool force)
{
	pthread_mutex_lock(&s->drain_lock);
	drain_refresh_locked(s, force);
	pthread_mutex_unlock(&s->drain_lock);
}

/* ---- the drain thread --------------------------------------------------------------------- */

/* Nice value of the drain thread where the daemon may raise it (root, CAP_SYS_NICE): the
 * programs it serves may saturate every core, and a drain that waits for the scheduler lets
 * their rings fill and drop. Without the privilege it runs at the daemon's own priority. */
#define DRAIN_NICE (-10)

static void *drain_main(void *arg)
{
	struct drain *d = arg;
	uint64_t sleep_ns = DRAIN_POLL_MIN_NS;
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), DRAIN_NICE);
	/* the frames unwind_is_start names come from the symbolizers: never wait long on one */
	symhelper_no_wait(true);
	for (;;) {
		struct session **v;
		size_t n = session_list(d->reg, true, &v);
		size_t found = 0;
		uint32_t fill = 0;
		bool peak = false;
		for (size_t i = 0; i < n; i++) {
			pthread_mutex_lock(&v[i]->drain_lock);
			found += drain_session_locked(v[i], &fill);
			pthread_mutex_unlock(&v[i]->drain_lock);
			/* asked for by this pass, or still waiting for the peak thread */
			peak |= atomic_load_explicit(&v[i]->peak_want, memory_order_relaxed);
		}
		session_list_release(v, n);
		if (peak && d->peak_wake)
			d->peak_wake(d->peak_arg);

		if (found && fill >= DRAIN_FILL_BUSY)
			sleep_ns = DRAIN_POLL_MIN_NS;
		else if ((sleep_ns *= 2) > DRAIN_POLL_MAX_NS)
			sleep_ns = DRAIN_POLL_MAX_NS;

		int r = wthread_sleep(&d->w, sleep_ns);
		if (r < 0)
			break;
		if (r > 0)
			sleep_ns = DRAIN_POLL_MIN_NS;
	}
	return NULL;
}

struct drain *drain_new(struct session_registry *reg)
{
	const char *memo = getenv("LLGO_HEAP_UNWIND_MEMO");
	drain_rawmemo_mode = memo && strcmp(memo, "0") == 0	? DRAIN_RAWMEMO_OFF
			     : memo && strcmp(memo, "check") == 0 ? DRAIN_RAWMEMO_CHECK
								  : DRAIN_RAWMEMO_ON;
	struct drain *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->reg = reg;
	wthread_init(&d->w);
	return d;
}

void drain_on_peak(struct drain *d, void (*wake)(void *arg), void *arg)
{
	d->peak_wake = wake;
	d->peak_arg = arg;
}

int drain_start(struct drain *d)
{
	return wthread_start(&d->w, drain_main, d, "heapd-drain");
}

void drain_wake(struct drain *d)
{
	wthread_wake(&d->w);
}

void drain_stop(struct drain *d)
{
	if (!d)
		return;
	wthread_stop(&d->w);
}

void drain_free(struct drain *d)
{
	if (!d)
		return;
	drain_stop(d);
	wthread_destroy(&d->w);
	free(d);
}
