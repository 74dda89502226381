#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""End to end: engine processes replaying the Mooncake trace with their KV in a store.

    e2e.py --out DIR --run-dir DIR --trace FILE [--requests 60] [--block-size 256K]
           [--engines 1,2,4]
           [--stores beluga,beluga-local,mooncake,lmcache-cpu,lmcache-redis,recompute]
           [--rounds 2]

Run by scripts/bench.sh (section `peers`) with the `lmcache` engine venv's
python, as peers.py is (whose peer classes this reuses).

An engine is a process that takes its share of the trace's first --requests
requests and, for each, in order:
- looks up the request's blocks (the trace's hash_ids, already chained
  prefix identities: one key each) in the store: the leading run present;
- loads those blocks into its buffers;
- computes the missed blocks: writes each block's bytes and sleeps until
  its bytes / --kv-rate seconds have passed since the compute began, i.e.
  compute paced to a GPU's KV production rate (Qwen3-32B on an H100-class
  GPU: about 1.6 GB of KV per second of prefill), the GPU's work being
  off this CPU; the time to first token ends here (decode is not modeled);
- stores the computed blocks (after the first token, inside the request's
  service time);
- checks every loaded block byte for byte (after the store, outside
  the request's times; a mismatch aborts the run).

Each trace block (512 tokens) stands for one block of --block-size bytes:
the scale keeps a GPU's time per byte, not its time per request, so a
store's per-call costs weigh more here than against real 128 MiB blocks.

Requests go to engines by their second block's id (the first is the
system prompt most requests share): prefix-affinity routing, the same for
every store, so that an engine with a cache of its own loses almost no
hits (the run records every row's hit ratio).

Two passes per configuration, from empty stores: `trace` (the requests as
the trace has them, so the hits are the trace's own reuse) and `warm` (the
same requests again, every block already stored: the paper's setting,
prompts whose KV is in the pool). Each engine runs its share closed-loop;
requests per second are all requests over the longest engine's time
(its start to its end, less its byte checks; the engines start together).

The stores, for 1, 2 and 4 engines:
- beluga: one pool shared by all engines, as the paper's hosts share one
  CXL pool: each engine process is a host of a multi-host pool in one file
  on tmpfs, which libbeluga's fake kernel joins and serves with the
  module's own multi-host protocol (kmod/core/mh_*.c, through
  tests/userspace/fake_mh.c), formatted for as many hosts as engines (a
  partition each, large enough for the engine's blocks: nothing is
  evicted). The pool is not coherent in the protocol's eyes: KVStore
  writes back each block before PUBLISH and invalidates each block it
  loads, and the protocol's metadata lines are written back and
  invalidated, all with real cache-line instructions, although one
  machine's memory would not need them. Beluga's figure of record.
- beluga-local: each engine a pool of its own, the fake kernel's
  single-host core in its process (which one process keeps): what the
  module's one-host pool costs a call, less its system calls, without
  the shared pool's write-backs and invalidates; but no engine sees
  another's blocks. Beside `beluga`, it shows what sharing costs.
- mooncake: one Mooncake Store (master and metadata server on 127.0.0.1,
  the memory in a separate segment process, TCP transport) shared by all
  engines, each a client that mounts no memory.
- lmcache-cpu: LMCache's LocalCPUBackend, in-process: each engine its own
  cache (rows say so).
- lmcache-redis: LMCache's RemoteBackend (its RedisConnector) over one
  Debian redis-server on 127.0.0.1 (no persistence), shared by all engines;
  LMCache's puts are asynchronous, and a pass ends when they are readable.
