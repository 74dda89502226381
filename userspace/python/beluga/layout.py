# SPDX-License-Identifier: LGPL-2.1-or-later
"""Where each byte of a model's KV block lives inside Beluga pool blocks.

One engine block (``tokens_per_block`` tokens of one tensor-parallel shard)
is stored under one key, every layer inside it, layer-major:

    for layer in range(num_layers):
        K[tokens][heads_local][head_dim]
        V[tokens][heads_local][head_dim]

so layer ``l`` is one contiguous range and a layer-wise reader can copy
``block + l * layer_stride`` alone.  MLA models store one latent vector
per token per layer instead of K and V:

    for layer in range(num_layers):
        latent[tokens][latent_dim]

An engine block larger than a pool block is split into ``parts``
consecutive byte ranges of ``pool_block_size`` bytes, each a pool block of
its own, stored as consecutive entries of the key chain (``keys.part_keys``).
"""

from dataclasses import dataclass, field, replace
import math

import numpy as np

LAYOUT_MHA = "layer-major-kv"
LAYOUT_MLA = "layer-major-latent"
SCHEMA_VERSION = 1

# Element types numpy has no dtype for: stored (and viewed) as unsigned
# integers of the same width, so the bytes round-trip unchanged.
_STORAGE_DTYPES = {
    "bfloat16": "<u2",
    "float8_e4m3fn": "u1",
    "float8_e4m3fnuz": "u1",
    "float8_e5m2": "u1",
    "float8_e5m2fnuz": "u1",
}


def storage_dtype(name):
    """The numpy dtype that holds elements of ``name`` byte for byte."""
    if not isinstance(name, str):
        name = np.dtype(name).name
    if name in _STORAGE_DTYPES:
        return np.dtype(_STORAGE_DTYPES[name])
    try:
        dt = np.dtype(name)
    except TypeError as e:
        raise ValueError(
            f"dtype {name!r} is not a numpy dtype name; use e.g. 'float16', "
            f"'float32' or one of {sorted(_STORAGE_DTYPES)}") from e
    if dt.kind not in "fiub" or dt.itemsize == 0:
        raise ValueError(f"dtype {name!r} is not a plain numeric element type")
    return dt


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


