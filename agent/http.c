// SPDX-License-Identifier: MIT
/*
 * http.c: llgo-heapd's HTTP server (--http ADDR:PORT, off by default). It answers, for each
 * attached process, the endpoints of Go's net/http/pprof the way a Go program importing that
 * package does, so `go tool pprof http://HOST:PORT/debug/pprof/heap?pid=N`, scrapers and
 * browsers work unchanged:
 *
 *   /debug/pprof/heap?pid=N     gzipped profile.proto; debug=N (N != 0): legacy text;
 *   /debug/pprof/allocs?pid=N   the same data with default_sample_type alloc_space;
 *                               seconds=N: delta profile over the next N seconds;
 *                               gc=N: accepted and ignored (C has no collector to run);
 *   /debug/pprof/symbol         Go's symbol service (pprof POSTs here for addresses of a
 *                               mapping without has_functions that still lack a name);
 *   /debug/pprof/               an HTML index of the attached processes and the profiles.
 *
 * Answers follow Go 1.19's net/http/pprof: headers (X-Content-Type-Options: nosniff on every
 * answer, Content-Disposition: attachment; filename="heap" on proto answers, "heap-delta" for
 * deltas), the error format (status, text/plain; charset=utf-8, X-Go-Pprof: 1, message and a
 * newline), the error texts, and the order in which parameters are checked. What Go's
 * single-process server has no equivalent for is ours: the pid parameter (optional while
 * exactly one allowed process is attached), 404 naming an unknown pid, and delta durations
 * capped at HTTP_MAX_SECONDS (answered as Go answers one beyond its WriteTimeout).
 *
 * Access. HTTP carries no peer credentials, so only processes whose uid is in the allowed
 * list (--http-uids, default the daemon's effective uid) are served; any other process is
 * answered exactly as an unknown pid (same status, same text), and the index and the
 * symbol service ignore it, so a request cannot tell it exists.
 *
 * Threads. libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION,
 * poll(2), so descriptors above FD_SETSIZE work), with HTTP_MAX_CONNS connections at most
 * and an idle timeout: a delta profile sleeping its N seconds, or a slow client, delays no
 * other request. A sleeping delta wakes early when the server stops (stop_fd) or the client
 * goes away (POLLRDHUP on its socket), as Go's handler watches the request's context.
 *
 * Left to others: the registry and sessions (session.c), draining the rings (drain.c), the
 * profile, its delta and its formats (profile.c and the writers), symbols (symbolize.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "http.h"

#define HTTP_MAX_CONNS 64u
#define HTTP_IDLE_TIMEOUT_S 10u
/* Delta profiles (seconds=N) sleeping at once: the rest of the connections stay for
 * everything else, so slow deltas cannot lock the endpoint. */
#define HTTP_MAX_DELTAS 16u
#define HTTP_MAX_BODY (4u << 20)  /* POST /symbol: about 300000 addresses */
#define HTTP_STOP_WAIT_MS 2000u   /* for answers under way when the daemon stops */
#define HTTP_PREFIX "/debug/pprof/"

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
	char address[INET6_ADDRSTRLEN + 16];
};

/* Per request: the POST body (only /debug/pprof/symbol keeps it). */
struct http_req {
	struct buf body;
	bool too_large;
	bool keep_body;
	bool counted; /* in h->inflight */
};

struct http_answer {
	unsigned status;
	const char *content_type;
	char disposition[64]; /* "" for none */
	bool go_error;        /* X-Go-Pprof: 1 */
	struct buf body;      /* handed to libmicrohttpd */
};

/* ---- small helpers -------------------------------------------------------------------- */

/* Go's strconv.ParseInt(s, 10, 64): optional sign, decimal digits, no spaces. Returns 0,
 * -EINVAL (syntax) or -ERANGE (with *out clamped, as Go does). */
