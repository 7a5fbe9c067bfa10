// SPDX-License-Identifier: MIT
/*
 * override.c: the libc allocation functions of libllgoheap.so (LD_PRELOAD) and their fast
 * path. Everything else of the shim is reached from here only through the noinline slow
 * paths of sample.c. Also part of libllgoheap.a (weak there, Makefile): a dynamic executable
 * that links the archive exports these and is profiled as under LD_PRELOAD. A copy that
 * defers to another sampler (owner.c; e.g. that executable run under the preloaded shim,
 * whose malloc comes after the program's in the lookup order) passes every call to the next
 * definition on its slow branch, by the same tail jump as the fast path.
 *
 * Fast path (the product: its cost is paid by every allocation of a profiled program):
 *   ctl.rate_word compared with 0 in memory (one `cmpq $0, rate(%rip)`: a relaxed load)
 *   == 0 -> tail-call the real function             (rate 0: cmp, jg, jne + the jmp)
 *   <  0 -> slow path (every allocation is recorded)
 *   >  0 -> countdown -= size in the one TLS variable (initial-exec); <= 0 -> slow path,
 *           else tail-call the real function        (cmp, jg, the TLS offset load, sub, jle
 *                                                     + the jmp)
 * free is one indirect jmp through override_free_entry: the real free while no sampled object
 * is tracked; then override_free_paged (a test of the low 12 bits, a branch, the jmp: only
 * page-aligned pointers may be tracked, live.c), or override_free_all once rate 1 tracked
 * objects anywhere. realloc and malloc_usable_size test p against live_mask (one `test`
 * with the mask in memory, a branch). The functions stay frameless (check with objdump -d:
 * gcc shrink-wraps the frame into the slow branch), so the slow path, entered by a
 * tail call, finds the program's frame as its own saved frame pointer and the program's call
 * site as its return address. On x86-64 the countdown update is one `sub %reg, %fs:(..)` whose
 * flags feed the branch, and the rate test one compare with memory (inline asm; gcc otherwise
 * adds a load, a store and a test); other targets use plain C.
 *
 * The real functions come from dlsym(RTLD_NEXT) (the next definition after the shim, usually
 * glibc's, but also a malloc replacement loaded after us). Their pointers start at bootstrap
 * functions, so the fast path never tests for NULL: the first call (or the constructor)
 * resolves them all. dlsym may itself allocate; those calls are served from a small static
 * pool (zeroed, never reused) while the calling thread resolves. If the pool was used, free,
 * realloc and malloc_usable_size go through pool-aware variants that recognise pool pointers;
 * otherwise they jump straight to the real functions.
 *
 * Behaviour is never changed: sizes, alignment, zeroing, usable sizes, errno and failures are
 * the real allocator's (the slow paths restore errno after recording).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

typedef void *(*override_malloc_fn)(size_t);
typedef void (*override_free_fn)(void *);
typedef void *(*override_calloc_fn)(size_t, size_t);
typedef void *(*override_realloc_fn)(void *, size_t);
typedef int (*override_posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*override_memalign_fn)(size_t, size_t);
typedef size_t (*override_usable_fn)(void *);

/* glibc's own entry points, for the unlikely case dlsym finds nothing. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

/* Every read of a function pointer is atomic (relaxed: a plain mov), as are its writes. */
#define OVERRIDE_LOAD(var) __atomic_load_n(&(var), __ATOMIC_RELAXED)

/* ---- bootstrap pool -------------------------------------------------------------------- */

#define OVERRIDE_POOL_SIZE (64u << 10)
#define OVERRIDE_POOL_HDR 16u

static unsigned char override_pool[OVERRIDE_POOL_SIZE] llgo_aligned(64);
static _Atomic size_t override_pool_top;

static inline bool override_in_pool(const void *p)
{
	return (uintptr_t)p - (uintptr_t)override_pool < OVERRIDE_POOL_SIZE;
}

static size_t override_pool_size(const void *p)
{
	size_t n;
	memcpy(&n, (const unsigned char *)p - sizeof(size_t), sizeof(n));
	return n;
}

static void override_pool_used(void);

