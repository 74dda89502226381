# SPDX-License-Identifier: LGPL-2.1-or-later
"""vLLM KV offloading over a Beluga pool (``vllm/v1/kv_offload/base.py``),
tested with vLLM 0.33.0 (tests/engines/vllm).

vLLM loads it through its OffloadingConnector and ``OffloadingSpecFactory``::

    PYTHONHASHSEED=0 vllm serve <model> --kv-transfer-config '{
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "BelugaOffloadingSpec",
            "spec_module_path": "beluga.adapters.vllm", "canonical_layout": true,
            "beluga_path": "/dev/beluga"}}'

The model, its KV dtype, the KV cache groups and their block sizes, the
chunk size, the parallelism and the KV cache layout all come from vLLM's
``OffloadingConfig``; the extra config only says where the pool is
(``beluga_path``), and optionally ``salt``, ``shared`` and ``model`` (the id
that names the weights in the namespace, by default vLLM's model name).

What a pool block holds.  One key per offloaded chunk (``blocks_per_chunk``
GPU blocks) of one KV cache group.  The chunk holds, layer by layer in the
group's order and GPU block by GPU block, vLLM's *canonical pages*: the
page of one GPU block without parallelism (every KV head), in the byte
format vLLM names ``canonical_format_id(kv_cache_layout)``.  Each worker
copies the byte runs vLLM's ``CanonicalKVCacheRef.mapping`` gives it (a TP
rank its heads; ranks holding the same bytes take turns), so the workers of
one engine fill a block together and, where vLLM certifies the pages
parallelism-agnostic, engines of any TP size share blocks.  A page never
straddles two pool blocks; a chunk larger than a pool block spans ``parts``
pool blocks (``keys.part_keys``).

Scheduler side (``BelugaOffloadingManager``): ``lookup`` pins the block it
answers HIT for (one pin per request and key), so the load vLLM then asks
for can always be served; a block that cannot be pinned is a MISS, before
any job exists.  ``prepare_store`` allocates, ``complete_store`` publishes.
``reset_cache`` moves this instance to a fresh namespace (and evicts the old
one where the handle may), and frees what jobs in flight still hold once
vLLM reports them flushed (``on_reset_flushed``).  Evictions are reported:
the pool's ALLOC names the (namespace, key) of each block it evicted
(``KVStore.allocate``'s ``evicted``), and the manager maps those of the
chunks it published back to their OffloadKeys (a chunk once, whichever of
its parts went), which ``prepare_store`` returns as ``evicted_keys`` and
``take_events`` as a ``removed=True`` event.  Blocks evicted otherwise
(another engine's allocation, EVICT, DETACH) are not reported; a lookup
stays the authority.

Worker side (``BelugaOffloadingWorker``): the same copy plan runs on the
GPU through beluga._cuda (libbeluga-kvcopy, one kernel launch per run of the
mapping, on CUDA streams, jobs reported by ``get_finished`` as their events
complete) and on the CPU with numpy, for KV caches in host memory (tests).
vLLM has no path for a failed job (its worker asserts success), so a copy
that cannot be done raises an error naming the cause.

On a shared pool the GPU path registers the mapping under a device range
(``PoolMap.cuda_register()``; beluga-watchdogd must run on the host), and
watches its eventfd: once the host fenced itself, the worker finishes the
copies in flight, unregisters the memory from CUDA, unmaps and closes the
pool within W (``_DeviceLease``), so that the host is not reset; the jobs
after that fail, naming the fence.
"""

from array import array
from collections import OrderedDict
from dataclasses import dataclass
import logging
import time

import numpy as np

import beluga
from beluga import keys as K
from beluga.adapters import engine_module
from beluga.store import KVStore

log = logging.getLogger(__name__)
_BASE = "vllm.v1.kv_offload.base"
_CANONICAL = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.canonical_mapping"

# Extra-config keys of the adapter's earlier versions: the values come from
# vLLM's OffloadingConfig now, and a second source could only disagree.
_FROM_VLLM = {
    "num_layers": "the KV cache groups' layers", "num_kv_heads": "the model's KV heads",
    "head_dim": "the model's head size", "latent_dim": "the model's MLA latent",
    "dtype": "the KV cache dtype", "tokens_per_block": "--block-size",
    "tp_size": "--tensor-parallel-size", "tp_rank": "the worker's rank",
    "kv_events": "--kv-events-config",
}


def _vllm(module=_BASE):
    m = engine_module(module)
    if m is None:
        raise ImportError(f"beluga.adapters.vllm needs vLLM ({module} did not import): "
                          f"install vLLM 0.33 in this environment")
    return m


class BelugaTransferError(RuntimeError):
    """A copy between vLLM's KV cache and the pool that cannot be done."""


