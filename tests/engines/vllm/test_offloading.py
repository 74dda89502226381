# SPDX-License-Identifier: GPL-2.0
"""beluga.adapters.vllm loaded and driven by vLLM itself (see rig.py for
what runs and what stands in for the GPU and the model).

Every engine is configured with the README's --kv-transfer-config; the
tests add only vLLM's own keys (blocks_per_chunk) or the refusals' subjects.
"""

import errno
import logging
import pathlib
import sys

import pytest
import torch

import beluga
import beluga._cuda as cuda
import rig
from beluga.adapters.vllm import kvcopy_arguments
from vllm.distributed.kv_events import BlockRemoved, BlockStored
from vllm.v1.kv_offload.base import OffloadingManager, OffloadingSpec, OffloadingWorker

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
from harness.workload import squeeze_pool      # noqa: E402

# Prompts of the second engine share prefixes of several blocks with those
# of the first (not with each other, so that what vLLM loads is exactly the
# shared whole chunks); most end mid-block.
BASE = [(7 * i) % rig.VOCAB for i in range(75)]
FIRST = {"a": BASE + [1] * 9, "b": [9] * 40 + [2] * 30, "c": [3] * 21}
SECOND = {"d": BASE + [4] * 5, "e": [9] * 40 + [2] * 30 + [5] * 3, "f": [3] * 20 + [6]}


