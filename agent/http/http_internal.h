/* SPDX-License-Identifier: MIT */
/*
 * http_internal.h: what the files of llgo-heapd's HTTP server share, and nothing else
 * includes. http.c owns the server (life cycle, access, dispatch), http_auth.c the bearer
 * token, http_conns.c the connections (their peers, limits and deadlines); each endpoint
 * family has its file: http_pprof.c (Go's /debug/pprof/), http_targets.c (/targets,
 * Prometheus HTTP service discovery), http_metrics.c (/metrics).
 *
 * The router and the endpoints meet here: http.c calls an endpoint's handler with the
 * server, the connection and the request's view; the endpoint reads its request with
 * http_request.c and answers with http_answer.c, and never calls http.c.
 */
#ifndef LLGO_AGENT_HTTP_INTERNAL_H
#define LLGO_AGENT_HTTP_INTERNAL_H

#include <arpa/inet.h>
#include <pthread.h>

#include <microhttpd.h>

#include "http.h"

#define HTTP_PREFIX "/debug/pprof/"
#define HTTP_CONNS_MAX 64u      /* connections served at once */
#define HTTP_CONNS_SPARE 64u    /* libmicrohttpd accepts these more, for http_conns.c to
				 * close the slowest (its own limit: MAX + SPARE); as many
				 * as MAX, since a connection http_conns.c shut down counts in
				 * libmicrohttpd until its thread sees it: reconnecting
				 * attackers must not fill its limit meanwhile */
#define HTTP_CONNS_PER_PEER 16u /* connections of one local uid (not root) or address */
#define HTTP_CONNS_HEADER_S 5u  /* a request's headers arrive within this of the accept */
#define HTTP_CONNS_BODY_S 30u   /* its body within this of the headers */
#define HTTP_MAX_BODY (4u << 20) /* POST /debug/pprof/symbol: about 300000 addresses */

/* Requests answered, by handler (llgo_heap_http_requests_total{handler}). */
enum http_handler {
	HTTP_H_ROOT,    /* / */
	HTTP_H_PPROF,   /* /debug/pprof/... */
	HTTP_H_TARGETS, /* /targets */
	HTTP_H_METRICS, /* /metrics */
	HTTP_H_OTHER,   /* 404 */
	HTTP_H_COUNT,
};

/* Who is at the other end of a connection (http_conns.c). */
struct http_peer {
	bool local;             /* a socket of this host: uid is its owner */
	uid_t uid;
	unsigned char addr[16]; /* !local: its address (IPv4 as ::ffff:a.b.c.d) */
};

/* Why http_conns.c closed a connection (llgo_heap_http_connections_closed_total). */
enum http_closed {
	HTTP_CLOSED_PEER,     /* its peer held HTTP_CONNS_PER_PEER already */
	HTTP_CLOSED_FULL,     /* the oldest still reading when all HTTP_CONNS_MAX were taken */
	HTTP_CLOSED_DEADLINE, /* its request did not arrive in time */
	HTTP_CLOSED_COUNT,
};

/* Whose processes a request may see: every uid (all), its peer's own (has_own), and the
 * list (uids, n). */
struct http_view {
	bool all;
	bool has_own;
	uid_t own;
	const uid_t *uids;
	size_t n;
};

struct http_conn;

struct http_server {
	struct server *srv;
	struct MHD_Daemon *mhd;
	int listen_fd; /* ours until MHD_start_daemon succeeds, then MHD's (it closes it) */
	int family;
	int stop_fd;   /* eventfd, readable once stopping: wakes sleeping delta requests */
	_Atomic bool stopping;
	_Atomic unsigned inflight; /* requests being answered (handler called to completion) */
	_Atomic unsigned deltas;   /* delta profiles sleeping (HTTP_MAX_DELTAS) */
	uid_t *uids;
	size_t nuids;
	bool listed; /* --http-uids given: uids, else (with a token) the daemon's uid, else
		      * each local peer its own (http_view) */
	char address[INET6_ADDRSTRLEN + 16];
	/* Bound to 0.0.0.0 or [::]: /targets names the host from the request (Host header) or
	 * gethostname(), with this port. */
	bool wildcard;
	unsigned port;

	/* --http-token-file: the path (kept for http_reload_token) and the token; token_lock
	 * guards token and token_len against a reload during a request. */
	pthread_mutex_t token_lock;
	char *token_path;
	char *token; /* NULL: no token required */
	size_t token_len;

	_Atomic uint64_t requests[HTTP_H_COUNT];
	_Atomic uint64_t unauthorized;

	/* http_conns.c: the connections open, oldest first (conns_lock), and the sweep */
	pthread_mutex_t conns_lock;
	struct http_conn *conns_head, *conns_tail;
	unsigned nconns;
	pthread_t sweeper;
	bool sweeper_started;
	_Atomic uint64_t closed[HTTP_CLOSED_COUNT];
};

