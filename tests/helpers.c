// SPDX-License-Identifier: MIT
/*
 * helpers.c: the fixtures every test binary links (helpers.h), one copy of what the test
 * files used to write each for itself: deadlines, folders and files, another user, a fake
 * shim with its rings and a daemon it attaches to, memfd sessions, programs under the shim,
 * legacy-text and whole-stack profiles, hand-built stacks, the fake daemon of the shim's
 * tests, dump folders, /proc; in helpers.h's order. It is long (some 2,000 lines) because it
 * is the one place for all of them: a test file holds only what is its own. The daemon
 * itself and the requests to it are heapd.c's. Processes are stopped by pid, never by name.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../agent/internal.h"
#include "../common/msg.h"
#include "../shared/live.h"
#include "helpers.h"

/* criterion's runner sometimes leaks the 48-byte record of a test's timeout when the test
 * ends as the timer is armed (libcriterion 2.4.1, calloc in its setup_timeout); that is not
 * this code's leak, so LeakSanitizer is told to ignore allocations made by libcriterion (as
 * tests/lsan.supp does for `make unit`). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libcriterion.so\n";
}

/* ---- time ---------------------------------------------------------------------------------- */

long th_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

void th_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

const char *th_san(void)
{
	const char *s = getenv("LLGO_SAN");
	return s ? s : "";
}

bool th_san_thread(void)
{
	return strstr(th_san(), "thread") != NULL;
}

/* ---- folders, files, commands -------------------------------------------------------------- */

char *th_tmpdir(void)
{
	char *t = strdup("/tmp/llgo-e2e.XXXXXX");
	cr_assert(mkdtemp(t) != NULL, "mkdtemp: %s", strerror(errno));
	return t;
}

void th_rmdir(char *dir)
{
	if (!getenv("LLGO_KEEP_TMP")) {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", dir);
	}
	free(dir);
}

char *th_read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	/* read to the end: files in /proc say their size is 0 */
	size_t cap = 1 << 16, len = 0, r;
	char *s = malloc(cap);
	while (s && (r = fread(s + len, 1, cap - len - 1, f)) > 0) {
		len += r;
		if (cap - len < 4096)
			s = realloc(s, cap *= 2);
	}
	fclose(f);
	cr_assert_not_null(s);
	s[len] = '\0';
	return s;
}

char *th_read_all(const char *path)
{
	char *s = th_read_file(path);
	return s ? s : strdup("");
}

unsigned char *th_map_file(const char *path, size_t *size)
{
	int fd = open(path, O_RDONLY);
	cr_assert(fd >= 0, "%s", path);
	struct stat st;
	cr_assert(fstat(fd, &st) == 0);
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	cr_assert(p != MAP_FAILED);
	*size = (size_t)st.st_size;
	return p;
}

void th_write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	cr_assert(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fwrite(p, 1, n, f), n, "writing %s", path);
	cr_assert_eq(fclose(f), 0, "writing %s", path);
}

void th_write_file(const char *path, const char *text)
{
	th_write_bytes(path, text, strlen(text));
}

int th_count(const char *s, const char *needle)
{
	int n = 0;
	for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

int th_sh(char **out, const char *fmt, ...)
{
	char *cmd, *full;
	va_list ap;
	va_start(ap, fmt);
	cr_assert(vasprintf(&cmd, fmt, ap) >= 0);
	va_end(ap);
	cr_assert(asprintf(&full, "( %s ) 2>&1", cmd) >= 0);
	FILE *p = popen(full, "r");
	cr_assert(p != NULL, "popen %s", cmd);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	size_t n;
	while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
		len += n;
		if (cap - len < 2048) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
	}
	buf[len] = '\0';
	int st = pclose(p);
	free(full);
	free(cmd);
	if (out)
		*out = buf;
	else
		free(buf);
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int th_pprof(char **out, const char *dir, const char *fmt, ...)
{
	char *args;
	va_list ap;
	va_start(ap, fmt);
	cr_assert(vasprintf(&args, fmt, ap) >= 0);
	va_end(ap);
	int rc = th_sh(out, "cd %s && HOME=%s GOCACHE=%s/gocache GOPROXY=off go tool pprof %s", dir,
		       dir, dir, args);
	free(args);
	return rc;
}

/* ---- processes ----------------------------------------------------------------------------- */

pid_t th_fork(void)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	return pid;
}

void th_pipe(int p[2])
{
	cr_assert_eq(pipe(p), 0, "pipe: %s", strerror(errno));
}

pid_t th_spawn_logged(char *const argv[], const char *log, bool append, int deathsig)
{
	pid_t parent = getpid();
	pid_t pid = th_fork();
	if (pid == 0) {
		/* a test that fails half-way still takes its servers down with it */
		prctl(PR_SET_PDEATHSIG, deathsig);
		if (getppid() != parent)
			_exit(126);
		int fd = open(log, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC,
			      0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		unsetenv("LD_PRELOAD");
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* ---- another user -------------------------------------------------------------------------- */

uid_t th_nobody_uid(void)
{
	struct passwd *pw = getpwnam("nobody");
	return pw ? pw->pw_uid : 65534;
}

gid_t th_nobody_gid(void)
{
	struct passwd *pw = getpwnam("nobody");
	return pw ? pw->pw_gid : 65534;
}

void th_become_uid(uid_t uid, gid_t gid)
{
	if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
		_exit(120);
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

void th_become_nobody(void)
{
	th_become_uid(th_nobody_uid(), th_nobody_gid());
}

void th_need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to switch to another uid");
}

void th_make_setuid_sleep(const char *dir, char *out, size_t n)
{
	snprintf(out, n, "%s/suid-sleep", dir);
	cr_assert_eq(th_sh(NULL, "cp /usr/bin/sleep '%s' && chown 0:0 '%s' && chmod 4755 '%s'",
			   out, out, out), 0, "cannot make a setuid binary");
}

bool th_wait_fd(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, 10000) != 1)
		return false;
	char c;
	return read(fd, &c, 1) >= 0;
}

void th_hold(int fd)
{
	char c;
	while (read(fd, &c, 1) > 0)
		;
}

void th_kill(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/* ---- a fake shim --------------------------------------------------------------------------- */

__attribute__((noinline)) void th_site_alpha(void)
{
	__asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop" ::: "memory");
}

__attribute__((noinline)) void th_site_beta(void)
{
	__asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop" ::: "memory");
}

__attribute__((noinline)) void th_site_caller(void)
{
	th_site_alpha();
	th_site_beta();
	__asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop" ::: "memory");
}

int th_memfd_sized(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	return fd;
}

struct llgo_ctl *th_ctl_page(int fd, int64_t rate_word)
{
	struct llgo_ctl *c = mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c == MAP_FAILED)
		return NULL;
	c->magic = LLGO_CTL_MAGIC;
	c->version = LLGO_CTL_VERSION;
	c->size = LLGO_CTL_SIZE;
	atomic_store(&c->rate_word, rate_word);
	return c;
}

struct llgo_ctl *th_ctl_map(int fd, uint32_t ring_data_size, int64_t rate_word)
{
	struct llgo_ctl *c = th_ctl_page(fd, rate_word);
	if (!c)
		return NULL;
	atomic_store(&c->want_rate_word, rate_word);
	c->ring_data_size = ring_data_size;
	return c;
}

void th_shim_ctl(struct th_shim *sh, uint32_t ring_data_size, int64_t rate_word)
{
	sh->ctl_fd = th_memfd_sized("test-ctl", LLGO_CTL_SIZE);
	sh->ctl = th_ctl_page(sh->ctl_fd, rate_word);
	cr_assert_not_null(sh->ctl);
	sh->ctl->ring_data_size = ring_data_size;
}

void th_hello_init(struct llgo_msg_hello *m, uint32_t ring_data_size, int64_t rate_word)
{
	memset(m, 0, sizeof(*m));
	msg_header_init(&m->h, LLGO_MSG_HELLO, sizeof(*m));
	m->pid = (uint32_t)getpid();
	m->ring_data_size = ring_data_size;
	m->rate_word = rate_word;
	snprintf(m->comm, sizeof(m->comm), "fake-shim");
}

int th_wait_reply(int s, uint16_t type)
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

int th_shim_attach(struct th_shim *sh, const char *sock, uint32_t ring_data_size,
		   int64_t rate_word)
{
	sh->sock = heapd_connect(sock);
	cr_assert_geq(sh->sock, 0);
	th_shim_ctl(sh, ring_data_size, rate_word);
	struct llgo_msg_hello m;
	th_hello_init(&m, ring_data_size, rate_word);
	cr_assert_eq(msg_send(sh->sock, &m, sizeof(m), sh->ctl_fd), 0);
	return th_wait_reply(sh->sock, LLGO_MSG_HELLO_ACK);
}

int th_shim_open(struct th_shim *sh, struct th_ring *r, const char *sock, uint32_t data_size,
		 int64_t rate_word)
{
	int rc = th_shim_attach(sh, sock, data_size, rate_word);
	if (rc != 0)
		return rc;
	th_ring_new(r, 0, data_size);
	return th_shim_add_ring(sh, r);
}

void th_ring_new(struct th_ring *r, uint32_t id, uint32_t data_size)
{
	memset(r, 0, sizeof(*r));
	r->id = id;
	r->size = data_size;
	r->fd = th_memfd_sized("test-ring", LLGO_RING_HEADER_SIZE + (size_t)data_size);
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

int th_shim_add_ring(struct th_shim *sh, struct th_ring *r)
{
	struct llgo_msg_add_ring m;
	memset(&m, 0, sizeof(m));
	msg_header_init(&m.h, LLGO_MSG_ADD_RING, sizeof(m));
	m.ring_id = r->id;
	m.data_size = (uint32_t)r->size;
	return msg_send(sh->sock, &m, sizeof(m), r->fd);
}

int th_shim_add_rings(struct th_shim *sh, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct th_ring r;
		th_ring_new(&r, i, LLGO_RING_MIN_DATA);
		if (th_shim_add_ring(sh, &r) != 0)
			return -1;
	}
	return 0;
}

bool th_ring_push_rec(struct th_ring *r, const uint64_t *frames, uint16_t n, uint64_t size,
		      uint64_t rate, bool corrupt, const struct llgo_raw_regs *regs,
		      const unsigned char *stack)
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

bool th_ring_push(struct th_ring *r, const uint64_t *frames, uint16_t n, uint64_t size,
		  uint64_t rate, bool corrupt)
{
	return th_ring_push_rec(r, frames, n, size, rate, corrupt, NULL, NULL);
}

void th_ring_push_n(struct th_ring *r, const uint64_t *frames, uint16_t nf, uint64_t size,
		    uint64_t rate, unsigned n)
{
	uint32_t len = llgo_record_alloc_len(nf);
	for (unsigned i = 0; i < n; i++) {
		for (int spin = 0; spin < 5000; spin++) {
			uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
			if (r->head + len - tail <= r->size)
				break;
			th_sleep_ms(1);
		}
		cr_assert(th_ring_push(r, frames, nf, size, rate, false), "ring stayed full");
	}
}

void th_ring_push_distinct(struct th_ring *r, unsigned n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t st[3] = { TH_RET(th_site_alpha), 0x1000 + i * 16, TH_RET(th_site_caller) };
		th_ring_push_n(r, st, 3, 64 + i, 1, 1);
	}
}

