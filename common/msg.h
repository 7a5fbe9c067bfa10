/* SPDX-License-Identifier: MIT */
/*
 * msg.h: framing of llgo-heapd's socket packets (msg.c, shared/proto.h), used by the daemon
 * and by the client side (client/).
 */
#ifndef LLGO_AGENT_MSG_H
#define LLGO_AGENT_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "../shared/proto.h"

void msg_header_init(struct llgo_msg_header *h, uint16_t type, uint32_t length);
/* Check magic, version, and that the header's length equals the packet length n. */
int msg_header_check(const void *pkt, size_t n, struct llgo_msg_header *out);
/* Room for one SCM_RIGHTS descriptor. */
union msg_fd_control {
	char buf[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
};
/* Attach fd to mh (no-op when fd < 0), ctl holding the control message. */
void msg_attach_fd(struct msghdr *mh, union msg_fd_control *ctl, int fd);
/* Send one packet, with fd attached when fd >= 0. */
int msg_send(int sock, const void *pkt, size_t n, int fd);
/* Receive one packet into buf (cap bytes); *fd gets an attached descriptor or -1. Returns the
 * packet length, 0 at EOF, or a negative errno. Truncated packets are an error (-EMSGSIZE), and
 * so is a packet whose descriptors could not all be received (-EMFILE). */
ssize_t msg_recv(int sock, void *buf, size_t cap, int *fd);

#endif
