// SPDX-License-Identifier: MIT
/*
 * override_thread.c: the libc functions the preloaded shim wraps for its lifecycle, not for
 * allocation: pthread_create (so that a new thread's stack bounds, tid and random seed are
 * set at its start, before user code and outside any allocation), and prctl and syscall (so
 * that the shim stops making system calls before the program installs a seccomp filter that
 * could kill it for them), and _exit/_Exit (the exit handshake, lifecycle_exit). Part of
 * libllgoheap.so only: libllgoheap.a (Makefile) and the fully static archive leave these to
 * libc (in a -static link a definition here would keep libc.a's out, with no next one to
 * call); threads are then bounded lazily (stack.c).
 *
 * Every wrapper forwards to the next definition of its symbol (dlsym RTLD_NEXT), resolved on
 * first use, outside any allocation path. What a thread's start does is lifecycle.c's.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

typedef int (*override_thread_create_fn)(pthread_t *, const pthread_attr_t *,
					 void *(*)(void *), void *);
typedef int (*override_thread_prctl_fn)(int, unsigned long, unsigned long, unsigned long,
					unsigned long);
typedef long (*override_thread_syscall_fn)(long, long, long, long, long, long, long);
typedef void (*override_thread_exit_fn)(int);

static void *override_thread_next(const char *name)
{
	/* dlsym may allocate: those allocations are the shim's, never sampled */
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1;
	void *f = dlsym(RTLD_NEXT, name);
	t->guard = guard;
	return f;
}

#define OVERRIDE_THREAD_RESOLVE(var, name) \
	do { \
		if (!__atomic_load_n(&(var), __ATOMIC_ACQUIRE)) \
			__atomic_store_n(&(var), override_thread_next(name), __ATOMIC_RELEASE); \
	} while (0)

static override_thread_create_fn override_thread_create;
static override_thread_prctl_fn override_thread_prctl;
static override_thread_syscall_fn override_thread_syscall;
static override_thread_exit_fn override_thread_exit_next, override_thread_Exit_next;

/* ---- pthread_create ---------------------------------------------------------------------- */

struct override_thread_box {
	void *(*fn)(void *);
	void *arg;
};

static void *override_thread_start(void *p)
{
	struct override_thread_box box = *(struct override_thread_box *)p;
	struct llgo_heap_thread *t = &llgo_heap_tls;
	t->guard = 1;
	free(p);
	t->guard = 0;
	lifecycle_thread_start(t, (uintptr_t)__builtin_frame_address(0));
	/* A tail call: the start routine's frame record takes this one's place (the bound
	 * lifecycle_thread_start set still covers it) and the thread's stacks show the routine
	 * called from the thread library's start, as without the shim. */
	return box.fn(box.arg);
}

llgo_export int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
			       void *arg)
{
	OVERRIDE_THREAD_RESOLVE(override_thread_create, "pthread_create");
	override_thread_create_fn real =
		__atomic_load_n(&override_thread_create, __ATOMIC_ACQUIRE);
	if (!real)
		return ENOSYS;
	struct llgo_heap_thread *t = &llgo_heap_tls;
	/* a fork child's new threads must find its state its own (lifecycle.c) */
	lifecycle_settled(t);
	uint8_t guard = t->guard;
	t->guard = 1;
	struct override_thread_box *box = malloc(sizeof(*box));
	t->guard = guard;
	if (!box)
		return real(th, attr, fn, arg);
	box->fn = fn;
	box->arg = arg;
	int rc = real(th, attr, override_thread_start, box);
	if (rc != 0) {
		t->guard = 1;
		free(box);
		t->guard = guard;
	}
	return rc;
}

/* ---- sandboxes --------------------------------------------------------------------------- */

llgo_export int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long),
		      a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_SECCOMP)
		lifecycle_sandboxed();
	OVERRIDE_THREAD_RESOLVE(override_thread_prctl, "prctl");
	override_thread_prctl_fn real = __atomic_load_n(&override_thread_prctl, __ATOMIC_ACQUIRE);
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(option, a2, a3, a4, a5);
}

llgo_export long syscall(long number, ...)
{
	va_list ap;
	va_start(ap, number);
	long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long),
	     a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
	va_end(ap);
	if (number == SYS_seccomp || (number == SYS_prctl && a1 == PR_SET_SECCOMP))
		lifecycle_sandboxed();
	OVERRIDE_THREAD_RESOLVE(override_thread_syscall, "syscall");
	override_thread_syscall_fn real =
		__atomic_load_n(&override_thread_syscall, __ATOMIC_ACQUIRE);
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	return real(number, a1, a2, a3, a4, a5, a6);
}

/* ---- _exit ------------------------------------------------------------------------------- */

/* _exit skips destructors, and fork children often leave through it right after their work:
 * the exit handshake (lifecycle_exit) still runs, so the daemon reads what it needs. glibc's
 * own exit() reaches its _exit internally, not through here. */
llgo_export __attribute__((noreturn)) void _exit(int status)
{
	lifecycle_exit();
	OVERRIDE_THREAD_RESOLVE(override_thread_exit_next, "_exit");
	override_thread_exit_fn real =
		__atomic_load_n(&override_thread_exit_next, __ATOMIC_ACQUIRE);
	if (real)
		real(status);
	for (;;)
		syscall(SYS_exit_group, status);
}

llgo_export __attribute__((noreturn)) void _Exit(int status)
{
	lifecycle_exit();
	OVERRIDE_THREAD_RESOLVE(override_thread_Exit_next, "_Exit");
	override_thread_exit_fn real =
		__atomic_load_n(&override_thread_Exit_next, __ATOMIC_ACQUIRE);
	if (real)
		real(status);
	for (;;)
		syscall(SYS_exit_group, status);
}

/* Resolved at load, so that a fork child leaving through _exit does not pay for dlsym. */
__attribute__((constructor(103))) static void override_thread_init(void)
{
	OVERRIDE_THREAD_RESOLVE(override_thread_create, "pthread_create");
	OVERRIDE_THREAD_RESOLVE(override_thread_exit_next, "_exit");
	OVERRIDE_THREAD_RESOLVE(override_thread_Exit_next, "_Exit");
}
