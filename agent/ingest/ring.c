// SPDX-License-Identifier: MIT
/*
 * ring.c: the daemon's reader of one shared ring (shared/ring.h). It maps a ring memfd sent
 * by a shim, copies published records out, validates every one of them, hands the valid ones
 * to a callback and publishes the new tail. What a record means (buckets, symbols) is left
 * to the session code that calls ring_reader_drain.
 *
 * Everything in the mapping is hostile: the profiled process can write any byte at any time,
 * including while we read. So positions are copied into locals and checked before use, each
 * record is copied out in full before a field of it is trusted, and the geometry and the
 * tail the reader relies on are its own copies (struct ring_reader), never re-read from the
 * header. A ring memfd must be sealed against shrinking (F_SEAL_SHRINK; the shim seals
 * shrink, grow and seal): otherwise the process could truncate it under our mapping and
 * kill the daemon with SIGBUS.
 *
 * Validation of one record at position pos (head = published end):
 *   - the header fits in [pos, head); length is 8-aligned, >= the header, <= LLGO_RECORD_MAX_LEN
 *     and <= head - pos. A bad length makes the rest unreadable: one corrupt, skip to head;
 *   - the checksum of the copy holds (else corrupt, skip this record by its length);
 *   - kind/version unknown: skipped (valid length and checksum), not an error;
 *   - ALLOC: length == header + 8 * nframes, rate >= 1, seq > the previous seq (a gap is a
 *     drop, counted by the producer; going back is corrupt).
 *   - ALLOC_RAW: as ALLOC, with length == header + frames + registers + stack_len +
 *     stack2_len, both 8-aligned and <= LLGO_RAW_MAX_STACK, the checksum over all but the
 *     stack bytes; copied
 *     into the reader's own buffer (r->scratch) since it may be KiBs long.
 * A head more than a ring ahead of our tail, or behind it, is corrupt: resynchronise at head.
 *
 * Accounting (shared/ring.h: "sampled == delivered + dropped + corrupt"): the producer
 * publishes head before sampled, and dropped before sampled; the reader loads sampled, then
 * dropped, then head (acquire). Every sample counted in the sampled value read is therefore
 * either in [tail, head) at that drain, or in the dropped value read. After a drain:
 *   - sampled > delivered + dropped + corrupt: records were lost without a record-level count
 *     (a resynchronisation skipped them): the shortfall is reported as corrupt;
 *   - sampled < delivered + dropped + corrupt: records published after the sampled load (in
 *     flight) were delivered: sampled is reported as delivered + dropped + corrupt.
 * ring_reader_account() applies both rules to one ring, ring_account_add() sums rings and
 * ring_account_lost() adds the control page's lost_no_ring (sampled and dropped).
 *
 * Resident memory: a ring's pages, once written, stay resident in both processes (shared
 * memory counts in the program's RSS) although a ring that cycles slowly holds only a few
 * records at a time. So when a ring is light (less than a quarter of it drained in the last
 * second and so far in this one), the whole pages of what was drained since the last release
 * are given back (MADV_REMOVE: a hole in the memfd, zero when next touched), before the tail
 * store. The producer writes only in [head, tail + size) and never reads ring data: what this
 * pass drained is out of its reach until the tail store; a page an earlier pass drained,
 * starting at position a, is written again once head passes a + size, so it goes back only
 * while head, read just before, is less than half a ring past a: the producer would have to
 * write half a ring during the madvise to reach it (if a hostile one does, its records there
 * read back as corrupt and are counted so). A busy ring keeps its pages: the producer would
 * fault each one in again. Pages go back in batches, once 64 KiB of drained positions are
 * pending or a second after the last release: each madvise interrupts the program's CPUs
 * (TLB shootdown) and costs it a fault per page it writes again, and a drain per few
 * records (PostgreSQL's backends under load) made madvise 15-25% of the daemon's CPU. This assumes one reader per ring, which llgo-heapd keeps (a
 * reconnect joins its session's readers).
 */
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Drained bytes that wait for their pages to go back together (see release_batch). */
#define RING_RELEASE_BATCH (64u << 10)

#include "../internal.h"
#include "../../common/sane.h"

static bool ring_geometry_ok(uint64_t data_size)
{
	return data_size >= LLGO_RING_MIN_DATA && data_size <= LLGO_RING_MAX_DATA &&
	       (data_size & (data_size - 1)) == 0;
}

