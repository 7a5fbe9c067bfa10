// SPDX-License-Identifier: MIT
/*
 * symbolize.c: addresses to function names, files, lines and inline chains.
 *
 * A struct symfile is one ELF file (plus its separate debug file when one is installed),
 * opened once and shared: symfile_get() finds it in a global cache keyed by the file
 * (device, inode, size, mtime; with its GNU build ID, or its path when it has none), so a
 * thousand processes running one binary cost one parse, and a copy carrying someone else's
 * build ID never stands in for the real file. Function names come from the ELF symbol
 * table (.symtab, else .dynsym; STT_FUNC and STT_GNU_IFUNC with a size): an address that
 * no symbol covers gets no name, never the nearest symbol's. Files, lines and inlined
 * frames come from DWARF through libdw: the line table gives the leaf position, and the
 * chain of DW_TAG_inlined_subroutine DIEs holding the address gives each caller's
 * position through DW_AT_call_file/DW_AT_call_line.
 *
 * Ownership: every string handed out points into data libelf or libdw keeps for the life
 * of the symfile (string tables, the DWARF file tables), so it stays valid while the
 * symfile is referenced. The file descriptor is kept open (duplicated from the caller's),
 * so files deleted or replaced on disk after the mapping still symbolize; files are read
 * with pread (ELF_C_READ), never mapped, so a file truncated under us gives errors, not
 * SIGBUS.
 *
 * Threads: the symbol table and the segment table are built before the symfile is
 * published and never change, so lookups in them need no lock. DWARF lookups and the
 * per-address result cache take the symfile's mutex (libdw is not thread-safe on one
 * handle). The cache of symfiles and the reference counts are under one global mutex.
 *
 * Left to others: reading /proc/PID/maps and turning process mappings into symfiles
 * (procmaps.c); choosing which addresses to symbolize (the writers).
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "internal.h"

/* Results remembered per symfile; beyond this many addresses, lookups are recomputed. */
#define SYM_CACHE_MAX (1u << 18)
/* Deepest DIE nesting walked when looking for the scopes holding an address. */
#define SYM_MAX_DEPTH 64

struct sym {
	uint64_t start, end; /* ELF virtual addresses, [start, end) */
	const char *name;
	uint8_t bind; /* STB_* */
};

struct seg {
	uint64_t offset, vaddr, filesz;
};

struct cu_range {
	uint64_t lo, hi;
	Dwarf_Die cudie;
};

struct abs_path {
	const char *dir, *name; /* libdw's strings: the key, by address */
	char *full;
};

struct cache_entry {
	uint64_t vaddr;
	uint64_t entry; /* ELF vaddr of the physical function, 0 when unknown */
	int nframes;
	struct sym_frame frames[];
};

struct symfile {
	struct symfile *next; /* global cache chain, under g_lock */
	unsigned long refs;   /* under g_lock */
	char *key;

	int fd, dbg_fd;
	Elf *elf, *dbg_elf;
	Elf *dwarf_elf; /* elf or dbg_elf when it has .debug_info, else NULL */

	/* Immutable once published. */
	struct seg *segs;
	size_t nsegs;
	struct sym *syms; /* sorted by start */
	uint64_t *maxend; /* maxend[i] = max(syms[0..i].end) */
	size_t nsyms;

