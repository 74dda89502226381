"""Fixtures of the multi-process tests: they need the real module.

Engine processes share blocks through the kernel; the fake kernel of the host
tests lives inside one process, so on that backend every test here is skipped
with the reason. make test runs them in the 6.12 guest (BELUGA_TEST_REAL=1,
scripts/vm/guest-python.sh).
"""

import multiprocessing

import pytest

import beluga


@pytest.fixture
def real_pool(backend):
    """A writable Pool of this process on the real device ($BELUGA_DEVICE)."""
    if backend != "real":
        pytest.skip("needs the real module: engine processes share blocks through the "
                    "kernel, and the fake kernel lives inside one process "
                    "(make test runs this in the 6.12 guest, BELUGA_TEST_REAL=1)")
    with beluga.Pool() as pool:
        if pool.block_size == 0:
            pytest.fail("no region is attached to %s: attach one first "
                        "(belugactl attach /dev/daxX.Y --block-size 64K)" % pool.path)
        yield pool


@pytest.fixture
def mp():
    """multiprocessing with fork: a child starts in milliseconds, where spawn
    would import Python and the tests again (seconds under TCG). Each engine
    process opens the device itself, so that it owns its allocations and pins
    (a forked child shares its parent's open file description)."""
    return multiprocessing.get_context("fork")
