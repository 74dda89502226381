#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# examples/vllm/serve.sh [MODEL [VLLM_ARGS...]]: vLLM's OpenAI server with
# Beluga as its KV offloading backend (beluga.adapters.vllm, loaded by vLLM's
# OffloadingConnector from kv-transfer-config.json beside this script).
#
# Needs: vLLM and Beluga's package in one Python environment (PYTHON, default
# python3; `pip install vllm ./userspace/python`), /dev/beluga with a region
# attached (`belugactl attach`, or /etc/beluga.conf and beluga.service) and
# read-write access to it (the beluga group). Everything about the model (layers,
# heads, dtype, block size, tensor parallelism) comes from vLLM itself; the
# config names only the pool. Two servers started this way on one pool share
# their KV blocks: PYTHONHASHSEED must be the same for both (vLLM seeds its
# block hashes from it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
need_modules vllm vllm beluga.adapters.vllm
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}
exec "$PYTHON" -m vllm.entrypoints.cli.main serve "$model" \
	--kv-transfer-config "$(cat "$here/kv-transfer-config.json")" "$@"
