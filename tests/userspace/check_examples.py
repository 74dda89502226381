#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""The engine configurations of examples/ (vllm/, lmcache/, sglang/), without
the engines: each file parses, names a module and class of the beluga
package that import (from the build given on PYTHONPATH), and holds the
configuration userspace/python/README.md documents, which the engine lane
runs against the engines themselves (tests/engines). One line per check:
"PASS<TAB>name" or "FAIL<TAB>name<TAB>why"; test_examples.sh makes it TAP.

Usage: check_examples.py REPO_ROOT   (PYTHONPATH: userspace/build/python-fake)
"""
import importlib
import json
import pathlib
import re
import shlex
import sys

import yaml

root = pathlib.Path(sys.argv[1])
ex = root / "examples"
readme = (root / "userspace/python/README.md").read_text()


def report(name, why):
    print(f"PASS\t{name}" if not why else f"FAIL\t{name}\t{why}")


def section(title):
    """The text of the package README's '### TITLE' section."""
    return readme.split(f"### {title}", 1)[1].split("\n### ", 1)[0]


def code_block(title):
    m = re.search(r"```\n(.*?)```", section(title), re.S)
    return m.group(1) if m else ""


def names_a_class(module, cls):
    """'' when beluga's MODULE imports and has the class CLS, else why not."""
    if not str(module).startswith("beluga."):
        return f"{module!r} is not a module of the beluga package"
    try:
        mod = importlib.import_module(module)
    except Exception as e:
        return f"import {module}: {type(e).__name__}: {e}"
    try:
        found = getattr(mod, str(cls), None)
    except ImportError:
        # a class built lazily on the engine's base class (vllm.py's
        # __getattr__): the name is one of the module's, the engine is absent
        lazy = getattr(mod, "_PUBLIC", {})
        found = lazy[cls][0] if cls in lazy else None
    if not isinstance(found, type):
        return f"{module} has no class {cls!r}"
    return ""


def check(name, fn):
    """Report FN's verdict; a file that is missing or does not parse fails the check."""
    try:
        report(name, fn())
    except Exception as e:  # a malformed file: the check fails, naming why
        report(name, f"{type(e).__name__}: {e}")


# ---- vLLM --------------------------------------------------------------------
def vllm_config():
    cfg = json.loads((ex / "vllm/kv-transfer-config.json").read_text())
    m = re.search(r"--kv-transfer-config '(\{.*?\})'", section("vLLM"), re.S)
    if not m:
        return "userspace/python/README.md's vLLM section has no --kv-transfer-config"
    if cfg != json.loads(m.group(1)):
        return "differs from the --kv-transfer-config of userspace/python/README.md (the engine lane's)"
    if cfg.get("kv_connector") != "OffloadingConnector":
        return f"kv_connector is {cfg.get('kv_connector')!r}, not vLLM's OffloadingConnector"
    extra = cfg["kv_connector_extra_config"]
    return names_a_class(extra.get("spec_module_path"), extra.get("spec_name"))


check("vllm/kv-transfer-config.json: parses, is the documented config, names "
      "beluga.adapters.vllm.BelugaOffloadingSpec", vllm_config)


# ---- LMCache -----------------------------------------------------------------
def lmcache_config():
    cfg = yaml.safe_load((ex / "lmcache/lmcache.yaml").read_text())
    documented = yaml.safe_load(code_block("LMCache (storage plugin)"))
    for k, v in documented.items():
        if k == "extra_config":
            for ek, ev in v.items():
                if cfg.get("extra_config", {}).get(ek) != ev:
                    return f"extra_config.{ek} is not {ev!r} as userspace/python/README.md documents"
        elif cfg.get(k) != v:
            return f"{k} is not {v!r} as userspace/python/README.md documents"
    if cfg.get("local_cpu") is not True:
        return "local_cpu must be true: the plugin allocates through LMCache's LocalCPUBackend"
    for k in ("chunk_size", "max_local_cpu_size"):
        if not isinstance(cfg.get(k), (int, float)) or cfg[k] <= 0:
            return f"{k} must be a positive number, is {cfg.get(k)!r}"
    extra = cfg["extra_config"]
    return names_a_class(extra.get("storage_plugin.beluga.module_path"),
                         extra.get("storage_plugin.beluga.class_name"))


check("lmcache/lmcache.yaml: parses, holds the documented plugin config and a CPU backend, names "
      "beluga.adapters.lmcache.BelugaStoragePlugin", lmcache_config)


def lmcache_vllm():
    cfg = json.loads((ex / "lmcache/kv-transfer-config.json").read_text())
    # vLLM 0.33.0's connector factory registers LMCache's connector by this name
    if cfg != {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}:
        return f"{cfg} is not vLLM's LMCacheConnectorV1 in role kv_both"
    return ""


check("lmcache/kv-transfer-config.json: parses, vLLM's LMCacheConnectorV1", lmcache_vllm)


# ---- SGLang ------------------------------------------------------------------
def flags(words):
    """--flag -> value (or True) of a command line's words."""
    out, i = {}, 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            val = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
            out[w] = val
            i += 1 if val is True else 2
        else:
            i += 1
    return out


def sglang_config():
    cfg = json.loads((ex / "sglang/hicache-extra-config.json").read_text())
    documented = flags(shlex.split(code_block("SGLang (HiCache storage backend)")))
    if cfg != json.loads(documented.get("--hicache-storage-backend-extra-config", "null")):
        return "differs from the --hicache-storage-backend-extra-config of userspace/python/README.md"
    script = (ex / "sglang/launch.sh").read_text().replace("\\\n", " ")
    line = next((ln for ln in script.splitlines() if "sglang.launch_server" in ln), "")
    have = flags(shlex.split(line, comments=True))
    for k, v in documented.items():
        if k == "--hicache-storage-backend-extra-config":
            if "hicache-extra-config.json" not in str(have.get(k)):
                return f"launch.sh does not pass hicache-extra-config.json as {k}"
        elif have.get(k) != v:
            return f"launch.sh passes {k} {have.get(k)!r}, userspace/python/README.md {v!r}"
    return names_a_class(cfg.get("module_path"), cfg.get("class_name"))


check("sglang: hicache-extra-config.json parses and is the documented config, launch.sh passes the "
      "documented flags, names beluga.adapters.sglang.BelugaHiCacheStorage", sglang_config)
