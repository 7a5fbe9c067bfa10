// SPDX-License-Identifier: MIT
/*
 * test_cfi.c: agent/cfi.c, the rewrite of .debug_frame (and of an .eh_frame without header)
 * into .eh_frame records and a search table. Hand-made sections check the output byte by
 * byte (CIE ids, augmentation, pointer encodings, CIE pointers, the table's order) and that
 * hostile input (bad lengths, CIE pointers out of range or naming FDEs, unknown opcodes,
 * truncated operands, random mutations) is skipped, never read past; sections are found in
 * real ELF files, compressed ones included. The rows of .eh_frame that unwind_fast.c's walk
 * reads (cfi_eh_row, and its cache) are compared with libdw's reading of the same CFI, row by
 * row, over Debian's libc, libstdc++ and python3 and our own -O2 programs. The check of what
 * libunwind may run (cfi_check_program) refuses each construct libunwind 1.6 mishandles, next
 * to the same instruction with a value it holds, and accepts every program of those files.
 * The unwinding that reads all this is in tests/test_unwind.c.
 */
#include <criterion/criterion.h>
#include <dwarf.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../agent/internal.h"
#include "../agent/unwind/unwind_fast.h"

const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libcriterion.so\n";
}

/* ---- building sections ---------------------------------------------------------------- */

struct sec {
	unsigned char b[8192];
	size_t n;
};

static void put(struct sec *s, const void *p, size_t n)
{
	cr_assert_leq(s->n + n, sizeof(s->b));
	memcpy(s->b + s->n, p, n);
	s->n += n;
}

static void put8(struct sec *s, uint8_t v)
{
	put(s, &v, 1);
}

static void put32(struct sec *s, uint32_t v)
{
	put(s, &v, 4);
}

static void put64(struct sec *s, uint64_t v)
{
	put(s, &v, 8);
}

static void fix_len(struct sec *s, size_t start)
{
	uint32_t l = (uint32_t)(s->n - start - 4);
	memcpy(s->b + start, &l, 4);
}

/* the usual x86-64 CIE program: CFA = rsp + 8, return address at CFA - 8 */
static const unsigned char cie_prog[] = { DW_CFA_def_cfa, 7, 8, DW_CFA_offset | 16, 1 };
/* a function's: advance 4, CFA offset 16 */
static const unsigned char fde_prog[] = { DW_CFA_advance_loc | 4, DW_CFA_def_cfa_offset, 16 };

/* A .debug_frame CIE of version (1, 3 or 4; address size addr for 4); its offset. */
static size_t dbg_cie(struct sec *s, uint8_t version, uint8_t addr)
{
	size_t at = s->n;
	put32(s, 0);
	put32(s, 0xffffffffu);
	put8(s, version);
	put8(s, 0); /* augmentation "" */
	if (version == 4) {
		put8(s, addr);
		put8(s, 0);
	}
	put8(s, 1);    /* code alignment */
	put8(s, 0x78); /* data alignment -8 */
	put8(s, 16);   /* return address register */
	put(s, cie_prog, sizeof(cie_prog));
	fix_len(s, at);
	return at;
}

/* A .debug_frame FDE with 8-byte (or addr-byte) address and range; its offset. */
static size_t dbg_fde(struct sec *s, uint32_t cie, uint64_t start, uint64_t range, int addr,
		      const unsigned char *prog, size_t nprog)
{
	size_t at = s->n;
	put32(s, 0);
	put32(s, cie);
	if (addr == 4) {
		put32(s, (uint32_t)start);
		put32(s, (uint32_t)range);
	} else {
		put64(s, start);
		put64(s, range);
	}
	put(s, prog, nprog);
	fix_len(s, at);
	return at;
}

static const struct cfi_range code[] = { { 0x1000, 0x2000 } };

static int build(struct cfi_table *t, const struct sec *s, bool eh, uint64_t vaddr)
{
	return cfi_build(t, s->b, s->n, eh, vaddr, code, 1, 0x1000);
}

static uint32_t at32(const struct cfi_table *t, size_t off)
{
	cr_assert_leq(off + 4, t->size);
	uint32_t v;
	memcpy(&v, t->image + off, 4);
	return v;
}

static uint64_t at64(const struct cfi_table *t, size_t off)
{
	cr_assert_leq(off + 8, t->size);
	uint64_t v;
	memcpy(&v, t->image + off, 8);
	return v;
}

/* The output's invariants, whatever the input: table sorted and inside the image, every
 * entry's FDE a record before the table whose CIE pointer leads to a CIE (id 0) before it. */
static void check_table(const struct cfi_table *t)
{
	if (!t->count) {
		cr_assert_null(t->image);
		return;
	}
	cr_assert_leq(t->table_off + 8 * t->count, t->size);
	int32_t prev = INT32_MIN;
	for (size_t i = 0; i < t->count; i++) {
		int32_t start = (int32_t)at32(t, t->table_off + 8 * i);
		uint32_t fde = at32(t, t->table_off + 8 * i + 4);
		cr_assert_gt(start, prev, "table not sorted at %zu", i);
		prev = start;
		cr_assert_eq(start, t->entries[i].start);
		cr_assert_eq((int32_t)fde, t->entries[i].fde);
		cr_assert_geq(start, 0);
		cr_assert_leq(0x1000 + (uint64_t)start + t->entries[i].len, 0x2000);
		uint32_t len = at32(t, fde);
		cr_assert_leq(fde + 4 + (uint64_t)len, t->table_off);
		uint32_t back = at32(t, fde + 4);
		cr_assert(back > 0 && back <= fde + 4);
		size_t cie = fde + 4 - back;
		cr_assert_eq(at32(t, cie + 4), 0, "FDE %u names no CIE", fde);
		cr_assert_lt(cie, fde);
	}
}

/* ---- well-formed input ------------------------------------------------------------------ */

