# SPDX-License-Identifier: GPL-2.0
"""Replays vLLM's offloading call sequence on beluga.adapters.vllm.

The sequence follows vLLM's OffloadingManager / OffloadingWorker contract in
vllm/v1/kv_offload/base.py @0105e232 (engines.md section 1.1b, sequence in
5.8): per request on_new_request -> lookup per key (the scheduler scans
until the first non-HIT) -> prepare_load -> worker submit_load ->
get_finished -> complete_load -> (compute the rest) -> prepare_store ->
worker submit_store -> get_finished -> complete_store ->
on_request_finished.  GPU memory is played by numpy "canonical" page
tensors, (num_blocks, page_bytes) int8 per layer, as CanonicalKVCaches
gives them to get_worker().
"""

from dataclasses import dataclass, field

import numpy as np

from beluga.adapters import vllm as V

from .workload import Oracle, block_kv


@dataclass
class ReqContext:
    """vLLM's ReqContext (base.py): the fields the manager may read."""
    req_id: str
    kv_transfer_params: dict = None
    _state: dict = field(default_factory=dict)

    def set_state(self, val):
        self._state[type(val)] = val

    def get_state(self, cls):
        return self._state.get(cls)


@dataclass
class CanonicalKVCacheTensor:
    tensor: np.ndarray
    page_size_bytes: int


@dataclass
class CanonicalKVCacheRef:
    tensor_idx: int
    page_size_bytes: int
    mapping: object = None


@dataclass
class CanonicalKVCaches:
    tensors: list
    group_data_refs: list


class GPULoadStoreSpec:
    """vLLM's GPULoadStoreSpec: GPU block ids, one group."""

    def __init__(self, block_ids, group_sizes, block_indices):
        self.block_ids = np.array(block_ids, dtype=np.int32)
        assert sum(group_sizes) == len(block_ids)
        self.group_sizes, self.block_indices = group_sizes, block_indices


@dataclass
class OffloadingConfig:
    extra_config: dict


