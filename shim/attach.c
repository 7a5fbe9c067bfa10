// SPDX-License-Identifier: MIT
/*
 * attach.c: the shim's connection to llgo-heapd and its control page.
 *
 * At load (a high-priority constructor) the shim reads LLGO_HEAP_RATE and LLGO_HEAP_SOCKET,
 * connects to the daemon (SOCK_SEQPACKET, close-on-exec, non-blocking), creates the control
 * memfd, maps it over attach_ctl (a page of the shim's own .bss, so the malloc fast path reads
 * rate_word with one RIP-relative load), sends HELLO with the memfd and waits up to ~2 s for
 * HELLO_ACK. Only then is the rate set. Without a daemon, or on any failure, the rate stays 0:
 * the shim costs one load and branch per call and prints nothing (LLGO_HEAP_DEBUG=1 prints
 * one line to stderr, written with write(2)).
 *
 * At exit (a late destructor, idempotent) the shim sends BYE and waits briefly for END, so the
 * daemon drains the rings and reads /proc/PID/maps while the process still exists.
 *
 * fork(): pthread_atfork handlers. prepare raises the forking thread's own `forking` flag, which
 * stops that thread recording (sample.c) until the child or parent handler lowers it: the
 * child's only thread is that one, so nothing is written to the parent's page or rings before
 * the child handler forgot them, while the parent's other threads (and other threads forking
 * at the same time) record on. In the child, a private anonymous
 * page replaces the shared control page (rate 0 meanwhile), every ring of the parent is
 * unmapped and forgotten (emit.c), the parent's socket is closed, and the child attaches as a
 * new process (LLGO_HELLO_FORKED) with the rate the parent had. A forked child therefore never
 * writes into its parent's rings or control page. exec'd children attach through the
 * constructor. Rings are emit.c's; sampling is sample.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define ATTACH_ACK_TIMEOUT_MS 2000
#define ATTACH_BYE_TIMEOUT_MS 1000
#define ATTACH_SEND_WAIT_MS 50

llgo_hidden struct llgo_ctl attach_ctl llgo_aligned(LLGO_CTL_SIZE);

static _Atomic int attach_fd = -1;
static _Atomic uint32_t attach_bye_sent;
static char attach_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static bool attach_debug;

_Static_assert(sizeof(struct llgo_ctl) == LLGO_CTL_SIZE, "the control page is one page");

bool attach_connected(void)
{
	return atomic_load_explicit(&attach_fd, memory_order_relaxed) >= 0;
}

static void attach_say(const char *a, const char *b)
{
	if (!attach_debug)
		return;
	char line[512];
	size_t n = 0;
	const char *parts[] = { "llgo-heap: ", a, b, "\n" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(parts); i++)
		for (const char *c = parts[i]; c && *c && n < sizeof(line) - 1; c++)
			line[n++] = *c;
	ssize_t r = write(2, line, n);
	(void)r;
}

static size_t attach_utoa(char *out, unsigned v)
{
	char tmp[12];
	size_t n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (size_t i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

static int64_t attach_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int attach_sendmsg(int sock, const void *pkt, size_t n, int fd, bool wait)
{
	struct iovec iov = { .iov_base = (void *)(uintptr_t)pkt, .iov_len = n };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (fd >= 0) {
		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = sizeof(cbuf.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	bool waited = !wait;
	for (;;) {
		ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r == (ssize_t)n)
			return 0;
		if (r >= 0)
			return -EMSGSIZE;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN || waited)
			return -errno;
		/* A full socket: the daemon is behind. Wait a little, once, never indefinitely. */
		struct pollfd p = { .fd = sock, .events = POLLOUT };
		waited = true;
		if (poll(&p, 1, ATTACH_SEND_WAIT_MS) <= 0)
			return -EAGAIN;
	}
}

int attach_send(const void *pkt, size_t n, int fd, bool wait)
{
	int sock = atomic_load_explicit(&attach_fd, memory_order_relaxed);
	if (sock < 0)
		return -ENOTCONN;
	return attach_sendmsg(sock, pkt, n, fd, wait);
}

/* Receive one packet of the given type within timeout_ms; descriptors the peer attached are
 * closed. Returns its length or -errno. */
