# SPDX-License-Identifier: GPL-2.0
"""bench/peers/peers.py's meta and data parts without the peers' packages:
stores kept in a dict stand in for the clients, so that what the bench itself
checks is tested here: a block loaded with one wrong byte, or another block's
bytes, fails the run naming the store; a faithful store gives its records, a
ratio per peer (the first store the reference), operation and count; the
lookup measures every store's lookups and fails on a miss."""

import argparse
import json
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "bench" / "peers"))
import peers  # noqa: E402

BS = 4096


class DictStore:
    lookups = (("in", "lookup"), ("in (batched)", "batched_lookup"))

    def __init__(self, name, damage=None, forget=0):
        self.name, self.damage, self.forget, self.data = name, damage, forget, {}

    def keys(self, tag, n):
        return [f"{tag}:{i}" for i in range(n)]

    def store(self, keys, blocks):
        for k, b in zip(keys, blocks):
            self.data[k] = bytes(b)

    def load(self, keys, outs):
        for i, (k, b) in enumerate(zip(keys, outs)):
            b[:] = np.frombuffer(self.data[k], np.uint8)
            if self.damage:
                self.damage(i, keys, b, self.data)

    def remove(self, keys):
        for k in keys:
            del self.data[k]

    def lookup(self, keys):
        n = 0
        while n < len(keys) and keys[n] in self.data:
            n += 1
        return max(0, n - self.forget)

    batched_lookup = lookup



def flip_last_byte(i, keys, b, data):
    if i == len(keys) - 1:
        b[-1] ^= 1


def previous_block(i, keys, b, data):
    if i == 1:
        b[:] = np.frombuffer(data[keys[0]], np.uint8)


PEERS = ("mooncake", "lmcache-cpu", "lmcache-redis")


def run(tmp_path, mooncake, counts="1,4"):
    args = argparse.Namespace(counts=counts, block_size=BS, samples=2, out=str(tmp_path),
                              parts=["data"], env="test")
    rec = peers.Records(args)
    rec.base["part"] = "data"
    src = np.random.default_rng(7).integers(0, 256, 4 * BS, np.uint8)
    dst = np.zeros_like(src)
    try:
        peers.data_part(args, [DictStore("beluga"), mooncake, DictStore("lmcache-cpu"),
                               DictStore("lmcache-redis")], src, dst, rec)
    finally:
        rec.f.close()
    return [json.loads(line) for line in open(rec.path)]


@pytest.mark.parametrize("damage", [flip_last_byte, previous_block])
def test_a_wrong_block_fails_the_run_and_names_the_store(tmp_path, damage):
    with pytest.raises(RuntimeError, match=r"^mooncake: block \d+ of \d+ \(4096 bytes\) loaded wrong bytes"):
        run(tmp_path, DictStore("mooncake", damage))


def test_faithful_stores_give_times_and_ratios_against_beluga(tmp_path):
    recs = run(tmp_path, DictStore("mooncake"))
    xfer = [r for r in recs if r["kind"] == "xfer"]
    assert {(r["target"], r["op"], r["n"]) for r in xfer} == {
        (t, op, n) for t in ("beluga",) + PEERS + ("memcpy",)
        for op in ("store", "load") for n in (1, 4)}
    assert all(r["samples"] == 2 and r["checked"] and r["min_ns"] <= r["p50_ns"] <= r["max_ns"]
               for r in xfer)
    ratios = [r for r in recs if r["kind"] == "ratio"]
    assert {(r["peer"], r["op"], r["n"]) for r in ratios} == {
        (p, op, n) for p in PEERS + ("memcpy",)
        for op in ("store", "load") for n in (1, 4)}
    assert all(r["ref"] == "beluga" and r["run_min"] <= r["value"] <= r["run_max"] and r["runs"] == 2
               for r in ratios)


def meta(tmp_path, stores):
    args = argparse.Namespace(block_size=BS, rounds=3, ops=4, out=str(tmp_path), parts=["meta"],
                              env="test")
    rec = peers.Records(args)
    rec.base["part"] = "meta"
    try:
        peers.meta_part(args, stores, rec)
    finally:
        rec.f.close()
    return [json.loads(line) for line in open(rec.path)]


def test_the_lookup_measures_every_stores_lookups_against_the_first(tmp_path):
    recs = meta(tmp_path, [DictStore("beluga")] + [DictStore(p) for p in PEERS])
    targets = [f"{s} {row}" for s in ("beluga",) + PEERS for row in ("in", "in (batched)")]
    lat = [r for r in recs if r["kind"] == "lat"]
    assert [r["target"] for r in lat] == targets
    assert all(r["ops"] == 12 and r["rounds"] == 3 and r["n"] == peers.KEYS for r in lat)
    ratios = [r for r in recs if r["kind"] == "ratio"]
    assert [r["peer"] for r in ratios] == targets[1:]
    assert all(r["ref"] == "beluga in" and r["runs"] == 3 for r in ratios)


def test_a_lookup_that_misses_fails_the_run_naming_the_target(tmp_path):
    with pytest.raises(RuntimeError, match=r"^lmcache-redis in: a 64-key lookup of 64 present keys found 63"):
        meta(tmp_path, [DictStore("beluga"), DictStore("lmcache-redis", forget=1)])


WORKER = """
import json, sys
print("ready", flush=True)
n = 0
while sys.stdin.readline().strip() == "go":
    n += 1
    if n > int(sys.argv[2]):
        sys.exit(5)
    print(json.dumps([sys.argv[1], n]), flush=True)
"""


def test_drive_workers_runs_them_in_step(tmp_path):
    procs = peers.Processes(str(tmp_path))
    argvs = [[sys.executable, "-c", WORKER, name, "9"] for name in ("a", "b")]
    assert peers.drive_workers(procs, "w", argvs, 2) == [[["a", 1], ["b", 1]], [["a", 2], ["b", 2]]]


def test_drive_workers_names_a_worker_that_died_and_its_log(tmp_path):
    procs = peers.Processes(str(tmp_path))
    argvs = [[sys.executable, "-c", WORKER, "a", "9"], [sys.executable, "-c", WORKER, "b", "1"]]
    with pytest.raises(RuntimeError, match=rf"^w \(pid \d+\) exited with status 5: see {tmp_path}/w-\*\.log"):
        peers.drive_workers(procs, "w", argvs, 2)


def test_memcpy_runs_on_the_medium_of_belugas_pool(tmp_path, monkeypatch):
    """memcpy's middle buffer is a shared mapping of a file in the directory
    of the fake kernel's pool file (tempfile's), faulted in: anonymous memory
    would get transparent huge pages that a tmpfs pool does not."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    buf = peers.medium_buffer(1 << 20)
    assert buf.nbytes == 1 << 20 and (buf == 1).all()
    addr = buf.ctypes.data
    with open("/proc/self/maps") as f:
        line = next(ln for ln in f if int(ln.split("-")[0], 16) <= addr < int(ln.split()[0].split("-")[1], 16))
    assert line.split()[1][3] == "s" and str(tmp_path) in line, line
    assert peers.shmem_huge_pages() in ("always", "within_size", "advise", "never", "deny", "force",
                                        "unknown")
