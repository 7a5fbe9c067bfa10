// SPDX-License-Identifier: MIT
/*
 * symbolize.c: addresses to function names, files, lines and inline chains, through
 * elfutils' libdwfl.
 *
 * A struct symfile is one ELF file, opened once and shared: symfile_get() finds it in a
 * global cache keyed by the file (device, inode, size, mtime; with its GNU build ID, or its
 * path when it has none), so a thousand processes running one binary cost one parse, and a
 * copy carrying someone else's build ID never stands in for the real file. Each symfile
 * owns one Dwfl holding one module, reported at the file's own virtual addresses (bias 0),
 * so it serves every process that maps the file; a process address becomes a file address
 * through the file's PT_LOAD segments. libdwfl then gives
 *   - the function: dwfl_module_addrinfo on .symtab, else .dynsym, else the debug file's
 *     .symtab; only a sized STT_FUNC/STT_GNU_IFUNC symbol covering the address names it,
 *     never the nearest one below;
 *   - the separate debug file: dwfl_standard_find_debuginfo (/usr/lib/debug/.build-id, then
 *     .gnu_debuglink beside the file, in its .debug/ and under /usr/lib/debug, checked by
 *     build ID or CRC), then debuginfod (below);
 *   - the leaf's file:line: dwfl_module_getsrc; the chain of inlined calls: dwarf_getscopes
 *     for the innermost scope, dwarf_getscopes_die for the scopes holding it, each
 *     DW_TAG_inlined_subroutine giving its caller's position (DW_AT_call_file/_line).
 * libdwfl 0.188 finds a compile unit through .debug_aranges only; for producers that write
 * none (clang, rustc) the compile units' own ranges are walked (dwarf_haspc).
 *
 * Hostile files. The process's file is handed to libdwfl as our own libelf handle reading
 * with pread (ELF_C_READ), from the descriptor procmaps.c opened and checked (map_files, or
 * the process's root with an inode re-check): deleted or replaced files still symbolize and
 * a file truncated under us gives errors, not SIGBUS. libdwfl maps the debug files it opens,
 * so the search runs in a throwaway Dwfl (whose mappings end with it) and the file found is
 * used as is only when nobody else can truncate it (owned by root or by us, writable by
 * neither group nor others); any other is copied into a sealed memfd first. DWARF whose
 * string sections do not end with a NUL is refused (libdw reads past them, tests/fuzz).
 *
 * debuginfod. When DEBUGINFOD_URLS is set in the daemon's environment, debug files found
 * nowhere locally are fetched by build ID from those servers (libdwfl dlopens Debian's
 * libdebuginfod.so.1), at the first lookup in the module, under the client's own limits
 * (DEBUGINFOD_TIMEOUT, _MAXTIME, _MAXSIZE). Only debug information is fetched, never an
 * executable, and only for build IDs of files the profiled processes map: any local user
 * can make the daemon ask the configured servers for any build ID, and what comes back is
 * used as that file's DWARF (trust the servers you list). Files are cached in
 * DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client, else
 * $HOME/.cache/debuginfod_client: for a root daemon without those set, /root/.cache.
 * Unset, nothing is fetched and no cache is read.
 *
 * Ownership: strings handed out point into libdw's data or the symfile's own, valid while
 * the symfile is referenced. Threads: libdwfl is not thread-safe, so every lookup takes the
 * symfile's mutex; the segment table is immutable once published; the cache of symfiles
 * and the reference counts are under one global mutex.
 *
 * Left to others: reading /proc/PID/maps and opening the mapped files (procmaps.c);
 * choosing which addresses to symbolize (the writers).
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* Results remembered per symfile; beyond this many addresses, lookups are recomputed. */
#define SYM_CACHE_MAX (1u << 18)
/* The largest debug file copied out of a place others can write to. */
#define SYM_COPY_MAX ((off_t)1 << 30)

struct seg {
	uint64_t offset, vaddr, filesz;
};

struct cache_entry {
	uint64_t vaddr;
	uint64_t entry; /* file address of the physical function, 0 when unknown */
	int nframes;
	struct sym_frame frames[];
};

