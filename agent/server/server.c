// SPDX-License-Identifier: MIT
/*
 * server.c: llgo-heapd's socket server. It listens (on --socket PATH, or on the socket systemd
 * passes), runs the event loop, takes back the processes a previous daemon served, and owns
 * the server's lifetime. The loop (one thread, epoll) accepts connections (conn.c), reads one
 * packet per event and checks it (packet.c), and hands anything slow to the worker pools
 * (workq.c) that run the jobs (jobs.c); it never waits on a session's drain lock, a client or
 * the disk. The drain thread is drain.c's; snapshots are snapshot.c's, which asks
 * server_settle first so that a snapshot sees every packet a shim sent before the request.
 *
 * Identity and limits: every connection's peer is pinned at accept and re-checked before
 * HELLO reads anything of it; a session ends when its process does (its pidfd is watched).
 * Connections, sessions, rings and unread answers are charged to the peer's uid (budget.c).
 *
 * The logging and listening-socket sections below are to move to files of their own
 * (log.c, listen.c: issue 13); without them this file is about 450 lines.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"
#include "listen.h"
#include "server_impl.h"
#include "../output/snapshot.h"
#include "../verify/verify.h"

#define SERVER_LOG_PER_SEC 50u

/* ---- the event loop -------------------------------------------------------------------- */

