#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Beluga beside the stores a user would run instead, measured in one run.

    peers.py --parts meta,data --out DIR --run-dir DIR [--block-size 16K] [--rounds 5] [--ops 200]
    peers.py --parts data --out DIR --run-dir DIR --block-size 4M [--counts 1,16,64] [--samples 7]

Run by scripts/bench.sh (section `peers`) with the `lmcache` engine venv's
python (LMCache 0.5.6 and Mooncake Store, tests/engines/lmcache.lock) and
PYTHONPATH holding the fake-kernel binding (userspace/build/python-fake) and
bench/python: Beluga here is the portable core in-process behind libbeluga's
fake kernel (a memfd mapping, no system call), as every host row of the bench.

The peers, each started, warmed, measured and stopped by this script:
- Mooncake Store: Mooncake's HTTP metadata server (its
  mooncake_http_metadata_server, bound to 127.0.0.1), mooncake_master (RPC
  and admin on 127.0.0.1), a second process that holds the store's memory
  (a MooncakeDistributedStore client that mounts the global segment), and
  the measuring client in this process (global segment 0, so that every
  byte crosses the TCP transport to the segment holder, as in a deployment
  with a dedicated cache tier). Process ids in RUN_DIR/pids, logs in
  RUN_DIR/*.log.
- LMCache: its LocalCPUBackend (the CPU DRAM tier every LMCache user has),
  in this process, through the calls LMCache's storage manager makes.
- LMCache's remote backend (lmcache-redis): its RemoteBackend with the
  RedisConnector (remote_url redis://, naive serde) in this process, over
  Debian's redis-server on 127.0.0.1 (a free port, no persistence; pid and
  log in RUN_DIR), through the same storage-manager calls. Skipped, saying
  so, where there is no redis-server.

Parts (one process may run both, which saves starting LMCache and Mooncake twice):
- meta: a 64-key prefix lookup, all hits. Beluga: KVStore.lookup (the layer
  engines call) and the raw binding's Pool.lookup; Mooncake:
  batch_is_exist through its master; LMCache (both backends): contains()
  key by key until the first miss (the synchronous path; the remote
  backend's batched_contains is this loop for redis), and
  batched_async_contains (the asynchronous one: driven without an event
  loop for the CPU backend, awaited on LMCache's event loop for the remote
  one, whose connector runs there). Each operation is timed
  on its own; targets take turns in blocks of --ops operations, in an order
  rotated every round. Per target: p50, p99, min, max of all operations;
  per peer: p50 / Beluga's p50 round by round (median, min, max).
- data: store and load of 1, 16 and 64 blocks of --block-size bytes
  through each peer's real client, against Beluga's mapping (KVStore.store,
  KVStore.load) and against memcpy of the same blocks, one by one, into
  and out of a shared mapping of a file beside the fake kernel's pool
  file, the same medium (lmcache-redis: a store ends when LMCache's asynchronous puts
  have completed; a load is batched_get_blocking). Fresh keys for every
  store; every loaded block is compared byte
  for byte with what was stored (a mismatch aborts the run); a sample's keys
  are removed at the peer's next turn, outside the timing, so that no store
  evicts.
"""

import argparse
import hashlib
import json
import mmap
import os
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from fake_pool import use_fake_kernel, use_fake_shared_pool  # noqa: E402

KEYS = 64


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", required=True, help="meta, data or meta,data")
    ap.add_argument("--out", required=True, help="directory for peers-*-ENV.jsonl")
    ap.add_argument("--run-dir", required=True, help="directory for the peers' pids and logs")
    ap.add_argument("--env", default="host-fake")
    ap.add_argument("--block-size", type=size_arg, default=16 << 10)
    ap.add_argument("--counts", default="1,16,64")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=200, help="meta: operations per target per round")
    ap.add_argument("--samples", type=int, default=7, help="data: samples per count")
    ap.add_argument("--clients", default="1,2", help="meta: processes doing the lookup at once")
    ap.add_argument("--segment-host", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lookup-client", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.parts = args.parts.split(",")
    if not set(args.parts) <= {"meta", "data"}:
        ap.error(f"--parts {','.join(args.parts)}: name meta, data or both")
    return args


# ---- the peers' processes --------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """The peers' server processes: started with their logs in run_dir,
    their pids listed in run_dir/pids, stopped by pid (TERM, then KILL)."""

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.procs = []
        os.makedirs(run_dir, exist_ok=True)

    def start(self, name, argv, env=None):
        log = open(os.path.join(self.run_dir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=self.run_dir, env=env, start_new_session=True)
        log.close()
        self.procs.append((name, p))
        with open(os.path.join(self.run_dir, "pids"), "a") as f:
            f.write(f"{name} {p.pid} {' '.join(argv)}\n")
        return p

    def check(self):
        for name, p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{name} (pid {p.pid}) exited with status {p.returncode}: "
                                   f"see {os.path.join(self.run_dir, name + '.log')}")

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            with open(os.path.join(self.run_dir, "pids"), "a") as f:
                f.write(f"{name} {p.pid} stopped, status {p.returncode}\n")
        self.procs = []


def drive_workers(procs, name, argvs, phases):
    """Run worker processes in step: start one per argv (stderr in
    run_dir/NAME-I.log), wait for each one's first line (ready), then for
    each of @phases write "go" to all and read one JSON line from each;
    then close their stdin and expect them to exit 0. Returns a list per
    phase of the workers' answers."""
    workers = []
    try:
        for i, argv in enumerate(argvs):
            with open(os.path.join(procs.run_dir, f"{name}-{i}.log"), "w") as log:
                workers.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=log, text=True))

        def lines():
            got = []
            for p in workers:
                while not select.select([p.stdout], [], [], 1.0)[0] and p.poll() is None:
                    procs.check()
                line = p.stdout.readline()
                if not line:
                    raise RuntimeError(f"{name} (pid {p.pid}) exited with status {p.wait()}: "
                                       f"see {procs.run_dir}/{name}-*.log")
                got.append(line)
            return got
        lines()
        out = []
        for _ in range(phases):
            for p in workers:
                p.stdin.write("go\n")
                p.stdin.flush()
            out.append([json.loads(x) for x in lines()])
        for p in workers:
            p.stdin.close()
            if p.wait(60) != 0:
                raise RuntimeError(f"{name} (pid {p.pid}) exited with status {p.returncode}: "
                                   f"see {procs.run_dir}/{name}-*.log")
        return out
    finally:
        for p in workers:
            if p.poll() is None:
                p.kill()
                p.wait()


def wait_port(port, what, procs, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s "
                       f"(logs in {procs.run_dir})")


def listening_sockets():
    """`ss -ltnp` of the moment: where each process listens (kept in the run dir)."""
    try:
        return subprocess.run(["ss", "-ltnp"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"ss failed: {e}\n"


# ---- the targets -------------------------------------------------------------

def bench_layout(block_size):
    """A KV layout whose engine block is exactly block_size bytes (16 tokens,
    float16): the DESIGN's Qwen3-32B block at 4 MiB, a small model below."""
    from beluga.layout import BlockLayout, ModelSpec
    if block_size == 4 << 20:
        spec = ModelSpec(model="Qwen/Qwen3-32B", num_layers=64, num_kv_heads=8, head_dim=128)
    else:
        per_token = block_size // 16 // 2      # bytes per token / float16
        if block_size % (16 * 2 * 2 * 16) or per_token % (2 * 16):
            raise SystemExit(f"--block-size {block_size}: use a multiple of 1 KiB")
        spec = ModelSpec(model="bench/small", num_layers=per_token // (2 * 16), num_kv_heads=1,
                         head_dim=16)
    return spec


class Beluga:
    name = "beluga"
    # the meta part's targets: (row, method)
    lookups = (("KVStore.lookup", "lookup"), ("Pool.lookup (binding)", "raw_lookup"))

    def __init__(self, block_size, blocks, shared=None):
        """A pool of `blocks` blocks of its own, or with `shared` (the keyword
        arguments of use_fake_shared_pool() but the block size) this process
        as a host of the multi-host pool in that file."""
        # The fake kernel's pool is a shared mapping of its device file: on
        # /tmp (a disk file system here) every first store of a page also
        # dirties a file page for writeback, which halved the end-to-end
        # throughput of stores; CXL memory is memory, so the file is on tmpfs.
        if os.path.isdir("/dev/shm"):
            tempfile.tempdir = "/dev/shm"
        if shared:
            self.device = use_fake_shared_pool(block_size=block_size, **shared)
        else:
            self.device = use_fake_kernel(f"dax0.0:{max(64, blocks * block_size >> 20)}M",
                                          block_size)
        import beluga
        from beluga.layout import BlockLayout
        from beluga.store import KVStore
        self.beluga = beluga
        self.pool = beluga.Pool(writable=True)
        spec = bench_layout(block_size)
        self.kv = KVStore(self.pool, BlockLayout(spec, self.pool.block_size), salt="peers-bench")
        if self.kv.layout.block_bytes != block_size or self.kv.layout.parts != 1:
            raise RuntimeError(f"layout of {self.kv.layout.block_bytes} bytes for {block_size}")
        self.version = getattr(beluga, "__version__", "?")

    @staticmethod
    def keys(tag, n):
        return b"".join(hashlib.blake2b(f"{tag}:{i}".encode(), digest_size=16).digest()
                        for i in range(n))

    def store(self, keys, blocks):
        r = self.kv.store(keys, blocks=blocks)
        if r.stored != len(blocks):
            raise RuntimeError(f"beluga stored {r.stored} of {len(blocks)} blocks: {r}")

    def load(self, keys, outs):
        r = self.kv.load(keys, out=outs)
        if r.loaded != len(outs):
            raise RuntimeError(f"beluga loaded {r.loaded} of {len(outs)} blocks")

    def remove(self, keys):
        for i in range(0, len(keys), 16):
            self.kv.evict_block(keys[i:i + 16])

    def lookup(self, keys):
        return self.kv.lookup(keys)

    def raw_lookup(self, keys):
        hits, _ = self.pool.lookup(self.kv.ns.value, keys, pin=False)
        return hits

    def close(self):
        """Remove the pool's file now: the worker processes leave by
        os._exit, without the atexit hook that would (its pages stay
        until the mapping goes with the process)."""
        shutil.rmtree(os.path.dirname(self.device), True)


class Mooncake:
    name = "mooncake"
    lookups = (("batch_is_exist", "lookup"),)

    def __init__(self, procs, block_size, blocks, bufs, batch_blocks=None, lease_ms=None):
        """A store of @blocks blocks, its reads' leases @lease_ms long, or
        long enough for a batch of @batch_blocks (default: @blocks)."""
        import importlib.metadata as md
        from mooncake.store import MooncakeDistributedStore
        self.version = md.version("mooncake-transfer-engine-non-cuda")
        bindir = os.path.dirname(sys.executable)
        meta_port, rpc_port, admin_port = free_port(), free_port(), free_port()
        # The master's own HTTP metadata server (--enable_http_metadata_server)
        # listens on 0.0.0.0 whatever --http_metadata_server_host says (0.3.13.post1):
        # Mooncake's standalone one takes --host.
        procs.start("mooncake-metadata", [os.path.join(bindir, "mooncake_http_metadata_server"),
                                          "--host", "127.0.0.1", "--port", str(meta_port)])
        wait_port(meta_port, "mooncake_http_metadata_server", procs)
        # A read leases an object (it cannot be removed or evicted until the
        # lease ends; 10 s by default) and fails when the lease ends before
        # the transfer does. The bench removes each sample's keys at the
        # peer's next turn: the lease is short, so that the wait is, but long
        # enough for a get of every block at 125 MB/s (a loaded machine).
        self.lease_ms = lease_ms or max(500, (batch_blocks or blocks) * block_size // 125000)
        procs.start("mooncake-master", [os.path.join(bindir, "mooncake_master"),
                                        "--rpc_address=127.0.0.1", f"--rpc_port={rpc_port}",
                                        "--metrics_host=127.0.0.1", f"--metrics_port={admin_port}",
                                        "--enable_metric_reporting=false",
                                        f"--default_kv_lease_ttl={self.lease_ms}"])
        wait_port(rpc_port, "mooncake_master", procs)
        self.metadata = f"http://127.0.0.1:{meta_port}/metadata"
        self.master = f"127.0.0.1:{rpc_port}"
        self.segment = max(256 << 20, 2 * blocks * block_size + (64 << 20))
        ready = os.path.join(procs.run_dir, "mooncake-segment.ready")
        procs.start("mooncake-segment", [sys.executable, os.path.abspath(__file__), "--parts", "meta",
                                         "--out", procs.run_dir, "--run-dir", procs.run_dir,
                                         "--segment-host",
                                         json.dumps([self.metadata, self.master, self.segment, ready])])
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            procs.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Mooncake segment holder did not come up in 60 s "
                                   f"(see {procs.run_dir}/mooncake-segment.log)")
            time.sleep(0.1)
        self.connect(bufs)
        self.config = (f"TCP transport; HTTP metadata server and master on 127.0.0.1; store memory "
                       f"in a separate client process (global segment {self.segment >> 20} MiB); "
                       f"the measuring client mounts none (every byte crosses TCP); "
                       f"lease {self.lease_ms} ms")

    def connect(self, bufs):
        """This process's client of the store, mounting no memory, with
        @bufs registered for batch_put_from / batch_get_into."""
        from mooncake.store import MooncakeDistributedStore
        self.store_ = MooncakeDistributedStore()
        rc = self.store_.setup("127.0.0.1", self.metadata, 0, 16 << 20, "tcp", "", self.master)
        if rc != 0:
            raise RuntimeError(f"MooncakeDistributedStore.setup returned {rc}")
        for b in bufs:
            rc = self.store_.register_buffer(b.ctypes.data, b.nbytes)
            if rc != 0:
                raise RuntimeError(f"Mooncake register_buffer returned {rc}")

    @classmethod
    def client(cls, metadata, master, bufs):
        """A client of a store another process started (its metadata URL
        and master address), starting nothing."""
        self = cls.__new__(cls)
        self.metadata, self.master = metadata, master
        self.connect(bufs)
        return self

    @staticmethod
    def keys(tag, n):
        return [f"{tag}:{i}" for i in range(n)]

    def store(self, keys, blocks):
        r = self.store_.batch_put_from(keys, [b.ctypes.data for b in blocks], [b.nbytes for b in blocks])
        if any(x != 0 for x in r):
            raise RuntimeError(f"Mooncake batch_put_from returned {r}")

    def load(self, keys, outs):
        r = self.store_.batch_get_into(keys, [b.ctypes.data for b in outs], [b.nbytes for b in outs])
        if any(x != b.nbytes for x, b in zip(r, outs)):
            raise RuntimeError(f"Mooncake batch_get_into returned {r}")

    OBJECT_HAS_LEASE = -706         # mooncake-store's ErrorCode: a read's lease still runs

    def remove(self, keys):
        """Remove keys, waiting out their leases (a batch may be removed in
        part: the keys removed leave the batch, the leased ones are retried)."""
        deadline = time.monotonic() + 10
        while keys:
            r = self.store_.batch_remove(keys)
            if any(x not in (0, self.OBJECT_HAS_LEASE) for x in r) or time.monotonic() > deadline:
                raise RuntimeError(f"Mooncake batch_remove returned {r} for {len(keys)} keys")
            keys = [k for k, x in zip(keys, r) if x == self.OBJECT_HAS_LEASE]
            if keys:
                time.sleep(0.002)

    def lookup(self, keys):
        hits = 0
        for x in self.store_.batch_is_exist(keys):
            if x != 1:
                break
            hits += 1
        return hits

    def close(self):
        self.store_.close()


def segment_host(spec):
    """--segment-host: the process that holds Mooncake Store's memory."""
    from mooncake.store import MooncakeDistributedStore
    metadata, master, segment, ready = json.loads(spec)
    # blocked, so that sigwait takes them and the store unmounts its segment
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", metadata, segment, 16 << 20, "tcp", "", master)
    if rc != 0:
        sys.exit(f"segment holder: setup returned {rc}")
    open(ready, "w").close()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    s.close()


class LMCacheCPU:
    name = "lmcache-cpu"
    lookups = (("contains x64", "lookup"), ("batched_async_contains", "batched_lookup"))

    def __init__(self, block_size, blocks, **config):
        import importlib.metadata as md
        import torch
        from lmcache.utils import CacheEngineKey
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.metadata import LMCacheMetadata
        from lmcache.v1.pin_monitor import PinMonitor
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
        self.torch, self.Key = torch, CacheEngineKey
        self.version = md.version("lmcache")
        spec = bench_layout(block_size)
        heads = spec.num_kv_heads * spec.head_dim
        self.shape = torch.Size([2, spec.num_layers, spec.tokens_per_block, heads])
        self.dtype = torch.float16
        gib = max(0.25, 2 * blocks * block_size / (1 << 30))
        config = LMCacheEngineConfig.from_defaults(**dict(dict(chunk_size=spec.tokens_per_block,
                                                               local_cpu=True, max_local_cpu_size=gib),
                                                          **config))
        meta = LMCacheMetadata(model_name=spec.model, world_size=1, local_world_size=1, worker_id=0,
                               local_worker_id=0, kv_dtype=self.dtype,
                               kv_shape=(spec.num_layers, 2, spec.tokens_per_block,
                                         spec.num_kv_heads, spec.head_dim),
                               chunk_size=spec.tokens_per_block)
        PinMonitor.GetOrCreate(config, meta)
        self.lmc_config, self.lmc_meta = config, meta
        self.backend = self.cpu = LocalCPUBackend(config, meta, dst_device="cpu")
        self.model = spec.model
        self.config = f"LocalCPUBackend, {gib:.2f} GiB, chunk {spec.tokens_per_block} tokens, float16"

    def keys(self, tag, n):
        base = zlib.crc32(tag.encode())
        return [self.Key(model_name=self.model, world_size=1, worker_id=0,
                         chunk_hash=(base << 8) + i, dtype=self.dtype) for i in range(n)]

    def _bytes(self, obj):
        """A memory object's bytes as a numpy view: the copies in and out are
        numpy's, as Beluga's and memcpy's are (torch's copy_ would add its
        thread pool, which an engine's device copy does not use)."""
        return obj.tensor.view(-1).view(self.torch.uint8).numpy()

    def store(self, keys, blocks, **put):
        # the CPU backend allocates LMCache's memory objects, for itself or
        # for the remote backend (LMCacheRemote)
        objs = self.cpu.batched_allocate(self.shape, self.dtype, len(blocks))
        if objs is None:
            raise RuntimeError("LMCache batched_allocate gave nothing")
        for o, b in zip(objs, blocks):
            np.copyto(self._bytes(o), b)
        self.backend.batched_submit_put_task(keys, objs, **put)
        for o in objs:
            o.ref_count_down()      # the backend holds its own reference

    def load(self, keys, outs):
        for k, b in zip(keys, outs):
            o = self.backend.get_blocking(k)
            if o is None:
                raise RuntimeError(f"LMCache lost {k}")
            np.copyto(b, self._bytes(o))
            o.ref_count_down()

    def remove(self, keys):
        for k in keys:
            if not self.backend.remove(k):
                raise RuntimeError(f"LMCache could not remove {k}")

    def lookup(self, keys):
        hits = 0
        for k in keys:
            if not self.backend.contains(k):
                break
            hits += 1
        return hits

    def batched_lookup(self, keys):
        coro = self.backend.batched_async_contains("bench", keys)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        coro.close()
        raise RuntimeError("LMCache's batched_async_contains awaited something")

    def close(self):
        self.backend.close()


class RedisServer:
    """Debian's redis-server on 127.0.0.1, on a free port, without
    persistence (no RDB snapshot, no append-only file), started in the run
    dir (its pid in pids, its log redis-server.log) and stopped with the
    other processes; a client of its own to read its configuration and to
    empty it. start() gives None where there is no redis-server."""

    SETTINGS = ("bind", "port", "save", "appendonly", "maxmemory", "maxmemory-policy", "io-threads")

    @classmethod
    def start(cls, procs):
        import redis
        exe = shutil.which("redis-server")
        if exe is None:
            return None
        self = cls()
        self.port = free_port()
        procs.start("redis-server", [exe, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                                     "--appendonly", "no", "--dir", procs.run_dir])
        wait_port(self.port, "redis-server", procs)
        self.url = f"redis://127.0.0.1:{self.port}"
        self.client = redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)
        self.version = f"redis-server {self.client.info('server')['redis_version']}"
        got = {}
        for name in self.SETTINGS:
            got.update(self.client.config_get(name))
        self.config = (f"{exe}, " + ", ".join(f"{k} {got.get(k)!r}" for k in self.SETTINGS)
                       + ": no persistence")
        return self

    def flushall(self):
        self.client.flushall()


class LMCacheRemote(LMCacheCPU):
    """LMCache's RemoteBackend over the run's redis-server (its RedisConnector,
    naive serde), as an LMCache engine with `remote_url` and no CPU tier has
    it: the LocalCPUBackend only allocates the memory objects; the puts run
    on LMCache's event loop thread, which this class starts."""

    name = "lmcache-redis"

    def __init__(self, block_size, blocks, url):
        import asyncio
        import threading
        import redis
        from lmcache.v1.storage_backend.remote_backend import RemoteBackend
        super().__init__(block_size, blocks, remote_url=url, remote_serde="naive", local_cpu=False)
        self.asyncio = asyncio
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.backend = RemoteBackend(self.lmc_config, self.lmc_meta, self.loop, self.cpu, dst_device="cpu")
        if self.backend.connection is None:
            raise RuntimeError(f"LMCache's RemoteBackend could not connect to {url}")
        self.client = redis.Redis.from_url(url)
        self.config = (f"RemoteBackend, RedisConnector ({url}, naive serde), chunk "
                       f"{self.shape[2]} tokens, float16; a store ends when LMCache's puts complete "
                       f"(its per-key completion callbacks)")

    def store(self, keys, blocks, wait=True, timeout=60):
        """LMCache's put: asynchronous, as its storage manager submits it;
        with @wait, until every key's write to redis has completed."""
        if not wait:
            super().store(keys, blocks)
            return
        import threading
        done = threading.Semaphore(0)
        super().store(keys, blocks, on_complete_callback=lambda key: done.release())
        for _ in keys:
            if not done.acquire(timeout=timeout):
                raise RuntimeError(f"LMCache's remote puts did not complete in {timeout} s")

    def load(self, keys, outs):
        objs = self.backend.batched_get_blocking(keys)
        for k, o, b in zip(keys, objs, outs):
            if o is None:
                raise RuntimeError(f"LMCache's remote backend lost {k}")
            np.copyto(b, self._bytes(o))
            o.ref_count_down()

    def remove(self, keys):
        """LMCache's RedisConnector has no remove (RemoteBackend.remove logs
        its NotImplementedError and answers False): the keys it wrote for
        each chunk (KEY + "kv_bytes", KEY + "metadata") are deleted here."""
        names = [k.to_string() + part for k in keys for part in ("kv_bytes", "metadata")]
        gone = self.client.delete(*names)
        if gone != len(names):
            raise RuntimeError(f"redis deleted {gone} of the {len(names)} keys of {len(keys)} chunks")

    def batched_lookup(self, keys):
        """batched_async_contains: a coroutine of LMCache's event loop (the
        connector's executor is), awaited from this thread."""
        return self.asyncio.run_coroutine_threadsafe(
            self.backend.batched_async_contains("bench", keys), self.loop).result()

    def close(self):
        # RemoteBackend.close() waits for LMCache's priority-queue executor to
        # shut down, which did not return here in 10 s (0.5.6); the puts have
        # completed (store() waited, e2e.py's flush()), so the process leaves
        # without it
        self.cpu.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# ---- statistics and records -------------------------------------------------

def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


class Records:
    def __init__(self, args):
        parts = "-".join(args.parts)
        self.path = os.path.join(args.out, f"peers-{parts}-{args.block_size >> 10}k-{args.env}.jsonl")
        self.env = args.env
        self.base = {"section": "peers", "env": args.env, "block_bytes": args.block_size}
        self.f = open(self.path, "w")

    def add(self, **kw):
        r = dict(self.base, **kw)
        self.f.write(json.dumps(r) + "\n")
        self.f.flush()

    def ratio(self, what, peer, rounds, **kw):
        self.add(kind="ratio", what=what, peer=peer, value=statistics.median(rounds),
                 run_min=min(rounds), run_max=max(rounds), runs=len(rounds), **kw)


def meta_part(args, stores, rec):
    """The 64-key lookup of every store's targets (its `lookups`); the
    first store's first target is the reference."""
    blocks = [np.full(args.block_size, i, np.uint8) for i in range(KEYS)]
    targets = {}
    for st in stores:
        keys = st.keys("meta", KEYS)
        st.store(keys, blocks)
        for row, method in st.lookups:
            targets[f"{st.name} {row}"] = (getattr(st, method), keys)
    ref = next(iter(targets))
    names = list(targets)
    clock = time.perf_counter_ns
    for name, (fn, k) in targets.items():        # warm up, and check the answer
        for _ in range(20):
            if fn(k) != KEYS:
                raise RuntimeError(f"{name}: a 64-key lookup of 64 present keys found {fn(k)}")
    times = {n: [] for n in names}
    p50 = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for name in order:
            fn, k = targets[name]
            t = []
            for _ in range(args.ops):
                t0 = clock()
                hits = fn(k)
                t.append(clock() - t0)
                if hits != KEYS:
                    raise RuntimeError(f"{name}: {hits} hits of {KEYS}")
            times[name] += t
            p50[name].append(statistics.median(t))
    for name in names:
        t = times[name]
        rec.add(kind="lat", op="lookup64", target=name, n=KEYS, p50_ns=statistics.median(t),
                p99_ns=pct(t, 0.99), min_ns=min(t), max_ns=max(t), ops=len(t), rounds=args.rounds)
        if name != ref:
            rec.ratio("lookup64", name, [a / b for a, b in zip(p50[name], p50[ref])], ref=ref)
    return names, times, ref


# the first is the reference; lmcache-redis where the run has a redis-server
CLIENT_TARGETS = ("beluga KVStore.lookup", "mooncake batch_is_exist", "lmcache-cpu contains x64",
                  "lmcache-redis contains x64")


def lookup_client(spec):
    """--lookup-client: one of several processes doing the 64-key lookup at
    once. Beluga and LMCache's CPU backend are in-process stores (each client
    stores the 64 blocks in its own); Mooncake's and redis-server's keys are
    the driver's (stored by the meta part)."""
    s = json.loads(spec)
    bs, target = s["block_size"], s["target"]
    blocks = [np.full(bs, i, np.uint8) for i in range(KEYS)]
    if target.startswith("beluga"):
        store = Beluga(bs, 4 * KEYS)
    elif target.startswith("mooncake"):
        store = Mooncake.client(s["metadata"], s["master"], [])
    elif target.startswith("lmcache-redis"):
        store = LMCacheRemote(bs, KEYS, s["redis_url"])
    else:
        store = LMCacheCPU(bs, KEYS)
    keys = store.keys("meta", KEYS)
    if not target.startswith(("mooncake", "lmcache-redis")):
        store.store(keys, blocks)
    clock = time.perf_counter_ns
    for _ in range(20):
        if store.lookup(keys) != KEYS:
            raise RuntimeError(f"{target}: a 64-key lookup of 64 present keys found {store.lookup(keys)}")
    print("ready", flush=True)
    while sys.stdin.readline().strip() == "go":
        t = []
        for _ in range(s["ops"]):
            t0 = clock()
            hits = store.lookup(keys)
            t.append(clock() - t0)
            if hits != KEYS:
                raise RuntimeError(f"{target}: {hits} hits of {KEYS}")
        print(json.dumps(t), flush=True)
    if isinstance(store, Beluga):
        store.close()
    sys.stdout.flush()
    os._exit(0)         # LMCache's threads would keep the process alive


def meta_clients_part(args, procs, mooncake, redis, rec, clients):
    """The 64-key lookup from @clients processes at once, target by target
    (rounds in step: each round every client does --ops lookups); @redis
    None: no lmcache-redis."""
    spec = {"block_size": args.block_size, "ops": args.ops, "metadata": mooncake.metadata,
            "master": mooncake.master, "redis_url": redis and redis.url}
    times, p50 = {}, {}
    for target in CLIENT_TARGETS:
        if target.startswith("lmcache-redis") and redis is None:
            continue
        argvs = [[sys.executable, os.path.abspath(__file__), "--parts", "meta", "--out", args.out,
                  "--run-dir", args.run_dir, "--lookup-client", json.dumps(dict(spec, target=target))]
                 for _ in range(clients)]
        rounds = drive_workers(procs, f"lookup{clients}-{target.split()[0]}", argvs, args.rounds)
        times[target] = [x for rnd in rounds for t in rnd for x in t]
        p50[target] = [statistics.median([x for t in rnd for x in t]) for rnd in rounds]
    ref = CLIENT_TARGETS[0]
    for target, t in times.items():
        rec.add(kind="lat", op="lookup64", target=target, clients=clients, n=KEYS,
                p50_ns=statistics.median(t), p99_ns=pct(t, 0.99), min_ns=min(t), max_ns=max(t),
                ops=len(t), rounds=args.rounds)
        if target != ref:
            rec.ratio(f"lookup64x{clients}", target, [a / b for a, b in zip(p50[target], p50[ref])],
                      ref=ref, clients=clients)
    return times


def shmem_huge_pages():
    """This host's setting for huge pages in tmpfs and shared memory (the
    word in brackets), or "unknown"."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as f:
            words = f.read().split()
    except OSError:
        return "unknown"
    return next((w.strip("[]") for w in words if w.startswith("[")), "unknown")


def medium_buffer(nbytes):
    """A buffer on the medium Beluga's pool is on here, faulted in: a shared
    mapping of a file in the directory of the fake kernel's device file
    (/dev/shm where there is one), so that memcpy and Beluga write pages
    of the same kind (anonymous memory would get transparent huge pages
    that a tmpfs file does not, and the row would measure page sizes)."""
    with tempfile.TemporaryFile(dir=tempfile.gettempdir()) as f:
        f.truncate(nbytes)
        m = mmap.mmap(f.fileno(), nbytes)       # MAP_SHARED; outlives the file's fd
    buf = np.frombuffer(m, np.uint8)
    buf[:] = 1                                  # faulted in, as the stores' memory is after warm-up
    return buf


def data_part(args, stores, src, dst, rec):
    """Store and load through every store (by its `name`; the first is the
    reference) and memcpy."""
    counts = [int(c) for c in args.counts.split(",")]
    bs = args.block_size
    medium = medium_buffer(src.nbytes)
    peers = {st.name: st for st in stores}
    ref_name = stores[0].name
    clock = time.perf_counter_ns
    results = []
    for n in counts:
        sblk = [src[i * bs:(i + 1) * bs] for i in range(n)]
        dblk = [dst[i * bs:(i + 1) * bs] for i in range(n)]
        mblk = [medium[i * bs:(i + 1) * bs] for i in range(n)]
        t = {(p, op): [] for p in list(peers) + ["memcpy"] for op in ("store", "load")}
        stored = {}                          # the keys each peer holds, removed at its next turn
        for s in range(-1, args.samples):    # sample -1 warms up
            for i in range(n):                # stamp each block: (sample, block) in its first word
                sblk[i][:8] = np.frombuffer(np.int64(((s + 2) << 20) + i).tobytes(), np.uint8)
            names = list(peers) + ["memcpy"]
            k = s % len(names)
            for name in names[k:] + names[:k]:
                dst[:n * bs] = 0xA5
                if name == "memcpy":
                    # block by block, as every store copies: one copy of all
                    # of them at once is faster here, since glibc's memcpy
                    # turns to non-temporal stores above a size threshold
                    t0 = clock()
                    for i in range(n):
                        np.copyto(mblk[i], sblk[i])
                    t1 = clock()
                    for i in range(n):
                        np.copyto(dblk[i], mblk[i])
                    t2 = clock()
                else:
                    p = peers[name]
                    if name in stored:
                        p.remove(stored.pop(name))
                    keys = p.keys(f"d{bs}-{n}-{s}", n)
                    t0 = clock()
                    p.store(keys, sblk)
                    t1 = clock()
                    p.load(keys, dblk)
                    t2 = clock()
                for i in range(n):
                    if not np.array_equal(dblk[i], sblk[i]):
                        bad = int(np.flatnonzero(dblk[i] != sblk[i])[0])
                        raise RuntimeError(f"{name}: block {i} of {n} ({bs} bytes) loaded wrong "
                                           f"bytes from offset {bad}")
                if name != "memcpy":
                    stored[name] = keys
                if s >= 0:
                    t[(name, "store")].append(t1 - t0)
                    t[(name, "load")].append(t2 - t1)
        for name, keys in stored.items():
            peers[name].remove(keys)
        for (name, op), xs in t.items():
            gbps = [n * bs / x for x in xs]      # bytes per ns = GB/s
            rec.add(kind="xfer", op=op, target=name, n=n, p50_ns=statistics.median(xs), min_ns=min(xs),
                    max_ns=max(xs), gbps_p50=statistics.median(gbps), samples=len(xs), checked=True)
            results.append((name, op, n, xs))
        for op in ("store", "load"):
            ref = t[(ref_name, op)]
            for name in list(peers)[1:] + ["memcpy"]:
                rec.ratio(f"{op}{n}", name, [a / b for a, b in zip(t[(name, op)], ref)], ref=ref_name,
                          op=op, n=n)
    return results


def main():
    args = parse()
    if args.segment_host:
        segment_host(args.segment_host)
        return
    if args.lookup_client:
        lookup_client(args.lookup_client)
        return
    os.makedirs(args.out, exist_ok=True)
    run_dir = os.path.join(args.run_dir, f"{'-'.join(args.parts)}-{args.block_size >> 10}k")
    counts = [int(c) for c in args.counts.split(",")]
    blocks = max(counts + [KEYS] if "meta" in args.parts else counts)
    procs = Processes(run_dir)
    src = np.random.default_rng(1).integers(0, 256, blocks * args.block_size, np.uint8)
    dst = np.zeros_like(src)
    dst[:] = 1
    rec = Records(args)
    beluga = Beluga(args.block_size, 4 * blocks)
    lmc = LMCacheCPU(args.block_size, blocks)
    mooncake = redis = lmr = None
    try:
        mooncake = Mooncake(procs, args.block_size, blocks, [src, dst])
        stores = [beluga, mooncake, lmc]
        redis = RedisServer.start(procs)
        if redis is None:
            print("peers: lmcache-redis SKIPPED: no redis-server on PATH "
                  "(scripts/install-deps.sh installs Debian's redis-server)", flush=True)
        else:
            lmr = LMCacheRemote(args.block_size, blocks, redis.url)
            stores.append(lmr)
        with open(os.path.join(run_dir, "listening.txt"), "w") as f:
            f.write(listening_sockets())
        rec.add(kind="config", peers={
            "beluga": f"{beluga.version}: the portable core behind libbeluga's fake kernel, "
                      f"in-process (no system call), KVStore, the pool a file on {tempfile.gettempdir()}",
            "mooncake": f"mooncake-transfer-engine-non-cuda {mooncake.version}: {mooncake.config}",
            "lmcache-cpu": f"lmcache {lmc.version}: {lmc.config}",
            "lmcache-redis": (f"lmcache {lmr.version}: {lmr.config}; {redis.version}: {redis.config}"
                              if lmr else "SKIPPED: no redis-server on PATH"),
            "memcpy": (f"numpy copyto block by block into and out of a shared mapping of a file "
                       f"on {tempfile.gettempdir()}, the medium of Beluga's pool here (shmem huge "
                       f"pages: {shmem_huge_pages()})")},
            netns=os.environ.get("BELUGA_PEERS_NETNS", "no"))
        if "meta" in args.parts:
            rec.base["part"] = "meta"
            names, times, ref = meta_part(args, stores, rec)
            print(f"peers meta ({args.env}): 64-key prefix lookup, ns per operation")
            print(f"  {'target':40s} {'p50':>10s} {'p99':>10s} {'min':>10s} {'max':>10s}")
            for n in names:
                t = times[n]
                print(f"  {n:40s} {statistics.median(t):10.0f} {pct(t, .99):10.0f} {min(t):10d} {max(t):10d}")
            for clients in (int(c) for c in args.clients.split(",")):
                if clients < 2:
                    continue
                times = meta_clients_part(args, procs, mooncake, redis, rec, clients)
                print(f"  {clients} clients at once:")
                for n, t in times.items():
                    print(f"  {n:40s} {statistics.median(t):10.0f} {pct(t, .99):10.0f} {min(t):10d} "
                          f"{max(t):10d}")
        if "data" in args.parts:
            rec.base["part"] = "data"
            res = data_part(args, stores, src, dst, rec)
            print(f"peers data ({args.env}): {args.block_size} B blocks, p50 GB/s [min..max ns]")
            for name, op, n, xs in res:
                print(f"  {name:13s} {op:5s} {n:3d} {n * args.block_size / statistics.median(xs):8.2f} GB/s"
                      f"  [{min(xs)}..{max(xs)} ns]")
        procs.check()
    finally:
        if mooncake is not None:
            mooncake.close()
        if lmr is not None:
            lmr.close()
        lmc.close()
        procs.stop()
        rec.f.close()
    print(f"peers: wrote {rec.path}; pids and logs in {run_dir}")


if __name__ == "__main__":
    main()
