// SPDX-License-Identifier: MIT
/*
 * oom.c: who the kernel's OOM killer chose, for llgo-heapd's OOM snapshots (--dump-oom,
 * dump.c). Two ways, the first preferred:
 *
 *   - the oom:mark_victim tracepoint (oom.bpf.c, a raw tracepoint program: no tracefs
 *     needed): the kernel names the victim (pid and start time) when it picks it, for the
 *     whole host and every memory cgroup. Needs CAP_BPF and CAP_PERFMON and the kernel's
 *     BTF. The tracepoint's first argument is a task since Linux 6.8 and a pid before: the
 *     kernel's BTF (btf_trace_mark_victim's prototype) says which, and the program is told
 *     before it loads.
 *   - the oom_kill counters of memory cgroups (v2: memory.events; v1: memory.oom_control),
 *     polled every OOM_CGROUP_POLL_MS for the cgroups the profiled processes are in (read
 *     from /proc/PID/cgroup at their first pass, between identity checks). A counter names no
 *     pid: a watched process that exits within OOM_CGROUP_WINDOW_NS of a rise of its cgroup's
 *     counter is taken for the victim. Another process of the same cgroup that exits by
 *     itself in that window is taken too (an extra snapshot, never a missing one); a cgroup
 *     removed before the next pass saw the rise is missed.
 *
 * Left to others: what is done with a victim (dump.c).
 */
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dump_impl.h"
#include "oom.bpf.skel.h"
#include "../verify/verify.h"
#include "../../shared/oom.h"

/* ---- the tracepoint -------------------------------------------------------------------------- */

struct oom_bpf {
	struct oom_skel *skel;
	struct ring_buffer *rb;
	pthread_t reader;
	bool reader_started;
	_Atomic bool stop;
	oom_victim_fn fn;
	void *arg;
	uint64_t ns_per_tick;
};

static int oom_bpf_event(void *ctx, void *data, size_t size)
{
	struct oom_bpf *b = ctx;
	struct llgo_oom_event e;
	if (size < sizeof(e))
		return 0;
	memcpy(&e, data, sizeof(e));
	if (e.pid == 0)
		return 0;
	uint64_t start = (e.flags & LLGO_OOM_START_KNOWN) ? e.start_ns / b->ns_per_tick : 0;
	b->fn(b->arg, (pid_t)e.pid, start);
	return 0;
}