/* Bump allocation; memory is zero (static) and never reused. */
static void *override_pool_alloc(size_t size, size_t align)
{
	if (align < OVERRIDE_POOL_HDR)
		align = OVERRIDE_POOL_HDR;
	if ((align & (align - 1)) || align > 4096 || size > OVERRIDE_POOL_SIZE) {
		errno = ENOMEM;
		return NULL;
	}
	size_t top = atomic_load_explicit(&override_pool_top, memory_order_relaxed);
	size_t start, end;
	do {
		uintptr_t at = (uintptr_t)override_pool + top + OVERRIDE_POOL_HDR;
		start = ((at + align - 1) & ~(uintptr_t)(align - 1)) - (uintptr_t)override_pool;
		end = start + size;
		if (end > OVERRIDE_POOL_SIZE) {
			errno = ENOMEM;
			return NULL;
		}
	} while (!atomic_compare_exchange_weak_explicit(&override_pool_top, &top, end,
							memory_order_relaxed,
							memory_order_relaxed));
	unsigned char *p = override_pool + start;
	memcpy(p - sizeof(size_t), &size, sizeof(size));
	override_pool_used();
	return p;
}

/* ---- real functions -------------------------------------------------------------------- */

static void *override_boot_malloc(size_t size);
static void override_boot_free(void *p);
static void *override_boot_calloc(size_t n, size_t size);
static void *override_boot_realloc(void *p, size_t size);
static int override_boot_posix_memalign(void **pp, size_t align, size_t size);
static void *override_boot_aligned_alloc(size_t align, size_t size);
static void *override_boot_memalign(size_t align, size_t size);
static void *override_boot_valloc(size_t size);
static void *override_boot_pvalloc(size_t size);
static size_t override_boot_usable(void *p);

/*
 * Read by the fast paths with relaxed atomic loads (one `jmp *ptr(%rip)`); written only while
 * resolving, at startup, with atomic stores, so a reader sees either the bootstrap function
 * or the final one, both correct.
 */
override_malloc_fn override_malloc = override_boot_malloc;
override_free_fn override_free = override_boot_free;
static override_calloc_fn override_calloc = override_boot_calloc;
static override_realloc_fn override_realloc = override_boot_realloc;
static override_posix_memalign_fn override_posix_memalign = override_boot_posix_memalign;
override_memalign_fn override_aligned_alloc = override_boot_aligned_alloc;
static override_memalign_fn override_memalign = override_boot_memalign;
static override_malloc_fn override_valloc = override_boot_valloc;
static override_malloc_fn override_pvalloc = override_boot_pvalloc;
static override_usable_fn override_usable = override_boot_usable;

/* free's entry (see the top of this file): override_free's value (the bootstrap function, the
 * real free, or the pool-aware free) while nothing is tracked, then override_free_paged,
 * then override_free_all. It only moves up that order (override_free_raise), except that
 * the untracked level follows override_free. */
static void override_free_paged(void *p);
static void override_free_all(void *p);
override_free_fn override_free_entry = override_boot_free;

static int override_free_level(override_free_fn f)
{
	return f == override_free_all ? 2 : f == override_free_paged ? 1 : 0;
}

/* Install f in free's entry unless the entry is at a higher level already (an untracked
 * entry is replaced by another untracked one only if from is its current value, or any
 * when from is NULL). */
static void override_free_raise(override_free_fn from, override_free_fn f)
{
	override_free_fn cur = __atomic_load_n(&override_free_entry, __ATOMIC_RELAXED);
	for (;;) {
		int lc = override_free_level(cur), lf = override_free_level(f);
		if (lc > lf || cur == f || (lc == 0 && lf == 0 && from && cur != from))
			return;
		if (__atomic_compare_exchange_n(&override_free_entry, &cur, f, false,
						__ATOMIC_RELEASE, __ATOMIC_RELAXED))
			return;
	}
}

/* live.c's mask lost bits (a sampled object is about to be tracked): free must look. The
 * entry is stored before that object is handed to the program, so whatever hands the
 * pointer to a freeing thread orders this store before that thread's free. */
static void override_free_on_mask(uintptr_t mask)
{
	override_free_raise(NULL, mask == 0 ? override_free_all : override_free_paged);
}

