// SPDX-License-Identifier: MIT
/*
 * test_drain.c: sessions and the drain in one process, without a socket: records written
 * into memfd rings by the small producer below reach the session's buckets through
 * drain_session; the final drain at exit keeps the accounting; the drain thread polls live
 * sessions, backs off to ~no CPU when idle, and shares rings safely with snapshot drains;
 * a pc in a mapping that appeared after attach makes the drain re-read the maps.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../agent/output/snapshot.h"
#include "../agent/server/server.h"
#include "../shim/internal.h"

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static bool under_tsan(void)
{
	const char *s = getenv("LLGO_SAN");
	return s && strstr(s, "thread");
}

/* ---- producer (shared/ring.h's protocol) ------------------------------------------------ */

/* A producer ring in a sealed memfd, written with the shim's own emit_push_alloc. */
struct pring {
	int fd;
	struct llgo_ring_header *hdr;
	struct emit_ring ring;
};

static int sealed_memfd(size_t size)
{
	int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	return fd;
}

static void pring_new(struct pring *r, uint32_t id, uint32_t size)
{
	memset(r, 0, sizeof(*r));
	size_t len = LLGO_RING_HEADER_SIZE + (size_t)size;
	r->fd = sealed_memfd(len);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(emit_ring_format(&r->ring, p, len, size, id, 0), 0);
	r->hdr = r->ring.hdr;
}

static bool pring_push(struct pring *r, const uint64_t *frames, uint16_t n, uint64_t size,
		       uint64_t rate)
{
	return emit_push_alloc(&r->ring, size, rate, 0, 0, frames, n);
}

/* ---- fixtures ------------------------------------------------------------------------------ */

static struct session *attach(struct session_registry *reg, uint32_t ring_size)
{
	struct session *s = session_new(reg, getpid(), getuid(), getgid(), "test", ring_size);
	cr_assert(s);
	int cfd = sealed_memfd(LLGO_CTL_SIZE);
	struct llgo_ctl *ctl =
		mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
	cr_assert_neq(ctl, MAP_FAILED);
	ctl->magic = LLGO_CTL_MAGIC;
	ctl->version = LLGO_CTL_VERSION;
	ctl->size = LLGO_CTL_SIZE;
	atomic_store(&ctl->rate_word, 1);
	cr_assert_eq(session_attach_ctl(s, cfd), 0);
	close(cfd);
	munmap(ctl, LLGO_CTL_SIZE);
	session_register(s);
	return s;
}

struct totals {
	uint64_t objects, bytes;
	size_t buckets;
};

static int sum_visit(void *arg, const struct bucket *b)
{
	struct totals *t = arg;
	t->objects += atomic_load(&b->alloc_objects);
	t->bytes += atomic_load(&b->alloc_bytes);
	t->buckets++;
	return 0;
}

static struct totals totals(struct session *s)
{
	struct totals t = { 0 };
	bucket_table_foreach(s->buckets, sum_visit, &t);
	return t;
}

static void expect_accounting(struct session *s, struct session_counts *out)
{
	struct session_counts c;
	pthread_mutex_lock(&s->drain_lock);
	session_account_locked(s, &c);
	pthread_mutex_unlock(&s->drain_lock);
	cr_expect_eq(c.sampled, c.delivered + c.dropped + c.corrupt,
		     "sampled %llu delivered %llu dropped %llu corrupt %llu",
		     (unsigned long long)c.sampled, (unsigned long long)c.delivered,
		     (unsigned long long)c.dropped, (unsigned long long)c.corrupt);
	if (out)
		*out = c;
}

/* ---- tests ----------------------------------------------------------------------------------- */

