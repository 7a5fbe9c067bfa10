// SPDX-License-Identifier: MIT
/*
 * test_peak.c: the peak view (agent/peak.c) end to end: a real daemon, real programs under
 * the plain shim, the answers read as the CLI, `go tool pprof` and `llgo-heap run` read them.
 *   - a program that grows site A to 8 MiB, holds it, frees it, then grows site B to 2 MiB:
 *     in-use shows B only, the peak view A at exactly 8 MiB (rate 1) with the right total,
 *     through every format, and still after the process exited;
 *   - scans stay logarithmic while every allocation sets a new maximum;
 *   - `llgo-heap run` prints the sites in use at the peak.
 */
#include <math.h>

#include "helpers.h"
#include "../client/client.h"

#define PROG(name) TH_PROGS "/" name
#define CLI TH_BIN "/llgo-heap"

/* A peak snapshot of pid in format fmt (malloc'ed, NUL-terminated); asserts success. */
static char *peak_snapshot(const char *sock, pid_t pid, uint32_t fmt, size_t *len)
{
	struct llgo_msg_snapshot req;
	client_snapshot_req(&req, pid, fmt, LLGO_SNAP_PEAK, 0);
	struct client_answer a;
	int rc = heapd_request(sock, &req, sizeof(req), &a);
	cr_assert(rc == 0 && a.status == 0, "peak SNAPSHOT %d failed: %d, status %d %s", (int)pid,
		  rc, a.status, a.message);
	if (len)
		*len = a.data.len;
	return (char *)a.data.data;
}

/* A number after "key=" in the peak comment line of s (-1 when absent). */
static long long peak_field(const char *s, const char *key)
{
	const char *line = strstr(s, "llgo-heap: peak inuse_space=");
	if (!line)
		return -1;
	char pat[64];
	snprintf(pat, sizeof(pat), " %s=", key);
	const char *f = strstr(line, pat);
	const char *nl = strchr(line, '\n');
	if (!f || (nl && f > nl))
		return -1;
	return atoll(f + strlen(pat));
}

/* Summed legacy-text values of the records whose frame 0 is func. */
static void peak_site(const char *text, const char *func, long *objects, long *bytes)
{
	static struct th_text_rec recs[4096];
	long period;
	int n = th_parse_text(text, &period, recs, 4096);
	*objects = *bytes = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(recs[i].frame0, func) != 0)
			continue;
		*objects += recs[i].inuse_objects;
		*bytes += recs[i].inuse_bytes;
	}
}

/* The sum of every record's in-use bytes of a legacy text. */
static long peak_text_total(const char *text)
{
	static struct th_text_rec recs[4096];
	long period, sum = 0;
	int n = th_parse_text(text, &period, recs, 4096);
	for (int i = 0; i < n; i++)
		sum += recs[i].inuse_bytes;
	return sum;
}

static void peak_wait_exited(const char *sock, pid_t pid)
{
	for (int i = 0; i < 200; i++) {
		struct llgo_list_entry e;
		if (heapd_list_pid(sock, pid, &e) && e.state == LLGO_PROC_EXITED)
			return;
		th_sleep_ms(50);
	}
	cr_assert_fail("pid %d not seen exited", (int)pid);
}