	pthread_mutex_t lock; /* everything below */
	/* Opened at the first lookup that needs it: libdw reads (and decompresses) the debug
	 * sections at dwarf_begin_elf, which costs tens of milliseconds for a libc, and most
	 * libraries a process maps never appear in its profiles. */
	bool dwarf_tried;
	Dwarf *dwarf;
	bool cus_built;
	struct cu_range *cus; /* sorted by lo */
	uint64_t *cu_maxhi;
	size_t ncus;
	struct cache_entry **cache; /* open addressing on vaddr */
	size_t cache_cap, cache_n;
	struct abs_path *paths; /* absolute file names made from comp_dir + name */
	size_t paths_cap, paths_n;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct symfile *g_files;
static pthread_once_t g_elf_once = PTHREAD_ONCE_INIT;

static void symfile_elf_init(void)
{
	elf_version(EV_CURRENT);
}

/* ---- ELF: segments and symbols -------------------------------------------------------- */

static int symfile_read_segs(struct symfile *f)
{
	size_t n;
	if (elf_getphdrnum(f->elf, &n) != 0)
		return 0;
	if (n > 65536)
		return -EINVAL;
	f->segs = calloc(n ? n : 1, sizeof(*f->segs));
	if (!f->segs)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(f->elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		f->segs[f->nsegs++] = (struct seg){ ph.p_offset, ph.p_vaddr, ph.p_filesz };
	}
	return 0;
}

/* A better name for one address: global before weak before local, then fewer leading
 * underscores (malloc over __libc_malloc). */
static bool sym_better(const struct sym *a, const struct sym *b)
{
	static const int rank[] = { [STB_LOCAL] = 2, [STB_GLOBAL] = 0, [STB_WEAK] = 1 };
	int ra = a->bind <= STB_WEAK ? rank[a->bind] : 3;
	int rb = b->bind <= STB_WEAK ? rank[b->bind] : 3;
	if (ra != rb)
		return ra < rb;
	/* glibc's internal aliases (__GI_name) are never the name users know. */
	bool ga = strncmp(a->name, "__GI_", 5) == 0, gb = strncmp(b->name, "__GI_", 5) == 0;
	if (ga != gb)
		return gb;
	size_t ua = strspn(a->name, "_"), ub = strspn(b->name, "_");
	return ua < ub;
}

static int sym_cmp(const void *x, const void *y)
{
	const struct sym *a = x, *b = y;
	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	if (a->end != b->end)
		return a->end > b->end ? -1 : 1; /* longer first */
	return 0;
}

/* Append the function symbols of section type (SHT_SYMTAB or SHT_DYNSYM) of elf. */
static int symfile_read_syms(struct symfile *f, Elf *elf, Elf64_Word type)
{
	Elf_Scn *scn = NULL;
	size_t cap = f->nsyms;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != type || sh.sh_entsize == 0)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		if (!d)
			continue;
		size_t n = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			GElf_Sym s;
			if (!gelf_getsym(d, (int)i, &s))
				break;
			int t = GELF_ST_TYPE(s.st_info);
			if ((t != STT_FUNC && t != STT_GNU_IFUNC) || s.st_size == 0 ||
			    s.st_shndx == SHN_UNDEF || s.st_value + s.st_size < s.st_value)
				continue;
			const char *name = elf_strptr(elf, sh.sh_link, s.st_name);
			if (!name || !*name)
				continue;
			if (f->nsyms == cap) {
				size_t nc = cap ? cap * 2 : 256;
				struct sym *p = realloc(f->syms, nc * sizeof(*p));
				if (!p)
					return -ENOMEM;
				f->syms = p;
				cap = nc;
			}
			f->syms[f->nsyms++] = (struct sym){ s.st_value, s.st_value + s.st_size,
							    name, (uint8_t)GELF_ST_BIND(s.st_info) };
		}
	}
	return 0;
}

static bool elf_has_section(Elf *elf, Elf64_Word type)
{
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && sh.sh_type == type)
			return true;
	}
	return false;
}

/* Sort, fold symbols with the same range into the best name, and index the ends. */
static int symfile_index_syms(struct symfile *f)
{
	if (f->nsyms == 0)
		return 0;
	if (f->nsyms > 1)
		qsort(f->syms, f->nsyms, sizeof(*f->syms), sym_cmp);
	size_t w = 0;
	for (size_t i = 0; i < f->nsyms; i++) {
		if (w > 0 && f->syms[w - 1].start == f->syms[i].start &&
		    f->syms[w - 1].end == f->syms[i].end) {
			if (sym_better(&f->syms[i], &f->syms[w - 1]))
				f->syms[w - 1] = f->syms[i];
			continue;
		}
		f->syms[w++] = f->syms[i];
	}
	f->nsyms = w;
	f->maxend = malloc(w * sizeof(*f->maxend));
	if (!f->maxend)
		return -ENOMEM;
	uint64_t m = 0;
	for (size_t i = 0; i < w; i++) {
		if (f->syms[i].end > m)
			m = f->syms[i].end;
		f->maxend[i] = m;
	}
	return 0;
}

