# SPDX-License-Identifier: GPL-2.0
"""Several engine processes on one pool, through the binding.

Each engine is a separate process with its own open file of the device, as
separate vLLM/SGLang workers on one host would be: one stores blocks and the
others find and read the same bytes; writers racing on one chain publish
each key once; an engine killed with SIGKILL in the middle of a store leaves
no allocated block and no pin behind.
"""

import hashlib
import os
import signal
import time

import pytest

import beluga
from engine_procs import CHILD_DEADLINE_S, engine, join_all, recv, start

pytestmark = pytest.mark.real_only("several engine processes on one pool")

BLOCKS = 8
TOKENS_PER_BLOCK = 16


def tokens_for(seed, nblocks=BLOCKS):
    return [(seed * 7919 + i) % 50257 for i in range(nblocks * TOKENS_PER_BLOCK)]


def block_bytes(seed, index, size):
    """The content engine `seed` computes for block `index`: deterministic, so
    every process knows what a block must hold."""
    unit = hashlib.sha256(b"%d/%d" % (seed, index)).digest()
    return (unit * (size // len(unit) + 1))[:size]


def digest(buf):
    return hashlib.sha256(buf).hexdigest()


@engine
def engine_store(conn, ns, seed, go):
    """Alloc, write and publish a chain; with `go`, wait for it before PUBLISH."""
    with beluga.Pool() as pool:
        keys = beluga.hash_chain(tokens_for(seed), TOKENS_PER_BLOCK)
        offs = pool.alloc(BLOCKS)
        m = pool.map()
        for i, off in enumerate(offs):
            mv = m.block(off)
            mv[:] = block_bytes(seed, i, len(mv))
            mv.release()
        if go:
            conn.send({"ready": os.getpid()})
            conn.recv()
        res = pool.publish(ns, offs, keys)
        del m
        conn.send({"published": res.published, "exists": res.exists, "failed": res.failed,
                   "offsets": list(offs)})


@engine
def engine_load(conn, ns, seed):
    """Find the chain with pins and read every block it found."""
    with beluga.Pool() as pool:
        keys = beluga.hash_chain(tokens_for(seed), TOKENS_PER_BLOCK)
        hits, offs = pool.lookup(ns, keys, pin=True)
        m = pool.map()
        digests = []
        for off in offs:
            mv = m.block(off)
            digests.append(digest(mv))
            mv.release()
        pool.release(offs)
        del m
        conn.send({"hits": hits, "offsets": list(offs), "digests": digests})


def expected_digests(seed, block_size):
    return [digest(block_bytes(seed, i, block_size)) for i in range(BLOCKS)]


def test_readers_in_other_processes_read_the_stored_bytes(pool, unique_ns):
    before = pool.stats()
    seed = 11
    w, wc = start(engine_store, unique_ns, seed, False)
    stored = recv(wc, "storing engine")
    join_all([w])
    assert (stored["published"], stored["exists"], stored["failed"]) == (BLOCKS, 0, 0)

    readers = [start(engine_load, unique_ns, seed) for _ in range(3)]
    got = [recv(c, "loading engine") for _, c in readers]
    join_all([p for p, _ in readers])

    want = expected_digests(seed, pool.block_size)
    for r in got:
        assert r["hits"] == BLOCKS
        # the very blocks the writer published: zero copy, no second store
        assert r["offsets"] == stored["offsets"]
        assert r["digests"] == want
    after = pool.stats()
    assert after["allocated_blocks"] == before["allocated_blocks"]
    assert after["pins"] == before["pins"]
    assert after["published_blocks"] == before["published_blocks"] + BLOCKS
    pool.evict_ns(unique_ns)


def test_racing_engines_publish_each_key_once(pool, unique_ns):
    before = pool.stats()
    seed = 12
    writers = [start(engine_store, unique_ns, seed, True) for _ in range(3)]
    for _, c in writers:
        recv(c, "storing engine (ready)")
    mid = pool.stats()
    # every engine holds its own allocation until it publishes
    assert mid["allocated_blocks"] == before["allocated_blocks"] + 3 * BLOCKS
    for _, c in writers:
        c.send("go")
    got = [recv(c, "storing engine") for _, c in writers]
    join_all([p for p, _ in writers])

    assert sum(r["published"] for r in got) == BLOCKS
    assert sum(r["exists"] for r in got) == 2 * BLOCKS
    assert all(r["failed"] == 0 for r in got)
    after = pool.stats()
    # the losers' blocks went back to the pool at PUBLISH
    assert after["allocated_blocks"] == before["allocated_blocks"]
    assert after["published_blocks"] == before["published_blocks"] + BLOCKS
    assert after["publish_races"] - before["publish_races"] == 2 * BLOCKS

    r, rc = start(engine_load, unique_ns, seed)
    loaded = recv(rc, "loading engine")
    join_all([r])
    assert loaded["hits"] == BLOCKS
    assert loaded["digests"] == expected_digests(seed, pool.block_size)
    pool.evict_ns(unique_ns)


@engine
def engine_killed_mid_store(conn, ns_read, seed_read, ns_store, seed_store):
    """Pin a cached chain, allocate 2*BLOCKS, publish the first BLOCKS/2 of the
    new chain, report, then keep writing the rest until killed."""
    pool = beluga.Pool()  # never closed: the kernel cleans up after SIGKILL
    hits, pinned = pool.lookup(ns_read, beluga.hash_chain(tokens_for(seed_read),
                                                          TOKENS_PER_BLOCK), pin=True)
    offs = pool.alloc(2 * BLOCKS)
    m = pool.map()
    half = BLOCKS // 2
    for i in range(half):
        mv = m.block(offs[i])
        mv[:] = block_bytes(seed_store, i, len(mv))
        mv.release()
    keys = beluga.hash_chain(tokens_for(seed_store), TOKENS_PER_BLOCK)
    res = pool.publish(ns_store, offs[:half], keys[:half * 16])
    conn.send({"pinned": hits, "published": res.published, "allocated": 2 * BLOCKS - half})
    i = half
    while True:  # the rest of the store, forever: SIGKILL arrives in here
        mv = m.block(offs[i])
        mv[:64] = block_bytes(seed_store, i, 64)
        mv.release()
        i = half + (i + 1 - half) % (2 * BLOCKS - half)


def test_sigkill_mid_store_leaks_no_block_or_pin(pool, unique_ns):
    ns_read, ns_store = unique_ns, unique_ns ^ (1 << 62)
    w, wc = start(engine_store, ns_read, 21, False)
    assert recv(wc, "storing engine")["published"] == BLOCKS
    join_all([w])
    before = pool.stats()

    k, kc = start(engine_killed_mid_store, ns_read, 21, ns_store, 22)
    state = recv(kc, "engine to be killed")
    assert state == {"pinned": BLOCKS, "published": BLOCKS // 2, "allocated": 2 * BLOCKS - BLOCKS // 2}
    mid = pool.stats()
    assert mid["allocated_blocks"] == before["allocated_blocks"] + state["allocated"]
    assert mid["pins"] == before["pins"] + BLOCKS
    assert mid["clients"] == before["clients"] + 1

    os.kill(k.pid, signal.SIGKILL)
    k.join(CHILD_DEADLINE_S)
    assert k.exitcode == -signal.SIGKILL
    # The kernel returns a file's allocations and pins when its last reference
    # goes; that is done by the time the parent reaps the child, but allow for
    # a deferred release (a condition with a deadline, not a timing).
    deadline = time.monotonic() + 10
    while True:
        after = pool.stats()
        if (after["allocated_blocks"], after["pins"]) == (before["allocated_blocks"], before["pins"]) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after["allocated_blocks"] == before["allocated_blocks"], (before, after)
    assert after["pins"] == before["pins"], (before, after)
    assert after["pinned_blocks"] == before["pinned_blocks"], (before, after)
    assert after["clients"] == before["clients"], (before, after)
    # what it published before dying stays, whole; the rest is free again
    assert after["published_blocks"] == before["published_blocks"] + BLOCKS // 2
    assert after["free_blocks"] == before["free_blocks"] - BLOCKS // 2

    r, rc = start(engine_load, ns_store, 22)
    loaded = recv(rc, "loading engine")
    join_all([r])
    assert loaded["hits"] == BLOCKS // 2
    assert loaded["digests"] == expected_digests(22, pool.block_size)[:BLOCKS // 2]
    pool.evict_ns(ns_read)
    pool.evict_ns(ns_store)
