// SPDX-License-Identifier: MIT
/*
 * unwind.c: whole stacks for ALLOC_RAW records (shared/ring.h), unwound out of process with
 * libunwind's remote interface. A record carries the machine state at the program's
 * allocating call site (ip, sp, bp) and a copy of the stack above sp; this file gives
 * libunwind an address space whose accessors read
 *   - registers from the record (ip, sp, bp; any other register is "unknown"),
 *   - memory from the stack copy, or from the target's ELF files for addresses inside their
 *     mapped images (libunwind reads .eh_frame_hdr's search table, FDEs and CIEs, and the
 *     code at a pc to recognise signal trampolines, through access_mem),
 *   - unwind info by binary search of the file's .eh_frame_hdr table, through libunwind's
 *     own table search (_Ux86_64_dwarf_search_unwind_table, what its ptrace flavour's
 *     _UPT_find_proc_info calls; the _UPT_* accessors themselves read the live process
 *     with ptrace and re-read /proc/PID/maps, which the target, long moved on, cannot serve),
 *     and for a pc that table lacks, by the same search of the CFI cfi.c rewrites from the
 *     file's .debug_frame, its header-less .eh_frame or its separate debug file's
 *     .debug_frame, served by access_mem at a synthetic address (UW_SYNTH_BASE).
 * The target is never stopped or read.
 *
 * Most stacks never reach libunwind: unwind_fast.c walks them first with rows of the files'
 * .eh_frame cached per file, the same walk step for step, and hands a stack to the libunwind
 * loop below only when some frame needs more (a signal frame, an expression, CFI the table
 * lacks). LLGO_HEAP_UNWIND_FAST in the daemon's environment: "0" libunwind alone, "check"
 * both on every stack (differences logged and counted).
 *
 * Caches. Files are opened once per build ID (else device, inode, size and mtime) in a global
 * cache shared by every session (uwfile), with their PT_LOAD segments and .eh_frame_hdr table
 * located once, and the rewritten extra CFI built at its first need (uwfile_cfi). A file is
 * never mapped: its owner could truncate it under the mapping, and the next read past the new
 * end would kill the daemon with SIGBUS. What is read of it (the segments' pages that hold
 * .eh_frame_hdr, .eh_frame and what libunwind asks for) is copied with pread as it is first
 * read (filecopy.c), charged to the session's uid; the sections parsed once (.debug_frame,
 * a header-less .eh_frame, the section headers) are read into buffers that are freed after.
 * A session keeps its images (file + load
 * bias, sorted by address), rebuilt from the session's procmaps only when a pc falls outside
 * them, and one libunwind address space with its global caching policy, so the unwind rules
 * found for a pc are reused by every later sample (flushed when the images change).
 *
 * Limits, stated: a frame without CFI ends the stack (libunwind would guess from rbp and call
 * a zero rbp the end: neither is trusted). A stack that stops short of the thread's start for
 * any reason (an unwinding error, a frame without CFI, a read outside the copies, the frame
 * limit) is marked truncated; the caller appends a [truncated] frame.
 *
 * Auto mode (the second half of this file): which code keeps frame pointers, found once per
 * file from its CFI (cfi.c's scan of .eh_frame and of the file's own extra CFI: the daemon
 * runs no libdw on users' files), and the roots learned from whole stacks; both go to the
 * shim's control page through session.c (docs/design.md, "Unwinding modes").
 *
 * Threads: a struct unwind belongs to one session and is used under its drain lock; the file
 * cache has its own mutex.
 *
 * Size (over 1,000 lines, one file on purpose): the libunwind accessors, the file cache and
 * auto mode's classification all work on the same private structures (uwfile, uwimage,
 * struct unwind) under the same cache lock; splitting the file would publish them to the
 * rest of the daemon for no reader's gain.
 */
#include <elf.h>
#include <dwarf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libunwind.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../internal.h"
#include "../../common/log.h"
#include "../server/budget.h"
#include "filecopy.h"
#include "unwind_fast.h"

/* libunwind's table search, exported by libunwind-x86_64 but not declared in its headers
 * (libunwind-ptrace's _UPT_find_proc_info is its documented user). */
extern int _Ux86_64_dwarf_search_unwind_table(unw_addr_space_t as, unw_word_t ip,
					      unw_dyn_info_t *di, unw_proc_info_t *pi,
					      int need_unwind_info, void *arg);

#define UNWIND_MAX_SEGS 16u
/* A root is trusted once seen this many times with the same suffix, never if ever seen with
 * another. */
#define UNWIND_ROOT_MIN_SEEN 2u
#define UNWIND_MAX_ROOTS 64u
#define UNWIND_MAX_SUFFIX 16u
/* The most a file's copy holds (its unwind tables and what libunwind reads of its segments;
 * the largest .eh_frame_hdr and .eh_frame seen on Debian together are a few MiB). */
#define UWFILE_MAX_COPY ((uint64_t)64 << 20)

struct uwrange {
	uint64_t lo, hi;
};

/* A return address at which a frame-pointer walk ends (the code below keeps no frame
 * pointers), with the frames that always follow it (auto mode). */
struct uwroot {
	uint64_t pc;
	uint32_t seen;
	bool ambiguous;
	uint32_t nsuffix;
	uint64_t suffix[UNWIND_MAX_SUFFIX];
};

struct uwseg {
	uint64_t vaddr, filesz, offset;
	bool exec;
};

struct uwfile {
	struct uwfile *next; /* cache chain, under uw_lock */
	unsigned long refs;  /* under uw_lock */
	char *key;
	/* The file's bytes as first read (filecopy.c), up to the end of its last PT_LOAD
	 * segment's file part; size: the file's size when opened. */
	struct filecopy copy;
	size_t size;
	struct uwseg segs[UNWIND_MAX_SEGS];
	uint32_t nsegs;
	uint64_t lo, hi; /* ELF vaddr range of the PT_LOAD segments */
	/* .eh_frame_hdr: its vaddr, the search table's vaddr and its entry count */
	uint64_t hdr_vaddr, table_vaddr, fde_count;
	bool has_table;
	/* Frame-pointer code (auto mode), ELF vaddrs, found once under uw_lock */
	bool fp_done;
	struct uwrange *fp;
	size_t nfp;
	uint64_t fp_funcs, funcs; /* functions whose CFA is rbp-based mid-body; all sampled */
	/* CFI beyond .eh_frame_hdr (cfi.c): built at the first pc that table lacks, or when
	 * auto mode classifies the file, under cfi_lock; readers check cfi_done (acquire, paired
	 * with the release that publishes cfi). sym: the symbolizer's file, whose descriptor
	 * the copy reads and by which the separate debug file is found (held for f's life; NULL
	 * for unwind_image_stack's file, copied whole). */
	pthread_mutex_t cfi_lock;
	atomic_bool cfi_done;
	struct cfi_table cfi;
	size_t cfi_charged; /* of cfi, bytes charged to the copy's budget */
	struct symfile *sym;
	struct uwfast_file fast; /* unwind_fast.c's rows, set up with the segments */
};

static pthread_mutex_t uw_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uwfile *uw_files;

/* A file mapped into the target at bias (process address = ELF vaddr + bias). */
struct uwimage {
	uint64_t lo, hi; /* process addresses of the image (its PT_LOAD range) */
	uint64_t bias;
	struct uwfile *f;
};

struct unwind {
	unw_addr_space_t as;
	enum unwind_fast fast;
	pid_t pid;
	struct budget *budget; /* the files' copies are charged to uid's (unwind_set_budget) */
	uid_t uid;
	uint64_t epoch; /* unwind_epoch: a new value at each change of the images or mode */
	struct uwimage *images; /* sorted by lo, disjoint */
	size_t nimages;
	uint64_t maps_seen; /* procmaps_version when images were built */
	struct unwind_stats stats;
	/* auto mode: frame-pointer code of the images (process addresses, sorted, merged) and
	 * the roots learned from whole unwound stacks; dirty when the shim's copy is stale */
	struct uwrange *fp, *fp_prio;
	size_t nfp;
	struct uwroot roots[UNWIND_MAX_ROOTS];
	size_t nroots;
	uint64_t roots_gen; /* unwind_roots_gen */
	bool tables_dirty;
	bool want_fp; /* auto mode: classify images as they are built */
};

