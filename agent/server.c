// SPDX-License-Identifier: MIT
/*
 * server.c: llgo-heapd's socket. It listens (on --socket PATH, or on the socket systemd
 * passes), accepts shims and clients, identifies each peer with SO_PEERCRED, validates every
 * packet (shared/proto.h) and answers. What the packets act on is left to session.c (HELLO,
 * ADD_RING, SET_RATE), drain.c (BYE, exit, snapshots drain first) and profile.c (output).
 *
 * Threads:
 *   - one event loop (epoll) accepts and reads packets. Every connection is registered with
 *     EPOLLONESHOT, so at most one thread handles a connection at a time: the loop reads one
 *     packet and either handles it at once (ADD_RING: an mmap) or hands the connection to a
 *     worker, which re-arms it when done (or closes it). The loop never waits on a session's
 *     drain lock, a client or the disk.
 *   - shim workers (SERVER_SHIM_WORKERS) run HELLO (map the control page, read the maps: the
 *     shim waits for the ACK before main), and nothing else, so attaching never waits;
 *   - exit workers (SERVER_EXIT_WORKERS) run BYE and the final drain at EOF, which may take
 *     a while for a process that exits with full rings;
 *   - client workers (opts.client_workers) run SNAPSHOT and SET_RATE, so a slow snapshot
 *     delays neither the loop, nor attaching processes, nor (up to the pool size) other
 *     clients. LIST is cheap (short locks, never a drain lock) and answered by the loop.
 *   - the drain thread (drain.c).
 *
 * Answers (to clients, and END to a shim's BYE) are built in memory and sent without
 * blocking: what the socket does not take at once stays with the connection, which is armed
 * for EPOLLOUT, and the event loop sends the rest as the peer reads. So a client that asks
 * for a huge snapshot and never reads holds memory (bounded: SERVER_MAX_OUT_BYTES over all
 * connections), not a worker. A connection whose answer makes no progress for
 * SERVER_SEND_TIMEOUT_S is closed by the loop.
 *
 * Identity and limits: every connection's peer is pinned at accept (ident.c: pidfd, start
 * time) and re-checked before HELLO reads anything of it; one session per process (a HELLO
 * with the memfd of a live session joins it, another replaces it); a session ends when its
 * process does (its pidfd is watched). Connections, sessions, rings and unread answers are
 * charged to the peer's uid (budget.c); a uid other than root runs at most half the client
 * workers; a connection silent for SERVER_FIRST_PACKET_MS after accept is shut down.
 *
 * A packet that breaks the protocol (bad header or length, wrong order, a descriptor where
 * none belongs or none where one must be, a ring or control page that fails its checks) drops
 * its connection, is counted and logged in one line. A dropped shim connection ends its
 * session as EOF does: final drain, session EXITED.
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
#include <time.h>
#include <unistd.h>

#include "budget.h"
#include "ident.h"
#include "listen.h"
#include "session.h"
#include "verify.h"

#define SERVER_SHIM_WORKERS 2u
#define SERVER_EXIT_WORKERS 2u
#define SERVER_CLIENT_WORKERS 4u
#define SERVER_MAX_WORKERS 64u
#define SERVER_SEND_TIMEOUT_S 5
#define SERVER_EXIT_WAIT_MS 2000u
#define SERVER_SETTLE_MS 200u
#define SERVER_MAX_CONNS 65536u
#define SERVER_JOB_EXIT 0xffffu /* not a message type: the peer is gone */
#define SERVER_MAX_OUT_BYTES (512ull << 20) /* unsent answers, all connections together */
#define SERVER_OUT_SCAN_MS 250
/* A connection that sends nothing this long after accept is shut down (shims send HELLO and
 * clients their request at once): idle connections cannot pile up. */
#define SERVER_FIRST_PACKET_MS 10000
#define SERVER_IDLE_SCAN_MS 1000

enum server_conn_kind {
	SERVER_CONN_NEW,
	SERVER_CONN_SHIM,
	SERVER_CONN_PIDFD, /* a process taken back after a restart: readable when it exits */
	SERVER_CONN_CLIENT,
};

struct server_conn {
	struct server *srv;
	int fd;
	enum server_conn_kind kind;
	struct ucred cred;
	struct ident id;         /* the peer pinned at accept (ident.c); pidfd -1 if none */
	bool holds_conn;         /* charged to its uid's connection budget (budget.c) */
	/* The loop's: accept time, and whether a packet came (else the idle scan shuts it). */
	int64_t accepted_ms;
	bool seen_packet;
	struct session *session; /* shim connections, after HELLO */
	struct server_conn *prev, *next; /* srv->conns, under conns_lock */
	/* The job a worker runs next (one at most: EPOLLONESHOT). */
	struct server_conn *job_next;
	uint16_t job;
	int job_fd;
	unsigned char req[128];
	/* The answer being sent: DATA packets of at most out_chunk payload bytes from out, then
	 * end. Owned by whoever owns the connection (a worker, or the loop once armed for
	 * EPOLLOUT). out_waiting, out_deadline_ms and out_counted change under conns_lock. */
	struct buf out;
	size_t out_off, out_chunk;
	struct llgo_msg_end end;
	bool out_end;          /* end not sent yet */
	bool out_waiting;      /* armed for EPOLLOUT: the rest goes out from the loop */
	uint64_t out_counted;  /* bytes counted in srv->out_bytes */
	int64_t out_deadline_ms;
};

struct server_workq {
	struct server *srv;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct server_conn *head, *tail;
	pthread_t *threads;
	unsigned nthreads, started;
	bool stop;
	bool inited;
	/* Client workers: a uid other than root runs at most per_uid_max jobs at once, so one
	 * user's slow requests (snapshots of a dead pid, huge profiles) never hold every
	 * worker; running[] has the uid of each job in progress (nthreads slots). 0: no limit. */
	unsigned per_uid_max;
	uid_t *running;
	bool *running_used;
};

struct server {
	/* trim and verify_every change at a reload (server_reconfigure): read under opts_lock */
	struct server_opts opts;
	pthread_rwlock_t opts_lock;
	char *socket_path;
	int listen_fd;
	bool own_socket; /* we bound it: unlink at stop if it is still ours */
	dev_t sock_dev;
	ino_t sock_ino;
	int spare_fd; /* closed to accept-and-drop when out of descriptors */
	int epfd;
	int wake_fd;
	struct session_registry *reg;
	struct budget *budget; /* per-uid and global limits (budget.c) */
	struct drain *drain;
	struct verifier *verifier; /* verify.c: llgo-heap verify, --verify-every */
	pthread_t loop;
	bool loop_started;
	_Atomic bool stopping;
	struct server_workq shimq, exitq, clientq;
	pthread_mutex_t conns_lock;
	/* While the start-up search for processes to take back runs (adopting), a memfd HELLO
	 * and an adoption each find-or-register under adopt_lock: one session per memfd. */
	pthread_mutex_t adopt_lock;
	_Atomic bool adopting;
	struct server_conn *conns;
	size_t nconns, max_conns;
	unsigned char *rxbuf; /* the loop's packet buffer */
	/* Set by the loop from before it reads a packet until it has handled it; with an empty
	 * socket buffer, 0 here means every packet sent so far has been handled (see
	 * server_settle). Sequentially consistent on both sides. */
	_Atomic int loop_busy;
	_Atomic unsigned hellos_pending; /* HELLO jobs queued or running */
	/* Serializes "find this process's session, replace it, register the new one" across
	 * shim workers, so that concurrent HELLOs of one process never leave two sessions. */
	pthread_mutex_t hello_lock;
	_Atomic uint64_t n_connections, n_malformed, n_refused, n_sessions;
	_Atomic uint64_t out_bytes;   /* unsent answer bytes, all connections */
	_Atomic uint32_t out_waiting; /* connections armed for EPOLLOUT */
	int64_t next_out_scan_ms;     /* the loop's */
	int64_t next_idle_scan_ms;    /* the loop's */
	_Atomic uint32_t unseen;      /* accepted connections that sent no packet yet */
};

