// SPDX-License-Identifier: MIT
/*
 * test_dump.c: the snapshots llgo-heapd takes on its own (issue 21, items 4 and 5):
 * --dump-every/--dump-dir (files per uid, owned by it, bounded, never through a planted
 * link, names escaped, a full disk logged), --dump-oom (a process of a memory-limited cgroup
 * that the OOM killer kills leaves a profile naming its growing site; through the BPF
 * tracepoint and through the cgroups' counters), and --push (each periodic snapshot POSTed
 * to a Pyroscope-style /ingest on a loopback receiver run by the test; only processes of
 * the --http-uids; a hanging endpoint bounded). Real daemons, real programs under the shim
 * (tests/progs/dump_grow.c), real cgroups; profiles read with `go tool pprof`.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <grp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#include "helpers.h"

#define GROW TH_PROGS "/dump_grow"

/* ---- the profiled program ----------------------------------------------------------------- */

struct dt_prog {
	pid_t pid;
	FILE *out;
};

/* GROW (or path, run with argv0) as uid, keeping mb MiB at dump_grow_site (0: until killed);
 * cgroup: a cgroup.procs file the child enters first (NULL: none). Waits for "grown" when
 * mb > 0, and for the daemon to list it. */
static void dt_prog_start(struct dt_prog *p, const struct heapd *d, uid_t uid, const char *path,
			  const char *argv0, int mb, const char *cgroup)
{
	int out[2];
	th_pipe(out);
	p->pid = th_fork();
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(out[1], 1);
		close(out[0]);
		close(out[1]);
		if (cgroup) {
			FILE *f = fopen(cgroup, "w");
			if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0)
				_exit(125);
		}
		if (uid != 0) {
			gid_t g = (gid_t)uid;
			if (setgroups(0, NULL) != 0 || setresgid(g, g, g) != 0 ||
			    setresuid(uid, uid, uid) != 0)
				_exit(126);
			/* a change of uid clears the death signal: set it again */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() == 1)
				_exit(126);
		}
		setenv("LD_PRELOAD", LLGO_PLAIN_SHIM, 1);
		setenv("LLGO_HEAP_SOCKET", d->sock, 1);
		setenv("LLGO_HEAP_RATE", "65536", 1);
		char n[16];
		snprintf(n, sizeof(n), "%d", mb);
		execl(path ? path : GROW, argv0 ? argv0 : "dump_grow", n, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	p->out = fdopen(out[0], "r");
	cr_assert(p->out);
	if (mb > 0) {
		char line[64];
		cr_assert(fgets(line, sizeof(line), p->out) && strncmp(line, "grown", 5) == 0,
			  "dump_grow (uid %u) did not start", (unsigned)uid);
	}
	th_wait_listed(d->sock, p->pid, 5000);
}

/* The wait status. */
static int dt_prog_end(struct dt_prog *p, bool kill_it)
{
	if (kill_it)
		kill(p->pid, SIGKILL);
	int st = 0;
	cr_assert_eq(waitpid(p->pid, &st, 0), p->pid);
	fclose(p->out);
	return st;
}

/* ---- the folder ------------------------------------------------------------------------------ */

/* Files in dir/uid of pid (0: any) whose name has `kind` (".heap." or ".oom."); their names
 * (up to max) in names, each DUMP_NAME_MAX long. Returns how many. */
static int dt_files(const char *dumps, uid_t uid, pid_t pid, const char *kind, char (*names)[128],
		    int max)
{
	char path[512], pre[64];
	snprintf(path, sizeof(path), "%s/%u", dumps, (unsigned)uid);
	snprintf(pre, sizeof(pre), ".%d.", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(dir)) != NULL) {
		if (de->d_name[0] == '.' || !strstr(de->d_name, kind) ||
		    (pid && !strstr(de->d_name, pre)))
			continue;
		if (n < max)
			snprintf(names[n], 128, "%.127s", de->d_name);
		n++;
	}
	closedir(dir);
	return n;
}

/* Wait (up to ms) until dir/uid holds at least want such files. */
static int dt_wait_files(const char *dumps, uid_t uid, pid_t pid, const char *kind, int want,
			 unsigned ms)
{
	char names[4][128];
	int n = 0;
	for (unsigned t = 0; t < ms; t += 50) {
		if ((n = dt_files(dumps, uid, pid, kind, names, 4)) >= want)
			break;
		th_sleep_ms(50);
	}
	return n;
}

