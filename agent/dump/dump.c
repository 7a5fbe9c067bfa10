// SPDX-License-Identifier: MIT
/*
 * dump.c: llgo-heapd's own snapshots, on a thread of their own (the drain, the event loop
 * and the client workers never wait for a disk or an HTTP endpoint):
 *
 *   - every --dump-every SECONDS, a pprof snapshot (gzipped: the bytes `llgo-heap snapshot
 *     PID -o FILE` gives, made by the same snapshot.c path) of each live profiled process,
 *     written to DIR/<uid>/ (dump_dir.c) and, for processes of the --http-uids (the push
 *     endpoint is root's choice and anyone may read it, so users' profiles go there only as
 *     HTTP's do), POSTed to --push URL (push.c);
 *   - when the OOM killer picks a profiled process (oom.c: the oom:mark_victim tracepoint, or
 *     the cgroups' oom_kill counters), its profile, tagged "oom" in the file name. The victim
 *     dies by SIGKILL, so its shim says nothing; its session takes the final drain when the
 *     pidfd reports the exit (every record in its rings, the live-object table frozen: what
 *     it held when it died) and is kept for snapshots afterwards (--keep-exited*). The
 *     dumper waits for that (at most DUMP_OOM_WAIT_MS), then writes it once.
 *
 * A failure (full disk, quota, an endpoint down or slow) is logged once until the next
 * success and counted; nothing else stops.
 *
 * Left to others: the snapshot (snapshot.c), the folder (dump_dir.c), victims (oom.c), HTTP
 * (push.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dump_impl.h"
#include "../../common/escape.h"
#include "../http/http_internal.h"
#include "../output/snapshot.h"

#define DUMP_OOM_WAIT_MS 10000u
#define DUMP_VICTIMS 64u     /* victims queued, not yet dumped */
#define DUMP_OOM_MEMORY 256u /* victims dumped, remembered so each is written once */

struct dump_victim {
	pid_t pid;
	uint64_t start; /* clock ticks since boot, 0 unknown */
};

struct dumper {
	struct server *srv;
	struct dump_opts o;
	char *dir, *push_url; /* o's strings, ours */
	uid_t *push_uids;
	size_t npush_uids;
	struct dump_dir *dd;
	struct push *push;
	struct oom_bpf *oom_bpf;
	struct oom_cgroups *oom_cg;

	pthread_t thread;
	bool started;
	pthread_mutex_t lock; /* stop, victims */
	pthread_cond_t cond;  /* CLOCK_MONOTONIC */
	bool stop;
	struct dump_victim victims[DUMP_VICTIMS];
	size_t nvictims;
	uint64_t victims_lost;

	/* the thread's own */
	struct dump_victim done[DUMP_OOM_MEMORY];
	size_t ndone, done_next;
	bool write_failing, push_failing;
	uint64_t written, write_failed, pushed, push_failed, oom_written;
};

bool dump_opts_same(const struct dump_opts *a, const struct dump_opts *b)
{
	bool dir = a->dir == b->dir || (a->dir && b->dir && strcmp(a->dir, b->dir) == 0);
	bool url = a->push_url == b->push_url ||
		   (a->push_url && b->push_url && strcmp(a->push_url, b->push_url) == 0);
	return dir && url && a->every_s == b->every_s && a->keep == b->keep &&
	       a->max_bytes_per_uid == b->max_bytes_per_uid && a->max_bytes == b->max_bytes &&
	       a->oom == b->oom && a->push_timeout_s == b->push_timeout_s;
}

/* ---- victims ------------------------------------------------------------------------------ */

/* oom.c's reader thread (BPF) or the dumper's own poll (cgroups). */
static void dump_victim(void *arg, pid_t pid, uint64_t start)
{
	struct dumper *d = arg;
	pthread_mutex_lock(&d->lock);
	if (d->nvictims < DUMP_VICTIMS) {
		d->victims[d->nvictims++] = (struct dump_victim){ pid, start };
		pthread_cond_signal(&d->cond);
	} else {
		d->victims_lost++;
	}
	pthread_mutex_unlock(&d->lock);
}

