// SPDX-License-Identifier: MIT
/*
 * dump_dir.c: the folder llgo-heapd writes its own snapshots to (--dump-dir). The daemon is
 * root on a shared host and the folder holds every user's profiles, so:
 *
 *   - the folder itself is checked once, at start, component by component from "/" with
 *     O_NOFOLLOW (a symbolic link anywhere is refused): every folder on the way is owned by
 *     root (or the daemon's uid) and writable by nobody else unless sticky, and the last one
 *     is writable by nobody else at all. Its descriptor is kept: later renames of the path
 *     change nothing.
 *   - each uid gets DIR/<uid>, mode 0700, owned by that uid (made by root, then given away
 *     with fchown: CAP_CHOWN), so users read their own snapshots only. One owned by another
 *     uid, or that is not a folder, is not used.
 *   - everything inside DIR/<uid> (create, rename, unlink, the index's reads) is done with
 *     the thread's filesystem uid and gid set to that user's (setfsuid, per thread; the
 *     capabilities that bypass file permissions drop with it): the daemon can do there only
 *     what the user could, files are the user's own and count against the user's quota, and
 *     a link the user plants leads nowhere the user could not write anyway. A file is made
 *     with O_CREAT|O_EXCL|O_NOFOLLOW under a temporary name and renamed with
 *     RENAME_NOREPLACE: nothing is ever written over or through.
 *   - budgets: periodic snapshots per process (--dump-keep), bytes and files per uid, bytes
 *     for all users (the oldest of the uid holding the most goes first, so nobody loses files
 *     to a user who holds fewer bytes). A full disk fails one write: the partial file is
 *     removed, nothing else is, and the caller logs it.
 *
 * Left to others: what is written and when (dump.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dump_impl.h"

struct dump_file {
	uid_t uid;
	pid_t pid;
	enum dump_kind kind;
	uint64_t time_ns; /* CLOCK_REALTIME: when written (mtime for files found at start) */
	uint64_t size;
	char name[DUMP_NAME_MAX];
};

struct dump_dir {
	int fd; /* the folder, checked at open */
	unsigned keep;
	uint64_t max_per_uid, max_total;
	/* Only the dumper's thread touches these (and dump_dir_open before it starts). */
	struct dump_file *files;
	size_t nfiles, cap;
	uint64_t total;
};

#define DUMP_FAIL(...) (snprintf(err, errlen, __VA_ARGS__), -EINVAL)

void dump_safe_name(const char *comm, char *out, size_t max)
{
	size_t k = 0;
	for (const unsigned char *c = (const unsigned char *)comm; c && *c && k + 1 < max; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			  (*c >= '0' && *c <= '9') || *c == '_' || *c == '-';
		out[k++] = ok ? (char)*c : '_';
	}
	if (k == 0 && max > 1)
		out[k++] = '_';
	if (max)
		out[k] = '\0';
}

/* ---- the user's filesystem identity on this thread ------------------------------------------ */

/* Act on files as uid:gid (nothing to do for the daemon's own uid). -EPERM when the daemon
 * may not (no CAP_SETUID: a user's daemon serves its own uid only). */
static int dump_become(uid_t uid, gid_t gid)
{
	if (uid == geteuid())
		return 0;
	setfsgid(gid);
	setfsuid(uid);
	if ((uid_t)setfsuid((uid_t)-1) != uid || (gid_t)setfsgid((gid_t)-1) != gid) {
		setfsuid(geteuid());
		setfsgid(getegid());
		return -EPERM;
	}
	return 0;
}

static void dump_unbecome(void)
{
	setfsuid(geteuid());
	setfsgid(getegid());
}

/* ---- the folder -------------------------------------------------------------------------- */

