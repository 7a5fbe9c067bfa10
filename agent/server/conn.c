// SPDX-License-Identifier: MIT
/*
 * conn.c: the socket server's connections. The loop accepts them (conn_accept): the peer is
 * identified with SO_PEERCRED and pinned (ident.c: pidfd, start time) at once, and each
 * connection is charged to its uid's budget (budget.c); a connection silent for
 * SERVER_FIRST_PACKET_MS after accept is shut down.
 *
 * Answers (to clients, and END to a shim's BYE) are built in memory and sent without
 * blocking: what the socket does not take at once stays with the connection, which is armed
 * for EPOLLOUT, and the event loop sends the rest as the peer reads. So a client that asks
 * for a huge snapshot and never reads holds memory (bounded: SERVER_MAX_OUT_BYTES over all
 * connections, and its uid's budget), not a worker. A connection whose answer makes no
 * progress for SERVER_SEND_TIMEOUT_S is closed by the loop.
 *
 * Left to others: reading and checking packets (packet.c), what they ask (jobs.c), the pools
 * (workq.c), the loop itself (server.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "budget.h"
#include "server_impl.h"

/* ---- connections ------------------------------------------------------------------------ */

void conn_close(struct conn *c)
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
	if (!c->seen_packet && c->kind != CONN_PIDFD)
		atomic_fetch_sub(&srv->unseen, 1); /* closed before its first packet */
	if (c->holds_conn)
		budget_give(srv->budget, c->cred.uid, BUDGET_CONNS, 1);
	buf_free(&c->out);
	session_put(c->session);
	free(c);
}

/* Hand the connection back to the event loop. Under conns_lock, like the close in
 * conn_close: whoever gets the next event may close the descriptor, and the lock makes
 * that ordering explicit (ThreadSanitizer does not model epoll's MOD -> wait ordering). */
void conn_rearm(struct conn *c)
{
	struct server *srv = c->srv;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
	pthread_mutex_lock(&srv->conns_lock);
	bool ok = !atomic_load(&srv->stopping) &&
		  epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0;
	pthread_mutex_unlock(&srv->conns_lock);
	if (!ok)
		conn_close(c);
}

/* ---- answers ------------------------------------------------------------------------------ */

/* Send as much of c's answer as the socket takes now, never blocking. Returns 0 when all of it
 * is sent, 1 when the socket is full (the rest waits), -errno when the peer is gone.
 * *progress tells whether a packet went out. */
static int conn_out_flush(struct conn *c, bool *progress)
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
 * the socket takes now; returns as conn_out_flush. */
int conn_answer(struct conn *c, struct buf *payload, size_t chunk, int status,
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
	return conn_out_flush(c, &progress);
}

/* The answer is out: forget it, listen for the next request. */
static void conn_out_done(struct conn *c)
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
	conn_rearm(c);
}

int64_t conn_now_ms(void)
{
	return (int64_t)(session_now_ns(CLOCK_MONOTONIC) / 1000000u);
}

/* The socket is full: hand c to the event loop, armed for EPOLLOUT, until the peer reads the
 * rest or SERVER_SEND_TIMEOUT_S pass without progress. */
