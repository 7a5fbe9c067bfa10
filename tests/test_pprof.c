// SPDX-License-Identifier: MIT
/*
 * test_pprof.c: the pprof, folded and top writers (and profile.c under them) on profiles
 * built by hand from return addresses of real functions in this binary, checked with the
 * real client: `go tool pprof -raw` and `-top` read what pprof_write produced. Covers
 * Go's scaling (each sample with its own rate, samples differing only by rate summed),
 * the label, the comments, inlined frames, an address no symbol covers, an address
 * outside every mapping, zero-count samples, deltas, and default_sample_type.
 */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../agent/output/snapshot.h"
#include "e2e_util.h"

#define KEEP(x) __asm__ volatile("" : : "r"(x) : "memory")
#define RET() ((uint64_t)(uintptr_t)__builtin_return_address(0))

/* ---- Stacks of real return addresses ------------------------------------------------- */

__attribute__((noinline)) void pp_capture(uint64_t *pcs)
{
	pcs[0] = RET();
	KEEP(pcs);
}

__attribute__((noinline)) void pp_site_a(uint64_t *pcs)
{
	pp_capture(pcs);
	pcs[1] = RET();
	KEEP(pcs);
}

__attribute__((noinline)) void pp_site_b(uint64_t *pcs)
{
	pp_capture(pcs);
	pcs[1] = RET();
	KEEP(pcs);
}

static inline __attribute__((always_inline)) void pp_inlined(uint64_t *pcs)
{
	pp_capture(pcs);
	KEEP(pcs);
}

__attribute__((noinline)) void pp_site_inl(uint64_t *pcs)
{
	pp_inlined(pcs);
	pcs[1] = RET();
	KEEP(pcs);
}

__attribute__((noinline)) void pp_outer(uint64_t *pcs, int which)
{
	if (which == 0)
		pp_site_a(pcs);
	else if (which == 1)
		pp_site_b(pcs);
	else
		pp_site_inl(pcs);
	pcs[2] = RET();
	KEEP(pcs);
}

/* A gap of 15 bytes that no symbol covers. */
__asm__(".pushsection .text\n"
	".p2align 4\n"
	".globl pp_gap_before\n"
	".type pp_gap_before, @function\n"
	"pp_gap_before:\n"
	"\tret\n"
	".size pp_gap_before, 1\n"
	".skip 15, 0xcc\n"
	".popsection\n");
void pp_gap_before(void);

static struct stack *mkstack(const uint64_t *pcs, uint32_t n)
{
	struct stack *s = calloc(1, sizeof(*s) + n * sizeof(uint64_t));
	cr_assert(s);
	s->npcs = n;
	if (n)
		memcpy(s->pcs, pcs, n * sizeof(uint64_t));
	return s;
}

static struct stack *site_stack(int which)
{
	uint64_t pcs[3];
	pp_outer(pcs, which);
	return mkstack(pcs, 3);
}

struct fixture {
	struct stack *a, *b, *inl, *odd, *empty;
	struct profile p;
	struct procmaps *maps;
};

static struct psample ps(const struct stack *st, uint64_t size, uint64_t rate, uint64_t ao,
			 uint64_t fo)
{
	return (struct psample){ st, size, rate, ao, ao * size, fo, fo * size };
}

