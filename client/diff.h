/* SPDX-License-Identifier: MIT */
/*
 * diff.h: growth per allocation site between two pprof profiles (diff.c), for
 * `llgo-heap diff BASE NEW` and `llgo-heap top PID --base FILE` (cli.c).
 */
#ifndef LLGO_CLIENT_DIFF_H
#define LLGO_CLIENT_DIFF_H

#include <stdbool.h>

#include "../common/buf.h"
#include "pprofread.h"

struct diff_opts {
	bool inuse;   /* rank by in-use values, not allocated ones */
	bool objects; /* rank by objects, not bytes */
	bool exact;   /* bytes as plain numbers, not KiB/MiB */
	unsigned top_n; /* rows; 0: 10 */
	const char *base_name, *new_name; /* how the header names the two profiles */
};

/* The table of growth per site from base to cur (cur minus base) appended to out. 0, or -1
 * with the reason in err (a profile lacks the sample type, out of memory). */
int diff_table(struct buf *out, const struct pprofread *base, const struct pprofread *cur,
	       const struct diff_opts *o, char *err, size_t errlen);
/* A gzipped pprof profile of cur's samples and base's with their values negated (what
 * `go tool pprof -base` shows), with comment added to cur's comments. 0, or -1 with err
 * (sample or period types differ, ids out of range, out of memory). */
int diff_profile(struct buf *out, const struct pprofread *base, const struct pprofread *cur,
		 const char *comment, char *err, size_t errlen);

#endif
