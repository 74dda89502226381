# SPDX-License-Identifier: GPL-2.0
"""Batches: one syscall up to MAX_BATCH, libbeluga's chunking above it, and
random batches checked against a model of the leading-run lookup."""

import errno

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import beluga
from beluga import _beluga

BIG = pytest.mark.fake_pool(block_size=4096, regions="dax0.0:32M")   # 8192 blocks
N = beluga.MAX_BATCH + 904                                             # 5000


def need_free(pool, n):
    if pool.stats()["free_blocks"] < n:
        pytest.skip(f"needs {n} free blocks; the pool has fewer (use 4 KiB blocks)")


def fake_calls():
    return _beluga._fake_calls() if beluga.FAKE_KERNEL else None


def ioctls_of(before, cmd):
    return None if before is None else _beluga._fake_calls()[cmd] - before[cmd]


@BIG
def test_over_max_batch_end_to_end(pool, unique_ns):
    need_free(pool, N)
    c = fake_calls()
    offs = pool.alloc(N)
    assert len(offs) == N == len(set(offs))
    assert ioctls_of(c, "alloc") in (None, 2)

    keys = beluga.hash_chain(np.arange(N, dtype=np.uint32), 1)
    c = fake_calls()
    res = pool.publish(unique_ns, offs, keys)
    assert res.published == N and len(res.results) == N
    assert ioctls_of(c, "publish") in (None, 2)

    c = fake_calls()
    hits, pinned = pool.lookup(unique_ns, keys, pin=True)
    assert hits == N and np.array_equal(np.frombuffer(pinned, np.uint64),
                                        np.frombuffer(offs, np.uint64))
    assert ioctls_of(c, "lookup") in (None, 2)
    c = fake_calls()
    pool.release(pinned)
    assert ioctls_of(c, "release") in (None, 2)
    assert pool.evict_ns(unique_ns) == (N, 0)


@pytest.mark.parametrize("n", [1, 64, beluga.MAX_BATCH])
@BIG
def test_one_call_one_syscall(pool, unique_ns, n):
    need_free(pool, n)
    keys = beluga.hash_chain(range(n), 1)
    pool.publish(unique_ns, pool.alloc(n), keys)
    c = fake_calls()
    assert pool.lookup(unique_ns, keys) == (n, None)
    assert ioctls_of(c, "lookup") in (None, 1)
    c = fake_calls()
    hits, pinned = pool.lookup(unique_ns, keys, pin=True)
    assert hits == n and ioctls_of(c, "lookup") in (None, 1)
    pool.release(pinned)
    pool.evict_ns(unique_ns)


@BIG
def test_lookup_stops_at_the_first_short_chunk(pool, unique_ns):
    need_free(pool, 10)
    keys = beluga.hash_chain(range(N), 1)
    pool.publish(unique_ns, pool.alloc(10), keys[:160])
    c = fake_calls()
    assert pool.lookup(unique_ns, keys) == (10, None)
    assert ioctls_of(c, "lookup") in (None, 1)   # the second chunk is not asked
    pool.evict_ns(unique_ns)


@BIG
@pytest.mark.skipif(not beluga.FAKE_KERNEL, reason="fault injection needs the fake kernel")
def test_alloc_is_all_or_nothing_across_chunks(pool):
    _beluga._fake_fail("alloc", 2, errno.ENOSPC)
    with pytest.raises(beluga.NoSpace):
        pool.alloc(N)
    assert pool.stats()["allocated_blocks"] == 0


def model_hits(present, keys_idx):
    n = 0
    for k in keys_idx:
        if k not in present:
            break
        n += 1
    return n


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 40), max_size=60), st.lists(st.integers(0, 40), max_size=30),
       st.booleans())
def test_random_batches_follow_the_model(pool, unique_ns, query, published, pin):
    published = list(dict.fromkeys(published))       # distinct keys
    universe = beluga.hash_chain(range(41), 1)

    def keys(idx):
        return b"".join(universe[16 * i:16 * i + 16] for i in idx)

    ns = unique_ns
    offs = pool.alloc(len(published))
    try:
        res = pool.publish(ns, offs, keys(published))
        assert res.published == len(published)
        want = model_hits(set(published), query)
        hits, pinned = pool.lookup(ns, keys(query), pin=pin)
        assert hits == want
        if pin:
            by_key = dict(zip(published, offs))
            assert list(pinned) == [by_key[k] for k in query[:want]]
            pool.release(pinned)
        else:
            assert pinned is None
    finally:
        assert pool.evict_ns(ns) == (len(published), 0)


P, B, M = (1 << 88) + 0x13B, 0x6C62272E07BB014262B821756295C58D, (1 << 128) - 1


def py_block_key(parent, toks):
    """The reimplementation printed in userspace/include/libbeluga.h."""
    h = B
    data = parent.to_bytes(16, "little") + len(toks).to_bytes(4, "little")
    data += b"".join(t.to_bytes(4, "little") for t in toks)
    for c in data:
        h = ((h ^ c) * P) & M
    return h


@settings(max_examples=80)
@given(st.lists(st.integers(0, 2 ** 32 - 1), max_size=200), st.integers(1, 40),
       st.integers(0, 2 ** 128 - 1))
def test_hash_chain_equals_the_reference(tokens, block_tokens, parent):
    got = beluga.hash_chain(tokens, block_tokens, parent=parent.to_bytes(16, "little"))
    want, p = b"", parent
    for i in range(len(tokens) // block_tokens):
        p = py_block_key(p, tokens[i * block_tokens:(i + 1) * block_tokens])
        want += p.to_bytes(16, "little")
    assert got == want
