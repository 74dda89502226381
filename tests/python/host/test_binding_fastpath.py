# SPDX-License-Identifier: GPL-2.0
"""The binding's per-call fast paths answer exactly as the general ones: the
shared count-only results at and past the end of their cache, bytes keys
taken without the buffer protocol, publish items on the stack and on the
heap, and the lock-free in-flight count against close()."""

import array
import threading

import numpy as np
import pytest

import beluga

BIG = pytest.mark.fake_pool(block_size=4096, regions="dax0.0:32M")   # 8192 blocks
CACHED = 1024   # _beluga.c's COUNT_RESULTS: counts below it share one result


def need_free(pool, n):
    if pool.stats()["free_blocks"] < n:
        pytest.skip(f"needs {n} free blocks; the pool has fewer (use 4 KiB blocks)")


@BIG
def test_count_results_at_the_cache_edge(pool, unique_ns):
    n = CACHED + 2
    need_free(pool, n)
    keys = bytes(beluga.hash_chain(np.arange(n, dtype=np.uint32), 1))
    pool.publish(unique_ns, pool.alloc(n), keys)
    for hits in (0, 1, 64, CACHED - 1, CACHED, CACHED + 1, n):
        for _ in range(2):      # the second answer may be the shared one
            r = pool.lookup(unique_ns, keys[:16 * hits])
            assert type(r) is tuple and r == (hits, None), (hits, r)
    # a miss in the middle: the leading run only
    broken = keys[:16 * 5] + b"\xff" * 16 + keys[16 * 6:]
    assert pool.lookup(unique_ns, broken) == (5, None)
    assert pool.evict_ns(unique_ns) == (n, 0)


def test_bytes_keys_and_other_forms_agree(pool, unique_ns):
    keys = bytes(beluga.hash_chain(range(8 * 16), 16))
    pool.publish(unique_ns, pool.alloc(8), keys)

    class Keys(bytes):      # not exactly bytes: the buffer protocol's path
        pass

    for form in (keys, Keys(keys), bytearray(keys), memoryview(keys),
                 np.frombuffer(keys, np.uint8)):
        assert pool.lookup(unique_ns, form) == (8, None), type(form)
        hits, pinned = pool.lookup(unique_ns, form, pin=True)
        assert hits == 8 and len(pinned) == 8
        pool.release(pinned)
    # misaligned bytes contents are copied, not refused
    odd = (b"\0" + keys)[1:]
    assert pool.lookup(unique_ns, odd) == (8, None)
    for bad in (b"\1" * 17, Keys(b"\1" * 17)):
        with pytest.raises(ValueError, match="keys is 17 bytes, not a multiple of 16"):
            pool.lookup(unique_ns, bad)
    assert pool.evict_ns(unique_ns) == (8, 0)


@BIG
@pytest.mark.parametrize("n", [1, 64, 65, 300])   # 64: the last publish on the stack
def test_publish_results_on_either_side_of_the_stack_items(pool, unique_ns, n):
    need_free(pool, 2 * n)
    keys = bytes(beluga.hash_chain(np.arange(n, dtype=np.uint32), 1))
    first = pool.publish(unique_ns, pool.alloc(n), keys)
    assert (first.published, first.exists, first.failed) == (n, 0, 0)
    assert list(first.results) == [0] * n
    # the same keys again: every item a lost race (its block is freed),
    # whatever the previous call left in the items
    second = pool.publish(unique_ns, pool.alloc(n), keys)
    assert (second.published, second.exists, second.failed) == (0, n, 0)
    assert list(second.results) == [beluga.PUBLISH_EXISTS] * n
    assert pool.lookup(unique_ns, keys) == (n, None)
    assert pool.evict_ns(unique_ns) == (n, 0)


def test_close_races_with_fast_calls(device, backend, unique_ns):
    """Rounds of count-only and pinned lookups spinning in threads while the
    pool closes under them: each call either answers in full or is refused
    as closed, close() returns, and nothing runs on a closed handle."""
    keys = bytes(beluga.hash_chain(range(16 * 16), 16))
    with beluga.Pool(device) as setup:
        setup.publish(unique_ns, setup.alloc(16), keys)
    for _ in range(20):
        pool = beluga.Pool(device)
        go = threading.Barrier(5)
        errors, answers = [], [0] * 4

        def worker(i):
            go.wait()
            try:
                while True:
                    if i % 2:
                        hits, pinned = pool.lookup(unique_ns, keys, pin=True)
                        assert hits == 16 and len(pinned) == 16
                        pool.release(pinned)
                    else:
                        assert pool.lookup(unique_ns, keys) == (16, None)
                    answers[i] += 1
            except ValueError as exc:
                if "pool is closed" not in str(exc):
                    errors.append(exc)
            except BaseException as exc:  # noqa: BLE001 - handed to the test
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        go.wait()
        while sum(answers) < 8 and not errors:
            threading.Event().wait(0.001)
        pool.close()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads), "a worker never saw the close"
        assert not errors, errors
        assert pool.closed
    with beluga.Pool(device) as p:
        assert p.lookup(unique_ns, keys) == (16, None)
        evicted, busy = p.evict_ns(unique_ns)
    # A pin whose release() came too late stays with its handle; the module
    # drops it at close, the fake kernel (one client) keeps it.
    assert evicted + busy == 16
    if backend == "real":
        assert busy == 0


def test_alloc_free_release_take_their_fast_forms(pool, unique_ns):
    offs = pool.alloc(4)
    assert isinstance(offs, array.array) and offs.typecode == "Q" and len(offs) == 4
    assert len(pool.alloc(0)) == 0
    pool.free(offs)
    keys = bytes(beluga.hash_chain(range(4 * 16), 16))
    pool.publish(unique_ns, pool.alloc(4), keys)
    hits, pinned = pool.lookup(unique_ns, keys, pin=True)
    pool.release(list(pinned[:2]))               # a sequence of ints
    pool.release(np.frombuffer(pinned, np.uint64)[2:])
    assert pool.stats()["pins"] == 0
    assert pool.evict_ns(unique_ns) == (4, 0)
