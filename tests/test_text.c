// SPDX-License-Identifier: MIT
/*
 * test_text.c: Go's legacy heap text (text.c) on a profile built by hand from return
 * addresses of real functions in this binary. Checked three ways: field by field here,
 * byte for byte against Go's own text/tabwriter for the frame comment lines, and by the
 * real client (`go tool pprof -raw` and `-top` through pprof's legacy heap parser, which
 * symbolizes from the MAPPED_LIBRARIES section).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../agent/internal.h"
#include "helpers.h"

static struct psample ps(const struct stack *st, uint64_t size, uint64_t rate, uint64_t ao,
			 uint64_t fo)
{
	return (struct psample){ st, size, rate, ao, ao * size, fo, fo * size };
}

struct fixture {
	struct stack *big, *small, *inl, *empty;
	struct psample s[8];
	struct profile p;
	struct procmaps *maps;
	struct buf text;
	char *dir, *path;
};

static void fixture_init(struct fixture *f, bool mixed)
{
	memset(f, 0, sizeof(*f));
	f->big = th_pc_stack(0);
	f->small = th_pc_stack(1);
	f->inl = th_pc_stack(2);
	f->empty = th_stack(NULL, 0);
	size_t n = 0;
	f->s[n++] = ps(f->big, 100000, 524288, 40, 10);
	if (mixed)
		f->s[n++] = ps(f->big, 100000, 65536, 7, 0);
	f->s[n++] = ps(f->small, 24, 524288, 3, 1);
	f->s[n++] = ps(f->small, 48, 524288, 0, 0); /* zero */
	f->s[n++] = ps(f->inl, 4096, 524288, 20, 0);
	f->s[n] = ps(f->small, 32, 524288, 0, 0);
	f->s[n++].alloc_bytes = 320; /* count 0 with bytes: pprof would reject it raw */
	f->s[n] = ps(f->empty, 0, 524288, 2, 0);
	f->s[n++].alloc_bytes = 3000;
	f->p.samples = f->s;
	f->p.nsamples = n;
	f->p.meta = (struct profile_meta){ .pid = getpid(), .comm = "test_text", .rate = 524288,
					   .sampled = 80, .delivered = 75, .dropped = 5 };
	f->maps = procmaps_new(getpid());
	cr_assert(f->maps);
	buf_init(&f->text);
	cr_assert_eq(text_write(&f->text, &f->p, f->maps), 0);
	cr_assert_eq(buf_putc(&f->text, '\0'), 0);
	f->text.len--;
	f->dir = th_tmpdir();
	cr_assert(asprintf(&f->path, "%s/heap.txt", f->dir) > 0);
	FILE *fp = fopen(f->path, "w");
	cr_assert(fp);
	fputs((char *)f->text.data, fp);
	fclose(fp);
}

static void fixture_fini(struct fixture *f)
{
	procmaps_free(f->maps);
	free(f->big);
	free(f->small);
	free(f->inl);
	free(f->empty);
	buf_free(&f->text);
	th_rmdir(f->dir);
	free(f->path);
}

