// SPDX-License-Identifier: GPL-2.0
/*
 * The gather/scatter batch of libbeluga-kvcopy without a GPU: the checks of
 * bel_kv_prepare() and, through bel_kv_copy_cpu(), the same tile address
 * arithmetic the kernel runs (bel_kv_tile()), against an independent
 * formula for vLLM's (2, num_blocks, tokens, heads, dim) and FlashInfer's
 * (num_blocks, 2, ...) per-layer caches and an MLA cache.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcopy_plan.h"
#include "../lib/tap.h"

#define L	3	/* layers */
#define NB	7	/* GPU blocks */
#define T	5	/* tokens per block */
#define ROW	24	/* bytes per token row: 2 heads x 6 dims x 2 bytes */
#define SLOTS	8	/* pool blocks */

static unsigned char expect_byte(unsigned l, unsigned kv, unsigned b, unsigned t, unsigned i)
{
	uint32_t h = (l * 131u + kv * 31u + b * 7u + t) * 2654435761u + i * 40503u;

	return (unsigned char)(h >> 13);
}

struct cache {
	unsigned char *layer[L];
	struct beluga_kv_layout lay;
	int flashinfer;
};

/* Byte @i of the row (l, kv, b, t) in @c's GPU layout, by the shape's own indexing. */
static unsigned char *gpu_at(struct cache *c, unsigned l, unsigned kv, unsigned b, unsigned t,
			     unsigned i)
{
	unsigned nkv = c->lay.num_kv;
	size_t idx = c->flashinfer ? (((size_t)b * nkv + kv) * T + t) * ROW + i
				   : (((size_t)kv * NB + b) * T + t) * ROW + i;

	return c->layer[l] + idx;
}

static void cache_init(struct cache *c, unsigned nkv, int flashinfer, int fill)
{
	unsigned l, kv, b, t, i;

	memset(c, 0, sizeof(*c));
	c->flashinfer = flashinfer;
	c->lay = (struct beluga_kv_layout){
		.num_layers = L, .num_kv = nkv, .block_tokens = T, .row_bytes = ROW,
		.gpu_kv_stride = flashinfer ? T * ROW : (uint64_t)NB * T * ROW,
		.gpu_block_stride = flashinfer ? (uint64_t)nkv * T * ROW : T * ROW,
		.gpu_token_stride = ROW, .gpu_num_blocks = NB,
	};
	beluga_kv_layout_canonical(&c->lay);
	for (l = 0; l < L; l++)
		c->layer[l] = calloc((size_t)nkv * NB * T * ROW, 1);
	if (!fill)
		return;
	for (l = 0; l < L; l++)
		for (kv = 0; kv < nkv; kv++)
			for (b = 0; b < NB; b++)
				for (t = 0; t < T; t++)
					for (i = 0; i < ROW; i++)
						*gpu_at(c, l, kv, b, t, i) = expect_byte(l, kv, b, t, i);
}

static void cache_free(struct cache *c)
{
	for (unsigned l = 0; l < L; l++)
		free(c->layer[l]);
}

static void layers_of(struct cache *c, uint64_t *out)
{
	for (unsigned l = 0; l < L; l++)
		out[l] = (uint64_t)(uintptr_t)c->layer[l];
}

static int run(struct cache *c, int dir, unsigned char *pool, size_t pool_len,
	       const struct beluga_kv_pair *pairs, size_t n, struct bel_kv_plan *plan)
{
	uint64_t layers[L], *table;
	char err[256] = "";
	int ret;

	layers_of(c, layers);
	c->lay.pool_length = pool_len;
	ret = bel_kv_prepare(dir, &c->lay, layers, pool, pairs, n, plan, &table, err, sizeof(err));
	if (ret) {
		tap_diag("bel_kv_prepare: %s", err);
		return ret;
	}
	bel_kv_copy_cpu(plan, table);
	free(table);
	return 0;
}

