// SPDX-License-Identifier: MIT
/*
 * cli.c: llgo-heap, the command-line client.
 *
 *   llgo-heap run [-r RATE] [-o FILE] [-f pprof|text|folded] [--unwind MODE] -- CMD [ARG...]
 *   llgo-heap list
 *   llgo-heap snapshot PID [-o FILE|-] [-f pprof|text|folded] [--allocs]
 *   llgo-heap top PID [-n N] [--inuse] [--objects]
 *   llgo-heap rate PID N
 *   llgo-heap verify PID [--seconds N] [--min-agree PERCENT]
 *
 * Every subcommand takes --socket PATH; options may come before or after the positional
 * arguments (`--` ends them; for run, what follows is the command). This file only speaks the
 * client side of shared/proto.h and starts processes; all profile work happens in llgo-heapd.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static const char *prog = "llgo-heap";

static void usage(FILE *f)
{
	fprintf(f,
		"usage: llgo-heap COMMAND [options]\n"
		"  run [-r RATE] [-o FILE] [-f pprof|text|folded] [--unwind auto|fp|dwarf] -- CMD...\n"
		"        profile CMD with a private daemon, write its profile, print top sites\n"
		"  list                          attached processes and their record counts\n"
		"  snapshot PID [-o FILE|-] [-f pprof|text|folded] [--allocs]\n"
		"  top PID [-n N] [--inuse] [--objects]\n"
		"  top PID --watch [SECONDS]     live view (keys: i a o g sort, q quit)\n"
		"  rate PID N                    set the sampling rate of a running process\n"
		"  verify PID [--seconds N] [--min-agree PERCENT]\n"
		"        compare recorded stacks with the kernel's (eBPF) for N s (default 5);\n"
		"        exit 1 when fewer than PERCENT (default 100) agree, 2 when BPF is\n"
		"        unavailable\n"
		"common options: --socket PATH (default: $LLGO_HEAP_SOCKET, else the daemon's)\n"
		"                --timeout SECONDS  give up on a daemon that does not answer\n"
		"                (default 60, or $LLGO_HEAP_TIMEOUT; verify adds its --seconds)\n");
}

static int die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 2;
}

/* How long a request may wait for the daemon (connect, send, each packet of the answer):
 * a stopped daemon must not hang the CLI. cli_wait_extra_s: added for verify's window. */
static unsigned cli_timeout_s = 60, cli_wait_extra_s;

/* ---- options --------------------------------------------------------------------------- */

struct opts {
	const char *socket;
	const char *out;
	const char *format;
	const char *rate;
	const char *seconds;   /* verify */
	const char *min_agree; /* verify */
	const char *unwind; /* run: LLGO_HEAP_UNWIND for the command */
	unsigned top_n;
	uint32_t flags;
	bool watch;
	double interval; /* --watch SECONDS */
	char **pos;  /* positional arguments */
	int npos;
	char **cmd;  /* after "--" (run) */
	int ncmd;
};

