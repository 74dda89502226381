#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The C examples of examples/ run as their comments say, against the fake
# kernel (tests/userspace/fake_kernel.c over the module's portable core):
# the whole store-and-load path, and each error a user meets with its fix.
# Also: examples/Makefile builds them with -Wall -Wextra -Werror against
# this tree, as a user without an installed libbeluga would. TAP.
#
# Usage: tests/userspace/test_examples.sh BUILD_DIR   (userspace/build/check)
set -u

bin=${1:?usage: test_examples.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
example=$bin/example-store_and_load-fake

tmp=$(mktemp -d /tmp/beluga-examples.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/dev"

# shellcheck source=../lib/tap.sh
. "$here/../lib/tap.sh"

# run_example NAME WANT_RC PATTERN... -- ENV...: the example with the fake
# kernel and ENV exits WANT_RC and prints every PATTERN (stdout + stderr)
run_example() {
	local name=$1 want_rc=$2 out rc p missing=()
	shift 2
	local patterns=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		patterns+=("$1")
		shift
	done
	shift
	out=$(env BELUGA_FAKE_KERNEL=1 BELUGA_DEVICE="$tmp/dev" "$@" "$example" 2>&1)
	rc=$?
	for p in "${patterns[@]}"; do
		grep -qF -- "$p" <<<"$out" || missing+=("'$p'")
	done
	if [ "$rc" -ne "$want_rc" ] || [ ${#missing[@]} -gt 0 ]; then
		not_ok "$name (exit $rc, expected $want_rc${missing[*]:+; output lacks ${missing[*]}})"
		sed 's/^/#   /' <<<"$out" | head -12
	else
		ok "$name"
	fi
}

if [ ! -x "$example" ]; then
	not_ok "store_and_load: $example is missing (make -C userspace check builds it)"
	tap_done
	exit
fi

# 64 KiB blocks (the fake's default): 4 MiB is 64 blocks, 128 KiB is 2.
run_example "store_and_load: stores 4 blocks, pins them, reads every byte back, releases" 0 \
	"1. opened and mapped the pool: 64 blocks of 65536 bytes" \
	"2. 64 tokens -> 4 keys of 16 tokens each" \
	"3. the pool has the first 0 of 4 blocks" \
	"4. stored 4 blocks (4 published, 0 already there from another writer, 0 failed)" \
	"5. pinned and read back 4 blocks of 65536 bytes: every byte as stored" \
	"6. released 4 pins" -- BELUGA_FAKE_REGIONS=dax0.0:4M
run_example "store_and_load: no device: exit 1, names the path and the fix" 1 \
	"opening the pool failed: $tmp/none not found: load the module with \`modprobe beluga\`" \
	-- BELUGA_FAKE_REGIONS=dax0.0:4M BELUGA_DEVICE="$tmp/none"
run_example "store_and_load: no region attached: exit 1, says to attach one" 1 \
	"mapping the pool failed: nothing to map: no region attached: attach a memory region" --
run_example "store_and_load: a pool too small for the request: ALLOC's -ENOSPC with the fix, nothing leaked" 1 \
	"ALLOC failed: ALLOC of 4 blocks:" "attach more memory" -- BELUGA_FAKE_REGIONS=dax0.0:128K
# A kernel that answers LOOKUP with the wrong blocks: the read-back check
# must catch it (the comparison can fail).
run_example "store_and_load: wrong blocks from LOOKUP are caught by the read-back" 1 \
	"differs from what was stored" -- BELUGA_FAKE_REGIONS=dax0.0:4M BELUGA_FAKE_LOOKUP_SKEW=1

# examples/Makefile as a user runs it: against this tree's libbeluga.a, with
# -Werror, and the program's first error as a user without the module sees it.
if ! [ -f "$top/userspace/build/libbeluga.a" ]; then
	not_ok "examples/Makefile builds the examples (userspace/build/libbeluga.a missing: make -C userspace)"
elif out=$(PKG_CONFIG_PATH='' PKG_CONFIG_LIBDIR=/nonexistent \
	make -s -C "$top/examples" O="$tmp/build" 2>&1); then
	ok "examples/Makefile builds the examples with -Wall -Wextra -Werror against the tree"
	out=$(BELUGA_DEVICE="$tmp/none" "$tmp/build/store_and_load" 2>&1)
	rc=$?
	if [ $rc -eq 1 ] && grep -qF "opening the pool failed: $tmp/none not found: load the module" <<<"$out"; then
		ok "examples: the real build, without a module, exits 1 with the fix"
	else
		not_ok "examples: the real build, without a module, exits 1 with the fix (exit $rc: $out)"
	fi
else
	not_ok "examples/Makefile builds the examples with -Wall -Wextra -Werror against the tree"
	sed 's/^/#   /' <<<"$out" | head -12
fi

# Every example program is described in examples/README.md.
undescribed=()
for f in "$top"/examples/c/*.c; do
	grep -qF "c/${f##*/}" "$top/examples/README.md" 2>/dev/null || undescribed+=("${f##*/}")
done
if [ ${#undescribed[@]} -eq 0 ]; then
	ok "examples/README.md describes every example"
else
	not_ok "examples/README.md describes every example (missing: ${undescribed[*]})"
fi
tap_done
