// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga-kvcopy: the gather/scatter kernel and its host side (see
 * kvcopy.h for the layouts and kvcopy_plan.h for the flattened batch).
 *
 * One launch per batch: CUDA block i copies tiles i, i + gridDim.x, ... (a
 * tile is one layer's K or V of one block: block_tokens rows), its threads
 * striding over the rows' 16/8/4/2/1-byte units so that neighbouring
 * threads touch neighbouring bytes on both sides. The pool side is host
 * memory registered with CUDA, read and written by the kernel over the bus.
 *
 * The batch table (layer addresses, pairs) goes to the device with one
 * asynchronous copy into stream-ordered memory (cudaMallocAsync), so calls
 * on different streams never share a buffer.
 *
 * Built with the static CUDA runtime: the library needs only the driver
 * (libcuda.so.1) at run time, whatever CUDA runtime the engine carries.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "kvcopy_plan.h"

#define BEL_KV_EXPORT extern "C" __attribute__((visibility("default")))

/* CUDA threads per block; enough to cover a 2 KiB row in 16-byte units. */
#define KV_THREADS	256
/* At most this many CUDA blocks; the kernel strides over further tiles. */
#define KV_MAX_GRID	65535u

template <typename U>
__global__ void __launch_bounds__(KV_THREADS)
kv_copy_kernel(const struct bel_kv_plan p, const uint64_t *__restrict__ table)
{
	const uint32_t units = p.block_tokens * p.row_units;
	const uint64_t gts = p.gpu_token_stride / sizeof(U), pts = p.pool_token_stride / sizeof(U);

	for (uint64_t tile = blockIdx.x; tile < p.nr_tiles; tile += gridDim.x) {
		uint64_t gpu, pool;

		bel_kv_tile(&p, table, tile, &gpu, &pool);
		U *g = reinterpret_cast<U *>(gpu);
		U *q = reinterpret_cast<U *>(pool);
		for (uint32_t i = threadIdx.x; i < units; i += blockDim.x) {
			uint32_t t = i / p.row_units, w = i - t * p.row_units;

			if (p.to_pool)
				q[t * pts + w] = g[t * gts + w];
			else
				g[t * gts + w] = q[t * pts + w];
		}
	}
}

static int fail(char *err, size_t errlen, int ret, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int ret, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return ret;
}

/*
 * A CUDA failure as -EIO (or -ENODEV for a missing device or driver), with
 * the runtime's last-error state read back so it does not surface later.
 */
static int cuda_fail(char *err, size_t errlen, cudaError_t e, const char *what)
{
	int ret = (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? -ENODEV :
		  e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;

	(void)cudaGetLastError();
	return fail(err, errlen, ret, "kv copy: %s: %s (CUDA error %d)%s", what,
		    cudaGetErrorString(e), (int)e,
		    ret == -ENODEV ? ": this machine needs an NVIDIA GPU and driver" : "");
}

BEL_KV_EXPORT int beluga_kv_abi(void)
{
	return BELUGA_KVCOPY_ABI;
}

BEL_KV_EXPORT int beluga_kv_probe(char *err, size_t errlen)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);

	if (e != cudaSuccess)
		return cuda_fail(err, errlen, e, "cudaGetDeviceCount");
	if (!count)
		return fail(err, errlen, -ENODEV, "kv copy: no CUDA device visible "
			    "(check CUDA_VISIBLE_DEVICES)");
	return count;
}

/*
 * Replace the host pool addresses of the table by device addresses. Every
 * block must lie in registered memory; where the device uses host pointers
 * for registered memory (UVA on x86-64 and most arm64), the addresses stay.
 */
static int translate_pool(uint64_t *table, const struct bel_kv_plan *p, char *err, size_t errlen)
{
	int dev, same = 0;
	cudaError_t e;

	e = cudaGetDevice(&dev);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&same, cudaDevAttrCanUseHostPointerForRegisteredMem, dev);
	if (e != cudaSuccess)
		return cuda_fail(err, errlen, e, "device attributes");
	for (uint64_t n = 0; n < p->nr_pairs; n++) {
		uint64_t *addr = &table[p->num_layers + 2 * n + 1];
		struct cudaPointerAttributes a;
		void *dptr;

		e = cudaPointerGetAttributes(&a, (void *)(uintptr_t)*addr);
		if (e != cudaSuccess || a.type != cudaMemoryTypeHost) {
			(void)cudaGetLastError();
			return fail(err, errlen, -EINVAL,
				    "kv copy: pair %llu: the pool block at %#llx is not registered "
				    "with CUDA: call beluga_cuda_register() (Pool.cuda_register()) "
				    "first", (unsigned long long)n, (unsigned long long)*addr);
		}
		if (same)
			continue;
		e = cudaHostGetDevicePointer(&dptr, (void *)(uintptr_t)*addr, 0);
		if (e != cudaSuccess)
			return cuda_fail(err, errlen, e, "cudaHostGetDevicePointer of a pool block "
					 "(register with cudaHostRegisterMapped)");
		*addr = (uint64_t)(uintptr_t)dptr;
	}
	return 0;
}

