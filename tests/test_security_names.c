// SPDX-License-Identifier: MIT
/*
 * test_security_names.c: llgo-heapd on a shared host, attacked through what a profile shows:
 * hostile symbol names (escaped in every text output), a copy of a program with the same
 * build ID run by nobody first (its names and its CFI are not what root's profile of the
 * real program is made of), and hostile values in records and counters (never negative,
 * never wrapping the accounting). Against the real daemon binary; LLGO_TEST_HEAPD=path runs
 * them against another build.
 */
#include "../agent/internal.h"
#include "helpers.h"

static bool has_raw_control(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
			return true;
	return false;
}

/* A symbol holding a newline, a forged sample line and ESC sequences: every text output
 * shows it escaped, and the legacy text gains no sample. */
Test(names, hostile_symbol_is_escaped, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char prog[160];
	snprintf(prog, sizeof(prog), "%s/evil_sites", d.dir);
	cr_assert_eq(th_sh(NULL, "objcopy --redefine-sym \"site_calloc=$(printf 'evil\\033[2J\\n77: "
			   "7777777 [77: 7777777] @ 0x1\\n#')\" %s/e2e_sites %s", TH_PROGS, prog),
		     0, "objcopy");
	pid_t pid = th_run_profiled(&d, 0, prog, "3000");
	char *text = heapd_snapshot(d.sock, pid, LLGO_FORMAT_TEXT, NULL);
	cr_expect(!has_raw_control(text), "raw control characters in the text:\n%s", text);
	cr_expect(strstr(text, "\n77: 7777777") == NULL, "a forged sample line:\n%s", text);
	cr_expect(strstr(text, "evil\\x1b[2J\\x0a77: 7777777") != NULL, "not escaped:\n%s", text);
	free(text);
	char *folded = heapd_snapshot(d.sock, pid, LLGO_FORMAT_FOLDED, NULL);
	cr_expect(!has_raw_control(folded), "raw control characters in folded:\n%s", folded);
	cr_expect(strstr(folded, "evil\\x1b[2J") != NULL, "folded:\n%s", folded);
	free(folded);
	char *top = heapd_snapshot(d.sock, pid, LLGO_FORMAT_TOP, NULL);
	cr_expect(!has_raw_control(top), "raw control characters in top:\n%s", top);
	free(top);
	heapd_finish(&d);
}

/* As root, in a daemon of its own: PROGS/src copied to DIR/real_NAME and, by the shell
 * command `doctor` (printf arguments: real, fake), to DIR/fake_NAME with the same build ID
 * (and, with `differ`, other bytes). nobody runs the fake one first, then root the real one,
 * each with argument arg; their legacy-text profiles in *theirs and *mine. */
static void nm_copy_first(const char *src, const char *name, const char *doctor, bool differ,
			  const char *arg, char **theirs, char **mine)
{
	th_need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char fake[160], real[160], cmd[1024];
	snprintf(fake, sizeof(fake), "%s/fake_%s", d.dir, name);
	snprintf(real, sizeof(real), "%s/real_%s", d.dir, name);
	snprintf(cmd, sizeof(cmd), doctor, real, fake);
	cr_assert_eq(th_sh(NULL, "cp %s/%s %s && %s && chmod 755 %s %s", TH_PROGS, src, real, cmd,
			   real, fake), 0, "%s", cmd);
	char differs[400] = "";
	if (differ)
		snprintf(differs, sizeof(differs), " && ! cmp -s %s %s", real, fake);
	cr_assert_eq(th_sh(NULL, "test \"$(readelf -n %s | grep 'Build ID')\" = \"$(readelf -n %s | "
			   "grep 'Build ID')\"%s", real, fake, differs),
		     0, "the copy's build ID differs%s", differ ? ", or nothing was zeroed" : "");
	pid_t atk = th_run_profiled(&d, 1, fake, arg);
	*theirs = heapd_snapshot(d.sock, atk, LLGO_FORMAT_TEXT, NULL);
	pid_t me = th_run_profiled(&d, 0, real, arg);
	*mine = heapd_snapshot(d.sock, me, LLGO_FORMAT_TEXT, NULL);
	heapd_finish(&d);
}

/* nobody runs a copy of a program with the same build ID and a renamed symbol first; root's
 * profile of the real program still shows the real names. */
