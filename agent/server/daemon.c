// SPDX-License-Identifier: MIT
/*
 * daemon.c: main of llgo-heapd. Reads the configuration (config.c), sets up the server
 * (server.c) and the HTTP server (http.c) while still attached to the terminal so errors
 * reach the user, daemonizes unless --foreground, tells systemd it is ready, then waits for
 * signals: SIGHUP reloads the configuration (what can change at run time changes, what
 * cannot is reported; a file that does not parse changes nothing), SIGTERM and SIGINT stop
 * the servers in order (no new connection, workers done, our own socket removed) and exit 0.
 * Profiled processes outlive it: their shims keep sampling and reconnect to the next daemon.
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

#include "config.h"
#include "../dump/dump.h"
#include "../http/http.h"
#include "listen.h"
#include "../ingest/session.h"
#include "../symbol/symuid.h"

struct daemon {
	int argc;
	char **argv;
	/* The configuration read at start stays allocated until exit: the server listens where
	 * it says and copied its options from it. cur is the one in force, first or a reload's. */
	struct config first, *cur;
	bool use_default; /* config_use_default, decided at start */
	struct server *srv;
	struct http_server *http;
	/* What the HTTP server in force was made with (copies; NULL: none, all uids). */
	char *http_addr, *http_uids;
	/* --dump-*, --push (dump.c): NULL when off. Made with cur's options and its
	 * --http-uids (the processes it pushes); replaced when a reload changes them. */
	struct dumper *dump;
};