def shared_tokens(prompts, stored, chunk_tokens):
    """Prompt tokens a second engine can take from the first one's stored
    prompts: per prompt, the longest prefix shared with one of them, in
    whole chunks, leaving at least the last token to compute."""
    total = 0
    for tokens in prompts.values():
        best = 0
        for other in stored.values():
            n = 0
            while n < min(len(tokens), len(other)) and tokens[n] == other[n]:
                n += 1
            best = max(best, min(n, len(other)) // chunk_tokens * chunk_tokens)
        total += min(best, (len(tokens) - 1) // chunk_tokens * chunk_tokens)
    return total


def round_trip(engine, device, writer, reader=None, chunk_tokens=16):
    """A first engine (``writer``: its options) serves FIRST, storing every
    chunk; a second (``reader``, default the same) serves SECOND and must load
    exactly the shared whole chunks, every token bit-exact (Engine.serve
    checks each after every step); then nothing is left allocated or
    pinned. The engines, for more checks."""
    first = engine(**writer)
    assert first.serve(FIRST) == 0
    second = engine(**(writer if reader is None else reader))
    assert second.serve(SECOND) == shared_tokens(SECOND, FIRST, chunk_tokens)
    assert pool_in_use(device) == (0, 0), "blocks or pins left after every request finished"
    return first, second


def pool_in_use(device):
    with REAL_POOL(device, writable=False) as p:
        s = p.stats()
    return s["allocated_blocks"], s["pins"]


class NoAdminPool:
    """A pool opened without the admin right: EVICT is refused, as the
    module refuses it to a handle that is not an admin one."""

    def __init__(self, *args, **kwargs):
        self._pool = REAL_POOL(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._pool, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._pool.close()

    def evict_ns(self, ns):
        raise beluga.PermissionDenied(1, "EVICT needs an admin handle (NoAdminPool)")

    def evict_key(self, ns, key):
        raise beluga.PermissionDenied(1, "EVICT needs an admin handle (NoAdminPool)")


REAL_POOL = beluga.Pool


class VllmErrors(logging.Handler):
    """Collects what vLLM logs at ERROR and above."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


@pytest.fixture
def vllm_errors():
    h = VllmErrors()
    logging.getLogger("vllm").addHandler(h)
    yield h.records
    logging.getLogger("vllm").removeHandler(h)


def test_readme_config_loads_through_vllms_connector_factory(engine, vllm_errors):
    e = engine()
    # The Scheduler made the connector from kv_transfer_config, and the
    # connector the spec through OffloadingSpecFactory: no other path.
    assert type(e.scheduler.connector).__name__ == "OffloadingConnector"
    assert isinstance(e.manager, OffloadingManager)
    assert type(e.manager).__name__ == "BelugaOffloadingManager"
    assert type(e.manager).__module__ == "beluga.adapters.vllm"
    for w in e.workers:
        spec = w.connector.connector_worker.spec
        assert isinstance(spec, OffloadingSpec) and type(spec).__name__ == "BelugaOffloadingSpec"
        assert isinstance(w.connector.connector_worker.worker, OffloadingWorker)
    assert not vllm_errors


@pytest.mark.parametrize("layout", ["LBNHC", "LBHNC"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_second_engine_loads_the_first_ones_blocks_bit_exact(engine, device, dtype, layout):
    round_trip(engine, device, dict(dtype=dtype, layout=layout))


@pytest.mark.parametrize("layout", ["LBNHC", "LBHNC"])
@pytest.mark.parametrize("writer_tp,reader_tp", [(2, 1), (1, 2), (4, 2), (8, 1)])
def test_blocks_are_shared_across_tp_sizes(engine, device, writer_tp, reader_tp, layout):
    round_trip(engine, device, dict(tp_size=writer_tp, layout=layout),
               dict(tp_size=reader_tp, layout=layout))


@pytest.mark.parametrize("writer_tp,reader_tp", [(2, 1), (1, 4)])
def test_mla_latents_are_shared_across_tp_sizes(engine, device, writer_tp, reader_tp):
    """Every rank holds the same MLA latent: vLLM's mapping makes the ranks
    take turns writing pages (is_writer), and each reads them all."""
    round_trip(engine, device, dict(mla=True, tp_size=writer_tp),
               dict(mla=True, tp_size=reader_tp))


def test_chunks_of_two_gpu_blocks(engine, device):
    round_trip(engine, device, dict(extra={"blocks_per_chunk": 2}), chunk_tokens=32)


@pytest.mark.fake_pool(block_size=16384)
def test_chunks_larger_than_a_pool_block_span_several(engine, device, backend):
    """A layer's page of a GPU block is 8 KiB at TP 1: a chunk of two GPU
    blocks of four layers takes four 16 KiB pool blocks, filled by the two
    ranks of a TP 2 engine, read by a TP 1 one."""
    if backend != "fake":
        pytest.skip("needs a pool of 16 KiB blocks (the fake pool's geometry)")
    chunk = {"blocks_per_chunk": 2}
    first, second = round_trip(engine, device, dict(tp_size=2, extra=chunk),
                               dict(tp_size=1, extra=chunk), chunk_tokens=32)
    for e in (first, second):
        assert all(s.layout.parts == 4 for s in e.workers[0].connector.connector_worker
                   .spec.stores.values())


@pytest.mark.fake_pool(block_size=4096)
def test_a_page_larger_than_a_pool_block_is_refused_at_load(engine, backend):
    if backend != "fake":
        pytest.skip("needs a pool of 4 KiB blocks (the fake pool's geometry)")
    with pytest.raises(ValueError) as ei:
        engine()
    assert "larger blocks" in str(ei.value) and "8192" in str(ei.value), str(ei.value)


@pytest.mark.fake_pool(regions="dax0.0:1M")          # 16 pool blocks of 64 KiB
def test_a_full_pool_costs_hits_never_bytes_or_blocks(engine, device, backend):
    """Twelve prompts of five chunks each through a pool of sixteen blocks:
    the pool evicts, stores fall short, loads find what is left; every
    token the second engine loads is still bit-exact, nothing is left
    allocated or pinned."""
    prompts = {f"p{i}": [i + 100] * 16 + BASE[:64] for i in range(12)}
    first = engine()
    assert first.serve(prompts) == 0
    second = engine()
    loaded = second.serve(prompts)
    everything = shared_tokens(prompts, prompts, 16)
    assert 0 < loaded <= everything
    if backend == "fake":
        assert loaded < everything, "sixteen pool blocks held sixty chunks"
    assert pool_in_use(device) == (0, 0)


class RecordingPublisher:
    """Stands in for the scheduler's KV event publisher: keeps the events
    vLLM publishes (what a router subscribed to them would receive)."""

    def __init__(self):
        self.events = []

    def publish(self, batch):
        self.events.extend(batch.events)

    def shutdown(self):
        pass


@pytest.mark.parametrize("parts", [
    1, pytest.param(4, marks=pytest.mark.fake_pool(block_size=16384))])
def test_blocks_the_pool_evicts_reach_vllm_as_removed(engine, pool, backend, parts):
    """Four prompts of five chunks each, one after the other, through a pool
    that has room for sixteen chunks: the later stores evict chunks this
    engine stored before, and vLLM must hear of each, once (a chunk of four
    pool blocks too, whose parts go together): in prepare_store's
    evicted_keys, and as a BlockRemoved that vLLM's own path (the scheduler
    draining OffloadingConnector.take_events into its KV event publisher)
    publishes for a block it had published as stored."""
    if parts > 1 and backend != "fake":
        pytest.skip("needs a pool of 16 KiB blocks (the fake pool's geometry)")
    chunk_tokens = 16 if parts == 1 else 32
    held = squeeze_pool(pool, 16 * parts)
    try:
        e = engine(kv_events=True, extra={} if parts == 1 else {"blocks_per_chunk": 2})
        assert all(s.layout.parts == parts for s in e.manager._spec.stores.values())
        e.scheduler.kv_event_publisher = published = RecordingPublisher()
        outputs = []
        prepare_store = e.manager.prepare_store

        def recording_prepare_store(keys, req_context):
            out = prepare_store(keys, req_context)
            if out is not None:
                outputs.append(out)
            return out

        e.manager.prepare_store = recording_prepare_store
        for i in range(4):
            assert e.serve({f"p{i}": [i + 200] * (5 * chunk_tokens)}) == 0
        stored_keys = [k for out in outputs for k in out.keys_to_store]
        evicted_keys = [k for out in outputs for k in out.evicted_keys]
        assert len(stored_keys) == 20
        assert len(evicted_keys) >= 4, "twenty chunks in room for sixteen evicted none"
        assert len(set(evicted_keys)) == len(evicted_keys), "a chunk reported evicted twice"
        assert set(evicted_keys) <= set(stored_keys[:5 * 3]), \
            "evicted keys that are not the earlier prompts' chunks"
        stored = {h for ev in published.events if isinstance(ev, BlockStored)
                  for h in ev.block_hashes}
        removed = [h for ev in published.events if isinstance(ev, BlockRemoved)
                   for h in ev.block_hashes]
        assert all(ev.medium == "CPU" for ev in published.events
                   if isinstance(ev, BlockRemoved))
        assert len(removed) == len(evicted_keys) and set(removed) <= stored, \
            "vLLM published no removal, or one of a block it never saw stored"
    finally:
        pool.free(held)


def test_a_hybrid_model_offloads_every_kv_cache_group(engine, device):
    """Sliding-window layers make a second KV cache group, whose keys come in
    the same prepare_store and prepare_load calls; vLLM needs a hit in every
    group to load a prefix. (The window is longer than the prompts, so vLLM
    offloads every chunk of both groups and what the second engine can load
    is the shared whole chunks, as for one group; which window chunks vLLM
    offloads with a shorter window is vLLM's policy.)"""
    first, _ = round_trip(engine, device, dict(sliding_window=128))
    assert len(first.scheduler.connector.scheduler.config.kv_group_configs) == 2


def first_store_jobs(e, prompt):
    """Step a request until vLLM schedules store jobs: the step's
    SchedulerOutput, not yet run by the workers, and its store jobs."""
    e.add("stored", prompt, max_tokens=4)
    for _ in range(4):
        so = e.scheduler.schedule()
        if so.kv_connector_metadata.store_jobs:
            return so, so.kv_connector_metadata.store_jobs
        e.execute(so)
    raise AssertionError("vLLM made no store job for a computed prompt")


def test_a_failed_copy_names_its_cause_instead_of_failing_the_job(engine):
    """vLLM's worker asserts that every job succeeded ("we currently do not
    support job failures"): a copy that cannot be done must raise its own
    error, not come back as TransferResult(success=False)."""
    e = engine()
    so, jobs = first_store_jobs(e, FIRST["a"])
    for job in jobs.values():
        job.src_spec.block_ids[:] = e.cfg.cache_config.num_gpu_blocks + 7   # no such block
    with pytest.raises(Exception) as ei:
        e.execute(so)
        e.step()                    # the worker submits stores a step later
    assert not isinstance(ei.value, AssertionError), \
        f"vLLM's assert on a failed job fired: {ei.value!r}"
    assert "beluga" in str(ei.value) and "block" in str(ei.value), str(ei.value)


def test_reset_cache_drops_old_blocks_without_admin_rights_and_leaks_nothing(
        engine, device, monkeypatch):
    monkeypatch.setattr(beluga, "Pool", NoAdminPool)
    e = engine()
    assert e.serve({"a": FIRST["a"]}) == 0
    # A request in flight, its stores prepared but not yet done by the workers.
    e.add("b", FIRST["b"])
    e.step()
    e.step()
    assert e.scheduler.reset_prefix_cache(reset_running_requests=True, reset_connector=True)
    assert e.serve({}) == 0
    for _ in range(3):
        e.step()
    assert pool_in_use(device) == (0, 0), "the reset left blocks or pins behind"
    # Blocks stored before the reset are not served after it.
    assert e.serve({"a2": FIRST["a"]}) == 0


def test_pipeline_parallelism_is_refused_at_load_with_the_reason(engine):
    with pytest.raises(Exception) as ei:
        engine(pp_size=2)
    assert "pipeline" in str(ei.value), str(ei.value)


def test_geometry_keys_in_the_extra_config_are_refused(engine):
    with pytest.raises(Exception) as ei:
        engine(extra={"num_layers": 32, "tp_size": 2})
    msg = str(ei.value)
    assert "num_layers" in msg and "tp_size" in msg and "vLLM" in msg, msg


KVCOPY = pathlib.Path(cuda.__file__).with_name("libbeluga-kvcopy.so")


@pytest.mark.skipif(not KVCOPY.exists(), reason="libbeluga-kvcopy.so not built (no nvcc)")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: the GPU tests run")
@pytest.mark.parametrize("tp_size,layout,chunk", [(1, "LBNHC", 1), (2, "LBHNC", 1),
                                                  (8, "LBNHC", 2)])
def test_the_cuda_copy_of_vllms_jobs_passes_kvcopys_checks(engine, tp_size, layout, chunk):
    """Where there is no GPU: every kvcopy launch the worker would make for
    vLLM's store job, and for loading the same blocks, passes the checks
    libbeluga-kvcopy makes before it touches CUDA (bounds, distinct
    destinations, alignment), so it fails only for want of a device."""
    e = engine(tp_size=tp_size, layout=layout, extra={"blocks_per_chunk": chunk})
    so, jobs = first_store_jobs(e, FIRST["a"])
    launches = 0
    for w in e.workers:
        worker = w.connector.connector_worker.worker
        for job_id, job in jobs.items():
            for to_pool, copy in ((True, cuda.gather), (False, cuda.scatter)):
                for call, pairs in worker.copy_plan(job_id, job.dst_spec, job.src_spec, to_pool):
                    with pytest.raises(beluga.NoCuda) as ei:
                        copy(**kvcopy_arguments(call, pairs, worker.pool_map))
                    assert ei.value.errno == errno.ENODEV, str(ei.value)
                    launches += 1
    assert launches >= 2 * tp_size
    e.execute(so)
    e.run()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_kv_cache_round_trips_through_the_cuda_copy(engine, device, dtype):
    round_trip(engine, device, dict(dtype=dtype, device="cuda"))
