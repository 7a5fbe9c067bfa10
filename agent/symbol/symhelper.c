// SPDX-License-Identifier: MIT
/*
 * symhelper.c: the sandboxed symbolizer processes, one per profiled uid, as the daemon sees
 * them: started, asked, watched, restarted.
 *
 * A helper is llgo-heap-symbolizer (symbolizer/symserver.c), found next to the running binary
 * (DIR/llgo-heap-symbolizer, then DIR/../bin/llgo-heap-symbolizer, DIR being where
 * /proc/self/exe is; LLGO_HEAP_SYMBOLIZER in the daemon's environment overrides), spawned with
 * posix_spawn (no fork of the threaded daemon) holding one end of a socketpair as descriptor
 * SYMPROTO_FD and nothing else of ours (symspawn.c starts it, from a thread of its own). When
 * the daemon runs as root it runs as the profiled uid, so a file one user crafted can at worst
 * take over a process holding that user's own rights, and one user's helper never answers for
 * another user's profiles; for the processes of root, system users and nobody, uids other
 * parties share, it runs as a uid of its own that no other process has (symuid.c), so none may
 * stop, kill, trace or read it. It drops everything, sets its parent-death signal (SIGKILL:
 * it dies with the daemon) and installs its seccomp filter before it says READY
 * (symbolizer/symjail.c). Files reach it as descriptors (SCM_RIGHTS) the daemon opened; debug
 * files it asks for are found by symfile_find_debug() (as f->find_debug: symfile.c is above
 * this file) and sent the same way.
 *
 * Failures. Every read of the helper has a deadline (SYMHELPER_TIMEOUT_MS per message; the
 * time the daemon spends finding a debug file does not count). A helper that crashes, hangs,
 * is killed, or sends anything malformed is killed (SIGKILL) and reaped, logged once, and
 * started again only after a backoff (250 ms, doubling to 60 s, reset by an answer); until
 * then lookups fail at once (-EAGAIN) and the addresses show unsymbolized. A helper that
 * stopped because it was idle (SYMHELPER_IDLE_MS without a request; exit status
 * SYMPROTO_EXIT_IDLE) is no failure: the next request starts a new one. Nor is one that was
 * stopped (SIGSTOP: only its own uid's processes may, and root): it is killed and reaped, and
 * the next request starts a new one at once; found stopped in the middle of a request (it is
 * looked at every SYMHELPER_STOP_CHECK_MS of waiting) it costs that request's addresses their
 * names this time only, not the deadline. Its memory is capped (RLIMIT_AS,
 * SYMHELPER_MEMORY_MB) and so are its descriptors. When the server stops, every helper is
 * killed and reaped (symhelper_stop_all), stopped or not.
 *
 * Threads: one request at a time per helper, under its lock (held across the exchange, up to
 * the deadline); files to forget are queued under a second lock, so dropping a file never
 * waits for a request. Lock order: helper lock, then a symfile's. Every user's rings wait
 * while the drain thread (symhelper_no_wait) waits, so it waits at most
 * SYMHELPER_NO_WAIT_LOCK_MS for a helper in use, never starts one that is backing off, gives
 * a request SYMHELPER_NO_WAIT_MS, not the full deadline, and after a failure does not ask
 * that uid's helper for SYMHELPER_NO_WAIT_BAN_MS (a user whose file hangs its helper can
 * hold the drain thread 5 s per 10 min). Helpers that stopped idle are reaped
 * after each request (of any uid).
 *
 * About 700 lines: starting, framing, the exchange and recovery all act on struct
 * symhelper under its lock; split, each part would reach into the others'.
 *
 * Left to others: the helper's own code (symbolizer/), what the answers mean and the memo
 * (symbolize.c), the files (symfile.c), the uid a helper runs as (symuid.c), starting and
 * ending its process (symspawn.c).
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../common/log.h"
#include "../../shared/frame.h"
#include "../../shared/symproto.h"
#include "symfile.h"
#include "symuid.h"

#define SYMHELPER_TIMEOUT_MS 30000
#define SYMHELPER_IDLE_MS 60000
#define SYMHELPER_MEMORY_MB 4096
#define SYMHELPER_MAX_FILES 4096
#define SYMHELPER_BACKOFF_MIN_MS 250
#define SYMHELPER_BACKOFF_MAX_MS 60000
#define SYMHELPER_NOBODY 65534
/* While waiting on a helper, how often it is looked at for having been stopped. */
#define SYMHELPER_STOP_CHECK_MS 200
/* What the exchange returns for a helper found stopped (not the file's fault). */
#define SYMHELPER_STOPPED (-ESRCH)
/* The drain thread (symhelper_no_wait): how long it waits for a helper another thread uses,
 * its deadline, and how long a helper that failed it is not asked by it again. */
