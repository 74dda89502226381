#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# mkinitramfs.sh [options] 6.1|6.12
# Build a busybox (static) initramfs for one Debian guest kernel:
#   - the kernel's CXL, nvdimm/pmem and dax modules (+ their dependencies) and
#     the 9p client (run-guest.sh -P shares the host's root into the guest) and
#     overlayfs (the install stage's writable copy of that root),
#     decompressed (busybox modprobe cannot read .ko.xz), depmod'ed;
#   - beluga.ko built against that kernel's headers (scripts/vm/build-module.sh),
#     installed as lib/modules/KVER/updates/beluga.ko;
#   - ndctl, daxctl, cxl with their shared libraries and the dynamic loader;
#   - /init (guest-init.sh), /etc/beluga/{lib,setup,python,install}.sh, the run script.
# Options:
#   -o FILE       output (default build/vm/KVER/initramfs.cpio)
#   -r SCRIPT     guest script to run, installed as /beluga/run (default tests/vm/guest-tests.sh)
#   -d SRC:DEST   copy directory SRC into the initramfs at DEST (repeatable); a missing
#                 SRC is skipped with a note
#   -k KO         use this beluga.ko instead of building one; -k none: no module
# Prints the output path.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage() { die "usage: $0 [-o FILE] [-r SCRIPT] [-d SRC:DEST]... [-k KO|none] 6.1|6.12"; }
out= run=$BELUGA_ROOT/tests/vm/guest-tests.sh ko= dirs=()
while getopts o:r:d:k: opt; do
	case $opt in
	o) out=$OPTARG ;;
	r) run=$OPTARG ;;
	d) dirs+=("$OPTARG") ;;
	k) ko=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
alias=$1
kver=$(kver_of "$alias")
need_cmd cpio xz /sbin/depmod /sbin/modprobe
[ -x /bin/busybox ] && file_is_static=$(ldd /bin/busybox 2>&1 || true)
[ -x /bin/busybox ] || die "/bin/busybox not found: run scripts/install-deps.sh (busybox-static)"
case ${file_is_static:-} in
*"not a dynamic"* | *"statically linked"*) ;;
*) die "/bin/busybox is dynamically linked: install busybox-static (scripts/install-deps.sh)" ;;
esac
[ -f "$run" ] || die "guest script $run not found"

groot=$("$(dirname "$0")/guest-kernel.sh" "$alias")
gmod=$groot/lib/modules/$kver
work=$BELUGA_BUILD/vm/$kver
mkdir -p "$work"
out=${out:-$work/initramfs.cpio}

# The kernel's own module index (the image package ships none): once per kernel.
(
	flock 8
	if [ ! -f "$gmod/modules.dep" ] || [ "$gmod/modules.dep" -ot "$gmod/modules.order" ]; then
		log "depmod for the cached $kver modules (once)"
		/sbin/depmod -b "$groot" "$kver"
	fi
) 8>"$BELUGA_CACHE/guest/.lock-$kver"

# Modules the topologies need. cxl_core/cxl_port are built in (CONFIG_CXL_BUS=y,
# CXL_PORT=y) on Debian; names that are built in or absent are skipped. brd: a
# block device for the O_DIRECT kselftest; hwpoison_inject: poison_test's way to
# poison a shared-pool page, which MADV_HWPOISON cannot pin. overlay: the install
# stage (guest-install.sh) writes over the read-only 9p share through it.
# i6300esb and softdog: watchdogs for beluga-watchdogd (tests/multihost's
# watchdog scenario).
want=(cxl_core cxl_port cxl_acpi cxl_pci cxl_mem cxl_pmem
	libnvdimm nd_pmem nd_e820 nd_btt dax_pmem
	dax device_dax dax_cxl kmem dax_hmem
	9p 9pnet_virtio overlay
	brd hwpoison_inject
	i6300esb softdog)

# a private staging tree: several guests of one kernel may be prepared at once
root=$(mktemp -d "$work/initramfs.XXXXXX")
trap 'rm -rf "$root" "$out.tmp.$$"' EXIT
chmod 0755 "$root"
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc/beluga,lib/modules/"$kver"/updates,beluga,proc,sys,dev,tmp,run,root}

