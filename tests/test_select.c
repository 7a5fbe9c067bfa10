// SPDX-License-Identifier: MIT
/*
 * test_select.c: selection and zero-cost proofs for programs and allocators that link the
 * hook (include/llgo_heap.h), as the original proposal asks: symbol tables (nm, readelf) and
 * disassembly (objdump) of the builds in build/select/ (Makefile section "selection and
 * zero-cost proofs"):
 *   - without LLGO_HEAP_PROFILING (plain and GCC -flto) the program has no llgo_heap symbol,
 *     no reference in its code, no NEEDED entry, and the hook is no instruction at all;
 *   - with it (libllgoheap.a, libllgoheap.so through pkg-config, -flto), the hook's listing is
 *     walked instruction by instruction for each case (rate 0, a positive rate with no sample
 *     due, a sample due, rate 1): the documented sequence, and no call but the slow path;
 *   - in the LTO build the hook is inlined into the allocator, once;
 *   - those builds sample exactly at rate 1 under a private daemon;
 *   - a plugin carrying its own copy of the sampler, loaded into a preloaded program, leaves
 *     one sampler and one session for the process, and every allocation counted once.
 * The walk understands x86-64 listings only; elsewhere those tests are skipped.
 */
#include "helpers.h"

#define SEL LLGO_BUILD_DIR "/select"

/* ---- a listing and a walk through it ---------------------------------------------------- */

struct sel_insn {
	unsigned long addr;
	char op[16];
	char args[200]; /* operands and objdump's "# addr <sym>" comment */
};

/* The instructions of function fn in bin, from objdump. */
static int sel_listing(const char *bin, const char *fn, struct sel_insn *ins, int max)
{
	char *out = NULL;
	int rc = th_sh(&out, "objdump -d --no-show-raw-insn --disassemble=%s %s", fn, bin);
	cr_assert_eq(rc, 0, "objdump %s: %s", bin, out);
	int n = 0;
	for (char *l = strtok(out, "\n"); l && n < max; l = strtok(NULL, "\n")) {
		unsigned long a;
		char op[16] = "", args[200] = "";
		if (sscanf(l, " %lx:\t%15s %199[^\n]", &a, op, args) < 2 || l[0] != ' ')
			continue;
		ins[n].addr = a;
		snprintf(ins[n].op, sizeof(ins[n].op), "%s", op);
		snprintf(ins[n].args, sizeof(ins[n].args), "%s", args);
		n++;
	}
	free(out);
	cr_assert_gt(n, 0, "%s has no %s", bin, fn);
	return n;
}

enum sel_val { SEL_ZERO, SEL_POS, SEL_NEG };

struct sel_path {
	int count;      /* instructions executed, the last one included */
	int loads;      /* mov from memory (not %fs) before the first conditional branch */
	int fs_subs;    /* sub into %fs: memory (the countdown) */
	int fs_other;   /* any other %fs: access */
	int calls;      /* call instructions */
	char exit[240]; /* "ret" or the target of the jump/call that leaves the function */
	char trace[2048];
};

/* Does jcc jump, given the sign class of the last tested or computed value? */
static bool sel_taken(const char *op, enum sel_val v)
{
	bool zf = v == SEL_ZERO, sf = v == SEL_NEG;
	if (!strcmp(op, "je") || !strcmp(op, "jz"))
		return zf;
	if (!strcmp(op, "jne") || !strcmp(op, "jnz"))
		return !zf;
	if (!strcmp(op, "jle") || !strcmp(op, "jng"))
		return zf || sf;
	if (!strcmp(op, "jg") || !strcmp(op, "jnle"))
		return !zf && !sf;
	if (!strcmp(op, "js") || !strcmp(op, "jl"))
		return sf;
	if (!strcmp(op, "jns") || !strcmp(op, "jge"))
		return !sf;
	cr_assert_fail("conditional jump %s not modelled", op);
	return false;
}

/* Execute the listing from instruction start: `test`/`cmp` sees the rate word as rate,
 * the countdown `sub` leaves a value of class left. */
