# shellcheck shell=sh
# SPDX-License-Identifier: GPL-2.0
# Guest topology setup, sourced by /init (busybox ash) with lib.sh loaded.
# Writes /etc/beluga/env (BELUGA_TEST_DAX, BELUGA_TEST_NODE, BELUGA_TEST_KO: the
# module file, for unload/reload tests) and reports each step
# as a TAP result, so a broken topology is a visible failure.
#
#   6.12: three CXL type-3 volatile devices. Two become CXL ram regions whose dax
#         devices are bound to device_dax (dax0.0 dax1.0); the third is onlined as
#         System RAM by kmem on a CPU-less NUMA node (ZONE_NORMAL, pinnable).
#   6.12-debug: the same on the debug kernel of kernel-debug/, whose drivers are
#         built in; beluga.ko gets beluga_modargs= from the kernel command line.
#   6.1:  two memmap= legacy pmem ranges turned into devdax namespaces (dax0.0
#         dax1.0), a CXL pmem region as devdax (dax2.0, NUMA node 2), and a CPU-less
#         NUMA node 1 from QEMU's -numa options.
# BELUGA_TEST_DAX_CXL lists the device-dax instances backed by emulated CXL memory
# (6.12: dax0.0 dax1.0; 6.1: dax2.0).

KVER=$(uname -r)
BELUGA_TEST_DAX=
BELUGA_TEST_DAX_CXL=
BELUGA_TEST_NODE=
# beluga_modargs=pools=2,host_id=1 -> "pools=2 host_id=1" for modprobe beluga
BELUGA_MODPROBE_ARGS=
for _a in $(cat /proc/cmdline); do
	case $_a in
	beluga_modargs=*) BELUGA_MODPROBE_ARGS=$(echo "${_a#beluga_modargs=}" | tr ',' ' ') ;;
	esac
done

# wait_for PATH [TENTHS]: poll until PATH exists
wait_for() {
	_i=0
	while [ ! -e "$1" ]; do
		_i=$((_i + 1))
		[ $_i -gt "${2:-100}" ] && return 1
		usleep 100000
	done
	return 0
}

dax_driver() {
	basename "$(readlink -f /sys/bus/dax/devices/$1/driver 2>/dev/null)" 2>/dev/null
}

# setup_node_zone NODE: make sure the memory of NODE is online in a kernel zone (the
# module pins it long-term; ZONE_MOVABLE pages cannot be pinned FOLL_LONGTERM).
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

# node_report NODE: comment lines describing the node's memory and zones
node_report() {
	echo "# node$1: cpus '$(cat /sys/devices/system/node/node$1/cpulist)'," \
		"$(awk '/MemTotal/ {print $4 " kB total"}' /sys/devices/system/node/node$1/meminfo)"
	awk -v n="$1" '/^Node/ { cur = ($2 == n ",") ? $4 : "" } cur != "" && /present/ && $2 > 0 { print "# node" n " zone " cur ": " $2 " pages present" }' /proc/zoneinfo
}

# cxl_ram_region ENDPOINT_DECODER -> prints the region name (sysfs flow; ndctl 76's
# cxl create-region refuses ram)
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