/* A profile with one of everything; rate 524288 except where stated. */
static void fixture_init(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	f->a = site_stack(0);
	f->b = site_stack(1);
	f->inl = site_stack(2);
	uint64_t odd[2] = { (uint64_t)(uintptr_t)pp_gap_before + 6, 0x10 };
	f->odd = mkstack(odd, 2);
	f->empty = mkstack(NULL, 0);
	static struct psample s[8];
	s[0] = ps(f->a, 1024, 524288, 10, 4);
	s[1] = ps(f->a, 1024, 4096, 3, 0);   /* same stack and size, another rate */
	s[2] = ps(f->b, 64, 524288, 5, 5);   /* all freed */
	s[3] = ps(f->b, 128, 524288, 0, 0);  /* zero counts */
	s[4] = ps(f->inl, 4096, 524288, 7, 1);
	s[5] = ps(f->odd, 100, 1, 9, 2);     /* every allocation */
	s[6] = ps(f->empty, 0, 524288, 2, 0); /* overflow bucket: no stack, no size */
	s[6].alloc_bytes = 3000;
	s[7] = ps(f->b, 64, 4096, 0, 0);
	s[7].alloc_bytes = 640; /* count 0 with bytes: scaled to nothing */
	f->p.samples = s;
	f->p.nsamples = 8;
	f->p.meta = (struct profile_meta){ .pid = getpid(), .comm = "test_pprof",
					   .time_nanos = 1700000000000000000ull, .rate = 524288,
					   .sampled = 10, .delivered = 8, .dropped = 1,
					   .corrupt = 1, .cap_hits = 2 };
	f->maps = procmaps_new(getpid());
	cr_assert(f->maps);
}

static void fixture_fini(struct fixture *f)
{
	procmaps_free(f->maps);
	free(f->a);
	free(f->b);
	free(f->inl);
	free(f->odd);
	free(f->empty);
}

static char *write_file(const char *dir, const char *name, const struct buf *b)
{
	char *path;
	cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
	FILE *fp = fopen(path, "wb");
	cr_assert(fp);
	cr_assert_eq(fwrite(b->data, 1, b->len, fp), b->len);
	fclose(fp);
	return path;
}

static int pprof_cmd(char **out, const char *dir, const char *args)
{
	return e2e_sh(out, "cd %s && HOME=%s GOCACHE=%s/gocache GOPROXY=off go tool pprof %s", dir,
		      dir, dir, args);
}

struct raw_sample {
	long long v[4];
	int nlocs;
};

/* Sample lines of `go tool pprof -raw`: "  v0  v1  v2  v3: id id ...". */
static int parse_raw_samples(const char *s, struct raw_sample *out, int max)
{
	int n = 0;
	const char *p = strstr(s, "\nSamples:\n");
	const char *end = strstr(s, "\nLocations\n");
	cr_assert(p && end, "no samples section:\n%s", s);
	for (p = strchr(p + 10, '\n'); p && p < end; p = strchr(p + 1, '\n')) {
		struct raw_sample r;
		int pos = 0;
		if (sscanf(p + 1, "%lld %lld %lld %lld:%n", &r.v[0], &r.v[1], &r.v[2], &r.v[3],
			   &pos) != 4)
			continue;
		r.nlocs = 0;
		for (const char *c = p + 1 + pos; *c && *c != '\n'; c++)
			if (*c >= '0' && *c <= '9' && (c[-1] == ' ' || c[-1] == ':'))
				r.nlocs++;
		if (n < max)
			out[n++] = r;
	}
	return n;
}

static bool has_sample(const struct raw_sample *r, int n, const int64_t v[4], int nlocs)
{
	for (int i = 0; i < n; i++)
		if (r[i].v[0] == v[0] && r[i].v[1] == v[1] && r[i].v[2] == v[2] &&
		    r[i].v[3] == v[3] && r[i].nlocs == nlocs)
			return true;
	return false;
}

/* Expected pprof values of a group of samples: each scaled with its rate, then summed. */
static void expect_values(const struct psample *s, int n, int64_t v[4])
{
	memset(v, 0, 4 * sizeof(v[0]));
	for (int i = 0; i < n; i++) {
		int64_t c, b;
		profile_scale(s[i].alloc_objects, s[i].alloc_bytes, s[i].rate, &c, &b);
		v[0] += c;
		v[1] += b;
		profile_scale(s[i].alloc_objects - s[i].free_objects, s[i].alloc_bytes - s[i].free_bytes,
			      s[i].rate, &c, &b);
		v[2] += c;
		v[3] += b;
	}
}