Test(cfi, debug_frame_rewritten)
{
	static struct sec s;
	s.n = 0;
	size_t cie = dbg_cie(&s, 1, 8);
	size_t f1 = dbg_fde(&s, (uint32_t)cie, 0x1400, 0x20, 8, fde_prog, sizeof(fde_prog));
	dbg_fde(&s, (uint32_t)cie, 0, 0x20, 8, fde_prog, sizeof(fde_prog));       /* discarded */
	dbg_fde(&s, (uint32_t)cie, 0x3000, 0x20, 8, fde_prog, sizeof(fde_prog));  /* not code */
	dbg_fde(&s, (uint32_t)cie, 0x1ff0, 0x20, 8, fde_prog, sizeof(fde_prog));  /* runs out */
	dbg_fde(&s, (uint32_t)cie, 0x1100, 0x10, 8, fde_prog, sizeof(fde_prog));
	(void)f1;
	struct cfi_table t;
	cr_assert_eq(build(&t, &s, false, 0), 0);
	cr_assert_eq(t.count, 2);
	check_table(&t);
	cr_expect_eq(t.entries[0].start, 0x100);
	cr_expect_eq(t.entries[0].len, 0x10);
	cr_expect_eq(t.entries[1].start, 0x400);
	cr_expect(!t.entries[0].rbp);

	/* the CIE: .eh_frame id, version 1, "zR", the fields as they were, the encoding */
	const unsigned char want_cie[] = { 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1,
					   DW_EH_PE_datarel | DW_EH_PE_udata8 };
	cr_assert_eq(memcmp(t.image + 4, want_cie, sizeof(want_cie)), 0);
	cr_assert_eq(memcmp(t.image + 4 + sizeof(want_cie), cie_prog, sizeof(cie_prog)), 0);
	cr_assert_eq(at32(&t, 0), sizeof(want_cie) + sizeof(cie_prog));
	/* an FDE: back to the CIE, address and range as they were, no augmentation data, the
	 * program */
	size_t fde = (size_t)t.entries[1].fde;
	cr_expect_eq(at32(&t, fde + 4), fde + 4);
	cr_expect_eq(at64(&t, fde + 8), 0x1400);
	cr_expect_eq(at64(&t, fde + 16), 0x20);
	cr_expect_eq(t.image[fde + 24], 0);
	cr_expect_eq(memcmp(t.image + fde + 25, fde_prog, sizeof(fde_prog)), 0);
	cr_expect_eq(at32(&t, fde), 4 + 16 + 1 + sizeof(fde_prog));
	cfi_table_free(&t);
}

/* A CIE after the FDEs naming it, DWARF 4 with 4-byte addresses, and DWARF64 records. */
Test(cfi, later_cie_dwarf4_dwarf64)
{
	static struct sec s;
	s.n = 0;
	size_t fde_at = s.n;
	dbg_fde(&s, 0, 0x1200, 0x30, 4, fde_prog, sizeof(fde_prog)); /* CIE pointer fixed below */
	size_t cie = dbg_cie(&s, 4, 4);
	uint32_t c = (uint32_t)cie;
	memcpy(s.b + fde_at + 4, &c, 4);
	/* a DWARF64 CIE and FDE: length escape, 8-byte ids */
	size_t cie64 = s.n;
	put32(&s, 0xffffffffu);
	put64(&s, 0);
	put64(&s, UINT64_MAX);
	put8(&s, 3);
	put8(&s, 0);
	put8(&s, 1);
	put8(&s, 0x78);
	put8(&s, 16);
	put(&s, cie_prog, sizeof(cie_prog));
	uint64_t l = s.n - cie64 - 12;
	memcpy(s.b + cie64 + 4, &l, 8);
	size_t fde64 = s.n;
	put32(&s, 0xffffffffu);
	put64(&s, 0);
	put64(&s, cie64);
	put64(&s, 0x1800);
	put64(&s, 0x40);
	put(&s, fde_prog, sizeof(fde_prog));
	l = s.n - fde64 - 12;
	memcpy(s.b + fde64 + 4, &l, 8);

	struct cfi_table t;
	cr_assert_eq(build(&t, &s, false, 0), 0);
	cr_assert_eq(t.count, 2);
	check_table(&t);
	/* DWARF 4, 4-byte addresses: version 3 out, address and segment sizes dropped,
	 * datarel udata4 */
	size_t f = (size_t)t.entries[0].fde;
	size_t ci = f + 4 - at32(&t, f + 4);
	const unsigned char want[] = { 3, 'z', 'R', 0, 1, 0x78, 16, 1,
				       DW_EH_PE_datarel | DW_EH_PE_udata4 };
	cr_expect_eq(memcmp(t.image + ci + 8, want, sizeof(want)), 0);
	cr_expect_eq(at32(&t, f + 8), 0x1200);
	cr_expect_eq(at32(&t, f + 12), 0x30);
	cr_expect_eq(t.entries[1].start, 0x800);
	cfi_table_free(&t);
}

/* .eh_frame without header: pc-relative pointers decoded, personality and LSDA dropped, 'S'
 * kept, an FDE using DW_CFA_set_loc dropped, rbp-based CFI noted. */