declare -A seen=()
for m in "${want[@]}"; do
	deps=$(/sbin/modprobe -C /dev/null -d "$groot" -S "$kver" --show-depends "$m" 2>/dev/null || true)
	while read -r kind path _; do
		[ "$kind" = insmod ] || continue
		[ -n "${seen[$path]:-}" ] && continue
		seen[$path]=1
		rel=${path#*/lib/modules/$kver/}
		dst=$root/lib/modules/$kver/$rel
		mkdir -p "$(dirname "$dst")"
		case $path in
		*.ko.xz) xz -dc "$path" >"${dst%.xz}" ;;
		*.ko.zst) zstd -qdc "$path" >"${dst%.zst}" ;;
		*.ko.gz) gzip -dc "$path" >"${dst%.gz}" ;;
		*) cp "$path" "$dst" ;;
		esac
	done <<<"$deps"
done
cp "$gmod"/modules.builtin "$gmod"/modules.builtin.modinfo "$gmod"/modules.order "$root/lib/modules/$kver/" 2>/dev/null || true

case $ko in
none) log "no beluga.ko in this initramfs (-k none)" ;;
'')
	ko=$("$(dirname "$0")/build-module.sh" "$kver")
	cp "$ko" "$root/lib/modules/$kver/updates/beluga.ko"
	;;
*)
	[ -f "$ko" ] || die "-k $ko: no such file"
	cp "$ko" "$root/lib/modules/$kver/updates/beluga.ko"
	;;
esac
/sbin/depmod -b "$root" "$kver"

# busybox: applet links are made by /init (busybox --install -s)
cp /bin/busybox "$root/bin/busybox"
ln -s busybox "$root/bin/sh"

# copy_bin FILE [DEST]: a dynamically linked program with its libraries and loader
copy_bin() {
	local f=$1 dst=${2:-$1} lib
	mkdir -p "$root$(dirname "$dst")"
	cp -L "$f" "$root$dst"
	while read -r lib; do
		[ -n "$lib" ] || continue
		mkdir -p "$root$(dirname "$lib")"
		[ -e "$root$lib" ] || cp -L "$lib" "$root$lib"
	done < <(ldd "$f" 2>/dev/null | grep -oE '/[^ ]+' | sort -u)
}
for t in ndctl daxctl cxl; do
	p=$(command -v "$t" || true)
	if [ -n "$p" ]; then
		copy_bin "$p" "/usr/bin/$t"
	else
		log "note: $t not installed on the host; the guest will not have it"
	fi
done
# the loader's usual paths on amd64: /lib64 is a link to /lib/x86_64-linux-gnu on usrmerged hosts
[ -e "$root/lib64/ld-linux-x86-64.so.2" ] || { mkdir -p "$root/lib64" && cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"; }

here=$(dirname "$0")
install -m 0755 "$here/guest-init.sh" "$root/init"
install -m 0644 "$here/guest-lib.sh" "$root/etc/beluga/lib.sh"
install -m 0644 "$here/guest-setup.sh" "$root/etc/beluga/setup.sh"
install -m 0644 "$here/tap-filter.awk" "$root/etc/beluga/tap-filter.awk"
install -m 0644 "$here/guest-python.sh" "$root/etc/beluga/python.sh"
install -m 0644 "$here/guest-install.sh" "$root/etc/beluga/install.sh"
install -m 0755 "$run" "$root/beluga/run"
# ndctl and friends look these up
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"

for spec in "${dirs[@]}"; do
	src=${spec%%:*} dst=${spec#*:}
	[ "$src" != "$spec" ] || die "-d $spec: expected SRC:DEST"
	if [ ! -d "$src" ]; then
		log "note: $src does not exist; $dst stays empty in the guest"
		continue
	fi
	mkdir -p "$root$dst"
	cp -a "$src/." "$root$dst/"
done

(cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) >"$out.tmp.$$"
mv "$out.tmp.$$" "$out"
log "initramfs $out ($(du -h "$out" | cut -f1))"
echo "$out"