/* ---- Scaling -------------------------------------------------------------------------- */

Test(pprof, scale_is_go_scaleHeapSample)
{
	int64_t c, b;
	profile_scale(0, 100, 524288, &c, &b);
	cr_expect(c == 0 && b == 0);
	profile_scale(5, 0, 524288, &c, &b);
	cr_expect(c == 0 && b == 0);
	profile_scale(7, 700, 1, &c, &b);
	cr_expect(c == 7 && b == 700);
	profile_scale(7, 700, 0, &c, &b);
	cr_expect(c == 7 && b == 700);
	/* Values computed with Go 1.19's formula: scaleHeapSample(10, 10240, 524288) =
	 * (5125, 5248001), (3, 3072, 4096) = (13, 13887), (1, 1<<30, 524288) = (1, 1<<30). */
	profile_scale(10, 10240, 524288, &c, &b);
	cr_expect_eq(c, 5125, "%lld", (long long)c);
	cr_expect_eq(b, 5248001, "%lld", (long long)b);
	profile_scale(3, 3072, 4096, &c, &b);
	cr_expect(c == 13 && b == 13887, "%lld %lld", (long long)c, (long long)b);
	profile_scale(1, 1u << 30, 524288, &c, &b);
	cr_expect(c == 1 && b == 1073741824);
}

/* ---- pprof through go tool pprof ------------------------------------------------------ */

