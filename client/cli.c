// SPDX-License-Identifier: MIT
/*
 * cli.c: llgo-heap, the command-line client.
 *
 *   llgo-heap run [-r RATE] [-o FILE] [-f pprof|text|folded] [--unwind MODE] -- CMD [ARG...]
 *   llgo-heap list
 *   llgo-heap snapshot PID [-o FILE|-] [-f pprof|text|folded] [--allocs|--peak]
 *   llgo-heap top PID [-n N] [--inuse|--peak] [--objects] [--base FILE [--exact]]
 *   llgo-heap diff BASE NEW [-n N] [--inuse] [--objects] [--exact] [-o FILE]
 *   llgo-heap rate PID N
 *   llgo-heap attach PID [-r RATE]     llgo-heap detach PID
 *   llgo-heap verify PID [--seconds N] [--min-agree PERCENT]
 *
 * Every subcommand takes --socket PATH; options may come before or after the positional
 * arguments (`--` ends them; for run, what follows is the command). This file parses the
 * command line and prints the answers; the requests are cli_io.c's (over client.c, the
 * protocol), `run` is cli_run.c's, the live view of `top --watch` watch.c's, the growth
 * tables of `diff` and `top --base` diff.c's over pprofread.c. All profile work on processes
 * happens in llgo-heapd: the CLI links neither libdw, libelf nor libmicrohttpd, only zlib
 * (to read and write the gzipped profiles of `diff`).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../shared/proto.h"
#include "../shared/ring.h"
#include "cli.h"
#include "client.h"
#include "diff.h"
#include "pprofread.h"

const char *const cli_prog = "llgo-heap";
unsigned cli_timeout_s = 60, cli_wait_extra_s;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: llgo-heap COMMAND [options]\n"
		"  run [-r RATE] [-o FILE] [-f pprof|text|folded] [--unwind auto|fp|dwarf] -- CMD...\n"
		"        profile CMD with a private daemon, write its profile, print top sites\n"
		"  list                          attached processes and their record counts\n"
		"  snapshot PID [-o FILE|-] [-f pprof|text|folded] [--allocs|--peak]\n"
		"  top PID [-n N] [--inuse|--peak] [--objects]\n"
		"        --peak: the sites in use when the sampled in-use total was highest\n"
		"  top PID --watch [SECONDS]     live view (keys: i a o g sort, q quit)\n"
		"  top PID --base FILE [--exact] growth per site since FILE (a pprof snapshot)\n"
		"  diff BASE NEW [-n N] [--inuse] [--objects] [--exact] [-o FILE]\n"
		"        growth per site from pprof file BASE to NEW (NEW minus BASE, as\n"
		"        go tool pprof -base BASE NEW); -o writes that difference as a pprof file\n"
		"  rate PID N                    set the sampling rate of a running process\n"
		"  attach PID [-r RATE]          load the shim into a running process (ptrace)\n"
		"  detach PID                    take it out again: the process pays nothing\n"
		"  verify PID [--seconds N] [--min-agree PERCENT]\n"
		"        compare recorded stacks with the kernel's (eBPF) for N s (default 5);\n"
		"        exit 1 when fewer than PERCENT (default 100) agree, 2 when BPF is\n"
		"        unavailable\n"
		"common options: --socket PATH (default: $LLGO_HEAP_SOCKET, else the daemon's)\n"
		"                --timeout SECONDS  give up on a daemon that does not answer\n"
		"                (default 60, or $LLGO_HEAP_TIMEOUT; verify adds its --seconds)\n");
}

/* ---- options --------------------------------------------------------------------------- */

