#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# One host of the watchdog scenario (run.sh -S watchdog; busybox ash, 6.12
# guest): devices on a shared pool, fenced by a hardware watchdog (issue 21).
# /mh holds mhtool, belugactl, beluga-watchdogd, "role" (A or B) and
# "variant":
#   reset  A's device pin (an io_uring fixed buffer of the pool: a
#          FOLL_LONGTERM pin, as cudaHostRegister takes) never lets go. A's
#          heartbeat stalls: A fences itself, beluga-watchdogd is told HOLD
#          and stops petting A's i6300esb, which resets A (QEMU runs it with
#          -action watchdog=reset and -no-reboot, so QEMU exits). B must hold
#          A alive for lease + W + lease/2 of silence, so A's reset (QMP, on
#          the host's clock) comes before B's takeover ("# B-TAKEOVER", which
#          run.sh timestamps).
#   letgo  A's device pin lets go when the fence signals its eventfd: the
#          watchdog is fed throughout, A rejoins with a new incarnation, and
#          no reset happens.
#   paused the late device write of "late", but instead of a stall the host
#          (run.sh) pauses A's VM (QMP stop), which stops its emulated
#          watchdog too: beluga-vm-fence on the host, which A's
#          beluga-watchdogd --pause-fence declares, must stop A for good
#          before B's takeover, and B's bytes stay intact. run.sh resumes A
#          (QMP cont) after lease + W + lease/2 and a margin: had the agent
#          failed, A would run on and fail here.
#   paused-nofence  the same without the fence (the agent only logs): A
#          resumes, its late write lands in a block B reused, and B must see
#          its bytes overwritten: the danger is real here (not in make test).
#   late   the late device write: A pins (io_uring fixed buffer) a block it
#          allocated, and queues a READ_FIXED into it from a pipe that gets
#          its bytes LATE_S after (mhtool devpin late:SECS): the kernel then
#          writes them into the pinned page as a device would. A stalls; the
#          watchdog resets A before B reuses anything; B then writes every
#          free block (A's included) and checks them after the write would
#          have come: it never lands.
# All: B checks that A's record carries the device lease (devpins=W), and
# A's beluga-watchdogd refuses to start in this VM without --pause-fence.
. /etc/beluga/env
. /etc/beluga/lib.sh
T=/mh/mhtool
NS=78
DAX=dax0.0
W_S=4
# the late write comes this long after A pinned, past B's takeover and fill
LATE_S=90
role=$(cat /mh/role)
variant=$(cat /mh/variant)
BELUGA_KPFX="$BELUGA_KPFX:wd-$role"
STALL=/sys/kernel/debug/beluga/mh_stall_heartbeat
rc=0
check() { tap_check "$@" || rc=1; }
up() { cut -d' ' -f1 /proc/uptime; }
hosts() { echo "# hosts ($1, uptime $(up)):"; $T hosts | sed 's/^/#   /'; }
hfield() { $T hosts | awk -v id="$1" -v f="$2" '$1 == id { print $f }'; }
# stall on|off: the heartbeat's fault attribute (the host "hangs" for the pool)
stall() {
	if [ "$1" = on ]; then
		# fault injection's knobs where the kernel has them (debug kernels)
		[ -e $STALL/times ] && echo 0 >$STALL/verbose && echo -1 >$STALL/times &&
			echo 1 >$STALL/interval
		echo 100 >$STALL/probability
	else
		echo 0 >$STALL/probability
	fi
}
# wait_for SECS CMD...: poll CMD every 0.2 s
wait_for() {
	_n=$(($1 * 5))
	shift
	while [ $_n -gt 0 ]; do
		"$@" && return 0
		_n=$((_n - 1))
		sleep 0.2
	done
	return 1
}

. /mh/pool-lib.sh
find_pool 60
if [ "$role" = A ]; then id=0; else id=1; fi
check attach $T attach $DAX $id

