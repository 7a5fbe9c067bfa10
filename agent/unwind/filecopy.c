// SPDX-License-Identifier: MIT
/*
 * filecopy.c: the bytes of a file its owner may change under us, read with pread into the
 * daemon's own memory. A mapping of such a file is a weapon against the daemon: truncated
 * after it was mapped (MAP_PRIVATE too: the kernel takes the pages out of every mapping of
 * the file), the next read of a page past the new end raises SIGBUS, and one user's
 * ftruncate killed llgo-heapd with every user's profiles. A pread of a truncated file only
 * comes back short.
 *
 * struct filecopy (filecopy.h) keeps the file's first span bytes in an anonymous
 * reservation (MAP_NORESERVE: only the pages filled take memory) and fills each page at the
 * first read of it, so that the readers (unwind.c, unwind_fast.c through cfi.c) keep their
 * pointers and plain loads: what the unwinder reads of a file is its .eh_frame_hdr and
 * .eh_frame, a small part of it. Each copy holds at most its cap, and its pages are charged
 * to the uid's unwind memory budget (budget.c), given back when the copy goes. A file that
 * shrank keeps what was read of it; reads of the rest fail (the unwinder then has no CFI
 * there: the stack ends, truncated).
 *
 * Threads: readers test a page's bit (acquire) and read it without a lock; one filler at a
 * time (the copy's mutex) preads a page whose bit is clear, then sets it (release). A page is
 * written only while its bit is clear and never after, so no reader sees it change.
 *
 * Left to others: which bytes to read and what they mean (unwind.c, cfi.c); keeping the file
 * open (the caller's descriptor).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../server/budget.h"
#include "filecopy.h"

#define FILECOPY_PAGE_SHIFT 12u
#define FILECOPY_PAGE ((uint64_t)1 << FILECOPY_PAGE_SHIFT)

bool filecopy_pread(int fd, uint64_t off, void *buf, size_t n)
{
	unsigned char *p = buf;
	while (n) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p += r;
		off += (uint64_t)r;
		n -= (size_t)r;
	}
	return true;
}

static int filecopy_reserve(struct filecopy *c, uint64_t span)
{
	if (span == 0 || span > FILECOPY_MAX_SPAN)
		return -EFBIG;
	void *p = mmap(NULL, (size_t)span, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	c->base = p;
	c->span = span;
	pthread_mutex_init(&c->lock, NULL);
	return 0;
}

int filecopy_init(struct filecopy *c, int fd, uint64_t span, uint64_t cap, struct budget *budget,
		  uid_t uid)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	int rc = filecopy_reserve(c, span);
	if (rc)
		return rc;
	/* calloc of more than a few pages is a fresh zeroed mapping: a large span's bits cost
	 * memory only where pages were read */
	size_t words = (size_t)(((span + FILECOPY_PAGE - 1) >> FILECOPY_PAGE_SHIFT) + 63) / 64;
	c->loaded = calloc(words, sizeof(*c->loaded));
	if (!c->loaded) {
		filecopy_destroy(c);
		return -ENOMEM;
	}
	c->fd = fd;
	c->cap = cap;
	c->budget = budget;
	c->uid = uid;
	return 0;
}

int filecopy_init_mem(struct filecopy *c, const void *p, size_t n)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	int rc = filecopy_reserve(c, n);
	if (rc)
		return rc;
	memcpy(c->base, p, n);
	c->whole = true;
	atomic_store_explicit(&c->held, n, memory_order_relaxed);
	return 0;
}

void filecopy_destroy(struct filecopy *c)
{
	if (!c->base)
		return;
	if (!c->whole)
		budget_give(c->budget, c->uid, BUDGET_UNWIND_BYTES,
			    atomic_load_explicit(&c->held, memory_order_relaxed));
	munmap(c->base, (size_t)c->span);
	free((void *)c->loaded);
	pthread_mutex_destroy(&c->lock);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

static bool filecopy_has(const struct filecopy *c, uint64_t page)
{
	uint64_t w = atomic_load_explicit(&c->loaded[page / 64], memory_order_acquire);
	return w & ((uint64_t)1 << (page % 64));
}

/* Fill the pages first..last that are not there yet; whether all of them are now. */
static bool filecopy_fill(struct filecopy *c, uint64_t first, uint64_t last)
{
	bool ok = true;
	pthread_mutex_lock(&c->lock);
	for (uint64_t p = first; p <= last && ok; p++) {
		if (filecopy_has(c, p))
			continue;
		uint64_t off = p << FILECOPY_PAGE_SHIFT;
		size_t len = (size_t)(c->span - off < FILECOPY_PAGE ? c->span - off : FILECOPY_PAGE);
		uint64_t held = atomic_load_explicit(&c->held, memory_order_relaxed);
		ok = held + len <= c->cap &&
		     budget_take(c->budget, c->uid, BUDGET_UNWIND_BYTES, len) == 0;
		if (!ok)
			break;
		if (!filecopy_pread(c->fd, off, c->base + off, len)) {
			budget_give(c->budget, c->uid, BUDGET_UNWIND_BYTES, len);
			ok = false;
			break;
		}
		atomic_store_explicit(&c->held, held + len, memory_order_relaxed);
		atomic_fetch_or_explicit(&c->loaded[p / 64], (uint64_t)1 << (p % 64),
					 memory_order_release);
	}
	pthread_mutex_unlock(&c->lock);
	return ok;
}

const unsigned char *filecopy_at(struct filecopy *c, uint64_t off, uint64_t n)
{
	if (!c->base || n == 0 || off > c->span || n > c->span - off)
		return NULL;
	if (c->whole)
		return c->base + off;
	uint64_t first = off >> FILECOPY_PAGE_SHIFT, last = (off + n - 1) >> FILECOPY_PAGE_SHIFT;
	for (uint64_t p = first; p <= last; p++)
		if (!filecopy_has(c, p))
			return filecopy_fill(c, p, last) ? c->base + off : NULL;
	return c->base + off;
}

bool filecopy_read(const struct filecopy *c, uint64_t off, void *buf, size_t n)
{
	if (c->whole) {
		if (off > c->span || n > c->span - off)
			return false;
		memcpy(buf, c->base + off, n);
		return true;
	}
	return c->fd >= 0 && filecopy_pread(c->fd, off, buf, n);
}

uint64_t filecopy_held(const struct filecopy *c)
{
	return atomic_load_explicit(&c->held, memory_order_relaxed);
}