static struct sel_path sel_walk(const struct sel_insn *ins, int n, int start, enum sel_val rate,
				enum sel_val left)
{
	struct sel_path p;
	memset(&p, 0, sizeof(p));
	enum sel_val flags = SEL_POS;
	bool branched = false;
	int i = start;
	while (i < n && p.count < 100) {
		const struct sel_insn *x = &ins[i];
		p.count++;
		size_t tl = strlen(p.trace);
		snprintf(p.trace + tl, sizeof(p.trace) - tl, "  %s %s\n", x->op, x->args);
		bool fs = strstr(x->args, "%fs:") != NULL;
		if (!strcmp(x->op, "ret")) {
			snprintf(p.exit, sizeof(p.exit), "ret");
			return p;
		}
		if (!strncmp(x->op, "sub", 3) && fs) {
			p.fs_subs++;
			flags = left;
		} else if (fs) {
			p.fs_other++;
		} else if (!strncmp(x->op, "test", 4) || !strncmp(x->op, "cmp", 3)) {
			flags = rate;
		} else if (!branched && !strncmp(x->op, "mov", 3) && strchr(x->args, '(') &&
			   strchr(x->args, '(') < strchr(x->args, ',')) {
			p.loads++;
		}
		if (!strcmp(x->op, "call")) {
			p.calls++;
			snprintf(p.exit, sizeof(p.exit), "call %s", x->args);
			return p;
		}
		if (x->op[0] == 'j') {
			bool uncond = !strcmp(x->op, "jmp");
			branched |= !uncond;
			if (uncond || sel_taken(x->op, flags)) {
				unsigned long to = strtoul(x->args, NULL, 16);
				int k = 0;
				while (k < n && ins[k].addr != to)
					k++;
				if (k == n) { /* leaves the function */
					snprintf(p.exit, sizeof(p.exit), "jmp %s", x->args);
					return p;
				}
				i = k;
				continue;
			}
		}
		i++;
	}
	snprintf(p.exit, sizeof(p.exit), "fell off the listing");
	return p;
}

static void sel_need_x86_64(void)
{
#if !defined(__x86_64__)
	cr_skip_test("the listing walk models x86-64 only");
#endif
}

/* ---- without LLGO_HEAP_PROFILING: nothing ------------------------------------------------ */

static void sel_expect_nothing(const char *bin)
{
	char *out = NULL;
	int rc = th_sh(&out, "nm -a %s | grep -ci llgo; objdump -d %s | grep -ci llgo_heap; "
			"readelf -d %s | grep NEEDED | grep -ci llgo", bin, bin, bin);
	cr_assert_eq(rc, 1, "grep found something (status %d)", rc);
	cr_expect_str_eq(out, "0\n0\n0\n", "%s: symbols / code references / NEEDED entries "
			 "naming llgo:\n%s", bin, out);
	free(out);
	struct sel_insn ins[64];
	int n = sel_listing(bin, "sel_hook_only", ins, 64);
	for (enum sel_val r = SEL_ZERO; r <= SEL_NEG; r++) {
		struct sel_path p = sel_walk(ins, n, 0, r, SEL_POS);
		cr_expect(p.count == 1 && !strcmp(p.exit, "ret"), "%s: the compiled-out hook is "
			  "%d instructions:\n%s", bin, p.count, p.trace);
	}
	rc = th_sh(&out, "%s 10", bin);
	cr_expect(rc == 0 && strstr(out, "done"), "%s: %s", bin, out);
	free(out);
}

Test(select, no_profiling_no_reference)
{
	sel_need_x86_64();
	sel_expect_nothing(SEL "/sel-plain");
}

Test(select, no_profiling_no_reference_lto)
{
	sel_need_x86_64();
	sel_expect_nothing(SEL "/sel-plain-lto");
}

/* ---- with LLGO_HEAP_PROFILING: the documented sequence ----------------------------------- */

/*
 * The sequence include/llgo_heap.h documents, per case:
 *   rate 0:             load the rate pointer (or lea its address, then load), load the
 *                       word, test, branch, ret: 5 or 6 instructions, 2 or 3 loads, no call;
 *   rate > 0, not due:  + the other branch, the TLS offset load, one sub on %fs: memory and
 *                       its branch: at most 10 instructions, no call;
 *   rate > 0, due:      leaves by a jump (tail call) or call to llgo_heap_sample_slow;
 *   rate 1 (word < 0):  straight to llgo_heap_sample_slow, no %fs: access.
 */
