// SPDX-License-Identifier: MIT
/*
 * oom.bpf.c: the kernel side of llgo-heapd's OOM snapshots (--dump-oom). A raw tracepoint
 * program on oom:mark_victim, which the kernel's OOM killer (global or a memory cgroup's)
 * fires when it has chosen a victim and before the victim's SIGKILL is delivered. It sends
 * the victim's pid and start time through the `oom_events` ring buffer; agent/dump/oom.c reads it
 * and hands the pid to the dumper (agent/dump/dump.c), which writes the victim's profile once its
 * session has taken the final drain.
 *
 * The tracepoint's arguments changed in Linux 6.8 (from `int pid` to `struct task_struct *,
 * uid_t`): oom.c reads which one the running kernel has from its BTF and sets
 * victim_is_task before loading. task_struct is read with CO-RE relocations against a local
 * definition of the three fields used (libbpf matches struct task_struct___llgo to the
 * kernel's task_struct), so the program builds without vmlinux.h.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "../../shared/oom.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by oom.c before load: the tracepoint's first argument is a task (6.8+), not a pid. */
const volatile __u32 victim_is_task = 1;

struct task_struct___llgo {
	int tgid;
	struct task_struct___llgo *group_leader;
	__u64 start_boottime;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, LLGO_OOM_RINGBUF_BYTES);
} oom_events SEC(".maps");

SEC("raw_tp/mark_victim")
int llgo_mark_victim(struct bpf_raw_tracepoint_args *ctx)
{
	struct llgo_oom_event *e = bpf_ringbuf_reserve(&oom_events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->flags = 0;
	e->start_ns = 0;
	if (victim_is_task) {
		struct task_struct___llgo *t = (struct task_struct___llgo *)ctx->args[0];
		e->pid = (__u32)BPF_CORE_READ(t, tgid);
		if (bpf_core_field_exists(t->start_boottime)) {
			e->start_ns = BPF_CORE_READ(t, group_leader, start_boottime);
			e->flags = LLGO_OOM_START_KNOWN;
		}
	} else {
		e->pid = (__u32)ctx->args[0];
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}
