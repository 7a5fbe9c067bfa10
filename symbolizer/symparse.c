// SPDX-License-Identifier: MIT
/*
 * symparse.c: one ELF file read with elfutils' libdwfl/libdw, and addresses in it turned into
 * function names, files, lines and inline chains. It runs in the sandboxed symbolizer process
 * (symserver.c), never in the daemon; the fuzz harness tests/fuzz/fuzz_elf.c calls it directly.
 *
 * The file comes as a descriptor the daemon opened; our libelf handles read it with pread
 * (ELF_C_READ), so a file truncated under us gives errors, not SIGBUS. Its Dwfl holds one
 * module reported at the file's own virtual addresses (bias 0). Separate debug files are not
 * looked for here: libdwfl's find_debuginfo callback asks the caller (the daemon, over the
 * socket), which searches the build-ID path, the .gnu_debuglink places and debuginfod and
 * hands back a descriptor; a DWARF alternate file (dwz) likewise, by its build ID. What comes
 * back is refused when its DWARF string sections do not end with a NUL (libdw 0.188 reads past
 * them: tests/fuzz/regress/elf), as is the file's own DWARF.
 *
 * A file offset becomes a file address through the PT_LOAD segments; then
 *   - the function: libdwfl's symbol table (dwfl_module_getsym_info: .symtab, else .dynsym,
 *     the debug file's .symtab, the .gnu_debugdata one), read once into ranges sorted by
 *     address; only a sized STT_FUNC/STT_GNU_IFUNC symbol covering the address names it,
 *     never the nearest one below. Not dwfl_module_addrinfo: libdwfl 0.188 reads the whole
 *     table at each call (2 ms a lookup in libc);
 *   - the compile unit: dwfl_module_addrdie (through .debug_aranges), checked to hold the
 *     address (libdwfl counts the gaps between a unit's ranges as the unit's); in a file
 *     without .debug_aranges (clang and rustc write none by default) each unit is asked;
 *   - the leaf's file:line: dwfl_module_getsrc; names relative to the compilation folder
 *     (DWARF 5, as libdw 0.188 gives them) made absolute;
 *   - the inline chain: the functions and inlined instances holding the address (a walk down
 *     the unit, symparse_descend says why not dwarf_getscopes), each inlined one giving its
 *     caller's position (DW_AT_call_file/_line), leaf first, physical last.
 * Answers are not remembered here: the daemon keeps them and asks for each address once.
 *
 * Over 600 lines: it is one libdwfl session's whole life (the file, its debug files, symbols,
 * units, lines, inline chains), every part reading the same struct symparse_file.
 *
 * Single-threaded: one caller at a time per file. Left to others: finding and opening files
 * (the daemon's symfile.c), the protocol and the sandbox (symserver.c, symjail.c).
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
#include <unistd.h>

#include "symparse.h"

/* Entries the memo of absolute file names may hold; beyond that, names stay relative. */
#define SYMPARSE_MEMO_MAX (1u << 18)
/* Deepest DIE nesting walked, and longest chain of functions kept, looking for an address. */
#define SYMPARSE_MAX_DEPTH 64

struct symparse_seg {
	uint64_t offset, vaddr, filesz;
};

/* Absolute file names by the address of libdw's relative one: open addressing. */
struct symparse_memo_entry {
	uint64_t key;
	char *name;
};
struct symparse_memo {
	struct symparse_memo_entry *slots;
	size_t cap, n;
};

/* A function symbol from libdwfl's table. */
struct symparse_func {
	uint64_t start, end; /* file addresses, [start, end) */
	const char *name;
	uint8_t bind; /* STB_* */
};

enum symparse_debug { SYMPARSE_DEBUG_UNSEARCHED, SYMPARSE_DEBUG_NONE, SYMPARSE_DEBUG_FOUND };

