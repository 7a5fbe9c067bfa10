// SPDX-License-Identifier: MIT
/*
 * link.c: the process's link to llgo-heapd, as every file of the shim sees it: its state
 * (enum llgo_shim_state, one atomic, mirrored in ctl.shim_state for the daemon), its two
 * descriptors (the socket and the process memfd), sending on it, and losing it (a failed
 * send makes the process LOST and schedules the first retry), the daemon's liveness as
 * /proc shows it, the attach gate of a copy loaded late (llgo-heap attach: the slow paths
 * count themselves in, a detach closes it and waits), and the shim's diagnostics
 * (LLGO_HEAP_DEBUG). lifecycle.c makes and remakes
 * the link (start-up, reconnects, fork, exit, sandboxes): it is the only file above this one
 * that changes the state other than by a loss, and the files below it (emit.c, live.c,
 * full.c, stack.c, stackcopy.c) use the link without calling lifecycle.c.
 *
 * A fork child settles (lifecycle.c's fork check) before anything reads or writes the shim's
 * state: lifecycle_settled() (internal.h) reaches that check through link_settle, which
 * lifecycle.c's constructor registers (link_on_settle) before it arms anything a child
 * could inherit.
 *
 * Nothing here allocates or takes a lock; sends never wait (attach.c).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

_Atomic uint32_t link_st = LLGO_SHIM_DETACHED;
struct attach_fd link_sock = { .fd = -1 };
struct attach_fd link_mem = { .fd = -1 };
bool link_debug;
/* Only the thread in ATTACHING touches these (and link_lose, which wins the CAS to it). */
uint64_t link_backoff_ns = LINK_BACKOFF_MIN_NS;
uint64_t link_hello_flags;
_Atomic uint64_t link_retry_ns;
pid_t link_daemon_pid; /* SO_PEERCRED of our socket: the daemon */
/* lifecycle.c's fork check (link_on_settle); NULL until its constructor runs, when nothing
 * can need it yet (no fork handler, the process mark unarmed). */
static void (*_Atomic link_settle_fn)(struct llgo_heap_thread *t);

void link_on_settle(void (*fn)(struct llgo_heap_thread *t))
{
	atomic_store_explicit(&link_settle_fn, fn, memory_order_relaxed);
}

void link_settle(struct llgo_heap_thread *t)
{
	void (*fn)(struct llgo_heap_thread *) =
		atomic_load_explicit(&link_settle_fn, memory_order_relaxed);
	if (fn)
		fn(t);
}

/* ---- diagnostics ------------------------------------------------------------------------ */

void link_say(const char *a, const char *b)
{
	if (!link_debug || atomic_load_explicit(&link_st, memory_order_relaxed) ==
					LLGO_SHIM_OFF)
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

size_t link_utoa(char *out, unsigned v)
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

void link_say_err(const char *what, int rc)
{
	char msg[96];
	size_t n = strnlen(what, 64);
	memcpy(msg, what, n);
	memcpy(msg + n, ": error ", 8);
	n += 8;
	n += link_utoa(msg + n, (unsigned)(rc < 0 ? -rc : rc));
	msg[n] = '\0';
	link_say(msg, "");
}

/* ---- state and loss --------------------------------------------------------------------- */

void link_set(uint32_t st)
{
	atomic_store_explicit(&link_st, st, memory_order_release);
	atomic_store_explicit(&attach_ctl.shim_state, st, memory_order_relaxed);
}

void link_schedule_retry(void)
{
	uint64_t b = link_backoff_ns;
	atomic_store_explicit(&link_retry_ns, attach_now_ns() + b, memory_order_relaxed);
	link_backoff_ns = b * 2 > LINK_BACKOFF_MAX_NS ? LINK_BACKOFF_MAX_NS : b * 2;
}

/* ATTACHED -> LOST (once; whoever wins the CAS logs and schedules the first retry). */
void link_lose(const char *why)
{
	uint32_t expect = LLGO_SHIM_ATTACHED;
	if (!atomic_compare_exchange_strong_explicit(&link_st, &expect, LLGO_SHIM_ATTACHING,
						     memory_order_acq_rel, memory_order_relaxed))
		return;
	link_backoff_ns = LINK_BACKOFF_MIN_NS;
	link_schedule_retry();
	link_hello_flags = LLGO_HELLO_REATTACH;
	link_say("daemon lost: ", why);
	link_set(LLGO_SHIM_LOST);
}

/* ---- sending ------------------------------------------------------------------------------ */

int link_send(const void *pkt, size_t n)
{
	return link_send_fd(pkt, n, -1);
}

int link_send_fd(const void *pkt, size_t n, int fd)
{
	if (link_state() != LLGO_SHIM_ATTACHED)
		return -ENOTCONN;
	int rc = attach_sendmsg(&link_sock, pkt, n, fd);
	if (rc == -EBADF)
		link_lose("socket closed or replaced by the program");
	else if (rc && rc != -EAGAIN && rc != -ENOBUFS)
		link_lose("send failed");
	return rc;
}

/* Tell the daemon to drain now (LLGO_MSG_WAKE), never waiting: a lost wake only means the
 * daemon finds the records at its next poll. */
llgo_noinline void link_wake(void)
{
	struct llgo_msg_header m;
	attach_header(&m, LLGO_MSG_WAKE, sizeof(m));
	link_send(&m, sizeof(m));
}

/* ---- the attach gate (llgo-heap attach and detach: lifecycle.c, override_got.c) ---------- */

_Atomic uint32_t link_late;
_Atomic uint64_t link_inflight;
/* Closed by link_gate_close (lifecycle_detach, under override_got.c's lock), opened by
 * link_gate_open (lifecycle_attach_now). */
static _Atomic uint32_t link_gate = 1;

#define LINK_QUIET_WAIT_MS 3000

/*
 * Dekker's pattern with link_gate_close: a path counts itself in, then reads the gate; the
 * detach closes the gate, then reads the count (all seq_cst). Either the path sees the gate
 * closed (and leaves at once), or the detach sees it counted (and waits for its leave, a
 * release the detach's acquire load pairs with).
 */
bool link_enter_late(void)
{
	atomic_fetch_add_explicit(&link_inflight, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&link_gate, memory_order_seq_cst))
		return true;
	atomic_fetch_sub_explicit(&link_inflight, 1, memory_order_release);
	return false;
}

