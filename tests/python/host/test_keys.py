# SPDX-License-Identifier: GPL-2.0
"""Key schemes and namespace derivation.

The SGLang vectors are recomputed here with hashlib from the definition in
engines.md section 1.2 (sglang python/sglang/srt/mem_cache/hicache_storage.py,
get_hash_str, commit 001067ff), not taken from beluga.keys; the FNV vectors are
the ones printed in userspace/include/libbeluga.h.
"""

import hashlib
import struct

import pytest

from beluga import keys
from beluga.layout import BlockLayout, ModelSpec


def sglang_reference(pages):
    """SGLang's chain, written out independently of beluga.keys."""
    out, prior = [], None
    for page in pages:
        data = (bytes.fromhex(prior) if prior else b"") + struct.pack(f"<{len(page)}I", *page)
        prior = hashlib.sha256(data).hexdigest()
        out.append(prior)
    return out


def test_sglang_first_page_has_no_prior():
    toks = [1, 2, 3, 4]
    assert keys.sglang_page_hash(toks) == hashlib.sha256(
        b"\x01\0\0\0\x02\0\0\0\x03\0\0\0\x04\0\0\0").hexdigest()
    # A known constant, so a change of both sides at once is caught too.
    assert keys.sglang_page_hash([]) == \
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_sglang_chain_matches_reference_and_drops_partial_page():
    toks = list(range(100, 100 + 4 * 16 + 5))
    ref = sglang_reference([toks[i * 16:(i + 1) * 16] for i in range(4)])
    assert keys.sglang_hash_chain(toks, 16) == ref
    k = keys.sha256_chain(toks, 16)
    assert len(k) == 4 * 16
    assert keys.split(k) == [bytes.fromhex(h)[:16] for h in ref]
    # digest16 of SGLang's hex gives the same key: the SGLang adapter and a
    # token-keyed writer agree.
    assert [keys.digest16(h) for h in ref] == keys.split(k)


def test_sglang_chain_continues_from_prior():
    toks = list(range(64))
    full = keys.sglang_hash_chain(toks, 16)
    tail = keys.sglang_hash_chain(toks[32:], 16, prior_hex=full[1])
    assert tail == full[2:]


def test_sglang_eagle_bigrams_hash_both_ids():
    assert keys.sglang_page_hash([(1, 2), (3, 4)]) == keys.sglang_page_hash([1, 2, 3, 4])


def test_chain_is_prefix_dependent():
    a = keys.split(keys.sha256_chain([1] * 16 + [2] * 16, 16))
    b = keys.split(keys.sha256_chain([3] * 16 + [2] * 16, 16))
    assert a[1] != b[1]


# Vectors from userspace/include/libbeluga.h (hi then lo as one 128-bit number).
FNV_VECTORS = [
    (list(range(32)), 16, ["edeb83b5c40730fbe43af425245ace0d", "bba2d53446b14787e13ac728aa0e7927"]),
    ([1, 2, 3, 4], 4, ["a2bf8a25c5590ba78943ede6c6c5e9bd"]),
]


@pytest.mark.parametrize("toks,bt,expect", FNV_VECTORS)
def test_fnv_chain_vectors(toks, bt, expect):
    got = keys.split(keys.fnv_chain(toks, bt))
    assert [int.from_bytes(k, "little") for k in got] == [int(h, 16) for h in expect]


def test_chain_by_scheme_name():
    toks = list(range(32))
    assert keys.chain("sha256", toks, 16) == keys.sha256_chain(toks, 16)
    assert keys.chain("fnv", toks, 16) == keys.fnv_chain(toks, 16)
    with pytest.raises(ValueError, match="unknown key scheme"):
        keys.chain("md5", toks, 16)


