/* SPDX-License-Identifier: MIT */
/*
 * sec_util.h: the black-box helpers of test_server.c and test_security.c (a private
 * llgo-heapd, a client, a fake shim with its control page and rings). LLGO_TEST_HEAPD names
 * another daemon binary (e.g. an older build, to see an attack succeed against it).
 */
#ifndef LLGO_TESTS_SEC_UTIL_H
#define LLGO_TESTS_SEC_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../agent/internal.h"

#ifndef LLGO_BUILD_DIR
#error "LLGO_BUILD_DIR must be set by the Makefile"
#endif
#ifndef HEAPD_DIR_TEMPLATE
#define HEAPD_DIR_TEMPLATE "/tmp/llgo-sec.XXXXXX" /* mkdtemp's: where heapd_dir makes a folder */
#endif
#define HEAPD (getenv("LLGO_TEST_HEAPD") ? getenv("LLGO_TEST_HEAPD") : LLGO_BUILD_DIR "/bin/llgo-heapd")

/* ---- sites: real code addresses for the fake records --------------------------------- */

/* Each body is longer than the offset RET() uses, so the address stays inside it. */
__attribute__((noinline)) void srv_site_alpha(void)
{
	__asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop" ::: "memory");
}

__attribute__((noinline)) void srv_site_beta(void)
{
	__asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop" ::: "memory");
}

__attribute__((noinline)) void srv_site_caller(void)
{
	srv_site_alpha();
	srv_site_beta();
	__asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop" ::: "memory");
}

/* A return address inside f (a few bytes past its entry). */
#define RET(f) ((uint64_t)(uintptr_t)(f) + 4)

/* ---- the daemon ------------------------------------------------------------------------ */

struct heapd {
	pid_t pid;
	char dir[64];
	char sock[100];
	char log[128];
};

__attribute__((unused)) static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

__attribute__((unused)) static int sock_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(s);
		return e;
	}
	struct timeval tv = { .tv_sec = 10 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return s;
}

__attribute__((unused)) static void heapd_dir(struct heapd *d)
{
	snprintf(d->dir, sizeof(d->dir), HEAPD_DIR_TEMPLATE);
	cr_assert(mkdtemp(d->dir), "mkdtemp: %s", strerror(errno));
	/* other users (the permission test) must reach the socket inside */
	chmod(d->dir, 0755);
	snprintf(d->sock, sizeof(d->sock), "%s/heapd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/heapd.log", d->dir);
}

__attribute__((unused)) static pid_t heapd_spawn(struct heapd *d, const char *const *extra)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* a test that fails half-way still takes its daemon down with it */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		const char *argv[16] = { "llgo-heapd", "--socket", d->sock, "--foreground" };
		int n = 4;
		for (; extra && *extra && n < 15; extra++)
			argv[n++] = *extra;
		argv[n] = NULL;
		unsetenv("LD_PRELOAD");
		execv(HEAPD, (char **)argv);
		_exit(127);
	}
	return pid;
}

__attribute__((unused)) static bool heapd_wait_socket(const char *sock, pid_t pid)
{
	for (int i = 0; i < 1000; i++) {
		int s = sock_connect(sock);
		if (s >= 0) {
			close(s);
			return true;
		}
		int st;
		if (pid > 0 && waitpid(pid, &st, WNOHANG) == pid)
			return false;
		sleep_ms(5);
	}
	return false;
}

__attribute__((unused)) static void heapd_start(struct heapd *d, const char *const *extra)
{
	heapd_dir(d);
	d->pid = heapd_spawn(d, extra);
	cr_assert(heapd_wait_socket(d->sock, d->pid), "llgo-heapd did not start");
}

__attribute__((unused)) static bool heapd_alive(struct heapd *d)
{
	int st;
	return waitpid(d->pid, &st, WNOHANG) == 0;
}

__attribute__((unused)) static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return strdup("");
	char *s = calloc(1, 1 << 20);
	size_t n = fread(s, 1, (1 << 20) - 1, f);
	s[n] = '\0';
	fclose(f);
	return s;
}

