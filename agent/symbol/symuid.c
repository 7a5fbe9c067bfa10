// SPDX-License-Identifier: MIT
/*
 * symuid.c: the uid each symbolizer process runs as, when llgo-heapd runs as root.
 *
 * A helper parses one uid's files and runs as that uid (symhelper.c), so a file a user
 * crafted takes over at most a process with that user's own rights. Signal, ptrace and /proc
 * rights go with the uid too: every process of the uid may stop or kill the helper. For a
 * person's uid those are the person's own processes. Not so for the uids isolated here, whose
 * processes belong to unrelated parties, or to nobody in particular: root (0), system users (up
 * to SYS_UID_MAX of /etc/login.defs, else UID_MIN - 1, else 999), nobody (65534 and the
 * kernel's overflowuid), and the uids of the range below. Their helpers get a uid of their
 * own, DynamicUser-style, from --symbolizer-uids FIRST-LAST: one that no passwd or group entry
 * names (NSS), no /etc/subuid or /etc/subgid range covers (newuidmap would let that user
 * become it), no live process has as a uid or gid (real, effective, saved or file-system, in
 * /proc/PID/status) when the helper starts, and no other served uid has. Only a process with
 * CAP_SETUID can take it later, so no other process may signal, trace or read the helper
 * (kill(2) fails with EPERM). The gid is the same number. A private user namespace would not
 * do: the kernel checks signal permission against the uids the host sees.
 *
 * The default range, 60578..61183, is one systemd's UIDS-GIDS.md leaves unused: systemd's own
 * DynamicUser= range (61184..65519) is allocated after a look at the user database only, so
 * systemd could give a service the uid a helper runs as. A served uid keeps its uid while it
 * stays free and in the range, checked again at each start of its helper (rare: the first
 * request, then after an idle exit or a failure); one found taken is replaced, and logged.
 * Which served uid had which uid is kept for the daemon's life only (its helpers die with it).
 *
 * Left to others: starting the helper as that uid (symhelper.c, symbolizer/symjail.c).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "symuid.h"

#define SYMUID_NOBODY 65534u
#define SYMUID_SYS_MAX 999u
/* Candidates looked at per pick, at most (each may cost two NSS lookups). */
#define SYMUID_MAX_TRIES 65536u

struct symuid_rec {
	uid_t served, run;
};

/* A list of ids, or of ranges [lo, hi] of them. */
struct symuid_ids {
	uid_t *lo, *hi;
	size_t n, cap;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uid_t g_first = SYMUID_DEFAULT_FIRST, g_last = SYMUID_DEFAULT_LAST; /* under g_lock */
static struct symuid_rec *g_recs;                                           /* under g_lock */
static size_t g_nrecs, g_caprecs;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static uid_t g_sys_max = SYMUID_SYS_MAX, g_overflow = SYMUID_NOBODY; /* set once */

int symuid_parse_range(const char *text, uid_t *first, uid_t *last)
{
	char *end;
	if (!text || !isdigit((unsigned char)text[0]))
		return -EINVAL;
	errno = 0;
	unsigned long long a = strtoull(text, &end, 10);
	if (errno || *end != '-' || !isdigit((unsigned char)end[1]))
		return -EINVAL;
	unsigned long long b = strtoull(end + 1, &end, 10);
	if (errno || *end || a < 1 || a > b || b >= 1ull << 31)
		return -EINVAL;
	*first = (uid_t)a;
	*last = (uid_t)b;
	return 0;
}

void symuid_set_range(uid_t first, uid_t last)
{
	pthread_mutex_lock(&g_lock);
	g_first = first;
	g_last = last;
	pthread_mutex_unlock(&g_lock);
}

/* The last system uid (login.defs) and the kernel's overflow uid. */
static void symuid_load_limits(void)
{
	FILE *f = fopen("/etc/login.defs", "re");
	char line[256], key[64];
	unsigned long v, sys_max = 0, uid_min = 0;
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, " %63s %lu", key, &v) != 2)
			continue;
		if (strcmp(key, "SYS_UID_MAX") == 0)
			sys_max = v;
		else if (strcmp(key, "UID_MIN") == 0)
			uid_min = v;
	}
	if (f)
		fclose(f);
	if (sys_max > 0 && sys_max < 1ul << 31)
		g_sys_max = (uid_t)sys_max;
	else if (uid_min > 1 && uid_min < 1ul << 31)
		g_sys_max = (uid_t)(uid_min - 1);
	f = fopen("/proc/sys/kernel/overflowuid", "re");
	if (f && fscanf(f, "%lu", &v) == 1 && v < 1ul << 31)
		g_overflow = (uid_t)v;
	if (f)
		fclose(f);
}