if [ "$role" = B ]; then
	# B owns nothing until its tick claimed its home partition back
	check publish-ready wait_for 60 $T publish $NS 9100 1 2
	check wait-a-pinned $T wait $NS 9101 1 300
	t_pinned=$(up)
	hosts a-pinned
	d=$(hfield 0 10)
	inc=$(hfield 0 3)
	if [ "$d" = "devpins=$((W_S * 1000))" ]; then tap_ok a-device-lease-seen; else
		tap_fail a-device-lease-seen "A's record: '$($T hosts | awk '$1 == 0')'"
		rc=1
	fi
	if [ "$variant" != letgo ]; then
		# from now on A is silent; B reports the moment it holds A dead
		wait_for 120 sh -c "$T hosts | awk '\$1 == 0 && \$6 == \"dead\"' | grep -q ." &&
			echo "# B-TAKEOVER silent_ms $(hfield 0 7) uptime $(up)" ||
			{ tap_fail a-held-dead "A never held dead"; rc=1; }
		hosts a-dead
		s=$(hfield 0 7)
		# lease 2000 + W + lease/2: at least 7000 ms of silence
		if [ "${s:-0}" -ge $((2000 + W_S * 1000 + 1000)) ]; then
			tap_ok "a-held-alive-for-lease-plus-w ($s ms)"
		else
			tap_fail a-held-alive-for-lease-plus-w "A held dead after $s ms of silence"
			rc=1
		fi
		# B adopts A's partition and reuses its blocks: all of them can be had
		wait_for 30 sh -c "$T hosts | awk '\$1 == 1 && \$5 == \"ff\"' | grep -q ." &&
			tap_ok b-adopts-a || { tap_fail b-adopts-a "$($T hosts | awk '$1 == 1')"; rc=1; }
		check b-publishes-after $T publish $NS 9200 8 2
		check b-reads-back $T wait $NS 9200 8 10
		if [ "$variant" != reset ]; then
			# every free block gets a key (A's late-read block too: its
			# allocation died with A), then the bytes are checked after
			# the completion would have come (unpaused A: 12 s after it
			# was submitted, a few seconds before the pause)
			f=$($T free)
			echo "# B fills $f free blocks (uptime $(up))"
			k=0 ok=1
			while [ $k -lt "$f" ]; do
				n=$((f - k))
				[ $n -gt 8 ] && n=8
				MH_FILL=4096 $T publish $NS $((10000 + k)) $n 2 >/dev/null || ok=0
				k=$((k + n))
			done
			[ $ok = 1 ] && tap_ok "b-fills-pool ($f blocks)" || { tap_fail b-fills-pool; rc=1; }
			# past the late write's time (A paused: 10 s later)
			x=5
			[ "$variant" = paused-nofence ] && x=15
			x=$(awk -v t="$t_pinned" -v n="$(up)" -v d=$LATE_S -v x=$x \
				'BEGIN { s = t + d + x - n; print (s > 0 ? int(s + 1) : 0) }')
			echo "# B waits $x s for the late write's time (uptime $(up))"
			sleep "$x"
			if [ "$variant" != paused-nofence ]; then
				check b-bytes-intact-after-late-write env MH_FILL=4096 $T wait $NS 10000 "$f" 0
			else
				x=$(env MH_FILL=4096 $T wait $NS 10000 "$f" 0)
				echo "$x" | sed 's/^/# /'
				if echo "$x" | grep -q 'bytes match no writer'; then
					tap_ok late-write-lands-without-fence
				else
					tap_fail late-write-lands-without-fence "B's bytes intact: this run shows no danger"
					rc=1
				fi
			fi
		fi
	else
		# A rejoins with a new incarnation: never held dead for long
		wait_for 120 sh -c "[ \"\$($T hosts | awk '\$1 == 0 { print \$3 }')\" -gt $inc ]" &&
			tap_ok a-rejoined-seen || { tap_fail a-rejoined-seen "$($T hosts | awk '$1 == 0')"; rc=1; }
		hosts a-rejoined
		check wait-a-done $T wait $NS 9102 1 300
	fi
