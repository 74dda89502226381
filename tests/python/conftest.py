# SPDX-License-Identifier: GPL-2.0
"""Fixtures shared by every Python test of Beluga.

Backends
    fake  (default, on the host): the binding's fake build
          (userspace/build/python-fake), whose libbeluga talks to
          tests/userspace/fake_kernel.c in process. Each test gets a fresh
          fake pool (_fake_reset) backed by a regular file in tmp_path.
    real  (BELUGA_TEST_REAL=1, in the guests): the real build against
          $BELUGA_DEVICE (default /dev/beluga), used as it is: published
          blocks stay across tests, so tests use `unique_ns`.

Block size
    BELUGA_TEST_BLOCK_SIZE (bytes, or 4K, 64K, 2M, ...; default 64K) is the
    pool block size the tests run at: the fake pool's default geometry
    (a dax0.0 region of max(16 MiB, 64 blocks)), and on the real backend
    the size scripts/vm/guest-python.sh attaches the region with (run-guest.sh
    passes it to the guest on the kernel command line). The tests must pass
    at any block size their layouts are valid for: they take the size from
    `pool.block_size`, never assume 64 KiB.

Fixtures
    backend     "fake" or "real"
    device      the device path the test's pools open (BELUGA_DEVICE is set)
    pool        a writable beluga.Pool with at least 64 blocks (of
                BELUGA_TEST_BLOCK_SIZE bytes on the real backend when set:
                a pool with other blocks fails the test's setup)
    pool_ro     a read-only beluga.Pool on the same pool
    unique_ns   a fresh random 64-bit namespace
    leak_check  fails the test if it leaves allocated blocks or pins behind
                (`pool` uses it: checked before `pool` is closed)

Markers
    @pytest.mark.fake_pool(block_size=..., regions="dax0.0:16M,...", max_batch=...)
                geometry of the fake pool (ignored on the real backend)
    @pytest.mark.real_only("why")   needs the real module (several processes,
                the fake is one client per process): skipped on the fake
    @pytest.mark.allow_leaks        the test leaves allocations/pins on purpose

TAP: with BELUGA_PYTEST_TAP=FILE, every test's outcome is also written to
FILE as a TAP line (ok / not ok / # SKIP reason / # TODO for xfail), so that
`make test` counts pytest's results with everything else.
"""

import importlib.util
import os
import pathlib
import secrets
import sys

import pytest

sys.dont_write_bytecode = True

REPO = pathlib.Path(__file__).resolve().parents[2]
BACKEND = "real" if os.environ.get("BELUGA_TEST_REAL") == "1" else "fake"

if BACKEND == "fake":
    # The fake build installs the fake kernel at import when this is set.
    os.environ["BELUGA_FAKE_KERNEL"] = "1"
if importlib.util.find_spec("beluga") is None:
    sys.path.insert(0, str(REPO / "userspace" / "build" /
                           ("python-fake" if BACKEND == "fake" else "python")))

try:
    import beluga
    from beluga import _beluga
except ImportError as exc:  # pragma: no cover - environment problem
    raise pytest.UsageError(
        f"cannot import the beluga binding ({exc}): build it with "
        "`make -C userspace python` or put it on PYTHONPATH") from exc

if BACKEND == "fake" and not beluga.FAKE_KERNEL:
    raise pytest.UsageError(
        f"the fake backend needs the fake build, but {beluga.__file__} is the real one: "
        "put userspace/build/python-fake on PYTHONPATH (make -C userspace python-check), "
        "or set BELUGA_TEST_REAL=1 to test against /dev/beluga")
if BACKEND == "real" and beluga.FAKE_KERNEL:
    raise pytest.UsageError(
        f"BELUGA_TEST_REAL=1 but {beluga.__file__} is the fake build: "
        "put userspace/build/python on PYTHONPATH")

try:
    from hypothesis import settings as _hyp_settings

    # No example database in the source tree; the same examples every run.
    _hyp_settings.register_profile("beluga", database=None, derandomize=True,
                                   deadline=None)
    _hyp_settings.load_profile("beluga")
except ImportError:  # pragma: no cover - hypothesis is in install-deps.sh
    pass

def _test_block_size():
    """BELUGA_TEST_BLOCK_SIZE (bytes, or with a K/M/G suffix), 64 KiB unset."""
    text = os.environ.get("BELUGA_TEST_BLOCK_SIZE", "").strip()
    if not text:
        return 65536
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1].upper(), 1)
    try:
        size = int(text[:-1] if scale != 1 else text, 0) * scale
    except ValueError:
        size = 0
    if size <= 0 or size & (size - 1):
        raise pytest.UsageError(
            f"BELUGA_TEST_BLOCK_SIZE={text!r} is not a power of two of bytes "
            "(e.g. 4096, 64K, 2M)")
    return size


TEST_BLOCK_SIZE = _test_block_size()
# At least 64 blocks (the `pool` fixture's minimum) at any block size.
FAKE_DEFAULT = {"block_size": TEST_BLOCK_SIZE,
                "regions": f"dax0.0:{max(16, 64 * TEST_BLOCK_SIZE >> 20)}M",
                "max_batch": beluga.MAX_BATCH}


