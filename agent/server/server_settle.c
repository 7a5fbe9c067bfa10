// SPDX-License-Identifier: MIT
/*
 * server_settle.c: waiting, briefly, for the event loop to catch up with what a process
 * already sent: the packets of a session (server_settle: a snapshot or a verify must see
 * every record published before it was asked for) and a HELLO not yet handled
 * (server_lookup: `snapshot PID` right after the process started). The loop (server.c) and
 * the workers (jobs.c) read the same state: the connections' sockets, loop_busy and
 * hellos_pending. Its functions keep the server_ prefix of the API they belong to
 * (server.h, server_impl.h).
 *
 * Left to others: the loop that handles the packets (server.c, packet.c), the HELLO jobs
 * (jobs.c), the registry (session_registry.c).
 */
#include <sys/socket.h>
#include <time.h>

#include "server_impl.h"

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
		for (struct conn *c = srv->conns; c && !pending; c = c->next) {
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

/* A HELLO of pid (any pid when pid <= 0) sent but not handled yet: queued for or running in
 * a shim worker, or still in a new connection's socket. */
bool server_hello_in_flight(struct server *srv, pid_t pid)
{
	if (atomic_load(&srv->hellos_pending) || atomic_load(&srv->loop_busy))
		return true;
	bool pending = false;
	pthread_mutex_lock(&srv->conns_lock);
	for (struct conn *c = srv->conns; c && !pending; c = c->next) {
		if ((pid > 0 && c->cred.pid != pid) || c->kind != CONN_NEW)
			continue;
		/* a HELLO waiting to be read (or the start of one); another request, e.g. a
		 * snapshot on a client's new connection, is no process starting */
		struct llgo_msg_header h;
		ssize_t r = recv(c->fd, &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT);
		pending = r > 0 && ((size_t)r < sizeof(h) || h.type == LLGO_MSG_HELLO);
	}
	pthread_mutex_unlock(&srv->conns_lock);
	return pending;
}

/* Wait (at most SERVER_SETTLE_MS) until no HELLO of pid is in flight. */
void server_settle_hellos(struct server *srv, pid_t pid)
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