__attribute__((unused)) static int count_lines(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

/* SIGTERM, wait; returns the exit status (expects a clean exit) */
__attribute__((unused)) static int heapd_stop(struct heapd *d)
{
	cr_assert(heapd_alive(d), "llgo-heapd died:\n%s", read_all(d->log));
	kill(d->pid, SIGTERM);
	int st = 0;
	for (int i = 0; i < 1000; i++) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			break;
		}
		sleep_ms(10);
	}
	if (d->pid) {
		kill(d->pid, SIGKILL);
		waitpid(d->pid, &st, 0);
		cr_assert_fail("llgo-heapd did not stop on SIGTERM");
	}
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "llgo-heapd exit status %d:\n%s", st,
		  read_all(d->log));
	struct stat sb;
	cr_expect(lstat(d->sock, &sb) < 0, "socket left behind after SIGTERM");
	return st;
}

__attribute__((unused)) static void heapd_cleanup(struct heapd *d)
{
	char cmd[256];
	if (!getenv("LLGO_KEEP_TMP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", d->dir);
	}
}

/* ---- client ------------------------------------------------------------------------------ */

struct answer {
	struct buf data;
	int status;
	char message[LLGO_END_MSG_LEN];
};

/* Send req on s and collect DATA until END. Returns 0, or -errno (connection dropped...). */
__attribute__((unused)) static int request_on(int s, const void *req, size_t n, struct answer *a)
{
	buf_init(&a->data);
	a->status = -1;
	a->message[0] = '\0';
	int err = msg_send(s, req, n, -1);
	if (err)
		return err;
	unsigned char *pkt = malloc(LLGO_MSG_MAX);
	for (;;) {
		ssize_t r = msg_recv(s, pkt, LLGO_MSG_MAX, NULL);
		if (r <= 0) {
			err = r < 0 ? (int)r : -ECONNRESET;
			break;
		}
		struct llgo_msg_header h;
		if ((err = msg_header_check(pkt, (size_t)r, &h)) != 0)
			break;
		if (h.type == LLGO_MSG_DATA) {
			buf_append(&a->data, pkt + sizeof(h), (size_t)r - sizeof(h));
		} else if (h.type == LLGO_MSG_END && (size_t)r == sizeof(struct llgo_msg_end)) {
			struct llgo_msg_end end;
			memcpy(&end, pkt, sizeof(end));
			a->status = end.status;
			end.message[sizeof(end.message) - 1] = '\0';
			snprintf(a->message, sizeof(a->message), "%s", end.message);
			break;
		} else {
			err = -EPROTO;
			break;
		}
	}
	free(pkt);
	return err;
}

__attribute__((unused)) static int request(const char *sock, const void *req, size_t n, struct answer *a)
{
	int s = sock_connect(sock);
	if (s < 0)
		return s;
	int err = request_on(s, req, n, a);
	close(s);
	return err;
}

__attribute__((unused)) static size_t list(const char *sock, struct llgo_list_entry *out, size_t max)
{
	struct llgo_msg_header h;
	msg_header_init(&h, LLGO_MSG_LIST, sizeof(h));
	struct answer a;
	cr_assert_eq(request(sock, &h, sizeof(h), &a), 0, "LIST failed");
	cr_assert_eq(a.status, 0);
	cr_assert_eq(a.data.len % sizeof(struct llgo_list_entry), 0);
	size_t n = a.data.len / sizeof(struct llgo_list_entry);
	for (size_t i = 0; i < n && i < max; i++)
		memcpy(&out[i], a.data.data + i * sizeof(*out), sizeof(*out));
	buf_free(&a.data);
	return n;
}

__attribute__((unused)) static bool list_find(const char *sock, pid_t pid, struct llgo_list_entry *e)
{
	struct llgo_list_entry v[64];
	size_t n = list(sock, v, 64);
	for (size_t i = 0; i < n && i < 64; i++) {
		if ((pid_t)v[i].pid == pid) {
			*e = v[i];
			return true;
		}
	}
	return false;
}

