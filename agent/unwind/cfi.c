// SPDX-License-Identifier: MIT
/*
 * cfi.c: call frame information that libunwind's remote table search cannot reach by itself
 * (a file's .debug_frame, its own or its separate debug file's; an .eh_frame without an
 * .eh_frame_hdr), rewritten once per file into the one form that search reads: .eh_frame
 * records followed by a sorted (initial location, FDE offset) table in .eh_frame_hdr's
 * format. unwind.c serves the result through its address space's access_mem at a synthetic
 * address and hands the table to _Ux86_64_dwarf_search_unwind_table (UNW_INFO_FORMAT_IP_OFFSET:
 * entry starts are offsets from the image's first address, FDE offsets from the synthetic
 * base).
 *
 * The rewrite. Every CIE becomes an .eh_frame CIE (id 0; version 1 kept, 3 and 4 become 3 with
 * DWARF 4's address and segment sizes dropped; augmentation "zR", plus "S" for a signal frame)
 * whose FDE pointers are DW_EH_PE_datarel with the width of the input's addresses, so an FDE's
 * initial location is the ELF address itself and unwind.c sets libunwind's gp to the load bias:
 * the bytes do not depend on where the file is loaded nor on the synthetic address, and are
 * built once per file. A .debug_frame FDE keeps its address bytes as they are (a
 * DW_CFA_set_loc operand, an absolute address of the same width, then reads right too); an
 * .eh_frame FDE's pointer is decoded (absolute or pc-relative) and written as 8 bytes, and one
 * using DW_CFA_set_loc is dropped (its operand would need re-encoding; compilers do not emit
 * it). CIE pointers are rewritten to point back to the rewritten CIE; instructions are copied
 * once the whole program passes the check libunwind's runs get (cfi_check_program, below:
 * every opcode known, every operand inside the record, nothing libunwind mishandles); a
 * program that fails, or a return-address column libunwind cannot hold, drops its record.
 * LSDA and personality are dropped: only unwinding reads this.
 *
 * Hostile input: every length, offset and encoding is checked against the section; a record
 * that fails is skipped, a length that does not fit ends the scan. FDEs must lie inside the
 * caller's executable ranges and point to a CIE that starts exactly at the offset they name
 * (so there is nothing to cycle through: the output's pointers are ours). The work is linear
 * in the section plus a sort.
 *
 * Also here: the rows unwind_fast.c's walk reads (cfi_eh_row), and the check of what
 * libunwind 1.6 may run (cfi_check_program), which unwind.c applies to every FDE a search
 * finds, in .eh_frame_hdr's table or in the rewrite, before libunwind interprets it.
 *
 * Left to others: finding the file and its debug file, the ELF program headers, serving the
 * bytes and the search (unwind.c, symfile.c).
 */
#include <dwarf.h>
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../internal.h"
#include "filecopy.h"

/* The largest section read or inflated (a hostile compressed section names its own size:
 * this bounds what it makes us allocate), and the largest output (its offsets are 32-bit).
 * The largest .eh_frame seen on Debian, python3's, is 401 KiB. */
#define CFI_MAX_SECTION ((uint64_t)256 << 20)
#define CFI_MAX_OUT ((size_t)512 << 20)

static uint32_t cfi_le32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t cfi_le64(const unsigned char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* ---- reading ------------------------------------------------------------------------------ */

struct cfi_in {
	const unsigned char *p, *end;
};

static bool cfi_u8(struct cfi_in *in, uint8_t *v)
{
	if (in->p >= in->end)
		return false;
	*v = *in->p++;
	return true;
}

static bool cfi_skip(struct cfi_in *in, uint64_t n)
{
	if (n > (uint64_t)(in->end - in->p))
		return false;
	in->p += n;
	return true;
}

/* A LEB128 number (value kept only for unsigned ones of up to 64 bits). */
static bool cfi_leb(struct cfi_in *in, uint64_t *v)
{
	uint64_t r = 0;
	for (unsigned shift = 0; in->p < in->end; shift += 7) {
		uint8_t b = *in->p++;
		if (shift < 64)
			r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			return true;
		}
		if (shift > 70)
			return false;
	}
	return false;
}

static bool cfi_block(struct cfi_in *in)
{
	uint64_t n;
	return cfi_leb(in, &n) && cfi_skip(in, n);
}

/* A LEB128 number as libunwind reads it (signed: sign-extended), refused past 9 bytes
 * (where its shifts would overflow). */
static bool cfi_row_leb(struct cfi_in *in, uint64_t *v, bool sign)
{
	uint64_t r = 0;
	for (unsigned shift = 0; shift < 63 && in->p < in->end; shift += 7) {
		uint8_t b = *in->p++;
		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			if (sign && (b & 0x40))
				r |= ~(uint64_t)0 << (shift + 7);
			*v = r;
			return true;
		}
	}
	return false;
}

static bool cfi_row_uleb(struct cfi_in *in, uint64_t *v)
{
	return cfi_row_leb(in, v, false);
}

/* A register number libunwind accepts (read_regnum: below DWARF_NUM_PRESERVED_REGS). */
static bool cfi_row_reg(struct cfi_in *in, uint64_t *reg)
{
	return cfi_row_uleb(in, reg) && *reg < CFI_NREGS;
}

/* Bytes of a DW_EH_PE value's format, 0 for LEB128 forms, -1 for none we read. */
static int cfi_enc_size(uint8_t enc)
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
	case DW_EH_PE_sleb128:
		return 0;
	default:
		return -1;
	}
}

/* An encoded pointer at in (skipped; for fixed-size forms also decoded, pc-relative ones
 * relative to at, the field's ELF address). */
static bool cfi_pointer(struct cfi_in *in, uint8_t enc, uint64_t at, uint64_t *v)
{
	if (enc == DW_EH_PE_omit) {
		*v = 0;
		return true;
	}
	int n = cfi_enc_size(enc);
	if (n < 0 || (enc & DW_EH_PE_indirect))
		return false;
	if (n == 0)
		return cfi_leb(in, v);
	if ((size_t)(in->end - in->p) < (size_t)n)
		return false;
	uint64_t x = 0;
	memcpy(&x, in->p, (size_t)n);
	if (enc & DW_EH_PE_signed && n < 8 && (x >> (8 * n - 1)) & 1)
		x |= ~(uint64_t)0 << (8 * n);
	in->p += n;
	switch (enc & 0x70) {
	case DW_EH_PE_absptr:
		break;
	case DW_EH_PE_pcrel:
		x += at;
		break;
	default:
		return false;
	}
	*v = x;
	return true;
}

/* A CFA program as libunwind would run it (below, "what libunwind may run"); *rbp: some
 * instruction checked puts the CFA on rbp (DWARF register 6). */
