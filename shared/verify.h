/* SPDX-License-Identifier: MIT */
/*
 * verify.h: the contract between the BPF program of `llgo-heap verify` (agent/verify.bpf.c)
 * and llgo-heapd (agent/verify.c): one event per sample the kernel saw at the shim's USDT
 * probe llgo_heap:sample (shim/probe.c), delivered through a BPF ring buffer, and the per-pid
 * setting the program reads. Built both against vmlinux.h (BPF side, which defines __u32 and
 * __u64) and against <linux/types.h> (daemon side). No pointers; sizes checked below.
 */
#ifndef LLGO_SHARED_VERIFY_H
#define LLGO_SHARED_VERIFY_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Frames the kernel copies per event: kernel.perf_event_max_stack's default (127) caps the
 * walk; one more slot keeps the array a round size. */
#define LLGO_VERIFY_MAX_FRAMES 128
/* Ring buffer between the program and the daemon (a power of two, page multiple). */
#define LLGO_VERIFY_RINGBUF_BYTES (4u << 20)
/* Processes verified at the same time (entries of the targets map). */
#define LLGO_VERIFY_MAX_TARGETS 1024

/* targets map: key = tgid (__u32), value: */
struct llgo_verify_target {
	__u32 every;    /* capture samples whose seq is a multiple of this (>= 1) */
	__u32 reserved;
	__u64 hits;     /* probe hits in this process (program-written) */
	__u64 captured; /* events submitted */
	__u64 lost;     /* events the ring buffer had no room for */
};

struct llgo_verify_event {
	__u32 tgid;
	__u32 tid;
	__u32 ring_id;  /* probe argument 1 */
	__s32 stack_len; /* bpf_get_stack's result: bytes of frames[], or a negative errno */
	__u64 seq;      /* probe argument 2: the record's seq */
	__u64 addr;     /* probe argument 3 */
	__u64 size;     /* probe argument 4 */
	__u64 frames[LLGO_VERIFY_MAX_FRAMES]; /* user stack, frame 0 = the probe site */
};

_Static_assert(sizeof(struct llgo_verify_target) == 32, "verify target size");
_Static_assert(sizeof(struct llgo_verify_event) == 40 + 8 * LLGO_VERIFY_MAX_FRAMES,
	       "verify event size");

#endif
