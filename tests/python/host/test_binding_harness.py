# SPDX-License-Identifier: GPL-2.0
"""The test harness itself: the leak check fails a leaking test, the TAP
writer reports every outcome, and an empty run is a failure."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import beluga

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_leak_check_catches_allocations_and_pins(device, unique_ns, leak_check):
    # The class behind the fixture (`import conftest` may find another conftest).
    LeakCheck = type(leak_check)

    with beluga.Pool(device) as p:
        lc = LeakCheck(device, allowed=False)
        offs = p.alloc(1)
        with pytest.raises(AssertionError, match="left blocks behind"):
            lc.check()
        p.publish(unique_ns, offs, b"q" * 16)
        lc = LeakCheck(device, allowed=False)
        hits, pinned = p.lookup(unique_ns, b"q" * 16, pin=True)
        with pytest.raises(AssertionError, match=r"release\(\) what lookup"):
            lc.check()
        p.release(pinned)
        lc = LeakCheck(device, allowed=False)
        p.evict_ns(unique_ns)
        lc.check()


def run_pytest(tmp_path, body):
    """Run pytest on one test file next to a copy of our conftest."""
    d = tmp_path / "suite"
    d.mkdir()
    (d / "conftest.py").write_text((REPO / "tests" / "python" / "conftest.py").read_text())
    (d / "test_sample.py").write_text(textwrap.dedent(body))
    tap = tmp_path / "out.tap"
    pkg_dir = str(pathlib.Path(beluga.__file__).resolve().parents[1])
    env = dict(os.environ, BELUGA_PYTEST_TAP=str(tap), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=pkg_dir)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(d), str(d)], env=env, capture_output=True,
                       text=True, timeout=120, cwd=str(d))
    return r.returncode, tap.read_text() if tap.exists() else ""


def test_tap_lines_for_every_outcome(tmp_path):
    rc, tap = run_pytest(tmp_path, """
        import pytest
        def test_pass(): pass
        def test_fail(): assert 0
        def test_skip(): pytest.skip("no widget here")
        @pytest.mark.xfail(reason="known bug")
        def test_xfail(): assert 0
        @pytest.fixture
        def broken():
            yield
            raise RuntimeError("teardown")
        def test_teardown_error(broken): pass
        @pytest.mark.real_only("two processes")
        def test_real(): pass
    """)
    lines = tap.splitlines()
    assert rc == 1
    assert lines[-1] == "1..6"
    assert any(ln.startswith("ok ") and ln.endswith("::test_pass") for ln in lines)
    assert any(ln.startswith("not ok ") and ln.endswith("::test_fail") for ln in lines)
    assert any(ln.startswith("ok ") and "::test_skip # SKIP no widget here" in ln
               for ln in lines)
    assert any(ln.startswith("not ok ") and "::test_xfail # TODO" in ln for ln in lines)
    assert any(ln.startswith("not ok ") and ln.endswith("::test_teardown_error")
               for ln in lines)
    real = [ln for ln in lines if "::test_real" in ln]
    if beluga.FAKE_KERNEL:
        assert real[0].startswith("ok ")
        assert "# SKIP needs the real module (two processes)" in real[0]


def test_collection_error_is_a_failure(tmp_path):
    rc, tap = run_pytest(tmp_path, "import no_such_module_here\n")
    assert rc != 0
    assert any(ln.startswith("not ok ") and "collecting" in ln for ln in tap.splitlines())


def test_empty_run_fails(tmp_path):
    rc, tap = run_pytest(tmp_path, "x = 1\n")
    assert rc == 5 and tap.splitlines() == ["1..0"]
