// SPDX-License-Identifier: MIT
/*
 * override_got.c: `llgo-heap attach` and `llgo-heap detach` inside the process. The CLI
 * (client/attach.c) stops a thread with ptrace, makes it dlopen this library (the
 * constructor of a copy loaded late connects to nothing: lifecycle.c) and call
 * llgo_heap_attach_start or llgo_heap_attach_stop; everything else happens here, on that
 * thread, while the program's other threads run.
 *
 * Attach routes the process's allocation functions to the shim the way the dynamic linker
 * would have under LD_PRELOAD: every module's GOT entries (DT_JMPREL's JUMP_SLOT and DT_RELA's
 * GLOB_DAT relocations) that name one of them and hold the process's definition (the global
 * scope's: dlsym of the main program), or, lazily bound, the module's own PLT, get the shim's
 * function instead. Each write is one aligned 8-byte store (a thread calling through the entry
 * sees the old function or the new one); entries in RELRO pages are written between two
 * mprotect calls that make the page writable and read-only again. The C++ operators are not
 * patched: libstdc++'s call malloc and free through their GOT, which is. Modules loaded later
 * are patched when the dlopen wrapper below sees them (a file named by a path, from the base
 * namespace: dlopen looks at its caller's RUNPATH and namespace, so other calls jump to the
 * real dlopen untouched), or else within LIFECYCLE_CHECK_NS of sampling (lifecycle_tick: the
 * loader's count of objects changed). Objects a module allocated before it was patched are
 * real blocks the shim never saw, as are those of the whole process before attach.
 *
 * Detach restores every entry that still holds the shim's function (the value it held before,
 * or, for an entry found again after a module was unloaded, the process's definition), then
 * ends the session (lifecycle_detach: the daemon drains and freezes the in-use view; the
 * gate makes sure no slow path still uses the rings or the table it unmaps). Nothing of the
 * shim stays on any path of the program: a detached process pays nothing. The library stays
 * loaded (RTLD_NODELETE): a pointer the program took while attached (&malloc) keeps working,
 * at rate 0, straight to the real function.
 *
 * Why objects allocated before attach can never be taken for sampled ones: free and realloc
 * look a pointer up in the live table (live.c), which holds only objects sampled since this
 * session's attach and still allocated, and a block allocated before attach and not freed
 * cannot have the address of one of those. Sampled objects are placed (live_set_placer) in
 * page-aligned blocks of the real allocator's own, never in the shim's arena nor inside a
 * larger block: after detach, the program frees them with the real free directly.
 *
 * What is left to others: the connection and its state (lifecycle.c), sampling (sample.c),
 * the table (live.c); the ptrace side and the refusals (client/attach.c).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

/* The functions routed to the shim: the malloc family, prctl and syscall (so that the shim
 * goes quiet before a seccomp filter, as under LD_PRELOAD: override_thread.c), dlopen, and
 * the C++ operators when they are libstdc++'s (override_cxx_attach). */
enum {
	OVERRIDE_GOT_DLOPEN,
	OVERRIDE_GOT_MALLOC,
	OVERRIDE_GOT_NLIBC = 13,
	OVERRIDE_GOT_MAX = 40,
};
static const char *override_got_names[OVERRIDE_GOT_MAX] = {
	"dlopen", "malloc", "free", "calloc", "realloc", "posix_memalign", "aligned_alloc",
	"memalign", "valloc", "pvalloc", "malloc_usable_size", "prctl", "syscall",
};
static int override_got_nfn = OVERRIDE_GOT_NLIBC;

/* Per function: the process's definition, and the shim's (for dlopen: the wrapper); 0: the
 * function is not routed. */
static uintptr_t override_got_real[OVERRIDE_GOT_MAX], override_got_mine[OVERRIDE_GOT_MAX];

/* One patched entry: slot held `old` before it got `mine`. relro: the slot's page is
 * read-only (PT_GNU_RELRO) outside our writes. */
struct override_got_patch {
	uintptr_t slot, old, mine;
	uint32_t relro;
	uint32_t fn;
};

/* Everything below is read and written under override_got_lock, which is never held across a
 * call into the program (dlopen's is called outside it). */
