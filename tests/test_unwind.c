// SPDX-License-Identifier: MIT
/*
 * test_unwind.c: whole stacks for code without frame pointers (issue 9). Real programs run
 * under `llgo-heap run --unwind MODE -r 1` (shim preloaded, private daemon) and their Go
 * legacy text profiles are read back: every allocation's stack, frame by frame (function,
 * file:line, inlined frames sharing an address), from the allocating call site to the thread's
 * start. Expected lines come from "@NAME" markers in the programs' sources, so the checks do
 * not depend on line numbers. The same programs run under heaptrack (which unwinds with
 * DWARF in process) and the two must agree; Debian's own sqlite3 and python3 must reach their
 * threads' starts. The ALLOC_RAW record itself (shim writer, daemon reader) is checked first.
 * Hostile CFI in a local user's file (FDEs that libunwind 1.6 would index past its arrays or
 * loop on, in .eh_frame or through cfi.c's rewrite) ends those stacks, the daemon lives.
 */
#include <dwarf.h>
#include <fcntl.h>
#include <grp.h>
#include <regex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "e2e_util.h"
#include "../agent/internal.h"
#include "../shim/internal.h"

#define RUN E2E_BIN "/llgo-heap run"

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

/* ---- profiles ------------------------------------------------------------------------- */

#define UW_MAX_FRAMES 300
#define UW_MAX_RECS 4096

struct uw_frame {
	char func[160];
	char file[160]; /* basename, "" when unknown */
	int line;
	bool inlined; /* shares its address with the frame before (an inline chain) */
};

struct uw_rec {
	long count, bytes;
	int nframes;
	struct uw_frame f[UW_MAX_FRAMES];
};

struct uw_prof {
	int n;
	struct uw_rec *r;
	unsigned long long sampled, delivered, dropped, corrupt, unwound, truncated;
	char mode[16];
};

static const char *uw_base(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* The line starting at l, without its newline, into line (cut to fit); its length. */
static size_t uw_line(const char *l, char *line, size_t cap)
{
	size_t len = strcspn(l, "\n");
	if (len >= cap)
		len = cap - 1;
	memcpy(line, l, len);
	line[len] = '\0';
	return len;
}

/* Parse Go's legacy heap text as text.c writes it. */
static void uw_parse(const char *text, struct uw_prof *p)
{
	memset(p, 0, sizeof(*p));
	p->r = calloc(UW_MAX_RECS, sizeof(*p->r));
	cr_assert(p->r);
	const char *acc = strstr(text, "# llgo-heap: sampled=");
	cr_assert(acc, "no accounting line");
	cr_assert_eq(sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu "
			    "corrupt=%llu", &p->sampled, &p->delivered, &p->dropped, &p->corrupt),
		     4);
	const char *uw = strstr(text, "# llgo-heap: unwind=");
	cr_assert(uw, "no unwind line");
	cr_assert_eq(sscanf(uw, "# llgo-heap: unwind=%15s unwound=%llu truncated=%llu", p->mode,
			    &p->unwound, &p->truncated), 3);
	struct uw_rec *cur = NULL;
	char prev_addr[32] = "";
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		char line[2048];
		uw_line(l, line, sizeof(line));
		long a, b, c, d;
		if (sscanf(line, "%ld: %ld [%ld: %ld] @", &a, &b, &c, &d) == 4) {
			cr_assert_lt(p->n, UW_MAX_RECS);
			cur = &p->r[p->n++];
			cur->count = c;
			cur->bytes = d;
			prev_addr[0] = '\0';
			continue;
		}
		if (!cur || strncmp(line, "#\t", 2) != 0)
			continue;
		/* "#\t0xADDR\tfunc+0xOFF\t\t\tfile:line" (func may be missing) */
		char *f1 = line + 2, *f2 = strchr(f1, '\t');
		if (!f2 || cur->nframes >= UW_MAX_FRAMES)
			continue;
		*f2++ = '\0';
		struct uw_frame *fr = &cur->f[cur->nframes++];
		fr->inlined = strncmp(prev_addr, f1, sizeof(prev_addr) - 1) == 0;
		snprintf(prev_addr, sizeof(prev_addr), "%.31s", f1);
		while (*f2 == '\t')
			f2++;
		char *f3 = strchr(f2, '\t');
		if (f3)
			*f3++ = '\0';
		char *plus = strrchr(f2, '+');
		if (plus)
			*plus = '\0';
		snprintf(fr->func, sizeof(fr->func), "%s", f2);
		if (f3) {
			while (*f3 == '\t')
				f3++;
			char *colon = strrchr(f3, ':');
			if (colon) {
				*colon = '\0';
				fr->line = atoi(colon + 1);
			}
			if (strcmp(f3, "??") != 0)
				snprintf(fr->file, sizeof(fr->file), "%s", uw_base(f3));
		}
	}
}

static void uw_free(struct uw_prof *p)
{
	free(p->r);
}

/* Run prog under llgo-heap run at rate 1 in mode, parse its text profile; env: assignments
 * for the shell to put before llgo-heap run ("" for none). */
static void uw_run_env(struct uw_prof *p, const char *dir, const char *env, const char *mode,
		       const char *cmd)
{
	char *out = NULL;
	int rc = e2e_sh(&out, "cd %s && %s " RUN " --unwind %s -r 1 -f text -o prof.heap -- %s",
			dir, env, mode, cmd);
	cr_assert_eq(rc, 0, "llgo-heap run --unwind %s -- %s failed (%d):\n%s", mode, cmd, rc,
		     out);
	free(out);
	char path[4200];
	snprintf(path, sizeof(path), "%s/prof.heap", dir);
	char *text = e2e_read_file(path);
	cr_assert(text, "no profile written");
	uw_parse(text, p);
	free(text);
	cr_expect_str_eq(p->mode, mode);
	cr_expect_eq(p->sampled, p->delivered + p->dropped + p->corrupt);
	cr_expect_eq(p->corrupt, 0);
	cr_expect_eq(p->dropped, 0, "%llu of %llu samples dropped", p->dropped, p->sampled);
}

static void uw_run(struct uw_prof *p, const char *dir, const char *mode, const char *cmd)
{
	uw_run_env(p, dir, "", mode, cmd);
}

/* Line of the "@name" marker in a program's source. */
static int uw_marker(const char *src, const char *name)
{
	char path[4200], tag[128];
	snprintf(path, sizeof(path), E2E_PROGS_SRC "/%s", src);
	snprintf(tag, sizeof(tag), "@%s ", name);
	char *text = e2e_read_file(path);
	cr_assert(text, "cannot read %s", path);
	int line = 1, found = 0;
	for (const char *l = text; *l; l++) {
		if (*l == '\n') {
			line++;
			continue;
		}
		if (strncmp(l, tag, strlen(tag)) == 0) {
			found = line;
			break;
		}
	}
	free(text);
	cr_assert(found, "no marker %s in %s", tag, src);
	return found;
}

/* An expected frame: func at src:@marker, or func anywhere (marker NULL). */
struct uw_want {
	const char *func;
	const char *src;
	const char *marker;
};

static bool uw_frame_is(const struct uw_frame *f, const struct uw_want *w)
{
	/* gcc's hot/cold split: "f.cold" is f's code */
	size_t len = strlen(w->func);
	if (strncmp(f->func, w->func, len) != 0 ||
	    (f->func[len] && strcmp(f->func + len, ".cold") != 0))
		return false;
	if (!w->marker)
		return true;
	return strcmp(f->file, uw_base(w->src)) == 0 && f->line == uw_marker(w->src, w->marker);
}

