// SPDX-License-Identifier: MIT
/*
 * jobs.c: what the socket server's workers run. HELLO attaches a process: its identity
 * re-checked against the one pinned at accept (ident.c), one session per process (a HELLO with
 * the memfd of a live session joins it, another replaces it), the control page and maps read
 * before the ACK lets the program run. BYE drains and re-reads the maps while the process
 * still exists; an exit (EOF, the process's pidfd) gives the session its final drain. Client
 * requests: LIST, SNAPSHOT (snapshot.c), SET_RATE and VERIFY (verify.c), each checked against
 * the asking uid (session_allowed).
 *
 * Left to others: sessions (session.c), draining (drain.c), profiles (snapshot.c), the answer
 * queue (conn.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_impl.h"
#include "../output/snapshot.h"
#include "../verify/verify.h"

/* The session a shim connection feeds: server_settle reads it under conns_lock. */
/* The --verify-every in force, read under the lock a reload (server_reconfigure) takes. */
static uint32_t jobs_verify_every(struct server *srv)
{
	pthread_rwlock_rdlock(&srv->opts_lock);
	uint32_t every = srv->opts.verify_every;
	pthread_rwlock_unlock(&srv->opts_lock);
	return every;
}

static void jobs_set_session(struct server *srv, struct conn *c, struct session *s)
{
	pthread_mutex_lock(&srv->conns_lock);
	c->session = s;
	pthread_mutex_unlock(&srv->conns_lock);
}