/* The real free, realloc and malloc_usable_size, behind the pool-aware variants. */
static override_free_fn override_libc_free;
static override_realloc_fn override_libc_realloc;
static override_usable_fn override_libc_usable;

static void override_pool_free(void *p)
{
	override_free_fn f = __atomic_load_n(&override_libc_free, __ATOMIC_ACQUIRE);
	if (override_in_pool(p))
		return;
	if (f)
		f(p); /* else: freed while this thread resolves (in dlsym); leaked, harmless */
}

static void *override_pool_realloc(void *p, size_t size)
{
	override_realloc_fn r = __atomic_load_n(&override_libc_realloc, __ATOMIC_ACQUIRE);
	if (!override_in_pool(p))
		return r ? r(p, size) : override_pool_alloc(size, 16);
	if (size == 0)
		return NULL; /* as glibc: realloc(p, 0) frees p (pool blocks are never reused) */
	void *q = r ? r(NULL, size) : override_pool_alloc(size, 16);
	if (q) {
		size_t old = override_pool_size(p);
		memcpy(q, p, old < size ? old : size);
	}
	return q;
}

static size_t override_pool_usable(void *p)
{
	override_usable_fn u = __atomic_load_n(&override_libc_usable, __ATOMIC_ACQUIRE);
	if (override_in_pool(p))
		return override_pool_size(p);
	return u ? u(p) : 0;
}

/* Once the pool holds a block, pointers into it may reach free, realloc and
 * malloc_usable_size at any time: route them through the pool-aware variants for good.
 * The installation in override_resolve only replaces the bootstrap functions (CAS), so it
 * never undoes this. */
static void override_pool_used(void)
{
	__atomic_store_n(&override_free, override_pool_free, __ATOMIC_RELEASE);
	__atomic_store_n(&override_realloc, override_pool_realloc, __ATOMIC_RELEASE);
	__atomic_store_n(&override_usable, override_pool_usable, __ATOMIC_RELEASE);
	override_free_raise(NULL, override_pool_free);
}

/* Fallbacks for functions a libc may lack; built from the others, same contracts. */
static int override_fallback_posix_memalign(void **pp, size_t align, size_t size)
{
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	int e = errno;
	void *p = OVERRIDE_LOAD(override_memalign)(align, size);
	if (!p) {
		errno = e;
		return ENOMEM;
	}
	*pp = p;
	return 0;
}

static size_t override_fallback_usable(void *p)
{
	(void)p;
	return 0;
}

static void *override_sym(const char *name, void *fallback)
{
	void *f = dlsym(RTLD_NEXT, name);
	return f ? f : fallback;
}

#define OVERRIDE_INSTALL(var, boot, value) \
	do { \
		__typeof__(var) expect = (boot); \
		__atomic_compare_exchange_n(&(var), &expect, (value), false, __ATOMIC_RELEASE, \
					    __ATOMIC_RELAXED); \
	} while (0)

/* Resolve every real function once (idempotent; concurrent callers store the same values).
 * While this thread is inside dlsym, its allocations come from the pool. */
static llgo_noinline void override_resolve(void)
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	if (t->resolving)
		return;
	t->resolving = 1;
	override_malloc_fn m = override_sym("malloc", (void *)__libc_malloc);
	override_free_fn f = override_sym("free", (void *)__libc_free);
	override_calloc_fn c = override_sym("calloc", (void *)__libc_calloc);
	override_realloc_fn r = override_sym("realloc", (void *)__libc_realloc);
	override_posix_memalign_fn pm =
		override_sym("posix_memalign", (void *)override_fallback_posix_memalign);
	override_memalign_fn aa = override_sym("aligned_alloc", (void *)__libc_memalign);
	override_memalign_fn ma = override_sym("memalign", (void *)__libc_memalign);
	override_malloc_fn va = override_sym("valloc", (void *)__libc_valloc);
	override_malloc_fn pv = override_sym("pvalloc", (void *)__libc_pvalloc);
	override_usable_fn us =
		override_sym("malloc_usable_size", (void *)override_fallback_usable);
	t->resolving = 0;

	__atomic_store_n(&override_libc_free, f, __ATOMIC_RELEASE);
	__atomic_store_n(&override_libc_realloc, r, __ATOMIC_RELEASE);
	__atomic_store_n(&override_libc_usable, us, __ATOMIC_RELEASE);
	OVERRIDE_INSTALL(override_malloc, override_boot_malloc, m);
	OVERRIDE_INSTALL(override_free, override_boot_free, f);
	override_free_raise(override_boot_free, f);
	OVERRIDE_INSTALL(override_calloc, override_boot_calloc, c);
	OVERRIDE_INSTALL(override_realloc, override_boot_realloc, r);
	OVERRIDE_INSTALL(override_posix_memalign, override_boot_posix_memalign, pm);
	OVERRIDE_INSTALL(override_aligned_alloc, override_boot_aligned_alloc, aa);
	OVERRIDE_INSTALL(override_memalign, override_boot_memalign, ma);
	OVERRIDE_INSTALL(override_valloc, override_boot_valloc, va);
	OVERRIDE_INSTALL(override_pvalloc, override_boot_pvalloc, pv);
	OVERRIDE_INSTALL(override_usable, override_boot_usable, us);
}

