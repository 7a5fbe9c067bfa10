// SPDX-License-Identifier: MIT
/*
 * override_cxx.c: C++ operator new and delete, every variant (plain, array, nothrow, aligned,
 * aligned nothrow, sized, sized aligned), in plain C under their x86-64 Itanium-ABI mangled
 * names (size_t is `m`, std::align_val_t `St11align_val_t`, std::nothrow_t const&
 * `RKSt9nothrow_t`). Part of libllgoheap.so and libllgoheap.a.
 * (Over 600 lines: twenty-odd operators that must stay alike, side by side.)
 *
 * Each exported operator is one indirect jump through its entry in override_cxx (a tail jump:
 * the program's return address and frame pointer reach the target untouched). An entry starts
 * at a bootstrap function. The constructor, when the program links a C++ runtime, or else the
 * first call of any operator, resolves the next definitions (dlsym RTLD_NEXT, else a
 * libstdc++ loaded anywhere) and installs one of two modes:
 *
 * - inline: the next definitions are libstdc++'s own, the program replaced none of the 20
 *   operators (every one still resolves to the shim), and malloc, free and aligned_alloc
 *   resolve to the shim's (so that the real ones are those libstdc++'s operators would reach
 *   through the shim). Each operator new then does what libstdc++'s does, with the malloc
 *   fast path inline: the rate test, at a positive rate the countdown update (override_pass,
 *   internal.h), then one call of the real malloc (size 0 -> 1), or
 *   of the real aligned_alloc with the size rounded up to the alignment (libstdc++ 12's rule,
 *   wrap-around included, so the result is the same block libstdc++ would return). A NULL
 *   result runs the new_handler loop here (std::get_new_handler(), call it, allocate again);
 *   with no handler installed the real operator is called, which tries once more and throws
 *   std::bad_alloc itself. A nothrow operator whose allocation failed calls the real nothrow
 *   operator (libstdc++'s catches the bad_alloc of the throwing one, which is ours again, and
 *   returns nullptr). Every delete variant jumps through free's own entry (override_cxx_free:
 *   the real free while no sampled object is tracked, override.c). This is also the mode when no C++ runtime can be found at all; stand-ins then
 *   replace the real operators (abort where libstdc++ would throw, nullptr for nothrow).
 * - forward: another definition follows the shim (a preloaded tcmalloc or jemalloc, libc++),
 *   the program replaced some operator (libstdc++'s array, nothrow and sized forms call the
 *   replaced ones), or another malloc comes before the shim's. Every entry is then the next
 *   definition itself, as for malloc: its allocations are sampled if and where it calls the
 *   shim's malloc.
 *
 * The allocation is sampled by the operator (the real malloc it calls is never the shim's, so
 * the countdown is charged once): a crossing tail-calls a noinline cold function that
 * allocates, then records through sample_hooked with frame 0 the operator's return address
 * (the function that called new) and the size the program asked (not the rounded one).
 * The failure paths keep a frame of their own while they call a handler or a real operator,
 * so an allocation sampled inside one (by the shim's malloc, or by a nested operator) walks
 * from that frame to the caller of new; the real operators new are registered as plumbing
 * (stack.c) so that their return addresses are trimmed (at start-up in the forward mode, at
 * the first failed allocation in the inline mode). Exceptions from a handler or a real
 * operator unwind through these frames: the file is built with asynchronous unwind tables
 * (the Makefile asks for them) and holds no state that would need a cleanup.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* X(symbol, field, parameters, arguments): the operators new, then the operators delete. */
#define OVERRIDE_CXX_NEWS(X) \
	X(_Znwm, nw, (size_t n), (n)) \
	X(_Znam, na, (size_t n), (n)) \
	X(_ZnwmRKSt9nothrow_t, nw_nt, (size_t n, const void *nt), (n, nt)) \
	X(_ZnamRKSt9nothrow_t, na_nt, (size_t n, const void *nt), (n, nt)) \
	X(_ZnwmSt11align_val_t, nw_al, (size_t n, size_t al), (n, al)) \
	X(_ZnamSt11align_val_t, na_al, (size_t n, size_t al), (n, al)) \
	X(_ZnwmSt11align_val_tRKSt9nothrow_t, nw_al_nt, (size_t n, size_t al, const void *nt), \
	  (n, al, nt)) \
	X(_ZnamSt11align_val_tRKSt9nothrow_t, na_al_nt, (size_t n, size_t al, const void *nt), \
	  (n, al, nt))

