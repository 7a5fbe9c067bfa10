/* SPDX-License-Identifier: MIT */
/*
 * probe.h: the shim's USDT probes (probe.c).
 *
 * llgo_heap:sample, which `llgo-heap verify` attaches to: every sample whose record was
 * committed to its ring passes the probe with the record's identity (ring id, the ring's
 * sample sequence number = llgo_record.seq) and the allocation (address, size).
 *
 * otel_memory:alloc(ptr, size, weighted_bytes) and otel_memory:free(ptr), OpenTelemetry's
 * memory-profiling contract (docs/usage.md): alloc for every sample whose record was
 * committed, free when the program frees (or a realloc moves) an object the shim tracks.
 *
 * Every probe has a semaphore: the kernel increments it in this process while a uprobe is
 * attached to the probe (libbpf's bpf_program__attach_usdt, bpftrace), so a shim nobody
 * traces pays one load and one branch on the sampled slow path (emit_sample: one load for
 * llgo_heap:sample and otel_memory:alloc together, internal.h), one load and one branch on
 * the free of a tracked object (live.c), and nothing on the fast paths.
 */
#ifndef LLGO_SHIM_PROBE_H
#define LLGO_SHIM_PROBE_H

#include "internal.h"

#pragma GCC visibility push(hidden)

/* emit_push_alloc (same arguments, so the caller's argument setup is shared and the probe
 * costs it one load and one branch), then the probe when the record was committed. Only
 * called while probe_sample_enabled(). */
bool probe_push(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		uint32_t tid, const uint64_t *frames, uint32_t n);
/* The same for a record with a stack copy (stackcopy_push); its identity and frames are what
 * the daemon compares with the kernel's capture. */
bool probe_push_raw(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		    uint32_t tid, const uint64_t *frames, uint32_t n, const struct stackcopy *sc);

#pragma GCC visibility pop

#endif
