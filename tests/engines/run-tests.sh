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
#        BELUGA_BUILD as in scripts/vm/lib.sh)
set -u
cd "$(dirname "$0")/../.." || exit 1
repo=$(pwd)
build=${BELUGA_BUILD:-$repo/build}

# ENV: the tests it runs (pytest paths, relative to the repository), in this order
envs=(model lmcache vllm sglang)
declare -A tests=(
	[model]="tests/engines/test_package.py tests/engines/test_model_kv.py"
	[lmcache]="tests/engines/test_lmcache.py"
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
done
exit $rc