/* Per request: the POST body (only /debug/pprof/symbol keeps it). */
struct http_req {
	struct buf body;
	bool too_large;
	bool keep_body;
	bool counted; /* in h->inflight */
	bool denied;  /* a token is required and the request did not carry it */
	struct http_view view;
	bool presented; /* it carried an Authorization header (401 says invalid_token) */
};

struct http_answer {
	unsigned status;
	const char *content_type;
	char disposition[64]; /* "" for none */
	bool go_error;        /* X-Go-Pprof: 1 */
	struct buf body;      /* handed to libmicrohttpd */
};

/* ---- http_request.c: what an endpoint reads of its request ----------------------------- */

/* Go's strconv.ParseInt(s, 10, 64): 0, -EINVAL (syntax) or -ERANGE (*out clamped). */
int http_request_int(const char *s, int64_t *out);
/* Go's `n, _ := strconv.Atoi(s)`: 0 on a syntax error, the clamped value out of range. */
int64_t http_request_atoi(const char *s);
const char *http_request_arg(struct MHD_Connection *c, const char *key);
bool http_request_sees_uid(const struct http_view *v, uid_t uid);
/* Whether the request may see s: its uid is allowed (a process whose identity changed after
 * it attached, ident.c, counts as root's). */
bool http_request_sees(const struct http_view *v, const struct session *s);
/* The pid=N parameter: 0 when absent, -1 when not a positive int (answer 400). */
int64_t http_request_pid(struct MHD_Connection *c);

/* ---- http_answer.c: how an endpoint answers -------------------------------------------- */

void http_answer_init(struct http_answer *a, unsigned status, const char *ctype);
/* Queue a (the body is handed over or freed); a body that ran out of memory becomes a 500
 * "out of memory" answer. */
enum MHD_Result http_answer_send(struct MHD_Connection *c, struct http_answer *a);
/* Go's serveError: status, text/plain, X-Go-Pprof: 1, the message and a newline. */
enum MHD_Result http_answer_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A hostile string (a command name, a path, an environment variable) double-quoted for
 * JSON and for Prometheus label values: escape.c's form (valid UTF-8, no control character;
 * \xNN and \\ escapes), then its double quotes and backslashes escaped with a backslash. */
void http_answer_quote(struct buf *b, const char *s);

/* ---- http_auth.c ----------------------------------------------------------------------- */

/* Read the token of path (NULL: none required from now on) and keep path for reloads. */
int http_auth_set_file(struct http_server *h, const char *path, char *err, size_t errlen);
/* Read the file again (nothing when none was given); on failure the old token stays. */
int http_auth_reload(struct http_server *h, char *err, size_t errlen);
/* Whether the request may pass; *presented: it carried an Authorization header. */
bool http_auth_check(struct http_server *h, struct MHD_Connection *c, bool *presented);
enum MHD_Result http_auth_deny(struct http_server *h, struct MHD_Connection *c, bool presented);
/* Whether a token is required (a token file was given). */
bool http_auth_required(struct http_server *h);

/* ---- http_conns.c ---------------------------------------------------------------------- */

/* MHD_OPTION_NOTIFY_CONNECTION's callback (cls: the server). */
void http_conns_notify(void *cls, struct MHD_Connection *c, void **ctx,
		       enum MHD_ConnectionNotificationCode toe);
/* The peer of c; false (out zeroed) when unknown. */
bool http_conns_peer_of(struct MHD_Connection *c, struct http_peer *out);
enum http_conns_phase {
	HTTP_CONNS_HEADERS_IN, /* the handler's first call: the body has its own deadline */
	HTTP_CONNS_REQUEST_IN, /* the request is whole: no deadline while it is answered */
	HTTP_CONNS_ANSWERED,   /* the next request on the connection has the header deadline */
};
void http_conns_progress(struct http_server *h, struct MHD_Connection *c,
			 enum http_conns_phase phase);
/* The sweep thread (deadlines); http_conns_stop joins it once h->stop_fd is readable. */
int http_conns_start(struct http_server *h);
void http_conns_stop(struct http_server *h);

/* ---- http_pprof.c ---------------------------------------------------------------------- */

/* name: what follows /debug/pprof/ ("" for the index). */
enum MHD_Result http_pprof_handle(struct http_server *h, struct MHD_Connection *c,
				  const char *name, const char *method, struct http_req *req);

/* ---- http_targets.c -------------------------------------------------------------------- */

/* The labels a process is known by: service_name (LLGO_HEAP_SERVICE in its environment,
 * else its command name) and exe ("" when unreadable). Read once per process and kept in
 * the session; the strings live as long as s (the caller holds a reference). */
struct http_targets_names {
	const char *service;
	const char *exe;
};
void http_targets_names(struct session *s, struct http_targets_names *out);
enum MHD_Result http_targets_handle(struct http_server *h, struct MHD_Connection *c,
				    const struct http_view *v);

/* ---- http_metrics.c -------------------------------------------------------------------- */

enum MHD_Result http_metrics_handle(struct http_server *h, struct MHD_Connection *c,
				    const struct http_view *v);

#endif
