# SPDX-License-Identifier: GPL-2.0
"""Replays LMCache's storage-plugin calls on beluga.adapters.lmcache.

The sequence follows LMCache's backend interfaces in
lmcache/v1/storage_backend/abstract_backend.py and MaruBackend's
allocator-backend flow (engines.md sections 1.3 and 5.8): the plugin is
built as StoragePluginInterface(dst_device, config, metadata,
local_cpu_backend, loop); a store does batched_contains (skip the present
leading run) -> the engine's chunk (KV_2LTD [2, layers, tokens, hidden]) in
a memory object of LMCache's LocalCPUBackend (LMCache 0.5.6 never lets a
plugin allocate) -> batched_submit_put_task, which copies it into the
pool; a retrieve does
batched_contains(pin=True) -> get_blocking per chunk -> copy out ->
ref_count_down -> unpin, or the async form batched_async_contains ->
batched_get_non_blocking.  Chunk hashes here are SHA-256 chain digests
(LMCache configured with a SHA-256 token hash).
"""

import asyncio
from dataclasses import dataclass, field

import numpy as np

from beluga.adapters import lmcache as M

from .workload import Oracle, block_kv


@dataclass
class HostChunk:
    """A chunk in host memory, as LMCache's LocalCPUBackend hands it over."""
    tensor: np.ndarray


@dataclass(frozen=True)
class CacheEngineKey:
    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: bytes
    kv_dtype: str = "float32"
    request_configs: dict = None
    kv_group: int = 0


@dataclass
class LMCacheEngineMetadata:
    model_name: str
    world_size: int
    worker_id: int
    fmt: str
    kv_dtype: str
    kv_shape: tuple


@dataclass
class LMCacheEngineConfig:
    chunk_size: int
    extra_config: dict = field(default_factory=dict)


def kv_2ltd(layout, kv):
    """A canonical block (L, 2, T, H, D) in LMCache's KV_2LTD shape."""
    L, _, T, H, D = kv.shape
    return np.ascontiguousarray(kv.transpose(1, 0, 2, 3, 4)).reshape(2, L, T, H * D)


class Engine:
    def __init__(self, pool, chunk=16, layers=2, heads=2, head_dim=16, salt=None,
                 model="beluga-test/tiny", world_size=1, worker_id=0, async_lookup=False):
        self.meta = LMCacheEngineMetadata(model, world_size, worker_id, "KV_2LTD", "float32",
                                          (layers, 2, chunk, heads, head_dim))
        cfg = LMCacheEngineConfig(chunk, {"storage_plugin.beluga.module_path": "beluga.adapters.lmcache",
                                          "storage_plugin.beluga.class_name": "BelugaStoragePlugin",
                                          "beluga.salt": salt})
        self.plugin = M.BelugaStoragePlugin("cpu", cfg, self.meta, None, None, pool=pool)
        self.chunk = chunk
        self.async_lookup = async_lookup
        self.lookup_id = 0
        self.shape = (2, layers, chunk, heads * head_dim)

    def key(self, digest):
        m = self.meta
        return CacheEngineKey(m.model_name, m.world_size, m.worker_id, digest)

    @property
    def layout(self):
        return self.plugin._store_for(self.key(b"")).layout

    async def _async_lookup(self, keys):
        """LMCache's async_lookup_and_prefetch: both calls awaited."""
        hits = await self.plugin.batched_async_contains(self.lookup_id, keys, pin=True)
        return hits, await self.plugin.batched_get_non_blocking(self.lookup_id, keys[:hits])

    def serve(self, req):
        keys = [self.key(d) for d in req.digests]
        n = len(keys)
        # retrieve
        if self.async_lookup:
            self.lookup_id += 1
            hits, objs = asyncio.run(self._async_lookup(keys))
        else:
            hits = self.plugin.batched_contains(keys, pin=True)
            objs = [self.plugin.get_blocking(k) for k in keys[:hits]]
        assert len(objs) == hits and all(o is not None for o in objs)
        gpu = []
        for o in objs:
            assert tuple(o.get_shape()) == self.shape
            gpu.append(np.array(o.tensor))          # the copy to the GPU
            o.ref_count_down()
        if not self.async_lookup:
            for k in keys[:hits]:
                assert self.plugin.unpin(k)
        # compute the rest and store it
        for i in range(hits, n):
            gpu.append(kv_2ltd(self.layout, block_kv(self.layout, req.hex[i])))
        present = self.plugin.batched_contains(keys[hits:])
        todo = keys[hits + present:]
        if todo:
            # LMCache's LocalCPUBackend holds the chunks it puts (the GPU -> CPU copy)
            objs = [HostChunk(gpu[hits + present + j]) for j in range(len(todo))]
            futs = self.plugin.batched_submit_put_task(todo, objs)
            assert len(futs) == len(objs)
            for f in futs:
                f.result()
        for i in range(n):
            want = kv_2ltd(self.layout, block_kv(self.layout, req.hex[i]))
            if gpu[i].tobytes() != want.tobytes():
                raise AssertionError(f"{req.req_id}: chunk {i} differs "
                                     f"({'loaded' if i < hits else 'computed'})")
        return hits

    def close(self):
        self.plugin.close()


def replay(engine, requests, oracle=None):
    oracle = oracle or Oracle()
    got, want = [], []
    for r in requests:
        want.append(oracle.hits(r))
        got.append(engine.serve(r))
        oracle.add(r)
    return got, want
