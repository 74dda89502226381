# SPDX-License-Identifier: LGPL-2.1-or-later
"""Engine adapters over beluga.store.KVStore.

Each module implements one engine's interface as recorded in
shared/reviews/engines.md and imports nothing from the engine until a class
is built from it; where the engine is importable the adapter subclasses its
real base class.  Each adapter is tested against its engine itself
(tests/engines: vllm/, test_sglang.py, test_lmcache.py) and against recorded
call sequences (tests/python/harness).
"""

import importlib


def engine_module(name):
    """The engine's module, or None when that engine is not installed."""
    try:
        return importlib.import_module(name)
    except Exception:       # not installed, or broken without a GPU
        return None
