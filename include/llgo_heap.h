// SPDX-License-Identifier: MIT
/*
 * llgo_heap.h: the public API of libllgoheap, llgo-heap's in-process sampler.
 *
 * Programs profiled with LD_PRELOAD=libllgoheap.so need nothing from this header: malloc,
 * calloc, realloc, the aligned allocators and C++ operator new are sampled already. The API
 * is for programs that want to read or change their own sampling rate, and for custom
 * allocators that do not go through malloc (arenas, pools, mmap-based allocators): they link
 * libllgoheap.a (or the .so) and call llgo_heap_alloc_hook() after each allocation.
 *
 * Rates follow Go's runtime.MemProfileRate: 0 = off, 1 = every allocation, N = on average
 * one sample every N allocated bytes (default 524288). The process attaches to llgo-heapd at
 * load time (LLGO_HEAP_SOCKET, LLGO_HEAP_RATE); without a daemon the rate is 0.
 */
#ifndef LLGO_HEAP_H
#define LLGO_HEAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The sampling rate in force (0 off, 1 every allocation, N mean bytes between samples). */
uint64_t llgo_heap_rate(void);

/* Change this process's rate, as `llgo-heap rate PID N` does; takes effect at each thread's
 * next sample. Returns 0, or -ENOTCONN when no daemon is attached (nothing changes then:
 * samples could not go anywhere). */
int llgo_heap_set_rate(uint64_t rate);

/*
 * Treat every function whose name starts with name_or_prefix as allocator plumbing: stacks
 * are trimmed so that frame 0 is the first frame outside such functions (and outside the
 * shim). Up to 16 prefixes. The names are looked up once, now, in the symbol tables (.symtab,
 * else .dynsym) of the program and of every library loaded at this point; call it after
 * loading the allocator. Returns the number of functions found (0: none matched), or
 * -EINVAL, -ENAMETOOLONG (63 characters at most), -EEXIST (already added), -ENOSPC.
 */
int llgo_heap_trim_add(const char *name_or_prefix);

/*
 * llgo_heap_alloc_hook(p, size): report that the calling allocator returned p for a request
 * of size bytes (p may be NULL: the countdown still advances, nothing is recorded). Call it
 * from the allocator's entry point, so that frame 0 is the allocator (trim it with
 * llgo_heap_trim_add) and the next frame the program's call site.
 *
 * Without LLGO_HEAP_PROFILING defined when compiling the allocator it is an empty inline
 * function: no code, no symbol, no reference to libllgoheap (with or without -flto). With it,
 * the cost per allocation is about what the preloaded malloc pays. On x86-64 the sequence is
 * (tests/test_select.c walks it in the listings of every build mode):
 *   rate 0:      load the pointer llgo_heap_rate_word (one load; two from position-independent
 *                code, through the GOT; GCC LTO may `lea` it first), load the word, test, jne,
 *                and the allocator's own return: 5 instructions in a function of its own
 *                (6 with LTO), 2 loads (3 in PIC code), no call;
 *   rate > 0:    the other branch (jle), the TLS offset (an immediate in executables, a GOT
 *                load in PIC code), one `sub %size, %fs:(off)` on the countdown and jg: 9
 *                instructions in all (10 with LTO), no call;
 *   sample due:  a tail call (or call) to llgo_heap_sample_slow, which also takes every
 *                allocation at rate 1.
 */
#ifdef LLGO_HEAP_PROFILING
struct llgo_heap_thread; /* private; its first field is the int64_t countdown */
extern __thread struct llgo_heap_thread llgo_heap_tls __attribute__((tls_model("initial-exec")));
extern const int64_t *const llgo_heap_rate_word;
void llgo_heap_sample_slow(void *p, size_t size);

static inline __attribute__((always_inline)) void llgo_heap_alloc_hook(void *p, size_t size)
{
	int64_t w = __atomic_load_n(llgo_heap_rate_word, __ATOMIC_RELAXED);
	if (__builtin_expect(w == 0, 1))
		return;
	if (w > 0) { /* w < 0: every allocation is recorded */
#if defined(__x86_64__) && defined(__GCC_ASM_FLAG_OUTPUTS__)
		int due;
		uintptr_t off;
		__asm__("movq llgo_heap_tls@gottpoff(%%rip), %[off]\n\t"
			"subq %[size], %%fs:(%[off])"
			: [off] "=&r"(off), "=@ccle"(due)
			: [size] "r"(size)
			: "memory");
		if (__builtin_expect(!due, 1))
			return;
#else
		int64_t *countdown = (int64_t *)(void *)&llgo_heap_tls;
		int64_t left = (int64_t)((uint64_t)*countdown - (uint64_t)size);
		*countdown = left;
		if (__builtin_expect(left > 0, 1))
			return;
#endif
	}
	llgo_heap_sample_slow(p, size);
}
#else
static inline __attribute__((always_inline)) void llgo_heap_alloc_hook(void *p, size_t size)
{
	(void)p;
	(void)size;
}
#endif

#ifdef __cplusplus
}
#endif

#endif