- recompute: no store.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402  (bench/peers/peers.py: the peers' processes and clients)

STORES = ("beluga", "beluga-local", "mooncake", "lmcache-cpu", "lmcache-redis", "recompute")
SHARING = {"beluga": "one multi-host pool shared by every engine (each engine a host of it, the "
                     "module's multi-host protocol in the fake kernel, lines written back and "
                     "invalidated as on CXL), its file on tmpfs",
           "beluga-local": "per-process pool: each engine a pool of its own (the fake kernel's "
                           "single-host core, which one process keeps; no write-backs), its file "
                           "on tmpfs",
           "mooncake": "one store shared by every engine",
           "lmcache-cpu": "in-process: each engine its own cache",
           "lmcache-redis": "one redis-server shared by every engine",
           "recompute": "no store"}
STAMP = 8
# The shared pool's lease: generous, so that a loaded 2-CPU host does not
# starve a host's heartbeat thread for half of it (a host that does fences
# itself, and its engine fails).
CXL_LEASE_MS = 10000


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="directory for peers-e2e-ENV.jsonl")
    ap.add_argument("--run-dir", help="directory for the peers' pids and logs")
    ap.add_argument("--trace", help="the Mooncake trace (JSON lines with hash_ids)")
    ap.add_argument("--env", default="host-fake")
    ap.add_argument("--requests", type=int, default=60, help="the trace's first N requests")
    ap.add_argument("--block-size", type=peers.size_arg, default=256 << 10)
    ap.add_argument("--engines", default="1,2,4")
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--rounds", type=int, default=2, help="repetitions, store order rotated")
    ap.add_argument("--kv-rate", type=float, default=1.6e9, help="bytes of KV a second of prefill makes")
    ap.add_argument("--engine", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine is None:
        missing = [o for o in ("out", "run_dir", "trace") if getattr(args, o) is None]
        if missing:
            ap.error("needs " + ", ".join("--" + m.replace("_", "-") for m in missing))
        args.stores = args.stores.split(",")
        bad = set(args.stores) - set(STORES)
        if bad:
            ap.error(f"--stores: unknown {','.join(sorted(bad))}; name some of {','.join(STORES)}")
        args.engines = [int(e) for e in args.engines.split(",")]
    return args


def read_trace(path, n):
    reqs = []
    with open(path) as f:
        for line in f:
            if len(reqs) == n:
                break
            r = json.loads(line)
            if r.get("hash_ids"):
                reqs.append(r["hash_ids"])
    if not reqs:
        raise SystemExit(f"{path}: no request with hash_ids (see ../shared/data/README.md)")
    return reqs


def engine_of(hash_ids, engines):
    return (hash_ids[1] if len(hash_ids) > 1 else hash_ids[0]) % engines


# ---- the engine process -------------------------------------------------------

class Blocks:
    """Each trace block's bytes: a fixed random template with the block's
    id in its first and last 8 bytes, so that a loaded block is checked
    whole (the template) and for being the right one (the stamps)."""

    def __init__(self, size):
        self.size = size
        self.template = np.random.default_rng(7).integers(0, 256, size, np.uint8)

    def write(self, dst, hid):
        np.copyto(dst, self.template)
        stamp = np.frombuffer(np.int64(hid).tobytes(), np.uint8)
        dst[:STAMP] = stamp
        dst[-STAMP:] = stamp

    def check(self, buf, hid, store):
        stamp = np.frombuffer(np.int64(hid).tobytes(), np.uint8)
        if not (np.array_equal(buf[:STAMP], stamp) and np.array_equal(buf[-STAMP:], stamp)
                and np.array_equal(buf[STAMP:-STAMP], self.template[STAMP:-STAMP])):
            raise RuntimeError(f"{store}: trace block {hid} loaded with wrong bytes")


class Recompute:
    def keys(self, tag, hids):
        return hids

    def lookup(self, keys):
        return 0

    def load(self, keys, outs):
        raise AssertionError("recompute has nothing to load")

    def store(self, keys, blocks):
        pass

    def close(self):
        pass


class BelugaEngine(peers.Beluga):
    duplicates = 0

    def wait_for_partition(self, blocks, timeout=30):
        """A host allocates from the partitions it owns: its own once the
        host that formatted the pool let it go (a few heartbeats). It must
        hold `blocks` blocks, so that nothing is evicted."""
        deadline = time.monotonic() + timeout
        while (free := self.pool.stats()["free_blocks"]) < blocks:
            if free or time.monotonic() > deadline:
                raise RuntimeError(f"beluga: this engine's host owns {free} free blocks of the "
                                   f"shared pool, needs {blocks}")
            time.sleep(0.02)

    def keys(self, tag, hids):
        return [hashlib.blake2b(f"{tag}:{h}".encode(), digest_size=16).digest() for h in hids]

    def lookup(self, keys):
        return self.kv.lookup(b"".join(keys))

    def load(self, keys, outs):
        super().load(b"".join(keys), outs)

    def store(self, keys, blocks):
        r = self.kv.store(b"".join(keys), blocks=blocks, skip_present=False)
        self.duplicates += r.exists         # another engine stored it first
        if r.stored != len(blocks):
            raise RuntimeError(f"beluga stored {r.stored} of {len(blocks)} blocks (pool full?)")


class MooncakeEngine(peers.Mooncake):
    """A client of the run's Mooncake Store that mounts no memory."""

    OBJECT_ALREADY_EXISTS = -704    # mooncake-store's ErrorCode: another engine stored it first
    duplicates = 0

    def keys(self, tag, hids):
        return [f"{tag}:{h}" for h in hids]

    def store(self, keys, blocks):
        r = self.store_.batch_put_from(keys, [b.ctypes.data for b in blocks], [b.nbytes for b in blocks])
        self.duplicates += sum(1 for x in r if x == self.OBJECT_ALREADY_EXISTS)
        if any(x not in (0, self.OBJECT_ALREADY_EXISTS) for x in r):
            raise RuntimeError(f"Mooncake batch_put_from returned {r}")


class LMCacheEngine(peers.LMCacheCPU):
    def keys(self, tag, hids):
        return [self.Key(model_name=f"{self.model}/{tag}", world_size=1, worker_id=0,
                         chunk_hash=h, dtype=self.dtype) for h in hids]


def replay_pass(store, store_name, reqs, keys, views, blocks, rate):
    """One pass over an engine's requests (trace block ids, the store's keys
    for them); views: one block buffer per block of the widest request."""
    bs = blocks.size
    clock = time.monotonic_ns
    ttft, service, hits, total, checking, begin = [], [], 0, 0, 0, clock()
    for r, k in zip(reqs, keys):
        n = len(r)
        t0 = clock()
        h = store.lookup(k)
        if h:
            store.load(k[:h], views[:h])
        tc = clock()
        for i in range(h, n):
            blocks.write(views[i], r[i])
        due = tc + (n - h) * bs * 1e9 / rate
        now = clock()
        if now < due:
            time.sleep((due - now) / 1e9)
        t1 = clock()
        if h < n:
            store.store(k[h:], views[h:n])
        t2 = clock()
        for i in range(h):
            blocks.check(views[i], r[i], store_name)
        checking += clock() - t2
        ttft.append(t1 - t0)
        service.append(t2 - t0)
        hits += h
        total += n
    if hasattr(store, "flush"):
        store.flush()           # the pass ends when its stores are readable
    return {"begin": begin, "end": clock(), "ttft": ttft, "service": service, "hits": hits,
            "blocks": total, "requests": len(reqs), "duplicates": getattr(store, "duplicates", 0),
            "check_ns": checking}


class LMCacheRemoteEngine(LMCacheEngine, peers.LMCacheRemote):
    """peers.LMCacheRemote as an engine has it: its puts asynchronous, a
    pass ending when they are readable (flush()); lookups through the
    remote backend's batched_contains, as LMCache's storage manager makes
    them."""

    def __init__(self, block_size, blocks, url):
        super().__init__(block_size, blocks, url)
        self.pending = []

    def store(self, keys, blocks):
        super().store(keys, blocks, wait=False)
        self.pending.append(keys)

    def lookup(self, keys):
        return self.backend.batched_contains(keys)

    def flush(self, timeout=60):
        """Wait until every put submitted is readable (a pass's end)."""
        deadline = time.monotonic() + timeout
        for keys in self.pending:
            while self.backend.batched_contains(keys) != len(keys):
                if time.monotonic() > deadline or self.backend.put_failed_count:
                    raise RuntimeError(f"LMCache's remote puts did not complete in {timeout} s "
                                       f"({self.backend.put_failed_count} failed)")
                time.sleep(0.001)
        self.pending = []


def engine_main(spec):
    """--engine: one engine process; talks to the driver by lines on stdin/stdout."""
    s = json.loads(spec)
    bs, store_name = s["block_size"], s["store"]
    reqs = [r for r in read_trace(s["trace"], s["requests"]) if engine_of(r, s["engines"]) == s["index"]]
    distinct = len({h for r in reqs for h in r})
    widest = max(len(r) for r in reqs) if reqs else 1
    bufs = np.zeros(widest * bs, np.uint8)
    views = [bufs[i * bs:(i + 1) * bs] for i in range(widest)]
    if store_name == "beluga":
        store = BelugaEngine(bs, distinct + 16, shared=dict(
            path=s["cxl"], length=s["cxl_length"], host_id=s["index"], hosts=s["engines"],
            lease_ms=CXL_LEASE_MS))
        store.wait_for_partition(distinct)
    elif store_name == "beluga-local":
        store = BelugaEngine(bs, distinct + 16)
    elif store_name == "mooncake":
        store = MooncakeEngine.client(s["metadata"], s["master"], [bufs])
    elif store_name == "lmcache-cpu":
        store = LMCacheEngine(bs, distinct + 16)
    elif store_name == "lmcache-redis":
        store = LMCacheRemoteEngine(bs, widest + 16, s["redis_url"])
    else:
        store = Recompute()
    blocks = Blocks(bs)
    keys = [store.keys(s["tag"], r) for r in reqs]
    print("ready", flush=True)
    for pass_name in ("trace", "warm"):
        if sys.stdin.readline().strip() != "go":
            return
        out = replay_pass(store, store_name, reqs, keys, views, blocks, s["kv_rate"])
        print(json.dumps(dict(out, **{"pass": pass_name})), flush=True)
    # LMCache's backends leave threads that keep a process alive after
    # close(): close with a time limit, then leave (the results are out)
    closer = threading.Thread(target=store.close, daemon=True)
    closer.start()
    closer.join(10)
    sys.stdout.flush()
    os._exit(0 if not closer.is_alive() else 3)


# ---- the driver --------------------------------------------------------------

def shared_pool(args, reqs, engines, tag):
    """The file of Beluga's shared pool for one configuration, and its
    length: a partition per engine, each as large as the most blocks an
    engine stores (plus the pool's metadata)."""
    most = max(len({h for r in reqs if engine_of(r, engines) == i for h in r})
               for i in range(engines))
    blocks = engines * (most + 16)
    d = "/dev/shm" if os.path.isdir("/dev/shm") else None
    path = os.path.join(d or os.path.dirname(os.path.abspath(args.out)), f"beluga-e2e-{os.getpid()}-{tag}")
    return path, blocks * args.block_size + (8 << 20) + blocks * 512


def run_config(args, reqs, store, engines, tag, extra, procs):
    """Start `engines` engine processes on `store`, run both passes; their results."""
    spec = dict(extra, store=store, engines=engines, tag=tag, trace=args.trace, requests=args.requests,
                block_size=args.block_size, kv_rate=args.kv_rate)
    cxl = None
    if store == "beluga":
        cxl, spec["cxl_length"] = shared_pool(args, reqs, engines, tag)
        spec["cxl"] = cxl
    argvs = [[sys.executable, os.path.abspath(__file__), "--engine", json.dumps(dict(spec, index=i))]
             for i in range(engines)]
    try:
        return dict(zip(("trace", "warm"), peers.drive_workers(procs, f"engine-{tag}", argvs, 2)))
    finally:
        if cxl and os.path.exists(cxl):
            os.unlink(cxl)


def summarize(store, engines, rnd, pass_name, res):
    ttft = [t for r in res for t in r["ttft"]]
    reqs = sum(r["requests"] for r in res)
    # the byte checks are the bench's, not an engine's: out of each engine's time
    wall = max(r["end"] - r["begin"] - r["check_ns"] for r in res)
    return {"kind": "e2e", "store": store, "engines": engines, "round": rnd, "pass": pass_name,
            "sharing": SHARING[store], "requests": reqs,
            "ttft_p50_ns": statistics.median(ttft), "ttft_p99_ns": peers.pct(ttft, 0.99),
            "ttft_mean_ns": statistics.fmean(ttft), "rps": reqs / (wall / 1e9), "wall_ns": wall,
            "hit_ratio": sum(r["hits"] for r in res) / max(1, sum(r["blocks"] for r in res)),
            "duplicates": sum(r["duplicates"] for r in res)}


def write_plot_data(path, rows, engines):
    """bench/plots.sh's e2e.png: per number of engines, for each store in
    STORES order, the warm pass's TTFT p50 (ms) and requests per second,
    medians over rounds ("nan" where the run has no such row)."""
    with open(path, "w") as f:
        f.write("# engines " + " ".join(f"{s}_ttft_p50_ms {s}_rps" for s in STORES) + "\n")
        for e in engines:
            cols = [str(e)]
            for s in STORES:
                sel = [r for r in rows if r["store"] == s and r["engines"] == e and r["pass"] == "warm"]
                cols += ([f"{statistics.median(r['ttft_p50_ns'] for r in sel) / 1e6:.4f}",
                          f"{statistics.median(r['rps'] for r in sel):.2f}"] if sel else ["nan", "nan"])
            f.write(" ".join(cols) + "\n")


def main():
    args = parse()
    if args.engine is not None:
        engine_main(args.engine)
        return
    os.makedirs(args.out, exist_ok=True)
    reqs = read_trace(args.trace, args.requests)
    distinct = len({h for r in reqs for h in r})
    run_dir = os.path.join(args.run_dir, "e2e")
    procs = peers.Processes(run_dir)
    path = os.path.join(args.out, f"peers-e2e-{args.env}.jsonl")
    out = open(path, "w")
    base = {"section": "peers", "part": "e2e", "env": args.env, "block_bytes": args.block_size}

    def add(**kw):
        out.write(json.dumps(dict(base, **kw)) + "\n")
        out.flush()

    mooncake = None
    rows = []
    try:
        extra = {}
        if "mooncake" in args.stores:
            # the driver's client owns no memory; it clears the store between configurations
            # A read fails when its lease ends first: 500 ms was too short for a
            # 9 MB get on a loaded 2-CPU host. The store is emptied between
            # configurations, after the lease, so that none evicts.
            mooncake = peers.Mooncake(procs, args.block_size, distinct + 64, [], lease_ms=3000)
            extra = {"metadata": mooncake.metadata, "master": mooncake.master}
        if "lmcache-redis" in args.stores:
            redis = peers.RedisServer.start(procs)
            if redis is None:
                print("peers e2e: lmcache-redis SKIPPED: no redis-server on PATH "
                      "(scripts/install-deps.sh installs Debian's redis-server)", flush=True)
                args.stores.remove("lmcache-redis")
            else:
                extra["redis_url"] = redis.url
                SHARING["lmcache-redis"] += f"; {redis.version}: {redis.config}"
        add(kind="config", requests=len(reqs), distinct_blocks=distinct, kv_rate=args.kv_rate,
            trace=os.path.basename(args.trace), rounds=args.rounds, cpus=os.cpu_count(),
            stores={s: SHARING[s] + (f"; {mooncake.config}" if s == "mooncake" else "")
                    for s in args.stores},
            netns=os.environ.get("BELUGA_PEERS_NETNS", "no"))
        for rnd in range(args.rounds):
            k = rnd % len(args.stores)
            for store in args.stores[k:] + args.stores[:k]:
                for engines in args.engines:
                    tag = f"r{rnd}-{store}-{engines}"
                    passes = run_config(args, reqs, store, engines, tag, extra, procs)
                    for pass_name, res in passes.items():
                        row = summarize(store, engines, rnd, pass_name, res)
                        add(**row)
                        rows.append(row)
                        print(f"  {tag:24s} {pass_name:5s} TTFT p50 {row['ttft_p50_ns'] / 1e6:8.2f} ms "
                              f"p99 {row['ttft_p99_ns'] / 1e6:8.2f} ms  {row['rps']:7.1f} req/s  "
                              f"hits {row['hit_ratio']:.3f}", flush=True)
                    if store == "lmcache-redis":
                        redis.flushall()
                    if mooncake is not None and store == "mooncake":
                        time.sleep(mooncake.lease_ms / 1000)      # reads' leases end
                        mooncake.store_.remove_all()
        for store in args.stores:
            if store == "beluga" or "beluga" not in args.stores:
                continue
            for engines in args.engines:
                for pass_name in ("trace", "warm"):
                    def per_round(key):
                        got = {}
                        for r in rows:
                            if r["engines"] == engines and r["pass"] == pass_name:
                                got.setdefault(r["round"], {})[r["store"]] = r[key]
                        return [v[store] / v["beluga"] for v in got.values()]
                    for what, key in (("ttft_p50", "ttft_p50_ns"), ("ttft_p99", "ttft_p99_ns"),
                                      ("rps", "rps")):
                        rr = per_round(key)
                        if what == "rps":           # above 1: Beluga faster, as every other ratio
                            rr = [1 / x for x in rr]
                        add(**{"kind": "ratio", "what": f"e2e-{what}", "peer": store, "ref": "beluga",
                               "engines": engines, "pass": pass_name, "value": statistics.median(rr),
                               "run_min": min(rr), "run_max": max(rr), "runs": len(rr)})
        write_plot_data(os.path.join(args.out, f"peers-e2e-{args.env}.dat"), rows, args.engines)
        procs.check()
    finally:
        if mooncake is not None:
            mooncake.close()
        procs.stop()
        out.close()
    print(f"peers e2e: wrote {path}; pids and logs in {run_dir}")


if __name__ == "__main__":
    main()
