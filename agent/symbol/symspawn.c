// SPDX-License-Identifier: MIT
/*
 * symspawn.c: starting and ending the symbolizer processes (for symhelper.c).
 *
 * Started by one thread of their own. A helper sets its parent-death signal to SIGKILL
 * (symbolizer/symjail.c), so that it dies with the daemon even when stopped (SIGSTOP): a
 * stopped process never reads the hang-up of its socket. The kernel sends that signal when
 * the *thread* that started the child ends, not the process, and the threads that ask for
 * symbols come and go (libmicrohttpd's, one per HTTP connection): so every helper is started
 * by the spawner thread, started at the first need and never ended (a child of fork() has
 * none: its helpers are started by the thread that asks). posix_spawn, not fork: the daemon is
 * threaded.
 *
 * Killing a helper of another uid takes CAP_KILL (kill(2) checks uids only), and so does the
 * parent-death signal; the unit grants it. Without it a helper that does not exit on its own
 * (it is stopped, or hangs) could not be ended: symspawn_end then waits a second for it to
 * exit (a helper whose socket is closed does) and leaves it, saying why, rather than waiting
 * for good; the first start says so once too.
 *
 * Left to others: what the helper is told and when it is started or ended (symhelper.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../server/ident.h"
#include "../../common/log.h"
#include "../../shared/symproto.h"
#include "symuid.h"

/* How long a helper we could not kill has to exit by itself. */
#define SYMSPAWN_EXIT_WAIT_MS 1000

extern char **environ;

struct symspawn_req {
	const char *path;
	char *const *argv;
	int fd;
	pid_t pid; /* the answer: a pid, or -errno */
	bool done;
};

/* The spawner thread takes g_req and answers in it; one request at a time. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static struct symspawn_req *g_req;
static pid_t g_started_in; /* the process that started the spawner thread (0: none yet) */

static pid_t symspawn_now(const char *path, char *const argv[], int fd)
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, fd, SYMPROTO_FD);
	posix_spawn_file_actions_addclosefrom_np(&fa, SYMPROTO_FD + 1);
	pid_t pid = 0;
	int err = posix_spawn(&pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	return err ? -err : pid;
}

static void *symspawn_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_lock);
	for (;;) {
		while (!g_req || g_req->done)
			pthread_cond_wait(&g_cond, &g_lock);
		struct symspawn_req *r = g_req;
		pthread_mutex_unlock(&g_lock);
		pid_t pid = symspawn_now(r->path, r->argv, r->fd);
		pthread_mutex_lock(&g_lock);
		r->pid = pid;
		r->done = true;
		pthread_cond_broadcast(&g_cond);
	}
	return NULL;
}

/* Whether we hold CAP_KILL (root without it cannot kill helpers of other uids). */
static bool symspawn_may_kill(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	return syscall(SYS_capget, &h, d) == 0 && (d[CAP_TO_INDEX(CAP_KILL)].effective &
						    CAP_TO_MASK(CAP_KILL));
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void symspawn_once(void)
{
	if (geteuid() == 0 && !symspawn_may_kill())
		log_warn("symbolizer: no CAP_KILL: a symbolizer that hangs or was stopped cannot "
			 "be killed, nor dies with the daemon (the unit's CapabilityBoundingSet "
			 "must list CAP_KILL)");
}

/* Under g_lock. */
static bool symspawn_start_thread(void)
{
	pthread_attr_t attr;
	pthread_t t;
	if (pthread_attr_init(&attr) != 0)
		return false;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int err = pthread_create(&t, &attr, symspawn_main, NULL);
	pthread_attr_destroy(&attr);
	return err == 0;
}

pid_t symspawn_start(const char *path, char *const argv[], int child_fd)
{
	pthread_once(&g_once, symspawn_once);
	struct symspawn_req req = { path, argv, child_fd, 0, false };
	pid_t self = getpid();
	pthread_mutex_lock(&g_lock);
	if (!g_started_in && symspawn_start_thread())
		g_started_in = self;
	if (g_started_in != self) {
		/* no spawner thread here: started by this one (the helper dies with it) */
		pthread_mutex_unlock(&g_lock);
		return symspawn_now(path, argv, child_fd);
	}
	while (g_req)
		pthread_cond_wait(&g_cond, &g_lock);
	g_req = &req;
	pthread_cond_broadcast(&g_cond);
	while (!req.done)
		pthread_cond_wait(&g_cond, &g_lock);
	g_req = NULL;
	pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_lock);
	return req.pid;
}

bool symspawn_stopped(pid_t pid)
{
	char state;
	uint64_t start;
	return ident_proc_stat(pid, &state, &start) == 0 && (state == 'T' || state == 't');
}

int symspawn_end(pid_t pid, bool kill_it)
{
	int st = -1;
	if (kill_it && kill(pid, SIGKILL) != 0 && errno == EPERM) {
		for (int waited = 0; waited < SYMSPAWN_EXIT_WAIT_MS; waited += 10) {
			pid_t r = waitpid(pid, &st, WNOHANG);
			if (r == pid)
				return st;
			if (r < 0 && errno != EINTR)
				return -1;
			struct timespec ts = { 0, 10 * 1000000L };
			nanosleep(&ts, NULL);
		}
		log_error("symbolizer pid %d: cannot kill it (llgo-heapd lacks CAP_KILL) and it did "
			  "not exit: left running", (int)pid);
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return st;
}