void override_resolve_global(void *(*definition)(const char *name))
{
	struct llgo_heap_thread *t = &llgo_heap_tls;
	uint8_t guard = t->guard;
	t->guard = 1; /* dlsym may allocate: never sampled */
#define OVERRIDE_GLOBAL(var, name) \
	__typeof__(var) var##_g = definition(name); \
	if (!var##_g) \
		var##_g = OVERRIDE_LOAD(var);
	OVERRIDE_GLOBAL(override_malloc, "malloc")
	OVERRIDE_GLOBAL(override_libc_free, "free")
	OVERRIDE_GLOBAL(override_calloc, "calloc")
	OVERRIDE_GLOBAL(override_libc_realloc, "realloc")
	OVERRIDE_GLOBAL(override_posix_memalign, "posix_memalign")
	OVERRIDE_GLOBAL(override_aligned_alloc, "aligned_alloc")
	OVERRIDE_GLOBAL(override_memalign, "memalign")
	OVERRIDE_GLOBAL(override_valloc, "valloc")
	OVERRIDE_GLOBAL(override_pvalloc, "pvalloc")
	OVERRIDE_GLOBAL(override_libc_usable, "malloc_usable_size")
#undef OVERRIDE_GLOBAL
	t->guard = guard;
	__atomic_store_n(&override_libc_free, override_libc_free_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_libc_realloc, override_libc_realloc_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_libc_usable, override_libc_usable_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_malloc, override_malloc_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_calloc, override_calloc_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_posix_memalign, override_posix_memalign_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_aligned_alloc, override_aligned_alloc_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_memalign, override_memalign_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_valloc, override_valloc_g, __ATOMIC_RELEASE);
	__atomic_store_n(&override_pvalloc, override_pvalloc_g, __ATOMIC_RELEASE);
	/* the pool-aware variants stay (they call the override_libc_* above) */
	if (OVERRIDE_LOAD(override_free) != override_pool_free) {
		__atomic_store_n(&override_free, override_libc_free_g, __ATOMIC_RELEASE);
		__atomic_store_n(&override_realloc, override_libc_realloc_g, __ATOMIC_RELEASE);
		__atomic_store_n(&override_usable, override_libc_usable_g, __ATOMIC_RELEASE);
	}
}

void override_free_untrack(void)
{
	__atomic_store_n(&override_free_entry, OVERRIDE_LOAD(override_free), __ATOMIC_RELEASE);
}

/* Bootstrap functions: inside dlsym (this thread resolving) serve from the pool, else
 * resolve and call the real function. */
static void *override_boot_malloc(size_t size)
{
	if (llgo_heap_tls.resolving)
		return override_pool_alloc(size, 16);
	override_resolve();
	return OVERRIDE_LOAD(override_malloc)(size);
}

static void override_boot_free(void *p)
{
	if (override_in_pool(p) || llgo_heap_tls.resolving)
		return;
	override_resolve();
	OVERRIDE_LOAD(override_free)(p);
}

static void *override_boot_calloc(size_t n, size_t size)
{
	if (llgo_heap_tls.resolving) {
		size_t total;
		if (__builtin_mul_overflow(n, size, &total)) {
			errno = ENOMEM;
			return NULL;
		}
		return override_pool_alloc(total, 16);
	}
	override_resolve();
	return OVERRIDE_LOAD(override_calloc)(n, size);
}

static void *override_boot_realloc(void *p, size_t size)
{
	if (llgo_heap_tls.resolving || override_in_pool(p))
		return override_pool_realloc(p, size);
	override_resolve();
	return OVERRIDE_LOAD(override_realloc)(p, size);
}

static int override_boot_posix_memalign(void **pp, size_t align, size_t size)
{
	if (llgo_heap_tls.resolving) {
		if (align < sizeof(void *) || (align & (align - 1)))
			return EINVAL;
		void *p = override_pool_alloc(size, align);
		if (!p)
			return ENOMEM;
		*pp = p;
		return 0;
	}
	override_resolve();
	return OVERRIDE_LOAD(override_posix_memalign)(pp, align, size);
}

static void *override_boot_aligned_alloc(size_t align, size_t size)
{
	if (llgo_heap_tls.resolving)
		return override_pool_alloc(size, align);
	override_resolve();
	return OVERRIDE_LOAD(override_aligned_alloc)(align, size);
}

static void *override_boot_memalign(size_t align, size_t size)
{
	if (llgo_heap_tls.resolving)
		return override_pool_alloc(size, align);
	override_resolve();
	return OVERRIDE_LOAD(override_memalign)(align, size);
}

static void *override_boot_valloc(size_t size)
{
	if (llgo_heap_tls.resolving)
		return override_pool_alloc(size, 4096);
	override_resolve();
	return OVERRIDE_LOAD(override_valloc)(size);
}

static void *override_boot_pvalloc(size_t size)
{
	if (llgo_heap_tls.resolving)
		return override_pool_alloc((size + 4095) & ~(size_t)4095, 4096);
	override_resolve();
	return OVERRIDE_LOAD(override_pvalloc)(size);
}

static size_t override_boot_usable(void *p)
{
	if (override_in_pool(p))
		return override_pool_size(p);
	if (llgo_heap_tls.resolving)
		return 0;
	override_resolve();
	return OVERRIDE_LOAD(override_usable)(p);
}

/* The real functions live.c places sampled blocks with (through the current pointers, so
 * pool blocks stay recognised). */
static void *override_place_malloc(size_t size)
{
	return OVERRIDE_LOAD(override_malloc)(size);
}

static void override_place_free(void *p)
{
	OVERRIDE_LOAD(override_free)(p);
}

static size_t override_place_usable(void *p)
{
	return OVERRIDE_LOAD(override_usable)(p);
}

static void *override_place_realloc(void *p, size_t size)
{
	return OVERRIDE_LOAD(override_realloc)(p, size);
}

__attribute__((constructor(101))) static void override_init(void)
{
	override_resolve();
	live_set_allocator(override_place_malloc, override_place_free, override_place_usable,
			   override_place_realloc);
	live_on_mask(override_free_on_mask);
	/* (no object can be tracked before this constructor: the rate is still 0) */
	uintptr_t m = atomic_load_explicit(&live_mask, memory_order_relaxed);
	if (m != ~(uintptr_t)0)
		override_free_on_mask(m);
}

/* ---- fast path ------------------------------------------------------------------------- */

llgo_export void *malloc(size_t size)
{
	if (llgo_likely(override_pass(size)) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_malloc)(size);
	return sample_malloc(OVERRIDE_LOAD(override_malloc), size, __builtin_return_address(0));
}

llgo_export void free(void *p)
{
	OVERRIDE_LOAD(override_free_entry)(p);
}

/* free's slow path, out of line so that the fast one keeps its single jump to the real free. */
static llgo_noinline llgo_cold void override_free_tracked(void *p)
{
	live_free(OVERRIDE_LOAD(override_free), p);
}

static void override_free_paged(void *p)
{
	if (llgo_unlikely(!((uintptr_t)p & (LIVE_PAGE - 1))))
		return override_free_tracked(p);
	OVERRIDE_LOAD(override_free)(p);
}

static void override_free_all(void *p)
{
	live_free(OVERRIDE_LOAD(override_free), p); /* (override_free_tracked, one jump less) */
}

llgo_export void *calloc(size_t n, size_t size)
{
	int s = override_rate_sign();
	if (llgo_likely(s == 0))
		return OVERRIDE_LOAD(override_calloc)(n, size);
	size_t total;
	if (__builtin_mul_overflow(n, size, &total))
		return OVERRIDE_LOAD(override_calloc)(n, size); /* fails as the real calloc fails: ENOMEM */
	if ((s > 0 && llgo_likely(override_countdown(total))) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_calloc)(n, size);
	return sample_calloc(OVERRIDE_LOAD(override_calloc), n, size, __builtin_return_address(0));
}

llgo_export void *realloc(void *p, size_t size)
{
	if (p && llgo_unlikely(override_maybe_tracked(p)))
		return sample_realloc_tracked(OVERRIDE_LOAD(override_realloc), p, size);
	if (llgo_likely(override_pass(size)) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_realloc)(p, size);
	return sample_realloc(OVERRIDE_LOAD(override_realloc), p, size, __builtin_return_address(0));
}

/*
 * reallocarray forwards to the next reallocarray (RTLD_NEXT, as every function here), which
 * multiplies and calls realloc through the global scope: our realloc when the shim comes
 * before the allocator (sampled there, once), or a preloaded allocator's realloc when that
 * allocator comes before the shim. Forwarding to our realloc pointer instead would hand a
 * jemalloc pointer to glibc's realloc in that order.
 */
typedef void *(*override_reallocarray_fn)(void *, size_t, size_t);
static void *override_fallback_reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, total);
}
static override_reallocarray_fn override_reallocarray;