static pthread_mutex_t override_got_lock = PTHREAD_MUTEX_INITIALIZER;
static bool override_got_on;
static struct override_got_patch *override_got_list; /* mmap'ed, grown by remapping */
static size_t override_got_n, override_got_cap;
/* Modules scanned (load address and name pointer) since the loader's unload count was
 * override_got_subs; override_got_adds: its load count at the last scan. */
struct override_got_seen {
	uintptr_t base;
	const char *name;
};
static struct override_got_seen *override_got_seen;
static size_t override_got_nseen, override_got_capseen;
static unsigned long long override_got_adds, override_got_subs;
static uintptr_t override_got_self; /* this library's load address */
static size_t override_got_page;

/* ---- storage (mmap: malloc is what is being patched) ------------------------------------- */

static bool override_got_grow(void **arr, size_t *cap, size_t elem, size_t need)
{
	if (need <= *cap)
		return true;
	size_t ncap = *cap ? *cap * 2 : 256;
	while (ncap < need)
		ncap *= 2;
	void *m = mmap(NULL, ncap * elem, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	if (m == MAP_FAILED)
		return false;
	if (*arr) {
		memcpy(m, *arr, *cap * elem);
		munmap(*arr, *cap * elem);
	}
	*arr = m;
	*cap = ncap;
	return true;
}

/* ---- one module ---------------------------------------------------------------------------- */

/* A d_ptr of the in-memory dynamic section: glibc rewrites most as addresses on x86-64; one
 * that is not (below the load address) is an offset from it. */
static uintptr_t override_got_ptr(uintptr_t base, uintptr_t v)
{
	return base && v < base ? base + v : v;
}

struct override_got_mod {
	uintptr_t base;
	uintptr_t text_lo, text_hi;   /* executable segments' hull: a lazy entry's PLT */
	uintptr_t relro_lo, relro_hi; /* pages glibc made read-only */
	uintptr_t rw_lo[8], rw_hi[8]; /* writable segments (and RELRO), where slots may be */
	unsigned nrw;
	/* the dynamic section */
	const ElfW(Sym) *symtab;
	const char *strtab;
	size_t strsz;
	const uint32_t *gnuhash, *hash;
	const uint16_t *versym;
	const ElfW(Rela) *jmprel, *rela;
	size_t njmprel, nrela;
};

/* The module's segments and dynamic section; false when it has no symbols. */
static bool override_got_parse(const struct dl_phdr_info *info, struct override_got_mod *m)
{
	memset(m, 0, sizeof(*m));
	m->base = info->dlpi_addr;
	m->text_lo = UINTPTR_MAX;
	const ElfW(Phdr) *dynp = NULL;
	for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = m->base + ph->p_vaddr, hi = lo + ph->p_memsz;
		if (ph->p_type == PT_DYNAMIC) {
			dynp = ph;
		} else if (ph->p_type == PT_GNU_RELRO) {
			/* as glibc's _dl_protect_relro: whole pages, the last partial one left
			 * writable */
			m->relro_lo = lo & ~(uintptr_t)(override_got_page - 1);
			m->relro_hi = hi & ~(uintptr_t)(override_got_page - 1);
			if (m->nrw < LLGO_ARRAY_SIZE(m->rw_lo)) {
				m->rw_lo[m->nrw] = lo;
				m->rw_hi[m->nrw++] = hi;
			}
		} else if (ph->p_type == PT_LOAD) {
			if (ph->p_flags & PF_X) {
				if (lo < m->text_lo)
					m->text_lo = lo;
				if (hi > m->text_hi)
					m->text_hi = hi;
			}
			if ((ph->p_flags & PF_W) && m->nrw < LLGO_ARRAY_SIZE(m->rw_lo)) {
				m->rw_lo[m->nrw] = lo;
				m->rw_hi[m->nrw++] = hi;
			}
		}
	}
	if (!dynp)
		return false;
	const ElfW(Dyn) *d = (const ElfW(Dyn) *)(m->base + dynp->p_vaddr);
	size_t nd = dynp->p_memsz / sizeof(*d);
	size_t pltrelsz = 0, relasz = 0, relaent = sizeof(ElfW(Rela));
	long pltrel = DT_RELA;
	uintptr_t jmprel = 0, rela = 0;
	for (size_t i = 0; i < nd && d[i].d_tag != DT_NULL; i++) {
		uintptr_t v = d[i].d_un.d_ptr;
		switch (d[i].d_tag) {
		case DT_SYMTAB:
			m->symtab = (const ElfW(Sym) *)override_got_ptr(m->base, v);
			break;
		case DT_STRTAB:
			m->strtab = (const char *)override_got_ptr(m->base, v);
			break;
		case DT_STRSZ:
			m->strsz = d[i].d_un.d_val;
			break;
		case DT_GNU_HASH:
			m->gnuhash = (const uint32_t *)override_got_ptr(m->base, v);
			break;
		case DT_HASH:
			m->hash = (const uint32_t *)override_got_ptr(m->base, v);
			break;
		case DT_VERSYM:
			m->versym = (const uint16_t *)override_got_ptr(m->base, v);
			break;
		case DT_JMPREL:
			jmprel = override_got_ptr(m->base, v);
			break;
		case DT_PLTRELSZ:
			pltrelsz = d[i].d_un.d_val;
			break;
		case DT_PLTREL:
			pltrel = (long)d[i].d_un.d_val;
			break;
		case DT_RELA:
			rela = override_got_ptr(m->base, v);
			break;
		case DT_RELASZ:
			relasz = d[i].d_un.d_val;
			break;
		case DT_RELAENT:
			relaent = d[i].d_un.d_val;
			break;
		}
	}
	if (!m->symtab || !m->strtab || relaent != sizeof(ElfW(Rela)))
		return false;
	if (jmprel && pltrel == DT_RELA) {
		m->jmprel = (const ElfW(Rela) *)jmprel;
		m->njmprel = pltrelsz / sizeof(ElfW(Rela));
	}
	if (rela) {
		m->rela = (const ElfW(Rela) *)rela;
		m->nrela = relasz / sizeof(ElfW(Rela));
	}
	return true;
}

