# SPDX-License-Identifier: GPL-2.0
"""The fake kernel's shared pool (tests/userspace/fake_mh.c): processes that
name one file in BELUGA_FAKE_CXL are hosts of one multi-host pool, which the
module's own protocol (kmod/core/mh_*.c) runs. What one host's KVStore
stores, another's finds and loads byte for byte; the binding says the pool
is shared, so KVStore writes back and invalidates what it copies. The
end-to-end benchmark's engines share their pool this way (bench/peers/e2e.py)."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import beluga

pytestmark = pytest.mark.skipif(not beluga.FAKE_KERNEL,
                                reason="the fake kernel's shared pool (the real module's is "
                                       "tested by the multi-host guests)")

BLOCK = 64 << 10

HOST = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import beluga
    from beluga.layout import BlockLayout, ModelSpec
    from beluga.store import KVStore

    pool = beluga.Pool(writable=True)
    spec = ModelSpec(model="shared-test", num_layers=2, num_kv_heads=1, head_dim=16,
                     dtype="float32", tokens_per_block=pool.block_size // (2 * 2 * 16 * 4))
    kv = KVStore(pool, BlockLayout(spec, pool.block_size), salt="shared-test")
    keys = kv.keys_for(list(range(3 * kv.layout.tokens)))
    data = np.random.default_rng(5).standard_normal((3,) + kv.layout.shape).astype("float32")
    # commands on stdin, an answer each: a host stays live between them
    for cmd in sys.stdin:
        cmd = cmd.strip()
        out = {"shared_info": pool.info()["shared"], "shared_store": kv.shared,
               "blocks": pool.info()["nr_blocks"]}
        if cmd == "store":
            # a host allocates from the partitions it owns: its own after a few ticks
            deadline = time.monotonic() + 10
            while pool.stats()["free_blocks"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            out["stored"] = kv.store(keys, data).stored
        elif cmd == "load":
            out["hits"] = kv.lookup(keys)
            got = kv.layout.empty(3)
            out["loaded"] = kv.load(keys, got).loaded
            out["same"] = bool(np.array_equal(got, data))
        else:
            break
        s = pool.stats()
        out["held"] = [s["allocated_blocks"], s["pins"]]
        print(json.dumps(out), flush=True)
""")


def host(tmp_path, host_id):
    pkg_dir = str(pathlib.Path(beluga.__file__).resolve().parents[1])
    dev = tmp_path / f"dev{host_id}"
    dev.touch()
    env = dict(os.environ, PYTHONPATH=pkg_dir, BELUGA_FAKE_KERNEL="1",
               BELUGA_FAKE_CXL=f"{tmp_path / 'cxl'}:32M", BELUGA_FAKE_HOST_ID=str(host_id),
               BELUGA_FAKE_BLOCK_SIZE=str(BLOCK), BELUGA_DEVICE=str(dev))
    env.pop("BELUGA_FAKE_REGIONS", None)
    return subprocess.Popen([sys.executable, "-c", HOST], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def ask(p, cmd):
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    line = p.stdout.readline()
    if not line:
        p.kill()
        pytest.fail(f"host exited: {p.communicate(timeout=10)[1]}")
    return json.loads(line)


def finish(*procs):
    for p in procs:
        _, err = p.communicate("quit\n", timeout=20)
        assert p.returncode == 0, err
        # a host that fenced itself says so (fake_mh.c)
        assert "lost its lease" not in err, err


@pytest.mark.parametrize("writer", [0, 1], ids=["formatting-host-stores", "joining-host-stores"])
def test_hosts_share_blocks(tmp_path, writer):
    hosts = [host(tmp_path, 0)]
    # host 0 formats the pool at its start; host 1 joins it
    first = ask(hosts[0], "load")
    assert first["hits"] == 0, first
    hosts.append(host(tmp_path, 1))
    a = ask(hosts[writer], "store")
    b = ask(hosts[1 - writer], "load")
    assert a["stored"] == 3, a
    for x in (a, b):
        assert x["shared_info"] and x["shared_store"], x
        assert x["held"] == [0, 0], x
    assert a["blocks"] == b["blocks"] > 0
    assert (b["hits"], b["loaded"], b["same"]) == (3, 3, True), b
    finish(*hosts)


def test_a_local_pool_is_not_shared(pool):
    assert pool.info()["shared"] is False