static void *oom_bpf_reader(void *arg)
{
	struct oom_bpf *b = arg;
	while (!atomic_load(&b->stop)) {
		int r = ring_buffer__poll(b->rb, 200);
		if (r < 0 && r != -EINTR) {
			log_error("--dump-oom: reading the BPF ring buffer: %s", strerror(-r));
			struct timespec ts = { 0, 100 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

static int oom_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG || !getenv("LLGO_HEAP_BPF_DEBUG"))
		return 0;
	return vfprintf(stderr, fmt, ap);
}

/* Whether mark_victim's first argument is a task (Linux 6.8+) rather than a pid. */
static int oom_victim_is_task(bool *task, char *err, size_t errlen)
{
	struct btf *btf = btf__load_vmlinux_btf();
	if (!btf) {
		snprintf(err, errlen, "the kernel has no BTF (/sys/kernel/btf/vmlinux)");
		return -ENOTSUP;
	}
	int rc = 0;
	int id = btf__find_by_name_kind(btf, "btf_trace_mark_victim", BTF_KIND_TYPEDEF);
	const struct btf_type *t = id > 0 ? btf__type_by_id(btf, (__u32)id) : NULL;
	if (t)
		t = btf__type_by_id(btf, t->type); /* pointer */
	if (t && btf_is_ptr(t))
		t = btf__type_by_id(btf, t->type); /* the prototype: (void *, args...) */
	if (!t || !btf_is_func_proto(t)) {
		snprintf(err, errlen, "the kernel has no oom:mark_victim tracepoint");
		rc = -ENOENT;
	} else {
		*task = btf_vlen(t) >= 3;
	}
	btf__free(btf);
	return rc;
}

int oom_bpf_open(struct oom_bpf **out, oom_victim_fn fn, void *arg, char *err, size_t errlen)
{
	*out = NULL;
	struct oom_bpf *b = calloc(1, sizeof(*b));
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	b->fn = fn;
	b->arg = arg;
	long hz = sysconf(_SC_CLK_TCK);
	b->ns_per_tick = hz > 0 ? 1000000000ull / (uint64_t)hz : 10000000ull;
	libbpf_set_print(oom_libbpf_print);
	bool task = true;
	int rc = oom_victim_is_task(&task, err, errlen);
	if (!rc && !(b->skel = oom_skel__open())) {
		rc = -errno ? -errno : -EINVAL;
		verify_explain(rc, "opening the BPF object", err, errlen);
	}
	if (!rc) {
		b->skel->rodata->victim_is_task = task;
		if ((rc = oom_skel__load(b->skel)) != 0)
			verify_explain(rc, "loading the BPF program", err, errlen);
	}
	if (!rc && (rc = oom_skel__attach(b->skel)) != 0)
		verify_explain(rc, "attaching to oom:mark_victim", err, errlen);
	if (!rc) {
		b->rb = ring_buffer__new(bpf_map__fd(b->skel->maps.oom_events), oom_bpf_event, b,
					 NULL);
		if (!b->rb) {
			rc = -errno ? -errno : -EINVAL;
			verify_explain(rc, "opening the BPF ring buffer", err, errlen);
		}
	}
	if (!rc) {
		rc = -pthread_create(&b->reader, NULL, oom_bpf_reader, b);
		b->reader_started = rc == 0;
		if (b->reader_started)
			pthread_setname_np(b->reader, "heapd-oom");
		if (rc)
			snprintf(err, errlen, "thread: %s", strerror(-rc));
	}
	if (rc) {
		oom_bpf_close(b);
		return rc;
	}
	*out = b;
	return 0;
}

void oom_bpf_close(struct oom_bpf *b)
{
	if (!b)
		return;
	atomic_store(&b->stop, true);
	if (b->reader_started)
		pthread_join(b->reader, NULL);
	ring_buffer__free(b->rb);
	oom_skel__destroy(b->skel);
	free(b);
}

/* ---- the cgroups' counters ------------------------------------------------------------------ */

struct oom_cgroup {
	char *path; /* the counter file */
	int fd;
	uint64_t count;
	uint64_t rise_ns; /* CLOCK_MONOTONIC of the last rise seen; 0 none */
	unsigned refs;
};

struct oom_watched {
	struct session *s;
	struct oom_cgroup *cg;
	uint64_t base; /* cg->count when the session was first watched */
};

struct oom_cgroups {
	char v2_root[256], v1_mem_root[256]; /* mount points ("" none) */
	uint64_t seen_seq; /* sessions up to this registry order were looked at */
	struct oom_cgroup **cgs;
	size_t ncgs;
	struct oom_watched *w;
	size_t nw, capw;
};

struct oom_cgroups *oom_cgroups_new(char *err, size_t errlen)
{
	struct oom_cgroups *c = calloc(1, sizeof(*c));
	FILE *f = c ? fopen("/proc/self/mounts", "re") : NULL;
	if (!f) {
		snprintf(err, errlen, "/proc/self/mounts: %s", strerror(c ? errno : ENOMEM));
		free(c);
		return NULL;
	}
	char dev[256], mnt[256], type[64], opts[512];
	while (fscanf(f, "%255s %255s %63s %511s %*d %*d", dev, mnt, type, opts) == 4) {
		if (strcmp(type, "cgroup2") == 0 && !c->v2_root[0])
			snprintf(c->v2_root, sizeof(c->v2_root), "%s", mnt);
		if (strcmp(type, "cgroup") == 0 && !c->v1_mem_root[0]) {
			char *save = NULL;
			for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
				if (strcmp(o, "memory") == 0)
					snprintf(c->v1_mem_root, sizeof(c->v1_mem_root), "%s", mnt);
		}
	}
	fclose(f);
	if (!c->v2_root[0] && !c->v1_mem_root[0]) {
		snprintf(err, errlen, "no cgroup file system is mounted");
		free(c);
		return NULL;
	}
	return c;
}

/* The oom_kill counter of an open memory.events or memory.oom_control; false if unreadable. */
static bool oom_cgroup_read(int fd, uint64_t *out)
{
	char buf[1024];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	for (char *line = buf; line && *line;) {
		unsigned long long v;
		if (sscanf(line, "oom_kill %llu", &v) == 1) {
			*out = v;
			return true;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return false;
}

/* A cgroup path from /proc/PID/cgroup fit to append to a mount point. */
static bool oom_cgroup_path_ok(const char *p)
{
	if (p[0] != '/' || strlen(p) > 1024)
		return false;
	for (const char *q = p; (q = strstr(q, "/..")) != NULL; q++)
		if (q[3] == '/' || q[3] == '\0')
			return false;
	return true;
}

/* The counter file of the memory cgroup s's process is in, read between identity checks:
 * malloc'ed path, or NULL. */
static char *oom_cgroup_of(struct oom_cgroups *c, struct session *s)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)s->pid);
	if (!session_may_read(s))
		return NULL;
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	char line[2048], v2[2048] = "", v1[2048] = "";
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		if (strcmp(line, "0:") == 0 && c1 + 1 == c2)
			snprintf(v2, sizeof(v2), "%s", c2 + 1);
		char *save = NULL;
		for (char *o = strtok_r(c1 + 1, ",", &save); o; o = strtok_r(NULL, ",", &save))
			if (strcmp(o, "memory") == 0)
				snprintf(v1, sizeof(v1), "%s", c2 + 1);
	}
	fclose(f);
	if (!session_may_have_read(s))
		return NULL;
	char *out = NULL;
	if (c->v2_root[0] && v2[0] && oom_cgroup_path_ok(v2) &&
	    asprintf(&out, "%s%s/memory.events", c->v2_root, strcmp(v2, "/") ? v2 : "") >= 0 &&
	    access(out, R_OK) == 0)
		return out;
	free(out);
	out = NULL;
	if (c->v1_mem_root[0] && v1[0] && oom_cgroup_path_ok(v1) &&
	    asprintf(&out, "%s%s/memory.oom_control", c->v1_mem_root,
		     strcmp(v1, "/") ? v1 : "") >= 0 &&
	    access(out, R_OK) == 0)
		return out;
	free(out);
	return NULL;
}

