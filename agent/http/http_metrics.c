// SPDX-License-Identifier: MIT
/*
 * http_metrics.c: /metrics, llgo-heapd's counters in the Prometheus text exposition format
 * (version 0.0.4), every name prefixed llgo_heap_, each family with its HELP and TYPE:
 *
 *   per profiled process of an allowed uid (labels pid, service_name as /targets gives it):
 *     llgo_heap_process_{sampled,delivered,dropped,corrupt,budget_dropped}_total,
 *     llgo_heap_process_{buckets,rings,sample_rate_bytes,live};
 *   the daemon (left out when ?pid=N asks for one process, as a /targets target does):
 *     its memory, the processes it holds, its socket and HTTP connections, the HTTP
 *     requests by endpoint and the connections closed by http_conns.c, and its budgets
 *     (budget.c): what all users hold and the limits, and for each uid whose processes the
 *     request may see (listed, its own, or those of the processes shown) what it holds, its
 *     limits and the ones it hit.
 *
 * Budget limits of 0 (none) are written +Inf. Label values are hostile (a command name, an
 * environment variable): escaped by escape.c (valid UTF-8, no control character), then as
 * the format wants (backslash, double quote).
 *
 * Left to others: the counters themselves (session.c, server.c, budget.c), the service name
 * (http_targets.c), access (http.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../server/budget.h"
#include "http_internal.h"

/* One process's row: the session is held until the answer is written. */
struct http_metrics_row {
	struct session *s;
	struct llgo_list_entry e;
	struct http_targets_names names;
};

/* Values of label kind, in enum budget_kind order. */
static const char *const http_metrics_kinds[BUDGET_NKINDS] = {
	"connections", "processes", "rings", "ring_memory_bytes", "bucket_memory_bytes",
	"unread_answer_bytes", "unwind_memory_bytes",
};

static const char *const http_metrics_handlers[HTTP_H_COUNT] = {
	"root", "pprof", "targets", "metrics", "other",
};

static void http_metrics_family(struct buf *b, const char *name, const char *type,
				const char *help)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name="value" of a hostile value. */
static void http_metrics_label(struct buf *b, const char *name, const char *value)
{
	buf_printf(b, "%s=", name);
	http_answer_quote(b, value);
}

/* A limit: 0 is none. */
static void http_metrics_limit(struct buf *b, uint64_t v)
{
	if (v)
		buf_printf(b, "%llu\n", (unsigned long long)v);
	else
		buf_puts(b, "+Inf\n");
}

enum http_metrics_field {
	HTTP_M_SAMPLED, HTTP_M_DELIVERED, HTTP_M_DROPPED, HTTP_M_CORRUPT, HTTP_M_BUDGET_DROPPED,
	HTTP_M_BUCKETS, HTTP_M_RINGS, HTTP_M_RATE, HTTP_M_LIVE, HTTP_M_COUNT,
};

static const struct {
	const char *name, *type, *help;
} http_metrics_process[HTTP_M_COUNT] = {
	{ "llgo_heap_process_sampled_total", "counter",
	  "Allocations the process sampled (its shim's count)." },
	{ "llgo_heap_process_delivered_total", "counter",
	  "Samples the daemon read from the process's rings." },
	{ "llgo_heap_process_dropped_total", "counter",
	  "Samples lost: rings full, no ring, no daemon, or taken by an earlier reader." },
	{ "llgo_heap_process_corrupt_total", "counter",
	  "Records of the process the daemon rejected as malformed." },
	{ "llgo_heap_process_budget_dropped_total", "counter",
	  "Samples counted but not aggregated: the uid was over its bucket memory budget." },
	{ "llgo_heap_process_buckets", "gauge", "Distinct stacks aggregated for the process." },
	{ "llgo_heap_process_rings", "gauge", "Rings the process shares with the daemon." },
	{ "llgo_heap_process_sample_rate_bytes", "gauge",
	  "Average bytes allocated per sample (0: sampling off, 1: every allocation)." },
	{ "llgo_heap_process_live", "gauge",
	  "1 while the process runs, 0 once it exited (its profile is kept for a while)." },
};