static const struct uw_want uw_main_root[] = {
	{ "__libc_start_call_main", NULL, NULL },
	{ "__libc_start_main", NULL, NULL },
	{ "_start", NULL, NULL },
};
static const struct uw_want uw_thread_root[] = {
	{ "start_thread", NULL, NULL },
	{ "clone3", NULL, NULL },
};

static void uw_describe(const struct uw_rec *r, char *out, size_t cap)
{
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < r->nframes && len + 1 < cap; i++)
		len += (size_t)snprintf(out + len, cap - len, "\n    %s%s %s:%d",
					r->f[i].inlined ? "(inl) " : "", r->f[i].func, r->f[i].file,
					r->f[i].line);
}

/*
 * The allocations whose stack is exactly head (from frame 0 on) followed by root: count them.
 * With root NULL, only the head must match, from frame 0, and the stack must end at a thread
 * start (either root).
 */
static long uw_count(const struct uw_prof *p, const struct uw_want *head, int nhead,
		     const struct uw_want *root, int nroot)
{
	long n = 0;
	for (int i = 0; i < p->n; i++) {
		const struct uw_rec *r = &p->r[i];
		if (r->nframes < nhead + nroot)
			continue;
		bool ok = true;
		for (int k = 0; k < nhead && ok; k++)
			ok = uw_frame_is(&r->f[k], &head[k]);
		if (root) {
			ok = ok && r->nframes == nhead + nroot;
			for (int k = 0; k < nroot && ok; k++)
				ok = uw_frame_is(&r->f[nhead + k], &root[k]);
		}
		if (ok)
			n += r->count;
	}
	return n;
}

/* Whether some stack holds want[0..n) as consecutive frames followed by root (to the end). */
static long uw_count_tail(const struct uw_prof *p, const struct uw_want *want, int n,
			  const struct uw_want *root, int nroot)
{
	long total = 0;
	for (int i = 0; i < p->n; i++) {
		const struct uw_rec *r = &p->r[i];
		int start = r->nframes - nroot - n;
		if (start < 0)
			continue;
		bool ok = true;
		for (int k = 0; k < n && ok; k++)
			ok = uw_frame_is(&r->f[start + k], &want[k]);
		for (int k = 0; k < nroot && ok; k++)
			ok = uw_frame_is(&r->f[start + n + k], &root[k]);
		if (ok)
			total += r->count;
	}
	return total;
}

static void uw_dump(const struct uw_prof *p)
{
	static char buf[16384];
	for (int i = 0; i < p->n; i++) {
		uw_describe(&p->r[i], buf, sizeof(buf));
		fprintf(stderr, "  %ld allocations:%s\n", p->r[i].count, buf);
	}
}

/* No stack ends in [truncated], and every stack reaches a thread's start. */
static void uw_expect_whole(const struct uw_prof *p)
{
	cr_expect_eq(p->truncated, 0, "%llu stacks truncated", p->truncated);
	for (int i = 0; i < p->n; i++) {
		const struct uw_rec *r = &p->r[i];
		bool whole = false;
		for (int k = 0; k < r->nframes; k++)
			whole |= strcmp(r->f[k].func, "__libc_start_call_main") == 0 ||
				 strcmp(r->f[k].func, "start_thread") == 0;
		char buf[8192];
		uw_describe(r, buf, sizeof(buf));
		cr_expect(whole, "a stack that does not reach its thread's start:%s", buf);
	}
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
	struct uw_prof p;
	uw_run(&p, dir, mode, cmd);

	const struct uw_want a[] = { { "a_leaf", CHAINS, "a_leaf" },
				     { "a_mid", CHAINS, "a_mid" },
				     { "chain_a", CHAINS, "chain_a" },
				     { "main", CHAINS, "main_a" } };
	const struct uw_want b[] = { { "b_inlined", CHAINS, "b_inlined" },
				     { "chain_b", CHAINS, "chain_b" },
				     { "main", CHAINS, "main_b" } };
	const struct uw_want r[] = { { "recurse", CHAINS, "recurse_leaf" },
				     { "recurse", CHAINS, "recurse" },
				     { "recurse", CHAINS, "recurse" },
				     { "recurse", CHAINS, "recurse" },
				     { "main", CHAINS, "main_r" } };
	const struct uw_want t[] = { { "a_leaf", CHAINS, "a_leaf" },
				     { "a_mid", CHAINS, "a_mid" },
				     { "chain_a", CHAINS, "chain_a" },
				     { "thread_main", CHAINS, "thread_main" } };
	const struct uw_want d[] = { { "dl_inner", DLSRC, "dl_inner" },
				     { "dl_alloc", DLSRC, "dl_alloc" },
				     { "main", CHAINS, "main_dl" } };
	const struct uw_want s0[] = { { "on_signal", CHAINS, "on_signal" } };
	const struct uw_want s1[] = { { "raise", NULL, NULL }, { "main", CHAINS, "main_raise" } };
	const struct uw_want pf[] = { { "main", CHAINS, "main_printf" } };
	const struct uw_want a0[] = { { "on_altsignal", CHAINS, "on_altsignal" } };
	const struct uw_want a1[] = { { "raise", NULL, NULL },
				      { "main", CHAINS, "main_altraise" } };

	bool bad = false;
#define UW_EXPECT(got, want, ...)                                                          \
	do {                                                                               \
		long g_ = (got);                                                           \
		bad |= g_ != (long)(want);                                                 \
		cr_expect_eq(g_, (long)(want), __VA_ARGS__);                               \
	} while (0)
	UW_EXPECT(uw_count(&p, a, 4, uw_main_root, 3), n, "%s: chain a (plain)", mode);
	UW_EXPECT(uw_count(&p, b, 3, uw_main_root, 3), n, "%s: chain b (inlined step)", mode);
	UW_EXPECT(uw_count(&p, r, 5, uw_main_root, 3), n, "%s: recursion", mode);
	UW_EXPECT(uw_count(&p, t, 4, uw_thread_root, 2), n, "%s: thread", mode);
	UW_EXPECT(uw_count(&p, d, 3, uw_main_root, 3), n, "%s: dlopen'ed library", mode);
	/* The handler's frame, the signal trampoline, the interrupted libc code, raise, main. */
	UW_EXPECT(uw_count(&p, s0, 1, NULL, 0), n, "%s: signal handler", mode);
	UW_EXPECT(uw_count_tail(&p, s1, 2, uw_main_root, 3), n,
		  "%s: signal handler's stack down to raise and main", mode);
	/* on a sigaltstack: the handler's stack, then the interrupted one */
	UW_EXPECT(uw_count(&p, a0, 1, NULL, 0), n, "%s: sigaltstack handler", mode);
	UW_EXPECT(uw_count_tail(&p, a1, 2, uw_main_root, 3), n,
		  "%s: sigaltstack handler's stack down to raise and main", mode);
	/* stdio's buffer, allocated inside libc (no frame pointers) for printf */
	UW_EXPECT(uw_count_tail(&p, pf, 1, uw_main_root, 3), 1,
		  "%s: printf's buffer under main:@main_printf", mode);
	uw_expect_whole(&p);
	if (bad || p.truncated)
		uw_dump(&p);
	if (u) {
		u[0] = p.unwound;
		u[1] = p.sampled;
	}
	uw_free(&p);
}