static void *server_loop(void *arg)
{
	struct server *srv = arg;
	struct epoll_event ev[64];
	while (!atomic_load(&srv->stopping)) {
		int timeout = atomic_load(&srv->out_waiting) ? SERVER_OUT_SCAN_MS
			      : atomic_load(&srv->unseen) ? SERVER_IDLE_SCAN_MS
							  : -1;
		if (srv->accept_paused_until && (timeout < 0 || timeout > (int)SERVER_ACCEPT_PAUSE_MS))
			timeout = SERVER_ACCEPT_PAUSE_MS;
		int n = epoll_wait(srv->epfd, ev, 64, timeout);
		if (srv->accept_paused_until)
			conn_accept_resume(srv);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_error("epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n && !atomic_load(&srv->stopping); i++) {
			void *p = ev[i].data.ptr;
			if (p == &srv->listen_fd) {
				conn_accept(srv);
			} else if (p == &srv->wake_fd) {
				uint64_t v;
				if (read(srv->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_error("eventfd: %s", strerror(errno));
			} else {
				/* Whoever armed c did so under conns_lock, after its last write
				 * to c: taking the lock here makes those writes visible in a way
				 * ThreadSanitizer sees too (it does not model EPOLL_CTL_MOD ->
				 * epoll_wait). */
				struct conn *c = p;
				pthread_mutex_lock(&srv->conns_lock);
				bool out = c->out_waiting;
				pthread_mutex_unlock(&srv->conns_lock);
				if (out) {
					conn_out_event(c);
					continue;
				}
				atomic_store(&srv->loop_busy, 1);
				packet_event(srv, c);
				atomic_store(&srv->loop_busy, 0);
			}
		}
		if (atomic_load(&srv->out_waiting))
			conn_out_expire(srv);
		if (atomic_load(&srv->unseen))
			conn_idle_expire(srv);
	}
	return NULL;
}

/* ---- what the snapshot service and the verifier know of the server ------------------------ */

/* server_settle for the verifier (verify.c) and the snapshot service (snapshot.c), which
 * know no struct server. */
static void server_settle_for(void *srv, struct session *s)
{
	server_settle(srv, s);
}

static struct session *server_lookup_for(void *srv, pid_t pid)
{
	return server_lookup(srv, pid);
}

/* Hide the --trim functions from p's stacks, read under the lock a reload takes. */
static int server_trim(void *arg, struct profile *p, struct procmaps *maps)
{
	struct server *srv = arg;
	pthread_rwlock_rdlock(&srv->opts_lock);
	int rc = profile_trim(p, maps, srv->opts.trim, srv->opts.ntrim);
	pthread_rwlock_unlock(&srv->opts_lock);
	return rc;
}

const struct snapshot_source *server_snapshot_source(struct server *srv)
{
	return &srv->snap;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

struct server *server_new(const struct server_opts *o, char *err, size_t errlen)
{
	struct server *srv = calloc(1, sizeof(*srv));
	if (!srv) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	srv->opts = *o;
	srv->listen_fd = srv->epfd = srv->wake_fd = srv->spare_fd = -1;
	pthread_mutex_init(&srv->conns_lock, NULL);
	pthread_mutex_init(&srv->adopt_lock, NULL);
	pthread_mutex_init(&srv->hello_lock, NULL);
	pthread_rwlock_init(&srv->opts_lock, NULL);
	unsigned nclient = o->client_workers ? o->client_workers : SERVER_CLIENT_WORKERS;
	if (nclient > SERVER_MAX_WORKERS)
		nclient = SERVER_MAX_WORKERS;
	srv->rxbuf = malloc(LLGO_MSG_MAX);
	srv->socket_path = o->socket_path ? strdup(o->socket_path) : NULL;
	srv->reg = session_registry_new(o->keep_exited, o->max_buckets, o->max_bytes);
	struct budget_limits bl;
	if (o->budget)
		bl = *o->budget;
	else
		budget_defaults(&bl);
	srv->budget = budget_new(&bl);
	if (srv->reg)
		session_registry_set_limits(srv->reg, srv->budget,
					    o->keep_exited_per_uid ? o->keep_exited_per_uid
								   : SESSION_DEFAULT_KEEP_EXITED_PER_UID,
					    o->keep_exited_age_s ? o->keep_exited_age_s
								 : SESSION_DEFAULT_KEEP_EXITED_AGE_S);
	srv->drain = srv->reg ? drain_new(srv->reg) : NULL;
	srv->peak = srv->reg ? peak_thread_new(srv->reg) : NULL;
	if (srv->drain && srv->peak)
		drain_on_peak(srv->drain, peak_thread_wake, srv->peak);
	srv->verifier = verifier_new(server_settle_for, srv);
	srv->snap = (struct snapshot_source){ .arg = srv,
					      .lookup = server_lookup_for,
					      .settle = server_settle_for,
					      .trim = server_trim };
	if (!srv->rxbuf || !srv->reg || !srv->budget || !srv->drain || !srv->peak ||
	    !srv->verifier || (o->socket_path && !srv->socket_path) ||
	    workq_init(&srv->shimq, SERVER_SHIM_WORKERS, false, jobs_run, conn_close, srv) ||
	    workq_init(&srv->exitq, SERVER_EXIT_WORKERS, true, jobs_run, conn_close, srv) ||
	    workq_init(&srv->clientq, nclient, true, jobs_run, conn_close, srv)) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	struct rlimit rl;
	srv->max_conns = SERVER_MAX_CONNS;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (SERVER_MAX_CONNS + 64) * SERVER_FDS_PER_CONN)
		srv->max_conns = rl.rlim_cur > 256 ? (size_t)(rl.rlim_cur - 64) / SERVER_FDS_PER_CONN
						   : 64;

	int fd = listen_systemd_fd(err, errlen);
	if (fd >= 0) {
		srv->listen_fd = fd;
	} else if (fd != -ENOENT) {
		goto fail;
	} else {
		if (!srv->socket_path) {
			snprintf(err, errlen, "no socket path");
			goto fail;
		}
		struct stat st;
		fd = listen_bind(srv->socket_path, &st, err, errlen);
		if (fd < 0)
			goto fail;
		srv->listen_fd = fd;
		srv->own_socket = true;
		srv->sock_dev = st.st_dev;
		srv->sock_ino = st.st_ino;
	}
	srv->epfd = epoll_create1(EPOLL_CLOEXEC);
	srv->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (srv->epfd < 0 || srv->wake_fd < 0) {
		snprintf(err, errlen, "epoll/eventfd: %s", strerror(errno));
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &srv->listen_fd };
	struct epoll_event wv = { .events = EPOLLIN, .data.ptr = &srv->wake_fd };
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->listen_fd, &ev) < 0 ||
	    epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->wake_fd, &wv) < 0) {
		snprintf(err, errlen, "epoll_ctl: %s", strerror(errno));
		goto fail;
	}
	return srv;
