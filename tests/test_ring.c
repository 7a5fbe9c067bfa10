// SPDX-License-Identifier: MIT
/*
 * test_ring.c: the shared ring, both ends: the shim's writer (emit_push_alloc, inline in
 * shim/internal.h, so compiled here with the test's sanitizers) and the daemon's reader
 * (agent/ring.c). One producer and one consumer thread across millions of wrap-arounds; a
 * full ring drops and counts exactly; torn, corrupted and hostile rings are detected, counted
 * and never delivered, and never crash or hang the reader.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../agent/internal.h"
#include "helpers.h"
#include "../shim/internal.h"

#define SMALL_DATA 4096u

struct tring {
	void *mem;
	size_t len;
	struct emit_ring w;
	struct ring_reader r;
};

static void tring_new(struct tring *t, uint32_t data_size)
{
	t->len = LLGO_RING_HEADER_SIZE + data_size;
	t->mem = mmap(NULL, t->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert(t->mem != MAP_FAILED);
	cr_assert_eq(emit_ring_format(&t->w, t->mem, t->len, data_size, 3, 77), 0);
	cr_assert_eq(ring_reader_init(&t->r, t->mem, t->len, 3, data_size), 0);
}

static void tring_free(struct tring *t)
{
	munmap(t->mem, t->len);
}

/* Record i: nframes = i % 9, frames[k] = i * 16 + k, size = i, rate = 1 + i % 5. */
static bool push_seq(const struct emit_ring *w, uint64_t i)
{
	uint64_t frames[8];
	uint32_t n = (uint32_t)(i % 9);
	for (uint32_t k = 0; k < n; k++)
		frames[k] = i * 16 + k;
	return emit_push_alloc(w, i, 1 + i % 5, i ^ 0xabcdefULL, 77, frames, n);
}

/* ---- in-order delivery across wrap-around ---------------------------------------------- */

struct spsc {
	struct tring t;
	uint64_t n;
	bool wait_for_room; /* producer waits instead of dropping */
	uint64_t next;      /* consumer: next record number expected (i = seq - 1) */
	uint64_t got, gaps, bad;
	_Atomic bool done;
};

static void spsc_check(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	struct spsc *s = arg;
	uint64_t i = rec->size;
	if (rec->seq != i + 1 || rec->tid != 77 || rec->addr != (i ^ 0xabcdefULL) ||
	    rec->rate != 1 + i % 5 || rec->nframes != i % 9) {
		s->bad++;
		return;
	}
	for (uint32_t k = 0; k < rec->nframes; k++)
		if (frames[k] != i * 16 + k)
			s->bad++;
	if (i < s->next)
		s->bad++;
	if (i > s->next)
		s->gaps += i - s->next;
	s->next = i + 1;
	s->got++;
}

static void *spsc_producer(void *arg)
{
	struct spsc *s = arg;
	uint32_t maxlen = llgo_record_alloc_len(8);
	for (uint64_t i = 0; i < s->n; i++) {
		if (s->wait_for_room) {
			struct llgo_ring_header *h = s->t.w.hdr;
			for (;;) {
				uint64_t head = atomic_load_explicit(&h->head, memory_order_relaxed);
				uint64_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
				if (SMALL_DATA - (head - tail) >= maxlen)
					break;
				sched_yield();
			}
		}
		push_seq(&s->t.w, i);
	}
	atomic_store(&s->done, true);
	return NULL;
}

static void *spsc_consumer(void *arg)
{
	struct spsc *s = arg;
	for (;;) {
		bool done = atomic_load(&s->done);
		size_t k = ring_reader_drain(&s->t.r, spsc_check, s);
		if (done && k == 0 &&
		    s->t.r.tail == atomic_load_explicit(&s->t.w.hdr->head, memory_order_acquire))
			break;
		if (k == 0)
			sched_yield();
	}
	return NULL;
}

