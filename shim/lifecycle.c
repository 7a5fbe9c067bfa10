// SPDX-License-Identifier: MIT
/*
 * lifecycle.c: everything about the profiled process's and its threads' lives, out of the
 * malloc path: start-up, the connection state, daemon loss and reconnects, fork, exit,
 * sandboxes, thread start. The slow path (sample.c) only asks lifecycle_ready() whether a
 * sample may be recorded; the link's state, descriptors, sends and loss are link.c's (the
 * files below this one use the link, never this file), the transport attach.c's, the rings
 * emit.c's.
 * (About 950 lines: these paths hand the same connection state to each other: fork's
 * handlers, exit and a reconnect race on it, and keeping them in one file keeps its
 * transitions and their memory orderings readable in one place.)
 *
 * The process memfd. At attach the shim creates one memfd ("llgo-heap"), sealed against
 * shrinking: its first page becomes the control page (mapped MAP_FIXED over attach_area, so
 * the fast path's rate load does not move), rings follow (shared/ring.h). The shim keeps it
 * open for the life of the process: a reconnect re-sends it (HELLO REATTACH) and a restarted
 * daemon can find it on its own (pidfd_getfd), so rings and their unread records survive the
 * daemon. It is MADV_DONTFORK'ed ring by ring (emit.c): a fork child maps none of them.
 *
 * States (enum llgo_shim_state, one atomic in link.c, mirrored in ctl.shim_state for the
 * daemon; every transition but a loss is made here):
 *   DETACHED   no daemon socket at start: rate 0 for good, nothing created;
 *   ATTACHED   HELLO sent (no answer awaited: the daemon reads what it needs while the
 *              process runs, and a refusal closes the socket, noticed below);
 *   LOST       a send failed (other than a full socket), the peer closed, or the socket was
 *              replaced under us: no stack walks and no ring writes; each sample is counted
 *              in ctl.lost_detached; the slow path reconnects with backoff (10 ms doubling to
 *              2 s), at once when a daemon re-adopted the memfd (ctl.adopt_gen);
 *   ATTACHING  one thread holds the right to (re)connect; others count their samples;
 *   OFF        the program sandboxed itself (seccomp) or the shim cannot work: no syscalls
 *              from the shim ever again (records still go to existing rings: memory only).
 * While LOST the rate word keeps its value so that the slow path still sees the samples it
 * must count; ctl.want_rate_word holds the rate to restore.
 *
 * Noticing a dead daemon: a failed send, or at most every 100 ms of sampling a poll() of the
 * socket for HUP (one syscall, from the slow path; the clock itself is read at one sample in
 * LIFECYCLE_CHECK_EVERY per thread). Never a thread of ours.
 *
 * Start-up costs a connect, a memfd, an mmap and one sendmsg; nothing waits. Exit waits for
 * the daemon only when it may still need the process (records not yet drained, or pcs outside
 * the mappings it read), and then at most LIFECYCLE_BYE_WAIT_MS.
 *
 * fork: the child does almost nothing inside fork(). Its handler only closes the parent's
 * socket, memfd and live-table descriptors (if they still are ours: a restarted daemon looks
 * for processes by their descriptors), and writes no memory of the shim: every page the
 * child writes or executes first costs it a fault and a copy, which the parent's fork() and
 * the child's exit wait for on a busy machine (measured: the former handler, which did the
 * rest too, was most of the shim's added cost of fork). The rest waits for the child's first
 * use of the shim's state (lifecycle_fork_check, reached through lifecycle_settled): the
 * forking thread's TLS says `forking` 2 in the child after the handler, and 1 with getpid()
 * other than its fork_pid while fork() runs other libraries' child handlers (their
 * allocations are not recorded, as in the parent between prepare and parent handlers; a free
 * of a tracked object there settles the child first). There the child replaces the shared control page by a private copy, forgets
 * the parent's rings and descriptors, copies the live objects it inherited (live.c), and
 * becomes LOST with an immediate retry and the FORKED flag: its first sampled allocation
 * attaches it (a new memfd, one session); a child that execs or exits first never does any
 * of it. Until then the child's fast path reads its parent's rate (the page is still
 * shared), which only decides when it first enters the slow path. Threads the child makes
 * with pthread_create settle it first (override_thread.c). exec'd images attach from their
 * own constructor.
 *
 * Raw clone(2) and clone3(2) without CLONE_VM copy the address space as fork() does but run
 * no fork handler: such a child has its parent's thread state, rings (not mapped in it:
 * MADV_DONTFORK) and live table (mapped, shared). The process mark tells it: a word on a
 * page of its own, set to 1 at the first attach and advised MADV_WIPEONFORK, so that every
 * copy of the address space reads 0 there, while threads and CLONE_VM children read 1. Every
 * slow path reads it (lifecycle_settled: two loads, no syscall) and a 0 settles the child as
 * above (the kernel refusing the advice: every slow path asks getpid() instead). A settled
 * child sets its own mark again. A raw child that also shares the parent's descriptor table
 * (CLONE_FILES, seen with kcmp) could neither close the parent's descriptors nor open its
 * own outside the parent's table: it forgets them and stays OFF at rate 0. A CLONE_VM child
 * (vfork, posix_spawn, clone with CLONE_VM) shares the memory, the thread state and, without
 * CLONE_SETTLS, the TLS of the thread that made it: it is that thread as far as the shim
 * can tell, and its samples go to that thread's ring. With CLONE_VFORK the parent is
 * suspended meanwhile, so the ring keeps one producer; a CLONE_VM child that runs beside its
 * parent on the same TLS already shares glibc's per-thread allocator state, which malloc
 * does not survive either. Exit (lifecycle_exit) compares pids and does nothing there.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define LIFECYCLE_BYE_WAIT_MS 15
#define LIFECYCLE_BYE_WAIT_MAX_MS 1000
#define LIFECYCLE_CHECK_NS (100ull * 1000000)

static char lifecycle_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static _Atomic uint64_t lifecycle_check_ns;
static _Atomic uint64_t lifecycle_adopt_seen;
static _Atomic pid_t lifecycle_pid; /* the process that attached (a vfork child is not it) */
/* The process this state belongs to: set by the constructor, and by a fork child when it
 * settles (lifecycle_fork_check). */
