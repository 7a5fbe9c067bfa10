// SPDX-License-Identifier: MIT
/*
 * unwind_fast.c: the common case of unwind.c's walk without libunwind. libunwind's remote
 * step costs microseconds, most of it two sigprocmask calls around its global cache lock per
 * frame; a server profiled at the default rate sends thousands of stack copies a second. Here
 * a step is a lookup in a per-file table of rows (pc -> where the CFA, the return address and
 * rbp are), filled from .eh_frame by cfi.c's cfi_eh_row, and two reads of the stack copy.
 *
 * Same results as libunwind, by construction: the walk follows unwind.c's loop and libunwind
 * 1.6's dwarf_step (Gparser.c's apply_reg_state, x86_64/Gstep.c) step by step, including how
 * they end (an undefined return address or rbp, a failed read, a CFA and pc that do not
 * change, a caller's sp below its callee's). The FDE for a pc is found by the same binary
 * search of .eh_frame_hdr's table as libunwind's remote_lookup. Whenever a step needs more
 * (a signal frame, a CFA from another register or an expression, CFI not in that table, an
 * image list gone stale), the walk gives up and libunwind walks the whole stack again, so a
 * stack is always either all libunwind's or identical to it. LLGO_HEAP_UNWIND_FAST=check
 * (unwind.c) runs both on every stack and reports any difference.
 *
 * The row cache. A row depends only on the file's bytes and the pc's ELF address (the FDE
 * search, its pointers and the CFA program are pc-relative, and files with ELF addresses from
 * 2^32 up are left to libunwind, so no address computation wraps for one load address and not
 * another), so rows are shared by every session that maps the file, whoever it belongs to.
 * Each file gets up to 2^UWFAST_MAX_BITS slots (by its FDE count), within a global budget of
 * UWFAST_BUDGET bytes (files beyond it compute rows every time). A slot is one 64-bit atomic
 * word holding a row and the pc it is for, so readers need no lock and a torn row cannot be
 * read; rows that do not fit the packing are computed every time. Relaxed loads and stores:
 * a slot carries no other data. Direct-mapped: a pc colliding with another replaces it.
 *
 * Left to unwind.c: the images and their files, the stack copies, libunwind, the statistics.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "unwind_fast.h"

#define UWFAST_MIN_BITS 10u
#define UWFAST_MAX_BITS 14u
#define UWFAST_BUDGET ((size_t)32 << 20)
/* ELF addresses the fast path takes (the slots keep 32-bit pcs) */
#define UWFAST_ADDR_LIMIT (UINT64_C(1) << 32)

static atomic_size_t uwfast_cache_bytes;

void uwfast_file_init(struct uwfast_file *ff, const unsigned char *image, size_t size,
		      struct filecopy *copy, const struct cfi_seg *segs, size_t nsegs, uint64_t lo,
		      uint64_t hi, uint64_t hdr_vaddr, uint64_t table_vaddr, uint64_t fde_count)
{
	memset(ff, 0, sizeof(*ff));
	if (nsegs > UWFAST_MAX_SEGS || hi > UWFAST_ADDR_LIMIT || lo >= hi || !fde_count)
		return;
	memcpy(ff->segs, segs, nsegs * sizeof(*segs));
	ff->cfi = (struct cfi_file){ image, size, ff->segs, nsegs, lo, hi, copy };
	/* Every read must find the one segment libunwind's access_mem finds: no overlaps. */
	for (size_t i = 0; i < nsegs; i++)
		for (size_t j = i + 1; j < nsegs; j++)
			if (segs[i].vaddr < segs[j].vaddr + segs[j].filesz &&
			    segs[j].vaddr < segs[i].vaddr + segs[i].filesz)
				return;
	const unsigned char *t = fde_count <= (1u << 28)
					 ? cfi_file_bytes(&ff->cfi, table_vaddr, fde_count * 8)
					 : NULL;
	if (!t)
		return;
	ff->hdr_vaddr = hdr_vaddr;
	ff->table = t;
	ff->fde_count = fde_count;
	unsigned bits = UWFAST_MIN_BITS;
	while (bits < UWFAST_MAX_BITS && (UINT64_C(1) << bits) < fde_count)
		bits++;
	ff->slot_bits = bits;
}