enum debug_search { DEBUG_NOT_SEARCHED, DEBUG_NONE, DEBUG_FOUND };

struct symfile {
	struct symfile *next; /* global cache chain, under g_lock */
	unsigned long refs;   /* under g_lock */
	char *key;

	/* Immutable once published. */
	int fd;     /* ours; every libelf handle on the file reads through a dup of it */
	char *path; /* where the process found it, for the .gnu_debuglink search; or NULL */
	struct seg *segs;
	size_t nsegs;
	uint64_t low, high; /* the module's file addresses */
	bool main_has_syms, main_has_dwarf, main_dwarf_ok;

	pthread_mutex_t lock; /* everything below */
	Dwfl *dwfl;
	Dwfl_Module *mod;
	enum debug_search debug;
	bool debug_trusted; /* the debug file in use is read in place, not copied */
	bool dwarf_tried;
	Dwarf *dwarf; /* owned by the Dwfl */
	Dwarf_Addr bias;
	struct cache_entry **cache; /* open addressing on vaddr */
	size_t cache_cap, cache_n;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct symfile *g_files;
static pthread_once_t g_elf_once = PTHREAD_ONCE_INIT;

static void symfile_elf_init(void)
{
	elf_version(EV_CURRENT);
}

/* ---- The file as the process maps it ------------------------------------------------ */

/*
 * Whether the DWARF string sections of elf end with a NUL. libdw (0.188) reads their
 * strings with strlen: an unterminated last string of a hostile file makes it read past the
 * section (found by tests/fuzz/fuzz_elf.c, kept in tests/fuzz/regress/elf). Such a file
 * keeps its ELF symbols and gets no DWARF. *has_dwarf: a .debug_info with contents.
 */
static bool elf_dwarf_strings_ok(Elf *elf, bool *has_dwarf)
{
	size_t shstrndx;
	*has_dwarf = false;
	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return false;
	Elf_Scn *scn = NULL;
	bool ok = true;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!name || strncmp(name, ".debug_", 7) != 0) {
			if (name && strcmp(name, ".zdebug_info") == 0 && sh.sh_size)
				*has_dwarf = true;
			continue;
		}
		if (strcmp(name, ".debug_info") == 0 && sh.sh_size)
			*has_dwarf = true;
		if (!strstr(name, "str") || strstr(name, "_offsets"))
			continue; /* .debug_str, .debug_line_str (and .dwo forms) */
		/* a compressed section is checked as libdw will read it: decompressed */
		if ((sh.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0)
			return false;
		Elf_Data *d = elf_getdata(scn, NULL);
		if (!d || (d->d_size && (!d->d_buf || ((const char *)d->d_buf)[d->d_size - 1])))
			ok = false;
	}
	return ok;
}

/* PT_LOAD segments, the module's address range and what the file itself carries. */
static int symfile_read_elf(struct symfile *f)
{
	int dfd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
	Elf *elf = dfd >= 0 ? elf_begin(dfd, ELF_C_READ, NULL) : NULL;
	size_t n = 0;
	int err = -ENOEXEC;
	if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &n) != 0 || n > 65536)
		goto out;
	err = -ENOMEM;
	if (!(f->segs = calloc(n ? n : 1, sizeof(*f->segs))))
		goto out;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (f->nsegs == 0) /* exactly as libdwfl finds the file's base: bias 0 */
			f->low = ph.p_vaddr & -ph.p_align;
		f->segs[f->nsegs++] = (struct seg){ ph.p_offset, ph.p_vaddr, ph.p_filesz };
		if (ph.p_vaddr + ph.p_memsz > f->high && ph.p_vaddr + ph.p_memsz >= ph.p_vaddr)
			f->high = ph.p_vaddr + ph.p_memsz;
	}
	err = f->nsegs && f->low < f->high ? 0 : -ENOEXEC;
	f->main_dwarf_ok = elf_dwarf_strings_ok(elf, &f->main_has_dwarf);
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) &&
		    sh.sh_entsize && sh.sh_size / sh.sh_entsize > 1)
			f->main_has_syms = true;
	}
