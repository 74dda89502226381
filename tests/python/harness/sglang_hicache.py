# SPDX-License-Identifier: GPL-2.0
"""Replays SGLang HiCache's storage calls on beluga.adapters.sglang.

The sequence follows python/sglang/srt/mem_cache/hicache_storage.py
@001067ff and the cache controller's use of it (engines.md section 1.2):
the backend is built as backend_class(storage_config, kwargs), gets the
host pool through register_mem_pool_host(), and then the prefetch path
calls batch_exists(keys) (leading hits) and batch_get_v1(keys[:hits],
host_indices); the backup path calls batch_set_v1(keys, host_indices) for
pages written to the host pool; IO goes in batches of STORAGE_BATCH_SIZE
(128) pages.  Keys are get_hash_str page hashes.  The host pool is played
by numpy arrays in SGLang's page_first / page_first_direct layouts, with
get_page_buffer_meta() returning (K ptr, V ptr) per page (one ptr for MLA).
"""

from dataclasses import dataclass

import numpy as np

from beluga.adapters import sglang as S

from .workload import Oracle, block_kv

STORAGE_BATCH_SIZE = 128


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    is_mla_model: bool
    is_page_first_layout: bool
    model_name: str
    tp_lcm_size: int = None
    should_split_heads: bool = False
    extra_config: dict = None


class HostKVCache:
    """SGLang's host KV pool, MHA or MLA, page_first or page_first_direct."""

    def __init__(self, layer_num, head_num, head_dim, dtype, page_size, pages, layout,
                 latent=0):
        self.layer_num, self.head_num, self.head_dim = layer_num, head_num, head_dim
        self.dtype, self.page_size, self.layout = np.dtype(dtype), page_size, layout
        self.size = page_size * pages
        self.mla = bool(latent)
        if self.mla:
            self.kv_lora_rank, self.qk_rope_head_dim = latent - latent // 8, latent // 8
            inner = (1, latent)
        else:
            inner = (head_num, head_dim)
        if layout == "page_first":
            shape = (self.size, layer_num) + inner
        elif layout == "page_first_direct":
            shape = (pages, layer_num, page_size) + inner
        else:                                            # layer_first
            shape = (layer_num, self.size) + inner
        self.kv_buffer = np.zeros(shape if self.mla else (2,) + shape, self.dtype)
        self.free = list(range(0, self.size, page_size))

    def page_bytes(self):
        return self.layer_num * self.page_size * self.dtype.itemsize * (
            self.kv_buffer.shape[-1] if self.mla else self.head_num * self.head_dim)

    def get_page_buffer_meta(self, indices):
        idx = [int(i) for i in np.asarray(indices).tolist()]
        assert len(idx) % self.page_size == 0
        base = self.kv_buffer.ctypes.data
        half = self.kv_buffer.nbytes // (1 if self.mla else 2)
        ptrs = []
        for i in range(0, len(idx), self.page_size):
            first = idx[i]
            assert idx[i:i + self.page_size] == list(range(first, first + self.page_size))
            k = base + first * self.page_bytes() // self.page_size
            ptrs += [k] if self.mla else [k, k + half]
        return ptrs, [self.page_bytes()] * len(ptrs)

    def page(self, first):
        """(K, V) (or (latent,)) of the page at slot ``first``, host layout."""
        p = self.page_size
        if self.layout == "page_first":
            sl = lambda x: x[first:first + p]
        else:
            sl = lambda x: x[first // p]
        return (sl(self.kv_buffer),) if self.mla else (sl(self.kv_buffer[0]), sl(self.kv_buffer[1]))

    def write_block(self, first, kv):
        """Put a canonical block (L, 2, T, H, D) / (L, T, latent) in the page."""
        parts = self.page(first)
        for j, dst in enumerate(parts):
            src = kv if self.mla else kv[:, j]
            if self.mla:
                src = src[:, :, None, :]
            dst[...] = src.swapaxes(0, 1) if self.layout == "page_first" else src

    def poison(self, first):
        for x in self.page(first):
            x[...] = np.nan


class Engine:
    """One SGLang rank: a host pool and the storage backend."""

    def __init__(self, pool, layer_num, head_num, head_dim, page_size, pages=64,
                 layout="page_first", tp_rank=0, tp_size=1, latent=0, salt=None,
                 model="beluga-test/tiny", dtype="float32", extra=None):
        cfg = HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                   is_mla_model=bool(latent), is_page_first_layout=True,
                                   model_name=model,
                                   extra_config={"backend_name": "beluga",
                                                 "module_path": "beluga.adapters.sglang",
                                                 "class_name": "BelugaHiCacheStorage",
                                                 "salt": salt, **(extra or {})})
        self.backend = S.BelugaHiCacheStorage(cfg, {}, pool=pool)
        self.host = HostKVCache(layer_num, head_num, head_dim, dtype, page_size, pages, layout,
                                latent)
        self.backend.register_mem_pool_host(self.host)
        self.layout = self.backend.store.layout
        self.page_size = page_size

    def _indices(self, firsts):
        return np.concatenate([np.arange(f, f + self.page_size) for f in firsts]) \
            if firsts else np.zeros(0, np.int64)

    def serve(self, req, kv_of=None):
        kv_of = kv_of or (lambda h: block_kv(self.layout, h))
        keys = req.hex
        n = len(keys)
        firsts = [self.host.free.pop() for _ in range(n)]
        for f in firsts:
            self.host.poison(f)
        # prefetch: leading hits, then read them, in storage batches
        hits = 0
        for b in range(0, n, STORAGE_BATCH_SIZE):
            got = self.backend.batch_exists(keys[b:b + STORAGE_BATCH_SIZE])
            assert isinstance(got, int)
            hits += got
            if got < len(keys[b:b + STORAGE_BATCH_SIZE]):
                break
        loaded = 0
        for b in range(0, hits, STORAGE_BATCH_SIZE):
            ks = keys[b:min(hits, b + STORAGE_BATCH_SIZE)]
            res = self.backend.batch_get_v1(ks, self._indices(firsts[b:b + len(ks)]))
            assert isinstance(res, list) and len(res) == len(ks)
            ok = next((i for i, r in enumerate(res) if not r), len(res))
            loaded += ok
            if ok < len(ks):
                break
        for i in range(loaded, n):                   # compute the misses
            self.host.write_block(firsts[i], kv_of(keys[i]))
        # backup: the pages not loaded from storage
        for b in range(loaded, n, STORAGE_BATCH_SIZE):
            ks = keys[b:b + STORAGE_BATCH_SIZE]
            res = self.backend.batch_set_v1(ks, self._indices(firsts[b:b + len(ks)]))
            assert isinstance(res, list) and len(res) == len(ks)
        # every host page holds the model's bytes
        for i in range(n):
            expect = kv_of(keys[i])
            for j, part in enumerate(self.host.page(firsts[i])):
                src = expect if self.host.mla else expect[:, j]
                if self.host.mla:
                    src = src[:, :, None, :]
                src = src.swapaxes(0, 1) if self.host.layout == "page_first" else src
                if part.tobytes() != np.ascontiguousarray(src).tobytes():
                    raise AssertionError(f"{req.req_id}: page {i} part {j} differs "
                                         f"({'loaded' if i < loaded else 'computed'})")
        self.host.free.extend(firsts)
        return loaded

    def close(self):
        self.backend.close()


def replay(engine, requests, oracle=None):
    oracle = oracle or Oracle()
    got, want = [], []
    for r in requests:
        want.append(oracle.hits(r))
        got.append(engine.serve(r))
        oracle.add(r)
    return got, want
