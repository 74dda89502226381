#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# beluga-watchdogd from the outside, on the host: its arguments, its
# errors (each naming the cause and the fix), and what it does with a
# watchdog: pet while the pools answer FEED, stop petting on HOLD, log each
# change, disarm on SIGTERM only when nothing can outlive a fence.
# No real watchdog is used (the host cannot load softdog): the check
# build's beluga-watchdogd-fake carries the fake kernel (BELUGA_FAKE_KERNEL;
# a shared pool from BELUGA_FAKE_HOSTS, the host's lease from
# BELUGA_FAKE_LEASE) and a stand-in watchdog over a regular file
# (BELUGA_FAKE_WATCHDOG, tests/userspace/fake_watchdog.c), which records
# T<seconds> for a timeout set, K for each pet, and the daemon's own magic
# close character V. Real watchdogs are the guests' (tests/multihost).
#
# Usage: tests/userspace/test_watchdogd.sh BUILD_DIR   (prints TAP)
set -u

bin=${1:?usage: test_watchdogd.sh BUILD_DIR}
wdd=$bin/beluga-watchdogd
fwdd=$bin/beluga-watchdogd-fake

tmp=$(mktemp -d /tmp/beluga-wdd.XXXXXX)
daemon_pid=
trap '[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

# shellcheck source=../lib/tap.sh
. "$(dirname "$0")/../lib/tap.sh"

: >"$tmp/dev"
cat >"$tmp/hosts" <<'HOSTS'
0 active 2 3514 d1 alive 9 self node-a
1 active 1 3438 2e alive 0 - node-b
HOSTS
# The fake daemon looks for a hypervisor under BELUGA_FAKE_SYSROOT: an
# empty directory is bare metal, whatever this machine is.
mkdir -p "$tmp/bare" "$tmp/vm/proc" "$tmp/qemu/sys/class/dmi/id"
printf 'processor\t: 0\nflags\t\t: fpu vme de pse hypervisor lahf_lm\n' >"$tmp/vm/proc/cpuinfo"
echo QEMU >"$tmp/qemu/sys/class/dmi/id/sys_vendor"
fake=(env BELUGA_FAKE_KERNEL=1 BELUGA_FAKE_REGIONS=dax0.0:4M BELUGA_FAKE_HOSTS="$tmp/hosts"
      BELUGA_FAKE_LEASE="$tmp/lease" BELUGA_FAKE_SYSROOT="$tmp/bare")

# the watchdog file's record, one line: "T1 K K V"
record() { tr '\n' ' ' <"$tmp/wd" | sed 's/ $//'; }
pets() { grep -c '^K$' "$tmp/wd"; }

# wait_for FILE PATTERN SECONDS: until FILE has PATTERN
wait_for() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -qF -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# ---- arguments ----
expect "--help lists the options" 0 "--watchdog PATH" "$wdd" --help
for o in --timeout --device --once --foreground; do
	if "$wdd" --help | grep -qF -- "$o"; then ok "--help names $o"; else not_ok "--help names $o"; fi
done
expect "--version" 0 "beluga-watchdogd " "$wdd" --version
expect "--timeout 0 is a usage error" 2 "--timeout '0': give whole seconds, 1..16777" "$wdd" --timeout 0
expect "--timeout that is not a number" 2 "give whole seconds" "$wdd" --timeout 10s
expect "--timeout above what a pool takes" 2 "1..16777" "$wdd" --timeout 16778
expect "an unknown option" 2 "unknown option '--bogus'" "$wdd" --bogus
expect "an option without its argument" 2 "option '--watchdog' needs an argument" "$wdd" --watchdog
expect "an extra argument" 2 "unexpected argument 'now'" "$wdd" now
expect "--pause-fence 0 is a usage error" 2 "--pause-fence '0': give seconds, more than 0" \
	"$wdd" --pause-fence 0
expect "--pause-fence that is not a number" 2 "--pause-fence '1s': give seconds" "$wdd" --pause-fence 1s
out=$("$wdd" --timeout 0 2>/dev/null)
if [ -z "$out" ]; then ok "usage errors go to stderr only"; else not_ok "usage errors go to stderr only ($out)"; fi

# ---- errors before anything is armed ----
expect "a missing pool names the module" 1 "load the module with \`modprobe beluga\`" \
	"$wdd" --device "$tmp/none" --watchdog "$tmp/wd" --once
expect "a pool that is not Beluga" 1 "is not a Beluga device" \
	"$wdd" --device "$tmp/dev" --watchdog "$tmp/wd" --once
: >"$tmp/wd"
expect "a watchdog path that is not a watchdog (a regular file)" 1 \
	"$tmp/wd is not a watchdog device (WDIOC_GETSUPPORT: " \
	"${fake[@]}" "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" --once
expect "the fix names --watchdog" 1 "give the watchdog's device node with --watchdog" \
	"${fake[@]}" "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" --once
