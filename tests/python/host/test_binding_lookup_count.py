# SPDX-License-Identifier: GPL-2.0
"""Pool.lookup_count(): lookup()'s count, answered in this process from the
pool's index mapped read-only (BELUGA_IOC_INDEX_MAP), with no system call.
The fake kernel serves the mapping natively (the core's own copy in plain
memory), the 6.12 guest's module for real; both run these tests. The
answers must equal the ioctl's, with no LOOKUP issued once the index is
mapped, and stay right while other threads publish, evict and reuse
blocks, and after ATTACH or DETACH sealed the mapped copy."""

import threading
import time

import numpy as np
import pytest

import beluga

CHAIN = 24


def chain_keys(n, salt):
    return bytes(beluga.hash_chain(np.arange(n * 16, dtype=np.uint32) + salt, 16))


def publish(pool, ns, keys):
    n = len(keys) // 16
    res = pool.publish(ns, pool.alloc(n), keys)
    assert res.published == n, res
    return keys


def requests_for(keys):
    """Every prefix, a miss in the middle, unknown keys, the empty request."""
    n = len(keys) // 16
    out = [keys[:16 * k] for k in range(n + 1)]
    out.append(keys[:16 * 3] + b"\xee" * 16 + keys[16 * 4:])
    out.append(b"\x5a" * 16 * 5)
    out.append(keys + b"\x77" * 16)
    return out


def lookups_issued(pool):
    return pool.stats()["lookups"]


def test_equals_lookup(pool, unique_ns):
    keys = publish(pool, unique_ns, chain_keys(CHAIN, 1))
    for r in requests_for(keys):
        assert pool.lookup_count(unique_ns, r) == pool.lookup(unique_ns, r)[0], len(r) // 16
    # keys as numpy uint64 pairs, as lookup() takes them
    as_u64 = np.frombuffer(keys, dtype="<u8")
    assert pool.lookup_count(unique_ns, as_u64) == CHAIN
    assert pool.lookup_count(unique_ns ^ 1, keys) == 0      # another namespace
    assert pool.index_error is None
    assert pool.evict_ns(unique_ns) == (CHAIN, 0)
    assert pool.lookup_count(unique_ns, keys) == 0


def test_no_lookup_reaches_the_kernel(pool, pool_ro, unique_ns):
    keys = publish(pool, unique_ns, chain_keys(CHAIN, 2))
    for p in (pool, pool_ro):                   # read-only handles map it too
        assert p.lookup_count(unique_ns, keys) == CHAIN     # maps the index
        before = lookups_issued(pool)
        for k in range(CHAIN + 1):
            assert p.lookup_count(unique_ns, keys[:16 * k]) == k
        assert lookups_issued(pool) == before, "lookup_count() issued LOOKUP ioctls"
        assert p.index_error is None
    assert pool.evict_ns(unique_ns) == (CHAIN, 0)


def test_right_after_attach_and_detach_seal_the_copy(pool, unique_ns):
    """ATTACH and DETACH seal the mapped copy: the answers stay right, and
    the next call maps the new copy instead of asking the kernel from then
    on."""
    keys = publish(pool, unique_ns, chain_keys(CHAIN, 3))
    assert pool.lookup_count(unique_ns, keys) == CHAIN
    try:
        rid = pool.attach_node(0, max(2 * pool.block_size, 4 << 20))["region_id"]
    except beluga.PermissionDenied:
        pytest.skip("attach needs CAP_SYS_ADMIN: run the tests as root")
    try:
        for step in ("after ATTACH", "after DETACH"):
            assert pool.lookup_count(unique_ns, keys) == CHAIN, step     # maps anew
            before = lookups_issued(pool)
            assert pool.lookup_count(unique_ns, keys[:16 * 5]) == 5, step
            assert pool.lookup_count(unique_ns, keys) == CHAIN, step
            assert lookups_issued(pool) == before, f"no remap {step}: every lookup asks"
            if step == "after ATTACH":
                assert pool.detach(rid) == 0
                rid = None
    finally:
        if rid is not None:
            pool.detach(rid, evict=True)
    assert pool.index_error is None
    more = publish(pool, unique_ns, chain_keys(4, 4))
    assert pool.lookup_count(unique_ns, more) == 4
    assert pool.evict_ns(unique_ns) == (CHAIN + 4, 0)