/* Options taking a value, per subcommand; anything else starting with '-' is unknown. */
static int opts_parse(const char *sub, int argc, char **argv, struct cli_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->pos = calloc((size_t)argc + 1, sizeof(char *));
	if (!o->pos)
		return cli_die("out of memory");
	for (int i = 0; i < argc; i++) {
		char *a = argv[i];
		const char *val = NULL;
		char *eq = NULL;
		if (strcmp(a, "--") == 0) {
			o->cmd = argv + i + 1;
			o->ncmd = argc - i - 1;
			break;
		}
		if (a[0] != '-' || a[1] == '\0') {
			o->pos[o->npos++] = a;
			continue;
		}
		if (strncmp(a, "--", 2) == 0 && (eq = strchr(a, '=')) != NULL) {
			*eq = '\0';
			val = eq + 1;
		}
#define TAKE(dst)                                                                          \
	do {                                                                               \
		if (!val) {                                                                \
			if (i + 1 >= argc)                                                 \
				return cli_die("%s: option %s needs a value", sub, a);         \
			val = argv[++i];                                                   \
		}                                                                          \
		(dst) = val;                                                               \
	} while (0)
		if (strcmp(a, "--socket") == 0 || strcmp(a, "-S") == 0) {
			TAKE(o->socket);
		} else if (strcmp(a, "--timeout") == 0) {
			const char *t;
			TAKE(t);
			char *end;
			unsigned long v = strtoul(t, &end, 10);
			if (*t == '\0' || *end || v == 0 || v > 86400)
				return cli_die("%s: bad number of seconds for --timeout: '%s'", sub, t);
			cli_timeout_s = (unsigned)v;
		} else if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) &&
			   (strcmp(sub, "run") == 0 || strcmp(sub, "snapshot") == 0 ||
			    strcmp(sub, "diff") == 0)) {
			TAKE(o->out);
		} else if ((strcmp(a, "-f") == 0 || strcmp(a, "--format") == 0) &&
			   (strcmp(sub, "run") == 0 || strcmp(sub, "snapshot") == 0)) {
			TAKE(o->format);
		} else if ((strcmp(a, "-r") == 0 || strcmp(a, "--rate") == 0) &&
			   (strcmp(sub, "run") == 0 || strcmp(sub, "attach") == 0)) {
			TAKE(o->rate);
		} else if (strcmp(a, "--unwind") == 0 && strcmp(sub, "run") == 0) {
			TAKE(o->unwind);
			if (strcmp(o->unwind, "auto") != 0 && strcmp(o->unwind, "fp") != 0 &&
			    strcmp(o->unwind, "dwarf") != 0)
				return cli_die("%s: --unwind takes auto, fp or dwarf, not '%s'", sub,
					       o->unwind);
		} else if ((strcmp(a, "-n") == 0 || strcmp(a, "--top") == 0) &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "run") == 0 ||
			    strcmp(sub, "diff") == 0)) {
			const char *n;
			TAKE(n);
			char *end;
			unsigned long v = strtoul(n, &end, 10);
			if (*n == '\0' || *end || v == 0 || v > 100000)
				return cli_die("%s: bad number for %s: '%s'", sub, a, n);
			o->top_n = (unsigned)v;
		} else if (strcmp(a, "--seconds") == 0 && strcmp(sub, "verify") == 0) {
			TAKE(o->seconds);
		} else if (strcmp(a, "--min-agree") == 0 && strcmp(sub, "verify") == 0) {
			TAKE(o->min_agree);
		} else if (strcmp(a, "--watch") == 0 && strcmp(sub, "top") == 0) {
			o->watch = true;
			o->interval = 2;
			/* SECONDS: the next argument when it is a number and the PID came first */
			const char *v = val;
			if (!v && i + 1 < argc && o->npos >= 1 && argv[i + 1][0] >= '0' &&
			    argv[i + 1][0] <= '9')
				v = argv[++i];
			if (v) {
				char *end;
				double d = strtod(v, &end);
				if (*v == '\0' || *end || !(d >= 0.1 && d <= 3600))
					return cli_die("%s: bad interval for --watch: '%s' (0.1..3600 "
						       "seconds)", sub, v);
				o->interval = d;
			}
		} else if (strcmp(a, "--allocs") == 0 && !val && strcmp(sub, "snapshot") == 0) {
			o->flags |= LLGO_SNAP_ALLOCS;
		} else if (strcmp(a, "--inuse") == 0 && !val &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "snapshot") == 0 ||
			    strcmp(sub, "diff") == 0)) {
			o->flags |= LLGO_SNAP_INUSE;
		} else if (strcmp(a, "--peak") == 0 && !val &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "snapshot") == 0)) {
			o->flags |= LLGO_SNAP_PEAK;
		} else if (strcmp(a, "--objects") == 0 && !val &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "snapshot") == 0 ||
			    strcmp(sub, "diff") == 0)) {
			o->flags |= LLGO_SNAP_OBJECTS;
		} else if (strcmp(a, "--base") == 0 && strcmp(sub, "top") == 0) {
			TAKE(o->base);
		} else if (strcmp(a, "--exact") == 0 && !val &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "diff") == 0)) {
			o->exact = true;
		} else {
			if (eq)
				*eq = '=';
			return cli_die("%s: unknown option '%s' (see llgo-heap --help)", sub, a);
		}
