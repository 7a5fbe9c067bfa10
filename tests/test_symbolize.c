// SPDX-License-Identifier: MIT
/*
 * test_symbolize.c: procmaps.c and symbolize.c against real code: functions of this test
 * binary (noinline callers, a static inline function inlined into two callers, a gap no
 * symbol covers), a shared library built and dlopen'ed during the test (with and without
 * debug info), and a program whose executable is deleted while it runs.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../agent/internal.h"

/* procmaps.c's cap on unlisted mappings kept (PROCMAPS_STALE_MAX). */
#define PROCMAPS_TEST_STALE_MAX 4096
#include "helpers.h"

/* ---- Code to symbolize ---------------------------------------------------------------- */

#define KEEP(x) __asm__ volatile("" : : "r"(x) : "memory")

static int line_caller, line_inl, line_inl_a, line_inl_b;

__attribute__((noinline)) uint64_t symt_leaf(void)
{
	uint64_t r = (uint64_t)(uintptr_t)__builtin_return_address(0);
	KEEP(r);
	return r;
}

__attribute__((noinline)) uint64_t symt_caller(void)
{
	uint64_t r = symt_leaf(); line_caller = __LINE__;
	KEEP(r);
	return r;
}

static inline __attribute__((always_inline)) uint64_t symt_inl(void)
{
	uint64_t r = symt_leaf(); line_inl = __LINE__;
	KEEP(r);
	return r;
}

__attribute__((noinline)) uint64_t symt_inl_a(void)
{
	uint64_t r = symt_inl(); line_inl_a = __LINE__;
	KEEP(r);
	return r;
}

__attribute__((noinline)) uint64_t symt_inl_b(void)
{
	uint64_t r = symt_inl(); line_inl_b = __LINE__;
	KEEP(r);
	return r + 1 - 1;
}

/* Two one-byte functions with 15 bytes between them that no symbol covers. */
__asm__(".pushsection .text\n"
	".p2align 4\n"
	".globl symt_gap_before\n"
	".type symt_gap_before, @function\n"
	"symt_gap_before:\n"
	"\tret\n"
	".size symt_gap_before, 1\n"
	".skip 15, 0xcc\n"
	".globl symt_gap_after\n"
	".type symt_gap_after, @function\n"
	"symt_gap_after:\n"
	"\tret\n"
	".size symt_gap_after, 1\n"
	".popsection\n");
void symt_gap_before(void);
void symt_gap_after(void);

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = s ? strlen(s) : 0, b = strlen(suffix);
	return s && a >= b && strcmp(s + a - b, suffix) == 0;
}

static int resolve(struct procmaps *pm, uint64_t addr, struct sym_result *r)
{
	const struct mapping *m = procmaps_find(pm, addr);
	cr_assert(m != NULL, "no mapping holds 0x%llx", (unsigned long long)addr);
	return symbolize_pc(m, addr, r);
}

/* ---- This binary ---------------------------------------------------------------------- */

Test(symbolize, noinline_caller_and_line)
{
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm != NULL, "procmaps_new: %s", strerror(errno));
	uint64_t ret = symt_caller();
	struct sym_result r;
	int n = resolve(pm, ret - 1, &r);
	cr_assert_eq(n, 1, "frames: %d", n);
	cr_expect_str_eq(r.frames[0].function, "symt_caller");
	cr_expect(ends_with(r.frames[0].file, "tests/test_symbolize.c"), "file %s",
		  r.frames[0].file);
	cr_expect_eq(r.frames[0].line, line_caller);
	cr_expect(r.has_functions && r.has_filenames && r.has_lines && r.has_inlines);
	cr_expect_eq(r.entry, (uint64_t)(uintptr_t)symt_caller, "entry 0x%llx",
		     (unsigned long long)r.entry);
	cr_expect_gt(r.frames[0].start_line, 0);
	cr_expect_lt(r.frames[0].start_line, line_caller);

	/* The function's first byte names the function itself. */
	n = resolve(pm, (uint64_t)(uintptr_t)symt_leaf, &r);
	cr_assert_geq(n, 1);
	cr_expect_str_eq(r.frames[n - 1].function, "symt_leaf");
	procmaps_free(pm);
}

