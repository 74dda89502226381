# SPDX-License-Identifier: GPL-2.0
"""The beluga binding: every command, its results and its errors.

Runs on the fake kernel on the host and on /dev/beluga in the guest
(BELUGA_TEST_REAL=1); see tests/python/conftest.py for the fixtures.
"""

import array
import errno
import os
import re

import pytest

import beluga


def keys_for(n, salt=0):
    """n distinct 16-byte keys (a real chain, so also a leading run)."""
    return beluga.hash_chain(array.array("I", range(salt, salt + 4 * n)), 4)


def test_info_has_every_field(pool):
    info = pool.info()
    assert set(info) == {"abi_version", "nr_regions", "block_size", "nr_blocks",
                         "map_size", "max_batch", "max_regions", "shared"}
    assert info["abi_version"] == beluga.ABI_VERSION
    assert info["max_batch"] == beluga.MAX_BATCH
    assert info["nr_regions"] >= 1 and info["nr_blocks"] >= 64
    assert pool.block_size == info["block_size"] > 0
    assert pool.map_size == info["map_size"] >= info["nr_blocks"] * info["block_size"]


UAPI_HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "..", "..", "..", "uapi", "linux", "beluga.h")


def uapi_stats_fields():
    """The __u64 fields of struct beluga_stats, read from the ABI itself."""
    if not os.path.exists(UAPI_HEADER):
        pytest.skip("the uapi header is not at %s" % UAPI_HEADER)
    with open(UAPI_HEADER) as f:
        text = f.read()
    body = re.search(r"^struct beluga_stats \{\n(.*?)^\};", text, re.M | re.S)
    assert body, "struct beluga_stats not found in " + UAPI_HEADER
    return re.findall(r"^\t__(?:aligned_)?u64 (\w+);", body.group(1), re.M)


def test_stats_has_every_field(pool):
    s = pool.stats()
    fields = uapi_stats_fields()
    # The field the last ABI version added, and the one before: a parse
    # that found nothing must not make the comparison below vacuous.
    assert "retired_blocks" in fields and "alloc_failures" in fields
    assert set(s) == set(fields)
    assert s["total_blocks"] >= 64 and s["clients"] >= 1


def test_properties(pool, pool_ro):
    assert pool.writable and not pool_ro.writable
    assert not pool.closed
    assert isinstance(pool.fd, int) and pool.fd >= 0 and pool.fd != pool_ro.fd
    assert "read-write" in repr(pool) and "read-only" in repr(pool_ro)


def test_alloc_free_roundtrip(pool):
    before = pool.stats()
    offs = pool.alloc(5)
    assert isinstance(offs, array.array) and offs.typecode == "Q" and len(offs) == 5
    assert len(set(offs)) == 5
    assert all(o % pool.block_size == 0 and o < pool.map_size for o in offs)
    assert pool.stats()["allocated_blocks"] == before["allocated_blocks"] + 5
    pool.free(offs)
    assert pool.stats()["allocated_blocks"] == before["allocated_blocks"]
    assert len(pool.alloc(0)) == 0
    pool.free([])


def test_alloc_refuses_negative(pool):
    with pytest.raises(ValueError, match="n must be >= 0"):
        pool.alloc(-1)
    with pytest.raises(TypeError):
        pool.alloc("3")


def test_publish_lookup_release(pool, unique_ns):
    keys = keys_for(4)
    offs = pool.alloc(4)
    res = pool.publish(unique_ns, offs, keys)
    assert isinstance(res, beluga.PublishResult)
    assert list(res.results) == [beluga.PUBLISH_OK] * 4 and res.results.typecode == "i"
    assert (res.published, res.exists, res.failed) == (4, 0, 0)

    assert pool.lookup(unique_ns, keys) == (4, None)
    hits, pinned = pool.lookup(unique_ns, keys, pin=True)
    assert hits == 4 and list(pinned) == list(offs) and pinned.typecode == "Q"
    assert pool.stats()["pins"] >= 4
    pool.release(pinned)

    # The leading run only: a missing middle key ends it.
    other = keys_for(1, salt=10_000)
    mixed = keys[:32] + other + keys[32:]
    assert pool.lookup(unique_ns, mixed)[0] == 2
    assert pool.lookup(unique_ns, other + keys) == (0, None)
    hits, pinned = pool.lookup(unique_ns, other, pin=True)
    assert hits == 0 and len(pinned) == 0
    assert pool.evict_ns(unique_ns) == (4, 0)


