// SPDX-License-Identifier: MIT
/*
 * test_fleet.c: a host made scrape-ready for fleet backends, checked with their own tools.
 * Each test starts the real llgo-heapd (life_util.h: private socket and log in a temporary
 * folder, --http with port 0, the port read from its log) and real programs under the shim
 * (tests/progs/http_sites.c, copied under other names so each has its own exe), then asks:
 *
 *   - Debian's promtool (`promtool check metrics`) whether /metrics is valid and lint-free;
 *   - a real Prometheus (Debian's prometheus, on a free loopback port, a temporary data
 *     folder, an http_sd_configs entry pointing at /targets, refresh and scrape every
 *     second) which targets it discovered, with which labels, whether scraping them
 *     (/metrics?pid=N) works, and what a PromQL query of the scraped counters returns;
 *   - curl, for the bearer token's 401 answers and the address forms of --http.
 *
 * Prometheus answers are read with python3's json module. Every process started here is
 * stopped by its pid (SIGTERM, or EOF on a program's stdin).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>

#include "helpers.h"

#define SITES TH_PROGS "/http_sites"
#define WAIT_MS 90000L /* Prometheus start, discovery and a first scrape, on a loaded host */

/* ---- the daemon and the programs --------------------------------------------------------- */

/* Start llgo-heapd --http http (then the options more, NULL-terminated, may be NULL) in dir;
 * return the port it serves on (the launcher reads it from the log) after checking that it
 * serves on addr. */
static int fleet_daemon(struct heapd *d, const char *dir, const char *http, const char *addr,
			const char *const *more)
{
	const char *opts[16] = { "--http", http };
	for (int i = 0; more && more[i] && i < 13; i++)
		opts[2 + i] = more[i];
	heapd_start(d, dir, opts);
	char key[160];
	snprintf(key, sizeof(key), "serving http://%s:%d/", addr, d->port);
	char *log = heapd_log(d);
	const char *mine = strlen(log) >= (size_t)d->log_start ? log + d->log_start : log;
	cr_assert(d->port > 0 && strstr(mine, key), "no '%s' in the log:\n%s", key, log);
	free(log);
	return d->port;
}

struct fleet_prog {
	struct th_proc p;
	char exe[512];
};

/* Start a copy of http_sites named name (its exe and command name) with extra environment
 * (may be NULL), as the uid and gid "as" when not NULL (setpriv, then env to preload the
 * shim into the program only); wait until the daemon lists it. */
static void fleet_prog_start_as(struct fleet_prog *f, const struct heapd *d, const char *dir,
				const char *name, const char *const *env, const char *as)
{
	snprintf(f->exe, sizeof(f->exe), "%s/%s", dir, name);
	cr_assert_eq(th_sh(NULL, "cp '%s' '%s' && chmod 755 '%s'", SITES, f->exe, dir), 0);
	char reuid[64], regid[64], preload[600];
	snprintf(reuid, sizeof(reuid), "--reuid=%s", as ? as : "");
	snprintf(regid, sizeof(regid), "--regid=%s", as ? as : "");
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", LLGO_PLAIN_SHIM);
	char *plain[] = { f->exe, "200", NULL };
	char *setpriv[] = { "/usr/bin/setpriv", reuid, regid, "--clear-groups", "/usr/bin/env",
			    preload, f->exe, "200", NULL };
	th_start(&f->p, d, "1", 0, as ? "" : NULL, as ? setpriv : plain, env);
	cr_assert_str_eq(th_ready(&f->p, 30000), "ready 0", "%s did not start", name);
	cr_assert(th_wait_listed(d->sock, f->p.pid, 10000), "%s (pid %d) never attached", name,
		  (int)f->p.pid);
}

static void fleet_prog_start(struct fleet_prog *f, const struct heapd *d, const char *dir,
			     const char *name, const char *const *env)
{
	fleet_prog_start_as(f, d, dir, name, env, NULL);
}

static void fleet_prog_stop(struct fleet_prog *f)
{
	int st = th_wait(&f->p, 30000);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d", f->exe, st);
}