Test(pprof, go_tool_pprof_reads_values_names_and_comments, .timeout = 120)
{
	struct fixture f;
	fixture_init(&f);
	struct buf b;
	buf_init(&b);
	cr_assert_eq(pprof_write(&b, &f.p, f.maps, 0), 0);
	cr_assert(b.len > 2 && b.data[0] == 0x1f && b.data[1] == 0x8b, "gzipped");
	char *dir = e2e_tmpdir();
	char *path = write_file(dir, "heap.pb.gz", &b);
	char *out = NULL;
	int rc = pprof_cmd(&out, dir, "-raw heap.pb.gz");
	cr_assert_eq(rc, 0, "go tool pprof -raw failed:\n%s", out);

	cr_expect(strstr(out, "PeriodType: space bytes\n") != NULL, "%s", out);
	cr_expect(strstr(out, "Period: 524288\n") != NULL);
	cr_expect(strstr(out, "\nalloc_objects/count alloc_space/bytes inuse_objects/count "
			      "inuse_space/bytes\n") != NULL, "sample types, no [dflt]:\n%s", out);
	cr_expect(strstr(out, "Comment: llgo-heap: sampled=10 delivered=8 dropped=1 corrupt=1\n"));
	cr_expect(strstr(out, "Comment: llgo-heap: samples were taken at several rates; each "
			      "sample is scaled with its own rate\n"));
	cr_expect(strstr(out, "Comment: llgo-heap: bucket cap reached: 2 samples"));
	cr_expect(strstr(out, "Comment: llgo-heap: pid="));

	struct raw_sample rs[32];
	int n = parse_raw_samples(out, rs, 32);
	/* 6 Samples: those with the same (stack, size) are one, and go tool pprof drops the
	 * one whose values are all zero (the proto has it, see the decoding test). */
	cr_expect_eq(n, 5, "samples with the same (stack, size) are one Sample:\n%s", out);
	const struct psample *s = f.p.samples;
	int64_t v[4];
	expect_values(&s[0], 2, v); /* a, two rates summed */
	cr_expect(has_sample(rs, n, v, 3), "a: %lld %lld %lld %lld\n%s", (long long)v[0],
		  (long long)v[1], (long long)v[2], (long long)v[3], out);
	cr_expect_neq(v[0], 13, "really scaled");
	expect_values(&s[2], 1, v);
	cr_expect(has_sample(rs, n, v, 3), "b 64");
	cr_expect_eq(v[2], 0);
	expect_values(&s[4], 1, v);
	cr_expect(has_sample(rs, n, v, 3), "inl");
	int64_t every[4] = { 9, 900, 7, 700 };
	cr_expect(has_sample(rs, n, every, 2), "rate 1 is unscaled");
	expect_values(&s[6], 1, v);
	cr_expect(has_sample(rs, n, v, 1), "overflow bucket under its own location");
	cr_expect(strstr(out, ": 0x0 [no stack] :0 s=0\n"), "%s", out);

	/* Labels: the block size. */
	cr_expect(strstr(out, "bytes:[1024]") && strstr(out, "bytes:[4096]") &&
		  strstr(out, "bytes:[100]"));
	/* Names, files, the inline chain (two lines in one location). */
	cr_expect(strstr(out, " pp_site_a ") && strstr(out, " pp_site_b ") &&
		  strstr(out, " pp_outer "), "%s", out);
	cr_expect(strstr(out, "tests/test_pprof.c:"));
	const char *inl = strstr(out, " pp_inlined ");
	cr_assert(inl, "inlined frame:\n%s", out);
	const char *nl = strchr(inl, '\n');
	cr_expect(nl && strncmp(nl + 1, "             ", 13) == 0 && strstr(nl, " pp_site_inl ") &&
			  strstr(nl, " pp_site_inl ") < strchr(nl + 1, '\n'),
		  "pp_site_inl is the second line of the same location:\n%s", out);
	/* The gap address and 0xf are locations without lines. */
	char want[160];
	snprintf(want, sizeof(want), ": %#llx M=", (unsigned long long)(uintptr_t)pp_gap_before + 5);
	const char *gap = strstr(out, want);
	cr_assert(gap, "no location for the gap (%s):\n%s", want, out);
	cr_expect(strncmp(strchr(gap, '\n') - 1, " ", 1) == 0 || strchr(gap, '\n')[-1] == ' ',
		  "the gap has no function");
	cr_expect(strstr(out, ": 0xf \n") != NULL, "address outside every mapping:\n%s", out);
	/* This binary's mapping carries the build ID and every has_* bit. */
	const struct mapping *m = procmaps_find(f.maps, (uint64_t)(uintptr_t)pp_site_a);
	snprintf(want, sizeof(want), " %s [FN][FL][LN][IN]", m->build_id);
	cr_expect(strstr(out, want), "mapping line %s:\n%s", want, out);
	free(out);

	rc = pprof_cmd(&out, dir, "-top -sample_index=alloc_space heap.pb.gz");
	cr_assert_eq(rc, 0, "%s", out);
	cr_expect(strstr(out, "pp_site_a") && strstr(out, "pp_inlined"), "%s", out);
	free(out);
	/* pprof needs no /symbol: -symbolize=remote on a file is a no-op, and nothing asks. */
	free(path);
	buf_free(&b);
	fixture_fini(&f);
	e2e_rmdir(dir);
}

