// SPDX-License-Identifier: MIT
/*
 * test_server.c: llgo-heapd as a black box. Each test starts the real daemon binary on a
 * private socket in a fresh temporary folder and stops it by pid (SIGTERM, then waitpid).
 * The test speaks the protocol as a fake shim (its own control page and ring memfds,
 * records written by helpers.h's small producer with shared/ring.h's helpers) and as a
 * client through heapd.h (client/client.c: LIST, SNAPSHOT, SET_RATE). Malformed packets must
 * cost the sender its connection and nothing else; profiles are served to the owner or root
 * only.
 */
#include "../agent/internal.h"
#include "helpers.h"

/* ---- tests --------------------------------------------------------------------------------- */

Test(server, attach_list_snapshot_exit, .timeout = 120)
{
	struct th_attached t;
	th_attached_start(&t, NULL, LLGO_RING_MIN_DATA, 1);
	const char *sock = t.d.sock;
	uint64_t a[2] = { TH_RET(th_site_alpha), TH_RET(th_site_caller) };
	uint64_t b[2] = { TH_RET(th_site_beta), TH_RET(th_site_caller) };
	/* more records than the 4 KiB ring holds at once: the drain thread keeps up */
	th_ring_push_n(&t.r, a, 2, 24, 1, 300);
	th_ring_push_n(&t.r, b, 2, 1000, 1, 100);

	char *folded = heapd_snapshot(sock, getpid(), LLGO_FORMAT_FOLDED, NULL);
	cr_expect(strstr(folded, "th_site_caller;th_site_alpha 7200\n") != NULL,
		  "folded:\n%s", folded);
	cr_expect(strstr(folded, "th_site_caller;th_site_beta 100000\n") != NULL,
		  "folded:\n%s", folded);
	cr_expect(strstr(folded, "sampled=400 delivered=400 dropped=0 corrupt=0") != NULL,
		  "folded:\n%s", folded);
	free(folded);

	char *text = heapd_snapshot(sock, getpid(), LLGO_FORMAT_TEXT, NULL);
	cr_expect(strncmp(text, "heap profile: ", 14) == 0, "text:\n%s", text);
	free(text);

	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_LIVE);
	cr_expect_eq(e.uid, getuid());
	cr_expect_eq(e.rings, 1);
	cr_expect_eq(e.rate, 1);
	cr_expect_eq(e.delivered, 400);
	cr_expect_eq(e.buckets, 2);
	cr_expect(th_accounting_holds(&e));
	cr_expect_str_eq(e.comm, "fake-shim");
	cr_expect_gt(e.start_time_ns, 0);

	/* The shim goes away without BYE: the session stays, exited, with its data. Records
	 * written just before the close are drained at EOF. */
	th_ring_push_n(&t.r, a, 2, 24, 1, 10);
	th_shim_close(&t.sh);
	th_wait_state(sock, getpid(), LLGO_PROC_EXITED, 5000);
	cr_assert(heapd_list_pid(sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED);
	cr_expect_eq(e.delivered, 410);
	cr_expect(th_accounting_holds(&e));
	folded = heapd_snapshot(sock, getpid(), LLGO_FORMAT_FOLDED, NULL);
	cr_expect(strstr(folded, "th_site_caller;th_site_alpha 7440\n") != NULL,
		  "after exit:\n%s", folded);
	free(folded);
	/* a new process with the same pid (exec) is preferred while live */
	struct th_shim sh2;
	cr_assert_eq(th_shim_attach(&sh2, sock, LLGO_RING_MIN_DATA, 4096), 0);
	cr_assert(heapd_list_pid(sock, getpid(), &e));
	cr_expect_eq(e.state, LLGO_PROC_LIVE);
	cr_expect_eq(e.rate, 4096);
	cr_expect_eq(e.delivered, 0);
	th_shim_close(&sh2);
	heapd_finish(&t.d);
}

