# SPDX-License-Identifier: GPL-2.0
"""Every errno libbeluga returns maps to its exception, with libbeluga's message.

The fake kernel's fault injection (_fake_fail) makes the kernel fail a
command with a chosen errno; those tests run on the fake build only.
"""

import errno

import pytest

import beluga
from beluga import _beluga

fake_only = pytest.mark.skipif(not beluga.FAKE_KERNEL,
                               reason="fault injection needs the fake kernel")
fake_regions = pytest.mark.skipif(
    not beluga.FAKE_KERNEL,
    reason="attaches nodes 2 and 3 and a dax device from a fake sysfs tree: the fake kernel "
           "only (test_binding.py attaches node 0 on both)")

KEY = b"k" * 16


def calls(pool):
    return {
        "alloc": lambda: pool.alloc(1),
        "lookup": lambda: pool.lookup(1, KEY),
        "stats": pool.stats,
        "info": pool.info,
        "region_info": lambda: pool.region_info(0),
        "detach": lambda: pool.detach(0),
        "evict": lambda: pool.evict_ns(1),
        "attach": lambda: pool.attach_node(0, 2 << 20),
    }


@pytest.mark.parametrize("cmd,err,exc,fragment", [
    ("alloc", errno.ENOSPC, beluga.NoSpace, "fewer free plus evictable"),
    ("alloc", errno.ENODEV, beluga.NoRegion, "belugactl attach"),
    ("lookup", errno.ENODEV, beluga.NoRegion, "no region attached"),
    ("detach", errno.EBUSY, beluga.Busy, "region 0 is busy"),
    ("region_info", errno.ENOENT, beluga.NotFound, "no region in slot 0"),
    ("stats", errno.EPERM, beluga.PermissionDenied, "CAP_SYS_ADMIN"),
    ("evict", errno.EACCES, beluga.PermissionDenied, "EVICT"),
    ("alloc", errno.EBADF, beluga.ReadOnly, "opened read-only"),
    ("attach", errno.EEXIST, beluga.Exists, "already attached"),
    ("info", errno.ENOTTY, beluga.NotBeluga, "does not know this command"),
    ("lookup", errno.EPROTO, beluga.AbiMismatch, "LOOKUP"),
    ("lookup", errno.EINVAL, beluga.InvalidArgument, "rejected the arguments"),
    ("alloc", errno.E2BIG, beluga.Error, "too large"),
    ("stats", errno.EIO, beluga.Error, "STATS"),
])
@fake_only
def test_errno_maps_to_exception(pool, cmd, err, exc, fragment):
    _beluga._fake_fail(cmd, 1, err)
    with pytest.raises(exc, match=fragment) as ei:
        calls(pool)[cmd]()
    e = ei.value
    assert type(e) is exc
    assert isinstance(e, beluga.Error) and isinstance(e, OSError)
    assert e.errno == err and e.strerror and fragment in str(e)
    # One failure only: the next call works.
    if cmd not in ("detach", "attach"):
        again = calls(pool)[cmd]()
        if cmd == "alloc":
            pool.free(again)


def test_builtin_bases():
    assert issubclass(beluga.NotFound, FileNotFoundError)
    assert issubclass(beluga.PermissionDenied, PermissionError)
    assert issubclass(beluga.Exists, FileExistsError)
    for name in ("NoSpace", "NoRegion", "Busy", "NotFound", "PermissionDenied", "ReadOnly",
                 "Exists", "NotBeluga", "AbiMismatch", "NoCuda", "InvalidArgument"):
        cls = getattr(beluga, name)
        assert issubclass(cls, beluga.Error) and cls.__doc__
    assert issubclass(beluga.Error, OSError)


def test_strerror():
    assert "no memory region" in beluga.strerror(errno.ENODEV)
    assert "no memory region" in beluga.strerror(-errno.ENODEV)
    assert beluga.strerror(0) == "success"


@fake_only
def test_open_not_beluga(device):
    _beluga._fake_fail("info", 1, errno.ENOTTY)
    with pytest.raises(beluga.NotBeluga, match="is not a Beluga device"):
        beluga.Pool(device)


@fake_only
def test_open_other_abi(device):
    _beluga._fake_reset(abi_version=99)
    with pytest.raises(beluga.AbiMismatch, match="speaks Beluga ABI 99") as ei:
        beluga.Pool(device)
    assert ei.value.errno == errno.EPROTO
    _beluga._fake_reset()


@fake_only
def test_no_region(device):
    _beluga._fake_reset(regions="")
    with beluga.Pool(device) as p:
        assert p.info()["nr_regions"] == 0 and p.block_size == 0
        with pytest.raises(beluga.NoRegion, match="no region attached") as ei:
            p.alloc(1)
        assert ei.value.errno == errno.ENODEV
        with pytest.raises(beluga.NoRegion, match="nothing to map"):
            p.map()


