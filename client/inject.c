// SPDX-License-Identifier: MIT
/*
 * inject.c: a call made inside another running process (inject.h), the mechanism of
 * `llgo-heap attach` and `detach` (attach.c says what is called and refuses what must not be
 * touched). One thread is stopped with ptrace (PTRACE_SEIZE + PTRACE_INTERRUPT); the other
 * threads run all along. Addresses come from /proc/PID/maps and the files' dynamic symbol
 * tables, read here with <elf.h> and bounds checks (the CLI links no libelf; a process may
 * map a crafted file, which can only make it call a wrong address of its own).
 *
 * The stopped thread:
 *   - a safe point: not inside ld.so or the shim, nor inside libc (or an allocator in its
 *     place) unless blocked in a waiting system call (dlopen takes the loader's lock and allocates: a thread stopped
 *     holding either would deadlock on itself), and on a stack with room below its stack
 *     pointer (not a small alternate signal stack); else it runs a few milliseconds and is
 *     stopped again, up to INJECT_SAFE_TRIES times, then the next thread is tried;
 *   - saved: general registers, the whole extended state (NT_X86_XSTATE: the injected code
 *     may use any vector register), the signal mask, and the stack bytes the call uses;
 *   - a thread stopped in a system call (orig_rax >= 0, rax -ERESTART*): its registers are
 *     put back as they were, so that the kernel restarts the call as it would have; during
 *     the injected calls orig_rax is -1, so that no restart logic touches them;
 *   - the calls: the stack pointer below the 128-byte red zone, arguments (the strings)
 *     written there, 16-byte alignment at the call, return address 0: the return faults
 *     (SIGSEGV at rip 0), which the tracer sees before any handler and suppresses. Every
 *     signal but the synchronous faults is blocked meanwhile (a handler must not run inside
 *     the injected call; a blocked fault would make the kernel reset its handler);
 *   - ptrace is detached on every path (inject_release); the caller blocks the signals that
 *     would end it while the thread runs an injected call (a tracer that dies then leaves the
 *     thread to return to address 0).
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "inject.h"

#if defined(__x86_64__)

#ifndef PTRACE_GETSIGMASK
#define PTRACE_GETSIGMASK 0x420a
#define PTRACE_SETSIGMASK 0x420b
#endif
#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif

#define INJECT_SAFE_TRIES 60
#define INJECT_MAX_THREADS 16
#define INJECT_RED_ZONE 128

/* ---- /proc ---------------------------------------------------------------------------------- */



void inject_maps_free(struct inject_maps *m)
{
	free(m->v);
	m->v = NULL;
	m->n = 0;
}

int inject_maps_read(pid_t pid, struct inject_maps *m)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return -errno;
	size_t cap = 0;
	m->v = NULL;
	m->n = 0;
	char line[PATH_MAX + 256];
	while (fgets(line, sizeof(line), f)) {
		struct inject_map e;
		memset(&e, 0, sizeof(e));
		int pos = 0;
		unsigned long lo, hi, off;
		if (sscanf(line, "%lx-%lx %4s %lx %x:%x %lu %n", &lo, &hi, e.perms, &off,
			   &e.dev_major, &e.dev_minor, &e.ino, &pos) < 7)
			continue;
		e.lo = lo;
		e.hi = hi;
		e.off = off;
		if (pos > 0) {
			snprintf(e.path, sizeof(e.path), "%s", line + pos);
			e.path[strcspn(e.path, "\n")] = '\0';
		}
		if (m->n == cap) {
			cap = cap ? cap * 2 : 64;
			struct inject_map *nv = realloc(m->v, cap * sizeof(*nv));
			if (!nv) {
				fclose(f);
				inject_maps_free(m);
				return -ENOMEM;
			}
			m->v = nv;
		}
		m->v[m->n++] = e;
	}
	fclose(f);
	return 0;
}

static bool inject_path_is(const char *path, const char *base)
{
	const char *s = strrchr(path, '/');
	return s && strcmp(s + 1, base) == 0;
}

bool inject_is_libc(const struct inject_map *e)
{
	const char *s = strrchr(e->path, '/');
	return s && (strcmp(s + 1, "libc.so.6") == 0 || strncmp(s + 1, "libc-2.", 7) == 0);
}

