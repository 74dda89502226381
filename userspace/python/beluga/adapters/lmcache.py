# SPDX-License-Identifier: LGPL-2.1-or-later
"""LMCache storage plugin (``StoragePluginInterface``,
lmcache/v1/storage_backend/abstract_backend.py, LMCache 0.5.6).

Load it through LMCache's storage plugins (LMCache config)::

    storage_plugins: ["beluga"]
    extra_config:
      storage_plugin.beluga.module_path: beluga.adapters.lmcache
      storage_plugin.beluga.class_name: BelugaStoragePlugin
      beluga.path: /dev/beluga        # optional
      beluga.salt: tenant-a           # optional

LMCache allocates the chunks it stores in its LocalCPUBackend (this plugin's
``get_allocator_backend`` names it, and LMCache picks allocators by backend
name, never a plugin's), copies each chunk there from the GPU, and hands it to
``batched_submit_put_task``, which copies it into a pool block and PUBLISHes:
one host copy more than LMCache's own CPU tier. The plugin is therefore no
``AllocatorBackendInterface`` and has no ``allocate``: LMCache 0.5.6 would
never call it. Hits are LMCache TensorMemoryObjs whose tensor is the pinned
pool block itself (no copy); the last ``ref_count_down`` RELEASEs the pin.
The elements keep their bits in both directions (bfloat16 is viewed, never
converted by value).

``remove`` (LMCache's ``clear`` of given tokens, ``move``, ``compress``) is
the pool's EVICT, which needs an admin handle (a pool opened by root or with
CAP_SYS_ADMIN). Without one it answers False, as for an absent key, and says
once, as a warning, why and what to run instead.

Keys: the namespace comes from the CacheEngineKey's model_name, world_size
and worker_id plus the chunk geometry; the key is ``digest16(chunk_hash)``
(mixed with kv_group and request_configs when they are set).  A partial
trailing chunk (fewer tokens than chunk_size) is not stored: its token
count is not in its key, so no reader could size it.
"""

from concurrent.futures import Future
import logging
import threading

import numpy as np

import beluga
from beluga import keys as K
from beluga.adapters import engine_module
from beluga.layout import BlockLayout, ModelSpec
from beluga.store import KVStore

log = logging.getLogger(__name__)
_BASE = "lmcache.v1.storage_backend.abstract_backend"


def _done(value):
    f = Future()
    f.set_result(value)
    return f


def _flag(v):
    """A config flag: None (ask the pool), or a bool from bool/str."""
    if v is None or isinstance(v, bool):
        return v
    return str(v).lower() in ("1", "true", "yes", "on")


def _dtype_name(dt):
    name = str(dt)
    return name[len("torch."):] if name.startswith("torch.") else np.dtype(dt).name


def _to_engine_tensor(a, dtype_name):
    """A torch tensor over the array's memory, of the model's dtype: the
    elements numpy has no type for (bfloat16, float8) are held as unsigned
    integers of their width (beluga.layout), and viewed back here, never
    converted by value."""
    torch = engine_module("torch")
    if torch is None:
        return a
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # read-only views of pinned blocks
        t = torch.from_numpy(a)
    want = getattr(torch, dtype_name, None)
    return t.view(want) if want is not None and t.dtype != want else t


def _host_array(tensor, dtype):
    """The bytes of an engine tensor as a numpy array of ``dtype`` (the
    layout's storage dtype), same shape: bit for bit, whatever the tensor's
    element type (torch's .numpy() refuses bfloat16)."""
    if isinstance(tensor, np.ndarray):
        return tensor.view(dtype)
    t = tensor.detach().contiguous()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.reshape(-1).view(engine_module("torch").uint8).numpy().view(dtype).reshape(tuple(t.shape))


class BelugaMemoryObj:
    """A MemoryObj over pool memory.

    states: "pinned" (a pinned block; dropped -> RELEASE), "copy" (a host
    copy of a split block)."""

    def __init__(self, plugin, store, offsets, view, state, fmt=None):
        self._plugin, self._store, self.offsets = plugin, store, offsets
        self._np = view
        self.tensor = _to_engine_tensor(view, store.layout.spec.kv_dtype)
        self.state = state
        self.fmt = fmt
        self._refs = 1
        self._lock = threading.Lock()

    # MemoryObj API LMCache uses
    def get_shape(self):
        return self._np.shape

    def get_dtype(self):
        return self.tensor.dtype

    def get_size(self):
        return self._np.nbytes

    def get_memory_format(self):
        return self.fmt

    @property
    def byte_array(self):
        return memoryview(np.ascontiguousarray(self._np)).cast("B")

    def get_ref_count(self):
        return self._refs

    def ref_count_up(self):
        with self._lock:
            self._refs += 1

    def ref_count_down(self):
        with self._lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._drop()

    def is_valid(self):
        return self.state in ("pinned", "copy")

    def invalidate(self):
        self._drop()

    def _drop(self):
        state, self.state = self.state, "dropped"
        if state == "pinned":
            self._store.release_blocks(self.offsets)


