# SPDX-License-Identifier: GPL-2.0
"""The mini engine without a pool: its model is deterministic, chunked
prefill through the paged cache equals itself whatever the block placement,
and an in-process block store round-trips bit-exactly. The pool-backed
tests are in test_mini_pool.py."""

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mini.engine import DictConnector, GenResult, MiniEngine, bit_exact, chain_keys  # noqa: E402
from mini.model import MiniConfig, MiniModel  # noqa: E402
from mini.workload import conversations, expected_hits  # noqa: E402

BT = 16


@pytest.fixture(scope="module")
def model():
    return MiniModel(MiniConfig())


@pytest.fixture(scope="module")
def prompts():
    return conversations(block_tokens=BT)


def block_shape(model, tp_size):
    c = model.cfg
    return (c.num_layers, 2, BT, c.num_kv_heads // tp_size, c.head_dim)


def test_weights_are_seeded(model):
    again = MiniModel(MiniConfig())
    assert again.embed.tobytes() == model.embed.tobytes()
    other = MiniModel(MiniConfig(seed=99))
    assert other.embed.tobytes() != model.embed.tobytes()


def test_bit_exact_compares_bytes():
    a = GenResult([1, 2], np.array([[0.0, 1.0]], dtype=np.float32), [0], 0, 1, 0.0)
    b = GenResult([1, 2], np.array([[-0.0, 1.0]], dtype=np.float32), [0], 0, 1, 0.0)
    assert np.allclose(a.logits, b.logits)      # equal as numbers ...
    assert not bit_exact(a, b)                  # ... but not byte for byte
    assert bit_exact(a, a)
    assert not bit_exact(a, GenResult([1, 3], a.logits, [0], 0, 1, 0.0))


def test_runs_are_deterministic(model, prompts):
    p = prompts[4]
    a = MiniEngine(model).generate(p)
    b = MiniEngine(model, num_blocks=64).generate(p)   # other physical blocks
    assert bit_exact(a, b)
    assert a.logits.shape == (4, model.cfg.vocab) and a.logits.dtype == np.float32
    assert a.computed_chunks == (len(p) + BT - 1) // BT


def test_logits_depend_on_the_prefix(model, prompts):
    p = list(prompts[0])
    q = list(p)
    q[3] = (q[3] + 1) % model.cfg.vocab          # one token of the first block
    assert not bit_exact(MiniEngine(model).generate(p), MiniEngine(model).generate(q))


def test_tp2_is_close_to_tp1_but_its_own_computation(model, prompts):
    a = MiniEngine(model, tp_size=1).generate(prompts[1])
    b = MiniEngine(model, tp_size=2).generate(prompts[1])
    np.testing.assert_allclose(a.logits, b.logits, rtol=1e-4, atol=1e-4)


def test_chain_keys_are_prefix_keys():
    t = list(range(50))
    k = chain_keys(t, BT)
    assert len(k) == 3 * 16
    assert chain_keys(t[:32], BT) == k[:32]
    u = list(t)
    u[0] = 99
    assert chain_keys(u, BT)[16:32] != k[16:32]     # chained: a change propagates


@pytest.mark.parametrize("tp_size", [1, 2])
def test_dict_store_round_trip_is_bit_exact(model, prompts, tp_size):
    cold = [MiniEngine(model, tp_size=tp_size).generate(p) for p in prompts]
    conns = [DictConnector(block_shape(model, tp_size)) for _ in range(tp_size)]
    eng = MiniEngine(model, tp_size=tp_size, connectors=conns)
    warm = [eng.generate(p) for p in prompts]
    assert [w.loaded for w in warm] == expected_hits(prompts, BT)
    assert sum(w.loaded for w in warm) > 0
    for c, w in zip(cold, warm):
        assert bit_exact(c, w)
        assert w.computed_chunks == c.computed_chunks - w.loaded
    again = [eng.generate(p) for p in prompts]
    assert [w.loaded for w in again] == [(len(p) - 1) // BT for p in prompts]
    assert all(bit_exact(c, w) for c, w in zip(cold, again))


def test_dict_store_detects_a_changed_block(model, prompts):
    p = prompts[3]
    cold = MiniEngine(model).generate(p)
    conn = DictConnector(block_shape(model, 1))
    eng = MiniEngine(model, connectors=[conn])
    eng.generate(p)
    k = chain_keys(p, BT)[16:32]
    raw = bytearray(conn.blocks[k])
    raw[5] ^= 0x01          # a low mantissa bit of one K element is enough
    conn.blocks[k] = bytes(raw)
    warm = eng.generate(p)
    assert warm.loaded == (len(p) - 1) // BT
    assert not bit_exact(cold, warm)


def test_a_failed_load_degrades_to_recompute(model, prompts):
    p = prompts[6]
    cold = MiniEngine(model).generate(p)
    conn = DictConnector(block_shape(model, 1))
    eng = MiniEngine(model, connectors=[conn])
    eng.generate(p)
    # the lookup still sees every block, but block 2 vanished before the load
    real_load = conn.load

    def partial(keys):
        out, n = real_load(keys)
        return out, min(n, 2)
    conn.load = partial
    warm = eng.generate(p)
    assert warm.hits[0] >= 3 and warm.loaded == 2
    assert bit_exact(cold, warm)


def test_device_cache_exhaustion_is_an_error(model):
    eng = MiniEngine(model, num_blocks=2)
    with pytest.raises(RuntimeError, match="free blocks"):
        eng.generate(list(range(100)))
