// SPDX-License-Identifier: MIT
/*
 * test_otel.c: OpenTelemetry's memory-profiling USDT contract (issue 23): the shim's probes
 * otel_memory:alloc(ptr, size, weighted_bytes) and otel_memory:free(ptr) read by a real
 * collector (tests/otel_collector.bpf.c, attached with libbpf's bpf_program__attach_usdt to
 * the plain shim in one process, before that process runs its first instruction), against
 * what the program says it allocated and what the real daemon's profile holds:
 *   - weight: probe_otel_weight (the shim's exp without libm) against libm's expm1 and the
 *     daemon's own scaling (profile_scale);
 *   - notes: provider, names, argument specs in the calling convention's registers, each
 *     with a semaphore in .probes; the semaphores read 0 in a running process with nothing
 *     attached, 1 while one collector or two are, and 0 again once the last detached; two
 *     collectors see the same frees;
 *   - rate 1: one alloc per allocation the program states, at its address and size, with
 *     weighted_bytes == size; every free probe names a live alloc; the alloc count is the
 *     profile's sample count and the weighted sum its bytes, exactly;
 *   - a sampled rate: every alloc at a stated address has that size and weighted_bytes =
 *     size / (1 - exp(-size/rate)); the alloc count is the profile's sample count; the
 *     weighted sums of all allocs and of the live ones are the profile's scaled alloc_space
 *     and inuse_space to within the rounding of each value (0.5 per alloc, 1 per sample).
 * Where BPF cannot work (not root, no BTF, kernel before 5.8) the BPF tests are skipped with
 * the reason printed.
 */
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <linux/types.h>
#include <math.h>

#include <bpf/libbpf.h>

#include "helpers.h"
#include "otel_collector.h"
#include "otel_collector.bpf.skel.h"
#include "../agent/internal.h"
#include "../client/pprofread.h"
#include "../shim/internal.h"

#define OTEL_PROG TH_PROGS "/otel_allocs"

/* ---- weight ------------------------------------------------------------------------------ */

Test(otel, weight_matches_libm_and_the_daemon)
{
	static const uint64_t rates[] = { 2, 3, 512, 4096, 65536, 524288, 1u << 20, 1ull << 40 };
	uint64_t checked = 0;
	for (size_t r = 0; r < sizeof(rates) / sizeof(rates[0]); r++) {
		uint64_t rate = rates[r];
		/* sizes from 1 byte to 2^50, x1.03 apart */
		for (double s = 1; s < 0x1p50; s = s * 1.03 + 1) {
			uint64_t size = (uint64_t)s;
			double x = (double)size / (double)rate;
			double want = (double)size / -expm1(-x);
			uint64_t got = probe_otel_weight(size, rate);
			double tol = 0.5 + want * 4e-15;
			cr_assert(fabs((double)got - want) <= tol,
				  "weight(%llu, %llu) = %llu, libm says %.3f",
				  (unsigned long long)size, (unsigned long long)rate,
				  (unsigned long long)got, want);
			/* the daemon truncates, and its 1 - exp(-x) keeps ~2^-53 / x of
			 * relative precision */
			int64_t count, bytes;
			profile_scale(1, size, rate, &count, &bytes);
			double ptol = 1 + want * (4e-15 + 0x1p-52 / x);
			cr_assert(fabs((double)got - (double)bytes) <= ptol,
				  "weight(%llu, %llu) = %llu, the profile scales it to %lld",
				  (unsigned long long)size, (unsigned long long)rate,
				  (unsigned long long)got, (long long)bytes);
			checked++;
		}
		cr_expect_eq(probe_otel_weight(0, rate), 0);
	}
	cr_expect_gt(checked, 8000);
	/* rate 1: every allocation recorded, each stands for itself */
	for (uint64_t size = 0; size < 100000; size += 997)
		cr_assert_eq(probe_otel_weight(size, 1), size);
	cr_expect_eq(probe_otel_weight(UINT64_MAX, 1), UINT64_MAX);
	cr_expect_eq(probe_otel_weight(UINT64_MAX, 4096), UINT64_MAX);
	/* one of Go's cases by hand: 1 - exp(-1) = 0.6321205588285577 */
	cr_expect_eq(probe_otel_weight(524288, 524288), 829411);
}

