// SPDX-License-Identifier: MIT
/*
 * test_cfi_check.c: what agent/cfi.c reads for the unwinders, on real files. The rows of
 * .eh_frame that unwind_fast.c's walk reads (cfi_eh_row, and its cache) are compared with
 * libdw's reading of the same CFI, row by row, over Debian's libc, libstdc++ and python3 and
 * our own -O2 programs. The check of what libunwind may run (cfi_check_program) refuses each
 * construct libunwind 1.6 mishandles, next to the same instruction with a value it holds, and
 * accepts every program of those files. The rewrite itself: test_cfi.c.
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
	f->img = th_map_file(path, &f->size);
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
	unsigned char *img = th_map_file(path, &size);
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
