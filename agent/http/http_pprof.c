// SPDX-License-Identifier: MIT
/*
 * http_pprof.c: Go's net/http/pprof endpoints of llgo-heapd's HTTP server, for each attached
 * process, the way a Go program importing that package answers them, so
 * `go tool pprof http://HOST:PORT/debug/pprof/heap?pid=N`, scrapers and browsers work
 * unchanged:
 *
 *   /debug/pprof/heap?pid=N     gzipped profile.proto; debug=N (N != 0): legacy text;
 *   /debug/pprof/allocs?pid=N   the same data with default_sample_type alloc_space;
 *                               seconds=N: delta profile over the next N seconds;
 *                               peak=1 (ours): the peak view (peak.c), sample types
 *                               peak_inuse_objects/count, peak_inuse_space/bytes;
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
 * A process of a uid not allowed (http.c) is answered exactly as an unknown pid (same status,
 * same text), and the index and the symbol service ignore it. A sleeping delta wakes early
 * when the server stops (stop_fd) or the client goes away (POLLRDHUP on its socket), as Go's
 * handler watches the request's context.
 *
 * Left to others: the server, access and dispatch (http.c), the profile, its delta and its
 * formats (profile.c and the writers), symbols (symbolize.c).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_internal.h"

/* Delta profiles (seconds=N) sleeping at once: the rest of the connections stay for
 * everything else, so slow deltas cannot lock the endpoint. */
#define HTTP_MAX_DELTAS 16u

/* Go's html.EscapeString, plus control bytes (a hostile comm) shown as '?'. */
static void http_pprof_html(struct buf *b, const char *s, size_t max)
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

/* Send a written profile, or the error its writer returned (werr). A buffer that ran out
 * of memory becomes http_answer_send's "out of memory" answer. */
static enum MHD_Result http_pprof_send_profile(struct MHD_Connection *c,
					       struct http_answer *a, int werr)
{
	if (werr && !a->body.failed) {
		buf_free(&a->body);
		return http_answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
					 "failed to write profile: %s", strerror(-werr));
	}
	return http_answer_send(c, a);
}

/* ---- sessions ------------------------------------------------------------------------- */

/* The one live process of an allowed uid, referenced, if there is exactly one; *allowed
 * gets how many there are. */
