# SPDX-License-Identifier: GPL-2.0
"""A paged-attention engine around MiniModel, shaped like vLLM's.

The "device" KV cache of each TP rank is one numpy array per layer of shape
(2, num_blocks, block_tokens, kv_heads_local, head_dim): K at [0], V at [1],
the layout of vLLM's FlashAttention backend. A sequence owns a block table.

Prefill always runs in block-sized chunks: chunk j computes tokens
[j*bt, (j+1)*bt) and attends to chunks 0..j through the block table. A
prefix hit on h blocks therefore skips exactly chunks 0..h-1, and every chunk
that still runs sees the same inputs with the same shapes as in a run that
computed everything, so a correct pool gives logits equal byte for byte.
The chunk that holds the last prompt token is always computed (its logits
start generation), so at most (len - 1) // bt blocks are loaded.

The pool is reached through one connector per TP rank (see connector.py):
lookup(keys) -> hits, load(keys) -> (blocks, n_ok), store(keys, blocks).
Blocks cross that seam in the canonical layout (layers, 2, bt, heads, dim).
"""

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from .model import F32, MiniModel


def chain_keys(tokens, block_tokens):
    """16-byte chained keys of the full blocks of tokens (SHA-256 of the parent
    key and the block's int32 tokens, truncated). The default when no pool
    connector supplies its own key function."""
    toks = np.asarray(tokens, dtype=np.int32)
    out, parent = [], b"\0" * 16
    for j in range(len(toks) // block_tokens):
        parent = hashlib.sha256(parent + toks[j * block_tokens:(j + 1) * block_tokens].tobytes()).digest()[:16]
        out.append(parent)
    return b"".join(out)


@dataclass
class GenResult:
    tokens: list                 # generated token ids
    logits: np.ndarray           # (max_new, vocab) float32: the last prompt token's, then each decode step's
    hits: list                   # per rank: leading blocks the pool had
    loaded: int                  # blocks loaded into the cache (chunks skipped)
    computed_chunks: int
    prefill_s: float             # wall time of lookup + load + prefill (time to first token)
    stored: list = field(default_factory=list)  # per rank: blocks the store path wrote


def bit_exact(a: GenResult, b: GenResult) -> bool:
    """Byte-for-byte equality of two runs' logits and tokens (not allclose)."""
    return (a.tokens == b.tokens and a.logits.dtype == b.logits.dtype
            and a.logits.shape == b.logits.shape
            and a.logits.tobytes() == b.logits.tobytes())


class RankCache:
    """One TP rank's paged KV cache."""

    def __init__(self, model, tp_size, tp_rank, num_blocks, block_tokens):
        cfg = model.cfg
        _, ks = model.shard(tp_size, tp_rank)
        self.kv_local = ks.stop - ks.start
        shape = (2, num_blocks, block_tokens, self.kv_local, cfg.head_dim)
        self.layers = [np.zeros(shape, dtype=F32) for _ in range(cfg.num_layers)]

    def write(self, layer, block_ids, slots, k, v):
        c = self.layers[layer]
        c[0, block_ids, slots] = k
        c[1, block_ids, slots] = v

    def gather(self, layer, table, length):
        c = self.layers[layer]
        bt = c.shape[2]
        nb = (length + bt - 1) // bt
        k = c[0, table[:nb]].reshape(nb * bt, self.kv_local, -1)[:length]
        v = c[1, table[:nb]].reshape(nb * bt, self.kv_local, -1)[:length]
        return k, v

    def pack(self, block_ids):
        """Canonical blocks (n, layers, 2, bt, heads, dim) of device blocks."""
        return np.ascontiguousarray(np.stack([c[:, block_ids] for c in self.layers], axis=0).transpose(2, 0, 1, 3, 4, 5))

    def unpack(self, block_ids, blocks):
        for layer, c in enumerate(self.layers):
            c[:, block_ids] = blocks[:, layer].transpose(1, 0, 2, 3, 4)


class MiniEngine:
    def __init__(self, model: MiniModel, block_tokens=16, tp_size=1, num_blocks=256,
                 connectors=None, key_fn=None):
        self.model = model
        self.bt = block_tokens
        self.tp_size = tp_size
        self.ranks = [RankCache(model, tp_size, r, num_blocks, block_tokens) for r in range(tp_size)]
        self.free_blocks = list(range(num_blocks))
        if connectors is not None and len(connectors) != tp_size:
            raise ValueError(f"need one connector per TP rank ({tp_size}), got {len(connectors)}")
        self.connectors = connectors
        if key_fn is None and connectors and hasattr(connectors[0], "keys"):
            key_fn = connectors[0].keys
        self.key_fn = key_fn or chain_keys

    # ---- one forward step over rows at positions, attending through table ---
    def _forward(self, tokens, positions, table):
        m = self.model
        x = m.embed[np.asarray(tokens)]
        blk = np.asarray(table)[positions // self.bt]
        slot = positions % self.bt
        length = int(positions[-1]) + 1
        for layer in range(m.cfg.num_layers):
            h = m.rmsnorm(x, m.layers[layer]["attn_norm"])
            out = None
            for r, rc in enumerate(self.ranks):
                q, k, v = m.qkv(layer, h, positions, self.tp_size, r)
                rc.write(layer, blk, slot, k, v)
                kc, vc = rc.gather(layer, table, length)
                part = m.attend(layer, q, kc, vc, positions, self.tp_size, r)
                out = part if out is None else out + part      # all-reduce, rank order
            x = x + out
            x = x + m.mlp(layer, x)
        return m.logits(x[-1:])[0]

    def _lookup_and_load(self, keys, table, cap):
        """Hits of the leading blocks on every rank, loaded into table[:h]."""
        n_keys = len(keys) // 16
        if not self.connectors or n_keys == 0:
            return [0] * self.tp_size, 0
        hits = [c.lookup(keys) for c in self.connectors]
        h = min(min(hits), cap)
        if h == 0:
            return hits, 0
        for r, c in enumerate(self.connectors):
            blocks, n_ok = c.load(keys[:h * 16])
            h = min(h, n_ok)          # a failed load degrades to recompute from there
            if n_ok:
                self.ranks[r].unpack(table[:n_ok], blocks[:n_ok])
        return hits, h

    def generate(self, prompt, max_new=4):
        prompt = [int(t) for t in prompt]
        n = len(prompt)
        if n == 0:
            raise ValueError("empty prompt")
        bt = self.bt
        need = (n + max_new + bt - 1) // bt
        if need > len(self.free_blocks):
            raise RuntimeError(f"the device cache has {len(self.free_blocks)} free blocks, the request needs {need}")
        table = [self.free_blocks.pop() for _ in range(need)]
        try:
            t0 = time.perf_counter()
            keys = self.key_fn(prompt, bt)
            hits, h = self._lookup_and_load(keys, table, (n - 1) // bt)
            nchunks = (n + bt - 1) // bt
            logits = None
            for j in range(h, nchunks):
                pos = np.arange(j * bt, min((j + 1) * bt, n))
                logits = self._forward([prompt[p] for p in pos], pos, table)
            prefill_s = time.perf_counter() - t0

            stored = [0] * self.tp_size
            full = n // bt
            if self.connectors and full > h:
                for r, c in enumerate(self.connectors):
                    stored[r] = c.store(keys[:full * 16], self.ranks[r].pack(table[:full]))

            rows, out = [logits], []
            for step in range(max_new):
                tok = int(np.argmax(rows[-1]))
                out.append(tok)
                if step == max_new - 1:
                    break
                rows.append(self._forward([tok], np.array([n + step]), table))
            return GenResult(out, np.stack(rows).astype(F32, copy=False), hits, h,
                             nchunks - h, prefill_s, stored)
        finally:
            self.free_blocks.extend(table)


class DictConnector:
    """An in-process stand-in for the pool (dict of key -> block bytes), for the
    engine's own tests where no pool is involved."""

    def __init__(self, shape):
        self.shape = tuple(shape)      # canonical block shape (layers, 2, bt, heads, dim)
        self.blocks = {}

    def lookup(self, keys):
        h = 0
        while h * 16 < len(keys) and keys[h * 16:(h + 1) * 16] in self.blocks:
            h += 1
        return h

    def load(self, keys):
        n = len(keys) // 16
        out = np.empty((n,) + self.shape, dtype=F32)
        for i in range(n):
            b = self.blocks.get(keys[i * 16:(i + 1) * 16])
            if b is None:
                return out, i
            out[i] = np.frombuffer(b, dtype=F32).reshape(self.shape)
        return out, n

    def store(self, keys, blocks):
        new = 0
        for i in range(len(keys) // 16):
            k = keys[i * 16:(i + 1) * 16]
            if k not in self.blocks:
                self.blocks[k] = blocks[i].tobytes()
                new += 1
        return new