/* ---- where a function is defined ------------------------------------------------------------ */

/* Symbol i of m defines name: 2 in its default version (or unversioned), 1 in another. */
static int override_got_candidate(const struct override_got_mod *m, uint32_t i, const char *name)
{
	const ElfW(Sym) *sym = &m->symtab[i];
	if (sym->st_name >= m->strsz || strcmp(m->strtab + sym->st_name, name) != 0 ||
	    sym->st_shndx == SHN_UNDEF ||
	    (ELF64_ST_BIND(sym->st_info) != STB_GLOBAL && ELF64_ST_BIND(sym->st_info) != STB_WEAK))
		return 0;
	return !m->versym || !(m->versym[i] & 0x8000) ? 2 : 1;
}

/* A symbol index of m that defines name (its default version when it has several), or 0. */
static uint32_t override_got_defines(const struct override_got_mod *m, const char *name)
{
	uint32_t h = 5381, found = 0;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++)
		h = h * 33 + *c;
	if (m->gnuhash) {
		uint32_t nb = m->gnuhash[0], off = m->gnuhash[1], nbloom = m->gnuhash[2];
		const uint32_t *buckets = m->gnuhash + 4 + nbloom * (sizeof(ElfW(Addr)) / 4);
		if (!nb)
			return 0;
		uint32_t i = buckets[h % nb];
		if (i < off)
			return 0;
		const uint32_t *gchain = buckets + nb - off;
		for (;; i++) {
			uint32_t h2 = gchain[i];
			int c = (h | 1) == (h2 | 1) ? override_got_candidate(m, i, name) : 0;
			if (c == 2)
				return i;
			if (c && !found)
				found = i;
			if (h2 & 1)
				break;
		}
		return found;
	}
	if (!m->hash)
		return 0;
	/* the SysV hash */
	uint32_t hs = 0;
	for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
		hs = (hs << 4) + *c;
		uint32_t g = hs & 0xf0000000u;
		if (g)
			hs ^= g >> 24;
		hs &= ~g;
	}
	uint32_t nb = m->hash[0];
	if (!nb)
		return 0;
	const uint32_t *chain = m->hash + 2 + nb;
	for (uint32_t i = m->hash[2 + hs % nb]; i; i = chain[i]) {
		int c = override_got_candidate(m, i, name);
		if (c == 2)
			return i;
		if (c && !found)
			found = i;
	}
	return found;
}

