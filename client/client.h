/* SPDX-License-Identifier: MIT */
/*
 * client.h: the client side of llgo-heapd's socket protocol (shared/proto.h), for the
 * llgo-heap CLI and for the tests: where the daemon's socket is, connecting with a timeout,
 * framing the requests (LIST, SNAPSHOT, SET_RATE, VERIFY), and reading an answer (DATA
 * packets, then one END with a status and a message). Nothing here knows what an answer's
 * bytes mean; that is the caller's business (cli.c prints them, tests parse them).
 *
 * Conventions as in agent/: functions return 0 or a negative errno.
 */
#ifndef LLGO_CLIENT_CLIENT_H
#define LLGO_CLIENT_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "../shared/proto.h"

/* The daemon's socket when none is given: $LLGO_HEAP_SOCKET, else the system daemon's for
 * root, else $XDG_RUNTIME_DIR/llgo-heapd.sock (written into buf); NULL when none applies. */
const char *client_default_socket(char *buf, size_t len);

/* A connected SOCK_SEQPACKET socket to path in *out. timeout_ms (0: none) bounds connect (a
 * full backlog of a stopped daemon), every send and every packet received on it. -ETIMEDOUT
 * when it ran out; -ENOENT / -ECONNREFUSED when no daemon listens there. */
int client_connect(const char *path, unsigned timeout_ms, int *out);
/* Set s's send and receive timeout (0: none). */
int client_set_timeout(int s, unsigned timeout_ms);

/* The requests, framed (header included). */
void client_list_req(struct llgo_msg_header *req);
void client_snapshot_req(struct llgo_msg_snapshot *req, pid_t pid, uint32_t format,
			 uint32_t flags, uint32_t top_n);
void client_set_rate_req(struct llgo_msg_set_rate *req, pid_t pid, uint64_t rate);
void client_verify_req(struct llgo_msg_verify *req, pid_t pid, uint32_t seconds);

/* An answer as it arrives. data: the DATA payloads in order, always followed by a NUL that
 * len does not count (text answers read as strings); status: END's (0 or a positive errno),
 * -1 until END came; message: END's text (the reason when status != 0). */
struct client_answer {
	struct buf data;
	int status;
	char message[LLGO_END_MSG_LEN];
	unsigned long packets; /* DATA and END packets received */
};

void client_answer_init(struct client_answer *a);
void client_answer_free(struct client_answer *a);

/* Send one request packet on s. */
int client_send(int s, const void *req, size_t n);
/* Receive one packet of an answer into a: 1 when it was END, 0 when more follow, or
 * -ECONNRESET (the daemon closed before END), -ETIMEDOUT, -EPROTO / -EBADMSG (not an answer
 * packet), -ENOMEM. pkt: LLGO_MSG_MAX bytes of scratch. */
int client_recv_packet(int s, unsigned char *pkt, struct client_answer *a);
/* Receive packets until END (0) or an error as client_recv_packet's. */
int client_read_answer(int s, struct client_answer *a);
/* Connect, send req, read the answer, close: 0 when END arrived (a->status says how the
 * daemon took it), else the first error of client_connect or client_read_answer. a is
 * initialized here; free it with client_answer_free whatever the result. */
int client_request(const char *path, const void *req, size_t n, unsigned timeout_ms,
		   struct client_answer *a);

#endif