static struct session *http_pprof_sole_session(struct http_server *h,
						const struct http_view *view, size_t *allowed)
{
	struct session **v;
	size_t n = session_list(server_sessions(h->srv), true, &v);
	struct session *one = NULL;
	*allowed = 0;
	for (size_t i = 0; i < n; i++) {
		if (http_request_sees(view, v[i])) {
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
static struct session *http_pprof_session(struct http_server *h, struct MHD_Connection *c,
					  const struct http_view *view, enum MHD_Result *sent)
{
	const char *arg = http_request_arg(c, "pid");
	if (arg && *arg) {
		int64_t pid;
		if (http_request_int(arg, &pid) || pid <= 0 || pid > INT_MAX) {
			*sent = http_answer_error(
				c, MHD_HTTP_BAD_REQUEST,
				"invalid value for \"pid\" - must be a positive integer");
			return NULL;
		}
		struct session *s = server_lookup(h->srv, (pid_t)pid);
		if (s && !http_request_sees(view, s)) {
			session_put(s);
			s = NULL;
		}
		if (!s)
			*sent = http_answer_error(
				c, MHD_HTTP_NOT_FOUND,
				"no profiled process with pid %lld (see /debug/pprof/)",
				(long long)pid);
		return s;
	}
	/* No pid: the one allowed live process, if there is exactly one. */
	size_t allowed;
	struct session *one = http_pprof_sole_session(h, view, &allowed);
	if (one)
		return one;
	if (allowed == 0)
		*sent = http_answer_error(
			c, MHD_HTTP_BAD_REQUEST,
			"missing \"pid\" parameter: no profiled process is attached");
	else
		*sent = http_answer_error(
			c, MHD_HTTP_BAD_REQUEST,
			"missing \"pid\" parameter: %zu profiled processes are attached; "
			"choose one with ?pid=N (see /debug/pprof/)",
			allowed);
	return NULL;
}

static uint64_t http_pprof_sub(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* Sleep ns, waking early when the server stops (-ECANCELED) or the client hangs up
 * (-ECONNRESET): Go's handler selects on the request context the same way. */
static int http_pprof_wait(struct http_server *h, struct MHD_Connection *c, uint64_t ns)
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

static enum MHD_Result http_pprof_profile(struct http_server *h, struct MHD_Connection *c,
					  const struct http_view *view, const char *name)
{
	bool allocs = strcmp(name, "allocs") == 0;
	uint32_t flags = allocs ? LLGO_SNAP_ALLOCS : 0;
	/* Go checks seconds first (value, then WriteTimeout, then debug), then gc and debug. */
	const char *sec = http_request_arg(c, "seconds");
	int64_t seconds = 0;
	if (sec && *sec) {
		if (http_request_int(sec, &seconds) || seconds <= 0)
			return http_answer_error(
				c, MHD_HTTP_BAD_REQUEST,
				"invalid value for \"seconds\" - must be a positive integer");
		if (seconds > HTTP_MAX_SECONDS)
			return http_answer_error(c, MHD_HTTP_BAD_REQUEST,
						 "profile duration exceeds server's WriteTimeout");
		if (http_request_atoi(http_request_arg(c, "debug")) != 0)
			return http_answer_error(c, MHD_HTTP_BAD_REQUEST,
						 "seconds and debug params are incompatible");
	}
	/* gc=N: Go runs a collection first so in-use counts are current. Here frees are
	 * recorded as they happen, so there is nothing to run; the parameter is ignored. */
	int64_t debug = seconds ? 0 : http_request_atoi(http_request_arg(c, "debug"));
	/* peak=1 (ours): the in-use values at the highest in-use total (peak.c) */
	bool peak = http_request_atoi(http_request_arg(c, "peak")) != 0;
	if (peak && seconds)
		return http_answer_error(c, MHD_HTTP_BAD_REQUEST,
					 "seconds and peak params are incompatible");

	enum MHD_Result sent = MHD_NO;
	struct session *s = http_pprof_session(h, c, view, &sent);
	if (!s)
		return sent;

	struct profile p0, p1;
	memset(&p0, 0, sizeof(p0));
	memset(&p1, 0, sizeof(p1));
	struct http_answer a;
	enum MHD_Result rc;
	const struct snapshot_source *src = server_snapshot_source(h->srv);
	if (!seconds) {
		if ((peak ? snapshot_collect_peak : snapshot_collect)(src, s, &p1)) {
			rc = http_answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
					       "failed to collect profile");
			goto out;
		}
		http_answer_init(&a, MHD_HTTP_OK,
				 debug ? "text/plain; charset=utf-8" : "application/octet-stream");
		if (!debug)
			snprintf(a.disposition, sizeof(a.disposition),
				 "attachment; filename=\"%s%s\"", name, peak ? "-peak" : "");
		rc = http_pprof_send_profile(
			c, &a,
			snapshot_write(&a.body, &p1, s->maps,
				       debug ? LLGO_FORMAT_TEXT : LLGO_FORMAT_PPROF, flags, 0));
		goto out;
	}

	if (atomic_fetch_add(&h->deltas, 1) >= HTTP_MAX_DELTAS) {
		atomic_fetch_sub(&h->deltas, 1);
		rc = http_answer_error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
				       "too many delta profiles in progress (%u); try again later",
				       HTTP_MAX_DELTAS);
		goto out;
	}
	if (snapshot_collect(src, s, &p0)) {
		atomic_fetch_sub(&h->deltas, 1);
		rc = http_answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				       "failed to collect profile");
		goto out;
	}
	int w = http_pprof_wait(h, c, (uint64_t)seconds * 1000000000ull);
	atomic_fetch_sub(&h->deltas, 1);
	if (w == -ECONNRESET) {
		/* Go's answer to a canceled request context; nobody reads it */
		rc = http_answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "context canceled");
		goto out;
	}
	if (w) {
		rc = http_answer_error(c, MHD_HTTP_SERVICE_UNAVAILABLE,
				       "llgo-heapd is shutting down");
		goto out;
	}
	if (snapshot_collect(src, s, &p1)) {
		rc = http_answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				       "failed to collect profile");
		goto out;
	}
	if (profile_subtract(&p1, &p0)) {
		rc = http_answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR,
				       "failed to compute delta");
		goto out;
	}
	/* as Go: time of the second collection, duration between the two; the accounting
	 * comment covers the same interval */
	p1.meta.duration_nanos = http_pprof_sub(p1.meta.time_nanos, p0.meta.time_nanos);
	p1.meta.sampled = http_pprof_sub(p1.meta.sampled, p0.meta.sampled);
	p1.meta.delivered = http_pprof_sub(p1.meta.delivered, p0.meta.delivered);
	p1.meta.dropped = http_pprof_sub(p1.meta.dropped, p0.meta.dropped);
	p1.meta.corrupt = http_pprof_sub(p1.meta.corrupt, p0.meta.corrupt);
	p1.meta.dropped_prior = http_pprof_sub(p1.meta.dropped_prior, p0.meta.dropped_prior);
	p1.meta.dropped_no_ring = http_pprof_sub(p1.meta.dropped_no_ring, p0.meta.dropped_no_ring);
	p1.meta.dropped_detached =
		http_pprof_sub(p1.meta.dropped_detached, p0.meta.dropped_detached);
	p1.meta.cap_hits = http_pprof_sub(p1.meta.cap_hits, p0.meta.cap_hits);
	http_answer_init(&a, MHD_HTTP_OK, "application/octet-stream");
	snprintf(a.disposition, sizeof(a.disposition), "attachment; filename=\"%s-delta\"",
		 name);
	rc = http_pprof_send_profile(c, &a,
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
static void http_pprof_symbolize_list(struct session *s, const char *list, size_t len,
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
			unsigned rd = procmaps_read_begin(s->maps);
			const struct mapping *m = procmaps_find(s->maps, pc);
			struct sym_result r;
			if (m && symbolize_pc(m, pc, &r) > 0 && r.frames[r.nframes - 1].function)
				buf_printf(out, "%#llx %s\n", (unsigned long long)pc,
					   r.frames[r.nframes - 1].function);
			procmaps_read_end(s->maps, rd);
		}
		i = j + 1;
	}
}