static bool cfi_check_run(struct cfi_in in, uint64_t loc, uint64_t end, uint64_t code_align,
			  uint8_t set_loc_enc, bool *rbp);

/* The rewrite keeps only programs libunwind runs safely whole; DW_CFA_set_loc only in
 * .debug_frame (addr: its operand's bytes, 0 in .eh_frame). */
static bool cfi_scan(struct cfi_in in, unsigned addr, bool *rbp)
{
	uint8_t enc = addr == 8 ? DW_EH_PE_udata8 : addr == 4 ? DW_EH_PE_udata4 : DW_EH_PE_omit;
	return cfi_check_run(in, 0, UINT64_MAX, 1, enc, rbp);
}

/* ---- writing ------------------------------------------------------------------------------ */

struct cfi_out {
	unsigned char *p;
	size_t n, cap;
	bool failed;
};

static void cfi_put(struct cfi_out *o, const void *src, size_t n)
{
	if (o->failed)
		return;
	if (n > o->cap - o->n) {
		size_t cap = o->cap ? o->cap : 4096;
		while (cap - o->n < n && cap <= CFI_MAX_OUT)
			cap *= 2;
		unsigned char *q = cap - o->n >= n ? realloc(o->p, cap) : NULL;
		if (!q) {
			o->failed = true;
			return;
		}
		o->p = q;
		o->cap = cap;
	}
	memcpy(o->p + o->n, src, n);
	o->n += n;
}

static void cfi_put8(struct cfi_out *o, uint8_t v)
{
	cfi_put(o, &v, 1);
}

static void cfi_put32(struct cfi_out *o, uint32_t v)
{
	cfi_put(o, &v, 4);
}

/* Set the length field of the record that starts at start (its length excludes itself). */
static void cfi_close(struct cfi_out *o, size_t start)
{
	if (o->failed)
		return;
	uint64_t len = o->n - start - 4;
	if (len >= 0xfffffff0u) {
		o->failed = true;
		return;
	}
	uint32_t l = (uint32_t)len;
	memcpy(o->p + start, &l, 4);
}

/* ---- records ------------------------------------------------------------------------------ */

struct cfi_rec {
	size_t off;                    /* of its length field in the section */
	const unsigned char *id, *end; /* its CIE id / CIE pointer field, and its end */
	bool dwarf64;
};

/* The record at *at (advanced past it); false at the end or at a length that does not fit. */
static bool cfi_next(const unsigned char *sec, size_t len, size_t *at, struct cfi_rec *r)
{
	size_t off = *at, hdr = 4;
	if (len - off < 4)
		return false;
	uint64_t l = cfi_le32(sec + off);
	r->dwarf64 = l == 0xffffffffu;
	if (r->dwarf64) {
		if (len - off < 12)
			return false;
		l = cfi_le64(sec + off + 4);
		hdr = 12;
	} else if (l == 0 || l >= 0xfffffff0u) {
		return false; /* .eh_frame's terminator, or a reserved length */
	}
	if (l > len - off - hdr || l < (r->dwarf64 ? 8u : 4u))
		return false;
	r->off = off;
	r->id = sec + off + hdr;
	r->end = r->id + l;
	*at = off + hdr + (size_t)l;
	return true;
}

/* The record's id field (CIE id or CIE pointer), in points past it. */
static uint64_t cfi_rec_id(const struct cfi_rec *r, struct cfi_in *in)
{
	in->p = r->id + (r->dwarf64 ? 8 : 4);
	in->end = r->end;
	return r->dwarf64 ? cfi_le64(r->id) : cfi_le32(r->id);
}

struct cfi_cie {
	size_t in_off;     /* the record's offset in the section */
	size_t out_off;    /* the rewritten CIE's offset in the output */
	uint8_t addr_size; /* .debug_frame: bytes of an FDE's address and range */
	uint8_t enc;       /* .eh_frame: its FDEs' pointer encoding */
	bool z;            /* .eh_frame: its FDEs carry augmentation data */
	bool rbp;          /* its initial instructions put the CFA on rbp */
};

struct cfi_ctx {
	const unsigned char *sec;
	size_t len;
	bool eh;          /* .eh_frame (else .debug_frame) */
	uint64_t vaddr;   /* .eh_frame's ELF address, for pc-relative pointers */
	const struct cfi_range *code;
	size_t ncode;
	uint64_t ip_base;
	struct cfi_out out;
	struct cfi_cie *cies;
	size_t ncies, cap_cies;
	struct cfi_entry *ents;
	size_t nents, cap_ents;
};

/* A CIE's version (1 or 3, or with v4 also 4) and augmentation string, in past them. */
static bool cfi_cie_head(struct cfi_in *in, bool v4, uint8_t *version, const unsigned char **aug,
			 size_t *auglen)
{
	if (!cfi_u8(in, version) || !(*version == 1 || *version == 3 || (v4 && *version == 4)))
		return false;
	const unsigned char *nul = memchr(in->p, 0, (size_t)(in->end - in->p));
	if (!nul)
		return false;
	*aug = in->p;
	*auglen = (size_t)(nul - in->p);
	in->p = nul + 1;
	return true;
}

