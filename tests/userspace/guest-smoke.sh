#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# In-guest end-to-end test of the userspace tools against the real module
# (busybox ash; prints TAP). `make -C userspace static` installs it as
# build/guest-tests/userspace-smoke, which the VM suite runs from
# /tests/userspace after its own belugactl smoke.
#
# It attaches the first test dax device (and the test NUMA node) with
# 64 KiB blocks, so that full byte-for-byte verification stays fast on
# emulated CXL (refused first while another process holds its node open;
# while attached, /proc/iomem names it, its sysfs region links to it and
# its node is mode 0000), then: the demo (cold, warm: every block hits, concurrent
# engines racing on one namespace, page verification), stats and
# Prometheus output, evict, apply from a config file, error messages,
# detach. It leaves the pool as it found it (detached).
#
# Environment (from /etc/beluga/env in the guest): BELUGA_TEST_DAX (device
# names, e.g. "dax0.0 dax1.0"), BELUGA_TEST_NODE (a NUMA node number).

[ -f /etc/beluga/env ] && . /etc/beluga/env
PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH
BS=64K
T=/tmp/beluga-userspace-smoke
rm -rf "$T"
mkdir -p "$T"

n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n $*"; }
skip() { n=$((n + 1)); echo "ok $n $1 # SKIP $2"; }

# expect NAME RC PATTERN CMD...: CMD exits RC and its output contains PATTERN
expect() {
	_name=$1 _rc=$2 _pat=$3
	shift 3
	"$@" >"$T/out" 2>&1
	_got=$?
	if [ "$_got" -ne "$_rc" ]; then
		not_ok "$_name (exit $_got, expected $_rc)"
		sed 's/^/#   /' "$T/out" | head -n 8
	elif [ -n "$_pat" ] && ! grep -qF -- "$_pat" "$T/out"; then
		not_ok "$_name (output lacks '$_pat')"
		sed 's/^/#   /' "$T/out" | head -n 8
	else
		ok "$_name"
	fi
}

# json_num FILE KEY: the number after "KEY": in the demo's JSON
json_num() {
	sed -n "s/^ *\"$2\": \([0-9.]*\),*$/\1/p" "$1" | head -n 1
}

if [ ! -c /dev/beluga ]; then
	not_ok "userspace-smoke: /dev/beluga is missing (the module did not load)"
	echo "1..$n"
	exit 1
fi
# Start from an empty pool: an earlier suite may have left regions attached.
if ! belugactl status --json 2>/dev/null | grep -q '"nr_regions": 0'; then
	echo "# the pool is not empty at start; detaching everything with --evict"
	for id in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
		belugactl detach $id --evict >/dev/null 2>&1
	done
fi
expect "the pool is empty at start" 0 "no regions attached" belugactl status

dax=
for d in $BELUGA_TEST_DAX; do
	dax=$d
	break
done

# ---- discovery ----
expect "list shows the test dax devices" 0 "${dax:-NAME}" belugactl list
belugactl list --json >"$T/list.json" 2>&1
if grep -q '"devices": \[' "$T/list.json" && { [ -z "$dax" ] || grep -q "\"name\": \"$dax\"" "$T/list.json"; }; then
	ok "list --json names the devices"
else
	not_ok "list --json names the devices"
	sed 's/^/#   /' "$T/list.json" | head -n 20
fi
sysram=$(belugactl list 2>/dev/null | grep ' system-ram ' | awk '{ print $1; exit }')
if [ -n "$sysram" ]; then
	expect "attach refuses System RAM with the fix" 1 \
		"$sysram is online as System RAM (kmem): run \`daxctl reconfigure-device --mode=devdax $sysram\`" \
		belugactl attach "$sysram"
else
	skip "attach refuses System RAM with the fix" "no dax device is online as System RAM here"
fi
expect "the demo without a region says how to attach one" 1 "belugactl attach" beluga-demo -n 1

if [ -z "$dax" ]; then
	skip "dax tests" "BELUGA_TEST_DAX is empty: no device-dax region in this guest"
