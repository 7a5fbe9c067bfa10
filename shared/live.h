/* SPDX-License-Identifier: MIT */
/*
 * live.h: the table of live sampled objects, shared between a profiled process and llgo-heapd.
 *
 * The shim inserts every sampled object it tracks (after its ALLOC record was pushed) and
 * deletes it when the program frees it (free, realloc, C++ delete through free), before the
 * real free, so a reused address never meets a stale entry. The daemon never changes the
 * table: at a snapshot it reads which objects are live and attributes each to its bucket, so
 * in-use values need no FREE records (none can be lost in a full ring) and a restarted daemon
 * that maps the table again still knows what is live.
 *
 * Layout: one memfd of LLGO_LIVE_MAP_SIZE bytes (sparse: pages are touched only as entries
 * land on them), sealed against shrinking. A header page, then LLGO_LIVE_LEVELS levels; level
 * k holds LLGO_LIVE_LEVEL0 << k entries of 32 bytes. An address's home slot in a level is a
 * multiplicative hash of addr >> 4; it lives within LLGO_LIVE_PROBE slots from home (wrapping
 * inside the level). Inserts try the top level in use, then the lower ones (reusing their
 * tombstones); when every window is full they raise top (only ever up) before filling the
 * new level. Lookups search levels top..0.
 *
 * Entry words: addr is the object's address, or LLGO_LIVE_EMPTY (never used),
 * LLGO_LIVE_TOMB (deleted, reusable) or LLGO_LIVE_BUSY (claimed, being written). An inserter
 * claims a slot by CAS from EMPTY/TOMB to BUSY, writes key, ref and size, then stores addr
 * with release; the daemon loads addr with acquire, copies the fields, and re-loads addr to
 * drop an entry that changed meanwhile. A deleter (the thread freeing the object: only one
 * may) swaps addr to TOMB.
 *
 * key = llgo_live_key(frames, nframes, size, rate) of the object's ALLOC record: the daemon
 * computes the same over each bucket to attribute entries. ref = ring id << 48 | the record's
 * seq (low 48 bits): an entry whose record the daemon has not drained yet is skipped, and one
 * with ring id LLGO_LIVE_RING_NONE (kept by a fork child for its parent's objects) too.
 * Everything here is hostile to the daemon: it copies and range-checks, and its geometry is
 * its own (these constants), never read from the header.
 */
#ifndef LLGO_SHARED_LIVE_H
#define LLGO_SHARED_LIVE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define LLGO_LIVE_MAGIC 0x3156494c48474c4cULL /* "LLGHLIV1" */
#define LLGO_LIVE_VERSION 1u
#define LLGO_LIVE_HEADER_SIZE 4096u
#define LLGO_LIVE_LEVEL0 1024u /* entries in level 0 (32 KiB) */
#define LLGO_LIVE_LEVELS 14u   /* 16 M entries in all, 512 MiB of address space */
#define LLGO_LIVE_PROBE 16u    /* slots searched from home in one level */

#define LLGO_LIVE_EMPTY 0ull
#define LLGO_LIVE_TOMB 1ull
#define LLGO_LIVE_BUSY 2ull

#define LLGO_LIVE_REF(ring_id, seq) (((uint64_t)(ring_id) << 48) | ((seq) & 0xffffffffffffull))
#define LLGO_LIVE_REF_RING(ref) ((uint32_t)((ref) >> 48))
#define LLGO_LIVE_REF_SEQ(ref) ((ref) & 0xffffffffffffull)

struct llgo_live_entry {
	_Atomic uint64_t addr;
	uint64_t key;
	uint64_t ref;
	uint64_t size; /* bytes the program asked for (low 48 bits), and the offset of the
			  address inside the real allocator's block (high 16 bits; shim-only) */
};

#define LLGO_LIVE_SIZE(v) ((v) & 0xffffffffffffull)
#define LLGO_LIVE_OFF(v) ((uint32_t)((v) >> 48))
#define LLGO_LIVE_SIZE_OFF(size, off) (((uint64_t)(off) << 48) | ((size) & 0xffffffffffffull))
/* ref of an entry inherited across fork: no record of this process; the daemon skips it. */
#define LLGO_LIVE_RING_NONE 0xffffu

struct llgo_live_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint32_t levels; /* LLGO_LIVE_LEVELS */
	uint32_t level0; /* LLGO_LIVE_LEVEL0 */
	uint8_t pad0[40];
	/* Shim-written, hints and counters for the daemon. */
	_Atomic uint32_t top;       /* highest level holding entries */
	uint32_t reserved;
	_Atomic uint64_t untracked; /* sampled objects no slot could be found for */
	_Atomic uint64_t untracked_bytes;
	uint64_t reserved1[2];      /* (per-insert counters would be a line every thread
				       writes on every sample: none) */
};

_Static_assert(sizeof(struct llgo_live_entry) == 32, "live entry size");
_Static_assert(offsetof(struct llgo_live_header, top) == 64, "top offset");
_Static_assert(offsetof(struct llgo_live_header, untracked) == 72, "untracked offset");
_Static_assert(sizeof(struct llgo_live_header) <= LLGO_LIVE_HEADER_SIZE, "header fits");

/* Entries before level k. */
static inline uint64_t llgo_live_level_start(uint32_t k)
{
	return (uint64_t)LLGO_LIVE_LEVEL0 * (((uint64_t)1 << k) - 1);
}

#define LLGO_LIVE_ENTRIES ((uint64_t)LLGO_LIVE_LEVEL0 * ((1ull << LLGO_LIVE_LEVELS) - 1))
#define LLGO_LIVE_MAP_SIZE \
	((uint64_t)LLGO_LIVE_HEADER_SIZE + LLGO_LIVE_ENTRIES * sizeof(struct llgo_live_entry))

/* Home slot of addr in level k (its size is a power of two). */
static inline uint64_t llgo_live_home(uint64_t addr, uint32_t k)
{
	uint64_t h = (addr >> 4) * 0x9e3779b97f4a7c15ULL;
	uint32_t bits = 10u + k; /* log2(LLGO_LIVE_LEVEL0 << k) */
	return h >> (64u - bits);
}
_Static_assert(LLGO_LIVE_LEVEL0 == 1024u, "llgo_live_home assumes 2^10 entries in level 0");

/* The identity of an ALLOC record's bucket: its frames, size and rate (FNV-1a over words with
 * a final mix). Both sides must compute it over the same frames: those in the record. The
 * shim keeps the frames' part for a stack it sees again (llgo_live_key_frames). */
static inline uint64_t llgo_live_key_frames(const uint64_t *frames, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ n;
	for (uint32_t i = 0; i < n; i++) {
		h ^= frames[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static inline uint64_t llgo_live_key_finish(uint64_t h, uint64_t size, uint64_t rate)
{
	h ^= size;
	h *= 0x100000001b3ULL;
	h ^= rate;
	h *= 0x9e3779b97f4a7c15ULL;
	h ^= h >> 29;
	return h;
}

static inline uint64_t llgo_live_key(const uint64_t *frames, uint32_t n, uint64_t size,
				     uint64_t rate)
{
	return llgo_live_key_finish(llgo_live_key_frames(frames, n), size, rate);
}

#endif
