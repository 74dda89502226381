#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# beluga-vm-fence against a real QEMU (qemu-system-x86_64 -machine none:
# no guest, but QMP and its run states are QEMU's own): a pause longer than
# --max-pause is fenced (quit, or reset), shorter ones are not, the pauses
# within --window add up, old ones drop out, a VM that never ran is left
# alone; its arguments and errors (each naming the cause and the fix).
# The fence of a paused guest that pins a pool is tests/multihost's
# (run.sh -S watchdog, "paused").
#
# Usage: tests/userspace/test_vmfence.sh   (prints TAP)
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
fence=$top/userspace/vmfence/beluga-vm-fence
py=/usr/bin/python3
qmp_do=$top/tests/multihost/qmp-do.py
tmp=$(mktemp -d /tmp/beluga-vmfence.XXXXXX)
qemu_pid=
fence_pid=
trap '[ -n "$fence_pid" ] && kill "$fence_pid" 2>/dev/null
      [ -n "$qemu_pid" ] && kill "$qemu_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
# shellcheck source=../lib/tap.sh
. "$here/../lib/tap.sh"

# ---- arguments ----
expect "--help names --max-pause and --window" 0 "--max-pause SECONDS" "$py" "$fence" --help
for o in --qmp --window --action --log --connect-wait; do
	if "$py" "$fence" --help | grep -qF -- "$o"; then ok "--help names $o"; else not_ok "--help names $o"; fi
done
expect "--qmp is required" 2 "the following arguments are required: --qmp" \
	"$py" "$fence" --max-pause 1
expect "--max-pause 0 is refused" 2 "--max-pause 0 must be more than 0 and less than --window 60" \
	"$py" "$fence" --qmp "$tmp/none" --max-pause 0
expect "--max-pause beyond the window is refused" 2 "less than --window 5" \
	"$py" "$fence" --qmp "$tmp/none" --max-pause 6 --window 5
expect "an unknown --action" 2 "invalid choice: 'kill'" \
	"$py" "$fence" --qmp "$tmp/none" --max-pause 1 --action kill
expect "no QEMU at the socket: names the -qmp option to give QEMU" 1 \
	"cannot connect to QEMU's QMP socket $tmp/none: No such file or directory; start QEMU with -qmp unix:$tmp/none,server=on,wait=off" \
	"$py" "$fence" --qmp "$tmp/none" --max-pause 1

if ! command -v qemu-system-x86_64 >/dev/null; then
	skip "a real QEMU" "qemu-system-x86_64 is not installed (scripts/install-deps.sh installs it)"
	tap_done
	exit
fi