class FakeGPU:
    """Paged KV "device" memory of one TP rank: per layer a (num_blocks,
    page_bytes) int8 tensor holding (2, T, heads, dim) -- K then V -- or
    (T, latent) for MLA, or one cross-layer tensor of all layers."""

    def __init__(self, layout, num_blocks, cross_layer=False, blocks_per_chunk=1,
                 tp_rank=0, tp_size=1):
        self.layout = layout
        self.sub = layout.tokens // blocks_per_chunk
        s = layout.spec
        if s.is_mla:
            self.heads = None
            self.page_shape = (self.sub, s.latent_dim)
        else:
            local = max(1, s.num_kv_heads // tp_size)
            first = tp_rank * s.num_kv_heads // tp_size
            self.heads = slice(first, first + local)
            self.page_shape = (2, self.sub, local, s.head_dim)
        per = int(np.prod(self.page_shape)) * layout.itemsize
        L = layout.layers
        if cross_layer:
            t = np.zeros((num_blocks, L * per), np.int8)
            self._ts = [t]
            self.caches = CanonicalKVCaches([CanonicalKVCacheTensor(t, L * per)],
                                            [[CanonicalKVCacheRef(0, L * per)]])
        else:
            self._ts = [np.zeros((num_blocks, per), np.int8) for _ in range(L)]
            self.caches = CanonicalKVCaches([CanonicalKVCacheTensor(x, per) for x in self._ts],
                                            [[CanonicalKVCacheRef(i, per) for i in range(L)]])
        self.cross = cross_layer
        self.free = list(range(num_blocks))

    def poison(self, ids):
        for b in ids:
            for t in self._ts:
                t[b] = -1                  # NaN pattern: a missed load is visible

    def expected(self, kv, j):
        """This rank's share of sub-block j of a (full) block's KV, one
        array per layer."""
        tok = slice(j * self.sub, (j + 1) * self.sub)
        if self.heads is None:
            return np.ascontiguousarray(kv[:, tok])
        return np.ascontiguousarray(kv[:, :, tok, self.heads])

    def write(self, gid, kv, j):
        sub = self.expected(kv, j)                            # (L,) + page_shape
        if self.cross:
            self._ts[0][gid] = sub.reshape(-1).view(np.int8)
        else:
            for layer, x in enumerate(self._ts):
                x[gid] = sub[layer].reshape(-1).view(np.int8)

    def read(self, gid):
        lay = self.layout
        if self.cross:
            return self._ts[0][gid].view(lay.dtype).reshape((lay.layers,) + self.page_shape)
        return np.stack([x[gid].view(lay.dtype).reshape(self.page_shape) for x in self._ts])


class Engine:
    """Plays vLLM's scheduler and its TP workers around a
    BelugaOffloadingSpec: one manager, one worker (and FakeGPU) per rank.
    A transfer job succeeds when every worker's part of it did, as the
    connector aggregates them."""

    def __init__(self, pool, extra, cross_layer=False, gpu_blocks=256):
        self.spec = V.BelugaOffloadingSpec(OffloadingConfig(extra), pool=pool)
        self.layout = self.spec.store.layout
        self.bpc = self.spec.blocks_per_chunk
        tp = self.spec.tp_size
        self.gpus = [FakeGPU(self.layout, gpu_blocks, cross_layer, self.bpc, r, tp)
                     for r in range(tp)]
        self.gpu = self.gpus[0]
        self.manager = self.spec.get_manager()
        self.workers = [self.spec.get_worker(g.caches, tp_rank=r) for r, g in enumerate(self.gpus)]
        self.worker = self.workers[0]
        self.job = 0
        self.load_failures = 0
        self.LR = V.engine_types()["LookupResult"]

    def _transfer(self, submit, *args):
        self.job += 1
        ok = True
        for w in self.workers:
            getattr(w, submit)(self.job, *args)
            w.wait({self.job})
            (res,) = [r for r in w.get_finished() if r.job_id == self.job]
            ok = ok and res.success
        return ok

    def serve(self, req):
        """One request; returns the number of offloaded blocks loaded."""
        keys = [V.make_offload_key(d, 0) for d in req.digests]
        n = len(keys)
        ctx = ReqContext(req.req_id)
        self.manager.on_new_request(ctx)
        hits = 0
        for key in keys:                           # the scheduler's scan
            if self.manager.lookup(key, ctx) != self.LR.HIT:
                break
            hits += 1
        # lookup may be repeated in a later step; it must not take more pins
        for key in keys[:hits]:
            assert self.manager.lookup(key, ctx) == self.LR.HIT
        bpc = self.bpc
        gpu_ids = [self.gpu.free.pop() for _ in range(n * bpc)]   # same ids on every rank
        for g in self.gpus:
            g.poison(gpu_ids)
        loaded = 0
        if hits:
            spec = self.manager.prepare_load(keys[:hits], ctx)
            ok = self._transfer("submit_load", spec,
                                GPULoadStoreSpec(gpu_ids[:hits * bpc], [hits * bpc], [0]))
            self.manager.complete_load(keys[:hits], ctx)
            if ok:
                loaded = hits
            else:
                self.load_failures += 1            # vLLM recomputes these
        for b in range(loaded, n):                  # "compute" the rest
            kv = block_kv(self.layout, req.hex[b])
            for g in self.gpus:
                for j in range(bpc):
                    g.write(gpu_ids[b * bpc + j], kv, j)
        # The offloading connector stores the blocks it computed.
        out = self.manager.prepare_store(keys[loaded:], ctx)
        if out is not None and out.keys_to_store:
            idx = {k: i for i, k in enumerate(keys)}
            ids = [gpu_ids[idx[k] * bpc + j] for k in out.keys_to_store for j in range(bpc)]
            ok = self._transfer("submit_store",
                                GPULoadStoreSpec(ids, [len(ids)], [idx[out.keys_to_store[0]] * bpc]),
                                out.store_spec)
            self.manager.complete_store(out.keys_to_store, ctx, success=ok)
        # Every block in every rank's GPU memory is what the model computes.
        for r, g in enumerate(self.gpus):
            for b in range(n):
                kv = block_kv(self.layout, req.hex[b])
                for j in range(bpc):
                    if g.read(gpu_ids[b * bpc + j]).tobytes() != g.expected(kv, j).tobytes():
                        raise AssertionError(
                            f"{req.req_id}: rank {r} block {b} sub-block {j} differs "
                            f"({'loaded' if b < loaded else 'computed'})")
        self.manager.on_request_finished(ctx)
        self.gpu.free.extend(gpu_ids)
        return loaded

    def close(self):
        self.manager.shutdown()
        self.spec.store.close()


def replay(engine, requests, oracle=None):
    """Serve every request; returns (loaded hits, oracle hits) per request."""
    oracle = oracle or Oracle()
    got, want = [], []
    for r in requests:
        want.append(oracle.hits(r))
        got.append(engine.serve(r))
        oracle.add(r)
    return got, want
