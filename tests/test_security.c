// SPDX-License-Identifier: MIT
/*
 * test_security.c: llgo-heapd on a shared host, attacked by an unprivileged local user (uid
 * nobody, from a forked child that drops root). Each test plays the attack against the real
 * daemon binary and checks that it fails: identity (a socket kept by a child after its parent
 * execs a setuid program, or after it exits), one session per process, hostile values and
 * names, per-user budgets, exposure. LLGO_TEST_HEAPD=path runs them against another build
 * (an older daemon shows each attack succeed).
 */
#include "life_util.h"
#include "sec_util.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>

#include "../agent/server/ident.h"
#include "../shared/live.h"

/* fd's control page, mapped and filled in as a shim does (rate 512); NULL on failure. */
static struct llgo_ctl *atk_ctl_map(int fd)
{
	struct llgo_ctl *c = mmap(NULL, LLGO_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c == MAP_FAILED)
		return NULL;
	c->magic = LLGO_CTL_MAGIC;
	c->version = LLGO_CTL_VERSION;
	c->size = LLGO_CTL_SIZE;
	atomic_store(&c->rate_word, 512);
	atomic_store(&c->want_rate_word, 512);
	c->ring_data_size = LLGO_RING_MIN_DATA;
	return c;
}

/* Connect as a shim and send HELLO with a fresh control page, waiting for no answer. */
static int attack_hello(int sock, int *ctl_fd, struct llgo_ctl **ctl)
{
	int fd = memfd_create("atk-ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, LLGO_CTL_SIZE) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		return -1;
	struct llgo_ctl *c = atk_ctl_map(fd);
	if (!c)
		return -1;
	if (ctl_fd)
		*ctl_fd = fd;
	if (ctl)
		*ctl = c;
	struct llgo_msg_hello m;
	hello_init(&m, LLGO_RING_MIN_DATA, 512);
	m.flags = LLGO_HELLO_NO_ACK;
	return msg_send(sock, &m, sizeof(m), fd);
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
	heapd_start(&d, NULL, NULL);
	char suid[128];
	make_setuid_sleep(d.dir, suid, sizeof(suid));
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t a = fork();
	cr_assert_geq(a, 0);
	if (a == 0) {
		become_nobody();
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
	bool found = heapd_list_pid(d.sock, a, &e);
	char *log = read_all(d.log);
	cr_expect(!found, "a session for the setuid process %d (uid %u):\n%s", (int)a,
		  found ? e.uid : 0, log);
	cr_expect(strstr(log, "HELLO refused") != NULL, "no refusal in the log:\n%s", log);
	free(log);
	int st;
	waitpid(a, &st, 0);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/*
 * The process that connected is gone (its pid free for anyone's next process) when its
 * child, which kept the socket, sends HELLO: nothing of the pid is read, the session is not
 * live, and root's `rate PID` does not reach the attacker's page.
 */
/* A process of the peer's uid that makes itself not dumpable (prctl): its maps are root's
 * from then on (only the files in /proc/PID change owner), and the identity check says so. */
Test(identity, not_dumpable_process_is_not_read, .timeout = 60)
{
	need_root();
	int to_child[2], to_parent[2];
	cr_assert_eq(pipe(to_child), 0);
	cr_assert_eq(pipe(to_parent), 0);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		become_nobody();
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
	cr_assert_eq(ident_open(-1, pid, nobody_uid(), nobody_gid(), &id), 0);
	char why[256] = "";
	cr_expect_eq(ident_verify(&id, why, sizeof(why)), 0, "dumpable: %s", why);
	cr_assert_eq(write(to_child[1], "x", 1), 1);
	cr_assert_eq(read(to_parent[0], &c, 1), 1);
	cr_expect_eq(ident_verify(&id, why, sizeof(why)), -EACCES, "not dumpable: %s", why);
	cr_expect(strstr(why, "not dumpable") != NULL, "%s", why);
	cr_assert_eq(write(to_child[1], "x", 1), 1);
	int st;
	waitpid(pid, &st, 0);
	ident_close(&id);
}

Test(identity, hello_after_the_process_exited_is_not_live, .timeout = 60)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int pfd[2];
	cr_assert_eq(pipe(pfd), 0);
	pid_t outer = fork();
	cr_assert_geq(outer, 0);
	if (outer == 0) {
		become_nobody();
		/* a: connects, forks b (keeps the socket), exits and is reaped */
		pid_t a = fork();
		if (a == 0) {
			int s = heapd_connect(d.sock);
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
	struct client_answer ans;
	cr_assert_eq(heapd_set_rate(d.sock, a, 0, &ans), 0);
	cr_expect_eq(ans.status, ESRCH, "root's rate %d 0 reached the dead pid's session: %d %s",
		     (int)a, ans.status, ans.message);
	struct llgo_list_entry e;
	if (heapd_list_pid(d.sock, a, &e))
		cr_expect_eq(e.state, LLGO_PROC_EXITED, "the session of dead pid %d is live", (int)a);
	int st;
	waitpid(outer, &st, 0);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
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
		cr_assert_eq(attack_hello(socks[i], NULL, &ctl[i]), 0);
	}
	sleep_ms(300);
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
	/* LIST shows one row per pid: end that session, and no other session of this
	 * process may show up live behind it */
	close(socks[live]);
	sleep_ms(300);
	cr_assert(heapd_list_pid(d.sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED, "another live session of this process");
	for (int i = 0; i < 8; i++)
		if (i != live)
			close(socks[i]);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* ---- names and values ------------------------------------------------------------------- */

#define SHIM LLGO_BUILD_DIR "/lib/libllgoheap.so"
#define PROGS LLGO_BUILD_DIR "/progs"

/* Run prog args under the shim at rate 1 on d's socket, as uid (0: root); returns its pid
 * once it has exited (its session stays for snapshots). */
static pid_t run_profiled(struct heapd *d, uid_t uid, const char *prog, const char *arg)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (uid)
			become_nobody();
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		setenv("LD_PRELOAD", SHIM, 1);
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

static char *snapshot_text(struct heapd *d, pid_t pid, int fmt)
{
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d->sock, pid, fmt, &a), 0);
	cr_assert_eq(a.status, 0, "snapshot %d: %s", (int)pid, a.message);
	buf_putc(&a.data, '\0');
	return (char *)a.data.data;
}

static bool has_raw_control(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
			return true;
	return false;
}

/* A symbol holding a newline, a forged sample line and ESC sequences: every text output
 * shows it escaped, and the legacy text gains no sample. */
Test(names, hostile_symbol_is_escaped, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char prog[160], cmd[1024];
	snprintf(prog, sizeof(prog), "%s/evil_sites", d.dir);
	snprintf(cmd, sizeof(cmd),
		 "objcopy --redefine-sym \"site_calloc=$(printf 'evil\\033[2J\\n77: 7777777 "
		 "[77: 7777777] @ 0x1\\n#')\" %s/e2e_sites %s", PROGS, prog);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	pid_t pid = run_profiled(&d, 0, prog, "3000");
	char *text = snapshot_text(&d, pid, LLGO_FORMAT_TEXT);
	cr_expect(!has_raw_control(text), "raw control characters in the text:\n%s", text);
	cr_expect(strstr(text, "\n77: 7777777") == NULL, "a forged sample line:\n%s", text);
	cr_expect(strstr(text, "evil\\x1b[2J\\x0a77: 7777777") != NULL, "not escaped:\n%s", text);
	free(text);
	char *folded = snapshot_text(&d, pid, LLGO_FORMAT_FOLDED);
	cr_expect(!has_raw_control(folded), "raw control characters in folded:\n%s", folded);
	cr_expect(strstr(folded, "evil\\x1b[2J") != NULL, "folded:\n%s", folded);
	free(folded);
	char *top = snapshot_text(&d, pid, LLGO_FORMAT_TOP);
	cr_expect(!has_raw_control(top), "raw control characters in top:\n%s", top);
	free(top);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* nobody runs a copy of a program with the same build ID and a renamed symbol first; root's
 * profile of the real program still shows the real names. */
Test(names, symbol_cache_is_per_file, .timeout = 120)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char fake[160], real[160], cmd[1024];
	snprintf(fake, sizeof(fake), "%s/fake_sites", d.dir);
	snprintf(real, sizeof(real), "%s/real_sites", d.dir);
	snprintf(cmd, sizeof(cmd),
		 "cp %s/e2e_sites %s && objcopy --redefine-sym site_calloc=ATTACKER_NAME %s %s && "
		 "chmod 755 %s %s", PROGS, real, real, fake, real, fake);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	snprintf(cmd, sizeof(cmd), "test \"$(readelf -n %s | grep 'Build ID')\" = "
		 "\"$(readelf -n %s | grep 'Build ID')\"", real, fake);
	cr_assert_eq(system(cmd), 0, "the copy's build ID differs");
	pid_t atk = run_profiled(&d, 1, fake, "3000");
	char *t = snapshot_text(&d, atk, LLGO_FORMAT_TEXT);
	cr_expect(strstr(t, "ATTACKER_NAME") != NULL, "the copy's own profile:\n%s", t);
	free(t);
	pid_t mine = run_profiled(&d, 0, real, "3000");
	t = snapshot_text(&d, mine, LLGO_FORMAT_TEXT);
	cr_expect(strstr(t, "ATTACKER_NAME") == NULL, "root's profile shows the copy's names:\n%s",
		  t);
	cr_expect(strstr(t, "site_calloc") != NULL, "root's profile:\n%s", t);
	free(t);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* The unwinder's cache is per file too: nobody first runs a copy of an -O2 program without
 * frame pointers whose .eh_frame is zeroed (same build ID: no CFI, so its stacks stop at
 * once); root's run of the real program still unwinds whole stacks. */
Test(names, unwind_cache_is_per_file, .timeout = 120)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	char fake[160], real[160], cmd[2048];
	snprintf(fake, sizeof(fake), "%s/fake_chains", d.dir);
	snprintf(real, sizeof(real), "%s/real_chains", d.dir);
	snprintf(cmd, sizeof(cmd),
		 "cp %s/nofp_chains %s && cp %s %s && chmod 755 %s %s && "
		 "set -- $(readelf -SW %s | sed -n 's/^ *\\[ *[0-9]*\\] *\\.eh_frame  *[A-Z]* *[0-9a-f]* "
		 "\\([0-9a-f]*\\) \\([0-9a-f]*\\).*/\\1 \\2/p') && test $# = 2 && "
		 "dd if=/dev/zero of=%s bs=1 seek=$((0x$1)) count=$((0x$2)) conv=notrunc 2>/dev/null",
		 PROGS, real, real, fake, real, fake, fake, fake);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	snprintf(cmd, sizeof(cmd), "test \"$(readelf -n %s | grep 'Build ID')\" = "
		 "\"$(readelf -n %s | grep 'Build ID')\" && ! cmp -s %s %s", real, fake, real, fake);
	cr_assert_eq(system(cmd), 0, "the copy's build ID differs, or nothing was zeroed");
	pid_t atk = run_profiled(&d, 1, fake, "200");
	char *t = snapshot_text(&d, atk, LLGO_FORMAT_TEXT);
	cr_expect(strstr(t, PROFILE_TRUNCATED_NAME) != NULL,
		  "the copy without CFI unwound whole stacks:\n%.2000s", t);
	free(t);
	pid_t mine = run_profiled(&d, 0, real, "200");
	t = snapshot_text(&d, mine, LLGO_FORMAT_TEXT);
	cr_expect(strstr(t, PROFILE_TRUNCATED_NAME) == NULL,
		  "root's stacks were cut by the copy's CFI:\n%.3000s", t);
	cr_expect(strstr(t, "a_leaf") != NULL && strstr(t, "main") != NULL, "root's profile:\n%.3000s",
		  t);
	free(t);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* Records with size or rate 2^64-1 are corrupt; huge sizes and hostile counters never make a
 * value negative or wrap the accounting. */
Test(values, hostile_records_and_counters, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	struct fring r;
	fring_new(&r, 0, LLGO_RING_MIN_DATA);
	cr_assert_eq(fshim_add_ring(&sh, &r), 0);
	uint64_t st[2] = { RET(srv_site_alpha), RET(srv_site_caller) };
	/* a rate beyond any the shim sets is corrupt; a size of 2^64-1 is a real (failed)
	 * request: counted, and its sums saturate, never go negative */
	cr_assert(fring_push(&r, st, 2, 64, UINT64_MAX, false));
	cr_assert(fring_push(&r, st, 2, 64, LLGO_RATE_MAX + 1, false));
	fring_push_n(&r, st, 2, UINT64_MAX, 1, 100);
	atomic_store(&sh.ctl->lost_no_ring, UINT64_MAX);
	atomic_store(&sh.ctl->lost_detached, UINT64_MAX - 5);
	struct llgo_list_entry e = wait_delivered(d.sock, getpid(), 100);
	cr_expect_eq(e.delivered, 100);
	cr_expect_eq(e.corrupt, 2, "records with rate 2^64-1 or 2^40+1: %llu corrupt",
		     (unsigned long long)e.corrupt);
	cr_expect(accounting_holds(&e));
	cr_expect_lt(e.sampled, 1ull << 50, "sampled %llu", (unsigned long long)e.sampled);
	char *text = snapshot_text(&d, getpid(), LLGO_FORMAT_TEXT);
	cr_expect(strstr(text, ": -") == NULL && strstr(text, "[-") == NULL,
		  "negative values:\n%.400s", text);
	free(text);
	char *top = snapshot_text(&d, getpid(), LLGO_FORMAT_TOP);
	cr_expect(strstr(top, " -") == NULL, "negative values in top:\n%s", top);
	free(top);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d.sock, getpid(), LLGO_FORMAT_PPROF, &a), 0);
	cr_expect_eq(a.status, 0);
	buf_free(&a.data);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* ---- the files of a user's processes ------------------------------------------------------- */

/* The ELF address of func in path (its symbol table). */
static uint64_t sym_addr(const char *path, const char *func)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "nm '%s' | awk '$3 == \"%s\" { print $1 }'", path, func);
	FILE *p = popen(cmd, "r");
	cr_assert_not_null(p);
	unsigned long long a = 0;
	int n = fscanf(p, "%llx", &a);
	pclose(p);
	cr_assert_eq(n, 1, "no %s in %s", func, path);
	return a;
}

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
	struct fshim sh;
	struct fring r;
	if (fshim_attach(&sh, sock, LLGO_RING_MIN_DATA, 512) != 0)
		return 3;
	fring_new(&r, 0, LLGO_RING_MIN_DATA);
	if (fshim_add_ring(&sh, &r) != 0)
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
		if (!fring_push_rec(&r, &walk, 1, 64, 1, false, &regs, stack) ||
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
	need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct fshim mine;
	struct fring mr;
	cr_assert_eq(fshim_attach(&mine, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	fring_new(&mr, 0, LLGO_RING_MIN_DATA);
	cr_assert_eq(fshim_add_ring(&mine, &mr), 0);
	uint64_t st[2] = { RET(srv_site_alpha), RET(srv_site_caller) };
	fring_push_n(&mr, st, 2, 64, 1, 10);
	wait_delivered(d.sock, getpid(), 10);

	char dir[200], prog[260], cmd[1024];
	snprintf(dir, sizeof(dir), "%s/nobody", d.dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_assert_eq(chown(dir, nobody_uid(), nobody_gid()), 0);
	snprintf(prog, sizeof(prog), "%s/prog", dir);
	snprintf(cmd, sizeof(cmd), "cp %s/nofp_chains %s && chown %u:%u %s && chmod 755 %s",
		 PROGS, prog, (unsigned)nobody_uid(), (unsigned)nobody_gid(), prog, prog);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	const uint64_t pcs[2] = { sym_addr(prog, "a_leaf") + 1, sym_addr(prog, "chain_b") + 1 };
	int go[2], done[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(done), 0);
	pid_t atk = fork();
	cr_assert_geq(atk, 0);
	if (atk == 0) {
		close(go[1]);
		close(done[0]);
		become_nobody();
		_exit(truncating_shim(d.sock, prog, pcs, go[0], done[1]));
	}
	close(go[0]);
	close(done[1]);
	char c;
	cr_assert_eq(read(done[0], &c, 1), 1, "the attacker's process did not start");
	wait_delivered(d.sock, atk, 1);
	char *t = snapshot_text(&d, atk, LLGO_FORMAT_TEXT);
	cr_expect(strstr(t, "a_leaf") != NULL, "nobody's first stack:\n%s", t);
	free(t);

	cr_assert_eq(write(go[1], "t", 1), 1);
	cr_assert_eq(read(done[0], &c, 1), 1, "the attacker's process did not truncate");
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	int dead = 0;
	/* the daemon drains within milliseconds: a daemon that dies does so before the first
	 * LIST (which would fail on a reset connection) */
	sleep_ms(300);
	for (int i = 0; i < 500 && waitpid(d.pid, &dead, WNOHANG) == 0; i++, dead = 0) {
		if (heapd_list_pid(d.sock, atk, &e) && e.delivered >= 2)
			break;
		sleep_ms(10);
	}
	if (dead || waitpid(d.pid, &dead, WNOHANG) != 0) {
		d.pid = 0;
		cr_assert_fail("the daemon died (%s):\n%s",
			       WIFSIGNALED(dead) ? strsignal(WTERMSIG(dead)) : "exited", heapd_log(&d));
	}
	cr_expect_eq(e.delivered, 2, "nobody's records: %llu delivered",
		     (unsigned long long)e.delivered);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d.sock, atk, LLGO_FORMAT_PPROF, &a), 0);
	cr_expect_eq(a.status, 0, "nobody's snapshot: %s", a.message);
	cr_expect_gt(a.data.len, 0);
	buf_free(&a.data);
	t = snapshot_text(&d, atk, LLGO_FORMAT_TEXT);
	cr_expect(strstr(t, "2: 128 [2: 128]") != NULL, "nobody's two records:\n%s", t);
	free(t);
	t = snapshot_text(&d, getpid(), LLGO_FORMAT_TEXT);
	cr_expect(strstr(t, "srv_site_alpha") != NULL, "root's profile:\n%s", t);
	free(t);

	close(go[1]);
	int status;
	cr_assert_eq(waitpid(atk, &status, 0), atk);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the attacker's process: %#x",
		  status);
	close(done[0]);
	fshim_close(&mine);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* ---- budgets ------------------------------------------------------------------------------ */

/* Fork n processes as nobody that each attach (fake shim, control page) and stay alive until
 * the pipe closes; their pids in pids. */
static void nobody_procs(struct heapd *d, int n, pid_t *pids, int *release)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		cr_assert_geq(pids[i], 0);
		if (pids[i] == 0) {
			close(p[1]);
			become_nobody();
			int s = heapd_connect(d->sock);
			if (s < 0 || attack_hello(s, NULL, NULL) != 0)
				_exit(1);
			char c;
			while (read(p[0], &c, 1) > 0)
				;
			_exit(0);
		}
	}
	close(p[0]);
	*release = p[1];
}

