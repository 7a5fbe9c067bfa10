// SPDX-License-Identifier: MIT
/*
 * symfile.c: the ELF files the symbolizer reads, each opened once, checked, and handed to
 * elfutils' libdwfl.
 *
 * symfile_get() finds a file in a global cache keyed by the file itself (device, inode,
 * size, mtime; with its GNU build ID, or its path when it has none), so a thousand processes
 * running one binary cost one parse, and a copy carrying someone else's build ID never
 * stands in for the real file. Each symfile owns one Dwfl holding one module reported at the
 * file's own virtual addresses (bias 0), so it serves every process that maps the file.
 *
 * Hostile files. The process's file reaches libdwfl as our own libelf handle reading with
 * pread (ELF_C_READ) through the descriptor procmaps.c opened and checked (map_files, or the
 * process's root with an inode re-check): deleted or replaced files still symbolize and a
 * file truncated under us gives errors, not SIGBUS. The separate debug file is looked for
 * with dwfl_standard_find_debuginfo, which maps what it finds and lets libdw parse it at
 * once; so the file's own Dwfl searches only where root keeps files (/usr/lib/debug: by
 * build ID, or the .gnu_debuglink under /usr/lib/debug/DIR) and debuginfod's cache, and the
 * .gnu_debuglink beside the file and in its .debug/ is searched by a throwaway Dwfl that
 * checks candidates by CRC and keeps none open. What that one finds is copied into a sealed
 * memfd unless nobody else can change it (owned by root or by us, writable by neither group
 * nor others), and refused when its DWARF string sections do not end with a NUL (libdw 0.188
 * reads past them: tests/fuzz/regress/elf). A DWARF alternate file (dwz) is looked for in
 * the system's places only.
 *
 * debuginfod. When DEBUGINFOD_URLS is set in the daemon's environment, debug files found
 * nowhere locally are fetched by build ID from those servers (libdwfl dlopens Debian's
 * libdebuginfod.so.1), at the first lookup in the module, within the client's own limits
 * (DEBUGINFOD_TIMEOUT, _MAXTIME, _MAXSIZE). Only debug information is fetched, never an
 * executable, and only for the build IDs of files profiled processes map: any local user can
 * make the daemon ask the listed servers for any build ID, and the answer is used as that
 * file's DWARF, so list only servers you trust. Files are cached in DEBUGINFOD_CACHE_PATH,
 * else $XDG_CACHE_HOME/debuginfod_client, else $HOME/.cache/debuginfod_client (for a root
 * daemon without those set: /root/.cache/debuginfod_client). Unset or empty, nothing is
 * fetched and no cache is read.
 *
 * Threads: the cache of files and the reference counts are under one global mutex; a
 * symfile's Dwfl under its own (symfile.h).
 *
 * Left to others: reading /proc/PID/maps and opening the mapped files (procmaps.c); the
 * lookups (symbolize.c).
 */
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symfile.h"

/* The largest debug file copied out of a place others can write to. */
#define SYMFILE_COPY_MAX ((off_t)1 << 30)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct symfile *g_files;
static pthread_once_t g_elf_once = PTHREAD_ONCE_INIT;

static void symfile_elf_init(void)
{
	elf_version(EV_CURRENT);
}

/* ---- The file as the process maps it ------------------------------------------------ */

/* A pread-based libelf handle on a dup of fd, put in *dfd (-1 when none); NULL when fd
 * holds no ELF file. */
static Elf *symfile_elf_begin(int fd, int *dfd)
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

static void symfile_elf_end(Elf *elf, int dfd)
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
static bool symfile_strings_ok(Elf *elf, bool check, bool *has_dwarf)
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
static bool symfile_fd_strings_ok(int fd)
{
	int dfd = -1;
	Elf *elf = fd >= 0 ? symfile_elf_begin(fd, &dfd) : NULL;
	bool has, ok = elf && symfile_strings_ok(elf, true, &has);
	symfile_elf_end(elf, dfd);
	return ok;
}