/* ---- BPF ---------------------------------------------------------------------------------- */

#define OTEL_NEED_BPF() TH_NEED_BPF("test_otel")

static int otel_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

/* The collector as an OpenTelemetry profiler would hold it: both probes of one process. */
struct otel_collector {
	struct otel_collector_bpf *skel;
	struct bpf_link *alloc, *free;
	struct ring_buffer *rb;
	struct otel_event *ev; /* events received, in ring order */
	size_t nev, cap;
};

static int otel_on_event(void *ctx, void *data, size_t len)
{
	struct otel_collector *c = ctx;
	cr_assert_eq(len, sizeof(struct otel_event));
	if (c->nev == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 65536;
		c->ev = realloc(c->ev, c->cap * sizeof(*c->ev));
		cr_assert(c->ev != NULL);
	}
	memcpy(&c->ev[c->nev++], data, sizeof(struct otel_event));
	return 0;
}

static void otel_open(struct otel_collector *c)
{
	memset(c, 0, sizeof(*c));
	libbpf_set_print(otel_libbpf_print);
	c->skel = otel_collector_bpf__open_and_load();
	cr_assert(c->skel != NULL, "loading the collector: %s", strerror(errno));
	c->rb = ring_buffer__new(bpf_map__fd(c->skel->maps.events), otel_on_event, c, NULL);
	cr_assert(c->rb != NULL, "ring_buffer__new: %s", strerror(errno));
}

/* Attach to pid's copy of the plain shim (pid need not have mapped it yet). */
static void otel_attach(struct otel_collector *c, pid_t pid)
{
	c->alloc = bpf_program__attach_usdt(c->skel->progs.otel_alloc, pid, LLGO_PLAIN_SHIM,
					    "otel_memory", "alloc", NULL);
	cr_assert(c->alloc != NULL, "attach otel_memory:alloc: %s", strerror(errno));
	c->free = bpf_program__attach_usdt(c->skel->progs.otel_free, pid, LLGO_PLAIN_SHIM,
					   "otel_memory", "free", NULL);
	cr_assert(c->free != NULL, "attach otel_memory:free: %s", strerror(errno));
}

static void otel_detach(struct otel_collector *c)
{
	bpf_link__destroy(c->alloc);
	bpf_link__destroy(c->free);
	c->alloc = c->free = NULL;
}

/* Everything the kernel has sent so far. */
static void otel_drain(struct otel_collector *c)
{
	cr_assert_geq(ring_buffer__consume(c->rb), 0);
	cr_assert_eq(c->skel->bss->lost, 0, "%llu events lost",
		     (unsigned long long)c->skel->bss->lost);
}

static void otel_close(struct otel_collector *c)
{
	otel_detach(c);
	ring_buffer__free(c->rb);
	otel_collector_bpf__destroy(c->skel);
	free(c->ev);
}

/* ---- the notes and the semaphores ------------------------------------------------------ */

struct otel_note {
	char provider[32], name[32], args[128];
	uint64_t pc, sema;
};

struct otel_elf {
	struct otel_note notes[16];
	int nnotes;
	uint64_t probes_lo, probes_hi; /* .probes */
	GElf_Phdr load[8];
	int nload;
};

