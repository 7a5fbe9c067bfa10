/* SPDX-License-Identifier: MIT */
/*
 * sec_util.h: the black-box helpers of test_server.c and test_security.c: a fake shim with
 * its control page and rings, on top of heapd.h (the private llgo-heapd and the requests to
 * it; LLGO_TEST_HEAPD names another daemon binary, e.g. an older build, to see an attack
 * succeed against it).
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
#include "heapd.h"


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

/* ---- small helpers (the daemon and the requests to it are heapd.h's) ----------------------- */

__attribute__((unused)) static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
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

/* ---- another user: nobody, and a setuid-root program ------------------------------------ */

__attribute__((unused)) static uid_t nobody_uid(void)
{
	struct passwd *pw = getpwnam("nobody");
	return pw ? pw->pw_uid : 65534;
}

__attribute__((unused)) static gid_t nobody_gid(void)
{
	struct passwd *pw = getpwnam("nobody");
	return pw ? pw->pw_gid : 65534;
}

/* The child becomes an ordinary process of uid's: the uid change leaves it not dumpable
 * (its /proc files root's, the daemon refuses to read it), which a program the user starts
 * is not. */
__attribute__((unused)) static void become_uid(uid_t uid, gid_t gid)
{
	if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
		_exit(120);
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

__attribute__((unused)) static void become_nobody(void)
{
	become_uid(nobody_uid(), nobody_gid());
}

__attribute__((unused)) static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to switch to another uid");
}

/* A setuid-root copy of sleep in dir (root can make one; nobody runs it). */
__attribute__((unused)) static void make_setuid_sleep(const char *dir, char *out, size_t n)
{
	snprintf(out, n, "%s/suid-sleep", dir);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "cp /usr/bin/sleep '%s' && chown 0:0 '%s' && chmod 4755 '%s'",
		 out, out, out);
	cr_assert_eq(system(cmd), 0, "cannot make a setuid binary");
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
	sh->sock = heapd_connect(sock);
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
 * (release dropped, then release sampled). With regs, an ALLOC_RAW record: the frames, then
 * the registers and regs->stack_len bytes of stack, which the checksum leaves out. */
__attribute__((unused)) static bool fring_push_rec(struct fring *r, const uint64_t *frames, uint16_t n,
			   uint64_t size, uint64_t rate, bool corrupt,
			   const struct llgo_raw_regs *regs, const unsigned char *stack)
{
	uint32_t sumlen = regs ? llgo_record_raw_fixed_len(n) : llgo_record_alloc_len(n);
	uint32_t len = sumlen + (regs ? regs->stack_len : 0);
	uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
	if (r->head + len - tail > r->size) {
		r->dropped++;
		atomic_store_explicit(&r->hdr->dropped, r->dropped, memory_order_release);
		r->sampled++;
		atomic_store_explicit(&r->hdr->sampled, r->sampled, memory_order_release);
		return false;
	}
	unsigned char rec[LLGO_RECORD_MAX_LEN + sizeof(struct llgo_raw_regs) + 4096];
	if (regs && regs->stack_len > 4096)
		return false;
	struct llgo_record h;
	memset(&h, 0, sizeof(h));
	h.kind = regs ? LLGO_REC_ALLOC_RAW : LLGO_REC_ALLOC;
	h.version = LLGO_REC_VERSION;
	h.nframes = n;
	h.length = len;
	h.seq = r->sampled + 1;
	h.size = size;
	h.rate = rate;
	h.tid = (uint32_t)gettid();
	memcpy(rec, &h, sizeof(h));
	memcpy(rec + sizeof(h), frames, 8u * n);
	if (regs) {
		memcpy(rec + llgo_record_alloc_len(n), regs, sizeof(*regs));
		memcpy(rec + sumlen, stack, regs->stack_len);
	}
	uint64_t sum = llgo_record_checksum(rec, sumlen) ^ (corrupt ? 1 : 0);
	memcpy(rec + offsetof(struct llgo_record, checksum), &sum, sizeof(sum));
	llgo_ring_copy_in(r->data, r->size - 1, r->head, rec, len);
	r->head += len;
	atomic_store_explicit(&r->hdr->head, r->head, memory_order_release);
	r->sampled++;
	atomic_store_explicit(&r->hdr->sampled, r->sampled, memory_order_release);
	return true;
}

__attribute__((unused)) static bool fring_push(struct fring *r, const uint64_t *frames, uint16_t n, uint64_t size,
		       uint64_t rate, bool corrupt)
{
	return fring_push_rec(r, frames, n, size, rate, corrupt, NULL, NULL);
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
		if (heapd_list_pid(sock, pid, &e) && e.delivered >= want)
			return e;
		sleep_ms(10);
	}
	cr_assert_fail("pid %d: %llu delivered, want %llu", (int)pid,
		       (unsigned long long)e.delivered, (unsigned long long)want);
	return e;
}


#endif
