/* SPDX-License-Identifier: MIT */
/*
 * ring.h: the shared-memory contract between a profiled process and llgo-heapd.
 *
 * Two kinds of shared mappings cross the process boundary, both memfds created by the shim
 * and handed to the daemon with SCM_RIGHTS:
 *   - one control page per process (struct llgo_ctl): the sampling rate the daemon may
 *     change, and counters for samples that found no ring;
 *   - one ring per sampling thread (struct llgo_ring_header followed by data_size bytes):
 *     a single-producer single-consumer byte ring of variable-length records.
 *
 * Positions (head, tail) are free-running byte counts; the byte at position p lives at
 * data[p & (data_size - 1)], and a record may wrap around the end of the data area.
 * The producer (the thread that owns the ring) writes records and publishes head; the daemon
 * copies records out and publishes tail. The daemon trusts nothing read from here: it keeps
 * its own copy of tail and of the geometry, and validates every record after copying it.
 *
 * This header holds layout, constants and the small inline helpers both sides must agree on
 * (record checksum, wrapped copies). Producer logic lives in shim/emit.c, consumer logic in
 * agent/ingest/drain.c.
 */
#ifndef LLGO_SHARED_RING_H
#define LLGO_SHARED_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- Control page --------------------------------------------------------------------- */

#define LLGO_CTL_MAGIC 0x314c544348474c4cULL /* "LLGHCTL1" */
#define LLGO_CTL_VERSION 2u
/* The control structure's size. In the memfd it occupies the first page (4 KiB .. 64 KiB:
 * the shim's run-time page size, ctl.page_size); rings follow (llgo_ring_offset). */
#define LLGO_CTL_SIZE 4096u
/* Largest page size the layout allows (arm64 and ppc64 kernels use 16K or 64K pages): the
 * shim reserves this much, aligned, so that one page of any size can be mapped over it. */
#define LLGO_PAGE_MAX (64u << 10)
#define LLGO_PAGE_MIN 4096u
#define LLGO_CTL_PATH_LEN 108u /* sizeof(sun_path) */

/*
 * rate_word encodes the sampling rate for the shim's fast path in one load:
 *   0         sampling off (the fast path touches no TLS);
 *   negative  every allocation is recorded (the public rate 1);
 *   > 1       mean bytes between samples.
 * The public rate 1 is stored as LLGO_RATE_WORD_EVERY so that "every allocation" needs no
 * extra compare on the fast path (see shim/override.c).
 */
#define LLGO_RATE_WORD_EVERY (-1LL)
#define LLGO_RATE_DEFAULT 524288ULL
#define LLGO_RATE_MAX (1ULL << 40)

static inline int64_t llgo_rate_to_word(uint64_t rate)
{
	if (rate == 1)
		return LLGO_RATE_WORD_EVERY;
	if (rate > LLGO_RATE_MAX)
		rate = LLGO_RATE_MAX;
	return (int64_t)rate;
}

static inline uint64_t llgo_rate_from_word(int64_t word)
{
	if (word < 0)
		return 1;
	return (uint64_t)word;
}

/* The shim's connection state (ctl.shim_state; shim/lifecycle.c owns the transitions). */
enum llgo_shim_state {
	LLGO_SHIM_DETACHED = 0,  /* no daemon at start: rate 0, nothing shared */
	LLGO_SHIM_ATTACHING = 1, /* a connection is being set up (or a fork child waits to) */
	LLGO_SHIM_ATTACHED = 2,  /* HELLO sent; records go to rings */
	LLGO_SHIM_LOST = 3,      /* a send failed: no stack walks, samples counted, reconnects */
	LLGO_SHIM_OFF = 4,       /* sandboxed (seccomp) or closed for good: no syscalls */
};

#define LLGO_CTL_ROOTS 16u
#define LLGO_CTL_FP_RANGES 224u

