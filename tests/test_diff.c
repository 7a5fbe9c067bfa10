// SPDX-License-Identifier: MIT
/*
 * test_diff.c: `llgo-heap diff BASE NEW` and `llgo-heap top PID --base FILE` end to end, and
 * the pprof reader under them (client/pprofread.c, client/diff.c) against hostile files.
 *   - two real profiles of a real program at rate 1 (inuse_phases: 4096 x 128 B at one site,
 *     then those freed and 4096 x 256 B at another), taken by the CLI from a real daemon:
 *     the growth per site is exact, in all four values, in the table and in the totals;
 *   - go tool pprof -base BASE NEW shows the same growth per site, and so does go tool pprof
 *     reading the diff profile `diff -o` wrote; the same with two heap profiles written by
 *     Go's runtime/pprof (a Go program built with Debian's go);
 *   - top PID --base FILE: the running process's profile minus FILE, as diff shows it;
 *   - malformed, truncated, hostile and oversized files: exit status 2 and one line naming
 *     the file and the reason; every truncation and thousands of mutations of a real
 *     profile decoded in process (under ASan/UBSan in the SAN builds) without a fault, and
 *     what decodes diffs and re-encodes into a profile that decodes again;
 *   - values at the int64 limits saturate.
 */
#include <zlib.h>

#include "helpers.h"
#include "../agent/internal.h"
#include "../client/diff.h"
#include "../client/pprofread.h"

#define PROG(name) TH_PROGS "/" name
#define CLI TH_BIN "/llgo-heap"
#define DIFF_N 4096L /* objects per phase of inuse_phases */
#define DIFF_ROWS 256 /* table rows parsed at most */

/* ---- two profiles of a real program ------------------------------------------------------- */

struct diff_fix {
	const char *dir; /* the daemon's folder */
	struct heapd d;
	struct th_proc p;
	char a[256], b[256]; /* base (first phase) and new (second phase) */
};

static void diff_snapshot(struct diff_fix *f, const char *file)
{
	char *out = NULL;
	int rc = th_sh(&out, CLI " snapshot %d -o %s --socket %s", (int)f->p.pid, file, f->d.sock);
	cr_assert_eq(rc, 0, "snapshot: %s", out);
	free(out);
}

/* inuse_phases at rate 1: a.pb.gz after its first phase (DIFF_N x malloc(128) at
 * site_before, kept), b.pb.gz after its second (those freed, DIFF_N x malloc(256) at
 * site_after, kept). The program is left waiting in its second phase. */
static void diff_fix_start(struct diff_fix *f)
{
	memset(f, 0, sizeof(*f));
	char n[32];
	snprintf(n, sizeof(n), "%ld", DIFF_N);
	th_run_start(&f->d, NULL, &f->p, "1", 0, (char *[]){ PROG("inuse_phases"), "rate", n, NULL },
		     NULL, 60000);
	f->dir = f->d.dir;
	snprintf(f->a, sizeof(f->a), "%s/a.pb.gz", f->dir);
	snprintf(f->b, sizeof(f->b), "%s/b.pb.gz", f->dir);
	diff_snapshot(f, f->a);
	th_ask(&f->p, "go", 60000); /* the second phase ends */
	diff_snapshot(f, f->b);
}

static void diff_fix_stop(struct diff_fix *f)
{
	th_wait(&f->p, 60000);
	heapd_cleanup(&f->d);
}

/* ---- the table ---------------------------------------------------------------------------- */

struct diff_trow {
	char change[32], pct[32], base[32], cur[32], other[32];
	char site[256];
};

struct diff_tab {
	size_t shown, changed;           /* "N of M changed sites" */
	char total[2][256];               /* the two "total ..." lines */
	struct diff_trow rows[DIFF_ROWS];
	int n;
};

