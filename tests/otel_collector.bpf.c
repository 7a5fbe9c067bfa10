// SPDX-License-Identifier: MIT
/*
 * otel_collector.bpf.c: the kernel side of the smallest collector of OpenTelemetry's
 * memory-profiling USDT contract (otel_memory:alloc(ptr, size, weighted_bytes) and
 * otel_memory:free(ptr)), for tests/test_otel.c, which attaches both programs with libbpf's
 * bpf_program__attach_usdt to the shim of one process. Arguments are read with BPF_USDT
 * (libbpf decodes the notes' argument specs); each hit becomes one otel_event in the ring
 * buffer, and a hit that finds it full is counted in `lost` (the test asserts none was).
 * Built like agent/verify.bpf.c (clang -target bpf against vmlinux.h, bpftool skeleton).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "otel_collector.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, OTEL_RINGBUF_BYTES);
} events SEC(".maps");

__u64 lost = 0;

static __always_inline void otel_send(__u32 kind, __u64 ptr, __u64 size, __u64 weighted)
{
	struct otel_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	e->kind = kind;
	e->tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
	e->ptr = ptr;
	e->size = size;
	e->weighted = weighted;
	bpf_ringbuf_submit(e, 0);
}

SEC("usdt")
int BPF_USDT(otel_alloc, void *ptr, __u64 size, __u64 weighted_bytes)
{
	otel_send(OTEL_EVENT_ALLOC, (__u64)ptr, size, weighted_bytes);
	return 0;
}

SEC("usdt")
int BPF_USDT(otel_free, void *ptr)
{
	otel_send(OTEL_EVENT_FREE, (__u64)ptr, 0, 0);
	return 0;
}