Test(server, bye_is_answered_and_accounting_counts_drops, .timeout = 120)
{
	struct th_attached t;
	th_attached_shim(&t, NULL, 512);
	struct th_ring r;
	th_ring_new(&r, 7, LLGO_RING_MIN_DATA);
	cr_assert_eq(th_shim_add_ring(&t.sh, &r), 0);
	uint64_t a[1] = { TH_RET(th_site_alpha) };
	th_ring_push_n(&r, a, 1, 64, 512, 5);
	/* three drops, as a full ring counts them, and two samples that found no ring */
	for (int i = 0; i < 3; i++) {
		r.dropped++;
		atomic_store(&r.hdr->dropped, r.dropped);
		r.sampled++;
		atomic_store(&r.hdr->sampled, r.sampled);
	}
	atomic_store(&t.sh.ctl->lost_no_ring, 2);
	/* one record that fails its checksum */
	th_ring_push(&r, a, 1, 64, 512, true);
	th_ring_push_n(&r, a, 1, 64, 512, 1);

	struct llgo_msg_header bye;
	msg_header_init(&bye, LLGO_MSG_BYE, sizeof(bye));
	cr_assert_eq(msg_send(t.sh.sock, &bye, sizeof(bye), -1), 0);
	cr_expect_eq(th_wait_reply(t.sh.sock, LLGO_MSG_END), 0, "BYE must be answered by END(0)");

	struct llgo_list_entry e = th_wait_delivered(t.d.sock, getpid(), 6);
	cr_expect_eq(e.delivered, 6);
	cr_expect_eq(e.dropped, 5);
	cr_expect_eq(e.corrupt, 1);
	cr_expect_eq(e.sampled, 12);
	cr_expect(th_accounting_holds(&e), "sampled %llu delivered %llu dropped %llu corrupt %llu",
		  (unsigned long long)e.sampled, (unsigned long long)e.delivered,
		  (unsigned long long)e.dropped, (unsigned long long)e.corrupt);
	th_attached_end(&t);
}

Test(server, set_rate_writes_the_control_page, .timeout = 60)
{
	struct th_attached t;
	th_attached_shim(&t, NULL, 524288);
	struct client_answer a;
	cr_assert_eq(heapd_set_rate(t.d.sock, getpid(), 4096, &a), 0);
	cr_expect_eq(a.status, 0, "%s", a.message);
	char want[128];
	snprintf(want, sizeof(want), "pid %d: rate 524288 -> 4096", (int)getpid());
	cr_expect_str_eq(a.message, want);
	cr_expect_eq(atomic_load(&t.sh.ctl->rate_word), 4096);
	cr_expect_eq(atomic_load(&t.sh.ctl->rate_changes), 1);

	cr_assert_eq(heapd_set_rate(t.d.sock, getpid(), 1, &a), 0);
	cr_expect_eq(a.status, 0);
	cr_expect_eq(atomic_load(&t.sh.ctl->rate_word), LLGO_RATE_WORD_EVERY);
	cr_assert_eq(heapd_set_rate(t.d.sock, getpid(), 0, &a), 0);
	cr_expect_eq(a.status, 0);
	snprintf(want, sizeof(want), "pid %d: rate 1 -> 0", (int)getpid());
	cr_expect_str_eq(a.message, want);
	cr_expect_eq(atomic_load(&t.sh.ctl->rate_word), 0);
	cr_expect_eq(atomic_load(&t.sh.ctl->rate_changes), 3);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(t.d.sock, getpid(), &e));
	cr_expect_eq(e.rate, 0);

	cr_assert_eq(heapd_set_rate(t.d.sock, getpid(), LLGO_RATE_MAX + 1, &a), 0);
	cr_expect_eq(a.status, EINVAL);
	cr_assert_eq(heapd_set_rate(t.d.sock, 999999999, 10, &a), 0);
	cr_expect_eq(a.status, ESRCH);
	cr_expect_str_eq(a.message, "no such profiled process: 999999999");
	cr_assert_eq(heapd_snapshot_answer(t.d.sock, 999999999, LLGO_FORMAT_TEXT, &a), 0);
	cr_expect_eq(a.status, ESRCH);
	cr_expect_str_eq(a.message, "no such profiled process: 999999999");
	cr_assert_eq(heapd_snapshot_answer(t.d.sock, getpid(), 99, &a), 0);
	cr_expect_eq(a.status, EINVAL);
	th_attached_end(&t);
}

/* Send one packet (with fd >= 0 attached) on a fresh connection, optionally after a valid
 * HELLO; the daemon must close the connection. */
