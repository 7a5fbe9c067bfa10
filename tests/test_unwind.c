// SPDX-License-Identifier: MIT
/*
 * test_unwind.c: whole stacks for code without frame pointers (issue 9). Real programs run
 * under `llgo-heap run --unwind MODE -r 1` (shim preloaded, private daemon) and their Go
 * legacy text profiles are read back (helpers.h's th_prof): every allocation's stack, frame
 * by frame (function, file:line, inlined frames sharing an address), from the allocating call
 * site to the thread's start. Expected lines come from "@NAME" markers in the programs'
 * sources, so the checks do not depend on line numbers. Here: the ALLOC_RAW record itself
 * (shim writer, daemon reader), an -O2 C program without frame pointers, .debug_frame as the
 * only CFI, and hostile CFI in a local user's file (FDEs that libunwind 1.6 would index past
 * its arrays or loop on, in .eh_frame or through cfi.c's rewrite), which ends those stacks
 * while the daemon lives. C++, frame-pointer and Debian's programs and the fast path:
 * test_unwind_programs.c; agreement with heaptrack: test_unwind_heaptrack.c.
 */
#include <dwarf.h>
#include <fcntl.h>
#include <grp.h>
#include <regex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "helpers.h"
#include "../agent/internal.h"
#include "../shim/internal.h"

/* ---- the ALLOC_RAW record ----------------------------------------------------------------- */

struct uw_seen {
	int records;
	uint8_t kind;
	uint16_t nframes;
	uint32_t flags;
	uint64_t frames[4];
	struct llgo_raw_regs regs;
	unsigned char stack[4096];
};

static void uw_seen_cb(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	struct uw_seen *v = arg;
	v->records++;
	v->kind = rec->kind;
	v->nframes = rec->nframes;
	v->flags = rec->flags;
	memcpy(v->frames, frames, (rec->nframes < 4 ? rec->nframes : 4) * sizeof(frames[0]));
	if (rec->kind == LLGO_REC_ALLOC_RAW) {
		memcpy(&v->regs, frames + rec->nframes, sizeof(v->regs));
		memcpy(v->stack, (const unsigned char *)(frames + rec->nframes) + sizeof(v->regs),
		       v->regs.stack_len < sizeof(v->stack) ? v->regs.stack_len : sizeof(v->stack));
	}
}

/* stackcopy_push writes what ring.c accepts; a torn fixed part is corrupt, a torn stack byte
 * is not (the checksum leaves the copy out), a wrong stack length is corrupt. */