Test(text, header_records_and_frames)
{
	struct fixture f;
	fixture_init(&f, false);
	const char *s = (const char *)f.text.data;
	/* raw totals: inuse 30+2+20+2 objects, alloc 40+3+20+2 */
	long long io = 30 + 2 + 20 + 2, ib = 30 * 100000 + 2 * 24 + 20 * 4096 + 3000;
	long long ao = 40 + 3 + 20 + 2, ab = 40 * 100000 + 3 * 24 + 20 * 4096 + 3000;
	char want[256];
	snprintf(want, sizeof(want), "heap profile: %lld: %lld [%lld: %lld] @ heap/1048576\n", io,
		 ib, ao, ab);
	cr_expect_eq(strncmp(s, want, strlen(want)), 0, "want %s got\n%s", want, s);
	const char *acct = "# llgo-heap: sampled=80 delivered=75 dropped=5 corrupt=0\n";
	cr_expect_eq(strncmp(s + strlen(want), acct, strlen(acct)), 0, "%s", s);
	cr_expect(!strstr(s, "several rates"));

	static struct th_text_rec recs[32];
	long period;
	int n = th_parse_text(s, &period, recs, 32);
	cr_expect_eq(period, 1048576);
	cr_assert_eq(n, 6, "%s", s);
	/* sorted by in-use bytes */
	for (int i = 1; i < n; i++)
		cr_expect_geq(recs[i - 1].inuse_bytes, recs[i].inuse_bytes);
	cr_expect_str_eq(recs[0].frame0, "th_pc_site_a");
	cr_expect_eq(recs[0].alloc_objects, 40);
	cr_expect_eq(recs[0].inuse_bytes, 30 * 100000);
	cr_expect_str_eq(recs[1].frame0, "th_pc_inlined");
	/* the count-0 record has 0 bytes */
	cr_expect(strstr(s, "\n0: 0 [0: 0] @ 0x"), "%s", s);
	cr_expect(!strstr(s, "[0: 320]"));
	/* the overflow bucket: no addresses */
	cr_expect(strstr(s, "\n2: 3000 [2: 3000] @\n\n"), "%s", s);

	/* The record line carries the raw return addresses; the frame lines pc-1, the
	 * function and offset from its entry, and file:line. */
	snprintf(want, sizeof(want), "] @ 0x%llx 0x%llx 0x%llx\n",
		 (unsigned long long)f.big->pcs[0], (unsigned long long)f.big->pcs[1],
		 (unsigned long long)f.big->pcs[2]);
	const char *rec = strstr(s, want);
	cr_assert(rec, "want %s in\n%s", want, s);
	snprintf(want, sizeof(want), "#\t0x%llx\tth_pc_site_a+0x%llx\t",
		 (unsigned long long)f.big->pcs[0] - 1,
		 (unsigned long long)(f.big->pcs[0] - 1 - (uint64_t)(uintptr_t)th_pc_site_a));
	cr_expect(strstr(rec, want), "want %s in\n%s", want, rec);
	snprintf(want, sizeof(want), "tests/helpers.c:%d\n", th_pc_site_a_call_line);
	cr_expect(strstr(rec, want), "want %s in\n%s", want, rec);
	/* the inlined frame and its caller, both at the same pc */
	snprintf(want, sizeof(want), "#\t0x%llx\tth_pc_inlined+0x",
		 (unsigned long long)f.inl->pcs[0] - 1);
	const char *inl = strstr(s, want);
	cr_assert(inl, "%s", s);
	snprintf(want, sizeof(want), "\n#\t0x%llx\tth_pc_site_with_a_much_longer_name_for_tabs+0x",
		 (unsigned long long)f.inl->pcs[0] - 1);
	cr_expect(strstr(inl, want) == strchr(inl, '\n'), "caller on the next line:\n%s", inl);

	/* MAPPED_LIBRARIES: this binary's line exactly as the kernel prints it. */
	const char *ml = strstr(s, "\n\nMAPPED_LIBRARIES:\n");
	cr_assert(ml, "%s", s);
	const struct mapping *m = procmaps_find(f.maps, (uint64_t)(uintptr_t)th_pc_site_a);
	char *maps = NULL; /* /proc files have no size: read through cat */
	cr_assert_eq(th_sh(&maps, "cat /proc/%d/maps", (int)getpid()), 0);
	snprintf(want, sizeof(want), "\n%08llx-", (unsigned long long)m->start);
	const char *line = strstr(maps, want);
	cr_assert(line);
	const char *eol = strchr(line + 1, '\n');
	cr_expect(memmem(ml, strlen(ml), line, (size_t)(eol - line + 1)) != NULL,
		  "want %.*s in\n%s", (int)(eol - line), line + 1, ml);
	free(maps);
	fixture_fini(&f);
}

/* Go's text/tabwriter over the same cells gives the same bytes. */
Test(text, frame_lines_match_go_tabwriter, .timeout = 180)
{
	struct fixture f;
	fixture_init(&f, false);
	char *src, *in, *out = NULL;
	cr_assert(asprintf(&src, "%s/tw.go", f.dir) > 0);
	FILE *fp = fopen(src, "w");
	fputs("package main\n\nimport (\n\t\"io\"\n\t\"os\"\n\t\"text/tabwriter\"\n)\n\n"
	      "func main() {\n\tb, _ := io.ReadAll(os.Stdin)\n"
	      "\tw := tabwriter.NewWriter(os.Stdout, 1, 8, 1, '\\t', 0)\n"
	      "\tw.Write(b)\n\tw.Flush()\n}\n", fp);
	fclose(fp);
	/* Cells as the writer got them: runs of tabs back to one tab. */
	cr_assert(asprintf(&in, "%s/cells.txt", f.dir) > 0);
	fp = fopen(in, "w");
	for (const char *c = (const char *)f.text.data; *c; c++) {
		fputc(*c, fp);
		while (c[0] == '\t' && c[1] == '\t')
			c++;
	}
	fclose(fp);
	int rc = th_sh(&out, "cd %s && HOME=%s GOCACHE=%s/gocache GOFLAGS=-mod=mod GOPROXY=off "
			      "go run tw.go < cells.txt > go.txt", f.dir, f.dir, f.dir);
	cr_assert_eq(rc, 0, "go run: %s", out);
	free(out);
	char *gopath;
	cr_assert(asprintf(&gopath, "%s/go.txt", f.dir) > 0);
	char *go = th_read_file(gopath);
	cr_assert(go);
	cr_expect_str_eq((const char *)f.text.data, go);
	cr_expect(strstr(go, "\t\t"), "the long name makes some cells take two tabs");
	free(go);
	free(gopath);
	free(in);
	free(src);
	fixture_fini(&f);
}

