# shellcheck shell=sh
# SPDX-License-Identifier: GPL-2.0
# Sourced by guest.sh and guest3.sh (busybox ash, 6.12 guest; run.sh copies it
# to /mh): agree with the other guests on which dax device is the shared pool.
# Needs T (mhtool), DAX (the first host's pool device), role, tap_* and check.

# bdf_of_dax DAX: the PCI address of the CXL memory device behind dax device DAX
bdf_of_dax() {
	_r=$(readlink -f /sys/bus/dax/devices/$1 | grep -o 'region[0-9]*' | head -n1)
	_d=$(cat /sys/bus/cxl/devices/$_r/target0 2>/dev/null)
	_e=endpoint${_d#decoder}
	readlink -f /sys/bus/cxl/devices/${_e%.*}/uport | sed 's|.*/\(0000:[^/]*\)/mem[0-9]*$|\1|'
}

# find_pool SECS: host A names its pool device's PCI address for run.sh, which
# shares only that device's backing file with the others. The others find the
# device with that address here (the guest setup numbers CXL regions in endpoint
# probe order, which differs between boots), set DAX, and wait up to SECS for
# A's superblock. A guest that onlined the device as System RAM (kmem) says
# CONFLICT and exits: run.sh boots it again.
find_pool() {
	if [ "$role" = A ]; then
		echo "# POOL-BDF $(bdf_of_dax $DAX)"
		return
	fi
	_want=$(cat /mh/pool-bdf)
	DAX=
	for _d in $BELUGA_TEST_DAX; do
		[ "$(bdf_of_dax $_d)" = "$_want" ] && DAX=$_d
	done
	if [ -z "$DAX" ]; then
		echo "# CONFLICT: $_want is not a dax device here"
		tap_skip find-pool "A's pool device is this guest's kmem node; run.sh retries"
		exit 0
	fi
	_i=0
	until [ "$($T find-pool $DAX)" = "$DAX" ]; do
		_i=$((_i + 1))
		[ $_i -gt "$1" ] && break
		sleep 1
	done
	check find-pool $T find-pool $DAX
	echo "# A's pool ($_want) is $DAX here"
}
