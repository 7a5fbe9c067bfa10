// SPDX-License-Identifier: MIT
/*
 * stackcopy.c: the shim's part of DWARF unwinding. In LLGO_HEAP_UNWIND=dwarf mode (and in
 * auto mode when the frame-pointer walk cannot be trusted, see stackcopy_take) a sampled
 * allocation carries, besides the frame-pointer walk, the machine state at the program's
 * allocating call site and a copy of the live stack above it (an LLGO_REC_ALLOC_RAW record,
 * shared/ring.h). The daemon unwinds that copy out of process (agent/unwind/unwind.c); nothing here
 * unwinds, and no unwinder is linked.
 *
 * The start state is exact, never guessed: the slow paths are entered by a tail call from a
 * frameless interposed function (override.c), so the slow path's own frame holds, at
 * frame[1], the return address into the program (checked against ra) and, at frame[0], the
 * program's frame pointer register; the program's stack pointer after the return is
 * frame + 16. Under a C++ operator new wrapper (override_cxx.c) the same holds for the
 * wrapper's frame. When the check fails (a caller that is not a tail call), no copy is made
 * and the sample keeps its frame-pointer stack.
 *
 * The copy runs from that stack pointer up to the end of the thread's stack (t->stack_end;
 * for the main thread, just above glibc's entry stack pointer; for other threads, the thread
 * pointer), capped at LLGO_HEAP_STACK_KB. A stack pointer outside the thread's stack is a signal handler on a
 * sigaltstack: the alternate stack is asked for (one syscall) and copied up to its end, and
 * the top of the thread's own stack, where the interrupted frames are, as a second region.
 * Without known bounds nothing is copied (reading past a stack's end could fault).
 *
 * Costs: the copy is a memcpy into the ring, so its price is its size; rings are made large
 * enough for a burst of full-size records (stackcopy_ring_min). Settings are read once, at
 * start (emit_init), before any thread samples.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "internal.h"

/* glibc's stack pointer at process entry (ld.so, GLIBC_2.1; weak: absent elsewhere). Above
 * it the main thread's stack holds argc, argv, the environment and the auxiliary vector,
 * which no unwinder reads (_start's CFI ends the stack below it). */
extern void *__libc_stack_end __attribute__((weak));
#define STACKCOPY_ENTRY_SLACK 64u

/* The end of the thread's stack memory (lifecycle.c sets it at thread start), else the end
 * of its frames that the frame-pointer walk uses. */
static inline uintptr_t stackcopy_end(const struct llgo_heap_thread *t)
{
	return t->stack_end ? t->stack_end : t->stack_hi;
}

uint32_t stackcopy_mode = LLGO_UNWIND_AUTO;
static uint32_t stackcopy_cap = LLGO_RAW_DEFAULT_STACK;

/* ---- settings -------------------------------------------------------------------------- */

static uint32_t stackcopy_parse_mode(const char *v)
{
	if (!v || !*v || strcmp(v, "auto") == 0)
		return LLGO_UNWIND_AUTO;
	if (strcmp(v, "fp") == 0)
		return LLGO_UNWIND_FP;
	if (strcmp(v, "dwarf") == 0)
		return LLGO_UNWIND_DWARF;
	return LLGO_UNWIND_AUTO; /* unknown words: the default, never a failure */
}

void stackcopy_init(void)
{
	stackcopy_mode = stackcopy_parse_mode(getenv("LLGO_HEAP_UNWIND"));
#if !defined(__x86_64__)
	/* the copy's registers and the daemon's unwinder are x86-64's: frame pointers here */
	stackcopy_mode = LLGO_UNWIND_FP;
#endif
	const char *kb = getenv("LLGO_HEAP_STACK_KB");
	if (kb && *kb >= '0' && *kb <= '9') {
		uint64_t v = 0;
		for (const char *c = kb; *c >= '0' && *c <= '9' && v < (1u << 20); c++)
			v = v * 10 + (uint64_t)(*c - '0');
		v <<= 10;
		if (v > LLGO_RAW_MAX_STACK)
			v = LLGO_RAW_MAX_STACK;
		if (v < 1024)
			v = 1024;
		stackcopy_cap = (uint32_t)v;
	}
}

uint32_t stackcopy_stack_cap(void)
{
	return stackcopy_cap;
}

uint64_t stackcopy_hello_flags(void)
{
	return (uint64_t)stackcopy_mode << LLGO_HELLO_UNWIND_SHIFT;
}

