/* SPDX-License-Identifier: MIT */
/*
 * server.h: llgo-heapd's socket server, its public face (server.c; the files it is made of,
 * conn.c, packet.c, workq.c, jobs.c and server_settle.c, share server_impl.h). Snapshots
 * are snapshot.h's, the drain drain.h's, the registry and sessions session.h's.
 */
#ifndef LLGO_AGENT_SERVER_H
#define LLGO_AGENT_SERVER_H

#include "../ingest/drain.h"

struct server_opts {
	const char *socket_path; /* where to listen (and the name given to clients) */
	unsigned keep_exited;    /* exited sessions kept for snapshots */
	uint64_t max_buckets;    /* per process, 0 = default */
	uint64_t max_bytes;      /* per process, 0 = default */
	unsigned client_workers; /* 0 = default */
	/* --http ADDR:PORT (http.c): served beside the event loop. */
	const char *http_addr;
	/* --trim: function names (or prefixes ending in '*') hidden from the top of stacks */
	char **trim;
	size_t ntrim;
	/* --verify-every N (verify.c): check one sample in N of every process with eBPF */
	uint32_t verify_every;
	/* budget.c: per-uid and global limits (NULL: budget_defaults) */
	const struct budget_limits *budget;
	unsigned keep_exited_per_uid; /* 0 = default */
	unsigned keep_exited_age_s;   /* 0 = default */
};

struct server_stats {
	uint64_t connections; /* accepted */
	uint64_t malformed;   /* connections dropped for a bad packet */
	uint64_t refused;     /* connections closed at accept (too many) */
	uint64_t sessions;    /* HELLOs accepted */
	uint64_t evicted;     /* exited sessions dropped (count per uid, all, age) */
};

struct server;

/* Set up the listening socket (systemd's, or bind socket_path) and the registry; starts no
 * thread, so the caller may still fork (daemonize). Writes a reason to err on failure. */
struct server *server_new(const struct server_opts *o, char *err, size_t errlen);
int server_start(struct server *srv);
/* Stop the threads, close every connection; unlink the socket if we created it. */
void server_stop(struct server *srv);
void server_free(struct server *srv);
void server_get_stats(struct server *srv, struct server_stats *out);
/* A reload: limits and budgets at once, --trim from the next snapshot, --verify-every for
 * processes that attach afterwards (the rest of o is ignored: it needs a restart). o's trim
 * strings must live until the next call or server_free; the previous ones are no longer
 * read once this returns. */
void server_reconfigure(struct server *srv, const struct server_opts *o);
struct session_registry *server_sessions(struct server *srv);

/* What the snapshot service (snapshot.h) asks of this server: lookups, settling, --trim. */
const struct snapshot_source *server_snapshot_source(struct server *srv);

/* server_settle.c. The session of pid, after waiting (at most 200 ms) for a HELLO of pid
 * still in flight. */
struct session *server_lookup(struct server *srv, pid_t pid);
/* Wait (at most 200 ms) until the event loop has handled every packet s's shim has sent
 * (snapshot.c, verify.c: a request must see what was published before it). */
void server_settle(struct server *srv, struct session *s);

#endif
