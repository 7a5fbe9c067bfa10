// SPDX-License-Identifier: MIT
/*
 * test_unwind_heaptrack.c: our whole stacks against heaptrack's (which unwinds with DWARF in
 * process) on the same programs: allocation sites by file and line, and function by function
 * for libstdc++'s containers (with operator new replaced, forwarded or inlined).
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
		snprintf(key + len, cap - len, "%s:%d;", th_basename(file), line);
	else
		snprintf(key + len, cap - len, "?;");
}

/* Our stacks, cut after main (heaptrack stops there); only those through main or a thread's
 * start function (heaptrack also sees what runs before our shim attaches). */
static int uw_keys_ours(const struct th_prof *p, struct uw_key *keys, int max)
{
	int n = 0;
	for (int i = 0; i < p->n; i++) {
		const struct th_prof_rec *r = &p->r[i];
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
		size_t len = th_line_copy(l, line, sizeof(line));
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
	char *dir = th_tmpdir(), *out = NULL;
	struct th_prof p;
	th_prof_run(&p, dir, "auto", cmd);
	int rc = th_sh(&out, "cd %s && heaptrack -o %s/ht %s >/dev/null 2>&1 && "
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
	th_prof_free(&p);
	th_rmdir(dir);
}

Test(unwind, heaptrack_agrees_c, .timeout = 300)
{
	uw_compare_heaptrack(TH_PROGS "/nofp_chains 50 " TH_PROGS "/libnofp_dl.so nosignal");
}

Test(unwind, heaptrack_agrees_cxx, .timeout = 300)
{
	uw_compare_heaptrack(TH_PROGS "/nofp_cxx 50");
}

Test(unwind, heaptrack_agrees_fp_program, .timeout = 300)
{
	uw_compare_heaptrack(TH_PROGS "/unwind_fp 50 " TH_PROGS_SRC "/unwind_fp.c");
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
		size_t len = th_line_copy(l, line, sizeof(line));
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
	char *dir = th_tmpdir(), *out = NULL, *ours_text = NULL;
	char cmd[4200], oracle_cmd[4200];
	snprintf(cmd, sizeof(cmd), TH_PROGS "/%s %d", prog, ROUNDS);
	snprintf(oracle_cmd, sizeof(oracle_cmd), TH_PROGS "/%s %d", oracle, ROUNDS);
	struct th_prof p;
	th_prof_run_env(&p, dir, env, mode, cmd);
	cr_expect_eq(p.truncated, 0, "%s %s: %llu stacks truncated", prog, mode, p.truncated);
	th_prof_free(&p);
	int rc = th_sh(&ours_text, "c++filt < %s/prof.heap", dir);
	cr_assert_eq(rc, 0, "c++filt: %.2000s", ours_text);
	rc = th_sh(&out, "cd %s && %s heaptrack -o %s/ht %s >/dev/null 2>&1 && "
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
	th_rmdir(dir);
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
			  "LD_PRELOAD=" TH_PROGS "/libnofp_stlnew.so";
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
