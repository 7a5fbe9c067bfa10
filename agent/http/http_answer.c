// SPDX-License-Identifier: MIT
/*
 * http_answer.c: how an endpoint of llgo-heapd's HTTP server answers: a struct http_answer
 * (status, content type, disposition, body) queued on libmicrohttpd's connection, Go's
 * serveError for errors, and strings from a profiled process quoted for JSON and Prometheus
 * labels. A body that ran out of memory becomes a 500 the answer can still build. With
 * http_request.c, all an endpoint calls of the server.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/escape.h"
#include "http_internal.h"

void http_answer_init(struct http_answer *a, unsigned status, const char *ctype)
{
	memset(a, 0, sizeof(*a));
	a->status = status;
	a->content_type = ctype;
	buf_init(&a->body);
}

enum MHD_Result http_answer_send(struct MHD_Connection *c, struct http_answer *a)
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
enum MHD_Result http_answer_error(struct MHD_Connection *c, unsigned status, const char *fmt,
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
	return http_answer_send(c, &a);
}

void http_answer_quote(struct buf *b, const char *s)
{
	char *safe = escape_dup(s);
	buf_putc(b, '"');
	for (const char *p = safe ? safe : ""; *p; p++) {
		if (*p == '"' || *p == '\\')
			buf_putc(b, '\\');
		buf_putc(b, *p);
	}
	buf_putc(b, '"');
	if (!safe)
		b->failed = true;
	free(safe);
}