void uwfast_file_release(struct uwfast_file *ff)
{
	_Atomic uint64_t *s = atomic_load_explicit(&ff->slots, memory_order_acquire);
	if (s) {
		free((void *)s);
		atomic_fetch_sub_explicit(&uwfast_cache_bytes, uwfast_file_bytes(ff),
					  memory_order_relaxed);
	}
	atomic_store_explicit(&ff->slots, NULL, memory_order_relaxed);
}

size_t uwfast_file_bytes(const struct uwfast_file *ff)
{
	return atomic_load_explicit(&ff->slots, memory_order_acquire)
		       ? ((size_t)1 << ff->slot_bits) * sizeof(uint64_t)
		       : 0;
}

/* ff's slots, allocated at the first call within the budget; NULL when there are none. */
static _Atomic uint64_t *uwfast_slots(struct uwfast_file *ff)
{
	_Atomic uint64_t *s = atomic_load_explicit(&ff->slots, memory_order_acquire);
	if (s || atomic_load_explicit(&ff->no_slots, memory_order_relaxed))
		return s;
	size_t bytes = ((size_t)1 << ff->slot_bits) * sizeof(uint64_t);
	if (atomic_fetch_add_explicit(&uwfast_cache_bytes, bytes, memory_order_relaxed) + bytes >
		    UWFAST_BUDGET ||
	    !(s = calloc((size_t)1 << ff->slot_bits, sizeof(uint64_t)))) {
		atomic_fetch_sub_explicit(&uwfast_cache_bytes, bytes, memory_order_relaxed);
		atomic_store_explicit(&ff->no_slots, true, memory_order_relaxed);
		return NULL;
	}
	/* release: the zeroed slots before the pointer (acquire above); the loser frees its
	 * own allocation and uses the winner's */
	_Atomic uint64_t *none = NULL;
	if (!atomic_compare_exchange_strong_explicit(&ff->slots, &none, s, memory_order_acq_rel,
						     memory_order_acquire)) {
		free((void *)s);
		atomic_fetch_sub_explicit(&uwfast_cache_bytes, bytes, memory_order_relaxed);
		return none;
	}
	return s;
}

/* ---- rows -------------------------------------------------------------------------------- */

/*
 * A slot: bits 0-21 the pc's tag (pc >> slot_bits; the slot's index gives the rest), 22 set,
 * 23 "libunwind's" (no row: the walk gives up at this pc), 24 CFA from rbp, 25 return address
 * undefined (else at CFA - 8), 26-27 rbp's rule (enum cfi_where), 28-36 rbp's offset / 8
 * (signed), 37-63 the CFA offset (signed). 0 is an empty slot.
 */
#define UWS_TAG_BITS 22u
#define UWS_SET (UINT64_C(1) << 22)
#define UWS_SLOW (UINT64_C(1) << 23)
#define UWS_CFA_RBP (UINT64_C(1) << 24)
#define UWS_RA_UNDEF (UINT64_C(1) << 25)
#define UWS_RBP_SHIFT 26u
#define UWS_RBP_OFF_SHIFT 28u
#define UWS_RBP_OFF_BITS 9u
#define UWS_CFA_SHIFT 37u
#define UWS_CFA_BITS 27u

static size_t uwfast_index(const struct uwfast_file *ff, uint64_t pc)
{
	uint64_t tag = pc >> ff->slot_bits;
	return (size_t)((pc ^ tag ^ (tag >> ff->slot_bits)) & ((UINT64_C(1) << ff->slot_bits) - 1));
}

static bool uwfast_fits(uint64_t v, unsigned bits)
{
	int64_t s = (int64_t)v, lim = INT64_C(1) << (bits - 1);
	return s >= -lim && s < lim;
}