/* Send pkt with nfds descriptors in one SCM_RIGHTS message. */
static int send_fds(int s, const void *pkt, size_t n, const int *fds, size_t nfds)
{
	struct iovec iov = { .iov_base = (void *)(uintptr_t)pkt, .iov_len = n };
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	memset(&ctl, 0, sizeof(ctl));
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	return sendmsg(s, &mh, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -errno;
}

static bool dropped_after_fds(const char *sock, bool hello_first, const void *pkt, size_t n,
			      const int *fds, size_t nfds);

static bool dropped_after(const char *sock, bool hello_first, const void *pkt, size_t n, int fd)
{
	return dropped_after_fds(sock, hello_first, pkt, n, &fd, fd >= 0 ? 1 : 0);
}

static bool dropped_after_fds(const char *sock, bool hello_first, const void *pkt, size_t n,
			      const int *fds, size_t nfds)
{
	struct th_shim sh = { .sock = -1, .ctl_fd = -1 };
	int s;
	if (hello_first) {
		if (th_shim_attach(&sh, sock, LLGO_RING_MIN_DATA, 1) != 0)
			return false;
		s = sh.sock;
	} else {
		s = heapd_connect(sock);
		if (s < 0)
			return false;
	}
	int err = nfds > 1 ? send_fds(s, pkt, n, fds, nfds) : msg_send(s, pkt, n, nfds ? fds[0] : -1);
	bool dropped = false;
	if (err == 0) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		if (poll(&p, 1, 5000) == 1) {
			unsigned char buf[LLGO_MSG_MAX];
			/* a HELLO_ACK with an error status may come first */
			for (int i = 0; i < 3; i++) {
				ssize_t r = recv(s, buf, sizeof(buf), 0);
				if (r <= 0) {
					dropped = true;
					break;
				}
			}
		}
	} else {
		dropped = err == -EPIPE || err == -ECONNRESET;
	}
	close(s);
	if (sh.ctl_fd >= 0)
		close(sh.ctl_fd);
	return dropped;
}

