// SPDX-License-Identifier: MIT
/*
 * test_linked.c: programs that link the shim instead of preloading it, built with the
 * documented pkg-config lines (Makefile section "linked shim"): dynamically (-lllgoheap) and
 * as fully static glibc executables (llgoheap-static: --wrap and libllgoheap-static.a). Each
 * runs without LD_PRELOAD against a private daemon at rate 1 and must give the exact counts
 * per site that the preloaded shim gives, with its accounting adding up; the static one also
 * with threads. Last, `make install` into a staging folder installs the libraries and
 * pkg-config files, and a program built from the installed files is profiled the same way.
 */
#include "helpers.h"

#define LINKED LLGO_BUILD_DIR "/linked"

struct lk_site {
	char name[64];
	long size, count;
};

/* One run of a linked program under a private daemon at rate 1, and its profile. */
struct lk_run {
	char *out;  /* the program's output (stdout and stderr; the shim's LLGO_HEAP_DEBUG lines) */
	char *prof; /* its text snapshot */
	int pid;
};

/* Run `cmd` (its first word the program) with a private daemon at rate 1, preloading preload
 * (NULL: nothing), and take its snapshot. */
static void lk_run(struct lk_run *r, const char *preload, const char *cmd)
{
	char *dir = th_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	const char *sock = d.sock;
	char env[1200] = "unset LD_PRELOAD &&";
	if (preload)
		snprintf(env, sizeof(env), "LD_PRELOAD=%s", preload);
	/* the shell prints the pid the program will have, then becomes it */
	int rc = th_sh(&r->out, "cd %s && %s LLGO_HEAP_SOCKET=%s LLGO_HEAP_RATE=1 "
			"LLGO_HEAP_DEBUG=1 sh -c 'echo pid $$; exec \"$0\" \"$@\"' %s", dir, env,
			sock, cmd);
	cr_assert_eq(rc, 0, "%s:\n%s", cmd, r->out);
	cr_expect(strstr(r->out, "llgo-heap: attached to") != NULL, "did not attach:\n%s", r->out);
	const char *p = strstr(r->out, "pid ");
	cr_assert(p && sscanf(p, "pid %d", &r->pid) == 1, "%s", r->out);
	rc = th_sh(&r->prof, TH_BIN "/llgo-heap snapshot %d -f text -o - --socket %s", r->pid,
		    sock);
	cr_assert_eq(rc, 0, "snapshot: %s", r->prof);
	heapd_stop(&d);
	th_rmdir(dir);
}

/* Every "site NAME SIZE COUNT" line the program printed against the profile, and its
 * accounting. */
static void lk_check_sites(const struct lk_run *r, const char *cmd)
{
	static struct th_text_rec recs[4096];
	long period;
	int n = th_parse_text(r->prof, &period, recs, 4096), nsites = 0;
	cr_expect_eq(period, 2);
	for (const char *p = strstr(r->out, "site "); p; p = strstr(p + 1, "\nsite ")) {
		struct lk_site s;
		if (*p == '\n')
			p++;
		if (sscanf(p, "site %63s %ld %ld", s.name, &s.size, &s.count) != 3)
			continue;
		nsites++;
		long got = th_recs_count(recs, n, s.name, s.size);
		cr_expect_eq(got, s.count, "%s: %s size %ld: %ld in the profile, %ld made\n%s", cmd,
			     s.name, s.size, got, s.count, r->prof);
	}
	cr_expect_geq(nsites, 5, "%s printed no sites:\n%s", cmd, r->out);
	unsigned long long sa, de, dr, co;
	const char *acc = strstr(r->prof, "# llgo-heap: sampled=");
	cr_assert(acc && sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu "
				"corrupt=%llu", &sa, &de, &dr, &co) == 4, "%s", r->prof);
	cr_expect(sa == de + dr + co && dr == 0 && co == 0, "%.120s", acc);
}