static void diff_parse(const char *out, struct diff_tab *t)
{
	memset(t, 0, sizeof(*t));
	const char *h = strstr(out, "llgo-heap: growth by ");
	cr_assert(h != NULL, "no header:\n%s", out);
	const char *of = strstr(h, " changed sites");
	cr_assert(of != NULL, "no site count:\n%s", out);
	while (of > h && of[-1] != ':')
		of--;
	cr_assert_eq(sscanf(of, " %zu of %zu", &t->shown, &t->changed), 2, "%s", out);
	const char *line = strchr(h, '\n');
	for (int k = 0; k < 2 && line; k++) {
		line++;
		const char *nl = strchr(line, '\n');
		cr_assert(nl && strncmp(line, "total ", 6) == 0, "no total line %d:\n%s", k, out);
		snprintf(t->total[k], sizeof(t->total[k]), "%.*s", (int)(nl - line), line);
		line = nl;
	}
	line = strstr(out, "change  % of base");
	cr_assert(line != NULL, "no column header:\n%s", out);
	for (line = strchr(line, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
		struct diff_trow *r = &t->rows[t->n];
		int off = 0;
		if (sscanf(line + 1, "%31s %31s %31s %31s %31s  %n", r->change, r->pct, r->base,
			   r->cur, r->other, &off) != 5 || off == 0)
			break;
		const char *site = line + 1 + off;
		const char *nl = strchr(site, '\n');
		snprintf(r->site, sizeof(r->site), "%.*s", (int)(nl ? nl - site : (long)strlen(site)),
			 site);
		if (++t->n == DIFF_ROWS)
			break;
	}
}

static const struct diff_trow *diff_row(const struct diff_tab *t, const char *site_prefix)
{
	for (int i = 0; i < t->n; i++)
		if (strncmp(t->rows[i].site, site_prefix, strlen(site_prefix)) == 0)
			return &t->rows[i];
	return NULL;
}

/* `llgo-heap diff` with options; its table parsed into t. */
static void diff_run(struct diff_tab *t, const char *base, const char *cur, const char *opts)
{
	char *out = NULL;
	int rc = th_sh(&out, CLI " diff %s %s %s", base, cur, opts);
	cr_assert_eq(rc, 0, "diff %s failed:\n%s", opts, out);
	diff_parse(out, t);
	free(out);
}

static void diff_expect_row(const struct diff_tab *t, const char *site, const char *change,
			    const char *base, const char *cur, const char *other, const char *what)
{
	const struct diff_trow *r = diff_row(t, site);
	cr_assert(r != NULL, "%s: no row for %s", what, site);
	cr_expect_str_eq(r->change, change, "%s: %s change", what, site);
	cr_expect_str_eq(r->base, base, "%s: %s base", what, site);
	cr_expect_str_eq(r->cur, cur, "%s: %s new", what, site);
	cr_expect_str_eq(r->other, other, "%s: %s companion change", what, site);
}

#define BEFORE "site_before inuse_phases.c:"
#define AFTER "site_after inuse_phases.c:"

Test(diff, growth_per_site_exact_at_rate_1, .timeout = 300)
{
	struct diff_fix f;
	diff_fix_start(&f);
	struct diff_tab t;
	char big[32], small[32], nb[32], nsb[32], mb[32], msb[32], n[32], mn[32];
	snprintf(big, sizeof(big), "%ld", DIFF_N * 256);
	snprintf(small, sizeof(small), "%ld", DIFF_N * 128);
	snprintf(nb, sizeof(nb), "+%ld", DIFF_N * 256);
	snprintf(nsb, sizeof(nsb), "+%ld", DIFF_N * 128);
	snprintf(mb, sizeof(mb), "-%ld", DIFF_N * 256);
	snprintf(msb, sizeof(msb), "-%ld", DIFF_N * 128);
	snprintf(n, sizeof(n), "+%ld", DIFF_N);
	snprintf(mn, sizeof(mn), "-%ld", DIFF_N);
	char sn[32];
	snprintf(sn, sizeof(sn), "%ld", DIFF_N);

	/* in use: one site grew by N x 256 B, the other shrank by N x 128 B (all freed) */
	diff_run(&t, f.a, f.b, "--inuse --exact -n 100");
	cr_expect_eq(t.changed, 2, "inuse_space: %zu changed sites", t.changed);
	cr_expect_eq(t.n, 2);
	diff_expect_row(&t, AFTER, nb, "0", big, n, "inuse_space");
	diff_expect_row(&t, BEFORE, msb, small, "0", mn, "inuse_space");
	cr_expect_str_eq(t.rows[0].site, diff_row(&t, AFTER)->site, "largest change first");
	char want[64];
	snprintf(want, sizeof(want), "change %s (", nsb);
	cr_expect(strstr(t.total[0], want) != NULL, "total: %s", t.total[0]);
	cr_expect(strstr(t.total[1], "change +0 (") != NULL, "objects total: %s", t.total[1]);
	/* % of base: the row's change over the base's total */
	long long base_total;
	cr_assert_eq(sscanf(t.total[0], "total inuse_space: base %lld", &base_total), 1);
	char pct[32];
	snprintf(pct, sizeof(pct), "%+.2f%%", -100.0 * (double)(DIFF_N * 128) / (double)base_total);
	cr_expect_str_eq(diff_row(&t, BEFORE)->pct, pct);

	diff_run(&t, f.a, f.b, "--inuse --objects --exact");
	cr_expect_eq(t.changed, 2);
	diff_expect_row(&t, AFTER, n, "0", sn, nb, "inuse_objects");
	diff_expect_row(&t, BEFORE, mn, sn, "0", msb, "inuse_objects");

	/* allocated: only the second phase allocated between the two */
	diff_run(&t, f.a, f.b, "--exact");
	cr_expect_eq(t.changed, 1, "alloc_space: %zu changed sites", t.changed);
	diff_expect_row(&t, AFTER, nb, "0", big, n, "alloc_space");
	diff_run(&t, f.a, f.b, "--objects --exact");
	diff_expect_row(&t, AFTER, n, "0", sn, nb, "alloc_objects");

	/* human units by default; a diff the other way round is the negation */
	diff_run(&t, f.a, f.b, "--inuse");
	diff_expect_row(&t, AFTER, "+1.0MiB", "0B", "1.0MiB", n, "human");
	diff_expect_row(&t, BEFORE, "-512.0KiB", "512.0KiB", "0B", mn, "human");
	diff_run(&t, f.b, f.a, "--inuse --exact");
	diff_expect_row(&t, AFTER, mb, big, "0", mn, "reversed");
	/* a profile minus itself: nothing changed */
	diff_run(&t, f.b, f.b, "--inuse");
	cr_expect_eq(t.changed, 0);
	cr_expect_eq(t.n, 0);
	diff_fix_stop(&f);
}

/* ---- go tool pprof -base ----------------------------------------------------------------- */

struct diff_pprow {
	char site[256];
	long long flat;
};

/* Rows of `go tool pprof -top -lines` with a non-zero flat value, named as diff names sites
 * (the file's base name). Returns their number. */
static int diff_pprof(const char *dir, const char *args, struct diff_pprow *rows, int max)
{
	char *out = NULL;
	int rc = th_pprof(&out, dir, "-top -lines "
			"-nodefraction=0 -nodecount=100000 %s", args);
	cr_assert_eq(rc, 0, "go tool pprof %s:\n%s", args, out);
	const char *line = strstr(out, "      flat  flat%");
	cr_assert(line != NULL, "go tool pprof %s:\n%s", args, out);
	int n = 0;
	for (line = strchr(line, '\n'); line && line[1] && n < max; line = strchr(line + 1, '\n')) {
		char flat[64], a[32], b[32], c[32], d[32];
		int off = 0;
		if (sscanf(line + 1, "%63s %31s %31s %31s %31s %n", flat, a, b, c, d, &off) != 5)
			break;
		long long v = strtoll(flat, NULL, 10); /* "1048576B", "-4096", "0" */
		if (v == 0)
			continue;
		const char *name = line + 1 + off;
		const char *nl = strchr(name, '\n');
		int len = (int)(nl ? nl - name : (long)strlen(name));
		if (len > 9 && memcmp(name + len - 9, " (inline)", 9) == 0)
			len -= 9; /* an inlined frame; diff names it without the mark */
		/* "func /path/file.c:31" -> "func file.c:31" */
		const char *sp = memrchr(name, ' ', (size_t)len);
		const char *slash = sp ? memrchr(sp, '/', (size_t)(name + len - sp)) : NULL;
		if (slash)
			snprintf(rows[n].site, sizeof(rows[n].site), "%.*s %.*s", (int)(sp - name),
				 name, (int)(name + len - slash - 1), slash + 1);
		else
			snprintf(rows[n].site, sizeof(rows[n].site), "%.*s", len, name);
		rows[n++].flat = v;
	}
	free(out);
	return n;
}

/* diff BASE NEW and its -o profile against go tool pprof -base BASE NEW, in all four views:
 * the same changed sites with the same changes. */
static void diff_agree(const char *dir, const char *base, const char *cur)
{
	char dpath[300];
	snprintf(dpath, sizeof(dpath), "%s/d.pb.gz", dir);
	char *out = NULL;
	int rc = th_sh(&out, CLI " diff %s %s -o %s >/dev/null", base, cur, dpath);
	cr_assert_eq(rc, 0, "diff -o: %s", out);
	cr_expect(strstr(out, "wrote ") != NULL, "%s", out);
	free(out);

	static const struct {
		const char *index, *opts, *unit;
	} views[] = {
		{ "alloc_space", "", "-unit=B" },
		{ "alloc_objects", "--objects", "" },
		{ "inuse_space", "--inuse", "-unit=B" },
		{ "inuse_objects", "--inuse --objects", "" },
	};
	for (size_t v = 0; v < sizeof(views) / sizeof(views[0]); v++) {
		static struct diff_pprow pb[DIFF_ROWS], pd[DIFF_ROWS];
		char args[1024];
		snprintf(args, sizeof(args), "-sample_index=%s %s -base %s %s", views[v].index,
			 views[v].unit, base, cur);
		int nb = diff_pprof(dir, args, pb, DIFF_ROWS);
		snprintf(args, sizeof(args), "-sample_index=%s %s %s", views[v].index,
			 views[v].unit, dpath);
		int nd = diff_pprof(dir, args, pd, DIFF_ROWS);
		char opts[128];
		snprintf(opts, sizeof(opts), "%s --exact -n 1000", views[v].opts);
		static struct diff_tab t;
		diff_run(&t, base, cur, opts);

		cr_expect(nb > 0, "%s: pprof -base shows no change", views[v].index);
		cr_expect_eq(nd, nb, "%s: pprof shows %d sites in the diff profile, %d with -base",
			     views[v].index, nd, nb);
		cr_expect_eq((int)t.changed, nb, "%s: diff lists %zu changed sites, pprof -base %d",
			     views[v].index, t.changed, nb);
		for (int i = 0; i < nb; i++) {
			bool in_d = false;
			for (int k = 0; k < nd; k++)
				in_d |= strcmp(pd[k].site, pb[i].site) == 0 && pd[k].flat == pb[i].flat;
			cr_expect(in_d, "%s: %s %lld (pprof -base) not so in the diff profile",
				  views[v].index, pb[i].site, pb[i].flat);
			const struct diff_trow *r = diff_row(&t, pb[i].site);
			cr_expect(r != NULL, "%s: pprof -base shows %s, diff does not", views[v].index,
				  pb[i].site);
			if (r)
				cr_expect_eq(strtoll(r->change, NULL, 10), pb[i].flat,
					     "%s: %s: diff %s, pprof -base %lld", views[v].index,
					     pb[i].site, r->change, pb[i].flat);
		}
	}
}

Test(diff, agrees_with_go_tool_pprof_base, .timeout = 600)
{
	struct diff_fix f;
	diff_fix_start(&f);
	diff_agree(f.dir, f.a, f.b);
	diff_fix_stop(&f);
}

/* Go's own heap profiles (runtime/pprof's encoder, MemProfileRate 1): a Go program keeps
 * 1000 then 4000 objects at one line; diff sees 3000 more there, and agrees with pprof (the
 * encoder's own allocations, inlined frames among them, differ between the two too). */
Test(diff, reads_go_runtime_heap_profiles, .timeout = 600)
{
	static const char prog[] =
		"package main\n"
		"\n"
		"import (\n"
		"\t\"os\"\n"
		"\t\"runtime\"\n"
		"\t\"runtime/pprof\"\n"
		")\n"
		"\n"
		"var keep [][]byte\n"
		"\n"
		"//go:noinline\n"
		"func grow(n int) {\n"
		"\tfor i := 0; i < n; i++ {\n"
		"\t\tkeep = append(keep, make([]byte, 1000))\n"
		"\t}\n"
		"}\n"
		"\n"
		"func write(name string) {\n"
		"\truntime.GC()\n"
		"\truntime.GC()\n"
		"\tf, _ := os.Create(name)\n"
		"\tpprof.WriteHeapProfile(f)\n"
		"\tf.Close()\n"
		"}\n"
		"\n"
		"func main() {\n"
		"\truntime.MemProfileRate = 1\n"
		"\tgrow(1000)\n"
		"\twrite(\"g1.pb.gz\")\n"
		"\tgrow(3000)\n"
		"\twrite(\"g2.pb.gz\")\n"
		"}\n";
	char *dir = th_tmpdir();
	char path[512];
	snprintf(path, sizeof(path), "%s/main.go", dir);
	th_write_bytes(path, prog, sizeof(prog) - 1);
	char *out = NULL;
	int rc = th_sh(&out, "cd %s && HOME=%s GOCACHE=%s/gocache GO111MODULE=off GOFLAGS= "
			"go build -o gprog main.go && ./gprog", dir, dir, dir);
	cr_assert_eq(rc, 0, "go build/run: %s", out);
	free(out);
	char g1[512], g2[512];
	snprintf(g1, sizeof(g1), "%s/g1.pb.gz", dir);
	snprintf(g2, sizeof(g2), "%s/g2.pb.gz", dir);
	static struct diff_tab t;
	diff_run(&t, g1, g2, "--inuse --objects --exact");
	const struct diff_trow *r = diff_row(&t, "main.grow main.go:14");
	cr_assert(r != NULL, "no main.grow main.go:14 row");
	/* the objects made, and in both profiles the slice's backing array (append); Go's
	 * profile is as of its last finished GC cycle, which may still count one backing array
	 * that append replaced */
	long change = strtol(r->change, NULL, 10), base = strtol(r->base, NULL, 10),
	     cur = strtol(r->cur, NULL, 10);
	cr_expect(change >= 2999 && change <= 3001, "change %s, want 3000 +- 1", r->change);
	cr_expect(base >= 1001 && base <= 1002, "base %s, want 1001 or 1002", r->base);
	cr_expect(cur >= 4001 && cur <= 4002, "cur %s, want 4001 or 4002", r->cur);
	cr_expect_eq(cur - base, change, "%s - %s != %s", r->cur, r->base, r->change);
	diff_agree(dir, g1, g2);
	th_rmdir(dir);
}

/* ---- top --base -------------------------------------------------------------------------- */

Test(diff, top_base_is_the_running_process_minus_the_file, .timeout = 300)
{
	struct diff_fix f;
	diff_fix_start(&f);
	struct diff_tab want, got;
	diff_run(&want, f.a, f.b, "--inuse --exact -n 100");
	char *out = NULL;
	int rc = th_sh(&out, CLI " top %d --base %s --inuse --exact -n 100 --socket %s 2>/dev/null",
			(int)f.p.pid, f.a, f.d.sock);
	cr_assert_eq(rc, 0, "top --base: %s", out);
	char name[64];
	snprintf(name, sizeof(name), "to pid %d now:", (int)f.p.pid);
	cr_expect(strstr(out, name) != NULL, "header does not name the process:\n%s", out);
	diff_parse(out, &got);
	free(out);
	cr_expect_eq(got.changed, want.changed);
	cr_expect_eq(got.n, want.n);
	for (int i = 0; i < want.n && i < got.n; i++) {
		cr_expect_str_eq(got.rows[i].site, want.rows[i].site);
		cr_expect_str_eq(got.rows[i].change, want.rows[i].change, "%s", want.rows[i].site);
		cr_expect_str_eq(got.rows[i].other, want.rows[i].other, "%s", want.rows[i].site);
	}
	cr_expect_str_eq(got.total[0], want.total[0]);
	diff_expect_row(&got, AFTER, "+1048576", "0", "1048576", "+4096", "top --base");

	/* --base does not go with --watch; --exact only with --base */
	rc = th_sh(&out, CLI " top %d --base %s --watch --socket %s", (int)f.p.pid, f.a, f.d.sock);
	cr_expect_eq(rc, 2, "%s", out);
	free(out);
	rc = th_sh(&out, CLI " top %d --exact --socket %s", (int)f.p.pid, f.d.sock);
	cr_expect_eq(rc, 2, "%s", out);
	free(out);
	diff_fix_stop(&f);
}

/* ---- hostile files ------------------------------------------------------------------------- */

static void t_varint(struct buf *b, uint64_t v)
{
	do {
		unsigned char c = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		buf_append(b, &c, 1);
		v >>= 7;
	} while (v);
}

static void t_field(struct buf *b, uint32_t num, uint64_t v)
{
	t_varint(b, (uint64_t)num << 3);
	t_varint(b, v);
}

static void t_bytes(struct buf *b, uint32_t num, const void *p, size_t n)
{
	t_varint(b, (uint64_t)num << 3 | 2);
	t_varint(b, n);
	buf_append(b, p, n);
}

/* A heap profile (Go's four sample types) of n samples without locations (the site
 * "[no stack]"), values v[i]; with type_name, one sample type of that name instead. */
static void t_heap(struct buf *out, const int64_t (*v)[4], size_t n, const char *type_name)
{
	const char *strs[] = { "", "alloc_objects", "count", "alloc_space", "bytes",
			       "inuse_objects", "inuse_space", type_name ? type_name : "" };
	static const int types[4][2] = { { 1, 2 }, { 3, 4 }, { 5, 2 }, { 6, 4 } };
	struct buf m;
	buf_init(&m);
	for (int k = 0; k < (type_name ? 1 : 4); k++) {
		t_field(&m, 1, type_name ? 7 : (uint64_t)types[k][0]);
		t_field(&m, 2, (uint64_t)types[k][1]);
		t_bytes(out, 1, m.data, m.len);
		buf_reset(&m);
	}
	for (size_t i = 0; i < n; i++) {
		for (int k = 0; k < (type_name ? 1 : 4); k++)
			t_field(&m, 2, (uint64_t)v[i][k]);
		t_bytes(out, 2, m.data, m.len);
		buf_reset(&m);
	}
	for (size_t s = 0; s < sizeof(strs) / sizeof(strs[0]); s++)
		t_bytes(out, 6, strs[s], strlen(strs[s]));
	buf_free(&m);
}

static void t_read(const char *path, struct buf *b)
{
	buf_init(b);
	FILE *fp = fopen(path, "rb");
	cr_assert(fp != NULL, "%s", path);
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof(tmp), fp)) > 0)
		buf_append(b, tmp, n);
	fclose(fp);
}