/* Options taking a value, per subcommand; anything else starting with '-' is unknown. */
static int opts_parse(const char *sub, int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->pos = calloc((size_t)argc + 1, sizeof(char *));
	if (!o->pos)
		return die("out of memory");
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
				return die("%s: option %s needs a value", sub, a);         \
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
				return die("%s: bad number of seconds for --timeout: '%s'", sub, t);
			cli_timeout_s = (unsigned)v;
		} else if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) &&
			   (strcmp(sub, "run") == 0 || strcmp(sub, "snapshot") == 0)) {
			TAKE(o->out);
		} else if ((strcmp(a, "-f") == 0 || strcmp(a, "--format") == 0) &&
			   (strcmp(sub, "run") == 0 || strcmp(sub, "snapshot") == 0)) {
			TAKE(o->format);
		} else if ((strcmp(a, "-r") == 0 || strcmp(a, "--rate") == 0) &&
			   strcmp(sub, "run") == 0) {
			TAKE(o->rate);
		} else if (strcmp(a, "--unwind") == 0 && strcmp(sub, "run") == 0) {
			TAKE(o->unwind);
			if (strcmp(o->unwind, "auto") != 0 && strcmp(o->unwind, "fp") != 0 &&
			    strcmp(o->unwind, "dwarf") != 0)
				return die("%s: --unwind takes auto, fp or dwarf, not '%s'", sub,
					   o->unwind);
		} else if ((strcmp(a, "-n") == 0 || strcmp(a, "--top") == 0) &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "run") == 0)) {
			const char *n;
			TAKE(n);
			char *end;
			unsigned long v = strtoul(n, &end, 10);
			if (*n == '\0' || *end || v == 0 || v > 100000)
				return die("%s: bad number for %s: '%s'", sub, a, n);
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
					return die("%s: bad interval for --watch: '%s' (0.1..3600 "
						   "seconds)", sub, v);
				o->interval = d;
			}
		} else if (strcmp(a, "--allocs") == 0 && !val && strcmp(sub, "snapshot") == 0) {
			o->flags |= LLGO_SNAP_ALLOCS;
		} else if (strcmp(a, "--inuse") == 0 && !val &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "snapshot") == 0)) {
			o->flags |= LLGO_SNAP_INUSE;
		} else if (strcmp(a, "--objects") == 0 && !val &&
			   (strcmp(sub, "top") == 0 || strcmp(sub, "snapshot") == 0)) {
			o->flags |= LLGO_SNAP_OBJECTS;
		} else {
			if (eq)
				*eq = '=';
			return die("%s: unknown option '%s' (see llgo-heap --help)", sub, a);
		}
#undef TAKE
	}
	return 0;
}

static int parse_format(const char *s, int *fmt)
{
	if (!s || strcmp(s, "pprof") == 0 || strcmp(s, "proto") == 0)
		*fmt = LLGO_FORMAT_PPROF;
	else if (strcmp(s, "text") == 0 || strcmp(s, "legacy") == 0)
		*fmt = LLGO_FORMAT_TEXT;
	else if (strcmp(s, "folded") == 0)
		*fmt = LLGO_FORMAT_FOLDED;
	else
		return die("unknown format '%s' (pprof, text or folded)", s);
	return 0;
}

static const char *format_suffix(int fmt)
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

static int parse_pid(const char *s, pid_t *pid)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end || errno || v <= 0 || v > INT_MAX)
		return die("bad PID '%s'", s);
	*pid = (pid_t)v;
	return 0;
}

static int parse_rate(const char *s, uint64_t *rate)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*s == '\0' || *s == '-' || *end || errno || v > LLGO_RATE_MAX)
		return die("bad rate '%s' (0 = off, 1 = every allocation, N = mean bytes, at most "
			   "%llu)", s, (unsigned long long)LLGO_RATE_MAX);
	*rate = v;
	return 0;
}

/* ---- talking to the daemon ----------------------------------------------------------- */

static const char *default_socket(char *buf, size_t len)
{
	const char *env = getenv("LLGO_HEAP_SOCKET");
	if (env && *env)
		return env;
	if (geteuid() == 0)
		return "/run/llgo-heapd/llgo-heapd.sock";
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (!xdg || !*xdg)
		return NULL;
	snprintf(buf, len, "%s/llgo-heapd.sock", xdg);
	return buf;
}

static int client_connect(const char *path, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	/* SO_SNDTIMEO bounds connect too (a full backlog of a stopped daemon) */
	struct timeval tv = { .tv_sec = (time_t)(cli_timeout_s + cli_wait_extra_s) };
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;
		close(s);
		return err == -EAGAIN || err == -EWOULDBLOCK || err == -EINPROGRESS ? -ETIMEDOUT
										   : err;
	}
	*out = s;
	return 0;
}

/* Send one request and collect the DATA packets into out until END; the END's status and
 * message are returned through status/message. */
