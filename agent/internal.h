/* SPDX-License-Identifier: MIT */
/*
 * internal.h: prototypes shared between the daemon's files (llgo-heapd; the CLI is client/'s),
 * grouped by the file that defines them. Nothing here crosses the process boundary; the
 * cross-process contract is in shared/.
 *
 * Conventions: functions return 0 or a negative errno; constructors are name_new() and
 * destructors name_free(), which accept NULL.
 */
#ifndef LLGO_AGENT_INTERNAL_H
#define LLGO_AGENT_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../shared/compiler.h"
#include "../shared/proto.h"
#include "../shared/ring.h"
#include "../shared/symproto.h"

#include "../common/buf.h"
#include "../common/gzip.h"
#include "../common/msg.h"

/* ---- ring.c: the daemon's reader of one shared ring ----------------------------------- */

/* Why a record was rejected; counted per reason in struct ring_counts. */
struct ring_counts {
	uint64_t delivered; /* valid records handed to the callback */
	uint64_t corrupt;   /* records (or stretches of the ring) rejected */
	uint64_t skipped;   /* valid records of kinds this reader does not handle */
};

/* A mapped ring, seen from the daemon. Everything the daemon relies on (geometry, tail,
 * expected sequence) is kept here, never re-read from shared memory. */
struct ring_reader {
	struct llgo_ring_header *hdr; /* shared; hostile */
	unsigned char *data;          /* hdr + LLGO_RING_HEADER_SIZE */
	uint64_t data_size;
	uint64_t mask;
	uint64_t tail;     /* daemon's own copy; published to hdr->tail */
	uint64_t next_seq; /* sequence number expected next */
	uint32_t ring_id;
	size_t map_len;
	struct ring_counts counts;
	uint64_t sampled;  /* last sampled value accepted from the ring */
	uint64_t dropped;  /* last dropped value accepted from the ring */
	/* Samples of this ring that an earlier reader took (a daemon that died or a session
	 * that ended before the process did): counted as sampled and dropped. */
	uint64_t prior;
	unsigned char *scratch; /* LLGO_RECORD_RAW_MAX_LEN bytes for RAW records, on demand */
	/* Giving drained pages back (ring_reader_release): bytes drained in the current window
	 * of about a second, its start (CLOCK_MONOTONIC_COARSE, ns), and whether the last whole
	 * window was light (less than a quarter of the ring drained). */
	uint64_t win_bytes;
	uint64_t win_start_ns;
	bool light;
	uint64_t release_from; /* drained positions from here on may still be resident */
	/* Pages go back in batches (each madvise costs a TLB shootdown in the program and a
	 * fault per page when it writes there again): once release_batch bytes are pending or
	 * a second after the last release (release_ns); releases counts the madvise calls. */
	uint64_t release_ns;
	uint32_t release_batch;
	uint64_t releases;
	/* drain.c: the stack copies of this ring it unwound (rawmemo.h; malloc'ed on demand) */
	struct rawmemo *rawmemo;
	/* drain.c: what the last plain ALLOC record of this ring became (drain_record) */
	struct ring_memo {
		bool valid;
		bool truncated;  /* a [truncated] frame was added */
		bool noted;      /* in-use: settled per stack (nothing per record) */
		uint64_t bucket_key; /* the in-use key of the bucket's stack (when !noted) */
		uint16_t flags;
		uint32_t nframes;
		uint64_t size, rate;
		uint64_t maps_version, roots_gen, stacks_gen;
		struct bucket *bucket;
		uint64_t frames[LLGO_MAX_FRAMES];
	} memo;
};

/* A valid record copied out of the ring; frames points into the reader's scratch copy and
 * is valid only during the callback. An ALLOC_RAW record's registers and stack follow its
 * frames (ring_raw_regs). */
typedef void (*ring_record_fn)(void *arg, const struct llgo_record *rec, const uint64_t *frames);

/* Map a ring memfd (checking its size, its F_SEAL_SHRINK seal and header) and set up the
 * reader; closes nothing. -EPERM: not sealed against shrinking (could SIGBUS the daemon). */
int ring_reader_map(struct ring_reader *r, int fd, uint32_t ring_id, uint32_t data_size);
/* Map the ring at offset off of a process memfd (shared/ring.h layout); the memfd's size and
 * seal are checked as ring_reader_map does. -EAGAIN: the shim has not formatted it yet. */
int ring_reader_map_at(struct ring_reader *r, int fd, uint64_t off, size_t map_len,
		       uint32_t ring_id, uint32_t data_size);
/* A ring found already in use (re-adoption): count what an earlier reader took before this
 * one starts at the shared tail, so that the accounting still adds up. */
