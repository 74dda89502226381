#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The C examples of examples/ run as their comments say, against the fake
# kernel (tests/userspace/fake_kernel.c over the module's portable core):
# the whole store-and-load path, and each error a user meets with its fix.
# Also: examples/Makefile builds them with -Wall -Wextra -Werror against
# this tree, as a user without an installed libbeluga would. The engine
# configurations (examples/vllm, lmcache, sglang), without the engines: each
# file parses, is the configuration userspace/python/README.md documents (the
# one the engine lane runs), and names classes of the beluga package that
# import (check_examples.py, over build/python-fake); each launch script is
# valid bash and, where the engine is missing, exits 1 naming the fix. TAP.
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

# The engine configurations, checked without the engines.
pyfake=$top/userspace/build/python-fake
if ! /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
	skip "engine examples: the configurations parse and name the package's classes" \
		"/usr/bin/python3 has no yaml module: run scripts/install-deps.sh (python3-yaml)"
elif ! [ -d "$pyfake/beluga" ]; then
	not_ok "engine examples: $pyfake is missing (make -C userspace python-fake)"
else
	while IFS=$'\t' read -r verdict name why; do
		case $verdict in
		PASS) ok "examples/$name" ;;
		*) not_ok "examples/$name: ${why:-check_examples.py failed: $verdict $name}" ;;
		esac
	done < <(PYTHONPATH=$pyfake /usr/bin/python3 "$here/check_examples.py" "$top" 2>&1)
fi
# The launch scripts: valid bash, and without the engine a message with the fix
# (Debian's python3 has the beluga package here, and no engine).
for s in "$top"/examples/{vllm,lmcache,sglang}/*.sh; do
	name=examples/${s#"$top"/examples/}
	if ! bash -n "$s" 2>"$tmp/err"; then
		not_ok "$name: bash -n: $(head -n 1 "$tmp/err")"
		continue
	fi
	engine=${name#examples/}
	engine=${engine%%/*}
	if /usr/bin/python3 -c "import $engine" 2>/dev/null; then
		skip "$name: without its engine, exits 1 naming the fix" "/usr/bin/python3 has $engine: the script would start it"
		continue
	fi
	out=$(PYTHON=/usr/bin/python3 PYTHONPATH=$pyfake "$s" 2>&1)
	rc=$?
	if [ $rc -eq 1 ] && grep -qF "cannot import" <<<"$out" && grep -qF "pip install" <<<"$out" &&
		grep -qF "./userspace/python" <<<"$out"; then
		ok "$name: without its engine, exits 1 naming the module and the pip install"
	else
		not_ok "$name: without its engine, exits 1 naming the module and the pip install (exit $rc: $out)"
	fi
done

# What each script starts: a stand-in python that imports anything and prints
# the command line it was given, one word a line, and LMCACHE_CONFIG_FILE.
printf '#!/bin/sh\n[ "$1" = -c ] && exit 0\nprintf "%%s\\n" "LMCACHE_CONFIG_FILE=${LMCACHE_CONFIG_FILE:-}" "$@"\n' >"$tmp/python"
chmod +x "$tmp/python"
ex=$top/examples
# starts NAME SCRIPT WORD...: SCRIPT, given the model m/x and --extra 1, runs exactly WORD...
starts() {
	local name=$1 script=$2 got want
	shift 2
	got=$(env -u LMCACHE_CONFIG_FILE PYTHON="$tmp/python" "$ex/$script" m/x --extra 1 2>&1)
	want=$(printf '%s\n' "$@")
	if [ "$got" = "$want" ]; then
		ok "examples/$script starts $name with the model, the configuration beside it and the extra arguments"
	else
		not_ok "examples/$script starts $name with the model, the configuration beside it and the extra arguments"
		diff <(echo "$want") <(echo "$got") | sed 's/^/#   /' | head -12
	fi
}
starts vLLM vllm/serve.sh LMCACHE_CONFIG_FILE= -m vllm.entrypoints.cli.main serve m/x \
	--kv-transfer-config "$(cat "$ex/vllm/kv-transfer-config.json")" --extra 1
starts "vLLM with LMCache" lmcache/serve.sh "LMCACHE_CONFIG_FILE=$ex/lmcache/lmcache.yaml" \
	-m vllm.entrypoints.cli.main serve m/x \
	--kv-transfer-config "$(cat "$ex/lmcache/kv-transfer-config.json")" --extra 1
starts SGLang sglang/launch.sh LMCACHE_CONFIG_FILE= -m sglang.launch_server --model-path m/x \
	--enable-hierarchical-cache --page-size 64 --hicache-mem-layout page_first \
	--hicache-storage-backend dynamic \
	--hicache-storage-backend-extra-config "$(cat "$ex/sglang/hicache-extra-config.json")" --extra 1

# Every example is described in examples/README.md.
undescribed=()
for f in "$top"/examples/c/*.c "$top"/examples/{vllm,lmcache,sglang}/*; do
	grep -qF "${f#"$top"/examples/}" "$top/examples/README.md" 2>/dev/null || undescribed+=("${f#"$top"/examples/}")
done
if [ ${#undescribed[@]} -eq 0 ]; then
	ok "examples/README.md describes every example"
else
	not_ok "examples/README.md describes every example (missing: ${undescribed[*]})"
fi
tap_done
