// SPDX-License-Identifier: MIT
/*
 * budget.c: per-uid and global budgets of llgo-heapd (connections, live sessions, rings,
 * ring memory, bucket memory). On a shared host one user must not be able to take what
 * everyone's profiles need (descriptors, vm.max_map_count, memory): every acquisition is
 * taken from the uid's budget and from the global one; when either would pass its limit the
 * acquisition is refused (server.c refuses the connection or HELLO, session.c the ring) or,
 * for memory already spent (buckets), the uid's processes degrade (drain.c stops adding
 * their records to buckets and counts them). Each refusal is logged once per uid and kind
 * until that uid is under the limit again, and the kinds hit are kept for `llgo-heap list`.
 *
 * Shares of a global budget. Per-uid limits alone let a few users (or one with several
 * uids) take all of a global budget together, root's processes included. So of every global
 * limit an eighth (BUDGET_ROOT_SHARE) is kept for root, which alone may use all of it; the
 * other users share the rest, and none of them may take more than it leaves free to the
 * others after the take (its holding never above what is left). However many uids take
 * their turns, something stays for the next one: k users that grow together stop at a
 * (k+1)th of the pool each, and a newcomer may take half of what they left.
 *
 * One mutex over a small open hash of uids; nothing here calls out while holding it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "../ingest/session.h"

/* Of each global limit, this fraction (rounded up) is for root alone. */
#define BUDGET_ROOT_SHARE 8u

_Static_assert(BUDGET_FLAG(BUDGET_CONNS) == LLGO_BUDGET_CONNS &&
		       BUDGET_FLAG(BUDGET_SESSIONS) == LLGO_BUDGET_SESSIONS &&
		       BUDGET_FLAG(BUDGET_RINGS) == LLGO_BUDGET_RINGS &&
		       BUDGET_FLAG(BUDGET_RING_BYTES) == LLGO_BUDGET_RING_BYTES &&
		       BUDGET_FLAG(BUDGET_BUCKET_BYTES) == LLGO_BUDGET_BUCKET_BYTES &&
		       BUDGET_FLAG(BUDGET_OUT_BYTES) == LLGO_BUDGET_OUT_BYTES &&
		       BUDGET_FLAG(BUDGET_UNWIND_BYTES) == LLGO_BUDGET_UNWIND_BYTES,
	       "budget flags as in shared/proto.h");

struct budget_user {
	uid_t uid;
	bool used;
	uint64_t have[BUDGET_NKINDS];
	uint32_t hit;    /* BUDGET_FLAG bits since last under every limit */
	uint32_t logged; /* BUDGET_FLAG bits already logged */
};

struct budget {
	struct budget_limits lim;
	pthread_mutex_t lock;
	struct budget_user *users;
	size_t cap, n;
	uint64_t total[BUDGET_NKINDS];
	uint64_t others[BUDGET_NKINDS]; /* of total, what uids other than root hold */
};

static const char *const budget_names[BUDGET_NKINDS] = {
	"connections", "sessions", "rings", "ring memory", "bucket memory", "unread answers",
	"unwind memory",
};

const char *budget_name(enum budget_kind k)
{
	return k < BUDGET_NKINDS ? budget_names[k] : "?";
}

void budget_defaults(struct budget_limits *l)
{
	memset(l, 0, sizeof(*l));
	l->per_uid[BUDGET_CONNS] = 1024;
	l->per_uid[BUDGET_SESSIONS] = 512;
	l->per_uid[BUDGET_RINGS] = 8192;
	l->per_uid[BUDGET_RING_BYTES] = 1ull << 30;
	l->per_uid[BUDGET_BUCKET_BYTES] = 2ull << 30;
	l->per_uid[BUDGET_OUT_BYTES] = 128ull << 20;
	l->per_uid[BUDGET_UNWIND_BYTES] = 512ull << 20;
	l->total[BUDGET_CONNS] = 16384;
	l->total[BUDGET_SESSIONS] = 8192;
	l->total[BUDGET_RINGS] = 32768; /* each a mapping: well below vm.max_map_count */
	l->total[BUDGET_RING_BYTES] = 8ull << 30;
	l->total[BUDGET_BUCKET_BYTES] = 16ull << 30;
	l->total[BUDGET_OUT_BYTES] = 0; /* server.c's own cap (SERVER_MAX_OUT_BYTES) */
	l->total[BUDGET_UNWIND_BYTES] = 4ull << 30;
	l->root_exempt = true;
}