void ring_reader_baseline(struct ring_reader *r);
/* Set up a reader over memory already mapped (tests). */
int ring_reader_init(struct ring_reader *r, void *mem, size_t map_len, uint32_t ring_id,
		     uint32_t data_size);
void ring_reader_unmap(struct ring_reader *r);
/* Copy out and validate every record published so far, calling fn for each valid one;
 * returns the number of valid records. Publishes the new tail. Updates r->sampled and
 * r->dropped from the ring's counters (read before head, see shared/ring.h). */
size_t ring_reader_drain(struct ring_reader *r, ring_record_fn fn, void *arg);

/* The counters reported for a ring, such that sampled == delivered + dropped + corrupt:
 * after a drain, a shortfall (sampled above the sum: records skipped by a resync) is added to
 * corrupt, and an excess (records delivered before their sampled increment was read) raises
 * sampled to the sum. Sum rings with ring_account_add and add the control page's lost_no_ring
 * (samples that found no ring: sampled and dropped) with ring_account_lost. */
struct ring_account {
	uint64_t sampled, delivered, dropped, corrupt;
	/* Parts of dropped: samples an earlier reader took (prior), samples that found no ring
	 * (no_ring), samples taken while the shim had no daemon (detached). */
	uint64_t prior, no_ring, detached;
};
void ring_reader_account(const struct ring_reader *r, struct ring_account *out);
void ring_account_add(struct ring_account *sum, const struct ring_account *a);
void ring_account_lost(struct ring_account *sum, uint64_t lost_no_ring);
void ring_account_detached(struct ring_account *sum, uint64_t lost_detached);

/* ---- bucket.c: (stack, size, rate) -> counters ----------------------------------------- */

/* An interned stack: immutable once published, freed only with its table. */
struct stack {
	struct stack *_Atomic next; /* hash chain */
	uint64_t hash;
	uint32_t npcs;
	uint32_t id; /* 1..n in insertion order */
	uint64_t pcs[];
};

/* A bucket's counters. */
struct bucket_counts {
	uint64_t alloc_objects, alloc_bytes, free_objects, free_bytes;
};

/* A bucket: key fields immutable once published; counters atomic (relaxed). Buckets are
 * keyed by the rate too, so each sample is scaled with the rate in force when taken. The
 * counters change only through bucket.c (bucket_table_add, bucket_table_set_free), which
 * keeps their values as of a cut (bucket_table_cut) while one is in force. */
struct bucket {
	struct bucket *_Atomic next; /* hash chain */
	struct bucket *_Atomic all;  /* list of every bucket, newest first */
	const struct stack *stack;
	uint64_t size;
	uint64_t rate;
	_Atomic uint64_t alloc_objects;
	_Atomic uint64_t alloc_bytes;
	_Atomic uint64_t free_objects;
	_Atomic uint64_t free_bytes;
	/* bucket.c's: the cut whose values kept holds (BUCKET_CUT_SAVING while they are copied) */
	_Atomic uint64_t cut;
	_Atomic uint64_t kept[4]; /* alloc_objects, alloc_bytes, free_objects, free_bytes */
};

struct bucket_stats {
	uint64_t buckets;
	uint64_t stacks;
	uint64_t bytes;    /* memory held by the table */
	uint64_t cap_hits; /* records folded into the overflow bucket because a cap was hit */
};

struct bucket_table;

/* max_buckets and max_bytes: per-process caps (0 = defaults). */
struct bucket_table *bucket_table_new(uint64_t max_buckets, uint64_t max_bytes);
void bucket_table_free(struct bucket_table *t);
/* Count one sampled allocation. Lock-free when the bucket exists. When a cap is hit the
 * record is counted in an overflow bucket (empty stack) and cap_hits grows. Returns 1 when
 * the stack was new to the table (so the caller may check its frames), 0 otherwise, or
 * -errno. */
int bucket_table_add(struct bucket_table *t, const uint64_t *pcs, uint32_t npcs, uint64_t size,
		     uint64_t rate);
/* The same; *at gets the bucket counted (NULL for the overflow bucket or an error), which
 * stays valid for the table's life: bucket_table_count counts another record in it. */
int bucket_table_add_at(struct bucket_table *t, const uint64_t *pcs, uint32_t npcs,
			uint64_t size, uint64_t rate, struct bucket **at);
void bucket_table_count(struct bucket_table *t, struct bucket *b, uint64_t size);
/* Visit every published bucket; concurrent adds may or may not be seen. Stops and returns
 * fn's value when it is non-zero. Never blocks writers. */