bool symfile_dwarf_ok(const struct symfile *f)
{
	return symfile_fd_strings_ok(f->fd);
}

/* PT_LOAD segments, the module's address range and what the file itself carries. */
static int symfile_read_elf(struct symfile *f)
{
	int dfd;
	Elf *elf = symfile_elf_begin(f->fd, &dfd);
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
		f->segs[f->nsegs++] = (struct symfile_seg){ ph.p_offset, ph.p_vaddr, ph.p_filesz };
		if (ph.p_vaddr + ph.p_memsz > f->high && ph.p_vaddr + ph.p_memsz >= ph.p_vaddr)
			f->high = ph.p_vaddr + ph.p_memsz;
	}
	err = f->nsegs && f->low < f->high ? 0 : -ENOEXEC;
	symfile_strings_ok(elf, false, &f->main_has_dwarf);
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) && (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) &&
		    sh.sh_entsize && sh.sh_size / sh.sh_entsize > 1)
			f->main_has_syms = true;
	}
out:
	symfile_elf_end(elf, dfd);
	return err;
}

/* libdwfl's find_elf: a fresh pread-based handle on our descriptor (libdwfl ends both). */
static int symfile_find_elf(Dwfl_Module *mod, void **userdata, const char *modname,
			    Dwarf_Addr base, char **file_name, Elf **elfp)
{
	(void)mod, (void)modname, (void)base;
	struct symfile *f = *userdata;
	int dfd;
	if (!(*elfp = symfile_elf_begin(f->fd, &dfd)))
		return -1;
	if (f->path && !*file_name)
		*file_name = strdup(f->path);
	return dfd;
}

/* ---- Separate debug files ----------------------------------------------------------- */

/*
 * Where libdwfl looks. The Dwfl of a file searches only places root keeps: its build ID
 * under /usr/lib/debug/.build-id, its .gnu_debuglink under /usr/lib/debug/DIR, then
 * debuginfod; libdwfl maps what it finds and parses it, so nothing in them may be hostile
 * or shrink. The debuglink beside the file and in its .debug/ (places its owner writes) is
 * looked for by a throwaway Dwfl that sees the file without its build ID, so libdwfl checks
 * candidates by the link's CRC (mapping each only while it computes it) and opens none of
 * them; what it finds is checked here before the file's Dwfl gets it (symfile_vet).
 */
static char *symfile_system_path = "/usr/lib/debug";
static char *symfile_beside_path = ":.debug";

static int symfile_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
				  Dwarf_Addr base, const char *file_name, const char *debuglink,
				  GElf_Word crc, char **debug_name);

/* The throwaway Dwfl's find_elf: the file with its GNU build ID notes renamed in our
 * in-memory copy of the note sections (never written back). */
