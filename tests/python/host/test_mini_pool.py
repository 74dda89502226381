# SPDX-License-Identifier: GPL-2.0
"""The mini engine's KV blocks through the pool: a warm run (prefix blocks
loaded from the pool, their chunks skipped) gives the cold run's logits and
tokens byte for byte, and the comparison catches each deliberate corruption:
a flipped byte in a stored block, K and V swapped when packing, a wrong
offset, and TP ranks sharing a namespace that lacks the TP fields.

Runs on the host's fake kernel and, unchanged, in the 6.12 guest against the
real module (BELUGA_TEST_REAL=1): every test uses a salt of its own, so its
namespaces are fresh whatever the pool already holds. The `pool` fixture
(conftest.py) fails a test that leaves allocations or pins behind."""

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import pytest  # noqa: E402

pytest.importorskip("beluga.store", reason="the beluga package (make -C userspace python) is not importable")

from mini.connector import SkewedPool, connectors  # noqa: E402
from mini.engine import MiniEngine, bit_exact  # noqa: E402
from mini.model import MiniConfig, MiniModel  # noqa: E402
from mini.workload import conversations, expected_hits  # noqa: E402

BT = 16


@pytest.fixture(scope="module")
def model():
    return MiniModel(MiniConfig())


@pytest.fixture(scope="module")
def prompts():
    # one system prompt of 3 blocks, 2 conversations of 2 turns: small, because
    # the guest runs this under TCG
    return conversations(block_tokens=BT, system_blocks=3, n_conv=2, turns=2)


@pytest.fixture(scope="module")
def cold(model, prompts):
    """Reference runs without a pool, per TP size."""
    return {tp: [MiniEngine(model, tp_size=tp).generate(p) for p in prompts] for tp in (1, 2)}


def salt(unique_ns, what):
    return f"test_mini_pool:{what}:{unique_ns}"


def run_all(model, pool, prompts, tp, s, **kw):
    conns = connectors(pool, model, BT, tp_size=tp, salt=s, **kw)
    eng = MiniEngine(model, block_tokens=BT, tp_size=tp, connectors=conns)
    res = [eng.generate(p) for p in prompts]
    return eng, conns, res


@pytest.mark.parametrize("tp", [1, 2])
def test_warm_runs_are_bit_exact(model, pool, unique_ns, prompts, cold, tp):
    check_warm_runs(model, pool, unique_ns, prompts, cold, tp)


@pytest.mark.fake_pool(block_size=4096, regions="dax0.0:4M")
def test_warm_runs_are_bit_exact_in_parts(model, pool, unique_ns, prompts, cold, backend):
    """Engine blocks larger than a pool block are stored in parts."""
    if backend == "fake":
        assert pool.block_size == 4096              # 12 KiB engine blocks in 3 parts
    elif pool.block_size >= 12288:
        pytest.skip(f"the pool's {pool.block_size}-byte blocks hold a whole engine block "
                    "(the fake pool runs this with 4 KiB blocks)")
    conns = check_warm_runs(model, pool, unique_ns, prompts, cold, 1)
    assert conns[0].kv.layout.parts > 1


