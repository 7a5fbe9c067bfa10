/* SPDX-License-Identifier: MIT */
/*
 * proto.h: messages on llgo-heapd's Unix socket (SOCK_SEQPACKET, one message per packet).
 *
 * Two kinds of peers use the socket:
 *   - shims: HELLO (with the process memfd, or a control-page memfd), ADD_RING (a ring of
 *     the process memfd by id, or with a ring memfd), ADD_LIVE (with the live-object table
 *     memfd), WAKE, BYE at exit;
 *   - clients (the llgo-heap CLI and anything else): LIST, SNAPSHOT, SET_RATE, VERIFY,
 *     answered by zero or more DATA packets and one END packet.
 * The daemon identifies every peer by SO_PEERCRED, never by fields in these messages, and
 * validates type, version and length of every packet before it reads a field.
 * Fixed-width types only; no pointers. Encoding is the host's (the socket is local).
 */
#ifndef LLGO_SHARED_PROTO_H
#define LLGO_SHARED_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define LLGO_PROTO_MAGIC 0x48474c4cu /* "LLGH" */
#define LLGO_PROTO_VERSION 1u
/* Largest packet either side sends; DATA payloads are at most this minus the header. */
#define LLGO_MSG_MAX 65536u

enum llgo_msg_type {
	/* shim -> daemon */
	LLGO_MSG_HELLO = 1,    /* struct llgo_msg_hello, SCM_RIGHTS: control memfd */
	LLGO_MSG_ADD_RING = 2, /* struct llgo_msg_add_ring; SCM_RIGHTS: a ring memfd, or none
				  for a ring in the process memfd (LLGO_HELLO_MEMFD) */
	LLGO_MSG_BYE = 3,      /* header only: the process is exiting with records the daemon
				  may not have seen; answered by END once drained */
	LLGO_MSG_WAKE = 4,     /* header only: a ring passed half full; drain soon (no answer) */
	LLGO_MSG_ADD_LIVE = 5, /* header only, SCM_RIGHTS: the live-object table memfd
				  (shared/live.h); at most one per process (no answer) */
	LLGO_MSG_DETACH = 6,   /* header only: llgo-heap detach; the session ends (drained,
				  in-use frozen, listed as detached) while the process lives
				  on; answered by END */
	/* client -> daemon */
	LLGO_MSG_LIST = 16,     /* header only; answered by DATA (llgo_list_entry[]) + END */
	LLGO_MSG_SNAPSHOT = 17, /* struct llgo_msg_snapshot; answered by DATA... + END */
	LLGO_MSG_SET_RATE = 18, /* struct llgo_msg_set_rate; answered by END */
	LLGO_MSG_VERIFY = 19,   /* struct llgo_msg_verify; answered after the collection by
				   DATA (llgo_verify_summary, then report text) + END */
	/* daemon -> peer */
	LLGO_MSG_HELLO_ACK = 32, /* struct llgo_msg_hello_ack */
	LLGO_MSG_DATA = 33,      /* header + payload bytes */
	LLGO_MSG_END = 34,       /* struct llgo_msg_end */
};

struct llgo_msg_header {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length; /* bytes including this header */
	uint32_t reserved;
};
_Static_assert(sizeof(struct llgo_msg_header) == 16, "message header size");

#define LLGO_COMM_LEN 64u

struct llgo_msg_hello {
	struct llgo_msg_header h;
	uint32_t pid;            /* claimed; informational only (SO_PEERCRED decides) */
	uint32_t ring_data_size; /* data bytes of every ring this process will send */
	int64_t rate_word;       /* the rate the shim starts with (see ring.h) */
	uint64_t flags;          /* LLGO_HELLO_* */
	char comm[LLGO_COMM_LEN]; /* argv[0]-ish, NUL-terminated if shorter */
	/* LLGO_HELLO_FORKED: the parent's pid. A fork child's mappings are its parent's, so a
	 * child gone before the daemon read its own is symbolized from the parent's (only when
	 * both belong to the same uid). */
	uint32_t ppid;
	uint32_t reserved;
};
_Static_assert(sizeof(struct llgo_msg_hello) == 112, "hello size");
_Static_assert(offsetof(struct llgo_msg_hello, rate_word) == 24, "hello rate offset");

