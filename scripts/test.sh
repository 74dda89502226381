#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scripts/test.sh: everything `make test` runs, from a fresh clone on Debian 12.
#   1. scripts/install-deps.sh (idempotent; needs root the first time)
#   2. host unit tests of the portable core   make -C tests/unit check     (TAP)
#   3. userspace host tests                    make -C userspace check      (TAP)
#      3c. the engine lane: PyPI venvs (tests/engines/*.lock) and their tests (TAP)
#   4. beluga.ko for both guest kernels with W=1, failing on any warning; 4a. the
#      root Kbuild (scripts/check-root-kbuild.sh); 4b. the single-host module
#      (BELUGA_SHARED=n), W=1 against 6.12 (scripts/check-single-host.sh)
#   5. static kselftests (make -C tests/kselftest) and static userspace tools
#      (make -C userspace static)
#   5a. the Python package (make -C userspace python), libbeluga and the tools (make -C
#       userspace) for the 6.12 guest's install stage
#   5b. a smoke run of the benchmarks (scripts/bench.sh --smoke --guest; no thresholds)
#   6. the in-guest suite (tests/vm/guest-tests.sh) on Linux 6.1 and 6.12, two
#      QEMU TCG guests in parallel; the 6.12 guest also runs tests/python (host/
#      and guest/) with pytest against the real module, one TAP result per test,
#      and the README's server install in a chroot on an overlay of the host's root
#      (scripts/vm/guest-install.sh)
#   7. the debug kernel lane (scripts/test-debug.sh; BELUGA_TEST_DEBUG=0 skips it,
#      and the skip is counted)
#   8. two, then three 6.12 guests sharing one CXL pool, then the watchdog scenario
#      (tests/multihost/run.sh -C -S all)
# Every result is TAP; a missing component is a failure with its reason. The whole
# stream is kept in build/test/results.tap and the logs in build/test/logs/. The last
# line is exactly "N passed, N failed, N skipped"; exit status 1 if anything failed.
# Environment: BELUGA_GUEST_TIMEOUT (s, default 1200), BELUGA_GUEST_KERNELS
# (default "6.1 6.12"), BELUGA_GUEST_SMP (default 2), BELUGA_TEST_DEBUG (0: skip
# step 7).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/vm/lib.sh
# a line per stage with its time, a heartbeat per minute (stderr; the TAP is unchanged)
. scripts/progress.sh

# One `make test` per tree at a time: a second one waits (they would share build/test,
# the per-kernel module build dirs and the CPU).
mkdir -p "$BELUGA_BUILD"
exec 9>"$BELUGA_BUILD/.test.lock"
if ! flock -n 9; then
	echo "# another make test is running in this tree; waiting for it to finish" >&2
	flock 9
fi

T=$BELUGA_BUILD/test
L=$T/logs
rm -rf "$T"
mkdir -p "$L"
stream=$T/stream.tap
: >"$stream"
kernels=${BELUGA_GUEST_KERNELS:-6.1 6.12}
gtmo=${BELUGA_GUEST_TIMEOUT:-1200}
t_start=$(date +%s)
progress_init "make test" "$BELUGA_BUILD/test-stage-times"

# out LINE...: one line of the TAP stream (printed and kept)
out() {
	printf '%s\n' "$@" | tee -a "$stream"
}
ok() { out "ok - $1"; }
notok() {
	local name=$1
	shift
	out "not ok - $name"
	local l
	for l in "$@"; do out "# $l"; done
}
# log_tail LOG: the last lines of a log as comments
log_tail() {
	out "# last lines of $1:"
	tail -n "${2:-30}" "$1" | sed 's/^/#   /' | tee -a "$stream"
}
elapsed() { echo $(($(date +%s) - $1)); }

# step NAME LOG CMD...: a command whose exit status is one result
step() {
	local name=$1 logf=$2 t0 rc
	shift 2
	t0=$(date +%s)
	set +e
	"$@" >"$logf" 2>&1
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		ok "$name ($(elapsed "$t0") s)"
	else
		notok "$name" "'$*' exited with status $rc (log: $logf)"
		log_tail "$logf"
	fi
	return $rc
}