Test(symbolize, inline_chain_in_two_callers)
{
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	uint64_t rets[2] = { symt_inl_a(), symt_inl_b() };
	const char *callers[2] = { "symt_inl_a", "symt_inl_b" };
	int lines[2] = { line_inl_a, line_inl_b };
	for (int i = 0; i < 2; i++) {
		struct sym_result r;
		int n = resolve(pm, rets[i] - 1, &r);
		cr_assert_eq(n, 2, "%s: %d frames", callers[i], n);
		cr_expect_str_eq(r.frames[0].function, "symt_inl");
		cr_expect_eq(r.frames[0].line, line_inl);
		cr_expect(ends_with(r.frames[0].file, "test_symbolize.c"));
		cr_expect_str_eq(r.frames[1].function, callers[i]);
		cr_expect_eq(r.frames[1].line, lines[i], "%s: line %d want %d", callers[i],
			     r.frames[1].line, lines[i]);
		cr_expect(ends_with(r.frames[1].file, "test_symbolize.c"));
	}
	procmaps_free(pm);
}

Test(symbolize, gap_between_symbols_has_no_function)
{
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	uint64_t before = (uint64_t)(uintptr_t)symt_gap_before;
	uint64_t after = (uint64_t)(uintptr_t)symt_gap_after;
	cr_assert_eq(after - before, 16);
	struct sym_result r;
	int n = resolve(pm, before, &r);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(r.frames[0].function, "symt_gap_before");
	for (uint64_t a = before + 1; a < after; a++) {
		n = resolve(pm, a, &r);
		cr_expect_eq(n, 0, "0x%llx (gap_before+%llu) named %s", (unsigned long long)a,
			     (unsigned long long)(a - before), n > 0 ? r.frames[0].function : "");
		cr_expect(r.has_functions, "the file still has functions");
	}
	n = resolve(pm, after, &r);
	cr_assert_eq(n, 1);
	cr_expect_str_eq(r.frames[0].function, "symt_gap_after");
	procmaps_free(pm);
}

