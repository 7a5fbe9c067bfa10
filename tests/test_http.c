// SPDX-License-Identifier: MIT
/*
 * test_http.c: llgo-heapd's --http server as Go's tools and scrapers see it. Each test starts
 * the real daemon (private socket in a temporary folder, --http 127.0.0.1:0, the port read
 * from its log) and a real profiled program (tests/progs/http_sites.c, shim preloaded, rate
 * 1 so counts are exact) that stays alive until its stdin closes. Answers are checked with
 * `go tool pprof` (fetching the URL itself) and with the minimal HTTP/1.0 client below, for
 * the statuses, headers and bodies Go's net/http/pprof gives, and for ours (peak=1). Daemons and programs are
 * stopped by pid (SIGTERM or EOF, then waitpid).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../agent/http/http.h"
#include "e2e_util.h"

#ifndef LLGO_PLAIN_SHIM
#error "LLGO_PLAIN_SHIM must be set by the Makefile"
#endif
#define SITES E2E_PROGS "/http_sites"
#define NALLOC 1000

#if defined(__SANITIZE_THREAD__)
/* As in test_server.c: steer BoxFort's arena draw into TSan's application window. */
int rand_r(unsigned int *seed)
{
	return 0x360000 + (int)((*seed)++ & 0xff) * 16;
}
#endif

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* ---- the daemon ------------------------------------------------------------------------ */

/* heapd.h's llgo-heapd with --http 127.0.0.1:0 plus extra options, in a folder of its own;
 * d->port is the port it logged. */
static void http_heapd_start(struct heapd *d, const char *const *extra)
{
	const char *argv[16] = { "--http", "127.0.0.1:0" };
	int n = 2;
	for (; extra && *extra && n < 15; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	heapd_start(d, NULL, argv);
}

static void http_heapd_stop(struct heapd *d)
{
	heapd_stop_clean(d);
	heapd_cleanup(d);
}

/* ---- the profiled program --------------------------------------------------------------- */

struct prog {
	pid_t pid;
	int in;   /* its stdin */
	FILE *out; /* its stdout */
};

static void prog_wait_ready(struct prog *p, int round)
{
	char line[128], want[32];
	snprintf(want, sizeof(want), "ready %d", round);
	cr_assert(fgets(line, sizeof(line), p->out) != NULL, "http_sites died before '%s'",
		  want);
	cr_assert(strncmp(line, want, strlen(want)) == 0, "http_sites said '%s'", line);
}

static void prog_wait_seen(struct prog *p, const struct heapd *d);

/* seen: wait until the daemon serves its first round (not for a process it refuses) */
static void prog_start(struct prog *p, const struct heapd *d, bool seen)
{
	int in[2], out[2];
	cr_assert_eq(pipe(in), 0);
	cr_assert_eq(pipe(out), 0);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		setenv("LD_PRELOAD", LLGO_PLAIN_SHIM, 1);
		setenv("LLGO_HEAP_SOCKET", d->sock, 1);
		setenv("LLGO_HEAP_RATE", "1", 1);
		char n[16];
		snprintf(n, sizeof(n), "%d", NALLOC);
		execl(SITES, "http_sites", n, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	p->in = in[1];
	p->out = fdopen(out[0], "r");
	cr_assert(p->out);
	prog_wait_ready(p, 0);
	if (seen)
		prog_wait_seen(p, d);
}

static void prog_more(struct prog *p)
{
	cr_assert_eq(write(p->in, "more\n", 5), 5);
	prog_wait_ready(p, 1);
}

static void prog_stop(struct prog *p)
{
	close(p->in);
	int st;
	cr_assert_eq(waitpid(p->pid, &st, 0), p->pid);
	fclose(p->out);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "http_sites status %d", st);
}

/* ---- a minimal HTTP/1.0 client ------------------------------------------------------------ */

struct resp {
	int status;
	char *head; /* status line and headers, NUL-terminated */
	char *body;
	size_t len;
};

static int http_req(int port, const char *method, const char *path, const char *body,
		    struct resp *r)
{
	memset(r, 0, sizeof(*r));
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = { .tv_sec = 60 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(s);
		return e;
	}
	char *req;
	size_t blen = body ? strlen(body) : 0;
	int n = asprintf(&req,
			 "%s %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\nContent-Length: %zu\r\n\r\n%s",
			 method, path, port, blen, body ? body : "");
	if (n < 0 || write(s, req, (size_t)n) != n) {
		free(req);
		close(s);
		return -EIO;
	}
	free(req);
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap + 1);
	for (;;) {
		if (cap - len < 16384) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
		}
		ssize_t k = read(s, buf + len, cap - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	close(s);
	buf[len] = '\0';
	char *sep = strstr(buf, "\r\n\r\n");
	if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
		free(buf);
		return -EPROTO;
	}
	*sep = '\0';
	r->head = buf;
	r->body = sep + 4;
	r->len = len - (size_t)(r->body - buf);
	return 0;
}