/* ---- connections ------------------------------------------------------------------------ */

static void server_conn_close(struct server_conn *c)
{
	struct server *srv = c->srv;
	pthread_mutex_lock(&srv->conns_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv->nconns--;
	/* closed under the lock: server_stop shuts descriptors down under it too */
	epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	if (c->out_waiting)
		atomic_fetch_sub(&srv->out_waiting, 1);
	if (c->out_counted) {
		atomic_fetch_sub(&srv->out_bytes, c->out_counted);
		budget_give(srv->budget, c->cred.uid, BUDGET_OUT_BYTES, c->out_counted);
	}
	pthread_mutex_unlock(&srv->conns_lock);
	if (c->job_fd >= 0)
		close(c->job_fd);
	ident_close(&c->id);
	if (!c->seen_packet && c->kind != SERVER_CONN_PIDFD)
		atomic_fetch_sub(&srv->unseen, 1); /* closed before its first packet */
	if (c->holds_conn)
		budget_give(srv->budget, c->cred.uid, BUDGET_CONNS, 1);
	buf_free(&c->out);
	session_put(c->session);
	free(c);
}

/* Hand the connection back to the event loop. Under conns_lock, like the close in
 * server_conn_close: whoever gets the next event may close the descriptor, and the lock makes
 * that ordering explicit (ThreadSanitizer does not model epoll's MOD -> wait ordering). */
static void server_conn_rearm(struct server_conn *c)
{
	struct server *srv = c->srv;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
	pthread_mutex_lock(&srv->conns_lock);
	bool ok = !atomic_load(&srv->stopping) &&
		  epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0;
	pthread_mutex_unlock(&srv->conns_lock);
	if (!ok)
		server_conn_close(c);
}

/* ---- answers ------------------------------------------------------------------------------ */

static void server_conn_end(struct server_conn *c);

/* Send as much of c's answer as the socket takes now, never blocking. Returns 0 when all of it
 * is sent, 1 when the socket is full (the rest waits), -errno when the peer is gone.
 * *progress tells whether a packet went out. */
static int server_out_flush(struct server_conn *c, bool *progress)
{
	*progress = false;
	while (c->out_off < c->out.len || c->out_end) {
		struct llgo_msg_header h;
		struct iovec iov[2];
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 1 };
		size_t n = 0, want = sizeof(c->end);
		if (c->out_off < c->out.len) {
			n = c->out.len - c->out_off;
			if (n > c->out_chunk)
				n = c->out_chunk;
			want = sizeof(h) + n;
			msg_header_init(&h, LLGO_MSG_DATA, (uint32_t)want);
			iov[0] = (struct iovec){ .iov_base = &h, .iov_len = sizeof(h) };
			iov[1] = (struct iovec){ .iov_base = c->out.data + c->out_off, .iov_len = n };
			mh.msg_iovlen = 2;
		} else {
			iov[0] = (struct iovec){ .iov_base = &c->end, .iov_len = sizeof(c->end) };
		}
		ssize_t r = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 1;
			return -errno;
		}
		if ((size_t)r != want)
			return -EMSGSIZE;
		*progress = true;
		if (n)
			c->out_off += n;
		else
			c->out_end = false;
	}
	return 0;
}

/* Start answering c: payload (taken over and emptied; may be NULL), then END with status and
 * message; chunk is the most payload bytes per DATA packet (0: as many as fit). Sends what
 * the socket takes now; returns as server_out_flush. */
static int server_answer(struct server_conn *c, struct buf *payload, size_t chunk, int status,
			 const char *message)
{
	buf_free(&c->out);
	if (payload) {
		c->out = *payload;
		buf_init(payload);
	}
	c->out_off = 0;
	const size_t max = LLGO_MSG_MAX - sizeof(struct llgo_msg_header);
	c->out_chunk = chunk && chunk < max ? chunk : max;
	memset(&c->end, 0, sizeof(c->end));
	msg_header_init(&c->end.h, LLGO_MSG_END, sizeof(c->end));
	c->end.status = status;
	if (message)
		snprintf(c->end.message, sizeof(c->end.message), "%s", message);
	c->out_end = true;
	bool progress;
	return server_out_flush(c, &progress);
}

/* The answer is out: forget it, listen for the next request. */
static void server_out_done(struct server_conn *c)
{
	struct server *srv = c->srv;
	pthread_mutex_lock(&srv->conns_lock);
	if (c->out_waiting)
		atomic_fetch_sub(&srv->out_waiting, 1);
	if (c->out_counted) {
		atomic_fetch_sub(&srv->out_bytes, c->out_counted);
		budget_give(srv->budget, c->cred.uid, BUDGET_OUT_BYTES, c->out_counted);
	}
	c->out_waiting = false;
	c->out_counted = 0;
	pthread_mutex_unlock(&srv->conns_lock);
	buf_free(&c->out);
	server_conn_rearm(c);
}

static int64_t server_now_ms(void)
{
	return (int64_t)(session_now_ns(CLOCK_MONOTONIC) / 1000000u);
}

/* The socket is full: hand c to the event loop, armed for EPOLLOUT, until the peer reads the
 * rest or SERVER_SEND_TIMEOUT_S pass without progress. */