struct symparse_file {
	int fd; /* ours; every libelf handle on the file reads through a dup of it */
	symparse_find_fn find;
	void *find_arg;
	struct symparse_seg *segs; /* PT_LOAD */
	size_t nsegs;
	uint64_t low, high; /* the module's file addresses (libdwfl's bias is 0) */
	bool main_has_syms, main_has_dwarf;

	Dwfl *dwfl;
	Dwfl_Module *mod;
	enum symparse_debug debug;
	int debug_fd; /* a dup of the debug file libdwfl got, for its .gnu_debugaltlink; or -1 */
	bool dwarf_tried;
	Dwarf *dwarf; /* owned by the Dwfl */
	Dwarf_Addr bias;
	bool cu_walk; /* no .debug_aranges: compile units are found by their ranges */
	struct symparse_memo paths; /* absolute file names (owned) by libdw's */
	bool funcs_built;
	struct symparse_func *funcs; /* sorted by start, one per range */
	uint64_t *funcs_maxend;      /* funcs_maxend[i] = max(funcs[0..i].end) */
	char *funcs_names;           /* names without their symbol version */
	size_t nfuncs;
};

/* ---- The file ------------------------------------------------------------------------- */

/* A pread-based libelf handle on a dup of fd, put in *dfd (-1 when none); NULL when fd
 * holds no ELF file. */
static Elf *symparse_elf_begin(int fd, int *dfd)
{
	*dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	Elf *elf = *dfd >= 0 ? elf_begin(*dfd, ELF_C_READ, NULL) : NULL;
	if (elf && elf_kind(elf) == ELF_K_ELF)
		return elf;
	if (elf)
		elf_end(elf);
	if (*dfd >= 0)
		close(*dfd);
	*dfd = -1;
	return NULL;
}

static void symparse_elf_end(Elf *elf, int dfd)
{
	if (elf)
		elf_end(elf);
	if (dfd >= 0)
		close(dfd);
}

/*
 * Whether the DWARF string sections of elf end with a NUL (only looked at when check; the
 * data of a big file's sections is read for it). libdw (0.188) reads their strings with
 * strlen: an unterminated last string of a hostile file makes it read past the section
 * (found by tests/fuzz/fuzz_elf.c, kept in tests/fuzz/regress/elf). Such a file keeps its
 * ELF symbols and gets no DWARF. *has_dwarf: a .debug_info with contents.
 */
static bool symparse_strings_ok(Elf *elf, bool check, bool *has_dwarf)
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
		if (!check || !strstr(name, "str") || strstr(name, "_offsets"))
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

/* Whether fd's file is an ELF file whose DWARF strings end inside their sections. */
static bool symparse_fd_strings_ok(int fd)
{
	int dfd = -1;
	Elf *elf = fd >= 0 ? symparse_elf_begin(fd, &dfd) : NULL;
	bool has, ok = elf && symparse_strings_ok(elf, true, &has);
	symparse_elf_end(elf, dfd);
	return ok;
}

static bool symparse_dwarf_ok(const struct symparse_file *f)
{
	return symparse_fd_strings_ok(f->fd);
}

/* PT_LOAD segments, the module's address range and what the file itself carries. */
static int symparse_read_elf(struct symparse_file *f)
{
	int dfd;
	Elf *elf = symparse_elf_begin(f->fd, &dfd);
	size_t n = 0;
	int err = -ENOEXEC;
	if (!elf || elf_getphdrnum(elf, &n) != 0 || n > 65536)
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
		f->segs[f->nsegs++] = (struct symparse_seg){ ph.p_offset, ph.p_vaddr, ph.p_filesz };
		if (ph.p_vaddr + ph.p_memsz > f->high && ph.p_vaddr + ph.p_memsz >= ph.p_vaddr)
			f->high = ph.p_vaddr + ph.p_memsz;
	}
	err = f->nsegs && f->low < f->high ? 0 : -ENOEXEC;
	symparse_strings_ok(elf, false, &f->main_has_dwarf);
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) &&
		    sh.sh_entsize && sh.sh_size / sh.sh_entsize > 1)
			f->main_has_syms = true;
	}