/* The daemon of the fleet tests on 127.0.0.1 (its port returned), and its three programs:
 * "checkout-svc" with LLGO_HEAP_SERVICE=checkout, "worker" without, "hostile" with the
 * service name hostile_service. */
static int fleet_three(struct fleet_prog p[3], struct heapd *d, const char *dir,
		       const char *hostile_service)
{
	int port = fleet_daemon(d, dir, "127.0.0.1:0", "127.0.0.1", NULL);
	static char env_c[256];
	snprintf(env_c, sizeof(env_c), "LLGO_HEAP_SERVICE=%s", hostile_service);
	const char *env_a[] = { "LLGO_HEAP_SERVICE=checkout", NULL };
	const char *env_cv[] = { env_c, NULL };
	fleet_prog_start(&p[0], d, dir, "checkout-svc", env_a);
	fleet_prog_start(&p[1], d, dir, "worker", NULL);
	fleet_prog_start(&p[2], d, dir, "hostile", env_cv);
	return port;
}

/* The first target of /targets (as asked with Host: host when not NULL), newline-ended. */
static char *fleet_first_target(int port, const char *host)
{
	char hdr[300] = "";
	if (host)
		snprintf(hdr, sizeof(hdr), "-H 'Host: %s'", host);
	char *out;
	th_sh(&out, "curl -s %s http://127.0.0.1:%d/targets | python3 -c 'import json, sys\n"
		     "print(json.load(sys.stdin)[0][\"targets\"][0])'", hdr, port);
	return out;
}

/* ---- Prometheus ------------------------------------------------------------------------ */

struct fleet_prom {
	pid_t pid;
	int port;
	char log[512];
};

static int fleet_free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	close(s);
	return ntohs(sa.sin_port);
}

/* Prometheus on a free loopback port with one job that discovers its targets at
 * http://127.0.0.1:heapd_port/targets; token_file (may be NULL): the credentials_file of
 * both the discovery and the scrapes. Returns once it is ready. */
static void fleet_prom_start(struct fleet_prom *p, const char *dir, int heapd_port,
			     const char *token_file)
{
	cr_assert_eq(th_sh(NULL, "command -v prometheus"), 0,
		     "prometheus is not installed (Debian package prometheus: make deps)");
	/* the scrapes' authorization sits in the job, the discovery's in its entry */
	char job_auth[600] = "", sd_auth[600] = "";
	if (token_file) {
		snprintf(job_auth, sizeof(job_auth),
			 "    authorization:\n      credentials_file: %s\n", token_file);
		snprintf(sd_auth, sizeof(sd_auth),
			 "        authorization:\n          credentials_file: %s\n", token_file);
	}
	char cfg[512], *yml;
	snprintf(cfg, sizeof(cfg), "%s/prometheus.yml", dir);
	cr_assert(asprintf(&yml,
			   "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
			   "scrape_configs:\n  - job_name: llgo-heap\n%s"
			   "    http_sd_configs:\n      - url: http://127.0.0.1:%d/targets\n"
			   "        refresh_interval: 1s\n%s",
			   job_auth, heapd_port, sd_auth) >= 0);
	FILE *f = fopen(cfg, "w");
	cr_assert(f);
	fputs(yml, f);
	fclose(f);
	free(yml);
	char *out;
	int rc = th_sh(&out, "promtool check config '%s'", cfg);
	cr_assert_eq(rc, 0, "promtool check config: %s", out);
	free(out);

	p->port = fleet_free_port();
	snprintf(p->log, sizeof(p->log), "%s/prometheus.log", dir);
	char listen[64], data[512], cfgflag[600];
	snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", p->port);
	snprintf(data, sizeof(data), "--storage.tsdb.path=%s/prometheus-data", dir);
	snprintf(cfgflag, sizeof(cfgflag), "--config.file=%s", cfg);
	p->pid = th_spawn_logged((char *[]){ "prometheus", cfgflag, data, listen, "--log.level=warn",
					     NULL },
				 p->log, false, SIGKILL);
	long deadline = th_now_ms() + WAIT_MS;
	while (th_now_ms() < deadline) {
		if (th_sh(NULL, "curl -sf http://127.0.0.1:%d/-/ready", p->port) == 0)
			return;
		int st;
		if (waitpid(p->pid, &st, WNOHANG) == p->pid)
			break;
		th_sleep_ms(100);
	}
	char *log = th_read_file(p->log);
	cr_assert_fail("prometheus did not become ready:\n%s", log ? log : "");
}

