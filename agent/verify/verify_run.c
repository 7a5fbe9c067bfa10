// SPDX-License-Identifier: MIT
/*
 * verify_run.c: `llgo-heap verify PID --seconds N`, the one-off verify (verify.c attaches,
 * verify_match.c pairs and compares): its window and the report the CLI prints.
 *
 * Window. A one-off verify drains the process first, attaches, sleeps, detaches, settles
 * and drains again, and waits until the reader has seen everything the program sent. A
 * record with no capture is `outside` when its seq lies outside the range of seqs the kernel
 * captured on its ring (pushed before the attach took effect or after the detach), else
 * `record_unmatched`; a capture with no record (corrupt or lost in the ring) is
 * `kernel_unmatched`. Continuous targets expire halves that waited VERIFY_EXPIRE_NS.
 *
 */
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verify_impl.h"

/* ---- the one-off verify ----------------------------------------------------------------------- */

/* "function+0xoff" for the return address pc, else "file+0xoff" or the address. */
static void verify_run_frame_name(struct procmaps *maps, uint64_t pc, char *out, size_t n)
{
	const struct mapping *m;
	struct sym_result r;
	if (profile_frame(maps, pc, &m, &r) > 0 && r.frames[r.nframes - 1].function) {
		const char *f = r.frames[r.nframes - 1].function;
		if (r.entry && pc >= r.entry)
			snprintf(out, n, "%s+0x%llx", f, (unsigned long long)(pc - r.entry));
		else
			snprintf(out, n, "%s", f);
		return;
	}
	profile_addr_name(out, n, m, pc);
}

static void verify_run_disagree(struct buf *b, struct procmaps *maps,
				   const struct verify_disagree *d, unsigned idx)
{
	buf_printf(b, "disagreement %u (%s mode): ring %u seq %llu size %llu: kernel %u frames "
		      "(after trimming %u shim frames), shim %u frames\n",
		   idx, d->mode == VERIFY_MODE_DWARF ? "dwarf" : "frame-pointer", d->ring_id,
		   (unsigned long long)d->seq, (unsigned long long)d->size, d->nk, d->trimmed,
		   d->nr);
	uint32_t n = d->nk > d->nr ? d->nk : d->nr;
	if (n > 16)
		n = 16;
	buf_printf(b, "  %-3s %-46s %s\n", "#", "kernel", "shim");
	for (uint32_t i = 0; i < n; i++) {
		char kn[160] = "-", rn[160] = "-", kc[200], rc[200];
		if (i < d->nk) {
			verify_run_frame_name(maps, d->k[i], kn, sizeof(kn));
			snprintf(kc, sizeof(kc), "0x%llx %s", (unsigned long long)d->k[i], kn);
		} else {
			snprintf(kc, sizeof(kc), "-");
		}
		if (i < d->nr) {
			verify_run_frame_name(maps, d->r[i], rn, sizeof(rn));
			snprintf(rc, sizeof(rc), "0x%llx %s", (unsigned long long)d->r[i], rn);
		} else {
			snprintf(rc, sizeof(rc), "-");
		}
		bool diff = i >= d->nk || i >= d->nr || d->k[i] != d->r[i];
		buf_printf(b, "  %-3u %-46s %s%s\n", i, kc, rc, diff ? "   <- differs" : "");
	}
	if ((d->nk > 16 || d->nr > 16))
		buf_puts(b, "  ...\n");
}

/* The window's counts over both modes (hits and lost are the caller's). */
static void verify_run_total(const struct verify_window *w, struct llgo_verify_summary *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (int m = 0; m < VERIFY_MODES; m++) {
		const struct llgo_verify_summary *x = &w->mode[m];
		sum->samples += x->samples;
		sum->agree += x->agree;
		sum->kernel_unmatched += x->kernel_unmatched;
		sum->record_unmatched += x->record_unmatched;
		sum->outside += x->outside;
		sum->kernel_errors += x->kernel_errors;
		sum->incomparable += x->incomparable;
	}
}

static void verify_run_mode(struct buf *b, const char *name,
			       const struct llgo_verify_summary *w)
{
	if (!w->samples && !w->kernel_unmatched && !w->record_unmatched && !w->outside &&
	    !w->incomparable && !w->kernel_errors) {
		buf_printf(b, "%s: no samples\n", name);
		return;
	}
	buf_printf(b, "%s: %llu samples matched, %llu agree, %llu disagree; unmatched: %llu "
		      "kernel captures without a record, %llu records without a kernel capture; "
		      "%llu records outside the capture window\n",
		   name, (unsigned long long)w->samples, (unsigned long long)w->agree,
		   (unsigned long long)(w->samples - w->agree),
		   (unsigned long long)w->kernel_unmatched,
		   (unsigned long long)w->record_unmatched, (unsigned long long)w->outside);
	if (w->incomparable)
		buf_printf(b, "%s: not compared: %llu samples whose kernel stack ends inside the "
			      "shim or the allocator (frameless code there broke the kernel's "
			      "frame-pointer walk)\n",
			   name, (unsigned long long)w->incomparable);
}

