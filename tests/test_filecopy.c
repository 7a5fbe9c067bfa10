// SPDX-License-Identifier: MIT
/*
 * test_filecopy.c: filecopy.c, the daemon's copies of files their owners may change. A file
 * truncated after some of it was read keeps what was read and fails the reads of the rest
 * (a mapping of it would raise SIGBUS); a copy holds no more than its cap and its uid's
 * unwind memory budget, and gives the budget back when it goes. The attack itself, against
 * the real daemon, is test_security's files/truncated_program_file_does_not_kill_the_daemon.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../agent/server/budget.h"
#include "../agent/unwind/filecopy.h"

#define PAGE 4096u

/* A temporary file of n pages, byte i holding (i * 7) & 0xff; its descriptor (read-write). */
static int fc_file(unsigned pages)
{
	char path[] = "/tmp/llgo-filecopy.XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	unlink(path);
	unsigned char *b = malloc((size_t)pages * PAGE);
	for (size_t i = 0; i < (size_t)pages * PAGE; i++)
		b[i] = (unsigned char)(i * 7);
	cr_assert_eq(write(fd, b, (size_t)pages * PAGE), (ssize_t)pages * PAGE);
	free(b);
	return fd;
}

static bool fc_holds(const unsigned char *p, uint64_t off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)((off + i) * 7))
			return false;
	return true;
}

Test(filecopy, truncated_file_keeps_what_was_read)
{
	int fd = fc_file(4);
	struct filecopy c;
	cr_assert_eq(filecopy_init(&c, fd, 4 * PAGE, UINT64_MAX, NULL, 0), 0);
	const unsigned char *p = filecopy_at(&c, 100, 200);
	cr_assert_not_null(p);
	cr_expect(fc_holds(p, 100, 200));
	cr_expect_eq(filecopy_held(&c), PAGE, "one page read: %llu bytes held",
		     (unsigned long long)filecopy_held(&c));
	/* a range over two pages: both filled, the pointer is into one copy */
	p = filecopy_at(&c, PAGE - 8, 16);
	cr_assert_not_null(p);
	cr_expect(fc_holds(p, PAGE - 8, 16));
	/* its owner truncates the file: what was read stays, the rest cannot be read */
	cr_assert_eq(ftruncate(fd, PAGE + 100), 0);
	p = filecopy_at(&c, 100, 200);
	cr_assert_not_null(p);
	cr_expect(fc_holds(p, 100, 200));
	cr_expect_null(filecopy_at(&c, 2 * PAGE, 8), "a page past the new end");
	cr_expect_null(filecopy_at(&c, 3 * PAGE + 10, 8));
	cr_expect_null(filecopy_at(&c, 4 * PAGE, 1), "past the span");
	cr_expect_eq(filecopy_held(&c), 2 * PAGE);
	/* filecopy_read reads now: what the file holds now */
	unsigned char buf[16];
	cr_expect(filecopy_read(&c, PAGE, buf, 16));
	cr_expect(!filecopy_read(&c, 2 * PAGE, buf, 16));
	/* grown again: its pages are read as they are now */
	cr_assert_eq(ftruncate(fd, 4 * PAGE), 0);
	p = filecopy_at(&c, 3 * PAGE, 8);
	cr_assert_not_null(p);
	cr_expect_eq(p[0], 0, "the zeros the file holds now");
	filecopy_destroy(&c);
	close(fd);
}

