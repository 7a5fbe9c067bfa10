// SPDX-License-Identifier: MIT
/*
 * session_registry.c: the registry of sessions, one per attached process and the exited ones
 * kept for snapshots. Lookups (session_lookup: the live session of a pid, else its newest
 * exited one), lists (oldest first), the search for a process's live session at HELLO, the
 * claims that give each memfd to one session only, and eviction: exited sessions are kept
 * within three limits, oldest evicted first: an age, a count per uid, and keep_exited for
 * all (taken from the uid that holds the most). Its functions keep the session_ prefix of
 * the API they belong to (session.h).
 *
 * The registry makes its sessions (session_new): each gets the registry's bucket caps, the
 * budgets it charges and the memfd claims (claims.c) to hold, so a session never calls back
 * into its registry; the final drain (drain.c) reports a session's exit here
 * (session_registry_exited), which session_wait_exited waits for.
 *
 * Left to others: a session itself (session.c), who registers and looks up (jobs.c,
 * server.c, snapshot.c, http.c). The registry lock is innermost: nothing else is locked
 * under it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../server/ident.h"
#include "session.h"

struct session_registry {
	pthread_mutex_t lock;
	pthread_cond_t changed; /* a session exited (broadcast) */
	struct session *head;   /* newest first */
	size_t nexited;
	unsigned keep_exited;
	uint64_t next_seq;
	uint64_t max_buckets, max_bytes;
	struct budget *budget;
	unsigned keep_exited_per_uid;
	uint64_t max_age_ns;
	uint64_t evicted;
	struct claims *claims; /* the memfds its sessions hold (claims.c) */
};

struct session_registry *session_registry_new(unsigned keep_exited, uint64_t max_buckets,
					      uint64_t max_bytes)
{
	struct session_registry *reg = calloc(1, sizeof(*reg));
	if (!reg)
		return NULL;
	pthread_mutex_init(&reg->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&reg->changed, &ca);
	pthread_condattr_destroy(&ca);
	reg->keep_exited = keep_exited;
	reg->max_buckets = max_buckets;
	reg->max_bytes = max_bytes;
	reg->claims = claims_new();
	if (!reg->claims) {
		pthread_cond_destroy(&reg->changed);
		pthread_mutex_destroy(&reg->lock);
		free(reg);
		return NULL;
	}
	return reg;
}

void session_registry_set_limits(struct session_registry *reg, struct budget *b,
				 unsigned keep_exited_per_uid, unsigned max_age_s)
{
	pthread_mutex_lock(&reg->lock);
	reg->budget = b;
	reg->keep_exited_per_uid = keep_exited_per_uid;
	reg->max_age_ns = (uint64_t)max_age_s * 1000000000ull;
	pthread_mutex_unlock(&reg->lock);
}

void session_registry_set_keep(struct session_registry *reg, unsigned keep_exited,
			       unsigned keep_exited_per_uid, unsigned max_age_s,
			       uint64_t max_buckets, uint64_t max_bytes)
{
	pthread_mutex_lock(&reg->lock);
	reg->keep_exited = keep_exited;
	reg->keep_exited_per_uid = keep_exited_per_uid;
	reg->max_age_ns = (uint64_t)max_age_s * 1000000000ull;
	reg->max_buckets = max_buckets;
	reg->max_bytes = max_bytes;
	pthread_mutex_unlock(&reg->lock);
}

uint64_t session_registry_evicted(struct session_registry *reg)
{
	pthread_mutex_lock(&reg->lock);
	uint64_t n = reg->evicted;
	pthread_mutex_unlock(&reg->lock);
	return n;
}

struct budget *session_registry_budget(struct session_registry *reg)
{
	return reg->budget;
}

void session_registry_free(struct session_registry *reg)
{
	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	struct session *s = reg->head;
	reg->head = NULL;
	pthread_mutex_unlock(&reg->lock);
	while (s) {
		struct session *next = s->next;
		/* what it had of the registry goes with it (a session still referenced
		 * elsewhere charges and claims nothing from now on) */
		s->reg = NULL;
		s->budget = NULL;
		s->claims = NULL;
		session_put(s);
		s = next;
	}
	pthread_cond_destroy(&reg->changed);
	pthread_mutex_destroy(&reg->lock);
	claims_free(reg->claims);
	free(reg);
}

/* ---- making sessions ------------------------------------------------------------------- */