expect "a missing watchdog names the drivers to load" 1 \
	"$tmp/none not found: load the watchdog's driver" \
	"${fake[@]}" "$fwdd" --device "$tmp/dev" --watchdog "$tmp/none" --once
expect "a character device that is not a watchdog" 1 "/dev/null is not a watchdog device" \
	"${fake[@]}" "$fwdd" --device "$tmp/dev" --watchdog /dev/null --once
: >"$tmp/wd"
expect "a watchdog without magic close is refused" 1 "stops when its device is closed (no magic close)" \
	"${fake[@]}" BELUGA_FAKE_WATCHDOG=nomagic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" --once
if [ ! -s "$tmp/wd" ]; then ok "... before setting a timeout"; else not_ok "... before setting a timeout ($(record))"; fi

# ---- a virtual machine: refused unless a pause fence is declared ----
for vm in "vm:the CPU flag 'hypervisor' in /proc/cpuinfo" \
	  "qemu:the SMBIOS vendor QEMU in /sys/class/dmi/id/sys_vendor"; do
	: >"$tmp/wd"
	rm -f "$tmp/lease"
	expect "a VM (${vm%%:*}) without --pause-fence is refused, naming ${vm#*:}" 1 \
		"this host is a virtual machine (${vm#*:}): while it is paused its watchdog stops with it" \
		"${fake[@]}" BELUGA_FAKE_SYSROOT="$tmp/${vm%%:*}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" \
		--device "$tmp/dev" --watchdog "$tmp/wd" --timeout 7 --once
	if [ ! -s "$tmp/wd" ]; then ok "... before arming the watchdog"; else not_ok "... before arming the watchdog ($(record))"; fi
done
expect "the refusal names the fix: beluga-vm-fence and --pause-fence" 1 \
	"Run beluga-vm-fence on the hypervisor host (it stops the VM once paused too long), then give its --max-pause here as --pause-fence SECONDS" \
	"${fake[@]}" BELUGA_FAKE_SYSROOT="$tmp/vm" BELUGA_FAKE_WATCHDOG=magic "$fwdd" \
	--device "$tmp/dev" --watchdog "$tmp/wd" --timeout 7 --once
: >"$tmp/wd"
expect "a VM with --pause-fence 0.5 runs, and says what covers a pause" 0 \
	"a virtual machine: a pause is fenced by the hypervisor's beluga-vm-fence within 0.5 s" \
	"${fake[@]}" BELUGA_FAKE_SYSROOT="$tmp/vm" BELUGA_FAKE_WATCHDOG=magic "$fwdd" \
	--device "$tmp/dev" --watchdog "$tmp/wd" --timeout 7 --pause-fence 0.5 --once
if [ "$(record)" = "T7 K V" ]; then ok "... and pets as on bare metal (T7 K V)"; else not_ok "... and pets as on bare metal ($(record))"; fi

# ---- one query (--once) ----
: >"$tmp/wd"
rm -f "$tmp/lease"
expect "--once on a fresh host: FEED" 0 "$tmp/dev: FEED (device ranges: 0)" \
	"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" \
	--timeout 7 --once
if [ "$(record)" = "T7 K V" ]; then
	ok "--once: sets W, pets once, disarms with the magic close (T7 K V)"
else
	not_ok "--once: sets W, pets once, disarms with the magic close (got: $(record))"
fi
: >"$tmp/wd"
echo "fenced 1" >"$tmp/lease"
"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" \
	--timeout 7 --once >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(record)" = "T7" ]; then
	ok "--once on a fenced host with a device range: no pet, and the watchdog stays armed"
else
	not_ok "--once on a fenced host with a device range: no pet, stays armed (exit $rc: $(record))"
fi
if grep -qF "$tmp/dev: HOLD (device ranges: 1): the host fenced itself while devices may reach the pool: not petting $tmp/wd; it resets the host within 7 s" "$tmp/out" &&
   grep -qF "stopping without disarming $tmp/wd: device ranges are declared: it resets the host within 7 s" "$tmp/out"; then
	ok "--once on HOLD: logs the pool, its ranges, and the reset to come"
else
	not_ok "--once on HOLD: logs the pool, its ranges, and the reset to come"
	sed 's/^/#   /' "$tmp/out"
fi
: >"$tmp/wd"
echo "fresh 2" >"$tmp/lease"
"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" \
	--timeout 7 --once >"$tmp/out" 2>&1
if [ "$(record)" = "T7 K" ] && grep -qF "stopping without disarming" "$tmp/out"; then
	ok "--once while devices hold ranges: pets (FEED), but does not disarm at exit"
else
	not_ok "--once while devices hold ranges: pets, does not disarm ($(record))"
	sed 's/^/#   /' "$tmp/out"
fi
: >"$tmp/wd"
rm -f "$tmp/lease"
expect "a timeout the driver rounds is W as read back" 0 "armed with W = 8 s" \
	"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic BELUGA_FAKE_WATCHDOG_ROUND=4 "$fwdd" \
	--device "$tmp/dev" --watchdog "$tmp/wd" --timeout 5 --once