#undef TAKE
	}
	if ((o->flags & LLGO_SNAP_PEAK) && (o->flags & (LLGO_SNAP_ALLOCS | LLGO_SNAP_INUSE)))
		return cli_die("%s: --peak is a view of its own (not with --allocs or --inuse)", sub);
	if ((o->flags & LLGO_SNAP_PEAK) && o->watch)
		return cli_die("%s: --peak does not go with --watch", sub);
	return 0;
}
static int cli_parse_pid(const char *s, pid_t *pid)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end || errno || v <= 0 || v > INT_MAX)
		return cli_die("bad PID '%s'", s);
	*pid = (pid_t)v;
	return 0;
}

/* ---- subcommands ------------------------------------------------------------------------ */

static void print_list(const struct buf *b)
{
	size_t n = b->len / sizeof(struct llgo_list_entry);
	printf("%-8s %-7s %10s %10s %10s %8s %8s %8s %-6s %9s %15s  %s\n", "PID", "STATE",
	       "RATE", "SAMPLED", "DELIVERED", "DROPPED", "CORRUPT", "BUCKETS", "UNWIND",
	       "TRUNCATED", "VERIFIED", "COMMAND");
	for (size_t i = 0; i < n; i++) {
		struct llgo_list_entry e;
		memcpy(&e, b->data + i * sizeof(e), sizeof(e));
		e.comm[sizeof(e.comm) - 1] = '\0';
		/* --verify-every: agreeing/compared samples, "-" when not verified */
		char ver[48] = "-";
		if (e.verify_samples)
			snprintf(ver, sizeof(ver), "%llu/%llu", (unsigned long long)e.verify_agree,
				 (unsigned long long)e.verify_samples);
		printf("%-8u %-7s %10llu %10llu %10llu %8llu %8llu %8llu %-6s %9llu %15s  %s\n",
		       e.pid,
		       e.state == LLGO_PROC_LIVE       ? "live"
		       : e.state == LLGO_PROC_DETACHED ? "detached"
						       : "exited",
		       (unsigned long long)e.rate, (unsigned long long)e.sampled,
		       (unsigned long long)e.delivered, (unsigned long long)e.dropped,
		       (unsigned long long)e.corrupt, (unsigned long long)e.buckets,
		       llgo_unwind_mode_name(e.unwind_mode), (unsigned long long)e.truncated, ver, e.comm);
		if (e.budget_flags) { /* the uid's budgets llgo-heapd hit (llgo-heapd --help) */
			static const char *const names[] = { "connections", "processes", "rings",
							     "ring memory", "bucket memory",
							     "unread answers", "unwind memory" };
			printf("%-8s over its user's budget:", "");
			const char *sep = " ";
			for (unsigned k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
				if (e.budget_flags & (1u << k)) {
					printf("%s%s", sep, names[k]);
					sep = ", ";
				}
			}
			if (e.budget_dropped)
				printf(" (%llu records not aggregated)",
				       (unsigned long long)e.budget_dropped);
			putchar('\n');
		}
	}
}

static int cmd_list(const char *path, struct cli_opts *o)
{
	if (o->npos)
		return cli_die("list: unexpected argument '%s'", o->pos[0]);
	struct buf b;
	buf_init(&b);
	int rc = cli_io_list(path, &b);
	if (!rc)
		print_list(&b);
	buf_free(&b);
	return rc;
}