@dataclass(frozen=True)
class ModelSpec:
    """What a model's KV cache looks like on one tensor-parallel rank.

    ``num_kv_heads`` is the model's total; each rank holds
    ``num_kv_heads / tp_size`` of them (or one replicated head when
    ``tp_size`` is a multiple of ``num_kv_heads``, as vLLM does).
    ``latent_dim`` set means an MLA model: one latent per token per layer,
    the same on every rank.  ``extra`` holds further (name, value) pairs
    that change a block's bytes (a quantization scheme, a KV cache group)
    and therefore belong in the namespace.
    """
    model: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float16"
    tokens_per_block: int = 16
    tp_rank: int = 0
    tp_size: int = 1
    revision: str = ""
    latent_dim: int = 0
    extra: tuple = field(default_factory=tuple)

    def __post_init__(self):
        if not isinstance(self.model, str) or not self.model:
            raise ValueError("ModelSpec.model must be a non-empty string naming the model "
                             "(e.g. the Hugging Face id)")
        if not isinstance(self.revision, str):
            raise TypeError("ModelSpec.revision must be a string ('' when unknown)")
        _positive_int("num_layers", self.num_layers)
        _positive_int("tokens_per_block", self.tokens_per_block)
        _positive_int("tp_size", self.tp_size)
        if isinstance(self.tp_rank, bool) or not isinstance(self.tp_rank, (int, np.integer)):
            raise TypeError("tp_rank must be an int")
        if not 0 <= self.tp_rank < self.tp_size:
            raise ValueError(f"tp_rank {self.tp_rank} is outside 0..tp_size-1 (tp_size {self.tp_size})")
        storage_dtype(self.dtype)
        if self.latent_dim:
            _positive_int("latent_dim", self.latent_dim)
        else:
            _positive_int("num_kv_heads", self.num_kv_heads)
            _positive_int("head_dim", self.head_dim)
            h, tp = self.num_kv_heads, self.tp_size
            if h % tp and tp % h:
                raise ValueError(
                    f"num_kv_heads {h} cannot be split over tp_size {tp}: heads must be a "
                    f"multiple of tp_size (each rank holds heads/tp) or tp_size a multiple of "
                    f"heads (each rank holds one replicated head)")
        extra = tuple(self.extra.items()) if isinstance(self.extra, dict) else tuple(self.extra)
        for item in extra:
            if (not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str)):
                raise TypeError("ModelSpec.extra must be (name, value) pairs with str names")
        object.__setattr__(self, "extra", tuple(sorted((k, str(v)) for k, v in extra)))

    @property
    def is_mla(self):
        return bool(self.latent_dim)

    @property
    def heads_local(self):
        """KV heads this rank holds (0 for MLA, which has no heads)."""
        if self.is_mla:
            return 0
        return max(1, self.num_kv_heads // self.tp_size)

    @property
    def kv_dtype(self):
        return self.dtype if isinstance(self.dtype, str) else np.dtype(self.dtype).name


class BlockLayout:
    """Byte geometry of one engine block in a pool of ``pool_block_size``."""

    def __init__(self, spec, pool_block_size):
        if not isinstance(spec, ModelSpec):
            raise TypeError("BlockLayout needs a ModelSpec")
        self.pool_block_size = _positive_int("pool_block_size", pool_block_size)
        self.spec = spec
        self.dtype = storage_dtype(spec.dtype)
        self.itemsize = self.dtype.itemsize
        self.tokens = spec.tokens_per_block
        self.layers = spec.num_layers
        if spec.is_mla:
            self.layout_id = LAYOUT_MLA
            self.shape = (self.layers, self.tokens, spec.latent_dim)
            per_layer_token = spec.latent_dim
        else:
            self.layout_id = LAYOUT_MHA
            self.shape = (self.layers, 2, self.tokens, spec.heads_local, spec.head_dim)
            per_layer_token = 2 * spec.heads_local * spec.head_dim
        self.bytes_per_token = self.layers * per_layer_token * self.itemsize
        self.block_bytes = self.tokens * self.bytes_per_token
        self.layer_stride = self.tokens * per_layer_token * self.itemsize
        self.parts = math.ceil(self.block_bytes / self.pool_block_size)
        self.part_bytes = min(self.block_bytes, self.pool_block_size)

    @property
    def fill_ratio(self):
        """Share of the pool bytes an engine block occupies that it uses."""
        return self.block_bytes / (self.parts * self.pool_block_size)

    def k_offset(self, layer):
        """Byte offset of layer ``layer``'s K (the latent, for MLA)."""
        self._check_layer(layer)
        return layer * self.layer_stride

    def v_offset(self, layer):
        """Byte offset of layer ``layer``'s V; MLA has none."""
        if self.spec.is_mla:
            raise ValueError("an MLA layout has no V: the latent is at k_offset()")
        return self.k_offset(layer) + self.layer_stride // 2

    @property
    def kv_bytes(self):
        """Bytes of one layer's K (or V) in a block; the latent for MLA."""
        return self.layer_stride if self.spec.is_mla else self.layer_stride // 2

    def _check_layer(self, layer):
        if not 0 <= layer < self.layers:
            raise IndexError(f"layer {layer} is outside 0..{self.layers - 1}")

    def part_ranges(self):
        """(start, length) of each part inside the engine block's bytes."""
        return [(i * self.pool_block_size,
                 min(self.pool_block_size, self.block_bytes - i * self.pool_block_size))
                for i in range(self.parts)]

    def view(self, buf):
        """A numpy view of one engine block's bytes, shaped ``self.shape``.

        ``buf`` is any buffer of at least ``block_bytes`` bytes: a pool
        block (when ``parts == 1``), a staging bytearray, an ndarray.  The
        view shares memory with ``buf``; it is read-only when ``buf`` is.
        """
        if isinstance(buf, np.ndarray):
            if not buf.flags.c_contiguous:
                raise ValueError("a block view needs a C-contiguous array (it would be a copy)")
            raw = buf.reshape(-1).view(np.uint8)
        else:
            raw = np.frombuffer(buf, dtype=np.uint8)
        if raw.size < self.block_bytes:
            raise ValueError(f"buffer of {raw.size} bytes is smaller than one engine block "
                             f"({self.block_bytes} bytes)")
        return raw[:self.block_bytes].view(self.dtype).reshape(self.shape)

    def empty(self, n=None):
        """A zeroed host array for one block (or ``n`` blocks)."""
        shape = self.shape if n is None else (n,) + self.shape
        return np.zeros(shape, dtype=self.dtype)

    @staticmethod
    def fit_tokens(spec, pool_block_size, multiple_of=16):
        """The largest multiple of ``multiple_of`` tokens whose block fits one
        pool block; ``multiple_of`` when even that does not fit (then the
        block is stored in parts)."""
        one = BlockLayout(replace(spec, tokens_per_block=multiple_of), pool_block_size)
        return max(1, pool_block_size // one.block_bytes) * multiple_of

    def describe(self):
        s = self.spec
        geom = (f"latent {s.latent_dim}" if s.is_mla else
                f"{s.heads_local} of {s.num_kv_heads} kv heads x {s.head_dim}")
        return (f"{s.model}: {self.layers} layers, {geom}, {s.kv_dtype}, "
                f"{self.tokens} tokens/block, tp {s.tp_rank}/{s.tp_size}: "
                f"{self.block_bytes} bytes/block in {self.parts} pool block(s) of "
                f"{self.pool_block_size} ({self.fill_ratio:.1%} used)")

    def __repr__(self):
        return f"BlockLayout({self.describe()})"
