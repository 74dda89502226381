#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# One host of the two-guest multi-host test (busybox ash, 6.12 guest); run.sh
# boots two guests on the same CXL backing files with this script. /mh holds
# mhtool and "role" (A or B). Both attach dax0.0 as a shared pool (whoever
# comes first formats it). The guests coordinate through keys in the pool:
#   A: publish keys 1000-1003 (tag 1), wait for B's marker 9001, race on key
#      5000, wait for B's marker 9002, read 5000, detach; then version
#      mismatch: set the superblock's major version to 2, attach must fail
#      with EPROTONOSUPPORT; set it back, attach again: keys still there;
#      B's keys too once B is dead, and A adopts B's partitions.
#   B: wait for 1000-1003 and check every byte, publish 9001, race on 5000
#      (tag 2), publish 9002, read 5000, publish 2000-2003 and 9004, and
#      stop without detaching (host death).
# Lines "# RACE ROLE published P exists E" and "# TAG ROLE T" are for run.sh.
. /etc/beluga/env
. /etc/beluga/lib.sh
T=/mh/mhtool
NS=77
DAX=dax0.0
role=$(cat /mh/role)
BELUGA_KPFX="$BELUGA_KPFX:mh-$role"
if [ "$role" = A ]; then id=0 tag=1; else id=1 tag=2; fi
rc=0
check() { tap_check "$@" || rc=1; }

for e in /sys/bus/cxl/devices/endpoint*; do
	echo "# $(basename $e) -> $(readlink -f $e/uport | sed 's|.*/\(0000:[^/]*\)/\(mem[0-9]*\)$|\1 \2|')"
done
for r in /sys/bus/cxl/devices/region*; do
	[ -e $r/target0 ] && echo "# $(basename $r) target0 $(cat $r/target0)"
done
. /mh/pool-lib.sh
find_pool 60
if [ "$role" = A ]; then
	check attach $T attach $DAX $id
else
	# B attaches with belugactl (the operator's way)
	check belugactl-attach /mh/belugactl attach --shared --host-id $id /dev/$DAX
fi
if [ "$role" = A ]; then
	check publish $T publish $NS 1000 4 $tag
	check wait-b-ready $T wait $NS 9001 1 300
else
	check wait-a-keys $T wait $NS 1000 4 300
	check publish-ready $T publish $NS 9001 1 $tag
fi
out=$($T publish $NS 5000 1 $tag 2>&1)
echo "# RACE $role $out"
case "$out" in
"published 1 exists 0 failed 0" | "published 0 exists 1 failed 0") tap_ok race-publish ;;
*) tap_fail race-publish "$out"; rc=1 ;;
esac
if [ "$role" = A ]; then
	check wait-b-done $T wait $NS 9002 1 300
else
	check publish-done $T publish $NS 9002 1 $tag
	# B reads the race key once A has answered too: A's marker 9003
	check wait-a-done $T wait $NS 9003 1 300
fi
out=$($T read $NS 5000 2>&1)
echo "# TAG $role $out"
/mh/belugactl status 2>&1 | sed 's/^/# /'
/mh/belugactl status | grep -q 'shared pool hosts' && tap_ok belugactl-status-hosts ||
	{ tap_fail belugactl-status-hosts; rc=1; }
case "$out" in "tag 1" | "tag 2") tap_ok race-read ;; *) tap_fail race-read "$out"; rc=1 ;; esac
echo "# hosts:"
$T hosts | sed 's/^/#   /'
if [ "$role" = A ]; then
	check publish-done $T publish $NS 9003 1 $tag
	# let B read before A leaves (not needed for correctness: keys stay)
	check wait-b-read $T wait $NS 9004 1 300
	check detach $T detach
	check set-version-2 $T set-version $DAX 2
	check refuse-version $T attach-expect $DAX $id 93
	check set-version-1 $T set-version $DAX 1
	check reattach $T attach $DAX $id
	# every key hits at once after the rejoin (wait 0: one lookup, no retry)
	check keys-survive $T wait $NS 1000 4 0
	# B stopped without detaching (its guest powered off): B's keys hit at
	# once, and still after a lease, when A holds B dead and adopts its
	# partitions.
	check dead-host-keys $T wait $NS 2000 4 0
	i=0
	until $T hosts | grep -q '^0 active .* ff alive .* self'; do
		i=$((i + 1))
		[ $i -gt 60 ] && break
		sleep 1
	done
	if $T hosts | grep -q '^1 active .* dead ' &&
	   $T hosts | grep -q '^0 active .* ff alive .* self'; then
		tap_ok takeover
	else
		tap_fail takeover "$($T hosts | head -n 2)"
		rc=1
	fi
	check dead-host-keys-after $T wait $NS 2000 4 0
	echo "# hosts:"
	$T hosts | sed 's/^/#   /'
	check detach-again $T detach
else
	check publish-dying $T publish $NS 2000 4 $tag
	check publish-read $T publish $NS 9004 1 $tag
	# no detach: this host "dies" when the guest powers off
fi
dmesg | grep -i 'beluga' | sed 's/^/# dmesg: /'
dmesg_check dmesg || rc=1
exit $rc
