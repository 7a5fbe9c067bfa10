// SPDX-License-Identifier: MIT
/*
 * test_rawmemo.c: the memo of unwound stack copies (agent/ingest/rawmemo.c) on its own: an
 * entry answers a copy only when the registers, the hint, the unwinder's epoch, the maps and
 * every word the unwind read are the same; words it did not read may differ; the second
 * region (a sigaltstack handler's interrupted stack) and a word cut by the copy's end are
 * compared as the unwinder read them; entries are replaced in turn; what cannot be kept
 * (too deep, a log that overflowed) is not. Against real unwinds of real programs, with every
 * hit unwound again: test_unwind_programs.c (LLGO_HEAP_UNWIND_MEMO=check).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../agent/ingest/rawmemo.h"

#define RM_SP 0x7ffd00001000ull
#define RM_LEN 256u

static void rm_word(unsigned char *stack, uint32_t off, uint64_t v)
{
	memcpy(stack + off, &v, 8);
}

/* A copy of RM_LEN bytes at RM_SP, and a log of the two words an unwind read from it. */
static void rm_setup(struct llgo_raw_regs *regs, unsigned char *stack, struct unwind_reads *log)
{
	memset(regs, 0, sizeof(*regs));
	regs->ip = 0x401234;
	regs->sp = RM_SP;
	regs->bp = 0x1;
	regs->stack_hi = RM_SP + 8192;
	regs->stack_len = RM_LEN;
	for (uint32_t i = 0; i < RM_LEN; i += 8)
		rm_word(stack, i, 0x1000 + i);
	memset(log, 0, sizeof(*log));
	log->n = 2;
	log->off[0] = 24;
	log->val[0] = 0x1000 + 24;
	log->off[1] = 120;
	log->val[1] = 0x1000 + 120;
}

Test(rawmemo, same_words_read_hit_others_miss)
{
	struct llgo_raw_regs regs;
	unsigned char stack[RM_LEN];
	struct unwind_reads log;
	rm_setup(&regs, stack, &log);
	uint64_t hint[2] = { 0x401234, 0x402000 }, pcs[3] = { 0x401234, 0x403000, 0x404000 };
	struct rawmemo *m = NULL;
	cr_assert_not_null(rawmemo_put(&m, &regs, hint, 2, &log, pcs, 3, true, 7, 9));
	struct rawmemo_entry *e = rawmemo_find(m, &regs, stack, hint, 2, 7, 9);
	cr_assert_not_null(e);
	cr_expect_eq(e->npcs, 3);
	cr_expect_eq(memcmp(e->pcs, pcs, sizeof(pcs)), 0);

	/* a word no unwind read: a local, a spilled value */
	rm_word(stack, 32, 0xdead);
	cr_expect_not_null(rawmemo_find(m, &regs, stack, hint, 2, 7, 9));
	/* a word it read: another return address, another saved frame */
	rm_word(stack, 120, 0xbeef);
	cr_expect_null(rawmemo_find(m, &regs, stack, hint, 2, 7, 9));
	rm_word(stack, 120, 0x1000 + 120);
	cr_expect_not_null(rawmemo_find(m, &regs, stack, hint, 2, 7, 9));

	/* every other input */
	struct llgo_raw_regs r2 = regs;
	r2.bp = 0x2;
	cr_expect_null(rawmemo_find(m, &r2, stack, hint, 2, 7, 9), "another bp");
	r2 = regs;
	r2.stack_len = RM_LEN - 8;
	cr_expect_null(rawmemo_find(m, &r2, stack, hint, 2, 7, 9), "a shorter copy");
	r2 = regs;
	r2.sp += 16;
	cr_expect_null(rawmemo_find(m, &r2, stack, hint, 2, 7, 9), "another depth");
	uint64_t h2[2] = { 0x401234, 0x402008 };
	cr_expect_null(rawmemo_find(m, &regs, stack, h2, 2, 7, 9), "another hint");
	cr_expect_null(rawmemo_find(m, &regs, stack, hint, 1, 7, 9), "a shorter hint");
	cr_expect_null(rawmemo_find(m, &regs, stack, hint, 2, 8, 9), "the maps re-read");
	cr_expect_null(rawmemo_find(m, &regs, stack, hint, 2, 7, 10), "the images rebuilt");
	cr_expect_null(rawmemo_find(NULL, &regs, stack, hint, 2, 7, 9));
	free(m);
}

