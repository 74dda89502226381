#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# run-guest.sh [options] 6.1|6.12
# Boot a Debian guest kernel under QEMU TCG (never KVM: it hangs on this machine
# kind) with Beluga's test topology, run a guest script, stream the serial console
# to stdout and a log, and power off. Exit status: the guest script's, or 1 when
# the guest crashed, hung or timed out (no "BELUGA-GUEST-EXIT" line).
#
# Topologies:
#   6.12  q35 with cxl=on, three 256 MiB CXL type-3 volatile devices behind one host
#         bridge (three root ports) and one 4 GiB fixed memory window; the guest makes
#         dax0.0 + dax1.0 (device_dax) and a kmem NUMA node from them.
#   6.1   two memmap= pmem ranges (devdax namespaces dax0.0 + dax1.0), a CPU-less
#         NUMA node 1 (512 MiB, above 4 GiB), and one 256 MiB CXL type-3
#         persistent-memory device (CXL pmem region -> devdax dax2.0, node 2).
# Options:
#   -r SCRIPT    guest script (default tests/vm/guest-tests.sh)
#   -d SRC:DEST  directory to copy into the guest (repeatable; see mkinitramfs.sh)
#   -k KO|none   beluga.ko to use (default: build it for this kernel)
#   -o DIR       output directory (default build/vm/run-ALIAS): console.log (serial
#                console), results.tap (userspace output only: clean TAP), time
#   -m DIR       6.12: directory of the CXL backing files mem0..mem2 (default OUTDIR/cxl,
#                removed after the run). Two guests given the same DIR share the CXL
#                memory like two hosts on one pool; otherwise every run has its own.
#   -t SECS      hard timeout for the whole boot (default 1500)
#   -s N         guest CPUs (default 2)
#   -P REPO      share the host's root filesystem read-only into the guest over 9p
#                (mount tag hostroot) and pass REPO, the absolute path of this
#                repository on the host, as beluga_hostroot=REPO: the guest suite then
#                runs the Python tests with the host's /usr/bin/python3, at pool blocks
#                of $BELUGA_TEST_BLOCK_SIZE when set (as beluga_test_block_size=), and with
#                BELUGA_GUEST_ENGINES=1 the engine lane's model test (beluga_engines=1)
#   -q           do not stream the console to stdout (the log is still written)
# Environment: BELUGA_QEMU_EXTRA, more QEMU arguments, split at blanks (the
# multi-host watchdog scenario: an i6300esb, -action watchdog=reset, a QMP socket).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() { die "usage: $0 [-r SCRIPT] [-d SRC:DEST]... [-k KO|none] [-o DIR] [-m DIR] [-t SECS] [-s N] [-P REPO] [-q] 6.1|6.12"; }
run= outdir= memdir= tmo=1500 smp=2 quiet=0 hostrepo= mkargs=()
while getopts r:d:k:o:m:t:s:P:q opt; do
	case $opt in
	r) run=$OPTARG ;;
	d) mkargs+=(-d "$OPTARG") ;;
	k) mkargs+=(-k "$OPTARG") ;;
	o) outdir=$OPTARG ;;
	m) memdir=$OPTARG ;;
	t) tmo=$OPTARG ;;
	s) smp=$OPTARG ;;
	P) hostrepo=$OPTARG ;;
	q) quiet=1 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
alias=$1
kver=$(kver_of "$alias")
need_cmd qemu-system-x86_64 timeout
[ -n "$run" ] && mkargs+=(-r "$run")
if [ -n "$hostrepo" ]; then
	hostrepo=$(cd "$hostrepo" 2>/dev/null && pwd -P) || die "-P $hostrepo: no such directory"
	# it travels on the kernel command line, which splits at blanks
	case $hostrepo in
	*[[:space:]]*) die "-P $hostrepo: the repository path must not contain blanks" ;;
	esac
fi

outdir=${outdir:-$BELUGA_BUILD/vm/run-$alias}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
console=$outdir/console.log
tap=$outdir/results.tap
rm -f "$console" "$tap" "$outdir/time"

t0=$(date +%s.%N)
groot=$("$(dirname "$0")/guest-kernel.sh" "$alias")
initrd=$("$(dirname "$0")/mkinitramfs.sh" -o "$outdir/initramfs.cpio" "${mkargs[@]}" "$alias")
t1=$(date +%s.%N)