static void http_get(int port, const char *path, struct resp *r)
{
	int rc = http_req(port, "GET", path, NULL, r);
	cr_assert_eq(rc, 0, "GET %s: %s", path, strerror(-rc));
}

/* A header's value (static buffer), or NULL. */
static const char *hdr(const struct resp *r, const char *name)
{
	static char val[512];
	size_t nl = strlen(name);
	for (const char *l = strstr(r->head, "\r\n"); l; l = strstr(l, "\r\n")) {
		l += 2;
		if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
			const char *v = l + nl + 1;
			while (*v == ' ')
				v++;
			const char *e = strstr(v, "\r\n");
			size_t vl = e ? (size_t)(e - v) : strlen(v);
			if (vl >= sizeof(val))
				vl = sizeof(val) - 1;
			memcpy(val, v, vl);
			val[vl] = '\0';
			return val;
		}
	}
	return NULL;
}

static void resp_free(struct resp *r)
{
	free(r->head);
	memset(r, 0, sizeof(*r));
}

static void expect_hdr(const struct resp *r, const char *name, const char *want)
{
	const char *v = hdr(r, name);
	cr_expect(v && strcmp(v, want) == 0, "%s: got '%s', want '%s'\n%s", name,
		  v ? v : "(none)", want, r->head);
}

/* Go's serveError: status, text/plain, X-Go-Pprof: 1, no Content-Disposition, msg + \n. */
static void expect_go_error(int port, const char *path, int status, const char *msg)
{
	struct resp r;
	http_get(port, path, &r);
	cr_expect_eq(r.status, status, "%s: status %d, want %d", path, r.status, status);
	expect_hdr(&r, "Content-Type", "text/plain; charset=utf-8");
	expect_hdr(&r, "X-Go-Pprof", "1");
	expect_hdr(&r, "X-Content-Type-Options", "nosniff");
	cr_expect_null(hdr(&r, "Content-Disposition"), "%s: error with Content-Disposition",
		       path);
	if (msg) {
		char want[512];
		snprintf(want, sizeof(want), "%s\n", msg);
		cr_expect_str_eq(r.body, want, "%s: body '%s', want '%s'", path, r.body, want);
	}
	resp_free(&r);
}

static void save(const char *dir, const char *name, const struct resp *r)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	cr_assert(f);
	cr_assert_eq(fwrite(r->body, 1, r->len, f), r->len);
	fclose(f);
}

/* Wait until the daemon has the program's first round (its ring announced and drained):
 * the shim's ADD_RING packet may still be queued on its connection when the program prints
 * "ready", and a snapshot only sees rings the daemon has read (server.c). */
static void prog_wait_seen(struct prog *p, const struct heapd *d)
{
	char path[128];
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&debug=1", (int)p->pid);
	long sampled = -1;
	for (int i = 0; i < 500; i++) {
		struct resp r;
		if (http_req(d->port, "GET", path, NULL, &r) == 0) {
			const char *at = strstr(r.body, "sampled=");
			sampled = at ? atol(at + 8) : -1;
			resp_free(&r);
		}
		if (sampled >= 2 * NALLOC)
			return;
		sleep_ms(10);
	}
	cr_assert_fail("the daemon saw %ld samples of pid %d, want %d", sampled, (int)p->pid,
		       2 * NALLOC);
}

/* ---- tests ------------------------------------------------------------------------------- */

/* go tool pprof fetches the URL itself and prints the sites; with -symbolize=none too, so
 * the names come from the profile and no /debug/pprof/symbol round trip is needed. */