fail:
	server_free(srv);
	return NULL;
}

/* ---- taking processes back after a restart (adopt.c finds them) -------------------------- */

static int server_adopt_locked(struct server *srv, const struct adopt_proc *p);

static int server_adopt_one(void *arg, const struct adopt_proc *p)
{
	struct server *srv = arg;
	pthread_mutex_lock(&srv->adopt_lock);
	int rc = server_adopt_locked(srv, p);
	pthread_mutex_unlock(&srv->adopt_lock);
	return rc;
}

static int server_adopt_locked(struct server *srv, const struct adopt_proc *p)
{
	struct session *s = session_find_live(srv->reg, p->pid, 0, p->memfd);
	if (s) { /* it called back already */
		session_put(s);
		return -EEXIST;
	}
	/* The start time adopt.c read while the pidfd pinned the process, and proved. */
	uint64_t start = p->start;
	if (!ident_pidfd_alive(p->pidfd))
		return -ESRCH;
	/* Started after this daemon (same clock tick included): no earlier daemon can have
	 * served it, and it connects to our socket on its own. Taking it back would race
	 * its own HELLO, or an exec that replaces the memfd the scan found. */
	if (srv->self_start && start >= srv->self_start)
		return -EEXIST;
	struct llgo_ctl ctl;
	if (pread(p->memfd, &ctl, sizeof(ctl), 0) != (ssize_t)sizeof(ctl))
		return -EIO;
	uint32_t ds = ctl.ring_data_size;
	if (ds < LLGO_RING_MIN_DATA || ds > LLGO_RING_MAX_DATA || (ds & (ds - 1)))
		return -EINVAL;
	s = session_new(srv->reg, p->pid, p->uid, p->gid, NULL, ds);
	if (!s)
		return -ENOMEM;
	s->pidfd = fcntl(p->pidfd, F_DUPFD_CLOEXEC, 3);
	s->proc_start = start; /* read under the pidfd: a later HELLO of it finds this session */
	/* a process taken back counts against its uid's budget as one that said HELLO */
	int err = session_take_slot(s);
	if (err) {
		log_warn("pid %d: not taken back: over its uid's budget of profiled processes",
			 (int)p->pid);
		session_put(s);
		return err;
	}
	err = session_attach_memfd(s, p->memfd, true);
	if (err) {
		session_put(s);
		return err;
	}
	if (session_attach_maps(s) != 0)
		log_warn("pid %d: cannot read its mappings; its profiles will show addresses only",
			 (int)p->pid);
	drain_prepare_unwind(s);
	if (p->livefd >= 0 && inuse_map(s, p->livefd) != 0)
		log_warn("pid %d: its live-object table could not be mapped; in-use values are "
			 "missing", (int)p->pid);
	/* The rate the process wants (it keeps it while it counts samples without a daemon),
	 * then tell the shim a daemon has it: it reconnects at its next sample. */
	int64_t want = atomic_load_explicit(&s->ctl->want_rate_word, memory_order_relaxed);
	if (want == LLGO_RATE_WORD_EVERY || (want > 1 && (uint64_t)want <= LLGO_RATE_MAX))
		atomic_store_explicit(&s->ctl->rate_word, want, memory_order_relaxed);
	/* The scan duplicated this memfd a while ago: if the process has said HELLO since
	 * with another one (it exec'd: the new image's shim made its own), the memfd is an
	 * earlier image's and that HELLO's session is the process. Checked and registered
	 * under the HELLO path's lock, so one of the two wins, never both. */
	pthread_mutex_lock(&srv->hello_lock);
	struct session *newer = session_find_process(srv->reg, p->pid, start);
	if (newer) {
		pthread_mutex_unlock(&srv->hello_lock);
		session_put(newer);
		log_debug("pid %d: not taken back: it attached again with another memfd",
			  (int)p->pid);
		session_put(s);
		return -EEXIST;
	}
	atomic_fetch_add_explicit(&s->ctl->adopt_gen, 1, memory_order_release);
	session_register(s);
	pthread_mutex_unlock(&srv->hello_lock);
	atomic_fetch_add(&srv->n_sessions, 1);
	close(p->memfd); /* the session keeps its own */
	conn_watch_exit(srv, s, p->pidfd); /* watches a duplicate */
	close(p->pidfd);
	log_info("pid %d (%s): taken back (its rings, rate %llu)", (int)p->pid, s->comm,
		 (unsigned long long)session_rate(s));
	session_put(s); /* the registry and the watch hold theirs */
	drain_wake(srv->drain);
	return 0;
}

