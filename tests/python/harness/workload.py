# SPDX-License-Identifier: GPL-2.0
"""A workload of requests with shared prefixes, its oracle, and the KV
bytes a model would compute for each block.

Requests are conversations: a few shared system prompts, several turns per
conversation, each turn the previous prompt plus new tokens (and a partial
trailing block, which no engine caches).  The KV bytes of a block are a
function of the whole prefix up to it (as a model's are), drawn from a
generator seeded by the block's SGLang-chain hash: a block loaded for the
wrong prefix, position, layer or K/V slot has different bytes.
"""

import hashlib

import numpy as np

from beluga import keys as K


class Request:
    def __init__(self, req_id, tokens, tokens_per_block):
        self.req_id = req_id
        self.tokens = tokens
        self.hex = K.sglang_hash_chain(tokens, tokens_per_block)   # one per full block
        self.digests = [bytes.fromhex(h) for h in self.hex]           # 32-byte block hashes

    @property
    def num_blocks(self):
        return len(self.hex)


def conversations(tokens_per_block, max_blocks, seed=0, systems=3, turns=3):
    """Requests whose distinct full blocks number at most ``max_blocks``."""
    rng = np.random.default_rng(seed)
    T = tokens_per_block
    sys_prompts = [list(rng.integers(0, 50000, size=int(rng.integers(1, 3)) * T + 3))
                   for _ in range(systems)]
    reqs, seen, conv = [], set(), 0
    while True:
        history = list(sys_prompts[conv % systems])
        batch, batch_seen = [], set(seen)
        for t in range(turns):
            history += list(rng.integers(0, 50000, size=int(rng.integers(1, 3)) * T + int(rng.integers(0, T))))
            r = Request(f"conv{conv}-turn{t}", [int(x) for x in history], T)
            batch.append(r)
            batch_seen.update(r.hex)
        if len(batch_seen) > max_blocks:
            break
        reqs += batch
        seen = batch_seen
        conv += 1
        if conv >= 64:
            break
    # Interleave conversations so that prefixes are shared across requests
    # that are not adjacent.
    order = sorted(range(len(reqs)), key=lambda i: (int(reqs[i].req_id.split("-turn")[1]), i))
    return [reqs[i] for i in order], len(seen)


class Oracle:
    """Which blocks a perfect cache holds: everything stored before."""

    def __init__(self):
        self.present = set()

    def hits(self, req):
        n = 0
        for h in req.hex:
            if h not in self.present:
                break
            n += 1
        return n

    def add(self, req, upto=None):
        self.present.update(req.hex[:upto])


def block_kv(layout, block_hex):
    """The KV bytes of one block, shaped like the layout."""
    seed = int.from_bytes(hashlib.sha256(b"kv" + bytes.fromhex(block_hex)).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    return rng.standard_normal(layout.shape).astype(layout.dtype)


def pool_clean(pool):
    s = pool.stats()
    return s["allocated_blocks"] == 0 and s["pins"] == 0, s


def hold_all(pool):
    """Allocate every block that can be allocated (evicting what is cached
    and not pinned); returns the offsets, to be freed by the caller."""
    import beluga
    from array import array
    held, n = array("Q"), 1024
    while n:
        try:
            held.extend(pool.alloc(n))
        except beluga.NoSpace:
            n //= 2
    return held


def squeeze_pool(pool, capacity):
    """Leave only ``capacity`` blocks of the pool allocatable (the rest are
    held, and what was cached is evicted); returns the offsets to free."""
    held = hold_all(pool)
    if capacity:
        pool.free(held[:capacity])
    return held[capacity:]
