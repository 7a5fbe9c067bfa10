// SPDX-License-Identifier: MIT
/*
 * test_adopt.c: a restarted llgo-heapd takes back only the processes an earlier daemon of its
 * socket accepted, as what they were accepted as (agent/adopt.c, agent/vouch.c).
 *   - vouch: SipHash-2-4-128 against the reference vectors; a tag binds every field (pid,
 *     start time, uid, gid, the memfd's device and inode) and the socket; the key file is
 *     made once, 0600, and a planted one (another owner, readable by others, a link) is not
 *     used.
 *   - adopt, end to end (real daemons killed with SIGKILL and restarted on the same socket,
 *     nobody's processes forked from the test): a memfd nobody made to look like the shim's,
 *     inherited by a setuid-root program, or handed to a process of root's (with a tag copied
 *     from nobody's own genuine page), is not taken back, so nobody's records never reach a
 *     profile of root's; a process of nobody's that changed since its HELLO (made itself not
 *     dumpable, kept a saved uid 0, exec'd a setuid program with its memfd) is not taken back;
 *     a genuine shimmed program is, with the records the dead daemon had not read; and a
 *     program that is not taken back runs on and attaches again by HELLO.
 * LLGO_TEST_HEAPD=path runs the end-to-end tests against another build (an older daemon
 * takes every one of these processes back).
 */
#include "life_util.h"
#include "sec_util.h"

#include <linux/capability.h>
#include <sys/syscall.h>

#include "../agent/server/vouch.h"

#define PROG(name) E2E_PROGS "/" name
#define AD_DATA LLGO_RING_MIN_DATA

/* ---- vouch.c in-process --------------------------------------------------------------------- */

static void ad_hex(const char *hex, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* veorq/SipHash vectors.h, vectors_sip128: key 00..0f, message 00..len-1. */
Test(vouch, siphash_reference_vectors)
{
	static const struct {
		size_t len;
		const char *hex;
	} want[] = {
		{ 0, "a3817f04ba25a8e66df67214c7550293" },
		{ 1, "da87c1d86b99af44347659119b22fc45" },
		{ 7, "a1f1ebbed8dbc153c0b84aa61ff08239" },
		{ 8, "3b62a9ba6258f5610f83e264f31497b4" },
		{ 15, "5493e99933b0a8117e08ec0f97cfc3d9" },
		{ 16, "6ee2a4ca67b054bbfd3315bf85230577" },
		{ 63, "5150d1772f50834a503e069a973fbd7c" },
	};
	uint8_t key[16], msg[64];
	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		uint8_t got[16], exp[16];
		ad_hex(want[i].hex, exp, 16);
		vouch_siphash128(key, msg, want[i].len, got);
		cr_expect(memcmp(got, exp, 16) == 0, "SipHash-2-4-128 of %zu bytes", want[i].len);
	}
}

static char *ad_tmpdir(void)
{
	char *dir = strdup("/tmp/llgo-adopt.XXXXXX");
	cr_assert(mkdtemp(dir));
	return dir;
}