static void t_gzip(struct buf *out, const void *p, size_t n)
{
	cr_assert_eq(gzip_append(out, p, n, 6), 0);
}

/* gunzip whole with zlib (the test's own reading, not pprofread's) */
static void t_gunzip(const struct buf *in, struct buf *out)
{
	buf_init(out);
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	cr_assert_eq(inflateInit2(&zs, 15 + 16), Z_OK);
	zs.next_in = in->data;
	zs.avail_in = (uInt)in->len;
	int rc;
	do {
		buf_reserve(out, 65536);
		zs.next_out = out->data + out->len;
		zs.avail_out = (uInt)(out->cap - out->len);
		rc = inflate(&zs, Z_NO_FLUSH);
		out->len = out->cap - zs.avail_out;
	} while (rc == Z_OK);
	cr_assert_eq(rc, Z_STREAM_END);
	inflateEnd(&zs);
}

/* `llgo-heap diff` on path (as base, or new when !as_base): exit status 2, one line on
 * stderr naming the file and holding why. */
static void diff_refused(const char *valid, const char *path, bool as_base, const char *why)
{
	char *out = NULL;
	int rc = th_sh(&out, CLI " diff %s %s 2>&1 >/dev/null", as_base ? path : valid,
			as_base ? valid : path);
	cr_expect_eq(rc, 2, "%s: exit status %d:\n%s", path, rc, out);
	size_t lines = 0;
	for (char *c = out; *c; c++)
		lines += *c == '\n';
	char head[512];
	snprintf(head, sizeof(head), "llgo-heap: diff: %s: ", path);
	cr_expect(lines == 1 && strncmp(out, head, strlen(head)) == 0,
		  "%s: want one line '%s...', got:\n%s", path, head, out);
	cr_expect(strstr(out, why) != NULL, "%s: want '%s' in:\n%s", path, why, out);
	free(out);
}

