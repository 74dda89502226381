# SPDX-License-Identifier: GPL-2.0
"""KVStore over the binding: store/load round trips, parts, races, full
pools and partial loads.  Runs on the fake backend and, unchanged, in the
guest against the real module (fresh salts per test; sizes from the pool)."""

from array import array
import sys
from pathlib import Path

import numpy as np
import pytest

import beluga
from beluga import keys as K
from beluga.layout import BlockLayout, ModelSpec
from beluga.store import KVStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness.workload import hold_all       # noqa: E402

BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4        # layers * (K,V) * heads * dim * float32


def make_layout(pool, parts=1, tp_rank=0, tp_size=1):
    """A small model whose engine block is exactly ``parts`` pool blocks
    (the last one a little short when parts > 1)."""
    if parts == 1:
        tokens = pool.block_size // BYTES_PER_TOKEN
    else:
        tokens = (parts - 1) * pool.block_size // BYTES_PER_TOKEN + 1
    spec = ModelSpec(model="beluga-test/tiny", num_layers=2, num_kv_heads=2 * tp_size,
                     head_dim=16, dtype="float32", tokens_per_block=tokens,
                     tp_rank=tp_rank, tp_size=tp_size)
    lay = BlockLayout(spec, pool.block_size)
    assert lay.parts == parts
    return lay


def blocks_for(layout, n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n,) + layout.shape).astype(layout.dtype)


def keys_for(store, n, first_token=1):
    toks = list(range(first_token, first_token + n * store.layout.tokens))
    return store.keys_for(toks)


def assert_clean(pool):
    s = pool.stats()
    assert s["allocated_blocks"] == 0 and s["pins"] == 0, s


@pytest.fixture
def store(pool, unique_ns):
    s = KVStore(pool, make_layout(pool), salt=f"test-{unique_ns}")
    yield s
    s.close()


def test_round_trip_is_bit_exact(pool, store):
    data = blocks_for(store.layout, 4, seed=1)
    k = keys_for(store, 4)
    res = store.store(k, data)
    assert (res.stored, res.exists, res.skipped, res.failed, res.not_stored) == (4, 0, 0, [], 0)
    assert res.ok
    assert store.lookup(k) == 4
    out = store.layout.empty(4)
    out[:] = 7
    lr = store.load(k, out)
    assert lr.ok and lr.loaded == 4 and lr.missing == []
    assert out.tobytes() == data.tobytes()
    st = store.stats()
    assert st["stored"] == 4 and st["loaded"] == 4 and st["load_missing"] == 0
    # the store probe missed 4; lookup() and the load hit 4 each
    assert st["load_failures"] == 0 and st["hits"] == 4 + 4 and st["misses"] == 4
    assert_clean(pool)


def test_second_store_skips_the_present_run(pool, store):
    data = blocks_for(store.layout, 3, seed=2)
    k = keys_for(store, 3)
    store.store(k[:32], data[:2])
    before = pool.stats()["allocs"] if "allocs" in pool.stats() else None
    res = store.store(k, data)
    assert res.skipped == 2 and res.stored == 1
    if before is not None:
        assert pool.stats()["allocs"] - before == 1     # only the miss was allocated
    out = store.layout.empty(3)
    assert store.load(k, out).loaded == 3
    assert out.tobytes() == data.tobytes()
    assert_clean(pool)


def test_partial_load_reports_missing_and_leaves_them_untouched(pool, store):
    data = blocks_for(store.layout, 5, seed=3)
    k = keys_for(store, 5)
    store.store(k[:3 * 16], data[:3])
    out = store.layout.empty(5)
    out[:] = -1.0
    lr = store.load(k, out)
    assert not lr.ok and lr.loaded == 3 and lr.missing == [3, 4]
    assert out[:3].tobytes() == data[:3].tobytes()
    assert np.all(out[3:] == -1.0)
    assert store.stats()["load_missing"] == 2 and store.stats()["load_failures"] == 1
    assert_clean(pool)


def test_a_hole_ends_the_run(pool, store):
    data = blocks_for(store.layout, 3, seed=4)
    k = K.split(keys_for(store, 3))
    store.store(K.join([k[0], k[2]]), [data[0], data[2]])
    assert store.lookup(K.join(k)) == 1
    assert store.load(K.join(k), store.layout.empty(3)).missing == [1, 2]
    assert_clean(pool)


