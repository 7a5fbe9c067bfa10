// SPDX-License-Identifier: MIT
/*
 * fuzz_elf.c: libFuzzer harness for the symbolizer (agent/symbolize.c: libelf symbol tables,
 * libdw DWARF lines and inline chains) and the unwinder's CFI rewrite (agent/cfi.c: section
 * headers, compressed sections, .debug_frame and .eh_frame records) given a hostile ELF file,
 * as a profiled process may map one. The input is the file; it is opened through a memfd (as
 * the daemon opens a mapping through /proc/PID/map_files) and a few addresses taken from it
 * are symbolized; its .debug_frame and .eh_frame are rewritten as unwind.c would.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../agent/internal.h"

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
	struct symfile *f = symfile_get(NULL, fd, NULL);
	close(fd);
	if (!f)
		return 0;
	struct mapping m;
	memset(&m, 0, sizeof(m));
	m.start = 0x400000;
	m.end = m.start + 0x10000000;
	m.offset = 0;
	m.path = (char *)"fuzz";
	m.file = f;
	/* addresses: from the input's first words, and every 64th word after */
	for (size_t off = 0; off + 8 <= size && off < 64 * 64; off += 64) {
		uint64_t a;
		memcpy(&a, data + off, 8);
		struct sym_result r;
		symbolize_pc(&m, m.start + (a % 0x100000), &r);
		symbolize_pc(&m, a, &r);
	}
	symfile_put(f);
	return 0;
}