static int symfile_find_elf_anonymous(Dwfl_Module *mod, void **userdata, const char *modname,
				      Dwarf_Addr base, char **file_name, Elf **elfp)
{
	int fd = symfile_find_elf(mod, userdata, modname, base, file_name, elfp);
	Elf_Scn *scn = NULL;
	while (fd >= 0 && (scn = elf_nextscn(*elfp, scn)) != NULL) {
		GElf_Shdr sh;
		Elf_Data *d = gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE
				      ? elf_getdata(scn, NULL) : NULL;
		size_t off = 0, next, name_off, desc_off;
		GElf_Nhdr nh;
		while (d && (next = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			if (nh.n_type == NT_GNU_BUILD_ID)
				((Elf32_Nhdr *)((char *)d->d_buf + off))->n_type = ~(Elf32_Word)0;
			off = next;
		}
	}
	return fd;
}

static const Dwfl_Callbacks symfile_callbacks = {
	.find_elf = symfile_find_elf,
	.find_debuginfo = symfile_find_debuginfo,
	.debuginfo_path = &symfile_system_path,
};
static const Dwfl_Callbacks symfile_beside_callbacks = {
	.find_elf = symfile_find_elf_anonymous,
	.find_debuginfo = dwfl_standard_find_debuginfo,
	.debuginfo_path = &symfile_beside_path,
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
static bool symfile_is_ours(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	       (st.st_uid == 0 || st.st_uid == geteuid()) && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

/* A sealed in-memory copy of fd's file (closes fd), or -1. */
static int symfile_private_copy(int fd)
{
	struct stat st;
	int mfd = -1;
	if (fstat(fd, &st) == 0 && st.st_size > 0 && st.st_size <= SYMFILE_COPY_MAX)
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

/* A debug file found beside the file, made safe to map and parse: copied unless nobody else
 * can change it, refused when its DWARF strings are unterminated. Closes fd on failure. */
static int symfile_vet(int fd)
{
	if (fd >= 0 && !symfile_is_ours(fd))
		fd = symfile_private_copy(fd);
	if (fd >= 0 && !symfile_fd_strings_ok(fd)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/*
 * libdwfl's find_debuginfo for f's module: the debuglink beside the file (when it has one
 * with a CRC), else the system's places and debuginfod. libdwfl asks again only once the
 * debug file is open, for its DWARF alternate file (dwz), looked for in the system's places.
 */
static int symfile_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
				  Dwarf_Addr base, const char *file_name, const char *debuglink,
				  GElf_Word crc, char **debug_name)
{
	struct symfile *f = *userdata;
	if (f->debug == SYMFILE_DEBUG_NONE)
		return -1; /* looked for already, and nothing was found */
	int fd = -1;
	if (f->debug == SYMFILE_DEBUG_UNSEARCHED && debuglink && crc && file_name) {
		Dwfl_Module *pmod;
		Dwfl *probe = symfile_dwfl(f, &symfile_beside_callbacks, &pmod);
		Dwarf_Addr bias;
		if (probe && dwfl_module_getelf(pmod, &bias))
			fd = symfile_vet(dwfl_standard_find_debuginfo(pmod, userdata, modname, base,
								      file_name, debuglink, crc,
								      debug_name));
		if (probe)
			dwfl_end(probe);
	}
	if (fd < 0)
		fd = dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name,
						  debuglink, crc, debug_name);
	if (f->debug == SYMFILE_DEBUG_UNSEARCHED)
		f->debug = fd >= 0 ? SYMFILE_DEBUG_FOUND : SYMFILE_DEBUG_NONE;
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
	symbolize_forget(f);
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

/* ---- For the unwinder ----------------------------------------------------------------- */

void *symfile_debug_frame(struct symfile *f, size_t *size, bool *compressed)
{
	*size = 0;
	*compressed = false;
	if (f->main_has_dwarf)
		return NULL; /* its CFI is its own, read by the unwinder from the file itself */
	void *copy = NULL;
	pthread_mutex_lock(&f->lock);
	/* the same lookup symbolize.c's first DWARF lookup makes; libdwfl keeps the answer */
	Dwarf_Addr bias = 0;
	Dwarf *dw = dwfl_module_getdwarf(f->mod, &bias);
	Elf *elf = dw && bias == 0 ? dwarf_getelf(dw) : NULL;
	size_t shstrndx;
	Elf_Scn *scn = NULL;
	while (elf && elf_getshdrstrndx(elf, &shstrndx) == 0 &&
	       (scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		const char *name = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstrndx, sh.sh_name)
							  : NULL;
		if (!name || strcmp(name, ".debug_frame") != 0 || sh.sh_type == SHT_NOBITS)
			continue;
		Elf_Data *d = elf_rawdata(scn, NULL);
		if (d && d->d_buf && d->d_size && (copy = malloc(d->d_size))) {
			memcpy(copy, d->d_buf, d->d_size);
			*size = d->d_size;
			*compressed = sh.sh_flags & SHF_COMPRESSED;
		}
		break;
	}
	pthread_mutex_unlock(&f->lock);
	return copy;
}

const char *symfile_key_of(const struct symfile *f)
{
	return f->key;
}

int symfile_dup_fd(const struct symfile *f)
{
	return f->fd >= 0 ? fcntl(f->fd, F_DUPFD_CLOEXEC, 3) : -1;
}