static uint64_t uwfast_field(uint64_t v, unsigned shift, unsigned bits)
{
	return (v & ((UINT64_C(1) << bits) - 1)) << shift;
}

static uint64_t uwfast_signed(uint64_t slot, unsigned shift, unsigned bits)
{
	return (uint64_t)((int64_t)(slot << (64 - shift - bits)) >> (64 - bits));
}

/* The slot for a row (slow: none), 0 when it does not pack. */
static uint64_t uwfast_pack(const struct uwfast_file *ff, uint64_t pc, const struct cfi_row *r,
			    bool slow)
{
	uint64_t s = UWS_SET | (pc >> ff->slot_bits);
	if (slow)
		return s | UWS_SLOW;
	if ((r->ra == CFI_CFAREL && r->ra_off != (uint64_t)-8) ||
	    (r->rbp == CFI_CFAREL &&
	     ((r->rbp_off & 7) || !uwfast_fits((uint64_t)((int64_t)r->rbp_off / 8), UWS_RBP_OFF_BITS))) ||
	    !uwfast_fits(r->cfa_off, UWS_CFA_BITS))
		return 0;
	s |= r->cfa_rbp ? UWS_CFA_RBP : 0;
	s |= r->ra == CFI_UNDEF ? UWS_RA_UNDEF : 0;
	s |= (uint64_t)r->rbp << UWS_RBP_SHIFT;
	if (r->rbp == CFI_CFAREL)
		s |= uwfast_field((uint64_t)((int64_t)r->rbp_off / 8), UWS_RBP_OFF_SHIFT, UWS_RBP_OFF_BITS);
	return s | uwfast_field(r->cfa_off, UWS_CFA_SHIFT, UWS_CFA_BITS);
}

static bool uwfast_unpack(uint64_t s, struct cfi_row *r)
{
	if (s & UWS_SLOW)
		return false;
	r->cfa_rbp = s & UWS_CFA_RBP;
	r->cfa_off = uwfast_signed(s, UWS_CFA_SHIFT, UWS_CFA_BITS);
	r->ra = s & UWS_RA_UNDEF ? CFI_UNDEF : CFI_CFAREL;
	r->ra_off = (uint64_t)-8;
	r->rbp = (uint8_t)((s >> UWS_RBP_SHIFT) & 3);
	r->rbp_off = r->rbp == CFI_CFAREL
			     ? uwfast_signed(s, UWS_RBP_OFF_SHIFT, UWS_RBP_OFF_BITS) * 8
			     : 0;
	return true;
}

/*
 * The FDE for pc (ELF address) in .eh_frame_hdr's table: libunwind's remote_lookup, the last
 * entry whose start, as a signed 32-bit offset from the header, is at most pc's (the table is
 * the file's: a hostile one unsorted gets the same answer from both). false: none.
 */
static bool uwfast_fde(const struct uwfast_file *ff, uint64_t pc, uint64_t *fde)
{
	int32_t rel = (int32_t)(uint32_t)(pc - ff->hdr_vaddr);
	uint64_t lo = 0, hi = ff->fde_count;
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		int32_t start;
		memcpy(&start, ff->table + mid * 8, 4);
		if (rel < start)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (hi == 0)
		return false;
	int32_t off;
	memcpy(&off, ff->table + (hi - 1) * 8 + 4, 4);
	*fde = ff->hdr_vaddr + (uint64_t)(int64_t)off;
	return true;
}

static bool uwfast_compute(const struct uwfast_file *ff, uint64_t pc, struct cfi_row *r)
{
	uint64_t fde;
	return uwfast_fde(ff, pc, &fde) && cfi_eh_row(&ff->cfi, fde, pc, r) == 0;
}

