// SPDX-License-Identifier: MIT
/*
 * verify.c: the eBPF cross-check of recorded stacks (`llgo-heap verify PID`,
 * `llgo-heapd --verify-every N`): loading and attaching. The BPF program (verify.bpf.c,
 * through its bpftool skeleton) is attached with libbpf's bpf_program__attach_usdt to the
 * shim's USDT probe llgo_heap:sample (shim/probe.c) in one process; each hit whose record seq
 * is a multiple of the target's `every` sends the record's identity (ring id, seq) and the
 * kernel's view of the user stack through a BPF ring buffer. One thread here reads that
 * buffer and hands each event to verify_match.c, where drain.c hands over every record of a
 * verified process; the one-off verify and its report are verify_run.c's. This file finds
 * the probe, loads the program, explains why BPF cannot work, and keeps the targets (one per
 * verified process) and their lifetime, and each user's share of the ring buffer (the
 * program charges an event to its user's entry of the shares map, the reader gives the bytes
 * back as it reads it: shared/verify.h).
 */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "verify.bpf.skel.h"
#include "verify_impl.h"

/* libbpf's USDT manager (spec ids, their free list) is shared by every link of the object
 * and is not thread-safe: attaches and destroys take v->libbpf_lock (a leaf lock). */
void verify_link_destroy(struct verifier *v, struct bpf_link *link)
{
	pthread_mutex_lock(&v->libbpf_lock);
	bpf_link__destroy(link);
	pthread_mutex_unlock(&v->libbpf_lock);
}

/* ---- probe lookup ---------------------------------------------------------------------- */

