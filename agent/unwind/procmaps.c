// SPDX-License-Identifier: MIT
/*
 * procmaps.c: the executable mappings of a process, each tied to the symfile that
 * symbolizes it.
 *
 * procmaps_new() reads /proc/PID/maps and keeps every executable mapping backed by a file
 * (" (deleted)" trimmed from the path), plus the kernel's [vdso]/[vsyscall] as mappings
 * without a file; anonymous executable memory is skipped. Each file is opened through
 * /proc/PID/map_files/START-END when the kernel lets us (that link reaches the very inode
 * mapped, even when it was deleted or replaced), else through /proc/PID/root/PATH (the
 * process's own mount namespace) if that is the inode mapped; never through PATH in the
 * daemon's namespace, which may name another file (another container's, another user's). Its GNU build ID is
 * read (libelf reads the note headers; the one parse of a user's file left in the daemon
 * besides the unwinder's, docs/design.md), and the symfile comes from symfile_get()'s cache,
 * for the uid whose helper will parse it.
 *
 * procmaps_refresh() re-reads the maps, e.g. after dlopen: mappings already known are
 * kept (same range, offset, inode and path), new ones are opened, and a known mapping
 * that a new one overlaps leaves the lookup table. A known mapping that is no longer listed
 * but that nothing overlaps (a library unloaded since) stays, so that samples taken while it
 * was mapped still resolve; at most PROCMAPS_STALE_MAX of those are kept, the longest unlisted
 * leaving first (counted: procmaps_stats).
 *
 * Threads: lookups are lock-free. The table of mappings is an immutable array published
 * with a store-release (refresh) and read with a load-acquire (find, list). Readers that may
 * run while another thread refreshes (snapshot writers, verify) bracket their use with
 * procmaps_read_begin/_end; a replaced array, and the mappings that left with it, are freed
 * once no reader that could have seen them remains (an epoch scheme with two reader counts,
 * below), so memory stays proportional to what is mapped however often a process maps and
 * unmaps code. Code under the session's drain lock needs no bracket: refreshes run only there,
 * and nothing there keeps a mapping across a refresh. Refreshes are serialized by a mutex.
 *
 * Left to others: symbolization (symbolize.c); deciding when to refresh (the session).
 */
#include <elfutils/libdwelf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../internal.h"

/* Mappings no longer listed by the kernel but kept for earlier samples, at most. */
#define PROCMAPS_STALE_MAX 4096

/* A mapping and procmaps.c's bookkeeping of it. */
struct pmapping {
	struct mapping pub;     /* what callers see; first, so the two pointers convert */
	uint64_t listed;        /* the last refresh generation whose maps listed it */
	struct pmapping *next;  /* on its retired array's leaving list */
};

struct maparray {
	/* Retired arrays, newest first, each with the mappings that left the table when it
	 * was replaced; freed once no reader that entered at or before its epoch remains. */
	struct maparray *retired;
	uint64_t retired_epoch;
	struct pmapping *leaving;
	uint64_t version; /* 1 for the first array, +1 for each that replaced another */
	size_t n;
	const struct mapping *v[]; /* sorted by start, non-overlapping */
};

/*
 * Reclamation. A reader enters at the current epoch E and counts itself in readers[E & 1];
 * an array retired while the epoch was X (with its leaving mappings) is reachable only by
 * readers that entered at X or earlier: later ones load `current` after the array was
 * replaced. A refresh advances the epoch from E to E + 1 only when readers[(E + 1) & 1] is
 * zero, that is when every reader that entered at E - 1 or earlier has left; so with the
 * epoch at E, whatever was retired at E - 2 or earlier is unreachable and is freed. All
 * epoch and reader-count operations are sequentially consistent: a reader's increment and
 * its re-read of the epoch pair with the refresh's check of the count and its advance.
 */
struct procmaps {
	pid_t pid;
	uid_t uid; /* whose helper symbolizes its files */
	pthread_mutex_t lock;             /* serializes refreshes; guards retired and stats */
	struct maparray *_Atomic current; /* release in refresh, acquire in lookups */
	_Atomic uint64_t epoch;
	_Atomic unsigned long readers[2];
	uint64_t generation; /* refreshes done; under lock */
	struct procmaps_stats stats;
};

static pthread_once_t elf_once = PTHREAD_ONCE_INIT;

