// SPDX-License-Identifier: MIT
/*
 * session.c: one session per attached process.
 *
 * A session is created at HELLO from the peer's SO_PEERCRED identity (never from the
 * message), maps the process's control page, reads its mappings while it is alive, and then
 * collects ring readers (ADD_RING) and buckets (drain.c) until the shim's socket closes. It
 * then becomes EXITED: rings and control page are unmapped, buckets and mappings are kept so
 * `snapshot PID` still works. A session charges its uid's budgets (budget.c): its
 * live-session slot and rings until it exits, its bucket memory until it is freed. Sessions
 * are reference counted so a snapshot or a drain in progress keeps its session alive past
 * eviction.
 *
 * About 800 lines, on purpose: they are one object's life (attach, rings, accounting, exit,
 * rate) under one set of locks (session.h), and each part reads the fields the others write
 * under those locks; the registry of sessions, which has its own lock, is
 * session_registry.c.
 *
 * Left to others: making sessions, the registry and eviction (session_registry.c), the memfd
 * claims (claims.c), reading records (ring.c via drain.c), the socket (server.c and jobs.c), mappings and symbols (procmaps.c), output
 * (snapshot.c).
 *
 * Locks: see session.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../server/budget.h"
#include "../server/ident.h"
#include "../../common/sane.h"
#include "session.h"

/* ---- /proc ----------------------------------------------------------------------------- */

bool session_process_alive(const struct session *s)
{
	char state;
	uint64_t start;
	if (ident_proc_stat(s->pid, &state, &start) != 0)
		return false;
	if (state == 'Z' || state == 'X')
		return false;
	return s->proc_start == 0 || start == s->proc_start;
}

/* ---- lifetime -------------------------------------------------------------------------- */

static struct budget *session_budget(const struct session *s)
{
	return s->budget;
}

struct unwind *session_new_unwind(struct session *s, bool auto_mode)
{
	struct unwind *u = unwind_new(s->pid, auto_mode);
	unwind_set_budget(u, session_budget(s), s->uid);
	return u;
}

int session_take_slot(struct session *s)
{
	if (s->holds_session)
		return 0;
	int err = budget_take(session_budget(s), s->uid, BUDGET_SESSIONS, 1);
	if (!err)
		s->holds_session = true;
	return err;
}

static void session_give_slot(struct session *s)
{
	if (s->holds_session)
		budget_give(session_budget(s), s->uid, BUDGET_SESSIONS, 1);
	s->holds_session = false;
}

void session_charge_buckets(struct session *s)
{
	struct budget *b = session_budget(s);
	if (!b)
		return;
	struct bucket_stats bs;
	bucket_table_stats(s->buckets, &bs);
	/* the table only grows; the peak's capture (peak.c) is replaced, and may shrink */
	uint64_t want = bs.bytes + peak_bytes(s);
	bool over;
	if (want > s->bucket_bytes_held) {
		over = budget_charge(b, s->uid, BUDGET_BUCKET_BYTES, want - s->bucket_bytes_held);
		s->bucket_bytes_held = want;
	} else {
		if (want < s->bucket_bytes_held) {
			budget_give(b, s->uid, BUDGET_BUCKET_BYTES, s->bucket_bytes_held - want);
			s->bucket_bytes_held = want;
		}
		over = budget_over(b, s->uid, BUDGET_BUCKET_BYTES);
	}
	atomic_store(&s->buckets_over, over);
}

