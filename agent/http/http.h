/* SPDX-License-Identifier: MIT */
/*
 * http.h: llgo-heapd's optional HTTP server (--http [ADDR:]PORT), answering Go's
 * net/http/pprof endpoints for the attached processes (/debug/pprof/heap?pid=N,
 * /debug/pprof/allocs?pid=N, /debug/pprof/symbol, the index /debug/pprof/), and for fleet
 * scrapers /targets (Prometheus HTTP service discovery) and /metrics (Prometheus text).
 *
 * Life cycle, as server.c's: http_new parses the address, binds and listens (so a busy port
 * is reported before the daemon detaches) and starts no thread; http_start starts
 * libmicrohttpd's threads (after the caller blocked its signals); http_free stops them,
 * waking every request still waiting for a delta profile, and frees.
 */
#ifndef LLGO_AGENT_HTTP_H
#define LLGO_AGENT_HTTP_H

#include <stddef.h>
#include <sys/types.h>

#include "../output/snapshot.h"
#include "../server/server.h"

/* Longest delta profile (seconds=N) served; longer ones get Go's WriteTimeout answer. */
#define HTTP_MAX_SECONDS 3600

struct http_server;

/* addr_port: "HOST:PORT", "PORT" or ":PORT" (loopback 127.0.0.1), "[V6]:PORT"; HOST may be
 * a name, 0.0.0.0 or [::] for every interface.
 * PORT 0 picks a free port (logged by http_start). uids: whose processes are served
 * (NULL or nuids 0: the daemon's effective uid only). Writes a reason to err on failure. */
struct http_server *http_new(struct server *srv, const char *addr_port, const uid_t *uids,
			     size_t nuids, char *err, size_t errlen);
int http_start(struct http_server *h, char *err, size_t errlen);
/* Stop (if started) and free; accepts NULL. Call before server_stop/server_free. */
void http_free(struct http_server *h);
/* The address actually bound, e.g. "127.0.0.1:6060" or "[::1]:6060". */
const char *http_address(const struct http_server *h);

/* --http-token-file: require "Authorization: Bearer TOKEN" (the file's content) of every
 * request but the index (/); path NULL: no token. Reads the file now; call before
 * http_start. */
int http_set_token_file(struct http_server *h, const char *path, char *err, size_t errlen);
/* Read the token file again (SIGHUP); nothing when none was given. When the file cannot
 * be read or is empty the token in force stays and a reason is written to err. */
int http_reload_token(struct http_server *h, char *err, size_t errlen);

/* Parse "UID,..." (decimal uids or user names) into a malloc'ed array. */
int http_parse_uids(const char *s, uid_t **out, size_t *n, char *err, size_t errlen);

#endif