struct override_got_def {
	const char *name;
	uintptr_t addr;
	bool ifunc;
};

static int override_got_def_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct override_got_def *d = arg;
	struct override_got_mod m;
	if (info->dlpi_addr == override_got_self || !override_got_parse(info, &m))
		return 0;
	uint32_t i = override_got_defines(&m, d->name);
	if (!i)
		return 0;
	d->ifunc = ELF64_ST_TYPE(m.symtab[i].st_info) == STT_GNU_IFUNC;
	d->addr = m.base + m.symtab[i].st_value;
	return 1;
}

static void *override_got_main; /* dlopen(NULL) while resolving */

/*
 * The definition of name that the process's modules bind to: the first object, in load order
 * (the global scope's order for the objects loaded at start), that defines it. Not dlsym of
 * the main program: in an executable built without -pie that takes a function's address, the
 * symbol's value is the executable's own PLT entry (a canonical PLT address: Debian's
 * python3.11 for malloc), which jumps through the very GOT entry we patch.
 */
static void *override_got_definition(const char *name)
{
	struct override_got_def d = { .name = name };
	dl_iterate_phdr(override_got_def_cb, &d);
	if (!d.addr || d.ifunc) /* an IFUNC: its resolver picks; dlsym calls it */
		return override_got_main ? dlsym(override_got_main, name) : NULL;
	return (void *)d.addr;
}

/* ---- patching one module ---------------------------------------------------------------- */

static bool override_got_in_rw(const struct override_got_mod *m, uintptr_t slot)
{
	for (unsigned i = 0; i < m->nrw; i++)
		if (slot >= m->rw_lo[i] && slot + 8 <= m->rw_hi[i])
			return true;
	return false;
}

static int override_got_fn_of(const char *name)
{
	/* every relocation of every module comes here: most names fail the first letter */
	if (!strchr("mfcrpavsd_", name[0]) || (name[0] == '_' && name[1] != 'Z'))
		return -1;
	for (int i = 0; i < override_got_nfn; i++)
		if (strcmp(name, override_got_names[i]) == 0)
			return i;
	return -1;
}

/* Write v into slot (one aligned 8-byte store), with the page made writable around it when
 * relro; false when the page could not be made writable. */
static bool override_got_store(uintptr_t slot, uintptr_t v, bool relro)
{
	void *pg = (void *)(slot & ~(uintptr_t)(override_got_page - 1));
	if (relro && mprotect(pg, override_got_page, PROT_READ | PROT_WRITE) != 0)
		return false;
	__atomic_store_n((uintptr_t *)slot, v, __ATOMIC_RELEASE);
	if (relro)
		mprotect(pg, override_got_page, PROT_READ);
	return true;
}

/*
 * An entry is patched when it holds the function's definition, or (JUMP_SLOT) its own
 * module's PLT (not bound yet: lazy binding). An entry holding a canonical PLT address (an
 * executable's PLT entry, see override_got_definition) is left alone: calls through it reach
 * that executable's entry, which is patched, and the address keeps comparing equal to the
 * one every other module holds.
 */
static void override_got_rela(const struct override_got_mod *m, const ElfW(Rela) *r, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t type = (uint32_t)ELF64_R_TYPE(r[i].r_info);
		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
			continue;
		uint32_t si = (uint32_t)ELF64_R_SYM(r[i].r_info);
		if (!si)
			continue;
		uint32_t off = m->symtab[si].st_name;
		if (off >= m->strsz)
			continue;
		int fn = override_got_fn_of(m->strtab + off);
		if (fn < 0 || !override_got_real[fn])
			continue;
		uintptr_t slot = m->base + r[i].r_offset;
		if ((slot & 7) || !override_got_in_rw(m, slot))
			continue;
		uintptr_t cur = __atomic_load_n((uintptr_t *)slot, __ATOMIC_ACQUIRE);
		uintptr_t old;
		if (cur == override_got_mine[fn])
			old = override_got_real[fn]; /* patched before this list knew it */
		else if (cur == override_got_real[fn] ||
			 (type == R_X86_64_JUMP_SLOT && cur >= m->text_lo && cur < m->text_hi))
			old = cur;
		else
			continue; /* bound elsewhere (another namespace, DEEPBIND): left alone */
		if (!override_got_grow((void **)&override_got_list, &override_got_cap,
				       sizeof(*override_got_list), override_got_n + 1))
			return;
		bool relro = slot >= m->relro_lo && slot < m->relro_hi;
		if (cur != override_got_mine[fn] &&
		    !override_got_store(slot, override_got_mine[fn], relro))
			continue;
		override_got_list[override_got_n++] = (struct override_got_patch){
			.slot = slot, .old = old, .mine = override_got_mine[fn], .relro = relro,
			.fn = (uint32_t)fn
		};
	}
}

