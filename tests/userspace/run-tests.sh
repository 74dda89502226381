#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Run the userspace host tests (built by `make check` into DIR) and print
# one TAP stream: every program's results renumbered in order, its other
# output as comments, the plan last. A program that exits non-zero without
# reporting a failure (a crash, a sanitizer report) is a failure itself.
#
# Usage: tests/userspace/run-tests.sh DIR
set -u

dir=${1:?usage: run-tests.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
us=$(cd "$here/../../userspace" && pwd)
# Sanitizers: fail hard on the first report. Leak checking needs ptrace-free
# runs; keep it unless the environment cannot do it.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}

n=0
failed=0

# run NAME CMD...: run a TAP-printing program and re-emit its results
run() {
	local name=$1 out rc line reported=0
	shift
	out=$("$@" 2>&1)
	rc=$?
	while IFS= read -r line; do
		if [[ $line =~ ^(not\ )?ok\ [0-9]+\ (.*)$ ]]; then
			n=$((n + 1))
			if [ -n "${BASH_REMATCH[1]}" ]; then
				failed=$((failed + 1))
				reported=1
			fi
			echo "${BASH_REMATCH[1]}ok $n $name: ${BASH_REMATCH[2]}"
		elif [[ $line =~ ^1\.\.[0-9]+$ ]]; then
			:
		elif [ -n "$line" ]; then
			echo "# ${line#\# }"
		fi
	done <<<"$out"
	if [ $rc -ne 0 ] && [ $reported -eq 0 ]; then
		n=$((n + 1))
		failed=$((failed + 1))
		echo "not ok $n $name: exited with status $rc without reporting a failure (crash or sanitizer)"
	fi
}

# LeakSanitizer cannot run under ptrace (some CI sandboxes): probe once.
if ! "$dir/test_hash" >/dev/null 2>&1; then
	if ASAN_OPTIONS=detect_leaks=0 "$dir/test_hash" >/dev/null 2>&1; then
		echo "# LeakSanitizer does not work here; running without leak checks"
		export ASAN_OPTIONS=abort_on_error=0:detect_leaks=0
	fi
fi

run hash "$dir/test_hash"
run batch "$dir/test_batch"
run sysfs "$dir/test_sysfs"
run errors "$dir/test_errors"
run ring "$dir/test_ring"
run index-map "$dir/test_index_map"
run device "$dir/test_device"
# the shared trace reader, also over the real trace where the checkout has it
BELUGA_TRACE=${BELUGA_TRACE:-$(cd "$here/../../.." && pwd)/shared/data/mooncake_conversation_trace.jsonl} \
	run trace "$dir/test_trace"
# The same threads under ThreadSanitizer, where this kernel lets it run.
tsan=$dir/../tsan/test_errors
if [ -x "$tsan" ]; then
	if TSAN_OPTIONS=halt_on_error=1 "$tsan" 2>&1 | grep -q 'FATAL: ThreadSanitizer'; then
		n=$((n + 1))
		echo "ok $n errors-tsan # SKIP ThreadSanitizer cannot start here (address space layout)"
	else
		TSAN_OPTIONS=halt_on_error=1:exitcode=66 run errors-tsan "$tsan"
	fi
fi
run cuda "$dir/test_cuda" "$dir"
run cuda-mapped "$dir/test_cuda" --mapped "$dir"
run kvcopy "$dir/test_kvcopy"
run cli "$here/test_cli.sh" "$dir"
run watchdogd "$here/test_watchdogd.sh" "$dir"
run vmfence "$here/test_vmfence.sh"
run progress "$here/test_progress.sh" "$dir"
run version "$here/test_version.sh" "$dir"
run docs "$here/test_docs.sh" "$here/../.."
run troubleshooting "$here/test_troubleshooting.sh" "$here/../.."
run reports "$here/test_reports.sh" "$here/../.."
run engine-review "$here/test_engine_review.sh" "$here/../.."
run status "$here/test_status.sh" "$here/../.."
run architecture "$here/test_architecture.sh" "$here/../.."
run install "$here/test_install.sh" "$us"
run licenses "$here/test_licenses.sh" "$here/../.."
run scripts "$here/test_scripts.sh"
run examples "$here/test_examples.sh" "$dir"
run man "$here/test_man.sh" "$dir"
run python "$here/test_python.sh" "$us"
run try "$here/test_try.sh" "$here/../.."

echo "1..$n"
echo "# userspace: $((n - failed)) passed, $failed failed"
[ $failed -eq 0 ]
