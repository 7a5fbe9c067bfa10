/* SPDX-License-Identifier: MIT */
/*
 * inject.h: calling a function inside another running process with ptrace (inject.c), for
 * `llgo-heap attach` and `detach` (attach.c): its mappings and the symbols of the files it
 * maps, one thread stopped at a safe point and saved, calls made on it, and the thread put
 * back. x86-64 only.
 */
#ifndef LLGO_CLIENT_INJECT_H
#define LLGO_CLIENT_INJECT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#define INJECT_XSTATE_MAX 16384

/* One line of /proc/PID/maps. */
struct inject_map {
	uintptr_t lo, hi, off;
	unsigned dev_major, dev_minor;
	unsigned long ino;
	char perms[5];
	char path[PATH_MAX];
};

struct inject_maps {
	struct inject_map *v;
	size_t n;
};

int inject_maps_read(pid_t pid, struct inject_maps *m);
void inject_maps_free(struct inject_maps *m);
/* Which file a mapping is: glibc's libc, the shim. */
bool inject_is_libc(const struct inject_map *e);
bool inject_is_shim(const struct inject_map *e);
/* The address of the dynamic symbol name in the process: in the first file whose mappings
 * satisfy is, at its load bias. -ENOENT, -ENOEXEC, -ESTALE (replaced on disk since). */
int inject_resolve(pid_t pid, const struct inject_maps *m,
		   bool (*is)(const struct inject_map *), const char *name, uintptr_t *addr);
/* Read or write the process's memory. */
int inject_mem(pid_t pid, uintptr_t addr, void *buf, size_t n, bool write);

/* A thread stopped by inject_stop_safe, and what it held then. */
struct inject_thread {
	pid_t tid;
	bool seized;
	struct user_regs_struct regs; /* as stopped */
	unsigned char xstate[INJECT_XSTATE_MAX];
	size_t xlen;
	int xtype;
	uint64_t sigmask;
	bool sigmask_ok;
	int pending_sig; /* a signal stopped on the way, given back at detach */
};

/* Seize a thread of pid (the main one first) and stop it at a safe point (inject.c), saved;
 * else one line on stderr (sub: the subcommand) and 2. */
int inject_stop_safe(pid_t pid, struct inject_maps *maps, struct inject_thread *th,
		     const char *sub);
/* Arguments that stand for the address of inject_call's first or second string. */
#define INJECT_STR0 ((uint64_t)-100)
#define INJECT_STR1 ((uint64_t)-101)
/* fn(args...) in the stopped thread with up to two strings copied onto its stack: 0 and the
 * call's rax in *ret, or -errno (-ESRCH: the process ended; -EFAULT: the call faulted). */
int inject_call(pid_t pid, struct inject_thread *th, uintptr_t fn, const uint64_t *args,
		int nargs, const char *s0, const char *s1, uint64_t *ret);
/* Put the thread back as it was and let it go (PTRACE_DETACH); false when some of its state
 * could not be put back. */
bool inject_release(struct inject_thread *th);

#endif
