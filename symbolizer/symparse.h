/* SPDX-License-Identifier: MIT */
/*
 * symparse.h: one ELF file parsed with libdwfl/libdw, in the sandboxed symbolizer process
 * (symserver.c) or in a fuzz harness. Nothing here opens a file: the file comes as a
 * descriptor and its separate debug files through a callback (the daemon finds them).
 */
#ifndef LLGO_SYMBOLIZER_SYMPARSE_H
#define LLGO_SYMBOLIZER_SYMPARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "../shared/symproto.h"

/* A separate debug file for the file being parsed: its .gnu_debuglink name and CRC (crc 0:
 * none), or for a DWARF alternate file (dwz) its .gnu_debugaltlink name and build ID (hex,
 * alt_build_id non-NULL). Returns a descriptor the parser then owns, or -1. */
typedef int (*symparse_find_fn)(void *arg, const char *name, uint32_t crc,
				const char *alt_build_id);

struct symparse_flags {
	bool functions, filenames, lines, inlines; /* pprof's Mapping.has_* */
};

struct symparse_file;

/* Parse the ELF file behind fd (owned from now on, closed on failure): NULL when it is none. */
struct symparse_file *symparse_open(int fd, symparse_find_fn find, void *arg);
void symparse_close(struct symparse_file *f);
/* The frames at file offset off, leaf first, into fr[SYM_MAX_INLINE]; *entry_back the
 * distance from the physical function's entry to the address (UINT64_MAX: unknown).
 * Strings point into the parser's data, valid until symparse_close. Returns the count. */
int symparse_lookup(struct symparse_file *f, uint64_t off, struct sym_frame *fr,
		    uint64_t *entry_back);
/* What the file can tell now (a lookup may find a debug file and change it). */
void symparse_flags(struct symparse_file *f, struct symparse_flags *out);

#endif