static void session_unmap_all(struct session *s)
{
	struct budget *b = session_budget(s);
	budget_give(b, s->uid, BUDGET_RINGS, s->rings_held);
	budget_give(b, s->uid, BUDGET_RING_BYTES, s->ring_bytes_held);
	s->rings_held = 0;
	s->ring_bytes_held = 0;
	for (size_t i = 0; i < s->nrings_adopted; i++)
		ring_reader_unmap(&s->rings[i]);
	s->nrings_adopted = 0;
	for (size_t i = 0; i < s->npending; i++)
		ring_reader_unmap(&s->pending[i]);
	s->npending = 0;
	if (s->memfd >= 0) {
		close(s->memfd);
		s->memfd = -1;
	}
	if (s->ctl) {
		munmap(s->ctl, LLGO_CTL_SIZE);
		s->ctl = NULL;
	}
	if (s->memfd_claimed)
		claims_give(s->claims, s->memfd_dev, s->memfd_ino, s);
	s->memfd_claimed = false;
}

static void session_free(struct session *s)
{
	session_unmap_all(s);
	inuse_release(s);
	peak_release(s);
	session_give_slot(s);
	budget_give(session_budget(s), s->uid, BUDGET_BUCKET_BYTES, s->bucket_bytes_held);
	free(s->rings);
	free(s->pending);
	free(s->ring_ids);
	bucket_table_free(s->buckets);
	unwind_free(s->unwind);
	procmaps_free(s->maps);
	free(s->service_name);
	free(s->exe);
	if (s->pidfd >= 0)
		close(s->pidfd);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->drain_lock);
	pthread_mutex_destroy(&s->snapshot_lock);
	free(s);
}

struct session *session_get(struct session *s)
{
	atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
	return s;
}

void session_put(struct session *s)
{
	if (!s)
		return;
	/* acq_rel: the last put must see every other holder's writes before freeing */
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
		session_free(s);
}

/* ---- control page and mappings ---------------------------------------------------------- */

/* The process memfd or control page s maps (st: its fstat) becomes s's alone (caller holds
 * s->lock): -EBUSY when another process's session holds the same file. */
static int session_claim_memfd_locked(struct session *s, const struct stat *st)
{
	int err = claims_take(s->claims, (uint64_t)st->st_dev, (uint64_t)st->st_ino, s);
	if (err)
		return err;
	s->memfd_dev = (uint64_t)st->st_dev;
	s->memfd_ino = (uint64_t)st->st_ino;
	s->memfd_claimed = true;
	return 0;
}

int session_attach_ctl(struct session *s, int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size != (off_t)LLGO_CTL_SIZE)
		return -EINVAL;
	/* A peer that shrinks the file under our mapping would make our loads fault (SIGBUS).
	 * Seal it against shrinking; the shim creates it with MFD_ALLOW_SEALING. */
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	void *p = mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	struct llgo_ctl *ctl = p;
	/* Copy, then check: the peer may change these at any time, we use them only here. */
	uint64_t magic;
	uint32_t version, size;
	memcpy(&magic, &ctl->magic, sizeof(magic));
	memcpy(&version, &ctl->version, sizeof(version));
	memcpy(&size, &ctl->size, sizeof(size));
	if (magic != LLGO_CTL_MAGIC || version != LLGO_CTL_VERSION || size != LLGO_CTL_SIZE) {
		munmap(p, LLGO_CTL_SIZE);
		return -EPROTO;
	}
	pthread_mutex_lock(&s->lock);
	int err = s->ctl ? -EEXIST : session_claim_memfd_locked(s, &st);
	if (err) {
		pthread_mutex_unlock(&s->lock);
		munmap(p, LLGO_CTL_SIZE);
		return err;
	}
	s->ctl = ctl;
	s->last_rate_word = atomic_load_explicit(&ctl->rate_word, memory_order_relaxed);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int session_attach_memfd(struct session *s, int fd, bool reattached)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	long dpage = sysconf(_SC_PAGESIZE);
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)LLGO_CTL_SIZE)
		return -EINVAL;
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	void *p = mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	struct llgo_ctl *ctl = p;
	uint64_t magic;
	uint32_t version, size, page;
	memcpy(&magic, &ctl->magic, sizeof(magic));
	memcpy(&version, &ctl->version, sizeof(version));
	memcpy(&size, &ctl->size, sizeof(size));
	memcpy(&page, &ctl->page_size, sizeof(page));
	/* Ring offsets are multiples of the shim's page: they must be of ours too. */
	if (magic != LLGO_CTL_MAGIC || version != LLGO_CTL_VERSION || size != LLGO_CTL_SIZE ||
	    !llgo_page_size_ok(page) || dpage <= 0 || page % (uint32_t)dpage != 0) {
		munmap(p, LLGO_CTL_SIZE);
		return -EPROTO;
	}
	int keep = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (keep < 0) {
		int e = -errno;
		munmap(p, LLGO_CTL_SIZE);
		return e;
	}
	pthread_mutex_lock(&s->lock);
	int err = s->ctl ? -EEXIST : session_claim_memfd_locked(s, &st);
	if (err) {
		pthread_mutex_unlock(&s->lock);
		munmap(p, LLGO_CTL_SIZE);
		close(keep);
		return err;
	}
	s->ctl = ctl;
	s->memfd = keep;
	s->has_memfd = true;
	s->page_size = page;
	s->last_rate_word = atomic_load_explicit(&ctl->rate_word, memory_order_relaxed);
	uint32_t n = atomic_load_explicit(&ctl->ring_count, memory_order_acquire);
	s->baseline_below = reattached ? (n > LLGO_MAX_RINGS ? LLGO_MAX_RINGS : n) : 0;
	pthread_mutex_unlock(&s->lock);
	session_sync_rings(s);
	return 0;
}

