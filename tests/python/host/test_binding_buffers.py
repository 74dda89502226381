# SPDX-License-Identifier: GPL-2.0
"""Keys, offsets and tokens as buffers: every accepted form, every refusal."""

import array
import ctypes

import numpy as np
import pytest

import beluga

KEY_DTYPE = np.dtype([("lo", "<u8"), ("hi", "<u8")])


def chain(n, salt=0):
    return beluga.hash_chain(np.arange(salt, salt + 4 * n, dtype=np.uint32), 4)


def key_forms(raw):
    """The same keys in every form the binding accepts."""
    u8 = np.frombuffer(raw, dtype=np.uint8)
    return {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "memoryview-Q": memoryview(raw).cast("Q"),
        "numpy-uint8": u8.copy(),
        "numpy-uint64": u8.view(np.uint64).copy(),
        "numpy-V16": u8.view("V16").copy(),
        "numpy-structured": u8.view(KEY_DTYPE).copy(),
        "numpy-uint8-2d": u8.reshape(-1, 16).copy(),
    }


@pytest.mark.parametrize("form", list(key_forms(b"\0" * 16)))
def test_every_key_form_finds_the_same_blocks(pool, unique_ns, form):
    raw = chain(3)
    offs = pool.alloc(3)
    res = pool.publish(unique_ns, offs, key_forms(raw)[form])
    assert res.published == 3
    for other in key_forms(raw).values():
        assert pool.lookup(unique_ns, other) == (3, None)
    pool.evict_ns(unique_ns)


def test_structured_keys_are_lo_hi_little_endian(pool, unique_ns):
    raw = chain(2)
    k = np.frombuffer(raw, dtype=KEY_DTYPE)
    lo = int.from_bytes(raw[0:8], "little")
    hi = int.from_bytes(raw[8:16], "little")
    assert (int(k[0]["lo"]), int(k[0]["hi"])) == (lo, hi)
    built = np.zeros(2, KEY_DTYPE)
    built["lo"], built["hi"] = k["lo"], k["hi"]
    pool.publish(unique_ns, pool.alloc(2), built)
    assert pool.lookup(unique_ns, raw) == (2, None)
    pool.evict_ns(unique_ns)


@pytest.mark.parametrize("nbytes", [1, 15, 17, 33])
def test_keys_not_a_multiple_of_16(pool, unique_ns, nbytes):
    with pytest.raises(ValueError, match="not a multiple of 16"):
        pool.lookup(unique_ns, b"\1" * nbytes)
    offs = pool.alloc(1)
    with pytest.raises(ValueError, match="not a multiple of 16"):
        pool.publish(unique_ns, offs, b"\1" * nbytes)
    pool.free(offs)


@pytest.mark.parametrize("bad", [
    np.zeros(4, dtype=">u8"),          # big-endian
    np.zeros(2, dtype=np.float64),
    np.zeros(1, dtype=np.complex128),  # 16 bytes, but not a key
    np.zeros(4, dtype=np.uint32),
    np.zeros(1, dtype=[("lo", ">u8"), ("hi", ">u8")]),
], ids=["big-endian", "float64", "complex128", "uint32", "structured-be"])
def test_keys_of_a_wrong_dtype(pool, unique_ns, bad):
    with pytest.raises(TypeError, match="16-byte keys"):
        pool.lookup(unique_ns, bad)


def test_keys_not_a_buffer(pool, unique_ns):
    with pytest.raises(TypeError, match="must be a buffer"):
        pool.lookup(unique_ns, [1, 2])
    with pytest.raises(TypeError, match="must be a buffer"):
        pool.lookup(unique_ns, "0123456789abcdef")


def test_keys_not_contiguous(pool, unique_ns):
    k = np.frombuffer(chain(4), dtype=np.uint8).reshape(4, 16)[::2]
    with pytest.raises(BufferError, match="not C-contiguous"):
        pool.lookup(unique_ns, k)
    with pytest.raises(BufferError, match="not C-contiguous"):
        pool.lookup(unique_ns, np.frombuffer(chain(4), dtype=np.uint64)[::2])