Test(server, malformed_packets_drop_the_connection, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	unsigned char big[70000];
	memset(big, 0, sizeof(big));
	struct llgo_msg_header h;
	int cases = 0;

	/* wrong magic */
	msg_header_init(&h, LLGO_MSG_LIST, sizeof(h));
	h.magic ^= 1;
	cr_expect(dropped_after(d.sock, false, &h, sizeof(h), -1), "wrong magic");
	cases++;
	/* wrong version */
	msg_header_init(&h, LLGO_MSG_LIST, sizeof(h));
	h.version = 99;
	cr_expect(dropped_after(d.sock, false, &h, sizeof(h), -1), "wrong version");
	cases++;
	/* short packet */
	msg_header_init(&h, LLGO_MSG_LIST, sizeof(h));
	cr_expect(dropped_after(d.sock, false, &h, 8, -1), "short");
	cases++;
	/* length field disagrees with the packet */
	msg_header_init(&h, LLGO_MSG_LIST, 4096);
	cr_expect(dropped_after(d.sock, false, &h, sizeof(h), -1), "length field");
	cases++;
	/* huge packet */
	msg_header_init((struct llgo_msg_header *)big, LLGO_MSG_LIST, sizeof(big));
	cr_expect(dropped_after(d.sock, false, big, sizeof(big), -1), "huge");
	cases++;
	/* right header, wrong size for the type */
	msg_header_init((struct llgo_msg_header *)big, LLGO_MSG_SNAPSHOT, 20);
	cr_expect(dropped_after(d.sock, false, big, 20, -1), "short SNAPSHOT");
	cases++;
	/* unknown type */
	msg_header_init(&h, 77, sizeof(h));
	cr_expect(dropped_after(d.sock, false, &h, sizeof(h), -1), "unknown type");
	cases++;
	/* a descriptor where none belongs */
	int junk = th_memfd_sized("junk", 4096);
	msg_header_init(&h, LLGO_MSG_LIST, sizeof(h));
	cr_expect(dropped_after(d.sock, false, &h, sizeof(h), junk), "LIST with an fd");
	cases++;
	/* more descriptors than a packet may carry: the kernel truncates the control data */
	int many[8];
	for (int i = 0; i < 8; i++)
		many[i] = junk;
	cr_expect(dropped_after_fds(d.sock, false, &h, sizeof(h), many, 8), "8 fds");
	cases++;
	/* ADD_RING before HELLO */
	struct th_ring r;
	th_ring_new(&r, 1, LLGO_RING_MIN_DATA);
	struct llgo_msg_add_ring ar;
	memset(&ar, 0, sizeof(ar));
	msg_header_init(&ar.h, LLGO_MSG_ADD_RING, sizeof(ar));
	ar.ring_id = 1;
	ar.data_size = LLGO_RING_MIN_DATA;
	cr_expect(dropped_after(d.sock, false, &ar, sizeof(ar), r.fd), "ADD_RING before HELLO");
	cases++;
	/* ADD_RING without its descriptor */
	cr_expect(dropped_after(d.sock, true, &ar, sizeof(ar), -1), "ADD_RING without fd");
	cases++;
	/* ring memfd of the wrong size */
	cr_expect(dropped_after(d.sock, true, &ar, sizeof(ar), junk), "ring fd wrong size");
	cases++;
	/* ring whose header is corrupt */
	r.hdr->magic = 0x1234;
	cr_expect(dropped_after(d.sock, true, &ar, sizeof(ar), r.fd), "corrupt ring header");
	cases++;
	r.hdr->magic = LLGO_RING_MAGIC;
	/* ring size that is not the one HELLO announced */
	ar.data_size = 2 * LLGO_RING_MIN_DATA;
	cr_expect(dropped_after(d.sock, true, &ar, sizeof(ar), r.fd), "ring size mismatch");
	cases++;
	ar.data_size = LLGO_RING_MIN_DATA;
	/* ring id out of range */
	ar.ring_id = LLGO_MAX_RINGS;
	cr_expect(dropped_after(d.sock, true, &ar, sizeof(ar), r.fd), "ring id out of range");
	cases++;
	/* second HELLO */
	struct th_shim tmp;
	th_shim_ctl(&tmp, LLGO_RING_MIN_DATA, 1);
	struct llgo_msg_hello hm;
	th_hello_init(&hm, LLGO_RING_MIN_DATA, 1);
	cr_expect(dropped_after(d.sock, true, &hm, sizeof(hm), tmp.ctl_fd), "second HELLO");
	cases++;
	/* HELLO without a descriptor */
	cr_expect(dropped_after(d.sock, false, &hm, sizeof(hm), -1), "HELLO without fd");
	cases++;
	/* HELLO with a control page of the wrong size */
	cr_expect(dropped_after(d.sock, false, &hm, sizeof(hm), r.fd), "ctl fd wrong size");
	cases++;
	/* HELLO with a control page whose magic is wrong */
	tmp.ctl->magic = 0;
	cr_expect(dropped_after(d.sock, false, &hm, sizeof(hm), tmp.ctl_fd), "ctl bad magic");
	cases++;
	/* an unsealed control page (could be shrunk under the daemon's mapping) */
	int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
	cr_assert_eq(ftruncate(unsealed, LLGO_CTL_SIZE), 0);
	cr_expect(dropped_after(d.sock, false, &hm, sizeof(hm), unsealed), "unsealed ctl");
	cases++;
	/* HELLO with an impossible ring size */
	tmp.ctl->magic = LLGO_CTL_MAGIC;
	hm.ring_data_size = 12345;
	cr_expect(dropped_after(d.sock, false, &hm, sizeof(hm), tmp.ctl_fd), "ring size");
	cases++;
	/* a client request on a shim connection */
	msg_header_init(&h, LLGO_MSG_LIST, sizeof(h));
	cr_expect(dropped_after(d.sock, true, &h, sizeof(h), -1), "LIST on a shim connection");
	cases++;

	cr_assert(heapd_alive(&d), "llgo-heapd died:\n%s", th_read_all(d.log));
	struct llgo_list_entry v[64];
	heapd_list(d.sock, v, 64); /* still serving */
	/* one log line per dropped connection */
	char *log = th_read_all(d.log);
	cr_expect_eq(th_count(log, "dropping connection"), cases, "log:\n%s", log);
	cr_expect_eq(th_count(log, "a descriptor it sent was lost"), 1, "log:\n%s", log);
	free(log);
	close(junk);
	close(unsealed);
	heapd_finish(&d);
}