static void fleet_prom_stop(struct fleet_prom *p)
{
	if (p->pid <= 0)
		return;
	kill(p->pid, SIGTERM);
	int st = 0;
	for (int i = 0; i < 3000 && waitpid(p->pid, &st, WNOHANG) != p->pid; i++)
		th_sleep_ms(10);
	if (kill(p->pid, 0) == 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, &st, 0);
	}
	p->pid = 0;
}

/* Prometheus's active targets, one line each: __param_pid (discovered), then the target's
 * labels pid, service_name and exe as JSON strings, its health and scrape URL, tab-separated,
 * sorted. */
static char *fleet_prom_targets(const struct fleet_prom *p)
{
	char *out;
	int rc = th_sh(&out,
			"curl -sf http://127.0.0.1:%d/api/v1/targets | python3 -c '"
			"import json, sys\n"
			"rows = []\n"
			"for t in json.load(sys.stdin)[\"data\"][\"activeTargets\"]:\n"
			"    d, l = t[\"discoveredLabels\"], t[\"labels\"]\n"
			"    rows.append(\"\\t\".join([d.get(\"__param_pid\", \"\"), l.get(\"pid\", \"\"),"
			" json.dumps(l.get(\"service_name\")), json.dumps(l.get(\"exe\")),"
			" t[\"health\"], t[\"scrapeUrl\"]]))\n"
			"print(\"\\n\".join(sorted(rows)))'",
			p->port);
	cr_assert_eq(rc, 0, "reading prometheus targets: %s", out);
	return out;
}

/* The line fleet_prom_targets gives for a healthy target of pid f. */
static void fleet_target_line(char *buf, size_t n, const struct fleet_prog *f, const char *svc_json,
			      int heapd_port)
{
	snprintf(buf, n, "%d\t%d\t%s\t\"%s\"\tup\thttp://127.0.0.1:%d/metrics?pid=%d",
		 (int)f->p.pid, (int)f->p.pid, svc_json, f->exe, heapd_port, (int)f->p.pid);
}

/* Wait until every one of the n lines is among Prometheus's targets, and there are n. */
static char *fleet_prom_wait_targets(const struct fleet_prom *p, char lines[][1024], int n)
{
	long deadline = th_now_ms() + WAIT_MS;
	char *t = NULL;
	for (;;) {
		free(t);
		t = fleet_prom_targets(p);
		int found = 0, total = 0;
		for (const char *c = t; *c; c++)
			total += *c == '\n';
		total += t[0] && t[strlen(t) - 1] != '\n';
		for (int i = 0; i < n; i++)
			found += strstr(t, lines[i]) != NULL;
		if ((found == n && total == n) || th_now_ms() > deadline)
			break;
		th_sleep_ms(250);
	}
	return t;
}

/* The value of a PromQL instant query with one result ("" when none). */
static char *fleet_prom_query(const struct fleet_prom *p, const char *promql)
{
	char *out;
	int rc = th_sh(&out,
			"curl -sf -G --data-urlencode 'query=%s' http://127.0.0.1:%d/api/v1/query |"
			" python3 -c 'import json, sys\n"
			"r = json.load(sys.stdin)[\"data\"][\"result\"]\n"
			"print(r[0][\"value\"][1] if len(r) == 1 else \"\", end=\"\")'",
			promql, p->port);
	cr_assert_eq(rc, 0, "query %s: %s", promql, out);
	return out;
}

/* ---- tests -------------------------------------------------------------------------------- */

/* /metrics of a daemon with three processes (one with a hostile service name) passes
 * `promtool check metrics` (syntax and lint), whole and per process. */