/* The path processes connect to: ours, or the one systemd bound for us. */
static void server_own_path(struct server *srv, char *out, size_t n)
{
	out[0] = '\0';
	if (srv->socket_path && srv->own_socket) {
		snprintf(out, n, "%s", srv->socket_path);
		return;
	}
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(srv->listen_fd, (struct sockaddr *)&sa, &len) == 0 &&
	    sa.sun_family == AF_UNIX && sa.sun_path[0])
		snprintf(out, n, "%.*s", (int)sizeof(sa.sun_path), sa.sun_path);
	else if (srv->socket_path)
		snprintf(out, n, "%s", srv->socket_path);
}

int server_start(struct server *srv)
{
	atomic_store(&srv->adopting, true); /* before any worker can run a HELLO */
	/* The key HELLO vouches with and a restart's search checks, before any worker runs. */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	server_own_path(srv, path, sizeof(path));
	char keywhy[512];
	if (vouch_key_load(&srv->vouch, path, keywhy, sizeof(keywhy)) != 0)
		log_warn("processes will not be taken back after a restart (%s): they attach "
			 "again when they next sample", keywhy);
	/* listen() again after a daemonizing fork: it records the caller's credentials, so
	 * clients' SO_PEERCRED names the daemon rather than the parent that bound it. */
	if (srv->own_socket && listen(srv->listen_fd, 256) < 0)
		return -errno;
	/* the peak thread first: the drain wakes it */
	int err = peak_thread_start(srv->peak);
	if (!err) {
		err = drain_start(srv->drain);
		if (err)
			peak_thread_stop(srv->peak);
	}
	if (!err && srv->opts.verify_every) {
		char why[512];
		if (verifier_load(srv->verifier, why, sizeof(why)) == 0)
			log_info("--verify-every %u: checking one sample in %u with eBPF",
				 srv->opts.verify_every, srv->opts.verify_every);
		else
			log_warn("--verify-every: %s; profiling without it", why);
	}
	if (!err)
		err = workq_start(&srv->shimq, "heapd-shim");
	if (!err)
		err = workq_start(&srv->exitq, "heapd-exit");
	if (!err)
		err = workq_start(&srv->clientq, "heapd-client");
	if (!err) {
		err = -pthread_create(&srv->loop, NULL, server_loop, srv);
		srv->loop_started = err == 0;
		if (srv->loop_started)
			pthread_setname_np(srv->loop, "heapd-loop");
	}
	if (err) {
		server_stop(srv);
		return err;
	}
	/* A restart: processes of this socket that a previous daemon served. */
	if (ident_start_time(getpid(), &srv->self_start) != 0)
		srv->self_start = 0;
	size_t n = adopt_scan(path, &srv->vouch, server_adopt_one, srv);
	pthread_mutex_lock(&srv->adopt_lock); /* a HELLO that saw adopting set is done */
	atomic_store(&srv->adopting, false);
	pthread_mutex_unlock(&srv->adopt_lock);
	if (n)
		log_info("took back %zu profiled process%s of %s", n, n == 1 ? "" : "es", path);
	return 0;
}