/* A shim process killed without BYE: its rings are drained at EOF and its profile is still
 * served afterwards. */
Test(server, snapshot_after_the_process_died, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	int pipefd[2];
	th_pipe(pipefd);
	pid_t child = th_fork();
	if (child == 0) {
		close(pipefd[0]);
		struct th_shim sh;
		if (th_shim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 1) != 0)
			_exit(1);
		/* two rings; records still unread when the process dies */
		struct th_ring r1, r2;
		th_ring_new(&r1, 0, LLGO_RING_MIN_DATA);
		th_ring_new(&r2, 1, LLGO_RING_MIN_DATA);
		th_shim_add_ring(&sh, &r1);
		uint64_t a[1] = { TH_RET(th_site_alpha) };
		uint64_t b[1] = { TH_RET(th_site_beta) };
		for (int i = 0; i < 20; i++)
			th_ring_push(&r1, a, 1, 32, 1, false);
		for (int i = 0; i < 30; i++)
			th_ring_push(&r2, b, 1, 48, 1, false);
		th_shim_add_ring(&sh, &r2);
		char c = 1;
		if (write(pipefd[1], &c, 1) != 1)
			_exit(2);
		_exit(0);
	}
	close(pipefd[1]);
	char c;
	cr_assert_eq(read(pipefd[0], &c, 1), 1);
	int st;
	waitpid(child, &st, 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d.sock, child, LLGO_FORMAT_FOLDED, &a), 0);
	cr_assert_eq(a.status, 0, "%s", a.message);
	buf_putc(&a.data, '\0');
	cr_expect(strstr((char *)a.data.data, "th_site_alpha 640\n") != NULL, "%s", a.data.data);
	cr_expect(strstr((char *)a.data.data, "th_site_beta 1440\n") != NULL, "%s", a.data.data);
	buf_free(&a.data);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, child, &e));
	cr_expect_eq(e.state, LLGO_PROC_EXITED);
	cr_expect_eq(e.rings, 2);
	cr_expect_eq(e.delivered, 50);
	cr_expect(th_accounting_holds(&e));
	heapd_finish(&d);
}

Test(server, profiles_are_for_the_owner_or_root, .timeout = 60)
{
	th_need_root();
	struct th_attached t;
	th_attached_shim(&t, NULL, 512);
	pid_t me = getpid();
	pid_t child = th_fork();
	if (child == 0) {
		th_become_nobody();
		struct client_answer a;
		if (heapd_snapshot_answer(t.d.sock, me, LLGO_FORMAT_TEXT, &a) != 0)
			_exit(11);
		if (a.status != EACCES || strncmp(a.message, "permission denied", 17) != 0)
			_exit(12);
		if (heapd_set_rate(t.d.sock, me, 1, &a) != 0 || a.status != EACCES)
			_exit(13);
		struct llgo_msg_header h;
		msg_header_init(&h, LLGO_MSG_LIST, sizeof(h));
		if (heapd_request(t.d.sock, &h, sizeof(h), &a) != 0 || a.status != 0)
			_exit(14);
		_exit(0);
	}
	int st;
	waitpid(child, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child as nobody: status %d", st);
	cr_expect_eq(atomic_load(&t.sh.ctl->rate_word), 512, "rate changed by another user");
	/* root may */
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(t.d.sock, me, LLGO_FORMAT_TEXT, &a), 0);
	cr_expect_eq(a.status, 0);
	buf_free(&a.data);
	th_attached_end(&t);
}

