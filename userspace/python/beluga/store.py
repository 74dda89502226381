# SPDX-License-Identifier: LGPL-2.1-or-later
"""KVStore: engine-neutral KV block storage on a Beluga pool.

One key per engine block, every layer inside it (``layout.BlockLayout``).
A block becomes visible whole at PUBLISH, so no "done" marker is needed.

Store: count-only LOOKUP (skip the leading run already present) -> ALLOC
the misses -> write -> PUBLISH.  A lost race (PUBLISH_EXISTS) counts as
stored: the key is present and the kernel freed our block.  Anything that
goes wrong frees what was allocated.

Load: LOOKUP with PIN -> copy out -> RELEASE.  The pins keep the blocks
from being evicted or reused while they are read, so a loaded block is the
one that was published, never a half-written or recycled one.  Blocks past
the leading run are reported as not loaded.

Shared (multi-host, non-coherent) pools: writers flush a block before
PUBLISH, readers invalidate it after the pinned LOOKUP.
"""

from array import array
import errno
import functools
import threading

import numpy as np

import beluga
from . import keys as _keys

# The binding's own method, taken once: tests and wrappers may replace
# beluga.Pool with a class of their own, whose pools this tells apart.
_BINDING_LOOKUP_COUNT = beluga.Pool.lookup_count
_BINDING_LOOKUP = beluga.Pool.lookup
# store() and load() take the binding's one-call paths (PoolMap.store_blocks,
# load_blocks), which take these steps themselves, only where a subclass has
# none of its own
_ONE_CALL_STEPS = ("lookup", "allocate", "_alloc_blocks", "_source", "_dest", "_publish",
                   "_free", "_release", "_store_flat", "_load_flat")

KEY_BYTES = _keys.KEY_BYTES
_U8 = np.dtype(np.uint8)


def _keybuf(keys):
    """A keys argument as bytes of n*16; accepts bytes-likes, numpy arrays
    and sequences of 16-byte keys."""
    if type(keys) is bytes:             # the common case, returned as it is
        if len(keys) % KEY_BYTES:
            raise ValueError(f"a keys buffer holds whole 16-byte keys; got {len(keys)} bytes "
                             f"(pass n*16 bytes, or a list of 16-byte keys)")
        return keys
    if isinstance(keys, (list, tuple)):
        return _keys.join(keys)
    if isinstance(keys, np.ndarray):
        if not keys.flags.c_contiguous:
            keys = np.ascontiguousarray(keys)
        b = keys.tobytes()
    else:
        b = bytes(memoryview(keys).cast("B"))
    if len(b) % KEY_BYTES:
        raise ValueError(f"a keys buffer holds whole 16-byte keys; got {len(b)} bytes "
                         f"(pass n*16 bytes, or a list of 16-byte keys)")
    return b


class StoreResult:
    """What a store did with each of ``requested`` blocks, in key order:
    the first ``skipped`` were present already; then ``stored`` were
    published (``exists`` of them by someone else first, which is as good);
    ``failed`` lists block indices PUBLISH refused; ``not_stored`` counts
    the blocks past those for which the pool had no room (``nospace``)."""

    __slots__ = ("requested", "skipped", "stored", "exists", "failed", "not_stored")

    def __init__(self, requested, skipped=0):
        self.requested, self.skipped = requested, skipped
        self.stored = self.exists = self.not_stored = 0
        self.failed = []

    @property
    def nospace(self):
        return self.not_stored > 0

    @property
    def ok(self):
        return not self.failed and not self.not_stored

    @property
    def present(self):
        """Blocks present in the pool after the call (as far as we know)."""
        return self.skipped + self.stored

    def __repr__(self):
        return (f"StoreResult(requested={self.requested}, skipped={self.skipped}, "
                f"stored={self.stored}, exists={self.exists}, failed={self.failed}, "
                f"not_stored={self.not_stored})")


class LoadResult:
    """The first ``loaded`` of ``requested`` blocks were copied out; the
    blocks at ``missing`` (every index from ``loaded`` on) were not, and
    their destination buffers were not written."""

    __slots__ = ("requested", "loaded")

    def __init__(self, requested, loaded):
        self.requested, self.loaded = requested, loaded

    @property
    def missing(self):
        return list(range(self.loaded, self.requested))

    @property
    def ok(self):
        return self.loaded == self.requested

    def __repr__(self):
        return f"LoadResult(requested={self.requested}, loaded={self.loaded})"