Test(unwind, raw_record_round_trip)
{
	const size_t ds = 1u << 20, len = LLGO_RING_HEADER_SIZE + ds;
	void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(mem != MAP_FAILED);
	struct emit_ring er;
	cr_assert_eq(emit_ring_format(&er, mem, len, ds, 1, 42), 0);
	static unsigned char stack[4096];
	for (size_t i = 0; i < sizeof(stack); i++)
		stack[i] = (unsigned char)(i * 7);
	struct stackcopy sc;
	memset(&sc, 0, sizeof(sc));
	sc.regs.ip = 0x401234;
	sc.regs.sp = (uintptr_t)stack;
	sc.regs.bp = 0x7ffd0000;
	sc.regs.stack_hi = (uintptr_t)stack + sizeof(stack);
	sc.regs.stack_len = sizeof(stack);
	sc.stack = stack;
	sc.copy = true;
	const uint64_t frames[3] = { 0x401234, 0x401500, 0x401600 };
	struct ring_reader rr;
	cr_assert_eq(ring_reader_init(&rr, mem, len, 1, ds), 0);

	static struct uw_seen v;
	cr_assert(stackcopy_push(&er, 100, 1, 0xabc, 7, frames, 3, &sc));
	cr_assert_eq(ring_reader_drain(&rr, uw_seen_cb, &v), 1);
	cr_expect_eq(v.kind, LLGO_REC_ALLOC_RAW);
	cr_expect_eq(v.nframes, 3);
	cr_expect_eq(v.frames[2], 0x401600);
	cr_expect_eq(v.regs.ip, 0x401234);
	cr_expect_eq(v.regs.bp, 0x7ffd0000);
	cr_expect_eq(v.regs.stack_len, sizeof(stack));
	cr_expect(memcmp(v.stack, stack, sizeof(stack)) == 0, "stack copy differs");

	/* the same copy, wanted but not possible: an ALLOC record flagged NO_COPY */
	sc.copy = false;
	cr_assert(stackcopy_push(&er, 100, 1, 0xabc, 7, frames, 3, &sc));
	cr_assert_eq(ring_reader_drain(&rr, uw_seen_cb, &v), 1);
	cr_expect_eq(v.kind, LLGO_REC_ALLOC);
	cr_expect_eq(v.flags, LLGO_REC_FLAG_NO_COPY);
	sc.copy = true;

	unsigned char *data = (unsigned char *)mem + LLGO_RING_HEADER_SIZE;
	uint64_t mask = ds - 1;
	uint32_t fixed = llgo_record_raw_fixed_len(3);
	/* a flipped stack byte: delivered (the unwinder treats the copy as hostile anyway) */
	uint64_t at = atomic_load(&er.hdr->head);
	cr_assert(stackcopy_push(&er, 100, 1, 0xabc, 7, frames, 3, &sc));
	data[(at + fixed + 100) & mask] ^= 0xff;
	cr_expect_eq(ring_reader_drain(&rr, uw_seen_cb, &v), 1);
	/* a flipped register byte: corrupt */
	at = atomic_load(&er.hdr->head);
	cr_assert(stackcopy_push(&er, 100, 1, 0xabc, 7, frames, 3, &sc));
	data[(at + fixed - 30) & mask] ^= 0xff;
	cr_expect_eq(ring_reader_drain(&rr, uw_seen_cb, &v), 0);
	cr_expect_eq(rr.counts.corrupt, 1);
	/* a stack length that disagrees with the record's length, checksum recomputed (a
	 * consistent liar): corrupt */
	at = atomic_load(&er.hdr->head);
	cr_assert(stackcopy_push(&er, 100, 1, 0xabc, 7, frames, 3, &sc));
	unsigned char rec[LLGO_RECORD_MAX_LEN + sizeof(struct llgo_raw_regs)];
	llgo_ring_copy_out(rec, data, mask, at, fixed);
	struct llgo_raw_regs regs;
	memcpy(&regs, rec + fixed - sizeof(regs), sizeof(regs));
	regs.stack_len -= 8;
	memcpy(rec + fixed - sizeof(regs), &regs, sizeof(regs));
	struct llgo_record hdr;
	memcpy(&hdr, rec, sizeof(hdr));
	hdr.checksum = 0;
	memcpy(rec, &hdr, sizeof(hdr));
	hdr.checksum = llgo_record_checksum(rec, fixed);
	memcpy(rec, &hdr, sizeof(hdr));
	llgo_ring_copy_in(data, mask, at, rec, fixed);
	cr_expect_eq(ring_reader_drain(&rr, uw_seen_cb, &v), 0);
	cr_expect_eq(rr.counts.corrupt, 2);
	free(rr.scratch);
	munmap(mem, len);
}

/* ---- an -O2 C program without frame pointers ------------------------------------------ */

#define CHAINS "nofp_chains.c"
#define DLSRC "libnofp_dl.c"

/* nofp_chains (or a build of it: prog) with n allocations per chain and the library lib, run
 * in dir; the profile's unwound and sampled counts in u[0], u[1] (u may be NULL). */