void th_shim_close(struct th_shim *sh)
{
	close(sh->sock);
	close(sh->ctl_fd);
}

bool th_accounting_holds(const struct llgo_list_entry *e)
{
	return e->sampled == e->delivered + e->dropped + e->corrupt;
}

struct llgo_list_entry th_wait_delivered(const char *sock, pid_t pid, uint64_t want)
{
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	for (int i = 0; i < 500; i++) {
		if (heapd_list_pid(sock, pid, &e) && e.delivered >= want)
			return e;
		th_sleep_ms(10);
	}
	cr_assert_fail("pid %d: %llu delivered, want %llu", (int)pid,
		       (unsigned long long)e.delivered, (unsigned long long)want);
	return e;
}

bool th_wait_state(const char *sock, pid_t pid, uint32_t state, long timeout_ms)
{
	struct llgo_list_entry e;
	for (long until = th_now_ms() + timeout_ms;; th_sleep_ms(10)) {
		if (heapd_list_pid(sock, pid, &e) && e.state == state)
			return true;
		if (th_now_ms() > until)
			return false;
	}
}

bool th_wait_listed(const char *sock, pid_t pid, long timeout_ms)
{
	struct llgo_list_entry e;
	for (long until = th_now_ms() + timeout_ms;; th_sleep_ms(10)) {
		if (heapd_list_pid(sock, pid, &e))
			return true;
		if (th_now_ms() > until)
			return false;
	}
}

char *th_wait_log(const struct heapd *d, const char *needle, long timeout_ms)
{
	for (long until = th_now_ms() + timeout_ms;; th_sleep_ms(10)) {
		char *log = heapd_log(d);
		if (strstr(log, needle) || th_now_ms() > until)
			return log;
		free(log);
	}
}

int th_count_state(const char *sock, uid_t uid, uint32_t state, uint32_t *flags)
{
	struct llgo_list_entry *v;
	size_t n = heapd_list_all(sock, &v);
	int c = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i].uid == uid && v[i].state == state) {
			c++;
			if (flags)
				*flags |= v[i].budget_flags;
		}
	}
	free(v);
	return c;
}

void th_attached_start(struct th_attached *t, const char *const *extra, uint32_t ring_data_size,
		       int64_t rate_word)
{
	heapd_start(&t->d, NULL, extra);
	cr_assert_eq(th_shim_open(&t->sh, &t->r, t->d.sock, ring_data_size, rate_word), 0,
		     "the fake shim was not attached");
}

void th_attached_shim(struct th_attached *t, const char *const *extra, int64_t rate_word)
{
	memset(&t->r, 0, sizeof(t->r));
	heapd_start(&t->d, NULL, extra);
	cr_assert_eq(th_shim_attach(&t->sh, t->d.sock, LLGO_RING_MIN_DATA, rate_word), 0,
		     "the fake shim was not attached");
}

void th_attached_end(struct th_attached *t)
{
	th_shim_close(&t->sh);
	heapd_finish(&t->d);
}