static void jobs_hello(struct server *srv, struct conn *c)
{
	struct llgo_msg_hello m;
	memcpy(&m, c->req, sizeof(m));
	m.comm[LLGO_COMM_LEN - 1] = '\0';
	int fd = c->job_fd;
	c->job_fd = -1;
	int err = 0;
	const char *why = NULL;
	char whybuf[256] = "";
	struct session *s = NULL;
	uint32_t ds = m.ring_data_size;
	bool memfd = m.flags & LLGO_HELLO_MEMFD, ack = !(m.flags & LLGO_HELLO_NO_ACK);
	bool reattach = m.flags & LLGO_HELLO_REATTACH;
	/* Before anything of the process is read: is it still the one that connected, owned
	 * by the same uid? A process that exited since (a short-lived fork child) keeps its
	 * session, but nothing more is read of it. */
	int ierr = ident_verify(&c->id, whybuf, sizeof(whybuf));
	bool gone = ierr == -ESRCH;
	bool locked = memfd && atomic_load(&srv->adopting);
	if (locked)
		pthread_mutex_lock(&srv->adopt_lock);
	if (c->cred.pid <= 0) {
		err = -ESRCH;
		why = "peer pid unknown (another pid namespace?)";
	} else if (ierr && !gone) {
		err = ierr;
		why = whybuf;
	} else if (ds < LLGO_RING_MIN_DATA || ds > LLGO_RING_MAX_DATA || (ds & (ds - 1))) {
		err = -EINVAL;
		why = "ring data size";
	} else if (memfd && (s = session_find_live(srv->reg, c->cred.pid, c->id.start, fd)) != NULL) {
		/* The process calls back with the memfd its session holds (a reconnect, or a
		 * process this daemon took back on its own, server_adopt_one): the connection
		 * joins that session. One session per process, never two. */
		close(fd);
		/* a session found by adopt.c learns it here (joins of one process may race) */
		if (!__atomic_load_n(&s->unwind_mode, __ATOMIC_RELAXED))
			__atomic_store_n(&s->unwind_mode,
					 (uint32_t)((m.flags & LLGO_HELLO_UNWIND_MASK) >>
						    LLGO_HELLO_UNWIND_SHIFT),
					 __ATOMIC_RELAXED); /* the drain thread reads it meanwhile */
		if (locked)
			pthread_mutex_unlock(&srv->adopt_lock);
		jobs_set_session(srv, c, s);
		c->kind = CONN_SHIM;
		log_debug("pid %d: reconnected to its session", (int)s->pid);
		drain_wake(srv->drain);
		conn_rearm(c);
		return;
	} else if (!(s = session_new(srv->reg, c->cred.pid, c->cred.uid, c->cred.gid, m.comm,
				     ds))) {
		err = -ENOMEM;
		why = "session";
	} else if ((err = session_take_slot(s)) != 0) {
		why = "over its uid's budget of profiled processes";
	} else if ((err = memfd ? session_attach_memfd(s, fd, reattach)
				: session_attach_ctl(s, fd)) != 0) {
		why = memfd ? "process memfd" : "control page";
	} else {
		s->unwind_mode =
			(uint32_t)((m.flags & LLGO_HELLO_UNWIND_MASK) >> LLGO_HELLO_UNWIND_SHIFT);
		s->conn_serial = c->serial;
	}
	close(fd);

	struct llgo_msg_hello_ack a;
	memset(&a, 0, sizeof(a));
	msg_header_init(&a.h, LLGO_MSG_HELLO_ACK, sizeof(a));
	if (err) {
		if (locked)
			pthread_mutex_unlock(&srv->adopt_lock);
		session_put(s);
		a.status = -err;
		if (ack)
			msg_send(c->fd, &a, sizeof(a), -1);
		conn_malformed(c, "HELLO refused: %s: %s", why, strerror(-err));
		return;
	}
	/* The identity pinned at accept, not what /proc shows now. */
	s->proc_start = c->id.start;
	if (c->id.pidfd >= 0)
		s->pidfd = fcntl(c->id.pidfd, F_DUPFD_CLOEXEC, 3);
	/* Our word, for a daemon that takes the process back after a restart (adopt.c), that
	 * this memfd came from this process as this uid: checked above, still ours alone */
	if (memfd && !gone && c->id.start) {
		struct vouch_subject v = { .pid = (uint32_t)s->pid, .uid = s->uid, .gid = s->gid,
					   .start = c->id.start, .dev = s->memfd_dev,
					   .ino = s->memfd_ino };
		vouch_write(&srv->vouch, s->ctl, &v);
	}
	/* Read while the process runs: a shim that waits for no answer may exit soon, and then
	 * waits at exit (BYE) only if we have not seen what we need. */
	int merr = gone ? -ESRCH : session_attach_maps(s);
	if (merr && (m.flags & LLGO_HELLO_FORKED) &&
	    session_attach_parent_maps(s, (pid_t)m.ppid) == 0)
		merr = 0;
	if (merr)
		log_warn("pid %d: cannot read its mappings (%s); its profiles will show "
			 "addresses only", (int)s->pid, strerror(-merr));
	/* auto unwinding's tables, before the session drains (its unwinder reads them) */
	drain_prepare_unwind(s);
	/* One session per process (pid and start time): a second HELLO with another memfd
	 * replaces the first, which ends as if the process had closed it. Two workers may
	 * finish the HELLOs of one process out of order (a shell's, then the program it
	 * exec'd): the one from the earlier connection is the earlier image, and ends. */
	pthread_mutex_lock(&srv->hello_lock);
	struct session *old = c->id.start ? session_find_process(srv->reg, s->pid, c->id.start)
					  : NULL;
	bool stale = old && session_newer(old, s);
	if (old && !stale) {
		log_info("pid %d: a new HELLO replaces its session", (int)s->pid);
		verify_session_stop(srv->verifier, old);
		drain_session_exit(old);
	} else if (stale) {
		log_info("pid %d: the HELLO of an image it exec'd away from came late; that "
			 "session ends at once", (int)s->pid);
	}
	if (old)
		session_put(old);
	session_register(s);
	pthread_mutex_unlock(&srv->hello_lock);
	/* Our maps are read and the session is findable by pid: the shim's exit need not wait
	 * for us (lifecycle.c). Not before session_register: a process that exits at once
	 * would be gone while a snapshot by its pid still finds only its pre-exec session. */
	if (!merr && s->ctl)
		atomic_fetch_add_explicit(&s->ctl->daemon_beat, 1, memory_order_relaxed);
	if (locked)
		pthread_mutex_unlock(&srv->adopt_lock);
	jobs_set_session(srv, c, s);
	c->kind = CONN_SHIM;
	atomic_fetch_add(&srv->n_sessions, 1);
	conn_watch_exit(srv, s, s->pidfd);
	/* Gone before we got here: what its rings hold now is all it published (a socket kept
	 * by another process must not keep a session of a free pid live). */
	if (gone || stale)
		drain_session_exit(s);
	if (reattach)
		log_info("pid %d: reattached (%s)", (int)s->pid, s->comm);
	if (ack && msg_send(c->fd, &a, sizeof(a), -1) != 0) {
		conn_end(c);
		return;
	}
	drain_wake(srv->drain);
	uint32_t verify_every = jobs_verify_every(srv);
	if (verify_every) /* after the ACK: the process need not wait for the attach */
		verify_session_start(srv->verifier, s, verify_every);
	conn_rearm(c);
}

