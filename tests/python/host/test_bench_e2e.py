# SPDX-License-Identifier: GPL-2.0
"""bench/peers/e2e.py's engine loop and its report, without the peers'
packages: a store kept in a dict stands in for the clients. A block loaded
with a wrong byte or another block's bytes fails the run naming the store;
compute is paced to the KV rate; a warm pass hits every block; the report
sets the warm ratio against Mooncake beside the paper's figures."""

import json
import os
import pathlib
import sys

import numpy as np
import pytest

import beluga

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench" / "peers"))
import e2e  # noqa: E402
import peers_report  # noqa: E402

BS = 4096
REQS = [[0, 1, 2, 3], [0, 1, 2, 4, 5], [0, 6], [0, 1, 2, 3, 7]]


class DictStore:
    def __init__(self, damage=None):
        self.data, self.damage = {}, damage

    def keys(self, tag, hids):
        return [f"{tag}:{h}" for h in hids]

    def lookup(self, keys):
        n = 0
        while n < len(keys) and keys[n] in self.data:
            n += 1
        return n

    def load(self, keys, outs):
        for i, (k, b) in enumerate(zip(keys, outs)):
            b[:] = np.frombuffer(self.data[k], np.uint8)
            if self.damage:
                self.damage(i, keys, b, self.data)

    def store(self, keys, blocks):
        for k, b in zip(keys, blocks):
            self.data[k] = bytes(b)


def replay(store, rate=1e12, passes=1):
    views = [np.zeros(BS, np.uint8) for _ in range(max(map(len, REQS)))]
    blocks = e2e.Blocks(BS)
    keys = [store.keys("t", r) for r in REQS]
    return [e2e.replay_pass(store, "dict", REQS, keys, views, blocks, rate) for _ in range(passes)]


