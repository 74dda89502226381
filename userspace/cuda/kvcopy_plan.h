/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libbeluga-kvcopy internals: the checked, flattened form of one batch that
 * the kernel (kvcopy.cu) and the CPU reference copy (kvcopy_plan.c) both
 * walk, so that the host tests check the kernel's address arithmetic
 * without a GPU.
 *
 * A batch is nr_tiles = nr_pairs * num_layers * num_kv tiles; a tile is
 * block_tokens rows of row_bytes, copied in units of (1 << unit_shift)
 * bytes, the widest of 16/8/4/2/1 that divides every address and stride.
 * The table holds num_layers GPU layer addresses, then per pair the GPU
 * block id and the pool block's address.
 */
#ifndef BELUGA_KVCOPY_PLAN_H
#define BELUGA_KVCOPY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "kvcopy.h"

#ifdef __CUDACC__
#define BEL_KV_HD __host__ __device__
#else
#define BEL_KV_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct bel_kv_plan {
	int to_pool;
	uint32_t num_layers, num_kv, block_tokens;
	uint32_t unit_shift;
	uint32_t row_units;		/* row_bytes >> unit_shift */
	uint64_t gpu_kv_stride, gpu_block_stride, gpu_token_stride;
	uint64_t pool_layer_stride, pool_kv_stride, pool_token_stride;
	uint64_t nr_pairs, nr_tiles;
};

/* Entries of the table: layers, then two per pair. */
static inline size_t bel_kv_table_len(const struct bel_kv_plan *p)
{
	return p->num_layers + 2 * (size_t)p->nr_pairs;
}

/* First-row addresses of tile @tile: GPU and pool. */
static inline BEL_KV_HD void bel_kv_tile(const struct bel_kv_plan *p, const uint64_t *table,
					 uint64_t tile, uint64_t *gpu, uint64_t *pool)
{
	uint64_t per_pair = (uint64_t)p->num_layers * p->num_kv;
	uint64_t pair = tile / per_pair, rem = tile - pair * per_pair;
	uint64_t layer = rem / p->num_kv, kv = rem - layer * p->num_kv;
	const uint64_t *e = table + p->num_layers + 2 * pair;

	*gpu = table[layer] + kv * p->gpu_kv_stride + e[0] * p->gpu_block_stride;
	*pool = e[1] + layer * p->pool_layer_stride + kv * p->pool_kv_stride;
}

/*
 * bel_kv_prepare - check a batch and flatten it
 * @table: receives a malloc()ed table (bel_kv_table_len() entries) with
 *	host pool addresses; the caller frees it
 *
 * Returns 0, or -EINVAL / -ENOMEM with a message in @err.
 */
int bel_kv_prepare(int direction, const struct beluga_kv_layout *layout,
		   const uint64_t *gpu_layers, const void *pool_base,
		   const struct beluga_kv_pair *pairs, size_t nr_pairs,
		   struct bel_kv_plan *plan, uint64_t **table, char *err, size_t errlen);

/*
 * The same copy on the CPU, for a GPU cache that is host memory (tests,
 * and the device check's expected bytes).
 */
void bel_kv_copy_cpu(const struct bel_kv_plan *plan, const uint64_t *table);

#ifdef __cplusplus
}
#endif

#endif /* BELUGA_KVCOPY_PLAN_H */
