# SPDX-License-Identifier: GPL-2.0
"""PoolMap.store_blocks() and load_blocks(): KVStore.store()'s and load()'s
steps in one call of the binding (test_store.py holds KVStore to the same
answers on both paths). Here: what the calls themselves answer, count and
refuse, and that nothing is left allocated or pinned when they fail."""

from array import array
import sys
from pathlib import Path

import numpy as np
import pytest

import beluga

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.workload import hold_all       # noqa: E402


def chain_keys(n, salt):
    return bytes(beluga.hash_chain(np.arange(n * 16, dtype=np.uint32) + salt, 16))


def refuse(source):
    raise AssertionError(f"source() called for {type(source).__name__}")


def assert_clean(pool):
    s = pool.stats()
    assert s["allocated_blocks"] == 0 and s["pins"] == 0, s


def test_store_then_load_round_trips_and_counts(pool, unique_ns):
    m = pool.map()
    bb = pool.block_size
    keys = chain_keys(4, 1)
    src = np.random.default_rng(3).integers(0, 256, (4, bb), np.uint8)
    tally = array("Q", (0, 0, 0))
    assert m.store_blocks(unique_ns, keys[:16], src[:1], bb, tally, refuse) == (0, 1, 0, None)
    assert list(tally) == [1, 0, 1]                 # the lookup of the present run
    assert m.store_blocks(unique_ns, keys, src, bb, tally, refuse) == (1, 3, 0, None)
    assert list(tally) == [2, 1, 4]
    assert m.store_blocks(unique_ns, keys, src, bb, tally, refuse) == (4, 0, 0, None)
    out = np.zeros((5, bb), np.uint8)
    assert m.load_blocks(unique_ns, keys + b"\x55" * 16, out, bb, refuse) == 4
    assert np.array_equal(out[:4], src) and not out[4].any()
    # block_bytes below the pool's block: the first bytes of each block
    assert m.load_blocks(unique_ns, keys[:16], [bytearray(100)], 100, refuse) == 1
    assert m.load_blocks(unique_ns, b"", [], bb, refuse) == 0
    assert pool.evict_ns(unique_ns) == (4, 0)
    assert_clean(pool)


def test_full_pool_stores_what_fits(pool, unique_ns):
    m = pool.map()
    bb = pool.block_size
    src = np.ones((5, bb), np.uint8)
    tally = array("Q", (0, 0, 0))
    held = hold_all(pool)
    try:
        assert m.store_blocks(unique_ns, chain_keys(5, 2), src, bb, tally, refuse) == \
            (0, 0, 0, None)
        pool.free(held[:2])
        held = held[2:]
        # 5 do not fit: halving, the 5 // 2 = 2 do
        assert m.store_blocks(unique_ns, chain_keys(5, 2), src, bb, tally, refuse)[:2] == (0, 2)
    finally:
        pool.free(held)
    assert pool.evict_ns(unique_ns) == (2, 0)
    assert_clean(pool)


def test_bad_calls_are_refused_before_the_pool(pool, unique_ns):
    m = pool.map()
    bb = pool.block_size
    keys = chain_keys(2, 3)
    src = np.zeros((2, bb), np.uint8)
    tally = array("Q", (0, 0, 0))
    with pytest.raises(TypeError, match="keys as bytes"):
        m.store_blocks(unique_ns, bytearray(keys), src, bb, tally, refuse)
    with pytest.raises(TypeError, match="6 arguments"):
        m.store_blocks(unique_ns, keys, src, bb, tally)
    with pytest.raises(ValueError, match="block_bytes"):
        m.store_blocks(unique_ns, keys, src, bb + 1, tally, refuse)
    with pytest.raises(ValueError, match="2 keys but 1 blocks"):
        m.store_blocks(unique_ns, keys, src[:1], bb, tally, refuse)
    with pytest.raises(TypeError, match="tally"):
        m.store_blocks(unique_ns, keys, src, bb, array("I", (0, 0, 0)), refuse)
    with pytest.raises(ValueError, match="multiple of 16"):
        m.store_blocks(unique_ns, keys[:20], src, bb, tally, refuse)

    def wrong(block):
        raise ValueError("the source says no")

    # a block that is not bb bytes goes to source(), whose error stands
    with pytest.raises(ValueError, match="the source says no"):
        m.store_blocks(unique_ns, keys, [src[0], bytes(10)], bb, tally, wrong)
    with pytest.raises(ValueError, match="gave 10 bytes"):
        m.store_blocks(unique_ns, keys, [src[0], bytes(10)], bb, tally, lambda b: b)
    with pytest.raises(ValueError, match="the source says no"):
        m.load_blocks(unique_ns, keys, [bytearray(bb), bytes(bb)], bb, wrong)
    with pytest.raises(TypeError, match="5 arguments"):
        m.load_blocks(unique_ns, keys, [], bb)
    with pytest.raises(ValueError, match="2 keys but 3 destination"):
        m.load_blocks(unique_ns, keys, [bytearray(bb)] * 3, bb, refuse)
    # the two stores that reached source() looked up first, as KVStore.store()
    # does before it converts a block; nothing else counted
    assert list(tally) == [2, 0, 4]
    assert pool.lookup(unique_ns, keys)[0] == 0
    assert_clean(pool)


def test_closed_pool_or_mapping_is_refused(device, unique_ns):
    with beluga.Pool(device, writable=True) as p:
        m = p.map()
        bb = p.block_size
        m.close()
        with pytest.raises(ValueError, match="mapping is closed"):
            m.store_blocks(unique_ns, chain_keys(1, 4), [bytes(bb)], bb, array("Q", (0, 0, 0)),
                           refuse)
        with pytest.raises(ValueError, match="mapping is closed"):
            m.load_blocks(unique_ns, chain_keys(1, 4), [bytearray(bb)], bb, refuse)
        assert p.stats()["allocated_blocks"] == 0