/* Parse the CIE r and write its rewritten form; false when it is not one we can use. */
static bool cfi_cie(struct cfi_ctx *x, const struct cfi_rec *r, struct cfi_cie *c)
{
	struct cfi_in in;
	cfi_rec_id(r, &in);
	uint8_t version;
	const unsigned char *aug;
	size_t auglen;
	if (!cfi_cie_head(&in, !x->eh, &version, &aug, &auglen))
		return false;
	c->addr_size = 8;
	c->enc = DW_EH_PE_absptr;
	c->z = false;
	bool signal = false;
	if (!x->eh && auglen)
		return false; /* .debug_frame augmentations are vendor-private */
	if (x->eh && auglen && aug[0] != 'z')
		return false; /* without 'z' an unknown augmentation cannot be skipped */
	if (version == 4) {
		uint8_t seg;
		if (!cfi_u8(&in, &c->addr_size) || !cfi_u8(&in, &seg) || seg != 0 ||
		    (c->addr_size != 4 && c->addr_size != 8))
			return false;
	}
	/* code alignment, data alignment, return address register: copied as they are (a
	 * register libunwind cannot hold drops the CIE) */
	const unsigned char *fields = in.p;
	uint64_t v, ra;
	uint8_t ra8;
	if (!cfi_leb(&in, &v) || !cfi_leb(&in, &v) ||
	    (version == 1 ? !cfi_u8(&in, &ra8) : !cfi_row_uleb(&in, &ra)))
		return false;
	if ((version == 1 ? ra8 : ra) >= CFI_NREGS)
		return false;
	const unsigned char *fields_end = in.p;
	if (auglen) {
		uint64_t n;
		if (!cfi_leb(&in, &n) || n > (uint64_t)(in.end - in.p))
			return false;
		struct cfi_in a = { in.p, in.p + n };
		in.p += n;
		for (size_t i = 1; i < auglen; i++) {
			uint8_t e;
			switch (aug[i]) {
			case 'L':
				if (!cfi_u8(&a, &e))
					return false;
				break;
			case 'P':
				if (!cfi_u8(&a, &e) || cfi_enc_size(e) < 0 || !cfi_pointer(&a, e & 0x0f, 0, &v))
					return false;
				break;
			case 'R':
				if (!cfi_u8(&a, &c->enc))
					return false;
				break;
			case 'S':
				signal = true;
				break;
			default:
				return false;
			}
		}
		c->z = true;
	}
	if (x->eh && (cfi_enc_size(c->enc) <= 0 || (c->enc & DW_EH_PE_indirect) ||
		      ((c->enc & 0x70) != DW_EH_PE_absptr && (c->enc & 0x70) != DW_EH_PE_pcrel)))
		return false;
	c->rbp = false;
	if (!cfi_scan(in, x->eh ? 0 : c->addr_size, &c->rbp))
		return false;

	struct cfi_out *o = &x->out;
	c->in_off = r->off;
	c->out_off = o->n;
	cfi_put32(o, 0);
	cfi_put32(o, 0); /* CIE id in .eh_frame */
	cfi_put8(o, version == 1 ? 1 : 3);
	cfi_put(o, signal ? "zRS" : "zR", signal ? 4 : 3);
	cfi_put(o, fields, (size_t)(fields_end - fields));
	cfi_put8(o, 1); /* augmentation data: the FDE pointer encoding */
	uint8_t size = x->eh ? 8 : c->addr_size;
	cfi_put8(o, DW_EH_PE_datarel | (size == 8 ? DW_EH_PE_udata8 : DW_EH_PE_udata4));
	cfi_put(o, in.p, (size_t)(in.end - in.p));
	cfi_close(o, c->out_off);
	return !o->failed;
}

static const struct cfi_cie *cfi_find_cie(const struct cfi_ctx *x, uint64_t off)
{
	size_t lo = 0, hi = x->ncies;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (x->cies[mid].in_off < off)
			lo = mid + 1;
		else if (x->cies[mid].in_off > off)
			hi = mid;
		else
			return &x->cies[mid];
	}
	return NULL;
}

static bool cfi_in_code(const struct cfi_ctx *x, uint64_t lo, uint64_t len)
{
	for (size_t i = 0; i < x->ncode; i++)
		if (lo >= x->code[i].lo && lo < x->code[i].hi && len <= x->code[i].hi - lo)
			return true;
	return false;
}

/* Parse the FDE r and write its rewritten form and table entry; false to skip it. */
static bool cfi_fde(struct cfi_ctx *x, const struct cfi_rec *r, uint64_t id)
{
	struct cfi_in in;
	cfi_rec_id(r, &in);
	/* .eh_frame: distance back from the pointer field; .debug_frame: section offset */
	uint64_t field = (uint64_t)(r->id - x->sec);
	if (x->eh && (id > field || id == 0))
		return false;
	const struct cfi_cie *c = cfi_find_cie(x, x->eh ? field - id : id);
	if (!c)
		return false;
	const unsigned char *addr = in.p;
	uint64_t start, range;
	if (x->eh) {
		uint64_t at = x->vaddr + (uint64_t)(in.p - x->sec);
		if (!cfi_pointer(&in, c->enc, at, &start) ||
		    !cfi_pointer(&in, c->enc & 0x0f, 0, &range))
			return false;
		if (c->z && !cfi_block(&in))
			return false;
	} else {
		if ((size_t)(in.end - in.p) < 2u * c->addr_size)
			return false;
		start = c->addr_size == 8 ? cfi_le64(in.p) : cfi_le32(in.p);
		range = c->addr_size == 8 ? cfi_le64(in.p + 8) : cfi_le32(in.p + 4);
		in.p += 2u * c->addr_size;
	}
	/* ranges outside the code: discarded functions (initial location 0 or ~0), or lies */
	if (range == 0 || !cfi_in_code(x, start, range) || start < x->ip_base ||
	    start - x->ip_base > INT32_MAX)
		return false;
	bool rbp = c->rbp;
	if (!cfi_scan(in, x->eh ? 0 : c->addr_size, &rbp))
		return false;

	struct cfi_out *o = &x->out;
	size_t fde = o->n;
	cfi_put32(o, 0);
	cfi_put32(o, (uint32_t)(o->n - c->out_off)); /* back to the CIE from this field */
	if (x->eh) {
		cfi_put(o, &start, 8);
		cfi_put(o, &range, 8);
	} else {
		cfi_put(o, addr, 2u * c->addr_size);
	}
	cfi_put8(o, 0); /* no augmentation data */
	cfi_put(o, in.p, (size_t)(in.end - in.p));
	cfi_close(o, fde);
	if (o->failed || fde > INT32_MAX)
		return false;
	if (x->nents == x->cap_ents) {
		size_t cap = x->cap_ents ? 2 * x->cap_ents : 256;
		struct cfi_entry *e = realloc(x->ents, cap * sizeof(*e));
		if (!e)
			return false;
		x->ents = e;
		x->cap_ents = cap;
	}
	x->ents[x->nents++] = (struct cfi_entry){ (int32_t)(start - x->ip_base), (int32_t)fde,
						  (uint32_t)(range < UINT32_MAX ? range : UINT32_MAX),
						  rbp };
	return true;
}

static int cfi_entry_cmp(const void *a, const void *b)
{
	const struct cfi_entry *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->fde < y->fde ? -1 : x->fde > y->fde;
}

