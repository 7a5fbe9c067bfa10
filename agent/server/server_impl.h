/* SPDX-License-Identifier: MIT */
/*
 * server_impl.h: the socket server's own objects, shared by the files it is made of and
 * included by nothing else:
 *   server.c  listening (systemd's socket or our own), the event loop, settling, processes
 *             taken back after a restart, lifetime;
 *   conn.c    connections (accept, identity, budgets, close) and the answer queue;
 *   packet.c  every packet read by the loop: validation and dispatch;
 *   workq.c   the worker pools (shim, exit, client) and their per-uid share;
 *   jobs.c    what the workers run: HELLO, BYE, a process's exit, LIST, SNAPSHOT (through
 *             snapshot.c), SET_RATE, VERIFY;
 *   server_settle.c  waiting for the loop to catch up with a session's packets or a HELLO.
 * Each calls only the files below it in this list (and server.c all of them): the pools run
 * jobs and drop connections through the callbacks workq_init takes.
 *
 * Ownership: every connection is registered with EPOLLONESHOT, so at most one thread handles
 * it at a time: the loop reads one packet and handles it at once or hands the connection to a
 * worker (workq_push), which re-arms it when done (conn_rearm), waits for the peer to read an
 * answer (conn_answered), or ends it (conn_end).
 */
#ifndef LLGO_AGENT_SERVER_IMPL_H
#define LLGO_AGENT_SERVER_IMPL_H

#include <sys/socket.h>

#include "../output/snapshot.h"
#include "ident.h"
#include "server.h"
#include "vouch.h"

#define SERVER_SHIM_WORKERS 2u
#define SERVER_EXIT_WORKERS 2u
#define SERVER_CLIENT_WORKERS 4u
#define SERVER_MAX_WORKERS 64u
#define SERVER_SEND_TIMEOUT_S 5
#define SERVER_SETTLE_MS 200u
#define SERVER_MAX_CONNS 65536u
/* Descriptors a live profiled process holds in all: its socket, its memfd, its session's
 * pidfd and the exit watch's copy (ring mappings and the live table's are closed; an exited
 * session holds none). */
#define SERVER_FDS_PER_CONN 4u
/* How long accepting pauses when the daemon is out of descriptors and has no spare left:
 * a pending connection would otherwise wake the loop without end. */
#define SERVER_ACCEPT_PAUSE_MS 100u
#define SERVER_JOB_EXIT 0xffffu /* not a message type: the peer is gone */
#define SERVER_MAX_OUT_BYTES (512ull << 20) /* unsent answers, all connections together */
#define SERVER_OUT_SCAN_MS 250
/* A connection that sends nothing this long after accept is shut down (shims send HELLO and
 * clients their request at once): idle connections cannot pile up. */
#define SERVER_FIRST_PACKET_MS 10000
#define SERVER_IDLE_SCAN_MS 1000

enum conn_kind {
	CONN_NEW,
	CONN_SHIM,
	CONN_PIDFD, /* a process taken back after a restart: readable when it exits */
	CONN_CLIENT,
};

struct conn {
	struct server *srv;
	int fd;
	enum conn_kind kind;
	struct ucred cred;
	struct ident id;         /* the peer pinned at accept (ident.c); pidfd -1 if none */
	bool holds_conn;         /* charged to its uid's connection budget (budget.c) */
	/* The loop's: accept time, and whether a packet came (else the idle scan shuts it). */
	int64_t accepted_ms;
	bool seen_packet;
	uint64_t serial; /* accept order, 1..: the order the peers connected in */
	struct session *session; /* shim connections, after HELLO */
	struct conn *prev, *next; /* srv->conns, under conns_lock */
	/* The job a worker runs next (one at most: EPOLLONESHOT). */
	struct conn *job_next;
	uint16_t job;
	int job_fd;
	unsigned char req[128];
	/* The answer being sent: DATA packets of at most out_chunk payload bytes from out, then
	 * end. Owned by whoever owns the connection (a worker, or the loop once armed for
	 * EPOLLOUT). out_waiting, out_deadline_ms and out_counted change under conns_lock. */
	struct buf out;
	size_t out_off, out_chunk;
	struct llgo_msg_end end;
	bool out_end;          /* end not sent yet */
	bool out_waiting;      /* armed for EPOLLOUT: the rest goes out from the loop */
	uint64_t out_counted;  /* bytes counted in srv->out_bytes */
	int64_t out_deadline_ms;
};