Test(http, go_tool_pprof_fetches_heap_and_allocs, .timeout = 300)
{
	struct heapd d;
	http_heapd_start(&d, NULL);
	struct prog p;
	prog_start(&p, &d, true);
	const char *views[] = { "heap", "allocs" };
	const char *types[] = { "Type: inuse_space", "Type: alloc_space" };
	const char *modes[] = { "", "-symbolize=none" };
	for (int v = 0; v < 2; v++) {
		for (int m = 0; m < 2; m++) {
			char *out;
			int rc = e2e_sh(&out,
					"cd %s && HOME=%s GOCACHE=%s/gocache go tool pprof %s -top "
					"'http://127.0.0.1:%d/debug/pprof/%s?pid=%d'",
					d.dir, d.dir, d.dir, modes[m], d.port, views[v], (int)p.pid);
			cr_assert_eq(rc, 0, "go tool pprof %s failed:\n%s", views[v], out);
			cr_expect(strstr(out, types[v]), "%s: no '%s':\n%s", views[v], types[v],
				  out);
			cr_expect(strstr(out, "http_site_keep"), "%s %s: no http_site_keep:\n%s",
				  views[v], modes[m], out);
			cr_expect(strstr(out, "http_site_churn") || v == 0,
				  "%s %s: no http_site_churn:\n%s", views[v], modes[m], out);
			free(out);
		}
	}
	/* -raw of the allocs proto: Go's sample types, alloc_space the default */
	char *out;
	int rc = e2e_sh(&out,
			"cd %s && HOME=%s GOCACHE=%s/gocache go tool pprof -raw "
			"'http://127.0.0.1:%d/debug/pprof/allocs?pid=%d'",
			d.dir, d.dir, d.dir, d.port, (int)p.pid);
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "alloc_objects/count alloc_space/bytes[dflt] inuse_objects/count "
			      "inuse_space/bytes"),
		  "allocs sample types:\n%s", out);
	free(out);
	prog_stop(&p);
	http_heapd_stop(&d);
}

/* peak=1: the peak view (agent/peak.c) as a proto with its own sample types, which go tool
 * pprof fetches and reads by name; the answer is named heap-peak; not with seconds. */
Test(http, peak_view, .timeout = 300)
{
	struct heapd d;
	http_heapd_start(&d, NULL);
	struct prog p;
	prog_start(&p, &d, true);
	char *out;
	int rc = e2e_sh(&out,
			"cd %s && HOME=%s GOCACHE=%s/gocache go tool pprof -top "
			"-sample_index=peak_inuse_space "
			"'http://127.0.0.1:%d/debug/pprof/heap?pid=%d&peak=1'",
			d.dir, d.dir, d.dir, d.port, (int)p.pid);
	cr_assert_eq(rc, 0, "go tool pprof heap?peak=1 failed:\n%s", out);
	cr_expect(strstr(out, "Type: peak_inuse_space") && strstr(out, "http_site_keep"),
		  "heap?peak=1:\n%s", out);
	free(out);
	char path[256];
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&peak=1", (int)p.pid);
	struct resp r;
	http_get(d.port, path, &r);
	cr_expect_eq(r.status, 200);
	expect_hdr(&r, "Content-Disposition", "attachment; filename=\"heap-peak\"");
	resp_free(&r);
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&peak=1&seconds=1", (int)p.pid);
	expect_go_error(d.port, path, 400, "seconds and peak params are incompatible");
	prog_stop(&p);
	http_heapd_stop(&d);
}

