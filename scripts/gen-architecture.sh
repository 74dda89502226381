#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Documentation/architecture.svg and architecture.png from their source,
# Documentation/architecture.dot, with Graphviz's dot (Debian: graphviz,
# scripts/install-deps.sh). The figures are committed so that the README
# shows them; tests/userspace/test_architecture.sh fails while they are
# stale.
#
# Usage: gen-architecture.sh [--check] [--out DIR] [REPO_ROOT]
#   (none)     write the figures next to the source
#   --out DIR  write them into DIR instead
#   --check    make them in a temporary directory and compare with the
#              committed ones; exit 1 (naming the fix) when they differ
# Exit status 3: dot is not installed.
set -eu
check=0 out=
while [ $# -gt 0 ]; do
	case $1 in
	--check) check=1 ;;
	--out) out=${2:?--out needs a directory}; shift ;;
	-h | --help) sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "gen-architecture: unknown option $1 (see --help)" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
src=$root/Documentation/architecture.dot
if ! command -v dot >/dev/null; then
	echo "gen-architecture: dot is not installed: apt-get install graphviz (scripts/install-deps.sh)" >&2
	exit 3
fi
tmp=
if [ "$check" = 1 ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	out=$tmp
fi
out=${out:-$root/Documentation}
mkdir -p "$out"
dot -Tsvg "$src" -o "$out/architecture.svg"
# 96 dpi: the PNG at the size a browser shows the SVG.
dot -Gdpi=96 -Tpng "$src" -o "$out/architecture.png"
[ "$check" = 1 ] || exit 0
stale=0
for f in architecture.svg architecture.png; do
	if ! cmp -s "$out/$f" "$root/Documentation/$f"; then
		echo "gen-architecture: Documentation/$f is not what Documentation/architecture.dot gives:" \
			"run scripts/gen-architecture.sh and commit the figures with their source" >&2
		stale=1
	fi
done
exit "$stale"
