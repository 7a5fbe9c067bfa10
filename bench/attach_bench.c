// SPDX-License-Identifier: MIT
/*
 * attach_bench.c: what a process pays after `llgo-heap detach` (docs/performance.md,
 * "Attach and detach"): the instructions of a malloc+free loop in a process that was attached
 * and detached, against the same process never attached. Two counts, since callgrind cannot
 * run a process the CLI attaches to (valgrind's guest has no registers ptrace could set):
 *
 *   attach_bench target N          warm the loop up (N pairs), print "ready ADDR" (the address
 *                                  of attach_bench_measure), read one byte from stdin, warm it
 *                                  up again (the allocator's caches, whatever the shim took from
 *                                  them), run it in attach_bench_measure, print "done"
 *   attach_bench count PID ADDR    the tracer: a breakpoint at ADDR, then single steps through
 *                                  that call (PTRACE_SINGLESTEP: every user-space instruction
 *                                  it executes, syscalls counted as one), printing the count;
 *                                  bench.sh attaches and detaches the target with the CLI
 *                                  before the byte is sent
 *   attach_bench inproc SHIM SOCK RATE N
 *                                  under callgrind: dlopen the shim and call
 *                                  llgo_heap_attach_start and llgo_heap_attach_stop in the
 *                                  process itself (what the CLI makes a stopped thread call),
 *                                  then the loop (--toggle-collect=attach_bench_measure); SHIM
 *                                  "none": never attached
 *
 * The loop allocates and frees blocks of 64 bytes, or with ATTACH_BENCH_WORKLOAD=mixed of
 * 16..1040 bytes (a fixed sequence, as alloc_bench's "mixed" workload).
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

/* 0: blocks of 64 bytes (glibc's tcache alone); 1: 16..1040 bytes */
static int attach_bench_mixed;

__attribute__((noinline)) void attach_bench_loop(long n)
{
	unsigned x = 12345;
	for (long i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		void *p = malloc(attach_bench_mixed ? 16 + (x >> 16) % 1025 : 64);
		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
}

/* The measured call (the warm-up and the attached loop call attach_bench_loop itself). */
__attribute__((noinline)) void attach_bench_measure(long n)
{
	attach_bench_loop(n);
	__asm__ volatile("" ::: "memory");
}

static int target(long n)
{
	attach_bench_loop(n); /* warm: lazy bindings resolved, the allocator's caches full */
	printf("ready %p\n", (void *)attach_bench_measure);
	fflush(stdout);
	char c;
	if (read(0, &c, 1) != 1)
		return 1;
	attach_bench_loop(n); /* the allocator's caches full again, whatever the shim took */
	attach_bench_measure(n);
	printf("done\n");
	fflush(stdout);
	return 0;
}

static int count(pid_t pid, uintptr_t at)
{
	if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) != 0 ||
	    ptrace(PTRACE_INTERRUPT, pid, NULL, NULL) != 0) {
		perror("attach_bench: ptrace");
		return 1;
	}
	int st;
	if (waitpid(pid, &st, __WALL) != pid)
		return 1;
	errno = 0;
	long word = ptrace(PTRACE_PEEKTEXT, pid, (void *)at, NULL);
	if (errno) {
		perror("attach_bench: peek");
		return 1;
	}
	long trap = (word & ~0xffL) | 0xcc;
	if (ptrace(PTRACE_POKETEXT, pid, (void *)at, (void *)trap) != 0 ||
	    ptrace(PTRACE_CONT, pid, NULL, NULL) != 0)
		return 1;
	fprintf(stderr, "armed\n"); /* bench.sh sends the byte now */
	struct user_regs_struct r;
	for (;;) {
		if (waitpid(pid, &st, __WALL) != pid || !WIFSTOPPED(st))
			return 1;
		if (WSTOPSIG(st) == SIGTRAP && (st >> 16) == 0) {
			ptrace(PTRACE_GETREGS, pid, NULL, &r);
			if (r.rip == at + 1)
				break;
		}
		/* anything else (a signal, the group stop of SEIZE): let it go */
		int sig = (st >> 16) ? 0 : WSTOPSIG(st);
		ptrace(PTRACE_CONT, pid, NULL, (void *)(uintptr_t)sig);
	}
	r.rip = at;
	ptrace(PTRACE_POKETEXT, pid, (void *)at, (void *)word);
	ptrace(PTRACE_SETREGS, pid, NULL, &r);
	errno = 0;
	uintptr_t ret = (uintptr_t)ptrace(PTRACE_PEEKDATA, pid, (void *)r.rsp, NULL);
	uint64_t steps = 0;
	for (;;) {
		if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL) != 0 ||
		    waitpid(pid, &st, __WALL) != pid || !WIFSTOPPED(st))
			return 1;
		steps++;
		ptrace(PTRACE_GETREGS, pid, NULL, &r);
		if (r.rip == ret)
			break;
	}
	ptrace(PTRACE_DETACH, pid, NULL, NULL);
	printf("%llu\n", (unsigned long long)steps);
	return 0;
}

static int inproc(const char *shim, const char *sock, uint64_t rate, long n)
{
	attach_bench_loop(n);
	if (strcmp(shim, "none") != 0) {
		void *h = dlopen(shim, RTLD_NOW | RTLD_NODELETE);
		int (*start)(const char *, uint64_t) =
			h ? (int (*)(const char *, uint64_t))dlsym(h, "llgo_heap_attach_start") : NULL;
		int (*stop)(void) = h ? (int (*)(void))dlsym(h, "llgo_heap_attach_stop") : NULL;
		if (!start || !stop) {
			fprintf(stderr, "attach_bench: %s: %s\n", shim, dlerror());
			return 1;
		}
		int a = start(sock, rate);
		attach_bench_loop(n / 10); /* attached: the shim's functions run */
		int d = stop();
		fprintf(stderr, "attach_bench: start %d, stop %d\n", a, d);
		if (a < 0 || d < 0)
			return 1;
	} else {
		attach_bench_loop(n / 10);
	}
	attach_bench_loop(n); /* the allocator's caches full again, whatever the shim took */
	attach_bench_measure(n);
	return 0;
}

int main(int argc, char **argv)
{
	const char *w = getenv("ATTACH_BENCH_WORKLOAD");
	attach_bench_mixed = w && strcmp(w, "mixed") == 0;
	if (argc == 3 && strcmp(argv[1], "target") == 0)
		return target(atol(argv[2]));
	if (argc == 4 && strcmp(argv[1], "count") == 0)
		return count((pid_t)atol(argv[2]), (uintptr_t)strtoull(argv[3], NULL, 0));
	if (argc == 6 && strcmp(argv[1], "inproc") == 0)
		return inproc(argv[2], argv[3], strtoull(argv[4], NULL, 10), atol(argv[5]));
	fprintf(stderr, "usage: attach_bench target N | count PID ADDR | "
			"inproc SHIM|none SOCK RATE N\n");
	return 2;
}