Test(diff, hostile_files_exit_2_with_one_line, .timeout = 600)
{
	struct diff_fix f;
	diff_fix_start(&f);
	static const struct {
		const char *name, *why;
		const char *bytes;
		size_t len;
	} cases[] = {
		{ "empty", "empty profile", "", 0 },
		/* string_table entry of 4 GiB */
		{ "huge_length", "past the end of its message", "\x32\xff\xff\xff\xff\x0f", 6 },
		/* a varint of 11 bytes */
		{ "long_varint", "bad or truncated varint",
		  "\x48\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12 },
		{ "group", "wire type 3 not supported", "\x0b\x0c", 2 },
		{ "field_zero", "field number 0", "\x00\x00", 2 },
		/* sample_type {type: 5} with one string */
		{ "string_index", "string index 5 out of range", "\x32\x00\x0a\x02\x08\x05", 6 },
		{ "first_string", "string_table[0] must be \"\"", "\x32\x01x", 3 },
		/* a sample naming location 7, which does not exist */
		{ "location_id", "location id 7, which is not", "\x32\x00\x12\x02\x08\x07", 6 },
		{ "duplicate_id", "location id 1 appears twice",
		  "\x32\x00\x22\x02\x08\x01\x22\x02\x08\x01", 10 },
		{ "zero_id", "location id 0", "\x32\x00\x22\x00", 4 },
		/* a Line naming function 9, which does not exist */
		{ "function_id", "function id 9", "\x32\x00\x22\x06\x08\x01\x22\x02\x08\x09", 10 },
		/* one sample type, a sample with two values */
		{ "values", "more values than", "\x32\x00\x0a\x00\x12\x04\x10\x01\x10\x02", 10 },
		/* a Location of 3 bytes holding a Line of 100 */
		{ "nested_length", "past the end of its message", "\x32\x00\x22\x03\x22\x64\x08", 7 },
		/* a packed run of location ids ending inside a varint */
		{ "packed", "truncated packed varint", "\x32\x00\x12\x03\x0a\x01\x80", 7 },
		{ "wire_type", "has wire type 0", "\x32\x00\x08\x01", 4 },
		{ "legacy_text", "legacy text profile", "heap profile: 1: 2 [3: 4] @ heap/2\n", 35 },
		{ "bad_gzip", "bad gzip data", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff", 12 },
		{ "short_gzip", "gzip data ends early", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10 },
	};
	char path[512];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", f.dir, cases[i].name);
		th_write_bytes(path, cases[i].bytes, cases[i].len);
		diff_refused(f.a, path, i % 2 == 0, cases[i].why);
	}

	/* random bytes, gzipped random bytes */
	unsigned char rnd[4096];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < sizeof(rnd); i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		rnd[i] = (unsigned char)x;
	}
	rnd[0] = 0x0a; /* not 1f 8b */
	snprintf(path, sizeof(path), "%s/random", f.dir);
	th_write_bytes(path, rnd, sizeof(rnd));
	diff_refused(f.a, path, true, "malformed profile");
	struct buf gz;
	buf_init(&gz);
	t_gzip(&gz, rnd, sizeof(rnd));
	snprintf(path, sizeof(path), "%s/random.gz", f.dir);
	th_write_bytes(path, gz.data, gz.len);
	diff_refused(f.a, path, false, "malformed profile");

	/* a real profile with something after its gzip stream; cut in half */
	struct buf real;
	t_read(f.a, &real);
	buf_reset(&gz);
	buf_append(&gz, real.data, real.len);
	buf_append(&gz, "junk", 4);
	snprintf(path, sizeof(path), "%s/trailing.gz", f.dir);
	th_write_bytes(path, gz.data, gz.len);
	diff_refused(f.a, path, true, "4 bytes of data after the gzip stream");
	snprintf(path, sizeof(path), "%s/half.gz", f.dir);
	th_write_bytes(path, real.data, real.len / 2);
	diff_refused(f.a, path, false, "gzip data ends early");

	/* a profile that is not a heap profile */
	struct buf cpu;
	buf_init(&cpu);
	static const int64_t one[1][4] = { { 1, 0, 0, 0 } };
	t_heap(&cpu, one, 1, "samples");
	snprintf(path, sizeof(path), "%s/cpu.pb", f.dir);
	th_write_bytes(path, cpu.data, cpu.len);
	char *out = NULL;
	int rc = th_sh(&out, CLI " diff %s %s 2>&1 >/dev/null", path, f.a);
	cr_expect_eq(rc, 2, "%s", out);
	cr_expect(strstr(out, "has no alloc_space/bytes values (not a heap profile?)") != NULL,
		  "%s", out);
	free(out);

	/* a file that is not there, a folder, a missing argument, -o over profiles pprof
	 * could not subtract */
	snprintf(path, sizeof(path), "%s/missing.pb.gz", f.dir);
	diff_refused(f.a, path, true, "cannot open: No such file or directory");
	diff_refused(f.a, f.dir, false, "cannot read: Is a directory");
	rc = th_sh(&out, CLI " diff %s", f.a);
	cr_expect_eq(rc, 2, "%s", out);
	cr_expect(strstr(out, "expected two pprof files") != NULL, "%s", out);
	free(out);
	struct buf heap;
	buf_init(&heap);
	t_heap(&heap, one, 1, NULL);
	char hpath[512], dpath[512];
	snprintf(hpath, sizeof(hpath), "%s/heap.pb", f.dir);
	snprintf(dpath, sizeof(dpath), "%s/d.pb.gz", f.dir);
	th_write_bytes(hpath, heap.data, heap.len);
	rc = th_sh(&out, CLI " diff %s %s -o %s 2>&1 >/dev/null", hpath, f.a, dpath);
	cr_expect_eq(rc, 2, "%s", out);
	cr_expect(strstr(out, "different sample or period types") != NULL, "%s", out);
	cr_expect(access(dpath, F_OK) != 0, "a diff profile was written anyway");
	free(out);

	buf_free(&heap);
	buf_free(&cpu);
	buf_free(&real);
	buf_free(&gz);
	diff_fix_stop(&f);
}

