/* SPDX-License-Identifier: MIT */
/*
 * oom.h: the contract between the BPF program that watches the kernel's OOM killer
 * (agent/dump/oom.bpf.c, on the oom:mark_victim tracepoint) and llgo-heapd (agent/dump/oom.c): one
 * event per victim, delivered through a BPF ring buffer. Built against <linux/types.h> on
 * both sides. No pointers; the size is checked below.
 */
#ifndef LLGO_SHARED_OOM_H
#define LLGO_SHARED_OOM_H

#include <linux/types.h>

/* Ring buffer between the program and the daemon (a power of two, page multiple): 1024
 * victims in flight, more than any burst of OOM kills. */
#define LLGO_OOM_RINGBUF_BYTES (32u << 10)

struct llgo_oom_event {
	__u32 pid;        /* the victim's thread-group id, in the initial pid namespace */
	__u32 flags;      /* LLGO_OOM_START_KNOWN */
	__u64 start_ns;   /* the group leader's start_boottime (what /proc/PID/stat's starttime
			   * counts in clock ticks): tells a reused pid apart */
};

#define LLGO_OOM_START_KNOWN 1u

_Static_assert(sizeof(struct llgo_oom_event) == 16, "llgo_oom_event layout");

#endif
