// SPDX-License-Identifier: MIT
/*
 * slowpath_bench.c: the costs behind a sample, one mode per figure of docs/performance.md.
 *
 *   capture --frames N [--samples K] [--gap-ns G] [--delay-ms D]
 *       Times every malloc(16) individually (rdtscp, calibrated against CLOCK_MONOTONIC) at
 *       the bottom of a recursion deep enough that a frame-pointer walk from the allocating
 *       call site sees N frames. Run under the shim at rate 1 (every call takes the sampled
 *       path: sampler, frame-pointer capture, ring push) and without it (the allocator
 *       alone); the difference of the two medians is the sampled path's own cost. G ns of
 *       untimed spinning between samples lets the daemon keep the ring drained, so every
 *       timed sample is a real push, not a drop. D ms of sleep before the timed loop let
 *       `llgo-heap verify` attach first (bench.sh's verify rows).
 *   push --frames N [--samples K]
 *       The shim's slow-path work alone, from its own objects linked in: stack_capture (the
 *       frame-pointer walk and trimming) + emit_push_alloc (record, checksum, copy into a
 *       private 256 KiB ring, release stores), timed per sample at N frames; the ring is
 *       emptied between samples (the daemon's part, untimed). Also times the sampler's
 *       draw of the next threshold (sample_next_threshold). rdtscp's own cost is subtracted.
 *   drain [--frames N] [--records R]
 *       The daemon's consumer on one core: fills an in-memory ring the way the shim does
 *       (records, checksums, head and sampled published), then times ring_reader_drain with
 *       bucket_table_add as the callback (records already in known buckets, the steady
 *       state), and with an empty callback. Prints records per second.
 *   unwind --frames N [--records R] [--libunwind]
 *       The daemon's DWARF unwinding (agent/unwind/unwind.c) on one core: takes one real stack copy
 *       of this process at the bottom of a recursion of N frames, the way the shim does in
 *       dwarf mode (stackcopy_take), then unwinds it R times with unwind_stack against this
 *       process's own maps and files (cold: the first, which opens and indexes the files;
 *       warm: the rest, the per-pc caches filled). Prints samples per second of the
 *       thread's CPU time (and the wall time per sample), the frames found, the record's size
 *       in the ring, the memory the caches added, and how many stacks the fast path
 *       (agent/unwind/unwind_fast.c) unwound; --libunwind: libunwind alone, as before issue 21.
 *   snapshot --buckets N
 *       Builds a bucket table of N (stack, size) buckets whose frames are real addresses in
 *       this program and libc, then times profile_collect + snapshot_write(pprof) (cold: the
 *       first snapshot symbolizes; warm: the second) and reports the resident memory the
 *       table, the maps and the snapshot added (VmRSS deltas) and the table's own count.
 *
 * Built a second time with -DSLOWPATH_CAPTURE_ONLY as capture_bench: the capture mode alone,
 * linking nothing of ours, so that under the preloaded shim the process holds one shim (the
 * verify rows attach `llgo-heap verify` to it).
 *
 * It links the agent's objects (everything but daemon.o and cli.o) and the shim's objects
 * (everything but override*.o: no malloc interposition), never the shim's malloc: the capture
 * mode sees the interposed malloc only when the driver preloads libllgoheap.so.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#ifndef SLOWPATH_CAPTURE_ONLY
#include "../agent/output/snapshot.h"
#include "../shim/internal.h"
#endif

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

#ifndef SLOWPATH_CAPTURE_ONLY
static long vmrss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &v) == 1)
			break;
	fclose(f);
	return v;
}
#endif

/* Mean of the sorted samples below the 99th percentile: the TSC of some virtual machines
 * ticks in steps of ~10 ns, which a median keeps and a mean averages out. */
static double trimmed_mean(const uint64_t *sorted, size_t n)
{
	size_t k = (size_t)((double)n * 0.99);
	double sum = 0;
	for (size_t i = 0; i < k; i++)
		sum += (double)sorted[i];
	return k ? sum / (double)k : 0;
}

/* ---- capture ------------------------------------------------------------------------- */

static double tsc_per_ns;

