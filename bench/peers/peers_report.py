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
    w("## Peers: Beluga beside Mooncake Store and LMCache's backends (host)")
    w("")
    redis = any(r.get("target", "").startswith("lmcache-redis") for r in pr if r.get("part") != "e2e")
    w("bench/peers/peers.py, one process per block size, on the host: the peers' servers started, "
      "warmed, measured and stopped by the bench on 127.0.0.1. Beluga is the portable core "
      "behind libbeluga's fake kernel in-process (no module, no system call): the host rows of "
      "the rest of this bench, not the kernel path. Ratios are peer / Beluga (above 1: Beluga "
      "is faster); `wins` is Beluga when every run is above 1, the peer when every run is below "
      "1. LMCache's backends are measured through the calls its storage manager makes: the "
      "CPU backend in-process" + (", the remote backend (`lmcache-redis`) over a redis-server the "
                                  "bench starts on 127.0.0.1 without persistence." if redis else
                                  "; its remote backend is not in this run's metadata and data parts "
                                  "(a run from before they measured it, or without redis-server)."))
    w("")
    cfgs = [r for r in pr if r.get("kind") == "config" and "peers" in r]
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
        w("Clients: processes doing the lookup at once (with 2, each Beluga and LMCache CPU client "
          "has a store of its own, in-process; Mooncake's clients share its master"
          + (", lmcache-redis's the redis-server)." if redis else ")."))
        w("")
        w("| target | clients | p50 | p99 | min | max | ops | p50 / Beluga's p50 | wins |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in lat:
            clients = r.get("clients", 1)
            rat = next((x for x in meta if x.get("kind") == "ratio" and x.get("peer") == r["target"]
                        and x.get("clients", 1) == clients), None)
            cell, who = _ratio(rat) if rat else ("reference", "-")
            w(f"| {r['target']} | {clients} | {_ns(r['p50_ns'])} | {_ns(r['p99_ns'])} | {_ns(r['min_ns'])} | "
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
    o.extend(_e2e(pr))
    ratios = [r for r in pr if r.get("kind") == "ratio" and r.get("peer") not in ("memcpy", "recompute")
              and not r["peer"].startswith("beluga")]
    if ratios:
        won = sum(1 for r in ratios if r["run_min"] > 1)
        lost = sum(1 for r in ratios if r["run_max"] < 1)
        w(f"Against the peers (memcpy, recompute and Beluga's own rows left out): Beluga is faster in every "
          f"run of {won} of {len(ratios)} figures, slower in every run of {lost}, and the runs "
          f"disagree in {len(ratios) - won - lost}.")
        w("")
    return o


# The paper's headline (DESIGN.md): vLLM on H20 GPUs, Qwen3-32B, prompts whose
# KV is already in the pool, Beluga over CXL against Mooncake over RDMA.
PAPER_TTFT_LOWER = 0.896        # 89.6% lower TTFT: Mooncake's TTFT / Beluga's = 1 / (1 - 0.896)
PAPER_THROUGHPUT = 7.35         # Beluga's throughput / Mooncake's


def _median(xs):
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def _e2e(pr):
    """The end-to-end part's tables (bench/peers/e2e.py), or []."""
    e2e = [r for r in pr if r.get("part") == "e2e"]
    rows = [r for r in e2e if r.get("kind") == "e2e"]
    if not rows:
        return []
    o = []
    w = o.append
    cfg = next((r for r in e2e if r.get("kind") == "config"), {})
    w("### End to end: engine processes replaying the Mooncake trace")
    w("")
    w(f"bench/peers/e2e.py: the first {cfg.get('requests', '?')} requests of {cfg.get('trace', 'the trace')} "
      f"({cfg.get('distinct_blocks', '?')} distinct blocks), each trace block (512 tokens) standing "
      f"for one block of {_size(e2e[0]['block_bytes'])}. Per request: the prefix lookup, the load of "
      f"the hit blocks, the compute of the missed ones paced to "
      f"{cfg.get('kv_rate', 1.6e9) / 1e9:.1f} GB of KV per second of prefill (Qwen3-32B on an "
      "H100-class GPU; the GPU's time per byte, so per-call costs weigh more here than against "
      "real 128 MiB blocks), then the store of the new blocks (after the first token) and a byte "
      "check of every loaded block (outside the times). Engines run closed-loop; requests go to engines by their "
      "second block (prefix-affinity routing, the same for every store). `trace`: the requests "
      "from empty stores (the trace's own reuse); `warm`: the same requests again, all their "
      "blocks stored (the paper's setting). Figures are medians over rounds; ratios are "
      "peer / Beluga round by round (TTFT), Beluga / peer (requests per second), median "
      "[min..max] (rounds), above 1: Beluga better. The engines' paced compute sleeps, but "
      f"their copies, the peers' servers and the byte checks share this host's "
      f"{cfg.get('cpus', '?')} CPUs: with more engines than CPUs they also queue for a CPU.")
    w("")
    for name, text in cfg.get("stores", {}).items():
        w(f"- **{name}**: {text}")
    if cfg:
        w("")
    ratios = [r for r in e2e if r.get("kind") == "ratio"]

    def ratio(peer, engines, pas, what):
        return next((r for r in ratios if r["peer"] == peer and r["engines"] == engines
                     and r["pass"] == pas and r["what"] == what), None)

    stores = list(dict.fromkeys(r["store"] for r in rows))
    engines_all = sorted({r["engines"] for r in rows})
    for pas in ("warm", "trace"):
        w(f"#### `{pas}` pass")
        w("")
        w("| store | engines | hit ratio | TTFT p50 | TTFT p99 | req/s | TTFT p50: peer / Beluga | "
          "req/s: Beluga / peer |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|")
        for st in stores:
            for e in engines_all:
                sel = [r for r in rows if r["store"] == st and r["engines"] == e and r["pass"] == pas]
                if not sel:
                    continue
                tt = ratio(st, e, pas, "e2e-ttft_p50")
                rp = ratio(st, e, pas, "e2e-rps")
                ref = "reference" if st == "beluga" else "-"
                w(f"| {st} | {e} | {_median([r['hit_ratio'] for r in sel]):.3f} | "
                  f"{_ns(_median([r['ttft_p50_ns'] for r in sel]))} | "
                  f"{_ns(_median([r['ttft_p99_ns'] for r in sel]))} | "
                  f"{_median([r['rps'] for r in sel]):,.1f} | "
                  f"{_ratio(tt)[0] if tt else ref} | {_ratio(rp)[0] if rp else ref} |")
        w("")
    top = engines_all[-1]
    tt, rp = ratio("mooncake", top, "warm", "e2e-ttft_p50"), ratio("mooncake", top, "warm", "e2e-rps")
    if tt and rp:
        lower = 1 - 1 / tt["value"]
        w("| against Mooncake Store | here (warm, " + f"{top} engines) | the paper |")
        w("|---|---:|---:|")
        w(f"| TTFT | {lower:.1%} lower ({_ratio(tt)[0]}) | {PAPER_TTFT_LOWER:.1%} lower "
          f"({1 / (1 - PAPER_TTFT_LOWER):.1f}x) |")
        w(f"| throughput | {_ratio(rp)[0]}x | {PAPER_THROUGHPUT}x |")
        w("")
        if "beluga-local" in cfg.get("stores", {}):     # runs since 2026-12-03: one shared pool
            beluga = ("Beluga is the module's multi-host protocol run by the fake kernel in each "
                      "engine process over one pool in shared memory (no module, no system call, "
                      "no CXL memory; write-backs and invalidates of every block as on CXL)")
        else:
            beluga = ("Beluga is the portable core behind the fake kernel in each engine process "
                      "(a pool of its own per process, no module, no system call, no CXL memory)")
        w("Why they differ: the paper runs vLLM on H20 GPUs with Beluga's CXL pool against Mooncake "
          "over RDMA; here the engines are CPU processes whose compute is a paced sleep, Mooncake "
          f"moves every byte over TCP on the loopback (no RDMA NIC), and {beluga}, so the rows "
          "measure the stores' software paths on one CPU, not the hardware the paper compares.")
        w("")
    return o


def readme_rows(recs):
    """Rows of the README's results table (figure | measured | goal | verdict):
    each peer against Beluga on the 64-key lookup and on the largest load."""
    pr = [r for r in recs if r.get("section") == "peers" and r.get("kind") == "ratio"
          and r.get("peer") != "memcpy" and not r["peer"].startswith("beluga")]
    rows = []
    most = max([r["engines"] for r in pr if r.get("part") == "e2e"], default=0)
    for r in pr:
        if r.get("part") == "e2e":
            if (r["peer"] != "mooncake" or r.get("pass") != "warm" or r["what"] == "e2e-ttft_p99"
                    or r["engines"] != most):
                continue
            what = (f"end to end (warm), {r['engines']} engines, "
                    f"{'TTFT p50 mooncake / Beluga' if r['what'] == 'e2e-ttft_p50' else 'req/s Beluga / mooncake'}")
        elif r.get("part") == "meta":
            what = f"64-key lookup p50, {r.get('clients', 1)} client(s), {r['peer']} / {r['ref']}"
        elif r.get("op") == "load" and r.get("n") == 64:
            what = f"load of 64 {_size(r['block_bytes'])} blocks, {r['peer']} / Beluga KVStore"
        else:
            continue
        cell, who = _ratio(r)
        verdict = "Beluga faster in every run" if who == "Beluga" else \
            "Beluga slower in every run" if who == r["peer"] else "runs disagree"
        rows.append(f"| {r['env']}: {what} | {cell} | - | {verdict} |")
    return rows