static void lk_run_free(struct lk_run *r)
{
	free(r->out);
	free(r->prof);
}

/* Run `cmd` with a private daemon at rate 1 and no preload; check every site it prints. */
static void lk_expect_exact(const char *cmd)
{
	struct lk_run r;
	lk_run(&r, NULL, cmd);
	lk_check_sites(&r, cmd);
	lk_run_free(&r);
}

Test(linked, dynamic_lllgoheap, .timeout = 120)
{
	char *out = NULL;
	th_sh(&out, "readelf -d " LINKED "/sites-dynamic | grep -c 'NEEDED.*libllgoheap.so'");
	cr_expect_str_eq(out, "1\n", "sites-dynamic is not linked with libllgoheap.so: %s", out);
	free(out);
	lk_expect_exact(LINKED "/sites-dynamic 1000");
}

/* A dynamic executable that linked build/lib/libllgoheap.a (no -lllgoheap, no preload): the
 * archive's malloc family is the program's, exported, so it is libc's and every library's
 * malloc too; the archive's constructor attaches. It had produced no snapshot: the archive
 * held the hook alone, so nothing pulled it into a program that only calls malloc. */
Test(linked, dynamic_archive, .timeout = 120)
{
	char *out = NULL;
	th_sh(&out, "readelf -l " LINKED "/sites-archive | grep -c INTERP; "
		     "readelf -d " LINKED "/sites-archive | grep -c 'NEEDED.*libllgoheap'; "
		     "readelf --dyn-syms " LINKED "/sites-archive | grep -c ' malloc$'");
	cr_expect_str_eq(out, "1\n0\n1\n", "sites-archive is not a dynamic executable that "
			 "exports the archive's malloc: %s", out);
	free(out);
	lk_expect_exact(LINKED "/sites-archive 1000");
}

/* The same with C++: the archive's operators new and delete are the program's, and frame 0 of
 * each sample is the function that called new. */
Test(linked, dynamic_archive_cxx, .timeout = 120)
{
	struct lk_run r;
	lk_run(&r, NULL, LINKED "/cxx-archive 300");
	static struct th_text_rec recs[4096];
	long period;
	int n = th_parse_text(r.prof, &period, recs, 4096);
	const char *funcs[] = { "_Z14cxx_new_scalarv",	      "_Z14cxx_new_objectB5cxx11v",
				"_Z15cxx_new_alignedv",	      "_Z15cxx_new_nothrowv",
				"_Z23cxx_new_aligned_nothrowv", "_Z21cxx_new_aligned_arrayv",
				"_Z19cxx_new_aligned_oddv" };
	for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++)
		cr_expect_geq(th_recs_count(recs, n, funcs[i], 0), 300, "%s:\n%s", funcs[i], r.prof);
	cr_expect_eq(th_recs_count(recs, n, "_Z19cxx_new_aligned_oddv", 100), 300);
	for (int i = 0; i < n; i++)
		cr_expect(strncmp(recs[i].frame0, "_Znw", 4) != 0 &&
			  strncmp(recs[i].frame0, "_Zna", 4) != 0 &&
			  strcmp(recs[i].frame0, "malloc") != 0,
			  "frame 0 is allocator plumbing: %s", recs[i].frame0);
	lk_run_free(&r);
}

/* That executable run under the preloaded shim: the program's copy stands down (owner.c) and
 * its malloc, first in the lookup order, hands every call to the preloaded one untouched, so
 * the one session has the exact counts with the program's call sites as frame 0. */
Test(linked, dynamic_archive_under_preload, .timeout = 120)
{
	struct lk_run r;
	lk_run(&r, LLGO_PLAIN_SHIM, LINKED "/sites-archive 1000");
	cr_expect(strstr(r.out, "not attached: another copy of the sampler is active") != NULL,
		  "the program's copy did not stand down:\n%s", r.out);
	lk_check_sites(&r, LINKED "/sites-archive under LD_PRELOAD");
	lk_run_free(&r);
}

