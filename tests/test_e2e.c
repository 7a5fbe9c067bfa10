// SPDX-License-Identifier: MIT
/*
 * test_e2e.c: end-to-end tests of the whole pipeline. Real programs run under
 * `llgo-heap run` (shim preloaded, private daemon), and real clients read the output:
 * the legacy text is parsed here and by `go tool pprof`, the proto by `go tool pprof`.
 * The daemons these tests start are private to each run and stopped by llgo-heap itself.
 */
#include "helpers.h"

#define RUN TH_BIN "/llgo-heap run"

struct site {
	const char *func;
	long size;
	long count; /* per N iterations, filled from N */
};

Test(e2e, exact_counts_at_rate_1, .timeout = 300)
{
	char *dir = th_tmpdir(), *out = NULL;
	const int n = 2000;
	int rc = th_sh(&out, "cd %s && " RUN " -r 1 -f text -o sites.heap -- " TH_PROGS
			"/e2e_sites %d", dir, n);
	cr_assert_eq(rc, 0, "llgo-heap run failed (%d):\n%s", rc, out);
	cr_assert(strstr(out, "site site_malloc_small 24") != NULL, "program output lost:\n%s",
		  out);
	free(out);

	char path[4200];
	snprintf(path, sizeof(path), "%s/sites.heap", dir);
	char *text = th_read_file(path);
	cr_assert(text != NULL, "no profile written");
	cr_assert(strncmp(text, "heap profile: ", 14) == 0, "bad header:\n%.200s", text);
	cr_assert(strstr(text, "\n# llgo-heap: sampled=") != NULL, "no accounting line");
	cr_assert(strstr(text, "MAPPED_LIBRARIES:") != NULL, "no MAPPED_LIBRARIES");

	static struct th_text_rec recs[4096];
	long period;
	int nrec = th_parse_text(text, &period, recs, 4096);
	cr_assert_eq(period, 2, "rate 1 must write heap/2, got heap/%ld", period);
	struct site sites[] = {
		{ "site_malloc_small", 24, n },  { "site_malloc_large", 100000, n },
		{ "site_calloc", 480, n },       { "site_realloc", 777, n },
		{ "site_aligned", 640, n },      { "site_two_sizes", 64, n / 2 },
		{ "site_two_sizes", 256, n - n / 2 },
	};
	for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
		long got = th_recs_count(recs, nrec, sites[i].func, sites[i].size);
		cr_expect_eq(got, sites[i].count, "%s size %ld: %ld allocations in the profile, "
			     "%ld made", sites[i].func, sites[i].size, got, sites[i].count);
	}
	/* sampled == delivered + dropped + corrupt, with nothing dropped at this volume */
	unsigned long long s, d, dr, c;
	const char *acc = strstr(text, "# llgo-heap: sampled=");
	cr_assert_eq(sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu "
			    "corrupt=%llu", &s, &d, &dr, &c), 4);
	cr_expect_eq(s, d + dr + c);
	cr_expect_eq(c, 0);
	free(text);
	th_rmdir(dir);
}