static void session_sanitize_comm(char *dst, const char *src)
{
	size_t i = 0;
	for (; src && i < LLGO_COMM_LEN - 1 && src[i]; i++) {
		unsigned char c = (unsigned char)src[i];
		dst[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	dst[i] = '\0';
}

struct session *session_new(struct session_registry *reg, pid_t pid, uid_t uid, gid_t gid,
			    const char *comm, uint32_t ring_data_size)
{
	struct session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	/* what the registry gives each of its sessions: its caps (a reload changes them:
	 * session_registry_set_keep), the budgets it charges and the memfd claims */
	pthread_mutex_lock(&reg->lock);
	uint64_t max_buckets = reg->max_buckets, max_bytes = reg->max_bytes;
	s->budget = reg->budget;
	s->claims = reg->claims;
	pthread_mutex_unlock(&reg->lock);
	s->buckets = bucket_table_new(max_buckets, max_bytes);
	s->ring_ids = calloc(LLGO_MAX_RINGS / 8, 1);
	if (!s->buckets || !s->ring_ids) {
		bucket_table_free(s->buckets);
		free(s->ring_ids);
		free(s);
		return NULL;
	}
	s->live_fd = -1;
	s->pid = pid;
	s->uid = uid;
	s->gid = gid;
	if (comm && comm[0]) {
		session_sanitize_comm(s->comm, comm);
	} else {
		/* The hello left it empty: the kernel's name is good enough. */
		char path[64], buf[LLGO_COMM_LEN] = "";
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = read(fd, buf, sizeof(buf) - 1);
			buf[n > 0 ? n : 0] = '\0';
			close(fd);
		}
		buf[strcspn(buf, "\n")] = '\0';
		session_sanitize_comm(s->comm, buf);
	}
	s->attach_ns = session_now_ns(CLOCK_REALTIME);
	char state;
	if (ident_proc_stat(pid, &state, &s->proc_start) != 0)
		s->proc_start = 0;
	s->ring_data_size = ring_data_size;
	s->memfd = -1;
	s->pidfd = -1;
	atomic_init(&s->ident_lost, false);
	s->reg = reg;
	atomic_init(&s->refs, 1);
	atomic_init(&s->state, LLGO_PROC_LIVE);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->snapshot_lock, NULL);
	pthread_mutex_init(&s->drain_lock, NULL);
	return s;
}

/* ---- the list ---------------------------------------------------------------------------- */

void session_register(struct session *s)
{
	struct session_registry *reg = s->reg;
	session_get(s);
	pthread_mutex_lock(&reg->lock);
	s->seq = ++reg->next_seq;
	s->next = reg->head;
	reg->head = s;
	pthread_mutex_unlock(&reg->lock);
}

bool session_newer(const struct session *a, const struct session *b)
{
	if (a->pid == b->pid && a->proc_start == b->proc_start && a->conn_serial &&
	    b->conn_serial)
		return a->conn_serial > b->conn_serial;
	return a->seq > b->seq;
}

/* Whether s is what session_lookup returns for its pid rather than o. */
static bool session_shadows(const struct session *o, const struct session *s)
{
	bool olive = session_is_live(o), live = session_is_live(s);
	return (olive && !live) || (olive == live && session_newer(o, s));
}

struct session *session_lookup(struct session_registry *reg, pid_t pid)
{
	struct session *best = NULL;
	pthread_mutex_lock(&reg->lock);
	/* a live one, else the newest exited one */
	for (struct session *s = reg->head; s; s = s->next) {
		if (s->pid == pid && (!best || session_shadows(s, best)))
			best = s;
	}
	if (best)
		session_get(best);
	pthread_mutex_unlock(&reg->lock);
	return best;
}

size_t session_list(struct session_registry *reg, bool live_only, struct session ***out)
{
	*out = NULL;
	pthread_mutex_lock(&reg->lock);
	size_t n = 0;
	for (struct session *s = reg->head; s; s = s->next)
		n++;
	struct session **v = n ? calloc(n, sizeof(*v)) : NULL;
	size_t k = 0;
	if (v) {
		for (struct session *s = reg->head; s; s = s->next) {
			bool live = session_is_live(s);
			if (live_only && !live)
				continue;
			if (!live_only) {
				/* one per pid: the session session_lookup would return */
				bool shadowed = false;
				for (struct session *o = reg->head; o && !shadowed; o = o->next)
					shadowed = o != s && o->pid == s->pid &&
						   session_shadows(o, s);
				if (shadowed)
					continue;
			}
			v[k++] = session_get(s);
		}
	}
	pthread_mutex_unlock(&reg->lock);
	/* oldest first */
	for (size_t i = 0; i < k / 2; i++) {
		struct session *t = v[i];
		v[i] = v[k - 1 - i];
		v[k - 1 - i] = t;
	}
	if (k == 0) {
		free(v);
		v = NULL;
	}
	*out = v;
	return k;
}

void session_list_release(struct session **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		session_put(v[i]);
	free(v);
}

/* Unlink the oldest exited session (of uid when by_uid; exited before cutoff when cutoff is
 * non-zero) and push it on *out. Under reg->lock. */
