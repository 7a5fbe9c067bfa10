// SPDX-License-Identifier: MIT
/*
 * daemon.c: main of llgo-heapd. Parses the options, sets up the server (server.c) while
 * still attached to the terminal so errors reach the user, daemonizes unless --foreground,
 * then waits for SIGTERM or SIGINT and shuts the server down in order. Everything the daemon
 * does between those two points happens in server.c, session.c and drain.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "budget.h"
#include "http.h"
#include "session.h"

struct daemon_opts {
	struct server_opts server;
	bool foreground;
	const char *http_uids; /* --http-uids, checked by http_parse_uids */
	const char *http_token_file; /* --http-token-file */
	struct budget_limits budget;
	char socket_buf[PATH_MAX];
};

static void daemon_usage(FILE *f)
{
	struct budget_limits d;
	budget_defaults(&d);
	fprintf(f,
		"usage: llgo-heapd [--socket PATH] [--foreground] [--max-buckets N]\n"
		"                  [--max-memory BYTES] [--keep-exited N]\n"
		"                  [--http [ADDR:]PORT [--http-uids UID,...]\n"
		"                  [--http-token-file FILE]] [--trim NAME,...]\n"
		"                  [--verify-every N]\n"
		"  --socket PATH       listen here (default: $LLGO_HEAP_SOCKET, else\n"
		"                      /run/llgo-heapd/llgo-heapd.sock for root,\n"
		"                      $XDG_RUNTIME_DIR/llgo-heapd.sock otherwise);\n"
		"                      a socket passed by systemd (LISTEN_FDS) takes precedence\n"
		"  --foreground        do not daemonize; log to stderr\n"
		"  --max-buckets N     buckets per process before records go to an overflow\n"
		"                      bucket (default 1000000)\n"
		"  --max-memory BYTES  bucket memory per process, K/M/G suffixes (default 512M)\n"
		"  --keep-exited N     exited processes kept for snapshots (default %u)\n"
		"  --http [ADDR:]PORT  serve Go's /debug/pprof/{heap,allocs}?pid=N, /targets\n"
		"                      (Prometheus http_sd) and /metrics over HTTP (off by\n"
		"                      default; PORT alone is 127.0.0.1, 0.0.0.0:PORT every\n"
		"                      interface, [::1]:PORT IPv6)\n"
		"  --http-uids UID,... serve only processes of these uids or user names\n"
		"                      (default: the daemon's own uid)\n"
		"  --http-token-file FILE  require \"Authorization: Bearer TOKEN\" (the file's\n"
		"                      content) of every HTTP request but the index /\n"
		"  --trim NAME,...     hide these functions (NAME* for a prefix) from the top\n"
		"                      of every stack, e.g. a linked allocator's plumbing;\n"
		"                      may be repeated\n"
		"  --verify-every N    check one sample in N of every process against the\n"
		"                      kernel's stack (eBPF; needs CAP_BPF and CAP_PERFMON);\n"
		"                      results in `llgo-heap list` and profile comments\n"
		"\n"
		"Limits for a shared host (per uid, and for all users together; 0 = none).\n"
		"A user over a limit is refused or degraded alone, logged once, and flagged\n"
		"in `llgo-heap list`; root is held by the totals only:\n"
		"  --max-conns-per-uid N              open connections (default %llu)\n"
		"  --max-conns N                      (default %llu)\n"
		"  --max-processes-per-uid N          live profiled processes (default %llu)\n"
		"  --max-processes N                  (default %llu)\n"
		"  --max-rings-per-uid N              rings mapped (default %llu)\n"
		"  --max-rings N                      (default %llu)\n"
		"  --max-ring-memory-per-uid BYTES    ring memory mapped (default %lluM)\n"
		"  --max-ring-memory BYTES            (default %lluM)\n"
		"  --max-bucket-memory-per-uid BYTES  aggregated profiles, live and exited\n"
		"                                     (default %lluM; over it, new records of\n"
		"                                     that user are counted, not aggregated)\n"
		"  --max-bucket-memory BYTES          (default %lluM)\n"
		"  --max-unread-per-uid BYTES         answers its clients do not read\n"
		"                                     (default %lluM; all users: 512M)\n"
		"  --keep-exited-per-uid N            exited processes kept per uid (default %u)\n"
		"  --keep-exited-age SECONDS          and for at most this long (default %u)\n",
		SESSION_DEFAULT_KEEP_EXITED, (unsigned long long)d.per_uid[BUDGET_CONNS],
		(unsigned long long)d.total[BUDGET_CONNS],
		(unsigned long long)d.per_uid[BUDGET_SESSIONS],
		(unsigned long long)d.total[BUDGET_SESSIONS],
		(unsigned long long)d.per_uid[BUDGET_RINGS], (unsigned long long)d.total[BUDGET_RINGS],
		(unsigned long long)(d.per_uid[BUDGET_RING_BYTES] >> 20),
		(unsigned long long)(d.total[BUDGET_RING_BYTES] >> 20),
		(unsigned long long)(d.per_uid[BUDGET_BUCKET_BYTES] >> 20),
		(unsigned long long)(d.total[BUDGET_BUCKET_BYTES] >> 20),
		(unsigned long long)(d.per_uid[BUDGET_OUT_BYTES] >> 20),
		SESSION_DEFAULT_KEEP_EXITED_PER_UID, SESSION_DEFAULT_KEEP_EXITED_AGE_S);
}