int th_hello_noack(int s, int *ctl_fd, struct llgo_ctl **ctl)
{
	int fd = memfd_create("atk-ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, LLGO_CTL_SIZE) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return -1;
	struct llgo_ctl *c = th_ctl_map(fd, LLGO_RING_MIN_DATA, 512);
	if (!c)
		return -1;
	if (ctl_fd)
		*ctl_fd = fd;
	if (ctl)
		*ctl = c;
	struct llgo_msg_hello m;
	th_hello_init(&m, LLGO_RING_MIN_DATA, 512);
	m.flags = LLGO_HELLO_NO_ACK;
	return msg_send(s, &m, sizeof(m), fd);
}

pid_t th_ring_taker(const struct heapd *d, uid_t uid, uint32_t nrings, const int go[2])
{
	pid_t child = th_fork();
	if (child == 0) {
		close(go[1]);
		th_become_uid(uid, uid);
		struct th_shim sh;
		if (th_shim_attach(&sh, d->sock, LLGO_RING_MIN_DATA, 512) != 0)
			_exit(1);
		if (th_shim_add_rings(&sh, nrings) != 0)
			_exit(2);
		th_hold(go[0]);
		_exit(0);
	}
	return child;
}

uint32_t th_rings_taken(const struct heapd *d, pid_t pid, uint32_t nrings)
{
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	for (int i = 0; i < 500; i++) {
		if (heapd_list_pid(d->sock, pid, &e) &&
		    (e.rings == nrings || (e.budget_flags & LLGO_BUDGET_RINGS)))
			break;
		th_sleep_ms(10);
	}
	th_sleep_ms(100); /* a refusal refuses the rest too: nothing is freed meanwhile */
	cr_assert(heapd_list_pid(d->sock, pid, &e), "pid %d is not listed", (int)pid);
	return e.rings;
}

/* ---- memfd sessions: the process memfd and the live-object table ---------------------------- */

int th_proc_memfd(void)
{
	long page = sysconf(_SC_PAGESIZE);
	int fd = memfd_create("atk-proc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, page) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
		return -1;
	struct llgo_ctl *c = th_ctl_map(fd, LLGO_RING_MIN_DATA, 512);
	if (!c)
		return -1;
	c->page_size = (uint32_t)page;
	munmap(c, LLGO_CTL_SIZE);
	return fd;
}

int th_memfd_hello(const char *sock, int memfd, int *status)
{
	int s = heapd_connect(sock);
	if (status)
		*status = -1;
	if (s < 0)
		return -1;
	struct llgo_msg_hello m;
	th_hello_init(&m, LLGO_RING_MIN_DATA, 512);
	m.flags = LLGO_HELLO_MEMFD | (status ? 0 : LLGO_HELLO_NO_ACK);
	if (msg_send(s, &m, sizeof(m), memfd) != 0) {
		close(s);
		return -1;
	}
	if (status)
		*status = th_wait_reply(s, LLGO_MSG_HELLO_ACK);
	return s;
}

int th_add_live(int sock, int live)
{
	struct llgo_msg_header h;
	msg_header_init(&h, LLGO_MSG_ADD_LIVE, sizeof(h));
	return msg_send(sock, &h, sizeof(h), live);
}

/* Slots [0, n) of e full: objects of the record (ring 0, seq 1) under keys no bucket has.
 * Not instrumented: 512 MiB written under TSan would touch four times that of shadow. */
__attribute__((no_sanitize("address", "thread"))) static void
th_live_fill(struct llgo_live_entry *e, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		e[i].key = 0x5eed0000 + i;
		e[i].ref = LLGO_LIVE_REF(0, 1);
		e[i].size = 16;
		atomic_store_explicit(&e[i].addr, 0x10000000ull + 16 * i, memory_order_relaxed);
	}
}

int th_live_table(uint64_t slots)
{
	int fd = memfd_create("atk-live", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)LLGO_LIVE_MAP_SIZE) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
		return -1;
	struct llgo_live_header *h = mmap(NULL, LLGO_LIVE_MAP_SIZE, PROT_READ | PROT_WRITE,
					  MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (h == MAP_FAILED)
		return -1;
	h->magic = LLGO_LIVE_MAGIC;
	h->version = LLGO_LIVE_VERSION;
	h->header_size = LLGO_LIVE_HEADER_SIZE;
	h->levels = LLGO_LIVE_LEVELS;
	h->level0 = LLGO_LIVE_LEVEL0;
	atomic_store(&h->top, LLGO_LIVE_LEVELS - 1);
	th_live_fill((struct llgo_live_entry *)(void *)((unsigned char *)h + LLGO_LIVE_HEADER_SIZE),
		     slots < LLGO_LIVE_ENTRIES ? slots : LLGO_LIVE_ENTRIES);
	munmap(h, LLGO_LIVE_MAP_SIZE);
	return fd;
}

long th_ms_until_exited(const char *sock, pid_t pid, long wait_ms)
{
	long t0 = th_now_ms();
	struct llgo_list_entry e;
	while (th_now_ms() - t0 <= wait_ms) {
		if (heapd_list_pid(sock, pid, &e) && e.state == LLGO_PROC_EXITED)
			return th_now_ms() - t0;
		th_sleep_ms(20);
	}
	return wait_ms + 1;
}

/* ---- programs ------------------------------------------------------------------------------ */

pid_t th_spawn(char *const argv[], char *const env[], FILE **in, FILE **out)
{
	int pin[2], pout[2];
	cr_assert(pipe(pin) == 0 && pipe(pout) == 0);
	pid_t pid = th_fork();
	if (pid == 0) {
		dup2(pin[0], 0);
		dup2(pout[1], 1);
		close(pin[0]);
		close(pin[1]);
		close(pout[0]);
		close(pout[1]);
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pin[0]);
	close(pout[1]);
	*in = fdopen(pin[1], "w");
	*out = fdopen(pout[0], "r");
	setvbuf(*in, NULL, _IOLBF, 0);
	return pid;
}

void th_start(struct th_proc *p, const struct heapd *d, const char *rate, unsigned ring_kb,
	      const char *preload, char *const argv[], const char *const *extra)
{
	static char env[16][2048];
	char *envp[17];
	int n = 0;
	snprintf(env[n], sizeof(env[n]), "LD_PRELOAD=%s", preload ? preload : LLGO_PLAIN_SHIM);
	envp[n] = env[n];
	n++;
	snprintf(env[n], sizeof(env[n]), "LLGO_HEAP_SOCKET=%s", d->sock);
	envp[n] = env[n];
	n++;
	snprintf(env[n], sizeof(env[n]), "LLGO_HEAP_RATE=%s", rate);
	envp[n] = env[n];
	n++;
	snprintf(env[n], sizeof(env[n]), "LLGO_HEAP_RING_KB=%u", ring_kb ? ring_kb : 256);
	envp[n] = env[n];
	n++;
	for (int i = 0; extra && extra[i] && n < 16; i++, n++) {
		snprintf(env[n], sizeof(env[n]), "%s", extra[i]);
		envp[n] = env[n];
	}
	envp[n] = NULL;
	p->pid = th_spawn(argv, envp, &p->in, &p->out);
	/* programs started later must not hold this one's pipes (EOF on stdin ends some) */
	fcntl(fileno(p->in), F_SETFD, FD_CLOEXEC);
	fcntl(fileno(p->out), F_SETFD, FD_CLOEXEC);
}

void th_run_start(struct heapd *d, const char *const *opts, struct th_proc *p, const char *rate,
		  unsigned ring_kb, char *const argv[], const char *const *env, int ready_ms)
{
	heapd_start(d, NULL, opts);
	th_start(p, d, rate, ring_kb, NULL, argv, env);
	th_ready(p, ready_ms);
}

void th_say(struct th_proc *p, const char *line)
{
	fprintf(p->in, "%s\n", line);
	fflush(p->in);
}

pid_t th_run_profiled(const struct heapd *d, uid_t uid, const char *prog, const char *arg)
{
	pid_t pid = th_fork();
	if (pid == 0) {
		if (uid)
			th_become_nobody();
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		setenv("LD_PRELOAD", LLGO_PLAIN_SHIM, 1);
		setenv("LLGO_HEAP_SOCKET", d->sock, 1);
		setenv("LLGO_HEAP_RATE", "1", 1);
		execl(prog, prog, arg, (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s exited with %d", prog, st);
	return pid;
}

bool th_read_line(struct th_proc *p, char *line, size_t cap, int timeout_ms)
{
	int fd = fileno(p->out);
	size_t n = 0;
	long deadline = th_now_ms() + timeout_ms;
	while (n + 1 < cap) {
		long left = deadline - th_now_ms();
		if (left <= 0)
			return false;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, (int)left) <= 0)
			continue;
		char c;
		ssize_t r = read(fd, &c, 1);
		if (r <= 0)
			return false;
		if (c == '\n')
			break;
		line[n++] = c;
	}
	line[n] = '\0';
	return true;
}

const char *th_ready(struct th_proc *p, int timeout_ms)
{
	cr_assert(th_read_line(p, p->line, sizeof(p->line), timeout_ms),
		  "pid %d wrote no line within %d ms", (int)p->pid, timeout_ms);
	return p->line;
}

const char *th_ask(struct th_proc *p, const char *cmd, int timeout_ms)
{
	th_say(p, cmd);
	return th_ready(p, timeout_ms);
}

char *th_read_rest(struct th_proc *p, int timeout_ms)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	int fd = fileno(p->out);
	long deadline = th_now_ms() + timeout_ms;
	for (;;) {
		long left = deadline - th_now_ms();
		if (left <= 0)
			break;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, (int)left) <= 0)
			continue;
		if (cap - len < 1024)
			buf = realloc(buf, cap *= 2);
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	return buf;
}

int th_wait(struct th_proc *p, int timeout_ms)
{
	if (p->in)
		fclose(p->in);
	p->in = NULL;
	long deadline = th_now_ms() + timeout_ms;
	int st = 0;
	for (;;) {
		pid_t r = waitpid(p->pid, &st, WNOHANG);
		if (r == p->pid)
			break;
		if (th_now_ms() > deadline) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			st = -1;
			break;
		}
		th_sleep_ms(2);
	}
	if (p->out)
		fclose(p->out);
	p->out = NULL;
	return st;
}

char *th_output(struct th_proc *p, int timeout_ms, int *status)
{
	char *out = th_read_rest(p, timeout_ms);
	*status = th_wait(p, timeout_ms);
	return out;
}

