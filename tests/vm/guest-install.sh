#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Only the server-install stage of the in-guest suite (scripts/vm/guest-install.sh),
# then the dmesg check: for working on that stage without the kselftests and the
# Python suite. Needs the host's root shared into the guest:
#   scripts/vm/run-guest.sh -r tests/vm/guest-install.sh -d userspace/build/static:/usr/bin -P "$PWD" 6.12
. /etc/beluga/lib.sh
. /etc/beluga/env

if grep -q 'beluga_hostroot=' /proc/cmdline; then
	. /etc/beluga/python.sh
	. /etc/beluga/install.sh
	install_stage
else
	tap_fail install "the host's root is not shared into this guest: run run-guest.sh with -P REPO"
fi
dmesg_check
