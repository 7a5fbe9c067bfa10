// SPDX-License-Identifier: MIT
/*
 * owner.c: one sampler per process. A process can hold several copies of the shim: the
 * preloaded libllgoheap.so, a program or a plugin that linked libllgoheap.a into itself, a
 * libllgoheap.so linked (-lllgoheap) from another path. Each copy has its own control page,
 * rings and constructor; if each attached, the daemon would see the same pid say HELLO twice
 * and the later session would replace the earlier one with its samples.
 *
 * The rule: the copy that wins is the one the dynamic linker binds the public symbols to,
 * i.e. the first definition of llgo_heap_sample_slow in the global lookup order (the
 * preloaded library, else the program if it exports the API, else the first library loaded
 * with it). Without a dynamic symbol table (a fully static executable) there is one copy and
 * it wins. A copy that loses never attaches (attach.c), and:
 *   - code whose references are bound to the winner (a shared library's hook goes through
 *     its GOT and PLT) is sampled by the winner directly, once;
 *   - code bound to the losing copy itself (a hook inlined in an executable that linked
 *     libllgoheap.a and does not export the API, run under the preloaded shim) still works:
 *     the losing copy's rate word is set to "every allocation", so each hooked allocation
 *     reaches its llgo_heap_sample_slow, which hands it to the winner's
 *     llgo_heap__hook_forward: the winner runs the whole hook there (its rate, its thread's
 *     countdown, its stack capture, trimming and rings). The API functions of the losing copy
 *     forward to the winner's likewise. The price, in that setup only: a call per hooked
 *     allocation even at rate 0.
 * What is left to others: attaching (attach.c), the hook itself (api.c).
 */
#include <dlfcn.h>

#include "internal.h"

struct owner_winner owner_winner;

bool owner_elect(void)
{
	void *first = dlsym(RTLD_DEFAULT, "llgo_heap_sample_slow");
	if (!first)
		return true;
	Dl_info theirs, mine;
	if (!dladdr(first, &theirs) || !dladdr((void *)(uintptr_t)owner_elect, &mine) ||
	    theirs.dli_fbase == mine.dli_fbase)
		return true;
	struct owner_winner w;
	*(void **)&w.hook = dlsym(RTLD_DEFAULT, "llgo_heap__hook_forward");
	*(void **)&w.rate = dlsym(RTLD_DEFAULT, "llgo_heap_rate");
	*(void **)&w.set_rate = dlsym(RTLD_DEFAULT, "llgo_heap_set_rate");
	*(void **)&w.trim_add = dlsym(RTLD_DEFAULT, "llgo_heap_trim_add");
	if (w.hook && w.rate && w.set_rate && w.trim_add) {
		owner_winner = w;
		/* Before any hook can run (constructors): send every hooked allocation to our
		 * slow path, which forwards it (api.c). */
		atomic_store_explicit(&attach_ctl.rate_word, LLGO_RATE_WORD_EVERY,
				      memory_order_release);
	}
	return false;
}