static struct oom_cgroup *oom_cgroup_get(struct oom_cgroups *c, char *path)
{
	for (size_t i = 0; i < c->ncgs; i++) {
		if (strcmp(c->cgs[i]->path, path) == 0) {
			free(path);
			c->cgs[i]->refs++;
			return c->cgs[i];
		}
	}
	struct oom_cgroup *cg = calloc(1, sizeof(*cg));
	struct oom_cgroup **v = realloc(c->cgs, (c->ncgs + 1) * sizeof(*v));
	if (v)
		c->cgs = v;
	int fd = cg && v ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	if (fd < 0 || !oom_cgroup_read(fd, &cg->count)) {
		if (fd >= 0)
			close(fd);
		free(cg);
		free(path);
		return NULL;
	}
	cg->path = path;
	cg->fd = fd;
	cg->refs = 1;
	c->cgs[c->ncgs++] = cg;
	return cg;
}

static void oom_cgroup_put(struct oom_cgroups *c, struct oom_cgroup *cg)
{
	if (--cg->refs)
		return;
	for (size_t i = 0; i < c->ncgs; i++) {
		if (c->cgs[i] == cg) {
			c->cgs[i] = c->cgs[--c->ncgs];
			break;
		}
	}
	close(cg->fd);
	free(cg->path);
	free(cg);
}

void oom_cgroups_poll(struct oom_cgroups *c, struct session_registry *reg, oom_victim_fn fn,
		      void *arg)
{
	/* sessions that attached since the last pass */
	struct session **v;
	size_t n = session_list(reg, true, &v);
	uint64_t top = c->seen_seq;
	for (size_t i = 0; i < n; i++) {
		struct session *s = v[i];
		if (s->seq <= c->seen_seq)
			continue;
		if (s->seq > top)
			top = s->seq;
		char *path = oom_cgroup_of(c, s);
		struct oom_cgroup *cg = path ? oom_cgroup_get(c, path) : NULL;
		if (!cg)
			continue;
		if (c->nw == c->capw) {
			size_t cap = c->capw ? c->capw * 2 : 64;
			struct oom_watched *nv = realloc(c->w, cap * sizeof(*nv));
			if (!nv) {
				oom_cgroup_put(c, cg);
				continue;
			}
			c->w = nv;
			c->capw = cap;
		}
		c->w[c->nw++] = (struct oom_watched){ session_get(s), cg, cg->count };
	}
	c->seen_seq = top;
	session_list_release(v, n);

	uint64_t now = session_now_ns(CLOCK_MONOTONIC);
	for (size_t i = 0; i < c->ncgs; i++) {
		uint64_t cur;
		if (oom_cgroup_read(c->cgs[i]->fd, &cur) && cur > c->cgs[i]->count) {
			c->cgs[i]->count = cur;
			c->cgs[i]->rise_ns = now;
		}
	}
	for (size_t i = 0; i < c->nw;) {
		struct oom_watched *w = &c->w[i];
		if (session_is_live(w->s)) {
			i++;
			continue;
		}
		if (w->cg->count > w->base && w->cg->rise_ns &&
		    now - w->cg->rise_ns <= OOM_CGROUP_WINDOW_NS)
			fn(arg, w->s->pid, w->s->proc_start);
		session_put(w->s);
		oom_cgroup_put(c, w->cg);
		c->w[i] = c->w[--c->nw];
	}
}

void oom_cgroups_free(struct oom_cgroups *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->nw; i++) {
		session_put(c->w[i].s);
		oom_cgroup_put(c, c->w[i].cg);
	}
	free(c->w);
	free(c->cgs);
	free(c);
}