/* Default answers: gzipped proto with Go's headers; debug=1 the legacy text. */
Test(http, proto_and_text_answers, .timeout = 120)
{
	struct heapd d;
	http_heapd_start(&d, NULL);
	struct prog p;
	prog_start(&p, &d, true);
	char path[256];
	const char *views[] = { "heap", "allocs" };
	for (int v = 0; v < 2; v++) {
		struct resp r;
		snprintf(path, sizeof(path), "/debug/pprof/%s?pid=%d", views[v], (int)p.pid);
		http_get(d.port, path, &r);
		cr_expect_eq(r.status, 200, "%s: %d\n%s", path, r.status, r.body);
		expect_hdr(&r, "Content-Type", "application/octet-stream");
		char disp[64];
		snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"", views[v]);
		expect_hdr(&r, "Content-Disposition", disp);
		expect_hdr(&r, "X-Content-Type-Options", "nosniff");
		cr_expect(r.len > 2 && (unsigned char)r.body[0] == 0x1f &&
				  (unsigned char)r.body[1] == 0x8b,
			  "%s: not gzip", path);
		resp_free(&r);

		/* debug=1 (and 2, and gc=1 ignored): the text, all allocations exact at rate 1 */
		const char *q[] = { "debug=1", "debug=2&gc=1" };
		for (int k = 0; k < 2; k++) {
			snprintf(path, sizeof(path), "/debug/pprof/%s?pid=%d&%s", views[v],
				 (int)p.pid, q[k]);
			http_get(d.port, path, &r);
			cr_expect_eq(r.status, 200, "%s: %d", path, r.status);
			expect_hdr(&r, "Content-Type", "text/plain; charset=utf-8");
			expect_hdr(&r, "X-Content-Type-Options", "nosniff");
			cr_expect_null(hdr(&r, "Content-Disposition"));
			cr_assert(strncmp(r.body, "heap profile:", 13) == 0, "%s: %.200s", path,
				  r.body);
			struct e2e_text_rec recs[64];
			long period;
			int n = e2e_parse_text(r.body, &period, recs, 64);
			cr_expect_eq(period, 2, "%s: period %ld (rate 1 is heap/2 as Go)", path,
				     period);
			cr_expect_eq(e2e_count(recs, n, "http_site_keep", 4096), NALLOC, "%s:\n%s",
				     path, r.body);
			cr_expect_eq(e2e_count(recs, n, "http_site_churn", 512), NALLOC, "%s:\n%s",
				     path, r.body);
			resp_free(&r);
		}
	}
	/* no pid, one allowed process attached: that one */
	struct resp r;
	http_get(d.port, "/debug/pprof/heap?debug=1", &r);
	cr_expect_eq(r.status, 200, "no pid: %d %s", r.status, r.body);
	cr_expect(strstr(r.body, "http_site_keep"));
	resp_free(&r);
	prog_stop(&p);
	http_heapd_stop(&d);
}

struct delta_req {
	int port;
	char path[256];
	struct resp r;
	int rc;
};

static void *delta_thread(void *arg)
{
	struct delta_req *q = arg;
	q->rc = http_req(q->port, "GET", q->path, NULL, &q->r);
	return NULL;
}

/* seconds=N: what was allocated during the N seconds only, as a proto Go's tools read. */
Test(http, delta_profile, .timeout = 120)
{
	struct heapd d;
	http_heapd_start(&d, NULL);
	struct prog p;
	prog_start(&p, &d, true);
	const char *views[] = { "heap", "allocs" };
	for (int v = 0; v < 2; v++) {
		struct delta_req q = { .port = d.port };
		snprintf(q.path, sizeof(q.path), "/debug/pprof/%s?pid=%d&seconds=2", views[v],
			 (int)p.pid);
		pthread_t t;
		cr_assert_eq(pthread_create(&t, NULL, delta_thread, &q), 0);
		sleep_ms(500);
		if (v == 0)
			prog_more(&p); /* http_site_late, during the window */
		pthread_join(t, NULL);
		cr_assert_eq(q.rc, 0, "%s: %s", q.path, strerror(-q.rc));
		cr_expect_eq(q.r.status, 200, "%s: %d %s", q.path, q.r.status, q.r.body);
		expect_hdr(&q.r, "Content-Type", "application/octet-stream");
		char disp[64];
		snprintf(disp, sizeof(disp), "attachment; filename=\"%s-delta\"", views[v]);
		expect_hdr(&q.r, "Content-Disposition", disp);
		char name[32];
		snprintf(name, sizeof(name), "%s-delta.pb.gz", views[v]);
		save(d.dir, name, &q.r);
		resp_free(&q.r);
		char *out;
		int rc = e2e_sh(&out, "cd %s && HOME=%s GOCACHE=%s/gocache go tool pprof -raw %s",
				d.dir, d.dir, d.dir, name);
		cr_assert_eq(rc, 0, "go tool pprof -raw %s:\n%s", name, out);
		cr_expect(strstr(out, "Duration: 2."), "%s: duration:\n%s", name, out);
		cr_expect_null(strstr(out, "http_site_keep"), "%s: allocated before the window:\n%s",
			       name, out);
		if (v == 0)
			cr_expect(strstr(out, "http_site_late"), "%s: no http_site_late:\n%s", name,
				  out);
		else
			cr_expect_null(strstr(out, "http_site_late"), "%s: nothing was allocated:\n%s",
				       name, out);
		free(out);
	}
	prog_stop(&p);
	http_heapd_stop(&d);
}

