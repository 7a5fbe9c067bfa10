// SPDX-License-Identifier: MIT
/*
 * ident.c: is the process behind a connection still the one that connected?
 *
 * SO_PEERCRED gives the pid, uid and gid of the process that called connect(), frozen at
 * that moment. A socket outlives that moment: a child may keep it after its parent execs a
 * setuid program (same pid, same start time, another owner) or exits (and the pid is reused by
 * someone else's process). Whatever the daemon reads of a process as root (/proc/PID/maps,
 * the files behind map_files) must belong to the uid that connected, so every such read is
 * bracketed by ident_verify:
 *
 *   - the process is pinned by a pidfd taken at accept (SO_PEERPIDFD where the kernel has it,
 *     else pidfd_open right after accept); a pidfd becomes readable when its process exits,
 *     and an exited process's pid is what may be reused, so "pidfd not readable" after opening
 *     /proc/PID means that directory is the process that connected;
 *   - its start time (/proc/PID/stat field 22) is the one read at accept;
 *   - its real, effective, saved and filesystem uids are the peer's uid, and so are its gids
 *     (a setuid or setgid exec changes one of them), as the kernel's own ptrace read check
 *     requires of an unprivileged reader;
 *   - /proc/PID and /proc/PID/maps are owned by that uid: the kernel gives them to root
 *     when the process is not dumpable (a setuid exec, prctl(PR_SET_DUMPABLE, 0)), whose
 *     maps its owner cannot read (since Linux 4.11 only the files inside change owner).
 * A peer that connected as root may read whatever its process becomes (a service that drops
 * its privileges after attaching stays readable): for uid 0 only life and start time count.
 *
 * Left to others: what to do when the check fails (server.c refuses HELLO, session.c stops
 * reading the process and shows it to root only).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ident.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

int ident_pidfd_of(int sock, pid_t pid)
{
	int fd = -1;
	socklen_t l = sizeof(fd);
	if (sock >= 0 && getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &fd, &l) == 0 && fd >= 0) {
		int c = fcntl(fd, F_DUPFD_CLOEXEC, 3);
		close(fd);
		return c;
	}
	if (pid <= 0)
		return -1;
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return -1;
	int c = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return c;
}

bool ident_pidfd_alive(int pidfd)
{
	if (pidfd < 0)
		return false;
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int r = poll(&p, 1, 0);
	return r == 0; /* readable (or an error): the process has exited */
}

/* Read a small /proc file relative to dirfd into buf (NUL-terminated). */
static int ident_read_at(int dirfd, const char *name, char *buf, size_t n)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t r = read(fd, buf, n - 1);
	int err = r < 0 ? -errno : 0;
	close(fd);
	if (err)
		return err;
	buf[r] = '\0';
	return 0;
}

int ident_parse_stat(const char *buf, char *state, uint64_t *start)
{
	const char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -EINVAL;
	p += 2;
	*state = *p;
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -EINVAL;
		p++;
	}
	char *end;
	errno = 0;
	unsigned long long v = strtoull(p, &end, 10);
	if (errno || end == p)
		return -EINVAL;
	*start = v;
	return 0;
}

/* "Uid:\tR\tE\tS\tF" (or Gid:): all four equal to want. */
static bool ident_ids_are(const char *status, const char *key, unsigned want)
{
	const char *u = strstr(status, key);
	unsigned v[4];
	if (!u || sscanf(u + strlen(key), "%u %u %u %u", &v[0], &v[1], &v[2], &v[3]) != 4)
		return false;
	return v[0] == want && v[1] == want && v[2] == want && v[3] == want;
}

int ident_proc_stat(pid_t pid, char *state, uint64_t *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int err = ident_read_at(dfd, "stat", buf, sizeof(buf));
	if (!err)
		err = ident_parse_stat(buf, state, start);
	close(dfd);
	return err;
}

int ident_start_time(pid_t pid, uint64_t *start)
{
	char state;
	return ident_proc_stat(pid, &state, start);
}

int ident_verify(const struct ident *id, char *why, size_t n)
{
	return ident_verify_ex(id, false, why, n);
}

