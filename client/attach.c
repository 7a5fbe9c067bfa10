// SPDX-License-Identifier: MIT
/*
 * attach.c: `llgo-heap attach PID [--rate N]` and `llgo-heap detach PID`, the outside half
 * (shim/override_got.c is the inside). A thread of the process, stopped at a safe point
 * (inject.c: ptrace, registers, the call mechanics), is made to call dlopen of libllgoheap.so
 * through the process's own libc (glibc 2.34+ exports it from libc.so.6), then
 * llgo_heap_attach_start(socket, rate) or llgo_heap_attach_stop() of that library, and is put
 * back exactly as it was.
 *
 * Refused with one line on stderr and exit status 2, before anything is touched: a process of
 * another user (unless root), of another architecture, statically linked (no PT_INTERP) or
 * without libc.so.6, under a seccomp filter (its filter may kill it for the loader's system
 * calls), stopped, traced already, ignoring SIGSEGV (the calls' return uses it), or running
 * with the shim preloaded; kernel.yama.ptrace_scope 3, or a refused PTRACE_SEIZE (with the
 * scope as a hint). The shim's own answer refuses the rest: a process attached already, one
 * with a linked copy of the shim (-EEXIST, -EALREADY).
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../shared/ring.h"
#include "cli.h"
#include "inject.h"

#if defined(__x86_64__)

/* dlopen's flags: RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE (the shim is never unloaded: the
 * program may keep pointers into it) */
#define ATTACH_RTLD_FLAGS (0x00002 | 0x01000)

/* The line "Key:\tvalue" of /proc/PID/status (or of a task's). */
static bool attach_status_field(const char *status_path, const char *key, char *out, size_t n)
{
	FILE *f = fopen(status_path, "re");
	if (!f)
		return false;
	char line[512];
	size_t kl = strlen(key);
	bool found = false;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			const char *v = line + kl + 1;
			v += strspn(v, " \t");
			snprintf(out, n, "%s", v);
			out[strcspn(out, "\n")] = '\0';
			found = true;
			break;
		}
	}
	fclose(f);
	return found;
}

/* ---- checks before anything is touched ---------------------------------------------------- */

struct attach_target {
	pid_t pid;
	struct inject_maps maps;
	bool has_shim;  /* libllgoheap.so is mapped */
	bool profiled;  /* a copy of the shim holds its process memfd: it is attached */
};

/* Whether the process holds the memfd a copy of the shim makes when it attaches
 * ("memfd:llgo-heap"; the live table's is "memfd:llgo-heap-live") and its control page does
 * not say DETACHED: then it is profiled already, by an attach, LD_PRELOAD or a copy linked
 * into it. (The page is the process's to write: it can only lie about itself.) */