int ring_reader_init(struct ring_reader *r, void *mem, size_t map_len, uint32_t ring_id,
		     uint32_t data_size)
{
	memset(r, 0, sizeof(*r));
	if (!mem || !ring_geometry_ok(data_size) ||
	    map_len < (size_t)LLGO_RING_HEADER_SIZE + data_size)
		return -EINVAL;
	/* The immutable part of the header, copied once and checked against what the shim
	 * announced in ADD_RING. */
	struct llgo_ring_header h;
	memcpy(&h, mem, offsetof(struct llgo_ring_header, head));
	if (h.magic != LLGO_RING_MAGIC || h.version != LLGO_RING_VERSION ||
	    h.header_size != LLGO_RING_HEADER_SIZE || h.data_size != data_size ||
	    h.ring_id != ring_id)
		return -EPROTO;
	r->hdr = (struct llgo_ring_header *)mem;
	r->data = (unsigned char *)mem + LLGO_RING_HEADER_SIZE;
	r->data_size = data_size;
	r->mask = (uint64_t)data_size - 1;
	r->ring_id = ring_id;
	r->map_len = map_len;
	r->next_seq = 1;
	/* Start where the consumer side says (0 for a new ring), unless that is not within a
	 * ring of head: then at head. */
	uint64_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
	uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_relaxed);
	r->tail = head - tail <= r->data_size ? tail : head;
	r->release_from = r->tail;
	r->release_batch = RING_RELEASE_BATCH;
	return 0;
}

int ring_reader_map_at(struct ring_reader *r, int fd, uint64_t off, size_t map_len,
		       uint32_t ring_id, uint32_t data_size)
{
	memset(r, 0, sizeof(*r));
	if (!ring_geometry_ok(data_size) || map_len < (size_t)LLGO_RING_HEADER_SIZE + data_size)
		return -EINVAL;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_size < 0 || (uint64_t)st.st_size < off ||
	    (uint64_t)st.st_size - off < map_len)
		return off ? -EAGAIN : -EINVAL; /* a process memfd grows as rings are made */
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	void *mem = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
	if (mem == MAP_FAILED)
		return -errno;
	int rc = ring_reader_init(r, mem, map_len, ring_id, data_size);
	if (rc != 0) {
		/* Within ring_count but all zero: formatted by a thread that has not finished */
		uint64_t magic;
		memcpy(&magic, mem, sizeof(magic));
		if (rc == -EPROTO && magic == 0 && off)
			rc = -EAGAIN;
		munmap(mem, map_len);
		memset(r, 0, sizeof(*r));
	}
	return rc;
}

int ring_reader_map(struct ring_reader *r, int fd, uint32_t ring_id, uint32_t data_size)
{
	return ring_reader_map_at(r, fd, 0, (size_t)LLGO_RING_HEADER_SIZE + data_size, ring_id,
				  data_size);
}

void ring_reader_baseline(struct ring_reader *r)
{
	struct llgo_ring_header *h = r->hdr;
	if (!h)
		return;
	uint64_t sampled = atomic_load_explicit(&h->sampled, memory_order_acquire);
	uint64_t dropped = atomic_load_explicit(&h->dropped, memory_order_acquire);
	uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
	uint64_t pos = r->tail, unread = 0;
	/* Count the records still to read by their lengths alone; the drain validates them. */
	while (head - pos >= sizeof(struct llgo_record) && head - pos <= r->data_size) {
		struct llgo_record rec;
		llgo_ring_copy_out(&rec, r->data, r->mask, pos, sizeof(rec));
		uint32_t len = rec.length;
		/* the same bound as ring_reader_drain's: a stack copy (ALLOC_RAW) not counted
		 * here would be counted twice, as prior and again as delivered */
		uint32_t max = rec.kind == LLGO_REC_ALLOC_RAW ? LLGO_RECORD_RAW_MAX_LEN
							      : LLGO_RECORD_MAX_LEN;
		if (len < sizeof(rec) || (len & 7) || len > max || len > head - pos)
			break;
		unread++;
		pos += len;
	}
	if (sampled > LLGO_SANE_COUNT_MAX || dropped > sampled) /* hostile: not taken */
		sampled = dropped = 0;
	r->prior = sampled >= dropped + unread ? sampled - dropped - unread : 0;
}

void ring_reader_unmap(struct ring_reader *r)
{
	free(r->scratch);
	free(r->rawmemo);
	if (r->hdr)
		munmap(r->hdr, r->map_len);
	memset(r, 0, sizeof(*r));
}

/* Give back the whole pages of drained ring positions [from, to) (see the top), before the
 * tail store of this pass. Returns the position from which pages may still be resident. */