char *th_finish(struct th_proc *p, int timeout_ms)
{
	int st;
	char *out = th_output(p, timeout_ms, &st);
	cr_assert_eq(st, 0, "pid %d: wait status 0x%x:\n%s", (int)p->pid, st, out);
	return out;
}

long th_site_truth(const char *out, const char *name)
{
	char key[128];
	snprintf(key, sizeof(key), "site %s ", name);
	const char *p = strstr(out, key);
	if (!p)
		return -1;
	const char *nl = strchr(p, '\n');
	const char *sp = p + strlen(key);
	const char *last = sp;
	for (const char *c = sp; *c && c != nl; c++)
		if (*c == ' ')
			last = c + 1;
	return atol(last);
}

/* ---- what a legacy-text profile says --------------------------------------------------------- */

int th_parse_text(const char *s, long *period, struct th_text_rec *recs, int max)
{
	int n = 0;
	const char *line = s;
	*period = -1;
	struct th_text_rec *cur = NULL;
	while (line && *line) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char tmp[1024];
		if (len >= sizeof(tmp))
			len = sizeof(tmp) - 1;
		memcpy(tmp, line, len);
		tmp[len] = '\0';
		long a, b, c, d;
		if (strncmp(tmp, "heap profile:", 13) == 0) {
			char *at = strstr(tmp, "@ heap/");
			if (at)
				*period = atol(at + 7);
		} else if (sscanf(tmp, "%ld: %ld [%ld: %ld] @", &a, &b, &c, &d) == 4) {
			if (n < max) {
				cur = &recs[n++];
				memset(cur, 0, sizeof(*cur));
				cur->inuse_objects = a;
				cur->inuse_bytes = b;
				cur->alloc_objects = c;
				cur->alloc_bytes = d;
			} else {
				cur = NULL;
			}
		} else if (cur && tmp[0] == '#' && tmp[1] == '\t' && !cur->frame0[0]) {
			/* "#\t0x<pc>\t<func>+0x<off>\t<file>:<line>" */
			char *f = strchr(tmp + 2, '\t');
			if (f) {
				/* columns are aligned with tabs: a stack holding a wider address
				 * (the [truncated] marker) has more than one */
				while (*f == '\t')
					f++;
				char *loc = strrchr(f, '\t');
				if (loc)
					snprintf(cur->loc0, sizeof(cur->loc0), "%s", loc + 1);
				char *end = strpbrk(f, "+\t ");
				if (end)
					*end = '\0';
				snprintf(cur->frame0, sizeof(cur->frame0), "%s", f);
			}
		} else if (tmp[0] == '\0') {
			cur = NULL;
		}
		line = nl ? nl + 1 : NULL;
	}
	return n;
}

long th_recs_count(const struct th_text_rec *r, int n, const char *func, long size)
{
	long total = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(r[i].frame0, func) != 0 || r[i].alloc_objects == 0)
			continue;
		if (size && r[i].alloc_bytes / r[i].alloc_objects != size)
			continue;
		total += r[i].alloc_objects;
	}
	return total;
}

char *th_expect_exact(const char *sock, pid_t pid, const char *site, long size, long truth,
		      const char *what, struct th_acct *a)
{
	char *text = heapd_snapshot(sock, pid, LLGO_FORMAT_TEXT, NULL);
	struct th_acct own;
	if (!a)
		a = &own;
	cr_assert(th_text_acct(text, a), "%s: no accounting line:\n%.500s", what, text);
	long got = th_text_count(text, site, size);
	cr_log_info("%s: %ld of %ld records at %s; sampled=%llu delivered=%llu dropped=%llu "
		    "corrupt=%llu", what, got, truth, site, a->sampled, a->delivered, a->dropped,
		    a->corrupt);
	cr_expect_eq(got, truth, "%s: %ld of %ld records at %s in the profile", what, got, truth,
		     site);
	cr_expect_eq(a->dropped, 0, "%s", what);
	cr_expect_eq(a->corrupt, 0, "%s", what);
	cr_expect_eq(a->sampled, a->delivered, "%s", what);
	return text;
}

void th_go_scale(double count, double size, double rate, double *c, double *s)
{
	if (count == 0 || size == 0) {
		*c = *s = 0;
		return;
	}
	if (rate <= 1) {
		*c = count;
		*s = size;
		return;
	}
	double f = 1 / (1 - exp(-(size / count) / rate));
	*c = (double)(int64_t)(count * f);
	*s = (double)(int64_t)(size * f);
}

bool th_text_acct(const char *text, struct th_acct *a)
{
	const char *p = strstr(text, "# llgo-heap: sampled=");
	return p && sscanf(p, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu corrupt=%llu",
			   &a->sampled, &a->delivered, &a->dropped, &a->corrupt) == 4;
}

unsigned long long th_acct_field(const char *text, const char *key)
{
	const char *line = strstr(text, "# llgo-heap: sampled=");
	if (!line)
		return 0;
	const char *nl = strchr(line, '\n');
	char k[64];
	snprintf(k, sizeof(k), " %s=", key);
	const char *p = strstr(line, k);
	if (!p || (nl && p > nl))
		return 0;
	return strtoull(p + strlen(k), NULL, 10);
}

enum { TH_TEXT_RECS = 65536 };

/* The records of text (malloc'ed, at most TH_TEXT_RECS), their number in *n. */
static struct th_text_rec *th_text_recs(const char *text, int *n)
{
	struct th_text_rec *recs = malloc(TH_TEXT_RECS * sizeof(*recs));
	cr_assert_not_null(recs);
	long period;
	*n = th_parse_text(text, &period, recs, TH_TEXT_RECS);
	return recs;
}

long th_text_count(const char *text, const char *func, long size)
{
	int n;
	struct th_text_rec *recs = th_text_recs(text, &n);
	long c = th_recs_count(recs, n, func, size);
	free(recs);
	return c;
}

long th_text_total(const char *text)
{
	int n;
	struct th_text_rec *recs = th_text_recs(text, &n);
	long t = 0;
	for (int i = 0; i < n; i++)
		t += recs[i].alloc_objects;
	free(recs);
	return t;
}

/* ---- profiles built by hand: return addresses of real functions ----------------------------- */

#define TH_KEEP(x) __asm__ volatile("" : : "r"(x) : "memory")
#define TH_RETURN_ADDRESS() ((uint64_t)(uintptr_t)__builtin_return_address(0))

__attribute__((noinline)) void th_pc_capture(uint64_t *pcs)
{
	pcs[0] = TH_RETURN_ADDRESS();
	TH_KEEP(pcs);
}

__attribute__((noinline)) void th_pc_site_a(uint64_t *pcs)
{
	th_pc_capture(pcs);
	pcs[1] = TH_RETURN_ADDRESS();
	TH_KEEP(pcs);
}
const int th_pc_site_a_call_line = __LINE__ - 4;

__attribute__((noinline)) void th_pc_site_b(uint64_t *pcs)
{
	th_pc_capture(pcs);
	pcs[1] = TH_RETURN_ADDRESS();
	TH_KEEP(pcs);
}

static inline __attribute__((always_inline)) void th_pc_inlined(uint64_t *pcs)
{
	th_pc_capture(pcs);
	TH_KEEP(pcs);
}

__attribute__((noinline)) void th_pc_site_with_a_much_longer_name_for_tabs(uint64_t *pcs)
{
	th_pc_inlined(pcs);
	pcs[1] = TH_RETURN_ADDRESS();
	TH_KEEP(pcs);
}

__attribute__((noinline)) void th_pc_outer(uint64_t *pcs, int which)
{
	if (which == 0)
		th_pc_site_a(pcs);
	else if (which == 1)
		th_pc_site_b(pcs);
	else
		th_pc_site_with_a_much_longer_name_for_tabs(pcs);
	pcs[2] = TH_RETURN_ADDRESS();
	TH_KEEP(pcs);
}

struct stack *th_stack(const uint64_t *pcs, uint32_t n)
{
	struct stack *s = calloc(1, sizeof(*s) + n * sizeof(uint64_t));
	cr_assert(s);
	s->npcs = n;
	if (n)
		memcpy(s->pcs, pcs, n * sizeof(uint64_t));
	return s;
}

