// SPDX-License-Identifier: MIT
/*
 * api.c: the public functions of include/llgo_heap.h: rate get/set, the hook's slow path for
 * custom allocators, and trimming by name. The sampling itself is sample.c's, the rate and
 * its page lifecycle.c's, the name lookup stack.c's.
 */
#define LLGO_HEAP_PROFILING 1
#include "../include/llgo_heap.h"

#include <errno.h>

#include "internal.h"

/* The hook's view of the rate word. A pointer, not the page itself, so that a program
 * linked without -fPIC (copy relocations) still reads the shim's page. */
llgo_export const int64_t *const llgo_heap_rate_word =
	(const int64_t *)(const void *)&attach_ctl.rate_word;

llgo_export uint64_t llgo_heap_rate(void)
{
	if (owner_winner.hook)
		return owner_winner.rate();
	return llgo_rate_from_word(atomic_load_explicit(&attach_ctl.rate_word, memory_order_relaxed));
}

llgo_export int llgo_heap_set_rate(uint64_t rate)
{
	if (owner_winner.hook)
		return owner_winner.set_rate(rate);
	lifecycle_settled(&llgo_heap_tls); /* a fork child writes its own page, not its parent's */
	if (link_state() != LLGO_SHIM_ATTACHED)
		return -ENOTCONN;
	atomic_store_explicit(&attach_ctl.rate_word, llgo_rate_to_word(rate), memory_order_relaxed);
	atomic_store_explicit(&attach_ctl.want_rate_word, llgo_rate_to_word(rate),
			      memory_order_relaxed);
	return 0;
}

llgo_export int llgo_heap_trim_add(const char *name_or_prefix)
{
	if (owner_winner.hook)
		return owner_winner.trim_add(name_or_prefix);
	return stack_add_prefix(name_or_prefix);
}

/* Called from the allocator's entry point (the inline hook): our return address is in the
 * allocator and our saved frame pointer is the allocator's frame. The frame must outlive the
 * call, so it is not a tail call (the empty asm after it): a sibling call pops the frame
 * record first, and on aarch64 sample_hooked's own frame then overwrites it. */
llgo_export llgo_noinline void llgo_heap_sample_slow(void *p, size_t size)
{
	if (llgo_unlikely(owner_winner.hook)) /* another copy samples this process (owner.c) */
		owner_winner.hook(p, size, __builtin_return_address(0), __builtin_frame_address(0));
	else
		sample_hooked(p, size, __builtin_return_address(0), __builtin_frame_address(0));
	__asm__ volatile("" ::: "memory");
}

/* The whole hook, on this copy's state, for a copy of the shim that is not the process's
 * sampler (owner.c): ra and frame are that copy's llgo_heap_sample_slow's, still live. Not
 * part of the public API. */
llgo_export llgo_noinline void llgo_heap__hook_forward(void *p, size_t size, void *ra,
						       void *frame)
{
	int64_t w = atomic_load_explicit(&attach_ctl.rate_word, memory_order_relaxed);
	if (w == 0)
		return;
	if (w > 0) {
		struct llgo_heap_thread *t = &llgo_heap_tls;
		int64_t left = (int64_t)((uint64_t)t->countdown - (uint64_t)size);
		t->countdown = left;
		if (left > 0)
			return;
	}
	sample_hooked(p, size, ra, frame);
}