setup_612() {
	load cxl_acpi cxl_pci cxl_mem dax_cxl device_dax
	# the endpoints appear asynchronously after cxl_mem probes
	_i=0
	while [ "$(ls -d /sys/bus/cxl/devices/endpoint* 2>/dev/null | wc -l)" -lt 3 ] && [ $_i -lt 150 ]; do
		usleep 100000
		_i=$((_i + 1))
	done
	_eps=$(ls -d /sys/bus/cxl/devices/endpoint* 2>/dev/null | sort -V)
	set -- $_eps
	if [ $# -lt 3 ]; then
		tap_fail setup:cxl-endpoints "found $# CXL endpoints, the 6.12 topology has 3" \
			"$(ls /sys/bus/cxl/devices/ 2>&1 | tr '\n' ' ')"
		return
	fi
	tap_ok setup:cxl-endpoints
	# beluga_nokmem (tests/multihost): every region device-dax, no kmem node. A
	# peer of a shared pool numbers regions in probe order, which differs between
	# boots; onlining the pool's device as System RAM would write into the live
	# pool that the other guests share.
	_ndax=2
	grep -qw beluga_nokmem /proc/cmdline && _ndax=3
	_n=0
	for _e in $1 $2 $3; do
		_id=${_e##*/endpoint}
		_dec=decoder$_id.0
		# the first two regions: device-dax; the third: kmem (loaded only now, so it
		# cannot grab the first two: CXL dax devices default to the kmem driver;
		# a built-in kmem binds them at once, with their memory offline as
		# memhp_default_state=offline asks, and gives them back below).
		[ $_n -eq 2 ] && [ $_ndax -eq 2 ] && load kmem
		_r=$(cxl_ram_region $_dec)
		if [ -z "$_r" ]; then
			tap_fail setup:cxl-ram-region-$_n "creating a ram region from $_dec failed"
			_n=$((_n + 1))
			continue
		fi
		_dax=dax${_r#region}.0
		if ! wait_for /sys/bus/dax/devices/$_dax 100; then
			tap_fail setup:cxl-ram-region-$_n "$_r committed but $_dax did not appear"
			_n=$((_n + 1))
			continue
		fi
		if [ $_n -lt $_ndax ]; then
			if [ "$(dax_driver $_dax)" = kmem ]; then
				echo $_dax >/sys/bus/dax/drivers/kmem/unbind ||
					echo "# unbinding $_dax from kmem failed"
			fi
			[ -e /sys/bus/dax/devices/$_dax/driver ] ||
				echo $_dax >/sys/bus/dax/drivers/device_dax/new_id
			if wait_for /dev/$_dax 50 && [ "$(dax_driver $_dax)" = device_dax ]; then
				BELUGA_TEST_DAX_CXL="$BELUGA_TEST_DAX_CXL${BELUGA_TEST_DAX_CXL:+ }$_dax"
				echo "# $_r -> /dev/$_dax (device_dax), resource $(cat /sys/bus/dax/devices/$_dax/resource), size $(cat /sys/bus/dax/devices/$_dax/size)"
				tap_ok setup:devdax-$_dax
				BELUGA_TEST_DAX="$BELUGA_TEST_DAX${BELUGA_TEST_DAX:+ }$_dax"
			else
				tap_fail setup:devdax-$_dax "$_dax: driver '$(dax_driver $_dax)', /dev/$_dax $([ -e /dev/$_dax ] || echo missing)"
			fi
		else
			_node=$(cat /sys/bus/dax/devices/$_dax/target_node 2>/dev/null)
			_drv=$(dax_driver $_dax)
			if [ "$_drv" = kmem ] && [ -n "$_node" ] && [ -d /sys/devices/system/node/node$_node ] &&
				setup_node_zone "$_node"; then
				echo "# $_r -> $_dax (kmem) -> System RAM on node$_node"
				node_report "$_node"
				BELUGA_TEST_NODE=$_node
				tap_ok setup:kmem-node$_node
			else
				tap_fail setup:kmem-node "$_dax: driver '$_drv', target node '$_node'"
			fi
		fi
		_n=$((_n + 1))
	done
}

setup_61() {
	load nd_e820 nd_pmem dax_pmem device_dax
	for _r in region0 region1; do
		if ! wait_for /sys/bus/nd/devices/$_r 100; then
			tap_fail setup:pmem-$_r "no nd $_r: is memmap= on the kernel command line?"
			continue
		fi
		# a legacy (label-less) pmem region starts with one raw namespace; turn it into
		# devdax with its struct pages in RAM (--map=mem)
		_ns=namespace${_r#region}.0
		_out=$(ndctl create-namespace -f -e $_ns -m devdax --map=mem 2>&1)
		_rc=$?
		_dax=$(echo "$_out" | sed -n 's/.*"chardev":"\(dax[0-9.]*\)".*/\1/p' | head -n1)
		[ -n "$_dax" ] || _dax=$(echo "$_out" | grep -o 'dax[0-9]*\.[0-9]*' | head -n1)
		if [ $_rc -eq 0 ] && [ -n "$_dax" ] && wait_for /dev/$_dax 50; then
			echo "# $_r -> $_ns -> /dev/$_dax (device_dax), resource $(cat /sys/bus/dax/devices/$_dax/resource), size $(cat /sys/bus/dax/devices/$_dax/size)"
			tap_ok setup:devdax-$_dax
			BELUGA_TEST_DAX="$BELUGA_TEST_DAX${BELUGA_TEST_DAX:+ }$_dax"
		else
			tap_fail setup:devdax-$_r "ndctl create-namespace -e $_ns -m devdax failed (status $_rc)" "$_out"
		fi
	done
	# CXL on 6.1: one type-3 persistent-memory device -> CXL pmem region -> nd region
	# -> devdax namespace (6.1 cannot make CXL ram regions). Not in BELUGA_TEST_DAX,
	# which keeps the two RAM-speed memmap devices; listed in BELUGA_TEST_DAX_CXL.
	load cxl_acpi cxl_pci cxl_mem cxl_pmem
	_i=0
	while [ -z "$(ls -d /sys/bus/cxl/devices/endpoint* 2>/dev/null)" ] && [ $_i -lt 100 ]; do
		usleep 100000
		_i=$((_i + 1))
	done
	if [ -e /sys/bus/cxl/devices/mem0 ] && [ -n "$(ls -d /sys/bus/cxl/devices/endpoint* 2>/dev/null)" ]; then
		_before=$(ls /sys/bus/nd/devices/ | grep '^region' | sort)
		_out=$(cxl create-region -m -d decoder0.0 -w 1 -t pmem mem0 -s 256M 2>&1)
		_rc=$?
		_ndr=
		_i=0
		while [ -z "$_ndr" ] && [ $_i -lt 50 ]; do
			_ndr=$(ls /sys/bus/nd/devices/ | grep '^region' | sort | grep -vxF "$_before" | head -n1)
			[ -n "$_ndr" ] || usleep 100000
			_i=$((_i + 1))
		done
		if [ $_rc -eq 0 ] && [ -n "$_ndr" ] &&
			_out=$(ndctl create-namespace -r "$_ndr" -m devdax --map=mem 2>&1); then
			_dax=$(echo "$_out" | sed -n 's/.*"chardev":"\(dax[0-9.]*\)".*/\1/p' | head -n1)
			if [ -n "$_dax" ] && wait_for /dev/$_dax 50; then
				echo "# CXL pmem $_ndr -> /dev/$_dax (device_dax), node $(cat /sys/bus/dax/devices/$_dax/target_node), resource $(cat /sys/bus/dax/devices/$_dax/resource), size $(cat /sys/bus/dax/devices/$_dax/size)"
				tap_ok setup:cxl-pmem-devdax-$_dax
				BELUGA_TEST_DAX_CXL=$_dax
			else
				tap_fail setup:cxl-pmem-devdax "no dax device from the devdax namespace on $_ndr" "$_out"
			fi
		else
			tap_fail setup:cxl-pmem-devdax "cxl create-region -t pmem / ndctl create-namespace failed" "$_out"
		fi
	else
		tap_fail setup:cxl-pmem-devdax "no CXL memory device mem0 (QEMU cxl-type3 persistent-memdev?)"
	fi
	if [ -d /sys/devices/system/node/node1 ] && [ -z "$(cat /sys/devices/system/node/node1/cpulist)" ] &&
		setup_node_zone 1; then
		node_report 1
		BELUGA_TEST_NODE=1
		tap_ok setup:numa-node1
	else
		tap_fail setup:numa-node1 "no CPU-less NUMA node 1 (QEMU -numa options?)"
	fi
}

case $BELUGA_TEST_KERNEL in
6.12 | 6.12-debug) setup_612 ;;
6.1) setup_61 ;;
*) tap_fail setup:topology "unknown beluga_kernel=$BELUGA_TEST_KERNEL" ;;
esac

# The module: built against this kernel by mkinitramfs.sh (lib/modules/KVER/updates).
if [ -f /lib/modules/$KVER/updates/beluga.ko ]; then
	# shellcheck disable=SC2086 # one word per parameter
	if _out=$(modprobe beluga $BELUGA_MODPROBE_ARGS 2>&1) && wait_for /dev/beluga 50; then
		tap_ok setup:modprobe-beluga
	else
		tap_fail setup:modprobe-beluga "modprobe beluga $BELUGA_MODPROBE_ARGS: ${_out:-loaded, but /dev/beluga did not appear}"
		dmesg | tail -n 20 | sed 's/^/# /'
	fi
else
	tap_fail setup:modprobe-beluga "beluga.ko is not in the initramfs: it failed to build for $KVER (see the host log)"
fi

# A 4 MiB RAM disk: a block device that takes O_DIRECT (shared_test), and the
# debugfs file that injects a memory error at a pfn (poison_test, shared pools).
BELUGA_TEST_BLKDEV=
if [ -b /dev/ram0 ] || { modprobe brd rd_nr=1 rd_size=4096 && wait_for /dev/ram0 50; }; then
	BELUGA_TEST_BLKDEV=/dev/ram0
	tap_ok setup:ramdisk
elif [ -z "$(find "/lib/modules/$KVER" -name brd.ko)" ] &&
	! grep -q /brd.ko "/lib/modules/$KVER/modules.builtin" 2>/dev/null; then
	tap_skip setup:ramdisk "this kernel has no brd (CONFIG_BLK_DEV_RAM): shared_test's O_DIRECT test skips"
else
	tap_fail setup:ramdisk "no /dev/ram0 after modprobe brd rd_nr=1 rd_size=4096"
fi
load hwpoison_inject

mkdir -p /etc/beluga
cat >/etc/beluga/env <<EOT
export BELUGA_TEST_KERNEL=$BELUGA_TEST_KERNEL
export BELUGA_TEST_DAX='$BELUGA_TEST_DAX'
export BELUGA_TEST_NODE=$BELUGA_TEST_NODE
export BELUGA_TEST_DAX_CXL='$BELUGA_TEST_DAX_CXL'
export BELUGA_TEST_BLKDEV=$BELUGA_TEST_BLKDEV
export BELUGA_MODPROBE_ARGS='$BELUGA_MODPROBE_ARGS'
export BELUGA_TEST_KO=$([ -f /lib/modules/$KVER/updates/beluga.ko ] && echo /lib/modules/$KVER/updates/beluga.ko)
export BELUGA_TEST_SINGLE_KO=$([ -f /tests/single-host/beluga.ko ] && echo /tests/single-host/beluga.ko)
EOT
