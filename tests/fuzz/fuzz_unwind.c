// SPDX-License-Identifier: MIT
/*
 * fuzz_unwind.c: libFuzzer harness for the unwinder (agent/unwind.c, unwind_fast.c and cfi.c,
 * with libunwind's remote walk) given what a hostile process controls: the ELF file it maps (its
 * program headers, .eh_frame_hdr, .eh_frame, .debug_frame) and the registers and stack copy
 * of an ALLOC_RAW record. The input is a small header, the stack bytes, then the file:
 *   u64 ip (an ELF address of the file; the image is loaded at FUZZ_BIAS), u64 bp,
 *   u16 stack length (rounded down to 8 bytes, at most 16 KiB), u16 unused,
 *   the stack (read from sp = FUZZ_SP upwards; return addresses in it are process
 *   addresses, FUZZ_BIAS + ELF address), then the ELF file.
 * Each input is unwound twice, with unwind_fast.c's walk and with libunwind alone; the two
 * must agree (the fast path either gives libunwind's stack or leaves it to libunwind).
 * The corpus seeds (tests/fuzz/corpus/unwind) are real -O2 programs without frame pointers
 * with stacks made of their own functions' addresses.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../agent/internal.h"
#include "../../common/log.h"

#define FUZZ_BIAS 0x555555550000ull
#define FUZZ_SP 0x7ffd12340000ull
#define FUZZ_STACK_MAX 16384u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum { HDR = 20 };
	if (size < HDR || size > (8u << 20))
		return 0;
	uint64_t ip, bp;
	uint16_t slen;
	memcpy(&ip, data, 8);
	memcpy(&bp, data + 8, 8);
	memcpy(&slen, data + 16, 2);
	size_t stack_len = (size_t)slen & ~(size_t)7;
	if (stack_len > FUZZ_STACK_MAX)
		stack_len = FUZZ_STACK_MAX;
	if (stack_len > size - HDR)
		stack_len = (size - HDR) & ~(size_t)7;
	const uint8_t *stack = data + HDR;
	const uint8_t *file = stack + stack_len;
	log_set_level(LOG_LEVEL_ERROR); /* refused CFI is expected here; stderr is for sanitizers */
	size_t flen = size - HDR - stack_len;
	struct llgo_raw_regs regs = {
		.ip = FUZZ_BIAS + ip,
		.sp = FUZZ_SP,
		.bp = bp,
		.stack_hi = FUZZ_SP + stack_len + 4096,
		.stack_len = (uint32_t)stack_len,
	};
	/* The fast path must give libunwind's stack or leave the stack to it: the two walks
	 * differing is a finding like a crash. */
	uint64_t fast[128], slow[128];
	bool fast_trunc, slow_trunc;
	uint32_t nf = unwind_image_stack(file, flen, FUZZ_BIAS, &regs, stack, UNWIND_FAST_ON, fast,
					 128, &fast_trunc);
	uint32_t ns = unwind_image_stack(file, flen, FUZZ_BIAS, &regs, stack, UNWIND_FAST_OFF, slow,
					 128, &slow_trunc);
	if (nf != ns || fast_trunc != slow_trunc || memcmp(fast, slow, nf * sizeof(fast[0])) != 0)
		abort();
	return 0;
}
