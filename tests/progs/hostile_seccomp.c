// SPDX-License-Identifier: MIT
/*
 * hostile_seccomp.c: a program that sandboxes itself with a seccomp allow-list, for
 * test_hostile.c. Usage: hostile_seccomp prctl|syscall K
 *   K allocations of 40 bytes at pre_site, then a filter installed with
 *   prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER) or syscall(SYS_seccomp, ...) that allows only
 *   read, write, exit, exit_group, brk, mmap, munmap, futex, rt_sigreturn, madvise and
 *   mprotect and kills the process (SIGSYS) on anything else; then K allocations of 40 bytes
 *   at sandboxed_site plus some large ones (mmap'ed by malloc), a line of output, and a
 *   normal exit (exit(0): atexit handlers and destructors run under the filter).
 * Prints "pre K" before the filter, "sandboxed" once the filter is in and "done N" at the end.
 */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void pre_site(void) { void *p = malloc(40); KEEP(p); free(p); }
__attribute__((noinline)) void sandboxed_site(void) { void *p = malloc(40); KEEP(p); free(p); }

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
	BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

int main(int argc, char **argv)
{
	const char *how = argc > 1 ? argv[1] : "prctl";
	long k = argc > 2 ? atol(argv[2]) : 1000;
	for (long i = 0; i < k; i++)
		pre_site();
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		ALLOW(__NR_read), ALLOW(__NR_write), ALLOW(__NR_exit), ALLOW(__NR_exit_group),
		ALLOW(__NR_brk), ALLOW(__NR_mmap), ALLOW(__NR_munmap), ALLOW(__NR_futex),
		ALLOW(__NR_rt_sigreturn), ALLOW(__NR_madvise), ALLOW(__NR_mprotect),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
		perror("PR_SET_NO_NEW_PRIVS");
		return 2;
	}
	/* stdout's buffer is made now (its first use calls fstat, which the filter forbids) */
	printf("pre %ld\n", k);
	fflush(stdout);
	int rc = strcmp(how, "syscall") == 0
			 ? (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog)
			 : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
	if (rc != 0) {
		perror("seccomp");
		return 2;
	}
	static const char msg[] = "sandboxed\n";
	if (write(1, msg, sizeof(msg) - 1) < 0)
		return 3;
	long sum = 0;
	for (long i = 0; i < k; i++)
		sandboxed_site();
	for (int i = 0; i < 16; i++) {
		char *p = malloc(1u << 20); /* above the mmap threshold: mmap/munmap */
		if (!p)
			return 4;
		memset(p, i, 4096);
		sum += p[100];
		free(p);
	}
	printf("done %ld\n", sum + k);
	exit(0);
}
