// SPDX-License-Identifier: MIT
/*
 * http_request.c: what an endpoint of llgo-heapd's HTTP server reads of its request: its
 * arguments, parsed as Go's net/http/pprof parses them (strconv), and whether the request's
 * view (struct http_view, made by http.c from the uids and the token) lets it see a uid or
 * a session. With http_answer.c, all an endpoint calls of the server: the router (http.c)
 * calls the endpoints, never the other way.
 */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "http_internal.h"

/* Go's strconv.ParseInt(s, 10, 64): optional sign, decimal digits, no spaces. Returns 0,
 * -EINVAL (syntax) or -ERANGE (with *out clamped, as Go does). */
int http_request_int(const char *s, int64_t *out)
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
int64_t http_request_atoi(const char *s)
{
	int64_t v;
	int rc = http_request_int(s, &v);
	return rc == -EINVAL ? 0 : v;
}

const char *http_request_arg(struct MHD_Connection *c, const char *key)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
}

bool http_request_sees_uid(const struct http_view *v, uid_t uid)
{
	if (v->all || (v->has_own && v->own == uid))
		return true;
	for (size_t i = 0; i < v->n; i++)
		if (v->uids[i] == uid)
			return true;
	return false;
}

/* A process whose identity changed after it attached (a setuid exec, ident.c) is served as
 * root's: only when root's processes may be seen. */
bool http_request_sees(const struct http_view *v, const struct session *s)
{
	return http_request_sees_uid(v, s->uid) &&
	       (!atomic_load(&s->ident_lost) || http_request_sees_uid(v, 0));
}

int64_t http_request_pid(struct MHD_Connection *c)
{
	const char *arg = http_request_arg(c, "pid");
	if (!arg || !*arg)
		return 0;
	int64_t pid;
	if (http_request_int(arg, &pid) || pid <= 0 || pid > INT_MAX)
		return -1;
	return pid;
}