static void uw_check_chains_of(const char *mode, const char *dir, const char *prog,
			       const char *lib, int n, unsigned long long *u)
{
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "%s %d %s", prog, n, lib);
	struct th_prof p;
	th_prof_run(&p, dir, mode, cmd);

	const struct th_want a[] = { { "a_leaf", CHAINS, "a_leaf" },
				     { "a_mid", CHAINS, "a_mid" },
				     { "chain_a", CHAINS, "chain_a" },
				     { "main", CHAINS, "main_a" } };
	const struct th_want b[] = { { "b_inlined", CHAINS, "b_inlined" },
				     { "chain_b", CHAINS, "chain_b" },
				     { "main", CHAINS, "main_b" } };
	const struct th_want r[] = { { "recurse", CHAINS, "recurse_leaf" },
				     { "recurse", CHAINS, "recurse" },
				     { "recurse", CHAINS, "recurse" },
				     { "recurse", CHAINS, "recurse" },
				     { "main", CHAINS, "main_r" } };
	const struct th_want t[] = { { "a_leaf", CHAINS, "a_leaf" },
				     { "a_mid", CHAINS, "a_mid" },
				     { "chain_a", CHAINS, "chain_a" },
				     { "thread_main", CHAINS, "thread_main" } };
	const struct th_want d[] = { { "dl_inner", DLSRC, "dl_inner" },
				     { "dl_alloc", DLSRC, "dl_alloc" },
				     { "main", CHAINS, "main_dl" } };
	const struct th_want s0[] = { { "on_signal", CHAINS, "on_signal" } };
	const struct th_want s1[] = { { "raise", NULL, NULL }, { "main", CHAINS, "main_raise" } };
	const struct th_want pf[] = { { "main", CHAINS, "main_printf" } };
	const struct th_want a0[] = { { "on_altsignal", CHAINS, "on_altsignal" } };
	const struct th_want a1[] = { { "raise", NULL, NULL },
				      { "main", CHAINS, "main_altraise" } };

	bool bad = false;
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, a, 4, th_main_root, 3), n, "%s: chain a (plain)",
			mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, b, 3, th_main_root, 3), n,
			"%s: chain b (inlined step)", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, r, 5, th_main_root, 3), n, "%s: recursion", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, t, 4, th_thread_root, 2), n, "%s: thread", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, d, 3, th_main_root, 3), n, "%s: dlopen'ed library",
			mode);
	/* The handler's frame, the signal trampoline, the interrupted libc code, raise, main. */
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, s0, 1, NULL, 0), n, "%s: signal handler", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, s1, 2, th_main_root, 3), n,
			"%s: signal handler's stack down to raise and main", mode);
	/* on a sigaltstack: the handler's stack, then the interrupted one */
	TH_EXPECT_EQ_OR(bad, th_prof_count(&p, a0, 1, NULL, 0), n, "%s: sigaltstack handler", mode);
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, a1, 2, th_main_root, 3), n,
			"%s: sigaltstack handler's stack down to raise and main", mode);
	/* stdio's buffer, allocated inside libc (no frame pointers) for printf */
	TH_EXPECT_EQ_OR(bad, th_prof_count_tail(&p, pf, 1, th_main_root, 3), 1,
			"%s: printf's buffer under main:@main_printf", mode);
	th_prof_expect_whole(&p);
	if (bad || p.truncated)
		th_prof_dump(&p);
	if (u) {
		u[0] = p.unwound;
		u[1] = p.sampled;
	}
	th_prof_free(&p);
}

static void uw_check_chains(const char *mode)
{
	char *dir = th_tmpdir();
	uw_check_chains_of(mode, dir, TH_PROGS "/nofp_chains", TH_PROGS "/libnofp_dl.so", 20,
			   NULL);
	th_rmdir(dir);
}

Test(unwind, nofp_c_dwarf, .timeout = 300)
{
	uw_check_chains("dwarf");
}

Test(unwind, nofp_c_auto, .timeout = 300)
{
	uw_check_chains("auto");
}

/* ---- .debug_frame as the only CFI ---------------------------------------------------------- */

#define DBG_PROG TH_PROGS "/dbgframe_chains"
#define DBG_LIB TH_PROGS "/libdbgframe_dl.so"

/* The FDEs of path's .eh_frame and of its .debug_frame, as readelf counts them. */
static void uw_fdes(const char *path, int *eh, int *dbg)
{
	char *out = NULL;
	int rc = th_sh(&out, "readelf -W -wN --debug-dump=frames %s 2>/dev/null | awk '/^Contents of the/ "
			"{ eh = index($0, \".eh_frame section\") > 0; "
			"dbg = index($0, \".debug_frame section\") > 0 } "
			"/ FDE / { if (eh) e++; if (dbg) d++ } END { print e + 0, d + 0 }'", path);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert_eq(sscanf(out, "%d %d", eh, dbg), 2, "%s", out);
	free(out);
}

/* The programs are what the tests mean them to be: the code's CFI only in .debug_frame (the
 * crt files' FDEs, _start's among them, in .eh_frame). */
static void uw_expect_dbgframe_only(const char *path, int min_dbg)
{
	int eh, dbg;
	uw_fdes(path, &eh, &dbg);
	cr_expect_leq(eh, 3, "%s: %d FDEs in .eh_frame", path, eh);
	cr_expect_geq(dbg, min_dbg, "%s: %d FDEs in .debug_frame", path, dbg);
}

static void uw_check_dbgframe(const char *mode)
{
	uw_expect_dbgframe_only(DBG_PROG, 6);
	uw_expect_dbgframe_only(DBG_LIB, 2);
	char *dir = th_tmpdir();
	uw_check_chains_of(mode, dir, DBG_PROG, DBG_LIB, 20, NULL);
	th_rmdir(dir);
}

Test(unwind, debug_frame_only_dwarf, .timeout = 300)
{
	uw_check_dbgframe("dwarf");
}

