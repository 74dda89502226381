/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The one TAP printer of Beluga's C host tests and of the ioctl fuzzer
 * (the in-guest kselftests and reliability tests use kselftest_harness.h).
 *
 * Two ways to report, on one counter:
 *   - one result per assertion: tap_result(ok, fmt, ...), tap_skip(reason,
 *     fmt, ...), tap_diag(fmt, ...) for comments;
 *   - one result per case: a void function that uses CHECK*() (note the
 *     failure, go on, so one run shows every broken expectation) and
 *     REQUIRE*() (note it and leave the case), run by TAP_RUN(fn).
 * A program with CHECK() macros of its own defines TAP_RESULTS_ONLY before
 * including this header and gets only the first way.
 * tap_done() prints the plan and gives main() its exit status: 1 if any
 * result failed, else 0. The runners (tests/userspace/run-tests.sh, the
 * guest's tap-filter.awk) renumber the results of many programs into one
 * stream, so each program numbers from 1.
 */
#ifndef BELUGA_TESTS_TAP_H
#define BELUGA_TESTS_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_count __attribute__((unused));
static int tap_failures __attribute__((unused));
static int tap_skipped __attribute__((unused));
/* failures noted by CHECK*() and REQUIRE*() in the case TAP_RUN() runs */
static int tap_case_failures __attribute__((unused));

static inline void tap_vline(const char *prefix, const char *fmt, va_list ap)
{
	fputs(prefix, stdout);
	vprintf(fmt, ap);
}

static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tap_vline("# ", fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* One result; returns @ok so that callers can add diagnostics. */
static inline int tap_result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tap_result(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%sok %d ", ok ? "" : "not ", ++tap_count);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
	if (!ok)
		tap_failures++;
	return ok;
}

/* A result that could not be checked here, with the reason. */
static inline int tap_skip(const char *reason, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline int tap_skip(const char *reason, const char *fmt, ...)
{
	va_list ap;

	printf("ok %d ", ++tap_count);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" # SKIP %s\n", reason);
	fflush(stdout);
	tap_skipped++;
	return 1;
}

#ifndef TAP_RESULTS_ONLY
#define CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "# %s:%d: CHECK(%s) failed\n",		\
			__FILE__, __LINE__, #cond);			\
		tap_case_failures++;					\
	}								\
} while (0)

#define CHECK_EQ(a, b) do {						\
	long long _a = (long long)(a), _b = (long long)(b);		\
	if (_a != _b) {							\
		fprintf(stderr, "# %s:%d: %s == %s failed: %lld != %lld\n", \
			__FILE__, __LINE__, #a, #b, _a, _b);		\
		tap_case_failures++;					\
	}								\
} while (0)

/* For loops over many items: give up on the case after the first miss. */
#define REQUIRE(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "# %s:%d: REQUIRE(%s) failed\n",	\
			__FILE__, __LINE__, #cond);			\
		tap_case_failures++;					\
		return;							\
	}								\
} while (0)

#define REQUIRE_EQ(a, b) do {						\
	long long _a = (long long)(a), _b = (long long)(b);		\
	if (_a != _b) {							\
		fprintf(stderr, "# %s:%d: %s == %s failed: %lld != %lld\n", \
			__FILE__, __LINE__, #a, #b, _a, _b);		\
		tap_case_failures++;					\
		return;							\
	}								\
} while (0)

/* Run one case; it passes when no CHECK or REQUIRE in it failed. */
static inline void tap_run(const char *name, void (*fn)(void))
{
	tap_case_failures = 0;
	fn();
	fflush(stderr);
	tap_result(tap_case_failures == 0, "%s", name);
}

#define TAP_RUN(fn) tap_run(#fn, fn)
#endif /* TAP_RESULTS_ONLY */

static inline int tap_done(void)
{
	printf("1..%d\n", tap_count);
	printf("# %d passed, %d failed, %d skipped\n",
	       tap_count - tap_failures - tap_skipped, tap_failures, tap_skipped);
	fflush(stdout);
	return tap_failures ? 1 : 0;
}

#endif /* BELUGA_TESTS_TAP_H */
