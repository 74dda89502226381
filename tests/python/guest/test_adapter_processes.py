# SPDX-License-Identifier: GPL-2.0
"""Engines of different kinds, each in its own process, share one pool.

One process serves a set of conversations through one adapter (SGLang's
HiCache backend or LMCache's storage plugin, replayed by
tests/python/harness; the vLLM adapter stores vLLM's canonical pages, which
only vLLM reads: tests/engines/vllm); then processes with the other adapter,
configured alike (same geometry, tokens per block and salt, so the same
namespace and SHA-256 page chain), serve the same requests at the same time
and must load every full block the writer stored, byte-exact (each harness
checks the bytes it loads). host/test_adapter_cross.py checks the same within
one process, on either backend.
"""

import sys
from pathlib import Path

import pytest

import beluga

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import lmcache_plugin as LM       # noqa: E402
from harness import sglang_hicache as SG       # noqa: E402
from harness.workload import conversations     # noqa: E402

from engine_procs import engine, join_all, recv, start  # noqa: E402

pytestmark = pytest.mark.real_only("engines of different kinds in separate processes")

TOKENS_PER_BLOCK = 16


def make_engine(kind, pool, salt):
    """One engine of `kind`, configured like the others: 2 layers, 2 KV heads
    of 16 float32 values, 16 tokens per block, the same salt."""
    if kind == "sglang":
        return SG.Engine(pool, layer_num=2, head_num=2, head_dim=16,
                         page_size=TOKENS_PER_BLOCK, pages=96, salt=salt)
    return LM.Engine(pool, chunk=TOKENS_PER_BLOCK, salt=salt)


def requests():
    reqs, _ = conversations(TOKENS_PER_BLOCK, 20, seed=41, systems=1, turns=2)
    return reqs


@engine
def engine_serve(conn, kind, salt):
    """Serve every request through an engine of `kind` in this process; report
    the blocks loaded from the pool per request, and the blocks per request."""
    with beluga.Pool() as pool:
        eng = make_engine(kind, pool, salt)
        got = [(eng.serve(r), r.num_blocks) for r in requests()]
        eng.close()
    conn.send({"served": got})


@pytest.mark.parametrize("writer,readers", [
    ("sglang", ("lmcache",)),
    ("lmcache", ("sglang",)),
])
def test_blocks_stored_by_one_engine_are_loaded_by_the_others(pool, unique_ns, writer, readers):
    salt = "guest-%x" % unique_ns
    before = pool.stats()
    w, wc = start(engine_serve, writer, salt)
    stored = recv(wc, "%s engine" % writer)
    join_all([w])
    # the writer's own later turns hit its earlier turns' blocks
    assert any(hits for hits, _ in stored["served"])
    assert pool.stats()["published_blocks"] > before["published_blocks"]

    procs = [start(engine_serve, kind, salt) for kind in readers]
    got = {kind: recv(c, "%s engine" % kind) for kind, (_, c) in zip(readers, procs)}
    join_all([p for p, _ in procs])
    for kind, r in got.items():
        assert [hits for hits, _ in r["served"]] == [n for _, n in r["served"]], \
            "%s missed blocks that %s stored" % (kind, writer)
    after = pool.stats()
    assert after["allocated_blocks"] == before["allocated_blocks"]
    assert after["pins"] == before["pins"]
