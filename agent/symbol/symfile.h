/* SPDX-License-Identifier: MIT */
/*
 * symfile.h: one ELF file as the daemon holds it for the symbolizer, shared by symfile.c (the
 * cache of files, finding debug files), symbolize.c (answers and their memo) and symhelper.c
 * (the sandboxed process that parses the file). The daemon never parses the file itself.
 * The public side (symfile_get/_put/_ref, symbolize_pc) is in internal.h.
 */
#ifndef LLGO_AGENT_SYMFILE_H
#define LLGO_AGENT_SYMFILE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../internal.h"

/* Answers remembered by file offset (symbolize.c): open addressing. */
struct symfile_memo_entry {
	uint64_t key;
	uint64_t entry_back; /* the address minus its function's entry; UINT64_MAX: unknown */
	int nframes;
	struct sym_frame frames[]; /* strings from the file's string table */
};
struct symfile_memo {
	struct symfile_memo_entry **slots;
	size_t cap, n;
};

/* Every string an answer held, copied once and kept for the file's life (symbolize.c). */
struct symfile_strings {
	char **slots;
	size_t cap, n, bytes;
};

struct symfile {
	struct symfile *next; /* the cache of files, under symfile.c's lock */
	unsigned long refs;   /* under symfile.c's lock */
	char *key;

	/* Immutable once published. */
	uid_t uid;          /* the uid whose helper parses it: files are never shared across uids */
	int fd;             /* ours: the file as the process maps it */
	char *path;         /* where the process found it, for the .gnu_debuglink search; or NULL */
	char build_id[80];  /* lowercase hex, "" when none */
	dev_t dev;          /* the file's, so it is never its own debug file */
	ino_t ino;
	/* symfile_find_debug: symhelper.c, which symfile.c calls, reaches it through here when
	 * the helper asks for a debug file (no call back up into symfile.c) */
	int (*find_debug)(struct symfile *f, const char *name, uint32_t crc,
			  const char *alt_build_id);

	/* Under its uid's helper lock (symhelper.c). */
	uint32_t helper_id;  /* its id in the helper */
	uint64_t helper_gen; /* the helper generation it was sent to; 0: none yet */
	int debug_fd;        /* the separate debug file found for it, or -1 */

	pthread_mutex_t lock; /* everything below */
	bool flags_known;     /* has_* below came from the helper */
	bool not_elf;         /* the helper found no ELF file: never asked again */
	bool suspect;         /* a batch of it failed the helper: asked one address at a time */
	bool has_functions, has_filenames, has_lines, has_inlines;
	struct symfile_memo results; /* by file offset */
	struct symfile_strings strings;
};

/* A frame of the helper's answer: strings with their lengths (not NUL-terminated), NULL when
 * absent; valid only during the callback. */
struct symhelper_frame {
	const char *function, *file;
	uint32_t function_len, file_len;
	int line, start_line;
};
/* The answer for offs[i]: nframes frames, leaf first (nframes < 0: not answered this time). */
typedef void (*symhelper_answer_fn)(void *arg, size_t i, int nframes,
				    const struct symhelper_frame *fr, uint64_t entry_back);

/*
 * symhelper.c: ask f's uid's sandboxed helper about n file offsets of f (n may be 0: only the
 * file's flags are wanted). Answers go to fn in order; *flags gets SYMPROTO_HAS_* bits.
 * Returns 0; -ENOEXEC when f is no ELF file; -EIO when the helper crashed, hung or spoke
 * wrongly serving this request (logged; these addresses may be the cause); -EAGAIN when no
 * helper could take it (starting failed, backing off, or busy for the drain thread).
 */
int symhelper_lookup(struct symfile *f, const uint64_t *offs, size_t n, symhelper_answer_fn fn,
		     void *arg, uint32_t *flags);
/* f is being destroyed: its helper forgets it at the next request. */
void symhelper_forget(struct symfile *f);

/* symfile.c: a separate debug file for f, found where the daemon may look (the helper asked
 * for it: name and crc from f's .gnu_debuglink, or for a DWARF alternate file its name and
 * hex build ID); a descriptor safe to hand to the helper, or -1. symhelper.c calls it as
 * f->find_debug. */
int symfile_find_debug(struct symfile *f, const char *name, uint32_t crc,
		       const char *alt_build_id);

/* symhelper.c: a new descriptor of f's separate debug file for the unwinder (under f's
 * helper lock): the one found for the helper, else symfile_find_debug with f's
 * .gnu_debuglink (link_name may be NULL: by build ID only); -1 when none, or when the calling
 * thread does not wait (symhelper_no_wait) and the helper is busy. */
int symhelper_debug_fd(struct symfile *f, const char *link_name, uint32_t crc);

/* symbolize.c: free what was remembered for f (f is being destroyed). */
void symbolize_forget(struct symfile *f);

#endif