Test(unwind, debug_frame_only_auto, .timeout = 300)
{
	uw_check_dbgframe("auto");
}

/* The same program and library stripped, their .debug_frame only in debug files beside them
 * (.gnu_debuglink), found as the symbolizer finds them. */
static void uw_check_dbgframe_split(const char *mode)
{
	char *dir = th_tmpdir(), *out = NULL;
	int rc = th_sh(&out, "cd %s && cp " DBG_PROG " " DBG_LIB " . && "
			"for b in dbgframe_chains libdbgframe_dl.so; do "
			"objcopy --only-keep-debug $b $b.debug && strip --strip-debug $b && "
			"objcopy --add-gnu-debuglink=$b.debug $b || exit 1; done", dir);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	char prog[4200], lib[4200], dbg[4300];
	snprintf(prog, sizeof(prog), "%s/dbgframe_chains", dir);
	snprintf(lib, sizeof(lib), "%s/libdbgframe_dl.so", dir);
	int eh, n;
	uw_fdes(prog, &eh, &n);
	cr_assert_eq(n, 0, "the stripped program keeps %d .debug_frame FDEs", n);
	snprintf(dbg, sizeof(dbg), "%s.debug", prog);
	uw_expect_dbgframe_only(dbg, 6);
	uw_check_chains_of(mode, dir, prog, lib, 20, NULL);
	th_rmdir(dir);
}

Test(unwind, debug_frame_in_debug_file_dwarf, .timeout = 300)
{
	uw_check_dbgframe_split("dwarf");
}

Test(unwind, debug_frame_in_debug_file_auto, .timeout = 300)
{
	uw_check_dbgframe_split("auto");
}

/* An .eh_frame without .eh_frame_hdr (linked with --no-eh-frame-hdr): its records are
 * indexed by a scan, as a .debug_frame's are. */
Test(unwind, eh_frame_without_header_dwarf, .timeout = 300)
{
	char *out = NULL;
	int rc = th_sh(&out, "readelf -lW " TH_PROGS "/noehhdr_chains | grep -c GNU_EH_FRAME");
	cr_expect_eq(atoi(out), 0, "noehhdr_chains has an .eh_frame_hdr (%d)", rc);
	free(out);
	char *dir = th_tmpdir();
	uw_check_chains_of("dwarf", dir, TH_PROGS "/noehhdr_chains", TH_PROGS "/libnofp_dl.so",
			   20, NULL);
	th_rmdir(dir);
}

/* The frame-pointer ranges auto mode finds in prog's own code (nofp_chains built some way),
 * read from the program stopped before it allocates. */
static size_t uw_fp_ranges_in(const char *prog)
{
	pid_t pid = th_fork();
	if (pid == 0) {
		execl(prog, prog, "1", "none", "stop", (char *)NULL);
		_exit(127);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid);
	cr_assert(WIFSTOPPED(st), "%s did not stop", prog);
	struct procmaps *maps = procmaps_new(pid);
	struct unwind *u = unwind_new(pid, true);
	cr_assert(maps && u);
	unwind_prepare(u, maps);
	static uint64_t ranges[LLGO_CTL_FP_RANGES][2], roots[LLGO_CTL_ROOTS];
	uint32_t nranges = 0, nroots = 0;
	cr_assert(unwind_tables(u, maps, ranges, LLGO_CTL_FP_RANGES, &nranges, roots,
				LLGO_CTL_ROOTS, &nroots));
	const struct mapping **v;
	size_t nmaps = procmaps_list(maps, &v), in = 0;
	const char *base = th_basename(prog);
	for (size_t i = 0; i < nmaps; i++) {
		if (!v[i]->path || strcmp(th_basename(v[i]->path), base) != 0 || !strchr(v[i]->perms, 'x'))
			continue;
		for (uint32_t k = 0; k < nranges; k++)
			in += ranges[k][0] >= v[i]->start && ranges[k][1] <= v[i]->end;
	}
	unwind_free(u);
	procmaps_free(maps);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return in;
}

/* With frame pointers and .debug_frame only, auto mode reads which functions keep them from
 * the .debug_frame (without, none are found) and trusts their walks: stacks stay whole and
 * exact, and once tables and roots reach the shim, samples there are not copied. */