#define OVERRIDE_CXX_DELETES(X) \
	X(_ZdlPv, dl, (void *p), (p)) \
	X(_ZdaPv, da, (void *p), (p)) \
	X(_ZdlPvm, dl_sz, (void *p, size_t n), (p, n)) \
	X(_ZdaPvm, da_sz, (void *p, size_t n), (p, n)) \
	X(_ZdlPvRKSt9nothrow_t, dl_nt, (void *p, const void *nt), (p, nt)) \
	X(_ZdaPvRKSt9nothrow_t, da_nt, (void *p, const void *nt), (p, nt)) \
	X(_ZdlPvSt11align_val_t, dl_al, (void *p, size_t al), (p, al)) \
	X(_ZdaPvSt11align_val_t, da_al, (void *p, size_t al), (p, al)) \
	X(_ZdlPvmSt11align_val_t, dl_sz_al, (void *p, size_t n, size_t al), (p, n, al)) \
	X(_ZdaPvmSt11align_val_t, da_sz_al, (void *p, size_t n, size_t al), (p, n, al)) \
	X(_ZdlPvSt11align_val_tRKSt9nothrow_t, dl_al_nt, (void *p, size_t al, const void *nt), \
	  (p, al, nt)) \
	X(_ZdaPvSt11align_val_tRKSt9nothrow_t, da_al_nt, (void *p, size_t al, const void *nt), \
	  (p, al, nt))

#define OVERRIDE_CXX_NEW_FIELD(sym, field, params, args) void *(*field) params;
#define OVERRIDE_CXX_DEL_FIELD(sym, field, params, args) void (*field) params;

struct override_cxx_ops {
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_NEW_FIELD)
	OVERRIDE_CXX_DELETES(OVERRIDE_CXX_DEL_FIELD)
};

typedef void (*override_cxx_handler)(void);

/* Bootstrap functions (below): resolve, then go through the entry again. */
#define OVERRIDE_CXX_NEW_BOOT_DECL(sym, field, params, args) \
	static void *override_cxx_boot_##field params;
#define OVERRIDE_CXX_DEL_BOOT_DECL(sym, field, params, args) \
	static void override_cxx_boot_##field params;
OVERRIDE_CXX_NEWS(OVERRIDE_CXX_NEW_BOOT_DECL)
OVERRIDE_CXX_DELETES(OVERRIDE_CXX_DEL_BOOT_DECL)

/*
 * What each exported operator jumps to. Read with relaxed loads (one `jmp *entry(%rip)`);
 * written by the resolvers with release stores, after override_cxx_next and
 * override_cxx_resolved. A reader sees the bootstrap function or the final one, both correct;
 * code reached through a final one reads override_cxx_next only after override_cxx_ready().
 */
static struct override_cxx_ops override_cxx = {
#define OVERRIDE_CXX_BOOT_INIT(sym, field, params, args) .field = override_cxx_boot_##field,
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_BOOT_INIT) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_BOOT_INIT)
#undef OVERRIDE_CXX_BOOT_INIT
};

/* The next definitions (or the stand-ins) and std::get_new_handler (NULL without a C++
 * runtime). Written before override_cxx_resolved is set (release), equal values by every
 * resolver. */
static struct override_cxx_ops override_cxx_next;
static override_cxx_handler (*override_cxx_get_handler)(void);
static _Atomic int override_cxx_resolved;
/* Set by the first resolver, the one that registers the plumbing ranges. */
static _Atomic int override_cxx_registered;

static void override_cxx_resolve(void);
static void override_cxx_register(void);
static void override_cxx_die(void);
static void *override_cxx_self(void);

/* A next definition or std::get_new_handler, after override_cxx_ready(). */
#define OVERRIDE_CXX_REAL(field) __atomic_load_n(&override_cxx_next.field, __ATOMIC_RELAXED)