static void otel_read_elf(const char *path, struct otel_elf *o)
{
	memset(o, 0, sizeof(*o));
	cr_assert(elf_version(EV_CURRENT) != EV_NONE);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	cr_assert(e != NULL, "%s: %s", path, elf_errmsg(-1));
	size_t shstrndx, nph;
	cr_assert(elf_getshdrstrndx(e, &shstrndx) == 0 && elf_getphdrnum(e, &nph) == 0);
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && o->nload < 8)
			o->load[o->nload++] = ph;
	}
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(e, scn)) != NULL) {
		GElf_Shdr sh;
		cr_assert(gelf_getshdr(scn, &sh) != NULL);
		const char *name = elf_strptr(e, shstrndx, sh.sh_name);
		if (name && strcmp(name, ".probes") == 0) {
			o->probes_lo = sh.sh_addr;
			o->probes_hi = sh.sh_addr + sh.sh_size;
		}
		if (sh.sh_type != SHT_NOTE || !name || strcmp(name, ".note.stapsdt") != 0)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		size_t off = 0, name_off, desc_off;
		GElf_Nhdr nh;
		while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0 &&
		       o->nnotes < 16) {
			const char *desc = (const char *)d->d_buf + desc_off;
			if (nh.n_type != 3 || nh.n_descsz < 27 ||
			    strcmp((const char *)d->d_buf + name_off, "stapsdt") != 0)
				continue;
			struct otel_note *n = &o->notes[o->nnotes++];
			uint64_t addr[3];
			memcpy(addr, desc, sizeof(addr));
			n->pc = addr[0];
			n->sema = addr[2];
			const char *s = desc + 24;
			snprintf(n->provider, sizeof(n->provider), "%s", s);
			s += strlen(s) + 1;
			snprintf(n->name, sizeof(n->name), "%s", s);
			s += strlen(s) + 1;
			snprintf(n->args, sizeof(n->args), "%s", s);
		}
	}
	elf_end(e);
	close(fd);
}

static const struct otel_note *otel_find_note(const struct otel_elf *o, const char *provider,
					      const char *name)
{
	const struct otel_note *found = NULL;
	for (int i = 0; i < o->nnotes; i++) {
		if (strcmp(o->notes[i].provider, provider) == 0 &&
		    strcmp(o->notes[i].name, name) == 0) {
			cr_assert(found == NULL, "%s:%s has two probe sites", provider, name);
			found = &o->notes[i];
		}
	}
	cr_assert(found != NULL, "no probe %s:%s", provider, name);
	return found;
}

/* The semaphore at link-time address vaddr of the plain shim, as process pid has it now. */
static unsigned otel_semaphore(pid_t pid, const struct otel_elf *o, uint64_t vaddr)
{
	uint64_t file_off = UINT64_MAX;
	for (int i = 0; i < o->nload; i++)
		if (vaddr >= o->load[i].p_vaddr && vaddr < o->load[i].p_vaddr + o->load[i].p_filesz)
			file_off = vaddr - o->load[i].p_vaddr + o->load[i].p_offset;
	cr_assert(file_off != UINT64_MAX, "semaphore 0x%llx is in no loaded segment",
		  (unsigned long long)vaddr);
	char real[PATH_MAX], path[64], line[PATH_MAX + 128];
	cr_assert(realpath(LLGO_PLAIN_SHIM, real) != NULL);
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "r");
	cr_assert(f != NULL);
	uint64_t at = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, off;
		char file[PATH_MAX];
		if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %4095s", &lo, &hi, &off, file) != 4 ||
		    strcmp(file, real) != 0)
			continue;
		if (file_off >= off && file_off < off + (hi - lo))
			at = lo + (file_off - off);
	}
	fclose(f);
	cr_assert(at != 0, "pid %d has no mapping of %s holding offset 0x%llx", (int)pid, real,
		  (unsigned long long)file_off);
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
	unsigned short v = 0xffff;
	cr_assert_eq(pread(fd, &v, sizeof(v), (off_t)at), (ssize_t)sizeof(v));
	close(fd);
	return v;
}

/* ---- a program run under the shim, its collector attached before it starts ------------- */

/* Start the program under a shell that waits for a line of stdin before it execs it (the
 * same process) under the plain shim at rate, with the daemon d; attach c to that process in
 * between: c sees every sample of the program's life. */
static void otel_start(struct th_proc *p, struct otel_collector *c, const struct heapd *d,
		       const char *rate, const char *n, const char *threads)
{
	char script[1024];
	snprintf(script, sizeof(script), "read go && LD_PRELOAD='%s' exec '%s' %s %s",
		 LLGO_PLAIN_SHIM, OTEL_PROG, n, threads);
	char *argv[] = { "/bin/sh", "-c", script, NULL };
	th_start(p, d, rate, 16384, "", argv, NULL);
	otel_attach(c, p->pid);
	fprintf(p->in, "go\n");
}

