# SPDX-License-Identifier: GPL-2.0
"""Blocks stored through the SGLang adapter are found, byte-exact, through
the LMCache one and back when they are configured alike: same model
geometry, tokens per block, salt (so the same namespace) and the SHA-256
page chain as keys. (The vLLM adapter stores vLLM's canonical pages, which
only vLLM instances read: tests/engines/vllm.)"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import lmcache_plugin as LM       # noqa: E402
from harness import sglang_hicache as SG       # noqa: E402
from harness.workload import conversations, pool_clean   # noqa: E402


def engines(pool, salt):
    sgl = SG.Engine(pool, layer_num=2, head_num=2, head_dim=16, page_size=16, pages=96, salt=salt)
    lmc = LM.Engine(pool, chunk=16, salt=salt)
    return {"sglang": sgl, "lmcache": lmc}


def store_of(name, eng):
    return {"sglang": lambda: eng.backend.store,
            "lmcache": lambda: eng.layout and eng.plugin._store_for(eng.key(b""))}[name]()


def test_all_adapters_agree_on_the_namespace(pool, unique_ns):
    e = engines(pool, f"x-{unique_ns}")
    ns = {n: store_of(n, x).ns for n, x in e.items()}
    assert ns["sglang"] == ns["lmcache"], \
        "\n".join(f"{n}: {v.describe()}" for n, v in ns.items())
    for x in e.values():
        x.close()


@pytest.mark.parametrize("writer,reader", [("sglang", "lmcache"), ("lmcache", "sglang")])
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
    a["lmcache"].serve(reqs[0])
    assert b["sglang"].serve(reqs[0]) == 0
    assert store_of("lmcache", a["lmcache"]).ns.diff(store_of("sglang", b["sglang"]).ns) == \
        [("salt", f"a-{unique_ns}", f"b-{unique_ns}")]
    for x in list(a.values()) + list(b.values()):
        x.close()
