// SPDX-License-Identifier: MIT
/*
 * test_dump_push.c: --push (issue 21, item 5): each periodic snapshot POSTed to a
 * Pyroscope-style /ingest on a loopback receiver run by the test, only for processes of the
 * --http-uids; a hanging endpoint bounded by --push-timeout while the snapshots to disk go
 * on. Real daemons, tests/progs/dump_grow.c under the shim (helpers.h's th_grow); the pushed
 * profile read with `go tool pprof`.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <grp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#include "helpers.h"

/* ---- push ------------------------------------------------------------------------------------- */

#define DT_MAX_REQS 64

struct dt_req {
	char head[2048];
	char *body;
	size_t len;
};

/* A loopback HTTP receiver: accepts, reads one request, answers 200 (or, hang, never). */
struct dt_recv {
	int fd, port;
	char url[64];
	bool hang;
	pthread_t thread;
	pthread_mutex_t lock;
	struct dt_req reqs[DT_MAX_REQS];
	int nreqs;
	int held[DT_MAX_REQS]; /* hang: the connections not answered */
	int nheld;
	_Atomic bool stop;
};

static void *dt_recv_main(void *arg)
{
	struct dt_recv *r = arg;
	while (!atomic_load(&r->stop)) {
		int c = accept(r->fd, NULL, NULL);
		if (c < 0) {
			th_sleep_ms(10);
			continue;
		}
		struct timeval tv = { 5, 0 };
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		struct dt_req q;
		memset(&q, 0, sizeof(q));
		size_t hl = 0;
		char *end = NULL;
		while (hl < sizeof(q.head) - 1 && !end) {
			ssize_t n = recv(c, q.head + hl, sizeof(q.head) - 1 - hl, 0);
			if (n <= 0)
				break;
			hl += (size_t)n;
			q.head[hl] = '\0';
			end = strstr(q.head, "\r\n\r\n");
		}
		if (!end) {
			close(c);
			continue;
		}
		size_t have = hl - (size_t)(end + 4 - q.head);
		const char *cl = strcasestr(q.head, "\r\nContent-Length:");
		size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
		q.body = malloc(want + 1);
		memcpy(q.body, end + 4, have < want ? have : want);
		q.len = have < want ? have : want;
		while (q.len < want) {
			ssize_t n = recv(c, q.body + q.len, want - q.len, 0);
			if (n <= 0)
				break;
			q.len += (size_t)n;
		}
		end[2] = '\0';
		pthread_mutex_lock(&r->lock);
		if (r->nreqs < DT_MAX_REQS)
			r->reqs[r->nreqs++] = q;
		else
			free(q.body);
		if (r->hang && r->nheld < DT_MAX_REQS)
			r->held[r->nheld++] = c;
		pthread_mutex_unlock(&r->lock);
		if (!r->hang) {
			const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
			ssize_t w = send(c, ok, strlen(ok), MSG_NOSIGNAL);
			(void)w;
			close(c);
		}
	}
	return NULL;
}