static void sel_expect_hook(const char *bin, const char *fn, bool whole)
{
	struct sel_insn ins[256];
	int n = sel_listing(bin, fn, ins, 256);
	/* the hook starts where the rate pointer is read (the function's entry when whole) */
	int h = 0;
	while (h < n && !strstr(ins[h].args, "<llgo_heap_rate_word"))
		h++;
	cr_assert_lt(h, n, "%s: %s never reads llgo_heap_rate_word", bin, fn);
	if (whole)
		cr_expect_eq(h, 0, "%s: %s does not start with the hook", bin, fn);
	struct sel_path z = sel_walk(ins, n, h, SEL_ZERO, SEL_POS);
	struct sel_path a = sel_walk(ins, n, h, SEL_POS, SEL_POS);
	struct sel_path d = sel_walk(ins, n, h, SEL_POS, SEL_ZERO);
	struct sel_path e = sel_walk(ins, n, h, SEL_NEG, SEL_POS);
	cr_log_info("%s %s: rate 0: %d instructions (%d loads); rate > 0: %d instructions; "
		    "listing at rate 0:\n%s", bin, fn, z.count, z.loads, a.count, z.trace);
	/* inside an allocator the paths end with its own epilogue: count only when whole */
	cr_expect(!strcmp(z.exit, "ret") && z.calls == 0 && z.fs_subs == 0 && z.fs_other == 0 &&
			  z.loads >= 2 && z.loads <= 3 && (!whole || z.count <= 6),
		  "%s rate 0 path (%d instructions, %d loads, exit %s):\n%s", bin, z.count,
		  z.loads, z.exit, z.trace);
	cr_expect(!strcmp(a.exit, "ret") && a.calls == 0 && a.fs_subs == 1 && a.fs_other == 0 &&
			  (!whole || a.count <= 10),
		  "%s positive rate, no sample (%d instructions, exit %s):\n%s", bin, a.count,
		  a.exit, a.trace);
	cr_expect(strstr(d.exit, "<llgo_heap_sample_slow") && d.fs_subs == 1,
		  "%s sample due: exit %s:\n%s", bin, d.exit, d.trace);
	cr_expect(strstr(e.exit, "<llgo_heap_sample_slow") && e.fs_subs == 0 && e.fs_other == 0,
		  "%s rate 1: exit %s:\n%s", bin, e.exit, e.trace);
	/* nothing else of the library is called or read */
	for (int i = 0; i < n; i++) {
		const char *s = strstr(ins[i].args, "<llgo_heap_");
		if (s)
			cr_expect(!strncmp(s, "<llgo_heap_rate_word", 20) ||
					  !strncmp(s, "<llgo_heap_tls", 14) ||
					  !strncmp(s, "<llgo_heap_sample_slow", 22),
				  "%s: unexpected reference %s %s", bin, ins[i].op, ins[i].args);
	}
}

Test(select, hook_sequence_static_archive)
{
	sel_need_x86_64();
	sel_expect_hook(SEL "/sel-archive", "sel_hook_only", true);
}

Test(select, hook_sequence_shared_library)
{
	sel_need_x86_64();
	sel_expect_hook(SEL "/sel-shared", "sel_hook_only", true);
	char *out = NULL;
	th_sh(&out, "readelf -d " SEL "/sel-shared | grep -c 'NEEDED.*libllgoheap.so'");
	cr_expect_str_eq(out, "1\n", "sel-shared links libllgoheap.so: %s", out);
	free(out);
}

Test(select, hook_sequence_lto)
{
	sel_need_x86_64();
	sel_expect_hook(SEL "/sel-lto", "sel_hook_only", true);
}

/* In the LTO build the hook is inlined into the allocator, once: one read of the rate
 * pointer, one countdown update, the slow path as the only call into the library. */