struct budget *budget_new(const struct budget_limits *l)
{
	struct budget *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->lim = *l;
	pthread_mutex_init(&b->lock, NULL);
	return b;
}

void budget_free(struct budget *b)
{
	if (!b)
		return;
	pthread_mutex_destroy(&b->lock);
	free(b->users);
	free(b);
}

void budget_set_limits(struct budget *b, const struct budget_limits *l)
{
	pthread_mutex_lock(&b->lock);
	b->lim = *l;
	pthread_mutex_unlock(&b->lock);
}

static size_t budget_slot(uid_t uid, size_t cap)
{
	return ((uint64_t)uid * 0x9e3779b97f4a7c15ull >> 32) & (cap - 1);
}

/* The uid's entry (created on first use); NULL when out of memory. Under b->lock. */
static struct budget_user *budget_user_locked(struct budget *b, uid_t uid, bool create)
{
	if (b->cap) {
		for (size_t i = budget_slot(uid, b->cap);; i = (i + 1) & (b->cap - 1)) {
			if (!b->users[i].used)
				break;
			if (b->users[i].uid == uid)
				return &b->users[i];
		}
	}
	if (!create)
		return NULL;
	if ((b->n + 1) * 2 > b->cap) {
		size_t nc = b->cap ? b->cap * 2 : 64;
		struct budget_user *nu = calloc(nc, sizeof(*nu));
		if (!nu)
			return NULL;
		for (size_t i = 0; i < b->cap; i++) {
			if (!b->users[i].used)
				continue;
			size_t j = budget_slot(b->users[i].uid, nc);
			while (nu[j].used)
				j = (j + 1) & (nc - 1);
			nu[j] = b->users[i];
		}
		free(b->users);
		b->users = nu;
		b->cap = nc;
	}
	size_t i = budget_slot(uid, b->cap);
	while (b->users[i].used)
		i = (i + 1) & (b->cap - 1);
	b->users[i].used = true;
	b->users[i].uid = uid;
	b->n++;
	return &b->users[i];
}

