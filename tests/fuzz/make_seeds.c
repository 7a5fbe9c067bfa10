// SPDX-License-Identifier: MIT
/*
 * make_seeds.c: writes the first inputs of each fuzz corpus (tests/fuzz/corpus/NAME/seed-*):
 * well-formed rings, HELLOs with a process memfd and its rings, HTTP request targets, and an
 * ELF file (this program itself), so the fuzzers start from what the daemon really parses.
 * Usage: make_seeds DIR (run by `make fuzz-seeds`; the seeds are committed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../agent/internal.h"

static void put(const char *dir, const char *name, const void *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

/* n ALLOC records of nf frames at data[0..], sealed; returns the bytes used. */
static size_t records(unsigned char *d, size_t cap, int n, int nf, uint64_t size, uint64_t rate)
{
	size_t pos = 0;
	for (int i = 0; i < n; i++) {
		uint32_t len = llgo_record_alloc_len((uint32_t)nf);
		if (pos + len > cap)
			break;
		struct llgo_record r;
		memset(&r, 0, sizeof(r));
		r.kind = LLGO_REC_ALLOC;
		r.version = LLGO_REC_VERSION;
		r.nframes = (uint16_t)nf;
		r.length = len;
		r.seq = (uint64_t)i + 1;
		r.size = size + (uint64_t)i;
		r.rate = rate;
		memcpy(d + pos, &r, sizeof(r));
		for (int k = 0; k < nf; k++) {
			uint64_t pc = 0x401000 + 0x10 * (uint64_t)(k + i);
			memcpy(d + pos + sizeof(r) + 8 * (size_t)k, &pc, 8);
		}
		uint64_t sum = llgo_record_checksum(d + pos, len);
		memcpy(d + pos + offsetof(struct llgo_record, checksum), &sum, 8);
		pos += len;
	}
	return pos;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: make_seeds CORPUS_DIR SELF\n");
		return 2;
	}
	char dir[400];
	static unsigned char b[1 << 16];

	/* ring: flags, head, sampled, dropped, tail, data */
	snprintf(dir, sizeof(dir), "%s/ring", argv[1]);
	for (int v = 0; v < 3; v++) {
		memset(b, 0, sizeof(b));
		b[0] = v == 2 ? 7 : 3;
		size_t used = records(b + 33, 4096, 20, v + 1, 64, v ? 512 : 1);
		uint64_t hdr[4] = { used, 20 + (uint64_t)v, (uint64_t)v, 0 };
		memcpy(b + 1, hdr, sizeof(hdr));
		char name[32];
		snprintf(name, sizeof(name), "seed-%d", v);
		put(dir, name, b, 33 + 4096 + 8);
	}

	/* socket: flags, type index, packet length, packet, memfd contents */
	snprintf(dir, sizeof(dir), "%s/socket", argv[1]);
	for (int v = 0; v < 3; v++) {
		memset(b, 0, sizeof(b));
		b[0] = (uint8_t)(1 | 2 | 4 | (v == 1 ? 8 : 0) | (v != 0 ? 16 : 0) | (v == 2 ? 32 : 0));
		b[1] = 0; /* HELLO */
		uint16_t len = sizeof(struct llgo_msg_hello);
		memcpy(b + 2, &len, 2);
		struct llgo_msg_hello m;
		memset(&m, 0, sizeof(m));
		msg_header_init(&m.h, LLGO_MSG_HELLO, sizeof(m));
		m.ring_data_size = LLGO_RING_MIN_DATA;
		m.rate_word = 512;
		snprintf(m.comm, sizeof(m.comm), "seed");
		memcpy(b + 4, &m, sizeof(m));
		unsigned char *mem = b + 4 + sizeof(m);
		struct llgo_ctl c;
		memset(&c, 0, sizeof(c));
		c.magic = LLGO_CTL_MAGIC;
		c.version = LLGO_CTL_VERSION;
		c.size = LLGO_CTL_SIZE;
		c.page_size = 4096;
		c.ring_data_size = LLGO_RING_MIN_DATA;
		atomic_store(&c.ring_count, v ? 1u : 0u);
		atomic_store(&c.rate_word, 512);
		memcpy(mem, &c, sizeof(c));
		size_t total = LLGO_CTL_SIZE;
		if (v) {
			uint64_t off = llgo_ring_offset(0, LLGO_RING_MIN_DATA, 4096);
			struct llgo_ring_header h;
			memset(&h, 0, sizeof(h));
			h.magic = LLGO_RING_MAGIC;
			h.version = LLGO_RING_VERSION;
			h.header_size = LLGO_RING_HEADER_SIZE;
			h.data_size = LLGO_RING_MIN_DATA;
			size_t used = records(mem + off + LLGO_RING_HEADER_SIZE, LLGO_RING_MIN_DATA,
					      10, 3, 100, 512);
			atomic_store(&h.head, used);
			atomic_store(&h.sampled, 10);
			memcpy(mem + off, &h, sizeof(h));
			total = off + LLGO_RING_HEADER_SIZE + LLGO_RING_MIN_DATA;
		}
		char name[32];
		snprintf(name, sizeof(name), "seed-%d", v);
		put(dir, name, b, 4 + sizeof(m) + total);
	}

	/* http: request targets ("PID" becomes the attached pid) and a symbol body */
	snprintf(dir, sizeof(dir), "%s/http", argv[1]);
	const char *http[] = { "heap?pid=PID", "heap?pid=PID&debug=1", "allocs?pid=PID&gc=1",
			       "heap?pid=PID&seconds=1", "heap?seconds=-1&debug=2", "",
			       "cmdline", "symbol", "P0x401000+0x402000", "heap?pid=99999999999" };
	for (size_t i = 0; i < sizeof(http) / sizeof(http[0]); i++) {
		char name[32];
		snprintf(name, sizeof(name), "seed-%zu", i);
		put(dir, name, http[i], strlen(http[i]));
	}

	/* elf: this program */
	snprintf(dir, sizeof(dir), "%s/elf", argv[1]);
	FILE *f = fopen(argv[2], "rb");
	if (!f)
		return 1;
	static unsigned char elf[1 << 20];
	size_t n = fread(elf, 1, sizeof(elf), f);
	fclose(f);
	put(dir, "seed-self", elf, n);
	return 0;
}