struct llgo_ctl {
	uint64_t magic;
	uint32_t version;
	uint32_t size;
	/* Written by the shim at start and by the daemon (`llgo-heap rate`); read by every
	 * malloc with a relaxed load. A change needs no ordering with anything else. */
	_Atomic int64_t rate_word;
	/* Samples the shim took but could not place in any ring (no ring could be created or
	 * claimed, or the thread was exiting). Counted as sampled and dropped. Shim-written. */
	_Atomic uint64_t lost_no_ring;
	/* Number of rings the shim has created (ring ids are 0 .. ring_count - 1 in the
	 * memfd). Store-release by the shim after a ring's header is formatted; a daemon that
	 * re-adopts the process loads it with acquire. */
	_Atomic uint32_t ring_count;
	uint32_t ring_data_size;
	/* Number of rate changes the daemon applied; daemon-written. */
	_Atomic uint64_t rate_changes;
	/* ---- version 2 ---- */
	uint32_t page_size;          /* the shim's page size: the memfd layout's unit */
	_Atomic uint32_t shim_state; /* enum llgo_shim_state; shim-written, informational */
	/* Samples taken while the shim had no daemon to give them to (LOST, or attaching).
	 * Counted as sampled and dropped. Shim-written. */
	_Atomic uint64_t lost_detached;
	/* The rate the process wants while attached: the shim's start rate, then every rate a
	 * daemon set. While LOST the shim keeps rate_word for counting only; a daemon that
	 * re-adopts the process restores rate_word from here. */
	_Atomic int64_t want_rate_word;
	/* Incremented by a daemon that re-adopted the process without a connection (found its
	 * memfd itself); the shim then reconnects from its next slow path. */
	_Atomic uint64_t adopt_gen;
	/* Daemon-written: 1 while a drained pc lies outside the mappings the daemon read (it
	 * needs /proc/PID/maps again). With this 0 and every ring drained, the shim exits
	 * without waiting for the daemon. */
	_Atomic uint32_t maps_stale;
	/* Daemon-written: incremented when the daemon has read the process's mappings and at
	 * each drain, so that a shim waiting at exit tells a slow daemon from a stopped one. */
	_Atomic uint32_t daemon_beat;
	_Atomic uint64_t reconnects; /* shim-written: successful reconnects, informational */
	/* Shim-written at attach: the daemon socket the process connects to. A daemon that
	 * searches for processes to take back after a restart takes only those of its own
	 * socket (several daemons may run on one host). NUL-terminated. */
	char socket_path[LLGO_CTL_PATH_LEN];
	uint32_t reserved1;
	/* LLGO_HEAP_UNWIND=auto (docs/design.md, "Unwinding"): daemon-written, read by the shim's
	 * sampled path. fp_ranges[0..fp_count) are sorted, disjoint code ranges whose CFI keeps
	 * frame pointers; root_pcs[0..root_count) are return addresses at which a frame-pointer
	 * walk may end because the daemon knows the rest of the stack from there. A sequence
	 * count guards both: the daemon makes fp_seq odd (release), writes, makes it even
	 * (release); the shim loads it (acquire) before and after reading and trusts nothing
	 * from a read that saw it odd or changed. */
	_Atomic uint32_t fp_seq;
	uint32_t fp_count;
	uint32_t root_count;
	uint32_t fp_pad;
	uint64_t root_pcs[LLGO_CTL_ROOTS];
	struct {
		uint64_t lo, hi;
	} fp_ranges[LLGO_CTL_FP_RANGES];
	/* Daemon-written at HELLO, never read by the shim (agent/server/vouch.c): the uid and gid the
	 * daemon verified the process as, and a tag over them, the process (pid, start time) and
	 * this memfd (device, inode), keyed with a secret only the daemons of this socket hold.
	 * A daemon that takes the process back after a restart (agent/server/adopt.c) recomputes the
	 * tag: a memfd no daemon vouched for, or one now held by another process, is not taken. */
	uint32_t vouch_uid;
	uint32_t vouch_gid;
	uint8_t vouch_tag[16];
	uint8_t reserved[LLGO_CTL_SIZE - 224 - 8 * LLGO_CTL_ROOTS - 16 * LLGO_CTL_FP_RANGES - 24];
};