static int http_parse_int(const char *s, int64_t *out)
{
	*out = 0;
	if (!s || !*s)
		return -EINVAL;
	bool neg = false;
	if (*s == '+' || *s == '-') {
		neg = *s == '-';
		s++;
	}
	if (!*s)
		return -EINVAL;
	const uint64_t limit = (uint64_t)INT64_MAX + (neg ? 1u : 0u);
	uint64_t v = 0;
	bool range = false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*s - '0');
		if (range || v > (limit - d) / 10)
			range = true;
		else
			v = v * 10 + d;
	}
	if (range) {
		*out = neg ? INT64_MIN : INT64_MAX;
		return -ERANGE;
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

/* Go's `n, _ := strconv.Atoi(s)`: 0 on a syntax error, the clamped value out of range. */
static int64_t http_atoi(const char *s)
{
	int64_t v;
	int rc = http_parse_int(s, &v);
	return rc == -EINVAL ? 0 : v;
}

static const char *http_arg(struct MHD_Connection *c, const char *key)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
}

static bool http_uid_allowed(const struct http_server *h, uid_t uid)
{
	for (size_t i = 0; i < h->nuids; i++)
		if (h->uids[i] == uid)
			return true;
	return false;
}

/* A process whose identity changed after it attached (a setuid exec, ident.c) is served as
 * root's: only when root's uid is in the list. */
static bool http_session_allowed(const struct http_server *h, const struct session *s)
{
	return http_uid_allowed(h, s->uid) &&
	       (!atomic_load(&s->ident_lost) || http_uid_allowed(h, 0));
}

/* Go's html.EscapeString, plus control bytes (a hostile comm) shown as '?'. */
static void http_html(struct buf *b, const char *s, size_t max)
{
	for (size_t i = 0; i < max && s[i]; i++) {
		unsigned char ch = (unsigned char)s[i];
		switch (ch) {
		case '<': buf_puts(b, "&lt;"); break;
		case '>': buf_puts(b, "&gt;"); break;
		case '&': buf_puts(b, "&amp;"); break;
		case '\'': buf_puts(b, "&#39;"); break;
		case '"': buf_puts(b, "&#34;"); break;
		default: buf_putc(b, ch < 0x20 || ch == 0x7f ? '?' : (char)ch); break;
		}
	}
}

/* ---- answers -------------------------------------------------------------------------- */

static void http_answer_init(struct http_answer *a, unsigned status, const char *ctype)
{
	memset(a, 0, sizeof(*a));
	a->status = status;
	a->content_type = ctype;
	buf_init(&a->body);
}

static enum MHD_Result http_send(struct MHD_Connection *c, struct http_answer *a)
{
	if (a->body.failed) {
		/* out of memory while writing: say so in a short answer we can still build */
		buf_free(&a->body);
		http_answer_init(a, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8");
		a->go_error = true;
		static const char oom[] = "out of memory\n";
		struct MHD_Response *r = MHD_create_response_from_buffer(
			sizeof(oom) - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
		if (!r)
			return MHD_NO;
		MHD_add_response_header(r, "Content-Type", a->content_type);
		MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
		MHD_add_response_header(r, "X-Go-Pprof", "1");
		enum MHD_Result rc = MHD_queue_response(c, a->status, r);
		MHD_destroy_response(r);
		return rc;
	}
	struct MHD_Response *r;
	if (a->body.len == 0) {
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		buf_free(&a->body);
	} else {
		r = MHD_create_response_from_buffer(a->body.len, a->body.data,
						    MHD_RESPMEM_MUST_FREE);
		if (r)
			buf_init(&a->body); /* libmicrohttpd frees it */
		else
			buf_free(&a->body);
	}
	if (!r)
		return MHD_NO;
	bool ok = MHD_add_response_header(r, "X-Content-Type-Options", "nosniff") == MHD_YES;
	if (a->content_type)
		ok = ok && MHD_add_response_header(r, "Content-Type", a->content_type) == MHD_YES;
	if (a->disposition[0])
		ok = ok && MHD_add_response_header(r, "Content-Disposition", a->disposition) ==
				   MHD_YES;
	if (a->go_error)
		ok = ok && MHD_add_response_header(r, "X-Go-Pprof", "1") == MHD_YES;
	enum MHD_Result rc = ok ? MHD_queue_response(c, a->status, r) : MHD_NO;
	MHD_destroy_response(r);
	return rc;
}

/* Go's serveError: status, text/plain, X-Go-Pprof: 1, no Content-Disposition, txt + "\n". */
static enum MHD_Result http_error(struct MHD_Connection *c, unsigned status, const char *fmt,
				  ...) __attribute__((format(printf, 3, 4)));
static enum MHD_Result http_error(struct MHD_Connection *c, unsigned status, const char *fmt,
				  ...)
{
	struct http_answer a;
	http_answer_init(&a, status, "text/plain; charset=utf-8");
	a.go_error = true;
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&a.body, fmt, ap);
	va_end(ap);
	buf_putc(&a.body, '\n');
	return http_send(c, &a);
}

/* Send a written profile, or the error its writer returned (werr). A buffer that ran out
 * of memory becomes http_send's "out of memory" answer. */
static enum MHD_Result http_send_profile(struct MHD_Connection *c, struct http_answer *a,
					 int werr)
{
	if (werr && !a->body.failed) {
		buf_free(&a->body);
		return http_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "failed to write profile: %s",
				  strerror(-werr));
	}
	return http_send(c, a);
}