/* What the peak view of the A-then-B program must say (its phase B is running or over). */
static void peak_check_a(const char *sock, pid_t pid, long n, const char *dir, const char *when)
{
	char *text = peak_snapshot(sock, pid, LLGO_FORMAT_TEXT, NULL);
	long objects, bytes;
	peak_site(text, "site_peak_a", &objects, &bytes);
	cr_expect_eq(objects, n, "%s: site_peak_a at the peak: %ld objects, expected %ld\n%s", when,
		     objects, n, text);
	cr_expect_eq(bytes, n * 1024, "%s: site_peak_a at the peak: %ld bytes, expected %ld", when,
		     bytes, n * 1024);
	peak_site(text, "site_peak_b", &objects, &bytes);
	cr_expect_eq(objects, 0, "%s: site_peak_b had nothing in use at the peak: %ld", when,
		     objects);
	/* the stated total is what the sites add up to: A plus the pointer array (one calloc of
	 * n + 1 pointers), nothing of B */
	long total = peak_text_total(text);
	cr_expect_eq(peak_field(text, "inuse_space"), total, "%s: stated total %lld, sites %ld",
		     when, peak_field(text, "inuse_space"), total);
	cr_expect(total >= n * 1024 + (n + 1) * 8 && total <= n * 1024 + (n + 1) * 8 + 16384,
		  "%s: peak total %ld, expected %ld and a few small blocks", when, total,
		  n * 1024 + (n + 1) * 8);
	cr_expect(peak_field(text, "at_most") >= total, "%s: bound %lld below the total %ld", when,
		  peak_field(text, "at_most"), total);
	free(text);

	/* pprof: sample types of their own, the default peak_inuse_space; go tool pprof reads
	 * them by name */
	size_t len;
	char *pb = peak_snapshot(sock, pid, LLGO_FORMAT_PPROF, &len);
	char path[512], *out = NULL;
	snprintf(path, sizeof(path), "%s/peak.pb.gz", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f && fwrite(pb, 1, len, f) == len && fclose(f) == 0);
	free(pb);
	int rc = th_pprof(&out, dir, "-raw peak.pb.gz");
	cr_assert_eq(rc, 0, "go tool pprof -raw failed:\n%s", out);
	cr_expect(strstr(out, "peak_inuse_objects/count peak_inuse_space/bytes[dflt]") != NULL,
		  "%s: sample types:\n%.800s", when, out);
	free(out);
	rc = th_pprof(&out, dir, "-top "
		    "-sample_index=peak_inuse_space peak.pb.gz");
	cr_assert_eq(rc, 0, "go tool pprof -top failed:\n%s", out);
	cr_expect(strstr(out, "Type: peak_inuse_space") != NULL, "%s:\n%s", when, out);
	/* 8 MiB is pprof's "8MB" */
	const char *row = strstr(out, "site_peak_a");
	cr_expect(row != NULL && strstr(out, "   8MB ") != NULL && strstr(out, "site_peak_b") == NULL,
		  "%s: go tool pprof -top does not show site_peak_a at 8MB alone:\n%s", when, out);
	free(out);

	/* the CLI: ranked by peak in-use space, the header says how high */
	rc = th_sh(&out, CLI " top %d --peak --socket %s", (int)pid, sock);
	cr_assert_eq(rc, 0, "top --peak failed:\n%s", out);
	cr_expect(strstr(out, "sites by peak_inuse_space") != NULL && strstr(out, "llgo-heap: peak ") != NULL,
		  "%s: top --peak:\n%s", when, out);
	const char *first = strstr(out, "site\n");
	cr_expect(first && strstr(first, "8.0MiB") && strstr(first, "8.0MiB") < strstr(first, "site_peak_a"),
		  "%s: top --peak's first row is not site_peak_a at 8.0MiB:\n%s", when, out);
	cr_expect(strstr(out, "site_peak_b") == NULL, "%s:\n%s", when, out);
	free(out);
}

/*
 * Site A grows to 8 MiB (8192 x 1 KiB at rate 1), is held, freed; then site B grows to
 * 2 MiB and stays. In use now: B only. At the peak: A alone at exactly 8 MiB, in the legacy
 * text, the pprof (go tool pprof) and `top --peak`; and so again once the process exited.
 */
Test(peak, site_a_at_8_mib_after_it_was_freed, .timeout = 300)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	const long n = 8192;
	struct th_proc p;
	/* held long enough for a drain poll and the settle scan (peak.c), sanitizers included */
	char *argv[] = { PROG("inuse_phases"), "peak", "8192", "1500", NULL };
	th_start(&p, &d, "1", 0, NULL, argv, NULL);
	char line[256];
	cr_assert(th_read_line(&p, line, sizeof(line), 120000), "program did not get ready");
	cr_assert_str_eq(line, "ready");

	/* in use now: B, not A */
	char *text = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	long objects, bytes;
	peak_site(text, "site_peak_b", &objects, &bytes);
	cr_expect_eq(objects, n / 4, "site_peak_b in use now: %ld", objects);
	peak_site(text, "site_peak_a", &objects, &bytes);
	cr_expect_eq(objects, 0, "site_peak_a in use now: %ld", objects);
	free(text);

	peak_check_a(d.sock, p.pid, n, d.dir, "running");

	th_say(&p, "go");
	int st = th_wait(&p, 60000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
	peak_wait_exited(d.sock, p.pid);
	peak_check_a(d.sock, p.pid, n, d.dir, "exited");
	heapd_finish(&d);
}