_Static_assert(sizeof(struct llgo_ctl) == LLGO_CTL_SIZE, "control structure is 4 KiB");
_Static_assert(offsetof(struct llgo_ctl, rate_word) == 16, "rate_word offset");
_Static_assert(offsetof(struct llgo_ctl, lost_no_ring) == 24, "lost_no_ring offset");
_Static_assert(offsetof(struct llgo_ctl, ring_count) == 32, "ring_count offset");
_Static_assert(offsetof(struct llgo_ctl, rate_changes) == 40, "rate_changes offset");
_Static_assert(offsetof(struct llgo_ctl, page_size) == 48, "page_size offset");
_Static_assert(offsetof(struct llgo_ctl, lost_detached) == 56, "lost_detached offset");
_Static_assert(offsetof(struct llgo_ctl, want_rate_word) == 64, "want_rate_word offset");
_Static_assert(offsetof(struct llgo_ctl, adopt_gen) == 72, "adopt_gen offset");
_Static_assert(offsetof(struct llgo_ctl, maps_stale) == 80, "maps_stale offset");
_Static_assert(offsetof(struct llgo_ctl, daemon_beat) == 84, "daemon_beat offset");
_Static_assert(offsetof(struct llgo_ctl, reconnects) == 88, "reconnects offset");
_Static_assert(offsetof(struct llgo_ctl, socket_path) == 96, "socket_path offset");
_Static_assert(offsetof(struct llgo_ctl, fp_seq) == 208, "fp_seq offset");
_Static_assert(offsetof(struct llgo_ctl, root_pcs) == 224, "root_pcs offset");
_Static_assert(offsetof(struct llgo_ctl, fp_ranges) == 224 + 8 * LLGO_CTL_ROOTS, "fp_ranges offset");
_Static_assert(offsetof(struct llgo_ctl, vouch_uid) ==
		       224 + 8 * LLGO_CTL_ROOTS + 16 * LLGO_CTL_FP_RANGES, "vouch offset");

/* ---- Ring header ---------------------------------------------------------------------- */

#define LLGO_RING_MAGIC 0x31474e4948474c4cULL /* "LLGHRNG1" */
#define LLGO_RING_VERSION 1u
#define LLGO_RING_HEADER_SIZE 4096u
#define LLGO_RING_MIN_DATA 4096u
#define LLGO_RING_MAX_DATA (64u << 20)
#define LLGO_RING_DEFAULT_DATA (256u << 10)
/* Rings a process may register; samples beyond are counted in lost_no_ring. */
#define LLGO_MAX_RINGS 65536u

enum llgo_ring_state {
	LLGO_RING_OWNED = 1,   /* a live thread writes it */
	LLGO_RING_RETIRED = 2, /* its thread exited; reusable once the daemon drained it */
};

struct llgo_ring_header {
	/* Immutable after the shim sends the ring. */
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint64_t data_size; /* power of two, LLGO_RING_MIN_DATA..LLGO_RING_MAX_DATA */
	uint32_t ring_id;
	uint32_t reserved0;
	uint8_t pad0[32];

	/* Producer line, written only by the owning thread.
	 * head: bytes published. Store-release after the record bytes are written; pairs with
	 *   the daemon's load-acquire of head before it copies records out.
	 * sampled: samples taken by owners of this ring (delivered or dropped). Store-release
	 *   after head; the daemon loads it (acquire) before head, so every sample it counts
	 *   is either in [tail, head) or already in dropped.
	 * dropped: samples that did not fit. Stored (release) before sampled. */
	_Atomic uint64_t head;
	_Atomic uint64_t sampled;
	_Atomic uint64_t dropped;
	_Atomic uint32_t state;     /* enum llgo_ring_state; CAS by a claiming thread */
	_Atomic uint32_t owner_tid; /* informational */
	/* Non-zero while the owner waits for room (FUTEX_WAIT on the low 32 bits of tail; shim
	 * full.c). The daemon loads it after publishing tail and then wakes the futex. Each
	 * side's store is followed by a seq_cst fence before it loads the other's word. */
	_Atomic uint32_t waiting;
	uint8_t pad1[28];

	/* Consumer line, written only by the daemon.
	 * tail: bytes consumed. Store-release after the daemon copied the bytes out; pairs with
	 *   the producer's load-acquire of tail before it overwrites them. */
	_Atomic uint64_t tail;
	uint8_t pad2[56];
};

