# SPDX-License-Identifier: GPL-2.0
"""beluga.adapters.vllm through the vLLM offloading call sequence
(tests/python/harness/vllm_offload.py)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import vllm_offload as H          # noqa: E402
from harness.workload import conversations, pool_clean, squeeze_pool   # noqa: E402

BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4


def extra(unique_ns, pool, tokens=16, **kw):
    e = dict(model="beluga-test/tiny", num_layers=2, num_kv_heads=2, head_dim=16,
             dtype="float32", tokens_per_block=tokens, salt=f"vllm-{unique_ns}")
    e.update(kw)
    return e


def one_block_tokens(pool, heads=2, most=16):
    """Tokens per block (at most ``most``) whose block of the tiny model with
    ``heads`` KV heads fits one pool block, at any pool block size."""
    tokens = min(most, pool.block_size // (BYTES_PER_TOKEN * heads // 2))
    assert tokens >= 1, f"{pool.block_size}-byte pool blocks hold no token of the tiny model"
    return tokens


def budget(pool, parts=1):
    """Distinct blocks the workload may have so that it fits half the pool."""
    return max(4, pool.stats()["total_blocks"] // (2 * parts))


@pytest.mark.parametrize("cross_layer", [False, True])
def test_large_pool_hits_equal_the_oracle(pool, unique_ns, cross_layer):
    eng = H.Engine(pool, extra(unique_ns, pool), cross_layer=cross_layer)
    reqs, distinct = conversations(16, min(budget(pool), 60), seed=1)
    got, want = H.replay(eng, reqs)
    assert got == want
    assert sum(want) > 0, "the workload must share prefixes"
    assert eng.manager.outstanding() == (0, 0, 0)
    eng.close()
    ok, s = pool_clean(pool)
    assert ok, s


def test_capacity_pressure_drops_hits_never_bytes(pool, unique_ns):
    reqs, distinct = conversations(16, min(budget(pool), 60), seed=2)
    held = squeeze_pool(pool, max(2, distinct // 4))
    try:
        eng = H.Engine(pool, extra(unique_ns, pool))
        got, want = H.replay(eng, reqs)             # asserts bytes per request
        assert sum(got) < sum(want)
        assert all(g <= w for g, w in zip(got, want))
        assert eng.manager.outstanding() == (0, 0, 0)
        eng.close()
    finally:
        pool.free(held)
    ok, s = pool_clean(pool)
    assert ok, s


def test_chunks_of_two_gpu_blocks(pool, unique_ns):
    eng = H.Engine(pool, extra(unique_ns, pool, tokens=32, blocks_per_chunk=2))
    reqs, _ = conversations(32, min(budget(pool), 30), seed=3)
    got, want = H.replay(eng, reqs)
    assert got == want and sum(want) > 0
    eng.close()
    assert pool_clean(pool)[0]


def test_blocks_split_over_pool_blocks(pool, unique_ns):
    # 1.5 pool blocks of bytes: two parts, the second half full
    tokens = pool.block_size // BYTES_PER_TOKEN + pool.block_size // (2 * BYTES_PER_TOKEN)
    eng = H.Engine(pool, extra(unique_ns, pool, tokens=tokens), gpu_blocks=24)
    assert eng.layout.parts == 2
    reqs, _ = conversations(tokens, min(budget(pool, 2), 8), seed=4, systems=1, turns=2)
    got, want = H.replay(eng, reqs)
    assert got == want and sum(want) > 0
    eng.close()
    assert pool_clean(pool)[0]


def test_unloadable_block_fails_the_job_not_the_bytes(pool, unique_ns):
    """A key that vanished between lookup and prepare_load (vLLM assumes
    presence) makes the load job report failure, so vLLM recomputes."""
    eng = H.Engine(pool, extra(unique_ns, pool))
    reqs, _ = conversations(16, 10, seed=5, systems=1, turns=1)
    r = reqs[0]
    eng.serve(r)
    ctx = H.ReqContext("late")
    eng.manager.on_new_request(ctx)
    keys = [H.V.make_offload_key(d) for d in r.digests]
    bogus = H.V.make_offload_key(b"\x55" * 32)
    spec = eng.manager.prepare_load(keys[:1] + [bogus], ctx)
    assert spec.missing == 1
    eng.worker.submit_load(99, spec, H.GPULoadStoreSpec([0, 1], [2], [0]))
    (res,) = eng.worker.get_finished()
    assert res.job_id == 99 and not res.success
    eng.manager.complete_load(keys[:1] + [bogus], ctx)
    eng.manager.on_request_finished(ctx)
    assert eng.manager.outstanding() == (0, 0, 0)
    eng.close()
    assert pool_clean(pool)[0]


def test_failed_store_frees_blocks_and_finished_request_releases_pins(pool, unique_ns):
    eng = H.Engine(pool, extra(unique_ns, pool))
    reqs, _ = conversations(16, 10, seed=6, systems=1, turns=1)
    keys = [H.V.make_offload_key(d) for d in reqs[0].digests]
    ctx = H.ReqContext("r")
    eng.manager.on_new_request(ctx)
    out = eng.manager.prepare_store(keys, ctx)
    assert out.keys_to_store == keys and out.evicted_keys == []
    assert pool.stats()["allocated_blocks"] == len(keys) * eng.layout.parts
    eng.manager.complete_store(keys, ctx, success=False)
    assert pool.stats()["allocated_blocks"] == 0
    assert eng.manager.lookup(keys[0], ctx) == eng.LR.MISS
    # store for real, then look up without loading: finishing releases the pin
    out = eng.manager.prepare_store(keys, ctx)
    eng.manager.complete_store(keys, ctx)
    assert eng.manager.lookup(keys[0], ctx) == eng.LR.HIT
    assert pool.stats()["pins"] == eng.layout.parts     # one pin per pool block
    eng.manager.touch(keys, ctx)
    eng.manager.on_request_finished(ctx)
    assert eng.manager.outstanding() == (0, 0, 0)
    eng.close()
    assert pool_clean(pool)[0]


def test_events_report_stored_keys(pool, unique_ns):
    eng = H.Engine(pool, extra(unique_ns, pool, kv_events=True))
    reqs, _ = conversations(16, 10, seed=7, systems=1, turns=1)
    eng.serve(reqs[0])
    ev = list(eng.manager.take_events())
    assert len(ev) == 1 and not ev[0].removed
    assert ev[0].keys == [H.V.make_offload_key(d) for d in reqs[0].digests]
    assert list(eng.manager.take_events()) == []
    eng.close()


def test_layout_mismatch_is_a_clear_error(pool, unique_ns):
    spec = H.V.BelugaOffloadingSpec(H.OffloadingConfig(extra(unique_ns, pool)), pool=pool)
    wrong = H.FakeGPU(spec.store.layout, 4)
    wrong.caches.group_data_refs[0] = wrong.caches.group_data_refs[0][:1]
    with pytest.raises(ValueError, match="do not match the beluga layout"):
        spec.get_worker(wrong.caches)
    with pytest.raises(ValueError, match="needs"):
        H.V.BelugaOffloadingSpec(H.OffloadingConfig({"model": "m"}), pool=pool)
    spec.store.close()


def test_module_imports_no_engine():
    import beluga.adapters.vllm as mod
    assert "vllm" not in sys.modules or mod.engine_module("vllm") is not None
    assert issubclass(mod.BelugaOffloadingSpec, mod.BelugaOffloadingSpecImpl)


def test_subclasses_vllm_when_importable():
    base = pytest.importorskip("vllm.v1.kv_offload.base", reason="vLLM is not installed")
    import beluga.adapters.vllm as mod
    assert issubclass(mod.BelugaOffloadingSpec, base.OffloadingSpec)
    assert issubclass(mod.BelugaOffloadingManager, base.OffloadingManager)


@pytest.mark.parametrize("cross_layer", [False, True])
def test_tp_workers_fill_one_block_together(pool, unique_ns, cross_layer):
    # TP workers fill one block only when it is one pool block (a split block
    # is refused: test_split_blocks_refuse_several_tp_writers)
    tokens = one_block_tokens(pool, heads=4)
    eng = H.Engine(pool, extra(unique_ns, pool, tokens=tokens, num_kv_heads=4, tp_size=2),
                   cross_layer=cross_layer)
    assert eng.layout.parts == 1
    assert [w._pages[0][-1] for w in eng.workers] == [slice(0, 2), slice(2, 4)]
    reqs, _ = conversations(tokens, min(budget(pool), 30), seed=8)
    got, want = H.replay(eng, reqs)                   # every rank's bytes are checked
    assert got == want and sum(want) > 0
    eng.close()
    assert pool_clean(pool)[0]


def test_blocks_are_shared_across_tp_sizes(pool, unique_ns):
    """The block holds every head, so TP2 and TP1 instances (and TP4, where
    each rank holds one head) share it."""
    tokens = one_block_tokens(pool, heads=4)          # TP2 needs one pool block
    reqs, _ = conversations(tokens, min(budget(pool), 20), seed=9, systems=1, turns=2)
    tp2 = H.Engine(pool, extra(unique_ns, pool, tokens=tokens, num_kv_heads=4, tp_size=2))
    for r in reqs:
        tp2.serve(r)
    for tp in (1, 4):
        other = H.Engine(pool, extra(unique_ns, pool, tokens=tokens, num_kv_heads=4,
                                     tp_size=tp))
        assert other.spec.store.ns == tp2.spec.store.ns
        for r in reqs:
            assert other.serve(r) == r.num_blocks
        other.close()
    tp2.close()
    assert pool_clean(pool)[0]


def test_mla_pages(pool, unique_ns):
    eng = H.Engine(pool, extra(unique_ns, pool, latent_dim=24, num_kv_heads=1, head_dim=1))
    assert eng.layout.spec.is_mla
    reqs, _ = conversations(16, min(budget(pool), 30), seed=10)
    got, want = H.replay(eng, reqs)
    assert got == want and sum(want) > 0
    eng.close()
    assert pool_clean(pool)[0]


def test_split_blocks_refuse_several_tp_writers(pool, unique_ns):
    tokens = pool.block_size // (BYTES_PER_TOKEN * 2) + 16     # 4 heads: twice the bytes
    with pytest.raises(ValueError, match="TP workers cannot fill together"):
        H.Engine(pool, extra(unique_ns, pool, tokens=tokens, num_kv_heads=4, tp_size=2))


def _worker_process(conn, extra):
    """vLLM's model-runner process: its own open pool, its own GPU memory."""
    spec = H.V.BelugaOffloadingSpec(H.OffloadingConfig(extra))
    gpu = H.FakeGPU(spec.store.layout, 8)
    worker = spec.get_worker(gpu.caches, tp_rank=0)
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                break
            op, job, pool_spec, ids, kv = msg
            if op == "store":
                for gid, block in zip(ids, kv):
                    gpu.write(gid, block, 0)
                worker.submit_store(job, H.GPULoadStoreSpec(ids, [len(ids)], [0]), pool_spec)
                conn.send([r.success for r in worker.get_finished()])
            else:
                gpu.poison(ids)
                worker.submit_load(job, pool_spec, H.GPULoadStoreSpec(ids, [len(ids)], [0]))
                conn.send(([r.success for r in worker.get_finished()],
                           [gpu.read(g).tobytes() for g in ids]))
    finally:
        spec.store.close()
        spec.pool.close()