def test_publish_lost_race_is_a_result(pool, unique_ns):
    keys = keys_for(2)
    first = pool.alloc(2)
    pool.publish(unique_ns, first, keys)
    second = pool.alloc(2)
    res = pool.publish(unique_ns, second, keys)
    assert list(res.results) == [beluga.PUBLISH_EXISTS] * 2
    assert (res.published, res.exists, res.failed) == (0, 2, 0)
    # A lost race frees the block: nothing is left allocated.
    assert pool.evict_ns(unique_ns)[0] == 2


def test_publish_per_item_failures(pool, unique_ns):
    offs = pool.alloc(2)
    bad = array.array("Q", [offs[0], offs[1], 3])  # 3 is no block
    res = pool.publish(unique_ns, bad, keys_for(3))
    assert list(res.results[:2]) == [beluga.PUBLISH_OK] * 2
    assert res.results[2] < 0 and res.failed == 1 and res.published == 2
    pool.evict_ns(unique_ns)


def test_publish_count_mismatch(pool, unique_ns):
    offs = pool.alloc(2)
    try:
        with pytest.raises(ValueError, match="2 offsets but 1 keys"):
            pool.publish(unique_ns, offs, keys_for(1))
    finally:
        pool.free(offs)


def test_region_info(pool):
    ri = pool.region_info(0)
    assert set(ri) >= {"region_id", "backend", "node", "mappings", "phys_start", "length",
                       "first_offset", "nr_blocks", "free_blocks", "allocated_blocks",
                       "published_blocks", "name"}
    assert ri["region_id"] == 0 and ri["nr_blocks"] > 0 and isinstance(ri["name"], str)
    with pytest.raises(beluga.NotFound, match="no region in slot") as ei:
        pool.region_info(beluga.MAX_REGIONS - 1)
    assert ei.value.errno == errno.ENOENT
    assert isinstance(ei.value, FileNotFoundError) and isinstance(ei.value, OSError)


def test_evict_key(pool, unique_ns):
    keys = keys_for(2)
    pool.publish(unique_ns, pool.alloc(2), keys)
    pool.evict_key(unique_ns, keys[16:])
    assert pool.lookup(unique_ns, keys) == (1, None)
    with pytest.raises(beluga.NotFound, match="not present in namespace"):
        pool.evict_key(unique_ns, keys[16:])
    hits, pinned = pool.lookup(unique_ns, keys[:16], pin=True)
    with pytest.raises(beluga.Busy, match="pinned"):
        pool.evict_key(unique_ns, keys[:16])
    assert pool.evict_ns(unique_ns) == (0, 1)
    pool.release(pinned)
    assert pool.evict_ns(unique_ns) == (1, 0)
    with pytest.raises(ValueError, match="one 16-byte key"):
        pool.evict_key(unique_ns, keys)


def test_alloc_nospace(pool):
    n = pool.stats()["total_blocks"]
    with pytest.raises(beluga.NoSpace, match="fewer free plus evictable blocks") as ei:
        pool.alloc(n + 1)
    assert ei.value.errno == errno.ENOSPC
    assert isinstance(ei.value, beluga.Error)


def test_hash_vectors_match_c():
    # The reference vectors of userspace/include/libbeluga.h (printed hi then lo).
    def hexkey(b):
        return b[8:16][::-1].hex() + b[0:8][::-1].hex()

    assert hexkey(beluga.fnv1a_128(b"")) == "6c62272e07bb014262b821756295c58d"
    assert hexkey(beluga.fnv1a_128(b"a")) == "d228cb696f1a8caf78912b704e4a8964"
    chain = beluga.hash_chain(list(range(32)), 16)
    assert len(chain) == 32
    assert hexkey(chain[:16]) == "edeb83b5c40730fbe43af425245ace0d"
    assert hexkey(chain[16:]) == "bba2d53446b14787e13ac728aa0e7927"
    assert hexkey(beluga.hash_chain([1, 2, 3, 4], 4)) == "a2bf8a25c5590ba78943ede6c6c5e9bd"
    assert beluga.hash_block(None, array.array("I", range(16))) == chain[:16]
    assert beluga.hash_block(chain[:16], array.array("I", range(16, 32))) == chain[16:]
    assert beluga.hash_chain(list(range(16, 32)), 16, parent=chain[:16]) == chain[16:]
    assert beluga.hash_chain([1, 2, 3], 4) == b""