/* More than PPROFREAD_MAX_BYTES once decompressed (from a file of a few hundred KiB), and a
 * file larger than that as it is: refused without reading it all into memory. */
Test(diff, oversized_files_are_refused, .timeout = 300)
{
	char *dir = th_tmpdir();
	struct buf heap;
	buf_init(&heap);
	static const int64_t one[1][4] = { { 1, 16, 1, 16 } };
	t_heap(&heap, one, 1, NULL);
	char valid[512], path[512];
	snprintf(valid, sizeof(valid), "%s/heap.pb", dir);
	th_write_bytes(valid, heap.data, heap.len);

	size_t big = (size_t)PPROFREAD_MAX_BYTES + 4096;
	unsigned char *zeros = calloc(1, big);
	cr_assert(zeros != NULL);
	struct buf gz;
	buf_init(&gz);
	t_gzip(&gz, zeros, big);
	snprintf(path, sizeof(path), "%s/bomb.gz", dir);
	th_write_bytes(path, gz.data, gz.len);
	diff_refused(valid, path, true, "more than 256 MiB once decompressed");
	/* an uncompressed file over the cap: a FIFO, so its size is not known beforehand */
	snprintf(path, sizeof(path), "%s/big.fifo", dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	pid_t w = th_fork();
	if (w == 0) {
		int fd = open(path, O_WRONLY);
		size_t off = 0;
		zeros[0] = 0x0a;
		while (fd >= 0 && off < big) {
			ssize_t n = write(fd, zeros + off, big - off > 65536 ? 65536 : big - off);
			if (n <= 0)
				break;
			off += (size_t)n;
		}
		_exit(0);
	}
	diff_refused(valid, path, false, "larger than 256 MiB");
	kill(w, SIGKILL); /* our writer, if it still waits */
	int st;
	waitpid(w, &st, 0);
	free(zeros);
	buf_free(&gz);
	buf_free(&heap);
	th_rmdir(dir);
}

/* Values at the int64 limits: sums and changes saturate (UBSan-clean in the SAN builds). */
Test(diff, extreme_values_saturate, .timeout = 60)
{
	char *dir = th_tmpdir();
	static const int64_t hi[2][4] = { { INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX },
					  { INT64_MAX, INT64_MAX, 1, 1 } };
	static const int64_t lo[2][4] = { { INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN },
					  { -1, -1, -1, -1 } };
	struct buf a, b;
	buf_init(&a);
	buf_init(&b);
	t_heap(&a, lo, 2, NULL);
	t_heap(&b, hi, 2, NULL);
	char pa[512], pb[512], pd[512];
	snprintf(pa, sizeof(pa), "%s/lo.pb", dir);
	snprintf(pb, sizeof(pb), "%s/hi.pb", dir);
	snprintf(pd, sizeof(pd), "%s/d.pb.gz", dir);
	th_write_bytes(pa, a.data, a.len);
	th_write_bytes(pb, b.data, b.len);
	struct diff_tab t;
	diff_run(&t, pa, pb, "--exact");
	diff_expect_row(&t, "[no stack]", "+9223372036854775807", "-9223372036854775808",
			"9223372036854775807", "+9223372036854775807", "saturated");
	char *out = NULL;
	int rc = th_sh(&out, CLI " diff %s %s --inuse -o %s", pb, pa, pd);
	cr_expect_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "-9223372036854775808") || strstr(out, "EiB"), "%s", out);
	free(out);
	buf_free(&a);
	buf_free(&b);
	th_rmdir(dir);
}