static void reap(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
}

static int count_state(const char *sock, uid_t uid, uint32_t state, uint32_t *flags)
{
	struct llgo_list_entry v[256];
	size_t n = heapd_list(sock, v, 256);
	int c = 0;
	for (size_t i = 0; i < n && i < 256; i++) {
		if (v[i].uid == uid && v[i].state == state) {
			c++;
			if (flags)
				*flags |= v[i].budget_flags;
		}
	}
	return c;
}

/* nobody may have 3 profiled processes; the 4th to 6th are refused, root's is not. */
Test(budget, processes_per_uid, .timeout = 60)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--max-processes-per-uid", "3", NULL };
	heapd_start(&d, NULL, extra);
	pid_t pids[6];
	int rel;
	nobody_procs(&d, 6, pids, &rel);
	sleep_ms(500);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0, "root refused");
	uint32_t flags = 0;
	int live = count_state(d.sock, nobody_uid(), LLGO_PROC_LIVE, &flags);
	cr_expect_eq(live, 3, "nobody has %d live sessions", live);
	cr_expect(flags & LLGO_BUDGET_SESSIONS, "not flagged in list: %#x", flags);
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(d.sock, getpid(), &e) && e.state == LLGO_PROC_LIVE && !e.budget_flags);
	char *log = read_all(d.log);
	cr_expect_eq(count_lines(log, "sessions budget reached"), 1, "logged once:\n%s", log);
	free(log);
	close(rel);
	reap(pids, 6);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* Add n fresh rings (ids 0..n-1) to sh: 0, or -1 when one could not be sent. */
