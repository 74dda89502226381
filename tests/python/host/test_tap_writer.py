"""conftest.py's TAP writer: what make test counts is what pytest saw.

make test counts the in-guest pytest run through the TAP lines that
tests/python/conftest.py writes to $BELUGA_PYTEST_TAP (scripts/vm/guest-python.sh).
Each case runs pytest on a small generated test file with that writer
registered, and compares the lines it wrote.
"""

import pathlib
import textwrap

import pytest

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


def tap_writer(config):
    """The conftest's writer class, from the conftest pytest loaded (importing
    "conftest" by name could give tests/python/guest's)."""
    path = TESTS_PYTHON / "conftest.py"
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", None) and pathlib.Path(plugin.__file__) == path:
            return plugin._TapWriter
    raise AssertionError(f"pytest did not load {path}")


def run_pytest(request, tmp_path, files):
    """pytest in this process (a child interpreter costs 15 s under TCG) on
    `files`, with the writer registered as BELUGA_PYTEST_TAP would."""
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    tap = tmp_path / "out.tap"
    writer = tap_writer(request.config)(str(tap))
    # -s and no faulthandler: leave this session's capture and handler alone
    rc = pytest.main(["-q", "-s", "-p", "no:cacheprovider", "-p", "no:faulthandler",
                      "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                      str(tmp_path)], plugins=[writer])
    return int(rc), tap.read_text().splitlines()


# generated modules: names no other test uses (pytest imports them in this process)
def test_each_outcome_is_one_tap_line(request, tmp_path):
    rc, lines = run_pytest(request, tmp_path, {"test_tapw_sample.py": SAMPLE})
    assert rc == 1, lines
    f = "test_tapw_sample.py::"
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
    ]


def test_collection_error_is_a_failure(request, tmp_path):
    rc, lines = run_pytest(request, tmp_path, {
        "test_tapw_broken.py": "import no_such_module_here\n",
        "test_tapw_fine.py": "def test_fine():\n    pass\n",
    })
    assert rc == 2, lines
    assert lines == ["not ok 1 - collecting test_tapw_broken.py", "1..1"]


def test_nothing_collected_writes_an_empty_plan(request, tmp_path):
    # guest-python.sh fails pytest's status 5 itself; the plan says pytest finished
    rc, lines = run_pytest(request, tmp_path, {"test_tapw_empty.py": "x = 1\n"})
    assert rc == 5, lines
    assert lines == ["1..0"]
