#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# The Python host tests (tests/python/host, pytest) against the binding's
# fake build, as TAP for tests/userspace/run-tests.sh: one line per test from the
# conftest's TAP writer, pytest's own output as comments. pytest exiting
# non-zero (5: nothing collected) without a failing test line is a failure.
#
# Usage: tests/userspace/test_python.sh USERSPACE_DIR [TEST_PATH...]   (after `make python`)
#   TEST_PATH: relative to the repository (default tests/python/host); PYTHON: the
#   interpreter (default /usr/bin/python3; tests/engines/run-tests.sh passes a venv's)
set -u

src=$(cd "${1:?usage: test_python.sh USERSPACE_DIR [TEST_PATH...]}" && pwd)
shift
[ $# -gt 0 ] || set -- tests/python/host
repo=$(cd "$src/.." && pwd)
python=${PYTHON:-/usr/bin/python3}
tap=$(mktemp /tmp/beluga-pytest.XXXXXX)
trap 'rm -f "$tap"' EXIT

if ! "$python" -c 'import pytest' 2>/dev/null; then
	echo "ok 1 python tests # SKIP $python has no pytest: run scripts/install-deps.sh (python3-pytest)"
	echo "1..1"
	exit 0
fi
cd "$repo" || exit 1
BELUGA_PYTEST_TAP=$tap PYTHONPATH=$src/build/python-fake PYTHONDONTWRITEBYTECODE=1 \
	"$python" -m pytest -q -rs -p no:cacheprovider "$@" 2>&1 | sed 's/^/# /'
rc=${PIPESTATUS[0]}
grep -E '^(not )?ok [0-9]+ ' "$tap"
# A run that reported nothing passes nothing (pytest's own status 5).
if [ "$rc" -eq 0 ] && ! grep -qE '^(not )?ok [0-9]+ ' "$tap"; then
	rc=5
fi
echo "1..$(grep -cE '^(not )?ok [0-9]+ ' "$tap")"
exit "$rc"