expect "a pool that is not shared answers FEED" 0 "FEED (device ranges: 0)" \
	env BELUGA_FAKE_KERNEL=1 BELUGA_FAKE_REGIONS=dax0.0:4M BELUGA_FAKE_SYSROOT="$tmp/bare" BELUGA_FAKE_WATCHDOG=magic "$fwdd" \
	--device "$tmp/dev" --watchdog "$tmp/wd" --timeout 3 --once

# A daemon left while device ranges were declared under W = 5 s: a new one must use that W.
: >"$tmp/wd"
echo "fresh 1 5000" >"$tmp/lease"
"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" \
	--timeout 3 --once >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 1 ] && [ "$(record)" = "T3" ] &&
   grep -qF "device ranges declared under another watchdog timeout hold it" "$tmp/out" &&
   grep -qF "stopping without disarming $tmp/wd: a pool may hold device ranges" "$tmp/out"; then
	ok "another W while ranges hold the old one: exit 1, the watchdog left armed, the fix named"
else
	not_ok "another W while ranges hold the old one: exit 1, left armed (exit $rc: $(record))"
	sed 's/^/#   /' "$tmp/out"
fi
: >"$tmp/wd"
expect "the W the ranges hold is accepted" 0 "FEED (device ranges: 1)" \
	"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" \
	--timeout 5 --once

# ---- the loop: FEED -> HOLD -> FEED, then SIGTERM ----
: >"$tmp/wd"
rm -f "$tmp/lease"
"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" \
	--timeout 1 --foreground >"$tmp/log" 2>&1 &
daemon_pid=$!
wait_for "$tmp/log" "querying every 250 ms" 10 && sleep 1.5
p1=$(pets)
if [ "$p1" -ge 2 ]; then ok "W 1 s: pets every 250 ms while FEED ($p1 in 1.5 s)"; else not_ok "W 1 s: pets every 250 ms while FEED ($p1 in 1.5 s)"; fi
echo "fenced 2" >"$tmp/lease"
if wait_for "$tmp/log" "$tmp/dev: FEED -> HOLD (device ranges: 2)" 10; then
	ok "a fence with device ranges is logged: FEED -> HOLD with the ranges"
else
	not_ok "a fence with device ranges is logged: FEED -> HOLD with the ranges"
fi
p2=$(pets)
sleep 1
p3=$(pets)
if [ "$p3" -eq "$p2" ]; then ok "no pet while HOLD ($p2 before, $p3 a second later)"; else not_ok "no pet while HOLD ($p2, then $p3)"; fi
echo "fenced 0" >"$tmp/lease"
if wait_for "$tmp/log" "$tmp/dev: HOLD -> FEED (device ranges: 0): petting the watchdog again" 10; then
	ok "the devices let go: HOLD -> FEED is logged"
else
	not_ok "the devices let go: HOLD -> FEED is logged"
fi
sleep 1
p4=$(pets)
if [ "$p4" -gt "$p3" ]; then ok "pets again once FEED ($p3, then $p4)"; else not_ok "pets again once FEED ($p3, then $p4)"; fi
kill -TERM "$daemon_pid"
wait "$daemon_pid"
rc=$?
daemon_pid=
if [ $rc -eq 0 ] && [ "$(tail -c 1 "$tmp/wd")" = V ] &&
   grep -qF "stopping: no device ranges and every pool answered FEED: $tmp/wd disarmed" "$tmp/log"; then
	ok "SIGTERM with no ranges and FEED: disarmed by the magic close, exit 0"
else
	not_ok "SIGTERM with no ranges and FEED: disarmed (exit $rc, last: $(tail -c 1 "$tmp/wd"))"
	sed 's/^/#   /' "$tmp/log" | tail -5
fi

: >"$tmp/wd"
echo "fresh 1" >"$tmp/lease"
"${fake[@]}" BELUGA_FAKE_WATCHDOG=magic "$fwdd" --device "$tmp/dev" --watchdog "$tmp/wd" \
	--timeout 1 --foreground >"$tmp/log" 2>&1 &
daemon_pid=$!
wait_for "$tmp/log" "FEED (device ranges: 1)" 10
kill -INT "$daemon_pid"
wait "$daemon_pid"
daemon_pid=
if ! grep -q V "$tmp/wd" && [ "$(pets)" -ge 1 ] &&
   grep -qF "stopping without disarming $tmp/wd: device ranges are declared: it resets the host within 1 s unless a new beluga-watchdogd pets it" "$tmp/log"; then
	ok "SIGINT while a device range is declared: left armed, and says the host resets within W"
else
	not_ok "SIGINT while a device range is declared: left armed ($(record))"
	sed 's/^/#   /' "$tmp/log" | tail -5
fi

tap_done
