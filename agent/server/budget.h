/* SPDX-License-Identifier: MIT */
/*
 * budget.h: what each uid may hold in llgo-heapd, and all of them together (budget.c).
 */
#ifndef LLGO_AGENT_BUDGET_H
#define LLGO_AGENT_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum budget_kind {
	BUDGET_CONNS,        /* open socket connections */
	BUDGET_SESSIONS,     /* live sessions (profiled processes) */
	BUDGET_RINGS,        /* rings mapped (each one mapping) */
	BUDGET_RING_BYTES,   /* ring memory mapped */
	BUDGET_BUCKET_BYTES, /* bucket tables (aggregated profiles), live and exited */
	BUDGET_OUT_BYTES,    /* answers built and not read yet by their clients */
	BUDGET_UNWIND_BYTES, /* copies of its files' unwind tables (filecopy.c, cfi.c) */
	BUDGET_NKINDS,
};

/* Bits of llgo_list_entry.budget_flags: which budget of the process's uid was hit. */
#define BUDGET_FLAG(k) (1u << (k))

struct budget_limits {
	uint64_t per_uid[BUDGET_NKINDS]; /* 0: unlimited */
	uint64_t total[BUDGET_NKINDS];   /* 0: unlimited */
	bool root_exempt;                /* uid 0 is limited by the totals only */
};

/* Defaults for a shared host (see llgo-heapd --help). */
void budget_defaults(struct budget_limits *l);

struct budget;
struct budget *budget_new(const struct budget_limits *l);
void budget_free(struct budget *b);
/* New limits (a reload): what is held stays held; later acquisitions meet the new ones. */
void budget_set_limits(struct budget *b, const struct budget_limits *l);
/* Take n of kind for uid: 0, or -EDQUOT when the uid's or the global budget would pass its
 * limit (logged once per uid and kind until the uid is under it again). b NULL: 0. */
int budget_take(struct budget *b, uid_t uid, enum budget_kind k, uint64_t n);
/* Take n whatever the limits (memory already spent); returns whether uid is now over. */
bool budget_charge(struct budget *b, uid_t uid, enum budget_kind k, uint64_t n);
void budget_give(struct budget *b, uid_t uid, enum budget_kind k, uint64_t n);
/* Whether uid is at or over its budget of kind (or the global one is). */
bool budget_over(struct budget *b, uid_t uid, enum budget_kind k);
/* BUDGET_FLAG bits of the budgets uid hit since it was last under all of them. */
uint32_t budget_flags(struct budget *b, uid_t uid);
uint64_t budget_used(struct budget *b, uid_t uid, enum budget_kind k);
/* What all users hold together, and the limits in force (all 0 for b NULL). */
uint64_t budget_used_total(struct budget *b, enum budget_kind k);
void budget_get_limits(struct budget *b, struct budget_limits *out);
const char *budget_name(enum budget_kind k);

#endif
