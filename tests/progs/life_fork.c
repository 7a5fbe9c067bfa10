// SPDX-License-Identifier: MIT
/*
 * life_fork.c: fork, vfork and posix_spawn from several threads at once, for the lifecycle
 * tests. Usage:
 *   life_fork THREADS ROUNDS K
 * Each of THREADS threads runs ROUNDS rounds; a round makes K allocations of 100 bytes at
 * parent_site, then
 *   - fork()s a child that makes K allocations of 200 bytes at child_site and leaves with
 *     exit(0) (odd rounds: BYE sent) or _exit(0) (even rounds: the daemon sees EOF only);
 *   - vfork()s a child that execs this program as "exec K" (K allocations of 300 bytes at
 *     exec_site);
 *   - posix_spawn()s this program as "spawn K" (K allocations of 400 bytes at spawn_site);
 * and waits for the three, which must all exit with status 0. The main thread makes K
 * allocations at parent_site meanwhile, ROUNDS times. Prints one line per child
 * ("fork PID", "exec PID", "spawn PID") and "site parent_site 100 COUNT". An alarm ends a
 * deadlocked run (killed by SIGALRM).
 */
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

extern char **environ;

static int rounds = 4, k = 100;
static const char *self;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int failures;

__attribute__((noinline)) void parent_site(void) { void *p = malloc(100); KEEP(p); free(p); }
__attribute__((noinline)) void child_site(void) { void *p = malloc(200); KEEP(p); free(p); }
__attribute__((noinline)) void exec_site(void) { void *p = malloc(300); KEEP(p); free(p); }
__attribute__((noinline)) void spawn_site(void) { void *p = malloc(400); KEEP(p); free(p); }

static void report(const char *what, pid_t pid, int st)
{
	pthread_mutex_lock(&out_lock);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		failures++;
		fprintf(stderr, "%s child %d: status 0x%x\n", what, (int)pid, st);
	}
	/* write(2), not stdio: the buffer must not be copied into a forked child */
	char line[64];
	int n = snprintf(line, sizeof(line), "%s %d\n", what, (int)pid);
	if (write(1, line, (size_t)n) != n)
		failures++;
	pthread_mutex_unlock(&out_lock);
}

static void *worker(void *arg)
{
	long idx = (long)arg;
	char kbuf[16];
	snprintf(kbuf, sizeof(kbuf), "%d", k);
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < k; i++)
			parent_site();
		int st;
		pid_t pid = fork();
		if (pid == 0) {
			for (int i = 0; i < k; i++)
				child_site();
			if ((r + idx) % 2)
				exit(0);
			_exit(0);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			st = -1;
		report("fork", pid, st);

		char *eargv[] = { (char *)self, "exec", kbuf, NULL };
		pid = vfork();
		if (pid == 0) {
			execve(self, eargv, environ);
			_exit(127);
		}
		if (pid < 0 || waitpid(pid, &st, 0) != pid)
			st = -1;
		report("exec", pid, st);

		char *sargv[] = { (char *)self, "spawn", kbuf, NULL };
		if (posix_spawn(&pid, self, NULL, NULL, sargv, environ) != 0 ||
		    waitpid(pid, &st, 0) != pid)
			st = -1;
		report("spawn", pid, st);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "exec") == 0) {
		for (int i = 0, n = atoi(argv[2]); i < n; i++)
			exec_site();
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "spawn") == 0) {
		for (int i = 0, n = atoi(argv[2]); i < n; i++)
			spawn_site();
		return 0;
	}
	alarm(60);
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	rounds = argc > 2 ? atoi(argv[2]) : 4;
	k = argc > 3 ? atoi(argv[3]) : 100;
	if (threads < 1 || threads > 64)
		threads = 4;
	self = "/proc/self/exe";
	static char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
	if (n > 0) {
		path[n] = '\0';
		self = path;
	}
	pthread_t th[64];
	for (long i = 0; i < threads; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)i) != 0)
			return 1;
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < k; i++)
			parent_site();
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	printf("site parent_site 100 %ld\n", (long)(threads + 1) * rounds * k);
	printf("failures %d\n", failures);
	return failures ? 1 : 0;
}
