// SPDX-License-Identifier: MIT
/*
 * verify.bpf.c: the kernel side of `llgo-heap verify` and `llgo-heapd --verify-every N`.
 * Attached by agent/verify.c to the shim's USDT probe llgo_heap:sample (shim/probe.c) in one
 * process at a time per link. For every hit in a process listed in `targets` whose record
 * sequence number is a multiple of that target's `every`, it sends one event through the
 * `events` ring buffer (only the frames found): the record's identity (ring id, seq), the allocation (address, size)
 * and the user stack as the kernel walks it (bpf_get_stack with BPF_F_USER_STACK: the frame
 * pointer chain from the probe site). Matching, trimming and comparing are verify.c's.
 *
 * Built with clang -target bpf against vmlinux.h (generated from the running kernel's BTF at
 * build time, see the Makefile); the skeleton comes from bpftool gen skeleton. Unsigned
 * arithmetic only (clang 14 rejects signed division for BPF).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "../shared/verify.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LLGO_VERIFY_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct llgo_verify_target);
} targets SEC(".maps");

/* Where an event is assembled: the ring buffer then takes only the frames the walk found
 * (bpf_ringbuf_output of a variable length), ~10x fewer bytes than a fixed-size reserve for
 * typical depths, so a busy process fills it that much later. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct llgo_verify_event);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LLGO_VERIFY_RINGBUF_BYTES);
} events SEC(".maps");

SEC("usdt")
int BPF_USDT(llgo_sample, __u32 ring_id, __u64 seq, __u64 addr, __u64 size)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = (__u32)(id >> 32);
	struct llgo_verify_target *t = bpf_map_lookup_elem(&targets, &tgid);
	if (!t)
		return 0;
	__sync_fetch_and_add(&t->hits, 1);
	__u64 every = t->every;
	if (every > 1 && seq % every != 0)
		return 0;
	__u32 zero = 0;
	struct llgo_verify_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->ring_id = ring_id;
	e->seq = seq;
	e->addr = addr;
	e->size = size;
	long len = bpf_get_stack(ctx, e->frames, sizeof(e->frames), BPF_F_USER_STACK);
	e->stack_len = (__s32)len;
	__u64 bytes = len > 0 ? (__u64)len : 0;
	if (bytes > sizeof(e->frames))
		bytes = sizeof(e->frames);
	if (bpf_ringbuf_output(&events, e, offsetof(struct llgo_verify_event, frames) + bytes, 0))
		__sync_fetch_and_add(&t->lost, 1);
	else
		__sync_fetch_and_add(&t->captured, 1);
	return 0;
}
