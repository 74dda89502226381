#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# scripts/demo.sh: what `make demo` runs. Installs the dependencies, builds
# beluga.ko for Debian's 6.12 kernel and the static userspace tools, boots a QEMU
# TCG guest with three emulated CXL type-3 memory devices, loads the module,
# attaches the two CXL ram regions (/dev/dax0.0, /dev/dax1.0) with belugactl,
# replays a prefix-sharing workload with beluga-demo (hit ratio, op counts), and
# prints `belugactl status` and `belugactl stats`. Exit status 0 on success.
# Environment: BELUGA_DEMO_ARGS (extra beluga-demo options; its default --verify
# auto already writes little per block on the slow emulated CXL memory, ~15 MB/s
# under TCG), BELUGA_DEMO_TIMEOUT (s, default 900).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/vm/lib.sh
# a line per stage with its time, a heartbeat per minute (stderr)
. scripts/progress.sh
progress_init "make demo" "$BELUGA_BUILD/demo-stage-times"

progress_stage "dependencies (scripts/install-deps.sh)"
if [ "$(id -u)" -eq 0 ]; then
	scripts/install-deps.sh
elif [ ! -s "$BELUGA_CACHE/kver-6.12" ]; then
	die "dependencies are not installed: run 'sudo scripts/install-deps.sh' once"
fi

progress_stage "beluga.ko for 6.12"
ko=$(scripts/vm/build-module.sh 6.12) || die "beluga.ko does not build against the 6.12 headers (see above)"
progress_stage "static belugactl and beluga-demo"
[ -f userspace/Makefile ] || die "userspace/Makefile is missing: belugactl and beluga-demo are not in this tree yet"
make -C userspace static >&2 || die "'make -C userspace static' failed: belugactl/beluga-demo cannot be built (see above)"
missing=()
for t in belugactl beluga-demo; do
	[ -x "userspace/build/static/$t" ] || missing+=("userspace/build/static/$t")
done
[ ${#missing[@]} -eq 0 ] || die "missing after 'make -C userspace static': ${missing[*]}"

out=$BELUGA_BUILD/demo
progress_stage "the guest: boot, attach, workload" "$out/console.log"
mkdir -p "$out/etc"
printf '%s\n' "${BELUGA_DEMO_ARGS:-}" >"$out/etc/demo-args"
set +e
scripts/vm/run-guest.sh -r scripts/vm/guest-demo.sh -k "$ko" -o "$out" -t "${BELUGA_DEMO_TIMEOUT:-900}" \
	-d userspace/build/static:/usr/bin -d "$out/etc:/etc/beluga" 6.12
rc=$?
set -e
progress_end
if [ $rc -eq 0 ] && grep -q '^demo: ok' "$out/results.tap"; then
	echo "demo: ok ($(cat "$out/time"); console log: $out/console.log)"
	exit 0
fi
echo "demo: FAILED (guest status $rc; console log: $out/console.log)" >&2
exit 1
