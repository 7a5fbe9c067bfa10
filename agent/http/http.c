// SPDX-License-Identifier: MIT
/*
 * http.c: llgo-heapd's HTTP server (--http [ADDR:]PORT, off by default): the listening
 * socket and libmicrohttpd's threads, who may read what (uids, the bearer token), and the
 * dispatch of a request to its endpoint (which reads it with http_request.c and answers with
 * http_answer.c):
 *
 *   /                           a small index of the endpoints (never behind the token);
 *   /debug/pprof/...            Go's net/http/pprof for each attached process (http_pprof.c);
 *   /targets                    Prometheus HTTP service discovery, one target per process
 *                               (http_targets.c);
 *   /metrics                    the Prometheus text format (http_metrics.c).
 *
 * Where. "PORT" and ":PORT" bind 127.0.0.1 (loopback-only unless an address is given);
 * "ADDR:PORT" and "[V6]:PORT" bind ADDR, which may be 0.0.0.0 or [::] for every interface.
 *
 * Access. HTTP carries no credentials, so what a request may see (struct http_view) is:
 *   - with --http-uids: the processes of those uids (for every client that passes the
 *     token, when one is required);
 *   - else, with --http-token-file: the processes of the daemon's own uid (the token is the
 *     credential: whoever holds it was given it);
 *   - else: a client on this host sees its own processes, those of the uid owning its socket
 *     (http_conns.c asks the kernel), and root's client every process, as on the daemon's
 *     socket; a remote client, or one whose socket is not found, sees none.
 * Any other process is answered exactly as an unknown pid, and no list shows it. With
 * --http-token-file, every request but the index (/) must carry "Authorization: Bearer
 * TOKEN" (RFC 6750); others get 401 with WWW-Authenticate: Bearer, whatever the path, so
 * nothing tells which paths exist. The token is compared in constant time; the file is read
 * at start and when http_reload_token is called (SIGHUP).
 *
 * Threads. libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION,
 * poll(2), so descriptors above FD_SETSIZE work), with HTTP_CONNS_MAX connections at most
 * and an idle timeout: a delta profile sleeping its N seconds, or a slow client, delays no
 * other request. Clients that trickle their requests are held by http_conns.c: a deadline
 * for the whole request, a limit per peer, the slowest closed first when all are taken.
 *
 * Left to others: the endpoints (http_pprof.c, http_targets.c, http_metrics.c), the registry
 * and sessions (session.c), the profile and its formats (profile.c and the writers).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../common/escape.h"
#include "http_internal.h"

#define HTTP_IDLE_TIMEOUT_S 10u
#define HTTP_STOP_WAIT_MS 2000u   /* for answers under way when the daemon stops */

/* ---- / ---------------------------------------------------------------------------------- */

/* What the host serves, and nothing of any process: this page needs no token. */
static enum MHD_Result http_root(struct MHD_Connection *c)
{
	struct http_answer a;
	http_answer_init(&a, MHD_HTTP_OK, "text/html; charset=utf-8");
	buf_puts(&a.body,
		 "<html>\n<head><title>llgo-heapd</title></head>\n<body>\n<h1>llgo-heapd</h1>\n"
		 "<ul>\n"
		 "<li><a href=\"/debug/pprof/\">/debug/pprof/</a>: heap and allocs profiles of "
		 "each profiled process (?pid=N), as Go's net/http/pprof serves them</li>\n"
		 "<li><a href=\"/targets\">/targets</a>: the profiled processes, for Prometheus "
		 "HTTP service discovery (http_sd_configs; Parca, Grafana Alloy)</li>\n"
		 "<li><a href=\"/metrics\">/metrics</a>: counters of each process and of the "
		 "daemon, in the Prometheus text format (?pid=N: one process)</li>\n"
		 "</ul>\n</body>\n</html>\n");
	return http_answer_send(c, &a);
}

/* ---- dispatch ------------------------------------------------------------------------- */

/* What the request on c may see (see Access above). */
static void http_view_of(struct http_server *h, struct MHD_Connection *c, struct http_view *v)
{
	memset(v, 0, sizeof(*v));
	if (h->listed || http_auth_required(h)) {
		v->uids = h->uids;
		v->n = h->nuids;
		return;
	}
	struct http_peer p;
	if (!http_conns_peer_of(c, &p) || !p.local)
		return;
	v->all = p.uid == 0;
	v->has_own = true;
	v->own = p.uid;
}

