// SPDX-License-Identifier: MIT
/*
 * nofp_chains.c: an -O2 program without frame pointers (built by the Makefile's nofp_ rule)
 * whose allocations come from several call chains, for test_unwind: a plain chain, one with
 * an inlined step, a recursion, stdio's own buffer, a thread, a signal handler, and a dlopen'ed
 * -O2 library without frame pointers. Lines the test checks carry markers ("@NAME").
 *
 * usage: nofp_chains N [LIBPATH [nosignal|stop]]   (N allocations per chain; nosignal skips
 * the signal handler, whose interrupted frame heaptrack looks up one byte early; stop stops
 * the program (SIGSTOP) before anything else, for a test that reads its mappings)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

/* Keeps a call from being a tail call and its result alive. */
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) static void *a_leaf(size_t n)
{
	void *p = malloc(n); /* @a_leaf */
	KEEP(p);
	return p;
}

__attribute__((noinline)) static void *a_mid(size_t n)
{
	void *p = a_leaf(n + 8); /* @a_mid */
	KEEP(p);
	return p;
}

__attribute__((noinline)) void *chain_a(size_t n)
{
	void *p = a_mid(n * 2); /* @chain_a */
	KEEP(p);
	return p;
}

static inline __attribute__((always_inline)) void *b_inlined(size_t n)
{
	return calloc(n, 4); /* @b_inlined */
}

__attribute__((noinline)) void *chain_b(size_t n)
{
	void *p = b_inlined(n + 3); /* @chain_b */
	KEEP(p);
	return p;
}

__attribute__((noinline)) void *recurse(int depth, size_t n)
{
	if (depth == 0) {
		void *p = realloc(NULL, n); /* @recurse_leaf */
		KEEP(p);
		return p;
	}
	void *p = recurse(depth - 1, n + 1); /* @recurse */
	KEEP(p);
	return p;
}

__attribute__((noinline)) static void *thread_main(void *arg)
{
	size_t n = (size_t)(uintptr_t)arg;
	for (size_t i = 0; i < n; i++)
		free(chain_a(40)); /* @thread_main */
	return NULL;
}

static size_t handler_size = 333;

__attribute__((noinline)) static void on_signal(int sig)
{
	(void)sig;
	sink = malloc(handler_size); /* @on_signal */
	free(sink);
}

/* The same on a sigaltstack: the handler's frames are on the alternate stack, the
 * interrupted ones on the main stack. */
__attribute__((noinline)) static void on_altsignal(int sig)
{
	(void)sig;
	sink = malloc(handler_size + 1); /* @on_altsignal */
	free(sink);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10;
	const char *lib = argc > 2 ? argv[2] : NULL;
	if (argc > 3 && strcmp(argv[3], "stop") == 0)
		raise(SIGSTOP);
	for (int i = 0; i < n; i++) {
		free(chain_a(100));         /* @main_a */
		free(chain_b(10));          /* @main_b */
		free(recurse(3, 50));       /* @main_r */
	}
	printf("chains done\n"); /* @main_printf */

	pthread_t t;
	if (pthread_create(&t, NULL, thread_main, (void *)(uintptr_t)n) != 0)
		return 1;
	pthread_join(t, NULL);

	if (!(argc > 3 && strcmp(argv[3], "nosignal") == 0)) {
		signal(SIGUSR1, on_signal);
		for (int i = 0; i < n; i++)
			raise(SIGUSR1); /* @main_raise */
		static char altstack[64 << 10];
		stack_t ss = { .ss_sp = altstack, .ss_size = sizeof(altstack) };
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_altsignal;
		sa.sa_flags = SA_ONSTACK;
		if (sigaltstack(&ss, NULL) != 0 || sigaction(SIGUSR2, &sa, NULL) != 0)
			return 1;
		for (int i = 0; i < n; i++)
			raise(SIGUSR2); /* @main_altraise */
	}

	if (lib) {
		void *h = dlopen(lib, RTLD_NOW);
		if (!h) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 1;
		}
		void *(*dl_alloc)(size_t) = (void *(*)(size_t))dlsym(h, "dl_alloc");
		if (!dl_alloc)
			return 1;
		for (int i = 0; i < n; i++)
			free(dl_alloc(200)); /* @main_dl */
	}
	fflush(stdout);
	return 0;
}