/* The function of the first row of `go tool pprof -top` (in-use bytes) of file. */
static void dt_top_function(const char *file, char *fn, size_t cap)
{
	char *out = NULL;
	int rc = th_sh(&out, "HOME=/tmp GOCACHE=/tmp/llgo-dump-gocache go tool pprof -top "
			      "-sample_index=inuse_space '%s'", file);
	cr_assert_eq(rc, 0, "go tool pprof failed on %s:\n%s", file, out);
	fn[0] = '\0';
	char *h = strstr(out, "flat%");
	char *row = h ? strchr(h, '\n') : NULL;
	if (row) {
		char *end = strchr(row + 1, '\n');
		if (end)
			*end = '\0';
		char *last = strrchr(row + 1, ' ');
		snprintf(fn, cap, "%s", last ? last + 1 : row + 1);
	}
	cr_assert(fn[0], "no rows in go tool pprof -top of %s:\n%s", file, out);
	free(out);
}

/* A daemon's folder (heapd_init: not started yet), and its dumps folder's name in dumps. */
static void dt_init(struct heapd *d, char dumps[256])
{
	heapd_init(d, NULL);
	snprintf(dumps, 256, "%s/dumps", d->dir);
}

/* ---- periodic snapshots ---------------------------------------------------------------------- */

Test(dump, periodic_files_per_uid_owned_by_it_and_bounded, .timeout = 180)
{
	cr_assert_eq(geteuid(), 0, "the daemon runs as root on a shared host: run as root");
	struct heapd d;
	char dumps[256];
	dt_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-keep", "2",
				"--dump-oom", "off", NULL };
	heapd_run(&d, extra);
	uid_t nob = th_nobody_uid();
	struct dt_prog pr, pn;
	dt_prog_start(&pr, &d, 0, NULL, NULL, 8, NULL);
	dt_prog_start(&pn, &d, nob, NULL, NULL, 8, NULL);
	cr_assert_geq(dt_wait_files(dumps, 0, pr.pid, ".heap.", 1, 15000), 1, "no snapshot of root's");
	cr_assert_geq(dt_wait_files(dumps, nob, pn.pid, ".heap.", 1, 15000), 1,
		      "no snapshot of nobody's");
	th_sleep_ms(4500); /* four more periods: the oldest go */

	struct stat st;
	char path[512];
	cr_assert_eq(stat(dumps, &st), 0);
	cr_expect_eq(st.st_uid, 0);
	cr_expect_eq(st.st_mode & 07777, 0711, "made 0711, got %04o", st.st_mode & 07777);
	uid_t uids[2] = { 0, nob };
	pid_t pids[2] = { pr.pid, pn.pid };
	char latest[512] = "";
	for (int u = 0; u < 2; u++) {
		snprintf(path, sizeof(path), "%s/%u", dumps, (unsigned)uids[u]);
		cr_assert_eq(lstat(path, &st), 0, "%s", path);
		cr_expect(S_ISDIR(st.st_mode) && st.st_uid == uids[u] && (st.st_mode & 0777) == 0700,
			  "%s: uid %u mode %04o", path, (unsigned)st.st_uid, st.st_mode & 07777);
		char names[8][128];
		int n = dt_files(dumps, uids[u], pids[u], ".heap.", names, 8);
		cr_expect(n >= 1 && n <= 2, "uid %u: %d periodic snapshots kept, --dump-keep 2",
			  (unsigned)uids[u], n);
		for (int i = 0; i < n && i < 8; i++) {
			snprintf(path, sizeof(path), "%.255s/%u/%.127s", dumps, (unsigned)uids[u], names[i]);
			cr_assert_eq(lstat(path, &st), 0);
			cr_expect(S_ISREG(st.st_mode) && st.st_uid == uids[u] &&
				  (st.st_mode & 0777) == 0600,
				  "%s: uid %u mode %04o", path, (unsigned)st.st_uid, st.st_mode & 07777);
			cr_expect_eq(strncmp(names[i], "dump_grow.", 10), 0, "%s", names[i]);
			if (u == 1)
				snprintf(latest, sizeof(latest), "%s", path);
		}
	}
	/* a user's own snapshot names its own site (read with the daemon stopped: it removes
	 * the oldest as it goes); another user's folder is closed to it */
	dt_prog_end(&pr, true);
	dt_prog_end(&pn, true);
	heapd_stop_clean(&d);
	char fn[256];
	dt_top_function(latest, fn, sizeof(fn));
	cr_expect_eq(strncmp(fn, "dump_grow_site", 14), 0, "top in-use site of %s: %s", latest, fn);
	pid_t c = th_fork();
	if (c == 0) {
		th_become_uid(nob, nob);
		snprintf(path, sizeof(path), "%s/0", dumps);
		_exit(opendir(path) == NULL && errno == EACCES ? 0 : 1);
	}
	int cst;
	cr_assert_eq(waitpid(c, &cst, 0), c);
	cr_expect(WIFEXITED(cst) && WEXITSTATUS(cst) == 0, "nobody could open root's folder");
	heapd_cleanup(&d);
}

