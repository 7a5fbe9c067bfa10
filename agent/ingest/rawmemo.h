/* SPDX-License-Identifier: MIT */
/*
 * rawmemo.h: each ring's memo of the stack copies it unwound (rawmemo.c). A thread that
 * allocates from the same few call sites sends copies that differ only in words no unwind
 * reads (locals, spilled values); each was unwound again, through CFI lookups, libunwind or
 * the fast walk, the shim-frame filter and the bucket hash. An entry keeps what one copy's
 * unwind took in (the registers, the frame-pointer hint, the words it read, logged by
 * unwind_stack_logged) and what it gave (the final stack, its bucket): a copy with the same
 * registers and hint that holds the same words at those places unwinds to the same stack,
 * as long as the unwinder's state (unwind_epoch) and the maps did not change. Only whole
 * stacks are kept (not truncated, every pc known), so nothing the symbolizer or a later maps
 * read could decide differently is frozen. The drain (drain.c) asks, counts and fills.
 */
#ifndef LLGO_AGENT_RAWMEMO_H
#define LLGO_AGENT_RAWMEMO_H

#include <stdbool.h>
#include <stdint.h>

#include "../../shared/ring.h"
#include "../internal.h"

#define RAWMEMO_ENTRIES 4u
/* Stacks deeper than this are unwound every time (an entry stays small). */
#define RAWMEMO_MAX_PCS 64u

struct bucket;

struct rawmemo_entry {
	bool valid;
	bool learned; /* unwind_learn has nothing more to learn from pcs */
	struct llgo_raw_regs regs;
	uint32_t nhint, npcs;
	uint64_t maps_version, epoch;
	/* the bucket of the last record counted here, with its size and rate, and the in-use
	 * keys of its stack and of the hint (the shim's key) */
	uint64_t size, rate;
	struct bucket *bucket;
	uint64_t bucket_key, shim_key;
	uint64_t hint[LLGO_MAX_FRAMES];
	uint64_t pcs[RAWMEMO_MAX_PCS];
	struct unwind_reads reads;
};

struct rawmemo {
	uint32_t next; /* the entry replaced next (round robin) */
	struct rawmemo_entry e[RAWMEMO_ENTRIES];
};

/* The entry whose unwind a copy (regs, its stack bytes, the hint) would repeat, or NULL. */
struct rawmemo_entry *rawmemo_find(struct rawmemo *m, const struct llgo_raw_regs *regs,
				   const unsigned char *stack, const uint64_t *hint,
				   uint32_t nhint, uint64_t maps_version, uint64_t epoch);
/* Keep an unwind (made into *mp on first use; NULL when out of memory or too deep): the
 * entry, for the caller's bucket fields. */
struct rawmemo_entry *rawmemo_put(struct rawmemo **mp, const struct llgo_raw_regs *regs,
				  const uint64_t *hint, uint32_t nhint,
				  const struct unwind_reads *reads, const uint64_t *pcs,
				  uint32_t npcs, bool learned, uint64_t maps_version,
				  uint64_t epoch);

#endif