/* The process was started by fork() from a profiled parent (attached lazily in the child). */
#define LLGO_HELLO_FORKED 1ull
/* Send no HELLO_ACK: the shim does not wait for one. A refused HELLO closes the connection,
 * which the shim notices at its next send. */
#define LLGO_HELLO_NO_ACK 2ull
/* The memfd has been shared with a daemon before (a reconnect after the daemon was lost or
 * restarted): its rings (0 .. ctl.ring_count - 1) hold records already, and samples an earlier
 * daemon consumed are accounted as such. */
#define LLGO_HELLO_REATTACH 4ull
/* The descriptor is the process memfd (control page, then rings; see shared/ring.h), not a
 * control page alone; ADD_RING then carries no descriptor. */
#define LLGO_HELLO_MEMFD 8ull
/* Bits 8-9: the unwinding mode the shim runs (LLGO_HEAP_UNWIND), enum llgo_unwind_mode. */
#define LLGO_HELLO_UNWIND_SHIFT 8
#define LLGO_HELLO_UNWIND_MASK (3ull << LLGO_HELLO_UNWIND_SHIFT)

enum llgo_unwind_mode {
	LLGO_UNWIND_UNKNOWN = 0, /* a shim that does not say: frame pointers */
	LLGO_UNWIND_FP = 1,      /* frame-pointer walk in the process */
	LLGO_UNWIND_DWARF = 2,   /* every sample copies its stack; the daemon unwinds */
	LLGO_UNWIND_AUTO = 3,    /* copy only when the frame-pointer walk cannot be trusted */
};

/* The mode's name as LLGO_HEAP_UNWIND spells it (fp for UNKNOWN and anything else). */
static inline const char *llgo_unwind_mode_name(uint32_t mode)
{
	switch (mode) {
	case LLGO_UNWIND_DWARF:
		return "dwarf";
	case LLGO_UNWIND_AUTO:
		return "auto";
	default:
		return "fp";
	}
}

struct llgo_msg_hello_ack {
	struct llgo_msg_header h;
	int32_t status; /* 0 accepted, else a positive errno */
	uint32_t reserved;
};
_Static_assert(sizeof(struct llgo_msg_hello_ack) == 24, "hello ack size");

struct llgo_msg_add_ring {
	struct llgo_msg_header h;
	uint32_t ring_id;
	uint32_t data_size;
};
_Static_assert(sizeof(struct llgo_msg_add_ring) == 24, "add ring size");

enum llgo_format {
	LLGO_FORMAT_PPROF = 1,  /* gzipped profile.proto */
	LLGO_FORMAT_TEXT = 2,   /* Go's legacy heap text */
	LLGO_FORMAT_FOLDED = 3, /* folded stacks */
	LLGO_FORMAT_TOP = 4,    /* human-readable top sites */
	LLGO_FORMAT_SITES = 5,  /* every site's scaled values, tab-separated (top --watch) */
};

/* Snapshot flags. */
#define LLGO_SNAP_ALLOCS 1u     /* pprof: default_sample_type alloc_space (Go's /allocs) */
#define LLGO_SNAP_INUSE 2u      /* folded/top: rank by in-use instead of allocated bytes */
#define LLGO_SNAP_OBJECTS 4u    /* folded/top: objects instead of bytes */
/* The peak view: the in-use values at the highest sampled in-use total seen so far
 * (docs/usage.md); pprof with sample types peak_inuse_objects/count, peak_inuse_space/bytes;
 * top and folded rank by those. */
#define LLGO_SNAP_PEAK 8u

struct llgo_msg_snapshot {
	struct llgo_msg_header h;
	uint32_t pid;
	uint32_t format; /* enum llgo_format */
	uint32_t flags;  /* LLGO_SNAP_* */
	uint32_t top_n;  /* LLGO_FORMAT_TOP: number of rows (0 = 10) */
};
_Static_assert(sizeof(struct llgo_msg_snapshot) == 32, "snapshot size");

struct llgo_msg_set_rate {
	struct llgo_msg_header h;
	uint32_t pid;
	uint32_t reserved;
	uint64_t rate; /* public rate: 0 off, 1 every allocation, N mean bytes */
};
_Static_assert(sizeof(struct llgo_msg_set_rate) == 32, "set rate size");