Test(dump, per_uid_bytes_budget_removes_the_oldest, .timeout = 120)
{
	struct heapd d;
	char dumps[256];
	dt_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-keep", "1000",
				"--dump-max-bytes-per-uid", "4K", "--dump-oom", "off", NULL };
	heapd_run(&d, extra);
	struct dt_prog p;
	dt_prog_start(&p, &d, 0, NULL, NULL, 4, NULL);
	char names[64][128];
	uint64_t total = 0;
	int n = 0;
	/* each profile is under 1K: 4K holds a few, and the oldest make room for the next */
	for (int t = 0; t < 160; t++) {
		th_sleep_ms(100);
		n = dt_files(dumps, 0, p.pid, ".heap.", names, 64);
		total = 0;
		for (int i = 0; i < n && i < 64; i++) {
			char path[512];
			struct stat st;
			snprintf(path, sizeof(path), "%.255s/0/%.127s", dumps, names[i]);
			if (stat(path, &st) == 0)
				total += (uint64_t)st.st_size;
		}
		cr_assert_leq(total, 4096, "%d files, %llu bytes: over --dump-max-bytes-per-uid 4K",
			      n, (unsigned long long)total);
	}
	cr_expect_geq(n, 2, "only %d snapshots in 16 s", n);
	char *log = heapd_log(&d);
	cr_expect(!strstr(log, "error"), "log:\n%s", log);
	free(log);
	dt_prog_end(&p, true);
	heapd_finish(&d);
}

/* SIGHUP: a configuration file that gains --dump-dir and --dump-every starts the dumper, one
 * that loses them stops it. */
Test(dump, reload_starts_and_stops_the_dumper, .timeout = 120)
{
	struct heapd d;
	char dumps[256], conf[256];
	dt_init(&d, dumps);
	snprintf(conf, sizeof(conf), "%s/heapd.conf", d.dir);
	th_write_file(conf, "log-level = info\n");
	cr_assert_eq(chmod(conf, 0644), 0);
	const char *extra[] = { "--config", conf, NULL };
	heapd_run(&d, extra);
	struct dt_prog p;
	dt_prog_start(&p, &d, 0, NULL, NULL, 4, NULL);
	th_sleep_ms(1500);
	cr_expect_eq(dt_files(dumps, 0, p.pid, ".heap.", NULL, 0), 0, "snapshots before the reload");
	char text[400];
	snprintf(text, sizeof(text), "dump-dir = %s\ndump-every = 1\ndump-oom = off\n", dumps);
	th_write_file(conf, text);
	kill(d.pid, SIGHUP);
	cr_expect_geq(dt_wait_files(dumps, 0, p.pid, ".heap.", 1, 15000), 1,
		      "no snapshot after the reload");
	th_write_file(conf, "log-level = info\n");
	kill(d.pid, SIGHUP);
	char *log = th_wait_log(&d, "--dump and --push stopped", 5000);
	cr_expect(strstr(log, "--dump and --push stopped"), "log:\n%s", log);
	free(log);
	int n = dt_files(dumps, 0, p.pid, ".heap.", NULL, 0);
	th_sleep_ms(2500);
	cr_expect_eq(dt_files(dumps, 0, p.pid, ".heap.", NULL, 0), n, "snapshots after the stop");
	dt_prog_end(&p, true);
	heapd_finish(&d);
}

/* The daemon refuses to start with a folder others could move or write. */
static void dt_expect_refused(const char *dumps, const char *why)
{
	struct heapd d;
	heapd_init(&d, NULL);
	char *log;
	int st = heapd_refusal(&d, (const char *[]){ "--dump-dir", dumps, "--dump-every", "1", NULL },
			       &log);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: status %d, log:\n%s", dumps, st, log);
	cr_expect(strstr(log, why), "%s: no '%s' in:\n%s", dumps, why, log);
	free(log);
	heapd_cleanup(&d);
}

