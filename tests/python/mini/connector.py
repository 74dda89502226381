# SPDX-License-Identifier: GPL-2.0
"""The mini engine's KV connector: one per TP rank, on beluga.store.KVStore.

The engine hands over canonical blocks, shaped (n, layers, 2, tokens,
heads_local, head_dim), which is beluga.layout.BlockLayout's layer-major
K-then-V layout, so a block goes to and from the pool as one copy. Loads
use KVStore's load path (pinned LOOKUP, copy out, RELEASE) and report how
many leading blocks arrived; stores use its store path (count-only LOOKUP,
ALLOC the misses, write, PUBLISH).

The faults of the bit-exact test are injected here, at the seams where real
connectors have had them:
- swap_kv_on_store: K and V exchanged when packing a block for the pool;
- SkewedPool: a pool whose pinned LOOKUP answers the offset of the next hit
  (a wrong offset: every block is read from its neighbour);
- tp_in_namespace=False: each rank describes its shard as a whole model
  (tp 0 of 1), so the ranks' blocks land in one namespace under the same
  keys, the bug of connectors that leave the TP fields out.
"""

from array import array

import numpy as np

from beluga.layout import BlockLayout, ModelSpec
from beluga.store import KVStore

from .model import MiniModel


def model_spec(model: MiniModel, block_tokens, tp_rank, tp_size, tp_in_namespace=True):
    cfg = model.cfg
    if tp_in_namespace:
        return ModelSpec(model=cfg.name, revision=cfg.revision, num_layers=cfg.num_layers,
                         num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, dtype="float32",
                         tokens_per_block=block_tokens, tp_rank=tp_rank, tp_size=tp_size)
    # the bug: the rank's shard described as if it were the whole model
    return ModelSpec(model=cfg.name, revision=cfg.revision, num_layers=cfg.num_layers,
                     num_kv_heads=cfg.num_kv_heads // tp_size, head_dim=cfg.head_dim,
                     dtype="float32", tokens_per_block=block_tokens, tp_rank=0, tp_size=1)


class KVStoreConnector:
    """The engine's lookup/load/store on one rank's KVStore (``.kv``)."""

    def __init__(self, kv: KVStore, swap_kv_on_store=False):
        self.kv = kv
        self.shape = kv.layout.shape
        self.swap_kv_on_store = swap_kv_on_store

    def keys(self, tokens, block_tokens):
        if block_tokens != self.kv.layout.tokens:
            raise ValueError(f"the engine's blocks have {block_tokens} tokens, the layout's "
                             f"{self.kv.layout.tokens}")
        return self.kv.keys_for(tokens)

    def lookup(self, keys):
        return self.kv.lookup(keys)

    def load(self, keys):
        out = np.empty((len(keys) // 16,) + self.shape, dtype=np.float32)
        return out, self.kv.load(keys, out=out).loaded

    def store(self, keys, blocks):
        if self.swap_kv_on_store:
            blocks = np.ascontiguousarray(blocks[:, :, ::-1])
        return self.kv.store(keys, blocks=blocks).stored


class SkewedPool:
    """A pool whose pinned LOOKUP returns each hit's neighbour's offset (the
    last gets the first's), as a connector with an off-by-one in its offset
    arithmetic would read them. RELEASE gets the same set of offsets back,
    so the pins still balance."""

    def __init__(self, pool):
        self._pool = pool

    def lookup(self, ns, keys, pin=False):
        hits, offs = self._pool.lookup(ns, keys, pin=pin)
        if pin and hits > 1:
            o = array("Q", offs[:hits])
            offs = o[1:] + o[:1]
        return hits, offs

    def __getattr__(self, name):
        return getattr(self._pool, name)


def connectors(pool, model, block_tokens=16, tp_size=1, salt=None, tp_in_namespace=True,
               swap_kv_on_store=False):
    """One KVStoreConnector per TP rank of the mini model on pool."""
    out = []
    for r in range(tp_size):
        spec = model_spec(model, block_tokens, r, tp_size, tp_in_namespace)
        kv = KVStore(pool, BlockLayout(spec, pool.block_size), salt=salt)
        out.append(KVStoreConnector(kv, swap_kv_on_store))
    return out