/* Ring data bytes a process needs so that a ring holds a burst of 16 full-size records
 * between two drains (in auto mode too: a program without frame pointers copies every
 * sample); none in fp mode. */
uint32_t stackcopy_ring_min(void)
{
	if (stackcopy_mode == LLGO_UNWIND_FP)
		return 0;
	uint64_t need = 16u * (stackcopy_cap + llgo_record_raw_fixed_len(LLGO_MAX_FRAMES));
	uint64_t size = LLGO_RING_MIN_DATA;
	while (size < need && size < LLGO_RING_MAX_DATA)
		size <<= 1;
	return (uint32_t)size;
}

/* ---- the copy -------------------------------------------------------------------------- */

/* The stack region holding sp: the thread's, else an active sigaltstack. */
static bool stackcopy_bounds(const struct llgo_heap_thread *t, uintptr_t sp, uintptr_t *hi,
			     uint32_t *flags)
{
	uintptr_t end = stackcopy_end(t);
	if (end && sp >= t->stack_lo && sp < end) {
		*hi = end;
		return true;
	}
	stack_t ss;
	if (link_state() == LLGO_SHIM_OFF) /* no syscalls once sandboxed */
		return false;
	if (sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK) && ss.ss_sp &&
	    sp >= (uintptr_t)ss.ss_sp && sp < (uintptr_t)ss.ss_sp + ss.ss_size) {
		*hi = (uintptr_t)ss.ss_sp + ss.ss_size;
		*flags |= LLGO_RAW_ALTSTACK;
		return true;
	}
	return false;
}

static bool stackcopy_in_fp_code(uint64_t pc, uint32_t count)
{
	uint64_t at = pc - 1; /* the call instruction */
	uint32_t lo = 0, hi = count;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint64_t rlo = __atomic_load_n(&attach_ctl.fp_ranges[mid].lo, __ATOMIC_RELAXED);
		uint64_t rhi = __atomic_load_n(&attach_ctl.fp_ranges[mid].hi, __ATOMIC_RELAXED);
		if (at < rlo)
			hi = mid;
		else if (at >= rhi)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/*
 * The auto rule: a frame-pointer walk is trusted when every frame but the last returns into
 * code the daemon found to keep frame pointers (so each frame's saved frame pointer is its
 * caller's), and the last is a root pc (the daemon knows the stack below it). Anything else,
 * including a table being rewritten (odd or changed fp_seq) or not sent yet, copies the
 * stack. Reads pair with the daemon's release stores of fp_seq (see shared/ring.h). A page
 * whose sequence count was never written comes from a daemon that sends no tables (older,
 * or a test's): it would not unwind a copy either, so the walk is all there is.
 */
bool stackcopy_fp_trusted(const uint64_t *frames, uint32_t n, struct stack_memo *m)
{
	uint32_t seq = atomic_load_explicit(&attach_ctl.fp_seq, memory_order_acquire);
	/* No tables yet (the shim does not wait for the daemon's HELLO handling): copy. */
	if (seq == 0)
		return false;
	if ((seq & 1) || n == 0 || n > LLGO_MAX_FRAMES)
		return false;
	/* the same walk under the same tables: a loop that allocates at one site is checked
	 * once (stack_sample clears the verdict when the walk changes) */
	if (m && m->fp_seq == seq)
		return m->trusted;
	uint32_t count = __atomic_load_n(&attach_ctl.fp_count, __ATOMIC_RELAXED);
	uint32_t roots = __atomic_load_n(&attach_ctl.root_count, __ATOMIC_RELAXED);
	if (count == 0 || count > LLGO_CTL_FP_RANGES || roots > LLGO_CTL_ROOTS)
		return false;
	bool ok = false;
	for (uint32_t i = 0; i < roots && !ok; i++)
		ok = __atomic_load_n(&attach_ctl.root_pcs[i], __ATOMIC_RELAXED) == frames[n - 1];
	for (uint32_t i = 0; ok && i + 1 < n; i++)
		ok = stackcopy_in_fp_code(frames[i], count);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&attach_ctl.fp_seq, memory_order_relaxed) != seq)
		return false; /* rewritten meanwhile: nothing read counts, nothing is kept */
	if (m) {
		m->fp_seq = seq;
		m->trusted = ok;
	}
	return ok;
}

/*
 * A handler on a sigaltstack: the interrupted code's frames are on the thread's own stack,
 * somewhere below its end. Its top (up to the cap, never below the thread's stack start nor
 * into memory that is not mapped: mincore answers ENOMEM for a range with a hole, and the
 * main thread's stack below its lowest use, or a guard gap, is such a hole) is copied as a
 * second region. Reading it is safe: it is mapped stack memory no one else writes while this
 * thread runs its handler.
 */