static int fshim_add_rings(struct fshim *sh, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct fring r;
		fring_new(&r, i, LLGO_RING_MIN_DATA);
		if (fshim_add_ring(sh, &r) != 0)
			return -1;
	}
	return 0;
}

/* A process of uid that attaches and adds nrings rings, then waits until the write end of
 * the pipe go is closed. */
static pid_t ring_taker(struct heapd *d, uid_t uid, uint32_t nrings, const int go[2])
{
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(go[1]);
		become_uid(uid, uid);
		struct fshim sh;
		if (fshim_attach(&sh, d->sock, LLGO_RING_MIN_DATA, 512) != 0)
			_exit(1);
		if (fshim_add_rings(&sh, nrings) != 0)
			_exit(2);
		char c;
		while (read(go[0], &c, 1) > 0)
			;
		_exit(0);
	}
	return child;
}

/* The rings pid holds once the daemon took or refused all nrings of them. */
static uint32_t rings_taken(struct heapd *d, pid_t pid, uint32_t nrings)
{
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	for (int i = 0; i < 500; i++) {
		if (heapd_list_pid(d->sock, pid, &e) &&
		    (e.rings == nrings || (e.budget_flags & LLGO_BUDGET_RINGS)))
			break;
		sleep_ms(10);
	}
	sleep_ms(100); /* a refusal refuses the rest too: nothing is freed meanwhile */
	cr_assert(heapd_list_pid(d->sock, pid, &e), "pid %d is not listed", (int)pid);
	return e.rings;
}

/* nobody's process adds 6 rings with a budget of 2: 2 are read, its connection stays, and
 * root's process gets all of its rings. */
Test(budget, rings_per_uid, .timeout = 60)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--max-rings-per-uid", "2", NULL };
	heapd_start(&d, NULL, extra);
	int go[2];
	cr_assert_eq(pipe(go), 0);
	pid_t child = ring_taker(&d, nobody_uid(), 6, go);
	close(go[0]);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	cr_assert_eq(fshim_add_rings(&sh, 6), 0);
	sleep_ms(400);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, child, &e), "nobody's session is gone");
	cr_expect_eq(e.state, LLGO_PROC_LIVE, "nobody's connection was dropped");
	cr_expect_eq(e.rings, 2, "nobody's rings: %u", e.rings);
	cr_expect(e.budget_flags & LLGO_BUDGET_RINGS, "flags %#x", e.budget_flags);
	cr_assert(heapd_list_pid(d.sock, getpid(), &e));
	cr_expect_eq(e.rings, 6, "root's rings: %u", e.rings);
	cr_expect_eq(e.budget_flags, 0);
	close(go[1]);
	waitpid(child, NULL, 0);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* Five uids take the rings of a global budget in turn, each as many as its per-uid budget
 * allows: the later ones still get some (none holds more than it leaves to the others), and
 * root's process gets at least the eighth kept for root. (Per-uid budgets alone: 6, 6 and 4
 * rings took all 16; the fourth and fifth uids and root got none.) */
Test(budget, global_rings_keep_shares_for_root_and_each_uid, .timeout = 60)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--max-rings", "16", "--max-rings-per-uid", "6", NULL };
	heapd_start(&d, NULL, extra);
	int go[2];
	cr_assert_eq(pipe(go), 0);
	const uid_t uids[] = { nobody_uid(), 4242, 4243, 4244, 4245 };
	pid_t kids[5];
	uint32_t got[5], sum = 0;
	for (int i = 0; i < 5; i++) {
		kids[i] = ring_taker(&d, uids[i], 6, go);
		got[i] = rings_taken(&d, kids[i], 6);
		sum += got[i];
	}
	close(go[0]);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	cr_assert_eq(fshim_add_rings(&sh, 6), 0);
	uint32_t root = rings_taken(&d, getpid(), 6);
	cr_log_info("rings of 16: uids %u %u %u %u %u, root %u", got[0], got[1], got[2], got[3],
		    got[4], root);
	for (int i = 0; i < 4; i++)
		cr_expect_geq(got[i], 1, "uid %u got no ring (%u %u %u %u %u)", (unsigned)uids[i],
			      got[0], got[1], got[2], got[3], got[4]);
	cr_expect_leq(sum, 14, "the users took %u of 16 rings", sum);
	cr_expect_geq(root, 2, "root got %u rings after five uids took %u", root, sum);
	cr_expect_leq(sum + root, 16);
	close(go[1]);
	for (int i = 0; i < 5; i++)
		waitpid(kids[i], NULL, 0);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* nobody's process fills its bucket memory budget with distinct stacks: its later records
 * are counted, not aggregated; root's process in the same daemon loses nothing. */
