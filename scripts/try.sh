#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scripts/try.sh: what `make try` runs. The Python quick start of README.md, as
# printed there, over the fake kernel: no root, no CXL memory, no module, no QEMU;
# a few seconds once built.
#
# The fake kernel (tests/userspace/fake_kernel.c) is an in-process stand-in for
# beluga.ko: the module's ioctl rules over the module's own pool code (kmod/core),
# so allocation, publish, lookup, pins and eviction behave as on the real module.
# Only the memory differs: the pool is a sparse file in a temporary directory.
#
# It builds the Python package's fake variant (make -C userspace python-fake): in
# userspace/build when that is writable or already up to date, else in the
# temporary directory, so that it also runs from a read-only checkout. Nothing is
# written outside those two places (no bytecode, no pytest cache).
# Environment: PYTHON (default /usr/bin/python3, the interpreter the package is
# built for).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-/usr/bin/python3}
t0=$(date +%s)

say() { printf 'try: %s\n' "$*"; }
die() {
	printf 'try: error: %s\n' "$*" >&2
	exit 1
}

# 1. What the build needs (Debian package names; scripts/install-deps.sh has them all).
if command -v dpkg-query >/dev/null; then
	missing=()
	for p in gcc make python3-dev python3-numpy liburcu-dev; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] ||
		die "missing packages: ${missing[*]}: run 'sudo apt-get install ${missing[*]}' (or 'sudo scripts/install-deps.sh', which installs everything make demo and make test need)"
fi
[ -x "$python" ] || die "$python not found: install python3-dev and python3-numpy, or set PYTHON to the Debian interpreter the package is built for"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/beluga-try.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# 2. The package over the fake kernel.
build=userspace/build
if [ -w userspace ] && { [ ! -e "$build" ] || [ -w "$build" ]; }; then
	say "1/3 the beluga package over the fake kernel, in $build/python-fake (make -C userspace python-fake)"
	make -s -C userspace -j"$(nproc)" python-fake >"$tmp/build.log" 2>&1 ||
		{ cat "$tmp/build.log" >&2; die "make -C userspace python-fake failed (output above)"; }
elif make -s -C userspace python-fake >"$tmp/build.log" 2>&1; then
	# read-only, and nothing was out of date: make had nothing to write
	say "1/3 the beluga package over the fake kernel: $build/python-fake is up to date"
else
	build=$tmp/build
	say "1/3 $PWD/userspace is read-only here and not built: building the beluga package over the fake kernel in $build"
	make -s -C userspace -j"$(nproc)" B="$build" python-fake >"$tmp/build.log" 2>&1 ||
		{ cat "$tmp/build.log" >&2; die "make -C userspace B=$build python-fake failed (output above)"; }
fi
case $build in /*) pkg=$build/python-fake ;; *) pkg=$PWD/userspace/${build#userspace/}/python-fake ;; esac

# 3. A pool: one 64 MiB region of 2 MiB blocks (the module's default block size),
#    backed by a sparse file. BELUGA_DEVICE is where beluga.Pool() opens it.
say "2/3 a fake pool: one 64 MiB region (dax0.0) of 2 MiB blocks, backed by $tmp/beluga"
: >"$tmp/beluga"

# 4. The quick start, taken from README.md as printed, then what the pool saw.
say "3/3 the Python quick start of README.md (\"Python and engines\"), run with $python:"
BELUGA_FAKE_KERNEL=1 BELUGA_FAKE_BLOCK_SIZE=2097152 BELUGA_FAKE_REGIONS=dax0.0:64M \
	BELUGA_DEVICE="$tmp/beluga" PYTHONPATH="$pkg" PYTHONDONTWRITEBYTECODE=1 \
	"$python" - README.md <<'EOF'
import re
import sys

import beluga

readme = sys.argv[1]
section = open(readme, encoding="utf-8").read().split("\n## Python and engines", 1)
found = re.search(r"```python\n(.*?)```", section[-1], re.S) if len(section) == 2 else None
if not found:
    sys.exit(f"try: error: no ```python block under '## Python and engines' in {readme}")
code = found.group(1)
print("".join("    | " + line + "\n" for line in code.rstrip("\n").split("\n")))
print("try: its output:", flush=True)
exec(compile(code, f"{readme} (Python quick start)", "exec"), {"__name__": "__main__"})

with beluga.Pool() as pool:
    s = pool.stats()
print(f"try: the pool now holds {s['published_blocks']} published of {s['total_blocks']} blocks; "
      f"{s['allocs']} ALLOC, {s['publishes']} PUBLISH, {s['lookups']} LOOKUP "
      f"({s['lookup_hits']} of {s['lookup_keys']} keys hit), {s['pins']} pins left")
EOF
say "done in $(($(date +%s) - t0)) s, with no root, no CXL and no kernel module."
cat <<'EOF'
try: next:
  make demo     the same pool served by the real module in a QEMU guest with emulated CXL memory
                (root for the first run, which installs the dependencies)
  examples/     a complete C program using libbeluga, and what each example shows
  userspace/python/README.md   KVStore, namespaces, and the vLLM, SGLang and LMCache adapters
EOF
