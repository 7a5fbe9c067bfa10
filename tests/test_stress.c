// SPDX-License-Identifier: MIT
/*
 * test_stress.c: the transport under load, end to end (real daemon, real profiled program,
 * the plain shim preloaded).
 *   - 16 threads allocate at rate 1 from five sites for seconds while another thread takes a
 *     snapshot every few milliseconds: no snapshot shows a count going down, a malformed
 *     record, a size that is not its site's, or buckets that disagree with its own
 *     delivered count; at the end every site's count is exact and nothing was dropped.
 *   - Overload: tiny rings (LLGO_HEAP_RING_KB=4) at rate 1 drop most records, and the drops
 *     are counted exactly: sampled is the number of allocations made, and
 *     sampled == delivered + dropped + corrupt in LIST and in the profile's comment.
 *   - At the default rate, 16 threads allocating flat out (the machine saturated) lose
 *     nothing: the drain keeps up.
 *   - The daemon idles: a few attached processes doing nothing cost it (almost) no CPU.
 *   - Backing off never delays a snapshot: records published just before the request are in
 *     it.
 * Under SAN=thread (LLGO_SAN) the daemon runs under ThreadSanitizer and the loads shrink.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "helpers.h"

#define PROG(name) TH_PROGS "/" name

struct site {
	const char *name;
	long size;
};

static const struct site stress_sites[] = {
	{ "stress_a", 16 }, { "stress_b", 200 }, { "stress_c", 1000 },
	{ "stress_d", 3000 }, { "stress_e", 640 },
};
#define NSITES 5

/* ---- a strict reader of the legacy text -------------------------------------------------- */

struct snap_view {
	long site[NSITES]; /* alloc objects at each site */
	long total;        /* over every record */
	struct th_acct acct;
	char error[512];   /* first problem found, "" when none */
};

static bool is_hex_list(const char *s)
{
	/* " 0x<hex>" repeated at least once, to the end */
	int n = 0;
	while (*s) {
		if (s[0] != ' ' || s[1] != '0' || s[2] != 'x')
			return false;
		s += 3;
		const char *h = s;
		while ((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))
			s++;
		if (s == h)
			return false;
		n++;
	}
	return n > 0;
}

/* Parse a snapshot; every line before MAPPED_LIBRARIES must be the header, a comment, a
 * record line with its frames, or blank, and every record must be whole. */
static void snap_parse(const char *text, struct snap_view *v)
{
	memset(v, 0, sizeof(*v));
	if (strncmp(text, "heap profile: ", 14) != 0) {
		snprintf(v->error, sizeof(v->error), "no header: %.80s", text);
		return;
	}
	if (!th_text_acct(text, &v->acct)) {
		snprintf(v->error, sizeof(v->error), "no accounting line");
		return;
	}
	const char *line = strchr(text, '\n');
	bool records = false, need_frame = false;
	long objs = 0, size = 0;
	while (line && *++line) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char tmp[2048];
		if (len >= sizeof(tmp)) {
			snprintf(v->error, sizeof(v->error), "line too long");
			return;
		}
		memcpy(tmp, line, len);
		tmp[len] = '\0';
		line = nl;
		if (strcmp(tmp, "MAPPED_LIBRARIES:") == 0)
			break;
		if (tmp[0] == '\0') {
			if (need_frame) {
				snprintf(v->error, sizeof(v->error), "record without frames");
				return;
			}
			continue;
		}
		if (tmp[0] == '#' && tmp[1] == '\t') {
			/* "#\t0x<pc>\t<func>+0x<off>\t<file>:<line>" */
			if (!records || strncmp(tmp + 2, "0x", 2) != 0) {
				snprintf(v->error, sizeof(v->error), "stray frame line: %.300s", tmp);
				return;
			}
			if (!need_frame)
				continue;
			need_frame = false;
			const char *f = strchr(tmp + 2, '\t');
			for (int s = 0; f && s < NSITES; s++) {
				size_t n = strlen(stress_sites[s].name);
				if (strncmp(f + 1, stress_sites[s].name, n) != 0 || f[1 + n] != '+')
					continue;
				if (size != stress_sites[s].size) {
					snprintf(v->error, sizeof(v->error), "%s: objects of %ld bytes",
						 stress_sites[s].name, size);
					return;
				}
				v->site[s] += objs;
			}
			continue;
		}
		if (tmp[0] == '#') {
			if (records) {
				snprintf(v->error, sizeof(v->error), "comment after records: %.300s", tmp);
				return;
			}
			continue;
		}
		long a, b, c, d;
		int off = 0;
		if (sscanf(tmp, "%ld: %ld [%ld: %ld] @%n", &a, &b, &c, &d, &off) != 4 || off == 0) {
			snprintf(v->error, sizeof(v->error), "malformed line: %.300s", tmp);
			return;
		}
		if (need_frame) {
			snprintf(v->error, sizeof(v->error), "record without frames before: %.300s", tmp);
			return;
		}
		if (!is_hex_list(tmp + off)) {
			snprintf(v->error, sizeof(v->error), "bad stack: %.300s", tmp);
			return;
		}
		/* rate 1: whole objects, and no more in use than allocated (the sites free
		 * what they allocate: test_inuse.c checks the in-use values exactly) */
		if (c <= 0 || d < 0 || a < 0 || b < 0 || a > c || b > d || d % c != 0 ||
		    (a && b % a != 0)) {
			snprintf(v->error, sizeof(v->error), "bad counts: %.300s", tmp);
			return;
		}
		records = need_frame = true;
		objs = c;
		size = d / c;
		v->total += c;
	}
	if (need_frame)
		snprintf(v->error, sizeof(v->error), "last record without frames");
}

