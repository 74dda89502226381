#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# One host of the three-guest multi-host test (run.sh -S three; busybox ash,
# 6.12 guest). /mh holds mhtool, "role" (A, B or C), "pool-bdf" (B and C) and
# "rejoin" (C's second boot). Hosts A, B, C are ids 0, 1, 2 on one pool; they
# coordinate through keys in the pool (markers 9xxx):
#   1. all: publish 1000+100*id..+3 (tag id+1), marker 9000+id; wait for the
#      others' keys and check every byte (cross-host reads among all three).
#   2. all: race on key 5000, marker 9010+id; read 5000 ("# TAG"): run.sh
#      checks one winner and that all three read the winner's bytes.
#   3. all: wait until the three own disjoint partitions that cover the pool.
#      B publishes 1500..1515, A 1400..1415; A times LOOKUP of its own keys vs
#      B's (mhtool cost, "COST" lines).
#   4. host death: A and B publish 9021/9022 and start "mhtool watch" (every
#      existing key, per-lookup misses). C waits for both, publishes a stream
#      of keys 3000.. and pins A's keys in a loop; run.sh kills C's QEMU with
#      SIGKILL in the middle of it ("# STREAM n" lines). A and B wait until C
#      is dead and A|B own every partition, keep watching, check C's keys
#      byte-exact, count its stream keys, and account the pool (mhtool
#      account: "ACCT" lines, checked by run.sh). "# ACCOUNTED" tells run.sh
#      to boot C again.
#   5. rejoin: C (second boot, /mh/rejoin) attaches again: new incarnation,
#      home partition 2 back, publishes 1300..1303 and 9060; everyone reads
#      everything; A, B and C itself watch the existing keys throughout and
#      check C's partitions; C publishes 9061 when done, A and B 9070/9071.
# "# MISSES PHASE ROLE N" and "WATCH ..." lines report the survivors' misses.
. /etc/beluga/env
. /etc/beluga/lib.sh
T=/mh/mhtool
# markers, cost and stream keys: only their first 64 KiB are written and
# checked (CXL memory is slow under TCG); the keys of steps 1, 2 and 5 whole
L="env MH_FILL=65536 $T"
NS=77
DAX=dax0.0
# the pool's host records, one a line (BELUGA_IOC_HOSTS; mhtool.c)
hosts_table() { $T hosts; }
role=$(cat /mh/role)
rejoin=0
[ -f /mh/rejoin ] && rejoin=1
BELUGA_KPFX="$BELUGA_KPFX:mh3-$role"
[ $rejoin = 1 ] && BELUGA_KPFX="$BELUGA_KPFX-rejoin"
case $role in A) id=0 ;; B) id=1 ;; C) id=2 ;; esac
tag=$((id + 1))
rc=0
check() { tap_check "$@" || rc=1; }
up() { cut -d' ' -f1 /proc/uptime; }
hosts() { echo "# hosts ($1, uptime $(up)):"; hosts_table | sed 's/^/#   /'; }
# field N of host ID's record (1 id, 2 state, 3 inc, 5 owned, 6 alive)
hfield() { hosts_table | awk -v id="$1" -v f="$2" '$1 == id { print $f }'; }
# settled IDS...: the listed hosts are alive and own disjoint partition sets
# that cover every partition (the others may keep stale bits in their records)
settled() {
	_u=0
	for _h in "$@"; do
		[ "$(hfield $_h 6)" = alive ] || return 1
		_o=$((0x$(hfield $_h 5)))
		[ $((_u & _o)) = 0 ] || return 1
		_u=$((_u | _o))
	done
	[ $_u = $((0xff)) ]
}
# wait_settled SECS IDS...
wait_settled() {
	_t=$1
	shift
	_i=0
	until settled "$@"; do
		_i=$((_i + 1))
		[ $_i -gt $((_t * 2)) ] && return 1
		sleep 0.5
	done
}

# wait_home SECS: this host owns its home partition (a joiner's ALLOC fails
# with ENOSPC until the adopter hands it over, Documentation/multihost.md
# section 6)
owns_home() { [ $(((0x$(hfield $id 5) >> id) & 1)) = 1 ]; }
wait_home() {
	_i=0
	until owns_home; do
		_i=$((_i + 1))
		[ $_i -gt $(($1 * 2)) ] && break
		sleep 0.5
	done
	if owns_home; then
		tap_ok home-partition
	else
		tap_fail home-partition "owned $(hfield $id 5) after $1 s"
		rc=1
	fi
}

. /mh/pool-lib.sh
find_pool 120