/* The receiver on a port of its own; its URL (with path after the port) in r->url. */
static void dt_recv_start(struct dt_recv *r, bool hang, const char *path)
{
	memset(r, 0, sizeof(*r));
	r->hang = hang;
	pthread_mutex_init(&r->lock, NULL);
	r->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	cr_assert_geq(r->fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(r->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(r->fd, 16), 0);
	cr_assert_eq(getsockname(r->fd, (struct sockaddr *)&a, &al), 0);
	r->port = ntohs(a.sin_port);
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d%s", r->port, path);
	cr_assert_eq(pthread_create(&r->thread, NULL, dt_recv_main, r), 0);
}

static void dt_recv_stop(struct dt_recv *r)
{
	atomic_store(&r->stop, true);
	pthread_join(r->thread, NULL);
	close(r->fd);
	for (int i = 0; i < r->nheld; i++)
		close(r->held[i]);
	for (int i = 0; i < r->nreqs; i++)
		free(r->reqs[i].body);
	pthread_mutex_destroy(&r->lock);
}

/* Requests whose first line names pid (name=...pid%3DN...). */
static int dt_recv_count(struct dt_recv *r, pid_t pid, int *first)
{
	char want[64];
	snprintf(want, sizeof(want), "pid%%3D%d%%2C", (int)pid);
	int n = 0;
	pthread_mutex_lock(&r->lock);
	for (int i = 0; i < r->nreqs; i++) {
		char *eol = strstr(r->reqs[i].head, "\r\n");
		if (eol && memmem(r->reqs[i].head, (size_t)(eol - r->reqs[i].head), want,
				  strlen(want))) {
			if (n == 0 && first)
				*first = i;
			n++;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return n;
}

Test(push, periodic_snapshots_posted_to_ingest_for_allowed_uids, .timeout = 180)
{
	cr_assert_eq(geteuid(), 0, "runs a process as nobody: run as root");
	struct dt_recv r;
	dt_recv_start(&r, false, "");
	struct heapd d;
	heapd_init(&d, NULL);
	heapd_run(&d, (const char *[]){ "--dump-every", "1", "--push", r.url, NULL });
	struct th_grow pr, pn;
	th_grow_start(&pr, &d, 0, NULL, NULL, 8, NULL);
	th_grow_start(&pn, &d, th_nobody_uid(), NULL, NULL, 8, NULL);
	int first = -1;
	for (int t = 0; t < 300 && dt_recv_count(&r, pr.pid, &first) < 2; t++)
		th_sleep_ms(50);
	cr_assert_geq(dt_recv_count(&r, pr.pid, &first), 2, "fewer than 2 pushes in 15 s");
	th_sleep_ms(1500);
	/* nobody's process is not among --http-uids (default: the daemon's own, root) */
	cr_expect_eq(dt_recv_count(&r, pn.pid, NULL), 0, "a push of another user's process");

	pthread_mutex_lock(&r.lock);
	struct dt_req *q = &r.reqs[first];
	char line[1024];
	snprintf(line, sizeof(line), "%.*s", (int)(strstr(q->head, "\r\n") - q->head), q->head);
	char want[256];
	snprintf(want, sizeof(want), "POST /ingest?name=dump_grow.memory%%7Bpid%%3D%d%%2Cuid%%3D0%%7D&from=",
		 (int)pr.pid);
	cr_expect_eq(strncmp(line, want, strlen(want)), 0, "request line: %s\nwant: %s", line, want);
	unsigned long long from = 0, until = 0;
	const char *f = strstr(line, "&from="), *u = strstr(line, "&until=");
	if (f)
		from = strtoull(f + 6, NULL, 10);
	if (u)
		until = strtoull(u + 7, NULL, 10);
	unsigned long long now = (unsigned long long)time(NULL);
	cr_expect(until && until - from == 1 && until <= now + 5 && until + 120 > now,
		  "from %llu until %llu (now %llu)", from, until, now);
	cr_expect(strstr(line, "&format=pprof"), "%s", line);
	cr_expect(strcasestr(q->head, "\r\nContent-Type: application/octet-stream"), "%s", q->head);
	cr_assert(q->len > 2 && (unsigned char)q->body[0] == 0x1f &&
		  (unsigned char)q->body[1] == 0x8b, "body of %zu bytes is no gzip", q->len);
	char file[512];
	snprintf(file, sizeof(file), "%s/pushed.pb.gz", d.dir);
	FILE *o = fopen(file, "wb");
	cr_assert(o && fwrite(q->body, 1, q->len, o) == q->len && fclose(o) == 0);
	pthread_mutex_unlock(&r.lock);
	char fn[256];
	th_pprof_top(file, fn, sizeof(fn));
	cr_expect_eq(strncmp(fn, "dump_grow_site", 14), 0, "top in-use site pushed: %s", fn);

	th_grow_end(&pr, true);
	th_grow_end(&pn, true);
	heapd_finish(&d);
	dt_recv_stop(&r);
}

/* An endpoint that never answers: each push gives up after --push-timeout, the failure is
 * logged once, and the snapshots to disk go on at their period. */
Test(push, hanging_endpoint_is_bounded_and_snapshots_go_on, .timeout = 180)
{
	struct dt_recv r;
	dt_recv_start(&r, true, "/");
	struct heapd d;
	char dumps[256];
	th_dump_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-keep", "100",
				"--push", r.url, "--push-timeout", "1", "--dump-oom", "off", NULL };
	heapd_run(&d, extra);
	struct th_grow p;
	th_grow_start(&p, &d, 0, NULL, NULL, 4, NULL);
	cr_assert_geq(th_dump_wait(dumps, 0, p.pid, ".heap.", 1, 15000), 1, "no snapshot");
	int before = th_dump_files(dumps, 0, p.pid, ".heap.", NULL, 0);
	th_sleep_ms(8000);
	int after = th_dump_files(dumps, 0, p.pid, ".heap.", NULL, 0);
	/* a period and a push of at most 1 s each: 8 s hold 4 passes at the least */
	cr_expect_geq(after - before, 3, "%d snapshots in 8 s with a hanging push", after - before);
	cr_expect_geq(dt_recv_count(&r, p.pid, NULL), 3, "the pushes did not go on");
	char *log = heapd_log(&d);
	const char *l = strstr(log, "--push: pid");
	cr_expect(l && (strstr(l, "imeout") || strstr(l, "timed out")), "log:\n%s", log);
	cr_expect(l && !strstr(l + 1, "--push: pid"), "logged more than once:\n%s", log);
	free(log);
	size_t len;
	char *snap = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TOP, &len);
	cr_expect(strstr(snap, "dump_grow_site"), "%s", snap);
	free(snap);
	th_grow_end(&p, true);
	heapd_finish(&d);
	dt_recv_stop(&r);
}