/* Clients that never read their answers hold nothing: others are still served. */
Test(server, idle_clients_do_not_block_others, .timeout = 60)
{
	struct th_attached t;
	th_attached_shim(&t, NULL, 1);
	int idle[16];
	struct llgo_msg_snapshot m;
	client_snapshot_req(&m, getpid(), LLGO_FORMAT_PPROF, 0, 0);
	for (int i = 0; i < 16; i++) {
		idle[i] = heapd_connect(t.d.sock);
		cr_assert_geq(idle[i], 0);
		if (i % 2)
			cr_assert_eq(msg_send(idle[i], &m, sizeof(m), -1), 0);
	}
	struct llgo_list_entry e;
	cr_expect(heapd_list_pid(t.d.sock, getpid(), &e));
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(t.d.sock, getpid(), LLGO_FORMAT_FOLDED, &a), 0);
	cr_expect_eq(a.status, 0);
	buf_free(&a.data);
	for (int i = 0; i < 16; i++)
		close(idle[i]);
	th_attached_end(&t);
}

/* A socket of d's kind bound at d's socket path (a new daemon folder, heapd_init). */
static int bound_socket(struct heapd *d)
{
	heapd_init(d, NULL);
	int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d->sock);
	cr_assert_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return s;
}

Test(server, stale_socket_is_replaced_live_one_is_not, .timeout = 60)
{
	struct heapd d;
	close(bound_socket(&d)); /* a socket file nobody listens on */
	d.pid = heapd_spawn(&d, NULL);
	cr_assert(heapd_wait(&d), "did not replace a stale socket:\n%s",
		  th_read_all(d.log));
	struct stat st;
	cr_assert_eq(stat(d.sock, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0666, "mode %o", st.st_mode & 0777);

	/* a second daemon on the same path must refuse and leave the first alone */
	struct heapd d2 = d;
	d2.pid = heapd_spawn(&d2, NULL);
	int wst;
	cr_assert_eq(waitpid(d2.pid, &wst, 0), d2.pid);
	cr_expect(WIFEXITED(wst) && WEXITSTATUS(wst) != 0, "second daemon status %d", wst);
	char *log = th_read_all(d.log);
	cr_expect(strstr(log, "another llgo-heapd") != NULL, "log:\n%s", log);
	free(log);
	struct llgo_list_entry v[4];
	heapd_list(d.sock, v, 4);
	heapd_stop_clean(&d);

	/* a file that is not a socket is never removed */
	int fd = open(d.sock, O_WRONLY | O_CREAT, 0644);
	close(fd);
	d.pid = heapd_spawn(&d, NULL);
	cr_assert_eq(waitpid(d.pid, &wst, 0), d.pid);
	cr_expect(WIFEXITED(wst) && WEXITSTATUS(wst) != 0);
	cr_expect_eq(stat(d.sock, &st), 0);
	cr_expect(S_ISREG(st.st_mode));
	heapd_cleanup(&d);
}

Test(server, creates_missing_folders_and_rejects_bad_options, .timeout = 60)
{
	struct heapd d;
	heapd_init(&d, NULL);
	snprintf(d.sock, sizeof(d.sock), "%s/a/b/heapd.sock", d.dir);
	const char *extra[] = { "--max-buckets", "1000", "--max-memory=64M", "--keep-exited",
				"3", NULL };
	d.pid = heapd_spawn(&d, extra);
	cr_assert(heapd_wait(&d), "log:\n%s", th_read_all(d.log));
	heapd_stop_clean(&d);

	const char *bad[][3] = { { "--bogus", NULL, NULL },
				 { "--max-memory", "lots", NULL },
				 { "--max-buckets", "0", NULL },
				 { "--keep-exited", NULL, NULL } };
	for (size_t i = 0; i < 4; i++) {
		pid_t pid = heapd_spawn(&d, bad[i]);
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: status %d", bad[i][0], st);
	}
	heapd_cleanup(&d);
}

/* --keep-exited N: the oldest exited sessions go first. */
Test(server, exited_sessions_are_evicted_oldest_first, .timeout = 120)
{
	struct heapd d;
	const char *extra[] = { "--keep-exited", "2", NULL };
	heapd_start(&d, NULL, extra);
	pid_t kids[4];
	for (int i = 0; i < 4; i++) {
		kids[i] = th_fork();
		if (kids[i] == 0) {
			struct th_shim sh;
			_exit(th_shim_attach(&sh, d.sock, LLGO_RING_MIN_DATA, 1) == 0 ? 0 : 1);
		}
		int st;
		waitpid(kids[i], &st, 0);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		/* wait until the daemon saw it exit, so the order is known */
		th_wait_state(d.sock, kids[i], LLGO_PROC_EXITED, 5000);
	}
	struct llgo_list_entry e;
	cr_expect(!heapd_list_pid(d.sock, kids[0], &e));
	cr_expect(!heapd_list_pid(d.sock, kids[1], &e));
	cr_expect(heapd_list_pid(d.sock, kids[2], &e));
	cr_expect(heapd_list_pid(d.sock, kids[3], &e));
	struct client_answer a;
	cr_assert_eq(heapd_snapshot_answer(d.sock, kids[0], LLGO_FORMAT_TEXT, &a), 0);
	cr_expect_eq(a.status, ESRCH);
	heapd_finish(&d);
}

/* Without --foreground the daemon detaches; it is found (and stopped) through its socket's
 * SO_PEERCRED. */
Test(server, daemonizes_without_foreground, .timeout = 60)
{
	struct heapd d;
	heapd_init(&d, NULL);
	d.detach = true;
	pid_t pid = heapd_spawn(&d, NULL);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	/* d.pid stays 0: the daemon is the grandchild, found below through the socket */
	cr_assert(heapd_wait(&d));
	/* The daemon listens again once detached, so SO_PEERCRED names it (not the parent that
	 * bound the socket); until then connections still queue. */
	struct ucred cred = { 0 };
	for (int i = 0; i < 500; i++) {
		int s = heapd_connect(d.sock);
		cr_assert_geq(s, 0);
		socklen_t l = sizeof(cred);
		cr_assert_eq(getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &l), 0);
		close(s);
		if (cred.pid != pid)
			break;
		th_sleep_ms(10);
	}
	cr_assert_neq(cred.pid, pid, "the daemon must be a grandchild");
	cr_assert_gt(cred.pid, 0);
	char path[64], stat_line[512] = "";
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)cred.pid);
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(stat_line, sizeof(stat_line), f))
			stat_line[0] = '\0';
		fclose(f);
	}
	/* stop it before any check can end the test */
	int killed = kill(cred.pid, SIGTERM);
	int ppid = 0, sid = 0;
	const char *p = strrchr(stat_line, ')');
	cr_expect(p && sscanf(p + 2, "%*c %d %*d %d", &ppid, &sid) == 2, "stat: %s", stat_line);
	cr_expect_neq(sid, getsid(0), "the daemon must have left our session");
	cr_expect_neq(sid, cred.pid, "the daemon must not be a session leader");
	cr_assert_eq(killed, 0);
	struct stat sb;
	bool gone = false;
	for (int i = 0; i < 500 && !gone; i++) {
		gone = lstat(d.sock, &sb) < 0 && kill(cred.pid, 0) < 0;
		th_sleep_ms(10);
	}
	cr_expect(gone, "daemon did not exit and remove its socket");
	heapd_cleanup(&d);
}