# watch_start PHASE KEYS...: survivors' lookups in the background
watch_start() {
	_wphase=$1
	shift
	rm -f /run/watch-stop
	$T watch $NS /run/watch-stop "$@" >/run/watch.out 2>&1 &
	wpid=$!
}
# watch_stop: one TAP result; misses are failures (run.sh sums them too)
watch_stop() {
	touch /run/watch-stop
	wait $wpid
	_wrc=$?
	sed 's/^/# /' /run/watch.out | grep -v '^# WATCH miss key' | tail -n 8
	grep '^# WATCH miss key' /run/watch.out | head -n 5 | sed 's/^/# /'
	_m=$(sed -n 's/^WATCH lookups [0-9]* misses \([0-9]*\).*/\1/p' /run/watch.out)
	echo "# MISSES $_wphase $role ${_m:-unknown}"
	if [ "$_wrc" = 0 ] && [ "${_m:-x}" = 0 ]; then
		tap_ok "lookups-existing-keys-$_wphase"
	elif [ -f /mh/miss-todo ] && [ -n "$_m" ] && [ "$_m" != 0 ]; then
		# run.sh MH_KNOWN_MISS_BUG=1: reported, not a failure
		tap_next
		echo "not ok $TAP_N $BELUGA_KPFX:lookups-existing-keys-$_wphase # TODO known kernel bug: $_m misses"
	else
		tap_fail "lookups-existing-keys-$_wphase" "${_m:-?} lookups of existing keys missed (exit $_wrc)"
		rc=1
	fi
}
WATCH_KEYS="1000:4 1100:4 1200:4 5000:1 1400:4 1500:4"
# run.sh MH_WATCH_EXTRA: more ranges (a self-test: unpublished keys miss)
[ -f /mh/watch-extra ] && WATCH_KEYS="$WATCH_KEYS $(cat /mh/watch-extra)"

if [ $rejoin = 1 ]; then
	# ---- 5. C's second life on the same pool file ----
	check attach $T attach $DAX $id
	# the rejoiner's own lookups of the keys that were there before it came
	# back count like the survivors' (phase "rejoin")
	watch_start rejoin $WATCH_KEYS
	t0=$(up)
	hosts after-rejoin-attach
	inc=$(hfield $id 3)
	echo "# INCARNATION $role $inc"
	if [ "${inc:-0}" -ge 2 ]; then tap_ok new-incarnation; else tap_fail new-incarnation "incarnation ${inc:-?}"; rc=1; fi
	wait_home 60
	check publish-after-rejoin $L publish $NS 1300 4 $tag
	check publish-rejoined $L publish $NS 9060 1 $tag
	if wait_settled 60 0 1 2; then tap_ok partitions-three-again; else tap_fail partitions-three-again; rc=1; fi
	hosts rejoined
	# watch for 25 s after the attach at least
	while [ "$(awk -v a="$(up)" -v b="$t0" 'BEGIN { print (a - b < 25) }')" = 1 ]; do sleep 1; done
	watch_stop
	check own-old-keys $L wait $NS 1200 4 60
	check a-keys $L wait $NS 1000 4 60
	check b-keys $L wait $NS 1100 4 60
	check race-key $L wait $NS 5000 1 60
	out=$($T count $NS 3000 30)
	echo "# STREAM-KEYS $role $out"
	# A and B power off (without detaching) once C is done
	check publish-c-done $L publish $NS 9061 1 $tag
	hosts end
	dmesg | grep -i 'beluga' | sed 's/^/# dmesg: /'
	dmesg_check dmesg || rc=1
	exit $rc
fi

# ---- 1. attach, cross-host reads among all three ----
if [ "$role" = B ]; then
	check belugactl-attach /mh/belugactl attach --shared --host-id $id /dev/$DAX
else
	check attach $T attach $DAX $id
fi
echo "# INCARNATION $role $(hfield $id 3)"
wait_home 60
base=$((1000 + 100 * id))
check publish $T publish $NS $base 4 $tag
check publish-ready $L publish $NS $((9000 + id)) 1 $tag
for h in 0 1 2; do
	[ $h = $id ] && continue
	check "read-host-$h" $T wait $NS $((1000 + 100 * h)) 4 400
done
check wait-all-ready $L wait $NS 9000 3 400

# ---- 2. three-way race on one key ----
out=$($T publish $NS 5000 1 $tag 2>&1)
echo "# RACE $role $out"
case "$out" in
"published 1 exists 0 failed 0" | "published 0 exists 1 failed 0") tap_ok race-publish ;;
*) tap_fail race-publish "$out"; rc=1 ;;
esac
check publish-raced $L publish $NS $((9010 + id)) 1 $tag
check wait-all-raced $L wait $NS 9010 3 300
out=$($T read $NS 5000 2>&1)
echo "# TAG $role $out"
case "$out" in "tag 1" | "tag 2" | "tag 3") tap_ok race-read ;; *) tap_fail race-read "$out"; rc=1 ;; esac

