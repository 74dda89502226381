# shellcheck shell=sh
# SPDX-License-Identifier: GPL-2.0
# Topology setup for the debug guest kernel (kernel-debug/), installed as
# /etc/beluga/setup.sh and sourced by /init (scripts/vm/guest-init.sh) with
# /etc/beluga/lib.sh loaded. Same result as scripts/vm/guest-setup.sh for
# 6.12: dax0.0 + dax1.0 on device_dax, a third CXL ram region onlined by kmem
# as a CPU-less NUMA node; writes /etc/beluga/env (both dax devices are CXL
# memory: BELUGA_TEST_DAX_CXL lists them too).
#
# Differences: everything but beluga.ko is built in, so nothing is modprobed,
# and the built-in kmem driver binds every new CXL dax device at once (with
# its memory offline: memhp_default_state=offline). The first two are taken
# back from kmem (their offline memory is hot-removed) and given to
# device_dax; the third is onlined into ZONE_NORMAL.
# beluga.ko is loaded with BELUGA_MODPROBE_ARGS from the kernel command line
# (beluga_modargs=pools=2 -> "pools=2").

BELUGA_TEST_DAX=
BELUGA_TEST_NODE=
BELUGA_MODPROBE_ARGS=
for _a in $(cat /proc/cmdline); do
	case $_a in
	beluga_modargs=*) BELUGA_MODPROBE_ARGS=$(echo "${_a#beluga_modargs=}" | tr ',' ' ') ;;
	esac
done

wait_for() {
	_i=0
	while [ ! -e "$1" ]; do
		_i=$((_i + 1))
		[ $_i -gt "${2:-100}" ] && return 1
		usleep 100000
	done
	return 0
}

setup_node_zone() {
	_node=$1 _fail=0
	for _b in /sys/devices/system/node/node$_node/memory*; do
		[ -e "$_b/state" ] || continue
		_st=$(cat "$_b/state")
		if [ "$_st" = online ] && grep -q Movable "$_b/valid_zones" 2>/dev/null &&
			! grep -q Normal "$_b/valid_zones"; then
			echo offline >"$_b/state" || _fail=1
			_st=offline
		fi
		if [ "$_st" = offline ]; then
			echo online_kernel >"$_b/state" || _fail=1
		fi
	done
	return $_fail
}