static void test_round_trip(unsigned nkv, int flashinfer, const char *name)
{
	static const struct beluga_kv_pair pairs[] = { { 3, 5 }, { 0, 1 }, { 6, 2 }, { 3, 7 } };
	struct beluga_kv_pair back[4];
	struct cache src, dst;
	struct bel_kv_plan plan;
	unsigned char *pool;
	size_t bs, bad = 0, untouched = 0, n = 4;
	unsigned p, l, kv, t, i, s;
	uint64_t off;

	cache_init(&src, nkv, flashinfer, 1);
	bs = beluga_kv_block_bytes(&src.lay);
	pool = calloc(SLOTS, bs);
	for (p = 0; p < n; p++)
		back[p] = (struct beluga_kv_pair){ .gpu_block = p, .pool_offset = pairs[p].pool_offset * bs };
	{
		struct beluga_kv_pair scaled[4];

		for (p = 0; p < n; p++)
			scaled[p] = (struct beluga_kv_pair){ pairs[p].gpu_block, pairs[p].pool_offset * bs };
		tap_result(!run(&src, BELUGA_KV_TO_POOL, pool, SLOTS * bs, scaled, n, &plan) &&
			   plan.nr_tiles == n * L * nkv && plan.unit_shift == 3,
			   "%s: gather of 4 blocks is %zu tiles of 8-byte units", name, n * L * nkv);
	}
	/* Canonical: for each layer K[t][row] then V[t][row]. */
	for (p = 0; p < n; p++)
		for (l = 0; l < L; l++)
			for (kv = 0; kv < nkv; kv++)
				for (t = 0; t < T; t++)
					for (i = 0; i < ROW; i++) {
						off = pairs[p].pool_offset * bs +
						      ((l * nkv + kv) * T + t) * ROW + i;
						bad += pool[off] != expect_byte(l, kv, pairs[p].gpu_block, t, i);
					}
	for (s = 0; s < SLOTS; s++) {
		int used = 0;

		for (p = 0; p < n; p++)
			used |= pairs[p].pool_offset == s;
		for (i = 0; !used && i < bs; i++)
			untouched += pool[s * bs + i] != 0;
	}
	tap_result(!bad && !untouched,
		   "%s: pool blocks hold the canonical layer-major layout (%zu wrong bytes, "
		   "%zu written outside the pairs)", name, bad, untouched);

	cache_init(&dst, nkv, flashinfer, 0);
	tap_result(!run(&dst, BELUGA_KV_FROM_POOL, pool, SLOTS * bs, back, n, &plan),
		   "%s: scatter into other GPU blocks", name);
	bad = 0;
	for (p = 0; p < n; p++)
		for (l = 0; l < L; l++)
			for (kv = 0; kv < nkv; kv++)
				for (t = 0; t < T; t++)
					for (i = 0; i < ROW; i++)
						bad += *gpu_at(&dst, l, kv, p, t, i) !=
						       *gpu_at(&src, l, kv, pairs[p].gpu_block, t, i);
	for (l = 0; l < L; l++)
		for (kv = 0; kv < nkv; kv++)
			for (t = 0; t < T; t++)
				for (i = 0; i < ROW; i++)
					bad += *gpu_at(&dst, l, kv, 5, t, i) != 0;
	tap_result(!bad, "%s: GPU -> pool -> GPU is bit-exact, other blocks untouched (%zu wrong)",
		   name, bad);
	cache_free(&src);
	cache_free(&dst);
	free(pool);
}

static void test_units(void)
{
	struct beluga_kv_pair pair = { 0, 0 };
	struct bel_kv_plan plan;
	uint64_t layer = 0x10000, *table;
	struct beluga_kv_layout lay = {
		.num_layers = 1, .num_kv = 2, .block_tokens = 16, .row_bytes = 2048,
		.gpu_kv_stride = 64 << 20, .gpu_block_stride = 32768, .gpu_token_stride = 2048,
		.gpu_num_blocks = 2048, .pool_length = 1 << 20,
	};
	char err[256];
	int ok;

	beluga_kv_layout_canonical(&lay);
	ok = !bel_kv_prepare(0, &lay, &layer, (void *)0x200000, &pair, 1, &plan, &table, err,
			     sizeof(err)) && plan.unit_shift == 4 && plan.row_units == 128;
	free(table);
	lay.row_bytes = 6;
	lay.gpu_token_stride = 6;
	beluga_kv_layout_canonical(&lay);
	ok = ok && !bel_kv_prepare(0, &lay, &layer, (void *)0x200000, &pair, 1, &plan, &table,
				   err, sizeof(err)) && plan.unit_shift == 1;
	free(table);
	ok = ok && !bel_kv_prepare(0, &lay, &layer, (void *)0x200001, &pair, 1, &plan, &table,
				   err, sizeof(err)) && plan.unit_shift == 0;
	free(table);
	tap_result(ok, "units: 16 bytes for 2 KiB rows, 2 for 6-byte rows, 1 for an odd base");
}

