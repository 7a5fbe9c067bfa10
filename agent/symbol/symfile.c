// SPDX-License-Identifier: MIT
/*
 * symfile.c: the ELF files the symbolizer reads, each opened once per uid, and the separate
 * debug files found for them. The daemon parses none of them: the symbolizer process of the
 * file's uid does (symhelper.c starts it, symbolizer/ is its code); what is kept here is what
 * needs the daemon's privileges, the descriptors and the search.
 *
 * symfile_get() finds a file in a global cache keyed by the uid and the file itself (device,
 * inode, size, mtime; with its GNU build ID, or its path when it has none), so a thousand
 * processes of one user running one binary cost one parse, a copy carrying someone else's
 * build ID never stands in for the real file, and one user's helper never answers for
 * another user's profiles.
 *
 * Debug files, looked for when the helper asks (libdwfl wants DWARF it lacks), in order:
 *   - the .gnu_debuglink beside the file and in its .debug/ (places its owner writes),
 *     accepted only with the link's CRC (computed here over the candidate's bytes);
 *   - the build ID under /usr/lib/debug/.build-id, then the .gnu_debuglink under
 *     /usr/lib/debug/DIR (places root keeps; CRC-checked too when the link has one);
 *   - debuginfod (libdebuginfod, called directly) when DEBUGINFOD_URLS is set in the daemon's
 *     environment, by build ID, within the client's own limits (DEBUGINFOD_TIMEOUT, _MAXTIME,
 *     _MAXSIZE). Only debug information is fetched, never an executable, and only for build
 *     IDs of files profiled processes map: any local user can make the daemon ask the listed
 *     servers for any build ID, and the answer is used as that file's DWARF, so list only
 *     servers you trust. Files are cached in DEBUGINFOD_CACHE_PATH, else
 *     $XDG_CACHE_HOME/debuginfod_client, else $HOME/.cache/debuginfod_client. Unset or
 *     empty, nothing is fetched and no cache is read.
 * A DWARF alternate file (dwz) is looked for by its build ID under /usr/lib/debug/.build-id,
 * or by its absolute name under /usr/lib/debug, then debuginfod.
 * What is found is handed to the helper as it is when nobody but root and us can change it
 * (owned by either, writable by neither group nor others), else as a sealed in-memory copy:
 * the helper maps it, and a file shrunk under a mapping faults. The name the helper asks for
 * is a path component (no '/'), checked here: it comes from the file. The daemon itself maps
 * none of these files (nor the process's own): what the unwinder needs of them is read with
 * pread (symfile_debug_frame).
 *
 * Threads: the cache of files and the reference counts are under one global mutex; a
 * symfile's answers under its own (symfile.h); its helper state under the helper's.
 *
 * Left to others: reading /proc/PID/maps and opening the mapped files (procmaps.c); the
 * helper process (symhelper.c); answers (symbolize.c).
 */
#include <elfutils/debuginfod.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* memfd_create */
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "../unwind/filecopy.h"
#include "symfile.h"

/* The largest debug file copied out of a place others can write to, or checked by CRC. */
#define SYMFILE_COPY_MAX ((off_t)1 << 30)
#define SYMFILE_SYSTEM_DIR "/usr/lib/debug"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct symfile *g_files;

/* ---- Separate debug files ----------------------------------------------------------- */

/* Nobody but root and us can change fd's file under a mapping of it. */
static bool symfile_is_ours(const struct stat *st)
{
	return S_ISREG(st->st_mode) && (st->st_uid == 0 || st->st_uid == geteuid()) &&
	       !(st->st_mode & (S_IWGRP | S_IWOTH));
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

/* The CRC-32 of .gnu_debuglink (zlib's polynomial) over fd's whole file. */
static bool symfile_crc_is(int fd, off_t size, uint32_t want)
{
	static const size_t chunk = 1 << 16;
	unsigned char *buf = size <= SYMFILE_COPY_MAX ? malloc(chunk) : NULL;
	uLong crc = crc32(0, Z_NULL, 0);
	off_t off = 0;
	while (buf && off < size) {
		ssize_t n = pread(fd, buf, chunk, off);
		if (n <= 0)
			break;
		crc = crc32(crc, buf, (uInt)n);
		off += n;
	}
	free(buf);
	return buf && off == size && (uint32_t)crc == want;
}

/*
 * path opened as a candidate debug file of f: a regular file that is not f itself, with the
 * CRC crc when not 0; handed over as it is when ours, else copied (copy), else refused.
 */
static int symfile_candidate(const struct symfile *f, const char *path, uint32_t crc, bool copy)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (st.st_dev == f->dev && st.st_ino == f->ino) || (crc && !symfile_crc_is(fd, st.st_size, crc))) {
		close(fd);
		return -1;
	}
	if (symfile_is_ours(&st))
		return fd;
	if (copy)
		return symfile_private_copy(fd);
	close(fd);
	return -1;
}

