"""Fixtures of the multi-process tests (tests/python/conftest.py has the rest).

Every test here is marked real_only: engine processes share blocks through the
kernel, and the fake kernel lives inside one process. make test runs them in
the 6.12 guest (BELUGA_TEST_REAL=1, scripts/vm/guest-python.sh).
"""

import multiprocessing

import pytest


@pytest.fixture
def mp():
    """multiprocessing with fork: a child starts in milliseconds, where spawn
    would import Python and the tests again (seconds under TCG). Each engine
    process opens the device itself, so that it owns its allocations and pins
    (a forked child shares its parent's open file description)."""
    return multiprocessing.get_context("fork")
