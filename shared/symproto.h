/* SPDX-License-Identifier: MIT */
/*
 * symproto.h: the messages between llgo-heapd (agent/symbol/symhelper.c) and its sandboxed
 * symbolizer process (symbolizer/symserver.c), over a SOCK_STREAM socketpair, native byte
 * order (both ends are one build). Each message is a struct symproto_hdr and len bytes of
 * body; descriptors travel with the header (SCM_RIGHTS), daemon to helper only.
 *
 *   helper -> daemon  READY     once sandboxed, before reading anything
 *   daemon -> helper  LOOKUP    struct symproto_lookup, then n uint64_t file offsets; with the
 *                               file's descriptor when open is set (the id is new, or the
 *                               helper restarted); n may be 0 (only the flags are wanted)
 *   helper -> daemon  FIND      while a LOOKUP is served: a debug file is wanted
 *                               (struct symproto_find, then the name, then the hex build ID)
 *   daemon -> helper  FOUND     struct symproto_found, with a descriptor when have is set
 *   helper -> daemon  ANSWER    struct symproto_answer, then per address struct
 *                               symproto_addr and its frames (struct symproto_frame, then the
 *                               function's and the file's bytes, no NUL)
 *   daemon -> helper  CLOSE     struct symproto_close: the id is forgotten
 *
 * The daemon trusts nothing in what the helper sends: every count and length is checked
 * against the message and the limits below, and strings are copied.
 */
#ifndef LLGO_SHARED_SYMPROTO_H
#define LLGO_SHARED_SYMPROTO_H

#include <stdint.h>

enum symproto_type {
	SYMPROTO_READY = 1,
	SYMPROTO_LOOKUP,
	SYMPROTO_FIND,
	SYMPROTO_FOUND,
	SYMPROTO_ANSWER,
	SYMPROTO_CLOSE,
};

/* The largest message either way, the most addresses in one LOOKUP, the longest string. */
#define SYMPROTO_MSG_MAX (16u << 20)
#define SYMPROTO_BATCH_MAX 4096u
#define SYMPROTO_STR_MAX 65536u
/* A string that is absent (a frame with no file). */
#define SYMPROTO_STR_NONE UINT32_MAX
/* The helper's exit status when it stopped because it was idle (not a failure). */
#define SYMPROTO_EXIT_IDLE 0
/* The helper's file descriptor for its socket. */
#define SYMPROTO_FD 3

struct symproto_hdr {
	uint32_t type, len;
};

struct symproto_lookup {
	uint32_t id, open, n, pad;
};

struct symproto_find {
	uint32_t id, crc;
	uint32_t name_len, build_id_len; /* build_id_len > 0: a DWARF alternate file */
};

struct symproto_found {
	uint32_t id, have;
};

/* status: 0, or an errno (ENOEXEC: not an ELF file; ENOENT: an id the helper does not hold). */
enum symproto_flag {
	SYMPROTO_HAS_FUNCTIONS = 1,
	SYMPROTO_HAS_FILENAMES = 2,
	SYMPROTO_HAS_LINES = 4,
	SYMPROTO_HAS_INLINES = 8,
};
struct symproto_answer {
	uint32_t id, status, flags, n;
};

struct symproto_addr {
	uint64_t entry_back; /* the address minus its function's entry; UINT64_MAX: unknown */
	uint32_t nframes, pad;
};

struct symproto_frame {
	int32_t line, start_line;
	uint32_t function_len, file_len; /* SYMPROTO_STR_NONE: absent */
};

struct symproto_close {
	uint32_t id;
};

/* The frames of one address as either end holds them in its own memory, decoded: the most
 * one address answers with (SYM_MAX_INLINE: its inline chain, leaf first, the last being the
 * physical function) and one frame (strings are that end's own). Never sent as such: struct
 * symproto_frame and its bytes are what crosses. */
#define SYM_MAX_INLINE 16

struct sym_frame {
	const char *function; /* NULL when no symbol covers the address */
	const char *file;     /* NULL when unknown */
	int line;             /* 0 when unknown */
	int start_line;       /* line of the function's declaration, 0 when unknown */
};

#endif