Test(names, symbol_cache_is_per_file, .timeout = 120)
{
	char *theirs, *t;
	nm_copy_first("e2e_sites", "sites", "objcopy --redefine-sym site_calloc=ATTACKER_NAME %s %s",
		      false, "3000", &theirs, &t);
	cr_expect(strstr(theirs, "ATTACKER_NAME") != NULL, "the copy's own profile:\n%s", theirs);
	cr_expect(strstr(t, "ATTACKER_NAME") == NULL, "root's profile shows the copy's names:\n%s",
		  t);
	cr_expect(strstr(t, "site_calloc") != NULL, "root's profile:\n%s", t);
	free(theirs);
	free(t);
}

/* The unwinder's cache is per file too: nobody first runs a copy of an -O2 program without
 * frame pointers whose .eh_frame is zeroed (same build ID: no CFI, so its stacks stop at
 * once); root's run of the real program still unwinds whole stacks. */
Test(names, unwind_cache_is_per_file, .timeout = 120)
{
	char *theirs, *t;
	nm_copy_first("nofp_chains", "chains",
		      "cp %1$s %2$s && set -- $(readelf -SW %2$s | sed -n 's/^ *\\[ *[0-9]*\\] "
		      "*\\.eh_frame  *[A-Z]* *[0-9a-f]* \\([0-9a-f]*\\) \\([0-9a-f]*\\).*/\\1 \\2/p') "
		      "&& test $# = 2 && dd if=/dev/zero of=%2$s bs=1 seek=$((0x$1)) count=$((0x$2)) "
		      "conv=notrunc 2>/dev/null", true, "200", &theirs, &t);
	cr_expect(strstr(theirs, PROFILE_TRUNCATED_NAME) != NULL,
		  "the copy without CFI unwound whole stacks:\n%.2000s", theirs);
	cr_expect(strstr(t, PROFILE_TRUNCATED_NAME) == NULL,
		  "root's stacks were cut by the copy's CFI:\n%.3000s", t);
	cr_expect(strstr(t, "a_leaf") != NULL && strstr(t, "main") != NULL, "root's profile:\n%.3000s",
		  t);
	free(theirs);
	free(t);
}

/* Records with size or rate 2^64-1 are corrupt; huge sizes and hostile counters never make a
 * value negative or wrap the accounting. */
Test(values, hostile_records_and_counters, .timeout = 60)
{
	struct th_attached t;
	th_attached_start(&t, NULL, LLGO_RING_MIN_DATA, 512);
	uint64_t st[2] = { TH_RET(th_site_alpha), TH_RET(th_site_caller) };
	/* a rate beyond any the shim sets is corrupt; a size of 2^64-1 is a real (failed)
	 * request: counted, and its sums saturate, never go negative */
	cr_assert(th_ring_push(&t.r, st, 2, 64, UINT64_MAX, false));
	cr_assert(th_ring_push(&t.r, st, 2, 64, LLGO_RATE_MAX + 1, false));
	th_ring_push_n(&t.r, st, 2, UINT64_MAX, 1, 100);
	atomic_store(&t.sh.ctl->lost_no_ring, UINT64_MAX);
	atomic_store(&t.sh.ctl->lost_detached, UINT64_MAX - 5);
	struct llgo_list_entry e = th_wait_delivered(t.d.sock, getpid(), 100);
	cr_expect_eq(e.delivered, 100);
	cr_expect_eq(e.corrupt, 2, "records with rate 2^64-1 or 2^40+1: %llu corrupt",
		     (unsigned long long)e.corrupt);
	cr_expect(th_accounting_holds(&e));
	cr_expect_lt(e.sampled, 1ull << 50, "sampled %llu", (unsigned long long)e.sampled);
	char *text = heapd_snapshot(t.d.sock, getpid(), LLGO_FORMAT_TEXT, NULL);
	cr_expect(strstr(text, ": -") == NULL && strstr(text, "[-") == NULL,
		  "negative values:\n%.400s", text);
	free(text);
	char *top = heapd_snapshot(t.d.sock, getpid(), LLGO_FORMAT_TOP, NULL);
	cr_expect(strstr(top, " -") == NULL, "negative values in top:\n%s", top);
	free(top);
	free(heapd_snapshot(t.d.sock, getpid(), LLGO_FORMAT_PPROF, NULL));
	th_attached_end(&t);
}
