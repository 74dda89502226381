# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# The TAP printer of the host test scripts (tests/userspace/test_*.sh), the
# shell side of tests/lib/tap.h: source it, report with ok / not_ok / skip,
# end with tap_done (the plan; status 1 if anything failed). The runner
# (tests/userspace/run-tests.sh) renumbers every script's results.
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n $*"; }
skip() { # skip NAME REASON
	n=$((n + 1))
	echo "ok $n $1 # SKIP $2"
}
tap_done() {
	echo "1..$n"
	[ "$failed" -eq 0 ]
}
# expect NAME RC PATTERN CMD...: CMD exits RC and its stderr+stdout contains PATTERN
expect() {
	local name=$1 want_rc=$2 pattern=$3 out rc
	shift 3
	out=$("$@" 2>&1)
	rc=$?
	if [ "$rc" -ne "$want_rc" ]; then
		not_ok "$name (exit $rc, expected $want_rc)"
		printf '%s\n' "$out" | sed 's/^/#   /' | head -5
	elif [ -n "$pattern" ] && ! grep -qF -- "$pattern" <<<"$out"; then
		not_ok "$name (output lacks '$pattern')"
		printf '%s\n' "$out" | sed 's/^/#   /' | head -5
	else
		ok "$name"
	fi
}
