#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Beluga's in-guest test suite (busybox ash), run by the initramfs's /init after
# the topology is set up and beluga.ko is loaded. Prints TAP: every result name is
# prefixed with the kernel alias so that results stay unique across guests.
#   1. every executable in /tests/kselftest (kselftest_harness TAP);
#   2. the userspace tools' smoke, if they are installed (/usr/bin/belugactl ...);
#   3. the Python suite (tests/python) with Debian's python3 from the host's root
#      over 9p, when the host shares it (run-guest.sh -P; make test does on 6.12):
#      /etc/beluga/python.sh (scripts/vm/guest-python.sh);
#   4. the server install of the README (make install, the udev rule, the group,
#      systemctl enable, the Python quick start as an unprivileged member of the
#      group and as a non-member) in a chroot on an overlay of that shared root
#      with a tmpfs upper layer: /etc/beluga/install.sh (scripts/vm/guest-install.sh);
#   5. the dmesg check (warnings, oopses, sanitizers, beluga errors).
. /etc/beluga/lib.sh
. /etc/beluga/env

# per-binary limit; the harness itself limits each test (TEST_TIMEOUT_DEFAULT)
KSFT_TIMEOUT=${KSFT_TIMEOUT:-600}

run_tap_progs kselftest "$KSFT_TIMEOUT" /tests/kselftest/*

if [ -x /usr/bin/belugactl ]; then
	# every device-dax the topology made (6.1: the CXL one is extra)
	all_dax=$(printf '%s\n' $BELUGA_TEST_DAX $BELUGA_TEST_DAX_CXL | sort -u)
	for d in $all_dax; do
		tap_check "belugactl-attach-$d" belugactl attach /dev/$d
	done
	if [ -n "$BELUGA_TEST_NODE" ]; then
		tap_check "belugactl-attach-node$BELUGA_TEST_NODE" belugactl attach --node "$BELUGA_TEST_NODE" --size 32M
	fi
	tap_check belugactl-status-attached belugactl status
	tap_check belugactl-stats belugactl stats
	tap_check belugactl-status-json belugactl status --json
	if [ -x /usr/bin/beluga-demo ]; then
		# small writes: emulated CXL memory is slow under TCG (~15 MB/s)
		tap_check beluga-demo timeout 600 /usr/bin/beluga-demo -n 50 --bytes-per-block 4096
	fi
	for d in $all_dax ${BELUGA_TEST_NODE:+node$BELUGA_TEST_NODE}; do
		# --evict: the demo left published blocks behind
		tap_check "belugactl-detach-$d" belugactl detach "$d" --evict
	done
else
	tap_skip belugactl-smoke "belugactl is not in the guest (userspace/build/static/belugactl not built)"
fi
# executables the userspace engineer may ship as guest smoke tests (TAP)
for t in /tests/userspace/*; do
	[ -f "$t" ] && [ -x "$t" ] || continue
	run_tap_prog "userspace:$(basename "$t")" 600 "$t"
done

# after the others: it attaches a region of its own and detaches it again
if grep -q 'beluga_hostroot=' /proc/cmdline; then
	. /etc/beluga/python.sh
	python_stage
	# the README's server install on an overlay of the same share (its own region)
	. /etc/beluga/install.sh
	install_stage
else
	tap_skip python "the host's root is not shared into this guest (run-guest.sh -P REPO); make test runs the Python suite in the 6.12 guest only: the binding and the module are the same on both kernels, and a second run would add its minutes to every make test"
	tap_skip install "the host's root is not shared into this guest (run-guest.sh -P REPO); make test runs the server-install test in the 6.12 guest only, where the host's root is shared"
fi

dmesg_check