def test_writer_callback_writes_in_place(pool, store):
    k = keys_for(store, 2)
    seen = []

    def writer(i, dst):
        seen.append(i)
        assert dst.dtype == np.uint8 and dst.size == store.layout.block_bytes
        store.layout.view(dst)[...] = i + 0.5

    assert store.store(k, writer=writer).stored == 2
    assert seen == [0, 1]
    got = []
    assert store.load(k, reader=lambda i, src: got.append(store.layout.view(src).copy())).ok
    assert np.all(got[0] == 0.5) and np.all(got[1] == 1.5)
    assert_clean(pool)


def test_writer_exception_frees_everything(pool, store):
    k = keys_for(store, 3)

    def writer(i, dst):
        if i == 1:
            raise RuntimeError("engine copy failed")

    with pytest.raises(RuntimeError, match="engine copy failed"):
        store.store(k, writer=writer)
    assert store.lookup(k) == 0
    assert_clean(pool)


def test_reader_exception_releases_pins(pool, store):
    k = keys_for(store, 2)
    store.store(k, blocks_for(store.layout, 2, seed=5))

    def reader(i, src):
        raise KeyError("consumer broke")

    with pytest.raises(KeyError):
        store.load(k, reader=reader)
    assert_clean(pool)


def test_lost_race_counts_as_stored_and_leaks_nothing(pool, store):
    k = keys_for(store, 1)
    data = blocks_for(store.layout, 1, seed=6)
    a, b = store.allocate(1), store.allocate(1)
    a.block(0)[:] = data[0].reshape(-1).view(np.uint8)
    b.block(0)[:] = 0
    ra, rb = a.publish(k), b.publish(k)
    assert (ra.stored, ra.exists) == (1, 0)
    assert (rb.stored, rb.exists, rb.failed) == (1, 1, [])
    out = store.layout.empty(1)
    store.load(k, out)
    assert out.tobytes() == data.tobytes()          # the winner's bytes
    assert_clean(pool)


def test_full_pool_stores_a_prefix_and_frees_the_rest(pool, store):
    held = hold_all(pool)                           # evicts every unpinned block
    try:
        k = keys_for(store, 5)
        data = blocks_for(store.layout, 5, seed=7)
        res = store.store(k, data)
        assert res.nospace and res.stored == 0 and res.not_stored == 5 and not res.ok
        pool.free(held[:2])
        held = held[2:]
        res = store.store(k, data)                  # 5 do not fit, 2 do
        assert (res.stored, res.not_stored) == (2, 3)
        assert store.lookup(k) == 2
        out = store.layout.empty(5)
        assert store.load(k, out).loaded == 2
        assert out[:2].tobytes() == data[:2].tobytes()
    finally:
        pool.free(held)
    assert store.stats()["not_stored"] == 8
    assert_clean(pool)


def test_allocate_without_partial_raises_nospace(pool, store):
    held = hold_all(pool)
    try:
        with pytest.raises(beluga.NoSpace):
            store.allocate(1, partial=False)
    finally:
        pool.free(held)
    assert_clean(pool)


def test_allocate_names_the_keys_it_evicted(pool, store):
    held = hold_all(pool)                           # evicts every unpinned block
    try:
        pool.free(held[:3])
        held = held[3:]
        k = keys_for(store, 3)
        assert store.store(k, blocks_for(store.layout, 3, seed=11)).stored == 3
        a = store.allocate(2, partial=False)        # only our 3 blocks can go
        assert a.evicted == [(store.ns.value, key) for key in K.split(k)[:2]]
        a.free()
        b = store.allocate(1)                       # a freed block: nothing evicted
        assert b.evicted == []
        b.free()
    finally:
        pool.free(held)
    assert_clean(pool)


@pytest.mark.skipif(not beluga.FAKE_KERNEL, reason="an older module is the fake's")
@pytest.mark.fake_pool(alloc_evicted=False)
def test_allocate_on_a_module_without_the_report_falls_back_once(pool, store):
    a = store.allocate(2)
    assert a.count == 2 and a.evicted == []
    assert store._evictions_reported is False       # not asked again
    a.free()
    b = store.allocate(1)
    assert b.count == 1 and b.evicted == []
    b.free()
    assert_clean(pool)