cxl_ram_region() {
	_ep=/sys/bus/cxl/devices/$1
	_mem=$(basename "$(readlink -f "$_ep/../uport" 2>/dev/null || readlink -f "${_ep%/*}/uport")")
	_size=$(cat /sys/bus/cxl/devices/$_mem/ram/size) || return 1
	_size=$((_size))
	echo ram >"$_ep/mode" || return 1
	echo $_size >"$_ep/dpa_size" || return 1
	_root=/sys/bus/cxl/devices/decoder0.0
	_r=$(cat $_root/create_ram_region) || return 1
	echo "$_r" >$_root/create_ram_region || return 1
	_rp=/sys/bus/cxl/devices/$_r
	echo 256 >"$_rp/interleave_granularity" &&
		echo 1 >"$_rp/interleave_ways" &&
		echo $_size >"$_rp/size" &&
		echo "$1" >"$_rp/target0" &&
		echo 1 >"$_rp/commit" &&
		echo "$_r" >/sys/bus/cxl/drivers/cxl_region/bind || return 1
	echo "$_r"
}

dax_driver() {
	basename "$(readlink -f /sys/bus/dax/devices/$1/driver 2>/dev/null)" 2>/dev/null
}

setup_debug() {
	_i=0
	while [ "$(ls -d /sys/bus/cxl/devices/endpoint* 2>/dev/null | wc -l)" -lt 3 ] && [ $_i -lt 150 ]; do
		usleep 100000
		_i=$((_i + 1))
	done
	# shellcheck disable=SC2046 # one word per endpoint
	set -- $(ls -d /sys/bus/cxl/devices/endpoint* 2>/dev/null | sort -V)
	if [ $# -lt 3 ]; then
		tap_fail setup:cxl-endpoints "found $# CXL endpoints, the topology has 3" \
			"$(ls /sys/bus/cxl/devices/ 2>&1 | tr '\n' ' ')"
		return
	fi
	tap_ok setup:cxl-endpoints
	_n=0
	for _e in $1 $2 $3; do
		_id=${_e##*/endpoint}
		_r=$(cxl_ram_region decoder$_id.0)
		if [ -z "$_r" ]; then
			tap_fail setup:cxl-ram-region-$_n "creating a ram region from decoder$_id.0 failed"
			_n=$((_n + 1))
			continue
		fi
		_dax=dax${_r#region}.0
		if ! wait_for /sys/bus/dax/devices/$_dax 100; then
			tap_fail setup:cxl-ram-region-$_n "$_r committed but $_dax did not appear"
			_n=$((_n + 1))
			continue
		fi
		if [ $_n -lt 2 ]; then
			# built-in kmem bound it (memory offline): hand it to device_dax
			if [ "$(dax_driver $_dax)" = kmem ]; then
				echo $_dax >/sys/bus/dax/drivers/kmem/unbind ||
					echo "# unbinding $_dax from kmem failed"
			fi
			[ -e /sys/bus/dax/devices/$_dax/driver ] ||
				echo $_dax >/sys/bus/dax/drivers/device_dax/new_id
			if wait_for /dev/$_dax 50 && [ "$(dax_driver $_dax)" = device_dax ]; then
				echo "# $_r -> /dev/$_dax (device_dax), resource $(cat /sys/bus/dax/devices/$_dax/resource), size $(cat /sys/bus/dax/devices/$_dax/size)"
				tap_ok setup:devdax-$_dax
				BELUGA_TEST_DAX="$BELUGA_TEST_DAX${BELUGA_TEST_DAX:+ }$_dax"
			else
				tap_fail setup:devdax-$_dax "$_dax: driver '$(dax_driver $_dax)', /dev/$_dax $([ -e /dev/$_dax ] || echo missing)"
			fi
		else
			_node=$(cat /sys/bus/dax/devices/$_dax/target_node 2>/dev/null)
			if [ "$(dax_driver $_dax)" = kmem ] && [ -n "$_node" ] &&
				[ -d /sys/devices/system/node/node$_node ] && setup_node_zone "$_node"; then
				echo "# $_r -> $_dax (kmem) -> System RAM on node$_node"
				BELUGA_TEST_NODE=$_node
				tap_ok setup:kmem-node$_node
			else
				tap_fail setup:kmem-node "$_dax: driver '$(dax_driver $_dax)', target node '$_node'"
			fi
		fi
		_n=$((_n + 1))
	done
}

setup_debug

KVER=$(uname -r)
if [ -f /lib/modules/$KVER/updates/beluga.ko ]; then
	# shellcheck disable=SC2086
	if _out=$(modprobe beluga $BELUGA_MODPROBE_ARGS 2>&1) && wait_for /dev/beluga 50; then
		tap_ok setup:modprobe-beluga
	else
		tap_fail setup:modprobe-beluga "modprobe beluga $BELUGA_MODPROBE_ARGS: ${_out:-loaded, but /dev/beluga did not appear}"
		dmesg | tail -n 20 | sed 's/^/# /'
	fi
else
	tap_fail setup:modprobe-beluga "beluga.ko is not in the initramfs"
fi

mkdir -p /etc/beluga
cat >/etc/beluga/env <<EOT
export BELUGA_TEST_KERNEL=$BELUGA_TEST_KERNEL
export BELUGA_TEST_DAX='$BELUGA_TEST_DAX'
export BELUGA_TEST_DAX_CXL='$BELUGA_TEST_DAX'
export BELUGA_TEST_NODE=$BELUGA_TEST_NODE
export BELUGA_MODPROBE_ARGS='$BELUGA_MODPROBE_ARGS'
export BELUGA_TEST_KO=/lib/modules/$KVER/updates/beluga.ko
EOT
