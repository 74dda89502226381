# SPDX-License-Identifier: GPL-2.0
"""beluga.adapters.lmcache through LMCache's storage-plugin calls
(tests/python/harness/lmcache_plugin.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from beluga import keys as K                   # noqa: E402
from harness import lmcache_plugin as H       # noqa: E402
from harness.workload import conversations, pool_clean, squeeze_pool   # noqa: E402


def budget(pool):
    return max(4, min(60, pool.stats()["total_blocks"] // 2))


@pytest.mark.parametrize("async_lookup", [False, True])
def test_large_pool_hits_equal_the_oracle(pool, unique_ns, async_lookup):
    eng = H.Engine(pool, salt=f"lmc-{unique_ns}", async_lookup=async_lookup)
    reqs, _ = conversations(16, budget(pool), seed=21)
    got, want = H.replay(eng, reqs)
    assert got == want and sum(want) > 0
    assert eng.plugin.outstanding_pins() == 0
    eng.close()
    ok, s = pool_clean(pool)
    assert ok, s


BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4          # the harness's tiny model, float32


def test_split_chunk_is_scattered_and_read_back_as_a_copy(pool, unique_ns):
    """A chunk over two pool blocks: the put scatters LMCache's host chunk
    into the parts, a hit is a host copy, and block_view refuses it by name."""
    chunk = 2 * pool.block_size // BYTES_PER_TOKEN              # two full parts
    eng = H.Engine(pool, chunk=chunk, salt=f"lmc2-{unique_ns}")
    assert eng.layout.parts == 2
    kv = np.zeros(eng.shape, np.float32)
    last = chunk - 1                                   # a token in the second part
    kv[1, 1, last, 5] = 42.0                           # V, layer 1
    key = eng.key(b"\x07" * 32)
    (f,) = eng.plugin.batched_submit_put_task([key], [H.HostChunk(kv)])
    assert f.result() is True
    store = next(iter(eng.plugin._stores.values()))
    with store.pin(K.digest16(key.chunk_hash)) as p:
        assert p.count == 1
        assert p.view(0)[1, 1, last].reshape(-1)[5] == 42.0
        with pytest.raises(ValueError, match=r"split over 2 pool blocks .* no zero-copy view"):
            store.block_view(p.offsets)
    o = eng.plugin.get_blocking(key)
    assert o.state == "copy" and o.tensor[1, 1, last, 5] == 42.0
    o.ref_count_down()
    eng.close()
    assert pool_clean(pool)[0]


def test_capacity_pressure_drops_hits_never_bytes(pool, unique_ns):
    reqs, distinct = conversations(16, budget(pool), seed=22)
    held = squeeze_pool(pool, max(2, distinct // 4))
    try:
        eng = H.Engine(pool, salt=f"lmc-{unique_ns}")
        got, want = H.replay(eng, reqs)
        assert sum(got) < sum(want)
        assert all(g <= w for g, w in zip(got, want))
        eng.close()
    finally:
        pool.free(held)
    assert pool_clean(pool)[0]


def test_pin_unpin_contains_remove(pool, unique_ns, backend):
    eng = H.Engine(pool, salt=f"lmc-{unique_ns}")
    reqs, _ = conversations(16, 10, seed=23, systems=1, turns=1)
    eng.serve(reqs[0])
    k = eng.key(reqs[0].digests[0])
    assert eng.plugin.contains(k)
    assert eng.plugin.pin(k) and eng.plugin.contains(k, pin=True)
    assert eng.plugin.outstanding_pins() == 2
    assert eng.plugin.unpin(k) and eng.plugin.unpin(k) and not eng.plugin.unpin(k)
    missing = eng.key(b"\x77" * 32)
    assert not eng.plugin.contains(missing) and eng.plugin.get_blocking(missing) is None
    assert eng.plugin.get_non_blocking(missing) is None
    assert eng.plugin.remove(missing) is False
    assert eng.plugin.exists_in_put_tasks(k) is False
    eng.close()
    assert pool_clean(pool)[0]


def test_partial_chunk_is_not_stored(pool, unique_ns):
    eng = H.Engine(pool, salt=f"lmc-{unique_ns}")
    short, wrong = H.HostChunk(np.zeros((2, 2, 5, 32), np.float32)), \
        H.HostChunk(np.zeros((2, 3, 16, 32), np.float32))
    (f,) = eng.plugin.batched_submit_put_task([eng.key(b"\x05" * 32)], [short])
    assert f.result() is False and not eng.plugin.contains(eng.key(b"\x05" * 32))
    with pytest.raises(ValueError, match="chunk_size"):
        eng.plugin.batched_submit_put_task([eng.key(b"\x06" * 32)], [wrong])
    eng.close()
    assert pool_clean(pool)[0]


def test_foreign_memory_obj_is_copied_in(pool, unique_ns):
    eng = H.Engine(pool, salt=f"lmc-{unique_ns}")
    reqs, _ = conversations(16, 10, seed=24, systems=1, turns=1)
    kv = H.kv_2ltd(eng.layout, H.block_kv(eng.layout, reqs[0].hex[0]))

    class HostObj:                                     # e.g. LMCache's local CPU backend
        tensor = kv

    (f,) = eng.plugin.batched_submit_put_task([eng.key(reqs[0].digests[0])], [HostObj()])
    assert f.result() is True
    o = eng.plugin.get_blocking(eng.key(reqs[0].digests[0]))
    assert np.array(o.tensor).tobytes() == kv.tobytes()
    o.ref_count_down()
    eng.close()
    assert pool_clean(pool)[0]


def test_subclasses_lmcache_when_importable():
    base = pytest.importorskip("lmcache.v1.storage_backend.abstract_backend",
                               reason="LMCache is not installed")
    iface = getattr(base, "StoragePluginInterface", None) or base.AllocatorBackendInterface
    assert issubclass(H.M.BelugaStoragePlugin, iface)


def test_remove_evicts_one_key(pool, unique_ns, backend):
    eng = H.Engine(pool, salt=f"lmc-{unique_ns}")
    reqs, _ = conversations(16, 10, seed=25, systems=1, turns=1)
    eng.serve(reqs[0])
    keys = [eng.key(d) for d in reqs[0].digests]
    removed = eng.plugin.remove(keys[1])
    if not removed and backend == "real":
        pytest.skip("EVICT needs an admin handle: remove() answers False")
    assert removed, f"remove() of a present chunk ({eng.layout.parts} part(s)) answered False"
    assert eng.plugin.batched_contains(keys) == 1
    assert eng.plugin.batched_remove(keys) == 1 + (len(keys) - 2)   # key 1 is gone already
    assert eng.plugin.batched_contains(keys) == 0
    eng.close()
