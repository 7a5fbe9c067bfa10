// SPDX-License-Identifier: MIT
/*
 * test_security_identity.c: llgo-heapd on a shared host, attacked by an unprivileged local
 * user (uid nobody, from a forked child that drops root), on who a session belongs to: a
 * socket kept by a child after its parent execs a setuid program, or after it exits; a
 * process that made itself not dumpable; one session per process (the newest image's, when
 * HELLOs are handled out of order), and per process memfd.
 * Each test plays the attack against the real daemon binary and checks that it fails (the
 * other suites: test_security_names.c, _budget.c, _exposure.c). LLGO_TEST_HEAPD=path runs
 * them against another build (an older daemon shows each attack succeed).
 */
#include "../agent/internal.h"
#include "helpers.h"

#include "../agent/server/ident.h"

/*
 * The reported attack: nobody connects, forks a child that keeps the socket, and execs a
 * setuid-root program; the child's HELLO must not make the daemon read the root process's
 * mappings (which nobody could then read in the profile).
 */
Test(identity, setuid_exec_after_connect_is_refused, .timeout = 60)
{
	th_need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char suid[128];
	th_make_setuid_sleep(d.dir, suid, sizeof(suid));
	pid_t a = th_fork();
	if (a == 0) {
		th_become_nobody();
		int s = heapd_connect(d.sock);
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
				th_sleep_ms(5);
			}
			if (th_hello_noack(s, NULL, NULL) != 0)
				_exit(122);
			th_sleep_ms(1500);
			_exit(0);
		}
		int fl = fcntl(s, F_GETFD);
		fcntl(s, F_SETFD, fl | FD_CLOEXEC);
		execl(suid, "suid-sleep", "2", (char *)NULL);
		_exit(123);
	}
	th_sleep_ms(800); /* the child's HELLO is handled */
	struct llgo_list_entry e;
	bool found = heapd_list_pid(d.sock, a, &e);
	char *log = heapd_log(&d);
	cr_expect(!found, "a session for the setuid process %d (uid %u):\n%s", (int)a,
		  found ? e.uid : 0, log);
	cr_expect(strstr(log, "HELLO refused") != NULL, "no refusal in the log:\n%s", log);
	free(log);
	waitpid(a, NULL, 0);
	heapd_finish(&d);
}

/* A process of the peer's uid that makes itself not dumpable (prctl): its maps are root's
 * from then on (only the files in /proc/PID change owner), and the identity check says so. */
Test(identity, not_dumpable_process_is_not_read, .timeout = 60)
{
	th_need_root();
	int to_child[2], to_parent[2];
	th_pipe(to_child);
	th_pipe(to_parent);
	pid_t pid = th_fork();
	if (pid == 0) {
		th_become_nobody();
		char c;
		if (write(to_parent[1], "a", 1) != 1 || read(to_child[0], &c, 1) != 1)
			_exit(1);
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
		if (write(to_parent[1], "b", 1) != 1 || read(to_child[0], &c, 1) != 1)
			_exit(1);
		_exit(0);
	}
	char c;
	cr_assert_eq(read(to_parent[0], &c, 1), 1);
	struct ident id;
	cr_assert_eq(ident_open(-1, pid, th_nobody_uid(), th_nobody_gid(), &id), 0);
	char why[256] = "";
	cr_expect_eq(ident_verify(&id, why, sizeof(why)), 0, "dumpable: %s", why);
	cr_assert_eq(write(to_child[1], "x", 1), 1);
	cr_assert_eq(read(to_parent[0], &c, 1), 1);
	cr_expect_eq(ident_verify(&id, why, sizeof(why)), -EACCES, "not dumpable: %s", why);
	cr_expect(strstr(why, "not dumpable") != NULL, "%s", why);
	cr_assert_eq(write(to_child[1], "x", 1), 1);
	waitpid(pid, NULL, 0);
	ident_close(&id);
}

/*
 * The process that connected is gone (its pid free for anyone's next process) when its
 * child, which kept the socket, sends HELLO: nothing of the pid is read, the session is not
 * live, and root's `rate PID` does not reach the attacker's page.
 */
