// SPDX-License-Identifier: MIT
/*
 * probe.c: the USDT probe llgo_heap:sample (see probe.h) and the test hook that corrupts
 * recorded stacks, so that tests can show `llgo-heap verify` catching a wrong stack.
 *
 * The probe sits in probe_push, a frame-pointer function called from emit_sample, after the
 * record is committed, so when it fires the frame chain is complete: the kernel's user stack
 * (bpf_get_stack with BPF_F_USER_STACK) starts at the probe site in this function, goes
 * through the shim's slow path and reaches the program's allocating call. The daemon trims
 * the shim's frames before comparing (agent/verify/verify.c). Arguments, in this order:
 *   1 ring id (u32), 2 seq of the record (u64), 3 block address (u64), 4 size asked (u64),
 *   5 flags (u32): LLGO_VERIFY_PROBE_RAW when the record carries a stack copy (the kernel
 *     then copies the stack too, for the daemon to unwind both with DWARF).
 *
 * Test hook: LLGO_HEAP_TEST_CORRUPT_STACK=N (N >= 1) makes every Nth sample of each thread
 * that passes here (so only while a verify is attached) record a wrong frame 0 (the real
 * return address + 16; for a stack copy, the pc the daemon unwinds from). Never set it
 * outside tests.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdlib.h>
#include <sys/sdt.h>

#include "probe.h"
#include "../shared/verify.h"

/* The semaphore lives in .probes, where tools (libbpf, systemtap, bpftrace) expect it. */
__attribute__((section(".probes"))) volatile unsigned short llgo_heap_sample_semaphore;

static uint32_t probe_corrupt_every;
static __thread uint32_t probe_corrupt_count llgo_tls_ie;

__attribute__((constructor)) static void probe_init(void)
{
	const char *v = getenv("LLGO_HEAP_TEST_CORRUPT_STACK");
	uint32_t n = 0;
	for (; v && *v >= '0' && *v <= '9' && n < 1000000; v++)
		n = n * 10 + (uint32_t)(*v - '0');
	probe_corrupt_every = n;
}

/* Push (a stack copy's record when sc), then fire the probe with the record's identity. */
static llgo_noinline bool probe_push_any(const struct emit_ring *r, uint64_t size, uint64_t rate,
					 uint64_t addr, uint32_t tid, const uint64_t *frames,
					 uint32_t n, const struct stackcopy *sc)
{
	uint64_t copy[LLGO_MAX_FRAMES];
	struct stackcopy wrong;
	if (llgo_unlikely(probe_corrupt_every) && n > 0 && n <= LLGO_MAX_FRAMES &&
	    ++probe_corrupt_count % probe_corrupt_every == 0) {
		memcpy(copy, frames, 8u * n);
		copy[0] += 16;
		frames = copy;
		if (sc) { /* the daemon unwinds from the registers: the copy's pc is wrong */
			wrong = *sc;
			wrong.regs.ip += 16;
			sc = &wrong;
		}
	}
	struct llgo_ring_header *h = r->hdr;
	if (!(sc ? stackcopy_push(r, size, rate, addr, tid, frames, n, sc)
		 : emit_push_alloc(r, size, rate, addr, tid, frames, n)))
		return false;
	/* Our own store in the push: the committed record's seq. */
	uint64_t seq = atomic_load_explicit(&h->sampled, memory_order_relaxed);
	uint32_t ring_id = h->ring_id;
#ifndef LLGO_HEAP_TEST_NO_PROBE /* tests: a shim older than the probe */
	uint32_t flags = sc ? LLGO_VERIFY_PROBE_RAW : 0;
	STAP_PROBE5(llgo_heap, sample, ring_id, seq, addr, size, flags);
#else
	(void)seq;
	(void)ring_id;
#endif
	return true;
}

bool probe_push(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		uint32_t tid, const uint64_t *frames, uint32_t n)
{
	return probe_push_any(r, size, rate, addr, tid, frames, n, NULL);
}

bool probe_push_raw(const struct emit_ring *r, uint64_t size, uint64_t rate, uint64_t addr,
		    uint32_t tid, const uint64_t *frames, uint32_t n, const struct stackcopy *sc)
{
	return probe_push_any(r, size, rate, addr, tid, frames, n, sc);
}
