#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The demo, inside the 6.12 CXL guest (busybox ash): attach the two CXL ram regions
# (dax0.0, dax1.0: blocks are striped across them), replay a prefix-sharing
# workload with beluga-demo, and show the pool. Exit status 0 on success.
# Extra beluga-demo options: BELUGA_DEMO_ARGS on the host (scripts/demo.sh).
. /etc/beluga/env
set -e
run() {
	echo
	echo "### $*"
	"$@"
}
[ -c /dev/beluga ] || { echo "demo: /dev/beluga is missing: the module did not load (see above)"; exit 1; }
[ -n "$BELUGA_TEST_DAX" ] || { echo "demo: no device-dax region was set up (see the setup results above)"; exit 1; }
echo
echo "(attach zeroes each device before it joins the pool: 15-20 s per 256 MiB of emulated CXL"
echo " memory under TCG; belugactl shows the progress when run on a terminal)"
for d in $BELUGA_TEST_DAX; do
	run belugactl attach /dev/$d
done
run belugactl status
demo_args=
[ -f /etc/beluga/demo-args ] && demo_args=$(cat /etc/beluga/demo-args)
# shellcheck disable=SC2086
run beluga-demo $demo_args
run belugactl status
run belugactl stats
echo
echo "demo: ok"
