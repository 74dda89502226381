#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scripts/engine-venv.sh: the virtual environments of the engine tests (tests/engines).
#
#   scripts/engine-venv.sh ENV          build/venv-ENV from tests/engines/ENV.lock
#   scripts/engine-venv.sh --lock ENV   regenerate tests/engines/ENV.lock from ENV.in (pip's
#                                       resolver; exact versions, the wheel's SHA-256 each)
#
# ENV is the name of a lock file in tests/engines (model, ...). The venv is made by
# Debian's /usr/bin/python3 (not the python3 first on PATH), so that the 6.12 guest,
# which runs the host's root over 9p, runs the same interpreter. Everything from
# PyPI comes from the lock, checked against its hashes (pip --require-hashes): the
# package's own build too (setuptools, no build isolation). Then the project's
# package is installed as users install it: pip install ./userspace/python.
#
# A requirement marked `# no-deps` in ENV.in (an engine whose own requirements are a
# whole GPU serving stack that the tests never import) is locked on its own and
# installed without its dependencies, after the rest; ENV.in then lists what the
# tests import from it. `pip check` excuses only that package's requirements that
# are not installed: a version conflict with one that is installed still fails.
#
# Cached: nothing is done when the venv's stamp holds the lock file's SHA-256 and the
# package's sources are unchanged (then only the package is reinstalled). A changed
# lock builds the venv anew. The wheels are downloaded (pip download, hashes checked)
# into the machine's cache, $BELUGA_CACHE/wheels (default /var/cache/beluga/wheels,
# like the guest kernels: a fresh clone on the same machine downloads nothing; the
# hashes make sharing safe), where a later build finds them, and installed from there with
# no index. Prints the elapsed time and how much was downloaded.
#
# Environment: BELUGA_BUILD (default REPO/build), BELUGA_PYTHON (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/vm/lib.sh

python=${BELUGA_PYTHON:-/usr/bin/python3}
engines=tests/engines
wheels=${BELUGA_WHEELS:-$BELUGA_CACHE/wheels}

usage() { die "usage: $0 [--lock] ENV (ENV: one of $(find $engines -maxdepth 1 -name '*.in' -printf '%f ' | sed 's/\.in / /g'))"; }

lock_mode=0
if [ "${1:-}" = --lock ]; then
	lock_mode=1
	shift
fi
[ $# -eq 1 ] || usage
env=$1
case $env in
*[!a-z0-9_-]* | '') usage ;;
esac

# mib PATH: its size in MiB (0 where it does not exist)
mib() { du -sm "$1" 2>/dev/null | cut -f1 || echo 0; }

# make_venv DIR: a fresh venv of Debian's python3, or an error naming the fix
make_venv() {
	[ -x "$python" ] || die "$python is missing: run scripts/install-deps.sh (python3)"
	"$python" -c 'import ensurepip, venv' 2>/dev/null ||
		die "$python has no venv/ensurepip module: run scripts/install-deps.sh (python3-venv)"
	rm -rf "$1"
	"$python" -m venv "$1" || die "'$python -m venv $1' failed (see above; Debian's venv needs python3-venv: run scripts/install-deps.sh)$(disk_hint)"
}

# disk_hint: when the disk is nearly full, a sentence saying so and what it takes
disk_hint() {
	local free
	free=$(df -Pm "$BELUGA_BUILD" | awk 'NR == 2 { print $4 }')
	[ "${free:-0}" -lt 2048 ] || return 0
	printf '%s' ": only $free MiB free on $BELUGA_BUILD's file system; the four venvs take" \
		" about 17 GB there (27.9 GB before hardlinking) and their wheels 7.4 GB in $wheels:" \
		" free some space or point BELUGA_BUILD and BELUGA_CACHE at a larger disk"
}

# write_stamp FILE TEXT: by rename, never in place (the file may be a hard link
# shared with another venv's stamp; see hardlink below)
write_stamp() {
	echo "$2" >"$1.tmp"
	mv "$1.tmp" "$1"
}