/*
 * Every allocation a new maximum (n x malloc(16) at rate 1, kept): a scan at every new
 * maximum the drain sees would be one per drain pass (1 ms); the peak thread scans when the
 * bound grew by 1/32 over the kept total, plus at most one settle scan per 100 ms. The first
 * record of the program is its array of n + 1 pointers, so the totals go from at least 8n
 * to 24n: at most log(3)/log(33/32) growth scans. The final total is exact.
 */
Test(peak, scans_stay_logarithmic_while_every_allocation_is_a_new_maximum, .timeout = 300)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	const long n = th_san()[0] ? 100000 : 400000;
	char nbuf[32];
	snprintf(nbuf, sizeof(nbuf), "%ld", n);
	struct th_proc p;
	char *argv[] = { PROG("inuse_phases"), "climb", nbuf, NULL };
	long t0 = th_now_ms();
	th_start(&p, &d, "1", 0, NULL, argv, NULL);
	char line[256];
	cr_assert(th_read_line(&p, line, sizeof(line), 240000), "program did not get ready");
	cr_assert_str_eq(line, "ready");
	char *text = peak_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	long elapsed = th_now_ms() - t0;
	long long scans = peak_field(text, "scans"), total = peak_field(text, "inuse_space");
	long objects, bytes;
	peak_site(text, "site_climb", &objects, &bytes);
	cr_expect_eq(objects, n, "site_climb at the peak: %ld objects of %ld", objects, n);
	cr_expect_eq(bytes, n * 16, "site_climb at the peak: %ld bytes", bytes);
	cr_expect(total >= n * 24 + 8, "peak total %lld, expected at least %ld", total, n * 24 + 8);
	long growth = (long)ceil(log(3.0 + 0.01) / log(33.0 / 32.0)) + 1;
	long settle = elapsed / 100 + 1;
	long bound = growth + settle + 2; /* + this request's scan and a margin of one */
	cr_log_info("peak: %lld scans in %ld ms for %ld allocations (bound %ld)", scans, elapsed,
		    n, bound);
	cr_expect(scans >= 1 && scans <= bound,
		  "%lld scans while %ld allocations each set a new maximum over %ld ms: more than "
		  "%ld growth + %ld settle + 2", scans, n, elapsed, growth, settle);
	free(text);
	th_say(&p, "go");
	int st = th_wait(&p, 60000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
	heapd_finish(&d);
}

/* `llgo-heap run` prints the sites in use at the peak after the leaks at exit. */
Test(peak, run_prints_the_peak_sites, .timeout = 300)
{
	char *dir = th_tmpdir(), *out = NULL;
	int rc = th_sh(&out, "cd %s && " CLI " run -r 1 -o run.pb.gz -- " PROG("inuse_phases")
			" peak 2048 300 </dev/null", dir);
	cr_assert_eq(rc, 0, "llgo-heap run failed (%d):\n%s", rc, out);
	const char *sec = strstr(out, "llgo-heap: in use at the peak:\n");
	cr_assert(sec != NULL, "no peak section:\n%s", out);
	cr_expect(strstr(sec, "sites by peak_inuse_space") != NULL, "%s", sec);
	const char *a = strstr(sec, "site_peak_a");
	cr_expect(a != NULL && strstr(sec, "2.0MiB") != NULL && strstr(sec, "2.0MiB") < a,
		  "the peak section does not rank site_peak_a first at 2.0MiB:\n%s", sec);
	cr_expect(strstr(sec, "site_peak_b") == NULL, "site_peak_b at the peak:\n%s", sec);
	free(out);
	th_rmdir(dir);
}