# suite NAME LOG TIMEOUT CMD...: a command that prints TAP; its results are re-emitted
# as NAME:... and a crash/non-zero exit without a reported failure is a failure.
suite() {
	local name=$1 logf=$2 tmo=$3
	shift 3
	{
		set +e
		timeout -k 10 "$tmo" "$@" 2>&1 </dev/null
		echo "BELUGA-RC $?"
	} | tee "$logf" | awk -v pfx="$name:" -v prog="$name" -v tmo="$tmo" -f scripts/vm/tap-filter.awk |
		tee -a "$stream"
}

out "# beluga make test: $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -r), $(nproc) cpus"

progress_stage "dependencies (scripts/install-deps.sh)" "$L/install-deps.log"
# 1. dependencies ---------------------------------------------------------------
if [ "$(id -u)" -eq 0 ]; then
	step host:install-deps "$L/install-deps.log" scripts/install-deps.sh || true
elif [ -s "$BELUGA_CACHE/kver-6.1" ] && [ -s "$BELUGA_CACHE/kver-6.12" ]; then
	out "# not root: scripts/install-deps.sh not re-run; using the packages it installed before"
else
	notok host:install-deps "not root and scripts/install-deps.sh never ran: run 'sudo scripts/install-deps.sh' once"
fi

# 2./3. host tests -----------------------------------------------------------------
# host_suite NAME DIR TARGET: make -C DIR TARGET as a TAP suite, or a failure naming
# what is missing
host_suite() {
	local name=$1 dir=$2 target=$3
	if [ ! -f "$dir/Makefile" ]; then
		notok "$name" "$dir/Makefile is missing: the component is not in this tree yet"
		return
	fi
	out "# make -C $dir $target"
	local t0
	t0=$(date +%s)
	suite "$name" "$L/$name.log" 1800 make -C "$dir" "$target"
	out "# $name: $(elapsed "$t0") s"
}
progress_stage "core unit tests (tests/unit)" "$L/unit.log"
host_suite unit tests/unit check
progress_stage "multi-host simulator (tests/unit/mh)" "$L/unit-mh.log"
host_suite unit-mh tests/unit/mh check
progress_stage "userspace host tests (make -C userspace check)" "$L/userspace.log"
host_suite userspace userspace check
progress_stage "CUDA build and GPU check" "$L/cuda.log"
# 3b. the GPU path: nvcc builds the CUDA code (SKIP without nvcc); the device check
#     runs where a GPU is present, else says SKIP with the reason
suite cuda "$L/cuda.log" 900 scripts/device-check-cuda.sh
progress_stage "engine lane (tests/engines/run-tests.sh)" "$L/engines.log"
# 3c. the engine lane: the venvs of tests/engines/*.lock from PyPI (scripts/engine-venv.sh,
#     reused while the lock is unchanged), then the engine tests with each venv's python
out "# engine lane (tests/engines/run-tests.sh)"
t0=$(date +%s)
suite engines "$L/engines.log" 2400 tests/engines/run-tests.sh
out "# engines: $(elapsed "$t0") s"

progress_stage "module builds (W=1 for $kernels, root Kbuild, single-host)"
# 4. the module, W=1, for both guest kernels -------------------------------------
declare -A ko=()
for k in $kernels; do
	kv=$(kver_of "$k")
	ko[$k]=none
	set +e
	path=$(scripts/vm/build-module.sh -W "$k" 2>"$L/module-$k.log")
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		ok "build:beluga.ko-$k-W=1 ($kv)"
		ko[$k]=$path
	elif [ $rc -eq 2 ]; then
		notok "build:beluga.ko-$k-W=1" "warnings in the W=1 build against $kv (the guest still gets this module):"
		grep -E ': (warning|error):|^WARNING: ' "$L/module-$k.log" | head -n 40 | sed 's/^/#   /' | tee -a "$stream"
		ko[$k]=$(ls "$BELUGA_BUILD/kmod-$kv/kmod/beluga.ko" 2>/dev/null || echo none)
	else
		notok "build:beluga.ko-$k-W=1" "beluga.ko does not build against $kv (log: $L/module-$k.log)"
		log_tail "$L/module-$k.log"
	fi
done

# 4a. the root Kbuild: `make -C .../build M=$PWD` from the root (one kernel suffices)
step build:root-kbuild "$L/root-kbuild.log" scripts/check-root-kbuild.sh "$(kver_of 6.12)" || true

# 4b. the single-host module: BELUGA_SHARED=n leaves the shared-pool code out; built
#     W=1 against 6.12 in its own copy, warning-free, and compared with step 4's module
single_ref=
[ -f "${ko[6.12]:-none}" ] && single_ref=${ko[6.12]}
single_dir=
if step build:beluga.ko-6.12-W=1-single-host "$L/single-host.log" \
	scripts/check-single-host.sh "$(kver_of 6.12)" $single_ref; then
	single_dir=$BELUGA_BUILD/kmod-$(kver_of 6.12)-single/single-host