Test(identity, hello_after_the_process_exited_is_not_live, .timeout = 60)
{
	th_need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int pfd[2];
	th_pipe(pfd);
	pid_t outer = th_fork();
	if (outer == 0) {
		th_become_nobody();
		/* a: connects, forks b (keeps the socket), exits and is reaped */
		pid_t a = fork();
		if (a == 0) {
			int s = heapd_connect(d.sock);
			pid_t b = fork();
			if (b == 0) {
				th_sleep_ms(300); /* a is gone and reaped by then */
				struct llgo_ctl *ctl;
				if (th_hello_noack(s, NULL, &ctl) != 0)
					_exit(122);
				th_sleep_ms(2000);
				/* rate_word untouched: 512 */
				_exit(atomic_load(&ctl->rate_word) == 512 ? 0 : 1);
			}
			_exit(0);
		}
		waitpid(a, NULL, 0);
		if (write(pfd[1], &a, sizeof(a)) != sizeof(a))
			_exit(124);
		/* wait for b (a grandchild reparented to init or us): by its exit code through a
		 * second pipe is overkill; sleep past its life */
		th_sleep_ms(2600);
		_exit(0);
	}
	close(pfd[1]);
	pid_t a;
	cr_assert_eq(read(pfd[0], &a, sizeof(a)), (ssize_t)sizeof(a));
	th_sleep_ms(700);
	struct client_answer ans;
	cr_assert_eq(heapd_set_rate(d.sock, a, 0, &ans), 0);
	cr_expect_eq(ans.status, ESRCH, "root's rate %d 0 reached the dead pid's session: %d %s",
		     (int)a, ans.status, ans.message);
	struct llgo_list_entry e;
	if (heapd_list_pid(d.sock, a, &e))
		cr_expect_eq(e.state, LLGO_PROC_EXITED, "the session of dead pid %d is live", (int)a);
	waitpid(outer, NULL, 0);
	heapd_finish(&d);
}

/* One process, many connections, each with HELLO and its own control page: one session. */
Test(identity, one_session_per_process, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int socks[8];
	struct llgo_ctl *ctl[8];
	for (int i = 0; i < 8; i++) {
		socks[i] = heapd_connect(d.sock);
		cr_assert_geq(socks[i], 0);
		cr_assert_eq(th_hello_noack(socks[i], NULL, &ctl[i]), 0);
	}
	th_sleep_ms(300);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_LIVE);
	/* the session LIST shows is the one whose page a rate change reaches */
	struct client_answer a;
	cr_assert_eq(heapd_set_rate(d.sock, getpid(), 4096, &a), 0);
	cr_assert_eq(a.status, 0, "%s", a.message);
	int live = -1;
	for (int i = 0; i < 8; i++)
		if (atomic_load(&ctl[i]->rate_word) != 512)
			live = i;
	cr_assert_geq(live, 0);
	cr_expect_eq(live, 7, "the session is connection %d's, not the last one's", live);
	/* LIST shows one row per pid: end that session, and no other session of this
	 * process may show up live behind it */
	close(socks[live]);
	th_sleep_ms(300);
	cr_assert(heapd_list_pid(d.sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED, "another live session of this process");
	for (int i = 0; i < 8; i++)
		if (i != live)
			close(socks[i]);
	heapd_finish(&d);
}

/*
 * A process's HELLOs handled out of order: a shell preloaded with the shim says HELLO, execs
 * the program, whose shim says HELLO on a new connection, and two workers finish them in the
 * other order. The later connection is the newer image: it keeps the session, the earlier
 * one's ends at once (a snapshot by pid showed the shell's).
 */
Test(identity, a_late_hello_of_an_earlier_image_ends_at_once, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int early = heapd_connect(d.sock), late = heapd_connect(d.sock);
	cr_assert(early >= 0 && late >= 0);
	struct llgo_ctl *ctl_early, *ctl_late;
	cr_assert_eq(th_hello_noack(late, NULL, &ctl_late), 0);
	cr_assert(th_wait_listed(d.sock, getpid(), 10000));
	cr_assert_eq(th_hello_noack(early, NULL, &ctl_early), 0);
	char *log = th_wait_log(&d, "came late", 10000);
	cr_expect(strstr(log, "came late") && !strstr(log, "a new HELLO replaces"),
		  "the earlier connection's HELLO replaced the session:\n%s", log);
	free(log);
	struct client_answer a;
	cr_assert_eq(heapd_set_rate(d.sock, getpid(), 4096, &a), 0);
	cr_assert_eq(a.status, 0, "%s", a.message);
	cr_expect_eq(atomic_load(&ctl_late->rate_word), 4096, "the later image lost its session");
	cr_expect_eq(atomic_load(&ctl_early->rate_word), 512, "the earlier image has a session");
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_LIVE);
	close(late);
	cr_expect(th_wait_state(d.sock, getpid(), LLGO_PROC_EXITED, 10000),
		  "a session of the earlier image is live behind the ended one");
	close(early);
	heapd_finish(&d);
}

