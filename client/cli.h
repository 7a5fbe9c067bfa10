/* SPDX-License-Identifier: MIT */
/*
 * cli.h: what the files of the llgo-heap CLI share: its parsed options (cli.c), the
 * requests it makes and where their answers go (cli_io.c), `llgo-heap run` (cli_run.c), and
 * the live view of `top --watch` (watch.c). The protocol itself is client.c's.
 *
 * The helpers every one of those files uses (messages, the format and rate arguments) are
 * static inline here, so that no file below cli.c calls up into it.
 */
#ifndef LLGO_CLIENT_CLI_H
#define LLGO_CLIENT_CLI_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "../shared/proto.h"
#include "../shared/ring.h"

/* ---- cli.c: options, subcommands, messages ------------------------------------------------ */

extern const char *const cli_prog;
/* How long a request may wait for the daemon (connect, send, each packet of the answer):
 * a stopped daemon must not hang the CLI. cli_wait_extra_s: added for verify's window. */
extern unsigned cli_timeout_s, cli_wait_extra_s;

struct cli_opts {
	const char *socket;
	const char *out;
	const char *format;
	const char *rate;
	const char *seconds;   /* verify */
	const char *min_agree; /* verify */
	const char *unwind;    /* run: LLGO_HEAP_UNWIND for the command */
	const char *base;      /* top --base FILE */
	bool exact;            /* diff, top --base: bytes as plain numbers */
	unsigned top_n;
	uint32_t flags;
	bool watch;
	double interval; /* --watch SECONDS */
	char **pos;      /* positional arguments */
	int npos;
	char **cmd; /* after "--" (run) */
	int ncmd;
};

/* "llgo-heap: MESSAGE" on stderr; returns 2, the exit status of every error. */
static inline __attribute__((format(printf, 1, 2))) int cli_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", cli_prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 2;
}

/* -f/--format: pprof (proto), text (legacy) or folded, pprof when s is NULL. */
static inline int cli_parse_format(const char *s, int *fmt)
{
	*fmt = LLGO_FORMAT_PPROF; /* on every path: cli_die's 2 is not known to callers */
	if (!s || strcmp(s, "pprof") == 0 || strcmp(s, "proto") == 0)
		*fmt = LLGO_FORMAT_PPROF;
	else if (strcmp(s, "text") == 0 || strcmp(s, "legacy") == 0)
		*fmt = LLGO_FORMAT_TEXT;
	else if (strcmp(s, "folded") == 0)
		*fmt = LLGO_FORMAT_FOLDED;
	else
		return cli_die("unknown format '%s' (pprof, text or folded)", s);
	return 0;
}

/* The file suffix of a format: pb.gz, heap, folded. */
static inline const char *cli_format_suffix(int fmt)
{
	switch (fmt) {
	case LLGO_FORMAT_TEXT:
		return "heap";
	case LLGO_FORMAT_FOLDED:
		return "folded";
	default:
		return "pb.gz";
	}
}

/* -r/--rate and `rate PID N`: 0 (off) to LLGO_RATE_MAX. */
static inline int cli_parse_rate(const char *s, uint64_t *rate)
{
	char *end;
	errno = 0;
	*rate = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*s == '\0' || *s == '-' || *end || errno || v > LLGO_RATE_MAX)
		return cli_die("bad rate '%s' (0 = off, 1 = every allocation, N = mean bytes, "
			       "at most %llu)", s, (unsigned long long)LLGO_RATE_MAX);
	*rate = v;
	return 0;
}

/* ---- cli_io.c: requests and their answers ------------------------------------------------- */

/* One request to the daemon at path, its DATA collected in out; a transport error or an END
 * with a non-zero status becomes one line on stderr (and exit status 2). message gets END's
 * text. */
int cli_io_call(const char *path, const void *req, size_t n, struct buf *out, char *message,
		size_t mlen);
int cli_io_snapshot(const char *path, pid_t pid, int fmt, uint32_t flags, uint32_t top_n,
		    struct buf *out);
/* The LIST answer (whole llgo_list_entry rows). */
int cli_io_list(const char *path, struct buf *out);
/* Write b to file ("-": stdout) without ever leaving half a profile under its name. */
int cli_io_write_file(const char *file, const struct buf *b);

/* ---- cli_run.c: llgo-heap run [options] -- CMD ---------------------------------------------- */

int cli_run(struct cli_opts *o);

/* ---- attach.c: llgo-heap attach PID / detach PID (ptrace; shim/override_got.c inside) ----- */

/* Load the shim into the running process pid and attach it to the daemon at sock at rate;
 * 0, or 2 after one line on stderr (every refusal). */
int cli_attach(const char *sock, pid_t pid, uint64_t rate);
/* Restore pid's allocation functions and end its session. */
int cli_detach(pid_t pid);

/* ---- human.c ------------------------------------------------------------------------------ */

/* v bytes in binary units ("12.5MiB", "512B") then suffix; a suffix starting with '+' also
 * signs positive values ("+1.0MiB"; the '+' is not printed at the end). */
void human_bytes(char *out, size_t n, double v, const char *suffix);

/* ---- watch.c: `llgo-heap top --watch` ------------------------------------------------------- */

/* Fetch pid's LLGO_FORMAT_SITES answer into out; *exited: the process is gone. 0 or -errno. */
typedef int (*watch_fetch_fn)(void *arg, pid_t pid, struct buf *out, bool *exited);
/* Redraw every interval seconds until q, Ctrl-C or a signal (or, not on a terminal, until the
 * process exited); returns 0 or fetch's error. */
int watch_run(pid_t pid, double interval, watch_fetch_fn fetch, void *arg);

#endif