/* systemd socket activation: the listening socket arrives as fd 3 with LISTEN_PID/FDS. */
Test(server, socket_activation, .timeout = 60)
{
	struct heapd d;
	int ls = bound_socket(&d);
	cr_assert_eq(listen(ls, 16), 0);
	pid_t pid = th_fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		int fd = open(d.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 2);
		dup2(ls, 3);
		char buf[32];
		snprintf(buf, sizeof(buf), "%d", (int)getpid());
		setenv("LISTEN_PID", buf, 1);
		setenv("LISTEN_FDS", "1", 1);
		/* --socket names a path that does not exist: the passed socket wins */
		execl(heapd_path(), "llgo-heapd", "--foreground", "--socket", "/nonexistent/x.sock",
		      (char *)NULL);
		_exit(127);
	}
	d.pid = pid;
	struct llgo_list_entry v[4];
	for (int i = 0; i < 200 && heapd_alive(&d); i++) {
		/* connections queue on the socket before the daemon accepts them */
		heapd_list(d.sock, v, 4);
		break;
	}
	cr_assert(heapd_alive(&d), "log:\n%s", th_read_all(d.log));
	kill(pid, SIGTERM);
	int st;
	waitpid(pid, &st, 0);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct stat sb;
	cr_expect_eq(lstat(d.sock, &sb), 0, "the activated socket is systemd's to remove");
	close(ls);
	heapd_cleanup(&d);
}
