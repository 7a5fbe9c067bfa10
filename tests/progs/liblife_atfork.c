// SPDX-License-Identifier: MIT
/*
 * liblife_atfork.c: a library whose fork child handler allocates. Preloaded after the shim
 * (LD_PRELOAD="libllgoheap.so liblife_atfork.so"), its constructor runs first, so its
 * handler is registered before the shim's and runs before it in the child: these
 * allocations happen while the child still maps its parent's control page and rings. They
 * must not reach the parent's rings (nor be counted anywhere).
 */
#include <pthread.h>
#include <stdlib.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

__attribute__((noinline)) void atfork_site(void)
{
	void *p = malloc(4321);
	KEEP(p);
	free(p);
}

static void atfork_child(void)
{
	for (int i = 0; i < 50; i++)
		atfork_site();
}

__attribute__((constructor)) static void atfork_register(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}