/* override_cxx_next and override_cxx_get_handler are set and visible to this thread. */
static inline void override_cxx_ready(void)
{
	if (llgo_unlikely(!atomic_load_explicit(&override_cxx_resolved, memory_order_acquire)))
		override_cxx_resolve();
}

/* ---- the allocation itself ------------------------------------------------------------ */

/* The one place every operator delete of the inline mode frees through: free's own entry
 * (override.c), which looks for a tracked sampled object exactly as free does. */
static inline __attribute__((always_inline)) void override_cxx_free(void *p)
{
	__atomic_load_n(&override_free_entry, __ATOMIC_RELAXED)(p);
}

/* std::align_val_t values libstdc++ accepts: powers of two (zero is not one). */
static inline __attribute__((always_inline)) bool override_cxx_pow2(size_t al)
{
	return (al ^ (al - 1)) > al - 1;
}

/* One attempt, as libstdc++ 12 makes it: malloc of at least one byte; aligned_alloc with the
 * size (at least one byte) rounded up to a multiple of the alignment, modulo 2^64 as there. */
static inline __attribute__((always_inline)) void *override_cxx_alloc(size_t n, size_t al,
								 bool aligned)
{
	n += !n;
	if (!aligned)
		return __atomic_load_n(&override_malloc, __ATOMIC_RELAXED)(n);
	return __atomic_load_n(&override_aligned_alloc, __ATOMIC_RELAXED)(al,
									  (n + al - 1) & ~(al - 1));
}

/* override_cxx_alloc for sample_new, which places sampled objects or calls these. */
static void *override_cxx_alloc_plain(size_t n, size_t al)
{
	return override_cxx_alloc(n, al, false);
}

static void *override_cxx_alloc_aligned(size_t n, size_t al)
{
	return override_cxx_alloc(n, al, true);
}

/* Which operator new a slow path serves (to call its real counterpart). */
enum override_cxx_op { OVERRIDE_CXX_NW, OVERRIDE_CXX_NA, OVERRIDE_CXX_NW_AL, OVERRIDE_CXX_NA_AL };

/* The file is built without frame pointers (the fast path is a plain call of malloc, as in
 * libstdc++). A function that calls out while an allocation may be sampled underneath sets up
 * its frame pointer (__builtin_frame_address forces one) and keeps the frame on the stack
 * across its last call (p is used after it, so no tail jump): a walk from a sample below
 * then reaches the function's return address, the call site of new. */
#define OVERRIDE_CXX_FRAME() __asm__ volatile("" : : "r"(__builtin_frame_address(0)))
#define OVERRIDE_CXX_KEEP_FRAME(p) __asm__ volatile("" : : "r"(p) : "memory")

/* A throwing operator new whose allocation failed: the new_handler loop. With no handler the
 * real operator is called, and it throws std::bad_alloc (or, racing a handler just installed,
 * runs the loop itself). */
static llgo_noinline llgo_cold void *override_cxx_retry(size_t n, size_t al, int op)
{
	OVERRIDE_CXX_FRAME();
	override_cxx_ready();
	override_cxx_register();
	bool aligned = op == OVERRIDE_CXX_NW_AL || op == OVERRIDE_CXX_NA_AL;
	for (;;) {
		override_cxx_handler (*get)(void) =
			__atomic_load_n(&override_cxx_get_handler, __ATOMIC_RELAXED);
		override_cxx_handler h = get ? get() : NULL;
		if (!h)
			break;
		h();
		void *p = override_cxx_alloc(n, al, aligned);
		if (p)
			return p;
	}
	void *p;
	switch (op) {
	case OVERRIDE_CXX_NW:
		p = OVERRIDE_CXX_REAL(nw)(n);
		break;
	case OVERRIDE_CXX_NA:
		p = OVERRIDE_CXX_REAL(na)(n);
		break;
	case OVERRIDE_CXX_NW_AL:
		p = OVERRIDE_CXX_REAL(nw_al)(n, al);
		break;
	default:
		p = OVERRIDE_CXX_REAL(na_al)(n, al);
		break;
	}
	OVERRIDE_CXX_KEEP_FRAME(p);
	return p;
}

/* A nothrow operator new whose allocation failed, or any aligned one given an invalid
 * alignment: the real operator decides (handlers, nullptr, bad_alloc). */