class _ReleaseToPool:
    """The parent allocator of the LMCache MemoryObjs this plugin hands out:
    LMCache's TensorMemoryObj calls ``free(obj)`` at its last ref_count_down
    (or unpin, or when collected), which gives the pool blocks back."""

    def free(self, obj):
        if obj.is_valid():
            obj.invalidate()
            obj.beluga._drop()


class BelugaStoragePluginImpl:
    """LMCache storage plugin on a Beluga pool.  LMCache calls
    ``(dst_device, config, metadata, local_cpu_backend, loop)``; ``pool``
    (keyword) shares an open pool."""

    def __init__(self, dst_device="cpu", config=None, metadata=None, local_cpu_backend=None,
                 loop=None, pool=None):
        for base in type(self).__mro__[1:]:
            if base.__module__.startswith("lmcache."):   # the real interface, when present
                try:
                    base.__init__(self, dst_device, config, metadata, local_cpu_backend, loop)
                except TypeError:
                    base.__init__(self, dst_device)
                break
        self.dst_device, self.config, self.metadata = dst_device, config, metadata
        self.local_cpu_backend, self.loop = local_cpu_backend, loop
        extra = dict(getattr(config, "extra_config", None) or {})
        self.extra = extra
        self.pool = pool if pool is not None else beluga.Pool(extra.get("beluga.path"))
        self._stores = {}
        self._chunk_shapes = {}    # id(store) -> the shape of a chunk
        self._warned_remove = False
        self._pins = {}            # (ns, key16) -> [offsets, ...] taken by contains/pin
        self._lookup_pins = {}     # lookup_id -> {(ns, key16): [offsets, ...]}
        self._lock = threading.Lock()
        shape = tuple(int(x) for x in metadata.kv_shape)        # (L, 2|1, chunk, H|latent, D?)
        self._geometry = shape
        self._dtype = _dtype_name(metadata.kv_dtype)
        self.chunk_size = shape[2]

    # ---- keys and stores -------------------------------------------------

    def _store_for(self, key):
        ident = (key.model_name, int(key.world_size), int(key.worker_id))
        s = self._stores.get(ident)
        if s is None:
            L, kv, chunk = self._geometry[:3]
            rest = self._geometry[3:]
            common = dict(model=key.model_name, num_layers=L, dtype=self._dtype,
                          tokens_per_block=chunk)
            if kv == 1:                                      # KV_MLA_FMT
                spec = ModelSpec(num_kv_heads=1, head_dim=1, latent_dim=int(np.prod(rest)), **common)
            else:
                h, d = rest if len(rest) == 2 else (1, rest[0])
                spec = ModelSpec(num_kv_heads=h * ident[1], head_dim=d, tp_rank=ident[2],
                                 tp_size=ident[1], **common)
            s = KVStore(self.pool, BlockLayout(spec, self.pool.block_size),
                        salt=self.extra.get("beluga.salt"),
                        shared=_flag(self.extra.get("beluga.shared")))
            self._stores[ident] = s
        return s

    def _key16(self, key):
        k = K.digest16(key.chunk_hash)
        group = getattr(key, "kv_group", 0) or 0
        rc = getattr(key, "request_configs", None)
        if group or rc:
            tag = repr((int(group), sorted((rc or {}).items()))).encode()
            k = K.digest16(b"lmcache-key\0" + k + tag)
        return k

    def _memory_obj(self, store, offsets, raw, state, fmt=None):
        """A MemoryObj over one chunk: LMCache's own TensorMemoryObj where
        LMCache is installed (its storage manager reads ``.meta``, pins, and
        frees through the parent allocator), over a BelugaMemoryObj that holds
        the pool blocks; the BelugaMemoryObj alone elsewhere."""
        obj = BelugaMemoryObj(self, store, offsets, self._lmcache_view(store, raw), state, fmt)
        mm = engine_module("lmcache.v1.memory_management")
        if mm is None or not hasattr(obj.tensor, "element_size"):
            return obj
        torch = engine_module("torch")
        t = obj.tensor
        meta = mm.MemoryObjMetadata(shape=torch.Size(t.shape), dtype=t.dtype, address=0,
                                    phy_size=t.numel() * t.element_size(), ref_count=1,
                                    fmt=fmt if fmt is not None else mm.MemoryFormat.KV_2LTD)
        lm = mm.TensorMemoryObj(t.reshape(-1).view(torch.uint8), meta, _ReleaseToPool())
        lm.beluga = obj
        return lm

    def _lmcache_view(self, store, raw):
        """KV_2LTD [2, L, T, hidden] (or MLA [1, L, T, latent]) view of a
        canonical block, without a copy."""
        blk = store.layout.view(raw)
        if store.layout.spec.is_mla:
            return blk[None]
        L, _, T, H, D = blk.shape
        v = blk.transpose(1, 0, 2, 3, 4).reshape(2, L, T, H * D)
        assert v.base is not None and np.shares_memory(v, blk)
        return v

    # ---- allocator backend -------------------------------------------------

    def get_allocator_backend(self):
        """Where LMCache allocates the memory it puts into this plugin: its
        LocalCPUBackend (StorageManager copies each chunk into the backend this
        names, then hands it to batched_submit_put_task, which copies it into
        the pool). None in LMCache's scheduler role, which puts nothing."""
        return self.local_cpu_backend

    def _chunk_shape(self, store):
        """The shape of one chunk as LMCache holds it (KV_2LTD, or MLA's
        [1, L, T, latent]): the view of a block, worked out once per store."""
        shape = self._chunk_shapes.get(id(store))
        if shape is None:
            raw = np.zeros(store.layout.block_bytes, np.uint8)
            shape = self._chunk_shapes[id(store)] = tuple(self._lmcache_view(store, raw).shape)
        return shape

    # ---- puts ------------------------------------------------------------

    def batched_submit_put_task(self, keys, objs, transfer_spec=None, on_complete_callback=None):
        """Store each chunk (synchronously: the futures are done), then call
        ``on_complete_callback(key)`` for each key stored, as LMCache asks;
        an exception from the callback is logged, not raised."""
        futures = []
        for key, lm_obj in zip(keys, objs):
            store, k = self._store_for(key), self._key16(key)
            obj = getattr(lm_obj, "beluga", lm_obj)
            src = obj._np if isinstance(obj, BelugaMemoryObj) else \
                _host_array(obj.tensor, store.layout.dtype)
            want = self._chunk_shape(store)
            if tuple(src.shape) != want:
                if len(src.shape) == len(want) and src.shape[2] < want[2]:
                    futures.append(_done(False))     # a partial trailing chunk (module doc)
                    continue
                raise ValueError(f"LMCache put a chunk of {tuple(src.shape)}; the beluga layout "
                                 f"holds chunks of {want}: check chunk_size and the model "
                                 "geometry")

            def writer(i, dst, src=src):
                self._lmcache_view(store, dst)[...] = src
            res = store.store(k, writer=writer)
            futures.append(_done(res.ok))
            if res.ok and on_complete_callback is not None:
                try:
                    on_complete_callback(key)
                except Exception:
                    log.exception("beluga: LMCache's put callback failed for %s", key)
        return futures

    def exists_in_put_tasks(self, key):
        return False            # puts complete inside batched_submit_put_task

    # ---- lookups and pins -------------------------------------------------

    def contains(self, key, pin=False):
        return self.batched_contains([key], pin) == 1

    def batched_contains(self, keys, pin=False):
        """Leading run of present keys (one LOOKUP); with ``pin`` each hit
        stays pinned until ``unpin``."""
        return self._contains(keys, pin, self._pins)

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        """LMCache awaits this (async_lookup_and_prefetch); the LOOKUP itself
        does not block on I/O, so it runs inline."""
        with self._lock:
            table = self._lookup_pins.setdefault(lookup_id, {})
        return self._contains(keys, pin, table)

    def _contains(self, keys, pin, table):
        if not keys:
            return 0
        store = self._store_for(keys[0])
        ks = [self._key16(k) for k in keys]
        if not pin:
            return store.lookup(ks)
        p = store.pin(ks)
        offs = p.detach()
        m = store.layout.parts
        with self._lock:
            for i in range(p.count):
                table.setdefault((store.ns.value, ks[i]), []).append(offs[i * m:(i + 1) * m])
        return p.count

    def pin(self, key):
        return self.batched_contains([key], pin=True) == 1

    def unpin(self, key):
        store, k = self._store_for(key), self._key16(key)
        with self._lock:
            lst = self._pins.get((store.ns.value, k))
            offs = lst.pop() if lst else None
            if lst is not None and not lst:
                del self._pins[(store.ns.value, k)]
        if offs is None:
            return False
        store.release_blocks(offs)
        return True

    # ---- gets ------------------------------------------------------------

    def _get(self, key, table=None):
        store, k = self._store_for(key), self._key16(key)
        offs = None
        if table is not None:
            with self._lock:
                lst = table.get((store.ns.value, k))
                if lst:
                    offs = lst.pop()
        if offs is None:
            p = store.pin(k)
            if p.count == 0:
                return None
            offs = p.detach()
        if store.layout.parts > 1:                       # split block: a host copy
            raw = np.empty(store.layout.block_bytes, np.uint8)
            store.read_block(offs, raw)
            store.release_blocks(offs)
            raw.flags.writeable = False
            return self._memory_obj(store, offs, raw, "copy")
        return self._memory_obj(store, offs, store.block_view(offs), "pinned")

    def get_blocking(self, key):
        return self._get(key)

    def batched_get_blocking(self, keys):
        return [self._get(k) for k in keys]

    def get_non_blocking(self, key, location=None):
        obj = self._get(key)
        return None if obj is None else _done(obj)

    async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
        """The MemoryObjs of the keys that ``batched_async_contains`` pinned
        under ``lookup_id`` (awaited by LMCache, like the lookup)."""
        with self._lock:
            table = self._lookup_pins.pop(lookup_id, {})
        objs = [self._get(k, table) for k in keys]
        for (ns, _), lst in table.items():               # pinned by contains, not fetched
            store = next(s for s in self._stores.values() if s.ns.value == ns)
            for offs in lst:
                store.release_blocks(offs)
        return [o for o in objs if o is not None]

    def submit_prefetch_task(self, key):
        return False            # the pool is memory: nothing to prefetch

    # ---- removal and shutdown -------------------------------------------

    def remove(self, key, force=True):
        """EVICT the chunk: True when it was present and is gone. False when
        it is absent, pinned, or the handle may not EVICT (the first refusal
        is logged with the fix; LMCache only counts what was removed)."""
        store, k = self._store_for(key), self._key16(key)
        try:
            return store.evict_block(k)
        except beluga.PermissionDenied as e:
            if not self._warned_remove:
                self._warned_remove = True
                log.warning("beluga: LMCache asked to remove chunks, but this pool handle may "
                            "not EVICT (%s): they stay in the pool until its LRU evicts them. "
                            "Run the LMCache process as root or with CAP_SYS_ADMIN, or run "
                            "'belugactl evict --ns 0x%x --all' as root (logged once)", e, store.ns.value)
            return False
        except beluga.Error:
            return False        # pinned by a reader, or gone meanwhile

    def batched_remove(self, keys, force=True):
        return sum(self.remove(k, force) for k in keys)

    def outstanding_pins(self):
        with self._lock:
            return sum(len(v) for v in self._pins.values()) + sum(
                len(v) for t in self._lookup_pins.values() for v in t.values())

    def close(self):
        with self._lock:
            tables = [self._pins] + list(self._lookup_pins.values())
            self._lookup_pins = {}
            for t in tables:
                for (ns, _), lst in t.items():
                    store = next(s for s in self._stores.values() if s.ns.value == ns)
                    for offs in lst:
                        store.release_blocks(offs)
                t.clear()
        for s in self._stores.values():
            s.close()


_built = {}


def __getattr__(name):
    if name != "BelugaStoragePlugin":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _built:
        # Only the storage plugin interface: LMCache 0.5.6 picks its allocator
        # by backend name, never a plugin (module doc), so the plugin offers
        # no AllocatorBackendInterface for LMCache to mistake it for one.
        bases = (BelugaStoragePluginImpl,)
        base = engine_module(_BASE)
        if base is not None and hasattr(base, "StoragePluginInterface"):
            bases += (base.StoragePluginInterface,)
        _built[name] = type(name, bases, {"__module__": __name__,
                                          "__doc__": BelugaStoragePluginImpl.__doc__})
    return _built[name]