Test(drain, records_become_buckets)
{
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct session *s = attach(reg, LLGO_RING_MIN_DATA);
	struct pring r0, r1;
	pring_new(&r0, 0, LLGO_RING_MIN_DATA);
	pring_new(&r1, 1, LLGO_RING_MIN_DATA);
	cr_assert_eq(session_add_ring(s, 0, r0.fd, LLGO_RING_MIN_DATA), 0);
	cr_assert_eq(session_add_ring(s, 1, r1.fd, LLGO_RING_MIN_DATA), 0);
	cr_expect_eq(session_add_ring(s, 1, r1.fd, LLGO_RING_MIN_DATA), -EEXIST);
	cr_expect_eq(session_add_ring(s, 2, r1.fd, 2 * LLGO_RING_MIN_DATA), -EINVAL);
	cr_expect_eq(session_add_ring(s, LLGO_MAX_RINGS, r1.fd, LLGO_RING_MIN_DATA), -EINVAL);

	uint64_t fa[2] = { 0x1000, 0x2000 }, fb[3] = { 0x1100, 0x2000, 0x3000 };
	for (int i = 0; i < 10; i++)
		cr_assert(pring_push(&r0, fa, 2, 16, 1));
	for (int i = 0; i < 5; i++)
		cr_assert(pring_push(&r1, fb, 3, 100, 1));
	cr_expect_eq(drain_session(s), 15);
	cr_expect_eq(drain_session(s), 0, "nothing new");
	struct totals t = totals(s);
	cr_expect_eq(t.buckets, 2);
	cr_expect_eq(t.objects, 15);
	cr_expect_eq(t.bytes, 10 * 16 + 5 * 100);
	cr_expect(!s->mixed_rates);
	/* a second rate is noticed */
	cr_assert(pring_push(&r0, fa, 2, 16, 4096));
	cr_expect_eq(drain_session(s), 1);
	cr_expect(s->mixed_rates);
	cr_expect_eq(totals(s).buckets, 3, "the rate is part of the key");
	struct session_counts c;
	expect_accounting(s, &c);
	cr_expect_eq(c.delivered, 16);
	session_put(s);
	session_registry_free(reg);
}

/* One bucket's objects, found by its size and first frame. */
struct find_bucket {
	uint64_t size, pc0, objects;
};

static int find_visit(void *arg, const struct bucket *b)
{
	struct find_bucket *f = arg;
	if (b->size == f->size && b->stack && b->stack->npcs && b->stack->pcs[0] == f->pc0)
		f->objects += atomic_load(&b->alloc_objects);
	return 0;
}

/* The objects of the bucket with exactly these frames, size and rate. */
struct count_key {
	const uint64_t *pcs;
	uint32_t n;
	uint64_t size, rate, objects;
};

static int count_visit(void *arg, const struct bucket *b)
{
	struct count_key *k = arg;
	if (b->size == k->size && b->rate == k->rate && b->stack && b->stack->npcs == k->n &&
	    memcmp(b->stack->pcs, k->pcs, k->n * sizeof(uint64_t)) == 0)
		k->objects += atomic_load(&b->alloc_objects);
	return 0;
}

static uint64_t bucket_objects(struct session *s, uint64_t pc0, uint64_t size)
{
	struct find_bucket f = { size, pc0, 0 };
	bucket_table_foreach(s->buckets, find_visit, &f);
	return f.objects;
}

/* The drain's per-ring memo counts a record equal to the last one straight into its bucket: a
 * record that differs in any part of the key (a frame, the size, the rate) must not land there. */
Test(drain, repeated_records_stay_in_their_own_buckets)
{
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct session *s = attach(reg, LLGO_RING_MIN_DATA);
	struct pring r;
	pring_new(&r, 0, LLGO_RING_MIN_DATA);
	cr_assert_eq(session_add_ring(s, 0, r.fd, LLGO_RING_MIN_DATA), 0);
	uint64_t fa[3] = { 0x1000, 0x2000, 0x3000 }, fb[3] = { 0x1000, 0x2000, 0x3008 };
	uint64_t fc[2] = { 0x1000, 0x2000 }, fd[3] = { 0x1010, 0x2000, 0x3000 };
	/* each record that differs follows one of fa, 16 B, rate 1 */
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++)
			cr_assert(pring_push(&r, fa, 3, 16, 1));
		cr_assert(pring_push(&r, fb, 3, 16, 1)); /* last frame */
		cr_assert(pring_push(&r, fa, 3, 16, 1));
		cr_assert(pring_push(&r, fc, 2, 16, 1)); /* depth */
		cr_assert(pring_push(&r, fa, 3, 16, 1));
		cr_assert(pring_push(&r, fd, 3, 16, 1)); /* first frame */
		cr_assert(pring_push(&r, fa, 3, 16, 1));
		cr_assert(pring_push(&r, fa, 3, 32, 1)); /* size */
		cr_assert(pring_push(&r, fa, 3, 16, 1));
		cr_assert(pring_push(&r, fa, 3, 16, 2)); /* rate */
		/* drained in the middle too: the memo lives across drains */
		if (round == 1)
			cr_expect_eq(drain_session(s), 26);
	}
	cr_expect_eq(drain_session(s), 13);
	cr_expect_eq(totals(s).objects, 39);
	cr_expect_eq(totals(s).buckets, 6, "one bucket per key");
	cr_expect_eq(bucket_objects(s, 0x1000, 32), 3);
	cr_expect_eq(bucket_objects(s, 0x1010, 16), 3);
	/* fa/16 at rate 1 (24), fb (3), fc (3) and fa/16 at rate 2 (3) share the first frame */
	cr_expect_eq(bucket_objects(s, 0x1000, 16), 33);
	struct count_key k = { fb, 3, 16, 1, 0 };
	bucket_table_foreach(s->buckets, count_visit, &k);
	cr_expect_eq(k.objects, 3, "fb's bucket");
	struct count_key ka = { fa, 3, 16, 1, 0 };
	bucket_table_foreach(s->buckets, count_visit, &ka);
	cr_expect_eq(ka.objects, 24, "fa's bucket");
	session_put(s);
	session_registry_free(reg);
}