Test(dump, unsafe_folder_is_refused, .timeout = 60)
{
	char *t = th_tmpdir();
	char p[512], q[512];
	snprintf(p, sizeof(p), "%s/open", t);
	cr_assert_eq(mkdir(p, 0777), 0);
	cr_assert_eq(chmod(p, 0777), 0);
	dt_expect_refused(p, "writable by others");
	snprintf(p, sizeof(p), "%s/real", t);
	snprintf(q, sizeof(q), "%s/link", t);
	cr_assert_eq(mkdir(p, 0755), 0);
	cr_assert_eq(symlink(p, q), 0);
	snprintf(p, sizeof(p), "%s/link/dumps", t);
	dt_expect_refused(p, "symbolic link");
	snprintf(p, sizeof(p), "%s/users", t);
	cr_assert_eq(mkdir(p, 0755), 0);
	cr_assert_eq(chown(p, th_nobody_uid(), th_nobody_uid()), 0);
	snprintf(q, sizeof(q), "%s/users/dumps", t);
	dt_expect_refused(q, "belongs to uid");
	th_rmdir(t);
}

/* A user folder that is a link (planted while the daemon was down, or by a careless admin) is
 * not used: nothing lands where it points. A hostile command name stays one harmless name. */
Test(dump, planted_link_not_followed_and_names_escaped, .timeout = 120)
{
	struct heapd d;
	char dumps[256], elsewhere[256], path[512];
	dt_init(&d, dumps);
	snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", d.dir);
	cr_assert_eq(mkdir(dumps, 0711), 0);
	cr_assert_eq(mkdir(elsewhere, 0777), 0);
	uid_t nob = th_nobody_uid();
	snprintf(path, sizeof(path), "%s/%u", dumps, (unsigned)nob);
	cr_assert_eq(symlink(elsewhere, path), 0);
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-oom", "off",
				NULL };
	heapd_run(&d, extra);
	/* the kernel's comm is the file's name: dots, an escape sequence, a newline */
	char evil[512];
	snprintf(evil, sizeof(evil), "%s/..\033[31m\n..x", d.dir);
	cr_assert_eq(symlink(GROW, evil), 0);
	struct dt_prog pn, pe;
	dt_prog_start(&pn, &d, nob, NULL, NULL, 4, NULL);
	dt_prog_start(&pe, &d, 0, evil, "evil", 4, NULL);
	cr_assert_geq(dt_wait_files(dumps, 0, pe.pid, ".heap.", 1, 15000), 1, "no snapshot");
	th_sleep_ms(2500);
	char names[4][128];
	cr_assert_eq(dt_files(dumps, 0, pe.pid, ".heap.", names, 4) >= 1, 1);
	char want[64];
	snprintf(want, sizeof(want), "____31m___x.%d.", (int)pe.pid);
	cr_expect_eq(strncmp(names[0], want, strlen(want)), 0, "escaped name: %s", names[0]);
	DIR *dir = opendir(elsewhere);
	cr_assert(dir);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(dir)) != NULL)
		n += de->d_name[0] != '.';
	closedir(dir);
	cr_expect_eq(n, 0, "%d files written through the planted link", n);
	char *log = heapd_log(&d);
	cr_expect(strstr(log, "a link or no folder: not used"), "log:\n%s", log);
	free(log);
	dt_prog_end(&pn, true);
	dt_prog_end(&pe, true);
	heapd_finish(&d);
}

/* A full disk: the write fails and is logged once, nothing else is lost, the daemon serves
 * on, and snapshots resume when room is made. */
Test(dump, full_disk_logged_and_daemon_goes_on, .timeout = 120)
{
	struct heapd d;
	char dumps[256];
	dt_init(&d, dumps);
	cr_assert_eq(mkdir(dumps, 0711), 0);
	if (mount("llgo-dump-test", dumps, "tmpfs", MS_NOSUID | MS_NODEV, "size=8k,mode=0711") != 0) {
		int e = errno;
		heapd_cleanup(&d);
		cr_skip_test("cannot mount a small tmpfs (%s): no full disk to test with",
			     strerror(e));
	}
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-keep", "1000",
				"--dump-oom", "off", NULL };
	heapd_run(&d, extra);
	struct dt_prog p;
	dt_prog_start(&p, &d, 0, NULL, NULL, 4, NULL);
	char *log = th_wait_log(&d, "No space left on device", 20000);
	cr_assert(strstr(log, "No space left on device"), "log:\n%s", log);
	int had = dt_files(dumps, 0, p.pid, ".heap.", NULL, 0);
	cr_expect_geq(had, 1, "nothing was written before the disk filled");
	th_sleep_ms(3000);
	free(log);
	log = heapd_log(&d);
	const char *first = strstr(log, "No space left on device");
	cr_expect(first && !strstr(first + 1, "No space left on device"), "logged more than once:\n%s",
		  log);
	cr_expect(heapd_alive(&d), "the daemon died");
	size_t len = 0;
	char *snap = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TOP, &len);
	cr_expect(strstr(snap, "dump_grow_site"), "snapshot:\n%s", snap);
	free(snap);
	cr_expect_eq(dt_files(dumps, 0, p.pid, ".heap.", NULL, 0), had, "files changed while full");
	/* room again: snapshots resume, and it says so */
	char names[64][128];
	int n = dt_files(dumps, 0, p.pid, ".heap.", names, 64);
	for (int i = 0; i < n && i < 64; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%.255s/0/%.127s", dumps, names[i]);
		unlink(path);
	}
	cr_expect_geq(dt_wait_files(dumps, 0, p.pid, ".heap.", 1, 10000), 1, "no snapshot after");
	free(log);
	log = heapd_log(&d);
	cr_expect(strstr(log, "writing again"), "log:\n%s", log);
	free(log);
	dt_prog_end(&p, true);
	heapd_stop_clean(&d);
	umount2(dumps, MNT_DETACH);
	heapd_cleanup(&d);
}

