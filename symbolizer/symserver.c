// SPDX-License-Identifier: MIT
/*
 * symserver.c: llgo-heap-symbolizer, the process llgo-heapd starts to parse ELF/DWARF files for
 * one uid (agent/symbol/symhelper.c). It enters its sandbox (symjail.c) first, says READY on its
 * socket (descriptor SYMPROTO_FD), then serves LOOKUPs one at a time (shared/symproto.h):
 * files come as descriptors and are parsed by symparse.c; a debug file it needs is asked of
 * the daemon (FIND), which answers with a descriptor or none. Single-threaded. It exits when
 * the daemon closes the socket, on any malformed message, or after --idle-ms with no request
 * (status SYMPROTO_EXIT_IDLE, so the daemon knows it is no failure); it is killed when the
 * daemon (--parent-pid) dies.
 *
 *   llgo-heap-symbolizer --uid U --gid G [--idle-ms N] [--memory-mb N] [--max-files N]
 *                        [--parent-pid PID]
 *
 * Built with -DSYMSERVER_TEST_HOOKS (tests only, never installed), a lookup whose function is
 * sandbox_test_crash aborts, one in sandbox_test_hang never answers, one in
 * sandbox_test_open tries open(2) and socket(2) and aborts if either works, and one in
 * sandbox_test_lie gets an answer whose string runs past the message.
 *
 * Left to others: parsing (symparse.c), the sandbox (symjail.c), trusting the answers (the
 * daemon never does).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../shared/symproto.h"
#include "symjail.h"
#include "symparse.h"

struct symserver_file {
	uint32_t id;
	struct symparse_file *f;
};

static struct symserver_file *g_files;
static size_t g_nfiles, g_capfiles;

struct symserver_buf {
	unsigned char *p;
	size_t len, cap;
	bool failed;
};

static void symserver_put(struct symserver_buf *b, const void *data, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n > b->cap) {
		size_t nc = b->cap ? b->cap * 2 : 65536;
		while (nc < b->len + n)
			nc *= 2;
		unsigned char *p = realloc(b->p, nc);
		if (!p) {
			b->failed = true;
			return;
		}
		b->p = p;
		b->cap = nc;
	}
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

/* Any error on the socket or in a message: the daemon sees the hang-up. */
static void symserver_die(const char *what)
{
	(void)what;
	_exit(3);
}

static void symserver_write_all(const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = send(SYMPROTO_FD, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			symserver_die("send");
		c += w;
		n -= (size_t)w;
	}
}

static void symserver_send(uint32_t type, const void *body, size_t len)
{
	struct symproto_hdr h = { type, (uint32_t)len };
	symserver_write_all(&h, sizeof(h));
	if (len)
		symserver_write_all(body, len);
}

