/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Minimal TAP output for the host tests: "ok N name" / "not ok N name",
 * the plan at the end. tests/userspace/run-tests.sh renumbers the results of all
 * programs into one stream.
 */
#ifndef BELUGA_TAP_H
#define BELUGA_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_count, tap_failures;

static void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void tap_diag(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
}

/* Report one result; returns @ok so callers can add diagnostics. */
static int tap_result(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static int tap_result(int ok, const char *fmt, ...)
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

static int tap_skip(const char *reason, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static int tap_skip(const char *reason, const char *fmt, ...)
{
	va_list ap;

	printf("ok %d ", ++tap_count);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" # SKIP %s\n", reason);
	return 1;
}

static int tap_done(void) __attribute__((unused));
static int tap_done(void)
{
	printf("1..%d\n", tap_count);
	return tap_failures ? 1 : 0;
}

#endif /* BELUGA_TAP_H */