static llgo_noinline llgo_cold void *override_cxx_real(size_t n, size_t al, const void *nt,
						       int op, bool nothrow)
{
	OVERRIDE_CXX_FRAME();
	override_cxx_ready();
	override_cxx_register();
	void *p;
	switch (op) {
	case OVERRIDE_CXX_NW:
		p = nothrow ? OVERRIDE_CXX_REAL(nw_nt)(n, nt) : OVERRIDE_CXX_REAL(nw)(n);
		break;
	case OVERRIDE_CXX_NA:
		p = nothrow ? OVERRIDE_CXX_REAL(na_nt)(n, nt) : OVERRIDE_CXX_REAL(na)(n);
		break;
	case OVERRIDE_CXX_NW_AL:
		p = nothrow ? OVERRIDE_CXX_REAL(nw_al_nt)(n, al, nt) : OVERRIDE_CXX_REAL(nw_al)(n, al);
		break;
	default:
		p = nothrow ? OVERRIDE_CXX_REAL(na_al_nt)(n, al, nt) : OVERRIDE_CXX_REAL(na_al)(n, al);
		break;
	}
	OVERRIDE_CXX_KEEP_FRAME(p);
	return p;
}

/* The allocation of an operator new failed. */
static inline __attribute__((always_inline)) void *
override_cxx_failed(size_t n, size_t al, const void *nt, int op, bool nothrow)
{
	return nothrow ? override_cxx_real(n, al, nt, op, true) : override_cxx_retry(n, al, op);
}

/*
 * The sampled path, entered by a tail call from an operator new (its frame is gone), so this
 * function's saved frame pointer is the program's frame at the call of new and ra the return
 * address into the function that called new. The record carries the size the program asked.
 */
static llgo_noinline llgo_cold void *override_cxx_sampled(size_t n, size_t al, const void *nt,
							  int op, bool nothrow, void *ra)
{
	bool aligned = op == OVERRIDE_CXX_NW_AL || op == OVERRIDE_CXX_NA_AL;
	void *p = sample_new(aligned ? override_cxx_alloc_aligned : override_cxx_alloc_plain, n,
			     aligned ? al : 0, ra, __builtin_frame_address(0));
	if (llgo_unlikely(!p))
		p = override_cxx_failed(n, al, nt, op, nothrow);
	return p;
}

/* A copy that defers to another sampler (owner.c): the next definition of this very operator,
 * by a tail jump, so that the sampler behind it sees the program's call untouched. */
static inline __attribute__((always_inline)) void *
override_cxx_forward(size_t n, size_t al, const void *nt, int op, bool nothrow)
{
	override_cxx_ready();
	switch (op) {
	case OVERRIDE_CXX_NW:
		return nothrow ? OVERRIDE_CXX_REAL(nw_nt)(n, nt) : OVERRIDE_CXX_REAL(nw)(n);
	case OVERRIDE_CXX_NA:
		return nothrow ? OVERRIDE_CXX_REAL(na_nt)(n, nt) : OVERRIDE_CXX_REAL(na)(n);
	case OVERRIDE_CXX_NW_AL:
		return nothrow ? OVERRIDE_CXX_REAL(nw_al_nt)(n, al, nt)
			       : OVERRIDE_CXX_REAL(nw_al)(n, al);
	default:
		return nothrow ? OVERRIDE_CXX_REAL(na_al_nt)(n, al, nt)
			       : OVERRIDE_CXX_REAL(na_al)(n, al);
	}
}

/* The inline mode's operator new; op, aligned and nothrow are constants in each caller. */
static inline __attribute__((always_inline)) void *
override_cxx_new(size_t n, size_t al, const void *nt, int op, bool nothrow)
{
	bool aligned = op == OVERRIDE_CXX_NW_AL || op == OVERRIDE_CXX_NA_AL;
	if (aligned && llgo_unlikely(!override_cxx_pow2(al)))
		return override_cxx_real(n, al, nt, op, nothrow);
	if (llgo_likely(override_pass(n))) {
		void *p = override_cxx_alloc(n, al, aligned);
		if (llgo_likely(p != NULL))
			return p;
		return override_cxx_failed(n, al, nt, op, nothrow);
	}
	if (llgo_unlikely(owner_defers()))
		return override_cxx_forward(n, al, nt, op, nothrow);
	return override_cxx_sampled(n, al, nt, op, nothrow, __builtin_return_address(0));
}