static void symserver_read_all(void *p, size_t n)
{
	char *c = p;
	while (n > 0) {
		ssize_t r = recv(SYMPROTO_FD, c, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			symserver_die("recv");
		c += r;
		n -= (size_t)r;
	}
}

/* The next message: its header, its body (malloc'd) and the descriptor it carried (or -1). */
static void *symserver_recv(struct symproto_hdr *h, int *fd)
{
	union {
		struct cmsghdr c;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { h, sizeof(*h) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	*fd = -1;
	ssize_t r;
	do
		r = recvmsg(SYMPROTO_FD, &msg, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		exit(0); /* the daemon closed the socket */
	if (msg.msg_flags & MSG_CTRUNC)
		symserver_die("descriptors");
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	if ((size_t)r < sizeof(*h))
		symserver_read_all((char *)h + r, sizeof(*h) - (size_t)r);
	if (h->len > SYMPROTO_MSG_MAX)
		symserver_die("length");
	void *body = malloc(h->len ? h->len : 1);
	if (!body)
		symserver_die("memory");
	symserver_read_all(body, h->len);
	return body;
}

/* symparse's find callback: ask the daemon, wait for its FOUND. */
static int symserver_find(void *arg, const char *name, uint32_t crc, const char *alt_build_id)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	struct symserver_buf b = { 0 };
	struct symproto_find q = { id, crc, (uint32_t)strnlen(name, SYMPROTO_STR_MAX),
				   alt_build_id ? (uint32_t)strnlen(alt_build_id, 256) : 0 };
	symserver_put(&b, &q, sizeof(q));
	symserver_put(&b, name, q.name_len);
	if (q.build_id_len)
		symserver_put(&b, alt_build_id, q.build_id_len);
	if (b.failed)
		symserver_die("memory");
	symserver_send(SYMPROTO_FIND, b.p, b.len);
	free(b.p);
	struct symproto_hdr h;
	int fd;
	struct symproto_found *a = symserver_recv(&h, &fd);
	if (h.type != SYMPROTO_FOUND || h.len != sizeof(*a) || a->id != id || (a->have != 0) != (fd >= 0))
		symserver_die("FOUND");
	free(a);
	return fd;
}

static struct symserver_file *symserver_file(uint32_t id)
{
	for (size_t i = 0; i < g_nfiles; i++)
		if (g_files[i].id == id)
			return &g_files[i];
	return NULL;
}

static void symserver_forget(uint32_t id)
{
	struct symserver_file *e = symserver_file(id);
	if (!e)
		return;
	symparse_close(e->f);
	*e = g_files[--g_nfiles];
}

/* A string's length on the wire (cut at SYMPROTO_STR_MAX), or SYMPROTO_STR_NONE. */
static uint32_t symserver_strlen(const char *s)
{
	return s ? (uint32_t)strnlen(s, SYMPROTO_STR_MAX) : SYMPROTO_STR_NONE;
}

#ifdef SYMSERVER_TEST_HOOKS
/* An ANSWER for n addresses whose first frame claims more bytes than the message holds. */
static bool symserver_test_lie(const struct symproto_lookup *q, const struct sym_frame *fr,
			       int n)
{
	if (n < 1 || !fr[0].function || strcmp(fr[0].function, "sandbox_test_lie") != 0)
		return false;
	struct {
		struct symproto_answer a;
		struct symproto_addr ad;
		struct symproto_frame pf;
		char name[8];
	} lie = { { q->id, 0, 0, q->n }, { UINT64_MAX, 1, 0 }, { 1, 1, 1u << 20, 0 }, "lie" };
	symserver_send(SYMPROTO_ANSWER, &lie, sizeof(lie));
	return true;
}

static void symserver_test_hooks(const struct sym_frame *fr, int n)
{
	for (int i = 0; i < n; i++) {
		if (fr[i].function && strcmp(fr[i].function, "sandbox_test_crash") == 0)
			abort();
		/* the filter at work: either call succeeding is a test failure, made loud */
		if (fr[i].function && strcmp(fr[i].function, "sandbox_test_open") == 0 &&
		    (open("/proc/self/status", O_RDONLY) >= 0 || socket(AF_UNIX, SOCK_STREAM, 0) >= 0))
			abort();
		while (fr[i].function && strcmp(fr[i].function, "sandbox_test_hang") == 0) {
			struct timespec ts = { 1, 0 };
			nanosleep(&ts, NULL);
		}
	}
}
#endif

static void symserver_lookup(const struct symproto_lookup *q, const uint64_t *offs, int fd)
{
	struct symproto_answer a = { q->id, 0, 0, 0 };
	if (q->open) {
		symserver_forget(q->id);
		struct symparse_file *f = symparse_open(fd, symserver_find,
							(void *)(uintptr_t)q->id);
		fd = -1;
		if (!f) {
			a.status = ENOEXEC;
		} else if (g_nfiles == g_capfiles) {
			size_t nc = g_capfiles ? g_capfiles * 2 : 64;
			struct symserver_file *t = realloc(g_files, nc * sizeof(*t));
			if (!t)
				symserver_die("memory");
			g_files = t;
			g_capfiles = nc;
		}
		if (f)
			g_files[g_nfiles++] = (struct symserver_file){ q->id, f };
	}
	if (fd >= 0)
		close(fd);
	struct symserver_file *e = a.status ? NULL : symserver_file(q->id);
	if (!e && !a.status)
		a.status = ENOENT;
	struct symserver_buf b = { 0 };
	symserver_put(&b, &a, sizeof(a));
	for (uint32_t i = 0; e && i < q->n; i++) {
		struct sym_frame fr[SYM_MAX_INLINE];
		struct symproto_addr ad = { UINT64_MAX, 0, 0 };
		int n = symparse_lookup(e->f, offs[i], fr, &ad.entry_back);
#ifdef SYMSERVER_TEST_HOOKS
		symserver_test_hooks(fr, n);
		if (symserver_test_lie(q, fr, n)) {
			free(b.p);
			return;
		}
#endif
		ad.nframes = n > 0 ? (uint32_t)n : 0;
		/* past the message's limit, the rest are left unanswered (asked again later) */
		if (b.len > SYMPROTO_MSG_MAX / 2)
			ad.nframes = UINT32_MAX;
		symserver_put(&b, &ad, sizeof(ad));
		for (uint32_t k = 0; ad.nframes != UINT32_MAX && k < ad.nframes; k++) {
			struct symproto_frame pf = { fr[k].line, fr[k].start_line,
						     symserver_strlen(fr[k].function),
						     symserver_strlen(fr[k].file) };
			symserver_put(&b, &pf, sizeof(pf));
			if (pf.function_len != SYMPROTO_STR_NONE)
				symserver_put(&b, fr[k].function, pf.function_len);
			if (pf.file_len != SYMPROTO_STR_NONE)
				symserver_put(&b, fr[k].file, pf.file_len);
		}
		a.n++;
	}
	if (e) {
		struct symparse_flags fl;
		symparse_flags(e->f, &fl);
		a.flags = (fl.functions ? SYMPROTO_HAS_FUNCTIONS : 0) |
			  (fl.filenames ? SYMPROTO_HAS_FILENAMES : 0) |
			  (fl.lines ? SYMPROTO_HAS_LINES : 0) | (fl.inlines ? SYMPROTO_HAS_INLINES : 0);
	}
	if (b.failed)
		symserver_die("memory");
	memcpy(b.p, &a, sizeof(a));
	symserver_send(SYMPROTO_ANSWER, b.p, b.len);
	free(b.p);
}

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer's exit check stops the world with clone and ptrace, which the filter
 * refuses: leaks of the helper are not checked (its memory dies with it). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_leaks=0";
}
#endif

static uint64_t symserver_arg(int argc, char **argv, const char *name, uint64_t dflt)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return strtoull(argv[i + 1], NULL, 10);
	return dflt;
}

int main(int argc, char **argv)
{
	struct symjail_limits lim = {
		.uid = (uid_t)symserver_arg(argc, argv, "--uid", getuid()),
		.gid = (gid_t)symserver_arg(argc, argv, "--gid", getgid()),
		.memory_bytes = symserver_arg(argc, argv, "--memory-mb", 4096) << 20,
		.max_files = symserver_arg(argc, argv, "--max-files", 4096),
		.parent = (pid_t)symserver_arg(argc, argv, "--parent-pid", 0),
	};
	int idle_ms = (int)symserver_arg(argc, argv, "--idle-ms", 60000);
	char why[256];
	if (symjail_enter(&lim, why, sizeof(why)) != 0) {
		fprintf(stderr, "llgo-heap-symbolizer: sandbox: %s\n", why);
		return 2;
	}
	symserver_send(SYMPROTO_READY, NULL, 0);
	for (;;) {
		struct pollfd p = { SYMPROTO_FD, POLLIN, 0 };
		int r = poll(&p, 1, idle_ms > 0 ? idle_ms : -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			exit(SYMPROTO_EXIT_IDLE);
		struct symproto_hdr h;
		int fd;
		void *body = symserver_recv(&h, &fd);
		if (h.type == SYMPROTO_LOOKUP && h.len >= sizeof(struct symproto_lookup)) {
			const struct symproto_lookup *q = body;
			if (q->n > SYMPROTO_BATCH_MAX ||
			    h.len != sizeof(*q) + (size_t)q->n * sizeof(uint64_t) ||
			    (q->open != 0) != (fd >= 0))
				symserver_die("LOOKUP");
			symserver_lookup(q, (const uint64_t *)(q + 1), fd);
		} else if (h.type == SYMPROTO_CLOSE && h.len == sizeof(struct symproto_close)) {
			symserver_forget(((const struct symproto_close *)body)->id);
		} else {
			symserver_die("message");
		}
		free(body);
	}
}
