# shellcheck shell=sh
# SPDX-License-Identifier: GPL-2.0
# Guest-side helpers (busybox ash), installed in the initramfs as /etc/beluga/lib.sh.
# TAP results are numbered across every script of one boot through $TAP_N_FILE, and
# every name carries the kernel alias ("6.12:...") so that names stay unique when the
# host sums the results of several guests.

TAP_N_FILE=/run/beluga-tap-n
BELUGA_KPFX=${BELUGA_TEST_KERNEL:-unknown}

tap_count() {
	cat "$TAP_N_FILE" 2>/dev/null || echo 0
}

tap_next() {
	TAP_N=$(($(tap_count) + 1))
	echo "$TAP_N" >"$TAP_N_FILE"
}

# tap_ok NAME
tap_ok() {
	tap_next
	echo "ok $TAP_N $BELUGA_KPFX:$1"
}

# tap_fail NAME [DETAIL-LINE...]
tap_fail() {
	_name=$1
	shift
	tap_next
	echo "not ok $TAP_N $BELUGA_KPFX:$_name"
	for _l in "$@"; do echo "# $_l"; done
}

# tap_skip NAME REASON
tap_skip() {
	tap_next
	echo "ok $TAP_N $BELUGA_KPFX:$1 # SKIP $2"
}

# tap_check NAME CMD... : one result from a command's exit status; its output
# becomes "# " comments.
tap_check() {
	_name=$1
	shift
	_out=$("$@" 2>&1)
	_rc=$?
	[ -n "$_out" ] && echo "$_out" | sed 's/^/# /'
	if [ $_rc -eq 0 ]; then
		tap_ok "$_name"
	else
		tap_fail "$_name" "'$*' exited with status $_rc"
	fi
	return $_rc
}

# run_tap_prog NAME TIMEOUT CMD... : run a program that prints TAP (kselftest_harness,
# kselftest.h) and re-emit its results numbered in this boot's sequence and prefixed
# with KERNEL:NAME:. Its other output becomes "# " comments. A program that crashes,
# times out or exits non-zero without reporting a failure counts as a failure; one
# that prints no result at all too.
run_tap_prog() {
	_name=$1 _tmo=$2
	shift 2
	{
		timeout "$_tmo" "$@" 2>&1 </dev/null
		echo "BELUGA-RC $?"
	} | awk -v pfx="$BELUGA_KPFX:$_name:" -v prog="$BELUGA_KPFX:$_name" -v n="$(tap_count)" \
		-v nf="$TAP_N_FILE" -v tmo="$_tmo" -f /etc/beluga/tap-filter.awk
}

# run_tap_progs WHAT TIMEOUT PROG... : run_tap_prog on each PROG that is an executable
# file, named by its basename, after a "# ---- WHAT NAME" line; a failure named WHAT
# when none is. With TAP_FILTER set to a function name, "$TAP_FILTER PROG" runs first:
# false leaves PROG out, and the words it leaves in TAP_ARGS are PROG's arguments.
run_tap_progs() {
	_rtp_what=$1 _rtp_tmo=$2
	shift 2
	_rtp_found=0
	for _rtp in "$@"; do
		[ -f "$_rtp" ] && [ -x "$_rtp" ] || continue
		_rtp_found=1
		TAP_ARGS=
		if [ -n "${TAP_FILTER:-}" ]; then
			"$TAP_FILTER" "$_rtp" || continue
		fi
		echo "# ---- $_rtp_what ${_rtp##*/} (uptime $(cut -d' ' -f1 /proc/uptime) s)"
		# shellcheck disable=SC2086 # TAP_ARGS is a list of words
		run_tap_prog "${_rtp##*/}" "$_rtp_tmo" "$_rtp" $TAP_ARGS
	done
	[ $_rtp_found -eq 1 ] || tap_fail "$_rtp_what" "no $_rtp_what programs among: $*"
}

# dmesg_check: one TAP result, "dmesg-clean-KERNEL", failing on kernel warnings,
# oopses and sanitizer reports anywhere in the log, and on any beluga message at
# error level or above. The offending lines are printed as "# " comments.
dmesg_check() {
	_pat='WARNING:|BUG:|Oops|general protection|KASAN|UBSAN|lockdep|possible circular|sleeping function called from invalid context|Call Trace'
	# busybox dmesg has no -l: -r prints the raw "<prio>" prefix; 0-3 = emerg..err.
	_bad=$(
		dmesg | grep -E "$_pat"
		dmesg -r | grep -E '^<[0-3]>' | grep -i beluga
	)
	tap_next
	if [ -z "$_bad" ]; then
		echo "ok $TAP_N dmesg-clean-$BELUGA_KPFX"
	else
		echo "not ok $TAP_N dmesg-clean-$BELUGA_KPFX"
		echo "$_bad" | sort -u | head -n 100 | sed 's/^/# /'
	fi
}

# load MODULE...: modprobe each, except drivers built into the kernel (the debug
# kernel of kernel-debug/ has everything but beluga built in)
load() {
	for _m in "$@"; do
		grep -q "/$_m\.ko" "/lib/modules/$(uname -r)/modules.builtin" 2>/dev/null && continue
		modprobe "$_m" || echo "# modprobe $_m failed"
	done
}
