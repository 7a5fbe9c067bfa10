// SPDX-License-Identifier: MIT
/*
 * msg.c: framing of llgo-heapd's SOCK_SEQPACKET packets (shared/proto.h) for the daemon and
 * the client side: header init and checks, send and receive with an optional SCM_RIGHTS
 * descriptor. What a packet means, and how answers are queued or read, is left to server.c
 * and client/client.c.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "msg.h"

void msg_header_init(struct llgo_msg_header *h, uint16_t type, uint32_t length)
{
	memset(h, 0, sizeof(*h));
	h->magic = LLGO_PROTO_MAGIC;
	h->version = LLGO_PROTO_VERSION;
	h->type = type;
	h->length = length;
}

int msg_header_check(const void *pkt, size_t n, struct llgo_msg_header *out)
{
	if (n < sizeof(struct llgo_msg_header) || n > LLGO_MSG_MAX)
		return -EBADMSG;
	memcpy(out, pkt, sizeof(*out));
	if (out->magic != LLGO_PROTO_MAGIC || out->version != LLGO_PROTO_VERSION)
		return -EPROTO;
	if (out->length != n)
		return -EBADMSG;
	return 0;
}

void msg_attach_fd(struct msghdr *mh, union msg_fd_control *ctl, int fd)
{
	if (fd < 0)
		return;
	memset(ctl, 0, sizeof(*ctl));
	mh->msg_control = ctl->buf;
	mh->msg_controllen = sizeof(ctl->buf);
	struct cmsghdr *c = CMSG_FIRSTHDR(mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
}

int msg_send(int sock, const void *pkt, size_t n, int fd)
{
	struct iovec iov = { .iov_base = (void *)(uintptr_t)pkt, .iov_len = n };
	union msg_fd_control ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	msg_attach_fd(&mh, &ctl, fd);
	for (;;) {
		ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL);
		if (r == (ssize_t)n)
			return 0;
		if (r >= 0)
			return -EMSGSIZE;
		if (errno != EINTR)
			return -errno;
	}
}

ssize_t msg_recv(int sock, void *buf, size_t cap, int *fd)
{
	struct iovec iov = { .iov_base = buf, .iov_len = cap };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = ctl.buf,
		.msg_controllen = sizeof(ctl.buf),
	};
	if (fd)
		*fd = -1;
	ssize_t r;
	do {
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	/* Take every descriptor passed, keep at most one, close the rest: a hostile peer
	 * must not make us leak descriptors. */
	int kept = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfds; i++) {
			int f;
			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (kept < 0 && fd)
				kept = f;
			else
				close(f);
		}
	}
	if (fd)
		*fd = kept;
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		if (kept >= 0) {
			close(kept);
			if (fd)
				*fd = -1;
		}
		/* MSG_CTRUNC alone: the packet fit but a descriptor it carried could not be
		 * installed here (this process is out of descriptors, or more were sent) */
		return (mh.msg_flags & MSG_TRUNC) ? -EMSGSIZE : -EMFILE;
	}
	return r;
}