static uint64_t budget_sub(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* How much more of kind u may take now (UINT64_MAX: no limit). */
static uint64_t budget_room(const struct budget *b, const struct budget_user *u,
			    enum budget_kind k)
{
	uint64_t lu = b->lim.per_uid[k], lt = b->lim.total[k];
	bool root = u->uid == 0;
	uint64_t room = UINT64_MAX;
	if (lu && !(root && b->lim.root_exempt))
		room = budget_sub(lu, u->have[k]);
	if (!lt)
		return room;
	uint64_t free_all = budget_sub(lt, b->total[k]);
	if (root)
		return room < free_all ? room : free_all;
	/* the users' pool: the total without root's share */
	uint64_t pool = lt - (lt + BUDGET_ROOT_SHARE - 1) / BUDGET_ROOT_SHARE;
	uint64_t free = budget_sub(pool, b->others[k]);
	if (free > free_all)
		free = free_all;
	/* have + n <= free - n: after the take, no more than it leaves to the others */
	uint64_t fair = budget_sub(free, u->have[k]) / 2;
	return room < fair ? room : fair;
}

static bool budget_fits(const struct budget *b, const struct budget_user *u, enum budget_kind k,
			uint64_t n)
{
	return n <= budget_room(b, u, k);
}

static void budget_add_locked(struct budget *b, struct budget_user *u, enum budget_kind k,
			      uint64_t n)
{
	u->have[k] += n;
	b->total[k] += n;
	if (u->uid != 0)
		b->others[k] += n;
}

/* Sets *log when the hit is to be logged, with the limits in force copied to *l (they may
 * change at a reload once the lock is released). */
static void budget_note_hit_locked(struct budget *b, struct budget_user *u, enum budget_kind k,
				   bool *log, struct budget_limits *l)
{
	u->hit |= BUDGET_FLAG(k);
	*log = !(u->logged & BUDGET_FLAG(k));
	u->logged |= BUDGET_FLAG(k);
	*l = b->lim;
}

static void budget_log(uid_t uid, enum budget_kind k, const struct budget_limits *l)
{
	log_warn("uid %u: %s budget reached (per uid %llu, all users %llu, an eighth of it "
		 "root's, no user more than it leaves to the others): refusing or degrading "
		 "this user's processes only (logged once)", (unsigned)uid,
		 budget_name(k), (unsigned long long)l->per_uid[k],
		 (unsigned long long)l->total[k]);
}

int budget_take(struct budget *b, uid_t uid, enum budget_kind k, uint64_t n)
{
	if (!b)
		return 0;
	bool log = false;
	int rc = 0;
	struct budget_limits lim;
	pthread_mutex_lock(&b->lock);
	struct budget_user *u = budget_user_locked(b, uid, true);
	if (!u) {
		rc = -ENOMEM;
	} else if (!budget_fits(b, u, k, n)) {
		budget_note_hit_locked(b, u, k, &log, &lim);
		rc = -EDQUOT;
	} else {
		budget_add_locked(b, u, k, n);
	}
	pthread_mutex_unlock(&b->lock);
	if (log)
		budget_log(uid, k, &lim);
	return rc;
}

bool budget_charge(struct budget *b, uid_t uid, enum budget_kind k, uint64_t n)
{
	if (!b)
		return false;
	bool log = false, over;
	struct budget_limits lim;
	pthread_mutex_lock(&b->lock);
	struct budget_user *u = budget_user_locked(b, uid, true);
	if (!u) {
		pthread_mutex_unlock(&b->lock);
		return true;
	}
	budget_add_locked(b, u, k, n);
	over = budget_room(b, u, k) == 0;
	if (over)
		budget_note_hit_locked(b, u, k, &log, &lim);
	pthread_mutex_unlock(&b->lock);
	if (log)
		budget_log(uid, k, &lim);
	return over;
}

void budget_give(struct budget *b, uid_t uid, enum budget_kind k, uint64_t n)
{
	if (!b || !n)
		return;
	pthread_mutex_lock(&b->lock);
	struct budget_user *u = budget_user_locked(b, uid, false);
	if (u) {
		uint64_t m = n < u->have[k] ? n : u->have[k];
		u->have[k] -= m;
		b->total[k] = budget_sub(b->total[k], m);
		if (uid != 0)
			b->others[k] = budget_sub(b->others[k], m);
		/* under every limit again: the next hit is logged again */
		bool under = true;
		for (int i = 0; i < BUDGET_NKINDS && under; i++)
			under = budget_fits(b, u, (enum budget_kind)i, 1);
		if (under)
			u->hit = u->logged = 0;
	}
	pthread_mutex_unlock(&b->lock);
}

bool budget_over(struct budget *b, uid_t uid, enum budget_kind k)
{
	if (!b)
		return false;
	pthread_mutex_lock(&b->lock);
	struct budget_user *u = budget_user_locked(b, uid, false);
	struct budget_user zero = { .uid = uid };
	bool over = budget_room(b, u ? u : &zero, k) == 0;
	pthread_mutex_unlock(&b->lock);
	return over;
}

uint32_t budget_flags(struct budget *b, uid_t uid)
{
	if (!b)
		return 0;
	pthread_mutex_lock(&b->lock);
	struct budget_user *u = budget_user_locked(b, uid, false);
	uint32_t f = u ? u->hit : 0;
	pthread_mutex_unlock(&b->lock);
	return f;
}

uint64_t budget_used(struct budget *b, uid_t uid, enum budget_kind k)
{
	if (!b)
		return 0;
	pthread_mutex_lock(&b->lock);
	struct budget_user *u = budget_user_locked(b, uid, false);
	uint64_t v = u ? u->have[k] : 0;
	pthread_mutex_unlock(&b->lock);
	return v;
}

uint64_t budget_used_total(struct budget *b, enum budget_kind k)
{
	if (!b)
		return 0;
	pthread_mutex_lock(&b->lock);
	uint64_t v = b->total[k];
	pthread_mutex_unlock(&b->lock);
	return v;
}

void budget_get_limits(struct budget *b, struct budget_limits *out)
{
	if (b)
		*out = b->lim; /* set at budget_new, never changed */
	else
		memset(out, 0, sizeof(*out));
}
