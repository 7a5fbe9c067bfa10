/* SPDX-License-Identifier: MIT */
/*
 * filecopy.h: the bytes of a file its owner may change under us (a user's program or
 * library), read with pread into the daemon's own memory, never mapped (filecopy.c).
 */
#ifndef LLGO_AGENT_FILECOPY_H
#define LLGO_AGENT_FILECOPY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct budget;

/*
 * The first span bytes of a file, filled a page at a time at the first read of each page
 * (filecopy_at) into an anonymous reservation: pointers into it stay valid, and a page read
 * once is a plain load from then on. Pages are charged to uid's BUDGET_UNWIND_BYTES (budget
 * may be NULL) and to the copy's own cap.
 */
struct filecopy {
	int fd;              /* not ours: the caller keeps it open as long as the copy */
	unsigned char *base; /* span bytes; only pages whose bit is set are ever read */
	uint64_t span;
	bool whole;          /* filled from memory at init: every byte is there */
	/* a bit per page, set with release once the page holds the file's bytes (read with
	 * acquire), never cleared; pages are filled under lock, never again once set */
	_Atomic uint64_t *loaded;
	pthread_mutex_t lock;
	uint64_t cap;          /* most bytes this copy holds */
	_Atomic uint64_t held; /* bytes of pages filled, charged to the budget */
	struct budget *budget;
	uid_t uid;
};

/* The largest span a copy reserves. */
#define FILECOPY_MAX_SPAN ((uint64_t)1 << 34)

/* A copy of fd's first span bytes holding at most cap bytes; 0 or -errno. */
int filecopy_init(struct filecopy *c, int fd, uint64_t span, uint64_t cap, struct budget *budget,
		  uid_t uid);
/* A copy of p[0..n), all of it (no file behind it). */
int filecopy_init_mem(struct filecopy *c, const void *p, size_t n);
void filecopy_destroy(struct filecopy *c);
/*
 * The bytes [off, off + n) as the file held them when their pages were first read, or NULL:
 * outside the span, or a page that could not be read now (the file is shorter than it was,
 * a read error, the cap or the budget; asked again at the next call). Any thread.
 */
const unsigned char *filecopy_at(struct filecopy *c, uint64_t off, uint64_t n);
/* n bytes at off into buf, read now and not kept (a section parsed once): the file's bytes,
 * or the memory's for a copy made by filecopy_init_mem. false unless all n were read. */
bool filecopy_read(const struct filecopy *c, uint64_t off, void *buf, size_t n);
/* pread of all n bytes at off of fd into buf; false when fewer could be read. */
bool filecopy_pread(int fd, uint64_t off, void *buf, size_t n);
/* Bytes the copy holds (its pages filled). */
uint64_t filecopy_held(const struct filecopy *c);

#endif