__attribute__((unused)) static int snapshot(const char *sock, pid_t pid, int fmt, struct answer *a)
{
	struct llgo_msg_snapshot m;
	memset(&m, 0, sizeof(m));
	msg_header_init(&m.h, LLGO_MSG_SNAPSHOT, sizeof(m));
	m.pid = (uint32_t)pid;
	m.format = (uint32_t)fmt;
	return request(sock, &m, sizeof(m), a);
}

__attribute__((unused)) static int set_rate(const char *sock, pid_t pid, uint64_t rate, struct answer *a)
{
	struct llgo_msg_set_rate m;
	memset(&m, 0, sizeof(m));
	msg_header_init(&m.h, LLGO_MSG_SET_RATE, sizeof(m));
	m.pid = (uint32_t)pid;
	m.rate = rate;
	return request(sock, &m, sizeof(m), a);
}

/* ---- fake shim ---------------------------------------------------------------------------- */

struct fring {
	int fd;
	uint32_t id;
	struct llgo_ring_header *hdr;
	unsigned char *data;
	uint64_t size, head, sampled, dropped;
};

struct fshim {
	int sock;
	int ctl_fd;
	struct llgo_ctl *ctl;
};

__attribute__((unused)) static int memfd_sized(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	return fd;
}

__attribute__((unused)) static void fshim_ctl(struct fshim *sh, uint32_t ring_data_size, int64_t rate_word)
{
	sh->ctl_fd = memfd_sized("test-ctl", LLGO_CTL_SIZE);
	sh->ctl = mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, sh->ctl_fd, 0);
	cr_assert_neq(sh->ctl, MAP_FAILED);
	sh->ctl->magic = LLGO_CTL_MAGIC;
	sh->ctl->version = LLGO_CTL_VERSION;
	sh->ctl->size = LLGO_CTL_SIZE;
	atomic_store(&sh->ctl->rate_word, rate_word);
	sh->ctl->ring_data_size = ring_data_size;
}

__attribute__((unused)) static void hello_init(struct llgo_msg_hello *m, uint32_t ring_data_size, int64_t rate_word)
{
	memset(m, 0, sizeof(*m));
	msg_header_init(&m->h, LLGO_MSG_HELLO, sizeof(*m));
	m->pid = (uint32_t)getpid();
	m->ring_data_size = ring_data_size;
	m->rate_word = rate_word;
	snprintf(m->comm, sizeof(m->comm), "fake-shim");
}

/* Wait for one packet of type `type`; returns its status field (END/HELLO_ACK), or -errno. */
__attribute__((unused)) static int wait_reply(int s, uint16_t type)
{
	unsigned char pkt[LLGO_MSG_MAX];
	ssize_t r = msg_recv(s, pkt, sizeof(pkt), NULL);
	if (r <= 0)
		return r < 0 ? (int)r : -ECONNRESET;
	struct llgo_msg_header h;
	if (msg_header_check(pkt, (size_t)r, &h) || h.type != type)
		return -EPROTO;
	int32_t status;
	memcpy(&status, pkt + sizeof(h), sizeof(status));
	return status;
}

/* Connect and attach as a shim; returns the HELLO_ACK status. */
__attribute__((unused)) static int fshim_attach(struct fshim *sh, const char *sock, uint32_t ring_data_size,
			int64_t rate_word)
{
	sh->sock = sock_connect(sock);
	cr_assert_geq(sh->sock, 0);
	fshim_ctl(sh, ring_data_size, rate_word);
	struct llgo_msg_hello m;
	hello_init(&m, ring_data_size, rate_word);
	cr_assert_eq(msg_send(sh->sock, &m, sizeof(m), sh->ctl_fd), 0);
	return wait_reply(sh->sock, LLGO_MSG_HELLO_ACK);
}