out:
	if (elf)
		elf_end(elf);
	if (dfd >= 0)
		close(dfd);
	return err;
}

/* libdwfl's find_elf: a fresh pread-based handle on our descriptor (libdwfl ends both). */
static int symfile_find_elf(Dwfl_Module *mod, void **userdata, const char *modname,
			    Dwarf_Addr base, char **file_name, Elf **elfp)
{
	(void)mod, (void)modname, (void)base;
	struct symfile *f = *userdata;
	int dfd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -1;
	*elfp = elf_begin(dfd, ELF_C_READ, NULL);
	if (!*elfp) {
		close(dfd);
		return -1;
	}
	if (f->path && !*file_name)
		*file_name = strdup(f->path);
	return dfd;
}

/* ---- Separate debug files ----------------------------------------------------------- */

static int symfile_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
				  Dwarf_Addr base, const char *file_name, const char *debuglink,
				  GElf_Word crc, char **debug_name);

static const Dwfl_Callbacks symfile_callbacks = {
	.find_elf = symfile_find_elf,
	.find_debuginfo = symfile_find_debuginfo,
};
static const Dwfl_Callbacks symfile_probe_callbacks = {
	.find_elf = symfile_find_elf,
	.find_debuginfo = dwfl_standard_find_debuginfo,
};

/* A Dwfl holding f's file as its one module, or NULL. */
static Dwfl *symfile_dwfl(struct symfile *f, const Dwfl_Callbacks *cb, Dwfl_Module **mod)
{
	Dwfl *dwfl = dwfl_begin(cb);
	if (!dwfl)
		return NULL;
	const char *base = f->path ? strrchr(f->path, '/') : NULL;
	dwfl_report_begin(dwfl);
	*mod = dwfl_report_module(dwfl, base ? base + 1 : f->path ? f->path : "[file]", f->low,
				  f->high);
	void **ud;
	if (!*mod || dwfl_report_end(dwfl, NULL, NULL) != 0 ||
	    !dwfl_module_info(*mod, &ud, NULL, NULL, NULL, NULL, NULL, NULL)) {
		dwfl_end(dwfl);
		return NULL;
	}
	*ud = f;
	return dwfl;
}

/* Nobody but root and us can change fd's file under a mapping of it. */
static bool file_is_ours(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       (st.st_uid == 0 || st.st_uid == geteuid()) && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

/* A sealed in-memory copy of fd's file (closes fd), or -1. */
static int file_private_copy(int fd)
{
	struct stat st;
	int mfd = -1;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= SYM_COPY_MAX)
		mfd = memfd_create("llgo-debuginfo", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	off_t off = 0;
	while (mfd >= 0 && off < st.st_size) {
		ssize_t n = sendfile(mfd, fd, &off, (size_t)(st.st_size - off));
		if (n <= 0) {
			close(mfd); /* shrunk under us, or an error */
			mfd = -1;
		}
	}
	close(fd);
	if (mfd >= 0 && fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE |
						F_SEAL_SEAL) != 0) {
		close(mfd);
		mfd = -1;
	}
	return mfd;
}

static bool fd_dwarf_strings_ok(int fd)
{
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	Elf *elf = dfd >= 0 ? elf_begin(dfd, ELF_C_READ, NULL) : NULL;
	bool has, ok = elf && elf_kind(elf) == ELF_K_ELF && elf_dwarf_strings_ok(elf, &has);
	if (elf)
		elf_end(elf);
	if (dfd >= 0)
		close(dfd);
	return ok;
}

/*
 * libdwfl's find_debuginfo for f's module. The first call looks for the debug file with
 * dwfl_standard_find_debuginfo in a throwaway Dwfl, so the candidates libdwfl maps to check
 * their build IDs are unmapped before we return; the answer is remembered. libdwfl calls
 * again only once the debug file is open, for its DWARF alternate file (dwz), which is
 * looked for in place only when that debug file is one nobody else can change.
 */