out:
	symparse_elf_end(elf, dfd);
	return err;
}

/* libdwfl's find_elf: a fresh pread-based handle on our descriptor (libdwfl ends both). */
static int symparse_find_elf(Dwfl_Module *mod, void **userdata, const char *modname,
			    Dwarf_Addr base, char **file_name, Elf **elfp)
{
	(void)mod, (void)modname, (void)base;
	struct symparse_file *f = *userdata;
	int dfd;
	if (!(*elfp = symparse_elf_begin(f->fd, &dfd)))
		return -1;
	(void)file_name;
	return dfd;
}

/* A Dwfl holding f's file as its one module, or NULL. */
static Dwfl *symparse_dwfl(struct symparse_file *f, const Dwfl_Callbacks *cb, Dwfl_Module **mod)
{
	Dwfl *dwfl = dwfl_begin(cb);
	if (!dwfl)
		return NULL;
	dwfl_report_begin(dwfl);
	*mod = dwfl_report_module(dwfl, "[file]", f->low, f->high);
	void **ud;
	if (!*mod || dwfl_report_end(dwfl, NULL, NULL) != 0 ||
	    !dwfl_module_info(*mod, &ud, NULL, NULL, NULL, NULL, NULL, NULL)) {
		dwfl_end(dwfl);
		return NULL;
	}
	*ud = f;
	return dwfl;
}

/* ---- Separate debug files ----------------------------------------------------------- */

/* The .gnu_debugaltlink of the ELF file behind fd: its name into name[cap] and its build ID
 * in hex into id[idcap]; false when it has none. */
static bool symparse_altlink(int fd, char *name, size_t cap, char *id, size_t idcap)
{
	int dfd = -1;
	Elf *elf = fd >= 0 ? symparse_elf_begin(fd, &dfd) : NULL;
	size_t shstrndx;
	bool found = false;
	Elf_Scn *scn = NULL;
	while (elf && !found && elf_getshdrstrndx(elf, &shstrndx) == 0 &&
	       (scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *sn = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstrndx, sh.sh_name) : NULL;
		Elf_Data *d = sn && strcmp(sn, ".gnu_debugaltlink") == 0 ? elf_getdata(scn, NULL)
									  : NULL;
		const char *p = d ? d->d_buf : NULL;
		const char *nul = p ? memchr(p, '\0', d->d_size) : NULL;
		if (!nul || (size_t)(nul - p) >= cap)
			continue;
		size_t idlen = d->d_size - (size_t)(nul + 1 - p);
		if (idlen == 0 || idlen * 2 >= idcap)
			continue;
		memcpy(name, p, (size_t)(nul - p) + 1);
		for (size_t k = 0; k < idlen; k++)
			snprintf(id + 2 * k, 3, "%02x", (unsigned char)nul[1 + k]);
		found = true;
	}
	symparse_elf_end(elf, dfd);
	return found;
}

/*
 * libdwfl's find_debuginfo: asks the caller. libdwfl calls it when the file has no DWARF of
 * its own (debuglink, crc: the file's .gnu_debuglink, crc 0 when none), and once DWARF is
 * open for its alternate file (debuglink: the .gnu_debugaltlink name, crc 0), told apart here
 * by that name. What comes back is given to libdw only when its DWARF strings end inside
 * their sections; libdwfl maps it (the daemon hands over files nobody else can change).
 */