class Pinned:
    """Blocks pinned by a LOOKUP+PIN: readable until ``release()``.

    ``count`` whole engine blocks, in key order; ``offsets`` holds their
    pool blocks (``parts`` each).  Use as a context manager, or call
    ``release()``; releasing twice is harmless."""

    # Slots: made on every pinned lookup, where an instance dict costs as
    # much as the rest of the Python side.
    __slots__ = ("_store", "count", "offsets", "_released")

    def __init__(self, store, count, offsets):
        self._store, self.count = store, count
        self.offsets = offsets
        self._released = count == 0

    def part_views(self, i):
        """Read-only uint8 views of block ``i``'s pool blocks."""
        self._check(i)
        s = self._store
        m = len(s._ranges)
        return [s._part_view(self.offsets[i * m + p], length, readonly=True)
                for p, (_, length) in enumerate(s._ranges)]

    def view(self, i):
        """Block ``i`` as a numpy array shaped like the layout: a zero-copy,
        read-only view when the block is one pool block, else a copy."""
        s = self._store
        if s.layout.parts == 1:
            return s.layout.view(self.part_views(i)[0])
        buf = np.empty(s.layout.block_bytes, np.uint8)
        self.copy_out(i, buf)
        return s.layout.view(buf)

    def copy_out(self, i, dst):
        """Copy block ``i``'s bytes into the writable buffer ``dst``."""
        self._check(i)
        s = self._store
        m = len(s._ranges)
        s._copy(self.offsets[i * m:(i + 1) * m], [s._dest(dst)], into_pool=False)

    def _check(self, i):
        if self._released:
            raise ValueError("these blocks were released: pin them again to read them")
        if not 0 <= i < self.count:
            raise IndexError(f"block {i} is outside the {self.count} pinned")

    def release(self):
        if not self._released:
            self._released = True
            self._store._release(self.offsets)

    def detach(self):
        """Hand the pins to the caller: returns the offsets, which the
        caller must pass to ``KVStore.release_blocks`` itself."""
        self._released = True
        return self.offsets

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        if not self._released:
            try:
                self.release()
            except Exception:
                pass


class Allocation:
    """Pool blocks allocated for ``count`` engine blocks, not yet visible.

    Write each block through ``block(i)`` (a writable flat uint8 array of
    ``layout.block_bytes``; for split blocks a staging buffer that
    ``publish`` scatters into the parts), then ``publish(keys)``, or
    ``free()``.  Publishing or freeing twice is harmless.

    ``evicted`` lists the ``(ns, key)`` of each published block the pool
    evicted to make room, least recently used first: pool keys (part keys
    of split blocks), of any namespace; empty when nothing was evicted or
    the module predates the report."""

    def __init__(self, store, count, offsets, evicted=()):
        self._store, self.count, self.offsets = store, count, offsets
        self.evicted = list(evicted)
        self._staging = {}
        self._done = count == 0

    def block(self, i):
        if self._done:
            raise ValueError("this allocation was published or freed")
        if not 0 <= i < self.count:
            raise IndexError(f"block {i} is outside the {self.count} allocated")
        s = self._store
        if s.layout.parts == 1:
            return s._part_view(self.offsets[i], s.layout.block_bytes)
        if i not in self._staging:
            self._staging[i] = np.zeros(s.layout.block_bytes, np.uint8)
        return self._staging[i]

    def view(self, i):
        """Block ``i`` as a writable numpy array shaped like the layout."""
        return self._store.layout.view(self.block(i))

    def publish(self, keys, result=None):
        """Make the blocks visible under ``keys`` (one per block, in order).
        Returns (or fills in) a StoreResult; failed blocks are freed."""
        s = self._store
        kb = _keybuf(keys)
        if len(kb) // KEY_BYTES != self.count:
            raise ValueError(f"publish needs one key per allocated block: {self.count} blocks, "
                             f"{len(kb) // KEY_BYTES} keys")
        if self._done:
            raise ValueError("this allocation was published or freed already")
        m = s.layout.parts
        try:
            for i, staged in self._staging.items():
                s.write_block(self.offsets[i * m:(i + 1) * m], staged)
        except BaseException:
            self.free()
            raise
        self._done = True
        self._staging.clear()
        return s.publish_blocks(self.offsets, kb, result)

    def free(self):
        if not self._done:
            self._done = True
            self._staging.clear()
            self._store._free(self.offsets)

    def detach(self):
        """Hand the blocks to the caller (which writes them in place and
        calls ``KVStore.publish_blocks`` or ``free_blocks``): the offsets."""
        if self._staging:
            raise ValueError("staged blocks would be lost: publish them instead")
        self._done = True
        return self.offsets

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


# Blocks, except lookups/loads (calls) and load_failures (loads that did
# not load every block asked for).
COUNTERS = ("lookups", "hits", "misses", "stored", "exists", "store_failed", "not_stored",
            "loads", "loaded", "load_missing", "load_failures")


