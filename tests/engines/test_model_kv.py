# SPDX-License-Identifier: GPL-2.0
"""A transformers model's KV cache through the pool, bit for bit (model_kv.py).

The writer (this process) prefills prompts that share prefixes and stores
their KV blocks through KVStore. A reader in another process (forked: on the
host the fake kernel lives in the process, and a child inherits its pool)
opens its own handle, loads the hits, rebuilds transformers' cache from them
and continues generation. Its tokens and logits must equal those of a cold run
(a third process, no pool) byte for byte. The negative controls show that the
comparison sees what a broken store or adapter would do: one flipped byte in a
stored block, K and V swapped, the layers in the wrong order.

Run with the `model` engine venv (scripts/engine-venv.sh model); on the host
against the fake kernel, in the 6.12 guest with BELUGA_TEST_REAL=1.
"""

import functools

import pytest

import model_kv as mk

DTYPES = ["float32", "bfloat16"]
# Blocks loaded per reader prompt: all full blocks but the one holding the last
# prompt token (recomputed), and only the shared 3-block prefix for the prompt
# the writer never saw.
EXPECTED_HITS = [(len(p) - 1) // mk.TOKENS_PER_BLOCK for p in mk.WRITER_PROMPTS] + [3]


@functools.lru_cache(maxsize=None)
def cold(dtype):
    return mk.in_child(mk.cold_run, dtype)


def write_and_read(pool, device, dtype, salt, unpack="right", flip=None):
    with mk.open_store(pool, dtype, salt) as store:
        stored = mk.write_prompts(store, dtype, flip=flip)
        layout = store.layout
    # Every full block of the first prompt, then the second one's blocks past
    # the prefix they share (4 blocks: the system prompt and the first turn's
    # first 16 tokens).
    assert [(r.stored, r.skipped) for r in stored] == [(5, 0), (1, 4)], stored
    runs, hits = mk.in_child(mk.warm_run, device, dtype, salt, unpack)
    assert hits == EXPECTED_HITS, "the reader did not load the blocks the writer stored"
    return runs, layout


@pytest.mark.parametrize("dtype", DTYPES)
def test_loaded_kv_continues_bit_exactly(pool, device, unique_ns, dtype):
    runs, _ = write_and_read(pool, device, dtype, f"model-{unique_ns}")
    assert mk.differences(runs, cold(dtype)) == []


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_flipped_byte_in_a_stored_block_is_seen(pool, device, unique_ns, dtype):
    spec = mk.model_spec(dtype)
    layout = mk.BlockLayout(spec, pool.block_size)
    # The low byte of one V element of the last layer in block 1 (part of the
    # prefix every prompt loads): the smallest change a byte flip can make.
    token, head, dim = 5, 1, 3
    offset = layout.v_offset(spec.num_layers - 1) + \
        ((token * spec.num_kv_heads + head) * spec.head_dim + dim) * layout.itemsize
    runs, _ = write_and_read(pool, device, dtype, f"flip-{unique_ns}", flip=(1, offset))
    assert mk.differences(runs, cold(dtype)) != [], \
        "a block with a flipped byte gave the cold run's logits: the comparison is blind"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("unpack", ["kv-swapped", "layers-reversed"])
def test_a_wrong_layout_is_seen(pool, device, unique_ns, dtype, unpack):
    runs, _ = write_and_read(pool, device, dtype, f"{unpack}-{unique_ns}", unpack=unpack)
    assert mk.differences(runs, cold(dtype)) != [], \
        f"blocks read {unpack} gave the cold run's logits: the comparison is blind"