static ssize_t attach_recv(int sock, void *buf, size_t cap, uint16_t type, int timeout_ms)
{
	int64_t deadline = attach_now_ms() + timeout_ms;
	for (;;) {
		int64_t left = deadline - attach_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = sock, .events = POLLIN };
		int pr = poll(&p, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0)
			return pr == 0 ? -ETIMEDOUT : -errno;
		union {
			char buf[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} cbuf;
		struct iovec iov = { .iov_base = buf, .iov_len = cap };
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cbuf.buf,
				     .msg_controllen = sizeof(cbuf.buf) };
		ssize_t r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0)
			return -errno;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				close(fd);
			}
		}
		if (r == 0)
			return -ECONNRESET;
		struct llgo_msg_header h;
		if ((size_t)r < sizeof(h) || (mh.msg_flags & MSG_TRUNC))
			continue;
		memcpy(&h, buf, sizeof(h));
		if (h.magic != LLGO_PROTO_MAGIC || h.version != LLGO_PROTO_VERSION ||
		    h.length != (uint32_t)r || h.type != type)
			continue;
		return r;
	}
}

static void attach_comm(char *out, size_t cap)
{
	memset(out, 0, cap);
	int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, out, cap - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n > 0) {
		out[n] = '\0';
		char *nl = memchr(out, '\n', (size_t)n);
		if (nl)
			*nl = '\0';
		return;
	}
	const char *name = program_invocation_short_name;
	if (name)
		memcpy(out, name, strnlen(name, cap - 1));
}