@pytest.mark.parametrize("parts", [2, 3])
def test_split_blocks_round_trip(pool, unique_ns, parts):
    store = KVStore(pool, make_layout(pool, parts=parts), salt=f"parts-{unique_ns}")
    data = blocks_for(store.layout, 3, seed=8)
    k = keys_for(store, 3)
    res = store.store(k, data)
    assert res.stored == 3
    assert pool.stats()["published_blocks"] >= 3 * parts
    assert store.lookup(k) == 3
    out = store.layout.empty(3)
    assert store.load(k, out).ok
    assert out.tobytes() == data.tobytes()
    with store.pin(k[:16]) as p:
        assert p.count == 1 and len(p.offsets) == parts
        assert p.view(0).tobytes() == data[0].tobytes()
    assert_clean(pool)


@pytest.mark.parametrize("parts", [1, 2])
def test_evict_block_removes_every_part(pool, unique_ns, parts):
    store = KVStore(pool, make_layout(pool, parts=parts), salt=f"evict-{unique_ns}")
    k = keys_for(store, 2)
    assert store.store(k, blocks_for(store.layout, 2, seed=12)).stored == 2
    before = pool.stats()["published_blocks"]
    try:
        assert store.evict_block(k[16:]) is True
    except beluga.PermissionDenied:
        pytest.skip("EVICT needs an admin handle on this pool")
    assert pool.stats()["published_blocks"] == before - parts     # no part left behind
    assert store.lookup(k) == 1
    assert store.evict_block(k[16:]) is False                     # absent now
    with pytest.raises(ValueError, match="one 16-byte key"):
        store.evict_block(k)
    assert_clean(pool)


def test_block_with_missing_part_is_a_miss(pool, unique_ns):
    store = KVStore(pool, make_layout(pool, parts=2), salt=f"hole-{unique_ns}")
    data = blocks_for(store.layout, 2, seed=9)
    k = keys_for(store, 2)
    store.store(k[:16], data[:1])
    # Publish only the first part of block 1, as a writer that died between
    # parts would leave it.
    offs = pool.alloc(1)
    pool.publish(store.ns.value, offs, K.part_keys(k[16:], 2)[:16])
    assert store.lookup(k) == 1
    out = store.layout.empty(2)
    assert store.load(k, out).missing == [1]
    assert_clean(pool)                               # the lone part's pin was released


def test_namespaces_separate_salts_and_tp_ranks(pool, unique_ns):
    a = KVStore(pool, make_layout(pool), salt=f"a-{unique_ns}")
    b = KVStore(pool, make_layout(pool), salt=f"b-{unique_ns}")
    r1 = KVStore(pool, make_layout(pool, tp_rank=1, tp_size=2), salt=f"a-{unique_ns}")
    k = keys_for(a, 2)
    a.store(k, blocks_for(a.layout, 2, seed=10))
    assert a.lookup(k) == 2 and b.lookup(k) == 0 and r1.lookup(k) == 0
    assert a.ns.diff(r1.ns)                          # and describe() says why
    assert_clean(pool)


def test_pinned_view_is_read_only_and_release_is_idempotent(pool, store):
    k = keys_for(store, 1)
    data = blocks_for(store.layout, 1, seed=11)
    store.store(k, data)
    p = store.pin(k)
    v = p.view(0)
    assert v.tobytes() == data[0].tobytes()
    with pytest.raises(ValueError):
        v[0, 0, 0, 0, 0] = 1.0
    del v
    assert pool.stats()["pins"] >= 1
    p.release()
    p.release()
    with pytest.raises(ValueError, match="released"):
        p.view(0)
    assert_clean(pool)


def test_bad_arguments_are_rejected_before_touching_the_pool(pool, store):
    k = keys_for(store, 2)
    with pytest.raises(ValueError, match="whole 16-byte keys"):
        store.lookup(b"\0" * 20)
    with pytest.raises(ValueError, match="2 keys but 1 blocks"):
        store.store(k, blocks_for(store.layout, 1, seed=0))
    with pytest.raises(ValueError, match="block buffer must be"):
        store.store(k, [bytes(10), bytes(10)])
    with pytest.raises(TypeError, match="exactly one of"):
        store.store(k)
    with pytest.raises(ValueError, match="must be writable"):
        store.load(k, [bytes(store.layout.block_bytes)] * 2)
    with pytest.raises(ValueError, match="2 keys but 3 destination"):
        store.load(k, store.layout.empty(3))
    assert store.store(b"", blocks=[]).requested == 0
    assert store.load(b"", out=[]).ok
    assert_clean(pool)