static void unwind_build_fp(struct unwind *u);

/* What the accessors see during one unwind (the `arg` of libunwind's callbacks). */
struct uwctx {
	struct unwind *u;
	const struct llgo_raw_regs *regs;
	const unsigned char *stack;
	struct unwind_reads *log; /* NULL: not logged */
	struct procmaps *maps;
	bool outside; /* a stack read fell outside the copy */
	bool noinfo;  /* unwind info was asked for a pc no image covers or no FDE describes */
	bool unknown; /* ... and that pc lies in no image at all */
	const struct uwimage *last;
};

/* ---- files ------------------------------------------------------------------------------ */

static bool uw_within(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* File offset of vaddr's byte, or UINT64_MAX when no segment's file part holds it. */
static uint64_t uwfile_offset(const struct uwfile *f, uint64_t vaddr)
{
	for (uint32_t i = 0; i < f->nsegs; i++) {
		const struct uwseg *s = &f->segs[i];
		if (vaddr >= s->vaddr && vaddr - s->vaddr < s->filesz)
			return s->offset + (vaddr - s->vaddr);
	}
	return UINT64_MAX;
}

/* A DW_EH_PE-encoded value of .eh_frame_hdr at vaddr *at (advanced). Only the encodings
 * linkers emit there are accepted: udata4/sdata4/udata8/sdata8, absolute, pc- or
 * data-relative (relative to the header). */
static bool uwfile_read_enc(struct uwfile *f, uint8_t enc, uint64_t *at, uint64_t *out)
{
	if (enc == 0xff)
		return false;
	uint64_t off = uwfile_offset(f, *at);
	uint64_t v = 0;
	size_t n;
	switch (enc & 0x0f) {
	case 0x03: /* udata4 */
	case 0x0b: /* sdata4 */
		n = 4;
		break;
	case 0x04: /* udata8 */
	case 0x0c: /* sdata8 */
		n = 8;
		break;
	default:
		return false;
	}
	const unsigned char *p = off == UINT64_MAX ? NULL : filecopy_at(&f->copy, off, n);
	if (!p)
		return false;
	if (n == 4) {
		uint32_t w;
		memcpy(&w, p, 4);
		v = (enc & 0x0f) == 0x0b ? (uint64_t)(int64_t)(int32_t)w : w;
	} else {
		memcpy(&v, p, 8);
	}
	switch (enc & 0x70) {
	case 0x00:
		break;
	case 0x10: /* pcrel */
		v += *at;
		break;
	case 0x30: /* datarel: relative to .eh_frame_hdr */
		v += f->hdr_vaddr;
		break;
	default:
		return false;
	}
	*at += n;
	*out = v;
	return true;
}

/* The ELF header and the program headers, read through r: the PT_LOAD segments (f->segs, lo,
 * hi), where .eh_frame_hdr is (*hdr_vaddr, *hdr_size) and where the last segment's file part
 * ends (*end). */
static int uwfile_parse_phdrs(struct uwfile *f, const struct cfi_reader *r, uint64_t *hdr_vaddr,
			      uint64_t *hdr_size, uint64_t *end)
{
	Elf64_Ehdr eh;
	if (f->size < sizeof(eh) || !r->read(r->arg, 0, &eh, sizeof(eh)))
		return -ENOEXEC;
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_machine != EM_X86_64 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    !uw_within(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), f->size))
		return -ENOEXEC;
	*hdr_vaddr = *hdr_size = *end = 0;
	f->lo = UINT64_MAX;
	Elf64_Phdr batch[32];
	for (uint32_t i = 0; i < eh.e_phnum; i++) {
		if (i % 32 == 0) {
			uint32_t n = eh.e_phnum - i < 32 ? eh.e_phnum - i : 32;
			if (!r->read(r->arg, eh.e_phoff + (uint64_t)i * sizeof(Elf64_Phdr), batch,
				     n * sizeof(Elf64_Phdr)))
				return -ENOEXEC;
		}
		const Elf64_Phdr *ph = &batch[i % 32];
		if (ph->p_type == PT_GNU_EH_FRAME) {
			*hdr_vaddr = ph->p_vaddr;
			*hdr_size = ph->p_filesz;
		}
		if (ph->p_type != PT_LOAD || f->nsegs >= UNWIND_MAX_SEGS)
			continue;
		if (!uw_within(ph->p_offset, ph->p_filesz, f->size) ||
		    ph->p_vaddr + ph->p_memsz < ph->p_vaddr)
			return -ENOEXEC;
		struct uwseg *s = &f->segs[f->nsegs++];
		s->vaddr = ph->p_vaddr;
		s->filesz = ph->p_filesz;
		s->offset = ph->p_offset;
		s->exec = ph->p_flags & PF_X;
		if (ph->p_vaddr < f->lo)
			f->lo = ph->p_vaddr;
		if (ph->p_vaddr + ph->p_memsz > f->hi)
			f->hi = ph->p_vaddr + ph->p_memsz;
		if (ph->p_offset + ph->p_filesz > *end)
			*end = ph->p_offset + ph->p_filesz;
	}
	return f->nsegs ? 0 : -ENOEXEC;
}

/* .eh_frame_hdr: version 1, then the encodings of eh_frame_ptr, fde_count and the table;
 * libunwind's remote search needs a datarel sdata4 table. Without one, f has no table. */
static void uwfile_parse_hdr(struct uwfile *f, uint64_t hdr_vaddr, uint64_t hdr_size)
{
	uint64_t off = hdr_size >= 4 ? uwfile_offset(f, hdr_vaddr) : UINT64_MAX;
	const unsigned char *p = off == UINT64_MAX ? NULL : filecopy_at(&f->copy, off, 4);
	if (!p)
		return;
	unsigned char h[4];
	memcpy(h, p, 4);
	f->hdr_vaddr = hdr_vaddr;
	uint64_t at = hdr_vaddr + 4, eh_frame, count;
	if (h[0] != 1 || h[3] != 0x3b || !uwfile_read_enc(f, h[1], &at, &eh_frame) ||
	    !uwfile_read_enc(f, h[2], &at, &count))
		return;
	uint64_t toff = uwfile_offset(f, at);
	if (toff == UINT64_MAX || count == 0 || count > (1u << 28) ||
	    !uw_within(toff, count * 8, f->size))
		return;
	f->table_vaddr = at;
	f->fde_count = count;
	f->has_table = true;
}

/* The ELF headers read through r; the copy of the file up to the end of its segments' file
 * parts (from fd, charged to uid's budget b; fd < 0: f's copy is whole already); then
 * .eh_frame_hdr and the fast path's view of the same segments and table. */
static int uwfile_parse(struct uwfile *f, const struct cfi_reader *r, int fd, struct budget *b,
			uid_t uid)
{
	uint64_t hdr_vaddr, hdr_size, end;
	int rc = uwfile_parse_phdrs(f, r, &hdr_vaddr, &hdr_size, &end);
	if (rc != 0)
		return rc;
	/* libunwind reads 8-byte words: one starting in a segment may end 7 bytes past it */
	uint64_t span = end + 8 < f->size ? end + 8 : f->size;
	if (fd >= 0 && (rc = filecopy_init(&f->copy, fd, span, UWFILE_MAX_COPY, b, uid)) != 0)
		return rc;
	uwfile_parse_hdr(f, hdr_vaddr, hdr_size);
	struct cfi_seg segs[UNWIND_MAX_SEGS];
	for (uint32_t i = 0; i < f->nsegs; i++)
		segs[i] = (struct cfi_seg){ f->segs[i].vaddr, f->segs[i].offset, f->segs[i].filesz };
	uwfast_file_init(&f->fast, NULL, f->size, &f->copy, segs, f->nsegs, f->lo, f->hi,
			 f->hdr_vaddr, f->table_vaddr, f->has_table ? f->fde_count : 0);
	return 0;
}

/* cfi_reader over f's file: its bytes now (filecopy_read), not kept. */
static bool uwfile_read(const void *arg, uint64_t off, void *buf, size_t n)
{
	return filecopy_read(arg, off, buf, n);
}