Test(pprof, allocs_default_sample_type_and_string_table, .timeout = 120)
{
	struct fixture f;
	fixture_init(&f);
	struct buf b;
	buf_init(&b);
	cr_assert_eq(pprof_write(&b, &f.p, f.maps, LLGO_SNAP_ALLOCS), 0);
	/* Decode enough of the proto to check string_table[0] == "" and field 14. */
	unsigned char *raw = malloc(1 << 22);
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	cr_assert_eq(inflateInit2(&zs, 15 + 16), Z_OK);
	zs.next_in = b.data;
	zs.avail_in = (uInt)b.len;
	zs.next_out = raw;
	zs.avail_out = 1 << 22;
	cr_assert_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
	size_t len = zs.total_out;
	inflateEnd(&zs);
	bool first_string = true, dflt = false;
	int nsamples = 0;
	for (size_t i = 0; i < len;) {
		uint64_t key = 0, l = 0;
		for (int sh = 0; i < len; sh += 7) {
			key |= (uint64_t)(raw[i] & 0x7f) << sh;
			if (!(raw[i++] & 0x80))
				break;
		}
		if ((key & 7) == 0) {
			while (raw[i++] & 0x80)
				;
			dflt |= key >> 3 == 14;
			continue;
		}
		cr_assert_eq(key & 7, 2, "only varint and length-delimited fields");
		for (int sh = 0; i < len; sh += 7) {
			l |= (uint64_t)(raw[i] & 0x7f) << sh;
			if (!(raw[i++] & 0x80))
				break;
		}
		nsamples += key >> 3 == 2;
		if (key >> 3 == 6 && first_string) {
			cr_expect_eq(l, 0, "string_table[0] is empty");
			first_string = false;
		}
		i += l;
	}
	cr_expect(!first_string && dflt);
	cr_expect_eq(nsamples, 6, "one Sample per (stack, size), zero-count ones included");
	free(raw);

	char *dir = e2e_tmpdir(), *out = NULL;
	free(write_file(dir, "allocs.pb.gz", &b));
	cr_assert_eq(pprof_cmd(&out, dir, "-raw allocs.pb.gz"), 0, "%s", out);
	cr_expect(strstr(out, "alloc_space/bytes[dflt]"), "%s", out);
	free(out);
	buf_free(&b);
	fixture_fini(&f);
	e2e_rmdir(dir);
}

Test(pprof, delta_and_no_maps, .timeout = 120)
{
	uint64_t pcs[3];
	pp_outer(pcs, 0);
	struct stack *st = mkstack(pcs, 3);
	struct psample s1[2] = { ps(st, 512, 524288, 100, 40), ps(st, 256, 524288, 3, 0) };
	struct psample s0[2] = { ps(st, 512, 524288, 60, 0), ps(st, 256, 524288, 3, 0) };
	struct profile p1 = { .samples = s1, .nsamples = 2, .meta = { .rate = 524288 } };
	struct profile p0 = { .samples = s0, .nsamples = 2 };
	cr_assert_eq(profile_subtract(&p1, &p0), 0);
	cr_assert_eq(p1.nsamples, 1, "unchanged buckets leave the delta");
	cr_expect_eq(p1.samples[0].alloc_objects, 40);
	cr_expect_eq(p1.samples[0].free_objects, 40);
	/* In-use can be negative in a delta: alloc 40, free 40 here; make it -10. */
	p1.samples[0].free_objects = 50;
	p1.samples[0].free_bytes = 50 * 512;
	p1.meta.duration_nanos = 30000000000ull;
	struct buf b;
	buf_init(&b);
	cr_assert_eq(pprof_write(&b, &p1, NULL, 0), 0);
	char *dir = e2e_tmpdir(), *out = NULL;
	free(write_file(dir, "delta.pb.gz", &b));
	cr_assert_eq(pprof_cmd(&out, dir, "-raw delta.pb.gz"), 0, "%s", out);
	struct raw_sample rs[4];
	int n = parse_raw_samples(out, rs, 4);
	cr_assert_eq(n, 1, "%s", out);
	int64_t c, by;
	profile_scale(40, 40 * 512, 524288, &c, &by);
	cr_expect(rs[0].v[0] == c && rs[0].v[1] == by);
	profile_scale(10, 10 * 512, 524288, &c, &by);
	cr_expect(rs[0].v[2] == -c && rs[0].v[3] == -by, "%lld %lld", rs[0].v[2], rs[0].v[3]);
	cr_expect(strstr(out, "Duration: 30s"), "%s", out);
	cr_expect(!strstr(out, "pp_site_a"), "no maps, no symbols:\n%s", out);
	free(out);
	buf_free(&b);
	free(st);
	e2e_rmdir(dir);
}

