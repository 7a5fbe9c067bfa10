// SPDX-License-Identifier: MIT
/*
 * claims.c: one session per memfd. A process memfd, a control page or a live-object table
 * (known by device and inode) backs one session only, from its attach until the session
 * unmaps it: whoever hands the daemon a file another process's session holds is refused
 * (-EBUSY), so one process can never feed or read another's rings or table. The registry
 * (session_registry.c) owns one table for all its sessions, which reach it as s->claims:
 * session.c claims the memfd or control page, inuse.c the live-object table.
 *
 * The table: open addressing, linear probing, at most half full; owner NULL marks an empty
 * slot. Its lock is innermost: nothing else is locked under it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "session.h"

struct claim {
	uint64_t dev, ino;
	const struct session *owner; /* compared, never followed */
	pid_t pid;                   /* the owner's process, as it was at the claim */
	uint64_t start;
};

struct claims {
	pthread_mutex_t lock;
	struct claim *v;
	size_t cap, n;
};

struct claims *claims_new(void)
{
	struct claims *c = calloc(1, sizeof(*c));
	if (c)
		pthread_mutex_init(&c->lock, NULL);
	return c;
}

void claims_free(struct claims *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->v);
	free(c);
}

static size_t claims_home(const struct claims *c, uint64_t dev, uint64_t ino)
{
	uint64_t h = (ino ^ (dev * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL;
	return (size_t)(h >> 32) & (c->cap - 1);
}

/* The slot holding (dev, ino), else the empty slot it would go to (c->lock held). */
static size_t claims_slot(const struct claims *c, uint64_t dev, uint64_t ino)
{
	size_t mask = c->cap - 1, i = claims_home(c, dev, ino);
	while (c->v[i].owner && (c->v[i].dev != dev || c->v[i].ino != ino))
		i = (i + 1) & mask;
	return i;
}

static int claims_grow_locked(struct claims *c)
{
	size_t cap = c->cap ? c->cap * 2 : 64;
	struct claim *v = calloc(cap, sizeof(*v)), *old = c->v;
	if (!v)
		return -ENOMEM;
	size_t old_cap = c->cap;
	c->v = v;
	c->cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i].owner)
			v[claims_slot(c, old[i].dev, old[i].ino)] = old[i];
	free(old);
	return 0;
}

int claims_take(struct claims *c, uint64_t dev, uint64_t ino, const struct session *s)
{
	if (!c)
		return 0; /* the registry is gone (its sessions no longer claim) */
	int err = 0;
	pthread_mutex_lock(&c->lock);
	if ((c->n + 1) * 2 > c->cap)
		err = claims_grow_locked(c);
	if (!err) {
		struct claim *e = &c->v[claims_slot(c, dev, ino)];
		if (!e->owner) {
			*e = (struct claim){ dev, ino, s, s->pid, s->proc_start };
			c->n++;
		} else if (e->owner != s) {
			/* the same process (its start time known): a HELLO that replaces its
			 * session, which ends right after */
			if (e->start && e->pid == s->pid && e->start == s->proc_start)
				e->owner = s;
			else
				err = -EBUSY;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

void claims_give(struct claims *c, uint64_t dev, uint64_t ino, const struct session *s)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	size_t mask = c->cap - 1;
	size_t i = c->cap ? claims_slot(c, dev, ino) : 0;
	if (c->cap && c->v[i].owner == s) {
		/* Backward shift: an entry after the hole moves into it unless its home lies
		 * between the hole and itself, so that every probe run stays unbroken. */
		for (size_t j = (i + 1) & mask; c->v[j].owner; j = (j + 1) & mask) {
			size_t h = claims_home(c, c->v[j].dev, c->v[j].ino);
			if (((j - h) & mask) >= ((j - i) & mask)) {
				c->v[i] = c->v[j];
				i = j;
			}
		}
		c->v[i].owner = NULL;
		c->n--;
	}
	pthread_mutex_unlock(&c->lock);
}
