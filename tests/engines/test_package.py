# SPDX-License-Identifier: GPL-2.0
"""The package as engine users install it: `pip install ./userspace/python`
into a virtual environment builds the C extensions for that environment's
Python (userspace/python/setup.py).

- A fresh venv of Debian's /usr/bin/python3 gets setuptools and numpy of the
  `model` lock (hashes checked) from the wheels scripts/engine-venv.sh
  downloaded (the machine's wheel cache, no index), then the package's fake-kernel variant
  (BELUGA_PY_FAKE=1), and runs a KVStore round trip on the fake kernel.
- The venv these tests run in has the real variant installed by
  scripts/engine-venv.sh: it imports, is the real build, and its first error
  names the cause.
"""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
LOCK = REPO / "tests" / "engines" / "model.lock"
WHEELS = pathlib.Path(os.environ.get("BELUGA_WHEELS") or
                      pathlib.Path(os.environ.get("BELUGA_CACHE", "/var/cache/beluga")) / "wheels")
DEBIAN_PYTHON = "/usr/bin/python3"
VERSION = (REPO / "VERSION").read_text().strip()

pytestmark = pytest.mark.skipif(
    os.environ.get("BELUGA_TEST_REAL") == "1",
    reason="builds with pip and gcc from the host's wheel cache: runs on the host (make test's engine lane)")


def locked(names):
    """The lock's entries for ``names``, hashes included, as requirement lines."""
    entries, cur = {}, None
    for line in LOCK.read_text().splitlines():
        text = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("--") else line.strip()
        if not text or text.startswith("#"):
            continue
        if not line[0].isspace():
            cur = text.split("==")[0].lower()
            entries[cur] = [text]
        elif cur is not None:
            entries[cur].append(text)
    missing = [n for n in names if n not in entries]
    assert not missing, f"{LOCK} has no entry for {missing}: regenerate it (scripts/engine-venv.sh --lock model)"
    return "\n".join(" ".join(entries[n]).replace("\\", " ") for n in names) + "\n"


def run(cmd, **kw):
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} exited with {res.returncode}:\n{res.stdout[-4000:]}"
    return res.stdout


ROUND_TRIP = textwrap.dedent("""
    import sys, sysconfig
    import numpy as np
    import beluga
    from beluga import _beluga
    from beluga.layout import BlockLayout, ModelSpec
    from beluga.store import KVStore

    assert beluga.__file__.startswith(sys.prefix), beluga.__file__
    assert _beluga.__file__.endswith(sysconfig.get_config_var("EXT_SUFFIX")), _beluga.__file__
    assert beluga.FAKE_KERNEL, "BELUGA_PY_FAKE=1 did not build the fake variant"
    _beluga._fake_reset(block_size=65536, regions="dax0.0:16M")
    spec = ModelSpec(model="pip-test", num_layers=2, num_kv_heads=2, head_dim=16,
                     dtype="bfloat16", tokens_per_block=16)
    with beluga.Pool() as pool, KVStore(pool, BlockLayout(spec, pool.block_size)) as store:
        keys = store.keys_for(list(range(40)))
        kv = np.random.default_rng(1).integers(0, 1 << 16, (2,) + store.layout.shape,
                                               dtype=np.uint16)
        assert store.store(keys, kv).stored == 2
        out = store.layout.empty(2)
        assert store.load(keys, out).loaded == 2
        assert out.tobytes() == kv.tobytes()
    print("round trip ok", beluga.__version__)
""")


def test_pip_install_into_a_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    run([DEBIAN_PYTHON, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    (tmp_path / "build.txt").write_text(locked(["setuptools", "numpy"]))
    assert WHEELS.is_dir(), f"{WHEELS} is missing: run scripts/engine-venv.sh model first"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    run([py, "-m", "pip", "install", "-q", "--require-hashes", "--no-index", "--find-links",
         WHEELS, "-r", tmp_path / "build.txt"], env=env)
    tree = ["git", "-C", REPO, "status", "--porcelain", "--ignored", "--", "userspace/python"]
    before = run(tree)
    run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         REPO / "userspace" / "python"], env=dict(env, BELUGA_PY_FAKE="1"))
    # The source tree is left as it was: objects go to userspace/build/.
    assert run(tree) == before, "pip install wrote into userspace/python"
    dev = tmp_path / "beluga-dev"
    dev.touch()
    out = run([py, "-c", ROUND_TRIP], cwd=tmp_path,
              env=dict(env, BELUGA_FAKE_KERNEL="1", BELUGA_DEVICE=str(dev)))
    assert out.strip().endswith(f"round trip ok {VERSION}")


def test_the_venv_has_the_real_build():
    env = dict(os.environ, BELUGA_DEVICE="/nonexistent/beluga")
    env.pop("PYTHONPATH", None)
    env.pop("BELUGA_FAKE_KERNEL", None)
    out = run([sys.executable, "-c", textwrap.dedent("""
        import sys, beluga
        assert beluga.__file__.startswith(sys.prefix), beluga.__file__
        assert not beluga.FAKE_KERNEL
        try:
            beluga.Pool()
        except beluga.Error as e:
            print("error:", e)
        print(beluga.__version__)
    """)], cwd="/", env=env)
    lines = out.strip().splitlines()
    assert lines[-1] == VERSION
    assert "/nonexistent/beluga" in lines[0], lines
