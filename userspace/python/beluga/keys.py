# SPDX-License-Identifier: LGPL-2.1-or-later
"""Block keys and namespaces.

A Beluga key is 16 bytes (struct beluga_key {lo, hi}, little-endian); a
namespace is a u64.  Two engines find each other's blocks exactly when they
agree on both, so both are derived here from documented inputs only (no
process seed):

- ``namespace()``: SHA-256 over a tagged, length-prefixed record of every
  field that changes a block's bytes; ``Namespace.describe()`` lists them.
- ``sha256_chain()``: SGLang's page hash (``get_hash_str`` in
  python/sglang/srt/mem_cache/hicache_storage.py, commit 001067ff),
  ``sha256(bytes.fromhex(prior_hex) || token_0 u32le || ...)``, the first
  page with no prior; each key is the digest's first 16 bytes.
- ``fnv_chain()``: libbeluga's native FNV-1a-128 chain (``beluga.hash_chain``).
- ``digest16()``: 16 bytes from a key an engine computed itself.
- ``part_keys()``: the keys of the parts of a block split over pool blocks.
"""

from array import array
import hashlib
import struct
import sys

KEY_BYTES = 16
NAMESPACE_SCHEMA = b"beluga-namespace-v1"
_PART_TAG = b"beluga-part-v1\0"
_DIGEST_TAG = b"beluga-digest16-v1\0"
_U32 = "I" if array("I").itemsize == 4 else "L"


class Namespace:
    """A u64 namespace and the named fields it was derived from."""

    __slots__ = ("value", "fields")

    def __init__(self, fields):
        self.fields = tuple((str(k), str(v)) for k, v in fields)
        names = [k for k, _ in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"namespace field names repeat: {names}")
        h = hashlib.sha256(NAMESPACE_SCHEMA + b"\0")
        for k, v in self.fields:
            kb, vb = k.encode(), v.encode()
            h.update(struct.pack("<I", len(kb)) + kb + struct.pack("<I", len(vb)) + vb)
        self.value = int.from_bytes(h.digest()[:8], "little")

    def __int__(self):
        return self.value

    def __index__(self):
        return self.value

    def __eq__(self, other):
        return isinstance(other, Namespace) and self.fields == other.fields

    def __hash__(self):
        return hash(self.fields)

    def describe(self):
        """One line per field, then the value: diff two of these to see
        why two engines miss each other's blocks."""
        width = max((len(k) for k, _ in self.fields), default=0)
        lines = [f"  {k:<{width}} = {v}" for k, v in self.fields]
        return f"namespace 0x{self.value:016x}\n" + "\n".join(lines)

    def diff(self, other):
        """The fields in which two namespaces differ, as (name, mine, theirs)."""
        a, b = dict(self.fields), dict(other.fields)
        return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]

    def __repr__(self):
        return f"Namespace(0x{self.value:016x})"


def namespace(layout, salt=None, **extra):
    """The namespace of blocks laid out by ``layout`` (a BlockLayout).

    ``salt`` separates tenants or LoRA adapters whose blocks must not be
    shared; ``extra`` adds further named fields (a KV cache group, a pool
    name).  Every field is tagged, so ("ab", "c") and ("a", "bc") differ.
    """
    s = layout.spec
    fields = [
        ("model", s.model),
        ("revision", s.revision),
        ("kv_dtype", s.kv_dtype),
        ("layout", layout.layout_id),
        ("layout_schema", 1),
        ("layers", s.num_layers),
    ]
    if s.is_mla:
        fields.append(("latent_dim", s.latent_dim))
    else:
        fields += [("kv_heads", s.num_kv_heads), ("head_dim", s.head_dim)]
    fields += [
        ("tokens_per_block", s.tokens_per_block),
        ("parts", layout.parts),
        ("part_bytes", layout.part_bytes),
    ]
    if not s.is_mla:            # every rank holds the same MLA latent
        fields += [("tp_rank", s.tp_rank), ("tp_size", s.tp_size)]
    fields += [("x." + k, v) for k, v in s.extra]
    fields += [("x." + k, v) for k, v in sorted(extra.items())]
    if salt is not None:
        fields.append(("salt", salt if isinstance(salt, str) else repr(salt)))
    return Namespace(fields)


def _token_bytes(tokens):
    if not any(isinstance(t, tuple) for t in tokens):
        a = array(_U32, tokens)                # u32, range-checked
        if sys.byteorder != "little":
            a.byteswap()
        return a.tobytes()
    out = bytearray()
    for t in tokens:
        if isinstance(t, tuple):        # EAGLE bigrams hash both ids
            for e in t:
                out += int(e).to_bytes(4, "little", signed=False)
        else:
            out += int(t).to_bytes(4, "little", signed=False)
    return bytes(out)


