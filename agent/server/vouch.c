// SPDX-License-Identifier: MIT
/*
 * vouch.c: proof, for a daemon that restarts, that a memfd it finds in a process is one a
 * daemon of its socket accepted from that very process.
 *
 * A restarted daemon takes back the processes an earlier one served by searching every
 * process's descriptors for the shim's memfd (adopt.c). A descriptor says nothing about who
 * made it: any user can create a memfd named "llgo-heap" that looks like the shim's and hand
 * it to a process of root's (a setuid program inherits it). So at HELLO, after the identity
 * checks (ident.c), the daemon writes into the control page the uid and gid it verified and
 * a tag: SipHash-2-4-128 over (pid, start time, uid, gid, the memfd's device and inode),
 * keyed with a secret of the daemons of this socket. The process can read and overwrite the
 * tag (the page is shared) but cannot make one: a tag for another pid, start time, uid or
 * memfd needs the key. A later daemon recomputes the tag from what it sees (the pid it
 * found, the start time read under a pidfd, the memfd's fstat) and the uid and gid the page
 * claims, and then checks the process against those as HELLO would (adopt.c).
 *
 * The key is a file next to the socket (SOCKET.key), 16 random bytes, mode 0600, made by
 * the first daemon and read by the next ones; under systemd it lives in the preserved
 * runtime directory. The tags use a key derived from it, the boot ID and the socket path,
 * so a tag copied before a reboot, or made for another daemon's socket, is worth nothing.
 *
 * Left to others: what to vouch for and when (jobs.c at HELLO), what to do with a process
 * whose proof fails (adopt.c: it is not taken back; its shim attaches by HELLO again).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vouch.h"

/* ---- SipHash-2-4, 128-bit output -------------------------------------------------------- */

static uint64_t vouch_rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

static uint64_t vouch_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static void vouch_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void vouch_rounds(uint64_t v[4], int n)
{
	for (int i = 0; i < n; i++) {
		v[0] += v[1];
		v[1] = vouch_rotl(v[1], 13);
		v[1] ^= v[0];
		v[0] = vouch_rotl(v[0], 32);
		v[2] += v[3];
		v[3] = vouch_rotl(v[3], 16);
		v[3] ^= v[2];
		v[0] += v[3];
		v[3] = vouch_rotl(v[3], 21);
		v[3] ^= v[0];
		v[2] += v[1];
		v[1] = vouch_rotl(v[1], 17);
		v[1] ^= v[2];
		v[2] = vouch_rotl(v[2], 32);
	}
}

void vouch_siphash128(const uint8_t key[VOUCH_KEY_LEN], const void *msg, size_t len,
		      uint8_t out[16])
{
	const uint8_t *in = msg;
	uint64_t k0 = vouch_le64(key), k1 = vouch_le64(key + 8);
	uint64_t v[4] = { k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull ^ 0xee,
			  k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull };
	size_t whole = len & ~(size_t)7;
	for (size_t i = 0; i < whole; i += 8) {
		uint64_t m = vouch_le64(in + i);
		v[3] ^= m;
		vouch_rounds(v, 2);
		v[0] ^= m;
	}
	uint64_t last = (uint64_t)len << 56;
	for (size_t i = whole; i < len; i++)
		last |= (uint64_t)in[i] << (8 * (i - whole));
	v[3] ^= last;
	vouch_rounds(v, 2);
	v[0] ^= last;
	v[2] ^= 0xee;
	vouch_rounds(v, 4);
	vouch_put_le64(out, v[0] ^ v[1] ^ v[2] ^ v[3]);
	v[1] ^= 0xdd;
	vouch_rounds(v, 4);
	vouch_put_le64(out + 8, v[0] ^ v[1] ^ v[2] ^ v[3]);
}

/* ---- the key ------------------------------------------------------------------------------ */

/* The key file's 16 bytes: -ENOENT when there is none, another error (why) when it is not one
 * we may trust (another user could have planted it in a folder open to them). */
static int vouch_read_key(const char *path, uint8_t out[VOUCH_KEY_LEN], char *why, size_t n)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e != ENOENT)
			snprintf(why, n, "%s: %s", path,
				 e == ELOOP ? "a symbolic link" : strerror(e));
		return -e;
	}
	struct stat st;
	int err = 0;
	if (fstat(fd, &st) != 0) {
		err = -errno;
		snprintf(why, n, "%s: %s", path, strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		err = -EINVAL;
		snprintf(why, n, "%s: not a regular file", path);
	} else if (st.st_uid != geteuid()) {
		err = -EPERM;
		snprintf(why, n, "%s: owned by uid %u, not by the daemon's %u", path,
			 (unsigned)st.st_uid, (unsigned)geteuid());
	} else if (st.st_mode & 077) {
		err = -EPERM;
		snprintf(why, n, "%s: mode %03o lets others read or write it (0600 expected)", path,
			 (unsigned)(st.st_mode & 0777));
	} else if (st.st_size != (off_t)VOUCH_KEY_LEN ||
		   pread(fd, out, VOUCH_KEY_LEN, 0) != (ssize_t)VOUCH_KEY_LEN) {
		err = -EINVAL;
		snprintf(why, n, "%s: not %u bytes", path, VOUCH_KEY_LEN);
	}
	close(fd);
	return err;
}