typedef int (*bucket_visit_fn)(void *arg, const struct bucket *b);
int bucket_table_foreach(struct bucket_table *t, bucket_visit_fn fn, void *arg);
/* Set a bucket's free counters (inuse.c's freeze at exit), keeping a cut's values. */
void bucket_table_set_free(struct bucket_table *t, struct bucket *b, uint64_t objects,
			   uint64_t bytes);

/* Cuts: a reader's consistent view of the table while writers go on. bucket_table_cut marks
 * the table as it is now and returns the cut's id (never 0); until bucket_table_cut_end,
 * bucket_table_foreach_cut visits exactly the buckets that existed at the cut with the
 * counters they had at it, however many adds run meanwhile (the first write to a bucket after
 * the cut keeps its values first). The caller makes one cut at a time and makes no cut while
 * an add runs (the session's drain lock orders them: see snapshot.c). */
#define BUCKET_CUT_SAVING UINT64_MAX
uint64_t bucket_table_cut(struct bucket_table *t);
void bucket_table_cut_end(struct bucket_table *t, uint64_t cut);
typedef int (*bucket_cut_visit_fn)(void *arg, const struct bucket *b,
				   const struct bucket_counts *c);
/* cut 0: every bucket now, counters read as they are (frees before allocations). */
int bucket_table_foreach_cut(struct bucket_table *t, uint64_t cut, bucket_cut_visit_fn fn,
			     void *arg);
void bucket_table_stats(struct bucket_table *t, struct bucket_stats *out);

/* ---- procmaps.c: a process's executable mappings -------------------------------------- */

struct symfile; /* symfile.c: one ELF file, per uid, parsed by that uid's sandboxed helper */

struct mapping {
	uint64_t start, end, offset; /* as in /proc/PID/maps */
	char *path;                  /* " (deleted)" trimmed */
	char build_id[80];           /* lowercase hex, "" when none */
	struct symfile *file;        /* NULL when the file could not be opened */
	char perms[5];               /* as in /proc/PID/maps, e.g. "r-xp" */
	uint32_t dev_major, dev_minor;
	uint64_t inode;
};

struct procmaps; /* thread-safe: refresh and lookups may run concurrently */

/* Read /proc/PID/maps and open every executable file mapping (through
 * /proc/PID/map_files when allowed, so deleted or replaced binaries still symbolize). Its
 * files are symbolized by uid's helper: procmaps_new takes the uid that owns /proc/PID. */
struct procmaps *procmaps_new(pid_t pid);
struct procmaps *procmaps_new_as(pid_t pid, uid_t uid);
/* Re-read the maps (after dlopen); mappings already known are kept. */
int procmaps_refresh(struct procmaps *m, pid_t pid);
/* A thread that may look mappings up while another refreshes them (anything outside the
 * session's drain lock) brackets its lookups and its use of what they return with these;
 * brackets nest. Without one, pointers stay valid only until the next refresh. */
unsigned procmaps_read_begin(struct procmaps *m);
void procmaps_read_end(struct procmaps *m, unsigned token);
/* The mapping holding pc, or NULL. */
const struct mapping *procmaps_find(struct procmaps *m, uint64_t pc);
/* The mapping list, in address order. */
size_t procmaps_list(struct procmaps *m, const struct mapping ***out);
/* Changes whenever the mapping list does (a refresh that found nothing new keeps it). */
uint64_t procmaps_version(struct procmaps *m);
struct procmaps_stats {
	uint64_t mappings;         /* in the table now */
	uint64_t retired_arrays;   /* replaced tables not yet freed (a reader may hold them) */
	uint64_t retired_mappings; /* mappings that left the table, not yet freed */
	uint64_t stale_dropped;    /* unlisted mappings dropped beyond PROCMAPS_STALE_MAX */
};
void procmaps_get_stats(struct procmaps *m, struct procmaps_stats *out);
void procmaps_free(struct procmaps *m);

/* ---- unwind.c: whole stacks from ALLOC_RAW records (libunwind, remote) ---------------- */

/* The pc standing for "the stack goes on but could not be unwound" at the end of a stack;
 * writers show it as PROFILE_TRUNCATED_NAME. Never a user-space address. */
#define PROFILE_PC_TRUNCATED UINT64_MAX
#define PROFILE_TRUNCATED_NAME "[truncated]"
/* Frames an unwound stack may have (the frame-pointer walk keeps LLGO_MAX_FRAMES). */
#define UNWIND_MAX_FRAMES 256u

