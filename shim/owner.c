// SPDX-License-Identifier: MIT
/*
 * owner.c: one sampler per process. A process can hold several copies of the shim: the
 * preloaded libllgoheap.so, a libllgoheap.so that is also linked (-lllgoheap) from another
 * path, a shared library (a plugin) that linked libllgoheap.a into itself. Each copy has its
 * own control page, rings and constructor; if each attached, the daemon would see the same
 * pid say HELLO twice and the later session would replace the earlier one, losing its samples.
 *
 * The rule: the copy that wins is the one the dynamic linker binds the public symbols to,
 * i.e. the first definition of llgo_heap_sample_slow in the global lookup order (the
 * preloaded library, else the program, else the first library loaded). That is also the copy
 * that every other copy's inline hook reaches, since a shared library's references to
 * llgo_heap_rate_word, llgo_heap_tls and llgo_heap_sample_slow go through its GOT and PLT and
 * are bound to that first definition: so a plugin's custom allocator is sampled, once, by the
 * winner. A copy that loses never attaches: its rate stays 0 and its constructor does nothing
 * else. Without a dynamic symbol table (a fully static executable) there is one copy and it
 * wins. Limitation (docs/targets.md): a copy linked into the executable itself is not exported
 * unless the program is linked with -rdynamic; preloading the shim into such a program makes
 * the preloaded copy the winner and the executable's own hooks idle.
 */
#include <dlfcn.h>

#include "internal.h"

bool owner_elect(void)
{
	void *first = dlsym(RTLD_DEFAULT, "llgo_heap_sample_slow");
	if (!first)
		return true;
	Dl_info theirs, mine;
	if (!dladdr(first, &theirs) || !dladdr((void *)(uintptr_t)owner_elect, &mine))
		return true;
	return theirs.dli_fbase == mine.dli_fbase;
}