static void tsc_calibrate(void)
{
	unsigned aux;
	double t0 = now_ns();
	uint64_t c0 = __rdtscp(&aux);
	while (now_ns() - t0 < 50e6)
		;
	double t1 = now_ns();
	uint64_t c1 = __rdtscp(&aux);
	tsc_per_ns = (double)(c1 - c0) / (t1 - t0);
}

/* Frames a frame-pointer walk sees from the caller of this function upwards, with the same
 * plausibility rules an in-process walker uses (growing, aligned, within 8 MiB). */
__attribute__((noinline)) static int fp_frames(void)
{
	uintptr_t *fp = __builtin_frame_address(0);
	int n = 0;
	for (;;) {
		uintptr_t *next = (uintptr_t *)fp[0];
		uintptr_t ret = fp[1];
		if (!ret)
			break;
		n++;
		if (next <= fp || ((uintptr_t)next & 7) || (uintptr_t)next - (uintptr_t)fp > (8u << 20))
			break;
		fp = next;
	}
	return n;
}

struct cap_opts {
	int frames;
	long samples;
	long gap_ns;
	long delay_ms;
	uint64_t *cycles;
	int seen;
	int probe; /* only count the frames */
};

__attribute__((noinline)) static void capture_bottom(struct cap_opts *o)
{
	unsigned aux;
	/* frames the shim's walk will see: this function's caller chain plus this frame */
	o->seen = fp_frames();
	if (o->probe)
		return;
	uint64_t gap = (uint64_t)((double)o->gap_ns * tsc_per_ns);
	for (long i = 0; i < o->samples + 10000; i++) {
		_mm_lfence();
		uint64_t c0 = __rdtscp(&aux);
		void *p = malloc(16);
		uint64_t c1 = __rdtscp(&aux);
		_mm_lfence();
		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
		if (i >= 10000)
			o->cycles[i - 10000] = c1 - c0;
		if (gap) {
			uint64_t until = __rdtscp(&aux) + gap;
			while (__rdtscp(&aux) < until)
				;
		}
	}
}

__attribute__((noinline)) static int capture_descend(struct cap_opts *o, int left)
{
	if (left <= 0) {
		capture_bottom(o);
	} else {
		capture_descend(o, left - 1);
	}
	/* not a tail call: keeps every frame on the stack */
	__asm__ volatile("" ::: "memory");
	return left;
}

