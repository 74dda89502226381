# SPDX-License-Identifier: GPL-2.0
"""BlockLayout arithmetic: sizes, parts, offsets and views (no pool needed)."""

import numpy as np
import pytest

from beluga.layout import BlockLayout, ModelSpec

MiB = 1 << 20


def llama8b(**kw):
    base = dict(model="meta-llama/Llama-3.1-8B", num_layers=32, num_kv_heads=8,
                head_dim=128, dtype="bfloat16", tokens_per_block=16)
    base.update(kw)
    return ModelSpec(**base)


def test_llama8b_block_is_exactly_2mib():
    lay = BlockLayout(llama8b(), 2 * MiB)
    assert lay.bytes_per_token == 128 * 1024
    assert lay.block_bytes == 2 * MiB
    assert lay.parts == 1 and lay.fill_ratio == 1.0
    assert lay.shape == (32, 2, 16, 8, 128)


def test_tp2_halves_the_shard():
    lay = BlockLayout(llama8b(tp_size=2, tp_rank=1), 2 * MiB)
    assert lay.spec.heads_local == 4
    assert lay.block_bytes == MiB
    assert lay.fill_ratio == 0.5


def test_qwen3_32b_needs_two_parts():
    spec = ModelSpec(model="Qwen/Qwen3-32B", num_layers=64, num_kv_heads=8, head_dim=128,
                     dtype="bfloat16", tokens_per_block=16)
    lay = BlockLayout(spec, 2 * MiB)
    assert lay.block_bytes == 4 * MiB
    assert lay.parts == 2
    assert lay.part_ranges() == [(0, 2 * MiB), (2 * MiB, 2 * MiB)]


def test_uneven_parts_last_part_is_short():
    spec = ModelSpec(model="m", num_layers=80, num_kv_heads=8, head_dim=128,
                     dtype="bfloat16", tokens_per_block=16)
    lay = BlockLayout(spec, 2 * MiB)        # 5 MiB -> 3 parts, 1 MiB in the last
    assert lay.block_bytes == 5 * MiB
    assert lay.parts == 3
    assert lay.part_ranges()[-1] == (4 * MiB, MiB)
    assert abs(lay.fill_ratio - 5 / 6) < 1e-12


def test_offsets_are_layer_major_k_then_v():
    spec = ModelSpec(model="t", num_layers=3, num_kv_heads=2, head_dim=4, dtype="float32",
                     tokens_per_block=5)
    lay = BlockLayout(spec, 4096)
    kv = 5 * 2 * 4 * 4
    assert lay.kv_bytes == kv and lay.layer_stride == 2 * kv
    for layer in range(3):
        assert lay.k_offset(layer) == layer * 2 * kv
        assert lay.v_offset(layer) == layer * 2 * kv + kv
    with pytest.raises(IndexError):
        lay.k_offset(3)
    # The view agrees with the offsets, element by element.
    buf = bytearray(4096)
    v = lay.view(buf)
    v[2, 1, 3, 1, 2] = 7.5
    off = lay.v_offset(2) + ((3 * 2 + 1) * 4 + 2) * 4
    assert np.frombuffer(bytes(buf[off:off + 4]), np.float32)[0] == 7.5
    assert np.count_nonzero(np.frombuffer(bytes(buf), np.uint8)) == 2  # 7.5f has two nonzero bytes


def test_view_is_zero_copy_and_respects_readonly():
    lay = BlockLayout(ModelSpec(model="t", num_layers=1, num_kv_heads=1, head_dim=2,
                                dtype="float16", tokens_per_block=2), 64)
    buf = bytearray(64)
    lay.view(buf)[0, 0, 0, 0, 0] = 1.0
    assert buf[:2] == np.float16(1.0).tobytes()
    ro = lay.view(bytes(64))
    assert not ro.flags.writeable
    with pytest.raises(ValueError, match="smaller than one engine block"):
        lay.view(bytearray(lay.block_bytes - 1))
    with pytest.raises(ValueError, match="C-contiguous"):
        lay.view(np.zeros((4, 16), np.uint8)[:, ::2])


def test_mla_has_one_latent_per_layer_and_no_tp_split():
    spec = ModelSpec(model="deepseek-ai/DeepSeek-V3", num_layers=61, num_kv_heads=1, head_dim=1,
                     dtype="bfloat16", tokens_per_block=16, latent_dim=576, tp_size=8, tp_rank=3)
    lay = BlockLayout(spec, 2 * MiB)
    assert lay.bytes_per_token == 61 * 576 * 2
    assert lay.shape == (61, 16, 576)
    assert lay.k_offset(1) == 16 * 576 * 2
    with pytest.raises(ValueError, match="no V"):
        lay.v_offset(0)


def test_replicated_heads_when_tp_exceeds_heads():
    lay = BlockLayout(llama8b(tp_size=16, tp_rank=15), 2 * MiB)
    assert lay.spec.heads_local == 1


@pytest.mark.parametrize("kw,msg", [
    (dict(num_kv_heads=6, tp_size=4), "cannot be split over tp_size"),
    (dict(tp_rank=2, tp_size=2), "outside"),
    (dict(num_layers=0), "num_layers must be >= 1"),
    (dict(tokens_per_block=0), "tokens_per_block must be >= 1"),
    (dict(dtype="complex-ish"), "not a numpy dtype"),
    (dict(dtype="complex64"), "plain numeric"),
    (dict(model=""), "non-empty"),
    (dict(head_dim=2.5), "must be an int"),
])
def test_bad_specs_name_the_problem(kw, msg):
    with pytest.raises((ValueError, TypeError), match=msg):
        llama8b(**kw)


def test_bad_pool_block_size():
    with pytest.raises(ValueError, match="pool_block_size"):
        BlockLayout(llama8b(), 0)


def test_fit_tokens_largest_multiple_that_fits():
    spec = ModelSpec(model="Qwen/Qwen2.5-7B", num_layers=28, num_kv_heads=4, head_dim=128,
                     dtype="bfloat16")
    assert BlockLayout.fit_tokens(spec, 2 * MiB, 16) == 32          # 1.75 MiB
    assert BlockLayout.fit_tokens(llama8b(), MiB, 16) == 16          # does not fit: parts


def test_describe_names_the_geometry():
    d = BlockLayout(llama8b(tp_size=2), 2 * MiB).describe()
    assert "4 of 8 kv heads" in d and "tp 0/2" in d and "50.0% used" in d