/* Whether the ELF file at path has the stapsdt note llgo_heap:sample. */
static bool verify_has_probe(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	bool found = false;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	if (!e || elf_getshdrstrndx(e, &shstrndx) != 0)
		goto out;
	while (!found && (scn = elf_nextscn(e, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		const char *name = elf_strptr(e, shstrndx, sh.sh_name);
		if (!name || strcmp(name, ".note.stapsdt") != 0)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		size_t off = 0, noff, doff;
		GElf_Nhdr nh;
		while (d && !found && (off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
			if (nh.n_type != 3 || nh.n_descsz < 3 * 8 + 2 || doff + nh.n_descsz > d->d_size)
				continue;
			const char *desc = (const char *)d->d_buf + doff + 3 * 8;
			size_t left = nh.n_descsz - 3 * 8;
			size_t plen = strnlen(desc, left);
			if (plen == left)
				continue;
			const char *pname = desc + plen + 1;
			size_t nleft = left - plen - 1;
			found = strcmp(desc, "llgo_heap") == 0 && strnlen(pname, nleft) < nleft &&
				strcmp(pname, "sample") == 0;
		}
	}
out:
	if (e)
		elf_end(e);
	close(fd);
	return found;
}

/* Find the mapped file of s that holds the probe; fill t->binary and the shim's text. */
static int verify_find_probe(struct verify_target *t)
{
	struct session *s = t->s;
	if (!s->maps)
		return -ENOENT;
	drain_refresh_maps(s, true);
	unsigned rd = procmaps_read_begin(s->maps);
	const struct mapping **v;
	size_t n = procmaps_list(s->maps, &v);
	const char *found = NULL;
	/* Two passes: the preloaded libllgoheap.so first (a program may also link the shim's
	 * objects, e.g. for the hook API; the preloaded copy is the one interposing malloc),
	 * then any file, for programs that link libllgoheap.a only. */
	for (size_t i = 0; i < 2 * n && !found; i++) {
		const struct mapping *m = v[i % n];
		if (!m->path || m->path[0] != '/' || !strchr(m->perms, 'x'))
			continue;
		const char *mb = strrchr(m->path, '/');
		if (i < n && strncmp(mb ? mb + 1 : m->path, "libllgoheap", 11) != 0)
			continue;
		/* the process's own view of the file (another mount namespace, a replaced file) */
		char p[sizeof(t->binary)];
		snprintf(p, sizeof(p), "/proc/%d/root%s", (int)s->pid, m->path);
		if (verify_has_probe(p)) {
			snprintf(t->binary, sizeof(t->binary), "%s", p);
			found = m->path;
		} else if (access(p, R_OK) != 0 && verify_has_probe(m->path)) {
			snprintf(t->binary, sizeof(t->binary), "%s", m->path);
			found = m->path;
		}
	}
	if (!found) {
		procmaps_read_end(s->maps, rd);
		return -ENOENT;
	}
	const char *base = strrchr(found, '/');
	base = base ? base + 1 : found;
	t->by_name = strncmp(base, "libllgoheap", 11) != 0;
	t->nranges = 0;
	for (size_t i = 0; i < n && !t->by_name; i++) {
		if (v[i]->path && strcmp(v[i]->path, found) == 0 && strchr(v[i]->perms, 'x') &&
		    t->nranges < VERIFY_MAX_RANGES) {
			t->lo[t->nranges] = v[i]->start;
			t->hi[t->nranges++] = v[i]->end;
		}
	}
	procmaps_read_end(s->maps, rd);
	return 0;
}

/* ---- the ring buffer reader ------------------------------------------------------------------ */

static void *verify_reader(void *arg)
{
	struct verifier *v = arg;
	uint64_t last_expire = verify_now();
	while (!atomic_load(&v->stop)) {
		int r = ring_buffer__poll(v->rb, VERIFY_POLL_MS);
		if (r < 0 && r != -EINTR) {
			log_error("verify: reading the BPF ring buffer: %s", strerror(-r));
			struct timespec ts = { 0, 100 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		atomic_fetch_add(&v->polls, 1);
		uint64_t now = verify_now();
		if (now - last_expire < 1000000000ull)
			continue;
		last_expire = now;
		/* continuous targets: halves whose other half never came */
		pthread_mutex_lock(&v->lock);
		for (struct verify_target *t = v->targets; t; t = t->next) {
			pthread_mutex_lock(&t->lock);
			if (!t->window)
				verify_match_flush(t, now - VERIFY_EXPIRE_NS, false);
			pthread_mutex_unlock(&t->lock);
		}
		pthread_mutex_unlock(&v->lock);
	}
	return NULL;
}

/* Wait until the reader completed two passes: everything submitted before the call is read. */
void verify_reader_sync(struct verifier *v)
{
	uint64_t start = atomic_load(&v->polls);
	for (int i = 0; i < 400 && atomic_load(&v->polls) < start + 2; i++) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
}

/* ---- loading ------------------------------------------------------------------------------- */

static int verify_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	/* libbpf's own diagnostics only with LLGO_HEAP_BPF_DEBUG: our errors name the cause */
	if (level == LIBBPF_DEBUG || !getenv("LLGO_HEAP_BPF_DEBUG"))
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static int verify_read_int(const char *path, long *out)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	int ok = fscanf(f, "%ld", out) == 1;
	fclose(f);
	return ok ? 0 : -EINVAL;
}

/* Why BPF cannot be used here, checked before libbpf tries, so the message names the cause. */
static int verify_precheck(char *err, size_t errlen)
{
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
	    (major < 5 || (major == 5 && minor < 8))) {
		snprintf(err, errlen, "BPF unavailable: kernel %s is too old (verify needs Linux "
				      "5.8+: BPF ring buffer, USDT semaphores, bpf_get_stack)",
			 u.release);
		return -ENOTSUP;
	}
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
		snprintf(err, errlen, "BPF unavailable: the kernel has no BTF (/sys/kernel/btf/vmlinux "
				      "missing: CONFIG_DEBUG_INFO_BTF=y is needed)");
		return -ENOTSUP;
	}
	return 0;
}

void verify_explain(int rc, const char *step, char *err, size_t errlen)
{
	if (rc == -EPERM || rc == -EACCES) {
		long unpriv = 0;
		bool root = geteuid() == 0;
		if (!root && verify_read_int("/proc/sys/kernel/unprivileged_bpf_disabled",
					     &unpriv) == 0 && unpriv != 0)
			snprintf(err, errlen, "BPF unavailable: %s: permission denied (llgo-heapd "
					      "runs as uid %u without CAP_BPF and CAP_PERFMON, and "
					      "kernel.unprivileged_bpf_disabled=%ld)",
				 step, (unsigned)geteuid(), unpriv);
		else
			snprintf(err, errlen, "BPF unavailable: %s: permission denied (llgo-heapd "
					      "needs CAP_BPF and CAP_PERFMON, or root)", step);
	} else if (rc == -ENOSYS) {
		snprintf(err, errlen, "BPF unavailable: %s: the kernel has no bpf() system call", step);
	} else {
		snprintf(err, errlen, "BPF unavailable: %s: %s", step, strerror(-rc));
	}
}

int verifier_load(struct verifier *v, char *err, size_t errlen)
{
	pthread_mutex_lock(&v->lock);
	if (v->loaded || v->load_err) {
		int rc = v->load_err;
		if (rc)
			snprintf(err, errlen, "%s", v->load_msg);
		pthread_mutex_unlock(&v->lock);
		return rc;
	}
	libbpf_set_print(verify_libbpf_print);
	int rc = verify_precheck(v->load_msg, sizeof(v->load_msg));
	if (!rc) {
		v->skel = verify_bpf__open();
		if (!v->skel) {
			rc = -errno ? -errno : -EINVAL;
			verify_explain(rc, "opening the BPF object", v->load_msg,
				       sizeof(v->load_msg));
		}
	}
	if (!rc && (rc = verify_bpf__load(v->skel)) != 0) {
		/* a kernel without the ring buffer fails the load too; say which it was */
		if (rc != -EPERM && rc != -EACCES &&
		    libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL) == 0)
			snprintf(v->load_msg, sizeof(v->load_msg),
				 "BPF unavailable: the kernel has no BPF ring buffer (Linux 5.8+)");
		else
			verify_explain(rc, "loading the BPF program", v->load_msg,
				       sizeof(v->load_msg));
	}
	if (!rc) {
		v->rb = ring_buffer__new(bpf_map__fd(v->skel->maps.events), verify_match_event, v, NULL);
		if (!v->rb) {
			rc = -errno ? -errno : -EINVAL;
			verify_explain(rc, "opening the BPF ring buffer", v->load_msg,
				       sizeof(v->load_msg));
		}
	}
	if (!rc) {
		long page = sysconf(_SC_PAGESIZE);
		v->shares_len = (LLGO_VERIFY_SHARES * sizeof(struct llgo_verify_share) +
				 (size_t)page - 1) & ~((size_t)page - 1);
		void *m = mmap(NULL, v->shares_len, PROT_READ | PROT_WRITE, MAP_SHARED,
			       bpf_map__fd(v->skel->maps.shares), 0);
		if (m == MAP_FAILED) {
			rc = -errno;
			v->shares_len = 0;
			verify_explain(rc, "mapping the BPF shares map", v->load_msg,
				       sizeof(v->load_msg));
		} else {
			v->shares = m;
		}
	}
	if (!rc) {
		rc = -pthread_create(&v->reader, NULL, verify_reader, v);
		if (rc)
			snprintf(v->load_msg, sizeof(v->load_msg), "verify: thread: %s",
				 strerror(-rc));
		v->reader_started = rc == 0;
		if (v->reader_started)
			pthread_setname_np(v->reader, "heapd-verify");
	}
	long ms = 0;
	v->max_stack = LLGO_VERIFY_MAX_FRAMES;
	if (verify_read_int("/proc/sys/kernel/perf_event_max_stack", &ms) == 0 && ms > 0 &&
	    ms < LLGO_VERIFY_MAX_FRAMES)
		v->max_stack = (uint32_t)ms;
	if (rc) {
		if (v->shares)
			munmap(v->shares, v->shares_len);
		v->shares = NULL;
		ring_buffer__free(v->rb);
		v->rb = NULL;
		verify_bpf__destroy(v->skel);
		v->skel = NULL;
		/* only causes that cannot change while we run are remembered */
		if (rc != -ENOMEM && rc != -EAGAIN)
			v->load_err = rc;
		snprintf(err, errlen, "%s", v->load_msg);
	} else {
		v->loaded = true;
	}
	pthread_mutex_unlock(&v->lock);
	return rc;
}

struct verifier *verifier_new(void (*settle)(void *arg, struct session *s), void *arg)
{
	struct verifier *v = calloc(1, sizeof(*v));
	if (v) {
		v->settle = settle;
		v->settle_arg = arg;
		pthread_mutex_init(&v->lock, NULL);
		pthread_mutex_init(&v->libbpf_lock, NULL);
	}
	return v;
}

/* ---- shares of the ring buffer ------------------------------------------------------------- */

/* The shares entry of uid's targets (LLGO_VERIFY_SHARE_NONE for root), referenced: the
 * uid's own while it has one, else a free one, else the last, which the uids beyond share. */
static uint32_t verify_share_get(struct verifier *v, uid_t uid)
{
	if (uid == 0)
		return LLGO_VERIFY_SHARE_NONE;
	uint32_t last = LLGO_VERIFY_SHARES - 1, pick = last;
	pthread_mutex_lock(&v->lock);
	for (uint32_t i = 1; i < last; i++) {
		if (v->share_refs[i] && v->share_uid[i] == uid) {
			pick = i;
			break;
		}
		if (!v->share_refs[i] && pick == last)
			pick = i;
	}
	v->share_uid[pick] = uid;
	v->share_refs[pick]++;
	pthread_mutex_unlock(&v->lock);
	return pick;
}

/* An entry given back is free for another uid at once: its counts go on (what the earlier
 * uid has in the buffer is read and given back to it). */
static void verify_share_put(struct verifier *v, uint32_t share)
{
	if (share == LLGO_VERIFY_SHARE_NONE || share >= LLGO_VERIFY_SHARES)
		return;
	pthread_mutex_lock(&v->lock);
	if (v->share_refs[share])
		v->share_refs[share]--;
	pthread_mutex_unlock(&v->lock);
}

/* ---- targets --------------------------------------------------------------------------------- */

static void verify_target_free(struct verify_target *t)
{
	if (!t)
		return;
	verify_share_put(t->v, t->share);
	verify_match_flush(t, 0, false);
	for (uint32_t i = 0; i < t->ndis; i++)
		free(t->dis[i]);
	free(t->ranges);
	unwind_free(t->copy_unwind);
	procmaps_free(t->copy_maps);
	pthread_mutex_destroy(&t->lock);
	session_put(t->s);
	free(t);
}

int verify_set_every(struct verifier *v, struct verify_target *t, uint32_t every)
{
	struct llgo_verify_target val;
	memset(&val, 0, sizeof(val));
	val.every = every ? every : 1;
	val.share = t->share;
	__u32 key = (__u32)t->pid;
	int rc = bpf_map_update_elem(bpf_map__fd(v->skel->maps.targets), &key, &val, BPF_ANY);
	if (rc)
		return -errno;
	t->every = val.every;
	return 0;
}

void verify_map_stats(struct verifier *v, struct verify_target *t,
			     struct llgo_verify_target *out)
{
	memset(out, 0, sizeof(*out));
	__u32 key = (__u32)t->pid;
	bpf_map_lookup_elem(bpf_map__fd(v->skel->maps.targets), &key, out);
}

/* A new target for s (not yet attached nor listed). */
struct verify_target *verify_target_new(struct verifier *v, struct session *s,
					       char *err, size_t errlen)
{
	struct verify_target *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->v = v;
	t->s = session_get(s);
	t->pid = s->pid;
	t->share = verify_share_get(v, s->uid);
	if (verify_find_probe(t) != 0) {
		snprintf(err, errlen, "the probe llgo_heap:sample is not in any file pid %d has "
				      "mapped (its libllgoheap is older than llgo-heap verify, or "
				      "its maps are unreadable)", (int)s->pid);
		verify_target_free(t);
		return NULL;
	}
	return t;
}

/* Attach t's link and publish t (targets map entry first, so no event is dropped). */
static int verify_target_attach(struct verifier *v, struct verify_target *t, uint32_t every,
				char *err, size_t errlen)
{
	int rc = verify_set_every(v, t, every);
	if (rc) {
		verify_explain(rc, "adding the process to the BPF map", err, errlen);
		return rc;
	}
	pthread_mutex_lock(&v->lock);
	t->next = v->targets;
	v->targets = t;
	pthread_mutex_unlock(&v->lock);
	LIBBPF_OPTS(bpf_usdt_opts, uo);
	pthread_mutex_lock(&v->libbpf_lock);
	t->link = bpf_program__attach_usdt(v->skel->progs.llgo_sample, t->pid, t->binary,
					   "llgo_heap", "sample", &uo);
	int aerr = errno;
	pthread_mutex_unlock(&v->libbpf_lock);
	errno = aerr;
	if (!t->link) {
		rc = -errno ? -errno : -EINVAL;
		if (rc == -ENOENT || rc == -ESRCH)
			snprintf(err, errlen, "attaching to pid %d's probe llgo_heap:sample in %s: %s",
				 (int)t->pid, t->binary, strerror(-rc));
		else
			verify_explain(rc, "attaching the uprobe", err, errlen);
		return rc;
	}
	return 0;
}

/* Unlist t and (unless another target of the pid took over) drop its map entry; the caller
 * frees it (after clearing s->verify). */
static void verify_target_detach(struct verifier *v, struct verify_target *t, bool map_entry)
{
	if (t->link) {
		verify_link_destroy(v, t->link);
		t->link = NULL;
	}
	pthread_mutex_lock(&v->lock);
	for (struct verify_target **pp = &v->targets; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	}
	pthread_mutex_unlock(&v->lock);
	__u32 key = (__u32)t->pid;
	if (v->skel && map_entry)
		bpf_map_delete_elem(bpf_map__fd(v->skel->maps.targets), &key);
}

/* Attach t, then hand it to the drain (s->verify). With settle (a one-off window), the
 * process is settled (v->settle) and drained in between without t: every record published before the link was live goes
 * there (the probe fires after its record is published), so each record t sees afterwards
 * had the program linked when its probe fired. On failure (or when s is verified already)
 * t is freed. */
int verify_target_publish(struct verifier *v, struct verify_target *t, uint32_t every,
			  bool settle, char *err, size_t errlen)
{
	struct session *s = t->s;
	pthread_mutex_lock(&s->drain_lock);
	bool busy = s->verify != NULL;
	pthread_mutex_unlock(&s->drain_lock);
	int rc = busy ? -EBUSY : verify_target_attach(v, t, every, err, errlen);
	if (!rc && settle) {
		if (v->settle)
			v->settle(v->settle_arg, s);
		drain_session(s);
	}
	if (!rc) {
		pthread_mutex_lock(&s->drain_lock);
		busy = s->verify != NULL;
		if (!busy)
			s->verify = t;
		pthread_mutex_unlock(&s->drain_lock);
		rc = busy ? -EBUSY : 0;
	}
	if (rc == -EBUSY)
		snprintf(err, errlen, "pid %d is being verified already", (int)s->pid);
	if (rc) {
		if (!busy)
			verify_target_detach(v, t, true);
		else if (t->link) /* lost a race with another verify of s: its map entry stays */
			verify_target_detach(v, t, false);
		verify_target_free(t);
	}
	return rc;
}

void verify_session_start(struct verifier *v, struct session *s, uint32_t every)
{
	char err[512];
	if (!v || verifier_load(v, err, sizeof(err)) != 0)
		return; /* logged once at start (server.c) */
	struct verify_target *t = verify_target_new(v, s, err, sizeof(err));
	if (!t) {
		log_warn("pid %d: --verify-every: %s", (int)s->pid, err);
		return;
	}
	t->cont_every = every;
	if (verify_target_publish(v, t, every, false, err, sizeof(err)) != 0)
		log_warn("pid %d: --verify-every: %s", (int)s->pid, err);
}

void verify_session_stop(struct verifier *v, struct session *s)
{
	if (!v)
		return;
	pthread_mutex_lock(&s->drain_lock);
	struct verify_target *t = s->verify;
	if (t) {
		/* a one-off verify uses t: it tears t down when its window closes */
		pthread_mutex_lock(&t->lock);
		bool window = t->window;
		t->stop_pending |= window;
		pthread_mutex_unlock(&t->lock);
		if (window) {
			pthread_mutex_unlock(&s->drain_lock);
			return;
		}
	}
	s->verify = NULL;
	pthread_mutex_unlock(&s->drain_lock);
	if (!t)
		return;
	verify_target_detach(v, t, true);
	verify_target_free(t);
}

/* The window of t closed: finish a teardown verify_session_stop left to us. */
void verify_stop_pending(struct verifier *v, struct verify_target *t)
{
	pthread_mutex_lock(&t->lock);
	bool stop = t->stop_pending;
	pthread_mutex_unlock(&t->lock);
	if (stop)
		verify_session_stop(v, t->s);
}

void verifier_cancel(struct verifier *v)
{
	if (v)
		atomic_store(&v->cancel, true);
}

void verifier_free(struct verifier *v)
{
	if (!v)
		return;
	if (v->reader_started) {
		atomic_store(&v->stop, true);
		pthread_join(v->reader, NULL);
	}
	for (;;) {
		pthread_mutex_lock(&v->lock);
		struct verify_target *t = v->targets;
		pthread_mutex_unlock(&v->lock);
		if (!t)
			break;
		verify_session_stop(v, t->s);
		pthread_mutex_lock(&v->lock);
		bool still = v->targets == t;
		pthread_mutex_unlock(&v->lock);
		if (still) { /* not s->verify (cannot happen): unlist it anyway */
			verify_target_detach(v, t, true);
			verify_target_free(t);
		}
	}
	if (v->shares)
		munmap(v->shares, v->shares_len);
	ring_buffer__free(v->rb);
	verify_bpf__destroy(v->skel);
	pthread_mutex_destroy(&v->lock);
	pthread_mutex_destroy(&v->libbpf_lock);
	free(v);
}

