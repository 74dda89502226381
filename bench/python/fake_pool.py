# SPDX-License-Identifier: GPL-2.0
"""The host's fake kernel for the Python benchmarks' --fake runs (a smoke
check of the bench, never the figure): the binding's fake build, and
liblookup64-fake.so, read these variables once, when they load."""

import atexit
import os
import shutil
import tempfile


def use_fake_kernel(regions, block_size):
    """Set up the fake kernel before beluga (or the C side) loads: a fresh
    file to open as its device (removed at exit), with @regions (e.g.
    "dax0.0:64M") and @block_size bytes per block. Returns the device path."""
    d = tempfile.mkdtemp(prefix="beluga-fake-")
    atexit.register(shutil.rmtree, d, True)
    path = os.path.join(d, "beluga")
    open(path, "w").close()
    os.environ.update(BELUGA_FAKE_KERNEL="1", BELUGA_FAKE_REGIONS=regions,
                      BELUGA_FAKE_BLOCK_SIZE=str(block_size), BELUGA_DEVICE=path)
    return path


def use_fake_shared_pool(path, length, host_id, hosts, block_size, lease_ms=0):
    """As use_fake_kernel(), but the fake kernel joins the multi-host pool in
    the file @path (@length bytes; tests/userspace/fake_mh.c) as host
    @host_id, as the module joins one in a CXL range: processes that name
    the same file share the pool as hosts do. A host that formats it makes
    room for @hosts hosts (one partition each) with a lease of @lease_ms
    (0: the module's default). Returns the device path."""
    d = tempfile.mkdtemp(prefix="beluga-fake-")
    atexit.register(shutil.rmtree, d, True)
    dev = os.path.join(d, "beluga")
    open(dev, "w").close()
    os.environ.pop("BELUGA_FAKE_REGIONS", None)
    os.environ.update(BELUGA_FAKE_KERNEL="1", BELUGA_FAKE_CXL=f"{path}:{length}",
                      BELUGA_FAKE_HOST_ID=str(host_id), BELUGA_FAKE_CXL_HOSTS=str(hosts),
                      BELUGA_FAKE_CXL_LEASE_MS=str(lease_ms),
                      BELUGA_FAKE_BLOCK_SIZE=str(block_size), BELUGA_DEVICE=dev)
    return dev