static int cmd_snapshot(const char *path, struct cli_opts *o)
{
	if (o->npos != 1)
		return cli_die("snapshot: expected one PID (llgo-heap snapshot PID [-o FILE|-])");
	pid_t pid;
	int fmt, rc;
	if ((rc = cli_parse_pid(o->pos[0], &pid)) || (rc = cli_parse_format(o->format, &fmt)))
		return rc;
	char def[64];
	snprintf(def, sizeof(def), "llgo-heap.%d.%s%s", (int)pid,
		 (o->flags & LLGO_SNAP_PEAK) ? "peak." : "", cli_format_suffix(fmt));
	struct buf b;
	buf_init(&b);
	rc = cli_io_snapshot(path, pid, fmt, o->flags, 0, &b);
	if (!rc)
		rc = cli_io_write_file(o->out ? o->out : def, &b);
	if (!rc && !(o->out && strcmp(o->out, "-") == 0))
		fprintf(stderr, "%s: wrote %s (%zu bytes)\n", cli_prog, o->out ? o->out : def, b.len);
	buf_free(&b);
	return rc;
}

/* watch.c's fetch: the process's sites, and whether it has exited. */
static int watch_fetch(void *arg, pid_t pid, struct buf *out, bool *exited)
{
	const char *path = arg;
	/* The state first: a process seen exited here is final in the snapshot below. */
	struct buf list;
	buf_init(&list);
	*exited = false;
	if (cli_io_list(path, &list) == 0) {
		bool live = false, found = false;
		for (size_t i = 0; i + sizeof(struct llgo_list_entry) <= list.len;
		     i += sizeof(struct llgo_list_entry)) {
			struct llgo_list_entry e;
			memcpy(&e, list.data + i, sizeof(e));
			if ((pid_t)e.pid != pid)
				continue;
			found = true;
			live |= e.state == LLGO_PROC_LIVE;
		}
		*exited = found && !live;
	}
	buf_free(&list);
	return cli_io_snapshot(path, pid, LLGO_FORMAT_SITES, 0, 0, out) ? -EIO : 0;
}

/* ---- growth: diff, top --base ------------------------------------------------------------ */

static int growth_load(const char *sub, const char *file, struct pprofread *p)
{
	char err[256];
	if (pprofread_file(p, file, err, sizeof(err)) != 0)
		return cli_die("%s: %s: %s", sub, file, err);
	return 0;
}

/* The table of cur minus base on stdout. */
static int growth_print(const char *sub, const struct pprofread *base, const char *base_name,
			const struct pprofread *cur, const char *cur_name, const struct cli_opts *o)
{
	struct diff_opts d = { .inuse = o->flags & LLGO_SNAP_INUSE,
			       .objects = o->flags & LLGO_SNAP_OBJECTS,
			       .exact = o->exact,
			       .top_n = o->top_n,
			       .base_name = base_name,
			       .new_name = cur_name };
	struct buf t;
	buf_init(&t);
	char err[256];
	int rc = 0;
	if (diff_table(&t, base, cur, &d, err, sizeof(err)) != 0)
		rc = cli_die("%s: %s", sub, err);
	else if (fwrite(t.data, 1, t.len, stdout) != t.len || fflush(stdout) != 0)
		rc = cli_die("writing to stdout: %s", strerror(errno));
	buf_free(&t);
	return rc;
}

static int cmd_diff(struct cli_opts *o)
{
	if (o->npos != 2)
		return cli_die("diff: expected two pprof files (llgo-heap diff BASE NEW)");
	struct pprofread base, cur;
	int rc = growth_load("diff", o->pos[0], &base);
	if (rc)
		return rc;
	if ((rc = growth_load("diff", o->pos[1], &cur))) {
		pprofread_free(&base);
		return rc;
	}
	rc = growth_print("diff", &base, o->pos[0], &cur, o->pos[1], o);
	if (!rc && o->out) {
		struct buf prof;
		buf_init(&prof);
		char comment[512], err[256];
		snprintf(comment, sizeof(comment), "llgo-heap diff: %s minus base %s", o->pos[1],
			 o->pos[0]);
		if (diff_profile(&prof, &base, &cur, comment, err, sizeof(err)) != 0)
			rc = cli_die("diff: -o %s: %s", o->out, err);
		else
			rc = cli_io_write_file(o->out, &prof);
		if (!rc && strcmp(o->out, "-") != 0)
			fprintf(stderr, "%s: wrote %s (%zu bytes)\n", cli_prog, o->out, prof.len);
		buf_free(&prof);
	}
	pprofread_free(&base);
	pprofread_free(&cur);
	return rc;
}

