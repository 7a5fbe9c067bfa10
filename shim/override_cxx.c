// SPDX-License-Identifier: MIT
/*
 * override_cxx.c: C++ operator new and delete, every variant (plain, nothrow, aligned,
 * aligned nothrow, sized, sized aligned), in plain C under their x86-64 Itanium-ABI mangled
 * names (size_t is `m`, std::align_val_t `St11align_val_t`, std::nothrow_t const&
 * `RKSt9nothrow_t`). Part of libllgoheap.so only.
 *
 * Each operator new wrapper keeps a frame and CALLS the real operator (found lazily with
 * dlsym(RTLD_NEXT), under the re-entrancy guard), so exceptions, the new_handler loop and
 * nothrow behaviour are exactly the real library's; the real operator calls malloc or
 * aligned_alloc, which sample. Debian's libstdc++ is built without frame pointers and its
 * aligned operator new uses rbp as a plain register, so a walk from inside it can lose the
 * program's frames: the outermost wrapper in progress stores its own frame in the thread's
 * cxx_frame, and a sample whose frame 0 lies inside a real operator new walks from there
 * (stack.c). Its first frame is then the wrapper's return address: the program's call site.
 * The wrapper also stores the size it was asked (cxx_size), which the sample records:
 * libstdc++'s aligned new rounds the size up to the alignment before calling aligned_alloc.
 * A wrapper called from a real operator or from another wrapper (new[] calling new) leaves
 * cxx_frame alone. If the real operator throws, cxx_frame keeps a stale value until the next
 * outermost wrapper overwrites it; it is only read while a wrapper is in progress.
 *
 * The real operators' extents (dladdr1 RTLD_DL_SYMENT) are registered as plumbing for
 * trimming. Delete variants forward to the real ones. Without a C++ runtime to forward to,
 * new falls back to malloc/posix_memalign (abort() where the throwing variant would throw)
 * and delete to free.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

typedef void *(*cxx_new_fn)(size_t);
typedef void *(*cxx_new_nt_fn)(size_t, const void *);
typedef void *(*cxx_new_al_fn)(size_t, size_t);
typedef void *(*cxx_new_al_nt_fn)(size_t, size_t, const void *);
typedef void (*cxx_del_fn)(void *);
typedef void (*cxx_del_sz_fn)(void *, size_t);
typedef void (*cxx_del_nt_fn)(void *, const void *);
typedef void (*cxx_del_sz_al_fn)(void *, size_t, size_t);
typedef void (*cxx_del_al_nt_fn)(void *, size_t, const void *);

/* ---- fallbacks -------------------------------------------------------------------------- */

static llgo_noinline void override_cxx_die(void)
{
	static const char msg[] = "llgo-heap: operator new failed and no C++ runtime to throw\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	abort();
}

static void *override_cxx_fb_new(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		override_cxx_die();
	return p;
}

static void *override_cxx_fb_new_nt(size_t n, const void *nt)
{
	(void)nt;
	return malloc(n ? n : 1);
}

static void *override_cxx_fb_new_al_nt(size_t n, size_t al, const void *nt)
{
	(void)nt;
	void *p = NULL;
	if (posix_memalign(&p, al < sizeof(void *) ? sizeof(void *) : al, n ? n : 1) != 0)
		return NULL;
	return p;
}

static void *override_cxx_fb_new_al(size_t n, size_t al)
{
	void *p = override_cxx_fb_new_al_nt(n, al, NULL);
	if (!p)
		override_cxx_die();
	return p;
}

static void override_cxx_fb_del(void *p)
{
	free(p);
}

static void override_cxx_fb_del_sz(void *p, size_t n)
{
	(void)n;
	free(p);
}

static void override_cxx_fb_del_nt(void *p, const void *nt)
{
	(void)nt;
	free(p);
}

static void override_cxx_fb_del_sz_al(void *p, size_t n, size_t al)
{
	(void)n;
	(void)al;
	free(p);
}

static void override_cxx_fb_del_al_nt(void *p, size_t al, const void *nt)
{
	(void)al;
	(void)nt;
	free(p);
}

/* ---- the real operators ----------------------------------------------------------------- */

