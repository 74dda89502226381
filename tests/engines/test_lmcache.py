# SPDX-License-Identifier: GPL-2.0
"""The LMCache storage plugin against LMCache itself (the `lmcache` venv).

The plugin is created by LMCache's own storage plugin launcher from an LMCache
config file holding the configuration userspace/python/README.md documents;
LMCache catches any exception there, logs it and runs without the plugin, so
the tests fail on a dropped plugin and on any error LMCache logs. Then the
plugin is called as LMCache's storage manager calls it, with LMCache's own
keys and memory objects: the async lookup and get are awaited, a bfloat16
chunk keeps its bits. No GPU: LMCache runs on its CPU device here.
"""

import asyncio
import collections
import errno
import logging
import pathlib
import re
import types

import pytest
import torch
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat, MemoryObj, MemoryObjMetadata, TensorMemoryObj
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.pin_monitor import PinMonitor
from lmcache.v1.storage_backend import storage_plugin_launcher
from lmcache.v1.storage_backend.abstract_backend import (AllocatorBackendInterface,
                                                         StorageBackendInterface,
                                                         StoragePluginInterface)
from lmcache.v1.storage_backend.storage_manager import StorageManager

README = pathlib.Path(__file__).resolve().parents[2] / "userspace" / "python" / "README.md"
CHUNK = 16
LAYERS, HEADS, HEAD_DIM = 2, 2, 16


def documented_config():
    """The LMCache config block of the package README, as documented."""
    text = README.read_text()
    section = text[text.index("### LMCache (storage plugin)"):]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block and "storage_plugins:" in block.group(1), \
        f"{README} has no LMCache config block under '### LMCache (storage plugin)'"
    return block.group(1)