static uint64_t http_metrics_value(const struct llgo_list_entry *e, enum http_metrics_field f)
{
	switch (f) {
	case HTTP_M_SAMPLED: return e->sampled;
	case HTTP_M_DELIVERED: return e->delivered;
	case HTTP_M_DROPPED: return e->dropped;
	case HTTP_M_CORRUPT: return e->corrupt;
	case HTTP_M_BUDGET_DROPPED: return e->budget_dropped;
	case HTTP_M_BUCKETS: return e->buckets;
	case HTTP_M_RINGS: return e->rings;
	case HTTP_M_RATE: return e->rate;
	case HTTP_M_LIVE: return e->state == LLGO_PROC_LIVE;
	default: return 0;
	}
}

static void http_metrics_processes(struct buf *b, const struct http_metrics_row *rows,
				   size_t n)
{
	for (int f = 0; f < HTTP_M_COUNT; f++) {
		http_metrics_family(b, http_metrics_process[f].name, http_metrics_process[f].type,
				    http_metrics_process[f].help);
		for (size_t i = 0; i < n; i++) {
			char pid[16];
			snprintf(pid, sizeof(pid), "%u", rows[i].e.pid);
			buf_printf(b, "%s{", http_metrics_process[f].name);
			http_metrics_label(b, "pid", pid);
			buf_putc(b, ',');
			http_metrics_label(b, "service_name", rows[i].names.service);
			buf_printf(b, "} %llu\n", (unsigned long long)http_metrics_value(
							  &rows[i].e, (enum http_metrics_field)f));
		}
	}
}

/* The daemon's own memory, from /proc/self/statm (pages). */
static void http_metrics_memory(struct buf *b)
{
	unsigned long long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "re");
	if (f) {
		if (fscanf(f, "%llu %llu", &size, &resident) != 2)
			size = resident = 0;
		fclose(f);
	}
	long page = sysconf(_SC_PAGESIZE);
	unsigned long long ps = page > 0 ? (unsigned long long)page : 4096;
	http_metrics_family(b, "llgo_heap_daemon_resident_memory_bytes", "gauge",
			    "Resident memory of llgo-heapd.");
	buf_printf(b, "llgo_heap_daemon_resident_memory_bytes %llu\n", resident * ps);
	http_metrics_family(b, "llgo_heap_daemon_virtual_memory_bytes", "gauge",
			    "Virtual memory of llgo-heapd.");
	buf_printf(b, "llgo_heap_daemon_virtual_memory_bytes %llu\n", size * ps);
}

