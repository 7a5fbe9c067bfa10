// SPDX-License-Identifier: MIT
/*
 * verify.c: the eBPF cross-check of recorded stacks (`llgo-heap verify PID`,
 * `llgo-heapd --verify-every N`). The BPF program (verify.bpf.c, through its bpftool
 * skeleton) is attached with libbpf's bpf_program__attach_usdt to the shim's USDT probe
 * llgo_heap:sample (shim/probe.c) in one process; each hit whose record seq is a multiple of
 * the target's `every` sends the record's identity (ring id, seq) and the kernel's walk of
 * the user stack through a BPF ring buffer. One thread here reads that buffer; drain.c hands
 * over every record of a verified process (verify_note_record). Both halves meet in a table
 * keyed by (ring id, seq); a pair is compared as soon as it is complete.
 *
 * Comparison (frame-pointer mode, the only mode the shim records so far). The kernel's stack
 * starts at the probe site, inside the shim; its leading frames in the shim's own text are
 * dropped (the executable mappings of the file that holds the probe when that file is
 * libllgoheap.so; the shim's function names when the shim is linked into the program), then
 * leading frames in the real C++ operator new/new[] (plumbing the shim never records). The
 * rest must equal the record's frames one by one, and have the same length, except where
 * one side was cut by its depth limit (the record at LLGO_MAX_FRAMES, the kernel at its
 * buffer or kernel.perf_event_max_stack): then the shorter must be a prefix of the longer.
 *
 * Window. A one-off verify drains the process first, attaches, sleeps, detaches, settles
 * and drains again, and waits until the reader has seen everything the program sent. A
 * record with no capture is `outside` when its seq lies outside the range of seqs the kernel
 * captured on its ring (pushed before the attach took effect or after the detach), else
 * `record_unmatched`; a capture with no record (corrupt or lost in the ring) is
 * `kernel_unmatched`. Continuous targets expire halves that waited VERIFY_EXPIRE_NS.
 *
 * Not here: a DWARF mode. The shim has no DWARF unwinding on this branch (no ALLOC_RAW
 * records), so there is nothing to unwind twice; the report says so.
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
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "../shared/verify.h"
#include "verify.bpf.skel.h"
#include "verify.h"

#define VERIFY_BUCKETS 4096u
#define VERIFY_MAX_PENDING 65536u        /* halves waiting per target; more are counted lost */
#define VERIFY_EXPIRE_NS 5000000000ull   /* continuous mode: a half waits at most this long */
#define VERIFY_KEEP_DISAGREE 3u          /* disagreements kept for the report */
#define VERIFY_MAX_RANGES 16u
#define VERIFY_POLL_MS 50
#define VERIFY_PCACHE 1024u              /* symbolized addresses remembered per target */
/* One-off verifies at a time, daemon-wide: each holds a client worker for its duration, and
 * snapshots must keep the rest. */
#define VERIFY_MAX_RUNNING 2u

enum verify_side { VERIFY_KERNEL = 1, VERIFY_RECORD = 2 };

struct verify_entry {
	struct verify_entry *next;
	uint32_t ring_id;
	uint8_t side;
	uint64_t seq;
	uint64_t when_ns; /* CLOCK_MONOTONIC when it arrived */
	uint64_t size;
	uint32_t nframes;
	uint64_t frames[]; /* kernel: as captured; record: as recorded */
};

struct verify_disagree {
	uint32_t ring_id;
	uint64_t seq, size;
	uint32_t nk, nr; /* kernel frames after trimming, record frames */
	uint32_t trimmed;
	uint64_t k[LLGO_VERIFY_MAX_FRAMES];
	uint64_t r[LLGO_MAX_FRAMES];
};

/* Seqs seen on one ring during a window, per side; hi == 0: none. */
struct verify_seqrange {
	uint64_t klo, khi; /* kernel captures */
	uint64_t rlo, rhi; /* records */
};

struct verify_pcinfo {
	uint64_t at;
	uint8_t flags; /* VERIFY_PC_*; 0: empty */
};