static void procmaps_elf_init(void)
{
	elf_version(EV_CURRENT);
}

/* One parsed line of /proc/PID/maps. */
struct maps_line {
	uint64_t start, end, offset, inode;
	uint32_t dev_major, dev_minor;
	char perms[5];
	char *path; /* points into the line; trimmed */
	bool deleted;
};

static bool maps_parse(char *line, struct maps_line *out)
{
	int pos = 0;
	unsigned maj, min;
	memset(out, 0, sizeof(*out));
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 "%n",
		   &out->start, &out->end, out->perms, &out->offset, &maj, &min, &out->inode,
		   &pos) != 7 ||
	    out->end <= out->start)
		return false;
	out->dev_major = maj;
	out->dev_minor = min;
	char *p = line + pos;
	while (*p == ' ' || *p == '\t')
		p++;
	size_t len = strcspn(p, "\n");
	p[len] = '\0';
	static const char deleted[] = " (deleted)";
	size_t dl = sizeof(deleted) - 1;
	if (len >= dl && strcmp(p + len - dl, deleted) == 0) {
		p[len - dl] = '\0';
		out->deleted = true;
	}
	out->path = p;
	return true;
}

/* GNU build ID of the ELF file behind fd, as lowercase hex ("" when none). */
static void read_build_id(int fd, char *out, size_t cap)
{
	out[0] = '\0';
	Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf)
		return;
	const void *id;
	ssize_t n = elf_kind(elf) == ELF_K_ELF ? dwelf_elf_gnu_build_id(elf, &id) : -1;
	if (n > 0 && (size_t)n * 2 < cap) {
		const unsigned char *b = id;
		for (ssize_t i = 0; i < n; i++)
			snprintf(out + 2 * i, 3, "%02x", b[i]);
	}
	elf_end(elf);
}

static int open_mapped_file(pid_t pid, const struct maps_line *l)
{
	char p[4200];
	snprintf(p, sizeof(p), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, l->start,
		 l->end);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 || l->deleted || l->path[0] != '/')
		return fd;
	snprintf(p, sizeof(p), "/proc/%d/root%s", (int)pid, l->path);
	fd = open(p, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != l->inode ||
			major(st.st_dev) != l->dev_major || minor(st.st_dev) != l->dev_minor)) {
		close(fd); /* replaced since it was mapped: not the file the process runs */
		fd = -1;
	}
	return fd;
}

static bool same_mapping(const struct mapping *m, const struct maps_line *l)
{
	return m->start == l->start && m->end == l->end && m->offset == l->offset &&
	       m->inode == l->inode && m->dev_major == l->dev_major &&
	       m->dev_minor == l->dev_minor && strcmp(m->path, l->path) == 0;
}

static void mapping_free(struct pmapping *pmm)
{
	if (!pmm)
		return;
	symfile_put(pmm->pub.file);
	free(pmm->pub.path);
	free(pmm);
}

/* The same file of the same process in the table (or in the first n of the array being
 * built), so that its symfile is shared rather than the path opened again: in the daemon's
 * namespace the path may name another file. */
static const struct mapping *procmaps_same_file(const struct maparray *a, size_t n,
						const struct maps_line *l)
{
	for (size_t i = 0; a && i < n; i++) {
		const struct mapping *o = a->v[i];
		if (o->file && o->build_id[0] && o->inode == l->inode &&
		    o->dev_major == l->dev_major && o->dev_minor == l->dev_minor &&
		    strcmp(o->path, l->path) == 0)
			return o;
	}
	return NULL;
}

/* A new mapping for l; the file is shared with a known mapping of the same inode. */
static struct pmapping *mapping_new(const struct maparray *old, const struct maparray *na,
				    pid_t pid, uid_t uid, const struct maps_line *l)
{
	struct pmapping *pmm = calloc(1, sizeof(*pmm));
	if (!pmm)
		return NULL;
	struct mapping *m = &pmm->pub;
	m->start = l->start;
	m->end = l->end;
	m->offset = l->offset;
	m->inode = l->inode;
	m->dev_major = l->dev_major;
	m->dev_minor = l->dev_minor;
	memcpy(m->perms, l->perms, sizeof(m->perms));
	m->path = strdup(l->path);
	if (!m->path) {
		free(pmm);
		return NULL;
	}
	if (l->inode == 0)
		return pmm; /* [vdso] and friends: no file to read */
	const struct mapping *o = procmaps_same_file(na, na->n, l);
	if (!o)
		o = procmaps_same_file(old, old ? old->n : 0, l);
	if (o) {
		memcpy(m->build_id, o->build_id, sizeof(m->build_id));
		m->file = symfile_ref(o->file);
		return pmm;
	}
	int fd = open_mapped_file(pid, l);
	if (fd < 0)
		return pmm;
	read_build_id(fd, m->build_id, sizeof(m->build_id));
	m->file = symfile_get(m->path, fd, m->build_id, uid);
	close(fd);
	return pmm;
}