/* The unwinder reads a word cut by the copy's end as zero filled, and the interrupted stack
 * of a sigaltstack handler from the second region: the memo compares them the same way. */
Test(rawmemo, cut_word_and_second_region)
{
	struct llgo_raw_regs regs;
	unsigned char stack[RM_LEN + 64];
	struct unwind_reads log;
	rm_setup(&regs, stack, &log);
	regs.stack_len = RM_LEN - 4; /* (the shim sends multiples of 8; hostile input may not) */
	regs.stack2_lo = 0x7ffd00100000ull;
	regs.stack2_len = 64;
	for (uint32_t i = 0; i < 64; i += 8)
		rm_word(stack + regs.stack_len, i, 0x2000 + i);
	uint64_t cut = 0;
	memcpy(&cut, stack + RM_LEN - 8, 4);
	log.n = 3;
	log.off[0] = RM_LEN - 8; /* its last 4 bytes lie past the copy */
	log.val[0] = cut;
	log.off[1] = 16 | UNWIND_READ_STACK2;
	log.val[1] = 0x2000 + 16;
	log.off[2] = 0;
	log.val[2] = 0x1000;
	uint64_t hint[1] = { 0x401234 }, pcs[1] = { 0x401234 };
	struct rawmemo *m = NULL;
	cr_assert_not_null(rawmemo_put(&m, &regs, hint, 1, &log, pcs, 1, true, 1, 1));
	cr_expect_not_null(rawmemo_find(m, &regs, stack, hint, 1, 1, 1));
	stack[RM_LEN - 2] ^= 1; /* past the cut word: the second region's first word, not read */
	cr_expect_not_null(rawmemo_find(m, &regs, stack, hint, 1, 1, 1));
	rm_word(stack + regs.stack_len, 16, 0x9999);
	cr_expect_null(rawmemo_find(m, &regs, stack, hint, 1, 1, 1), "the second region's word");
	free(m);
}

Test(rawmemo, entries_replaced_in_turn_and_limits)
{
	struct llgo_raw_regs regs;
	unsigned char stack[RM_LEN];
	struct unwind_reads log;
	rm_setup(&regs, stack, &log);
	uint64_t hint[1] = { 0x401234 }, pcs[RAWMEMO_MAX_PCS + 1];
	for (uint32_t i = 0; i <= RAWMEMO_MAX_PCS; i++)
		pcs[i] = 0x401000 + i;
	struct rawmemo *m = NULL;
	cr_expect_null(rawmemo_put(&m, &regs, hint, 1, &log, pcs, RAWMEMO_MAX_PCS + 1, true, 1, 1),
		       "a stack deeper than an entry holds");
	log.overflow = true;
	cr_expect_null(rawmemo_put(&m, &regs, hint, 1, &log, pcs, 2, true, 1, 1),
		       "an unwind whose reads were not all logged");
	log.overflow = false;
	/* RAWMEMO_ENTRIES + 1 depths: the first one's entry goes */
	for (uint32_t i = 0; i <= RAWMEMO_ENTRIES; i++) {
		struct llgo_raw_regs r = regs;
		r.sp = RM_SP - 64 * i;
		cr_assert_not_null(rawmemo_put(&m, &r, hint, 1, &log, pcs, 2, true, 1, 1));
	}
	for (uint32_t i = 0; i <= RAWMEMO_ENTRIES; i++) {
		struct llgo_raw_regs r = regs;
		r.sp = RM_SP - 64 * i;
		struct rawmemo_entry *e = rawmemo_find(m, &r, stack, hint, 1, 1, 1);
		if (i == 0)
			cr_expect_null(e, "the oldest entry was replaced");
		else
			cr_expect_not_null(e, "depth %u", i);
	}
	free(m);
}
