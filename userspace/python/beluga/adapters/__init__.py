# SPDX-License-Identifier: LGPL-2.1-or-later
"""Engine adapters over beluga.store.KVStore.

Each module implements one engine's interface as recorded in
shared/reviews/engines.md and imports nothing from the engine until a class
is built from it; where the engine is importable the adapter subclasses its
real base class.  They are checked against recorded call sequences
(tests/python/harness), not against running engines.
"""

import importlib


def engine_module(name):
    """The engine's module, or None when that engine is not installed."""
    try:
        return importlib.import_module(name)
    except Exception:       # not installed, or broken without a GPU
        return None


def model_spec_from(config, **defaults):
    """A ModelSpec from a dict of an engine's extra configuration:
    model, revision, num_layers, num_kv_heads, head_dim, dtype,
    tokens_per_block, tp_rank, tp_size, latent_dim.  ``defaults`` fill in
    what the engine told the adapter itself."""
    from beluga.layout import ModelSpec
    fields = ("model", "revision", "num_layers", "num_kv_heads", "head_dim", "dtype",
              "tokens_per_block", "tp_rank", "tp_size", "latent_dim")
    merged = dict(defaults)
    merged.update({k: config[k] for k in fields if k in config})
    missing = [k for k in ("model", "num_layers", "head_dim") if k not in merged]
    if "latent_dim" not in merged and "num_kv_heads" not in merged:
        missing.append("num_kv_heads")
    if missing and not merged.get("latent_dim"):
        raise ValueError(f"the beluga adapter needs {missing} in its extra config "
                         f"(model geometry decides the block layout and namespace)")
    if merged.get("latent_dim"):
        merged.setdefault("num_kv_heads", 1)
        merged.setdefault("head_dim", 1)
    return ModelSpec(**merged)
