// SPDX-License-Identifier: MIT
/*
 * host_threads.c: threads that start the way runtimes start them, for test_hostprogs.c.
 * Usage: host_threads THREADS K
 *   - THREADS pthreads whose very first call is pthread_getattr_np(pthread_self()) (as Rust's
 *     std and the JVM do at every thread start: glibc allocates under the thread's own lock
 *     there), then K allocations of 64 bytes at getattr_site;
 *   - one thread made with clone(2) directly (no pthread_create: the shim never saw it start;
 *     it shares the main thread's TLS, so the main thread only waits meanwhile) that makes K
 *     allocations of 80 bytes at clone_site.
 * Prints "site getattr_site 64 N" and "site clone_site 80 N". An alarm ends a hung run
 * (killed by SIGALRM).
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static long k = 1000;
static atomic_long getattr_made, clone_made;

__attribute__((noinline)) void getattr_site(void) { void *p = malloc(64); KEEP(p); free(p); }
__attribute__((noinline)) void clone_site(void) { void *p = malloc(80); KEEP(p); free(p); }

static void *getattr_first(void *arg)
{
	(void)arg;
	pthread_attr_t attr;
	if (pthread_getattr_np(pthread_self(), &attr) != 0)
		return (void *)1;
	void *addr;
	size_t size;
	int bad = pthread_attr_getstack(&attr, &addr, &size) != 0 || size == 0;
	pthread_attr_destroy(&attr);
	for (long i = 0; i < k; i++)
		getattr_site();
	atomic_fetch_add(&getattr_made, k);
	return (void *)(long)bad;
}

static int clone_fn(void *arg)
{
	(void)arg;
	for (long i = 0; i < k; i++)
		clone_site();
	atomic_fetch_add(&clone_made, k);
	return 0;
}

int main(int argc, char **argv)
{
	int nthreads = argc > 1 ? atoi(argv[1]) : 4;
	k = argc > 2 ? atol(argv[2]) : 1000;
	alarm(60);
	int fail = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_t t;
		void *r;
		if (pthread_create(&t, NULL, getattr_first, NULL) != 0 || pthread_join(t, &r) != 0 ||
		    r != NULL)
			fail = 1;
	}
	/* clone(2): a thread of this process with a stack of its own and no pthread structure;
	 * the kernel clears ctid and wakes its futex when the thread is gone. */
	size_t stack_size = 1u << 20;
	char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return 2;
	static _Atomic pid_t ctid;
	atomic_store(&ctid, 1);
	int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
		    CLONE_SYSVSEM | CLONE_CHILD_CLEARTID;
	pid_t tid = clone(clone_fn, stack + stack_size, flags, NULL, NULL, NULL, &ctid);
	if (tid < 0)
		return 3;
	pid_t v;
	while ((v = atomic_load(&ctid)) != 0)
		syscall(SYS_futex, &ctid, FUTEX_WAIT, v, NULL, NULL, 0);
	munmap(stack, stack_size);
	printf("site getattr_site 64 %ld\n", atomic_load(&getattr_made));
	printf("site clone_site 80 %ld\n", atomic_load(&clone_made));
	return fail;
}
