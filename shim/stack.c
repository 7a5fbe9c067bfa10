// SPDX-License-Identifier: MIT
/*
 * stack.c: the stack of a sampled allocation, from frame pointers, trimmed so that frame 0 is
 * the program's allocating call site. The walk trusts nothing it reads: every frame pointer
 * must lie inside the thread's stack, be 8-aligned and be above the previous one, so a broken
 * chain (code built without frame pointers) ends the walk early instead of faulting.
 *
 * Plumbing that is trimmed from the top of a stack: the shim's own text (found at init from a
 * shim function with dladdr and the ELF program headers, dl_iterate_phdr), the real C++
 * operator new functions (registered by override_cxx.c from their symbol sizes), and the
 * functions registered through llgo_heap_trim_add (name prefixes looked up once in the
 * loaded objects' symbol tables). Range tables are append-only and lock-free for readers.
 * Symbolization is left to the daemon; this file only compares addresses.
 */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

struct stack_range {
	_Atomic uintptr_t lo;
	_Atomic uintptr_t hi; /* 0 until published */
};

#define STACK_MAX_TEXT 4u
#define STACK_MAX_PREFIXES 16u
#define STACK_PREFIX_LEN 64u

/* Written by stack_init (constructor, before the rate can be non-zero), then read-only. */
static uintptr_t stack_text_lo[STACK_MAX_TEXT], stack_text_hi[STACK_MAX_TEXT];
static uint32_t stack_ntext;

static struct stack_range stack_ranges[STACK_MAX_RANGES];
static _Atomic uint32_t stack_nranges;

/* llgo_heap_trim_add's prefixes, kept so that a prefix is looked up once. */
static pthread_mutex_t stack_prefix_lock = PTHREAD_MUTEX_INITIALIZER;
static char stack_prefixes[STACK_MAX_PREFIXES][STACK_PREFIX_LEN];
static uint32_t stack_nprefixes;

/* ---- range tables ---------------------------------------------------------------------- */

static int stack_range_add(struct stack_range *tab, _Atomic uint32_t *count, uint32_t cap,
			   uintptr_t lo, uintptr_t hi)
{
	if (hi <= lo)
		return -EINVAL;
	uint32_t i = atomic_fetch_add_explicit(count, 1, memory_order_relaxed);
	if (i >= cap)
		return -ENOSPC;
	atomic_store_explicit(&tab[i].lo, lo, memory_order_relaxed);
	/* Pairs with the acquire load of hi in stack_range_find: a reader seeing hi sees lo. */
	atomic_store_explicit(&tab[i].hi, hi, memory_order_release);
	return 0;
}

static bool stack_range_find(struct stack_range *tab, _Atomic uint32_t *count, uint32_t cap,
			     uintptr_t pc)
{
	uint32_t n = atomic_load_explicit(count, memory_order_relaxed);
	if (n > cap)
		n = cap;
	for (uint32_t i = 0; i < n; i++) {
		uintptr_t hi = atomic_load_explicit(&tab[i].hi, memory_order_acquire);
		if (pc < hi && pc >= atomic_load_explicit(&tab[i].lo, memory_order_relaxed))
			return true;
	}
	return false;
}

int stack_add_range(uintptr_t lo, uintptr_t hi)
{
	return stack_range_add(stack_ranges, &stack_nranges, STACK_MAX_RANGES, lo, hi);
}

bool stack_is_plumbing(uint64_t pc)
{
	uintptr_t at = (uintptr_t)pc - 1; /* the call instruction, not the one after it */
	for (uint32_t i = 0; i < stack_ntext; i++)
		if (at >= stack_text_lo[i] && at < stack_text_hi[i])
			return true;
	return stack_range_find(stack_ranges, &stack_nranges, STACK_MAX_RANGES, at);
}

/* ---- the shim's own text --------------------------------------------------------------- */

struct stack_text_arg {
	uintptr_t addr;
	uint32_t index;
};

