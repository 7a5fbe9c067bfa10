// SPDX-License-Identifier: MIT
/*
 * fuzz_elf.c: libFuzzer harness for the symbolizer's parser (symbolizer/symparse.c: libelf
 * symbol tables, libdw DWARF lines and inline chains) given a hostile ELF file, as a profiled
 * process may map one. It runs in the sandboxed llgo-heap-symbolizer process, called here
 * directly. The input is the file, in a memfd (as the daemon hands the helper a mapping
 * opened through /proc/PID/map_files), and a few file offsets taken from it are symbolized;
 * no debug file is found for it.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../symbolizer/symparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 64 || size > (8u << 20))
		return 0;
	int fd = memfd_create("fuzz-elf", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	struct symparse_file *f = symparse_open(fd, NULL, NULL);
	if (!f)
		return 0;
	/* offsets: from the input's first words, and every 64th word after */
	for (size_t off = 0; off + 8 <= size && off < 64 * 64; off += 64) {
		uint64_t a, back;
		memcpy(&a, data + off, 8);
		struct sym_frame fr[SYM_MAX_INLINE];
		symparse_lookup(f, a % 0x100000, fr, &back);
		symparse_lookup(f, a, fr, &back);
	}
	struct symparse_flags fl;
	symparse_flags(f, &fl);
	symparse_close(f);
	return 0;
}