struct otel_obj {
	uint64_t ptr, size;
};

/* The program's "obj" lines up to "held". */
static size_t otel_read_objs(struct th_proc *p, struct otel_obj *objs, size_t max)
{
	char line[128];
	size_t n = 0;
	for (;;) {
		cr_assert(th_read_line(p, line, sizeof(line), 60000), "no \"held\" from the program");
		if (strcmp(line, "held") == 0)
			return n;
		unsigned long long a, s;
		cr_assert_eq(sscanf(line, "obj %llx %llu", &a, &s), 2, "program said: %s", line);
		cr_assert_lt(n, max);
		objs[n].ptr = a;
		objs[n].size = s;
		n++;
	}
}

static void otel_expect_line(struct th_proc *p, const char *want)
{
	char line[128];
	cr_assert(th_read_line(p, line, sizeof(line), 60000), "no \"%s\" from the program", want);
	cr_assert_str_eq(line, want);
}

/* ---- the collector's view: objects alive by address --------------------------------------- */

#define OTEL_SLOTS (1u << 20)

struct otel_live {
	struct otel_slot {
		uint64_t ptr; /* 0: empty, 1: removed */
		uint64_t size, weighted;
	} *slot;
	uint64_t allocs, frees;
	uint64_t orphan_frees;   /* a free of no live alloc */
	uint64_t double_allocs;  /* an alloc at an address already live (a free missed) */
	uint64_t rate1_mismatch; /* at rate 1: weighted != size */
	uint64_t wrong_tgid;
	double alloc_weighted;   /* sum over every alloc */
	size_t seen;             /* events of the collector folded in */
};

static struct otel_slot *otel_slot(struct otel_live *l, uint64_t ptr, bool insert)
{
	uint64_t h = (ptr >> 4) * 0x9e3779b97f4a7c15ull;
	struct otel_slot *tomb = NULL;
	for (uint32_t i = 0; i < OTEL_SLOTS; i++) {
		struct otel_slot *s = &l->slot[(h + i) & (OTEL_SLOTS - 1)];
		if (s->ptr == ptr)
			return s;
		if (s->ptr == 1 && !tomb)
			tomb = s;
		if (s->ptr == 0)
			return insert ? (tomb ? tomb : s) : NULL;
	}
	cr_assert(!insert, "the test's table is full");
	return NULL;
}

/* Fold the collector's new events into l: allocs enter, frees leave. */
static void otel_fold(struct otel_live *l, const struct otel_collector *c, pid_t pid,
		      bool rate1)
{
	for (; l->seen < c->nev; l->seen++) {
		const struct otel_event *e = &c->ev[l->seen];
		if (e->tgid != (uint32_t)pid)
			l->wrong_tgid++;
		if (e->kind == OTEL_EVENT_ALLOC) {
			struct otel_slot *s = otel_slot(l, e->ptr, true);
			if (s->ptr == e->ptr)
				l->double_allocs++;
			s->ptr = e->ptr;
			s->size = e->size;
			s->weighted = e->weighted;
			l->allocs++;
			l->alloc_weighted += (double)e->weighted;
			if (rate1 && e->weighted != e->size)
				l->rate1_mismatch++;
		} else {
			struct otel_slot *s = otel_slot(l, e->ptr, false);
			if (s)
				s->ptr = 1;
			else
				l->orphan_frees++;
			l->frees++;
		}
	}
}

/* Live objects and the sum of their weights. */
static uint64_t otel_live_count(const struct otel_live *l, double *weighted)
{
	uint64_t n = 0;
	*weighted = 0;
	for (uint32_t i = 0; i < OTEL_SLOTS; i++)
		if (l->slot[i].ptr > 1) {
			n++;
			*weighted += (double)l->slot[i].weighted;
		}
	return n;
}

/* ---- the daemon's view -------------------------------------------------------------------- */

