#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# examples/lmcache/serve.sh [MODEL [VLLM_ARGS...]]: vLLM with LMCache as its
# KV connector (vLLM's LMCacheConnectorV1) and Beluga as LMCache's storage
# plugin (beluga.adapters.lmcache), configured by lmcache.yaml beside this
# script, which LMCache reads from LMCACHE_CONFIG_FILE.
#
# Needs: vLLM, LMCache and Beluga's package in one Python environment (PYTHON,
# default python3; `pip install vllm lmcache ./userspace/python`), /dev/beluga
# with a region attached and read-write access to it (the beluga group).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib.sh"
need_modules "vllm lmcache" vllm lmcache beluga.adapters.lmcache
export LMCACHE_CONFIG_FILE=${LMCACHE_CONFIG_FILE:-$here/lmcache.yaml}
exec "$PYTHON" -m vllm.entrypoints.cli.main serve "$model" \
	--kv-transfer-config "$(cat "$here/kv-transfer-config.json")" "$@"