static void server_out_wait(struct server_conn *c, bool progress)
{
	struct server *srv = c->srv;
	uint64_t left = c->out.len - c->out_off + (c->out_end ? sizeof(c->end) : 0);
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLONESHOT, .data.ptr = c };
	pthread_mutex_lock(&srv->conns_lock);
	bool first = !c->out_waiting;
	/* a user's unread answers count against its budget first: one user's non-reading
	 * clients never take the room everyone's answers share */
	bool over_uid = first && budget_take(srv->budget, c->cred.uid, BUDGET_OUT_BYTES, left);
	if (first && (over_uid ||
		      atomic_fetch_add(&srv->out_bytes, left) + left > SERVER_MAX_OUT_BYTES)) {
		if (!over_uid) {
			atomic_fetch_sub(&srv->out_bytes, left);
			budget_give(srv->budget, c->cred.uid, BUDGET_OUT_BYTES, left);
		}
		pthread_mutex_unlock(&srv->conns_lock);
		log_warn("pid %d uid %u: answer dropped, %llu bytes of answers are unread "
			 "already", (int)c->cred.pid, (unsigned)c->cred.uid,
			 (unsigned long long)atomic_load(&srv->out_bytes));
		server_conn_end(c);
		return;
	}
	uint32_t waiting = 0;
	if (first) {
		c->out_counted = left;
		c->out_waiting = true;
		waiting = atomic_fetch_add(&srv->out_waiting, 1) + 1;
	}
	if (first || progress)
		c->out_deadline_ms = server_now_ms() + SERVER_SEND_TIMEOUT_S * 1000;
	bool ok = !atomic_load(&srv->stopping) &&
		  epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0;
	pthread_mutex_unlock(&srv->conns_lock);
	if (!ok) {
		server_conn_end(c);
		return;
	}
	/* The loop sleeps without a timeout while nothing waits: make it watch the clock. */
	if (waiting == 1) {
		uint64_t one = 1;
		if (write(srv->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			log_error("eventfd: %s", strerror(errno));
	}
}

/* Once an answer was started (rc as server_out_flush): listen again, wait, or close. */
static void server_answered(struct server_conn *c, int rc)
{
	if (rc == 0) {
		server_out_done(c);
	} else if (rc == 1) {
		server_out_wait(c, true);
	} else {
		/* the peer went away (a shim's session still gets its final drain) */
		if (rc != -EPIPE && rc != -ECONNRESET)
			log_warn("answer to pid %d uid %u: %s", (int)c->cred.pid,
				 (unsigned)c->cred.uid, strerror(-rc));
		server_conn_end(c);
	}
}

/* The loop: a connection armed for EPOLLOUT has room, or an error. */
static void server_out_event(struct server_conn *c)
{
	bool progress;
	int rc = server_out_flush(c, &progress);
	if (rc == 1)
		server_out_wait(c, progress);
	else
		server_answered(c, rc);
}

/* The loop, between two batches of events (so no connection found here is in anybody's
 * hands: each waits in epoll): close those whose answer made no progress for
 * SERVER_SEND_TIMEOUT_S. */
static void server_out_expire(struct server *srv)
{
	int64_t now = server_now_ms();
	if (now < srv->next_out_scan_ms)
		return;
	srv->next_out_scan_ms = now + SERVER_OUT_SCAN_MS;
	struct server_conn *expired = NULL;
	pthread_mutex_lock(&srv->conns_lock);
	for (struct server_conn *c = srv->conns; c; c = c->next) {
		if (c->out_waiting && c->out_deadline_ms <= now) {
			/* out of epoll and of later scans: a worker may own it next */
			epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
			c->out_waiting = false;
			atomic_fetch_sub(&srv->out_waiting, 1);
			c->job_next = expired;
			expired = c;
		}
	}
	pthread_mutex_unlock(&srv->conns_lock);
	while (expired) {
		struct server_conn *n = expired->job_next;
		log_warn("pid %d uid %u stopped reading its answer: connection dropped",
			 (int)expired->cred.pid, (unsigned)expired->cred.uid);
		server_conn_end(expired);
		expired = n;
	}
}

/* Shut down connections that sent nothing within SERVER_FIRST_PACKET_MS of accept; their EOF
 * then closes them the usual way. Only the loop reads or writes seen_packet. */
static void server_idle_expire(struct server *srv)
{
	int64_t now = server_now_ms();
	if (now < srv->next_idle_scan_ms)
		return;
	srv->next_idle_scan_ms = now + SERVER_IDLE_SCAN_MS;
	pthread_mutex_lock(&srv->conns_lock);
	for (struct server_conn *c = srv->conns; c; c = c->next) {
		/* seen_packet first: kind may be written by a worker once a packet came */
		if (c->seen_packet || c->kind == SERVER_CONN_PIDFD ||
		    now - c->accepted_ms < SERVER_FIRST_PACKET_MS)
			continue;
		c->seen_packet = true;
		atomic_fetch_sub(&srv->unseen, 1);
		shutdown(c->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&srv->conns_lock);
}

static void server_workq_push(struct server_workq *q, struct server_conn *c, uint16_t job)
{
	c->job = job;
	c->job_next = NULL;
	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		pthread_mutex_unlock(&q->lock);
		server_conn_close(c);
		return;
	}
	if (q->tail)
		q->tail->job_next = c;
	else
		q->head = c;
	q->tail = c;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

/* The peer is gone or broke the protocol: a shim's session gets its final drain (on a shim
 * worker: it takes the drain lock), anything else is closed at once. */
static void server_conn_end(struct server_conn *c)
{
	if ((c->kind == SERVER_CONN_SHIM || c->kind == SERVER_CONN_PIDFD) && c->session)
		server_workq_push(&c->srv->exitq, c, SERVER_JOB_EXIT);
	else
		server_conn_close(c);
}

static void server_malformed(struct server_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void server_malformed(struct server_conn *c, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&c->srv->n_malformed, 1);
	log_warn("dropping connection from pid %d uid %u: %s", (int)c->cred.pid,
		 (unsigned)c->cred.uid, why);
	server_conn_end(c);
}

static void server_accept(struct server *srv)
{
	for (;;) {
		int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if ((errno == EMFILE || errno == ENFILE) && srv->spare_fd >= 0) {
				/* Out of descriptors: accept with the spare and drop, or the
				 * pending connection would wake us forever. */
				close(srv->spare_fd);
				fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
				if (fd >= 0)
					close(fd);
				srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
				atomic_fetch_add(&srv->n_refused, 1);
				log_error("out of file descriptors: connection refused");
				continue;
			}
			if (errno != EAGAIN)
				log_error("accept: %s", strerror(errno));
			return;
		}
		struct server_conn *c = calloc(1, sizeof(*c));
		socklen_t l = sizeof(struct ucred);
		if (!c || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &l) < 0) {
			free(c);
			close(fd);
			continue;
		}
		/* One user's idle connections must not lock everyone else out. */
		if (budget_take(srv->budget, c->cred.uid, BUDGET_CONNS, 1) != 0) {
			atomic_fetch_add(&srv->n_refused, 1);
			free(c);
			close(fd);
			continue;
		}
		c->holds_conn = true;
		pthread_mutex_lock(&srv->conns_lock);
		if (srv->nconns >= srv->max_conns) {
			pthread_mutex_unlock(&srv->conns_lock);
			atomic_fetch_add(&srv->n_refused, 1);
			log_warn("too many connections (%zu): refusing pid %d", srv->max_conns,
				 (int)c->cred.pid);
			budget_give(srv->budget, c->cred.uid, BUDGET_CONNS, 1);
			free(c);
			close(fd);
			continue;
		}
		c->srv = srv;
		c->fd = fd;
		c->job_fd = -1;
		c->accepted_ms = server_now_ms();
		atomic_fetch_add(&srv->unseen, 1);
		/* Pin the peer now: HELLO re-checks the live process against this. */
		ident_open(fd, c->cred.pid, c->cred.uid, c->cred.gid, &c->id);
		buf_init(&c->out);
		c->next = srv->conns;
		if (srv->conns)
			srv->conns->prev = c;
		srv->conns = c;
		srv->nconns++;
		pthread_mutex_unlock(&srv->conns_lock);
		atomic_fetch_add(&srv->n_connections, 1);
		/* Answers block at most this long on a peer that does not read. */
		struct timeval tv = { .tv_sec = SERVER_SEND_TIMEOUT_S };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			server_conn_close(c);
	}
}

/* ---- packets (event loop) --------------------------------------------------------------- */

static void server_add_ring(struct server_conn *c, const unsigned char *pkt, int fd)
{
	struct llgo_msg_add_ring m;
	memcpy(&m, pkt, sizeof(m));
	int err = session_add_ring(c->session, m.ring_id, fd, m.data_size);
	if (fd >= 0)
		close(fd);
	/* Over its uid's ring budget: that ring is not read. Ended already (its process exited,
	 * or was found gone at HELLO): a ring announced before that is moot. Neither is a
	 * protocol error. */
	if (err == -EDQUOT || err == -ESRCH) {
		server_conn_rearm(c);
		return;
	}
	if (err) {
		server_malformed(c, "ADD_RING %u (%u bytes): %s", m.ring_id, m.data_size,
				 strerror(-err));
		return;
	}
	drain_wake(c->srv->drain);
	server_conn_rearm(c);
}

