#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# dmesg-scan.sh [FILE]: scan a kernel log (default: stdin) for reports the
# debug lane treats as failures, print each report (the matching line and the
# lines that follow it, up to a blank line or 40 lines), and exit 1 if any.
# Runs under busybox ash/awk (in the guest, on `dmesg`) and on the host (on a
# serial console log, where lines may carry a trailing CR).
#
# Failures: KASAN, UBSAN, lockdep (any "WARNING: ... locking/lock" report,
# "inconsistent lock state", DEBUG_LOCKS_WARN_ON, "lockdep is turned off"),
# "BUG:", "WARNING:", "kernel BUG", Oops, general protection faults, panics,
# kmemleak reports ("new suspected memory leaks", "unreferenced object").
# Not failures (printed as notes): allocation-failure reports ("page
# allocation failure", "vmalloc error"; the fault-injection tests cause them
# on purpose between "beluga-fault-inject: begin/end" marks), RCU stall
# warnings under TCG.
awk '
{ sub(/\r$/, "") }
function bad(s) {
	return s ~ /BUG: |WARNING:|UBSAN:|KASAN|kernel BUG at|Oops|general protection fault|Kernel panic|inconsistent lock state|DEBUG_LOCKS_WARN_ON|lockdep is turned off|possible recursive locking|possible circular locking|new suspected memory leak|unreferenced object 0x|sleeping function called from invalid context|stack-protector|refcount_t: /
}
/beluga-fault-inject: begin/ { inject = 1 }
/beluga-fault-inject: end/ { inject = 0 }
bad($0) {
	nbad++
	if (shown < 400) {
		print "# ---- kernel report " nbad (inject ? " (during fault injection)" : "") ":"
		print "#   " $0
		shown++
	}
	ctx = 40
	next
}
ctx > 0 {
	if ($0 ~ /^[ \t]*$/ || $0 ~ /^\[ *[0-9.]+\] *$/) { ctx = 0; next }
	if (shown < 400) { print "#   " $0; shown++ }
	ctx--
	next
}
/page allocation failure|vmalloc error|rcu_.*self-detected stall|rcu: INFO/ {
	notes++
	if (notes <= 5)
		print "# note: " $0
}
END {
	if (notes > 5)
		print "# note: " notes - 5 " more allocation-failure/stall notes"
	if (nbad) {
		print "# " nbad " kernel report line(s) above"
		exit 1
	}
	exit 0
}
' "${1:--}"
