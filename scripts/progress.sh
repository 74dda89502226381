# shellcheck shell=bash
# SPDX-License-Identifier: GPL-2.0
# Stage lines and heartbeats for the long scripts (scripts/test.sh, scripts/demo.sh).
# Source it, then:
#   progress_init LABEL [HISTORY]  LABEL names the run ("make test"); HISTORY is a file
#                                  that keeps each stage's last duration, so that a
#                                  heartbeat can say how long the stage took last time
#   progress_stage NAME [LOG...]   ends the running stage and starts NAME; while NAME
#                                  runs, a heartbeat every BELUGA_HEARTBEAT_S seconds
#                                  (default 60) says how long it has run and the last
#                                  line of the LOG written last (a stage that runs a
#                                  tool with its own log, such as a kernel build, names
#                                  both)
#   progress_end                   ends the running stage (call it before the summary)
# Every line goes to stderr as a TAP comment ("# ..."), so that the TAP stream on stdout
# and its last line ("N passed, N failed, N skipped") stay as they are. The lines read:
#   # [make test 12:05] stage 9: debug kernel lane
#   # [make test 13:05] debug kernel lane: running for 1 min 0 s (last time 19 min 35 s); build/test/logs/debug.log: CC mm/kasan/...
#   # [make test 31:40] debug kernel lane: done in 19 min 35 s
# where 12:05 is the time since progress_init, in minutes and seconds.

_progress_label=run
_progress_history=
_progress_t0=$(date +%s)
_progress_n=0
_progress_name=
_progress_logs=()
_progress_start=0
_progress_pid=

progress_init() {
	_progress_label=$1
	_progress_history=${2:-}
	_progress_t0=$(date +%s)
}

# _progress_clock: the time since progress_init, M:SS (or H:MM:SS)
_progress_clock() {
	local s=$(($(date +%s) - _progress_t0))
	if [ $s -ge 3600 ]; then
		printf '%d:%02d:%02d' $((s / 3600)) $((s % 3600 / 60)) $((s % 60))
	else
		printf '%d:%02d' $((s / 60)) $((s % 60))
	fi
}

# _progress_say TEXT: one comment line on stderr
_progress_say() {
	printf '# [%s %s] %s\n' "$_progress_label" "$(_progress_clock)" "$1" >&2
}

# _progress_span SECONDS: "45 s", "3 min 20 s"
_progress_span() {
	if [ "$1" -lt 60 ]; then echo "$1 s"; else echo "$(($1 / 60)) min $(($1 % 60)) s"; fi
}

# _progress_last NAME: the duration of stage NAME in the history, in seconds, or nothing
_progress_last() {
	[ -n "$_progress_history" ] && [ -f "$_progress_history" ] || return 0
	awk -F '\t' -v n="$1" '$1 == n { s = $2 } END { if (s != "") print s }' "$_progress_history"
}

# _progress_remember NAME SECONDS: keep the duration in the history (best effort)
_progress_remember() {
	[ -n "$_progress_history" ] || return 0
	{
		[ -f "$_progress_history" ] && awk -F '\t' -v n="$1" '$1 != n' "$_progress_history"
		printf '%s\t%s\n' "$1" "$2"
	} >"$_progress_history.new" 2>/dev/null && mv -f "$_progress_history.new" "$_progress_history" 2>/dev/null
	return 0
}

# _progress_heartbeat PARENT: the background loop. It checks every second that the
# script that started it is still there (so that it never outlives it and keeps a
# pipe open), and speaks every BELUGA_HEARTBEAT_S seconds.
_progress_heartbeat() {
	local parent=$1 every=${BELUGA_HEARTBEAT_S:-60} waited=0 last tail log f
	trap - EXIT INT TERM
	set +e
	last=$(_progress_last "$_progress_name")
	while kill -0 "$parent" 2>/dev/null; do
		# sleep's output is not the pipe: a killed loop leaves nothing holding it
		sleep 1 >/dev/null 2>&1
		waited=$((waited + 1))
		[ $((waited % every)) -eq 0 ] || continue
		tail='' log=''
		for f in "${_progress_logs[@]}"; do
			[ -s "$f" ] && { [ -z "$log" ] || [ "$f" -nt "$log" ]; } && log=$f
		done
		if [ -n "$log" ]; then
			tail=$(tail -n 1 "$log" 2>/dev/null | tr -d '\r\n' | tr -c '[:print:]' ' ' | cut -c 1-100)
			tail="; $log: $tail"
		fi
		_progress_say "$_progress_name: running for $(_progress_span $waited)${last:+ (last time $(_progress_span "$last"))}$tail"
	done
}

progress_stage() {
	progress_end
	_progress_n=$((_progress_n + 1))
	_progress_name=$1
	shift
	_progress_logs=("$@")
	_progress_start=$(date +%s)
	_progress_say "stage $_progress_n: $_progress_name"
	_progress_heartbeat $$ &
	_progress_pid=$!
}

progress_end() {
	local took
	[ -n "$_progress_name" ] || return 0
	if [ -n "$_progress_pid" ]; then
		kill "$_progress_pid" 2>/dev/null || true
		wait "$_progress_pid" 2>/dev/null || true
	fi
	took=$(($(date +%s) - _progress_start))
	_progress_say "$_progress_name: done in $(_progress_span "$took")"
	_progress_remember "$_progress_name" "$took"
	_progress_name='' _progress_pid=''
	return 0
}