static int daemon_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int daemon_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("llgo-heapd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 2;
}

/* A decimal count with an optional K/M/G/T suffix (powers of 1024, "KiB" and "KB" alike). */
static int daemon_parse_size(const char *s, uint64_t *out, bool suffixes)
{
	if (!s || !*s || *s == '-')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	unsigned shift = 0;
	if (suffixes && *end) {
		switch (*end) {
		case 'k': case 'K': shift = 10; break;
		case 'm': case 'M': shift = 20; break;
		case 'g': case 'G': shift = 30; break;
		case 't': case 'T': shift = 40; break;
		default: return -EINVAL;
		}
		end++;
		if (*end == 'i')
			end++;
		if (*end == 'B' || *end == 'b')
			end++;
	}
	if (*end)
		return -EINVAL;
	if (shift && v > (~0ull >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Append the comma-separated names of val to o->server.trim (kept for the daemon's life). */
static int daemon_add_trim(struct daemon_opts *o, const char *val)
{
	char *copy = strdup(val);
	int rc = copy ? 0 : -1;
	for (char *save = NULL, *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && !rc;
	     tok = strtok_r(NULL, ",", &save)) {
		char **v = realloc(o->server.trim, (o->server.ntrim + 1) * sizeof(*v));
		if (v)
			o->server.trim = v;
		if (strcmp(tok, "*") == 0 || !v || !(v[o->server.ntrim] = strdup(tok)))
			rc = -1;
		else
			o->server.ntrim++;
	}
	free(copy);
	return rc;
}

static int daemon_parse(int argc, char **argv, struct daemon_opts *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			daemon_usage(stdout);
			exit(0);
		}
		if (strcmp(a, "--foreground") == 0 || strcmp(a, "-f") == 0) {
			o->foreground = true;
			continue;
		}
		const char *names[] = { "--socket", "--max-buckets", "--max-memory",
					"--keep-exited", "--http", "--http-uids", "--trim",
					"--verify-every",
					/* 8.. : budgets, in enum budget_kind order, per uid then all */
					"--max-conns-per-uid", "--max-conns",
					"--max-processes-per-uid", "--max-processes",
					"--max-rings-per-uid", "--max-rings",
					"--max-ring-memory-per-uid", "--max-ring-memory",
					"--max-bucket-memory-per-uid", "--max-bucket-memory",
					"--keep-exited-per-uid", "--keep-exited-age",
					"--max-unread-per-uid", "--http-token-file" };
		const char *val = NULL;
		size_t which = LLGO_ARRAY_SIZE(names);
		for (size_t k = 0; k < LLGO_ARRAY_SIZE(names); k++) {
			size_t n = strlen(names[k]);
			if (strncmp(a, names[k], n) != 0)
				continue;
			if (a[n] == '=') {
				val = a + n + 1;
			} else if (a[n] == '\0') {
				if (i + 1 >= argc)
					return daemon_die("%s needs a value", names[k]);
				val = argv[++i];
			} else {
				continue;
			}
			which = k;
			break;
		}
		uint64_t v = 0;
		switch (which) {
		case 0:
			if (!*val)
				return daemon_die("--socket: empty path");
			o->server.socket_path = val;
			break;
		case 1:
			if (daemon_parse_size(val, &v, false) || v == 0)
				return daemon_die("--max-buckets: not a positive number: %s", val);
			o->server.max_buckets = v;
			break;
		case 2:
			if (daemon_parse_size(val, &v, true) || v < 65536)
				return daemon_die("--max-memory: want a size of at least 64K: %s",
						  val);
			o->server.max_bytes = v;
			break;
		case 3:
			if (daemon_parse_size(val, &v, false) || v > 1000000)
				return daemon_die("--keep-exited: not a number up to 1000000: %s",
						  val);
			o->server.keep_exited = (unsigned)v;
			break;
		case 4:
			o->server.http_addr = val;
			break;
		case 5:
			o->http_uids = val;
			break;
		case 6:
			if (daemon_add_trim(o, val))
				return daemon_die("--trim: bad list '%s' (NAME or PREFIX*, comma-"
						  "separated)", val);
			break;
		case 7:
			if (daemon_parse_size(val, &v, false) || v == 0 || v > UINT32_MAX)
				return daemon_die("--verify-every: not a positive number: %s", val);
			o->server.verify_every = (uint32_t)v;
			break;
		case 20:
			if (daemon_parse_size(val, &v, true))
				return daemon_die("--max-unread-per-uid: not a size: %s", val);
			o->budget.per_uid[BUDGET_OUT_BYTES] = v;
			o->server.budget = &o->budget;
			break;
		case 21:
			o->http_token_file = val;
			break;
		case 18:
			if (daemon_parse_size(val, &v, false) || v == 0 || v > 1000000)
				return daemon_die("--keep-exited-per-uid: not a number in 1..1000000: "
						  "%s", val);
			o->server.keep_exited_per_uid = (unsigned)v;
			break;
		case 19:
			if (daemon_parse_size(val, &v, false) || v == 0 || v > 100u * 365 * 86400)
				return daemon_die("--keep-exited-age: not a number of seconds: %s", val);
			o->server.keep_exited_age_s = (unsigned)v;
			break;
		default:
			if (which >= 8 && which < 18) {
				unsigned k = (unsigned)(which - 8) / 2;
				bool bytes = k == BUDGET_RING_BYTES || k == BUDGET_BUCKET_BYTES;
				if (daemon_parse_size(val, &v, bytes))
					return daemon_die("%s: not a %s: %s", names[which],
							  bytes ? "size" : "number", val);
				if ((which - 8) % 2 == 0)
					o->budget.per_uid[k] = v;
				else
					o->budget.total[k] = v;
				o->server.budget = &o->budget;
				break;
			}
			daemon_usage(stderr);
			return daemon_die("unknown option '%s'", a);
		}
	}
	if (!o->server.socket_path) {
		const char *env = getenv("LLGO_HEAP_SOCKET");
		const char *xdg = getenv("XDG_RUNTIME_DIR");
		if (env && *env) {
			o->server.socket_path = env;
		} else if (geteuid() == 0) {
			o->server.socket_path = "/run/llgo-heapd/llgo-heapd.sock";
		} else if (xdg && *xdg) {
			snprintf(o->socket_buf, sizeof(o->socket_buf), "%s/llgo-heapd.sock", xdg);
			o->server.socket_path = o->socket_buf;
		} else {
			return daemon_die("no socket: pass --socket PATH or set XDG_RUNTIME_DIR");
		}
	}
	return 0;
}

/* Double fork: the daemon is no session leader, so it can never get a controlling tty. */
static int daemon_detach(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0)
		_exit(0);
	if (setsid() < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0)
		_exit(0);
	if (chdir("/") < 0)
		return -errno;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		return -errno;
	dup2(null, 0);
	dup2(null, 1);
	dup2(null, 2);
	if (null > 2)
		close(null);
	return 0;
}

int main(int argc, char **argv)
{
	struct daemon_opts o;
	memset(&o, 0, sizeof(o));
	o.server.keep_exited = SESSION_DEFAULT_KEEP_EXITED;
	budget_defaults(&o.budget);
	/* Signals are taken synchronously by sigwait below; blocked from the start, so a
	 * SIGTERM that arrives while the socket is being set up still ends in an orderly exit,
	 * and every thread started later inherits the mask. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	int rc = daemon_parse(argc, argv, &o);
	if (rc)
		return rc;
	uid_t *http_uids = NULL;
	size_t n_http_uids = 0;
	char err[512] = "";
	if (o.http_uids && http_parse_uids(o.http_uids, &http_uids, &n_http_uids, err,
					   sizeof(err)))
		return daemon_die("%s", err);

	signal(SIGPIPE, SIG_IGN);
	/* One descriptor per connection: take what the hard limit allows. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	struct server *srv = server_new(&o.server, err, sizeof(err));
	if (!srv) {
		fprintf(stderr, "llgo-heapd: %s\n", err);
		return 1;
	}
	/* Bound before detaching, so a busy port is reported on the terminal. */
	struct http_server *http = NULL;
	if (o.server.http_addr)
		http = http_new(srv, o.server.http_addr, http_uids, n_http_uids, err, sizeof(err));
	free(http_uids);
	if (http && http_set_token_file(http, o.http_token_file, err, sizeof(err))) {
		http_free(http);
		http = NULL;
	}
	if (o.server.http_addr && !http) {
		fprintf(stderr, "llgo-heapd: %s\n", err);
		server_free(srv);
		return 1;
	}
	if (!o.foreground) {
		rc = daemon_detach();
		if (rc) {
			fprintf(stderr, "llgo-heapd: daemonize: %s\n", strerror(-rc));
			http_free(http);
			server_free(srv);
			return 1;
		}
		server_log_use_syslog(true);
	}

	rc = server_start(srv);
	if (rc) {
		server_log("cannot start: %s", strerror(-rc));
		http_free(http);
		server_free(srv);
		return 1;
	}
	server_log("listening on %s (pid %d)", o.server.socket_path, (int)getpid());
	if (http && http_start(http, err, sizeof(err))) {
		server_log("%s", err);
		http_free(http);
		server_free(srv);
		return 1;
	}
	int sig = 0;
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGHUP)
			continue; /* nothing to reload */
		break;
	}
	struct server_stats st;
	server_get_stats(srv, &st);
	server_log("signal %d: exiting (%llu connections, %llu processes, %llu dropped for "
		   "bad packets, %llu exited processes evicted)", sig,
		   (unsigned long long)st.connections, (unsigned long long)st.sessions,
		   (unsigned long long)st.malformed, (unsigned long long)st.evicted);
	http_free(http); /* before the server: its requests hold sessions */
	server_free(srv);
	for (size_t i = 0; i < o.server.ntrim; i++)
		free(o.server.trim[i]);
	free(o.server.trim);
	return 0;
}