static bool dump_victim_done(struct dumper *d, const struct session *s)
{
	for (size_t i = 0; i < d->ndone; i++)
		if (d->done[i].pid == s->pid && d->done[i].start == s->proc_start)
			return true;
	return false;
}

static void dump_victim_remember(struct dumper *d, const struct session *s)
{
	d->done[d->done_next] = (struct dump_victim){ s->pid, s->proc_start };
	d->done_next = (d->done_next + 1) % DUMP_OOM_MEMORY;
	if (d->ndone < DUMP_OOM_MEMORY)
		d->ndone++;
}

/* ---- one snapshot ---------------------------------------------------------------------------- */

static bool dump_push_allowed(const struct dumper *d, const struct session *s)
{
	/* a process whose identity changed after it attached is root's only (as HTTP's rule) */
	uid_t uid = atomic_load(&s->ident_lost) ? 0 : s->uid;
	for (size_t i = 0; i < d->npush_uids; i++)
		if (d->push_uids[i] == uid)
			return true;
	return false;
}

static void dump_one(struct dumper *d, struct session *s, enum dump_kind kind)
{
	struct profile p;
	int rc = snapshot_collect(server_snapshot_source(d->srv), s, &p);
	if (rc) {
		log_warn("--dump: pid %d: collecting the profile: %s", (int)s->pid, strerror(-rc));
		return;
	}
	struct buf out;
	buf_init(&out);
	rc = snapshot_write(&out, &p, s->maps, LLGO_FORMAT_PPROF, 0, 0);
	profile_release(&p);
	if (!rc && out.failed)
		rc = -ENOMEM;
	if (rc) {
		log_warn("--dump: pid %d: writing the profile: %s", (int)s->pid, strerror(-rc));
		buf_free(&out);
		return;
	}
	char err[512], name[DUMP_NAME_MAX];
	if (d->dd) {
		/* what was read of a process that changed identity is root's only */
		bool lost = atomic_load(&s->ident_lost);
		uid_t uid = lost ? 0 : s->uid;
		gid_t gid = lost ? 0 : s->gid;
		rc = dump_dir_write(d->dd, uid, gid, s->comm, s->pid, kind, out.data, out.len, name,
				    err, sizeof(err));
		if (rc) {
			d->write_failed++;
			if (!d->write_failing || kind == DUMP_KIND_OOM)
				log_error("--dump-dir: pid %d (uid %u): %s%s", (int)s->pid,
					  (unsigned)uid, err,
					  d->write_failing ? "" : " (logged once until a write "
								  "succeeds)");
			d->write_failing = true;
		} else {
			d->written++;
			if (d->write_failing)
				log_info("--dump-dir: writing again (%llu failed)",
					 (unsigned long long)d->write_failed);
			d->write_failing = false;
			if (kind == DUMP_KIND_OOM) {
				d->oom_written++;
				char *comm = escape_dup(s->comm); /* the HELLO's: hostile */
				log_warn("pid %d (%s, uid %u) was killed by the OOM killer: its "
					 "profile is %s/%u/%s", (int)s->pid, comm ? comm : "?",
					 (unsigned)uid, d->dir, (unsigned)uid, name);
				free(comm);
			} else {
				log_debug("--dump-dir: %u/%s", (unsigned)uid, name);
			}
		}
	}
	if (d->push && kind == DUMP_KIND_HEAP && dump_push_allowed(d, s)) {
		uint64_t until = session_now_ns(CLOCK_REALTIME) / 1000000000ull;
		uint64_t from = until > d->o.every_s ? until - d->o.every_s : 0;
		struct http_targets_names names; /* the service_name /targets gives */
		http_targets_names(s, &names);
		rc = push_send(d->push, names.service, s->pid, s->uid, from, until, out.data, out.len, err,
			       sizeof(err));
		if (rc && rc != -ECANCELED) {
			d->push_failed++;
			if (!d->push_failing)
				log_error("--push: pid %d: %s (logged once until a push succeeds)",
					  (int)s->pid, err);
			d->push_failing = true;
		} else if (!rc) {
			d->pushed++;
			if (d->push_failing)
				log_info("--push: pushing again (%llu failed)",
					 (unsigned long long)d->push_failed);
			d->push_failing = false;
		}
	}
	buf_free(&out);
}

