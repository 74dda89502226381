# SPDX-License-Identifier: GPL-2.0
"""beluga._cuda on a machine without a GPU: the module imports, every call
that needs CUDA raises beluga.NoCuda naming what is missing, and bad batches
are refused (beluga.InvalidArgument, TypeError, ValueError) before CUDA is
touched. The copies themselves run in scripts/device-check-cuda.sh on a GPU.
"""

import array
import errno
import glob
import os
import subprocess
import sys

import pytest

import beluga
import beluga._cuda as cuda

HAVE_LIB = os.path.exists(os.path.join(os.path.dirname(cuda.__file__), "libbeluga-kvcopy.so"))
HAVE_GPU = bool(glob.glob("/dev/nvidia[0-9]*"))
needs_lib = pytest.mark.skipif(not HAVE_LIB, reason="libbeluga-kvcopy.so not built (no nvcc)")

# A Llama-8B-like layer: 16 tokens x 8 heads x 128 dims x bf16.
ROW = 8 * 128 * 2
KW = dict(block_tokens=16, row_bytes=ROW, gpu_kv_stride=512 * 16 * ROW,
          gpu_block_stride=16 * ROW, gpu_num_blocks=512, pool_length=1 << 30)
LAYERS = [0x7F0000000000 + i * 2 * 512 * 16 * ROW for i in range(4)]
BLOCK = 4 * 2 * 16 * ROW  # canonical: layers x K,V x tokens x row
POOL = 0x7E0000000000


def run_isolated(code, **env):
    """Run @code in a fresh interpreter (the library is loaded once per process)."""
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)


def test_module_imports_and_names_its_constants():
    assert cuda.TO_POOL == 0 and cuda.FROM_POOL == 1 and cuda.KVCOPY_ABI >= 1
    assert issubclass(beluga.NoCuda, OSError)


def test_device_count_names_the_cause():
    if HAVE_LIB and HAVE_GPU:
        assert cuda.device_count() >= 1
        return
    with pytest.raises(beluga.NoCuda) as ei:
        cuda.device_count()
    if HAVE_LIB:
        assert ei.value.errno == errno.ENODEV
        assert "cudaGetDeviceCount" in str(ei.value) and "NVIDIA GPU" in str(ei.value)
    else:
        assert ei.value.errno == errno.ENOENT and "nvcc" in str(ei.value)


@pytest.mark.skipif(HAVE_GPU, reason="a GPU is present: the copy would run")
def test_valid_batch_without_gpu_is_nocuda():
    err = errno.ENODEV if HAVE_LIB else errno.ENOENT
    with pytest.raises(beluga.NoCuda) as ei:
        cuda.gather(LAYERS, POOL, [(1, 0), (2, BLOCK)], **KW)
    assert ei.value.errno == err


def test_missing_library_says_how_to_build_it():
    r = run_isolated(
        "import beluga, beluga._cuda as c\n"
        "try:\n    c.device_count()\n"
        "except beluga.NoCuda as e:\n    print(e.errno, e)\n",
        BELUGA_KVCOPY="/nonexistent/libbeluga-kvcopy.so")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{errno.ENOENT} ")
    assert "/nonexistent/libbeluga-kvcopy.so" in r.stdout and "make -C userspace cuda" in r.stdout
    assert "BELUGA_KVCOPY" in r.stdout


def test_a_library_without_the_api_is_refused():
    other = beluga._beluga.__file__  # a shared object without beluga_kv_*
    r = run_isolated(
        "import beluga, beluga._cuda as c\n"
        "try:\n    c.library_path()\n"
        "except beluga.NoCuda as e:\n    print(e.errno, e)\n",
        BELUGA_KVCOPY=other)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{errno.EPROTO} ") and "missing symbols" in r.stdout