static void jobs_bye(struct server *srv, struct conn *c)
{
	/* The process is about to exit: collect what it wrote and read the maps once more
	 * (libraries loaded late) while they still exist. */
	drain_session(c->session);
	drain_refresh_maps(c->session, true);
	int rc = conn_answer(c, NULL, 0, 0, NULL);
	if (rc < 0) {
		conn_end(c);
		return;
	}
	conn_answered(c, rc);
}

/* llgo-heap detach: the process lives on without the shim. Its session ends as at an exit
 * (final drain; the in-use view frozen at what its table holds now, objects sampled before
 * the detach and not freed by then); the loop marked it detached when it read the packet
 * (packet.c). */
static void jobs_detach(struct server *srv, struct conn *c)
{
	struct session *s = c->session;
	drain_session_exit(s);
	verify_session_stop(srv->verifier, s);
	log_info("pid %d: detached (%s)", (int)s->pid, s->comm);
	int rc = conn_answer(c, NULL, 0, 0, NULL);
	if (rc < 0) {
		conn_end(c);
		return;
	}
	conn_answered(c, rc);
}

/* ---- client jobs ---------------------------------------------------------------------------- */

/* s (referenced, or NULL: no such process) if the asking client may act on it; else NULL,
 * with the refusal started as c's answer and its conn_answer result in *rc. */
static struct session *jobs_allowed(struct conn *c, struct session *s, uint32_t pid, int *rc)
{
	char msg[LLGO_END_MSG_LEN];
	if (!s) {
		snprintf(msg, sizeof(msg), "no such profiled process: %u", pid);
		*rc = conn_answer(c, NULL, 0, ESRCH, msg);
		return NULL;
	}
	if (!session_allowed(s, c->cred.uid)) {
		snprintf(msg, sizeof(msg), "permission denied: pid %u belongs to uid %u", pid,
			 (unsigned)s->uid);
		session_put(s);
		*rc = conn_answer(c, NULL, 0, EACCES, msg);
		return NULL;
	}
	return s;
}

int jobs_list(struct server *srv, struct conn *c)
{
	struct session **v;
	session_registry_expire(srv->reg);
	size_t n = session_list(srv->reg, false, &v);
	/* DATA packets carry whole rows */
	const size_t per = (LLGO_MSG_MAX - sizeof(struct llgo_msg_header)) /
			   sizeof(struct llgo_list_entry);
	struct buf rows;
	buf_init(&rows);
	for (size_t i = 0; i < n; i++) {
		/* Other users' processes (pid, uid, command) are root's to see only. */
		if (c->cred.uid != 0 && v[i]->uid != c->cred.uid)
			continue;
		struct llgo_list_entry e;
		session_list_entry(v[i], &e);
		buf_append(&rows, &e, sizeof(e));
	}
	session_list_release(v, n);
	if (rows.failed) {
		buf_free(&rows);
		return conn_answer(c, NULL, 0, ENOMEM, "out of memory");
	}
	return conn_answer(c, &rows, per * sizeof(struct llgo_list_entry), 0, NULL);
}

static int jobs_set_rate(struct server *srv, struct conn *c)
{
	struct llgo_msg_set_rate m;
	memcpy(&m, c->req, sizeof(m));
	char msg[LLGO_END_MSG_LEN];
	pid_t pid = (pid_t)m.pid;
	if (m.rate > LLGO_RATE_MAX) {
		snprintf(msg, sizeof(msg), "rate %llu out of range (0..%llu)",
			 (unsigned long long)m.rate, (unsigned long long)LLGO_RATE_MAX);
		return conn_answer(c, NULL, 0, EINVAL, msg);
	}
	int rc;
	struct session *s = jobs_allowed(c, server_lookup(srv, pid), m.pid, &rc);
	if (!s)
		return rc;
	uint64_t old_rate, new_rate;
	int err = session_set_rate(s, m.rate, &old_rate, &new_rate);
	session_put(s);
	if (err) {
		snprintf(msg, sizeof(msg), "no such profiled process: %u (it has exited)", m.pid);
		return conn_answer(c, NULL, 0, ESRCH, msg);
	}
	snprintf(msg, sizeof(msg), "pid %u: rate %llu -> %llu", m.pid,
		 (unsigned long long)old_rate, (unsigned long long)new_rate);
	log_warn("uid %u: %s", (unsigned)c->cred.uid, msg);
	return conn_answer(c, NULL, 0, 0, msg);
}