static int mode_capture(int argc, char **argv)
{
	struct cap_opts o = { .frames = 10, .samples = 200000, .gap_ns = 0 };
	for (int i = 0; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--frames") == 0)
			o.frames = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--samples") == 0)
			o.samples = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--gap-ns") == 0)
			o.gap_ns = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--delay-ms") == 0)
			o.delay_ms = atol(argv[i + 1]);
	}
	if (o.frames < 2 || o.frames > 64 || o.samples < 100)
		return 2;
	tsc_calibrate();
	o.cycles = malloc((size_t)o.samples * sizeof(uint64_t));
	if (!o.cycles)
		return 1;
	/* Find the recursion depth giving the wanted frame count: the frames above main vary
	 * with libc's build (its start code may or may not keep frame pointers). */
	int left = o.frames;
	o.probe = 1;
	capture_descend(&o, left);
	left += o.frames - o.seen;
	if (left < 0)
		left = 0;
	o.probe = 0;
	if (o.delay_ms > 0) {
		struct timespec ts = { o.delay_ms / 1000, (o.delay_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	capture_descend(&o, left);
	qsort(o.cycles, (size_t)o.samples, sizeof(uint64_t), cmp_u64);
	double med = (double)o.cycles[o.samples / 2] / tsc_per_ns;
	double p99 = (double)o.cycles[(size_t)((double)o.samples * 0.99)] / tsc_per_ns;
	double p999 = (double)o.cycles[(size_t)((double)o.samples * 0.999)] / tsc_per_ns;
	double mn = (double)o.cycles[0] / tsc_per_ns;
	double mean = trimmed_mean(o.cycles, (size_t)o.samples) / tsc_per_ns;
	printf("CAPTURE frames=%d median_ns=%.1f mean_ns=%.1f p99_ns=%.1f p999_ns=%.1f "
	       "min_ns=%.1f samples=%ld gap_ns=%ld pid=%d\n",
	       o.seen, med, mean, p99, p999, mn, o.samples, o.gap_ns, (int)getpid());
	free(o.cycles);
	return 0;
}


#ifndef SLOWPATH_CAPTURE_ONLY
/* ---- push: the shim's own capture + push, linked in --------------------------------------- */

struct push_opts {
	int frames;
	long samples;
	uint64_t *cycles;
	uint64_t *draw_cycles;
	int seen;
	int probe;
	struct emit_ring ring;
	uintptr_t lo, hi;
};

/* Stands where sample_malloc stands: called from the allocating function, so its return
 * address is frame 0 and its own frame pointer leads to the caller's frame. */
__attribute__((noinline)) static void push_slow(struct push_opts *o, long i)
{
	unsigned aux;
	uint64_t frames[LLGO_MAX_FRAMES];
	_mm_lfence();
	uint64_t c0 = __rdtscp(&aux);
	uint32_t n = stack_capture(frames, LLGO_MAX_FRAMES, __builtin_return_address(0),
				   __builtin_frame_address(0), o->lo, o->hi, 0, 0);
	bool ok = emit_push_alloc(&o->ring, 16, 1, 0x1000, 1, frames, n);
	uint64_t c1 = __rdtscp(&aux);
	_mm_lfence();
	if (o->probe) {
		o->seen = (int)n;
	} else if (i >= 0) {
		o->cycles[i] = c1 - c0;
	}
	if (!ok)
		fprintf(stderr, "slowpath_bench: push dropped\n");
	/* the daemon's part, untimed: consume everything */
	atomic_store_explicit(&o->ring.hdr->tail,
			      atomic_load_explicit(&o->ring.hdr->head, memory_order_relaxed),
			      memory_order_release);
}

__attribute__((noinline)) static void push_bottom(struct push_opts *o)
{
	if (o->probe) {
		push_slow(o, -1);
		return;
	}
	for (long i = -10000; i < o->samples; i++)
		push_slow(o, i);
}

__attribute__((noinline)) static int push_descend(struct push_opts *o, int left)
{
	if (left <= 0)
		push_bottom(o);
	else
		push_descend(o, left - 1);
	__asm__ volatile("" ::: "memory");
	return left;
}

static int mode_push(int argc, char **argv)
{
	struct push_opts o = { .frames = 10, .samples = 200000 };
	for (int i = 0; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--frames") == 0)
			o.frames = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--samples") == 0)
			o.samples = atol(argv[i + 1]);
	}
	if (o.frames < 2 || o.frames > 64 || o.samples < 100)
		return 2;
	tsc_calibrate();
	stack_init();
	stack_mapping_of((uintptr_t)__builtin_frame_address(0), &o.lo, &o.hi);
	size_t data = LLGO_RING_DEFAULT_DATA, len = LLGO_RING_HEADER_SIZE + data;
	void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED || emit_ring_format(&o.ring, mem, len, data, 1, 1))
		return 1;
	o.cycles = malloc((size_t)o.samples * sizeof(uint64_t));
	o.draw_cycles = malloc((size_t)o.samples * sizeof(uint64_t));
	if (!o.cycles || !o.draw_cycles)
		return 1;
	int left = o.frames;
	o.probe = 1;
	push_descend(&o, left);
	left += o.frames - o.seen;
	if (left < 0)
		left = 0;
	push_descend(&o, left); /* probe again: o.seen is what the timed samples capture */
	o.probe = 0;
	push_descend(&o, left);
	/* the sampler's draw of the next threshold, the other part of a sample */
	uint64_t rng = sample_rng_seed(12345, 678);
	int64_t sink = 0;
	for (long i = 0; i < o.samples; i++) {
		unsigned aux;
		_mm_lfence();
		uint64_t c0 = __rdtscp(&aux);
		sink += sample_next_threshold(&rng, LLGO_RATE_DEFAULT);
		uint64_t c1 = __rdtscp(&aux);
		_mm_lfence();
		o.draw_cycles[i] = c1 - c0;
	}
	__asm__ volatile("" : : "r"(sink));
	qsort(o.cycles, (size_t)o.samples, sizeof(uint64_t), cmp_u64);
	qsort(o.draw_cycles, (size_t)o.samples, sizeof(uint64_t), cmp_u64);
	/* rdtscp's own cost, to subtract: an empty timed region */
	uint64_t empty[1001];
	for (int i = 0; i < 1001; i++) {
		unsigned aux;
		_mm_lfence();
		uint64_t c0 = __rdtscp(&aux);
		uint64_t c1 = __rdtscp(&aux);
		_mm_lfence();
		empty[i] = c1 - c0;
	}
	qsort(empty, 1001, sizeof(uint64_t), cmp_u64);
	double e = (double)empty[500] / tsc_per_ns;
	size_t n = (size_t)o.samples;
	printf("PUSH frames=%d median_ns=%.1f mean_ns=%.1f p99_ns=%.1f p999_ns=%.1f "
	       "draw_median_ns=%.1f draw_p99_ns=%.1f timer_ns=%.1f samples=%ld\n",
	       o.seen, (double)o.cycles[n / 2] / tsc_per_ns - e,
	       trimmed_mean(o.cycles, n) / tsc_per_ns - e,
	       (double)o.cycles[(size_t)((double)n * 0.99)] / tsc_per_ns - e,
	       (double)o.cycles[(size_t)((double)n * 0.999)] / tsc_per_ns - e,
	       (double)o.draw_cycles[n / 2] / tsc_per_ns - e,
	       (double)o.draw_cycles[(size_t)((double)n * 0.99)] / tsc_per_ns - e, e, o.samples);
	return 0;
}

/* ---- drain --------------------------------------------------------------------------- */

struct producer {
	struct llgo_ring_header *hdr;
	unsigned char *data;
	uint64_t mask;
	uint64_t head;
	uint64_t seq;
	uint32_t nframes;
	uint64_t n; /* records written, selects stack and size */
};

static void stack_for(uint64_t id, uint32_t nframes, uint64_t *pcs)
{
	for (uint32_t j = 0; j < nframes; j++) {
		uint64_t h = (id + 1) * 0x9e3779b97f4a7c15ULL ^ (j + 1) * 0xc2b2ae3d27d4eb4fULL;
		h ^= h >> 29;
		pcs[j] = 0x400000 + (h & 0xfffff0);
	}
}

/* Fill the ring until the next record would not fit; publish as the shim does: record
 * bytes, then head (release), then sampled (release). Returns records written. */
static uint64_t producer_fill(struct producer *p)
{
	unsigned char rec[LLGO_RECORD_MAX_LEN];
	uint32_t len = llgo_record_alloc_len(p->nframes);
	uint64_t tail = atomic_load_explicit(&p->hdr->tail, memory_order_acquire);
	uint64_t written = 0;
	while (p->head + len - tail <= p->mask + 1) {
		struct llgo_record *r = (struct llgo_record *)rec;
		memset(r, 0, sizeof(*r));
		r->kind = LLGO_REC_ALLOC;
		r->version = LLGO_REC_VERSION;
		r->nframes = (uint16_t)p->nframes;
		r->length = len;
		r->seq = ++p->seq;
		/* 1,000 stacks x 4 sizes: 4,000 buckets, all known after the first pass */
		uint64_t id = (p->n * 7919) % 1000;
		r->size = 16u << (p->n % 4);
		r->rate = LLGO_RATE_DEFAULT;
		r->addr = 0x10000 + p->n * 16;
		r->tid = 1234;
		stack_for(id, p->nframes, (uint64_t *)(rec + sizeof(*r)));
		r->checksum = llgo_record_checksum(rec, len);
		llgo_ring_copy_in(p->data, p->mask, p->head, rec, len);
		p->head += len;
		p->n++;
		written++;
	}
	atomic_store_explicit(&p->hdr->head, p->head, memory_order_release);
	atomic_store_explicit(&p->hdr->sampled, p->seq, memory_order_release);
	return written;
}

struct drain_ctx {
	struct bucket_table *t;
	uint64_t n;
};

static void drain_add(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	struct drain_ctx *c = arg;
	bucket_table_add(c->t, frames, rec->nframes, rec->size, rec->rate);
	c->n++;
}

static void drain_count(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	(void)rec;
	(void)frames;
	((struct drain_ctx *)arg)->n++;
}

static int drain_run(uint32_t nframes, uint64_t records, int with_table)
{
	const uint64_t data_size = 16u << 20;
	size_t map_len = LLGO_RING_HEADER_SIZE + data_size;
	void *mem = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			 0);
	if (mem == MAP_FAILED)
		return -errno;
	struct llgo_ring_header *h = mem;
	memset(h, 0, sizeof(*h));
	h->magic = LLGO_RING_MAGIC;
	h->version = LLGO_RING_VERSION;
	h->header_size = LLGO_RING_HEADER_SIZE;
	h->data_size = data_size;
	h->ring_id = 1;
	atomic_store(&h->state, LLGO_RING_OWNED);
	struct producer p = { h, (unsigned char *)mem + LLGO_RING_HEADER_SIZE, data_size - 1, 0, 0,
			      nframes, 0 };
	struct ring_reader r;
	int rc = ring_reader_init(&r, mem, map_len, 1, (uint32_t)data_size);
	if (rc) {
		fprintf(stderr, "slowpath_bench: ring_reader_init: %s\n", strerror(-rc));
		return rc;
	}
	struct drain_ctx c = { bucket_table_new(0, 0), 0 };
	/* one untimed pass creates the 4,000 buckets */
	producer_fill(&p);
	ring_reader_drain(&r, with_table ? drain_add : drain_count, &c);
	double t = 0;
	uint64_t done = 0;
	while (done < records) {
		producer_fill(&p);
		uint64_t before = c.n;
		double t0 = now_ns();
		ring_reader_drain(&r, with_table ? drain_add : drain_count, &c);
		t += now_ns() - t0;
		done += c.n - before;
	}
	struct bucket_stats st;
	bucket_table_stats(c.t, &st);
	printf("DRAIN frames=%u callback=%s records=%" PRIu64 " seconds=%.3f "
	       "records_per_sec=%.0f ns_per_record=%.1f corrupt=%" PRIu64 " buckets=%" PRIu64 "\n",
	       nframes, with_table ? "bucket_table_add" : "none", done, t / 1e9,
	       (double)done / (t / 1e9), t / (double)done, r.counts.corrupt, st.buckets);
	bucket_table_free(c.t);
	munmap(mem, map_len);
	return r.counts.corrupt ? 1 : 0;
}

static int mode_drain(int argc, char **argv)
{
	uint32_t frames = 10;
	uint64_t records = 5000000;
	for (int i = 0; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--frames") == 0)
			frames = (uint32_t)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--records") == 0)
			records = strtoull(argv[i + 1], NULL, 10);
	}
	if (frames < 1 || frames > LLGO_MAX_FRAMES)
		return 2;
	int rc = drain_run(frames, records, 0);
	return rc | drain_run(frames, records, 1);
}

/* ---- snapshot ------------------------------------------------------------------------ */

/* Real code addresses: executable mappings of this program and of libc. */
static size_t pc_pool(uint64_t *pool, size_t max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint64_t lo[8], hi[8];
	int n = 0;
	if (!f)
		return 0;
	while (n < 8 && fgets(line, sizeof(line), f)) {
		uint64_t a, b;
		char perms[8], path[400] = "";
		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %*s %*s %*s %399s", &a, &b, perms,
			   path) < 3)
			continue;
		if (perms[2] != 'x' || path[0] != '/')
			continue;
		if (!strstr(path, "slowpath_bench") && !strstr(path, "libc.so"))
			continue;
		lo[n] = a;
		hi[n] = b;
		n++;
	}
	fclose(f);
	if (!n)
		return 0;
	uint64_t total = 0;
	for (int i = 0; i < n; i++)
		total += hi[i] - lo[i];
	for (size_t k = 0; k < max; k++) {
		uint64_t off = (k * (total / max)) + 1;
		int i = 0;
		while (off >= hi[i] - lo[i]) {
			off -= hi[i] - lo[i];
			i++;
		}
		pool[k] = lo[i] + off;
	}
	return max;
}