/* Remove the socket at path only if it is still the one we bound (dev, ino: a newer daemon
 * may have replaced it). */
static void server_unlink_ours(const char *path, dev_t dev, ino_t ino)
{
	struct stat st;
	if (path && lstat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino)
		unlink(path);
}

/*
 * Stopping waits for the workers to finish what they are doing, but not for long: one in the
 * middle of a huge answer (a snapshot of millions of buckets takes seconds, more under a
 * sanitizer) would hold up `systemctl stop` and a restart. If server_stop has not finished
 * SERVER_STOP_GRACE_MS after it began, the process ends without the workers. Nothing of ours
 * outlives it but the socket, removed first; the profiled processes keep their rings for the
 * next daemon. The watchdog owns a copy of what it needs (the server may be freed meanwhile).
 */
#define SERVER_STOP_GRACE_MS 3000

struct server_watchdog {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done; /* server_stop finished: do nothing */
	int refs;  /* the watchdog's and server_stop's */
	char *path;
	dev_t dev;
	ino_t ino;
};

static void server_watchdog_put(struct server_watchdog *w)
{
	pthread_mutex_lock(&w->lock);
	bool last = --w->refs == 0;
	pthread_mutex_unlock(&w->lock);
	if (last) {
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->lock);
		free(w->path);
		free(w);
	}
}

static void *server_watchdog_main(void *arg)
{
	struct server_watchdog *w = arg;
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += SERVER_STOP_GRACE_MS / 1000;
	pthread_mutex_lock(&w->lock);
	while (!w->done && pthread_cond_timedwait(&w->cond, &w->lock, &dl) != ETIMEDOUT)
		;
	if (!w->done) {
		server_unlink_ours(w->path, w->dev, w->ino);
		log_warn("stopping: workers still busy after %d ms (a long answer); exiting "
			 "without them", SERVER_STOP_GRACE_MS);
		_exit(0);
	}
	pthread_mutex_unlock(&w->lock);
	server_watchdog_put(w);
	return NULL;
}

static struct server_watchdog *server_watchdog_start(struct server *srv)
{
	struct server_watchdog *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	w->refs = 2;
	if (srv->own_socket && srv->socket_path) {
		w->path = strdup(srv->socket_path);
		w->dev = srv->sock_dev;
		w->ino = srv->sock_ino;
	}
	pthread_t t;
	pthread_attr_t attr;
	int err = pthread_attr_init(&attr);
	if (!err) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		err = pthread_create(&t, &attr, server_watchdog_main, w);
		pthread_attr_destroy(&attr);
	}
	if (err) {
		w->refs = 1;
		server_watchdog_put(w);
		return NULL;
	}
	return w;
}

static void server_watchdog_done(struct server_watchdog *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	server_watchdog_put(w);
}