/* Go's error answers, with its texts, and ours for pids. */
Test(http, error_answers, .timeout = 120)
{
	struct heapd d;
	http_heapd_start(&d, NULL);
	/* no process yet */
	expect_go_error(d.port, "/debug/pprof/heap", 400,
			"missing \"pid\" parameter: no profiled process is attached");
	struct prog p;
	prog_start(&p, &d, true);
	char path[256], msg[256];
	expect_go_error(d.port, "/debug/pprof/heap?pid=99999999", 404,
			"no profiled process with pid 99999999 (see /debug/pprof/)");
	expect_go_error(d.port, "/debug/pprof/allocs?pid=abc", 400,
			"invalid value for \"pid\" - must be a positive integer");
	const char *bad[] = { "x", "0", "-1", "1.5", "99999999999999999999" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(bad); i++) {
		snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&seconds=%s", (int)p.pid,
			 bad[i]);
		expect_go_error(d.port, path, 400,
				"invalid value for \"seconds\" - must be a positive integer");
	}
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&seconds=1&debug=1", (int)p.pid);
	expect_go_error(d.port, path, 400, "seconds and debug params are incompatible");
	snprintf(path, sizeof(path), "/debug/pprof/allocs?pid=%d&seconds=%d", (int)p.pid,
		 HTTP_MAX_SECONDS + 1);
	expect_go_error(d.port, path, 400, "profile duration exceeds server's WriteTimeout");
	expect_go_error(d.port, "/debug/pprof/goroutine", 404, "Unknown profile");
	expect_go_error(d.port, "/debug/pprof/profile?seconds=1", 404, "Unknown profile");

	/* outside /debug/pprof/: Go's mux */
	struct resp r;
	http_get(d.port, "/nothing", &r);
	cr_expect_eq(r.status, 404);
	cr_expect_str_eq(r.body, "404 page not found\n");
	resp_free(&r);
	http_get(d.port, "/debug/pprof", &r);
	cr_expect_eq(r.status, 301);
	expect_hdr(&r, "Location", "/debug/pprof/");
	resp_free(&r);

	/* two processes and no pid: which one? */
	struct prog p2;
	prog_start(&p2, &d, true);
	snprintf(msg, sizeof(msg),
		 "missing \"pid\" parameter: 2 profiled processes are attached; choose one with "
		 "?pid=N (see /debug/pprof/)");
	expect_go_error(d.port, "/debug/pprof/heap", 400, msg);
	prog_stop(&p2);
	prog_stop(&p);
	http_heapd_stop(&d);
}

/* A process whose uid is not in --http-uids is answered exactly as an unknown pid. */
Test(http, other_uid_is_unknown, .timeout = 120)
{
	char other[16];
	snprintf(other, sizeof(other), "%u", getuid() == 4242 ? 4243u : 4242u);
	const char *extra[] = { "--http-uids", other, NULL };
	struct heapd d;
	http_heapd_start(&d, extra);
	struct prog p;
	prog_start(&p, &d, false);
	char path[256], msg[256];
	const char *views[] = { "heap?pid=%d", "allocs?pid=%d&debug=1", "heap?pid=%d&seconds=1" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(views); i++) {
		char v[64];
		snprintf(v, sizeof(v), views[i], (int)p.pid);
		snprintf(path, sizeof(path), "/debug/pprof/%s", v);
		snprintf(msg, sizeof(msg), "no profiled process with pid %d (see /debug/pprof/)",
			 (int)p.pid);
		expect_go_error(d.port, path, 404, msg);
	}
	expect_go_error(d.port, "/debug/pprof/heap", 400,
			"missing \"pid\" parameter: no profiled process is attached");
	struct resp r;
	http_get(d.port, "/debug/pprof/", &r);
	cr_expect_eq(r.status, 200);
	snprintf(msg, sizeof(msg), "pid=%d", (int)p.pid);
	cr_expect_null(strstr(r.body, msg), "index lists a refused process:\n%s", r.body);
	cr_expect(strstr(r.body, "No profiled process is attached."));
	resp_free(&r);
	/* the symbol service names nothing of it either */
	snprintf(path, sizeof(path), "/debug/pprof/symbol?pid=%d", (int)p.pid);
	char body[64];
	snprintf(body, sizeof(body), "%#lx", (unsigned long)(uintptr_t)&sleep_ms);
	int rc = http_req(d.port, "POST", "/debug/pprof/symbol", body, &r);
	cr_assert_eq(rc, 0);
	cr_expect_str_eq(r.body, "num_symbols: 1\n");
	resp_free(&r);
	prog_stop(&p);
	http_heapd_stop(&d);
}