Test(select, lto_allocator_inlines_the_hook_once)
{
	sel_need_x86_64();
	/* LTO specializes the allocator for its one caller (myalloc_alloc.constprop.0) */
	char *fn = NULL;
	th_sh(&fn, "nm " SEL "/sel-lto | awk '$3 ~ /^myalloc_alloc/ {print $3; exit}'");
	fn[strcspn(fn, "\n")] = '\0';
	cr_assert(fn[0], "no myalloc_alloc in sel-lto");
	cr_log_info("the allocator in the LTO build: %s", fn);
	struct sel_insn ins[512];
	int n = sel_listing(SEL "/sel-lto", fn, ins, 512);
	int rate_refs = 0, fs = 0, slow = 0;
	for (int i = 0; i < n; i++) {
		rate_refs += strstr(ins[i].args, "<llgo_heap_rate_word") != NULL;
		fs += strstr(ins[i].args, "%fs:") != NULL;
		slow += strstr(ins[i].args, "<llgo_heap_sample_slow") != NULL;
		if (!strcmp(ins[i].op, "call") && strstr(ins[i].args, "<llgo_"))
			cr_expect(strstr(ins[i].args, "<llgo_heap_sample_slow") != NULL, "call %s",
				  ins[i].args);
	}
	cr_expect_eq(rate_refs, 1, "rate word read %d times", rate_refs);
	cr_expect_eq(fs, 1, "%d TLS accesses", fs);
	cr_expect_geq(slow, 1, "no path to the slow path");
	sel_expect_hook(SEL "/sel-lto", fn, false);
	free(fn);
}

/* Position-independent code (the plugin, libsel_pool.so) reads the rate pointer through its
 * GOT entry: three loads at rate 0, the documented PIC case. */
Test(select, hook_sequence_pic_plugin)
{
	sel_need_x86_64();
	sel_expect_hook(SEL "/libsel_pool.so", "pool_alloc", false);
	struct sel_insn ins[256];
	int n = sel_listing(SEL "/libsel_pool.so", "pool_alloc", ins, 256), h = 0;
	while (h < n && !strstr(ins[h].args, "<llgo_heap_rate_word"))
		h++;
	struct sel_path z = sel_walk(ins, n, h, SEL_ZERO, SEL_POS);
	cr_expect_eq(z.loads, 3, "PIC rate-0 path:\n%s", z.trace);
}

/* ---- the builds work: exact counts at rate 1 --------------------------------------------- */

struct sel_run {
	char *out;     /* the program's output */
	char *profile; /* text snapshot of its session */
	char *list;    /* llgo-heap list */
	int pid;
};

/* Run cmd (a shell command line) with a private daemon at rate 1; then snapshot. */
static void sel_profile(struct sel_run *r, const char *cmd)
{
	char *dir = th_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	const char *sock = d.sock;
	int rc = th_sh(&r->out, "cd %s && LLGO_HEAP_SOCKET=%s LLGO_HEAP_RATE=1 LLGO_HEAP_DEBUG=1 "
			"%s", dir, sock, cmd);
	cr_assert_eq(rc, 0, "%s:\n%s", cmd, r->out);
	const char *p = strstr(r->out, "pid ");
	cr_assert(p && sscanf(p, "pid %d", &r->pid) == 1, "%s", r->out);
	rc = th_sh(&r->profile, TH_BIN "/llgo-heap snapshot %d -f text -o - --socket %s",
		    r->pid, sock);
	cr_assert_eq(rc, 0, "snapshot: %s", r->profile);
	rc = th_sh(&r->list, TH_BIN "/llgo-heap list --socket %s", sock);
	cr_assert_eq(rc, 0, "list: %s", r->list);
	heapd_stop(&d);
	th_rmdir(dir);
}

static void sel_run_free(struct sel_run *r)
{
	free(r->out);
	free(r->profile);
	free(r->list);
}

static void sel_expect_exact(const char *bin)
{
	struct sel_run r;
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "%s 700", bin);
	sel_profile(&r, cmd);
	cr_expect(strstr(r.out, "trim 2") != NULL, "trim_add found the allocator: %s", r.out);
	static struct th_text_rec recs[1024];
	long period;
	int n = th_parse_text(r.profile, &period, recs, 1024);
	cr_expect_eq(period, 2);
	cr_expect_eq(th_recs_count(recs, n, "sel_site", 48), 700, "%s:\n%s", bin, r.profile);
	cr_expect_eq(th_recs_count(recs, n, "myalloc_alloc", 0), 0, "plumbing not trimmed:\n%s",
		     r.profile);
	sel_run_free(&r);
}