static bool verify_run_sleep(struct verifier *v, struct session *s, uint32_t seconds)
{
	uint64_t end = verify_now() + (uint64_t)seconds * 1000000000ull;
	while (verify_now() < end && !atomic_load(&v->cancel)) {
		if (!session_is_live(s) || !session_process_alive(s))
			return false;
		struct timespec ts = { 0, 50 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return true;
}

static int verify_run_window(struct verifier *v, struct session *s,
			     uint32_t seconds, struct llgo_verify_summary *sum, struct buf *text,
			     char *err, size_t errlen);

int verify_run(struct verifier *v, struct session *s, uint32_t seconds,
	       struct llgo_verify_summary *sum, struct buf *text, char *err, size_t errlen)
{
	memset(sum, 0, sizeof(*sum));
	if (atomic_fetch_add(&v->running, 1) >= VERIFY_MAX_RUNNING) {
		atomic_fetch_sub(&v->running, 1);
		snprintf(err, errlen, "%u verifies are running already; try again when one ends",
			 VERIFY_MAX_RUNNING);
		return -EBUSY;
	}
	int rc = verify_run_window(v, s, seconds, sum, text, err, errlen);
	atomic_fetch_sub(&v->running, 1);
	return rc;
}

static int verify_run_window(struct verifier *v, struct session *s,
			     uint32_t seconds, struct llgo_verify_summary *sum, struct buf *text,
			     char *err, size_t errlen)
{
	memset(sum, 0, sizeof(*sum));
	if (!session_is_live(s)) {
		snprintf(err, errlen, "pid %d has exited", (int)s->pid);
		return -ESRCH;
	}
	int rc = verifier_load(v, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&s->drain_lock);
	struct verify_target *t = s->verify;
	bool own = t == NULL;
	if (t) {
		pthread_mutex_lock(&t->lock);
		bool busy = t->window;
		t->window = true; /* claimed: --verify-every's teardown waits for us */
		pthread_mutex_unlock(&t->lock);
		if (busy) {
			pthread_mutex_unlock(&s->drain_lock);
			snprintf(err, errlen, "pid %d is being verified already", (int)s->pid);
			return -EBUSY;
		}
	}
	pthread_mutex_unlock(&s->drain_lock);

	if (own) {
		t = verify_target_new(v, s, err, errlen);
		if (!t)
			return -ENOENT;
		t->window = true;
		rc = verify_target_publish(v, t, 1, true, err, errlen);
		if (rc)
			return rc;
	} else {
		/* Every sample while the window is open: records first, then captures; then
		 * what was captured or drained before is read and forgotten. */
		uint32_t old = atomic_exchange(&t->every, 1);
		rc = verify_set_every(v, t, 1);
		if (rc) {
			atomic_store(&t->every, old);
			verify_explain(rc, "updating the BPF map", err, errlen);
			pthread_mutex_lock(&t->lock);
			t->window = false;
			pthread_mutex_unlock(&t->lock);
			verify_stop_pending(v, t);
			return rc;
		}
		verify_reader_sync(v);
		if (v->settle)
			v->settle(v->settle_arg, s);
		drain_session(s);
		pthread_mutex_lock(&t->lock);
		verify_match_flush(t, 0, false);
		memset(&t->win, 0, sizeof(t->win));
		free(t->ranges);
		t->ranges = NULL;
		t->nseqranges = 0;
		pthread_mutex_unlock(&t->lock);
	}
	struct llgo_verify_target before;
	verify_map_stats(v, t, &before);

	bool alive = verify_run_sleep(v, s, seconds);

	/* Close the window: no new captures, then every record and capture sent so far. */
	struct llgo_verify_target after;
	verify_map_stats(v, t, &after);
	if (own) {
		verify_link_destroy(v, t->link);
		t->link = NULL;
	} else {
		verify_set_every(v, t, t->cont_every);
	}
	verify_reader_sync(v);
	pthread_mutex_lock(&t->lock);
	t->closing = true;
	pthread_mutex_unlock(&t->lock);
	if (alive) {
		if (v->settle)
			v->settle(v->settle_arg, s);
		drain_session(s);
	}

	pthread_mutex_lock(&t->lock);
	verify_match_flush(t, 0, true);
	struct verify_window win = t->win;
	verify_run_total(&win, sum);
	sum->hits = after.hits - before.hits;
	sum->lost = after.lost - before.lost;
	uint64_t overflow = t->overflow;
	t->overflow = 0;
	uint32_t ndis = t->ndis;
	struct verify_disagree *dis[VERIFY_KEEP_DISAGREE];
	memcpy(dis, t->dis, sizeof(dis));
	t->ndis = 0;
	memset(&t->win, 0, sizeof(t->win));
	t->window = false;
	t->closing = false;
	free(t->ranges);
	t->ranges = NULL;
	t->nseqranges = 0;
	pthread_mutex_unlock(&t->lock);

	buf_printf(text, "pid %d (%.*s): %u s%s; kernel stacks from the USDT probe "
			 "llgo_heap:sample in %s\n",
		   (int)s->pid, (int)LLGO_COMM_LEN, s->comm, seconds,
		   alive ? "" : " (the process exited before the end)", t->binary);
	verify_run_mode(text, "frame-pointer mode", &win.mode[VERIFY_MODE_FP]);
	verify_run_mode(text, "dwarf mode", &win.mode[VERIFY_MODE_DWARF]);
	buf_printf(text, "kernel: %llu probe hits, %llu captures lost (BPF ring buffer full, or "
			 "this user's share of it), "
			 "%llu unreadable stacks%s\n",
		   (unsigned long long)sum->hits, (unsigned long long)sum->lost,
		   (unsigned long long)sum->kernel_errors,
		   overflow ? "; some halves were not kept (pending table full)" : "");
	unsigned rd = procmaps_read_begin(s->maps);
	for (uint32_t i = 0; i < ndis; i++) {
		verify_run_disagree(text, s->maps, dis[i], i + 1);
		free(dis[i]);
	}
	procmaps_read_end(s->maps, rd);
	if (own)
		verify_session_stop(v, s);
	else
		verify_stop_pending(v, t);
	return text->failed ? -ENOMEM : 0;
}
