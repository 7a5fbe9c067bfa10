// SPDX-License-Identifier: MIT
/*
 * attach.c: the shim's transport to llgo-heapd, and the storage of its control page. A leaf:
 * it connects, sends and receives packets and checks that a descriptor is still its own; it
 * keeps no state about the connection (lifecycle.c does) and never decides anything.
 *
 * Descriptors: the program owns the descriptor table. It may close our socket (a close-all
 * loop before exec, a daemonizing library) and get the same number back from its next
 * open/socketpair. So each descriptor is kept with the device and inode it had when we
 * opened it, and every use starts with one fstat: a number that names another file is never
 * written to, read from or closed (attach_fd_owned).
 *
 * Nothing here waits for long: sends are MSG_DONTWAIT (a full socket is the daemon's
 * problem, reported as -EAGAIN), connect is non-blocking (a Unix socket connect completes or
 * fails at once: a full backlog is -EAGAIN), and the only wait is attach_recv's, bounded by
 * its caller (the exit handshake, lifecycle.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../shared/frame.h"
#include "internal.h"

/* The reservation the control page is mapped over; see internal.h. Zero (rate 0) until a
 * daemon is attached. */
llgo_hidden union attach_area attach_area llgo_aligned(ATTACH_AREA_SIZE);
llgo_hidden uint32_t attach_page_size = LLGO_PAGE_MIN;

_Static_assert(sizeof(union attach_area) == ATTACH_AREA_SIZE, "the reservation is one page");

/* The vDSO's clock_gettime, called directly: libc's wrapper lies in a part of libc a small
 * program may never touch otherwise, and its first call made the kernel map 14 more pages of
 * libc (fault-around) into the program's resident memory. NULL: libc's. */
static int (*_Atomic attach_vdso_clock)(clockid_t, struct timespec *);

void attach_clock_init(void)
{
	/* the vDSO is a loaded object of its own name: no file is searched or opened */
	void *h = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (h)
		atomic_store_explicit(&attach_vdso_clock,
				      (int (*)(clockid_t, struct timespec *))dlsym(
					      h, "__vdso_clock_gettime"),
				      memory_order_relaxed);
}

uint64_t attach_now_ns(void)
{
	struct timespec ts;
	int (*fn)(clockid_t, struct timespec *) =
		atomic_load_explicit(&attach_vdso_clock, memory_order_relaxed);
	if (!fn || fn(CLOCK_MONOTONIC, &ts) != 0)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void attach_header(struct llgo_msg_header *h, uint16_t type, uint32_t length)
{
	llgo_frame_header_init(h, type, length);
}

static bool attach_identify(int fd, struct attach_fd *out)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return false;
	out->fd = fd;
	out->dev = (uint64_t)st.st_dev;
	out->ino = (uint64_t)st.st_ino;
	return true;
}

bool attach_fd_owned(const struct attach_fd *d)
{
	struct stat st;
	if (d->fd < 0 || fstat(d->fd, &st) != 0)
		return false;
	return (uint64_t)st.st_dev == d->dev && (uint64_t)st.st_ino == d->ino;
}

void attach_fd_drop(const struct attach_fd *d)
{
	if (attach_fd_owned(d))
		close(d->fd);
}

void attach_fd_close(struct attach_fd *d)
{
	if (attach_fd_owned(d))
		close(d->fd);
	attach_fd_forget(d);
}

void attach_fd_forget(struct attach_fd *d)
{
	d->fd = -1;
	d->dev = d->ino = 0;
}

int attach_connect(const char *path, struct attach_fd *out)
{
	out->fd = -1;
	size_t n = strlen(path);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (n == 0 || n >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, n);
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sock < 0)
		return -errno;
	int rc = 0;
	if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		rc = -errno; /* EAGAIN: the daemon's backlog is full; never wait for it */
	else if (!attach_identify(sock, out))
		rc = -errno;
	if (rc) {
		close(sock);
		out->fd = -1;
	}
	return rc;
}

int attach_sendmsg(const struct attach_fd *d, const void *pkt, size_t n, int fd)
{
	if (!attach_fd_owned(d))
		return -EBADF;
	return llgo_frame_send(d->fd, pkt, n, fd, MSG_DONTWAIT);
}

/* Read one packet without waiting; -EAGAIN when none, -ECONNRESET at EOF. Descriptors are
 * closed. */
static ssize_t attach_recv_one(int sock, void *buf, size_t cap)
{
	ssize_t r = llgo_frame_recv(sock, buf, cap, MSG_DONTWAIT, NULL);
	return r == 0 ? -ECONNRESET : r;
}

ssize_t attach_recv(const struct attach_fd *d, void *buf, size_t cap, uint16_t type,
		    int timeout_ms)
{
	if (!attach_fd_owned(d))
		return -EBADF;
	uint64_t deadline = attach_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		ssize_t r = attach_recv_one(d->fd, buf, cap);
		if (r == -EAGAIN) {
			uint64_t now = attach_now_ns();
			if (now >= deadline)
				return -ETIMEDOUT;
			struct pollfd p = { .fd = d->fd, .events = POLLIN };
			int ms = (int)((deadline - now + 999999) / 1000000);
			if (poll(&p, 1, ms) < 0 && errno != EINTR)
				return -errno;
			continue;
		}
		if (r == -EMSGSIZE || r == -EMFILE)
			continue; /* only small packets without descriptors are expected: skip */
		if (r < 0)
			return r;
		struct llgo_msg_header h;
		if (llgo_frame_header_check(buf, (size_t)r, &h) != 0 || h.type != type)
			continue;
		return r;
	}
}

bool attach_peer_gone(const struct attach_fd *d)
{
	if (!attach_fd_owned(d))
		return true;
	struct pollfd p = { .fd = d->fd, .events = POLLIN | POLLRDHUP };
	int r;
	do
		r = poll(&p, 1, 0);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return false;
	if (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL))
		return true;
	/* A packet we did not ask for (an old daemon's HELLO_ACK): read and drop it. */
	unsigned char scratch[512];
	ssize_t n = attach_recv_one(d->fd, scratch, sizeof(scratch));
	return n == -ECONNRESET;
}
