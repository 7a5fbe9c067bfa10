// SPDX-License-Identifier: MIT
/*
 * verify.bpf.c: the kernel side of `llgo-heap verify` and `llgo-heapd --verify-every N`.
 * Attached by agent/verify/verify.c to the shim's USDT probe llgo_heap:sample (shim/probe.c) in one
 * process at a time per link. For every hit in a process listed in `targets` whose record
 * sequence number is a multiple of that target's `every`, it sends one event through the
 * `events` ring buffer: the record's identity (ring id, seq) and the allocation (address,
 * size), then either the user stack as the kernel walks it (bpf_get_stack with
 * BPF_F_USER_STACK: the frame-pointer chain from the probe site; only the frames found are
 * sent) or, for a sample whose record carries a stack copy (probe argument 5), the registers
 * at the probe and the kernel's own copy of the stack (bpf_probe_read_user), which the daemon
 * unwinds with DWARF independently of the shim's copy. Each user's events are charged to its
 * share of the ring buffer (shared/verify.h: half the buffer for all users but root together,
 * none more than it leaves to the others), so a flood of one user's copies cannot fill it
 * for root's captures. Matching, unwinding, trimming and comparing are verify.c's.
 *
 * Built with clang -target bpf against vmlinux.h (generated from the running kernel's BTF at
 * build time, see the Makefile); the skeleton comes from bpftool gen skeleton. Unsigned
 * arithmetic only (clang 14 rejects signed division for BPF).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "../../shared/verify.h"

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

/* The users' shares of events (shared/verify.h): sent is added here, read by the daemon,
 * which maps the array. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LLGO_VERIFY_SHARES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct llgo_verify_share);
} shares SEC(".maps");

static __always_inline __u64 llgo_share_held(const struct llgo_verify_share *s)
{
	__u64 sent = s->sent, read = s->read;
	return sent > read ? sent - read : 0;
}

/* Charge h's user for an event of charge bytes, when its share has room (h->share and
 * h->charge say what was charged, for the daemon to give back as it reads the event). CPUs
 * checking at once may pass a share by an event each. */
static __always_inline bool llgo_share_take(const struct llgo_verify_target *t,
					    struct llgo_verify_head *h, __u32 charge)
{
	__u32 slot = t->share, all_key = LLGO_VERIFY_SHARE_ALL;
	h->share = slot;
	h->charge = 0;
	if (slot == LLGO_VERIFY_SHARE_NONE)
		return true;
	struct llgo_verify_share *all = bpf_map_lookup_elem(&shares, &all_key);
	struct llgo_verify_share *mine = bpf_map_lookup_elem(&shares, &slot);
	if (!all || !mine || slot == LLGO_VERIFY_SHARE_ALL)
		return false;
	__u64 users = llgo_share_held(all), held = llgo_share_held(mine);
	/* after the event: users <= LLGO_VERIFY_USERS_BYTES, and held <= what is left */
	if (users + charge > LLGO_VERIFY_USERS_BYTES ||
	    held + 2 * (__u64)charge > LLGO_VERIFY_USERS_BYTES - users)
		return false;
	__sync_fetch_and_add(&all->sent, charge);
	__sync_fetch_and_add(&mine->sent, charge);
	h->charge = charge;
	return true;
}

/* The event charged in h could not be sent: its bytes are given back. */
static __always_inline void llgo_share_give(const struct llgo_verify_head *h)
{
	__u32 slot = h->share, all_key = LLGO_VERIFY_SHARE_ALL;
	if (!h->charge)
		return;
	struct llgo_verify_share *all = bpf_map_lookup_elem(&shares, &all_key);
	struct llgo_verify_share *mine = bpf_map_lookup_elem(&shares, &slot);
	if (all)
		__sync_fetch_and_add(&all->read, h->charge);
	if (mine)
		__sync_fetch_and_add(&mine->read, h->charge);
}

/* The registers at the probe and the stack from sp's page up, one page per read: a read that
 * fails (past the stack's end, or a page not resident: no fault is taken here) ends the copy.
 * The event's size is fixed (a ring buffer reservation is), the daemon reads copy_len. */
static __always_inline void llgo_send_copy(struct pt_regs *ctx, struct llgo_verify_target *t,
					   struct llgo_verify_head *h)
{
	if (!llgo_share_take(t, h, LLGO_VERIFY_CHARGE(sizeof(struct llgo_verify_copy)))) {
		__sync_fetch_and_add(&t->lost, 1);
		return;
	}
	struct llgo_verify_copy *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		llgo_share_give(h);
		__sync_fetch_and_add(&t->lost, 1);
		return;
	}
	e->h = *h;
	e->h.kind = LLGO_VERIFY_EV_COPY;
	e->ip = PT_REGS_IP(ctx);
	e->sp = PT_REGS_SP(ctx);
	e->bp = PT_REGS_FP(ctx);
	e->copy_lo = e->sp & ~(__u64)(LLGO_VERIFY_PAGE - 1);
	e->reserved = 0;
	__u32 len = 0;
	for (__u32 i = 0; i < LLGO_VERIFY_COPY_PAGES; i++) {
		if (bpf_probe_read_user(e->copy + i * LLGO_VERIFY_PAGE, LLGO_VERIFY_PAGE,
					(const void *)(e->copy_lo + i * LLGO_VERIFY_PAGE)))
			break;
		len += LLGO_VERIFY_PAGE;
	}
	e->copy_len = len;
	bpf_ringbuf_submit(e, 0);
	__sync_fetch_and_add(&t->captured, 1);
}

SEC("usdt")
int BPF_USDT(llgo_sample, __u32 ring_id, __u64 seq, __u64 addr, __u64 size, __u32 flags)
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
	struct llgo_verify_head h = {
		.kind = LLGO_VERIFY_EV_STACK,
		.tgid = tgid,
		.tid = (__u32)id,
		.ring_id = ring_id,
		.seq = seq,
		.addr = addr,
		.size = size,
	};
	if (flags & LLGO_VERIFY_PROBE_RAW) {
		llgo_send_copy(ctx, t, &h);
		return 0;
	}
	__u32 zero = 0;
	struct llgo_verify_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	e->h = h;
	long len = bpf_get_stack(ctx, e->frames, sizeof(e->frames), BPF_F_USER_STACK);
	e->stack_len = (__s32)len;
	e->reserved = 0;
	__u64 bytes = len > 0 ? (__u64)len : 0;
	if (bytes > sizeof(e->frames))
		bytes = sizeof(e->frames);
	__u64 out = offsetof(struct llgo_verify_event, frames) + bytes;
	if (!llgo_share_take(t, &e->h, LLGO_VERIFY_CHARGE((__u32)out))) {
		__sync_fetch_and_add(&t->lost, 1);
	} else if (bpf_ringbuf_output(&events, e, out, 0)) {
		llgo_share_give(&e->h);
		__sync_fetch_and_add(&t->lost, 1);
	} else {
		__sync_fetch_and_add(&t->captured, 1);
	}
	return 0;
}