def test_digest16_rules():
    k16 = bytes(range(16))
    assert keys.digest16(k16) == k16
    d32 = hashlib.sha256(b"x").digest()
    assert keys.digest16(d32) == d32[:16]
    assert keys.digest16(d32.hex()) == d32[:16]
    # Other shapes are hashed with a type tag: 5 as int and "5" as str differ.
    assert len(keys.digest16(5)) == 16
    assert keys.digest16(5) != keys.digest16("5") != keys.digest16(b"5")
    assert keys.digest16(-1) != keys.digest16(255)
    assert keys.digest16(b"\0" * 36) != keys.digest16(b"\0" * 36 + b"\1")
    with pytest.raises(TypeError, match="cannot make a key"):
        keys.digest16(1.5)


def test_part_keys_are_distinct_ordered_and_identity_for_one_part():
    k = keys.sha256_chain(list(range(48)), 16)
    assert keys.part_keys(k, 1) == k
    p = keys.split(keys.part_keys(k, 3))
    assert len(p) == 9 and len(set(p)) == 9
    assert not set(p) & set(keys.split(k))
    # Parts of block 1 do not depend on block 0 beyond its key.
    assert keys.split(keys.part_keys(k[16:32], 3)) == p[3:6]
    with pytest.raises(ValueError, match="whole 16-byte keys"):
        keys.part_keys(b"\0" * 17, 2)


def layout(**kw):
    base = dict(model="m", num_layers=2, num_kv_heads=4, head_dim=8, dtype="float32",
                tokens_per_block=8)
    base.update(kw)
    return BlockLayout(ModelSpec(**base), 4096)


def test_namespace_is_deterministic_and_u64():
    a, b = keys.namespace(layout()), keys.namespace(layout())
    assert a.value == b.value and 0 <= a.value < 1 << 64
    assert int(a) == a.value


@pytest.mark.parametrize("kw", [
    dict(model="m2"), dict(revision="abc"), dict(dtype="float16"), dict(tokens_per_block=16),
    dict(tp_size=2), dict(tp_size=2, tp_rank=1), dict(num_layers=3), dict(head_dim=16),
    dict(extra=(("quant", "fp8"),)),
])
def test_every_field_changes_the_namespace(kw):
    assert keys.namespace(layout()).value != keys.namespace(layout(**kw)).value


def test_salt_and_extra_fields_change_namespace():
    base = keys.namespace(layout())
    assert keys.namespace(layout(), salt="tenant-a").value != base.value
    assert keys.namespace(layout(), salt="tenant-a").value != \
        keys.namespace(layout(), salt="tenant-b").value
    assert keys.namespace(layout(), group=1).value != base.value


def test_parts_change_namespace():
    spec = ModelSpec(model="m", num_layers=2, num_kv_heads=4, head_dim=8, dtype="float32",
                     tokens_per_block=8)
    assert keys.namespace(BlockLayout(spec, 4096)).value != \
        keys.namespace(BlockLayout(spec, 1024)).value


def test_fields_are_domain_separated():
    # Concatenations that agree must not collide once tagged.
    a = keys.Namespace([("model", "ab"), ("revision", "c")])
    b = keys.Namespace([("model", "a"), ("revision", "bc")])
    assert a.value != b.value


def test_describe_shows_why_two_engines_miss():
    a = keys.namespace(layout(tp_size=2, tp_rank=0))
    b = keys.namespace(layout(tp_size=2, tp_rank=1))
    text = a.describe()
    assert f"0x{a.value:016x}" in text
    for field in ("model", "kv_dtype", "layout", "tokens_per_block", "tp_rank", "tp_size", "parts"):
        assert field in text
    assert a.diff(b) == [("tp_rank", "0", "1")]


def test_repeated_field_names_rejected():
    with pytest.raises(ValueError, match="repeat"):
        keys.Namespace([("a", 1), ("a", 2)])


def test_mla_namespace_is_the_same_on_every_tp_rank():
    def mla(rank):
        return BlockLayout(ModelSpec(model="m", num_layers=2, num_kv_heads=1, head_dim=1,
                                     dtype="float16", latent_dim=64, tp_rank=rank, tp_size=4), 4096)
    assert keys.namespace(mla(0)).value == keys.namespace(mla(3)).value
    assert "tp_rank" not in keys.namespace(mla(0)).describe()