Test(cfi, eh_frame_rewritten)
{
	static struct sec s;
	s.n = 0;
	const uint64_t vaddr = 0x3000;
	size_t cie = s.n;
	put32(&s, 0);
	put32(&s, 0);
	put8(&s, 1);
	put(&s, "zPLR", 5);
	put8(&s, 1);
	put8(&s, 0x78);
	put8(&s, 16);
	put8(&s, 7); /* augmentation data: P enc + 4 bytes, L enc, R enc */
	put8(&s, DW_EH_PE_indirect | DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	put32(&s, 0x1234);
	put8(&s, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	put8(&s, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	put(&s, cie_prog, sizeof(cie_prog));
	fix_len(&s, cie);
	size_t sig = s.n;
	put32(&s, 0);
	put32(&s, 0);
	put8(&s, 1);
	put(&s, "zRS", 4);
	put8(&s, 1);
	put8(&s, 0x78);
	put8(&s, 16);
	put8(&s, 1);
	put8(&s, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	fix_len(&s, sig);
	/* FDEs: length, CIE pointer (back from the field), pc-relative start, range, LSDA */
	const unsigned char rbp_prog[] = { DW_CFA_def_cfa_register, 6 };
	const unsigned char setloc[] = { DW_CFA_set_loc, 0, 0, 0, 0 };
	struct {
		size_t cie;
		uint64_t start;
		const unsigned char *prog;
		size_t nprog;
	} fdes[] = { { cie, 0x1100, rbp_prog, sizeof(rbp_prog) },
		     { sig, 0x1200, fde_prog, sizeof(fde_prog) },
		     { cie, 0x1300, setloc, sizeof(setloc) } };
	for (size_t i = 0; i < 3; i++) {
		size_t at = s.n;
		put32(&s, 0);
		put32(&s, (uint32_t)(s.n - fdes[i].cie));
		put32(&s, (uint32_t)(fdes[i].start - (vaddr + s.n)));
		put32(&s, 0x10);
		if (fdes[i].cie == cie) {
			put8(&s, 4);
			put32(&s, 0);
		} else {
			put8(&s, 0);
		}
		put(&s, fdes[i].prog, fdes[i].nprog);
		fix_len(&s, at);
	}
	put32(&s, 0); /* terminator */
	struct cfi_table t;
	cr_assert_eq(build(&t, &s, true, vaddr), 0);
	cr_assert_eq(t.count, 2);
	check_table(&t);
	cr_expect_eq(t.entries[0].start, 0x100);
	cr_expect(t.entries[0].rbp);
	cr_expect_eq(t.entries[1].start, 0x200);
	cr_expect(!t.entries[1].rbp);
	size_t f = (size_t)t.entries[1].fde;
	size_t ci = f + 4 - at32(&t, f + 4);
	cr_expect_eq(memcmp(t.image + ci + 9, "zRS", 4), 0);
	cr_expect_eq(at64(&t, f + 16), 0x10);
	cr_expect_eq(t.image[f + 24], 0, "augmentation data kept");
	f = (size_t)t.entries[0].fde;
	ci = f + 4 - at32(&t, f + 4);
	cr_expect_eq(memcmp(t.image + ci + 9, "zR", 3), 0);
	cfi_table_free(&t);
}

/* ---- hostile input ------------------------------------------------------------------------- */

static size_t good_fde;

/* A section of one CIE and one good FDE (at good_fde), then the bad records make writes:
 * want FDEs are kept. */
static void hostile(const char *what, void (*make)(struct sec *s, size_t cie), size_t want)
{
	static struct sec s;
	s.n = 0;
	size_t cie = dbg_cie(&s, 1, 8);
	good_fde = dbg_fde(&s, (uint32_t)cie, 0x1100, 0x10, 8, fde_prog, sizeof(fde_prog));
	make(&s, cie);
	struct cfi_table t;
	cr_assert_eq(build(&t, &s, false, 0), 0, "%s", what);
	cr_expect_eq(t.count, want, "%s: %zu FDEs kept", what, t.count);
	check_table(&t);
	cfi_table_free(&t);
}

static void h_long(struct sec *s, size_t cie)
{
	size_t at = dbg_fde(s, (uint32_t)cie, 0x1200, 0x10, 8, fde_prog, sizeof(fde_prog));
	uint32_t l = 0x7ffffff0u;
	memcpy(s->b + at, &l, 4);
}

static void h_cie_out(struct sec *s, size_t cie)
{
	(void)cie;
	dbg_fde(s, 0x7fffff00u, 0x1200, 0x10, 8, fde_prog, sizeof(fde_prog));
}

static void h_cie_self(struct sec *s, size_t cie)
{
	(void)cie;
	dbg_fde(s, (uint32_t)s->n, 0x1200, 0x10, 8, fde_prog, sizeof(fde_prog));
}

static void h_cie_fde(struct sec *s, size_t cie)
{
	/* names the good FDE, which names a CIE: not a CIE itself */
	(void)cie;
	dbg_fde(s, (uint32_t)good_fde, 0x1200, 0x10, 8, fde_prog, sizeof(fde_prog));
}

static void h_cie_mid(struct sec *s, size_t cie)
{
	dbg_fde(s, (uint32_t)cie + 4, 0x1200, 0x10, 8, fde_prog, sizeof(fde_prog));
}

static void h_opcode(struct sec *s, size_t cie)
{
	const unsigned char bad[] = { DW_CFA_advance_loc | 1, 0x3f };
	dbg_fde(s, (uint32_t)cie, 0x1200, 0x10, 8, bad, sizeof(bad));
}

static void h_leb(struct sec *s, size_t cie)
{
	const unsigned char bad[] = { DW_CFA_def_cfa, 0x87, 0x80, 0x80 }; /* runs off the end */
	dbg_fde(s, (uint32_t)cie, 0x1200, 0x10, 8, bad, sizeof(bad));
}

static void h_block(struct sec *s, size_t cie)
{
	const unsigned char bad[] = { DW_CFA_expression, 16, 0x7f, 1, 2 }; /* 127-byte block */
	dbg_fde(s, (uint32_t)cie, 0x1200, 0x10, 8, bad, sizeof(bad));
}

static void h_short(struct sec *s, size_t cie)
{
	/* an FDE too short for its address and range */
	size_t at = s->n;
	put32(s, 0);
	put32(s, (uint32_t)cie);
	put64(s, 0x1200);
	fix_len(s, at);
}

static void h_bad_cie(struct sec *s, size_t cie)
{
	(void)cie;
	/* an augmented CIE, a version-2 CIE, a segmented DWARF 4 CIE: each named by an FDE */
	for (int k = 0; k < 3; k++) {
		size_t c = dbg_cie(s, k == 1 ? 2 : k == 2 ? 4 : 1, 8);
		if (k == 0)
			s->b[c + 9] = 'z'; /* augmentation "z", the rest then misread */
		if (k == 2)
			s->b[c + 11] = 1;
		dbg_fde(s, (uint32_t)c, 0x1200 + 0x10 * (uint64_t)k, 0x10, 8, fde_prog,
			sizeof(fde_prog));
	}
}

static void h_zero(struct sec *s, size_t cie)
{
	put32(s, 0); /* a zero length ends the scan; what follows is not read */
	dbg_fde(s, (uint32_t)cie, 0x1200, 0x10, 8, fde_prog, sizeof(fde_prog));
}

static void h_negative(struct sec *s, size_t cie)
{
	dbg_fde(s, (uint32_t)cie, 0xfffffffffffff000u, 0x2000, 8, fde_prog, sizeof(fde_prog));
	dbg_fde(s, (uint32_t)cie, 0x1200, UINT64_MAX, 8, fde_prog, sizeof(fde_prog));
}

Test(cfi, hostile_records)
{
	hostile("length past the section", h_long, 1);
	hostile("CIE pointer out of range", h_cie_out, 1);
	hostile("CIE pointer naming its own FDE", h_cie_self, 1);
	hostile("CIE pointer naming an FDE", h_cie_fde, 1);
	hostile("CIE pointer into a CIE", h_cie_mid, 1);
	hostile("unknown opcode", h_opcode, 1);
	hostile("LEB128 past the record", h_leb, 1);
	hostile("expression block past the record", h_block, 1);
	hostile("FDE too short", h_short, 1);
	hostile("bad CIEs", h_bad_cie, 1);
	hostile("zero length", h_zero, 1);
	hostile("address and range wrapping", h_negative, 1);
}

/* Random mutations of a good section: whatever is kept keeps the output's invariants (run
 * under ASan by make SAN=address,undefined, which also checks nothing is read past). */
Test(cfi, random_mutations)
{
	static struct sec good, s;
	good.n = 0;
	size_t cie = dbg_cie(&good, 3, 8);
	for (int i = 0; i < 8; i++)
		dbg_fde(&good, (uint32_t)cie, 0x1000 + 0x40 * (uint64_t)i, 0x40, 8, fde_prog,
			sizeof(fde_prog));
	srand(1234);
	for (int round = 0; round < 20000; round++) {
		s = good;
		int flips = 1 + rand() % 4;
		for (int k = 0; k < flips; k++)
			s.b[(size_t)rand() % s.n] = (unsigned char)rand();
		if (round % 7 == 0)
			s.n = (size_t)rand() % good.n; /* cut short */
		/* an exact-size heap copy, so a read past it is seen */
		unsigned char *p = malloc(s.n ? s.n : 1);
		cr_assert(p);
		memcpy(p, s.b, s.n);
		struct cfi_table t;
		int rc = cfi_build(&t, p, s.n, round % 2 == 0, 0x3000, code, 1, 0x1000);
		cr_assert(rc == 0 || rc == -ENOMEM);
		check_table(&t);
		cfi_table_free(&t);
		free(p);
	}
}

/* ---- sections of real files ---------------------------------------------------------------- */

static unsigned char *map_file(const char *path, size_t *size)
{
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0, "%s", path);
	struct stat st;
	cr_assert(fstat(fd, &st) == 0);
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	cr_assert(p != MAP_FAILED);
	*size = (size_t)st.st_size;
	return p;
}

/* dbgframe_chains's .debug_frame, plain and compressed (objcopy), gives the same table; a cut
 * or damaged file gives an error, not a read past it. */
Test(cfi, sections_of_real_files, .timeout = 60)
{
	char dir[] = "/tmp/llgo-cfi.XXXXXX", cmd[8600], zpath[64];
	cr_assert(mkdtemp(dir));
	snprintf(zpath, sizeof(zpath), "%s/z", dir);
	snprintf(cmd, sizeof(cmd), "objcopy --compress-debug-sections=zlib %s %s",
		 LLGO_BUILD_DIR "/progs/dbgframe_chains", zpath);
	cr_assert_eq(system(cmd), 0);
	size_t size, zsize;
	unsigned char *img = map_file(LLGO_BUILD_DIR "/progs/dbgframe_chains", &size);
	unsigned char *zimg = map_file(zpath, &zsize);
	const unsigned char *sec, *zsec;
	size_t len, zlen;
	uint64_t vaddr;
	void *owned, *zowned;
	cr_assert_eq(cfi_elf_section(img, size, ".debug_frame", &sec, &len, &vaddr, &owned), 0);
	cr_assert_null(owned);
	cr_assert_eq(cfi_elf_section(zimg, zsize, ".debug_frame", &zsec, &zlen, &vaddr, &zowned),
		     0);
	cr_assert_not_null(zowned, "objcopy left .debug_frame uncompressed");
	cr_assert_eq(zlen, len);
	cr_assert_eq(memcmp(sec, zsec, len), 0);
	free(zowned);
	/* not compressed when the caller only asks where it is */
	cr_assert_eq(cfi_elf_section(zimg, zsize, ".debug_frame", &zsec, &zlen, &vaddr, NULL), 0);
	cr_assert_lt(zlen, len);
	struct cfi_range all = { 0, 1u << 30 };
	struct cfi_table t;
	cr_assert_eq(cfi_build(&t, sec, len, false, 0, &all, 1, 0), 0);
	cr_expect_geq(t.count, 6);
	cfi_table_free(&t);
	cr_expect_eq(cfi_elf_section(img, size, ".no_such", &sec, &len, &vaddr, &owned), -ENOENT);
	/* cut short: the section headers (at the end) are gone */
	cr_expect_neq(cfi_elf_section(img, size / 2, ".debug_frame", &sec, &len, &vaddr, &owned),
		      0);
	/* a damaged header: section header string table index out of range */
	unsigned char *copy = malloc(size);
	cr_assert(copy);
	memcpy(copy, img, size);
	Elf64_Ehdr eh;
	memcpy(&eh, copy, sizeof(eh));
	eh.e_shstrndx = 0xfff0;
	memcpy(copy, &eh, sizeof(eh));
	cr_expect_neq(cfi_elf_section(copy, size, ".debug_frame", &sec, &len, &vaddr, &owned), 0);
	free(copy);
	munmap(img, size);
	munmap(zimg, zsize);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

/* ---- rows: cfi_eh_row and unwind_fast.c's cache against libdw -------------------------------- */

struct rows_file {
	unsigned char *img;
	size_t size;
	struct cfi_seg segs[UWFAST_MAX_SEGS];
	size_t nsegs;
	uint64_t lo, hi, hdr, table, count;
};

/* The PT_LOAD segments and the .eh_frame_hdr search table, as unwind.c's uwfile_parse finds
 * them (these files' headers use the encodings every linker writes). */
static void rows_open(struct rows_file *f, const char *path)
{
	memset(f, 0, sizeof(*f));
	f->img = map_file(path, &f->size);
	Elf64_Ehdr eh;
	memcpy(&eh, f->img, sizeof(eh));
	f->lo = UINT64_MAX;
	uint64_t hdr = 0;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		memcpy(&ph, f->img + eh.e_phoff + i * sizeof(ph), sizeof(ph));
		if (ph.p_type == PT_GNU_EH_FRAME)
			hdr = ph.p_vaddr;
		if (ph.p_type != PT_LOAD || f->nsegs == UWFAST_MAX_SEGS)
			continue;
		f->segs[f->nsegs++] = (struct cfi_seg){ ph.p_vaddr, ph.p_offset, ph.p_filesz };
		if (ph.p_vaddr < f->lo)
			f->lo = ph.p_vaddr;
		if (ph.p_vaddr + ph.p_memsz > f->hi)
			f->hi = ph.p_vaddr + ph.p_memsz;
	}
	struct cfi_file cf = { f->img, f->size, f->segs, f->nsegs, f->lo, f->hi, NULL };
	const unsigned char *h = cfi_file_bytes(&cf, hdr, 12);
	cr_assert(hdr && h, "%s: no .eh_frame_hdr", path);
	cr_assert(h[0] == 1 && h[1] == 0x1b && h[2] == 0x03 && h[3] == 0x3b,
		  "%s: .eh_frame_hdr encodings %x %x %x", path, h[1], h[2], h[3]);
	uint32_t count;
	memcpy(&count, h + 8, 4);
	f->hdr = hdr;
	f->table = hdr + 12;
	f->count = count;
}

/* ops (n of them) as libdw gives a register's rule: where the fast path's rule says. */
static bool rows_same_rule(const Dwarf_Op *ops, size_t n, const Dwarf_Op *mem, uint8_t where,
			   uint64_t off)
{
	switch (where) {
	case CFI_SAME:
		return n == 0 && ops == NULL;
	case CFI_UNDEF:
		return n == 0 && ops == mem;
	case CFI_CFAREL:
		if (n == 0 || ops[0].atom != DW_OP_call_frame_cfa)
			return false;
		if (off == 0)
			return n == 1;
		return n == 2 && ops[1].atom == DW_OP_plus_uconst && ops[1].number == off;
	}
	return false;
}

/*
 * Every row of every FDE of path's .eh_frame (libdw's rows, from dwarf_cfi_addrframe and
 * dwarf_frame_info), probed at its first, middle and last byte: where cfi_eh_row gives a row,
 * the CFA rule, the return address's and rbp's rules must be libdw's, and the fast path's
 * cache must give back the same row (stored, then read). At least min_share of the rows
 * must be ones the fast path takes.
 */
static void rows_check(const char *path, double min_share)
{
	struct rows_file rf;
	rows_open(&rf, path);
	struct uwfast_file ff;
	uwfast_file_init(&ff, rf.img, rf.size, NULL, rf.segs, rf.nsegs, rf.lo, rf.hi, rf.hdr,
			 rf.table, rf.count);
	cr_assert_eq(ff.fde_count, rf.count, "%s: the fast path refuses the file", path);
	elf_version(EV_CURRENT);
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0);
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	Dwarf_CFI *cfi = elf ? dwarf_getcfi_elf(elf) : NULL;
	cr_assert(cfi, "%s: libdw reads no CFI", path);
	const unsigned char *tab = cfi_file_bytes(&ff.cfi, rf.table, rf.count * 8);
	cr_assert(tab);
	unsigned long rows = 0, ours = 0, probes = 0;
	for (uint64_t i = 0; i < rf.count; i++) {
		int32_t s, o, next;
		memcpy(&s, tab + i * 8, 4);
		memcpy(&o, tab + i * 8 + 4, 4);
		uint64_t pc = rf.hdr + (uint64_t)(int64_t)s, fde = rf.hdr + (uint64_t)(int64_t)o;
		uint64_t limit = rf.hi;
		if (i + 1 < rf.count) {
			memcpy(&next, tab + (i + 1) * 8, 4);
			limit = rf.hdr + (uint64_t)(int64_t)next;
		}
		while (pc < limit) {
			Dwarf_Frame *fr;
			if (dwarf_cfi_addrframe(cfi, pc, &fr) != 0)
				break; /* past the FDE's end */
			Dwarf_Addr rs, re;
			bool signal;
			cr_assert_geq(dwarf_frame_info(fr, &rs, &re, &signal), 0);
			if (re <= pc || re > limit)
				re = limit;
			rows++;
			uint64_t probe[3] = { pc, pc + (re - pc) / 2, re - 1 };
			bool taken = false;
			for (int k = 0; k < 3; k++) {
				struct cfi_row r, c1, c2;
				int rc = cfi_eh_row(&ff.cfi, fde, probe[k], &r);
				cr_assert_neq(rc, -ENOENT, "%s: pc %#lx: the FDE at %#lx does not cover it",
					      path, (unsigned long)probe[k], (unsigned long)fde);
				/* the cache: the first call computes, the second reads the slot */
				cr_assert_eq(uwfast_file_row(&ff, probe[k], &c1), rc == 0);
				cr_assert_eq(uwfast_file_row(&ff, probe[k], &c2), rc == 0);
				if (rc != 0)
					continue;
				taken = true;
				probes++;
				Dwarf_Frame *pf;
				cr_assert_eq(dwarf_cfi_addrframe(cfi, probe[k], &pf), 0);
				Dwarf_Op *ops, mem[3];
				size_t n;
				cr_assert_eq(dwarf_frame_cfa(pf, &ops, &n), 0);
				cr_assert(n == 1 && ops[0].atom == DW_OP_bregx &&
					  ops[0].number == (r.cfa_rbp ? 6u : 7u) && ops[0].number2 == r.cfa_off,
					  "%s: pc %#lx: CFA %s%+ld, libdw's differs", path,
					  (unsigned long)probe[k], r.cfa_rbp ? "rbp" : "rsp", (long)r.cfa_off);
				cr_assert_eq(dwarf_frame_register(pf, 16, mem, &ops, &n), 0);
				cr_assert(rows_same_rule(ops, n, mem, r.ra, r.ra_off),
					  "%s: pc %#lx: return address rule %d%+ld, libdw's differs", path,
					  (unsigned long)probe[k], r.ra, (long)r.ra_off);
				cr_assert_eq(dwarf_frame_register(pf, 6, mem, &ops, &n), 0);
				cr_assert(rows_same_rule(ops, n, mem, r.rbp, r.rbp_off),
					  "%s: pc %#lx: rbp rule %d%+ld, libdw's differs", path,
					  (unsigned long)probe[k], r.rbp, (long)r.rbp_off);
				free(pf);
				for (int j = 0; j < 2; j++) {
					const struct cfi_row *c = j ? &c2 : &c1;
					cr_assert(c->cfa_rbp == r.cfa_rbp && c->cfa_off == r.cfa_off &&
						  c->ra == r.ra && c->rbp == r.rbp &&
						  (r.ra != CFI_CFAREL || c->ra_off == r.ra_off) &&
						  (r.rbp != CFI_CFAREL || c->rbp_off == r.rbp_off),
						  "%s: pc %#lx: the cache's row differs", path,
						  (unsigned long)probe[k]);
				}
			}
			ours += taken;
			free(fr);
			pc = re;
		}
	}
	fprintf(stderr, "%s: %lu FDEs, %lu rows, %lu (%.1f%%) taken by the fast path, %lu probes "
			"agree with libdw\n",
		path, (unsigned long)rf.count, rows, ours, rows ? 100.0 * (double)ours / (double)rows : 0,
		probes);
	cr_expect_gt(rows, rf.count, "%s: %lu rows", path, rows);
	cr_expect_geq((double)ours, min_share * (double)rows, "%s: only %lu of %lu rows taken",
		      path, ours, rows);
	uwfast_file_release(&ff);
	dwarf_cfi_end(cfi);
	elf_end(elf);
	close(fd);
	munmap(rf.img, rf.size);
}

Test(cfi, eh_rows_match_libdw, .timeout = 120)
{
	rows_check("/lib/x86_64-linux-gnu/libc.so.6", 0.9);
	rows_check("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", 0.9);
	rows_check("/usr/bin/python3", 0.9);
	rows_check(LLGO_BUILD_DIR "/progs/nofp_cxx", 0.9);
	rows_check(LLGO_BUILD_DIR "/progs/nofp_chains", 0.9);
}

/* ---- what libunwind may run: cfi_check_program -------------------------------------------- */

/* A program checked whole, as a CIE's is (and with DW_CFA_set_loc operands as pcrel sdata4,
 * as an .eh_frame FDE's would be). */
static bool check_whole(const unsigned char *p, size_t n)
{
	/* an exact-size heap copy, so a read past it is seen under ASan */
	unsigned char *c = malloc(n ? n : 1);
	cr_assert(c);
	memcpy(c, p, n);
	bool ok = cfi_check_program(c, n, 0x1000, UINT64_MAX, 1, DW_EH_PE_pcrel | DW_EH_PE_sdata4);
	free(c);
	return ok;
}

struct check_pair {
	const char *what;
	unsigned char bad[16], good[16];
	size_t nbad, ngood;
};

#define PAIR(w, b, g) { w, b, g, sizeof((unsigned char[])b), sizeof((unsigned char[])g) }
#define B(...) { __VA_ARGS__ }

/* Each construct libunwind 1.6 mishandles is refused, and the same instruction with a value
 * libunwind holds is accepted (so each refusal is for the reason named). */
Test(cfi, check_refuses_what_libunwind_mishandles)
{
	static const struct check_pair pairs[] = {
		PAIR("DW_CFA_register, second register 2^32-1",
		     B(DW_CFA_register, 16, 0xff, 0xff, 0xff, 0xff, 0x0f), B(DW_CFA_register, 16, 6)),
		PAIR("DW_CFA_register, second register 17", B(DW_CFA_register, 16, 17),
		     B(DW_CFA_register, 16, 16)),
		PAIR("DW_CFA_register, first register 17", B(DW_CFA_register, 17, 6),
		     B(DW_CFA_register, 16, 6)),
		PAIR("DW_CFA_offset r17", B(DW_CFA_offset | 17, 1), B(DW_CFA_offset | 16, 1)),
		PAIR("DW_CFA_restore r17", B(DW_CFA_restore | 17), B(DW_CFA_restore | 16)),
		PAIR("DW_CFA_offset_extended r17", B(DW_CFA_offset_extended, 17, 1),
		     B(DW_CFA_offset_extended, 16, 1)),
		PAIR("DW_CFA_offset_extended_sf r17", B(DW_CFA_offset_extended_sf, 17, 0x7f),
		     B(DW_CFA_offset_extended_sf, 16, 0x7f)),
		PAIR("DW_CFA_GNU_negative_offset_extended r17",
		     B(DW_CFA_GNU_negative_offset_extended, 17, 1),
		     B(DW_CFA_GNU_negative_offset_extended, 16, 1)),
		PAIR("DW_CFA_restore_extended r17", B(DW_CFA_restore_extended, 17),
		     B(DW_CFA_restore_extended, 16)),
		PAIR("DW_CFA_undefined r17", B(DW_CFA_undefined, 17), B(DW_CFA_undefined, 16)),
		PAIR("DW_CFA_same_value r17", B(DW_CFA_same_value, 17), B(DW_CFA_same_value, 16)),
		PAIR("DW_CFA_def_cfa r17", B(DW_CFA_def_cfa, 17, 8), B(DW_CFA_def_cfa, 7, 8)),
		PAIR("DW_CFA_def_cfa_sf r17", B(DW_CFA_def_cfa_sf, 17, 0x7f),
		     B(DW_CFA_def_cfa_sf, 7, 0x7f)),
		PAIR("DW_CFA_def_cfa_register r17", B(DW_CFA_def_cfa_register, 17),
		     B(DW_CFA_def_cfa_register, 6)),
		PAIR("DW_CFA_expression r17", B(DW_CFA_expression, 17, 1, DW_OP_lit0),
		     B(DW_CFA_expression, 16, 1, DW_OP_lit0)),
		PAIR("DW_CFA_val_expression r17", B(DW_CFA_val_expression, 17, 1, DW_OP_lit0),
		     B(DW_CFA_val_expression, 16, 1, DW_OP_lit0)),
		PAIR("DW_OP_div (INT64_MIN / -1 faults)",
		     B(DW_CFA_def_cfa_expression, 5, DW_OP_breg6, 0, DW_OP_lit0, DW_OP_not, DW_OP_div),
		     B(DW_CFA_def_cfa_expression, 5, DW_OP_breg6, 0, DW_OP_lit0, DW_OP_not, DW_OP_plus)),
		PAIR("DW_OP_skip back to itself",
		     B(DW_CFA_def_cfa_expression, 3, DW_OP_skip, 0xfd, 0xff),
		     B(DW_CFA_def_cfa_expression, 3, DW_OP_const2u, 0xfd, 0xff)),
		PAIR("DW_OP_bra back",
		     B(DW_CFA_def_cfa_expression, 4, DW_OP_lit1, DW_OP_bra, 0xfc, 0xff),
		     B(DW_CFA_def_cfa_expression, 4, DW_OP_lit1, DW_OP_const2s, 0xfc, 0xff)),
		PAIR("an operation libunwind does not evaluate",
		     B(DW_CFA_def_cfa_expression, 2, DW_OP_fbreg, 0),
		     B(DW_CFA_def_cfa_expression, 2, DW_OP_breg7, 0)),
		PAIR("expression block past the program", B(DW_CFA_def_cfa_expression, 5, DW_OP_lit0),
		     B(DW_CFA_def_cfa_expression, 1, DW_OP_lit0)),
		PAIR("operand past the expression", B(DW_CFA_def_cfa_expression, 1, DW_OP_const1u, 5),
		     B(DW_CFA_def_cfa_expression, 2, DW_OP_const1u, 5)),
		PAIR("DW_CFA_val_offset (libunwind runs its operands as instructions)",
		     B(DW_CFA_val_offset, 16, 1), B(DW_CFA_offset_extended, 16, 1)),
		PAIR("DW_CFA_val_offset_sf", B(DW_CFA_val_offset_sf, 16, 1),
		     B(DW_CFA_offset_extended_sf, 16, 1)),
		PAIR("an unknown opcode", B(0x17, 0), B(DW_CFA_nop, 0)),
		PAIR("DW_CFA_MIPS_advance_loc8", B(DW_CFA_MIPS_advance_loc8, 0, 0, 0, 0, 0, 0, 0, 0),
		     B(DW_CFA_advance_loc4, 0, 0, 0, 0)),
		PAIR("DW_CFA_GNU_window_save", B(DW_CFA_GNU_window_save), B(DW_CFA_nop)),
		PAIR("DW_CFA_restore_state with nothing remembered", B(DW_CFA_restore_state),
		     B(DW_CFA_remember_state, DW_CFA_restore_state)),
		PAIR("LEB128 of 10 bytes",
		     B(DW_CFA_def_cfa_offset, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1),
		     B(DW_CFA_def_cfa_offset, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1)),
		PAIR("a register in a 10-byte LEB128 (17 modulo libunwind's shifts)",
		     B(DW_CFA_undefined, 0x91, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0),
		     B(DW_CFA_undefined, 0x90, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0)),
		PAIR("an operand cut by the program's end", B(DW_CFA_register, 16),
		     B(DW_CFA_register, 16, 6)),
		PAIR("DW_CFA_set_loc cut short", B(DW_CFA_set_loc, 0, 0, 0),
		     B(DW_CFA_set_loc, 0, 0, 0, 0)),
	};
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		cr_expect_not(check_whole(pairs[i].bad, pairs[i].nbad), "accepted: %s", pairs[i].what);
		cr_expect(check_whole(pairs[i].good, pairs[i].ngood), "refused: the good one of %s",
			  pairs[i].what);
	}
	/* remember_state nests 64 deep at most (each one a state libunwind allocates) */
	unsigned char deep[65];
	memset(deep, DW_CFA_remember_state, sizeof(deep));
	cr_expect(check_whole(deep, 64));
	cr_expect_not(check_whole(deep, 65));
	unsigned char pairs64[130];
	for (size_t i = 0; i < sizeof(pairs64); i++)
		pairs64[i] = i % 2 ? DW_CFA_restore_state : DW_CFA_remember_state;
	cr_expect(check_whole(pairs64, sizeof(pairs64)), "65 remember/restore pairs, one deep");
	/* DW_CFA_set_loc: operands of known size only */
	const unsigned char loc8[] = { DW_CFA_set_loc, 1, 2, 3, 4, 5, 6, 7, 8 };
	cr_expect(cfi_check_program(loc8, sizeof(loc8), 0, UINT64_MAX, 1,
				    DW_EH_PE_datarel | DW_EH_PE_udata8));
	cr_expect_not(cfi_check_program(loc8, sizeof(loc8), 0, UINT64_MAX, 1, DW_EH_PE_omit));
	cr_expect_not(cfi_check_program(loc8, sizeof(loc8), 0, UINT64_MAX, 1, DW_EH_PE_aligned));
	cr_expect_not(cfi_check_program(loc8, sizeof(loc8), 0, UINT64_MAX, 1, 0x05));
}

/* An FDE's program is checked as far as libunwind runs it for a pc: up to the first
 * instruction whose location (advanced by the program, scaled by the code alignment) is past
 * the pc; after a DW_CFA_set_loc, to the end. */
Test(cfi, check_stops_where_libunwind_stops)
{
	const unsigned char p[] = { DW_CFA_def_cfa_offset, 16, DW_CFA_advance_loc | 4,
				    DW_CFA_register, 16, 0xff, 0xff, 0xff, 0xff, 0x0f };
	cr_expect(cfi_check_program(p, sizeof(p), 0x1000, 0x1003, 1, 0x1b));
	cr_expect_not(cfi_check_program(p, sizeof(p), 0x1000, 0x1004, 1, 0x1b));
	cr_expect(cfi_check_program(p, sizeof(p), 0x1000, 0x1007, 2, 0x1b));
	cr_expect_not(cfi_check_program(p, sizeof(p), 0x1000, 0x1008, 2, 0x1b));
	/* advances wrap as libunwind's do: past 2^64 the location starts over */
	const unsigned char w[] = { DW_CFA_advance_loc4, 0xff, 0xff, 0xff, 0xff, DW_CFA_register,
				    16, 17 };
	cr_expect_not(cfi_check_program(w, sizeof(w), UINT64_MAX - 0x1000, UINT64_MAX - 0x800, 1,
					0x1b));
	cr_expect(cfi_check_program(w, sizeof(w), 0x1000, 0x2000, 1, 0x1b));
	/* after set_loc, whatever the locations say */
	const unsigned char s[] = { DW_CFA_set_loc, 0, 0, 0, 0, DW_CFA_advance_loc | 0x3f,
				    DW_CFA_register, 16, 17 };
	cr_expect_not(cfi_check_program(s, sizeof(s), 0x1000, 0x1000, 1, 0x1b));
}

/* Every CIE and FDE program of real files is accepted whole, read from the section itself
 * (the encodings compilers write): the check never truncates a stack libunwind would
 * unwind right. */
static uint64_t real_uleb(const unsigned char **p)
{
	uint64_t v = 0;
	for (unsigned sh = 0;; sh += 7) {
		v |= (uint64_t)(**p & 0x7f) << sh;
		if (!(*(*p)++ & 0x80))
			return v;
	}
}

static size_t real_enc_size(uint8_t enc, const unsigned char **p)
{
	switch (enc & 0x0f) {
	case DW_EH_PE_absptr:
	case DW_EH_PE_udata8:
	case DW_EH_PE_sdata8:
		return 8;
	case DW_EH_PE_udata4:
	case DW_EH_PE_sdata4:
		return 4;
	case DW_EH_PE_udata2:
	case DW_EH_PE_sdata2:
		return 2;
	case DW_EH_PE_uleb128:
	case DW_EH_PE_sleb128: {
		const unsigned char *q = *p;
		real_uleb(&q);
		return (size_t)(q - *p);
	}
	}
	cr_assert_fail("pointer encoding %#x", enc);
	return 0;
}

/* The CIE at c (its length field): program, return column, code alignment, FDE encoding,
 * whether FDEs carry augmentation data. */
struct real_cie {
	const unsigned char *p, *end;
	uint64_t ra, code_align;
	uint8_t enc;
	bool z;
};

static void real_cie(const unsigned char *c, bool eh, struct real_cie *r)
{
	uint32_t len;
	memcpy(&len, c, 4);
	r->end = c + 4 + len;
	const unsigned char *p = c + 8;
	uint8_t version = *p++;
	const char *aug = (const char *)p;
	p += strlen(aug) + 1;
	if (version == 4)
		p += 2; /* address and segment sizes */
	r->code_align = real_uleb(&p);
	real_uleb(&p); /* data alignment */
	r->ra = version == 1 ? *p++ : real_uleb(&p);
	r->enc = eh ? DW_EH_PE_absptr : DW_EH_PE_udata8;
	r->z = aug[0] == 'z';
	if (r->z) {
		uint64_t n = real_uleb(&p);
		const unsigned char *q = p;
		for (const char *a = aug + 1; *a; a++) {
			if (*a == 'R' || *a == 'L') {
				if (*a == 'R')
					r->enc = *q;
				q++;
			} else if (*a == 'P') {
				uint8_t e = *q++;
				q += real_enc_size(e, &q);
			} else {
				cr_assert_eq(*a, 'S', "augmentation %s", aug);
			}
		}
		cr_assert_eq(q, p + n, "augmentation %s: data not as long as it says", aug);
		p += n;
	} else {
		cr_assert_eq(aug[0], '\0', "augmentation %s", aug);
	}
	r->p = p;
}

static void check_real(const char *path, const char *name, bool eh)
{
	size_t size;
	unsigned char *img = map_file(path, &size);
	const unsigned char *sec;
	size_t len;
	uint64_t vaddr;
	void *owned;
	cr_assert_eq(cfi_elf_section(img, size, name, &sec, &len, &vaddr, &owned), 0, "%s", path);
	size_t fdes = 0, refused = 0;
	for (size_t at = 0; at + 8 <= len;) {
		uint32_t l, id;
		memcpy(&l, sec + at, 4);
		memcpy(&id, sec + at + 4, 4);
		if (l == 0)
			break;
		cr_assert(l < 0xfffffff0u && l <= len - at - 4, "%s: record at %zu", path, at);
		if (eh ? id != 0 : id != 0xffffffffu) {
			struct real_cie c;
			real_cie(eh ? sec + at + 4 - id : sec + id, eh, &c);
			const unsigned char *p = sec + at + 8, *end = sec + at + 4 + l;
			p += real_enc_size(c.enc, &p);
			p += real_enc_size(c.enc & 0x0f, &p);
			if (c.z)
				p += real_uleb(&p);
			fdes++;
			bool ok = c.ra < CFI_NREGS &&
				  cfi_check_program(c.p, (size_t)(c.end - c.p), 0, UINT64_MAX,
						    c.code_align, c.enc) &&
				  cfi_check_program(p, (size_t)(end - p), 0, UINT64_MAX, c.code_align,
						    c.enc);
			if (!ok && refused++ < 5)
				fprintf(stderr, "%s: the FDE at %zu refused\n", path, at);
		}
		at += 4 + (size_t)l;
	}
	fprintf(stderr, "%s %s: %zu FDEs checked, %zu refused\n", path, name, fdes, refused);
	cr_expect_gt(fdes, 0, "%s: no FDEs", path);
	cr_expect_eq(refused, 0, "%s: %zu of %zu FDEs refused", path, refused, fdes);
	free(owned);
	munmap(img, size);
}

Test(cfi, check_accepts_real_programs, .timeout = 120)
{
	check_real("/lib/x86_64-linux-gnu/libc.so.6", ".eh_frame", true);
	check_real("/lib64/ld-linux-x86-64.so.2", ".eh_frame", true);
	check_real("/lib/x86_64-linux-gnu/libm.so.6", ".eh_frame", true);
	check_real("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", ".eh_frame", true);
	check_real("/usr/bin/python3", ".eh_frame", true);
	check_real(LLGO_BUILD_DIR "/progs/nofp_chains", ".eh_frame", true);
	check_real(LLGO_BUILD_DIR "/progs/nofp_cxx", ".eh_frame", true);
	check_real(LLGO_BUILD_DIR "/progs/dbgframe_chains", ".debug_frame", false);
}
