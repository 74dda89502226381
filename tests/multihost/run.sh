#!/usr/bin/env bash
# Two 6.12 guests on one shared CXL pool (scripts/vm/run-guest.sh -m): the
# multi-host protocol in the kernel module, end to end. See guest.sh for the
# steps. Output: OUT/A and OUT/B (console.log, results.tap), a TAP summary on
# stdout. Exit status 0 when both guests pass and exactly one won the race.
#   tests/multihost/run.sh [-o OUT] [-t SECS]
# Use a private BELUGA_BUILD when other runs may be going on.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${BELUGA_BUILD:-$root/build}/multihost tmo=900
while getopts o:t: opt; do
	case $opt in
	o) out=$OPTARG ;;
	t) tmo=$OPTARG ;;
	*) echo "usage: $0 [-o OUT] [-t SECS]" >&2; exit 2 ;;
	esac
done
rm -rf "$out"
mkdir -p "$out/A/mh" "$out/B/mh"
gcc -static -O2 -Wall -Wextra -Werror -I"$root/uapi" -o "$out/mhtool" "$here/mhtool.c"
make -s -C "$root/userspace" static >/dev/null
for r in A B; do
	cp "$out/mhtool" "$root/userspace/build/static/belugactl" "$out/$r/mh/"
	echo $r >"$out/$r/mh/role"
done

# Build the module and both initramfs images one after the other (they share
# the build directory), then boot the two guests at once on fresh CXL files.
# The guest setup numbers CXL regions in endpoint probe order, which differs
# between boots, so A's pool can land on the memory B onlines as System RAM:
# B then reports CONFLICT (guest.sh) and both guests are booted again.
attempt=0
while :; do
	attempt=$((attempt + 1))
	rm -rf "$out/mem" "$out/A/run" "$out/B/run"
	mkdir -p "$out/mem"
	pids=()
	for r in A B; do
		"$root/scripts/vm/run-guest.sh" -q -r "$here/guest.sh" -d "$out/$r/mh:/mh" \
			-m "$out/mem" -o "$out/$r/run" -t "$tmo" 6.12 >"$out/$r/log" 2>&1 &
		pids+=($!)
		# the second guest starts once the first one's initramfs exists
		while [ ! -f "$out/$r/run/initramfs.cpio" ] && kill -0 "${pids[-1]}" 2>/dev/null; do
			sleep 1
		done
	done
	conflict=0
	while kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null; do
		if grep -q '^# CONFLICT' "$out/B/run/results.tap" 2>/dev/null; then
			conflict=1
			kill "${pids[0]}" 2>/dev/null || true
		fi
		sleep 2
	done
	rc=0
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	[ $conflict = 1 ] && [ $attempt -lt 4 ] || break
	echo "# attempt $attempt: A's pool was on B's kmem memory; booting both again"
done

n=0 fail=0
for r in A B; do
	tap=$out/$r/run/results.tap
	echo "# guest $r: $tap"
	grep -E '^(ok|not ok) ' "$tap" | grep -v ':setup:' | sed "s/^/#   /" || true
	grep -q '^not ok' "$tap" && fail=1
	grep -q '^BELUGA-GUEST-EXIT 0' "$tap" || fail=1
done
n=$((n + 1))
if [ $fail = 0 ] && [ $rc = 0 ]; then echo "ok $n both guests pass"; else echo "not ok $n both guests pass"; rc=1; fi
wins=$(cat "$out"/A/run/results.tap "$out"/B/run/results.tap | grep -c '^# RACE . published 1 ' || true)
tags=$(cat "$out"/A/run/results.tap "$out"/B/run/results.tap | grep '^# TAG ' | awk '{print $5}' | sort -u | tr '\n' ' ')
n=$((n + 1))
if [ "$wins" = 1 ]; then echo "ok $n exactly one host won the same-key race"; else echo "not ok $n race winners: $wins"; rc=1; fi
n=$((n + 1))
if [ "$(echo $tags)" = 1 ] || [ "$(echo $tags)" = 2 ]; then
	echo "ok $n both hosts read the same winner's bytes (tag $tags)"
else
	echo "not ok $n race key bytes: tags '$tags'"; rc=1
fi
echo "1..$n"
exit $rc