static int symparse_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
				   Dwarf_Addr base, const char *file_name, const char *debuglink,
				   GElf_Word crc, char **debug_name)
{
	(void)mod, (void)modname, (void)base, (void)file_name, (void)debug_name;
	struct symparse_file *f = *userdata;
	char alt[4096], id[130];
	int fd = -1;
	bool is_alt = crc == 0 && debuglink &&
		      symparse_altlink(f->debug_fd >= 0 ? f->debug_fd : f->fd, alt, sizeof(alt), id,
				       sizeof(id)) &&
		      strcmp(alt, debuglink) == 0;
	if (is_alt) {
		fd = f->find ? f->find(f->find_arg, alt, 0, id) : -1;
	} else if (f->debug == SYMPARSE_DEBUG_UNSEARCHED) {
		fd = f->find ? f->find(f->find_arg, debuglink ? debuglink : "", crc, NULL) : -1;
		f->debug = fd >= 0 ? SYMPARSE_DEBUG_FOUND : SYMPARSE_DEBUG_NONE;
	}
	if (fd >= 0 && !symparse_fd_strings_ok(fd)) {
		close(fd);
		fd = -1;
		if (!is_alt)
			f->debug = SYMPARSE_DEBUG_NONE;
	}
	if (fd >= 0 && !is_alt && f->debug_fd < 0)
		f->debug_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	return fd;
}

static char *symparse_no_path = NULL;
static const Dwfl_Callbacks symparse_callbacks = {
	.find_elf = symparse_find_elf,
	.find_debuginfo = symparse_find_debuginfo,
	.debuginfo_path = &symparse_no_path,
};

/* ---- Absolute file names ------------------------------------------------------------ */

static size_t memo_slot(uint64_t key, size_t cap)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

static struct symparse_memo_entry *memo_find(const struct symparse_memo *m, uint64_t key)
{
	for (size_t i = m->cap ? memo_slot(key, m->cap) : 0; m->cap; i = (i + 1) & (m->cap - 1)) {
		struct symparse_memo_entry *e = &m->slots[i];
		if (!e->name || e->key == key)
			return e->name ? e : NULL;
	}
	return NULL;
}

/* Remember name (owned from now on) under key; false when full or out of memory. */
static bool memo_insert(struct symparse_memo *m, uint64_t key, char *name)
{
	if (m->n >= SYMPARSE_MEMO_MAX)
		return false;
	if ((m->n + 1) * 2 > m->cap) {
		size_t nc = m->cap ? m->cap * 2 : 256;
		struct symparse_memo_entry *t = calloc(nc, sizeof(*t));
		if (!t)
			return false;
		for (size_t i = 0; i < m->cap; i++) {
			struct symparse_memo_entry *o = &m->slots[i];
			size_t j = o->name ? memo_slot(o->key, nc) : 0;
			while (o->name && t[j].name)
				j = (j + 1) & (nc - 1);
			if (o->name)
				t[j] = *o;
		}
		free(m->slots);
		m->slots = t;
		m->cap = nc;
	}
	size_t j = memo_slot(key, m->cap);
	while (m->slots[j].name)
		j = (j + 1) & (m->cap - 1);
	m->slots[j] = (struct symparse_memo_entry){ key, name };
	m->n++;
	return true;
}

static void memo_free(struct symparse_memo *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i].name);
	free(m->slots);
}

/* ---- Function symbols --------------------------------------------------------------- */

/* A better name for one range: global before weak before local, then not glibc's internal
 * alias (__GI_name), then fewer leading underscores (malloc over __libc_malloc). */
static bool func_better(const struct symparse_func *a, const struct symparse_func *b)
{
	static const int rank[] = { [STB_LOCAL] = 2, [STB_GLOBAL] = 0, [STB_WEAK] = 1 };
	int ra = a->bind <= STB_WEAK ? rank[a->bind] : 3;
	int rb = b->bind <= STB_WEAK ? rank[b->bind] : 3;
	if (ra != rb)
		return ra < rb;
	bool ga = strncmp(a->name, "__GI_", 5) == 0, gb = strncmp(b->name, "__GI_", 5) == 0;
	if (ga != gb)
		return gb;
	return strspn(a->name, "_") < strspn(b->name, "_");
}

static int func_cmp(const void *x, const void *y)
{
	const struct symparse_func *a = x, *b = y;
	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return a->end > b->end ? -1 : a->end < b->end; /* longer first */
}