def test_misaligned_keys_are_fine(pool, unique_ns):
    raw = chain(2)
    pool.publish(unique_ns, pool.alloc(2), raw)
    shifted = memoryview(b"x" + raw)[1:]
    assert pool.lookup(unique_ns, shifted) == (2, None)
    pool.evict_ns(unique_ns)


def offset_forms(offs):
    a = array.array("Q", offs)
    return {
        "array-Q": a,
        "list": list(offs),
        "tuple": tuple(offs),
        "numpy-uint64": np.array(offs, dtype=np.uint64),
        "numpy-<u8": np.array(offs, dtype="<u8"),
        "memoryview-Q": memoryview(a),
        "memoryview-L": memoryview(a.tobytes()).cast("L"),
        "numpy-uint64-2d": np.array(offs, dtype=np.uint64).reshape(len(offs), 1),
        "ctypes-<Q": (ctypes.c_uint64 * len(offs))(*offs),
    }


def test_offset_forms_cover_the_formats():
    formats = {memoryview(v).format for v in offset_forms([0]).values()
               if not isinstance(v, (list, tuple))}
    assert {"Q", "L", "<Q"} <= formats


@pytest.mark.parametrize("form", list(offset_forms([0])))
def test_every_offset_form(pool, form):
    offs = pool.alloc(4)
    pool.free(offset_forms(list(offs))[form])
    # Freed means allocatable again and not ours any more: a second free fails.
    with pytest.raises(beluga.InvalidArgument, match="not a block allocated by this handle"):
        pool.free(offs)


@pytest.mark.parametrize("bad,name", [
    (np.zeros(2, dtype=np.int64), "int64"),
    (np.zeros(2, dtype=np.uint32), "uint32"),
    (np.zeros(2, dtype=np.float64), "float64"),
    (np.zeros(2, dtype=">u8"), "big-endian"),
    (b"\0" * 16, "bytes"),
    (array.array("q", [0, 0]), "array-q"),
])
def test_offsets_of_a_wrong_dtype(pool, bad, name):
    for call in (pool.free, pool.release):
        with pytest.raises(TypeError, match="offsets must be uint64 items"):
            call(bad)
    with pytest.raises(TypeError, match="numpy.uint64"):
        pool.publish(1, bad, b"\0" * 32)


def test_offsets_bad_ints(pool):
    with pytest.raises(OverflowError, match=r"offsets\[1\]"):
        pool.free([0, -1])
    with pytest.raises(OverflowError):
        pool.free([2 ** 64])
    with pytest.raises(TypeError, match=r"offsets\[0\] must be an int"):
        pool.free(["0"])
    with pytest.raises(TypeError, match="sequence of ints"):
        pool.free(3)


def test_offsets_not_contiguous(pool):
    offs = pool.alloc(4)
    strided = np.array(offs, dtype=np.uint64)[::2]
    with pytest.raises(BufferError, match="not C-contiguous"):
        pool.free(strided)
    pool.free(offs)


def test_misaligned_offsets(pool):
    offs = pool.alloc(2)
    shifted = memoryview(b"x" + offs.tobytes())[1:].cast("B").cast("Q")
    pool.free(shifted)


def test_ns_must_be_u64(pool):
    with pytest.raises(OverflowError, match="ns must be in"):
        pool.lookup(-1, b"")
    with pytest.raises(OverflowError):
        pool.lookup(2 ** 64, b"")
    with pytest.raises(TypeError, match="ns must be an int"):
        pool.lookup("1", b"")
    assert pool.lookup(2 ** 64 - 1, b"") == (0, None)


def test_lookup_arguments(pool):
    with pytest.raises(TypeError, match=r"lookup\(ns, keys, pin=False\)"):
        pool.lookup(1)
    with pytest.raises(TypeError, match=r"lookup\(ns, keys, pin=False\)"):
        pool.lookup(1, b"", pinned=True)
    with pytest.raises(TypeError, match=r"lookup\(ns, keys, pin=False\)"):
        pool.lookup(1, b"", True, pin=True)
    assert pool.lookup(1, b"", True) == (0, array.array("Q"))