/* go tool pprof reads both outputs and shows the site functions. */
Test(e2e, go_pprof_reads_proto_and_text, .timeout = 600)
{
	char *dir = th_tmpdir(), *out = NULL;
	int rc = th_sh(&out, "cd %s && " RUN " -r 1 -o sites.pb.gz -- " TH_PROGS
			"/e2e_sites 500 >/dev/null && " RUN " -r 1 -f text -o sites.heap -- "
			TH_PROGS "/e2e_sites 500 >/dev/null", dir);
	cr_assert_eq(rc, 0, "llgo-heap run failed:\n%s", out);
	free(out);

	const char *funcs[] = { "site_malloc_small", "site_malloc_large", "site_calloc",
				"site_realloc", "site_aligned", "site_two_sizes" };
	const char *files[] = { "sites.pb.gz", "sites.heap" };
	const char *modes[] = { "-raw", "-top" };
	for (int f = 0; f < 2; f++) {
		for (int m = 0; m < 2; m++) {
			/* The program frees what it allocates: read the allocated values (the
			 * in-use ones are zero and pprof shows no node). */
			rc = th_pprof(&out, dir, "%s "
				    "-nodefraction=0 -nodecount=100000 %s %s %s/%s", modes[m],
				    "-sample_index=alloc_space",
				    f == 1 ? TH_PROGS "/e2e_sites" : "", dir, files[f]);
			cr_assert_eq(rc, 0, "go tool pprof %s %s failed:\n%s", modes[m], files[f],
				     out);
			for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++)
				cr_expect(strstr(out, funcs[i]) != NULL,
					  "go tool pprof %s %s does not show %s:\n%s", modes[m],
					  files[f], funcs[i], out);
			free(out);
		}
	}
	/* The proto carries the accounting comment and Go's sample types in Go's order. */
	rc = th_pprof(&out, dir, "-raw sites.pb.gz");
	cr_assert_eq(rc, 0);
	cr_expect(strstr(out, "alloc_objects/count alloc_space/bytes inuse_objects/count "
			      "inuse_space/bytes") != NULL, "sample types:\n%.600s", out);
	cr_expect(strstr(out, "llgo-heap: sampled=") != NULL, "no accounting comment");
	free(out);
	th_rmdir(dir);
}

Test(e2e, cxx_new_frame0_is_caller, .timeout = 300)
{
	char *dir = th_tmpdir(), *out = NULL;
	int rc = th_sh(&out, "cd %s && " RUN " -r 1 -f text -o cxx.heap -- " TH_PROGS
			"/e2e_cxx 300", dir);
	cr_assert_eq(rc, 0, "run failed:\n%s", out);
	free(out);
	char path[4200];
	snprintf(path, sizeof(path), "%s/cxx.heap", dir);
	char *text = th_read_file(path);
	cr_assert(text);
	static struct th_text_rec recs[4096];
	long period;
	int nrec = th_parse_text(text, &period, recs, 4096);
	const char *funcs[] = { "_Z14cxx_new_scalarv",	      "_Z14cxx_new_objectB5cxx11v",
				"_Z15cxx_new_alignedv",	      "_Z15cxx_new_nothrowv",
				"_Z23cxx_new_aligned_nothrowv", "_Z21cxx_new_aligned_arrayv",
				"_Z19cxx_new_aligned_oddv" };
	for (size_t i = 0; i < sizeof(funcs) / sizeof(funcs[0]); i++) {
		long got = th_recs_count(recs, nrec, funcs[i], 0);
		cr_expect_geq(got, 300, "%s: %ld samples with it as frame 0 (want >= 300)\n%s",
			      funcs[i], got, text);
	}
	/* the size the program asked, not the one aligned new rounds up to */
	cr_expect_eq(th_recs_count(recs, nrec, "_Z19cxx_new_aligned_oddv", 100), 300);
	/* No sample may start inside the shim or libstdc++'s operator new. */
	for (int i = 0; i < nrec; i++) {
		cr_expect(strncmp(recs[i].frame0, "_Znw", 4) != 0 &&
			  strncmp(recs[i].frame0, "_Zna", 4) != 0 &&
			  strcmp(recs[i].frame0, "malloc") != 0,
			  "frame 0 is allocator plumbing: %s", recs[i].frame0);
	}
	free(text);
	th_rmdir(dir);
}