static int stack_text_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct stack_text_arg *a = data;
	uint32_t index = a->index++;
	bool mine = false;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && a->addr >= lo && a->addr < lo + ph->p_memsz)
			mine = true;
	}
	if (!mine)
		return 0;
	/* The first object is the program: the shim is linked into it (libllgoheap.a), so its
	 * text is the program's and nothing may be trimmed by address. */
	if (index == 0)
		return 1;
	for (int i = 0; i < info->dlpi_phnum && stack_ntext < STACK_MAX_TEXT; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		stack_text_lo[stack_ntext] = info->dlpi_addr + ph->p_vaddr;
		stack_text_hi[stack_ntext] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		stack_ntext++;
	}
	return 1;
}

void stack_shim_text(uintptr_t *lo, uintptr_t *hi)
{
	*lo = *hi = 0;
	for (uint32_t i = 0; i < stack_ntext; i++) {
		if (!*hi || stack_text_lo[i] < *lo)
			*lo = stack_text_lo[i];
		if (stack_text_hi[i] > *hi)
			*hi = stack_text_hi[i];
	}
}

void stack_init(void)
{
	Dl_info di;
	if (stack_ntext || !dladdr((void *)(uintptr_t)stack_init, &di) || !di.dli_fbase)
		return;
	struct stack_text_arg a = { .addr = (uintptr_t)stack_init, .index = 0 };
	dl_iterate_phdr(stack_text_cb, &a);
}

/* ---- walking --------------------------------------------------------------------------- */

static uint32_t stack_walk_from(uint64_t *out, uint32_t max, uintptr_t fp, uintptr_t prev,
				uintptr_t lo, uintptr_t hi)
{
	uint32_t n = 0;
	while (n < max) {
		if ((fp & 7) || fp <= prev || fp < lo || hi < lo + 16 || fp > hi - 16)
			break;
		const uintptr_t *f = (const uintptr_t *)fp;
		uintptr_t ret = f[1];
		if (!ret)
			break;
		out[n++] = ret;
		prev = fp;
		fp = f[0];
	}
	return n;
}

uint32_t stack_walk(uint64_t *out, uint32_t max, uintptr_t fp, uintptr_t lo, uintptr_t hi)
{
	return stack_walk_from(out, max, fp, 0, lo, hi);
}

uint32_t stack_trim(uint64_t *frames, uint32_t n)
{
	uint32_t k = 0;
	while (k < n && stack_is_plumbing(frames[k]))
		k++;
	if (k == 0 || k == n)
		return n; /* nothing to trim, or nothing would remain: keep the whole stack */
	memmove(frames, frames + k, (size_t)(n - k) * sizeof(frames[0]));
	return n - k;
}

uint32_t stack_capture(uint64_t *out, uint32_t max, void *ra, void *frame, uintptr_t lo,
		       uintptr_t hi)
{
	/* Room for plumbing frames that trimming removes. */
	uint64_t tmp[LLGO_MAX_FRAMES + 8];
	uint32_t cap = max + 8 < LLGO_ARRAY_SIZE(tmp) ? max + 8 : (uint32_t)LLGO_ARRAY_SIZE(tmp);
	uint32_t n = 0;
	if (max == 0)
		return 0;
	tmp[n++] = (uint64_t)(uintptr_t)ra;
	uintptr_t f = (uintptr_t)frame;
	if (!(f & 7) && f >= lo && hi >= lo + 16 && f <= hi - 16)
		n += stack_walk_from(tmp + 1, cap - 1, ((const uintptr_t *)f)[0], f, lo, hi);
	n = stack_trim(tmp, n);
	if (n > max)
		n = max;
	memcpy(out, tmp, (size_t)n * sizeof(out[0]));
	return n;
}