/* A .gnu_debuglink name: one path component. */
static bool symfile_link_ok(const char *name)
{
	size_t n = strnlen(name, 256);
	return n > 0 && n < 256 && !strchr(name, '/') && strcmp(name, ".") != 0 &&
	       strcmp(name, "..") != 0;
}

/* Lowercase hex of even length, 2 to 128 digits. */
static bool symfile_hex_ok(const char *id)
{
	size_t n = strspn(id, "0123456789abcdef");
	return n >= 2 && n <= 128 && n % 2 == 0 && id[n] == '\0';
}

static int symfile_by_build_id(const struct symfile *f, const char *id)
{
	char path[400];
	if (!symfile_hex_ok(id))
		return -1;
	snprintf(path, sizeof(path), SYMFILE_SYSTEM_DIR "/.build-id/%.2s/%s.debug", id, id + 2);
	return symfile_candidate(f, path, 0, false);
}

static int symfile_debuginfod(const char *id)
{
	const char *urls = getenv("DEBUGINFOD_URLS");
	if (!urls || !*urls || !symfile_hex_ok(id))
		return -1;
	debuginfod_client *c = debuginfod_begin();
	if (!c)
		return -1;
	int fd = debuginfod_find_debuginfo(c, (const unsigned char *)id, 0, NULL);
	debuginfod_end(c);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -1;
	}
	return symfile_is_ours(&st) ? fd : symfile_private_copy(fd);
}

/* The DWARF alternate file named in a debug file's .gnu_debugaltlink. */
static int symfile_find_alt(const struct symfile *f, const char *name, const char *id)
{
	int fd = symfile_by_build_id(f, id);
	if (fd < 0 && strncmp(name, SYMFILE_SYSTEM_DIR "/", sizeof(SYMFILE_SYSTEM_DIR)) == 0 &&
	    !strstr(name, "/../") && strnlen(name, 4096) < 4096)
		fd = symfile_candidate(f, name, 0, false);
	return fd >= 0 ? fd : symfile_debuginfod(id);
}

int symfile_find_debug(struct symfile *f, const char *name, uint32_t crc,
		       const char *alt_build_id)
{
	if (alt_build_id)
		return symfile_find_alt(f, name, alt_build_id);
	char path[8192];
	int fd = -1;
	bool link = symfile_link_ok(name);
	const char *slash = f->path ? strrchr(f->path, '/') : NULL;
	int dirlen = slash ? (int)(slash - f->path) : -1;
	if (link && crc && dirlen >= 0) {
		snprintf(path, sizeof(path), "%.*s/%s", dirlen, f->path, name);
		fd = symfile_candidate(f, path, crc, true);
		if (fd < 0) {
			snprintf(path, sizeof(path), "%.*s/.debug/%s", dirlen, f->path, name);
			fd = symfile_candidate(f, path, crc, true);
		}
	}
	if (fd < 0 && f->build_id[0])
		fd = symfile_by_build_id(f, f->build_id);
	if (fd < 0 && link && dirlen >= 0) {
		snprintf(path, sizeof(path), SYMFILE_SYSTEM_DIR "%.*s/%s", dirlen, f->path, name);
		fd = symfile_candidate(f, path, crc, false);
	}
	if (fd < 0 && f->build_id[0])
		fd = symfile_debuginfod(f->build_id);
	if (fd >= 0 && f->debug_fd < 0)
		f->debug_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	return fd;
}

/* ---- Construction and the global cache ---------------------------------------------- */

