// SPDX-License-Identifier: MIT
/*
 * fuzz_elf.c: libFuzzer harness for the parsers of a hostile ELF file, as a profiled process
 * may map one: the symbolizer's (symbolizer/symparse.c: libelf symbol tables, libdw DWARF
 * lines and inline chains; it runs in the sandboxed llgo-heap-symbolizer process, called here
 * directly) and the unwinder's CFI rewrite (agent/cfi.c, in the daemon: section headers,
 * compressed sections, .debug_frame and .eh_frame records). The input is the file, in a memfd
 * (as the daemon hands the helper a mapping opened through /proc/PID/map_files); a few file
 * offsets taken from it are symbolized, with no debug file, and its .debug_frame and
 * .eh_frame are rewritten as unwind.c would.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../agent/internal.h"
#include "../../symbolizer/symparse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The unwinder's CFI (cfi.c) from the file's own sections, code anywhere below 2^31. */
static void fuzz_cfi(const uint8_t *data, size_t size)
{
	static const struct cfi_range code = { 0x1000, 1u << 31 };
	const char *names[] = { ".debug_frame", ".eh_frame" };
	for (int i = 0; i < 2; i++) {
		const unsigned char *sec;
		size_t len;
		uint64_t vaddr;
		void *owned;
		if (cfi_elf_section(data, size, names[i], &sec, &len, &vaddr, &owned) != 0)
			continue;
		struct cfi_table t;
		cfi_build(&t, sec, len, i == 1, vaddr, &code, 1, 0);
		cfi_table_free(&t);
		free(owned);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 64 || size > (8u << 20))
		return 0;
	fuzz_cfi(data, size);
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