static void *override_cxx_inline_nw(size_t n)
{
	return override_cxx_new(n, 0, NULL, OVERRIDE_CXX_NW, false);
}
static void *override_cxx_inline_na(size_t n)
{
	return override_cxx_new(n, 0, NULL, OVERRIDE_CXX_NA, false);
}
static void *override_cxx_inline_nw_nt(size_t n, const void *nt)
{
	return override_cxx_new(n, 0, nt, OVERRIDE_CXX_NW, true);
}
static void *override_cxx_inline_na_nt(size_t n, const void *nt)
{
	return override_cxx_new(n, 0, nt, OVERRIDE_CXX_NA, true);
}
static void *override_cxx_inline_nw_al(size_t n, size_t al)
{
	return override_cxx_new(n, al, NULL, OVERRIDE_CXX_NW_AL, false);
}
static void *override_cxx_inline_na_al(size_t n, size_t al)
{
	return override_cxx_new(n, al, NULL, OVERRIDE_CXX_NA_AL, false);
}
static void *override_cxx_inline_nw_al_nt(size_t n, size_t al, const void *nt)
{
	return override_cxx_new(n, al, nt, OVERRIDE_CXX_NW_AL, true);
}
static void *override_cxx_inline_na_al_nt(size_t n, size_t al, const void *nt)
{
	return override_cxx_new(n, al, nt, OVERRIDE_CXX_NA_AL, true);
}

/* The inline mode's operators delete: the size, alignment and nothrow tag change nothing. */
static void override_cxx_inline_dl(void *p)
{
	override_cxx_free(p);
}
static void override_cxx_inline_da(void *p)
{
	override_cxx_free(p);
}
static void override_cxx_inline_dl_sz(void *p, size_t n)
{
	(void)n;
	override_cxx_free(p);
}
static void override_cxx_inline_da_sz(void *p, size_t n)
{
	(void)n;
	override_cxx_free(p);
}
static void override_cxx_inline_dl_nt(void *p, const void *nt)
{
	(void)nt;
	override_cxx_free(p);
}
static void override_cxx_inline_da_nt(void *p, const void *nt)
{
	(void)nt;
	override_cxx_free(p);
}
static void override_cxx_inline_dl_al(void *p, size_t al)
{
	(void)al;
	override_cxx_free(p);
}
static void override_cxx_inline_da_al(void *p, size_t al)
{
	(void)al;
	override_cxx_free(p);
}
static void override_cxx_inline_dl_sz_al(void *p, size_t n, size_t al)
{
	(void)n;
	(void)al;
	override_cxx_free(p);
}
static void override_cxx_inline_da_sz_al(void *p, size_t n, size_t al)
{
	(void)n;
	(void)al;
	override_cxx_free(p);
}
static void override_cxx_inline_dl_al_nt(void *p, size_t al, const void *nt)
{
	(void)al;
	(void)nt;
	override_cxx_free(p);
}
static void override_cxx_inline_da_al_nt(void *p, size_t al, const void *nt)
{
	(void)al;
	(void)nt;
	override_cxx_free(p);
}

/* ---- stand-ins, when no C++ runtime can be found ---------------------------------------- */

static llgo_noinline void override_cxx_die(void)
{
	static const char msg[] = "llgo-heap: operator new failed and no C++ runtime to throw\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	abort();
}

static void *override_cxx_none_new(size_t n)
{
	(void)n;
	override_cxx_die();
	return NULL;
}

static void *override_cxx_none_new_nt(size_t n, const void *nt)
{
	(void)n;
	(void)nt;
	return NULL;
}

static void *override_cxx_none_new_al(size_t n, size_t al)
{
	(void)n;
	(void)al;
	override_cxx_die();
	return NULL;
}

static void *override_cxx_none_new_al_nt(size_t n, size_t al, const void *nt)
{
	(void)n;
	(void)al;
	(void)nt;
	return NULL;
}