/* A fully static executable: no dynamic section, no interpreter; libc's own internal
 * allocations (stdio buffers) go through the wrappers too. */
Test(linked, static_glibc, .timeout = 120)
{
	char *out = NULL;
	th_sh(&out, "readelf -l " LINKED "/sites-static | grep -c 'INTERP\\|DYNAMIC'; "
		     "nm " LINKED "/sites-static | grep -c ' T __wrap_malloc$'");
	cr_expect_str_eq(out, "0\n1\n", "sites-static is not a static, wrapped executable: %s",
			 out);
	free(out);
	lk_expect_exact(LINKED "/sites-static 1000");
}

Test(linked, static_glibc_threads, .timeout = 120)
{
	lk_expect_exact(LINKED "/stress-static 6 count 3000");
}

/* A static executable with no daemon runs as if nothing were linked. */
Test(linked, static_without_daemon, .timeout = 60)
{
	char *out = NULL;
	int rc = th_sh(&out, "LLGO_HEAP_SOCKET=/nonexistent/sock " LINKED "/sites-static 50");
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "site site_malloc_small 24 50") != NULL, "%s", out);
	free(out);
}

/* make install (staged with DESTDIR): libraries, header, pkg-config files for the prefix;
 * a program built with the installed pkg-config files (pkgconf --define-prefix relocates the
 * staged prefix) is profiled exactly, dynamically and fully static. */
Test(linked, make_install_and_pkg_config, .timeout = 600)
{
	char *dir = th_tmpdir(), *out = NULL;
	const char *san = getenv("LLGO_SAN");
	int rc = th_sh(&out, "make -s --no-print-directory -C %s install DESTDIR=%s/stage "
			"PREFIX=/opt/llgo SAN='%s'", LLGO_SRC_DIR, dir, san ? san : "");
	cr_assert_eq(rc, 0, "make install:\n%s", out);
	free(out);
	const char *want[] = { "lib/libllgoheap.so", "lib/libllgoheap.a",
			       "lib/libllgoheap-static.a", "lib/pkgconfig/llgoheap.pc",
			       "lib/pkgconfig/llgoheap-static.pc", "include/llgo_heap.h",
			       "bin/llgo-heapd", "bin/llgo-heap",
			       "share/llgo-heap/fallback/llgo_fallback.c" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		char path[4400];
		snprintf(path, sizeof(path), "%s/stage/opt/llgo/%s", dir, want[i]);
		cr_expect(access(path, F_OK) == 0, "not installed: %s", path);
	}
	rc = th_sh(&out, "grep -h '^prefix=' %s/stage/opt/llgo/lib/pkgconfig/*.pc", dir);
	cr_expect_str_eq(out, "prefix=/opt/llgo\nprefix=/opt/llgo\n", "%s", out);
	free(out);
	const char *pc = "PKG_CONFIG_PATH=%s/stage/opt/llgo/lib/pkgconfig pkg-config "
			 "--define-prefix";
	char pcbuf[4400];
	snprintf(pcbuf, sizeof(pcbuf), pc, dir);
	rc = th_sh(&out, "cd %s && cc -O2 -g -fno-omit-frame-pointer -o dyn "
		    LLGO_SRC_DIR "/tests/progs/e2e_sites.c $(%s --cflags --libs llgoheap) "
		    "-Wl,-rpath,$(%s --variable=libdir llgoheap) && "
		    "cc -O2 -g -fno-omit-frame-pointer -static -o stat "
		    LLGO_SRC_DIR "/tests/progs/e2e_sites.c $(%s --cflags --libs llgoheap-static) && "
		    "ldd ./dyn | grep libllgoheap", dir, pcbuf, pcbuf, pcbuf);
	cr_assert_eq(rc, 0, "building with the installed pkg-config files:\n%s", out);
	cr_expect(strstr(out, "/stage/opt/llgo/lib/libllgoheap.so") != NULL,
		  "dyn does not use the installed library:\n%s", out);
	free(out);
	char cmd[4400];
	snprintf(cmd, sizeof(cmd), "%s/dyn 300", dir);
	lk_expect_exact(cmd);
	snprintf(cmd, sizeof(cmd), "%s/stat 300", dir);
	lk_expect_exact(cmd);
	th_rmdir(dir);
}

