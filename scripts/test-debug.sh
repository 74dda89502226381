#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scripts/test-debug.sh [options]: the debug kernel lane.
#   1. build the debug guest kernel (kernel-debug/build.sh: KASAN, UBSAN,
#      lockdep, kmemleak, fault injection; reused while its config is
#      unchanged) and time it;
#   2. build beluga.ko against that kernel's tree (build/kmod-debug/);
#   3. build the static test binaries: the kselftests (make -C
#      tests/kselftest), the reliability tests and the ioctl fuzzer;
#   4. boot the debug kernel under QEMU TCG with the 6.12 CXL topology
#      (three CXL type-3 devices: dax0.0, dax1.0 on device_dax, a kmem node)
#      and run tests/reliability/guest-run-debug.sh there: reliability tests,
#      the fuzzer (bounded), every kselftest, module unload/reload, then a
#      kmemleak scan and a scan of the kernel log (KASAN, UBSAN, lockdep,
#      BUG:, WARNING:, kmemleak: any report fails the run and is printed);
#   5. print every result as TAP and end with "N passed, N failed, N skipped"
#      (exit status 1 if anything failed).
# Options:
#   --fuzz ARGS   fuzzer arguments (default "-r 4 -p 4 -i 300 -T 60": 4 rounds of
#                 4 processes x 300 operations, at most 60 s; commas or spaces)
#   --rel LIST    only these reliability tests (comma list of names, e.g.
#                 fault_nth_alloc,abi_ro_struct; build/reliability/rel_* -l lists them)
#   --verbose     the fault-nth tests print every fault point they try
#   --modload-stride K   module-load fault injection: every K-th fault point
#                 (default 6; 1: all of them, ~3 minutes)
#   --only LIST   guest steps to run: comma list of rel,fuzz,kselftest,exercise,rmmod
#   --exercise-secs N  seconds for each outside exerciser (stress-ng dev,
#                 stress-ng sysfs, trinity; default 20)
#   -t SECS       guest timeout (default 1800)
#   -s N          guest CPUs (default 2)
#   -j N          kernel build jobs (default nproc)
# Output: build/test-debug/{results.tap,console.log,logs/,time}.
# Environment: BELUGA_FUZZ_SEED (fixed fuzzer seed; default: a new one, printed).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/vm/lib.sh

fuzz="-r 4 -p 4 -i 300 -T 60" exsecs=20 only="" tmo=1800 stride=6 rel="" verbose=0 smp=2 jobs=$(nproc)
while [ $# -gt 0 ]; do
	case $1 in
	--fuzz) fuzz=$2; shift 2 ;;
	--exercise-secs) exsecs=$2; shift 2 ;;
	--only) only=$2; shift 2 ;;
	--modload-stride) stride=$2; shift 2 ;;
	--rel) rel=$2; shift 2 ;;
	--verbose) verbose=1; shift ;;
	-t) tmo=$2; shift 2 ;;
	-s) smp=$2; shift 2 ;;
	-j) jobs=$2; shift 2 ;;
	*) die "usage: $0 [--fuzz ARGS] [--only rel,fuzz,kselftest,exercise,rmmod] [--exercise-secs N] [--modload-stride K] [--rel LIST] [--verbose] [-t SECS] [-s N] [-j N]" ;;
	esac
done

T=$BELUGA_BUILD/test-debug
L=$T/logs
mkdir -p "$L"
rm -f "$T"/results.tap "$T"/console.log "$T"/guest.tap "$T"/time
stream=$T/results.tap
: >"$stream"
n=0 npass=0 nfail=0 nskip=0
t_start=$(date +%s)