bool uwfast_file_row(struct uwfast_file *ff, uint64_t pc, struct cfi_row *r)
{
	if (!ff->fde_count || pc < ff->cfi.lo || pc >= ff->cfi.hi)
		return false;
	_Atomic uint64_t *slots = uwfast_slots(ff);
	if (!slots)
		return uwfast_compute(ff, pc, r);
	size_t i = uwfast_index(ff, pc);
	uint64_t s = atomic_load_explicit(&slots[i], memory_order_relaxed);
	if ((s & UWS_SET) && (s & ((UINT64_C(1) << UWS_TAG_BITS) - 1)) == pc >> ff->slot_bits)
		return uwfast_unpack(s, r);
	bool ok = uwfast_compute(ff, pc, r);
	s = uwfast_pack(ff, pc, r, !ok);
	if (s)
		atomic_store_explicit(&slots[i], s, memory_order_relaxed);
	return ok;
}

/* ---- the walk ---------------------------------------------------------------------------- */

/* Where rbp is, as libunwind keeps it: the register of the record, a stack address, or lost
 * (libunwind's null location, which also a saved-at address of 0 is). */
enum uwfast_bp { UWFAST_BP_REG, UWFAST_BP_MEM, UWFAST_BP_NULL };

bool uwfast_walk(const struct uwfast_ops *ops, void *arg, const struct llgo_raw_regs *regs,
		 uint64_t *out, uint32_t max, uint32_t *n, bool *truncated, bool *unknown_pc)
{
	uint64_t ip = regs->ip, cfa = regs->sp, prev_sp = regs->sp, bp_at = 0;
	enum uwfast_bp bp = UWFAST_BP_REG;
	uint32_t k = *n;
	/* The first pc is looked up as it is, every later one as a return address (pc - 1):
	 * libunwind's use_prev_instr, which only a signal frame would clear. */
	uint64_t back = 0;
	bool whole = false;
	*unknown_pc = false;
	for (;;) {
		uint64_t pc = ip - back;
		struct uwfast_image im;
		if (!ops->image(arg, pc, &im)) {
			*unknown_pc = true; /* no image: no unwind info */
			break;
		}
		struct cfi_row r;
		if (!im.file || !uwfast_file_row(im.file, pc - im.bias, &r))
			return false;
		/* apply_reg_state: the CFA first (rbp's value read from where it is now) */
		uint64_t base = cfa;
		if (r.cfa_rbp) {
			/* a lost rbp cannot be read (libunwind: an error); a lost rbp also ended
			 * the stack a step earlier, so this is for form */
			if (bp == UWFAST_BP_NULL ||
			    (bp == UWFAST_BP_MEM && !ops->read(arg, bp_at, &base)))
				break;
			if (bp == UWFAST_BP_REG)
				base = regs->bp;
		}
		uint64_t next_cfa = base + r.cfa_off;
		if (r.rbp == CFI_UNDEF) {
			bp = UWFAST_BP_NULL;
		} else if (r.rbp == CFI_CFAREL) {
			bp_at = next_cfa + r.rbp_off;
			bp = bp_at ? UWFAST_BP_MEM : UWFAST_BP_NULL;
		}
		uint64_t next_ip = 0, ra_at = next_cfa + r.ra_off;
		bool more = r.ra == CFI_CFAREL && ra_at != 0;
		if (more && !ops->read(arg, ra_at, &next_ip))
			break;
		if (next_ip == ip && next_cfa == cfa)
			break; /* nothing changed: a loop */
		ip = next_ip;
		cfa = next_cfa;
		/* x86_64's unw_step: a lost rbp ends the stack too */
		if (!more || bp == UWFAST_BP_NULL) {
			whole = true;
			break;
		}
		/* unwind.c's loop */
		if (k >= max)
			break;
		if (ip == 0) {
			whole = true;
			break;
		}
		if (ops->stale(arg, ip))
			return false;
		if (cfa < prev_sp)
			break;
		prev_sp = cfa;
		out[k++] = ip;
		back = 1;
	}
	*n = k;
	*truncated = !whole;
	return true;
}
