/* SPDX-License-Identifier: MIT */
/*
 * verify.h: the contract between the BPF program of `llgo-heap verify` (agent/verify/verify.bpf.c)
 * and llgo-heapd (agent/verify/verify.c): one event per sample the kernel saw at the shim's USDT
 * probe llgo_heap:sample (shim/probe.c), delivered through a BPF ring buffer, and the per-pid
 * setting the program reads. An event is the kernel's frame-pointer walk or, for a sample the
 * shim unwinds with DWARF, the registers and a copy of the stack. Built both against vmlinux.h
 * (BPF side, which defines __u32 and __u64) and against <linux/types.h> (daemon side). No
 * pointers; sizes checked below.
 */
#ifndef LLGO_SHARED_VERIFY_H
#define LLGO_SHARED_VERIFY_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Frames the kernel copies per event: kernel.perf_event_max_stack's default (127) caps the
 * walk; one more slot keeps the array a round size. */
#define LLGO_VERIFY_MAX_FRAMES 128
/* Stack the kernel copies for a sample the shim unwinds with DWARF: whole pages from the one
 * holding the probe's sp, up to the first unreadable one (the stack's end). The shim's
 * default copy is 32 KiB above the program's call site; the shim's own frames at the probe
 * take under 4 KiB more. */
#define LLGO_VERIFY_COPY_PAGES 12u
#define LLGO_VERIFY_PAGE 4096u
#define LLGO_VERIFY_COPY_BYTES (LLGO_VERIFY_COPY_PAGES * LLGO_VERIFY_PAGE)
/* Ring buffer between the program and the daemon (a power of two, page multiple): room for
 * about 170 stack copies in flight. */
#define LLGO_VERIFY_RINGBUF_BYTES (8u << 20)
/* Processes verified at the same time (entries of the targets map). */
#define LLGO_VERIFY_MAX_TARGETS 1024

/* Shares of the ring buffer, so that one user's flood cannot take the room root's captures
 * need (entries of the shares map, struct llgo_verify_share). Entry LLGO_VERIFY_SHARE_ALL
 * counts every user but root together, the others one uid each (the daemon assigns them;
 * the last is shared by the uids beyond). An event is charged to its process's entry and to
 * LLGO_VERIFY_SHARE_ALL when the program sends it (sent) and when the daemon has read it
 * (read); root's processes (LLGO_VERIFY_SHARE_NONE) are not charged. A user's event is sent
 * only when, after it, the users together hold at most LLGO_VERIFY_USERS_BYTES of the
 * buffer (the rest is root's) and this user no more than it leaves free to the others. */
#define LLGO_VERIFY_SHARES 64u
#define LLGO_VERIFY_SHARE_ALL 0u
#define LLGO_VERIFY_SHARE_NONE 0xffffffffu
#define LLGO_VERIFY_USERS_BYTES (LLGO_VERIFY_RINGBUF_BYTES / 2)
/* What an event of len bytes takes of the ring buffer: its 8-byte header, 8-byte aligned. */
#define LLGO_VERIFY_CHARGE(len) (((len) + 8u + 7u) & ~7u)

struct llgo_verify_share {
	__u64 sent; /* bytes charged by the program (and given back when the buffer was full) */
	__u64 read; /* bytes the daemon has read */
};

/* Probe argument 5 (flags), bit 0: the record carries a stack copy (ALLOC_RAW), which the
 * daemon unwinds with DWARF: the kernel copies the stack too. */
#define LLGO_VERIFY_PROBE_RAW 1u

/* targets map: key = tgid (__u32), value: */
struct llgo_verify_target {
	__u32 every;    /* capture samples whose seq is a multiple of this (>= 1) */
	__u32 share;    /* its entry of the shares map, or LLGO_VERIFY_SHARE_NONE (root's) */
	__u64 hits;     /* probe hits in this process (program-written) */
	__u64 captured; /* events submitted */
	__u64 lost;     /* events the ring buffer (or the user's share of it) had no room for */
};

enum llgo_verify_kind {
	LLGO_VERIFY_EV_STACK = 1, /* struct llgo_verify_event: the kernel's frame-pointer walk */
	LLGO_VERIFY_EV_COPY = 2,  /* struct llgo_verify_copy: registers and a stack copy */
};

/* What every event starts with: which sample it is. */
struct llgo_verify_head {
	__u32 kind;    /* enum llgo_verify_kind */
	__u32 tgid;
	__u32 tid;
	__u32 ring_id; /* probe argument 1 */
	__u64 seq;     /* probe argument 2: the record's seq */
	__u64 addr;    /* probe argument 3 */
	__u64 size;    /* probe argument 4 */
	__u32 share;   /* the shares entry charged, or LLGO_VERIFY_SHARE_NONE */
	__u32 charge;  /* bytes charged to it (LLGO_VERIFY_CHARGE of the event's length) */
};

struct llgo_verify_event {
	struct llgo_verify_head h;
	__s32 stack_len; /* bpf_get_stack's result: bytes of frames[], or a negative errno */
	__u32 reserved;
	__u64 frames[LLGO_VERIFY_MAX_FRAMES]; /* user stack, frame 0 = the probe site */
};

/* Sent for samples with LLGO_VERIFY_PROBE_RAW: the daemon unwinds this copy itself (a
 * frame-pointer walk means nothing in code built without frame pointers). */
struct llgo_verify_copy {
	struct llgo_verify_head h;
	__u64 ip, sp, bp; /* user registers at the probe site */
	__u64 copy_lo;    /* address of copy[0]: sp rounded down to its page */
	__u32 copy_len;   /* bytes of copy[] read (whole pages); 0 when none could be */
	__u32 reserved;
	__u8 copy[LLGO_VERIFY_COPY_BYTES];
};

_Static_assert(sizeof(struct llgo_verify_target) == 32, "verify target size");
_Static_assert(sizeof(struct llgo_verify_share) == 16, "verify share size");
_Static_assert(sizeof(struct llgo_verify_head) == 48, "verify head size");
_Static_assert(sizeof(struct llgo_verify_event) == 56 + 8 * LLGO_VERIFY_MAX_FRAMES,
	       "verify event size");
_Static_assert(sizeof(struct llgo_verify_copy) == 88 + LLGO_VERIFY_COPY_BYTES,
	       "verify copy size");

#endif
