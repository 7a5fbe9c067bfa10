// SPDX-License-Identifier: MIT
/*
 * life_clone.c: children made by raw clone(2) and clone3(2) system calls, which run none of
 * fork()'s handlers (pthread_atfork), after the parent has sampled; for the lifecycle tests.
 * Usage:
 *   life_clone K
 * The parent makes K allocations of 100 bytes at parent_site and 256 of 64 KiB at big_site
 * (sampled at the default rate too), and keeps K objects of 64 bytes from keep_site alive;
 * then, one after the other:
 *   - syscall(SYS_clone, SIGCHLD, 0, ...): a copy of the address space, like fork();
 *   - syscall(SYS_clone3, {.exit_signal = SIGCHLD}): the same through clone3 (skipped with
 *     "clone3 unsupported" when the kernel or a filter refuses it);
 *   - syscall(SYS_clone, CLONE_FILES | SIGCHLD, 0, ...): a copy of the address space that
 *     shares the parent's descriptor table;
 *   - clone(fn, stack, CLONE_VM | CLONE_VFORK | SIGCHLD): the parent's memory and thread
 *     state shared (as posix_spawn's child), the parent suspended until the child exits.
 * The first three children free their copies of the parent's kept objects (allocated and
 * sampled by the parent), make K allocations of 200 (clone), 300 (clone3) or 500 (files)
 * bytes at clone_site / clone3_site / files_site and 4 * K of 1 to 64 KiB at churn_site
 * (freed as they go), print "child KIND PID done" and leave with _exit(41) / _exit(42) /
 * _exit(44). The CLONE_VM child makes K / 10
 * allocations of 400 bytes at vfork_site and returns 43 (its thread's exit). The parent prints
 * "KIND PID STATUS" (the wait status) for each, then K more allocations at parent_site, and
 * "site parent_site 100 COUNT", "site big_site 65536 256", "site keep_site 64 COUNT" (its
 * kept objects, still live), "ready", and
 * stays until its stdin closes (the test takes its snapshot then).
 */
#define _GNU_SOURCE
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static int k = 1000;
static void **kept;

__attribute__((noinline)) void parent_site(void) { void *p = malloc(100); KEEP(p); free(p); }
__attribute__((noinline)) void big_site(void) { void *p = malloc(65536); KEEP(p); free(p); }
__attribute__((noinline)) void *keep_site(void) { void *p = malloc(64); KEEP(p); return p; }
__attribute__((noinline)) void clone_site(void) { void *p = malloc(200); KEEP(p); free(p); }
__attribute__((noinline)) void clone3_site(void) { void *p = malloc(300); KEEP(p); free(p); }
__attribute__((noinline)) void files_site(void) { void *p = malloc(500); KEEP(p); free(p); }
__attribute__((noinline)) void vfork_site(void) { void *p = malloc(400); KEEP(p); free(p); }

__attribute__((noinline)) void churn_site(size_t n)
{
	char *p = malloc(n);
	KEEP(p);
	if (p)
		p[n - 1] = 1;
	free(p);
}

static void say(const char *line)
{
	/* write(2), not stdio: the parent's buffer is in the children's copies */
	size_t n = strlen(line);
	if (write(1, line, n) != (ssize_t)n)
		_exit(99);
}

/* A child with a copy of the parent's memory: frees the inherited objects, allocates. */
static void child(const char *kind, int status)
{
	for (int i = 0; i < k; i++)
		free(kept[i]);
	for (int i = 0; i < k; i++) {
		if (status == 41)
			clone_site();
		else if (status == 42)
			clone3_site();
		else
			files_site();
	}
	for (int i = 0; i < 4 * k; i++)
		churn_site(1024u + (size_t)(i % 64) * 1024u);
	char line[64];
	snprintf(line, sizeof(line), "child %s %d done\n", kind, (int)getpid());
	say(line);
	_exit(status);
}

static void report(const char *kind, pid_t pid)
{
	int st = -1;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		st = -1;
	char line[64];
	snprintf(line, sizeof(line), "%s %d %d\n", kind, (int)pid, st);
	say(line);
}

static int vfork_child(void *arg)
{
	(void)arg;
	for (int i = 0; i < k / 10; i++)
		vfork_site();
	return 43;
}

int main(int argc, char **argv)
{
	alarm(120);
	k = argc > 1 ? atoi(argv[1]) : 1000;
	if (k < 10)
		k = 10;
	kept = calloc((size_t)k, sizeof(*kept));
	if (!kept)
		return 1;
	for (int i = 0; i < k; i++)
		parent_site();
	for (int i = 0; i < 256; i++)
		big_site();
	for (int i = 0; i < k; i++)
		kept[i] = keep_site();

	long pid = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
	if (pid == 0)
		child("clone", 41);
	report("clone", (pid_t)pid);

#ifdef SYS_clone3
	struct clone_args ca;
	memset(&ca, 0, sizeof(ca));
	ca.exit_signal = SIGCHLD;
	pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid == 0)
		child("clone3", 42);
	if (pid < 0)
		say("clone3 unsupported\n");
	else
		report("clone3", (pid_t)pid);
#else
	say("clone3 unsupported\n");
#endif

	pid = syscall(SYS_clone, (long)(CLONE_FILES | SIGCHLD), 0L, 0L, 0L, 0L);
	if (pid == 0)
		child("files", 44);
	report("files", (pid_t)pid);

	size_t stack_size = 256u << 10;
	char *stack = malloc(stack_size);
	if (!stack)
		return 1;
	pid = clone(vfork_child, stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
	report("vfork", (pid_t)pid);
	free(stack);

	for (int i = 0; i < k; i++)
		parent_site();
	char line[160];
	snprintf(line, sizeof(line), "site parent_site 100 %d\nsite big_site 65536 256\n"
		 "site keep_site 64 %d\nready\n", 2 * k,
		 k);
	say(line);
	char c;
	while (read(0, &c, 1) > 0)
		;
	for (int i = 0; i < k; i++)
		free(kept[i]);
	free(kept);
	return 0;
}