/* `llgo-heap verify PID`: the daemon attaches its BPF program to the process's probe for
 * `seconds` (1..LLGO_VERIFY_MAX_SECONDS) and compares the kernel's stacks with the records. */
#define LLGO_VERIFY_MAX_SECONDS 3600u

struct llgo_msg_verify {
	struct llgo_msg_header h;
	uint32_t pid;
	uint32_t seconds;
	uint64_t reserved;
};
_Static_assert(sizeof(struct llgo_msg_verify) == 32, "verify size");

/* First bytes of the VERIFY answer's DATA; the human report (text) follows. Counts are of
 * the frame-pointer unwinding mode, the only one the shim records so far. */
struct llgo_verify_summary {
	uint64_t samples;          /* kernel captures matched with their record */
	uint64_t agree;            /* of those, whole stacks equal after trimming */
	uint64_t kernel_unmatched; /* captures whose record never arrived (corrupt, lost) */
	uint64_t record_unmatched; /* records inside the capture window without a capture */
	uint64_t outside;          /* records before the first / after the last capture */
	uint64_t kernel_errors;    /* captures whose stack the kernel could not read */
	uint64_t lost;             /* probe hits the BPF ring buffer had no room for */
	uint64_t hits;             /* probe hits in the process */
	uint64_t incomparable;     /* matched, but the kernel's walk never left the shim or the
				      allocator (frameless code broke its chain): not counted
				      in samples */
};
_Static_assert(sizeof(struct llgo_verify_summary) == 72, "verify summary size");

#define LLGO_END_MSG_LEN 240u

struct llgo_msg_end {
	struct llgo_msg_header h;
	int32_t status; /* 0 success, else a positive errno */
	uint32_t reserved;
	char message[LLGO_END_MSG_LEN]; /* NUL-terminated; the reason when status != 0 */
};
_Static_assert(sizeof(struct llgo_msg_end) == 264, "end size");

enum llgo_proc_state {
	LLGO_PROC_LIVE = 1,
	LLGO_PROC_EXITED = 2,
	LLGO_PROC_DETACHED = 3, /* llgo-heap detach ended the session; the process runs on */
};

/* One row of the LIST answer; DATA payloads carry whole rows. */
struct llgo_list_entry {
	uint32_t pid;
	uint32_t uid;
	uint32_t state; /* enum llgo_proc_state */
	uint32_t rings;
	uint64_t rate; /* public rate in force */
	uint64_t sampled;
	uint64_t delivered;
	uint64_t dropped;
	uint64_t corrupt;
	uint64_t buckets;
	uint64_t start_time_ns; /* CLOCK_REALTIME when the process attached */
	char comm[LLGO_COMM_LEN];
	/* llgo-heapd --verify-every: samples matched with the kernel's capture, and of those
	 * the ones whose stacks agree (both 0 when the process is not verified) */
	uint64_t verify_samples;
	uint64_t verify_agree;

	uint32_t unwind_mode; /* enum llgo_unwind_mode the shim runs */
	uint32_t reserved2;
	uint64_t unwound;   /* stacks the daemon unwound from stack copies */
	uint64_t truncated; /* of which did not reach the thread's start */

	/* Budgets of the process's uid that llgo-heapd hit (LLGO_BUDGET_*): its processes are
	 * refused or degraded, other users' are not; budget_dropped: records of this process
	 * not aggregated because its uid was over its bucket memory. */
	uint32_t budget_flags;
	uint32_t reserved;
	uint64_t budget_dropped;
};
_Static_assert(sizeof(struct llgo_list_entry) == 192, "list entry size");

#define LLGO_BUDGET_CONNS 1u        /* connections */
#define LLGO_BUDGET_SESSIONS 2u     /* live profiled processes */
#define LLGO_BUDGET_RINGS 4u        /* rings mapped */
#define LLGO_BUDGET_RING_BYTES 8u   /* ring memory */
#define LLGO_BUDGET_BUCKET_BYTES 16u /* aggregated profiles' memory */
#define LLGO_BUDGET_OUT_BYTES 32u   /* answers its clients do not read */
#define LLGO_BUDGET_UNWIND_BYTES 64u /* copies of its files' unwind tables */

#endif
