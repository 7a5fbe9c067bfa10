// SPDX-License-Identifier: MIT
/*
 * fuzz_pprof.c: libFuzzer harness for the pprof reader of `llgo-heap diff` and `top --base`
 * (client/pprofread.c) and what is done with a profile it accepts (client/diff.c): the input
 * is a file given to diff (gzip or a plain protobuf). An accepted profile is diffed against
 * itself in the four views and, both ways, against a fixed heap profile of one sample; every
 * diff profile written must decode again, with the base's values negated.
 */
#include <stdlib.h>
#include <string.h>

#include "../../client/diff.h"
#include "../../client/pprofread.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A heap profile: Go's four sample types, one sample without a location. */
static const unsigned char fz_heap[] = {
	0x0a, 0x04, 0x08, 0x01, 0x10, 0x02, 0x0a, 0x04, 0x08, 0x03, 0x10, 0x04, /* types */
	0x0a, 0x04, 0x08, 0x05, 0x10, 0x02, 0x0a, 0x04, 0x08, 0x06, 0x10, 0x04,
	0x12, 0x06, 0x12, 0x04, 0x01, 0x10, 0x01, 0x10, /* sample: values 1 16 1 16 */
	0x32, 0x00, 0x32, 0x0d, 'a', 'l', 'l', 'o', 'c', '_', 'o', 'b', 'j', 'e', 'c', 't', 's',
	0x32, 0x05, 'c', 'o', 'u', 'n', 't', 0x32, 0x0b, 'a', 'l', 'l', 'o', 'c', '_', 's', 'p',
	'a', 'c', 'e', 0x32, 0x05, 'b', 'y', 't', 'e', 's', 0x32, 0x0d, 'i', 'n', 'u', 's', 'e',
	'_', 'o', 'b', 'j', 'e', 'c', 't', 's', 0x32, 0x0b, 'i', 'n', 'u', 's', 'e', '_', 's',
	'p', 'a', 'c', 'e',
};

static void fz_diff(const struct pprofread *base, const struct pprofread *cur)
{
	char err[256];
	for (int k = 0; k < 4; k++) {
		struct diff_opts o = { .inuse = k & 1, .objects = k & 2, .exact = k == 3,
				       .top_n = 20, .base_name = "a", .new_name = "b" };
		struct buf t;
		buf_init(&t);
		diff_table(&t, base, cur, &o, err, sizeof(err));
		buf_free(&t);
	}
	struct buf d;
	buf_init(&d);
	if (diff_profile(&d, base, cur, "fuzz", err, sizeof(err)) == 0) {
		struct pprofread back;
		if (pprofread_load(&back, d.data, d.len, err, sizeof(err)) != 0 ||
		    back.nsamples != base->nsamples + cur->nsamples)
			abort();
		for (size_t i = 0; i < base->nsamples * base->ntypes; i++)
			if (back.values[cur->nsamples * cur->ntypes + i] !=
			    (int64_t)((uint64_t)0 - (uint64_t)base->values[i]))
				abort();
		pprofread_free(&back);
	}
	buf_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pprofread heap;
	static int heap_loaded;
	char err[256];
	if (!heap_loaded) {
		if (pprofread_load(&heap, fz_heap, sizeof(fz_heap), err, sizeof(err)) != 0)
			abort();
		heap_loaded = 1;
	}
	if (size > (1u << 20))
		return 0;
	struct pprofread p;
	err[0] = '\0';
	if (pprofread_load(&p, data, size, err, sizeof(err)) != 0) {
		if (!err[0])
			abort(); /* every refusal says why */
		return 0;
	}
	fz_diff(&p, &p);
	fz_diff(&heap, &p);
	fz_diff(&p, &heap);
	pprofread_free(&p);
	return 0;
}
