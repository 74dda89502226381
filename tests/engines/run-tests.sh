#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The engine lane of `make test` (scripts/test.sh), as TAP:
#   1. the virtual environments of tests/engines/*.lock, made or reused by
#      scripts/engine-venv.sh (one result each, with its time and download size);
#   2. each environment's tests with its own python, against the binding's fake
#      build on the host (tests/userspace/test_python.sh: one result per test).
# An environment that cannot be built fails, and so do its tests (never a skip:
# PyPI is reachable wherever make test runs).
#
# Usage: tests/engines/run-tests.sh [ENV...]   (default: every environment;
#        BELUGA_BUILD as in scripts/vm/lib.sh; BELUGA_ENGINE_FREE_MIN_MB, default
#        20480: below that much free space, venv-vllm and venv-sglang are removed
#        after their tests)
set -u
cd "$(dirname "$0")/../.." || exit 1
repo=$(pwd)
build=${BELUGA_BUILD:-$repo/build}

# ENV: the tests it runs (pytest paths, relative to the repository), in this order
envs=(model lmcache vllm sglang)
declare -A tests=(
	[model]="tests/engines/test_package.py tests/engines/test_model_kv.py"
	[lmcache]="tests/engines/test_lmcache.py tests/engines/test_peers_redis.py"
	[vllm]="tests/engines/vllm"
	[sglang]="tests/engines/test_sglang.py"
)
if [ $# -gt 0 ]; then
	for env in "$@"; do
		[ -n "${tests[$env]:-}" ] || { echo "Bail out! no engine environment '$env' (one of: ${envs[*]})"; exit 1; }
	done
	envs=("$@")
fi

if ! out=$(make -C userspace python 2>&1); then
	echo "not ok - build:python-fake"
	echo "# 'make -C userspace python' failed:"
	echo "$out" | tail -n 20 | sed 's/^/#   /'
	exit 1
fi

free_min_mb=${BELUGA_ENGINE_FREE_MIN_MB:-20480}
rc=0
for env in "${envs[@]}"; do
	t0=$(date +%s)
	if out=$(scripts/engine-venv.sh "$env" 2>&1); then
		echo "ok - venv:$env ($(echo "$out" | tail -n 1 | sed 's/^engine-venv: //'))"
	else
		echo "not ok - venv:$env"
		echo "# scripts/engine-venv.sh $env failed after $(($(date +%s) - t0)) s:"
		echo "$out" | tail -n 30 | sed 's/^/#   /'
		echo "not ok - $env:tests # not run: the venv is missing"
		rc=1
		continue
	fi
	t0=$(date +%s)
	# shellcheck disable=SC2086 # the paths are words
	PYTHON=$build/venv-$env/bin/python tests/userspace/test_python.sh userspace ${tests[$env]} || rc=1
	echo "# $env tests: $(($(date +%s) - t0)) s"
	# On a short disk, a venv that nothing after this lane runs goes once its tests
	# have run (the 6.12 guest runs venv-model, the bench smoke venv-lmcache): the
	# rest of make test needs room too, and the next run rebuilds it from the wheels.
	free=$(df -Pm "$build" | awk 'NR == 2 { print $4 }')
	if [ "$env" != model ] && [ "$env" != lmcache ] && [ "${free:-0}" -lt "$free_min_mb" ]; then
		rm -rf "$build/venv-$env"
		echo "# removed $build/venv-$env after its tests: $free MiB free, under the $free_min_mb" \
			"MiB the rest of make test keeps (BELUGA_ENGINE_FREE_MIN_MB); now $(df -Pm "$build" | awk 'NR == 2 { print $4 }') MiB"
	fi
done

# Two venvs with the same torch hold it once (scripts/engine-venv.sh hardlinks
# identical files): without that, the four venvs outgrew CI's disk.
lib=lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
same=()
for env in "${envs[@]}"; do
	[ -f "$build/venv-$env/$lib" ] && [ -f "$build/venv-${same[0]:-$env}/$lib" ] &&
		cmp -s "$build/venv-$env/$lib" "$build/venv-${same[0]:-$env}/$lib" && same+=("$env")
done
if [ ${#same[@]} -ge 2 ]; then
	inodes=$(for env in "${same[@]}"; do stat -c %i "$build/venv-$env/$lib"; done | sort -u | wc -l)
	together=$(cd "$build" && du -scm "${same[@]/#/venv-}" | tail -n 1 | cut -f1)
	if [ "$inodes" -eq 1 ]; then
		echo "ok - venvs:hardlinked (${same[*]}: one copy of their torch; $together MiB together)"
	else
		echo "not ok - venvs:hardlinked (${same[*]} hold the same libtorch_cpu.so in $inodes copies: scripts/engine-venv.sh did not hardlink them)"
		rc=1
	fi
fi
exit $rc
