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