static struct cfi_reader uwfile_reader(const struct uwfile *f)
{
	return (struct cfi_reader){ uwfile_read, &f->copy, f->size };
}

/* cfi_reader over a descriptor (arg: the int), before the copy exists. */
static bool uwfile_read_fd(const void *arg, uint64_t off, void *buf, size_t n)
{
	return filecopy_pread(*(const int *)arg, off, buf, n);
}

/* What f's extra CFI holds. */
static size_t uwfile_cfi_bytes(const struct uwfile *f)
{
	return f->cfi.size + f->cfi.count * sizeof(*f->cfi.entries);
}

static void uwfile_destroy(struct uwfile *f)
{
	if (!f)
		return;
	uwfast_file_release(&f->fast);
	budget_give(f->copy.budget, f->copy.uid, BUDGET_UNWIND_BYTES, f->cfi_charged);
	cfi_table_free(&f->cfi);
	filecopy_destroy(&f->copy);
	symfile_put(f->sym);
	pthread_mutex_destroy(&f->cfi_lock);
	free(f->fp);
	free(f->key);
	free(f);
}

/* A new file of the cache, not yet published. */
static struct uwfile *uwfile_new(const char *key, size_t size)
{
	struct uwfile *f = calloc(1, sizeof(*f));
	if (!f || !(f->key = strdup(key ? key : ""))) {
		free(f);
		return NULL;
	}
	f->refs = 1;
	f->size = size;
	f->copy.fd = -1;
	pthread_mutex_init(&f->cfi_lock, NULL);
	return f;
}

static struct uwfile *uwfile_lookup_locked(const char *key)
{
	for (struct uwfile *f = uw_files; f; f = f->next) {
		if (strcmp(f->key, key) == 0) {
			f->refs++;
			return f;
		}
	}
	return NULL;
}

/*
 * The file behind m, as procmaps opened it for the symbolizer (symfile): the inode the
 * process maps, never a path looked up in the daemon's namespace. Cached under the
 * symfile's key (build ID and file identity), not the build ID alone: a user's file that
 * copies another program's build ID must not give that program's processes its CFI. Its
 * copy reads the symfile's descriptor and is charged to u's budget.
 */
static struct uwfile *uwfile_get(const struct unwind *u, const struct mapping *m)
{
	if (!m->file)
		return NULL; /* procmaps could not open it: no CFI to read */
	char key[512];
	struct uwfile *f;
	snprintf(key, sizeof(key), "s:%s", symfile_key_of(m->file));
	pthread_mutex_lock(&uw_lock);
	f = uwfile_lookup_locked(key);
	pthread_mutex_unlock(&uw_lock);
	if (f)
		return f;
	int fd = symfile_fd(m->file);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    !(f = uwfile_new(key, (size_t)st.st_size)))
		return NULL;
	f->sym = symfile_ref(m->file);
	const struct cfi_reader r = { uwfile_read_fd, &fd, f->size };
	if (uwfile_parse(f, &r, fd, u->budget, u->uid) != 0) {
		uwfile_destroy(f);
		return NULL;
	}
	pthread_mutex_lock(&uw_lock);
	struct uwfile *other = uwfile_lookup_locked(key);
	if (!other) {
		f->next = uw_files;
		uw_files = f;
	}
	pthread_mutex_unlock(&uw_lock);
	if (other) {
		uwfile_destroy(f);
		return other;
	}
	return f;
}

static void uwfile_put(struct uwfile *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&uw_lock);
	bool last = --f->refs == 0;
	if (last) {
		for (struct uwfile **pp = &uw_files; *pp; pp = &(*pp)->next) {
			if (*pp == f) {
				*pp = f->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&uw_lock);
	if (last)
		uwfile_destroy(f);
}

/* f's executable segments as ELF address ranges (where cfi.c accepts FDEs); their count. */
static size_t uwfile_code_ranges(const struct uwfile *f, struct cfi_range code[UNWIND_MAX_SEGS])
{
	size_t n = 0;
	for (uint32_t i = 0; i < f->nsegs; i++)
		if (f->segs[i].exec)
			code[n++] = (struct cfi_range){ f->segs[i].vaddr,
							 f->segs[i].vaddr + f->segs[i].filesz };
	return n;
}

/* The CFI f's .eh_frame_hdr does not index, from the first source that has some: the file's
 * own .debug_frame; its .eh_frame when it has no usable .eh_frame_hdr; the .debug_frame of
 * its separate debug file (found as the symbolizer finds it). */
static void uwfile_build_cfi(struct uwfile *f)
{
	struct cfi_range code[UNWIND_MAX_SEGS];
	size_t ncode = uwfile_code_ranges(f, code);
	const struct cfi_reader r = uwfile_reader(f);
	unsigned char *sec;
	size_t len;
	uint64_t vaddr;
	bool own = cfi_elf_section_copy(&r, ".debug_frame", SIZE_MAX, &sec, &len, &vaddr) == 0;
	if (own)
		cfi_build(&f->cfi, sec, len, false, 0, code, ncode, f->lo);
	free(sec);
	if (!f->cfi.count && !f->has_table &&
	    cfi_elf_section_copy(&r, ".eh_frame", SIZE_MAX, &sec, &len, &vaddr) == 0) {
		cfi_build(&f->cfi, sec, len, true, vaddr, code, ncode, f->lo);
		free(sec);
	}
	if (!f->cfi.count && !own && f->sym) {
		bool compressed;
		void *owned = NULL, *raw = symfile_debug_frame(f->sym, &len, &compressed);
		const unsigned char *p = raw;
		if (raw && (!compressed || cfi_inflate(raw, len, &p, &len, &owned) == 0))
			cfi_build(&f->cfi, p, len, false, 0, code, ncode, f->lo);
		free(owned);
		free(raw);
	}
	/* the rewrite is the uid's unwind memory too: over its budget, f has none */
	size_t bytes = uwfile_cfi_bytes(f);
	if (bytes && budget_take(f->copy.budget, f->copy.uid, BUDGET_UNWIND_BYTES, bytes) != 0)
		cfi_table_free(&f->cfi);
	else
		f->cfi_charged = bytes;
}

/* f's extra CFI (uwfile_build_cfi), built at the first call; NULL when it has none. */
static const struct cfi_table *uwfile_cfi(struct uwfile *f)
{
	if (!atomic_load_explicit(&f->cfi_done, memory_order_acquire)) {
		pthread_mutex_lock(&f->cfi_lock);
		if (!atomic_load_explicit(&f->cfi_done, memory_order_relaxed)) {
			uwfile_build_cfi(f);
			atomic_store_explicit(&f->cfi_done, true, memory_order_release);
		}
		pthread_mutex_unlock(&f->cfi_lock);
	}
	return f->cfi.count ? &f->cfi : NULL;
}

void unwind_cache_stats(uint64_t *files, uint64_t *bytes)
{
	*files = *bytes = 0;
	pthread_mutex_lock(&uw_lock);
	for (struct uwfile *f = uw_files; f; f = f->next) {
		(*files)++;
		*bytes += sizeof(*f) + strlen(f->key) + 1 + uwfast_file_bytes(&f->fast);
		*bytes += filecopy_held(&f->copy);
		if (atomic_load_explicit(&f->cfi_done, memory_order_acquire))
			*bytes += uwfile_cfi_bytes(f);
	}
	pthread_mutex_unlock(&uw_lock);
}

/* ---- images of a session ---------------------------------------------------------------- */

static void unwind_drop_images(struct unwind *u)
{
	for (size_t i = 0; i < u->nimages; i++)
		uwfile_put(u->images[i].f);
	free(u->images);
	u->images = NULL;
	u->nimages = 0;
}

static int uwimage_cmp(const void *a, const void *b)
{
	const struct uwimage *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* (Re)build the images from the executable mappings procmaps knows. */
static _Atomic uint64_t uw_epochs;

static uint64_t uw_next_epoch(void)
{
	return atomic_fetch_add_explicit(&uw_epochs, 1, memory_order_relaxed) + 1;
}

void unwind_count_memo(struct unwind *u, bool checked, bool differ)
{
	static atomic_uint logged;
	if (!u)
		return;
	u->stats.memo_hits++;
	u->stats.memo_checked += checked;
	u->stats.memo_mismatches += differ;
	if (differ && atomic_fetch_add_explicit(&logged, 1, memory_order_relaxed) < 20)
		log_warn("unwind: pid %d: a stack copy unwound to another stack than the memo's",
			 (int)u->pid);
}

uint64_t unwind_epoch(const struct unwind *u)
{
	return u ? u->epoch : 0;
}

static void unwind_build_images(struct unwind *u, struct procmaps *maps)
{
	const struct mapping **v;
	size_t n = procmaps_list(maps, &v);
	uint64_t version = procmaps_version(maps);
	if (version == u->maps_seen && u->images)
		return;
	struct uwimage *imgs = calloc(n ? n : 1, sizeof(*imgs));
	if (!imgs)
		return;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		const struct mapping *m = v[i];
		if (!m->path || m->path[0] != '/')
			continue;
		/* Another mapping of an image already placed. */
		bool dup = false;
		for (size_t j = 0; j < k && !dup; j++)
			dup = m->start >= imgs[j].lo && m->start < imgs[j].hi;
		if (dup)
			continue;
		struct uwfile *f = uwfile_get(u, m);
		if (!f)
			continue;
		/* bias from the segment whose file range holds the mapping's offset */
		const struct uwseg *s = NULL;
		for (uint32_t j = 0; j < f->nsegs; j++) {
			uint64_t pgoff = f->segs[j].offset & ~(uint64_t)4095;
			if (m->offset >= pgoff && m->offset < f->segs[j].offset + f->segs[j].filesz &&
			    (!s || f->segs[j].exec))
				s = &f->segs[j];
		}
		if (!s) {
			uwfile_put(f);
			continue;
		}
		uint64_t bias = m->start - m->offset + s->offset - s->vaddr;
		imgs[k].lo = f->lo + bias;
		imgs[k].hi = f->hi + bias;
		imgs[k].bias = bias;
		imgs[k].f = f;
		k++;
	}
	qsort(imgs, k, sizeof(*imgs), uwimage_cmp);
	/* Overlaps (a stale mapping and its replacement): keep the later-starting one. */
	size_t w = 0;
	for (size_t i = 0; i < k; i++) {
		if (w && imgs[i].lo < imgs[w - 1].hi) {
			uwfile_put(imgs[w - 1].f);
			imgs[w - 1] = imgs[i];
			continue;
		}
		imgs[w++] = imgs[i];
	}
	unwind_drop_images(u);
	u->images = imgs;
	u->nimages = w;
	u->epoch = uw_next_epoch();
	u->maps_seen = version;
	unw_flush_cache(u->as, 0, 0);
	u->stats.image_builds++;
	if (u->want_fp)
		unwind_build_fp(u);
}

static const struct uwimage *unwind_image(struct uwctx *c, uint64_t addr)
{
	if (c->last && addr >= c->last->lo && addr < c->last->hi)
		return c->last;
	struct unwind *u = c->u;
	size_t lo = 0, hi = u->nimages;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (addr < u->images[mid].lo)
			hi = mid;
		else if (addr >= u->images[mid].hi)
			lo = mid + 1;
		else
			return c->last = &u->images[mid];
	}
	return NULL;
}