Test(fleet, metrics_pass_promtool, .timeout = 300)
{
	cr_assert_eq(th_sh(NULL, "command -v promtool"), 0,
		     "promtool is not installed (Debian package prometheus: make deps)");
	char *dir = th_tmpdir();
	struct heapd d;
	struct fleet_prog three[3];
	int port = fleet_three(three, &d, dir, "pay\"ments\\\n\x01\xff");
	struct fleet_prog *a = &three[0], *b = &three[1], *c = &three[2];

	/* rate 1 and 2 x 200 allocations a round: every one sampled and, once drained,
	 * delivered */
	struct llgo_list_entry e = { 0 };
	for (int i = 0; i < 2000 && (!heapd_list_pid(d.sock, a->p.pid, &e) || e.delivered < 400); i++)
		th_sleep_ms(5);
	char *out;
	int rc = th_sh(&out, "curl -sf http://127.0.0.1:%d/metrics > '%s/metrics.txt' && "
			      "promtool check metrics < '%s/metrics.txt'", port, dir, dir);
	cr_expect_eq(rc, 0, "promtool check metrics: %s", out);
	cr_expect_str_eq(out, "");
	free(out);
	char path[600];
	snprintf(path, sizeof(path), "%s/metrics.txt", dir);
	char *m = th_read_file(path);
	cr_assert(m);
	char want[512];
	snprintf(want, sizeof(want),
		 "llgo_heap_process_delivered_total{pid=\"%d\",service_name=\"checkout\"} ",
		 (int)a->p.pid);
	const char *at = strstr(m, want);
	cr_expect(at && atol(at + strlen(want)) >= 400, "no '%s' >= 400 in:\n%s", want, m);
	snprintf(want, sizeof(want),
		 "llgo_heap_process_sampled_total{pid=\"%d\",service_name=\"worker\"} ",
		 (int)b->p.pid);
	cr_expect(strstr(m, want), "no '%s' in:\n%s", want, m);
	/* the hostile name: escape.c's form, then the format's quoting */
	snprintf(want, sizeof(want),
		 "llgo_heap_process_live{pid=\"%d\",service_name=\"pay\\\"ments\\\\\\\\\\\\x0a"
		 "\\\\x01\\\\xff\"} 1\n", (int)c->p.pid);
	cr_expect(strstr(m, want), "no '%s' in:\n%s", want, m);
	cr_expect(strstr(m, "# TYPE llgo_heap_daemon_resident_memory_bytes gauge\n"));
	cr_expect(strstr(m, "llgo_heap_budget_limit{kind=\"unread_answer_bytes\"} +Inf\n"));
	cr_expect(strstr(m, "llgo_heap_processes{state=\"live\"} 3\n"), "%s", m);
	cr_expect(strstr(m, "llgo_heap_socket_connections_open "));
	cr_expect(strstr(m, "llgo_heap_budget_uid_used{uid=\""));
	free(m);

	/* one process, as a /targets target is scraped: its series alone, still valid */
	rc = th_sh(&out, "curl -sf 'http://127.0.0.1:%d/metrics?pid=%d' > '%s/one.txt' && "
			  "promtool check metrics < '%s/one.txt'", port, (int)b->p.pid, dir, dir);
	cr_expect_eq(rc, 0, "promtool check metrics (pid): %s", out);
	free(out);
	snprintf(path, sizeof(path), "%s/one.txt", dir);
	m = th_read_file(path);
	snprintf(want, sizeof(want), "pid=\"%d\"", (int)a->p.pid);
	cr_expect_null(strstr(m, want), "another process in ?pid=%d:\n%s", (int)b->p.pid, m);
	cr_expect_null(strstr(m, "llgo_heap_daemon_"), "%s", m);
	free(m);
	rc = th_sh(&out, "curl -s -o /dev/null -w '%%{http_code}' "
			  "'http://127.0.0.1:%d/metrics?pid=999999999'", port);
	cr_expect_str_eq(out, "404");
	free(out);

	fleet_prog_stop(a);
	fleet_prog_stop(b);
	fleet_prog_stop(c);
	cr_expect_eq(heapd_stop(&d), 0);
	th_rmdir(dir);
}

/* A real Prometheus with one http_sd_configs entry finds every profiled process with its
 * labels, scrapes each one's /metrics?pid=N, and drops a process once it exits. */