def test_closed_store_says_so(pool, unique_ns):
    store = KVStore(pool, make_layout(pool), salt=f"closed-{unique_ns}")
    k = keys_for(store, 1)
    store.store(k, blocks_for(store.layout, 1, seed=15))
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.load(k, store.layout.empty(1))
    assert_clean(pool)                          # the failed load released its pin


def test_layout_must_match_the_pool(pool):
    spec = ModelSpec(model="m", num_layers=1, num_kv_heads=1, head_dim=1, dtype="float32")
    with pytest.raises(ValueError, match="pool.block_size"):
        KVStore(pool, BlockLayout(spec, pool.block_size * 2))
    with pytest.raises(ValueError, match="unknown key scheme"):
        KVStore(pool, BlockLayout(spec, pool.block_size), key_scheme="crc32")


def test_fnv_scheme_and_explicit_keys(pool, unique_ns):
    store = KVStore(pool, make_layout(pool), salt=f"fnv-{unique_ns}", key_scheme="fnv")
    toks = list(range(3 * store.layout.tokens))
    assert store.keys_for(toks) == bytes(beluga.hash_chain(toks, store.layout.tokens))
    k = [bytes([i]) * 16 for i in range(1, 3)]       # a list of 16-byte keys works too
    store.store(k, blocks_for(store.layout, 2, seed=12))
    assert store.lookup(k) == 2
    assert_clean(pool)


def test_shared_pool_path_round_trips(pool, unique_ns):
    if not hasattr(beluga, "flush_range"):
        pytest.skip("the binding has no flush_range/invalidate_range")
    store = KVStore(pool, make_layout(pool), salt=f"shared-{unique_ns}", shared=True)
    data = blocks_for(store.layout, 2, seed=13)
    k = keys_for(store, 2)
    store.store(k, data)
    out = store.layout.empty(2)
    assert store.load(k, out).ok and out.tobytes() == data.tobytes()
    assert "shared" in store.describe()
    assert_clean(pool)


def test_describe_lists_namespace_fields(store):
    d = store.describe()
    assert f"0x{store.ns.value:016x}" in d
    for field in ("model", "tp_rank", "tokens_per_block", "salt", "sha256"):
        assert field in d


# ---- property: any interleaving, any pressure: loads are exact or missing --

from hypothesis import HealthCheck, given, settings, strategies as st    # noqa: E402

OPS = st.lists(st.tuples(st.sampled_from(["store", "load", "pin", "unpin", "squeeze", "unsqueeze"]),
                         st.integers(0, 2), st.integers(1, 6)), min_size=1, max_size=12)


# The pool fixture is shared by the examples: each uses a fresh salt and
# leaves nothing allocated or pinned, which the end of the test checks.
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_any_sequence_loads_exact_bytes_or_reports_missing(pool, ops):
    import secrets
    store = KVStore(pool, make_layout(pool), salt=f"prop-{secrets.randbits(64)}")
    lay = store.layout
    # three chains sharing their first two blocks
    base = list(range(1, 1 + 2 * lay.tokens))
    chains = [store.keys_for(base + [1000 * (c + 1) + t for t in range(4 * lay.tokens)])
              for c in range(3)]

    def kv(key16):
        rng = np.random.default_rng(int.from_bytes(key16[:8], "little"))
        return rng.standard_normal(lay.shape).astype(lay.dtype)

    pinned, held = [], []
    try:
        for op, c, n in ops:
            k = chains[c][:16 * n]
            if op == "store":
                res = store.store(k, np.stack([kv(x) for x in K.split(k)]))
                assert res.present + res.not_stored + len(res.failed) == n
            elif op == "load":
                out = lay.empty(n)
                out[:] = np.nan
                res = store.load(k, out)
                for i, x in enumerate(K.split(k)):
                    if i < res.loaded:
                        assert out[i].tobytes() == kv(x).tobytes()
                    else:
                        assert np.isnan(out[i]).all()        # never written
            elif op == "pin":
                pinned.append((store.pin(k), k))
            elif op == "unpin" and pinned:
                pinned.pop(0)[0].release()
            elif op == "squeeze":
                free = pool.stats()["free_blocks"]
                if free > n:
                    held.append(pool.alloc(free - n))
            elif op == "unsqueeze" and held:
                pool.free(held.pop())
            s = pool.stats()
            assert (s["free_blocks"] + s["allocated_blocks"] + s["published_blocks"]
                    + s["retired_blocks"]) == s["total_blocks"]
        for p, k in pinned:             # pinned blocks survived all pressure intact
            for i in range(p.count):
                assert p.view(i).tobytes() == kv(K.split(k)[i]).tobytes()
    finally:
        for p, _ in pinned:
            p.release()
        for h in held:
            pool.free(h)
        store.close()
    assert_clean(pool)


