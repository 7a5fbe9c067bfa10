/* SPDX-License-Identifier: MIT */
/*
 * vouch.h: the daemon's word, written into a process's control page at HELLO, that it
 * verified this process with this memfd; checked by a later daemon of the same socket before
 * it takes the process back after a restart (vouch.c, adopt.c).
 */
#ifndef LLGO_AGENT_VOUCH_H
#define LLGO_AGENT_VOUCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../shared/ring.h"

#define VOUCH_KEY_LEN 16u
#define VOUCH_TAG_LEN 16u
_Static_assert(sizeof(((struct llgo_ctl *)0)->vouch_tag) == VOUCH_TAG_LEN, "tag size");

struct vouch_key {
	bool ok; /* loaded or made: a later daemon of the socket holds the same key */
	uint8_t k[VOUCH_KEY_LEN]; /* the file's key, bound to this boot and socket path */
};

/* What a tag binds: the process as the daemon verified it and the memfd it gave. */
struct vouch_subject {
	uint32_t pid;
	uint32_t uid, gid; /* the identity HELLO checked (SO_PEERCRED, all ids equal) */
	uint64_t start;    /* /proc/PID/stat starttime while a pidfd pinned the process */
	uint64_t dev, ino; /* the memfd's */
};

/* The key of the daemons of socket_path: SOCKET_PATH.key, made (16 random bytes, mode 0600,
 * never through a link) when missing. A file that is not a regular file of our uid, mode
 * 0600 or less, 16 bytes long, is not used: key->ok stays false (why says what was wrong),
 * and processes are then neither vouched for nor taken back. */
int vouch_key_load(struct vouch_key *key, const char *socket_path, char *why, size_t n);
void vouch_tag(const struct vouch_key *key, const struct vouch_subject *s,
	       uint8_t tag[VOUCH_TAG_LEN]);
/* Write uid, gid and tag into the (shared) control page. */
void vouch_write(const struct vouch_key *key, struct llgo_ctl *ctl, const struct vouch_subject *s);
/* Whether tag is key's tag of s (compared in constant time). */
bool vouch_check(const struct vouch_key *key, const struct vouch_subject *s,
		 const uint8_t tag[VOUCH_TAG_LEN]);
/* SipHash-2-4 with a 128-bit output (Aumasson and Bernstein), little-endian out. */
void vouch_siphash128(const uint8_t key[VOUCH_KEY_LEN], const void *msg, size_t len,
		      uint8_t out[16]);

#endif
