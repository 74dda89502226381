#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# belbench inside the 6.12 benchmark guest (busybox ash), run as /beluga/run by
# the initramfs's /init after scripts/vm/guest-setup.sh made the CXL regions
# (dax0.0, dax1.0: emulated CXL type-3 memory bound to device_dax) and loaded
# beluga.ko. scripts/bench.sh boots it with one more medium: a memmap= legacy
# pmem range at RAM speed, which this script turns into a devdax namespace.
#
# Configuration comes from /bench/config (written by scripts/bench.sh):
#   BENCH_MODE=full|smoke  BENCH_SECTIONS="meta data scale replay conc ring"
#   BENCH_CMDS: belbench argument lists, one per line, instead of the sections
#               (@CXL@ and @RAMDAX@ stand for the device-dax names)
#   BENCH_PY_TRACE, BENCH_PY_CLIB: the trace for bench/python/mini_replay.py and
#               the C side of bench/python/overhead.py (host paths)
# Section "python" runs bench/python with the host's /usr/bin/python3 from the
# host's root shared over 9p (/etc/beluga/python.sh, as the test guest does).
# Output: every file belbench writes is printed between
#   BELBENCH-FILE name / BELBENCH-END
# lines, which scripts/bench.sh cuts out of the serial log.
. /etc/beluga/lib.sh
. /etc/beluga/env
BENCH_MODE=full
BENCH_SECTIONS="meta data scale replay conc ring"
[ -f /bench/config ] && . /bench/config
B=/bench/belbench
OUT=/tmp/bench-out
mkdir -p $OUT
ENV=guest-$BELUGA_TEST_KERNEL
Q=
[ "$BENCH_MODE" = smoke ] && Q=--quick
bb() {
	echo "# belbench $*"
	$B --env "$ENV" --out $OUT $Q "$@"
	_rc=$?
	[ $_rc -eq 0 ] || echo "# belbench $1 exited with status $_rc"
	return $_rc
}

echo "# guest: $(uname -r), $(nproc) cpus, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
cxl=
for d in $BELUGA_TEST_DAX; do
	[ -z "$cxl" ] && cxl=$d
done
[ -n "$cxl" ] || echo "# no CXL device-dax instance: the CXL rows are skipped"

# The RAM-speed devdax: memmap= legacy pmem (nd_e820) -> a devdax namespace.
ramdax=
for m in nd_e820 nd_pmem dax_pmem device_dax; do modprobe $m 2>/dev/null; done
i=0
while [ $i -lt 50 ] && ! [ -e /sys/bus/nd/devices/region0 ] &&
	[ -z "$(find /sys/bus/nd/devices/ -name 'region*' 2>/dev/null)" ]; do
	usleep 100000
	i=$((i + 1))