static void override_got_module(struct dl_phdr_info *info)
{
	struct override_got_mod m;
	if (!override_got_parse(info, &m))
		return;
	if (m.jmprel)
		override_got_rela(&m, m.jmprel, m.njmprel);
	if (m.rela)
		override_got_rela(&m, m.rela, m.nrela);
}

/* ---- every module -------------------------------------------------------------------------- */

struct override_got_walk {
	bool counts_only;
	unsigned long long adds, subs;
};

static bool override_got_was_seen(const struct dl_phdr_info *info)
{
	for (size_t i = 0; i < override_got_nseen; i++)
		if (override_got_seen[i].base == info->dlpi_addr &&
		    override_got_seen[i].name == info->dlpi_name)
			return true;
	return false;
}

static int override_got_each(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct override_got_walk *w = arg;
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
		w->adds = info->dlpi_adds;
		w->subs = info->dlpi_subs;
	}
	if (w->counts_only)
		return 1;
	if (info->dlpi_addr == override_got_self || override_got_was_seen(info))
		return 0;
	if (override_got_grow((void **)&override_got_seen, &override_got_capseen,
			      sizeof(*override_got_seen), override_got_nseen + 1))
		override_got_seen[override_got_nseen++] =
			(struct override_got_seen){ info->dlpi_addr, info->dlpi_name };
	override_got_module(info);
	return 0;
}

/* Patch the modules not scanned yet (every module after an unload: then the list is made
 * again, entries of unloaded modules dropped, and an entry found holding the shim's function
 * restores to the process's definition). Under the lock. */
static void override_got_scan(void)
{
	struct override_got_walk w = { .counts_only = true };
	dl_iterate_phdr(override_got_each, &w);
	if (w.subs != override_got_subs) {
		override_got_nseen = 0;
		override_got_n = 0;
		override_got_subs = w.subs;
	}
	w.counts_only = false;
	dl_iterate_phdr(override_got_each, &w);
	override_got_adds = w.adds;
}

/* lifecycle_tick: objects loaded since the last scan (their count, then the scan), from a
 * sampled allocation's slow path: never waits for the lock. */
static void override_got_tick(void)
{
	if (pthread_mutex_trylock(&override_got_lock) != 0)
		return;
	if (override_got_on) {
		struct override_got_walk w = { .counts_only = true };
		dl_iterate_phdr(override_got_each, &w);
		if (w.adds != override_got_adds || w.subs != override_got_subs)
			override_got_scan();
	}
	pthread_mutex_unlock(&override_got_lock);
}

/* ---- dlopen ------------------------------------------------------------------------------- */

typedef void *(*override_got_dlopen_fn)(const char *, int);

/* Whether dlopen, called from here instead of from ra, would do the same: a file named by a
 * path (no search along the caller's RUNPATH), without $ORIGIN-like tokens, from an object
 * of the base namespace. */