static int mode_snapshot(int argc, char **argv)
{
	uint64_t nbuckets = 10000;
	for (int i = 0; i + 1 < argc; i += 2)
		if (strcmp(argv[i], "--buckets") == 0)
			nbuckets = strtoull(argv[i + 1], NULL, 10);
	enum { POOL = 16384, FRAMES = 10 };
	static uint64_t pool[POOL];
	if (!pc_pool(pool, POOL)) {
		fprintf(stderr, "slowpath_bench: no code mappings found\n");
		return 1;
	}
	long rss0 = vmrss_kb();
	struct bucket_table *t = bucket_table_new(nbuckets + 16, 0);
	if (!t)
		return 1;
	/* nbuckets/2 stacks x 2 sizes, each bucket counted 3 times */
	uint64_t pcs[FRAMES];
	for (uint64_t b = 0; b < nbuckets; b++) {
		uint64_t s = b / 2;
		for (int j = 0; j < FRAMES; j++) {
			uint64_t h = (s + 1) * 0x9e3779b97f4a7c15ULL + (uint64_t)j * 0x632be59bd9b4e019ULL;
			h ^= h >> 31;
			pcs[j] = pool[h % POOL];
		}
		for (int k = 0; k < 3; k++)
			bucket_table_add(t, pcs, FRAMES, 32u << (b % 2), LLGO_RATE_DEFAULT);
	}
	struct bucket_stats st;
	bucket_table_stats(t, &st);
	long rss1 = vmrss_kb();
	struct procmaps *maps = procmaps_new(getpid());
	if (!maps) {
		fprintf(stderr, "slowpath_bench: procmaps_new failed\n");
		return 1;
	}
	double ms[2];
	size_t out_len = 0;
	for (int pass = 0; pass < 2; pass++) {
		struct profile p;
		struct buf out;
		memset(&p, 0, sizeof(p));
		buf_init(&out);
		p.meta.pid = getpid();
		double t0 = now_ns();
		int rc = profile_collect(&p, t);
		if (!rc) {
			p.meta.pid = getpid();
			p.meta.rate = LLGO_RATE_DEFAULT;
			rc = snapshot_write(&out, &p, maps, LLGO_FORMAT_PPROF, 0, 0);
		}
		ms[pass] = (now_ns() - t0) / 1e6;
		if (rc) {
			fprintf(stderr, "slowpath_bench: snapshot: %s\n", strerror(-rc));
			return 1;
		}
		out_len = out.len;
		profile_release(&p);
		buf_free(&out);
	}
	long rss2 = vmrss_kb();
	printf("SNAPSHOT buckets=%" PRIu64 " stacks=%" PRIu64 " cold_ms=%.1f warm_ms=%.1f "
	       "pprof_bytes=%zu table_bytes=%" PRIu64 " rss_table_kb=%ld rss_total_kb=%ld\n",
	       st.buckets, st.stacks, ms[0], ms[1], out_len, st.bytes, rss1 - rss0, rss2 - rss0);
	procmaps_free(maps);
	bucket_table_free(t);
	return 0;
}