static _Atomic pid_t lifecycle_self;
static _Atomic int lifecycle_settling;
/* The process mark (internal.h): the constant 1 until the first attach, then a word on a
 * MADV_WIPEONFORK page of its own (the constant 0 where the kernel has no such advice). */
static _Atomic uint32_t lifecycle_mark_unarmed = 1, lifecycle_mark_refused = 0;
_Atomic uint32_t *_Atomic lifecycle_mark = &lifecycle_mark_unarmed;
/* dl_iterate_phdr's count of objects loaded, when the constructor attached (UINT64_MAX:
 * attached later, unknown). The daemon read our maps after that. */
static uint64_t lifecycle_adds_at_attach = UINT64_MAX;

extern void *__libc_stack_end;

static uint64_t lifecycle_adds(void);
static bool lifecycle_loaded_late(void);

/* ---- the process memfd ------------------------------------------------------------------ */

/* Map the first page of the memfd over the control page, keeping what the page held (a fork
 * child's copy of its parent's settings, counters of a process that was LOST). */
static int lifecycle_map_ctl(int fd)
{
	struct llgo_ctl keep;
	memcpy(&keep, &attach_ctl, sizeof(keep));
	if (mmap(&attach_area, attach_page_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
		 fd, 0) == MAP_FAILED)
		return -errno;
	/* The new page is zero (rate 0) until the fields below are in. */
	attach_ctl.magic = LLGO_CTL_MAGIC;
	attach_ctl.version = LLGO_CTL_VERSION;
	attach_ctl.size = LLGO_CTL_SIZE;
	attach_ctl.page_size = attach_page_size;
	attach_ctl.ring_data_size = emit_data_size();
	_Static_assert(sizeof(lifecycle_path) <= LLGO_CTL_PATH_LEN, "socket path fits");
	memcpy(attach_ctl.socket_path, lifecycle_path, sizeof(lifecycle_path));
	atomic_store_explicit(&attach_ctl.lost_no_ring, keep.lost_no_ring, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.lost_detached, keep.lost_detached, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.want_rate_word, keep.want_rate_word,
			      memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.shim_state, keep.shim_state, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.rate_word, keep.rate_word, memory_order_relaxed);
	return 0;
}

/* Replace the control page by a private page holding the same values: nobody else sees or
 * changes it from here on. */
