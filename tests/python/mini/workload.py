# SPDX-License-Identifier: GPL-2.0
"""Synthetic prompts that share prefixes: one system prompt, several
conversations of several turns each (turn t+1 = turn t + an answer + a new
user message), as a chat service sends them."""

import numpy as np


def conversations(seed=7, block_tokens=16, system_blocks=3, n_conv=3, turns=3, vocab=256):
    """Prompts in arrival order: for each turn, each conversation's prompt."""
    rng = np.random.default_rng(seed)
    system = rng.integers(0, vocab, system_blocks * block_tokens).tolist()
    history = [list(system) for _ in range(n_conv)]
    out = []
    for _ in range(turns):
        for c in range(n_conv):
            # odd lengths, so block boundaries fall inside messages
            msg = rng.integers(0, vocab, int(rng.integers(block_tokens // 2, 2 * block_tokens + 5))).tolist()
            history[c] = history[c] + msg
            out.append(list(history[c]))
            answer = rng.integers(0, vocab, int(rng.integers(3, block_tokens))).tolist()
            history[c] = history[c] + answer
    return out


def expected_hits(prompts, block_tokens):
    """For each prompt, run in order against a pool that starts empty and gets
    every prompt's full blocks stored after its prefill: the leading blocks
    already present, capped at (len - 1) // block_tokens (the last prompt
    token's chunk is always computed)."""
    seen, hits = set(), []
    for p in prompts:
        full = len(p) // block_tokens
        prefixes = [tuple(p[:(j + 1) * block_tokens]) for j in range(full)]
        h = 0
        while h < len(prefixes) and prefixes[h] in seen:
            h += 1
        hits.append(min(h, (len(p) - 1) // block_tokens))
        seen.update(prefixes)
    return hits