static bool session_evict_one_locked(struct session_registry *reg, bool by_uid, uid_t uid,
				     uint64_t cutoff, struct session **out)
{
	struct session **victim = NULL;
	for (struct session **pp = &reg->head; *pp; pp = &(*pp)->next) {
		struct session *o = *pp;
		if (session_is_live(o) || (by_uid && o->uid != uid) ||
		    (cutoff && o->exit_ns >= cutoff))
			continue;
		victim = pp; /* the list is newest first: the last one is oldest */
	}
	if (!victim)
		return false;
	struct session *v = *victim;
	*victim = v->next;
	v->next = *out;
	*out = v;
	reg->nexited--;
	reg->evicted++;
	return true;
}

static size_t session_exited_of_locked(struct session_registry *reg, uid_t uid)
{
	size_t n = 0;
	for (struct session *o = reg->head; o; o = o->next)
		n += !session_is_live(o) && o->uid == uid;
	return n;
}

static void session_expire_locked(struct session_registry *reg, struct session **out)
{
	if (!reg->max_age_ns)
		return;
	uint64_t now = session_now_ns(CLOCK_MONOTONIC);
	if (now <= reg->max_age_ns)
		return;
	while (session_evict_one_locked(reg, false, 0, now - reg->max_age_ns, out))
		;
}

/*
 * Called with reg->lock held after a session of uid became EXITED. Exited sessions are kept
 * for snapshots, within three limits, oldest dropped first: an age; a count per uid (so one
 * user's short-lived processes never push out another user's); and a count for all, taken
 * from the uid that holds the most. Returns the evicted sessions (linked by next) for the
 * caller to put outside the lock.
 */
static struct session *session_evict_locked(struct session_registry *reg, uid_t uid)
{
	struct session *evicted = NULL;
	session_expire_locked(reg, &evicted);
	if (reg->keep_exited_per_uid) {
		size_t n = session_exited_of_locked(reg, uid);
		while (n > reg->keep_exited_per_uid &&
		       session_evict_one_locked(reg, true, uid, 0, &evicted))
			n--;
	}
	while (reg->nexited > reg->keep_exited) {
		/* the uid holding the most exited sessions gives one up */
		uid_t most = uid;
		size_t best = 0;
		for (struct session *o = reg->head; o; o = o->next) {
			if (session_is_live(o))
				continue;
			size_t c = session_exited_of_locked(reg, o->uid);
			if (c > best) {
				best = c;
				most = o->uid;
			}
		}
		if (!session_evict_one_locked(reg, best > 0, most, 0, &evicted))
			break;
	}
	return evicted;
}

size_t session_registry_expire(struct session_registry *reg)
{
	struct session *evicted = NULL;
	pthread_mutex_lock(&reg->lock);
	session_expire_locked(reg, &evicted);
	pthread_mutex_unlock(&reg->lock);
	size_t n = 0;
	while (evicted) {
		struct session *next = evicted->next;
		session_put(evicted);
		evicted = next;
		n++;
	}
	return n;
}

/* After s became EXITED (session_retire_locked): count it and evict what the limits say. */
void session_registry_exited(struct session_registry *reg, struct session *s)
{
	pthread_mutex_lock(&reg->lock);
	bool listed = false;
	for (struct session *o = reg->head; o; o = o->next)
		listed |= o == s;
	struct session *evicted = NULL;
	if (listed) {
		reg->nexited++;
		evicted = session_evict_locked(reg, s->uid);
	}
	pthread_cond_broadcast(&reg->changed);
	pthread_mutex_unlock(&reg->lock);
	while (evicted) {
		struct session *n = evicted->next;
		session_put(evicted);
		evicted = n;
	}
}

struct session *session_find_process(struct session_registry *reg, pid_t pid, uint64_t start)
{
	struct session *found = NULL;
	pthread_mutex_lock(&reg->lock);
	for (struct session *s = reg->head; s; s = s->next) {
		if (s->pid == pid && session_is_live(s) && s->proc_start == start) {
			found = session_get(s);
			break;
		}
	}
	pthread_mutex_unlock(&reg->lock);
	return found;
}

struct session *session_find_live(struct session_registry *reg, pid_t pid, uint64_t start,
				  int memfd)
{
	struct session *found = NULL;
	pthread_mutex_lock(&reg->lock);
	for (struct session *s = reg->head; s; s = s->next) {
		if (s->pid == pid && session_is_live(s) && (!start || s->proc_start == start) &&
		    session_same_memfd(s, memfd)) {
			found = session_get(s);
			break;
		}
	}
	pthread_mutex_unlock(&reg->lock);
	return found;
}

bool session_wait_exited(struct session *s, unsigned timeout_ms)
{
	struct session_registry *reg = s->reg;
	if (!reg)
		return !session_is_live(s);
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&reg->lock);
	int rc = 0;
	while (session_is_live(s) && rc == 0)
		rc = pthread_cond_timedwait(&reg->changed, &reg->lock, &dl);
	pthread_mutex_unlock(&reg->lock);
	return !session_is_live(s);
}
