/* SPDX-License-Identifier: MIT */
/*
 * msg.h: llgo-heapd's socket packets (shared/proto.h) as the daemon and the client side
 * (client/) send and receive them: blocking, one descriptor at most. The framing itself is
 * shared/frame.h's, which the shim uses too.
 */
#ifndef LLGO_COMMON_MSG_H
#define LLGO_COMMON_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../shared/frame.h"

static inline void msg_header_init(struct llgo_msg_header *h, uint16_t type, uint32_t length)
{
	llgo_frame_header_init(h, type, length);
}

/* Check magic, version, and that the header's length equals the packet length n. */
static inline int msg_header_check(const void *pkt, size_t n, struct llgo_msg_header *out)
{
	return llgo_frame_header_check(pkt, n, out);
}

/* Send one packet, with fd attached when fd >= 0. */
static inline int msg_send(int sock, const void *pkt, size_t n, int fd)
{
	return llgo_frame_send(sock, pkt, n, fd, 0);
}

/* Receive one packet into buf (cap bytes); *fd gets an attached descriptor or -1. Returns the
 * packet length, 0 at EOF, or a negative errno. Truncated packets are an error (-EMSGSIZE), and
 * so is a packet whose descriptors could not all be received (-EMFILE). */
static inline ssize_t msg_recv(int sock, void *buf, size_t cap, int *fd)
{
	return llgo_frame_recv(sock, buf, cap, 0, fd);
}

#endif
