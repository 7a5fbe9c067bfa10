// SPDX-License-Identifier: MIT
/*
 * test_dump_oom.c: --dump-oom (issue 21, item 4): a process of a memory-limited cgroup that
 * the OOM killer kills leaves a profile naming its growing site, through the BPF tracepoint
 * and through the cgroups' counters; a process killed otherwise leaves none. Real daemons,
 * tests/progs/dump_grow.c under the shim (helpers.h's th_grow), real cgroups (v2, or v1's
 * memory hierarchy); profiles read with `go tool pprof`.
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
	th_dump_init(&d, dumps);
	const char *extra[] = { "--dump-dir", dumps, "--dump-oom", mode, NULL };
	heapd_run(&d, extra);
	/* the watch starts on the dumper's thread */
	char *log = th_wait_log(&d, "--dump-oom", 5000);
	cr_assert(strstr(log, strcmp(mode, "bpf") == 0 ? "watching the OOM killer"
						     : "oom_kill counters"),
		  "--dump-oom %s did not start:\n%s", mode, log);
	free(log);
	/* killed, not by the OOM killer: no OOM profile */
	struct th_grow other;
	th_grow_start(&other, &d, 0, NULL, NULL, 2, NULL);
	int ost = th_grow_end(&other, true);
	cr_assert(WIFSIGNALED(ost));

	/* made last: a test that fails before it is removed leaves it to the next run */
	dt_cgroup_sweep();
	char cg[256], procs[512], why[2048];
	if (!dt_cgroup_make(cg, sizeof(cg), procs, sizeof(procs), why, sizeof(why))) {
		fprintf(stderr, "test_dump: oom skipped: %s\n", why);
		heapd_finish(&d);
		cr_skip_test("no memory cgroup: %s", why);
	}
	struct th_grow p;
	th_grow_start(&p, &d, 0, NULL, NULL, 0, procs);
	int st = th_grow_end(&p, false);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "dump_grow ended with status %d", st);
	int n = th_dump_wait(dumps, 0, p.pid, ".oom.", 1, 30000);
	dt_cgroup_remove(cg);
	log = heapd_log(&d);
	cr_assert_eq(n, 1, "%d OOM profiles of pid %d; log:\n%s", n, (int)p.pid, log);
	cr_expect(strstr(log, "was killed by the OOM killer"), "log:\n%s", log);
	free(log);
	char names[2][128], file[512], fn[256];
	th_dump_files(dumps, 0, p.pid, ".oom.", names, 2);
	snprintf(file, sizeof(file), "%.255s/0/%.127s", dumps, names[0]);
	th_pprof_top(file, fn, sizeof(fn));
	cr_expect_eq(strncmp(fn, "dump_grow_site", 14), 0, "top in-use site of %s: %s", file, fn);
	cr_expect_eq(th_dump_files(dumps, 0, other.pid, ".oom.", NULL, 0), 0,
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
