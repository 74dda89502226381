# SPDX-License-Identifier: GPL-2.0
"""Fixtures of the vLLM lane: run with build/venv-vllm's python and
PYTHONPATH=userspace/build/python-fake (as tests/userspace/test_python.sh
does), so that the working tree's build, not a copy installed in the venv,
is the code under test.

The pool fixtures are tests/python's (`device`, `pool`, `leak_check`, the
fake kernel on the host, the real module with BELUGA_TEST_REAL=1, TAP with
BELUGA_PYTEST_TAP): tests/engines/conftest.py loads them where it exists,
else this file does.

`engine(**config)` builds a vLLM instance (rig.Engine) from the README's
kv_transfer_config on the test's pool; every engine is shut down at the end
of the test, before the leak check.
"""

import importlib.util
import os
import pathlib
import re
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
_REAL = os.environ.get("BELUGA_TEST_REAL") == "1"
sys.path.insert(0, str(REPO / "userspace" / "build" / ("python" if _REAL else "python-fake")))
sys.path.insert(0, str(pathlib.Path(__file__).parent))

# tests/engines/conftest.py, where there is one, brings the same fixtures and
# hooks (twice would register the TAP writer twice).
if not (pathlib.Path(__file__).resolve().parents[1] / "conftest.py").exists():
    _spec = importlib.util.spec_from_file_location("beluga_pool_fixtures",
                                                   REPO / "tests" / "python" / "conftest.py")
    _fixtures = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_fixtures)
    backend = _fixtures.backend
    device = _fixtures.device
    leak_check = _fixtures.leak_check
    pool = _fixtures.pool
    pytest_configure = _fixtures.pytest_configure
    pytest_runtest_setup = _fixtures.pytest_runtest_setup

import rig  # noqa: E402  (imports vLLM: after the paths are set)

README = REPO / "userspace" / "python" / "README.md"


def readme_kv_transfer_config():
    """The --kv-transfer-config JSON of the README's vLLM section."""
    text = README.read_text()
    section = text.split("### vLLM", 1)[1].split("\n### ", 1)[0]
    m = re.search(r"--kv-transfer-config '(\{.*?\})'", section, re.S)
    assert m, f"{README}: the vLLM section has no --kv-transfer-config '...' line"
    import json
    return json.loads(m.group(1))


@pytest.fixture
def kv_transfer_config(device):
    """The README's configuration, on the test's pool."""
    cfg = readme_kv_transfer_config()
    extra = cfg["kv_connector_extra_config"]
    assert extra.get("beluga_path") == "/dev/beluga", "the README's beluga_path changed"
    extra["beluga_path"] = device
    return cfg


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return rig.write_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def mla_model_dir(tmp_path_factory):
    return rig.write_model(tmp_path_factory.mktemp("tiny-deepseek"), **rig.TINY_DEEPSEEK_MLA)


@pytest.fixture
def engine(request, kv_transfer_config, model_dir, mla_model_dir, pool):
    """engine(extra={...}, mla=False, **rig.Engine options) -> a running
    vLLM instance of the tiny Llama (or, with mla, the tiny DeepSeek)."""
    made = []

    def make(extra=None, mla=False, **config):
        cfg = rig.with_extra(kv_transfer_config, **(extra or {}))
        e = rig.Engine(mla_model_dir if mla else model_dir, cfg, **config)
        made.append(e)
        return e

    yield make
    for e in made:
        e.shutdown()