/* A shared library that links libllgoheap.a into its own allocator: only the shim's code
 * (its own section, llgo_heap_text) is trimmed from the top of a stack, never the library
 * that holds it. The library's allocator frame and its callers inside the library stay.
 * Loaded as a dependency (in the global scope, before libc), the library's copy of the
 * archive's malloc is the process's, as -lllgoheap's would be: the blocks its allocator
 * takes from malloc are sampled there too, and their free is seen. */
Test(linked, library_holding_the_archive_keeps_its_frames, .timeout = 120)
{
	char *dir = th_tmpdir(), *out = NULL, *prof = NULL;
	int rc = th_sh(&out,
			"cd %s && cat > lib.c <<'C'\n"
			"#define LLGO_HEAP_PROFILING 1\n"
			"#include <stdlib.h>\n"
			"#include \"llgo_heap.h\"\n"
			"void *volatile lib_sink;\n"
			"__attribute__((noinline)) void *lib_pool_alloc(size_t n)\n"
			"{ void *p = malloc(n); llgo_heap_alloc_hook(p, n); return p; }\n"
			"__attribute__((noinline)) void lib_build_index(void)\n"
			"{ lib_sink = lib_pool_alloc(4321); free(lib_sink); __asm__ volatile(\"\"); }\n"
			"C\n"
			"cat > main.c <<'C'\n"
			"void lib_build_index(void);\n"
			"int main(void) { for (int i = 0; i < 300; i++) lib_build_index(); return 0; }\n"
			"C\n"
			"cc -O2 -g -fno-omit-frame-pointer -fPIC -shared -I" LLGO_SRC_DIR "/include "
			"-o libheld.so lib.c " LLGO_BUILD_DIR "/lib/libllgoheap.a -pthread -ldl && "
			"cc -O2 -g -fno-omit-frame-pointer -o main main.c -L. -lheld -Wl,-rpath,%s",
			dir, dir);
	cr_assert_eq(rc, 0, "%s", out);
	free(out);
	struct heapd d;
	heapd_start(&d, dir, NULL);
	const char *sock = d.sock;
	rc = th_sh(&out, "cd %s && unset LD_PRELOAD && LLGO_HEAP_SOCKET=%s LLGO_HEAP_RATE=1 "
		    "sh -c 'echo $$; exec ./main'", dir, sock);
	cr_assert_eq(rc, 0, "%s", out);
	int pid = atoi(out);
	rc = th_sh(&prof, TH_BIN "/llgo-heap snapshot %d -f text -o - --socket %s", pid, sock);
	cr_assert_eq(rc, 0, "snapshot: %s", prof);
	/* two stacks, both lib_pool_alloc, lib_build_index, main: at its call of malloc and at
	 * its hook (inlined); all freed */
	const char *first = strstr(prof, "\n0: 0 [300: 1296300] @ ");
	cr_expect(first && strstr(first + 1, "\n0: 0 [300: 1296300] @ "), "%s", prof);
	cr_expect(strstr(prof, "sampled=600 delivered=600 ") != NULL, "%s", prof);
	const char *a = strstr(prof, "lib_pool_alloc"), *b = strstr(prof, "lib_build_index"),
		   *m = strstr(prof, "\tmain+");
	cr_expect(a && b && m && a < b && b < m, "the library's frames were trimmed:\n%s", prof);
	cr_expect(strstr(prof, "llgo_heap_sample_slow") == NULL, "a shim frame is shown:\n%s",
		  prof);
	free(out);
	free(prof);
	heapd_stop(&d);
	th_rmdir(dir);
}
