# SPDX-License-Identifier: GPL-2.0
"""beluga.adapters.sglang through SGLang HiCache's storage calls
(tests/python/harness/sglang_hicache.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import sglang_hicache as H       # noqa: E402
from harness.workload import conversations, pool_clean, squeeze_pool   # noqa: E402


def engine(pool, unique_ns, **kw):
    args = dict(layer_num=2, head_num=2, head_dim=16, page_size=16, pages=96,
                salt=f"sgl-{unique_ns}")
    args.update(kw)
    return H.Engine(pool, **args)


def budget(pool):
    return max(4, min(60, pool.stats()["total_blocks"] // 2))


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_large_pool_hits_equal_the_oracle(pool, unique_ns, layout):
    eng = engine(pool, unique_ns, layout=layout)
    reqs, _ = conversations(16, budget(pool), seed=11)
    got, want = H.replay(eng, reqs)
    assert got == want and sum(want) > 0
    eng.close()
    ok, s = pool_clean(pool)
    assert ok, s


def test_mla_pages(pool, unique_ns):
    eng = engine(pool, unique_ns, latent=64, head_num=1, head_dim=1)
    assert eng.layout.spec.is_mla
    reqs, _ = conversations(16, budget(pool), seed=12)
    got, want = H.replay(eng, reqs)
    assert got == want and sum(want) > 0
    eng.close()
    assert pool_clean(pool)[0]


def test_capacity_pressure_drops_hits_never_bytes(pool, unique_ns):
    reqs, distinct = conversations(16, budget(pool), seed=13)
    held = squeeze_pool(pool, max(2, distinct // 4))
    try:
        eng = engine(pool, unique_ns)
        got, want = H.replay(eng, reqs)
        assert sum(got) < sum(want)
        assert all(g <= w for g, w in zip(got, want))
        eng.close()
    finally:
        pool.free(held)
    assert pool_clean(pool)[0]


def test_tp_ranks_keep_their_own_heads(pool, unique_ns):
    """Two TP ranks share one pool; each finds only its own shard."""
    r0 = engine(pool, unique_ns, tp_rank=0, tp_size=2)
    r1 = engine(pool, unique_ns, tp_rank=1, tp_size=2)
    assert r0.backend.store.ns.diff(r1.backend.store.ns) == [("tp_rank", "0", "1")]
    reqs, _ = conversations(16, 12, seed=14, systems=1, turns=1)
    kv0 = lambda h: H.block_kv(r0.layout, h)
    kv1 = lambda h: -H.block_kv(r1.layout, h)         # rank 1 holds other bytes
    r0.serve(reqs[0], kv0)
    assert r1.backend.batch_exists(reqs[0].hex) == 0
    r1.serve(reqs[0], kv1)
    assert r0.serve(reqs[0], kv0) == reqs[0].num_blocks     # bytes checked inside
    assert r1.serve(reqs[0], kv1) == reqs[0].num_blocks
    r0.close(), r1.close()
    assert pool_clean(pool)[0]


def test_results_are_lists_never_none(pool, unique_ns):
    eng = engine(pool, unique_ns)
    reqs, _ = conversations(16, 12, seed=15, systems=1, turns=1)
    keys = reqs[0].hex
    idx = eng._indices([eng.host.free[-1 - i] for i in range(len(keys))])
    assert eng.backend.batch_get_v1(keys, idx) == [False] * len(keys)
    assert eng.backend.batch_set_v1(keys, idx) == [True] * len(keys)
    assert eng.backend.batch_set_v1(keys, idx) == [True] * len(keys)     # present counts
    assert eng.backend.batch_get_v1(keys, idx) == [True] * len(keys)
    assert eng.backend.batch_get_v1([], idx[:0]) == []
    with pytest.raises(ValueError, match="host indices"):
        eng.backend.batch_get_v1(keys, idx[:-1])
    eng.close()
    assert pool_clean(pool)[0]


def test_full_pool_reports_false_for_pages_not_written(pool, unique_ns):
    eng = engine(pool, unique_ns)
    reqs, _ = conversations(16, 12, seed=16, systems=1, turns=1)
    keys = reqs[0].hex
    idx = eng._indices([eng.host.free[-1 - i] for i in range(len(keys))])
    held = squeeze_pool(pool, eng.layout.parts)        # room for one page's pool blocks
    try:
        res = eng.backend.batch_set_v1(keys, idx)
        assert res == [True] + [False] * (len(keys) - 1)
    finally:
        pool.free(held)
    eng.close()
    assert pool_clean(pool)[0]


def test_legacy_calls(pool, unique_ns):
    eng = engine(pool, unique_ns)
    reqs, _ = conversations(16, 12, seed=17, systems=1, turns=1)
    k = reqs[0].hex[0]
    kv = H.block_kv(eng.layout, k)
    flat = np.ascontiguousarray(np.stack([kv[:, 0].swapaxes(0, 1), kv[:, 1].swapaxes(0, 1)])).reshape(-1)
    assert not eng.backend.exists(k)
    assert eng.backend.get(k) is None
    assert eng.backend.set(k, flat)
    assert eng.backend.exists(k)
    got = eng.backend.get(k)
    assert got.tobytes() == flat.tobytes()
    assert eng.backend.batch_set([reqs[0].hex[1]], [flat])
    assert [x is not None for x in eng.backend.batch_get(reqs[0].hex[:3])] == [True, True, False]
    eng.close()
    assert pool_clean(pool)[0]


def test_unsupported_host_layout_and_io_before_registration(pool, unique_ns):
    cfg = H.HiCacheStorageConfig(0, 1, 0, 1, False, False, "m", extra_config={})
    be = H.S.BelugaHiCacheStorage(cfg, {}, pool=pool)
    with pytest.raises(RuntimeError, match="register_mem_pool_host"):
        be.batch_exists(["00" * 32])
    with pytest.raises(ValueError, match="page_unified.*--hicache-mem-layout"):
        be.register_mem_pool_host(H.HostKVCache(2, 2, 16, "float32", 16, 4, "page_unified"))


def test_subclasses_sglang_when_importable():
    base = pytest.importorskip("sglang.srt.mem_cache.hicache_storage", reason="SGLang is not installed")
    assert issubclass(H.S.BelugaHiCacheStorage, base.HiCacheStorage)


def test_clear_evicts_the_namespace_only(pool, unique_ns):
    mine = engine(pool, unique_ns)
    other = engine(pool, unique_ns + 1)
    reqs, _ = conversations(16, 12, seed=18, systems=1, turns=1)
    mine.serve(reqs[0]), other.serve(reqs[0])
    n = reqs[0].num_blocks
    assert mine.backend.batch_exists(reqs[0].hex) == n
    try:
        mine.backend.clear()
    except Exception as e:                 # clear() warns instead of raising
        pytest.fail(f"clear() raised {e!r}")
    if mine.backend.batch_exists(reqs[0].hex) == n:
        pytest.skip("EVICT needs an admin handle (clear() logged a warning)")
    assert mine.backend.batch_exists(reqs[0].hex) == 0
    assert other.backend.batch_exists(reqs[0].hex) == n
    mine.close(), other.close()


@pytest.mark.skipif(not H.S.beluga.FAKE_KERNEL, reason="refuses EVICT through the fake kernel")
def test_clear_without_the_evict_right_says_so_and_what_to_run(pool, unique_ns, caplog):
    import errno
    from beluga import _beluga
    eng = engine(pool, unique_ns)
    reqs, _ = conversations(16, 12, seed=19, systems=1, turns=1)
    eng.serve(reqs[0])
    _beluga._fake_fail("evict", 1, errno.EPERM)
    with caplog.at_level("WARNING", logger="beluga.adapters.sglang"):
        assert eng.backend.clear() is False
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "admin" in msg and "belugactl evict --ns 0x" in msg and "--all" in msg, msg
    assert eng.backend.batch_exists(reqs[0].hex) == reqs[0].num_blocks
    assert eng.backend.clear() is True
    eng.close()


def test_replicated_kv_heads_keep_the_models_head_count(pool, unique_ns):
    # review M-S7: two KV heads at TP 4, each rank holding one replicated
    # head; "num_kv_heads" gives the model's count, not head_num x tp_size
    ranks = [engine(pool, unique_ns, head_num=1, tp_rank=r, tp_size=4,
                    extra={"num_kv_heads": 2}) for r in range(4)]
    try:
        for e in ranks:
            spec = e.backend.store.layout.spec
            assert (spec.num_kv_heads, spec.heads_local) == (2, 1)
    finally:
        for e in ranks:
            e.close()
    with pytest.raises(ValueError, match="num_kv_heads 8 over tp_size 4 gives 2 heads"):
        engine(pool, unique_ns, head_num=1, tp_rank=0, tp_size=4, extra={"num_kv_heads": 8})