__attribute__((unused)) static void fring_new(struct fring *r, uint32_t id, uint32_t data_size)
{
	memset(r, 0, sizeof(*r));
	r->id = id;
	r->size = data_size;
	r->fd = memfd_sized("test-ring", LLGO_RING_HEADER_SIZE + (size_t)data_size);
	void *p = mmap(NULL, LLGO_RING_HEADER_SIZE + (size_t)data_size, PROT_READ | PROT_WRITE,
		       MAP_SHARED, r->fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	r->hdr = p;
	r->data = (unsigned char *)p + LLGO_RING_HEADER_SIZE;
	r->hdr->magic = LLGO_RING_MAGIC;
	r->hdr->version = LLGO_RING_VERSION;
	r->hdr->header_size = LLGO_RING_HEADER_SIZE;
	r->hdr->data_size = data_size;
	r->hdr->ring_id = id;
	atomic_store(&r->hdr->state, LLGO_RING_OWNED);
	atomic_store(&r->hdr->owner_tid, (uint32_t)gettid());
}

__attribute__((unused)) static int fshim_add_ring(struct fshim *sh, struct fring *r)
{
	struct llgo_msg_add_ring m;
	memset(&m, 0, sizeof(m));
	msg_header_init(&m.h, LLGO_MSG_ADD_RING, sizeof(m));
	m.ring_id = r->id;
	m.data_size = (uint32_t)r->size;
	return msg_send(sh->sock, &m, sizeof(m), r->fd);
}

/* The producer of shared/ring.h: bytes, release head, release sampled; a full ring drops
 * (release dropped, then release sampled). */
__attribute__((unused)) static bool fring_push(struct fring *r, const uint64_t *frames, uint16_t n, uint64_t size,
		       uint64_t rate, bool corrupt)
{
	uint32_t len = llgo_record_alloc_len(n);
	uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	if (r->head + len - tail > r->size) {
		r->dropped++;
		atomic_store_explicit(&r->hdr->dropped, r->dropped, memory_order_release);
		r->sampled++;
		atomic_store_explicit(&r->hdr->sampled, r->sampled, memory_order_release);
		return false;
	}
	unsigned char rec[LLGO_RECORD_MAX_LEN];
	struct llgo_record h;
	memset(&h, 0, sizeof(h));
	h.kind = LLGO_REC_ALLOC;
	h.version = LLGO_REC_VERSION;
	h.nframes = n;
	h.length = len;
	h.seq = r->sampled + 1;
	h.size = size;
	h.rate = rate;
	h.tid = (uint32_t)gettid();
	memcpy(rec, &h, sizeof(h));
	memcpy(rec + sizeof(h), frames, 8u * n);
	uint64_t sum = llgo_record_checksum(rec, len) ^ (corrupt ? 1 : 0);
	memcpy(rec + offsetof(struct llgo_record, checksum), &sum, sizeof(sum));
	llgo_ring_copy_in(r->data, r->size - 1, r->head, rec, len);
	r->head += len;
	atomic_store_explicit(&r->hdr->head, r->head, memory_order_release);
	r->sampled++;
	atomic_store_explicit(&r->hdr->sampled, r->sampled, memory_order_release);
	return true;
}

/* Push n records, waiting for the daemon to make room when the ring is full. */
__attribute__((unused)) static void fring_push_n(struct fring *r, const uint64_t *frames, uint16_t nf, uint64_t size,
			 uint64_t rate, unsigned n)
{
	uint32_t len = llgo_record_alloc_len(nf);
	for (unsigned i = 0; i < n; i++) {
		for (int spin = 0; spin < 5000; spin++) {
			uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
			if (r->head + len - tail <= r->size)
				break;
			sleep_ms(1);
		}
		cr_assert(fring_push(r, frames, nf, size, rate, false), "ring stayed full");
	}
}

__attribute__((unused)) static void fshim_close(struct fshim *sh)
{
	close(sh->sock);
	close(sh->ctl_fd);
}

__attribute__((unused)) static bool accounting_holds(const struct llgo_list_entry *e)
{
	return e->sampled == e->delivered + e->dropped + e->corrupt;
}

/* Poll LIST until the daemon has drained `want` delivered records of pid. */
__attribute__((unused)) static struct llgo_list_entry wait_delivered(const char *sock, pid_t pid, uint64_t want)
{
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	for (int i = 0; i < 500; i++) {
		if (list_find(sock, pid, &e) && e.delivered >= want)
			return e;
		sleep_ms(10);
	}
	cr_assert_fail("pid %d: %llu delivered, want %llu", (int)pid,
		       (unsigned long long)e.delivered, (unsigned long long)want);
	return e;
}


#endif