llgo_export void *reallocarray(void *p, size_t n, size_t size)
{
	override_reallocarray_fn f = __atomic_load_n(&override_reallocarray, __ATOMIC_ACQUIRE);
	if (llgo_unlikely(!f)) {
		f = override_sym("reallocarray", (void *)override_fallback_reallocarray);
		__atomic_store_n(&override_reallocarray, f, __ATOMIC_RELEASE);
	}
	return f(p, n, size);
}

llgo_export int posix_memalign(void **pp, size_t align, size_t size)
{
	if (llgo_likely(override_pass(size)) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_posix_memalign)(pp, align, size);
	return sample_posix_memalign(OVERRIDE_LOAD(override_posix_memalign), pp, align, size,
				     __builtin_return_address(0));
}

llgo_export void *aligned_alloc(size_t align, size_t size)
{
	if (llgo_likely(override_pass(size)) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_aligned_alloc)(align, size);
	return sample_memalign(OVERRIDE_LOAD(override_aligned_alloc), align, size, __builtin_return_address(0));
}

llgo_export void *memalign(size_t align, size_t size)
{
	if (llgo_likely(override_pass(size)) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_memalign)(align, size);
	return sample_memalign(OVERRIDE_LOAD(override_memalign), align, size, __builtin_return_address(0));
}