class SkewedPool:
    """A pool whose pinned LOOKUP returns the hits' offsets rotated by one, as
    BELUGA_FAKE_LOOKUP_SKEW does to the C tests: a broken kernel or binding."""

    def __init__(self, pool):
        self._pool = pool

    def __getattr__(self, name):
        return getattr(self._pool, name)

    def lookup(self, ns, keys, pin=False):
        hits, offs = self._pool.lookup(ns, keys, pin=pin)
        if pin and hits > 1:
            offs = offs[1:hits] + offs[:1] + offs[hits:]
        return hits, offs


def test_the_round_trip_check_catches_a_wrong_offset(pool, unique_ns):
    good = KVStore(pool, make_layout(pool), salt=f"skew-{unique_ns}")
    bad = KVStore(SkewedPool(pool), make_layout(pool), salt=f"skew-{unique_ns}")
    data = blocks_for(good.layout, 3, seed=14)
    k = keys_for(good, 3)
    good.store(k, data)
    out = good.layout.empty(3)
    assert bad.load(k, out).ok                       # the store cannot tell...
    assert out.tobytes() != data.tobytes()           # ...but the bytes do
    assert good.load(k, out).ok and out.tobytes() == data.tobytes()
    good.close(), bad.close()
    assert_clean(pool)


def test_threads_store_and_load_overlapping_chains(pool, unique_ns):
    """SGLang calls the backend from its prefetch and backup threads at once."""
    import threading
    store = KVStore(pool, make_layout(pool), salt=f"threads-{unique_ns}")
    lay = store.layout
    base = list(range(1, 1 + 2 * lay.tokens))
    chains = [store.keys_for(base + [5000 * (c + 1) + t for t in range(2 * lay.tokens)])
              for c in range(4)]

    def kv(key16):
        rng = np.random.default_rng(int.from_bytes(key16[:8], "little"))
        return rng.standard_normal(lay.shape).astype(lay.dtype)

    errors = []

    def run(c):
        try:
            k = chains[c]
            for _ in range(5):
                store.store(k, np.stack([kv(x) for x in K.split(k)]))
                out = lay.empty(4)
                res = store.load(k, out)
                for i, x in enumerate(K.split(k)[:res.loaded]):
                    assert out[i].tobytes() == kv(x).tobytes()
        except BaseException as e:          # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    st = store.stats()
    assert st["stored"] >= 4 * 2 + 2        # every chain's own blocks, the shared two once
    store.close()
    assert_clean(pool)


def test_readme_quick_start_runs(pool, capsys):
    """The quick start in userspace/python/README.md works as printed."""
    import re
    readme = Path(__file__).resolve().parents[3] / "userspace" / "python" / "README.md"
    code = re.search(r"## Quick start.*?```python\n(.*?)```", readme.read_text(), re.S).group(1)
    exec(compile(code, str(readme), "exec"), {})
    out = capsys.readouterr().out
    # on the real module an earlier run may have stored the block already
    assert ("stored=1" in out or "skipped=1" in out) and "loaded=1" in out, out
    assert out.rstrip().endswith("True"), out


@pytest.mark.parametrize("parts", [1, 2])
def test_lookup_many_equals_lookup(pool, unique_ns, parts):
    store = KVStore(pool, make_layout(pool, parts=parts), salt=f"many-{unique_ns}")
    k = keys_for(store, 3)
    store.store(k[:2 * 16], blocks_for(store.layout, 2, seed=9))
    blocks = K.split(k)
    requests = [k, k[:16], b"", blocks[2], K.join([blocks[0], blocks[2]]), k[16:]]
    before = store.stats()
    want = [store.lookup(r) for r in requests]
    mid = store.stats()
    assert want == [2, 1, 0, 0, 1, 1]
    assert store.lookup_many(requests) == want
    after = store.stats()
    for name in ("lookups", "hits", "misses"):      # counted as lookup() counts
        assert after[name] - mid[name] == mid[name] - before[name], name
    store.close()
    assert_clean(pool)