static bool has_scaled(const struct th_raw_sample *r, int n, long long ao, long long ab,
		       long long io, long long ib, uint64_t rate)
{
	int64_t v[4];
	profile_scale((uint64_t)ao, (uint64_t)ab, rate, &v[0], &v[1]);
	profile_scale((uint64_t)io, (uint64_t)ib, rate, &v[2], &v[3]);
	for (int i = 0; i < n; i++)
		if (r[i].v[0] == v[0] && r[i].v[1] == v[1] && r[i].v[2] == v[2] && r[i].v[3] == v[3])
			return true;
	return false;
}

Test(text, go_tool_pprof_parses_and_scales, .timeout = 180)
{
	struct fixture f;
	fixture_init(&f, false);
	char *out = NULL;
	int rc = th_pprof(&out, f.dir, "-raw heap.txt");
	cr_assert_eq(rc, 0, "go tool pprof -raw:\n%s\ninput:\n%s", out, (char *)f.text.data);
	cr_expect(strstr(out, "Period: 524288\n"), "heap/N is twice the rate:\n%s", out);
	cr_expect(strstr(out, "alloc_objects/count alloc_space/bytes inuse_objects/count "
			      "inuse_space/bytes"), "%s", out);
	struct th_raw_sample rs[16];
	int n = th_raw_samples(out, rs, 16);
	/* pprof drops the all-zero sample and the overflow one (no addresses). */
	cr_expect_eq(n, 3, "%s", out);
	cr_expect(has_scaled(rs, n, 40, 4000000, 30, 3000000, 524288), "big:\n%s", out);
	cr_expect(has_scaled(rs, n, 3, 72, 2, 48, 524288), "small:\n%s", out);
	cr_expect(has_scaled(rs, n, 20, 81920, 20, 81920, 524288), "inl:\n%s", out);
	/* symbolized by pprof from the binary named in MAPPED_LIBRARIES */
	cr_expect(strstr(out, "th_pc_site_a") && strstr(out, "th_pc_outer"), "%s", out);
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	cr_assert_gt(len, 0);
	self[len] = '\0';
	cr_expect(strstr(out, self), "mapping %s:\n%s", self, out);
	free(out);
	rc = th_pprof(&out, f.dir, "-top -sample_index=alloc_space heap.txt");
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "th_pc_site_a") && strstr(out, "th_pc_site_b"), "%s", out);
	free(out);
	fixture_fini(&f);
}

Test(text, mixed_rates_sum_raw_and_say_so, .timeout = 180)
{
	struct fixture f;
	fixture_init(&f, true);
	const char *s = (const char *)f.text.data;
	cr_expect(strstr(s, "\n# llgo-heap: samples were taken at several rates; this text states "
			    "one (524288) for all"), "%s", s);
	cr_expect(strstr(s, "\n37: 3700000 [47: 4700000] @ 0x"), "raw sums:\n%s", s);
	char *out = NULL;
	int rc = th_pprof(&out, f.dir, "-raw heap.txt");
	cr_assert_eq(rc, 0, "%s", out);
	struct th_raw_sample rs[16];
	int n = th_raw_samples(out, rs, 16);
	cr_expect(has_scaled(rs, n, 47, 4700000, 37, 3700000, 524288), "%s", out);
	free(out);
	fixture_fini(&f);
}

Test(text, rate_one_and_empty)
{
	struct profile p = { .meta = { .rate = 1 } };
	struct buf b;
	buf_init(&b);
	cr_assert_eq(text_write(&b, &p, NULL), 0);
	buf_putc(&b, '\0');
	cr_expect_str_eq((char *)b.data, "heap profile: 0: 0 [0: 0] @ heap/2\n"
					 "# llgo-heap: sampled=0 delivered=0 dropped=0 corrupt=0\n"
					 "\nMAPPED_LIBRARIES:\n");
	buf_free(&b);
}