@pytest.mark.real_only("the scheduler and the worker are two processes with their own files")
def test_manager_and_worker_in_separate_processes(pool, unique_ns):
    """The deployment shape: the scheduler process ALLOCs, PUBLISHes and pins;
    the worker process maps the pool and copies."""
    import multiprocessing as mp
    ex = extra(unique_ns, pool)
    spec = H.V.BelugaOffloadingSpec(H.OffloadingConfig(ex), pool=pool)
    manager = spec.get_manager()
    reqs, _ = conversations(16, 10, seed=40, systems=1, turns=1)
    req = reqs[0]
    keys = [H.V.make_offload_key(d) for d in req.digests]
    kv = [H.block_kv(spec.store.layout, h) for h in req.hex]
    parent, child = mp.get_context("fork").Pipe()
    proc = mp.get_context("fork").Process(target=_worker_process, args=(child, ex))
    proc.start()
    try:
        ctx = H.ReqContext("r")
        manager.on_new_request(ctx)
        out = manager.prepare_store(keys, ctx)
        ids = list(range(len(keys)))
        parent.send(("store", 1, out.store_spec, ids, kv))
        assert parent.recv() == [True]
        manager.complete_store(out.keys_to_store, ctx)
        assert all(manager.lookup(k, ctx) == manager._types["LookupResult"].HIT for k in keys)
        load = manager.prepare_load(keys, ctx)
        parent.send(("load", 2, load, ids, None))
        ok, got = parent.recv()
        assert ok == [True]
        for g, want in zip(got, kv):
            assert g == np.ascontiguousarray(want).tobytes()
        manager.complete_load(keys, ctx)
        manager.on_request_finished(ctx)
        assert manager.outstanding() == (0, 0, 0)
    finally:
        parent.send(None)
        proc.join(60)
        spec.store.close()
    assert proc.exitcode == 0