static bool attach_has_memfd(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(p);
	bool found = false;
	for (struct dirent *e; d && !found && (e = readdir(d));) {
		char link[PATH_MAX], target[128];
		snprintf(link, sizeof(link), "/proc/%d/fd/%s", (int)pid, e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = '\0';
		if (strcmp(target, "/memfd:llgo-heap (deleted)") != 0)
			continue;
		struct llgo_ctl ctl;
		int fd = open(link, O_RDONLY | O_CLOEXEC);
		found = fd < 0 || pread(fd, &ctl, sizeof(ctl), 0) != (ssize_t)sizeof(ctl) ||
			ctl.magic != LLGO_CTL_MAGIC ||
			atomic_load_explicit(&ctl.shim_state, memory_order_relaxed) !=
				LLGO_SHIM_DETACHED;
		if (fd >= 0)
			close(fd);
	}
	if (d)
		closedir(d);
	return found;
}

/* The checks every attach and detach make; msg names the subcommand. */
static int attach_check(struct attach_target *t, const char *sub)
{
	pid_t pid = t->pid;
	char p[64], v[256];
	snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
	if (access(p, R_OK) != 0)
		return cli_die("%s: no such process: %d", sub, (int)pid);
	if (pid == getpid())
		return cli_die("%s: %d is this command itself", sub, (int)pid);
	/* another user's process: the kernel would refuse it too, with a vaguer EPERM */
	if (geteuid() != 0 && attach_status_field(p, "Uid", v, sizeof(v))) {
		unsigned long r, e, s;
		if (sscanf(v, "%lu %lu %lu", &r, &e, &s) == 3 &&
		    (r != getuid() || e != getuid() || s != getuid()))
			return cli_die("%s: %d belongs to uid %lu (only root may %s another user's "
				       "process)", sub, (int)pid, e, sub);
	}
	if (attach_status_field(p, "State", v, sizeof(v)) && (v[0] == 'T' || v[0] == 't'))
		return cli_die("%s: %d is stopped (%s); continue it first", sub, (int)pid, v);
	if (attach_status_field(p, "State", v, sizeof(v)) && (v[0] == 'Z' || v[0] == 'X'))
		return cli_die("%s: %d has exited", sub, (int)pid);
	if (attach_status_field(p, "TracerPid", v, sizeof(v)) && strtol(v, NULL, 10) != 0)
		return cli_die("%s: %d is traced by process %s (a debugger?)", sub, (int)pid, v);
	if (attach_status_field(p, "Seccomp", v, sizeof(v)) && v[0] != '0')
		return cli_die("%s: %d runs under a seccomp filter (Seccomp: %s): the loader's "
			       "system calls could kill it", sub, (int)pid, v);
	if (attach_status_field(p, "SigIgn", v, sizeof(v))) {
		unsigned long long ign = strtoull(v, NULL, 16);
		if (ign & (1ull << (SIGSEGV - 1)))
			return cli_die("%s: %d ignores SIGSEGV, which the injected call's return "
				       "uses", sub, (int)pid);
	}
	FILE *y = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
	if (y) {
		int scope = 0;
		if (fscanf(y, "%d", &scope) != 1)
			scope = 0;
		fclose(y);
		if (scope >= 3)
			return cli_die("%s: ptrace is disabled on this system "
				       "(kernel.yama.ptrace_scope = 3)", sub);
	}
	/* the executable: this architecture, dynamically linked */
	snprintf(p, sizeof(p), "/proc/%d/exe", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cli_die("%s: cannot read %d's executable: %s", sub, (int)pid,
			       strerror(errno));
	Elf64_Ehdr eh;
	bool ok = pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) &&
		  memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0;
	if (ok && (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64)) {
		close(fd);
		return cli_die("%s: %d is a process of another architecture (%s, machine %u; "
			       "this llgo-heap is x86-64)", sub, (int)pid,
			       eh.e_ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "64-bit",
			       (unsigned)eh.e_machine);
	}
	bool interp = false;
	for (unsigned i = 0; ok && i < eh.e_phnum && i < 256; i++) {
		Elf64_Phdr ph;
		if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) !=
		    (ssize_t)sizeof(ph))
			break;
		interp = interp || ph.p_type == PT_INTERP;
	}
	close(fd);
	if (!ok)
		return cli_die("%s: %d's executable is not an ELF file", sub, (int)pid);
	if (!interp)
		return cli_die("%s: %d is statically linked: there is no dynamic loader to load "
			       "the shim (link libllgoheap.a into it instead)", sub, (int)pid);
	int rc = inject_maps_read(pid, &t->maps);
	if (rc)
		return cli_die("%s: cannot read %d's mappings: %s", sub, (int)pid, strerror(-rc));
	bool libc = false;
	for (size_t i = 0; i < t->maps.n; i++) {
		libc = libc || inject_is_libc(&t->maps.v[i]);
		t->has_shim = t->has_shim || inject_is_shim(&t->maps.v[i]);
	}
	if (!libc)
		return cli_die("%s: %d has no libc.so.6 mapped (another C library, or static)", sub,
			       (int)pid);
	/* the shim preloaded: nothing to attach, and nothing to detach */
	snprintf(p, sizeof(p), "/proc/%d/environ", (int)pid);
	FILE *f = fopen(p, "re");
	if (f) {
		char var[8192];
		size_t n = fread(var, 1, sizeof(var) - 1, f);
		fclose(f);
		var[n] = '\0';
		for (size_t i = 0; i < n; i += strlen(var + i) + 1)
			if (strncmp(var + i, "LD_PRELOAD=", 11) == 0 && strstr(var + i, "libllgoheap"))
				return cli_die("%s: %d runs with the shim preloaded (LD_PRELOAD): it is "
					       "profiled from its start, there is nothing to %s", sub,
					       (int)pid, sub);
	}
	t->profiled = attach_has_memfd(pid);
	return 0;
}

/* The shim next to this executable (../lib/libllgoheap.so), or $LLGO_HEAP_SHIM. */
static int attach_shim_path(char *out, size_t n)
{
	const char *env = getenv("LLGO_HEAP_SHIM");
	char buf[PATH_MAX + 32];
	if (env && *env) {
		snprintf(buf, sizeof(buf), "%s", env);
	} else {
		char self[PATH_MAX];
		ssize_t l = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (l <= 0)
			return -errno;
		self[l] = '\0';
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		snprintf(buf, sizeof(buf), "%s/../lib/libllgoheap.so", self);
	}
	char *real = realpath(buf, NULL);
	if (!real)
		return -errno;
	snprintf(out, n, "%s", real);
	free(real);
	return 0;
}