/* Stand-ins by field (the deletes: the inline ones). */
static const struct override_cxx_ops override_cxx_none = {
	.nw = override_cxx_none_new,
	.na = override_cxx_none_new,
	.nw_nt = override_cxx_none_new_nt,
	.na_nt = override_cxx_none_new_nt,
	.nw_al = override_cxx_none_new_al,
	.na_al = override_cxx_none_new_al,
	.nw_al_nt = override_cxx_none_new_al_nt,
	.na_al_nt = override_cxx_none_new_al_nt,
#define OVERRIDE_CXX_INLINE_INIT(sym, field, params, args) .field = override_cxx_inline_##field,
	OVERRIDE_CXX_DELETES(OVERRIDE_CXX_INLINE_INIT)
};

static const struct override_cxx_ops override_cxx_inline = {
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_INLINE_INIT) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_INLINE_INIT)
#undef OVERRIDE_CXX_INLINE_INIT
};

#define OVERRIDE_CXX_NEW_BOOT(sym, field, params, args) \
	static void *override_cxx_boot_##field params \
	{ \
		override_cxx_resolve(); \
		return __atomic_load_n(&override_cxx.field, __ATOMIC_RELAXED) args; \
	}
#define OVERRIDE_CXX_DEL_BOOT(sym, field, params, args) \
	static void override_cxx_boot_##field params \
	{ \
		override_cxx_resolve(); \
		__atomic_load_n(&override_cxx.field, __ATOMIC_RELAXED) args; \
	}
OVERRIDE_CXX_NEWS(OVERRIDE_CXX_NEW_BOOT)
OVERRIDE_CXX_DELETES(OVERRIDE_CXX_DEL_BOOT)

/* ---- the exported operators: one jump each ------------------------------------------------ */

#define OVERRIDE_CXX_NEW_EXPORT(sym, field, params, args) \
	llgo_export void *sym params \
	{ \
		return __atomic_load_n(&override_cxx.field, __ATOMIC_RELAXED) args; \
	}
#define OVERRIDE_CXX_DEL_EXPORT(sym, field, params, args) \
	llgo_export void sym params \
	{ \
		__atomic_load_n(&override_cxx.field, __ATOMIC_RELAXED) args; \
	}
OVERRIDE_CXX_NEWS(OVERRIDE_CXX_NEW_EXPORT)
OVERRIDE_CXX_DELETES(OVERRIDE_CXX_DEL_EXPORT)

/* The shim's own definitions, by hidden aliases: taking the address of an exported symbol in
 * position-independent code yields the program-wide one, which may be a replacement. */
#define OVERRIDE_CXX_SELF(sym, field, params, args) \
	extern __typeof__(sym) override_cxx_self_##field __attribute__((alias(#sym))) llgo_hidden;
OVERRIDE_CXX_NEWS(OVERRIDE_CXX_SELF)
OVERRIDE_CXX_DELETES(OVERRIDE_CXX_SELF)

/* ---- resolving ---------------------------------------------------------------------------- */

/* Register the next operators new as plumbing (stack.c) so that a sample taken inside one
 * starts at its caller. dladdr1 scans the defining object's symbol table (about 0.1 million
 * instructions per call in libstdc++), so the inline mode, where the real operators run only
 * after a failed allocation, registers them on its first failure instead of at start-up. */