static int symfile_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
				  Dwarf_Addr base, const char *file_name, const char *debuglink,
				  GElf_Word crc, char **debug_name)
{
	struct symfile *f = *userdata;
	if (f->debug == DEBUG_FOUND)
		return f->debug_trusted ? dwfl_standard_find_debuginfo(mod, userdata, modname, base,
								       file_name, debuglink, crc,
								       debug_name)
					: -1;
	if (f->debug == DEBUG_NONE)
		return -1;
	f->debug = DEBUG_NONE;
	Dwfl_Module *pmod;
	Dwfl *probe = symfile_dwfl(f, &symfile_probe_callbacks, &pmod);
	Dwarf_Addr bias;
	int fd = -1;
	if (probe && dwfl_module_getelf(pmod, &bias))
		fd = dwfl_standard_find_debuginfo(pmod, userdata, modname, base, file_name,
						  debuglink, crc, debug_name);
	if (probe)
		dwfl_end(probe);
	if (fd < 0)
		return -1;
	f->debug_trusted = file_is_ours(fd);
	if (!f->debug_trusted)
		fd = file_private_copy(fd);
	if (fd >= 0 && !fd_dwarf_strings_ok(fd)) {
		close(fd);
		fd = -1;
	}
	if (fd >= 0)
		f->debug = DEBUG_FOUND;
	return fd;
}

/* ---- Construction and the global cache ---------------------------------------------- */

static void symfile_destroy(struct symfile *f)
{
	if (!f)
		return;
	if (f->dwfl)
		dwfl_end(f->dwfl);
	if (f->fd >= 0)
		close(f->fd);
	for (size_t i = 0; i < f->cache_cap; i++)
		free(f->cache[i]);
	free(f->cache);
	free(f->segs);
	free(f->path);
	free(f->key);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* Parse the file behind fd (which we now own). */
static struct symfile *symfile_open(const char *path, int fd, char *key)
{
	struct symfile *f = calloc(1, sizeof(*f));
	if (!f) {
		close(fd);
		free(key);
		return NULL;
	}
	f->fd = fd;
	f->key = key;
	f->refs = 1;
	pthread_mutex_init(&f->lock, NULL);
	if ((path && path[0] == '/' && !(f->path = strdup(path))) || symfile_read_elf(f) != 0 ||
	    !(f->dwfl = symfile_dwfl(f, &symfile_callbacks, &f->mod))) {
		symfile_destroy(f);
		return NULL;
	}
	return f;
}

static char *symfile_key(const char *path, int fd, const char *build_id)
{
	char *key = NULL;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return NULL;
	/* Same build ID is not same file: anyone can make a file with a copied build ID and
	 * renamed symbols. Files are shared only when they are the same file (device, inode,
	 * size, mtime), so one user's file never names another user's frames. */
	int n = asprintf(&key, "%c:%s:%llx:%llx:%llx:%lld.%09ld:%s",
			 build_id && *build_id ? 'b' : 'f', build_id ? build_id : "",
			 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
			 (unsigned long long)st.st_size, (long long)st.st_mtim.tv_sec,
			 st.st_mtim.tv_nsec, build_id && *build_id ? "" : path ? path : "");
	return n < 0 ? NULL : key;
}

static struct symfile *symfile_lookup_locked(const char *key)
{
	for (struct symfile *f = g_files; f; f = f->next) {
		if (strcmp(f->key, key) == 0) {
			f->refs++;
			return f;
		}
	}
	return NULL;
}

struct symfile *symfile_get(const char *path, int fd, const char *build_id)
{
	pthread_once(&g_elf_once, symfile_elf_init);
	int own = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0)
			  : (path ? open(path, O_RDONLY | O_CLOEXEC) : -1);
	if (own < 0)
		return NULL;
	char *key = symfile_key(path, own, build_id);
	if (!key) {
		close(own);
		return NULL;
	}
	pthread_mutex_lock(&g_lock);
	struct symfile *f = symfile_lookup_locked(key);
	pthread_mutex_unlock(&g_lock);
	if (f) {
		close(own);
		free(key);
		return f;
	}
	/* Parse outside the lock; if another thread published the same file meanwhile, use
	 * theirs and drop ours. */
	struct symfile *nf = symfile_open(path, own, key);
	if (!nf)
		return NULL;
	pthread_mutex_lock(&g_lock);
	f = symfile_lookup_locked(nf->key);
	if (!f) {
		nf->next = g_files;
		g_files = f = nf;
		nf = NULL;
	}
	pthread_mutex_unlock(&g_lock);
	symfile_destroy(nf);
	return f;
}

