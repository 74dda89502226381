# SPDX-License-Identifier: LGPL-2.1-or-later
"""SGLang HiCache storage backend (``HiCacheStorage``,
python/sglang/srt/mem_cache/hicache_storage.py @001067ff).

Load it as a dynamic backend::

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --page-size 64 --hicache-mem-layout page_first \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "beluga",
            "module_path": "beluga.adapters.sglang",
            "class_name": "BelugaHiCacheStorage",
            "beluga_path": "/dev/beluga", "salt": null}'

SGLang hands the backend its host pool (L2) later, through
``register_mem_pool_host``; the block layout (and so the namespace) is
fixed then, from the pool's geometry and the storage config.  Keys are
SGLang's page hashes (``get_hash_str``), whose first 16 bytes are the
Beluga key, so any writer using ``beluga.keys.sha256_chain`` with the same
page size and namespace finds SGLang's pages and the other way round.

Pages are stored in Beluga's canonical layer-major layout, so each get/set
is one strided copy between the host pool page and the pool block (the
extra host-pool copy SGLang's design implies).  Supported host layouts:
``page_first`` and ``page_first_direct`` (MHA and MLA).
"""

import ctypes
import logging

import numpy as np

import beluga
from beluga import keys as K
from beluga.adapters import engine_module
from beluga.layout import BlockLayout, ModelSpec
from beluga.store import KVStore

log = logging.getLogger(__name__)
_BASE = "sglang.srt.mem_cache.hicache_storage"
LAYOUTS = ("page_first", "page_first_direct")


def _host_bytes(ptr, size):
    return np.frombuffer((ctypes.c_char * size).from_address(int(ptr)), np.uint8)


def _dtype_name(dt):
    name = str(dt)
    return name[len("torch."):] if name.startswith("torch.") else np.dtype(dt).name