struct unwind_stats {
	uint64_t unwound;      /* stacks unwound */
	uint64_t truncated;    /* of which did not reach the thread's start */
	uint64_t frames;       /* frames produced */
	uint64_t proc_lookups; /* unwind-table searches (libunwind's cache misses) */
	uint64_t image_builds; /* times the session's images were (re)built */
	uint64_t images;       /* images known now */
	uint64_t fast;            /* stacks unwound by unwind_fast.c's walk */
	uint64_t fast_fallbacks;  /* stacks it left to libunwind */
	uint64_t fast_checked;    /* check mode: stacks unwound both ways */
	uint64_t fast_mismatches; /* ... whose results differed */
	uint64_t cfi_refused;     /* FDEs refused before libunwind ran them (cfi_check_program) */
	uint64_t memo_hits;       /* stack copies found in drain.c's memo (rawmemo.h) */
	uint64_t memo_checked;    /* check mode: hits unwound again */
	uint64_t memo_mismatches; /* ... whose stack differed from the memo's */
};

/* unwind_fast.c's walk: used (the default; LLGO_HEAP_UNWIND_FAST in the daemon's environment
 * says otherwise), not used (libunwind alone), or both compared on every stack. */
enum unwind_fast {
	UNWIND_FAST_ON,
	UNWIND_FAST_OFF,
	UNWIND_FAST_CHECK,
};

struct unwind; /* one per session; used under the session's drain lock */

/* auto_mode: also find the frame-pointer code of every image and learn roots (below). */
struct unwind *unwind_new(pid_t pid, bool auto_mode);
void unwind_free(struct unwind *u);
/* Unwind one copied stack: regs and stack as in an ALLOC_RAW record, hint[0..nhint) its
 * frame-pointer walk (allocator plumbing above hint[0] is dropped). Writes at most max return
 * addresses (out[0] = regs->ip) and returns their number; *truncated when the unwind did not
 * reach the outermost frame, *unknown_pc when it stopped at a pc outside every mapping maps
 * knows (re-read the maps and try again: a library loaded since). */
uint32_t unwind_stack(struct unwind *u, struct procmaps *maps, const struct llgo_raw_regs *regs,
		      const unsigned char *stack, const uint64_t *hint, uint32_t nhint,
		      uint64_t *out, uint32_t max, bool *truncated, bool *unknown_pc);
/*
 * The words of a stack copy one unwind read, in order: offsets from the copy's start (those
 * of the sigaltstack case's second region with UNWIND_READ_STACK2) and the values read. An
 * unwind is a function of u's state (unwind_epoch), its registers, its hint and these words:
 * another copy with the same registers, hint and words here unwinds to the same stack
 * (drain.c's memo of stack copies). overflow: more reads than the log holds.
 */
#define UNWIND_READS_MAX 96u
#define UNWIND_READ_STACK2 0x80000000u
struct unwind_reads {
	uint32_t n;
	bool overflow;
	uint32_t off[UNWIND_READS_MAX];
	uint64_t val[UNWIND_READS_MAX];
};
/* unwind_stack, logging the stack words it reads into *log (reset first). */
uint32_t unwind_stack_logged(struct unwind *u, struct procmaps *maps,
			     const struct llgo_raw_regs *regs, const unsigned char *stack,
			     const uint64_t *hint, uint32_t nhint, uint64_t *out, uint32_t max,
			     bool *truncated, bool *unknown_pc, struct unwind_reads *log);
/* Whether stack (a copy under regs) holds the words log read. */
bool unwind_reads_match(const struct unwind_reads *log, const struct llgo_raw_regs *regs,
			const unsigned char *stack);
/* drain.c's memo of stack copies: a hit counted in u's stats (checked: unwound again in
 * check mode; differ: to another stack than the memo's, logged). */
void unwind_count_memo(struct unwind *u, bool checked, bool differ);
/* Changes whenever what an unwind may return for the same input changes (the images rebuilt,
 * the fast-path mode set); unique across every unwind the daemon makes. */
uint64_t unwind_epoch(const struct unwind *u);
void unwind_get_stats(const struct unwind *u, struct unwind_stats *out);
void unwind_set_fast(struct unwind *u, enum unwind_fast mode);
/* The budget (BUDGET_UNWIND_BYTES) and uid that the copies of the files u reads are charged
 * to (NULL: none); set before u's first unwind. */
struct budget;
void unwind_set_budget(struct unwind *u, struct budget *b, uid_t uid);
/* Build the images (and, in auto mode, the frame-pointer ranges) from maps now. */
void unwind_prepare(struct unwind *u, struct procmaps *maps);
/* unwind_stack against one ELF file given as bytes (hostile), loaded at bias, without a
 * process: the parse of its headers and CFI (.eh_frame_hdr, and cfi.c's fallbacks) and the
 * walk over the stack copy (fast: unwind_set_fast's). For tests/fuzz/fuzz_unwind.c. */
