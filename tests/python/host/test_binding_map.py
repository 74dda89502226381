# SPDX-License-Identifier: GPL-2.0
"""Pool.map(): zero-copy views, export counting, read-only pools."""

import errno
import gc
import io

import numpy as np
import pytest

import beluga


def test_map_is_a_flat_byte_buffer(pool):
    m = pool.map()
    assert isinstance(m, beluga.PoolMap)
    assert len(m) == pool.map_size and m.block_size == pool.block_size
    assert m.pool is pool and not m.closed and m.exports == 0
    with memoryview(m) as mv:
        assert mv.format == "B" and mv.ndim == 1 and mv.itemsize == 1
        assert len(mv) == len(m) and not mv.readonly and mv.c_contiguous
        assert m.exports == 1
    assert m.exports == 0
    assert pool.map() is m  # one mapping per pool
    assert isinstance(m.address, int) and m.address % (2 << 20) == 0
    m.close()


def test_blocks_are_zero_copy(pool, pool_ro):
    offs = pool.alloc(2)
    m, mro = pool.map(), pool_ro.map()
    blk = m.block(offs[1])
    assert len(blk) == pool.block_size and not blk.readonly
    arr = np.frombuffer(m, dtype=np.uint8)
    pattern = np.arange(pool.block_size, dtype=np.uint64).view(np.uint8)[:pool.block_size]
    blk[:] = pattern.tobytes()
    # The same bytes through a numpy view of the whole map and the reader's map.
    assert np.array_equal(arr[offs[1]:offs[1] + pool.block_size], pattern)
    assert bytes(mro.block(offs[1])) == pattern.tobytes()
    arr[offs[0]] = 0x5A
    assert mro.block(offs[0])[0] == 0x5A
    del blk, arr
    pool.free(offs)


def test_block_offsets_are_checked(pool):
    m = pool.map()
    bs = pool.block_size
    for bad in (1, bs + 1, len(m), len(m) + bs, 2 ** 63):
        with pytest.raises(ValueError, match="not the offset of a block"):
            m.block(bad)
    with pytest.raises(TypeError, match="offset must be an int"):
        m.block(-1)
    assert len(m.block(len(m) - bs)) == bs


def test_close_refused_while_views_exist(pool):
    m = pool.map()
    views = [memoryview(m), m.block(0), np.frombuffer(m, dtype=np.uint8),
             np.frombuffer(m.block(pool.block_size), dtype=np.uint32)]
    for v in views:
        assert m.exports >= 1
        with pytest.raises(BufferError, match="still exported"):
            pool.close()
        with pytest.raises(BufferError, match="still exported"):
            m.close()
        # Refusing unmapped nothing: the view still reads and writes.
        np.frombuffer(v, dtype=np.uint8)[0:1] = 7
        assert not pool.closed and not m.closed
    del v
    views.pop(0).release()
    while views:
        views.pop()
    gc.collect()
    assert m.exports == 0
    pool.close()
    assert m.closed and len(m) == 0
    with pytest.raises(BufferError, match="mapping is closed"):
        memoryview(m)
    with pytest.raises(ValueError, match="closed"):
        m.block(0)
    with pytest.raises(ValueError, match="closed"):
        m.address


def test_view_keeps_its_mapping_alive(device):
    p = beluga.Pool(device)
    offs = p.alloc(1)
    blk = p.map().block(offs[0])    # neither the pool nor the map is kept by name
    blk[:5] = b"alive"
    del p
    gc.collect()
    assert bytes(blk[:5]) == b"alive"   # still mapped: the view holds map and pool
    m = blk.obj
    pool = m.pool
    del blk
    pool.free(offs)
    pool.close()


def test_map_close_then_map_again(pool):
    m = pool.map()
    m.close()
    m.close()  # idempotent
    assert m.closed
    m2 = pool.map()
    assert m2 is not m and not m2.closed and len(m2) == pool.map_size
    with m2:
        pass
    assert m2.closed


def test_map_grows_after_attach(pool, backend):
    if backend != "fake":
        pytest.skip("attaching memory needs CAP_SYS_ADMIN and a spare node; fake only")
    m = pool.map()
    size = len(m)
    pool.attach_node(0, 4 << 20)
    assert pool.map() is m and len(m) == size + (4 << 20)
    # With a view exported the mapping stays as it is.
    v = memoryview(m)
    pool.attach_node(1, 4 << 20)
    assert len(pool.map()) == size + (4 << 20)
    v.release()
    assert len(pool.map()) == size + (8 << 20)


def test_read_only_pool_maps_read_only(pool, pool_ro):
    m = pool_ro.map()
    with memoryview(m) as mv:
        assert mv.readonly
        with pytest.raises(TypeError):
            mv[0] = 1
    blk = m.block(0)
    assert blk.readonly
    with pytest.raises(TypeError):
        blk[:1] = b"x"
    arr = np.frombuffer(m, dtype=np.uint8)
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 1
    # Asking for a writable buffer (readinto) is refused, not downgraded.
    with pytest.raises((BufferError, TypeError), match="read-write|read-only"):
        io.BytesIO(b"x").readinto(m)
    del blk, arr


def test_read_only_pool_refuses_writes(pool, pool_ro, unique_ns):
    with pytest.raises(beluga.ReadOnly, match="read-only") as ei:
        pool_ro.alloc(1)
    assert ei.value.errno == errno.EBADF
    offs = pool.alloc(1)
    with pytest.raises(beluga.ReadOnly, match="opened read-only"):
        pool_ro.publish(unique_ns, offs, b"k" * 16)
    with pytest.raises(beluga.ReadOnly):
        pool_ro.free(offs)
    pool.publish(unique_ns, offs, b"k" * 16)
    # Readers look up, pin and release.
    hits, pinned = pool_ro.lookup(unique_ns, b"k" * 16, pin=True)
    assert hits == 1 and list(pinned) == list(offs)
    pool_ro.release(pinned)
    pool.evict_ns(unique_ns)


def test_map_of_a_closed_pool(device):
    p = beluga.Pool(device)
    p.close()
    with pytest.raises(ValueError, match="pool is closed"):
        p.map()


def test_cuda_registration(pool):
    m = pool.map()
    try:
        m.cuda_register()
    except beluga.NoCuda as exc:
        assert exc.errno == errno.ENOSYS and "CUDA" in str(exc)
        assert not m.cuda_registered
        return
    except beluga.Error as exc:
        # A CUDA runtime without a usable GPU: CUDA's own reason.
        assert exc.errno == errno.EIO and "cudaHostRegister" in str(exc)
        assert not m.cuda_registered
        return
    assert m.cuda_registered and m.exports == 0
    m.cuda_unregister()
    assert not m.cuda_registered