static void stackcopy_interrupted(struct stackcopy *sc, const struct llgo_heap_thread *t,
				  uintptr_t entry)
{
	uintptr_t top = stackcopy_end(t), lo = t->stack_lo;
	if (!top || top <= lo || link_state() == LLGO_SHIM_OFF)
		return;
	if (entry && entry > lo && entry < top && top - entry > STACKCOPY_ENTRY_SLACK)
		top = entry + STACKCOPY_ENTRY_SLACK;
	uintptr_t page = 4096;
	uintptr_t top_page = (top + page - 1) & ~(page - 1);
	uint64_t size = stackcopy_cap;
	unsigned char vec[LLGO_RAW_MAX_STACK / 4096 + 2];
	while (size >= page) {
		uintptr_t from = top - size < lo || top - size > top ? lo : top - size;
		from = (from + 7) & ~(uintptr_t)7;
		uintptr_t from_page = from & ~(page - 1);
		if ((top_page - from_page) / page <= sizeof(vec) &&
		    mincore((void *)from_page, top_page - from_page, vec) == 0) {
			sc->regs.stack2_lo = from;
			sc->regs.stack2_len = (uint32_t)((top - from) & ~(uintptr_t)7);
			sc->stack2 = (const unsigned char *)from;
			return;
		}
		size /= 2;
	}
}

bool stackcopy_wanted_slow(const uint64_t *frames, uint32_t n, struct stack_memo *m)
{
	if (stackcopy_mode == LLGO_UNWIND_DWARF)
		return true;
	if (stackcopy_mode != LLGO_UNWIND_AUTO)
		return false;
	return !stackcopy_fp_trusted(frames, n, m);
}

bool stackcopy_take(struct stackcopy *sc, const struct llgo_heap_thread *t,
		    const uint64_t *frames, uint32_t n, void *ra, void *frame, uintptr_t cxx)
{
	return stackcopy_wanted_slow(frames, n, NULL) && stackcopy_fill(sc, t, ra, frame, cxx);
}

bool stackcopy_fill(struct stackcopy *sc, const struct llgo_heap_thread *t, void *ra,
		    void *frame, uintptr_t cxx)
{
	memset(&sc->regs, 0, sizeof(sc->regs));
	sc->stack = sc->stack2 = NULL;
	sc->copy = false; /* until the start state is known: a frame-pointer stack, flagged */
	/* The frame whose return address is the program's call site. */
	const uintptr_t *f = (const uintptr_t *)(cxx ? cxx : (uintptr_t)frame);
	if (!f || ((uintptr_t)f & 7))
		return true;
	uintptr_t sp = (uintptr_t)f + 16, hi = 0, entry = 0;
	uint32_t flags = 0;
	if (!stackcopy_bounds(t, (uintptr_t)f, &hi, &flags) || hi < sp)
		return true;
	uintptr_t ip = f[1];
	if (!cxx && ip != (uintptr_t)ra)
		/* not entered by a tail call (a linked or --wrap'ed shim): the start state is
		 * unknown. auto keeps the frame-pointer stack as it is; dwarf flags it */
		return stackcopy_mode == LLGO_UNWIND_DWARF;
	/* the main thread: nothing above the entry stack pointer is stack frames */
	entry = &__libc_stack_end ? (uintptr_t)__libc_stack_end : 0;
	if (entry && !(flags & LLGO_RAW_ALTSTACK) && entry > sp && entry < hi &&
	    hi - entry > STACKCOPY_ENTRY_SLACK)
		hi = entry + STACKCOPY_ENTRY_SLACK; /* only the main thread's stack holds entry */
	/* Another thread: glibc puts its thread control block (and, below it, the static TLS)
	 * at the top of the thread's stack block, above the first frame; the thread pointer is
	 * that block's address, so nothing above it is a frame. */
	uintptr_t tp = (uintptr_t)pthread_self();
	if (!(flags & LLGO_RAW_ALTSTACK) && tp > sp && tp < hi)
		hi = tp;
	uint64_t len = (hi - sp) & ~(uint64_t)7;
	if (len > stackcopy_cap) {
		len = stackcopy_cap;
		flags |= LLGO_RAW_CAPPED;
	}
	sc->regs.ip = ip;
	sc->regs.sp = sp;
	sc->regs.bp = f[0];
	sc->regs.stack_hi = (flags & LLGO_RAW_ALTSTACK) ? hi : stackcopy_end(t);
	sc->regs.stack_len = (uint32_t)len;
	sc->regs.flags = flags;
	sc->stack = (const unsigned char *)sp;
	sc->copy = true;
	if (flags & LLGO_RAW_ALTSTACK)
		stackcopy_interrupted(sc, t, entry);
	return true;
}