struct verify_target {
	struct verify_target *next; /* verifier->targets, under verifier->lock */
	struct verifier *v;
	struct session *s; /* referenced */
	pid_t pid;
	struct bpf_link *link;
	_Atomic uint32_t every; /* in force in the targets map (drain.c reads it) */
	uint32_t cont_every; /* --verify-every's, 0 when only a one-off uses this target */
	char binary[4200];   /* the file that holds the probe, as attached */
	bool by_name;        /* the shim is linked into binary: trim by function names */
	size_t nranges;
	uint64_t lo[VERIFY_MAX_RANGES], hi[VERIFY_MAX_RANGES]; /* shim text when !by_name */

	pthread_mutex_t lock; /* everything below */
	struct verify_entry *table[VERIFY_BUCKETS];
	size_t pending;
	bool window;  /* a one-off verify is collecting */
	bool closing; /* its captures are all in: later records only count as outside */
	bool stop_pending; /* verify_session_stop came during the window */
	struct llgo_verify_summary win;
	struct verify_disagree *dis[VERIFY_KEEP_DISAGREE];
	uint32_t ndis;
	uint64_t overflow; /* halves not kept: VERIFY_MAX_PENDING reached */
	struct verify_seqrange *ranges;
	size_t nseqranges;
	struct verify_pcinfo pcache[VERIFY_PCACHE];
};

struct verifier {
	pthread_mutex_t lock;
	struct verify_bpf *skel;
	struct ring_buffer *rb;
	pthread_t reader;
	bool reader_started;
	_Atomic bool stop;
	_Atomic bool cancel; /* the daemon stops: windows close now */
	_Atomic unsigned running; /* one-off verifies in progress */
	_Atomic uint64_t polls; /* reader passes completed */
	struct verify_target *targets;
	uint32_t max_stack; /* frames the kernel's walk can return (buffer, sysctl) */
	int load_err;
	char load_msg[256];
	bool loaded;
};

static uint64_t verify_now(void)
{
	return session_now_ns(CLOCK_MONOTONIC);
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
	if (!found)
		return -ENOENT;
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
	return 0;
}

/* ---- comparison -------------------------------------------------------------------------- */

