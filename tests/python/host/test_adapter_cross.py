# SPDX-License-Identifier: GPL-2.0
"""Blocks stored through one adapter are found, byte-exact, through the
others when they are configured alike: same model geometry, tokens per
block, salt (so the same namespace) and the SHA-256 page chain as keys."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import lmcache_plugin as LM       # noqa: E402
from harness import sglang_hicache as SG       # noqa: E402
from harness import vllm_offload as VL         # noqa: E402
from harness.workload import conversations, pool_clean   # noqa: E402


def engines(pool, salt):
    vllm = VL.Engine(pool, dict(model="beluga-test/tiny", num_layers=2, num_kv_heads=2,
                                head_dim=16, dtype="float32", tokens_per_block=16, salt=salt))
    sgl = SG.Engine(pool, layer_num=2, head_num=2, head_dim=16, page_size=16, pages=96, salt=salt)
    lmc = LM.Engine(pool, chunk=16, salt=salt)
    return {"vllm": vllm, "sglang": sgl, "lmcache": lmc}


def store_of(name, eng):
    return {"vllm": lambda: eng.spec.store, "sglang": lambda: eng.backend.store,
            "lmcache": lambda: eng.layout and eng.plugin._store_for(eng.key(b""))}[name]()


def test_all_adapters_agree_on_the_namespace(pool, unique_ns):
    e = engines(pool, f"x-{unique_ns}")
    ns = {n: store_of(n, x).ns for n, x in e.items()}
    assert ns["vllm"] == ns["sglang"] == ns["lmcache"], \
        "\n".join(f"{n}: {v.describe()}" for n, v in ns.items())
    for x in e.values():
        x.close()


@pytest.mark.parametrize("writer,reader", [
    ("vllm", "sglang"), ("sglang", "vllm"), ("sglang", "lmcache"), ("lmcache", "vllm"),
])
def test_blocks_cross_adapters(pool, unique_ns, writer, reader):
    e = engines(pool, f"x-{unique_ns}")
    reqs, _ = conversations(16, 20, seed=31, systems=1, turns=2)
    for r in reqs:
        assert e[writer].serve(r) <= r.num_blocks
    for r in reqs:
        # every full block was stored by the writer: the reader loads them
        # all, and its serve() checks each block's bytes
        assert e[reader].serve(r) == r.num_blocks, f"{reader} missed {writer}'s blocks"
    for x in e.values():
        x.close()
    ok, s = pool_clean(pool)
    assert ok, s


def test_different_salt_shares_nothing(pool, unique_ns):
    a = engines(pool, f"a-{unique_ns}")
    b = engines(pool, f"b-{unique_ns}")
    reqs, _ = conversations(16, 10, seed=32, systems=1, turns=1)
    a["vllm"].serve(reqs[0])
    assert b["sglang"].serve(reqs[0]) == 0
    assert store_of("vllm", a["vllm"]).ns.diff(store_of("sglang", b["sglang"]).ns) == \
        [("salt", f"a-{unique_ns}", f"b-{unique_ns}")]
    for x in list(a.values()) + list(b.values()):
        x.close()


def test_vllm_tp2_blocks_are_read_by_sglang_tp1(pool, unique_ns):
    salt = f"tp-{unique_ns}"
    # two vLLM TP workers fill one block only when it is one pool block
    tokens = min(16, pool.block_size // (2 * 2 * 2 * 16 * 4))
    vllm = VL.Engine(pool, dict(model="beluga-test/tiny", num_layers=2, num_kv_heads=2,
                                head_dim=16, dtype="float32", tokens_per_block=tokens,
                                tp_size=2, salt=salt))
    assert vllm.layout.parts == 1
    sgl = SG.Engine(pool, layer_num=2, head_num=2, head_dim=16, page_size=tokens, pages=96,
                    salt=salt)
    reqs, _ = conversations(tokens, 20, seed=33, systems=1, turns=2)
    for r in reqs:
        vllm.serve(r)
    for r in reqs:
        assert sgl.serve(r) == r.num_blocks
    vllm.close(), sgl.close()
    assert pool_clean(pool)[0]