/* ---- 16 threads at rate 1 under snapshots ---------------------------------------------- */

struct snapper {
	const char *sock;
	pid_t pid;
	atomic_int stop;
	long snapshots, failures;
	long max_ms;  /* slowest snapshot */
	long last[NSITES];
	long last_delivered;
	char error[1024];
};

static void *snapper_main(void *arg)
{
	struct snapper *sn = arg;
	struct snap_view v;
	struct llgo_msg_snapshot m;
	client_snapshot_req(&m, sn->pid, LLGO_FORMAT_TEXT, 0, 0);
	while (!atomic_load(&sn->stop) && !sn->error[0]) {
		long t0 = th_now_ms();
		struct client_answer ans;
		int rc = heapd_request(sn->sock, &m, sizeof(m), &ans);
		long ms = th_now_ms() - t0;
		if (ms > sn->max_ms)
			sn->max_ms = ms;
		if (rc != 0 || ans.status != 0) {
			snprintf(sn->error, sizeof(sn->error), "snapshot %ld failed: %d, status %d %s",
				 sn->snapshots, rc, ans.status, ans.message);
			client_answer_free(&ans);
			break;
		}
		snap_parse((const char *)ans.data.data, &v);
		client_answer_free(&ans);
		sn->snapshots++;
		if (v.error[0]) {
			snprintf(sn->error, sizeof(sn->error), "snapshot %ld: %.900s", sn->snapshots,
				 v.error);
			break;
		}
		const struct th_acct *a = &v.acct;
		if (a->sampled != a->delivered + a->dropped + a->corrupt || a->corrupt ||
		    (long)a->delivered != v.total || (long)a->delivered < sn->last_delivered) {
			snprintf(sn->error, sizeof(sn->error), "snapshot %ld: sampled=%llu "
				 "delivered=%llu dropped=%llu corrupt=%llu, records sum to %ld, "
				 "previous delivered %ld", sn->snapshots, a->sampled, a->delivered,
				 a->dropped, a->corrupt, v.total, sn->last_delivered);
			break;
		}
		sn->last_delivered = (long)a->delivered;
		for (int s = 0; s < NSITES; s++) {
			if (v.site[s] < sn->last[s]) {
				snprintf(sn->error, sizeof(sn->error), "snapshot %ld: %s went from "
					 "%ld to %ld", sn->snapshots, stress_sites[s].name,
					 sn->last[s], v.site[s]);
				break;
			}
			sn->last[s] = v.site[s];
		}
		th_sleep_ms(2);
	}
	return NULL;
}

