# SPDX-License-Identifier: LGPL-2.1-or-later
"""vLLM KV offloading (v0.21+, ``vllm/v1/kv_offload/base.py`` @0105e232).

Load it with the OffloadingConnector::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "BelugaOffloadingSpec",
            "spec_module_path": "beluga.adapters.vllm",
            "model": "meta-llama/Llama-3.1-8B", "num_layers": 32,
            "num_kv_heads": 8, "head_dim": 128, "dtype": "bfloat16",
            "tokens_per_block": 16, "tp_rank": 0, "tp_size": 1,
            "beluga_path": "/dev/beluga", "salt": null}}'

Scheduler side (``BelugaOffloadingManager``): ``lookup`` answers one key
with a pinned LOOKUP, so a HIT stays loadable (the pin table is per
request); ``prepare_load`` hands out the pinned offsets; ``complete_load``
and ``on_request_finished`` release; ``prepare_store`` drops keys already
present and ALLOCs the rest; ``complete_store`` PUBLISHes (or FREEs on
failure).  ``HIT_PENDING`` is never returned: an unpublished block is
invisible.  Evicted keys are not reported (the ABI does not say which).

Worker side (``BelugaOffloadingWorker``): copies between the engine's
canonical KV pages and pool blocks with numpy, synchronously, so
``wait`` has nothing to wait for.  It expects CPU tensors (or numpy
arrays) and a page per layer of ``(2, tokens, heads, head_dim)`` -- K then
V -- or one cross-layer page of ``(layers, 2, tokens, heads, head_dim)``.
"""

from array import array
from dataclasses import dataclass, replace
import enum
import logging
import threading

import numpy as np

import beluga
from beluga import keys as K
from beluga.adapters import engine_module, model_spec_from
from beluga.layout import BlockLayout
from beluga.store import KVStore

log = logging.getLogger(__name__)
_BASE = "vllm.v1.kv_offload.base"


# ---- the engine's types: vLLM's own when importable, else stand-ins -----

class _LookupResult(enum.Enum):
    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


