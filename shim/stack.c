// SPDX-License-Identifier: MIT
/*
 * stack.c: the stack of a sampled allocation, from frame pointers, trimmed so that frame 0 is
 * the program's allocating call site. The walk trusts nothing it reads: every frame pointer
 * must lie inside the stack being walked, be 8-aligned and be above the previous one, so a
 * broken chain (code built without frame pointers) ends the walk early instead of faulting.
 * Since the walk starts at the slow path's own frame and only goes up, everything it reads
 * lies between the current stack pointer and the stack's end: mapped memory.
 *
 * Stack bounds come without locks: the thread's own stack is set at thread start
 * (lifecycle.c); a thread the shim did not see start, or a frame on another stack (a
 * sigaltstack handler, a coroutine), is looked up once in /proc/self/maps with raw
 * open/read (no malloc, no stdio) and cached per thread. A walk may cross once from such a
 * stack to the thread's own (a signal frame's saved frame pointer is the interrupted code's).
 *
 * Plumbing that is trimmed from the top of a stack: the shim's own text (found at init from a
 * shim function with dladdr and the ELF program headers, dl_iterate_phdr), the real C++
 * operator new functions (registered by override_cxx.c from their symbol sizes), and the
 * functions registered through llgo_heap_trim_add (name prefixes looked up once in the
 * loaded objects' symbol tables). Range tables are append-only and lock-free for readers.
 * Symbolization is left to the daemon; this file only compares addresses. The sampled path's
 * capture (stack_sample) keeps the thread's last walk and what was derived from it (struct
 * stack_memo, internal.h): a walk equal to the previous one reuses its trimming and key.
 */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <errno.h>
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
/* Ranges published (counted after their hi is stored): a stack_memo trimmed under the same
 * count saw every range published by then. */
static _Atomic uint32_t stack_published;

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
	int rc = stack_range_add(stack_ranges, &stack_nranges, STACK_MAX_RANGES, lo, hi);
	/* release: pairs with stack_sample's acquire; the range is published before */
	if (rc == 0)
		atomic_fetch_add_explicit(&stack_published, 1, memory_order_release);
	return rc;
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
	/* The first object is the program: the shim is linked into it without its own section
	 * (an object file rather than libllgoheap.a), so its text is the program's and nothing
	 * may be trimmed by address. A library holding the shim this way is trimmed whole. */
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

/* Defined by the linker when the shim comes from libllgoheap.a (its code renamed to this
 * section, see the Makefile): exactly the shim's code, in a program or in a library. */
extern const char __start_llgo_heap_text[] __attribute__((weak, visibility("hidden")));
extern const char __stop_llgo_heap_text[] __attribute__((weak, visibility("hidden")));

void stack_init(void)
{
	uintptr_t lo = (uintptr_t)__start_llgo_heap_text, hi = (uintptr_t)__stop_llgo_heap_text;
	if (!stack_ntext && lo && hi > lo) {
		stack_text_lo[0] = lo;
		stack_text_hi[0] = hi;
		stack_ntext = 1;
		return;
	}
	Dl_info di;
	if (stack_ntext || !dladdr((void *)(uintptr_t)stack_init, &di) || !di.dli_fbase)
		return;
	struct stack_text_arg a = { .addr = (uintptr_t)stack_init, .index = 0 };
	dl_iterate_phdr(stack_text_cb, &a);
}

/* ---- walking --------------------------------------------------------------------------- */

/* The walk; with memo, each return address is also compared with the one out[n] held before
 * it is stored there, and the differences are or-ed into *memo (stack_sample). */