/* ---- sessions ------------------------------------------------------------------------- */

/* The one live process of an allowed uid, referenced, if there is exactly one; *allowed
 * gets how many there are. */
static struct session *http_sole_session(struct http_server *h, size_t *allowed)
{
	struct session **v;
	size_t n = session_list(server_sessions(h->srv), true, &v);
	struct session *one = NULL;
	*allowed = 0;
	for (size_t i = 0; i < n; i++) {
		if (http_session_allowed(h, v[i])) {
			++*allowed;
			one = v[i];
		}
	}
	one = *allowed == 1 ? session_get(one) : NULL;
	session_list_release(v, n);
	return one;
}

/* The session a request names, referenced; or an answer already sent (*sent). An allowed
 * uid is part of "exists": a process of another uid gets the unknown-pid answer. */
static struct session *http_session(struct http_server *h, struct MHD_Connection *c,
				    enum MHD_Result *sent)
{
	const char *arg = http_arg(c, "pid");
	if (arg && *arg) {
		int64_t pid;
		if (http_parse_int(arg, &pid) || pid <= 0 || pid > INT_MAX) {
			*sent = http_error(c, MHD_HTTP_BAD_REQUEST,
					   "invalid value for \"pid\" - must be a positive integer");
			return NULL;
		}
		struct session *s = server_lookup(h->srv, (pid_t)pid);
		if (s && !http_session_allowed(h, s)) {
			session_put(s);
			s = NULL;
		}
		if (!s)
			*sent = http_error(c, MHD_HTTP_NOT_FOUND,
					   "no profiled process with pid %lld (see /debug/pprof/)",
					   (long long)pid);
		return s;
	}
	/* No pid: the one allowed live process, if there is exactly one. */
	size_t allowed;
	struct session *one = http_sole_session(h, &allowed);
	if (one)
		return one;
	if (allowed == 0)
		*sent = http_error(c, MHD_HTTP_BAD_REQUEST,
				   "missing \"pid\" parameter: no profiled process is attached");
	else
		*sent = http_error(c, MHD_HTTP_BAD_REQUEST,
				   "missing \"pid\" parameter: %zu profiled processes are attached; "
				   "choose one with ?pid=N (see /debug/pprof/)",
				   allowed);
	return NULL;
}

