#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The debug lane's in-guest suite (busybox ash), installed as /beluga/run by
# scripts/test-debug.sh and run by /init after the topology is set up and
# beluga.ko is loaded. Prints TAP (names prefixed "6.12-debug:").
#   1. kmemleak baseline: scan, then clear what boot and setup left;
#   2. reliability tests (/tests/reliability/beluga_rel, all but rmmod);
#   3. the ioctl fuzzer (/tests/fuzz/beluga_fuzz $BELUGA_FUZZ_ARGS);
#   4. every kselftest (/tests/kselftest/*);
#   5. module unload/reload (beluga_rel rmmod), last;
#   6. kmemleak scan and the kernel log scan (KASAN, UBSAN, lockdep, BUG:,
#      WARNING:, kmemleak): any report fails the run, printed in full.
# Kernel command line knobs (set by scripts/test-debug.sh):
#   beluga_fuzz=ARGS   fuzzer arguments, commas for spaces ("-r,4,-p,4")
#   beluga_only=LIST   run only these steps (comma list of rel,fuzz,kselftest,rmmod)
. /etc/beluga/lib.sh
. /etc/beluga/env

FUZZ_ARGS="-r 3 -p 4 -i 250"
ONLY=
for a in $(cat /proc/cmdline); do
	case $a in
	beluga_fuzz=*) FUZZ_ARGS=$(echo "${a#beluga_fuzz=}" | tr ',' ' ') ;;
	beluga_only=*) ONLY=",${a#beluga_only=}," ;;
	beluga_fuzz_seed=*) export BELUGA_FUZZ_SEED="${a#beluga_fuzz_seed=}" ;;
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
if [ -w $KL ]; then
	t0=$(elapsed)
	echo scan >$KL
	n=$(grep -c '^unreferenced object' $KL)
	echo clear >$KL
	echo "# kmemleak baseline: $n suspect(s) from boot and setup cleared ($(awk -v a="$t0" -v b="$(elapsed)" 'BEGIN { printf "%.1f", b - a }') s)"
else
	echo "# kmemleak: $KL not available"
fi
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

if want rel; then
	step "reliability tests"
	run_tap_prog rel 900 /tests/reliability/beluga_rel
fi
if want fuzz; then
	step "fuzzer: beluga_fuzz $FUZZ_ARGS"
	# shellcheck disable=SC2086
	run_tap_prog fuzz 1800 /tests/fuzz/beluga_fuzz $FUZZ_ARGS
fi
if want kselftest; then
	found=0
	for t in /tests/kselftest/*; do
		[ -f "$t" ] && [ -x "$t" ] || continue
		found=1
		step "kselftest $(basename "$t")"
		run_tap_prog "$(basename "$t")" 900 "$t"
	done
	[ $found -eq 1 ] || tap_fail kselftest "no kselftest binaries in /tests/kselftest"
fi
if want rmmod; then
	step "module unload and reload"
	run_tap_prog rmmod 120 /tests/reliability/beluga_rel rmmod
fi

step "kmemleak and kernel log scan"
if [ -w $KL ]; then
	# objects must look unreferenced in two scans (and be older than 5 s)
	echo scan >$KL
	sleep 6
	echo scan >$KL
	if grep -q '^unreferenced object' $KL; then
		tap_fail kmemleak "$(grep -c '^unreferenced object' $KL) suspected leak(s) since setup:"
		head -n 300 $KL | sed 's/^/# /'
	else
		tap_ok kmemleak
	fi
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
# beluga's own messages at error level or above
if dmesg -r | grep -E '^<[0-3]>' | grep -i beluga >/tmp/beluga-err.txt; then
	tap_fail dmesg-beluga-errors "beluga logged at error level:"
	sed 's/^/# /' /tmp/beluga-err.txt | head -n 50
else
	tap_ok dmesg-beluga-errors
fi
echo "# guest suite done at uptime $(elapsed) s"
