// SPDX-License-Identifier: MIT
/*
 * test_dump.c: the snapshots llgo-heapd takes on its own (issue 21, item 4): --dump-every and
 * --dump-dir: files per uid, owned by it, bounded (in number and in bytes per uid), never
 * through a planted link, names escaped, a full disk logged, started and stopped by a reload.
 * Real daemons, real programs under the shim (tests/progs/dump_grow.c, helpers.h's th_grow),
 * profiles read with `go tool pprof`. --dump-oom: test_dump_oom.c; --push: test_dump_push.c.
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

/* ---- periodic snapshots ---------------------------------------------------------------------- */

Test(dump, periodic_files_per_uid_owned_by_it_and_bounded, .timeout = 180)
{
	cr_assert_eq(geteuid(), 0, "the daemon runs as root on a shared host: run as root");
	struct heapd d;
	char dumps[256];
	th_dump_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-keep", "2",
				"--dump-oom", "off", NULL };
	heapd_run(&d, extra);
	uid_t nob = th_nobody_uid();
	struct th_grow pr, pn;
	th_grow_start(&pr, &d, 0, NULL, NULL, 8, NULL);
	th_grow_start(&pn, &d, nob, NULL, NULL, 8, NULL);
	cr_assert_geq(th_dump_wait(dumps, 0, pr.pid, ".heap.", 1, 15000), 1, "no snapshot of root's");
	cr_assert_geq(th_dump_wait(dumps, nob, pn.pid, ".heap.", 1, 15000), 1,
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
		int n = th_dump_files(dumps, uids[u], pids[u], ".heap.", names, 8);
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
	th_grow_end(&pr, true);
	th_grow_end(&pn, true);
	heapd_stop_clean(&d);
	char fn[256];
	th_pprof_top(latest, fn, sizeof(fn));
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
	th_dump_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-every", "1", "--dump-keep", "1000",
				"--dump-max-bytes-per-uid", "4K", "--dump-oom", "off", NULL };
	heapd_run(&d, extra);
	struct th_grow p;
	th_grow_start(&p, &d, 0, NULL, NULL, 4, NULL);
	char names[64][128];
	uint64_t total = 0;
	int n = 0;
	/* each profile is under 1K: 4K holds a few, and the oldest make room for the next */
	for (int t = 0; t < 160; t++) {
		th_sleep_ms(100);
		n = th_dump_files(dumps, 0, p.pid, ".heap.", names, 64);
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
	th_grow_end(&p, true);
	heapd_finish(&d);
}

/* SIGHUP: a configuration file that gains --dump-dir and --dump-every starts the dumper, one
 * that loses them stops it. */
Test(dump, reload_starts_and_stops_the_dumper, .timeout = 120)
{
	struct heapd d;
	char dumps[256], conf[256];
	th_dump_init(&d, dumps);
	snprintf(conf, sizeof(conf), "%s/heapd.conf", d.dir);
	th_write_file(conf, "log-level = info\n");
	cr_assert_eq(chmod(conf, 0644), 0);
	const char *extra[] = { "--config", conf, NULL };
	heapd_run(&d, extra);
	struct th_grow p;
	th_grow_start(&p, &d, 0, NULL, NULL, 4, NULL);
	th_sleep_ms(1500);
	cr_expect_eq(th_dump_files(dumps, 0, p.pid, ".heap.", NULL, 0), 0, "snapshots before the reload");
	char text[400];
	snprintf(text, sizeof(text), "dump-dir = %s\ndump-every = 1\ndump-oom = off\n", dumps);
	th_write_file(conf, text);
	kill(d.pid, SIGHUP);
	cr_expect_geq(th_dump_wait(dumps, 0, p.pid, ".heap.", 1, 15000), 1,
		      "no snapshot after the reload");
	th_write_file(conf, "log-level = info\n");
	kill(d.pid, SIGHUP);
	char *log = th_wait_log(&d, "--dump and --push stopped", 5000);
	cr_expect(strstr(log, "--dump and --push stopped"), "log:\n%s", log);
	free(log);
	int n = th_dump_files(dumps, 0, p.pid, ".heap.", NULL, 0);
	th_sleep_ms(2500);
	cr_expect_eq(th_dump_files(dumps, 0, p.pid, ".heap.", NULL, 0), n, "snapshots after the stop");
	th_grow_end(&p, true);
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
	th_dump_init(&d, dumps);
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
	cr_assert_eq(symlink(TH_GROW, evil), 0);
	struct th_grow pn, pe;
	th_grow_start(&pn, &d, nob, NULL, NULL, 4, NULL);
	th_grow_start(&pe, &d, 0, evil, "evil", 4, NULL);
	cr_assert_geq(th_dump_wait(dumps, 0, pe.pid, ".heap.", 1, 15000), 1, "no snapshot");
	th_sleep_ms(2500);
	char names[4][128];
	cr_assert_eq(th_dump_files(dumps, 0, pe.pid, ".heap.", names, 4) >= 1, 1);
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
	th_grow_end(&pn, true);
	th_grow_end(&pe, true);
	heapd_finish(&d);
}

/* A full disk: the write fails and is logged once, nothing else is lost, the daemon serves
 * on, and snapshots resume when room is made. */
Test(dump, full_disk_logged_and_daemon_goes_on, .timeout = 120)
{
	struct heapd d;
	char dumps[256];
	th_dump_init(&d, dumps);
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
	struct th_grow p;
	th_grow_start(&p, &d, 0, NULL, NULL, 4, NULL);
	char *log = th_wait_log(&d, "No space left on device", 20000);
	cr_assert(strstr(log, "No space left on device"), "log:\n%s", log);
	int had = th_dump_files(dumps, 0, p.pid, ".heap.", NULL, 0);
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
	cr_expect_eq(th_dump_files(dumps, 0, p.pid, ".heap.", NULL, 0), had, "files changed while full");
	/* room again: snapshots resume, and it says so */
	char names[64][128];
	int n = th_dump_files(dumps, 0, p.pid, ".heap.", names, 64);
	for (int i = 0; i < n && i < 64; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%.255s/0/%.127s", dumps, names[i]);
		unlink(path);
	}
	cr_expect_geq(th_dump_wait(dumps, 0, p.pid, ".heap.", 1, 10000), 1, "no snapshot after");
	free(log);
	log = heapd_log(&d);
	cr_expect(strstr(log, "writing again"), "log:\n%s", log);
	free(log);
	th_grow_end(&p, true);
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