static inline __attribute__((always_inline)) uint32_t
stack_walk_from(uint64_t *out, uint32_t max, uintptr_t fp, uintptr_t prev, uintptr_t lo,
		uintptr_t hi, uintptr_t lo2, uintptr_t hi2, uint64_t *memo)
{
	uint32_t n = 0;
	uint64_t diff = 0;
	if (hi < lo + 16)
		return 0;
	/* fp must lie in [floor, top]: above the previous frame, in the range, 16 bytes readable */
	uintptr_t floor = prev >= lo ? prev + 1 : lo, top = hi - 16;
	while (n < max) {
		if (fp & 7)
			break;
		if (fp < floor || fp > top) {
			/* One crossing to the second range (from an alternate stack to the
			 * thread's own), where the order of addresses starts again. */
			if (hi2 <= lo2 || fp < lo2 || hi2 < lo2 + 16 || fp > hi2 - 16)
				break;
			floor = lo2;
			top = hi2 - 16;
			lo2 = hi2 = 0;
			continue;
		}
		const uintptr_t *f = (const uintptr_t *)fp;
		uintptr_t ret = f[1];
		if (!ret)
			break;
		if (memo)
			diff |= out[n] ^ ret;
		out[n++] = ret;
		floor = fp + 1;
		fp = f[0];
	}
	if (memo)
		*memo |= diff;
	return n;
}

uint32_t stack_walk(uint64_t *out, uint32_t max, uintptr_t fp, uintptr_t lo, uintptr_t hi)
{
	return stack_walk_from(out, max, fp, 0, lo, hi, 0, 0, NULL);
}

/* How many leading frames are plumbing; 0 when none are or when nothing else would remain. */
static uint32_t stack_plumbing(const uint64_t *frames, uint32_t n)
{
	uint32_t k = 0;
	while (k < n && stack_is_plumbing(frames[k]))
		k++;
	return k == n ? 0 : k;
}

uint32_t stack_trim(uint64_t *frames, uint32_t n)
{
	uint32_t k = stack_plumbing(frames, n);
	if (k == 0)
		return n; /* nothing to trim, or nothing would remain: keep the whole stack */
	memmove(frames, frames + k, (size_t)(n - k) * sizeof(frames[0]));
	return n - k;
}

/* The walk from the slow path's frame (ra is frame 0) into out, up to cap frames. */
static inline __attribute__((always_inline)) uint32_t
stack_walk_all(uint64_t *out, uint32_t cap, void *ra, void *frame, uintptr_t lo, uintptr_t hi,
	       uintptr_t lo2, uintptr_t hi2, uint64_t *memo)
{
	uint32_t n = 0;
	if (memo)
		*memo |= out[0] ^ (uint64_t)(uintptr_t)ra;
	out[n++] = (uint64_t)(uintptr_t)ra;
	uintptr_t f = (uintptr_t)frame;
	if (!(f & 7) && f >= lo && hi >= lo + 16 && f <= hi - 16)
		n += stack_walk_from(out + 1, cap - 1, ((const uintptr_t *)f)[0], f, lo, hi, lo2,
				     hi2, memo);
	return n;
}

uint32_t stack_capture(uint64_t *out, uint32_t max, void *ra, void *frame, uintptr_t lo,
		       uintptr_t hi, uintptr_t lo2, uintptr_t hi2)
{
	/* Room for plumbing frames that trimming removes. */
	uint64_t tmp[LLGO_MAX_FRAMES + 8];
	uint32_t cap = max + 8 < LLGO_ARRAY_SIZE(tmp) ? max + 8 : (uint32_t)LLGO_ARRAY_SIZE(tmp);
	if (max == 0)
		return 0;
	uint32_t n = stack_walk_all(tmp, cap, ra, frame, lo, hi, lo2, hi2, NULL);
	n = stack_trim(tmp, n);
	if (n > max)
		n = max;
	memcpy(out, tmp, (size_t)n * sizeof(out[0]));
	return n;
}