/* The innermost symbol covering vaddr, or NULL. Lock-free (immutable table). */
static const struct sym *symfile_find_sym(const struct symfile *f, uint64_t vaddr)
{
	size_t lo = 0, hi = f->nsyms;
	while (lo < hi) { /* first index with start > vaddr */
		size_t mid = lo + (hi - lo) / 2;
		if (f->syms[mid].start <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* Walk back over symbols starting at or before vaddr while one of them may still
	 * reach past it; the first that covers it is the innermost (latest start). */
	for (size_t i = lo; i-- > 0;) {
		if (f->maxend[i] <= vaddr)
			break;
		if (vaddr < f->syms[i].end)
			return &f->syms[i];
	}
	return NULL;
}

/* ---- Separate debug files ------------------------------------------------------------- */

static int open_elf(const char *path, int *fd_out, Elf **elf_out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		if (elf)
			elf_end(elf);
		close(fd);
		return -ENOEXEC;
	}
	*fd_out = fd;
	*elf_out = elf;
	return 0;
}

/* Whether elf carries DWARF (a .debug_info with contents). */
static bool elf_has_debug_info(Elf *elf)
{
	size_t shstrndx;
	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return false;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS || sh.sh_size == 0)
			continue;
		const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (name && (strcmp(name, ".debug_info") == 0 || strcmp(name, ".zdebug_info") == 0))
			return true;
	}
	return false;
}

/* The CRC-32 .gnu_debuglink records: zlib's crc32 of the whole file. */
static bool file_crc_is(int fd, uint32_t want)
{
	unsigned char chunk[65536];
	uLong crc = crc32(0L, Z_NULL, 0);
	off_t off = 0;
	ssize_t n;
	while ((n = pread(fd, chunk, sizeof(chunk), off)) > 0) {
		crc = crc32(crc, chunk, (uInt)n);
		off += n;
	}
	return n == 0 && (uint32_t)crc == want;
}

/* Try one candidate debug file; keep it if it has DWARF and belongs to f's file: same
 * build ID when f has one, else the debuglink CRC (when check_crc). */
static bool symfile_try_debug(struct symfile *f, const char *path, bool check_crc,
			      uint32_t crc)
{
	int fd = -1;
	Elf *elf = NULL;
	if (open_elf(path, &fd, &elf) != 0)
		return false;
	const void *id, *did;
	ssize_t idlen = dwelf_elf_gnu_build_id(f->elf, &id);
	bool ok;
	if (idlen > 0) {
		ssize_t dlen = dwelf_elf_gnu_build_id(elf, &did);
		ok = dlen == idlen && memcmp(id, did, (size_t)idlen) == 0;
	} else {
		ok = !check_crc || file_crc_is(fd, crc);
	}
	if (!ok || !elf_has_debug_info(elf)) {
		elf_end(elf);
		close(fd);
		return false;
	}
	f->dbg_fd = fd;
	f->dbg_elf = elf;
	f->dwarf_elf = elf;
	return true;
}

/* Look for DWARF elsewhere: /usr/lib/debug/.build-id/xx/rest.debug, then .gnu_debuglink
 * next to the file, in its .debug/ folder, and under /usr/lib/debug. */