Test(drain, exit_keeps_everything_but_the_rings)
{
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct session *s = attach(reg, LLGO_RING_MIN_DATA);
	struct pring r;
	pring_new(&r, 3, LLGO_RING_MIN_DATA);
	cr_assert_eq(session_add_ring(s, 3, r.fd, LLGO_RING_MIN_DATA), 0);
	uint64_t f[1] = { 0x4242 };
	/* never drained before exit: the final drain must see all of it; the ring holds
	 * 4096 / 64 records, the rest are drops */
	unsigned pushed = 0, dropped = 0;
	for (int i = 0; i < 100; i++) {
		if (pring_push(&r, f, 1, 8, 1))
			pushed++;
		else
			dropped++;
	}
	cr_assert_gt(dropped, 0);
	drain_session_exit(s);
	cr_expect(!session_is_live(s));
	cr_expect_eq(s->nrings_adopted, 0, "rings unmapped at exit");
	cr_expect_eq(totals(s).objects, pushed);
	struct session_counts c;
	expect_accounting(s, &c);
	cr_expect_eq(c.delivered, pushed);
	cr_expect_eq(c.dropped, dropped);
	cr_expect_eq(c.sampled, 100);
	struct session_counts cached;
	session_counts_cached(s, &cached);
	cr_expect_eq(cached.sampled, 100);
	/* exited: no more rings, no rate changes, lookups still find it */
	cr_expect_eq(session_add_ring(s, 4, r.fd, LLGO_RING_MIN_DATA), -ESRCH);
	uint64_t o, n;
	cr_expect_eq(session_set_rate(s, 5, &o, &n), -ESRCH);
	struct session *l = session_lookup(reg, getpid());
	cr_expect_eq(l, s);
	session_put(l);
	cr_expect_eq(drain_session(s), 0);
	session_put(s);
	session_registry_free(reg);
}

Test(drain, lookup_prefers_live_then_newest_and_evicts_oldest_exited)
{
	struct session_registry *reg = session_registry_new(2, 0, 0);
	struct session *a = attach(reg, LLGO_RING_MIN_DATA);
	drain_session_exit(a);
	struct session *b = attach(reg, LLGO_RING_MIN_DATA);
	struct session *l = session_lookup(reg, getpid());
	cr_expect_eq(l, b, "live wins");
	session_put(l);
	drain_session_exit(b);
	l = session_lookup(reg, getpid());
	cr_expect_eq(l, b, "then the newest exited");
	session_put(l);
	struct session **v;
	size_t n = session_list(reg, false, &v);
	cr_expect_eq(n, 1, "one row per pid");
	session_list_release(v, n);
	struct session *c = attach(reg, LLGO_RING_MIN_DATA);
	drain_session_exit(c);
	/* keep 2: a (oldest exited) is gone from the registry, but our reference keeps it */
	n = session_list(reg, true, &v);
	cr_expect_eq(n, 0, "none live");
	session_list_release(v, n);
	l = session_lookup(reg, getpid());
	cr_expect_eq(l, c);
	session_put(l);
	cr_expect_eq(atomic_load(&a->refs), 1, "evicted: only our reference left");
	cr_expect_eq(atomic_load(&b->refs), 2);
	session_put(a);
	session_put(b);
	session_put(c);
	session_registry_free(reg);
}