static void spsc_run(struct spsc *s)
{
	pthread_t p, c;
	cr_assert_eq(pthread_create(&c, NULL, spsc_consumer, s), 0);
	cr_assert_eq(pthread_create(&p, NULL, spsc_producer, s), 0);
	pthread_join(p, NULL);
	pthread_join(c, NULL);
	ring_reader_drain(&s->t.r, spsc_check, s);
}

/* spsc_run over a new small ring: n records, the producer waiting for room or dropping. */
static void spsc_go(struct spsc *s, uint64_t n, bool wait_for_room)
{
	memset(s, 0, sizeof(*s));
	tring_new(&s->t, SMALL_DATA);
	s->n = n;
	s->wait_for_room = wait_for_room;
	spsc_run(s);
}

Test(ring, millions_in_order_across_wraparound, .timeout = 300)
{
	static struct spsc s;
	spsc_go(&s, th_san_thread() ? 200000 : 3000000, true);
	cr_expect_eq(s.bad, 0, "%llu records had wrong contents", (unsigned long long)s.bad);
	cr_expect_eq(s.got, s.n, "delivered %llu of %llu", (unsigned long long)s.got,
		     (unsigned long long)s.n);
	cr_expect_eq(s.gaps, 0);
	cr_expect_eq(s.t.r.counts.corrupt, 0);
	cr_expect_eq(s.t.r.sampled, s.n);
	cr_expect_eq(s.t.r.dropped, 0);
	/* wrapped many times */
	cr_expect_gt(s.t.r.tail, 1000ull * SMALL_DATA);
	tring_free(&s.t);
}

Test(ring, concurrent_drops_account_exactly, .timeout = 300)
{
	static struct spsc s;
	spsc_go(&s, th_san_thread() ? 100000 : 1000000, false);
	s.gaps += s.n - s.next; /* drops after the last delivered record */
	struct ring_account a;
	ring_reader_account(&s.t.r, &a);
	cr_expect_eq(s.bad, 0);
	cr_expect_eq(s.t.r.sampled, s.n);
	cr_expect_eq(s.got + s.t.r.dropped, s.n, "delivered %llu + dropped %llu != %llu",
		     (unsigned long long)s.got, (unsigned long long)s.t.r.dropped,
		     (unsigned long long)s.n);
	cr_expect_eq(s.gaps, s.t.r.dropped, "seq gaps are the drops");
	cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
	cr_expect_eq(a.corrupt, 0);
	tring_free(&s.t);
}

/* A buggy writer scribbles over published records while the reader copies them out: every
 * record delivered is intact (its contents match its seq), the damaged ones are counted. The
 * scribbling is a data race by design, so ThreadSanitizer runs skip this one. */
struct vandal {
	struct spsc *s;
	_Atomic bool stop;
	uint64_t rng;
};

static void *vandal_main(void *arg)
{
	struct vandal *v = arg;
	volatile unsigned char *data = v->s->t.w.data;
	while (!atomic_load(&v->stop)) {
		v->rng ^= v->rng << 13;
		v->rng ^= v->rng >> 7;
		v->rng ^= v->rng << 17;
		data[v->rng % SMALL_DATA] ^= (unsigned char)(1u << (v->rng >> 61));
		for (volatile int i = 0; i < 200; i++)
			;
	}
	return NULL;
}

Test(ring, torn_records_are_never_delivered, .timeout = 120)
{
	if (th_san_thread())
		cr_skip_test("races on purpose");
	static struct spsc s;
	memset(&s, 0, sizeof(s));
	tring_new(&s.t, SMALL_DATA);
	s.n = 300000;
	s.wait_for_room = true;
	struct vandal v = { .s = &s, .rng = 88172645463325252ull };
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, vandal_main, &v), 0);
	spsc_run(&s);
	atomic_store(&v.stop, true);
	pthread_join(th, NULL);
	cr_expect_eq(s.bad, 0, "%llu damaged records were delivered", (unsigned long long)s.bad);
	struct ring_account a;
	ring_reader_account(&s.t.r, &a);
	cr_expect_gt(a.corrupt, 0, "the vandal was never caught");
	cr_expect_eq(a.sampled, s.n);
	cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
	tring_free(&s.t);
}