static void dump_oom(struct dumper *d, const struct dump_victim *vt);

/* Dump the victims queued so far; false once the dumper is stopping. */
static bool dump_victims(struct dumper *d)
{
	struct dump_victim v[DUMP_VICTIMS];
	pthread_mutex_lock(&d->lock);
	bool stop = d->stop;
	size_t nv = stop ? 0 : d->nvictims;
	memcpy(v, d->victims, nv * sizeof(v[0]));
	d->nvictims = 0;
	pthread_mutex_unlock(&d->lock);
	for (size_t i = 0; i < nv; i++)
		dump_oom(d, &v[i]);
	return !stop;
}

static void dump_periodic(struct dumper *d)
{
	struct session **v;
	size_t n = session_list(server_sessions(d->srv), true, &v);
	/* a victim is not kept waiting for a whole pass */
	for (size_t i = 0; i < n && dump_victims(d); i++)
		if (session_is_live(v[i]))
			dump_one(d, v[i], DUMP_KIND_HEAP);
	session_list_release(v, n);
}

static void dump_oom(struct dumper *d, const struct dump_victim *vt)
{
	struct session *s = session_lookup(server_sessions(d->srv), vt->pid);
	if (!s)
		return; /* not a profiled process */
	if ((vt->start && s->proc_start && vt->start != s->proc_start) || dump_victim_done(d, s)) {
		session_put(s);
		return;
	}
	dump_victim_remember(d, s);
	/* SIGKILL is on its way: the final drain follows the exit */
	if (!session_wait_exited(s, DUMP_OOM_WAIT_MS))
		log_warn("pid %d: chosen by the OOM killer but still running after %u ms: its "
			 "profile is taken now", (int)s->pid, DUMP_OOM_WAIT_MS);
	dump_one(d, s, DUMP_KIND_OOM);
	session_put(s);
}

/* ---- the thread -------------------------------------------------------------------------------- */

static void *dump_main(void *arg)
{
	struct dumper *d = arg;
	uint64_t now = session_now_ns(CLOCK_MONOTONIC);
	uint64_t next_periodic = d->o.every_s ? now + d->o.every_s * 1000000000ull : UINT64_MAX;
	uint64_t next_poll = d->oom_cg ? now : UINT64_MAX;
	for (;;) {
		uint64_t due = next_periodic < next_poll ? next_periodic : next_poll;
		pthread_mutex_lock(&d->lock);
		while (!d->stop && !d->nvictims && session_now_ns(CLOCK_MONOTONIC) < due) {
			struct timespec ts;
			if (due == UINT64_MAX) {
				pthread_cond_wait(&d->cond, &d->lock);
				continue;
			}
			ts.tv_sec = (time_t)(due / 1000000000ull);
			ts.tv_nsec = (long)(due % 1000000000ull);
			pthread_cond_timedwait(&d->cond, &d->lock, &ts);
		}
		pthread_mutex_unlock(&d->lock);
		if (!dump_victims(d))
			return NULL;
		now = session_now_ns(CLOCK_MONOTONIC);
		if (now >= next_poll) {
			oom_cgroups_poll(d->oom_cg, server_sessions(d->srv), dump_victim, d);
			next_poll = now + OOM_CGROUP_POLL_MS * 1000000ull;
		}
		if (now >= next_periodic) {
			dump_periodic(d);
			next_periodic += d->o.every_s * 1000000000ull;
			now = session_now_ns(CLOCK_MONOTONIC);
			if (next_periodic <= now) /* the pass took longer than the period */
				next_periodic = now + d->o.every_s * 1000000000ull;
		}
	}
}

/* ---- lifetime -------------------------------------------------------------------------------- */