static uint64_t http_sub(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* Sleep ns, waking early when the server stops (-ECANCELED) or the client hangs up
 * (-ECONNRESET): Go's handler selects on the request context the same way. */
static int http_wait(struct http_server *h, struct MHD_Connection *c, uint64_t ns)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	int cfd = ci ? ci->connect_fd : -1;
	uint64_t deadline = session_now_ns(CLOCK_MONOTONIC) + ns;
	for (;;) {
		if (atomic_load_explicit(&h->stopping, memory_order_acquire))
			return -ECANCELED;
		uint64_t now = session_now_ns(CLOCK_MONOTONIC);
		if (now >= deadline)
			return 0;
		uint64_t left_ms = (deadline - now + 999999) / 1000000;
		/* POLLIN of the client is left out: a pipelined request is not a hang-up */
		struct pollfd p[2] = {
			{ .fd = h->stop_fd, .events = POLLIN },
			{ .fd = cfd, .events = POLLRDHUP },
		};
		int r = poll(p, cfd >= 0 ? 2 : 1, left_ms > 1000 ? 1000 : (int)left_ms);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		if (p[0].revents)
			return -ECANCELED;
		if (cfd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
			return -ECONNRESET;
	}
}

/* ---- /debug/pprof/heap, /debug/pprof/allocs ------------------------------------------- */

static enum MHD_Result http_profile(struct http_server *h, struct MHD_Connection *c,
				    const char *name)
{
	bool allocs = strcmp(name, "allocs") == 0;
	uint32_t flags = allocs ? LLGO_SNAP_ALLOCS : 0;
	/* Go checks seconds first (value, then WriteTimeout, then debug), then gc and debug. */
	const char *sec = http_arg(c, "seconds");
	int64_t seconds = 0;
	if (sec && *sec) {
		if (http_parse_int(sec, &seconds) || seconds <= 0)
			return http_error(c, MHD_HTTP_BAD_REQUEST,
					  "invalid value for \"seconds\" - must be a positive integer");
		if (seconds > HTTP_MAX_SECONDS)
			return http_error(c, MHD_HTTP_BAD_REQUEST,
					  "profile duration exceeds server's WriteTimeout");
		if (http_atoi(http_arg(c, "debug")) != 0)
			return http_error(c, MHD_HTTP_BAD_REQUEST,
					  "seconds and debug params are incompatible");
	}
	/* gc=N: Go runs a collection first so in-use counts are current. Here frees are
	 * recorded as they happen, so there is nothing to run; the parameter is ignored. */
	int64_t debug = seconds ? 0 : http_atoi(http_arg(c, "debug"));

	enum MHD_Result sent = MHD_NO;
	struct session *s = http_session(h, c, &sent);
	if (!s)
		return sent;

	struct profile p0, p1;
	memset(&p0, 0, sizeof(p0));
	memset(&p1, 0, sizeof(p1));
	struct http_answer a;
	enum MHD_Result rc;
	if (!seconds) {
		if (snapshot_collect(h->srv, s, &p1)) {
			rc = http_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "failed to collect profile");
			goto out;
		}
		http_answer_init(&a, MHD_HTTP_OK,
				 debug ? "text/plain; charset=utf-8" : "application/octet-stream");
		if (!debug)
			snprintf(a.disposition, sizeof(a.disposition), "attachment; filename=\"%s\"",
				 name);
		rc = http_send_profile(c, &a, snapshot_write(&a.body, &p1, s->maps,
							     debug ? LLGO_FORMAT_TEXT
								   : LLGO_FORMAT_PPROF,
							     flags, 0));
		goto out;
	}

	if (atomic_fetch_add(&h->deltas, 1) >= HTTP_MAX_DELTAS) {
		atomic_fetch_sub(&h->deltas, 1);
		rc = http_error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
				"too many delta profiles in progress (%u); try again later",
				HTTP_MAX_DELTAS);
		goto out;
	}
	if (snapshot_collect(h->srv, s, &p0)) {
		atomic_fetch_sub(&h->deltas, 1);
		rc = http_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "failed to collect profile");
		goto out;
	}
	int w = http_wait(h, c, (uint64_t)seconds * 1000000000ull);
	atomic_fetch_sub(&h->deltas, 1);
	if (w == -ECONNRESET) {
		/* Go's answer to a canceled request context; nobody reads it */
		rc = http_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "context canceled");
		goto out;
	}
	if (w) {
		rc = http_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "llgo-heapd is shutting down");
		goto out;
	}
	if (snapshot_collect(h->srv, s, &p1)) {
		rc = http_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "failed to collect profile");
		goto out;
	}
	if (profile_subtract(&p1, &p0)) {
		rc = http_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "failed to compute delta");
		goto out;
	}
	/* as Go: time of the second collection, duration between the two; the accounting
	 * comment covers the same interval */
	p1.meta.duration_nanos = http_sub(p1.meta.time_nanos, p0.meta.time_nanos);
	p1.meta.sampled = http_sub(p1.meta.sampled, p0.meta.sampled);
	p1.meta.delivered = http_sub(p1.meta.delivered, p0.meta.delivered);
	p1.meta.dropped = http_sub(p1.meta.dropped, p0.meta.dropped);
	p1.meta.corrupt = http_sub(p1.meta.corrupt, p0.meta.corrupt);
	p1.meta.dropped_prior = http_sub(p1.meta.dropped_prior, p0.meta.dropped_prior);
	p1.meta.dropped_no_ring = http_sub(p1.meta.dropped_no_ring, p0.meta.dropped_no_ring);
	p1.meta.dropped_detached = http_sub(p1.meta.dropped_detached, p0.meta.dropped_detached);
	p1.meta.cap_hits = http_sub(p1.meta.cap_hits, p0.meta.cap_hits);
	http_answer_init(&a, MHD_HTTP_OK, "application/octet-stream");
	snprintf(a.disposition, sizeof(a.disposition), "attachment; filename=\"%s-delta\"",
		 name);
	rc = http_send_profile(c, &a,
			       snapshot_write(&a.body, &p1, s->maps, LLGO_FORMAT_PPROF, flags, 0));
