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
    """Paged KV "device" memory: per layer a (num_blocks, 2*T*H*D) page
    tensor (K then V), or one cross-layer tensor."""

    def __init__(self, layout, num_blocks, cross_layer=False, blocks_per_chunk=1):
        self.layout = layout
        self.sub = layout.tokens // blocks_per_chunk
        s = layout.spec
        self.page_shape = (2, self.sub, s.heads_local, s.head_dim)
        per = int(np.prod(self.page_shape)) * layout.itemsize
        if cross_layer:
            t = np.zeros((num_blocks, layout.layers * per), np.int8)
            self.caches = CanonicalKVCaches([CanonicalKVCacheTensor(t, layout.layers * per)],
                                            [[CanonicalKVCacheRef(0, layout.layers * per)]])
            self.view = lambda b: t[b].view(layout.dtype).reshape((layout.layers,) + self.page_shape)
        else:
            ts = [np.zeros((num_blocks, per), np.int8) for _ in range(layout.layers)]
            self.caches = CanonicalKVCaches([CanonicalKVCacheTensor(x, per) for x in ts],
                                            [[CanonicalKVCacheRef(i, per) for i in range(layout.layers)]])
            self.view = lambda b: np.stack([x[b].view(layout.dtype).reshape(self.page_shape) for x in ts])
            self._ts = ts
        self.cross = cross_layer
        self.free = list(range(num_blocks))

    def poison(self, ids):
        for b in ids:
            for t in self.caches.tensors:
                t.tensor[b] = -1           # NaN pattern: a missed load is visible

    def write(self, gid, kv, j):
        """Write sub-block j of an offloaded block's KV (layout-shaped)."""
        tok = slice(j * self.sub, (j + 1) * self.sub)
        sub = kv[:, :, tok]                                  # (L, 2, sub, H, D)
        if self.cross:
            self.caches.tensors[0].tensor[gid] = sub.reshape(-1).view(np.int8)
        else:
            for layer, x in enumerate(self._ts):
                x[gid] = sub[layer].reshape(-1).view(np.int8)

    def read(self, gid):
        return self.view(gid)


class Engine:
    """Plays vLLM's scheduler and one worker around a BelugaOffloadingSpec."""

    def __init__(self, pool, extra, layout_hint=None, cross_layer=False, gpu_blocks=256):
        self.spec = V.BelugaOffloadingSpec(OffloadingConfig(extra), pool=pool)
        self.layout = self.spec.store.layout
        bpc = self.spec.blocks_per_chunk
        self.bpc = bpc
        self.gpu = FakeGPU(self.layout, gpu_blocks, cross_layer, bpc)
        self.manager = self.spec.get_manager()
        self.worker = self.spec.get_worker(self.gpu.caches)
        self.job = 0
        self.load_failures = 0
        self.LR = V.engine_types()["LookupResult"]

    def _next_job(self):
        self.job += 1
        return self.job

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
        gpu_ids = [self.gpu.free.pop() for _ in range(n * bpc)]
        self.gpu.poison(gpu_ids)
        loaded = 0
        if hits:
            spec = self.manager.prepare_load(keys[:hits], ctx)
            job = self._next_job()
            self.worker.submit_load(job, spec, GPULoadStoreSpec(gpu_ids[:hits * bpc], [hits * bpc], [0]))
            self.worker.wait({job})
            (res,) = [r for r in self.worker.get_finished() if r.job_id == job]
            self.manager.complete_load(keys[:hits], ctx)
            if res.success:
                loaded = hits
            else:
                self.load_failures += 1            # vLLM recomputes these
        for b in range(loaded, n):                  # "compute" the rest
            kv = block_kv(self.layout, req.hex[b])
            for j in range(bpc):
                self.gpu.write(gpu_ids[b * bpc + j], kv, j)
        # The offloading connector stores the blocks it computed.
        out = self.manager.prepare_store(keys[loaded:], ctx)
        if out is not None and out.keys_to_store:
            idx = {k: i for i, k in enumerate(keys)}
            ids = [gpu_ids[idx[k] * bpc + j] for k in out.keys_to_store for j in range(bpc)]
            job = self._next_job()
            self.worker.submit_store(job, GPULoadStoreSpec(ids, [len(ids)], [idx[out.keys_to_store[0]] * bpc]),
                                     out.store_spec)
            self.worker.wait({job})
            (res,) = [r for r in self.worker.get_finished() if r.job_id == job]
            self.manager.complete_store(out.keys_to_store, ctx, success=res.success)
        # Every block in GPU memory is the block the model would compute.
        for b in range(n):
            want = block_kv(self.layout, req.hex[b])
            for j in range(bpc):
                got = self.gpu.read(gpu_ids[b * bpc + j])
                tok = slice(j * self.gpu.sub, (j + 1) * self.gpu.sub)
                if got.tobytes() != np.ascontiguousarray(want[:, :, tok]).tobytes():
                    raise AssertionError(f"{req.req_id}: block {b} sub-block {j} differs "
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