Test(fleet, prometheus_discovers_every_process, .timeout = 300)
{
	char *dir = th_tmpdir();
	struct heapd d;
	struct fleet_prog three[3];
	int port = fleet_three(three, &d, dir, "pay\"ments\x01");
	struct fleet_prog *a = &three[0], *b = &three[1], *c = &three[2];

	struct fleet_prom p;
	fleet_prom_start(&p, dir, port, NULL);
	char lines[3][1024];
	fleet_target_line(lines[0], sizeof(lines[0]), a, "\"checkout\"", port);
	fleet_target_line(lines[1], sizeof(lines[1]), b, "\"worker\"", port);
	fleet_target_line(lines[2], sizeof(lines[2]), c, "\"pay\\\"ments\\\\x01\"", port);
	char *t = fleet_prom_wait_targets(&p, lines, 3);
	for (int i = 0; i < 3; i++)
		cr_expect(strstr(t, lines[i]), "prometheus lacks\n%s\namong its targets:\n%s",
			  lines[i], t);
	free(t);

	/* what it scraped: the counters of the process behind service_name="checkout" */
	long deadline = th_now_ms() + WAIT_MS;
	char *v = NULL;
	do {
		free(v);
		v = fleet_prom_query(&p, "llgo_heap_process_delivered_total{job=\"llgo-heap\","
					 "service_name=\"checkout\"}");
	} while (!*v && th_now_ms() < deadline && (th_sleep_ms(250), 1));
	cr_expect_geq(atol(v), 400, "delivered of checkout: '%s'", v);
	free(v);

	/* the worker exits: gone from the list at the next refresh */
	fleet_prog_stop(b);
	char two[2][1024];
	memcpy(two[0], lines[0], sizeof(two[0]));
	memcpy(two[1], lines[2], sizeof(two[1]));
	t = fleet_prom_wait_targets(&p, two, 2);
	cr_expect(strstr(t, two[0]) && strstr(t, two[1]) && !strstr(t, lines[1]),
		  "after the worker exited:\n%s", t);
	free(t);

	fleet_prom_stop(&p);
	fleet_prog_stop(a);
	fleet_prog_stop(c);
	cr_expect_eq(heapd_stop(&d), 0);
	th_rmdir(dir);
}

/* The status and WWW-Authenticate header curl gets for path with extra curl options. */
static char *fleet_curl_status(int port, const char *path, const char *opts)
{
	char *out;
	th_sh(&out, "curl -s -o /dev/null -D - %s 'http://127.0.0.1:%d%s' | "
		     "sed -n -e '1s/^HTTP[^ ]* \\([0-9]*\\).*/\\1/p' -e 's/^WWW-Authenticate: //p' | "
		     "tr -d '\\r' | paste -sd'|'", opts, port, path);
	return out;
}

/* With --http-token-file everything but / wants the token: 401 and WWW-Authenticate:
 * Bearer without it; a Prometheus given the same file as credentials_file discovers and
 * scrapes. */