Test(stress, sixteen_threads_exact_under_snapshots, .timeout = 240)
{
	bool tsan = th_san_thread();
	/* 3 s either way: under TSan one snapshot can take over a second on a loaded machine */
	const char *ms = "3000";
	/* paced: 16 threads x (BURST allocations, then 1 ms asleep) */
	const char *burst = tsan ? "4" : "20";
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct th_proc p;
	char *argv[] = { PROG("stress_sites"), "16", "time", (char *)ms, (char *)burst, "1000",
			 NULL };
	th_start(&p, &d, "1", 1024, NULL, argv, NULL);
	cr_assert_str_eq(th_ready(&p, 30000), "started");

	struct snapper sn = { .sock = d.sock, .pid = p.pid };
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, snapper_main, &sn), 0);
	char *out = th_read_rest(&p, 60000);
	int st = th_wait(&p, 30000);
	atomic_store(&sn.stop, 1);
	pthread_join(th, NULL);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "program status 0x%x:\n%s", st, out);
	cr_log_info("stress: %ld snapshots while running (slowest %ld ms)", sn.snapshots,
		    sn.max_ms);
	cr_assert_eq(sn.error[0], '\0', "%s", sn.error);
	cr_assert_geq(sn.snapshots, tsan ? 5 : 50, "only %ld snapshots", sn.snapshots);

	size_t len;
	char *text = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, &len);
	struct snap_view v;
	snap_parse(text, &v);
	cr_assert_eq(v.error[0], '\0', "final snapshot: %s", v.error);
	long total = 0;
	for (int s = 0; s < NSITES; s++) {
		long truth = th_site_truth(out, stress_sites[s].name);
		total += truth;
		cr_expect_eq(v.site[s], truth, "%s: %ld in the profile, %ld made",
			     stress_sites[s].name, v.site[s], truth);
	}
	cr_log_info("stress: %ld allocations at the sites; final sampled=%llu delivered=%llu "
		    "dropped=%llu corrupt=%llu", total, v.acct.sampled, v.acct.delivered,
		    v.acct.dropped, v.acct.corrupt);
	cr_expect_eq(v.acct.dropped, 0);
	cr_expect_eq(v.acct.corrupt, 0);
	cr_expect_eq(v.acct.sampled, v.acct.delivered);
	cr_expect_eq((long)v.acct.delivered, v.total);
	free(text);
	free(out);
	heapd_end(&d);
}

/* ---- overload ------------------------------------------------------------------------------ */

/* Run stress_sites THREADS count N with 4 KiB rings; returns its LIST row and profile. */
static char *overload_run(struct heapd *d, const char *n, struct llgo_list_entry *row,
			  char **out)
{
	struct th_proc p;
	char *argv[] = { PROG("stress_sites"), "4", "count", (char *)n, NULL };
	/* drop, not wait (rate 1's default): this test is about drop accounting */
	const char *extra[] = { "LLGO_HEAP_FULL=drop", NULL };
	th_start(&p, d, "1", 4, NULL, argv, extra);
	*out = th_read_rest(&p, 60000);
	int st = th_wait(&p, 60000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
	char *text = heapd_snapshot(d->sock, p.pid, LLGO_FORMAT_TEXT, NULL);
	cr_assert(heapd_list_pid(d->sock, p.pid, row));
	return text;
}

Test(stress, tiny_rings_drop_and_count_exactly, .timeout = 240)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	/* What the program allocates besides its sites (stdio, thread start-up). */
	struct llgo_list_entry base, row;
	char *out;
	char *text = overload_run(&d, "0", &base, &out);
	free(text);
	free(out);
	const char *n = th_san_thread() ? "20000" : "50000";
	text = overload_run(&d, n, &row, &out);
	long truth = 0;
	for (int s = 0; s < NSITES; s++)
		truth += th_site_truth(out, stress_sites[s].name);
	cr_log_info("overload: %ld allocations at the sites (+%llu at start-up); LIST: "
		    "sampled=%llu delivered=%llu dropped=%llu corrupt=%llu rings=%u", truth,
		    (unsigned long long)base.sampled, (unsigned long long)row.sampled,
		    (unsigned long long)row.delivered, (unsigned long long)row.dropped,
		    (unsigned long long)row.corrupt, row.rings);
	cr_expect_eq(truth, 4 * atol(n));
	/* every allocation was a sample, delivered or counted as dropped */
	cr_expect_eq(row.sampled, truth + base.sampled);
	cr_expect_eq(row.sampled, row.delivered + row.dropped + row.corrupt);
	cr_expect_eq(row.corrupt, 0);
	cr_expect_gt(row.dropped, 0, "4 KiB rings at rate 1 must overflow");
	/* the profile says the same, and its records are the delivered ones */
	struct th_acct a;
	cr_assert(th_text_acct(text, &a));
	cr_expect(a.sampled == row.sampled && a.delivered == row.delivered &&
		  a.dropped == row.dropped && a.corrupt == row.corrupt,
		  "profile: sampled=%llu delivered=%llu dropped=%llu corrupt=%llu", a.sampled,
		  a.delivered, a.dropped, a.corrupt);
	cr_expect_eq(th_text_total(text), (long)a.delivered);
	free(text);
	free(out);
	heapd_end(&d);
}

/* ---- idle and snapshots --------------------------------------------------------------------- */