Test(pprof, empty_profile_is_valid, .timeout = 120)
{
	struct profile p = { .meta = { .rate = 0 } };
	struct buf b;
	buf_init(&b);
	cr_assert_eq(pprof_write(&b, &p, NULL, 0), 0);
	char *dir = e2e_tmpdir(), *out = NULL;
	free(write_file(dir, "empty.pb.gz", &b));
	cr_assert_eq(pprof_cmd(&out, dir, "-raw empty.pb.gz"), 0, "%s", out);
	cr_expect(strstr(out, "Period: 0\n") && strstr(out, "sampled=0 delivered=0"), "%s", out);
	free(out);
	buf_free(&b);
	e2e_rmdir(dir);
}

/* ---- Folded and top ------------------------------------------------------------------- */

Test(pprof, folded_stacks)
{
	struct fixture f;
	fixture_init(&f);
	struct buf b;
	buf_init(&b);
	cr_assert_eq(folded_write(&b, &f.p, f.maps, 0), 0);
	cr_assert_eq(buf_putc(&b, '\0'), 0);
	const char *s = (const char *)b.data;
	const char acct[] = "# llgo-heap: sampled=10 delivered=8 dropped=1 corrupt=1\n";
	cr_expect_eq(strncmp(s, acct, sizeof(acct) - 1), 0, "%s", s);
	const struct psample *ps0 = f.p.samples;
	int64_t v[4];
	expect_values(&ps0[0], 2, v);
	char want[256];
	snprintf(want, sizeof(want), ";pp_outer;pp_site_a %lld\n", (long long)v[1]);
	cr_expect(strstr(s, want), "want %s in\n%s", want, s);
	expect_values(&ps0[4], 1, v);
	snprintf(want, sizeof(want), ";pp_outer;pp_site_inl;pp_inlined %lld\n", (long long)v[1]);
	cr_expect(strstr(s, want), "inline frames expanded, caller first: %s\n%s", want, s);
	cr_expect(strstr(s, "0xf;test_pprof+0x") || strstr(s, "\n0xf;"), "unknown frames:\n%s", s);
	cr_expect(strstr(s, "[no stack] "), "%s", s);
	/* flamegraph.pl keeps a line only if it matches ^(.*)\s+?(\d+(?:\.\d*)?)$: every
	 * stack line does, with a positive value, and the comment lines do not. */
	regex_t re;
	cr_assert_eq(regcomp(&re, "^(.*)[[:space:]]+([0-9]+(\\.[0-9]*)?)$", REG_EXTENDED), 0);
	int comments = 0, stacks = 0;
	for (const char *l = s; *l; l = strchr(l, '\n') + 1) {
		char line[1024];
		size_t len = (size_t)(strchr(l, '\n') - l);
		cr_assert_lt(len, sizeof(line));
		memcpy(line, l, len);
		line[len] = '\0';
		regmatch_t mt[3];
		bool match = regexec(&re, line, 3, mt, 0) == 0;
		if (*l == '#') {
			comments++;
			cr_expect(!match, "flamegraph.pl would draw the comment %s", line);
			continue;
		}
		stacks++;
		cr_assert(match, "%s", line);
		cr_expect_gt(atoll(line + mt[2].rm_so), 0, "%s", line);
	}
	regfree(&re);
	cr_expect_eq(comments, 2);
	cr_expect_eq(stacks, 5, "a, b, inl, odd, no stack:\n%s", s);
	buf_reset(&b);
	cr_assert_eq(folded_write(&b, &f.p, f.maps, LLGO_SNAP_INUSE | LLGO_SNAP_OBJECTS), 0);
	buf_putc(&b, '\0');
	expect_values(&ps0[0], 2, v);
	snprintf(want, sizeof(want), ";pp_outer;pp_site_a %lld\n", (long long)v[2]);
	cr_expect(strstr((const char *)b.data, want), "%s", (const char *)b.data);
	cr_expect(!strstr((const char *)b.data, "pp_site_b"), "fully freed: nothing in use");
	buf_free(&b);
	fixture_fini(&f);
}