static void symfile_find_debug(struct symfile *f, const char *path)
{
	char buf[PATH_MAX];
	const void *id;
	ssize_t idlen = dwelf_elf_gnu_build_id(f->elf, &id);
	if (idlen >= 2) {
		const unsigned char *b = id;
		int n = snprintf(buf, sizeof(buf), "/usr/lib/debug/.build-id/%02x/", b[0]);
		for (ssize_t i = 1; i < idlen && n > 0 && (size_t)n + 3 < sizeof(buf); i++)
			n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%02x", b[i]);
		if (n > 0 && (size_t)n + 7 < sizeof(buf)) {
			memcpy(buf + n, ".debug", 7);
			if (symfile_try_debug(f, buf, false, 0))
				return;
		}
	}
	GElf_Word crc;
	const char *link = dwelf_elf_gnu_debuglink(f->elf, &crc);
	if (!link || !*link || strchr(link, '/') || !path || path[0] != '/')
		return;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return;
	slash[slash == dir ? 1 : 0] = '\0';
	const char *fmts[] = { "%s/%s", "%s/.debug/%s", "/usr/lib/debug%s/%s" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(fmts); i++) {
		int n = snprintf(buf, sizeof(buf), fmts[i], strcmp(dir, "/") == 0 && i < 2 ? "" : dir,
				 link);
		if (n <= 0 || (size_t)n >= sizeof(buf) || strcmp(buf, path) == 0)
			continue;
		if (symfile_try_debug(f, buf, true, crc))
			return;
	}
}

/* ---- Construction and the global cache ------------------------------------------------ */

static void symfile_destroy(struct symfile *f)
{
	if (!f)
		return;
	if (f->dwarf)
		dwarf_end(f->dwarf);
	if (f->dbg_elf)
		elf_end(f->dbg_elf);
	if (f->dbg_fd >= 0)
		close(f->dbg_fd);
	if (f->elf)
		elf_end(f->elf);
	if (f->fd >= 0)
		close(f->fd);
	for (size_t i = 0; i < f->cache_cap; i++)
		free(f->cache ? f->cache[i] : NULL);
	free(f->cache);
	for (size_t i = 0; i < f->paths_cap; i++)
		free(f->paths[i].full);
	free(f->paths);
	free(f->cus);
	free(f->cu_maxhi);
	free(f->segs);
	free(f->syms);
	free(f->maxend);
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
	f->dbg_fd = -1;
	f->key = key;
	f->refs = 1;
	pthread_mutex_init(&f->lock, NULL);
	f->elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!f->elf || elf_kind(f->elf) != ELF_K_ELF)
		goto fail;
	if (symfile_read_segs(f) != 0)
		goto fail;
	if (elf_has_debug_info(f->elf))
		f->dwarf_elf = f->elf;
	else
		symfile_find_debug(f, path);
	bool symtab = elf_has_section(f->elf, SHT_SYMTAB);
	int err = symfile_read_syms(f, f->elf, symtab ? SHT_SYMTAB : SHT_DYNSYM);
	/* A stripped file keeps only .dynsym; its debug file usually has the .symtab. */
	if (!err && !symtab && f->dbg_elf && elf_has_section(f->dbg_elf, SHT_SYMTAB))
		err = symfile_read_syms(f, f->dbg_elf, SHT_SYMTAB);
	if (err || symfile_index_syms(f) != 0)
		goto fail;
	return f;