static void ad_rmdir(const char *dir)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (!getenv("LLGO_KEEP_TMP") && system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

Test(vouch, tag_binds_every_field_and_the_socket)
{
	char *dir = ad_tmpdir(), sock[256], why[512];
	snprintf(sock, sizeof(sock), "%s/heapd.sock", dir);
	struct vouch_key key;
	cr_assert_eq(vouch_key_load(&key, sock, why, sizeof(why)), 0, "%s", why);
	cr_assert(key.ok);
	struct vouch_subject s = { .pid = 4242, .uid = 1000, .gid = 1000, .start = 987654,
				   .dev = 12, .ino = 34567 };
	uint8_t tag[VOUCH_TAG_LEN];
	vouch_tag(&key, &s, tag);
	cr_expect(vouch_check(&key, &s, tag));
	struct vouch_subject o;
	o = s, o.pid++;
	cr_expect(!vouch_check(&key, &o, tag), "pid");
	o = s, o.uid = 0;
	cr_expect(!vouch_check(&key, &o, tag), "uid");
	o = s, o.gid = 0;
	cr_expect(!vouch_check(&key, &o, tag), "gid");
	o = s, o.start++;
	cr_expect(!vouch_check(&key, &o, tag), "start time");
	o = s, o.dev++;
	cr_expect(!vouch_check(&key, &o, tag), "device");
	o = s, o.ino++;
	cr_expect(!vouch_check(&key, &o, tag), "inode");
	uint8_t bad[VOUCH_TAG_LEN];
	memcpy(bad, tag, sizeof(bad));
	bad[15] ^= 1;
	cr_expect(!vouch_check(&key, &s, bad), "a tag one bit off");
	/* the same file, another socket path: another key */
	char other[300];
	snprintf(other, sizeof(other), "%s/other.sock", dir);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "cp -p '%s.key' '%s.key'", sock, other);
	cr_assert_eq(system(cmd), 0);
	struct vouch_key key2;
	cr_assert_eq(vouch_key_load(&key2, other, why, sizeof(why)), 0, "%s", why);
	cr_expect(!vouch_check(&key2, &s, tag), "a tag of another socket's daemon");
	/* the page carries uid, gid and tag */
	struct llgo_ctl ctl;
	memset(&ctl, 0, sizeof(ctl));
	vouch_write(&key, &ctl, &s);
	cr_expect_eq(ctl.vouch_uid, 1000);
	cr_expect_eq(ctl.vouch_gid, 1000);
	cr_expect(memcmp(ctl.vouch_tag, tag, VOUCH_TAG_LEN) == 0);
	ad_rmdir(dir);
	free(dir);
}

Test(vouch, key_file_made_once_and_a_planted_one_is_not_used)
{
	char *dir = ad_tmpdir(), sock[256], path[300], why[512];
	snprintf(sock, sizeof(sock), "%s/heapd.sock", dir);
	snprintf(path, sizeof(path), "%s.key", sock);
	struct vouch_key a, b;
	cr_assert_eq(vouch_key_load(&a, sock, why, sizeof(why)), 0, "%s", why);
	struct stat st;
	cr_assert_eq(lstat(path, &st), 0);
	cr_expect(S_ISREG(st.st_mode));
	cr_expect_eq(st.st_mode & 0777, 0600, "mode %o", (unsigned)(st.st_mode & 0777));
	cr_expect_eq(st.st_size, VOUCH_KEY_LEN);
	cr_expect_eq(st.st_uid, geteuid());
	/* the next daemon reads the same key */
	cr_assert_eq(vouch_key_load(&b, sock, why, sizeof(why)), 0, "%s", why);
	cr_expect(memcmp(a.k, b.k, VOUCH_KEY_LEN) == 0);
	/* readable by others: not a secret */
	cr_assert_eq(chmod(path, 0644), 0);
	cr_expect_neq(vouch_key_load(&b, sock, why, sizeof(why)), 0);
	cr_expect(!b.ok);
	cr_expect(strstr(why, "mode") != NULL, "%s", why);
	cr_assert_eq(chmod(path, 0600), 0);
	if (geteuid() == 0) {
		/* another user's file: whatever it holds, that user knows it */
		cr_assert_eq(chown(path, nobody_uid(), nobody_gid()), 0);
		cr_expect_neq(vouch_key_load(&b, sock, why, sizeof(why)), 0);
		cr_expect(!b.ok);
		cr_expect(strstr(why, "owned by") != NULL, "%s", why);
		cr_assert_eq(chown(path, 0, 0), 0);
	}
	/* a symbolic link to a file of ours is not followed */
	char real[320];
	snprintf(real, sizeof(real), "%s/real.key", dir);
	cr_assert_eq(rename(path, real), 0);
	cr_assert_eq(symlink(real, path), 0);
	cr_expect_neq(vouch_key_load(&b, sock, why, sizeof(why)), 0);
	cr_expect(!b.ok);
	cr_expect(strstr(why, "symbolic link") != NULL, "%s", why);
	/* gone: a new key, which no earlier tag matches */
	cr_assert_eq(unlink(path), 0);
	cr_assert_eq(vouch_key_load(&b, sock, why, sizeof(why)), 0, "%s", why);
	cr_expect(memcmp(a.k, b.k, VOUCH_KEY_LEN) != 0);
	ad_rmdir(dir);
	free(dir);
}