_Static_assert(sizeof(struct llgo_ring_header) == 192, "ring header size");
_Static_assert(offsetof(struct llgo_ring_header, data_size) == 16, "data_size offset");
_Static_assert(offsetof(struct llgo_ring_header, head) == 64, "head on its own line");
_Static_assert(offsetof(struct llgo_ring_header, sampled) == 72, "sampled offset");
_Static_assert(offsetof(struct llgo_ring_header, dropped) == 80, "dropped offset");
_Static_assert(offsetof(struct llgo_ring_header, state) == 88, "state offset");
_Static_assert(offsetof(struct llgo_ring_header, waiting) == 96, "waiting offset");
_Static_assert(offsetof(struct llgo_ring_header, tail) == 128, "tail on its own line");
_Static_assert(LLGO_RING_HEADER_SIZE >= sizeof(struct llgo_ring_header), "header fits");

/*
 * The process memfd (version 2): one memfd per process, created by the shim at attach, sealed
 * against shrinking (it only grows, so a mapping of it never faults), kept open by the shim
 * and sent with HELLO:
 *   [0, page)                              the control page (struct llgo_ctl)
 *   [llgo_ring_offset(id), + ring span)   ring `id`: header page(s), then data_size bytes
 * where page = ctl.page_size and the ring span is LLGO_RING_HEADER_SIZE + data_size rounded
 * up to the page. ADD_RING without a descriptor names a ring in this memfd by id.
 */
static inline uint64_t llgo_ring_span(uint64_t data_size, uint64_t page)
{
	return (LLGO_RING_HEADER_SIZE + data_size + page - 1) & ~(page - 1);
}

static inline uint64_t llgo_ring_offset(uint32_t ring_id, uint64_t data_size, uint64_t page)
{
	return page + (uint64_t)ring_id * llgo_ring_span(data_size, page);
}

static inline int llgo_page_size_ok(uint64_t page)
{
	return page >= LLGO_PAGE_MIN && page <= LLGO_PAGE_MAX && (page & (page - 1)) == 0;
}

/* ---- Records -------------------------------------------------------------------------- */

/*
 * Every record starts with struct llgo_record and is a multiple of 8 bytes long. kind and
 * version select the payload; a reader skips kinds it does not know by length, and counts
 * as corrupt a record whose checksum, length or fields do not hold.
 *
 *   LLGO_REC_ALLOC v1: payload = nframes return addresses (uint64_t), frame 0 is the
 *     allocating call site in the user's code.
 *   LLGO_REC_FREE v1 (reserved): a sampled block (addr) was freed; nframes = 0.
 *   LLGO_REC_ALLOC_RAW v1: as ALLOC (frames = the frame-pointer walk, a hint and a fallback),
 *     followed by struct llgo_raw_regs and raw.stack_len bytes of the thread's stack copied
 *     from raw.sp upward, for the daemon to unwind with DWARF CFI (agent/unwind/unwind.c). Its
 *     checksum covers the header, frames and registers, not the stack bytes (hashing KiBs on
 *     the sampled path would cost more than the copy; a torn stack byte gives a wrong stack,
 *     which the unwinder bounds like any other hostile input).
 */
enum llgo_record_kind {
	LLGO_REC_ALLOC = 1,
	LLGO_REC_FREE = 2,
	LLGO_REC_ALLOC_RAW = 3,
};

/* 3: each word mixed before it is summed (llgo_sum_word). Version 2 summed words folded only
 * (w ^ w >> 32), version 1 with a serial multiply chain; both fail the version 3 checksum. */
#define LLGO_REC_VERSION 3u
#define LLGO_MAX_FRAMES 64u

struct llgo_record {
	uint8_t kind;
	uint8_t version;
	uint16_t nframes;
	uint32_t length;   /* bytes including this header */
	uint64_t seq;      /* the ring's sampled count with this sample: gaps are drops */
	uint64_t size;     /* bytes the program asked for */
	uint64_t rate;     /* public rate in force when sampled (1 = every allocation) */
	uint64_t addr;     /* block address, for matching frees */
	uint32_t tid;      /* the sampling thread */
	uint32_t flags;
	uint64_t checksum; /* llgo_record_checksum() with this field zero */
	/* uint64_t frames[nframes]; */
};