else
	# ---- who else holds the node ----
	mode_before=$(ls -l "/dev/$dax" | cut -c1-10)
	sleep 60 3<"/dev/$dax" &
	holder=$!
	expect "attach refuses $dax while another process has it open" 1 "is open in pid $holder (sleep)" \
		belugactl attach "/dev/$dax" --block-size $BS
	kill $holder
	wait $holder 2>/dev/null

	# ---- attach and the demo ----
	expect "attach $dax with 64 KiB blocks" 0 "attached $dax: region" belugactl attach "/dev/$dax" --block-size $BS
	region=$(sed -n "s/^attached $dax: region \([0-9]*\),.*/\1/p" "$T/out")
	if grep -q " : beluga:$dax\$" /proc/iomem; then
		ok "/proc/iomem shows $dax as beluga:$dax"
	else
		not_ok "/proc/iomem shows $dax as beluga:$dax"
		grep -i -E "dax|beluga" /proc/iomem | sed 's/^/#   /'
	fi
	if [ -n "$region" ] && [ "$(readlink -f "/sys/class/misc/beluga/region$region/dax")" = "$(readlink -f "/sys/bus/dax/devices/$dax")" ]; then
		ok "region$region/dax links to $dax"
	else
		not_ok "region${region:-?}/dax links to $dax ($(readlink "/sys/class/misc/beluga/region$region/dax" 2>&1))"
	fi
	if [ "$(ls -l "/dev/$dax" | cut -c1-10)" = "c---------" ]; then
		ok "/dev/$dax is mode 0000 while attached"
	else
		not_ok "/dev/$dax is mode 0000 while attached ($(ls -l "/dev/$dax"))"
	fi
	expect "status shows $dax" 0 "$dax" belugactl status
	expect "status --json has the region" 0 "\"name\": \"$dax\"" belugactl status --json

	beluga-demo --json >"$T/cold.json" 2>"$T/cold.err"
	rc=$?
	keys=$(json_num "$T/cold.json" keys)
	if [ $rc -eq 0 ] && [ "$(json_num "$T/cold.json" verify_errors)" = 0 ] && [ -n "$keys" ]; then
		ok "demo, cold pool: $(json_num "$T/cold.json" hits) of $keys blocks hit, all verified"
	else
		not_ok "demo, cold pool (exit $rc)"
		sed 's/^/#   /' "$T/cold.err" "$T/cold.json" | head -n 20
	fi
	beluga-demo --json >"$T/warm.json" 2>"$T/warm.err"
	rc=$?
	if [ $rc -eq 0 ] && [ "$(json_num "$T/warm.json" hits)" = "$keys" ] &&
		[ "$(json_num "$T/warm.json" verify_errors)" = 0 ]; then
		ok "demo, warm pool: every block of the repeated workload hits and verifies"
	else
		not_ok "demo, warm pool (exit $rc, hits $(json_num "$T/warm.json" hits) of $keys)"
		sed 's/^/#   /' "$T/warm.err" "$T/warm.json" | head -n 20
	fi

	# Every byte, whatever the memory's speed (auto may have chosen pages).
	beluga-demo --json -n 8 --ns 3 --verify full >"$T/full.json" 2>"$T/full.err"
	rc=$?
	if [ $rc -eq 0 ] && [ "$(json_num "$T/full.json" verify_errors)" = 0 ] &&
		grep -q '"verify": "full"' "$T/full.json"; then
		ok "demo --verify full: $(json_num "$T/full.json" bytes_verified) bytes verified"
	else
		not_ok "demo --verify full (exit $rc)"
		sed 's/^/#   /' "$T/full.err" | head -n 10
	fi

	# Four engines serving the same workload on one namespace at once: they
	# race to publish the same keys and read each other's blocks. Lost
	# races are legal, wrong bytes are not.
	for s in 11 12 13; do
		beluga-demo --json --seed 11 --ns 7 >"$T/race$s.json" 2>"$T/race$s.err" &
	done
	beluga-demo --json --seed 11 --ns 7 --verify pages >"$T/race14.json" 2>"$T/race14.err" &
	wait
	bad=
	for s in 11 12 13 14; do
		[ "$(json_num "$T/race$s.json" verify_errors)" = 0 ] || bad="$bad $s"
	done
	if [ -z "$bad" ]; then
		ok "four concurrent engines on one namespace verify every hit" \
			"($(cat "$T"/race*.json | sed -n 's/^ *"publish_races": \([0-9]*\),*$/\1/p' | awk '{ s += $1 } END { print s + 0 }') lost races)"
	else
		not_ok "four concurrent engines on one namespace (failed seeds:$bad)"
		for s in $bad; do sed 's/^/#   /' "$T/race$s.err" | head -n 5; done
	fi

	expect "stats counts lookups" 0 "lookup_hits" belugactl stats
	expect "stats --prometheus" 0 "# TYPE beluga_lookups_total counter" belugactl stats --prometheus
	expect "status --prometheus labels the pool and the region" 0 "{pool=\"beluga\",region=\"$dax\"" \
		belugactl status --prometheus
	expect "detach refuses published blocks without --evict" 1 "--evict" belugactl detach "$dax"
	expect "evict a namespace" 0 "namespace 7: evicted" belugactl evict --ns 7 --all
	# Emptied, the namespace serves the workload like a cold cache: only
	# the hits the workload makes on itself, as many as an ideal cache's.
	beluga-demo --json --seed 11 --ns 7 >"$T/after.json" 2>&1
	beluga-demo --json --seed 11 --dry-run >"$T/ideal.json" 2>&1
	if [ "$(json_num "$T/after.json" hits)" = "$(json_num "$T/ideal.json" hits)" ]; then
		ok "after evict, the namespace is cold again ($(json_num "$T/after.json" hits) self-hits)"
	else
		not_ok "after evict, the namespace is cold again (hits $(json_num "$T/after.json" hits)," \
			"a cold cache has $(json_num "$T/ideal.json" hits))"
	fi
	expect "evict a missing key names it" 1 "is not present in namespace 7" \
		belugactl evict --ns 7 --key 0x1234
	expect "detach --evict" 0 "detached region" belugactl detach "$dax" --evict
	if [ "$(ls -l "/dev/$dax" | cut -c1-10)" = "$mode_before" ] && ! grep -q " : beluga:$dax\$" /proc/iomem; then
		ok "after detach, /dev/$dax has its mode back and /proc/iomem no beluga:$dax"
	else
		not_ok "after detach, /dev/$dax has its mode back ($(ls -l "/dev/$dax"), was $mode_before)" \
			"and /proc/iomem no beluga:$dax ($(grep -c " : beluga:$dax\$" /proc/iomem) entries)"
	fi

	# ---- apply, as beluga.service does at boot ----
	printf 'block_size = %s\ndax = /dev/%s\n' $BS "$dax" >"$T/beluga.conf"
	expect "apply attaches the config" 0 "attached $dax" belugactl apply "$T/beluga.conf"
	expect "apply again skips it" 0 "$dax: already attached" belugactl apply "$T/beluga.conf"
	expect "detach by name" 0 "detached region" belugactl detach "$dax" --evict
fi

# ---- the NUMA node backend ----
if [ -n "$BELUGA_TEST_NODE" ]; then
	expect "attach node$BELUGA_TEST_NODE" 0 "attached node$BELUGA_TEST_NODE" \
		belugactl attach --node "$BELUGA_TEST_NODE" --size 16M --block-size $BS
	beluga-demo --json -n 16 >"$T/node.json" 2>"$T/node.err"
	rc=$?
	if [ $rc -eq 0 ] && [ "$(json_num "$T/node.json" verify_errors)" = 0 ]; then
		ok "demo on node memory verifies"
	else
		not_ok "demo on node memory (exit $rc)"
		sed 's/^/#   /' "$T/node.err" | head -n 10
	fi
	expect "detach node$BELUGA_TEST_NODE" 0 "detached region" belugactl detach "node$BELUGA_TEST_NODE" --evict
else
	skip "node backend" "BELUGA_TEST_NODE is not set in this guest"
fi

expect "detach of an unknown name" 1 "no attached region named 'dax99.0'" belugactl detach dax99.0
expect "status with nothing attached says how to attach" 0 "no regions attached" belugactl status

rm -rf "$T"
echo "1..$n"
[ $failed -eq 0 ]
