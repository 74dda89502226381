#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# build-module.sh [-W] [-C] [-N] [-q] 6.1|6.12|KVER
# Build beluga.ko against one guest kernel's headers, in a per-kernel copy of the
# tree (build/kmod-KVER/{kmod,uapi,VERSION}: the Kbuild includes $(src)/../uapi), and print
# the path of the .ko. Incremental: only changed sources are copied, so kbuild
# rebuilds only what changed.
#   -W  W=1 build; fail (exit 2) if the compiler printed any warning
#   -C  C=1 build (sparse; the tree is cleaned first, so every file is checked); fail (exit 2) on any warning
#   -N  the single-host module, without shared pools (BELUGA_SHARED=n), in its own
#       copy (build/kmod-KVER-single), so that it never replaces the guests' module
# The full build log is kept in build/kmod-KVER/build.log.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

wflag=() strict=0 sparse=0 suffix=
while getopts WCNq opt; do
	case $opt in
	W) wflag+=(W=1) strict=1 ;;
	C) wflag+=(C=1) sparse=1 strict=1 ;;
	N) wflag+=(BELUGA_SHARED=n) suffix=-single ;;
	q) ;;
	*) die "usage: $0 [-W] [-C] [-N] 6.1|6.12|KVER" ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || die "usage: $0 [-W] [-C] [-N] 6.1|6.12|KVER"
case $1 in
6.1 | 6.12) kver=$(kver_of "$1") ;;
*) kver=$1 ;;
esac
kdir=$(kdir_of "$kver")
[ -f "$BELUGA_ROOT/kmod/Kbuild" ] || die "kmod/Kbuild is missing: the module sources are not in this tree"

out=$BELUGA_BUILD/kmod-$kver$suffix
mkdir -p "$out"
# concurrent callers (two guests, make test and make check) share this tree
exec 8>"$out.lock"
flock 8

# sync_tree SRC DST: copy files whose content differs (keeping mtimes, so an unchanged
# tree is not rebuilt), and drop stale sources that were removed from SRC.
sync_tree() {
	local src=$1 dst=$2 f
	mkdir -p "$dst"
	(cd "$src" && find . -type f ! -name '*.o' ! -name '*.ko' ! -name '*.cmd' ! -name '*.mod' \
		! -name '*.mod.c' ! -name '*.order' ! -name '*.symvers' ! -name '.*' -print) |
		while IFS= read -r f; do
			if ! cmp -s "$src/$f" "$dst/$f"; then
				mkdir -p "$dst/$(dirname "$f")"
				cp -p "$src/$f" "$dst/$f"
			fi
		done
	(cd "$dst" && find . -type f \( -name '*.c' -o -name '*.h' -o -name Kbuild -o -name Makefile \) -print) |
		while IFS= read -r f; do
			[ -e "$src/$f" ] || rm -f "$dst/$f" "$dst/${f%.c}.o"
		done
}
sync_tree "$BELUGA_ROOT/kmod" "$out/kmod"
sync_tree "$BELUGA_ROOT/uapi" "$out/uapi"
cmp -s "$BELUGA_ROOT/VERSION" "$out/VERSION" || cp -p "$BELUGA_ROOT/VERSION" "$out/VERSION"

if [ $sparse -eq 1 ]; then
	command -v sparse >/dev/null || die "sparse not found: run scripts/install-deps.sh"
fi
log "building beluga.ko for $kver ${wflag[*]:-}"
if [ $strict -eq 1 ]; then
	# Warnings are only printed when a file is compiled: start from a clean tree.
	make -C "$out/kmod" KDIR="$kdir" clean >/dev/null 2>&1 || true
fi
set +e
make -C "$out/kmod" KDIR="$kdir" "${wflag[@]}" >"$out/build.log" 2>&1
rc=$?
set -e
if [ $rc -ne 0 ]; then
	cat "$out/build.log" >&2
	die "beluga.ko failed to build against $kdir (log: $out/build.log)"
fi
ko=$out/kmod/beluga.ko
[ -f "$ko" ] || die "make succeeded but $ko is missing"
if [ $strict -eq 1 ]; then
	# Compiler and sparse diagnostics look like "file:line:col: warning: ..."; also
	# catch modpost warnings ("WARNING: modpost: ...").
	if grep -E ': (warning|error):|^WARNING: |: sparse: ' "$out/build.log" >&2; then
		echo "${0##*/}: warnings in the ${wflag[*]} build for $kver (log: $out/build.log)" >&2
		exit 2
	fi
fi
echo "$ko"
