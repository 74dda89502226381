#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# check-root-kbuild.sh KVER: the kernel's usual out-of-tree command,
#   make -C /lib/modules/KVER/build M=$PWD
# run from the repository root (through the root Kbuild), builds a beluga.ko
# whose MODULE_VERSION() is the VERSION file's. It builds in a scratch copy of
# the tracked files, so no output lands in the tree. Exit 0 when it does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kver=${1:?usage: check-root-kbuild.sh KVER}
kdir=/lib/modules/$kver/build
die() {
	echo "check-root-kbuild: $*" >&2
	exit 1
}

[ -f "$kdir/Makefile" ] || die "no kernel headers at $kdir: run scripts/install-deps.sh"
tmp=$(mktemp -d /tmp/beluga-kbuild.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tmp")
make -C "$kdir" M="$tmp" -j"$(nproc)"
[ -f "$tmp/kmod/beluga.ko" ] || die "make M=\$PWD from the root built no kmod/beluga.ko"
want=$(cat "$root/VERSION")
got=$(modinfo -F version "$tmp/kmod/beluga.ko")
[ "$got" = "$want" ] || die "beluga.ko says version '$got', VERSION says '$want'"
echo "check-root-kbuild: $kver: kmod/beluga.ko, version $got"