/* top PID --base FILE: the process's profile now minus FILE. */
static int top_base(const char *path, pid_t pid, struct cli_opts *o)
{
	struct pprofread base, cur;
	int rc = growth_load("top", o->base, &base);
	if (rc)
		return rc;
	struct buf b;
	buf_init(&b);
	rc = cli_io_snapshot(path, pid, LLGO_FORMAT_PPROF, 0, 0, &b);
	char err[256], name[64];
	if (!rc && pprofread_load(&cur, b.data, b.len, err, sizeof(err)) != 0)
		rc = cli_die("top: the profile llgo-heapd sent: %s", err);
	buf_free(&b);
	if (!rc) {
		snprintf(name, sizeof(name), "pid %d now", (int)pid);
		rc = growth_print("top", &base, o->base, &cur, name, o);
		pprofread_free(&cur);
	}
	pprofread_free(&base);
	return rc;
}

static int cmd_top(const char *path, struct cli_opts *o)
{
	if (o->npos != 1)
		return cli_die("top: expected one PID");
	pid_t pid;
	int rc = cli_parse_pid(o->pos[0], &pid);
	if (rc)
		return rc;
	if (o->base && o->watch)
		return cli_die("top: --base and --watch do not go together");
	if (o->exact && !o->base)
		return cli_die("top: --exact goes with --base FILE");
	if ((o->flags & LLGO_SNAP_PEAK) && (o->base || o->watch))
		return cli_die("top: --peak goes with neither --base nor --watch");
	if (o->base)
		return top_base(path, pid, o);
	if (o->watch)
		return watch_run(pid, o->interval, watch_fetch, (void *)path) ? 1 : 0;
	struct buf b;
	buf_init(&b);
	rc = cli_io_snapshot(path, pid, LLGO_FORMAT_TOP, o->flags, o->top_n, &b);
	if (!rc)
		fwrite(b.data, 1, b.len, stdout);
	buf_free(&b);
	return rc;
}

static int cmd_rate(const char *path, struct cli_opts *o)
{
	if (o->npos != 2)
		return cli_die("rate: expected PID and RATE (llgo-heap rate PID N)");
	pid_t pid;
	uint64_t rate;
	int rc;
	if ((rc = cli_parse_pid(o->pos[0], &pid)) || (rc = cli_parse_rate(o->pos[1], &rate)))
		return rc;
	struct llgo_msg_set_rate req;
	client_set_rate_req(&req, pid, rate);
	struct buf b;
	buf_init(&b);
	char message[LLGO_END_MSG_LEN];
	rc = cli_io_call(path, &req, sizeof(req), &b, message, sizeof(message));
	buf_free(&b);
	if (!rc)
		printf("%s\n", message);
	return rc;
}

static int cmd_attach(const char *path, struct cli_opts *o, bool attach)
{
	if (o->npos != 1)
		return cli_die(attach ? "attach: expected one PID (llgo-heap attach PID [-r RATE])"
				      : "detach: expected one PID (llgo-heap detach PID)");
	pid_t pid;
	uint64_t rate = LLGO_RATE_DEFAULT;
	int rc = cli_parse_pid(o->pos[0], &pid);
	if (!rc && o->rate)
		rc = cli_parse_rate(o->rate, &rate);
	if (rc)
		return rc;
	return attach ? cli_attach(path, pid, rate) : cli_detach(pid);
}

/* ---- verify ---------------------------------------------------------------------------- */

/* llgo-heap verify: the daemon collects; we print its report and the verdict. Exit 0 when
 * at least --min-agree percent of the matched samples agree, 1 when fewer do (or none was
 * matched and the threshold is above 0), 2 on any error (BPF unavailable, no such process). */
