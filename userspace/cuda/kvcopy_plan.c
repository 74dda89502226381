// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga-kvcopy: the checks of one batch, its flattened table, and the
 * CPU reference copy (see kvcopy_plan.h). Plain C, so that the host tests
 * link it without nvcc.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcopy_plan.h"

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

/* a * b + c into *out, or 0 when it overflows 64 bits. */
static int mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t *out)
{
	uint64_t m;

	if (__builtin_mul_overflow(a, b, &m) || __builtin_add_overflow(m, c, out))
		return 0;
	return 1;
}

/* Bytes from a tile's first row to the end of its last one. */
static int tile_span(uint64_t token_stride, uint32_t block_tokens, uint64_t row_bytes,
		     uint64_t *span)
{
	return mul_add(token_stride, block_tokens - 1, row_bytes, span);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int bel_kv_prepare(int direction, const struct beluga_kv_layout *l,
		   const uint64_t *gpu_layers, const void *pool_base,
		   const struct beluga_kv_pair *pairs, size_t nr_pairs,
		   struct bel_kv_plan *plan, uint64_t **table_out, char *err, size_t errlen)
{
	uint64_t tile, kv_span, block_span, align, *table, *sorted;
	uint32_t i, shift;
	size_t n;

	*table_out = NULL;
	if (direction != BELUGA_KV_TO_POOL && direction != BELUGA_KV_FROM_POOL)
		return fail(err, errlen, -EINVAL, "kv copy: direction %d is neither TO_POOL (0) "
			    "nor FROM_POOL (1)", direction);
	if (!l || l->reserved)
		return fail(err, errlen, -EINVAL, "kv copy: %s", !l ? "no layout given" :
			    "layout.reserved must be 0");
	if (!l->num_layers || !l->block_tokens || !l->row_bytes ||
	    (l->num_kv != 1 && l->num_kv != 2))
		return fail(err, errlen, -EINVAL,
			    "kv copy: layout needs num_layers, block_tokens, row_bytes >= 1 and "
			    "num_kv 1 or 2 (got %u, %u, %llu, %u)", l->num_layers, l->block_tokens,
			    (unsigned long long)l->row_bytes, l->num_kv);
	if (!gpu_layers || !pool_base || (nr_pairs && !pairs))
		return fail(err, errlen, -EINVAL, "kv copy: %s is NULL",
			    !gpu_layers ? "gpu_layers" : !pool_base ? "pool_base" : "pairs");
	for (i = 0; i < l->num_layers; i++)
		if (!gpu_layers[i])
			return fail(err, errlen, -EINVAL, "kv copy: GPU address of layer %u is 0", i);

	/* Rows may not overlap inside a tile, on either side. */
	if (l->gpu_token_stride < l->row_bytes || l->pool_token_stride < l->row_bytes)
		return fail(err, errlen, -EINVAL,
			    "kv copy: token strides (GPU %llu, pool %llu) must be at least "
			    "row_bytes (%llu): rows would overlap",
			    (unsigned long long)l->gpu_token_stride,
			    (unsigned long long)l->pool_token_stride, (unsigned long long)l->row_bytes);
	if (!l->gpu_num_blocks)
		return fail(err, errlen, -EINVAL, "kv copy: gpu_num_blocks is 0");
	/* The pool block: tiles nested token < kv < layer, without overlap. */
	if (!tile_span(l->pool_token_stride, l->block_tokens, l->row_bytes, &tile))
		goto overflow;
	if (l->num_kv == 2 && l->pool_kv_stride < tile)
		return fail(err, errlen, -EINVAL,
			    "kv copy: pool_kv_stride %llu is below one K tile (%llu bytes): K and "
			    "V would overlap", (unsigned long long)l->pool_kv_stride,
			    (unsigned long long)tile);
	if (!mul_add(l->pool_kv_stride, l->num_kv - 1, tile, &kv_span))
		goto overflow;
	if (l->num_layers > 1 && l->pool_layer_stride < kv_span)
		return fail(err, errlen, -EINVAL,
			    "kv copy: pool_layer_stride %llu is below one layer (%llu bytes): "
			    "layers would overlap", (unsigned long long)l->pool_layer_stride,
			    (unsigned long long)kv_span);
	if (!mul_add(l->pool_layer_stride, l->num_layers - 1, kv_span, &block_span))
		goto overflow;
	if (!tile_span(l->gpu_token_stride, l->block_tokens, l->row_bytes, &tile))
		goto overflow;

	/* The widest copy unit that divides every address and stride. */
	align = l->row_bytes | l->gpu_kv_stride | l->gpu_block_stride | l->gpu_token_stride |
		l->pool_layer_stride | l->pool_kv_stride | l->pool_token_stride |
		(uint64_t)(uintptr_t)pool_base;
	for (i = 0; i < l->num_layers; i++)
		align |= gpu_layers[i];
	for (n = 0; n < nr_pairs; n++)
		align |= pairs[n].pool_offset;
	for (shift = 4; shift && (align & ((1u << shift) - 1)); shift--)
		;
	if ((l->row_bytes >> shift) * l->block_tokens > UINT32_MAX)
		return fail(err, errlen, -EINVAL, "kv copy: a tile of %u rows of %llu bytes is too "
			    "large", l->block_tokens, (unsigned long long)l->row_bytes);

	for (n = 0; n < nr_pairs; n++) {
		uint64_t end;

		if (pairs[n].gpu_block >= l->gpu_num_blocks)
			return fail(err, errlen, -EINVAL,
				    "kv copy: pair %zu: GPU block %llu is not below gpu_num_blocks %llu",
				    n, (unsigned long long)pairs[n].gpu_block,
				    (unsigned long long)l->gpu_num_blocks);
		if (__builtin_add_overflow(pairs[n].pool_offset, block_span, &end) ||
		    end > l->pool_length)
			return fail(err, errlen, -EINVAL,
				    "kv copy: pair %zu: pool bytes %llu..+%llu lie outside the "
				    "mapping (%llu bytes)", n, (unsigned long long)pairs[n].pool_offset,
				    (unsigned long long)block_span, (unsigned long long)l->pool_length);
	}

	/* Destinations of one batch must be distinct (else the result is a race). */
	sorted = malloc((nr_pairs ? nr_pairs : 1) * sizeof(*sorted));
	if (!sorted)
		return fail(err, errlen, -ENOMEM, "kv copy: out of memory for %zu pairs", nr_pairs);
	for (n = 0; n < nr_pairs; n++)
		sorted[n] = direction == BELUGA_KV_TO_POOL ? pairs[n].pool_offset : pairs[n].gpu_block;
	qsort(sorted, nr_pairs, sizeof(*sorted), cmp_u64);
	for (n = 1; n < nr_pairs; n++) {
		int clash = direction == BELUGA_KV_TO_POOL ? sorted[n] - sorted[n - 1] < block_span
							   : sorted[n] == sorted[n - 1];

		if (clash) {
			unsigned long long a = sorted[n - 1], b = sorted[n];

			free(sorted);
			return fail(err, errlen, -EINVAL,
				    direction == BELUGA_KV_TO_POOL ?
				    "kv copy: pool blocks at %llu and %llu overlap (a block spans %llu "
				    "bytes): each destination once per batch" :
				    "kv copy: GPU block %llu is a destination twice (%llu): each "
				    "destination once per batch", a, b, (unsigned long long)block_span);
		}
	}
	free(sorted);

	table = malloc((l->num_layers + 2 * nr_pairs) * sizeof(*table));
	if (!table)
		return fail(err, errlen, -ENOMEM, "kv copy: out of memory for %zu pairs", nr_pairs);
	memcpy(table, gpu_layers, l->num_layers * sizeof(*table));
	for (n = 0; n < nr_pairs; n++) {
		table[l->num_layers + 2 * n] = pairs[n].gpu_block;
		table[l->num_layers + 2 * n + 1] = (uint64_t)(uintptr_t)pool_base + pairs[n].pool_offset;
	}

	*plan = (struct bel_kv_plan){
		.to_pool = direction == BELUGA_KV_TO_POOL,
		.num_layers = l->num_layers, .num_kv = l->num_kv, .block_tokens = l->block_tokens,
		.unit_shift = shift, .row_units = (uint32_t)(l->row_bytes >> shift),
		.gpu_kv_stride = l->gpu_kv_stride, .gpu_block_stride = l->gpu_block_stride,
		.gpu_token_stride = l->gpu_token_stride,
		.pool_layer_stride = l->pool_layer_stride, .pool_kv_stride = l->pool_kv_stride,
		.pool_token_stride = l->pool_token_stride,
		.nr_pairs = nr_pairs, .nr_tiles = (uint64_t)nr_pairs * l->num_layers * l->num_kv,
	};
	*table_out = table;
	return 0;

overflow:
	return fail(err, errlen, -EINVAL, "kv copy: the layout's strides overflow 64 bits");
}

void bel_kv_copy_cpu(const struct bel_kv_plan *p, const uint64_t *table)
{
	size_t row = (size_t)p->row_units << p->unit_shift;
	uint64_t tile, gpu, pool;
	uint32_t t;

	for (tile = 0; tile < p->nr_tiles; tile++) {
		bel_kv_tile(p, table, tile, &gpu, &pool);
		for (t = 0; t < p->block_tokens; t++) {
			char *g = (char *)(uintptr_t)(gpu + t * p->gpu_token_stride);
			char *q = (char *)(uintptr_t)(pool + t * p->pool_token_stride);

			if (p->to_pool)
				memcpy(q, g, row);
			else
				memcpy(g, q, row);
		}
	}
}