Test(dump, bad_options_exit_2, .timeout = 60)
{
	static const char *const cases[][4] = {
		{ "--dump-every", "1", NULL, "--dump-every needs --dump-dir or --push" },
		{ "--push", "http://127.0.0.1:1", NULL, "--push needs --dump-every" },
		{ "--push", "ftp://127.0.0.1/", NULL, "want an http:// or https:// URL" },
		{ "--dump-oom", "maybe", NULL, "want auto, bpf, cgroup or off" },
		{ "--dump-dir", "relative/dumps", NULL, "not an absolute path" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct heapd d;
		heapd_init(&d, NULL);
		char *log;
		int st = heapd_refusal(&d, (const char *[]){ cases[i][0], cases[i][1], NULL }, &log);
		cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s %s: status %d", cases[i][0],
			  cases[i][1], st);
		cr_expect(strstr(log, cases[i][3]), "%s %s: log:\n%s", cases[i][0], cases[i][1], log);
		free(log);
		heapd_cleanup(&d);
	}
}

/* ---- OOM ------------------------------------------------------------------------------------- */

/* write text to file, when it can be opened; whether it was written whole. */
static bool dt_put(const char *file, const char *text)
{
	FILE *f = fopen(file, "w");
	if (!f)
		return false;
	bool ok = fputs(text, f) >= 0;
	return fclose(f) == 0 && ok;
}

/* A cgroup made in root (dir) whose file limit is set to 64M and, where it has one, file
 * swap to swap_value; its cgroup.procs in procs. false with the reason in why (unset: why
 * the limit could not be set). */
static bool dt_cgroup_in(const char *root, const char *limit, const char *swap,
			 const char *swap_value, const char *unset, char *dir, size_t dlen,
			 char *procs, size_t plen, char *why, size_t wlen)
{
	char ctl[1024];
	snprintf(dir, dlen, "%s/llgo-dump-oom.%d", root, (int)getpid());
	if (mkdir(dir, 0755) != 0) {
		snprintf(why, wlen, "mkdir %s: %s", dir, strerror(errno));
		return false;
	}
	snprintf(ctl, sizeof(ctl), "%s/%s", dir, limit);
	if (!dt_put(ctl, "64M")) {
		snprintf(why, wlen, "%s: %s", ctl, unset);
		rmdir(dir);
		return false;
	}
	snprintf(ctl, sizeof(ctl), "%s/%s", dir, swap);
	dt_put(ctl, swap_value);
	snprintf(procs, plen, "%s/cgroup.procs", dir);
	return true;
}

/* A memory cgroup limited to 64 MiB without swap: its cgroup.procs in procs, its folder in
 * dir; false with the reason in why when the machine has none to give. */
static bool dt_cgroup_make(char *dir, size_t dlen, char *procs, size_t plen, char *why, size_t wlen)
{
	char ctl[1024];
	/* cgroup v2 with the memory controller (delegated to children of the root) */
	const char *v2 = "/sys/fs/cgroup";
	snprintf(ctl, sizeof(ctl), "%s/cgroup.controllers", v2);
	char *c = th_read_file(ctl);
	bool v2_memory = c && strstr(c, "memory");
	free(c);
	if (v2_memory) {
		snprintf(ctl, sizeof(ctl), "%s/cgroup.subtree_control", v2);
		dt_put(ctl, "+memory");
		return dt_cgroup_in(v2, "memory.max", "memory.swap.max", "0",
				    "cannot set (memory controller not delegated)", dir, dlen, procs,
				    plen, why, wlen);
	}
	/* cgroup v1's memory hierarchy */
	const char *v1 = "/sys/fs/cgroup/memory";
	snprintf(ctl, sizeof(ctl), "%s/memory.limit_in_bytes", v1);
	if (access(ctl, F_OK) != 0) {
		snprintf(why, wlen, "no memory controller: neither cgroup v2's (%s has no "
				    "memory) nor v1's (%s)", v2, v1);
		return false;
	}
	return dt_cgroup_in(v1, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "64M",
			    "cannot set", dir, dlen, procs, plen, why, wlen);
}