static bool inject_is_ldso(const struct inject_map *e)
{
	const char *s = strrchr(e->path, '/');
	return s && strncmp(s + 1, "ld-linux", 8) == 0;
}

/* libc itself, or an allocator preloaded or linked in its place (jemalloc, tcmalloc,
 * mimalloc: their names say malloc), whose locks the loader's allocations take too. */
static bool inject_is_libc_like(const struct inject_map *e)
{
	const char *s = strrchr(e->path, '/');
	return inject_is_libc(e) || (s && strstr(s + 1, "malloc") != NULL);
}

bool inject_is_shim(const struct inject_map *e)
{
	return inject_path_is(e->path, "libllgoheap.so");
}

/* ---- ELF: a symbol of a mapped file ----------------------------------------------------------- */

/* The file mapped at e, opened as the process maps it: /proc/PID/map_files (the very inode),
 * else the path seen from the process's root, checked to be that inode. */
static int inject_open_mapped(pid_t pid, const struct inject_map *e)
{
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "/proc/%d/map_files/%lx-%lx", (int)pid, (unsigned long)e->lo,
		 (unsigned long)e->hi);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == e->ino)
		return fd;
	if (fd >= 0)
		close(fd);
	if (e->path[0] != '/')
		return -ENOENT;
	snprintf(p, sizeof(p), "/proc/%d/root%s", (int)pid, e->path);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || st.st_ino != e->ino) {
		close(fd);
		return -ESTALE; /* replaced on disk since it was mapped */
	}
	return fd;
}

static bool inject_pread(int fd, void *buf, size_t n, uint64_t off, uint64_t size)
{
	if (off > size || n > size - off)
		return false;
	return pread(fd, buf, n, (off_t)off) == (ssize_t)n;
}

/*
 * The value of the defined dynamic symbol name (its default version when there are several)
 * in the ELF file fd, and the file's first PT_LOAD address (its load bias is the mapping of
 * offset 0 minus that, page-aligned). -ENOENT when absent, -ENOEXEC when not a 64-bit x86-64
 * ELF file with section headers.
 */
static int inject_elf_symbol(int fd, const char *name, uint64_t *value, uint64_t *first_vaddr)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return -errno;
	uint64_t size = (uint64_t)st.st_size;
	Elf64_Ehdr eh;
	if (!inject_pread(fd, &eh, sizeof(eh), 0, size) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    eh.e_shnum == 0 || eh.e_shnum > 4096 || eh.e_phnum > 256)
		return -ENOEXEC;
	*first_vaddr = UINT64_MAX;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		if (!inject_pread(fd, &ph, sizeof(ph), eh.e_phoff + (uint64_t)i * sizeof(ph), size))
			return -ENOEXEC;
		if (ph.p_type == PT_LOAD && ph.p_vaddr < *first_vaddr)
			*first_vaddr = ph.p_vaddr;
	}
	if (*first_vaddr == UINT64_MAX)
		return -ENOEXEC;
	Elf64_Shdr dynsym = { 0 }, strtab = { 0 }, versym = { 0 };
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		if (!inject_pread(fd, &sh, sizeof(sh), eh.e_shoff + (uint64_t)i * sizeof(sh), size))
			return -ENOEXEC;
		if (sh.sh_type == SHT_DYNSYM) {
			dynsym = sh;
			Elf64_Shdr s2;
			if (sh.sh_link >= eh.e_shnum ||
			    !inject_pread(fd, &s2, sizeof(s2),
					  eh.e_shoff + (uint64_t)sh.sh_link * sizeof(s2), size))
				return -ENOEXEC;
			strtab = s2;
		} else if (sh.sh_type == SHT_GNU_versym) {
			versym = sh;
		}
	}
	if (!dynsym.sh_size || dynsym.sh_entsize != sizeof(Elf64_Sym) || !strtab.sh_size ||
	    strtab.sh_size > (64u << 20) || dynsym.sh_size > (64u << 20))
		return -ENOEXEC;
	size_t nsym = dynsym.sh_size / sizeof(Elf64_Sym);
	Elf64_Sym *syms = malloc(dynsym.sh_size);
	char *strs = malloc(strtab.sh_size + 1);
	uint16_t *vers = versym.sh_size >= nsym * 2 ? malloc(nsym * 2) : NULL;
	int rc = -ENOENT;
	if (!syms || !strs ||
	    !inject_pread(fd, syms, dynsym.sh_size, dynsym.sh_offset, size) ||
	    !inject_pread(fd, strs, strtab.sh_size, strtab.sh_offset, size) ||
	    (vers && !inject_pread(fd, vers, nsym * 2, versym.sh_offset, size))) {
		rc = syms && strs ? -ENOEXEC : -ENOMEM;
		goto out;
	}
	strs[strtab.sh_size] = '\0';
	bool found_hidden = false;
	for (size_t i = 1; i < nsym; i++) {
		const Elf64_Sym *s = &syms[i];
		if (s->st_shndx == SHN_UNDEF || s->st_name >= strtab.sh_size ||
		    strcmp(strs + s->st_name, name) != 0)
			continue;
		unsigned type = ELF64_ST_TYPE(s->st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_OBJECT)
			continue;
		bool hidden = vers && (vers[i] & 0x8000);
		if (hidden && (found_hidden || rc == 0))
			continue;
		*value = s->st_value;
		rc = 0;
		found_hidden = hidden;
		if (!hidden)
			break;
	}