/* ---- libunwind accessors ---------------------------------------------------------------- */

/* The synthetic address at which image i's extra CFI (uwfile_cfi) is served: above every
 * user-space address, 2^40 bytes per image. */
#define UW_SYNTH_BASE (UINT64_C(1) << 63)
#define UW_SYNTH_SHIFT 40

static int uw_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
			 void *arg);

/* libunwind's struct dwarf_cie_info (its include/dwarf.h, the same from 1.3 to 1.8): what its
 * table search leaves in unw_proc_info_t.unwind_info for dwarf_step to run. Only read; its
 * size is checked against unwind_info_size. */
struct uw_cie_info {
	unw_word_t cie_instr_start, cie_instr_end; /* the CIE's initial instructions */
	unw_word_t fde_instr_start, fde_instr_end; /* the FDE's instructions */
	unw_word_t code_align, data_align, ret_addr_column, handler;
	uint16_t abi, tag;
	uint8_t fde_encoding, lsda_encoding;
	unsigned int sized_augmentation : 1;
	unsigned int have_abi_marker : 1;
	unsigned int signal_frame : 1;
};

/* The program [start, end) libunwind will run, read as its dwarf_readu8 reads it (the aligned
 * word holding each byte, through access_mem), checked by cfi_check_program up to loc_end. */
static bool uw_program_ok(struct uwctx *c, unw_word_t start, unw_word_t end, uint64_t loc,
			  uint64_t loc_end, const struct uw_cie_info *d)
{
	if (end <= start)
		return true; /* run_cfi_program runs nothing */
	if (end - start > CFI_CHECK_MAX_PROGRAM)
		return false;
	size_t n = (size_t)(end - start);
	unsigned char small[4096];
	unsigned char *p = n <= sizeof(small) ? small : malloc(n);
	if (!p)
		return false;
	unw_word_t word = 0, at = 1; /* at: the word read, 1 (unaligned) before the first */
	bool ok = true;
	for (size_t i = 0; i < n && ok; i++) {
		unw_word_t a = start + i, w = a & ~(unw_word_t)7;
		if (w != at) {
			ok = uw_access_mem(NULL, w, &word, 0, c) == 0;
			at = w;
		}
		p[i] = (unsigned char)(word >> (8 * (a - w)));
	}
	ok = ok && cfi_check_program(p, n, loc, loc_end, d->code_align, d->fde_encoding);
	if (p != small)
		free(p);
	return ok;
}

/*
 * Whether the FDE libunwind's search put in pi is one libunwind can run safely for the pc ip
 * (cfi.c's cfi_check_program says which are not): its CIE's return-address column and
 * initial instructions, and its own instructions as far as libunwind runs them for ip (from
 * the FDE's start up to ip, the address it looks up, which is also where its step stops).
 * Checked at each search, for the .eh_frame_hdr table and cfi.c's rewritten CFI alike:
 * libunwind caches only the rules of an FDE found here.
 */
static bool uw_fde_ok(struct uwctx *c, const unw_proc_info_t *pi, unw_word_t ip)
{
	if (pi->format != UNW_INFO_FORMAT_TABLE || !pi->unwind_info ||
	    pi->unwind_info_size != (int)sizeof(struct uw_cie_info))
		return false;
	struct uw_cie_info d;
	memcpy(&d, pi->unwind_info, sizeof(d));
	return d.ret_addr_column < CFI_NREGS &&
	       uw_program_ok(c, d.cie_instr_start, d.cie_instr_end, 0, UINT64_MAX, &d) &&
	       uw_program_ok(c, d.fde_instr_start, d.fde_instr_end, pi->start_ip, ip, &d);
}

/* A search's result, handed to libunwind only when uw_fde_ok: else the frame has no unwind
 * info (the stack ends there, truncated), and pi's unwind_info is left for libunwind to free
 * (its put_unwind_info, called after every failed lookup). */
static int uw_checked(struct uwctx *c, unw_word_t ip, unw_proc_info_t *pi, int need_unwind_info)
{
	if (!need_unwind_info || uw_fde_ok(c, pi, ip))
		return 0;
	static atomic_uint logged;
	c->u->stats.cfi_refused++;
	c->noinfo = true;
	if (atomic_fetch_add_explicit(&logged, 1, memory_order_relaxed) < 20)
		log_warn("unwind: pid %d: the CFI of pc %#" PRIx64 " is refused (a register, "
			 "expression or nesting libunwind would mishandle); its stacks end there",
			 (int)c->u->pid, (uint64_t)ip);
	return -UNW_ENOINFO;
}