fail:
	symfile_destroy(f);
	return NULL;
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
	if (build_id && *build_id) {
		if (asprintf(&key, "b:%s:%llx:%llx:%llx:%lld.%09ld", build_id,
			     (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
			     (unsigned long long)st.st_size, (long long)st.st_mtim.tv_sec,
			     st.st_mtim.tv_nsec) < 0)
			return NULL;
		return key;
	}
	if (asprintf(&key, "f:%llx:%llx:%llx:%lld.%09ld:%s", (unsigned long long)st.st_dev,
		     (unsigned long long)st.st_ino, (unsigned long long)st.st_size,
		     (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, path ? path : "") < 0)
		return NULL;
	return key;
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
	struct symfile *f;
	int own = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : (path ? open(path, O_RDONLY | O_CLOEXEC) : -1);
	if (own < 0)
		return NULL;
	char *key = symfile_key(path, own, build_id);
	if (!key) {
		close(own);
		return NULL;
	}
	pthread_mutex_lock(&g_lock);
	f = symfile_lookup_locked(key);
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
		g_files = nf;
		f = nf;
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
	if (last) {
		for (struct symfile **pp = &g_files; *pp; pp = &(*pp)->next) {
			if (*pp == f) {
				*pp = f->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&g_lock);
	if (last)
		symfile_destroy(f);
}

/* ---- DWARF ---------------------------------------------------------------------------- */

/* The DWARF handle, opened on first use (f->lock held); NULL when there is none. */
/*
 * Whether the DWARF string sections of elf end with a NUL. libdw (0.188) reads their strings
 * with strlen: an unterminated last string of a hostile file makes it read past the section
 * (found by tests/fuzz/fuzz_elf.c, kept in tests/fuzz/regress/elf). Such a file keeps its ELF
 * symbols and gets no DWARF.
 */
static bool symfile_dwarf_strings_ok(Elf *elf)
{
	size_t shstrndx;
	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return false;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!name || strncmp(name, ".debug_", 7) != 0 || !strstr(name, "str") ||
		    strstr(name, "_offsets"))
			continue; /* .debug_str, .debug_line_str (and .dwo forms) */
		/* a compressed section is checked as libdw will read it: decompressed */
		if ((sh.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0)
			return false;
		Elf_Data *d = elf_getdata(scn, NULL);
		if (!d)
			return false;
		if (d->d_size && (!d->d_buf || ((const char *)d->d_buf)[d->d_size - 1] != '\0'))
			return false;
	}
	return true;
}

static Dwarf *symfile_dwarf(struct symfile *f)
{
	if (!f->dwarf_tried) {
		f->dwarf_tried = true;
		if (f->dwarf_elf && symfile_dwarf_strings_ok(f->dwarf_elf))
			f->dwarf = dwarf_begin_elf(f->dwarf_elf, DWARF_C_READ, NULL);
		if (!f->dwarf)
			f->dwarf_elf = NULL;
	}
	return f->dwarf;
}

static int cu_cmp(const void *x, const void *y)
{
	const struct cu_range *a = x, *b = y;
	if (a->lo != b->lo)
		return a->lo < b->lo ? -1 : 1;
	return 0;
}

/* Index the address ranges of every compile unit (not relying on .debug_aranges, which
 * not every producer writes). Called with f->lock held. */
static void symfile_build_cus(struct symfile *f)
{
	f->cus_built = true;
	if (!f->dwarf)
		return;
	size_t cap = 0;
	Dwarf_CU *cu = NULL;
	Dwarf_Half version;
	uint8_t unit_type;
	Dwarf_Die cudie, subdie;
	while (dwarf_get_units(f->dwarf, cu, &cu, &version, &unit_type, &cudie, &subdie) == 0) {
		if (dwarf_tag(&cudie) != DW_TAG_compile_unit)
			continue;
		Dwarf_Addr base, start, end;
		ptrdiff_t off = 0;
		while ((off = dwarf_ranges(&cudie, off, &base, &start, &end)) > 0) {
			if (end <= start)
				continue;
			if (f->ncus == cap) {
				size_t nc = cap ? cap * 2 : 64;
				struct cu_range *p = realloc(f->cus, nc * sizeof(*p));
				if (!p)
					goto out;
				f->cus = p;
				cap = nc;
			}
			f->cus[f->ncus++] = (struct cu_range){ start, end, cudie };
		}
	}
out:
	if (f->ncus == 0)
		return;
	if (f->ncus > 1)
		qsort(f->cus, f->ncus, sizeof(*f->cus), cu_cmp);
	f->cu_maxhi = malloc(f->ncus * sizeof(*f->cu_maxhi));
	if (!f->cu_maxhi) {
		f->ncus = 0;
		return;
	}
	uint64_t m = 0;
	for (size_t i = 0; i < f->ncus; i++) {
		if (f->cus[i].hi > m)
			m = f->cus[i].hi;
		f->cu_maxhi[i] = m;
	}
}

static Dwarf_Die *symfile_find_cu(struct symfile *f, uint64_t vaddr)
{
	if (!f->cus_built)
		symfile_build_cus(f);
	size_t lo = 0, hi = f->ncus;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (f->cus[mid].lo <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i-- > 0;) {
		if (f->cu_maxhi[i] <= vaddr)
			break;
		if (vaddr < f->cus[i].hi)
			return &f->cus[i].cudie;
	}
	return NULL;
}

/* The name a DIE (possibly a concrete instance) goes by: the linkage name when there is
 * one (so C++ names match the ELF symbols), else DW_AT_name, following abstract origins
 * and specifications. */
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

static int die_decl_line(Dwarf_Die *die)
{
	int line = 0;
	if (dwarf_decl_line(die, &line) != 0 || line < 0)
		return 0;
	return line;
}

/* Find the chain of subprogram / inlined_subroutine DIEs holding vaddr under parent,
 * outermost first, into chain[*n]. Returns true when the address lies in a function. */
static bool dwarf_find_chain(Dwarf_Die *parent, uint64_t vaddr, Dwarf_Die *chain, int *n,
			     int depth)
{
	if (depth > SYM_MAX_DEPTH)
		return false;
	Dwarf_Die child;
	if (dwarf_child(parent, &child) != 0)
		return false;
	do {
		int tag = dwarf_tag(&child);
		switch (tag) {
		case DW_TAG_subprogram:
		case DW_TAG_inlined_subroutine:
		case DW_TAG_entry_point:
		case DW_TAG_lexical_block:
		case DW_TAG_try_block:
		case DW_TAG_catch_block:
			if (dwarf_haspc(&child, vaddr) != 1)
				break;
			if (tag != DW_TAG_lexical_block && tag != DW_TAG_try_block &&
			    tag != DW_TAG_catch_block && *n < SYM_MAX_DEPTH)
				chain[(*n)++] = child;
			dwarf_find_chain(&child, vaddr, chain, n, depth + 1);
			return *n > 0;
		case DW_TAG_namespace:
		case DW_TAG_module:
		case DW_TAG_class_type:
		case DW_TAG_structure_type:
		case DW_TAG_union_type:
			if (dwarf_haschildren(&child) == 1 &&
			    dwarf_find_chain(&child, vaddr, chain, n, depth + 1))
				return true;
			break;
		default:
			break;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return *n > 0;
}

static size_t path_slot(const char *dir, const char *name, size_t cap)
{
	uint64_t h = ((uint64_t)(uintptr_t)dir * 0x9e3779b97f4a7c15ULL) ^ (uint64_t)(uintptr_t)name;
	h *= 0xff51afd7ed558ccdULL;
	return (size_t)(h >> 20) & (cap - 1);
}

/* "dir/name" with "./" segments dropped, owned by f (f->lock held). */
static const char *path_join(struct symfile *f, const char *dir, const char *name)
{
	if (f->paths_cap) {
		for (size_t i = path_slot(dir, name, f->paths_cap);; i = (i + 1) & (f->paths_cap - 1)) {
			struct abs_path *e = &f->paths[i];
			if (!e->full)
				break;
			if (e->dir == dir && e->name == name)
				return e->full;
		}
	}
	if ((f->paths_n + 1) * 2 > f->paths_cap) {
		size_t nc = f->paths_cap ? f->paths_cap * 2 : 64;
		struct abs_path *t = calloc(nc, sizeof(*t));
		if (!t)
			return name;
		for (size_t i = 0; i < f->paths_cap; i++) {
			if (!f->paths[i].full)
				continue;
			size_t j = path_slot(f->paths[i].dir, f->paths[i].name, nc);
			while (t[j].full)
				j = (j + 1) & (nc - 1);
			t[j] = f->paths[i];
		}
		free(f->paths);
		f->paths = t;
		f->paths_cap = nc;
	}
	size_t dl = strlen(dir), nl = strlen(name);
	char *full = malloc(dl + nl + 2);
	if (!full)
		return name;
	memcpy(full, dir, dl);
	size_t w = dl;
	while (w > 1 && full[w - 1] == '/')
		w--;
	full[w++] = '/';
	for (const char *c = name; *c;) {
		if (c[0] == '.' && c[1] == '/' && full[w - 1] == '/') {
			c += 2;
			continue;
		}
		if (c[0] == '/' && full[w - 1] == '/') {
			c++;
			continue;
		}
		full[w++] = *c++;
	}
	full[w] = '\0';
	size_t j = path_slot(dir, name, f->paths_cap);
	while (f->paths[j].full)
		j = (j + 1) & (f->paths_cap - 1);
	f->paths[j] = (struct abs_path){ dir, name, full };
	f->paths_n++;
	return full;
}

/* A file name from the CU's tables made absolute with the CU's DW_AT_comp_dir. */
static const char *cu_abs(struct symfile *f, Dwarf_Die *cudie, const char *name)
{
	if (!name || name[0] == '/')
		return name;
	Dwarf_Attribute a;
	const char *dir = dwarf_attr(cudie, DW_AT_comp_dir, &a) ? dwarf_formstring(&a) : NULL;
	if (!dir || dir[0] != '/')
		return name;
	return path_join(f, dir, name);
}

static const char *cu_file(struct symfile *f, Dwarf_Die *cudie, Dwarf_Word idx)
{
	Dwarf_Files *files;
	size_t nfiles;
	if (dwarf_getsrcfiles(cudie, &files, &nfiles) != 0 || idx >= nfiles)
		return NULL;
	return cu_abs(f, cudie, dwarf_filesrc(files, idx, NULL, NULL));
}

/* DWARF frames for vaddr, leaf first, into fr (at most SYM_MAX_INLINE); *entry gets the
 * physical function's low pc. Returns the frame count (0: no function DIE holds it).
 * Called with f->lock held. */
static int symfile_dwarf_frames(struct symfile *f, uint64_t vaddr, struct sym_frame *fr,
				uint64_t *entry)
{
	Dwarf_Die *cudie = symfile_find_cu(f, vaddr);
	if (!cudie)
		return 0;
	Dwarf_Die chain[SYM_MAX_DEPTH];
	int n = 0;
	if (!dwarf_find_chain(cudie, vaddr, chain, &n, 0) || n == 0)
		return 0;
	const char *file = NULL;
	int line = 0;
	Dwarf_Line *l = dwarf_getsrc_die(cudie, vaddr);
	if (l) {
		file = cu_abs(f, cudie, dwarf_linesrc(l, NULL, NULL));
		if (dwarf_lineno(l, &line) != 0)
			line = 0;
	}
	/* chain is outermost first; walk it from the leaf, each inlined DIE giving the
	 * position of the call in its parent. Keep the leaf-most frames and always the
	 * physical function (chain[0]) last. */
	int out = 0;
	for (int i = n - 1; i >= 0; i--) {
		if (out < SYM_MAX_INLINE - 1 || i == 0) {
			int k = out < SYM_MAX_INLINE ? out : SYM_MAX_INLINE - 1;
			fr[k].function = die_name(&chain[i]);
			fr[k].file = file;
			fr[k].line = line;
			fr[k].start_line = die_decl_line(&chain[i]);
			if (out < SYM_MAX_INLINE)
				out++;
		}
		if (dwarf_tag(&chain[i]) == DW_TAG_inlined_subroutine) {
			Dwarf_Attribute a;
			Dwarf_Word w;
			file = NULL;
			line = 0;
			if (dwarf_attr(&chain[i], DW_AT_call_file, &a) && dwarf_formudata(&a, &w) == 0)
				file = cu_file(f, cudie, w);
			if (dwarf_attr(&chain[i], DW_AT_call_line, &a) && dwarf_formudata(&a, &w) == 0 &&
			    w <= INT_MAX)
				line = (int)w;
		}
	}
	Dwarf_Addr lowpc;
	*entry = 0;
	if (dwarf_tag(&chain[0]) != DW_TAG_inlined_subroutine &&
	    (dwarf_entrypc(&chain[0], &lowpc) == 0 || dwarf_lowpc(&chain[0], &lowpc) == 0))
		*entry = lowpc;
	return out;
}

/* ---- Lookups -------------------------------------------------------------------------- */

/* File offset to ELF virtual address through the PT_LOAD segment holding it. */
static uint64_t symfile_vaddr(const struct symfile *f, uint64_t off)
{
	for (size_t i = 0; i < f->nsegs; i++) {
		const struct seg *s = &f->segs[i];
		if (off >= s->offset && off - s->offset < s->filesz)
			return off - s->offset + s->vaddr;
	}
	return off;
}

static size_t cache_slot(uint64_t vaddr, size_t cap)
{
	return (size_t)((vaddr * 0x9e3779b97f4a7c15ULL) >> 17) & (cap - 1);
}

static struct cache_entry *cache_find(struct symfile *f, uint64_t vaddr)
{
	if (!f->cache_cap)
		return NULL;
	for (size_t i = cache_slot(vaddr, f->cache_cap);; i = (i + 1) & (f->cache_cap - 1)) {
		struct cache_entry *e = f->cache[i];
		if (!e || e->vaddr == vaddr)
			return e;
	}
}

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
			struct cache_entry *o = f->cache[i];
			if (!o)
				continue;
			size_t j = cache_slot(o->vaddr, nc);
			while (t[j])
				j = (j + 1) & (nc - 1);
			t[j] = o;
		}
		free(f->cache);
		f->cache = t;
		f->cache_cap = nc;
	}
	size_t j = cache_slot(e->vaddr, f->cache_cap);
	while (f->cache[j])
		j = (j + 1) & (f->cache_cap - 1);
	f->cache[j] = e;
	f->cache_n++;
}

/* Resolve vaddr (f->lock held): DWARF for the inline chain and lines, the ELF symbol
 * for the physical function's name and entry. */
static int symfile_resolve(struct symfile *f, uint64_t vaddr, struct sym_frame *fr,
			   uint64_t *entry)
{
	const struct sym *s = symfile_find_sym(f, vaddr);
	uint64_t dw_entry = 0;
	int n = symfile_dwarf(f) ? symfile_dwarf_frames(f, vaddr, fr, &dw_entry) : 0;
	*entry = 0;
	if (n > 0) {
		if (s) {
			fr[n - 1].function = s->name;
			*entry = s->start;
		} else {
			*entry = dw_entry;
		}
		if (!fr[n - 1].function)
			fr[n - 1].function = "??";
		for (int i = 0; i < n - 1; i++)
			if (!fr[i].function)
				fr[i].function = "??";
		return n;
	}
	if (!s)
		return 0;
	memset(fr, 0, sizeof(*fr));
	fr[0].function = s->name;
	*entry = s->start;
	/* No function DIE, but the line table may still know the position. */
	Dwarf_Die *cudie = f->dwarf ? symfile_find_cu(f, vaddr) : NULL;
	Dwarf_Line *l = cudie ? dwarf_getsrc_die(cudie, vaddr) : NULL;
	if (l) {
		fr[0].file = cu_abs(f, cudie, dwarf_linesrc(l, NULL, NULL));
		if (dwarf_lineno(l, &fr[0].line) != 0)
			fr[0].line = 0;
	}
	return 1;
}

/* What the file can tell, for pprof's Mapping.has_* (f->lock held; DWARF counts once it
 * is known to open, or while it has not been tried). */
static void symfile_flags(struct symfile *f, struct sym_result *out)
{
	bool dw = f->dwarf_elf != NULL;
	out->has_functions = f->nsyms > 0 || dw;
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
		e->vaddr = vaddr;
		e->entry = entry;
		e->nframes = n;
		memcpy(e->frames, fr, (size_t)n * sizeof(fr[0]));
		out->nframes = n;
		memcpy(out->frames, fr, (size_t)n * sizeof(fr[0]));
		if (entry && entry <= vaddr)
			out->entry = pc - (vaddr - entry);
		cache_insert(f, e); /* may free e */
		symfile_flags(f, out);
		pthread_mutex_unlock(&f->lock);
		return n;
	}
	out->nframes = e->nframes;
	memcpy(out->frames, e->frames, (size_t)e->nframes * sizeof(e->frames[0]));
	if (e->entry && e->entry <= vaddr)
		out->entry = pc - (vaddr - e->entry);
	symfile_flags(f, out);
	pthread_mutex_unlock(&f->lock);
	return out->nframes;
}
