# SPDX-License-Identifier: GPL-2.0
"""The SGLang HiCache storage backend against SGLang itself (the `sglang` venv).

SGLang's own HiCacheController makes the backend through its storage backend
factory ("dynamic", the extra config that userspace/python/README.md
documents), registers its host memory pool and drives it with its own storage
threads: backup (write_storage -> batch_set_v1 or the legacy batch_set) and
prefetch (prefetch -> batch_exists, then batch_get_v1 or the legacy
batch_get). The host pools are SGLang's (MHATokenToKVPoolHost over an
MHATokenToKVPool), in every host layout SGLang offers.

No GPU: the device KV pool is on SGLang's CPU device, and the step between
the prefetch hit query and the transfer, which SGLang's radix cache does in
the scheduler thread (allocate host slots for the hit, queue the operation),
is done by the test, with the host pool's own alloc. The device <-> host
transfers (CUDA kernels) are not run; the host pool's bytes are what the
storage layer reads and writes.
"""

import json
import logging
import os
import pathlib
import re
import sys
import threading

# SGLang's page hash is a C++ extension that torch builds on first use with
# the venv's ninja (SGLang's own requirement); the build goes into the venv,
# not into ~/.cache.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch-extensions"))
# SGLang on its CPU device even where a GPU is present: with CUDA it imports
# its device <-> host copy kernels from sglang-kernel, which this environment
# leaves out (see sglang.in), so those copies are not tested here.
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import pytest  # noqa: E402
import torch  # noqa: E402
from sglang.srt.managers.cache_controller import HiCacheController  # noqa: E402
from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
    HiCacheStorage, HiCacheStorageConfig)
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_storage_hash_str  # noqa: E402
from sglang.srt.runtime_context import get_parallel  # noqa: E402

README = pathlib.Path(__file__).resolve().parents[2] / "userspace" / "python" / "README.md"
PAGE, LAYERS, HEADS, HEAD_DIM = 4, 3, 2, 8
KV_LORA_RANK, QK_ROPE_HEAD_DIM = 16, 8
DEVICE_TOKENS = 256
WAIT_S = 30

# SGLang's page hash, built (or loaded) once here, before any test watches
# SGLang's log: its loader warns about the lock file torch's last build left.
get_storage_hash_str(list(range(PAGE)), None, page_size=PAGE)


def documented_extra_config(device):
    """The --hicache-storage-backend-extra-config of the package README, as
    documented, with the test's device in place of /dev/beluga."""
    text = README.read_text()
    section = text[text.index("### SGLang (HiCache storage backend)"):]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block and "--hicache-storage-backend dynamic" in block.group(1), \
        f"{README} has no SGLang command line under '### SGLang (HiCache storage backend)'"
    config = re.search(r"--hicache-storage-backend-extra-config '(.*?)'", block.group(1), re.S)
    assert config, f"{README}: the SGLang block has no --hicache-storage-backend-extra-config"
    extra = json.loads(config.group(1))
    assert extra["beluga_path"] == "/dev/beluga"
    extra["beluga_path"] = device
    return extra


@pytest.fixture(autouse=True)
def single_rank():
    """What SGLang's scheduler publishes before it makes a controller: one
    rank, no TP, PP or DCP."""
    with get_parallel().override(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1,
                                 attn_dcp_size=1, attn_dcp_rank=0):
        yield


@pytest.fixture
def sglang_problems(caplog):
    """What SGLang logs at WARNING or above (a failed backup or prefetch is
    logged and swallowed by its storage threads)."""
    caplog.set_level(logging.WARNING, logger="sglang")
    yield lambda: [r.getMessage() for r in caplog.records
                   if r.name.startswith("sglang") and r.levelno >= logging.WARNING]


