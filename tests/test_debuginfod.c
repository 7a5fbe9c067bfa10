// SPDX-License-Identifier: MIT
/*
 * test_debuginfod.c: debug information fetched through debuginfod (agent/symfile.c). A copy
 * of tests/progs/debuginfod_prog has its debug information moved into a folder that Debian's
 * debuginfod serves (objcopy --only-keep-debug, then strip --strip-all: the program keeps
 * no symbol table, no DWARF and no .gnu_debuglink, only its build ID), and it is profiled
 * with `llgo-heap run` (the shim and a private llgo-heapd). With DEBUGINFOD_URLS pointing
 * at the server (and DEBUGINFOD_CACHE_PATH in the test's folder) the profile names the
 * program's static functions with their files and lines, and the cache holds the file;
 * without DEBUGINFOD_URLS the same program gets neither.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#define DBGD_SRC TH_PROGS_SRC "/debuginfod_prog.c"

/* The line of source marked "@marker". */
static int dbgd_line(const char *marker)
{
	char *src = th_read_file(DBGD_SRC), tag[64];
	cr_assert(src, "%s", DBGD_SRC);
	snprintf(tag, sizeof(tag), "/* @%s */", marker);
	const char *at = strstr(src, tag);
	cr_assert(at, "no %s in %s", tag, DBGD_SRC);
	int line = 1;
	for (const char *c = src; c < at; c++)
		line += *c == '\n';
	free(src);
	return line;
}

/* The text profile shows func at debuginfod_prog.c:LINE of marker. */
static bool dbgd_has(const char *text, const char *func, const char *marker)
{
	char frame[128], pos[128];
	snprintf(frame, sizeof(frame), "\t%s+", func);
	snprintf(pos, sizeof(pos), "/debuginfod_prog.c:%d\n", dbgd_line(marker));
	return strstr(text, frame) && strstr(text, pos);
}

/* A TCP port on 127.0.0.1 free a moment ago. */
static int dbgd_free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	cr_assert(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		  getsockname(s, (struct sockaddr *)&a, &len) == 0, "bind: %s", strerror(errno));
	close(s);
	return ntohs(a.sin_port);
}

/* debuginfod serving dir/served on port, its log in dir/debuginfod.log. */
static pid_t dbgd_server_start(const char *dir, int port)
{
	char served[4200], db[4200], log[4200], portarg[16];
	snprintf(served, sizeof(served), "%s/served", dir);
	snprintf(db, sizeof(db), "%s/debuginfod.sqlite", dir);
	snprintf(log, sizeof(log), "%s/debuginfod.log", dir);
	snprintf(portarg, sizeof(portarg), "%d", port);
	pid_t pid = th_fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		execlp("debuginfod", "debuginfod", "-F", served, "-p", portarg, "-d", db, "-t",
		       "1", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static void dbgd_server_stop(pid_t pid)
{
	kill(pid, SIGTERM);
	for (int i = 0; i < 100 && waitpid(pid, NULL, WNOHANG) == 0; i++)
		usleep(50000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static char *dbgd_profile(const char *dir, const char *tag, const char *env)
{
	char *out = NULL, path[4200];
	int rc = th_sh(&out, "cd '%s' && %s timeout -k 5 120 '%s/llgo-heap' run -r 1 -f text -o %s.prof "
			      "-- ./prog > %s.out 2> %s.err", dir, env, TH_BIN, tag, tag, tag);
	snprintf(path, sizeof(path), "%s/%s.err", dir, tag);
	char *err = th_read_file(path);
	cr_assert_eq(rc, 0, "%s: llgo-heap run failed (%d): %s%s", tag, rc, out, err ? err : "");
	free(err);
	free(out);
	snprintf(path, sizeof(path), "%s/%s.prof", dir, tag);
	char *text = th_read_file(path);
	cr_assert(text, "%s: no profile written", tag);
	return text;
}

Test(debuginfod, served_debug_info_names_and_lines, .timeout = 300)
{
	char *dir = th_tmpdir(), *out = NULL, path[4200];
	int have = th_sh(&out, "command -v debuginfod");
	free(out);
	cr_assert_eq(have, 0, "debuginfod is missing: install the Debian package debuginfod "
			      "(make deps)");
	int rc = th_sh(&out, "cd '%s' && mkdir served cache && cp '%s/debuginfod_prog' prog && "
			      "objcopy --only-keep-debug prog served/prog.debug && "
			      "strip --strip-all prog && "
			      "readelf -n prog | sed -n 's/.*Build ID: *//p'", dir, TH_PROGS);
	cr_assert_eq(rc, 0, "build: %s", out);
	char build_id[128] = "";
	sscanf(out, "%127s", build_id);
	free(out);
	cr_assert_eq(strlen(build_id), 40, "build id '%s'", build_id);
	rc = th_sh(&out, "cd '%s' && readelf -S prog | grep -c -E 'symtab|debug_info|debuglink'",
		    dir);
	cr_assert_eq(atoi(out), 0, "the program kept symbols or a debug link: %s", out);
	free(out);

	int port = dbgd_free_port();
	pid_t server = dbgd_server_start(dir, port);
	/* the server has indexed the folder once it serves the file */
	rc = 1;
	for (int i = 0; i < 240 && rc != 0; i++) {
		usleep(250000);
		rc = th_sh(&out, "curl -sf -o /dev/null http://127.0.0.1:%d/buildid/%s/debuginfo",
			    port, build_id);
		free(out);
	}
	if (rc != 0) {
		snprintf(path, sizeof(path), "%s/debuginfod.log", dir);
		char *log = th_read_file(path);
		dbgd_server_stop(server);
		cr_assert_fail("debuginfod did not serve %s: %s", build_id, log ? log : "");
	}

	char env[4400];
	snprintf(env, sizeof(env), "env DEBUGINFOD_URLS=http://127.0.0.1:%d "
				   "DEBUGINFOD_CACHE_PATH='%s/cache'", port, dir);
	char *with = dbgd_profile(dir, "with", env);
	char *without = dbgd_profile(dir, "without", "env -u DEBUGINFOD_URLS "
						    "-u DEBUGINFOD_CACHE_PATH");
	dbgd_server_stop(server);

	/* text frames: "#\t0xADDR\tfunction+0xOFF\tfile:line" */
	cr_expect(dbgd_has(with, "dbgd_leaf", "leaf") && dbgd_has(with, "dbgd_caller", "caller") &&
			  dbgd_has(with, "main", "main"),
		  "the served debug info names the functions at their lines:\n%s", with);
	rc = th_sh(&out, "find '%s/cache' -name debuginfo -size +0 | grep -c %s", dir, build_id);
	cr_expect_eq(rc, 0, "the debug file is in DEBUGINFOD_CACHE_PATH: %s", out);
	free(out);
	cr_expect(!strstr(without, "dbgd_leaf") && !strstr(without, "dbgd_caller") &&
			  !strstr(without, "debuginfod_prog.c"),
		  "without DEBUGINFOD_URLS the stripped program has no names nor lines:\n%s",
		  without);
	free(with);
	free(without);
	th_rmdir(dir);
}
