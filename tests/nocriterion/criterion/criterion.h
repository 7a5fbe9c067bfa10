/* SPDX-License-Identifier: MIT */
/*
 * criterion.h (stand-in): the subset of Criterion's API our tests use, for builds where the
 * real Criterion cannot run. Criterion 2.4 aborts at start under ThreadSanitizer ("Could not
 * initialize inheritable arena", Snaipe/Criterion#274), so `make test SAN=thread` compiles the
 * same test files against this header (-Itests/nocriterion) instead. Like Criterion, every
 * test runs in a forked child with a timeout; a failed cr_assert ends the test, a failed
 * cr_expect marks it failed and goes on. Nothing here is used by ordinary builds.
 * A helper file linked into the tests (tests/heapd.c, tests/helpers.c) defines LLGO_T_HELPER:
 * it gets the checks, and the test file's failure flag, but no test table and no main.
 */
#ifndef LLGO_NOCRITERION_H
#define LLGO_NOCRITERION_H

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct llgo_t_opts {
	int unused;
	double timeout;
	bool disabled;
};

struct llgo_t_test {
	const char *suite, *name;
	void (*fn)(void);
	const struct llgo_t_opts *opts;
};

/* Set by a failed cr_expect, in the test's own process; one flag for every file linked. */
extern int llgo_t_failed_expect;

#ifndef LLGO_T_HELPER
#define LLGO_T_MAX 512
static struct llgo_t_test llgo_t_tests[LLGO_T_MAX];
static int llgo_t_ntests;
int llgo_t_failed_expect;

static inline void llgo_t_register(const char *suite, const char *name, void (*fn)(void),
				   const struct llgo_t_opts *o)
{
	if (llgo_t_ntests < LLGO_T_MAX)
		llgo_t_tests[llgo_t_ntests++] = (struct llgo_t_test){ suite, name, fn, o };
}
#endif

static inline void llgo_t_check(bool ok, bool fatal, const char *file, int line,
				const char *expr, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static inline void llgo_t_check(bool ok, bool fatal, const char *file, int line,
				const char *expr, const char *fmt, ...)
{
	if (ok)
		return;
	fprintf(stderr, "%s:%d: %s failed: %s", file, line, fatal ? "assertion" : "expectation",
		expr);
	if (fmt && fmt[0] && fmt[1]) {
		va_list ap;
		va_start(ap, fmt);
		fputs(":", stderr);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
	if (fatal)
		_exit(1);
	llgo_t_failed_expect = 1;
}

/* The message's arguments are evaluated only after the condition failed, as Criterion does
 * (a message may name a buffer the condition's own call fills). */
#define LLGO_T_CHECK(fatal, cond, text, ...)                                               \
	do {                                                                               \
		if (!(cond))                                                               \
			llgo_t_check(false, (fatal), __FILE__, __LINE__, text,             \
				     " " __VA_ARGS__);                                     \
	} while (0)

#define cr_assert(c, ...) LLGO_T_CHECK(1, !!(c), #c, __VA_ARGS__)
#define cr_expect(c, ...) LLGO_T_CHECK(0, !!(c), #c, __VA_ARGS__)
#define cr_assert_not(c, ...) LLGO_T_CHECK(1, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_expect_not(c, ...) LLGO_T_CHECK(0, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_assert_fail(...) LLGO_T_CHECK(1, 0, "cr_assert_fail", __VA_ARGS__)
#define cr_expect_fail(...) LLGO_T_CHECK(0, 0, "cr_expect_fail", __VA_ARGS__)
#define cr_assert_null(p, ...) LLGO_T_CHECK(1, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_expect_null(p, ...) LLGO_T_CHECK(0, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) LLGO_T_CHECK(1, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_expect_not_null(p, ...) LLGO_T_CHECK(0, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define LLGO_T_CMP(fatal, a, op, b, ...) LLGO_T_CHECK(fatal, (a)op(b), #a " " #op " " #b, __VA_ARGS__)
#define cr_assert_eq(a, b, ...) LLGO_T_CMP(1, a, ==, b, __VA_ARGS__)
#define cr_expect_eq(a, b, ...) LLGO_T_CMP(0, a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) LLGO_T_CMP(1, a, !=, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...) LLGO_T_CMP(0, a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) LLGO_T_CMP(1, a, <, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...) LLGO_T_CMP(0, a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) LLGO_T_CMP(1, a, <=, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...) LLGO_T_CMP(0, a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) LLGO_T_CMP(1, a, >, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...) LLGO_T_CMP(0, a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) LLGO_T_CMP(1, a, >=, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...) LLGO_T_CMP(0, a, >=, b, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)                                                        \
	LLGO_T_CHECK(1, strcmp((a), (b)) == 0, #a " eq " #b, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...)                                                        \
	LLGO_T_CHECK(0, strcmp((a), (b)) == 0, #a " eq " #b, __VA_ARGS__)
#define cr_skip_test(...)                                                                  \
	do {                                                                               \
		fprintf(stderr, "skipped: " __VA_ARGS__);                                   \
		fputc('\n', stderr);                                                       \
		_exit(77);                                                                 \
	} while (0)
#define cr_log_info(...) (fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))

#ifndef LLGO_T_HELPER
#define Test(suite, name, ...)                                                             \
	static void suite##_##name(void);                                                  \
	__attribute__((constructor)) static void llgo_t_reg_##suite##_##name(void)          \
	{                                                                                  \
		static const struct llgo_t_opts o = { 0, __VA_ARGS__ };                    \
		llgo_t_register(#suite, #name, suite##_##name, &o);                        \
	}                                                                                  \
	static void suite##_##name(void)

/* Run every test in a child of its own, one at a time; --filter SUITE/NAME selects. */
int main(int argc, char **argv)
{
	const char *filter = NULL;
	double timeout_all = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc)
			filter = argv[++i];
		else if (strncmp(argv[i], "--timeout=", 10) == 0)
			timeout_all = atof(argv[i] + 10);
	}
	int failed = 0, passed = 0, skipped = 0;
	for (int i = 0; i < llgo_t_ntests; i++) {
		struct llgo_t_test *t = &llgo_t_tests[i];
		char full[256];
		snprintf(full, sizeof(full), "%s/%s", t->suite, t->name);
		if (filter && !strstr(full, filter))
			continue;
		if (t->opts->disabled) {
			skipped++;
			fprintf(stderr, "[SKIP] %s: disabled\n", full);
			continue;
		}
		double limit = t->opts->timeout > 0 ? t->opts->timeout : timeout_all;
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0) {
			if (limit > 0)
				alarm((unsigned)limit + 1);
			t->fn();
			fflush(NULL);
			_exit(llgo_t_failed_expect ? 1 : 0);
		}
		int st = 0;
		waitpid(pid, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			passed++;
		} else if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
			skipped++;
			fprintf(stderr, "[SKIP] %s\n", full);
		} else {
			failed++;
			if (WIFSIGNALED(st))
				fprintf(stderr, "[FAIL] %s: killed by signal %d%s\n", full,
					WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
			else
				fprintf(stderr, "[FAIL] %s\n", full);
		}
	}
	fprintf(stderr, "[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Skipped: %d\n",
		passed + failed, passed, failed, skipped);
	return failed ? 1 : 0;
}

#endif /* LLGO_T_HELPER */

#endif