def check_warm_runs(model, pool, unique_ns, prompts, cold, tp):
    eng, conns, first = run_all(model, pool, prompts, tp, salt(unique_ns, f"exact-tp{tp}"))
    want = expected_hits(prompts, BT)
    assert sum(want) > 0
    assert [r.loaded for r in first] == want
    assert [r.hits for r in first] == [[h] * tp for h in want]
    for c, w in zip(cold[tp], first):
        assert bit_exact(c, w)
    # everything again: every prompt now hits all its loadable blocks
    again = [eng.generate(p) for p in prompts]
    assert [r.loaded for r in again] == [(len(p) - 1) // BT for p in prompts]
    for c, w in zip(cold[tp], again):
        assert w.computed_chunks < c.computed_chunks
        assert bit_exact(c, w)
    for c in conns:
        st = c.kv.stats()
        assert st["loaded"] > 0 and st["load_missing"] == 0
    return conns


def store_then_rerun(model, pool, prompt, s, tp=1, **kw):
    """Store prompt's blocks, return (engine, connectors) ready for the warm run."""
    conns = connectors(pool, model, BT, tp_size=tp, salt=s, **kw)
    eng = MiniEngine(model, block_tokens=BT, tp_size=tp, connectors=conns)
    eng.generate(prompt)
    return eng, conns


def test_flipped_byte_in_a_stored_block_is_detected(model, pool, unique_ns, prompts, cold):
    p, ref = prompts[-1], cold[1][-1]
    eng, (conn,) = store_then_rerun(model, pool, p, salt(unique_ns, "flip"))
    kv = conn.kv
    keys = kv.keys_for(p)
    at = kv.layout.v_offset(1) + 4 * 37 + 2       # a mantissa byte of one V element of layer 1
    part, at = divmod(at, pool.block_size)         # the pool block of block 1 that holds it
    with kv.pin(keys[16:32]) as pinned:
        assert pinned.count == 1
        off = pinned.offsets[part]
    m = pool.map()
    try:
        blk = m.block(off)
        blk[at] ^= 0xFF
        del blk
    finally:
        del m
    warm = eng.generate(p)
    assert warm.loaded == (len(p) - 1) // BT
    assert not bit_exact(ref, warm)


def test_kv_swapped_when_packing_is_detected(model, pool, unique_ns, prompts, cold):
    p, ref = prompts[2], cold[1][2]
    eng, _ = store_then_rerun(model, pool, p, salt(unique_ns, "kvswap"), swap_kv_on_store=True)
    warm = eng.generate(p)
    assert warm.loaded == (len(p) - 1) // BT > 0
    assert not bit_exact(ref, warm)


def test_wrong_offset_is_detected(model, pool, unique_ns, prompts, cold):
    p, ref = prompts[2], cold[1][2]
    s = salt(unique_ns, "skew")
    store_then_rerun(model, pool, p, s)
    # a second engine on the same namespace whose pinned LOOKUP answers the
    # neighbouring block's offset
    conns = connectors(SkewedPool(pool), model, BT, salt=s)
    warm = MiniEngine(model, block_tokens=BT, connectors=conns).generate(p)
    assert warm.loaded == (len(p) - 1) // BT >= 2
    assert not bit_exact(ref, warm)
    # the same engine without the skew is exact: the bytes in the pool are right
    good = MiniEngine(model, block_tokens=BT, connectors=connectors(pool, model, BT, salt=s)).generate(p)
    assert good.loaded == warm.loaded and bit_exact(ref, good)


def test_namespace_without_tp_fields_is_detected(model, pool, unique_ns, prompts, cold):
    p, ref = prompts[2], cold[2][2]
    s = salt(unique_ns, "tp")
    # correct namespaces: the two ranks' blocks stay apart
    eng, conns = store_then_rerun(model, pool, p, s + ":with-tp", tp=2)
    assert conns[0].kv.ns.value != conns[1].kv.ns.value
    warm = eng.generate(p)
    assert warm.loaded > 0 and bit_exact(ref, warm)
    # without the TP fields both ranks use one namespace and the same keys:
    # rank 0 stores first, rank 1's store finds the keys present, and rank 1
    # then loads rank 0's heads
    eng, conns = store_then_rerun(model, pool, p, s + ":without-tp", tp=2, tp_in_namespace=False)
    assert conns[0].kv.ns.value == conns[1].kv.ns.value
    diff = dict((k, (a, b)) for k, a, b in conns[0].kv.ns.diff(
        connectors(pool, model, BT, tp_size=2, salt=s)[1].kv.ns))
    assert "tp_size" in diff and "tp_rank" in diff    # describe() shows why
    warm = eng.generate(p)
    assert warm.loaded == (len(p) - 1) // BT > 0
    assert not bit_exact(ref, warm)