Test(filecopy, cap_and_budget)
{
	struct budget_limits l;
	memset(&l, 0, sizeof(l));
	l.per_uid[BUDGET_UNWIND_BYTES] = 3 * PAGE;
	struct budget *b = budget_new(&l);
	cr_assert_not_null(b);
	const uid_t uid = 1000;
	int fd = fc_file(8);
	struct filecopy c, d;
	/* the copy's own cap: 2 pages */
	cr_assert_eq(filecopy_init(&c, fd, 8 * PAGE, 2 * PAGE, b, uid), 0);
	cr_expect_not_null(filecopy_at(&c, 0, 8));
	cr_expect_not_null(filecopy_at(&c, PAGE, 8));
	cr_expect_null(filecopy_at(&c, 2 * PAGE, 8), "past the copy's cap");
	cr_expect_eq(budget_used(b, uid, BUDGET_UNWIND_BYTES), 2 * PAGE);
	/* another copy of the same uid: one page left of its budget */
	cr_assert_eq(filecopy_init(&d, fd, 8 * PAGE, UINT64_MAX, b, uid), 0);
	cr_expect_not_null(filecopy_at(&d, 5 * PAGE, 8));
	cr_expect_null(filecopy_at(&d, 6 * PAGE, 8), "past the uid's budget");
	cr_expect(budget_flags(b, uid) & BUDGET_FLAG(BUDGET_UNWIND_BYTES));
	cr_expect_eq(budget_used(b, uid, BUDGET_UNWIND_BYTES), 3 * PAGE);
	/* what a copy held goes back with it */
	filecopy_destroy(&c);
	cr_expect_eq(budget_used(b, uid, BUDGET_UNWIND_BYTES), PAGE);
	cr_expect_not_null(filecopy_at(&d, 6 * PAGE, 8), "room again");
	filecopy_destroy(&d);
	cr_expect_eq(budget_used(b, uid, BUDGET_UNWIND_BYTES), 0);
	close(fd);
	budget_free(b);
}

Test(filecopy, copy_of_memory_is_whole)
{
	unsigned char m[3 * PAGE];
	for (size_t i = 0; i < sizeof(m); i++)
		m[i] = (unsigned char)(i * 7);
	struct filecopy c;
	cr_assert_eq(filecopy_init_mem(&c, m, sizeof(m)), 0);
	const unsigned char *p = filecopy_at(&c, PAGE + 3, PAGE);
	cr_assert_not_null(p);
	cr_expect(fc_holds(p, PAGE + 3, PAGE));
	cr_expect_null(filecopy_at(&c, 3 * PAGE - 4, 8));
	unsigned char buf[8];
	cr_expect(filecopy_read(&c, 3 * PAGE - 8, buf, 8));
	cr_expect(fc_holds(buf, 3 * PAGE - 8, 8));
	cr_expect_eq(filecopy_held(&c), sizeof(m));
	filecopy_destroy(&c);
}

/* Readers on several threads fill and read the same pages at once: each sees the file's
 * bytes (the fill's release and the readers' acquire; ThreadSanitizer checks the pairs). */
struct fc_reader {
	struct filecopy *c;
	unsigned seed, pages;
	bool ok;
};

static void *fc_read_pages(void *arg)
{
	struct fc_reader *r = arg;
	r->ok = true;
	for (int i = 0; i < 2000 && r->ok; i++) {
		r->seed = r->seed * 1103515245u + 12345u;
		uint64_t off = (r->seed >> 4) % ((uint64_t)r->pages * PAGE - 64);
		const unsigned char *p = filecopy_at(r->c, off, 64);
		r->ok = p && fc_holds(p, off, 64);
	}
	return NULL;
}

Test(filecopy, readers_on_threads)
{
	const unsigned pages = 64;
	int fd = fc_file(pages);
	struct filecopy c;
	cr_assert_eq(filecopy_init(&c, fd, (uint64_t)pages * PAGE, UINT64_MAX, NULL, 0), 0);
	pthread_t t[4];
	struct fc_reader r[4];
	for (unsigned i = 0; i < 4; i++) {
		r[i] = (struct fc_reader){ &c, i + 1, pages, false };
		cr_assert_eq(pthread_create(&t[i], NULL, fc_read_pages, &r[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_expect(r[i].ok, "reader %u saw other bytes", i);
	}
	cr_expect_leq(filecopy_held(&c), (uint64_t)pages * PAGE);
	filecopy_destroy(&c);
	close(fd);
}
