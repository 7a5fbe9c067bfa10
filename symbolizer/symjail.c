// SPDX-License-Identifier: MIT
/*
 * symjail.c: the sandbox of the symbolizer process, entered once at its start, before it
 * reads a byte of a request.
 *
 * In order: no supplementary groups, the gid and uid it is told (llgo-heapd, as root, passes
 * the profiled uid, or a uid of the helper's own for the processes of root, system users and
 * nobody; without CAP_SETUID/CAP_SETGID it stays uid 0, and says so on stderr), the
 * parent-death signal SIGKILL (set after the uid changes, which clears it; if the daemon is
 * already gone we stop here), every capability dropped (the
 * permitted, effective, inheritable and ambient sets, and the bounding set where we may),
 * not dumpable, PR_SET_NO_NEW_PRIVS, resource limits (no core files, at most max_files
 * descriptors, max_bytes of address space), then a seccomp filter. The filter allows what
 * reading files already open and answering on the socket takes: read/write and their vector
 * and positioned forms, sendmsg/recvmsg, poll, lseek, fstat, fcntl, close, memory (mmap and
 * mprotect only without PROT_EXEC), futex, signals to itself (abort), clocks and exit. Any
 * other call fails with EPERM: no open, no socket, no exec, no ptrace, no kill of another
 * process. Under a sanitizer no address-space limit is set (the runtimes reserve terabytes).
 *
 * Left to others: what runs inside (symserver.c, symparse.c); choosing the uid (the daemon).
 */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "symjail.h"

#if defined(__x86_64__)
#define SYMJAIL_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SYMJAIL_ARCH AUDIT_ARCH_AARCH64
#else
#error "symjail.c: no seccomp architecture for this target"
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SYMJAIL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SYMJAIL_SANITIZED 1
#endif
#endif
#ifndef SYMJAIL_SANITIZED
#define SYMJAIL_SANITIZED 0
#endif

/* System calls allowed whatever their arguments. */
static const int symjail_allowed[] = {
	__NR_read, __NR_write, __NR_readv, __NR_writev, __NR_pread64, __NR_preadv,
	__NR_lseek, __NR_close, __NR_fstat, __NR_newfstatat, __NR_fcntl, __NR_dup,
	__NR_recvmsg, __NR_sendmsg, __NR_recvfrom, __NR_sendto, __NR_ppoll,
	__NR_munmap, __NR_mremap, __NR_brk, __NR_madvise, __NR_futex,
	__NR_exit, __NR_exit_group, __NR_rt_sigreturn, __NR_rt_sigprocmask, __NR_rt_sigaction,
	__NR_getpid, __NR_gettid, __NR_clock_gettime, __NR_clock_nanosleep, __NR_nanosleep,
	__NR_getrandom, __NR_sched_yield, __NR_sysinfo, __NR_sigaltstack,
#ifdef __NR_poll
	__NR_poll,
#endif
};

/* Calls allowed when their third argument (prot) has no PROT_EXEC. */
static const int symjail_no_exec[] = { __NR_mmap, __NR_mprotect };

#define SYMJAIL_MAX_INSNS 96

static int symjail_filter(pid_t self)
{
	struct sock_filter f[SYMJAIL_MAX_INSNS];
	unsigned n = 0;
	const unsigned nallowed = sizeof(symjail_allowed) / sizeof(symjail_allowed[0]);
	/* another architecture's numbers are refused outright */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, arch));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYMJAIL_ARCH, 1, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, nr));
#ifdef __x86_64__
	/* the x32 ABI's numbers alias ours with this bit set */
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x40000000u, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
#endif
	/* each allowed number jumps to the ALLOW at the end of the list */
	for (unsigned i = 0; i < nallowed; i++)
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      (unsigned)symjail_allowed[i],
						      (unsigned char)(nallowed - i), 0);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	/* mmap, mprotect: not executable */
	for (unsigned i = 0; i < 2; i++)
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
						      (unsigned)symjail_no_exec[i],
						      (unsigned char)(2 - i), 0);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 4, 0, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, args[2]));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 1, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
	/* tgkill: only to ourselves (abort raises SIGABRT so) */
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_tgkill, 0, 3);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, args[0]));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)self, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
	struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0 ? 0 : -errno;
}

/* Empty permitted, effective and inheritable sets. */
static int symjail_drop_caps(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capset, &h, d) != 0)
		return -errno;
	if (syscall(SYS_capget, &h, d) != 0)
		return -errno;
	return d[0].permitted | d[1].permitted | d[0].effective | d[1].effective ? -EPERM : 0;
}

static int symjail_limit(int what, uint64_t value)
{
	struct rlimit r;
	if (getrlimit(what, &r) != 0)
		return -errno;
	if (r.rlim_max != RLIM_INFINITY && r.rlim_max < value)
		value = r.rlim_max;
	r.rlim_cur = r.rlim_max = value;
	return setrlimit(what, &r) == 0 ? 0 : -errno;
}

int symjail_enter(const struct symjail_limits *lim, char *why, size_t whylen)
{
	int err = 0;
	const char *step = "";
#define SYMJAIL_STEP(name, call)                          \
	do {                                              \
		if (!err && (err = (call)) != 0)          \
			step = name;                      \
	} while (0)
	bool root = geteuid() == 0;
	/* while we may still drop it: the bounding set (needs CAP_SETPCAP; EINVAL past the
	 * kernel's last capability) */
	for (int cap = 0; root && cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno == EINVAL)
			break;
	/* a root daemon without CAP_SETUID/CAP_SETGID (an older unit file) cannot give us
	 * another uid: we then stay uid 0, without capabilities, and say so */
	if (root && (setgroups(0, NULL) != 0 || setresgid(lim->gid, lim->gid, lim->gid) != 0 ||
		     setresuid(lim->uid, lim->uid, lim->uid) != 0)) {
		if (errno != EPERM)
			SYMJAIL_STEP("changing uid", -errno);
		else
			fprintf(stderr, "llgo-heap-symbolizer: cannot run as uid %u (no "
					"CAP_SETUID/CAP_SETGID): staying uid 0, without "
					"capabilities\n", (unsigned)lim->uid);
	}
	SYMJAIL_STEP("uid", root && getuid() != geteuid() ? -EPERM : 0);
	/* a stopped helper never reads the daemon's hang-up: SIGKILL reaches it all the same */
	SYMJAIL_STEP("parent-death signal",
		     lim->parent && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 ? -errno : 0);
	SYMJAIL_STEP("parent", lim->parent && getppid() != lim->parent ? -ESRCH : 0);
	SYMJAIL_STEP("ambient capabilities",
		     prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 &&
				     errno != EINVAL
			     ? -errno
			     : 0);
	SYMJAIL_STEP("capabilities", symjail_drop_caps());
	SYMJAIL_STEP("dumpable", prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 ? -errno : 0);
	SYMJAIL_STEP("no_new_privs", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ? -errno : 0);
	SYMJAIL_STEP("RLIMIT_CORE", symjail_limit(RLIMIT_CORE, 0));
	SYMJAIL_STEP("RLIMIT_NOFILE", symjail_limit(RLIMIT_NOFILE, lim->max_files));
	SYMJAIL_STEP("RLIMIT_AS", lim->memory_bytes && !SYMJAIL_SANITIZED
					  ? symjail_limit(RLIMIT_AS, lim->memory_bytes)
					  : 0);
	SYMJAIL_STEP("seccomp", symjail_filter(getpid()));
#undef SYMJAIL_STEP
	if (err)
		snprintf(why, whylen, "%s: %s", step, strerror(-err));
	return err;
}