static void dt_cgroup_remove(const char *dir)
{
	for (int i = 0; i < 100 && rmdir(dir) != 0 && errno == EBUSY; i++)
		th_sleep_ms(50);
}

/* Empty cgroups an earlier run of these tests left (it failed before removing its own). */
static void dt_cgroup_sweep(void)
{
	static const char *const roots[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/memory" };
	for (size_t r = 0; r < 2; r++) {
		DIR *dir = opendir(roots[r]);
		struct dirent *de;
		while (dir && (de = readdir(dir)) != NULL) {
			char path[512];
			/* named by the pid of the test that made it: only a finished test's */
			if (strncmp(de->d_name, "llgo-dump-oom.", 14) != 0 ||
			    (kill((pid_t)atoi(de->d_name + 14), 0) == 0 || errno != ESRCH))
				continue;
			snprintf(path, sizeof(path), "%s/%.200s", roots[r], de->d_name);
			rmdir(path); /* fails (EBUSY) while a process is still in it */
		}
		if (dir)
			closedir(dir);
	}
}

/* A shimmed program grows one site in a 64 MiB cgroup until the OOM killer kills it: the
 * dump folder gets DIR/0/dump_grow.PID.*.oom.pb.gz whose top in-use site is that one. A
 * process killed otherwise leaves no OOM profile. */
static void dt_oom_case(const char *mode)
{
	cr_assert_eq(geteuid(), 0, "needs root (cgroups, the daemon's eBPF)");
	if (strcmp(mode, "bpf") == 0 && access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		cr_skip_test("the kernel has no BTF (/sys/kernel/btf/vmlinux): no CO-RE program");
	struct heapd d;
	char dumps[256];
	dt_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-oom", mode, NULL };
	heapd_run(&d, extra);
	/* the watch starts on the dumper's thread */
	char *log = th_wait_log(&d, "--dump-oom", 5000);
	cr_assert(strstr(log, strcmp(mode, "bpf") == 0 ? "watching the OOM killer"
						     : "oom_kill counters"),
		  "--dump-oom %s did not start:\n%s", mode, log);
	free(log);
	/* killed, not by the OOM killer: no OOM profile */
	struct dt_prog other;
	dt_prog_start(&other, &d, 0, NULL, NULL, 2, NULL);
	int ost = dt_prog_end(&other, true);
	cr_assert(WIFSIGNALED(ost));

	/* made last: a test that fails before it is removed leaves it to the next run */
	dt_cgroup_sweep();
	char cg[256], procs[512], why[2048];
	if (!dt_cgroup_make(cg, sizeof(cg), procs, sizeof(procs), why, sizeof(why))) {
		fprintf(stderr, "test_dump: oom skipped: %s\n", why);
		heapd_finish(&d);
		cr_skip_test("no memory cgroup: %s", why);
	}
	struct dt_prog p;
	dt_prog_start(&p, &d, 0, NULL, NULL, 0, procs);
	int st = dt_prog_end(&p, false);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "dump_grow ended with status %d", st);
	int n = dt_wait_files(dumps, 0, p.pid, ".oom.", 1, 30000);
	dt_cgroup_remove(cg);
	log = heapd_log(&d);
	cr_assert_eq(n, 1, "%d OOM profiles of pid %d; log:\n%s", n, (int)p.pid, log);
	cr_expect(strstr(log, "was killed by the OOM killer"), "log:\n%s", log);
	free(log);
	char names[2][128], file[512], fn[256];
	dt_files(dumps, 0, p.pid, ".oom.", names, 2);
	snprintf(file, sizeof(file), "%.255s/0/%.127s", dumps, names[0]);
	dt_top_function(file, fn, sizeof(fn));
	cr_expect_eq(strncmp(fn, "dump_grow_site", 14), 0, "top in-use site of %s: %s", file, fn);
	cr_expect_eq(dt_files(dumps, 0, other.pid, ".oom.", NULL, 0), 0,
		     "an OOM profile of a process killed by kill(2)");
	heapd_finish(&d);
}

Test(oom, victim_profile_through_the_tracepoint, .timeout = 180)
{
	dt_oom_case("bpf");
}

Test(oom, victim_profile_through_the_cgroup_counters, .timeout = 180)
{
	dt_oom_case("cgroup");
}

/* ---- push ------------------------------------------------------------------------------------- */

#define DT_MAX_REQS 64

struct dt_req {
	char head[2048];
	char *body;
	size_t len;
};

/* A loopback HTTP receiver: accepts, reads one request, answers 200 (or, hang, never). */
struct dt_recv {
	int fd, port;
	char url[64];
	bool hang;
	pthread_t thread;
	pthread_mutex_t lock;
	struct dt_req reqs[DT_MAX_REQS];
	int nreqs;
	int held[DT_MAX_REQS]; /* hang: the connections not answered */
	int nheld;
	_Atomic bool stop;
};

static void *dt_recv_main(void *arg)
{
	struct dt_recv *r = arg;
	while (!atomic_load(&r->stop)) {
		int c = accept(r->fd, NULL, NULL);
		if (c < 0) {
			th_sleep_ms(10);
			continue;
		}
		struct timeval tv = { 5, 0 };
		setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		struct dt_req q;
		memset(&q, 0, sizeof(q));
		size_t hl = 0;
		char *end = NULL;
		while (hl < sizeof(q.head) - 1 && !end) {
			ssize_t n = recv(c, q.head + hl, sizeof(q.head) - 1 - hl, 0);
			if (n <= 0)
				break;
			hl += (size_t)n;
			q.head[hl] = '\0';
			end = strstr(q.head, "\r\n\r\n");
		}
		if (!end) {
			close(c);
			continue;
		}
		size_t have = hl - (size_t)(end + 4 - q.head);
		const char *cl = strcasestr(q.head, "\r\nContent-Length:");
		size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
		q.body = malloc(want + 1);
		memcpy(q.body, end + 4, have < want ? have : want);
		q.len = have < want ? have : want;
		while (q.len < want) {
			ssize_t n = recv(c, q.body + q.len, want - q.len, 0);
			if (n <= 0)
				break;
			q.len += (size_t)n;
		}
		end[2] = '\0';
		pthread_mutex_lock(&r->lock);
		if (r->nreqs < DT_MAX_REQS)
			r->reqs[r->nreqs++] = q;
		else
			free(q.body);
		if (r->hang && r->nheld < DT_MAX_REQS)
			r->held[r->nheld++] = c;
		pthread_mutex_unlock(&r->lock);
		if (!r->hang) {
			const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
			ssize_t w = send(c, ok, strlen(ok), MSG_NOSIGNAL);
			(void)w;
			close(c);
		}
	}
	return NULL;
}

/* The receiver on a port of its own; its URL (with path after the port) in r->url. */
static void dt_recv_start(struct dt_recv *r, bool hang, const char *path)
{
	memset(r, 0, sizeof(*r));
	r->hang = hang;
	pthread_mutex_init(&r->lock, NULL);
	r->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	cr_assert_geq(r->fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	cr_assert_eq(bind(r->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(r->fd, 16), 0);
	cr_assert_eq(getsockname(r->fd, (struct sockaddr *)&a, &al), 0);
	r->port = ntohs(a.sin_port);
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d%s", r->port, path);
	cr_assert_eq(pthread_create(&r->thread, NULL, dt_recv_main, r), 0);
}

static void dt_recv_stop(struct dt_recv *r)
{
	atomic_store(&r->stop, true);
	pthread_join(r->thread, NULL);
	close(r->fd);
	for (int i = 0; i < r->nheld; i++)
		close(r->held[i]);
	for (int i = 0; i < r->nreqs; i++)
		free(r->reqs[i].body);
	pthread_mutex_destroy(&r->lock);
}

/* Requests whose first line names pid (name=...pid%3DN...). */
static int dt_recv_count(struct dt_recv *r, pid_t pid, int *first)
{
	char want[64];
	snprintf(want, sizeof(want), "pid%%3D%d%%2C", (int)pid);
	int n = 0;
	pthread_mutex_lock(&r->lock);
	for (int i = 0; i < r->nreqs; i++) {
		char *eol = strstr(r->reqs[i].head, "\r\n");
		if (eol && memmem(r->reqs[i].head, (size_t)(eol - r->reqs[i].head), want,
				  strlen(want))) {
			if (n == 0 && first)
				*first = i;
			n++;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return n;
}

Test(push, periodic_snapshots_posted_to_ingest_for_allowed_uids, .timeout = 180)
{
	cr_assert_eq(geteuid(), 0, "runs a process as nobody: run as root");
	struct dt_recv r;
	dt_recv_start(&r, false, "");
	struct heapd d;
	heapd_init(&d, NULL);
	heapd_run(&d, (const char *[]){ "--dump-every", "1", "--push", r.url, NULL });
	struct dt_prog pr, pn;
	dt_prog_start(&pr, &d, 0, NULL, NULL, 8, NULL);
	dt_prog_start(&pn, &d, th_nobody_uid(), NULL, NULL, 8, NULL);
	int first = -1;
	for (int t = 0; t < 300 && dt_recv_count(&r, pr.pid, &first) < 2; t++)
		th_sleep_ms(50);
	cr_assert_geq(dt_recv_count(&r, pr.pid, &first), 2, "fewer than 2 pushes in 15 s");
	th_sleep_ms(1500);
	/* nobody's process is not among --http-uids (default: the daemon's own, root) */
	cr_expect_eq(dt_recv_count(&r, pn.pid, NULL), 0, "a push of another user's process");

	pthread_mutex_lock(&r.lock);
	struct dt_req *q = &r.reqs[first];
	char line[1024];
	snprintf(line, sizeof(line), "%.*s", (int)(strstr(q->head, "\r\n") - q->head), q->head);
	char want[256];
	snprintf(want, sizeof(want), "POST /ingest?name=dump_grow.memory%%7Bpid%%3D%d%%2Cuid%%3D0%%7D&from=",
		 (int)pr.pid);
	cr_expect_eq(strncmp(line, want, strlen(want)), 0, "request line: %s\nwant: %s", line, want);
	unsigned long long from = 0, until = 0;
	const char *f = strstr(line, "&from="), *u = strstr(line, "&until=");
	if (f)
		from = strtoull(f + 6, NULL, 10);
	if (u)
		until = strtoull(u + 7, NULL, 10);
	unsigned long long now = (unsigned long long)time(NULL);
	cr_expect(until && until - from == 1 && until <= now + 5 && until + 120 > now,
		  "from %llu until %llu (now %llu)", from, until, now);
	cr_expect(strstr(line, "&format=pprof"), "%s", line);
	cr_expect(strcasestr(q->head, "\r\nContent-Type: application/octet-stream"), "%s", q->head);
	cr_assert(q->len > 2 && (unsigned char)q->body[0] == 0x1f &&
		  (unsigned char)q->body[1] == 0x8b, "body of %zu bytes is no gzip", q->len);
	char file[512];
	snprintf(file, sizeof(file), "%s/pushed.pb.gz", d.dir);
	FILE *o = fopen(file, "wb");
	cr_assert(o && fwrite(q->body, 1, q->len, o) == q->len && fclose(o) == 0);
	pthread_mutex_unlock(&r.lock);
	char fn[256];
	dt_top_function(file, fn, sizeof(fn));
	cr_expect_eq(strncmp(fn, "dump_grow_site", 14), 0, "top in-use site pushed: %s", fn);

	dt_prog_end(&pr, true);
	dt_prog_end(&pn, true);
	heapd_finish(&d);
	dt_recv_stop(&r);
}

/* An endpoint that never answers: each push gives up after --push-timeout, the failure is
 * logged once, and the snapshots to disk go on at their period. */
Test(push, hanging_endpoint_is_bounded_and_snapshots_go_on, .timeout = 180)
{
	struct dt_recv r;
	dt_recv_start(&r, true, "/");
	struct heapd d;
	char dumps[256];
	dt_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-keep", "100",
				"--push", r.url, "--push-timeout", "1", "--dump-oom", "off", NULL };
	heapd_run(&d, extra);
	struct dt_prog p;
	dt_prog_start(&p, &d, 0, NULL, NULL, 4, NULL);
	cr_assert_geq(dt_wait_files(dumps, 0, p.pid, ".heap.", 1, 15000), 1, "no snapshot");
	int before = dt_files(dumps, 0, p.pid, ".heap.", NULL, 0);
	th_sleep_ms(8000);
	int after = dt_files(dumps, 0, p.pid, ".heap.", NULL, 0);
	/* a period and a push of at most 1 s each: 8 s hold 4 passes at the least */
	cr_expect_geq(after - before, 3, "%d snapshots in 8 s with a hanging push", after - before);
	cr_expect_geq(dt_recv_count(&r, p.pid, NULL), 3, "the pushes did not go on");
	char *log = heapd_log(&d);
	const char *l = strstr(log, "--push: pid");
	cr_expect(l && (strstr(l, "imeout") || strstr(l, "timed out")), "log:\n%s", log);
	cr_expect(l && !strstr(l + 1, "--push: pid"), "logged more than once:\n%s", log);
	free(log);
	size_t len;
	char *snap = heapd_snapshot(d.sock, p.pid, LLGO_FORMAT_TOP, &len);
	cr_expect(strstr(snap, "dump_grow_site"), "%s", snap);
	free(snap);
	dt_prog_end(&p, true);
	heapd_finish(&d);
	dt_recv_stop(&r);
}
