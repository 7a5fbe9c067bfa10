// SPDX-License-Identifier: MIT
/*
 * listen.c: where llgo-heapd listens. Either systemd (or systemd-socket-activate) bound the
 * socket and passes it as descriptor 3, or the daemon binds --socket PATH itself. What is
 * accepted on it, and removing the path at exit, is server.c's. Also the other half of
 * systemd's service protocol: telling it when the daemon is ready, reloading or stopping
 * (Type=notify in systemd/llgo-heapd.service).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "listen.h"
#include "../../common/log.h"

#define LISTEN_BACKLOG 256
#define LISTEN_SYSTEMD_FD 3 /* SD_LISTEN_FDS_START */

bool listen_activated(void)
{
	const char *lp = getenv("LISTEN_PID");
	char *end;
	errno = 0;
	unsigned long pid = lp ? strtoul(lp, &end, 10) : 0;
	return lp && !errno && !*end && pid == (unsigned long)getpid() && getenv("LISTEN_FDS");
}

int listen_systemd_fd(char *err, size_t errlen)
{
	if (!listen_activated())
		return -ENOENT;
	char *end;
	unsigned long n = strtoul(getenv("LISTEN_FDS"), &end, 10);
	/* Not for our children (the variables name us, but a child could be confused). */
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (*end || n < 1)
		return -ENOENT;
	int fd = LISTEN_SYSTEMD_FD, type = 0, domain = 0, acc = 0;
	socklen_t l = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0 || type != SOCK_SEQPACKET ||
	    (l = sizeof(int), getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l)) < 0 ||
	    domain != AF_UNIX ||
	    (l = sizeof(int), getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l)) < 0 || !acc) {
		snprintf(err, errlen, "socket activation: fd 3 is not a listening AF_UNIX "
				      "SOCK_SEQPACKET socket");
		return -EINVAL;
	}
	if (n > 1)
		log_warn("socket activation passed %lu sockets; using the first", n);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

static int listen_mkdir_parents(const char *path)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int listen_bind(const char *path, struct stat *st, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	int rc = listen_mkdir_parents(path);
	if (rc) {
		snprintf(err, errlen, "cannot create the folder of %s: %s", path, strerror(-rc));
		return rc;
	}
	if (lstat(path, st) == 0) {
		if (!S_ISSOCK(st->st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket", path);
			return -EEXIST;
		}
		/* Unlink a stale socket only: if something answers, another daemon owns it. */
		int t = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (t < 0) {
			snprintf(err, errlen, "socket: %s", strerror(errno));
			return -errno;
		}
		int c = connect(t, (struct sockaddr *)&sa, sizeof(sa));
		int cerr = errno;
		close(t);
		if (c == 0) {
			snprintf(err, errlen, "another llgo-heapd is listening on %s", path);
			return -EADDRINUSE;
		}
		if (cerr != ECONNREFUSED && cerr != ENOENT) {
			snprintf(err, errlen, "cannot check %s: %s", path, strerror(cerr));
			return -cerr;
		}
		if (unlink(path) < 0 && errno != ENOENT) {
			snprintf(err, errlen, "cannot remove stale %s: %s", path, strerror(errno));
			return -errno;
		}
	}
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -errno;
	}
	/* Any user's shim may attach; reads are checked per request with SO_PEERCRED. The mode
	 * is set by the umask at bind (no thread runs yet), never by a chmod of the path after
	 * it, which would follow whatever the path names by then (a swapped symlink). */
	mode_t old_mask = umask(0111);
	int brc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int berr = errno;
	umask(old_mask);
	if (brc < 0) {
		snprintf(err, errlen, "bind %s: %s", path, strerror(berr));
		close(fd);
		return -berr;
	}
	if (listen(fd, LISTEN_BACKLOG) < 0 || lstat(path, st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "setting up %s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		return rc;
	}
	return fd;
}

void listen_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = path ? strlen(path) : 0;
	if (!path || (path[0] != '/' && path[0] != '@') || len < 2 || len >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* an abstract socket */
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen) < 0)
		log_debug("NOTIFY_SOCKET %s: %s", path, strerror(errno));
	close(fd);
}
