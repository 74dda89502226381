#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# check-single-host.sh KVER [SHARED_KO]: the single-host module. Builds beluga.ko
# with BELUGA_SHARED=n and W=1 against KVER's headers (scripts/vm/build-module.sh -N,
# in its own build copy), fails on any warning, and checks that it holds none of the
# shared-pool code (kmod/mh.c, kmod/core/mh_*.c: no bel_mh_ or beluga_mh_ symbol, no
# host_id parameter). SHARED_KO, the default build's module, must hold them: the knob
# is what tells the two apart. Exit 0 when both hold; the module is then copied alone
# into build/kmod-KVER-single/single-host/beluga.ko, for the guest's single-host test
# (BELUGA_TEST_SINGLE_KO, tests/kselftest/admin_test.c).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kver=${1:?usage: check-single-host.sh KVER [SHARED_KO]}
shared_ko=${2:-}
die() {
	echo "check-single-host: $*" >&2
	exit 1
}

# mh_symbols KO: how many symbols of the shared-pool code KO defines
mh_symbols() {
	nm "$1" | awk '$2 ~ /^[TtDdBbRr]$/ && $3 ~ /^(bel_mh_|beluga_mh_)/' | wc -l
}

set +e
ko=$("$root/scripts/vm/build-module.sh" -W -N "$kver")
rc=$?
set -e
[ $rc -eq 2 ] && die "warnings in the BELUGA_SHARED=n W=1 build against $kver"
[ $rc -eq 0 ] || die "the BELUGA_SHARED=n build against $kver failed (status $rc)"
n=$(mh_symbols "$ko")
[ "$n" -eq 0 ] || die "$ko: BELUGA_SHARED=n, yet $n shared-pool symbols: $(nm "$ko" | grep -E ' (bel_mh_|beluga_mh_)' | head -n 5 | tr '\n' ' ')"
if modinfo -F parm "$ko" | grep -q '^host_id:'; then
	die "$ko: BELUGA_SHARED=n, yet it has the host_id parameter of shared pools"
fi
echo "check-single-host: $kver: $ko has no shared-pool code"
if [ -n "$shared_ko" ]; then
	[ -f "$shared_ko" ] || die "$shared_ko: no such module"
	n=$(mh_symbols "$shared_ko")
	[ "$n" -gt 0 ] || die "$shared_ko: the default build (BELUGA_SHARED=y) has no shared-pool symbols"
	echo "check-single-host: $kver: $shared_ko (BELUGA_SHARED=y) has $n shared-pool symbols"
fi
dest=$(dirname "$(dirname "$ko")")/single-host
mkdir -p "$dest"
cp "$ko" "$dest/beluga.ko"
echo "check-single-host: $kver: for the guests: $dest/beluga.ko"