static int vouch_random(uint8_t *out, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = getrandom(out + got, len - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -errno;
		got += (size_t)r;
	}
	return 0;
}

/* Make the key file: written whole under a temporary name, then linked to path, so that no
 * daemon ever reads half a key and an existing path (a file, a link) is never replaced or
 * followed. -EEXIST: another daemon made one meanwhile. */
static int vouch_make_key(const char *path, uint8_t out[VOUCH_KEY_LEN], char *why, size_t n)
{
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	int err = vouch_random(out, VOUCH_KEY_LEN);
	if (err) {
		snprintf(why, n, "getrandom: %s", strerror(-err));
		return err;
	}
	int fd = mkostemp(tmp, O_CLOEXEC); /* O_EXCL, mode 0600 */
	if (fd < 0) {
		err = -errno;
		snprintf(why, n, "cannot make %s: %s", path, strerror(errno));
		return err;
	}
	if (fchmod(fd, 0600) != 0 || write(fd, out, VOUCH_KEY_LEN) != (ssize_t)VOUCH_KEY_LEN)
		err = -(errno ? errno : EIO);
	close(fd);
	if (!err && link(tmp, path) != 0)
		err = -errno;
	unlink(tmp);
	if (err && err != -EEXIST)
		snprintf(why, n, "cannot make %s: %s", path, strerror(-err));
	return err;
}

int vouch_key_load(struct vouch_key *key, const char *socket_path, char *why, size_t n)
{
	char tmp[8];
	if (!why) {
		why = tmp;
		n = sizeof(tmp);
	}
	why[0] = '\0';
	memset(key, 0, sizeof(*key));
	if (!socket_path || !*socket_path) {
		snprintf(why, n, "no socket path to keep a key beside");
		return -EINVAL;
	}
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s.key", socket_path) >= (int)sizeof(path)) {
		snprintf(why, n, "socket path too long");
		return -ENAMETOOLONG;
	}
	uint8_t file_key[VOUCH_KEY_LEN];
	int err = vouch_read_key(path, file_key, why, n);
	if (err == -ENOENT) {
		err = vouch_make_key(path, file_key, why, n);
		if (err == -EEXIST)
			err = vouch_read_key(path, file_key, why, n);
	}
	if (err)
		return err;
	/* Bound to this boot (pids and start times repeat after a reboot, a key file on a disk
	 * would not change) and to this socket (another daemon's tags are not ours). */
	char boot[64] = "";
	int bfd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (bfd >= 0) {
		ssize_t r = read(bfd, boot, sizeof(boot) - 1);
		boot[r > 0 ? r : 0] = '\0';
		close(bfd);
	}
	char ctx[32 + sizeof(boot) + PATH_MAX];
	int len = snprintf(ctx, sizeof(ctx), "llgo-heapd vouch 1%c%s%c%s", 0, boot, 0, socket_path);
	vouch_siphash128(file_key, ctx, len < (int)sizeof(ctx) ? (size_t)len : sizeof(ctx),
			 key->k);
	memset(file_key, 0, sizeof(file_key));
	key->ok = true;
	return 0;
}

/* ---- tags ---------------------------------------------------------------------------------- */

void vouch_tag(const struct vouch_key *key, const struct vouch_subject *s,
	       uint8_t tag[VOUCH_TAG_LEN])
{
	/* fixed positions, no padding: every field counts, in one way only */
	uint8_t m[48];
	memset(m, 0, sizeof(m));
	memcpy(m, "vouch\0\0\0", 8);
	vouch_put_le64(m + 8, s->pid);
	vouch_put_le64(m + 16, (uint64_t)s->uid << 32 | s->gid);
	vouch_put_le64(m + 24, s->start);
	vouch_put_le64(m + 32, s->dev);
	vouch_put_le64(m + 40, s->ino);
	vouch_siphash128(key->k, m, sizeof(m), tag);
}

void vouch_write(const struct vouch_key *key, struct llgo_ctl *ctl, const struct vouch_subject *s)
{
	if (!key->ok || !ctl)
		return;
	uint8_t tag[VOUCH_TAG_LEN];
	vouch_tag(key, s, tag);
	/* Plain stores into the shared page: the process may overwrite them, and then only
	 * loses its own way back after a restart. */
	memcpy(&ctl->vouch_uid, &s->uid, sizeof(ctl->vouch_uid));
	memcpy(&ctl->vouch_gid, &s->gid, sizeof(ctl->vouch_gid));
	memcpy(ctl->vouch_tag, tag, VOUCH_TAG_LEN);
}

bool vouch_check(const struct vouch_key *key, const struct vouch_subject *s,
		 const uint8_t tag[VOUCH_TAG_LEN])
{
	if (!key->ok)
		return false;
	uint8_t want[VOUCH_TAG_LEN];
	vouch_tag(key, s, want);
	uint8_t diff = 0;
	for (unsigned i = 0; i < VOUCH_TAG_LEN; i++)
		diff |= (uint8_t)(want[i] ^ tag[i]);
	return diff == 0;
}