static int attach_errno_msg(pid_t pid, const char *sub, int rc, const char *sock)
{
	switch (-rc) {
	case EEXIST:
		return cli_die("%s: %d already has the shim (preloaded, or libllgoheap linked into "
			       "it): it is profiled from its start", sub, (int)pid);
	case EALREADY:
		return cli_die("%s: %d is attached already (llgo-heap detach %d first)", sub,
			       (int)pid, (int)pid);
	case EPERM:
		return cli_die("%s: %d's shim is off (a seccomp filter, or the process turned it "
			       "off)", sub, (int)pid);
	case ENOENT:
	case ECONNREFUSED:
		return cli_die("%s: no llgo-heapd listens at %s (as seen from %d)", sub, sock,
			       (int)pid);
	default:
		return cli_die("%s: %d: %s", sub, (int)pid, strerror(-rc));
	}
}

/* A socket path as the target sees it: absolute. */
static int attach_socket_abs(const char *sock, char *out, size_t n)
{
	if (sock[0] == '/') {
		snprintf(out, n, "%s", sock);
		return 0;
	}
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return -errno;
	if ((size_t)snprintf(out, n, "%s/%s", cwd, sock) >= n)
		return -ENAMETOOLONG;
	return 0;
}

/* The calls one command makes on the stopped thread: 0, or the first -errno of inject_call. */
typedef int (*attach_calls_fn)(struct attach_target *t, struct inject_thread *th, void *arg);

/* Stop a thread of t at a safe point, make the calls on it, put it back; this CLI blocks every
 * signal meanwhile (it must not die while the thread runs an injected call). 0, or 2 after
 * one line on stderr. */
static int attach_on_thread(struct attach_target *t, const char *sub, attach_calls_fn calls,
			    void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	struct inject_thread *th = calloc(1, sizeof(*th));
	int rc = th ? inject_stop_safe(t->pid, &t->maps, th, sub) : cli_die("out of memory");
	int crc = rc ? 0 : calls(t, th, arg);
	bool back = rc || inject_release(th);
	free(th);
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return rc;
	if (!back)
		fprintf(stderr, "%s: warning: %d's thread state could not all be put back\n",
			cli_prog, (int)t->pid);
	if (crc == -ESRCH)
		return cli_die("%s: %d exited meanwhile", sub, (int)t->pid);
	if (crc)
		return cli_die("%s: the call in %d failed: %s", sub, (int)t->pid, strerror(-crc));
	return 0;
}

struct attach_start {
	const char *shim, *sock;
	uint64_t rate;
	uintptr_t dlopen_at, dlerror_at;
	uint64_t handle, ret;
	uintptr_t start_at;
	char why[512];
};

/* dlopen of the shim (dlerror's message when it fails), then llgo_heap_attach_start. */
static int attach_start_calls(struct attach_target *t, struct inject_thread *th, void *arg)
{
	struct attach_start *a = arg;
	uint64_t args[2] = { INJECT_STR0, ATTACH_RTLD_FLAGS };
	int crc = inject_call(t->pid, th, a->dlopen_at, args, 2, a->shim, NULL, &a->handle);
	if (crc)
		return crc;
	if (!a->handle) {
		uint64_t msg = 0;
		if (inject_call(t->pid, th, a->dlerror_at, NULL, 0, NULL, NULL, &msg) == 0 && msg) {
			char s[sizeof(a->why)];
			memset(s, 0, sizeof(s));
			if (inject_mem(t->pid, (uintptr_t)msg, s, sizeof(s) - 1, false) != 0)
				s[0] = '\0';
			snprintf(a->why, sizeof(a->why), "%s", s);
		}
		return 0;
	}
	/* the shim as mapped now: our file (its inode), wherever the process's loader put it */
	struct inject_maps now = { 0 };
	struct stat st;
	if (inject_maps_read(t->pid, &now) == 0 && stat(a->shim, &st) == 0) {
		for (size_t i = 0; i < now.n; i++)
			if (now.v[i].ino != st.st_ino || !inject_is_shim(&now.v[i]))
				now.v[i].path[0] = '\0';
		if (inject_resolve(t->pid, &now, inject_is_shim, "llgo_heap_attach_start",
				   &a->start_at) != 0)
			a->start_at = 0;
	}
	inject_maps_free(&now);
	if (!a->start_at)
		return 0;
	uint64_t sargs[2] = { INJECT_STR0, a->rate };
	return inject_call(t->pid, th, a->start_at, sargs, 2, a->sock, NULL, &a->ret);
}