int ident_verify_ex(const struct ident *id, bool allow_exited, char *why, size_t n)
{
	char tmp[8];
	if (!why) {
		why = tmp;
		n = sizeof(tmp);
	}
	why[0] = '\0';
	if (id->pid <= 0) {
		snprintf(why, n, "peer pid unknown (another pid namespace?)");
		return -ESRCH;
	}
	if (id->pidfd < 0) {
		snprintf(why, n, "no pidfd for the peer");
		return -ESRCH;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d", (int)id->pid);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool exited = dfd >= 0 && !ident_pidfd_alive(id->pidfd);
	if (dfd < 0 || (exited && (!allow_exited || !id->start))) {
		if (dfd >= 0)
			close(dfd);
		snprintf(why, n, "the process that connected has exited");
		return -ESRCH;
	}
	/* dfd is the process the pidfd pins: it had not exited after the open, or (exited,
	 * allowed) it is still its zombie, which the start time checked below tells from a
	 * process that reused the pid (a pid is free only once its zombie is reaped). */
	int err = 0;
	struct stat st;
	char buf[4096];
	char state;
	uint64_t start;
	if (fstat(dfd, &st) != 0) {
		err = -errno;
		snprintf(why, n, "stat %s: %s", path, strerror(errno));
	} else if (id->uid != 0 && (st.st_uid != id->uid || st.st_gid != id->gid)) {
		err = -EACCES;
		snprintf(why, n, "the process is no longer its owner's (setuid exec, or not "
			 "dumpable: /proc/%d owned by %u:%u, peer %u:%u)", (int)id->pid,
			 (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)id->uid,
			 (unsigned)id->gid);
	} else if (id->uid != 0 && fstatat(dfd, "maps", &st, 0) == 0 &&
		   (st.st_uid != id->uid || st.st_gid != id->gid)) {
		/* Linux 4.11+ leaves /proc/PID its owner's and gives the files in it to root */
		err = -EACCES;
		snprintf(why, n, "the process is no longer its owner's (not dumpable: /proc/%d/maps "
			 "owned by %u:%u, peer %u:%u)", (int)id->pid, (unsigned)st.st_uid,
			 (unsigned)st.st_gid, (unsigned)id->uid, (unsigned)id->gid);
	} else if ((err = ident_read_at(dfd, "stat", buf, sizeof(buf))) != 0 ||
		   (err = ident_parse_stat(buf, &state, &start)) != 0) {
		snprintf(why, n, "reading /proc/%d/stat: %s", (int)id->pid, strerror(-err));
	} else if (id->start && start != id->start) {
		err = -ESRCH;
		snprintf(why, n, "pid %d was reused", (int)id->pid);
	} else if ((err = ident_read_at(dfd, "status", buf, sizeof(buf))) != 0) {
		snprintf(why, n, "reading /proc/%d/status: %s", (int)id->pid, strerror(-err));
	} else if (id->uid != 0 && (!ident_ids_are(buf, "\nUid:", (unsigned)id->uid) ||
				    !ident_ids_are(buf, "\nGid:", (unsigned)id->gid))) {
		err = -EACCES;
		snprintf(why, n, "the process's uids or gids are no longer the peer's %u:%u "
			 "(setuid or setgid exec)", (unsigned)id->uid, (unsigned)id->gid);
	}
	close(dfd);
	if (!err && !exited && !ident_pidfd_alive(id->pidfd) && !allow_exited) {
		err = -ESRCH;
		snprintf(why, n, "the process that connected has exited");
	}
	return err;
}

int ident_open(int sock, pid_t pid, uid_t uid, gid_t gid, struct ident *id)
{
	id->pid = pid;
	id->uid = uid;
	id->gid = gid;
	id->start = 0;
	id->pidfd = pid > 0 ? ident_pidfd_of(sock, pid) : -1;
	if (id->pidfd < 0)
		return -ESRCH;
	/* The start time of the process the pidfd pins: read, then make sure it had not exited
	 * (a pid reused since would have another start time). */
	uint64_t start;
	if (ident_start_time(pid, &start) != 0 || !ident_pidfd_alive(id->pidfd))
		return -ESRCH;
	id->start = start;
	return 0;
}

void ident_close(struct ident *id)
{
	if (id->pidfd >= 0)
		close(id->pidfd);
	id->pidfd = -1;
}