Test(unwind, debug_frame_frame_pointers_auto, .timeout = 300)
{
	uw_expect_dbgframe_only(TH_PROGS "/dbgframe_fp_chains", 6);
	size_t fp = uw_fp_ranges_in(TH_PROGS "/dbgframe_fp_chains");
	size_t nofp = uw_fp_ranges_in(DBG_PROG);
	cr_expect_geq(fp, 1, "no frame-pointer code found in dbgframe_fp_chains");
	cr_expect_eq(nofp, 0, "%zu frame-pointer ranges in dbgframe_chains", nofp);
	char *dir = th_tmpdir();
	unsigned long long u[2];
	uw_check_chains_of("auto", dir, TH_PROGS "/dbgframe_fp_chains", DBG_LIB, 2000, u);
	cr_expect_lt(u[0], u[1], "all %llu samples copied and unwound", u[1]);
	cr_log_info("dbgframe_fp_chains, auto: %llu of %llu samples unwound", u[0], u[1]);
	th_rmdir(dir);
}

/* Section name of the ELF file path, mapped shared and writable (writes reach the file;
 * uw_unmap_section syncs them). */
struct uw_section {
	unsigned char *img, *d; /* the file; the section in it */
	size_t size, len;
	uint64_t vaddr;
};

static void uw_map_section(struct uw_section *m, const char *path, const char *name)
{
	int fd = open(path, O_RDWR);
	cr_assert(fd >= 0, "%s", path);
	struct stat st;
	cr_assert(fstat(fd, &st) == 0);
	m->size = (size_t)st.st_size;
	m->img = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	cr_assert(m->img != MAP_FAILED);
	const unsigned char *sec;
	void *owned;
	cr_assert_eq(cfi_elf_section(m->img, m->size, name, &sec, &m->len, &m->vaddr, &owned), 0,
		     "%s: no %s", path, name);
	cr_assert_null(owned, "%s: a compressed %s", path, name);
	m->d = m->img + (sec - m->img);
}

static void uw_unmap_section(struct uw_section *m)
{
	cr_assert(msync(m->img, m->size, MS_SYNC) == 0);
	munmap(m->img, m->size);
}

/* A hostile .debug_frame gives truncated stacks, never a crash or a hang: the program's
 * FDEs rewritten in place (bad lengths, CIE pointers out of the section or naming an FDE,
 * themselves included, instructions that put the CFA far beyond the stack). */
enum uw_corrupt { UW_BAD_LENGTH, UW_CIE_OUT_OF_RANGE, UW_CIE_CYCLE, UW_BAD_CFA };

static void uw_corrupt(const char *path, enum uw_corrupt how)
{
	struct uw_section m;
	uw_map_section(&m, path, ".debug_frame");
	unsigned char *d = m.d;
	size_t len = m.len;
	int fdes = 0;
	for (size_t at = 0; at + 8 <= len;) {
		uint32_t l, id;
		memcpy(&l, d + at, 4);
		memcpy(&id, d + at + 4, 4);
		cr_assert(l >= 4 && l < 0xfffffff0u && l <= len - at - 4, "record at %zu", at);
		size_t next = at + 4 + l;
		if (id != 0xffffffffu) { /* an FDE: length, CIE pointer, address, range, program */
			fdes++;
			uint32_t v;
			switch (how) {
			case UW_BAD_LENGTH:
				v = 0x7ffffff0u - (uint32_t)at;
				memcpy(d + at, &v, 4);
				next = len; /* the rest of the section is now this record */
				break;
			case UW_CIE_OUT_OF_RANGE:
				v = (uint32_t)len + 0x1000;
				memcpy(d + at + 4, &v, 4);
				break;
			case UW_CIE_CYCLE:
				v = (uint32_t)at;
				memcpy(d + at + 4, &v, 4);
				break;
			case UW_BAD_CFA:
				if (l >= 20 + 8) { /* DW_CFA_def_cfa rsp, 2^40, then nops */
					static const unsigned char far[8] = { 0x0c, 7, 0x80, 0x80,
									      0x80, 0x80, 0x80, 0x20 };
					memset(d + at + 24, 0, l - 20);
					memcpy(d + at + 24, far, sizeof(far));
				}
				break;
			}
		}
		at = next;
	}
	cr_assert_gt(fdes, 0);
	uw_unmap_section(&m);
}

