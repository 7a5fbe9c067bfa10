// SPDX-License-Identifier: MIT
/*
 * snapshot_bench.c: does a large snapshot stop the drain? One in-process llgo-heapd server
 * (server_new + server_start: its event loop, workers and drain thread, on a socket in a
 * temporary folder) serves one session of this process whose rings are memfds written with
 * the shim's own emit_push_alloc. The session is filled with --buckets N distinct
 * (stack, size) buckets and (--live 1, the default) a live-object table holding one live
 * object of each, so every snapshot also applies the in-use table (inuse.c); then:
 *
 *   - a probe thread pushes one record every --gap-us microseconds into a ring of its own
 *     (a stack that has a bucket already: the drain's steady state) and notes when it pushed
 *     it and the ring position after it;
 *   - a watch thread polls (every 20 us) the ring's tail (the position the daemon has consumed, which it
 *     publishes with a release store) and notes when each probe was consumed: the difference
 *     is the time the record waited for a drain (the drain delay);
 *   - for --seconds, first without snapshots (baseline), then while the main thread takes
 *     pprof snapshots of the session back to back through the snapshot service (what SNAPSHOT
 *     and the HTTP endpoints run).
 *
 * Prints one line per phase: SNAPBENCH phase=... buckets= snapshots= snapshot_ms= (median)
 * delay_p50_us= delay_p99_us= delay_max_us= probes=. A snapshot that holds the session's drain
 * lock while it copies the table shows as a delay near snapshot_ms; one that reads the table
 * beside the drain leaves the delay at the drain thread's poll interval (1 ms when busy).
 *
 * Built with -DSNAPSHOT_BENCH_BEFORE it compiles against the tree before the snapshot service
 * (server_snapshot in server.c, session.h), to measure the old path with the same program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef SNAPSHOT_BENCH_BEFORE
#include "../agent/ingest/session.h"
#define snapshot_take server_snapshot
#define SNAPSHOT_SOURCE(srv) (srv)
#else
#include "../agent/output/snapshot.h"
#include "../agent/server/server.h"
#define SNAPSHOT_SOURCE(srv) server_snapshot_source(srv)
#endif
#include "../shared/live.h"
#include "../shim/internal.h"

#define RING_DATA (4u << 20)
#define MAX_PROBES (1u << 20)
#define FRAMES 8u

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int sealed_memfd(size_t size)
{
	int fd = memfd_create("snapbench", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		perror("snapshot_bench: memfd");
		exit(1);
	}
	return fd;
}

struct pring {
	int fd;
	struct emit_ring ring;
};

static void pring_new(struct pring *r, uint32_t id)
{
	size_t len = LLGO_RING_HEADER_SIZE + (size_t)RING_DATA;
	r->fd = sealed_memfd(len);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (p == MAP_FAILED || emit_ring_format(&r->ring, p, len, RING_DATA, id, 0) != 0) {
		fprintf(stderr, "snapshot_bench: ring\n");
		exit(1);
	}
}

/* Fill record i: FRAMES frames, the leaf distinct per record, sizes of 8 classes. */
static void fill_frames(uint64_t *frames, size_t i)
{
	for (unsigned k = 0; k < FRAMES; k++)
		frames[k] = 0x7f0000200000ull + 0x100 * k;
	frames[0] = 0x7f0010000000ull + 16 * (uint64_t)i;
}

static uint64_t fill_leaf(size_t i)
{
	return 0x7f0010000000ull + 16 * (uint64_t)i;
}

static uint64_t fill_size(size_t i)
{
	return 32 + (i & 7) * 16;
}

static uint64_t ring_tail(const struct pring *r)
{
	/* acquire: pairs with the daemon's release store of tail after it copied records out */
	return atomic_load_explicit(&r->ring.hdr->tail, memory_order_acquire);
}

static uint64_t ring_head(const struct pring *r)
{
	return atomic_load_explicit(&r->ring.hdr->head, memory_order_relaxed);
}

static struct session *attach(struct session_registry *reg)
{
	struct session *s = session_new(reg, getpid(), getuid(), getgid(), "snapbench", RING_DATA);
	int cfd = sealed_memfd(LLGO_CTL_SIZE);
	struct llgo_ctl *ctl =
		mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
	if (!s || ctl == MAP_FAILED) {
		fprintf(stderr, "snapshot_bench: session\n");
		exit(1);
	}
	ctl->magic = LLGO_CTL_MAGIC;
	ctl->version = LLGO_CTL_VERSION;
	ctl->size = LLGO_CTL_SIZE;
	atomic_store(&ctl->rate_word, 1);
	if (session_attach_ctl(s, cfd) != 0) {
		fprintf(stderr, "snapshot_bench: control page\n");
		exit(1);
	}
	close(cfd);
	munmap(ctl, LLGO_CTL_SIZE);
	session_register(s);
	return s;
}

/* A live-object table as the shim keeps it (shared/live.h), one live entry per fill record:
 * every snapshot then applies it (inuse.c), as it does for a process that tracks frees. */
