/* SPDX-License-Identifier: MIT */
/*
 * unwind_fast.h: between unwind.c and unwind_fast.c (private to the two, and to tests). The
 * fast path's state of one file (inside unwind.c's cached file, shared by every session: its
 * rows come from the file's bytes alone) and the walk, which reaches the session's images and
 * stack copy through unwind.c's callbacks.
 */
#ifndef LLGO_AGENT_UNWIND_FAST_H
#define LLGO_AGENT_UNWIND_FAST_H

#include <stdatomic.h>

#include "../internal.h"

#define UWFAST_MAX_SEGS 16u

struct uwfast_file {
	struct cfi_file cfi; /* cfi.segs points at segs */
	struct cfi_seg segs[UWFAST_MAX_SEGS];
	/* .eh_frame_hdr's search table: its ELF address, its bytes, its entry count (0: the
	 * fast path does not read this file, every step goes to libunwind) */
	uint64_t hdr_vaddr;
	const unsigned char *table;
	uint64_t fde_count;
	/* The row cache: 2^slot_bits packed rows (unwind_fast.c), allocated at the first row
	 * within the global budget; published with release, read with acquire. */
	_Atomic uint64_t *_Atomic slots;
	atomic_bool no_slots; /* the budget was spent when this file asked */
	unsigned slot_bits;
};

/* Set up ff for the file image[0..size) (or, copy set, the bytes filecopy_at gives: size is
 * then the file's size) whose PT_LOAD segments (file parts) are segs, whose
 * image spans ELF addresses [lo, hi), and whose .eh_frame_hdr at hdr_vaddr has fde_count
 * entries at table_vaddr (fde_count 0: none). Hostile input: anything the fast path does
 * not take (overlapping segments, addresses from 2^32 up, a table outside the segments)
 * leaves ff disabled. */
void uwfast_file_init(struct uwfast_file *ff, const unsigned char *image, size_t size,
		      struct filecopy *copy, const struct cfi_seg *segs, size_t nsegs, uint64_t lo,
		      uint64_t hi, uint64_t hdr_vaddr, uint64_t table_vaddr, uint64_t fde_count);
void uwfast_file_release(struct uwfast_file *ff);
/* Bytes of ff's row cache. */
size_t uwfast_file_bytes(const struct uwfast_file *ff);
/* The row at pc (an ELF address: the lookup address), from the cache or cfi_eh_row (and then
 * cached); false: libunwind's step. */
bool uwfast_file_row(struct uwfast_file *ff, uint64_t pc, struct cfi_row *r);

/* An image of the session: its file's fast-path state (NULL: none) and load bias. */
struct uwfast_image {
	struct uwfast_file *file;
	uint64_t bias;
};

/* What the walk asks of unwind.c (arg: its context for this stack). */
struct uwfast_ops {
	/* The image whose range holds addr; false when none does. */
	bool (*image)(void *arg, uint64_t addr, struct uwfast_image *out);
	/* 8 bytes at addr, as libunwind's access_mem reads them (the stack copies, the files). */
	bool (*read)(void *arg, uint64_t addr, uint64_t *val);
	/* Whether a pc outside every image lies in a mapping the maps know (the images are
	 * stale: libunwind's walk rebuilds them and goes on). */
	bool (*stale)(void *arg, uint64_t pc);
};

/*
 * Walk the stack of regs as unwind.c's libunwind loop does, frame by frame with the cached
 * rows, appending return addresses to out[*n..max) (out[0] is regs->ip, *n 1 on entry).
 * true: done, *n frames, *truncated and *unknown_pc as that loop would set them. false: some
 * frame needs what the fast path does not do (a signal frame, an expression, CFI outside
 * .eh_frame_hdr's table, stale images): out and *n are to be ignored, libunwind walks.
 */
bool uwfast_walk(const struct uwfast_ops *ops, void *arg, const struct llgo_raw_regs *regs,
		 uint64_t *out, uint32_t max, uint32_t *n, bool *truncated, bool *unknown_pc);

#endif