Test(unwind, debug_frame_hostile, .timeout = 300)
{
	const char *names[] = { "bad length", "CIE pointer out of range", "CIE pointer cycle",
				"CFA beyond the stack" };
	for (int how = UW_BAD_LENGTH; how <= UW_BAD_CFA; how++) {
		char *dir = th_tmpdir(), *out = NULL;
		int rc = th_sh(&out, "cp " DBG_PROG " %s/prog", dir);
		cr_assert_eq(rc, 0, "%s", out);
		free(out);
		char prog[4200];
		snprintf(prog, sizeof(prog), "%s/prog", dir);
		uw_corrupt(prog, (enum uw_corrupt)how);
		struct th_prof p;
		th_prof_run(&p, dir, "dwarf", "./prog 10 " DBG_LIB);
		/* chain a's stacks start at a_leaf and never reach main */
		const struct th_want leaf[] = { { "a_leaf", CHAINS, "a_leaf" } };
		const struct th_want whole[] = { { "a_leaf", CHAINS, "a_leaf" },
						 { "a_mid", CHAINS, "a_mid" },
						 { "chain_a", CHAINS, "chain_a" },
						 { "main", CHAINS, "main_a" } };
		long leaves = th_prof_count(&p, leaf, 1, NULL, 0);
		long truncated_leaves = 0;
		for (int i = 0; i < p.n; i++) {
			const struct th_prof_rec *r = &p.r[i];
			if (r->nframes >= 2 && th_frame_is(&r->f[0], &leaf[0]) &&
			    strcmp(r->f[r->nframes - 1].func, PROFILE_TRUNCATED_NAME) == 0)
				truncated_leaves += r->count;
		}
		cr_expect_eq(truncated_leaves, 20, "%s: %ld of chain a's 20 stacks (main and the "
			     "thread) end in [truncated] (%ld reach a root)", names[how],
			     truncated_leaves, leaves);
		cr_expect_eq(th_prof_count(&p, whole, 4, th_main_root, 3), 0, "%s: a whole stack",
			     names[how]);
		cr_expect_geq(p.truncated, 20, "%s: %llu truncated", names[how], p.truncated);
		if (truncated_leaves != 20)
			th_prof_dump(&p);
		th_prof_free(&p);
		th_rmdir(dir);
	}
}

/* ---- CFI that libunwind 1.6 mishandles, from a local user's file -------------------------- */

/* The address of function func in path (its symbol table). */
static uint64_t uw_symbol(const char *path, const char *func)
{
	char *out = NULL;
	int rc = th_sh(&out, "nm %s | awk '$3 == \"%s\" { print $1 }'", path, func);
	cr_assert_eq(rc, 0, "%s", out);
	unsigned long long a = 0;
	cr_assert_eq(sscanf(out, "%llx", &a), 1, "no %s in %s: %s", func, path, out);
	free(out);
	return a;
}

/*
 * Replace the instructions of the FDE of func (path's symbol) in path's section name
 * (.eh_frame as gcc writes it: pc-relative 4-byte initial locations, no augmentation data in
 * the FDE; or .debug_frame: 8-byte absolute ones) with prog[0..n), then nops.
 */
static void uw_patch_fde(const char *path, const char *name, const char *func,
			 const unsigned char *prog, size_t n)
{
	uint64_t addr = uw_symbol(path, func);
	bool eh = strcmp(name, ".eh_frame") == 0;
	struct uw_section m;
	uw_map_section(&m, path, name);
	unsigned char *d = m.d;
	size_t len = m.len;
	bool found = false;
	for (size_t at = 0; at + 8 <= len && !found;) {
		uint32_t l, id;
		memcpy(&l, d + at, 4);
		memcpy(&id, d + at + 4, 4);
		if (l == 0)
			break;
		cr_assert(l < 0xfffffff0u && l <= len - at - 4, "%s: record at %zu", path, at);
		if (eh ? id != 0 : id != 0xffffffffu) {
			uint64_t start;
			size_t ins;
			if (eh) {
				int32_t rel;
				memcpy(&rel, d + at + 8, 4);
				start = m.vaddr + at + 8 + (uint64_t)(int64_t)rel;
				ins = at + 17;
				if (start == addr)
					cr_assert_eq(d[at + 16], 0, "augmentation data in the FDE");
			} else {
				memcpy(&start, d + at + 8, 8);
				ins = at + 24;
			}
			if (start == addr) {
				size_t room = at + 4 + l - ins;
				cr_assert_geq(room, n, "%s: %s's FDE holds %zu bytes of program", path,
					      func, room);
				memset(d + ins, DW_CFA_nop, room);
				memcpy(d + ins, prog, n);
				found = true;
			}
		}
		at += 4 + (size_t)l;
	}
	cr_assert(found, "%s: no FDE of %s (%#llx) in %s", path, func, (unsigned long long)addr,
		  name);
	uw_unmap_section(&m);
}

