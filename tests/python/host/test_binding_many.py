# SPDX-License-Identifier: GPL-2.0
"""Pool.lookup_many(): many requests' lookups in one call. Count-only ones
on the pool's index mapped into the process, as lookup_count() (no system
call); pinned ones through the pool's io_uring ring where the module has the
commands (the real module in the 6.12 guest) and through plain calls where
it has not (the fake kernel, which answers io_uring commands as a module
without them does). Either way every answer equals lookup()'s, pins are the
caller's, and a failure returns every pin the call took."""

import errno
import random
import threading

import numpy as np
import pytest

import beluga

CHAIN = 40      # published blocks; the `pool` fixture has at least 64


def publish_chain(pool, ns, n=CHAIN, salt=1):
    keys = bytes(beluga.hash_chain(np.arange(n * 16, dtype=np.uint32) + salt, 16))
    pool.publish(ns, pool.alloc(n), keys)
    return keys


def requests_of(keys, count, seed):
    """Prefixes of every length, a miss in the middle, unknown keys, and
    empty requests, in a random order."""
    rng = random.Random(seed)
    n = len(keys) // 16
    out = []
    for i in range(count):
        k = rng.randrange(n + 1)
        kind = i % 5
        if kind == 3 and k > 2:
            cut = rng.randrange(1, k)
            out.append(keys[:16 * cut] + b"\xee" * 16 + keys[16 * (cut + 1):16 * k])
        elif kind == 4:
            out.append(rng.randbytes(16 * rng.randrange(1, 8)))
        else:
            out.append(keys[:16 * k])
    out[rng.randrange(count)] = keys        # at least one whole chain
    return out


def test_ring_where_the_module_has_it(pool, backend, unique_ns):
    publish_chain(pool, unique_ns, 4)
    assert pool.ring_error is None          # not tried yet
    assert pool.lookup_many(unique_ns, [b""]) == [pool.lookup(unique_ns, b"")]
    assert pool.ring_error is None          # count-only: on the mapped index
    got = pool.lookup_many(unique_ns, [b""], pin=True)
    assert [(h, list(o)) for h, o in got] == [(0, [])]
    if backend == "real":
        # The guests' kernels and this module have io_uring commands.
        assert pool.ring_error is None
    else:
        msg = pool.ring_error
        assert isinstance(msg, str) and "io_uring" in msg, msg
    assert pool.evict_ns(unique_ns) == (4, 0)


def test_count_only_takes_no_system_call(pool, unique_ns):
    keys = publish_chain(pool, unique_ns)
    reqs = requests_of(keys, 100, 11)
    want = [pool.lookup(unique_ns, r) for r in reqs]
    assert pool.lookup_many(unique_ns, reqs[:1]) == want[:1]       # maps the index
    before = pool.stats()["lookups"]
    assert pool.lookup_many(unique_ns, reqs) == want
    assert pool.stats()["lookups"] == before, "count-only lookup_many() issued LOOKUPs"
    assert pool.index_error is None
    assert pool.evict_ns(unique_ns) == (CHAIN, 0)


@pytest.mark.parametrize("count", [1, 63, 64, 65, 200])
def test_count_only_equals_lookup(pool, unique_ns, count):
    keys = publish_chain(pool, unique_ns)
    reqs = requests_of(keys, count, count)
    want = [pool.lookup(unique_ns, r) for r in reqs]
    assert pool.lookup_many(unique_ns, reqs) == want
    assert (CHAIN, None) in want
    assert pool.evict_ns(unique_ns) == (CHAIN, 0)


def test_pinned_equals_lookup_and_pins_are_the_callers(pool, unique_ns):
    keys = publish_chain(pool, unique_ns)
    reqs = requests_of(keys, 150, 7)
    got = pool.lookup_many(unique_ns, reqs, pin=True)
    assert len(got) == len(reqs)
    for (hits, offs), r in zip(got, reqs):
        want, _ = pool.lookup(unique_ns, r)
        assert hits == want and len(offs) == hits
    held = sum(h for h, _ in got)
    assert held > 0
    # pinned blocks cannot be evicted until every pin is released
    assert pool.evict_ns(unique_ns)[0] < CHAIN
    for _, offs in got:
        pool.release(offs)
    assert pool.evict_ns(unique_ns)[0] + pool.stats()["free_blocks"] >= CHAIN