/* ---- unwind --------------------------------------------------------------------------- */

struct uw_copy {
	struct stackcopy sc;
	unsigned char *stack;
	uint32_t nframes; /* the frame-pointer walk's, as in the record */
};

__attribute__((noinline)) static void uw_take(struct uw_copy *c)
{
	struct llgo_heap_thread t;
	memset(&t, 0, sizeof(t));
	stack_mapping_of((uintptr_t)__builtin_frame_address(0), &t.stack_lo, &t.stack_hi);
	t.stack_end = t.stack_hi;
	uint64_t frames[LLGO_MAX_FRAMES];
	void *frame = __builtin_frame_address(0);
	void *ra = __builtin_return_address(0);
	c->nframes = stack_walk(frames, LLGO_MAX_FRAMES, (uintptr_t)frame, t.stack_lo, t.stack_hi);
	if (!stackcopy_take(&c->sc, &t, frames, c->nframes, ra, frame, 0) || !c->sc.copy)
		return;
	c->stack = malloc(c->sc.regs.stack_len);
	if (c->stack)
		memcpy(c->stack, c->sc.stack, c->sc.regs.stack_len);
}

__attribute__((noinline)) static int uw_descend(struct uw_copy *c, int left)
{
	if (left <= 0)
		uw_take(c);
	else
		uw_descend(c, left - 1);
	__asm__ volatile("" ::: "memory");
	return left;
}