out:
	profile_release(&p0);
	profile_release(&p1);
	session_put(s);
	return rc;
}

/* ---- /debug/pprof/symbol -------------------------------------------------------------- */

/* Append "0x<addr> <name>\n" for each address of the '+'-separated list we can name (a
 * space separates too: libmicrohttpd decodes '+' in a query to a space). */
static void http_symbolize_list(struct session *s, const char *list, size_t len,
				struct buf *out)
{
	size_t i = 0;
	while (i < len) {
		size_t j = i;
		while (j < len && list[j] != '+' && list[j] != ' ')
			j++;
		char word[32];
		size_t wl = j - i;
		uint64_t pc = 0;
		if (s && s->maps && wl > 0 && wl < sizeof(word)) {
			memcpy(word, list + i, wl);
			word[wl] = '\0';
			char *end;
			errno = 0;
			/* Go's ParseUint(word, 0, 64): 0x.., 0.., or decimal */
			unsigned long long v = strtoull(word, &end, 0);
			if (!errno && *end == '\0' && word[0] != '-')
				pc = v;
		}
		if (pc) {
			/* pprof sends the Location addresses, already inside the call */
			const struct mapping *m = procmaps_find(s->maps, pc);
			struct sym_result r;
			if (m && symbolize_pc(m, pc, &r) > 0 && r.frames[r.nframes - 1].function)
				buf_printf(out, "%#llx %s\n", (unsigned long long)pc,
					   r.frames[r.nframes - 1].function);
		}
		i = j + 1;
	}
}

struct http_query_ctx {
	struct buf *q;
};

static enum MHD_Result http_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
					const char *value)
{
	struct http_query_ctx *qc = cls;
	(void)kind;
	/* "0xA+0xB" arrives as one key without a value */
	if (key && !value) {
		if (qc->q->len)
			buf_putc(qc->q, '+');
		buf_puts(qc->q, key);
	}
	return MHD_YES;
}

static enum MHD_Result http_symbol(struct http_server *h, struct MHD_Connection *c,
				   const char *method, struct http_req *req)
{
	if (req->too_large)
		return http_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body over %u bytes",
				  HTTP_MAX_BODY);
	struct http_answer a;
	http_answer_init(&a, MHD_HTTP_OK, "text/plain; charset=utf-8");
	/* Go: "Pprof only cares whether this number is 0 (no symbols available) or > 0." */
	buf_puts(&a.body, "num_symbols: 1\n");
	/* pprof drops the profile URL's query when it derives this one, so the pid is only
	 * known when given (our extension) or when one allowed process is attached; else the
	 * addresses stay unnamed, which pprof accepts. */
	struct session *s = NULL;
	const char *pid = http_arg(c, "pid");
	if (pid && *pid) {
		int64_t v;
		if (!http_parse_int(pid, &v) && v > 0 && v <= INT_MAX) {
			s = session_lookup(server_sessions(h->srv), (pid_t)v);
			if (s && !http_session_allowed(h, s)) {
				session_put(s);
				s = NULL;
			}
		}
	} else {
		size_t allowed;
		s = http_sole_session(h, &allowed);
	}
	if (strcmp(method, "POST") == 0) {
		http_symbolize_list(s, (const char *)req->body.data, req->body.len, &a.body);
	} else {
		struct buf q;
		buf_init(&q);
		struct http_query_ctx qc = { .q = &q };
		MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, http_collect_arg, &qc);
		http_symbolize_list(s, (const char *)q.data, q.len, &a.body);
		buf_free(&q);
	}
	if (s)
		session_put(s);
	return http_send(c, &a);
}

