// SPDX-License-Identifier: MIT
/*
 * symbolize.c: addresses to function names, files, lines and inline chains, asked of
 * libdwfl for the files symfile.c opened.
 *
 * A process address becomes a file address through the file's PT_LOAD segments; then
 *   - the function: libdwfl's symbol table (dwfl_module_getsym_info: .symtab, else .dynsym,
 *     the debug file's .symtab, the .gnu_debugdata one), read once per file into ranges
 *     sorted by address; only a sized STT_FUNC/STT_GNU_IFUNC symbol covering the address
 *     names it, never the nearest one below. Not dwfl_module_addrinfo: libdwfl 0.188 reads
 *     the whole table at each call (2 ms a lookup in libc, bench/symbolize_bench.c);
 *   - the compile unit: dwfl_module_addrdie (through .debug_aranges), checked to hold the
 *     address (libdwfl counts the gaps between a unit's ranges as the unit's); in a file
 *     without .debug_aranges (clang and rustc write none by default) each unit is asked;
 *   - the leaf's file:line: dwfl_module_getsrc; names relative to the compilation folder
 *     (DWARF 5, as libdw 0.188 gives them) made absolute;
 *   - the inline chain: the functions and inlined instances holding the address (a walk down
 *     the unit, symbolize_descend says why not dwarf_getscopes), each inlined one giving its
 *     caller's position (DW_AT_call_file/_line). The profile's Location carries one Line per
 *     function, leaf first, physical last.
 * Every address's answer is remembered (under the symfile's mutex, for the life of the file,
 * up to SYMBOLIZE_MEMO_MAX).
 *
 * Ownership: strings handed out point into libdwfl's data, valid while the symfile is
 * referenced. Left to others: opening files, finding debug files, the cache of files
 * (symfile.c); choosing which addresses to symbolize (the writers).
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <gelf.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "symfile.h"

/* Entries each memo of a symfile may hold; beyond that, lookups are recomputed. */
#define SYMBOLIZE_MEMO_MAX (1u << 18)
/* Deepest DIE nesting walked, and longest chain of functions kept, looking for an address. */
#define SYMBOLIZE_MAX_DEPTH 64

/* ---- Memos -------------------------------------------------------------------------- */

static size_t memo_slot(uint64_t key, size_t cap)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

static struct symfile_memo_entry *memo_find(const struct symfile_memo *m, uint64_t key)
{
	for (size_t i = m->cap ? memo_slot(key, m->cap) : 0; m->cap; i = (i + 1) & (m->cap - 1)) {
		struct symfile_memo_entry *e = m->slots[i];
		if (!e || e->key == key)
			return e;
	}
	return NULL;
}

/* Remember n frames under key; false when full or out of memory. */
static bool memo_insert(struct symfile_memo *m, uint64_t key, uint64_t entry, int n,
			const struct sym_frame *fr)
{
	if (m->n >= SYMBOLIZE_MEMO_MAX)
		return false;
	if ((m->n + 1) * 2 > m->cap) {
		size_t nc = m->cap ? m->cap * 2 : 256;
		struct symfile_memo_entry **t = calloc(nc, sizeof(*t));
		if (!t)
			return false;
		for (size_t i = 0; i < m->cap; i++) {
			struct symfile_memo_entry *o = m->slots[i];
			size_t j = o ? memo_slot(o->key, nc) : 0;
			while (o && t[j])
				j = (j + 1) & (nc - 1);
			if (o)
				t[j] = o;
		}
		free(m->slots);
		m->slots = t;
		m->cap = nc;
	}
	struct symfile_memo_entry *e = malloc(sizeof(*e) + (size_t)n * sizeof(*fr));
	if (!e)
		return false;
	e->key = key;
	e->entry = entry;
	e->nframes = n;
	memcpy(e->frames, fr, (size_t)n * sizeof(*fr));
	size_t j = memo_slot(key, m->cap);
	while (m->slots[j])
		j = (j + 1) & (m->cap - 1);
	m->slots[j] = e;
	m->n++;
	return true;
}

static void memo_free(struct symfile_memo *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i]);
	free(m->slots);
}

