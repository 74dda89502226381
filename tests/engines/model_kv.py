# SPDX-License-Identifier: GPL-2.0
"""A small transformers model whose KV cache goes through a Beluga pool.

The model is a Qwen3 built in code from a fixed seed (nothing is downloaded):
tiny enough to run on one CPU thread in seconds, a current architecture all
the same (grouped-query attention, RoPE, q/k norms).

Prefill runs in chunks of one engine block (``TOKENS_PER_BLOCK`` tokens), as
an engine with block-aligned chunked prefill does. The KV of block j is then
computed by the same kernels on the same shapes whichever process computes it
and whatever it had cached, so a run that loads blocks from the pool must give
the cold run's tokens and logits bit for bit. Any difference is a difference
in the bytes that went through the pool.

Each block is packed as beluga.layout lays it out: for each layer K
[tokens][heads][dim] then V, taken from transformers' own cache object
(``DynamicCache.layers[l].keys``/``.values``, [batch, heads, seq, dim]).
"""

import os
import pickle
import traceback

import numpy as np
import torch
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM

import beluga
from beluga.layout import BlockLayout, ModelSpec
from beluga.store import KVStore

SEED = 20261201
TOKENS_PER_BLOCK = 16
NEW_TOKENS = 6
CONFIG = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=512, initializer_range=0.2, tie_word_embeddings=False)

# Prompts that share prefixes: a 3-block "system prompt", two conversations
# on it, and a third prompt that only the reader runs (hits on the shared
# prefix only). Lengths are not block multiples, so every prompt also has a
# partial tail that is never stored.
_rng = np.random.default_rng(SEED)
_SYSTEM = _rng.integers(1, CONFIG["vocab_size"], 3 * TOKENS_PER_BLOCK).tolist()
_TURN = _rng.integers(1, CONFIG["vocab_size"], 40).tolist()
WRITER_PROMPTS = [
    _SYSTEM + _TURN,
    _SYSTEM + _TURN[:20] + _rng.integers(1, CONFIG["vocab_size"], 27).tolist(),
]
READER_PROMPTS = WRITER_PROMPTS + [_SYSTEM + _rng.integers(1, CONFIG["vocab_size"], 9).tolist()]


def model_spec(dtype):
    c = CONFIG
    return ModelSpec(model=f"beluga-test/qwen3-tiny-seed{SEED}", num_layers=c["num_hidden_layers"],
                     num_kv_heads=c["num_key_value_heads"], head_dim=c["head_dim"], dtype=dtype,
                     tokens_per_block=TOKENS_PER_BLOCK)


def build_model(dtype):
    """The model from the fixed seed: the same weights in every process."""
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(Qwen3Config(**CONFIG)).eval()
    return model.to(getattr(torch, dtype))


def _forward(model, cache, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True)
    return out.logits[0, -1].clone()


def generate(model, tokens, cache, start):
    """Prefill tokens[start:] in block-aligned chunks on top of ``cache`` (which
    holds tokens[:start]), then NEW_TOKENS greedy steps. Returns the new tokens
    and the logits each was chosen from (a [NEW_TOKENS, vocab] tensor)."""
    assert start % TOKENS_PER_BLOCK == 0 and start < len(tokens)
    assert cache.get_seq_length() == start
    for a in range(start, len(tokens), TOKENS_PER_BLOCK):
        logits = _forward(model, cache, tokens[a:a + TOKENS_PER_BLOCK])
    out, all_logits = [], []
    for _ in range(NEW_TOKENS):
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        all_logits.append(logits)
        logits = _forward(model, cache, [nxt])
    return out, torch.stack(all_logits)


def cold_run(dtype):
    """Every reader prompt computed from scratch, no pool."""
    model = build_model(dtype)
    return [generate(model, p, DynamicCache(config=model.config), 0) for p in READER_PROMPTS]


def pack_block(cache, j):
    """Block j of a transformers cache as the pool stores it: raw bytes of
    [layers][K, V][tokens][heads][dim]."""
    s = slice(j * TOKENS_PER_BLOCK, (j + 1) * TOKENS_PER_BLOCK)
    per_layer = [torch.stack([layer.keys[0, :, s, :].permute(1, 0, 2),
                              layer.values[0, :, s, :].permute(1, 0, 2)])
                 for layer in cache.layers]
    return torch.stack(per_layer).contiguous().view(torch.uint8).reshape(-1).numpy()