/* Names without their symbol version ("__libc_start_main@@GLIBC_2.34", as glibc's debug
 * file spells them), copied into one block f owns; a name left as is when out of memory. */
static void symparse_funcs_unversion(struct symparse_file *f, size_t n)
{
	size_t bytes = 0;
	for (size_t i = 0; i < n; i++) {
		const char *at = strchr(f->funcs[i].name, '@');
		bytes += at && at > f->funcs[i].name ? (size_t)(at - f->funcs[i].name) + 1 : 0;
	}
	char *p = bytes ? malloc(bytes) : NULL;
	f->funcs_names = p;
	for (size_t i = 0; p && i < n; i++) {
		const char *at = strchr(f->funcs[i].name, '@');
		if (!at || at == f->funcs[i].name)
			continue;
		size_t len = (size_t)(at - f->funcs[i].name);
		memcpy(p, f->funcs[i].name, len);
		p[len] = '\0';
		f->funcs[i].name = p;
		p += len + 1;
	}
}

/* Whether name, which libdwfl handed out from one of elf's string tables, ends inside that
 * table: libdwfl 0.188 checks only where a name starts, and a hostile file's last string
 * may run off the end (tests/fuzz/corpus/elf). *last caches the table of the previous name. */
static bool symparse_name_ends(Elf *elf, const char *name, Elf_Data **last)
{
	for (Elf_Scn *scn = NULL; elf && name;) {
		Elf_Data *d = *last;
		if (!d || name < (const char *)d->d_buf ||
		    name >= (const char *)d->d_buf + d->d_size) {
			GElf_Shdr sh;
			if (!(scn = elf_nextscn(elf, scn)))
				return false;
			if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_STRTAB ||
			    !(d = elf_getdata(scn, NULL)) || !d->d_buf ||
			    name < (const char *)d->d_buf ||
			    name >= (const char *)d->d_buf + d->d_size)
				continue;
			*last = d;
		}
		return memchr(name, '\0', (size_t)((const char *)d->d_buf + d->d_size - name));
	}
	return false;
}

/* The module's function symbols as libdwfl reads them (.symtab, else .dynsym, the debug
 * file's .symtab, the .gnu_debugdata one), sorted, one name per range, with maxend[i] the
 * highest end among funcs[0..i]. */
static void symparse_funcs_build(struct symparse_file *f)
{
	f->funcs_built = true;
	int n = dwfl_module_getsymtab(f->mod);
	if (n <= 1 || !(f->funcs = malloc((size_t)n * sizeof(*f->funcs))))
		return;
	size_t k = 0;
	Elf_Data *strtab = NULL;
	for (int i = 1; i < n; i++) {
		GElf_Sym s;
		GElf_Addr value;
		GElf_Word shndx;
		Elf *elf = NULL;
		const char *name = dwfl_module_getsym_info(f->mod, i, &s, &value, &shndx, &elf, NULL);
		int t = GELF_ST_TYPE(s.st_info);
		if (name && *name && (t == STT_FUNC || t == STT_GNU_IFUNC) && s.st_size &&
		    shndx != SHN_UNDEF && value + s.st_size > value &&
		    symparse_name_ends(elf, name, &strtab))
			f->funcs[k++] = (struct symparse_func){ value, value + s.st_size, name,
							       (uint8_t)GELF_ST_BIND(s.st_info) };
	}
	symparse_funcs_unversion(f, k);
	if (k > 1)
		qsort(f->funcs, k, sizeof(*f->funcs), func_cmp);
	size_t w = 0;
	for (size_t i = 0; i < k; i++) {
		struct symparse_func *last = w ? &f->funcs[w - 1] : NULL;
		if (last && last->start == f->funcs[i].start && last->end == f->funcs[i].end) {
			if (func_better(&f->funcs[i], last))
				*last = f->funcs[i];
			continue;
		}
		f->funcs[w++] = f->funcs[i];
	}
	if (!(f->funcs_maxend = malloc((w ? w : 1) * sizeof(*f->funcs_maxend))))
		return;
	f->nfuncs = w;
	for (size_t i = 0; i < w; i++)
		f->funcs_maxend[i] = i && f->funcs_maxend[i - 1] > f->funcs[i].end
					     ? f->funcs_maxend[i - 1] : f->funcs[i].end;
}