/* Replace the control page by a private zero page: rate 0, nobody else sees it. */
static void attach_private_ctl(void)
{
	mmap(&attach_ctl, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE,
	     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

/* Connect, share the control page, HELLO, wait for the ACK, then set the rate. */
static int attach_connect(int64_t word, uint64_t flags)
{
	if (!attach_path[0])
		return -ENOENT;
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sock < 0)
		return -errno;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, attach_path, sizeof(sa.sun_path));
	int rc;
	if (connect(sock, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		rc = -errno; /* EAGAIN: the daemon's backlog is full; never wait for it */
		close(sock);
		return rc;
	}
	int cfd = memfd_create("llgo-heap-ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (cfd < 0) {
		rc = -errno;
		close(sock);
		return rc;
	}
	if (ftruncate(cfd, LLGO_CTL_SIZE) != 0 ||
	    fcntl(cfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
	    mmap(&attach_ctl, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, cfd,
		 0) == MAP_FAILED) {
		rc = -errno;
		attach_private_ctl();
		close(cfd);
		close(sock);
		return rc;
	}
	/* The fresh page is zero: rate 0 until the ACK. */
	attach_ctl.magic = LLGO_CTL_MAGIC;
	attach_ctl.version = LLGO_CTL_VERSION;
	attach_ctl.size = LLGO_CTL_SIZE;
	attach_ctl.ring_data_size = emit_data_size();

	struct llgo_msg_hello hello;
	memset(&hello, 0, sizeof(hello));
	hello.h.magic = LLGO_PROTO_MAGIC;
	hello.h.version = LLGO_PROTO_VERSION;
	hello.h.type = LLGO_MSG_HELLO;
	hello.h.length = sizeof(hello);
	hello.pid = (uint32_t)getpid();
	hello.ring_data_size = emit_data_size();
	hello.rate_word = word;
	hello.flags = flags | stackcopy_hello_flags();
	attach_comm(hello.comm, sizeof(hello.comm));
	rc = attach_sendmsg(sock, &hello, sizeof(hello), cfd, true);
	close(cfd);
	/* Only small packets are expected; a larger one is truncated and skipped. */
	union {
		struct llgo_msg_hello_ack ack;
		unsigned char bytes[512];
	} in;
	if (rc == 0) {
		ssize_t n = attach_recv(sock, &in, sizeof(in), LLGO_MSG_HELLO_ACK,
					ATTACH_ACK_TIMEOUT_MS);
		if (n < 0)
			rc = (int)n;
		else if ((size_t)n != sizeof(in.ack))
			rc = -EBADMSG;
		else if (in.ack.status != 0)
			rc = in.ack.status > 0 ? -in.ack.status : -EPROTO;
	}
	if (rc != 0) {
		/* The daemon may hold the page: take it back so nobody turns sampling on. */
		attach_private_ctl();
		close(sock);
		return rc;
	}
	atomic_store_explicit(&attach_bye_sent, 0, memory_order_relaxed);
	atomic_store_explicit(&attach_fd, sock, memory_order_release);
	atomic_store_explicit(&attach_ctl.rate_word, word, memory_order_relaxed);
	return 0;
}

static void attach_fail_msg(const char *what, int rc)
{
	if (!attach_debug)
		return;
	char msg[sizeof(attach_path) + 32];
	size_t n = strnlen(what, sizeof(attach_path));
	memcpy(msg, what, n);
	memcpy(msg + n, ": error ", 8);
	n += 8;
	n += attach_utoa(msg + n, (unsigned)(rc < 0 ? -rc : rc));
	msg[n] = '\0';
	attach_say("not attached: ", msg);
}

/* ---- fork ------------------------------------------------------------------------------- */

static void attach_atfork_prepare(void)
{
	llgo_heap_tls.forking = 1;
}

static void attach_atfork_parent(void)
{
	llgo_heap_tls.forking = 0;
}

static void attach_atfork_child(void)
{
	int64_t word = atomic_load_explicit(&attach_ctl.rate_word, memory_order_relaxed);
	int sock = atomic_exchange_explicit(&attach_fd, -1, memory_order_relaxed);
	bool was = sock >= 0 && !atomic_load_explicit(&attach_bye_sent, memory_order_relaxed);
	/* Order matters: the parent's page goes first (rate 0 from here on), then its rings. */
	attach_private_ctl();
	emit_forget_all();
	if (sock >= 0)
		close(sock);
	llgo_heap_tls.forking = 0;
	if (was) {
		int rc = attach_connect(word, LLGO_HELLO_FORKED);
		if (rc != 0)
			attach_fail_msg("fork child", rc);
	}
}

/* ---- load and exit ---------------------------------------------------------------------- */

static uint64_t attach_parse_rate(const char *s)
{
	if (!s || !*s)
		return LLGO_RATE_DEFAULT;
	uint64_t v = 0;
	for (const char *c = s; *c; c++) {
		if (*c < '0' || *c > '9')
			return LLGO_RATE_DEFAULT;
		if (v > LLGO_RATE_MAX)
			return LLGO_RATE_MAX;
		v = v * 10 + (uint64_t)(*c - '0');
	}
	return v;
}

static void attach_socket_path(void)
{
	const char *env = getenv("LLGO_HEAP_SOCKET");
	const char *dir = getenv("XDG_RUNTIME_DIR");
	char path[sizeof(attach_path) + 64];
	size_t n = 0;
	if (env && *env) {
		n = strnlen(env, sizeof(path) - 1);
		memcpy(path, env, n);
	} else if (geteuid() == 0) {
		n = strlen("/run/llgo-heapd/llgo-heapd.sock");
		memcpy(path, "/run/llgo-heapd/llgo-heapd.sock", n);
	} else {
		if (dir && *dir) {
			n = strnlen(dir, sizeof(attach_path));
			if (n >= sizeof(attach_path))
				return;
			memcpy(path, dir, n);
		} else { /* where systemd-logind puts XDG_RUNTIME_DIR */
			memcpy(path, "/run/user/", 10);
			n = 10 + attach_utoa(path + 10, (unsigned)geteuid());
		}
		memcpy(path + n, "/llgo-heapd.sock", 16);
		n += 16;
	}
	if (n >= sizeof(attach_path))
		return; /* does not fit in sun_path: no daemon */
	memcpy(attach_path, path, n);
	attach_path[n] = '\0';
}

__attribute__((constructor(102))) static void attach_init(void)
{
	const char *dbg = getenv("LLGO_HEAP_DEBUG");
	attach_debug = dbg && dbg[0] == '1';
	stack_init();
	uint64_t rate = attach_parse_rate(getenv("LLGO_HEAP_RATE"));
	emit_init(rate);
	pthread_atfork(attach_atfork_prepare, attach_atfork_parent, attach_atfork_child);
	attach_socket_path();
	int64_t word = llgo_rate_to_word(rate);
	int rc = attach_connect(word, 0);
	if (rc != 0)
		attach_fail_msg(attach_path, rc);
	else
		attach_say("attached to ", attach_path);
}

/* Runs after the program's destructors and atexit handlers (a low number runs last among
 * destructors); calling it again, or from another exit path, does nothing. */
__attribute__((destructor(101))) static void attach_fini(void)
{
	int sock = atomic_load_explicit(&attach_fd, memory_order_acquire);
	if (sock < 0 || atomic_exchange_explicit(&attach_bye_sent, 1, memory_order_acq_rel))
		return;
	struct llgo_msg_header bye;
	memset(&bye, 0, sizeof(bye));
	bye.magic = LLGO_PROTO_MAGIC;
	bye.version = LLGO_PROTO_VERSION;
	bye.type = LLGO_MSG_BYE;
	bye.length = sizeof(bye);
	if (attach_sendmsg(sock, &bye, sizeof(bye), -1, true) != 0)
		return;
	union {
		struct llgo_msg_end end;
		unsigned char bytes[512];
	} in;
	/* The answer only tells that the daemon is done with us; its content does not matter. */
	(void)attach_recv(sock, &in, sizeof(in), LLGO_MSG_END, ATTACH_BYE_TIMEOUT_MS);
}
