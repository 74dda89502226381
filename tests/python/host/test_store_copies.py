# SPDX-License-Identifier: GPL-2.0
"""KVStore moves each byte once: store copies a block straight into its
pool blocks, load straight out of them, with no buffer in between
(issue 19: stores ran far below memcpy).  Asserted by counting the memory
numpy and Python allocate during the call (tracemalloc, which numpy reports
its buffers to), never by timing: an intermediate copy of the data is an
allocation of about a block.  Also that the fake kernel maps a pool on
tmpfs populated, as the module's memory exists (no fault per first write)."""

import os
import re
import tracemalloc

import numpy as np
import pytest

import beluga
from beluga import _beluga
from beluga.layout import BlockLayout, ModelSpec
from beluga.store import KVStore

BLOCKS = 4
# What a call allocates besides the data (results, offsets, views): about
# 2 KiB measured; a copy of any block is at least 4x this.
BOOKKEEPING = 8 << 10
BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4        # layers * (K,V) * heads * dim * float32


def layout_of(pool, parts):
    """A layout whose block is ``parts`` pool blocks (the last one short)."""
    per_block = pool.block_size // BYTES_PER_TOKEN
    tokens = per_block if parts == 1 else (parts - 1) * per_block + 1
    spec = ModelSpec(model="beluga-test/copies", num_layers=2, num_kv_heads=2, head_dim=16,
                     dtype="float32", tokens_per_block=tokens)
    lay = BlockLayout(spec, pool.block_size)
    assert lay.parts == parts
    return lay


def peak_allocated(fn):
    """Bytes allocated at the peak of ``fn()`` above what was live before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.fixture(params=[1, 3], ids=["one-part", "split"])
def kv(request, pool, unique_ns):
    if pool.block_size < 4 * BOOKKEEPING:
        pytest.skip(f"{pool.block_size}-byte pool blocks: a copy of one would not stand out "
                    f"from the {BOOKKEEPING} bytes of bookkeeping (run at 64K or more)")
    s = KVStore(pool, layout_of(pool, request.param), salt=f"copies-{unique_ns}")
    yield s
    s.close()


def test_store_and_load_allocate_no_copy_of_the_data(kv):
    lay = kv.layout
    # Blocks as an engine holds them: typed, shaped, one array per block.
    blocks = [np.random.default_rng(i).standard_normal(lay.shape).astype(lay.dtype)
              for i in range(BLOCKS)]
    keys = kv.keys_for(list(range(1, 1 + BLOCKS * lay.tokens)))
    out = [lay.empty() for _ in range(BLOCKS)]
    # A staging buffer or a converted copy of any block is above this.
    limit = BOOKKEEPING

    stored = []
    grew = peak_allocated(lambda: stored.append(kv.store(keys, blocks=blocks)))
    assert stored[0].stored == BLOCKS
    assert grew < limit, f"store allocated {grew} bytes for {BLOCKS} blocks of {lay.block_bytes}"

    loaded = []
    grew = peak_allocated(lambda: loaded.append(kv.load(keys, out=out)))
    assert loaded[0].loaded == BLOCKS
    assert grew < limit, f"load allocated {grew} bytes for {BLOCKS} blocks of {lay.block_bytes}"
    for b, o in zip(blocks, out):
        assert np.array_equal(b.view(np.uint8), o.view(np.uint8))


def test_reader_sees_the_pool_or_one_gathered_block(kv):
    lay = kv.layout
    keys = kv.keys_for(list(range(1, 1 + BLOCKS * lay.tokens)))
    assert kv.store(keys, writer=lambda i, dst: dst.fill(i + 1)).stored == BLOCKS
    seen = []

    def reader(i, src):
        seen.append(int(src[0]) == i + 1 and int(src[-1]) == i + 1)

    grew = peak_allocated(lambda: kv.load(keys, reader=reader))
    assert seen == [True] * BLOCKS
    # One pool block: a view of it, nothing copied. Split: the parts are
    # gathered into one buffer a block, dropped after the reader returns.
    limit = BOOKKEEPING if lay.parts == 1 else lay.block_bytes + BOOKKEEPING
    assert grew < limit, f"load(reader=) allocated {grew} bytes (block {lay.block_bytes})"


def _rss_of_mapping(address):
    """Rss in bytes of this process's mapping that starts at ``address``."""
    with open("/proc/self/smaps") as f:
        text = f.read()
    for vma in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        start = int(vma.split("-", 1)[0], 16)
        if start == address:
            return int(re.search(r"^Rss:\s+(\d+) kB", vma, re.M).group(1)) * 1024
    raise AssertionError(f"no mapping starts at {address:#x} in /proc/self/smaps")


def test_fake_pool_on_tmpfs_is_mapped_populated(backend, monkeypatch, tmp_path):
    if backend != "fake":
        pytest.skip("the fake kernel's mapping; the module maps its memory with 2 MiB faults")
    shm = "/dev/shm"
    if not os.path.isdir(shm) or os.statvfs(shm).f_bsize == 0:
        pytest.skip("no /dev/shm here to put the fake pool on")
    path = os.path.join(shm, f"beluga-copies-{os.getpid()}")
    open(path, "w").close()
    try:
        monkeypatch.setenv("BELUGA_DEVICE", path)
        _beluga._fake_reset(block_size=65536, regions="dax0.0:16M", max_batch=beluga.MAX_BATCH)
        with beluga.Pool(path) as pool:
            m = pool.map()
            base = int(re.search(r" at (0x[0-9a-f]+)", repr(m)).group(1), 16)
            rss = _rss_of_mapping(base)
            # Every page is there before any block is written.
            assert rss == len(m), f"the fake pool's mapping has {rss} of {len(m)} bytes resident"
            m.close()
    finally:
        os.unlink(path)