static void server_add_live(struct server_conn *c, int fd)
{
	int err = inuse_map(c->session, fd);
	close(fd);
	if (err) {
		server_malformed(c, "ADD_LIVE: %s", strerror(-err));
		return;
	}
	server_conn_rearm(c);
}

static int server_list(struct server *srv, struct server_conn *c);
static bool server_hello_in_flight(struct server *srv, pid_t pid);

static void server_conn_event(struct server *srv, struct server_conn *c)
{
	if (c->kind == SERVER_CONN_PIDFD) { /* the process exited */
		server_conn_end(c);
		return;
	}
	int fd = -1;
	ssize_t r = msg_recv(c->fd, srv->rxbuf, LLGO_MSG_MAX, &fd);
	if (r != -EAGAIN && !c->seen_packet) {
		c->seen_packet = true;
		atomic_fetch_sub(&srv->unseen, 1);
	}
	if (r == -EAGAIN) {
		server_conn_rearm(c);
		return;
	}
	if (r == -EMSGSIZE) {
		server_malformed(c, "packet larger than %u bytes", LLGO_MSG_MAX);
		return;
	}
	if (r <= 0) { /* EOF, or the peer reset the connection */
		if (fd >= 0)
			close(fd);
		server_conn_end(c);
		return;
	}
	struct llgo_msg_header h;
	int err = msg_header_check(srv->rxbuf, (size_t)r, &h);
	if (err) {
		if (fd >= 0)
			close(fd);
		server_malformed(c, "bad header (%zd bytes): %s", r, strerror(-err));
		return;
	}
	size_t want = 0;
	bool needs_fd = false;
	bool shim_msg = false;
	switch (h.type) {
	case LLGO_MSG_HELLO:
		want = sizeof(struct llgo_msg_hello);
		needs_fd = shim_msg = true;
		break;
	case LLGO_MSG_ADD_RING:
		want = sizeof(struct llgo_msg_add_ring);
		/* A ring of the process memfd is named by id; a ring of its own comes as a
		 * descriptor (a shim that sent a control page alone). */
		needs_fd = !(c->session && c->session->has_memfd);
		shim_msg = true;
		break;
	case LLGO_MSG_ADD_LIVE:
		want = sizeof(struct llgo_msg_header);
		needs_fd = shim_msg = true;
		break;
	case LLGO_MSG_BYE:
	case LLGO_MSG_WAKE:
		want = sizeof(struct llgo_msg_header);
		shim_msg = true;
		break;
	case LLGO_MSG_LIST:
		want = sizeof(struct llgo_msg_header);
		break;
	case LLGO_MSG_SNAPSHOT:
		want = sizeof(struct llgo_msg_snapshot);
		break;
	case LLGO_MSG_SET_RATE:
		want = sizeof(struct llgo_msg_set_rate);
		break;
	case LLGO_MSG_VERIFY:
		want = sizeof(struct llgo_msg_verify);
		break;
	default:
		if (fd >= 0)
			close(fd);
		server_malformed(c, "unknown message type %u", h.type);
		return;
	}
	const char *bad = NULL;
	if ((size_t)r != want)
		bad = "wrong length";
	else if (needs_fd && fd < 0)
		bad = "no descriptor attached";
	else if (!needs_fd && fd >= 0)
		bad = "unexpected descriptor";
	else if (h.type == LLGO_MSG_ADD_RING && c->kind != SERVER_CONN_SHIM)
		bad = "before HELLO";
	else if (h.type == LLGO_MSG_HELLO && c->kind != SERVER_CONN_NEW)
		bad = c->kind == SERVER_CONN_SHIM ? "second HELLO" : "HELLO from a client";
	else if (shim_msg && h.type != LLGO_MSG_HELLO && c->kind != SERVER_CONN_SHIM)
		bad = "before HELLO";
	else if (!shim_msg && c->kind == SERVER_CONN_SHIM)
		bad = "client request on a shim connection";
	if (bad) {
		if (fd >= 0)
			close(fd);
		server_malformed(c, "message type %u (%zd bytes): %s", h.type, r, bad);
		return;
	}

	switch (h.type) {
	case LLGO_MSG_ADD_RING:
		server_add_ring(c, srv->rxbuf, fd);
		return;
	case LLGO_MSG_ADD_LIVE:
		server_add_live(c, fd);
		return;
	case LLGO_MSG_WAKE:
		/* A producer is filling a ring faster than the idle poll: drain now. The
		 * drain reads the rings themselves, so a forged wake costs one pass. */
		drain_wake(srv->drain);
		server_conn_rearm(c);
		return;
	case LLGO_MSG_HELLO:
	case LLGO_MSG_BYE:
		memcpy(c->req, srv->rxbuf, (size_t)r);
		c->job_fd = fd;
		/* A process blocks in its constructor until HELLO is answered: never queue it
		 * behind the drains of exiting processes. */
		if (h.type == LLGO_MSG_HELLO)
			atomic_fetch_add(&srv->hellos_pending, 1);
		server_workq_push(h.type == LLGO_MSG_HELLO ? &srv->shimq : &srv->exitq, c, h.type);
		return;
	case LLGO_MSG_LIST:
		/* Cheap (short locks, never a drain lock) and answered without blocking: here,
		 * so that busy workers never delay it; unless a process's HELLO is still in
		 * flight, which a worker waits for first (a started process is listed). */
		c->kind = SERVER_CONN_CLIENT;
		atomic_store(&srv->loop_busy, 0);
		if (server_hello_in_flight(srv, 0)) {
			memcpy(c->req, srv->rxbuf, (size_t)r);
			server_workq_push(&srv->clientq, c, h.type);
			return;
		}
		server_answered(c, server_list(srv, c));
		return;
	default:
		c->kind = SERVER_CONN_CLIENT;
		memcpy(c->req, srv->rxbuf, (size_t)r);
		server_workq_push(&srv->clientq, c, h.type);
		return;
	}
}