def sglang_page_hash(tokens, prior_hex=None):
    """SGLang's ``get_hash_str``: the 64-character hex hash of one page."""
    h = hashlib.sha256()
    if prior_hex:
        h.update(bytes.fromhex(prior_hex))
    h.update(_token_bytes(tokens))
    return h.hexdigest()


def sglang_hash_chain(tokens, tokens_per_block, prior_hex=None):
    """The hex page hashes of every full page of ``tokens``, as SGLang
    computes them (a trailing partial page gets none)."""
    if tokens_per_block < 1:
        raise ValueError("tokens_per_block must be >= 1")
    tokens = list(tokens)
    out, prior = [], prior_hex
    for i in range(len(tokens) // tokens_per_block):
        prior = sglang_page_hash(tokens[i * tokens_per_block:(i + 1) * tokens_per_block], prior)
        out.append(prior)
    return out


def sha256_chain(tokens, tokens_per_block, prior_hex=None):
    """Beluga keys (n*16 bytes) for SGLang's page chain: the first 16 bytes
    of each page hash."""
    return b"".join(bytes.fromhex(h)[:KEY_BYTES]
                    for h in sglang_hash_chain(tokens, tokens_per_block, prior_hex))


def fnv_chain(tokens, tokens_per_block, parent=None):
    """Beluga keys (n*16 bytes) of libbeluga's native FNV-1a-128 chain."""
    import beluga
    return bytes(beluga.hash_chain(tokens, tokens_per_block, parent))


SCHEMES = {"sha256": sha256_chain, "fnv": fnv_chain}


def chain(scheme, tokens, tokens_per_block):
    """Keys of ``tokens`` under a named scheme ("sha256" or "fnv")."""
    try:
        fn = SCHEMES[scheme]
    except KeyError:
        raise ValueError(f"unknown key scheme {scheme!r}; use one of {sorted(SCHEMES)}") from None
    return fn(tokens, tokens_per_block)


def digest16(engine_key):
    """16 key bytes from a key the engine computed.

    - 16 bytes: used as they are;
    - 32 bytes (a SHA-256 digest, e.g. vLLM's BlockHash), or a 64-character
      hex string (SGLang's page hash): its first 16 bytes, so that the same
      digest gives the same key whichever engine passes it;
    - anything else (other bytes, other strings, ints such as LMCache's
      chunk hashes): SHA-256 of a type-tagged encoding, first 16 bytes.
    """
    if isinstance(engine_key, (bytes, bytearray, memoryview)):
        b = bytes(engine_key)
        if len(b) == KEY_BYTES:
            return b
        if len(b) == 32:
            return b[:KEY_BYTES]
        return hashlib.sha256(_DIGEST_TAG + b"bytes\0" + b).digest()[:KEY_BYTES]
    if isinstance(engine_key, str):
        if len(engine_key) == 64:
            try:
                return bytes.fromhex(engine_key)[:KEY_BYTES]
            except ValueError:
                pass
        return hashlib.sha256(_DIGEST_TAG + b"str\0" + engine_key.encode()).digest()[:KEY_BYTES]
    if isinstance(engine_key, int) and not isinstance(engine_key, bool):
        n = (engine_key.bit_length() + 8) // 8 or 1
        return hashlib.sha256(_DIGEST_TAG + b"int\0" +
                              engine_key.to_bytes(n, "little", signed=True)).digest()[:KEY_BYTES]
    raise TypeError(f"cannot make a key from {type(engine_key).__name__}: pass bytes, str or int")


def join(keys16):
    """Concatenate 16-byte keys into one keys buffer."""
    out = b"".join(bytes(k) for k in keys16)
    if len(out) % KEY_BYTES:
        raise ValueError("every key must be 16 bytes")
    return out


def split(keys):
    """A keys buffer as a list of 16-byte keys."""
    b = bytes(keys)
    if len(b) % KEY_BYTES:
        raise ValueError(f"a keys buffer holds whole 16-byte keys; got {len(b)} bytes")
    return [b[i:i + KEY_BYTES] for i in range(0, len(b), KEY_BYTES)]


def part_keys(keys, parts):
    """The pool keys of blocks stored in ``parts`` parts each: part i of a
    block with key k is SHA-256(tag || k || i || parts)[:16], in order, so
    the parts of consecutive blocks are consecutive chain entries.  With one
    part a block's key is used as it is."""
    b = bytes(keys)
    if len(b) % KEY_BYTES:
        raise ValueError(f"a keys buffer holds whole 16-byte keys; got {len(b)} bytes")
    if parts == 1:
        return b
    if parts < 1:
        raise ValueError("parts must be >= 1")
    out = bytearray()
    for i in range(0, len(b), KEY_BYTES):
        k = b[i:i + KEY_BYTES]
        for p in range(parts):
            out += hashlib.sha256(_PART_TAG + k + struct.pack("<II", p, parts)).digest()[:KEY_BYTES]
    return bytes(out)