def host_pool(layout, dtype, mla=False, heads=HEADS):
    """SGLang's device KV pool (on its CPU device) and its host pool."""
    if mla:
        device = MLATokenToKVPool(size=DEVICE_TOKENS, page_size=PAGE, dtype=dtype,
                                  kv_lora_rank=KV_LORA_RANK, qk_rope_head_dim=QK_ROPE_HEAD_DIM,
                                  layer_num=LAYERS, device="cpu", enable_memory_saver=False)
        host = MLATokenToKVPoolHost(device._mla_buffer_info(), 2.0, 0, PAGE, layout,
                                    pin_memory=False, device="cpu",
                                    device_capacity_tokens=DEVICE_TOKENS, start_layer=0,
                                    end_layer=LAYERS, target_layer_num=LAYERS)
        return device, host
    device = MHATokenToKVPool(size=DEVICE_TOKENS, page_size=PAGE, dtype=dtype, head_num=heads,
                              head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                              enable_memory_saver=False, enable_alt_stream=False)
    host = MHATokenToKVPoolHost(device._mha_buffer_info(), 2.0, 0, PAGE, layout,
                                pin_memory=False, device="cpu",
                                device_capacity_tokens=DEVICE_TOKENS,
                                start_layer=0, end_layer=LAYERS)
    return device, host


def controller(device_pool, host, extra):
    """SGLang's HiCacheController with the storage backend attached as
    --hicache-storage-backend dynamic does it."""
    alloc = PagedTokenToKVPoolAllocator(DEVICE_TOKENS, PAGE, device_pool.dtype, "cpu",
                                        device_pool, need_sort=False)
    return HiCacheController(alloc, host, PAGE, tp_group=None,
                             load_cache_event=threading.Event(),
                             storage_backend="dynamic", model_name="beluga-test/sglang",
                             storage_backend_extra_config=dict(extra))


def random_bits(host, indices, seed):
    """Every bit pattern (NaNs too: a value conversion changes some) in the
    host pool's slots `indices`, K and V."""
    g = torch.Generator().manual_seed(seed)
    for part in kv_parts(host):
        for i in indices.tolist():
            slot = token_slot(host, part, i)
            raw = torch.randint(0, 256, (slot.numel() * slot.element_size(),),
                                dtype=torch.uint8, generator=g)
            slot.copy_(raw.view(slot.dtype).reshape(slot.shape))


def kv_parts(host):
    """K and V of an MHA host pool; an MLA one's latent buffer."""
    if isinstance(host, MLATokenToKVPoolHost):
        return [host.kv_buffer]
    return [host.kv_buffer[0], host.kv_buffer[1]]


def token_slot(host, part, index):
    """One token's K (or V) in SGLang's host layout, as a (layer, head, dim)
    view whatever the layout."""
    if host.layout == "page_first":                 # (tokens, L, H, D)
        return part[index]
    if host.layout == "layer_first":                # (L, tokens, H, D)
        return part[:, index]
    page, offset = divmod(index, PAGE)
    if host.layout == "page_first_direct":          # (pages, L, T, H, D)
        return part[page, :, offset]
    return part[page, :, offset].permute(1, 0, 2)   # page_head: (pages, H, T, L, D)


def token_bits(host, indices):
    return torch.stack([token_slot(host, part, i).contiguous().view(torch.uint8)
                        for i in indices.tolist() for part in kv_parts(host)])


def backup(cc, host_indices, tokens):
    """write_storage as SGLang's radix cache calls it; its page hashes."""
    hashes = get_storage_hash_str(tokens, None, page_size=PAGE)
    cc.write_storage(host_indices, tokens, hash_value=hashes)
    op = cc.ack_backup_queue.get(timeout=WAIT_S)
    return op.completed_tokens


def backed_up_page(cc, host, tokens, seed):
    """A page of the host pool filled with random bits and backed up under
    ``tokens`` through the controller: its host indices."""
    src = host.alloc(PAGE)
    random_bits(host, src, seed)
    assert backup(cc, src, tokens) == PAGE
    return src