t0=$(date +%s)
mkdir -p "$BELUGA_BUILD" "$wheels"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# lock_lines REPORT: name[extras]==version and the wheel's hash of each package in
# pip's installation report
lock_lines() {
	"$tools/bin/python" - "$1" <<-'EOF'
			# name[extras]==version and the wheel's hash; the extras that other
			# packages ask for are part of the line (pip's hash mode wants them)
			import json, sys
			from pip._vendor.packaging.requirements import Requirement
			from pip._vendor.packaging.utils import canonicalize_name as canon
			items = {canon(i["metadata"]["name"]): i for i in json.load(open(sys.argv[1]))["install"]}
			extras = {name: set() for name in items}
			changed = True
			while changed:          # extras that turn on further extras
			    changed = False
			    for name, item in items.items():
			        for text in item["metadata"].get("requires_dist", []):
			            req = Requirement(text)
			            dep = canon(req.name)
			            active = req.marker is None or any(
			                req.marker.evaluate({"extra": e}) for e in extras[name] | {""})
			            if dep in items and active and not set(req.extras) <= extras[dep]:
			                extras[dep] |= set(req.extras)
			                changed = True
			for name in sorted(items):
			    meta = items[name]["metadata"]
			    digest = items[name]["download_info"]["archive_info"]["hashes"]["sha256"]
			    ex = "[" + ",".join(sorted(extras[name])) + "]" if extras[name] else ""
			    print(f"{name}{ex}=={meta['version']} \\\n    --hash=sha256:{digest}")
		EOF
}

# The line of a lock after which its packages are installed with --no-deps
no_deps_marker="# --- installed with --no-deps (see the '# no-deps' lines of the .in file) ---"

if [ $lock_mode -eq 1 ]; then
	# pip's own resolver, run by the target interpreter (so markers and wheel tags are
	# this platform's), writes a report of what it would install: every package with
	# the wheel's SHA-256. (pip-compile hashes every file of every release, all
	# platforms: it takes 20 minutes for torch.)
	[ -f "$engines/$env.in" ] || die "$engines/$env.in is missing: write the environment's requirements there first"
	tools=$BELUGA_BUILD/venv-lock
	[ -x "$tools/bin/pip" ] || make_venv "$tools"
	out=$engines/$env.lock
	report=$BELUGA_BUILD/lock-$env.json
	# the `# no-deps` requirements apart from the rest
	grep -v '#[[:space:]]*no-deps' "$engines/$env.in" >"$BELUGA_BUILD/lock-$env.in"
	grep -E '^[^#].*#[[:space:]]*no-deps' "$engines/$env.in" | sed 's/[[:space:]]*#.*//' \
		>"$BELUGA_BUILD/lock-$env-no-deps.in" || true
	"$tools/bin/pip" install -q --dry-run --ignore-installed --only-binary :all: \
		--report "$report" -r "$BELUGA_BUILD/lock-$env.in" || die "pip could not resolve $engines/$env.in (see above)"
	if [ -s "$BELUGA_BUILD/lock-$env-no-deps.in" ]; then
		"$tools/bin/pip" install -q --dry-run --ignore-installed --only-binary :all: --no-deps \
			--report "$report.no-deps" -r "$BELUGA_BUILD/lock-$env-no-deps.in" ||
			die "pip could not resolve the '# no-deps' lines of $engines/$env.in (see above)"
	fi
	{
		echo "# The '$env' engine environment, locked from $env.in for Debian 12's /usr/bin/python3"
		echo "# ($("$python" -c 'import platform; print(platform.python_version())'), x86_64) by 'scripts/engine-venv.sh --lock $env'"
		echo "# (pip $("$tools/bin/pip" --version | cut -d' ' -f2), one wheel per package). Do not edit by hand."
		lock_lines "$report"
		if [ -s "$BELUGA_BUILD/lock-$env-no-deps.in" ]; then
			echo "$no_deps_marker"
			lock_lines "$report.no-deps"
		fi
	} >"$out.tmp"
	mv "$out.tmp" "$out"
	log "$out: $(grep -cE '^[a-zA-Z0-9]' "$out") packages in $(($(date +%s) - t0)) s"
	exit 0
fi

lock=$engines/$env.lock
[ -f "$lock" ] || die "$lock is missing: write $engines/$env.in and run '$0 --lock $env'"
venv=$BELUGA_BUILD/venv-$env
# One builder at a time for all the venvs (two make test lanes would race on one, and
# hardlinking below rewrites the others).
exec 8>"$BELUGA_BUILD/.venvs.lock"
flock 8

