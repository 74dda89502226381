#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Python overhead: a 64-key LOOKUP through the beluga binding against the same
loop in C through libbeluga (bench/python/lookup64.c), in the same run.

    overhead.py --device /dev/beluga --c-bin build/bench/python/lookup64 \
                --env guest-6.12 --out DIR [--rounds 5] [--samples 15] [--sample-ms 5]
    overhead.py --fake --c-bin build/bench/python/lookup64-fake ...   (host smoke)

Two operations, each all hits on a chain this run published in a namespace of
its own: "count" (count-only lookup) and "pin" (pinned lookup, then RELEASE of
the hits). A round runs the C program (SAMPLES samples of about SAMPLE_MS ms
each, operations per sample calibrated) and then the Python loop the same way;
the figure of a round is the ratio of the two medians, and the result is the
median of the rounds' ratios with their min and max. Goal: <= 1.5.

Only the real module gives the figure (run in the 6.12 bench guest). --fake
runs both sides against the in-process fake kernel of the host: a smoke check
that the bench works, recorded without a target so that it is never read as
the ratio.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

GOAL = 1.5


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="the Beluga device (default $BELUGA_DEVICE or /dev/beluga)")
    ap.add_argument("--c-bin", required=True, help="the C side (bench/python/lookup64.c)")
    ap.add_argument("--fake", action="store_true", help="both sides on the fake kernel (host smoke check)")
    ap.add_argument("--env", default="host", help="environment name in the records")
    ap.add_argument("--out", default=None, help="directory for pyoverhead-ENV.jsonl")
    ap.add_argument("--keys", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--sample-ms", type=float, default=5.0)
    return ap.parse_args()


def c_round(args, tag):
    cmd = [args.c_bin, "-s", str(args.samples), "-m", str(args.sample_ms), "-n", str(args.keys), "-t", str(tag)]
    if args.device:
        cmd += ["-d", args.device]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"overhead: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    r = json.loads(p.stdout)
    return statistics.median(r["count_ns"]), statistics.median(r["pin_ns"])


def py_samples(loop, samples, sample_ms):
    """Median ns per operation over samples of about sample_ms ms each;
    loop(iters) runs iters operations (the loop is inline, as in C, so no
    extra Python call per operation is counted)."""
    iters = 1
    while True:
        t0 = time.perf_counter_ns()
        loop(iters)
        dt = time.perf_counter_ns() - t0
        if dt >= sample_ms * 1e6 or iters >= 1 << 30:
            break
        iters *= 2
    out = []
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        loop(iters)
        out.append((time.perf_counter_ns() - t0) / iters)
    return statistics.median(out)


def main():
    args = parse()
    if args.fake:
        # before the extension loads: its fake kernel reads these once
        fake_dev = os.path.join(args.out or "/tmp", "fake-beluga-dev")
        os.makedirs(os.path.dirname(fake_dev), exist_ok=True)
        open(fake_dev, "a").close()
        os.environ.update(BELUGA_FAKE_KERNEL="1", BELUGA_FAKE_REGIONS="dax0.0:64M",
                          BELUGA_FAKE_BLOCK_SIZE="4096", BELUGA_DEVICE=fake_dev)
        args.device = fake_dev
    import beluga

    pool = beluga.Pool(args.device, writable=True) if args.device else beluga.Pool(writable=True)
    n = args.keys
    ns = (0xB0 << 56) ^ (os.getpid() << 16) ^ 0x9E11
    tokens = [(i * 2654435761 ^ ns) & 0xFFFFFFFF for i in range(n)]
    keys = bytes(beluga.hash_chain(tokens, 1))
    offsets = pool.alloc(n)
    pool.publish(ns, offsets, keys)
    hits, _ = pool.lookup(ns, keys)
    if hits != n:
        sys.exit(f"overhead: setup published {n} blocks but a lookup finds {hits}")

    lookup, release = pool.lookup, pool.release

    def loop_count(iters):
        for _ in range(iters):
            lookup(ns, keys)

    def loop_pin(iters):
        for _ in range(iters):
            _, offs = lookup(ns, keys, pin=True)
            release(offs)

    ratios = {"count": [], "pin": []}
    abs_ns = {("c", "count"): [], ("c", "pin"): [], ("python", "count"): [], ("python", "pin"): []}
    for rnd in range(args.rounds):
        c_count, c_pin = c_round(args, rnd + 1)
        p_count = py_samples(loop_count, args.samples, args.sample_ms)
        p_pin = py_samples(loop_pin, args.samples, args.sample_ms)
        for impl, op, v in (("c", "count", c_count), ("c", "pin", c_pin),
                            ("python", "count", p_count), ("python", "pin", p_pin)):
            abs_ns[(impl, op)].append(v)
        ratios["count"].append(p_count / c_count)
        ratios["pin"].append(p_pin / c_pin)

    recs = []
    base = {"section": "pyoverhead", "env": args.env}
    for (impl, op), vals in abs_ns.items():
        recs.append(dict(base, kind="op", name=f"lookup_{op}", impl=impl, n=n,
                         ns=round(statistics.median(vals), 1), min=round(min(vals), 1),
                         max=round(max(vals), 1), rounds=args.rounds))
    for op, vals in ratios.items():
        v = statistics.median(vals)
        r = dict(base, kind="ratio", name=f"python_over_c_lookup_{op}", n=n, value=round(v, 4),
                 min=round(min(vals), 4), max=round(max(vals), 4), rounds=args.rounds)
        if args.fake:
            r["note"] = "fake kernel on the host: a smoke check of the bench, not the figure"
        else:
            r.update(target="<=", goal=GOAL, met=int(v <= GOAL))
        recs.append(r)

    label = " (FAKE KERNEL, smoke check only: not the figure)" if args.fake else ""
    print(f"== Python overhead, {n}-key LOOKUP, {args.env}{label}: median of {args.rounds} rounds [min..max]")
    print(f"{'op':<7} {'C ns':>10} {'Python ns':>10} {'ratio':>7} {'min..max':>13}  goal <= {GOAL}")
    for op in ("count", "pin"):
        vals = ratios[op]
        print(f"{op:<7} {statistics.median(abs_ns[('c', op)]):>10.0f} "
              f"{statistics.median(abs_ns[('python', op)]):>10.0f} {statistics.median(vals):>7.2f} "
              f"{min(vals):>6.2f}..{max(vals):<6.2f}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"pyoverhead-{args.env}.jsonl"), "w") as f:
            for r in recs:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
