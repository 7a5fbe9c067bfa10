// SPDX-License-Identifier: MIT
/*
 * probe.c: the shim's USDT probes (probe.h): llgo_heap:sample, OpenTelemetry's
 * otel_memory:alloc and otel_memory:free, their semaphores, the weight otel_memory:alloc
 * reports, and the test hook that corrupts recorded stacks, so that tests can show
 * `llgo-heap verify` catching a wrong stack.
 *
 * llgo_heap:sample sits in probe_push, a frame-pointer function called from emit_sample,
 * after the record is committed, so when it fires the frame chain is complete: the kernel's
 * user stack (bpf_get_stack with BPF_F_USER_STACK) starts at the probe site in this function,
 * goes through the shim's slow path and reaches the program's allocating call. The daemon
 * trims the shim's frames before comparing (agent/verify/verify.c). Arguments, in this order:
 *   1 ring id (u32), 2 seq of the record (u64), 3 block address (u64), 4 size asked (u64),
 *   5 flags (u32): LLGO_VERIFY_PROBE_RAW when the record carries a stack copy (the kernel
 *     then copies the stack too, for the daemon to unwind both with DWARF).
 *
 * otel_memory:alloc(void *ptr, u64 size, u64 weighted_bytes) and otel_memory:free(void
 * *ptr) each sit alone in a function of their own whose arguments are the probe's, so the
 * probe's arguments are the first argument registers (%rdi, %rsi, %rdx on x86-64; x0, x1,
 * x2 on arm64), as the notes say too: collectors that read the calling convention's
 * registers instead of decoding the notes' argument specs read them right. weighted_bytes
 * is size / (1 - exp(-size/rate)) (docs/sampling.md), computed here only while a collector
 * is attached, without libm (programs linking libllgoheap.a need no -lm): an exp of our own
 * for the range it needs, checked against libm's by tests/test_otel.c.
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

/* The semaphores live in .probes, where tools (libbpf, systemtap, bpftrace) expect them.
 * <sys/sdt.h> refers to a probe's as PROVIDER_NAME_semaphore: llgo_heap:sample's and
 * otel_memory:alloc's are the two halves of probe_alloc_semaphores (internal.h), named here. */
__attribute__((section(".probes"), aligned(4))) volatile union probe_alloc_semaphores
	probe_alloc_semaphores;
__attribute__((section(".probes"))) volatile unsigned short otel_memory_free_semaphore;
__asm__(".globl llgo_heap_sample_semaphore\n\t"
	".hidden llgo_heap_sample_semaphore\n\t"
	".type llgo_heap_sample_semaphore, \"object\"\n\t"
	".size llgo_heap_sample_semaphore, 2\n\t"
	".set llgo_heap_sample_semaphore, probe_alloc_semaphores\n\t"
	".globl otel_memory_alloc_semaphore\n\t"
	".hidden otel_memory_alloc_semaphore\n\t"
	".type otel_memory_alloc_semaphore, \"object\"\n\t"
	".size otel_memory_alloc_semaphore, 2\n\t"
	".set otel_memory_alloc_semaphore, probe_alloc_semaphores + 2");
_Static_assert(sizeof(union probe_alloc_semaphores) == 4, "two 16-bit semaphores, one load");
/* (for <sys/sdt.h>'s C reference to them: hidden, so it takes no GOT load at a probe) */
extern llgo_hidden volatile unsigned short llgo_heap_sample_semaphore;
extern llgo_hidden volatile unsigned short otel_memory_alloc_semaphore;

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

/* ---- OpenTelemetry's memory-profiling probes ---------------------------------------------- */

/* A function whose only work is the probe: no IPA clone may change where its arguments
 * arrive, so they are the calling convention's registers at the probe. */
#if defined(__GNUC__) && !defined(__clang__)
#define PROBE_FIRE llgo_noinline __attribute__((noipa))
#else
#define PROBE_FIRE llgo_noinline
#endif

PROBE_FIRE void probe_otel_alloc_fire(void *ptr, uint64_t size, uint64_t weighted_bytes)
{
	STAP_PROBE3(otel_memory, alloc, ptr, size, weighted_bytes);
}

PROBE_FIRE void probe_otel_free_fire(void *ptr)
{
	STAP_PROBE1(otel_memory, free, ptr);
}

/*
 * 1 - exp(-x) for x >= 0, to a few ulps, with no cancellation for small x:
 *   x < 1/2: the series x - x^2/2! + x^3/3! - ..., to x^20/20! (the next term is below
 *            2^-53 of the sum);
 *   x < 40:  1 - 2^-k exp(-r) with k = round(x / ln 2), r = x - k ln 2 (|r| <= ln2 / 2, ln 2
 *            in two parts so that k ln 2 is exact to 2^-80), exp(-r) by its series to r^17
 *            (exp(-x) <= exp(-1/2) there, so 1 - exp(-x) loses nothing);
 *   x >= 40: 1 (exp(-40) < 2^-57).
 */
static double probe_one_minus_exp_neg(double x)
{
	if (!(x > 0))
		return 0;
	if (x < 0.5) {
		double term = x, sum = x;
		for (int k = 2; k <= 20; k++) {
			term *= -x / k;
			sum += term;
		}
		return sum;
	}
	if (x >= 40)
		return 1;
	const double ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
	int k = (int)(x * 0x1.71547652b82fep0 + 0.5);
	double r = (x - k * ln2_hi) - k * ln2_lo;
	double term = 1, e = 1;
	for (int n = 1; n <= 17; n++) {
		term *= -r / n;
		e += term;
	}
	uint64_t bits = (uint64_t)(1023 - k) << 52; /* 2^-k, k <= 58: a normal double */
	double scale;
	memcpy(&scale, &bits, sizeof(scale));
	return 1 - e * scale;
}

uint64_t probe_otel_weight(uint64_t size, uint64_t rate)
{
	if (rate <= 1 || size == 0)
		return size;
	double p = probe_one_minus_exp_neg((double)size / (double)rate);
	if (p >= 1)
		return size;
	double w = (double)size / p + 0.5;
	return w >= 0x1p64 ? UINT64_MAX : (uint64_t)w;
}

void probe_otel_alloc(uint64_t addr, uint64_t size, uint64_t rate)
{
	probe_otel_alloc_fire((void *)(uintptr_t)addr, size, probe_otel_weight(size, rate));
}

void probe_otel_free(uint64_t addr)
{
	probe_otel_free_fire((void *)(uintptr_t)addr);
}