/* valloc and pvalloc blocks are on a page already: their slow path is memalign's with a page
 * alignment, which calls them as they are. */
static void *override_valloc_fn(size_t align, size_t size)
{
	(void)align;
	return OVERRIDE_LOAD(override_valloc)(size);
}

static void *override_pvalloc_fn(size_t align, size_t size)
{
	(void)align;
	return OVERRIDE_LOAD(override_pvalloc)(size);
}

llgo_export void *valloc(size_t size)
{
	if (llgo_likely(override_pass(size)) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_valloc)(size);
	return sample_memalign(override_valloc_fn, LIVE_PAGE, size, __builtin_return_address(0));
}

/* The recorded size is the size asked, not pvalloc's page-rounded one. */
llgo_export void *pvalloc(size_t size)
{
	if (llgo_likely(override_pass(size)) || llgo_unlikely(owner_defers()))
		return OVERRIDE_LOAD(override_pvalloc)(size);
	return sample_memalign(override_pvalloc_fn, LIVE_PAGE, size, __builtin_return_address(0));
}

/* A tracked object may lie inside its real block (live.c): its usable size is the block's
 * from the object on. */
llgo_export size_t malloc_usable_size(void *p)
{
	if (llgo_unlikely(override_maybe_tracked(p)))
		return live_usable(OVERRIDE_LOAD(override_usable), p);
	return OVERRIDE_LOAD(override_usable)(p);
}
