#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# Outside exercisers on /dev/beluga (busybox ash), run by the debug lane's
# guest suite (tests/reliability/guest-run-debug.sh, step "exercise") after
# the kselftests. Each prints one TAP result, SKIP when its binary is not in
# the initramfs:
#   stress-ng-dev    stress-ng's dev stressor on /dev/beluga (open, read,
#                    mmap, poll, lseek, generic ioctls), a pool attached;
#   stress-ng-sysfs  stress-ng's sysfs stressor (every file under /sys,
#                    the pool's attributes included);
#   trinity          trinity with /dev/beluga as its only victim file, as an
#                    unprivileged user (trinity will not run as root): at
#                    most TRINITY_N random syscalls on the fds it opens
#                    there, for at most SECS seconds; fails when it made
#                    fewer than TRINITY_MIN syscalls;
# around them beluga_fuzz -P attach (the fuzzer's small pool, so that mmap
# reaches memory) and -P reset (nothing left allocated or pinned, every
# region detaches).
# A result fails when the program fails or when the kernel logged a report
# (dmesg-scan.sh: KASAN, UBSAN, lockdep, WARN, BUG, kmemleak) while it ran;
# the lane's final dmesg scan sees the same reports again.
# Usage: exercise.sh [SECS]  (seconds per exerciser, default 20)
. /etc/beluga/lib.sh
. /etc/beluga/env

SECS=${1:-20}
# trinity's bound (syscalls) and the least it must make in SECS seconds
TRINITY_N=${TRINITY_N:-20000}
TRINITY_MIN=${TRINITY_MIN:-100}
DEV=/dev/beluga
FUZZ=/tests/fuzz/beluga_fuzz
SCAN=/etc/beluga/dmesg-scan.sh
LOG=/tmp/exercise

mkdir -p $LOG
chmod 0777 $LOG

# ex_run NAME TIMEOUT CMD...: one result from CMD's exit status and from the
# kernel log lines it caused; CMD's output goes to $LOG/NAME.log, its last
# lines become comments.
ex_run() {
	_n=$1 _t=$2
	shift 2
	_from=$(dmesg | wc -l)
	_t0=$(cut -d' ' -f1 /proc/uptime)
	timeout "$_t" "$@" >"$LOG/$_n.log" 2>&1 </dev/null
	_rc=$?
	_t1=$(cut -d' ' -f1 /proc/uptime)
	dmesg | tail -n +$((_from + 1)) >"$LOG/$_n.dmesg"
	tail -n 8 "$LOG/$_n.log" | sed 's/^/# /'
	echo "# $_n: exit status $_rc after $(awk -v a="$_t0" -v b="$_t1" 'BEGIN { printf "%.1f", b - a }') s"
	if ! sh $SCAN "$LOG/$_n.dmesg" >"$LOG/$_n.scan"; then
		tap_fail "$_n" "the kernel reported while $_n ran:"
		sed 's/^/# /' "$LOG/$_n.scan" | head -n 200
	elif [ $_rc -ne 0 ]; then
		tap_fail "$_n" "'$*' exited with status $_rc (124: ran past ${_t}s)"
	elif [ -n "${EX_SHORT:-}" ] && _why=$($EX_SHORT "$LOG/$_n.log"); then
		tap_fail "$_n" "$_why"
	else
		tap_ok "$_n"
	fi
}

# trinity_ran LOG: the number of syscalls trinity said it made (0 if none)
trinity_ran() {
	_ran=$(sed -n 's/.*Ran \([0-9]*\) syscalls.*/\1/p' "$1" | tail -n 1)
	echo "${_ran:-0}"
}

# trinity_short LOG: true (and why) when trinity made fewer than
# TRINITY_MIN syscalls: it never got going on /dev/beluga
trinity_short() {
	_ran=$(trinity_ran "$1")
	[ "$_ran" -ge "$TRINITY_MIN" ] && return 1
	echo "trinity made $_ran syscalls in ${SECS} s, fewer than $TRINITY_MIN"
	return 0
}

have() {
	command -v "$1" >/dev/null 2>&1
}

if [ ! -c $DEV ]; then
	for n in stress-ng-dev stress-ng-sysfs trinity; do
		tap_skip $n "no $DEV (beluga.ko not loaded)"
	done
	exit 0
fi

# a pool for the exercisers to map (the fuzzer's two small regions)
run_tap_prog exercise 120 $FUZZ -P attach

if have stress-ng; then
	ex_run stress-ng-dev $((SECS + 60)) stress-ng --dev 2 --dev-file $DEV \
		-t "${SECS}s" --temp-path $LOG --metrics-brief
	ex_run stress-ng-sysfs $((SECS + 60)) stress-ng --sysfs 2 \
		-t "${SECS}s" --temp-path $LOG --metrics-brief
else
	why="stress-ng not in the initramfs (scripts/install-deps.sh installs it on the host)"
	tap_skip stress-ng-dev "$why"
	tap_skip stress-ng-sysfs "$why"
fi

if have trinity; then
	# Only the victim file's fds: --enable-fds turns every other provider
	# off. Trinity 2023.01 calls the provider of -V's files "pseudo"; this
	# script used to disable it by that name, which left "bpf" (missing
	# from trinity's --help list) as the only provider: with no bpf fd for
	# an unprivileged user every child spun in get_random_fd() and trinity
	# made 0 syscalls. At most TRINITY_N syscalls and SECS seconds: on
	# SIGINT trinity stops its children and exits 0.
	cat >$LOG/trinity.sh <<-EOF
	cd $LOG || exit 1
	trinity -q -l off -V $DEV -C 2 -N $TRINITY_N --enable-fds=pseudo \\
		-c ioctl -c mmap -c mremap -c munmap -c mprotect -c madvise -c msync \\
		-c read -c write -c pread64 -c pwrite64 -c readv -c lseek -c fcntl -c newfstat \\
		-c poll -c dup -c splice -c sendfile -c fsync -c ftruncate -c fadvise64 &
	pid=\$!
	i=0
	while [ \$i -lt $SECS ] && kill -0 \$pid 2>/dev/null; do
		sleep 1
		i=\$((i + 1))
	done
	kill -INT \$pid 2>/dev/null
	wait \$pid
	EOF
	# the device is root-only (0600): open it up for the unprivileged run
	mode=$(stat -c %a $DEV)
	chmod 0666 $DEV
	EX_SHORT=trinity_short
	ex_run trinity $((SECS + 60)) su tenanta -s /bin/sh -c "sh $LOG/trinity.sh"
	EX_SHORT=
	chmod "$mode" $DEV
	grep -E 'Ran [0-9]+ syscalls' "$LOG/trinity.log" | tail -n 1 | sed 's/^/# /'
else
	tap_skip trinity "trinity not in the initramfs (scripts/install-deps.sh installs it on the host)"
fi

# nothing the exercisers did may stay behind
run_tap_prog exercise 120 $FUZZ -P reset