Test(symbolize, mappings_build_id_vdso_and_shared_cache)
{
	struct procmaps *a = procmaps_new(getpid()), *b = procmaps_new(getpid());
	cr_assert(a && b);
	const struct mapping *ma = procmaps_find(a, (uint64_t)(uintptr_t)symt_leaf);
	const struct mapping *mb = procmaps_find(b, (uint64_t)(uintptr_t)symt_leaf);
	cr_assert(ma && mb && ma != mb);
	cr_expect(ma->file != NULL && ma->file == mb->file, "one symfile for one binary");
	cr_expect_eq(strlen(ma->build_id), 40, "build id '%s'", ma->build_id);
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	cr_assert_gt(n, 0);
	self[n] = '\0';
	cr_expect_str_eq(ma->path, self);
	cr_expect_eq(ma->perms[2], 'x');
	cr_expect_neq(ma->inode, 0);

	const struct mapping **v;
	size_t nm = procmaps_list(a, &v);
	cr_assert_gt(nm, 2);
	bool vdso = false;
	for (size_t i = 0; i < nm; i++) {
		if (i > 0)
			cr_expect_geq(v[i]->start, v[i - 1]->end, "sorted, disjoint");
		cr_expect_eq(procmaps_find(a, v[i]->start), v[i]);
		cr_expect_eq(procmaps_find(a, v[i]->end - 1), v[i]);
		if (strcmp(v[i]->path, "[vdso]") == 0) {
			vdso = true;
			cr_expect_null(v[i]->file);
			struct sym_result r;
			cr_expect_eq(symbolize_pc(v[i], v[i]->start, &r), 0);
		}
	}
	cr_expect(vdso, "[vdso] is kept");
	errno = 0;
	cr_expect_null(procmaps_new(0x7ffffff0), "no such process");
	cr_expect_eq(errno, ENOENT);
	cr_expect_null(procmaps_find(a, 0x1000));
	procmaps_free(a);
	/* b's symfile is still referenced and usable */
	struct sym_result r;
	cr_expect_eq(symbolize_pc(mb, symt_caller() - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "symt_caller");
	procmaps_free(b);
}

/* ---- Threads -------------------------------------------------------------------------- */

struct thr_arg {
	struct procmaps *pm;
	uint64_t addrs[3];
	int fails;
};

static void *thr_lookup(void *p)
{
	struct thr_arg *a = p;
	for (int i = 0; i < 2000; i++) {
		struct sym_result r;
		uint64_t addr = a->addrs[i % 3];
		unsigned rd = procmaps_read_begin(a->pm);
		const struct mapping *m = procmaps_find(a->pm, addr);
		if (!m || symbolize_pc(m, addr, &r) < 1)
			a->fails++;
		procmaps_read_end(a->pm, rd);
		if (i % 500 == 0)
			procmaps_refresh(a->pm, getpid());
	}
	return NULL;
}

Test(symbolize, concurrent_lookups_and_refreshes)
{
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct thr_arg args[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		args[i] = (struct thr_arg){ pm, { symt_caller() - 1, symt_inl_a() - 1,
						  (uint64_t)(uintptr_t)symt_leaf }, 0 };
		cr_assert_eq(pthread_create(&t[i], NULL, thr_lookup, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(args[i].fails, 0);
	}
	procmaps_free(pm);
}

/* ---- Code mapped and unmapped over and over --------------------------------------------- */

/* A reader that, like a snapshot writer, walks every mapping inside a read bracket while
 * the maps are refreshed: under ASan a mapping freed too early is a use after free. */
struct churn_reader {
	struct procmaps *pm;
	atomic_bool stop;
	unsigned long walks, seen;
};

static void *churn_read(void *p)
{
	struct churn_reader *c = p;
	while (!atomic_load(&c->stop)) {
		unsigned rd = procmaps_read_begin(c->pm);
		const struct mapping **v;
		size_t n = procmaps_list(c->pm, &v);
		for (size_t i = 0; i < n; i++)
			c->seen += strlen(v[i]->path) + (v[i]->file != NULL);
		procmaps_read_end(c->pm, rd);
		c->walks++;
	}
	return NULL;
}

/* Map our own executable's first `pages` pages PROT_EXEC, n times. The kernel tends to
 * give the addresses just unmapped again: a size other than last time's makes each a new
 * mapping over the old one's range. */
static void churn_map(void **out, int n, int fd, int pages)
{
	for (int i = 0; i < n; i++) {
		out[i] = mmap(NULL, 4096 * pages, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
		cr_assert_neq(out[i], MAP_FAILED);
	}
}

static void churn_unmap(void **v, int n, int pages)
{
	for (int i = 0; i < n; i++)
		munmap(v[i], 4096 * pages);
}

Test(symbolize, churned_mappings_are_freed_while_readers_run)
{
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct procmaps_stats st0;
	procmaps_get_stats(pm, &st0);
	struct churn_reader c = { .pm = pm };
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, churn_read, &c), 0);
	void *v[64];
	uint64_t peak_retired = 0, peak_mappings = 0;
	for (int round = 0; round < 300; round++) {
		churn_map(v, 64, fd, 1);
		cr_assert_eq(procmaps_refresh(pm, getpid()), 0);
		churn_unmap(v, 64, 1);
		/* New code over the old addresses (the kernel reuses them): the old mappings
		 * are overlapped and leave the table. */
		churn_map(v, 64, fd, 2);
		cr_assert_eq(procmaps_refresh(pm, getpid()), 0);
		churn_unmap(v, 64, 2);
		struct procmaps_stats st;
		procmaps_get_stats(pm, &st);
		if (st.retired_mappings > peak_retired)
			peak_retired = st.retired_mappings;
		if (st.mappings > peak_mappings)
			peak_mappings = st.mappings;
	}
	atomic_store(&c.stop, true);
	pthread_join(t, NULL);
	cr_expect_gt(c.walks, 0);
	/* 38,400 mappings were created; what stays is bounded by what one refresh sees (the
	 * listed ones, the stale ones kept, and the arrays a reader may still hold). */
	cr_expect_leq(peak_mappings, st0.mappings + 2 * 64 + PROCMAPS_TEST_STALE_MAX,
		      "table holds %llu mappings", (unsigned long long)peak_mappings);
	/* Without reclamation all 38,400 would be retired and kept; a reader preempted
	 * mid-walk may hold back a few refreshes' worth (2 cores, loaded). */
	cr_expect_leq(peak_retired, 300 * 2 * 64 / 4, "%llu retired mappings not freed",
		      (unsigned long long)peak_retired);
	/* With no reader, two refreshes free everything retired. */
	procmaps_refresh(pm, getpid());
	for (int i = 0; i < 3; i++) {
		churn_map(v, 8, fd, 1 + i % 2);
		procmaps_refresh(pm, getpid());
		churn_unmap(v, 8, 1 + i % 2);
	}
	struct procmaps_stats st;
	procmaps_get_stats(pm, &st);
	cr_expect_leq(st.retired_arrays, 2, "%llu retired arrays", (unsigned long long)st.retired_arrays);
	procmaps_free(pm);
	close(fd);
}

Test(symbolize, a_reader_keeps_what_it_saw_until_it_leaves)
{
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	void *v[4];
	churn_map(v, 4, fd, 1);
	cr_assert_eq(procmaps_refresh(pm, getpid()), 0);
	unsigned rd = procmaps_read_begin(pm);
	const struct mapping *held = procmaps_find(pm, (uint64_t)(uintptr_t)v[0]);
	cr_assert(held);
	churn_unmap(v, 4, 1);
	for (int i = 0; i < 6; i++) { /* replaced again and again while the reader holds it */
		churn_map(v, 4, fd, 2 + i % 2);
		cr_assert_eq(procmaps_refresh(pm, getpid()), 0);
		churn_unmap(v, 4, 2 + i % 2);
	}
	struct procmaps_stats st;
	procmaps_get_stats(pm, &st);
	cr_expect_geq(st.retired_mappings, 4, "the held mapping was freed under the reader");
	cr_expect_eq(held->end - held->start, 4096); /* ASan: still allocated */
	cr_expect_neq(strlen(held->path), 0);
	procmaps_read_end(pm, rd);
	for (int i = 0; i < 3; i++) {
		churn_map(v, 4, fd, 1 + i % 2);
		cr_assert_eq(procmaps_refresh(pm, getpid()), 0);
		churn_unmap(v, 4, 1 + i % 2);
	}
	procmaps_get_stats(pm, &st);
	cr_expect_leq(st.retired_mappings, 8, "%llu retired mappings after the reader left",
		      (unsigned long long)st.retired_mappings);
	procmaps_free(pm);
	close(fd);
}

Test(symbolize, unlisted_mappings_kept_are_capped)
{
	/* 5,000 one-page executable mappings at addresses nothing maps again (a reserved
	 * range), unmapped, then a refresh: they stay for earlier samples, but at most
	 * PROCMAPS_STALE_MAX of them, and the rest are counted. */
	enum { N = 5000 };
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	size_t span = (size_t)2 * N * 4096;
	char *base = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(base, MAP_FAILED);
	for (int i = 0; i < N; i++)
		cr_assert_neq(mmap(base + (size_t)2 * i * 4096, 4096, PROT_READ | PROT_EXEC,
				   MAP_PRIVATE | MAP_FIXED, fd, 0), MAP_FAILED);
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	struct procmaps_stats st;
	procmaps_get_stats(pm, &st);
	cr_expect_geq(st.mappings, N);
	for (int i = 0; i < N; i++) /* back to the reservation, which is not executable */
		cr_assert_neq(mmap(base + (size_t)2 * i * 4096, 4096, PROT_NONE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), MAP_FAILED);
	cr_assert_eq(procmaps_refresh(pm, getpid()), 0);
	procmaps_get_stats(pm, &st);
	cr_expect_eq(st.stale_dropped, N - PROCMAPS_TEST_STALE_MAX, "dropped %llu",
		     (unsigned long long)st.stale_dropped);
	cr_expect_leq(st.mappings, PROCMAPS_TEST_STALE_MAX + 200);
	/* the most recently listed are those kept: all 5,000 were listed at the same
	 * refresh, so any 4,096 of them; the program's own code is listed now and kept */
	cr_expect_not_null(procmaps_find(pm, (uint64_t)(uintptr_t)symt_leaf));
	munmap(base, span);
	procmaps_free(pm);
	close(fd);
}

/* ---- A library loaded after the maps were read ---------------------------------------- */

static const char lib_src[] =
	"#include <stdint.h>\n"                                                      /* 1 */
	"__attribute__((noinline)) uint64_t symt_dl_leaf(void) {\n"                  /* 2 */
	"  uint64_t r = (uint64_t)(uintptr_t)__builtin_return_address(0);\n"         /* 3 */
	"  __asm__ volatile(\"\" : : \"r\"(r) : \"memory\");\n"                      /* 4 */
	"  return r;\n"                                                              /* 5 */
	"}\n"                                                                        /* 6 */
	"static __attribute__((noinline)) uint64_t symt_dl_static(void) {\n"         /* 7 */
	"  uint64_t r = symt_dl_leaf();\n"                                           /* 8 */
	"  __asm__ volatile(\"\" : : \"r\"(r) : \"memory\");\n"                      /* 9 */
	"  return r;\n"                                                              /* 10 */
	"}\n"                                                                        /* 11 */
	"uint64_t symt_dl_caller(uint64_t *st) {\n"                                  /* 12 */
	"  uint64_t r = symt_dl_leaf();\n"                                           /* 13 */
	"  *st = symt_dl_static();\n"                                                /* 14 */
	"  __asm__ volatile(\"\" : : \"r\"(r) : \"memory\");\n"                      /* 15 */
	"  return r;\n"                                                              /* 16 */
	"}\n";

static void build_lib(const char *dir, const char *name, const char *flags)
{
	char path[4200], *out = NULL;
	snprintf(path, sizeof(path), "%s/symt_dl.c", dir);
	FILE *f = fopen(path, "w");
	cr_assert(f);
	fputs(lib_src, f);
	fclose(f);
	int rc = th_sh(&out, "cd %s && cc -shared -fPIC -O2 -fno-omit-frame-pointer %s "
			      "-o %s symt_dl.c", dir, flags, name);
	cr_assert_eq(rc, 0, "cc failed:\n%s", out);
	free(out);
}

Test(symbolize, dlopen_then_refresh)
{
	char *dir = th_tmpdir();
	build_lib(dir, "libsymt.so", "-g");
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	char path[4200];
	snprintf(path, sizeof(path), "%s/libsymt.so", dir);
	void *h = dlopen(path, RTLD_NOW);
	cr_assert(h, "dlopen: %s", dlerror());
	uint64_t (*fn)(uint64_t *) = (uint64_t(*)(uint64_t *))dlsym(h, "symt_dl_caller");
	cr_assert(fn);
	uint64_t st = 0, ret = fn(&st);
	cr_expect_null(procmaps_find(pm, ret - 1), "not known before the refresh");
	const struct mapping *self = procmaps_find(pm, (uint64_t)(uintptr_t)symt_leaf);
	cr_assert_eq(procmaps_refresh(pm, getpid()), 0);
	cr_expect_eq(procmaps_find(pm, (uint64_t)(uintptr_t)symt_leaf), self,
		     "known mappings are kept");
	const struct mapping *m = procmaps_find(pm, ret - 1);
	cr_assert(m, "the library is found after the refresh");
	cr_expect_str_eq(m->path, path);
	cr_expect_eq(strlen(m->build_id), 40);
	struct sym_result r;
	cr_assert_eq(symbolize_pc(m, ret - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "symt_dl_caller");
	cr_expect(ends_with(r.frames[0].file, "symt_dl.c"), "%s", r.frames[0].file);
	cr_expect_eq(r.frames[0].line, 13);
	cr_assert_eq(symbolize_pc(m, st - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "symt_dl_static");
	cr_expect_eq(r.frames[0].line, 8);
	procmaps_free(pm);
	dlclose(h);
	th_rmdir(dir);
}

/* The test library loaded and called: its handle, the maps read after the call, the
 * return addresses symt_dl_caller gave (ret: its own, st: the static function's) and the
 * mapping holding ret - 1. */
struct symt_dl {
	void *h;
	struct procmaps *pm;
	uint64_t ret, st;
	const struct mapping *m;
};

static void symt_dl_call(const char *dir, const char *lib, struct symt_dl *d)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, lib);
	d->h = dlopen(path, RTLD_NOW);
	cr_assert(d->h, "dlopen: %s", dlerror());
	uint64_t (*fn)(uint64_t *) = (uint64_t(*)(uint64_t *))dlsym(d->h, "symt_dl_caller");
	d->st = 0;
	d->ret = fn(&d->st);
	d->pm = procmaps_new(getpid());
	cr_assert(d->pm);
	d->m = procmaps_find(d->pm, d->ret - 1);
	cr_assert(d->m && d->m->file);
}

/* build_lib with -g, then its DWARF moved to NAME.debug named by NAME.so's .gnu_debuglink;
 * then the shell command then (run in dir). */
static void build_lib_debuglink(const char *dir, const char *name, const char *then)
{
	char so[256], *out = NULL;
	snprintf(so, sizeof(so), "%s.so", name);
	build_lib(dir, so, "-g");
	int rc = th_sh(&out, "cd %s && objcopy --only-keep-debug %s.so %s.debug && "
			      "objcopy --strip-debug --add-gnu-debuglink=%s.debug %s.so %s",
			dir, name, name, name, name, then);
	cr_assert_eq(rc, 0, "objcopy: %s", out);
	free(out);
}

Test(symbolize, stripped_library_uses_dynsym)
{
	char *dir = th_tmpdir();
	build_lib(dir, "libsymt_s.so", "-s");
	struct symt_dl d;
	symt_dl_call(dir, "libsymt_s.so", &d);
	void *h = d.h;
	uint64_t ret = d.ret, st = d.st;
	struct procmaps *pm = d.pm;
	const struct mapping *m = d.m;
	struct sym_result r;
	cr_assert_eq(symbolize_pc(m, ret - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "symt_dl_caller");
	cr_expect_null(r.frames[0].file);
	cr_expect_eq(r.frames[0].line, 0);
	cr_expect(r.has_functions);
	cr_expect(!r.has_lines && !r.has_filenames && !r.has_inlines);
	/* The static function has no .dynsym entry: no name, not its neighbour's. */
	cr_expect_eq(symbolize_pc(m, st - 1, &r), 0);
	procmaps_free(pm);
	dlclose(h);
	th_rmdir(dir);
}

Test(symbolize, separate_debug_file_through_debuglink)
{
	char *dir = th_tmpdir();
	build_lib_debuglink(dir, "libsymt_d", "");
	struct symt_dl d;
	symt_dl_call(dir, "libsymt_d.so", &d);
	void *h = d.h;
	uint64_t ret = d.ret;
	struct procmaps *pm = d.pm;
	const struct mapping *m = d.m;
	struct sym_result r;
	cr_assert_eq(symbolize_pc(m, ret - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "symt_dl_caller");
	cr_expect(ends_with(r.frames[0].file, "/symt_dl.c"), "%s", r.frames[0].file);
	cr_expect_eq(r.frames[0].line, 13);
	cr_expect(r.has_lines);
	procmaps_free(pm);
	dlclose(h);
	th_rmdir(dir);
}

/* A debug file others may write to is read from a private copy: shrinking it afterwards
 * (which would fault a mapping of it) changes nothing. */
Test(symbolize, debuglink_file_others_can_write_is_copied)
{
	char *dir = th_tmpdir(), path[4200];
	build_lib_debuglink(dir, "libsymt_w", "&& chmod 0666 libsymt_w.debug");
	struct symt_dl d;
	symt_dl_call(dir, "libsymt_w.so", &d);
	struct sym_result r;
	cr_assert_eq(symbolize_pc(d.m, d.ret - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "symt_dl_caller");
	cr_expect_eq(r.frames[0].line, 13);
	snprintf(path, sizeof(path), "%s/libsymt_w.debug", dir);
	cr_assert_eq(truncate(path, 0), 0, "truncate: %s", strerror(errno));
	/* an address not looked up yet: read from the copy */
	cr_assert_eq(symbolize_pc(d.m, d.st - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "symt_dl_static");
	cr_expect(ends_with(r.frames[0].file, "/symt_dl.c"), "%s", r.frames[0].file);
	cr_expect_eq(r.frames[0].line, 8);
	procmaps_free(d.pm);
	dlclose(d.h);
	th_rmdir(dir);
}

/* gcc -flto inlines across files and puts the inlined function's abstract origin in another
 * unit (libdw 0.188's dwarf_getscopes finds no scope then): the chain still shows it. */
static const char lto_a_src[] =
	"#include <stdint.h>\n"                                                   /* 1 */
	"uint64_t symt_lto_inner(void);\n"                                        /* 2 */
	"__attribute__((noinline)) uint64_t symt_lto_leaf(void) {\n"              /* 3 */
	"  uint64_t r = (uint64_t)(uintptr_t)__builtin_return_address(0);\n"      /* 4 */
	"  __asm__ volatile(\"\" : : \"r\"(r) : \"memory\");\n"             /* 5 */
	"  return r;\n"                                                           /* 6 */
	"}\n"                                                                     /* 7 */
	"uint64_t symt_lto_outer(void) {\n"                                       /* 8 */
	"  uint64_t r = symt_lto_inner();\n"                                      /* 9 */
	"  __asm__ volatile(\"\" : : \"r\"(r) : \"memory\");\n"             /* 10 */
	"  return r;\n"                                                           /* 11 */
	"}\n";
static const char lto_b_src[] =
	"#include <stdint.h>\n"                                                   /* 1 */
	"uint64_t symt_lto_leaf(void);\n"                                         /* 2 */
	"uint64_t symt_lto_inner(void) {\n"                                       /* 3 */
	"  uint64_t r = symt_lto_leaf();\n"                                       /* 4 */
	"  __asm__ volatile(\"\" : : \"r\"(r) : \"memory\");\n"             /* 5 */
	"  return r;\n"                                                           /* 6 */
	"}\n";

Test(symbolize, inlined_across_units_by_lto)
{
	char *dir = th_tmpdir(), *out = NULL, path[4200];
	const char *srcs[2][2] = { { "symt_lto_a.c", lto_a_src }, { "symt_lto_b.c", lto_b_src } };
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, srcs[i][0]);
		FILE *f = fopen(path, "w");
		cr_assert(f && fputs(srcs[i][1], f) >= 0 && fclose(f) == 0);
	}
	int rc = th_sh(&out, "cd %s && cc -shared -fPIC -O2 -flto -fno-semantic-interposition -g "
			      "-fno-omit-frame-pointer "
			      "-o libsymt_lto.so symt_lto_a.c symt_lto_b.c", dir);
	cr_assert_eq(rc, 0, "cc: %s", out);
	free(out);
	snprintf(path, sizeof(path), "%s/libsymt_lto.so", dir);
	void *h = dlopen(path, RTLD_NOW);
	cr_assert(h, "dlopen: %s", dlerror());
	uint64_t (*outer)(void) = (uint64_t(*)(void))dlsym(h, "symt_lto_outer");
	cr_assert(outer);
	uint64_t ret = outer();
	struct procmaps *pm = procmaps_new(getpid());
	cr_assert(pm);
	const struct mapping *m = procmaps_find(pm, ret - 1);
	cr_assert(m && m->file);
	struct sym_result r;
	int n = symbolize_pc(m, ret - 1, &r);
	cr_assert_eq(n, 2, "frames: %d (%s)", n, n > 0 ? r.frames[0].function : "");
	cr_expect_str_eq(r.frames[0].function, "symt_lto_inner");
	cr_expect(ends_with(r.frames[0].file, "/symt_lto_b.c"), "%s", r.frames[0].file);
	cr_expect_eq(r.frames[0].line, 4);
	cr_expect_str_eq(r.frames[1].function, "symt_lto_outer");
	cr_expect(ends_with(r.frames[1].file, "/symt_lto_a.c"), "%s", r.frames[1].file);
	cr_expect_eq(r.frames[1].line, 9);
	procmaps_free(pm);
	dlclose(h);
	th_rmdir(dir);
}

/* ---- A deleted executable ------------------------------------------------------------- */

Test(symbolize, deleted_binary_through_map_files)
{
	char *dir = th_tmpdir(), *out = NULL;
	cr_assert_eq(th_sh(&out, "cp %s/sym_deleted %s/prog", TH_PROGS, dir), 0, "%s", out);
	free(out);
	char prog[4200];
	snprintf(prog, sizeof(prog), "%s/prog", dir);
	int in[2], outp[2];
	th_pipe(in);
	th_pipe(outp);
	pid_t pid = th_fork();
	if (pid == 0) {
		dup2(in[0], 0);
		dup2(outp[1], 1);
		close(in[1]);
		close(outp[0]);
		execl(prog, prog, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(outp[1]);
	FILE *f = fdopen(outp[0], "r");
	int cpid = 0, line = 0;
	unsigned long addr = 0;
	cr_assert(f && fscanf(f, "pid %d addr %lx line %d", &cpid, &addr, &line) == 3);
	cr_assert_eq(cpid, pid);
	cr_assert_eq(unlink(prog), 0);

	struct procmaps *pm = procmaps_new(pid);
	cr_assert(pm, "procmaps_new(%d): %s", pid, strerror(errno));
	const struct mapping *m = procmaps_find(pm, addr - 1);
	cr_assert(m);
	cr_expect_str_eq(m->path, prog, "\" (deleted)\" is trimmed");
	char mf[128];
	snprintf(mf, sizeof(mf), "/proc/%d/map_files/%llx-%llx", pid,
		 (unsigned long long)m->start, (unsigned long long)m->end);
	int fd = open(mf, O_RDONLY);
	if (fd < 0) {
		close(in[1]);
		waitpid(pid, NULL, 0);
		cr_skip_test("no access to /proc/PID/map_files (%s)", strerror(errno));
	}
	close(fd);
	cr_assert(m->file, "the deleted file is opened through map_files");
	struct sym_result r;
	cr_assert_eq(symbolize_pc(m, addr - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "sym_prog_caller");
	cr_expect(ends_with(r.frames[0].file, "sym_deleted.c"), "%s", r.frames[0].file);
	cr_expect_eq(r.frames[0].line, line);

	/* The process exits; what was opened keeps symbolizing. */
	close(in[1]);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	fclose(f);
	cr_assert_eq(symbolize_pc(m, addr - 1, &r), 1);
	cr_expect_str_eq(r.frames[0].function, "sym_prog_caller");
	procmaps_free(pm);
	th_rmdir(dir);
}
