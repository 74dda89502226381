"""conftest.py's TAP writer: what make test counts is what pytest saw.

make test counts the in-guest pytest run through the TAP lines that
tests/python/conftest.py writes to $BELUGA_PYTEST_TAP (scripts/vm/guest-python.sh).
Each case runs pytest in a child process on a small generated test file, with
that conftest loaded as a plugin, and compares the lines it wrote.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

TESTS_PYTHON = pathlib.Path(__file__).resolve().parents[1]

SAMPLE = '''
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 + 1 == 3

@pytest.mark.skip(reason="not on this machine")
def test_skipped():
    pass

def test_skips_inside():
    pytest.skip("decided at run time")

@pytest.mark.xfail(reason="known bug 7")
def test_known_bug():
    assert False

@pytest.mark.xfail(reason="fixed already", strict=True)
def test_strict_xpass():
    pass

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

def test_setup_error(broken_setup):
    pass

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_teardown_error(broken_teardown):
    pass

@pytest.mark.parametrize("x", ["a#b"])
def test_param(x):
    pass
'''


def run_pytest(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    tap = tmp_path / "out.tap"
    env = dict(os.environ, BELUGA_PYTEST_TAP=str(tap), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([str(TESTS_PYTHON)] + sys.path))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=300)
    return proc.returncode, tap.read_text().splitlines(), proc.stdout


def test_each_outcome_is_one_tap_line(tmp_path):
    rc, lines, out = run_pytest(tmp_path, {"test_sample.py": SAMPLE})
    assert rc == 1, out
    f = "test_sample.py::"
    assert lines == [
        "ok 1 - " + f + "test_passes",
        "not ok 2 - " + f + "test_fails",
        "ok 3 - " + f + "test_skipped # SKIP not on this machine",
        "ok 4 - " + f + "test_skips_inside # SKIP decided at run time",
        "not ok 5 - " + f + "test_known_bug # TODO expected failure: known bug 7",
        "not ok 6 - " + f + "test_strict_xpass",
        "not ok 7 - " + f + "test_setup_error",
        "not ok 8 - " + f + "test_teardown_error",
        "ok 9 - " + f + "test_param[a_b]",
        "1..9",
    ], out


def test_collection_error_is_a_failure(tmp_path):
    rc, lines, out = run_pytest(tmp_path, {
        "test_broken.py": "import no_such_module_here\n",
        "test_fine.py": "def test_fine():\n    pass\n",
    })
    assert rc == 2, out
    assert lines == ["not ok 1 - collecting test_broken.py", "1..1"], out


def test_nothing_collected_writes_an_empty_plan(tmp_path):
    # guest-python.sh fails pytest's status 5 itself; the plan says pytest finished
    rc, lines, out = run_pytest(tmp_path, {"test_empty.py": "x = 1\n"})
    assert rc == 5, out
    assert lines == ["1..0"], out