struct otel_profile {
	unsigned long long sampled, dropped;
	double alloc_space, inuse_space; /* scaled by the daemon (pprof) */
	size_t samples;                  /* pprof samples (buckets) */
	char acct[512];                  /* the legacy text's accounting line, for messages */
};

static void otel_profile(const struct heapd *d, pid_t pid, struct otel_profile *p)
{
	memset(p, 0, sizeof(*p));
	char *text = heapd_snapshot(d->sock, pid, LLGO_FORMAT_TEXT, NULL);
	struct th_acct a;
	cr_assert(th_text_acct(text, &a), "no accounting in:\n%.2000s", text);
	p->sampled = a.sampled;
	p->dropped = a.dropped;
	const char *line = strstr(text, "# llgo-heap: sampled=");
	snprintf(p->acct, sizeof(p->acct), "%.*s", (int)strcspn(line, "\n"), line);
	free(text);
	size_t len = 0;
	char *pb = heapd_snapshot(d->sock, pid, LLGO_FORMAT_PPROF, &len);
	struct pprofread r;
	char err[256];
	cr_assert(pprofread_load(&r, pb, len, err, sizeof(err)) == 0, "pprof: %s", err);
	long as = pprofread_type(&r, "alloc_space", "bytes");
	long is = pprofread_type(&r, "inuse_space", "bytes");
	cr_assert(as >= 0 && is >= 0);
	for (size_t i = 0; i < r.nsamples; i++) {
		p->alloc_space += (double)r.values[i * r.ntypes + (size_t)as];
		p->inuse_space += (double)r.values[i * r.ntypes + (size_t)is];
	}
	p->samples = r.nsamples;
	pprofread_free(&r);
	free(pb);
}

/* ---- end to end ----------------------------------------------------------------------------- */

/*
 * otel_allocs N 2 at rate under a collector attached from its start: the checks of the file's
 * comment. Returns after the program exited and every check ran.
 */