/* ---- full ring -------------------------------------------------------------------------- */

static void count_cb(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	(void)frames;
	uint64_t *seen = arg;
	seen[0]++;
	seen[1] = rec->seq;
}

Test(ring, full_ring_drops_and_counts_exactly)
{
	struct tring t;
	tring_new(&t, SMALL_DATA);
	uint64_t frames[2] = { 1, 2 };
	uint32_t len = llgo_record_alloc_len(2); /* 72 */
	uint64_t fit = SMALL_DATA / len, pushed = 0;
	for (int i = 0; i < 100; i++)
		pushed += emit_push_alloc(&t.w, 8, 1, 0, 1, frames, 2);
	cr_expect_eq(pushed, fit);
	cr_expect_eq(atomic_load(&t.w.hdr->sampled), 100);
	cr_expect_eq(atomic_load(&t.w.hdr->dropped), 100 - fit);
	uint64_t seen[2] = { 0, 0 };
	cr_expect_eq(ring_reader_drain(&t.r, count_cb, seen), fit);
	cr_expect_eq(seen[0], fit);
	/* room again after the drain; seq continues after the drops */
	cr_expect(emit_push_alloc(&t.w, 8, 1, 0, 1, frames, 2));
	cr_expect_eq(ring_reader_drain(&t.r, count_cb, seen), 1);
	cr_expect_eq(seen[1], 101);
	struct ring_account a;
	ring_reader_account(&t.r, &a);
	cr_expect_eq(a.sampled, 101);
	cr_expect_eq(a.delivered, fit + 1);
	cr_expect_eq(a.dropped, 100 - fit);
	cr_expect_eq(a.corrupt, 0);
	tring_free(&t);
}

/* A tail ahead of head, or more than a ring behind, makes the ring look full. (A tail that
 * is merely wrong but plausible only costs the daemon its own records: the producer writes
 * at its own head, always inside the data area.) */
Test(ring, producer_never_writes_with_a_garbage_tail)
{
	struct tring t;
	tring_new(&t, SMALL_DATA);
	uint64_t frames[1] = { 9 };
	uint64_t bad_tails[] = { 12345, 0ull - 2ull * SMALL_DATA, 1ull << 63 };
	for (size_t k = 0; k < LLGO_ARRAY_SIZE(bad_tails); k++) {
		atomic_store(&t.w.hdr->tail, bad_tails[k]);
		memset(t.w.data, 0xee, SMALL_DATA);
		cr_expect(!emit_push_alloc(&t.w, 1, 1, 0, 1, frames, 1));
		for (uint32_t i = 0; i < SMALL_DATA; i++)
			cr_assert_eq(t.w.data[i], 0xee, "byte %u written", i);
	}
	cr_expect_eq(atomic_load(&t.w.hdr->head), 0);
	cr_expect_eq(atomic_load(&t.w.hdr->dropped), 3);
	tring_free(&t);
}

/* ---- corruption ------------------------------------------------------------------------- */

struct seen {
	uint64_t n;
	uint64_t seqs[64];
};

static void seen_cb(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	(void)frames;
	struct seen *s = arg;
	if (s->n < 64)
		s->seqs[s->n] = rec->seq;
	s->n++;
}

static uint64_t rec_pos(uint64_t i)
{
	/* push_seq(i) has i % 9 frames */
	uint64_t pos = 0;
	for (uint64_t k = 0; k < i; k++)
		pos += llgo_record_alloc_len((uint32_t)(k % 9));
	return pos;
}

