/* SPDX-License-Identifier: MIT */
/*
 * frame.h: the framing of llgo-heapd's socket packets (proto.h), written once for all three
 * sides: the shim (shim/attach.c, which links nothing but its own objects), and the daemon and
 * the client (common/msg.h). A header is filled and checked here; a packet is sent or received
 * with at most one SCM_RIGHTS descriptor. What a packet means, how long a side waits and
 * whether it checks its descriptor first is the caller's.
 *
 * Static inline, and nothing here allocates, locks or prints: the shim calls it from inside
 * the program it profiles.
 */
#ifndef LLGO_SHARED_FRAME_H
#define LLGO_SHARED_FRAME_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "proto.h"

static inline void llgo_frame_header_init(struct llgo_msg_header *h, uint16_t type,
					  uint32_t length)
{
	memset(h, 0, sizeof(*h));
	h->magic = LLGO_PROTO_MAGIC;
	h->version = LLGO_PROTO_VERSION;
	h->type = type;
	h->length = length;
}

/* Check magic, version, and that the header's length equals the packet length n (at most
 * LLGO_MSG_MAX); *out gets the header. -EBADMSG (size), -EPROTO (magic or version). */
static inline int llgo_frame_header_check(const void *pkt, size_t n, struct llgo_msg_header *out)
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

/* Room for one SCM_RIGHTS descriptor. */
union llgo_frame_fd_control {
	char buf[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
};

/* Attach fd to mh (no-op when fd < 0), ctl holding the control message. */
static inline void llgo_frame_attach_fd(struct msghdr *mh, union llgo_frame_fd_control *ctl,
					int fd)
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

/* Send one packet, with fd attached when fd >= 0, never raising SIGPIPE; flags are added to
 * sendmsg's (MSG_DONTWAIT: the shim never waits). 0, -EMSGSIZE when only part went, or
 * -errno. */
static inline int llgo_frame_send(int sock, const void *pkt, size_t n, int fd, int flags)
{
	struct iovec iov = { .iov_base = (void *)(uintptr_t)pkt, .iov_len = n };
	union llgo_frame_fd_control ctl;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	llgo_frame_attach_fd(&mh, &ctl, fd);
	for (;;) {
		ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL | flags);
		if (r == (ssize_t)n)
			return 0;
		if (r >= 0)
			return -EMSGSIZE;
		if (errno != EINTR)
			return -errno;
	}
}

/* Receive one packet into buf (cap bytes); flags are added to recvmsg's (MSG_CMSG_CLOEXEC).
 * With fd, *fd gets the first descriptor passed or -1; every other descriptor is closed (a
 * hostile peer must not make us leak them), all of them without fd. Returns the packet
 * length, 0 at EOF, or -errno: a truncated packet is -EMSGSIZE, and a packet whose
 * descriptors could not all be received -EMFILE (no descriptor is kept then). */
static inline ssize_t llgo_frame_recv(int sock, void *buf, size_t cap, int flags, int *fd)
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
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
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

#endif