Test(select, archive_build_samples_exactly, .timeout = 120)
{
	sel_expect_exact(SEL "/sel-archive");
}

Test(select, shared_build_samples_exactly, .timeout = 120)
{
	sel_expect_exact(SEL "/sel-shared");
}

Test(select, lto_build_samples_exactly, .timeout = 120)
{
	sel_expect_exact(SEL "/sel-lto");
}

/* The run's pid has one session in LIST; its profile's records in recs (max), how many. */
static int sel_one_session(const struct sel_run *r, struct th_text_rec *recs, int max)
{
	char pidstr[32];
	snprintf(pidstr, sizeof(pidstr), "\n%d ", r->pid);
	const char *s = strstr(r->list, pidstr);
	cr_assert(s, "no session for %d:\n%s", r->pid, r->list);
	cr_expect(strstr(s + 1, pidstr) == NULL, "two sessions for %d:\n%s", r->pid, r->list);
	long period;
	return th_parse_text(r->profile, &period, recs, max);
}

/* ---- one sampler per process ------------------------------------------------------------- */

/* A plugin that linked libllgoheap.a is dlopen'ed by a program running under the preloaded
 * shim: the plugin's copy stays idle (owner.c), the plugin's hook is served by the preloaded
 * copy, and the process has one session in which each allocation is counted once. */
Test(select, plugin_copy_defers_to_the_preloaded_sampler, .timeout = 120)
{
	struct sel_run r;
	sel_profile(&r, "LD_PRELOAD=" LLGO_PLAIN_SHIM " " SEL "/sel-dlopen " SEL
		    "/libsel_pool.so 600");
	cr_expect(strstr(r.out, "not attached: another copy of the sampler is active") != NULL,
		  "the plugin's copy did not stand down:\n%s", r.out);
	cr_expect(strstr(r.out, "pool_rate 1") != NULL, "the plugin sees the process's rate:\n%s",
		  r.out);
	/* one session for the pid, and its accounting adds up */
	static struct th_text_rec recs[1024];
	int n = sel_one_session(&r, recs, 1024);
	/* frame 0 is the plugin's allocator (not trimmed here), named by its inlined hook */
	long pool = th_recs_count(recs, n, "pool_alloc", 96) +
		    th_recs_count(recs, n, "llgo_heap_alloc_hook", 96);
	cr_expect_eq(pool, 600, "plugin allocations:\n%s", r.profile);
	cr_expect_eq(th_recs_count(recs, n, "malloc_site", 200), 600, "malloc allocations:\n%s",
		     r.profile);
	unsigned long long sa, de, dr, co;
	const char *acc = strstr(r.profile, "# llgo-heap: sampled=");
	cr_assert(acc && sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu "
				"corrupt=%llu", &sa, &de, &dr, &co) == 4, "%s", r.profile);
	cr_expect(sa == de + dr + co && dr == 0 && co == 0, "%.100s", acc);
	sel_run_free(&r);
}

/* A program that linked libllgoheap.a into itself (not exporting the API) runs under the
 * preloaded shim: the preloaded copy is the sampler, the program's copy forwards its hooked
 * allocations to it (owner.c), and the one session holds them, trimmed, besides malloc's. */
Test(select, program_copy_forwards_to_the_preloaded_sampler, .timeout = 120)
{
	struct sel_run r;
	sel_profile(&r, "LD_PRELOAD=" LLGO_PLAIN_SHIM " " SEL "/sel-archive 700");
	cr_expect(strstr(r.out, "not attached: another copy of the sampler is active") != NULL,
		  "the program's copy did not stand down:\n%s", r.out);
	cr_expect(strstr(r.out, "trim 2") != NULL, "trim_add reached the sampler:\n%s", r.out);
	static struct th_text_rec recs[1024];
	int n = sel_one_session(&r, recs, 1024);
	cr_expect_eq(th_recs_count(recs, n, "sel_site", 48), 700, "%s", r.profile);
	cr_expect_eq(th_recs_count(recs, n, "myalloc_alloc", 0), 0, "not trimmed:\n%s", r.profile);
	sel_run_free(&r);
}