# The guest's own limit is a bit shorter, so that it can still report and power off.
gtmo=$((tmo > 120 ? tmo - 60 : tmo))
# no_timer_check: under TCG on a loaded host the IO-APIC timer check can fail and
# panic ("IO-APIC + timer doesn't work!").
cmdline="console=ttyS0 loglevel=5 panic=-1 no_timer_check beluga_kernel=$alias beluga_timeout=$gtmo"
qemu=(qemu-system-x86_64 -accel tcg -nodefaults -no-user-config -display none -no-reboot
	-smp "$smp" -kernel "$groot/boot/vmlinuz-$kver" -initrd "$initrd"
	-serial stdio -serial "file:$tap")

case $alias in
6.12)
	# CXL memory backing files: shared mappings of sparse files. Private to this run
	# unless -m names a directory on purpose (another guest writing the same files
	# would corrupt this one's pool).
	if [ -n "$memdir" ]; then
		mem=$memdir
	else
		mem=$outdir/cxl
		rm -rf "$mem"
		cleanup_mem=1
	fi
	mkdir -p "$mem"
	qemu+=(-M q35,cxl=on -cpu qemu64,-hypervisor -m 2G,maxmem=4G,slots=8
		-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1)
	for i in 0 1 2; do
		# the guest builds its regions from scratch at each boot; the contents do not matter
		qemu+=(-object "memory-backend-file,id=cxl-mem$i,share=on,mem-path=$mem/mem$i,size=256M"
			-device "cxl-rp,port=$i,bus=cxl.1,id=cxl-rp$i,chassis=0,slot=$((2 + i))"
			-device "cxl-type3,bus=cxl-rp$i,volatile-memdev=cxl-mem$i,id=cxl-vmem$i")
	done
	qemu+=(-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G)
	;;
6.1)
	# node 0: 2304 MiB (0-2 GiB + 4-4.25 GiB), node 1: 512 MiB above 4 GiB, no CPUs.
	# Two 256 MiB legacy pmem ranges inside node 0's low memory, with a gap so that
	# e820 does not merge them into one region.
	qemu+=(-M q35,cxl=on -cpu qemu64,-hypervisor -m 2816M,maxmem=4G,slots=8
		-object memory-backend-ram,id=m0,size=2304M -object memory-backend-ram,id=m1,size=512M
		-numa node,nodeid=0,cpus=0-$((smp - 1)),memdev=m0 -numa node,nodeid=1,memdev=m1)
	cmdline+=" memmap=256M!1G memmap=256M!1536M"
	# plus one CXL type-3 persistent-memory device (Linux 6.1 has no CXL ram
	# regions): the guest makes a CXL pmem region and a devdax namespace on it
	if [ -n "$memdir" ]; then
		mem=$memdir
	else
		mem=$outdir/cxl
		rm -rf "$mem"
		cleanup_mem=1
	fi
	mkdir -p "$mem"
	qemu+=(-object "memory-backend-file,id=cxl-pmem0,share=on,mem-path=$mem/pmem0,size=256M"
		-object "memory-backend-file,id=cxl-lsa0,share=on,mem-path=$mem/lsa0,size=256K"
		-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1
		-device cxl-rp,port=0,bus=cxl.1,id=cxl-rp0,chassis=0,slot=2
		-device cxl-type3,bus=cxl-rp0,persistent-memdev=cxl-pmem0,lsa=cxl-lsa0,id=cxl-pmem0
		-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G)
	;;
esac
if [ -n "$hostrepo" ]; then
	# read-only: the guest runs the host's Python and reads the repository, and
	# writes only to its own tmpfs
	# (-fsdev + -device rather than -virtfs: -virtfs plugs into the last bus,
	# the CXL host bridge, which takes only bridges). multidevs=remap: the
	# export spans the host's file systems (a tmpfs /tmp, a separate /home),
	# and inode numbers from two of them must not collide in the guest's cache.
	qemu+=(-fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
		-device "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pcie.0")
	cmdline+=" beluga_hostroot=$hostrepo"
	if [[ -n ${BELUGA_TEST_BLOCK_SIZE:-} ]]; then
		[[ $BELUGA_TEST_BLOCK_SIZE =~ ^[0-9]+[KMG]?$ ]] ||
			die "BELUGA_TEST_BLOCK_SIZE=$BELUGA_TEST_BLOCK_SIZE: give bytes, or a K/M/G size (e.g. 4K)"
		cmdline+=" beluga_test_block_size=$BELUGA_TEST_BLOCK_SIZE"
	fi
	# the engine lane's model test too, with the host's build/venv-model (guest-python.sh)
	if [[ ${BELUGA_GUEST_ENGINES:-0} = 1 ]]; then
		cmdline+=" beluga_engines=1"
	fi