static bool seen_has(const struct seen *s, uint64_t seq)
{
	for (uint64_t i = 0; i < s->n && i < 64; i++)
		if (s->seqs[i] == seq)
			return true;
	return false;
}

Test(ring, flipped_payload_byte_is_corrupt_and_never_delivered)
{
	struct tring t;
	tring_new(&t, SMALL_DATA);
	for (uint64_t i = 0; i < 10; i++)
		cr_assert(push_seq(&t.w, i));
	/* record 4 has 4 frames: flip a byte of frame 2 */
	t.w.data[rec_pos(4) + sizeof(struct llgo_record) + 2 * 8 + 3] ^= 0x40;
	struct seen s = { 0 };
	cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 9);
	cr_expect(!seen_has(&s, 5), "the corrupt record (seq 5) was delivered");
	cr_expect_eq(t.r.counts.corrupt, 1);
	struct ring_account a;
	ring_reader_account(&t.r, &a);
	cr_expect_eq(a.sampled, 10);
	cr_expect_eq(a.sampled, a.delivered + a.dropped + a.corrupt);
	tring_free(&t);
}

Test(ring, bad_checksum_is_corrupt)
{
	struct tring t;
	tring_new(&t, SMALL_DATA);
	for (uint64_t i = 0; i < 10; i++)
		cr_assert(push_seq(&t.w, i));
	t.w.data[rec_pos(6) + offsetof(struct llgo_record, checksum)] ^= 1;
	struct seen s = { 0 };
	cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 9);
	cr_expect(!seen_has(&s, 7));
	cr_expect_eq(t.r.counts.corrupt, 1);
	tring_free(&t);
}

Test(ring, bad_length_resynchronises_at_head)
{
	uint32_t bad_lengths[] = { 3, 0, 60, 4096, 0x7fffffff, LLGO_RECORD_MAX_LEN + 8 };
	for (size_t k = 0; k < LLGO_ARRAY_SIZE(bad_lengths); k++) {
		struct tring t;
		tring_new(&t, SMALL_DATA);
		for (uint64_t i = 0; i < 10; i++)
			cr_assert(push_seq(&t.w, i));
		uint32_t len = bad_lengths[k];
		memcpy(t.w.data + rec_pos(3) + offsetof(struct llgo_record, length), &len, 4);
		struct seen s = { 0 };
		size_t got = ring_reader_drain(&t.r, seen_cb, &s);
		struct ring_account a;
		ring_reader_account(&t.r, &a);
		if (len == 60) {
			/* 8-aligned and plausible: the checksum catches it, then the next
			 * "record" is misaligned garbage and the reader resynchronises */
			cr_expect_leq(got, 3);
		} else {
			cr_expect_eq(got, 3, "length %u: delivered %zu", len, got);
			cr_expect_eq(t.r.counts.corrupt, 1);
		}
		cr_expect(!seen_has(&s, 4));
		cr_expect_eq(t.r.tail, atomic_load(&t.w.hdr->head), "resynchronised at head");
		/* every sample is accounted: the skipped ones as corrupt */
		cr_expect_eq(a.sampled, 10);
		cr_expect_eq(a.delivered, got);
		cr_expect_eq(a.corrupt, 10 - got);
		/* the ring works again after the resync */
		cr_assert(push_seq(&t.w, 10));
		s.n = 0;
		cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 1);
		cr_expect_eq(s.seqs[0], 11);
		tring_free(&t);
	}
}

/* Write a raw record at head and publish it (head, then sampled when it is a sample). */
static void push_raw(struct tring *t, struct llgo_record *rec, const uint64_t *frames,
		     bool sample, bool fix_checksum)
{
	unsigned char buf[LLGO_RECORD_MAX_LEN];
	uint32_t len = rec->length;
	memcpy(buf, rec, sizeof(*rec));
	if (len > sizeof(*rec))
		memcpy(buf + sizeof(*rec), frames, len - sizeof(*rec));
	if (fix_checksum) {
		uint64_t c = llgo_record_checksum(buf, len);
		memcpy(buf + offsetof(struct llgo_record, checksum), &c, 8);
	}
	uint64_t head = atomic_load(&t->w.hdr->head);
	llgo_ring_copy_in(t->w.data, t->w.mask, head, buf, len);
	atomic_store(&t->w.hdr->head, head + len);
	if (sample)
		atomic_fetch_add(&t->w.hdr->sampled, 1);
}

