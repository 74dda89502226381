/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The kernel's kselftest_harness.h for Beluga's in-guest test programs
 * (tests/kselftest, tests/reliability). tests/kselftest/Makefile extracts
 * it from Debian's linux-source-6.12 at build time; it is never committed.
 *
 * The harness is not -Wextra clean: its functions and TEST() wrappers have
 * unused parameters, and EXPECT_EQ(0, u64) compares an int literal with an
 * unsigned field (-Wsign-compare; the harness prints both sides with their
 * own signedness, so the comparison is what we mean).
 */
#ifndef BELUGA_TESTS_HARNESS_H
#define BELUGA_TESTS_HARNESS_H

#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
/*
 * -Wclobbered: TEST_F()'s wrapper keeps the fork() result in a local across
 * setjmp(). If it is clobbered, a failed ASSERT skips the fixture teardown
 * (the failure is still reported). Every fixture therefore starts by
 * emptying the pool itself instead of trusting the last teardown.
 */
#pragma GCC diagnostic ignored "-Wclobbered"
#include "kselftest_harness.h"

#endif /* BELUGA_TESTS_HARNESS_H */