static void override_cxx_register(void)
{
	int expect = 0;
	if (!atomic_compare_exchange_strong_explicit(&override_cxx_registered, &expect, 1,
						     memory_order_relaxed, memory_order_relaxed))
		return;
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1; /* dladdr1 may allocate: never sample that */
	void *fns[] = {
#define OVERRIDE_CXX_FN(sym, field, params, args) (void *)override_cxx_next.field,
		OVERRIDE_CXX_NEWS(OVERRIDE_CXX_FN)
#undef OVERRIDE_CXX_FN
	};
	for (size_t i = 0; i < LLGO_ARRAY_SIZE(fns); i++) {
		Dl_info di;
		const ElfW(Sym) *sym = NULL;
		if (!dladdr1(fns[i], &di, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
		    !sym->st_size || !di.dli_saddr ||
		    di.dli_fbase == override_cxx_self()) /* a stand-in: the shim's own */
			continue;
		stack_add_range((uintptr_t)di.dli_saddr, (uintptr_t)di.dli_saddr + sym->st_size);
	}
	t->guard = guard;
}

/* The shim's load address (to recognise its own definitions). */
static void *override_cxx_self(void)
{
	Dl_info di;
	if (!dladdr((void *)(uintptr_t)override_cxx_die, &di))
		return NULL;
	return di.dli_fbase;
}

/* Every operator and std::get_new_handler are those of the libstdc++.so.6 that is loaded (a
 * hash lookup per symbol in that object: dlsym on its handle starts with the object). */
static bool override_cxx_is_libstdcxx(const struct override_cxx_ops *raw, void *get_handler)
{
	void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
	if (!lib)
		return false;
	bool same = get_handler && dlsym(lib, "_ZSt15get_new_handlerv") == get_handler;
#define OVERRIDE_CXX_SAME(sym, field, params, args) \
	same = same && raw->field && dlsym(lib, #sym) == (void *)raw->field;
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_SAME) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_SAME)
#undef OVERRIDE_CXX_SAME
	dlclose(lib); /* the NOLOAD reference only: libstdc++ stays loaded */
	return same;
}

/* name resolves, for the program, to the shim's own definition. dladdr scans the defining
 * object's symbols: few when it is the shim. */
static bool override_cxx_mine(const char *name, void *self)
{
	Dl_info di;
	void *f = dlsym(RTLD_DEFAULT, name);
	return f && dladdr(f, &di) && di.dli_fbase == self;
}

/*
 * libstdc++'s operators would not do what the inline mode does: some operator resolves, for
 * the program, to a definition other than the shim's own (its hidden alias), a replacement
 * that libstdc++'s other operators call; or malloc, free or aligned_alloc, which libstdc++'s
 * operators call through their PLT, are not the shim's (an allocator preloaded before it, or
 * defined by the program), so the shim's real ones would be a different heap.
 */
static bool override_cxx_replaced(void)
{
	bool replaced = false;
#define OVERRIDE_CXX_MINE(sym, field, params, args) \
	replaced = replaced || \
		   dlsym(RTLD_DEFAULT, #sym) != (void *)(uintptr_t)override_cxx_self_##field;
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_MINE) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_MINE)
#undef OVERRIDE_CXX_MINE
	if (replaced)
		return true;
	void *self = override_cxx_self();
	return !override_cxx_mine("malloc", self) || !override_cxx_mine("free", self) ||
	       !override_cxx_mine("aligned_alloc", self);
}

/* The next definitions raw (a missing one: its stand-in), std::get_new_handler, then every
 * entry: the inline mode's operator, or (forward mode) the next definition itself. */
static void override_cxx_install(const struct override_cxx_ops *raw, void *gnh, bool inline_mode)
{
#define OVERRIDE_CXX_SET_NEXT(sym, field, params, args) \
	__atomic_store_n(&override_cxx_next.field, \
			 raw->field ? raw->field : override_cxx_none.field, __ATOMIC_RELAXED);
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_SET_NEXT) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_SET_NEXT)
#undef OVERRIDE_CXX_SET_NEXT
	__atomic_store_n(&override_cxx_get_handler, (override_cxx_handler(*)(void))gnh,
			 __ATOMIC_RELAXED);
	atomic_store_explicit(&override_cxx_resolved, 1, memory_order_release);
#define OVERRIDE_CXX_SET_ENTRY(sym, field, params, args) \
	__atomic_store_n(&override_cxx.field, \
			 inline_mode || !raw->field ? override_cxx_inline.field : raw->field, \
			 __ATOMIC_RELEASE);
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_SET_ENTRY) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_SET_ENTRY)
#undef OVERRIDE_CXX_SET_ENTRY
}

/*
 * Find the next definitions and install a mode. Returns false, installing nothing, when no
 * C++ runtime is found and !always (the constructor: a C program may dlopen one later); the
 * first call of an operator passes always. Every caller resolves (the values are the same, and
 * waiting for another resolver could deadlock: a thread inside dlopen holds the loader lock
 * that dlsym takes). The next definitions are the ones after the shim in the global scope;
 * failing that (a C program that dlopened a C++ library RTLD_LOCAL), a libstdc++ that is
 * loaded anywhere.
 */