void symbolize_forget(struct symfile *f)
{
	for (size_t i = 0; i < f->paths.cap; i++)
		free(f->paths.slots[i] ? (char *)f->paths.slots[i]->frames[0].file : NULL);
	memo_free(&f->paths);
	memo_free(&f->results);
	free(f->funcs);
	free(f->funcs_maxend);
	free(f->funcs_names);
}

/* ---- Function symbols --------------------------------------------------------------- */

/* A better name for one range: global before weak before local, then not glibc's internal
 * alias (__GI_name), then fewer leading underscores (malloc over __libc_malloc). */
static bool func_better(const struct symfile_func *a, const struct symfile_func *b)
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
	const struct symfile_func *a = x, *b = y;
	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return a->end > b->end ? -1 : a->end < b->end; /* longer first */
}

/* Names without their symbol version ("__libc_start_main@@GLIBC_2.34", as glibc's debug
 * file spells them), copied into one block f owns; a name left as is when out of memory. */
static void symbolize_funcs_unversion(struct symfile *f, size_t n)
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
static bool symbolize_name_ends(Elf *elf, const char *name, Elf_Data **last)
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
 * highest end among funcs[0..i] (f->lock held). */
static void symbolize_funcs_build(struct symfile *f)
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
		    symbolize_name_ends(elf, name, &strtab))
			f->funcs[k++] = (struct symfile_func){ value, value + s.st_size, name,
							       (uint8_t)GELF_ST_BIND(s.st_info) };
	}
	symbolize_funcs_unversion(f, k);
	if (k > 1)
		qsort(f->funcs, k, sizeof(*f->funcs), func_cmp);
	size_t w = 0;
	for (size_t i = 0; i < k; i++) {
		struct symfile_func *last = w ? &f->funcs[w - 1] : NULL;
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

/* The innermost function symbol covering vaddr, or NULL (f->lock held). */
static const struct symfile_func *symbolize_func(struct symfile *f, uint64_t vaddr)
{
	if (!f->funcs_built)
		symbolize_funcs_build(f);
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

/* The module's DWARF, looked for at the first lookup (f->lock held); NULL when none. */
static Dwarf *symbolize_dwarf(struct symfile *f)
{
	if (!f->dwarf_tried) {
		f->dwarf_tried = true;
		/* a main file with bad strings is never given to libdw */
		if (!f->main_has_dwarf || symfile_dwarf_ok(f))
			f->dwarf = dwfl_module_getdwarf(f->mod, &f->bias);
		Dwarf_Aranges *ar;
		size_t nar = 0;
		f->cu_walk = f->dwarf && dwarf_getaranges(f->dwarf, &ar, &nar) == 0 && nar == 0;
	}
	return f->dwarf;
}

/* The compile unit holding file address vaddr: libdwfl's, or in a file without
 * .debug_aranges the first whose ranges hold it. */
static Dwarf_Die *symbolize_cu(struct symfile *f, Dwarf_Addr vaddr, Dwarf_Die *mem)
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
 * kept by f and found again by the address of libdw's string (f->lock held). libdw 0.188
 * leaves DWARF 5 names relative to the compilation directory. */
static const char *symbolize_abs_path(struct symfile *f, Dwarf_Die *cu, const char *name)
{
	Dwarf_Attribute a;
	const char *dir = name && name[0] != '/' && dwarf_attr(cu, DW_AT_comp_dir, &a)
				  ? dwarf_formstring(&a) : NULL;
	if (!dir || dir[0] != '/')
		return name;
	uint64_t key = (uint64_t)(uintptr_t)name;
	const struct symfile_memo_entry *e = memo_find(&f->paths, key);
	if (e)
		return e->frames[0].file;
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
	struct sym_frame owner = { .file = full };
	if (!memo_insert(&f->paths, key, 0, 1, &owner)) {
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
static void symbolize_leaf_line(struct symfile *f, Dwarf_Die *cu, Dwarf_Addr vaddr,
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
	fr->file = symbolize_abs_path(f, cu, file);
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
static bool symbolize_descend(Dwarf_Die *parent, Dwarf_Addr pc, Dwarf_Die *chain, int *n,
			      int depth)
{
	Dwarf_Die child;
	if (depth > SYMBOLIZE_MAX_DEPTH || dwarf_child(parent, &child) != 0)
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
			if (die_is_function(&child) && *n < SYMBOLIZE_MAX_DEPTH)
				chain[(*n)++] = child;
			symbolize_descend(&child, pc, chain, n, depth + 1);
			return true;
		case DW_TAG_namespace:
		case DW_TAG_module:
		case DW_TAG_class_type:
		case DW_TAG_structure_type:
		case DW_TAG_union_type:
			if (dwarf_haschildren(&child) == 1 &&
			    symbolize_descend(&child, pc, chain, n, depth + 1))
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
static int symbolize_frames(struct symfile *f, uint64_t vaddr, struct sym_frame *fr,
			    uint64_t *entry)
{
	Dwarf_Die cu_mem, *cu = symbolize_cu(f, vaddr, &cu_mem), chain[SYMBOLIZE_MAX_DEPTH];
	int nc = 0, out = 0;
	if (!cu || (symbolize_descend(cu, vaddr - f->bias, chain, &nc, 0), nc) == 0)
		return 0;
	struct sym_frame pos = { 0 };
	symbolize_leaf_line(f, cu, vaddr, &pos);
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
			pos.file = symbolize_abs_path(f, cu, dwarf_filesrc(files, w, NULL, NULL));
		if (dwarf_attr(&chain[i], DW_AT_call_line, &a) && dwarf_formudata(&a, &w) == 0 &&
		    w <= INT_MAX)
			pos.line = (int)w;
	}
	return out;
}

/* ---- Lookups ------------------------------------------------------------------------ */

/* File offset to file address through the PT_LOAD segment holding it. */
static uint64_t symbolize_vaddr(const struct symfile *f, uint64_t off)
{
	for (size_t i = 0; i < f->nsegs; i++) {
		const struct symfile_seg *s = &f->segs[i];
		if (off >= s->offset && off - s->offset < s->filesz)
			return off - s->offset + s->vaddr;
	}
	return off;
}

/* Resolve file address vaddr (f->lock held): the ELF symbol names the physical function
 * and gives its entry; DWARF gives the inline chain and lines. */
static int symbolize_resolve(struct symfile *f, uint64_t vaddr, struct sym_frame *fr,
			     uint64_t *entry)
{
	const struct symfile_func *sym = symbolize_func(f, vaddr);
	const char *name = sym ? sym->name : NULL;
	*entry = 0;
	int n = symbolize_dwarf(f) ? symbolize_frames(f, vaddr, fr, entry) : 0;
	if (n == 0 && name) {
		/* No function scope, but the line table may still know the position. */
		Dwarf_Die cu_mem, *cu = f->dwarf ? symbolize_cu(f, vaddr, &cu_mem) : NULL;
		memset(fr, 0, sizeof(*fr));
		if (cu)
			symbolize_leaf_line(f, cu, vaddr, fr);
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

/* What the file can tell, for pprof's Mapping.has_* (f->lock held). Before the first
 * lookup only the file itself is asked, so a mapping without samples never starts a debug
 * file search (nor a debuginfod download). */
static void symbolize_flags(struct symfile *f, struct sym_result *out)
{
	bool dw = f->dwarf_tried ? f->dwarf != NULL : f->main_has_dwarf;
	out->has_functions = f->main_has_syms || dw || f->nfuncs > 0;
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
		symbolize_flags(f, out);
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	uint64_t vaddr = symbolize_vaddr(f, pc - m->start + m->offset), entry;

	pthread_mutex_lock(&f->lock);
	const struct symfile_memo_entry *e = memo_find(&f->results, vaddr);
	if (e) {
		out->nframes = e->nframes;
		memcpy(out->frames, e->frames, (size_t)e->nframes * sizeof(e->frames[0]));
		entry = e->entry;
	} else {
		out->nframes = symbolize_resolve(f, vaddr, out->frames, &entry);
		memo_insert(&f->results, vaddr, entry, out->nframes, out->frames);
	}
	if (entry && entry <= vaddr)
		out->entry = pc - (vaddr - entry);
	symbolize_flags(f, out);
	pthread_mutex_unlock(&f->lock);
	return out->nframes;
}