Test(ring, unknown_kind_is_skipped_not_corrupt)
{
	struct tring t;
	tring_new(&t, SMALL_DATA);
	cr_assert(push_seq(&t.w, 0));
	struct llgo_record rec = { .kind = 9, .version = 1, .length = 80, .seq = 0 };
	uint64_t payload[3] = { 1, 2, 3 };
	push_raw(&t, &rec, payload, false, true);
	struct llgo_record fr = { .kind = LLGO_REC_FREE, .version = 1, .length = 56 };
	push_raw(&t, &fr, NULL, false, true);
	cr_assert(push_seq(&t.w, 1));
	struct seen s = { 0 };
	cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 2);
	cr_expect_eq(t.r.counts.skipped, 2);
	cr_expect_eq(t.r.counts.corrupt, 0);
	cr_expect_eq(s.seqs[0], 1);
	cr_expect_eq(s.seqs[1], 2);
	tring_free(&t);
}

Test(ring, invalid_fields_are_corrupt)
{
	struct tring t;
	tring_new(&t, SMALL_DATA);
	uint64_t f[4] = { 1, 2, 3, 4 };
	cr_assert(push_seq(&t.w, 0)); /* seq 1 */
	struct llgo_record bad[] = {
		/* seq going back */
		{ .kind = 1, .version = LLGO_REC_VERSION, .nframes = 1, .length = 64, .seq = 1, .rate = 1 },
		/* nframes inconsistent with the length */
		{ .kind = 1, .version = LLGO_REC_VERSION, .nframes = 3, .length = 64, .seq = 5, .rate = 1 },
		/* rate 0 */
		{ .kind = 1, .version = LLGO_REC_VERSION, .nframes = 1, .length = 64, .seq = 6, .rate = 0 },
		/* seq 0 */
		{ .kind = 1, .version = LLGO_REC_VERSION, .nframes = 0, .length = 56, .seq = 0, .rate = 1 },
	};
	for (size_t k = 0; k < LLGO_ARRAY_SIZE(bad); k++)
		push_raw(&t, &bad[k], f, true, true);
	struct llgo_record good = { .kind = 1, .version = LLGO_REC_VERSION, .nframes = 2, .length = 72,
				    .seq = 9, .rate = 3 };
	push_raw(&t, &good, f, true, true);
	struct seen s = { 0 };
	cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 2);
	cr_expect_eq(t.r.counts.corrupt, LLGO_ARRAY_SIZE(bad));
	cr_expect_eq(s.seqs[1], 9, "a gap in seq is a drop, not corruption");
	tring_free(&t);
}

/* ---- hostile headers -------------------------------------------------------------------- */