/* ---- /debug/pprof/ -------------------------------------------------------------------- */

static const struct {
	const char *name, *desc;
} http_profiles[] = {
	{ "allocs", "A sampling of all past memory allocations" },
	{ "heap", "A sampling of memory allocations of live objects. The gc GET parameter is "
		  "accepted and ignored (frees are recorded as they happen)." },
	{ "symbol", "Function names of the addresses POSTed as 0xA+0xB+..., for go tool pprof" },
};

static enum MHD_Result http_index(struct http_server *h, struct MHD_Connection *c)
{
	struct http_answer a;
	http_answer_init(&a, MHD_HTTP_OK, "text/html; charset=utf-8");
	struct buf *b = &a.body;
	buf_puts(b, "<html>\n<head>\n<title>/debug/pprof/</title>\n<style>\n"
		    ".profile-name{\n\tdisplay:inline-block;\n\twidth:6rem;\n}\n"
		    "td{\n\tpadding-right:1rem;\n}\n</style>\n</head>\n<body>\n/debug/pprof/\n"
		    "<br>\n<p>Set debug=1 as a query parameter to export in legacy text format. "
		    "Every profile takes pid=N, the process to profile (optional while exactly "
		    "one is attached); seconds=N gives a delta profile.</p>\n<br>\n"
		    "Profiled processes:\n<table>\n<thead><td>PID</td><td>Command</td>"
		    "<td>State</td><td>Rate</td><td>Sampled</td><td>Delivered</td>"
		    "<td>Dropped</td><td>Corrupt</td><td>Buckets</td><td>Profiles</td></thead>\n");
	struct session **v;
	size_t n = session_list(server_sessions(h->srv), false, &v);
	size_t shown = 0;
	for (size_t i = 0; i < n; i++) {
		if (!http_session_allowed(h, v[i]))
			continue;
		struct llgo_list_entry e;
		session_list_entry(v[i], &e);
		shown++;
		buf_printf(b, "<tr><td>%u</td><td>", e.pid);
		http_html(b, e.comm, sizeof(e.comm));
		buf_printf(b, "</td><td>%s</td><td>",
			   e.state == LLGO_PROC_LIVE ? "live" : "exited");
		if (e.rate == 0)
			buf_puts(b, "off");
		else if (e.rate == 1)
			buf_puts(b, "every allocation");
		else
			buf_printf(b, "%llu", (unsigned long long)e.rate);
		buf_printf(b,
			   "</td><td>%llu</td><td>%llu</td><td>%llu</td><td>%llu</td><td>%llu</td>"
			   "<td><a href='heap?pid=%u&amp;debug=1'>heap</a> "
			   "<a href='allocs?pid=%u&amp;debug=1'>allocs</a> "
			   "(proto: <a href='heap?pid=%u'>heap</a> "
			   "<a href='allocs?pid=%u'>allocs</a>)</td></tr>\n",
			   (unsigned long long)e.sampled, (unsigned long long)e.delivered,
			   (unsigned long long)e.dropped, (unsigned long long)e.corrupt,
			   (unsigned long long)e.buckets, e.pid, e.pid, e.pid, e.pid);
	}
	session_list_release(v, n);
	buf_puts(b, "</table>\n");
	if (!shown)
		buf_puts(b, "<p>No profiled process is attached.</p>\n");
	buf_puts(b, "<br>\nTypes of profiles available:\n<table>\n"
		    "<thead><td>Profile</td></thead>\n");
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(http_profiles); i++) {
		if (strcmp(http_profiles[i].name, "symbol") == 0)
			buf_printf(b, "<tr><td><a href='%s'>%s</a></td></tr>\n",
				   http_profiles[i].name, http_profiles[i].name);
		else
			buf_printf(b, "<tr><td><a href='%s?debug=1'>%s</a></td></tr>\n",
				   http_profiles[i].name, http_profiles[i].name);
	}
	buf_puts(b, "</table>\n<p>\nProfile Descriptions:\n<ul>\n");
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(http_profiles); i++) {
		buf_puts(b, "<li><div class=profile-name>");
		http_html(b, http_profiles[i].name, SIZE_MAX);
		buf_puts(b, ": </div> ");
		http_html(b, http_profiles[i].desc, SIZE_MAX);
		buf_puts(b, "</li>\n");
	}
	buf_puts(b, "</ul>\n</p>\n</body>\n</html>");
	return http_send(c, &a);
}

