#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# bench/scale-misses.sh BELBENCH OUT_JSONL SIZE...
# Cache misses per key of the random-chain LOOKUP (scale's lookup64) on the
# portable core, counted rather than timed: belbench's scale section runs
# under callgrind's cache simulator with a fixed geometry (the D1 and LL
# below, whatever this CPU has), collecting inside worker_main only, so
# that filling the pool and calibrating are left out, and counting what the
# core target's LOOKUP (c_lookup) costs there, calls included: not the
# benchmark's loop, nor its copy of each chain's 64 keys out of its table
# of all keys (4 MiB at 256K blocks) into the worker's array. A caller has
# no such table: its keys are the ones it has just hashed, in its cache
# (counted with the copy, 0.24 LL misses a key more at 256K blocks). The
# keys looked up are the section's own count: reps x samples x 64 from its
# record.
#
# One JSON record per size to OUT_JSONL (kind "misses"), and, where the
# sizes are 1K and 256K blocks, the target record: LL misses per key at
# 256K blocks against the physical floor of one line per key (issue 19
# part 4: a random key in a table larger than the cache cannot cost less).
# Needs valgrind; without it, says so and writes a "missing" record.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 BELBENCH OUT_JSONL SIZE..." >&2; exit 2; }
bb=$1 out=$2
shift 2
d1=49152,12,64 ll=2097152,16,64
cache="D1 48 KiB 12-way, LL 2 MiB 16-way, 64-byte lines: the L1d and L2 of a core of the bench host, simulated by callgrind"
if ! command -v valgrind >/dev/null; then
	echo "scale-misses: SKIP: no valgrind (scripts/install-deps.sh installs it)" >&2
	printf '{"section":"scale","env":"host","kind":"missing","backend":"core-misses","why":"no valgrind"}\n' >"$out"
	exit 0
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
: >"$out"
for size in "$@"; do
	# Samples of 100 ms of the instrumented program (some thousands of
	# keys, also when other work slows the calibration: with 20 ms a busy
	# host once left 768 keys): enough that the first, cold lookups do
	# not weigh.
	valgrind --tool=callgrind --cache-sim=yes --D1=$d1 --LL=$ll \
		--collect-atstart=no --toggle-collect=worker_main \
		--callgrind-out-file="$t/cg.$size" \
		"$bb" --env host --samples 3 --sample-ms 100 --out "$t/res.$size" \
		scale --pool none --sizes "$size" --threads 1 --targets core \
		--ops lookup64 --repeat 1 >"$t/log.$size" 2>&1 ||
		{ tail -n 5 "$t/log.$size" >&2; echo "scale-misses: belbench under callgrind failed ($size blocks)" >&2; exit 1; }
	/usr/bin/python3 - "$t/cg.$size" "$t/res.$size/scale-host.jsonl" "$cache" >>"$out" <<'PY'
import json, re, subprocess, sys
cg, res, cache = sys.argv[1:]
# c_lookup's inclusive counts, from callgrind_annotate's per-function table
# ("." where a count is 0)
events = ["Ir", "D1mr", "D1mw", "DLmr", "DLmw"]
table = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--show=" + ",".join(events),
                        "--threshold=100", cg], capture_output=True, text=True, check=True).stdout
row = next((l for l in table.splitlines() if re.search(r":c_lookup \[", l)), None)
if row is None:
    sys.exit(f"scale-misses: no c_lookup in callgrind_annotate's table of {cg}")
vals = [0 if v == "." else int(v.replace(",", ""))
        for v in re.findall(r"(?:^|\s)([\d,]+|\.)(?=\s)", row.split(":c_lookup")[0])]
count = dict(zip(events, vals))
rec = next(json.loads(l) for l in open(res) if '"kind":"op"' in l)
keys = rec["reps"] * 3 * 64
print(json.dumps({"section": "scale", "env": "host", "kind": "misses", "backend": "core",
                  "op": "lookup64", "blocks": rec["blocks"], "keys": keys, "cache": cache,
                  "counted_in": "c_lookup",
                  "ir_per_key": count["Ir"] / keys,
                  "d1_per_key": (count["D1mr"] + count["D1mw"]) / keys,
                  "ll_per_key": (count["DLmr"] + count["DLmw"]) / keys}, separators=(",", ":")))
PY
done
# the target: LL misses per key at 256K blocks, the floor one line
/usr/bin/python3 - "$out" >"$t/target" <<'PY'
import json, sys
# (every record on one line without blanks, as belbench writes them:
# bench/report.sh reads them with awk)
m = {r["blocks"]: r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "misses"}
if 1024 in m and 262144 in m:
    v = m[262144]["ll_per_key"]
    print(json.dumps({"section": "scale", "env": "host", "kind": "ratio",
                      "name": "ll_misses_per_key", "backend": "core", "op": "lookup64",
                      "n": 262144, "value": v, "small_value": m[1024]["ll_per_key"],
                      "target": "<=", "goal": 1.0, "met": int(v <= 1.0)}, separators=(",", ":")))
PY
cat "$t/target" >>"$out"