/* The index lists the attached processes with links; the symbol service names addresses. */
Test(http, index_and_symbol, .timeout = 120)
{
	struct heapd d;
	http_heapd_start(&d, NULL);
	struct prog p;
	prog_start(&p, &d, true);
	struct resp r;
	http_get(d.port, "/debug/pprof/", &r);
	cr_expect_eq(r.status, 200);
	expect_hdr(&r, "Content-Type", "text/html; charset=utf-8");
	expect_hdr(&r, "X-Content-Type-Options", "nosniff");
	char want[128];
	snprintf(want, sizeof(want), "<a href='heap?pid=%d&amp;debug=1'>heap</a>", (int)p.pid);
	cr_expect(strstr(r.body, want), "index without '%s':\n%s", want, r.body);
	snprintf(want, sizeof(want), "<tr><td>%d</td><td>http_sites</td><td>live</td>",
		 (int)p.pid);
	cr_expect(strstr(r.body, want), "index without '%s':\n%s", want, r.body);
	resp_free(&r);

	/* addresses from the text profile, as pprof would POST them */
	char path[128];
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&debug=1", (int)p.pid);
	http_get(d.port, path, &r);
	const char *at = strstr(r.body, "\thttp_site_keep+");
	cr_assert(at, "%s", r.body);
	const char *start = at;
	while (start > r.body && start[-1] != '\t')
		start--;
	char addr[32];
	snprintf(addr, sizeof(addr), "%.*s", (int)(at - start), start);
	resp_free(&r);
	char body[128];
	snprintf(body, sizeof(body), "0x1+%s+junk", addr);
	cr_assert_eq(http_req(d.port, "POST", "/debug/pprof/symbol", body, &r), 0);
	cr_expect_eq(r.status, 200);
	expect_hdr(&r, "Content-Type", "text/plain; charset=utf-8");
	snprintf(want, sizeof(want), "num_symbols: 1\n%s http_site_keep\n", addr);
	cr_expect_str_eq(r.body, want);
	resp_free(&r);
	http_get(d.port, "/debug/pprof/symbol", &r);
	cr_expect_eq(r.status, 200);
	cr_expect_str_eq(r.body, "num_symbols: 1\n");
	resp_free(&r);
	prog_stop(&p);
	http_heapd_stop(&d);
}

/* Bad --http values are refused at start, on the terminal. */
Test(http, bad_options, .timeout = 60)
{
	const char *bad[] = { "nonsense", "127.0.0.1:99999", "::1:80", "[::1]", "no.such.host.invalid:1",
			      "127.0.0.1:" };
	char *dir = e2e_tmpdir();
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(bad); i++) {
		char *out;
		int rc = e2e_sh(&out, "%s --foreground --socket %s/s.sock --http '%s'", heapd_path(), dir,
				bad[i]);
		cr_expect_neq(rc, 0, "--http %s accepted", bad[i]);
		cr_expect(strstr(out, "--http"), "--http %s: %s", bad[i], out);
		free(out);
	}
	char *out;
	int rc = e2e_sh(&out, "%s --foreground --socket %s/s.sock --http :0 --http-uids 0,nouser_x",
			heapd_path(), dir);
	cr_expect_neq(rc, 0);
	cr_expect(strstr(out, "--http-uids"), "%s", out);
	free(out);
	/* a busy port */
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(s, 1), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	rc = e2e_sh(&out, "%s --foreground --socket %s/s.sock --http 127.0.0.1:%d", heapd_path(), dir,
		    ntohs(sa.sin_port));
	cr_expect_neq(rc, 0);
	cr_expect(strstr(out, "Address already in use"), "%s", out);
	free(out);
	close(s);
	e2e_rmdir(dir);
}