else
	modprobe i6300esb 2>/dev/null
	check watchdog-device test -c /dev/watchdog
	# a VM's watchdog stops while the VM is paused: refused without the
	# hypervisor's fence (run.sh runs beluga-vm-fence --max-pause 0.5)
	/mh/beluga-watchdogd --watchdog /dev/watchdog --timeout $W_S --device /dev/beluga \
		--once >/run/wd-vm.log 2>&1
	x=$?
	if [ $x = 1 ] && grep -q 'this host is a virtual machine (.*Run beluga-vm-fence' /run/wd-vm.log; then
		tap_ok watchdogd-refuses-vm-without-pause-fence
	else
		tap_fail watchdogd-refuses-vm-without-pause-fence "exit $x: $(cat /run/wd-vm.log)"
		rc=1
	fi
	/mh/beluga-watchdogd --watchdog /dev/watchdog --timeout $W_S --device /dev/beluga \
		--pause-fence 0.5 --foreground >/run/wd.log 2>&1 &
	wdpid=$!
	check watchdogd-running wait_for 10 kill -0 $wdpid
	check wait-b-ready $T wait $NS 9100 1 300
	mode=$variant
	[ "$variant" != reset ] && [ "$variant" != letgo ] && mode=late:$LATE_S
	$T devpin 600 $mode >/run/devpin.log 2>&1 &
	if wait_for 60 grep -q '^# DEVPIN ' /run/devpin.log; then
		tap_ok "device-pin ($(grep '^# DEVPIN ' /run/devpin.log))"
	else
		tap_fail device-pin "$(cat /run/devpin.log)"
		rc=1
	fi
	grep '^# LATE-' /run/devpin.log
	hosts pinned
	check publish-pinned $T publish $NS 9101 1 1
	sleep 2
	if [ "$variant" = paused ]; then
		# run.sh stops this VM now; it never runs again unless the fence failed
		echo "# A-PAUSE uptime $(up)"
		sleep 120
		tap_fail fenced-while-paused "still running 120 s after the pause"
		rc=1
	elif [ "$variant" = paused-nofence ]; then
		# resumed after 10 s of host time, unaware: the late write lands
		echo "# A-PAUSE uptime $(up)"
		sleep $((LATE_S + 10))
		echo "# A-RESUMED uptime $(up)"
		hosts resumed
		sed 's/^/# devpin: /' /run/devpin.log
	elif [ "$variant" != letgo ]; then
		echo "# A-STALL uptime $(up)"
		check stall-on stall on
		# the watchdog resets this guest within W of the fence
		sleep 120
		tap_fail reset "still running 120 s after the stall"
		rc=1
	else
		echo "# A-STALL uptime $(up)"
		check stall-on stall on
		if wait_for 60 grep -q '^# LETGO ' /run/devpin.log; then
			tap_ok "devices-let-go ($(grep '^# LETGO ' /run/devpin.log))"
		else
			tap_fail devices-let-go "$(cat /run/devpin.log)"
			rc=1
		fi
		sleep 2
		check stall-off stall off
		wait_for 60 sh -c "$T hosts | awk '\$1 == 0 && \$6 == \"alive\" && \$10 == \"devpins=-\"' | grep -q ." &&
			tap_ok rejoined-without-device-lease ||
			{ tap_fail rejoined-without-device-lease "$($T hosts | awk '$1 == 0')"; rc=1; }
		hosts rejoined
		# a new incarnation owns nothing until its tick claimed its home
		# partition back from B, which adopted it (ENOSPC until then)
		check publish-done wait_for 60 $T publish $NS 9102 1 1
		check watchdogd-still-running kill -0 $wdpid
		sed 's/^/# watchdogd: /' /run/wd.log
	fi
fi
dmesg | grep -i 'beluga' | sed 's/^/# dmesg: /'
dmesg_check dmesg || rc=1
exit $rc
