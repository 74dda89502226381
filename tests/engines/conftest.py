# SPDX-License-Identifier: GPL-2.0
"""The engine tests use the fixtures of the Python tests (tests/python/conftest.py:
the fake pool on the host, the real module with BELUGA_TEST_REAL=1, the TAP
writer), loaded from there so that both suites run on the same rules."""

import importlib.util
import pathlib

_path = pathlib.Path(__file__).resolve().parents[1] / "python" / "conftest.py"
_spec = importlib.util.spec_from_file_location("beluga_python_conftest", _path)
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
globals().update({k: v for k, v in vars(_conftest).items() if not k.startswith("__")})
