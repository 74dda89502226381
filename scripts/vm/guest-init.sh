#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# /init of Beluga's test initramfs (busybox). Kernel command line:
#   beluga_kernel=6.1|6.12   topology to set up (scripts/vm/guest-setup.sh)
#   beluga_timeout=SECS      guest-side time limit for the run script
# Runs /etc/beluga/setup.sh (regions, module load), then /beluga/run with
# BELUGA_TEST_KERNEL, BELUGA_TEST_DAX and BELUGA_TEST_NODE in the environment.
# Everything userspace prints goes to the console (ttyS0) and to ttyS1, which the
# host keeps as the clean TAP stream. The last line there is "BELUGA-GUEST-EXIT rc";
# the host counts a boot without it as failed. Then the guest powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /usr/bin /usr/sbin /sbin
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox --install -s
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /dev/shm
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
hostname beluga-guest
ln -sf /proc/self/fd /dev/fd 2>/dev/null

BELUGA_TEST_KERNEL=unknown
tmo=1800
for arg in $(cat /proc/cmdline); do
	case $arg in
	beluga_kernel=*) BELUGA_TEST_KERNEL=${arg#beluga_kernel=} ;;
	beluga_timeout=*) tmo=${arg#beluga_timeout=} ;;
	esac
done
export BELUGA_TEST_KERNEL
export HOME=/root
mkdir -p /root

out=/dev/ttyS1
[ -c $out ] || out=/dev/null
set -o pipefail
{
	echo "# beluga guest: kernel $(uname -r) ($BELUGA_TEST_KERNEL), $(nproc) cpus, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
	echo "# uptime at init: $(cut -d' ' -f1 /proc/uptime) s"
	. /etc/beluga/lib.sh
	. /etc/beluga/setup.sh
	[ -f /etc/beluga/env ] && . /etc/beluga/env
	echo "# environment: BELUGA_TEST_KERNEL=$BELUGA_TEST_KERNEL BELUGA_TEST_DAX='$BELUGA_TEST_DAX' BELUGA_TEST_DAX_CXL='$BELUGA_TEST_DAX_CXL' BELUGA_TEST_NODE=$BELUGA_TEST_NODE BELUGA_TEST_KO=$BELUGA_TEST_KO"
	echo "# uptime after setup: $(cut -d' ' -f1 /proc/uptime) s"
	rc=0
	if [ -x /beluga/run ]; then
		timeout "$tmo" /beluga/run
		rc=$?
		if [ $rc -ne 0 ]; then
			tap_fail guest-script "/beluga/run exited with status $rc$([ $rc -eq 143 ] && echo ": killed after $tmo s")"
		fi
	else
		rc=127
		tap_fail guest-script "no /beluga/run in the initramfs"
	fi
	echo "# uptime at end: $(cut -d' ' -f1 /proc/uptime) s"
	echo "BELUGA-GUEST-EXIT $rc"
} 2>&1 | tee $out
sync
usleep 500000 # let the UARTs drain
poweroff -f