BIG = pytest.mark.fake_pool(block_size=4096, regions="dax0.0:32M")


@fake_only
@BIG
def test_failed_publish_chunk_keeps_earlier_results(pool):
    ns = 77
    n = beluga.MAX_BATCH + 10
    offs = pool.alloc(n)
    keys = beluga.hash_chain(range(n), 1)
    _beluga._fake_fail("publish", 2, errno.EIO)
    with pytest.raises(beluga.Error, match="PUBLISH") as ei:
        pool.publish(ns, offs, keys)
    res = ei.value.result
    assert isinstance(res, beluga.PublishResult)
    assert res.published == beluga.MAX_BATCH and res.failed == 10
    assert set(res.results[:beluga.MAX_BATCH]) == {beluga.PUBLISH_OK}
    assert set(res.results[beluga.MAX_BATCH:]) == {-errno.EIO}
    assert pool.lookup(ns, keys)[0] == beluga.MAX_BATCH
    pool.free(offs[beluga.MAX_BATCH:])
    pool.evict_ns(ns)


@fake_only
@BIG
def test_failed_lookup_chunk_drops_its_pins(pool):
    ns = 78
    n = beluga.MAX_BATCH + 1
    keys = beluga.hash_chain(range(n), 1)
    pool.publish(ns, pool.alloc(n), keys)
    _beluga._fake_fail("lookup", 2, errno.EIO)
    with pytest.raises(beluga.Error):
        pool.lookup(ns, keys, pin=True)
    assert pool.stats()["pins"] == 0
    pool.evict_ns(ns)


@fake_regions
def test_admin_commands(pool):
    a = pool.attach_node(3, 4 << 20)
    assert a["backend"] == beluga.BACKEND_NODE and a["node"] == 3
    assert a["nr_blocks"] == (4 << 20) // pool.block_size and a["block_size"] == pool.block_size
    assert a["name"] == "node3"
    rid = a["region_id"]
    assert pool.region_info(rid)["first_offset"] == a["first_offset"]
    offs = pool.alloc(pool.stats()["free_blocks"])   # reaches into the new region
    with pytest.raises(beluga.Busy, match=f"region {rid} is busy"):
        pool.detach(rid)
    pool.free(offs)
    assert pool.detach(rid) == 0
    with pytest.raises(beluga.NotFound):
        pool.region_info(rid)
    with pytest.raises(beluga.InvalidArgument, match="NUMA node -1 is invalid"):
        pool.attach_node(-1, 1 << 20)
    with pytest.raises(beluga.InvalidArgument, match="not a dax device"):
        pool.attach_dax("sda1")
    with pytest.raises(ValueError, match="shared=True"):
        pool.attach_dax("dax0.0", format=True)


@fake_regions
def test_detach_with_evict(pool):
    rid = pool.attach_node(2, 2 << 20)["region_id"]
    n = pool.region_info(rid)["nr_blocks"]
    offs = pool.alloc(pool.stats()["free_blocks"])
    mine = [o for o in offs if o >= pool.region_info(rid)["first_offset"]]
    rest = [o for o in offs if o < pool.region_info(rid)["first_offset"]]
    pool.free(rest)
    keys = beluga.hash_chain(range(len(mine)), 1)
    pool.publish(5, mine, keys)
    with pytest.raises(beluga.Busy, match="evict=True"):
        pool.detach(rid)
    assert pool.detach(rid, evict=True) == n


@fake_regions
def test_attach_dax_through_sysfs(pool, tmp_path, monkeypatch):
    # A fake sysfs tree, as tests/userspace/test_sysfs.c builds one.
    dev = tmp_path / "sys/bus/dax/devices/dax7.0"
    dev.mkdir(parents=True)
    (dev / "resource").write_text("0x480000000\n")
    (dev / "size").write_text(str(4 << 20) + "\n")
    (dev / "target_node").write_text("1\n")
    (dev / "numa_node").write_text("0\n")
    drv = tmp_path / "sys/bus/dax/drivers/device_dax"
    drv.mkdir(parents=True)
    (dev / "driver").symlink_to(drv)
    monkeypatch.setenv("BELUGA_SYSFS_ROOT", str(tmp_path / "sys"))
    a = pool.attach_dax("/dev/dax7.0")
    assert a["name"] == "dax7.0" and a["backend"] == beluga.BACKEND_DAX
    assert a["phys_start"] == 0x480000000 and a["length"] == 4 << 20
    with pytest.raises(beluga.Exists, match="already attached"):
        pool.attach_dax("dax7.0")
    with pytest.raises(beluga.NotFound, match="no such dax device"):
        pool.attach_dax("dax9.0")
    # The fake does not do shared pools: the module's EINVAL explained.
    with pytest.raises(beluga.InvalidArgument, match="shared"):
        pool.attach_dax("dax7.0", shared=True, host_id=1)
    assert pool.detach(a["region_id"]) == 0