static int mode_unwind(int argc, char **argv)
{
	int frames = 30;
	long records = 200000;
	bool libunwind = false;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--libunwind") == 0)
			libunwind = true;
		else if (i + 1 < argc && strcmp(argv[i], "--frames") == 0)
			frames = atoi(argv[++i]);
		else if (i + 1 < argc && strcmp(argv[i], "--records") == 0)
			records = atol(argv[++i]);
	}
	setenv("LLGO_HEAP_UNWIND", "dwarf", 1);
	stackcopy_init();
	struct uw_copy c;
	memset(&c, 0, sizeof(c));
	/* main and this function are two of the frames */
	uw_descend(&c, frames > 3 ? frames - 3 : 0);
	if (!c.stack) {
		fprintf(stderr, "unwind: no stack copy\n");
		return 1;
	}
	long rss0 = vmrss_kb();
	struct procmaps *maps = procmaps_new(getpid());
	struct unwind *u = unwind_new(getpid(), false);
	unwind_set_fast(u, libunwind ? UNWIND_FAST_OFF : UNWIND_FAST_ON);
	uint64_t out[UNWIND_MAX_FRAMES];
	bool trunc = true, unknown = false;
	double t0 = now_ns();
	uint32_t n = unwind_stack(u, maps, &c.sc.regs, c.stack, NULL, 0, out, UNWIND_MAX_FRAMES,
				  &trunc, &unknown);
	double cold = now_ns() - t0;
	/* CPU time of this thread, not wall time: on a shared machine the wall clock also
	 * counts the time other work held the core; throughput on one core is what we own. */
	struct timespec c0, c1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	t0 = now_ns();
	for (long i = 0; i < records; i++)
		n = unwind_stack(u, maps, &c.sc.regs, c.stack, NULL, 0, out, UNWIND_MAX_FRAMES,
				 &trunc, &unknown);
	double wall = (now_ns() - t0) / (double)records;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	double warm = ((double)(c1.tv_sec - c0.tv_sec) * 1e9 + (double)(c1.tv_nsec - c0.tv_nsec)) /
		      (double)records;
	long rss1 = vmrss_kb();
	uint64_t files, bytes;
	unwind_cache_stats(&files, &bytes);
	struct unwind_stats st;
	unwind_get_stats(u, &st);
	printf("UNWIND path=%s frames=%u truncated=%d record_bytes=%u stack_bytes=%u cold_us=%.1f "
	       "warm_ns=%.0f wall_ns=%.0f samples_per_sec=%.0f table_searches_per_sample=%.2f "
	       "files=%llu cache_rss_kb=%ld fast_stacks=%llu\n",
	       libunwind ? "libunwind" : "fast", n, trunc,
	       llgo_record_raw_fixed_len(c.nframes) + c.sc.regs.stack_len, c.sc.regs.stack_len,
	       cold / 1e3, warm, wall, 1e9 / warm, (double)st.proc_lookups / (double)(records + 1),
	       (unsigned long long)files, rss1 - rss0, (unsigned long long)st.fast);
	unwind_free(u);
	procmaps_free(maps);
	free(c.stack);
	return 0;
}
#endif /* !SLOWPATH_CAPTURE_ONLY */

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: slowpath_bench capture|push|drain|unwind|snapshot [options]\n");
		return 2;
	}
	if (strcmp(argv[1], "capture") == 0)
		return mode_capture(argc - 2, argv + 2);
#ifndef SLOWPATH_CAPTURE_ONLY
	if (strcmp(argv[1], "push") == 0)
		return mode_push(argc - 2, argv + 2);
	if (strcmp(argv[1], "drain") == 0)
		return mode_drain(argc - 2, argv + 2);
	if (strcmp(argv[1], "snapshot") == 0)
		return mode_snapshot(argc - 2, argv + 2);
	if (strcmp(argv[1], "unwind") == 0)
		return mode_unwind(argc - 2, argv + 2);
#endif
	fprintf(stderr, "slowpath_bench: unknown mode %s\n", argv[1]);
	return 2;
}