uint32_t unwind_image_stack(const unsigned char *file, size_t size, uint64_t bias,
			    const struct llgo_raw_regs *regs, const unsigned char *stack,
			    enum unwind_fast fast, uint64_t *out, uint32_t max, bool *truncated);
/* auto mode (docs/design.md, "Unwinding"). unwind_learn: a whole unwound stack teaches where
 * frame-pointer walks end and what follows there (a root and its suffix). unwind_complete:
 * append a trusted root's suffix to a frame-pointer stack ending at that root (returns the
 * new length, <= max). unwind_tables: when they changed since the last call, the ranges of
 * frame-pointer code and the trusted roots for the shim's control page (returns true). */
/* unwind_learn returns true when learning this stack again would change nothing (its root
 * trusted, ambiguous or none; the roots' table full). */
bool unwind_learn(struct unwind *u, const uint64_t *pcs, uint32_t n);
uint32_t unwind_complete(struct unwind *u, uint64_t *pcs, uint32_t n, uint32_t max);
/* Changes whenever unwind_complete may complete a stack differently (a root learned, made
 * usable or found ambiguous). */
uint64_t unwind_roots_gen(const struct unwind *u);
bool unwind_tables(struct unwind *u, struct procmaps *maps, uint64_t (*ranges)[2],
		   uint32_t max_ranges, uint32_t *nranges, uint64_t *roots, uint32_t max_roots,
		   uint32_t *nroots);
/* Whether the return address pc lies in a function where every stack starts: the program's
 * or a thread's entry (_start, __libc_start_main, start_thread, clone...): a frame-pointer
 * walk that ends there is whole. Asks the symbolizer. */
bool unwind_is_start(struct procmaps *maps, uint64_t pc);
/* Files held by the global unwind-info cache and the bytes they cost (bookkeeping, the
 * copies of what was read of them, their rewritten CFI). */
void unwind_cache_stats(uint64_t *files, uint64_t *bytes);
/* "fp", "dwarf", "auto" or "fp" for a shim that did not say. */
const char *unwind_mode_name(uint32_t mode);

/* ---- cfi.c: CFI libunwind's table search cannot reach, rewritten into a form it can ------ */

/* An ELF address range [lo, hi) of executable code. */
struct cfi_range {
	uint64_t lo, hi;
};

/* One FDE of a table: its start as an offset from the table's ip base, its rewritten FDE's
 * offset in the image, the length it covers (capped), and whether its CFI puts the CFA on
 * rbp (auto mode's classification). */
struct cfi_entry {
	int32_t start, fde;
	uint32_t len;
	bool rbp;
};

/* .eh_frame records (each FDE's initial location is its ELF address, DW_EH_PE_datarel: the
 * reader's gp is the load bias), then at table_off count (start, fde) pairs of 32-bit values,
 * sorted by start, as .eh_frame_hdr's table. */
struct cfi_table {
	unsigned char *image;
	size_t size, table_off, count;
	struct cfi_entry *entries; /* the table's entries, same order */
};

/* Rewrite the .debug_frame (eh false) or .eh_frame (eh true, at ELF address vaddr) held in
 * sec[0..len), keeping the FDEs that lie inside code[0..ncode) at or above ip_base. 0 with
 * t->count == 0 when nothing usable was found; -errno on failure. Input is hostile. */
int cfi_build(struct cfi_table *t, const unsigned char *sec, size_t len, bool eh, uint64_t vaddr,
	      const struct cfi_range *code, size_t ncode, uint64_t ip_base);
void cfi_table_free(struct cfi_table *t);
/* The contents of section name of the ELF file image[0..size) (hostile), decompressed when
 * SHF_COMPRESSED (then *owned is the buffer to free; with owned NULL, left as they are), and
 * its ELF address. -ENOENT when the file has no such section with contents. */
int cfi_elf_section(const unsigned char *image, size_t size, const char *name,
		    const unsigned char **data, size_t *len, uint64_t *vaddr, void **owned);
/* A file as cfi_elf_section_copy reads it: n bytes at off into buf (false when they could not
 * all be read), its size in bytes. */
struct cfi_reader {
	bool (*read)(const void *arg, uint64_t off, void *buf, size_t n);
	const void *arg;
	uint64_t size;
};
/* cfi_elf_section of a file read through r (a user's file, which its owner may change: read
 * with pread, never mapped): the section's contents, at most max bytes as stored, in a
 * malloc'd copy (*data, to free), inflated when SHF_COMPRESSED. data NULL: only whether the
 * section is there. */