def pytest_configure(config):
    config.addinivalue_line("markers", "fake_pool(**geometry): the fake pool's geometry")
    config.addinivalue_line("markers", "real_only(reason): needs the real module")
    config.addinivalue_line("markers", "allow_leaks: leaves allocations or pins on purpose")
    path = os.environ.get("BELUGA_PYTEST_TAP")
    if path:
        config.pluginmanager.register(_TapWriter(path), "beluga-tap")


def pytest_runtest_setup(item):
    mark = item.get_closest_marker("real_only")
    if mark is not None and BACKEND == "fake":
        reason = mark.args[0] if mark.args else mark.kwargs.get("reason", "")
        pytest.skip(f"needs the real module ({reason or 'see the test'}); "
                    "the fake kernel is one client in one process: runs in the guest")


@pytest.fixture(scope="session")
def backend():
    return BACKEND


@pytest.fixture
def device(request, tmp_path, monkeypatch):
    if BACKEND == "real":
        path = os.environ.get("BELUGA_DEVICE") or beluga.DEVICE_PATH
        monkeypatch.setenv("BELUGA_DEVICE", path)
        return path
    geometry = dict(FAKE_DEFAULT)
    mark = request.node.get_closest_marker("fake_pool")
    if mark is not None:
        geometry.update(mark.kwargs)
    path = tmp_path / "beluga-dev"
    path.touch()
    monkeypatch.setenv("BELUGA_DEVICE", str(path))
    _beluga._fake_reset(**geometry)
    return str(path)


class LeakCheck:
    """Allocated blocks and pins must be back at their level before the test."""

    def __init__(self, device, allowed):
        self.device = device
        self.allowed = allowed
        self.done = False
        self.before = self._counts()

    def _counts(self):
        with beluga.Pool(self.device, writable=False) as p:
            s = p.stats()
        return s["allocated_blocks"], s["pins"]

    def check(self):
        if self.done or self.allowed:
            return
        self.done = True
        after = self._counts()
        assert after == self.before, (
            f"the test left blocks behind: (allocated, pins) went from {self.before} "
            f"to {after}: free() what alloc() gave and release() what lookup(pin=True) "
            "pinned")


@pytest.fixture
def leak_check(request, device):
    lc = LeakCheck(device, request.node.get_closest_marker("allow_leaks") is not None)
    yield lc
    lc.check()


@pytest.fixture
def pool(device, leak_check):
    p = beluga.Pool(device)
    if (BACKEND == "real" and "BELUGA_TEST_BLOCK_SIZE" in os.environ
            and p.block_size != TEST_BLOCK_SIZE):
        p.close()
        pytest.fail(f"{device} has {p.block_size}-byte blocks but BELUGA_TEST_BLOCK_SIZE "
                    f"asks for {TEST_BLOCK_SIZE}: attach the region with --block-size "
                    f"{TEST_BLOCK_SIZE} or unset BELUGA_TEST_BLOCK_SIZE")
    if BACKEND == "real" and p.stats()["total_blocks"] < 64:
        p.close()
        pytest.skip(f"{device} has fewer than 64 blocks: attach more memory")
    yield p
    try:
        if not p.closed:
            leak_check.check()
    finally:
        if not p.closed:
            p.close()


@pytest.fixture
def pool_ro(pool, device):
    p = beluga.Pool(device, writable=False)
    yield p
    p.close()


@pytest.fixture
def unique_ns():
    return secrets.randbits(64)


class _TapWriter:
    """One TAP line per test: setup, call and teardown folded into one result."""

    def __init__(self, path):
        self.out = open(path, "w", encoding="utf-8")
        self.n = 0
        self.state = {}

    @staticmethod
    def _name(nodeid):
        return nodeid.replace("#", "_").replace("\n", " ")

    def _emit(self, ok, name, directive=""):
        self.n += 1
        self.out.write(f"{'' if ok else 'not '}ok {self.n} - {self._name(name)}{directive}\n")
        self.out.flush()

    @staticmethod
    def _reason(report):
        lr = report.longrepr
        if isinstance(lr, tuple) and len(lr) == 3:
            reason = str(lr[2])
        else:
            reason = getattr(report, "wasxfail", "") or str(lr or "")
        reason = reason.removeprefix("Skipped: ").strip().replace("\n", " ")
        return reason or "no reason given"

    def pytest_runtest_logreport(self, report):
        st = self.state.setdefault(report.nodeid, {"failed": False, "skip": None,
                                                   "xfail": None})
        if report.failed:
            st["failed"] = True
        elif report.skipped:
            if hasattr(report, "wasxfail"):
                st["xfail"] = self._reason(report)
            else:
                st["skip"] = self._reason(report)

    def pytest_runtest_logfinish(self, nodeid, location):
        st = self.state.pop(nodeid, None)
        if st is None:
            return
        if st["failed"]:
            self._emit(False, nodeid)
        elif st["xfail"] is not None:
            self._emit(False, nodeid, f" # TODO expected failure: {st['xfail']}")
        elif st["skip"] is not None:
            self._emit(True, nodeid, f" # SKIP {st['skip']}")
        else:
            self._emit(True, nodeid)

    def pytest_collectreport(self, report):
        if report.failed:
            self._emit(False, f"collecting {report.nodeid or 'tests'}")

    def pytest_unconfigure(self, config):
        self.out.write(f"1..{self.n}\n")
        self.out.close()
