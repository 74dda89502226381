#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# kernel-debug/build.sh [-f] [-j N]
# Build Beluga's debug guest kernel (KASAN, UBSAN, lockdep, kmemleak, fault
# injection; CXL, DAX, NUMA, memory hotplug, io_uring, AF_XDP built in) from
# Debian's linux-source-6.12 and print the build directory (an O= tree: bzImage at
# arch/x86/boot/bzImage, usable as KDIR for `make M=` module builds).
#
#   config  allnoconfig + kernel-debug/debug.config (merge_config.sh) + olddefconfig;
#           every fragment line must survive, or the build fails naming the symbol
#   cache   $BELUGA_KDEBUG_DIR, default /var/cache/beluga/kdebug when writable
#           (shared by every checkout on the machine), else build/kdebug: the
#           source is extracted once; a finished build is reused as long as the
#           fragment, RECIPE below, gcc and the source tarball are unchanged
#           (stamp: obj/.beluga-stamp); concurrent builds wait on a lock
#   time    the build time is printed on stderr and kept in obj/.beluga-build-time
#   -f      rebuild even if the stamp matches (incremental make, not from scratch)
#   -j N    parallel jobs (default: nproc)
#   -o DIR  object directory (default: $BELUGA_KDEBUG_DIR/obj), e.g. to time a
#           build from scratch next to the cached one
# Environment: BELUGA_KSRC_TARBALL (default /usr/src/linux-source-6.12.tar.xz).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/vm/lib.sh"

force=0 jobs=$(nproc) objdir=
while getopts fj:o: opt; do
	case $opt in
	f) force=1 ;;
	j) jobs=$OPTARG ;;
	o) objdir=$OPTARG ;;
	*) die "usage: $0 [-f] [-j N] [-o DIR]" ;;
	esac
done

tarball=${BELUGA_KSRC_TARBALL:-/usr/src/linux-source-6.12.tar.xz}
if [ -n "${BELUGA_KDEBUG_DIR:-}" ]; then
	top=$BELUGA_KDEBUG_DIR
elif mkdir -p "$BELUGA_CACHE/kdebug" 2>/dev/null && [ -w "$BELUGA_CACHE/kdebug" ]; then
	top=$BELUGA_CACHE/kdebug
else
	top=$BELUGA_BUILD/kdebug
fi
frag=$here/debug.config
[ -f "$tarball" ] || die "$tarball not found: apt-get install linux-source-6.12 (scripts/install-deps.sh)"
need_cmd make gcc flex bison bc tar xz flock
mkdir -p "$top"
top=$(cd "$top" && pwd)
# one build at a time per cache (other checkouts, parallel lanes)
exec 9>"$top/.lock"
if ! flock -n 9; then
	log "waiting for another build of the debug kernel in $top"
	flock 9
fi
obj=${objdir:-$top/obj}
mkdir -p "$obj"
obj=$(cd "$obj" && pwd)
src=

# The stamp: everything that decides the kernel's content. Bump RECIPE when
# the way the kernel is configured or built below changes.
RECIPE=1
stamp_want=$( (
	echo "recipe $RECIPE"
	stat -c '%n %s %Y' "$tarball"
	cat "$frag"
	gcc --version | head -n1
) | sha256sum | cut -d' ' -f1)

if [ $force -eq 0 ] && [ -f "$obj/.beluga-stamp" ] && [ "$(cat "$obj/.beluga-stamp")" = "$stamp_want" ] &&
	[ -f "$obj/arch/x86/boot/bzImage" ] && [ -f "$obj/Module.symvers" ]; then
	log "debug kernel is up to date ($obj; built in $(cat "$obj/.beluga-build-time" 2>/dev/null || echo '?'))"
	echo "$obj"
	exit 0
fi

t0=$(date +%s)
# Extract the source once (the tarball holds one directory, linux-source-6.12).
srcstamp="$(stat -c '%s %Y' "$tarball")"
src=$(find "$top" -mindepth 1 -maxdepth 1 -type d -name 'linux-source-*' | head -n1)
if [ -z "$src" ] || [ "$(cat "$top/.src-stamp" 2>/dev/null)" != "$srcstamp" ]; then
	[ -n "$src" ] && rm -rf "$src" "$obj"
	log "extracting $tarball into $top"
	tar -C "$top" -xJf "$tarball"
	src=$(find "$top" -mindepth 1 -maxdepth 1 -type d -name 'linux-source-*' | head -n1)
	[ -n "$src" ] || die "$tarball did not contain a linux-source-* directory"
	echo "$srcstamp" >"$top/.src-stamp"
fi
t1=$(date +%s)

mkdir -p "$obj"
rm -f "$obj/.beluga-stamp"
k() { make -C "$src" O="$obj" ARCH=x86_64 "$@"; }

log "configuring: allnoconfig + $(basename "$frag") + olddefconfig"
k allnoconfig >"$obj/config.log" 2>&1 || {
	cat "$obj/config.log" >&2
	die "make allnoconfig failed"
}
cp "$obj/.config" "$obj/.config.base"
(cd "$obj" && "$src/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config.base" "$frag") >>"$obj/config.log" 2>&1 ||
	die "merge_config.sh failed (log: $obj/config.log)"
k olddefconfig >>"$obj/config.log" 2>&1 || die "make olddefconfig failed (log: $obj/config.log)"

# Every fragment line must be in the final config (a symbol whose dependencies are
# not met is silently dropped by Kconfig).
bad=0
while IFS= read -r line; do
	case $line in
	CONFIG_*=*)
		sym=${line%%=*} val=${line#*=}
		have=$(grep -E "^$sym=|^# $sym is not set" "$obj/.config" | head -n1 || true)
		case $have in
		"$sym=$val") ;;
		*)
			echo "kernel-debug: $sym: wanted '$val', got '${have:-absent}'" >&2
			bad=1
			;;
		esac
		;;
	esac
done <"$frag"
[ $bad -eq 0 ] || die "the config fragment did not apply (see above; dependencies missing?)"

log "building the debug kernel with -j$jobs (log: $obj/build.log)"
t2=$(date +%s)
if ! k -j"$jobs" bzImage modules >"$obj/build.log" 2>&1; then
	tail -n 40 "$obj/build.log" >&2
	die "kernel build failed (log: $obj/build.log)"
fi
t3=$(date +%s)
# CPU time of the build (this shell's children, user + sys, from
# /proc/$$/stat): on a busy machine, cpu / jobs estimates the wall time the
# build takes when it has the cores to itself.
read -r -a st </proc/$$/stat
cpu=$(((st[15] + st[16]) / $(getconf CLK_TCK)))
[ -f "$obj/arch/x86/boot/bzImage" ] || die "build finished without arch/x86/boot/bzImage"
[ -f "$obj/Module.symvers" ] || die "build finished without Module.symvers (needed for M= builds)"
took="$((t3 - t2)) s compile (+$((t1 - t0)) s extract, $((t2 - t1)) s config) with -j$jobs on $(nproc) cpus, $cpu s of CPU (~$((cpu / jobs)) s on $jobs idle cores; load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
echo "$took" >"$obj/.beluga-build-time"
echo "$stamp_want" >"$obj/.beluga-stamp"
log "debug kernel $(make -s -C "$src" O="$obj" kernelrelease 2>/dev/null) built: $took"
echo "$obj"