/* ---- in process: every truncation, thousands of mutations -------------------------------- */

/* What decodes diffs against the real profile both ways, and the diff profile decodes. */
static void diff_roundtrip(const struct pprofread *real, const struct pprofread *m)
{
	struct diff_opts o = { .exact = true, .top_n = 5, .base_name = "a", .new_name = "b" };
	char err[256];
	for (int k = 0; k < 4; k++) {
		o.inuse = k & 1;
		o.objects = k & 2;
		struct buf t;
		buf_init(&t);
		if (diff_table(&t, real, m, &o, err, sizeof(err)) == 0)
			cr_assert(t.len > 0);
		else
			cr_assert(strstr(err, "has no ") != NULL, "diff_table: %s", err);
		buf_free(&t);
	}
	for (int dir = 0; dir < 2; dir++) {
		struct buf d;
		buf_init(&d);
		const struct pprofread *base = dir ? m : real, *cur = dir ? real : m;
		if (diff_profile(&d, base, cur, "c", err, sizeof(err)) == 0) {
			struct pprofread back;
			cr_assert_eq(pprofread_load(&back, d.data, d.len, err, sizeof(err)), 0,
				     "the diff profile does not decode: %s", err);
			cr_assert_eq(back.nsamples, base->nsamples + cur->nsamples);
			for (size_t s = 0; s < base->nsamples * base->ntypes; s++)
				cr_assert_eq(back.values[cur->nsamples * cur->ntypes + s],
					     (int64_t)((uint64_t)0 - (uint64_t)base->values[s]));
			pprofread_free(&back);
		}
		buf_free(&d);
	}
}