Test(ring, hostile_positions_do_not_crash_or_loop, .timeout = 60)
{
	struct tring t;
	tring_new(&t, SMALL_DATA);
	for (uint64_t i = 0; i < 5; i++)
		cr_assert(push_seq(&t.w, i));
	struct seen s = { 0 };
	/* head far ahead */
	atomic_store(&t.w.hdr->head, 10ull * SMALL_DATA + 8);
	cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 0);
	cr_expect_eq(t.r.counts.corrupt, 1);
	cr_expect_eq(t.r.tail, 10ull * SMALL_DATA + 8);
	/* head behind tail */
	atomic_store(&t.w.hdr->head, 16);
	cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 0);
	cr_expect_eq(t.r.counts.corrupt, 2);
	/* tail garbage in the header: the reader keeps its own */
	atomic_store(&t.w.hdr->tail, 0xdeadbeefull);
	atomic_store(&t.w.hdr->head, 16);
	cr_expect_eq(ring_reader_drain(&t.r, seen_cb, &s), 0);
	cr_expect_eq(t.r.tail, 16);
	/* counters going back are not taken */
	uint64_t sampled = t.r.sampled;
	atomic_store(&t.w.hdr->sampled, 0);
	ring_reader_drain(&t.r, seen_cb, &s);
	cr_expect_eq(t.r.sampled, sampled);

	/* random garbage everywhere, many times: the reader terminates and delivers nothing */
	srand(12345);
	uint64_t tail = t.r.tail;
	for (int round = 0; round < 20000; round++) {
		for (uint32_t i = 0; i < SMALL_DATA; i += 4) {
			uint32_t v = (uint32_t)rand();
			memcpy(t.w.data + i, &v, 4);
		}
		/* sometimes plausible lengths, so the checksum is what rejects */
		if (round & 1) {
			uint32_t len = 56 + 8 * (uint32_t)(rand() % 8);
			llgo_ring_copy_in(t.w.data, t.w.mask, tail + 4, &len, 4);
		}
		uint64_t head = tail + (uint64_t)(rand() % (2 * SMALL_DATA));
		if (round % 7 == 0)
			head = ((uint64_t)rand() << 33) ^ (uint64_t)rand();
		atomic_store(&t.w.hdr->head, head);
		atomic_store(&t.w.hdr->tail, (uint64_t)rand());
		s.n = 0;
		cr_assert_eq(ring_reader_drain(&t.r, seen_cb, &s), 0, "round %d", round);
		tail = t.r.tail;
		cr_assert_eq(tail, head);
	}
	tring_free(&t);
}

/* ---- mapping ---------------------------------------------------------------------------- */