#define SYMHELPER_NO_WAIT_LOCK_MS 2000
#define SYMHELPER_NO_WAIT_MS 5000
#define SYMHELPER_NO_WAIT_BAN_MS (10 * 60 * 1000)

/* An id to forget, and the helper generation it belongs to (older ones died with theirs). */
struct symhelper_close {
	uint32_t id;
	uint64_t gen;
};

struct symhelper {
	struct symhelper *next; /* g_helpers, under g_lock; never freed */
	uid_t uid;
	pthread_mutex_t lock; /* everything below but the queue of ids to forget */
	pid_t pid;            /* 0: none running (also read without the lock: symhelper_pid) */
	int sock;
	uint64_t gen; /* bumped at each start: files sent to an older one are sent again */
	uint32_t next_id;
	unsigned backoff_ms;
	int64_t retry_at_ms;
	int64_t no_wait_ban_ms; /* the drain thread does not ask before this */
	pthread_mutex_t close_lock;
	struct symhelper_close *closes; /* ids to forget, sent before the next request */
	size_t nclose, capclose;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct symhelper *g_helpers;
/* This thread must not wait on a helper (the drain thread: every user's rings wait on it). */
static __thread bool g_no_wait;
static unsigned g_timeout_ms = SYMHELPER_TIMEOUT_MS;
static unsigned g_backoff_min_ms = SYMHELPER_BACKOFF_MIN_MS;

static int64_t symhelper_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct symhelper *symhelper_of(uid_t uid)
{
	pthread_mutex_lock(&g_lock);
	struct symhelper *h = g_helpers;
	while (h && h->uid != uid)
		h = h->next;
	if (!h && (h = calloc(1, sizeof(*h))) != NULL) {
		h->uid = uid;
		h->sock = -1;
		pthread_mutex_init(&h->lock, NULL);
		pthread_mutex_init(&h->close_lock, NULL);
		h->next = g_helpers;
		g_helpers = h;
	}
	pthread_mutex_unlock(&g_lock);
	return h;
}

/* ---- Messages ------------------------------------------------------------------------- */

/* Wait until h's socket is ready for events, or the deadline: 0, or -ETIMEDOUT,
 * SYMHELPER_STOPPED, -errno. */
static int symhelper_wait(const struct symhelper *h, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - symhelper_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { h->sock, events, 0 };
		int r = poll(&p, 1, left > SYMHELPER_STOP_CHECK_MS ? SYMHELPER_STOP_CHECK_MS
								   : (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r == 0 && symspawn_stopped(h->pid))
			return SYMHELPER_STOPPED;
	}
}

static int symhelper_read(const struct symhelper *h, void *buf, size_t n, int64_t deadline)
{
	char *p = buf;
	while (n > 0) {
		int err = symhelper_wait(h, POLLIN, deadline);
		if (err)
			return err;
		ssize_t r = recv(h->sock, p, n, MSG_DONTWAIT);
		if (r == 0)
			return -EPIPE;
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* The next message: header and body (malloc'd, *body), within the deadline. */
static int symhelper_recv(const struct symhelper *h, struct symproto_hdr *hd, void **body,
			  int64_t deadline)
{
	*body = NULL;
	int err = symhelper_read(h, hd, sizeof(*hd), deadline);
	if (err)
		return err;
	if (hd->len > SYMPROTO_MSG_MAX)
		return -EPROTO;
	if (!(*body = malloc(hd->len ? hd->len : 1)))
		return -ENOMEM;
	err = symhelper_read(h, *body, hd->len, deadline);
	if (err) {
		free(*body);
		*body = NULL;
	}
	return err;
}

/* Send one message (with pass_fd attached when >= 0) within the deadline. */
static int symhelper_send(const struct symhelper *h, uint32_t type, const void *a, size_t alen,
			  const void *b, size_t blen, int pass_fd, int64_t deadline)
{
	struct symproto_hdr hd = { type, (uint32_t)(alen + blen) };
	struct iovec iov[3] = { { &hd, sizeof(hd) }, { (void *)a, alen }, { (void *)b, blen } };
	union llgo_frame_fd_control ctl;
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 3 };
	llgo_frame_attach_fd(&msg, &ctl, pass_fd);
	size_t left = sizeof(hd) + alen + blen;
	while (left > 0) {
		int err = symhelper_wait(h, POLLOUT, deadline);
		if (err)
			return err;
		ssize_t w = sendmsg(h->sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		/* the descriptor went with the first byte */
		msg.msg_control = NULL;
		msg.msg_controllen = 0;
		left -= (size_t)w;
		for (size_t done = (size_t)w; done > 0 && msg.msg_iovlen > 0;) {
			size_t k = done < msg.msg_iov->iov_len ? done : msg.msg_iov->iov_len;
			msg.msg_iov->iov_base = (char *)msg.msg_iov->iov_base + k;
			msg.msg_iov->iov_len -= k;
			done -= k;
			if (msg.msg_iov->iov_len == 0) {
				msg.msg_iov++;
				msg.msg_iovlen--;
			}
		}
	}
	return 0;
}

/* ---- The process ---------------------------------------------------------------------- */

/* Where llgo-heap-symbolizer is (see the top of this file), into path[cap]. */
static int symhelper_path(char *path, size_t cap)
{
	const char *env = secure_getenv("LLGO_HEAP_SYMBOLIZER");
	if (env && *env) {
		snprintf(path, cap, "%s", env);
		return 0;
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -ENOENT;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	snprintf(path, cap, "%s/llgo-heap-symbolizer", exe);
	if (access(path, X_OK) == 0)
		return 0;
	snprintf(path, cap, "%s/../bin/llgo-heap-symbolizer", exe);
	return access(path, X_OK) == 0 ? 0 : -ENOENT;
}

/* Kill and reap the helper; returns its wait status (or -1). The socket is closed first: a
 * helper the daemon may not kill (no CAP_KILL) then exits at its next read. */
static int symhelper_reap(struct symhelper *h, bool kill_it)
{
	if (h->sock >= 0)
		close(h->sock);
	h->sock = -1;
	int st = h->pid > 0 ? symspawn_end(h->pid, kill_it) : -1;
	__atomic_store_n(&h->pid, 0, __ATOMIC_RELAXED);
	return st;
}

static void symhelper_describe(int st, char *buf, size_t cap)
{
	if (st != -1 && WIFSIGNALED(st))
		snprintf(buf, cap, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
	else if (st != -1 && WIFEXITED(st))
		snprintf(buf, cap, "exited with status %d", WEXITSTATUS(st));
	else
		snprintf(buf, cap, "gone");
}

/* No new helper for a while: 250 ms, doubling up to 60 s, until one answers. */
static void symhelper_backoff(struct symhelper *h)
{
	h->backoff_ms = h->backoff_ms ? h->backoff_ms * 2 : g_backoff_min_ms;
	if (h->backoff_ms > SYMHELPER_BACKOFF_MAX_MS)
		h->backoff_ms = SYMHELPER_BACKOFF_MAX_MS;
	h->retry_at_ms = symhelper_now_ms() + h->backoff_ms;
}

/* The helper failed (why: -errno of the exchange): killed, reaped, logged, backed off. */
static void symhelper_fail(struct symhelper *h, int why, const char *doing)
{
	pid_t pid = h->pid;
	/* a helper that timed out or spoke wrongly is killed; one that hung up is reaped */
	int st = symhelper_reap(h, why != -EPIPE);
	char how[96];
	symhelper_describe(st, how, sizeof(how));
	symhelper_backoff(h);
	log_warn("symbolizer for uid %u (pid %d) %s: %s, %s; its addresses are shown "
		 "unsymbolized, restarting in %u ms",
		 (unsigned)h->uid, (int)pid, doing,
		 why == -ETIMEDOUT ? "timed out" : why == -EPIPE ? "hung up"
			: why == SYMHELPER_STOPPED ? "was stopped (SIGSTOP)" : strerror(-why), how,
		 h->backoff_ms);
}

static int symhelper_spawn(struct symhelper *h)
{
	char path[PATH_MAX + 64];
	if (symhelper_path(path, sizeof(path)) != 0) {
		h->backoff_ms = SYMHELPER_BACKOFF_MAX_MS;
		h->retry_at_ms = symhelper_now_ms() + h->backoff_ms;
		log_warn("symbolizer: llgo-heap-symbolizer not found next to the daemon (set "
			 "LLGO_HEAP_SYMBOLIZER); frames are shown unsymbolized");
		return -ENOENT;
	}
	/* as root: the profiled uid (nobody's group), or a uid (and group) of its own */
	unsigned uid = (unsigned)getuid(), gid = (unsigned)getgid();
	if (geteuid() == 0) {
		uid_t own;
		uid = (unsigned)h->uid;
		gid = SYMHELPER_NOBODY;
		if (symuid_isolated(h->uid)) {
			if (symuid_pick(h->uid, &own) != 0) {
				h->backoff_ms = SYMHELPER_BACKOFF_MAX_MS;
				h->retry_at_ms = symhelper_now_ms() + h->backoff_ms;
				return -EAGAIN;
			}
			uid = gid = (unsigned)own;
		}
	}
	char a_uid[16], a_gid[16], a_idle[16], a_mem[16], a_files[16], a_parent[16];
	snprintf(a_uid, sizeof(a_uid), "%u", uid);
	snprintf(a_gid, sizeof(a_gid), "%u", gid);
	snprintf(a_idle, sizeof(a_idle), "%u", SYMHELPER_IDLE_MS);
	snprintf(a_mem, sizeof(a_mem), "%u", SYMHELPER_MEMORY_MB);
	snprintf(a_files, sizeof(a_files), "%u", SYMHELPER_MAX_FILES);
	snprintf(a_parent, sizeof(a_parent), "%d", (int)getpid());
	char *argv[] = { path, "--uid", a_uid, "--gid", a_gid, "--idle-ms", a_idle, "--memory-mb",
			 a_mem, "--max-files", a_files, "--parent-pid", a_parent, NULL };
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return -errno;
	/* the child's end above SYMPROTO_FD, so dup2 onto it clears close-on-exec */
	int child = fcntl(sv[1], F_DUPFD_CLOEXEC, SYMPROTO_FD + 1);
	close(sv[1]);
	pid_t pid = child < 0 ? -errno : symspawn_start(path, argv, child);
	int err = pid < 0 ? (int)-pid : 0;
	if (child >= 0)
		close(child);
	if (err) {
		close(sv[0]);
		symhelper_backoff(h);
		log_warn("symbolizer: cannot start %s: %s; frames are shown unsymbolized, "
			 "retrying in %u ms", path, strerror(err), h->backoff_ms);
		return -err;
	}
	__atomic_store_n(&h->pid, pid, __ATOMIC_RELAXED);
	h->sock = sv[0];
	h->gen++;
	/* READY: it is sandboxed (a helper that could not be says why on stderr and exits) */
	struct symproto_hdr hd;
	void *body;
	err = symhelper_recv(h, &hd, &body, symhelper_now_ms() + g_timeout_ms);
	free(body);
	if (!err && hd.type != SYMPROTO_READY)
		err = -EPROTO;
	if (err)
		symhelper_fail(h, err, "starting");
	return err;
}

/* A helper that hung up between requests: reaped, and logged unless it stopped idle. */
static void symhelper_reap_hung_up(struct symhelper *h)
{
	int st = symhelper_reap(h, true);
	if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == SYMPROTO_EXIT_IDLE)
		return;
	char how[96];
	symhelper_describe(st, how, sizeof(how));
	log_warn("symbolizer for uid %u stopped between requests: %s", (unsigned)h->uid, how);
}

/* A helper found stopped (SIGSTOP) between or during requests: killed and reaped, logged; no
 * backoff (the next request starts a new one), and no fault of the file it was asked about. */
static void symhelper_reap_stopped(struct symhelper *h)
{
	pid_t pid = h->pid;
	symhelper_reap(h, true);
	log_warn("symbolizer for uid %u (pid %d) was stopped (SIGSTOP): killed; the next "
		 "request starts another", (unsigned)h->uid, (int)pid);
}

/* A running helper, started if need be; -EAGAIN while backing off. */
static int symhelper_ready(struct symhelper *h)
{
	if (h->pid > 0 && symspawn_stopped(h->pid))
		symhelper_reap_stopped(h);
	if (h->pid > 0) {
		/* readable while idle: it hung up (stopped idle, or died) */
		struct pollfd p = { h->sock, POLLIN, 0 };
		if (poll(&p, 1, 0) == 0)
			return 0;
		symhelper_reap_hung_up(h);
	}
	if (h->retry_at_ms && symhelper_now_ms() < h->retry_at_ms)
		return -EAGAIN;
	return symhelper_spawn(h);
}

/* Send the queued CLOSEs that belong to the running helper. */
static int symhelper_flush_closes(struct symhelper *h, int64_t deadline)
{
	pthread_mutex_lock(&h->close_lock);
	int err = 0;
	for (size_t i = 0; i < h->nclose && !err; i++) {
		struct symproto_close c = { h->closes[i].id };
		if (h->closes[i].gen == h->gen)
			err = symhelper_send(h, SYMPROTO_CLOSE, &c, sizeof(c), NULL, 0, -1,
					     deadline);
	}
	h->nclose = 0;
	pthread_mutex_unlock(&h->close_lock);
	return err;
}

void symhelper_forget(struct symfile *f)
{
	if (!f->helper_gen)
		return;
	struct symhelper *h = symhelper_of(f->uid);
	if (!h)
		return;
	pthread_mutex_lock(&h->close_lock);
	if (h->nclose == h->capclose) {
		size_t nc = h->capclose ? h->capclose * 2 : 64;
		struct symhelper_close *t = realloc(h->closes, nc * sizeof(*t));
		if (t) {
			h->closes = t;
			h->capclose = nc;
		}
	}
	if (h->nclose < h->capclose)
		h->closes[h->nclose++] = (struct symhelper_close){ f->helper_id, f->helper_gen };
	pthread_mutex_unlock(&h->close_lock);
}

/* Reap the helpers that stopped idle (no zombie waits for its uid's next request); never
 * waits for a helper in use. */
static void symhelper_reap_idle(void)
{
	pthread_mutex_lock(&g_lock);
	struct symhelper *list = g_helpers;
	pthread_mutex_unlock(&g_lock);
	/* helpers are only ever prepended and never freed: the list from here on is stable */
	for (struct symhelper *h = list; h; h = h->next) {
		if (pthread_mutex_trylock(&h->lock) != 0)
			continue;
		struct pollfd p = { h->sock, POLLIN, 0 };
		if (h->pid > 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLHUP))
			symhelper_reap_hung_up(h);
		pthread_mutex_unlock(&h->lock);
	}
}

/* ---- One request ---------------------------------------------------------------------- */

/* A FIND from the helper: look, and send FOUND (with the descriptor when found). */
static int symhelper_find(struct symhelper *h, struct symfile *f, const void *body, size_t len,
			  int64_t deadline)
{
	const struct symproto_find *q = body;
	if (len < sizeof(*q) || q->id != f->helper_id || q->name_len > 4096 ||
	    q->build_id_len > 256 || len != sizeof(*q) + q->name_len + q->build_id_len)
		return -EPROTO;
	char name[4097], id[257];
	memcpy(name, q + 1, q->name_len);
	name[q->name_len] = '\0';
	memcpy(id, (const char *)(q + 1) + q->name_len, q->build_id_len);
	id[q->build_id_len] = '\0';
	if (strlen(name) != q->name_len || strlen(id) != q->build_id_len)
		return -EPROTO;
	int fd = f->find_debug(f, name, q->crc, q->build_id_len ? id : NULL);
	struct symproto_found a = { q->id, fd >= 0 };
	int err = symhelper_send(h, SYMPROTO_FOUND, &a, sizeof(a), NULL, 0, fd, deadline);
	if (fd >= 0)
		close(fd);
	return err;
}

/* An ANSWER for n addresses: checked whole, then given to fn. */
static int symhelper_answer(struct symfile *f, const unsigned char *body, size_t len, size_t n,
			    symhelper_answer_fn fn, void *arg, uint32_t *flags)
{
	struct symproto_answer a;
	if (len < sizeof(a))
		return -EPROTO;
	memcpy(&a, body, sizeof(a));
	if (a.id != f->helper_id)
		return -EPROTO;
	if (a.status)
		return a.status == ENOEXEC ? -ENOEXEC : -EPROTO;
	if (a.n != n)
		return -EPROTO;
	/* two passes: nothing is used unless the whole message is well formed */
	for (int use = 0; use < 2; use++) {
		size_t at = sizeof(a);
		for (size_t i = 0; i < n; i++) {
			struct symproto_addr ad;
			struct symhelper_frame fr[SYM_MAX_INLINE];
			if (len - at < sizeof(ad))
				return -EPROTO;
			memcpy(&ad, body + at, sizeof(ad));
			at += sizeof(ad);
			bool unanswered = ad.nframes == UINT32_MAX;
			if (!unanswered && ad.nframes > SYM_MAX_INLINE)
				return -EPROTO;
			for (uint32_t k = 0; !unanswered && k < ad.nframes; k++) {
				struct symproto_frame pf;
				if (len - at < sizeof(pf))
					return -EPROTO;
				memcpy(&pf, body + at, sizeof(pf));
				at += sizeof(pf);
				uint32_t fl = pf.function_len == SYMPROTO_STR_NONE ? 0 : pf.function_len;
				uint32_t il = pf.file_len == SYMPROTO_STR_NONE ? 0 : pf.file_len;
				if (fl > SYMPROTO_STR_MAX || il > SYMPROTO_STR_MAX ||
				    len - at < (size_t)fl + il)
					return -EPROTO;
				fr[k] = (struct symhelper_frame){
					pf.function_len == SYMPROTO_STR_NONE ? NULL
									     : (const char *)body + at,
					pf.file_len == SYMPROTO_STR_NONE ? NULL
									 : (const char *)body + at + fl,
					fl, il, pf.line > 0 ? pf.line : 0,
					pf.start_line > 0 ? pf.start_line : 0
				};
				at += (size_t)fl + il;
			}
			if (use)
				fn(arg, i, unanswered ? -1 : (int)ad.nframes, fr, ad.entry_back);
		}
		if (at != len)
			return -EPROTO;
	}
	*flags = a.flags;
	return 0;
}

/* One LOOKUP exchange with a running helper. */
static int symhelper_exchange(struct symhelper *h, struct symfile *f, const uint64_t *offs,
			      size_t n, symhelper_answer_fn fn, void *arg, uint32_t *flags)
{
	unsigned timeout = g_no_wait && g_timeout_ms > SYMHELPER_NO_WAIT_MS ? SYMHELPER_NO_WAIT_MS
									    : g_timeout_ms;
	int64_t deadline = symhelper_now_ms() + timeout;
	int err = symhelper_flush_closes(h, deadline);
	bool open = f->helper_gen != h->gen;
	if (open) {
		f->helper_id = ++h->next_id;
		f->helper_gen = h->gen;
	}
	struct symproto_lookup q = { f->helper_id, open, (uint32_t)n, 0 };
	if (!err)
		err = symhelper_send(h, SYMPROTO_LOOKUP, &q, sizeof(q), offs, n * sizeof(*offs),
				     open ? f->fd : -1, deadline);
	while (!err) {
		struct symproto_hdr hd;
		void *body;
		if ((err = symhelper_recv(h, &hd, &body, deadline)) != 0)
			break;
		if (hd.type == SYMPROTO_FIND) {
			err = symhelper_find(h, f, body, hd.len, deadline);
			/* the search is the daemon's time, not the helper's */
			deadline = symhelper_now_ms() + timeout;
		} else if (hd.type == SYMPROTO_ANSWER) {
			err = symhelper_answer(f, body, hd.len, n, fn, arg, flags);
			free(body);
			return err;
		} else {
			err = -EPROTO;
		}
		free(body);
	}
	return err;
}

/* h's lock; a thread that does not wait (symhelper_no_wait) gives up after
 * SYMHELPER_NO_WAIT_LOCK_MS. */
static bool symhelper_lock(struct symhelper *h)
{
	if (!g_no_wait) {
		pthread_mutex_lock(&h->lock);
		return true;
	}
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += SYMHELPER_NO_WAIT_LOCK_MS / 1000;
	return pthread_mutex_timedlock(&h->lock, &until) == 0;
}

int symhelper_debug_fd(struct symfile *f, const char *link_name, uint32_t crc)
{
	struct symhelper *h = symhelper_of(f->uid);
	if (!h || !symhelper_lock(h))
		return -1;
	int fd = f->debug_fd >= 0 ? fcntl(f->debug_fd, F_DUPFD_CLOEXEC, 3)
				  : f->find_debug(f, link_name ? link_name : "", crc, NULL);
	pthread_mutex_unlock(&h->lock);
	return fd;
}

int symhelper_lookup(struct symfile *f, const uint64_t *offs, size_t n, symhelper_answer_fn fn,
		     void *arg, uint32_t *flags)
{
	struct symhelper *h = symhelper_of(f->uid);
	if (!h || n > SYMPROTO_BATCH_MAX)
		return -ENOMEM;
	/* the drain thread waits SYMHELPER_NO_WAIT_LOCK_MS at most for a helper in use, asks
	 * none that is backing off or failed it lately, and gives it SYMHELPER_NO_WAIT_MS */
	if (!symhelper_lock(h))
		return -EAGAIN;
	if (g_no_wait && (h->backoff_ms || symhelper_now_ms() < h->no_wait_ban_ms)) {
		pthread_mutex_unlock(&h->lock);
		return -EAGAIN;
	}
	int err = -EAGAIN;
	bool served = false; /* a helper had the request when err came */
	/* a second try only when the helper had just stopped idle as the request went out */
	for (int attempt = 0; attempt < 2; attempt++) {
		if ((err = symhelper_ready(h)) != 0)
			break;
		served = true;
		pid_t pid = h->pid;
		err = symhelper_exchange(h, f, offs, n, fn, arg, flags);
		if (!err || err == -ENOEXEC) {
			h->backoff_ms = 0;
			h->retry_at_ms = 0;
			break;
		}
		if (err == SYMHELPER_STOPPED) {
			/* someone stopped it: not the file's fault, nor one to back off from */
			symhelper_reap_stopped(h);
			served = false;
			break;
		}
		if (err == -EPIPE && attempt == 0) {
			/* hung up: stopped idle just now (try a new one), or died */
			int st = symhelper_reap(h, true);
			if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == SYMPROTO_EXIT_IDLE)
				continue;
			char how[96];
			symhelper_describe(st, how, sizeof(how));
			symhelper_backoff(h);
			log_warn("symbolizer for uid %u (pid %d) died answering: %s; its addresses "
				 "are shown unsymbolized, restarting in %u ms",
				 (unsigned)h->uid, (int)pid, how, h->backoff_ms);
			break;
		}
		symhelper_fail(h, err, "answering");
		break;
	}
	/* one failure the drain thread waited for is all it waits for, for a while */
	if (err && err != -ENOEXEC && served && g_no_wait)
		h->no_wait_ban_ms = symhelper_now_ms() + SYMHELPER_NO_WAIT_BAN_MS;
	pthread_mutex_unlock(&h->lock);
	symhelper_reap_idle();
	if (err && err != -ENOEXEC)
		err = served && !g_no_wait ? -EIO : -EAGAIN;
	return err;
}

void symhelper_no_wait(bool on)
{
	g_no_wait = on;
}

void symhelper_stop_all(void)
{
	pthread_mutex_lock(&g_lock);
	struct symhelper *list = g_helpers;
	pthread_mutex_unlock(&g_lock);
	for (struct symhelper *h = list; h; h = h->next) {
		pthread_mutex_lock(&h->lock);
		if (h->pid > 0)
			symhelper_reap(h, true);
		pthread_mutex_unlock(&h->lock);
	}
}

/* ---- For tests ------------------------------------------------------------------------ */

pid_t symhelper_pid(uid_t uid)
{
	struct symhelper *h = symhelper_of(uid);
	if (!h)
		return 0;
	/* without the lock: a test asks while a request hangs */
	return __atomic_load_n(&h->pid, __ATOMIC_RELAXED);
}

void symhelper_set_timing(unsigned timeout_ms, unsigned backoff_ms)
{
	g_timeout_ms = timeout_ms ? timeout_ms : SYMHELPER_TIMEOUT_MS;
	g_backoff_min_ms = backoff_ms ? backoff_ms : SYMHELPER_BACKOFF_MIN_MS;
}