static bool override_got_same_from_here(const char *file, void *ra)
{
	if (!file || !strchr(file, '/') || strchr(file, '$'))
		return false;
	Dl_info di;
	struct link_map *lm = NULL;
	if (!dladdr1(ra, &di, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return false;
	Lmid_t ns;
	return dlinfo(lm, RTLD_DI_LMID, &ns) == 0 && ns == LM_ID_BASE;
}

static llgo_noinline void override_got_opened(void)
{
	int e = errno;
	pthread_mutex_lock(&override_got_lock);
	if (override_got_on)
		override_got_scan();
	pthread_mutex_unlock(&override_got_lock);
	errno = e;
}

/* What modules' dlopen entries point to while attached. Any call that dlopen would treat
 * differently from here (its caller matters) is a tail jump to the real dlopen, which then
 * sees the program's return address: its module is patched at the next tick instead. */
static void *override_got_dlopen(const char *file, int mode)
{
	override_got_dlopen_fn real =
		(override_got_dlopen_fn)__atomic_load_n(&override_got_real[OVERRIDE_GOT_DLOPEN],
							__ATOMIC_RELAXED);
	if (!override_got_same_from_here(file, __builtin_return_address(0)))
		return real(file, mode);
	void *h = real(file, mode);
	if (h)
		override_got_opened();
	return h;
}

/* ---- attach and detach --------------------------------------------------------------------- */

/* Sampled objects: page-aligned blocks of the real allocator (see the top of this file). */
static void *override_got_place(size_t size)
{
	return __atomic_load_n(&override_aligned_alloc, __ATOMIC_RELAXED)(LIVE_PAGE,
									   size ? size : 1);
}

/* The process's definitions (main's scope) and the shim's own (this object first in its own
 * scope). false: the process's malloc is this copy's (preloaded: nothing to attach). */
static bool override_got_resolve(void *self, int from, int to)
{
	for (int i = from; i < to; i++) {
		override_got_real[i] = (uintptr_t)override_got_definition(override_got_names[i]);
		override_got_mine[i] = (uintptr_t)dlsym(self, override_got_names[i]);
	}
	if (from == 0)
		override_got_mine[OVERRIDE_GOT_DLOPEN] = (uintptr_t)override_got_dlopen;
	for (int i = from; i < to; i++) {
		Dl_info di;
		if (i != OVERRIDE_GOT_DLOPEN &&
		    (!override_got_mine[i] || !dladdr((void *)override_got_mine[i], &di) ||
		     (uintptr_t)di.dli_fbase != override_got_self))
			override_got_mine[i] = 0;
		if (override_got_real[i] && dladdr((void *)override_got_real[i], &di) &&
		    (uintptr_t)di.dli_fbase == override_got_self)
			return false;
		if (!override_got_mine[i])
			override_got_real[i] = 0; /* not routed */
	}
	return from != 0 || override_got_real[OVERRIDE_GOT_MALLOC] != 0;
}

static int override_got_self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	uintptr_t at = (uintptr_t)arg;
	for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && at >= info->dlpi_addr + ph->p_vaddr &&
		    at < info->dlpi_addr + ph->p_vaddr + ph->p_memsz) {
			override_got_self = info->dlpi_addr;
			return 1;
		}
	}
	return 0;
}

/*
 * Attach this process: connect to the daemon at socket_path (NULL: the one the process would
 * use under LD_PRELOAD) at rate, then route the allocation functions to the shim. Returns the
 * number of GOT entries patched, or -errno: -EEXIST when the process already has a sampler
 * (LD_PRELOAD, a linked copy), -EALREADY when attached, -EPERM under a seccomp filter, a
 * connection's error.
 */