# How a reader unpacks a block: the right way, and the mistakes the negative
# controls make (an adapter that swaps K and V, or lays layers out backwards).
UNPACK = {
    "right": lambda blk, l: (blk[l, 0], blk[l, 1]),
    "kv-swapped": lambda blk, l: (blk[l, 1], blk[l, 0]),
    "layers-reversed": lambda blk, l: (blk[-1 - l, 0], blk[-1 - l, 1]),
}


def cache_from_blocks(model, raws, dtype, unpack="right"):
    """A transformers cache holding the loaded blocks (raw byte arrays)."""
    c = CONFIG
    shape = (c["num_hidden_layers"], 2, TOKENS_PER_BLOCK, c["num_key_value_heads"], c["head_dim"])
    blocks = [torch.from_numpy(np.array(r, copy=True)).view(getattr(torch, dtype)).reshape(shape)
              for r in raws]
    cache = DynamicCache(config=model.config)
    for l in range(c["num_hidden_layers"]):
        ks, vs = zip(*(UNPACK[unpack](b, l) for b in blocks))
        # [tokens, heads, dim] per block -> [1, heads, tokens, dim]
        k = torch.cat(ks).permute(1, 0, 2).unsqueeze(0).contiguous()
        v = torch.cat(vs).permute(1, 0, 2).unsqueeze(0).contiguous()
        cache.update(k, v, l)
    return cache


def open_store(pool, dtype, salt):
    return KVStore(pool, BlockLayout(model_spec(dtype), pool.block_size), salt=salt)


def write_prompts(store, dtype, flip=None):
    """Prefill the writer's prompts and store their full blocks. ``flip``:
    (block index, byte offset) of one byte XORed in that block of every
    prompt as it lands in the pool. Returns the StoreResults."""
    model = build_model(dtype)
    results = []
    for tokens in WRITER_PROMPTS:
        cache = DynamicCache(config=model.config)
        full = len(tokens) // TOKENS_PER_BLOCK
        for a in range(0, full * TOKENS_PER_BLOCK, TOKENS_PER_BLOCK):
            _forward(model, cache, tokens[a:a + TOKENS_PER_BLOCK])

        def writer(i, dst, cache=cache):
            dst[:] = pack_block(cache, i)
            if flip is not None and i == flip[0]:
                dst[flip[1]] ^= 0xFF

        results.append(store.store(store.keys_for(tokens), writer=writer))
    return results


def warm_run(device, dtype, salt, unpack="right"):
    """Every reader prompt: load its leading blocks from the pool (a handle of
    its own on ``device``), then continue. Returns ([(tokens, logits)],
    [blocks loaded per prompt])."""
    with beluga.Pool(device) as pool, open_store(pool, dtype, salt) as store:
        return _warm_prompts(store, dtype, unpack)


def _warm_prompts(store, dtype, unpack):
    model = build_model(dtype)
    runs, hits = [], []
    for tokens in READER_PROMPTS:
        # the last prompt token is always computed: its logits pick the first
        # new token (engines do the same)
        usable = (len(tokens) - 1) // TOKENS_PER_BLOCK
        keys = store.keys_for(tokens)[:usable * 16]
        raws = []
        res = store.load(keys, reader=lambda i, src: raws.append(np.array(src, copy=True)))
        assert res.loaded == len(raws)
        cache = cache_from_blocks(model, raws, dtype, unpack)
        runs.append(generate(model, tokens, cache, len(raws) * TOKENS_PER_BLOCK))
        hits.append(len(raws))
    return runs, hits


def in_child(fn, *args):
    """fn(*args) in a forked process; its result comes back pickled. The fake
    kernel lives in the process, so a child inherits the pool its parent
    wrote, and only sees it by reading the pool: nothing else is passed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        code = 0
        try:
            payload = pickle.dumps(("ok", fn(*args)))
        except BaseException:
            payload, code = pickle.dumps(("error", traceback.format_exc())), 1
        with os.fdopen(w, "wb") as f:
            f.write(payload)
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"the child process died without a result (wait status {status})")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise RuntimeError(f"the child process failed:\n{value}")
    return value


def _bits(t):
    return t.contiguous().view(torch.uint8)


def differences(a, b):
    """Where two runs differ ([] when bit-identical): per prompt, the tokens,
    and the logits compared bit for bit (torch.equal on their bytes)."""
    out = []
    for n, ((ta, la), (tb, lb)) in enumerate(zip(a, b)):
        if ta != tb:
            out.append(f"prompt {n}: tokens {ta} != {tb}")
        if not torch.equal(_bits(la), _bits(lb)):
            diff = (la.float() - lb.float()).abs().max().item()
            out.append(f"prompt {n}: logits differ (max |diff| {diff:g})")
    return out
