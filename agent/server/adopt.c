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
 * Everything read here belongs to a process that may be hostile, and a descriptor does not
 * say who made it: any user can make a memfd that looks like the shim's and hand it to a
 * process of root's (a setuid program inherits it). So a memfd is taken only when it proves
 * that a daemon of this socket accepted it from this very process: the process is pinned by
 * a pidfd before anything of it is read; the memfd must carry our magic, version and socket
 * path, and the tag a daemon wrote at HELLO (vouch.c) over the uid and gid it verified, the
 * pid, the start time and the memfd itself; then the process must pass, against that uid
 * and gid, every check HELLO makes (ident.c: same start time, all uids and gids equal,
 * /proc/PID and its maps owned by the uid, i.e. dumpable). A process that fails is not taken
 * back (logged); its shim attaches again by HELLO at its next sample, as after any loss of
 * its daemon. Sessions, mappings and rates are session.c's and server.c's.
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

#include "ident.h"
#include "../ingest/session.h"
#include "vouch.h"

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

/* The memfd behind descriptor fd of the process behind pidfd, if it is a process memfd of a
 * shim attached to socket_path (its control page copied into ctl); -1 otherwise. */
static int adopt_memfd(int pidfd, int fd, const char *socket_path, struct llgo_ctl *ctl)
{
	int m = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	if (m < 0)
		return -1;
	struct stat st;
	if (fstat(m, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(*ctl) ||
	    pread(m, ctl, sizeof(*ctl), 0) != (ssize_t)sizeof(*ctl) ||
	    ctl->magic != LLGO_CTL_MAGIC || ctl->version != LLGO_CTL_VERSION) {
		close(m);
		return -1;
	}
	ctl->socket_path[LLGO_CTL_PATH_LEN - 1] = '\0';
	uint32_t st_shim = atomic_load_explicit(&ctl->shim_state, memory_order_relaxed);
	if (strcmp(ctl->socket_path, socket_path) != 0 || st_shim == LLGO_SHIM_OFF ||
	    st_shim == LLGO_SHIM_DETACHED) {
		close(m);
		return -1;
	}
	return m;
}

/* 0 when memfd m (control page copied in ctl), found in process pid pinned by pidfd, was
 * vouched for by a daemon of this socket for this very process (pid, start time) and this
 * very memfd, and the process is still what was vouched for: the checks HELLO makes
 * (ident.c: alive, same start time, all uids and gids the vouched ones, /proc/PID and its
 * maps owned by that uid) against the vouched uid and gid. Fills p's uid, gid and start;
 * else why says what failed. */
static int adopt_prove(const struct vouch_key *key, pid_t pid, int pidfd, int m,
		       const struct llgo_ctl *ctl, struct adopt_proc *p, char *why, size_t n)
{
	struct stat st;
	uint64_t start;
	if (fstat(m, &st) != 0 || ident_start_time(pid, &start) != 0 ||
	    !ident_pidfd_alive(pidfd)) {
		snprintf(why, n, "it exited");
		return -ESRCH;
	}
	struct vouch_subject v = { .pid = (uint32_t)pid,
				   .uid = ctl->vouch_uid,
				   .gid = ctl->vouch_gid,
				   .start = start,
				   .dev = (uint64_t)st.st_dev,
				   .ino = (uint64_t)st.st_ino };
	if (!vouch_check(key, &v, ctl->vouch_tag)) {
		snprintf(why, n, "its memfd carries no vouch of this socket's daemons for this "
			 "process (made or attached elsewhere, or by an older daemon)");
		return -EPERM;
	}
	struct ident id = { .pid = pid, .uid = v.uid, .gid = v.gid, .pidfd = pidfd,
			    .start = start };
	int err = ident_verify(&id, why, n);
	if (err)
		return err;
	p->uid = v.uid;
	p->gid = v.gid;
	p->start = start;
	return 0;
}

size_t adopt_scan(const char *socket_path, const struct vouch_key *key, adopt_fn fn, void *arg)
{
	if (!socket_path || !*socket_path || !key->ok)
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
		struct adopt_proc p = { .pid = (pid_t)pid, .pidfd = -1, .memfd = -1, .livefd = -1 };
		long livefd = -1;
		bool refused = false;
		char why[256] = "";
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
			if (p.memfd >= 0 || strcmp(target, ADOPT_MEMFD_NAME) != 0)
				continue;
			/* Pin the process first: everything read after this is about it. */
			if (p.pidfd < 0)
				p.pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
			if (p.pidfd < 0)
				break;
			struct llgo_ctl ctl;
			int m = adopt_memfd(p.pidfd, (int)fd, socket_path, &ctl);
			if (m < 0)
				continue;
			/* Another process's memfd may sit here too (inherited, handed over): only
			 * the one vouched for this process is taken, whichever descriptor holds it. */
			if (adopt_prove(key, p.pid, p.pidfd, m, &ctl, &p, why, sizeof(why)) == 0) {
				p.memfd = m;
			} else {
				refused = true;
				close(m);
			}
		}
		closedir(fds);
		if (p.memfd < 0 && refused)
			log_info("pid %ld: not taken back: %s", pid, why);
		if (p.memfd >= 0 && livefd >= 0)
			p.livefd = (int)syscall(SYS_pidfd_getfd, p.pidfd, (int)livefd, 0);
		if (p.memfd >= 0 && (me == 0 || p.uid == me) && fn(arg, &p) == 0) {
			found++; /* fn owns pidfd and memfd now */
			if (p.livefd >= 0)
				close(p.livefd);
			continue;
		}
		if (p.livefd >= 0)
			close(p.livefd);
		if (p.memfd >= 0)
			close(p.memfd);
		if (p.pidfd >= 0)
			close(p.pidfd);
	}
	closedir(proc);
	return found;
}