static enum MHD_Result http_handle(void *cls, struct MHD_Connection *c, const char *url,
				   const char *method, const char *version, const char *upload_data,
				   size_t *upload_data_size, void **req_cls)
{
	struct http_server *h = cls;
	(void)version;
	struct http_req *req = *req_cls;
	if (!req) {
		/* headers are in; the body (if any) comes in the next calls */
		req = calloc(1, sizeof(*req));
		if (!req)
			return MHD_NO;
		buf_init(&req->body);
		/* a request without the token keeps no body: it is answered 401 */
		req->denied = strcmp(url, "/") != 0 && !http_auth_check(h, c, &req->presented);
		req->keep_body = !req->denied && strcmp(url, HTTP_PREFIX "symbol") == 0;
		http_view_of(h, c, &req->view);
		*req_cls = req;
		http_conns_progress(h, c, HTTP_CONNS_HEADERS_IN);
		return MHD_YES;
	}
	if (*upload_data_size) {
		if (req->keep_body && !req->too_large) {
			if (req->body.len + *upload_data_size > HTTP_MAX_BODY)
				req->too_large = true;
			else
				buf_append(&req->body, upload_data, *upload_data_size);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (!req->counted) {
		req->counted = true;
		atomic_fetch_add_explicit(&h->inflight, 1, memory_order_relaxed);
		http_conns_progress(h, c, HTTP_CONNS_REQUEST_IN);
	}
	if (atomic_load_explicit(&h->stopping, memory_order_acquire))
		return http_answer_error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
					 "llgo-heapd is shutting down");
	if (req->denied)
		return http_auth_deny(h, c, req->presented);

	enum http_handler which = HTTP_H_OTHER;
	if (strcmp(url, "/") == 0)
		which = HTTP_H_ROOT;
	else if (strcmp(url, "/targets") == 0)
		which = HTTP_H_TARGETS;
	else if (strcmp(url, "/metrics") == 0)
		which = HTTP_H_METRICS;
	else if (strncmp(url, HTTP_PREFIX, strlen(HTTP_PREFIX)) == 0 ||
		 strcmp(url, "/debug/pprof") == 0)
		which = HTTP_H_PPROF;
	atomic_fetch_add_explicit(&h->requests[which], 1, memory_order_relaxed);
	switch (which) {
	case HTTP_H_ROOT:
		return http_root(c);
	case HTTP_H_TARGETS:
		return http_targets_handle(h, c, &req->view);
	case HTTP_H_METRICS:
		return http_metrics_handle(h, c, &req->view);
	default:
		break;
	}

	/* Go's ServeMux: the subtree pattern "/debug/pprof/" redirects its bare name */
	if (strcmp(url, "/debug/pprof") == 0) {
		struct http_answer a;
		http_answer_init(&a, MHD_HTTP_MOVED_PERMANENTLY, "text/html; charset=utf-8");
		buf_puts(&a.body, "<a href=\"/debug/pprof/\">Moved Permanently</a>.\n\n");
		struct MHD_Response *r = MHD_create_response_from_buffer(
			a.body.len, a.body.data, MHD_RESPMEM_MUST_COPY);
		buf_free(&a.body);
		if (!r)
			return MHD_NO;
		MHD_add_response_header(r, "Location", HTTP_PREFIX);
		MHD_add_response_header(r, "Content-Type", a.content_type);
		enum MHD_Result rc = MHD_queue_response(c, a.status, r);
		MHD_destroy_response(r);
		return rc;
	}
	if (which != HTTP_H_PPROF) {
		/* Go's http.NotFound */
		struct http_answer a;
		http_answer_init(&a, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8");
		buf_puts(&a.body, "404 page not found\n");
		return http_answer_send(c, &a);
	}
	return http_pprof_handle(h, c, url + strlen(HTTP_PREFIX), method, req);
}

static void http_completed(void *cls, struct MHD_Connection *c, void **req_cls,
			   enum MHD_RequestTerminationCode toe)
{
	struct http_server *h = cls;
	(void)toe;
	struct http_req *req = *req_cls;
	http_conns_progress(h, c, HTTP_CONNS_ANSWERED);
	if (req) {
		/* release: pairs with http_free's acquire load; the answer is sent */
		if (req->counted)
			atomic_fetch_sub_explicit(&h->inflight, 1, memory_order_release);
		buf_free(&req->body);
		free(req);
		*req_cls = NULL;
	}
}
static void http_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	log_debug("http: %s", line);
}

/* ---- life cycle ----------------------------------------------------------------------- */

int http_parse_uids(const char *s, uid_t **out, size_t *n, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	if (!s || !*s) {
		snprintf(err, errlen, "--http-uids: empty list");
		return -EINVAL;
	}
	size_t cap = 1;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	uid_t *v = calloc(cap, sizeof(*v));
	if (!v) {
		snprintf(err, errlen, "--http-uids: out of memory");
		return -ENOMEM;
	}
	size_t k = 0;
	const char *p = s;
	for (;;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		char word[256];
		if (len == 0 || len >= sizeof(word)) {
			snprintf(err, errlen, "--http-uids: bad entry in '%s'", s);
			free(v);
			return -EINVAL;
		}
		memcpy(word, p, len);
		word[len] = '\0';
		int64_t num;
		if (word[0] >= '0' && word[0] <= '9') {
			if (http_request_int(word, &num) || num < 0 || num >= (int64_t)UINT32_MAX) {
				snprintf(err, errlen, "--http-uids: not a uid: '%s'", word);
				free(v);
				return -EINVAL;
			}
			v[k++] = (uid_t)num;
		} else {
			struct passwd pw, *res = NULL;
			char pwbuf[4096];
			if (getpwnam_r(word, &pw, pwbuf, sizeof(pwbuf), &res) != 0 || !res) {
				snprintf(err, errlen, "--http-uids: no such user: '%s'", word);
				free(v);
				return -EINVAL;
			}
			v[k++] = res->pw_uid;
		}
		if (!e)
			break;
		p = e + 1;
	}
	*out = v;
	*n = k;
	return 0;
}

/* Split "HOST:PORT", ":PORT", "PORT", "[V6]:PORT" into host (loopback when not given) and
 * port. */
static int http_split(const char *ap, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon;
	if (*ap && strspn(ap, "0123456789") == strlen(ap)) {
		snprintf(host, hostlen, "127.0.0.1");
		colon = ap - 1;
	} else if (ap[0] == '[') {
		const char *close = strchr(ap, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		size_t hl = (size_t)(close - ap - 1);
		if (hl == 0 || hl >= hostlen)
			return -EINVAL;
		memcpy(host, ap + 1, hl);
		host[hl] = '\0';
		colon = close + 1;
	} else {
		colon = strrchr(ap, ':');
		if (!colon)
			return -EINVAL;
		size_t hl = (size_t)(colon - ap);
		if (hl >= hostlen || memchr(ap, ':', hl)) /* a bare IPv6 address needs [] */
			return -EINVAL;
		memcpy(host, ap, hl);
		host[hl] = '\0';
		if (hl == 0)
			snprintf(host, hostlen, "127.0.0.1");
	}
	const char *p = colon + 1;
	size_t pl = strlen(p);
	if (pl == 0 || pl >= portlen || strspn(p, "0123456789") != pl || atol(p) > 65535)
		return -EINVAL;
	memcpy(port, p, pl + 1);
	return 0;
}

struct http_server *http_new(struct server *srv, const char *addr_port, const uid_t *uids,
			     size_t nuids, char *err, size_t errlen)
{
	char host[256], port[8];
	if (!addr_port || http_split(addr_port, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen,
			 "--http: want PORT, :PORT, HOST:PORT or [IPV6]:PORT, not '%s'",
			 addr_port ? addr_port : "");
		return NULL;
	}
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	int g = getaddrinfo(host, port, &hints, &ai);
	if (g || !ai) {
		snprintf(err, errlen, "--http %s: %s", addr_port,
			 g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
		return NULL;
	}
	struct http_server *h = calloc(1, sizeof(*h));
	if (!h) {
		freeaddrinfo(ai);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->srv = srv;
	pthread_mutex_init(&h->token_lock, NULL);
	pthread_mutex_init(&h->conns_lock, NULL);
	h->listen_fd = -1;
	h->stop_fd = -1;
	h->family = ai->ai_family;
	size_t nu = uids && nuids ? nuids : 1;
	h->uids = calloc(nu, sizeof(*h->uids));
	if (!h->uids) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	h->listed = uids && nuids;
	if (h->listed)
		memcpy(h->uids, uids, nuids * sizeof(*uids));
	else
		h->uids[0] = geteuid(); /* with a token */
	h->nuids = nu;

	h->listen_fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (h->listen_fd < 0) {
		snprintf(err, errlen, "--http %s: socket: %s", addr_port, strerror(errno));
		goto fail;
	}
	int one = 1;
	setsockopt(h->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ai->ai_family == AF_INET6)
		setsockopt(h->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(h->listen_fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		snprintf(err, errlen, "--http %s: bind: %s", addr_port, strerror(errno));
		goto fail;
	}
	if (listen(h->listen_fd, 64) < 0) {
		snprintf(err, errlen, "--http %s: listen: %s", addr_port, strerror(errno));
		goto fail;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char nh[INET6_ADDRSTRLEN], np[8];
	if (getsockname(h->listen_fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, sl, nh, sizeof(nh), np, sizeof(np),
			NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
		snprintf(h->address, sizeof(h->address), ss.ss_family == AF_INET6 ? "[%s]:%s" :
			 "%s:%s", nh, np);
		h->port = (unsigned)atoi(np);
		h->wildcard =
			ss.ss_family == AF_INET6
				? IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr)
				: ((struct sockaddr_in *)&ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	} else
		snprintf(h->address, sizeof(h->address), "%s", addr_port);
	h->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (h->stop_fd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	freeaddrinfo(ai);
	return h;
fail:
	freeaddrinfo(ai);
	http_free(h);
	return NULL;
}

int http_start(struct http_server *h, char *err, size_t errlen)
{
	/* MHD_USE_ITC: required by MHD_quiesce_daemon in this threading mode */
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
			 MHD_USE_ERROR_LOG | MHD_USE_ITC;
	if (h->family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* the logger first, so libmicrohttpd logs nothing on its own */
	h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, http_handle, h,
				  MHD_OPTION_EXTERNAL_LOGGER, http_log, (void *)NULL,
				  MHD_OPTION_LISTEN_SOCKET, (MHD_socket)h->listen_fd,
				  MHD_OPTION_CONNECTION_LIMIT,
				  (unsigned)(HTTP_CONNS_MAX + HTTP_CONNS_SPARE),
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
				  MHD_OPTION_NOTIFY_COMPLETED, http_completed, (void *)h,
				  MHD_OPTION_NOTIFY_CONNECTION, http_conns_notify, (void *)h,
				  MHD_OPTION_END);
	if (!h->mhd) {
		/* libmicrohttpd may or may not have closed the socket it was given */
		if (fcntl(h->listen_fd, F_GETFD) < 0)
			h->listen_fd = -1;
		snprintf(err, errlen, "--http %s: libmicrohttpd did not start", h->address);
		return -EIO;
	}
	h->listen_fd = -1; /* MHD_stop_daemon closes it */
	int rc = http_conns_start(h);
	if (rc) {
		snprintf(err, errlen, "--http %s: thread: %s", h->address, strerror(-rc));
		return rc;
	}
	if (!h->listed && !http_auth_required(h))
		log_info("http: no --http-uids nor --http-token-file: each local client is served "
			 "its own processes only (root's, every process)");
	log_info("http: serving http://%s/debug/pprof/", h->address);
	return 0;
}

void http_free(struct http_server *h)
{
	if (!h)
		return;
	/* release: a request that sees stopping (or the eventfd) sees it for good */
	atomic_store_explicit(&h->stopping, true, memory_order_release);
	if (h->stop_fd >= 0) {
		uint64_t one = 1;
		if (write(h->stop_fd, &one, sizeof(one)) < 0) {
			/* nonblocking eventfd: full only after 2^64-1 writes */
		}
	}
	if (h->mhd) {
		/* Graceful: accept nothing new, let the requests under way (woken above) send
		 * their answers for up to HTTP_STOP_WAIT_MS, then close every connection and
		 * join the threads. Idle keep-alive connections do not count. */
		MHD_socket lfd = MHD_quiesce_daemon(h->mhd);
		for (unsigned i = 0; i < HTTP_STOP_WAIT_MS / 10; i++) {
			if (atomic_load_explicit(&h->inflight, memory_order_acquire) == 0)
				break;
			struct timespec ts = { 0, 10000000L };
			nanosleep(&ts, NULL);
		}
		MHD_stop_daemon(h->mhd);
		if (lfd != MHD_INVALID_SOCKET)
			close(lfd);
	}
	http_conns_stop(h);
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	if (h->stop_fd >= 0)
		close(h->stop_fd);
	free(h->uids);
	http_auth_set_file(h, NULL, NULL, 0);
	pthread_mutex_destroy(&h->token_lock);
	pthread_mutex_destroy(&h->conns_lock);
	free(h);
}

const char *http_address(const struct http_server *h)
{
	return h->address;
}

int http_set_token_file(struct http_server *h, const char *path, char *err, size_t errlen)
{
	return http_auth_set_file(h, path, err, errlen);
}

int http_reload_token(struct http_server *h, char *err, size_t errlen)
{
	return http_auth_reload(h, err, errlen);
}