static uint64_t ring_reader_release(struct ring_reader *r, uint64_t from, uint64_t to)
{
	static _Atomic long page_size; /* drains of different sessions run at once */
	long page = atomic_load_explicit(&page_size, memory_order_relaxed);
	if (!page) {
		page = sysconf(_SC_PAGESIZE);
		atomic_store_explicit(&page_size, page, memory_order_relaxed);
	}
	if (page <= 0)
		return to;
	/* [r->tail, to) is this pass's: out of the producer's reach until the tail store. What
	 * earlier passes drained, [from, r->tail), is within it again once head passes from +
	 * size: only while head, read now, is less than half a ring past from (a forged head
	 * behind from counts as past). */
	uint64_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
	if (to - from > r->data_size || head - from >= r->data_size / 2)
		from = r->tail;
	uint64_t done = from;
	while (done != to) {
		uint64_t off = done & r->mask;
		uint64_t seg = r->data_size - off < to - done ? r->data_size - off : to - done;
		uintptr_t a = (uintptr_t)(r->data + off), b = a + seg;
		uintptr_t pa = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
		uintptr_t pb = b & ~((uintptr_t)page - 1);
		if (pb > pa) {
			(void)madvise((void *)pa, pb - pa, MADV_REMOVE);
			r->releases++;
		}
		if (pb < b) { /* a partial page at the end waits for the next drain */
			if (pb > a)
				done += pb - a;
			break;
		}
		done += seg;
	}
	return done;
}

/* Whether this drain's emptied pages go back: the ring is light in the current window of
 * about a second so far, and was in the last whole one (a new ring counts as light). */
static bool ring_reader_light(struct ring_reader *r, uint64_t drained, uint64_t *now_out)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	*now_out = now;
	if (!r->win_start_ns) {
		r->win_start_ns = now;
		r->light = true;
	}
	if (now - r->win_start_ns >= 1000000000ull) {
		r->light = r->win_bytes < r->data_size / 4;
		r->win_bytes = 0;
		r->win_start_ns = now;
	}
	r->win_bytes += drained;
	return r->light && r->win_bytes < r->data_size / 4;
}

/* Tail is published at least every RING_PUBLISH_STEP bytes of a pass (see the loop). */
#define RING_PUBLISH_STEP (64u << 10)

/* Publish tail = pos (a record boundary, everything before it copied out) and wake a producer
 * waiting for room. */