void stack_thread_bounds(uintptr_t *lo, uintptr_t *hi)
{
	pthread_attr_t attr;
	*lo = *hi = 0;
	if (pthread_getattr_np(pthread_self(), &attr) != 0)
		return;
	void *addr = NULL;
	size_t size = 0;
	if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr && size) {
		*lo = (uintptr_t)addr;
		*hi = (uintptr_t)addr + size;
	}
	pthread_attr_destroy(&attr);
}

/* ---- trimming by name: symbol tables of the loaded objects ----------------------------- */

struct stack_prefix_arg {
	const char *prefix;
	size_t len;
	uint32_t index;
	int found;
	int err;
};

static bool stack_within(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* Add every defined function of the ELF file at path whose name starts with a->prefix,
 * relocated by bias. The file is mapped read-only and every offset checked against its size. */
static void stack_scan_file(const char *path, uintptr_t bias, struct stack_prefix_arg *a)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < sizeof(Elf64_Ehdr)) {
		close(fd);
		return;
	}
	uint64_t size = (uint64_t)st.st_size;
	const unsigned char *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) ||
	    !stack_within(eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr), size))
		goto out;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
	int pick = -1;
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type == SHT_SYMTAB) {
			pick = i;
			break;
		}
		if (sh[i].sh_type == SHT_DYNSYM)
			pick = i;
	}
	if (pick < 0 || sh[pick].sh_link >= eh->e_shnum ||
	    sh[pick].sh_entsize != sizeof(Elf64_Sym) ||
	    !stack_within(sh[pick].sh_offset, sh[pick].sh_size, size))
		goto out;
	const Elf64_Shdr *strs = &sh[sh[pick].sh_link];
	if (!stack_within(strs->sh_offset, strs->sh_size, size))
		goto out;
	const Elf64_Sym *syms = (const Elf64_Sym *)(m + sh[pick].sh_offset);
	const char *names = (const char *)(m + strs->sh_offset);
	uint64_t nsyms = sh[pick].sh_size / sizeof(Elf64_Sym);
	for (uint64_t i = 0; i < nsyms; i++) {
		const Elf64_Sym *s = &syms[i];
		if (ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_shndx == SHN_UNDEF ||
		    s->st_size == 0 || s->st_name >= strs->sh_size ||
		    strs->sh_size - s->st_name <= a->len)
			continue;
		if (memcmp(names + s->st_name, a->prefix, a->len) != 0)
			continue;
		uintptr_t lo = bias + (uintptr_t)s->st_value;
		int rc = stack_add_range(lo, lo + (uintptr_t)s->st_size);
		if (rc < 0)
			a->err = rc;
		else
			a->found++;
	}
out:
	munmap((void *)(uintptr_t)m, (size_t)size);
}

static int stack_prefix_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct stack_prefix_arg *a = data;
	uint32_t index = a->index++;
	const char *path = info->dlpi_name;
	if (index == 0 && (!path || !path[0]))
		path = "/proc/self/exe";
	if (path && path[0] == '/')
		stack_scan_file(path, info->dlpi_addr, a);
	return 0;
}

int stack_add_prefix(const char *prefix)
{
	if (!prefix || !prefix[0])
		return -EINVAL;
	size_t len = strnlen(prefix, STACK_PREFIX_LEN);
	if (len >= STACK_PREFIX_LEN)
		return -ENAMETOOLONG;
	int rc;
	pthread_mutex_lock(&stack_prefix_lock);
	for (uint32_t i = 0; i < stack_nprefixes; i++) {
		if (strcmp(stack_prefixes[i], prefix) == 0) {
			rc = -EEXIST;
			goto out;
		}
	}
	if (stack_nprefixes >= STACK_MAX_PREFIXES) {
		rc = -ENOSPC;
		goto out;
	}
	memcpy(stack_prefixes[stack_nprefixes++], prefix, len + 1);
	struct stack_prefix_arg a = { .prefix = prefix, .len = len };
	dl_iterate_phdr(stack_prefix_cb, &a);
	rc = a.err && !a.found ? a.err : a.found;
out:
	pthread_mutex_unlock(&stack_prefix_lock);
	return rc;
}
