#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# tests/fuzz/long.sh [--plain-only|--debug-only]: the long ioctl fuzz run
# (`make fuzz`), two legs one after the other, each a guest of its own:
#   1. the plain Debian 6.12 guest (scripts/vm/run-guest.sh 6.12 with
#      tests/fuzz/guest-fuzz.sh): fast, for volume;
#   2. the debug kernel (scripts/test-debug.sh --only fuzz: KASAN, UBSAN,
#      lockdep, kmemleak, the lane's dmesg scan).
# Each leg fuzzes for a fixed time and must reach its ioctl count (-N): the
# fuzzer prints its ioctl rate, and fails "ioctl-volume" short of it. Sized
# from rates measured under TCG on 2 CPUs (see Documentation/testing.md,
# "The long fuzz run"); together the two legs take under 60 minutes.
# Environment (to resize a leg): BELUGA_FUZZ_PLAIN_ARGS, BELUGA_FUZZ_DEBUG_ARGS
# (fuzzer arguments, spaces or commas), BELUGA_FUZZ_SEED (one seed for both).
# Output: build/fuzz-long/plain/ (run-guest.sh's), build/test-debug/ (the
# debug lane's); per leg build/fuzz-long/LEG.json (tests/fuzz/report.py
# record), the table build/fuzz-long/report.md and a summary at the end.
# `tests/fuzz/report.py render --readme Documentation/testing.md` puts the
# table there, and `scripts/gen-status.py` then the README's status box.
# Exit status 1 if either leg failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/vm/lib.sh

# Rounds x procs x ops, the time budget (s) and the ioctl count each leg
# must reach. Measured under TCG, 2 vCPUs, on a 2-core host shared with
# other guests: 6 workers x 1500 ops make ~15,800 ioctls a round; plain
# 6.12 made 720-1,534 ioctls/s, the debug kernel 60-72 with 6 workers.
# Plain: 85 rounds (~1.34 M) take ~15 min at 1,534/s; the 1400 s budget
# reaches 1 M at 715/s. Debug: 9 rounds (~143 k) would take 33 min at
# 72/s, so the 1800 s budget ends it, past 100 k at 56/s. With boots, the
# module build and the debug lane's kmemleak scan: at most ~59 minutes.
plain_args=${BELUGA_FUZZ_PLAIN_ARGS:-"-r 85 -p 6 -i 1500 -T 1400 -N 1000000"}
debug_args=${BELUGA_FUZZ_DEBUG_ARGS:-"-r 9 -p 6 -i 1500 -T 1800 -N 100000"}
legs="plain debug"
case ${1:-} in
--plain-only) legs=plain ;;
--debug-only) legs=debug ;;
"") ;;
*) die "usage: $0 [--plain-only|--debug-only]" ;;
esac

make -C tests/fuzz >/dev/null
out=$BELUGA_BUILD/fuzz-long
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
rc=0 summary=()
for leg in $legs; do
	t0=$(date +%s)
	# a leg not run this time keeps its record (with its own commit and date)
	mkdir -p "$out"
	rm -f "$out/$leg.json"
	case $leg in
	plain)
		d=$out/plain
		rm -rf "$d"
		mkdir -p "$d/tests"
		cp build/fuzz/beluga_fuzz "$d/tests/"
		echo "$plain_args" | tr ',' ' ' >"$d/tests/args"
		[ -n "${BELUGA_FUZZ_SEED:-}" ] && echo "$BELUGA_FUZZ_SEED" >"$d/tests/seed"
		log "leg 1: plain 6.12 guest, beluga_fuzz $plain_args"
		set +e
		scripts/vm/run-guest.sh -q -t 2400 -r tests/fuzz/guest-fuzz.sh \
			-d "$d/tests:/tests/fuzz" -o "$d" 6.12
		lrc=$?
		set -e
		tap=$d/results.tap
		;;
	debug)
		log "leg 2: debug kernel, beluga_fuzz $debug_args"
		set +e
		scripts/test-debug.sh --only fuzz --fuzz "$debug_args" -t 3000
		lrc=$?
		set -e
		tap=$BELUGA_BUILD/test-debug/results.tap
		;;
	esac
	# The plain guest's exit status is its script's (the dmesg check),
	# not its results': a leg passes only with no "not ok" in its TAP.
	failed=$(sed -n 's/^not ok [0-9]* //p' "$tap" 2>/dev/null | tr '\n' ' ' || true)
	[ -s "$tap" ] && [ -z "$failed" ] || lrc=1
	# the leg's first fuzzer run is its volume run (the debug lane replays one
	# worker alone after it)
	rate=$(grep -o 'ioctl rate: .*' "$tap" 2>/dev/null | head -n 1 || true)
	args=$plain_args
	[ "$leg" = debug ] && args=$debug_args
	/usr/bin/python3 tests/fuzz/report.py record --leg "$leg" --tap "$tap" --status "$lrc" \
		--seconds $(($(date +%s) - t0)) --args "$args" --commit "$commit" --out "$out" ||
		lrc=1
	summary+=("$leg: $([ "$lrc" -eq 0 ] && echo passed || echo "FAILED${failed:+ (not ok: ${failed% })}") in $(($(date +%s) - t0)) s; ${rate:-no rate printed}")
	[ "$lrc" -eq 0 ] || rc=1
done
echo "# long fuzz run:"
printf '#   %s\n' "${summary[@]}"
/usr/bin/python3 tests/fuzz/report.py render --dir "$out" --out "$out/report.md" &&
	echo "# the table: $out/report.md (into Documentation/testing.md: tests/fuzz/report.py render --readme Documentation/testing.md, then scripts/gen-status.py)"
exit $rc
