// SPDX-License-Identifier: MIT
/*
 * e2e_forkexec.c: a parent that allocates at one site, then forks a child that execs this
 * program again in "child" mode, which allocates at another site. Both must be profiled as
 * separate processes. Usage: e2e_forkexec [child N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void parent_site(void) { void *p = malloc(1000); KEEP(p); free(p); }
__attribute__((noinline)) void child_site(void) { void *p = malloc(2000); KEEP(p); free(p); }

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "child") == 0) {
		int n = atoi(argv[2]);
		for (int i = 0; i < n; i++)
			child_site();
		printf("child %d done\n", (int)getpid());
		return 0;
	}
	for (int i = 0; i < 300; i++)
		parent_site();
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "child", "200", (char *)NULL);
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	printf("parent %d child %d status %d\n", (int)getpid(), (int)pid,
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