static void add_live_table(struct session *s, size_t n)
{
	int fd = memfd_create("snapbench-live", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)LLGO_LIVE_MAP_SIZE) < 0) {
		perror("snapshot_bench: live table");
		exit(1);
	}
	unsigned char *m = mmap(NULL, LLGO_LIVE_MAP_SIZE, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (m == MAP_FAILED) {
		perror("snapshot_bench: live table");
		exit(1);
	}
	struct llgo_live_header *h = (struct llgo_live_header *)m;
	h->magic = LLGO_LIVE_MAGIC;
	h->version = LLGO_LIVE_VERSION;
	h->header_size = LLGO_LIVE_HEADER_SIZE;
	h->levels = LLGO_LIVE_LEVELS;
	h->level0 = LLGO_LIVE_LEVEL0;
	uint32_t top = 0;
	while (llgo_live_level_start(top + 1) < n)
		top++;
	atomic_store(&h->top, top);
	struct llgo_live_entry *e = (struct llgo_live_entry *)(m + LLGO_LIVE_HEADER_SIZE);
	uint64_t frames[FRAMES];
	fill_frames(frames, 0);
	for (size_t i = 0; i < n; i++) {
		frames[0] = fill_leaf(i);
		e[i].key = llgo_live_key(frames, FRAMES, fill_size(i), 1);
		e[i].ref = LLGO_LIVE_REF(0, i + 1); /* ring 0's record i has seq i + 1 */
		e[i].size = LLGO_LIVE_SIZE_OFF(fill_size(i), 0);
		atomic_store_explicit(&e[i].addr, 0x100000000ull + 64 * (uint64_t)i,
				      memory_order_release);
	}
	munmap(m, LLGO_LIVE_MAP_SIZE);
	if (inuse_map(s, fd) != 0) {
		fprintf(stderr, "snapshot_bench: inuse_map failed\n");
		exit(1);
	}
	close(fd);
}

/* ---- probes ------------------------------------------------------------------------------ */

struct probes {
	struct pring *ring;
	unsigned gap_us;
	_Atomic bool stop;
	/* written by the probe thread: at[i] (push time) and pos[i] before n is released */
	uint64_t *at, *pos, *delay;
	_Atomic size_t n;
	size_t seen; /* the watch thread's */
	_Atomic bool watch_stop;
};

static void *probe_main(void *arg)
{
	struct probes *pr = arg;
	uint64_t frames[FRAMES];
	for (unsigned k = 0; k < FRAMES; k++)
		frames[k] = 0x7f0000100000ull + 0x40 * k;
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!atomic_load(&pr->stop)) {
		/* sleeps, never spins: the machine's cores are the drain's and the snapshot's */
		long ns = next.tv_nsec + (long)pr->gap_us * 1000;
		next.tv_sec += ns / 1000000000;
		next.tv_nsec = ns % 1000000000;
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		size_t i = atomic_load_explicit(&pr->n, memory_order_relaxed);
		if (i == MAX_PROBES)
			break;
		uint64_t t = now_ns();
		if (!emit_push_alloc(&pr->ring->ring, 64, 1, 0, 0, frames, FRAMES))
			continue; /* full: counted as dropped by the ring, not a probe */
		pr->at[i] = t;
		pr->pos[i] = ring_head(pr->ring);
		/* release: at[i] and pos[i] before the watch thread reads them */
		atomic_store_explicit(&pr->n, i + 1, memory_order_release);
	}
	return NULL;
}

