/* SPDX-License-Identifier: MIT */
/*
 * otel_collector.h: what tests/otel_collector.bpf.c, a minimal collector of OpenTelemetry's
 * memory-profiling USDT contract, sends to tests/test_otel.c: one event per hit of
 * otel_memory:alloc or otel_memory:free, in the order the kernel reserved them in the ring
 * buffer (a thread's events in the order it fired them; a free that the program's memory
 * reuse orders before an alloc at the same address is reserved before it, since the probe
 * fires before the memory is released).
 */
#ifndef LLGO_TESTS_OTEL_COLLECTOR_H
#define LLGO_TESTS_OTEL_COLLECTOR_H

#define OTEL_EVENT_ALLOC 1u
#define OTEL_EVENT_FREE 2u
#define OTEL_RINGBUF_BYTES (16u << 20)

struct otel_event {
	__u32 kind; /* OTEL_EVENT_* */
	__u32 tgid; /* the process that fired it */
	__u64 ptr;
	__u64 size;     /* alloc only */
	__u64 weighted; /* alloc only: weighted_bytes */
};

#endif
