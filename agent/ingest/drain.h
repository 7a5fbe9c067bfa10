/* SPDX-License-Identifier: MIT */
/*
 * drain.h: moving records from a session's rings into its bucket table (drain.c), and the
 * drain thread that does so for every live session. Every drain of a session runs under its
 * drain_lock (session.h states the lock order); snapshots read the table beside it
 * (snapshot.c).
 */
#ifndef LLGO_AGENT_DRAIN_H
#define LLGO_AGENT_DRAIN_H

#include "session.h"

struct drain;

/* Drain every ring of s once (no-op once exited); returns the records bucketed. */
size_t drain_session(struct session *s);
/* The shim is gone: drain a last time, then unmap rings and mark the session exited. */
void drain_session_exit(struct session *s);
/* auto mode: find the frame-pointer code of the process's objects and send the tables to
 * its control page (at HELLO, before the ACK lets the program run). */
void drain_prepare_unwind(struct session *s);
/* Re-read the process's maps if a pc fell outside them (force: always), at most every
 * DRAIN_REFRESH_MS unless forced; only while the process is alive. */
void drain_refresh_maps(struct session *s, bool force);

/* The drain thread: polls live sessions, adaptively (10 ms while some ring is busy, up to
 * 100 ms otherwise). */
struct drain *drain_new(struct session_registry *reg);
/* A pass that finds a session asking for a peak scan (peak_want) calls wake(arg): the peak
 * thread's waker (server.c). Before drain_start. */
void drain_on_peak(struct drain *d, void (*wake)(void *arg), void *arg);
int drain_start(struct drain *d);
/* Poll soon (a ring was added). */
void drain_wake(struct drain *d);
void drain_stop(struct drain *d);
void drain_free(struct drain *d);

#endif