static void *watch_main(void *arg)
{
	struct probes *pr = arg;
	const struct timespec tick = { 0, 20000 }; /* the delays' resolution: 20 us + slack */
	while (!atomic_load(&pr->watch_stop)) {
		nanosleep(&tick, NULL);
		size_t n = atomic_load_explicit(&pr->n, memory_order_acquire);
		if (pr->seen == n)
			continue;
		uint64_t tail = ring_tail(pr->ring);
		uint64_t t = now_ns();
		while (pr->seen < n && pr->pos[pr->seen] <= tail) {
			pr->delay[pr->seen] = t - pr->at[pr->seen];
			pr->seen++;
		}
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Delays of probes [from, to) that were consumed; sorted in place. */
static void report(const char *phase, uint64_t *d, size_t n, size_t buckets, size_t snaps,
		   double snap_ms)
{
	qsort(d, n, sizeof(*d), cmp_u64);
	double p50 = n ? (double)d[n / 2] / 1e3 : 0, p99 = n ? (double)d[n * 99 / 100] / 1e3 : 0;
	double mx = n ? (double)d[n - 1] / 1e3 : 0;
	printf("SNAPBENCH phase=%s buckets=%zu snapshots=%zu snapshot_ms=%.1f delay_p50_us=%.0f "
	       "delay_p99_us=%.0f delay_max_us=%.0f probes=%zu\n",
	       phase, buckets, snaps, snap_ms, p50, p99, mx, n);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	size_t nbuckets = 100000;
	unsigned seconds = 3, gap_us = 200, live = 1;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--buckets") == 0)
			nbuckets = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--live") == 0)
			live = (unsigned)strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--gap-us") == 0)
			gap_us = (unsigned)strtoul(argv[i + 1], NULL, 10);
	}
	char dir[] = "/tmp/llgo-snapbench.XXXXXX", path[64], err[256];
	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/heapd.sock", dir);
	struct server_opts o = { .socket_path = path };
	struct server *srv = server_new(&o, err, sizeof(err));
	if (!srv || server_start(srv) != 0) {
		fprintf(stderr, "snapshot_bench: server: %s\n", err);
		return 1;
	}
	struct session *s = attach(server_sessions(srv));
	struct pring fill, probe;
	pring_new(&fill, 0);
	pring_new(&probe, 1);
	if (session_add_ring(s, 0, fill.fd, RING_DATA) || session_add_ring(s, 1, probe.fd, RING_DATA)) {
		fprintf(stderr, "snapshot_bench: add ring\n");
		return 1;
	}

	/* Fill: nbuckets distinct stacks (leaf pc differs), drained as the ring fills. */
	uint64_t frames[FRAMES];
	fill_frames(frames, 0);
	for (size_t i = 0; i < nbuckets; i++) {
		frames[0] = fill_leaf(i);
		while (!emit_push_alloc(&fill.ring, fill_size(i), 1, 0, 0, frames, FRAMES))
			drain_session(s);
	}
	while (ring_tail(&fill) != ring_head(&fill))
		drain_session(s);
	struct bucket_stats bs;
	bucket_table_stats(s->buckets, &bs);
	if (live)
		add_live_table(s, nbuckets);

	struct probes pr = { .ring = &probe, .gap_us = gap_us };
	pr.at = calloc(MAX_PROBES, sizeof(uint64_t));
	pr.pos = calloc(MAX_PROBES, sizeof(uint64_t));
	pr.delay = calloc(MAX_PROBES, sizeof(uint64_t));
	pthread_t pt, wt;
	pthread_create(&wt, NULL, watch_main, &pr);
	pthread_create(&pt, NULL, probe_main, &pr);

	/* Baseline: the drain thread alone. */
	uint64_t end = now_ns() + (uint64_t)seconds * 1000000000ull;
	while (now_ns() < end)
		usleep(10000);
	size_t base_n = atomic_load(&pr.n);

	/* Snapshots back to back. */
	double *ms = calloc(100000, sizeof(double));
	size_t nsnap = 0;
	size_t pprof_bytes = 0;
	end = now_ns() + (uint64_t)seconds * 1000000000ull;
	while (now_ns() < end && nsnap < 100000) {
		struct buf out;
		buf_init(&out);
		uint64_t t0 = now_ns();
		int rc = snapshot_take(SNAPSHOT_SOURCE(srv), getpid(), getuid(), LLGO_FORMAT_PPROF,
				       0, 0, &out, err, sizeof(err));
		ms[nsnap++] = (double)(now_ns() - t0) / 1e6;
		pprof_bytes = out.len;
		buf_free(&out);
		if (rc) {
			fprintf(stderr, "snapshot_bench: snapshot: %s\n", err);
			return 1;
		}
	}
	size_t snap_n = atomic_load(&pr.n);
	atomic_store(&pr.stop, true);
	pthread_join(pt, NULL);
	/* let the drain consume the last probes */
	uint64_t wait_end = now_ns() + 2000000000ull;
	while (pr.seen < atomic_load(&pr.n) && now_ns() < wait_end)
		usleep(1000);
	atomic_store(&pr.watch_stop, true);
	pthread_join(wt, NULL);

	qsort(ms, nsnap, sizeof(*ms), cmp_double);
	size_t seen = pr.seen;
	report("baseline", pr.delay, base_n < seen ? base_n : seen, bs.buckets, 0, 0);
	report("snapshots", pr.delay + base_n, snap_n < seen ? snap_n - base_n : seen - base_n,
	       bs.buckets, nsnap, nsnap ? ms[nsnap / 2] : 0);
	printf("SNAPBENCH pprof_bytes=%zu live=%u\n", pprof_bytes, live);

	/* What the snapshots stated: the accounting line of the legacy text (in-use tracked). */
	struct buf txt;
	buf_init(&txt);
	if (snapshot_take(SNAPSHOT_SOURCE(srv), getpid(), getuid(), LLGO_FORMAT_TEXT, 0, 0, &txt,
			  err, sizeof(err)) == 0) {
		buf_append(&txt, "", 1);
		const char *acc = strstr((const char *)txt.data, "# llgo-heap: sampled=");
		const char *eol = acc ? strchr(acc, '\n') : NULL;
		if (acc && eol)
			printf("SNAPBENCH accounting: %.*s\n", (int)(eol - acc), acc);
	}
	buf_free(&txt);
	session_put(s);
	server_free(srv);
	unlink(path);
	rmdir(dir);
	return 0;
}
