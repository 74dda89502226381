# SPDX-License-Identifier: GPL-2.0
"""The peers section of bench/RESULTS.md, from the records of bench/peers/peers.py.

Called by bench/gen-results.py; standard library only. Every figure and every
verdict comes from the records: a ratio is peer / Beluga round by round (meta)
or sample by sample (data), shown as median [min..max] (runs); "Beluga" wins
a figure when every run is above 1, the peer when every run is below 1, and
"neither" otherwise.
"""


def _ns(v):
    if v is None:
        return "-"
    if v >= 1e7:
        return f"{v / 1e6:,.1f} ms"
    return f"{v / 1000:,.1f} us" if v >= 1e4 else f"{v:,.0f} ns"


def _ratio(r):
    if r is None:
        return "-", "-"
    cell = f"{r['value']:.2f} [{r['run_min']:.2f}..{r['run_max']:.2f}] ({r['runs']})"
    if r["run_min"] > 1:
        who = "Beluga"
    elif r["run_max"] < 1:
        who = r["peer"]
    else:
        who = "neither"
    return cell, who


def _size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 and b % (1 << 20) == 0 else f"{b >> 10} KiB"


def section(recs):
    """Markdown lines of the peers section, or [] when the run has no peers records."""
    pr = [r for r in recs if r.get("section") == "peers"]
    if not pr:
        return []
    o = []
    w = o.append
    w("## Peers: Beluga beside Mooncake Store and LMCache's CPU backend (host)")
    w("")
    w("bench/peers/peers.py, one process per block size, on the host: the peers' servers started, "
      "warmed, measured and stopped by the bench on 127.0.0.1. Beluga is the portable core "
      "behind libbeluga's fake kernel in-process (no module, no system call): the host rows of "
      "the rest of this bench, not the kernel path. Ratios are peer / Beluga (above 1: Beluga "
      "is faster); `wins` is Beluga when every run is above 1, the peer when every run is below "
      "1. Not in this section yet: the end-to-end trace replay with engine processes, "
      "LMCache's remote backend, 2 clients.")
    w("")
    cfgs = [r for r in pr if r.get("kind") == "config"]
    if cfgs:
        seen = []
        for c in cfgs:
            for name, text in c["peers"].items():
                if (name, text) not in seen:
                    seen.append((name, text))
                    w(f"- **{name}** ({_size(c['block_bytes'])} blocks): {text}")
        netns = {x.get("netns") for x in cfgs}
        w(f"- network namespace: {', '.join(sorted(netns))} (private: a namespace of the run's own, "
          "the loopback and a veth pair with both ends inside; no: the host's)")
        w("")
    meta = [r for r in pr if r.get("part") == "meta"]
    lat = [r for r in meta if r.get("kind") == "lat"]
    if lat:
        w("### Metadata: a 64-key prefix lookup, all hits (per operation)")
        w("")
        w("| target | p50 | p99 | min | max | ops | p50 / Beluga's p50 | wins |")
        w("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in lat:
            rat = next((x for x in meta if x.get("kind") == "ratio" and x.get("peer") == r["target"]),
                       None)
            cell, who = _ratio(rat) if rat else ("reference", "-")
            w(f"| {r['target']} | {_ns(r['p50_ns'])} | {_ns(r['p99_ns'])} | {_ns(r['min_ns'])} | "
              f"{_ns(r['max_ns'])} | {r['ops']} | {cell} | {who} |")
        w("")
    data = [r for r in pr if r.get("part") == "data"]
    for bs in sorted({r["block_bytes"] for r in data}):
        d = [r for r in data if r["block_bytes"] == bs]
        xf = [r for r in d if r.get("kind") == "xfer"]
        if not xf:
            continue
        w(f"### Data: store and load of {_size(bs)} blocks (every loaded block checked byte for byte)")
        w("")
        w("| op | blocks | target | GB/s (p50) | time p50 [min..max] | time / Beluga's | wins |")
        w("|---|---:|---|---:|---|---:|---|")
        for op in ("store", "load"):
            for n in sorted({r["n"] for r in xf}):
                for r in (x for x in xf if x["op"] == op and x["n"] == n):
                    rat = next((x for x in d if x.get("kind") == "ratio" and x.get("op") == op and
                                x.get("n") == n and x.get("peer") == r["target"]), None)
                    cell, who = _ratio(rat) if rat else ("reference", "-")
                    w(f"| {op} | {n} | {r['target']} | {r['gbps_p50']:.2f} | {_ns(r['p50_ns'])} "
                      f"[{_ns(r['min_ns'])}..{_ns(r['max_ns'])}] ({r['samples']}) | {cell} | {who} |")
        w("")
    ratios = [r for r in pr if r.get("kind") == "ratio" and r.get("peer") != "memcpy"
              and not r["peer"].startswith("beluga")]
    if ratios:
        won = sum(1 for r in ratios if r["run_min"] > 1)
        lost = sum(1 for r in ratios if r["run_max"] < 1)
        w(f"Against the peers (memcpy and Beluga's own rows left out): Beluga is faster in every "
          f"run of {won} of {len(ratios)} figures, slower in every run of {lost}, and the runs "
          f"disagree in {len(ratios) - won - lost}.")
        w("")
    return o


def readme_rows(recs):
    """Rows of the README's results table (figure | measured | goal | verdict):
    each peer against Beluga on the 64-key lookup and on the largest load."""
    pr = [r for r in recs if r.get("section") == "peers" and r.get("kind") == "ratio"
          and r.get("peer") != "memcpy" and not r["peer"].startswith("beluga")]
    rows = []
    for r in pr:
        if r.get("part") == "meta":
            what = f"64-key lookup p50, {r['peer']} / {r['ref']}"
        elif r.get("op") == "load" and r.get("n") == 64:
            what = f"load of 64 {_size(r['block_bytes'])} blocks, {r['peer']} / Beluga KVStore"
        else:
            continue
        cell, who = _ratio(r)
        verdict = "Beluga faster in every run" if who == "Beluga" else \
            "Beluga slower in every run" if who == r["peer"] else "runs disagree"
        rows.append(f"| {r['env']}: {what} | {cell} | - | {verdict} |")
    return rows
