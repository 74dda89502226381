# SPDX-License-Identifier: GPL-2.0
# Re-emit one program's TAP results under a unique name, numbered in a running
# sequence. Shared by the guest (busybox awk, /etc/beluga/tap-filter.awk) and the
# host (scripts/test.sh). Input: the program's output (stdout+stderr), then one
# line "BELUGA-RC <exit status>" appended by the caller.
# Variables (-v):
#   pfx   prefix for each result name, e.g. "6.12:beluga_test:"
#   prog  name for results synthesized here, e.g. "6.12:beluga_test"
#   n     results numbered so far (default 0); nf: file to write the final count to
#   tmo   the time limit the caller used (for the message)
# Top-level "ok"/"not ok" lines are renumbered and prefixed; every other line
# becomes a "# " comment (indented subtest lines too, so they are never counted).
# A program that crashed, timed out, or exited non-zero without reporting a failure
# gets a failing result of its own; one that printed no result at all too.
/^BELUGA-RC [0-9]+$/ { rc = $2; gotrc = 1; next }
/^(not )?ok [0-9]+/ || /^(not )?ok( |$)/ {
	bad = ($1 == "not")
	rest = $0
	sub(/^(not )?ok( [0-9]+)? *(- )?/, "", rest)
	n++; results++
	if (bad) fails++
	printf "%sok %d %s%s\n", (bad ? "not " : ""), n, pfx, rest
	fflush()
	next
}
/^#/ { print; fflush(); next }
/^[ \t]*$/ { next }
{ print "# " $0; fflush() }
END {
	if (!gotrc) {
		n++; printf "not ok %d %s:no-exit-status\n# the output ended without the exit status line\n", n, prog
	} else if (rc == 124 || rc == 137 || rc == 143) {
		n++; printf "not ok %d %s:timeout\n# killed after %s s (exit status %d)\n", n, prog, tmo, rc
	} else if (rc == 4 && fails == 0 && results == 0) {
		n++; printf "ok %d %s # SKIP exited with KSFT_SKIP (4) and no results\n", n, prog
	} else if (rc != 0 && rc != 4 && fails == 0) {
		n++; printf "not ok %d %s:exit-status\n# exited with status %d without reporting a failed test (crash, or a build/setup error)\n", n, prog, rc
	} else if (results == 0 && rc == 0) {
		n++; printf "not ok %d %s:no-results\n# exited 0 but printed no TAP result\n", n, prog
	}
	if (nf != "")
		printf "%d\n", n > nf
}