struct stack *th_pc_stack(int which)
{
	uint64_t pcs[3];
	th_pc_outer(pcs, which);
	return th_stack(pcs, 3);
}

int th_raw_samples(const char *s, struct th_raw_sample *out, int max)
{
	int n = 0;
	const char *p = strstr(s, "\nSamples:\n");
	const char *end = strstr(s, "\nLocations\n");
	cr_assert(p && end, "no samples section:\n%s", s);
	for (p = strchr(p + 10, '\n'); p && p < end; p = strchr(p + 1, '\n')) {
		struct th_raw_sample r;
		int pos = 0;
		if (sscanf(p + 1, "%lld %lld %lld %lld:%n", &r.v[0], &r.v[1], &r.v[2], &r.v[3],
			   &pos) != 4)
			continue;
		r.nlocs = 0;
		for (const char *c = p + 1 + pos; *c && *c != '\n'; c++)
			if (*c >= '0' && *c <= '9' && (c[-1] == ' ' || c[-1] == ':'))
				r.nlocs++;
		if (n < max)
			out[n++] = r;
	}
	return n;
}

/* ---- profiles with whole stacks: `llgo-heap run` and Go's legacy text ----------------------- */

const char *th_basename(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* The line starting at l, without its newline, into line (cut to fit); its length. */
size_t th_line_copy(const char *l, char *line, size_t cap)
{
	size_t len = strcspn(l, "\n");
	if (len >= cap)
		len = cap - 1;
	memcpy(line, l, len);
	line[len] = '\0';
	return len;
}

/* Parse Go's legacy heap text as text.c writes it. */
void th_prof_parse(const char *text, struct th_prof *p)
{
	memset(p, 0, sizeof(*p));
	p->r = calloc(TH_PROF_MAX_RECS, sizeof(*p->r));
	cr_assert(p->r);
	const char *acc = strstr(text, "# llgo-heap: sampled=");
	cr_assert(acc, "no accounting line");
	cr_assert_eq(sscanf(acc, "# llgo-heap: sampled=%llu delivered=%llu dropped=%llu "
			    "corrupt=%llu", &p->sampled, &p->delivered, &p->dropped, &p->corrupt),
		     4);
	const char *uw = strstr(text, "# llgo-heap: unwind=");
	cr_assert(uw, "no unwind line");
	cr_assert_eq(sscanf(uw, "# llgo-heap: unwind=%15s unwound=%llu truncated=%llu", p->mode,
			    &p->unwound, &p->truncated), 3);
	struct th_prof_rec *cur = NULL;
	char prev_addr[32] = "";
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		char line[2048];
		th_line_copy(l, line, sizeof(line));
		long a, b, c, d;
		if (sscanf(line, "%ld: %ld [%ld: %ld] @", &a, &b, &c, &d) == 4) {
			cr_assert_lt(p->n, TH_PROF_MAX_RECS);
			cur = &p->r[p->n++];
			cur->count = c;
			cur->bytes = d;
			prev_addr[0] = '\0';
			continue;
		}
		if (!cur || strncmp(line, "#\t", 2) != 0)
			continue;
		/* "#\t0xADDR\tfunc+0xOFF\t\t\tfile:line" (func may be missing) */
		char *f1 = line + 2, *f2 = strchr(f1, '\t');
		if (!f2 || cur->nframes >= TH_PROF_MAX_FRAMES)
			continue;
		*f2++ = '\0';
		struct th_frame *fr = &cur->f[cur->nframes++];
		fr->inlined = strncmp(prev_addr, f1, sizeof(prev_addr) - 1) == 0;
		snprintf(prev_addr, sizeof(prev_addr), "%.31s", f1);
		while (*f2 == '\t')
			f2++;
		char *f3 = strchr(f2, '\t');
		if (f3)
			*f3++ = '\0';
		char *plus = strrchr(f2, '+');
		if (plus)
			*plus = '\0';
		snprintf(fr->func, sizeof(fr->func), "%s", f2);
		if (f3) {
			while (*f3 == '\t')
				f3++;
			char *colon = strrchr(f3, ':');
			if (colon) {
				*colon = '\0';
				fr->line = atoi(colon + 1);
			}
			if (strcmp(f3, "??") != 0)
				snprintf(fr->file, sizeof(fr->file), "%s", th_basename(f3));
		}
	}
}

void th_prof_free(struct th_prof *p)
{
	free(p->r);
}

/* Run prog under llgo-heap run at rate 1 in mode, parse its text profile; env: assignments
 * for the shell to put before llgo-heap run ("" for none). */
void th_prof_run_env(struct th_prof *p, const char *dir, const char *env, const char *mode,
		       const char *cmd)
{
	char *out = NULL;
	int rc = th_sh(&out, "cd %s && %s " TH_RUN " --unwind %s -r 1 -f text -o prof.heap -- %s",
			dir, env, mode, cmd);
	cr_assert_eq(rc, 0, "llgo-heap run --unwind %s -- %s failed (%d):\n%s", mode, cmd, rc,
		     out);
	free(out);
	char path[4200];
	snprintf(path, sizeof(path), "%s/prof.heap", dir);
	char *text = th_read_file(path);
	cr_assert(text, "no profile written");
	th_prof_parse(text, p);
	free(text);
	cr_expect_str_eq(p->mode, mode);
	cr_expect_eq(p->sampled, p->delivered + p->dropped + p->corrupt);
	cr_expect_eq(p->corrupt, 0);
	cr_expect_eq(p->dropped, 0, "%llu of %llu samples dropped", p->dropped, p->sampled);
}

void th_prof_run(struct th_prof *p, const char *dir, const char *mode, const char *cmd)
{
	th_prof_run_env(p, dir, "", mode, cmd);
}

/* Line of the "@name" marker in a program's source. */
int th_marker(const char *src, const char *name)
{
	char path[4200], tag[128];
	snprintf(path, sizeof(path), TH_PROGS_SRC "/%s", src);
	snprintf(tag, sizeof(tag), "@%s ", name);
	char *text = th_read_file(path);
	cr_assert(text, "cannot read %s", path);
	int line = 1, found = 0;
	for (const char *l = text; *l; l++) {
		if (*l == '\n') {
			line++;
			continue;
		}
		if (strncmp(l, tag, strlen(tag)) == 0) {
			found = line;
			break;
		}
	}
	free(text);
	cr_assert(found, "no marker %s in %s", tag, src);
	return found;
}

bool th_frame_is(const struct th_frame *f, const struct th_want *w)
{
	/* gcc's hot/cold split: "f.cold" is f's code */
	size_t len = strlen(w->func);
	if (strncmp(f->func, w->func, len) != 0 ||
	    (f->func[len] && strcmp(f->func + len, ".cold") != 0))
		return false;
	if (!w->marker)
		return true;
	return strcmp(f->file, th_basename(w->src)) == 0 && f->line == th_marker(w->src, w->marker);
}

const struct th_want th_main_root[3] = {
	{ "__libc_start_call_main", NULL, NULL },
	{ "__libc_start_main", NULL, NULL },
	{ "_start", NULL, NULL },
};
const struct th_want th_thread_root[2] = {
	{ "start_thread", NULL, NULL },
	{ "clone3", NULL, NULL },
};

void th_prof_describe(const struct th_prof_rec *r, char *out, size_t cap)
{
	size_t len = 0;
	out[0] = '\0';
	for (int i = 0; i < r->nframes && len + 1 < cap; i++)
		len += (size_t)snprintf(out + len, cap - len, "\n    %s%s %s:%d",
					r->f[i].inlined ? "(inl) " : "", r->f[i].func, r->f[i].file,
					r->f[i].line);
}

/*
 * The allocations whose stack is exactly head (from frame 0 on) followed by root: count them.
 * With root NULL, only the head must match, from frame 0, and the stack must end at a thread
 * start (either root).
 */
long th_prof_count(const struct th_prof *p, const struct th_want *head, int nhead,
		     const struct th_want *root, int nroot)
{
	long n = 0;
	for (int i = 0; i < p->n; i++) {
		const struct th_prof_rec *r = &p->r[i];
		if (r->nframes < nhead + nroot)
			continue;
		bool ok = true;
		for (int k = 0; k < nhead && ok; k++)
			ok = th_frame_is(&r->f[k], &head[k]);
		if (root) {
			ok = ok && r->nframes == nhead + nroot;
			for (int k = 0; k < nroot && ok; k++)
				ok = th_frame_is(&r->f[nhead + k], &root[k]);
		}
		if (ok)
			n += r->count;
	}
	return n;
}

