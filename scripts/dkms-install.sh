#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# dkms-install.sh [-b] [-u] [-n]          (make install-dkms)
# Install beluga.ko through DKMS: copy the module's sources (kmod/, uapi/,
# VERSION, LICENSES/) and dkms.conf, made from dkms.conf.in, to
# /usr/src/beluga-VERSION, then dkms add, build and install for each
# kernel in $KVERS (default: the running kernel). Idempotent: an earlier copy of
# the same version is removed from DKMS first.
#   -b   build only (dkms add + build, no install into /lib/modules)
#   -u   uninstall: dkms remove beluga/VERSION --all and delete /usr/src/beluga-VERSION
#   -n   print the dkms.conf it would install and stop (no root needed)
# With DESTDIR set (a package's staging tree), only the sources and dkms.conf
# are copied, to $DESTDIR/usr/src/beluga-VERSION: no dkms command runs and
# nothing outside DESTDIR is written; the package's postinst runs
# `dkms install beluga/VERSION` on the target.
# VERSION is the content of the VERSION file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
me=${0##*/}
die() {
	echo "$me: error: $*" >&2
	exit 1
}

build_only=0 uninstall=0 print_conf=0
while getopts bun opt; do
	case $opt in
	b) build_only=1 ;;
	u) uninstall=1 ;;
	n) print_conf=1 ;;
	*) die "usage: $0 [-b] [-u] [-n]" ;;
	esac
done

[ -f "$root/dkms.conf.in" ] || die "$root/dkms.conf.in is missing: not a Beluga source tree"
ver=$(cat "$root/VERSION" 2>/dev/null) || die "$root/VERSION is missing: not a Beluga source tree"
[[ $ver =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "$root/VERSION holds '$ver', not MAJOR.MINOR.PATCH: fix the file"
dkms_conf() {
	sed "/^PACKAGE_VERSION=/s/@VERSION@/$ver/" "$root/dkms.conf.in"
}
if [ $print_conf -eq 1 ]; then
	dkms_conf
	exit 0
fi

destdir=${DESTDIR:-}
if [ -n "$destdir" ] && { [ $build_only -eq 1 ] || [ $uninstall -eq 1 ]; }; then
	die "-b and -u act on this host's DKMS, DESTDIR ($destdir) only stages the sources: unset DESTDIR"
fi
name=$(dkms_conf | sed -n 's/^PACKAGE_NAME="\(.*\)"$/\1/p')
[ -n "$name" ] || die "cannot read PACKAGE_NAME from dkms.conf.in"
src=$destdir/usr/src/$name-$ver

# copy_tree: the sources only, no build outputs from an in-tree build
copy_tree() {
	rm -rf "$src"
	mkdir -p "$src"
	dkms_conf >"$src/dkms.conf"
	cp "$root/VERSION" "$src/"
	(cd "$root" && find kmod uapi -type f \( -name '*.c' -o -name '*.h' -o -name Kbuild -o -name Makefile \) \
		! -name '*.mod.c' -print0) | (cd "$root" && xargs -0 cp --parents -t "$src")
	cp -r "$root/LICENSES" "$src/"
	if [ -f "$root/README.md" ]; then cp "$root/README.md" "$src/"; fi
}

if [ -n "$destdir" ]; then
	copy_tree
	echo "$me: staged $src (dkms.conf inside); on the target run dkms add -m $name -v $ver, then dkms install -m $name -v $ver"
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (writes /usr/src and runs dkms); re-run with sudo"
command -v dkms >/dev/null || die "dkms not found: apt-get install dkms (scripts/install-deps.sh installs it)"

# remove_old: drop NAME/VER from DKMS if it is there. dkms needs the source's
# dkms.conf to remove, so this runs after copy_tree (also repairs a tree whose
# /usr/src copy was deleted by hand).
remove_old() {
	if [ -e "/var/lib/dkms/$name/$ver" ] || [ -L "/var/lib/dkms/$name/$ver" ]; then
		dkms remove -m "$name" -v "$ver" --all >/dev/null ||
			die "dkms remove $name/$ver failed; inspect /var/lib/dkms/$name/$ver"
	fi
}

if [ $uninstall -eq 1 ]; then
	[ -e "/var/lib/dkms/$name/$ver" ] && [ ! -e "$src/dkms.conf" ] && copy_tree
	remove_old
	rm -rf "$src"
	echo "$me: removed $name/$ver from DKMS and $src"
	exit 0
fi

kvers=${KVERS:-$(uname -r)}
for k in $kvers; do
	[ -e "/lib/modules/$k/build/Makefile" ] ||
		die "no kernel headers for $k at /lib/modules/$k/build: apt-get install linux-headers-$k, or set KVERS to kernels that have them"
done
[ -f "$root/kmod/Kbuild" ] || die "$root/kmod/Kbuild is missing: not a Beluga source tree"

copy_tree
remove_old
dkms add -m "$name" -v "$ver"
for k in $kvers; do
	if ! dkms build -m "$name" -v "$ver" -k "$k"; then
		log=/var/lib/dkms/$name/$ver/build/make.log
		[ -f "$log" ] && tail -n 30 "$log" >&2
		die "dkms build for $k failed (log: $log)"
	fi
	if [ $build_only -eq 0 ]; then
		dkms install -m "$name" -v "$ver" -k "$k"
	fi
done
dkms status -m "$name" -v "$ver"
if [ $build_only -eq 0 ]; then
	echo "$me: installed; load it with: modprobe beluga"
fi
