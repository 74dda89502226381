# SPDX-License-Identifier: LGPL-2.1-or-later
"""Beluga: a KV-cache block pool on CXL memory, from Python.

The binding maps libbeluga one to one (see userspace/include/libbeluga.h):

    import beluga
    with beluga.Pool() as pool:                  # $BELUGA_DEVICE or /dev/beluga
        keys = beluga.hash_chain(tokens, 16)     # 16 bytes per full block
        offs = pool.alloc(2)                     # array('Q') of block offsets
        m = pool.map()                           # buffer over the whole pool
        m.block(offs[0])[:5] = b"hello"          # zero-copy block views
        res = pool.publish(ns, offs, keys[:32])  # PublishResult per item
        hits, pinned = pool.lookup(ns, keys, pin=True)
        print(bytes(m.block(pinned[0])[:5]))     # b'hello'
        pool.release(pinned)

(tests/python/host/test_binding.py::test_quick_start runs this.)

Keys are buffers of 16-byte struct beluga_key {lo, hi} (little-endian);
offsets are buffers of uint64 (or lists of ints). Errors are beluga.Error
(an OSError) and its subclasses, with a message naming the cause and fix.

GPUs on a shared pool: PoolMap.cuda_register() declares the pool's device
range first (Pool.device_range(); beluga-watchdogd must run on the host).
When Pool.device_eventfd becomes readable (Pool.device_fenced()), the host
fenced itself: cuda_unregister(), close the map and the pool within
Pool.device_fence_ms milliseconds, or the host's watchdog resets it.
"""

from ._beluga import (  # noqa: F401  (re-exported API)
    ABI_VERSION,
    BACKEND_DAX,
    BACKEND_NODE,
    BLOCK_SIZE_DEFAULT,
    BLOCK_SIZE_MAX,
    BLOCK_SIZE_MIN,
    DAX_ALIGN,
    DEVICE_PATH,
    FAKE_KERNEL,
    LIBBELUGA_VERSION,
    LIBBELUGA_VERSION_MAJOR,
    LIBBELUGA_VERSION_MINOR,
    LOOKUP_PIN,
    MAX_BATCH,
    MAX_REGIONS,
    NAME_LEN,
    PUBLISH_EXISTS,
    PUBLISH_OK,
    AbiMismatch,
    Busy,
    Error,
    Exists,
    InvalidArgument,
    NoCuda,
    NoRegion,
    NoSpace,
    NotBeluga,
    NotFound,
    PermissionDenied,
    Pool,
    PoolMap,
    PublishResult,
    ReadOnly,
    flush_range,
    fnv1a_128,
    hash_block,
    hash_chain,
    invalidate_range,
    strerror,
)

# The project's VERSION file, through libbeluga's generated header.
__version__ = LIBBELUGA_VERSION

__all__ = [
    "ABI_VERSION", "BACKEND_DAX", "BACKEND_NODE", "BLOCK_SIZE_DEFAULT",
    "BLOCK_SIZE_MAX", "BLOCK_SIZE_MIN", "DAX_ALIGN", "DEVICE_PATH", "FAKE_KERNEL",
    "LIBBELUGA_VERSION", "LIBBELUGA_VERSION_MAJOR", "LIBBELUGA_VERSION_MINOR", "LOOKUP_PIN",
    "MAX_BATCH", "MAX_REGIONS", "NAME_LEN", "PUBLISH_EXISTS", "PUBLISH_OK",
    "AbiMismatch", "Busy", "Error", "Exists", "InvalidArgument", "NoCuda",
    "NoRegion", "NoSpace", "NotBeluga", "NotFound", "PermissionDenied",
    "Pool", "PoolMap", "PublishResult", "ReadOnly",
    "flush_range", "fnv1a_128", "hash_block", "hash_chain", "invalidate_range",
    "strerror",
]