/* DW_CFA_register: the return address (16) is in register 2^32-1. libunwind 1.6 checks only
 * the first register and indexes its 17-entry location array with the second. */
static const unsigned char uw_cfa_register_oob[] = { DW_CFA_register, 16, 0xff, 0xff, 0xff, 0xff,
						     0x0f };
/* The CFA by an expression that jumps back to itself (DW_OP_skip -3): libunwind loops. */
static const unsigned char uw_cfa_skip_loop[] = { DW_CFA_def_cfa_expression, 3, DW_OP_skip, 0xfd,
						  0xff };

/*
 * A local user's program whose a_leaf FDE (in section name of prog, a build of nofp_chains)
 * holds hostile, run as nobody (when we are root) against a root daemon in dwarf mode: the
 * daemon must live and answer, a_leaf's stacks end right there in [truncated] (its frame is
 * the first; no unwind info past it), and chain b's stacks stay whole. table: the FDE is
 * found by the .eh_frame_hdr search, and refused when found (logged); else cfi.c's rewrite
 * drops it by the same check.
 */
static void uw_hostile_fde(const char *prog, const char *name, const unsigned char *hostile,
			   size_t n, bool table, const char *what)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char copy[200], *out = NULL;
	snprintf(copy, sizeof(copy), "%s/prog", d.dir);
	int rc = th_sh(&out, "cp %s %s && chmod 755 %s", prog, copy, copy);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	uw_patch_fde(copy, name, "a_leaf", hostile, n);
	const int allocs = 10;
	setenv("LLGO_HEAP_UNWIND", "dwarf", 1); /* the program's, inherited */
	pid_t pid = th_run_profiled(&d, geteuid() == 0 ? th_nobody_uid() : 0, copy, "10");
	cr_assert(heapd_alive(&d), "%s: the daemon died:\n%s", what, heapd_log(&d));
	char *text = heapd_snapshot(d.sock, pid, LLGO_FORMAT_TEXT, NULL);
	struct th_prof p;
	th_prof_parse(text, &p);
	free(text);
	const struct th_want leaf = { "a_leaf", CHAINS, "a_leaf" };
	long cut = 0, other_leaf = 0;
	for (int i = 0; i < p.n; i++) {
		const struct th_prof_rec *r = &p.r[i];
		if (r->nframes < 1 || !th_frame_is(&r->f[0], &leaf))
			continue;
		if (r->nframes == 2 && strcmp(r->f[1].func, PROFILE_TRUNCATED_NAME) == 0)
			cut += r->count;
		else
			other_leaf += r->count;
	}
	/* main's and the thread's chain a */
	cr_expect_eq(cut, 2 * allocs, "%s: %ld of a_leaf's %d stacks are a_leaf, [truncated]",
		     what, cut, 2 * allocs);
	cr_expect_eq(other_leaf, 0, "%s: %ld of a_leaf's stacks go on past it", what, other_leaf);
	const struct th_want b[] = { { "b_inlined", CHAINS, "b_inlined" },
				     { "chain_b", CHAINS, "chain_b" },
				     { "main", CHAINS, "main_b" } };
	cr_expect_eq(th_prof_count(&p, b, 3, th_main_root, 3), allocs, "%s: chain b is whole", what);
	if (cut != 2 * allocs || other_leaf)
		th_prof_dump(&p);
	th_prof_free(&p);
	/* it still answers, and stops cleanly */
	struct llgo_list_entry *rows = NULL;
	cr_expect_geq(heapd_list_all(d.sock, &rows), 1, "%s", what);
	free(rows);
	char *log = heapd_log(&d);
	cr_expect(!table || strstr(log, "is refused") != NULL, "%s: no refusal logged:\n%s", what,
		  log);
	free(log);
	heapd_finish(&d);
}

/* The FDE found by the .eh_frame_hdr search: crashed the daemon (SIGBUS in
 * _Ux86_64_step), and hung a drain thread for good. */
Test(unwind, hostile_fde_register_eh_frame, .timeout = 180)
{
	uw_hostile_fde(TH_PROGS "/nofp_chains", ".eh_frame", uw_cfa_register_oob,
		       sizeof(uw_cfa_register_oob), true, "DW_CFA_register r16 in r2^32-1, .eh_frame");
}

