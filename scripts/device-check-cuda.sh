#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# scripts/device-check-cuda.sh: the GPU path, as TAP.
#   1. build: nvcc builds libbeluga-kvcopy.so (the gather/scatter kernel) and
#      the device check (make -C userspace cuda cuda-device-check), warnings
#      as errors. SKIP with the reason where nvcc is absent.
#   2. device: on a machine with an NVIDIA GPU (a /dev/nvidia* node and a
#      working cudaGetDeviceCount), userspace/build/cuda/device-check
#      registers a stand-in pool mapping through libbeluga, round-trips
#      blocks GPU -> pool -> GPU bit-exactly and reports bandwidth against
#      cudaMemcpy from cudaMallocHost memory (see userspace/cuda/device_check.cu).
#      Elsewhere it says SKIP with the reason (no device node, and what
#      cudaGetDeviceCount answered).
# The module is not needed (nor loaded). Exit status 1 if anything failed.
# Environment: NVCC (compiler path), CUDA_ARCHS / CUDA_PTX (targets, see
# userspace/cuda/cuda.mk), BELUGA_DEVICE_CHECK_JSON (write the bandwidth
# figures there), BELUGA_DEVICE_CHECK_TIMEOUT (s, default 600).
set -u
cd "$(dirname "$0")/.."

n=0
failed=0
emit() {	# emit OK|FAIL TEXT
	n=$((n + 1))
	if [ "$1" = OK ]; then
		echo "ok $n - $2"
	else
		failed=$((failed + 1))
		echo "not ok $n - $2"
	fi
}

nvcc=${NVCC:-$(command -v nvcc 2>/dev/null || true)}
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
logdir=userspace/build/cuda
mkdir -p "$logdir"
log=$logdir/build.log

if [ -z "$nvcc" ]; then
	why="nvcc not found (not on PATH, not /usr/local/cuda/bin/nvcc): install the CUDA toolkit or set NVCC"
	emit OK "build: nvcc compiles the CUDA code # SKIP $why"
	emit OK "device: GPU round trip and bandwidth # SKIP not built: $why"
	echo "1..$n"
	exit 0
fi

t0=$(date +%s)
if make -C userspace NVCC="$nvcc" cuda cuda-device-check >"$log" 2>&1; then
	emit OK "build: $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p') compiles libbeluga-kvcopy.so and the device check, -Werror ($(($(date +%s) - t0)) s)"
else
	emit FAIL "build: nvcc compiles the CUDA code (log: $log)"
	grep -E 'error|warning' "$log" | head -n 20 | sed 's/^/#   /'
	emit OK "device: GPU round trip and bandwidth # SKIP the build failed"
	echo "1..$n"
	exit 1
fi

# Run it even without a device node: it then starts, finds no GPU through
# cudaGetDeviceCount, and says SKIP with CUDA's reason.
ls /dev/nvidia[0-9]* >/dev/null 2>&1 || echo "# no NVIDIA GPU device node (/dev/nvidia[0-9]*) on this machine"
# The check's own TAP lines, renumbered into this stream.
out=$(timeout -k 10 "${BELUGA_DEVICE_CHECK_TIMEOUT:-600}" userspace/build/cuda/device-check 2>&1)
rc=$?
reported_fail=0
while IFS= read -r line; do
	if [[ $line =~ ^(not\ )?ok\ [0-9]+\ -\ (.*)$ ]]; then
		if [ -n "${BASH_REMATCH[1]}" ]; then
			emit FAIL "${BASH_REMATCH[2]}"
			reported_fail=1
		else
			emit OK "${BASH_REMATCH[2]}"
		fi
	elif [[ $line =~ ^1\.\.[0-9]+$ ]]; then
		:
	elif [ -n "$line" ]; then
		echo "# ${line#\# }"
	fi
done <<<"$out"
if [ $rc -ne 0 ] && [ $reported_fail -eq 0 ]; then
	emit FAIL "device: device-check exited with status $rc without reporting a failure (crash or timeout)"
fi
echo "1..$n"
exit $((failed > 0))