Test(diff, truncations_and_mutations_in_process, .timeout = 600)
{
	struct diff_fix f;
	diff_fix_start(&f);
	struct buf gz, raw;
	t_read(f.b, &gz);
	t_gunzip(&gz, &raw);
	char err[256];
	struct pprofread real, p;
	cr_assert_eq(pprofread_load(&real, raw.data, raw.len, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(real.ntypes, 4);
	diff_roundtrip(&real, &real);

	/* every proper prefix of the protobuf and of its gzip file is refused, with a reason */
	const struct buf *whole[2] = { &raw, &gz };
	for (int w = 0; w < 2; w++) {
		for (size_t n = 0; n < whole[w]->len; n++) {
			err[0] = '\0';
			int rc = pprofread_load(&p, whole[w]->data, n, err, sizeof(err));
			cr_assert_eq(rc, -1, "%s prefix of %zu of %zu bytes decoded", w ? "gzip" :
				     "protobuf", n, whole[w]->len);
			cr_assert(err[0] != '\0');
		}
	}

	/* mutations: bytes overwritten, inserted, removed */
	uint64_t x = 0x243f6a8885a308d3ull;
	size_t decoded = 0;
	struct buf m;
	buf_init(&m);
	for (int i = 0; i < 20000; i++) {
		buf_reset(&m);
		buf_append(&m, raw.data, raw.len);
		for (int k = 0, nk = 1 + i % 4; k < nk; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			size_t at = (size_t)(x >> 16) % m.len;
			unsigned char v = (unsigned char)x;
			if (x % 7 == 0 && m.len > 1) {
				memmove(m.data + at, m.data + at + 1, m.len - at - 1);
				m.len--;
			} else if (x % 7 == 1) {
				buf_putc(&m, 0);
				memmove(m.data + at + 1, m.data + at, m.len - at - 1);
				m.data[at] = v;
			} else {
				m.data[at] = (x % 7 == 2) ? 0xff : v;
			}
		}
		err[0] = '\0';
		if (pprofread_load(&p, m.data, m.len, err, sizeof(err)) != 0) {
			cr_assert(err[0] != '\0');
			continue;
		}
		decoded++;
		diff_roundtrip(&real, &p);
		pprofread_free(&p);
	}
	cr_log_info("%zu of 20000 mutations decoded", decoded);
	cr_expect(decoded > 0, "no mutation decoded: the round trip was never tried");
	buf_free(&m);
	pprofread_free(&real);
	buf_free(&raw);
	buf_free(&gz);
	diff_fix_stop(&f);
}