static void http_metrics_counter(struct buf *b, const char *name, const char *help,
				 uint64_t v)
{
	http_metrics_family(b, name, "counter", help);
	buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

static const char *const http_metrics_closed[HTTP_CLOSED_COUNT] = {
	"peer_limit", "server_full", "request_deadline",
};

static size_t http_metrics_add_uid(uid_t *v, size_t k, uid_t u)
{
	for (size_t j = 0; j < k; j++)
		if (v[j] == u)
			return k;
	v[k] = u;
	return k + 1;
}

/* The uids the request may see that budget lines are written for: the view's list and its
 * own; with every uid (root's client), those of the processes shown. Returns how many were
 * put in *out (malloc'ed; NULL when out of memory). */
static size_t http_metrics_uids(const struct http_view *view,
				const struct http_metrics_row *rows, size_t n, uid_t **out)
{
	*out = calloc(view->n + 1 + (view->all ? n : 0), sizeof(**out));
	if (!*out)
		return 0;
	size_t k = 0;
	for (size_t i = 0; i < view->n; i++)
		k = http_metrics_add_uid(*out, k, view->uids[i]);
	if (view->has_own)
		k = http_metrics_add_uid(*out, k, view->own);
	for (size_t i = 0; view->all && i < n; i++)
		k = http_metrics_add_uid(*out, k, rows[i].e.uid);
	return k;
}

static void http_metrics_daemon(struct http_server *h, struct MHD_Connection *c, struct buf *b,
				const struct http_view *view, const struct http_metrics_row *rows,
				size_t n)
{
	http_metrics_memory(b);
	size_t live = 0;
	for (size_t i = 0; i < n; i++)
		live += rows[i].e.state == LLGO_PROC_LIVE;
	http_metrics_family(b, "llgo_heap_processes", "gauge",
			    "Profiled processes of the allowed uids the daemon holds, running "
			    "and exited.");
	buf_printf(b, "llgo_heap_processes{state=\"live\"} %zu\n", live);
	buf_printf(b, "llgo_heap_processes{state=\"exited\"} %zu\n", n - live);

	struct server_stats st;
	server_get_stats(h->srv, &st);
	http_metrics_counter(b, "llgo_heap_processes_attached_total",
			     "Processes that attached (HELLOs accepted), all users.", st.sessions);
	http_metrics_counter(b, "llgo_heap_processes_evicted_total",
			     "Exited processes whose profiles were dropped (count, age).",
			     st.evicted);
	http_metrics_counter(b, "llgo_heap_socket_connections_accepted_total",
			     "Connections accepted on the daemon's socket.", st.connections);
	http_metrics_counter(b, "llgo_heap_socket_connections_refused_total",
			     "Connections closed at accept (too many).", st.refused);
	http_metrics_counter(b, "llgo_heap_socket_connections_malformed_total",
			     "Connections dropped for a malformed packet.", st.malformed);

	struct budget *bud = session_registry_budget(server_sessions(h->srv));
	http_metrics_family(b, "llgo_heap_socket_connections_open", "gauge",
			    "Connections open on the daemon's socket.");
	buf_printf(b, "llgo_heap_socket_connections_open %llu\n",
		   (unsigned long long)budget_used_total(bud, BUDGET_CONNS));
	/* the daemon through the connection: h->mhd is set after the threads started */
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_DAEMON);
	const union MHD_DaemonInfo *di =
		ci ? MHD_get_daemon_info(ci->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS) : NULL;
	http_metrics_family(b, "llgo_heap_http_connections_open", "gauge",
			    "HTTP connections open (this one included).");
	buf_printf(b, "llgo_heap_http_connections_open %u\n", di ? di->num_connections : 0u);
	http_metrics_family(b, "llgo_heap_http_requests_total", "counter",
			    "HTTP requests answered, by endpoint (401 answers excluded).");
	for (int i = 0; i < HTTP_H_COUNT; i++)
		buf_printf(b, "llgo_heap_http_requests_total{handler=\"%s\"} %llu\n",
			   http_metrics_handlers[i],
			   (unsigned long long)atomic_load_explicit(&h->requests[i],
								    memory_order_relaxed));
	http_metrics_counter(b, "llgo_heap_http_unauthorized_total",
			     "HTTP requests refused for a missing or wrong bearer token.",
			     atomic_load_explicit(&h->unauthorized, memory_order_relaxed));
	http_metrics_family(b, "llgo_heap_http_connections_closed_total", "counter",
			    "HTTP connections closed before their request was answered: their "
			    "peer had too many, the oldest still reading when all were taken, or "
			    "the request did not arrive in time.");
	for (int i = 0; i < HTTP_CLOSED_COUNT; i++)
		buf_printf(b, "llgo_heap_http_connections_closed_total{reason=\"%s\"} %llu\n",
			   http_metrics_closed[i],
			   (unsigned long long)atomic_load_explicit(&h->closed[i],
								    memory_order_relaxed));

	struct budget_limits lim;
	budget_get_limits(bud, &lim);
	http_metrics_family(b, "llgo_heap_budget_used", "gauge",
			    "What all users hold of each budget (counts, or bytes for kinds "
			    "ending in _bytes).");
	for (int k = 0; k < BUDGET_NKINDS; k++)
		buf_printf(b, "llgo_heap_budget_used{kind=\"%s\"} %llu\n", http_metrics_kinds[k],
			   (unsigned long long)budget_used_total(bud, (enum budget_kind)k));
	http_metrics_family(b, "llgo_heap_budget_limit", "gauge",
			    "The limit of each budget for all users together (+Inf: none).");
	for (int k = 0; k < BUDGET_NKINDS; k++) {
		buf_printf(b, "llgo_heap_budget_limit{kind=\"%s\"} ", http_metrics_kinds[k]);
		http_metrics_limit(b, lim.total[k]);
	}
	static const char *const per_uid[3][2] = {
		{ "llgo_heap_budget_uid_used", "What the uid holds of each budget." },
		{ "llgo_heap_budget_uid_limit",
		  "The limit of each budget for the uid (+Inf: none; root is held by the "
		  "totals only)." },
		{ "llgo_heap_budget_uid_hit",
		  "1 when the uid hit the budget since it was last under all of its limits." },
	};
	uid_t *uids;
	size_t nuids = http_metrics_uids(view, rows, n, &uids);
	if (!uids)
		b->failed = true;
	for (int m = 0; m < 3; m++) {
		http_metrics_family(b, per_uid[m][0], "gauge", per_uid[m][1]);
		for (size_t u = 0; u < nuids; u++) {
			uid_t uid = uids[u];
			uint32_t hit = budget_flags(bud, uid);
			for (int k = 0; k < BUDGET_NKINDS; k++) {
				buf_printf(b, "%s{uid=\"%u\",kind=\"%s\"} ", per_uid[m][0],
					   (unsigned)uid, http_metrics_kinds[k]);
				if (m == 0)
					buf_printf(b, "%llu\n",
						   (unsigned long long)budget_used(
							   bud, uid, (enum budget_kind)k));
				else if (m == 1)
					http_metrics_limit(b, uid == 0 && lim.root_exempt
								      ? 0 : lim.per_uid[k]);
				else
					buf_printf(b, "%d\n", (hit & BUDGET_FLAG(k)) != 0);
			}
		}
	}
	free(uids);
}