/* ---- processes that look profiled ----------------------------------------------------------- */

/* A memfd laid out as the shim's ("llgo-heap": control page for sock, ring 0 holding nrec
 * records of nobody's), kept across exec unless cloexec. Run in forked children: no
 * assertions, -1 on failure. */
static int ad_memfd(const char *sock, bool cloexec, unsigned nrec, struct llgo_ctl **ctl_out)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t size = llgo_ring_offset(1, AD_DATA, page);
	int fd = memfd_create("llgo-heap", (cloexec ? MFD_CLOEXEC : 0) | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
		return -1;
	unsigned char *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		return -1;
	struct llgo_ctl *ctl = (struct llgo_ctl *)base;
	ctl->magic = LLGO_CTL_MAGIC;
	ctl->version = LLGO_CTL_VERSION;
	ctl->size = LLGO_CTL_SIZE;
	ctl->page_size = (uint32_t)page;
	ctl->ring_data_size = AD_DATA;
	snprintf(ctl->socket_path, sizeof(ctl->socket_path), "%s", sock);
	atomic_store(&ctl->rate_word, LLGO_RATE_WORD_EVERY);
	atomic_store(&ctl->want_rate_word, LLGO_RATE_WORD_EVERY);
	atomic_store(&ctl->shim_state, LLGO_SHIM_ATTACHED);
	struct fring r;
	memset(&r, 0, sizeof(r));
	r.fd = fd;
	r.size = AD_DATA;
	r.hdr = (struct llgo_ring_header *)(base + llgo_ring_offset(0, AD_DATA, page));
	r.data = (unsigned char *)r.hdr + LLGO_RING_HEADER_SIZE;
	r.hdr->magic = LLGO_RING_MAGIC;
	r.hdr->version = LLGO_RING_VERSION;
	r.hdr->header_size = LLGO_RING_HEADER_SIZE;
	r.hdr->data_size = AD_DATA;
	atomic_store(&r.hdr->state, LLGO_RING_OWNED);
	uint64_t st[2] = { RET(srv_site_alpha), RET(srv_site_caller) };
	for (unsigned i = 0; i < nrec; i++)
		if (!fring_push(&r, st, 2, 4096, 1, false))
			return -1;
	atomic_store_explicit(&ctl->ring_count, 1, memory_order_release);
	if (ctl_out)
		*ctl_out = ctl;
	return fd;
}

/* HELLO with memfd fd as the shim sends it (LLGO_HELLO_MEMFD); the HELLO_ACK status. */
static int ad_hello(const char *sock, int fd)
{
	int s = heapd_connect(sock);
	if (s < 0)
		return s;
	struct llgo_msg_hello m;
	hello_init(&m, AD_DATA, LLGO_RATE_WORD_EVERY);
	m.flags = LLGO_HELLO_MEMFD;
	if (msg_send(s, &m, sizeof(m), fd) != 0)
		return -EIO;
	return wait_reply(s, LLGO_MSG_HELLO_ACK); /* s stays open: the session lives */
}

/* The daemon's verdict on pid in what d logged since it started: 1 taken back, 0 not taken
 * back (its reason in why), -1 nothing within 20 s. */
static int ad_verdict(const struct heapd *d, pid_t pid, char *why, size_t n)
{
	char yes[64], no[64];
	snprintf(yes, sizeof(yes), "pid %d (", (int)pid);
	snprintf(no, sizeof(no), "pid %d: not taken back: ", (int)pid);
	for (long deadline = lu_now_ms() + 20000; lu_now_ms() < deadline; lu_sleep_ms(20)) {
		char *log = heapd_log(d);
		size_t len = strlen(log);
		const char *from = log + ((size_t)d->log_start <= len ? (size_t)d->log_start : 0);
		int verdict = -1;
		for (const char *line = from; *line && verdict < 0;) {
			const char *nl = strchr(line, '\n');
			size_t ll = nl ? (size_t)(nl - line) : strlen(line);
			char buf[1024];
			snprintf(buf, sizeof(buf), "%.*s", (int)ll, line);
			const char *p;
			if ((p = strstr(buf, no)) != NULL) {
				verdict = 0;
				snprintf(why, n, "%s", p + strlen(no));
			} else if (strstr(buf, yes) && strstr(buf, "): taken back")) {
				verdict = 1;
				snprintf(why, n, "%s", buf);
			}
			line += ll + (nl ? 1 : 0);
		}
		free(log);
		if (verdict >= 0)
			return verdict;
	}
	snprintf(why, n, "nothing logged");
	return -1;
}