/* Whether some stack holds want[0..n) as consecutive frames followed by root (to the end). */
long th_prof_count_tail(const struct th_prof *p, const struct th_want *want, int n,
			  const struct th_want *root, int nroot)
{
	long total = 0;
	for (int i = 0; i < p->n; i++) {
		const struct th_prof_rec *r = &p->r[i];
		int start = r->nframes - nroot - n;
		if (start < 0)
			continue;
		bool ok = true;
		for (int k = 0; k < n && ok; k++)
			ok = th_frame_is(&r->f[start + k], &want[k]);
		for (int k = 0; k < nroot && ok; k++)
			ok = th_frame_is(&r->f[start + n + k], &root[k]);
		if (ok)
			total += r->count;
	}
	return total;
}

void th_prof_dump(const struct th_prof *p)
{
	static char buf[16384];
	for (int i = 0; i < p->n; i++) {
		th_prof_describe(&p->r[i], buf, sizeof(buf));
		fprintf(stderr, "  %ld allocations:%s\n", p->r[i].count, buf);
	}
}

/* No stack ends in [truncated], and every stack reaches a thread's start. */
void th_prof_expect_whole(const struct th_prof *p)
{
	cr_expect_eq(p->truncated, 0, "%llu stacks truncated", p->truncated);
	for (int i = 0; i < p->n; i++) {
		const struct th_prof_rec *r = &p->r[i];
		bool whole = false;
		for (int k = 0; k < r->nframes; k++)
			whole |= strcmp(r->f[k].func, "__libc_start_call_main") == 0 ||
				 strcmp(r->f[k].func, "start_thread") == 0;
		char buf[8192];
		th_prof_describe(r, buf, sizeof(buf));
		cr_expect(whole, "a stack that does not reach its thread's start:%s", buf);
	}
}

/* ---- a fake llgo-heapd for the shim's tests ------------------------------------------------- */

static void th_fake_rec_cb(void *arg, const struct llgo_record *rec, const uint64_t *frames)
{
	struct th_fake *f = arg;
	if (f->nrecs == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 4096;
		f->recs = realloc(f->recs, f->cap * sizeof(*f->recs));
	}
	struct th_fake_rec *r = &f->recs[f->nrecs++];
	memset(r, 0, sizeof(*r));
	r->conn = f->cur_conn;
	r->tid = rec->tid;
	r->size = rec->size;
	r->rate = rec->rate;
	r->nframes = rec->nframes;
	for (uint32_t i = 0; i < rec->nframes && i < 8; i++)
		r->frames[i] = frames[i];
}

/* Map the rings of c's memfd up to ctl.ring_count, as llgo-heapd does. */
static void th_fake_sync_rings(struct th_fake *f, int c)
{
	struct th_fake_conn *k = &f->conns[c];
	if (k->memfd < 0 || !k->ctl)
		return;
	uint32_t n = atomic_load_explicit(&k->ctl->ring_count, memory_order_acquire);
	uint64_t page = k->ctl->page_size;
	while (k->rings_known < n && f->nrings < TH_FAKE_MAX_RINGS) {
		uint32_t id = k->rings_known;
		int rc = ring_reader_map_at(&f->rings[f->nrings], k->memfd,
					    llgo_ring_offset(id, k->ring_data_size, page),
					    llgo_ring_span(k->ring_data_size, page), id,
					    k->ring_data_size);
		if (rc == -EAGAIN)
			break;
		k->rings_known++;
		if (rc == 0) {
			f->ring_conn[f->nrings++] = c;
			k->nrings++;
		} else {
			f->map_errors++;
		}
	}
}

static void th_fake_drain_conn(struct th_fake *f, int c)
{
	th_fake_sync_rings(f, c);
	for (int i = 0; i < f->nrings; i++) {
		if (f->ring_conn[i] != c)
			continue;
		f->cur_conn = c;
		ring_reader_drain(&f->rings[i], th_fake_rec_cb, f);
	}
}

static void th_fake_account(struct th_fake *f, int c)
{
	struct ring_account sum = { 0 };
	for (int i = 0; i < f->nrings; i++) {
		if (f->ring_conn[i] != c)
			continue;
		struct ring_account a;
		ring_reader_account(&f->rings[i], &a);
		ring_account_add(&sum, &a);
	}
	if (f->conns[c].ctl) {
		ring_account_lost(&sum, atomic_load(&f->conns[c].ctl->lost_no_ring));
		ring_account_detached(&sum, atomic_load(&f->conns[c].ctl->lost_detached));
	}
	f->conns[c].acct = (struct th_acct){ sum.sampled, sum.delivered, sum.dropped, sum.corrupt };
}

static void th_fake_send(int fd, uint16_t type, const void *body, size_t n)
{
	unsigned char pkt[512];
	struct llgo_msg_header h = { .magic = LLGO_PROTO_MAGIC,
				     .version = LLGO_PROTO_VERSION,
				     .type = type,
				     .length = (uint32_t)(sizeof(h) + n) };
	memcpy(pkt, &h, sizeof(h));
	memcpy(pkt + sizeof(h), body, n);
	if (send(fd, pkt, sizeof(h) + n, MSG_NOSIGNAL) < 0)
		return;
}

static void th_fake_packet(struct th_fake *f, int c)
{
	struct th_fake_conn *k = &f->conns[c];
	unsigned char buf[LLGO_MSG_MAX];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cb;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
			     .msg_controllen = sizeof(cb.b) };
	ssize_t n = recvmsg(k->fd, &mh, MSG_CMSG_CLOEXEC);
	int fd = -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	if (n <= 0) {
		th_fake_drain_conn(f, c);
		k->closed = true;
		close(k->fd);
		k->fd = -1;
		if (fd >= 0)
			close(fd);
		return;
	}
	struct llgo_msg_header h;
	if ((size_t)n < sizeof(h)) {
		f->bad_packets++;
		goto out;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != LLGO_PROTO_MAGIC || h.version != LLGO_PROTO_VERSION || h.length != n) {
		f->bad_packets++;
		goto out;
	}
	if (h.type == LLGO_MSG_HELLO && n == sizeof(struct llgo_msg_hello) && fd >= 0) {
		struct llgo_msg_hello m;
		memcpy(&m, buf, sizeof(m));
		k->hello = true;
		k->flags = m.flags;
		k->rate_word = m.rate_word;
		k->ring_data_size = m.ring_data_size;
		memcpy(k->comm, m.comm, sizeof(k->comm));
		k->comm[sizeof(k->comm) - 1] = '\0';
		void *ctl = mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		k->ctl = ctl == MAP_FAILED ? NULL : ctl;
		/* One reader per ring, as in llgo-heapd: a reconnect with a memfd an earlier
		 * connection holds joins it (the daemon gives drained ring pages back, which a
		 * second reader of the same ring would find empty). */
		struct stat st;
		k->joined = -1;
		if ((m.flags & LLGO_HELLO_MEMFD) && fstat(fd, &st) == 0) {
			for (int e = 0; e < c && k->joined < 0; e++)
				if (f->conns[e].memfd >= 0 && f->conns[e].memfd_ino == st.st_ino)
					k->joined = e;
			if (k->joined < 0) {
				k->memfd = dup(fd);
				k->memfd_ino = st.st_ino;
			}
		}
		if (f->ack == TH_FAKE_ACK_REFUSE && (m.flags & LLGO_HELLO_NO_ACK)) {
			/* a daemon refuses a shim that awaits no answer by closing */
			close(k->fd);
			k->fd = -1;
			k->closed = true;
		} else if (f->ack != TH_FAKE_ACK_NEVER && !(m.flags & LLGO_HELLO_NO_ACK)) {
			int32_t body[2] = { f->ack == TH_FAKE_ACK_REFUSE ? EPERM : 0, 0 };
			th_fake_send(k->fd, LLGO_MSG_HELLO_ACK, body, sizeof(body));
		}
	} else if (h.type == LLGO_MSG_ADD_RING && n == sizeof(struct llgo_msg_add_ring) &&
		   fd < 0 && (k->memfd >= 0 || k->joined >= 0)) {
		th_fake_sync_rings(f, k->joined >= 0 ? k->joined : c);
	} else if (h.type == LLGO_MSG_ADD_RING && n == sizeof(struct llgo_msg_add_ring) &&
		   fd >= 0 && f->nrings < TH_FAKE_MAX_RINGS) {
		struct llgo_msg_add_ring m;
		memcpy(&m, buf, sizeof(m));
		if (ring_reader_map(&f->rings[f->nrings], fd, m.ring_id, m.data_size) == 0) {
			f->ring_conn[f->nrings++] = c;
			k->nrings++;
		} else {
			f->map_errors++;
		}
	} else if (h.type == LLGO_MSG_ADD_LIVE && n == sizeof(h) && fd >= 0) {
		f->live_tables++; /* the live-object table (test_inuse.c tests its content) */
	} else if (h.type == LLGO_MSG_WAKE && n == sizeof(h) && fd < 0) {
		f->wakes++;
		if (!f->ignore_wake)
			th_fake_drain_conn(f, c);
	} else if (h.type == LLGO_MSG_BYE) {
		k->bye = true;
		th_fake_drain_conn(f, c);
		unsigned char end[sizeof(struct llgo_msg_end) - sizeof(h)];
		memset(end, 0, sizeof(end));
		th_fake_send(k->fd, LLGO_MSG_END, end, sizeof(end));
	} else {
		f->bad_packets++;
	}