int cfi_build(struct cfi_table *t, const unsigned char *sec, size_t len, bool eh, uint64_t vaddr,
	      const struct cfi_range *code, size_t ncode, uint64_t ip_base)
{
	memset(t, 0, sizeof(*t));
	if (len > CFI_MAX_SECTION)
		return -EFBIG;
	struct cfi_ctx x = { .sec = sec, .len = len, .eh = eh, .vaddr = vaddr, .code = code,
			     .ncode = ncode, .ip_base = ip_base };
	struct cfi_rec r;
	struct cfi_in in;
	int err = -ENOMEM;
	/* CIEs first, so that every FDE (which may name a later CIE in .debug_frame) finds its
	 * rewritten CIE before it in the output */
	for (size_t at = 0; cfi_next(sec, len, &at, &r);) {
		uint64_t id = cfi_rec_id(&r, &in);
		bool cie = eh ? id == 0 : id == (r.dwarf64 ? UINT64_MAX : 0xffffffffu);
		if (!cie)
			continue;
		if (x.ncies == x.cap_cies) {
			size_t cap = x.cap_cies ? 2 * x.cap_cies : 16;
			struct cfi_cie *c = realloc(x.cies, cap * sizeof(*c));
			if (!c)
				goto out;
			x.cies = c;
			x.cap_cies = cap;
		}
		if (cfi_cie(&x, &r, &x.cies[x.ncies]))
			x.ncies++;
		if (x.out.failed)
			goto out;
	}
	for (size_t at = 0; x.ncies && cfi_next(sec, len, &at, &r);) {
		uint64_t id = cfi_rec_id(&r, &in);
		bool cie = eh ? id == 0 : id == (r.dwarf64 ? UINT64_MAX : 0xffffffffu);
		if (!cie)
			cfi_fde(&x, &r, id);
		if (x.out.failed)
			goto out;
	}
	err = 0;
	if (!x.nents)
		goto out;
	qsort(x.ents, x.nents, sizeof(*x.ents), cfi_entry_cmp);
	size_t n = 0;
	for (size_t i = 0; i < x.nents; i++)
		if (!n || x.ents[i].start != x.ents[n - 1].start)
			x.ents[n++] = x.ents[i];
	while (x.out.n % 4)
		cfi_put8(&x.out, 0);
	t->table_off = x.out.n;
	for (size_t i = 0; i < n; i++) {
		cfi_put32(&x.out, (uint32_t)x.ents[i].start);
		cfi_put32(&x.out, (uint32_t)x.ents[i].fde);
	}
	if (x.out.failed || x.out.n > INT32_MAX) {
		err = -ENOMEM;
		goto out;
	}
	t->image = x.out.p;
	t->size = x.out.n;
	t->count = n;
	t->entries = x.ents;
	x.out.p = NULL;
	x.ents = NULL;
out:
	free(x.out.p);
	free(x.ents);
	free(x.cies);
	if (err)
		memset(t, 0, sizeof(*t));
	return err;
}

void cfi_table_free(struct cfi_table *t)
{
	free(t->image);
	free(t->entries);
	memset(t, 0, sizeof(*t));
}

/* ---- sections ----------------------------------------------------------------------------- */

static bool cfi_within(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* The header of section name, read through r; 0, -ENOEXEC (no ELF header) or -ENOENT (no
 * such section with contents inside the file). */
static int cfi_elf_find(const struct cfi_reader *r, const char *name, Elf64_Shdr *out)
{
	Elf64_Ehdr eh;
	if (r->size < sizeof(eh) || !r->read(r->arg, 0, &eh, sizeof(eh)))
		return -ENOEXEC;
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shoff == 0 ||
	    eh.e_shentsize != sizeof(Elf64_Shdr) ||
	    !cfi_within(eh.e_shoff, sizeof(Elf64_Shdr), r->size))
		return -ENOENT;
	Elf64_Shdr sh0;
	if (!r->read(r->arg, eh.e_shoff, &sh0, sizeof(sh0)))
		return -ENOENT;
	uint64_t shnum = eh.e_shnum ? eh.e_shnum : sh0.sh_size;
	uint64_t strndx = eh.e_shstrndx == SHN_XINDEX ? sh0.sh_link : eh.e_shstrndx;
	if (shnum > (1u << 20) || strndx >= shnum ||
	    !cfi_within(eh.e_shoff, shnum * sizeof(Elf64_Shdr), r->size))
		return -ENOENT;
	Elf64_Shdr str;
	if (!r->read(r->arg, eh.e_shoff + strndx * sizeof(str), &str, sizeof(str)) ||
	    str.sh_type == SHT_NOBITS || !cfi_within(str.sh_offset, str.sh_size, r->size))
		return -ENOENT;
	char got[32];
	size_t nlen = strlen(name) + 1;
	if (nlen > sizeof(got))
		return -ENOENT;
	Elf64_Shdr batch[64];
	for (uint64_t i = 1; i < shnum; i++) {
		size_t k = (size_t)((i - 1) % 64);
		if (k == 0) {
			uint64_t n = shnum - i < 64 ? shnum - i : 64;
			if (!r->read(r->arg, eh.e_shoff + i * sizeof(Elf64_Shdr), batch,
				     (size_t)n * sizeof(Elf64_Shdr)))
				return -ENOENT;
		}
		const Elf64_Shdr *sh = &batch[k];
		if (sh->sh_name >= str.sh_size || str.sh_size - sh->sh_name < nlen ||
		    !r->read(r->arg, str.sh_offset + sh->sh_name, got, nlen) ||
		    memcmp(got, name, nlen) != 0)
			continue;
		if (sh->sh_type == SHT_NOBITS || sh->sh_size == 0 ||
		    !cfi_within(sh->sh_offset, sh->sh_size, r->size))
			return -ENOENT;
		*out = *sh;
		return 0;
	}
	return -ENOENT;
}

static bool cfi_read_memory(const void *arg, uint64_t off, void *buf, size_t n)
{
	memcpy(buf, (const unsigned char *)arg + off, n); /* cfi_elf_find checked the bounds */
	return true;
}

int cfi_elf_section(const unsigned char *image, size_t size, const char *name,
		    const unsigned char **data, size_t *len, uint64_t *vaddr, void **owned)
{
	*data = NULL;
	*len = 0;
	*vaddr = 0;
	if (owned)
		*owned = NULL;
	const struct cfi_reader r = { cfi_read_memory, image, size };
	Elf64_Shdr sh;
	int rc = cfi_elf_find(&r, name, &sh);
	if (rc)
		return rc;
	const unsigned char *p = image + sh.sh_offset;
	*vaddr = sh.sh_addr;
	if (!(sh.sh_flags & SHF_COMPRESSED) || !owned) {
		if (sh.sh_size > CFI_MAX_SECTION)
			return -EFBIG;
		*data = p;
		*len = (size_t)sh.sh_size;
		return 0;
	}
	return cfi_inflate(p, (size_t)sh.sh_size, data, len, owned);
}

int cfi_elf_section_copy(const struct cfi_reader *r, const char *name, size_t max,
			 unsigned char **data, size_t *len, uint64_t *vaddr)
{
	if (data)
		*data = NULL;
	*len = 0;
	*vaddr = 0;
	Elf64_Shdr sh;
	int rc = cfi_elf_find(r, name, &sh);
	if (rc || !data)
		return rc;
	if (sh.sh_size > CFI_MAX_SECTION || sh.sh_size > max)
		return -EFBIG;
	unsigned char *raw = malloc((size_t)sh.sh_size);
	if (!raw)
		return -ENOMEM;
	if (!r->read(r->arg, sh.sh_offset, raw, (size_t)sh.sh_size)) {
		free(raw);
		return -EIO; /* shorter than it said: changed under us */
	}
	*vaddr = sh.sh_addr;
	if (!(sh.sh_flags & SHF_COMPRESSED)) {
		*data = raw;
		*len = (size_t)sh.sh_size;
		return 0;
	}
	const unsigned char *out;
	void *owned = NULL;
	rc = cfi_inflate(raw, (size_t)sh.sh_size, &out, len, &owned);
	free(raw);
	*data = owned;
	return rc;
}