def test_lookup_takes_no_system_call(pool, unique_ns):
    """KVStore.lookup() goes through Pool.lookup_count(): once the index is
    mapped, probing issues no LOOKUP ioctl, and counts as before."""
    store = KVStore(pool, make_layout(pool), salt=f"count-{unique_ns}")
    k = keys_for(store, 3)
    store.store(k, blocks_for(store.layout, 3, seed=21))
    assert store.lookup(k) == 3                 # maps the index
    before, counted = pool.stats()["lookups"], store.stats()
    assert [store.lookup(k[:16 * n]) for n in range(1, 4)] == [1, 2, 3]
    assert pool.stats()["lookups"] == before, "KVStore.lookup() issued LOOKUP ioctls"
    after = store.stats()
    assert (after["lookups"] - counted["lookups"], after["hits"] - counted["hits"]) == (3, 6)
    assert pool.index_error is None
    store.close()
    pool.evict_ns(store.ns.value)
    assert_clean(pool)


def test_lookup_of_bytes_keys_runs_no_python_frame(pool, unique_ns):
    """On the binding's pool, KVStore.lookup() of keys as bytes is the
    binding's lookup_count behind functools.partial: no Python function
    runs (a frame and its attribute loads cost a third of a 64-key lookup),
    while other keys take the general path, a subclass's own lookup() is
    kept, and the namespace it was made with cannot be changed under it."""
    store = KVStore(pool, make_layout(pool), salt=f"frame-{unique_ns}")
    k = keys_for(store, 3)
    store.store(k, blocks_for(store.layout, 3, seed=41))
    store.lookup(k)                             # maps the index
    as_list = K.split(k)
    calls = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        hits = store.lookup(k)
        listed = store.lookup(as_list)
    finally:
        sys.setprofile(None)
    assert hits == 3 and listed == 3
    assert "KVStore._lookup_general" in calls, calls   # the list went the general way
    assert calls[:calls.index("KVStore._lookup_general")] == [], \
        f"KVStore.lookup(bytes) ran Python code: {calls}"
    with pytest.raises(AttributeError):
        store.ns = K.namespace(store.layout, "other")

    class Counting(KVStore):
        seen = 0

        def lookup(self, keys):
            Counting.seen += 1
            return super().lookup(keys)

    sub = Counting(pool, make_layout(pool), salt=f"frame-{unique_ns}")
    assert sub.lookup(k) == 3 and Counting.seen == 1
    sub.close()
    store.close()
    pool.evict_ns(store.ns.value)
    assert_clean(pool)


def test_store_and_load_of_bytes_keys_are_one_binding_call(pool, unique_ns):
    """On the binding's own pool, store() and load() of keys as bytes run
    no Python function but their own, a helper and a counter each and
    their results' constructors: the binding's
    PoolMap.store_blocks and load_blocks make the lookup, ALLOC, copies,
    PUBLISH, the pinned lookup and RELEASE (their Python layers cost ten
    times a 16 KiB block's copy, more with cold caches). A block that is
    not a contiguous buffer of the block's size still goes through
    _source or _dest, with their conversions and errors; a subclass's own
    step keeps the general path."""
    store = KVStore(pool, make_layout(pool), salt=f"one-call-{unique_ns}")
    k = keys_for(store, 4)
    data = blocks_for(store.layout, 4, seed=45)
    assert store.store(k[:16], data[:1]).stored == 1      # the first is present
    store.lookup(k)                                         # maps the index
    calls = []

    def profile(frame, event, arg):
        if event == "call":
            calls.append(frame.f_code.co_qualname)

    out = store.layout.empty(4)
    before = store.stats()
    sys.setprofile(profile)
    try:
        res = store.store(k, data)
        lr = store.load(k, out)
    finally:
        sys.setprofile(None)
    assert calls == ["KVStore.store", "KVStore._store_one_call", "StoreResult.__init__",
                     "KVStore._count_stored", "KVStore.load", "KVStore._load_one_call",
                     "KVStore._count_load", "LoadResult.__init__"], calls
    assert (res.requested, res.skipped, res.stored, res.exists, res.not_stored) == (4, 1, 3, 0, 0)
    assert lr.loaded == 4 and out.tobytes() == data.tobytes()
    after = store.stats()
    assert {c: after[c] - before[c] for c in ("lookups", "hits", "misses", "stored", "loads",
                                             "loaded")} == \
        {"lookups": 2, "hits": 5, "misses": 3, "stored": 3, "loads": 1, "loaded": 4}

    # Not contiguous, other buffers, the wrong size: as _source and _dest say.
    k2 = keys_for(store, 2, first_token=1000)
    wide = np.repeat(data[:2].reshape(2, -1, 1), 2, axis=2)[:, :, 0]   # strided views
    assert not wide[0].flags.c_contiguous
    assert store.store(k2, wide).stored == 2
    back = [bytearray(store.layout.block_bytes) for _ in range(2)]
    assert store.load(k2, back).loaded == 2
    assert b"".join(back) == data[:2].tobytes()
    with pytest.raises(ValueError, match="writable C-contiguous"):
        store.load(k2, np.zeros((2, store.layout.block_bytes * 2), np.uint8)[:, ::2])
    with pytest.raises(ValueError, match="block buffer must be"):
        store.store(keys_for(store, 1, first_token=2000), [bytes(10)])
    with pytest.raises(ValueError, match="must be writable"):
        store.load(k2, [bytes(store.layout.block_bytes)] * 2)
    assert_clean(pool)

    class OwnAllocate(KVStore):
        allocated = 0

        def allocate(self, n, partial=True):
            OwnAllocate.allocated += n
            return super().allocate(n, partial)

    sub = OwnAllocate(pool, make_layout(pool), salt=f"one-call-{unique_ns}-sub")
    assert sub._store_blocks is None and sub._load_blocks is None
    assert sub.store(k, data).stored == 4 and OwnAllocate.allocated == 4
    sub.close()

    store.close()
    assert store._store_blocks is None and store._load_blocks is None   # nothing holds the map
    pool.evict_ns(store.ns.value)
    pool.evict_ns(sub.ns.value)
    assert_clean(pool)


