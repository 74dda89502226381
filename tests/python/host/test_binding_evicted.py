# SPDX-License-Identifier: GPL-2.0
"""Pool.alloc_evicting(n): alloc(n), and the (ns, key) of each published
block the allocation evicted to make room, least recently used first
(BELUGA_ALLOC_EVICTED); and the error of a module that predates it."""

import array
import errno

import pytest

import beluga


def split_keys(chain):
    return [bytes(chain[i:i + 16]) for i in range(0, len(chain), 16)]


def fill_with_published(pool, ns):
    """Publish every free block under ns; returns their keys, oldest first.
    (Free blocks as the pool counts them: on the real module earlier tests
    leave retired blocks, which are neither free nor evictable.)"""
    n = pool.stats()["free_blocks"]
    offs = pool.alloc(n)
    keys = split_keys(beluga.hash_chain(array.array("I", range(4 * n)), 4))
    assert pool.publish(ns, offs, b"".join(keys)).published == n
    return keys


def test_free_blocks_evict_nothing(pool):
    offs, evicted = pool.alloc_evicting(3)
    assert isinstance(offs, array.array) and offs.typecode == "Q" and len(offs) == 3
    assert evicted == []
    pool.free(offs)
    offs, evicted = pool.alloc_evicting(0)
    assert len(offs) == 0 and evicted == []


def test_names_the_evicted_keys_oldest_first(pool, unique_ns):
    keys = fill_with_published(pool, unique_ns)
    offs, evicted = pool.alloc_evicting(3)
    assert len(offs) == 3 and len(evicted) == 3
    for ns, key in evicted:
        assert isinstance(ns, int) and isinstance(key, bytes) and len(key) == 16
    # On a shared real pool older blocks of other tests may go first.
    ours = [key for ns, key in evicted if ns == unique_ns]
    assert ours == keys[:len(ours)]
    if beluga.FAKE_KERNEL:
        assert evicted == [(unique_ns, k) for k in keys[:3]]
    for ns, key in evicted:
        assert pool.lookup(ns, key)[0] == 0
    pool.free(offs)


def test_nospace_and_read_only_as_alloc(pool, pool_ro):
    n = pool.stats()["total_blocks"]
    with pytest.raises(beluga.NoSpace, match="fewer free plus evictable blocks") as ei:
        pool.alloc_evicting(n + 1)
    assert ei.value.errno == errno.ENOSPC
    with pytest.raises(beluga.ReadOnly):
        pool_ro.alloc_evicting(1)
    with pytest.raises(ValueError, match=r"alloc_evicting\(n\): n must be >= 0"):
        pool.alloc_evicting(-1)
    with pytest.raises(TypeError):
        pool.alloc_evicting("3")


@pytest.mark.skipif(not beluga.FAKE_KERNEL, reason="an older module is the fake's")
@pytest.mark.fake_pool(alloc_evicted=False)
def test_module_without_the_report_names_cause_and_fix(pool):
    with pytest.raises(beluga.Error) as ei:
        pool.alloc_evicting(2)
    assert ei.value.errno == errno.EOPNOTSUPP
    assert "module predates ALLOC's evicted report" in str(ei.value)
    assert "upgrade the module" in str(ei.value)
    assert pool.stats()["allocated_blocks"] == 0
    pool.free(pool.alloc(2))     # the older module's ALLOC itself works
