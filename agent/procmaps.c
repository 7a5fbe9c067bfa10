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
 * that a new one overlaps leaves the lookup table (its memory stays until procmaps_free).
 *
 * Threads: lookups are lock-free. The table of mappings is an immutable array published
 * with a store-release (refresh) and read with a load-acquire (find, list); replaced
 * arrays and mappings are kept until procmaps_free, so every pointer handed out stays
 * valid until then. Refreshes are serialized by a mutex.
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

#include "internal.h"

struct maparray {
	struct maparray *retired; /* older arrays, freed by procmaps_free */
	size_t n;
	const struct mapping *v[]; /* sorted by start, non-overlapping */
};

struct procmaps {
	pid_t pid;
	uid_t uid; /* whose helper symbolizes its files */
	pthread_mutex_t lock;             /* serializes refreshes; guards all */
	struct maparray *_Atomic current; /* release in refresh, acquire in lookups */
	struct mapping **all;             /* every mapping ever created */
	size_t nall, capall;
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

static void mapping_free(struct mapping *m)
{
	if (!m)
		return;
	symfile_put(m->file);
	free(m->path);
	free(m);
}

/* A new mapping for l; the file is shared with an earlier mapping of the same inode. */
static struct mapping *mapping_new(struct procmaps *pm, pid_t pid, const struct maps_line *l)
{
	struct mapping *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->start = l->start;
	m->end = l->end;
	m->offset = l->offset;
	m->inode = l->inode;
	m->dev_major = l->dev_major;
	m->dev_minor = l->dev_minor;
	memcpy(m->perms, l->perms, sizeof(m->perms));
	m->path = strdup(l->path);
	if (!m->path) {
		free(m);
		return NULL;
	}
	if (l->inode == 0)
		return m; /* [vdso] and friends: no file to read */
	for (size_t i = pm->nall; i-- > 0;) {
		const struct mapping *o = pm->all[i];
		if (o->file && o->build_id[0] && o->inode == l->inode &&
		    o->dev_major == l->dev_major && o->dev_minor == l->dev_minor &&
		    strcmp(o->path, l->path) == 0) {
			/* the same file of the same process: its symfile, not a new open of
			 * the path (in the daemon's namespace it may name another file) */
			memcpy(m->build_id, o->build_id, sizeof(m->build_id));
			m->file = symfile_ref(o->file);
			return m;
		}
	}
	int fd = open_mapped_file(pid, l);
	if (fd < 0)
		return m;
	read_build_id(fd, m->build_id, sizeof(m->build_id));
	m->file = symfile_get(m->path, fd, m->build_id, pm->uid);
	close(fd);
	return m;
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
	struct maparray *na = malloc(sizeof(*na) + cap * sizeof(na->v[0]));
	int err = 0;
	if (!na) {
		err = -ENOMEM;
		goto out;
	}
	na->n = 0;
	na->retired = old;
	size_t fresh = 0; /* na->v[0..fresh) are the mappings listed now */
	for (char *line = text; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		struct maps_line l;
		if (maps_parse(line, &l) && keep_line(&l, emulated)) {
			/* old is sorted by start, its mappings disjoint: a binary search, so
			 * that a process with tens of thousands of mappings costs n log n per
			 * refresh, not n^2 */
			const struct mapping *m = NULL;
			size_t i = procmaps_first_ending_after(old, l.start);
			if (old && i < old->n && old->v[i]->start == l.start &&
			    same_mapping(old->v[i], &l))
				m = old->v[i];
			if (!m && pm->nall == pm->capall) {
				size_t nc = pm->capall ? pm->capall * 2 : 32;
				struct mapping **p = realloc(pm->all, nc * sizeof(*p));
				if (!p) {
					err = -ENOMEM;
					break;
				}
				pm->all = p;
				pm->capall = nc;
			}
			if (!m) {
				struct mapping *nm = mapping_new(pm, pid, &l);
				if (!nm) {
					err = -ENOMEM;
					break;
				}
				pm->all[pm->nall++] = nm;
				m = nm;
			}
			if (na->n < cap)
				na->v[na->n++] = m;
		}
		line = nl ? nl + 1 : NULL;
	}
	if (err) {
		free(na);
		goto out;
	}
	fresh = na->n;
	/* Keep known mappings that nothing listed now overlaps (e.g. a library unloaded
	 * since: samples taken while it was mapped still resolve). */
	struct maparray fr = { .n = fresh };
	struct maparray *frp = NULL;
	if (fresh) { /* the fresh ones in address order (as /proc lists them), for the search */
		frp = malloc(sizeof(*frp) + fresh * sizeof(frp->v[0]));
		if (!frp) {
			free(na);
			err = -ENOMEM;
			goto out;
		}
		*frp = fr;
		memcpy(frp->v, na->v, fresh * sizeof(na->v[0]));
		qsort(frp->v, fresh, sizeof(frp->v[0]), map_cmp);
	}
	for (size_t i = 0; old && i < old->n; i++) {
		const struct mapping *o = old->v[i];
		/* the first fresh mapping ending after o starts overlaps o if it starts
		 * before o ends (fresh mappings are disjoint and sorted) */
		size_t j = procmaps_first_ending_after(frp, o->start);
		bool overlap = frp && j < fresh && frp->v[j]->start < o->end;
		if (!overlap && na->n < cap)
			na->v[na->n++] = o;
	}
	free(frp);
	if (na->n > 1)
		qsort(na->v, na->n, sizeof(na->v[0]), map_cmp);
	/* Pairs with the load-acquire in procmaps_find/procmaps_list: the array and every
	 * mapping it points to are complete before it becomes visible. */
	atomic_store_explicit(&pm->current, na, memory_order_release);
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

void procmaps_free(struct procmaps *pm)
{
	if (!pm)
		return;
	struct maparray *a = atomic_load_explicit(&pm->current, memory_order_relaxed);
	while (a) {
		struct maparray *next = a->retired;
		free(a);
		a = next;
	}
	for (size_t i = 0; i < pm->nall; i++)
		mapping_free(pm->all[i]);
	free(pm->all);
	pthread_mutex_destroy(&pm->lock);
	free(pm);
}
