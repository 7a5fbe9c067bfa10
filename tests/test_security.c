// SPDX-License-Identifier: MIT
/*
 * test_security.c: llgo-heapd on a shared host, attacked by an unprivileged local user (uid
 * nobody, from a forked child that drops root). Each test plays the attack against the real
 * daemon binary and checks that it fails: identity (a socket kept by a child after its parent
 * execs a setuid program, or after it exits), one session per process, hostile values and
 * names, per-user budgets, exposure. LLGO_TEST_HEAPD=path runs them against another build
 * (an older daemon shows each attack succeed).
 */
#include "sec_util.h"

static uid_t nobody_uid(void)
{
	struct passwd *pw = getpwnam("nobody");
	return pw ? pw->pw_uid : 65534;
}

static gid_t nobody_gid(void)
{
	struct passwd *pw = getpwnam("nobody");
	return pw ? pw->pw_gid : 65534;
}

static void become_nobody(void)
{
	if (setgroups(0, NULL) != 0 || setgid(nobody_gid()) != 0 || setuid(nobody_uid()) != 0)
		_exit(120);
}

static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to switch to another uid");
}

/* Connect as a shim and send HELLO with a fresh control page, waiting for no answer. */
static int attack_hello(int sock, int *ctl_fd, struct llgo_ctl **ctl)
{
	int fd = memfd_create("atk-ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, LLGO_CTL_SIZE) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return -1;
	struct llgo_ctl *c = mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c == MAP_FAILED)
		return -1;
	c->magic = LLGO_CTL_MAGIC;
	c->version = LLGO_CTL_VERSION;
	c->size = LLGO_CTL_SIZE;
	atomic_store(&c->rate_word, 512);
	c->ring_data_size = LLGO_RING_MIN_DATA;
	if (ctl_fd)
		*ctl_fd = fd;
	if (ctl)
		*ctl = c;
	struct llgo_msg_hello m;
	hello_init(&m, LLGO_RING_MIN_DATA, 512);
	m.flags = LLGO_HELLO_NO_ACK;
	return msg_send(sock, &m, sizeof(m), fd);
}

/* A setuid-root copy of sleep in dir (root can make one; nobody runs it). */
static void make_setuid_sleep(const char *dir, char *out, size_t n)
{
	snprintf(out, n, "%s/suid-sleep", dir);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "cp /usr/bin/sleep '%s' && chown 0:0 '%s' && chmod 4755 '%s'",
		 out, out, out);
	cr_assert_eq(system(cmd), 0, "cannot make a setuid binary");
}

/*
 * The reported attack: nobody connects, forks a child that keeps the socket, and execs a
 * setuid-root program; the child's HELLO must not make the daemon read the root process's
 * mappings (which nobody could then read in the profile).
 */
Test(identity, setuid_exec_after_connect_is_refused, .timeout = 60)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL);
	char suid[128];
	make_setuid_sleep(d.dir, suid, sizeof(suid));
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t a = fork();
	cr_assert_geq(a, 0);
	if (a == 0) {
		become_nobody();
		int s = sock_connect(d.sock);
		if (s < 0)
			_exit(121);
		pid_t me = getpid();
		pid_t b = fork();
		if (b == 0) { /* the child keeps the socket; HELLO once the parent is root's */
			char path[64];
			snprintf(path, sizeof(path), "/proc/%d", (int)me);
			for (int i = 0; i < 500; i++) {
				struct stat st;
				if (stat(path, &st) == 0 && st.st_uid == 0)
					break;
				sleep_ms(5);
			}
			if (attack_hello(s, NULL, NULL) != 0)
				_exit(122);
			sleep_ms(1500);
			_exit(0);
		}
		int fl = fcntl(s, F_GETFD);
		fcntl(s, F_SETFD, fl | FD_CLOEXEC);
		execl(suid, "suid-sleep", "2", (char *)NULL);
		_exit(123);
	}
	close(pfd[0]);
	close(pfd[1]);
	sleep_ms(800); /* the child's HELLO is handled */
	struct llgo_list_entry e;
	bool found = list_find(d.sock, a, &e);
	char *log = read_all(d.log);
	cr_expect(!found, "a session for the setuid process %d (uid %u):\n%s", (int)a,
		  found ? e.uid : 0, log);
	cr_expect(strstr(log, "HELLO refused") != NULL, "no refusal in the log:\n%s", log);
	free(log);
	int st;
	waitpid(a, &st, 0);
	heapd_stop(&d);
	heapd_cleanup(&d);
}

/*
 * The process that connected is gone (its pid free for anyone's next process) when its
 * child, which kept the socket, sends HELLO: nothing of the pid is read, the session is not
 * live, and root's `rate PID` does not reach the attacker's page.
 */
Test(identity, hello_after_the_process_exited_is_not_live, .timeout = 60)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL);
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t outer = fork();
	cr_assert_geq(outer, 0);
	if (outer == 0) {
		become_nobody();
		/* a: connects, forks b (keeps the socket), exits and is reaped */
		pid_t a = fork();
		if (a == 0) {
			int s = sock_connect(d.sock);
			pid_t b = fork();
			if (b == 0) {
				sleep_ms(300); /* a is gone and reaped by then */
				struct llgo_ctl *ctl;
				if (attack_hello(s, NULL, &ctl) != 0)
					_exit(122);
				sleep_ms(2000);
				/* rate_word untouched: 512 */
				_exit(atomic_load(&ctl->rate_word) == 512 ? 0 : 1);
			}
			_exit(0);
		}
		int st;
		waitpid(a, &st, 0);
		if (write(pfd[1], &a, sizeof(a)) != sizeof(a))
			_exit(124);
		/* wait for b (a grandchild reparented to init or us): by its exit code through a
		 * second pipe is overkill; sleep past its life */
		sleep_ms(2600);
		_exit(0);
	}
	close(pfd[1]);
	pid_t a;
	cr_assert_eq(read(pfd[0], &a, sizeof(a)), (ssize_t)sizeof(a));
	sleep_ms(700);
	struct answer ans;
	cr_assert_eq(set_rate(d.sock, a, 0, &ans), 0);
	cr_expect_eq(ans.status, ESRCH, "root's rate %d 0 reached the dead pid's session: %d %s",
		     (int)a, ans.status, ans.message);
	struct llgo_list_entry e;
	if (list_find(d.sock, a, &e))
		cr_expect_eq(e.state, LLGO_PROC_EXITED, "the session of dead pid %d is live", (int)a);
	int st;
	waitpid(outer, &st, 0);
	heapd_stop(&d);
	heapd_cleanup(&d);
}

/* One process, many connections, each with HELLO and its own control page: one session. */
Test(identity, one_session_per_process, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL);
	int socks[8];
	for (int i = 0; i < 8; i++) {
		socks[i] = sock_connect(d.sock);
		cr_assert_geq(socks[i], 0);
		cr_assert_eq(attack_hello(socks[i], NULL, NULL), 0);
	}
	sleep_ms(300);
	struct llgo_list_entry e;
	cr_assert(list_find(d.sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_LIVE);
	/* LIST shows one row per pid: end the newest connection, and no other session of
	 * this process may show up live behind it */
	close(socks[7]);
	sleep_ms(300);
	cr_assert(list_find(d.sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED, "another live session of this process");
	for (int i = 0; i < 7; i++)
		close(socks[i]);
	heapd_stop(&d);
	heapd_cleanup(&d);
}