struct workq {
	/* workq_init's: run a job (jobs_run), drop a connection the pool will not run
	 * (conn_close) */
	void (*run)(void *arg, struct conn *c);
	void (*drop)(struct conn *c);
	void *arg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct conn *head, *tail;
	pthread_t *threads;
	unsigned nthreads, started;
	bool stop;
	bool inited;
	/* Exit and client workers: a uid other than root runs at most per_uid_max jobs at
	 * once, so one user's slow jobs (final drains and scans of a flood of exits, snapshots
	 * of a dead pid, huge profiles) never hold every worker; running[] has the uid of each
	 * job in progress (nthreads slots). 0: no limit. */
	unsigned per_uid_max;
	uid_t *running;
	bool *running_used;
};

struct server {
	/* trim and verify_every change at a reload (server_reconfigure): read under opts_lock */
	struct server_opts opts;
	pthread_rwlock_t opts_lock;
	char *socket_path;
	int listen_fd;
	bool own_socket; /* we bound it: unlink at stop if it is still ours */
	dev_t sock_dev;
	ino_t sock_ino;
	int spare_fd; /* closed to accept-and-drop when out of descriptors */
	/* CLOCK_MONOTONIC ns until which the listening socket is out of the epoll set (0: in
	 * it); the loop's thread only */
	uint64_t accept_paused_until;
	int epfd;
	int wake_fd;
	struct session_registry *reg;
	struct budget *budget; /* per-uid and global limits (budget.c) */
	struct drain *drain;
	struct peak_thread *peak; /* peak_thread.c: the peak view's scans, woken by the drain */
	struct verifier *verifier; /* verify.c: llgo-heap verify, --verify-every */
	struct snapshot_source snap; /* snapshot.c's view of this server (lookup, settle, trim) */
	pthread_t loop;
	bool loop_started;
	_Atomic bool stopping;
	struct workq shimq, exitq, clientq;
	pthread_mutex_t conns_lock;
	/* While the start-up search for processes to take back runs (adopting), a memfd HELLO
	 * and an adoption each find-or-register under adopt_lock: one session per memfd. */
	pthread_mutex_t adopt_lock;
	_Atomic bool adopting;
	uint64_t self_start; /* the daemon's own start time (/proc/self/stat), 0 if unknown */
	/* vouch.c: the key of this socket's daemons, loaded at start before any worker runs,
	 * read-only after: HELLO vouches for the memfds it accepts, adopt.c checks them */
	struct vouch_key vouch;
	struct conn *conns;
	size_t nconns, max_conns;
	unsigned char *rxbuf; /* the loop's packet buffer */
	/* Set by the loop from before it reads a packet until it has handled it; with an empty
	 * socket buffer, 0 here means every packet sent so far has been handled (see
	 * server_settle). Sequentially consistent on both sides. */
	_Atomic int loop_busy;
	_Atomic unsigned hellos_pending; /* HELLO jobs queued or running */
	/* Serializes "find this process's session, replace it, register the new one" across
	 * shim workers, so that concurrent HELLOs of one process never leave two sessions. */
	pthread_mutex_t hello_lock;
	uint64_t conn_serial; /* the loop's: the last serial conn_accept gave */
	_Atomic uint64_t n_connections, n_malformed, n_refused, n_sessions;
	_Atomic uint64_t out_bytes;   /* unsent answer bytes, all connections */
	_Atomic uint32_t out_waiting; /* connections armed for EPOLLOUT */
	int64_t next_out_scan_ms;     /* the loop's */
	int64_t next_idle_scan_ms;    /* the loop's */
	_Atomic uint32_t unseen;      /* accepted connections that sent no packet yet */
};