out() { printf '%s\n' "$@" | tee -a "$stream"; }
result() { # result ok|fail|skip NAME [DETAIL...]
	local kind=$1 name=$2
	shift 2
	n=$((n + 1))
	case $kind in
	ok) npass=$((npass + 1)); out "ok $n debug:$name" ;;
	skip) nskip=$((nskip + 1)); out "ok $n debug:$name # SKIP $*"; return ;;
	*) nfail=$((nfail + 1)); out "not ok $n debug:$name" ;;
	esac
	local l
	for l in "$@"; do out "# $l"; done
}
finish() {
	out "1..$n"
	out "# debug lane: $(($(date +%s) - t_start)) s in all; $(tr '\n' ';' <"$T/time" 2>/dev/null)"
	out "$npass passed, $nfail failed, $nskip skipped"
	[ $nfail -eq 0 ]
	exit $?
}
need_cmd qemu-system-x86_64 timeout cpio /sbin/depmod make gcc

out "# beluga debug lane: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. the kernel
t0=$(date +%s)
if obj=$(kernel-debug/build.sh -j "$jobs" 2>"$L/kernel.log"); then
	kt=$(cat "$obj/.beluga-build-time" 2>/dev/null || echo '?')
	if grep -q 'up to date' "$L/kernel.log"; then
		result ok "kernel (cached; built in $kt)"
	else
		result ok "kernel (built in $kt)"
	fi
	echo "kernel: $(($(date +%s) - t0)) s ($kt)" >>"$T/time"
else
	result fail kernel "kernel-debug/build.sh failed (log: $L/kernel.log)" "$(tail -n 20 "$L/kernel.log")"
	finish
fi
krel=$(cat "$obj/include/config/kernel.release")
bzimage=$obj/arch/x86/boot/bzImage

# 2. beluga.ko against the debug tree, in a copy (the Kbuild includes ../uapi)
kout=$BELUGA_BUILD/kmod-debug
mkdir -p "$kout"
rsync_tree() { # like scripts/vm/build-module.sh: copy changed sources only
	local s=$1 d=$2 f
	mkdir -p "$d"
	(cd "$s" && find . -type f \( -name '*.c' -o -name '*.h' -o -name Kbuild -o -name Makefile \) -print) |
		while IFS= read -r f; do
			cmp -s "$s/$f" "$d/$f" || { mkdir -p "$d/$(dirname "$f")"; cp -p "$s/$f" "$d/$f"; }
		done
}
rsync_tree kmod "$kout/kmod"
rsync_tree uapi "$kout/uapi"
# kmod/Kbuild takes MODULE_VERSION from the one VERSION file beside kmod/
cmp -s VERSION "$kout/VERSION" || cp -p VERSION "$kout/VERSION"
if make -C "$kout/kmod" KDIR="$obj" >"$L/module.log" 2>&1 && [ -f "$kout/kmod/beluga.ko" ]; then
	if grep -E ': (warning|error):|^WARNING: ' "$L/module.log" >/dev/null; then
		result fail "module" "warnings building beluga.ko against the debug kernel:" \
			"$(grep -E ': (warning|error):|^WARNING: ' "$L/module.log" | head -n 20)"
	else
		result ok "module (beluga.ko for $krel)"
	fi
else
	result fail module "beluga.ko failed to build against $obj (log: $L/module.log)" \
		"$(tail -n 20 "$L/module.log")"
	finish
fi

# 3. static test binaries
if make -C tests/kselftest >"$L/kselftest-build.log" 2>&1; then
	result ok "kselftest-build"
	ksft=tests/kselftest/build/bin
else
	result fail kselftest-build "make -C tests/kselftest failed (log: $L/kselftest-build.log)" \
		"$(tail -n 10 "$L/kselftest-build.log")"
	ksft=
fi
for d in reliability fuzz; do
	if make -C tests/$d >"$L/$d-build.log" 2>&1; then
		result ok "$d-build"
	else
		result fail "$d-build" "make -C tests/$d failed" "$(tail -n 20 "$L/$d-build.log")"
		finish
	fi
done