static void otel_end_to_end(const char *rate, const char *n)
{
	bool rate1 = strcmp(rate, "1") == 0;
	uint64_t r = strtoull(rate, NULL, 10);
	char *dir = th_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct otel_collector c;
	otel_open(&c);
	struct otel_live l;
	memset(&l, 0, sizeof(l));
	l.slot = calloc(OTEL_SLOTS, sizeof(*l.slot));
	cr_assert(l.slot != NULL);
	struct th_proc run;
	otel_start(&run, &c, &d, rate, n, "2");

	/* every object the program holds */
	static struct otel_obj objs[65536];
	size_t nobjs = otel_read_objs(&run, objs, 65536);
	cr_assert_eq(nobjs, 2 * strtoull(n, NULL, 10));
	otel_drain(&c);
	otel_fold(&l, &c, run.pid, rate1);
	size_t probed = 0, wrong_size = 0, wrong_weight = 0;
	for (size_t i = 0; i < nobjs; i++) {
		const struct otel_slot *s = otel_slot(&l, objs[i].ptr, false);
		if (!s)
			continue;
		probed++;
		if (s->size != objs[i].size)
			wrong_size++;
		double want = rate1 ? (double)objs[i].size
				    : (double)objs[i].size / -expm1(-(double)objs[i].size / (double)r);
		if (fabs((double)s->weighted - want) > 0.5 + want * 1e-14)
			wrong_weight++;
	}
	cr_log_info("rate %s: %zu of %zu objects alloc-probed; %llu allocs, %llu frees so far",
		    rate, probed, nobjs, (unsigned long long)l.allocs, (unsigned long long)l.frees);
	if (rate1)
		cr_expect_eq(probed, nobjs, "rate 1: %zu of %zu objects seen", probed, nobjs);
	else
		cr_expect_gt(probed, nobjs / 20, "only %zu of %zu objects seen", probed, nobjs);
	cr_expect_eq(wrong_size, 0, "%zu objects probed with another size", wrong_size);
	cr_expect_eq(wrong_weight, 0, "%zu objects probed with a wrong weight", wrong_weight);
	/* the live heap as the collector has it, against the daemon's in-use view */
	double live_w;
	uint64_t nlive = otel_live_count(&l, &live_w);
	struct otel_profile prof;
	otel_profile(&d, run.pid, &prof);
	double tol = 0.5 * (double)nlive + (double)prof.samples;
	cr_log_info("live: %llu objects, %.0f weighted bytes; profile inuse_space %.0f (%zu samples)",
		    (unsigned long long)nlive, live_w, prof.inuse_space, prof.samples);
	if (rate1)
		cr_expect(live_w == prof.inuse_space,
			  "live %.0f (%llu objects), profile in-use %.0f (%zu samples)\n%s\n%s",
			  live_w, (unsigned long long)nlive, prof.inuse_space, prof.samples,
			  prof.acct, heapd_log(&d));
	else
		cr_expect(fabs(live_w - prof.inuse_space) <= tol, "live %.0f, profile in-use %.0f",
			  live_w, prof.inuse_space);

	/* the program frees everything it held: each gets its free probe (each was tracked) */
	fprintf(run.in, "free\n");
	otel_expect_line(&run, "freed");
	otel_drain(&c);
	otel_fold(&l, &c, run.pid, rate1);
	size_t still = 0;
	for (size_t i = 0; i < nobjs; i++)
		still += otel_slot(&l, objs[i].ptr, false) != NULL;
	cr_expect_eq(still, 0, "%zu freed objects still live for the collector", still);

	int st = th_wait(&run, 60000);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "otel_allocs: status 0x%x", st);
	otel_drain(&c);
	otel_fold(&l, &c, run.pid, rate1);
	cr_expect_eq(l.wrong_tgid, 0);
	cr_expect_eq(l.orphan_frees, 0, "%llu frees of no live alloc",
		     (unsigned long long)l.orphan_frees);
	cr_expect_eq(l.double_allocs, 0, "%llu allocs at a live address",
		     (unsigned long long)l.double_allocs);
	cr_expect_eq(l.rate1_mismatch, 0, "rate 1: %llu allocs with weighted != size",
		     (unsigned long long)l.rate1_mismatch);
	/* the whole life: one alloc per sample the profile holds, the same bytes. The daemon
	 * drains the exited process's rings on its own: wait until it has. */
	long deadline = th_now_ms() + 20000;
	do {
		otel_profile(&d, run.pid, &prof);
		if (prof.sampled - prof.dropped == l.allocs)
			break;
		th_sleep_ms(100);
	} while (th_now_ms() < deadline);
	cr_log_info("whole run: %llu allocs (weighted %.0f), %llu frees; profile sampled=%llu "
		    "dropped=%llu alloc_space %.0f in %zu samples",
		    (unsigned long long)l.allocs, l.alloc_weighted, (unsigned long long)l.frees,
		    prof.sampled, prof.dropped, prof.alloc_space, prof.samples);
	cr_expect_eq(prof.sampled - prof.dropped, l.allocs,
		     "profile: %llu samples recorded (%llu dropped), collector: %llu allocs",
		     prof.sampled - prof.dropped, prof.dropped, (unsigned long long)l.allocs);
	cr_expect_gt(l.frees, nobjs / 20);
	tol = 0.5 * (double)l.allocs + (double)prof.samples;
	if (rate1)
		cr_expect(l.alloc_weighted == prof.alloc_space,
			  "weighted sum %.0f, profile alloc_space %.0f", l.alloc_weighted,
			  prof.alloc_space);
	else
		cr_expect(fabs(l.alloc_weighted - prof.alloc_space) <= tol,
			  "weighted sum %.0f, profile alloc_space %.0f (tolerance %.1f)",
			  l.alloc_weighted, prof.alloc_space, tol);
	otel_close(&c);
	free(l.slot);
	cr_expect_eq(heapd_stop(&d), 0);
	th_rmdir(dir);
}

Test(otel, every_allocation_at_rate_1, .timeout = 300)
{
	OTEL_NEED_BPF();
	otel_end_to_end("1", "2000");
}

Test(otel, sampled_rate_weights_match_the_profile, .timeout = 300)
{
	OTEL_NEED_BPF();
	otel_end_to_end("65536", "4000");
}

