/* SPDX-License-Identifier: MIT */
/*
 * probe.h: the probe point `llgo-heap verify` attaches to (USDT llgo_heap:sample, probe.c).
 *
 * Every sample whose record was committed to its ring passes the probe with the record's
 * identity (ring id, the ring's sample sequence number = llgo_record.seq) and the allocation
 * (address, size). The probe has a semaphore: the kernel increments
 * llgo_heap_sample_semaphore in this process while a uprobe is attached to the probe
 * (libbpf's bpf_program__attach_usdt), so a shim nobody verifies pays one load and one branch
 * on the sampled slow path (emit_sample), and nothing on the fast path.
 */
#ifndef LLGO_SHIM_PROBE_H
#define LLGO_SHIM_PROBE_H

#include "internal.h"

#pragma GCC visibility push(hidden)

/* emit_push_alloc (same arguments, so the caller's argument setup is shared and the probe
 * costs it one load and one branch), then the probe when the record was committed. Only
 * called while probe_enabled(). */
bool probe_push(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		uint32_t tid, const uint64_t *frames, uint32_t n);
/* The same for a record with a stack copy (stackcopy_push); its identity and frames are what
 * the daemon compares with the kernel's capture. */
bool probe_push_raw(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		    uint32_t tid, const uint64_t *frames, uint32_t n, const struct stackcopy *sc);

#pragma GCC visibility pop

#endif
