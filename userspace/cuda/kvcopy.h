/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libbeluga-kvcopy: gather and scatter between an engine's paged KV cache in
 * GPU memory and Beluga pool blocks, one kernel launch per batch.
 *
 * GPU side. Layer l of the engine's cache starts at device address
 * gpu_layers[l]; the row of token t of GPU block b, K (kv 0) or V (kv 1), is
 *
 *     gpu_layers[l] + kv * gpu_kv_stride + b * gpu_block_stride + t * gpu_token_stride
 *
 * and holds row_bytes bytes (heads * head_dim * element size). vLLM's
 * per-layer tensor of shape (2, num_blocks, block_tokens, heads, dim) has
 * gpu_kv_stride = num_blocks * block_tokens * row_bytes, gpu_block_stride =
 * block_tokens * row_bytes, gpu_token_stride = row_bytes; FlashInfer's
 * (num_blocks, 2, ...) swaps the first two. MLA caches have num_kv = 1. A
 * single tensor holding every layer (a cross-layer cache) is gpu_layers[l] =
 * base + l * its layer stride.
 *
 * Pool side. A pool block starts at pool_base + pool_offset, and the same
 * row lies at
 *
 *     pool_base + pool_offset + l * pool_layer_stride + kv * pool_kv_stride + t * pool_token_stride
 *
 * The canonical Beluga block layout (layer-major: for each layer K[tokens]
 * [heads][dim], then V) is pool_token_stride = row_bytes, pool_kv_stride =
 * block_tokens * row_bytes, pool_layer_stride = num_kv * pool_kv_stride;
 * beluga_kv_layout_canonical() fills it in.
 *
 * The pool mapping must be registered with CUDA (beluga_cuda_register()):
 * the kernel reads and writes the blocks directly over the bus, which needs
 * page-locked, device-mapped host memory.
 *
 * Every function returns 0 (or a count) on success and a negative errno on
 * failure, with a message naming the cause and the fix in @err:
 *   -EINVAL  bad layout or pairs (out of bounds, overlapping destinations,
 *            unaligned, pool memory not registered with CUDA)
 *   -ENODEV  no CUDA device or driver
 *   -ENOMEM  device memory for the batch table
 *   -EIO     CUDA failed the copy (its error string is in the message)
 */
#ifndef BELUGA_KVCOPY_H
#define BELUGA_KVCOPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct or function below changes incompatibly. */
#define BELUGA_KVCOPY_ABI	1

#define BELUGA_KV_TO_POOL	0	/* gather: GPU blocks -> pool blocks */
#define BELUGA_KV_FROM_POOL	1	/* scatter: pool blocks -> GPU blocks */

struct beluga_kv_layout {
	uint32_t num_layers;		/* >= 1 */
	uint32_t num_kv;		/* 2 (K and V) or 1 (MLA latent) */
	uint32_t block_tokens;		/* token rows per block, >= 1 */
	uint32_t reserved;		/* must be 0 */
	uint64_t row_bytes;		/* bytes of one token row, >= 1 */
	uint64_t gpu_kv_stride;
	uint64_t gpu_block_stride;
	uint64_t gpu_token_stride;	/* >= row_bytes */
	uint64_t gpu_num_blocks;	/* GPU block ids must be below it */
	uint64_t pool_layer_stride;
	uint64_t pool_kv_stride;
	uint64_t pool_token_stride;	/* >= row_bytes */
	uint64_t pool_length;		/* bytes of the mapping from pool_base */
};

/* One block to copy: GPU block id and pool offset of the pool block. */
struct beluga_kv_pair {
	uint64_t gpu_block;
	uint64_t pool_offset;
};

/* Bytes of one pool block's payload in the canonical layout. */
static inline uint64_t beluga_kv_block_bytes(const struct beluga_kv_layout *l)
{
	return (uint64_t)l->num_layers * l->num_kv * l->block_tokens * l->row_bytes;
}

/* Set the pool strides to the canonical layer-major layout. */
static inline void beluga_kv_layout_canonical(struct beluga_kv_layout *l)
{
	l->pool_token_stride = l->row_bytes;
	l->pool_kv_stride = (uint64_t)l->block_tokens * l->row_bytes;
	l->pool_layer_stride = (uint64_t)l->num_kv * l->pool_kv_stride;
}

/* BELUGA_KVCOPY_ABI of the loaded library. */
int beluga_kv_abi(void);

/* The number of CUDA devices (>= 1), or -ENODEV with the reason. */
int beluga_kv_probe(char *err, size_t errlen);

/*
 * beluga_kv_copy - copy @nr_pairs blocks in @direction with one kernel launch
 * @gpu_layers: @layout->num_layers device addresses
 * @pool_base: host address of the registered pool mapping (pool offset 0)
 * @stream: a cudaStream_t as an integer (0: the legacy default stream), for
 *	example torch.cuda.current_stream().cuda_stream
 * @sync: wait for the copy to finish (and report its errors) before
 *	returning; without it the copy is ordered on @stream and the caller
 *	synchronizes before it reads the destination or publishes the block
 *
 * The destinations of one batch must not overlap (distinct pool blocks for
 * BELUGA_KV_TO_POOL, distinct GPU blocks for BELUGA_KV_FROM_POOL).
 * @nr_pairs == 0 does nothing. Returns 0 or a negative errno (see above).
 */
int beluga_kv_copy(int direction, const struct beluga_kv_layout *layout,
		   const uint64_t *gpu_layers, const void *pool_base,
		   const struct beluga_kv_pair *pairs, size_t nr_pairs,
		   uint64_t stream, int sync, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* BELUGA_KVCOPY_H */