static int jobs_snapshot(struct server *srv, struct conn *c)
{
	struct llgo_msg_snapshot m;
	memcpy(&m, c->req, sizeof(m));
	struct buf out;
	buf_init(&out);
	char msg[LLGO_END_MSG_LEN] = "";
	int rc = snapshot_take(&srv->snap, (pid_t)m.pid, c->cred.uid, (int)m.format, m.flags,
			       m.top_n, &out, msg, sizeof(msg));
	if (rc)
		rc = conn_answer(c, NULL, 0, -rc, msg);
	else
		rc = conn_answer(c, &out, 0, 0, NULL);
	buf_free(&out);
	return rc;
}

/* llgo-heap verify PID: runs for the requested seconds on this client worker. */
static int jobs_verify(struct server *srv, struct conn *c)
{
	struct llgo_msg_verify m;
	memcpy(&m, c->req, sizeof(m));
	char msg[LLGO_END_MSG_LEN] = "";
	if (m.seconds < 1 || m.seconds > LLGO_VERIFY_MAX_SECONDS) {
		snprintf(msg, sizeof(msg), "seconds %u out of range (1..%u)", m.seconds,
			 LLGO_VERIFY_MAX_SECONDS);
		return conn_answer(c, NULL, 0, EINVAL, msg);
	}
	struct session *s = session_lookup(srv->reg, (pid_t)m.pid);
	if (s && !session_is_live(s)) {
		session_put(s);
		s = NULL;
	}
	int rc;
	if (!(s = jobs_allowed(c, s, m.pid, &rc)))
		return rc;
	struct llgo_verify_summary sum;
	struct buf text, out;
	buf_init(&text);
	buf_init(&out);
	rc = verify_run(srv->verifier, s, m.seconds, &sum, &text, msg, sizeof(msg));
	session_put(s);
	if (!rc) {
		buf_append(&out, &sum, sizeof(sum));
		buf_append(&out, text.data, text.len);
		if (out.failed)
			rc = -ENOMEM;
	}
	buf_free(&text);
	if (rc) {
		buf_free(&out);
		if (!msg[0])
			snprintf(msg, sizeof(msg), "verify: %s", strerror(-rc));
		return conn_answer(c, NULL, 0, -rc, msg);
	}
	rc = conn_answer(c, &out, 0, 0, NULL);
	buf_free(&out);
	return rc;
}

void jobs_run(void *arg, struct conn *c)
{
	struct server *srv = arg;
	int err = 0;
	switch (c->job) {
	case LLGO_MSG_HELLO:
		jobs_hello(srv, c);
		atomic_fetch_sub(&srv->hellos_pending, 1);
		return;
	case LLGO_MSG_BYE:
		jobs_bye(srv, c);
		return;
	case LLGO_MSG_DETACH:
		jobs_detach(srv, c);
		return;
	case SERVER_JOB_EXIT:
		/* The process exited (its pidfd). A session of a control page alone learns of its
		 * rings by ADD_RING: let the loop first read what its shim sent. A memfd session
		 * finds every ring in the control page, and must not hold an exit worker (BYE
		 * waits for those) while the shim's EOF waits in the queue behind this job. */
		if (c->kind == CONN_PIDFD) {
			pthread_mutex_lock(&c->session->lock);
			bool ctl_only = c->session->ctl && c->session->memfd < 0;
			pthread_mutex_unlock(&c->session->lock);
			if (ctl_only)
				server_settle(srv, c->session);
		}
		drain_session_exit(c->session);
		verify_session_stop(srv->verifier, c->session);
		conn_close(c);
		return;
	case LLGO_MSG_LIST:
		server_settle_hellos(srv, 0);
		err = jobs_list(srv, c);
		break;
	case LLGO_MSG_SNAPSHOT:
		err = jobs_snapshot(srv, c);
		break;
	case LLGO_MSG_SET_RATE:
		err = jobs_set_rate(srv, c);
		break;
	case LLGO_MSG_VERIFY:
		err = jobs_verify(srv, c);
		break;
	}
	conn_answered(c, err);
}
