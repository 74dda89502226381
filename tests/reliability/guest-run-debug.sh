#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The debug lane's in-guest suite (busybox ash), installed as /beluga/run by
# scripts/test-debug.sh and run by /init after the topology is set up and
# beluga.ko is loaded. Prints TAP (names prefixed "6.12-debug:").
#   1. the kernel log of boot and setup is scanned;
#   2. reliability tests (every /tests/reliability/rel_* but rel_modload;
#      kselftest-harness programs, one per area);
#   3. the ioctl fuzzer (/tests/fuzz/beluga_fuzz $BELUGA_FUZZ_ARGS), then one
#      of its workers alone, its model checked against STATS (fuzz-solo);
#   4. every kselftest (/tests/kselftest/*), then the outside exercisers
#      (/tests/fuzz/exercise.sh: stress-ng dev and sysfs, trinity);
#   5. module unload/reload and module-load fault injection
#      (/tests/reliability/rel_modload), last;
#   6. kmemleak scan (leaks younger than the tests) and the kernel log scan
#      (KASAN, UBSAN, lockdep, BUG:, WARNING:, kmemleak): any report fails the
#      run, printed in full.
# Kernel command line knobs (set by scripts/test-debug.sh):
#   beluga_fuzz=ARGS   fuzzer arguments, commas for spaces ("-r,4,-p,4")
#   beluga_only=LIST   run only these steps (comma list of rel,fuzz,kselftest,exercise,rmmod)
#   beluga_exercise_secs=N  seconds for each outside exerciser (default 20)
#   beluga_rel=LIST    only these reliability tests (comma list of test names,
#                      '-' or '_'; each program's -l lists its own)
#   beluga_rel_verbose=1  the fault-nth tests print every fault point they try
#   beluga_modload_stride=K  module-load fault injection tests every K-th point
#                      (default 6; 1 tests them all)
. /etc/beluga/lib.sh
. /etc/beluga/env

FUZZ_ARGS="-r 4 -p 4 -i 300 -T 60"
EXERCISE_SECS=20
REL_TESTS=
export BELUGA_MODLOAD_STRIDE=6
ONLY=
for a in $(cat /proc/cmdline); do
	case $a in
	beluga_fuzz=*) FUZZ_ARGS=$(echo "${a#beluga_fuzz=}" | tr ',' ' ') ;;
	beluga_exercise_secs=*) EXERCISE_SECS=${a#beluga_exercise_secs=} ;;
	beluga_only=*) ONLY=",${a#beluga_only=}," ;;
	beluga_fuzz_seed=*) export BELUGA_FUZZ_SEED="${a#beluga_fuzz_seed=}" ;;
	beluga_modload_stride=*) BELUGA_MODLOAD_STRIDE=${a#beluga_modload_stride=} ;;
	beluga_rel=*) REL_TESTS=$(echo "${a#beluga_rel=}" | tr ',' ' ') ;;
	beluga_rel_verbose=*) export BELUGA_REL_VERBOSE=1 ;;
	esac
done
# a development aid: an initramfs may carry the step list in a file
[ -z "$ONLY" ] && [ -s /etc/beluga/debug-only ] && ONLY=",$(cat /etc/beluga/debug-only),"
[ -s /etc/beluga/debug-fuzz ] && FUZZ_ARGS=$(cat /etc/beluga/debug-fuzz)
want() {
	[ -z "$ONLY" ] || case $ONLY in *",$1,"*) return 0 ;; *) return 1 ;; esac
}
elapsed() {
	cut -d' ' -f1 /proc/uptime
}

KL=/sys/kernel/debug/kmemleak
# no background scans: they compete with the tests for the two vCPUs; the
# one scan that counts runs at the end
[ -w $KL ] && echo scan=off >$KL
# kmemleak: one scan at the end; objects older than the tests (boot, setup)
# are not counted against them (a scan takes ~20-40 s under TCG + KASAN)
T_TESTS=$(elapsed)
dmesg -c >/tmp/dmesg-boot.txt 2>/dev/null || dmesg >/tmp/dmesg-boot.txt
# a sanitizer report during boot or setup fails the run too
if ! sh /etc/beluga/dmesg-scan.sh /tmp/dmesg-boot.txt >/tmp/scan-boot.txt; then
	tap_fail dmesg-clean-boot "kernel reports during boot/setup:"
	cat /tmp/scan-boot.txt
else
	tap_ok dmesg-clean-boot
fi

step() {
	echo "# ---- $1 (uptime $(elapsed) s)"
}

# rel_filter PROG (run_tap_progs' TAP_FILTER): rel_modload runs last, in its
# own step. With beluga_rel=LIST, TAP_ARGS becomes "-t NAME" for each listed
# test that PROG has (the harness's -l prints them, last column), and a
# program with none of them is not run; without a list, all run.
rel_filter() {
	[ "${1##*/}" = rel_modload ] && return 1
	[ -z "$REL_TESTS" ] && return 0
	_have=$("$1" -l 2>&1 | awk 'NR > 1 && !/^--/ { print $NF }')
	for _t in $REL_TESTS; do
		_t=$(echo "$_t" | tr - _)
		echo "$_have" | grep -qx "$_t" && TAP_ARGS="$TAP_ARGS -t $_t"
	done
	[ -n "$TAP_ARGS" ]
}

