// SPDX-License-Identifier: MIT
/*
 * http_targets.c: /targets, the live profiled processes as a Prometheus HTTP service
 * discovery list (http_sd_configs; Parca and Grafana Alloy's discovery.http read the same),
 * so one entry per host finds every process on it:
 *
 *   [{"targets": ["HOST:PORT"],
 *     "labels": {"__param_pid": "N", "pid": "N", "service_name": "...", "exe": "...",
 *                "__meta_llgo_heap_comm": "...", "__meta_llgo_heap_uid": "U"}}, ...]
 *
 * A scraper turns __param_pid into ?pid=N on every URL it fetches from the target
 * (/debug/pprof/allocs?pid=N, /metrics?pid=N); service_name is LLGO_HEAP_SERVICE from the
 * process's environment, else its command name; the __meta_ labels are for relabeling and
 * are dropped after it.
 *
 * HOST:PORT is the address the daemon serves on; bound to every interface (0.0.0.0, [::])
 * it is the Host header of the request when that is a plain host name or address (with
 * the bound port added when it has none), else this host's name with the bound port.
 *
 * The environment and /proc/PID/exe are read once per process, between two identity checks
 * (session_may_read, session_may_have_read: the pid may have been reused, or the process
 * may have become someone else's by a setuid exec), only when the environment file is its
 * owner's (not after prctl(PR_SET_DUMPABLE, 0)), at most HTTP_TARGETS_ENV_MAX bytes, and
 * kept in the session. Every string is hostile: escaped (escape.c) and then JSON-escaped.
 * Only processes of allowed uids are listed (http.c).
 *
 * Left to others: the session registry (session.c), the server and access (http.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http_internal.h"

#define HTTP_TARGETS_ENV_MAX (256u << 10) /* bytes of /proc/PID/environ read at most */
#define HTTP_TARGETS_SERVICE_MAX 128u     /* longer LLGO_HEAP_SERVICE values are ignored */
#define HTTP_TARGETS_KEY "LLGO_HEAP_SERVICE="

/* The first LLGO_HEAP_SERVICE=VALUE entry of env (NUL-separated, len bytes; complete: the
 * whole file, so a last entry without NUL is whole), as getenv would find it; NULL when
 * there is none, or its value is empty or too long. */
static char *http_targets_find_service(const char *env, size_t len, bool complete)
{
	const size_t kl = strlen(HTTP_TARGETS_KEY);
	size_t i = 0;
	while (i < len) {
		const char *e = env + i;
		const char *nul = memchr(e, '\0', len - i);
		if (!nul && !complete)
			return NULL; /* cut by the read bound */
		size_t el = nul ? (size_t)(nul - e) : len - i;
		if (el >= kl && memcmp(e, HTTP_TARGETS_KEY, kl) == 0) {
			size_t vl = el - kl;
			return vl && vl <= HTTP_TARGETS_SERVICE_MAX ? strndup(e + kl, vl) : NULL;
		}
		i += el + 1;
	}
	return NULL;
}

/* LLGO_HEAP_SERVICE and the executable of s's process, read between two identity checks;
 * NULL for what could not be read or is not there. */
static void http_targets_read(struct session *s, char **service, char **exe)
{
	*service = *exe = NULL;
	if (!session_may_read(s))
		return;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)s->pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	/* A process that made itself not dumpable has its files here given to root (the
	 * directory keeps its owner, so ident.c does not see it): what its owner could not
	 * read is not read for them either. */
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) != 0 || (s->uid != 0 && st.st_uid != s->uid))) {
		close(fd);
		return;
	}
	char *env = fd >= 0 ? malloc(HTTP_TARGETS_ENV_MAX) : NULL;
	if (env) {
		size_t len = 0;
		bool complete = false;
		while (len < HTTP_TARGETS_ENV_MAX) {
			ssize_t n = read(fd, env + len, HTTP_TARGETS_ENV_MAX - len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				complete = n == 0;
				break;
			}
			len += (size_t)n;
		}
		*service = http_targets_find_service(env, len, complete);
		free(env);
	}
	if (fd >= 0)
		close(fd);
	char link[PATH_MAX];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)s->pid);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n > 0) {
		link[n] = '\0';
		*exe = strdup(link);
	}
	/* what was read belongs to the process that attached only if it still is itself */
	if (!session_may_have_read(s)) {
		free(*service);
		free(*exe);
		*service = *exe = NULL;
	}
}

