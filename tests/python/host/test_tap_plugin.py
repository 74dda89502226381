"""tests/python/tap_plugin.py: what make test counts is what pytest saw.

Each case runs pytest in a child process on a small generated test file, with
the plugin loaded the way scripts/vm/guest-python.sh loads it, and compares the
TAP lines it wrote.
"""

import os
import subprocess
import sys
import textwrap

PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SAMPLE = '''
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 + 1 == 3, "arithmetic # broke"

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
    env = dict(os.environ, PYTHONPATH=PLUGIN_DIR, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tap_plugin", "--tap", str(tap),
         "-p", "no:cacheprovider", "-q", "-c", str(tmp_path / "pytest.ini"),
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=300)
    return proc.returncode, tap.read_text().splitlines(), proc.stdout


def results(lines):
    return [line for line in lines if not line.startswith("#")]


def test_each_outcome_is_one_tap_line(tmp_path):
    rc, lines, out = run_pytest(tmp_path, {"test_sample.py": SAMPLE})
    assert rc == 1, out
    f = "test_sample.py::"
    assert results(lines) == [
        "ok - " + f + "test_passes",
        "not ok - " + f + "test_fails",
        "ok - " + f + "test_skipped # SKIP not on this machine",
        "ok - " + f + "test_skips_inside # SKIP decided at run time",
        "not ok - " + f + "test_known_bug # TODO xfail: known bug 7",
        "not ok - " + f + "test_strict_xpass",
        "not ok - " + f + "test_setup_error",
        "not ok - " + f + "test_teardown_error",
        "ok - " + f + "test_param[a%23b]",
    ], out
    text = "\n".join(lines)
    # the failure's detail follows its result as comments
    assert "# E       AssertionError: arithmetic # broke" in text
    assert "# error in setup" in text and "setup broke" in text
    assert "# error in teardown" in text and "teardown broke" in text
    assert lines[-1] == "# tap_plugin: pytest exit status 1"


def test_no_tests_collected_is_a_failure(tmp_path):
    rc, lines, out = run_pytest(tmp_path, {"test_empty.py": "x = 1\n"})
    assert rc == 5, out
    assert results(lines) == ["not ok - pytest:exit-status-5"]
    assert "# pytest exited with status 5: no tests were collected" in lines


def test_collection_error_is_a_failure(tmp_path):
    rc, lines, out = run_pytest(tmp_path, {
        "test_broken.py": "import no_such_module_here\n",
        "test_fine.py": "def test_fine():\n    pass\n",
    })
    assert rc == 2, out
    assert results(lines) == [
        "not ok - collect:test_broken.py",
        "not ok - pytest:exit-status-2",
    ], out
    assert any("no_such_module_here" in line for line in lines)
