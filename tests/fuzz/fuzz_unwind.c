// SPDX-License-Identifier: MIT
/*
 * fuzz_unwind.c: libFuzzer harness for the unwinder (agent/unwind.c and cfi.c, with
 * libunwind's remote walk) given what a hostile process controls: the ELF file it maps (its
 * program headers, .eh_frame_hdr, .eh_frame, .debug_frame) and the registers and stack copy
 * of an ALLOC_RAW record. The input is a small header, the stack bytes, then the file:
 *   u64 ip (an ELF address of the file; the image is loaded at FUZZ_BIAS), u64 bp,
 *   u16 stack length (rounded down to 8 bytes, at most 16 KiB), u16 unused,
 *   the stack (read from sp = FUZZ_SP upwards; return addresses in it are process
 *   addresses, FUZZ_BIAS + ELF address), then the ELF file.
 * The corpus seeds (tests/fuzz/corpus/unwind) are real -O2 programs without frame pointers
 * with stacks made of their own functions' addresses.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../../agent/internal.h"

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
	size_t flen = size - HDR - stack_len;
	struct llgo_raw_regs regs = {
		.ip = FUZZ_BIAS + ip,
		.sp = FUZZ_SP,
		.bp = bp,
		.stack_hi = FUZZ_SP + stack_len + 4096,
		.stack_len = (uint32_t)stack_len,
	};
	uint64_t pcs[128];
	bool truncated;
	unwind_image_stack(file, flen, FUZZ_BIAS, &regs, stack, pcs, 128, &truncated);
	return 0;
}