/* X(symbol, field, type, fallback, is an operator new: a plumbing range to register) */
#define OVERRIDE_CXX_OPS(X) \
	X(_Znwm, nw, cxx_new_fn, override_cxx_fb_new, 1) \
	X(_Znam, na, cxx_new_fn, override_cxx_fb_new, 1) \
	X(_ZnwmRKSt9nothrow_t, nw_nt, cxx_new_nt_fn, override_cxx_fb_new_nt, 1) \
	X(_ZnamRKSt9nothrow_t, na_nt, cxx_new_nt_fn, override_cxx_fb_new_nt, 1) \
	X(_ZnwmSt11align_val_t, nw_al, cxx_new_al_fn, override_cxx_fb_new_al, 1) \
	X(_ZnamSt11align_val_t, na_al, cxx_new_al_fn, override_cxx_fb_new_al, 1) \
	X(_ZnwmSt11align_val_tRKSt9nothrow_t, nw_al_nt, cxx_new_al_nt_fn, \
	  override_cxx_fb_new_al_nt, 1) \
	X(_ZnamSt11align_val_tRKSt9nothrow_t, na_al_nt, cxx_new_al_nt_fn, \
	  override_cxx_fb_new_al_nt, 1) \
	X(_ZdlPv, dl, cxx_del_fn, override_cxx_fb_del, 0) \
	X(_ZdaPv, da, cxx_del_fn, override_cxx_fb_del, 0) \
	X(_ZdlPvm, dl_sz, cxx_del_sz_fn, override_cxx_fb_del_sz, 0) \
	X(_ZdaPvm, da_sz, cxx_del_sz_fn, override_cxx_fb_del_sz, 0) \
	X(_ZdlPvRKSt9nothrow_t, dl_nt, cxx_del_nt_fn, override_cxx_fb_del_nt, 0) \
	X(_ZdaPvRKSt9nothrow_t, da_nt, cxx_del_nt_fn, override_cxx_fb_del_nt, 0) \
	X(_ZdlPvSt11align_val_t, dl_al, cxx_del_sz_fn, override_cxx_fb_del_sz, 0) \
	X(_ZdaPvSt11align_val_t, da_al, cxx_del_sz_fn, override_cxx_fb_del_sz, 0) \
	X(_ZdlPvmSt11align_val_t, dl_sz_al, cxx_del_sz_al_fn, override_cxx_fb_del_sz_al, 0) \
	X(_ZdaPvmSt11align_val_t, da_sz_al, cxx_del_sz_al_fn, override_cxx_fb_del_sz_al, 0) \
	X(_ZdlPvSt11align_val_tRKSt9nothrow_t, dl_al_nt, cxx_del_al_nt_fn, \
	  override_cxx_fb_del_al_nt, 0) \
	X(_ZdaPvSt11align_val_tRKSt9nothrow_t, da_al_nt, cxx_del_al_nt_fn, \
	  override_cxx_fb_del_al_nt, 0)

/* Bootstrap stubs (defined below): resolve everything, then call the real operator. */
static void *override_cxx_boot_nw(size_t n);
static void *override_cxx_boot_na(size_t n);
static void *override_cxx_boot_nw_nt(size_t n, const void *nt);
static void *override_cxx_boot_na_nt(size_t n, const void *nt);
static void *override_cxx_boot_nw_al(size_t n, size_t al);
static void *override_cxx_boot_na_al(size_t n, size_t al);
static void *override_cxx_boot_nw_al_nt(size_t n, size_t al, const void *nt);
static void *override_cxx_boot_na_al_nt(size_t n, size_t al, const void *nt);
static void override_cxx_boot_dl(void *p);
static void override_cxx_boot_da(void *p);
static void override_cxx_boot_dl_sz(void *p, size_t n);
static void override_cxx_boot_da_sz(void *p, size_t n);
static void override_cxx_boot_dl_nt(void *p, const void *nt);
static void override_cxx_boot_da_nt(void *p, const void *nt);
static void override_cxx_boot_dl_al(void *p, size_t al);
static void override_cxx_boot_da_al(void *p, size_t al);
static void override_cxx_boot_dl_sz_al(void *p, size_t n, size_t al);
static void override_cxx_boot_da_sz_al(void *p, size_t n, size_t al);
static void override_cxx_boot_dl_al_nt(void *p, size_t al, const void *nt);
static void override_cxx_boot_da_al_nt(void *p, size_t al, const void *nt);

/* Read with plain loads; written by resolvers with aligned pointer stores of equal values. */
static struct {
#define X(sym, field, type, fb, isnew) type field;
	OVERRIDE_CXX_OPS(X)
#undef X
} override_cxx = {
#define X(sym, field, type, fb, isnew) .field = override_cxx_boot_##field,
	OVERRIDE_CXX_OPS(X)
#undef X
};

/* Set by the first resolver, the one that registers the plumbing ranges. */
static _Atomic int override_cxx_registered;
/* Bounding boxes for the wrappers' "called by plumbing" test: the shim's text (set by the
 * constructor) and the real operators new (set when resolved). */
