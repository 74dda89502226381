#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The operator's scripts where a newcomer first meets them:
# - scripts/beluga-setup on a server with no dax device yet (fake sysfs
#   trees, $BELUGA_SYSFS_ROOT): it says what it found and what to do, and
#   exits 0;
# - scripts/install-deps.sh on anything but Debian 12 (fake os-release
#   files, $BELUGA_OS_RELEASE): it refuses before changing anything (apt,
#   dpkg stubbed to log), naming Documentation/install.md;
# - bench/draw-plots.sh, scripts/bench.sh's plot step: a plots.sh failure or a
#   missing gnuplot is reported with the cause and the fix, as optional
#   (exit 3, which bench.sh reports without failing the run).
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

# ---- install-deps.sh refuses anything but Debian 12 --------------------------
mkdir -p "$tmp/stub"
for cmd in apt-get apt-cache dpkg-query dpkg; do
	printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$cmd" "$tmp/apt-calls" >"$tmp/stub/$cmd"
	chmod +x "$tmp/stub/$cmd"
done
os_release() { # os_release FILE ID VERSION_ID PRETTY_NAME
	printf 'PRETTY_NAME="%s"\nID=%s\nVERSION_ID="%s"\n' "$4" "$2" "$3" >"$1"
}
run_deps() { # run_deps OS_RELEASE [ARG]: output in $tmp/deps.out, status in $rc
	env PATH="$tmp/stub:$PATH" BELUGA_OS_RELEASE="$1" BELUGA_CACHE="$tmp/cache" \
		"$top/scripts/install-deps.sh" ${2:+"$2"} >"$tmp/deps.out" 2>&1
	rc=$?
}
refused() { # refused NAME OS_RELEASE PATTERN...
	local name=$1 file=$2
	shift 2
	rm -f "$tmp/apt-calls"
	run_deps "$file"
	expect_out "install-deps refuses $name, naming Debian 12 and Documentation/install.md" 1 \
		"$tmp/deps.out" "$rc" "Debian 12 (bookworm)" "Documentation/install.md" "$@"
	if [ ! -e "$tmp/apt-calls" ] && [ ! -e "$tmp/cache" ]; then
		ok "install-deps refuses $name before running apt or writing anything"
	else
		not_ok "install-deps refuses $name before running apt or writing anything" \
			"(ran: $(tr '\n' ';' <"$tmp/apt-calls" 2>/dev/null))"
	fi
}
os_release "$tmp/ubuntu-24.04" ubuntu 24.04 "Ubuntu 24.04.1 LTS"
refused "Ubuntu 24.04" "$tmp/ubuntu-24.04" "this is Ubuntu 24.04.1 LTS" "Nothing was changed"
os_release "$tmp/ubuntu-22.04" ubuntu 22.04 "Ubuntu 22.04.5 LTS"
refused "Ubuntu 22.04" "$tmp/ubuntu-22.04" "ID=ubuntu VERSION_ID=22.04"
os_release "$tmp/debian-13" debian 13 "Debian GNU/Linux 13 (trixie)"
refused "Debian 13" "$tmp/debian-13" "ID=debian VERSION_ID=13"
os_release "$tmp/rhel-9" rhel 9.4 "Red Hat Enterprise Linux 9.4 (Plow)"
refused "RHEL 9" "$tmp/rhel-9" "Red Hat Enterprise Linux 9.4"
refused "a system without os-release" "$tmp/missing" "cannot read $tmp/missing"

os_release "$tmp/debian-12" debian 12 "Debian GNU/Linux 12 (bookworm)"
rm -f "$tmp/apt-calls"
run_deps "$tmp/debian-12" --check-system
expect_out "install-deps --check-system accepts Debian 12" 0 "$tmp/deps.out" "$rc" \
	"Debian GNU/Linux 12 (bookworm): supported"
run_deps "$tmp/debian-12" --frobnicate
expect_out "install-deps: an unknown argument is a usage error" 2 "$tmp/deps.out" "$rc" \
	"unknown argument '--frobnicate'"
if [ -s "$top/Documentation/install.md" ]; then
	ok "Documentation/install.md, which the refusal names, exists"
else
	not_ok "Documentation/install.md, which the refusal names, exists"
fi

# ---- bench/draw-plots.sh: a plot failure is reported, not silent --------------
draw=$top/bench/draw-plots.sh
mkdir -p "$tmp/res"
"$draw" "$tmp/res" /dev/null/plots >"$tmp/draw.out" 2>&1
expect_out "draw-plots: plots.sh failing (an unwritable plot directory) is reported with its messages and the fix" \
	3 "$tmp/draw.out" $? "the plots FAILED: bench/plots.sh exited" "/dev/null/plots" \
	"the results (results.json, RESULTS.md, the README's table) are complete" \
	"do not commit them" "redraw them with \`bench/plots.sh $tmp/res /dev/null/plots\`"
# no gnuplot on PATH: only what the script needs besides it
mkdir -p "$tmp/nognuplot"
for cmd in bash dirname mktemp rm cat tail sed mkdir; do ln -sf "$(command -v $cmd)" "$tmp/nognuplot/$cmd"; done
PATH=$tmp/nognuplot "$draw" "$tmp/res" "$tmp/plots" >"$tmp/draw.out" 2>&1
expect_out "draw-plots: without gnuplot, says so and names the package and the redraw command" \
	3 "$tmp/draw.out" $? "no plots: gnuplot is not installed" "gnuplot-nox" "bench/plots.sh $tmp/res $tmp/plots"
if command -v gnuplot >/dev/null; then
	"$draw" "$tmp/res" "$tmp/plots" >"$tmp/draw.out" 2>&1
	expect_out "draw-plots: no data is not a failure: plots.sh's notes, then where the plots are" \
		0 "$tmp/draw.out" $? "plots: no replay data: hit-ratio.png skipped" "bench: plots in $tmp/plots"
else
	skip "draw-plots: no data is not a failure" "gnuplot is not installed (scripts/install-deps.sh installs it)"
fi
tap_done