class KVStore:
    """Engine blocks of one layout in one namespace of a pool.

    ``salt`` separates tenants/LoRA adapters; ``key_scheme`` ("sha256", the
    SGLang-compatible chain, or "fnv", libbeluga's) is what ``keys_for``
    uses; ``shared`` forces (True) or suppresses (False) the cache
    maintenance of multi-host pools, None asks the pool; ``namespace``
    overrides the derived one (a ``keys.Namespace``).  Thread-safe: the
    binding is, and the counters take a lock.
    """

    def __init__(self, pool, layout, salt=None, key_scheme="sha256", shared=None,
                 namespace=None, **ns_extra):
        if layout.pool_block_size != pool.block_size:
            raise ValueError(f"the layout was computed for {layout.pool_block_size}-byte pool "
                             f"blocks but the pool's are {pool.block_size} bytes: build the "
                             f"BlockLayout with pool.block_size")
        if key_scheme not in _keys.SCHEMES:
            raise ValueError(f"unknown key scheme {key_scheme!r}; use one of "
                             f"{sorted(_keys.SCHEMES)}")
        self.pool, self.layout, self.key_scheme = pool, layout, key_scheme
        self._ns = namespace if namespace is not None else _keys.namespace(layout, salt, **ns_extra)
        self.shared = self._pool_is_shared(pool) if shared is None else bool(shared)
        if self.shared and not hasattr(beluga, "flush_range"):
            raise RuntimeError("this pool is shared between hosts but the beluga binding has "
                               "no flush_range/invalidate_range: update the binding")
        self._map = pool.map()
        # Asked for on every block copied: (start, length) of each part.
        self._ranges = tuple(layout.part_ranges())
        # Asked for on every lookup and pin: pool blocks per engine block.
        self._parts = layout.parts
        # Pools without lookup_count (an older binding, a test double) are
        # asked through the count-only lookup, which answers the same.
        self._lookup_count = getattr(pool, "lookup_count", None) or \
            (lambda ns, keys: pool.lookup(ns, keys, pin=False)[0])
        self._lock = threading.Lock()
        self._counters = dict.fromkeys(COUNTERS, 0)
        # lookup()'s calls, hits and misses, counted by the binding's own
        # lookup_count where it answers them (stats() adds them in). Only
        # when an engine block is one pool block: the binding counts pool
        # blocks. None: lookup() counts every call itself.
        self._tally = array("Q", (0, 0, 0)) if (
            layout.parts == 1
            and getattr(type(pool), "lookup_count", None) is _BINDING_LOOKUP_COUNT) else None
        # pin()'s hot path where the binding's own lookup would answer: its
        # pinned lookup counting into the same tally (None: pin() counts;
        # a shared pool's pins are followed by invalidates, done there).
        self._lookup_pinned = pool.lookup_pinned if (
            self._tally is not None and not self.shared and hasattr(pool, "lookup_pinned")
            and getattr(type(pool), "lookup", None) is _BINDING_LOOKUP) else None
        # lookup()'s hot path as a callable of the keys that runs no Python
        # code (a frame and its attribute loads cost a third of a 64-key
        # lookup): the binding answers keys as bytes, general() the rest.
        # Not where a subclass has its own lookup, nor past the ns it was
        # made with (ns is read-only).
        if (self._tally is not None and type(self).lookup is KVStore.lookup
                and hasattr(pool, "lookup_count_or")):
            self.lookup = functools.partial(pool.lookup_count_or, self._ns.value, self._tally,
                                            self._lookup_general)
        # store()'s hot path: the binding's mapping doing its lookup, ALLOC,
        # copies and PUBLISH in one call, with the steps in the same order
        # and the same errors (None: store() makes the calls itself).
        # (A tally means the binding's own pool: beluga.Pool has no subclasses.)
        one_call = (self._tally is not None and not self.shared
                    and all(getattr(type(self), name) is getattr(KVStore, name)
                            for name in _ONE_CALL_STEPS))
        self._store_blocks = getattr(self._map, "store_blocks", None) if one_call else None
        # load()'s: the pinned lookup, copies and RELEASE in one call
        self._load_blocks = getattr(self._map, "load_blocks", None) if one_call else None

    @property
    def ns(self):
        """The store's namespace (``beluga.keys.Namespace``), fixed at construction."""
        return self._ns

    @staticmethod
    def _pool_is_shared(pool):
        info = getattr(pool, "info", None)
        if info is None:
            return False
        try:
            i = info()
        except Exception:
            return False
        get = i.get if isinstance(i, dict) else (lambda k, d=None: getattr(i, k, d))
        return bool(get("shared", False))

    # ---- helpers ---------------------------------------------------------

    def _part_view(self, offset, length, readonly=False):
        if self._map is None:
            raise ValueError("this KVStore is closed: make a new one on an open pool")
        mv = self._map.block(int(offset))
        return np.frombuffer(mv.toreadonly() if readonly else mv, np.uint8, count=length)

    def _pool_bytes(self, offsets, readonly=False, aligned=False):
        """The whole mapping as one flat uint8 array, for the copies of one
        call: a block is then a slice of it, where a view per block
        (``_part_view``) costs a memoryview and an array each.  The array
        holds one export of the mapping until it is dropped.  Checks that
        every offset is a block of the mapping first (``aligned``: they
        come from the pool, so only that they are inside the mapping)."""
        if self._map is None:
            raise ValueError("this KVStore is closed: make a new one on an open pool")
        a = np.frombuffer(self._map, np.uint8)
        if len(offsets):
            bs = self.layout.pool_block_size
            if (min(offsets) < 0 or max(offsets) + bs > a.size
                    or not aligned and any(off % bs for off in offsets)):
                for off in offsets:
                    self._map.block(int(off))   # raises the binding's error
        if readonly:
            a.flags.writeable = False
        return a

    def _copy(self, offsets, blocks, into_pool, aligned=False):
        """Copy engine blocks (flat uint8 arrays: ``_source``, ``_dest``)
        into their pool blocks (``into_pool``) or out of them, ``parts``
        offsets per block, in order: one copy a byte."""
        pool = self._pool_bytes(offsets, readonly=not into_pool, aligned=aligned)
        ranges = self._ranges
        m = len(ranges)
        for j, block in enumerate(blocks):
            for (start, length), off in zip(ranges, offsets[j * m:(j + 1) * m]):
                if into_pool:
                    pool[off:off + length] = block[start:start + length]
                else:
                    block[start:start + length] = pool[off:off + length]

    def _dest(self, dst):
        if (type(dst) is np.ndarray and dst.dtype is _U8 and dst.ndim == 1
                and dst.size == self.layout.block_bytes and dst.flags.c_contiguous
                and dst.flags.writeable):
            return dst                  # a flat byte buffer already (what adapters pass)
        if isinstance(dst, np.ndarray):
            if not dst.flags.c_contiguous or not dst.flags.writeable:
                raise ValueError("a load destination must be a writable C-contiguous array")
            d = dst.reshape(-1).view(np.uint8)
        else:
            mv = memoryview(dst)
            if mv.readonly:
                raise ValueError("a load destination must be writable")
            d = np.frombuffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv, np.uint8)
        if d.size != self.layout.block_bytes:
            raise ValueError(f"a block buffer must be {self.layout.block_bytes} bytes "
                             f"({self.layout.shape} {self.layout.dtype}); got {d.size}")
        return d

    def _source(self, src):
        if (type(src) is np.ndarray and src.dtype is _U8 and src.ndim == 1
                and src.size == self.layout.block_bytes and src.flags.c_contiguous):
            return src
        if isinstance(src, np.ndarray):
            a = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
        else:
            a = np.frombuffer(memoryview(src).cast("B"), np.uint8)
        if a.size != self.layout.block_bytes:
            raise ValueError(f"a block buffer must be {self.layout.block_bytes} bytes "
                             f"({self.layout.shape} {self.layout.dtype}); got {a.size}")
        return a

    def _count(self, **kw):
        with self._lock:
            for k, v in kw.items():
                self._counters[k] += v

    def _release(self, offsets):
        if len(offsets):
            self.pool.release(offsets)

    def _free(self, offsets):
        if len(offsets):
            self.pool.free(offsets)

    # ---- block-level calls, for adapters that copy in and out themselves --

    def block_offsets(self, offsets, i):
        """The pool blocks (``parts`` of them) of engine block ``i``."""
        m = self.layout.parts
        return offsets[i * m:(i + 1) * m]

    def block_view(self, offsets, writable=False):
        """Flat uint8 view of one engine block held in a single pool block.

        Defined only for ``layout.parts == 1``: the parts of a split block
        are separate pool blocks, not one contiguous range, so there is no
        zero-copy view of it and this raises ValueError (copy with
        ``read_block``/``write_block``, or view each part alone)."""
        lay = self.layout
        if lay.parts != 1:
            raise ValueError(
                f"an engine block of {lay.block_bytes} bytes is split over {lay.parts} pool "
                f"blocks of {lay.pool_block_size} bytes and has no zero-copy view: copy it "
                f"with read_block/write_block, or use at most "
                f"{lay.pool_block_size // lay.bytes_per_token} tokens_per_block "
                f"(or larger pool blocks) to keep a block in one pool block")
        if len(offsets) != 1:
            raise ValueError(f"one engine block is one pool block here: pass its one offset, "
                             f"got {len(offsets)}")
        return self._part_view(offsets[0], lay.block_bytes, readonly=not writable)

    def _one_block(self, offsets):
        m = len(self._ranges)
        if len(offsets) != m:
            raise ValueError(f"one engine block is {m} pool block(s) here: pass its {m} "
                             f"offset(s) (block_offsets(offsets, i)), got {len(offsets)}")
        return offsets

    def write_block(self, offsets, src):
        """Copy one engine block's bytes into its pool blocks."""
        self._copy(self._one_block(offsets), [self._source(src)], into_pool=True)

    def read_block(self, offsets, dst):
        """Copy one engine block's bytes out of its (pinned) pool blocks."""
        self._copy(self._one_block(offsets), [self._dest(dst)], into_pool=False)

    def publish_blocks(self, offsets, keys, result=None):
        """PUBLISH written blocks (``parts`` pool blocks per key, in order).
        Blocks PUBLISH refuses are freed; on an exception all are."""
        kb = _keybuf(keys)
        m = self.layout.parts
        count = len(kb) // KEY_BYTES
        if len(offsets) != count * m:
            raise ValueError(f"{count} keys need {count * m} pool blocks, got {len(offsets)}")
        res = result if result is not None else StoreResult(count)
        if count == 0:
            return res
        return self._published(offsets, self._publish(offsets, _keys.part_keys(kb, m)),
                               count, res)

    def _publish(self, offsets, pool_keys):
        """PUBLISH (flushed first on a shared pool): its results; on an
        exception every block is freed."""
        try:
            if self.shared:
                for off in offsets:
                    beluga.flush_range(self._map.block(int(off)))
            return self.pool.publish(self._ns.value, offsets, pool_keys).results
        except BaseException:
            try:
                self._free(offsets)
            except Exception:
                pass
            raise

    def _published(self, offsets, results, count, res):
        """Account PUBLISH's ``results`` for ``count`` engine blocks into
        ``res`` and the counters, and free the pool blocks it refused."""
        m = self.layout.parts
        unchanged = array("Q")
        base = res.requested - count - res.not_stored
        stored = exists = 0
        if min(results) >= 0:           # all published: count without a loop a block
            stored = count
            if m == 1:
                exists = results.count(beluga.PUBLISH_EXISTS)
            elif beluga.PUBLISH_EXISTS in results:
                exists = sum(beluga.PUBLISH_EXISTS in results[i * m:(i + 1) * m]
                             for i in range(count))
        for i in range(count if stored == 0 else 0):
            r = [results[i * m + p] for p in range(m)]
            if all(x >= 0 for x in r):
                stored += 1
                exists += any(x == beluga.PUBLISH_EXISTS for x in r)
            else:
                res.failed.append(base + i)
                unchanged.extend(offsets[i * m + p] for p in range(m) if r[p] < 0)
        res.stored += stored
        res.exists += exists
        if unchanged:
            self._free(unchanged)
        self._count(stored=stored, exists=exists, store_failed=count - stored)
        return res

    def free_blocks(self, offsets):
        """FREE allocated, unpublished pool blocks."""
        self._free(offsets)

    def release_blocks(self, offsets):
        """RELEASE pins taken by ``pin`` (or a pinned lookup)."""
        if len(offsets):        # _release(), inline: adapters call this per request
            self.pool.release(offsets)

    def evict_block(self, key):
        """EVICT one engine block: every one of its ``parts`` pool keys
        (a split block is not published under ``key`` itself).  True when
        some part was present and is gone; parts already absent are
        skipped; ``beluga.Busy`` (a part is pinned) and a missing admin
        right propagate, with the parts before them evicted, which makes
        the block a miss as well."""
        kb = _keybuf(key)
        if len(kb) != KEY_BYTES:
            raise ValueError(f"evict_block takes one 16-byte key, got {len(kb)} bytes")
        evicted = False
        pk = _keys.part_keys(kb, self.layout.parts)
        for i in range(0, len(pk), KEY_BYTES):
            try:
                self.pool.evict_key(self._ns.value, pk[i:i + KEY_BYTES])
                evicted = True
            except beluga.NotFound:
                pass
        return evicted

    # ---- public API ------------------------------------------------------

    def keys_for(self, tokens, scheme=None):
        """Keys (n*16 bytes) of the full blocks of ``tokens``."""
        return _keys.chain(scheme or self.key_scheme, tokens, self.layout.tokens)

    def lookup(self, keys):
        """How many leading blocks of ``keys`` are present (count-only: it
        pins nothing and does not refresh the LRU).  Through
        ``Pool.lookup_count`` where the binding has it: answered from the
        pool's index mapped into this process, with no system call
        (``Pool.index_error`` says when it cannot be)."""
        # The hot path of every engine's "exists" (keys as bytes, one pool
        # block per engine block, the binding's own lookup_count): the
        # binding counts the call into _tally itself, so that no Python
        # code runs after it (a lock and three dict adds here cost more
        # than the lookup), and checks the keys itself: what it refuses
        # with ValueError (not whole keys, or a closed pool; no keys is
        # 0 hits and not counted) goes the general way, which answers as
        # it always has.
        # (With the binding's lookup_count_or, __init__ makes the instance's
        # lookup this very branch as a functools.partial, with no frame.)
        if type(keys) is bytes and self._tally is not None:
            try:
                return self._lookup_count(self._ns.value, keys, self._tally)
            except ValueError:
                pass
        return self._lookup_general(keys)

    def _lookup_general(self, keys):
        """lookup() for any keys, counted here."""
        parts = self._parts
        kb = _keybuf(keys)
        n = len(kb) // KEY_BYTES
        if n == 0:
            return 0
        hits = self._lookup_count(self._ns.value, _keys.part_keys(kb, parts))
        blocks = hits // parts
        self._count(lookups=1, hits=blocks, misses=n - blocks)
        return blocks

    def lookup_many(self, requests):
        """``[lookup(keys) for keys in requests]`` in one call, so that a
        scheduler probing many requests or blocks does not pay a system
        call for each: on the pool's index mapped into this process, with
        none at all; where it cannot be mapped (``Pool.index_error``),
        through the pool's io_uring ring (one system call per 64 requests;
        ``Pool.ring_error`` says why not)."""
        bufs = [_keybuf(keys) for keys in requests]
        m = self.layout.parts
        answers = self.pool.lookup_many(self._ns.value, [_keys.part_keys(kb, m) for kb in bufs])
        out, asked = [], 0
        for kb, (hits, _) in zip(bufs, answers):
            out.append(hits // m)
            asked += len(kb) // KEY_BYTES
        probes, hits = sum(1 for kb in bufs if kb), sum(out)
        if probes:
            self._count(lookups=probes, hits=hits, misses=asked - hits)
        return out

    def pin(self, keys):
        """Pin the leading run of ``keys`` that is present: a ``Pinned``."""
        m = self._parts
        if type(keys) is bytes and m == 1 and not len(keys) % KEY_BYTES:
            if self._lookup_pinned is not None:
                # The adapters' hot path: the binding pins and counts into
                # the tally lookup() shares (no lock, no counters here).
                hits, offs = self._lookup_pinned(self._ns.value, keys, self._tally)
                return Pinned(self, hits, offs)
            kb = keys           # what _keybuf and part_keys would return
        else:
            kb = _keys.part_keys(_keybuf(keys), m)
        n = len(kb) // (KEY_BYTES * m)
        if n == 0:
            return Pinned(self, 0, array("Q"))
        hits, offs = self.pool.lookup(self._ns.value, kb, pin=True)
        # The binding's answer is array('Q') of the hits already; anything
        # else (a test double) is made one.
        if type(offs) is not array or offs.typecode != "Q" or len(offs) != hits:
            offs = array("Q", offs[:hits]) if hits else array("Q")
        whole = hits // m
        if hits % m:            # a block with only some parts present is a miss
            self._release(offs[whole * m:])
            offs = offs[:whole * m]
        if self.shared:
            for off in offs:
                beluga.invalidate_range(self._map.block(off))
        with self._lock:        # not _count(): its keywords cost a third of the call
            c = self._counters
            c["lookups"] += 1
            c["hits"] += whole
            c["misses"] += n - whole
        return Pinned(self, whole, offs)

    # False once the module answered that it predates ALLOC's evicted report.
    _evictions_reported = True

    def _alloc_blocks(self, count):
        """``count`` pool blocks: (offsets, the (ns, key) they evicted)."""
        if self._evictions_reported:
            try:
                return self.pool.alloc_evicting(count)
            except beluga.Error as e:
                if e.errno != errno.EOPNOTSUPP:
                    raise
                self._evictions_reported = False    # an older module: ask once
        return self.pool.alloc(count), []

    def allocate(self, n, partial=True):
        """Allocate pool blocks for ``n`` engine blocks: an ``Allocation``,
        whose ``evicted`` names the keys the pool evicted to make room.
        With ``partial`` a full pool gives fewer (halving down to none)
        rather than raising ``beluga.NoSpace``."""
        m, want = self.layout.parts, n
        while want > 0:
            try:
                return Allocation(self, want, *self._alloc_blocks(want * m))
            except beluga.NoSpace:
                if not partial:
                    raise
                want //= 2
        return Allocation(self, 0, array("Q"))

    def store(self, keys, blocks=None, writer=None, skip_present=True):
        """Store blocks under ``keys`` (one per block, in chain order).

        Give the bytes as ``blocks`` (a sequence, or an array whose first
        axis runs over blocks, of ``layout.block_bytes`` each) or as
        ``writer(i, dst)``, called for each block ``i`` to be written with
        ``dst`` a writable flat uint8 array of the block in the pool.
        With ``skip_present`` the leading run already present is skipped.
        Returns a StoreResult; an exception from the writer frees the
        blocks and propagates.
        """
        # What engines and adapters call: bytes keys and blocks, one pool
        # block per engine block, the binding's own pool (_store_flat).
        flat = (type(keys) is bytes and writer is None and blocks is not None
                and self._tally is not None and not self.shared
                and not len(keys) % KEY_BYTES)
        kb = keys if flat else _keybuf(keys)
        n = len(kb) // KEY_BYTES
        if not flat and (blocks is None) == (writer is None):
            raise TypeError("store() needs exactly one of blocks= or writer=")
        if blocks is not None and len(blocks) != n:
            raise ValueError(f"store() got {n} keys but {len(blocks)} blocks")
        if n == 0:
            return StoreResult(0)
        if flat and skip_present and self._store_blocks is not None:
            return self._store_one_call(kb, blocks, n)
        skip = self.lookup(kb) if skip_present else 0
        res = StoreResult(n, skip)
        todo = n - skip
        if todo == 0:
            return res
        srcs = [self._source(blocks[i]) for i in range(skip, n)] if blocks is not None else None
        alloc = self.allocate(todo)
        res.not_stored = todo - alloc.count
        if res.not_stored:
            self._count(not_stored=res.not_stored)
        if alloc.count == 0:
            return res
        if flat:
            return self._store_flat(alloc, srcs, kb[skip * KEY_BYTES:], res)
        try:
            if srcs is not None:        # straight into the pool blocks, also split ones
                self._copy(alloc.offsets, srcs[:alloc.count], into_pool=True, aligned=True)
            elif self.layout.parts == 1:    # the writer writes the pool block itself
                pool, bb = self._pool_bytes(alloc.offsets, aligned=True), self.layout.block_bytes
                for j, off in enumerate(alloc.offsets):
                    writer(skip + j, pool[off:off + bb])
            else:                           # staged, scattered by publish
                for j in range(alloc.count):
                    writer(skip + j, alloc.block(j))
        except BaseException:
            alloc.free()
            raise
        return alloc.publish(kb[skip * KEY_BYTES:(skip + alloc.count) * KEY_BYTES], res)

    # store() and load() of bytes keys into or out of one-pool-block engine
    # blocks of the binding's pool on a coherent pool: the calls that
    # engines make per request, where the general path's layers (_keybuf,
    # Allocation.publish, publish_blocks, pin and Pinned, _count's keywords,
    # a zip per block in _copy) cost ~10x a 16 KiB copy.  Same steps, same
    # answers, same counters and errors; the checks the general path
    # makes that these cases pass are not made again.

    def _flat_pool(self, offsets):
        """The mapping as a writable memoryview of bytes, checked as
        ``_pool_bytes(offsets, aligned=True)`` does, for offsets the binding
        returned (unsigned: only the top end).  A memoryview, not an array:
        making, slicing and assigning one costs half as much, and the
        engine blocks it is copied to and from are flat uint8 arrays, whose
        buffers are bytes ("B") as well.  The caller only copies through it
        and drops it (the mapping's export) before returning."""
        m = self._map
        if m is None:
            raise ValueError("this KVStore is closed: make a new one on an open pool")
        mv = memoryview(m)
        if len(offsets) and max(offsets) + self.layout.pool_block_size > mv.nbytes:
            self._pool_bytes(offsets, aligned=True)     # raises the binding's error
        return mv

    def _store_one_call(self, kb, blocks, n):
        """store() through the binding's PoolMap.store_blocks: what
        _store_flat's caller and _store_flat do, the accounting kept here."""
        skip, got, exists, refused = self._store_blocks(
            self._ns.value, kb, blocks, self.layout.block_bytes, self._tally, self._source)
        res = StoreResult(n, skip)
        res.not_stored = n - skip - got
        if res.not_stored:
            self._count(not_stored=res.not_stored)
        if got == 0:
            return res
        if refused is not None:         # some refused: the general accounting
            return self._published(refused[0], refused[1], got, res)
        return self._count_stored(res, got, exists)

    def _store_flat(self, alloc, srcs, kb, res):
        """store()'s copy and PUBLISH of ``alloc`` (``srcs`` and the keys
        ``kb`` from the first block not skipped on) into ``res``."""
        got = alloc.count
        offsets = alloc.offsets
        try:
            pool = self._flat_pool(offsets)
            bb = self.layout.block_bytes
            for off, src in zip(offsets, srcs):
                pool[off:off + bb] = src
            del pool                    # the mapping's export, before PUBLISH
        except BaseException:
            alloc.free()
            raise
        offsets = alloc.detach()        # _publish frees them if PUBLISH raises
        results = self._publish(offsets, kb if len(kb) == got * KEY_BYTES
                                else kb[:got * KEY_BYTES])
        if min(results) < 0:            # some refused: the general accounting
            return self._published(offsets, results, got, res)
        return self._count_stored(res, got, results.count(beluga.PUBLISH_EXISTS))

    def _count_stored(self, res, got, exists):
        """``got`` blocks published, ``exists`` of them by someone else
        first, into ``res`` and the counters."""
        res.stored += got
        res.exists += exists
        with self._lock:                # not _count(): its keywords cost more than a copy
            c = self._counters
            c["stored"] += got
            c["exists"] += exists
        return res

    def _count_load(self, n, hits, loaded=True):
        """A load of ``n`` keys whose pinned lookup hit ``hits``: the lookup,
        and (``loaded``: the copies were made) the load."""
        with self._lock:
            c = self._counters
            c["lookups"] += 1
            c["hits"] += hits
            c["misses"] += n - hits
            if loaded:
                c["loads"] += 1
                c["loaded"] += hits
                c["load_missing"] += n - hits
                c["load_failures"] += int(hits < n)
        return LoadResult(n, hits)

    def _load_one_call(self, kb, out):
        """load() through the binding's PoolMap.load_blocks: what
        _load_flat does, the accounting kept here."""
        n = len(kb) // KEY_BYTES
        try:
            hits = self._load_blocks(self._ns.value, kb, out, self.layout.block_bytes, self._dest)
        except BaseException as e:
            hits = getattr(e, "lookup_hits", None)
            if hits is not None:        # as _load_flat: the lookup counted, the load not
                self._count_load(n, hits, loaded=False)
            raise
        if n == 0:
            return LoadResult(0, 0)
        return self._count_load(n, hits)

    def _load_flat(self, kb, out):
        n = len(kb) // KEY_BYTES
        dest = self._dest
        dests = [dest(out[i]) for i in range(n)]
        if n == 0:
            return LoadResult(0, 0)
        hits, offs = self.pool.lookup(self._ns.value, kb, pin=True)
        try:
            # also with no hits: a closed store raises here, as _copy does
            pool = self._flat_pool(offs)
            bb = self.layout.block_bytes
            for off, d in zip(offs, dests):
                memoryview(d)[:] = pool[off:off + bb]
            del pool
        except BaseException:
            # as pin() then Pinned's release: the lookup counted, the load not
            self._release(offs)
            self._count_load(n, hits, loaded=False)
            raise
        if hits:
            self.pool.release(offs)
        return self._count_load(n, hits)

    def load(self, keys, out=None, reader=None):
        """Load the leading run of ``keys`` that is present.

        Into ``out`` (a sequence of writable buffers, or an array whose first
        axis runs over blocks, each ``layout.block_bytes``), or through
        ``reader(i, src)`` with ``src`` a read-only flat uint8 array of block
        ``i`` (valid during the call only).  Returns a LoadResult: blocks
        from ``loaded`` on were not written.  The pins are released before
        this returns, also when the reader raises.
        """
        if (type(keys) is bytes and reader is None and out is not None
                and self._tally is not None and not self.shared
                and not len(keys) % KEY_BYTES and len(keys) == len(out) * KEY_BYTES):
            if self._load_blocks is not None:
                return self._load_one_call(keys, out)
            return self._load_flat(keys, out)     # as store()'s _store_flat
        kb = _keybuf(keys)
        n = len(kb) // KEY_BYTES
        if (out is None) == (reader is None):
            raise TypeError("load() needs exactly one of out= or reader=")
        if out is not None:
            if len(out) != n:
                raise ValueError(f"load() got {n} keys but {len(out)} destination buffers")
            dests = [self._dest(out[i]) for i in range(n)]
        if n == 0:
            return LoadResult(0, 0)
        with self.pin(kb) as p:
            if out is not None:
                self._copy(p.offsets, dests[:p.count], into_pool=False, aligned=True)
            elif self.layout.parts == 1:
                if p.count:             # zero-copy: the reader sees the pool block
                    pool = self._pool_bytes(p.offsets, readonly=True, aligned=True)
                    bb = self.layout.block_bytes
                    for i, off in enumerate(p.offsets):
                        reader(i, pool[off:off + bb])
            else:                       # a split block is gathered into one buffer
                for i in range(p.count):
                    buf = np.empty(self.layout.block_bytes, np.uint8)
                    p.copy_out(i, buf)
                    buf.flags.writeable = False
                    reader(i, buf)
                    del buf             # else two blocks live while the next is made
            loaded = p.count
        self._count(loads=1, loaded=loaded, load_missing=n - loaded,
                    load_failures=int(loaded < n))
        return LoadResult(n, loaded)

    def stats(self):
        """This store's counters (blocks, not pool blocks)."""
        with self._lock:
            out = dict(self._counters)
        if self._tally is not None:
            # one copy: the binding adds to it with the GIL held, so whole calls only
            calls, hits, misses = self._tally.tolist()
            out["lookups"] += calls
            out["hits"] += hits
            out["misses"] += misses
        return out

    def describe(self):
        return (f"KVStore: {self.layout.describe()}\n"
                f"  key scheme {self.key_scheme}, {'shared (flush/invalidate)' if self.shared else 'coherent'} pool\n"
                + self._ns.describe())

    def close(self):
        """Drop this store's reference to the pool's mapping."""
        self._map = None
        self._store_blocks = self._load_blocks = None   # bound methods of the mapping

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