@pytest.mark.parametrize("tokens", [
    list(range(32)),
    array.array("I", range(32)),
    np.arange(32, dtype=np.uint32),
    np.arange(32, dtype="<u4"),
    tuple(range(32)),
    range(32),
], ids=["list", "array-I", "numpy-uint32", "numpy-<u4", "tuple", "range"])
def test_token_forms(tokens):
    assert beluga.hash_chain(tokens, 16) == beluga.hash_chain(list(range(32)), 16)


def test_token_refusals():
    with pytest.raises(TypeError, match="tokens must be uint32 items"):
        beluga.hash_chain(np.arange(32, dtype=np.int64), 16)
    with pytest.raises(TypeError, match="uint32"):
        beluga.hash_chain(np.arange(32, dtype=">u4"), 16)
    with pytest.raises(OverflowError, match=r"tokens\[1\]"):
        beluga.hash_chain([0, 2 ** 32], 1)
    with pytest.raises(OverflowError):
        beluga.hash_chain([-1], 1)
    with pytest.raises(BufferError, match="not C-contiguous"):
        beluga.hash_chain(np.arange(64, dtype=np.uint32)[::2], 16)
    with pytest.raises(ValueError, match="block_tokens must be >= 1"):
        beluga.hash_chain([1, 2], 0)
    with pytest.raises(ValueError, match="one 16-byte key"):
        beluga.hash_chain([1, 2], 1, parent=b"\0" * 15)
    with pytest.raises(ValueError, match="one 16-byte key"):
        beluga.hash_block(b"\0" * 17, [1])
    with pytest.raises(TypeError, match="fnv1a_128|data must be a buffer"):
        beluga.fnv1a_128("text")


def test_cache_maintenance_takes_buffers(pool):
    offs = pool.alloc(1)
    with pool.map() as m:
        blk = m.block(offs[0])
        blk[:4] = b"abcd"
        beluga.flush_range(blk)
        beluga.invalidate_range(blk[:64])
        beluga.flush_range(b"")
        assert bytes(blk[:4]) == b"abcd"
        del blk
    pool.free(offs)
    with pytest.raises(TypeError, match="must be a buffer"):
        beluga.flush_range(12)
    with pytest.raises(BufferError, match="not C-contiguous"):
        beluga.invalidate_range(np.zeros(8, dtype=np.uint8)[::2])


def test_hash_chain_into_a_buffer():
    want = beluga.hash_chain(range(64), 16)
    for out in (bytearray(64), np.zeros(64, np.uint8), np.zeros(8, np.uint64),
                np.zeros(4, KEY_DTYPE), memoryview(bytearray(65))[1:]):
        assert beluga.hash_chain(range(64), 16, out=out) == 4
        assert bytes(memoryview(out).cast("B")) == want
    # As many as fit, like beluga_hash_chain()'s max_keys.
    small = bytearray(32)
    assert beluga.hash_chain(range(64), 16, out=small) == 2 and bytes(small) == want[:32]
    assert beluga.hash_chain(range(64), 16, out=bytearray(0)) == 0


def test_hash_chain_out_refusals():
    ro = np.zeros(64, np.uint8)
    ro.flags.writeable = False
    for bad in (bytes(64), ro, memoryview(bytearray(64)).toreadonly()):
        with pytest.raises(TypeError, match="out is read-only but is written"):
            beluga.hash_chain(range(64), 16, out=bad)
    with pytest.raises(BufferError, match="out is not C-contiguous"):
        beluga.hash_chain(range(64), 16, out=np.zeros(128, np.uint8)[::2])
    with pytest.raises(TypeError, match="16-byte keys"):
        beluga.hash_chain(range(64), 16, out=bytearray(63))
    with pytest.raises(TypeError, match="16-byte keys"):
        beluga.hash_chain(range(64), 16, out=np.zeros(16, np.float32))