int cli_attach(const char *sock, pid_t pid, uint64_t rate)
{
	const char *sub = "attach";
	struct attach_target t = { .pid = pid };
	char shim[PATH_MAX], abs_sock[PATH_MAX];
	struct attach_start a = { .shim = shim, .sock = abs_sock, .rate = rate };
	int rc = attach_check(&t, sub);
	if (rc)
		goto out;
	if (t.profiled) {
		rc = t.has_shim ? cli_die("%s: %d is attached already (llgo-heap detach %d first)",
					  sub, (int)pid, (int)pid)
				: cli_die("%s: %d is profiled already, by a copy of the shim linked "
					  "into it", sub, (int)pid);
		goto out;
	}
	if ((rc = attach_shim_path(shim, sizeof(shim))) != 0) {
		rc = cli_die("%s: the shim libllgoheap.so not found: %s", sub, strerror(-rc));
		goto out;
	}
	if ((rc = attach_socket_abs(sock, abs_sock, sizeof(abs_sock))) != 0) {
		rc = cli_die("%s: socket path %s: %s", sub, sock, strerror(-rc));
		goto out;
	}
	if ((rc = inject_resolve(pid, &t.maps, inject_is_libc, "dlopen", &a.dlopen_at)) != 0 ||
	    (rc = inject_resolve(pid, &t.maps, inject_is_libc, "dlerror", &a.dlerror_at)) != 0) {
		rc = cli_die("%s: %d's libc has no dlopen (glibc before 2.34?): %s", sub, (int)pid,
			     strerror(-rc));
		goto out;
	}
	if ((rc = attach_on_thread(&t, sub, attach_start_calls, &a)) != 0)
		goto out;
	if (!a.handle)
		rc = cli_die("%s: %d could not load %s: %s", sub, (int)pid, shim,
			     a.why[0] ? a.why : "dlopen failed");
	else if (!a.start_at)
		rc = cli_die("%s: %s in %d has no llgo_heap_attach_start (another version?)", sub,
			     shim, (int)pid);
	else if ((int32_t)a.ret < 0)
		rc = attach_errno_msg(pid, sub, (int32_t)a.ret, abs_sock);
	else
		printf("attached to %d: %d allocation entries routed to the shim (rate %llu, "
		       "daemon %s)\n", (int)pid, (int)(int32_t)a.ret, (unsigned long long)rate,
		       abs_sock);
out:
	inject_maps_free(&t.maps);
	return rc;
}

struct attach_stop {
	uintptr_t stop_at;
	uint64_t ret;
};

static int attach_stop_calls(struct attach_target *t, struct inject_thread *th, void *arg)
{
	struct attach_stop *a = arg;
	return inject_call(t->pid, th, a->stop_at, NULL, 0, NULL, NULL, &a->ret);
}

int cli_detach(pid_t pid)
{
	const char *sub = "detach";
	struct attach_target t = { .pid = pid };
	struct attach_stop a = { 0 };
	int rc = attach_check(&t, sub);
	if (rc)
		goto out;
	if (!t.has_shim) {
		rc = cli_die("%s: %d is not attached (no libllgoheap.so in it)", sub, (int)pid);
		goto out;
	}
	if ((rc = inject_resolve(pid, &t.maps, inject_is_shim, "llgo_heap_attach_stop",
				 &a.stop_at)) != 0) {
		rc = cli_die("%s: %d's libllgoheap.so has no llgo_heap_attach_stop: %s", sub,
			     (int)pid, strerror(-rc));
		goto out;
	}
	if ((rc = attach_on_thread(&t, sub, attach_stop_calls, &a)) != 0)
		goto out;
	int32_t r = (int32_t)a.ret;
	if (r == -ENOENT)
		rc = cli_die("%s: %d is not attached by llgo-heap attach", sub, (int)pid);
	else if (r == -EBUSY)
		fprintf(stderr, "%s: %s: %d detached, but a sampling call was still running: its "
			"rings were left mapped\n", cli_prog, sub, (int)pid);
	else if (r < 0)
		rc = cli_die("%s: %d: %s", sub, (int)pid, strerror(-r));
	else
		printf("detached from %d: %d entries restored\n", (int)pid, (int)r);
out:
	inject_maps_free(&t.maps);
	return rc;
}

#else /* !__x86_64__ */

int cli_attach(const char *sock, pid_t pid, uint64_t rate)
{
	(void)sock;
	(void)pid;
	(void)rate;
	return cli_die("attach: only x86-64 is supported");
}

int cli_detach(pid_t pid)
{
	(void)pid;
	return cli_die("detach: only x86-64 is supported");
}

#endif