static uintptr_t override_cxx_text_lo, override_cxx_text_hi;
static _Atomic uintptr_t override_cxx_real_lo = UINTPTR_MAX, override_cxx_real_hi;

static void override_cxx_register(void *fn)
{
	Dl_info di;
	const ElfW(Sym) *sym = NULL;
	if (!dladdr1(fn, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size ||
	    !di.dli_saddr)
		return;
	uintptr_t lo = (uintptr_t)di.dli_saddr, hi = lo + sym->st_size;
	if (stack_add_cxx_range(lo, hi) != 0)
		return;
	if (lo < atomic_load_explicit(&override_cxx_real_lo, memory_order_relaxed))
		atomic_store_explicit(&override_cxx_real_lo, lo, memory_order_relaxed);
	if (hi > atomic_load_explicit(&override_cxx_real_hi, memory_order_relaxed))
		atomic_store_explicit(&override_cxx_real_hi, hi, memory_order_relaxed);
}

/*
 * Every caller resolves (the values are the same, and waiting for another resolver could
 * deadlock: a thread inside dlopen holds the loader lock that dlsym takes); only the first
 * registers the ranges.
 */
static llgo_noinline void override_cxx_resolve(void)
{
	int expect = 0;
	bool reg = atomic_compare_exchange_strong_explicit(&override_cxx_registered, &expect, 1,
							   memory_order_relaxed,
							   memory_order_relaxed);
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1; /* dlsym and dladdr1 may allocate: never sample that */
	void *f;
#define X(sym, field, type, fb, isnew) \
	f = dlsym(RTLD_NEXT, #sym); \
	if (reg && f && (isnew)) \
		override_cxx_register(f); \
	__atomic_store_n(&override_cxx.field, f ? (type)f : (fb), __ATOMIC_RELEASE);
	OVERRIDE_CXX_OPS(X)
#undef X
	t->guard = guard;
}

static void *override_cxx_boot_nw(size_t n)
{
	override_cxx_resolve();
	return override_cxx.nw(n);
}
static void *override_cxx_boot_na(size_t n)
{
	override_cxx_resolve();
	return override_cxx.na(n);
}
static void *override_cxx_boot_nw_nt(size_t n, const void *nt)
{
	override_cxx_resolve();
	return override_cxx.nw_nt(n, nt);
}
static void *override_cxx_boot_na_nt(size_t n, const void *nt)
{
	override_cxx_resolve();
	return override_cxx.na_nt(n, nt);
}
static void *override_cxx_boot_nw_al(size_t n, size_t al)
{
	override_cxx_resolve();
	return override_cxx.nw_al(n, al);
}
static void *override_cxx_boot_na_al(size_t n, size_t al)
{
	override_cxx_resolve();
	return override_cxx.na_al(n, al);
}
static void *override_cxx_boot_nw_al_nt(size_t n, size_t al, const void *nt)
{
	override_cxx_resolve();
	return override_cxx.nw_al_nt(n, al, nt);
}
static void *override_cxx_boot_na_al_nt(size_t n, size_t al, const void *nt)
{
	override_cxx_resolve();
	return override_cxx.na_al_nt(n, al, nt);
}
static void override_cxx_boot_dl(void *p)
{
	override_cxx_resolve();
	override_cxx.dl(p);
}
static void override_cxx_boot_da(void *p)
{
	override_cxx_resolve();
	override_cxx.da(p);
}
static void override_cxx_boot_dl_sz(void *p, size_t n)
{
	override_cxx_resolve();
	override_cxx.dl_sz(p, n);
}
static void override_cxx_boot_da_sz(void *p, size_t n)
{
	override_cxx_resolve();
	override_cxx.da_sz(p, n);
}
static void override_cxx_boot_dl_nt(void *p, const void *nt)
{
	override_cxx_resolve();
	override_cxx.dl_nt(p, nt);
}
static void override_cxx_boot_da_nt(void *p, const void *nt)
{
	override_cxx_resolve();
	override_cxx.da_nt(p, nt);
}
static void override_cxx_boot_dl_al(void *p, size_t al)
{
	override_cxx_resolve();
	override_cxx.dl_al(p, al);
}
static void override_cxx_boot_da_al(void *p, size_t al)
{
	override_cxx_resolve();
	override_cxx.da_al(p, al);
}
static void override_cxx_boot_dl_sz_al(void *p, size_t n, size_t al)
{
	override_cxx_resolve();
	override_cxx.dl_sz_al(p, n, al);
}
static void override_cxx_boot_da_sz_al(void *p, size_t n, size_t al)
{
	override_cxx_resolve();
	override_cxx.da_sz_al(p, n, al);
}
static void override_cxx_boot_dl_al_nt(void *p, size_t al, const void *nt)
{
	override_cxx_resolve();
	override_cxx.dl_al_nt(p, al, nt);
}
static void override_cxx_boot_da_al_nt(void *p, size_t al, const void *nt)
{
	override_cxx_resolve();
	override_cxx.da_al_nt(p, al, nt);
}

__attribute__((constructor(103))) static void override_cxx_init(void)
{
	stack_init();
	stack_shim_text(&override_cxx_text_lo, &override_cxx_text_hi);
}

/* ---- the wrappers ----------------------------------------------------------------------- */

/* The wrapper was called by the program, not by a real operator or another wrapper. */
static inline __attribute__((always_inline)) bool override_cxx_outer(uintptr_t ra)
{
	uintptr_t at = ra - 1;
	if (at - override_cxx_text_lo < override_cxx_text_hi - override_cxx_text_lo)
		return false;
	if (at >= atomic_load_explicit(&override_cxx_real_lo, memory_order_relaxed) &&
	    at < atomic_load_explicit(&override_cxx_real_hi, memory_order_relaxed))
		return !stack_is_cxx_operator(ra);
	return true;
}

/* The asm uses p after the call, so the call cannot become a tail jump: the wrapper's frame
 * stays on the stack while the real operator runs. */
#define OVERRIDE_CXX_NEW(sym, field, params, args) \
	llgo_export void *sym params \
	{ \
		struct llgo_heap_thread *t = &llgo_heap_tls; \
		bool outer = override_cxx_outer((uintptr_t)__builtin_return_address(0)); \
		if (outer) { \
			t->cxx_frame = (uintptr_t)__builtin_frame_address(0); \
			t->cxx_size = n; \
		} \
		void *p = override_cxx.field args; \
		if (outer) \
			t->cxx_frame = 0; \
		__asm__ volatile("" : : "r"(p) : "memory"); \
		return p; \
	}

OVERRIDE_CXX_NEW(_Znwm, nw, (size_t n), (n))
OVERRIDE_CXX_NEW(_Znam, na, (size_t n), (n))
OVERRIDE_CXX_NEW(_ZnwmRKSt9nothrow_t, nw_nt, (size_t n, const void *nt), (n, nt))
OVERRIDE_CXX_NEW(_ZnamRKSt9nothrow_t, na_nt, (size_t n, const void *nt), (n, nt))
OVERRIDE_CXX_NEW(_ZnwmSt11align_val_t, nw_al, (size_t n, size_t al), (n, al))
OVERRIDE_CXX_NEW(_ZnamSt11align_val_t, na_al, (size_t n, size_t al), (n, al))
OVERRIDE_CXX_NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, nw_al_nt,
		 (size_t n, size_t al, const void *nt), (n, al, nt))
OVERRIDE_CXX_NEW(_ZnamSt11align_val_tRKSt9nothrow_t, na_al_nt,
		 (size_t n, size_t al, const void *nt), (n, al, nt))

#define OVERRIDE_CXX_DELETE(sym, field, params, args) \
	llgo_export void sym params \
	{ \
		override_cxx.field args; \
	}

OVERRIDE_CXX_DELETE(_ZdlPv, dl, (void *p), (p))
OVERRIDE_CXX_DELETE(_ZdaPv, da, (void *p), (p))
OVERRIDE_CXX_DELETE(_ZdlPvm, dl_sz, (void *p, size_t n), (p, n))
OVERRIDE_CXX_DELETE(_ZdaPvm, da_sz, (void *p, size_t n), (p, n))
OVERRIDE_CXX_DELETE(_ZdlPvRKSt9nothrow_t, dl_nt, (void *p, const void *nt), (p, nt))
OVERRIDE_CXX_DELETE(_ZdaPvRKSt9nothrow_t, da_nt, (void *p, const void *nt), (p, nt))
OVERRIDE_CXX_DELETE(_ZdlPvSt11align_val_t, dl_al, (void *p, size_t al), (p, al))
OVERRIDE_CXX_DELETE(_ZdaPvSt11align_val_t, da_al, (void *p, size_t al), (p, al))
OVERRIDE_CXX_DELETE(_ZdlPvmSt11align_val_t, dl_sz_al, (void *p, size_t n, size_t al),
		    (p, n, al))
OVERRIDE_CXX_DELETE(_ZdaPvmSt11align_val_t, da_sz_al, (void *p, size_t n, size_t al),
		    (p, n, al))
OVERRIDE_CXX_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, dl_al_nt,
		    (void *p, size_t al, const void *nt), (p, al, nt))
OVERRIDE_CXX_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, da_al_nt,
		    (void *p, size_t al, const void *nt), (p, al, nt))