void link_gate_open(void)
{
	atomic_store_explicit(&link_gate, 1, memory_order_seq_cst);
}

bool link_gate_close(void)
{
	atomic_store_explicit(&link_gate, 0, memory_order_seq_cst);
	for (int waited = 0; waited <= LINK_QUIET_WAIT_MS; waited++) {
		/* acquire: pairs with link_leave's release */
		if (atomic_load_explicit(&link_inflight, memory_order_seq_cst) == 0)
			return true;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return false;
}

/* ---- the daemon, as /proc shows it ----------------------------------------------------- */

/* The daemon's scheduler state and CPU time (utime + stime ticks) from /proc/PID/stat; false
 * when it cannot be read (gone, another pid namespace). */
bool link_daemon_stat(char *state, uint64_t *ticks)
{
	if (link_daemon_pid <= 0)
		return false;
	char path[32] = "/proc/";
	size_t n = 6 + link_utoa(path + 6, (unsigned)link_daemon_pid);
	memcpy(path + n, "/stat", 6);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[512];
	ssize_t r = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (r <= 0)
		return false;
	buf[r] = '\0';
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return false;
	*state = p[2];
	/* fields after the state: ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime */
	p += 3;
	uint64_t f[12] = { 0 };
	for (int i = 0; i < 12 && *p; i++) {
		while (*p == ' ')
			p++;
		while (*p >= '0' && *p <= '9')
			f[i] = f[i] * 10 + (uint64_t)(*p++ - '0');
		while (*p && *p != ' ')
			p++;
	}
	*ticks = f[10] + f[11];
	return true;
}

/* Whether any thread of the daemon is running or waiting to run (R), read from
 * /proc/PID/task/TID/stat with raw getdents64 (no malloc: we may be in _exit). */
bool link_daemon_runnable(void)
{
	char path[48] = "/proc/";
	size_t n = 6 + link_utoa(path + 6, (unsigned)link_daemon_pid);
	memcpy(path + n, "/task", 6);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return false;
	bool running = false;
	unsigned char buf[2048];
	long got;
	while (!running && (got = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < got && !running;) {
			struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type;
				 char name[]; } *d = (void *)(buf + off);
			off += d->reclen;
			if (d->name[0] < '0' || d->name[0] > '9')
				continue;
			char sp[96];
			size_t k = n + 5;
			memcpy(sp, path, k);
			sp[k++] = '/';
			size_t ln = strnlen(d->name, 16);
			memcpy(sp + k, d->name, ln);
			memcpy(sp + k + ln, "/stat", 6);
			int fd = open(sp, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			char st[256];
			ssize_t r = read(fd, st, sizeof(st) - 1);
			close(fd);
			if (r <= 0)
				continue;
			st[r] = '\0';
			char *p = strrchr(st, ')');
			running = p && p[1] == ' ' && (p[2] == 'R' || p[2] == 'D');
		}
	}
	close(dfd);
	return running;
}

bool link_daemon_active(void)
{
	static _Atomic uint64_t last_ticks;
	char st;
	uint64_t t;
	if (link_state() == LLGO_SHIM_OFF || !link_daemon_stat(&st, &t))
		return false;
	if (st == 'T' || st == 't' || st == 'Z' || st == 'X')
		return false;
	uint64_t before = atomic_exchange_explicit(&last_ticks, t, memory_order_relaxed);
	return t != before || link_daemon_runnable();
}
