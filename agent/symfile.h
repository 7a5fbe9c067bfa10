/* SPDX-License-Identifier: MIT */
/*
 * symfile.h: one ELF file as the symbolizer holds it, shared by symfile.c (opening the file,
 * its Dwfl and debug file, the cache of files) and symbolize.c (lookups and their memos).
 * The public side (symfile_get/_put/_ref, symbolize_pc) is in internal.h.
 */
#ifndef LLGO_AGENT_SYMFILE_H
#define LLGO_AGENT_SYMFILE_H

#include <elfutils/libdwfl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

struct symfile_seg {
	uint64_t offset, vaddr, filesz;
};

/* Answers remembered by a 64-bit key (symbolize.c): open addressing. */
struct symfile_memo_entry {
	uint64_t key;
	uint64_t entry; /* file address of the physical function, 0 when unknown */
	int nframes;
	struct sym_frame frames[];
};
struct symfile_memo {
	struct symfile_memo_entry **slots;
	size_t cap, n;
};

/* A function symbol from libdwfl's table (symbolize.c). */
struct symfile_func {
	uint64_t start, end; /* file addresses, [start, end) */
	const char *name;
	uint8_t bind; /* STB_* */
};

enum symfile_debug { SYMFILE_DEBUG_UNSEARCHED, SYMFILE_DEBUG_NONE, SYMFILE_DEBUG_FOUND };

struct symfile {
	struct symfile *next; /* the cache of files, under symfile.c's lock */
	unsigned long refs;   /* under symfile.c's lock */
	char *key;

	/* Immutable once published. */
	int fd;     /* ours; every libelf handle on the file reads through a dup of it */
	char *path; /* where the process found it, for the .gnu_debuglink search; or NULL */
	struct symfile_seg *segs; /* PT_LOAD */
	size_t nsegs;
	uint64_t low, high; /* the module's file addresses (libdwfl's bias is 0) */
	bool main_has_syms, main_has_dwarf;

	pthread_mutex_t lock; /* everything below: libdwfl is not thread-safe */
	Dwfl *dwfl;
	Dwfl_Module *mod;
	enum symfile_debug debug;
	bool dwarf_tried;
	Dwarf *dwarf; /* owned by the Dwfl */
	Dwarf_Addr bias;
	bool cu_walk; /* no .debug_aranges: compile units are found by their ranges */
	struct symfile_memo results; /* by file address */
	struct symfile_memo paths;   /* absolute file names (frames[0].file, owned) by libdw's */
	bool funcs_built;
	struct symfile_func *funcs; /* sorted by start, one per range */
	uint64_t *funcs_maxend;     /* funcs_maxend[i] = max(funcs[0..i].end) */
	char *funcs_names;          /* names without their symbol version */
	size_t nfuncs;
};

/* Whether f's own DWARF may be given to libdw (its string sections end inside them): reads
 * those sections, so asked once, at the first lookup that needs DWARF. */
bool symfile_dwarf_ok(const struct symfile *f);
/* Free what symbolize.c remembered for f (f is being destroyed). */
void symbolize_forget(struct symfile *f);

#endif
