// SPDX-License-Identifier: MIT
/*
 * workq.c: the socket server's worker pools. Three of them: shim workers
 * (SERVER_SHIM_WORKERS) run HELLO and nothing else, so attaching never waits; exit workers
 * (SERVER_EXIT_WORKERS) run BYE and the final drain of a process that exited, which may take a
 * while with full rings; client workers (opts.client_workers) run SNAPSHOT, SET_RATE and
 * VERIFY, so a slow snapshot delays neither the loop, nor attaching processes, nor (up to the
 * pool size) other clients. In the exit and client pools a uid other than root runs at most
 * half the workers at once, so one user's slow jobs (a flood of exits, slow requests) never
 * hold them all: another user's job waits at most for a worker of the other half.
 *
 * Left to others: what a job does (jobs.c) and what becomes of a connection a stopped pool
 * will not run (conn.c): the callbacks workq_init takes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server_impl.h"

void workq_push(struct workq *q, struct conn *c, uint16_t job)
{
	c->job = job;
	c->job_next = NULL;
	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		pthread_mutex_unlock(&q->lock);
		q->drop(c);
		return;
	}
	if (q->tail)
		q->tail->job_next = c;
	else
		q->head = c;
	q->tail = c;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

static void *workq_worker(void *arg)
{
	struct workq *q = arg;
	for (;;) {
		pthread_mutex_lock(&q->lock);
		while (!q->stop && !q->head)
			pthread_cond_wait(&q->cond, &q->lock);
		if (q->stop) {
			pthread_mutex_unlock(&q->lock);
			return NULL;
		}
		struct conn *c = q->head, *prev = NULL;
		if (q->per_uid_max) {
			/* the first job whose uid is under its share of the workers */
			for (; c; prev = c, c = c->job_next) {
				uid_t u = c->cred.uid;
				unsigned n = 0;
				for (unsigned i = 0; i < q->nthreads; i++)
					n += q->running_used[i] && q->running[i] == u;
				if (u == 0 || n < q->per_uid_max)
					break;
			}
			if (!c) { /* every queued job's uid has its share running: wait */
				pthread_cond_wait(&q->cond, &q->lock);
				pthread_mutex_unlock(&q->lock);
				continue;
			}
		}
		if (prev)
			prev->job_next = c->job_next;
		else
			q->head = c->job_next;
		if (q->tail == c)
			q->tail = prev;
		unsigned slot = 0;
		if (q->per_uid_max) {
			while (q->running_used[slot])
				slot++;
			q->running_used[slot] = true;
			q->running[slot] = c->cred.uid;
		}
		pthread_mutex_unlock(&q->lock);
		q->run(q->arg, c);
		if (q->per_uid_max) {
			pthread_mutex_lock(&q->lock);
			q->running_used[slot] = false;
			pthread_cond_broadcast(&q->cond);
			pthread_mutex_unlock(&q->lock);
		}
	}
}

int workq_init(struct workq *q, unsigned n, bool per_uid, void (*run)(void *arg, struct conn *c),
	       void (*drop)(struct conn *c), void *arg)
{
	memset(q, 0, sizeof(*q));
	q->run = run;
	q->drop = drop;
	q->arg = arg;
	q->per_uid_max = !per_uid ? 0 : n > 1 ? n / 2 : 1;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->threads = calloc(n, sizeof(*q->threads));
	q->running = calloc(n, sizeof(*q->running));
	q->running_used = calloc(n, sizeof(*q->running_used));
	q->nthreads = n;
	q->inited = true;
	return q->threads && q->running && q->running_used ? 0 : -ENOMEM;
}

int workq_start(struct workq *q, const char *name)
{
	for (; q->started < q->nthreads; q->started++) {
		int err = pthread_create(&q->threads[q->started], NULL, workq_worker, q);
		if (err)
			return -err;
		pthread_setname_np(q->threads[q->started], name); /* (top -H, perf) */
	}
	return 0;
}

/* Stop the workers after their current job; queued jobs are dropped with their conns. */
void workq_stop(struct workq *q)
{
	if (!q->inited)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	for (unsigned i = 0; i < q->started; i++)
		pthread_join(q->threads[i], NULL);
	q->started = 0;
	pthread_mutex_lock(&q->lock);
	struct conn *c = q->head;
	q->head = q->tail = NULL;
	pthread_mutex_unlock(&q->lock);
	while (c) {
		struct conn *n = c->job_next;
		q->drop(c);
		c = n;
	}
}

void workq_destroy(struct workq *q)
{
	if (!q->inited)
		return;
	q->inited = false;
	free(q->threads);
	q->threads = NULL;
	free(q->running);
	free(q->running_used);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
}
