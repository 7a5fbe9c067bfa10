// SPDX-License-Identifier: MIT
/*
 * symbolize_bench.c: the daemon's symbolizer (agent/symbol/symbolize.c, answered by the sandboxed
 * llgo-heap-symbolizer process, found in ../bin/) timed on real files.
 *
 *   symbolize_bench FILE [N] [batch]
 *
 * FILE is opened as the daemon opens a mapped file (symfile_get with its build ID) and its
 * largest executable PT_LOAD segment is placed at a made-up load address; N addresses (10,000
 * by default) spread over that segment by a fixed pseudo-random sequence are symbolized
 * twice: the first pass pays for the symbol table, the DWARF and every distinct lookup, the
 * second is served by the per-address cache. With batch, the cold pass first hands every
 * address to symbolize_many (as a snapshot does, one exchange per 4096 addresses) and then
 * reads them one by one; without, each address is one exchange with the helper. Prints the time of each pass and how many
 * addresses got a function, a file:line and inlined frames; with SYMBOLIZE_BENCH_DUMP set, also
 * every address's frames (file offset | function file:line ...), leaf first.
 */
#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../agent/internal.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int text_segment(int fd, char *build_id, size_t cap, GElf_Phdr *out)
{
	elf_version(EV_CURRENT);
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf)
		return -1;
	const void *id;
	ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
	build_id[0] = '\0';
	for (ssize_t i = 0; n > 0 && i < n && (size_t)(2 * i + 3) < cap; i++)
		snprintf(build_id + 2 * i, 3, "%02x", ((const unsigned char *)id)[i]);
	size_t nph = 0;
	int rc = -1;
	elf_getphdrnum(elf, &nph);
	for (size_t i = 0; i < nph; i++) { /* the largest executable segment */
		GElf_Phdr ph;
		if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) &&
		    (rc != 0 || ph.p_memsz > out->p_memsz)) {
			*out = ph;
			rc = 0;
		}
	}
	elf_end(elf);
	return rc;
}

static bool batch;

static void pass(const struct mapping *m, const uint64_t *pcs, size_t n, const char *label)
{
	size_t named = 0, lines = 0, inlined = 0;
	bool dump = getenv("SYMBOLIZE_BENCH_DUMP") != NULL;
	double t0 = now();
	if (batch && strcmp(label, "cold") == 0) {
		const struct mapping **ms = malloc(n * sizeof(*ms));
		for (size_t i = 0; i < n; i++)
			ms[i] = m;
		symbolize_many(ms, pcs, n);
		free(ms);
	}
	for (size_t i = 0; i < n; i++) {
		struct sym_result r;
		int k = symbolize_pc(m, pcs[i], &r);
		if (dump && strcmp(label, "cold") == 0) {
			printf("%#llx", (unsigned long long)(pcs[i] - m->start + m->offset));
			for (int j = 0; j < k; j++)
				printf(" | %s %s:%d", r.frames[j].function,
				       r.frames[j].file ? r.frames[j].file : "?", r.frames[j].line);
			printf("\n");
		}
		if (k <= 0)
			continue;
		named++;
		lines += r.frames[0].line > 0;
		inlined += k > 1;
	}
	double dt = now() - t0;
	printf("%-6s %zu addresses in %8.1f ms (%6.2f us each): %zu named, %zu with a line, "
	       "%zu with inlined frames\n", label, n, dt * 1e3, dt * 1e6 / (double)n, named, lines,
	       inlined);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [N] [batch]\n", argv[0]);
		return 2;
	}
	size_t n = argc > 2 ? strtoul(argv[2], NULL, 0) : 10000;
	batch = argc > 3 && strcmp(argv[3], "batch") == 0;
	int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	struct mapping m;
	GElf_Phdr ph = { 0 };
	memset(&m, 0, sizeof(m));
	if (fd < 0 || text_segment(fd, m.build_id, sizeof(m.build_id), &ph) != 0) {
		fprintf(stderr, "%s: no executable segment\n", argv[1]);
		return 1;
	}
	uint64_t page = 4096, base = 0x7f0000000000ull;
	m.offset = ph.p_offset & ~(page - 1);
	m.start = base + (ph.p_vaddr & ~(page - 1));
	m.end = base + ph.p_vaddr + ph.p_memsz;
	m.path = argv[1];
	double t0 = now();
	m.file = symfile_get(argv[1], fd, m.build_id, geteuid());
	close(fd);
	if (!m.file) {
		fprintf(stderr, "%s: symfile_get failed\n", argv[1]);
		return 1;
	}
	printf("%s: build id %s, text %.1f MiB, opened in %.1f ms\n", argv[1],
	       m.build_id[0] ? m.build_id : "-", (double)(m.end - m.start) / 1048576.0,
	       (now() - t0) * 1e3);
	uint64_t *pcs = malloc(n * sizeof(*pcs)), x = 88172645463325252ull;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		pcs[i] = base + ph.p_vaddr + x % ph.p_memsz;
	}
	pass(&m, pcs, n, "cold");
	pass(&m, pcs, n, "cached");
	symfile_put(m.file);
	free(pcs);
	return 0;
}