out:
	if (fd >= 0)
		close(fd);
}

static void *th_fake_main(void *arg)
{
	struct th_fake *f = arg;
	for (;;) {
		/* Once stopped, one more pass over whatever is still pending, until nothing is: a
		 * process connects, sends HELLO without waiting and may exit before this thread
		 * accepted it (the connection waits in the backlog). */
		bool stopping = atomic_load(&f->stop);
		struct pollfd p[TH_FAKE_MAX_CONNS + 1];
		int idx[TH_FAKE_MAX_CONNS + 1], np = 0;
		p[np].fd = f->lfd;
		p[np].events = POLLIN;
		idx[np++] = -1;
		for (int c = 0; c < f->nconns; c++) {
			if (f->conns[c].fd < 0)
				continue;
			p[np].fd = f->conns[c].fd;
			p[np].events = POLLIN;
			idx[np++] = c;
		}
		int r = poll(p, (nfds_t)np, stopping ? 0 : 1);
		if (stopping && r <= 0)
			break;
		for (int i = 0; r > 0 && i < np; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (idx[i] < 0) {
				int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
				if (fd < 0 || f->nconns == TH_FAKE_MAX_CONNS) {
					if (fd >= 0)
						close(fd);
					continue;
				}
				struct th_fake_conn *k = &f->conns[f->nconns];
				memset(k, 0, sizeof(*k));
				k->fd = fd;
				k->memfd = -1;
				k->joined = -1;
				struct ucred cred;
				socklen_t len = sizeof(cred);
				if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
					k->pid = cred.pid;
				f->nconns++;
			} else {
				th_fake_packet(f, idx[i]);
			}
		}
		if (f->drain)
			for (int c = 0; c < f->nconns; c++)
				th_fake_drain_conn(f, c);
	}
	for (int c = 0; c < f->nconns; c++) {
		th_fake_drain_conn(f, c);
		th_fake_account(f, c);
	}
	return NULL;
}