int cfi_inflate(const unsigned char *p, size_t n, const unsigned char **data, size_t *len,
		void **owned)
{
	Elf64_Chdr ch;
	if (n < sizeof(ch))
		return -EINVAL;
	memcpy(&ch, p, sizeof(ch));
	if (ch.ch_type != ELFCOMPRESS_ZLIB || ch.ch_size == 0 || ch.ch_size > CFI_MAX_SECTION)
		return -EINVAL;
	unsigned char *out = malloc((size_t)ch.ch_size);
	if (!out)
		return -ENOMEM;
	uLongf outlen = (uLongf)ch.ch_size;
	if (uncompress(out, &outlen, p + sizeof(ch), (uLong)(n - sizeof(ch))) != Z_OK ||
	    outlen != ch.ch_size) {
		free(out);
		return -EINVAL;
	}
	*data = out;
	*len = (size_t)outlen;
	*owned = out;
	return 0;
}

/* ---- rows (unwind_fast.c) ------------------------------------------------------------------ */
/*
 * One pc's unwinding rules from an .eh_frame FDE, as libunwind 1.6's dwarf_step finds them
 * (Gfde.c's parse_cie and dwarf_extract_proc_info_from_fde, Gparser.c's run_cfi_program), for
 * the subset real x86-64 code uses: CIE version 1 or 3 with code alignment 1, data alignment
 * -8 and the return address in column 16, augmentations z, L, P, R, pc-relative FDE pointers,
 * and the opcodes that move the CFA along rsp or rbp and save registers at CFA offsets. Where
 * libunwind would fail, read other bytes, evaluate an expression or take another register's
 * value, this refuses (-ENOTSUP) and the caller lets libunwind do the step, so a row given is
 * the one libunwind would use. Every read stays inside one segment's file part.
 */

/* CFI_NREGS (internal.h): libunwind's x86-64 DWARF_NUM_PRESERVED_REGS */
#define CFI_REG_RBP 6u
#define CFI_REG_RSP 7u
#define CFI_REG_RA 16u
#define CFI_ROW_DEPTH 8u /* DW_CFA_remember_state nesting followed */

const unsigned char *cfi_file_bytes(const struct cfi_file *f, uint64_t vaddr, uint64_t n)
{
	/* libunwind reads the aligned 8-byte word holding each byte; the word's address picks
	 * the segment (segments do not overlap, so there is one) */
	uint64_t word = vaddr & ~(uint64_t)7;
	for (size_t i = 0; i < f->nsegs; i++) {
		const struct cfi_seg *s = &f->segs[i];
		if (word < s->vaddr || word - s->vaddr >= s->filesz)
			continue;
		if (!cfi_within(s->offset, s->filesz, f->size) || vaddr - s->vaddr > s->filesz ||
		    n > s->filesz - (vaddr - s->vaddr))
			return NULL;
		uint64_t off = s->offset + (vaddr - s->vaddr);
		return f->copy ? filecopy_at(f->copy, off, n) : f->image + off;
	}
	return NULL;
}

/*
 * An encoded pointer at in, the field's ELF address at (libunwind's
 * dwarf_read_encoded_pointer: 0 stays 0 whatever the encoding): 4- or 8-byte forms, absolute
 * or pc-relative, DW_EH_PE_omit. An indirect one (indirect true: a personality routine's GOT
 * slot) is only checked to be readable: libunwind reads it and fails if it cannot.
 */
static bool cfi_row_pointer(const struct cfi_file *f, struct cfi_in *in, uint8_t enc, uint64_t at,
			    bool indirect, uint64_t *v)
{
	*v = 0;
	if (enc == DW_EH_PE_omit)
		return true;
	size_t n;
	switch (enc & 0x0f) {
	case DW_EH_PE_absptr:
	case DW_EH_PE_udata8:
	case DW_EH_PE_sdata8:
		n = 8;
		break;
	case DW_EH_PE_udata4:
	case DW_EH_PE_sdata4:
		n = 4;
		break;
	default:
		return false;
	}
	if ((size_t)(in->end - in->p) < n || ((enc & 0x70) != DW_EH_PE_absptr &&
					      (enc & 0x70) != DW_EH_PE_pcrel) ||
	    ((enc & DW_EH_PE_indirect) && !indirect))
		return false;
	uint64_t x = n == 8 ? cfi_le64(in->p) : cfi_le32(in->p);
	if ((enc & 0x0f) == DW_EH_PE_sdata4)
		x = (uint64_t)(int64_t)(int32_t)(uint32_t)x;
	in->p += n;
	if (x == 0)
		return true;
	if ((enc & 0x70) == DW_EH_PE_pcrel)
		x += at;
	if (enc & DW_EH_PE_indirect) {
		/* an absolute slot address is a process address: not one of this file's */
		if ((enc & 0x70) != DW_EH_PE_pcrel || !cfi_file_bytes(f, x, 8))
			return false;
		x = 0; /* the value read is not needed */
	}
	*v = x;
	return true;
}

/* The record (CIE or FDE) at ELF address at: its bytes from the length field to its end. */
static const unsigned char *cfi_row_record(const struct cfi_file *f, uint64_t at, uint32_t *len)
{
	const unsigned char *h = cfi_file_bytes(f, at, 4);
	if (!h)
		return NULL;
	*len = cfi_le32(h);
	/* 0: a terminator (libunwind: no info); 0xffffffff: 64-bit DWARF, not emitted in
	 * .eh_frame; below 4: no room for the id libunwind reads anyway */
	if (*len == 0xffffffffu || *len < 4)
		return NULL;
	return cfi_file_bytes(f, at, 4 + (uint64_t)*len);
}

struct cfi_row_cie {
	uint8_t fde_enc, lsda_enc;
	bool z;
	struct cfi_in ins;
};