Test(otel, notes_and_semaphores, .timeout = 120)
{
	struct otel_elf o;
	otel_read_elf(LLGO_PLAIN_SHIM, &o);
	const struct otel_note *a = otel_find_note(&o, "otel_memory", "alloc");
	const struct otel_note *f = otel_find_note(&o, "otel_memory", "free");
	const struct otel_note *v = otel_find_note(&o, "llgo_heap", "sample");
	/* void *ptr, u64 size, u64 weighted_bytes: unsigned 8-byte values in the first
	 * argument registers (collectors that read pt_regs by the calling convention) */
	cr_expect_str_eq(a->args, "8@%rdi 8@%rsi 8@%rdx");
	cr_expect_str_eq(f->args, "8@%rdi");
	cr_expect(v->args[0] != '\0');
	const struct otel_note *all[] = { a, f, v };
	for (int i = 0; i < 3; i++) {
		cr_expect(all[i]->sema >= o.probes_lo && all[i]->sema + 2 <= o.probes_hi,
			  "%s:%s semaphore 0x%llx outside .probes [0x%llx, 0x%llx)",
			  all[i]->provider, all[i]->name, (unsigned long long)all[i]->sema,
			  (unsigned long long)o.probes_lo, (unsigned long long)o.probes_hi);
		for (int j = 0; j < i; j++)
			cr_expect_neq(all[i]->sema, all[j]->sema);
	}
	OTEL_NEED_BPF();
	/* a running process with nothing attached, then one collector, two, none */
	char *dir = th_tmpdir();
	struct heapd d;
	heapd_start(&d, dir, NULL);
	struct th_proc p;
	char *argv[] = { OTEL_PROG, "100", "1", NULL };
	th_start(&p, &d, "4096", 0, NULL, argv, NULL);
	static struct otel_obj objs[256];
	cr_assert_eq(otel_read_objs(&p, objs, 256), 100);
	cr_expect_eq(otel_semaphore(p.pid, &o, a->sema), 0);
	cr_expect_eq(otel_semaphore(p.pid, &o, f->sema), 0);
	cr_expect_eq(otel_semaphore(p.pid, &o, v->sema), 0);
	struct otel_collector c1, c2;
	otel_open(&c1);
	otel_open(&c2);
	otel_attach(&c1, p.pid);
	cr_expect_eq(otel_semaphore(p.pid, &o, a->sema), 1);
	cr_expect_eq(otel_semaphore(p.pid, &o, f->sema), 1);
	cr_expect_eq(otel_semaphore(p.pid, &o, v->sema), 0, "llgo_heap:sample's half moved");
	/* the kernel counts probe sites armed in the process, not collectors */
	otel_attach(&c2, p.pid);
	cr_expect_eq(otel_semaphore(p.pid, &o, a->sema), 1);
	cr_expect_eq(otel_semaphore(p.pid, &o, f->sema), 1);
	/* the frees of the 100 objects: both collectors see the same frees */
	fprintf(p.in, "free\n");
	otel_expect_line(&p, "freed");
	otel_drain(&c1);
	otel_drain(&c2);
	size_t f1 = 0, f2 = 0;
	for (size_t i = 0; i < c1.nev; i++)
		f1 += c1.ev[i].kind == OTEL_EVENT_FREE;
	for (size_t i = 0; i < c2.nev; i++)
		f2 += c2.ev[i].kind == OTEL_EVENT_FREE;
	cr_expect_gt(f1, 0, "no free probe for the sampled objects freed");
	cr_expect_eq(f1, f2);
	otel_detach(&c1);
	cr_expect_eq(otel_semaphore(p.pid, &o, a->sema), 1);
	otel_detach(&c2);
	cr_expect_eq(otel_semaphore(p.pid, &o, a->sema), 0);
	cr_expect_eq(otel_semaphore(p.pid, &o, f->sema), 0);
	int st = th_wait(&p, 30000);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "otel_allocs: status 0x%x", st);
	otel_close(&c1);
	otel_close(&c2);
	cr_expect_eq(heapd_stop(&d), 0);
	th_rmdir(dir);
}