static int uw_find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
			     int need_unwind_info, void *arg)
{
	struct uwctx *c = arg;
	const struct uwimage *im = unwind_image(c, ip);
	if (!im) {
		c->noinfo = c->unknown = true;
		return -UNW_ENOINFO;
	}
	unw_dyn_info_t di;
	int rc = -UNW_ENOINFO;
	if (im->f->has_table) {
		memset(&di, 0, sizeof(di));
		di.start_ip = im->lo;
		di.end_ip = im->hi;
		di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
		di.u.rti.segbase = im->f->hdr_vaddr + im->bias;
		di.u.rti.table_data = im->f->table_vaddr + im->bias;
		/* in words: each entry is two 32-bit values */
		di.u.rti.table_len = im->f->fde_count * 8 / sizeof(unw_word_t);
		c->u->stats.proc_lookups++;
		/* First without unwind info. A search whose FDE does not cover ip (a pc of code
		 * with only .debug_frame: the table finds the crt FDE below it) has already
		 * taken that FDE's unwind info from libunwind's pool when it says "no info".
		 * libunwind gives back what pi holds after every lookup, but the search below
		 * fills pi anew: that one was lost, 80 bytes per cache miss for good. */
		rc = _Ux86_64_dwarf_search_unwind_table(as, ip, &di, pi, 0, arg);
		if (rc >= 0 && need_unwind_info) {
			memset(pi, 0, sizeof(*pi));
			rc = _Ux86_64_dwarf_search_unwind_table(as, ip, &di, pi, 1, arg);
			/* the same bytes as the first search: a failure now returns pi as it is,
			 * for libunwind to give back */
			if (rc < 0)
				return rc;
		}
		if (rc >= 0)
			return uw_checked(c, ip, pi, need_unwind_info);
	}
	/* Not in .eh_frame_hdr's table (a program whose own code has only .debug_frame: the
	 * linker's table holds the crt files' FDEs): the file's extra CFI. Entry starts are
	 * offsets from the image's start, FDEs at the image's synthetic address, and their
	 * datarel initial locations ELF addresses, made process addresses by gp = bias. */
	const struct cfi_table *t = uwfile_cfi(im->f);
	if (!t) {
		c->noinfo = true;
		return rc;
	}
	uint64_t synth = UW_SYNTH_BASE + ((uint64_t)(im - c->u->images) << UW_SYNTH_SHIFT);
	memset(&di, 0, sizeof(di));
	di.start_ip = im->lo;
	di.end_ip = im->hi;
	di.format = UNW_INFO_FORMAT_IP_OFFSET;
	di.u.rti.segbase = synth;
	di.u.rti.table_data = synth + t->table_off;
	di.u.rti.table_len = t->count * 8 / sizeof(unw_word_t);
	memset(pi, 0, sizeof(*pi));
	pi->gp = im->bias;
	c->u->stats.proc_lookups++;
	rc = _Ux86_64_dwarf_search_unwind_table(as, ip, &di, pi, need_unwind_info, arg);
	if (rc < 0)
		c->noinfo = true;
	return rc < 0 ? rc : uw_checked(c, ip, pi, need_unwind_info);
}

/* A read of image i's extra CFI at its synthetic address. */
static int uw_synth_read(struct uwctx *c, uint64_t addr, unw_word_t *val)
{
	uint64_t i = (addr - UW_SYNTH_BASE) >> UW_SYNTH_SHIFT;
	uint64_t off = addr & ((UINT64_C(1) << UW_SYNTH_SHIFT) - 1);
	if (i >= c->u->nimages)
		return -UNW_EINVAL;
	struct uwfile *f = c->u->images[i].f;
	if (!atomic_load_explicit(&f->cfi_done, memory_order_acquire) || off >= f->cfi.size)
		return -UNW_EINVAL;
	*val = 0;
	memcpy(val, f->cfi.image + off, f->cfi.size - off < 8 ? f->cfi.size - off : 8);
	return 0;
}

static void uw_put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	/* libunwind frees table-format unwind info itself; nothing of ours to release */
}

static int uw_get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *dil, void *arg)
{
	return -UNW_ENOINFO;
}

/* Up to 8 bytes at addr of the image holding it (the rest of the word 0), as its file held
 * them when first read. Out of line: the stack copy's reads, most of them, stay short. */
static __attribute__((noinline)) bool uw_image_read(struct uwctx *c, uint64_t addr,
						    unw_word_t *val)
{
	const struct uwimage *im = unwind_image(c, addr);
	if (!im)
		return false;
	struct uwfile *f = im->f;
	uint64_t off = uwfile_offset(f, addr - im->bias);
	uint64_t n = off < f->copy.span ? f->copy.span - off : 0;
	n = n < 8 ? n : 8;
	const unsigned char *p = n ? filecopy_at(&f->copy, off, n) : NULL;
	if (!p)
		return false;
	*val = 0;
	memcpy(val, p, n);
	return true;
}

/*
 * The word at addr in the copy: the stack from regs->sp, or the interrupted thread's stack
 * under a sigaltstack handler (the second region); a word cut by a region's end is zero
 * filled. *at: its offset in the copy (UNWIND_READ_STACK2 for the second region).
 */
static bool uw_stack_word(const struct llgo_raw_regs *r, const unsigned char *stack,
			  uint64_t addr, uint32_t *at, uint64_t *val)
{
	uint64_t off, len;
	const unsigned char *base;
	if (addr >= r->sp && addr - r->sp < r->stack_len) {
		off = addr - r->sp;
		len = r->stack_len;
		base = stack;
		*at = (uint32_t)off;
	} else if (r->stack2_len && addr >= r->stack2_lo && addr - r->stack2_lo < r->stack2_len) {
		off = addr - r->stack2_lo;
		len = r->stack2_len;
		base = stack + r->stack_len;
		*at = (uint32_t)off | UNWIND_READ_STACK2;
	} else {
		return false;
	}
	*val = 0;
	memcpy(val, base + off, len - off < 8 ? len - off : 8);
	return true;
}

bool unwind_reads_match(const struct unwind_reads *log, const struct llgo_raw_regs *regs,
			const unsigned char *stack)
{
	for (uint32_t i = 0; i < log->n; i++) {
		uint32_t at, o = log->off[i];
		uint64_t addr = o & UNWIND_READ_STACK2 ? regs->stack2_lo + (o & ~UNWIND_READ_STACK2)
						      : regs->sp + o;
		uint64_t w;
		if (!uw_stack_word(regs, stack, addr, &at, &w) || at != o || w != log->val[i])
			return false;
	}
	return true;
}

static int uw_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
			 void *arg)
{
	struct uwctx *c = arg;
	if (write)
		return -UNW_EREADONLYREG;
	const struct llgo_raw_regs *r = c->regs;
	uint32_t at;
	uint64_t w;
	if (uw_stack_word(r, c->stack, addr, &at, &w)) {
		*val = w;
		if (c->log && c->log->n < UNWIND_READS_MAX) {
			c->log->off[c->log->n] = at;
			c->log->val[c->log->n++] = w;
		} else if (c->log) {
			c->log->overflow = true;
		}
		return 0;
	}
	if (addr >= UW_SYNTH_BASE)
		return uw_synth_read(c, addr, val);
	if (uw_image_read(c, addr, val))
		return 0;
	/* Inside the thread's stack but beyond the copy: the stack was capped. */
	if (addr >= r->sp && (!r->stack_hi || addr < r->stack_hi))
		c->outside = true;
	return -UNW_EINVAL;
}

static int uw_access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write,
			 void *arg)
{
	struct uwctx *c = arg;
	if (write)
		return -UNW_EREADONLYREG;
	switch (reg) {
	case UNW_X86_64_RIP:
		*val = c->regs->ip;
		return 0;
	case UNW_X86_64_RSP:
		*val = c->regs->sp;
		return 0;
	case UNW_X86_64_RBP:
		*val = c->regs->bp;
		return 0;
	default:
		return -UNW_EBADREG;
	}
}

static int uw_access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			   void *arg)
{
	return -UNW_EBADREG;
}

static int uw_resume(unw_addr_space_t as, unw_cursor_t *cur, void *arg)
{
	return -UNW_EINVAL;
}

static unw_accessors_t uw_accessors = {
	.find_proc_info = uw_find_proc_info,
	.put_unwind_info = uw_put_unwind_info,
	.get_dyn_info_list_addr = uw_get_dyn_info_list_addr,
	.access_mem = uw_access_mem,
	.access_reg = uw_access_reg,
	.access_fpreg = uw_access_fpreg,
	.resume = uw_resume,
	.get_proc_name = NULL,
};

