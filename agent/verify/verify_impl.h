/* SPDX-License-Identifier: MIT */
/*
 * verify_impl.h: what the three files of the eBPF cross-check share (verify.c: loading,
 * attaching, the ring buffer thread, targets; verify_match.c: pairing and comparing;
 * verify_run.c: the one-off verify and its report). Not for the rest of the daemon, which
 * sees verify.h.
 */
#ifndef LLGO_AGENT_VERIFY_IMPL_H
#define LLGO_AGENT_VERIFY_IMPL_H

#include "../../shared/verify.h"
#include "verify.h"

struct bpf_link;
struct ring_buffer;
struct verify_bpf;

#define VERIFY_BUCKETS 4096u
#define VERIFY_MAX_PENDING 65536u        /* halves waiting per target; more are counted lost */
#define VERIFY_EXPIRE_NS 5000000000ull   /* continuous mode: a half waits at most this long */
#define VERIFY_KEEP_DISAGREE 3u          /* disagreements kept for the report */
#define VERIFY_MAX_RANGES 16u
#define VERIFY_POLL_MS 50
#define VERIFY_PCACHE 1024u              /* symbolized addresses remembered per target */
/* One-off verifies at a time, daemon-wide: each holds a client worker for its duration, and
 * snapshots must keep the rest. */
#define VERIFY_MAX_RUNNING 2u

enum verify_side { VERIFY_KERNEL = 1, VERIFY_RECORD = 2 };
/* The shim walked frame pointers (ALLOC) or copied the stack for DWARF (ALLOC_RAW). */
enum verify_mode { VERIFY_MODE_FP = 0, VERIFY_MODE_DWARF = 1, VERIFY_MODES = 2 };

struct verify_entry {
	struct verify_entry *next;
	uint32_t ring_id;
	uint8_t side;
	uint8_t mode;    /* enum verify_mode: how both halves of this sample were unwound */
	bool truncated;  /* dwarf: the unwind stopped short of the stack's start */
	uint64_t seq;
	uint64_t when_ns; /* CLOCK_MONOTONIC when it arrived */
	uint64_t size;
	uint32_t nframes;
	uint64_t frames[]; /* kernel: as captured (or unwound from its copy); record: as
			      recorded (or unwound from its copy) */
};

struct verify_disagree {
	uint32_t ring_id;
	uint8_t mode;
	uint64_t seq, size;
	uint32_t nk, nr; /* kernel frames after trimming, record frames */
	uint32_t trimmed;
	uint64_t k[UNWIND_MAX_FRAMES];
	uint64_t r[UNWIND_MAX_FRAMES];
};

/* Seqs seen on one ring during a window, per side; hi == 0: none. */
struct verify_seqrange {
	uint64_t klo, khi; /* kernel captures */
	uint64_t rlo, rhi; /* records */
};

struct verify_pcinfo {
	uint64_t at;
	uint8_t flags; /* VERIFY_PC_*; 0: empty */
};

/* A window's counts, per unwinding mode. */
struct verify_window {
	struct llgo_verify_summary mode[VERIFY_MODES];
};

struct verify_target {
	struct verify_target *next; /* verifier->targets, under verifier->lock */
	struct verifier *v;
	struct session *s; /* referenced */
	pid_t pid;
	struct bpf_link *link;
	_Atomic uint32_t every; /* in force in the targets map (drain.c reads it) */
	uint32_t share;      /* its user's entry of the shares map (verify_share_get) */
	uint32_t cont_every; /* --verify-every's, 0 when only a one-off uses this target */
	char binary[4200];   /* the file that holds the probe, as attached */
	bool by_name;        /* the shim is linked into binary: trim by function names */
	size_t nranges;
	uint64_t lo[VERIFY_MAX_RANGES], hi[VERIFY_MAX_RANGES]; /* shim text when !by_name */

	pthread_mutex_t lock; /* everything below */
	struct verify_entry *table[VERIFY_BUCKETS];
	size_t pending;
	bool window;  /* a one-off verify is collecting */
	bool closing; /* its captures are all in: later records only count as outside */
	bool stop_pending; /* verify_session_stop came during the window */
	struct verify_window win;
	struct verify_disagree *dis[VERIFY_KEEP_DISAGREE];
	uint32_t ndis;
	uint64_t overflow; /* halves not kept: VERIFY_MAX_PENDING reached */
	struct verify_seqrange *ranges;
	size_t nseqranges;
	struct verify_pcinfo pcache[VERIFY_PCACHE];
	/* the kernel's stack copies: unwound by the ring buffer thread alone, with maps and an
	 * unwinder of its own (not the drain's), made at the first copy */
	struct unwind *copy_unwind;
	struct procmaps *copy_maps;
};

struct verifier {
	/* verifier_new's: wait until the socket server handled every packet of a session */
	void (*settle)(void *arg, struct session *s);
	void *settle_arg;
	pthread_mutex_t lock;
	pthread_mutex_t libbpf_lock; /* attach and destroy of USDT links (verify_link_destroy) */
	struct verify_bpf *skel;
	struct ring_buffer *rb;
	pthread_t reader;
	bool reader_started;
	_Atomic bool stop;
	_Atomic bool cancel; /* the daemon stops: windows close now */
	_Atomic unsigned running; /* one-off verifies in progress */
	_Atomic uint64_t polls; /* reader passes completed */
	struct verify_target *targets;
	/* The shares map (shared/verify.h), mapped: the reader adds to read (atomically; the
	 * program adds to sent). share_uid and share_refs (under lock): which uid holds each
	 * entry, and how many targets use it. */
	struct llgo_verify_share *shares;
	size_t shares_len;
	uid_t share_uid[LLGO_VERIFY_SHARES];
	uint32_t share_refs[LLGO_VERIFY_SHARES];
	uint32_t max_stack; /* frames the kernel's walk can return (buffer, sysctl) */
	int load_err;
	char load_msg[256];
	bool loaded;
};

static inline uint64_t verify_now(void)
{
	return session_now_ns(CLOCK_MONOTONIC);
}

/* verify.c */
void verify_link_destroy(struct verifier *v, struct bpf_link *link);
/* Wait until the reader completed two passes: everything submitted before the call is read. */
void verify_reader_sync(struct verifier *v);
int verify_set_every(struct verifier *v, struct verify_target *t, uint32_t every);
void verify_map_stats(struct verifier *v, struct verify_target *t,
		      struct llgo_verify_target *out);
struct verify_target *verify_target_new(struct verifier *v, struct session *s, char *err,
					size_t errlen);
int verify_target_publish(struct verifier *v, struct verify_target *t, uint32_t every,
			  bool settle, char *err, size_t errlen);
void verify_stop_pending(struct verifier *v, struct verify_target *t);

/* verify_match.c. The ring buffer callback: one event (its target looked up under
 * verifier->lock). */
int verify_match_event(void *ctx, void *data, size_t len);
/* Drop what waits (older_than == 0: everything); with count, count it in the window as
 * unmatched or outside. Caller holds t->lock. */
void verify_match_flush(struct verify_target *t, uint64_t older_than, bool count);

#endif