Test(drain, thread_keeps_up_and_shares_rings_with_snapshots, .timeout = 120)
{
	unsigned n = under_tsan() ? 5000 : 100000;
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct session *s = attach(reg, LLGO_RING_MIN_DATA);
	struct pring r;
	pring_new(&r, 0, LLGO_RING_MIN_DATA);
	cr_assert_eq(session_add_ring(s, 0, r.fd, LLGO_RING_MIN_DATA), 0);
	struct drain *d = drain_new(reg);
	cr_assert_eq(drain_start(d), 0);
	drain_wake(d);
	uint64_t f[4] = { 0x10, 0x20, 0x30, 0x40 };
	unsigned pushed = 0;
	for (unsigned i = 0; i < n; i++) {
		f[0] = 0x10 + (i % 7);
		while (!pring_push(&r, f, 4, 32, 1)) {
			/* full: the drop is counted; give the drain a moment */
			sched_yield();
		}
		pushed++;
		if (i % 1000 == 0)
			drain_session(s); /* a snapshot's drain, racing the thread's */
	}
	for (int i = 0; i < 1000 && totals(s).objects < pushed; i++)
		sleep_ms(5);
	drain_stop(d);
	drain_free(d);
	cr_expect_eq(totals(s).objects, pushed);
	struct session_counts c;
	expect_accounting(s, &c);
	cr_expect_eq(c.delivered, pushed);
	cr_expect_eq(c.corrupt, 0);
	cr_expect_eq(c.dropped, atomic_load(&r.hdr->dropped));
	session_put(s);
	session_registry_free(reg);
}

Test(drain, idle_thread_uses_almost_no_cpu, .timeout = 60)
{
	if (under_tsan())
		cr_skip_test("timing under TSan means nothing");
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct session *sv[8];
	struct pring rings[8];
	for (int i = 0; i < 8; i++) {
		sv[i] = session_new(reg, getpid(), getuid(), getgid(), "idle", LLGO_RING_MIN_DATA);
		session_register(sv[i]);
		pring_new(&rings[i], 0, LLGO_RING_MIN_DATA);
		cr_assert_eq(session_add_ring(sv[i], 0, rings[i].fd, LLGO_RING_MIN_DATA), 0);
	}
	struct drain *d = drain_new(reg);
	cr_assert_eq(drain_start(d), 0);
	sleep_ms(300); /* back off to the idle poll */
	struct timespec c0, c1;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	sleep_ms(1000);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	double used = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
	cr_expect_lt(used, 0.02, "idle drain used %.3f s of CPU in 1 s", used);
	/* and still reacts quickly to records */
	uint64_t f[1] = { 0x99 };
	pring_push(&rings[5], f, 1, 8, 1);
	bool seen = false;
	for (int i = 0; i < 100 && !seen; i++) {
		sleep_ms(5);
		seen = totals(sv[5]).objects == 1;
	}
	cr_expect(seen, "the idle poll must still drain within 500 ms");
	drain_free(d);
	for (int i = 0; i < 8; i++)
		session_put(sv[i]);
	session_registry_free(reg);
}