struct symfile *symfile_ref(struct symfile *f)
{
	pthread_mutex_lock(&g_lock);
	f->refs++;
	pthread_mutex_unlock(&g_lock);
	return f;
}

void symfile_put(struct symfile *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&g_lock);
	bool last = --f->refs == 0;
	for (struct symfile **pp = &g_files; last && *pp; pp = &(*pp)->next) {
		if (*pp == f) {
			*pp = f->next;
			break;
		}
	}
	pthread_mutex_unlock(&g_lock);
	if (last)
		symfile_destroy(f);
}

/* ---- DWARF -------------------------------------------------------------------------- */

/* The module's DWARF, looked for at the first lookup (f->lock held); NULL when none. */
static Dwarf *symfile_dwarf(struct symfile *f)
{
	if (!f->dwarf_tried) {
		f->dwarf_tried = true;
		/* a main file with bad strings is never given to libdw, even for its CUs */
		if (!f->main_has_dwarf || f->main_dwarf_ok)
			f->dwarf = dwfl_module_getdwarf(f->mod, &f->bias);
	}
	return f->dwarf;
}

/* The compile unit holding file address vaddr: libdwfl's, else a walk of every unit. */
static Dwarf_Die *symfile_cu(struct symfile *f, Dwarf_Addr vaddr, Dwarf_Die *mem)
{
	Dwarf_Addr bias;
	Dwarf_Die *cu = dwfl_module_addrdie(f->mod, vaddr, &bias);
	if (cu && bias == f->bias)
		return cu;
	Dwarf_CU *unit = NULL;
	Dwarf_Half version;
	uint8_t type;
	Dwarf_Die sub;
	while (dwarf_get_units(f->dwarf, unit, &unit, &version, &type, mem, &sub) == 0) {
		if (dwarf_tag(mem) == DW_TAG_compile_unit && dwarf_haspc(mem, vaddr - f->bias) == 1)
			return mem;
	}
	return NULL;
}

/* The name a DIE goes by: its linkage name when it has one (C++ names then match the ELF
 * symbols), else DW_AT_name, following abstract origins and specifications. */
static const char *die_name(Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *n = NULL;
	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
		n = dwarf_formstring(&a);
	if (!n && dwarf_attr_integrate(die, DW_AT_name, &a))
		n = dwarf_formstring(&a);
	return n;
}

static size_t ptr_slot(uint64_t key, size_t cap)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

static bool die_is_function(Dwarf_Die *die)
{
	int tag = dwarf_tag(die);
	return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine ||
	       tag == DW_TAG_entry_point;
}

/* The leaf's position: libdwfl's line table lookup, else the unit's (no .debug_aranges). */
static void symfile_leaf_line(struct symfile *f, Dwarf_Die *cu, Dwarf_Addr vaddr,
			      struct sym_frame *fr)
{
	int line = 0;
	const char *file = NULL;
	Dwfl_Line *dl = dwfl_module_getsrc(f->mod, vaddr);
	Dwarf_Line *l;
	if (dl)
		file = dwfl_lineinfo(dl, NULL, &line, NULL, NULL, NULL);
	else if ((l = dwarf_getsrc_die(cu, vaddr - f->bias)) != NULL &&
		 (file = dwarf_linesrc(l, NULL, NULL)) != NULL && dwarf_lineno(l, &line) != 0)
		line = 0;
	fr->file = file;
	fr->line = file && line > 0 ? line : 0;
}

/* DWARF frames for file address vaddr, leaf first, into fr (at most SYM_MAX_INLINE, the
 * physical function always last); *entry gets the physical function's low pc. Returns the
 * frame count (0: no function DIE holds it). Called with f->lock held. */