void http_targets_names(struct session *s, struct http_targets_names *out)
{
	/* acquire: pairs with the release below; the strings are complete once seen */
	if (!atomic_load_explicit(&s->names_known, memory_order_acquire) && session_is_live(s)) {
		char *service, *exe;
		http_targets_read(s, &service, &exe);
		pthread_mutex_lock(&s->lock);
		if (!atomic_load_explicit(&s->names_known, memory_order_relaxed)) {
			s->service_name = service;
			s->exe = exe;
			service = exe = NULL;
			atomic_store_explicit(&s->names_known, true, memory_order_release);
		}
		pthread_mutex_unlock(&s->lock);
		free(service); /* another request read them first */
		free(exe);
	}
	bool known = atomic_load_explicit(&s->names_known, memory_order_acquire);
	out->service = known && s->service_name ? s->service_name : s->comm;
	out->exe = known && s->exe ? s->exe : "";
}

/* A host name or address, with or without ":PORT" (*has_port), fit to hand back. */
static bool http_targets_host_ok(const char *s, bool *has_port)
{
	size_t n = strlen(s);
	*has_port = false;
	if (n == 0 || n > 255)
		return false;
	const char *rest;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close || close == s + 1 ||
		    strspn(s + 1, "0123456789abcdefABCDEF:.") != (size_t)(close - s - 1))
			return false;
		rest = close + 1;
	} else {
		size_t hl = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				      "0123456789.-_");
		if (hl == 0)
			return false;
		rest = s + hl;
	}
	if (!*rest)
		return true;
	if (rest[0] != ':' || !rest[1] || strlen(rest + 1) > 5 ||
	    strspn(rest + 1, "0123456789") != strlen(rest + 1))
		return false;
	*has_port = true;
	return true;
}

/* The HOST:PORT scrapers are to use (see the top of this file). */
static void http_targets_host(struct http_server *h, struct MHD_Connection *c, char *out,
			      size_t n)
{
	if (!h->wildcard) {
		snprintf(out, n, "%s", h->address);
		return;
	}
	bool has_port;
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	if (host && http_targets_host_ok(host, &has_port)) {
		if (has_port)
			snprintf(out, n, "%s", host);
		else
			snprintf(out, n, "%s:%u", host, h->port);
		return;
	}
	char name[256] = "";
	if (gethostname(name, sizeof(name) - 1) == 0 && http_targets_host_ok(name, &has_port) &&
	    !has_port)
		snprintf(out, n, "%s:%u", name, h->port);
	else
		snprintf(out, n, "%s:%u", h->family == AF_INET6 ? "[::1]" : "127.0.0.1", h->port);
}

enum MHD_Result http_targets_handle(struct http_server *h, struct MHD_Connection *c,
				    const struct http_view *view)
{
	char host[300];
	http_targets_host(h, c, host, sizeof(host));
	struct http_answer a;
	http_answer_init(&a, MHD_HTTP_OK, "application/json; charset=utf-8");
	struct buf *b = &a.body;
	buf_putc(b, '[');
	struct session **v;
	size_t n = session_list(server_sessions(h->srv), true, &v);
	size_t shown = 0;
	for (size_t i = 0; i < n; i++) {
		if (!http_request_sees(view, v[i]))
			continue;
		struct http_targets_names names;
		http_targets_names(v[i], &names);
		buf_puts(b, shown++ ? ",\n {\"targets\": [" : "\n {\"targets\": [");
		http_answer_quote(b, host);
		buf_printf(b, "], \"labels\": {\"__param_pid\": \"%d\", \"pid\": \"%d\", "
			      "\"service_name\": ", (int)v[i]->pid, (int)v[i]->pid);
		http_answer_quote(b, names.service);
		buf_puts(b, ", \"exe\": ");
		http_answer_quote(b, names.exe);
		buf_puts(b, ", \"__meta_llgo_heap_comm\": ");
		http_answer_quote(b, v[i]->comm);
		buf_printf(b, ", \"__meta_llgo_heap_uid\": \"%u\"}}", (unsigned)v[i]->uid);
	}
	session_list_release(v, n);
	buf_puts(b, shown ? "\n]\n" : "]\n");
	return http_answer_send(c, &a);
}