static void ring_reader_publish(struct ring_reader *r, uint64_t pos)
{
	struct llgo_ring_header *h = r->hdr;
	/* Pairs with the producer's acquire load of tail: the bytes before pos were copied. */
	atomic_store_explicit(&h->tail, pos, memory_order_release);
	/* A producer waiting for room (shim full.c) sleeps on tail's low word: it stores waiting,
	 * fences and re-reads tail; we store tail, fence and read waiting, so one of us sees the
	 * other. The wake is a syscall on shared memory: a forged flag costs one. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&h->waiting, memory_order_relaxed))
		syscall(SYS_futex, (void *)&h->tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

size_t ring_reader_drain(struct ring_reader *r, ring_record_fn fn, void *arg)
{
	struct llgo_ring_header *h = r->hdr;
	if (!h)
		return 0;
	/* sampled, dropped, then head: see the accounting note at the top. Each acquire pairs
	 * with the producer's release store of the same counter. */
	uint64_t sampled = atomic_load_explicit(&h->sampled, memory_order_acquire);
	uint64_t dropped = atomic_load_explicit(&h->dropped, memory_order_acquire);
	uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
	uint64_t pos = r->tail, published = pos;
	size_t delivered = 0;
	bool mid = false; /* tail was published during this pass */

	if (head - pos > r->data_size) { /* also head < pos: the difference wraps */
		r->counts.corrupt++;
		pos = head;
	}
	while (pos != head) {
		/* A long pass publishes tail as it goes, so that a producer waiting for room
		 * resumes before the whole ring is drained; never in a pass that may give pages
		 * back (they must stay out of the producer's reach until the end, see the top). */
		if (pos - published >= RING_PUBLISH_STEP &&
		    !(r->light && r->win_bytes + (pos - r->tail) < r->data_size / 4)) {
			ring_reader_publish(r, pos);
			published = pos;
			mid = true;
		}
		uint64_t avail = head - pos;
		union {
			struct llgo_record rec;
			unsigned char bytes[LLGO_RECORD_MAX_LEN];
		} u;
		if (avail < sizeof(struct llgo_record)) {
			r->counts.corrupt++;
			pos = head;
			break;
		}
		llgo_ring_copy_out(&u.rec, r->data, r->mask, pos, sizeof(u.rec));
		uint32_t len = u.rec.length;
		bool raw = u.rec.kind == LLGO_REC_ALLOC_RAW;
		uint32_t max = raw ? LLGO_RECORD_RAW_MAX_LEN : LLGO_RECORD_MAX_LEN;
		if (len < sizeof(struct llgo_record) || (len & 7) || len > max || len > avail) {
			r->counts.corrupt++;
			pos = head;
			break;
		}
		/* The full copy is what gets validated and delivered; the writer may have changed
		 * the header since the first copy, so its length is compared again. A RAW record
		 * goes to the reader's own buffer (up to LLGO_RECORD_RAW_MAX_LEN). */
		unsigned char *bytes = u.bytes;
		if (raw) {
			if (!r->scratch && !(r->scratch = malloc(LLGO_RECORD_RAW_MAX_LEN))) {
				r->counts.corrupt++; /* out of memory: the record is lost */
				pos += len;
				continue;
			}
			bytes = r->scratch;
		}
		llgo_ring_copy_out(bytes, r->data, r->mask, pos, len);
		pos += len;
		const struct llgo_record *rec = (const struct llgo_record *)(const void *)bytes;
		uint32_t sumlen = len;
		if (raw) {
			if (rec->nframes > LLGO_MAX_FRAMES ||
			    llgo_record_raw_fixed_len(rec->nframes) > len) {
				r->counts.corrupt++;
				continue;
			}
			sumlen = llgo_record_raw_fixed_len(rec->nframes);
		}
		if (rec->length != len || rec->kind != u.rec.kind ||
		    llgo_record_checksum(bytes, sumlen) != rec->checksum) {
			r->counts.corrupt++;
			continue;
		}
		if ((rec->kind != LLGO_REC_ALLOC && !raw) || rec->version != LLGO_REC_VERSION) {
			r->counts.skipped++;
			continue;
		}
		bool len_ok = len == llgo_record_alloc_len(rec->nframes);
		if (raw) {
			struct llgo_raw_regs regs;
			memcpy(&regs, bytes + sumlen - sizeof(regs), sizeof(regs));
			len_ok = regs.stack_len <= LLGO_RAW_MAX_STACK && !(regs.stack_len & 7) &&
				 regs.stack2_len <= LLGO_RAW_MAX_STACK && !(regs.stack2_len & 7) &&
				 len == sumlen + regs.stack_len + regs.stack2_len;
		}
		if (!len_ok || rec->nframes > LLGO_MAX_FRAMES || rec->rate < 1 ||
		    rec->rate > LLGO_RATE_MAX || rec->seq < r->next_seq ||
		    rec->seq == UINT64_MAX) {
			r->counts.corrupt++;
			continue;
		}
		r->next_seq = rec->seq + 1;
		if (fn)
			fn(arg, rec, (const uint64_t *)(const void *)(bytes + sizeof(*rec)));
		delivered++;
	}
	uint64_t now = 0;
	bool light = pos - r->tail <= r->data_size && ring_reader_light(r, pos - r->tail, &now);
	if (!light || mid) {
		r->release_from = pos;
	} else if (pos - r->release_from >= r->release_batch ||
		   now - r->release_ns >= 1000000000ull) {
		uint64_t from = r->release_from;
		r->release_from = ring_reader_release(r, from, pos);
		r->release_ns = now;
	}
	r->tail = pos;
	ring_reader_publish(r, pos);
	/* Counters only move forward; values that go back or do not add up are not taken. */
	if (sampled >= r->sampled && dropped >= r->dropped && dropped <= sampled &&
	    sampled <= LLGO_SANE_COUNT_MAX) {
		r->sampled = sampled;
		r->dropped = dropped;
	}
	r->counts.delivered += delivered;
	return delivered;
}

void ring_reader_account(const struct ring_reader *r, struct ring_account *out)
{
	memset(out, 0, sizeof(*out));
	out->delivered = r->counts.delivered;
	out->dropped = r->dropped + r->prior;
	out->prior = r->prior;
	out->corrupt = r->counts.corrupt;
	uint64_t known = out->delivered + out->dropped + out->corrupt;
	if (r->sampled > known) {
		out->corrupt += r->sampled - known; /* lost without a record-level count */
		out->sampled = r->sampled;
	} else {
		out->sampled = known; /* in flight when sampled was read */
	}
}

void ring_account_add(struct ring_account *sum, const struct ring_account *a)
{
	sum->sampled += a->sampled;
	sum->delivered += a->delivered;
	sum->dropped += a->dropped;
	sum->corrupt += a->corrupt;
	sum->prior += a->prior;
	sum->no_ring += a->no_ring;
	sum->detached += a->detached;
}

void ring_account_lost(struct ring_account *sum, uint64_t lost_no_ring)
{
	sum->sampled += lost_no_ring;
	sum->dropped += lost_no_ring;
	sum->no_ring += lost_no_ring;
}

void ring_account_detached(struct ring_account *sum, uint64_t lost_detached)
{
	sum->sampled += lost_detached;
	sum->dropped += lost_detached;
	sum->detached += lost_detached;
}