/* ---- sessions --------------------------------------------------------------------------- */

/* libunwind initializes itself at the first cursor (unw_init_remote), writing a global (its
 * signal mask) before it takes its lock, at every call until the first is done: two
 * sessions drained at once for the first time raced there (ThreadSanitizer). Its first
 * cursor is made here, once, over an empty unwind and a zero register set. */
static pthread_once_t uw_once = PTHREAD_ONCE_INIT;
/* LLGO_HEAP_UNWIND_FAST in the daemon's environment: "0" libunwind alone, "check" both on
 * every stack (differences logged and counted, libunwind's result kept), else the fast path. */
static enum unwind_fast uw_fast_default = UNWIND_FAST_ON;

static void uw_init_once(void)
{
	const char *fast = getenv("LLGO_HEAP_UNWIND_FAST");
	if (fast && strcmp(fast, "0") == 0)
		uw_fast_default = UNWIND_FAST_OFF;
	else if (fast && strcmp(fast, "check") == 0)
		uw_fast_default = UNWIND_FAST_CHECK;
	static struct unwind none;
	static const struct llgo_raw_regs zero;
	unw_addr_space_t as = unw_create_addr_space(&uw_accessors, 0);
	if (!as)
		return;
	struct uwctx c = { .u = &none, .regs = &zero, .stack = NULL };
	unw_cursor_t cur;
	(void)unw_init_remote(&cur, as, &c);
	unw_destroy_addr_space(as);
}

struct unwind *unwind_new(pid_t pid, bool auto_mode)
{
	pthread_once(&uw_once, uw_init_once);
	struct unwind *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->pid = pid;
	u->fast = uw_fast_default;
	u->epoch = uw_next_epoch();
	u->want_fp = auto_mode;
	u->as = unw_create_addr_space(&uw_accessors, 0);
	if (!u->as) {
		free(u);
		return NULL;
	}
	unw_set_caching_policy(u->as, UNW_CACHE_GLOBAL);
	unw_set_cache_size(u->as, 4096, 0);
	return u;
}

void unwind_free(struct unwind *u)
{
	if (!u)
		return;
	if (u->stats.memo_checked)
		log_info("unwind memo: pid %d: %" PRIu64 " hits, %" PRIu64 " checked, %" PRIu64
			 " differ",
			 (int)u->pid, u->stats.memo_hits, u->stats.memo_checked,
			 u->stats.memo_mismatches);
	if (u->fast == UNWIND_FAST_CHECK && u->stats.unwound)
		log_info("unwind: pid %d: %" PRIu64 " stacks, %" PRIu64 " by the fast path "
			 "(%" PRIu64 " checked against libunwind, %" PRIu64 " differ), %" PRIu64
			 " left to libunwind",
			 (int)u->pid, u->stats.unwound, u->stats.fast, u->stats.fast_checked,
			 u->stats.fast_mismatches, u->stats.fast_fallbacks);
	unwind_drop_images(u);
	unw_destroy_addr_space(u->as);
	free(u->fp);
	free(u->fp_prio);
	free(u);
}

void unwind_set_fast(struct unwind *u, enum unwind_fast mode)
{
	if (u) {
		u->fast = mode;
		u->epoch = uw_next_epoch();
	}
}

void unwind_set_budget(struct unwind *u, struct budget *b, uid_t uid)
{
	if (u) {
		u->budget = b;
		u->uid = uid;
	}
}

void unwind_prepare(struct unwind *u, struct procmaps *maps)
{
	if (u && maps)
		unwind_build_images(u, maps);
}

const char *unwind_mode_name(uint32_t mode)
{
	return llgo_unwind_mode_name(mode);
}

void unwind_get_stats(const struct unwind *u, struct unwind_stats *out)
{
	*out = u->stats;
	out->images = u->nimages;
}

/* ---- the fast path's callbacks (unwind_fast.c) ----------------------------------------- */

static bool uw_fast_image(void *arg, uint64_t addr, struct uwfast_image *out)
{
	struct uwctx *c = arg;
	const struct uwimage *im = unwind_image(c, addr);
	if (!im)
		return false;
	/* the rows are per file, in ELF addresses: only for an image whose process range
	 * does not wrap (the kernel's addresses never do) */
	out->file = im->lo < im->hi && im->hi < (UINT64_C(1) << 62) ? &im->f->fast : NULL;
	out->bias = im->bias;
	return true;
}

static bool uw_fast_read(void *arg, uint64_t addr, uint64_t *val)
{
	unw_word_t v;
	if (uw_access_mem(NULL, addr, &v, 0, arg) < 0)
		return false;
	*val = v;
	return true;
}

static bool uw_fast_stale(void *arg, uint64_t pc)
{
	struct uwctx *c = arg;
	return !unwind_image(c, pc) && c->maps && procmaps_find(c->maps, pc - 1);
}

static const struct uwfast_ops uw_fast_ops = {
	.image = uw_fast_image,
	.read = uw_fast_read,
	.stale = uw_fast_stale,
};

/* The fast walk's result, kept in check mode to compare with libunwind's. */
struct uwfast_result {
	bool done, truncated, unknown;
	uint32_t n;
	uint64_t out[UNWIND_MAX_FRAMES];
};

/* Check mode: a difference is counted and logged (the first few), with both stacks. */
static void uw_fast_compare(struct unwind *u, const struct llgo_raw_regs *regs,
			    const struct uwfast_result *f, const uint64_t *out, uint32_t n,
			    bool truncated, bool unknown)
{
	static atomic_uint logged;
	u->stats.fast_checked++;
	if (f->n == n && f->truncated == truncated && f->unknown == unknown &&
	    memcmp(f->out, out, n * sizeof(*out)) == 0)
		return;
	u->stats.fast_mismatches++;
	if (atomic_fetch_add_explicit(&logged, 1, memory_order_relaxed) >= 20)
		return;
	char a[1024], b[1024];
	size_t la = 0, lb = 0;
	for (uint32_t i = 0; i < f->n && la < sizeof(a) - 20; i++)
		la += (size_t)snprintf(a + la, sizeof(a) - la, " %#" PRIx64, f->out[i]);
	for (uint32_t i = 0; i < n && lb < sizeof(b) - 20; i++)
		lb += (size_t)snprintf(b + lb, sizeof(b) - lb, " %#" PRIx64, out[i]);
	a[la] = b[lb] = '\0';
	log_warn("unwind: pid %d: fast path differs from libunwind (sp %#" PRIx64 " bp %#" PRIx64
		 "): fast%s%s:%s; libunwind%s%s:%s",
		 (int)u->pid, regs->sp, regs->bp, f->truncated ? " truncated" : "",
		 f->unknown ? " unknown" : "", a, truncated ? " truncated" : "",
		 unknown ? " unknown" : "", b);
}

uint32_t unwind_stack(struct unwind *u, struct procmaps *maps, const struct llgo_raw_regs *regs,
		      const unsigned char *stack, const uint64_t *hint, uint32_t nhint,
		      uint64_t *out, uint32_t max, bool *truncated, bool *unknown_pc)
{
	return unwind_stack_logged(u, maps, regs, stack, hint, nhint, out, max, truncated,
				   unknown_pc, NULL);
}