class ErrorLog(logging.Handler):
    """Records what LMCache's loggers (which do not propagate) say at ERROR."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


@pytest.fixture
def lmcache_errors():
    handler = ErrorLog()
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
               if n.startswith("lmcache")]
    for lg in loggers:
        lg.addHandler(handler)
    yield handler.records
    for lg in loggers:
        lg.removeHandler(handler)


def metadata(dtype):
    return LMCacheMetadata(model_name="beluga-test/lmcache", world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=dtype,
                           kv_shape=(LAYERS, 2, CHUNK, HEADS, HEAD_DIM), chunk_size=CHUNK)


def launch(tmp_path, device, dtype):
    """LMCache's storage plugin launcher over a config file with the README's
    block (the device path put in place of /dev/beluga): the backends made."""
    cfg = documented_config().replace("/dev/beluga", device)
    path = tmp_path / "lmcache.yaml"
    path.write_text(f"chunk_size: {CHUNK}\nlocal_cpu: true\nmax_local_cpu_size: 1\n" + cfg)
    backends = collections.OrderedDict()
    loop = asyncio.new_event_loop()
    config, meta = LMCacheEngineConfig.from_file(str(path)), metadata(dtype)
    # what LMCache's cache engine sets up before its backends (MemoryObj.pin uses it)
    PinMonitor.GetOrCreate(config, meta)
    storage_plugin_launcher(config, meta, loop, None, "cpu", backends)
    loop.close()
    return backends


@pytest.fixture
def plugin(tmp_path, device, pool, lmcache_errors):
    backends = launch(tmp_path, device, torch.bfloat16)
    assert "beluga" in backends, f"LMCache dropped the plugin: {lmcache_errors}"
    yield backends["beluga"]
    backends["beluga"].close()


def key(chunk_hash, dtype=torch.bfloat16):
    return CacheEngineKey(model_name="beluga-test/lmcache", world_size=1, worker_id=0,
                          chunk_hash=chunk_hash, dtype=dtype)


def chunk(seed, dtype=torch.bfloat16):
    """A MemoryObj of LMCache's own, KV_2LTD, with random bits (every bit
    pattern, NaNs included: a value conversion would change some)."""
    shape = torch.Size([2, LAYERS, CHUNK, HEADS * HEAD_DIM])
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (shape.numel() * dtype.itemsize,), dtype=torch.uint8,
                        generator=g).view(dtype)
    meta = MemoryObjMetadata(shape=shape, dtype=dtype, address=0, phy_size=raw.numel() * dtype.itemsize,
                             ref_count=1, fmt=MemoryFormat.KV_2LTD)
    return TensorMemoryObj(raw, meta, None)


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def test_lmcache_loads_the_plugin_from_the_documented_config(tmp_path, device, pool,
                                                            lmcache_errors):
    backends = launch(tmp_path, device, torch.bfloat16)
    assert lmcache_errors == []
    assert list(backends) == ["beluga"]
    assert isinstance(backends["beluga"], StoragePluginInterface)
    backends["beluga"].close()


def test_a_bfloat16_chunk_keeps_its_bits(plugin):
    src = [chunk(1), chunk(2)]
    keys = [key(101), key(102)]
    futures = plugin.batched_submit_put_task(keys, src)
    assert all(f.result() for f in futures)
    assert plugin.batched_contains(keys) == 2
    for k, s in zip(keys, src):
        got = plugin.get_blocking(k)
        assert got.tensor.dtype == torch.bfloat16
        assert tuple(got.tensor.shape) == tuple(s.tensor.shape)
        assert torch.equal(bits(got.tensor), bits(s.tensor))
        got.ref_count_down()


def test_put_calls_back_once_per_key(plugin):
    done = []
    keys = [key(201), key(202), key(203)]
    plugin.batched_submit_put_task(keys, [chunk(3), chunk(4), chunk(5)], transfer_spec=None,
                                   on_complete_callback=done.append)
    assert done == keys
    fut = plugin.get_non_blocking(keys[0], location=None)
    fut.result().ref_count_down()


def test_async_lookup_and_get_are_awaited_as_lmcache_does(plugin):
    keys = [key(301), key(302), key(303)]
    src = [chunk(6), chunk(7)]
    plugin.batched_submit_put_task(keys[:2], src)

    async def lookup_and_get():
        # StorageManager.async_lookup_and_prefetch: await the pinned lookup,
        # then await the get of the hits under the same lookup id
        hits = await plugin.batched_async_contains("req-1", keys, pin=True)
        objs = await plugin.batched_get_non_blocking("req-1", keys[:hits])
        return hits, objs

    hits, objs = asyncio.run(lookup_and_get())
    assert hits == 2
    assert isinstance(objs, list) and len(objs) == 2
    for got, s in zip(objs, src):
        assert isinstance(got, MemoryObj)
        assert torch.equal(bits(got.tensor), bits(s.tensor))
        got.ref_count_down()


def test_a_hit_is_an_lmcache_memory_obj_that_releases_its_pin(plugin, pool):
    # LMCache writes a plugin hit back into its LocalCPUBackend, which pins it
    # and reads .meta; the last ref_count_down gives the pool block back
    plugin.batched_submit_put_task([key(401)], [chunk(8)])
    pins = pool.stats()["pins"]
    got = plugin.get_blocking(key(401))
    assert isinstance(got, MemoryObj)
    assert got.meta.fmt == MemoryFormat.KV_2LTD and got.get_memory_format() == MemoryFormat.KV_2LTD
    assert pool.stats()["pins"] == pins + 1
    assert got.pin() and got.is_pinned
    assert got.unpin() and not got.is_pinned
    got.ref_count_down()
    assert pool.stats()["pins"] == pins
    assert not got.is_valid()


def storage_manager(plugin):
    """LMCache's StorageManager methods run on their own code over a manager
    whose only backend is the plugin (building a whole one needs a GPU
    connector and LMCache's threads)."""
    return types.SimpleNamespace(storage_backends={"beluga": plugin})


def test_lmcache_sees_the_interface_the_plugin_offers(plugin):
    # LMCache treats a backend as an allocator only through
    # AllocatorBackendInterface (memcheck, allocator choice); the plugin is
    # none, so it must offer none of that interface's methods either.
    assert not isinstance(plugin, AllocatorBackendInterface)
    allocator_only = AllocatorBackendInterface.__abstractmethods__ - \
        StorageBackendInterface.__abstractmethods__
    assert allocator_only, "LMCache's AllocatorBackendInterface has no methods of its own"
    offered = sorted(m for m in allocator_only if hasattr(plugin, m))
    assert offered == [], f"allocator methods LMCache never calls: {offered}"
    assert StorageManager.memcheck(storage_manager(plugin))


def test_remove_through_lmcache_says_once_why_it_cannot(plugin, backend, caplog):
    if backend != "fake":
        pytest.skip("refuses EVICT through the fake pool's fault injection")
    from beluga import _beluga
    keys = [key(501), key(502)]
    plugin.batched_submit_put_task(keys, [chunk(9), chunk(10)])
    manager = storage_manager(plugin)
    with caplog.at_level(logging.WARNING, logger="beluga.adapters.lmcache"):
        for k in keys:                       # a handle that may not EVICT
            _beluga._fake_fail("evict", 1, errno.EPERM)
            assert StorageManager.remove(manager, k) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "EVICT" in warnings[0] and "belugactl evict --ns 0x" in warnings[0] \
        and "--all" in warnings[0], warnings[0]
    assert plugin.batched_contains(keys) == 2
    # an admin handle removes, and an absent key is no refusal
    assert StorageManager.batched_remove(manager, keys) == 2
    assert plugin.batched_contains(keys) == 0
    assert StorageManager.remove(manager, keys[0]) == 0