static void idle_start(struct th_proc *p, struct heapd *d, const char *k)
{
	char *argv[] = { PROG("life_idle"), (char *)k, NULL };
	th_start(p, d, "1", 0, NULL, argv, NULL);
	cr_assert_str_eq(th_ready(p, 30000), "ready");
}

Test(stress, idle_daemon_uses_no_cpu, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	enum { NPROC = 4 };
	struct th_proc p[NPROC];
	for (int i = 0; i < NPROC; i++)
		idle_start(&p[i], &d, "200");
	/* let the drain back off, then measure */
	th_sleep_ms(500);
	long hz = sysconf(_SC_CLK_TCK);
	long t0 = th_cpu_ticks(d.pid), w0 = th_now_ms();
	th_sleep_ms(3000);
	long t1 = th_cpu_ticks(d.pid), w1 = th_now_ms();
	cr_assert(t0 >= 0 && t1 >= t0);
	double cpu = (double)(t1 - t0) / (double)hz, wall = (double)(w1 - w0) / 1000.0;
	cr_log_info("idle: llgo-heapd used %.3f s of CPU in %.2f s with %d idle processes "
		    "attached (%.2f%% of one core)", cpu, wall, NPROC, 100.0 * cpu / wall);
	cr_expect_lt(cpu / wall, 0.03, "the idle daemon uses %.1f%% of a core",
		     100.0 * cpu / wall);
	struct llgo_list_entry *rows;
	size_t n = heapd_list_all(d.sock, &rows);
	cr_expect_eq(n, NPROC);
	for (size_t i = 0; i < n; i++)
		cr_expect(rows[i].delivered >= 200 && rows[i].sampled == rows[i].delivered,
			  "pid %u sampled %llu delivered %llu", rows[i].pid,
			  (unsigned long long)rows[i].sampled, (unsigned long long)rows[i].delivered);
	free(rows);
	for (int i = 0; i < NPROC; i++)
		cr_expect_eq(th_wait(&p[i], 10000), 0);
	heapd_end(&d);
}

Test(stress, snapshot_drains_first, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct th_proc p;
	idle_start(&p, &d, "500");
	for (int round = 1; round <= 5; round++) {
		/* idle long enough for the drain thread to poll at its slowest */
		th_sleep_ms(300);
		th_say(&p, "more");
		cr_assert_str_eq(th_ready(&p, 30000), "ready");
		/* at once: the records were published just now */
		char *text = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TEXT, NULL);
		long got = th_text_count(text, "idle_more_site", 555);
		cr_expect_eq(got, 500L * round, "round %d: %ld of %ld records in the snapshot",
			     round, got, 500L * round);
		free(text);
	}
	cr_expect_eq(th_wait(&p, 10000), 0);
	heapd_end(&d);
}

/* At the default rate, 16 threads allocating flat out on a machine they saturate lose
 * nothing: the drain keeps up (WAKE on half-full rings, 10 ms polls while busy). */
Test(stress, default_rate_drops_nothing, .timeout = 120)
{
	struct heapd d;
	heapd_start(&d, NULL, NULL);
	struct th_proc p;
	char *argv[] = { PROG("stress_sites"), "16", "time", "2000", NULL };
	th_start(&p, &d, "524288", 0, NULL, argv, NULL);
	char *out = th_read_rest(&p, 60000);
	int st = th_wait(&p, 30000);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x:\n%s", st, out);
	long total = 0;
	for (int s = 0; s < NSITES; s++)
		total += th_site_truth(out, stress_sites[s].name);
	struct llgo_list_entry e;
	cr_assert(heapd_list_pid(d.sock, p.pid, &e));
	cr_log_info("default rate: %ld allocations by 16 threads in 2 s; sampled=%llu "
		    "delivered=%llu dropped=%llu corrupt=%llu", total,
		    (unsigned long long)e.sampled, (unsigned long long)e.delivered,
		    (unsigned long long)e.dropped, (unsigned long long)e.corrupt);
	cr_expect_gt(e.sampled, 1000);
	cr_expect_eq(e.corrupt, 0);
	if (th_san_thread()) {
		/* a daemon under TSan drains several times slower than the one this test is
		 * about: what it cannot take is dropped, counted, and little */
		cr_expect_eq(e.sampled, e.delivered + e.dropped);
		cr_expect_leq(e.dropped * 100, e.sampled, "dropped %llu of %llu under TSan",
			      (unsigned long long)e.dropped, (unsigned long long)e.sampled);
	} else {
		cr_expect_eq(e.dropped, 0);
		cr_expect_eq(e.sampled, e.delivered);
	}
	free(out);
	heapd_end(&d);
}