static int map_cmp(const void *x, const void *y)
{
	const struct mapping *a = *(const struct mapping *const *)x;
	const struct mapping *b = *(const struct mapping *const *)y;
	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	return 0;
}

/*
 * A program run by QEMU's user-mode emulator (qemu-aarch64 PROG, docs/targets.md): the
 * guest's ELF files are mapped at the guest's own addresses (guest_base is 0 for a 64-bit
 * guest on a 64-bit host), but without PROT_EXEC on the host, since QEMU translates the code
 * instead of running it. For such a process every readable file mapping is kept, so that
 * the guest's return addresses find their files.
 */
static bool procmaps_emulated(pid_t pid)
{
	char p[64], exe[4096];
	snprintf(p, sizeof(p), "/proc/%d/exe", (int)pid);
	ssize_t n = readlink(p, exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = '\0';
	const char *base = strrchr(exe, '/');
	return strncmp(base ? base + 1 : exe, "qemu-", 5) == 0;
}

static bool keep_line(const struct maps_line *l, bool emulated)
{
	bool code = strchr(l->perms, 'x') != NULL ||
		    (emulated && l->perms[0] == 'r' && l->inode != 0);
	if (!code || l->path[0] == '\0')
		return false;
	if (l->inode == 0)
		return l->path[0] == '['; /* [vdso], [vsyscall] */
	return true;
}

static char *read_maps(pid_t pid, size_t *len)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(p, "re");
	if (!f)
		return NULL;
	struct buf b;
	buf_init(&b);
	char chunk[8192];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		buf_append(&b, chunk, n);
	bool err = ferror(f);
	fclose(f);
	if (err || buf_putc(&b, '\0') != 0) {
		buf_free(&b);
		errno = err ? EIO : ENOMEM;
		return NULL;
	}
	*len = b.len - 1;
	return (char *)b.data;
}

/* Index of the first mapping of a (sorted by start, disjoint) whose end is above addr;
 * a->n when none (or a is NULL). */