class _PoolDouble:
    """A pool without lookup_count whose pinned lookup answers a list (an
    older binding, or an engine's test double): KVStore must take the
    general paths with it and answer and count as with the binding."""

    def __init__(self, pool):
        self._pool, self.block_size = pool, pool.block_size

    def lookup(self, ns, keys, pin=False):
        hits, offs = self._pool.lookup(ns, keys, pin=pin)
        return hits, (list(offs) if pin else offs)

    def __getattr__(self, name):
        if name == "lookup_count":
            raise AttributeError(name)
        return getattr(self._pool, name)


@pytest.mark.parametrize("double", [False, True])
def test_lookup_and_pin_answer_and_count_alike_for_every_key_form(pool, unique_ns, double):
    """KVStore.lookup() and pin() on keys as bytes (the binding's fast path:
    counted by the binding's tally), as a list and as numpy, through the
    binding and through a double without lookup_count: the same answers,
    the same counters, the same errors, and no keys is 0 even on a closed
    pool."""
    p = _PoolDouble(pool) if double else pool
    store = KVStore(p, make_layout(pool), salt=f"forms-{unique_ns}-{double}")
    assert (store._tally is None) == double
    k = keys_for(store, 3)
    store.store(k[:2 * 16], blocks_for(store.layout, 2, seed=31))
    forms = [k, K.split(k), np.frombuffer(k, np.uint8)]
    before = store.stats()
    assert [store.lookup(f) for f in forms] == [2, 2, 2]
    assert store.lookup(b"") == 0 and store.lookup([]) == 0     # not counted
    after = store.stats()
    assert [after[c] - before[c] for c in ("lookups", "hits", "misses")] == [3, 6, 3]
    for f in forms:
        p1 = store.pin(f)
        assert p1.count == 2 and type(p1.offsets) is array and p1.offsets.typecode == "Q"
        store.release_blocks(p1.detach())
    pinned = store.stats()
    assert [pinned[c] - after[c] for c in ("lookups", "hits", "misses")] == [3, 6, 3]
    for bad in (b"\0" * 20, bytearray(20)):
        with pytest.raises(ValueError, match="a keys buffer holds whole 16-byte keys; got 20"):
            store.lookup(bad)
        with pytest.raises(ValueError, match="a keys buffer holds whole 16-byte keys; got 20"):
            store.pin(bad)
    assert store.stats() == pinned
    closed = beluga.Pool(pool.path)
    on_closed = KVStore(closed, make_layout(closed), salt=f"forms-{unique_ns}-{double}")
    closed.close()
    assert on_closed.lookup(b"") == 0
    with pytest.raises(ValueError, match="open a new beluga.Pool"):
        on_closed.lookup(k)
    assert on_closed.stats()["lookups"] == 0
    store.close()
    pool.evict_ns(store.ns.value)
    assert_clean(pool)


