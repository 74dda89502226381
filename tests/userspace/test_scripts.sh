#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The operator's scripts where a newcomer first meets them:
# - scripts/beluga-setup on a server with no dax device yet (fake sysfs
#   trees, $BELUGA_SYSFS_ROOT): it says what it found and what to do, and
#   exits 0.
#
# Usage: tests/userspace/test_scripts.sh   (prints TAP)
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d /tmp/beluga-scripts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=../lib/tap.sh
. "$here/../lib/tap.sh"

# expect_out NAME RC OUTFILE GOT_RC PATTERN...: the run exited RC and its output has every PATTERN
expect_out() {
	local name=$1 want_rc=$2 out=$3 rc=$4 p missing=()
	shift 4
	for p in "$@"; do
		grep -qF -- "$p" "$out" || missing+=("'$p'")
	done
	if [ "$rc" -eq "$want_rc" ] && [ ${#missing[@]} -eq 0 ]; then
		ok "$name"
	else
		not_ok "$name (exit $rc, expected $want_rc${missing[*]:+; output lacks ${missing[*]}})"
		sed 's/^/#   /' "$out" | head -12
	fi
}

# ---- beluga-setup with no dax device -----------------------------------------
setup=$top/scripts/beluga-setup
run_setup() { # run_setup SYSROOT: output in $tmp/setup.out, status in $rc
	BELUGA_SYSFS_ROOT=$1 "$setup" >"$tmp/setup.out" 2>&1
	rc=$?
}

# Nothing at all: no dax bus, no CXL.
mkdir -p "$tmp/bare"
run_setup "$tmp/bare"
expect_out "beluga-setup, bare system: says there is no dax bus and no CXL device, and what to load" \
	0 "$tmp/setup.out" "$rc" "No dax devices in $tmp/bare/bus/dax/devices" "no dax bus" \
	"modprobe device_dax" "CXL memory devices: none" "modprobe cxl_acpi cxl_pci cxl_mem" \
	"belugactl attach --node N --size SIZE" "make demo"

# CXL memory devices but no region (the firmware set none up).
cxl=$tmp/noregion/bus/cxl/devices
mkdir -p "$tmp/noregion/bus/dax/devices" "$cxl/mem0" "$cxl/mem1" "$cxl/decoder0.0" "$cxl/root0"
run_setup "$tmp/noregion"
expect_out "beluga-setup, CXL devices without a region: lists them and says how to create one" \
	0 "$tmp/setup.out" "$rc" "the dax bus ($tmp/noregion/bus/dax), with no device on it" \
	"CXL memory devices: mem0 mem1" "CXL regions: none" "cxl create-region -m -t ram -d ROOT_DECODER mem0"
if grep -q "modprobe device_dax" "$tmp/setup.out"; then
	not_ok "beluga-setup, CXL devices without a region: no device_dax advice when the dax bus is there"
else
	ok "beluga-setup, CXL devices without a region: no device_dax advice when the dax bus is there"
fi

# A region without its dax device (dax_cxl not loaded), and CXL memory online
# as System RAM on a memory-only node.
cxl=$tmp/nodaxcxl/bus/cxl/devices
node=$tmp/nodaxcxl/devices/system/node
mkdir -p "$tmp/nodaxcxl/bus/dax/devices" "$cxl/mem0" "$cxl/region0" "$node/node0" "$node/node1"
echo 0-3 >"$node/node0/cpulist"
echo >"$node/node1/cpulist"
printf 'Node 1 MemTotal:       1048576 kB\nNode 1 MemFree:        1000000 kB\n' >"$node/node1/meminfo"
run_setup "$tmp/nodaxcxl"
expect_out "beluga-setup, a region without a dax device: says to load dax_cxl, lists the memory-only node" \
	0 "$tmp/setup.out" "$rc" "CXL regions: region0" "region0 exist but have no dax device" \
	"modprobe dax_cxl" "node1: 1024 MiB total"

tap_done