static int symfile_dwarf_frames(struct symfile *f, uint64_t vaddr, struct sym_frame *fr,
				uint64_t *entry)
{
	Dwarf_Die cu_mem, *cu = symfile_cu(f, vaddr, &cu_mem), *scopes = NULL, *chain = NULL;
	int ns = cu ? dwarf_getscopes(cu, vaddr - f->bias, &scopes) : 0, inner = 0, out = 0;
	while (inner < ns && !die_is_function(&scopes[inner]))
		inner++;
	/* dwarf_getscopes continues past an inlined instance into its abstract definition's
	 * scopes; the instance's own callers come from dwarf_getscopes_die. */
	int nc = inner < ns ? dwarf_getscopes_die(&scopes[inner], &chain) : 0;
	free(scopes);
	struct sym_frame pos = { 0 };
	if (nc > 0)
		symfile_leaf_line(f, cu, vaddr, &pos);
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;
	for (int i = 0; i < nc; i++) {
		if (!die_is_function(&chain[i]))
			continue;
		bool physical = dwarf_tag(&chain[i]) != DW_TAG_inlined_subroutine;
		if (out < SYM_MAX_INLINE - 1 || physical) { /* the leaf-most, and the physical */
			fr[out] = pos;
			fr[out].function = die_name(&chain[i]);
			if (dwarf_decl_line(&chain[i], &fr[out].start_line) != 0 ||
			    fr[out].start_line < 0)
				fr[out].start_line = 0;
			out++;
		}
		Dwarf_Attribute a;
		Dwarf_Word w;
		Dwarf_Addr low;
		if (physical) {
			*entry = dwarf_entrypc(&chain[i], &low) == 0 ? low + f->bias : 0;
			break;
		}
		/* an inlined instance: where its caller called it */
		pos = (struct sym_frame){ 0 };
		if (dwarf_attr(&chain[i], DW_AT_call_file, &a) && dwarf_formudata(&a, &w) == 0 &&
		    (files || dwarf_getsrcfiles(cu, &files, &nfiles) == 0) && w < nfiles)
			pos.file = dwarf_filesrc(files, w, NULL, NULL);
		if (dwarf_attr(&chain[i], DW_AT_call_line, &a) && dwarf_formudata(&a, &w) == 0 &&
		    w <= INT_MAX)
			pos.line = (int)w;
	}
	free(chain);
	return out;
}

/* ---- Lookups ------------------------------------------------------------------------ */

/* File offset to file address through the PT_LOAD segment holding it. */
static uint64_t symfile_vaddr(const struct symfile *f, uint64_t off)
{
	for (size_t i = 0; i < f->nsegs; i++) {
		const struct seg *s = &f->segs[i];
		if (off >= s->offset && off - s->offset < s->filesz)
			return off - s->offset + s->vaddr;
	}
	return off;
}

static struct cache_entry *cache_find(struct symfile *f, uint64_t vaddr)
{
	for (size_t i = f->cache_cap ? ptr_slot(vaddr, f->cache_cap) : 0;
	     f->cache_cap; i = (i + 1) & (f->cache_cap - 1)) {
		struct cache_entry *e = f->cache[i];
		if (!e || e->vaddr == vaddr)
			return e;
	}
	return NULL;
}

/* Keep e (or free it when the cache is full or cannot grow). */
static void cache_insert(struct symfile *f, struct cache_entry *e)
{
	if (f->cache_n >= SYM_CACHE_MAX) {
		free(e);
		return;
	}
	if ((f->cache_n + 1) * 2 > f->cache_cap) {
		size_t nc = f->cache_cap ? f->cache_cap * 2 : 256;
		struct cache_entry **t = calloc(nc, sizeof(*t));
		if (!t) {
			free(e);
			return;
		}
		for (size_t i = 0; i < f->cache_cap; i++) {
			size_t j = f->cache[i] ? ptr_slot(f->cache[i]->vaddr, nc) : 0;
			while (f->cache[i] && t[j])
				j = (j + 1) & (nc - 1);
			if (f->cache[i])
				t[j] = f->cache[i];
		}
		free(f->cache);
		f->cache = t;
		f->cache_cap = nc;
	}
	size_t j = ptr_slot(e->vaddr, f->cache_cap);
	while (f->cache[j])
		j = (j + 1) & (f->cache_cap - 1);
	f->cache[j] = e;
	f->cache_n++;
}