/* Open path, checking every folder on the way (see the top of this file). */
static int dump_dir_open_checked(const char *path, char *err, size_t errlen)
{
	if (!path || path[0] != '/')
		return DUMP_FAIL("--dump-dir: not an absolute path: %s", path ? path : "");
	char *copy = strdup(path);
	if (!copy)
		return DUMP_FAIL("out of memory");
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = fd < 0 ? DUMP_FAIL("--dump-dir: /: %s", strerror(errno)) : 0;
	uid_t me = geteuid();
	char *save = NULL;
	char *comp = strtok_r(copy, "/", &save);
	while (!rc && comp) {
		char *next = strtok_r(NULL, "/", &save);
		bool last = next == NULL;
		if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
			rc = DUMP_FAIL("--dump-dir: give the path without '.' or '..': %s", path);
			break;
		}
		if (last && mkdirat(fd, comp, 0711) == 0)
			log_info("--dump-dir: made %s (mode 0711)", path);
		int nfd = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0) {
			int e = errno;
			rc = e == ELOOP || e == ENOTDIR
				     ? DUMP_FAIL("--dump-dir: %s in %s is a symbolic link or no "
						 "folder: give the real path", comp, path)
				     : DUMP_FAIL("--dump-dir: %s in %s: %s", comp, path, strerror(e));
			break;
		}
		close(fd);
		fd = nfd;
		struct stat st;
		if (fstat(fd, &st) != 0) {
			rc = DUMP_FAIL("--dump-dir: %s: %s", comp, strerror(errno));
			break;
		}
		bool others_write = st.st_mode & (S_IWGRP | S_IWOTH);
		if (st.st_uid != 0 && st.st_uid != me)
			rc = DUMP_FAIL("--dump-dir: %s in %s belongs to uid %u: refused (another "
				       "user could move it)", comp, path, (unsigned)st.st_uid);
		else if (others_write && (last || !(st.st_mode & S_ISVTX)))
			rc = DUMP_FAIL("--dump-dir: %s in %s is writable by others (mode %04o): "
				       "refused", comp, path, (unsigned)(st.st_mode & 07777));
		else if (last && (st.st_mode & 0011) != 0011)
			log_warn("--dump-dir: %s is not searchable by others (mode %04o): users "
				 "cannot reach their snapshots in it", path,
				 (unsigned)(st.st_mode & 07777));
		comp = next;
	}
	free(copy);
	if (rc) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	return fd;
}

/* DIR/<uid>, a folder owned by uid (made and given to it when missing), opened; -errno with a
 * reason otherwise. As root (the caller has not become the user yet). */
static int dump_dir_user(struct dump_dir *dd, uid_t uid, gid_t gid, char *err, size_t errlen)
{
	char name[16];
	snprintf(name, sizeof(name), "%u", (unsigned)uid);
	if (mkdirat(dd->fd, name, 0700) != 0 && errno != EEXIST)
		return snprintf(err, errlen, "making %s: %s", name, strerror(errno)), -errno;
	int fd = openat(dd->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", name,
			 e == ELOOP || e == ENOTDIR ? "a link or no folder: not used" : strerror(e));
		return -e;
	}
	struct stat st;
	int rc = fstat(fd, &st) != 0 ? -errno : 0;
	if (!rc && st.st_uid != uid) {
		if (st.st_uid == geteuid()) {
			/* ours (we just made it, or an earlier run could not give it away) */
			if (fchown(fd, uid, gid) != 0 || fchmod(fd, 0700) != 0) {
				rc = -errno;
				snprintf(err, errlen, "giving %s to uid %u: %s (llgo-heapd needs "
					 "CAP_CHOWN)", name, (unsigned)uid, strerror(-rc));
			}
		} else {
			rc = -EPERM;
			snprintf(err, errlen, "%s belongs to uid %u: not used", name,
				 (unsigned)st.st_uid);
		}
	}
	if (rc) {
		if (!err[0])
			snprintf(err, errlen, "%s: %s", name, strerror(-rc));
		close(fd);
		return rc;
	}
	return fd;
}

/* ---- the index ------------------------------------------------------------------------------ */