llgo_export int llgo_heap_attach_start(const char *socket_path, uint64_t rate)
{
	if (owner_defers() || !atomic_load_explicit(&link_late, memory_order_relaxed))
		return -EEXIST;
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1; /* nothing this thread allocates here is sampled */
	pthread_mutex_lock(&override_got_lock);
	int rc = 0;
	if (override_got_on) {
		rc = -EALREADY;
		goto out;
	}
	override_got_page = attach_page_size;
	Dl_info di;
	if (!override_got_self) {
		dl_iterate_phdr(override_got_self_cb, (void *)(uintptr_t)override_got_self_cb);
		if (!dladdr((void *)(uintptr_t)override_got_self_cb, &di) || !override_got_self) {
			rc = -ENOENT;
			goto out;
		}
	} else if (!dladdr((void *)(uintptr_t)override_got_self_cb, &di)) {
		rc = -ENOENT;
		goto out;
	}
	void *main = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
	void *self = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
	override_got_main = main;
	override_got_nfn = OVERRIDE_GOT_NLIBC;
	bool ok = main && self && override_got_resolve(self, 0, OVERRIDE_GOT_NLIBC);
	if (ok) {
		override_resolve_global(override_got_definition);
		/* the C++ operators, after the malloc family the inline mode calls */
		const char *const *cxx;
		size_t ncxx;
		if (override_cxx_attach(override_got_definition, &cxx, &ncxx) &&
		    OVERRIDE_GOT_NLIBC + ncxx <= OVERRIDE_GOT_MAX) {
			for (size_t i = 0; i < ncxx; i++)
				override_got_names[OVERRIDE_GOT_NLIBC + i] = cxx[i];
			override_got_nfn = OVERRIDE_GOT_NLIBC + (int)ncxx;
			if (!override_got_resolve(self, OVERRIDE_GOT_NLIBC, override_got_nfn))
				override_got_nfn = OVERRIDE_GOT_NLIBC;
		}
	}
	override_got_main = NULL;
	if (self)
		dlclose(self);
	if (main)
		dlclose(main);
	if (!ok) {
		rc = -EEXIST;
		goto out;
	}
	override_free_untrack();
	live_set_placer(override_got_place);
	rc = lifecycle_attach_now(socket_path, rate);
	if (rc)
		goto out;
	override_got_on = true;
	override_got_nseen = 0;
	override_got_n = 0;
	struct override_got_walk w = { .counts_only = true };
	dl_iterate_phdr(override_got_each, &w);
	override_got_subs = w.subs;
	override_got_scan();
	atomic_store_explicit(&lifecycle_tick, override_got_tick, memory_order_release);
	rc = override_got_n > INT32_MAX ? INT32_MAX : (int)override_got_n;
out:
	pthread_mutex_unlock(&override_got_lock);
	t->guard = guard;
	return rc;
}

/* Restore the entries of one module, inside dl_iterate_phdr: a module the loader still lists
 * there cannot be unmapped meanwhile (dlclose unlinks it under the same lock before it
 * unmaps it). An entry that no longer holds the shim's function is left as it is. */
static int override_got_restore(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	size_t *restored = arg;
	if (info->dlpi_addr == override_got_self)
		return 0;
	for (ElfW(Half) k = 0; k < info->dlpi_phnum; k++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
			continue;
		/* (the RELRO part of a module lies in its writable segment) */
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
		for (size_t i = 0; i < override_got_n; i++) {
			const struct override_got_patch *p = &override_got_list[i];
			if (p->slot < lo || p->slot + 8 > hi)
				continue;
			if (__atomic_load_n((uintptr_t *)p->slot, __ATOMIC_ACQUIRE) == p->mine &&
			    override_got_store(p->slot, p->old, p->relro))
				(*restored)++;
		}
	}
	return 0;
}

/*
 * Detach: every entry back to what it held, then the session ends (lifecycle_detach). Returns
 * the number of entries restored, or -errno: -ENOENT when not attached by llgo-heap attach,
 * -EBUSY when a slow path did not leave in time (restored anyway; the session's memory is
 * left mapped).
 */
llgo_export int llgo_heap_attach_stop(void)
{
	if (!atomic_load_explicit(&link_late, memory_order_relaxed))
		return -ENOENT;
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1;
	pthread_mutex_lock(&override_got_lock);
	int rc = -ENOENT;
	if (!override_got_on)
		goto out;
	atomic_store_explicit(&lifecycle_tick, NULL, memory_order_release);
	/* the list as the modules loaded now are (an unload drops entries) */
	struct override_got_walk w = { .counts_only = true };
	dl_iterate_phdr(override_got_each, &w);
	if (w.subs != override_got_subs)
		override_got_scan();
	size_t restored = 0;
	dl_iterate_phdr(override_got_restore, &restored);
	override_got_on = false;
	override_got_n = 0;
	override_got_nseen = 0;
	int drc = lifecycle_detach();
	/* (the placer stays: a slow path the gate let through late still places in a real
	 * block) */
	override_free_untrack();
	rc = drc ? drc : (restored > INT32_MAX ? INT32_MAX : (int)restored);
out:
	pthread_mutex_unlock(&override_got_lock);
	t->guard = guard;
	return rc;
}