def flip_middle_byte(i, keys, b, data):
    b[BS // 2] ^= 1


def first_block_everywhere(i, keys, b, data):
    if i == 1:
        b[:] = np.frombuffer(data[keys[0]], np.uint8)


@pytest.mark.parametrize("damage", [flip_middle_byte, first_block_everywhere])
def test_a_wrong_block_fails_the_run_naming_the_store(damage):
    with pytest.raises(RuntimeError, match=r"^dict: trace block \d+ loaded with wrong bytes"):
        replay(DictStore(damage), passes=2)


def test_trace_pass_hits_the_prefixes_and_warm_pass_hits_all():
    trace, warm = replay(DictStore(), passes=2)
    # request 2 hits 0,1,2; request 3 hits 0; request 4 hits 0,1,2,3
    assert (trace["hits"], trace["blocks"], trace["requests"]) == (8, 16, 4)
    assert (warm["hits"], warm["blocks"]) == (16, 16)


def test_compute_is_paced_to_the_kv_rate(monkeypatch):
    rate = 4 * BS / 0.02                 # 4 blocks in 20 ms
    (res,) = replay(e2e.Recompute(), rate=rate)
    for r, t in zip(REQS, res["ttft"]):
        assert t >= len(r) * BS / rate * 1e9
    # at a rate no compute could reach the pass never waits (counted, not
    # timed: a TCG guest takes longer than 20 ms for the pass itself)
    sleeps = []
    monkeypatch.setattr(e2e.time, "sleep", sleeps.append)
    replay(DictStore(), rate=1e15)
    assert sleeps == []


def test_requests_go_by_second_block_to_the_same_engine():
    assert e2e.engine_of([0, 9], 4) == e2e.engine_of([0, 9, 10, 11], 4) == 1
    assert e2e.engine_of([6], 4) == 2


def records():
    base = {"section": "peers", "env": "host-fake", "part": "e2e", "block_bytes": 262144}
    out = [dict(base, kind="config", requests=4, distinct_blocks=8, kv_rate=1.6e9, trace="t.jsonl",
                rounds=2, cpus=2, stores={"beluga": "per-process pool", "mooncake": "shared"})]
    for rnd in (0, 1):
        for st, ttft, rps in (("beluga", 1e6, 200.0), ("mooncake", 10e6, 50.0)):
            for pas in ("trace", "warm"):
                out.append(dict(base, kind="e2e", store=st, engines=2, round=rnd, pass_=pas,
                                sharing="x", requests=4, ttft_p50_ns=ttft, ttft_p99_ns=2 * ttft,
                                rps=rps, hit_ratio=1.0 if pas == "warm" else 0.5))
    for what, v in (("e2e-ttft_p50", 10.0), ("e2e-ttft_p99", 10.0), ("e2e-rps", 4.0)):
        for pas in ("trace", "warm"):
            out.append(dict(base, kind="ratio", what=what, peer="mooncake", ref="beluga", engines=2,
                            value=v, run_min=v - 1, run_max=v + 1, runs=2, pass_=pas))
    return [json.loads(json.dumps(r).replace('"pass_"', '"pass"')) for r in out]


def test_report_sets_the_warm_ratio_beside_the_papers():
    text = "\n".join(peers_report.section(records()))
    assert "| mooncake | 2 | 1.000 | 10.0 ms | 20.0 ms | 50.0 | 10.00 [9.00..11.00] (2) | " \
           "4.00 [3.00..5.00] (2) |" in text
    assert "| TTFT | 90.0% lower (10.00 [9.00..11.00] (2)) | 89.6% lower (9.6x) |" in text
    assert "| throughput | 4.00 [3.00..5.00] (2)x | 7.35x |" in text
    rows = peers_report.readme_rows(records())
    assert rows == ["| host-fake: end to end (warm), 2 engines, TTFT p50 mooncake / Beluga | "
                    "10.00 [9.00..11.00] (2) | - | Beluga faster in every run |",
                    "| host-fake: end to end (warm), 2 engines, req/s Beluga / mooncake | "
                    "4.00 [3.00..5.00] (2) | - | Beluga faster in every run |"]


def test_the_shared_pool_has_a_partition_per_engine_for_its_blocks(tmp_path):
    class Args:
        block_size, out = 16 << 10, str(tmp_path / "out")
    reqs = [[0, 1, 2], [0, 2, 3, 4], [0, 3], [7, 8, 9, 10, 11]]
    path, length = e2e.shared_pool(Args, reqs, 2, "t")
    # engine 1 stores 0, 1, 3, 7..11 (8 blocks), engine 0 stores 0, 2, 3, 4
    assert length >= 2 * (8 + 16) * Args.block_size
    assert "beluga-e2e" in path and not pathlib.Path(path).exists()


@pytest.mark.skipif(not beluga.FAKE_KERNEL,
                    reason="e2e.py's Beluga stores run behind the fake kernel (the binding's "
                           "fake build; the real module's shared pool is the multi-host guests')")
def test_beluga_engines_share_one_pool_and_local_ones_do_not(tmp_path, monkeypatch):
    """Both engines' first request starts with block 5, the one routed to
    engine 1, the other to engine 0: in one shared pool whichever engine
    comes second finds it (a hit) or stores it too (PUBLISH answers that
    it exists: a duplicate); with a pool each, neither ever happens."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"hash_ids": r}) + "\n" for r in ([5, 1], [5, 2])))
    root = pathlib.Path(__file__).resolve().parents[3]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(pathlib.Path(beluga.__file__).resolve().parents[1]), str(root / "bench" / "python")]))
    monkeypatch.setattr(sys, "argv", ["e2e.py", "--out", str(tmp_path / "out"),
                                      "--run-dir", str(tmp_path / "run"), "--trace", str(trace),
                                      "--stores", "beluga,beluga-local", "--engines", "2",
                                      "--rounds", "1", "--block-size", "16K"])
    e2e.main()
    rows = [json.loads(x) for x in (tmp_path / "out" / "peers-e2e-host-fake.jsonl").open()]
    trace_rows = {r["store"]: r for r in rows if r.get("kind") == "e2e" and r["pass"] == "trace"}
    shared, local = trace_rows["beluga"], trace_rows["beluga-local"]
    assert shared["hit_ratio"] * 4 + shared["duplicates"] >= 1, shared
    assert (local["hit_ratio"], local["duplicates"]) == (0, 0), local
    assert not list(pathlib.Path("/dev/shm").glob(f"beluga-e2e-{os.getpid()}-*"))