Test(e2e, fork_exec_is_two_processes, .timeout = 300)
{
	char *dir = th_tmpdir(), *out = NULL;
	int rc = th_sh(&out, "cd %s && " RUN " -r 1 -f text -o fe.heap -- " TH_PROGS
			"/e2e_forkexec", dir);
	cr_assert_eq(rc, 0, "run failed:\n%s", out);
	int ppid = 0, cpid = 0, st = -1;
	const char *p = strstr(out, "parent ");
	cr_assert(p && sscanf(p, "parent %d child %d status %d", &ppid, &cpid, &st) == 3,
		  "program output:\n%s", out);
	cr_assert_eq(st, 0);
	free(out);

	char path[4200];
	snprintf(path, sizeof(path), "%s/fe.heap", dir);
	char *parent = th_read_file(path);
	snprintf(path, sizeof(path), "%s/fe.heap.%d", dir, cpid);
	char *child = th_read_file(path);
	cr_assert(parent, "no parent profile");
	cr_assert(child, "no profile for the exec'd child %d", cpid);
	static struct th_text_rec recs[4096];
	long period;
	int n = th_parse_text(parent, &period, recs, 4096);
	cr_expect_eq(th_recs_count(recs, n, "parent_site", 1000), 300);
	cr_expect_eq(th_recs_count(recs, n, "child_site", 0), 0);
	n = th_parse_text(child, &period, recs, 4096);
	cr_expect_eq(th_recs_count(recs, n, "child_site", 2000), 200);
	cr_expect_eq(th_recs_count(recs, n, "parent_site", 0), 0);
	free(parent);
	free(child);
	th_rmdir(dir);
}

Test(e2e, run_keeps_exit_status_and_output, .timeout = 120)
{
	char *dir = th_tmpdir(), *out = NULL;
	int rc = th_sh(&out, "cd %s && " RUN " -- sh -c 'echo hello; exit 7'", dir);
	cr_expect_eq(rc, 7, "exit status %d:\n%s", rc, out);
	cr_expect(strstr(out, "hello") != NULL);
	free(out);
	rc = th_sh(&out, "cd %s && " RUN " -- /nonexistent/program", dir);
	cr_expect_eq(rc, 127, "exit status %d:\n%s", rc, out);
	free(out);
	th_rmdir(dir);
}

Test(e2e, cli_errors_are_one_line, .timeout = 60)
{
	char *dir = th_tmpdir(), *out = NULL;
	const char *cases[] = {
		TH_BIN "/llgo-heap list --bogus",
		TH_BIN "/llgo-heap snapshot notapid --socket /nonexistent.sock",
		TH_BIN "/llgo-heap list --socket /nonexistent/llgo.sock",
		TH_BIN "/llgo-heap frobnicate",
		TH_BIN "/llgo-heap rate 1 -5 --socket /nonexistent.sock",
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = th_sh(&out, "%s", cases[i]);
		cr_expect_neq(rc, 0, "%s succeeded", cases[i]);
		size_t lines = 0;
		for (char *c = out; *c; c++)
			lines += *c == '\n';
		cr_expect_eq(lines, 1, "%s: want one line on stderr, got:\n%s", cases[i], out);
		free(out);
	}
	th_rmdir(dir);
}

/* The CLI only frames messages and reads pprof files (client/): it must not link the
 * daemon's libraries but zlib (the gzipped profiles of `llgo-heap diff`). The daemon's own
 * NEEDED list is read the same way, so the check is seen to find them. */
Test(e2e, cli_links_no_daemon_library, .timeout = 60)
{
	const char *daemon_only[] = { "libdw.so", "libelf.so", "libmicrohttpd.so", "libbpf.so",
				      "libunwind" };
	char *cli = NULL, *heapd = NULL;
	cr_assert_eq(th_sh(&cli, "readelf -d " TH_BIN "/llgo-heap | grep NEEDED"), 0,
		     "readelf: %s", cli);
	cr_assert_eq(th_sh(&heapd, "readelf -d " TH_BIN "/llgo-heapd | grep NEEDED"), 0,
		     "readelf: %s", heapd);
	cr_expect(strstr(cli, "libc.so") != NULL, "llgo-heap NEEDED:\n%s", cli);
	for (size_t i = 0; i < sizeof(daemon_only) / sizeof(daemon_only[0]); i++)
		cr_expect(strstr(cli, daemon_only[i]) == NULL, "llgo-heap links %s:\n%s",
			  daemon_only[i], cli);
	cr_expect(strstr(heapd, "libdw.so") && strstr(heapd, "libelf.so") &&
			  strstr(heapd, "libmicrohttpd.so"),
		  "llgo-heapd NEEDED (the check reads the wrong thing?):\n%s", heapd);
	free(cli);
	free(heapd);
}