static bool cfi_row_cie(const struct cfi_file *f, uint64_t at, struct cfi_row_cie *c)
{
	uint32_t len;
	const unsigned char *r = cfi_row_record(f, at, &len);
	if (!r || cfi_le32(r + 4) != 0)
		return false;
	struct cfi_in in = { r + 8, r + 4 + len };
	uint8_t version;
	const unsigned char *aug;
	size_t auglen;
	/* libunwind keeps 4 characters of the string; 'z' first makes the rest skippable, and
	 * without it a string is not one compilers emit */
	if (!cfi_cie_head(&in, false, &version, &aug, &auglen) || auglen > 4 ||
	    (auglen && aug[0] != 'z'))
		return false;
	uint64_t code_align, data_align, ra;
	uint8_t ra8;
	if (!cfi_row_uleb(&in, &code_align) || code_align != 1 || !cfi_row_leb(&in, &data_align, true) ||
	    data_align != (uint64_t)-8)
		return false;
	if (version == 1 ? !cfi_u8(&in, &ra8) : !cfi_row_uleb(&in, &ra))
		return false;
	if (version == 1)
		ra = ra8;
	if (ra != CFI_REG_RA)
		return false;
	c->fde_enc = DW_EH_PE_udata8; /* libunwind's default: absolute, refused below */
	c->lsda_enc = DW_EH_PE_omit;
	c->z = auglen > 0;
	if (c->z) {
		uint64_t n, v;
		if (!cfi_row_uleb(&in, &n) || n > (uint64_t)(in.end - in.p))
			return false;
		const unsigned char *aug_end = in.p + n;
		for (size_t i = 1; i < auglen; i++) {
			uint8_t e;
			switch (aug[i]) {
			case 'L':
				if (!cfi_u8(&in, &c->lsda_enc))
					return false;
				break;
			case 'R':
				if (!cfi_u8(&in, &c->fde_enc))
					return false;
				break;
			case 'P':
				if (!cfi_u8(&in, &e) ||
				    !cfi_row_pointer(f, &in, e, at + (uint64_t)(in.p - r), true, &v))
					return false;
				break;
			default: /* 'S' (a signal frame) and anything unknown */
				return false;
			}
		}
		/* libunwind starts the instructions where its reads ended, not at the size */
		if (in.p != aug_end)
			return false;
	}
	c->ins = in;
	return true;
}

struct cfi_rules {
	uint8_t where[CFI_NREGS]; /* enum cfi_where */
	uint64_t off[CFI_NREGS];
	bool cfa_defined;
	uint8_t cfa_reg;
	uint64_t cfa_off;
};

/* Run a CFA program over cur (libunwind's run_cfi_program). fde: stop before the first
 * instruction whose location (loc, advanced by the program) is above pc; a CIE's program
 * runs whole. init: the rules DW_CFA_restore goes back to. */
static bool cfi_row_run(struct cfi_in in, bool fde, uint64_t loc, uint64_t pc,
			struct cfi_rules *cur, const struct cfi_rules *init)
{
	struct cfi_rules saved[CFI_ROW_DEPTH];
	unsigned depth = 0;
	while (in.p < in.end && (!fde || loc <= pc)) {
		uint8_t op = *in.p++, b8;
		uint64_t reg, v, delta = 0;
		switch (op & 0xc0) {
		case DW_CFA_advance_loc:
			delta = op & 0x3f;
			goto advance;
		case DW_CFA_offset:
			reg = op & 0x3f;
			if (reg >= CFI_NREGS || !cfi_row_uleb(&in, &v))
				return false;
			cur->where[reg] = CFI_CFAREL;
			cur->off[reg] = v * (uint64_t)-8;
			continue;
		case DW_CFA_restore:
			reg = op & 0x3f;
			if (reg >= CFI_NREGS)
				return false;
			cur->where[reg] = init->where[reg];
			cur->off[reg] = init->off[reg];
			continue;
		}
		switch (op) {
		case DW_CFA_nop:
		case DW_CFA_GNU_args_size: /* only unw_resume reads it */
			if (op == DW_CFA_GNU_args_size && !cfi_row_uleb(&in, &v))
				return false;
			continue;
		case DW_CFA_advance_loc1:
			if (!cfi_u8(&in, &b8))
				return false;
			delta = b8;
			goto advance;
		case DW_CFA_advance_loc2:
			if (in.end - in.p < 2)
				return false;
			delta = (uint64_t)in.p[0] | (uint64_t)in.p[1] << 8;
			in.p += 2;
			goto advance;
		case DW_CFA_advance_loc4:
			if (in.end - in.p < 4)
				return false;
			delta = cfi_le32(in.p);
			in.p += 4;
			goto advance;
		case DW_CFA_offset_extended:
		case DW_CFA_offset_extended_sf:
			if (!cfi_row_reg(&in, &reg) ||
			    !cfi_row_leb(&in, &v, op == DW_CFA_offset_extended_sf))
				return false;
			cur->where[reg] = CFI_CFAREL;
			cur->off[reg] = v * (uint64_t)-8;
			continue;
		case DW_CFA_restore_extended:
			if (!cfi_row_reg(&in, &reg))
				return false;
			cur->where[reg] = init->where[reg];
			cur->off[reg] = init->off[reg];
			continue;
		case DW_CFA_undefined:
		case DW_CFA_same_value:
			if (!cfi_row_reg(&in, &reg))
				return false;
			cur->where[reg] = op == DW_CFA_undefined ? CFI_UNDEF : CFI_SAME;
			cur->off[reg] = 0;
			continue;
		case DW_CFA_remember_state:
			if (depth == CFI_ROW_DEPTH)
				return false;
			saved[depth++] = *cur;
			continue;
		case DW_CFA_restore_state:
			if (depth == 0) /* libunwind: an error */
				return false;
			*cur = saved[--depth];
			continue;
		case DW_CFA_def_cfa:
		case DW_CFA_def_cfa_sf:
			if (!cfi_row_reg(&in, &reg) ||
			    !cfi_row_leb(&in, &v, op == DW_CFA_def_cfa_sf))
				return false;
			cur->cfa_defined = true;
			cur->cfa_reg = (uint8_t)reg;
			cur->cfa_off = op == DW_CFA_def_cfa ? v : v * (uint64_t)-8;
			continue;
		case DW_CFA_def_cfa_register:
			if (!cfi_row_reg(&in, &reg))
				return false;
			cur->cfa_defined = true;
			cur->cfa_reg = (uint8_t)reg;
			continue;
		case DW_CFA_def_cfa_offset:
		case DW_CFA_def_cfa_offset_sf:
			if (!cfi_row_leb(&in, &v, op == DW_CFA_def_cfa_offset_sf))
				return false;
			cur->cfa_off = op == DW_CFA_def_cfa_offset ? v : v * (uint64_t)-8;
			continue;
		default:
			/* set_loc, register, expressions, val_offset, and what libunwind does not
			 * know or reads wrongly */
			return false;
		}
	advance:
		/* FDE locations stay within 2^32 of pc at every test: no wrap (see the caller) */
		if (fde && delta > UINT64_MAX - loc)
			return false;
		loc += delta;
	}
	return true;
}