_Static_assert(sizeof(struct llgo_record) == 56, "record header size");
_Static_assert(offsetof(struct llgo_record, seq) == 8, "seq offset");
_Static_assert(offsetof(struct llgo_record, size) == 16, "size offset");
_Static_assert(offsetof(struct llgo_record, rate) == 24, "rate offset");
_Static_assert(offsetof(struct llgo_record, checksum) == 48, "checksum offset");

#define LLGO_RECORD_MAX_LEN (sizeof(struct llgo_record) + 8u * LLGO_MAX_FRAMES)

/*
 * The machine state an ALLOC_RAW record starts unwinding from: the program's allocating call
 * site as if the allocation function had just returned to it. ip is that return address
 * (frame 0), sp the stack pointer after the return, bp the frame pointer register there
 * (callee-saved, so the caller's own value). Other registers are not recorded: at a call
 * site the only ones the CFI of the frames above can need to compute a CFA are sp and bp.
 * stack_hi is the end of the thread's stack (0: unknown). The stack copy covers
 * [sp, sp + stack_len); LLGO_RAW_CAPPED says it stopped at LLGO_HEAP_STACK_KB before
 * stack_hi, LLGO_RAW_ALTSTACK that sp was on a sigaltstack: the copy ends with the alternate
 * stack, and a second copy [stack2_lo, stack2_lo + stack2_len) holds the top of the thread's
 * own stack, where the interrupted code's frames are (0 bytes when none could be read).
 * The stack bytes follow the registers: first stack_len, then stack2_len.
 */
struct llgo_raw_regs {
	uint64_t ip;
	uint64_t sp;
	uint64_t bp;
	uint64_t stack_hi;
	uint32_t stack_len; /* multiple of 8, <= LLGO_RAW_MAX_STACK */
	uint32_t flags;     /* LLGO_RAW_* */
	uint64_t stack2_lo;
	uint32_t stack2_len; /* multiple of 8, <= LLGO_RAW_MAX_STACK; 0 unless ALTSTACK */
	uint32_t reserved;
};

_Static_assert(sizeof(struct llgo_raw_regs) == 56, "raw registers size");
_Static_assert(offsetof(struct llgo_raw_regs, stack_len) == 32, "stack_len offset");
_Static_assert(offsetof(struct llgo_raw_regs, stack2_lo) == 40, "stack2_lo offset");

/* llgo_record.flags of an ALLOC record: the sample wanted a stack copy (dwarf mode, or auto
 * mode with an untrusted frame-pointer walk) but could not have one (no room left in the
 * ring for it, or no exact start state): its frames are the frame-pointer walk alone, which
 * the daemon marks truncated unless it can complete it. */
#define LLGO_REC_FLAG_NO_COPY 1u

#define LLGO_RAW_CAPPED 1u
#define LLGO_RAW_ALTSTACK 2u
/* Largest stack copy a record may carry (LLGO_HEAP_STACK_KB is clamped to it). */
#define LLGO_RAW_MAX_STACK (256u << 10)
#define LLGO_RAW_DEFAULT_STACK (32u << 10)
#define LLGO_RECORD_RAW_MAX_LEN \
	(LLGO_RECORD_MAX_LEN + sizeof(struct llgo_raw_regs) + 2 * LLGO_RAW_MAX_STACK)

/* Bytes of an ALLOC_RAW record before its stack copy (what its checksum covers). */
static inline uint32_t llgo_record_raw_fixed_len(uint32_t nframes)
{
	return (uint32_t)(sizeof(struct llgo_record) + 8u * nframes +
			  sizeof(struct llgo_raw_regs));
}

static inline uint32_t llgo_record_alloc_len(uint32_t nframes)
{
	return (uint32_t)sizeof(struct llgo_record) + 8u * nframes;
}