if want rel; then
	step "reliability tests"
	# read by run_tap_progs (/etc/beluga/lib.sh)
	# shellcheck disable=SC2034
	TAP_FILTER=rel_filter
	run_tap_progs rel 900 /tests/reliability/rel_*
	# shellcheck disable=SC2034
	TAP_FILTER=
fi
if want fuzz; then
	step "fuzzer: beluga_fuzz $FUZZ_ARGS"
	# shellcheck disable=SC2086
	run_tap_prog fuzz 1800 /tests/fuzz/beluga_fuzz $FUZZ_ARGS
	# one worker alone, STATS checked against its model after every
	# operation: a sequence in which the old model lost a block (an ALLOC
	# it had no room to record, near op 385 of 1500; forks and threads
	# make a replay only nearly deterministic: beluga_fuzz's model-full
	# result is the exact test). -T ends it early; -i must stay 1500, the
	# worker's self-kill point depends on it.
	step "fuzzer: one worker alone, its model checked"
	run_tap_prog fuzz-solo 600 /tests/fuzz/beluga_fuzz -s 0xe8e5e4e8e6a58a3a \
		-p 6 -i 1500 -T 20 -R 1 -W 3 -k
fi
if want kselftest; then
	run_tap_progs kselftest 900 /tests/kselftest/*
fi
if want exercise; then
	step "outside exercisers: stress-ng dev and sysfs, trinity (${EXERCISE_SECS} s each)"
	sh /tests/fuzz/exercise.sh "$EXERCISE_SECS"
fi
if want rmmod; then
	step "module unload and reload"
	run_tap_prog rmmod 600 /tests/reliability/rel_modload
fi

step "kmemleak and kernel log scan"
# leaks: entries of /sys/kernel/debug/kmemleak allocated after the tests
# began, each printed in full. An entry names its allocation time as
# "jiffies N": with CONFIG_HZ=100 (kernel-debug/debug.config) and jiffies
# starting at INITIAL_JIFFIES = 2^32 - 300 * HZ, that is uptime
# (N - 4294937296) / 100 s.
kmemleak_new() {
	awk -v t0="$1" '
	/^unreferenced object/ { if (keep) printf "%s", ent; ent = ""; keep = 0 }
	{ ent = ent $0 "\n" }
	/ jiffies [0-9]+/ { j = $0; sub(/.* jiffies /, "", j); sub(/[^0-9].*/, "", j)
		keep = ((j - 4294937296) / 100 >= t0) }
	END { if (keep) printf "%s", ent }' $KL
}
if [ -w $KL ]; then
	win=$(awk -v a="$T_TESTS" 'BEGIN { printf "%d", a - 1 }')
	echo scan >$KL
	if [ -n "$(kmemleak_new "$win")" ]; then
		# a second scan drops what was only in flight during the first
		sleep 5
		echo scan >$KL
	fi
	leaks=$(kmemleak_new "$win")
	if [ -n "$leaks" ]; then
		tap_fail kmemleak "$(echo "$leaks" | grep -c '^unreferenced object') suspected leak(s) from the tests:"
		echo "$leaks" | head -n 300 | sed 's/^/# /'
	else
		tap_ok kmemleak
	fi
	old=$(grep -c '^unreferenced object' $KL)
	[ "$old" -gt 0 ] && echo "# kmemleak: $old suspect(s) in all, the rest older than the tests (boot/setup)"
else
	tap_skip kmemleak "no $KL (kernel without CONFIG_DEBUG_KMEMLEAK)"
fi
dmesg >/tmp/dmesg-run.txt
if sh /etc/beluga/dmesg-scan.sh /tmp/dmesg-run.txt >/tmp/scan-run.txt; then
	tap_ok dmesg-clean
	cat /tmp/scan-run.txt
else
	tap_fail dmesg-clean "kernel reports while the tests ran:"
	cat /tmp/scan-run.txt
fi
# beluga's own messages at error level or above, except those the fault
# injection tests cause on purpose (between their marks)
dmesg -r | awk '
	/beluga-fault-inject: begin/ { inj = 1 } /beluga-fault-inject: end/ { inj = 0 }
	/^<[0-3]>/ && tolower($0) ~ /beluga/ && !inj' >/tmp/beluga-err.txt
if [ -s /tmp/beluga-err.txt ]; then
	tap_fail dmesg-beluga-errors "beluga logged at error level:"
	sed 's/^/# /' /tmp/beluga-err.txt | head -n 50
else
	tap_ok dmesg-beluga-errors
fi
echo "# guest suite done at uptime $(elapsed) s"