# ---- 3. partitions spread over three; owner vs non-owner lookup cost ----
if wait_settled 60 0 1 2; then tap_ok partitions-three; else tap_fail partitions-three; rc=1; fi
hosts three
echo "# OWNED-3 $role $(hfield 0 5) $(hfield 1 5) $(hfield 2 5)"
case $role in
B) check publish-cost-keys $L publish $NS 1500 16 $tag ;;
A)
	check publish-cost-keys $L publish $NS 1400 16 $tag
	check wait-b-cost-keys $L wait $NS 1500 16 300
	out=$($T cost $NS 1400 1500 16 20 "$(hosts_table | wc -l)" 2>&1)
	echo "$out" | sed 's/^/# /'
	own=$((0x$(hfield 0 5)))
	pm=$(echo "$out" | sed -n 's/.*owner keys in partitions \(0x[0-9a-f]*\|0\), non-owner keys in partitions \(0x[0-9a-f]*\|0\).*/\1 \2/p')
	po=${pm% *} pn=${pm#* }
	if [ -n "$pm" ] && [ $((po & ~own)) = 0 ] && [ $((pn & own)) = 0 ]; then
		tap_ok lookup-cost
	else
		tap_fail lookup-cost "owned $(hfield 0 5), key partitions '$pm'"
		rc=1
	fi
	;;
esac

# ---- 4. C dies (SIGKILL of its QEMU, from run.sh) in the middle of a stream ----
if [ "$role" = C ]; then
	check wait-watchers $L wait $NS 9021 2 400
	echo "# C streams; uptime $(up)"
	# run.sh kills this guest after a few "# STREAM n" lines
	$L stream $NS 3000 30 $tag 1000 4
	tap_fail stream "the stream ended: run.sh did not kill C"
	exit 1
fi
echo "# OWNED-BEFORE-DEATH $role $(hfield 2 5)"
check wait-cost-keys $L wait $NS 1400 16 300
check publish-watching $L publish $NS $((9021 + id)) 1 $tag
watch_start death $WATCH_KEYS
i=0
until [ "$(hfield 2 6)" = dead ]; do
	i=$((i + 1))
	[ $i -gt 1200 ] && break
	sleep 0.5
done
echo "# C-DEAD $role at uptime $(up): $(hosts_table | awk '$1 == 2')"
if wait_settled 60 0 1; then tap_ok partitions-survivors; else tap_fail partitions-survivors; rc=1; fi
hosts after-death
echo "# OWNED-AFTER-DEATH $role $(hfield 0 5) $(hfield 1 5) $(hfield 2 5)"
if [ "$(hfield 2 2)" = active ] && [ "$(hfield 2 6)" = dead ]; then
	tap_ok c-dead-in-hosts
else
	tap_fail c-dead-in-hosts "$(hosts_table | awk '$1 == 2')"
	rc=1
fi
# keep watching through the window after the takeover
sleep 20
watch_stop
check dead-host-keys $T wait $NS 1200 4 30
out=$($T count $NS 3000 30)
echo "# STREAM-KEYS $role $out"
h=$(echo "$out" | awk '{print $2}') r=$(echo "$out" | awk '{print $4}')
if [ "$h" = "$r" ] && [ "${h:-0}" -ge 1 ]; then
	check stream-keys-exact $L wait $NS 3000 $h 30
else
	tap_fail stream-keys-exact "stream keys not a leading run: $out"
	rc=1
fi
# pool accounting: pin every key, take every block (run.sh sums both hosts)
mine=$((9040 + id)) other=$((9041 - id))
out=$($L account $NS $role $mine $other 10 1000:4 1100:4 1200:4 1400:16 1500:16 \
	5000:1 9000:3 9010:3 9021:2 3000:30 2>&1)
arc=$?
echo "$out" | sed 's/^ACCT/# ACCT/'
if [ $arc = 0 ]; then tap_ok account; else tap_fail account "exit $arc"; rc=1; fi
echo "# ACCOUNTED $role uptime $(up)"

# ---- 5. C rejoins (run.sh boots it again on the same pool file) ----
watch_start rejoin $WATCH_KEYS
check wait-c-rejoined $L wait $NS 9060 1 600
echo "# C-REJOINED seen by $role at uptime $(up)"
check c-new-keys $L wait $NS 1300 4 60
if wait_settled 60 0 1 2; then tap_ok partitions-three-again; else tap_fail partitions-three-again; rc=1; fi
hosts after-rejoin
echo "# OWNED-AFTER-REJOIN $role $(hfield 0 5) $(hfield 1 5) $(hfield 2 5)"
if [ "$(hfield 2 6)" = alive ] && [ "$(hfield 2 3)" -ge 2 ] && [ $(((0x$(hfield 2 5) >> 2) & 1)) = 1 ]; then
	tap_ok c-rejoined-in-hosts
else
	tap_fail c-rejoined-in-hosts "$(hosts_table | awk '$1 == 2')"
	rc=1
fi
sleep 20
watch_stop
check wait-c-done $L wait $NS 9061 1 300
check publish-done $L publish $NS $((9070 + id)) 1 $tag
/mh/belugactl status --json >/run/status.json 2>&1 && grep -q '"hosts"' /run/status.json &&
	tap_ok belugactl-status-json-hosts || { tap_fail belugactl-status-json-hosts "$(head -c 300 /run/status.json)"; rc=1; }
sed 's/^/# /' /run/status.json | tail -n 40
/mh/belugactl status --prometheus 2>&1 | grep 'beluga_pool_host' | sed 's/^/# /'
dmesg | grep -i 'beluga' | sed 's/^/# dmesg: /'
dmesg_check dmesg || rc=1
exit $rc