static int make_memfd(uint32_t data_size, bool seal, uint32_t ring_id, uint64_t magic)
{
	int fd = memfd_create("test-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert(fd >= 0);
	size_t len = LLGO_RING_HEADER_SIZE + data_size;
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert(m != MAP_FAILED);
	struct emit_ring w = { 0 };
	cr_assert_eq(emit_ring_format(&w, m, len, data_size, ring_id, 1), 0);
	w.hdr->magic = magic;
	munmap(m, len);
	if (seal)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	return fd;
}

Test(ring, map_checks_seals_size_and_header)
{
	struct ring_reader r;
	int fd = make_memfd(8192, true, 5, LLGO_RING_MAGIC);
	cr_expect_eq(ring_reader_map(&r, fd, 5, 8192), 0);
	ring_reader_unmap(&r);
	cr_expect_eq(ring_reader_map(&r, fd, 6, 8192), -EPROTO, "ring id mismatch");
	cr_expect_eq(ring_reader_map(&r, fd, 5, 4096), -EPROTO, "size mismatch");
	cr_expect_eq(ring_reader_map(&r, fd, 5, 16384), -EINVAL, "file too small");
	cr_expect_eq(ring_reader_map(&r, fd, 5, 5000), -EINVAL, "not a power of two");
	cr_expect_eq(ring_reader_map(&r, fd, 5, 1024), -EINVAL, "below the minimum");
	close(fd);
	fd = make_memfd(8192, false, 5, LLGO_RING_MAGIC);
	cr_expect_eq(ring_reader_map(&r, fd, 5, 8192), -EPERM, "unsealed memfd accepted");
	close(fd);
	fd = make_memfd(8192, true, 5, 0x1234);
	cr_expect_eq(ring_reader_map(&r, fd, 5, 8192), -EPROTO, "bad magic accepted");
	close(fd);
	ring_reader_unmap(&r); /* on a zeroed reader: nothing */
}

/* ---- accounting ------------------------------------------------------------------------- */

/* ring_reader_account of a reader whose counters say sampled, dropped, delivered and corrupt,
 * added to sum. */
static struct ring_account account_of(uint64_t sampled, uint64_t dropped, uint64_t delivered,
				      uint64_t corrupt, struct ring_account *sum)
{
	struct ring_reader r;
	memset(&r, 0, sizeof(r));
	r.sampled = sampled;
	r.dropped = dropped;
	r.counts.delivered = delivered;
	r.counts.corrupt = corrupt;
	struct ring_account a;
	ring_reader_account(&r, &a);
	ring_account_add(sum, &a);
	return a;
}

Test(ring, account_resolves_shortfall_and_in_flight_excess)
{
	struct ring_account sum = { 0 };
	/* shortfall: 100 sampled, 80 delivered, 5 dropped, 2 corrupt -> 13 more corrupt */
	struct ring_account a = account_of(100, 5, 80, 2, &sum);
	cr_expect_eq(a.sampled, 100);
	cr_expect_eq(a.corrupt, 15);
	/* in flight: sampled read before head: 10 sampled, 12 delivered */
	a = account_of(10, 0, 12, 0, &sum);
	cr_expect_eq(a.sampled, 12);
	cr_expect_eq(a.corrupt, 0);
	ring_account_lost(&sum, 7);
	cr_expect_eq(sum.sampled, 119);
	cr_expect_eq(sum.corrupt, 15);
	cr_expect_eq(sum.dropped, 12);
	cr_expect_eq(sum.sampled, sum.delivered + sum.dropped + sum.corrupt);
}

/* A reattaching daemon counts what an earlier one took (prior) as sampled minus dropped minus
 * the records still unread; a stack copy (ALLOC_RAW, longer than any plain record) still
 * unread must count as unread, or it is counted twice: as prior, then again as delivered. */
Test(ring, baseline_counts_unread_stack_copies)
{
	struct tring t;
	tring_new(&t, 65536);
	cr_assert(push_seq(&t.w, 0));
	struct llgo_record rec = { .kind = LLGO_REC_ALLOC_RAW, .version = LLGO_REC_VERSION,
				   .length = LLGO_RECORD_MAX_LEN + 4096 };
	uint64_t head = atomic_load(&t.w.hdr->head);
	llgo_ring_copy_in(t.w.data, t.w.mask, head, &rec, sizeof(rec));
	atomic_store(&t.w.hdr->head, head + rec.length);
	atomic_fetch_add(&t.w.hdr->sampled, 1);
	cr_assert(push_seq(&t.w, 1));
	ring_reader_baseline(&t.r);
	cr_expect_eq(t.r.prior, 0, "%llu of 3 unread records taken as an earlier daemon's",
		     (unsigned long long)t.r.prior);
	tring_free(&t);
}

/* ---- resident pages: a light ring gives drained pages back ------------------------------- */

static long memfd_pages(int fd)
{
	struct stat st;
	cr_assert_eq(fstat(fd, &st), 0);
	return (long)(st.st_blocks * 512 / 4096);
}

/* A memfd ring of `size` data bytes mapped for both ends (the reader as the daemon maps it),
 * and what went through it. */
struct resident {
	uint32_t size;
	int fd;
	struct emit_ring w;
	struct ring_reader r;
	uint64_t seen[2], pushed;
	long before, most; /* resident pages at the start, and the most seen by resident_fill */
};

static void resident_new(struct resident *t, uint32_t size)
{
	memset(t, 0, sizeof(*t));
	t->size = size;
	t->fd = make_memfd(size, true, 9, LLGO_RING_MAGIC);
	size_t len = LLGO_RING_HEADER_SIZE + size;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, t->fd, 0);
	cr_assert(m != MAP_FAILED);
	t->w.hdr = m;
	t->w.data = (unsigned char *)m + LLGO_RING_HEADER_SIZE;
	t->w.mask = size - 1;
	cr_assert_eq(ring_reader_map(&t->r, t->fd, 9, size), 0);
}