static int dump_dir_add(struct dump_dir *dd, const struct dump_file *f)
{
	if (dd->nfiles == dd->cap) {
		size_t cap = dd->cap ? dd->cap * 2 : 64;
		struct dump_file *v = realloc(dd->files, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		dd->files = v;
		dd->cap = cap;
	}
	dd->files[dd->nfiles++] = *f;
	dd->total += f->size;
	return 0;
}

/* name is one of ours: "<comm>.<pid>.<time>.<heap|oom>.pb.gz"; pid and kind parsed. */
static bool dump_parse_name(const char *name, pid_t *pid, enum dump_kind *kind)
{
	size_t n = strlen(name);
	const char *ext = ".pb.gz";
	if (n >= DUMP_NAME_MAX || n < strlen(ext) || strcmp(name + n - strlen(ext), ext) != 0 ||
	    name[0] == '.')
		return false;
	/* only names we could have made (the user may put anything in its folder) */
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' || *c == '.'))
			return false;
	char buf[DUMP_NAME_MAX];
	memcpy(buf, name, n - strlen(ext));
	buf[n - strlen(ext)] = '\0';
	char *k = strrchr(buf, '.');
	if (!k)
		return false;
	*k = '\0';
	if (strcmp(k + 1, "heap") == 0)
		*kind = DUMP_KIND_HEAP;
	else if (strcmp(k + 1, "oom") == 0)
		*kind = DUMP_KIND_OOM;
	else
		return false;
	char *t = strrchr(buf, '.'); /* time */
	if (!t)
		return false;
	*t = '\0';
	char *p = strrchr(buf, '.');
	if (!p || !p[1])
		return false;
	char *end;
	long v = strtol(p + 1, &end, 10);
	if (*end || v <= 0 || v > INT_MAX)
		return false;
	*pid = (pid_t)v;
	return true;
}

/* The snapshots an earlier run left in DIR/<uid> (regular files of ours owned by uid). */
static void dump_dir_scan_user(struct dump_dir *dd, uid_t uid, int ufd)
{
	int dfd = dup(ufd);
	DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!dir) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	size_t found = 0;
	struct dirent *de;
	while ((de = readdir(dir)) != NULL && found < DUMP_MAX_FILES_PER_UID) {
		struct dump_file f;
		memset(&f, 0, sizeof(f));
		struct stat st;
		if (!dump_parse_name(de->d_name, &f.pid, &f.kind) ||
		    fstatat(ufd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode) || st.st_uid != uid)
			continue;
		f.uid = uid;
		f.size = (uint64_t)st.st_size;
		f.time_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
		snprintf(f.name, sizeof(f.name), "%s", de->d_name);
		if (dump_dir_add(dd, &f) == 0)
			found++;
	}
	closedir(dir);
}

static void dump_dir_scan(struct dump_dir *dd)
{
	int dfd = dup(dd->fd);
	DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!dir) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(dir)) != NULL) {
		char *end;
		unsigned long u = strtoul(de->d_name, &end, 10);
		if (*end || end == de->d_name || u > UINT32_MAX - 1)
			continue;
		int ufd = openat(dd->fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		struct stat st;
		if (ufd >= 0 && fstat(ufd, &st) == 0 && st.st_uid == (uid_t)u &&
		    dump_become((uid_t)u, st.st_gid) == 0) {
			dump_dir_scan_user(dd, (uid_t)u, ufd);
			dump_unbecome();
		}
		if (ufd >= 0)
			close(ufd);
	}
	closedir(dir);
}

struct dump_dir *dump_dir_open(const char *path, unsigned keep, uint64_t max_bytes_per_uid,
			       uint64_t max_bytes, char *err, size_t errlen)
{
	int fd = dump_dir_open_checked(path, err, errlen);
	if (fd < 0)
		return NULL;
	struct dump_dir *dd = calloc(1, sizeof(*dd));
	if (!dd) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	dd->fd = fd;
	dd->keep = keep;
	dd->max_per_uid = max_bytes_per_uid;
	dd->max_total = max_bytes;
	dump_dir_scan(dd);
	if (dd->nfiles)
		log_info("--dump-dir %s: %zu snapshots (%llu bytes) from earlier runs", path,
			 dd->nfiles, (unsigned long long)dd->total);
	return dd;
}