/* One bad batch: -EINVAL, and a message containing @what. */
static void expect_einval(int dir, struct beluga_kv_layout lay, const uint64_t *layers,
			  const struct beluga_kv_pair *pairs, size_t n, const char *what,
			  const char *name)
{
	struct bel_kv_plan plan;
	uint64_t *table = (uint64_t *)1;
	char err[256] = "";
	int ret = bel_kv_prepare(dir, &lay, layers, (void *)0x200000, pairs, n, &plan, &table,
				 err, sizeof(err));

	tap_result(ret == -EINVAL && strstr(err, what) && !table, "refused: %s (%s)", name, err);
}

static void test_refusals(void)
{
	uint64_t layers[2] = { 0x10000, 0x20000 }, zero[2] = { 0x10000, 0 };
	struct beluga_kv_layout good = {
		.num_layers = 2, .num_kv = 2, .block_tokens = 4, .row_bytes = 64,
		.gpu_kv_stride = 1 << 20, .gpu_block_stride = 256, .gpu_token_stride = 64,
		.gpu_num_blocks = 16, .pool_length = 16 * 1024,
	}, lay;
	struct beluga_kv_pair pairs[2] = { { 1, 0 }, { 2, 1024 } };
	struct bel_kv_plan plan;
	uint64_t *table;
	char err[256];

	beluga_kv_layout_canonical(&good);	/* a block: 2 x 2 x 4 x 64 = 1 KiB */
	tap_result(!bel_kv_prepare(0, &good, layers, (void *)0x200000, pairs, 2, &plan, &table,
				   err, sizeof(err)), "the base case is accepted");
	free(table);
	tap_result(!bel_kv_prepare(1, &good, layers, (void *)0x200000, pairs, 0, &plan, &table,
				   err, sizeof(err)) && plan.nr_tiles == 0, "an empty batch is accepted");
	free(table);

	expect_einval(2, good, layers, pairs, 2, "direction 2", "an unknown direction");
	lay = good, lay.reserved = 1;
	expect_einval(0, lay, layers, pairs, 2, "reserved", "a reserved field set");
	lay = good, lay.num_kv = 3;
	expect_einval(0, lay, layers, pairs, 2, "num_kv 1 or 2", "three tensors per layer");
	lay = good, lay.block_tokens = 0;
	expect_einval(0, lay, layers, pairs, 2, "block_tokens", "zero tokens per block");
	expect_einval(0, good, zero, pairs, 2, "layer 1 is 0", "a zero layer address");
	lay = good, lay.gpu_token_stride = 32;
	expect_einval(0, lay, layers, pairs, 2, "rows would overlap", "GPU rows that overlap");
	lay = good, lay.pool_kv_stride = 128;
	expect_einval(0, lay, layers, pairs, 2, "K and V would overlap", "pool K and V that overlap");
	lay = good, lay.pool_layer_stride = 256;
	expect_einval(0, lay, layers, pairs, 2, "layers would overlap", "pool layers that overlap");
	lay = good, lay.pool_layer_stride = UINT64_MAX - 100;
	expect_einval(0, lay, layers, pairs, 2, "overflow", "strides that overflow");
	lay = good, lay.gpu_num_blocks = 2;
	expect_einval(0, lay, layers, pairs, 2, "GPU block 2 is not below", "a GPU block id out of range");
	lay = good, lay.pool_length = 2047;
	expect_einval(0, lay, layers, pairs, 2, "outside the mapping", "a pool block past the mapping");
	{
		struct beluga_kv_pair wrap[1] = { { 0, UINT64_MAX - 16 } };

		expect_einval(0, good, layers, wrap, 1, "outside the mapping", "a pool offset that wraps");
	}
	{
		struct beluga_kv_pair clash[2] = { { 1, 1024 }, { 2, 1536 } };

		expect_einval(0, good, layers, clash, 2, "overlap", "two pool destinations that overlap");
	}
	{
		struct beluga_kv_pair twice[2] = { { 3, 0 }, { 3, 1024 } };

		expect_einval(1, good, layers, twice, 2, "destination twice",
			      "one GPU block scattered into twice");
		tap_result(!bel_kv_prepare(0, &good, layers, (void *)0x200000, twice, 2, &plan, &table,
					   err, sizeof(err)),
			   "one GPU block gathered into two pool blocks is fine");
		free(table);
	}
	expect_einval(0, good, layers, NULL, 2, "pairs is NULL", "no pairs array");
}

int main(void)
{
	test_round_trip(2, 0, "vllm (2, blocks, tokens, heads, dim)");
	test_round_trip(2, 1, "flashinfer (blocks, 2, tokens, heads, dim)");
	test_round_trip(1, 0, "mla (blocks, tokens, latent)");
	test_units();
	test_refusals();
	return tap_done();
}