fi
# tests/multihost: no kmem node (scripts/vm/guest-setup.sh, beluga_nokmem)
[ "${BELUGA_GUEST_NO_KMEM:-0}" = 1 ] && cmdline+=" beluga_nokmem"
qemu+=(-append "$cmdline")
if [ -n "${BELUGA_QEMU_EXTRA:-}" ]; then
	read -r -a extra <<<"$BELUGA_QEMU_EXTRA"
	qemu+=("${extra[@]}")
fi

log "booting $kver (TCG, $smp cpus, timeout ${tmo}s); console: $console"
printf '%q ' "${qemu[@]}" >"$outdir/qemu.cmd"
echo >>"$outdir/qemu.cmd"
# QEMU runs in the background so that an interrupted run-guest.sh takes it down too
# (timeout --foreground: stay in our process group).
qpid= tpid=
cleanup() {
	[ -n "$qpid" ] && kill "$qpid" 2>/dev/null
	[ -n "$tpid" ] && kill "$tpid" 2>/dev/null
	if [ "${cleanup_mem:-0}" = 1 ]; then rm -rf "$mem"; fi
	return 0
}
trap cleanup EXIT
trap 'cleanup; exit 143' INT TERM
# boot_once: one QEMU run; sets qrc
boot_once() {
	: >"$console"
	timeout --foreground -k 10 "$tmo" "${qemu[@]}" </dev/null >"$console" 2>&1 &
	qpid=$!
	if [ $quiet -eq 0 ]; then
		tail --pid="$qpid" -n +1 -f "$console" &
		tpid=$!
	fi
	set +e
	wait "$qpid"
	qrc=$?
	set -e
	qpid=
	if [ -n "$tpid" ]; then
		wait "$tpid" 2>/dev/null || true
		tpid=
	fi
}
# A guest kernel that dies before it runs /init (an emulation hiccup on a loaded
# host, never the code under test) is booted once more; the note stays in the log.
notes=()
for attempt in 1 2; do
	boot_once
	[ $qrc -eq 124 ] || [ $qrc -eq 137 ] && break
	grep -q '^# beluga guest:' "$tap" 2>/dev/null && break
	[ $attempt -eq 2 ] && break
	cp "$console" "$outdir/console.boot$attempt.log"
	last=$(grep -aE 'Kernel panic|BUG:|error' "$console" | head -n1 | tr -d '\r')
	notes+=("# boot attempt $attempt died before /init (${last:-no panic message}); console: $outdir/console.boot$attempt.log; booted again")
	log "${notes[-1]#\# }"
done
t2=$(date +%s.%N)
prep=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
boot=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }')
printf 'prepare %s s, boot+run %s s\n' "$prep" "$boot" >"$outdir/time"

# The serial stream is a tty: strip the carriage returns.
[ -f "$tap" ] && sed -i 's/\r$//' "$tap"
[ -f "$tap" ] || : >"$tap"
if [ ${#notes[@]} -gt 0 ]; then printf '%s\n' "${notes[@]}" >>"$tap"; fi
grc=$(sed -n 's/^BELUGA-GUEST-EXIT \([0-9]*\)$/\1/p' "$tap" | tail -n1)
if [ -z "$grc" ]; then
	if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then
		why="timed out after ${tmo}s"
	else
		why="QEMU exited with status $qrc before the guest script finished (crash or panic?)"
	fi
	{
		echo "not ok - $alias:guest $why"
		echo "# last console lines ($console):"
		tail -n 40 "$console" | sed 's/\r$//; s/^/#   /'
	} >>"$tap"
	log "$alias guest: $why (prepare ${prep}s, boot+run ${boot}s)"
	exit 1
fi
log "$alias guest finished with status $grc (prepare ${prep}s, boot+run ${boot}s)"
exit "$grc"