void dump_dir_close(struct dump_dir *dd)
{
	if (!dd)
		return;
	close(dd->fd);
	free(dd->files);
	free(dd);
}

/* ---- budgets ----------------------------------------------------------------------------------- */

/* Remove file i (as its uid, through its folder). */
static void dump_dir_remove(struct dump_dir *dd, size_t i)
{
	struct dump_file *f = &dd->files[i];
	char name[16], why[256] = "";
	snprintf(name, sizeof(name), "%u", (unsigned)f->uid);
	int ufd = openat(dd->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (ufd >= 0 && fstat(ufd, &st) == 0 && st.st_uid == f->uid &&
	    dump_become(f->uid, st.st_gid) == 0) {
		/* a name in the user's folder: whatever it is now, unlinking it follows nothing */
		if (unlinkat(ufd, f->name, 0) != 0 && errno != ENOENT)
			snprintf(why, sizeof(why), "%s", strerror(errno));
		dump_unbecome();
	}
	if (ufd >= 0)
		close(ufd);
	if (why[0])
		log_warn("--dump-dir: removing %u/%s: %s", (unsigned)f->uid, f->name, why);
	dd->total -= f->size;
	dd->files[i] = dd->files[--dd->nfiles];
}

/* The oldest file matching (uid; pid and kind when pid > 0) other than skip; -1 if none. */
static ssize_t dump_dir_oldest(struct dump_dir *dd, uid_t uid, pid_t pid, enum dump_kind kind,
			       size_t skip)
{
	ssize_t best = -1;
	for (size_t i = 0; i < dd->nfiles; i++) {
		const struct dump_file *f = &dd->files[i];
		if (i == skip || f->uid != uid || (pid > 0 && (f->pid != pid || f->kind != kind)))
			continue;
		if (best < 0 || f->time_ns < dd->files[best].time_ns)
			best = (ssize_t)i;
	}
	return best;
}

static void dump_dir_usage(struct dump_dir *dd, uid_t uid, pid_t pid, enum dump_kind kind,
			   uint64_t *bytes, size_t *files, size_t *same)
{
	*bytes = 0;
	*files = *same = 0;
	for (size_t i = 0; i < dd->nfiles; i++) {
		const struct dump_file *f = &dd->files[i];
		if (f->uid != uid)
			continue;
		*bytes += f->size;
		(*files)++;
		*same += f->pid == pid && f->kind == kind;
	}
}

/* Before adding nf (not in the index yet): remove the oldest files until every budget holds
 * with nf counted, so that no reader ever sees the folder over a budget. */
static void dump_dir_make_room(struct dump_dir *dd, const struct dump_file *nf)
{
	const size_t none = (size_t)-1;
	for (;;) {
		uint64_t bytes;
		size_t files, same;
		dump_dir_usage(dd, nf->uid, nf->pid, nf->kind, &bytes, &files, &same);
		bytes += nf->size;
		files++;
		same++;
		ssize_t victim = -1;
		if (nf->kind == DUMP_KIND_HEAP && dd->keep && same > dd->keep)
			victim = dump_dir_oldest(dd, nf->uid, nf->pid, nf->kind, none);
		else if ((dd->max_per_uid && bytes > dd->max_per_uid) ||
			 files > DUMP_MAX_FILES_PER_UID)
			victim = dump_dir_oldest(dd, nf->uid, 0, nf->kind, none);
		else if (dd->max_total && dd->total + nf->size > dd->max_total) {
			/* the uid holding the most bytes (nf counted) gives up its oldest */
			uid_t top = nf->uid;
			uint64_t top_bytes = bytes;
			for (size_t i = 0; i < dd->nfiles; i++) {
				uint64_t b;
				size_t fl, sm;
				dump_dir_usage(dd, dd->files[i].uid, 0, nf->kind, &b, &fl, &sm);
				if (b > top_bytes) {
					top_bytes = b;
					top = dd->files[i].uid;
				}
			}
			victim = dump_dir_oldest(dd, top, 0, nf->kind, none);
		}
		if (victim < 0)
			return;
		dump_dir_remove(dd, (size_t)victim);
	}
}

/* ---- writing ----------------------------------------------------------------------------------- */

static int dump_write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* As the user, in its folder: data to a new file under a temporary name (in tmp). */
static int dump_dir_write_tmp(int ufd, const void *data, size_t len, char *tmp, size_t tmplen,
			      char *err, size_t errlen)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	snprintf(tmp, tmplen, ".tmp-%ld%09ld", (long)ts.tv_sec, ts.tv_nsec);
	int fd = openat(ufd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "creating a file: %s", strerror(e));
		return -e;
	}
	int rc = dump_write_all(fd, data, len);
	if (!rc && close(fd) != 0)
		rc = -errno;
	else if (rc)
		close(fd);
	if (rc) {
		snprintf(err, errlen, "writing %zu bytes: %s", len, strerror(-rc));
		unlinkat(ufd, tmp, 0);
	}
	return rc;
}