def test_closed_pool(device):
    p = beluga.Pool(device)
    p.close()
    p.close()  # idempotent
    assert p.closed
    for call in (p.info, p.stats, lambda: p.alloc(1), lambda: p.free([]), p.map,
                 lambda: p.lookup(1, b""), lambda: p.fd):
        with pytest.raises(ValueError, match="pool is closed"):
            call()


def test_context_manager(device):
    with beluga.Pool(device) as p:
        assert not p.closed
    assert p.closed


def test_open_errors(tmp_path):
    with pytest.raises(beluga.NotFound, match="modprobe beluga") as ei:
        beluga.Pool(str(tmp_path / "nope"))
    assert ei.value.errno == errno.ENOENT


def test_integer_arguments_are_range_checked(pool):
    # Never wrapped around: -1 is not 2**64 - 1 bytes.
    with pytest.raises(OverflowError):
        pool.attach_node(0, -1)
    with pytest.raises(OverflowError):
        pool.attach_node(0, 1 << 20, block_size=2 ** 64)
    with pytest.raises(OverflowError):
        pool.attach_dax("dax0.0", block_size=-4096)
    with pytest.raises(OverflowError):
        pool.detach(-1)
    with pytest.raises(OverflowError):
        pool.region_info(2 ** 32)
    with pytest.raises(TypeError, match="expected an int"):
        pool.region_info("0")
    with pytest.raises(OverflowError):
        pool.evict_ns(-1)


def test_default_path(device, monkeypatch, backend):
    with beluga.Pool() as p:        # $BELUGA_DEVICE, which the fixture set
        assert p.path == device
    monkeypatch.delenv("BELUGA_DEVICE")
    if backend == "real" or os.path.exists(beluga.DEVICE_PATH):
        with beluga.Pool() as p:
            assert p.path == beluga.DEVICE_PATH
    else:
        with pytest.raises(beluga.NotFound, match="/dev/beluga not found: load the module"):
            beluga.Pool()


def test_path_like_and_read_only_open(device):
    import pathlib

    with beluga.Pool(pathlib.Path(device), writable=False) as p:
        assert p.path == device and not p.writable
        assert p.info()["abi_version"] == beluga.ABI_VERSION


def test_attach_node_and_detach(pool, backend):
    """Admin commands on both backends (real: root, memory on node 0)."""
    bs = pool.block_size
    size = max(2 * bs, 4 << 20)
    try:
        a = pool.attach_node(0, size)
    except beluga.PermissionDenied:
        pytest.skip("attach needs CAP_SYS_ADMIN: run the tests as root")
    rid = a["region_id"]
    try:
        assert a["backend"] == beluga.BACKEND_NODE and a["node"] == 0
        assert a["block_size"] == bs and a["nr_blocks"] == size // bs
        ri = pool.region_info(rid)
        assert ri["first_offset"] == a["first_offset"] and ri["nr_blocks"] == a["nr_blocks"]
        # The module names node regions itself (ATTACH does not write the name back).
        assert ri["free_blocks"] == a["nr_blocks"] and ri["name"] == "node0"
        assert pool.map_size >= a["first_offset"] + size
    finally:
        assert pool.detach(rid, evict=True) == 0
    with pytest.raises(beluga.NotFound, match=f"no region in slot {rid}"):
        pool.detach(rid)


def test_quick_start(device, unique_ns):
    """The quick start of the package docstring (and the README), as written."""
    ns = unique_ns
    tokens = list(range(64))
    with beluga.Pool() as pool:                  # $BELUGA_DEVICE or /dev/beluga
        keys = beluga.hash_chain(tokens, 16)     # 16 bytes per full block: 4 keys
        offs = pool.alloc(2)                     # array('Q') of block offsets
        m = pool.map()                           # buffer over the whole pool
        m.block(offs[0])[:5] = b"hello"          # zero-copy block views
        res = pool.publish(ns, offs, keys[:32])  # PublishResult per item
        assert res.published == 2
        hits, pinned = pool.lookup(ns, keys, pin=True)
        assert hits == 2 and bytes(m.block(pinned[0])[:5]) == b"hello"
        pool.release(pinned)
        assert pool.evict_ns(ns) == (2, 0)
