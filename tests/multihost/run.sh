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

# A boots first on its own CXL files and names the device of its pool (PCI
# bus 0d, 0e, 0f = root port 0, 1, 2 = file mem0, mem1, mem2). B then boots
# with private files except that one, hard-linked: the guests share the pool
# and nothing else (not the memory either onlines as System RAM). The guest
# setup numbers regions in endpoint probe order, which differs between
# boots: when B made that device its kmem node it reports CONFLICT and is
# booted again.
rc=0
mkdir -p "$out/memA"
"$root/scripts/vm/run-guest.sh" -q -r "$here/guest.sh" -d "$out/A/mh:/mh" \
	-m "$out/memA" -o "$out/A/run" -t "$tmo" 6.12 >"$out/A/log" 2>&1 &
apid=$!
bdf=
for _ in $(seq 600); do
	bdf=$(sed -n 's/^# POOL-BDF \(0000:..:00\.0\).*/\1/p' "$out/A/run/results.tap" 2>/dev/null || true)
	[ -n "$bdf" ] || ! kill -0 $apid 2>/dev/null && break
	sleep 1
done
if [ -z "$bdf" ]; then
	echo "# guest A never named its pool device"
	wait $apid || true
	rc=1
else
	k=$((0x$(echo "$bdf" | cut -d: -f2) - 0x0d))
	echo "$bdf" >"$out/B/mh/pool-bdf"
	echo "# A's pool: $bdf, file mem$k"
	for attempt in 1 2 3 4 5; do
		rm -rf "$out/memB" "$out/B/run"
		mkdir -p "$out/memB"
		ln "$out/memA/mem$k" "$out/memB/mem$k"
		"$root/scripts/vm/run-guest.sh" -q -r "$here/guest.sh" -d "$out/B/mh:/mh" \
			-m "$out/memB" -o "$out/B/run" -t "$tmo" 6.12 >"$out/B/log" 2>&1 || rc=1
		grep -q "^# CONFLICT" "$out/B/run/results.tap" 2>/dev/null || break
		rc=0
		echo "# B attempt $attempt: $bdf is B's kmem node; booting B again"
	done
	wait $apid || rc=1
fi

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