int cfi_elf_section_copy(const struct cfi_reader *r, const char *name, size_t max,
			 unsigned char **data, size_t *len, uint64_t *vaddr);
/* An SHF_COMPRESSED section's contents p[0..n) (Elf64_Chdr, zlib), inflated into *owned. */
int cfi_inflate(const unsigned char *p, size_t n, const unsigned char **data, size_t *len,
		void **owned);

/* unwind_fast.c's rows: the rules one .eh_frame FDE gives at one pc, found and applied the
 * way libunwind 1.6's dwarf_step does (Gparser.c, Gfde.c), for the subset of CFI that real
 * x86-64 code uses; anything else is refused and the caller lets libunwind do the step.
 * A file as unwinding reads it: its bytes and its PT_LOAD segments' file parts (ELF address,
 * file offset, length), which must not overlap. */
struct cfi_seg {
	uint64_t vaddr, offset, filesz;
};

struct filecopy;
struct cfi_file {
	const unsigned char *image;
	size_t size;
	const struct cfi_seg *segs;
	size_t nsegs;
	uint64_t lo, hi; /* the ELF address range FDEs must lie in */
	struct filecopy *copy; /* when set, the bytes come from it (filecopy_at), not image */
};

/* libunwind's dwarf_where_t values */
enum cfi_where {
	CFI_UNDEF,  /* lost: for the return address, the outermost frame */
	CFI_SAME,   /* the caller's value is this frame's */
	CFI_CFAREL, /* saved at CFA + off */
};

/* CFA = (cfa_rbp ? rbp : rsp) + cfa_off, modulo 2^64; the return address and rbp by their
 * rules (the return address is never CFI_SAME). */
struct cfi_row {
	uint64_t cfa_off, ra_off, rbp_off;
	bool cfa_rbp;
	uint8_t ra, rbp; /* enum cfi_where */
};

/* The bytes [vaddr, vaddr + n) of f where libunwind's remote reads (8-byte words through the
 * address space's access_mem) would find them; NULL when some are not in a segment's file
 * part (or its copy could not read them). */
const unsigned char *cfi_file_bytes(const struct cfi_file *f, uint64_t vaddr, uint64_t n);
/* The row at pc (an ELF address: the lookup address, i.e. a return address minus 1) of the
 * .eh_frame FDE at ELF address fde. 0, -ENOENT when the FDE does not cover pc, -ENOTSUP for
 * anything outside the subset (also bytes outside the segments, wraps, signal frames). */
int cfi_eh_row(const struct cfi_file *f, uint64_t fde, uint64_t pc, struct cfi_row *row);

/* Before libunwind runs a CIE's or FDE's CFA program (unwind.c's find_proc_info): whether
 * libunwind 1.6 runs p[0..n) (the bytes its reads of the program would find) without
 * indexing past its arrays, faulting, looping or piling up memory (cfi.c says which
 * constructs do). It runs while loc <= end (an FDE: from its initial location to the pc
 * looked up; a CIE: 0 to UINT64_MAX), advances scaled by code_align; DW_CFA_set_loc operands
 * are in set_loc_enc. CFI_NREGS registers (x86-64 DWARF 0..16) are all libunwind holds. */
#define CFI_NREGS 17u
#define CFI_CHECK_MAX_PROGRAM ((size_t)1 << 20)
bool cfi_check_program(const unsigned char *p, size_t n, uint64_t loc, uint64_t end,
		       uint64_t code_align, uint8_t set_loc_enc);

/* ---- symbolize.c: addresses to functions, files and lines ----------------------------- */

/* struct sym_frame and SYM_MAX_INLINE: shared/symproto.h (the symbolizer's too) */

struct sym_result {
	int nframes; /* inline chain, leaf first; the last is the physical function */
	struct sym_frame frames[SYM_MAX_INLINE];
	uint64_t entry; /* process address of the physical function's first byte, 0: unknown */
	/* What the mapping's file can tell (pprof Mapping.has_*), whatever this address got. */
	bool has_functions, has_filenames, has_lines, has_inlines;
	/* The symbolizer could not answer now (failed, backing off, busy for the drain thread):
	 * nframes is 0 this time only; do not remember it. */
	bool unavailable;
};

/* Open (or find in the cache) the file at path for uid's profiles; fd may be -1. */
struct symfile *symfile_get(const char *path, int fd, const char *build_id, uid_t uid);
void symfile_put(struct symfile *f);
/* Another reference to f. */
struct symfile *symfile_ref(struct symfile *f);
/* f's cache key: its build ID and its identity as a file (device, inode, size, mtime), so
 * that two users' files share nothing unless they are the same file. */