@pytest.mark.fake_pool(max_batch=8)
def test_requests_over_max_batch_take_the_plain_call(pool, unique_ns):
    max_batch = pool.info()["max_batch"]
    keys = publish_chain(pool, unique_ns, min(CHAIN, max_batch + 3))
    unknown = bytes(16 * (max_batch + 5))       # all-zero keys: a miss
    reqs = [keys, unknown, keys[:16 * 2], keys]
    want = [pool.lookup(unique_ns, r) for r in reqs]
    assert pool.lookup_many(unique_ns, reqs) == want
    got = pool.lookup_many(unique_ns, reqs, pin=True)
    assert [h for h, _ in got] == [h for h, _ in want]
    for _, offs in got:
        pool.release(offs)
    pool.evict_ns(unique_ns)


def test_bad_request_raises_before_anything_runs(pool, unique_ns):
    keys = publish_chain(pool, unique_ns, 4)
    with pytest.raises(ValueError, match=r"requests\[1\] is 17 bytes"):
        pool.lookup_many(unique_ns, [keys, b"\1" * 17], pin=True)
    with pytest.raises(TypeError, match="sequence of key buffers"):
        pool.lookup_many(unique_ns, 5)
    with pytest.raises(TypeError, match="ns must be an int"):
        pool.lookup_many("ns", [keys])
    # no pin was taken by the refused calls: the `pool` fixture's leak check
    assert pool.evict_ns(unique_ns) == (4, 0)


def test_a_failed_request_returns_every_pin(pool, backend, unique_ns):
    if backend == "real":
        pytest.skip("needs the fake kernel's fault injection (_fake_fail)")
    from beluga import _beluga
    keys = publish_chain(pool, unique_ns, 4)
    free = pool.stats()["free_blocks"]
    _beluga._fake_fail("lookup", 5, errno.EIO)     # the 5th of 10 fails
    with pytest.raises(beluga.Error) as exc:
        pool.lookup_many(unique_ns, [keys] * 10, pin=True)
    assert exc.value.errno == errno.EIO
    # the other nine pinned all four blocks: every pin was given back
    assert pool.evict_ns(unique_ns) == (4, 0)
    assert pool.stats()["free_blocks"] == free + 4


def test_closed_pool(pool, unique_ns):
    pool.close()
    with pytest.raises(ValueError, match="closed"):
        pool.lookup_many(unique_ns, [b""], pin=True)


def test_threads_share_the_pools_ring(pool, unique_ns):
    keys = publish_chain(pool, unique_ns)
    reqs = requests_of(keys, 100, 3)
    want = [pool.lookup(unique_ns, r) for r in reqs]
    errors = []

    def worker():
        try:
            for _ in range(20):
                got = pool.lookup_many(unique_ns, reqs, pin=True)
                assert [h for h, _ in got] == [h for h, _ in want]
                for _, offs in got:
                    pool.release(offs)
                assert pool.lookup_many(unique_ns, reqs) == want
        except Exception as exc:       # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert pool.evict_ns(unique_ns) == (CHAIN, 0)


def test_close_with_the_ring_open(device, unique_ns):
    with beluga.Pool(device) as p:
        keys = publish_chain(p, unique_ns, 4)
        got = p.lookup_many(unique_ns, [keys, keys[:16]], pin=True)
        assert [h for h, _ in got] == [4, 1]
        for _, offs in got:
            p.release(offs)
        p.evict_ns(unique_ns)
    assert p.closed
    with pytest.raises(ValueError, match="closed"):
        p.lookup_many(unique_ns, [keys])