static void conn_out_wait(struct conn *c, bool progress)
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
		conn_end(c);
		return;
	}
	uint32_t waiting = 0;
	if (first) {
		c->out_counted = left;
		c->out_waiting = true;
		waiting = atomic_fetch_add(&srv->out_waiting, 1) + 1;
	}
	if (first || progress)
		c->out_deadline_ms = conn_now_ms() + SERVER_SEND_TIMEOUT_S * 1000;
	bool ok = !atomic_load(&srv->stopping) &&
		  epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0;
	pthread_mutex_unlock(&srv->conns_lock);
	if (!ok) {
		conn_end(c);
		return;
	}
	/* The loop sleeps without a timeout while nothing waits: make it watch the clock. */
	if (waiting == 1) {
		uint64_t one = 1;
		if (write(srv->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			log_error("eventfd: %s", strerror(errno));
	}
}

/* Once an answer was started (rc as conn_out_flush): listen again, wait, or close. */
void conn_answered(struct conn *c, int rc)
{
	if (rc == 0) {
		conn_out_done(c);
	} else if (rc == 1) {
		conn_out_wait(c, true);
	} else {
		/* the peer went away (a shim's session still gets its final drain) */
		if (rc != -EPIPE && rc != -ECONNRESET)
			log_warn("answer to pid %d uid %u: %s", (int)c->cred.pid,
				 (unsigned)c->cred.uid, strerror(-rc));
		conn_end(c);
	}
}

/* The loop: a connection armed for EPOLLOUT has room, or an error. */
void conn_out_event(struct conn *c)
{
	bool progress;
	int rc = conn_out_flush(c, &progress);
	if (rc == 1)
		conn_out_wait(c, progress);
	else
		conn_answered(c, rc);
}

/* The loop, between two batches of events (so no connection found here is in anybody's
 * hands: each waits in epoll): close those whose answer made no progress for
 * SERVER_SEND_TIMEOUT_S. */
void conn_out_expire(struct server *srv)
{
	int64_t now = conn_now_ms();
	if (now < srv->next_out_scan_ms)
		return;
	srv->next_out_scan_ms = now + SERVER_OUT_SCAN_MS;
	struct conn *expired = NULL;
	pthread_mutex_lock(&srv->conns_lock);
	for (struct conn *c = srv->conns; c; c = c->next) {
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
		struct conn *n = expired->job_next;
		log_warn("pid %d uid %u stopped reading its answer: connection dropped",
			 (int)expired->cred.pid, (unsigned)expired->cred.uid);
		conn_end(expired);
		expired = n;
	}
}

/* Shut down connections that sent nothing within SERVER_FIRST_PACKET_MS of accept; their EOF
 * then closes them the usual way. Only the loop reads or writes seen_packet. */
void conn_idle_expire(struct server *srv)
{
	int64_t now = conn_now_ms();
	if (now < srv->next_idle_scan_ms)
		return;
	srv->next_idle_scan_ms = now + SERVER_IDLE_SCAN_MS;
	pthread_mutex_lock(&srv->conns_lock);
	for (struct conn *c = srv->conns; c; c = c->next) {
		/* seen_packet first: kind may be written by a worker once a packet came */
		if (c->seen_packet || c->kind == CONN_PIDFD ||
		    now - c->accepted_ms < SERVER_FIRST_PACKET_MS)
			continue;
		c->seen_packet = true;
		atomic_fetch_sub(&srv->unseen, 1);
		shutdown(c->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&srv->conns_lock);
}

/* The peer is gone or broke the protocol: a shim's session gets its final drain (on a shim
 * worker: it takes the drain lock), anything else is closed at once. */
void conn_end(struct conn *c)
{
	if ((c->kind == CONN_SHIM || c->kind == CONN_PIDFD) && c->session)
		workq_push(&c->srv->exitq, c, SERVER_JOB_EXIT);
	else
		conn_close(c);
}

void conn_malformed(struct conn *c, const char *fmt, ...)
{
	char why[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&c->srv->n_malformed, 1);
	log_warn("dropping connection from pid %d uid %u: %s", (int)c->cred.pid,
		 (unsigned)c->cred.uid, why);
	conn_end(c);
}

/* Put c at the head of srv->conns (caller holds conns_lock). */
static void conn_link_locked(struct server *srv, struct conn *c)
{
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	srv->nconns++;
}

/* Out of descriptors with no spare to accept-and-drop with: the listening socket leaves the
 * epoll set for SERVER_ACCEPT_PAUSE_MS (pending connections wait in the backlog), so that the
 * loop does not spin on it. */
static void conn_accept_pause(struct server *srv)
{
	if (srv->accept_paused_until)
		return;
	epoll_ctl(srv->epfd, EPOLL_CTL_DEL, srv->listen_fd, NULL);
	srv->accept_paused_until = session_now_ns(CLOCK_MONOTONIC) + SERVER_ACCEPT_PAUSE_MS * 1000000ull;
	log_error("out of file descriptors, no spare: not accepting for %u ms",
		  SERVER_ACCEPT_PAUSE_MS);
}

void conn_accept_resume(struct server *srv)
{
	if (!srv->accept_paused_until || session_now_ns(CLOCK_MONOTONIC) < srv->accept_paused_until)
		return;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &srv->listen_fd };
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->listen_fd, &ev) == 0)
		srv->accept_paused_until = 0;
	else
		srv->accept_paused_until = session_now_ns(CLOCK_MONOTONIC) + SERVER_ACCEPT_PAUSE_MS * 1000000ull;
}

void conn_accept(struct server *srv)
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
				/* accept fails with EMFILE before it looks for a connection: with
				 * the spare, a failure (EAGAIN) says none is pending, and looping
				 * on would spin */
				if (fd < 0)
					return;
				atomic_fetch_add(&srv->n_refused, 1);
				log_error("out of file descriptors: connection refused");
				continue;
			}
			if (errno == EMFILE || errno == ENFILE) {
				/* no spare: the last drop could not open it again */
				srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
				if (srv->spare_fd < 0)
					conn_accept_pause(srv);
				return;
			}
			if (errno != EAGAIN)
				log_error("accept: %s", strerror(errno));
			return;
		}
		struct conn *c = calloc(1, sizeof(*c));
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
		c->accepted_ms = conn_now_ms();
		c->serial = ++srv->conn_serial;
		atomic_fetch_add(&srv->unseen, 1);
		/* Pin the peer now: HELLO re-checks the live process against this. */
		ident_open(fd, c->cred.pid, c->cred.uid, c->cred.gid, &c->id);
		buf_init(&c->out);
		conn_link_locked(srv, c);
		pthread_mutex_unlock(&srv->conns_lock);
		atomic_fetch_add(&srv->n_connections, 1);
		/* Answers block at most this long on a peer that does not read. */
		struct timeval tv = { .tv_sec = SERVER_SEND_TIMEOUT_S };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			conn_close(c);
	}
}

/* Watch s's process for its exit (a conn of kind PIDFD over a duplicate of pidfd): the
 * session ends when the process does, whoever still holds its socket (a child that kept it
 * cannot keep a session of a dead pid alive, which a reused pid would then be shown as). */
void conn_watch_exit(struct server *srv, struct session *s, int pidfd)
{
	int fd = pidfd >= 0 ? fcntl(pidfd, F_DUPFD_CLOEXEC, 3) : -1;
	struct conn *c = fd >= 0 ? calloc(1, sizeof(*c)) : NULL;
	if (!c) {
		if (fd >= 0)
			close(fd);
		return;
	}
	c->srv = srv;
	c->fd = fd;
	c->kind = CONN_PIDFD;
	c->session = session_get(s);
	c->job_fd = -1;
	c->id.pidfd = -1;
	c->cred.pid = s->pid;
	c->cred.uid = s->uid;
	c->cred.gid = s->gid;
	buf_init(&c->out);
	pthread_mutex_lock(&srv->conns_lock);
	conn_link_locked(srv, c);
	pthread_mutex_unlock(&srv->conns_lock);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = c };
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		conn_end(c);
}
