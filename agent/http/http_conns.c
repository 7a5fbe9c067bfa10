// SPDX-License-Identifier: MIT
/*
 * http_conns.c: the connections of llgo-heapd's HTTP server, as libmicrohttpd reports them
 * (MHD_OPTION_NOTIFY_CONNECTION): who is at the other end, how many connections each peer
 * holds, and how long a request may take to arrive.
 *
 * Peers. A client on this host (loopback, or an address of ours, in the daemon's network
 * namespace) is known by the uid owning its socket: the kernel's socket diagnostics
 * (NETLINK_SOCK_DIAG, the exact lookup `ss` uses) find the socket whose local address and
 * port are the connection's remote ones and whose remote ones are ours, and give its uid,
 * taken only when that socket is connected, not orphaned, and its four-tuple is the one
 * asked (a listener that happens to own the client's port, or a time-wait socket, says
 * nothing). Every other client is known by its address alone. http.c serves a local client
 * its own processes when no --http-uids list or token says otherwise.
 *
 * Limits against slow clients (slowloris: a request trickled a byte at a time restarts
 * libmicrohttpd's idle timeout for good):
 *   - a request's headers must all arrive within HTTP_CONNS_HEADER_S of the accept (or of
 *     the previous answer on a kept-alive connection), its body within HTTP_CONNS_BODY_S of
 *     the headers; a sweep thread shuts down the connections that did not make it;
 *   - a peer (a local uid other than root, a remote address) holds at most
 *     HTTP_CONNS_PER_PEER connections;
 *   - when all HTTP_CONNS_MAX are taken, a new connection closes the oldest one still
 *     reading its request (none of them has shown a token yet, or been answered).
 * A connection is shut down (shutdown(2) on a descriptor of our own, a dup of libmicrohttpd's,
 * so the socket cannot be closed and reused under us); libmicrohttpd's thread then reads
 * the end of the stream and closes it as usual.
 *
 * Left to others: which requests need a token, and what each may see (http.c, http_auth.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_internal.h"

#define HTTP_CONNS_SWEEP_MS 200

struct http_conn {
	struct http_conn *prev, *next; /* h->conns, oldest first; unlinked once shut down */
	int fd;                        /* our dup of the socket */
	bool listed;
	bool reading;                  /* a request is arriving: deadline applies */
	uint64_t deadline_ns;          /* CLOCK_MONOTONIC */
	struct http_peer peer;
};

static uint64_t http_conns_now(void)
{
	return session_now_ns(CLOCK_MONOTONIC);
}

/* ---- the peer ---------------------------------------------------------------------------- */

static bool http_conns_connected_state(unsigned state)
{
	return state == TCP_ESTABLISHED || state == TCP_FIN_WAIT1 || state == TCP_FIN_WAIT2 ||
	       state == TCP_CLOSE_WAIT || state == TCP_CLOSING || state == TCP_LAST_ACK;
}

/* The uid owning the socket at the other end of fd, when that socket is on this host:
 * 0, or -ENOENT (not a local socket, or not one that can still read our answer), or an
 * error of the lookup. */