def prefetch(cc, host, tokens):
    """prefetch as SGLang's scheduler does it: the controller's threads query
    the hits; the scheduler's part (host slots for the hits) done here."""
    op = cc.prefetch("req", tokens)
    hit = cc.prefetch_hit_queue.get(timeout=WAIT_S)
    assert hit is op
    if op.storage_hit_count == 0:
        return op, None, 0
    op.host_indices = host.alloc(op.storage_hit_count)
    cc.prefetch_buffer.put(op)
    completed = 0
    while True:
        ack = cc.ack_prefetch_queue.get(timeout=WAIT_S)
        if ack.completed_tokens is not None:
            completed = ack.completed_tokens
        if ack.completed_req:
            return op, op.host_indices, completed


def round_trip(device, extra, layout, dtype, seed, pages=3, mla=False):
    """Back up `pages` pages of random bits, prefetch them into fresh host
    slots: the bytes must be equal, and the prefetch must hit every page."""
    device_pool, host = host_pool(layout, dtype, mla)
    cc = controller(device_pool, host, extra)
    try:
        tokens = list(range(seed * 1000, seed * 1000 + pages * PAGE))
        src = host.alloc(pages * PAGE)
        random_bits(host, src, seed)
        want = token_bits(host, src)
        assert backup(cc, src, tokens) == pages * PAGE
        op, dst, completed = prefetch(cc, host, tokens)
        assert op.storage_hit_count == pages * PAGE
        assert completed == pages * PAGE
        assert not set(dst.tolist()) & set(src.tolist())
        got = token_bits(host, dst)
        assert torch.equal(got, want), f"{layout} {dtype}: the prefetched bytes differ"
        return cc
    finally:
        cc.detach_storage_backend()


def test_sglang_makes_the_backend_from_the_documented_config(device, pool, sglang_problems):
    extra = documented_extra_config(device)
    device_pool, host = host_pool("page_first", torch.bfloat16)
    config = HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                  attn_cp_size=1, is_mla_model=False,
                                  enable_storage_metrics=False, is_page_first_layout=True,
                                  model_name="beluga-test/sglang", extra_config=dict(extra))
    backend = StorageBackendFactory.create_backend("dynamic", config, host)
    try:
        assert isinstance(backend, HiCacheStorage)
        assert type(backend).__name__ == "BelugaHiCacheStorage"
        backend.register_mem_pool_host(host)
        assert backend.batch_exists(get_storage_hash_str(list(range(8)), None, PAGE)) == 0
    finally:
        backend.close()
    assert sglang_problems() == []


def test_the_documented_config_takes_the_zero_copy_path(device, pool, sglang_problems):
    # M-S1: without "interface_v1" SGLang took the legacy path
    extra = documented_extra_config(device)
    assert "interface_v1" not in extra
    device_pool, host = host_pool("page_first", torch.bfloat16)
    cc = controller(device_pool, host, extra)
    try:
        assert cc.page_get_func.__func__ is HiCacheController._page_get_zero_copy
        assert cc.page_set_func.__func__ is HiCacheController._page_set_zero_copy
    finally:
        cc.detach_storage_backend()
    assert sglang_problems() == []


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct", "page_head",
                                    "layer_first"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kv_round_trips_bit_exactly_through_sglang(device, pool, sglang_problems, layout, dtype):
    round_trip(device, documented_extra_config(device), layout, dtype, seed=7)
    assert sglang_problems() == []


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct", "layer_first"])
@pytest.mark.parametrize("interface_v1", [1, 0])
def test_mla_latents_round_trip_bit_exactly(device, pool, sglang_problems, layout, interface_v1):
    extra = dict(documented_extra_config(device), interface_v1=interface_v1)
    cc = round_trip(device, extra, layout, torch.bfloat16, seed=13, mla=True)
    assert cc.storage_config.is_mla_model
    assert sglang_problems() == []


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct", "page_head",
                                    "layer_first"])