/* As the user: the temporary file renamed to base[-N].kind.pb.gz, a name not taken. */
static int dump_dir_rename(int ufd, const char *tmp, const char *base, const char *kind,
			   char *name, char *err, size_t errlen)
{
	int rc = -EEXIST;
	for (unsigned n = 0; n < 100; n++) {
		if (n)
			snprintf(name, DUMP_NAME_MAX, "%s-%u.%s.pb.gz", base, n, kind);
		else
			snprintf(name, DUMP_NAME_MAX, "%s.%s.pb.gz", base, kind);
		if (renameat2(ufd, tmp, ufd, name, RENAME_NOREPLACE) == 0)
			return 0;
		if (errno != EEXIST) {
			rc = -errno;
			break;
		}
	}
	snprintf(err, errlen, "naming the file %s: %s", name, strerror(-rc));
	unlinkat(ufd, tmp, 0);
	return rc;
}

int dump_dir_write(struct dump_dir *dd, uid_t uid, gid_t gid, const char *comm, pid_t pid,
		   enum dump_kind kind, const void *data, size_t len, char *name, char *err,
		   size_t errlen)
{
	err[0] = '\0';
	if ((dd->max_per_uid && len > dd->max_per_uid) || (dd->max_total && len > dd->max_total))
		return snprintf(err, errlen, "a profile of %zu bytes is over the budget", len),
		       -EFBIG;
	int ufd = dump_dir_user(dd, uid, gid, err, errlen);
	if (ufd < 0)
		return ufd;
	int rc = dump_become(uid, gid);
	if (rc) {
		snprintf(err, errlen, "cannot act as uid %u (llgo-heapd needs CAP_SETUID)",
			 (unsigned)uid);
		close(ufd);
		return rc;
	}
	char safe[33], stamp[20], base[64];
	dump_safe_name(comm, safe, sizeof(safe));
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct tm tm;
	gmtime_r(&now.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(base, sizeof(base), "%s.%d.%s", safe, (int)pid, stamp);
	const char *ks = kind == DUMP_KIND_OOM ? "oom" : "heap";
	char tmp[48];
	rc = dump_dir_write_tmp(ufd, data, len, tmp, sizeof(tmp), err, errlen);
	dump_unbecome();
	struct dump_file f = { .uid = uid, .pid = pid, .kind = kind, .size = len,
			       .time_ns = (uint64_t)now.tv_sec * 1000000000ull +
					  (uint64_t)now.tv_nsec };
	if (!rc) {
		dump_dir_make_room(dd, &f); /* as the user too, file by file */
		rc = dump_become(uid, gid);
		if (!rc) {
			rc = dump_dir_rename(ufd, tmp, base, ks, name, err, errlen);
			dump_unbecome();
		}
	}
	close(ufd);
	if (rc)
		return rc;
	snprintf(f.name, sizeof(f.name), "%s", name);
	dump_dir_add(dd, &f);
	return 0;
}
