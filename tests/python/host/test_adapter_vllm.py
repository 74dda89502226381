"""beluga.adapters.vllm through the vLLM offloading call sequence
(tests/python/harness/vllm_offload.py)."""

import sys
from pathlib import Path

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
    tokens = pool.block_size // BYTES_PER_TOKEN + 16          # two parts
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
    assert pool.stats()["allocated_blocks"] == len(keys)
    eng.manager.complete_store(keys, ctx, success=False)
    assert pool.stats()["allocated_blocks"] == 0
    assert eng.manager.lookup(keys[0], ctx) == eng.LR.MISS
    # store for real, then look up without loading: finishing releases the pin
    out = eng.manager.prepare_store(keys, ctx)
    eng.manager.complete_store(keys, ctx)
    assert eng.manager.lookup(keys[0], ctx) == eng.LR.HIT
    assert pool.stats()["pins"] == 1
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