# 4. the initramfs: busybox, the VM engineer's /init and helpers, this lane's
#    setup and run scripts, beluga.ko (the only module), the test binaries
root=$T/initramfs
rm -rf "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc/beluga,lib/modules/"$krel"/updates,beluga,proc,sys,dev,tmp,run,root}
mkdir -p "$root"/tests/{kselftest,reliability,fuzz}
[ -x /bin/busybox ] || die "/bin/busybox not found (busybox-static)"
cp /bin/busybox "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
install -m 0755 scripts/vm/guest-init.sh "$root/init"
install -m 0644 scripts/vm/guest-lib.sh "$root/etc/beluga/lib.sh"
install -m 0644 scripts/vm/tap-filter.awk "$root/etc/beluga/tap-filter.awk"
install -m 0644 scripts/vm/guest-setup.sh "$root/etc/beluga/setup.sh"
install -m 0755 tests/reliability/dmesg-scan.sh "$root/etc/beluga/dmesg-scan.sh"
install -m 0755 tests/reliability/guest-run-debug.sh "$root/beluga/run"
cp "$kout/kmod/beluga.ko" "$root/lib/modules/$krel/updates/"
cp "$obj/modules.builtin" "$obj/modules.builtin.modinfo" "$obj/modules.order" \
	"$root/lib/modules/$krel/" 2>/dev/null || true