def test_the_legacy_path_keeps_bfloat16_bits(device, pool, sglang_problems, layout):
    # M-S2: the legacy batch_set called .numpy() on bfloat16 pages; M-S3:
    # page_first_direct on the legacy path
    extra = dict(documented_extra_config(device), interface_v1=0)
    device_pool, host = host_pool(layout, torch.bfloat16)
    cc = controller(device_pool, host, extra)
    assert cc.page_set_func.__func__ is HiCacheController._generic_page_set
    cc.detach_storage_backend()
    round_trip(device, extra, layout, torch.bfloat16, seed=11)
    assert sglang_problems() == []


def test_a_block_written_on_one_path_is_read_on_the_other(device, pool, sglang_problems):
    # both paths store the canonical layout: a legacy writer's pages are a
    # zero-copy reader's hits, across host layouts too
    legacy = dict(documented_extra_config(device), interface_v1=0)
    device_pool, host = host_pool("page_first", torch.bfloat16)
    cc = controller(device_pool, host, legacy)
    tokens = list(range(40, 40 + 2 * PAGE))
    src = host.alloc(2 * PAGE)
    random_bits(host, src, 5)
    want = token_bits(host, src)
    assert backup(cc, src, tokens) == 2 * PAGE
    cc.detach_storage_backend()

    device_pool, host = host_pool("page_head", torch.bfloat16)
    cc = controller(device_pool, host, documented_extra_config(device))
    try:
        op, dst, completed = prefetch(cc, host, tokens)
        assert completed == 2 * PAGE
        assert torch.equal(token_bits(host, dst), want)
    finally:
        cc.detach_storage_backend()
    assert sglang_problems() == []


def test_a_miss_after_the_stored_prefix(device, pool, sglang_problems):
    device_pool, host = host_pool("page_first", torch.float16)
    cc = controller(device_pool, host, documented_extra_config(device))
    try:
        tokens = list(range(500, 500 + 3 * PAGE))
        src = host.alloc(2 * PAGE)
        random_bits(host, src, 3)
        assert backup(cc, src, tokens[:2 * PAGE]) == 2 * PAGE
        op, dst, completed = prefetch(cc, host, tokens)
        assert op.storage_hit_count == 2 * PAGE and completed == 2 * PAGE
        op, dst, completed = prefetch(cc, host, list(range(900, 900 + PAGE)))
        assert op.storage_hit_count == 0
    finally:
        cc.detach_storage_backend()
    assert sglang_problems() == []


def test_an_unsupported_host_layout_is_refused_at_attach(device, pool):
    # M-S6: refused loudly, with the layouts that work
    device_pool, host = host_pool("page_unified", torch.bfloat16)
    with pytest.raises(ValueError, match="page_unified.*--hicache-mem-layout"):
        controller(device_pool, host, documented_extra_config(device))


def test_clear_says_whether_it_cleared(device, pool, sglang_problems):
    # M-S5: clear() returns a bool (the fake pool's handle is an admin one)
    device_pool, host = host_pool("page_first", torch.bfloat16)
    cc = controller(device_pool, host, documented_extra_config(device))
    try:
        tokens = list(range(700, 700 + PAGE))
        src = backed_up_page(cc, host, tokens, 9)
        assert cc.storage_backend.clear() is True
        op, dst, completed = prefetch(cc, host, tokens)
        assert op.storage_hit_count == 0
    finally:
        cc.detach_storage_backend()
    assert sglang_problems() == []