fi

progress_stage "static kselftests and tools, Python package"
# 5. static binaries for the guests ----------------------------------------------
ksft_dir=
if [ -f tests/kselftest/Makefile ]; then
	if step build:kselftest "$L/kselftest-build.log" make -C tests/kselftest; then :; fi
	for d in tests/kselftest/build/bin tests/kselftest/build; do
		if [ -d "$d" ] && [ -n "$(find "$d" -maxdepth 1 -type f -perm -u+x -print -quit)" ]; then
			ksft_dir=$d
			break
		fi
	done
	if [ -n "$ksft_dir" ]; then
		dyn=$(find "$ksft_dir" -maxdepth 1 -type f -perm -u+x -exec sh -c 'ldd "$1" >/dev/null 2>&1 && echo "${1##*/}"' _ {} \;)
		if [ -n "$dyn" ]; then
			out "# note: dynamically linked kselftests (the guest has only libc and ndctl's libraries): $(echo $dyn)"
		fi
	fi
else
	notok build:kselftest "tests/kselftest/Makefile is missing: the kselftests are not in this tree yet"
fi
us_dir=
if [ -f userspace/Makefile ]; then
	if step build:userspace-static "$L/userspace-static.log" make -C userspace static; then :; fi
	[ -d userspace/build/static ] && us_dir=userspace/build/static
else
	notok build:userspace-static "userspace/Makefile is missing: the userspace tools are not in this tree yet"
fi

# 5a. the Python package (the C extension statically linked with libbeluga) that the
#     6.12 guest's Python stage imports from this tree over 9p; libbeluga and the tools
#     (make -C userspace), which the 6.12 guest's install stage installs with `make
#     install` from this tree (built here: under TCG the guest would compile them)
if [ -f userspace/Makefile ]; then
	if step build:python "$L/python-build.log" make -C userspace python; then :; fi
	if step build:userspace "$L/userspace-build.log" make -C userspace; then :; fi
fi

progress_stage "benchmark smoke run" "$L/bench-smoke.log"
# 5b. the benchmarks keep building and running (a smoke run: no thresholds) -----------
if [ -x scripts/bench.sh ]; then
	if step bench:smoke "$L/bench-smoke.log" scripts/bench.sh --smoke --guest; then :; fi
else
	notok bench:smoke "scripts/bench.sh is missing"
fi