enum MHD_Result http_metrics_handle(struct http_server *h, struct MHD_Connection *c,
				    const struct http_view *view)
{
	int64_t pid = http_request_pid(c);
	if (pid < 0)
		return http_answer_error(c, MHD_HTTP_BAD_REQUEST,
					 "invalid value for \"pid\" - must be a positive integer");
	struct session **v;
	size_t n = session_list(server_sessions(h->srv), false, &v);
	struct http_metrics_row *rows = calloc(n ? n : 1, sizeof(*rows));
	if (!rows) {
		session_list_release(v, n);
		return http_answer_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!http_request_sees(view, v[i]) || (pid && v[i]->pid != (pid_t)pid))
			continue;
		rows[k].s = v[i];
		session_list_entry(v[i], &rows[k].e);
		http_targets_names(v[i], &rows[k].names);
		k++;
	}
	enum MHD_Result rc;
	if (pid && !k) {
		rc = http_answer_error(c, MHD_HTTP_NOT_FOUND,
				       "no profiled process with pid %lld (see /targets)",
				       (long long)pid);
	} else {
		struct http_answer a;
		http_answer_init(&a, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8");
		http_metrics_processes(&a.body, rows, k);
		if (!pid)
			http_metrics_daemon(h, c, &a.body, view, rows, k);
		rc = http_answer_send(c, &a);
	}
	free(rows); /* the names live in the sessions, released after the answer is written */
	session_list_release(v, n);
	return rc;
}