@needs_lib
@pytest.mark.parametrize("pairs, kw, words", [
    ([(1, 1 << 30)], {}, "outside the mapping"),
    ([(512, 0)], {}, "not below gpu_num_blocks"),
    ([(1, 0), (2, BLOCK // 2)], {}, "overlap"),
    ([(1, 0)], {"num_kv": 3}, "num_kv 1 or 2"),
    ([(1, 0)], {"gpu_token_stride": ROW // 2}, "rows would overlap"),
    ([(1, 0)], {"pool_kv_stride": ROW}, "K and V would overlap"),
], ids=["pool-block-out-of-mapping", "gpu-block-out-of-range", "overlapping-destinations",
        "three-kv", "overlapping-gpu-rows", "overlapping-pool-k-v"])
def test_bad_batch_is_refused_before_cuda(pairs, kw, words):
    with pytest.raises(beluga.InvalidArgument) as ei:
        cuda.gather(LAYERS, POOL, pairs, **dict(KW, **kw))
    assert ei.value.errno == errno.EINVAL and words in str(ei.value)


@needs_lib
def test_scatter_into_one_gpu_block_twice_is_refused():
    with pytest.raises(beluga.InvalidArgument, match="destination twice"):
        cuda.scatter(LAYERS, POOL, [(3, 0), (3, BLOCK)], **KW)


def test_empty_batch_is_a_no_op():
    if not HAVE_LIB:
        pytest.skip("libbeluga-kvcopy.so not built (no nvcc)")
    assert cuda.gather(LAYERS, POOL, array.array("Q"), **KW) is None


@pytest.mark.parametrize("change, exc, words", [
    ({"row_bytes": -1}, ValueError, "row_bytes must be a non-negative integer"),
    ({"row_bytes": "2048"}, TypeError, "row_bytes must be an int"),
    ({"stream": 1.5}, TypeError, "stream must be an int"),
])
def test_bad_integers_are_type_and_value_errors(change, exc, words):
    with pytest.raises(exc, match=words):
        cuda.gather(LAYERS, POOL, [(1, 0)], **dict(KW, **change))


def test_missing_keyword_is_named():
    kw = dict(KW)
    del kw["pool_length"]
    with pytest.raises(TypeError, match="'pool_length'"):
        cuda.gather(LAYERS, POOL, [(1, 0)], **kw)


def test_pairs_buffers_must_be_uint64_pairs():
    with pytest.raises(ValueError, match="whole number of 16-byte items"):
        cuda.gather(LAYERS, POOL, array.array("Q", [1, 0, 2]), **KW)
    with pytest.raises(TypeError, match="unsigned"):
        cuda.gather(LAYERS, POOL, array.array("q", [1, 0]), **KW)
    with pytest.raises(TypeError, match="8-byte unsigned"):
        cuda.gather(LAYERS, POOL, array.array("I", [1, 0]), **KW)
    with pytest.raises(TypeError, match=r"pairs\[0\] must be a \(gpu_block, pool_offset\)"):
        cuda.gather(LAYERS, POOL, [1, 0], **KW)
    with pytest.raises(ValueError, match="pool_base must be a non-negative"):
        cuda.gather(LAYERS, -1, [(1, 0)], **KW)


def test_numpy_pairs_are_accepted_as_a_buffer():
    np = pytest.importorskip("numpy")
    pairs = np.array([[1, BLOCK], [2, 0]], dtype=np.uint64)
    if not HAVE_LIB:
        with pytest.raises(beluga.NoCuda):
            cuda.gather(LAYERS, POOL, pairs, **KW)
        return
    # parsed as two pairs: the second pool block is then out of this mapping
    with pytest.raises(beluga.InvalidArgument, match="pair 0: pool bytes 262144"):
        cuda.gather(LAYERS, POOL, pairs, **dict(KW, pool_length=BLOCK))
    with pytest.raises(TypeError, match="unsigned"):
        cuda.gather(LAYERS, POOL, pairs.astype(np.int64), **KW)