static int http_conns_local_uid(int fd, uid_t *uid)
{
	struct sockaddr_storage ours, theirs;
	socklen_t ol = sizeof(ours), tl = sizeof(theirs);
	if (getsockname(fd, (struct sockaddr *)&ours, &ol) != 0 ||
	    getpeername(fd, (struct sockaddr *)&theirs, &tl) != 0)
		return -errno;
	if (ours.ss_family != theirs.ss_family ||
	    (ours.ss_family != AF_INET && ours.ss_family != AF_INET6))
		return -ENOENT;
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 r;
	} req;
	memset(&req, 0, sizeof(req));
	req.nlh.nlmsg_len = sizeof(req);
	req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.nlh.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = (uint8_t)ours.ss_family;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	/* The client's socket: its source is their address, its destination ours (the kernel
	 * looks it up as the receiver of a packet from idiag_dst to idiag_src). */
	if (ours.ss_family == AF_INET) {
		const struct sockaddr_in *o = (const void *)&ours, *t = (const void *)&theirs;
		req.r.id.idiag_sport = t->sin_port;
		req.r.id.idiag_dport = o->sin_port;
		memcpy(req.r.id.idiag_src, &t->sin_addr, 4);
		memcpy(req.r.id.idiag_dst, &o->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *o = (const void *)&ours, *t = (const void *)&theirs;
		req.r.id.idiag_sport = t->sin6_port;
		req.r.id.idiag_dport = o->sin6_port;
		memcpy(req.r.id.idiag_src, &t->sin6_addr, 16);
		memcpy(req.r.id.idiag_dst, &o->sin6_addr, 16);
	}
	req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -errno;
	struct timeval tv = { .tv_sec = 1 };
	setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int rc = -ENOENT;
	if (sendto(nl, &req, sizeof(req), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		rc = -errno;
		goto out;
	}
	union {
		struct nlmsghdr h;
		char bytes[8192];
	} ans;
	ssize_t n = recv(nl, &ans, sizeof(ans), 0);
	if (n < 0) {
		rc = -errno;
		goto out;
	}
	for (struct nlmsghdr *h = &ans.h; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
		if (h->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = NLMSG_DATA(h);
			if (h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) && e->error)
				rc = e->error;
			break;
		}
		if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
		    h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
			continue;
		const struct inet_diag_msg *m = NLMSG_DATA(h);
		size_t alen = ours.ss_family == AF_INET ? 4 : 16;
		/* exactly the socket asked for, connected, and not orphaned (closed by its
		 * owner: inode 0, it reads nothing more) */
		if (m->idiag_family == ours.ss_family && m->id.idiag_sport == req.r.id.idiag_sport &&
		    m->id.idiag_dport == req.r.id.idiag_dport &&
		    memcmp(m->id.idiag_src, req.r.id.idiag_src, alen) == 0 &&
		    memcmp(m->id.idiag_dst, req.r.id.idiag_dst, alen) == 0 &&
		    http_conns_connected_state(m->idiag_state) && m->idiag_inode != 0) {
			*uid = m->idiag_uid;
			rc = 0;
		}
		break;
	}
out:
	close(nl);
	return rc;
}

static void http_conns_peer(int fd, struct http_peer *p)
{
	memset(p, 0, sizeof(*p));
	uid_t uid;
	int rc = http_conns_local_uid(fd, &uid);
	if (rc == 0) {
		p->local = true;
		p->uid = uid;
		return;
	}
	if (rc != -ENOENT)
		log_debug("http: the uid of a local client is unknown (socket diagnostics: %s)",
			  strerror(-rc));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
		return;
	if (ss.ss_family == AF_INET6) {
		memcpy(p->addr, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	} else if (ss.ss_family == AF_INET) {
		/* ::ffff:a.b.c.d */
		p->addr[10] = p->addr[11] = 0xff;
		memcpy(p->addr + 12, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	}
}

static bool http_conns_same_peer(const struct http_peer *a, const struct http_peer *b)
{
	if (a->local != b->local)
		return false;
	return a->local ? a->uid == b->uid : memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

/* ---- the list ------------------------------------------------------------------------------ */

/* Under h->conns_lock. */
static void http_conns_unlink(struct http_server *h, struct http_conn *k)
{
	if (!k->listed)
		return;
	if (k->prev)
		k->prev->next = k->next;
	else
		h->conns_head = k->next;
	if (k->next)
		k->next->prev = k->prev;
	else
		h->conns_tail = k->prev;
	k->prev = k->next = NULL;
	k->listed = false;
	h->nconns--;
}

/* Close k's connection (under h->conns_lock): libmicrohttpd's thread sees the end. */
static void http_conns_shut(struct http_server *h, struct http_conn *k, _Atomic uint64_t *why)
{
	http_conns_unlink(h, k);
	k->reading = false;
	shutdown(k->fd, SHUT_RDWR);
	atomic_fetch_add_explicit(why, 1, memory_order_relaxed);
}

static void http_conns_started(struct http_server *h, struct MHD_Connection *c, void **ctx)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
								     MHD_CONNECTION_INFO_CONNECTION_FD);
	struct http_conn *k = calloc(1, sizeof(*k));
	int fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
	if (!k || fd < 0) {
		/* without our handle on it, it cannot be watched: refuse it */
		if (ci)
			shutdown(ci->connect_fd, SHUT_RDWR);
		if (fd >= 0)
			close(fd);
		free(k);
		*ctx = NULL;
		return;
	}
	k->fd = fd;
	http_conns_peer(fd, &k->peer);
	k->reading = true;
	k->deadline_ns = http_conns_now() + HTTP_CONNS_HEADER_S * 1000000000ull;
	*ctx = k;

	pthread_mutex_lock(&h->conns_lock);
	unsigned same = 0;
	bool root = k->peer.local && k->peer.uid == 0;
	for (struct http_conn *o = h->conns_head; o && !root; o = o->next)
		same += http_conns_same_peer(&o->peer, &k->peer);
	if (same >= HTTP_CONNS_PER_PEER) {
		http_conns_shut(h, k, &h->closed[HTTP_CLOSED_PEER]);
		pthread_mutex_unlock(&h->conns_lock);
		return;
	}
	k->prev = h->conns_tail;
	if (h->conns_tail)
		h->conns_tail->next = k;
	else
		h->conns_head = k;
	h->conns_tail = k;
	k->listed = true;
	h->nconns++;
	if (h->nconns > HTTP_CONNS_MAX) {
		/* the oldest still reading its request (k itself when it is the only one) */
		struct http_conn *o = h->conns_head;
		while (o && !o->reading)
			o = o->next;
		http_conns_shut(h, o ? o : k, &h->closed[HTTP_CLOSED_FULL]);
	}
	pthread_mutex_unlock(&h->conns_lock);
}

void http_conns_notify(void *cls, struct MHD_Connection *c, void **ctx,
		       enum MHD_ConnectionNotificationCode toe)
{
	struct http_server *h = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		http_conns_started(h, c, ctx);
		return;
	}
	struct http_conn *k = *ctx;
	*ctx = NULL;
	if (!k)
		return;
	pthread_mutex_lock(&h->conns_lock);
	http_conns_unlink(h, k);
	pthread_mutex_unlock(&h->conns_lock);
	close(k->fd);
	free(k);
}