static void lifecycle_private_ctl(void)
{
	struct llgo_ctl keep;
	memcpy(&keep, &attach_ctl, sizeof(keep));
	if (mmap(&attach_area, attach_page_size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
		memcpy(&attach_ctl, &keep, sizeof(keep));
}

static int lifecycle_new_memfd(void)
{
	int fd = memfd_create("llgo-heap", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (ftruncate(fd, attach_page_size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
		rc = -errno;
	else
		rc = lifecycle_map_ctl(fd);
	if (rc == 0) {
		struct stat st;
		if (fstat(fd, &st) != 0) {
			rc = -errno;
		} else {
			link_mem.fd = fd;
			link_mem.dev = (uint64_t)st.st_dev;
			link_mem.ino = (uint64_t)st.st_ino;
		}
	}
	if (rc)
		close(fd);
	return rc;
}

/* ---- the process mark ------------------------------------------------------------------- */

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

/* Before anything is shared with the daemon (the memfd): from here on a copy of this
 * address space that did not come through fork()'s handlers (a raw clone or clone3 without
 * CLONE_VM) finds the mark 0 at its first slow path and settles as a fork child does. Only
 * the thread that connects calls this. */
static void lifecycle_mark_arm(void)
{
	if (atomic_load_explicit(&lifecycle_mark, memory_order_relaxed) != &lifecycle_mark_unarmed)
		return;
	_Atomic uint32_t *m = mmap(NULL, attach_page_size, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		m = &lifecycle_mark_refused;
	} else if (madvise((void *)m, attach_page_size, MADV_WIPEONFORK) != 0) {
		munmap((void *)m, attach_page_size);
		m = &lifecycle_mark_refused;
	} else {
		atomic_store_explicit(m, 1, memory_order_relaxed);
	}
	atomic_store_explicit(&lifecycle_mark, m, memory_order_relaxed);
}

/* A settled child's own mark: its page (inherited, wiped) holds 1 again, for its children. */
static void lifecycle_mark_rearm(void)
{
	_Atomic uint32_t *m = atomic_load_explicit(&lifecycle_mark, memory_order_relaxed);
	if (m != &lifecycle_mark_unarmed && m != &lifecycle_mark_refused)
		atomic_store_explicit(m, 1, memory_order_relaxed);
}

/* Whether this process shares its descriptor table with its parent (clone with CLONE_FILES
 * but not CLONE_VM): then every descriptor the shim holds or opens is the parent's too.
 * kcmp(2); false when it cannot tell (no such call: a copy, as fork makes). */
static bool lifecycle_files_shared(void)
{
	pid_t parent = getppid();
	return parent > 0 && syscall(SYS_kcmp, getpid(), parent, 2 /* KCMP_FILES */, 0, 0) == 0;
}

/* ---- connecting ------------------------------------------------------------------------- */

static void lifecycle_comm(char *out, size_t cap)
{
	memset(out, 0, cap);
	/* In the main thread (the constructor, every start) its name is the process's comm:
	 * one prctl, where /proc/self/comm took three syscalls and a path walk. Another thread
	 * (a reconnect) may have a name of its own. */
	char name16[16] = { 0 };
	if (gettid() == getpid() && prctl(PR_GET_NAME, (unsigned long)name16, 0, 0, 0) == 0 &&
	    name16[0]) {
		size_t n = strnlen(name16, sizeof(name16) - 1);
		memcpy(out, name16, n < cap - 1 ? n : cap - 1);
		return;
	}
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

/*
 * Connect and send HELLO with the memfd (made first if the process has none, or if the
 * program closed ours: then earlier rings are forgotten). Called by the one thread that moved
 * the state to ATTACHING (or by the constructor). Returns 0 when ATTACHED.
 */
static int lifecycle_connect(uint64_t flags)
{
	struct attach_fd sock;
	int rc = attach_connect(lifecycle_path, &sock);
	if (rc)
		return rc;
	if (!attach_fd_owned(&link_mem)) {
		bool had = link_mem.fd >= 0;
		link_mem.fd = -1;
		if (had) {
			/* The program closed the memfd: its rings cannot be re-sent. Threads
			 * re-claim rings in the new one (generation change). */
			emit_forget_all();
			flags &= ~LLGO_HELLO_REATTACH;
		}
		lifecycle_mark_arm();
		rc = lifecycle_new_memfd();
		if (rc) {
			attach_fd_close(&sock);
			return rc;
		}
	}
	struct llgo_msg_hello hello;
	memset(&hello, 0, sizeof(hello));
	attach_header(&hello.h, LLGO_MSG_HELLO, sizeof(hello));
	hello.pid = (uint32_t)getpid();
	hello.ring_data_size = emit_data_size();
	hello.rate_word = atomic_load_explicit(&attach_ctl.want_rate_word, memory_order_relaxed);
	hello.flags = flags | LLGO_HELLO_NO_ACK | LLGO_HELLO_MEMFD | stackcopy_hello_flags();
	if (flags & LLGO_HELLO_FORKED)
		hello.ppid = (uint32_t)getppid();
	lifecycle_comm(hello.comm, sizeof(hello.comm));
	rc = attach_sendmsg(&sock, &hello, sizeof(hello), link_mem.fd);
	if (rc) {
		attach_fd_close(&sock);
		return rc;
	}
	link_sock = sock;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	link_daemon_pid =
		getsockopt(sock.fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 ? cred.pid : 0;
	atomic_store_explicit(&lifecycle_pid, getpid(), memory_order_relaxed);
	link_backoff_ns = LINK_BACKOFF_MIN_NS;
	atomic_store_explicit(&lifecycle_adopt_seen,
			      atomic_load_explicit(&attach_ctl.adopt_gen, memory_order_relaxed),
			      memory_order_relaxed);
	atomic_store_explicit(&lifecycle_check_ns, attach_now_ns() + LIFECYCLE_CHECK_NS,
			      memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.rate_word,
			      atomic_load_explicit(&attach_ctl.want_rate_word, memory_order_relaxed),
			      memory_order_relaxed);
	link_set(LLGO_SHIM_ATTACHED);
	return 0;
}

/* LOST -> ATTACHING -> ATTACHED | LOST, by the one thread that wins the CAS. */
static void lifecycle_reconnect(void)
{
	uint32_t expect = LLGO_SHIM_LOST;
	if (!atomic_compare_exchange_strong_explicit(&link_st, &expect, LLGO_SHIM_ATTACHING,
						     memory_order_acq_rel, memory_order_relaxed))
		return;
	atomic_store_explicit(&attach_ctl.shim_state, LLGO_SHIM_ATTACHING, memory_order_relaxed);
	/*
	 * The old socket is closed only here, by the thread that holds ATTACHING; a thread that
	 * saw ATTACHED an instant ago may still be inside attach_sendmsg on it. Its identity
	 * check ran before; the window in which the program could reuse the number between that
	 * check and the send is a few instructions long.
	 */
	attach_fd_close(&link_sock);
	uint64_t flags = link_hello_flags;
	int rc = lifecycle_connect(flags);
	if (rc == 0) {
		link_hello_flags = 0;
		if (flags & LLGO_HELLO_REATTACH)
			atomic_fetch_add_explicit(&attach_ctl.reconnects, 1, memory_order_relaxed);
		/* the live-object table again, for this connection's session (live.c) */
		live_resend();
		link_say("attached to ", lifecycle_path);
		return;
	}
	link_schedule_retry();
	link_set(LLGO_SHIM_LOST);
}

bool lifecycle_ready_slow(struct llgo_heap_thread *t)
{
	uint32_t st = link_state();
	if (st == LLGO_SHIM_ATTACHED) {
		/* (lifecycle_ready counted this call, unless the state changed meanwhile) */
		if (t->ready_calls < LIFECYCLE_CHECK_EVERY)
			return true;
		t->ready_calls = 0;
		uint64_t now = attach_now_ns();
		uint64_t due = atomic_load_explicit(&lifecycle_check_ns, memory_order_relaxed);
		if (llgo_likely(now < due) ||
		    !atomic_compare_exchange_strong_explicit(&lifecycle_check_ns, &due,
							     now + LIFECYCLE_CHECK_NS,
							     memory_order_relaxed,
							     memory_order_relaxed))
			return true;
		void (*tick)(void) = atomic_load_explicit(&lifecycle_tick, memory_order_acquire);
		if (tick)
			tick();
		if (!attach_peer_gone(&link_sock))
			return true;
		link_lose("connection closed");
		st = link_state();
		/* a daemon that took us back already (adopt_gen): reconnect right away below */
	}
	if (st == LLGO_SHIM_LOST) {
		uint64_t adopt = atomic_load_explicit(&attach_ctl.adopt_gen, memory_order_relaxed);
		if (attach_now_ns() >=
			    atomic_load_explicit(&link_retry_ns, memory_order_relaxed) ||
		    adopt != atomic_load_explicit(&lifecycle_adopt_seen, memory_order_relaxed))
			lifecycle_reconnect();
		return link_state() == LLGO_SHIM_ATTACHED;
	}
	/* OFF: existing rings take records (no syscall); nothing else happens. */
	return st == LLGO_SHIM_OFF && t->ring.hdr;
}

static void lifecycle_bye(uint16_t type);

/* Before the filter reaches the kernel: the last syscalls the shim may make. The daemon
 * reads our mappings once more while we wait (BYE, at most what exit waits), else a process
 * that exits soon after sandboxing itself, before the daemon handled its HELLO, leaves a
 * profile of bare addresses (it cannot wait for the daemon at exit any more). */
void lifecycle_sandboxed(void)
{
	lifecycle_settled(&llgo_heap_tls);
	if (link_state() == LLGO_SHIM_ATTACHED &&
	    atomic_load_explicit(&lifecycle_pid, memory_order_relaxed) == getpid())
		lifecycle_bye(LLGO_MSG_BYE);
	link_set(LLGO_SHIM_OFF);
}

/* ---- threads ---------------------------------------------------------------------------- */

static void lifecycle_seed(struct llgo_heap_thread *t)
{
	if (link_state() != LLGO_SHIM_OFF)
		t->tid = (uint32_t)gettid();
	t->rng = sample_rng_seed(((uint64_t)t->tid << 32) ^ (uint64_t)(uintptr_t)t ^ t->rng,
				 attach_now_ns());
	t->gen = emit_generation();
	t->inited = 1;
}

void lifecycle_thread_start(struct llgo_heap_thread *t, uintptr_t frame)
{
	t->guard = 1;
	pthread_attr_t attr;
	void *addr = NULL;
	size_t size = 0;
	/* Outside any allocation: glibc's lock and its allocations are harmless here (they are
	 * not sampled: guard). */
	if (link_state() != LLGO_SHIM_OFF && pthread_getattr_np(pthread_self(), &attr) == 0) {
		if (pthread_attr_getstack(&attr, &addr, &size) != 0)
			addr = NULL;
		pthread_attr_destroy(&attr);
	}
	/* Every frame of the program is below the wrapper's frame record; the record itself is
	 * the last one walked (its return address is in the thread library's start). */
	t->stack_hi = frame + 2 * sizeof(uintptr_t);
	t->stack_lo = addr && (uintptr_t)addr < frame ? (uintptr_t)addr : frame - (8u << 20);
	t->stack_end = addr && (uintptr_t)addr + size > frame ? (uintptr_t)addr + size : 0;
	t->bounded = 1;
	lifecycle_seed(t);
	t->guard = 0;
}

void lifecycle_thread_adopt(struct llgo_heap_thread *t)
{
	lifecycle_seed(t);
}

/* The main thread: every frame of it lies below the stack pointer _start was entered with. */
static void lifecycle_main_thread(void)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uintptr_t hi = (uintptr_t)__libc_stack_end;
	struct rlimit rl;
	uint64_t size = 8u << 20;
	if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		size = rl.rlim_cur;
	if (size > (1ull << 30))
		size = 1ull << 30;
	if (hi) {
		t->stack_hi = hi;
		t->stack_end = hi + 64; /* argc and argv: _start's frame, for stack copies */
		t->stack_lo = hi > size ? hi - (uintptr_t)size : 0;
		t->bounded = 1;
	}
	lifecycle_seed(t);
}

/* ---- fork ------------------------------------------------------------------------------- */

static void lifecycle_atfork_prepare(void)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	t->fork_pid = (uint32_t)atomic_load_explicit(&lifecycle_self, memory_order_relaxed);
	t->forking = 1;
}

static void lifecycle_atfork_parent(void)
{
	llgo_heap_tls.forking = 0;
}

/* In the child, inside fork(): close what a daemon could mistake for the child's own, and
 * write nothing (see the top of this file). */
static void lifecycle_atfork_child(void)
{
	/* forking 2: fork() has returned in this child (TLS: the page is the thread's own,
	 * written by fork's child path anyway) */
	llgo_heap_tls.forking = 2;
	uint32_t st = link_state();
	if (st == LLGO_SHIM_DETACHED || st == LLGO_SHIM_OFF)
		return;
	attach_fd_drop(&link_sock);
	attach_fd_drop(&link_mem);
	live_fork_drop();
}

/* The child's deferred part of fork. Order matters: the parent's page goes first (no daemon
 * write reaches us after), then its rings (never mapped here: MADV_DONTFORK), then its
 * descriptors (closed by the handler if they were ours, and forgotten here: their
 * numbers may name the program's files by now: closed here only if still ours, which they
 * are when the child allocates before fork() ran its handler). raw: no fork handler ran
 * (clone or clone3 without CLONE_VM); such a child that shares its parent's descriptor table
 * (CLONE_FILES) can neither close the parent's descriptors nor open its own without putting
 * them in the parent's table: it forgets them and stays OFF at rate 0. */
static void lifecycle_fork_settle(bool raw)
{
	atomic_store_explicit(&lifecycle_self, getpid(), memory_order_relaxed);
	uint32_t st = link_state();
	bool shared = false;
	if (st != LLGO_SHIM_DETACHED && st != LLGO_SHIM_OFF) {
		shared = raw && lifecycle_files_shared();
		lifecycle_private_ctl();
		atomic_store_explicit(&attach_ctl.ring_count, 0, memory_order_relaxed);
		atomic_store_explicit(&attach_ctl.lost_no_ring, 0, memory_order_relaxed);
		atomic_store_explicit(&attach_ctl.lost_detached, 0, memory_order_relaxed);
		atomic_store_explicit(&attach_ctl.reconnects, 0, memory_order_relaxed);
		atomic_store_explicit(&attach_ctl.rate_word,
				      shared ? 0
					     : atomic_load_explicit(&attach_ctl.want_rate_word,
								    memory_order_relaxed),
				      memory_order_relaxed);
		emit_forget_all();
		if (shared) {
			attach_fd_forget(&link_sock);
			attach_fd_forget(&link_mem);
			link_say("not attached: ", "shares its parent's descriptor table");
			link_set(LLGO_SHIM_OFF);
		} else {
			attach_fd_close(&link_sock); /* (if the handler has not run yet) */
			attach_fd_close(&link_mem);
			link_hello_flags = LLGO_HELLO_FORKED;
			link_backoff_ns = LINK_BACKOFF_MIN_NS;
			atomic_store_explicit(&link_retry_ns, 0, memory_order_relaxed);
			link_set(LLGO_SHIM_LOST);
		}
	}
	live_fork_child(!shared);
	lifecycle_mark_rearm();
}

void lifecycle_fork_check(struct llgo_heap_thread *t)
{
	pid_t me = getpid();
	if (t->forking == 1 && (uint32_t)me == t->fork_pid)
		return; /* the parent, between fork()'s prepare and parent handlers */
	/* Once per process: the child's only thread, unless it nests (a signal handler
	 * allocating inside the settle, which then goes on with what it has). The flag is
	 * released after, so that this child's own children settle in turn. */
	if (atomic_load_explicit(&lifecycle_self, memory_order_acquire) != me &&
	    !atomic_exchange_explicit(&lifecycle_settling, 1, memory_order_acq_rel)) {
		uint8_t guard = t->guard;
		t->guard = 1;
		lifecycle_fork_settle(t->forking == 0);
		t->guard = guard;
		atomic_store_explicit(&lifecycle_settling, 0, memory_order_release);
	}
	/* still inside fork() (1): stay so until the child handler, so that nothing is recorded */
	if (t->forking == 2)
		t->forking = 0;
}

/* ---- load and exit ---------------------------------------------------------------------- */

/* Whether the process starts under a seccomp filter (set by a parent, systemd's
 * SystemCallFilter=): then any of our syscalls may kill it, so the shim stays OFF. */
static bool lifecycle_filtered_at_start(void)
{
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[4096];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	const char *p = strstr(buf, "\nSeccomp:");
	if (!p)
		return false;
	p += 9;
	while (*p == ' ' || *p == '\t')
		p++;
	return *p != '0';
}

static uint64_t lifecycle_parse_rate(const char *s)
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

static void lifecycle_socket_path(void)
{
	const char *env = getenv("LLGO_HEAP_SOCKET");
	const char *dir = getenv("XDG_RUNTIME_DIR");
	char path[sizeof(lifecycle_path) + 64];
	size_t n = 0;
	if (env && *env) {
		n = strnlen(env, sizeof(path) - 1);
		memcpy(path, env, n);
	} else if (geteuid() == 0) {
		n = strlen("/run/llgo-heapd/llgo-heapd.sock");
		memcpy(path, "/run/llgo-heapd/llgo-heapd.sock", n);
	} else {
		if (dir && *dir) {
			n = strnlen(dir, sizeof(lifecycle_path));
			if (n >= sizeof(lifecycle_path))
				return;
			memcpy(path, dir, n);
		} else { /* where systemd-logind puts XDG_RUNTIME_DIR */
			memcpy(path, "/run/user/", 10);
			n = 10 + link_utoa(path + 10, (unsigned)geteuid());
		}
		memcpy(path + n, "/llgo-heapd.sock", 16);
		n += 16;
	}
	if (n >= sizeof(lifecycle_path))
		return; /* does not fit in sun_path: no daemon */
	memcpy(lifecycle_path, path, n);
	lifecycle_path[n] = '\0';
}

__attribute__((constructor(102))) static void lifecycle_init(void)
{
	/* before fork's handlers and the process mark: nothing needs the check until then */
	link_on_settle(lifecycle_fork_check);
	const char *dbg = getenv("LLGO_HEAP_DEBUG");
	link_debug = dbg && dbg[0] == '1';
	atomic_store_explicit(&lifecycle_self, getpid(), memory_order_relaxed);
	if (!owner_elect()) { /* another copy of the shim samples this process (owner.c) */
		link_say("not attached: ", "another copy of the sampler is active");
		return;
	}
	unsigned long page = getauxval(AT_PAGESZ);
	if (llgo_page_size_ok(page))
		attach_page_size = (uint32_t)page;
	attach_clock_init();
	stack_init();
	uint64_t rate = lifecycle_parse_rate(getenv("LLGO_HEAP_RATE"));
	emit_init(rate);
	lifecycle_main_thread();
	pthread_atfork(lifecycle_atfork_prepare, lifecycle_atfork_parent, lifecycle_atfork_child);
	lifecycle_socket_path();
	if (!lifecycle_path[0] || attach_page_size > ATTACH_AREA_SIZE)
		return;
	if (lifecycle_filtered_at_start()) {
		link_say("not attached: ", "the process runs under a seccomp filter");
		link_set(LLGO_SHIM_OFF);
		return;
	}
	atomic_store_explicit(&attach_ctl.want_rate_word, llgo_rate_to_word(rate),
			      memory_order_relaxed);
	if (lifecycle_loaded_late()) {
		/* dlopen'ed into a running process (llgo-heap attach, or a plugin that only
		 * hooks): connect at the first sample or at lifecycle_attach_now, not here (an
		 * attach names its own daemon). From here on, slow paths pass the gate. */
		atomic_store_explicit(&link_late, 1, memory_order_relaxed);
		link_hello_flags = 0;
		atomic_store_explicit(&link_retry_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&attach_ctl.rate_word, llgo_rate_to_word(rate),
				      memory_order_relaxed);
		link_set(LLGO_SHIM_LOST);
		return;
	}
	uint64_t adds = lifecycle_adds();
	int rc = lifecycle_connect(0);
	if (rc == 0) {
		lifecycle_adds_at_attach = adds;
		link_say("attached to ", lifecycle_path);
		return;
	}
	link_say_err(lifecycle_path, rc);
	if (rc == -ECONNREFUSED || rc == -EAGAIN) {
		/* A socket nobody accepts on (a daemon restarting) or a full backlog: count the
		 * samples and retry from the slow path, as after a loss. */
		link_hello_flags = 0;
		link_schedule_retry();
		atomic_store_explicit(&attach_ctl.rate_word, llgo_rate_to_word(rate),
				      memory_order_relaxed);
		link_set(LLGO_SHIM_LOST);
	}
}

/* ---- llgo-heap attach and detach (override_got.c) ------------------------------------------ */

void (*_Atomic lifecycle_tick)(void);

/* Whether this copy was loaded after the process started (dlopen), rather than preloaded, a
 * dependency of the program, or linked into it: then neither is the program this copy's
 * object, nor does its global scope bind malloc or the API to this copy. */
static bool lifecycle_loaded_late(void)
{
	Dl_info mine, exe, d;
	if (!dladdr((void *)(uintptr_t)lifecycle_loaded_late, &mine) || !mine.dli_fbase)
		return false;
	void *phdr = (void *)(uintptr_t)getauxval(AT_PHDR);
	if (phdr && dladdr(phdr, &exe) && exe.dli_fbase == mine.dli_fbase)
		return false;
	void *main = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
	if (!main)
		return false;
	bool late = true;
	const char *names[] = { "malloc", "llgo_heap_sample_slow" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(names) && late; i++) {
		void *f = dlsym(main, names[i]);
		late = !(f && dladdr(f, &d) && d.dli_fbase == mine.dli_fbase);
	}
	dlclose(main);
	return late;
}

int lifecycle_attach_now(const char *path, uint64_t rate)
{
	if (!atomic_load_explicit(&link_late, memory_order_relaxed))
		return -EEXIST;
	uint32_t st = link_state();
	if (st == LLGO_SHIM_OFF)
		return -EPERM;
	if (st != LLGO_SHIM_LOST && st != LLGO_SHIM_DETACHED)
		return -EALREADY;
	if (path && (!*path || strnlen(path, sizeof(lifecycle_path)) >= sizeof(lifecycle_path)))
		return -ENAMETOOLONG;
	if (!atomic_compare_exchange_strong_explicit(&link_st, &st, LLGO_SHIM_ATTACHING,
						     memory_order_acq_rel, memory_order_relaxed))
		return -EALREADY;
	atomic_store_explicit(&attach_ctl.shim_state, LLGO_SHIM_ATTACHING, memory_order_relaxed);
	if (path) {
		memset(lifecycle_path, 0, sizeof(lifecycle_path));
		memcpy(lifecycle_path, path, strlen(path));
	}
	if (rate > LLGO_RATE_MAX)
		rate = LLGO_RATE_MAX;
	/* Without a memfd there is no ring (a first attach, or after a detach): their size may
	 * follow this rate. A copy that connected on its own before (a plugin's hook) and lost
	 * its daemon keeps its rings and re-sends them (link_hello_flags: REATTACH). */
	if (link_mem.fd < 0)
		emit_init(rate);
	atomic_store_explicit(&attach_ctl.want_rate_word, llgo_rate_to_word(rate),
			      memory_order_relaxed);
	link_gate_open();
	attach_fd_close(&link_sock);
	uint64_t adds = lifecycle_adds();
	int rc = lifecycle_connect(link_hello_flags);
	if (rc) {
		atomic_store_explicit(&attach_ctl.rate_word, 0, memory_order_relaxed);
		link_set(LLGO_SHIM_DETACHED);
		link_say_err(lifecycle_path, rc);
		return rc;
	}
	lifecycle_adds_at_attach = adds;
	link_hello_flags = 0;
	link_say("attached to ", lifecycle_path);
	return 0;
}

int lifecycle_detach(void)
{
	/* rate 0 first: calls through pointers the program took while attached (&malloc) go
	 * straight to the real functions from now on */
	atomic_store_explicit(&attach_ctl.want_rate_word, 0, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.rate_word, 0, memory_order_relaxed);
	bool quiet = link_gate_close();
	/* Every record published before the gate closed is drained by the daemon before END. */
	if (link_state() == LLGO_SHIM_ATTACHED &&
	    atomic_load_explicit(&lifecycle_pid, memory_order_relaxed) == getpid())
		lifecycle_bye(LLGO_MSG_DETACH);
	link_set(LLGO_SHIM_DETACHED);
	attach_fd_close(&link_sock);
	emit_release(quiet);
	live_release(quiet);
	/* the control page becomes private memory again, rate 0, counters for the next session
	 * at 0 */
	lifecycle_private_ctl();
	atomic_store_explicit(&attach_ctl.rate_word, 0, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.lost_no_ring, 0, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.lost_detached, 0, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.reconnects, 0, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.ring_count, 0, memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.daemon_beat, 0, memory_order_relaxed);
	if (quiet)
		attach_fd_close(&link_mem);
	else
		attach_fd_forget(&link_mem); /* a ring may still be made in it: left open */
	link_say("detached from ", lifecycle_path);
	return quiet ? 0 : -EBUSY;
}

/* Whether a daemon that has not answered yet is working (on us or on others): it touched
 * our page, used CPU, or one of its threads runs or waits to run since the last look. A
 * stopped daemon (T), a dead one, and one that neither runs nor uses CPU (hung, or idle and
 * not reading) are not. */
static bool lifecycle_daemon_working(uint32_t *beat, uint64_t *ticks)
{
	uint32_t b = atomic_load_explicit(&attach_ctl.daemon_beat, memory_order_relaxed);
	bool moved = b != *beat;
	*beat = b;
	char st;
	uint64_t t;
	if (!link_daemon_stat(&st, &t))
		return moved;
	bool ran = t != *ticks;
	*ticks = t;
	if (st == 'T' || st == 't' || st == 'Z' || st == 'X')
		return false;
	return moved || ran || link_daemon_runnable();
}

static int lifecycle_adds_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
		*(uint64_t *)data = info->dlpi_adds;
	return 1;
}

/* Objects loaded so far (dlopen included); UINT64_MAX when unknown. */
static uint64_t lifecycle_adds(void)
{
	uint64_t adds = UINT64_MAX;
	dl_iterate_phdr(lifecycle_adds_cb, &adds);
	return adds;
}

static void lifecycle_exit_entered(void);

/* Runs after the program's destructors and atexit handlers (a low number runs last among
 * destructors), and from _exit (override_thread.c: fork children often leave that way);
 * calling it again, or from a vfork child (which shares our memory and socket), does
 * nothing. */
__attribute__((destructor(101))) void lifecycle_exit(void)
{
	if (!link_enter())
		return; /* a detach is giving the rings back */
	lifecycle_exit_entered();
	link_leave();
}

static void lifecycle_exit_entered(void)
{
	static _Atomic int done;
	if (link_state() != LLGO_SHIM_ATTACHED ||
	    atomic_load_explicit(&lifecycle_pid, memory_order_relaxed) != getpid() ||
	    atomic_exchange(&done, 1))
		return;
	/* The daemon drains our rings after we are gone (it holds them mapped); it needs us
	 * alive only for our mappings: not at all once it has read them (daemon_beat) and no
	 * record it has not drained can hold a pc of an object loaded since (dlopen). */
	bool drained = emit_all_drained();
	if (atomic_load_explicit(&attach_ctl.daemon_beat, memory_order_relaxed) &&
	    !atomic_load_explicit(&attach_ctl.maps_stale, memory_order_relaxed) &&
	    (drained || (lifecycle_adds_at_attach != UINT64_MAX &&
			 lifecycle_adds() == lifecycle_adds_at_attach)))
		return;
	if (drained && !atomic_load_explicit(&attach_ctl.maps_stale, memory_order_relaxed) &&
	    !atomic_load_explicit(&attach_ctl.ring_count, memory_order_relaxed))
		return; /* nothing was ever sampled */
	lifecycle_bye(LLGO_MSG_BYE);
}

/* BYE (or DETACH), then wait for END as described above lifecycle_exit: the daemon has
 * drained the rings and read the mappings once more while the process still has them. */
static void lifecycle_bye(uint16_t type)
{
	struct llgo_msg_header bye;
	attach_header(&bye, type, sizeof(bye));
	if (link_send(&bye, sizeof(bye)) != 0)
		return;
	union {
		struct llgo_msg_end end;
		unsigned char bytes[512];
	} in;
	/* A stopped or hung daemon costs LIFECYCLE_BYE_WAIT_MS; one that is working (a busy
	 * daemon on a loaded machine may not have reached our HELLO yet) is given up to
	 * LIFECYCLE_BYE_WAIT_MAX_MS. */
	uint32_t beat = atomic_load_explicit(&attach_ctl.daemon_beat, memory_order_relaxed);
	uint64_t ticks = 0;
	char st;
	if (!link_daemon_stat(&st, &ticks))
		ticks = 0;
	for (int waited = 0; waited < LIFECYCLE_BYE_WAIT_MAX_MS; waited += LIFECYCLE_BYE_WAIT_MS) {
		if (attach_recv(&link_sock, &in, sizeof(in), LLGO_MSG_END,
				LIFECYCLE_BYE_WAIT_MS) != -ETIMEDOUT)
			return;
		if (!lifecycle_daemon_working(&beat, &ticks))
			return;
	}
}
