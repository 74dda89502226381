# SPDX-License-Identifier: LGPL-2.1-or-later
"""SGLang HiCache storage backend (``HiCacheStorage``, tested with SGLang
0.5.23: python/sglang/srt/mem_cache/hicache_storage.py and
managers/cache_controller.py).

Load it as a dynamic backend::

    python -m sglang.launch_server ... --enable-hierarchical-cache \\
        --page-size 64 --hicache-mem-layout page_first \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "beluga",
            "module_path": "beluga.adapters.sglang",
            "class_name": "BelugaHiCacheStorage",
            "beluga_path": "/dev/beluga", "salt": null}'

SGLang's controller reads ``interface_v1`` from the extra config after it
has made the backend; the backend sets it to 1 unless the config says
otherwise, so SGLang calls ``batch_get_v1``/``batch_set_v1`` (one copy
between the host pool page and the pool block).  With ``"interface_v1": 0``
SGLang uses the legacy ``batch_get``/``batch_set`` with flat data pages
(one more copy); both keep every bit (bfloat16 is copied as bytes).

SGLang hands the backend its host pool (L2) through
``register_mem_pool_host``; the block layout (and so the namespace) is
fixed then, from the pool's geometry and the storage config.  Keys are
SGLang's page hashes (``get_hash_str``), whose first 16 bytes are the
Beluga key, so any writer using ``beluga.keys.sha256_chain`` with the same
page size and namespace finds SGLang's pages and the other way round.

Pages are stored in Beluga's canonical layer-major layout whatever the host
layout: ``page_first``, ``page_first_direct``, ``page_head`` (MHA) and
``layer_first``, MHA and MLA.  Refused when the host pool is registered,
with the reason: ``page_unified`` and ``page_first_kv_split`` host pools,
split heads (``tp_lcm_size``), and hybrid models' pools
(``register_mem_host_pool_v2``: Mamba, SWA, DSA sidecars).
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
MHA_LAYOUTS = ("page_first", "page_first_direct", "page_head", "layer_first")
MLA_LAYOUTS = ("page_first", "page_first_direct", "layer_first")


def _host_bytes(ptr, size):
    return np.frombuffer((ctypes.c_char * size).from_address(int(ptr)), np.uint8)


def _dtype_name(dt):
    name = str(dt)
    return name[len("torch."):] if name.startswith("torch.") else np.dtype(dt).name


def _tensor_bytes(value, writable):
    """The bytes of a flat data page as a numpy uint8 array sharing its
    memory: a CPU torch tensor of any dtype (bfloat16 included: viewed as
    bytes, never converted by value) or a numpy array."""
    if isinstance(value, np.ndarray):
        arr = value
    elif type(value).__module__.startswith("torch"):
        if value.device.type != "cpu":
            raise ValueError(f"a data page on {value.device} cannot be copied by the beluga "
                             "backend: SGLang's host pool pages are in host memory")
        if not value.is_contiguous():
            if writable:
                raise ValueError("the target data page is not contiguous; SGLang's "
                                 "get_dummy_flat_data_page() gives a contiguous one")
            value = value.contiguous()
        import torch
        arr = value.reshape(-1).view(torch.uint8).numpy()
    else:
        arr = np.asarray(value)
    if writable and not arr.flags.writeable:
        raise ValueError("the target data page is read-only")
    return arr.reshape(-1).view(np.uint8)


class BelugaHiCacheStorageImpl:
    """HiCacheStorage on a Beluga pool.  ``pool`` (keyword) shares an open
    pool (tests, embedders); SGLang passes (storage_config, kwargs)."""

    def __init__(self, storage_config, kwargs=None, pool=None):
        extra = getattr(storage_config, "extra_config", None)
        if isinstance(extra, dict):
            # SGLang's controller reads this dict after making the backend:
            # the zero-copy batch_*_v1 calls unless the user says otherwise
            extra.setdefault("interface_v1", 1)
        extra = dict(extra or {})
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
        mla = bool(getattr(cfg, "is_mla_model", False))
        supported = MLA_LAYOUTS if mla else MHA_LAYOUTS
        if layout_name not in supported:
            raise ValueError(f"the beluga backend does not store the {layout_name!r} host layout "
                             f"of {'an MLA' if mla else 'an MHA'} model: start SGLang with "
                             f"--hicache-mem-layout one of {', '.join(supported)}")
        if getattr(cfg, "should_split_heads", False):
            raise ValueError("the beluga backend does not split heads across TP sizes "
                             "(tp_lcm_size): remove tp_lcm_size from the extra config and run "
                             "the instances that share blocks with the same tp_size")
        common = dict(model=self.extra.get("model", getattr(cfg, "model_name", None) or ""),
                      revision=self.extra.get("revision", ""),
                      num_layers=int(hp.layer_num), dtype=_dtype_name(hp.dtype),
                      tokens_per_block=int(hp.page_size))
        pp_size = int(getattr(cfg, "pp_size", 1) or 1)
        extra = (("pp_rank", int(cfg.pp_rank)), ("pp_size", pp_size)) if pp_size > 1 else ()
        if mla:
            latent = int(getattr(hp, "kv_cache_dim", 0) or
                         int(hp.kv_lora_rank) + int(hp.qk_rope_head_dim))
            spec = ModelSpec(num_kv_heads=1, head_dim=1, latent_dim=latent, extra=extra, **common)
        else:
            if int(getattr(hp, "v_head_dim", hp.head_dim)) != int(hp.head_dim):
                raise ValueError(f"the beluga backend stores K and V of one width; this model's "
                                 f"V heads are {hp.v_head_dim} wide and its K heads {hp.head_dim}")
            tp = int(getattr(cfg, "tp_size", 1) or 1)
            # the model's KV heads: "num_kv_heads" in the extra config where
            # TP replicates heads (tp_size > KV heads), else local x tp_size
            heads = int(self.extra.get("num_kv_heads", int(hp.head_num) * tp))
            spec = ModelSpec(num_kv_heads=heads, head_dim=int(hp.head_dim),
                             tp_rank=int(getattr(cfg, "tp_rank", 0) or 0), tp_size=tp,
                             extra=extra, **common)
            if spec.heads_local != int(hp.head_num):
                raise ValueError(f"num_kv_heads {heads} over tp_size {tp} gives "
                                 f"{spec.heads_local} heads per rank, but SGLang's host pool "
                                 f"holds {hp.head_num}: fix num_kv_heads in the extra config")
        layout = BlockLayout(spec, self.pool.block_size)
        self.store = KVStore(self.pool, layout, salt=self.extra.get("salt"),
                             key_scheme="sha256", shared=self.extra.get("shared"))
        self.mem_pool_host = hp
        self._layout_name = layout_name
        self._page = int(hp.page_size)
        log.info("beluga: %s (host layout %s)", self.store.describe(), layout_name)

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        raise ValueError(f"the beluga backend stores only the KV pool; SGLang registered the "
                         f"{host_pool_name!s} pool of a hybrid model (Mamba, SWA or DSA state): "
                         "run this model without --hicache-storage-backend beluga")

    def _need_store(self):
        if self.store is None:
            raise RuntimeError("register_mem_pool_host() was not called: SGLang registers the "
                               "host pool before any storage I/O")
        return self.store

    # ---- host page <-> canonical block ---------------------------------

    def _plan(self, flat=False):
        """One page's parts in the order SGLang lays them out: for each, the
        index of its place in the canonical block view, its shape in the host
        pool, and the axes that turn that shape into the block's.  The
        pointers of get_page_buffer_meta come K, V per layer for layer_first;
        a flat data page holds every K layer before the V layers."""
        lay, s, name = self.store.layout, self.store.layout.spec, self._layout_name
        L, T = lay.layers, lay.tokens
        if s.is_mla:
            D = s.latent_dim
            if name == "layer_first":
                return [((layer,), (T, D), None) for layer in range(L)]
            if name == "page_first":
                return [((), (T, L, D), (1, 0, 2))]
            return [((), (L, T, D), None)]                     # page_first_direct
        H, D = s.heads_local, s.head_dim
        if name == "layer_first":
            order = ([(layer, j) for j in (0, 1) for layer in range(L)] if flat else
                     [(layer, j) for layer in range(L) for j in (0, 1)])
            return [(idx, (T, H, D), None) for idx in order]
        shape, axes = {"page_first": ((T, L, H, D), (1, 0, 2, 3)),
                       "page_first_direct": ((L, T, H, D), None),
                       "page_head": ((H, T, L, D), (2, 1, 0, 3))}[name]
        return [((slice(None), j), shape, axes) for j in (0, 1)]

    def _host_pages(self, host_indices, n):
        """Each page's parts as numpy byte views of SGLang's host pool, from
        the host pool's own get_page_buffer_meta."""
        if len(host_indices) != n * self._page:
            raise ValueError(f"{n} keys need {n * self._page} host indices (page size "
                             f"{self._page}), got {len(host_indices)}")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        plan = self._plan()
        per = len(plan)
        if len(ptrs) != n * per:
            raise ValueError(f"get_page_buffer_meta gave {len(ptrs)} pointers for {n} pages; "
                             f"expected {per} per page ({self._layout_name})")
        want = [int(np.prod(shape)) * self.store.layout.itemsize for _, shape, _ in plan]
        pages = []
        for i in range(n):
            parts = []
            for j in range(per):
                if int(sizes[i * per + j]) != want[j]:
                    raise ValueError(f"a host page part of {int(sizes[i * per + j])} bytes does "
                                     f"not match the beluga layout ({want[j]} bytes)")
                parts.append(_host_bytes(ptrs[i * per + j], want[j]))
            pages.append(parts)
        return pages, plan

    def _flat_parts(self, value, writable):
        """A flat data page (get_data_page(flat=True)) cut into its parts."""
        raw = _tensor_bytes(value, writable)
        plan = self._plan(flat=True)
        sizes = [int(np.prod(shape)) * self.store.layout.itemsize for _, shape, _ in plan]
        if raw.size != sum(sizes):
            raise ValueError(f"a data page must be {sum(sizes)} bytes, got {raw.size}")
        offsets = np.cumsum([0] + sizes)
        return [raw[offsets[j]:offsets[j + 1]] for j in range(len(plan))], plan

    def _to_block(self, parts, plan, dst):
        blk = self.store.layout.view(dst)
        for raw, (idx, shape, axes) in zip(parts, plan):
            src = raw.view(self.store.layout.dtype).reshape(shape)
            blk[idx] = src if axes is None else src.transpose(axes)

    def _from_block(self, src, parts, plan):
        blk = self.store.layout.view(src)
        for raw, (idx, shape, axes) in zip(parts, plan):
            dst = raw.view(self.store.layout.dtype).reshape(shape)
            (dst if axes is None else dst.transpose(axes))[...] = blk[idx]

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
        pages, plan = self._host_pages(host_indices, len(keys))
        res = store.load([K.digest16(k) for k in keys],
                         reader=lambda i, src: self._from_block(src, pages[i], plan))
        return [True] * res.loaded + [False] * (len(keys) - res.loaded)

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Write pages from their host slots; pages already present count as
        written.  Raises on any error."""
        store = self._need_store()
        if not keys:
            return []
        pages, plan = self._host_pages(host_indices, len(keys))
        res = store.store([K.digest16(k) for k in keys],
                          writer=lambda i, dst: self._to_block(pages[i], plan, dst))
        return self._written(res, len(keys))

    @staticmethod
    def _written(res, n):
        attempted, failed = res.requested - res.not_stored, set(res.failed)
        return [i < attempted and i not in failed for i in range(n)]

    # Legacy calls (abstract in HiCacheStorage; SGLang uses them with
    # "interface_v1": 0): a value or target is a flat data page in the host
    # pool's layout, as get_data_page(flat=True) gives, of the pool's dtype.

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """True when every page is in the pool (written now or before)."""
        store = self._need_store()
        if values is None or len(values) != len(keys):
            raise ValueError("batch_set() needs one flat data page per key")
        if not keys:
            return True
        pages = [self._flat_parts(v, writable=False) for v in values]
        res = store.store([K.digest16(k) for k in keys],
                          writer=lambda i, dst: self._to_block(*pages[i], dst))
        return all(self._written(res, len(keys)))

    def set(self, key, value=None, target_location=None, target_sizes=None):
        if value is None:
            raise ValueError("set() needs the page as value (a flat host data page)")
        return self.batch_set([key], [value])

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Each target filled in place and returned for the leading pages
        present, None from the first miss on.  Without targets, fresh pages
        from the host pool's get_dummy_flat_data_page()."""
        store = self._need_store()
        if target_locations is None:
            target_locations = [self._empty_data_page() for _ in keys]
        if len(target_locations) != len(keys):
            raise ValueError("batch_get() needs one target data page per key")
        if not keys:
            return []
        pages = [self._flat_parts(t, writable=True) for t in target_locations]
        res = store.load([K.digest16(k) for k in keys],
                         reader=lambda i, src: self._from_block(src, *pages[i]))
        return [t if i < res.loaded else None for i, t in enumerate(target_locations)]

    def _empty_data_page(self):
        """A page to read into: SGLang's own (get_dummy_flat_data_page, a
        tensor of the pool's dtype), else a numpy array of the layout's."""
        make = getattr(self.mem_pool_host, "get_dummy_flat_data_page", None)
        if make is not None:
            return make()
        n = sum(int(np.prod(shape)) for _, shape, _ in self._plan(flat=True))
        return np.empty(n, self.store.layout.dtype)

    def get(self, key, target_location=None, target_sizes=None):
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    def clear(self):
        """Evict this backend's namespace: True when done.  EVICT needs an
        admin handle (a pool opened by root or with CAP_SYS_ADMIN); without
        one nothing is cleared and the reason is logged."""
        store = self._need_store()
        try:
            self.pool.evict_ns(store.ns.value)
        except beluga.Error as e:
            log.warning("beluga: clear() could not evict namespace 0x%x (%s): EVICT needs an "
                        "admin handle; run 'belugactl evict --ns 0x%x --all' as root instead",
                        store.ns.value, e, store.ns.value)
            return False
        return True

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