class BelugaHiCacheStorageImpl:
    """HiCacheStorage on a Beluga pool.  ``pool`` (keyword) shares an open
    pool (tests, embedders); SGLang passes (storage_config, kwargs)."""

    def __init__(self, storage_config, kwargs=None, pool=None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        if isinstance(kwargs, dict):
            extra.update({k: v for k, v in kwargs.items() if k not in extra})
        self.config, self.extra = storage_config, extra
        self.pool = pool if pool is not None else beluga.Pool(extra.get("beluga_path"))
        self.store = None
        self.mem_pool_host = None

    # ---- setup -----------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """Fix the layout from the host pool's geometry (SGLang calls this
        once, before any I/O)."""
        hp, cfg = mem_pool_host, self.config
        layout_name = getattr(hp, "layout", None)
        if layout_name not in LAYOUTS:
            raise ValueError(f"the beluga backend needs --hicache-mem-layout page_first or "
                             f"page_first_direct, not {layout_name!r}")
        if getattr(cfg, "should_split_heads", False):
            raise ValueError("the beluga backend does not split heads (tp_lcm_size); "
                             "run every instance with the same tp_size")
        mla = bool(getattr(cfg, "is_mla_model", False))
        common = dict(model=self.extra.get("model", getattr(cfg, "model_name", None) or ""),
                      revision=self.extra.get("revision", ""),
                      num_layers=int(hp.layer_num), dtype=_dtype_name(hp.dtype),
                      tokens_per_block=int(hp.page_size))
        pp_size = int(getattr(cfg, "pp_size", 1) or 1)
        extra = (("pp_rank", int(cfg.pp_rank)), ("pp_size", pp_size)) if pp_size > 1 else ()
        if mla:
            latent = int(hp.kv_lora_rank) + int(hp.qk_rope_head_dim)
            spec = ModelSpec(num_kv_heads=1, head_dim=1, latent_dim=latent, extra=extra, **common)
        else:
            tp = int(getattr(cfg, "tp_size", 1) or 1)
            spec = ModelSpec(num_kv_heads=int(hp.head_num) * tp, head_dim=int(hp.head_dim),
                             tp_rank=int(getattr(cfg, "tp_rank", 0) or 0), tp_size=tp,
                             extra=extra, **common)
        layout = BlockLayout(spec, self.pool.block_size)
        self.store = KVStore(self.pool, layout, salt=self.extra.get("salt"),
                             key_scheme="sha256", shared=self.extra.get("shared"))
        self.mem_pool_host = hp
        self._direct = layout_name == "page_first_direct"
        self._page = int(hp.page_size)
        log.info("beluga: %s", self.store.describe())

    def _need_store(self):
        if self.store is None:
            raise RuntimeError("register_mem_pool_host() was not called: SGLang registers the "
                               "host pool before any storage I/O")
        return self.store

    # ---- host page <-> canonical block ---------------------------------

    def _host_pages(self, host_indices, n):
        if len(host_indices) != n * self._page:
            raise ValueError(f"{n} keys need {n * self._page} host indices (page size "
                             f"{self._page}), got {len(host_indices)}")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        lay = self.store.layout
        per = 1 if lay.spec.is_mla else 2
        if len(ptrs) != n * per:
            raise ValueError(f"get_page_buffer_meta gave {len(ptrs)} pointers for {n} pages; "
                             f"expected {per} per page")
        want = self._part_bytes()
        if any(int(s) != want for s in sizes):
            raise ValueError(f"host pages of {sorted(set(int(s) for s in sizes))} bytes do not "
                             f"match the beluga layout ({want} bytes per K, V or latent page)")
        return [[_host_bytes(ptrs[i * per + j], want) for j in range(per)] for i in range(n)]

    def _part_bytes(self):
        """Bytes of one page's K (or V, or MLA latent) over all layers."""
        lay = self.store.layout
        return lay.layers * lay.kv_bytes

    def _host_shape(self):
        lay, s = self.store.layout, self.store.layout.spec
        T, L = lay.tokens, lay.layers
        inner = (s.latent_dim,) if s.is_mla else (s.heads_local, s.head_dim)
        return ((L, T) if self._direct else (T, L)) + inner

    def _to_block(self, page, dst):
        blk = self.store.layout.view(dst)
        shape = self._host_shape()
        for j, raw in enumerate(page):
            src = raw.view(self.store.layout.dtype).reshape(shape)
            if not self._direct:
                src = src.swapaxes(0, 1)                # (T, L, ...) -> (L, T, ...)
            if self.store.layout.spec.is_mla:
                blk[...] = src
            else:
                blk[:, j] = src

    def _from_block(self, src, page):
        blk = self.store.layout.view(src)
        shape = self._host_shape()
        for j, raw in enumerate(page):
            dst = raw.view(self.store.layout.dtype).reshape(shape)
            if not self._direct:
                dst = dst.swapaxes(0, 1)
            dst[...] = blk if self.store.layout.spec.is_mla else blk[:, j]

    # ---- HiCacheStorage --------------------------------------------------

    def batch_exists(self, keys, extra_info=None):
        """Number of leading keys present: one LOOKUP."""
        store = self._need_store()
        if not keys:
            return 0
        return store.lookup([K.digest16(k) for k in keys])

    def exists(self, key):
        return self.batch_exists([key]) == 1

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Read the leading present pages into their host slots:
        [True] * hits + [False] * rest.  Raises on any error."""
        store = self._need_store()
        if not keys:
            return []
        pages = self._host_pages(host_indices, len(keys))
        res = store.load([K.digest16(k) for k in keys],
                         reader=lambda i, src: self._from_block(src, pages[i]))
        return [True] * res.loaded + [False] * (len(keys) - res.loaded)

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Write pages from their host slots; pages already present count as
        written.  Raises on any error."""
        store = self._need_store()
        if not keys:
            return []
        pages = self._host_pages(host_indices, len(keys))
        res = store.store([K.digest16(k) for k in keys],
                          writer=lambda i, dst: self._to_block(pages[i], dst))
        attempted, failed = res.requested - res.not_stored, set(res.failed)
        return [i < attempted and i not in failed for i in range(len(keys))]

    # Legacy calls (abstract in HiCacheStorage): a value or target is a flat
    # data page in the host pool's layout, as get_data_page(flat=True) gives.

    def _flat_page_views(self, flat):
        arr = flat if isinstance(flat, np.ndarray) else (
            flat.numpy() if hasattr(flat, "numpy") else np.asarray(flat))
        raw = arr.reshape(-1).view(np.uint8)
        lay = self.store.layout
        per = 1 if lay.spec.is_mla else 2
        pb = self._part_bytes()
        if raw.size != per * pb:
            raise ValueError(f"a data page must be {per * pb} bytes, got {raw.size}")
        return [raw[j * pb:(j + 1) * pb] for j in range(per)]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        store = self._need_store()
        if value is None:
            raise ValueError("set() needs the page as value (a flat host data page)")
        page = self._flat_page_views(value)
        res = store.store([K.digest16(key)], writer=lambda i, dst: self._to_block(page, dst))
        return res.present == 1

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        if values is None or len(values) != len(keys):
            raise ValueError("batch_set() needs one value per key")
        return all(self.set(k, v) for k, v in zip(keys, values))

    def get(self, key, target_location=None, target_sizes=None):
        store = self._need_store()
        if target_location is None:
            lay = store.layout
            per = 1 if lay.spec.is_mla else 2
            target_location = np.empty(per * self._part_bytes() // lay.itemsize, lay.dtype)
        page = self._flat_page_views(target_location)
        res = store.load([K.digest16(key)], reader=lambda i, src: self._from_block(src, page))
        return target_location if res.ok else None

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        targets = target_locations if target_locations is not None else [None] * len(keys)
        return [self.get(k, t) for k, t in zip(keys, targets)]

    def clear(self):
        store = self._need_store()
        try:
            self.pool.evict_ns(store.ns.value)
        except beluga.Error as e:
            log.warning("beluga: clear() could not evict namespace 0x%x (%s); EVICT needs an "
                        "admin handle", store.ns.value, e)

    def get_stats(self):
        return self.store.stats() if self.store is not None else None

    def close(self):
        if self.store is not None:
            self.store.close()


_built = {}


def __getattr__(name):
    if name != "BelugaHiCacheStorage":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _built:
        base = engine_module(_BASE)
        bases = (BelugaHiCacheStorageImpl,)
        if base is not None and hasattr(base, "HiCacheStorage"):
            bases += (base.HiCacheStorage,)
        _built[name] = type(name, bases, {"__module__": __name__,
                                          "__doc__": BelugaHiCacheStorageImpl.__doc__})
    return _built[name]