def test_lookup_counts_every_call_from_many_threads(pool, unique_ns):
    """The binding counts lookup()'s fast path for the store: calls from
    threads at once are all counted, and stats() sees whole calls."""
    import threading
    store = KVStore(pool, make_layout(pool), salt=f"tally-{unique_ns}")
    k = keys_for(store, 2)
    store.store(k, blocks_for(store.layout, 2, seed=33))
    before = store.stats()
    calls = 2000

    def run():
        for _ in range(calls):
            assert store.lookup(k + b"\xee" * 16) == 2

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        s = store.stats()
        n = s["lookups"] - before["lookups"]
        assert (s["hits"] - before["hits"], s["misses"] - before["misses"]) == (2 * n, n)
    for t in threads:
        t.join()
    s = store.stats()
    assert s["lookups"] - before["lookups"] == 4 * calls
    assert s["hits"] - before["hits"] == 8 * calls
    store.close()
    pool.evict_ns(store.ns.value)
    assert_clean(pool)


def _store_load_script(store, pool, as_keys):
    """One run of store()/load() calls (keys passed through as_keys): what
    each returned or raised, the loaded bytes, and the counters after."""
    lay = store.layout
    k = keys_for(store, 4)
    data = blocks_for(lay, 4, seed=41)
    out = []
    r = store.store(as_keys(k[:2 * 16]), blocks=data[:2])
    out.append(("store", r.requested, r.skipped, r.stored, r.exists, r.failed, r.not_stored))
    r = store.store(as_keys(k[:3 * 16]), blocks=list(data[:3]))     # skips the first two
    out.append(("store", r.requested, r.skipped, r.stored, r.exists, r.failed, r.not_stored))
    r = store.store(as_keys(k[:2 * 16]), blocks=data[:2], skip_present=False)   # both exist
    out.append(("store", r.requested, r.skipped, r.stored, r.exists, r.failed, r.not_stored))
    dst = lay.empty(4)
    dst[:] = 7
    r = store.load(as_keys(k), out=dst)                 # 3 of 4
    out.append(("load", r.requested, r.loaded, np.array_equal(dst[:3], data[:3]),
                bool((dst[3] == 7).all())))
    r = store.load(as_keys(keys_for(store, 1, first_token=10 ** 6)), out=lay.empty(1))
    out.append(("load", r.requested, r.loaded))
    for call in (lambda: store.store(as_keys(k[3 * 16:]), blocks=[np.zeros(3, np.uint8)]),
                 lambda: store.load(as_keys(k[:16]), out=[np.zeros(3, np.uint8)]),
                 lambda: store.load(as_keys(k[:16]), out=[]),
                 lambda: store.store(as_keys(k[:16]), blocks=[])):
        with pytest.raises(ValueError) as e:
            call()
        out.append(("raised", str(e.value)))
    stats = store.stats()
    store.close()
    for call in (lambda: store.load(as_keys(k[:16]), out=lay.empty(1)),
                 lambda: store.load(as_keys(keys_for(store, 1, first_token=10 ** 6)),
                                    out=lay.empty(1)),
                 lambda: store.store(as_keys(k[3 * 16:]), blocks=data[3:])):
        with pytest.raises(ValueError, match="closed") as e:
            call()
        out.append(("raised", str(e.value)))
    after = store.stats()
    pool.evict_ns(store.ns.value)
    assert_clean(pool)
    return out, stats, after


def test_store_and_load_answer_and_count_alike_for_bytes_and_listed_keys(pool, unique_ns):
    """store() and load() of keys as bytes (their one-pool-block fast
    path) and as a list of keys (the general path): the same results,
    bytes, errors, counters, and nothing left allocated or pinned, also
    when the store is closed (the failed calls free and release)."""
    runs = []
    for form, as_keys in (("bytes", lambda k: k), ("list", K.split)):
        store = KVStore(pool, make_layout(pool), salt=f"alike-{unique_ns}-{form}")
        runs.append(_store_load_script(store, pool, as_keys))
    assert runs[0] == runs[1]
    out, stats, after = runs[0]
    assert out[:5] == [("store", 2, 0, 2, 0, [], 0), ("store", 3, 2, 1, 0, [], 0),
                       ("store", 2, 0, 2, 2, [], 0), ("load", 4, 3, True, True),
                       ("load", 1, 0)]
    assert (stats["stored"], stats["exists"], stats["loads"], stats["loaded"],
            stats["load_missing"], stats["load_failures"]) == (5, 2, 2, 3, 2, 2)
    assert after["lookups"] - stats["lookups"] == 3     # the closed calls looked up first