int dumper_new(struct server *srv, const struct dump_opts *o, const uid_t *push_uids,
	       size_t npush_uids, struct dumper **out, char *err, size_t errlen)
{
	*out = NULL;
	if (!o->dir && !o->push_url)
		return 0;
	struct dumper *d = calloc(1, sizeof(*d));
	if (!d) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	d->srv = srv;
	d->o = *o;
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	d->dir = o->dir ? strdup(o->dir) : NULL;
	d->push_url = o->push_url ? strdup(o->push_url) : NULL;
	size_t nu = push_uids && npush_uids ? npush_uids : 1;
	d->push_uids = calloc(nu, sizeof(*d->push_uids));
	if ((o->dir && !d->dir) || (o->push_url && !d->push_url) || !d->push_uids) {
		snprintf(err, errlen, "out of memory");
		dumper_free(d);
		return -ENOMEM;
	}
	d->o.dir = d->dir;
	d->o.push_url = d->push_url;
	if (push_uids && npush_uids)
		memcpy(d->push_uids, push_uids, nu * sizeof(*push_uids));
	else
		d->push_uids[0] = geteuid();
	d->npush_uids = nu;
	if (d->dir && !(d->dd = dump_dir_open(d->dir, o->keep ? o->keep : DUMP_DEFAULT_KEEP,
					      o->max_bytes_per_uid ? o->max_bytes_per_uid
								   : DUMP_DEFAULT_MAX_BYTES_PER_UID,
					      o->max_bytes ? o->max_bytes : DUMP_DEFAULT_MAX_BYTES,
					      err, errlen))) {
		dumper_free(d);
		return -EINVAL;
	}
	if (d->push_url && !(d->push = push_new(d->push_url, o->push_timeout_s, err, errlen))) {
		dumper_free(d);
		return -EINVAL;
	}
	*out = d;
	return 0;
}

int dumper_start(struct dumper *d, char *err, size_t errlen)
{
	if (!d)
		return 0;
	char why[512] = "", why2[512] = "";
	if (d->dd && d->o.oom != DUMP_OOM_OFF && d->o.oom != DUMP_OOM_CGROUP) {
		if (oom_bpf_open(&d->oom_bpf, dump_victim, d, why, sizeof(why)) == 0)
			log_info("--dump-oom: watching the OOM killer (oom:mark_victim)");
		else if (d->o.oom == DUMP_OOM_BPF)
			log_error("--dump-oom bpf: %s: no OOM snapshots", why);
	}
	if (d->dd && !d->oom_bpf &&
	    (d->o.oom == DUMP_OOM_CGROUP || d->o.oom == DUMP_OOM_AUTO)) {
		d->oom_cg = oom_cgroups_new(why2, sizeof(why2));
		if (d->oom_cg)
			log_info("--dump-oom: watching the memory cgroups' oom_kill counters%s%s%s",
				 why[0] ? " (the tracepoint: " : "", why, why[0] ? ")" : "");
		else
			log_error("--dump-oom: %s%s%s: no OOM snapshots", why2,
				  why[0] ? "; the tracepoint: " : "", why);
	}
	int rc = -pthread_create(&d->thread, NULL, dump_main, d);
	d->started = rc == 0;
	if (d->started)
		pthread_setname_np(d->thread, "heapd-dump");
	if (rc) {
		snprintf(err, errlen, "--dump: thread: %s", strerror(-rc));
		return rc;
	}
	if (d->o.every_s)
		log_info("--dump-every %u: snapshots of every profiled process%s%s%s%s",
			 d->o.every_s, d->dir ? " to " : "", d->dir ? d->dir : "",
			 d->push ? ", pushed to " : "", d->push ? "the --push endpoint" : "");
	return 0;
}

void dumper_free(struct dumper *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->lock);
	d->stop = true;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	push_cancel(d->push);
	oom_bpf_close(d->oom_bpf); /* its reader calls dump_victim: stopped first */
	if (d->started)
		pthread_join(d->thread, NULL);
	oom_cgroups_free(d->oom_cg);
	push_free(d->push);
	dump_dir_close(d->dd);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d->dir);
	free(d->push_url);
	free(d->push_uids);
	free(d);
}