bool symuid_isolated(uid_t served)
{
	pthread_once(&g_once, symuid_load_limits);
	pthread_mutex_lock(&g_lock);
	bool in_range = served >= g_first && served <= g_last;
	pthread_mutex_unlock(&g_lock);
	return served <= g_sys_max || served == SYMUID_NOBODY || served == g_overflow || in_range;
}

/* ---- What is taken -------------------------------------------------------------------- */

static int symuid_ids_add(struct symuid_ids *s, uid_t lo, uid_t hi)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		uid_t *l = realloc(s->lo, cap * sizeof(*l));
		if (l)
			s->lo = l;
		uid_t *h = l ? realloc(s->hi, cap * sizeof(*h)) : NULL;
		if (!h)
			return -ENOMEM;
		s->hi = h;
		s->cap = cap;
	}
	s->lo[s->n] = lo;
	s->hi[s->n++] = hi;
	return 0;
}

static bool symuid_ids_has(const struct symuid_ids *s, uid_t id)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->lo[i] <= id && id <= s->hi[i])
			return true;
	return false;
}

static void symuid_ids_free(struct symuid_ids *s)
{
	free(s->lo);
	free(s->hi);
}

/* The ids in [first, last] a process has as a uid or gid (any of the four). */
static int symuid_scan_processes(uid_t first, uid_t last, struct symuid_ids *out)
{
	DIR *d = opendir("/proc");
	if (!d)
		return -errno;
	int err = 0;
	struct dirent *e;
	while (!err && (e = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		char path[300], line[256];
		snprintf(path, sizeof(path), "/proc/%s/status", e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue; /* it exited */
		int seen = 0;
		while (!err && seen < 2 && fgets(line, sizeof(line), f)) {
			if (strncmp(line, "State:\tZ", 8) == 0)
				break; /* dead, its parent has yet to reap it */
			if (strncmp(line, "Uid:", 4) != 0 && strncmp(line, "Gid:", 4) != 0)
				continue;
			seen++;
			unsigned long id[4];
			int n = sscanf(line + 4, "%lu %lu %lu %lu", &id[0], &id[1], &id[2], &id[3]);
			for (int i = 0; i < n && !err; i++)
				if (id[i] >= first && id[i] <= last)
					err = symuid_ids_add(out, (uid_t)id[i], (uid_t)id[i]);
		}
		fclose(f);
	}
	closedir(d);
	return err;
}

/* The ranges of /etc/subuid or /etc/subgid ("owner:start:count" lines). */
static int symuid_scan_subids(const char *path, struct symuid_ids *out)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char line[512];
	int err = 0;
	while (!err && fgets(line, sizeof(line), f)) {
		const char *c = strchr(line, ':');
		unsigned long long start, count;
		if (c && sscanf(c + 1, "%llu:%llu", &start, &count) == 2 && count > 0 &&
		    start < 1ull << 32)
			err = symuid_ids_add(out, (uid_t)start,
					     start + count - 1 >= 1ull << 32 ? (uid_t)-1
									 : (uid_t)(start + count - 1));
	}
	fclose(f);
	return err;
}

/* Whether the user or group database names id (or cannot say). */
static bool symuid_in_databases(uid_t id)
{
	char buf[16384];
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	int e1 = getpwuid_r(id, &pw, buf, sizeof(buf), &pwp);
	if (e1 == 0 && !pwp) {
		int e2 = getgrgid_r((gid_t)id, &gr, buf, sizeof(buf), &grp);
		return e2 != 0 || grp != NULL;
	}
	return true;
}

struct symuid_taken {
	struct symuid_ids procs, subuids, subgids;
};

static bool symuid_is_free(const struct symuid_taken *t, uid_t id, uid_t served)
{
	if (id <= g_sys_max || id == SYMUID_NOBODY || id == 0xffffu || id == g_overflow)
		return false;
	for (size_t i = 0; i < g_nrecs; i++)
		if (g_recs[i].run == id && g_recs[i].served != served)
			return false;
	return !symuid_ids_has(&t->procs, id) && !symuid_ids_has(&t->subuids, id) &&
	       !symuid_ids_has(&t->subgids, id) && !symuid_in_databases(id);
}

/* ---- Picking -------------------------------------------------------------------------- */

static struct symuid_rec *symuid_rec_of(uid_t served)
{
	for (size_t i = 0; i < g_nrecs; i++)
		if (g_recs[i].served == served)
			return &g_recs[i];
	if (g_nrecs == g_caprecs) {
		size_t cap = g_caprecs ? g_caprecs * 2 : 16;
		struct symuid_rec *r = realloc(g_recs, cap * sizeof(*r));
		if (!r)
			return NULL;
		g_recs = r;
		g_caprecs = cap;
	}
	g_recs[g_nrecs] = (struct symuid_rec){ served, 0 };
	return &g_recs[g_nrecs++];
}

int symuid_pick(uid_t served, uid_t *run)
{
	pthread_once(&g_once, symuid_load_limits);
	struct symuid_taken t = { 0 };
	pthread_mutex_lock(&g_lock);
	struct symuid_rec *rec = symuid_rec_of(served);
	int err = rec ? 0 : -ENOMEM;
	if (!err)
		err = symuid_scan_processes(g_first, g_last, &t.procs);
	if (!err)
		err = symuid_scan_subids("/etc/subuid", &t.subuids);
	if (!err)
		err = symuid_scan_subids("/etc/subgid", &t.subgids);
	uid_t had = rec ? rec->run : 0;
	if (!err && had && had >= g_first && had <= g_last && symuid_is_free(&t, had, served)) {
		*run = had;
		goto out;
	}
	uid_t found = 0;
	for (uid_t id = g_first, tries = 0; !err && !found && tries < SYMUID_MAX_TRIES;
	     id++, tries++) {
		if (symuid_is_free(&t, id, served))
			found = id;
		if (id == g_last)
			break;
	}
	if (err) {
		log_error("symbolizer for uid %u: cannot look for a uid of its own: %s",
			  (unsigned)served, strerror(-err));
	} else if (!found) {
		err = -EAGAIN;
		log_error("symbolizer for uid %u: no free uid in --symbolizer-uids %u-%u (each "
			  "must be in no passwd or group entry, no subuid range, and no process's); "
			  "its frames are shown unsymbolized",
			  (unsigned)served, (unsigned)g_first, (unsigned)g_last);
	} else {
		if (had)
			log_warn("symbolizer for uid %u: uid %u is taken now (a process, an account "
				 "or a subuid range has it, or it left --symbolizer-uids): runs as "
				 "uid %u from now on",
				 (unsigned)served, (unsigned)had, (unsigned)found);
		else
			log_info("symbolizer for uid %u runs as uid %u, a uid of its own",
				 (unsigned)served, (unsigned)found);
		rec->run = found;
		*run = found;
	}
out:
	pthread_mutex_unlock(&g_lock);
	symuid_ids_free(&t.procs);
	symuid_ids_free(&t.subuids);
	symuid_ids_free(&t.subgids);
	return err;
}