/* ---- dispatch ------------------------------------------------------------------------- */

static enum MHD_Result http_handle(void *cls, struct MHD_Connection *c, const char *url,
				   const char *method, const char *version,
				   const char *upload_data, size_t *upload_data_size, void **req_cls)
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
		req->keep_body = strcmp(url, HTTP_PREFIX "symbol") == 0;
		*req_cls = req;
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
	}
	if (atomic_load_explicit(&h->stopping, memory_order_acquire))
		return http_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "llgo-heapd is shutting down");

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
	if (strncmp(url, HTTP_PREFIX, strlen(HTTP_PREFIX)) != 0) {
		/* Go's http.NotFound */
		struct http_answer a;
		http_answer_init(&a, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8");
		buf_puts(&a.body, "404 page not found\n");
		return http_send(c, &a);
	}
	const char *name = url + strlen(HTTP_PREFIX);
	if (!*name)
		return http_index(h, c);
	if (strcmp(name, "symbol") == 0)
		return http_symbol(h, c, method, req);
	if (strcmp(name, "heap") == 0 || strcmp(name, "allocs") == 0)
		return http_profile(h, c, name);
	return http_error(c, MHD_HTTP_NOT_FOUND, "Unknown profile");
}

static void http_completed(void *cls, struct MHD_Connection *c, void **req_cls,
			   enum MHD_RequestTerminationCode toe)
{
	struct http_server *h = cls;
	(void)c;
	(void)toe;
	struct http_req *req = *req_cls;
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
	server_log("http: %s", line);
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
			if (http_parse_int(word, &num) || num < 0 || num >= (int64_t)UINT32_MAX) {
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

/* Split "HOST:PORT", ":PORT", "[V6]:PORT" into host (loopback when empty) and port. */
static int http_split(const char *ap, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon;
	if (ap[0] == '[') {
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
			 "--http: want HOST:PORT, :PORT or [IPV6]:PORT, not '%s'",
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
	h->listen_fd = -1;
	h->stop_fd = -1;
	h->family = ai->ai_family;
	size_t nu = uids && nuids ? nuids : 1;
	h->uids = calloc(nu, sizeof(*h->uids));
	if (!h->uids) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (uids && nuids)
		memcpy(h->uids, uids, nuids * sizeof(*uids));
	else
		h->uids[0] = geteuid();
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
			NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(h->address, sizeof(h->address), ss.ss_family == AF_INET6 ? "[%s]:%s" :
			 "%s:%s", nh, np);
	else
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
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNS,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
				  MHD_OPTION_NOTIFY_COMPLETED, http_completed, (void *)h,
				  MHD_OPTION_END);
	if (!h->mhd) {
		/* libmicrohttpd may or may not have closed the socket it was given */
		if (fcntl(h->listen_fd, F_GETFD) < 0)
			h->listen_fd = -1;
		snprintf(err, errlen, "--http %s: libmicrohttpd did not start", h->address);
		return -EIO;
	}
	h->listen_fd = -1; /* MHD_stop_daemon closes it */
	server_log("http: serving http://%s/debug/pprof/", h->address);
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
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	if (h->stop_fd >= 0)
		close(h->stop_fd);
	free(h->uids);
	free(h);
}

const char *http_address(const struct http_server *h)
{
	return h->address;
}
