#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The long fuzz run's plain-kernel leg (busybox ash), the run script of
# scripts/vm/run-guest.sh 6.12 (tests/fuzz/long.sh): the ioctl fuzzer with
# the arguments in /tests/fuzz/args (and the seed in /tests/fuzz/seed, if
# any), then the guest's dmesg check. Prints TAP.
. /etc/beluga/lib.sh
. /etc/beluga/env

ARGS=$(cat /tests/fuzz/args 2>/dev/null || echo "-r 4 -p 4 -i 300 -T 60")
if [ -s /tests/fuzz/seed ]; then
	BELUGA_FUZZ_SEED=$(cat /tests/fuzz/seed)
	export BELUGA_FUZZ_SEED
fi
echo "# beluga_fuzz $ARGS"
# shellcheck disable=SC2086 # a list of arguments
run_tap_prog fuzz 3000 /tests/fuzz/beluga_fuzz $ARGS
dmesg_check