/* n rounds of `bytes` of records, each drained; the most resident pages in t->most. */
static void resident_rounds(struct resident *t, int n, uint64_t bytes)
{
	t->before = memfd_pages(t->fd);
	t->most = 0;
	for (int round = 0; round < n; round++) {
		uint64_t start = atomic_load(&t->w.hdr->head);
		while (atomic_load(&t->w.hdr->head) - start < bytes)
			cr_assert(push_seq(&t->w, ++t->pushed));
		long p = memfd_pages(t->fd);
		if (p > t->most)
			t->most = p;
		ring_reader_drain(&t->r, count_cb, t->seen);
	}
	cr_expect_eq(t->seen[0], t->pushed, "delivered %llu of %llu", (unsigned long long)t->seen[0],
		     (unsigned long long)t->pushed);
	cr_expect_eq(t->r.counts.corrupt, 0);
}

static void resident_free(struct resident *t)
{
	ring_reader_unmap(&t->r);
	munmap(t->w.hdr, LLGO_RING_HEADER_SIZE + t->size);
	close(t->fd);
}

/* 100 records more, read back intact (written again after the release); then the end. */
static void resident_end(struct resident *t)
{
	for (int i = 0; i < 100; i++)
		cr_assert(push_seq(&t->w, ++t->pushed));
	ring_reader_drain(&t->r, count_cb, t->seen);
	cr_expect_eq(t->seen[0], t->pushed);
	cr_expect_eq(t->r.counts.corrupt, 0);
	resident_free(t);
}

Test(ring, drained_pages_of_a_light_ring_are_given_back)
{
	struct resident t;
	resident_new(&t, 256u << 10);
	t.r.release_batch = 0; /* every drain gives its pages back (batches: the next test) */
	/* 6 bursts of 10 KiB, each drained: 60 KiB in all, under a quarter of the ring */
	resident_rounds(&t, 6, 10u << 10);
	long after = memfd_pages(t.fd);
	cr_expect_geq(t.most, t.before + 3, "the bursts were resident (%ld pages)", t.most);
	cr_expect_leq(after, t.before + 1, "drained pages kept: %ld before, %ld after", t.before,
		      after);
	resident_end(&t);
}

/* Small drains of a light ring give their pages back together, not one madvise each: 100
 * drains of 2 KiB (a page completed every other drain) make at most a handful of releases,
 * and what stays resident is at most one batch (64 KiB) of drained pages. */
Test(ring, light_ring_pages_go_back_in_batches)
{
	struct resident t;
	resident_new(&t, 1u << 20);
	resident_rounds(&t, 100, 2u << 10);
	long after = memfd_pages(t.fd);
	cr_expect_leq(t.r.releases, 6, "%llu releases for 100 small drains",
		      (unsigned long long)t.r.releases);
	cr_expect_geq(t.r.releases, 2, "%llu releases: pages not given back",
		      (unsigned long long)t.r.releases);
	cr_expect_leq(after, t.before + 17, "resident after the drains: %ld pages, %ld before",
		      after, t.before);
	cr_expect_geq(t.most, t.before + 10, "the drained data was resident (%ld pages)", t.most);
	resident_end(&t);
}

Test(ring, busy_ring_keeps_its_pages)
{
	struct resident t;
	resident_new(&t, 256u << 10);
	/* 128 KiB at once: half the ring in this second, more than a light ring drains */
	while (atomic_load(&t.w.hdr->head) < 128u << 10)
		cr_assert(push_seq(&t.w, ++t.pushed));
	long full = memfd_pages(t.fd);
	ring_reader_drain(&t.r, count_cb, t.seen);
	cr_expect_eq(t.seen[0], t.pushed);
	cr_expect_geq(memfd_pages(t.fd), full - 1, "a busy ring's pages were given back");
	resident_free(&t);
}
