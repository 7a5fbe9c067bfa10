// SPDX-License-Identifier: MIT
/*
 * test_security_files.c: llgo-heapd on a shared host, attacked by an unprivileged local user
 * (uid nobody, from a forked child that drops root), through the files of the user's own
 * processes: a program file truncated under the daemon while it unwinds and symbolizes it.
 * The daemon reads such files into copies (agent/unwind/filecopy.c) and never maps them; the
 * attack must not kill it (the other suites: test_security_identity.c, _names.c, _budget.c,
 * _exposure.c). LLGO_TEST_HEAPD=path runs it against another build.
 */
#include "../agent/internal.h"
#include "helpers.h"

/*
 * The attacker's process (run as nobody): maps its copy prog whole and executable, attaches
 * as a shim and sends a stack copy whose pc is pcs[0] in prog; at the first byte on go it
 * truncates prog to 0 bytes and sends one at pcs[1]. A byte on done after each send; then it
 * waits for go's end. Returns its exit status.
 */
static int truncating_shim(const char *sock, const char *prog, const uint64_t pcs[2], int go,
			   int done)
{
	int fd = open(prog, O_RDWR | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0)
		return 1;
	/* a MiB past the file too: the image's .bss, where no other mapping may go */
	unsigned char *base = mmap(NULL, (size_t)st.st_size + (1u << 20), PROT_READ | PROT_EXEC,
				   MAP_PRIVATE, fd, 0);
	if (base == MAP_FAILED)
		return 2;
	struct th_shim sh;
	struct th_ring r;
	if (th_shim_attach(&sh, sock, LLGO_RING_MIN_DATA, 512) != 0)
		return 3;
	th_ring_new(&r, 0, LLGO_RING_MIN_DATA);
	if (th_shim_add_ring(&sh, &r) != 0)
		return 4;
	static unsigned char stack[64]; /* a zero return address: one frame */
	char c;
	for (int i = 0; i < 2; i++) {
		if (i == 1 && (read(go, &c, 1) != 1 || ftruncate(fd, 0) != 0))
			return 5;
		struct llgo_raw_regs regs;
		memset(&regs, 0, sizeof(regs));
		regs.ip = (uintptr_t)base + pcs[i];
		regs.sp = (uintptr_t)stack;
		regs.stack_hi = regs.sp + sizeof(stack);
		regs.stack_len = sizeof(stack);
		uint64_t walk = regs.ip;
		if (!th_ring_push_rec(&r, &walk, 1, 64, 1, false, &regs, stack) ||
		    write(done, "d", 1) != 1)
			return 6;
	}
	while (read(go, &c, 1) > 0)
		;
	return 0;
}

/*
 * nobody truncates its own program file under the daemon: it maps its copy of an -O2
 * program without frame pointers, sends a stack copy for the daemon to unwind (the daemon
 * reads the file's .eh_frame_hdr and .eh_frame; a snapshot has the symbolizer read its
 * symbols), truncates the file to 0 bytes and sends another. The daemon kept the file mapped
 * (unwind.c's cache of files) and died of SIGBUS at its next read of it, every user's
 * profiles with it. It must live, take the record, answer both snapshots and root's.
 */
Test(files, truncated_program_file_does_not_kill_the_daemon, .timeout = 120)
{
	th_need_root();
	struct th_attached at;
	th_attached_start(&at, NULL, LLGO_RING_MIN_DATA, 512);
	struct heapd *d = &at.d;
	uint64_t st[2] = { TH_RET(th_site_alpha), TH_RET(th_site_caller) };
	th_ring_push_n(&at.r, st, 2, 64, 1, 10);
	th_wait_delivered(d->sock, getpid(), 10);

	char dir[200], prog[260], cmd[1024];
	snprintf(dir, sizeof(dir), "%s/nobody", d->dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_assert_eq(chown(dir, th_nobody_uid(), th_nobody_gid()), 0);
	snprintf(prog, sizeof(prog), "%s/prog", dir);
	snprintf(cmd, sizeof(cmd), "cp %s/nofp_chains %s && chown %u:%u %s && chmod 755 %s",
		 TH_PROGS, prog, (unsigned)th_nobody_uid(), (unsigned)th_nobody_gid(), prog, prog);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	static struct th_syms y;
	th_syms_load(&y, prog);
	const uint64_t pcs[2] = { th_syms_addr(&y, "a_leaf") + 1, th_syms_addr(&y, "chain_b") + 1 };
	cr_assert(pcs[0] > 1 && pcs[1] > 1, "no a_leaf or chain_b in %s", prog);
	int go[2], done[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(done), 0);
	pid_t atk = fork();
	cr_assert_geq(atk, 0);
	if (atk == 0) {
		close(go[1]);
		close(done[0]);
		th_become_nobody();
		_exit(truncating_shim(d->sock, prog, pcs, go[0], done[1]));
	}
	close(go[0]);
	close(done[1]);
	char c;
	cr_assert_eq(read(done[0], &c, 1), 1, "the attacker's process did not start");
	th_wait_delivered(d->sock, atk, 1);
	char *t = heapd_snapshot(d->sock, atk, LLGO_FORMAT_TEXT, NULL);
	cr_expect(strstr(t, "a_leaf") != NULL, "nobody's first stack:\n%s", t);
	free(t);

	cr_assert_eq(write(go[1], "t", 1), 1);
	cr_assert_eq(read(done[0], &c, 1), 1, "the attacker's process did not truncate");
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	int dead = 0;
	/* the daemon drains within milliseconds: a daemon that dies does so before the first
	 * LIST (which would fail on a reset connection) */
	th_sleep_ms(300);
	for (int i = 0; i < 500 && waitpid(d->pid, &dead, WNOHANG) == 0; i++, dead = 0) {
		if (heapd_list_pid(d->sock, atk, &e) && e.delivered >= 2)
			break;
		th_sleep_ms(10);
	}
	if (dead || waitpid(d->pid, &dead, WNOHANG) != 0) {
		d->pid = 0;
		cr_assert_fail("the daemon died (%s):\n%s",
			       WIFSIGNALED(dead) ? strsignal(WTERMSIG(dead)) : "exited", heapd_log(d));
	}
	cr_expect_eq(e.delivered, 2, "nobody's records: %llu delivered",
		     (unsigned long long)e.delivered);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d->sock, atk, LLGO_FORMAT_PPROF, &a), 0);
	cr_expect_eq(a.status, 0, "nobody's snapshot: %s", a.message);
	cr_expect_gt(a.data.len, 0);
	buf_free(&a.data);
	t = heapd_snapshot(d->sock, atk, LLGO_FORMAT_TEXT, NULL);
	cr_expect(strstr(t, "2: 128 [2: 128]") != NULL, "nobody's two records:\n%s", t);
	free(t);
	t = heapd_snapshot(d->sock, getpid(), LLGO_FORMAT_TEXT, NULL);
	cr_expect(strstr(t, "th_site_alpha") != NULL, "root's profile:\n%s", t);
	free(t);

	close(go[1]);
	int status;
	cr_assert_eq(waitpid(atk, &status, 0), atk);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the attacker's process: %#x",
		  status);
	close(done[0]);
	th_attached_end(&at);
}