/*
 * One session per memfd: B, another process of the same user, presents the process memfd
 * that A's live session holds, then (with a memfd of its own) A's live-object table: the
 * way nobody's 400 processes had one full table scanned 400 times at exit. Both are
 * refused (the table's connection is ended); A, reconnecting with its memfd, still joins
 * its own session.
 */
Test(identity, a_memfd_backs_one_session, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int memfd = th_proc_memfd(), live = th_live_table(16);
	cr_assert(memfd >= 0 && live >= 0);
	int go[2], ares[2], bres[2];
	th_pipe(go);
	th_pipe(ares);
	th_pipe(bres);
	pid_t a = th_fork();
	if (a == 0) {
		close(go[1]);
		int st, s = th_memfd_hello(d.sock, memfd, &st);
		int r[2] = { s >= 0 && st == 0 && th_add_live(s, live) == 0 ? 0 : -1, -1 };
		char c;
		if (read(go[0], &c, 1) != 1) /* B has tried */
			_exit(1);
		if (th_memfd_hello(d.sock, memfd, NULL) >= 0)
			r[1] = 0;
		if (write(ares[1], r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(2);
		th_hold(go[0]);
		_exit(0);
	}
	cr_assert(th_wait_state(d.sock, a, LLGO_PROC_LIVE, 5000), "A did not attach");
	th_sleep_ms(300); /* A's ADD_LIVE handled */
	pid_t b = th_fork();
	if (b == 0) {
		close(go[1]);
		int r[3] = { -1, -1, 0 }, own = th_proc_memfd();
		th_memfd_hello(d.sock, memfd, &r[0]);
		int s = own < 0 ? -1 : th_memfd_hello(d.sock, own, &r[1]);
		if (s >= 0 && r[1] == 0 && th_add_live(s, live) == 0) {
			char buf[64]; /* nothing is sent to a shim after HELLO_ACK: EOF, or 10 s */
			r[2] = recv(s, buf, sizeof(buf), 0) == 0;
		}
		if (write(bres[1], r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(2);
		th_hold(go[0]);
		_exit(0);
	}
	int rb[3], ra[2];
	cr_assert_eq(read(bres[0], rb, sizeof(rb)), (ssize_t)sizeof(rb));
	cr_expect_neq(rb[0], 0, "B's HELLO with A's process memfd was taken (status %d)", rb[0]);
	cr_expect_eq(rb[0], EBUSY, "status %d", rb[0]);
	cr_expect_eq(rb[1], 0, "B's HELLO with its own memfd: status %d", rb[1]);
	cr_expect_eq(rb[2], 1, "B's ADD_LIVE of A's table was taken (its connection lives)");
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, b, &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED, "B's session lives on with A's table");
	cr_assert_eq(write(go[1], "g", 1), 1);
	cr_assert_eq(read(ares[0], ra, sizeof(ra)), (ssize_t)sizeof(ra));
	cr_expect_eq(ra[0], 0, "A did not attach with its table");
	cr_expect_eq(ra[1], 0, "A did not reconnect");
	th_sleep_ms(300);
	cr_assert(heapd_list_pid(d.sock, a, &e));
	cr_expect_eq(e.state, LLGO_PROC_LIVE, "A's session ended");
	char *log = heapd_log(&d), a_dropped[64], a_replaced[64];
	snprintf(a_dropped, sizeof(a_dropped), "from pid %d ", (int)a);
	snprintf(a_replaced, sizeof(a_replaced), "pid %d: a new HELLO replaces", (int)a);
	cr_expect(!strstr(log, a_dropped) && !strstr(log, a_replaced),
		  "A's reconnect was refused or made a new session:\n%s", log);
	free(log);
	close(go[1]);
	int st;
	cr_assert_eq(waitpid(a, &st, 0), a);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "A: status 0x%x", st);
	cr_assert_eq(waitpid(b, &st, 0), b);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "B: status 0x%x", st);
	heapd_finish(&d);
}