static size_t procmaps_first_ending_after(const struct maparray *a, uint64_t addr)
{
	if (!a)
		return 0;
	size_t lo = 0, hi = a->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->v[mid]->end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void maparray_free(struct maparray *a)
{
	while (a->leaving) {
		struct pmapping *next = a->leaving->next;
		mapping_free(a->leaving);
		a->leaving = next;
	}
	free(a);
}

static int pmapping_listed_cmp(const void *x, const void *y)
{
	const struct pmapping *a = *(struct pmapping *const *)x;
	const struct pmapping *b = *(struct pmapping *const *)y;
	return a->listed > b->listed ? -1 : a->listed < b->listed;
}

/*
 * The known mappings of old that stay in na although /proc no longer lists them (nothing
 * listed overlaps them): appended to na, at most PROCMAPS_STALE_MAX, the most recently
 * listed first. The rest go on *leaving. na->v[0..fresh) are the listed ones, in /proc's
 * (address) order.
 */
static int procmaps_keep_stale(struct procmaps *pm, const struct maparray *old,
			       struct maparray *na, size_t fresh, struct pmapping **leaving)
{
	struct pmapping **stale = malloc((old->n ? old->n : 1) * sizeof(*stale));
	struct maparray *frp = malloc(sizeof(*frp) + (fresh ? fresh : 1) * sizeof(frp->v[0]));
	if (!stale || !frp) {
		free(stale);
		free(frp);
		return -ENOMEM;
	}
	frp->n = fresh;
	memcpy(frp->v, na->v, fresh * sizeof(na->v[0]));
	qsort(frp->v, fresh, sizeof(frp->v[0]), map_cmp);
	size_t nstale = 0;
	for (size_t i = 0; i < old->n; i++) {
		struct pmapping *o = (struct pmapping *)old->v[i];
		if (o->listed == pm->generation)
			continue; /* listed now: already in na */
		/* the first fresh mapping ending after o starts overlaps o if it starts
		 * before o ends (fresh mappings are disjoint and sorted) */
		size_t j = procmaps_first_ending_after(frp, o->pub.start);
		if (j < fresh && frp->v[j]->start < o->pub.end) {
			o->next = *leaving;
			*leaving = o;
		} else {
			stale[nstale++] = o;
		}
	}
	free(frp);
	if (nstale > PROCMAPS_STALE_MAX) {
		qsort(stale, nstale, sizeof(stale[0]), pmapping_listed_cmp);
		for (size_t i = PROCMAPS_STALE_MAX; i < nstale; i++) {
			stale[i]->next = *leaving;
			*leaving = stale[i];
		}
		pm->stats.stale_dropped += nstale - PROCMAPS_STALE_MAX;
		nstale = PROCMAPS_STALE_MAX;
	}
	for (size_t i = 0; i < nstale; i++)
		na->v[na->n++] = &stale[i]->pub;
	free(stale);
	return 0;
}

/* Free the retired arrays no reader can reach (see "Reclamation"), after advancing the
 * epoch if the readers of the epoch before the current one have all left. Under pm->lock. */
static void procmaps_reclaim(struct procmaps *pm, struct maparray *head)
{
	uint64_t e = atomic_load(&pm->epoch);
	if (atomic_load(&pm->readers[(e + 1) & 1]) == 0) {
		atomic_store(&pm->epoch, e + 1);
		e++;
	}
	struct maparray **link = &head->retired;
	while (*link && (*link)->retired_epoch + 2 > e)
		link = &(*link)->retired;
	struct maparray *dead = *link;
	*link = NULL;
	while (dead) {
		struct maparray *next = dead->retired;
		maparray_free(dead);
		dead = next;
	}
}

/* Whether a and b hold the same mappings (same order). */
static bool maparray_same(const struct maparray *a, const struct maparray *b)
{
	if (!a || a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i] != b->v[i])
			return false;
	return true;
}

int procmaps_refresh(struct procmaps *pm, pid_t pid)
{
	pthread_once(&elf_once, procmaps_elf_init);
	bool emulated = procmaps_emulated(pid);
	size_t len;
	char *text = read_maps(pid, &len);
	if (!text)
		return -errno;
	pthread_mutex_lock(&pm->lock);
	struct maparray *old = atomic_load_explicit(&pm->current, memory_order_relaxed);
	size_t nlines = 0;
	for (char *c = text; *c; c++)
		nlines += *c == '\n';
	size_t cap = nlines + 1 + (old ? old->n : 0);
	struct maparray *na = calloc(1, sizeof(*na) + cap * sizeof(na->v[0]));
	struct pmapping *created = NULL; /* freed again if the refresh fails */
	struct pmapping *leaving = NULL;
	int err = 0;
	if (!na) {
		err = -ENOMEM;
		goto out;
	}
	pm->generation++;
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		struct maps_line l;
		if (maps_parse(line, &l) && keep_line(&l, emulated) && na->n < cap) {
			/* old is sorted by start, its mappings disjoint: a binary search, so
			 * that a process with tens of thousands of mappings costs n log n per
			 * refresh, not n^2 */
			struct pmapping *m = NULL;
			size_t i = procmaps_first_ending_after(old, l.start);
			if (old && i < old->n && old->v[i]->start == l.start &&
			    same_mapping(old->v[i], &l))
				m = (struct pmapping *)old->v[i];
			if (!m) {
				if (!(m = mapping_new(old, na, pid, pm->uid, &l))) {
					err = -ENOMEM;
					break;
				}
				m->next = created;
				created = m;
			}
			m->listed = pm->generation;
			na->v[na->n++] = &m->pub;
		}
		line = nl ? nl + 1 : NULL;
	}
	if (!err && old)
		err = procmaps_keep_stale(pm, old, na, na->n, &leaving);
	if (err) {
		while (created) {
			struct pmapping *next = created->next;
			mapping_free(created);
			created = next;
		}
		free(na);
		goto out;
	}
	if (na->n > 1)
		qsort(na->v, na->n, sizeof(na->v[0]), map_cmp);
	if (maparray_same(old, na)) {
		free(na); /* nothing changed: readers keep the array they have */
		goto out;
	}
	na->version = old ? old->version + 1 : 1;
	if (old) {
		old->retired_epoch = atomic_load(&pm->epoch);
		old->leaving = leaving;
	}
	na->retired = old;
	/* Pairs with the load-acquire in procmaps_find/_list/_version: the array and every
	 * mapping it points to are complete before it becomes visible. */
	atomic_store_explicit(&pm->current, na, memory_order_release);
	procmaps_reclaim(pm, na);
