// SPDX-License-Identifier: MIT
/*
 * hostile_closeall.c: a program that closes every descriptor it did not open itself, as
 * daemons and sandboxes do, then opens its own socketpair and talks through it, for
 * test_hostile.c. Usage: hostile_closeall K ROUNDS
 *   1. K allocations of 48 bytes at before_site (the shim is attached, has its socket, memfd
 *      and a ring);
 *   2. close(3..1023) (stdin, stdout and stderr stay), then socketpair(SOCK_SEQPACKET): the
 *      numbers are most likely the ones the shim held;
 *   3. ROUNDS rounds of: K allocations of 112 bytes at after_site, one numbered message sent
 *      through one end and read back from the other (it must be exactly what was sent), 5 ms
 *      of sleep (the shim checks its connection at most every 100 ms);
 *   4. everything still waiting on either end is read: anything there is not ours.
 * Prints "fds A B", "site before_site 48 K", "site after_site 112 N", "messages ok N",
 * "stray P" (P packets that it did not send), and exits 1 when a message was damaged or a
 * stray packet arrived.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void before_site(void) { void *p = malloc(48); KEEP(p); free(p); }
__attribute__((noinline)) void after_site(void) { void *p = malloc(112); KEEP(p); free(p); }

static int drain_stray(int fd)
{
	int n = 0;
	char buf[65536];
	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return n;
		if (r <= 0)
			return n;
		fprintf(stderr, "stray packet of %zd bytes on fd %d\n", r, fd);
		n++;
	}
}

int main(int argc, char **argv)
{
	long k = argc > 1 ? atol(argv[1]) : 1000;
	int rounds = argc > 2 ? atoi(argv[2]) : 40;
	for (long i = 0; i < k; i++)
		before_site();
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) {
		perror("socketpair");
		return 2;
	}
	printf("fds %d %d\n", sv[0], sv[1]);
	long after = 0;
	int ok = 0, bad = 0;
	for (int r = 0; r < rounds; r++) {
		for (long i = 0; i < k; i++)
			after_site();
		after += k;
		char msg[64], got[65536];
		int n = snprintf(msg, sizeof(msg), "message %d of the program", r);
		if (send(sv[0], msg, (size_t)n, 0) != n) {
			perror("send");
			return 2;
		}
		ssize_t g = recv(sv[1], got, sizeof(got), 0);
		if (g == n && memcmp(got, msg, (size_t)n) == 0) {
			ok++;
		} else {
			bad++;
			fprintf(stderr, "round %d: got %zd bytes instead of '%s'\n", r, g, msg);
		}
		struct timespec ts = { 0, 5 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	int stray = drain_stray(sv[0]) + drain_stray(sv[1]);
	printf("site before_site 48 %ld\n", k);
	printf("site after_site 112 %ld\n", after);
	printf("messages ok %d\n", ok);
	printf("stray %d\n", stray);
	fflush(stdout);
	return bad || stray ? 1 : 0;
}