static void uw_check_chains(const char *mode)
{
	char *dir = e2e_tmpdir();
	uw_check_chains_of(mode, dir, E2E_PROGS "/nofp_chains", E2E_PROGS "/libnofp_dl.so", 20,
			   NULL);
	e2e_rmdir(dir);
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

#define DBG_PROG E2E_PROGS "/dbgframe_chains"
#define DBG_LIB E2E_PROGS "/libdbgframe_dl.so"

/* The FDEs of path's .eh_frame and of its .debug_frame, as readelf counts them. */
static void uw_fdes(const char *path, int *eh, int *dbg)
{
	char *out = NULL;
	int rc = e2e_sh(&out, "readelf -W -wN --debug-dump=frames %s 2>/dev/null | awk '/^Contents of the/ "
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
	char *dir = e2e_tmpdir();
	uw_check_chains_of(mode, dir, DBG_PROG, DBG_LIB, 20, NULL);
	e2e_rmdir(dir);
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
	char *dir = e2e_tmpdir(), *out = NULL;
	int rc = e2e_sh(&out, "cd %s && cp " DBG_PROG " " DBG_LIB " . && "
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
	e2e_rmdir(dir);
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
	int rc = e2e_sh(&out, "readelf -lW " E2E_PROGS "/noehhdr_chains | grep -c GNU_EH_FRAME");
	cr_expect_eq(atoi(out), 0, "noehhdr_chains has an .eh_frame_hdr (%d)", rc);
	free(out);
	char *dir = e2e_tmpdir();
	uw_check_chains_of("dwarf", dir, E2E_PROGS "/noehhdr_chains", E2E_PROGS "/libnofp_dl.so",
			   20, NULL);
	e2e_rmdir(dir);
}

/* The frame-pointer ranges auto mode finds in prog's own code (nofp_chains built some way),
 * read from the program stopped before it allocates. */
static size_t uw_fp_ranges_in(const char *prog)
{
	pid_t pid = fork();
	cr_assert(pid >= 0);
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
	const char *base = uw_base(prog);
	for (size_t i = 0; i < nmaps; i++) {
		if (!v[i]->path || strcmp(uw_base(v[i]->path), base) != 0 || !strchr(v[i]->perms, 'x'))
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
	uw_expect_dbgframe_only(E2E_PROGS "/dbgframe_fp_chains", 6);
	size_t fp = uw_fp_ranges_in(E2E_PROGS "/dbgframe_fp_chains");
	size_t nofp = uw_fp_ranges_in(DBG_PROG);
	cr_expect_geq(fp, 1, "no frame-pointer code found in dbgframe_fp_chains");
	cr_expect_eq(nofp, 0, "%zu frame-pointer ranges in dbgframe_chains", nofp);
	char *dir = e2e_tmpdir();
	unsigned long long u[2];
	uw_check_chains_of("auto", dir, E2E_PROGS "/dbgframe_fp_chains", DBG_LIB, 2000, u);
	cr_expect_lt(u[0], u[1], "all %llu samples copied and unwound", u[1]);
	cr_log_info("dbgframe_fp_chains, auto: %llu of %llu samples unwound", u[0], u[1]);
	e2e_rmdir(dir);
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
		char *dir = e2e_tmpdir(), *out = NULL;
		int rc = e2e_sh(&out, "cp " DBG_PROG " %s/prog", dir);
		cr_assert_eq(rc, 0, "%s", out);
		free(out);
		char prog[4200];
		snprintf(prog, sizeof(prog), "%s/prog", dir);
		uw_corrupt(prog, (enum uw_corrupt)how);
		struct uw_prof p;
		uw_run(&p, dir, "dwarf", "./prog 10 " DBG_LIB);
		/* chain a's stacks start at a_leaf and never reach main */
		const struct uw_want leaf[] = { { "a_leaf", CHAINS, "a_leaf" } };
		const struct uw_want whole[] = { { "a_leaf", CHAINS, "a_leaf" },
						 { "a_mid", CHAINS, "a_mid" },
						 { "chain_a", CHAINS, "chain_a" },
						 { "main", CHAINS, "main_a" } };
		long leaves = uw_count(&p, leaf, 1, NULL, 0);
		long truncated_leaves = 0;
		for (int i = 0; i < p.n; i++) {
			const struct uw_rec *r = &p.r[i];
			if (r->nframes >= 2 && uw_frame_is(&r->f[0], &leaf[0]) &&
			    strcmp(r->f[r->nframes - 1].func, PROFILE_TRUNCATED_NAME) == 0)
				truncated_leaves += r->count;
		}
		cr_expect_eq(truncated_leaves, 20, "%s: %ld of chain a's 20 stacks (main and the "
			     "thread) end in [truncated] (%ld reach a root)", names[how],
			     truncated_leaves, leaves);
		cr_expect_eq(uw_count(&p, whole, 4, uw_main_root, 3), 0, "%s: a whole stack",
			     names[how]);
		cr_expect_geq(p.truncated, 20, "%s: %llu truncated", names[how], p.truncated);
		if (truncated_leaves != 20)
			uw_dump(&p);
		uw_free(&p);
		e2e_rmdir(dir);
	}
}

/* ---- CFI that libunwind 1.6 mishandles, from a local user's file -------------------------- */

/* The address of function func in path (its symbol table). */
static uint64_t uw_symbol(const char *path, const char *func)
{
	char *out = NULL;
	int rc = e2e_sh(&out, "nm %s | awk '$3 == \"%s\" { print $1 }'", path, func);
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
	int rc = e2e_sh(&out, "cp %s %s && chmod 755 %s", prog, copy, copy);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	uw_patch_fde(copy, name, "a_leaf", hostile, n);
	const int allocs = 10;
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (geteuid() == 0 &&
		    (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
			_exit(120);
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		setenv("LD_PRELOAD", LLGO_PLAIN_SHIM, 1);
		setenv("LLGO_HEAP_SOCKET", d.sock, 1);
		setenv("LLGO_HEAP_RATE", "1", 1);
		setenv("LLGO_HEAP_UNWIND", "dwarf", 1);
		execl(copy, copy, "10", (char *)NULL);
		_exit(127);
	}
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the program: status %#x", what, st);
	cr_assert(heapd_alive(&d), "%s: the daemon died:\n%s", what, heapd_log(&d));
	char *text = heapd_snapshot(d.sock, pid, LLGO_FORMAT_TEXT, NULL);
	struct uw_prof p;
	uw_parse(text, &p);
	free(text);
	const struct uw_want leaf = { "a_leaf", CHAINS, "a_leaf" };
	long cut = 0, other_leaf = 0;
	for (int i = 0; i < p.n; i++) {
		const struct uw_rec *r = &p.r[i];
		if (r->nframes < 1 || !uw_frame_is(&r->f[0], &leaf))
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
	const struct uw_want b[] = { { "b_inlined", CHAINS, "b_inlined" },
				     { "chain_b", CHAINS, "chain_b" },
				     { "main", CHAINS, "main_b" } };
	cr_expect_eq(uw_count(&p, b, 3, uw_main_root, 3), allocs, "%s: chain b is whole", what);
	if (cut != 2 * allocs || other_leaf)
		uw_dump(&p);
	uw_free(&p);
	/* it still answers, and stops cleanly */
	struct llgo_list_entry *rows = NULL;
	cr_expect_geq(heapd_list_all(d.sock, &rows), 1, "%s", what);
	free(rows);
	char *log = heapd_log(&d);
	cr_expect(!table || strstr(log, "is refused") != NULL, "%s: no refusal logged:\n%s", what,
		  log);
	free(log);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* The FDE found by the .eh_frame_hdr search: crashed the daemon (SIGBUS in
 * _Ux86_64_step), and hung a drain thread for good. */
Test(unwind, hostile_fde_register_eh_frame, .timeout = 180)
{
	uw_hostile_fde(E2E_PROGS "/nofp_chains", ".eh_frame", uw_cfa_register_oob,
		       sizeof(uw_cfa_register_oob), true, "DW_CFA_register r16 in r2^32-1, .eh_frame");
}

Test(unwind, hostile_fde_skip_loop_eh_frame, .timeout = 180)
{
	uw_hostile_fde(E2E_PROGS "/nofp_chains", ".eh_frame", uw_cfa_skip_loop,
		       sizeof(uw_cfa_skip_loop), true, "DW_OP_skip to itself, .eh_frame");
}

/* The same through cfi.c's rewrite: a .debug_frame, an .eh_frame without its header. */
Test(unwind, hostile_fde_register_debug_frame, .timeout = 180)
{
	uw_hostile_fde(E2E_PROGS "/dbgframe_chains", ".debug_frame", uw_cfa_register_oob,
		       sizeof(uw_cfa_register_oob), false,
		       "DW_CFA_register r16 in r2^32-1, .debug_frame");
}

Test(unwind, hostile_fde_register_eh_frame_without_header, .timeout = 180)
{
	uw_hostile_fde(E2E_PROGS "/noehhdr_chains", ".eh_frame", uw_cfa_register_oob,
		       sizeof(uw_cfa_register_oob), false,
		       "DW_CFA_register r16 in r2^32-1, .eh_frame without .eh_frame_hdr");
}

/* ---- libunwind's unwind info, given back ------------------------------------------------ */

/* This process's private writable mappings (VmData, KiB): libunwind takes its pools with
 * mmap, out of sight of LeakSanitizer and valgrind. */
static long uw_vm_data_kb(void)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	cr_assert_gt(n, 0);
	buf[n] = '\0';
	const char *p = strstr(buf, "VmData:");
	cr_assert_not_null(p);
	return strtol(p + 7, NULL, 10);
}

/* How much VmData grew (KiB) over rounds unwinds, each from a cold cache (unwind_image_stack
 * makes a new address space every time, as a session's flushed cache would be), of a stack
 * whose first frame is func + 1 in the file path, after as many unwinds to warm up. *frames:
 * the last unwind's frame count. */
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
			before = uw_vm_data_kb();
		*frames = unwind_image_stack(file, (size_t)st.st_size, bias, &regs, stack,
					     UNWIND_FAST_OFF, out, 8, &truncated);
	}
	long grown = uw_vm_data_kb() - before;
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
	long grown = uw_cold_growth_kb(E2E_PROGS "/dbgframe_chains", "a_leaf", rounds, &n);
	cr_expect_geq(n, 1);
	cr_expect_lt(grown, 256, ".debug_frame-only pc: VmData grew by %ld KiB over %d lookups",
		     grown, rounds);
	char *dir = e2e_tmpdir(), copy[300], *out = NULL;
	snprintf(copy, sizeof(copy), "%s/prog", dir);
	int rc = e2e_sh(&out, "cp %s/nofp_chains %s", E2E_PROGS, copy);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	uw_patch_fde(copy, ".eh_frame", "a_leaf", uw_cfa_register_oob,
		     sizeof(uw_cfa_register_oob));
	grown = uw_cold_growth_kb(copy, "a_leaf", rounds, &n);
	cr_expect_eq(n, 1, "the refused FDE's frame is the last");
	cr_expect_lt(grown, 256, "refused FDE: VmData grew by %ld KiB over %d lookups", grown,
		     rounds);
	e2e_rmdir(dir);
}

/* ---- an -O2 C++ program without frame pointers, through libstdc++ ---------------------- */

#define CXX "nofp_cxx.cc"

static void uw_check_cxx(const char *mode)
{
	char *dir = e2e_tmpdir();
	const int n = 20;
	struct uw_prof p;
	uw_run(&p, dir, mode, E2E_PROGS "/nofp_cxx 20");
	bool bad = false;
	const struct uw_want str[] = { { "_Z11make_stringB5cxx11i", CXX, "make_string" },
				       { "main", CXX, "main_string" } };
	const struct uw_want vec[] = { { "_Z11grow_vectori", CXX, "grow_vector" },
				       { "main", CXX, "main_vector" } };
	const struct uw_want map[] = { { "_Z8fill_mapi", CXX, "fill_map" },
				       { "main", CXX, "main_map" } };
	const struct uw_want node[] = { { "_Z9make_nodev", CXX, "make_node" },
					{ "main", CXX, "main_node" } };
	const struct uw_want thr[] = { { "_Z9throw_onei", CXX, "throw_one" },
				       { "main", CXX, "main_throw" } };
	const struct uw_want exc[] = { { "__cxa_allocate_exception", NULL, NULL },
				       { "_Z9throw_onei", CXX, "throw_one" },
				       { "main", CXX, "main_throw" } };
	/* std::string's buffer (allocated inside libstdc++), a vector growing 1, 2, 4, three
	 * map nodes, one make_shared block, and per throw the exception object and the
	 * runtime_error's message */
	UW_EXPECT(uw_count_tail(&p, str, 2, uw_main_root, 3), n, "%s: std::string", mode);
	UW_EXPECT(uw_count_tail(&p, vec, 2, uw_main_root, 3), 3 * n, "%s: std::vector", mode);
	UW_EXPECT(uw_count_tail(&p, map, 2, uw_main_root, 3), 3 * n, "%s: std::map", mode);
	UW_EXPECT(uw_count_tail(&p, node, 2, uw_main_root, 3), n, "%s: std::make_shared", mode);
	UW_EXPECT(uw_count_tail(&p, thr, 2, uw_main_root, 3), 2 * n, "%s: throw", mode);
	UW_EXPECT(uw_count(&p, exc, 3, uw_main_root, 3), n, "%s: __cxa_allocate_exception",
		  mode);
	/* a destructor run from throw_one's landing pad while the exception propagates */
	const struct uw_want pad[] = { { "_ZN5GuardD2Ev", CXX, "guard_dtor" },
				       { "_Z9throw_onei", NULL, NULL },
				       { "main", CXX, "main_throw" } };
	UW_EXPECT(uw_count(&p, pad, 3, uw_main_root, 3), n, "%s: landing pad", mode);
	uw_expect_whole(&p);
	if (bad || p.truncated)
		uw_dump(&p);
	uw_free(&p);
	e2e_rmdir(dir);
}

Test(unwind, nofp_cxx_dwarf, .timeout = 300)
{
	uw_check_cxx("dwarf");
}

Test(unwind, nofp_cxx_auto, .timeout = 300)
{
	uw_check_cxx("auto");
}

/* ---- frame-pointer code calling into libc, which keeps none --------------------------- */

#define FP "unwind_fp.c"

/* The caller of fopen is load_file (a frame-pointer walk from load_file's frame skips it
 * and shows fopen called from main), and printf's buffer has its callers. */
static void uw_check_fp(const char *mode)
{
	char *dir = e2e_tmpdir();
	const int n = 20;
	struct uw_prof p;
	uw_run(&p, dir, mode, E2E_PROGS "/unwind_fp 20 " E2E_PROGS_SRC "/unwind_fp.c");
	bool bad = false;
	const struct uw_want load[] = { { "load_file", FP, "load_file" },
					{ "main", FP, "main_load" } };
	const struct uw_want rep[] = { { "report", FP, "report" }, { "main", FP, "main_report" } };
	UW_EXPECT(uw_count_tail(&p, load, 2, uw_main_root, 3), n, "%s: fopen from load_file", mode);
	UW_EXPECT(uw_count_tail(&p, rep, 2, uw_main_root, 3), 1, "%s: printf from report", mode);
	/* the frame right above load_file is libc's fopen */
	long fopen_frames = 0;
	for (int i = 0; i < p.n; i++) {
		const struct uw_rec *r = &p.r[i];
		for (int k = 1; k < r->nframes; k++)
			if (strcmp(r->f[k].func, "load_file") == 0 && strstr(r->f[k - 1].func, "fopen"))
				fopen_frames += r->count;
	}
	UW_EXPECT(fopen_frames, n, "%s: fopen right above load_file", mode);
	uw_expect_whole(&p);
	if (bad || p.truncated)
		uw_dump(&p);
	uw_free(&p);
	e2e_rmdir(dir);
}

Test(unwind, fp_program_calls_libc_auto, .timeout = 300)
{
	uw_check_fp("auto");
}

Test(unwind, fp_program_calls_libc_dwarf, .timeout = 300)
{
	uw_check_fp("dwarf");
}

/* ---- agreement with heaptrack ------------------------------------------------------------ */

/* A stack as "file:line" keys, leaf first, down to main or the thread's start function;
 * frames without a file or line are "?" (each side names those differently). */
struct uw_key {
	char key[4096];
	long count;
};

static void uw_key_add(struct uw_key *keys, int *n, int max, const char *key, long count)
{
	for (int i = 0; i < *n; i++) {
		if (strcmp(keys[i].key, key) == 0) {
			keys[i].count += count;
			return;
		}
	}
	cr_assert_lt(*n, max);
	snprintf(keys[*n].key, sizeof(keys[*n].key), "%s", key);
	keys[(*n)++].count = count;
}

static void uw_key_frame(char *key, size_t cap, const char *file, int line)
{
	size_t len = strlen(key);
	if (file[0] && line > 0)
		snprintf(key + len, cap - len, "%s:%d;", uw_base(file), line);
	else
		snprintf(key + len, cap - len, "?;");
}

/* Our stacks, cut after main (heaptrack stops there); only those through main or a thread's
 * start function (heaptrack also sees what runs before our shim attaches). */
static int uw_keys_ours(const struct uw_prof *p, struct uw_key *keys, int max)
{
	int n = 0;
	for (int i = 0; i < p->n; i++) {
		const struct uw_rec *r = &p->r[i];
		char key[4096] = "";
		bool rooted = false;
		for (int k = 0; k < r->nframes; k++) {
			uw_key_frame(key, sizeof(key), r->f[k].file, r->f[k].line);
			if (strcmp(r->f[k].func, "main") == 0) {
				rooted = true;
				break;
			}
			if (strcmp(r->f[k].func, "start_thread") == 0)
				rooted = true;
		}
		if (rooted)
			uw_key_add(keys, &n, max, key, r->count);
	}
	return n;
}

static void uw_name_norm(const char *in, char *out, size_t cap);

/* heaptrack_print's "MOST CALLS TO ALLOCATION FUNCTIONS", unmerged: frames as file:line
 * keys (stacks through main or start_thread), or by_name as function names (uw_name_norm;
 * an unnamed frame "?"; stacks through main). */
static int uw_keys_heaptrack(const char *text, struct uw_key *keys, int max, bool by_name)
{
	int n = 0;
	const char *sec = strstr(text, "MOST CALLS TO ALLOCATION FUNCTIONS");
	cr_assert(sec, "no allocation section in heaptrack_print's output");
	char key[4096] = "";
	long count = -1;
	bool rooted = false, cut = false;
	char func[1024] = "";
	for (const char *l = sec; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		char line[8192];
		size_t len = uw_line(l, line, sizeof(line));
		long c;
		bool end = len == 0 || strstr(line, "PEAK MEMORY") || strstr(line, "MOST TEMPORARY");
		if (end || sscanf(line, "%ld calls to allocation functions", &c) == 1) {
			if (count >= 0 && rooted)
				uw_key_add(keys, &n, max, key, count);
			count = -1;
			if (end && len)
				break;
			if (!end) {
				count = c;
				key[0] = '\0';
				rooted = cut = false;
			}
			continue;
		}
		if (count < 0 || cut)
			continue;
		if (strncmp(line, "    at ", 7) == 0 || strncmp(line, "    in ", 7) == 0)
			continue; /* read with their frame below */
		if (strncmp(line, "  ", 2) != 0 || line[2] == ' ')
			continue;
		/* a frame: "  func", then optionally "    at file:line", "    in lib" */
		if (by_name && strncmp(line + 2, "0x", 2) != 0)
			uw_name_norm(line + 2, func, sizeof(func));
		else
			snprintf(func, sizeof(func), "%.500s", by_name ? "?" : line + 2);
		const char *next = l + strcspn(l, "\n");
		char file[1024] = "";
		int ln = 0;
		const char *in = *next == '\n' ? next + 1 : next;
		if (strncmp(in, "    at ", 7) == 0)
			in += strcspn(in, "\n") + 1;
		/* heaptrack's own wrappers (its dlopen) are not the program's frames */
		if (strncmp(in, "    in ", 7) == 0 &&
		    memmem(in, strcspn(in, "\n"), "heaptrack", 9) != NULL)
			continue;
		if (*next == '\n' && strncmp(next + 1, "    at ", 7) == 0) {
			const char *at = next + 8;
			size_t alen = strcspn(at, "\n");
			char buf[1024];
			snprintf(buf, sizeof(buf), "%.*s", (int)(alen < 1000 ? alen : 1000), at);
			char *colon = strrchr(buf, ':');
			if (colon) {
				*colon = '\0';
				ln = atoi(colon + 1);
				snprintf(file, sizeof(file), "%s", buf);
			}
		}
		if (by_name) {
			size_t kl = strlen(key);
			snprintf(key + kl, sizeof(key) - kl, "%s;", func);
		} else {
			uw_key_frame(key, sizeof(key), file, ln);
		}
		if (strcmp(func, "main") == 0) {
			rooted = cut = true;
		} else if (!by_name && strcmp(func, "start_thread") == 0) {
			rooted = true;
		}
	}
	return n;
}

/* Share of allocations whose stacks agree: sum over stacks of min(ours, heaptrack's), over
 * the larger of the two totals. */
static double uw_agreement(const struct uw_key *a, int na, const struct uw_key *b, int nb,
			   long *ta, long *tb)
{
	long same = 0;
	*ta = *tb = 0;
	for (int i = 0; i < na; i++)
		*ta += a[i].count;
	for (int j = 0; j < nb; j++)
		*tb += b[j].count;
	for (int i = 0; i < na; i++)
		for (int j = 0; j < nb; j++)
			if (strcmp(a[i].key, b[j].key) == 0)
				same += a[i].count < b[j].count ? a[i].count : b[j].count;
	long total = *ta > *tb ? *ta : *tb;
	return total ? (double)same / (double)total : 0;
}

static void uw_compare_heaptrack(const char *cmd)
{
	char *dir = e2e_tmpdir(), *out = NULL;
	struct uw_prof p;
	uw_run(&p, dir, "auto", cmd);
	int rc = e2e_sh(&out, "cd %s && heaptrack -o %s/ht %s >/dev/null 2>&1 && "
			"heaptrack_print %s/ht.zst --print-allocators 1 --print-peaks 0 "
			"--print-leaks 0 --print-temporary 0 --print-histogram 0 -m 0 -n 100000",
			dir, dir, cmd, dir);
	cr_assert_eq(rc, 0, "heaptrack failed (%d):\n%.2000s", rc, out);
	static struct uw_key ours[512], theirs[512];
	int no = uw_keys_ours(&p, ours, 512);
	int nt = uw_keys_heaptrack(out, theirs, 512, false);
	long to, tt;
	double agree = uw_agreement(ours, no, theirs, nt, &to, &tt);
	fprintf(stderr, "heaptrack vs llgo-heap (%s): %.2f%% of allocations agree "
			"(%ld ours, %ld heaptrack's)\n", cmd, 100 * agree, to, tt);
	if (agree < 0.99) {
		for (int i = 0; i < no; i++)
			fprintf(stderr, "  ours %ld %s\n", ours[i].count, ours[i].key);
		for (int j = 0; j < nt; j++)
			fprintf(stderr, "  heaptrack %ld %s\n", theirs[j].count, theirs[j].key);
	}
	cr_expect_geq(agree, 0.99, "%s: only %.2f%% of allocations have heaptrack's stack", cmd,
		      100 * agree);
	cr_expect_gt(to, 0);
	free(out);
	uw_free(&p);
	e2e_rmdir(dir);
}

Test(unwind, heaptrack_agrees_c, .timeout = 300)
{
	uw_compare_heaptrack(E2E_PROGS "/nofp_chains 50 " E2E_PROGS "/libnofp_dl.so nosignal");
}

Test(unwind, heaptrack_agrees_cxx, .timeout = 300)
{
	uw_compare_heaptrack(E2E_PROGS "/nofp_cxx 50");
}

Test(unwind, heaptrack_agrees_fp_program, .timeout = 300)
{
	uw_compare_heaptrack(E2E_PROGS "/unwind_fp 50 " E2E_PROGS_SRC "/unwind_fp.c");
}

/* ---- agreement with heaptrack, function by function: libstdc++ containers ---------------- */

/*
 * A demangled C++ name as both demanglers print it (c++filt for ours, heaptrack's own,
 * which shortens template arguments to "<>"): without template arguments, parameters,
 * return type, ABI tags and clone suffixes. "long& std::vector<long, std::allocator<long>
 * >::emplace_back<long>(long&&)" and "long& std::vector<>::emplace_back<>(long&&)" are both
 * "std::vector::emplace_back".
 */
static void uw_name_norm(const char *in, char *out, size_t cap)
{
	char b[4096];
	size_t n = 0;
	int angle = 0;
	for (const char *c = in; *c && n + 16 < sizeof(b);) {
		if (angle == 0 && strncmp(c, "operator", 8) == 0) {
			/* operator<, operator<<, operator->, operator>=: no brackets */
			memcpy(b + n, c, 8);
			n += 8;
			c += 8;
			while (*c && strchr("<>=-", *c) && n + 1 < sizeof(b))
				b[n++] = *c++;
			continue;
		}
		if (*c == '<')
			angle++;
		else if (*c == '>' && angle > 0)
			angle--;
		else if (angle == 0)
			b[n++] = *c;
		c++;
	}
	b[n] = '\0';
	char *tag;
	while ((tag = strstr(b, "[abi:")) != NULL || (tag = strstr(b, " [clone ")) != NULL) {
		char *end = strchr(tag, ']');
		if (!end)
			break;
		memmove(tag, end + 1, strlen(end + 1) + 1);
	}
	/* the parameters: from the first '(' that is not "(anonymous namespace)" nor in
	 * "operator()" */
	for (char *c = b; *c; c++) {
		if (strncmp(c, "(anonymous namespace)", 21) == 0) {
			c += 20;
			continue;
		}
		if (*c == '(' && !(c - b >= 8 && strncmp(c - 8, "operator", 8) == 0)) {
			*c = '\0';
			break;
		}
	}
	/* the return type: what comes before the last space that is not operator's */
	const char *name = b;
	for (char *sp = strrchr(b, ' '); sp; sp = sp > b ? memrchr(b, ' ', (size_t)(sp - b)) : NULL) {
		if (sp - b >= 8 && strncmp(sp - 8, "operator", 8) == 0)
			continue;
		name = sp + 1;
		break;
	}
	size_t len = strnlen(name, cap - 1);
	memcpy(out, name, len);
	out[len] = '\0';
}

/* Our stacks by function name, leaf first, down to main (only stacks that reach it), from the
 * legacy text profile with its names demangled by c++filt; an unsymbolized frame is "?". */
static int uw_names_ours(const char *text, struct uw_key *keys, int max)
{
	int n = 0;
	char key[4096] = "";
	long count = -1;
	bool rooted = false;
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		char line[8192];
		size_t len = uw_line(l, line, sizeof(line));
		long a, b, c, d;
		bool rec = sscanf(line, "%ld: %ld [%ld: %ld] @", &a, &b, &c, &d) == 4;
		if (rec || len == 0) {
			if (count >= 0 && rooted)
				uw_key_add(keys, &n, max, key, count);
			count = rec ? c : -1;
			key[0] = '\0';
			rooted = false;
			continue;
		}
		if (count < 0 || rooted || strncmp(line, "#\t0x", 4) != 0)
			continue;
		/* "#\t0xADDR\tfunc+0xOFF\t\t\tfile:line", or "#\t0xADDR" unsymbolized */
		char *f = strchr(line + 2, '\t'), name[1024] = "?";
		if (f) {
			f++;
			char *tab = strchr(f, '\t');
			if (tab)
				*tab = '\0';
			char *off = strstr(f, "+0x");
			for (char *o = off; o; o = strstr(o + 1, "+0x"))
				off = o;
			if (off)
				*off = '\0';
			if (*f && strcmp(f, "??") != 0)
				uw_name_norm(f, name, sizeof(name));
		}
		size_t kl = strlen(key);
		snprintf(key + kl, sizeof(key) - kl, "%s;", name);
		rooted = strcmp(name, "main") == 0;
	}
	return n;
}

/*
 * prog (tests/progs/nofp_stl.cc, built one of four ways) at rate 1 in mode, and oracle (prog
 * itself, or the same program built another way) under heaptrack, compared stack by stack
 * as function names from the allocating frame (inlined frames included) down to main: every
 * stack through the program's stl_level3 must have the same count on both sides (all are
 * the program's sites; at rate 1 nothing is left to chance), and 99% of all allocations
 * that reach main must agree.
 */
static void uw_compare_heaptrack_names_env(const char *env, const char *prog,
					   const char *oracle, const char *mode)
{
	enum { ROUNDS = 40, MAXKEYS = 512 };
	char *dir = e2e_tmpdir(), *out = NULL, *ours_text = NULL;
	char cmd[4200], oracle_cmd[4200];
	snprintf(cmd, sizeof(cmd), E2E_PROGS "/%s %d", prog, ROUNDS);
	snprintf(oracle_cmd, sizeof(oracle_cmd), E2E_PROGS "/%s %d", oracle, ROUNDS);
	struct uw_prof p;
	uw_run_env(&p, dir, env, mode, cmd);
	cr_expect_eq(p.truncated, 0, "%s %s: %llu stacks truncated", prog, mode, p.truncated);
	uw_free(&p);
	int rc = e2e_sh(&ours_text, "c++filt < %s/prof.heap", dir);
	cr_assert_eq(rc, 0, "c++filt: %.2000s", ours_text);
	rc = e2e_sh(&out, "cd %s && %s heaptrack -o %s/ht %s >/dev/null 2>&1 && "
		    "heaptrack_print %s/ht.zst --print-allocators 1 --print-peaks 0 "
		    "--print-leaks 0 --print-temporary 0 --print-histogram 0 -m 0 -n 100000",
		    dir, env, dir, oracle_cmd, dir);
	cr_assert_eq(rc, 0, "heaptrack failed (%d):\n%.2000s", rc, out);
	static struct uw_key ours[MAXKEYS], theirs[MAXKEYS];
	int no = uw_names_ours(ours_text, ours, MAXKEYS);
	int nt = uw_keys_heaptrack(out, theirs, MAXKEYS, true);
	long to, tt;
	double agree = uw_agreement(ours, no, theirs, nt, &to, &tt);
	fprintf(stderr, "heaptrack (%s) vs llgo-heap (%s, %s) by name: %.2f%% of allocations "
			"agree (%ld ours, %ld heaptrack's)\n", oracle, prog, mode, 100 * agree, to, tt);
	/* the program's sites: every stack through stl_level3, on either side */
	int sites = 0;
	bool bad = agree < 0.99;
	for (int pass = 0; pass < 2; pass++) {
		const struct uw_key *a = pass ? theirs : ours, *b = pass ? ours : theirs;
		int na = pass ? nt : no, nb = pass ? no : nt;
		for (int i = 0; i < na; i++) {
			if (!strstr(a[i].key, "stl_level3;"))
				continue;
			long other = 0;
			for (int j = 0; j < nb; j++)
				if (strcmp(a[i].key, b[j].key) == 0)
					other = b[j].count;
			sites += pass == 0;
			if (other != a[i].count) {
				bad = true;
				cr_expect_eq(other, a[i].count, "%s %s: %s has %ld allocations, %s %ld at %s",
					     prog, mode, pass ? "heaptrack" : "llgo-heap", a[i].count,
					     pass ? "llgo-heap" : "heaptrack", other, a[i].key);
			}
		}
	}
	/* vector (push_back, reserve), string (made, appended, a sum's two), the two locals, the
	 * map's nodes and the string keys: at least 9 distinct stacks */
	cr_expect_geq(sites, 9, "%s %s: only %d stacks through stl_level3", prog, mode, sites);
	cr_expect_geq(agree, 0.99, "%s %s: only %.2f%% of allocations have heaptrack's stack",
		      prog, mode, 100 * agree);
	if (bad) {
		for (int i = 0; i < no; i++)
			fprintf(stderr, "  ours %ld %s\n", ours[i].count, ours[i].key);
		for (int j = 0; j < nt; j++)
			fprintf(stderr, "  heaptrack %ld %s\n", theirs[j].count, theirs[j].key);
	}
	free(out);
	free(ours_text);
	e2e_rmdir(dir);
}

static void uw_compare_heaptrack_names(const char *prog, const char *oracle, const char *mode)
{
	uw_compare_heaptrack_names_env("", prog, oracle, mode);
}

/* -O2 without frame pointers (Debian's default): every sample copies its stack. */
Test(unwind, heaptrack_agrees_stl_by_name_auto, .timeout = 300)
{
	uw_compare_heaptrack_names("nofp_stl", "nofp_stl", "auto");
}

Test(unwind, heaptrack_agrees_stl_by_name_dwarf, .timeout = 300)
{
	uw_compare_heaptrack_names("nofp_stl", "nofp_stl", "dwarf");
}

/* The program keeps frame pointers, libstdc++ does not: auto mode trusts the walks that stay
 * in the program and copies those that start in libstdc++'s string code. */
Test(unwind, heaptrack_agrees_stl_fp_program_by_name, .timeout = 300)
{
	uw_compare_heaptrack_names("fp_stl", "fp_stl", "auto");
}

/* The program replaces operator new: libstdc++ and the program call it, it calls malloc.
 * Frame 0 is the caller of new (heaptrack's and Go's), not the operator, in either mode. */
Test(unwind, heaptrack_agrees_stl_replaced_new, .timeout = 300)
{
	uw_compare_heaptrack_names("nofp_stl_newrep", "nofp_stl_newrep", "auto");
	uw_compare_heaptrack_names("nofp_stl_newrep", "nofp_stl_newrep", "dwarf");
}

/* An operator new in a library preloaded after the shim (built without frame pointers): the
 * shim forwards every operator new to it and registers it as plumbing, which its own walk
 * trims; a stack the daemon unwinds from a copy is trimmed by the operator's name. */
Test(unwind, heaptrack_agrees_stl_forwarded_new, .timeout = 300)
{
	/* the preload reaches llgo-heap run first, which passes it on after the shim; an
	 * AddressSanitizer build of the CLI would refuse to start behind it */
	const char *env = "ASAN_OPTIONS=verify_asan_link_order=0 "
			  "LD_PRELOAD=" E2E_PROGS "/libnofp_stlnew.so";
	uw_compare_heaptrack_names_env(env, "nofp_stl", "nofp_stl", "auto");
	uw_compare_heaptrack_names_env(env, "nofp_stl", "nofp_stl", "dwarf");
}

/* The replacement inlined into the program's callers: the call into malloc is inside it, in
 * its caller's code. The operator is left out of that frame, which then reads as the program
 * without a replacement does under heaptrack (heaptrack drops the whole frame, caller and
 * all, so it cannot be the oracle of this build itself). */
Test(unwind, heaptrack_agrees_stl_replaced_new_inlined, .timeout = 300)
{
	uw_compare_heaptrack_names("nofp_stl_newinl", "nofp_stl", "auto");
}

/* ---- programs as Debian ships them ------------------------------------------------------- */

/* Share of sampled allocations whose stack reaches __libc_start_call_main or start_thread. */
static double uw_rooted(const struct uw_prof *p, long *total)
{
	long rooted = 0;
	*total = 0;
	for (int i = 0; i < p->n; i++) {
		const struct uw_rec *r = &p->r[i];
		*total += r->count;
		for (int k = 0; k < r->nframes; k++) {
			if (strcmp(r->f[k].func, "__libc_start_call_main") == 0 ||
			    strcmp(r->f[k].func, "start_thread") == 0) {
				rooted += r->count;
				break;
			}
		}
	}
	return *total ? (double)rooted / (double)*total : 0;
}

/* dir/script, the input of the programs below */
static void uw_write_script(const char *dir, const char *script)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/script", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(script, f);
	fclose(f);
}

static void uw_check_debian(const char *what, const char *prog, const char *script, double want)
{
	char *dir = e2e_tmpdir(), *out = NULL;
	char path[4200];
	uw_write_script(dir, script);
	/* LLGO_HEAP_FULL=wait: what is measured is how far stacks unwind, not how a burst
	 * degrades them when the daemon falls behind on a loaded machine */
	int rc = e2e_sh(&out, "cd %s && LLGO_HEAP_FULL=wait " RUN " --unwind auto -r 16384 -f text "
			"-o prof.heap -- %s < script", dir, prog);
	cr_assert_eq(rc, 0, "%s failed (%d):\n%.3000s", prog, rc, out);
	free(out);
	snprintf(path, sizeof(path), "%s/prof.heap", dir);
	char *text = e2e_read_file(path);
	cr_assert(text);
	struct uw_prof p;
	uw_parse(text, &p);
	free(text);
	long total;
	double share = uw_rooted(&p, &total);
	fprintf(stderr, "%s (--unwind auto): %.1f%% of %ld sampled allocations reach the thread's "
			"start; %llu stacks unwound, %llu truncated, %llu of %llu samples dropped\n",
		what, 100 * share, total, p.unwound, p.truncated, p.dropped, p.sampled);
	cr_expect_gt(total, 100, "%s: only %ld samples", what, total);
	cr_expect_geq(share, want, "%s: %.1f%% of stacks reach the thread's start", what,
		      100 * share);
	cr_expect_eq(p.sampled, p.delivered + p.dropped + p.corrupt);
	uw_free(&p);
	e2e_rmdir(dir);
}

static const char uw_sqlite_script[] =
	"create table t(a integer primary key, b text, c real);\n"
	"with recursive n(x) as (select 1 union all select x + 1 from n where x < 20000)\n"
	"  insert into t select x, printf('row %d %s', x, hex(randomblob(20))), x * 1.5 from n;\n"
	"create index ib on t(b);\n"
	"select count(*), sum(length(b)) from t where b like 'row 1%';\n"
	"select b from t order by c desc limit 3;\n";

static const char uw_python_script[] =
	"import json, re, threading\n"
	"def work(k):\n"
	"    for i in range(200):\n"
	"        d = {str(j): [j] * 10 for j in range(50)}\n"
	"        s = json.dumps(d)\n"
	"        json.loads(s)\n"
	"        re.compile('a+b%d_%d' % (k, i))\n"
	"t = threading.Thread(target=work, args=(1,))\n"
	"t.start()\n"
	"work(0)\n"
	"t.join()\n";

Test(unwind, debian_sqlite3_reaches_start, .timeout = 300)
{
	uw_check_debian("sqlite3", "/usr/bin/sqlite3 :memory:", uw_sqlite_script, 0.95);
}

Test(unwind, debian_python3_reaches_start, .timeout = 300)
{
	uw_check_debian("python3", "/usr/bin/python3 -", uw_python_script, 0.95);
}

/* ---- the fast path against libunwind (issue 21) ------------------------------------------ */

/* Sums of a check-mode daemon's per-process lines (unwind.c's unwind_free). */
struct uw_fast_counts {
	unsigned long stacks, fast, checked, differ, slow;
	int procs;
	unsigned long logged_differ; /* "differs from libunwind" lines */
};

/*
 * Run cmd (a shell command line, in a folder of its own holding `script`, its input when
 * not NULL) under the shim in unwinding mode `mode` at `rate`, against a private daemon with
 * LLGO_HEAP_UNWIND_FAST=check: every stack copy is unwound by unwind_fast.c's walk and by
 * libunwind alone and the two compared, frame by frame (pcs, truncation, unknown pc); the
 * daemon logs the counts of each process when it stops. None may differ; at least
 * min_stacks stacks, min_share of them by the fast path.
 */
static void uw_fast_check(struct uw_fast_counts *k, const char *mode, long rate, const char *cmd,
			  const char *script, unsigned long min_stacks, double min_share)
{
	memset(k, 0, sizeof(*k));
	char *dir = e2e_tmpdir(), *out = NULL;
	if (script)
		uw_write_script(dir, script);
	struct heapd d;
	heapd_init(&d, NULL);
	static const char *const wrap[] = { "/usr/bin/env", "LLGO_HEAP_UNWIND_FAST=check", NULL };
	d.wrap = wrap;
	heapd_run(&d, NULL);
	/* LLGO_HEAP_FULL=wait: every sample reaches the daemon, whatever the machine's load */
	int rc = e2e_sh(&out, "cd %s && LD_PRELOAD=" LLGO_PLAIN_SHIM " LLGO_HEAP_SOCKET=%s "
			"LLGO_HEAP_UNWIND=%s LLGO_HEAP_RATE=%ld LLGO_HEAP_FULL=wait %s%s",
			dir, d.sock, mode, rate, cmd, script ? " < script" : "");
	cr_assert_eq(rc, 0, "%s failed (%d):\n%.3000s", cmd, rc, out);
	free(out);
	heapd_stop_clean(&d);
	char *log = heapd_log(&d);
	for (const char *l = log; (l = strstr(l, "unwind: pid ")) != NULL; l++) {
		unsigned long s, f, c, x, b;
		if (sscanf(l, "unwind: pid %*d: %lu stacks, %lu by the fast path (%lu checked against "
			      "libunwind, %lu differ), %lu left to libunwind", &s, &f, &c, &x, &b) != 5)
			continue;
		k->procs++;
		k->stacks += s;
		k->fast += f;
		k->checked += c;
		k->differ += x;
		k->slow += b;
	}
	for (const char *l = log; (l = strstr(l, "differs from libunwind")) != NULL; l++)
		k->logged_differ++;
	fprintf(stderr, "fast path vs libunwind (%s, --unwind %s, rate %ld): %d processes, %lu "
			"stacks, %lu by the fast path, %lu differ, %lu left to libunwind\n",
		cmd, mode, rate, k->procs, k->stacks, k->fast, k->differ, k->slow);
	cr_expect_eq(k->differ, 0, "the fast path and libunwind differ on %lu of %lu stacks:\n%.6000s",
		     k->differ, k->checked, log);
	cr_expect_eq(k->logged_differ, 0, "%.6000s", log);
	cr_expect_eq(k->checked, k->fast, "check mode compared %lu of %lu fast stacks", k->checked,
		     k->fast);
	cr_expect_eq(k->fast + k->slow, k->stacks);
	cr_expect_geq(k->stacks, min_stacks, "%s: only %lu stacks", cmd, k->stacks);
	cr_expect_geq((double)k->fast, min_share * (double)k->stacks,
		      "%s: %lu of %lu stacks by the fast path", cmd, k->fast, k->stacks);
	free(log);
	heapd_cleanup(&d);
	e2e_rmdir(dir);
}

/* -O2 C without frame pointers: plain and inlined chains, recursion, a thread, a dlopen'ed
 * library, stdio's buffer in libc, and signal handlers (on the thread's stack and on a
 * sigaltstack), whose trampolines the fast path leaves to libunwind. */
Test(unwind, fast_path_matches_libunwind_c, .timeout = 300)
{
	struct uw_fast_counts k;
	/* the five chains without a signal frame (20 each) and stdio's buffer by the fast
	 * path; the two signal handlers' stacks (20 each) by libunwind: the trampoline's CFI
	 * is expressions (and a few of the program's start, which vary) */
	uw_fast_check(&k, "dwarf", 1, E2E_PROGS "/nofp_chains 20 " E2E_PROGS "/libnofp_dl.so",
		      NULL, 140, 0.6);
	cr_expect_geq(k.slow, 40, "%lu stacks left to libunwind", k.slow);
}

/* -O2 C++ without frame pointers: allocations through Debian's libstdc++ (std::string,
 * std::vector, std::map, std::make_shared, a thrown exception, a landing pad). */
Test(unwind, fast_path_matches_libunwind_cxx, .timeout = 300)
{
	struct uw_fast_counts k;
	uw_fast_check(&k, "dwarf", 1, E2E_PROGS "/nofp_cxx 50", NULL, 300, 0.9);
}

/* Debian's own -O2 binaries: python3 (libpython in the executable, libc, libm, extension
 * modules, two threads) in both copying modes, and sqlite3 (libsqlite3, libreadline). */
Test(unwind, fast_path_matches_libunwind_debian_python3, .timeout = 300)
{
	struct uw_fast_counts k;
	uw_fast_check(&k, "dwarf", 64, "/usr/bin/python3 -", uw_python_script, 2000, 0.9);
	uw_fast_check(&k, "auto", 64, "/usr/bin/python3 -", uw_python_script, 500, 0.9);
}

Test(unwind, fast_path_matches_libunwind_debian_sqlite3, .timeout = 300)
{
	struct uw_fast_counts k;
	uw_fast_check(&k, "dwarf", 256, "/usr/bin/sqlite3 :memory:", uw_sqlite_script, 2000, 0.9);
}