out:
	free(syms);
	free(strs);
	free(vers);
	return rc;
}

/* The address of name in the process: in the file whose mappings satisfy is (the first of
 * them), at its load bias. */
int inject_resolve(pid_t pid, const struct inject_maps *m,
			  bool (*is)(const struct inject_map *), const char *name, uintptr_t *addr)
{
	const struct inject_map *first = NULL;
	for (size_t i = 0; i < m->n; i++)
		if (is(&m->v[i]) && m->v[i].off == 0) {
			first = &m->v[i];
			break;
		}
	if (!first)
		return -ENOENT;
	int fd = inject_open_mapped(pid, first);
	if (fd < 0)
		return fd;
	uint64_t value = 0, vaddr0 = 0;
	int rc = inject_elf_symbol(fd, name, &value, &vaddr0);
	close(fd);
	if (rc)
		return rc;
	*addr = first->lo - (uintptr_t)(vaddr0 & ~(uint64_t)4095) + (uintptr_t)value;
	return 0;
}

/* ---- ptrace ----------------------------------------------------------------------------------- */


static int inject_wait(pid_t tid, int *status)
{
	for (;;) {
		pid_t r = waitpid(tid, status, __WALL);
		if (r == tid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int inject_seize(pid_t pid, pid_t tid, const char *sub)
{
	if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) == 0)
		return 0;
	int e = errno;
	if (e == EPERM) {
		int scope = -1;
		FILE *y = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
		if (y) {
			if (fscanf(y, "%d", &scope) != 1)
				scope = -1;
			fclose(y);
		}
		if (scope >= 1)
			return cli_die("%s: ptrace of %d refused (EPERM): kernel.yama.ptrace_scope is "
				       "%d, which lets only %s trace it (run as root, or sysctl "
				       "kernel.yama.ptrace_scope=0)", sub, (int)pid, scope,
				       scope == 1 ? "its ancestors and CAP_SYS_PTRACE"
						  : "CAP_SYS_PTRACE");
		return cli_die("%s: ptrace of %d refused (EPERM): another user's process, or "
			       "not dumpable (setuid); run as root", sub, (int)pid);
	}
	return cli_die("%s: ptrace of %d: %s", sub, (int)pid, strerror(e));
}

/* Stop a seized thread: PTRACE_INTERRUPT, then its stop; a signal met on the way is given back
 * to it and the wait goes on. -ESRCH when it exited. */
static int inject_interrupt(struct inject_thread *th)
{
	if (ptrace(PTRACE_INTERRUPT, th->tid, NULL, NULL) != 0)
		return -errno;
	for (int i = 0; i < 64; i++) {
		int st;
		int rc = inject_wait(th->tid, &st);
		if (rc)
			return rc;
		if (WIFEXITED(st) || WIFSIGNALED(st))
			return -ESRCH;
		if (!WIFSTOPPED(st))
			continue;
		if ((st >> 16) == PTRACE_EVENT_STOP)
			return 0;
		/* a signal-delivery-stop: let the signal go where it was going */
		if (ptrace(PTRACE_CONT, th->tid, NULL, (void *)(uintptr_t)WSTOPSIG(st)) != 0)
			return -errno;
	}
	return -EAGAIN;
}

static int inject_resume(struct inject_thread *th)
{
	return ptrace(PTRACE_CONT, th->tid, NULL, NULL) == 0 ? 0 : -errno;
}

static bool inject_in(const struct inject_maps *m, bool (*is)(const struct inject_map *),
		      uintptr_t pc)
{
	for (size_t i = 0; i < m->n; i++)
		if (pc >= m->v[i].lo && pc < m->v[i].hi)
			return is(&m->v[i]);
	return false;
}

/* A system call that waits for something else (the thread holds no lock of libc's or the
 * loader's while in it, as glibc uses them). */
static bool inject_waiting_syscall(long nr)
{
	switch (nr) {
	case SYS_read: case SYS_readv: case SYS_pread64: case SYS_write: case SYS_poll:
	case SYS_ppoll: case SYS_select: case SYS_pselect6: case SYS_epoll_wait:
	case SYS_epoll_pwait: case SYS_nanosleep: case SYS_clock_nanosleep: case SYS_pause:
	case SYS_wait4: case SYS_waitid: case SYS_rt_sigsuspend: case SYS_rt_sigtimedwait:
	case SYS_accept: case SYS_accept4: case SYS_recvfrom: case SYS_recvmsg:
	case SYS_futex: case SYS_msgrcv: case SYS_semtimedop: case SYS_sendto: case SYS_sendmsg:
	case SYS_connect: case SYS_sched_yield: case SYS_restart_syscall:
#ifdef SYS_epoll_pwait2
	case SYS_epoll_pwait2:
#endif
		return true;
	default:
		return false;
	}
}

/* Where the stopped thread may run dlopen (see the top of this file). */
/* The stack the injected calls run on: the main thread's [stack] (it grows), or a mapping
 * with INJECT_STACK_ROOM below the stack pointer (not a small sigaltstack of a handler). */
#define INJECT_STACK_ROOM (128u << 10)

static bool inject_stack_room(const struct inject_maps *m, uintptr_t sp)
{
	for (size_t i = 0; i < m->n; i++)
		if (sp > m->v[i].lo && sp <= m->v[i].hi)
			return strcmp(m->v[i].path, "[stack]") == 0 ||
			       sp - m->v[i].lo >= INJECT_STACK_ROOM;
	return false;
}

static bool inject_safe(const struct inject_maps *m, const struct user_regs_struct *r)
{
	uintptr_t pc = r->rip;
	if (inject_in(m, inject_is_ldso, pc) || inject_in(m, inject_is_shim, pc) ||
	    !inject_stack_room(m, r->rsp))
		return false;
	if (!inject_in(m, inject_is_libc_like, pc))
		return true;
	long ret = (long)r->rax, nr = (long)r->orig_rax;
	bool blocked = ret == -EINTR || (ret <= -512 && ret >= -516); /* -ERESTART* */
	return nr >= 0 && blocked && inject_waiting_syscall(nr);
}

static void inject_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Save what the calls will change. */
static int inject_save(struct inject_thread *th)
{
	if (ptrace(PTRACE_GETREGS, th->tid, NULL, &th->regs) != 0)
		return -errno;
	struct iovec iov = { th->xstate, sizeof(th->xstate) };
	th->xtype = NT_X86_XSTATE;
	if (ptrace(PTRACE_GETREGSET, th->tid, (void *)(uintptr_t)NT_X86_XSTATE, &iov) != 0) {
		iov.iov_len = sizeof(th->xstate);
		th->xtype = NT_PRFPREG;
		if (ptrace(PTRACE_GETREGSET, th->tid, (void *)(uintptr_t)NT_PRFPREG, &iov) != 0)
			return -errno;
	}
	th->xlen = iov.iov_len;
	th->sigmask_ok = ptrace(PTRACE_GETSIGMASK, th->tid, (void *)sizeof(th->sigmask),
				&th->sigmask) == 0;
	return 0;
}

/* Put everything back as inject_save found it; true when all of it went back. */
static bool inject_restore(struct inject_thread *th)
{
	bool ok = ptrace(PTRACE_SETREGS, th->tid, NULL, &th->regs) == 0;
	struct iovec iov = { th->xstate, th->xlen };
	ok = ptrace(PTRACE_SETREGSET, th->tid, (void *)(uintptr_t)th->xtype, &iov) == 0 && ok;
	if (th->sigmask_ok)
		ok = ptrace(PTRACE_SETSIGMASK, th->tid, (void *)sizeof(th->sigmask),
			    &th->sigmask) == 0 && ok;
	return ok;
}

int inject_mem(pid_t pid, uintptr_t addr, void *buf, size_t n, bool write)
{
	struct iovec local = { buf, n }, remote = { (void *)addr, n };
	ssize_t r = write ? process_vm_writev(pid, &local, 1, &remote, 1, 0)
			  : process_vm_readv(pid, &local, 1, &remote, 1, 0);
	if (r == (ssize_t)n)
		return 0;
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/mem", (int)pid);
	int fd = open(p, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = write ? pwrite(fd, buf, n, (off_t)addr) : pread(fd, buf, n, (off_t)addr);
	close(fd);
	return r == (ssize_t)n ? 0 : -EIO;
}

/*
 * Call fn(args...) in the stopped thread th (saved) with up to two strings copied onto its
 * stack (args[i] == INJECT_STR0/1 stand for their addresses). Returns 0 with the call's rax
 * in *ret, or -errno (the thread is then restored as far as possible; -EFAULT: the call itself
 * faulted).
 */

int inject_call(pid_t pid, struct inject_thread *th, uintptr_t fn, const uint64_t *args,
		       int nargs, const char *s0, const char *s1, uint64_t *ret)
{
	size_t l0 = s0 ? strlen(s0) + 1 : 0, l1 = s1 ? strlen(s1) + 1 : 0;
	uintptr_t top = (uintptr_t)th->regs.rsp - INJECT_RED_ZONE;
	uintptr_t a1 = (top - l1) & ~(uintptr_t)15;
	uintptr_t a0 = (a1 - l0) & ~(uintptr_t)15;
	uintptr_t sp = a0 - 8; /* the return address: rsp + 8 is 16-aligned at the call */
	size_t used = top - sp;
	if (used > 64 * 1024)
		return -E2BIG;
	unsigned char *backup = malloc(used);
	if (!backup)
		return -ENOMEM;
	int rc = inject_mem(pid, sp, backup, used, false);
	uint64_t zero = 0;
	if (!rc && s1)
		rc = inject_mem(pid, a1, (void *)s1, l1, true);
	if (!rc && s0)
		rc = inject_mem(pid, a0, (void *)s0, l0, true);
	if (!rc)
		rc = inject_mem(pid, sp, &zero, sizeof(zero), true);
	if (rc) {
		free(backup);
		return rc;
	}
	struct user_regs_struct r = th->regs;
	uint64_t a[6] = { 0 };
	for (int i = 0; i < nargs && i < 6; i++)
		a[i] = args[i] == INJECT_STR0 ? a0 : args[i] == INJECT_STR1 ? a1 : args[i];
	r.rdi = a[0];
	r.rsi = a[1];
	r.rdx = a[2];
	r.rcx = a[3];
	r.r8 = a[4];
	r.r9 = a[5];
	r.rax = 0;
	r.rip = fn;
	r.rsp = sp;
	r.orig_rax = (unsigned long long)-1; /* no system call restart applies to this */
	r.eflags &= ~(0x400ull | 0x100ull);  /* DF clear (the ABI), no single-step */
	/* every signal blocked but the synchronous faults (see the top of this file) */
	uint64_t mask = ~0ull;
	int sync[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP };
	for (size_t i = 0; i < sizeof(sync) / sizeof(sync[0]); i++)
		mask &= ~(1ull << (sync[i] - 1));
	if (ptrace(PTRACE_SETREGS, th->tid, NULL, &r) != 0 ||
	    (th->sigmask_ok &&
	     ptrace(PTRACE_SETSIGMASK, th->tid, (void *)sizeof(mask), &mask) != 0) ||
	    ptrace(PTRACE_CONT, th->tid, NULL, NULL) != 0) {
		rc = -errno;
		goto restore;
	}
	bool told = false;
	time_t start = time(NULL);
	for (;;) {
		int st;
		pid_t w = waitpid(th->tid, &st, __WALL | WNOHANG);
		if (w < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		if (w == 0) {
			if (!told && time(NULL) - start >= 5) {
				fprintf(stderr, "%s: waiting for %d to finish a call (its loader may be "
					"busy)...\n", cli_prog, (int)pid);
				told = true;
			}
			inject_sleep_ms(1);
			continue;
		}
		if (w != th->tid)
			continue;
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			free(backup);
			th->seized = false;
			return -ESRCH;
		}
		if (!WIFSTOPPED(st))
			continue;
		if ((st >> 16) == PTRACE_EVENT_STOP) { /* a group stop or our interrupt: go on */
			ptrace(PTRACE_CONT, th->tid, NULL, NULL);
			continue;
		}
		struct user_regs_struct now;
		if (ptrace(PTRACE_GETREGS, th->tid, NULL, &now) != 0) {
			rc = -errno;
			break;
		}
		if (WSTOPSIG(st) == SIGSEGV && now.rip == 0) {
			*ret = now.rax;
			rc = 0;
			break;
		}
		if (WSTOPSIG(st) == SIGSEGV || WSTOPSIG(st) == SIGBUS || WSTOPSIG(st) == SIGILL ||
		    WSTOPSIG(st) == SIGFPE || WSTOPSIG(st) == SIGTRAP) {
			rc = -EFAULT; /* the call itself faulted: not passed on */
			break;
		}
		/* (blocked signals do not stop it; anything else is passed on) */
		ptrace(PTRACE_CONT, th->tid, NULL, (void *)(uintptr_t)WSTOPSIG(st));
	}
restore:
	inject_mem(pid, sp, backup, used, true);
	free(backup);
	return rc;
}

/* Seize a thread of pid and stop it at a safe point: the main thread first, then the others.
 * The returned thread is stopped and saved. */
int inject_stop_safe(pid_t pid, struct inject_maps *maps, struct inject_thread *th,
			    const char *sub)
{
	pid_t tids[INJECT_MAX_THREADS];
	int n = 0;
	tids[n++] = pid;
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/task", (int)pid);
	DIR *d = opendir(p);
	for (struct dirent *e; d && n < INJECT_MAX_THREADS && (e = readdir(d));) {
		long tid = strtol(e->d_name, NULL, 10);
		if (tid > 0 && tid != pid)
			tids[n++] = (pid_t)tid;
	}
	if (d)
		closedir(d);
	for (int k = 0; k < n; k++) {
		memset(th, 0, sizeof(*th));
		th->tid = tids[k];
		int rc = inject_seize(pid, th->tid, sub);
		if (rc)
			return rc;
		th->seized = true;
		for (int tries = 0; tries < INJECT_SAFE_TRIES; tries++) {
			rc = inject_interrupt(th);
			if (rc == -ESRCH)
				break;
			if (rc)
				goto fail;
			if ((rc = inject_save(th)) != 0)
				goto fail;
			if (inject_safe(maps, &th->regs))
				return 0;
			if ((rc = inject_resume(th)) != 0)
				goto fail;
			inject_sleep_ms(1 + (unsigned)(tries % 7) * 3);
		}
		if (th->seized)
			ptrace(PTRACE_DETACH, th->tid, NULL, NULL);
		th->seized = false;
		continue;
fail:
		ptrace(PTRACE_DETACH, th->tid, NULL, NULL);
		th->seized = false;
		return cli_die("%s: cannot stop a thread of %d: %s", sub, (int)pid, strerror(-rc));
	}
	return cli_die("%s: no thread of %d stopped outside the dynamic loader, libc's locks and "
		       "the shim after %d tries each; try again", sub, (int)pid, INJECT_SAFE_TRIES);
}

/* Put the thread back and let it go. */
bool inject_release(struct inject_thread *th)
{
	if (!th->seized)
		return true;
	bool ok = inject_restore(th);
	ok = ptrace(PTRACE_DETACH, th->tid, NULL, NULL) == 0 && ok;
	th->seized = false;
	return ok;
}

#endif /* __x86_64__ */