uint32_t unwind_stack_logged(struct unwind *u, struct procmaps *maps,
			     const struct llgo_raw_regs *regs, const unsigned char *stack,
			     const uint64_t *hint, uint32_t nhint, uint64_t *out, uint32_t max,
			     bool *truncated, bool *unknown_pc, struct unwind_reads *log)
{
	if (log) {
		log->n = 0;
		log->overflow = false;
	}
	*truncated = true;
	*unknown_pc = false;
	if (max == 0)
		return 0;
	out[0] = regs->ip;
	uint32_t n = 1;
	if (!u)
		return n;
	struct uwctx c = { .u = u, .regs = regs, .stack = stack, .maps = maps, .log = log };
	if (!unwind_image(&c, regs->ip) && maps && procmaps_find(maps, regs->ip - 1))
		unwind_build_images(u, maps);
	/* unwind_fast.c's walk, else (or also, to compare) libunwind's */
	struct uwfast_result fast = { .n = 1 };
	if (u->fast != UNWIND_FAST_OFF && max <= UNWIND_MAX_FRAMES &&
	    uwfast_walk(&uw_fast_ops, &c, regs, out, max, &fast.n, &fast.truncated,
			&fast.unknown)) {
		u->stats.fast++;
		if (u->fast != UNWIND_FAST_CHECK) {
			n = fast.n;
			*truncated = fast.truncated;
			*unknown_pc = fast.unknown;
			goto unwound;
		}
		fast.done = true;
		memcpy(fast.out, out, fast.n * sizeof(*out));
		c = (struct uwctx){ .u = u, .regs = regs, .stack = stack, .maps = maps, .log = log };
	} else if (u->fast != UNWIND_FAST_OFF && max <= UNWIND_MAX_FRAMES) {
		u->stats.fast_fallbacks++;
	}
	unw_cursor_t cur;
	int rc = unw_init_remote(&cur, u->as, &c);
	uint64_t prev_sp = regs->sp;
	while (rc >= 0) {
		c.noinfo = false;
		rc = unw_step(&cur);
		/* Without CFI for the frame just left, libunwind guesses from rbp (and calls a
		 * zero rbp the end of the stack): neither is trusted, the stack is truncated. */
		if (c.noinfo) {
			rc = -UNW_ENOINFO;
			break;
		}
		if (rc <= 0)
			break;
		if (n >= max) {
			rc = -UNW_ESTOPUNWIND;
			break;
		}
		unw_word_t ip = 0, sp = 0;
		unw_get_reg(&cur, UNW_REG_IP, &ip);
		unw_get_reg(&cur, UNW_REG_SP, &sp);
		if (ip == 0) { /* the outermost frame's return address */
			rc = 0;
			break;
		}
		/* A frame outside every known image may be a library loaded after the images
		 * were built: rebuild once and go on. */
		if (!unwind_image(&c, ip) && maps && procmaps_find(maps, ip - 1)) {
			unwind_build_images(u, maps);
			c.last = NULL;
		}
		/* Stacks grow down: a caller's sp below its callee's is a broken unwind (a
		 * signal frame switching stacks is the exception, and is followed). */
		/* libunwind says "signal frame" of the frame restored by a sigreturn: the
		 * interrupted code, which may have run on another stack. */
		bool signal = unw_is_signal_frame(&cur) > 0;
		if (sp < prev_sp && !signal) {
			rc = -UNW_EBADFRAME;
			break;
		}
		prev_sp = sp;
		/* Every pc handed on is read as a return address (looked up at pc - 1); the
		 * interrupted frame's pc is the exact instruction, so it gets + 1. (The
		 * trampoline's own pc is a return address already: glibc starts its CFI one byte
		 * early for this.) */
		out[n++] = signal ? ip + 1 : ip;
	}
	*truncated = rc != 0;
	*unknown_pc = c.unknown;
	if (fast.done)
		uw_fast_compare(u, regs, &fast, out, n, *truncated, *unknown_pc);
unwound:
	u->stats.unwound++;
	u->stats.frames += n;
	/* Allocator plumbing the frame-pointer walk trimmed (hint[0] is its first kept frame). */
	if (nhint && hint[0] != out[0]) {
		for (uint32_t k = 1; k < n && k <= 16; k++) {
			if (out[k] == hint[0]) {
				memmove(out, out + k, (size_t)(n - k) * sizeof(out[0]));
				n -= k;
				break;
			}
		}
	}
	if (*truncated)
		u->stats.truncated++;
	return n;
}

uint32_t unwind_image_stack(const unsigned char *file, size_t size, uint64_t bias,
			    const struct llgo_raw_regs *regs, const unsigned char *stack,
			    enum unwind_fast fast, uint64_t *out, uint32_t max, bool *truncated)
{
	bool unknown;
	*truncated = true;
	struct uwfile *f = uwfile_new(NULL, size);
	if (!f || filecopy_init_mem(&f->copy, file, size) != 0) {
		uwfile_destroy(f);
		return 0;
	}
	const struct cfi_reader r = uwfile_reader(f);
	uint32_t n = 0;
	struct unwind *u = NULL;
	if (uwfile_parse(f, &r, -1, NULL, 0) == 0 && (u = unwind_new(0, false)) &&
	    (u->images = calloc(1, sizeof(*u->images))) != NULL) {
		u->images[0] = (struct uwimage){ f->lo + bias, f->hi + bias, bias, f };
		u->nimages = 1;
		f->refs++; /* the image's */
		u->fast = fast;
		n = unwind_stack(u, NULL, regs, stack, NULL, 0, out, max, truncated, &unknown);
	}
	unwind_free(u);
	uwfile_put(f);
	return n;
}

/* ---- auto mode: which code keeps frame pointers, and where stacks end ------------------- */

/* A function as classification sees it: [lo, hi) ELF addresses, and whether some row of its
 * CFI computes the CFA from rbp. */
struct uwfunc {
	uint64_t lo, hi;
	bool rbp;
};

static int uwfunc_cmp(const void *a, const void *b)
{
	const struct uwfunc *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether f holds CFI beyond its .eh_frame_hdr in itself (a .debug_frame, or an .eh_frame
 * without the header): classification reads that, never a debug file found elsewhere. */
static bool uwfile_own_cfi(const struct uwfile *f)
{
	const struct cfi_reader r = uwfile_reader(f);
	size_t len;
	uint64_t vaddr;
	return cfi_elf_section_copy(&r, ".debug_frame", SIZE_MAX, NULL, &len, &vaddr) == 0 ||
	       (!f->has_table &&
		cfi_elf_section_copy(&r, ".eh_frame", SIZE_MAX, NULL, &len, &vaddr) == 0);
}

/*
 * The functions of f (one per FDE of its .eh_frame, and of the file's own extra CFI) that set
 * up a frame pointer: some instruction of the CIE or FDE sets the CFA register to rbp (cfi.c's
 * scan; a CFA given by an expression, as gcc writes for a realigned stack, does not count):
 * code whose calls return into a frame a frame-pointer walk reads right. Runs of such
 * functions become ranges. A function put in a range wrongly would let a walk skip its
 * caller, so anything unclear (no CFI, rsp-based CFA throughout, an FDE cfi.c rejects, an FDE
 * overlapping an earlier one) stays out.
 */
static void uwfile_classify_locked(struct uwfile *f)
{
	f->fp_done = true;
	const struct cfi_table *t = uwfile_own_cfi(f) ? uwfile_cfi(f) : NULL;
	/* The .eh_frame the header indexes, scanned by cfi.c (never libdw: the daemon parses
	 * users' CFI with its own checked reader only). */
	struct cfi_table eh;
	memset(&eh, 0, sizeof(eh));
	if (f->has_table && f->fde_count) {
		struct cfi_range code[UNWIND_MAX_SEGS];
		size_t ncode = uwfile_code_ranges(f, code);
		const struct cfi_reader r = uwfile_reader(f);
		unsigned char *sec;
		size_t len;
		uint64_t vaddr;
		if (cfi_elf_section_copy(&r, ".eh_frame", SIZE_MAX, &sec, &len, &vaddr) == 0)
			cfi_build(&eh, sec, len, true, vaddr, code, ncode, f->lo);
		free(sec);
	}
	const struct cfi_table *tabs[2] = { &eh, t };
	size_t nt = eh.count + (t ? t->count : 0);
	if (nt < 2) {
		cfi_table_free(&eh);
		return;
	}
	struct uwfunc *fn = calloc(nt, sizeof(*fn));
	struct uwrange *v = calloc(nt, sizeof(*v));
	if (!fn || !v) {
		free(v);
		goto out;
	}
	size_t nf = 0;
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; tabs[k] && i < tabs[k]->count; i++) {
			uint64_t lo = f->lo + (uint64_t)tabs[k]->entries[i].start;
			fn[nf++] = (struct uwfunc){ lo, lo + tabs[k]->entries[i].len,
						    tabs[k]->entries[i].rbp };
		}
	qsort(fn, nf, sizeof(*fn), uwfunc_cmp);
	size_t n = 0;
	bool open = false;
	uint64_t end = 0;
	for (size_t i = 0; i < nf; i++) {
		if (fn[i].lo < end) { /* overlaps an earlier FDE: neither is trusted further */
			open = false;
			continue;
		}
		end = fn[i].hi;
		f->funcs++;
		if (!fn[i].rbp) {
			open = false;
			continue;
		}
		f->fp_funcs++;
		/* no function without a frame pointer in between, nor a gap longer than
		 * alignment padding (code without CFI could hide there) */
		if (open && fn[i].lo - v[n - 1].hi < 16) {
			v[n - 1].hi = fn[i].hi;
		} else {
			v[n].lo = fn[i].lo;
			v[n].hi = fn[i].hi;
			n++;
			open = true;
		}
	}
	f->fp = v;
	f->nfp = n;
out:
	free(fn);
	cfi_table_free(&eh);
}