Test(budget, bucket_memory_per_uid, .timeout = 60)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--max-bucket-memory-per-uid", "256K", NULL };
	heapd_start(&d, NULL, extra);
	int go[2];
	cr_assert_eq(pipe(go), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(go[1]);
		become_nobody();
		struct fshim sh;
		if (fshim_attach(&sh, d.sock, 1u << 16, 512) != 0)
			_exit(1);
		struct fring r;
		fring_new(&r, 0, 1u << 16);
		if (fshim_add_ring(&sh, &r) != 0)
			_exit(2);
		for (uint64_t i = 0; i < 20000; i++) {
			uint64_t st[3] = { RET(srv_site_alpha), 0x1000 + i * 16, RET(srv_site_caller) };
			fring_push_n(&r, st, 3, 64 + i, 1, 1);
		}
		char c;
		while (read(go[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(go[0]);
	struct llgo_list_entry e;
	memset(&e, 0, sizeof(e));
	for (int i = 0; i < 1000 && !(heapd_list_pid(d.sock, child, &e) && e.delivered >= 20000); i++)
		sleep_ms(10);
	cr_expect_eq(e.delivered, 20000);
	cr_expect(e.budget_flags & LLGO_BUDGET_BUCKET_BYTES, "flags %#x", e.budget_flags);
	cr_expect_gt(e.budget_dropped, 0, "no record degraded");
	/* root: every record aggregated */
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, 1u << 16, 512), 0);
	struct fring r;
	fring_new(&r, 0, 1u << 16);
	cr_assert_eq(fshim_add_ring(&sh, &r), 0);
	for (uint64_t i = 0; i < 2000; i++) {
		uint64_t st[3] = { RET(srv_site_alpha), 0x1000 + i * 16, RET(srv_site_caller) };
		fring_push_n(&r, st, 3, 64 + i, 1, 1);
	}
	struct llgo_list_entry me = wait_delivered(d.sock, getpid(), 2000);
	cr_expect_eq(me.budget_flags, 0);
	cr_expect_eq(me.budget_dropped, 0);
	cr_expect_eq(me.buckets, 2000, "root's buckets: %llu", (unsigned long long)me.buckets);
	close(go[1]);
	waitpid(child, NULL, 0);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* nobody's short-lived processes do not push root's exited sessions out; kept per uid. */
Test(budget, exited_sessions_per_uid, .timeout = 60)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--keep-exited-per-uid", "2", "--keep-exited", "4", NULL };
	heapd_start(&d, NULL, extra);
	pid_t mine = fork();
	cr_assert_geq(mine, 0);
	if (mine == 0) {
		int s = heapd_connect(d.sock);
		_exit(s < 0 || attack_hello(s, NULL, NULL) != 0);
	}
	waitpid(mine, NULL, 0);
	for (int round = 0; round < 3; round++) {
		pid_t pids[3];
		int rel;
		nobody_procs(&d, 3, pids, &rel);
		sleep_ms(200);
		close(rel);
		reap(pids, 3);
	}
	sleep_ms(400);
	int theirs = count_state(d.sock, nobody_uid(), LLGO_PROC_EXITED, NULL);
	cr_expect_eq(theirs, 2, "nobody's exited sessions kept: %d", theirs);
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(d.sock, mine, &e) && e.state == LLGO_PROC_EXITED,
		  "root's exited session was pushed out");
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* nobody holds its connection budget; root still connects and is answered. Nobody's LIST
 * shows none of root's processes. */
Test(exposure, connections_per_uid_and_list, .timeout = 60)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--max-conns-per-uid", "8", NULL };
	heapd_start(&d, NULL, extra);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	int go[2], res[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(res), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(go[1]);
		become_nobody();
		/* LIST as nobody: root's process is not shown */
		struct llgo_list_entry v[16];
		size_t n = heapd_list(d.sock, v, 16);
		char verdict = n == 0 ? 'y' : 'n';
		int socks[50];
		for (int i = 0; i < 50; i++)
			socks[i] = heapd_connect(d.sock);
		if (write(res[1], &verdict, 1) != 1)
			_exit(3);
		char c;
		while (read(go[0], &c, 1) > 0)
			;
		(void)socks;
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	char verdict = 0;
	cr_assert_eq(read(res[0], &verdict, 1), 1);
	cr_expect_eq(verdict, 'y', "nobody's LIST shows root's processes");
	sleep_ms(200);
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(d.sock, getpid(), &e), "root is locked out");
	char *log = read_all(d.log);
	cr_expect_eq(count_lines(log, "connections budget reached"), 1, "%s", log);
	free(log);
	close(go[1]);
	waitpid(child, NULL, 0);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* ---- exposure ----------------------------------------------------------------------------- */

#define CLI (getenv("LLGO_TEST_CLI") ? getenv("LLGO_TEST_CLI") : LLGO_BUILD_DIR "/bin/llgo-heap")

/* A stopped daemon: the CLI gives up with a clear error and a nonzero status. */
Test(exposure, cli_times_out_on_a_stopped_daemon, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	heapd_pause(&d);
	char cmd[512], *out = NULL;
	snprintf(cmd, sizeof(cmd), "%s list --socket %s --timeout 2 2>&1; echo \"exit=$?\"", CLI,
		 d.sock);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	FILE *p = popen(cmd, "r");
	cr_assert(p);
	out = calloc(1, 4096);
	size_t n = fread(out, 1, 4095, p);
	out[n] = '\0';
	pclose(p);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	heapd_resume(&d);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	cr_expect_lt(secs, 10.0, "the CLI waited %.1f s", secs);
	cr_expect(strstr(out, "did not answer") != NULL, "%s", out);
	cr_expect(strstr(out, "exit=0") == NULL, "%s", out);
	free(out);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* Root writes a profile with -o into a folder where nobody planted symlinks (at the old
 * predictable temporary name, and at the name itself): no file they point to is written. */
Test(exposure, output_file_follows_no_planted_symlink, .timeout = 60)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	char shared[128], victim[160], victim2[160], target[160], cmd[700];
	snprintf(shared, sizeof(shared), "%s/shared", d.dir);
	cr_assert_eq(mkdir(shared, 01777), 0);
	chmod(shared, 01777);
	snprintf(victim, sizeof(victim), "%s/victim", d.dir);
	snprintf(victim2, sizeof(victim2), "%s/victim2", d.dir);
	snprintf(target, sizeof(target), "%s/heap.pb.gz", shared);
	FILE *f = fopen(victim, "w");
	fputs("root's file\n", f);
	fclose(f);
	f = fopen(victim2, "w");
	fputs("root's other file\n", f);
	fclose(f);
	int go[2];
	cr_assert_eq(pipe(go), 0);
	pid_t cli = fork();
	cr_assert_geq(cli, 0);
	if (cli == 0) {
		char c;
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(126);
		char pid[32];
		snprintf(pid, sizeof(pid), "%d", (int)getppid());
		execl(CLI, "llgo-heap", "snapshot", pid, "--socket", d.sock, "-o", target,
		      (char *)NULL);
		_exit(127);
	}
	/* nobody plants the links (in a sticky world-writable folder, as in /tmp) */
	pid_t planter = fork();
	cr_assert_geq(planter, 0);
	if (planter == 0) {
		become_nobody();
		char tmp[256];
		snprintf(tmp, sizeof(tmp), "%s.tmp.%d", target, (int)cli);
		_exit(symlink(victim, tmp) != 0 || symlink(victim2, target) != 0);
	}
	int st;
	waitpid(planter, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "planting failed");
	cr_assert_eq(write(go[1], "g", 1), 1);
	close(go[1]);
	waitpid(cli, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "snapshot -o: status %d", st);
	char *v = read_all(victim), *v2 = read_all(victim2);
	cr_expect_str_eq(v, "root's file\n", "the planted temporary link was followed");
	cr_expect_str_eq(v2, "root's other file\n", "the planted link at FILE was followed");
	free(v);
	free(v2);
	struct stat sb;
	cr_expect(lstat(target, &sb) == 0 && S_ISREG(sb.st_mode), "no profile at %s", target);
	snprintf(cmd, sizeof(cmd), "gzip -t %s", target);
	cr_expect_eq(system(cmd), 0, "not a gzip file");
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* llgo-heap snapshot (this process) -o TARGET; its exit status, -1 when it did not exit. */
static int cli_snapshot_to(const char *sock, const char *target)
{
	char pid[32];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	pid_t cli = fork();
	cr_assert_geq(cli, 0);
	if (cli == 0) {
		int nul = open("/dev/null", O_WRONLY); /* the CLI's stderr is not the test's */
		if (nul >= 0)
			dup2(nul, 2);
		execl(CLI, "llgo-heap", "snapshot", pid, "--socket", sock, "-o", target,
		      (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(cli, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* -o to an existing device or FIFO writes it in place: a temporary and a rename would
 * replace /dev/null itself with a regular file (root can write /dev). A private device node
 * is tried first, so a CLI that still renames is caught without touching /dev/null. A
 * symlink to a device (/dev/stdout) is refused and left as it is. */
Test(exposure, output_to_a_device_is_written_in_place, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	struct stat before, after;
	char path[160];

	/* a private character device (root only): the same node as /dev/null */
	bool private_ok = true;
	if (geteuid() == 0) {
		snprintf(path, sizeof(path), "%s/null", d.dir);
		cr_assert_eq(mknod(path, S_IFCHR | 0666, makedev(1, 3)), 0, "mknod: %s",
			     strerror(errno));
		cr_assert_eq(lstat(path, &before), 0);
		cr_expect_eq(cli_snapshot_to(d.sock, path), 0, "snapshot -o %s", path);
		cr_assert_eq(lstat(path, &after), 0);
		private_ok = S_ISCHR(after.st_mode) && after.st_ino == before.st_ino &&
			     after.st_rdev == before.st_rdev;
		cr_expect(private_ok, "-o replaced the device node %s (mode %o)", path,
			  after.st_mode);
	}

	/* /dev/null itself, only once a private node was left alone */
	if (private_ok) {
		cr_assert_eq(stat("/dev/null", &before), 0);
		cr_assert(S_ISCHR(before.st_mode), "/dev/null is not a device before the test");
		cr_expect_eq(cli_snapshot_to(d.sock, "/dev/null"), 0, "snapshot -o /dev/null");
		cr_assert_eq(lstat("/dev/null", &after), 0);
		bool same = S_ISCHR(after.st_mode) && after.st_ino == before.st_ino &&
			    after.st_rdev == before.st_rdev;
		if (!same && geteuid() == 0) { /* put the shared machine's /dev/null back */
			unlink("/dev/null");
			mknod("/dev/null", S_IFCHR | 0666, makedev(1, 3));
			chmod("/dev/null", 0666);
		}
		cr_expect(same, "-o /dev/null replaced /dev/null (mode %o)", after.st_mode);
	}

	/* a FIFO: written in place. The read end is open (without blocking) before the CLI
	 * runs and holds the whole profile, so a CLI that never opens the FIFO fails the test
	 * instead of leaving a reader blocked. */
	snprintf(path, sizeof(path), "%s/fifo", d.dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	int rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	cr_assert_geq(rfd, 0, "open FIFO: %s", strerror(errno));
	fcntl(rfd, F_SETPIPE_SZ, 1 << 20);
	cr_expect_eq(cli_snapshot_to(d.sock, path), 0, "snapshot -o FIFO");
	char buf[4096];
	size_t total = 0;
	ssize_t n;
	while ((n = read(rfd, buf, sizeof(buf))) > 0)
		total += (size_t)n;
	close(rfd);
	cr_expect_gt(total, 0, "nothing was written to the FIFO");
	cr_expect(lstat(path, &after) == 0 && S_ISFIFO(after.st_mode), "the FIFO was replaced");

	/* a symlink to a device: refused, the link left as it was */
	snprintf(path, sizeof(path), "%s/stdout", d.dir);
	cr_assert_eq(symlink("/dev/null", path), 0);
	cr_expect_neq(cli_snapshot_to(d.sock, path), 0, "-o through a symlink to a device");
	char link[64] = "";
	ssize_t ln = readlink(path, link, sizeof(link) - 1);
	cr_expect(ln == (ssize_t)strlen("/dev/null") && memcmp(link, "/dev/null", (size_t)ln) == 0,
		  "the symlink was replaced");

	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* The socket is mode 0666 (any user's shim attaches) without a chmod by path. */
Test(exposure, socket_mode, .timeout = 30)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct stat sb;
	cr_assert_eq(lstat(d.sock, &sb), 0);
	cr_expect(S_ISSOCK(sb.st_mode));
	cr_expect_eq(sb.st_mode & 0777, 0666, "mode %o", sb.st_mode & 0777);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

#include <netinet/in.h>

static int http_port_of(struct heapd *d)
{
	for (int i = 0; i < 500; i++) {
		char *log = read_all(d->log);
		const char *at = strstr(log, "serving http://127.0.0.1:");
		int port = at ? atoi(at + strlen("serving http://127.0.0.1:")) : 0;
		free(log);
		if (port)
			return port;
		sleep_ms(10);
	}
	cr_assert_fail("no HTTP port in the log");
	return 0;
}

static int http_connect(int port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	struct timeval tv = { .tv_sec = 5 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return s;
}

static int http_send(int s, const char *path)
{
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			 path);
	return write(s, req, (size_t)n) == n ? 0 : -1;
}

/* The HTTP status of the answer on s (0: none within the timeout). */
static int http_status(int s)
{
	char buf[64] = "";
	ssize_t n = read(s, buf, sizeof(buf) - 1);
	if (n < 12)
		return 0;
	buf[n] = '\0';
	return atoi(buf + 9);
}

/* 70 clients ask for seconds=60 deltas (each would hold a connection for a minute): the
 * endpoint still answers a plain profile request at once. */
Test(exposure, http_slow_deltas_do_not_lock_the_endpoint, .timeout = 60)
{
	struct heapd d;
	const char *extra[] = { "--http", "127.0.0.1:0", NULL };
	heapd_start(&d, NULL, extra);
	int port = http_port_of(&d);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	char path[128];
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d&seconds=60", (int)getpid());
	int socks[70];
	for (int i = 0; i < 70; i++) {
		socks[i] = http_connect(port);
		if (socks[i] >= 0)
			http_send(socks[i], path);
	}
	sleep_ms(500);
	int s = http_connect(port);
	cr_assert_geq(s, 0, "cannot connect");
	snprintf(path, sizeof(path), "/debug/pprof/heap?pid=%d", (int)getpid());
	cr_assert_eq(http_send(s, path), 0);
	int st = http_status(s);
	cr_expect_eq(st, 200, "a plain request got %d behind 70 slow deltas", st);
	close(s);
	for (int i = 0; i < 70; i++)
		if (socks[i] >= 0)
			close(socks[i]);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* nobody asks for big profiles of its process on many connections and never reads them:
 * its unread answers stop at its budget, root is still answered. */
Test(budget, unread_answers_per_uid, .timeout = 90)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--max-unread-per-uid", "1M", NULL };
	heapd_start(&d, NULL, extra);
	int go[2];
	cr_assert_eq(pipe(go), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(go[1]);
		become_nobody();
		struct fshim sh;
		if (fshim_attach(&sh, d.sock, 1u << 16, 512) != 0)
			_exit(1);
		struct fring r;
		fring_new(&r, 0, 1u << 16);
		if (fshim_add_ring(&sh, &r) != 0)
			_exit(2);
		for (uint64_t i = 0; i < 6000; i++) {
			uint64_t st[3] = { RET(srv_site_alpha), 0x1000 + i * 16, RET(srv_site_caller) };
			fring_push_n(&r, st, 3, 64 + i, 1, 1);
		}
		struct llgo_msg_snapshot m;
		memset(&m, 0, sizeof(m));
		msg_header_init(&m.h, LLGO_MSG_SNAPSHOT, sizeof(m));
		m.pid = (uint32_t)getpid();
		m.format = LLGO_FORMAT_TEXT;
		int socks[12];
		for (int i = 0; i < 12; i++) {
			socks[i] = heapd_connect(d.sock);
			if (socks[i] >= 0)
				msg_send(socks[i], &m, sizeof(m), -1);
		}
		char c;
		while (read(go[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(go[0]);
	char *log = NULL;
	for (int i = 0; i < 1000; i++) {
		free(log);
		log = read_all(d.log);
		if (strstr(log, "unread answers budget reached"))
			break;
		sleep_ms(20);
	}
	cr_expect(strstr(log, "unread answers budget reached") != NULL, "%s", log);
	free(log);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d.sock, getpid(), LLGO_FORMAT_TEXT, &a), 0);
	cr_expect_eq(a.status, 0, "root's snapshot: %s", a.message);
	buf_free(&a.data);
	close(go[1]);
	waitpid(child, NULL, 0);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* A connection that never sends anything is closed after 10 s: idle connections do not
 * pile up. */
Test(exposure, idle_connections_are_closed, .timeout = 60)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int s = heapd_connect(d.sock);
	cr_assert_geq(s, 0);
	struct timeval tv = { .tv_sec = 30 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char b;
	ssize_t r = recv(s, &b, 1, 0);
	cr_expect_eq(r, 0, "the idle connection was not closed in 30 s (recv %zd, %s)", r,
		     strerror(errno));
	close(s);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* Exited sessions are kept for --keep-exited-age seconds at most, and the evictions are
 * counted (in the daemon's exit line). */
Test(budget, exited_sessions_by_age, .timeout = 60)
{
	struct heapd d;
	const char *extra[] = { "--keep-exited-age", "1", NULL };
	heapd_start(&d, NULL, extra);
	pid_t p = fork();
	cr_assert_geq(p, 0);
	if (p == 0) {
		int s = heapd_connect(d.sock);
		_exit(s < 0 || attack_hello(s, NULL, NULL) != 0);
	}
	waitpid(p, NULL, 0);
	struct llgo_list_entry e;
	bool seen = false;
	for (int i = 0; i < 50 && !seen; i++) {
		seen = heapd_list_pid(d.sock, p, &e) && e.state == LLGO_PROC_EXITED;
		if (!seen)
			sleep_ms(20);
	}
	cr_assert(seen, "the exited session was never listed");
	sleep_ms(2200);
	cr_expect(!heapd_list_pid(d.sock, p, &e), "an exited session older than 1 s is still kept");
	heapd_stop_clean(&d);
	char *log = read_all(d.log);
	cr_expect(strstr(log, "1 exited processes evicted") != NULL, "%s", log);
	free(log);
	heapd_cleanup(&d);
}

/*
 * Fairness of the client workers: one user's slow requests never hold them all. nobody asks
 * for eight snapshots of a 40,000-bucket profile of its own (each takes the time of a huge
 * text answer, more than the four workers can build at once); root's snapshot of a small
 * process, asked meanwhile, is answered in a fraction of that time, by a worker nobody may
 * not take (at most half of them per uid other than root, workq.c).
 */
Test(budget, one_users_slow_snapshots_leave_workers_to_others, .timeout = 120)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	pid_t big = run_profiled(&d, nobody_uid(), PROGS "/stress_stacks", "40000");
	pid_t small = run_profiled(&d, 0, PROGS "/stress_stacks", "10");
	long t0 = lu_now_ms();
	free(snapshot_text(&d, big, LLGO_FORMAT_TEXT));
	long huge_ms = lu_now_ms() - t0;
	t0 = lu_now_ms();
	free(snapshot_text(&d, small, LLGO_FORMAT_TEXT));
	long quiet_ms = lu_now_ms() - t0;

	int go[2], ready[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ready), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(go[1]);
		close(ready[0]);
		become_nobody();
		struct llgo_msg_snapshot m;
		client_snapshot_req(&m, big, LLGO_FORMAT_TEXT, 0, 0);
		int socks[8];
		for (int i = 0; i < 8; i++) {
			socks[i] = heapd_connect(d.sock);
			if (socks[i] < 0 || client_send(socks[i], &m, sizeof(m)) != 0)
				_exit(1);
		}
		if (write(ready[1], "r", 1) != 1)
			_exit(2);
		char c;
		(void)!read(go[0], &c, 1); /* the answers stay unread until root has its own */
		_exit(0);
	}
	close(go[0]);
	close(ready[1]);
	char c;
	cr_assert_eq(read(ready[0], &c, 1), 1, "nobody's requests were not sent");
	sleep_ms(20); /* the workers have taken nobody's requests */
	t0 = lu_now_ms();
	free(snapshot_text(&d, small, LLGO_FORMAT_TEXT));
	long busy_ms = lu_now_ms() - t0;
	cr_assert_eq(write(go[1], "g", 1), 1);
	int st;
	waitpid(child, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's client: status 0x%x", st);
	cr_log_info("fairness: a huge snapshot takes %ld ms; root's small snapshot %ld ms quiet, "
		    "%ld ms while nobody's 8 huge ones are built", huge_ms, quiet_ms, busy_ms);
	/* waiting for one of nobody's jobs would take about huge_ms */
	cr_expect_lt(busy_ms, huge_ms / 2 + quiet_ms, "root waited %ld ms (a huge snapshot: "
		     "%ld ms)", busy_ms, huge_ms);
	int stop = heapd_stop(&d);
	cr_expect_eq(stop, 0, "llgo-heapd stop status %d:\n%s", stop, heapd_log(&d));
	heapd_cleanup(&d);
}

/* ---- memfd sessions: the process memfd and the live-object table ------------------------- */

/* A process memfd as the shim makes it: its control page at offset 0, sealed against
 * shrinking. -1 on failure (callers are forked children). */
static int atk_proc_memfd(void)
{
	long page = sysconf(_SC_PAGESIZE);
	int fd = memfd_create("atk-proc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, page) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
		return -1;
	struct llgo_ctl *c = atk_ctl_map(fd);
	if (!c)
		return -1;
	c->page_size = (uint32_t)page;
	munmap(c, LLGO_CTL_SIZE);
	return fd;
}

/* Connect and say HELLO with the process memfd `memfd`: the socket (or -1). With status,
 * wait for the answer and put its status there (0: attached); without, ask for none (as the
 * shim does: a HELLO that joins a session is not answered). */
static int atk_memfd_hello(const char *sock, int memfd, int *status)
{
	int s = heapd_connect(sock);
	if (status)
		*status = -1;
	if (s < 0)
		return -1;
	struct llgo_msg_hello m;
	hello_init(&m, LLGO_RING_MIN_DATA, 512);
	m.flags = LLGO_HELLO_MEMFD | (status ? 0 : LLGO_HELLO_NO_ACK);
	if (msg_send(s, &m, sizeof(m), memfd) != 0) {
		close(s);
		return -1;
	}
	if (status)
		*status = wait_reply(s, LLGO_MSG_HELLO_ACK);
	return s;
}

static int atk_add_live(int sock, int live)
{
	struct llgo_msg_header h;
	msg_header_init(&h, LLGO_MSG_ADD_LIVE, sizeof(h));
	return msg_send(sock, &h, sizeof(h), live);
}

/* Slots [0, n) of e full: objects of the record (ring 0, seq 1) under keys no bucket has.
 * Not instrumented: 512 MiB written under TSan would touch four times that of shadow. */
__attribute__((no_sanitize("address", "thread"))) static void
atk_live_fill(struct llgo_live_entry *e, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		e[i].key = 0x5eed0000 + i;
		e[i].ref = LLGO_LIVE_REF(0, 1);
		e[i].size = 16;
		atomic_store_explicit(&e[i].addr, 0x10000000ull + 16 * i, memory_order_relaxed);
	}
}

/* A live-object table (sealed memfd) whose first `slots` slots each hold an object no
 * bucket has (atk_live_fill); top at the last level. */
static int atk_live_table(uint64_t slots)
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
	atk_live_fill((struct llgo_live_entry *)(void *)((unsigned char *)h + LLGO_LIVE_HEADER_SIZE),
		      slots < LLGO_LIVE_ENTRIES ? slots : LLGO_LIVE_ENTRIES);
	munmap(h, LLGO_LIVE_MAP_SIZE);
	return fd;
}

/* The time from pid's exit (reaped by the caller just before) until LIST shows it exited,
 * polled for at most wait_ms; wait_ms + 1 when it never did. */
static long ms_until_listed_exited(const char *sock, pid_t pid, long wait_ms)
{
	long t0 = lu_now_ms();
	struct llgo_list_entry e;
	while (lu_now_ms() - t0 <= wait_ms) {
		if (heapd_list_pid(sock, pid, &e) && e.state == LLGO_PROC_EXITED)
			return lu_now_ms() - t0;
		sleep_ms(20);
	}
	return wait_ms + 1;
}

/* A process of root's (fake shim, memfd session) that lives until *release is closed;
 * processes forked after it must close *release. */
static pid_t root_memfd_proc(const char *sock, int *release)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[1]);
		int st, memfd = atk_proc_memfd();
		int s = memfd < 0 ? -1 : atk_memfd_hello(sock, memfd, &st);
		if (s < 0 || st != 0)
			_exit(2);
		char c;
		while (read(p[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(p[0]);
	*release = p[1];
	return pid;
}

/* End root_memfd_proc's pid: the ms until LIST shows it exited (ms_until_listed_exited). */
static long root_memfd_proc_end(const char *sock, pid_t pid, int release, long wait_ms)
{
	close(release);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "root's process: status 0x%x", st);
	return ms_until_listed_exited(sock, pid, wait_ms);
}

/*
 * The reported attack on the exit workers: nobody's 100 processes each attach with a
 * process memfd of their own and all present one live-object table of 512 MiB, every slot
 * full, then exit together. Each final scan of that table took 0.5 to 0.8 s on one of the
 * two exit workers, so root's process, exiting just after, was listed as exited half a
 * minute or more later (the review saw 128 s with 400). Now a table backs one session only
 * (the others' ADD_LIVE is refused), a scan reads at most what its own samples justify, and
 * nobody's exits run on at most half of the exit workers: root's is listed in well under
 * 10 s (0.3 to 0.6 s on an idle machine).
 */
Test(budget, one_users_exits_leave_exit_workers_to_others, .timeout = 150)
{
	need_root();
	enum { N = 100 };
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int go[2], ready[2], release;
	pid_t mine = root_memfd_proc(d.sock, &release);
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ready), 0);
	pid_t atk = fork();
	cr_assert_geq(atk, 0);
	if (atk == 0) {
		close(go[1]);
		close(ready[0]);
		close(release);
		become_nobody();
		int live = atk_live_table(LLGO_LIVE_ENTRIES);
		if (live < 0)
			_exit(1);
		pid_t kids[N];
		for (int i = 0; i < N; i++) {
			kids[i] = fork();
			if (kids[i] == 0) {
				int st, memfd = atk_proc_memfd();
				int s = memfd < 0 ? -1 : atk_memfd_hello(d.sock, memfd, &st);
				if (s < 0 || st != 0 || atk_add_live(s, live) != 0)
					_exit(2);
				if (write(ready[1], "r", 1) != 1)
					_exit(3);
				char c;
				while (read(go[0], &c, 1) > 0)
					;
				_exit(0);
			}
		}
		int bad = 0;
		for (int i = 0; i < N; i++) {
			int st;
			bad += kids[i] < 0 || waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) ||
			       WEXITSTATUS(st) != 0;
		}
		_exit(bad ? 4 : 0);
	}
	close(go[0]);
	close(ready[1]);
	int n = 0;
	char c;
	while (n < N && read(ready[0], &c, 1) == 1)
		n++;
	cr_assert_eq(n, N, "only %d of nobody's processes attached", n);
	sleep_ms(500); /* their ADD_LIVE handled */
	int held = count_state(d.sock, nobody_uid(), LLGO_PROC_LIVE, NULL);
	close(go[1]); /* nobody's processes exit */
	sleep_ms(300);
	long delay = root_memfd_proc_end(d.sock, mine, release, 30000); /* then root's */
	int st;
	cr_assert_eq(waitpid(atk, &st, 0), atk);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's processes: status 0x%x", st);
	cr_log_info("exit flood: nobody's live sessions with the table %d of %d; root's process "
		    "listed as exited %ld ms after it ended", held, N, delay);
	cr_expect_lt(delay, 10000, "root's exited process was listed %ld ms after its exit "
		     "(nobody's %d sessions holding the table)", delay, held);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d.sock, mine, LLGO_FORMAT_TEXT, &a), 0);
	cr_expect_eq(a.status, 0, "root's final profile: %s", a.message);
	client_answer_free(&a);
	heapd_stop(&d);
	heapd_cleanup(&d);
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
	int memfd = atk_proc_memfd(), live = atk_live_table(16);
	cr_assert(memfd >= 0 && live >= 0);
	int go[2], ares[2], bres[2];
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ares), 0);
	cr_assert_eq(pipe(bres), 0);
	pid_t a = fork();
	cr_assert_geq(a, 0);
	if (a == 0) {
		close(go[1]);
		int st, s = atk_memfd_hello(d.sock, memfd, &st);
		int r[2] = { s >= 0 && st == 0 && atk_add_live(s, live) == 0 ? 0 : -1, -1 };
		char c;
		if (read(go[0], &c, 1) != 1) /* B has tried */
			_exit(1);
		if (atk_memfd_hello(d.sock, memfd, NULL) >= 0)
			r[1] = 0;
		if (write(ares[1], r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(2);
		while (read(go[0], &c, 1) > 0)
			;
		_exit(0);
	}
	struct llgo_list_entry e;
	for (int i = 0; i < 500 && !(heapd_list_pid(d.sock, a, &e) && e.state == LLGO_PROC_LIVE); i++)
		sleep_ms(10);
	cr_assert_eq(e.state, LLGO_PROC_LIVE, "A did not attach");
	sleep_ms(300); /* A's ADD_LIVE handled */
	pid_t b = fork();
	cr_assert_geq(b, 0);
	if (b == 0) {
		close(go[1]);
		int r[3] = { -1, -1, 0 }, own = atk_proc_memfd();
		atk_memfd_hello(d.sock, memfd, &r[0]);
		int s = own < 0 ? -1 : atk_memfd_hello(d.sock, own, &r[1]);
		if (s >= 0 && r[1] == 0 && atk_add_live(s, live) == 0) {
			char buf[64]; /* nothing is sent to a shim after HELLO_ACK: EOF, or 10 s */
			r[2] = recv(s, buf, sizeof(buf), 0) == 0;
		}
		if (write(bres[1], r, sizeof(r)) != (ssize_t)sizeof(r))
			_exit(2);
		char c;
		while (read(go[0], &c, 1) > 0)
			;
		_exit(0);
	}
	int rb[3], ra[2];
	cr_assert_eq(read(bres[0], rb, sizeof(rb)), (ssize_t)sizeof(rb));
	cr_expect_neq(rb[0], 0, "B's HELLO with A's process memfd was taken (status %d)", rb[0]);
	cr_expect_eq(rb[0], EBUSY, "status %d", rb[0]);
	cr_expect_eq(rb[1], 0, "B's HELLO with its own memfd: status %d", rb[1]);
	cr_expect_eq(rb[2], 1, "B's ADD_LIVE of A's table was taken (its connection lives)");
	cr_assert(heapd_list_pid(d.sock, b, &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED, "B's session lives on with A's table");
	cr_assert_eq(write(go[1], "g", 1), 1);
	cr_assert_eq(read(ares[0], ra, sizeof(ra)), (ssize_t)sizeof(ra));
	cr_expect_eq(ra[0], 0, "A did not attach with its table");
	cr_expect_eq(ra[1], 0, "A did not reconnect");
	sleep_ms(300);
	cr_assert(heapd_list_pid(d.sock, a, &e));
	cr_expect_eq(e.state, LLGO_PROC_LIVE, "A's session ended");
	char *log = read_all(d.log), a_dropped[64], a_replaced[64];
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
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* The bearer token decides who reads profiles over HTTP: a token file others than its owner
 * may write, or owned by a uid other than root or the daemon's, is refused as the
 * configuration file is (at start, with the reason; at SIGHUP, keeping the token in force). */
Test(exposure, token_file_writable_by_others_is_refused, .timeout = 60)
{
	need_root();
	struct heapd d;
	heapd_init(&d, NULL);
	char token[160];
	snprintf(token, sizeof(token), "%s/token", d.dir);
	FILE *f = fopen(token, "w");
	cr_assert(f);
	fputs("s3cret\n", f);
	fclose(f);
	const struct { mode_t mode; uid_t owner; } bad[] = {
		{ 0666, 0 }, { 0620, 0 }, { 0602, 0 }, { 0600, 65534 },
	};
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(bad); i++) {
		cr_assert_eq(chown(token, bad[i].owner, 0), 0);
		cr_assert_eq(chmod(token, bad[i].mode), 0);
		const char *extra[] = { "--http", "127.0.0.1:0", "--http-token-file", token, NULL };
		pid_t pid = heapd_spawn(&d, extra);
		int st = 0;
		bool exited = false;
		for (int k = 0; k < 500 && !exited; k++) {
			exited = waitpid(pid, &st, WNOHANG) == pid;
			if (!exited)
				sleep_ms(10);
		}
		if (!exited) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		}
		char *log = heapd_log(&d);
		cr_expect(exited && WIFEXITED(st) && WEXITSTATUS(st) != 0,
			  "mode %o uid %u: the token file was accepted:\n%s", (unsigned)bad[i].mode,
			  (unsigned)bad[i].owner, log);
		cr_expect(strstr(log, "writable by others than its owner"),
			  "mode %o uid %u: no reason given:\n%s", (unsigned)bad[i].mode,
			  (unsigned)bad[i].owner, log);
		free(log);
	}
	/* A good file, then made world-writable with another token in it: SIGHUP keeps the
	 * first token. */
	cr_assert_eq(chown(token, 0, 0), 0);
	cr_assert_eq(chmod(token, 0600), 0);
	const char *extra[] = { "--http", "127.0.0.1:0", "--http-token-file", token, NULL };
	heapd_run(&d, extra);
	f = fopen(token, "w");
	cr_assert(f);
	fputs("planted\n", f);
	fclose(f);
	cr_assert_eq(chmod(token, 0666), 0);
	kill(d.pid, SIGHUP);
	char *log = NULL;
	for (int i = 0; i < 500; i++) {
		free(log);
		log = heapd_log(&d);
		if (strstr(log, "writable by others than its owner"))
			break;
		sleep_ms(10);
	}
	cr_expect(strstr(log, "writable by others than its owner"), "reload accepted it:\n%s", log);
	free(log);
	const char *tokens[] = { "planted", "s3cret" };
	const int want[] = { 401, 200 };
	for (int i = 0; i < 2; i++) {
		int s = http_connect(d.port);
		cr_assert_geq(s, 0);
		char req[256];
		int n = snprintf(req, sizeof(req), "GET /metrics HTTP/1.1\r\nHost: x\r\n"
			 "Authorization: Bearer %s\r\nConnection: close\r\n\r\n", tokens[i]);
		cr_assert_eq(write(s, req, (size_t)n), n);
		int st = http_status(s);
		cr_expect_eq(st, want[i], "token '%s': status %d, want %d", tokens[i], st, want[i]);
		close(s);
	}
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* GET path as uid (a forked child that drops root), with the bearer token when given: the
 * HTTP status (0: no answer within the socket's 5 s). */
static int http_status_as(uid_t uid, int port, const char *path, const char *token)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		close(p[0]);
		if (uid)
			become_uid(uid, uid);
		int s = http_connect(port);
		char req[512], auth[300] = "";
		if (token)
			snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
		int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%s"
			 "Connection: close\r\n\r\n", path, auth);
		int st = s >= 0 && write(s, req, (size_t)n) == n ? http_status(s) : -1;
		_exit(write(p[1], &st, sizeof(st)) == sizeof(st) ? 0 : 1);
	}
	close(p[1]);
	int st = -1;
	cr_assert_eq(read(p[0], &st, sizeof(st)), (ssize_t)sizeof(st));
	close(p[0]);
	waitpid(child, NULL, 0);
	return st;
}

/* --http alone (no token, no --http-uids): each local client is served its own processes
 * (the uid owning its socket), root every process; nobody is answered 404 for root's, as for
 * an unknown pid. (The daemon's own uid was served to everyone: nobody got root's profile.) */
Test(exposure, http_default_serves_each_local_uid_its_own, .timeout = 60)
{
	need_root();
	struct heapd d;
	const char *extra[] = { "--http", "127.0.0.1:0", NULL };
	heapd_start(&d, NULL, extra);
	int port = http_port_of(&d);
	struct fshim sh;
	cr_assert_eq(fshim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 512), 0);
	int go[2];
	cr_assert_eq(pipe(go), 0);
	pid_t mine = ring_taker(&d, nobody_uid(), 1, go);
	close(go[0]);
	rings_taken(&d, mine, 1);
	char root_path[128], nobody_path[128];
	snprintf(root_path, sizeof(root_path), "/debug/pprof/heap?pid=%d&debug=1", (int)getpid());
	snprintf(nobody_path, sizeof(nobody_path), "/debug/pprof/heap?pid=%d&debug=1", (int)mine);
	int st = http_status_as(nobody_uid(), port, root_path, NULL);
	cr_expect_eq(st, 404, "nobody asked for root's profile: %d", st);
	st = http_status_as(nobody_uid(), port, nobody_path, NULL);
	cr_expect_eq(st, 200, "nobody asked for its own profile: %d", st);
	st = http_status_as(4242, port, nobody_path, NULL);
	cr_expect_eq(st, 404, "uid 4242 asked for nobody's profile: %d", st);
	st = http_status_as(0, port, root_path, NULL);
	cr_expect_eq(st, 200, "root asked for its own profile: %d", st);
	st = http_status_as(0, port, nobody_path, NULL);
	cr_expect_eq(st, 200, "root asked for nobody's profile: %d", st);
	close(go[1]);
	waitpid(mine, NULL, 0);
	fshim_close(&sh);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/* The number after `key` in text (0 when absent). */
static unsigned long long acct_field(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/*
 * The exit scan of nobody's process, which sent no sample, over its table of 4 M full
 * slots (top at the last level): its final profile says what the scan read (every entry it
 * met is pending: no record of it was drained) and what it left unread. Before, every
 * slot; now at most the base a process without samples gets (128 Ki slots).
 */
Test(budget, exit_scan_reads_what_the_samples_justify, .timeout = 60)
{
	need_root();
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	pid_t atk = fork();
	cr_assert_geq(atk, 0);
	if (atk == 0) {
		become_nobody();
		int st, live = atk_live_table(4ull << 20), memfd = atk_proc_memfd();
		int s = live < 0 || memfd < 0 ? -1 : atk_memfd_hello(d.sock, memfd, &st);
		if (s < 0 || st != 0 || atk_add_live(s, live) != 0)
			_exit(2);
		sleep_ms(300); /* ADD_LIVE handled */
		_exit(0);
	}
	int st;
	cr_assert_eq(waitpid(atk, &st, 0), atk);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's process: status 0x%x", st);
	long delay = ms_until_listed_exited(d.sock, atk, 20000);
	char *text = snapshot_text(&d, atk, LLGO_FORMAT_TEXT);
	const char *line = strstr(text, "llgo-heap: sampled=");
	cr_assert(line, "no accounting line:\n%.500s", text);
	cr_log_info("exit scan: listed %ld ms after the exit; %.*s", delay,
		    (int)strcspn(line, "\n"), line);
	cr_expect_leq(acct_field(line, " pending="), 128u << 10, "the exit scan read %llu entries",
		      acct_field(line, " pending="));
	cr_expect_gt(acct_field(line, " unscanned="), (4ull << 20) - (128u << 10),
		     "the slots left unread not said: %.*s", (int)strcspn(line, "\n"), line);
	free(text);
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}

/*
 * The same fairness with nothing the scan's budget or the claims limit: nobody's process
 * maps one small file 40,000 times (each a mapping of its own), joins its session on 300
 * connections and says BYE on each, again and again. Each BYE is an exit job that re-reads
 * its mappings (about 0.1 s, under the session's drain lock), so the exit queue always holds
 * 300 of them: root's process, exiting meanwhile, was listed 30 s later or more. nobody runs
 * on one of the two exit workers at most, so root's exit job gets the other.
 */
Test(budget, one_users_bye_flood_leaves_exit_workers_to_others, .timeout = 150)
{
	need_root();
	enum { K = 300, MAPS = 40000 };
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int go[2], ready[2], release;
	pid_t mine = root_memfd_proc(d.sock, &release);
	cr_assert_eq(pipe(go), 0);
	cr_assert_eq(pipe(ready), 0);
	pid_t atk = fork();
	cr_assert_geq(atk, 0);
	if (atk == 0) {
		close(go[1]);
		close(ready[0]);
		close(release);
		become_nobody();
		struct rlimit rl = { 4096, 4096 };
		setrlimit(RLIMIT_NOFILE, &rl);
		int code = memfd_create("atk-code", MFD_CLOEXEC);
		if (code < 0 || ftruncate(code, 4096) != 0)
			_exit(1);
		for (int i = 0; i < MAPS; i++)
			if (mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, code, 0) == MAP_FAILED)
				_exit(2);
		int st, memfd = atk_proc_memfd();
		int first = memfd < 0 ? -1 : atk_memfd_hello(d.sock, memfd, &st);
		if (first < 0 || st != 0)
			_exit(3);
		struct pollfd p[K + 1];
		struct llgo_msg_header bye;
		msg_header_init(&bye, LLGO_MSG_BYE, sizeof(bye));
		for (int i = 0; i < K; i++) {
			p[i].fd = atk_memfd_hello(d.sock, memfd, NULL); /* joins the session */
			p[i].events = POLLIN;
			if (p[i].fd < 0)
				_exit(4);
		}
		sleep_ms(300);
		for (int i = 0; i < K; i++)
			if (msg_send(p[i].fd, &bye, sizeof(bye), -1) != 0)
				_exit(5);
		if (write(ready[1], "r", 1) != 1)
			_exit(6);
		p[K].fd = go[0];
		p[K].events = POLLIN;
		while (!p[K].revents) { /* every answer asks for another BYE, until go closes */
			if (poll(p, K + 1, -1) < 0)
				_exit(7);
			for (int i = 0; i < K; i++) {
				if (!(p[i].revents & POLLIN))
					continue;
				unsigned char pkt[LLGO_MSG_MAX];
				if (msg_recv(p[i].fd, pkt, sizeof(pkt), NULL) <= 0 ||
				    msg_send(p[i].fd, &bye, sizeof(bye), -1) != 0)
					_exit(8);
			}
		}
		_exit(0);
	}
	close(go[0]);
	close(ready[1]);
	char c;
	cr_assert_eq(read(ready[0], &c, 1), 1, "nobody's BYE flood did not start");
	sleep_ms(1000); /* the exit queue is full of BYEs */
	long delay = root_memfd_proc_end(d.sock, mine, release, 20000);
	close(go[1]);
	int st;
	cr_assert_eq(waitpid(atk, &st, 0), atk);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "nobody's process: status 0x%x", st);
	cr_log_info("BYE flood: root's process listed as exited %ld ms after it ended", delay);
	cr_expect_lt(delay, 10000, "root's exited process was listed %ld ms after its exit",
		     delay);
	heapd_stop(&d);
	heapd_cleanup(&d);
}

/* One slow client of uid: nconns connections to port that send a request a byte every
 * 500 ms, each reopened when the server closes it, until the process is killed. */
static pid_t http_slowloris(uid_t uid, int port, int nconns)
{
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child != 0)
		return child;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	become_uid(uid, uid);
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
				  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
				  "\r\n\r\n";
	int socks[256];
	size_t sent[256];
	for (int i = 0; i < nconns; i++)
		socks[i] = -1;
	for (;;) {
		for (int i = 0; i < nconns; i++) {
			if (socks[i] < 0) {
				socks[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
				struct sockaddr_in sa = { .sin_family = AF_INET,
							  .sin_port = htons((uint16_t)port),
							  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
				connect(socks[i], (struct sockaddr *)&sa, sizeof(sa));
				sent[i] = 0;
				continue;
			}
			char c;
			ssize_t r = recv(socks[i], &c, 1, MSG_DONTWAIT);
			bool gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
					       errno != ENOTCONN);
			if (!gone && sent[i] + 1 < sizeof(req)) {
				ssize_t w = send(socks[i], req + sent[i], 1, MSG_NOSIGNAL);
				if (w == 1)
					sent[i]++;
				else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN)
					gone = true;
			}
			if (gone) {
				close(socks[i]);
				socks[i] = -1;
			}
		}
		sleep_ms(500);
	}
}

/* 200 connections of five users trickle a byte every 500 ms (each byte restarts the idle
 * timeout, so without more they held all 64 HTTP connections for good): a request with the
 * token is still answered within 5 s, thanks to the deadline for a whole request, the
 * per-peer limit and slow connections closed first when the server is full. */
Test(exposure, http_slowloris_leaves_room_for_a_token_request, .timeout = 120)
{
	need_root();
	struct heapd d;
	heapd_init(&d, NULL);
	char token[160];
	snprintf(token, sizeof(token), "%s/token", d.dir);
	FILE *f = fopen(token, "w");
	cr_assert(f);
	fputs("s3cret\n", f);
	fclose(f);
	cr_assert_eq(chmod(token, 0600), 0);
	const char *extra[] = { "--http", "127.0.0.1:0", "--http-token-file", token, NULL };
	heapd_run(&d, extra);
	int port = http_port_of(&d);
	const uid_t uids[] = { nobody_uid(), 4242, 4243, 4244, 4245 };
	pid_t slow[5];
	for (int i = 0; i < 5; i++)
		slow[i] = http_slowloris(uids[i], port, 40);
	sleep_ms(3000); /* every connection opened and trickling */
	for (int round = 0; round < 3; round++) {
		long t0 = lu_now_ms();
		int st = http_status_as(0, port, "/metrics", "s3cret");
		long ms = lu_now_ms() - t0;
		cr_log_info("slowloris: /metrics with the token: %d after %ld ms", st, ms);
		cr_expect_eq(st, 200, "round %d: /metrics with the token: %d after %ld ms", round,
			     st, ms);
		cr_expect_lt(ms, 5000, "round %d: answered after %ld ms", round, ms);
		sleep_ms(1000);
	}
	for (int i = 0; i < 5; i++) {
		kill(slow[i], SIGKILL);
		waitpid(slow[i], NULL, 0);
	}
	heapd_stop_clean(&d);
	heapd_cleanup(&d);
}
