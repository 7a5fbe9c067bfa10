// SPDX-License-Identifier: MIT
/*
 * cli_run.c: `llgo-heap run [-r RATE] [-o FILE] [-f FORMAT] [--unwind MODE] -- CMD [ARG...]`:
 * a private llgo-heapd (beside this executable) on a socket in a new temporary folder, CMD
 * started with the shim (../lib/libllgoheap.so) preloaded and pointed at it, then, once CMD
 * exited, a profile per process of the run written and the top sites, the leaks at exit and
 * the sites in use at the peak (the highest sampled in-use total) of CMD itself printed. The daemon and the folder are removed on every way out; CMD's exit
 * status is the run's. Requests go through cli_io.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"

/* Directory of this executable: the daemon is beside it, the shim in ../lib. */
static int self_dir(char *dir, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", dir, len - 1);
	if (n <= 0)
		return -errno;
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (!slash)
		return -EINVAL;
	*slash = '\0';
	return 0;
}

static int wait_for_socket(const char *path, pid_t daemon_pid)
{
	for (int i = 0; i < 1000; i++) {
		int s;
		if (client_connect(path, (cli_timeout_s + cli_wait_extra_s) * 1000u, &s) == 0) {
			close(s);
			return 0;
		}
		int st;
		if (waitpid(daemon_pid, &st, WNOHANG) == daemon_pid)
			return -ECHILD;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

static pid_t spawn_daemon(const char *dir, const char *sock, const char *log)
{
	char daemon[PATH_MAX + 16];
	snprintf(daemon, sizeof(daemon), "%s/llgo-heapd", dir);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0)
		dup2(null, 0);
	if (fd >= 0) {
		dup2(fd, 1);
		dup2(fd, 2);
	}
	/* The private daemon must never profile itself. */
	unsetenv("LD_PRELOAD");
	execl(daemon, "llgo-heapd", "--socket", sock, "--foreground", (char *)NULL);
	dprintf(2, "llgo-heap: cannot run %s: %s\n", daemon, strerror(errno));
	_exit(127);
}

static void stop_daemon(pid_t pid)
{
	int st;
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	for (int i = 0; i < 400; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return;
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

static pid_t spawn_command(char **cmd, const char *shim, const char *sock, const char *rate,
			   const char *unwind)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	const char *old = getenv("LD_PRELOAD");
	char *pre;
	if (old && *old) {
		if (asprintf(&pre, "%s:%s", shim, old) < 0)
			_exit(127);
	} else {
		pre = (char *)shim;
	}
	setenv("LD_PRELOAD", pre, 1);
	setenv("LLGO_HEAP_SOCKET", sock, 1);
	if (rate)
		setenv("LLGO_HEAP_RATE", rate, 1);
	if (unwind)
		setenv("LLGO_HEAP_UNWIND", unwind, 1);
	signal(SIGINT, SIG_DFL);
	signal(SIGQUIT, SIG_DFL);
	execvp(cmd[0], cmd);
	int err = errno;
	dprintf(2, "llgo-heap: cannot run %s: %s\n", cmd[0], strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

static void print_log(const char *log)
{
	FILE *f = fopen(log, "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "llgo-heapd: %s", line);
	fclose(f);
}

int cli_run(struct cli_opts *o)
{
	if (o->npos)
		return cli_die("run: unexpected argument '%s' before '--'", o->pos[0]);
	if (o->ncmd == 0)
		return cli_die("run: no command (llgo-heap run [-r RATE] [-o FILE] -- CMD [ARG...])");
	int fmt, rc;
	if ((rc = cli_parse_format(o->format, &fmt)))
		return rc;
	uint64_t rate = 0;
	if (o->rate && (rc = cli_parse_rate(o->rate, &rate)))
		return rc;
	if (o->socket)
		return cli_die("run: --socket is chosen by run itself (a private daemon)");

	char dir[PATH_MAX], shim[PATH_MAX + 32];
	if (self_dir(dir, sizeof(dir)) != 0)
		return cli_die("run: cannot find my own executable");
	snprintf(shim, sizeof(shim), "%s/../lib/libllgoheap.so", dir);
	char *real = realpath(shim, NULL);
	if (!real)
		return cli_die("run: shim not found at %s", shim);
	snprintf(shim, sizeof(shim), "%s", real);
	free(real);

	const char *tmpbase = getenv("TMPDIR");
	char tmpl[PATH_MAX];
	snprintf(tmpl, sizeof(tmpl), "%s/llgo-heap-run.XXXXXX",
		 tmpbase && *tmpbase ? tmpbase : "/tmp");
	if (!mkdtemp(tmpl))
		return cli_die("run: cannot create a temporary folder: %s", strerror(errno));
	char sock[PATH_MAX + 32], log[PATH_MAX + 32];
	snprintf(sock, sizeof(sock), "%s/heapd.sock", tmpl);
	snprintf(log, sizeof(log), "%s/heapd.log", tmpl);

	int status = 0, exit_code = 1;
	pid_t child = -1;
	pid_t dpid = spawn_daemon(dir, sock, log);
	if (dpid < 0) {
		rc = cli_die("run: fork: %s", strerror(errno));
		goto out;
	}
	if ((rc = wait_for_socket(sock, dpid)) != 0) {
		print_log(log);
		rc = cli_die("run: private llgo-heapd did not start (%s)", strerror(-rc));
		goto out;
	}

	/* Like system(3): the terminal's signals go to the command; we wait for it. */
	struct sigaction ign = { .sa_handler = SIG_IGN }, old_int, old_quit;
	sigaction(SIGINT, &ign, &old_int);
	sigaction(SIGQUIT, &ign, &old_quit);
	child = spawn_command(o->cmd, shim, sock, o->rate, o->unwind);
	if (child < 0) {
		rc = cli_die("run: fork: %s", strerror(errno));
		goto out;
	}
	while (waitpid(child, &status, 0) < 0 && errno == EINTR)
		;
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGQUIT, &old_quit, NULL);
	if (WIFEXITED(status))
		exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		exit_code = 128 + WTERMSIG(status);

	/* Every attached process of this run: the command and what it forked or exec'd. */
	struct buf list;
	buf_init(&list);
	if (cli_io_list(sock, &list) != 0) {
		buf_free(&list);
		rc = 1;
		goto out;
	}
	size_t nproc = list.len / sizeof(struct llgo_list_entry);
	bool found = false;
	for (size_t i = 0; i < nproc; i++) {
		struct llgo_list_entry e;
		memcpy(&e, list.data + i * sizeof(e), sizeof(e));
		e.comm[sizeof(e.comm) - 1] = '\0';
		bool main_proc = (pid_t)e.pid == child;
		char file[PATH_MAX];
		if (o->out && main_proc)
			snprintf(file, sizeof(file), "%s", o->out);
		else if (o->out)
			snprintf(file, sizeof(file), "%s.%u", o->out, e.pid);
		else
			snprintf(file, sizeof(file), "llgo-heap.%u.%s", e.pid, cli_format_suffix(fmt));
		struct buf prof, top, leaks, peak;
		buf_init(&prof);
		buf_init(&top);
		buf_init(&leaks);
		buf_init(&peak);
		rc = cli_io_snapshot(sock, (pid_t)e.pid, fmt, 0, 0, &prof);
		if (!rc)
			rc = cli_io_write_file(file, &prof);
		if (!rc && main_proc)
			rc = cli_io_snapshot(sock, (pid_t)e.pid, LLGO_FORMAT_TOP, 0,
					    o->top_n ? o->top_n : 10, &top);
		/* The leak report: sites whose memory was still in use when the process exited
		 * (the profile's inuse_* values), like heaptrack's "MEMORY LEAKS". */
		if (!rc && main_proc)
			rc = cli_io_snapshot(sock, (pid_t)e.pid, LLGO_FORMAT_TOP, LLGO_SNAP_INUSE,
					    o->top_n ? o->top_n : 10, &leaks);
		/* The peak: the sites in use when the sampled in-use total was highest, like
		 * heaptrack's "PEAK MEMORY CONSUMERS". */
		if (!rc && main_proc)
			rc = cli_io_snapshot(sock, (pid_t)e.pid, LLGO_FORMAT_TOP, LLGO_SNAP_PEAK,
					    o->top_n ? o->top_n : 10, &peak);
		if (!rc) {
			fprintf(stderr, "%s: pid %u (%s): wrote %s\n", cli_prog, e.pid, e.comm, file);
			if (main_proc) {
				fwrite(top.data, 1, top.len, stderr);
				fprintf(stderr, "%s: still in use at exit (never freed):\n", cli_prog);
				fwrite(leaks.data, 1, leaks.len, stderr);
				fprintf(stderr, "%s: in use at the peak:\n", cli_prog);
				fwrite(peak.data, 1, peak.len, stderr);
			}
		}
		found |= main_proc;
		buf_free(&prof);
		buf_free(&top);
		buf_free(&leaks);
		buf_free(&peak);
		if (rc)
			break;
	}
	buf_free(&list);
	if (!rc && !found && exit_code != 126 && exit_code != 127)
		fprintf(stderr,
			"%s: %s was not profiled (a static binary, or the shim could not attach)\n",
			cli_prog, o->cmd[0]);
out:
	stop_daemon(dpid);
	unlink(sock);
	unlink(log);
	rmdir(tmpl);
	if (child < 0)
		return rc ? rc : 1;
	/* The command's status wins; a profile we could not write is reported above. */
	return exit_code ? exit_code : (rc ? 1 : 0);
}