Test(fleet, bearer_token, .timeout = 300)
{
	char *dir = th_tmpdir();
	char token[600];
	snprintf(token, sizeof(token), "%s/token", dir);
	FILE *f = fopen(token, "w");
	cr_assert(f);
	fputs("  s3cr3t-Token_42\n", f); /* white space around it is not part of it */
	fclose(f);
	chmod(token, 0600);
	const char *more[] = { "--http-token-file", token, NULL };
	struct heapd d;
	int port = fleet_daemon(&d, dir, "127.0.0.1:0", "127.0.0.1", more);
	struct fleet_prog a;
	const char *env_a[] = { "LLGO_HEAP_SERVICE=checkout", NULL };
	fleet_prog_start(&a, &d, dir, "checkout-svc", env_a);

	const char *paths[] = { "/targets", "/metrics", "/debug/pprof/", "/debug/pprof/heap",
				"/nothing" };
	for (size_t i = 0; i < (sizeof(paths) / sizeof(paths[0])); i++) {
		char *s = fleet_curl_status(port, paths[i], "");
		cr_expect_str_eq(s, "401|Bearer realm=\"llgo-heapd\"\n", "%s", paths[i]);
		free(s);
		s = fleet_curl_status(port, paths[i], "-H 'Authorization: Bearer s3cr3t-Token_4'");
		cr_expect_str_eq(s, "401|Bearer realm=\"llgo-heapd\", error=\"invalid_token\"\n",
				 "%s", paths[i]);
		free(s);
		s = fleet_curl_status(port, paths[i], "-H 'Authorization: Basic czNjcjN0'");
		cr_expect(strncmp(s, "401|", 4) == 0, "%s: %s", paths[i], s);
		free(s);
	}
	char *s = fleet_curl_status(port, "/", "");
	cr_expect_str_eq(s, "200\n", "the index needs no token");
	free(s);
	s = fleet_curl_status(port, "/targets", "-H 'Authorization: bearer s3cr3t-Token_42'");
	cr_expect_str_eq(s, "200\n");
	free(s);
	s = fleet_curl_status(port, "/debug/pprof/allocs", "-H 'Authorization: Bearer s3cr3t-Token_42'");
	cr_expect_str_eq(s, "200\n");
	free(s);
	/* a POST without the token is refused before its body is kept */
	char *out;
	th_sh(&out, "head -c 3000000 /dev/zero | tr '\\0' 'x' | curl -s -o /dev/null "
		     "-w '%%{http_code}' --data-binary @- http://127.0.0.1:%d/debug/pprof/symbol",
	       port);
	cr_expect_str_eq(out, "401");
	free(out);

	struct fleet_prom p;
	fleet_prom_start(&p, dir, port, token);
	char lines[1][1024];
	fleet_target_line(lines[0], sizeof(lines[0]), &a, "\"checkout\"", port);
	char *t = fleet_prom_wait_targets(&p, lines, 1);
	cr_expect(strstr(t, lines[0]), "prometheus with the token lacks\n%s\namong:\n%s",
		  lines[0], t);
	free(t);
	fleet_prom_stop(&p);

	th_sh(&out, "curl -s -H 'Authorization: Bearer s3cr3t-Token_42' "
		     "http://127.0.0.1:%d/metrics | grep '^llgo_heap_http_unauthorized_total '",
	       port);
	cr_expect_str_eq(out, "llgo_heap_http_unauthorized_total 16\n");
	free(out);
	fleet_prog_stop(&a);
	cr_expect_eq(heapd_stop(&d), 0);

	/* an empty token file is refused at start */
	f = fopen(token, "w");
	fputs(" \n", f);
	fclose(f);
	int rc = th_sh(&out, "%s/llgo-heapd --foreground --socket %s/s2.sock --http 0 "
			      "--http-token-file %s", TH_BIN, dir, token);
	cr_expect_neq(rc, 0);
	cr_expect(strstr(out, "--http-token-file") && strstr(out, "empty"), "%s", out);
	free(out);
	th_rmdir(dir);
}

/* --http PORT and :PORT bind loopback; on every interface /targets names the host the
 * request came to (Host), else this host; --http-uids hides other users' processes. */