/* pid was not taken back by d2 (the reason logged) and has no session there. */
static void ad_expect_refused(const struct heapd *d2, pid_t pid, const char *what)
{
	char why[1024];
	int v = ad_verdict(d2, pid, why, sizeof(why));
	struct llgo_list_entry e;
	bool listed = heapd_list_pid(d2->sock, pid, &e);
	cr_expect_eq(v, 0, "%s (pid %d): %s", what, (int)pid, why);
	cr_expect(!listed, "%s: taken back as uid %u's session, %llu records delivered", what,
		  listed ? e.uid : 0, listed ? (unsigned long long)e.delivered : 0ull);
	cr_log_info("%s: %s", what, why);
}

/* SIGKILL d, and start another daemon on its socket (the restart that takes processes back). */
static void ad_restart(struct heapd *d, struct heapd *d2)
{
	cr_assert_eq(kill(d->pid, SIGKILL), 0);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
	heapd_start(d2, d->dir, NULL);
}

/* Wait for one byte (or EOF, when the writer exec'd) on fd; false after 10 s. */
static bool ad_wait_fd(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, 10000) != 1)
		return false;
	char c;
	return read(fd, &c, 1) >= 0;
}

static void ad_kill(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/* As root (else the test is skipped): a daemon, and a setuid-root program in its folder. */
static void ad_start_as_root(struct heapd *d, char *suid, size_t n)
{
	need_root();
	heapd_start(d, NULL, NULL);
	make_setuid_sleep(d->dir, suid, n);
}

/* ---- the attack: nobody's memfd in a process of root's -------------------------------------- */

/*
 * nobody makes a memfd that looks like the shim's, with ten records of its own in ring 0,
 * keeps it across exec and runs a setuid-root program (su would do). The restarted daemon
 * must not take that root process back: it would make a session of uid 0 whose profile
 * holds whatever nobody writes into the memfd.
 */
Test(adopt, crafted_memfd_in_a_setuid_process_is_not_taken_back, .timeout = 120)
{
	struct heapd d, d2;
	char suid[128];
	ad_start_as_root(&d, suid, sizeof(suid));
	int execd[2];
	cr_assert_eq(pipe2(execd, O_CLOEXEC), 0);
	pid_t a = fork();
	cr_assert_geq(a, 0);
	if (a == 0) {
		become_nobody();
		if (ad_memfd(d.sock, false, 10, NULL) < 0)
			_exit(121);
		execl(suid, "suid-sleep", "60", (char *)NULL);
		_exit(123);
	}
	close(execd[1]);
	cr_assert(ad_wait_fd(execd[0]), "the setuid program did not start");
	close(execd[0]);
	lu_sleep_ms(50);
	int st;
	cr_assert_eq(waitpid(a, &st, WNOHANG), 0, "the attacker exited: status 0x%x", st);
	ad_restart(&d, &d2);
	ad_expect_refused(&d2, a, "setuid root, holding nobody's memfd");
	ad_kill(a);
	heapd_stop_clean(&d2);
	heapd_cleanup(&d);
}

static int ad_send_fds(int sock, const int *fds, int n)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cbuf;
	memset(&cbuf, 0, sizeof(cbuf));
	char c = 'f';
	struct iovec iov = { .iov_base = &c, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
			     .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int)) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, (size_t)n * sizeof(int));
	return sendmsg(sock, &mh, 0) == 1 ? 0 : -1;
}

/*
 * nobody attaches a fake shim of its own (N: a genuine HELLO, so the daemon vouches for its
 * memfd), then makes a second memfd with N's vouch copied into its page and ten records, and
 * hands both to a process of root's (all uids 0: su after it switched, a service that takes
 * descriptors). The restarted daemon takes N back, as nobody's, and not the root process:
 * N's vouch names N's pid and memfd, and a vouch for the root process cannot be made
 * without the daemons' key.
 */
