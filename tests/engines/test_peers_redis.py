# SPDX-License-Identifier: GPL-2.0
"""bench/peers/peers.py's lmcache-redis peer against LMCache and a real
redis-server (the `lmcache` venv; skipped, saying so, without Debian's
redis-server): the server listens on the loopback only, without
persistence, its pid in the run dir's pids; a store through LMCache's
remote backend is in redis when it returns (the bench times it to
completion), both lookups find the stored prefix, a load gives the stored
bytes back, and the bench's remove leaves nothing of the keys in redis."""

import pathlib
import re
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers"))
import peers  # noqa: E402

BS = 16 << 10


@pytest.fixture
def remote(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH (scripts/install-deps.sh installs Debian's)")
    procs = peers.Processes(str(tmp_path))
    lmr = None
    try:
        redis = peers.RedisServer.start(procs)
        lmr = peers.LMCacheRemote(BS, 32, redis.url)
        yield redis, lmr
    finally:
        if lmr is not None:
            lmr.close()
        procs.stop()


def test_redis_server_listens_on_the_loopback_without_persistence(remote, tmp_path):
    redis, _ = remote
    assert re.fullmatch(r"redis-server \d+\.\d+\.\d+", redis.version)
    for setting in ("bind '127.0.0.1'", f"port '{redis.port}'", "save ''", "appendonly 'no'"):
        assert setting in redis.config
    pids = (tmp_path / "pids").read_text()
    assert re.search(rf"^redis-server \d+ \S+/redis-server --bind 127.0.0.1 --port {redis.port} ", pids, re.M)


def test_store_lookup_load_and_remove_through_lmcaches_remote_backend(remote):
    redis, lmr = remote
    keys = lmr.keys("t", 16)
    blocks = list(np.random.default_rng(3).integers(0, 256, (16, BS), np.uint8))
    lmr.store(keys, blocks)
    assert redis.client.dbsize() == 2 * len(keys)       # data and metadata, written when store returns
    assert lmr.lookup(keys) == lmr.batched_lookup(keys) == 16
    outs = [np.zeros(BS, np.uint8) for _ in keys]
    lmr.load(keys, outs)
    assert all(np.array_equal(a, b) for a, b in zip(outs, blocks))
    lmr.remove(keys[8:])
    assert lmr.lookup(keys) == lmr.batched_lookup(keys) == 8
    lmr.remove(keys[:8])
    assert redis.client.dbsize() == 0
    with pytest.raises(RuntimeError, match=r"^redis deleted 0 of the 2 keys of 1 chunks"):
        lmr.remove(keys[:1])