Test(fleet, addresses_and_uids, .timeout = 120)
{
	char *dir = th_tmpdir();
	struct heapd d;
	int port = fleet_daemon(&d, dir, "0", "127.0.0.1", NULL);
	struct fleet_prog a;
	fleet_prog_start(&a, &d, dir, "worker", NULL);
	char *out = fleet_first_target(port, NULL);
	char want[128];
	snprintf(want, sizeof(want), "127.0.0.1:%d\n", port);
	cr_expect_str_eq(out, want);
	free(out);
	fleet_prog_stop(&a);
	cr_expect_eq(heapd_stop(&d), 0);

	port = fleet_daemon(&d, dir, "0.0.0.0:0", "0.0.0.0", NULL);
	fleet_prog_start(&a, &d, dir, "worker", NULL);
	const char *hosts[][2] = {
		{ "db1.example.com", "db1.example.com:%d" },
		{ "db1.example.com:8443", "db1.example.com:8443" },
		{ "[fd00::1]", "[fd00::1]:%d" },
		{ "bad/host", NULL },
	};
	char name[256] = "";
	gethostname(name, sizeof(name) - 1);
	for (size_t i = 0; i < (sizeof(hosts) / sizeof(hosts[0])); i++) {
		out = fleet_first_target(port, hosts[i][0]);
		char exp[300];
		if (hosts[i][1])
			snprintf(exp, sizeof(exp), hosts[i][1], port);
		else
			snprintf(exp, sizeof(exp), "%s:%d", name, port);
		strcat(exp, "\n");
		cr_expect_str_eq(out, exp, "Host: %s", hosts[i][0]);
		free(out);
	}
	fleet_prog_stop(&a);
	cr_expect_eq(heapd_stop(&d), 0);

	char other[16];
	snprintf(other, sizeof(other), "%u", getuid() == 4242 ? 4243u : 4242u);
	const char *uids[] = { "--http-uids", other, NULL };
	port = fleet_daemon(&d, dir, "127.0.0.1:0", "127.0.0.1", uids);
	fleet_prog_start(&a, &d, dir, "worker", NULL);
	th_sh(&out, "curl -s http://127.0.0.1:%d/targets", port);
	cr_expect_str_eq(out, "[]\n");
	free(out);
	th_sh(&out, "curl -s http://127.0.0.1:%d/metrics | grep -c '^llgo_heap_process_' ; "
		     "curl -s -o /dev/null -w '%%{http_code}' "
		     "'http://127.0.0.1:%d/metrics?pid=%d'", port, port, (int)a.p.pid);
	cr_expect_str_eq(out, "0\n404");
	free(out);
	fleet_prog_stop(&a);
	cr_expect_eq(heapd_stop(&d), 0);
	th_rmdir(dir);
}

/* A process that made itself not dumpable (its /proc/PID files are then root's, as after a
 * setuid exec) before anything asked for its name: its environment is never read (the
 * command name stands in), where the same program left as it was is named by its
 * LLGO_HEAP_SERVICE. Both run as nobody. */
Test(fleet, environment_read_only_while_the_process_is_its_owners, .timeout = 120)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to run programs as another user");
	char *dir = th_tmpdir();
	cr_assert_eq(chmod(dir, 0755), 0); /* nobody reaches the socket */
	char as[16], uids[32];
	snprintf(as, sizeof(as), "%u", (unsigned)th_nobody_uid());
	snprintf(uids, sizeof(uids), "0,%s", as);
	const char *more[] = { "--http-uids", uids, NULL };
	struct heapd d;
	int port = fleet_daemon(&d, dir, "127.0.0.1:0", "127.0.0.1", more);
	const char *env_open[] = { "LLGO_HEAP_SERVICE=open-name", NULL };
	const char *env_secret[] = { "LLGO_HEAP_SERVICE=secret-name", NULL };
	struct fleet_prog open, secretive;
	fleet_prog_start_as(&open, &d, dir, "open", env_open, as);
	fleet_prog_start_as(&secretive, &d, dir, "secretive", env_secret, as);
	th_say(&secretive.p, "nodump");
	char line[64];
	cr_assert(th_read_line(&secretive.p, line, sizeof(line), 30000));
	cr_assert_str_eq(line, "ready 1");

	char *out;
	th_sh(&out, "curl -s http://127.0.0.1:%d/targets | python3 -c 'import json, sys\n"
		     "for t in json.load(sys.stdin):\n"
		     "    l = t[\"labels\"]\n"
		     "    print(l[\"pid\"], l[\"service_name\"], l[\"__meta_llgo_heap_uid\"])'; "
		     "curl -s http://127.0.0.1:%d/metrics | grep -c secret-name", port, port);
	char want[256];
	snprintf(want, sizeof(want), "%d open-name %s\n%d secretive %s\n0\n", (int)open.p.pid, as,
		 (int)secretive.p.pid, as);
	cr_expect_str_eq(out, want);
	free(out);
	fleet_prog_stop(&open);
	fleet_prog_stop(&secretive);
	cr_expect_eq(heapd_stop(&d), 0);
	th_rmdir(dir);
}