def test_concurrent_publish_evict_reuse(pool, unique_ns):
    """Readers of a stable chain never miss it while a writer publishes and
    evicts other keys of the namespace (their blocks reused at once), never
    hit a key that was never published, and agree with the ioctl once the
    writer stops."""
    stable = publish(pool, unique_ns, chain_keys(CHAIN, 5))
    churn = [chain_keys(8, 100 + i) for i in range(4)]
    never = chain_keys(8, 999)
    stop = threading.Event()
    errors = []

    def writer():
        i = 0
        try:
            while not stop.is_set():
                keys = churn[i % len(churn)]
                publish(pool, unique_ns, keys)
                for k in range(len(keys) // 16 - 1, -1, -1):
                    pool.evict_key(unique_ns, keys[16 * k:16 * (k + 1)])
                i += 1
        except Exception as exc:                # noqa: BLE001 - reported below
            errors.append(exc)

    def reader(seed):
        rounds = 0
        try:
            while not stop.is_set() or rounds < 50:
                mixed = stable + churn[(seed + rounds) % len(churn)]
                got = pool.lookup_count(unique_ns, mixed)
                if not CHAIN <= got <= CHAIN + 8:
                    errors.append(AssertionError(f"stable+churn counted {got}"))
                if pool.lookup_count(unique_ns, stable) != CHAIN:
                    errors.append(AssertionError("a false miss on the stable chain"))
                if pool.lookup_count(unique_ns, never) != 0:
                    errors.append(AssertionError("a false hit on keys never published"))
                rounds += 1
        except Exception as exc:                # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + \
        [threading.Thread(target=reader, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[:3]
    for r in requests_for(stable) + [stable + c for c in churn]:
        assert pool.lookup_count(unique_ns, r) == pool.lookup(unique_ns, r)[0]
    assert pool.evict_ns(unique_ns) == (CHAIN, 0)


def test_errors_name_cause_and_fix(pool, device):
    with pytest.raises(ValueError, match="multiple of 16"):
        pool.lookup_count(1, b"x" * 17)
    with pytest.raises(TypeError, match="2 arguments"):
        pool.lookup_count(1)
    with pytest.raises((TypeError, OverflowError, ValueError)):
        pool.lookup_count(-1, b"")
    p = beluga.Pool(device)
    p.close()
    with pytest.raises(ValueError, match="open a new beluga.Pool"):
        p.lookup_count(1, b"")


# Big enough that the copy is a mapping of its own (glibc's mmap threshold):
# freed, it is gone, where a small copy's heap memory would still read.
@pytest.mark.fake_pool(regions="dax0.0:64M")
def test_a_pool_that_outlives_the_fake_reset(device, backend):
    """The fake kernel keeps a copy that is still mapped at its reset until
    its munmap, as the module keeps mapped pages: a Pool left open across
    _fake_reset() (its copy sealed by the reset) reads no freed memory."""
    if backend != "fake":
        pytest.skip("_fake_reset() is the fake kernel's; the module has no reset")
    from beluga import _beluga
    keys = chain_keys(8, 6)
    old = beluga.Pool(device)
    publish(old, 5, keys)
    assert old.lookup_count(5, keys) == 8
    _beluga._fake_reset(block_size=old.block_size, regions="dax0.0:64M")
    new = beluga.Pool(device)
    try:
        publish(new, 5, keys[:16 * 3])
        assert new.lookup_count(5, keys) == 3
        assert old.lookup_count(5, keys) == 3   # the sealed copy sends it to the new pool
        old.close()
        assert new.lookup_count(5, keys) == 3 and new.lookup_count(5, keys[:16]) == 1
        assert new.evict_ns(5) == (3, 0)
    finally:
        old.close()
        new.close()


def test_tally_counts_each_call_with_keys(pool, unique_ns):
    """lookup_count(ns, keys, tally): a call with keys adds 1, its hits and
    its misses (KVStore's statistics, with no lock of its own); a call
    with no keys, or one that fails, adds nothing."""
    from array import array
    keys = publish(pool, unique_ns, chain_keys(4, 7))
    tally = array("Q", [0, 0, 0])
    assert pool.lookup_count(unique_ns, keys, tally) == 4
    assert pool.lookup_count(unique_ns, keys[:32] + b"\xee" * 48, tally) == 2
    assert pool.lookup_count(unique_ns, b"", tally) == 0
    with pytest.raises(ValueError, match="multiple of 16"):
        pool.lookup_count(unique_ns, b"x" * 17, tally)
    assert pool.lookup_count(unique_ns, keys, None) == 4       # None: no tally
    assert tally.tolist() == [2, 6, 3]
    for bad in (array("I", [0, 0, 0]), array("Q", [0, 0]), bytearray(24)):
        with pytest.raises(TypeError, match=r"tally must be array\('Q'\) of at least 3"):
            pool.lookup_count(unique_ns, keys, bad)
    with pytest.raises(TypeError, match="tally is read-only"):
        pool.lookup_count(unique_ns, keys, bytes(24))
    assert tally.tolist() == [2, 6, 3]
    assert pool.evict_ns(unique_ns) == (4, 0)


def test_lookup_count_or_and_lookup_pinned(pool, unique_ns):
    """KVStore's hot paths in the binding: lookup_count_or answers keys as
    bytes as lookup_count does (counted in the tally) and hands any other
    keys, and bytes that lookup_count refuses with ValueError, to the
    general callable; lookup_pinned pins as lookup(pin=True) does and
    counts into the same tally; both name their forms when misused."""
    from array import array
    keys = publish(pool, unique_ns, chain_keys(CHAIN, 9))
    tally = array("Q", (0, 0, 0))
    handed = []

    def general(k):
        handed.append(k)
        return -1

    assert pool.lookup_count_or(unique_ns, tally, general, keys[:16 * 5] + b"\x11" * 16) == 5
    assert tally.tolist() == [1, 5, 1] and handed == []
    as_list = [keys[:16]]
    assert pool.lookup_count_or(unique_ns, tally, general, as_list) == -1
    assert pool.lookup_count_or(unique_ns, tally, general, b"\0" * 20) == -1
    assert handed == [as_list, b"\0" * 20] and tally.tolist() == [1, 5, 1]
    hits, offs = pool.lookup_pinned(unique_ns, keys[:16 * 3] + b"\x22" * 16, tally)
    assert hits == 3 and tally.tolist() == [2, 8, 2]
    again = pool.lookup(unique_ns, keys[:16 * 3], pin=True)[1]
    assert list(offs) == list(again)
    pool.release(again)
    pool.release(offs)
    assert pool.lookup_pinned(unique_ns, b"", tally)[0] == 0 and tally.tolist() == [2, 8, 2]
    with pytest.raises(TypeError, match=r"lookup_pinned\(ns, keys, tally\) takes 3 arguments, keys as bytes"):
        pool.lookup_pinned(unique_ns, as_list, tally)
    with pytest.raises(TypeError, match=r"lookup_count_or\(ns, tally, general, keys\) takes 4 arguments"):
        pool.lookup_count_or(unique_ns, tally, keys)
    with pytest.raises(ValueError, match="keys is 20 bytes, not a multiple of 16"):
        pool.lookup_pinned(unique_ns, b"\0" * 20, tally)
    assert pool.evict_ns(unique_ns) == (CHAIN, 0)