static int client_request(const char *path, const void *req, size_t n, struct buf *out,
			  int *status, char *message, size_t mlen)
{
	int s, err = client_connect(path, &s);
	if (err)
		return err;
	err = msg_send(s, req, n, -1);
	unsigned char *pkt = malloc(LLGO_MSG_MAX);
	if (!pkt)
		err = -ENOMEM;
	while (!err) {
		ssize_t r = msg_recv(s, pkt, LLGO_MSG_MAX, NULL);
		if (r <= 0) {
			err = r < 0 ? (int)r : -ECONNRESET;
			if (err == -EAGAIN || err == -EWOULDBLOCK)
				err = -ETIMEDOUT;
			break;
		}
		struct llgo_msg_header h;
		if ((err = msg_header_check(pkt, (size_t)r, &h)) != 0)
			break;
		if (h.type == LLGO_MSG_DATA) {
			err = buf_append(out, pkt + sizeof(h), (size_t)r - sizeof(h));
		} else if (h.type == LLGO_MSG_END && (size_t)r == sizeof(struct llgo_msg_end)) {
			struct llgo_msg_end end;
			memcpy(&end, pkt, sizeof(end));
			end.message[sizeof(end.message) - 1] = '\0';
			*status = end.status;
			snprintf(message, mlen, "%s", end.message);
			break;
		} else {
			err = -EPROTO;
		}
	}
	free(pkt);
	close(s);
	return err;
}

static int daemon_error(const char *path, int err)
{
	if (err == -ENOENT || err == -ECONNREFUSED)
		return die("no llgo-heapd at %s (start it, or pass --socket PATH)", path);
	if (err == -EACCES)
		return die("cannot connect to %s: permission denied", path);
	if (err == -ETIMEDOUT)
		return die("llgo-heapd at %s did not answer within %u s (stopped or overloaded?"
			   "; --timeout SECONDS)", path, cli_timeout_s + cli_wait_extra_s);
	return die("talking to llgo-heapd at %s: %s", path, strerror(-err));
}

/* One request to the daemon, its DATA collected in out; a transport error or an END with a
 * non-zero status becomes one line on stderr (and exit status 2). message gets END's text. */
static int daemon_call(const char *path, const void *req, size_t n, struct buf *out,
		       char *message, size_t mlen)
{
	int status = 0;
	message[0] = '\0';
	int err = client_request(path, req, n, out, &status, message, mlen);
	if (err)
		return daemon_error(path, err);
	if (status)
		return die("%s", message[0] ? message : strerror(status));
	if (out->failed)
		return die("out of memory");
	return 0;
}

static int snapshot_fetch(const char *path, pid_t pid, int fmt, uint32_t flags, uint32_t top_n,
			  struct buf *out)
{
	struct llgo_msg_snapshot req;
	memset(&req, 0, sizeof(req));
	msg_header_init(&req.h, LLGO_MSG_SNAPSHOT, sizeof(req));
	req.pid = (uint32_t)pid;
	req.format = (uint32_t)fmt;
	req.flags = flags;
	req.top_n = top_n;
	char message[LLGO_END_MSG_LEN];
	return daemon_call(path, &req, sizeof(req), out, message, sizeof(message));
}

static int list_fetch(const char *path, struct buf *out)
{
	struct llgo_msg_header req;
	msg_header_init(&req, LLGO_MSG_LIST, sizeof(req));
	char message[LLGO_END_MSG_LEN];
	int rc = daemon_call(path, &req, sizeof(req), out, message, sizeof(message));
	if (!rc && out->len % sizeof(struct llgo_list_entry))
		return die("malformed list answer from llgo-heapd");
	return rc;
}

