// SPDX-License-Identifier: MIT
/*
 * packet.c: every packet the event loop reads (shared/proto.h). Its header, its length, the
 * descriptor it must or must not carry, and the order (HELLO first, shim messages on a shim's
 * connection only, client requests on a client's) are checked before anything acts on it. A
 * packet that breaks the protocol drops its connection, counted and logged in one line
 * (conn_malformed); a dropped shim connection ends its session as EOF does.
 *
 * What is cheap runs here, on the loop (ADD_RING: an mmap; ADD_LIVE; WAKE; LIST when no HELLO
 * is in flight); the rest goes to a worker pool (workq.c) and runs in jobs.c: HELLO on the
 * shim workers, so attaching never waits behind exits or clients; BYE, DETACH and exits on
 * the exit workers; SNAPSHOT, SET_RATE and VERIFY on the client workers.
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

static void packet_add_ring(struct conn *c, const unsigned char *pkt, int fd)
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
		conn_rearm(c);
		return;
	}
	if (err) {
		conn_malformed(c, "ADD_RING %u (%u bytes): %s", m.ring_id, m.data_size,
				 strerror(-err));
		return;
	}
	drain_wake(c->srv->drain);
	conn_rearm(c);
}

static void packet_add_live(struct conn *c, int fd)
{
	int err = inuse_map(c->session, fd);
	close(fd);
	if (err) {
		conn_malformed(c, "ADD_LIVE: %s", strerror(-err));
		return;
	}
	conn_rearm(c);
}

void packet_event(struct server *srv, struct conn *c)
{
	if (c->kind == CONN_PIDFD) { /* the process exited */
		conn_end(c);
		return;
	}
	int fd = -1;
	ssize_t r = msg_recv(c->fd, srv->rxbuf, LLGO_MSG_MAX, &fd);
	if (r != -EAGAIN && !c->seen_packet) {
		c->seen_packet = true;
		atomic_fetch_sub(&srv->unseen, 1);
	}
	if (r == -EAGAIN) {
		conn_rearm(c);
		return;
	}
	if (r == -EMSGSIZE) {
		conn_malformed(c, "packet larger than %u bytes", LLGO_MSG_MAX);
		return;
	}
	if (r == -EMFILE) {
		conn_malformed(c, "a descriptor it sent was lost (this daemon is out of "
				  "descriptors, or it sent more than one)");
		return;
	}
	if (r <= 0) { /* EOF, or the peer reset the connection */
		if (fd >= 0)
			close(fd);
		conn_end(c);
		return;
	}
	struct llgo_msg_header h;
	int err = msg_header_check(srv->rxbuf, (size_t)r, &h);
	if (err) {
		if (fd >= 0)
			close(fd);
		conn_malformed(c, "bad header (%zd bytes): %s", r, strerror(-err));
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
	case LLGO_MSG_DETACH:
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
		conn_malformed(c, "unknown message type %u", h.type);
		return;
	}
	const char *bad = NULL;
	if ((size_t)r != want)
		bad = "wrong length";
	else if (needs_fd && fd < 0)
		bad = "no descriptor attached";
	else if (!needs_fd && fd >= 0)
		bad = "unexpected descriptor";
	else if (h.type == LLGO_MSG_ADD_RING && c->kind != CONN_SHIM)
		bad = "before HELLO";
	else if (h.type == LLGO_MSG_HELLO && c->kind != CONN_NEW)
		bad = c->kind == CONN_SHIM ? "second HELLO" : "HELLO from a client";
	else if (shim_msg && h.type != LLGO_MSG_HELLO && c->kind != CONN_SHIM)
		bad = "before HELLO";
	else if (!shim_msg && c->kind == CONN_SHIM)
		bad = "client request on a shim connection";
	if (bad) {
		if (fd >= 0)
			close(fd);
		conn_malformed(c, "message type %u (%zd bytes): %s", h.type, r, bad);
		return;
	}

	switch (h.type) {
	case LLGO_MSG_ADD_RING:
		packet_add_ring(c, srv->rxbuf, fd);
		return;
	case LLGO_MSG_ADD_LIVE:
		packet_add_live(c, fd);
		return;
	case LLGO_MSG_WAKE:
		/* A producer is filling a ring faster than the idle poll: drain now. The
		 * drain reads the rings themselves, so a forged wake costs one pass. */
		drain_wake(srv->drain);
		conn_rearm(c);
		return;
	case LLGO_MSG_HELLO:
	case LLGO_MSG_BYE:
	case LLGO_MSG_DETACH:
		memcpy(c->req, srv->rxbuf, (size_t)r);
		c->job_fd = fd;
		/* A process blocks in its constructor until HELLO is answered: never queue it
		 * behind the drains of exiting processes. */
		if (h.type == LLGO_MSG_HELLO)
			atomic_fetch_add(&srv->hellos_pending, 1);
		/* Listed as detached from now on (LIST is answered here, in packet order), not
		 * after the final drain jobs_detach runs: that may take a while, and `llgo-heap
		 * detach` has returned by then. */
		if (h.type == LLGO_MSG_DETACH && c->session)
			atomic_store_explicit(&c->session->detached, true, memory_order_relaxed);
		workq_push(h.type == LLGO_MSG_HELLO ? &srv->shimq : &srv->exitq, c, h.type);
		return;
	case LLGO_MSG_LIST:
		/* Cheap (short locks, never a drain lock) and answered without blocking: here,
		 * so that busy workers never delay it; unless a process's HELLO is still in
		 * flight, which is waited for first (a started process is listed): then by a
		 * shim worker, behind the HELLOs it waits for and never behind client work
		 * (under TSan, eight huge snapshots on the client workers held a LIST 9-15 s). */
		c->kind = CONN_CLIENT;
		atomic_store(&srv->loop_busy, 0);
		if (server_hello_in_flight(srv, 0)) {
			memcpy(c->req, srv->rxbuf, (size_t)r);
			workq_push(&srv->shimq, c, h.type);
			return;
		}
		conn_answered(c, jobs_list(srv, c));
		return;
	default:
		c->kind = CONN_CLIENT;
		memcpy(c->req, srv->rxbuf, (size_t)r);
		workq_push(&srv->clientq, c, h.type);
		return;
	}
}
