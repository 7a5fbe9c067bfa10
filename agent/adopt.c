// SPDX-License-Identifier: MIT
/*
 * adopt.c: a daemon that starts (or restarts: systemd's Restart=on-failure) takes back the
 * profiled processes that were attached to its socket before, without waiting for them to
 * call: it finds each one's process memfd (the shim keeps it open, "/memfd:llgo-heap" in
 * /proc/PID/fd), duplicates it with pidfd_getfd, and hands it to server.c, which makes a
 * session of it (rings re-adopted with their unread records, what an earlier daemon took
 * counted) and watches the pidfd for the process's exit. The shim notices the new daemon
 * (ctl.adopt_gen) at its next sample and reconnects, joining that session.
 *
 * Everything read here belongs to a process that may be hostile: the memfd must be sealed
 * against shrinking and carry our magic and version, the socket path the shim wrote must be
 * ours, and the process is pinned by its pidfd before anything of it is read; its uid is read
 * from /proc after the pidfd is open. Sessions, mappings and rates are session.c's and
 * server.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "session.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define ADOPT_MEMFD_NAME "/memfd:llgo-heap (deleted)"
#define ADOPT_LIVE_NAME "/memfd:llgo-heap-live (deleted)"

static bool adopt_number(const char *s, long min, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < min || v > INT32_MAX)
		return false;
	*out = v;
	return true;
}

/* Effective uid and gid of pid from /proc/PID/status (Uid:/Gid: second fields). */
static bool adopt_ids(pid_t pid, uid_t *uid, gid_t *gid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	const char *u = strstr(buf, "\nUid:"), *g = strstr(buf, "\nGid:");
	unsigned ru, eu, rg, eg;
	if (!u || !g || sscanf(u + 5, "%u %u", &ru, &eu) != 2 ||
	    sscanf(g + 5, "%u %u", &rg, &eg) != 2)
		return false;
	*uid = (uid_t)eu;
	*gid = (gid_t)eg;
	return true;
}

/* The memfd behind descriptor fd of the process behind pidfd, if it is a process memfd of a
 * shim attached to socket_path; -1 otherwise. */
static int adopt_memfd(int pidfd, int fd, const char *socket_path)
{
	int m = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	if (m < 0)
		return -1;
	struct stat st;
	struct llgo_ctl ctl;
	if (fstat(m, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(ctl) ||
	    pread(m, &ctl, sizeof(ctl), 0) != (ssize_t)sizeof(ctl) ||
	    ctl.magic != LLGO_CTL_MAGIC || ctl.version != LLGO_CTL_VERSION) {
		close(m);
		return -1;
	}
	ctl.socket_path[LLGO_CTL_PATH_LEN - 1] = '\0';
	uint32_t st_shim = atomic_load_explicit(&ctl.shim_state, memory_order_relaxed);
	if (strcmp(ctl.socket_path, socket_path) != 0 || st_shim == LLGO_SHIM_OFF ||
	    st_shim == LLGO_SHIM_DETACHED) {
		close(m);
		return -1;
	}
	return m;
}

size_t adopt_scan(const char *socket_path, adopt_fn fn, void *arg)
{
	if (!socket_path || !*socket_path)
		return 0;
	DIR *proc = opendir("/proc");
	if (!proc)
		return 0;
	uid_t me = geteuid();
	pid_t self = getpid();
	size_t found = 0;
	struct dirent *de;
	while ((de = readdir(proc)) != NULL) {
		long pid;
		if (!adopt_number(de->d_name, 1, &pid) || pid == self)
			continue;
		char dir[64];
		snprintf(dir, sizeof(dir), "/proc/%ld/fd", pid);
		DIR *fds = opendir(dir);
		if (!fds)
			continue; /* not ours to read, or gone */
		int pidfd = -1, memfd = -1;
		long livefd = -1;
		struct dirent *fe;
		while ((fe = readdir(fds)) != NULL) {
			long fd;
			if (!adopt_number(fe->d_name, 0, &fd))
				continue;
			char link[384], target[64];
			snprintf(link, sizeof(link), "%s/%s", dir, fe->d_name);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (strcmp(target, ADOPT_LIVE_NAME) == 0) {
				livefd = fd; /* the live-object table (issue 10), taken below */
				continue;
			}
			if (memfd >= 0 || strcmp(target, ADOPT_MEMFD_NAME) != 0)
				continue;
			/* Pin the process first: everything read after this is about it. */
			if (pidfd < 0)
				pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
			if (pidfd < 0)
				break;
			memfd = adopt_memfd(pidfd, (int)fd, socket_path);
		}
		closedir(fds);
		struct adopt_proc p = { .pid = (pid_t)pid, .pidfd = pidfd, .memfd = memfd,
					.livefd = -1 };
		if (memfd >= 0 && livefd >= 0)
			p.livefd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)livefd, 0);
		if (memfd >= 0 && adopt_ids(p.pid, &p.uid, &p.gid) && (me == 0 || p.uid == me) &&
		    fn(arg, &p) == 0) {
			found++; /* fn owns pidfd and memfd now */
			if (p.livefd >= 0)
				close(p.livefd);
			continue;
		}
		if (p.livefd >= 0)
			close(p.livefd);
		if (memfd >= 0)
			close(memfd);
		if (pidfd >= 0)
			close(pidfd);
	}
	closedir(proc);
	return found;
}