static void *server_loop(void *arg)
{
	struct server *srv = arg;
	struct epoll_event ev[64];
	while (!atomic_load(&srv->stopping)) {
		int timeout = atomic_load(&srv->out_waiting) ? SERVER_OUT_SCAN_MS
			      : atomic_load(&srv->unseen) ? SERVER_IDLE_SCAN_MS
							  : -1;
		int n = epoll_wait(srv->epfd, ev, 64, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_error("epoll_wait: %s", strerror(errno));
			break;
		}
		for (int i = 0; i < n && !atomic_load(&srv->stopping); i++) {
			void *p = ev[i].data.ptr;
			if (p == &srv->listen_fd) {
				server_accept(srv);
			} else if (p == &srv->wake_fd) {
				uint64_t v;
				if (read(srv->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_error("eventfd: %s", strerror(errno));
			} else {
				/* Whoever armed c did so under conns_lock, after its last write
				 * to c: taking the lock here makes those writes visible in a way
				 * ThreadSanitizer sees too (it does not model EPOLL_CTL_MOD ->
				 * epoll_wait). */
				struct server_conn *c = p;
				pthread_mutex_lock(&srv->conns_lock);
				bool out = c->out_waiting;
				pthread_mutex_unlock(&srv->conns_lock);
				if (out) {
					server_out_event(c);
					continue;
				}
				atomic_store(&srv->loop_busy, 1);
				server_conn_event(srv, c);
				atomic_store(&srv->loop_busy, 0);
			}
		}
		if (atomic_load(&srv->out_waiting))
			server_out_expire(srv);
		if (atomic_load(&srv->unseen))
			server_idle_expire(srv);
	}
	return NULL;
}

/* ---- shim jobs (workers) ------------------------------------------------------------------ */

/* Watch s's process for its exit (a conn of kind PIDFD over a duplicate of pidfd): the
 * session ends when the process does, whoever still holds its socket (a child that kept it
 * cannot keep a session of a dead pid alive, which a reused pid would then be shown as). */
static void server_watch_exit(struct server *srv, struct session *s, int pidfd)
{
	int fd = pidfd >= 0 ? fcntl(pidfd, F_DUPFD_CLOEXEC, 3) : -1;
	struct server_conn *c = fd >= 0 ? calloc(1, sizeof(*c)) : NULL;
	if (!c) {
		if (fd >= 0)
			close(fd);
		return;
	}
	c->srv = srv;
	c->fd = fd;
	c->kind = SERVER_CONN_PIDFD;
	c->session = session_get(s);
	c->job_fd = -1;
	c->id.pidfd = -1;
	c->cred.pid = s->pid;
	c->cred.uid = s->uid;
	c->cred.gid = s->gid;
	buf_init(&c->out);
	pthread_mutex_lock(&srv->conns_lock);
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	srv->nconns++;
	pthread_mutex_unlock(&srv->conns_lock);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		server_conn_end(c);
}

static void server_hello(struct server *srv, struct server_conn *c)
{
	struct llgo_msg_hello m;
	memcpy(&m, c->req, sizeof(m));
	m.comm[LLGO_COMM_LEN - 1] = '\0';
	int fd = c->job_fd;
	c->job_fd = -1;
	int err = 0;
	const char *why = NULL;
	char whybuf[256] = "";
	struct session *s = NULL;
	uint32_t ds = m.ring_data_size;
	bool memfd = m.flags & LLGO_HELLO_MEMFD, ack = !(m.flags & LLGO_HELLO_NO_ACK);
	bool reattach = m.flags & LLGO_HELLO_REATTACH;
	/* Before anything of the process is read: is it still the one that connected, owned
	 * by the same uid? A process that exited since (a short-lived fork child) keeps its
	 * session, but nothing more is read of it. */
	int ierr = ident_verify(&c->id, whybuf, sizeof(whybuf));
	bool gone = ierr == -ESRCH;
	bool locked = memfd && atomic_load(&srv->adopting);
	if (locked)
		pthread_mutex_lock(&srv->adopt_lock);
	if (c->cred.pid <= 0) {
		err = -ESRCH;
		why = "peer pid unknown (another pid namespace?)";
	} else if (ierr && !gone) {
		err = ierr;
		why = whybuf;
	} else if (ds < LLGO_RING_MIN_DATA || ds > LLGO_RING_MAX_DATA || (ds & (ds - 1))) {
		err = -EINVAL;
		why = "ring data size";
	} else if (memfd && (s = session_find_live(srv->reg, c->cred.pid, c->id.start, fd)) != NULL) {
		/* The process calls back with the memfd its session holds (a reconnect, or a
		 * process this daemon took back on its own, server_adopt_one): the connection
		 * joins that session. One session per process, never two. */
		close(fd);
		if (!s->unwind_mode) /* a session found by adopt.c learns it here */
			__atomic_store_n(&s->unwind_mode,
					 (uint32_t)((m.flags & LLGO_HELLO_UNWIND_MASK) >>
						    LLGO_HELLO_UNWIND_SHIFT),
					 __ATOMIC_RELAXED); /* the drain thread reads it meanwhile */
		if (locked)
			pthread_mutex_unlock(&srv->adopt_lock);
		c->session = s;
		c->kind = SERVER_CONN_SHIM;
		log_debug("pid %d: reconnected to its session", (int)s->pid);
		drain_wake(srv->drain);
		server_conn_rearm(c);
		return;
	} else if (!(s = session_new(srv->reg, c->cred.pid, c->cred.uid, c->cred.gid, m.comm,
				     ds))) {
		err = -ENOMEM;
		why = "session";
	} else if ((err = session_take_slot(s)) != 0) {
		why = "over its uid's budget of profiled processes";
	} else if ((err = memfd ? session_attach_memfd(s, fd, reattach)
				: session_attach_ctl(s, fd)) != 0) {
		why = memfd ? "process memfd" : "control page";
	} else {
		s->unwind_mode =
			(uint32_t)((m.flags & LLGO_HELLO_UNWIND_MASK) >> LLGO_HELLO_UNWIND_SHIFT);
	}
	close(fd);

	struct llgo_msg_hello_ack a;
	memset(&a, 0, sizeof(a));
	msg_header_init(&a.h, LLGO_MSG_HELLO_ACK, sizeof(a));
	if (err) {
		if (locked)
			pthread_mutex_unlock(&srv->adopt_lock);
		session_put(s);
		a.status = -err;
		if (ack)
			msg_send(c->fd, &a, sizeof(a), -1);
		server_malformed(c, "HELLO refused: %s: %s", why, strerror(-err));
		return;
	}
	/* The identity pinned at accept, not what /proc shows now. */
	s->proc_start = c->id.start;
	if (c->id.pidfd >= 0)
		s->pidfd = fcntl(c->id.pidfd, F_DUPFD_CLOEXEC, 3);
	/* Read while the process runs: a shim that waits for no answer may exit soon, and then
	 * waits at exit (BYE) only if we have not seen what we need. */
	int merr = gone ? -ESRCH : session_attach_maps(s);
	if (merr && (m.flags & LLGO_HELLO_FORKED) &&
	    session_attach_parent_maps(s, (pid_t)m.ppid) == 0)
		merr = 0;
	if (merr)
		log_warn("pid %d: cannot read its mappings (%s); its profiles will show "
			 "addresses only", (int)s->pid, strerror(-merr));
	/* auto unwinding's tables, before the session drains (its unwinder reads them) */
	drain_prepare_unwind(s);
	/* our maps are read: the shim's exit need not wait for us (lifecycle.c) */
	if (!merr && s->ctl)
		atomic_fetch_add_explicit(&s->ctl->daemon_beat, 1, memory_order_relaxed);
	/* One session per process (pid and start time): a second HELLO with another memfd
	 * replaces the first, which ends as if the process had closed it. */
	pthread_mutex_lock(&srv->hello_lock);
	struct session *old = c->id.start ? session_find_process(srv->reg, s->pid, c->id.start)
					  : NULL;
	if (old) {
		log_info("pid %d: a new HELLO replaces its session", (int)s->pid);
		verify_session_stop(srv->verifier, old);
		drain_session_exit(old);
		session_put(old);
	}
	session_register(s);
	pthread_mutex_unlock(&srv->hello_lock);
	if (locked)
		pthread_mutex_unlock(&srv->adopt_lock);
	c->session = s;
	c->kind = SERVER_CONN_SHIM;
	atomic_fetch_add(&srv->n_sessions, 1);
	server_watch_exit(srv, s, s->pidfd);
	/* Gone before we got here: what its rings hold now is all it published (a socket kept
	 * by another process must not keep a session of a free pid live). */
	if (gone)
		drain_session_exit(s);
	if (reattach)
		log_info("pid %d: reattached (%s)", (int)s->pid, s->comm);
	if (ack && msg_send(c->fd, &a, sizeof(a), -1) != 0) {
		server_conn_end(c);
		return;
	}
	drain_wake(srv->drain);
	pthread_rwlock_rdlock(&srv->opts_lock);
	uint32_t verify_every = srv->opts.verify_every;
	pthread_rwlock_unlock(&srv->opts_lock);
	if (verify_every) /* after the ACK: the process need not wait for the attach */
		verify_session_start(srv->verifier, s, verify_every);
	server_conn_rearm(c);
}

static void server_bye(struct server *srv, struct server_conn *c)
{
	/* The process is about to exit: collect what it wrote and read the maps once more
	 * (libraries loaded late) while they still exist. */
	drain_session(c->session);
	drain_refresh_maps(c->session, true);
	int rc = server_answer(c, NULL, 0, 0, NULL);
	if (rc < 0) {
		server_conn_end(c);
		return;
	}
	server_answered(c, rc);
}

/* ---- client jobs (workers) ---------------------------------------------------------------- */

/* Root, or the owner of a process that kept its identity (ident.c): once it exec'd a setuid
 * program or was found not dumpable, what was read of it is root's to see only. */
static bool server_allowed(const struct session *s, uid_t requester)
{
	return requester == 0 || (requester == s->uid && !atomic_load(&s->ident_lost));
}

/*
 * Packets a shim sent before this request (an ADD_RING for a thread's first ring, the EOF of
 * an exited process) may still sit in its connection's buffer while a client's request is
 * already being served: sockets are not ordered with each other. Wait, briefly, until the
 * loop has read and handled everything s's connections hold, so that a snapshot includes
 * every record published before it was asked for.
 */
void server_settle(struct server *srv, struct session *s)
{
	for (unsigned i = 0; i < SERVER_SETTLE_MS * 4; i++) {
		bool pending = false;
		pthread_mutex_lock(&srv->conns_lock);
		for (struct server_conn *c = srv->conns; c && !pending; c = c->next) {
			if (c->session != s)
				continue;
			char b;
			/* >= 0: a packet or the EOF is waiting for the loop */
			pending = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
		}
		pthread_mutex_unlock(&srv->conns_lock);
		if (!pending && !atomic_load(&srv->loop_busy))
			return;
		struct timespec ts = { 0, 250 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* Everything s published before now, as a profile: settle its connection, drain, then copy
 * the buckets and the accounting under the drain lock (so they describe the same records).
 * Shared by SNAPSHOT and the HTTP endpoints (which subtract two for delta profiles). */
int server_collect(struct server *srv, struct session *s, struct profile *p)
{
	memset(p, 0, sizeof(*p));
	server_settle(srv, s);
	/* The process is gone but its EOF not handled yet (packets may still be queued on its
	 * connection): wait for the final drain rather than miss its last rings. */
	if (session_is_live(s) && !session_process_alive(s))
		session_wait_exited(s, SERVER_EXIT_WAIT_MS);
	drain_session(s);
	drain_refresh_maps(s, false);

	struct session_counts cnt;
	pthread_mutex_lock(&s->drain_lock);
	int rc = profile_collect(p, s->buckets);
	session_account_locked(s, &cnt);
	p->meta.sampled = cnt.sampled;
	if (!rc)
		rc = inuse_apply_locked(s, p);
	bool mixed = s->mixed_rates;
	uint64_t last_rate = s->last_rate;
	p->meta.unwound = s->unwound;
	p->meta.truncated = s->truncated;
	pthread_mutex_unlock(&s->drain_lock);
	if (!rc) {
		pthread_rwlock_rdlock(&srv->opts_lock);
		rc = profile_trim(p, s->maps, srv->opts.trim, srv->opts.ntrim);
		pthread_rwlock_unlock(&srv->opts_lock);
	}
	if (rc) {
		profile_release(p);
		return rc;
	}
	struct bucket_stats bs;
	bucket_table_stats(s->buckets, &bs);
	p->meta.pid = s->pid;
	memcpy(p->meta.comm, s->comm, sizeof(p->meta.comm));
	p->meta.time_nanos = session_now_ns(CLOCK_REALTIME);
	p->meta.rate = session_rate(s);
	/* Sampling is off now: state the rate the samples were taken at. */
	if (p->meta.rate == 0)
		p->meta.rate = last_rate ? last_rate : LLGO_RATE_DEFAULT;
	p->meta.mixed_rates = p->meta.mixed_rates || mixed;
	p->meta.sampled = cnt.sampled;
	p->meta.delivered = cnt.delivered;
	p->meta.dropped = cnt.dropped;
	p->meta.corrupt = cnt.corrupt;
	p->meta.dropped_prior = cnt.prior;
	p->meta.dropped_no_ring = cnt.no_ring;
	p->meta.dropped_detached = cnt.detached;
	p->meta.reconnects = cnt.reconnects;
	p->meta.cap_hits = bs.cap_hits;
	p->meta.verify_samples = atomic_load(&s->verify_samples);
	p->meta.verify_agree = atomic_load(&s->verify_agree);
	p->meta.unwind_mode = s->unwind_mode;
	return 0;
}

/*
 * The session of pid; when there is none yet, the process may have connected and sent HELLO
 * (which it does not wait for) without the loop or a shim worker having handled it: wait for
 * that, briefly, as server_settle does for the packets of a known session.
 */
/* A HELLO of pid (any pid when pid <= 0) sent but not handled yet: queued for or running in
 * a shim worker, or still in a new connection's socket. */
static bool server_hello_in_flight(struct server *srv, pid_t pid)
{
	if (atomic_load(&srv->hellos_pending) || atomic_load(&srv->loop_busy))
		return true;
	bool pending = false;
	pthread_mutex_lock(&srv->conns_lock);
	for (struct server_conn *c = srv->conns; c && !pending; c = c->next) {
		if ((pid > 0 && c->cred.pid != pid) || c->kind != SERVER_CONN_NEW)
			continue;
		char b;
		pending = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
	}
	pthread_mutex_unlock(&srv->conns_lock);
	return pending;
}

/* Wait (at most SERVER_SETTLE_MS) until no HELLO of pid is in flight. */
static void server_settle_hellos(struct server *srv, pid_t pid)
{
	for (unsigned i = 0; i < SERVER_SETTLE_MS * 4 && server_hello_in_flight(srv, pid); i++) {
		struct timespec ts = { 0, 250 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/*
 * The session of pid; when there is none yet, the process may have connected and sent HELLO
 * (which it does not wait for) without the loop or a shim worker having handled it: wait for
 * that, briefly, as server_settle does for the packets of a known session.
 */
struct session *server_lookup(struct server *srv, pid_t pid)
{
	struct session *s = session_lookup(srv->reg, pid);
	if (s)
		return s;
	server_settle_hellos(srv, pid);
	return session_lookup(srv->reg, pid);
}

int server_snapshot(struct server *srv, pid_t pid, uid_t requester, int fmt, uint32_t flags,
		    uint32_t top_n, struct buf *out, char *err, size_t errlen)
{
	if (fmt < LLGO_FORMAT_PPROF || fmt > LLGO_FORMAT_SITES) {
		snprintf(err, errlen, "unknown format %d", fmt);
		return -EINVAL;
	}
	struct session *s = server_lookup(srv, pid);
	if (!s) {
		snprintf(err, errlen, "no such profiled process: %d", (int)pid);
		return -ESRCH;
	}
	if (!server_allowed(s, requester)) {
		snprintf(err, errlen, "permission denied: pid %d belongs to uid %u", (int)pid,
			 (unsigned)s->uid);
		session_put(s);
		return -EACCES;
	}
	struct profile p;
	int rc = server_collect(srv, s, &p);
	if (rc) {
		snprintf(err, errlen, "collecting the profile: %s", strerror(-rc));
		session_put(s);
		return rc;
	}
	rc = profile_write(out, &p, s->maps, fmt, flags, top_n);
	profile_release(&p);
	session_put(s);
	if (!rc && out->failed)
		rc = -ENOMEM;
	if (rc)
		snprintf(err, errlen, "writing the profile: %s", strerror(-rc));
	return rc;
}

static int server_list(struct server *srv, struct server_conn *c)
{
	struct session **v;
	session_registry_expire(srv->reg);
	size_t n = session_list(srv->reg, false, &v);
	/* DATA packets carry whole rows */
	const size_t per = (LLGO_MSG_MAX - sizeof(struct llgo_msg_header)) /
			   sizeof(struct llgo_list_entry);
	struct buf rows;
	buf_init(&rows);
	for (size_t i = 0; i < n; i++) {
		/* Other users' processes (pid, uid, command) are root's to see only. */
		if (c->cred.uid != 0 && v[i]->uid != c->cred.uid)
			continue;
		struct llgo_list_entry e;
		session_list_entry(v[i], &e);
		buf_append(&rows, &e, sizeof(e));
	}
	session_list_release(v, n);
	if (rows.failed) {
		buf_free(&rows);
		return server_answer(c, NULL, 0, ENOMEM, "out of memory");
	}
	return server_answer(c, &rows, per * sizeof(struct llgo_list_entry), 0, NULL);
}

static int server_set_rate(struct server *srv, struct server_conn *c)
{
	struct llgo_msg_set_rate m;
	memcpy(&m, c->req, sizeof(m));
	char msg[LLGO_END_MSG_LEN];
	pid_t pid = (pid_t)m.pid;
	if (m.rate > LLGO_RATE_MAX) {
		snprintf(msg, sizeof(msg), "rate %llu out of range (0..%llu)",
			 (unsigned long long)m.rate, (unsigned long long)LLGO_RATE_MAX);
		return server_answer(c, NULL, 0, EINVAL, msg);
	}
	struct session *s = server_lookup(srv, pid);
	if (!s) {
		snprintf(msg, sizeof(msg), "no such profiled process: %u", m.pid);
		return server_answer(c, NULL, 0, ESRCH, msg);
	}
	if (!server_allowed(s, c->cred.uid)) {
		snprintf(msg, sizeof(msg), "permission denied: pid %u belongs to uid %u", m.pid,
			 (unsigned)s->uid);
		session_put(s);
		return server_answer(c, NULL, 0, EACCES, msg);
	}
	uint64_t old_rate, new_rate;
	int err = session_set_rate(s, m.rate, &old_rate, &new_rate);
	session_put(s);
	if (err) {
		snprintf(msg, sizeof(msg), "no such profiled process: %u (it has exited)", m.pid);
		return server_answer(c, NULL, 0, ESRCH, msg);
	}
	snprintf(msg, sizeof(msg), "pid %u: rate %llu -> %llu", m.pid,
		 (unsigned long long)old_rate, (unsigned long long)new_rate);
	log_info("uid %u: %s", (unsigned)c->cred.uid, msg);
	return server_answer(c, NULL, 0, 0, msg);
}

static int server_snapshot_req(struct server *srv, struct server_conn *c)
{
	struct llgo_msg_snapshot m;
	memcpy(&m, c->req, sizeof(m));
	struct buf out;
	buf_init(&out);
	char msg[LLGO_END_MSG_LEN] = "";
	int rc = server_snapshot(srv, (pid_t)m.pid, c->cred.uid, (int)m.format, m.flags, m.top_n,
				 &out, msg, sizeof(msg));
	if (rc)
		rc = server_answer(c, NULL, 0, -rc, msg);
	else
		rc = server_answer(c, &out, 0, 0, NULL);
	buf_free(&out);
	return rc;
}

/* llgo-heap verify PID: runs for the requested seconds on this client worker. */
static int server_verify_req(struct server *srv, struct server_conn *c)
{
	struct llgo_msg_verify m;
	memcpy(&m, c->req, sizeof(m));
	char msg[LLGO_END_MSG_LEN] = "";
	if (m.seconds < 1 || m.seconds > LLGO_VERIFY_MAX_SECONDS) {
		snprintf(msg, sizeof(msg), "seconds %u out of range (1..%u)", m.seconds,
			 LLGO_VERIFY_MAX_SECONDS);
		return server_answer(c, NULL, 0, EINVAL, msg);
	}
	struct session *s = session_lookup(srv->reg, (pid_t)m.pid);
	if (!s || !session_is_live(s)) {
		session_put(s);
		snprintf(msg, sizeof(msg), "no such profiled process: %u", m.pid);
		return server_answer(c, NULL, 0, ESRCH, msg);
	}
	if (!server_allowed(s, c->cred.uid)) {
		snprintf(msg, sizeof(msg), "permission denied: pid %u belongs to uid %u", m.pid,
			 (unsigned)s->uid);
		session_put(s);
		return server_answer(c, NULL, 0, EACCES, msg);
	}
	struct llgo_verify_summary sum;
	struct buf text, out;
	buf_init(&text);
	buf_init(&out);
	int rc = verify_run(srv->verifier, srv, s, m.seconds, &sum, &text, msg, sizeof(msg));
	session_put(s);
	if (!rc) {
		buf_append(&out, &sum, sizeof(sum));
		buf_append(&out, text.data, text.len);
		if (out.failed)
			rc = -ENOMEM;
	}
	buf_free(&text);
	if (rc) {
		buf_free(&out);
		if (!msg[0])
			snprintf(msg, sizeof(msg), "verify: %s", strerror(-rc));
		return server_answer(c, NULL, 0, -rc, msg);
	}
	rc = server_answer(c, &out, 0, 0, NULL);
	buf_free(&out);
	return rc;
}

static void server_job(struct server *srv, struct server_conn *c)
{
	int err = 0;
	switch (c->job) {
	case LLGO_MSG_HELLO:
		server_hello(srv, c);
		atomic_fetch_sub(&srv->hellos_pending, 1);
		return;
	case LLGO_MSG_BYE:
		server_bye(srv, c);
		return;
	case SERVER_JOB_EXIT:
		/* The process exited (its pidfd). A session of a control page alone learns of its
		 * rings by ADD_RING: let the loop first read what its shim sent. A memfd session
		 * finds every ring in the control page, and must not hold an exit worker (BYE
		 * waits for those) while the shim's EOF waits in the queue behind this job. */
		if (c->kind == SERVER_CONN_PIDFD) {
			pthread_mutex_lock(&c->session->lock);
			bool ctl_only = c->session->ctl && c->session->memfd < 0;
			pthread_mutex_unlock(&c->session->lock);
			if (ctl_only)
				server_settle(srv, c->session);
		}
		drain_session_exit(c->session);
		verify_session_stop(srv->verifier, c->session);
		server_conn_close(c);
		return;
	case LLGO_MSG_LIST:
		server_settle_hellos(srv, 0);
		err = server_list(srv, c);
		break;
	case LLGO_MSG_SNAPSHOT:
		err = server_snapshot_req(srv, c);
		break;
	case LLGO_MSG_SET_RATE:
		err = server_set_rate(srv, c);
		break;
	case LLGO_MSG_VERIFY:
		err = server_verify_req(srv, c);
		break;
	}
	server_answered(c, err);
}

static void *server_worker(void *arg)
{
	struct server_workq *q = arg;
	for (;;) {
		pthread_mutex_lock(&q->lock);
		while (!q->stop && !q->head)
			pthread_cond_wait(&q->cond, &q->lock);
		if (q->stop) {
			pthread_mutex_unlock(&q->lock);
			return NULL;
		}
		struct server_conn *c = q->head, *prev = NULL;
		if (q->per_uid_max) {
			/* the first job whose uid is under its share of the workers */
			for (; c; prev = c, c = c->job_next) {
				uid_t u = c->cred.uid;
				unsigned n = 0;
				for (unsigned i = 0; i < q->nthreads; i++)
					n += q->running_used[i] && q->running[i] == u;
				if (u == 0 || n < q->per_uid_max)
					break;
			}
			if (!c) { /* every queued job's uid has its share running: wait */
				pthread_cond_wait(&q->cond, &q->lock);
				pthread_mutex_unlock(&q->lock);
				continue;
			}
		}
		if (prev)
			prev->job_next = c->job_next;
		else
			q->head = c->job_next;
		if (q->tail == c)
			q->tail = prev;
		unsigned slot = 0;
		if (q->per_uid_max) {
			while (q->running_used[slot])
				slot++;
			q->running_used[slot] = true;
			q->running[slot] = c->cred.uid;
		}
		pthread_mutex_unlock(&q->lock);
		server_job(q->srv, c);
		if (q->per_uid_max) {
			pthread_mutex_lock(&q->lock);
			q->running_used[slot] = false;
			pthread_cond_broadcast(&q->cond);
			pthread_mutex_unlock(&q->lock);
		}
	}
}

static int server_workq_init(struct server_workq *q, struct server *srv, unsigned n)
{
	memset(q, 0, sizeof(*q));
	q->srv = srv;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->threads = calloc(n, sizeof(*q->threads));
	q->running = calloc(n, sizeof(*q->running));
	q->running_used = calloc(n, sizeof(*q->running_used));
	q->nthreads = n;
	q->inited = true;
	return q->threads && q->running && q->running_used ? 0 : -ENOMEM;
}

static int server_workq_start(struct server_workq *q)
{
	for (; q->started < q->nthreads; q->started++) {
		int err = pthread_create(&q->threads[q->started], NULL, server_worker, q);
		if (err)
			return -err;
	}
	return 0;
}

/* Stop the workers after their current job; queued jobs are dropped with their conns. */
static void server_workq_stop(struct server_workq *q)
{
	if (!q->inited)
		return;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	for (unsigned i = 0; i < q->started; i++)
		pthread_join(q->threads[i], NULL);
	q->started = 0;
	pthread_mutex_lock(&q->lock);
	struct server_conn *c = q->head;
	q->head = q->tail = NULL;
	pthread_mutex_unlock(&q->lock);
	while (c) {
		struct server_conn *n = c->job_next;
		server_conn_close(c);
		c = n;
	}
}

static void server_workq_destroy(struct server_workq *q)
{
	if (!q->inited)
		return;
	q->inited = false;
	free(q->threads);
	q->threads = NULL;
	free(q->running);
	free(q->running_used);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

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
	srv->verifier = verifier_new();
	if (!srv->rxbuf || !srv->reg || !srv->budget || !srv->drain || !srv->verifier || (o->socket_path && !srv->socket_path) ||
	    server_workq_init(&srv->shimq, srv, SERVER_SHIM_WORKERS) ||
	    server_workq_init(&srv->exitq, srv, SERVER_EXIT_WORKERS) ||
	    server_workq_init(&srv->clientq, srv, nclient)) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	srv->clientq.per_uid_max = nclient > 1 ? nclient / 2 : 1;
	struct rlimit rl;
	srv->max_conns = SERVER_MAX_CONNS;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < SERVER_MAX_CONNS + 64)
		srv->max_conns = rl.rlim_cur > 128 ? (size_t)rl.rlim_cur - 64 : 64;

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
	int err = session_attach_memfd(s, p->memfd, true);
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
	atomic_fetch_add_explicit(&s->ctl->adopt_gen, 1, memory_order_release);
	session_register(s);
	atomic_fetch_add(&srv->n_sessions, 1);
	close(p->memfd); /* the session keeps its own */
	server_watch_exit(srv, s, p->pidfd); /* watches a duplicate */
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
	/* listen() again after a daemonizing fork: it records the caller's credentials, so
	 * clients' SO_PEERCRED names the daemon rather than the parent that bound it. */
	if (srv->own_socket && listen(srv->listen_fd, 256) < 0)
		return -errno;
	int err = drain_start(srv->drain);
	if (!err && srv->opts.verify_every) {
		char why[512];
		if (verifier_load(srv->verifier, why, sizeof(why)) == 0)
			log_info("--verify-every %u: checking one sample in %u with eBPF",
				 srv->opts.verify_every, srv->opts.verify_every);
		else
			log_warn("--verify-every: %s; profiling without it", why);
	}
	if (!err)
		err = server_workq_start(&srv->shimq);
	if (!err)
		err = server_workq_start(&srv->exitq);
	if (!err)
		err = server_workq_start(&srv->clientq);
	if (!err) {
		err = -pthread_create(&srv->loop, NULL, server_loop, srv);
		srv->loop_started = err == 0;
	}
	if (err) {
		server_stop(srv);
		return err;
	}
	/* A restart: processes of this socket that a previous daemon served. */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	server_own_path(srv, path, sizeof(path));
	size_t n = adopt_scan(path, server_adopt_one, srv);
	pthread_mutex_lock(&srv->adopt_lock); /* a HELLO that saw adopting set is done */
	atomic_store(&srv->adopting, false);
	pthread_mutex_unlock(&srv->adopt_lock);
	if (n)
		log_info("took back %zu profiled process%s of %s", n, n == 1 ? "" : "es", path);
	return 0;
}

void server_stop(struct server *srv)
{
	if (!srv || atomic_exchange(&srv->stopping, true))
		return;
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
	for (struct server_conn *c = srv->conns; c; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_unlock(&srv->conns_lock);
	verifier_cancel(srv->verifier); /* a verify in progress ends its window now */
	server_workq_stop(&srv->shimq);
	server_workq_stop(&srv->exitq);
	server_workq_stop(&srv->clientq);
	if (srv->drain)
		drain_stop(srv->drain);
	/* What is left is owned by nobody now (idle, between packets). */
	for (;;) {
		pthread_mutex_lock(&srv->conns_lock);
		struct server_conn *c = srv->conns;
		pthread_mutex_unlock(&srv->conns_lock);
		if (!c)
			break;
		server_conn_close(c);
	}
	if (srv->listen_fd >= 0) {
		close(srv->listen_fd);
		srv->listen_fd = -1;
	}
	/* Remove the socket only if it is still the one we bound (a newer daemon may have
	 * replaced it). */
	struct stat st;
	if (srv->own_socket && srv->socket_path && lstat(srv->socket_path, &st) == 0 &&
	    st.st_dev == srv->sock_dev && st.st_ino == srv->sock_ino)
		unlink(srv->socket_path);
	srv->own_socket = false;
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
	verifier_free(srv->verifier);
	session_registry_free(srv->reg);
	budget_free(srv->budget);
	server_workq_destroy(&srv->shimq);
	server_workq_destroy(&srv->exitq);
	server_workq_destroy(&srv->clientq);
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
