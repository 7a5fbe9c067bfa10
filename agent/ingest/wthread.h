/* SPDX-License-Identifier: MIT */
/*
 * wthread.h: a thread that sleeps until it is woken, stopped or a timeout passes (wthread.c):
 * the drain thread (drain.c) and the peak thread (peak.c).
 */
#ifndef LLGO_AGENT_WTHREAD_H
#define LLGO_AGENT_WTHREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct wthread {
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	bool stop, woken;    /* under lock */
};

void wthread_init(struct wthread *w);
int wthread_start(struct wthread *w, void *(*fn)(void *), void *arg, const char *name);
/* Sleep until woken, stopped or timeout_ns passed: -1 stopped, 1 woken, 0 the timeout. */
int wthread_sleep(struct wthread *w, uint64_t timeout_ns);
void wthread_wake(struct wthread *w);
/* Stop the thread and join it (a no-op when it was not started). */
void wthread_stop(struct wthread *w);
void wthread_destroy(struct wthread *w);

#endif
