#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# examples/sglang/launch.sh [MODEL [SGLANG_ARGS...]]: SGLang's server with
# hierarchical caching and Beluga as its HiCache storage backend
# (beluga.adapters.sglang, loaded by SGLang's "dynamic" backend from
# hicache-extra-config.json beside this script).
#
# Needs: SGLang and Beluga's package in one Python environment (PYTHON,
# default python3; `pip install sglang ./userspace/python`), /dev/beluga with
# a region attached and read-write access to it (the beluga group).
# The adapter takes SGLang's page_first or page_first_direct host layouts;
# one page is one Beluga block. Whether SGLang itself has run this adapter:
# the status box of the top-level README.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
need_modules sglang sglang beluga.adapters.sglang
exec "$PYTHON" -m sglang.launch_server --model-path "$model" \
	--enable-hierarchical-cache --page-size 64 --hicache-mem-layout page_first \
	--hicache-storage-backend dynamic \
	--hicache-storage-backend-extra-config "$(cat "$here/hicache-extra-config.json")" "$@"