static bool verify_name_is_shim(const char *f)
{
	/* the shim's functions when it is linked into the program (libllgoheap.a) */
	static const char *const prefixes[] = { "probe_", "emit_", "sample_", "llgo_heap_sample",
						"stack_" };
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(prefixes); i++)
		if (strncmp(f, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

enum { VERIFY_PC_KNOWN = 1, VERIFY_PC_SHIM_NAME = 2, VERIFY_PC_CXX_NEW = 4 };

/* What the function holding address at is, by name: symbolized once per address (a small
 * direct-mapped cache per target: a busy process repeats a few call sites). Caller holds
 * t->lock. */
static uint8_t verify_pc_flags(struct verify_target *t, uint64_t at)
{
	struct verify_pcinfo *c = &t->pcache[(at ^ (at >> 12)) % VERIFY_PCACHE];
	if (c->flags && c->at == at)
		return c->flags;
	uint8_t flags = VERIFY_PC_KNOWN;
	const struct mapping *m;
	struct sym_result r;
	if (profile_frame(t->s->maps, at + 1, &m, &r) > 0) { /* profile_frame looks at pc - 1 */
		const char *f = r.frames[r.nframes - 1].function;
		if (f && verify_name_is_shim(f))
			flags |= VERIFY_PC_SHIM_NAME;
		if (f && (strncmp(f, "_Znwm", 5) == 0 || strncmp(f, "_Znam", 5) == 0 ||
			  strncmp(f, "operator new", 12) == 0))
			flags |= VERIFY_PC_CXX_NEW;
	}
	c->at = at;
	c->flags = flags;
	return flags;
}

static bool verify_is_shim(struct verify_target *t, uint64_t pc, bool first)
{
	/* frame 0 is the probe site itself, every other frame a return address */
	uint64_t at = first ? pc : pc - 1;
	if (!t->by_name) {
		for (size_t i = 0; i < t->nranges; i++)
			if (at >= t->lo[i] && at < t->hi[i])
				return true;
		return false;
	}
	return verify_pc_flags(t, at) & VERIFY_PC_SHIM_NAME;
}

static bool verify_is_cxx_new(struct verify_target *t, uint64_t pc)
{
	return verify_pc_flags(t, pc - 1) & VERIFY_PC_CXX_NEW;
}

/* Leading kernel frames that are not the program's: the shim's, then operator new's. */
static uint32_t verify_trim(struct verify_target *t, const uint64_t *k, uint32_t nk)
{
	uint32_t i = 0;
	while (i < nk && verify_is_shim(t, k[i], i == 0))
		i++;
	while (i < nk && verify_is_cxx_new(t, k[i]))
		i++;
	return i;
}

/* Caller holds t->lock. */
static void verify_compare(struct verify_target *t, const struct verify_entry *ke,
			   const struct verify_entry *re)
{
	uint32_t skip = verify_trim(t, ke->frames, ke->nframes);
	const uint64_t *k = ke->frames + skip;
	uint32_t nk = ke->nframes - skip, nr = re->nframes;
	if (nk == 0 && nr > 0) {
		/* The kernel's walk ended inside the shim or the allocator: frameless code (e.g.
		 * libstdc++'s aligned operator new, which uses rbp as a plain register) broke the
		 * chain the shim bridges with its own frame. Nothing to compare. */
		if (t->window)
			t->win.incomparable++;
		return;
	}
	uint32_t n = nk < nr ? nk : nr;
	bool same = memcmp(k, re->frames, 8u * n) == 0;
	if (same && nk != nr) {
		/* a longer side is fine only when the shorter one was cut by its depth limit */
		bool kernel_cut = ke->nframes >= t->v->max_stack;
		same = (nr < nk && nr == LLGO_MAX_FRAMES) || (nk < nr && kernel_cut);
	}
	uint64_t agree = same ? 1 : 0;
	atomic_fetch_add(&t->s->verify_samples, 1);
	atomic_fetch_add(&t->s->verify_agree, agree);
	if (!t->window)
		return;
	t->win.samples++;
	t->win.agree += agree;
	if (same || t->ndis >= VERIFY_KEEP_DISAGREE)
		return;
	struct verify_disagree *d = calloc(1, sizeof(*d));
	if (!d)
		return;
	d->ring_id = re->ring_id;
	d->seq = re->seq;
	d->size = re->size;
	d->nk = nk;
	d->nr = nr;
	d->trimmed = skip;
	memcpy(d->k, k, 8u * nk);
	memcpy(d->r, re->frames, 8u * nr);
	t->dis[t->ndis++] = d;
}

/* ---- the pairing table -------------------------------------------------------------------- */

static size_t verify_bucket(uint32_t ring_id, uint64_t seq)
{
	uint64_t h = (seq * 0x9e3779b97f4a7c15ULL) ^ ((uint64_t)ring_id * 0xc2b2ae3d27d4eb4fULL);
	return (size_t)(h >> 40) % VERIFY_BUCKETS;
}

static void verify_note_range(struct verify_target *t, uint32_t ring_id, uint64_t seq,
			      uint8_t side)
{
	if (ring_id >= LLGO_MAX_RINGS)
		return;
	if (ring_id >= t->nseqranges) {
		size_t n = t->nseqranges ? t->nseqranges : 16;
		while (n <= ring_id)
			n *= 2;
		struct verify_seqrange *r = realloc(t->ranges, n * sizeof(*r));
		if (!r)
			return;
		memset(r + t->nseqranges, 0, (n - t->nseqranges) * sizeof(*r));
		t->ranges = r;
		t->nseqranges = n;
	}
	struct verify_seqrange *r = &t->ranges[ring_id];
	uint64_t *lo = side == VERIFY_KERNEL ? &r->klo : &r->rlo;
	uint64_t *hi = side == VERIFY_KERNEL ? &r->khi : &r->rhi;
	if (*hi == 0 || seq < *lo)
		*lo = seq;
	if (seq > *hi)
		*hi = seq;
}

/* Pair e with its other half, or keep it waiting. Takes e. Caller holds t->lock. */
static void verify_offer(struct verify_target *t, struct verify_entry *e)
{
	size_t b = verify_bucket(e->ring_id, e->seq);
	for (struct verify_entry **pp = &t->table[b]; *pp; pp = &(*pp)->next) {
		struct verify_entry *o = *pp;
		if (o->ring_id != e->ring_id || o->seq != e->seq)
			continue;
		if (o->side == e->side) {
			/* a replayed seq (a hostile or restarted ring): keep the first */
			free(e);
			return;
		}
		*pp = o->next;
		t->pending--;
		if (e->side == VERIFY_KERNEL)
			verify_compare(t, e, o);
		else
			verify_compare(t, o, e);
		free(o);
		free(e);
		return;
	}
	if (t->pending >= VERIFY_MAX_PENDING) {
		/* Full: a record past its ring's last capture is one pushed after the capture
		 * window (the uprobe is slow to go away); anything else is lost for the count. */
		const struct verify_seqrange *r =
			e->ring_id < t->nseqranges ? &t->ranges[e->ring_id] : NULL;
		if (e->side == VERIFY_RECORD && r && e->seq > r->khi) {
			if (t->window)
				t->win.outside++;
		} else {
			t->overflow++;
		}
		free(e);
		return;
	}
	e->next = t->table[b];
	t->table[b] = e;
	t->pending++;
}

static struct verify_entry *verify_entry_new(uint32_t ring_id, uint64_t seq, uint8_t side,
					     uint64_t size, const uint64_t *frames, uint32_t n)
{
	struct verify_entry *e = malloc(sizeof(*e) + 8u * n);
	if (!e)
		return NULL;
	e->next = NULL;
	e->ring_id = ring_id;
	e->seq = seq;
	e->side = side;
	e->size = size;
	e->when_ns = verify_now();
	e->nframes = n;
	memcpy(e->frames, frames, 8u * n);
	return e;
}

void verify_note_record(struct verify_target *t, uint32_t ring_id, const struct llgo_record *rec,
			const uint64_t *frames)
{
	uint32_t every = atomic_load_explicit(&t->every, memory_order_relaxed);
	if (every > 1 && rec->seq % every != 0)
		return;
	uint32_t n = rec->nframes <= LLGO_MAX_FRAMES ? rec->nframes : LLGO_MAX_FRAMES;
	struct verify_entry *e = verify_entry_new(ring_id, rec->seq, VERIFY_RECORD, rec->size,
						  frames, n);
	pthread_mutex_lock(&t->lock);
	/* Once the window has closed (the link is gone and the reader has read every capture),
	 * a record after its ring's last capture was pushed after the window. */
	const struct verify_seqrange *r = ring_id < t->nseqranges ? &t->ranges[ring_id] : NULL;
	if (t->closing && (!r || !r->khi || rec->seq > r->khi)) {
		if (t->window)
			t->win.outside++;
		pthread_mutex_unlock(&t->lock);
		free(e);
		return;
	}
	verify_note_range(t, ring_id, rec->seq, VERIFY_RECORD);
	if (e)
		verify_offer(t, e);
	else
		t->overflow++;
	pthread_mutex_unlock(&t->lock);
}

/* Drop what waits; count it when a window is open (final: the window closes). Caller holds
 * t->lock. older_than == 0: everything. */
static void verify_flush(struct verify_target *t, uint64_t older_than, bool count)
{
	for (size_t b = 0; b < VERIFY_BUCKETS; b++) {
		for (struct verify_entry **pp = &t->table[b]; *pp;) {
			struct verify_entry *e = *pp;
			if (older_than && e->when_ns >= older_than) {
				pp = &e->next;
				continue;
			}
			*pp = e->next;
			t->pending--;
			if (count) {
				/* inside the window when the other side saw seqs on both sides
				 * of this one on the same ring */
				const struct verify_seqrange *r =
					e->ring_id < t->nseqranges ? &t->ranges[e->ring_id] : NULL;
				bool k = e->side == VERIFY_KERNEL;
				uint64_t lo = r ? (k ? r->rlo : r->klo) : 0;
				uint64_t hi = r ? (k ? r->rhi : r->khi) : 0;
				if (!hi || e->seq < lo || e->seq > hi)
					t->win.outside++;
				else if (k)
					t->win.kernel_unmatched++;
				else
					t->win.record_unmatched++;
			}
			free(e);
		}
	}
}

/* ---- the ring buffer reader ------------------------------------------------------------------ */

static int verify_on_event(void *ctx, void *data, size_t len)
{
	struct verifier *v = ctx;
	/* the header, then only the frames the kernel found (verify.bpf.c) */
	struct llgo_verify_event ev;
	const size_t head = offsetof(struct llgo_verify_event, frames);
	if (len < head)
		return 0;
	if (len > sizeof(ev))
		len = sizeof(ev);
	memset(&ev, 0, sizeof(ev));
	memcpy(&ev, data, len);
	pthread_mutex_lock(&v->lock);
	struct verify_target *t = v->targets;
	while (t && t->pid != (pid_t)ev.tgid)
		t = t->next;
	if (!t) {
		pthread_mutex_unlock(&v->lock);
		return 0;
	}
	pthread_mutex_lock(&t->lock);
	if (ev.stack_len < 0) {
		if (t->window)
			t->win.kernel_errors++;
	} else {
		uint32_t n = (uint32_t)ev.stack_len / 8u;
		if (n > (len - head) / 8u)
			n = (uint32_t)((len - head) / 8u);
		verify_note_range(t, ev.ring_id, ev.seq, VERIFY_KERNEL);
		struct verify_entry *e = verify_entry_new(ev.ring_id, ev.seq, VERIFY_KERNEL, ev.size,
							  (const uint64_t *)(const void *)ev.frames, n);
		if (e)
			verify_offer(t, e);
		else
			t->overflow++;
	}
	pthread_mutex_unlock(&t->lock);
	pthread_mutex_unlock(&v->lock);
	return 0;
}

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
				verify_flush(t, now - VERIFY_EXPIRE_NS, false);
			pthread_mutex_unlock(&t->lock);
		}
		pthread_mutex_unlock(&v->lock);
	}
	return NULL;
}