void server_stop(struct server *srv)
{
	if (!srv || atomic_exchange(&srv->stopping, true))
		return;
	struct server_watchdog *watchdog = server_watchdog_start(srv);
	if (srv->wake_fd >= 0) {
		uint64_t one = 1;
		if (write(srv->wake_fd, &one, sizeof(one)) < 0)
			log_error("eventfd: %s", strerror(errno));
	}
	if (srv->loop_started)
		pthread_join(srv->loop, NULL);
	srv->loop_started = false;
	/* Unblock workers waiting on a peer: their sends fail at once. */
	pthread_mutex_lock(&srv->conns_lock);
	for (struct conn *c = srv->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&srv->conns_lock);
	verifier_cancel(srv->verifier); /* a verify in progress ends its window now */
	workq_stop(&srv->shimq);
	workq_stop(&srv->exitq);
	workq_stop(&srv->clientq);
	if (srv->drain)
		drain_stop(srv->drain);
	peak_thread_stop(srv->peak);
	/* no thread asks a symbolizer now; one stopped (SIGSTOP) would never see us go */
	symhelper_stop_all();
	/* What is left is owned by nobody now (idle, between packets). */
	for (;;) {
		pthread_mutex_lock(&srv->conns_lock);
		struct conn *c = srv->conns;
		pthread_mutex_unlock(&srv->conns_lock);
		if (!c)
			break;
		conn_close(c);
	}
	if (srv->listen_fd >= 0) {
		close(srv->listen_fd);
		srv->listen_fd = -1;
	}
	if (srv->own_socket && srv->socket_path)
		server_unlink_ours(srv->socket_path, srv->sock_dev, srv->sock_ino);
	srv->own_socket = false;
	server_watchdog_done(watchdog);
}

void server_free(struct server *srv)
{
	if (!srv)
		return;
	server_stop(srv);
	if (srv->epfd >= 0)
		close(srv->epfd);
	if (srv->wake_fd >= 0)
		close(srv->wake_fd);
	if (srv->spare_fd >= 0)
		close(srv->spare_fd);
	drain_free(srv->drain);
	peak_thread_free(srv->peak);
	verifier_free(srv->verifier);
	session_registry_free(srv->reg);
	budget_free(srv->budget);
	workq_destroy(&srv->shimq);
	workq_destroy(&srv->exitq);
	workq_destroy(&srv->clientq);
	pthread_mutex_destroy(&srv->conns_lock);
	pthread_mutex_destroy(&srv->adopt_lock);
	pthread_mutex_destroy(&srv->hello_lock);
	pthread_rwlock_destroy(&srv->opts_lock);
	free(srv->rxbuf);
	free(srv->socket_path);
	free(srv);
}

void server_get_stats(struct server *srv, struct server_stats *out)
{
	out->connections = atomic_load(&srv->n_connections);
	out->malformed = atomic_load(&srv->n_malformed);
	out->refused = atomic_load(&srv->n_refused);
	out->sessions = atomic_load(&srv->n_sessions);
	out->evicted = srv->reg ? session_registry_evicted(srv->reg) : 0;
}

struct session_registry *server_sessions(struct server *srv)
{
	return srv->reg;
}

/* ---- reload (SIGHUP in daemon.c) ------------------------------------------------------- */

void server_reconfigure(struct server *srv, const struct server_opts *o)
{
	struct budget_limits bl;
	if (o->budget)
		bl = *o->budget;
	else
		budget_defaults(&bl);
	budget_set_limits(srv->budget, &bl);
	session_registry_set_keep(srv->reg, o->keep_exited,
				  o->keep_exited_per_uid ? o->keep_exited_per_uid
							 : SESSION_DEFAULT_KEEP_EXITED_PER_UID,
				  o->keep_exited_age_s ? o->keep_exited_age_s
						       : SESSION_DEFAULT_KEEP_EXITED_AGE_S,
				  o->max_buckets, o->max_bytes);
	session_registry_expire(srv->reg);
	if (o->verify_every && o->verify_every != srv->opts.verify_every) {
		char why[512];
		if (verifier_load(srv->verifier, why, sizeof(why)) == 0)
			log_info("--verify-every %u: checking one sample in %u of processes that "
				 "attach from now on", o->verify_every, o->verify_every);
		else
			log_warn("--verify-every: %s; profiling without it", why);
	}
	/* Once the write lock is held no snapshot uses the old trim list: the caller may free
	 * it when this returns. */
	pthread_rwlock_wrlock(&srv->opts_lock);
	srv->opts.trim = o->trim;
	srv->opts.ntrim = o->ntrim;
	srv->opts.verify_every = o->verify_every;
	pthread_rwlock_unlock(&srv->opts_lock);
}
