// SPDX-License-Identifier: MIT
/*
 * wthread.c: a thread that sleeps on a condition variable (CLOCK_MONOTONIC) until it is woken,
 * stopped or a timeout passes; the drain thread (drain.c) and the peak thread (peak.c) are
 * two. What the thread does between sleeps is theirs.
 */
#include <errno.h>
#include <time.h>

#include "wthread.h"

void wthread_init(struct wthread *w)
{
	w->started = false;
	w->stop = w->woken = false;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
}

int wthread_start(struct wthread *w, void *(*fn)(void *), void *arg, const char *name)
{
	int err = pthread_create(&w->thread, NULL, fn, arg);
	if (err)
		return -err;
	pthread_setname_np(w->thread, name);
	w->started = true;
	return 0;
}

int wthread_sleep(struct wthread *w, uint64_t timeout_ns)
{
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	uint64_t ns = (uint64_t)dl.tv_nsec + timeout_ns;
	dl.tv_sec += (time_t)(ns / 1000000000ull);
	dl.tv_nsec = (long)(ns % 1000000000ull);
	pthread_mutex_lock(&w->lock);
	while (!w->stop && !w->woken) {
		if (pthread_cond_timedwait(&w->cond, &w->lock, &dl) == ETIMEDOUT)
			break;
	}
	int r = w->stop ? -1 : w->woken ? 1 : 0;
	w->woken = false;
	pthread_mutex_unlock(&w->lock);
	return r;
}

void wthread_wake(struct wthread *w)
{
	pthread_mutex_lock(&w->lock);
	w->woken = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void wthread_stop(struct wthread *w)
{
	if (!w->started)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	w->started = false;
}

void wthread_destroy(struct wthread *w)
{
	wthread_stop(w);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}