Test(adopt, memfd_handed_to_a_root_process_is_not_taken_back, .timeout = 120)
{
	need_root();
	struct heapd d, d2;
	heapd_start(&d, NULL, NULL);
	int sp[2], ready[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
	pid_t c = fork(); /* root's: takes the descriptors and keeps them */
	cr_assert_geq(c, 0);
	if (c == 0) {
		char b;
		union {
			char buf[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} cbuf;
		struct iovec iov = { .iov_base = &b, .iov_len = 1 };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.buf,
				     .msg_controllen = sizeof(cbuf.buf) };
		if (recvmsg(sp[1], &mh, 0) != 1 || write(ready[1], "c", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	pid_t n = fork(); /* nobody's */
	cr_assert_geq(n, 0);
	if (n == 0) {
		become_nobody();
		struct llgo_ctl *mine, *forged;
		int m1 = ad_memfd(d.sock, true, 0, &mine);
		if (m1 < 0 || ad_hello(d.sock, m1) != 0)
			_exit(2);
		int m2 = ad_memfd(d.sock, true, 10, &forged);
		if (m2 < 0)
			_exit(3);
		forged->vouch_uid = mine->vouch_uid;
		forged->vouch_gid = mine->vouch_gid;
		memcpy(forged->vouch_tag, mine->vouch_tag, sizeof(forged->vouch_tag));
		int fds[2] = { m1, m2 };
		if (ad_send_fds(sp[0], fds, 2) != 0)
			_exit(4);
		for (;;)
			pause();
	}
	close(ready[1]);
	cr_assert(ad_wait_fd(ready[0]), "the root process got no descriptors");
	close(ready[0]);
	cr_assert(heapd_list_pid(d.sock, n, &(struct llgo_list_entry){ 0 }),
		  "nobody's fake shim did not attach:\n%s", heapd_log(&d));
	ad_restart(&d, &d2);
	char why[1024];
	int vn = ad_verdict(&d2, n, why, sizeof(why));
	struct llgo_list_entry e;
	cr_expect_eq(vn, 1, "nobody's own process %d (its vouched memfd): %s", (int)n, why);
	cr_expect(heapd_list_pid(d2.sock, n, &e) && e.uid == nobody_uid(),
		  "nobody's process is not nobody's after the restart");
	ad_expect_refused(&d2, c, "root's process holding nobody's memfds");
	ad_kill(n);
	ad_kill(c);
	heapd_stop_clean(&d2);
	heapd_cleanup(&d);
}

/* ---- processes that changed since their HELLO ------------------------------------------------ */

enum ad_change {
	AD_UNCHANGED,     /* the control: taken back */
	AD_NOT_DUMPABLE,  /* prctl(PR_SET_DUMPABLE, 0) */
	AD_SAVED_ROOT,    /* real and effective uid nobody, saved uid 0 */
	AD_SETUID_EXEC,   /* exec of a setuid-root program, the vouched memfd kept */
};

/* Give the effective set CAP_SETUID back (kept in the permitted set by PR_SET_KEEPCAPS). */
static int ad_raise_setuid(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct c[2];
	if (syscall(SYS_capget, &h, c) != 0)
		return -1;
	c[0].effective |= 1u << CAP_SETUID;
	return (int)syscall(SYS_capset, &h, c);
}

/* A process of nobody's with a fake shim attached to d (HELLO with its memfd: vouched), which
 * then makes change and writes a byte to *ready (AD_SETUID_EXEC: closes it at the exec). */
static pid_t ad_attached_nobody(const struct heapd *d, enum ad_change change, const char *suid,
				int *ready)
{
	int pfd[2];
	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		uid_t u = nobody_uid();
		gid_t g = nobody_gid();
		/* nobody's in every id; AD_SAVED_ROOT keeps root's capabilities to come back */
		if (change == AD_SAVED_ROOT && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0)
			_exit(10);
		if (setgroups(0, NULL) != 0 || setresgid(g, g, g) != 0 || setresuid(u, u, u) != 0)
			_exit(11);
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
		int m = ad_memfd(d->sock, change != AD_SETUID_EXEC, 0, NULL);
		if (m < 0 || ad_hello(d->sock, m) != 0)
			_exit(12);
		switch (change) {
		case AD_UNCHANGED:
			break;
		case AD_NOT_DUMPABLE:
			prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
			break;
		case AD_SAVED_ROOT:
			/* the raw calls change this thread alone, as capset did (glibc's
			 * setresuid would ask every thread, and a sanitizer's own has no
			 * CAP_SETUID); /proc/PID/status is this, the main, thread's */
			if (ad_raise_setuid() != 0 ||
			    syscall(SYS_setresuid, (uid_t)-1, (uid_t)-1, (uid_t)0) != 0)
				_exit(13);
			prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
			break;
		case AD_SETUID_EXEC:
			execl(suid, "suid-sleep", "60", (char *)NULL);
			_exit(14);
		}
		if (write(pfd[1], "c", 1) != 1)
			_exit(15);
		for (;;)
			pause();
	}
	close(pfd[1]);
	*ready = pfd[0];
	return pid;
}

/*
 * Four processes of nobody's, each attached by a genuine HELLO (so each memfd is vouched
 * for, as nobody's); then one stays as it was, one makes itself not dumpable, one takes a
 * saved uid of 0 (real and effective still nobody), one execs a setuid-root program with its
 * memfd. Only the first is taken back: HELLO would refuse each of the others.
 */
Test(adopt, process_changed_since_its_hello_is_not_taken_back, .timeout = 120)
{
	struct heapd d, d2;
	char suid[128];
	ad_start_as_root(&d, suid, sizeof(suid));
	static const char *const names[] = { "unchanged", "not dumpable", "saved uid 0",
					     "setuid exec" };
	pid_t pids[4];
	for (int i = 0; i < 4; i++) {
		int ready;
		pids[i] = ad_attached_nobody(&d, (enum ad_change)i, suid, &ready);
		cr_assert(ad_wait_fd(ready), "%s: not ready", names[i]);
		close(ready);
		int st;
		cr_assert_eq(waitpid(pids[i], &st, WNOHANG), 0, "%s: exited with 0x%x", names[i],
			     st);
	}
	for (int i = 0; i < 3; i++) /* the exec'd one's session ended with its socket */
		cr_assert(heapd_list_pid(d.sock, pids[i], &(struct llgo_list_entry){ 0 }),
			  "%s: not attached:\n%s", names[i], heapd_log(&d));
	ad_restart(&d, &d2);
	char why[1024];
	struct llgo_list_entry e;
	cr_expect_eq(ad_verdict(&d2, pids[AD_UNCHANGED], why, sizeof(why)), 1, "%s", why);
	cr_expect(heapd_list_pid(d2.sock, pids[AD_UNCHANGED], &e) && e.uid == nobody_uid() &&
			  e.state == LLGO_PROC_LIVE,
		  "the unchanged process is not listed live as nobody's");
	for (int i = AD_NOT_DUMPABLE; i <= AD_SETUID_EXEC; i++)
		ad_expect_refused(&d2, pids[i], names[i]);
	for (int i = 0; i < 4; i++)
		ad_kill(pids[i]);
	heapd_stop_clean(&d2);
	heapd_cleanup(&d);
}

/* ---- genuine programs ------------------------------------------------------------------------- */

static void ad_start_idle(struct lu_proc *p, const struct heapd *d)
{
	char *argv[] = { PROG("life_idle"), "20", NULL };
	lu_start(p, d, "1", 0, NULL, argv, NULL);
	char line[64];
	cr_assert(lu_read_line(p, line, sizeof(line), 10000), "life_idle did not start");
	cr_assert_str_eq(line, "ready");
	for (int i = 0; i < 500 && !heapd_list_pid(d->sock, p->pid, &(struct llgo_list_entry){ 0 });
	     i++)
		lu_sleep_ms(10);
}

/* life_idle makes 20 more allocations (555 bytes, idle_more_site) at rate 1 and waits. */
static void ad_more(struct lu_proc *p)
{
	fputs("more\n", p->in);
	fflush(p->in);
	char line[64];
	cr_assert(lu_read_line(p, line, sizeof(line), 10000), "life_idle did not answer");
}

/* idle_more_site's allocations in pid's profile, once there are want of them (or 10 s). */
static long ad_more_records(const struct heapd *d, pid_t pid, long want)
{
	long got = 0;
	for (long deadline = lu_now_ms() + 10000; got < want && lu_now_ms() < deadline;
	     lu_sleep_ms(50)) {
		char *text = heapd_snapshot(d->sock, pid, LLGO_FORMAT_TEXT, NULL);
		got = lu_text_count(text, "idle_more_site", 555);
		free(text);
	}
	return got;
}

/* A daemon and life_idle attached to it; then the daemon stopped, the program allocates
 * (records the daemon never reads) and the daemon is killed. */
static void ad_idle_then_kill(struct heapd *d, struct lu_proc *p)
{
	heapd_start(d, NULL, NULL);
	ad_start_idle(p, d);
	lu_sleep_ms(300); /* the first allocations drained */
	heapd_pause(d);
	ad_more(p);
	cr_assert_eq(kill(d->pid, SIGKILL), 0);
	waitpid(d->pid, NULL, 0);
	d->pid = 0;
}

/* life_idle ends at EOF; then the daemon d2 and the folder of d. */
static void ad_end_idle(struct lu_proc *p, struct heapd *d2, struct heapd *d)
{
	fclose(p->in);
	p->in = NULL;
	lu_wait(p, 10000);
	heapd_stop_clean(d2);
	heapd_cleanup(d);
}

/* A shimmed program, idle across the restart: taken back with the 20 records the killed
 * daemon never read, as root's (the test's uid). */
Test(adopt, genuine_process_is_taken_back_with_unread_records, .timeout = 120)
{
	struct heapd d, d2;
	struct lu_proc p;
	ad_idle_then_kill(&d, &p);
	heapd_start(&d2, d.dir, NULL);
	char why[1024];
	cr_assert_eq(ad_verdict(&d2, p.pid, why, sizeof(why)), 1, "%s", why);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d2.sock, p.pid, &e));
	cr_expect_eq(e.uid, geteuid());
	cr_expect_eq(e.state, LLGO_PROC_LIVE);
	long got = ad_more_records(&d2, p.pid, 20);
	cr_expect_eq(got, 20, "records the first daemon never read: %ld of 20", got);
	ad_end_idle(&p, &d2, &d);
}

/* The key is gone at the restart (a new one is made): the program is not taken back, runs on,
 * and attaches by HELLO (REATTACH, with its rings) once it samples again. */
Test(adopt, process_not_taken_back_attaches_itself_by_hello, .timeout = 120)
{
	struct heapd d, d2;
	struct lu_proc p;
	ad_idle_then_kill(&d, &p);
	char key[200];
	snprintf(key, sizeof(key), "%s.key", d.sock);
	cr_assert_eq(unlink(key), 0, "no key file %s: %s", key, strerror(errno));
	heapd_start(&d2, d.dir, NULL);
	char why[1024];
	cr_expect_eq(ad_verdict(&d2, p.pid, why, sizeof(why)), 0, "%s", why);
	struct llgo_list_entry e;
	int rounds = 0;
	bool live = false;
	for (long deadline = lu_now_ms() + 20000; !live && lu_now_ms() < deadline; rounds++) {
		ad_more(&p);
		live = heapd_list_pid(d2.sock, p.pid, &e) && e.state == LLGO_PROC_LIVE;
		if (!live)
			lu_sleep_ms(50);
	}
	cr_assert(live, "not attached again after %d rounds:\n%s", rounds, heapd_log(&d2));
	cr_expect_eq(e.uid, geteuid());
	char *log = heapd_log(&d2);
	char want[64];
	snprintf(want, sizeof(want), "pid %d: reattached", (int)p.pid);
	cr_expect(strstr(log + d2.log_start, want) != NULL, "%s", log + d2.log_start);
	free(log);
	/* its rings came along: the 20 records nobody read before are there */
	long got = ad_more_records(&d2, p.pid, 20);
	cr_expect_geq(got, 20, "idle_more_site: %ld", got);
	cr_log_info("attached again by HELLO after %d rounds of 20 allocations", rounds);
	ad_end_idle(&p, &d2, &d);
}
