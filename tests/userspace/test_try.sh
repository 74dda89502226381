#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# `make try` as a newcomer runs it: an unprivileged user (nobody, when this
# runs as root) in a copy of the checkout that this user cannot write.
#   1. a copy with nothing built: make try builds the fake package in a
#      temporary directory, runs README.md's Python quick start, and prints
#      its StoreResult/LoadResult;
#   2. a copy whose userspace build is up to date: the same, without
#      building, in seconds.
# Both leave the copy exactly as it was and remove their temporary files.
# TAP.
#
# Usage: tests/userspace/test_try.sh [REPO_ROOT]
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "${1:-$here/../..}" && pwd)
# shellcheck source=../lib/tap.sh
. "$here/../lib/tap.sh"

python=/usr/bin/python3
if ! "$python" -c 'import numpy' 2>/dev/null; then
	skip "make try" "$python cannot import numpy: run scripts/install-deps.sh (python3-numpy)"
	tap_done
	exit
fi

# Under /tmp, readable by everyone: nobody must reach the copy.
tmp=$(mktemp -d /tmp/beluga-try-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"

# as_user CMD...: CMD as an unprivileged user, with a plain environment
if [ "$(id -u)" -eq 0 ]; then
	who=nobody
	as_user() { runuser -u nobody -- env -i PATH=/usr/bin:/bin HOME=/nonexistent LANG=C.UTF-8 "$@"; }
else
	who=$(id -un)
	as_user() { env -i PATH=/usr/bin:/bin HOME="$HOME" LANG=C.UTF-8 "$@"; }
fi

# copy_tree DEST [BUILT]: the checkout's tracked files (mtimes kept, so that
# make sees what is up to date), plus, with BUILT, the userspace build that
# the fake package comes from; then read-only for everyone but root.
copy_tree() {
	local dest=$1 files
	mkdir -p "$dest"
	if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		files=$(git -C "$root" ls-files --cached --others --exclude-standard)
	else
		files=$(cd "$root" && find . -path ./.git -prune -o -name build -prune -o -type f -print)
	fi
	(cd "$root" && tar -cf - -T - <<<"$files") | tar -xf - -C "$dest"
	if [ -n "${2:-}" ]; then
		(cd "$root" && tar -cf - userspace/build/include userspace/build/obj/lib \
			userspace/build/python-fake) | tar -xf - -C "$dest"
	fi
	chmod -R a-w "$dest"
}

# state DIR: every path with its size and mtime, to tell that nothing changed
state() { (cd "$1" && find . -printf '%p %s %T@\n' | sort); }

# check_run NAME DIR MAX_S PATTERN...: make try in DIR as $who exits 0 within
# MAX_S seconds, prints every PATTERN, leaves DIR and its temporary dir alone
check_run() {
	local name=$1 dir=$2 max=$3 out rc t0 secs before p missing=() tmpdir
	shift 3
	before=$(state "$dir")
	t0=$(date +%s%N)
	out=$(as_user make -s -C "$dir" try 2>&1)
	rc=$?
	secs=$((($(date +%s%N) - t0) / 1000000000))
	for p in "$@"; do
		grep -qF -- "$p" <<<"$out" || missing+=("'$p'")
	done
	if [ $rc -ne 0 ] || [ ${#missing[@]} -gt 0 ]; then
		not_ok "$name (exit $rc${missing[*]:+; output lacks ${missing[*]}})"
		sed 's/^/#   /' <<<"$out" | tail -15
	else
		ok "$name"
	fi
	echo "# $name: $secs s"
	if [ "$secs" -le "$max" ]; then
		ok "$name: within $max s ($secs s)"
	else
		not_ok "$name: within $max s (took $secs s)"
	fi
	if [ "$(state "$dir")" = "$before" ]; then
		ok "$name: the checkout is left as it was"
	else
		not_ok "$name: the checkout is left as it was (changed:" \
			"$(diff <(echo "$before") <(state "$dir") | grep '^[<>]' | head -3 | tr '\n' ' '))"
	fi
	tmpdir=$(sed -n 's|.*backed by \(/.*\)/beluga$|\1|p' <<<"$out")
	if [ -n "$tmpdir" ] && [ ! -e "$tmpdir" ]; then
		ok "$name: its temporary directory is gone"
	else
		not_ok "$name: its temporary directory is gone (${tmpdir:-not named in the output} is still there)"
	fi
}

quick_start=("StoreResult(requested=1, skipped=0, stored=1" "LoadResult(requested=1, loaded=1) True"
	"try: the pool now holds 1 published of 32 blocks")

copy_tree "$tmp/unbuilt"
check_run "make try as $who, read-only checkout, nothing built" "$tmp/unbuilt" 90 \
	"is read-only here and not built: building" "${quick_start[@]}"

copy_tree "$tmp/built" built
check_run "make try as $who, read-only checkout, built" "$tmp/built" 30 \
	"python-fake is up to date" "${quick_start[@]}"
tap_done
