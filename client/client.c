// SPDX-License-Identifier: MIT
/*
 * client.c: the client side of llgo-heapd's socket protocol (client.h): the default socket
 * path, connecting with a timeout, framing requests and collecting an answer's DATA packets
 * up to its END. Packet framing itself is common/msg.h's (over shared/frame.h); what the
 * answers mean is left to the callers (cli.c, the tests). Links with libc alone (and common/'s
 * buf.o).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/msg.h"
#include "client.h"

const char *client_default_socket(char *buf, size_t len)
{
	const char *env = getenv("LLGO_HEAP_SOCKET");
	if (env && *env)
		return env;
	if (geteuid() == 0)
		return "/run/llgo-heapd/llgo-heapd.sock";
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (!xdg || !*xdg)
		return NULL;
	snprintf(buf, len, "%s/llgo-heapd.sock", xdg);
	return buf;
}

int client_connect(const char *path, unsigned timeout_ms, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	client_set_timeout(s, timeout_ms); /* SO_SNDTIMEO bounds connect too */
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;
		close(s);
		return err == -EAGAIN || err == -EWOULDBLOCK || err == -EINPROGRESS ? -ETIMEDOUT
										   : err;
	}
	*out = s;
	return 0;
}

int client_set_timeout(int s, unsigned timeout_ms)
{
	struct timeval tv = { .tv_sec = (time_t)(timeout_ms / 1000),
			      .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000 };
	if (setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
	    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
		return -errno;
	return 0;
}

void client_list_req(struct llgo_msg_header *req)
{
	msg_header_init(req, LLGO_MSG_LIST, sizeof(*req));
}

void client_snapshot_req(struct llgo_msg_snapshot *req, pid_t pid, uint32_t format,
			 uint32_t flags, uint32_t top_n)
{
	memset(req, 0, sizeof(*req));
	msg_header_init(&req->h, LLGO_MSG_SNAPSHOT, sizeof(*req));
	req->pid = (uint32_t)pid;
	req->format = format;
	req->flags = flags;
	req->top_n = top_n;
}

void client_set_rate_req(struct llgo_msg_set_rate *req, pid_t pid, uint64_t rate)
{
	memset(req, 0, sizeof(*req));
	msg_header_init(&req->h, LLGO_MSG_SET_RATE, sizeof(*req));
	req->pid = (uint32_t)pid;
	req->rate = rate;
}

void client_verify_req(struct llgo_msg_verify *req, pid_t pid, uint32_t seconds)
{
	memset(req, 0, sizeof(*req));
	msg_header_init(&req->h, LLGO_MSG_VERIFY, sizeof(*req));
	req->pid = (uint32_t)pid;
	req->seconds = seconds;
}

void client_answer_init(struct client_answer *a)
{
	memset(a, 0, sizeof(*a));
	buf_init(&a->data);
	a->status = -1;
}

void client_answer_free(struct client_answer *a)
{
	buf_free(&a->data);
}

int client_send(int s, const void *req, size_t n)
{
	int err = msg_send(s, req, n, -1);
	return err == -EAGAIN || err == -EWOULDBLOCK ? -ETIMEDOUT : err;
}

/* Keep a NUL after the payload without counting it, so text answers read as strings. */
static int client_terminate(struct buf *b)
{
	if (buf_reserve(b, 1) != 0)
		return -ENOMEM;
	b->data[b->len] = '\0';
	return 0;
}

int client_recv_packet(int s, unsigned char *pkt, struct client_answer *a)
{
	ssize_t r = msg_recv(s, pkt, LLGO_MSG_MAX, NULL);
	if (r == 0)
		return -ECONNRESET;
	if (r < 0)
		return r == -EAGAIN || r == -EWOULDBLOCK ? -ETIMEDOUT : (int)r;
	struct llgo_msg_header h;
	int err = msg_header_check(pkt, (size_t)r, &h);
	if (err)
		return err;
	a->packets++;
	if (h.type == LLGO_MSG_DATA) {
		if (buf_append(&a->data, pkt + sizeof(h), (size_t)r - sizeof(h)) != 0)
			return -ENOMEM;
		return client_terminate(&a->data);
	}
	if (h.type != LLGO_MSG_END || (size_t)r != sizeof(struct llgo_msg_end))
		return -EPROTO;
	struct llgo_msg_end end;
	memcpy(&end, pkt, sizeof(end));
	end.message[sizeof(end.message) - 1] = '\0';
	a->status = end.status;
	snprintf(a->message, sizeof(a->message), "%s", end.message);
	return 1;
}

int client_read_answer(int s, struct client_answer *a)
{
	unsigned char *pkt = malloc(LLGO_MSG_MAX);
	if (!pkt)
		return -ENOMEM;
	int rc = client_terminate(&a->data);
	while (rc == 0)
		rc = client_recv_packet(s, pkt, a);
	free(pkt);
	return rc < 0 ? rc : 0;
}

int client_request(const char *path, const void *req, size_t n, unsigned timeout_ms,
		   struct client_answer *a)
{
	client_answer_init(a);
	int s, err = client_connect(path, timeout_ms, &s);
	if (err)
		return err;
	err = client_send(s, req, n);
	if (!err)
		err = client_read_answer(s, a);
	close(s);
	return err;
}