/*
 * Push one record of this file: ALLOC_RAW when sc->copy, else an ALLOC record flagged
 * LLGO_REC_FLAG_NO_COPY. The protocol is emit_push_alloc's (internal.h): single producer,
 * bytes then head (release) then sampled (release); a record that does not fit is dropped and
 * counted (dropped, then sampled). The fixed part is assembled and checksummed on the stack;
 * the stack copy goes straight from the live stack into the ring.
 *
 * In auto mode a copy that would leave less than an eighth of the ring free is not made: the
 * sample keeps its frame-pointer stack (flagged), so a burst of copies degrades stacks, which
 * the daemon states, instead of dropping samples. In dwarf mode the copy is what was asked
 * for: it is dropped and counted when it does not fit.
 */
bool stackcopy_push(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		    uint32_t tid, const uint64_t *frames, uint32_t n, const struct stackcopy *sc)
{
	struct llgo_ring_header *h = r->hdr;
	if (n > LLGO_MAX_FRAMES)
		n = LLGO_MAX_FRAMES;
	uint64_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
	uint64_t sampled = atomic_load_explicit(&h->sampled, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
	uint64_t used = head - tail, cap = r->mask + 1;
	bool copy = sc->copy;
	uint32_t fixed = copy ? llgo_record_raw_fixed_len(n) : llgo_record_alloc_len(n);
	uint32_t len = fixed + (copy ? sc->regs.stack_len + sc->regs.stack2_len : 0);
	/* auto: a copy that would leave less than an eighth of the ring becomes the frame-pointer
	 * record
	 * (flagged: stated as truncated unless its end is known), so that bursts, before the
	 * daemon has learned which walks it can trust, degrade stacks instead of dropping
	 * samples; not before the daemon serves the process at all (full.c waits then) */
	if (copy && stackcopy_mode == LLGO_UNWIND_AUTO && used <= cap && cap - used >= len &&
	    cap - used - len < cap / 8 && full_daemon_serving() && !full_waits(rate)) {
		copy = false;
		fixed = len = llgo_record_alloc_len(n);
	}
	if (used > cap || cap - used < len) {
		uint64_t dropped = atomic_load_explicit(&h->dropped, memory_order_relaxed);
		atomic_store_explicit(&h->dropped, dropped + 1, memory_order_release);
		atomic_store_explicit(&h->sampled, sampled + 1, memory_order_release);
		return false;
	}
	union {
		struct llgo_record rec;
		unsigned char bytes[LLGO_RECORD_MAX_LEN + sizeof(struct llgo_raw_regs)];
	} u;
	memset(&u.rec, 0, sizeof(u.rec));
	u.rec.kind = copy ? LLGO_REC_ALLOC_RAW : LLGO_REC_ALLOC;
	u.rec.version = LLGO_REC_VERSION;
	u.rec.nframes = (uint16_t)n;
	u.rec.length = len;
	u.rec.seq = sampled + 1;
	u.rec.size = size;
	u.rec.rate = rate;
	u.rec.addr = addr;
	u.rec.tid = tid;
	u.rec.flags = copy ? 0 : LLGO_REC_FLAG_NO_COPY;
	if (n)
		memcpy(u.bytes + sizeof(struct llgo_record), frames, 8u * n);
	if (copy)
		memcpy(u.bytes + fixed - sizeof(sc->regs), &sc->regs, sizeof(sc->regs));
	u.rec.checksum = llgo_record_checksum(u.bytes, fixed);
	llgo_ring_copy_in(r->data, r->mask, head, u.bytes, fixed);
	if (copy && sc->regs.stack_len)
		llgo_ring_copy_in(r->data, r->mask, head + fixed, sc->stack, sc->regs.stack_len);
	if (copy && sc->regs.stack2_len)
		llgo_ring_copy_in(r->data, r->mask, head + fixed + sc->regs.stack_len, sc->stack2,
				  sc->regs.stack2_len);
	atomic_store_explicit(&h->head, head + len, memory_order_release);
	atomic_store_explicit(&h->sampled, sampled + 1, memory_order_release);
	return true;
}