# ---- where each page of a chunk lies in the pool --------------------------

class ChunkLayout:
    """The pool side of one offloaded chunk: ``parts`` pool blocks holding
    vLLM's canonical pages (the layout KVStore needs)."""

    def __init__(self, parts, tokens, pool_block_size):
        self.parts = int(parts)
        self.tokens = int(tokens)
        self.pool_block_size = int(pool_block_size)
        self.block_bytes = self.parts * self.pool_block_size
        self.part_bytes = self.pool_block_size
        self.bytes_per_token = max(1, self.block_bytes // self.tokens)
        self.dtype = np.dtype(np.uint8)
        self.itemsize = 1
        self.shape = (self.block_bytes,)

    def part_ranges(self):
        return [(i * self.pool_block_size,
                 min(self.pool_block_size, self.block_bytes - i * self.pool_block_size))
                for i in range(self.parts)]

    def view(self, buf):
        raw = buf.reshape(-1).view(np.uint8) if isinstance(buf, np.ndarray) else \
            np.frombuffer(buf, np.uint8)
        return raw[:self.block_bytes]

    def describe(self):
        return (f"vLLM canonical pages of {self.tokens} tokens in {self.parts} pool block(s) "
                f"of {self.pool_block_size} bytes")


class BelugaLoadStoreSpecImpl:
    """Pool blocks of a load or store job: per KV cache group id, ``parts``
    offsets per chunk, in the order of the job's keys."""

    def __init__(self, blocks=None):
        self.blocks = blocks if blocks is not None else {}

    def add(self, group, offsets):
        self.blocks.setdefault(group, array("Q")).extend(offsets)

    def __repr__(self):
        return "BelugaLoadStoreSpec({%s})" % ", ".join(
            f"{g}: {list(o)}" for g, o in self.blocks.items())


def split_offload_key(key):
    """(block_hash, group id) of a vLLM OffloadKey (hash || u32 BE group)."""
    key = bytes(key)
    return key[:-4], int.from_bytes(key[-4:], "big")


# ---- manager (scheduler process) -------------------------------------------

class _RequestState:
    __slots__ = ("pins", "loading", "storing", "finished")

    def __init__(self):
        self.pins = {}       # OffloadKey -> (store, offsets) pinned by lookup
        self.loading = {}    # OffloadKey -> (store, offsets) handed to prepare_load
        self.storing = {}    # OffloadKey -> (store, offsets) allocated by prepare_store
        self.finished = False


class _PublishedChunks:
    """The chunks this manager published, by the (namespace, pool key) of
    each of their pool blocks, so that the keys an ALLOC evicted map back
    to vLLM's OffloadKeys.  Bounded by the pool's blocks (one entry each):
    past that, the oldest entries go, as their blocks are the likeliest to
    have left the pool unreported already."""

    def __init__(self, capacity):
        self._capacity = max(1, int(capacity))
        self._by_block = OrderedDict()   # (ns, pool key) -> (OffloadKey, its blocks)

    def add(self, ns, store_key, parts, offload_key):
        blocks = tuple((ns, k) for k in K.split(K.part_keys(store_key, parts)))
        for block in blocks:
            self._by_block[block] = (offload_key, blocks)
            self._by_block.move_to_end(block)
        while len(self._by_block) > self._capacity:
            self._by_block.popitem(last=False)

    def take_evicted(self, evicted):
        """The OffloadKeys of the chunks ``evicted`` (``(ns, key)`` pairs,
        any namespace's) took a block of, each once; they are forgotten."""
        gone = []
        for block in evicted:
            entry = self._by_block.get(block)
            if entry is None:
                continue
            offload_key, blocks = entry
            for b in blocks:
                self._by_block.pop(b, None)
            gone.append(offload_key)
        return gone

    def clear(self):
        self._by_block.clear()

    def __len__(self):
        return len(self._by_block)


class BelugaOffloadingManagerImpl:
    """vLLM calls it with its ``manager.lock`` held (no internal lock)."""

    def __init__(self, spec):
        self._spec = spec
        self._base = _vllm()
        self._requests = {}
        self._events = [] if spec.kv_events_config.enable_kv_cache_events else None
        self._draining = []      # (store, offsets, free?) held by jobs a reset dropped
        self._published = _PublishedChunks(spec.pool.stats()["total_blocks"])

    def _state(self, ctx):
        st = self._requests.get(ctx.req_id)
        if st is None:
            st = self._requests[ctx.req_id] = _RequestState()
        return st

    def _maybe_drop(self, ctx):
        st = self._requests.get(ctx.req_id)
        if st is not None and st.finished and not (st.pins or st.loading or st.storing):
            del self._requests[ctx.req_id]

    def _store_key(self, key):
        block_hash, group = split_offload_key(key)
        return self._spec.stores.get(group), K.digest16(block_hash)

    def on_new_request(self, req_context):
        self._state(req_context)
        return self._base.RequestOffloadingContext()

    def lookup(self, key, req_context):
        LR = self._base.LookupResult
        st = self._state(req_context)
        if key in st.pins or key in st.loading:
            return LR.HIT
        store, k = self._store_key(key)
        if store is None:
            return LR.MISS
        pinned = store.pin(k)
        if pinned.count == 0:
            return LR.MISS
        st.pins[key] = (store, pinned.detach())   # the request owns the pin now
        return LR.HIT

    def prepare_load(self, keys, req_context):
        st = self._state(req_context)
        spec = _cls("BelugaLoadStoreSpec")()
        for key in keys:
            held = st.pins.pop(key, None) or st.loading.get(key)
            if held is None:
                store, k = self._store_key(key)
                pinned = store.pin(k) if store is not None else None
                if pinned is None or pinned.count == 0:
                    raise BelugaTransferError(
                        f"beluga: vLLM asked to load block {bytes(key).hex()} of request "
                        f"{req_context.req_id}, which its lookup did not answer HIT and which "
                        f"is not in the pool: the scheduler broke the lookup -> prepare_load "
                        f"contract (report this with the vLLM version)")
                held = (store, pinned.detach())
            st.loading[key] = held
            spec.add(split_offload_key(key)[1], held[1])
        return spec

    def complete_load(self, keys, req_context):
        st = self._state(req_context)
        for key in keys:
            held = st.loading.pop(key, None)
            if held is not None:
                held[0].release_blocks(held[1])
        self._maybe_drop(req_context)

    def prepare_store(self, keys, req_context):
        st = self._state(req_context)
        by_group = {}
        for key in keys:
            by_group.setdefault(split_offload_key(key)[1], []).append(key)
        spec = _cls("BelugaLoadStoreSpec")()
        stored, evicted, wanted = [], [], 0
        for group, group_keys in by_group.items():
            store = self._spec.stores.get(group)
            if store is None:
                continue
            fresh = [key for key in group_keys if key not in st.storing]
            present = store.lookup_many([self._store_key(key)[1] for key in fresh])
            todo = [key for key, hits in zip(fresh, present) if hits == 0]
            wanted += len(todo)
            alloc = store.allocate(len(todo))
            evicted += self._published.take_evicted(alloc.evicted)
            offsets = alloc.detach()           # the request state owns them now
            m = store.layout.parts
            for i, key in enumerate(todo[:alloc.count]):
                st.storing[key] = (store, offsets[i * m:(i + 1) * m])
                stored.append(key)
            spec.add(group, offsets)
        if evicted and self._events is not None:
            self._events.append(self._base.OffloadingEvent(
                keys=evicted, medium=self._base.Medium.CPU, removed=True))
        if wanted and not stored:
            return None                        # the pool has no room
        return self._base.PrepareStoreOutput(stored, spec, evicted)

    def complete_store(self, keys, req_context, success=True):
        st = self._state(req_context)
        by_store = {}
        for key in keys:
            held = st.storing.pop(key, None)
            if held is None:
                continue
            store, offsets = held
            entry = by_store.setdefault(id(store), (store, array("Q"), [], []))
            entry[1].extend(offsets)
            entry[2].append(self._store_key(key)[1])
            entry[3].append(key)
        for store, offsets, store_keys, offload_keys in by_store.values():
            if not success:
                store.free_blocks(offsets)
                continue
            res = store.publish_blocks(offsets, K.join(store_keys))
            failed = set(res.failed)
            published = [k for i, k in enumerate(offload_keys) if i not in failed]
            for i, key in enumerate(offload_keys):
                if i not in failed:
                    self._published.add(store.ns.value, store_keys[i], store.layout.parts, key)
            if self._events is not None:
                self._events.append(self._base.OffloadingEvent(
                    keys=published, medium=self._base.Medium.CPU, removed=False))
        self._maybe_drop(req_context)

    def on_request_finished(self, req_context):
        st = self._requests.get(req_context.req_id)
        if st is None:
            return
        st.finished = True
        for store, offsets in st.pins.values():     # looked up, never loaded
            store.release_blocks(offsets)
        st.pins.clear()
        self._maybe_drop(req_context)

    def take_events(self):
        if not self._events:
            return ()
        events, self._events = self._events, []
        return events

    def reset_cache(self):
        """Drop every block this instance stored or may load.  Jobs in
        flight still read or write their blocks: those are released or freed
        in on_reset_flushed, when vLLM says the workers are done with them."""
        for st in self._requests.values():
            for store, offsets in st.pins.values():
                store.release_blocks(offsets)
            self._draining += [(s, o, False) for s, o in st.loading.values()]
            self._draining += [(s, o, True) for s, o in st.storing.values()]
            st.pins.clear(), st.loading.clear(), st.storing.clear()
        self._requests = {rid: st for rid, st in self._requests.items() if not st.finished}
        self._published.clear()                # vLLM forgets them too; new namespaces
        self._spec.next_generation()

    def on_reset_flushed(self):
        draining, self._draining = self._draining, []
        for store, offsets, free in draining:
            (store.free_blocks if free else store.release_blocks)(offsets)

    def shutdown(self):
        for st in self._requests.values():
            for table, free in ((st.pins, False), (st.loading, False), (st.storing, True)):
                self._draining += [(s, o, free) for s, o in table.values()]
                table.clear()
        self._requests.clear()
        self.on_reset_flushed()


# ---- worker (model runner process) ----------------------------------------

@dataclass
class _Call:
    """One kvcopy launch's geometry: ``block_tokens`` rows of ``row_bytes``
    per pair, GPU row r of virtual block v at ``gpu_base + v *
    gpu_block_stride + r * gpu_token_stride``, pool row r at ``pool_offset +
    r * pool_token_stride`` (one CopyRun of vLLM's mapping, for every layer
    with that run)."""
    gpu_base: int             # device address (CPU: of host memory)
    storage_base: int         # start of the tensor storage gpu_base lies in
    storage_bytes: int
    gpu_block_stride: int
    gpu_num_blocks: int       # virtual blocks: a layer's block b is v = first + b
    row_bytes: int
    block_tokens: int
    gpu_token_stride: int
    pool_token_stride: int
    pool_shift: int           # the run's canonical offset inside the page
    layers: list              # (layer index, first virtual block, num_writers, writer_index)
    tensor: object            # keeps the storage alive; .numpy() source on the CPU


class _GroupPlan:
    """How one KV cache group's pages map to a chunk's pool bytes."""

    def __init__(self, group_id, num_blocks, placement, calls, chunk_bytes):
        self.group_id = group_id
        self.num_blocks = num_blocks
        self.placement = placement     # [layer][sub-block] -> (part, offset in part)
        self.calls = calls
        self.chunk_bytes = chunk_bytes


def _place_pages(page_sizes, bpc, pool_block_size, parts):
    """Layer by layer, sub-block by sub-block, each page in the first pool
    block (part) with room for it whole.  None when they do not fit."""
    placement, part, used = [], 0, 0
    for size in page_sizes:
        if size > pool_block_size:
            return None
        row = []
        for _ in range(bpc):
            if used + size > pool_block_size:
                part, used = part + 1, 0
            row.append((part, used))
            used += size
        placement.append(row)
    return placement if part < parts else None


def _plan_group(group_pos, group_cfg, refs, kv_caches, store, bpc, agnostic):
    tensors = [kv_caches.tensors[r.tensor_idx].tensor for r in refs]
    for i, r in enumerate(refs):
        if r.mapping is None:
            raise ValueError(
                f"beluga: vLLM gave no canonical page mapping for layer {i} of KV cache group "
                f"{group_cfg.group_id} (a cross-layer packed KV cache, or a worker group that is "
                f"not tensor x prefill-context parallel): the adapter stores canonical pages "
                f"only; use a layer-outermost kv_cache_layout (VLLM_KV_CACHE_LAYOUT=LBNHC)")
        if agnostic and not r.mapping.parallelism_agnostic:
            raise ValueError(
                f"beluga: vLLM certified this configuration parallelism-agnostic, but the "
                f"canonical page of layer {i} of group {group_cfg.group_id} depends on the "
                f"parallelism; refusing rather than sharing wrong blocks across TP sizes")
    num_blocks = int(tensors[0].shape[0])
    pages = [r.mapping.canonical_page_size_bytes for r in refs]
    lay = store.layout
    placement = _place_pages(pages, bpc, lay.pool_block_size, lay.parts)
    if placement is None:
        raise ValueError(
            f"beluga: a chunk of KV cache group {group_cfg.group_id} ({len(pages)} canonical "
            f"pages of up to {max(pages)} bytes, {bpc} per layer) does not fit {lay.parts} pool "
            f"block(s) of {lay.pool_block_size} bytes with no page split: use a pool with larger "
            f"blocks (belugactl attach --block-size) or a smaller blocks_per_chunk")
    calls = {}
    for i, (r, t) in enumerate(zip(refs, tensors)):
        storage = t.untyped_storage()
        base, stride = storage.data_ptr(), int(t.stride(0)) * t.element_size()
        residue = (t.data_ptr() - base) % stride
        first = (t.data_ptr() - base - residue) // stride
        for run in r.mapping.runs:
            k = (base, stride, residue, run)
            c = calls.get(k)
            if c is None:
                c = calls[k] = _Call(
                    gpu_base=base + residue + run.local_offset, storage_base=base,
                    storage_bytes=storage.nbytes(), gpu_block_stride=stride, gpu_num_blocks=0,
                    row_bytes=run.fragment_size, block_tokens=run.num_fragments,
                    gpu_token_stride=run.local_stride, pool_token_stride=run.canonical_stride,
                    pool_shift=run.canonical_offset, layers=[], tensor=t)
            c.layers.append((i, first, r.mapping.num_writers, r.mapping.writer_index))
            c.gpu_num_blocks = max(c.gpu_num_blocks, first + num_blocks)
    return _GroupPlan(group_cfg.group_id, num_blocks, placement, list(calls.values()),
                      sum(pages) * bpc)


class _HostCopier:
    """The copy plan on KV caches in host memory (numpy over the tensors'
    storage), synchronously: a job is finished when submit returns."""

    def __init__(self, pool_map):
        import torch
        self._torch = torch
        self._pool = np.frombuffer(pool_map, np.uint8)
        self._done = []

    def run(self, job_id, calls, to_pool):
        start, moved = time.perf_counter(), 0
        for call, pairs in calls:
            flat = self._torch.empty(0, dtype=self._torch.uint8).set_(
                call.tensor.untyped_storage(), 0, (call.storage_bytes,), (1,)).numpy()
            rows = np.lib.stride_tricks.as_strided(
                flat[call.gpu_base - call.storage_base:],
                (call.gpu_num_blocks, call.block_tokens, call.row_bytes),
                (call.gpu_block_stride, call.gpu_token_stride, 1), writeable=True)
            for v, p in pairs:
                pool_rows = np.lib.stride_tricks.as_strided(
                    self._pool[p:], (call.block_tokens, call.row_bytes),
                    (call.pool_token_stride, 1), writeable=True)
                if to_pool:
                    pool_rows[...] = rows[v]
                else:
                    rows[v][...] = pool_rows
            moved += len(pairs) * call.block_tokens * call.row_bytes
        self._done.append((job_id, moved, time.perf_counter() - start))

    def finished(self):
        done, self._done = self._done, []
        return done

    def wait(self, job_ids):
        return

    def close(self):
        return


def kvcopy_arguments(call, pairs, pool_map, stream=0):
    """beluga._cuda.gather/scatter's arguments for one call of a job's copy
    plan: one layer (the call's base address), one row set (num_kv 1), the
    pairs as virtual GPU blocks and pool offsets."""
    return dict(gpu_layers=[call.gpu_base], pool_base=pool_map.address,
                pairs=np.asarray(pairs, np.uint64).reshape(-1, 2),
                block_tokens=call.block_tokens, row_bytes=call.row_bytes, gpu_kv_stride=0,
                gpu_block_stride=call.gpu_block_stride, gpu_num_blocks=call.gpu_num_blocks,
                pool_length=len(pool_map), num_kv=1, gpu_token_stride=call.gpu_token_stride,
                pool_token_stride=call.pool_token_stride, stream=stream, sync=False)


class _DeviceLease:
    """The device lease of a GPU that registered a shared pool's mapping
    (PoolMap.cuda_register() declared the pool's device range): when the
    host fences itself, the range's eventfd fires and the GPU must let go
    within W (pool.device_fence_ms), or the host's watchdog resets it.
    check() looks without blocking; the first time it sees the fence it
    lets go: drain() (the copies in flight), cudaHostUnregister, unmap,
    close the pool (the range ends with its file)."""

    def __init__(self, pool, pool_map):
        self._pool, self._map = pool, pool_map
        self.fence_ms = pool.device_fence_ms
        self.released = False

    @classmethod
    def of(cls, pool, pool_map):
        """A lease to watch, or None where no fence can come (not shared)."""
        return cls(pool, pool_map) if pool.device_eventfd is not None else None

    def check(self, drain):
        if self.released:
            return True
        # Closed by its owner: the range ended with the file, nothing to let go of.
        if self._pool.closed or not self._pool.device_fenced():
            return False
        self.released = True
        start = time.monotonic()
        log.error("beluga: this host fenced itself from the shared pool %s: the GPU lets go "
                  "of it (W = %d ms)", self._pool.path, self.fence_ms)
        try:
            drain()
        finally:
            try:
                self._map.cuda_unregister()
                self._map.close()
                self._pool.close()
            except Exception as e:      # the range stays: the watchdog will reset the host
                log.critical("beluga: letting go of %s failed (%s: %s): the host's watchdog "
                             "resets it within %d ms", self._pool.path, type(e).__name__, e,
                             self.fence_ms)
                raise
        log.error("beluga: let go of %s in %.0f ms", self._pool.path,
                  (time.monotonic() - start) * 1000)
        return True

    def error(self, what):
        return BelugaTransferError(
            f"beluga: {what}: this host fenced itself from the shared pool {self._pool.path} "
            f"and the worker let go of it; restart the engine once the host rejoined the pool")


class _CudaCopier:
    """The copy plan through beluga._cuda (libbeluga-kvcopy): one kernel
    launch per call on a stream per direction; a store first waits for the
    stream the model wrote the KV on.  A job is finished when its event has
    completed."""

    def __init__(self, pool_map, device):
        import torch
        from beluga import _cuda
        _cuda.device_count()                   # beluga.NoCuda, naming what is missing
        self._torch, self._cuda, self._device = torch, _cuda, device
        self._map = pool_map
        if not pool_map.cuda_registered:
            pool_map.cuda_register()
        # A shared pool: the fence's signal (None elsewhere).
        self._lease = _DeviceLease.of(pool_map.pool, pool_map)
        self._drained = []
        self._streams = {True: torch.cuda.Stream(device), False: torch.cuda.Stream(device)}
        self._pending = {}

    def _drain(self):
        for job_id, (event, moved, start) in list(self._pending.items()):
            event.synchronize()
            self._drained.append((job_id, moved, time.perf_counter() - start))
        self._pending.clear()

    def _fenced(self):
        return self._lease is not None and self._lease.check(self._drain)

    def run(self, job_id, calls, to_pool):
        if self._fenced():
            raise self._lease.error(f"job {job_id}")
        torch = self._torch
        stream = self._streams[to_pool]
        if to_pool:
            stream.wait_stream(torch.cuda.current_stream(self._device))
        moved = 0
        copy = self._cuda.gather if to_pool else self._cuda.scatter
        for call, pairs in calls:
            copy(**kvcopy_arguments(call, pairs, self._map, stream.cuda_stream))
            moved += len(pairs) * call.block_tokens * call.row_bytes
        event = torch.cuda.Event()
        event.record(stream)
        self._pending[job_id] = (event, moved, time.perf_counter())

    def finished(self):
        self._fenced()
        done, self._drained = self._drained, []
        for job_id, (event, moved, start) in list(self._pending.items()):
            if event.query():
                del self._pending[job_id]
                done.append((job_id, moved, time.perf_counter() - start))
        return done

    def wait(self, job_ids):
        for job_id in job_ids:
            entry = self._pending.get(job_id)
            if entry is not None:
                entry[0].synchronize()

    def close(self):
        for event, _, _ in self._pending.values():
            event.synchronize()
        self._pending.clear()


class BelugaOffloadingWorkerImpl:
    """Copies between this worker's KV cache pages and the pool blocks of
    a job, through vLLM's canonical page mapping (see the module doc)."""

    def __init__(self, spec, kv_caches):
        self._base = _vllm()
        self._spec = spec
        self._bpc = spec.blocks_per_chunk
        groups = spec.config.groups
        if len(kv_caches.group_data_refs) != len(groups):
            raise ValueError(f"beluga: vLLM registered {len(kv_caches.group_data_refs)} KV "
                             f"cache groups but configured {len(groups)}")
        agnostic = spec.config.parallel.is_parallelism_agnostic
        self._plans = [_plan_group(g, cfg, refs, kv_caches, spec.stores[cfg.group_id],
                                   self._bpc, agnostic)
                       for g, (cfg, refs) in enumerate(zip(groups, kv_caches.group_data_refs))]
        devices = {str(t.tensor.device) for t in kv_caches.tensors}
        if len(devices) != 1:
            raise ValueError(f"beluga: vLLM's KV cache lies on several devices {devices}")
        device = kv_caches.tensors[0].tensor.device
        self.pool_map = spec.pool.map()
        self._pool_block = spec.pool.block_size
        if device.type == "cpu":
            self._copier = _HostCopier(self.pool_map)
        elif device.type == "cuda":
            try:
                self._copier = _CudaCopier(self.pool_map, device)
            except beluga.NoCuda as e:
                raise ValueError(f"beluga: vLLM's KV cache is on {device}, but the CUDA copy "
                                 f"is unavailable: {e}") from e
        else:
            raise ValueError(f"beluga: vLLM's KV cache is on {device}; the adapter copies "
                             f"from CUDA devices and host memory only")

    def copy_plan(self, job_id, pool_spec, gpu_spec, store_side):
        """Every (call, [(virtual GPU block, pool offset)]) a job runs,
        checked against the KV cache and the pool."""
        ids = np.asarray(gpu_spec.block_ids, np.int64)
        sizes = gpu_spec.group_sizes
        out, start = [], 0
        for g, plan in enumerate(self._plans):
            n = int(sizes[g]) if sizes is not None else len(ids)
            gids = ids[start:start + n]
            start += n
            if n == 0:
                continue
            parts = self._spec.stores[plan.group_id].layout.parts
            offsets = np.asarray(pool_spec.blocks.get(plan.group_id, ()), np.uint64)
            bad = gids[(gids < 0) | (gids >= plan.num_blocks)]
            if bad.size:
                raise BelugaTransferError(
                    f"beluga: job {job_id}: GPU block {int(bad[0])} of KV cache group "
                    f"{plan.group_id} is outside vLLM's KV cache of {plan.num_blocks} blocks")
            pos = int(gpu_spec.block_indices[g]) % self._bpc + np.arange(n)
            chunk, sub = pos // self._bpc, pos % self._bpc
            if (int(chunk[-1]) + 1) * parts > len(offsets):
                raise BelugaTransferError(
                    f"beluga: job {job_id}: {n} GPU blocks of group {plan.group_id} need "
                    f"{int(chunk[-1]) + 1} chunks, the pool side has {len(offsets) // parts}")
            if offsets.size and int(offsets.max()) + self._pool_block > len(self.pool_map):
                raise BelugaTransferError(
                    f"beluga: job {job_id}: pool offset {int(offsets.max())} lies outside the "
                    f"pool ({len(self.pool_map)} bytes)")
            page_id = offsets[chunk * parts] // np.uint64(self._pool_block) * \
                np.uint64(self._bpc) + sub.astype(np.uint64)
            for call in plan.calls:
                pairs = []
                for layer, first, writers, me in call.layers:
                    keep = np.ones(n, bool) if not store_side or writers == 1 else \
                        (page_id % np.uint64(writers)) == np.uint64(me)
                    where = plan.placement[layer]
                    part = np.array([where[s][0] for s in sub], np.int64)
                    inside = np.array([where[s][1] for s in sub], np.uint64)
                    pool = offsets[chunk * parts + part] + inside + np.uint64(call.pool_shift)
                    pairs += zip((first + gids[keep]).tolist(), pool[keep].tolist())
                if pairs:
                    out.append((call, pairs))
        if start != len(ids):
            raise BelugaTransferError(f"beluga: job {job_id}: {len(ids)} GPU blocks but the "
                                      f"groups' sizes add up to {start}")
        return out

    def _submit(self, job_id, pool_spec, gpu_spec, to_pool):
        kind = "store" if to_pool else "load"
        try:
            self._copier.run(job_id, self.copy_plan(job_id, pool_spec, gpu_spec, to_pool),
                             to_pool)
        except BelugaTransferError:
            raise
        except Exception as e:
            raise BelugaTransferError(
                f"beluga: {kind} job {job_id} failed ({type(e).__name__}: {e}); vLLM cannot "
                f"fail an offloading job, so the worker stops here") from e
        return True

    def submit_store(self, job_id, src_spec, dst_spec):
        """GPU pages -> the pool blocks prepare_store allocated."""
        return self._submit(job_id, dst_spec, src_spec, True)

    def submit_load(self, job_id, src_spec, dst_spec, expedited=False):
        """Pool blocks (pinned by lookup) -> GPU pages."""
        return self._submit(job_id, src_spec, dst_spec, False)

    def get_finished(self):
        TR = self._base.TransferResult
        return [TR(job_id, True, moved, seconds)
                for job_id, moved, seconds in self._copier.finished()]

    def wait(self, job_ids):
        self._copier.wait(job_ids)

    def shutdown(self):
        self._copier.close()


# ---- spec ------------------------------------------------------------------

def _refuse_unsupported(config, extra):
    given = sorted(k for k in _FROM_VLLM if k in extra)
    if given:
        raise ValueError(
            "beluga: kv_connector_extra_config sets " + ", ".join(given) + ": vLLM gives the "
            "adapter these itself (" + "; ".join(f"{k}: {_FROM_VLLM[k]}" for k in given) +
            "); remove them")
    if not config.canonical_layout:
        raise ValueError(
            'beluga: the adapter stores vLLM\'s canonical (parallelism-free) pages: add '
            '"canonical_layout": true to kv_connector_extra_config, so that vLLM certifies the '
            'pages and says when engines of other TP sizes may share them')
    par = config.parallel
    if par.pp_size > 1:
        raise ValueError(
            f"beluga: pipeline parallelism (pipeline_parallel_size {par.pp_size}) is not "
            f"supported: vLLM maps pages to canonical pages only within one tensor-parallel "
            f"group, and each stage holds other layers of a block; serve without "
            f"--pipeline-parallel-size")
    if par.dcp_size > 1 or par.pcp_size > 1:
        raise ValueError(
            f"beluga: context parallelism (decode {par.dcp_size}, prefill {par.pcp_size}) is "
            f"not supported (untested with vLLM's canonical mapping); serve without it")
    if not config.kv_cache_layout:
        raise ValueError("beluga: vLLM did not resolve kv_cache_layout before building the "
                         "offloading spec; the canonical page format depends on it")
    if config.worker_kv_bytes_per_block <= 0:
        raise ValueError("beluga: vLLM gave no KV bytes per block (worker_kv_bytes_per_block "
                         "0): the adapter cannot size pool blocks")


class BelugaOffloadingSpecImpl:
    """vLLM's OffloadingSpec for a Beluga pool; ``pool`` (for embedders)
    shares an open beluga.Pool."""

    def __init__(self, config, pool=None):
        _vllm().OffloadingSpec.__init__(self, config)
        extra = dict(config.extra_config or {})
        _refuse_unsupported(config, extra)
        self.page_format = _vllm(_CANONICAL).canonical_format_id(config.kv_cache_layout)
        self.pool = pool if pool is not None else beluga.Pool(extra.get("beluga_path"))
        self._salt, self._shared = extra.get("salt"), extra.get("shared")
        self._model = str(extra.get("model") or config.model.name)
        par = config.parallel
        # Canonical bytes of one GPU block, all layers: the worker's bytes
        # times the ranks holding different bytes.  An upper bound (vLLM
        # pads pages, replicated heads count once, and groups overlay one
        # allocation); the worker places the exact pages and checks.
        copies = 1 if config.replicated_layout else par.tp_size * par.pcp_size
        self._gpu_block_bound = config.worker_kv_bytes_per_block * copies
        self._generation = 0
        self.stores = self._open_stores()
        self._manager = None
        self._worker = None

    def _namespace(self, group, layout):
        c, par = self.config, self.config.parallel
        fields = [("engine", "vllm"), ("model", self._model), ("kv_dtype", c.model.dtype),
                  ("layout", "vllm-canonical-pages"), ("page_format", self.page_format),
                  ("kv_group", group.group_id), ("group_layers", len(group.layer_names)),
                  ("tokens_per_block", group.tokens_per_block),
                  ("blocks_per_chunk", self.blocks_per_chunk),
                  # Where pages lie depends on the page sizes (the model's),
                  # the pool's block size and the parts, not on the bound
                  # that sized the parts.
                  ("parts", layout.parts)]
        if not par.is_parallelism_agnostic:
            # Pages whose bytes depend on the parallelism: only engines of
            # the same topology share them.
            fields.append(("topology", f"tp{par.tp_size}"))
        if self._generation:
            fields.append(("reset_generation", self._generation))
        if self._salt is not None:
            fields.append(("salt", self._salt if isinstance(self._salt, str) else repr(self._salt)))
        return K.Namespace(fields)

    def _parts(self, group):
        """Pool blocks per chunk of ``group``: its pages (a layer's of each
        GPU block), at most the bound each, whole in a pool block."""
        layers = len(group.layer_names)
        page_bound = -(-self._gpu_block_bound // layers)
        per_part = max(1, self.pool.block_size // page_bound)
        return -(-layers * self.blocks_per_chunk // per_part)

    def _open_stores(self):
        stores = {}
        for group in self.config.groups:
            layout = ChunkLayout(self._parts(group), group.tokens_per_block * self.blocks_per_chunk,
                                 self.pool.block_size)
            stores[group.group_id] = KVStore(self.pool, layout, shared=self._shared,
                                             namespace=self._namespace(group, layout))
        return stores

    def next_generation(self):
        """After vLLM's reset_cache: evict this instance's blocks where the
        handle may, and from now on store and look up in a new namespace,
        so that no block from before the reset is served."""
        for store in self.stores.values():
            try:
                self.pool.evict_ns(store.ns.value)
            except beluga.Error as e:
                log.info("beluga: reset_cache could not evict namespace 0x%x (%s); its blocks "
                         "stay until the pool's LRU reclaims them, and are not served to "
                         "this instance again", store.ns.value, e)
        self._generation += 1
        self.stores = self._open_stores()

    def get_manager(self):
        if self._manager is None:
            self._manager = _cls("BelugaOffloadingManager")(self)
        return self._manager

    def get_worker(self, kv_caches):
        if self._worker is None:
            self._worker = _cls("BelugaOffloadingWorker")(self, kv_caches)
        return self._worker

    def describe(self):
        return "\n".join(s.describe() for s in self.stores.values())


# ---- the public classes, built lazily on vLLM's base classes -------------

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
        base = getattr(_vllm(), base_name)
        _built[name] = type(name, (impl, base), {"__module__": __name__, "__doc__": impl.__doc__})
    return _built[name]


_cls = __getattr__