out:
	pthread_mutex_unlock(&pm->lock);
	free(text);
	return err;
}

struct procmaps *procmaps_new(pid_t pid)
{
	char p[64];
	struct stat st;
	snprintf(p, sizeof(p), "/proc/%d", (int)pid);
	return procmaps_new_as(pid, stat(p, &st) == 0 ? st.st_uid : getuid());
}

struct procmaps *procmaps_new_as(pid_t pid, uid_t uid)
{
	struct procmaps *pm = calloc(1, sizeof(*pm));
	if (!pm)
		return NULL;
	pm->pid = pid;
	pm->uid = uid;
	pthread_mutex_init(&pm->lock, NULL);
	atomic_init(&pm->current, NULL);
	int err = procmaps_refresh(pm, pid);
	if (err) {
		procmaps_free(pm);
		errno = -err;
		return NULL;
	}
	return pm;
}

unsigned procmaps_read_begin(struct procmaps *pm)
{
	if (!pm)
		return 0;
	for (;;) {
		uint64_t e = atomic_load(&pm->epoch);
		atomic_fetch_add(&pm->readers[e & 1], 1);
		if (atomic_load(&pm->epoch) == e)
			return (unsigned)(e & 1);
		/* the epoch moved on before we were counted: the refresh that moved it may
		 * not have seen us; count ourselves under the new one */
		atomic_fetch_sub(&pm->readers[e & 1], 1);
	}
}

void procmaps_read_end(struct procmaps *pm, unsigned token)
{
	if (pm)
		atomic_fetch_sub(&pm->readers[token & 1], 1);
}

const struct mapping *procmaps_find(struct procmaps *pm, uint64_t pc)
{
	if (!pm)
		return NULL;
	const struct maparray *a = atomic_load_explicit(&pm->current, memory_order_acquire);
	if (!a)
		return NULL;
	size_t lo = 0, hi = a->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a->v[mid]->start <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || pc >= a->v[lo - 1]->end)
		return NULL;
	return a->v[lo - 1];
}

size_t procmaps_list(struct procmaps *pm, const struct mapping ***out)
{
	static const struct mapping *none[1];
	const struct maparray *a =
		pm ? atomic_load_explicit(&pm->current, memory_order_acquire) : NULL;
	if (!a) {
		*out = none;
		return 0;
	}
	*out = (const struct mapping **)a->v;
	return a->n;
}

uint64_t procmaps_version(struct procmaps *pm)
{
	const struct maparray *a =
		pm ? atomic_load_explicit(&pm->current, memory_order_acquire) : NULL;
	return a ? a->version : 0;
}

void procmaps_get_stats(struct procmaps *pm, struct procmaps_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!pm)
		return;
	pthread_mutex_lock(&pm->lock);
	*out = pm->stats;
	const struct maparray *a = atomic_load_explicit(&pm->current, memory_order_relaxed);
	out->mappings = a ? a->n : 0;
	for (const struct maparray *r = a ? a->retired : NULL; r; r = r->retired) {
		out->retired_arrays++;
		for (const struct pmapping *m = r->leaving; m; m = m->next)
			out->retired_mappings++;
	}
	pthread_mutex_unlock(&pm->lock);
}

void procmaps_free(struct procmaps *pm)
{
	if (!pm)
		return;
	struct maparray *a = atomic_load_explicit(&pm->current, memory_order_relaxed);
	for (size_t i = 0; a && i < a->n; i++)
		mapping_free((struct pmapping *)a->v[i]);
	while (a) {
		struct maparray *next = a->retired;
		maparray_free(a);
		a = next;
	}
	pthread_mutex_destroy(&pm->lock);
	free(pm);
}