/*
 * The record checksum: a Fletcher-style pair of running sums over the record's 64-bit words,
 * the checksum field counted as a zero word, mixed once at the end. Each word is first mixed
 * by a bijection (fold, multiply, fold: every input bit reaches most output bits), then
 * a += m and b += a: a sees every word, b weighs each by its distance from the end, so a
 * swapped or shifted word changes b. Summing words that were only folded was linear in
 * their bits: three flips such as +2^k at word i, -2^(k+1) at i+d and +2^k at i+2d cancel
 * in both sums, and a buggy writer's scribbles over a ring delivered such records a few
 * times a million (ring::torn_records_are_never_delivered failed 11 runs in 40). Mixed, a
 * damaged record passes only when the mixed differences happen to cancel in both sums.
 * Independent chains per word (the multiply is off the sums' add chains): cheap enough for
 * the writer to compute as it stores each word (emit_push_alloc). It is not a defence
 * against a malicious writer (who can compute it); it catches torn and stray writes from a
 * buggy one. Every field is still range-checked by the reader.
 */
struct llgo_sum {
	uint64_t a, b;
};

#define LLGO_SUM_INIT { 0x6c6c676f68656170ULL, 0 }
#define LLGO_REC_CHECKSUM_WORD (offsetof(struct llgo_record, checksum) / 8)

static inline void llgo_sum_word(struct llgo_sum *s, uint64_t w)
{
	uint64_t m = (w ^ (w >> 32)) * 0xbf58476d1ce4e5b9ULL;
	s->a += m ^ (m >> 29);
	s->b += s->a;
}

static inline uint64_t llgo_sum_final(const struct llgo_sum *s, uint32_t length)
{
	uint64_t h = (s->a ^ length) * 0x9e3779b97f4a7c15ULL ^ s->b;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	return h ^ (h >> 29);
}

static inline uint64_t llgo_record_checksum(const void *rec, uint32_t length)
{
	const unsigned char *p = (const unsigned char *)rec;
	struct llgo_sum s = LLGO_SUM_INIT;
	for (uint32_t off = 0; off + 8 <= length; off += 8) {
		uint64_t w;
		memcpy(&w, p + off, 8);
		if (off == offsetof(struct llgo_record, checksum))
			w = 0;
		llgo_sum_word(&s, w);
	}
	return llgo_sum_final(&s, length);
}

/* The first and sixth words of a record header as stored (byte order independent). */
static inline uint64_t llgo_record_word0(uint8_t kind, uint16_t nframes, uint32_t length)
{
	struct {
		uint8_t kind, version;
		uint16_t nframes;
		uint32_t length;
	} x = { kind, LLGO_REC_VERSION, nframes, length };
	uint64_t w;
	memcpy(&w, &x, 8);
	return w;
}

static inline uint64_t llgo_record_word5(uint32_t tid, uint32_t flags)
{
	uint32_t x[2] = { tid, flags };
	uint64_t w;
	memcpy(&w, x, 8);
	return w;
}

_Static_assert(offsetof(struct llgo_record, tid) == 40 && offsetof(struct llgo_record, addr) == 32,
	       "header words: kind..length, seq, size, rate, addr, tid|flags, checksum");

/* Copy len bytes into the ring at free-running position pos (mask = data_size - 1). */
static inline void llgo_ring_copy_in(unsigned char *data, uint64_t mask, uint64_t pos,
				     const void *src, uint32_t len)
{
	uint64_t off = pos & mask;
	uint64_t first = mask + 1 - off;
	if (first >= len) {
		memcpy(data + off, src, len);
	} else {
		memcpy(data + off, src, (size_t)first);
		memcpy(data, (const unsigned char *)src + first, (size_t)(len - first));
	}
}

/* Copy len bytes out of the ring at free-running position pos (mask = data_size - 1). */
static inline void llgo_ring_copy_out(void *dst, const unsigned char *data, uint64_t mask,
				      uint64_t pos, uint32_t len)
{
	uint64_t off = pos & mask;
	uint64_t first = mask + 1 - off;
	if (first >= len) {
		memcpy(dst, data + off, len);
	} else {
		memcpy(dst, data + off, (size_t)first);
		memcpy((unsigned char *)dst + first, data, (size_t)(len - first));
	}
}

#endif