class _Medium(enum.Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class _LoadStoreSpec:
    pass


@dataclass
class _PrepareStoreOutput:
    keys_to_store: list
    store_spec: object
    evicted_keys: list


@dataclass
class _OffloadingEvent:
    keys: list
    medium: object
    removed: bool
    locality: object = None
    ownership: object = None
    removal_expected: bool = False


@dataclass
class _RequestOffloadingContext:
    policy: object = None


@dataclass
class _TransferResult:
    job_id: int
    success: bool
    transfer_size: int = None
    transfer_time: float = None


def engine_types():
    """vLLM's classes where vLLM is importable, else equivalent stand-ins."""
    base = engine_module(_BASE)
    names = ("LookupResult", "Medium", "LoadStoreSpec", "PrepareStoreOutput", "OffloadingEvent",
             "RequestOffloadingContext", "TransferResult")
    own = (_LookupResult, _Medium, _LoadStoreSpec, _PrepareStoreOutput, _OffloadingEvent,
           _RequestOffloadingContext, _TransferResult)
    return {n: getattr(base, n, o) if base else o for n, o in zip(names, own)}


def split_offload_key(key):
    """(block_hash, group_idx) of a vLLM OffloadKey (hash || u32 BE group)."""
    key = bytes(key)
    return key[:-4], int.from_bytes(key[-4:], "big")


def make_offload_key(block_hash, group_idx=0):
    return bytes(block_hash) + int(group_idx).to_bytes(4, "big")


# ---- load/store spec: where in the pool -------------------------------

class BelugaLoadStoreSpecImpl:
    """Pool offsets of offloaded blocks, ``parts`` pool blocks each, in key
    order; ``group`` the KV cache group.  ``missing`` marks blocks the
    manager could not pin: a load of them reports failure."""

    def __init__(self, offsets, group=0, missing=0):
        self.offsets = array("Q", offsets)
        self.group = group
        self.missing = missing

    def __repr__(self):
        return f"BelugaLoadStoreSpec({list(self.offsets)}, group={self.group})"


# ---- manager (scheduler process) ----------------------------------------

class _RequestState:
    __slots__ = ("pins", "loading", "storing", "finished")

    def __init__(self):
        self.pins = {}       # OffloadKey -> offsets pinned by lookup (one pin each)
        self.loading = {}    # OffloadKey -> offsets handed to prepare_load
        self.storing = {}    # OffloadKey -> offsets allocated by prepare_store
        self.finished = False


class BelugaOffloadingManagerImpl:
    def __init__(self, stores, events=False):
        self._stores = stores          # group index -> KVStore
        self._types = engine_types()
        self._requests = {}
        self._events = [] if events else None
        self._lock = threading.Lock()

    # helpers
    def _req(self, ctx):
        rid = ctx.req_id
        st = self._requests.get(rid)
        if st is None:
            st = self._requests[rid] = _RequestState()
        return st

    def _maybe_drop(self, ctx):
        st = self._requests.get(ctx.req_id)
        if st and st.finished and not (st.pins or st.loading or st.storing):
            del self._requests[ctx.req_id]

    def _store_key(self, key):
        block_hash, group = split_offload_key(key)
        store = self._stores.get(group)
        return store, K.digest16(block_hash)

    # OffloadingManager
    def on_new_request(self, req_context):
        with self._lock:
            self._req(req_context)
        return self._types["RequestOffloadingContext"]()

    def lookup(self, key, req_context):
        LR = self._types["LookupResult"]
        store, k = self._store_key(key)
        if store is None:
            return LR.MISS
        with self._lock:
            st = self._req(req_context)
            if key in st.pins or key in st.loading:
                return LR.HIT
        pinned = store.pin(k)
        if pinned.count == 0:
            return LR.MISS
        offs = pinned.detach()          # the request's pin table owns the pin now
        with self._lock:
            if key in st.pins:          # a concurrent lookup of the same key won
                store.release_blocks(offs)
            else:
                st.pins[key] = offs
        return LR.HIT

    def prepare_load(self, keys, req_context):
        keys = list(keys)
        offsets, missing, group = array("Q"), 0, 0
        with self._lock:
            st = self._req(req_context)
            for key in keys:
                store, k = self._store_key(key)
                group = split_offload_key(key)[1]
                offs = st.pins.pop(key, None)
                if offs is None:
                    offs = st.loading.get(key)
                if offs is None and store is not None:
                    # Not looked up by this request (vLLM assumes presence):
                    # pin now; if it is gone the load job will fail.
                    p = store.pin(k)
                    offs = p.detach() if p.count else None
                if offs is None:
                    missing += 1
                    offsets.extend([0] * (store.layout.parts if store else 1))
                    continue
                st.loading[key] = offs
                offsets.extend(offs)
        return _cls("BelugaLoadStoreSpec")(offsets, group, missing)

    def touch(self, keys, req_context):
        """Refresh the LRU of present keys: a pinned LOOKUP and a RELEASE
        (Beluga has no touch-only LOOKUP).  The keys are usually a chain,
        so the first LOOKUP covers its leading run; keys past a gap are
        touched one by one."""
        keys = [k for k in keys if split_offload_key(k)[1] in self._stores]
        while keys:
            store, _ = self._store_key(keys[0])
            run = [k for k in keys if split_offload_key(k)[1] == split_offload_key(keys[0])[1]]
            p = store.pin([self._store_key(k)[1] for k in run])
            p.release()
            rest = run[max(p.count, 1):]
            keys = [k for k in keys if k not in run] + rest

    def complete_load(self, keys, req_context):
        with self._lock:
            st = self._req(req_context)
            for key in keys:
                offs = st.loading.pop(key, None)
                if offs is not None:
                    self._store_key(key)[0].release_blocks(offs)
            self._maybe_drop(req_context)

    def prepare_store(self, keys, req_context):
        keys = list(keys)
        T = self._types
        if not keys:
            return T["PrepareStoreOutput"]([], _cls("BelugaLoadStoreSpec")([], 0), [])
        _, group = split_offload_key(keys[0])
        store = self._stores.get(group)
        if store is None:
            return None
        # one KV cache group per call; keys of other groups are not stored
        todo = [key for key in keys if split_offload_key(key)[1] == group
                and store.lookup(self._store_key(key)[1]) == 0]
        alloc = store.allocate(len(todo))
        if todo and alloc.count == 0:
            return None
        todo = todo[:alloc.count]
        m = store.layout.parts
        offsets = alloc.detach()            # the request state owns the blocks now
        with self._lock:
            st = self._req(req_context)
            for i, key in enumerate(todo):
                st.storing[key] = offsets[i * m:(i + 1) * m]
        return T["PrepareStoreOutput"](todo, _cls("BelugaLoadStoreSpec")(offsets, group), [])

    def complete_store(self, keys, req_context, success=True):
        by_store = {}
        with self._lock:
            st = self._req(req_context)
            for key in keys:
                offs = st.storing.pop(key, None)
                if offs is None:
                    continue
                store, k = self._store_key(key)
                e = by_store.setdefault(id(store), (store, array("Q"), [], []))
                e[1].extend(offs)
                e[2].append(k)
                e[3].append(key)
        for store, offs, ks, oks in by_store.values():
            if success:
                res = store.publish_blocks(offs, K.join(ks))
                if self._events is not None:
                    failed = set(res.failed)
                    done = [k for i, k in enumerate(oks) if i not in failed]
                    self._events.append(self._types["OffloadingEvent"](
                        keys=done, medium=self._types["Medium"].CPU, removed=False))
            else:
                store.free_blocks(offs)
        with self._lock:
            self._maybe_drop(req_context)

    def on_request_finished(self, req_context):
        with self._lock:
            st = self._requests.get(req_context.req_id)
            if st is None:
                return
            st.finished = True
            for key, offs in st.pins.items():     # looked up, never loaded
                self._store_key(key)[0].release_blocks(offs)
            st.pins.clear()
            self._maybe_drop(req_context)

    def take_events(self):
        if not self._events:
            return ()
        ev, self._events[:] = list(self._events), []
        return ev

    def on_schedule_end(self, context):
        return

    def has_pending_work(self):
        return False

    def reset_cache(self):
        for store in set(self._stores.values()):
            try:
                store.pool.evict_ns(store.ns.value)
            except beluga.Error as e:
                log.warning("beluga: reset_cache could not evict namespace 0x%x (%s); "
                            "EVICT needs an admin handle", store.ns.value, e)

    def get_stats(self):
        return None

    def get_load_source(self, key, req_context):
        cache_hit = engine_module("vllm.v1.metrics.cache_hit_source")
        return cache_hit.CacheHitSource.EXTERNAL_UNSPECIFIED if cache_hit else None

    def shutdown(self):
        with self._lock:
            for rid, st in list(self._requests.items()):
                for table, drop in ((st.pins, "release_blocks"), (st.loading, "release_blocks"),
                                    (st.storing, "free_blocks")):
                    for key, offs in table.items():
                        getattr(self._store_key(key)[0], drop)(offs)
                    table.clear()
            self._requests.clear()

    def outstanding(self):
        """(pinned, loading, storing) entries over all requests: the harness
        checks these reach zero."""
        with self._lock:
            return tuple(sum(len(getattr(s, t)) for s in self._requests.values())
                         for t in ("pins", "loading", "storing"))


# ---- worker (model runner process) -------------------------------------

def _as_numpy(t):
    if isinstance(t, np.ndarray):
        return t
    if hasattr(t, "numpy"):
        if getattr(t, "is_cuda", False):
            raise NotImplementedError("the beluga worker copies CPU tensors; GPU KV caches "
                                      "need the CUDA gather/scatter path")
        return t.numpy()
    return np.asarray(t)


class BelugaOffloadingWorkerImpl:
    """Copies offloaded blocks between the engine's canonical KV pages and
    pool blocks.  ``kv_caches`` is vLLM's CanonicalKVCaches of this worker.

    A block holds every KV head (a parallelism-free page, RFC #42082): TP
    rank ``tp_rank`` of ``tp_size`` writes and reads its own heads of it, so
    the workers of one scheduler fill one ALLOCATED block between
    prepare_store and complete_store, and instances with different TP sizes
    share blocks.  MLA pages (one latent per token) are the same on every
    rank."""

    def __init__(self, stores, kv_caches, blocks_per_chunk=1, tp_rank=0, tp_size=1):
        self._stores = stores
        self._types = engine_types()
        self._bpc = blocks_per_chunk
        self._finished = []
        self._lock = threading.Lock()
        self._pages = {}
        if not 0 <= tp_rank < tp_size:
            raise ValueError(f"tp_rank {tp_rank} is outside 0..{tp_size - 1}")
        for group, refs in enumerate(kv_caches.group_data_refs):
            store = stores.get(group)
            if store is None:
                continue
            lay = store.layout
            s = lay.spec
            sub = lay.tokens // blocks_per_chunk
            if sub * blocks_per_chunk != lay.tokens:
                raise ValueError(f"tokens_per_block {lay.tokens} is not blocks_per_chunk "
                                 f"{blocks_per_chunk} GPU blocks")
            if s.is_mla:
                heads = None
                page_shape = (sub, s.latent_dim)
            else:
                H = s.num_kv_heads
                if H % tp_size and tp_size % H:
                    raise ValueError(f"num_kv_heads {H} cannot be split over tp_size {tp_size}")
                local = max(1, H // tp_size)
                first = tp_rank * H // tp_size
                heads = slice(first, first + local)
                page_shape = (2, sub, local, s.head_dim)
            per_layer = int(np.prod(page_shape)) * lay.itemsize
            if len(refs) == 1 and refs[0].page_size_bytes == lay.layers * per_layer:
                t = _as_numpy(kv_caches.tensors[refs[0].tensor_idx].tensor)
                page = t.reshape(t.shape[0], -1)[:, :lay.layers * per_layer]
                pages = ("cross", page.view(lay.dtype).reshape(
                    (t.shape[0], lay.layers) + page_shape))
            elif len(refs) == lay.layers and all(r.page_size_bytes == per_layer for r in refs):
                per = []
                for r in refs:
                    t = _as_numpy(kv_caches.tensors[r.tensor_idx].tensor)
                    page = t.reshape(t.shape[0], -1)[:, :per_layer]
                    per.append(page.view(lay.dtype).reshape((t.shape[0],) + page_shape))
                pages = ("layer", per)
            else:
                raise ValueError(
                    f"KV cache group {group}: {len(refs)} page refs of "
                    f"{[r.page_size_bytes for r in refs]} bytes do not match the beluga layout "
                    f"({lay.layers} layers x {per_layer} bytes per GPU block on TP rank "
                    f"{tp_rank} of {tp_size}); check num_layers, num_kv_heads, head_dim, dtype "
                    f"and tp_size in the extra config")
            if tp_size > 1 and lay.parts > 1 and heads is not None:
                raise ValueError(
                    f"a block of {lay.block_bytes} bytes spans {lay.parts} pool blocks, which "
                    f"{tp_size} TP workers cannot fill together; use fewer tokens_per_block "
                    f"(at most {lay.pool_block_size // lay.bytes_per_token}) or larger pool blocks")
            self._pages[group] = pages + (sub, heads)

    @staticmethod
    def _slice(blk, layer, tok, heads):
        """The part of a block that one GPU page (of one layer, or all)
        corresponds to."""
        if heads is None:                                    # MLA: (L, T, latent)
            return blk[:, tok] if layer is None else blk[layer, tok]
        return blk[:, :, tok, heads] if layer is None else blk[layer, :, tok, heads]

    def _blocks(self, spec, store):
        m = store.layout.parts
        n = len(spec.offsets) // m
        return [spec.offsets[i * m:(i + 1) * m] for i in range(n)]

    def _copy(self, pool_spec, gpu_spec, to_pool):
        group = pool_spec.group
        store = self._stores[group]
        kind, pages, sub, heads = self._pages[group]
        lay = store.layout
        bpc = self._bpc
        # The first GPU block may start inside an offloaded block (loads of
        # a prefix that is not chunk-aligned): block_indices says where.
        skip = int(gpu_spec.block_indices[0]) % bpc if len(gpu_spec.block_indices) else 0
        gpu_ids = [int(b) for b in gpu_spec.block_ids]
        blocks = self._blocks(pool_spec, store)
        if skip + len(gpu_ids) > len(blocks) * bpc:
            raise ValueError(f"{len(gpu_ids)} GPU blocks (skipping {skip}) do not fit "
                             f"{len(blocks)} offloaded blocks of {bpc}")
        single = lay.parts == 1
        raw = blk = None
        for g, gid in enumerate(gpu_ids):
            pos = g + skip
            b, j = divmod(pos, bpc)
            if g == 0 or j == 0:
                if g:
                    self._flush_block(store, blocks[b - 1], raw, to_pool, single)
                offs = blocks[b]
                raw = store.block_view(offs, writable=to_pool) if single else \
                    np.empty(lay.block_bytes, np.uint8)
                if not single and not to_pool:
                    store.read_block(offs, raw)
                blk = lay.view(raw)
            tok = slice(j * sub, (j + 1) * sub)
            if kind == "cross":
                dst = self._slice(blk, None, tok, heads)
                if to_pool:
                    dst[...] = pages[gid]
                else:
                    pages[gid][...] = dst
            else:
                for layer, v in enumerate(pages):
                    dst = self._slice(blk, layer, tok, heads)
                    if to_pool:
                        dst[...] = v[gid]
                    else:
                        v[gid][...] = dst
        if gpu_ids:
            self._flush_block(store, blocks[(len(gpu_ids) - 1 + skip) // bpc], raw, to_pool, single)

    @staticmethod
    def _flush_block(store, offs, raw, to_pool, single):
        if to_pool and not single:
            store.write_block(offs, raw)

    def _finish(self, job_id, ok, size):
        with self._lock:
            self._finished.append(self._types["TransferResult"](job_id, ok, size))

    def submit_store(self, job_id, src_spec, dst_spec):
        """GPU pages -> pool blocks (allocated by prepare_store)."""
        try:
            self._copy(dst_spec, src_spec, to_pool=True)
            self._finish(job_id, True, len(src_spec.block_ids))
        except Exception:
            log.exception("beluga: store job %s failed", job_id)
            self._finish(job_id, False, 0)
        return True

    def submit_load(self, job_id, src_spec, dst_spec):
        """Pool blocks (pinned by the manager) -> GPU pages.  A spec with
        blocks the manager could not pin fails as a whole, so vLLM
        recomputes those tokens instead of reading garbage."""
        if getattr(src_spec, "missing", 0):
            self._finish(job_id, False, 0)
            return True
        try:
            self._copy(src_spec, dst_spec, to_pool=False)
            self._finish(job_id, True, len(dst_spec.block_ids))
        except Exception:
            log.exception("beluga: load job %s failed", job_id)
            self._finish(job_id, False, 0)
        return True

    def get_finished(self):
        with self._lock:
            out, self._finished = self._finished, []
        return out

    def wait(self, job_ids):
        return              # copies complete inside submit_*

    def shutdown(self):
        return


def _tp_rank(extra):
    """This worker's TP rank: vLLM's, when it runs inside vLLM."""
    ps = engine_module("vllm.distributed.parallel_state")
    if ps is not None:
        try:
            return int(ps.get_tensor_model_parallel_rank())
        except Exception:
            pass
    return int(extra.get("tp_rank", 0))


# ---- spec ---------------------------------------------------------------

class BelugaOffloadingSpecImpl:
    """vLLM's OffloadingSpec for a Beluga pool.  ``pool`` (keyword, for
    tests and embedders) shares one open pool between manager and worker;
    vLLM itself passes only ``config``."""

    def __init__(self, config, pool=None):
        real = engine_module(_BASE)
        if real is not None and isinstance(self, real.OffloadingSpec):
            real.OffloadingSpec.__init__(self, config)
        extra = dict(getattr(config, "extra_config", None) or {})
        self.extra_config = extra
        self.blocks_per_chunk = int(extra.get("blocks_per_chunk",
                                              getattr(getattr(config, "cache", None),
                                                      "blocks_per_chunk", 1) or 1))
        self.pool = pool if pool is not None else beluga.Pool(extra.get("beluga_path"))
        spec = model_spec_from(extra)
        self.tp_size = spec.tp_size
        # One block holds every head; each TP worker fills its own (see the worker).
        layout = BlockLayout(replace(spec, tp_rank=0, tp_size=1), self.pool.block_size)
        self.store = KVStore(self.pool, layout, salt=extra.get("salt"), shared=extra.get("shared"),
                             key_scheme=extra.get("key_scheme", "sha256"))
        self.stores = {0: self.store}
        self._events = bool(extra.get("kv_events", getattr(config, "enable_kv_cache_events", False)))
        self._manager = None

    def get_manager(self):
        if self._manager is None:
            self._manager = _cls("BelugaOffloadingManager")(self.stores, events=self._events)
        return self._manager

    def get_worker(self, kv_caches, tp_rank=None):
        if tp_rank is None:
            tp_rank = _tp_rank(self.extra_config)
        return _cls("BelugaOffloadingWorker")(self.stores, kv_caches, self.blocks_per_chunk,
                                              tp_rank, self.tp_size)

    def describe(self):
        return self.store.describe()


# ---- the public classes, built lazily on vLLM's base classes ----------

_PUBLIC = {
    "BelugaOffloadingSpec": (BelugaOffloadingSpecImpl, "OffloadingSpec"),
    "BelugaOffloadingManager": (BelugaOffloadingManagerImpl, "OffloadingManager"),
    "BelugaOffloadingWorker": (BelugaOffloadingWorkerImpl, "OffloadingWorker"),
    "BelugaLoadStoreSpec": (BelugaLoadStoreSpecImpl, "LoadStoreSpec"),
}
_built = {}


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _built:
        impl, base_name = _PUBLIC[name]
        base = engine_module(_BASE)
        bases = (impl, getattr(base, base_name)) if base and hasattr(base, base_name) else (impl,)
        _built[name] = type(name, bases, {"__module__": __name__, "__doc__": impl.__doc__})
    return _built[name]


_cls = __getattr__