int cfi_eh_row(const struct cfi_file *f, uint64_t fde, uint64_t pc, struct cfi_row *row)
{
	uint32_t len;
	const unsigned char *r = cfi_row_record(f, fde, &len);
	if (!r)
		return -ENOTSUP;
	int32_t id = (int32_t)cfi_le32(r + 4);
	if (id == 0) /* a CIE: libunwind returns success with nothing filled in */
		return -ENOTSUP;
	struct cfi_row_cie c;
	if (!cfi_row_cie(f, fde + 4 - (uint64_t)(int64_t)id, &c))
		return -ENOTSUP;
	/* Only pc-relative initial locations are the same for every load address. */
	if ((c.fde_enc & 0x70) != DW_EH_PE_pcrel)
		return -ENOTSUP;
	struct cfi_in in = { r + 8, r + 4 + len };
	uint64_t start, range;
	if (!cfi_row_pointer(f, &in, c.fde_enc, fde + 8, false, &start) ||
	    !cfi_row_pointer(f, &in, c.fde_enc & 0x0f, 0, false, &range))
		return -ENOTSUP;
	/* start 0 is libunwind's "no pointer"; the range must lie in the file's image */
	if (start == 0 || start < f->lo || start >= f->hi || range > f->hi - start)
		return -ENOTSUP;
	if (pc < start || pc - start >= range)
		return -ENOENT;
	if (c.z) {
		uint64_t n, lsda;
		if (!cfi_row_uleb(&in, &n) || n > (uint64_t)(in.end - in.p))
			return -ENOTSUP;
		struct cfi_in aug = { in.p, in.p + n };
		if (!cfi_row_pointer(f, &aug, c.lsda_enc, fde + (uint64_t)(aug.p - r), false, &lsda))
			return -ENOTSUP;
		in.p += n;
	}
	struct cfi_rules init, cur;
	memset(&init, 0, sizeof(init)); /* libunwind's rs_initial while the CIE runs: undefined */
	memset(&cur, 0, sizeof(cur));
	for (unsigned i = 0; i < CFI_NREGS; i++)
		cur.where[i] = CFI_SAME;
	if (!cfi_row_run(c.ins, false, 0, 0, &cur, &init))
		return -ENOTSUP;
	init = cur;
	if (!cfi_row_run(in, true, start, pc, &cur, &init))
		return -ENOTSUP;
	/* The CFA from rsp (always the frame's CFA in libunwind) or rbp; the return address
	 * saved or lost; rbp by any rule (the others are not read unless a CFA rule uses them,
	 * which is refused). */
	if (!cur.cfa_defined || (cur.cfa_reg != CFI_REG_RSP && cur.cfa_reg != CFI_REG_RBP) ||
	    cur.where[CFI_REG_RA] == CFI_SAME)
		return -ENOTSUP;
	row->cfa_rbp = cur.cfa_reg == CFI_REG_RBP;
	row->cfa_off = cur.cfa_off;
	row->ra = cur.where[CFI_REG_RA];
	row->ra_off = cur.off[CFI_REG_RA];
	row->rbp = cur.where[CFI_REG_RBP];
	row->rbp_off = cur.off[CFI_REG_RBP];
	return 0;
}

/* ---- what libunwind may run (unwind.c) ----------------------------------------------------- */
/*
 * libunwind 1.6 runs the CFA program of whatever FDE its table search finds (Gparser.c's
 * run_cfi_program, then apply_reg_state) and the DWARF expressions it names (Gexpr.c's
 * dwarf_eval_expr), and trusts some of what it reads (also in 1.8):
 *   - DW_CFA_register's second register indexes a 17-entry array (new_loc) unchecked: a
 *     fault for a large number, else a word of the daemon's stack taken as the register's
 *     location (a return address made of daemon memory);
 *   - the CIE's return-address column indexes the cursor's 17 locations, likewise;
 *   - DW_OP_div divides INT64_MIN by -1 (SIGFPE); DW_OP_skip and DW_OP_bra jump anywhere,
 *     backwards too (an endless loop in a drain thread, or bytes nobody decoded);
 *   - each DW_CFA_remember_state takes a state from a pool that never shrinks (memory in
 *     proportion to a hostile FDE's length);
 *   - DW_CFA_val_offset(_sf) and unknown opcodes are skipped as one byte, their operands then
 *     run as instructions.
 * cfi_check_program decodes a program as run_cfi_program does, over the bytes its reads would
 * find, as far as it would run, and accepts it only when every register number is below 17,
 * every expression is one libunwind evaluates safely (no div, skip or bra) and lies inside
 * the program with its operands, remember_state nests at most CFI_CHECK_DEPTH deep, and every
 * instruction is one libunwind knows, whole inside the program; LEB128 numbers longer than 9
 * bytes (where libunwind's shifts overflow) and DW_CFA_set_loc operands of unknown size are
 * refused too. What it accepts is a superset of what cfi_eh_row runs, so a row the fast path
 * gives is never one the check would refuse.
 */

#define CFI_CHECK_DEPTH 64u

/* A DWARF expression as dwarf_eval_expr evaluates it: its operations in order (no jumps),
 * each with the operands its table gives, up to the end or a register location. */
static bool cfi_check_expr(struct cfi_in in)
{
	while (in.p < in.end) {
		uint8_t op = *in.p++;
		uint64_t v;
		if (op >= DW_OP_lit0 && op <= DW_OP_lit31)
			continue;
		if (op >= DW_OP_reg0 && op <= DW_OP_reg31)
			return true; /* the value is a register: evaluation ends */
		if (op >= DW_OP_breg0 && op <= DW_OP_breg31) {
			if (!cfi_row_leb(&in, &v, true))
				return false;
			continue;
		}
		bool ok;
		switch (op) {
		case DW_OP_regx:
			return cfi_row_uleb(&in, &v);
		case DW_OP_bregx:
			ok = cfi_row_uleb(&in, &v) && cfi_row_leb(&in, &v, true);
			break;
		case DW_OP_const1u:
		case DW_OP_const1s:
		case DW_OP_pick:
		case DW_OP_deref_size:
			ok = cfi_skip(&in, 1);
			break;
		case DW_OP_const2u:
		case DW_OP_const2s:
			ok = cfi_skip(&in, 2);
			break;
		case DW_OP_const4u:
		case DW_OP_const4s:
			ok = cfi_skip(&in, 4);
			break;
		case DW_OP_addr:
		case DW_OP_const8u:
		case DW_OP_const8s:
			ok = cfi_skip(&in, 8);
			break;
		case DW_OP_constu:
		case DW_OP_plus_uconst:
			ok = cfi_row_uleb(&in, &v);
			break;
		case DW_OP_consts:
			ok = cfi_row_leb(&in, &v, true);
			break;
		case DW_OP_deref:
		case DW_OP_dup:
		case DW_OP_drop:
		case DW_OP_over:
		case DW_OP_swap:
		case DW_OP_rot:
		case DW_OP_abs:
		case DW_OP_and:
		case DW_OP_minus:
		case DW_OP_mod:
		case DW_OP_mul:
		case DW_OP_neg:
		case DW_OP_not:
		case DW_OP_or:
		case DW_OP_plus:
		case DW_OP_shl:
		case DW_OP_shr:
		case DW_OP_shra:
		case DW_OP_xor:
		case DW_OP_eq:
		case DW_OP_ge:
		case DW_OP_gt:
		case DW_OP_le:
		case DW_OP_lt:
		case DW_OP_ne:
		case DW_OP_nop:
			ok = true;
			break;
		default: /* div, skip, bra, and what libunwind does not evaluate */
			ok = false;
		}
		if (!ok)
			return false;
	}
	return true;
}