def test_clear_through_sglang_without_the_evict_right_logs_the_fix(device, pool, backend, caplog):
    # M-S5 on a handle that may not EVICT: SGLang 0.5.23's own caller of
    # clear() (HybridCacheController.clear_storage_backend, the admin API's
    # path) ignores what clear() returns and reports success, so the
    # adapter's warning is what reaches the operator
    if backend != "fake":
        pytest.skip("refuses EVICT through the fake pool's fault injection")
    import errno
    import types
    from beluga import _beluga
    from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
    device_pool, host = host_pool("page_first", torch.bfloat16)
    cc = controller(device_pool, host, documented_extra_config(device))
    try:
        tokens = list(range(800, 800 + PAGE))
        src = backed_up_page(cc, host, tokens, 10)
        _beluga._fake_fail("evict", 1, errno.EPERM)
        caller = types.SimpleNamespace(enable_storage=True, storage_backend=cc.storage_backend)
        with caplog.at_level(logging.WARNING, logger="beluga.adapters.sglang"):
            HybridCacheController.clear_storage_backend(caller)
        msg = " ".join(r.getMessage() for r in caplog.records if r.name == "beluga.adapters.sglang")
        assert "admin" in msg and "belugactl evict --ns 0x" in msg and "--all" in msg, msg
        op, dst, completed = prefetch(cc, host, tokens)
        assert op.storage_hit_count == PAGE, "a refused clear() dropped the pages"
    finally:
        cc.detach_storage_backend()


def test_a_hybrid_models_pool_is_refused(device, pool):
    # M-S4: the v2 pools (Mamba, SWA, DSA sidecars) are refused when SGLang
    # registers them, not at the first prefetch
    device_pool, host = host_pool("page_first", torch.bfloat16)
    cc = controller(device_pool, host, documented_extra_config(device))
    try:
        with pytest.raises(ValueError, match="hybrid model"):
            cc.storage_backend.register_mem_host_pool_v2(host, "mamba")
    finally:
        cc.detach_storage_backend()


def test_two_tp_ranks_keep_their_own_heads(device, pool, sglang_problems):
    # TP 2: each rank's host pool holds its half of the heads under the same
    # page hashes; each rank must read back its own
    tokens = list(range(300, 300 + 2 * PAGE))
    ranks = []
    for rank in (0, 1):
        with get_parallel().override(tp_rank=rank, tp_size=2):
            device_pool, host = host_pool("page_first", torch.bfloat16)
            cc = controller(device_pool, host, documented_extra_config(device))
        assert (cc.storage_config.tp_rank, cc.storage_config.tp_size) == (rank, 2)
        src = host.alloc(2 * PAGE)
        random_bits(host, src, 20 + rank)
        assert backup(cc, src, tokens) == 2 * PAGE
        ranks.append((cc, host, token_bits(host, src)))
    try:
        for cc, host, want in ranks:
            op, dst, completed = prefetch(cc, host, tokens)
            assert completed == 2 * PAGE
            assert torch.equal(token_bits(host, dst), want)
        assert not torch.equal(ranks[0][2], ranks[1][2])
    finally:
        for cc, _, _ in ranks:
            cc.detach_storage_backend()
    assert sglang_problems() == []


def test_replicated_kv_heads_keep_the_models_head_count(device, pool, sglang_problems):
    # M-S7: a model of two KV heads at TP 4, each rank's host pool holding one
    # replicated head; "num_kv_heads" puts the model's count in the namespace
    extra = dict(documented_extra_config(device), num_kv_heads=2)
    tokens = list(range(900, 900 + PAGE))
    for rank in range(4):
        with get_parallel().override(tp_rank=rank, tp_size=4):
            device_pool, host = host_pool("page_first", torch.bfloat16, heads=1)
            cc = controller(device_pool, host, extra)
        try:
            spec = cc.storage_backend.store.layout.spec
            assert (spec.num_kv_heads, spec.tp_size, spec.heads_local) == (2, 4, 1)
            src = backed_up_page(cc, host, tokens, 30 + rank)
            op, dst, completed = prefetch(cc, host, tokens)
            assert completed == PAGE and torch.equal(token_bits(host, dst), token_bits(host, src))
        finally:
            cc.detach_storage_backend()
    with get_parallel().override(tp_rank=0, tp_size=4):
        device_pool, host = host_pool("page_first", torch.bfloat16, heads=1)
        with pytest.raises(ValueError, match="num_kv_heads 8 over tp_size 4"):
            controller(device_pool, host, dict(extra, num_kv_heads=8))
    assert sglang_problems() == []