progress_stage "guests ($kernels, in parallel)" "$T/guest-6.12/console.log"
# 6. the guests, in parallel ----------------------------------------------------------
declare -A gpid=()
# an interrupted test.sh takes its guests (and their QEMUs, see run-guest.sh) down
stop_guests() {
	local p
	for p in "${gpid[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap 'stop_guests; exit 143' INT TERM
for k in $kernels; do
	args=(-q -t "$gtmo" -s "${BELUGA_GUEST_SMP:-2}" -o "$T/guest-$k" -k "${ko[$k]}")
	[ -n "$ksft_dir" ] && args+=(-d "$ksft_dir:/tests/kselftest")
	[ -n "$us_dir" ] && args+=(-d "$us_dir:/usr/bin")
	[ -d userspace/build/guest-tests ] && args+=(-d "userspace/build/guest-tests:/tests/userspace")
	# 6.12 runs tests/python with the host's Python, shared read-only over 9p, and
	# swaps in the single-host module once (BELUGA_TEST_SINGLE_KO, admin_test)
	[ "$k" = 6.12 ] && args+=(-P "$BELUGA_ROOT")
	[ "$k" = 6.12 ] && [ -n "$single_dir" ] && args+=(-d "$single_dir:/tests/single-host")
	out "# booting the $k guest"
	scripts/vm/run-guest.sh "${args[@]}" "$k" >"$L/guest-$k.log" 2>&1 &
	gpid[$k]=$!
done
for k in $kernels; do
	set +e
	wait "${gpid[$k]}"
	rc=$?
	set -e
	res=$T/guest-$k/results.tap
	if [ -s "$res" ]; then
		# the guest's stream: results and comments only (not the exit marker)
		grep -v '^BELUGA-GUEST-EXIT' "$res" | tee -a "$stream"
	else
		notok "$k:guest" "the guest produced no output (status $rc); see $L/guest-$k.log"
		log_tail "$L/guest-$k.log"
	fi
	if [ $rc -ne 0 ] && [ -f "$T/guest-$k/console.log" ]; then
		out "# $k guest console: $T/guest-$k/console.log"
	fi
	[ -f "$T/guest-$k/time" ] && out "# $k guest time: $(cat "$T/guest-$k/time")"
done

progress_stage "debug kernel lane (scripts/test-debug.sh)" "$L/debug.log" "$BELUGA_CACHE/kdebug/obj/build.log"
# 7. the debug kernel lane (KASAN, UBSAN, lockdep, kmemleak, fault injection):
#    reliability tests, the bounded ioctl fuzzer, the kselftests, module
#    unload/reload, then a scan of the kernel log. The kernel is built once per
#    machine and config (kernel-debug/build.sh caches it); its build time is
#    printed. scripts/test-debug.sh already names its results debug:...
if [ "${BELUGA_TEST_DEBUG:-1}" = 0 ]; then
	out "ok - debug:lane # SKIP BELUGA_TEST_DEBUG=0 in the environment (run 'make test-debug' for this lane)"
else
	out "# debug kernel lane (scripts/test-debug.sh)"
	t0=$(date +%s)
	{
		set +e
		timeout -k 10 4800 scripts/test-debug.sh 2>&1 </dev/null
		echo "BELUGA-RC $?"
	} | tee "$L/debug.log" | awk -v pfx="" -v prog="debug:lane" -v tmo=4800 -f scripts/vm/tap-filter.awk |
		tee -a "$stream"
	out "# debug lane: $(elapsed "$t0") s"
fi

progress_stage "multi-host guests (tests/multihost/run.sh)" "$L/multihost.log"
# 8. rack scale: 6.12 guests on one shared CXL pool file (tests/multihost/run.sh -C
#    -S all): two guests (cross-host reads, same-key race, refused version,
#    rejoin, a host that stops without detaching), then three (three-way race, a
#    guest's QEMU killed with SIGKILL mid-stream while the others count lookup
#    misses, takeover, pool accounting, the killed guest booted again), then the
#    watchdog scenario (device pins under a device lease; A's i6300esb resets it
#    before B takes over, or A's engine lets go and A rejoins; a late device
#    write never lands; a paused A is quit by beluga-vm-fence before B takes
#    over)
out "# multi-host guests (tests/multihost/run.sh -C -S all)"
t0=$(date +%s)
suite multihost "$L/multihost.log" 1800 tests/multihost/run.sh -C -S all
out "# multihost: $(elapsed "$t0") s"

progress_end
# summary ----------------------------------------------------------------------------
out "# total time: $(elapsed "$t_start") s"
awk -v res="$T/results.tap" -v fails="$T/failures" '
function directive(s, d,   l) {
	l = tolower(s)
	if (match(l, "# *" d)) {
		r = substr(s, RSTART + RLENGTH)
		gsub(/^[ \t:]+|[ \t]+$/, "", r)
		return 1
	}
	return 0
}
/^(not )?ok( |$)/ {
	bad = ($1 == "not")
	name = $0
	sub(/^(not )?ok( [0-9]+)? *(- )?/, "", name)
	n++
	if (directive(name, "skip")) {
		if (r == "") {
			failed++
			printf "not ok %d %s\n# a SKIP must give its reason\n", n, name > res
			printf "not ok %d %s (SKIP without a reason)\n", n, name > fails
		} else {
			skipped++
			printf "ok %d %s\n", n, name > res
		}
		next
	}
	if (bad && directive(name, "todo") && r != "") {
		skipped++
		printf "not ok %d %s\n", n, name > res
		next
	}
	if (bad) {
		failed++
		printf "not ok %d %s\n", n, name > fails
	} else
		passed++
	printf "%sok %d %s\n", bad ? "not " : "", n, name > res
	next
}
{ print > res }
END {
	printf "1..%d\n", n > res
	printf "%d passed, %d failed, %d skipped\n", passed, failed, skipped > (res ".summary")
}' "$stream"
: >>"$T/failures"
if [ -s "$T/failures" ]; then
	echo "# failed:"
	sed 's/^/#   /' "$T/failures"
fi
summary=$(cat "$T/results.tap.summary")
echo "$summary"
case $summary in
*" 0 failed,"*) exit 0 ;;
*) exit 1 ;;
esac