/* ---- conn.c ---------------------------------------------------------------------------- */

int64_t conn_now_ms(void);
/* Accept every pending connection (the loop): peer credentials, identity pinned, budgets. */
void conn_accept(struct server *srv);
/* Put the listening socket back in the epoll set once an accept pause is over. */
void conn_accept_resume(struct server *srv);
/* Unlink, close and free c (its session reference and budgets given back). */
void conn_close(struct conn *c);
/* Hand c back to the loop for its next packet (closes it when the server stops). */
void conn_rearm(struct conn *c);
/* The peer is gone or broke the protocol: a shim's session gets its final drain (an exit
 * job), anything else is closed at once. */
void conn_end(struct conn *c);
/* Count, log in one line and end a connection that broke the protocol. */
void conn_malformed(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Start answering c: payload (taken over and emptied; may be NULL), then END with status and
 * message; chunk is the most payload bytes per DATA packet (0: as many as fit). Sends what
 * the socket takes now: 0 all sent, 1 the rest waits, -errno the peer is gone. */
int conn_answer(struct conn *c, struct buf *payload, size_t chunk, int status,
		const char *message);
/* Once an answer was started (rc as conn_answer): listen again, wait, or close. */
void conn_answered(struct conn *c, int rc);
/* The loop: c, armed for EPOLLOUT, has room (or an error). */
void conn_out_event(struct conn *c);
/* The loop, between batches of events: close connections whose answer made no progress for
 * SERVER_SEND_TIMEOUT_S, shut down those silent since accept for SERVER_FIRST_PACKET_MS. */
void conn_out_expire(struct server *srv);
void conn_idle_expire(struct server *srv);
/* Watch s's process for its exit (a connection of kind CONN_PIDFD over a duplicate of pidfd). */
void conn_watch_exit(struct server *srv, struct session *s, int pidfd);

/* ---- packet.c -------------------------------------------------------------------------- */

/* The loop: c is readable (or its process exited): read one packet, check it, handle it. */
void packet_event(struct server *srv, struct conn *c);

/* ---- workq.c --------------------------------------------------------------------------- */

/* n workers, each running run(arg, c) for the connections pushed; drop(c) for those it will
 * not run (stopped). per_uid: a uid other than root runs at most half of them at once (one
 * of one). */
int workq_init(struct workq *q, unsigned n, bool per_uid, void (*run)(void *arg, struct conn *c),
	       void (*drop)(struct conn *c), void *arg);
int workq_start(struct workq *q, const char *name);
/* Queue c for job (a message type or SERVER_JOB_EXIT); drops c when the pool stopped. */
void workq_push(struct workq *q, struct conn *c, uint16_t job);
/* Stop the workers after their current job; queued jobs are dropped (drop). */
void workq_stop(struct workq *q);
void workq_destroy(struct workq *q);

/* ---- jobs.c ---------------------------------------------------------------------------- */

/* Run c's job on a worker (the pools' run: srv is the server). */
void jobs_run(void *srv, struct conn *c);
/* Answer LIST (cheap: the loop runs it itself when no HELLO is in flight). */
int jobs_list(struct server *srv, struct conn *c);

/* ---- server_settle.c (and server.h's server_settle, server_lookup) ---------------------- */

/* A HELLO of pid (any pid when pid <= 0) sent but not handled yet. */
bool server_hello_in_flight(struct server *srv, pid_t pid);
/* Wait (at most SERVER_SETTLE_MS) until no HELLO of pid is in flight. */
void server_settle_hellos(struct server *srv, pid_t pid);

#endif
