// SPDX-License-Identifier: MIT
/*
 * attach_pre.c: blocks made before an attach, freed and realloc'ed while attached, for
 * tests/test_attach.c: none of them may count as a sampled object.
 *
 * Before: 100 page-aligned blocks (posix_memalign 4096: free looks every page-aligned pointer
 * up in the live table) and 100 of 3000 bytes; "ready". On "go" (attached, at rate 1):
 * 50 blocks of 7000 bytes at pre_site_new (kept), every page-aligned block of before freed,
 * every 3000-byte one realloc'ed to 9000 at pre_site_realloc (kept); "done". On "free": all
 * freed; "freed". On "stop": "bye".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPRE 100
#define NNEW 50

__attribute__((noinline)) void *pre_site_new(size_t n)
{
	void *p = malloc(n);
	__asm__ volatile("" : : "r"(p) : "memory");
	return p;
}

__attribute__((noinline)) void *pre_site_realloc(void *p, size_t n)
{
	void *q = realloc(p, n);
	__asm__ volatile("" : : "r"(q) : "memory");
	return q;
}

static int wait_for(const char *what)
{
	char line[64];
	while (fgets(line, sizeof(line), stdin))
		if (strncmp(line, what, strlen(what)) == 0)
			return 1;
	return 0;
}

int main(void)
{
	void *aligned[NPRE], *plain[NPRE], *fresh[NNEW];
	for (int i = 0; i < NPRE; i++) {
		if (posix_memalign(&aligned[i], 4096, 4096 * (1 + i % 3)) != 0)
			return 1;
		plain[i] = malloc(3000);
		memset(plain[i], i, 3000);
	}
	printf("ready\n");
	fflush(stdout);
	if (!wait_for("go"))
		return 1;
	for (int i = 0; i < NNEW; i++)
		fresh[i] = pre_site_new(7000);
	for (int i = 0; i < NPRE; i++)
		free(aligned[i]);
	int bad = 0;
	for (int i = 0; i < NPRE; i++) {
		plain[i] = pre_site_realloc(plain[i], 9000);
		bad += !plain[i] || ((unsigned char *)plain[i])[2999] != (unsigned char)i;
	}
	printf("done bad=%d\n", bad);
	fflush(stdout);
	if (!wait_for("free"))
		return 1;
	for (int i = 0; i < NNEW; i++)
		free(fresh[i]);
	for (int i = 0; i < NPRE; i++)
		free(plain[i]);
	printf("freed\n");
	fflush(stdout);
	if (!wait_for("stop"))
		return 1;
	printf("bye\n");
	return 0;
}