/* Resolve file address vaddr (f->lock held): the ELF symbol names the physical function
 * and gives its entry; DWARF gives the inline chain and lines. */
static int symfile_resolve(struct symfile *f, uint64_t vaddr, struct sym_frame *fr,
			   uint64_t *entry)
{
	GElf_Off off = 0;
	GElf_Sym sym;
	const char *name = dwfl_module_addrinfo(f->mod, vaddr, &off, &sym, NULL, NULL, NULL);
	int type = name ? GELF_ST_TYPE(sym.st_info) : STT_NOTYPE;
	if (name && (sym.st_size == 0 || off >= sym.st_size || !*name ||
		     (type != STT_FUNC && type != STT_GNU_IFUNC)))
		name = NULL; /* only a function symbol covering the address names it */
	*entry = 0;
	int n = symfile_dwarf(f) ? symfile_dwarf_frames(f, vaddr, fr, entry) : 0;
	if (n == 0 && name) {
		/* No function DIE, but the line table may still know the position. */
		Dwarf_Die cu_mem, *cu = f->dwarf ? symfile_cu(f, vaddr, &cu_mem) : NULL;
		memset(fr, 0, sizeof(*fr));
		if (cu)
			symfile_leaf_line(f, cu, vaddr, fr);
		n = 1;
	}
	if (n > 0 && name) {
		fr[n - 1].function = name;
		*entry = vaddr - off;
	}
	for (int i = 0; i < n; i++)
		if (!fr[i].function)
			fr[i].function = "??";
	return n;
}

/* What the file can tell, for pprof's Mapping.has_* (f->lock held). Before the first
 * lookup only the file itself is asked, so a mapping without samples never starts a debug
 * file search (nor a debuginfod download). */
static void symfile_flags(struct symfile *f, struct sym_result *out)
{
	bool dw = f->dwarf_tried ? f->dwarf != NULL : f->main_has_dwarf && f->main_dwarf_ok;
	out->has_functions = f->main_has_syms || dw ||
			     (f->dwarf_tried && dwfl_module_getsymtab(f->mod) > 1);
	out->has_filenames = out->has_lines = out->has_inlines = dw;
}

int symbolize_pc(const struct mapping *m, uint64_t pc, struct sym_result *out)
{
	memset(out, 0, sizeof(*out));
	if (!m || !m->file)
		return 0;
	struct symfile *f = m->file;
	/* Outside the mapping: nothing resolved, but the has_* flags say what the file can
	 * tell (the pprof writer asks this way for mappings without samples). */
	if (pc < m->start || pc >= m->end) {
		pthread_mutex_lock(&f->lock);
		symfile_flags(f, out);
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	uint64_t vaddr = symfile_vaddr(f, pc - m->start + m->offset);

	pthread_mutex_lock(&f->lock);
	struct cache_entry *e = cache_find(f, vaddr);
	if (!e) {
		struct sym_frame fr[SYM_MAX_INLINE];
		uint64_t entry;
		int n = symfile_resolve(f, vaddr, fr, &entry);
		e = malloc(sizeof(*e) + (size_t)n * sizeof(fr[0]));
		if (!e) {
			pthread_mutex_unlock(&f->lock);
			return -ENOMEM;
		}
		*e = (struct cache_entry){ vaddr, entry, n };
		memcpy(e->frames, fr, (size_t)n * sizeof(fr[0]));
		cache_insert(f, e); /* may free e */
		e = NULL;
		out->nframes = n;
		memcpy(out->frames, fr, (size_t)n * sizeof(fr[0]));
		if (entry && entry <= vaddr)
			out->entry = pc - (vaddr - entry);
	} else {
		out->nframes = e->nframes;
		memcpy(out->frames, e->frames, (size_t)e->nframes * sizeof(e->frames[0]));
		if (e->entry && e->entry <= vaddr)
			out->entry = pc - (vaddr - e->entry);
	}
	symfile_flags(f, out);
	pthread_mutex_unlock(&f->lock);
	return out->nframes;
}
