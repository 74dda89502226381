# SPDX-License-Identifier: GPL-2.0
"""A small decoder-only transformer in numpy float32 with seeded random weights.

Nothing is downloaded: the weights come from np.random.default_rng(seed). The
model is only as large as it needs to be for its KV cache to be real: RMSNorm,
rotary position embeddings, grouped-query attention and a SiLU-gated MLP, so a
single wrong byte in a K or V entry changes the logits.

Tensor parallelism shards the KV heads (and the query heads of each group)
across tp_size ranks, as vLLM and SGLang do: rank r owns KV heads
[r * kv_local, (r + 1) * kv_local) and their slice of the output projection.
The ranks' partial outputs are summed in rank order, so a TP run is as
deterministic as a single-rank one.
"""

from dataclasses import dataclass

import numpy as np

F32 = np.float32


@dataclass(frozen=True)
class MiniConfig:
    num_layers: int = 3
    num_heads: int = 4           # query heads
    num_kv_heads: int = 2        # KV heads (GQA: num_heads / num_kv_heads per group)
    head_dim: int = 16
    hidden: int = 64
    mlp_hidden: int = 128
    vocab: int = 256
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    seed: int = 1234
    name: str = "beluga-mini"
    revision: str = "seed-1234"

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")


class MiniModel:
    """Weights and the math of one forward step; the KV cache lives in the engine."""

    def __init__(self, cfg=MiniConfig()):
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        h, d = cfg.hidden, cfg.head_dim

        def w(*shape):
            return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(F32)

        self.embed = rng.standard_normal((cfg.vocab, h)).astype(F32)
        self.layers = []
        for _ in range(cfg.num_layers):
            self.layers.append({
                "attn_norm": (1.0 + 0.1 * rng.standard_normal(h)).astype(F32),
                "wq": w(h, cfg.num_heads * d),
                "wk": w(h, cfg.num_kv_heads * d),
                "wv": w(h, cfg.num_kv_heads * d),
                "wo": w(cfg.num_heads * d, h),
                "mlp_norm": (1.0 + 0.1 * rng.standard_normal(h)).astype(F32),
                "w_gate": w(h, cfg.mlp_hidden),
                "w_up": w(h, cfg.mlp_hidden),
                "w_down": w(cfg.mlp_hidden, h),
            })
        self.final_norm = (1.0 + 0.1 * rng.standard_normal(h)).astype(F32)
        self.lm_head = w(h, cfg.vocab)
        half = d // 2
        self.inv_freq = (1.0 / (cfg.rope_theta ** (np.arange(half, dtype=np.float64) / half))).astype(F32)

    # ---- pieces -------------------------------------------------------------
    def rmsnorm(self, x, weight):
        var = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
        return (x / np.sqrt(var + F32(self.cfg.norm_eps))) * weight

    def rope(self, x, positions):
        """x: (T, heads, dim), rotated by the half-split convention."""
        ang = positions.astype(F32)[:, None] * self.inv_freq[None, :]   # (T, half)
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(F32)

    def shard(self, tp_size, tp_rank):
        """Head ranges of one TP rank: (q heads slice, kv heads slice)."""
        cfg = self.cfg
        if cfg.num_kv_heads % tp_size:
            raise ValueError(f"num_kv_heads={cfg.num_kv_heads} does not split over tp_size={tp_size}")
        kv_local = cfg.num_kv_heads // tp_size
        q_local = cfg.num_heads // tp_size
        return (slice(tp_rank * q_local, (tp_rank + 1) * q_local),
                slice(tp_rank * kv_local, (tp_rank + 1) * kv_local))

    def qkv(self, layer, h, positions, tp_size, tp_rank):
        """One rank's rotated Q and K and its V for the rows of h."""
        p, d = self.layers[layer], self.cfg.head_dim
        qs, ks = self.shard(tp_size, tp_rank)
        T = h.shape[0]
        wq = p["wq"][:, qs.start * d:qs.stop * d]
        wk = p["wk"][:, ks.start * d:ks.stop * d]
        wv = p["wv"][:, ks.start * d:ks.stop * d]
        q = (h @ wq).reshape(T, qs.stop - qs.start, d)
        k = (h @ wk).reshape(T, ks.stop - ks.start, d)
        v = (h @ wv).reshape(T, ks.stop - ks.start, d)
        return self.rope(q, positions), self.rope(k, positions), np.ascontiguousarray(v)

    def attend(self, layer, q, k_ctx, v_ctx, positions, tp_size, tp_rank):
        """Causal GQA attention of q (T, qh, d) over the context (C, kvh, d);
        returns this rank's partial output projection (T, hidden)."""
        d = self.cfg.head_dim
        T, qh, _ = q.shape
        C, kvh, _ = k_ctx.shape
        grp = qh // kvh
        # (kvh, grp*T, d) @ (kvh, d, C)
        qg = np.ascontiguousarray(q.reshape(T, kvh, grp, d).transpose(1, 2, 0, 3)).reshape(kvh, grp * T, d)
        kt = np.ascontiguousarray(k_ctx.transpose(1, 2, 0))
        vt = np.ascontiguousarray(v_ctx.transpose(1, 0, 2))
        scores = (qg @ kt) * F32(1.0 / np.sqrt(d))                     # (kvh, grp*T, C)
        qpos = np.tile(positions, grp)                                 # row -> position
        mask = np.arange(C)[None, :] > qpos[:, None]
        scores = np.where(mask[None], F32(-np.inf), scores)
        scores = scores - scores.max(axis=-1, keepdims=True)
        e = np.exp(scores)
        probs = e / e.sum(axis=-1, keepdims=True)
        out = probs @ vt                                               # (kvh, grp*T, d)
        out = out.reshape(kvh, grp, T, d).transpose(2, 0, 1, 3).reshape(T, qh * d)
        qs, _ = self.shard(tp_size, tp_rank)
        wo = self.layers[layer]["wo"][qs.start * d:qs.stop * d, :]
        return np.ascontiguousarray(out) @ wo

    def mlp(self, layer, x):
        p = self.layers[layer]
        h = self.rmsnorm(x, p["mlp_norm"])
        g = h @ p["w_gate"]
        silu = g / (F32(1.0) + np.exp(-g))
        return (silu * (h @ p["w_up"])) @ p["w_down"]

    def logits(self, x):
        return self.rmsnorm(x, self.final_norm) @ self.lm_head