struct http_pprof_query_ctx {
	struct buf *q;
};

static enum MHD_Result http_pprof_collect_arg(void *cls, enum MHD_ValueKind kind,
					      const char *key, const char *value)
{
	struct http_pprof_query_ctx *qc = cls;
	(void)kind;
	/* "0xA+0xB" arrives as one key without a value */
	if (key && !value) {
		if (qc->q->len)
			buf_putc(qc->q, '+');
		buf_puts(qc->q, key);
	}
	return MHD_YES;
}

static enum MHD_Result http_pprof_symbol(struct http_server *h, struct MHD_Connection *c,
					 const char *method, struct http_req *req)
{
	if (req->too_large)
		return http_answer_error(c, MHD_HTTP_CONTENT_TOO_LARGE,
					 "request body over %u bytes", HTTP_MAX_BODY);
	struct http_answer a;
	http_answer_init(&a, MHD_HTTP_OK, "text/plain; charset=utf-8");
	/* Go: "Pprof only cares whether this number is 0 (no symbols available) or > 0." */
	buf_puts(&a.body, "num_symbols: 1\n");
	/* pprof drops the profile URL's query when it derives this one, so the pid is only
	 * known when given (our extension) or when one allowed process is attached; else the
	 * addresses stay unnamed, which pprof accepts. */
	struct session *s = NULL;
	const char *pid = http_request_arg(c, "pid");
	if (pid && *pid) {
		int64_t v;
		if (!http_request_int(pid, &v) && v > 0 && v <= INT_MAX) {
			s = session_lookup(server_sessions(h->srv), (pid_t)v);
			if (s && !http_request_sees(&req->view, s)) {
				session_put(s);
				s = NULL;
			}
		}
	} else {
		size_t allowed;
		s = http_pprof_sole_session(h, &req->view, &allowed);
	}
	if (strcmp(method, "POST") == 0) {
		http_pprof_symbolize_list(s, (const char *)req->body.data, req->body.len, &a.body);
	} else {
		struct buf q;
		buf_init(&q);
		struct http_pprof_query_ctx qc = { .q = &q };
		MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, http_pprof_collect_arg, &qc);
		http_pprof_symbolize_list(s, (const char *)q.data, q.len, &a.body);
		buf_free(&q);
	}
	if (s)
		session_put(s);
	return http_answer_send(c, &a);
}

/* ---- /debug/pprof/ -------------------------------------------------------------------- */

static const struct {
	const char *name, *desc;
} http_pprof_profiles[] = {
	{ "allocs", "A sampling of all past memory allocations" },
	{ "heap", "A sampling of memory allocations of live objects. The gc GET parameter is "
		  "accepted and ignored (frees are recorded as they happen)." },
	{ "symbol", "Function names of the addresses POSTed as 0xA+0xB+..., for go tool pprof" },
};