/sbin/depmod -b "$root" "$krel"
[ -n "$ksft" ] && cp "$ksft"/* "$root/tests/kselftest/"
cp build/reliability/rel_* "$root/tests/reliability/"
cp build/fuzz/beluga_fuzz "$root/tests/fuzz/"
install -m 0755 tests/fuzz/exercise.sh "$root/tests/fuzz/exercise.sh"
# the outside exercisers (Debian's stress-ng and trinity) with their shared
# libraries and the loader; a missing one is a SKIP in the guest
copy_bin() { # copy_bin FILE: FILE at the same path, with what ldd lists
	local f=$1 lib
	mkdir -p "$root$(dirname "$f")"
	cp -L "$f" "$root$f"
	while read -r lib; do
		mkdir -p "$root$(dirname "$lib")"
		[ -e "$root$lib" ] || cp -L "$lib" "$root$lib"
	done < <(ldd "$f" 2>/dev/null | grep -oE '/[^ ]+' | sort -u)
}
for x in stress-ng trinity; do
	if p=$(command -v "$x"); then
		copy_bin "$p"
	else
		log "note: $x is not installed (scripts/install-deps.sh); the guest skips it"
	fi
done
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
tenanta:x:1000:1000::/tmp:/bin/sh
tenantb:x:1001:1001::/tmp:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
tenanta:x:1000:
tenantb:x:1001:
nogroup:x:65534:
EOF
(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) >"$T/initramfs.cpio"

# 5. boot: the 6.12 topology of scripts/vm/run-guest.sh, with private CXL
#    backing files (sparse, removed afterwards)
mem=$T/cxl
rm -rf "$mem"
mkdir -p "$mem"
gtmo=$((tmo > 120 ? tmo - 60 : tmo))
fz=$(echo "$fuzz" | tr ' ' ',')
# no_timer_check: under TCG on a loaded host the IO-APIC timer check can fail
cmdline="console=ttyS0 loglevel=5 panic=-1 no_timer_check beluga_kernel=6.12-debug"
cmdline+=" beluga_timeout=$gtmo memhp_default_state=offline beluga_modargs=pools=2 beluga_fuzz=$fz"
[ -n "$only" ] && cmdline+=" beluga_only=$only"
cmdline+=" beluga_modload_stride=$stride beluga_exercise_secs=$exsecs"
[ -n "$rel" ] && cmdline+=" beluga_rel=$rel"
[ $verbose -eq 1 ] && cmdline+=" beluga_rel_verbose=1"
[ -n "${BELUGA_FUZZ_SEED:-}" ] && cmdline+=" beluga_fuzz_seed=$BELUGA_FUZZ_SEED"
# shellcheck disable=SC2054 # QEMU options contain commas
qemu=(qemu-system-x86_64 -accel tcg -nodefaults -no-user-config -display none -no-reboot
	-smp "$smp" -kernel "$bzimage" -initrd "$T/initramfs.cpio"
	-serial stdio -serial "file:$T/guest.tap"
	-M q35,cxl=on -cpu qemu64,-hypervisor -m 2G,maxmem=4G,slots=8
	-device pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1)
for i in 0 1 2; do
	qemu+=(-object "memory-backend-file,id=cxl-mem$i,share=on,mem-path=$mem/mem$i,size=256M"
		-device "cxl-rp,port=$i,bus=cxl.1,id=cxl-rp$i,chassis=0,slot=$((2 + i))"
		-device "cxl-type3,bus=cxl-rp$i,volatile-memdev=cxl-mem$i,id=cxl-vmem$i")
done
# shellcheck disable=SC2054
qemu+=(-M cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size=4G -append "$cmdline")
printf '%q ' "${qemu[@]}" >"$T/qemu.cmd"
echo >>"$T/qemu.cmd"

# QEMU runs in the background so that an interrupted lane takes it down too.
qpid=
cleanup() {
	[ -n "$qpid" ] && kill "$qpid" 2>/dev/null
	rm -rf "$mem"
	return 0
}
trap cleanup EXIT
trap 'cleanup; exit 143' INT TERM
boot_once() {
	: >"$T/console.log"
	: >"$T/guest.tap"
	timeout --foreground -k 10 "$tmo" "${qemu[@]}" </dev/null >"$T/console.log" 2>&1 &
	qpid=$!
	set +e
	wait "$qpid"
	qrc=$?
	set -e
	qpid=
}
log "booting the debug kernel $krel (TCG, $smp cpus, timeout ${tmo}s); console: $T/console.log"
t0=$(date +%s)
for attempt in 1 2; do
	boot_once
	{ [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; } && break
	grep -q '^# beluga guest:' "$T/guest.tap" 2>/dev/null && break
	[ $attempt -eq 2 ] && break
	# died before /init: boot again only for an emulation hiccup, never
	# when the kernel reported a bug
	tests/reliability/dmesg-scan.sh "$T/console.log" >/dev/null || break
	cp "$T/console.log" "$T/console.boot$attempt.log"
	out "# boot attempt $attempt died before /init without a kernel report; booted again" \
		"# (console: $T/console.boot$attempt.log)"
done
echo "guest: $(($(date +%s) - t0)) s" >>"$T/time"
sed -i 's/\r$//' "$T/guest.tap"

# 6. the guest's results, renumbered into this stream
while IFS= read -r line; do
	case $line in
	"not ok "*)
		rest=${line#not ok }
		rest=${rest#* }
		n=$((n + 1)) nfail=$((nfail + 1))
		out "not ok $n $rest"
		;;
	"ok "*)
		rest=${line#ok }
		rest=${rest#* }
		n=$((n + 1))
		case $rest in
		*"# SKIP"*) nskip=$((nskip + 1)) ;;
		*) npass=$((npass + 1)) ;;
		esac
		out "ok $n $rest"
		;;
	"BELUGA-GUEST-EXIT "*) ;;
	*) out "$line" ;;
	esac
done <"$T/guest.tap"
if ! grep -q '^BELUGA-GUEST-EXIT ' "$T/guest.tap"; then
	if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then
		why="timed out after ${tmo}s"
	else
		why="QEMU exited with status $qrc before the guest finished (crash or panic?)"
	fi
	result fail guest "$why"
	out "# kernel reports on the console:"
	tests/reliability/dmesg-scan.sh "$T/console.log" | tee -a "$stream" || true
	out "# last console lines ($T/console.log):"
	tail -n 40 "$T/console.log" | sed 's/\r$//; s/^/#   /' | tee -a "$stream"
fi
finish
