#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# guest-kernel.sh 6.1|6.12
# Fetch Debian's own kernel image package for a guest kernel (the ABI recorded by
# scripts/install-deps.sh in /var/cache/beluga/kver-ALIAS) with `apt-get download`,
# unpack it with `dpkg -x` into $BELUGA_CACHE/guest/KVER (no /boot or initramfs side
# effects on the host), and print that directory. Reuses the cache when present.
# Layout: DIR/boot/vmlinuz-KVER, DIR/lib/modules/KVER/ (modules, as shipped).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -eq 1 ] || die "usage: $0 6.1|6.12"
kver=$(kver_of "$1")
dir=$BELUGA_CACHE/guest/$kver
stamp=$dir/.complete

if [ -f "$stamp" ] && [ -f "$dir/boot/vmlinuz-$kver" ] && [ -d "$dir/lib/modules/$kver" ]; then
	echo "$dir"
	exit 0
fi

need_cmd apt-get dpkg flock
mkdir -p "$BELUGA_CACHE/guest" 2>/dev/null ||
	die "cannot create $BELUGA_CACHE/guest: run as root or set BELUGA_CACHE to a writable directory"
exec 8>"$BELUGA_CACHE/guest/.lock-$kver"
flock 8
if [ -f "$stamp" ] && [ -f "$dir/boot/vmlinuz-$kver" ] && [ -d "$dir/lib/modules/$kver" ]; then
	echo "$dir" # another caller fetched it meanwhile
	exit 0
fi

dl=$(mktemp -d "$BELUGA_CACHE/guest/.dl.XXXXXX")
trap 'rm -rf "$dl"' EXIT
pkg=linux-image-$kver
log "downloading $pkg"
# -o APT::Sandbox::User=root: apt's _apt user cannot write into a root-owned temp dir.
if ! (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2); then
	# Debian also ships the same image as -unsigned; either works under QEMU.
	(cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg-unsigned" >&2) ||
		die "apt-get download $pkg failed: run 'apt-get update' (scripts/install-deps.sh does it) and check the mirror"
fi
deb=$(ls "$dl"/*.deb | head -n1)
tmp=$dl/root
dpkg -x "$deb" "$tmp"
[ -f "$tmp/boot/vmlinuz-$kver" ] || die "$deb does not contain boot/vmlinuz-$kver"
[ -d "$tmp/lib/modules/$kver" ] || die "$deb does not contain lib/modules/$kver"
rm -rf "$dir"
mv "$tmp" "$dir"
touch "$stamp"
log "unpacked $pkg into $dir"
echo "$dir"
