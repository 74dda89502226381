# SPDX-License-Identifier: GPL-2.0
"""The mini engine: a seeded numpy transformer with a paged KV cache whose
blocks round-trip through the Beluga pool (README in this directory)."""

import os

# One BLAS thread: the same shapes then take the same code path every time.
# This only has an effect if numpy is not imported yet; the test and bench
# entry points set it in the environment as well.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