/* The innermost function symbol covering vaddr, or NULL. */
static const struct symparse_func *symparse_func_at(struct symparse_file *f, uint64_t vaddr)
{
	if (!f->funcs_built)
		symparse_funcs_build(f);
	size_t lo = 0, hi = f->nfuncs;
	while (lo < hi) { /* the first function starting above vaddr */
		size_t mid = lo + (hi - lo) / 2;
		if (f->funcs[mid].start <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* back over functions starting at or before vaddr while one may still reach past it;
	 * the first covering it is the innermost (latest start) */
	for (size_t i = lo; i-- > 0 && f->funcs_maxend[i] > vaddr;)
		if (vaddr < f->funcs[i].end)
			return &f->funcs[i];
	return NULL;
}

/* ---- DWARF -------------------------------------------------------------------------- */

/* The module's DWARF, looked for at the first lookup; NULL when none. */
static Dwarf *symparse_dwarf(struct symparse_file *f)
{
	if (!f->dwarf_tried) {
		f->dwarf_tried = true;
		/* a main file with bad strings is never given to libdw */
		if (!f->main_has_dwarf || symparse_dwarf_ok(f))
			f->dwarf = dwfl_module_getdwarf(f->mod, &f->bias);
		Dwarf_Aranges *ar;
		size_t nar = 0;
		f->cu_walk = f->dwarf && dwarf_getaranges(f->dwarf, &ar, &nar) == 0 && nar == 0;
	}
	return f->dwarf;
}

/* The compile unit holding file address vaddr: libdwfl's, or in a file without
 * .debug_aranges the first whose ranges hold it. */
static Dwarf_Die *symparse_cu(struct symparse_file *f, Dwarf_Addr vaddr, Dwarf_Die *mem)
{
	Dwarf_Addr bias;
	Dwarf_Die *cu = dwfl_module_addrdie(f->mod, vaddr, &bias);
	/* libdwfl counts the gaps between a unit's ranges as the unit's */
	if (cu || !f->cu_walk)
		return cu && bias == f->bias && dwarf_haspc(cu, vaddr - bias) == 1 ? cu : NULL;
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

/* name made absolute with the unit's DW_AT_comp_dir ("./" and doubled slashes dropped),
 * kept by f and found again by the address of libdw's string. libdw 0.188
 * leaves DWARF 5 names relative to the compilation directory. */
static const char *symparse_abs_path(struct symparse_file *f, Dwarf_Die *cu, const char *name)
{
	Dwarf_Attribute a;
	const char *dir = name && name[0] != '/' && dwarf_attr(cu, DW_AT_comp_dir, &a)
				  ? dwarf_formstring(&a) : NULL;
	if (!dir || dir[0] != '/')
		return name;
	uint64_t key = (uint64_t)(uintptr_t)name;
	const struct symparse_memo_entry *e = memo_find(&f->paths, key);
	if (e)
		return e->name;
	size_t dl = strlen(dir), w = dl;
	char *full = malloc(dl + strlen(name) + 2);
	if (!full)
		return name;
	memcpy(full, dir, dl);
	while (w > 1 && full[w - 1] == '/')
		w--;
	full[w++] = '/';
	for (const char *c = name; *c;) {
		if (full[w - 1] == '/' && (c[0] == '/' || (c[0] == '.' && c[1] == '/')))
			c += c[0] == '/' ? 1 : 2;
		else
			full[w++] = *c++;
	}
	full[w] = '\0';
	if (!memo_insert(&f->paths, key, full)) {
		free(full);
		return name;
	}
	return full;
}

static bool die_is_function(Dwarf_Die *die)
{
	int tag = dwarf_tag(die);
	return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine ||
	       tag == DW_TAG_entry_point;
}

/* The leaf's position: libdwfl's line lookup, else the unit's (no .debug_aranges). */
static void symparse_leaf_line(struct symparse_file *f, Dwarf_Die *cu, Dwarf_Addr vaddr,
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
	fr->file = symparse_abs_path(f, cu, file);
	fr->line = file && line > 0 ? line : 0;
}

/*
 * The scopes holding pc below parent, outermost first, appended to chain[*n] (functions and
 * inlined instances only; lexical blocks are gone through). A walk down the concrete tree,
 * pruned by dwarf_haspc: libdw 0.188's dwarf_getscopes returns nothing, and leaks its array,
 * when an inlined function's abstract origin is in another unit (gcc -flto, dwz; fixed in
 * elfutils 0.189), and dwarf_getscopes_die walks the whole unit. Returns whether a scope
 * below parent holds pc (a type or namespace holding none is gone past, not stopped at).
 */
static bool symparse_descend(Dwarf_Die *parent, Dwarf_Addr pc, Dwarf_Die *chain, int *n,
			      int depth)
{
	Dwarf_Die child;
	if (depth > SYMPARSE_MAX_DEPTH || dwarf_child(parent, &child) != 0)
		return false;
	do {
		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram:
		case DW_TAG_inlined_subroutine:
		case DW_TAG_entry_point:
		case DW_TAG_lexical_block:
		case DW_TAG_try_block:
		case DW_TAG_catch_block:
			if (dwarf_haspc(&child, pc) != 1)
				break;
			if (die_is_function(&child) && *n < SYMPARSE_MAX_DEPTH)
				chain[(*n)++] = child;
			symparse_descend(&child, pc, chain, n, depth + 1);
			return true;
		case DW_TAG_namespace:
		case DW_TAG_module:
		case DW_TAG_class_type:
		case DW_TAG_structure_type:
		case DW_TAG_union_type:
			if (dwarf_haschildren(&child) == 1 &&
			    symparse_descend(&child, pc, chain, n, depth + 1))
				return true;
			break;
		default:
			break;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return false;
}

/* DWARF frames for file address vaddr, leaf first, into fr (at most SYM_MAX_INLINE: the
 * leaf-most and always the physical function last), each frame but the first at its call
 * position; *entry gets the physical function's low pc. Returns the frame count (0: no
 * function holds it). */
static int symparse_frames(struct symparse_file *f, uint64_t vaddr, struct sym_frame *fr,
			    uint64_t *entry)
{
	Dwarf_Die cu_mem, *cu = symparse_cu(f, vaddr, &cu_mem), chain[SYMPARSE_MAX_DEPTH];
	int nc = 0, out = 0;
	if (!cu || (symparse_descend(cu, vaddr - f->bias, chain, &nc, 0), nc) == 0)
		return 0;
	struct sym_frame pos = { 0 };
	symparse_leaf_line(f, cu, vaddr, &pos);
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;
	for (int i = nc - 1; i >= 0; i--) {
		bool physical = dwarf_tag(&chain[i]) != DW_TAG_inlined_subroutine || i == 0;
		if (out < SYM_MAX_INLINE - 1 || physical) {
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
			*entry = dwarf_tag(&chain[i]) != DW_TAG_inlined_subroutine &&
						 dwarf_entrypc(&chain[i], &low) == 0
					 ? low + f->bias : 0;
			break;
		}
		/* an inlined instance: where its caller called it */
		pos = (struct sym_frame){ 0 };
		if (dwarf_attr(&chain[i], DW_AT_call_file, &a) && dwarf_formudata(&a, &w) == 0 &&
		    (files || dwarf_getsrcfiles(cu, &files, &nfiles) == 0) && w < nfiles)
			pos.file = symparse_abs_path(f, cu, dwarf_filesrc(files, w, NULL, NULL));
		if (dwarf_attr(&chain[i], DW_AT_call_line, &a) && dwarf_formudata(&a, &w) == 0 &&
		    w <= INT_MAX)
			pos.line = (int)w;
	}
	return out;
}

/* File offset to file address through the PT_LOAD segment holding it. */
static uint64_t symparse_vaddr(const struct symparse_file *f, uint64_t off)
{
	for (size_t i = 0; i < f->nsegs; i++) {
		const struct symparse_seg *s = &f->segs[i];
		if (off >= s->offset && off - s->offset < s->filesz)
			return off - s->offset + s->vaddr;
	}
	return off;
}

/* Resolve file address vaddr: the ELF symbol names the physical function
 * and gives its entry; DWARF gives the inline chain and lines. */
static int symparse_resolve(struct symparse_file *f, uint64_t vaddr, struct sym_frame *fr,
			     uint64_t *entry)
{
	const struct symparse_func *sym = symparse_func_at(f, vaddr);
	const char *name = sym ? sym->name : NULL;
	*entry = 0;
	int n = symparse_dwarf(f) ? symparse_frames(f, vaddr, fr, entry) : 0;
	if (n == 0 && name) {
		/* No function scope, but the line table may still know the position. */
		Dwarf_Die cu_mem, *cu = f->dwarf ? symparse_cu(f, vaddr, &cu_mem) : NULL;
		memset(fr, 0, sizeof(*fr));
		if (cu)
			symparse_leaf_line(f, cu, vaddr, fr);
		n = 1;
	}
	if (n > 0 && name) {
		fr[n - 1].function = name;
		*entry = sym->start;
	}
	for (int i = 0; i < n; i++)
		if (!fr[i].function)
			fr[i].function = "??";
	return n;
}

/* ---- The interface -------------------------------------------------------------------- */

struct symparse_file *symparse_open(int fd, symparse_find_fn find, void *arg)
{
	static bool elf_ready;
	if (!elf_ready) {
		elf_version(EV_CURRENT);
		elf_ready = true;
	}
	struct symparse_file *f = fd >= 0 ? calloc(1, sizeof(*f)) : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	f->fd = fd;
	f->debug_fd = -1;
	f->find = find;
	f->find_arg = arg;
	if (symparse_read_elf(f) != 0 || !(f->dwfl = symparse_dwfl(f, &symparse_callbacks, &f->mod))) {
		symparse_close(f);
		return NULL;
	}
	return f;
}

void symparse_close(struct symparse_file *f)
{
	if (!f)
		return;
	if (f->dwfl)
		dwfl_end(f->dwfl);
	if (f->fd >= 0)
		close(f->fd);
	if (f->debug_fd >= 0)
		close(f->debug_fd);
	memo_free(&f->paths);
	free(f->funcs);
	free(f->funcs_maxend);
	free(f->funcs_names);
	free(f->segs);
	free(f);
}

int symparse_lookup(struct symparse_file *f, uint64_t off, struct sym_frame *fr,
		    uint64_t *entry_back)
{
	uint64_t vaddr = symparse_vaddr(f, off), entry = 0;
	int n = symparse_resolve(f, vaddr, fr, &entry);
	*entry_back = entry && entry <= vaddr ? vaddr - entry : UINT64_MAX;
	return n;
}

/* Before the first lookup only the file itself is asked, so a mapping without samples never
 * starts a debug file search (nor a debuginfod download). */
void symparse_flags(struct symparse_file *f, struct symparse_flags *out)
{
	bool dw = f->dwarf_tried ? f->dwarf != NULL : f->main_has_dwarf;
	out->functions = f->main_has_syms || dw || f->nfuncs > 0;
	out->filenames = out->lines = out->inlines = dw;
}