lock_sum=$(sha256sum "$lock" | cut -d' ' -f1)
# The package's sources: what `pip install ./userspace/python` compiles and copies.
pkg_sum=$(find userspace/python userspace/lib userspace/include userspace/cuda/kvcopy.h uapi VERSION \
	-type f \( -name '*.py' -o -name '*.c' -o -name '*.h' -o -name '*.map' -o -name '*.toml' \
	-o -name VERSION \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
stamp=$venv/.beluga-lock-sha256
pkg_stamp=$venv/.beluga-package-sha256

wheels_before=$(mib "$wheels")
if [ "$(cat "$stamp" 2>/dev/null)" = "$lock_sum" ]; then
	state=cached
else
	state=fresh
	log "$venv: building from $lock (wheels in $wheels: $wheels_before MiB)"
	make_venv "$venv"
	# the lock's two parts: with dependencies, and after the marker without
	with_deps=$BELUGA_BUILD/.venv-$env.with-deps.lock
	no_deps=$BELUGA_BUILD/.venv-$env.no-deps.lock
	awk -v m="$no_deps_marker" '$0 == m { exit } { print }' "$lock" >"$with_deps"
	awk -v m="$no_deps_marker" 'found { print } $0 == m { found = 1 }' "$lock" >"$no_deps"
	for part in "$with_deps" "$no_deps"; do
		[ -s "$part" ] || continue
		flags=(--require-hashes)
		[ "$part" = "$no_deps" ] && flags+=(--no-deps)
		"$venv/bin/pip" download -q "${flags[@]}" --only-binary :all: -d "$wheels" -r "$part" ||
			die "pip could not download $lock (see above): a hash mismatch means the lock or the download is wrong; a missing wheel means the lock was made for another Python$(disk_hint)"
		"$venv/bin/pip" install -q --no-index --find-links "$wheels" "${flags[@]}" -r "$part" ||
			die "pip could not install $lock into $venv from $wheels (see above)$(disk_hint)"
	done
	# pip check, excusing only the missing requirements of the --no-deps packages
	no_deps_names=$(sed -n 's/^\([A-Za-z0-9._-]*\).*==\([^ ]*\).*/\1 \2/p' "$no_deps")
	problems=$({ "$venv/bin/pip" check 2>&1 || true; } | while read -r pkg ver rest; do
		excused=0
		while read -r name version; do
			[ -n "$name" ] || continue
			if [ "$(echo "$pkg" | tr A-Z_. a-z--)" = "$(echo "$name" | tr A-Z_. a-z--)" ] &&
				[ "$ver" = "$version" ] && [[ "$rest" = requires*"which is not installed." ]]; then
				excused=1
			fi
		done <<<"$no_deps_names"
		[ $excused -eq 1 ] || [ "$pkg" = No ] || echo "$pkg $ver $rest"
	done)
	[ -z "$problems" ] || { echo "$problems" >&2; die "$venv: the locked packages' requirements conflict (pip check above): regenerate the lock with '$0 --lock $env'"; }
	# The venvs hold the same torch and CUDA libraries at the same versions (model and
	# lmcache; vllm and sglang): identical files become hard links, which takes the
	# four from 27.9 GB to 16.5 GB. Contents and modes are compared, not times (pip
	# writes each file afresh). Safe: pip and Python replace files, never write them
	# in place.
	hardlink --ignore-time --quiet "$BELUGA_BUILD"/venv-*/ ||
		die "hardlink (util-linux) failed on $BELUGA_BUILD/venv-* (see above)"
	rm -f "$pkg_stamp"
	write_stamp "$stamp" "$lock_sum"
fi
if [ "$(cat "$pkg_stamp" 2>/dev/null)" != "$pkg_sum" ]; then
	# --no-build-isolation: setuptools comes from the lock, with its hash checked,
	# not from an unpinned download
	"$venv/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall ./userspace/python ||
		die "pip install ./userspace/python into $venv failed (see above): python3-dev and gcc are in scripts/install-deps.sh"
	write_stamp "$pkg_stamp" "$pkg_sum"
	[ $state = cached ] && state="cached, package reinstalled"
fi
echo "engine-venv: $env: $state in $(($(date +%s) - t0)) s, downloaded $(($(mib "$wheels") - wheels_before)) MiB" \
	"(wheels $(mib "$wheels") MiB), venv $(mib "$venv") MiB"