static enum MHD_Result http_pprof_index(struct http_server *h, struct MHD_Connection *c,
					const struct http_view *view)
{
	struct http_answer a;
	http_answer_init(&a, MHD_HTTP_OK, "text/html; charset=utf-8");
	struct buf *b = &a.body;
	buf_puts(b, "<html>\n<head>\n<title>/debug/pprof/</title>\n<style>\n"
		    ".profile-name{\n\tdisplay:inline-block;\n\twidth:6rem;\n}\n"
		    "td{\n\tpadding-right:1rem;\n}\n</style>\n</head>\n<body>\n/debug/pprof/\n"
		    "<br>\n<p>Set debug=1 as a query parameter to export in legacy text format. "
		    "Every profile takes pid=N, the process to profile (optional while exactly "
		    "one is attached); seconds=N gives a delta profile; peak=1 on heap the "
		    "in-use values at the highest in-use total seen.</p>\n<br>\n"
		    "Profiled processes:\n<table>\n<thead><td>PID</td><td>Command</td>"
		    "<td>State</td><td>Rate</td><td>Sampled</td><td>Delivered</td>"
		    "<td>Dropped</td><td>Corrupt</td><td>Buckets</td><td>Profiles</td></thead>\n");
	struct session **v;
	size_t n = session_list(server_sessions(h->srv), false, &v);
	size_t shown = 0;
	for (size_t i = 0; i < n; i++) {
		if (!http_request_sees(view, v[i]))
			continue;
		struct llgo_list_entry e;
		session_list_entry(v[i], &e);
		shown++;
		buf_printf(b, "<tr><td>%u</td><td>", e.pid);
		http_pprof_html(b, e.comm, sizeof(e.comm));
		buf_printf(b, "</td><td>%s</td><td>",
			   e.state == LLGO_PROC_LIVE       ? "live"
			   : e.state == LLGO_PROC_DETACHED ? "detached"
							   : "exited");
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
			   "<a href='heap?pid=%u&amp;peak=1&amp;debug=1'>peak</a> "
			   "(proto: <a href='heap?pid=%u'>heap</a> "
			   "<a href='allocs?pid=%u'>allocs</a> "
			   "<a href='heap?pid=%u&amp;peak=1'>peak</a>)</td></tr>\n",
			   (unsigned long long)e.sampled, (unsigned long long)e.delivered,
			   (unsigned long long)e.dropped, (unsigned long long)e.corrupt,
			   (unsigned long long)e.buckets, e.pid, e.pid, e.pid, e.pid, e.pid, e.pid);
	}
	session_list_release(v, n);
	buf_puts(b, "</table>\n");
	if (!shown)
		buf_puts(b, "<p>No profiled process is attached.</p>\n");
	buf_puts(b, "<br>\nTypes of profiles available:\n<table>\n"
		    "<thead><td>Profile</td></thead>\n");
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(http_pprof_profiles); i++) {
		if (strcmp(http_pprof_profiles[i].name, "symbol") == 0)
			buf_printf(b, "<tr><td><a href='%s'>%s</a></td></tr>\n",
				   http_pprof_profiles[i].name, http_pprof_profiles[i].name);
		else
			buf_printf(b, "<tr><td><a href='%s?debug=1'>%s</a></td></tr>\n",
				   http_pprof_profiles[i].name, http_pprof_profiles[i].name);
	}
	buf_puts(b, "</table>\n<p>\nProfile Descriptions:\n<ul>\n");
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(http_pprof_profiles); i++) {
		buf_puts(b, "<li><div class=profile-name>");
		http_pprof_html(b, http_pprof_profiles[i].name, SIZE_MAX);
		buf_puts(b, ": </div> ");
		http_pprof_html(b, http_pprof_profiles[i].desc, SIZE_MAX);
		buf_puts(b, "</li>\n");
	}
	buf_puts(b, "</ul>\n</p>\n</body>\n</html>");
	return http_answer_send(c, &a);
}


enum MHD_Result http_pprof_handle(struct http_server *h, struct MHD_Connection *c,
				  const char *name, const char *method, struct http_req *req)
{
	if (!*name)
		return http_pprof_index(h, c, &req->view);
	if (strcmp(name, "symbol") == 0)
		return http_pprof_symbol(h, c, method, req);
	if (strcmp(name, "heap") == 0 || strcmp(name, "allocs") == 0)
		return http_pprof_profile(h, c, &req->view, name);
	return http_answer_error(c, MHD_HTTP_NOT_FOUND, "Unknown profile");
}