static bool override_cxx_setup(bool always)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1; /* dlsym, dladdr and dlopen may allocate: never sample that */
	/* At load, a program with no C++ runtime in its global scope (most C programs, every
	 * shell) pays one lookup, not one per operator and a dlopen that searches the library
	 * path: a runtime dlopened later is found at its first new (always). */
	if (!always && !dlsym(RTLD_NEXT, "_Znwm")) {
		t->guard = guard;
		return false;
	}
	struct override_cxx_ops raw;
	bool any = false;
#define OVERRIDE_CXX_NEXT(sym, field, params, args) \
	raw.field = (__typeof__(raw.field))dlsym(RTLD_NEXT, #sym); \
	any = any || raw.field;
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_NEXT) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_NEXT)
#undef OVERRIDE_CXX_NEXT
	void *gnh = dlsym(RTLD_NEXT, "_ZSt15get_new_handlerv");
	if (!any) {
		void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
		if (lib) { /* kept open: its operators stay in use */
#define OVERRIDE_CXX_LIB(sym, field, params, args) \
	raw.field = (__typeof__(raw.field))dlsym(lib, #sym); \
	any = any || raw.field;
			OVERRIDE_CXX_NEWS(OVERRIDE_CXX_LIB) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_LIB)
#undef OVERRIDE_CXX_LIB
			gnh = dlsym(lib, "_ZSt15get_new_handlerv");
		}
	}
	if (!any && !always) {
		t->guard = guard;
		return false;
	}
	bool inline_mode = true;
	if (!any)
		gnh = NULL;
	else
		inline_mode = override_cxx_is_libstdcxx(&raw, gnh) && !override_cxx_replaced();
	override_cxx_install(&raw, gnh, inline_mode);
	t->guard = guard;
	if (!inline_mode)
		override_cxx_register();
	return true;
}

static llgo_noinline void override_cxx_resolve(void)
{
	override_cxx_setup(true);
}

/* The operators' names, for llgo-heap attach (override_got.c). */
static const char *const override_cxx_names[] = {
#define OVERRIDE_CXX_NAME(sym, field, params, args) #sym,
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_NAME) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_NAME)
#undef OVERRIDE_CXX_NAME
};

/*
 * llgo-heap attach: the operators the process's modules bind to (definition(name)) are
 * libstdc++'s own, none replaced: install the inline mode with those as the next definitions
 * (the real malloc, free and aligned_alloc are already the process's: override_got.c), so that
 * the modules' GOT entries of the operators can lead here, as under LD_PRELOAD. Otherwise
 * (no C++ runtime, a replaced operator, another allocator's) nothing changes and false: the
 * operators keep calling malloc and free, which are routed. *names: the 20 operators.
 */
bool override_cxx_attach(void *(*definition)(const char *name), const char *const **names,
			 size_t *n)
{
	*names = override_cxx_names;
	*n = LLGO_ARRAY_SIZE(override_cxx_names);
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1; /* dlopen, dlsym may allocate */
	struct override_cxx_ops raw;
	bool all = true;
#define OVERRIDE_CXX_DEF(sym, field, params, args) \
	raw.field = (__typeof__(raw.field))definition(#sym); \
	all = all && raw.field;
	OVERRIDE_CXX_NEWS(OVERRIDE_CXX_DEF) OVERRIDE_CXX_DELETES(OVERRIDE_CXX_DEF)
#undef OVERRIDE_CXX_DEF
	void *gnh = definition("_ZSt15get_new_handlerv");
	bool ok = all && gnh && override_cxx_is_libstdcxx(&raw, gnh);
	t->guard = guard;
	if (ok)
		override_cxx_install(&raw, gnh, true);
	return ok;
}

/* At load, when the program links a C++ runtime: resolving then keeps the dladdr and dlsym
 * calls out of the program's first new. After the malloc family (101) and attach (102). */
__attribute__((constructor(103))) static void override_cxx_init(void)
{
	if (!atomic_load_explicit(&override_cxx_resolved, memory_order_acquire))
		override_cxx_setup(false);
}
