/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A tiny TAP harness: each test case is a function; CHECK*() record
 * failures with file, line and values on stderr and let the case go on, so
 * one run shows every broken expectation. tap_run() prints "ok N name" or
 * "not ok N name"; tap_done() prints the plan and gives the exit status.
 */
#ifndef BEL_TAP_H
#define BEL_TAP_H

#include <stdio.h>
#include <stdlib.h>

static int tap_count;
static int tap_failed_cases;
static int tap_case_failures;

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

static inline void tap_run(const char *name, void (*fn)(void))
{
	tap_case_failures = 0;
	fn();
	tap_count++;
	if (tap_case_failures)
		tap_failed_cases++;
	printf("%s %d %s\n", tap_case_failures ? "not ok" : "ok", tap_count,
	       name);
	fflush(stdout);
}

#define TAP_RUN(fn) tap_run(#fn, fn)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_count);
	return tap_failed_cases ? 1 : 0;
}

#endif /* BEL_TAP_H */