# start_qemu [QEMU ARGS...]: a QEMU without a guest, a QMP socket for the
# fence (q1) and one for this test (q2)
start_qemu() {
	rm -f "$tmp/q1" "$tmp/q2" "$tmp/log"
	qemu-system-x86_64 -machine none -nodefaults -display none "$@" \
		-qmp "unix:$tmp/q1,server=on,wait=off" -qmp "unix:$tmp/q2,server=on,wait=off" \
		>"$tmp/qemu.out" 2>&1 &
	qemu_pid=$!
}
# start_fence ARGS...: beluga-vm-fence on q1, logging to $tmp/log
start_fence() {
	"$py" "$fence" --qmp "$tmp/q1" --connect-wait 10 --log "$tmp/log" "$@" 2>"$tmp/fence.err" &
	fence_pid=$!
	local i
	for ((i = 0; i < 100; i++)); do
		[ -s "$tmp/fence.err" ] && break
		grep -q ' CONNECTED ' "$tmp/log" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
qmp() { "$py" "$qmp_do" "$tmp/q2" "$@" >>"$tmp/qmp.out" 2>&1; }
# events: the event names of the fence's log after CONNECTED, one line: "STOP RESUME ..."
events() { awk '$2 != "CONNECTED" { print $2 }' "$tmp/log" 2>/dev/null | tr '\n' ' ' | sed 's/ $//'; }
# gone SECONDS: QEMU exited within SECONDS
gone() {
	local i
	for ((i = 0; i < $1 * 10; i++)); do
		kill -0 "$qemu_pid" 2>/dev/null || { wait "$qemu_pid" 2>/dev/null; qemu_pid=; return 0; }
		sleep 0.1
	done
	return 1
}
stop_all() {
	[ -n "$qemu_pid" ] && { qmp quit; gone 5 || kill "$qemu_pid"; }
	[ -n "$fence_pid" ] && { wait "$fence_pid"; fence_rc=$?; fence_pid=; }
	qemu_pid=
}

# A short pause, then a long one.
start_qemu
start_fence --max-pause 1 --window 30 || not_ok "beluga-vm-fence connects ($(cat "$tmp/fence.err"))"
qmp stop; sleep 0.2; qmp cont; sleep 0.3
if kill -0 "$qemu_pid" 2>/dev/null && [ "$(events)" = "STOP RESUME" ] &&
   grep -q ' CONNECTED {"status": "running"}' "$tmp/log"; then
	ok "a pause of 0.2 s (--max-pause 1) is not fenced"
else
	not_ok "a pause of 0.2 s (--max-pause 1) is not fenced (events: $(events))"
fi
t0=$(date +%s.%N)
qmp stop
if gone 5; then
	t1=$(date +%s.%N)
	wait "$fence_pid"
	fence_rc=$?
	fence_pid=
	x=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	ok "a long pause is fenced: QEMU quit $x s after the stop"
	if [ "$(events)" = "STOP RESUME STOP FENCE SHUTDOWN" ] &&
	   grep -qE ' FENCE \{"action": "quit", "paused_s": 1(\.0[0-9]*)?\}' "$tmp/log"; then
		ok "the log: STOP RESUME STOP FENCE SHUTDOWN, the fence once the two pauses summed 1 s"
	else
		not_ok "the log: STOP RESUME STOP FENCE SHUTDOWN, the fence with the paused time ($(events))"
		sed 's/^/#   /' "$tmp/log"
	fi
	if [ "$fence_rc" = 0 ] && grep -q 'FENCE {"action": "quit"' "$tmp/fence.err"; then
		ok "beluga-vm-fence exits 0 when QEMU is gone, and said what it did on stderr"
	else
		not_ok "beluga-vm-fence exits 0 when QEMU is gone (exit $fence_rc: $(cat "$tmp/fence.err"))"
	fi
else
	not_ok "a long pause is fenced: QEMU still runs 5 s after the stop (events: $(events))"
	stop_all
fi

# last_pause: seconds from the last STOP to the FENCE, on the fence's clock
last_pause() {
	awk '$2 == "STOP" { s = $1 } $2 == "FENCE" { printf "%.2f", $1 - s; exit }' "$tmp/log"
}

# two_pauses NAME MAX_PAUSE WINDOW FIRST GAP AWK_TEST: a pause of FIRST s,
# GAP s of running, then a pause until fenced; AWK_TEST judges x, the
# second pause's own length until the fence
two_pauses() {
	start_qemu
	start_fence --max-pause "$2" --window "$3"
	qmp stop; sleep "$4"; qmp cont; sleep "$5"
	qmp stop
	if gone 3; then
		x=$(last_pause)
		if awk -v x="$x" "BEGIN { exit !($6) }"; then
			ok "$1: the second was fenced after $x s of its own"
		else
			not_ok "$1: the second was fenced after $x s of its own"
			sed 's/^/#   /' "$tmp/log"
		fi
	else
		not_ok "$1: not fenced ($(events))"
	fi
	stop_all
}
# Pauses add up within the window: after 0.8 s paused, a second pause is
# fenced once the sum reaches 1.5 s, well before 1.5 s of its own ...
two_pauses "pauses add up within the window" 1.5 6 0.8 0.2 "x < 1.2"
# ... and drop out of it: 2.5 s after a pause of 0.3 s (--window 2), a new
# pause gets the whole 0.6 s.
two_pauses "a pause older than the window drops out (0.6 s is the whole budget)" 0.6 2 0.3 2.5 "x >= 0.55"

# --action reset: the VM stays, reset (its devices too), still paused.
start_qemu
start_fence --max-pause 0.3 --window 10 --action reset
qmp stop; sleep 1.5
: >"$tmp/qmp.out"
qmp query-status
if kill -0 "$qemu_pid" 2>/dev/null && grep -q ' FENCE {"action": "reset"' "$tmp/log" &&
   grep -q ' RESET ' "$tmp/log" && grep -q "'running': False" "$tmp/qmp.out"; then
	ok "--action reset: QEMU resets the paused VM (RESET event), which stays stopped until cont"
else
	not_ok "--action reset: a RESET and a paused VM ($(events); $(cat "$tmp/qmp.out"))"
fi
stop_all

# A VM that never ran (-S: prelaunch) is not fenced; one paused before the
# fence connects is.
start_qemu -S
start_fence --max-pause 0.3 --window 10
sleep 1
if kill -0 "$qemu_pid" 2>/dev/null; then
	ok "a VM started with -S (prelaunch) is left alone"
else
	not_ok "a VM started with -S (prelaunch) is left alone (events: $(events))"
fi
stop_all
start_qemu
qmp stop
start_fence --max-pause 0.3 --window 10
if gone 3; then
	ok "a VM already paused when the fence connects is fenced"
else
	not_ok "a VM already paused when the fence connects is fenced (events: $(events))"
fi
stop_all

tap_done
