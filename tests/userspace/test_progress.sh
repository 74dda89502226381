#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
#
# Progress on long steps.
#   belugactl attach, against the fake kernel, whose ATTACH takes a while and
#   writes the pool's sysfs "attaching" in a fake tree as the module does: a
#   line rewritten in place on a terminal, JSON lines with --json, nothing
#   otherwise, and nothing for an attach that is over within a second.
#   scripts/progress.sh, as make test and make demo use it: a line per stage
#   with its time and a heartbeat on stderr, stdout (the TAP stream and its
#   summary line) untouched, and no heartbeat left behind by a script that ends
#   or is killed.
#
# Usage: tests/userspace/test_progress.sh BUILD_DIR   (userspace/build/check)
set -u

bin=${1:?usage: test_progress.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
fctl=$bin/belugactl-fake

tmp=$(mktemp -d /tmp/beluga-progress.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=../lib/tap.sh
. "$here/../lib/tap.sh"

have_python=0
command -v python3 >/dev/null 2>&1 && have_python=1

# ---- belugactl attach ---------------------------------------------------------
"$bin/test_sysfs" --make-tree "$tmp/sys"
mkdir -p "$tmp/sys/class/misc/beluga" "$tmp/devroot"
: >"$tmp/beluga"
attaching=$tmp/sys/class/misc/beluga/attaching
# fake_attach MS CMD...: CMD against a fresh fake pool whose ATTACH takes MS ms
fake_attach() {
	local ms=$1
	shift
	env BELUGA_FAKE_KERNEL=1 BELUGA_FAKE_BLOCK_SIZE=2097152 BELUGA_DEVICE="$tmp/beluga" \
		BELUGA_SYSFS_ROOT="$tmp/sys" BELUGA_DEV_ROOT="$tmp/devroot" BELUGA_RUN_DIR="$tmp/run" \
		BELUGA_FAKE_ATTACHING="$attaching" BELUGA_FAKE_ATTACH_MS="$ms" "$@"
}

# Not a terminal, --json: progress records while the fake zeroes, then the result.
fake_attach 2000 "$fctl" attach --json dax0.0 >"$tmp/json.out" 2>"$tmp/json.err" </dev/null
rc=$?
if [ $have_python -eq 0 ]; then
	skip "attach --json: progress lines, then the result" "python3 not installed"
elif [ $rc -eq 0 ] && [ ! -s "$tmp/json.err" ] && python3 - "$tmp/json.out" <<'EOF'
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
prog, last = recs[:-1], recs[-1]
assert len(prog) >= 2, f"{len(prog)} progress records"
assert all(r["event"] == "progress" and r["name"] == "dax0.0" for r in prog), prog
assert all(r["length"] == 256 << 20 and 0 <= r["done"] < r["length"] for r in prog), prog
done = [r["done"] for r in prog]
assert done == sorted(done) and done[0] < done[-1], done
assert last == {"event": "attached", "name": "dax0.0", "region_id": 0, "nr_blocks": 128,
                "block_size": 2 << 20, "first_offset": 0}, last
EOF
then
	ok "attach --json: progress lines while the module zeroes, DONE rising, then the result"
else
	not_ok "attach --json: progress lines, then the result (exit $rc)"
	sed 's/^/#   /' "$tmp/json.out" "$tmp/json.err" | head -10
fi

# Not a terminal, no --json (a unit, a log): exactly what attach printed before.
out=$(fake_attach 1600 "$fctl" attach dax0.0 2>"$tmp/quiet.err" </dev/null)
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$tmp/quiet.err" ] &&
	[ "$out" = "attached dax0.0: region 0, 128 blocks of 2 MiB (256 MiB) at offset 0" ]; then
	ok "attach without a terminal: no progress, the one result line"
else
	not_ok "attach without a terminal: no progress (exit $rc, stdout '$out', stderr '$(head -c 200 "$tmp/quiet.err")')"
fi

# On a terminal (script(1) gives it one): a line rewritten in place, erased at the end.
if ! command -v script >/dev/null 2>&1; then
	skip "attach on a terminal shows progress" "script(1) (bsdutils) not installed"
	skip "attach on a terminal: a quick attach shows none" "script(1) (bsdutils) not installed"
else
	# on_tty MS ARGS...: belugactl-fake attach ARGS on a pseudo-terminal
	on_tty() {
		local ms=$1 cmd
		shift
		printf -v cmd '%q ' "$fctl" attach "$@"
		fake_attach "$ms" script -qec "$cmd" /dev/null </dev/null | tr '\r' '\n'
	}
	out=$(on_tty 2500 dax0.0)
	if grep -qE '^.\[Kbelugactl attach: dax0\.0: zeroing [0-9.]+ [KMG]?i?B of 256 MiB \([0-9]+%\), [0-9]+ s' <<<"$out" &&
		grep -qF 'attached dax0.0: region 0, 128 blocks of 2 MiB' <<<"$out" &&
		[ "$(grep -c 'zeroing' <<<"$out")" -ge 2 ]; then
		ok "attach on a terminal: a progress line on stderr, rewritten as the module zeroes, then the result"
	else
		not_ok "attach on a terminal shows progress"
		sed 's/^/#   /' <<<"$out" | cat -v | head -10
	fi
	out=$(on_tty 300 dax0.0)
	if ! grep -q 'zeroing' <<<"$out" && grep -qF 'attached dax0.0' <<<"$out"; then
		ok "attach on a terminal: an attach that takes under a second shows no progress"
	else
		not_ok "attach on a terminal: a quick attach shows none"
		sed 's/^/#   /' <<<"$out" | cat -v | head -10
	fi
	out=$(on_tty 2500 --node 1 --size 64M)
	if grep -qE 'belugactl attach: node1: allocating [0-9.]+ [KMG]?i?B of 64 MiB' <<<"$out"; then
		ok "attach --node on a terminal: the node's allocation, by region name"
	else
		not_ok "attach --node on a terminal: the node's allocation, by region name"
		sed 's/^/#   /' <<<"$out" | cat -v | head -10
	fi
fi

# ---- scripts/progress.sh ------------------------------------------------------
# A script shaped like scripts/test.sh: TAP on stdout, a summary line last.
cat >"$tmp/stages.sh" <<EOF
#!/bin/bash
set -euo pipefail
. "$top/scripts/progress.sh"
progress_init "make test" "$tmp/history"
progress_stage "first stage" "$tmp/old.log" "$tmp/stage.log"
echo "ok 1 - one"
for i in 1 2 3; do echo "building part \$i" >>"$tmp/stage.log"; sleep 1; done
progress_stage "second stage"
echo "ok 2 - two"
# (its own output elsewhere: only the heartbeat could hold the pipe then)
[ "\${1:-}" != hang ] || sleep 30 >/dev/null 2>&1
progress_end
echo "2 passed, 0 failed, 0 skipped"
EOF
chmod +x "$tmp/stages.sh"
: >"$tmp/stage.log"
# a second log the stage names, written before it starts: the heartbeat shows the newer
echo "an old line" >"$tmp/old.log"
touch -d '1 hour ago' "$tmp/old.log"
BELUGA_HEARTBEAT_S=1 "$tmp/stages.sh" >"$tmp/stages.out" 2>"$tmp/stages.err"
rc=$?
if [ $rc -eq 0 ] && [ "$(cat "$tmp/stages.out")" = "$(printf 'ok 1 - one\nok 2 - two\n2 passed, 0 failed, 0 skipped')" ]; then
	ok "progress.sh: stdout is the TAP stream alone, its summary line last"
else
	not_ok "progress.sh: stdout is the TAP stream alone (exit $rc: $(tr '\n' '|' <"$tmp/stages.out"))"
fi
if [ -s "$tmp/stages.err" ] && ! grep -qv '^# \[make test [0-9]*:[0-9][0-9]\] ' "$tmp/stages.err" &&
	grep -q '\] stage 1: first stage$' "$tmp/stages.err" &&
	grep -q '\] first stage: done in [0-9] s$' "$tmp/stages.err" &&
	grep -q '\] stage 2: second stage$' "$tmp/stages.err" &&
	grep -q '\] second stage: done in [0-9] s$' "$tmp/stages.err"; then
	ok "progress.sh: a line per stage on stderr, as a TAP comment, with the time since the start and the stage's duration"
else
	not_ok "progress.sh: a line per stage on stderr, as TAP comments"
	sed 's/^/#   /' "$tmp/stages.err" | head -10
fi
if grep -q '\] first stage: running for [0-9] s; .*stage.log: building part [0-9]$' "$tmp/stages.err"; then
	ok "progress.sh: a heartbeat while a stage runs, with the last line of the log written last"
else
	not_ok "progress.sh: a heartbeat while a stage runs, with the last line of the log written last"
	sed 's/^/#   /' "$tmp/stages.err" | head -10
fi
BELUGA_HEARTBEAT_S=1 "$tmp/stages.sh" >/dev/null 2>"$tmp/again.err"
if grep -q '\] first stage: running for [0-9] s (last time [0-9] s)' "$tmp/again.err"; then
	ok "progress.sh: a heartbeat says how long the stage took last time"
else
	not_ok "progress.sh: a heartbeat says how long the stage took last time"
	sed 's/^/#   /' "$tmp/again.err" | head -10
fi

# The heartbeat never holds a pipe open after its script: neither when the script
# ends nor when it is killed (SIGKILL: no trap runs).
t0=$(date +%s)
BELUGA_HEARTBEAT_S=1 "$tmp/stages.sh" 2>&1 | cat >/dev/null
took=$(($(date +%s) - t0))
if [ $took -le 6 ]; then
	ok "progress.sh: a pipe from the script closes when it ends ($took s for a 3 s script)"
else
	not_ok "progress.sh: a pipe from the script closes when it ends (took $took s for a 3 s script)"
fi
t0=$(date +%s)
{
	BELUGA_HEARTBEAT_S=1 "$tmp/stages.sh" hang 2>&1 &
	victim=$!
	sleep 4
	kill -KILL "$victim"
} | cat >/dev/null
took=$(($(date +%s) - t0))
if [ $took -le 7 ]; then
	ok "progress.sh: a pipe from a script killed mid-stage closes within seconds ($took s)"
else
	not_ok "progress.sh: a pipe from a script killed mid-stage closes within seconds (took $took s)"
fi

# make test and make demo use it: a stage line before each stage, the end before the summary.
for s in test demo; do
	f=$top/scripts/$s.sh
	stages=$(grep -c '^progress_stage ' "$f")
	if grep -q '^\. scripts/progress\.sh$' "$f" && [ "$stages" -ge 4 ] && grep -q '^progress_end$' "$f"; then
		ok "scripts/$s.sh marks its stages with scripts/progress.sh ($stages stages)"
	else
		not_ok "scripts/$s.sh marks its stages with scripts/progress.sh ($stages progress_stage lines)"
	fi
done
tap_done