static bool daemon_same(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* An HTTP server on addr serving uids (NULL: the daemon's own), started unless !start;
 * *out NULL when addr is NULL. */
static int daemon_http_new(struct daemon *d, const char *addr, const char *uids_text,
			   const char *token_file, bool start, struct http_server **out, char *err,
			   size_t errlen)
{
	*out = NULL;
	if (!addr)
		return 0;
	uid_t *uids = NULL;
	size_t n = 0;
	if (uids_text && http_parse_uids(uids_text, &uids, &n, err, errlen))
		return -EINVAL;
	*out = http_new(d->srv, addr, uids, n, err, errlen);
	free(uids);
	if (*out && http_set_token_file(*out, token_file, err, errlen)) {
		http_free(*out);
		*out = NULL;
	}
	if (*out && start && http_start(*out, err, errlen)) {
		http_free(*out);
		*out = NULL;
	}
	return *out ? 0 : -EINVAL;
}

/* A dumper for c (NULL when c asks for none), not started. */
static int daemon_dump_new(struct daemon *d, const struct config *c, struct dumper **out,
			   char *err, size_t errlen)
{
	uid_t *uids = NULL;
	size_t n = 0;
	if (c->http_uids && http_parse_uids(c->http_uids, &uids, &n, err, errlen))
		return -EINVAL;
	int rc = dumper_new(d->srv, &c->dump, uids, n, out, err, errlen);
	free(uids);
	return rc;
}

/* A reload: a new dumper when its options (or the uids it pushes) changed. The old one
 * stops first (its snapshot in flight ends, a push is cut short); one that cannot start
 * leaves none until the next reload. */
static void daemon_dump_replace(struct daemon *d, const struct config *next)
{
	if (dump_opts_same(&next->dump, &d->cur->dump) &&
	    daemon_same(next->http_uids, d->cur->http_uids))
		return;
	dumper_free(d->dump);
	d->dump = NULL;
	char err[512] = "";
	if (daemon_dump_new(d, next, &d->dump, err, sizeof(err)) != 0 ||
	    dumper_start(d->dump, err, sizeof(err)) != 0) {
		log_error("reload: %s; no --dump or --push until the next reload", err);
		dumper_free(d->dump);
		d->dump = NULL;
	} else if (!d->dump) {
		log_info("reload: --dump and --push stopped");
	}
}

static int daemon_http_remember(struct daemon *d, const char *addr, const char *uids)
{
	free(d->http_addr);
	free(d->http_uids);
	d->http_addr = addr ? strdup(addr) : NULL;
	d->http_uids = uids ? strdup(uids) : NULL;
	return (addr && !d->http_addr) || (uids && !d->http_uids) ? -ENOMEM : 0;
}

/* The --http options changed: the listener is made again (in-flight requests finish first:
 * http_free waits for them). If the new one cannot start, the previous one is restored. */
static void daemon_http_replace(struct daemon *d, const struct config *next)
{
	char err[512] = "";
	http_free(d->http);
	d->http = NULL;
	if (daemon_http_new(d, next->server.http_addr, next->http_uids, next->http_token_file,
			    true, &d->http, err, sizeof(err)) == 0) {
		if (!d->http)
			log_info("reload: HTTP server stopped");
		if (daemon_http_remember(d, next->server.http_addr, next->http_uids))
			log_error("reload: out of memory");
		return;
	}
	log_error("reload: %s; restoring the previous HTTP server", err);
	if (daemon_http_new(d, d->http_addr, d->http_uids, d->cur->http_token_file, true, &d->http,
			    err, sizeof(err)))
		log_error("reload: %s; no HTTP server until the next reload", err);
}

static void daemon_reload(struct daemon *d)
{
	listen_notify("RELOADING=1");
	char err[512] = "out of memory";
	struct config *next = malloc(sizeof(*next));
	uid_t *uids = NULL;
	size_t n = 0;
	if (!next || config_load(next, d->argc, d->argv, d->use_default, err, sizeof(err)) != 0) {
		free(next);
		goto refused;
	}
	/* a bad uid list refuses the whole file, as any other bad value */
	if (next->http_uids && http_parse_uids(next->http_uids, &uids, &n, err, sizeof(err))) {
		config_free(next);
		free(next);
		goto refused;
	}
	free(uids);
	if (!daemon_same(next->server.socket_path, d->first.server.socket_path))
		log_warn("reload: socket %s needs a restart; still listening on %s",
			 next->server.socket_path, d->first.server.socket_path);
	if (next->foreground != d->first.foreground)
		log_warn("reload: foreground needs a restart");
	log_set_level(next->log_level);
	symuid_set_range(next->symbolizer_uid_first, next->symbolizer_uid_last);
	server_reconfigure(d->srv, &next->server);
	if (!daemon_same(next->server.http_addr, d->http_addr) ||
	    !daemon_same(next->http_uids, d->http_uids) ||
	    !daemon_same(next->http_token_file, d->cur->http_token_file)) {
		daemon_http_replace(d, next);
	} else if (d->http && next->http_token_file) {
		/* the same file: its token may have changed (rotation); a bad one keeps the old */
		char terr[512];
		if (http_reload_token(d->http, terr, sizeof(terr)))
			log_error("reload: %s; the previous token stays", terr);
	}
	daemon_dump_replace(d, next);
	if (d->cur != &d->first) {
		config_free(d->cur);
		free(d->cur);
	}
	d->cur = next;
	log_info("reloaded %s (log level %s)", next->path ? next->path : "(no configuration file)",
		 log_level_name(next->log_level));
	listen_notify("READY=1");
	return;
refused:
	log_error("reload: %s; keeping the previous configuration", err);
	listen_notify("READY=1");
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
	struct daemon d = { .argc = argc, .argv = argv };
	/* Signals are taken synchronously by sigwait below; blocked from the start, so a
	 * SIGTERM that arrives while the socket is being set up still ends in an orderly exit,
	 * and every thread started later inherits the mask. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);

	char err[512] = "";
	d.use_default = config_use_default(argc, argv);
	if (config_load(&d.first, argc, argv, d.use_default, err, sizeof(err)) != 0) {
		log_error("%s", err);
		return 2;
	}
	d.cur = &d.first;
	log_set_level(d.first.log_level);
	symuid_set_range(d.first.symbolizer_uid_first, d.first.symbolizer_uid_last);
	uid_t *http_uids = NULL;
	size_t n_http_uids = 0;
	if (d.first.http_uids &&
	    http_parse_uids(d.first.http_uids, &http_uids, &n_http_uids, err, sizeof(err))) {
		log_error("%s", err);
		config_free(&d.first);
		return 2;
	}
	free(http_uids);

	signal(SIGPIPE, SIG_IGN);
	/* One descriptor per connection: take what the hard limit allows. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	int rc = 1;
	d.srv = server_new(&d.first.server, err, sizeof(err));
	if (!d.srv) {
		log_error("%s", err);
		goto out;
	}
	/* Bound before detaching, so a busy port is reported on the terminal. */
	if (daemon_http_new(&d, d.first.server.http_addr, d.first.http_uids,
			    d.first.http_token_file, false, &d.http, err,
			    sizeof(err)) != 0 ||
	    daemon_http_remember(&d, d.first.server.http_addr, d.first.http_uids) != 0) {
		log_error("%s", err[0] ? err : "out of memory");
		goto out;
	}
	/* The --dump-dir checks, before detaching too */
	if (daemon_dump_new(&d, &d.first, &d.dump, err, sizeof(err)) != 0) {
		log_error("%s", err);
		rc = 2;
		goto out;
	}
	if (!d.first.foreground) {
		int drc = daemon_detach();
		if (drc) {
			log_error("daemonize: %s", strerror(-drc));
			goto out;
		}
		log_use_syslog(true);
	}
	int src = server_start(d.srv);
	if (src) {
		log_error("cannot start: %s", strerror(-src));
		goto out;
	}
	log_info("listening on %s (pid %d)%s%s", d.first.server.socket_path, (int)getpid(),
		 d.first.path ? ", configuration " : "", d.first.path ? d.first.path : "");
	if (d.http && http_start(d.http, err, sizeof(err))) {
		log_error("%s", err);
		goto out;
	}
	if (dumper_start(d.dump, err, sizeof(err))) {
		log_error("%s", err);
		goto out;
	}
	listen_notify("READY=1");
	int sig = 0;
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig != SIGHUP)
			break;
		daemon_reload(&d);
	}
	listen_notify("STOPPING=1");
	struct server_stats st;
	server_get_stats(d.srv, &st);
	log_info("signal %d: exiting (%llu connections, %llu processes, %llu dropped for bad "
		 "packets, %llu exited processes evicted)", sig,
		 (unsigned long long)st.connections, (unsigned long long)st.sessions,
		 (unsigned long long)st.malformed, (unsigned long long)st.evicted);
	rc = 0;
out:
	http_free(d.http); /* before the server: its requests hold sessions */
	dumper_free(d.dump); /* so does the dumper */
	server_free(d.srv);
	if (d.cur != &d.first) {
		config_free(d.cur);
		free(d.cur);
	}
	config_free(&d.first);
	free(d.http_addr);
	free(d.http_uids);
	return rc;
}