struct th_fake *th_fake_start(enum th_fake_ack ack, bool drain)
{
	struct th_fake *f = calloc(1, sizeof(*f));
	cr_assert(f);
	f->rings = calloc(TH_FAKE_MAX_RINGS, sizeof(*f->rings));
	cr_assert(f->rings);
	f->ack = ack;
	f->drain = drain;
	f->ignore_wake = !drain;
	snprintf(f->dir, sizeof(f->dir), "/tmp/llgo-shim.XXXXXX");
	cr_assert(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/d.sock", f->dir);
	snprintf(f->sock_env, sizeof(f->sock_env), "LLGO_HEAP_SOCKET=%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	cr_assert(f->lfd >= 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(f->lfd, 64), 0);
	cr_assert_eq(pthread_create(&f->th, NULL, th_fake_main, f), 0);
	return f;
}

/* Stop the listener (after the programs exited), drain and account everything. */
void th_fake_stop(struct th_fake *f)
{
	atomic_store(&f->stop, true);
	pthread_join(f->th, NULL);
}

void th_fake_free(struct th_fake *f)
{
	for (int i = 0; i < f->nrings; i++)
		ring_reader_unmap(&f->rings[i]);
	for (int c = 0; c < f->nconns; c++) {
		if (f->conns[c].fd >= 0)
			close(f->conns[c].fd);
		if (f->conns[c].ctl)
			munmap(f->conns[c].ctl, LLGO_CTL_SIZE);
		if (f->conns[c].memfd >= 0)
			close(f->conns[c].memfd);
	}
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
	free(f->recs);
	free(f->rings);
	free(f);
}

int th_fake_conn_of(struct th_fake *f, pid_t pid)
{
	for (int c = 0; c < f->nconns; c++)
		if (f->conns[c].pid == pid && f->conns[c].hello)
			return c;
	return -1;
}

/* Run argv with LD_PRELOAD of the plain shim (or nothing preloaded when !shim) and extra
 * NAME=VALUE strings (NULL-terminated), capturing stdout and stderr together. */
void th_exec_with(struct th_exec *r, bool shim, const char *const *env_extra,
			  const char *const *argv)
{
	char *envp[32];
	int ne = 0;
	static char preload[512];
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", LLGO_PLAIN_SHIM);
	if (shim)
		envp[ne++] = preload;
	envp[ne++] = "PATH=/usr/bin:/bin";
	for (int i = 0; env_extra && env_extra[i] && ne < 30; i++)
		envp[ne++] = (char *)env_extra[i];
	envp[ne] = NULL;
	int pfd[2];
	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid = th_fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		execve(argv[0], (char *const *)argv, envp);
		_exit(127);
	}
	close(pfd[1]);
	size_t len = 0;
	ssize_t n;
	while ((n = read(pfd[0], r->out + len, sizeof(r->out) - 1 - len)) > 0)
		len += (size_t)n;
	r->out[len] = '\0';
	close(pfd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	r->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void th_exec(struct th_exec *r, const char *const *env_extra, const char *const *argv)
{
	th_exec_with(r, true, env_extra, argv);
}

/* th_fake_run at rate 1 on a new fake daemon that drains as it goes: the fake, stopped. */
struct th_fake *th_fake_rate1(struct th_exec *r, const char *const *argv)
{
	struct th_fake *f = th_fake_start(TH_FAKE_ACK_OK, true);
	th_fake_run(f, r, "LLGO_HEAP_RATE=1", NULL, argv);
	return f;
}

/* Run argv under the shim attached to f, with the settings rate and more (each NULL or a
 * NAME=VALUE string), then stop f; the program must exit 0. */
void th_fake_run(struct th_fake *f, struct th_exec *r, const char *rate, const char *more,
		     const char *const *argv)
{
	const char *env[4] = { f->sock_env };
	int n = 1;
	if (rate)
		env[n++] = rate;
	if (more)
		env[n++] = more;
	th_exec(r, env, argv);
	th_fake_stop(f);
	cr_assert_eq(r->status, 0, "output:\n%s", r->out);
}

void th_syms_load(struct th_syms *y, const char *path)
{
	cr_assert_neq(elf_version(EV_CURRENT), EV_NONE);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0, "open %s", path);
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	cr_assert(e);
	y->n = 0;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(e, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		size_t count = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; i < count && y->n < 4096; i++) {
			GElf_Sym s;
			if (!gelf_getsym(d, (int)i, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC ||
			    !s.st_value)
				continue;
			const char *name = elf_strptr(e, sh.sh_link, s.st_name);
			if (!name)
				continue;
			snprintf(y->s[y->n].name, sizeof(y->s[0].name), "%s", name);
			y->s[y->n].lo = s.st_value;
			y->s[y->n].hi = s.st_value + (s.st_size ? s.st_size : 1);
			y->n++;
		}
	}
	elf_end(e);
	close(fd);
}

uint64_t th_syms_addr(const struct th_syms *y, const char *name)
{
	for (size_t i = 0; i < y->n; i++)
		if (strcmp(y->s[i].name, name) == 0)
			return y->s[i].lo;
	return 0;
}

/* The function a return address (runtime) belongs to, or "?". */
const char *th_syms_name(const struct th_syms *y, uint64_t pc)
{
	uint64_t at = pc - 1 - y->slide;
	for (size_t i = 0; i < y->n; i++)
		if (at >= y->s[i].lo && at < y->s[i].hi)
			return y->s[i].name;
	return "?";
}

/* The symbols of the program at path, placed where a run that printed out had them. */
void th_syms_of_run(struct th_syms *y, const char *path, const char *out)
{
	th_syms_load(y, path);
	th_syms_slide(y, out);
}

void th_syms_slide(struct th_syms *y, const char *out)
{
	const char *m = strstr(out, "main 0x");
	cr_assert(m, "program did not print main's address:\n%s", out);
	uint64_t rt = strtoull(m + 5, NULL, 16);
	uint64_t lt = th_syms_addr(y, "main");
	cr_assert(lt, "no main in the symbol table");
	y->slide = rt - lt;
}

/* Records of connection c whose frame 0 is in func with the given size (0: any). */
long th_fake_count_site(struct th_fake *f, const struct th_syms *y, int c, const char *func,
		       uint64_t size)
{
	long n = 0;
	for (size_t i = 0; i < f->nrecs; i++) {
		const struct th_fake_rec *r = &f->recs[i];
		if (r->conn != c || !r->nframes || (size && r->size != size))
			continue;
		n += strcmp(th_syms_name(y, r->frames[0]), func) == 0;
	}
	return n;
}

void th_fake_expect_accounting(struct th_fake *f, int c)
{
	const struct th_acct *a = &f->conns[c].acct;
	cr_expect_eq(a->sampled, a->delivered + a->dropped + a->corrupt,
		     "sampled %llu != delivered %llu + dropped %llu + corrupt %llu",
		     (unsigned long long)a->sampled, (unsigned long long)a->delivered,
		     (unsigned long long)a->dropped, (unsigned long long)a->corrupt);
	cr_expect_eq(a->corrupt, 0);
}

/* ---- periodic snapshots in a dump folder: dump_grow and the files ----------------------------- */

/* TH_GROW (or path, run with argv0) as uid, keeping mb MiB at dump_grow_site (0: until killed);
 * cgroup: a cgroup.procs file the child enters first (NULL: none). Waits for "grown" when
 * mb > 0, and for the daemon to list it. */
void th_grow_start(struct th_grow *p, const struct heapd *d, uid_t uid, const char *path,
			  const char *argv0, int mb, const char *cgroup)
{
	int out[2];
	th_pipe(out);
	p->pid = th_fork();
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(out[1], 1);
		close(out[0]);
		close(out[1]);
		if (cgroup) {
			FILE *f = fopen(cgroup, "w");
			if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0)
				_exit(125);
		}
		if (uid != 0) {
			gid_t g = (gid_t)uid;
			if (setgroups(0, NULL) != 0 || setresgid(g, g, g) != 0 ||
			    setresuid(uid, uid, uid) != 0)
				_exit(126);
			/* a change of uid clears the death signal: set it again */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() == 1)
				_exit(126);
		}
		setenv("LD_PRELOAD", LLGO_PLAIN_SHIM, 1);
		setenv("LLGO_HEAP_SOCKET", d->sock, 1);
		setenv("LLGO_HEAP_RATE", "65536", 1);
		char n[16];
		snprintf(n, sizeof(n), "%d", mb);
		execl(path ? path : TH_GROW, argv0 ? argv0 : "dump_grow", n, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	p->out = fdopen(out[0], "r");
	cr_assert(p->out);
	if (mb > 0) {
		char line[64];
		cr_assert(fgets(line, sizeof(line), p->out) && strncmp(line, "grown", 5) == 0,
			  "dump_grow (uid %u) did not start", (unsigned)uid);
	}
	th_wait_listed(d->sock, p->pid, 5000);
}

/* The wait status. */
int th_grow_end(struct th_grow *p, bool kill_it)
{
	if (kill_it)
		kill(p->pid, SIGKILL);
	int st = 0;
	cr_assert_eq(waitpid(p->pid, &st, 0), p->pid);
	fclose(p->out);
	return st;
}

/* Files in dir/uid of pid (0: any) whose name has `kind` (".heap." or ".oom."); their names
 * (up to max) in names, each DUMP_NAME_MAX long. Returns how many. */
int th_dump_files(const char *dumps, uid_t uid, pid_t pid, const char *kind, char (*names)[128],
		    int max)
{
	char path[512], pre[64];
	snprintf(path, sizeof(path), "%s/%u", dumps, (unsigned)uid);
	snprintf(pre, sizeof(pre), ".%d.", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(dir)) != NULL) {
		if (de->d_name[0] == '.' || !strstr(de->d_name, kind) ||
		    (pid && !strstr(de->d_name, pre)))
			continue;
		if (n < max)
			snprintf(names[n], 128, "%.127s", de->d_name);
		n++;
	}
	closedir(dir);
	return n;
}

/* Wait (up to ms) until dir/uid holds at least want such files. */
int th_dump_wait(const char *dumps, uid_t uid, pid_t pid, const char *kind, int want,
			 unsigned ms)
{
	char names[4][128];
	int n = 0;
	for (unsigned t = 0; t < ms; t += 50) {
		if ((n = th_dump_files(dumps, uid, pid, kind, names, 4)) >= want)
			break;
		th_sleep_ms(50);
	}
	return n;
}

/* The function of the first row of `go tool pprof -top` (in-use bytes) of file. */
void th_pprof_top(const char *file, char *fn, size_t cap)
{
	char *out = NULL;
	int rc = th_sh(&out, "HOME=/tmp GOCACHE=/tmp/llgo-dump-gocache go tool pprof -top "
			      "-sample_index=inuse_space '%s'", file);
	cr_assert_eq(rc, 0, "go tool pprof failed on %s:\n%s", file, out);
	fn[0] = '\0';
	char *h = strstr(out, "flat%");
	char *row = h ? strchr(h, '\n') : NULL;
	if (row) {
		char *end = strchr(row + 1, '\n');
		if (end)
			*end = '\0';
		char *last = strrchr(row + 1, ' ');
		snprintf(fn, cap, "%s", last ? last + 1 : row + 1);
	}
	cr_assert(fn[0], "no rows in go tool pprof -top of %s:\n%s", file, out);
	free(out);
}

/* A daemon's folder (heapd_init: not started yet), and its dumps folder's name in dumps. */
void th_dump_init(struct heapd *d, char dumps[256])
{
	heapd_init(d, NULL);
	snprintf(dumps, 256, "%s/dumps", d->dir);
}

/* ---- BPF: programs attached to the shim's USDT probes --------------------------------------- */

const char *th_bpf_unavailable(void)
{
	static char why[256];
	if (geteuid() != 0)
		return "not root (needs CAP_BPF and CAP_PERFMON)";
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		return "the kernel has no BTF (/sys/kernel/btf/vmlinux)";
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
	    (major < 5 || (major == 5 && minor < 8))) {
		snprintf(why, sizeof(why), "kernel %s is older than 5.8", u.release);
		return why;
	}
	return NULL;
}

/* ---- /proc --------------------------------------------------------------------------------- */

long th_status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/status");
	FILE *f = fopen(path, "r");
	long v = -1;
	size_t kl = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':')
			v = atol(line + kl + 1);
	if (f)
		fclose(f);
	return v;
}

/* /proc/PID/stat into buf: the text after the command's closing parenthesis (" S ppid ..."),
 * or NULL when pid is gone. */
static const char *th_proc_stat(pid_t pid, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, cap - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strrchr(buf, ')');
}

long th_cpu_ticks(pid_t pid)
{
	char buf[1024];
	const char *p = th_proc_stat(pid, buf, sizeof(buf));
	if (!p)
		return -1;
	unsigned long ut = 0, st = 0;
	/* fields after ")": 3 state ... 14 utime 15 stime */
	if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

char th_proc_state(pid_t pid)
{
	char buf[1024];
	const char *p = th_proc_stat(pid, buf, sizeof(buf));
	return p && p[1] == ' ' ? p[2] : 0;
}