done
for r in /sys/bus/nd/devices/region*; do
	[ -e "$r" ] || continue
	ns=namespace${r##*/region}.0
	out=$(ndctl create-namespace -f -e "$ns" -m devdax --map=mem 2>&1)
	d=$(echo "$out" | sed -n 's/.*"chardev":"\(dax[0-9.]*\)".*/\1/p' | head -n1)
	if [ -n "$d" ] && [ -e /dev/$d ]; then
		ramdax=$d
		echo "# RAM-speed devdax: ${r##*/} -> $ns -> /dev/$d, $(cat /sys/bus/dax/devices/$d/size) bytes"
		break
	fi
	echo "# ndctl create-namespace -e $ns -m devdax failed:"
	echo "$out" | sed 's/^/#   /'
done
[ -n "$ramdax" ] || echo "# no RAM-speed devdax (memmap= missing?): those rows are skipped"

if [ "$BENCH_MODE" = smoke ]; then
	LENS=1,64,256
	CXL_COUNTS=1,2
	RAM_COUNTS=1,4,16
	SIZES=1K,16K
	CAPS=10,100
	DATA_SAMPLES=2
else
	LENS=1,16,64,256,4096
	CXL_COUNTS=1,4,16
	RAM_COUNTS=1,2,4,8,16,32,64
	SIZES=1K,16K,256K
	CAPS=10,25,50,100
	DATA_SAMPLES=7
fi

# bench/python against the real module: the binding's LOOKUP overhead against
# libbeluga's (the figure; it has no meaning on the host's fake kernel) and the
# mini engine's TTFT with the pool against recomputing. The pool gets the
# RAM-speed devdax (emulated CXL moves ~15 MB/s under TCG) with 64 KiB blocks.
python_benches() {
	if [ ! -f /etc/beluga/python.sh ]; then
		echo "# python benches skipped: this initramfs has no /etc/beluga/python.sh (scripts/vm/guest-python.sh)"
		return 0
	fi
	. /etc/beluga/python.sh
	# py_run (python.sh) kills a command after PY_TIMEOUT seconds
	# shellcheck disable=SC2034
	PY_TIMEOUT=1800
	if [ -z "$py_repo" ]; then
		echo "# python benches skipped: the host's root is not shared (no beluga_hostroot=)"
		return 0
	fi
	_m=$(py_mount 2>&1) || { echo "# python benches skipped: $_m"; return 0; }
	# py_mount (in that subshell) chose the chroot's writable directory
	PY_TMP=$(cat /tmp/python.tmpdir 2>/dev/null) || PY_TMP=/tmp
	_ctl=$PY_ROOT$py_repo/userspace/build/static/belugactl
	_dev=${ramdax:-$cxl}
	if [ -z "$_dev" ] || [ ! -x "$_ctl" ]; then
		echo "# python benches skipped: no device-dax ($_dev) or no static belugactl ($_ctl)"
		return 0
	fi
	"$_ctl" attach /dev/$_dev --block-size 64K || { echo "# python benches: attach /dev/$_dev failed"; return 0; }
	_pyout=$PY_TMP/pybench
	if [ "$BENCH_MODE" = smoke ]; then
		_ov="--rounds 2 --samples 9" _rp="--requests 8 --reps 1"
	else
		_ov="--rounds 7" _rp="--reps 3"
	fi
	echo "# python: overhead.py on /dev/beluga (/dev/$_dev, 64 KiB blocks)"
	# shellcheck disable=SC2086
	py_run "$py_repo/bench/python/overhead.py" --device /dev/beluga --env "$ENV" --out $_pyout \
		--c-lib "$BENCH_PY_CLIB" $_ov ||
		echo "# bench/python/overhead.py exited with status $?"
	if [ -n "${BENCH_PY_TRACE:-}" ]; then
		echo "# python: mini_replay.py"
		# shellcheck disable=SC2086
		py_run "$py_repo/bench/python/mini_replay.py" --device /dev/beluga --env "$ENV" --out $_pyout \
			--trace "$BENCH_PY_TRACE" $_rp ||
			echo "# bench/python/mini_replay.py exited with status $?"
	else
		echo "# python: mini_replay.py skipped: no trace"
	fi
	"$_ctl" detach "$_dev" --evict || echo "# python benches: detach $_dev failed"
	cp "$PY_ROOT$_pyout"/*.jsonl $OUT/ 2>/dev/null
	return 0
}

# Ad-hoc runs (scripts/bench.sh --guest-cmd): one belbench argument list per
# line, in place of the sections.
if [ -n "${BENCH_CMDS:-}" ]; then
	BENCH_SECTIONS=
	echo "$BENCH_CMDS" | while read -r line; do
		[ -n "$line" ] || continue
		line=$(echo "$line" | sed "s|@CXL@|$cxl|g; s|@RAMDAX@|$ramdax|g")
		# shellcheck disable=SC2086
		bb $line
	done
fi

for s in $BENCH_SECTIONS; do
	case $s in
	meta)
		if [ -n "$cxl" ]; then
			bb meta --pool dax:/dev/$cxl --lens $LENS
		else
			bb meta --pool none --lens $LENS
		fi
		;;
	data)
		# emulated CXL: slow under TCG (~18 MB/s), so few blocks and samples
		[ -n "$cxl" ] && bb data --medium cxl --pool dax:/dev/$cxl --raw /dev/$cxl \
			--counts $CXL_COUNTS --samples 3
		[ -n "$ramdax" ] && bb data --medium ramdax --pool dax:/dev/$ramdax \
			--raw /dev/$ramdax --limit anon --counts $RAM_COUNTS --samples $DATA_SAMPLES
		bb data --medium node0 --pool node:0 --raw anon --counts $RAM_COUNTS \
			--samples $DATA_SAMPLES
		;;
	scale)
		if [ -n "$ramdax" ]; then
			bb scale --pool dax:/dev/$ramdax --sizes $SIZES --threads 1,2
		else
			bb scale --pool node:0 --sizes $SIZES --threads 1,2
		fi
		;;
	conc)
		# 1 vs 2 worker processes on the module, threads on the core,
		# client processes on the polled server (which takes a vCPU)
		if [ -n "$ramdax" ]; then
			bb conc --pool dax:/dev/$ramdax --targets kernel,core,shm,control
		else
			bb conc --pool node:0 --targets kernel,core,shm,control
		fi
		;;
	ring)
		# 61 samples (the rest: 31): a batch of 64 pinned pairs takes
		# milliseconds under TCG, so its samples cannot be shorter
		_rs=
		[ "$BENCH_MODE" = smoke ] || _rs="--samples 61"
		if [ -n "$ramdax" ]; then
			bb $_rs ring --pool dax:/dev/$ramdax
		else
			bb $_rs ring --pool node:0
		fi
		;;
	replay)
		if [ ! -f /bench/trace.jsonl ]; then
			echo "# replay skipped: no trace in the guest"
		elif [ -n "$ramdax" ]; then
			bb replay --trace /bench/trace.jsonl --pool dax:/dev/$ramdax --caps $CAPS
		else
			bb replay --trace /bench/trace.jsonl --pool node:0 --caps $CAPS
		fi
		;;
	python)
		python_benches
		;;
	esac
done

echo "# module messages:"
dmesg | grep -i -E 'beluga|WARNING|BUG:|Oops' | tail -n 40 | sed 's/^/#   /'
for f in $OUT/*; do
	[ -f "$f" ] || continue
	echo "BELBENCH-FILE ${f##*/}"
	cat "$f"
	echo "BELBENCH-END"
done
exit 0
