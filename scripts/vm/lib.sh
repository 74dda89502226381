# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# Common helpers for Beluga's QEMU guest scripts. Source it; do not run it.
#   BELUGA_ROOT   repository root
#   BELUGA_BUILD  build output directory (default $BELUGA_ROOT/build, gitignored)
#   BELUGA_CACHE  machine-wide cache (default /var/cache/beluga): guest kernels

BELUGA_ROOT=${BELUGA_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BELUGA_BUILD=${BELUGA_BUILD:-$BELUGA_ROOT/build}
BELUGA_CACHE=${BELUGA_CACHE:-/var/cache/beluga}

die() {
	echo "${0##*/}: error: $*" >&2
	exit 1
}

log() {
	echo "${0##*/}: $*" >&2
}

# kver_of ALIAS -> the Debian ABI name chosen by install-deps.sh, e.g. 6.12 -> 6.12.NN+deb12-amd64
kver_of() {
	local alias=$1 f
	case $alias in
	6.1 | 6.12) ;;
	*) die "unknown guest kernel '$alias' (expected 6.1 or 6.12)" ;;
	esac
	f=$BELUGA_CACHE/kver-$alias
	[ -s "$f" ] || die "$f is missing: run scripts/install-deps.sh (as root) first"
	head -n1 "$f"
}

# kdir_of KVER -> the headers tree, or die with the fix
kdir_of() {
	local d=/lib/modules/$1/build
	[ -e "$d/Makefile" ] || die "no kernel headers at $d: run scripts/install-deps.sh (installs linux-headers-$1)"
	echo "$d"
}

need_cmd() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || PATH=$PATH:/sbin:/usr/sbin command -v "$c" >/dev/null 2>&1 ||
			die "'$c' not found: run scripts/install-deps.sh"
	done
}