/* A pc in a mapping that appeared after attach (a dlopen) makes the drain re-read the maps. */
Test(drain, unknown_pc_refreshes_the_maps, .timeout = 60)
{
	struct session_registry *reg = session_registry_new(4, 0, 0);
	struct session *s = attach(reg, LLGO_RING_MIN_DATA);
	cr_assert_eq(session_attach_maps(s), 0);
	int fd = open("/bin/true", O_RDONLY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	void *code = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	cr_assert_neq(code, MAP_FAILED);
	close(fd);
	uint64_t pc = (uint64_t)(uintptr_t)code + 0x100;
	cr_assert_null(procmaps_find(s->maps, pc), "mapped after attach: not known yet");
	struct pring r;
	pring_new(&r, 0, LLGO_RING_MIN_DATA);
	cr_assert_eq(session_add_ring(s, 0, r.fd, LLGO_RING_MIN_DATA), 0);
	uint64_t f[2] = { pc, 0x1234 };
	pring_push(&r, f, 2, 8, 1);
	drain_session(s);
	cr_expect_not_null(procmaps_find(s->maps, pc), "the drain did not refresh the maps");
	munmap(code, 4096);
	session_put(s);
	session_registry_free(reg);
}

/*
 * Snapshots through the snapshot service (snapshot_collect, on an in-process server) while
 * several producer threads fill their rings with new stacks and the server's drain thread
 * keeps draining: each profile is one cut (its buckets hold exactly its delivered count,
 * nothing goes back from one to the next), the drain moved records while profiles were being
 * collected, and at the end every record is counted.
 */
#define SNAP_PRODUCERS 4

struct snap_producer {
	struct pring ring;
	uint32_t id;
	unsigned stacks;
	_Atomic unsigned pushed;
	_Atomic bool *stop;
};

static void *snap_producer_main(void *arg)
{
	struct snap_producer *p = arg;
	uint64_t f[3];
	for (unsigned i = 0; !atomic_load(p->stop); i++) {
		f[0] = 0x500000ull + (uint64_t)p->id * 0x100000 + (uint64_t)(i % p->stacks) * 16;
		f[1] = 0x600000ull + p->id;
		f[2] = 0x700000ull;
		while (!pring_push(&p->ring, f, 3, 48, 1))
			sched_yield(); /* full: counted as dropped; the drain empties it */
		atomic_fetch_add(&p->pushed, 1);
		if (i % 64 == 0)
			sched_yield(); /* room for the drain and the snapshots on a small machine */
	}
	return NULL;
}

Test(drain, snapshots_run_beside_the_drain, .timeout = 300)
{
	char dir[] = "/tmp/llgo-test-snap.XXXXXX", path[64], err[256];
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/heapd.sock", dir);
	struct server_opts o = { .socket_path = path };
	struct server *srv = server_new(&o, err, sizeof(err));
	cr_assert(srv, "%s", err);
	cr_assert_eq(server_start(srv), 0);
	uint32_t rsize = 1u << 20;
	struct session *s = attach(server_sessions(srv), rsize);
	unsigned stacks = under_tsan() ? 2000 : 20000;
	_Atomic bool stop = false;
	struct snap_producer pr[SNAP_PRODUCERS];
	pthread_t th[SNAP_PRODUCERS];
	for (uint32_t i = 0; i < SNAP_PRODUCERS; i++) {
		pr[i] = (struct snap_producer){ .id = i, .stacks = stacks, .stop = &stop };
		atomic_init(&pr[i].pushed, 0);
		pring_new(&pr[i].ring, i, rsize);
		cr_assert_eq(session_add_ring(s, i, pr[i].ring.fd, rsize), 0);
	}
	for (int i = 0; i < SNAP_PRODUCERS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, snap_producer_main, &pr[i]), 0);

	uint64_t prev = 0, prev_buckets = 0;
	unsigned snaps = 0, beside = 0;
	uint64_t until = session_now_ns(CLOCK_MONOTONIC) + 60000000000ull;
	/* at least 8 profiles, and on until one was collected while the drain ran (or 60 s) */
	while ((snaps < 8 || !beside) && session_now_ns(CLOCK_MONOTONIC) < until) {
		struct profile p;
		cr_assert_eq(snapshot_collect(server_snapshot_source(srv), s, &p), 0);
		uint64_t objects = 0;
		for (size_t k = 0; k < p.nsamples; k++) {
			cr_assert_eq(p.samples[k].size, 48);
			objects += p.samples[k].alloc_objects;
		}
		cr_assert_eq(objects, p.meta.delivered,
			     "snapshot %u: its buckets hold %llu records, its accounting says %llu "
			     "delivered", snaps, (unsigned long long)objects,
			     (unsigned long long)p.meta.delivered);
		cr_assert_eq(p.meta.sampled, p.meta.delivered + p.meta.dropped + p.meta.corrupt);
		cr_assert_geq(objects, prev, "snapshot %u went back", snaps);
		cr_assert_geq(p.nsamples, prev_buckets);
		prev = objects;
		prev_buckets = p.nsamples;
		/* the drain added while this profile was being collected (after its cut) */
		struct bucket_stats after;
		bucket_table_stats(s->buckets, &after);
		struct session_counts c;
		session_counts_cached(s, &c);
		beside += c.delivered > p.meta.delivered || after.buckets > p.nsamples;
		profile_release(&p);
		snaps++;
	}
	atomic_store(&stop, true);
	uint64_t total = 0;
	for (int i = 0; i < SNAP_PRODUCERS; i++) {
		pthread_join(th[i], NULL);
		total += atomic_load(&pr[i].pushed);
	}
	struct profile p;
	cr_assert_eq(snapshot_collect(server_snapshot_source(srv), s, &p), 0);
	uint64_t objects = 0;
	for (size_t k = 0; k < p.nsamples; k++)
		objects += p.samples[k].alloc_objects;
	cr_expect_eq(objects, total, "every record is counted at the end");
	cr_expect_eq(p.meta.delivered, total);
	profile_release(&p);
	cr_log_info("%u snapshots, %u with records drained while they were collected", snaps,
		    beside);
	cr_expect_geq(beside, 1, "the drain never ran while a profile was collected");
	session_put(s);
	server_free(srv);
	unlink(path);
	rmdir(dir);
}
