// SPDX-License-Identifier: MIT
/*
 * fuzz_ring.c: libFuzzer harness for the daemon's ring reader (agent/ring.c) and what
 * consumes its records (bucket.c, profile.c and the output writers). The input is what a
 * hostile process controls: the producer line of a ring header (head, sampled, dropped and
 * the tail it may overwrite) and the ring's data bytes. Flag bits in the first byte let the
 * fuzzer go deeper: re-seal record checksums (so size, rate, frames and sequence numbers
 * are reached), and take the ring as re-adopted (baseline).
 */
#include <stdlib.h>
#include <string.h>

#include "../../agent/output/snapshot.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { FZ_DATA = 4096 };

static void fz_add(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	bucket_table_add(arg, frames, rec->nframes, rec->size, rec->rate);
}

/* Recompute the checksum of each record found by its length field from pos to head. */
static void fz_seal(unsigned char *d, uint64_t pos, uint64_t head)
{
	while (head - pos >= sizeof(struct llgo_record) && head - pos <= FZ_DATA) {
		unsigned char rec[LLGO_RECORD_MAX_LEN];
		struct llgo_record h;
		llgo_ring_copy_out(&h, d, FZ_DATA - 1, pos, sizeof(h));
		uint32_t len = h.length;
		if (len < sizeof(h) || (len & 7) || len > LLGO_RECORD_MAX_LEN || len > head - pos)
			return;
		llgo_ring_copy_out(rec, d, FZ_DATA - 1, pos, len);
		memset(rec + offsetof(struct llgo_record, checksum), 0, 8);
		uint64_t sum = llgo_record_checksum(rec, len);
		memcpy(rec + offsetof(struct llgo_record, checksum), &sum, 8);
		llgo_ring_copy_in(d, FZ_DATA - 1, pos, rec, len);
		pos += len;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static _Alignas(64) unsigned char mem[LLGO_RING_HEADER_SIZE + FZ_DATA];
	if (size < 1 + 4 * 8)
		return 0;
	uint8_t flags = data[0];
	uint64_t v[4];
	memcpy(v, data + 1, sizeof(v));
	data += 1 + sizeof(v);
	size -= 1 + sizeof(v);
	memset(mem, 0, sizeof(mem));
	struct llgo_ring_header *h = (struct llgo_ring_header *)(void *)mem;
	h->magic = LLGO_RING_MAGIC;
	h->version = LLGO_RING_VERSION;
	h->header_size = LLGO_RING_HEADER_SIZE;
	h->data_size = FZ_DATA;
	h->ring_id = 0;
	unsigned char *d = mem + LLGO_RING_HEADER_SIZE;
	memcpy(d, data, size < FZ_DATA ? size : FZ_DATA);
	if (flags & 1) /* small positions: records start at 0 */
		v[0] &= 0x3fff, v[3] &= 0x3f;
	atomic_store(&h->head, v[0]);
	atomic_store(&h->sampled, v[1]);
	atomic_store(&h->dropped, v[2]);
	atomic_store(&h->tail, v[3]);
	struct ring_reader r;
	if (ring_reader_init(&r, mem, sizeof(mem), 0, FZ_DATA) != 0)
		return 0;
	if (flags & 2)
		fz_seal(d, r.tail, v[0]);
	if (flags & 4)
		ring_reader_baseline(&r);
	struct bucket_table *t = bucket_table_new(0, 1u << 20);
	if (!t)
		return 0;
	ring_reader_drain(&r, fz_add, t);
	/* the producer moves on (hostile values again) and the reader drains once more */
	if (size > FZ_DATA + 8) {
		uint64_t head2;
		memcpy(&head2, data + FZ_DATA, 8);
		atomic_store(&h->head, head2);
		if (flags & 2)
			fz_seal(d, r.tail, head2);
		ring_reader_drain(&r, fz_add, t);
	}
	struct ring_account a, sum;
	memset(&sum, 0, sizeof(sum));
	ring_reader_account(&r, &a);
	ring_account_add(&sum, &a);
	ring_account_lost(&sum, v[1] >> 24);
	struct profile p;
	memset(&p, 0, sizeof(p));
	if (profile_collect(&p, t) == 0) {
		p.meta.sampled = sum.sampled;
		p.meta.delivered = sum.delivered;
		p.meta.dropped = sum.dropped;
		p.meta.corrupt = sum.corrupt;
		for (int fmt = LLGO_FORMAT_PPROF; fmt <= LLGO_FORMAT_TOP; fmt++) {
			struct buf out;
			buf_init(&out);
			snapshot_write(&out, &p, NULL, fmt, flags >> 4, 10);
			buf_free(&out);
		}
		profile_release(&p);
	}
	bucket_table_free(t);
	free(r.scratch); /* the reader's copy buffer for stack-copy records (not a mapping) */
	return 0;
}