static int write_file(const char *file, const struct buf *b)
{
	if (strcmp(file, "-") == 0) {
		if (fwrite(b->data, 1, b->len, stdout) != b->len || fflush(stdout) != 0)
			return die("writing to stdout: %s", strerror(errno));
		return 0;
	}
	/* FILE exists and is not a regular file (a device such as /dev/null, a FIFO, a tty):
	 * write it in place. A temporary and a rename would replace the device itself with a
	 * regular file (run as root, /dev is writable). No O_CREAT and O_NOFOLLOW: only what
	 * lstat saw is opened; if it became a regular file meanwhile, the temporary path below
	 * is taken. A symlink to something other than a regular file (/dev/stdout) is refused:
	 * following it could write through a link another user planted, and renaming over it
	 * would destroy it; -o - writes to stdout. */
	struct stat ls;
	if (lstat(file, &ls) == 0) {
		if (S_ISLNK(ls.st_mode)) {
			struct stat ts;
			if (stat(file, &ts) == 0 && !S_ISREG(ts.st_mode))
				return die("cannot write %s: a symlink to something other than a "
					   "regular file is neither followed nor replaced (-o - "
					   "writes to stdout)",
					   file);
		} else if (!S_ISREG(ls.st_mode)) {
			int fd = open(file, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
			if (fd < 0)
				return die("cannot write %s: %s", file, strerror(errno));
			struct stat fs;
			if (fstat(fd, &fs) != 0 || S_ISREG(fs.st_mode)) {
				close(fd); /* replaced meanwhile: the temporary path below */
			} else {
				size_t off = 0;
				while (off < b->len) {
					ssize_t w = write(fd, b->data + off, b->len - off);
					if (w < 0 && errno == EINTR)
						continue;
					if (w <= 0) {
						int e = w < 0 ? errno : EIO;
						close(fd);
						return die("cannot write %s: %s", file, strerror(e));
					}
					off += (size_t)w;
				}
				if (close(fd) != 0 && errno != EINTR)
					return die("cannot write %s: %s", file, strerror(errno));
				return 0;
			}
		}
	}
	/* Write a temporary file and rename it, so a full disk never leaves half a profile
	 * under the requested name. The temporary name is unpredictable and created with
	 * O_EXCL (mkostemp), which never follows a symlink another user planted in the folder
	 * (run as root, a predictable name would write through it); rename replaces a link at
	 * FILE itself, never its target. */
	char tmp[PATH_MAX];
	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", file) >= (int)sizeof(tmp))
		return die("%s: path too long", file);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return die("cannot write %s: %s", file, strerror(errno));
	mode_t um = umask(0);
	umask(um);
	if (fchmod(fd, 0666 & ~um) != 0) { /* what fopen would have made */
		int e = errno;
		close(fd);
		unlink(tmp);
		return die("cannot write %s: %s", file, strerror(e));
	}
	FILE *f = fdopen(fd, "wb");
	if (!f) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return die("cannot write %s: %s", file, strerror(e));
	}
	size_t w = fwrite(b->data, 1, b->len, f);
	int err = (w != b->len || fflush(f) != 0 || fsync(fileno(f)) != 0) ? errno : 0;
	if (fclose(f) != 0 && !err)
		err = errno;
	if (!err && rename(tmp, file) != 0)
		err = errno;
	if (err) {
		unlink(tmp);
		return die("cannot write %s: %s", file, strerror(err ? err : EIO));
	}
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
		       e.pid, e.state == LLGO_PROC_LIVE ? "live" : "exited",
		       (unsigned long long)e.rate, (unsigned long long)e.sampled,
		       (unsigned long long)e.delivered, (unsigned long long)e.dropped,
		       (unsigned long long)e.corrupt, (unsigned long long)e.buckets,
		       unwind_mode_name(e.unwind_mode), (unsigned long long)e.truncated, ver, e.comm);
		if (e.budget_flags) { /* the uid's budgets llgo-heapd hit (llgo-heapd --help) */
			static const char *const names[] = { "connections", "processes", "rings",
							     "ring memory", "bucket memory",
							     "unread answers" };
			printf("%-8s over its user's budget:", "");
			const char *sep = " ";
			for (unsigned k = 0; k < 6; k++) {
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

static int cmd_list(const char *path, struct opts *o)
{
	if (o->npos)
		return die("list: unexpected argument '%s'", o->pos[0]);
	struct buf b;
	buf_init(&b);
	int rc = list_fetch(path, &b);
	if (!rc)
		print_list(&b);
	buf_free(&b);
	return rc;
}

static int cmd_snapshot(const char *path, struct opts *o)
{
	if (o->npos != 1)
		return die("snapshot: expected one PID (llgo-heap snapshot PID [-o FILE|-])");
	pid_t pid;
	int fmt, rc;
	if ((rc = parse_pid(o->pos[0], &pid)) || (rc = parse_format(o->format, &fmt)))
		return rc;
	char def[64];
	snprintf(def, sizeof(def), "llgo-heap.%d.%s", (int)pid, format_suffix(fmt));
	struct buf b;
	buf_init(&b);
	rc = snapshot_fetch(path, pid, fmt, o->flags, 0, &b);
	if (!rc)
		rc = write_file(o->out ? o->out : def, &b);
	if (!rc && !(o->out && strcmp(o->out, "-") == 0))
		fprintf(stderr, "%s: wrote %s (%zu bytes)\n", prog, o->out ? o->out : def, b.len);
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
	if (list_fetch(path, &list) == 0) {
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
	return snapshot_fetch(path, pid, LLGO_FORMAT_SITES, 0, 0, out) ? -EIO : 0;
}

static int cmd_top(const char *path, struct opts *o)
{
	if (o->npos != 1)
		return die("top: expected one PID");
	pid_t pid;
	int rc = parse_pid(o->pos[0], &pid);
	if (rc)
		return rc;
	if (o->watch)
		return watch_run(pid, o->interval, watch_fetch, (void *)path) ? 1 : 0;
	struct buf b;
	buf_init(&b);
	rc = snapshot_fetch(path, pid, LLGO_FORMAT_TOP, o->flags, o->top_n, &b);
	if (!rc)
		fwrite(b.data, 1, b.len, stdout);
	buf_free(&b);
	return rc;
}

static int cmd_rate(const char *path, struct opts *o)
{
	if (o->npos != 2)
		return die("rate: expected PID and RATE (llgo-heap rate PID N)");
	pid_t pid;
	uint64_t rate;
	int rc;
	if ((rc = parse_pid(o->pos[0], &pid)) || (rc = parse_rate(o->pos[1], &rate)))
		return rc;
	struct llgo_msg_set_rate req;
	memset(&req, 0, sizeof(req));
	msg_header_init(&req.h, LLGO_MSG_SET_RATE, sizeof(req));
	req.pid = (uint32_t)pid;
	req.rate = rate;
	struct buf b;
	buf_init(&b);
	char message[LLGO_END_MSG_LEN];
	rc = daemon_call(path, &req, sizeof(req), &b, message, sizeof(message));
	buf_free(&b);
	if (!rc)
		printf("%s\n", message);
	return rc;
}

/* ---- verify ---------------------------------------------------------------------------- */

/* llgo-heap verify: the daemon collects; we print its report and the verdict. Exit 0 when
 * at least --min-agree percent of the matched samples agree, 1 when fewer do (or none was
 * matched and the threshold is above 0), 2 on any error (BPF unavailable, no such process). */
static int cmd_verify(const char *path, struct opts *o)
{
	if (o->npos != 1)
		return die("verify: expected one PID (llgo-heap verify PID [--seconds N] "
			   "[--min-agree PERCENT])");
	pid_t pid;
	int rc = parse_pid(o->pos[0], &pid);
	if (rc)
		return rc;
	unsigned long seconds = 5;
	if (o->seconds) {
		char *end;
		errno = 0;
		seconds = strtoul(o->seconds, &end, 10);
		if (!*o->seconds || *end || errno || seconds < 1 || seconds > LLGO_VERIFY_MAX_SECONDS)
			return die("verify: bad --seconds '%s' (1..%u)", o->seconds,
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
			return die("verify: bad --min-agree '%s' (a percentage, 0..100)",
				   o->min_agree);
	}
	struct llgo_msg_verify req;
	memset(&req, 0, sizeof(req));
	msg_header_init(&req.h, LLGO_MSG_VERIFY, sizeof(req));
	req.pid = (uint32_t)pid;
	req.seconds = (uint32_t)seconds;
	cli_wait_extra_s = (unsigned)seconds;
	struct buf b;
	buf_init(&b);
	char message[LLGO_END_MSG_LEN];
	rc = daemon_call(path, &req, sizeof(req), &b, message, sizeof(message));
	if (rc) {
		buf_free(&b);
		return rc;
	}
	struct llgo_verify_summary sum;
	if (b.len < sizeof(sum)) {
		buf_free(&b);
		return die("malformed verify answer from llgo-heapd");
	}
	memcpy(&sum, b.data, sizeof(sum));
	fwrite(b.data + sizeof(sum), 1, b.len - sizeof(sum), stdout);
	buf_free(&b);
	if (sum.agree > sum.samples)
		return die("malformed verify answer from llgo-heapd");
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

/* ---- run ------------------------------------------------------------------------------- */

/* Directory of this executable: the daemon is beside it, the shim in ../lib. */
static int self_dir(char *dir, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", dir, len - 1);
	if (n <= 0)
		return -errno;
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	return 0;
}

static int wait_for_socket(const char *path, pid_t daemon_pid)
{
	for (int i = 0; i < 1000; i++) {
		int s;
		if (client_connect(path, &s) == 0) {
			close(s);
			return 0;
		}
		int st;
		if (waitpid(daemon_pid, &st, WNOHANG) == daemon_pid)
			return -ECHILD;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

static pid_t spawn_daemon(const char *dir, const char *sock, const char *log)
{
	char daemon[PATH_MAX + 16];
	snprintf(daemon, sizeof(daemon), "%s/llgo-heapd", dir);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0)
		dup2(null, 0);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	/* The private daemon must never profile itself. */
	unsetenv("LD_PRELOAD");
	execl(daemon, "llgo-heapd", "--socket", sock, "--foreground", (char *)NULL);
	dprintf(2, "llgo-heap: cannot run %s: %s\n", daemon, strerror(errno));
	_exit(127);
}

static void stop_daemon(pid_t pid)
{
	int st;
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < 400; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

static pid_t spawn_command(char **cmd, const char *shim, const char *sock, const char *rate,
			   const char *unwind)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	const char *old = getenv("LD_PRELOAD");
	char *pre;
	if (old && *old) {
		if (asprintf(&pre, "%s:%s", shim, old) < 0)
			_exit(127);
	} else {
		pre = (char *)shim;
	}
	setenv("LD_PRELOAD", pre, 1);
	setenv("LLGO_HEAP_SOCKET", sock, 1);
	if (rate)
		setenv("LLGO_HEAP_RATE", rate, 1);
	if (unwind)
		setenv("LLGO_HEAP_UNWIND", unwind, 1);
	signal(SIGINT, SIG_DFL);
	signal(SIGQUIT, SIG_DFL);
	execvp(cmd[0], cmd);
	int err = errno;
	dprintf(2, "llgo-heap: cannot run %s: %s\n", cmd[0], strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

static void print_log(const char *log)
{
	FILE *f = fopen(log, "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "llgo-heapd: %s", line);
	fclose(f);
}

static int cmd_run(struct opts *o)
{
	if (o->npos)
		return die("run: unexpected argument '%s' before '--'", o->pos[0]);
	if (o->ncmd == 0)
		return die("run: no command (llgo-heap run [-r RATE] [-o FILE] -- CMD [ARG...])");
	int fmt, rc;
	if ((rc = parse_format(o->format, &fmt)))
		return rc;
	uint64_t rate = 0;
	if (o->rate && (rc = parse_rate(o->rate, &rate)))
		return rc;
	if (o->socket)
		return die("run: --socket is chosen by run itself (a private daemon)");

	char dir[PATH_MAX], shim[PATH_MAX + 32];
	if (self_dir(dir, sizeof(dir)) != 0)
		return die("run: cannot find my own executable");
	snprintf(shim, sizeof(shim), "%s/../lib/libllgoheap.so", dir);
	char *real = realpath(shim, NULL);
	if (!real)
		return die("run: shim not found at %s", shim);
	snprintf(shim, sizeof(shim), "%s", real);
	free(real);

	const char *tmpbase = getenv("TMPDIR");
	char tmpl[PATH_MAX];
	snprintf(tmpl, sizeof(tmpl), "%s/llgo-heap-run.XXXXXX",
		 tmpbase && *tmpbase ? tmpbase : "/tmp");
	if (!mkdtemp(tmpl))
		return die("run: cannot create a temporary folder: %s", strerror(errno));
	char sock[PATH_MAX + 32], log[PATH_MAX + 32];
	snprintf(sock, sizeof(sock), "%s/heapd.sock", tmpl);
	snprintf(log, sizeof(log), "%s/heapd.log", tmpl);

	int status = 0, exit_code = 1;
	pid_t child = -1;
	pid_t dpid = spawn_daemon(dir, sock, log);
	if (dpid < 0) {
		rc = die("run: fork: %s", strerror(errno));
		goto out;
	}
	if ((rc = wait_for_socket(sock, dpid)) != 0) {
		print_log(log);
		rc = die("run: private llgo-heapd did not start (%s)", strerror(-rc));
		goto out;
	}

	/* Like system(3): the terminal's signals go to the command; we wait for it. */
	struct sigaction ign = { .sa_handler = SIG_IGN }, old_int, old_quit;
	sigaction(SIGINT, &ign, &old_int);
	sigaction(SIGQUIT, &ign, &old_quit);
	child = spawn_command(o->cmd, shim, sock, o->rate, o->unwind);
	if (child < 0) {
		rc = die("run: fork: %s", strerror(errno));
		goto out;
	}
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGQUIT, &old_quit, NULL);
	if (WIFEXITED(status))
		exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		exit_code = 128 + WTERMSIG(status);

	/* Every attached process of this run: the command and what it forked or exec'd. */
	struct buf list;
	buf_init(&list);
	if (list_fetch(sock, &list) != 0) {
		buf_free(&list);
		rc = 1;
		goto out;
	}
	size_t nproc = list.len / sizeof(struct llgo_list_entry);
	bool found = false;
	for (size_t i = 0; i < nproc; i++) {
		struct llgo_list_entry e;
		memcpy(&e, list.data + i * sizeof(e), sizeof(e));
		e.comm[sizeof(e.comm) - 1] = '\0';
		bool main_proc = (pid_t)e.pid == child;
		char file[PATH_MAX];
		if (o->out && main_proc)
			snprintf(file, sizeof(file), "%s", o->out);
		else if (o->out)
			snprintf(file, sizeof(file), "%s.%u", o->out, e.pid);
		else
			snprintf(file, sizeof(file), "llgo-heap.%u.%s", e.pid, format_suffix(fmt));
		struct buf prof, top, leaks;
		buf_init(&prof);
		buf_init(&top);
		buf_init(&leaks);
		rc = snapshot_fetch(sock, (pid_t)e.pid, fmt, 0, 0, &prof);
		if (!rc)
			rc = write_file(file, &prof);
		if (!rc && main_proc)
			rc = snapshot_fetch(sock, (pid_t)e.pid, LLGO_FORMAT_TOP, 0,
					    o->top_n ? o->top_n : 10, &top);
		/* The leak report: sites whose memory was still in use when the process exited
		 * (the profile's inuse_* values), like heaptrack's "MEMORY LEAKS". */
		if (!rc && main_proc)
			rc = snapshot_fetch(sock, (pid_t)e.pid, LLGO_FORMAT_TOP, LLGO_SNAP_INUSE,
					    o->top_n ? o->top_n : 10, &leaks);
		if (!rc) {
			fprintf(stderr, "%s: pid %u (%s): wrote %s\n", prog, e.pid, e.comm, file);
			if (main_proc) {
				fwrite(top.data, 1, top.len, stderr);
				fprintf(stderr, "%s: still in use at exit (never freed):\n", prog);
				fwrite(leaks.data, 1, leaks.len, stderr);
			}
		}
		found |= main_proc;
		buf_free(&prof);
		buf_free(&top);
		buf_free(&leaks);
		if (rc)
			break;
	}
	buf_free(&list);
	if (!rc && !found && exit_code != 126 && exit_code != 127)
		fprintf(stderr,
			"%s: %s was not profiled (a static binary, or the shim could not attach)\n",
			prog, o->cmd[0]);
out:
	stop_daemon(dpid);
	unlink(sock);
	unlink(log);
	rmdir(tmpl);
	if (child < 0)
		return rc ? rc : 1;
	/* The command's status wins; a profile we could not write is reported above. */
	return exit_code ? exit_code : (rc ? 1 : 0);
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
	struct opts o;
	int rc = opts_parse(sub, argc - 2, argv + 2, &o);
	if (rc) {
		free(o.pos);
		return rc;
	}
	char sockbuf[PATH_MAX];
	const char *path = o.socket ? o.socket : default_socket(sockbuf, sizeof(sockbuf));
	if (o.ncmd && strcmp(sub, "run") != 0)
		rc = die("%s: unexpected '--'", sub);
	else if (strcmp(sub, "run") == 0)
		rc = cmd_run(&o);
	else if (!path)
		rc = die("no socket: set --socket PATH, LLGO_HEAP_SOCKET or XDG_RUNTIME_DIR");
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
	else
		rc = die("unknown command '%s' (run, list, snapshot, top, rate, verify)", sub);
	free(o.pos);
	return rc;
}
