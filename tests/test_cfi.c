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
 * The rows and the check: test_cfi_check.c; the unwinding that reads all this is in
 * tests/test_unwind.c.
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
#include "helpers.h"

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

/* dbgframe_chains's .debug_frame, plain and compressed (objcopy), gives the same table; a cut
 * or damaged file gives an error, not a read past it. */
Test(cfi, sections_of_real_files, .timeout = 60)
{
	char *dir = th_tmpdir(), zpath[64];
	snprintf(zpath, sizeof(zpath), "%s/z", dir);
	cr_assert_eq(th_sh(NULL, "objcopy --compress-debug-sections=zlib %s %s",
			   LLGO_BUILD_DIR "/progs/dbgframe_chains", zpath), 0);
	size_t size, zsize;
	unsigned char *img = th_map_file(LLGO_BUILD_DIR "/progs/dbgframe_chains", &size);
	unsigned char *zimg = th_map_file(zpath, &zsize);
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
	th_rmdir(dir);
}