const char *symfile_key_of(const struct symfile *f);
/* A new descriptor (close-on-exec) of the very file f was opened from (the inode the process
 * maps, reached through /proc/PID/map_files), or -1. */
int symfile_dup_fd(const struct symfile *f);
/* f's own descriptor of that file, open while f is referenced: for pread only. */
int symfile_fd(const struct symfile *f);
/* The .debug_frame of the separate debug file the symbolizer finds for f (looked for now if
 * it was not yet: build ID, .gnu_debuglink, debuginfod), as libelf gives it (*compressed when
 * it is SHF_COMPRESSED), in a malloc'd copy of *size bytes; NULL when f carries its own DWARF,
 * has no debug file, or that has no .debug_frame. */
void *symfile_debug_frame(struct symfile *f, size_t *size, bool *compressed);
/* Resolve pc (an address in the process) inside mapping m; callers pass a return
 * address minus 1. Strings stay valid while the symfile is referenced. Returns the number
 * of frames (0: no symbol covers pc; the has_* flags are filled even then, and for a pc
 * outside m, which costs no lookup), or -ENOMEM. */
int symbolize_pc(const struct mapping *m, uint64_t pc, struct sym_result *out);
/* Ask for pcs[i] in maps[i] (NULL: none) ahead of symbolize_pc, in batches per file. */
void symbolize_many(const struct mapping *const *maps, const uint64_t *pcs, size_t n);
/* symhelper.c, for tests: the pid of uid's running helper (0: none); the per-message
 * timeout and the first restart backoff (0: the defaults, 30 s and 250 ms). */
pid_t symhelper_pid(uid_t uid);
void symhelper_set_timing(unsigned timeout_ms, unsigned backoff_ms);
/* The calling thread never waits long for a helper (the drain thread). */
void symhelper_no_wait(bool on);
/* Kill and reap every helper, stopped ones too (the server stops; a later request starts a
 * new one). */
void symhelper_stop_all(void);

/* ---- profile.c + pprof.c, text.c, folded.c, top.c: the output formats ------------------ */

struct psample {
	const struct stack *stack;
	uint64_t size;
	uint64_t rate;
	uint64_t alloc_objects, alloc_bytes;
	uint64_t free_objects, free_bytes;
};

/* In-use accounting of a profile (inuse.c). */
struct inuse_counts {
	uint64_t untracked; /* sampled objects the shim could not track (table full) */
	uint64_t unmatched; /* live entries whose bucket is unknown (record lost or capped) */
	uint64_t pending;   /* live entries whose record was not drained yet */
	uint64_t unscanned; /* slots past the scan's budget (the process's samples), not read */
};

enum profile_inuse {
	PROFILE_INUSE_UNKNOWN = 0,   /* not said (tests, merged profiles) */
	PROFILE_INUSE_TRACKED = 1,   /* in-use values are the live sampled objects */
	PROFILE_INUSE_UNTRACKED = 2, /* the process sent no live table: in-use = allocated */
};

struct profile_meta {
	pid_t pid;
	char comm[LLGO_COMM_LEN];
	uint64_t time_nanos;     /* when the snapshot was taken (CLOCK_REALTIME) */
	uint64_t duration_nanos; /* delta profiles */
	uint64_t rate;           /* public rate in force */
	bool mixed_rates;        /* samples were taken at more than one rate */
	uint64_t sampled, delivered, dropped, corrupt;
	/* Parts of dropped (see struct ring_account). */
	uint64_t dropped_prior, dropped_no_ring, dropped_detached;
	uint64_t reconnects; /* the shim reattached after losing its daemon */
	uint64_t cap_hits;
	uint64_t verify_samples, verify_agree; /* --verify-every (verify.c); 0 when off */
	int inuse; /* enum profile_inuse */
	struct inuse_counts inuse_counts;
	uint32_t unwind_mode;              /* enum llgo_unwind_mode */
	uint64_t unwound, truncated;       /* stacks unwound by the daemon; not to the start */
	/* A peak profile (peak.c): its samples' in-use values are those of the scan with the
	 * highest in-use total; time_nanos is that scan's. */
	struct profile_peak {
		bool on;
		bool at_exit;          /* the values frozen at exit were the highest */
		uint64_t bytes, objects; /* scaled totals of that scan */
		uint64_t after_ns;     /* its time after the process attached */
		uint64_t bound;        /* the in-use total was at most this in between scans */
		uint64_t scans;        /* scans made for the peak so far */
	} peak;
};

struct profile {
	struct profile_meta meta;
	struct psample *samples;
	size_t nsamples;
	struct stack **owned; /* stacks made by profile_trim, freed with the profile */
	size_t nowned;
};

