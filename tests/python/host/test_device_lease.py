# SPDX-License-Identifier: GPL-2.0
"""Device leases from Python: Pool.device_range(), the fence's eventfd,
PoolMap.cuda_register() on a shared pool (the range declared and the pool
mapped again in place first), and the vLLM adapter's _DeviceLease letting go
at the fence. The fake kernel plays the shared pool (_fake_shared: host
records, a watchdog daemon); the real one's are the guests'
(tests/multihost). CUDA is the stand-in runtime of the C tests
(tests/userspace/cudart_stub.c, built by `make -C userspace check`).
"""

import errno
import fcntl
import os
import select
import subprocess
import sys
import textwrap

import pytest

import beluga
from beluga import _beluga

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STUB = os.path.join(REPO, "userspace", "build", "check", "libcudart-stub-a.so")

fake_only = pytest.mark.skipif(not beluga.FAKE_KERNEL,
                               reason="the fake kernel's shared pool; the real one's run in "
                                      "tests/multihost")


def test_local_pool_needs_no_fence(pool):
    assert pool.device_eventfd is None and pool.device_fence_ms == 0
    assert pool.device_range() == (0, None)
    assert pool.device_eventfd is None and pool.device_fence_ms == 0
    assert pool.device_fenced() is False
    with pytest.raises(beluga.Busy, match="one per open file") as ei:
        pool.device_range(0, 4096)
    assert ei.value.errno == errno.EBUSY


def test_device_range_checks_its_arguments(pool):
    with pytest.raises(beluga.Error, match="page aligned") as ei:
        pool.device_range(100)
    assert ei.value.errno == errno.EINVAL
    with pytest.raises(beluga.Error, match="reaches past the pool's mapping") as ei:
        pool.device_range(0, pool.map_size + 4096)
    assert ei.value.errno == errno.ENXIO
    assert pool.device_eventfd is None


@fake_only
def test_shared_pool_without_the_daemon(pool):
    _beluga._fake_shared()
    with pytest.raises(beluga.Error) as ei:
        pool.device_range()
    assert ei.value.errno == errno.ENOLINK
    assert "start beluga-watchdogd" in str(ei.value) and "mh_allow_gup=1" in str(ei.value)
    assert pool.device_eventfd is None and _beluga._fake_device()["device_ranges"] == 0


@fake_only
def test_shared_pool_range_and_fence(pool):
    _beluga._fake_shared(watchdog_ms=8000)
    fence_ms, efd = pool.device_range()
    assert fence_ms == 8000 and isinstance(efd, int) and efd >= 0
    assert pool.device_eventfd == efd and pool.device_fence_ms == 8000
    assert not os.get_blocking(efd) and fcntl.fcntl(efd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    assert _beluga._fake_device()["device_ranges"] == 1
    assert pool.device_fenced() is False
    assert select.select([efd], [], [], 0)[0] == []
    assert _beluga._fake_fence() == 1
    assert select.select([efd], [], [], 0)[0] == [efd]
    assert pool.device_fenced() is True and pool.device_fenced() is True
    _beluga._fake_unfence()
    pool.close()
    assert _beluga._fake_device()["device_ranges"] == 0
    assert pool.device_eventfd is None


@fake_only
def test_shared_pool_with_a_peer_that_ignores_leases(pool):
    _beluga._fake_shared(peer="old", watchdog_ms=1000)
    with pytest.raises(beluga.Error, match="ignores device leases") as ei:
        pool.device_range()
    assert ei.value.errno == errno.EPROTO
    _beluga._fake_shared(peer="dead", watchdog_ms=1000)
    assert pool.device_range()[0] == 1000


@fake_only
def test_shared_pool_under_mh_allow_gup(pool):
    _beluga._fake_shared(allow_gup_ms=30000)
    fence_ms, efd = pool.device_range()
    assert fence_ms == 30000 and efd is not None


@fake_only
def test_fenced_host_refuses_new_ranges(pool, device):
    _beluga._fake_shared(watchdog_ms=2000)
    _beluga._fake_fence()
    with pytest.raises(beluga.Error, match="open the device again") as ei:
        pool.device_range()
    assert ei.value.errno == errno.ESTALE


@fake_only
def test_vllm_lease_lets_go_at_the_fence(pool):
    pytest.importorskip("numpy")
    from beluga.adapters.vllm import _DeviceLease
    m = pool.map()
    assert _DeviceLease.of(pool, m) is None        # not shared: no fence comes
    _beluga._fake_shared(watchdog_ms=4000)
    pool.device_range()
    lease = _DeviceLease.of(pool, m)
    assert lease is not None and lease.fence_ms == 4000
    drained = []
    assert lease.check(lambda: drained.append(1)) is False and drained == []
    _beluga._fake_fence()
    assert lease.check(lambda: drained.append(1)) is True
    assert drained == [1] and pool.closed and m.closed
    assert _beluga._fake_device()["device_ranges"] == 0
    assert lease.check(lambda: drained.append(1)) is True and drained == [1]
    assert "restart the engine" in str(lease.error("job 7"))


@fake_only
@pytest.mark.skipif(not os.path.exists(STUB),
                    reason="the stand-in CUDA runtime is built by `make -C userspace check`")
def test_cuda_register_on_a_shared_pool(tmp_path):
    """In a fresh interpreter: the CUDA runtime is loaded once per process."""
    dev = tmp_path / "beluga-dev"
    dev.touch()
    code = textwrap.dedent("""
        import errno, beluga
        from beluga import _beluga
        _beluga._fake_reset(block_size=65536, regions="dax0.0:16M")
        _beluga._fake_shared()
        p = beluga.Pool()
        m = p.map()
        base = m.address
        assert not _beluga._fake_device()["last_map_pinnable"]
        try:
            m.cuda_register()
            raise SystemExit("registered without a watchdog daemon")
        except beluga.Error as e:
            assert e.errno == errno.ENOLINK and "start beluga-watchdogd" in str(e), e
        assert not m.cuda_registered
        _beluga._fake_shared(watchdog_ms=5000)
        maps = _beluga._fake_device()["pool_maps"]
        m.cuda_register()
        d = _beluga._fake_device()
        assert m.cuda_registered and m.address == base, (m.address, base)
        assert d["pool_maps"] == maps + 1 and d["last_map"] == base, d
        assert d["last_map_pinnable"] and d["device_ranges"] == 1, d
        assert p.device_eventfd is not None and p.device_fence_ms == 5000
        assert _beluga._fake_fence() == 1 and p.device_fenced()
        m.cuda_unregister()
        p.close()
        assert _beluga._fake_device()["device_ranges"] == 0
        print("ok")
    """)
    env = dict(os.environ, BELUGA_CUDART=STUB, BELUGA_DEVICE=str(dev), BELUGA_FAKE_KERNEL="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