static int uwrange_cmp(const void *a, const void *b)
{
	const struct uwrange *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The session's frame-pointer ranges from its images, in two orders: by address (u->fp, for
 * lookups) and by priority (u->fp_prio, for the shim's table, which holds the first
 * LLGO_CTL_FP_RANGES): objects whose functions most often keep frame pointers first (a
 * program built with them comes before libc's few functions with an rbp frame). */
static int uwimage_prio_cmp(const void *a, const void *b)
{
	const struct uwimage *x = *(const struct uwimage *const *)a;
	const struct uwimage *y = *(const struct uwimage *const *)b;
	/* fp_funcs / funcs, compared without division */
	uint64_t l = x->f->fp_funcs * (y->f->funcs ? y->f->funcs : 1);
	uint64_t r = y->f->fp_funcs * (x->f->funcs ? x->f->funcs : 1);
	return l > r ? -1 : l < r;
}

static void unwind_build_fp(struct unwind *u)
{
	size_t total = 0;
	const struct uwimage **order = calloc(u->nimages ? u->nimages : 1, sizeof(*order));
	if (!order)
		return;
	pthread_mutex_lock(&uw_lock);
	for (size_t i = 0; i < u->nimages; i++) {
		struct uwfile *f = u->images[i].f;
		if (!f->fp_done)
			uwfile_classify_locked(f);
		total += f->nfp;
		order[i] = &u->images[i];
	}
	qsort(order, u->nimages, sizeof(*order), uwimage_prio_cmp);
	struct uwrange *v = calloc(total ? total : 1, sizeof(*v));
	struct uwrange *prio = calloc(total ? total : 1, sizeof(*prio));
	size_t n = 0;
	for (size_t i = 0; v && prio && i < u->nimages; i++) {
		const struct uwimage *im = order[i];
		for (size_t j = 0; j < im->f->nfp; j++) {
			v[n].lo = im->f->fp[j].lo + im->bias;
			v[n].hi = im->f->fp[j].hi + im->bias;
			prio[n] = v[n];
			n++;
		}
	}
	pthread_mutex_unlock(&uw_lock);
	free(order);
	if (!v || !prio) {
		free(v);
		free(prio);
		return;
	}
	qsort(v, n, sizeof(*v), uwrange_cmp);
	free(u->fp);
	free(u->fp_prio);
	u->fp = v;
	u->fp_prio = prio;
	u->nfp = n;
	u->tables_dirty = true;
}

static bool unwind_in_fp(const struct unwind *u, uint64_t pc)
{
	uint64_t at = pc - 1;
	size_t lo = 0, hi = u->nfp;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (at < u->fp[mid].lo)
			hi = mid;
		else if (at >= u->fp[mid].hi)
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

bool unwind_learn(struct unwind *u, const uint64_t *pcs, uint32_t n)
{
	if (!u || !u->fp)
		return false; /* (the frame-pointer code is not known yet) */
	/* The first frame outside frame-pointer code is where a walk would end; what follows
	 * must hold no frame-pointer code (else it is a callback, not a thread's start). */
	uint32_t j = 0;
	while (j < n && unwind_in_fp(u, pcs[j]))
		j++;
	if (j == 0 || j >= n || n - j - 1 > UNWIND_MAX_SUFFIX)
		return true;
	for (uint32_t k = j + 1; k < n; k++)
		if (unwind_in_fp(u, pcs[k]))
			return true;
	const uint64_t *suffix = pcs + j + 1;
	uint32_t ns = n - j - 1;
	for (size_t i = 0; i < u->nroots; i++) {
		struct uwroot *r = &u->roots[i];
		if (r->pc != pcs[j])
			continue;
		if (r->ambiguous)
			return true;
		if (r->nsuffix != ns || memcmp(r->suffix, suffix, ns * sizeof(*suffix)) != 0) {
			r->ambiguous = true;
			u->tables_dirty = true;
			u->roots_gen++;
			return true;
		}
		if (r->seen >= UNWIND_ROOT_MIN_SEEN)
			return true;
		if (++r->seen == UNWIND_ROOT_MIN_SEEN) {
			u->tables_dirty = true;
			u->roots_gen++;
		}
		return r->seen >= UNWIND_ROOT_MIN_SEEN;
	}
	if (u->nroots >= UNWIND_MAX_ROOTS)
		return true;
	u->roots_gen++;
	struct uwroot *r = &u->roots[u->nroots++];
	memset(r, 0, sizeof(*r));
	r->pc = pcs[j];
	r->seen = 1;
	r->nsuffix = ns;
	memcpy(r->suffix, suffix, ns * sizeof(*suffix));
	return false;
}

uint64_t unwind_roots_gen(const struct unwind *u)
{
	return u ? u->roots_gen : 0;
}

uint32_t unwind_complete(struct unwind *u, uint64_t *pcs, uint32_t n, uint32_t max)
{
	if (!u || n == 0 || n >= max)
		return n;
	for (size_t i = 0; i < u->nroots; i++) {
		const struct uwroot *r = &u->roots[i];
		if (r->pc != pcs[n - 1] || r->ambiguous || r->seen < UNWIND_ROOT_MIN_SEEN)
			continue;
		for (uint32_t k = 0; k < r->nsuffix && n < max; k++)
			pcs[n++] = r->suffix[k];
		break;
	}
	return n;
}

bool unwind_tables(struct unwind *u, struct procmaps *maps, uint64_t (*ranges)[2],
		   uint32_t max_ranges, uint32_t *nranges, uint64_t *roots, uint32_t max_roots,
		   uint32_t *nroots)
{
	if (!u || !u->tables_dirty)
		return false;
	u->tables_dirty = false;
	/* The first ranges by priority when they do not all fit (unwind_build_fp): a range left
	 * out only costs copies. */
	size_t n = u->nfp < max_ranges ? u->nfp : max_ranges;
	struct uwrange *v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return false;
	if (n)
		memcpy(v, u->fp_prio, n * sizeof(*v));
	qsort(v, n, sizeof(*v), uwrange_cmp);
	for (size_t i = 0; i < n; i++) {
		ranges[i][0] = v[i].lo;
		ranges[i][1] = v[i].hi;
	}
	free(v);
	*nranges = (uint32_t)n;
	uint32_t k = 0;
	for (size_t i = 0; i < u->nroots && k < max_roots; i++)
		if (!u->roots[i].ambiguous && u->roots[i].seen >= UNWIND_ROOT_MIN_SEEN)
			roots[k++] = u->roots[i].pc;
	*nroots = k;
	(void)maps;
	return true;
}

/* ---- where every stack starts ------------------------------------------------------------ */

bool unwind_is_start(struct procmaps *maps, uint64_t pc)
{
	static const char *const starts[] = { "_start", "__libc_start_call_main",
					      "__libc_start_main", "start_thread", "clone3",
					      "clone" };
	const struct mapping *m = maps && pc != PROFILE_PC_TRUNCATED ? procmaps_find(maps, pc - 1)
								      : NULL;
	struct sym_result r;
	r.nframes = 0;
	r.unavailable = false;
	int k = m ? symbolize_pc(m, pc - 1, &r) : 0;
	/* the last frame of the inline chain is the physical function */
	if (k <= 0 || !r.frames[k - 1].function)
		return false;
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(starts); i++)
		if (strcmp(r.frames[k - 1].function, starts[i]) == 0)
			return true;
	return false;
}