bool session_same_memfd(const struct session *s, int fd)
{
	struct stat st;
	/* has_memfd, dev and ino are set once at attach, before the session is registered;
	 * s->memfd itself is closed by an exit worker without the registry lock. */
	return s->has_memfd && fstat(fd, &st) == 0 && (uint64_t)st.st_dev == s->memfd_dev &&
	       (uint64_t)st.st_ino == s->memfd_ino;
}

static int session_queue_locked(struct session *s, struct ring_reader *r)
{
	if (s->npending == s->cap_pending) {
		size_t cap = s->cap_pending ? s->cap_pending * 2 : 8;
		struct ring_reader *p = realloc(s->pending, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		s->pending = p;
		s->cap_pending = cap;
	}
	s->pending[s->npending++] = *r;
	s->ring_ids[r->ring_id / 8] |= (uint8_t)(1u << (r->ring_id % 8));
	s->nrings++;
	return 0;
}

/* Under s->lock. */
static int session_take_ring(struct session *s, uint64_t bytes)
{
	struct budget *b = session_budget(s);
	if (budget_take(b, s->uid, BUDGET_RINGS, 1) != 0)
		return -EDQUOT;
	if (budget_take(b, s->uid, BUDGET_RING_BYTES, bytes) != 0) {
		budget_give(b, s->uid, BUDGET_RINGS, 1);
		return -EDQUOT;
	}
	s->rings_held++;
	s->ring_bytes_held += bytes;
	return 0;
}

static void session_give_ring(struct session *s, uint64_t bytes)
{
	budget_give(session_budget(s), s->uid, BUDGET_RINGS, 1);
	budget_give(session_budget(s), s->uid, BUDGET_RING_BYTES, bytes);
	s->rings_held--;
	s->ring_bytes_held -= bytes;
}

size_t session_sync_rings(struct session *s)
{
	size_t added = 0;
	pthread_mutex_lock(&s->lock);
	if (s->memfd < 0 || !s->ctl || !session_is_live(s) || !s->ring_ids) {
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	/* acquire: pairs with the shim's release after formatting the ring headers */
	uint32_t n = atomic_load_explicit(&s->ctl->ring_count, memory_order_acquire);
	if (n > LLGO_MAX_RINGS)
		n = LLGO_MAX_RINGS;
	uint64_t span = llgo_ring_span(s->ring_data_size, s->page_size);
	while (s->rings_known < n) {
		uint32_t id = s->rings_known;
		if (s->ring_ids[id / 8] & (1u << (id % 8))) {
			s->rings_known++;
			continue;
		}
		/* Over its uid's ring budget: not mapped now (every ring is a mapping of the
		 * daemon's); the next drain looks again once the uid is under it. */
		if (session_take_ring(s, span) != 0)
			break;
		struct ring_reader r;
		int err = ring_reader_map_at(&r, s->memfd,
					     llgo_ring_offset(id, s->ring_data_size, s->page_size),
					     (size_t)span, id, s->ring_data_size);
		if (err)
			session_give_ring(s, span);
		if (err == -EAGAIN)
			break; /* not formatted yet: the next drain looks again */
		s->rings_known++;
		if (err)
			continue; /* a ring that fails its checks is never read */
		if (id < s->baseline_below)
			ring_reader_baseline(&r);
		if (session_queue_locked(s, &r) != 0) {
			ring_reader_unmap(&r);
			break;
		}
		added++;
	}
	pthread_mutex_unlock(&s->lock);
	return added;
}

static bool session_may_read_ex(struct session *s, bool after)
{
	if (atomic_load(&s->ident_lost))
		return false;
	int err;
	char why[256] = "";
	/* a copy: session_retire_locked closes the session's own (under s->lock) */
	pthread_mutex_lock(&s->lock);
	int pidfd = s->pidfd >= 0 ? fcntl(s->pidfd, F_DUPFD_CLOEXEC, 3) : -1;
	pthread_mutex_unlock(&s->lock);
	if (pidfd >= 0) {
		struct ident id = { .pid = s->pid, .uid = s->uid, .gid = s->gid,
				    .pidfd = pidfd, .start = s->proc_start };
		err = ident_verify_ex(&id, after, why, sizeof(why));
		close(pidfd);
	} else {
		char state;
		uint64_t start;
		err = ident_proc_stat(s->pid, &state, &start);
		if (!err && s->proc_start && start != s->proc_start)
			err = -ESRCH;
		snprintf(why, sizeof(why), "pid reused or gone");
	}
	if (!err)
		return true;
	/* Exited: nothing to read any more, but what it published is still its owner's. */
	if (err == -EACCES && !atomic_exchange(&s->ident_lost, true))
		log_warn("pid %d: %s; its mappings are no longer read and only root may read "
			 "its profile", (int)s->pid, why);
	return false;
}

bool session_may_read(struct session *s)
{
	return session_may_read_ex(s, false);
}

bool session_may_have_read(struct session *s)
{
	return session_may_read_ex(s, true);
}

int session_attach_maps(struct session *s)
{
	if (s->maps)
		return 0;
	/* Before anything of the process is read, and again after: a setuid exec or a reused
	 * pid in between means the maps belong to someone the peer may not see. */
	if (!session_may_read(s))
		return -EACCES;
	struct procmaps *m = procmaps_new_as(s->pid, s->uid);
	if (!m)
		return -ENOENT;
	if (!session_may_have_read(s)) {
		procmaps_free(m);
		return -EACCES;
	}
	s->maps = m;
	return 0;
}

int session_attach_parent_maps(struct session *s, pid_t ppid)
{
	if (s->maps || ppid <= 0 || ppid == s->pid)
		return -EINVAL;
	/* Only a parent of the same uid, checked as the process itself is (the pid comes from
	 * the message): a child must not read another user's mappings. */
	struct ident id = { .pid = ppid, .uid = s->uid, .gid = s->gid,
			    .pidfd = ident_pidfd_of(-1, ppid) };
	/* start time first: the check then ties it to the pidfd's (live) process */
	int err = id.pidfd < 0 || ident_start_time(ppid, &id.start) != 0
			  ? -ESRCH
			  : ident_verify(&id, NULL, 0);
	struct procmaps *m = NULL;
	if (!err) {
		if (!(m = procmaps_new_as(ppid, s->uid)))
			err = -ENOENT;
		else if ((err = ident_verify_ex(&id, true, NULL, 0)) != 0)
			procmaps_free(m);
	}
	ident_close(&id);
	if (err)
		return err;
	s->maps = m;
	return 0;
}

/* ---- state ------------------------------------------------------------------------------ */

bool session_allowed(const struct session *s, uid_t requester)
{
	return requester == 0 || (requester == s->uid && !atomic_load(&s->ident_lost));
}

/* ---- rings ------------------------------------------------------------------------------ */

int session_add_ring(struct session *s, uint32_t ring_id, int fd, uint32_t data_size)
{
	if (ring_id >= LLGO_MAX_RINGS || data_size != s->ring_data_size)
		return -EINVAL;
	if (!session_is_live(s))
		return -ESRCH;
	if (fd < 0) { /* a ring in the process memfd: a hint to look at ring_count now */
		if (s->memfd < 0)
			return -EINVAL;
		session_sync_rings(s);
		return 0;
	}
	if (s->memfd >= 0)
		return -EINVAL; /* memfd sessions send no ring descriptors */
	pthread_mutex_lock(&s->lock);
	int err = 0;
	if (!session_is_live(s))
		err = -ESRCH;
	else if (s->nrings >= LLGO_MAX_RINGS)
		err = -ENOSPC;
	else if (s->ring_ids[ring_id / 8] & (1u << (ring_id % 8)))
		err = -EEXIST;
	uint64_t bytes = (uint64_t)LLGO_RING_HEADER_SIZE + data_size;
	if (!err)
		err = session_take_ring(s, bytes);
	if (!err) {
		struct ring_reader r;
		err = ring_reader_map(&r, fd, ring_id, data_size);
		if (!err && (err = session_queue_locked(s, &r)) != 0)
			ring_reader_unmap(&r);
		if (err)
			session_give_ring(s, bytes);
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

void session_adopt_rings_locked(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->npending;
	if (n && s->nrings_adopted + n > s->cap_rings) {
		size_t cap = s->cap_rings ? s->cap_rings : 8;
		while (cap < s->nrings_adopted + n)
			cap *= 2;
		struct ring_reader *p = realloc(s->rings, cap * sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&s->lock);
			return; /* they stay pending; the next drain tries again */
		}
		s->rings = p;
		s->cap_rings = cap;
	}
	if (n) {
		memcpy(s->rings + s->nrings_adopted, s->pending, n * sizeof(*s->pending));
		s->nrings_adopted += n;
		s->npending = 0;
	}
	pthread_mutex_unlock(&s->lock);
}

/* ---- accounting ------------------------------------------------------------------------- */

/* sum over rings (ring.c's per-ring rules keep each ring's sampled == delivered + dropped +
 * corrupt) + lost_no_ring, counted as sampled and dropped; so the sum holds too. */
void session_account_locked(struct session *s, struct session_counts *out)
{
	struct ring_account sum = {
		.sampled = s->retired.sampled,
		.delivered = s->retired.delivered,
		.dropped = s->retired.dropped,
		.corrupt = s->retired.corrupt,
		.prior = s->retired.prior,
	};
	for (size_t i = 0; i < s->nrings_adopted; i++) {
		struct ring_account a;
		ring_reader_account(&s->rings[i], &a);
		ring_account_add(&sum, &a);
	}
	pthread_mutex_lock(&s->lock);
	if (s->ctl) {
		/* hostile: keep the highest value seen, so the count never goes back; at most
		 * LLGO_COUNT_MAX, so that sums cannot wrap */
		uint64_t lost = atomic_load_explicit(&s->ctl->lost_no_ring, memory_order_relaxed);
		if (lost > s->lost_no_ring && lost <= LLGO_SANE_COUNT_MAX)
			s->lost_no_ring = lost;
		uint64_t det = atomic_load_explicit(&s->ctl->lost_detached, memory_order_relaxed);
		if (det > s->lost_detached && det <= LLGO_SANE_COUNT_MAX)
			s->lost_detached = det;
		uint64_t rc = atomic_load_explicit(&s->ctl->reconnects, memory_order_relaxed);
		if (rc > s->reconnects && rc < (1ull << 32))
			s->reconnects = rc;
	}
	ring_account_lost(&sum, s->lost_no_ring);
	ring_account_detached(&sum, s->lost_detached);
	struct session_counts c = {
		.sampled = sum.sampled,
		.delivered = sum.delivered,
		.dropped = sum.dropped,
		.corrupt = sum.corrupt,
		.prior = sum.prior,
		.no_ring = sum.no_ring,
		.detached = sum.detached,
		.reconnects = s->reconnects,
	};
	s->cached = c;
	pthread_mutex_unlock(&s->lock);
	*out = c;
}

void session_counts_cached(struct session *s, struct session_counts *out)
{
	pthread_mutex_lock(&s->lock);
	*out = s->cached;
	pthread_mutex_unlock(&s->lock);
}

/* ---- exit --------------------------------------------------------------------------------- */

bool session_retire_locked(struct session *s)
{
	if (!session_is_live(s))
		return false;
	session_adopt_rings_locked(s);
	struct session_counts c;
	session_account_locked(s, &c);
	/* Everything counted so far now lives in `retired` alone. */
	s->retired = c;
	s->retired.sampled -= s->lost_no_ring + s->lost_detached;
	s->retired.dropped -= s->lost_no_ring + s->lost_detached;
	pthread_mutex_lock(&s->lock);
	if (s->ctl)
		s->last_rate_word = atomic_load_explicit(&s->ctl->rate_word, memory_order_relaxed);
	session_unmap_all(s);
	free(s->ring_ids); /* add_ring checks the state first */
	s->ring_ids = NULL;
	/* An exited process's pidfd is of no more use (a read now checks the pid's start time
	 * and finds it gone or reused): exited sessions kept for their profiles hold no
	 * descriptor. */
	if (s->pidfd >= 0) {
		close(s->pidfd);
		s->pidfd = -1;
	}
	session_give_slot(s);
	s->exit_ns = session_now_ns(CLOCK_MONOTONIC);
	atomic_store_explicit(&s->state, LLGO_PROC_EXITED, memory_order_release);
	pthread_mutex_unlock(&s->lock);
	return true;
}

/* ---- rate ------------------------------------------------------------------------------- */

uint64_t session_rate(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	if (s->ctl)
		s->last_rate_word = atomic_load_explicit(&s->ctl->rate_word, memory_order_relaxed);
	uint64_t r = llgo_rate_from_word(s->last_rate_word);
	pthread_mutex_unlock(&s->lock);
	if (r > LLGO_RATE_MAX) /* a hostile word */
		r = LLGO_RATE_MAX;
	return r;
}

int session_set_rate(struct session *s, uint64_t rate, uint64_t *old_rate, uint64_t *new_rate)
{
	int64_t word = llgo_rate_to_word(rate);
	pthread_mutex_lock(&s->lock);
	if (!s->ctl) {
		pthread_mutex_unlock(&s->lock);
		return -ESRCH;
	}
	int64_t old = atomic_load_explicit(&s->ctl->rate_word, memory_order_relaxed);
	/* release: the shim's fast path loads rate_word relaxed and needs no other data; the
	 * release only orders our earlier writes to the page (none today) before the rate */
	atomic_store_explicit(&s->ctl->rate_word, word, memory_order_release);
	atomic_store_explicit(&s->ctl->want_rate_word, word, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->ctl->rate_changes, 1, memory_order_relaxed);
	s->last_rate_word = word;
	s->rate_changes++;
	pthread_mutex_unlock(&s->lock);
	uint64_t o = llgo_rate_from_word(old);
	*old_rate = o > LLGO_RATE_MAX ? LLGO_RATE_MAX : o;
	*new_rate = llgo_rate_from_word(word);
	return 0;
}

void session_list_entry(struct session *s, struct llgo_list_entry *e)
{
	memset(e, 0, sizeof(*e));
	struct session_counts c;
	session_counts_cached(s, &c);
	struct bucket_stats bs;
	bucket_table_stats(s->buckets, &bs);
	e->pid = (uint32_t)s->pid;
	e->uid = (uint32_t)s->uid;
	/* detached first: set when the loop reads DETACH, before the final drain ends the
	 * session (packet.c) */
	e->state = atomic_load_explicit(&s->detached, memory_order_relaxed) ? LLGO_PROC_DETACHED
		   : session_is_live(s)					   ? LLGO_PROC_LIVE
									   : LLGO_PROC_EXITED;
	pthread_mutex_lock(&s->lock);
	e->rings = s->nrings;
	pthread_mutex_unlock(&s->lock);
	e->rate = session_rate(s);
	e->sampled = c.sampled;
	e->delivered = c.delivered;
	e->dropped = c.dropped;
	e->corrupt = c.corrupt;
	e->buckets = bs.buckets;
	e->start_time_ns = s->attach_ns;
	memcpy(e->comm, s->comm, sizeof(e->comm));
	e->verify_samples = atomic_load(&s->verify_samples);
	e->verify_agree = atomic_load(&s->verify_agree);
	e->unwind_mode = __atomic_load_n(&s->unwind_mode, __ATOMIC_RELAXED); /* a join sets it */
	/* no drain_lock: LIST is answered in the event loop, which a long drain must not stop */
	e->unwound = atomic_load_explicit(&s->unwound, memory_order_relaxed);
	e->truncated = atomic_load_explicit(&s->truncated, memory_order_relaxed);
	e->budget_flags = budget_flags(session_budget(s), s->uid);
	if (atomic_load(&s->buckets_over))
		e->budget_flags |= LLGO_BUDGET_BUCKET_BYTES;
	e->budget_dropped = atomic_load(&s->budget_dropped);
}

void session_send_fp_tables(struct session *s)
{
	uint64_t ranges[LLGO_CTL_FP_RANGES][2], roots[LLGO_CTL_ROOTS];
	uint32_t nranges = 0, nroots = 0;
	if (!unwind_tables(s->unwind, s->maps, ranges, LLGO_CTL_FP_RANGES, &nranges, roots,
			   LLGO_CTL_ROOTS, &nroots))
		return;
	pthread_mutex_lock(&s->lock);
	struct llgo_ctl *c = s->ctl;
	if (c) {
		/* Writer side of the sequence count: odd (release) before the tables, even
		 * (release) after; the shim's acquire loads before and after its read pair with
		 * these. The count is the daemon's own (never read back from the page). */
		uint32_t seq = s->fp_seq;
		atomic_store_explicit(&c->fp_seq, seq + 1, memory_order_release);
		atomic_thread_fence(memory_order_release);
		for (uint32_t i = 0; i < nranges; i++) {
			__atomic_store_n(&c->fp_ranges[i].lo, ranges[i][0], __ATOMIC_RELAXED);
			__atomic_store_n(&c->fp_ranges[i].hi, ranges[i][1], __ATOMIC_RELAXED);
		}
		for (uint32_t i = 0; i < nroots; i++)
			__atomic_store_n(&c->root_pcs[i], roots[i], __ATOMIC_RELAXED);
		__atomic_store_n(&c->fp_count, nranges, __ATOMIC_RELAXED);
		__atomic_store_n(&c->root_count, nroots, __ATOMIC_RELAXED);
		atomic_store_explicit(&c->fp_seq, seq + 2, memory_order_release);
		s->fp_seq = seq + 2;
	}
	pthread_mutex_unlock(&s->lock);
}