Test(unwind, hostile_fde_skip_loop_eh_frame, .timeout = 180)
{
	uw_hostile_fde(TH_PROGS "/nofp_chains", ".eh_frame", uw_cfa_skip_loop,
		       sizeof(uw_cfa_skip_loop), true, "DW_OP_skip to itself, .eh_frame");
}

/* The same through cfi.c's rewrite: a .debug_frame, an .eh_frame without its header. */
Test(unwind, hostile_fde_register_debug_frame, .timeout = 180)
{
	uw_hostile_fde(TH_PROGS "/dbgframe_chains", ".debug_frame", uw_cfa_register_oob,
		       sizeof(uw_cfa_register_oob), false,
		       "DW_CFA_register r16 in r2^32-1, .debug_frame");
}

Test(unwind, hostile_fde_register_eh_frame_without_header, .timeout = 180)
{
	uw_hostile_fde(TH_PROGS "/noehhdr_chains", ".eh_frame", uw_cfa_register_oob,
		       sizeof(uw_cfa_register_oob), false,
		       "DW_CFA_register r16 in r2^32-1, .eh_frame without .eh_frame_hdr");
}

/* ---- libunwind's unwind info, given back ------------------------------------------------ */

/* How much VmData (this process's private writable mappings: libunwind takes its pools with
 * mmap, out of sight of LeakSanitizer and valgrind) grew, in KiB, over rounds unwinds, each
 * from a cold cache (unwind_image_stack makes a new address space every time, as a session's
 * flushed cache would be), of a stack whose first frame is func + 1 in the file path, after
 * as many unwinds to warm up. *frames: the last unwind's frame count. */
static long uw_cold_growth_kb(const char *path, const char *func, int rounds, uint32_t *frames)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0, "%s", path);
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	unsigned char *file = malloc((size_t)st.st_size);
	cr_assert_eq(read(fd, file, (size_t)st.st_size), st.st_size);
	close(fd);
	const uint64_t bias = 0x555555554000ull;
	static unsigned char stack[64]; /* a zero return address: the frame is the last */
	struct llgo_raw_regs regs;
	memset(&regs, 0, sizeof(regs));
	regs.ip = bias + uw_symbol(path, func) + 1;
	regs.sp = 0x7ffc00000000ull;
	regs.stack_hi = regs.sp + sizeof(stack);
	regs.stack_len = sizeof(stack);
	uint64_t out[8];
	bool truncated;
	long before = 0;
	for (int i = 0; i < 2 * rounds; i++) {
		if (i == rounds)
			before = th_status_kb(0, "VmData");
		*frames = unwind_image_stack(file, (size_t)st.st_size, bias, &regs, stack,
					     UNWIND_FAST_OFF, out, 8, &truncated);
	}
	long grown = th_status_kb(0, "VmData") - before;
	free(file);
	return grown;
}

/*
 * libunwind's table search takes a dwarf_cie_info from its pool for the FDE it extracts, and
 * its step gives back what the lookup left in unw_proc_info after every lookup. A pc of code
 * with only .debug_frame: the .eh_frame_hdr search finds the crt FDE below it, extracts it
 * and says "no info"; the search of the rewritten CFI then filled the same unw_proc_info
 * anew, and the first one was lost: 80 bytes per cache miss, for good (1.5 MiB over 20,000
 * lookups). A refused FDE (uw_fde_ok) must be given back too. 10,000 cold lookups of each
 * leave the memory as it was.
 */
Test(unwind, cold_lookups_give_back_unwind_info, .timeout = 300)
{
	const int rounds = 10000;
	uint32_t n = 0;
	long grown = uw_cold_growth_kb(TH_PROGS "/dbgframe_chains", "a_leaf", rounds, &n);
	cr_expect_geq(n, 1);
	cr_expect_lt(grown, 256, ".debug_frame-only pc: VmData grew by %ld KiB over %d lookups",
		     grown, rounds);
	char *dir = th_tmpdir(), copy[300], *out = NULL;
	snprintf(copy, sizeof(copy), "%s/prog", dir);
	int rc = th_sh(&out, "cp %s/nofp_chains %s", TH_PROGS, copy);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	uw_patch_fde(copy, ".eh_frame", "a_leaf", uw_cfa_register_oob,
		     sizeof(uw_cfa_register_oob));
	grown = uw_cold_growth_kb(copy, "a_leaf", rounds, &n);
	cr_expect_eq(n, 1, "the refused FDE's frame is the last");
	cr_expect_lt(grown, 256, "refused FDE: VmData grew by %ld KiB over %d lookups", grown,
		     rounds);
	th_rmdir(dir);
}