/* Copy the current counters of every bucket (stacks are borrowed from the table). */
int profile_collect(struct profile *p, struct bucket_table *t);
/* The same as of a cut of t (bucket_table_cut; 0: now). Sets no meta. */
int profile_collect_cut(struct profile *p, struct bucket_table *t, uint64_t cut);
/* p := p - base, matched by (stack, size, rate); for delta profiles. */
int profile_subtract(struct profile *p, const struct profile *base);
void profile_release(struct profile *p);
/* Drop the leading frames of every sample whose function matches one of the patterns (an
 * exact name, or a prefix when the pattern ends in '*'), as Go hides runtime.* frames, and
 * those in a C++ operator new (a replacement, or the next one in the shim's forward mode);
 * a stack that would lose every frame is kept whole. */
int profile_trim(struct profile *p, struct procmaps *maps, char *const *patterns, size_t n);
/* The writers, one per format (snapshot.c's snapshot_write picks one). */
int pprof_write(struct buf *out, const struct profile *p, struct procmaps *maps,
		uint32_t flags);
int text_write(struct buf *out, const struct profile *p, struct procmaps *maps);
int folded_write(struct buf *out, const struct profile *p, struct procmaps *maps,
		 uint32_t flags);
int top_write(struct buf *out, const struct profile *p, struct procmaps *maps, uint32_t flags,
	      uint32_t top_n);
int sites_write(struct buf *out, const struct profile *p, struct procmaps *maps);

/* Go's scaleHeapSample: the unbiased estimate of (count, size) sampled at rate. */
void profile_scale(uint64_t count, uint64_t size, uint64_t rate, int64_t *out_count,
		   int64_t *out_size);

/* Helpers shared by the writers (profile.c). */
struct profile_values {
	int64_t alloc_objects, alloc_bytes, inuse_objects, inuse_bytes;
};
/* s's values scaled with its own rate, alloc and in-use pairs separately (in-use may be
 * negative in a delta profile). */
void profile_sample_scaled(const struct psample *s, struct profile_values *out);
/* s's raw values; a pair whose count is 0 gets 0 bytes. */
void profile_sample_raw(const struct psample *s, struct profile_values *out);
/* Order of p->samples (indices) grouping equal (stack, size) together; *ngroups gets the
 * number of groups and starts[g] the first position of group g (starts[ngroups] = n). */
int profile_group(const struct profile *p, size_t **order, size_t **starts, size_t *ngroups);
/* Whether samples were taken at more than one rate (meta or samples say so). */
bool profile_mixed_rates(const struct profile *p);
/* The one rate to state for p: the samples' rate, the one covering the most raw bytes
 * when mixed, meta.rate when there are no samples. */
uint64_t profile_main_rate(const struct profile *p);
/* Symbolize the frame at return address pc (looked up at pc - 1, inside the call): *m gets
 * its mapping (NULL if none) and r its inline chain; returns r's frame count (0: unknown). */
int profile_frame(struct procmaps *maps, uint64_t pc, const struct mapping **m,
		  struct sym_result *r);
/* Leave the C++ operators new out of the front of r's inline chain (a replacement inlined
 * into its caller: the call into malloc is inside it), never its physical function; the
 * new frame count. profile_frame does it; a writer calling symbolize_pc does it too. */
int profile_hide_new_inlines(struct sym_result *r);
/* Symbolize every frame of p's stacks ahead of profile_frame, in batches. */
void profile_prefetch(const struct profile *p, struct procmaps *maps);
/* "llgo-heap: sampled=N delivered=N dropped=N corrupt=N" (no newline). */
int profile_accounting(struct buf *b, const struct profile *p);
/* The comment lines of the text formats: "# " + the accounting, the unwind line and the
 * peak line (those two when they have something to say), each ending in a newline. */
void profile_comment_lines(struct buf *b, const struct profile *p);
/* "llgo-heap: unwind=MODE unwound=N truncated=N" (no newline) when the shim stated its mode
 * or stacks were unwound; returns the bytes written (0: nothing to state) or -ENOMEM. */
int profile_unwind_line(struct buf *b, const struct profile *p);
/* "llgo-heap: peak inuse_space=N ..." (no newline) for a peak profile (meta.peak.on, filled
 * by peak.c); returns the bytes written (0: not a peak profile) or -ENOMEM. */
int profile_peak_line(struct buf *b, const struct profile *p);
/* A name for an address no symbol covers: "file+0xoff" (basename, file offset) inside a
 * mapping, else "0x<addr>". */
void profile_addr_name(char *out, size_t n, const struct mapping *m, uint64_t addr);

#endif