/* Every layer address must be device memory (a host pointer would fault). */
static int check_gpu_layers(const uint64_t *layers, uint32_t n, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < n; i++) {
		struct cudaPointerAttributes a;
		cudaError_t e = cudaPointerGetAttributes(&a, (void *)(uintptr_t)layers[i]);

		if (e != cudaSuccess || (a.type != cudaMemoryTypeDevice &&
					 a.type != cudaMemoryTypeManaged)) {
			(void)cudaGetLastError();
			return fail(err, errlen, -EINVAL,
				    "kv copy: layer %u: %#llx is not GPU memory: pass the "
				    "device address of the layer's KV tensor (tensor.data_ptr())", i,
				    (unsigned long long)layers[i]);
		}
	}
	return 0;
}

static void launch(const struct bel_kv_plan *p, const uint64_t *table, cudaStream_t s)
{
	unsigned int grid = p->nr_tiles < KV_MAX_GRID ? (unsigned int)p->nr_tiles : KV_MAX_GRID;

	switch (p->unit_shift) {
	case 4:
		kv_copy_kernel<uint4><<<grid, KV_THREADS, 0, s>>>(*p, table);
		break;
	case 3:
		kv_copy_kernel<uint2><<<grid, KV_THREADS, 0, s>>>(*p, table);
		break;
	case 2:
		kv_copy_kernel<uint32_t><<<grid, KV_THREADS, 0, s>>>(*p, table);
		break;
	case 1:
		kv_copy_kernel<uint16_t><<<grid, KV_THREADS, 0, s>>>(*p, table);
		break;
	default:
		kv_copy_kernel<uint8_t><<<grid, KV_THREADS, 0, s>>>(*p, table);
		break;
	}
}

BEL_KV_EXPORT int beluga_kv_copy(int direction, const struct beluga_kv_layout *layout,
				 const uint64_t *gpu_layers, const void *pool_base,
				 const struct beluga_kv_pair *pairs, size_t nr_pairs,
				 uint64_t stream, int sync, char *err, size_t errlen)
{
	cudaStream_t s = (cudaStream_t)(uintptr_t)stream;
	struct bel_kv_plan p;
	uint64_t *table, *dtable = NULL;
	size_t bytes;
	int ret, pooled = 1;
	cudaError_t e;

	ret = bel_kv_prepare(direction, layout, gpu_layers, pool_base, pairs, nr_pairs, &p,
			     &table, err, errlen);
	if (ret)
		return ret;
	if (!nr_pairs) {
		free(table);
		return 0;
	}
	ret = beluga_kv_probe(err, errlen);
	if (ret < 0)
		goto out;
	ret = check_gpu_layers(gpu_layers, p.num_layers, err, errlen);
	if (!ret)
		ret = translate_pool(table, &p, err, errlen);
	if (ret)
		goto out;

	bytes = bel_kv_table_len(&p) * sizeof(*table);
	e = cudaMallocAsync((void **)&dtable, bytes, s);
	if (e == cudaErrorNotSupported) {
		/* No memory pools on this device: a plain allocation, synchronous. */
		(void)cudaGetLastError();
		pooled = 0;
		sync = 1;
		e = cudaMalloc((void **)&dtable, bytes);
	}
	if (e != cudaSuccess) {
		ret = cuda_fail(err, errlen, e, "device memory for the batch table");
		goto out;
	}
	/* From pageable memory: returns once staged, so table may be freed. */
	e = cudaMemcpyAsync(dtable, table, bytes, cudaMemcpyHostToDevice, s);
	if (e != cudaSuccess) {
		ret = cuda_fail(err, errlen, e, "copy of the batch table");
		goto free_dev;
	}
	launch(&p, dtable, s);
	e = cudaGetLastError();
	if (e != cudaSuccess) {
		ret = cuda_fail(err, errlen, e, "kernel launch");
		goto free_dev;
	}
	if (sync) {
		e = cudaStreamSynchronize(s);
		if (e != cudaSuccess)
			ret = cuda_fail(err, errlen, e, "the copy");
	}
free_dev:
	if (pooled)
		e = cudaFreeAsync(dtable, s);
	else
		e = cudaFree(dtable);
	if (e != cudaSuccess && !ret)
		ret = cuda_fail(err, errlen, e, "freeing the batch table");
out:
	free(table);
	return ret < 0 ? ret : 0;
}