Test(pprof, top_table)
{
	struct fixture f;
	fixture_init(&f);
	struct buf b;
	buf_init(&b);
	cr_assert_eq(snapshot_write(&b, &f.p, f.maps, LLGO_FORMAT_TOP, 0, 3), 0);
	buf_putc(&b, '\0');
	const char *s = (const char *)b.data;
	cr_expect(strstr(s, "3 of 5 sites by alloc_space"), "%s", s);
	cr_expect(strstr(s, "alloc_space        %  alloc_objects  inuse_space  site\n"), "%s", s);
	cr_expect(strstr(s, " pp_inlined test_pprof.c:"), "leaf inline frame is the site:\n%s", s);
	const char acct[] = "\n# llgo-heap: sampled=10 delivered=8 dropped=1 corrupt=1\n";
	const char *last = strstr(s, acct);
	cr_expect(last && last[sizeof(acct) - 1] == '\0', "accounting is the last line:\n%s", s);
	/* The first row is the largest. */
	int64_t va[4], vi[4];
	expect_values(&f.p.samples[0], 2, va);
	expect_values(&f.p.samples[4], 1, vi);
	const char *first = strchr(strchr(s, '\n') + 1, '\n') + 1;
	cr_expect(strstr(first, va[1] > vi[1] ? "pp_site_a" : "pp_inlined") <
			  strchr(first, '\n'), "%s", s);
	buf_free(&b);
	fixture_fini(&f);
}

Test(pprof, write_rejects_unknown_format)
{
	struct profile p = { 0 };
	struct buf b;
	buf_init(&b);
	cr_expect_eq(snapshot_write(&b, &p, NULL, 99, 0, 0), -EINVAL);
	buf_free(&b);
}

/* ---- Collecting from a bucket table --------------------------------------------------- */

Test(pprof, collect_and_subtract_buckets)
{
	struct bucket_table *t = bucket_table_new(0, 0);
	cr_assert(t);
	uint64_t pcs[3];
	pp_outer(pcs, 0);
	for (int i = 0; i < 3; i++)
		cr_assert_geq(bucket_table_add(t, pcs, 3, 100, 512), 0);
	cr_assert_geq(bucket_table_add(t, pcs, 3, 100, 1024), 0);
	struct profile base = { 0 }, p = { 0 };
	cr_assert_eq(profile_collect(&base, t), 0);
	cr_assert_eq(base.nsamples, 2);
	cr_expect(base.meta.mixed_rates);
	cr_assert_geq(bucket_table_add(t, pcs, 3, 100, 512), 0);
	cr_assert_eq(profile_collect(&p, t), 0);
	uint64_t objects = 0, bytes = 0;
	for (size_t i = 0; i < p.nsamples; i++) {
		objects += p.samples[i].alloc_objects;
		bytes += p.samples[i].alloc_bytes;
		cr_expect_eq(p.samples[i].stack->npcs, 3);
	}
	cr_expect(objects == 5 && bytes == 500);
	cr_assert_eq(profile_subtract(&p, &base), 0);
	cr_assert_eq(p.nsamples, 1);
	cr_expect(p.samples[0].rate == 512 && p.samples[0].alloc_objects == 1);
	struct procmaps *maps = procmaps_new(getpid());
	struct buf b;
	buf_init(&b);
	cr_expect_eq(snapshot_write(&b, &base, maps, LLGO_FORMAT_FOLDED, 0, 0), 0);
	buf_putc(&b, '\0');
	int64_t c1, b1, c2, b2;
	profile_scale(3, 300, 512, &c1, &b1);
	profile_scale(1, 100, 1024, &c2, &b2);
	char want[128];
	snprintf(want, sizeof(want), ";pp_outer;pp_site_a %lld\n", (long long)(b1 + b2));
	cr_expect(strstr((char *)b.data, want), "%s", (char *)b.data);
	buf_free(&b);
	procmaps_free(maps);
	profile_release(&p);
	profile_release(&base);
	bucket_table_free(t);
}