uint32_t stack_sample(struct llgo_heap_thread *t, void *ra, void *frame)
{
	struct stack_memo *m = &t->memo;
	uintptr_t lo, hi, lo2 = 0, hi2 = 0, f = (uintptr_t)frame;
	if (llgo_likely(t->bounded && f >= t->stack_lo && f < t->stack_hi)) {
		lo = f; /* stack_bounds_for's first case */
		hi = t->stack_hi;
	} else {
		stack_bounds_for(t, f, &lo, &hi, &lo2, &hi2);
	}
	uint64_t diff = 0;
	uint32_t n = stack_walk_all(m->raw, LLGO_ARRAY_SIZE(m->raw), ra, frame, lo, hi, lo2, hi2,
				    &diff);
	uint32_t nranges = atomic_load_explicit(&stack_published, memory_order_acquire);
	if (llgo_unlikely(diff || n != m->n || nranges != m->nranges)) {
		m->n = n;
		m->nranges = nranges;
		m->skip = stack_plumbing(m->raw, n);
		m->fp_seq = 0;
		uint32_t k = n - m->skip < LLGO_MAX_FRAMES ? n - m->skip : LLGO_MAX_FRAMES;
		m->key = llgo_live_key_frames(m->raw + m->skip, k);
	}
	return n - m->skip < LLGO_MAX_FRAMES ? n - m->skip : LLGO_MAX_FRAMES;
}

/* ---- stack bounds without locks -------------------------------------------------------- */

static bool stack_hex(const char **p, const char *end, uintptr_t *out)
{
	uintptr_t v = 0;
	const char *c = *p;
	int digits = 0;
	for (; c < end; c++, digits++) {
		int d;
		if (*c >= '0' && *c <= '9')
			d = *c - '0';
		else if (*c >= 'a' && *c <= 'f')
			d = *c - 'a' + 10;
		else
			break;
		v = (v << 4) | (uintptr_t)d;
	}
	*p = c;
	*out = v;
	return digits > 0 && digits <= (int)(2 * sizeof(uintptr_t));
}

bool stack_mapping_of(uintptr_t sp, uintptr_t *lo, uintptr_t *hi)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* Lines are "lo-hi perms ...\n"; a line may straddle two reads: keep its start. */
	char buf[4096];
	size_t have = 0;
	bool found = false;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		have += (size_t)r;
		size_t start = 0;
		for (;;) {
			char *nl = memchr(buf + start, '\n', have - start);
			if (!nl)
				break;
			const char *c = buf + start, *end = nl;
			uintptr_t a, b;
			if (stack_hex(&c, end, &a) && c < end && *c == '-' && (c++, true) &&
			    stack_hex(&c, end, &b) && sp >= a && sp < b) {
				*lo = a;
				*hi = b;
				found = true;
				break;
			}
			start = (size_t)(nl - buf) + 1;
		}
		if (found)
			break;
		if (start == 0 && have == sizeof(buf))
			start = have; /* a line longer than the buffer (a long path): skip it */
		memmove(buf, buf + start, have - start);
		have -= start;
	}
	close(fd);
	return found;
}

#define STACK_ALT_SCAN_NS (10ull * 1000000)

void stack_bounds_for(struct llgo_heap_thread *t, uintptr_t frame, uintptr_t *lo, uintptr_t *hi,
		      uintptr_t *lo2, uintptr_t *hi2)
{
	*lo = *hi = *lo2 = *hi2 = 0;
	if (t->bounded && frame >= t->stack_lo && frame < t->stack_hi) {
		*lo = frame;
		*hi = t->stack_hi;
		return;
	}
	if (!(t->alt_hi && frame >= t->alt_lo && frame < t->alt_hi)) {
		/* Not on a stack we know: look it up, at most every STACK_ALT_SCAN_NS per thread
		 * and never once the program forbade syscalls. */
		uint64_t now = attach_now_ns();
		uintptr_t a, b;
		if (link_state() == LLGO_SHIM_OFF ||
		    (t->alt_scan_ns && now - t->alt_scan_ns < STACK_ALT_SCAN_NS))
			return;
		t->alt_scan_ns = now;
		if (!stack_mapping_of(frame, &a, &b))
			return;
		if (!t->bounded) {
			/* The thread's own stack, first seen here. */
			t->stack_lo = a;
			t->stack_hi = b;
			t->stack_end = b;
			t->bounded = 1;
			*lo = frame;
			*hi = b;
			return;
		}
		t->alt_lo = a;
		t->alt_hi = b;
	}
	*lo = frame;
	*hi = t->alt_hi;
	if (t->bounded) {
		*lo2 = t->stack_lo;
		*hi2 = t->stack_hi;
	}
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