/* Wait until the reader completed two passes: everything submitted before the call is read. */
static void verify_reader_sync(struct verifier *v)
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

static void verify_explain(int rc, const char *step, char *err, size_t errlen)
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
		v->rb = ring_buffer__new(bpf_map__fd(v->skel->maps.events), verify_on_event, v, NULL);
		if (!v->rb) {
			rc = -errno ? -errno : -EINVAL;
			verify_explain(rc, "opening the BPF ring buffer", v->load_msg,
				       sizeof(v->load_msg));
		}
	}
	if (!rc) {
		rc = -pthread_create(&v->reader, NULL, verify_reader, v);
		if (rc)
			snprintf(v->load_msg, sizeof(v->load_msg), "verify: thread: %s",
				 strerror(-rc));
		v->reader_started = rc == 0;
	}
	long ms = 0;
	v->max_stack = LLGO_VERIFY_MAX_FRAMES;
	if (verify_read_int("/proc/sys/kernel/perf_event_max_stack", &ms) == 0 && ms > 0 &&
	    ms < LLGO_VERIFY_MAX_FRAMES)
		v->max_stack = (uint32_t)ms;
	if (rc) {
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

struct verifier *verifier_new(void)
{
	struct verifier *v = calloc(1, sizeof(*v));
	if (v)
		pthread_mutex_init(&v->lock, NULL);
	return v;
}

/* ---- targets --------------------------------------------------------------------------------- */

static void verify_target_free(struct verify_target *t)
{
	if (!t)
		return;
	verify_flush(t, 0, false);
	for (uint32_t i = 0; i < t->ndis; i++)
		free(t->dis[i]);
	free(t->ranges);
	pthread_mutex_destroy(&t->lock);
	session_put(t->s);
	free(t);
}

static int verify_set_every(struct verifier *v, struct verify_target *t, uint32_t every)
{
	struct llgo_verify_target val;
	memset(&val, 0, sizeof(val));
	val.every = every ? every : 1;
	__u32 key = (__u32)t->pid;
	int rc = bpf_map_update_elem(bpf_map__fd(v->skel->maps.targets), &key, &val, BPF_ANY);
	if (rc)
		return -errno;
	t->every = val.every;
	return 0;
}

static void verify_map_stats(struct verifier *v, struct verify_target *t,
			     struct llgo_verify_target *out)
{
	memset(out, 0, sizeof(*out));
	__u32 key = (__u32)t->pid;
	bpf_map_lookup_elem(bpf_map__fd(v->skel->maps.targets), &key, out);
}

/* A new target for s (not yet attached nor listed). */
static struct verify_target *verify_target_new(struct verifier *v, struct session *s,
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
	t->link = bpf_program__attach_usdt(v->skel->progs.llgo_sample, t->pid, t->binary,
					   "llgo_heap", "sample", &uo);
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
		bpf_link__destroy(t->link);
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

/* Attach t, then hand it to the drain (s->verify). With srv (a one-off window), the process
 * is drained in between without t: every record published before the link was live goes
 * there (the probe fires after its record is published), so each record t sees afterwards
 * had the program linked when its probe fired. On failure (or when s is verified already)
 * t is freed. */
static int verify_target_publish(struct verifier *v, struct verify_target *t, uint32_t every,
				 struct server *srv, char *err, size_t errlen)
{
	struct session *s = t->s;
	pthread_mutex_lock(&s->drain_lock);
	bool busy = s->verify != NULL;
	pthread_mutex_unlock(&s->drain_lock);
	int rc = busy ? -EBUSY : verify_target_attach(v, t, every, err, errlen);
	if (!rc && srv) {
		server_settle(srv, s);
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
	if (verify_target_publish(v, t, every, NULL, err, sizeof(err)) != 0)
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
static void verify_stop_pending(struct verifier *v, struct verify_target *t)
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
	ring_buffer__free(v->rb);
	verify_bpf__destroy(v->skel);
	pthread_mutex_destroy(&v->lock);
	free(v);
}

/* ---- the one-off verify ----------------------------------------------------------------------- */

/* "function+0xoff" for the return address pc, else "file+0xoff" or the address. */
static void verify_frame_name(struct procmaps *maps, uint64_t pc, char *out, size_t n)
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

static void verify_report_disagree(struct buf *b, struct procmaps *maps,
				   const struct verify_disagree *d, unsigned idx)
{
	buf_printf(b, "disagreement %u: ring %u seq %llu size %llu: kernel %u frames (after "
		      "trimming %u shim frames), shim %u frames\n",
		   idx, d->ring_id, (unsigned long long)d->seq, (unsigned long long)d->size, d->nk,
		   d->trimmed, d->nr);
	uint32_t n = d->nk > d->nr ? d->nk : d->nr;
	if (n > 16)
		n = 16;
	buf_printf(b, "  %-3s %-46s %s\n", "#", "kernel", "shim");
	for (uint32_t i = 0; i < n; i++) {
		char kn[160] = "-", rn[160] = "-", kc[200], rc[200];
		if (i < d->nk) {
			verify_frame_name(maps, d->k[i], kn, sizeof(kn));
			snprintf(kc, sizeof(kc), "0x%llx %s", (unsigned long long)d->k[i], kn);
		} else {
			snprintf(kc, sizeof(kc), "-");
		}
		if (i < d->nr) {
			verify_frame_name(maps, d->r[i], rn, sizeof(rn));
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

static bool verify_sleep(struct verifier *v, struct session *s, uint32_t seconds)
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

static int verify_run_locked(struct verifier *v, struct server *srv, struct session *s,
			     uint32_t seconds, struct llgo_verify_summary *sum, struct buf *text,
			     char *err, size_t errlen);

int verify_run(struct verifier *v, struct server *srv, struct session *s, uint32_t seconds,
	       struct llgo_verify_summary *sum, struct buf *text, char *err, size_t errlen)
{
	memset(sum, 0, sizeof(*sum));
	if (atomic_fetch_add(&v->running, 1) >= VERIFY_MAX_RUNNING) {
		atomic_fetch_sub(&v->running, 1);
		snprintf(err, errlen, "%u verifies are running already; try again when one ends",
			 VERIFY_MAX_RUNNING);
		return -EBUSY;
	}
	int rc = verify_run_locked(v, srv, s, seconds, sum, text, err, errlen);
	atomic_fetch_sub(&v->running, 1);
	return rc;
}

static int verify_run_locked(struct verifier *v, struct server *srv, struct session *s,
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
		rc = verify_target_publish(v, t, 1, srv, err, errlen);
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
		server_settle(srv, s);
		drain_session(s);
		pthread_mutex_lock(&t->lock);
		verify_flush(t, 0, false);
		memset(&t->win, 0, sizeof(t->win));
		free(t->ranges);
		t->ranges = NULL;
		t->nseqranges = 0;
		pthread_mutex_unlock(&t->lock);
	}
	struct llgo_verify_target before;
	verify_map_stats(v, t, &before);

	bool alive = verify_sleep(v, s, seconds);

	/* Close the window: no new captures, then every record and capture sent so far. */
	struct llgo_verify_target after;
	verify_map_stats(v, t, &after);
	if (own) {
		bpf_link__destroy(t->link);
		t->link = NULL;
	} else {
		verify_set_every(v, t, t->cont_every);
	}
	verify_reader_sync(v);
	pthread_mutex_lock(&t->lock);
	t->closing = true;
	pthread_mutex_unlock(&t->lock);
	if (alive) {
		server_settle(srv, s);
		drain_session(s);
	}

	pthread_mutex_lock(&t->lock);
	verify_flush(t, 0, true);
	*sum = t->win;
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
	buf_printf(text, "frame-pointer mode: %llu samples matched, %llu agree, %llu disagree; "
			 "unmatched: %llu kernel captures without a record, %llu records without "
			 "a kernel capture; %llu records outside the capture window\n",
		   (unsigned long long)sum->samples, (unsigned long long)sum->agree,
		   (unsigned long long)(sum->samples - sum->agree),
		   (unsigned long long)sum->kernel_unmatched,
		   (unsigned long long)sum->record_unmatched, (unsigned long long)sum->outside);
	if (sum->incomparable)
		buf_printf(text, "not compared: %llu samples whose kernel stack ends inside the shim "
				 "or the allocator (frameless code there broke the kernel's "
				 "frame-pointer walk)\n", (unsigned long long)sum->incomparable);
	buf_printf(text, "kernel: %llu probe hits, %llu captures lost (BPF ring buffer full), "
			 "%llu unreadable stacks%s\n",
		   (unsigned long long)sum->hits, (unsigned long long)sum->lost,
		   (unsigned long long)sum->kernel_errors,
		   overflow ? "; some halves were not kept (pending table full)" : "");
	buf_puts(text, "dwarf mode: not available (this shim records frame-pointer stacks only; "
		       "no sample was unwound with DWARF)\n");
	for (uint32_t i = 0; i < ndis; i++) {
		verify_report_disagree(text, s->maps, dis[i], i + 1);
		free(dis[i]);
	}
	if (own)
		verify_session_stop(v, s);
	else
		verify_stop_pending(v, t);
	return text->failed ? -ENOMEM : 0;
}