/* An expression block (ULEB128 length, then the expression), whole inside the program. */
static bool cfi_check_block(struct cfi_in *in)
{
	uint64_t n;
	if (!cfi_row_uleb(in, &n) || n > (uint64_t)(in->end - in->p))
		return false;
	struct cfi_in e = { in->p, in->p + n };
	in->p += n;
	return cfi_check_expr(e);
}

/* DW_CFA_set_loc's operand in encoding enc (dwarf_read_encoded_pointer's sizes). */
static bool cfi_check_set_loc(struct cfi_in *in, uint8_t enc)
{
	uint64_t v;
	if (enc == DW_EH_PE_omit || enc == DW_EH_PE_aligned)
		return false;
	switch (enc & 0x0f) {
	case DW_EH_PE_absptr:
	case DW_EH_PE_udata8:
	case DW_EH_PE_sdata8:
		return cfi_skip(in, 8);
	case DW_EH_PE_udata4:
	case DW_EH_PE_sdata4:
		return cfi_skip(in, 4);
	case DW_EH_PE_udata2:
	case DW_EH_PE_sdata2:
		return cfi_skip(in, 2);
	case DW_EH_PE_uleb128:
	case DW_EH_PE_sleb128: /* both read as ULEB128 */
		return cfi_row_uleb(in, &v);
	default:
		return false;
	}
}

static bool cfi_check_run(struct cfi_in in, uint64_t loc, uint64_t end, uint64_t code_align,
			  uint8_t set_loc_enc, bool *rbp)
{
	unsigned depth = 0;
	bool tracked = true; /* loc is libunwind's (after a set_loc: unknown, check to the end) */
	while (in.p < in.end && (!tracked || loc <= end)) {
		uint8_t op = *in.p++, b8;
		uint64_t reg, v;
		switch (op & 0xc0) {
		case DW_CFA_advance_loc:
			loc += (uint64_t)(op & 0x3f) * code_align; /* modulo 2^64, as libunwind */
			continue;
		case DW_CFA_offset:
			if ((op & 0x3f) >= CFI_NREGS || !cfi_row_uleb(&in, &v))
				return false;
			continue;
		case DW_CFA_restore:
			if ((op & 0x3f) >= CFI_NREGS)
				return false;
			continue;
		}
		bool ok;
		switch (op) {
		case DW_CFA_nop:
			ok = true;
			break;
		case DW_CFA_set_loc:
			ok = cfi_check_set_loc(&in, set_loc_enc);
			tracked = false;
			break;
		case DW_CFA_advance_loc1:
			ok = cfi_u8(&in, &b8);
			if (ok)
				loc += (uint64_t)b8 * code_align;
			break;
		case DW_CFA_advance_loc2:
			ok = in.end - in.p >= 2;
			if (ok) {
				loc += ((uint64_t)in.p[0] | (uint64_t)in.p[1] << 8) * code_align;
				in.p += 2;
			}
			break;
		case DW_CFA_advance_loc4:
			ok = in.end - in.p >= 4;
			if (ok) {
				loc += (uint64_t)cfi_le32(in.p) * code_align;
				in.p += 4;
			}
			break;
		case DW_CFA_offset_extended:
		case DW_CFA_def_cfa:
		case DW_CFA_GNU_negative_offset_extended:
			ok = cfi_row_reg(&in, &reg) && cfi_row_uleb(&in, &v);
			*rbp |= ok && op == DW_CFA_def_cfa && reg == 6;
			break;
		case DW_CFA_register: /* both registers: libunwind checks only the first */
			ok = cfi_row_reg(&in, &reg) && cfi_row_reg(&in, &v);
			break;
		case DW_CFA_offset_extended_sf:
		case DW_CFA_def_cfa_sf:
			ok = cfi_row_reg(&in, &reg) && cfi_row_leb(&in, &v, true);
			*rbp |= ok && op == DW_CFA_def_cfa_sf && reg == 6;
			break;
		case DW_CFA_restore_extended:
		case DW_CFA_undefined:
		case DW_CFA_same_value:
		case DW_CFA_def_cfa_register:
			ok = cfi_row_reg(&in, &reg);
			*rbp |= ok && op == DW_CFA_def_cfa_register && reg == 6;
			break;
		case DW_CFA_def_cfa_offset:
		case DW_CFA_GNU_args_size:
			ok = cfi_row_uleb(&in, &v);
			break;
		case DW_CFA_def_cfa_offset_sf:
			ok = cfi_row_leb(&in, &v, true);
			break;
		case DW_CFA_remember_state:
			ok = ++depth <= CFI_CHECK_DEPTH;
			break;
		case DW_CFA_restore_state: /* with nothing remembered, libunwind fails: refused */
			ok = depth > 0;
			depth -= ok;
			break;
		case DW_CFA_def_cfa_expression:
			ok = cfi_check_block(&in);
			break;
		case DW_CFA_expression:
		case DW_CFA_val_expression:
			ok = cfi_row_reg(&in, &reg) && cfi_check_block(&in);
			break;
		default:
			/* val_offset(_sf) and unknown opcodes (libunwind: one byte, the operands run
			 * as instructions); MIPS_advance_loc8, window_save, lo_user, hi_user
			 * (libunwind: an error) */
			ok = false;
		}
		if (!ok)
			return false;
	}
	return true;
}

bool cfi_check_program(const unsigned char *p, size_t n, uint64_t loc, uint64_t end,
		       uint64_t code_align, uint8_t set_loc_enc)
{
	bool rbp = false;
	return cfi_check_run((struct cfi_in){ p, p + n }, loc, end, code_align, set_loc_enc, &rbp);
}
