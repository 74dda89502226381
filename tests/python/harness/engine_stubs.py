# SPDX-License-Identifier: GPL-2.0
"""The engines' base classes, reduced to their method signatures, as
recorded in shared/reviews/engines.md and the sources it cites:

- sglang python/sglang/srt/mem_cache/hicache_storage.py @001067ff
  (HiCacheStorage);
- lmcache/v1/storage_backend/abstract_backend.py (StorageBackendInterface,
  the allocator calls, and the batched lookup calls of engines.md 1.3).

``installed()`` puts them into sys.modules under the engines' module names,
so that the adapters build their classes on them as they would on the real
ones; the tests then compare signatures.  Bodies are empty: only the
interface is recorded.
"""

import abc
import contextlib
import sys
import types


def _sglang():
    m = types.ModuleType("sglang.srt.mem_cache.hicache_storage")

    class HiCacheStorage(abc.ABC):
        def register_mem_pool_host(self, mem_pool_host): ...
        def batch_get_v1(self, keys, host_indices, extra_info=None): ...
        def batch_set_v1(self, keys, host_indices, extra_info=None): ...
        @abc.abstractmethod
        def get(self, key, target_location=None, target_sizes=None): ...
        @abc.abstractmethod
        def batch_get(self, keys, target_locations=None, target_sizes=None): ...
        @abc.abstractmethod
        def set(self, key, value=None, target_location=None, target_sizes=None): ...
        @abc.abstractmethod
        def batch_set(self, keys, values=None, target_locations=None, target_sizes=None): ...
        @abc.abstractmethod
        def exists(self, key): ...
        def batch_exists(self, keys, extra_info=None): ...
        def clear(self): ...
        def get_stats(self): ...

    m.HiCacheStorage = HiCacheStorage
    names = ["sglang", "sglang.srt", "sglang.srt.mem_cache"]
    mods = {n: types.ModuleType(n) for n in names}
    mods[m.__name__] = m
    return mods


def _lmcache():
    m = types.ModuleType("lmcache.v1.storage_backend.abstract_backend")

    class StorageBackendInterface(abc.ABC):
        def __init__(self, dst_device="cuda"):
            self.dst_device = dst_device
        @abc.abstractmethod
        def contains(self, key, pin=False): ...
        @abc.abstractmethod
        def exists_in_put_tasks(self, key): ...
        @abc.abstractmethod
        def batched_submit_put_task(self, keys, objs, transfer_spec=None,
                                    on_complete_callback=None): ...
        @abc.abstractmethod
        def submit_prefetch_task(self, key): ...
        @abc.abstractmethod
        def get_blocking(self, key): ...
        def get_non_blocking(self, key, location=None): ...
        def batched_get_blocking(self, keys): ...
        @abc.abstractmethod
        def pin(self, key): ...
        @abc.abstractmethod
        def unpin(self, key): ...
        @abc.abstractmethod
        def remove(self, key, force=True): ...
        def batched_remove(self, keys, force=True): ...
        @abc.abstractmethod
        def get_allocator_backend(self): ...
        @abc.abstractmethod
        def close(self): ...
        # the batched lookup path (engines.md 1.3)
        def batched_contains(self, keys, pin=False): ...
        async def batched_async_contains(self, lookup_id, keys, pin=False): ...
        async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None): ...

    class StoragePluginInterface(StorageBackendInterface):
        def __init__(self, dst_device, config, metadata, local_cpu_backend, loop):
            super().__init__(dst_device)

    m.StorageBackendInterface = StorageBackendInterface
    m.StoragePluginInterface = StoragePluginInterface
    names = ["lmcache", "lmcache.v1", "lmcache.v1.storage_backend"]
    mods = {n: types.ModuleType(n) for n in names}
    mods[m.__name__] = m
    return mods


STUBS = {"sglang": _sglang, "lmcache": _lmcache}


@contextlib.contextmanager
def installed(engine, adapter_module):
    """The stub engine in sys.modules, and the adapter's classes rebuilt on it."""
    mods = STUBS[engine]()
    saved = {n: sys.modules.get(n) for n in mods}
    sys.modules.update(mods)
    built, adapter_module._built = adapter_module._built, {}
    try:
        yield mods
    finally:
        adapter_module._built = built
        for n, old in saved.items():
            if old is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = old
