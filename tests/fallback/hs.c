// SPDX-License-Identifier: MIT
/*
 * hs.c: the workload of Go's test/heapsampling.go (as tests/progs/heapsampling.c runs it
 * natively), profiled by the size-class fallback recorder on a target without a stack
 * source. The same file runs natively, on wasm32-wasi (under Node's WASI) and on a bare-metal
 * Cortex-M (under qemu-system-arm); the target glue (hosted_main.c, cortexm.c) supplies the
 * allocator underneath, the output and the arguments.
 *
 *   hs MODE N SEED RATE
 *     interleaved: 17K, 1K, 18K, 512, 16K, 256 bytes, N times each
 *     small:       1K, 512, 256 bytes, N times each
 *     large:       4 KiB and 64 KiB N times, 600 KiB and 4 MiB N/25 times
 *
 * Output: "site SIZE COUNT" for every allocation size (the truth), then the recorder's Go
 * legacy heap text. Every block is freed right away, so the profile's in-use counts must come
 * back to zero: the sampled blocks carry a flag in a header word, as an allocator would.
 */
#include "hs.h"

#include "../../shim/fallback/llgo_fallback.h"

static struct llgo_fallback hs_prof;

/* The header in front of each block: its size and whether it was sampled. */
struct hs_hdr {
	uint32_t size;
	uint32_t sampled;
	uint64_t pad; /* keeps the block 16-aligned like malloc's */
};

static void *hs_malloc(size_t size)
{
	struct hs_hdr *h = hs_raw_alloc(sizeof(*h) + size);
	if (!h)
		return 0;
	h->size = (uint32_t)size;
	h->sampled = llgo_fallback_alloc(&hs_prof, size);
	return h + 1;
}

static void hs_free(void *p)
{
	struct hs_hdr *h = (struct hs_hdr *)p - 1;
	if (h->sampled)
		llgo_fallback_free(&hs_prof, h->size);
	hs_raw_free(h);
}

static uint32_t hs_sizes[8];
static uint32_t hs_counts[8];
static unsigned hs_nsites;

static int hs_site(uint32_t size)
{
	unsigned i = 0;
	while (i < hs_nsites && hs_sizes[i] != size)
		i++;
	if (i == hs_nsites) {
		hs_sizes[i] = size;
		hs_nsites++;
	}
	void *p = hs_malloc(size);
	if (!p)
		return -1;
	/* the program writes its block, so the allocation is real */
	((volatile unsigned char *)p)[0] = 1;
	((volatile unsigned char *)p)[size - 1] = 2;
	hs_counts[i]++;
	hs_free(p);
	return 0;
}

static bool hs_eq(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

static uint64_t hs_atou(const char *s)
{
	uint64_t v = 0;
	while (*s >= '0' && *s <= '9')
		v = v * 10 + (uint64_t)(*s++ - '0');
	return v;
}

static int hs_puts(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return hs_write(0, s, n);
}

static int hs_putu(uint64_t v)
{
	char tmp[24];
	size_t n = sizeof(tmp) - 1;
	tmp[n] = '\0';
	do {
		tmp[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return hs_puts(tmp + n);
}

int hs_main(int argc, char **argv)
{
	if (argc < 5) {
		hs_puts("usage: hs interleaved|small|large N SEED RATE\n");
		return 2;
	}
	const char *mode = argv[1];
	uint64_t n = hs_atou(argv[2]), seed = hs_atou(argv[3]), rate = hs_atou(argv[4]);
	static const uint32_t interleaved[] = { 17 * 1024, 1024, 18 * 1024, 512, 16 * 1024, 256 };
	static const uint32_t small[] = { 1024, 512, 256 };
	llgo_fallback_init(&hs_prof, rate, seed);
	int rc = 0;
	if (hs_eq(mode, "interleaved") || hs_eq(mode, "small")) {
		const uint32_t *sz = hs_eq(mode, "small") ? small : interleaved;
		unsigned ns = hs_eq(mode, "small") ? 3 : 6;
		for (uint64_t i = 0; i < n && rc == 0; i++)
			for (unsigned k = 0; k < ns && rc == 0; k++)
				rc = hs_site(sz[k]);
	} else if (hs_eq(mode, "large")) {
		for (uint64_t i = 0; i < n && rc == 0; i++) {
			rc = hs_site(4096);
			if (rc == 0)
				rc = hs_site(64 * 1024);
			if (rc == 0 && i % 25 == 0) {
				rc = hs_site(600 * 1024);
				if (rc == 0)
					rc = hs_site(4 * 1024 * 1024);
			}
		}
	} else {
		hs_puts("unknown mode\n");
		return 2;
	}
	if (rc != 0) {
		hs_puts("allocation failed\n");
		return 1;
	}
	for (unsigned i = 0; i < hs_nsites; i++) {
		hs_puts("site ");
		hs_putu(hs_sizes[i]);
		hs_puts(" ");
		hs_putu(hs_counts[i]);
		hs_puts("\n");
	}
	return llgo_fallback_write(&hs_prof, hs_write, 0) != 0;
}
