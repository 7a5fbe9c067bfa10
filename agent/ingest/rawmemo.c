// SPDX-License-Identifier: MIT
/*
 * rawmemo.c: the memo of unwound stack copies a ring keeps (rawmemo.h says why it is sound).
 * Four entries per ring, replaced in turn: a thread's copies come from a few call sites at
 * the same depths. Finding costs the registers' and the hint's compare and one compare per
 * word the unwind read (two or three per frame), against the unwind itself. The stack bytes
 * are the reader's private copy of the record (ring.c): nothing here reads shared memory.
 * Left to the drain: what a hit counts (bucket, in-use note, learning), check mode.
 */
#include <stdlib.h>
#include <string.h>

#include "rawmemo.h"

struct rawmemo_entry *rawmemo_find(struct rawmemo *m, const struct llgo_raw_regs *regs,
				   const unsigned char *stack, const uint64_t *hint,
				   uint32_t nhint, uint64_t maps_version, uint64_t epoch)
{
	if (!m)
		return NULL;
	for (uint32_t i = 0; i < RAWMEMO_ENTRIES; i++) {
		struct rawmemo_entry *e = &m->e[i];
		if (e->valid && e->regs.ip == regs->ip && e->regs.sp == regs->sp &&
		    e->epoch == epoch && e->maps_version == maps_version && e->nhint == nhint &&
		    memcmp(&e->regs, regs, sizeof(*regs)) == 0 &&
		    memcmp(e->hint, hint, nhint * sizeof(*hint)) == 0 &&
		    unwind_reads_match(&e->reads, regs, stack))
			return e;
	}
	return NULL;
}

struct rawmemo_entry *rawmemo_put(struct rawmemo **mp, const struct llgo_raw_regs *regs,
				  const uint64_t *hint, uint32_t nhint,
				  const struct unwind_reads *reads, const uint64_t *pcs,
				  uint32_t npcs, bool learned, uint64_t maps_version,
				  uint64_t epoch)
{
	if (npcs > RAWMEMO_MAX_PCS || nhint > LLGO_MAX_FRAMES || reads->overflow)
		return NULL;
	if (!*mp && !(*mp = calloc(1, sizeof(**mp))))
		return NULL;
	struct rawmemo *m = *mp;
	struct rawmemo_entry *e = &m->e[m->next];
	m->next = (m->next + 1) % RAWMEMO_ENTRIES;
	e->valid = true;
	e->learned = learned;
	e->regs = *regs;
	e->nhint = nhint;
	e->npcs = npcs;
	e->maps_version = maps_version;
	e->epoch = epoch;
	e->bucket = NULL;
	e->size = e->rate = 0;
	memcpy(e->hint, hint, nhint * sizeof(*hint));
	memcpy(e->pcs, pcs, npcs * sizeof(*pcs));
	e->reads.n = reads->n;
	e->reads.overflow = false;
	memcpy(e->reads.off, reads->off, reads->n * sizeof(reads->off[0]));
	memcpy(e->reads.val, reads->val, reads->n * sizeof(reads->val[0]));
	return e;
}