static int cmd_verify(const char *path, struct cli_opts *o)
{
	if (o->npos != 1)
		return cli_die("verify: expected one PID (llgo-heap verify PID [--seconds N] "
			       "[--min-agree PERCENT])");
	pid_t pid;
	int rc = cli_parse_pid(o->pos[0], &pid);
	if (rc)
		return rc;
	unsigned long seconds = 5;
	if (o->seconds) {
		char *end;
		errno = 0;
		seconds = strtoul(o->seconds, &end, 10);
		if (!*o->seconds || *end || errno || seconds < 1 || seconds > LLGO_VERIFY_MAX_SECONDS)
			return cli_die("verify: bad --seconds '%s' (1..%u)", o->seconds,
				       LLGO_VERIFY_MAX_SECONDS);
	}
	double min_agree = 100.0;
	if (o->min_agree) {
		char *end;
		errno = 0;
		min_agree = strtod(o->min_agree, &end);
		if (end[0] == '%' && end[1] == '\0')
			end++;
		if (!*o->min_agree || *end || errno || !(min_agree >= 0.0 && min_agree <= 100.0))
			return cli_die("verify: bad --min-agree '%s' (a percentage, 0..100)",
				       o->min_agree);
	}
	struct llgo_msg_verify req;
	client_verify_req(&req, pid, (uint32_t)seconds);
	cli_wait_extra_s = (unsigned)seconds;
	struct buf b;
	buf_init(&b);
	char message[LLGO_END_MSG_LEN];
	rc = cli_io_call(path, &req, sizeof(req), &b, message, sizeof(message));
	if (rc) {
		buf_free(&b);
		return rc;
	}
	struct llgo_verify_summary sum;
	if (b.len < sizeof(sum)) {
		buf_free(&b);
		return cli_die("malformed verify answer from llgo-heapd");
	}
	memcpy(&sum, b.data, sizeof(sum));
	fwrite(b.data + sizeof(sum), 1, b.len - sizeof(sum), stdout);
	buf_free(&b);
	if (sum.agree > sum.samples)
		return cli_die("malformed verify answer from llgo-heapd");
	double pct = sum.samples ? 100.0 * (double)sum.agree / (double)sum.samples : 0.0;
	/* printed rounded down, so that 99.96% never shows as 100.0% */
	double shown = (double)(uint64_t)(pct * 10.0) / 10.0;
	if (sum.agree == sum.samples && sum.samples)
		shown = 100.0;
	printf("verify: %llu samples, %llu agree (%.1f%%)\n", (unsigned long long)sum.samples,
	       (unsigned long long)sum.agree, shown);
	fflush(stdout);
	return pct < min_agree ? 1 : 0;
}
int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *sub = argv[1];
	if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0 || strcmp(sub, "help") == 0) {
		usage(stdout);
		return 0;
	}
	signal(SIGPIPE, SIG_IGN);
	const char *tenv = getenv("LLGO_HEAP_TIMEOUT");
	if (tenv && *tenv) {
		char *end;
		unsigned long v = strtoul(tenv, &end, 10);
		if (!*end && v > 0 && v <= 86400)
			cli_timeout_s = (unsigned)v;
	}
	struct cli_opts o;
	int rc = opts_parse(sub, argc - 2, argv + 2, &o);
	if (rc) {
		free(o.pos);
		return rc;
	}
	char sockbuf[PATH_MAX];
	const char *path = o.socket ? o.socket : client_default_socket(sockbuf, sizeof(sockbuf));
	if (o.ncmd && strcmp(sub, "run") != 0)
		rc = cli_die("%s: unexpected '--'", sub);
	else if (strcmp(sub, "run") == 0)
		rc = cli_run(&o);
	else if (strcmp(sub, "diff") == 0)
		rc = cmd_diff(&o);
	else if (!path)
		rc = cli_die("no socket: set --socket PATH, LLGO_HEAP_SOCKET or XDG_RUNTIME_DIR");
	else if (strcmp(sub, "list") == 0)
		rc = cmd_list(path, &o);
	else if (strcmp(sub, "snapshot") == 0)
		rc = cmd_snapshot(path, &o);
	else if (strcmp(sub, "top") == 0)
		rc = cmd_top(path, &o);
	else if (strcmp(sub, "rate") == 0)
		rc = cmd_rate(path, &o);
	else if (strcmp(sub, "verify") == 0)
		rc = cmd_verify(path, &o);
	else if (strcmp(sub, "attach") == 0 || strcmp(sub, "detach") == 0)
		rc = cmd_attach(path, &o, strcmp(sub, "attach") == 0);
	else
		rc = cli_die("unknown command '%s' (run, list, snapshot, top, diff, rate, verify, "
			     "attach, detach)", sub);
	free(o.pos);
	return rc;
}
