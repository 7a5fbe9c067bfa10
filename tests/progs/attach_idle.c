// SPDX-License-Identifier: MIT
/*
 * attach_idle.c: a program that allocates a little and waits, for the refusals of
 * tests/test_attach.c (llgo-heap attach must refuse it with one line and leave it running).
 *   attach_idle plain      as it is (also built -static: attach_idle_static)
 *   attach_idle seccomp    under a seccomp filter that allows everything (Seccomp: 2)
 * Prints "ready", then allocates at idle_site once per line read from stdin and echoes
 * "alive N"; "stop" ends it with "done N".
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

__attribute__((noinline)) void *idle_site(size_t n)
{
	void *p = malloc(n);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "seccomp") == 0) {
		struct sock_filter allow[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
		struct sock_fprog prog = { .len = 1, .filter = allow };
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
			perror("seccomp");
			return 1;
		}
	}
	printf("ready\n");
	fflush(stdout);
	char line[256];
	long n = 0;
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "stop", 4) == 0)
			break;
		free(idle_site(100 + (size_t)n));
		printf("alive %ld\n", ++n);
		fflush(stdout);
	}
	printf("done %ld\n", n);
	return 0;
}