/* ---- the request's progress ---------------------------------------------------------------- */

static struct http_conn *http_conns_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

bool http_conns_peer_of(struct MHD_Connection *c, struct http_peer *out)
{
	struct http_conn *k = http_conns_of(c);
	if (!k) {
		memset(out, 0, sizeof(*out));
		return false;
	}
	*out = k->peer; /* written before the connection's thread started */
	return true;
}

void http_conns_progress(struct http_server *h, struct MHD_Connection *c,
			 enum http_conns_phase phase)
{
	struct http_conn *k = http_conns_of(c);
	if (!k)
		return;
	pthread_mutex_lock(&h->conns_lock);
	switch (phase) {
	case HTTP_CONNS_HEADERS_IN:
		k->deadline_ns = http_conns_now() + HTTP_CONNS_BODY_S * 1000000000ull;
		break;
	case HTTP_CONNS_REQUEST_IN:
		k->reading = false;
		break;
	case HTTP_CONNS_ANSWERED:
		k->reading = k->listed;
		k->deadline_ns = http_conns_now() + HTTP_CONNS_HEADER_S * 1000000000ull;
		break;
	}
	pthread_mutex_unlock(&h->conns_lock);
}

/* ---- the sweep ----------------------------------------------------------------------------- */

static void *http_conns_sweeper(void *arg)
{
	struct http_server *h = arg;
	for (;;) {
		struct pollfd pf = { .fd = h->stop_fd, .events = POLLIN };
		int r = poll(&pf, 1, HTTP_CONNS_SWEEP_MS);
		if (r > 0 || (r < 0 && errno != EINTR))
			return NULL; /* stopping */
		uint64_t now = http_conns_now();
		pthread_mutex_lock(&h->conns_lock);
		for (struct http_conn *k = h->conns_head, *next; k; k = next) {
			next = k->next;
			if (k->reading && now > k->deadline_ns)
				http_conns_shut(h, k, &h->closed[HTTP_CLOSED_DEADLINE]);
		}
		pthread_mutex_unlock(&h->conns_lock);
	}
}

int http_conns_start(struct http_server *h)
{
	int rc = -pthread_create(&h->sweeper, NULL, http_conns_sweeper, h);
	h->sweeper_started = rc == 0;
	if (h->sweeper_started)
		pthread_setname_np(h->sweeper, "heapd-http");
	return rc;
}

void http_conns_stop(struct http_server *h)
{
	/* h->stop_fd is readable by now (http_free): the sweeper returns */
	if (h->sweeper_started)
		pthread_join(h->sweeper, NULL);
	h->sweeper_started = false;
}