def test_reset_cache_evicts_this_namespace(pool, unique_ns):
    eng = H.Engine(pool, extra(unique_ns, pool))
    reqs, _ = conversations(16, 10, seed=41, systems=1, turns=1)
    eng.serve(reqs[0])
    k16 = H.V.K.digest16(reqs[0].digests[0])
    assert eng.spec.store.lookup(k16) == 1
    eng.manager.reset_cache()
    if eng.spec.store.lookup(k16) == 1:
        pytest.skip("EVICT needs an admin handle (reset_cache() logged a warning)")
    assert eng.spec.store.lookup(k16) == 0
    eng.close()


def test_touch_refreshes_lru_with_few_lookups(pool, unique_ns):
    eng = H.Engine(pool, extra(unique_ns, pool))
    reqs, _ = conversations(16, 10, seed=42, systems=1, turns=1)
    eng.serve(reqs[0])
    keys = [H.V.make_offload_key(d) for d in reqs[0].digests]
    gap = H.V.make_offload_key(b"\x66" * 32)
    ctx = H.ReqContext("t")
    before = eng.spec.store.stats()["lookups"]
    eng.manager.touch(keys, ctx)
    assert eng.spec.store.stats()["lookups"] - before == 1       # one chain, one LOOKUP
    eng.manager.touch(keys[:1] + [gap] + keys[1:], ctx)          # a gap: still terminates
    assert pool.stats()["pins"] == 0
    eng.close()
    assert pool_clean(pool)[0]
