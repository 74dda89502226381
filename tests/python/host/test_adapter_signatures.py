# SPDX-License-Identifier: GPL-2.0
"""The adapters against the engines' interfaces as recorded (signatures
from the engines' sources, harness/engine_stubs.py): built on those base
classes they instantiate (no abstract method left) and every method the
engine may call accepts the engine's arguments under the engine's names.
The vLLM adapter is checked against vLLM itself (tests/engines/vllm)."""

import inspect
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import engine_stubs                       # noqa: E402
from beluga.adapters import lmcache as LM, sglang as SG   # noqa: E402


def params(fn):
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def assert_conforms(ours, base):
    for name, fn in inspect.getmembers(base, inspect.isfunction):
        if name.startswith("_") and name != "__init__":
            continue
        mine = getattr(ours, name, None)
        assert mine is not None and mine is not fn, f"{ours.__name__} lacks {name}"
        want, got = params(fn), params(mine)
        # the engine's parameters in its order and names, its defaults where
        # it has them; ours may add optional parameters after them
        where = f"{ours.__name__}.{name}{got} against the engine's {want}"
        assert [n for n, _ in got[:len(want)]] == [n for n, _ in want], where
        for (_, d_ours), (_, d_eng) in zip(got, want):
            assert d_eng is inspect.Parameter.empty or d_ours == d_eng, where
        assert all(d is not inspect.Parameter.empty for _, d in got[len(want):]), where


def test_sglang():
    with engine_stubs.installed("sglang", SG) as mods:
        b = mods["sglang.srt.mem_cache.hicache_storage"].HiCacheStorage
        cls = SG.BelugaHiCacheStorage
        assert issubclass(cls, b) and not cls.__abstractmethods__
        assert_conforms(cls, b)


def test_lmcache():
    with engine_stubs.installed("lmcache", LM) as mods:
        b = mods["lmcache.v1.storage_backend.abstract_backend"].StoragePluginInterface
        cls = LM.BelugaStoragePlugin
        assert issubclass(cls, b) and not cls.__abstractmethods__
        assert_conforms(cls, b)