static void symfile_destroy(struct symfile *f)
{
	if (!f)
		return;
	symhelper_forget(f);
	if (f->fd >= 0)
		close(f->fd);
	if (f->debug_fd >= 0)
		close(f->debug_fd);
	symbolize_forget(f);
	free(f->path);
	free(f->key);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static char *symfile_key(const char *path, const struct stat *st, const char *build_id,
			 uid_t uid)
{
	char *key = NULL;
	/* Same build ID is not same file: anyone can make a file with a copied build ID and
	 * renamed symbols. Files are shared only when they are the same file (device, inode,
	 * size, mtime) and the same uid's helper reads them, so one user's file (or helper)
	 * never names another user's frames. */
	int n = asprintf(&key, "%u:%c:%s:%llx:%llx:%llx:%lld.%09ld:%s", (unsigned)uid,
			 build_id && *build_id ? 'b' : 'f', build_id ? build_id : "",
			 (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
			 (unsigned long long)st->st_size, (long long)st->st_mtim.tv_sec,
			 st->st_mtim.tv_nsec, build_id && *build_id ? "" : path ? path : "");
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

struct symfile *symfile_get(const char *path, int fd, const char *build_id, uid_t uid)
{
	int own = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0)
			  : (path ? open(path, O_RDONLY | O_CLOEXEC) : -1);
	struct stat st;
	char *key = NULL;
	struct symfile *f = NULL;
	if (own < 0)
		return NULL;
	if (fstat(own, &st) != 0 || !S_ISREG(st.st_mode) ||
	    !(key = symfile_key(path, &st, build_id, uid)))
		goto fail;
	pthread_mutex_lock(&g_lock);
	f = symfile_lookup_locked(key);
	if (!f && (f = calloc(1, sizeof(*f))) != NULL) {
		f->key = key;
		f->refs = 1;
		f->uid = uid;
		f->fd = own;
		f->debug_fd = -1;
		f->find_debug = symfile_find_debug;
		f->dev = st.st_dev;
		f->ino = st.st_ino;
		snprintf(f->build_id, sizeof(f->build_id), "%s", build_id ? build_id : "");
		pthread_mutex_init(&f->lock, NULL);
		if (path && path[0] == '/' && !(f->path = strdup(path))) {
			pthread_mutex_destroy(&f->lock);
			free(f);
			f = NULL;
		} else {
			f->next = g_files;
			g_files = f;
			own = -1;
			key = NULL;
		}
	}
	pthread_mutex_unlock(&g_lock);
fail:
	if (own >= 0)
		close(own);
	free(key);
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

/* cfi_reader over a descriptor (arg: the int). The file is read, never mapped: f->fd is the
 * user's own file, and a mapping of it faults (SIGBUS) once its owner truncates it. */
static bool symfile_read(const void *arg, uint64_t off, void *buf, size_t n)
{
	return filecopy_pread(*(const int *)arg, off, buf, n);
}

/* Section name of fd's file (at most max bytes as stored) into a malloc'd copy, or NULL. */
static unsigned char *symfile_section(int fd, const char *name, size_t max, size_t *len)
{
	struct stat st;
	unsigned char *sec = NULL;
	uint64_t vaddr;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0)
		return NULL;
	const struct cfi_reader r = { symfile_read, &fd, (uint64_t)st.st_size };
	return cfi_elf_section_copy(&r, name, max, &sec, len, &vaddr) == 0 ? sec : NULL;
}

/*
 * The unwinder's CFI from f's separate debug file. The daemon parses nothing of it with
 * libelf or libdw: cfi.c's section reader (a few checked header reads, fuzzed) finds the
 * file's .gnu_debuglink (name and CRC), the debug file is the one the helper was given, or
 * is looked for now where symfile_find_debug looks (the link beside the file, by build ID,
 * debuginfod), and the same reader takes its .debug_frame, inflated.
 */
void *symfile_debug_frame(struct symfile *f, size_t *size, bool *compressed)
{
	*size = 0;
	*compressed = false;
	char name[256] = "";
	uint32_t crc = 0;
	size_t len = 0;
	unsigned char *sec = symfile_section(f->fd, ".gnu_debuglink", 4096, &len);
	if (sec) {
		/* the name, NUL-terminated, padded to 4 bytes, then the file's CRC-32 */
		size_t n = strnlen((const char *)sec, len);
		size_t at = (n + 4) & ~(size_t)3;
		if (n > 0 && n < sizeof(name) && at + 4 <= len) {
			memcpy(name, sec, n);
			name[n] = '\0';
			memcpy(&crc, sec + at, 4);
		}
		free(sec);
	}
	int dfd = symhelper_debug_fd(f, name[0] ? name : NULL, crc);
	sec = symfile_section(dfd, ".debug_frame", SIZE_MAX, &len);
	if (dfd >= 0)
		close(dfd);
	if (sec)
		*size = len;
	return sec;
}

const char *symfile_key_of(const struct symfile *f)
{
	return f->key;
}

int symfile_dup_fd(const struct symfile *f)
{
	return f->fd >= 0 ? fcntl(f->fd, F_DUPFD_CLOEXEC, 3) : -1;
}

int symfile_fd(const struct symfile *f)
{
	return f->fd;
}
