// SPDX-License-Identifier: GPL-2.0
/* Regions, offsets, the allocator, free, remove_region, find_offset. */
#include "helpers.h"

#define M2 (2ULL << 20)

static void empty_pool(void)
{
	struct bel_pool *p = pool_new();
	struct bel_client *c = bel_client_new(p);
	struct bel_region_stats rs;
	struct beluga_key k = K(1);
	struct bel_stats s;
	u64 off, ro;
	u32 slot, hits = 99;

	s = stats_of(p);
	CHECK_EQ(s.total_blocks, 0);
	CHECK_EQ(s.clients, 1);
	CHECK_EQ(bel_alloc(c, 1, &off), -ENODEV);
	CHECK_EQ(stats_of(p).alloc_failures, 0);
	CHECK_EQ(bel_pool_map_size(p), 0);
	CHECK_EQ(bel_pool_find_offset(p, 0, &slot, &ro), -ENOENT);
	CHECK_EQ(bel_region_stats(p, 0, &rs), -ENOENT);
	CHECK_EQ(bel_region_stats(p, 99, &rs), -ENOENT);
	CHECK_EQ(bel_lookup(c, 0, 1, &k, false, NULL, &hits), 0);
	CHECK_EQ(hits, 0);
	off = 0;
	CHECK_EQ(bel_free(c, 1, &off), -EINVAL);
	CHECK_EQ(bel_release(c, 1, &off), -EINVAL);
	CHECK_EQ(bel_pool_remove_region(p, 0, true, NULL), -ENOENT);
	CHECK_EQ(bel_evict_key(p, 0, &k), -ENOENT);
	CHECK_EQ(bel_evict_ns(p, 0, NULL), 0);
	check_pool(p);
	bel_client_release(c);
	CHECK_EQ(stats_of(p).clients, 0);
	pool_free(p);
}

static void add_region_validation(void)
{
	struct bel_pool *p = pool_new();
	u32 slot, n, i;
	u64 first;

	/* Bad block sizes. */
	CHECK_EQ(bel_pool_add_region(p, 1ULL << 30, 4095, &slot, &first, &n),
		 -EINVAL);
	CHECK_EQ(bel_pool_add_region(p, 1ULL << 30, 6144, &slot, &first, &n),
		 -EINVAL);
	CHECK_EQ(bel_pool_add_region(p, 1ULL << 40, 2ULL << 30, &slot, &first,
				     &n), -EINVAL);
	CHECK_EQ(bel_pool_add_region(p, 1ULL << 30, 2048, &slot, &first, &n),
		 -EINVAL);
	/* Shorter than a block (default 2 MiB). */
	CHECK_EQ(bel_pool_add_region(p, M2 - 4096, 0, &slot, &first, &n),
		 -EINVAL);
	/* More blocks than an id can name. */
	CHECK_EQ(bel_pool_add_region(p, (BEL_MAX_REGION_BLOCKS + 1ULL) * 4096,
				     4096, &slot, &first, &n), -EINVAL);
	CHECK_EQ(p->nr_regions, 0);
	CHECK_EQ(p->block_size, 0);

	/* Default block size, remainder ignored. */
	CHECK_EQ(bel_pool_add_region(p, 5 * M2 + 4096, 0, &slot, &first, &n),
		 0);
	CHECK_EQ(slot, 0);
	CHECK_EQ(first, 0);
	CHECK_EQ(n, 5);
	CHECK_EQ(p->block_size, BELUGA_BLOCK_SIZE_DEFAULT);
	/* Mismatch refused; 0 and the same size accepted. */
	CHECK_EQ(bel_pool_add_region(p, 8 * M2, 4 * M2, &slot, &first, &n),
		 -EINVAL);
	CHECK_EQ(bel_pool_add_region(p, 3 * M2, 0, &slot, &first, &n), 0);
	CHECK_EQ(slot, 1);
	/* Region 0 spans 5 MiB + 4 KiB, rounded up to 6 MiB... */
	CHECK_EQ(first, 6 * M2);
	CHECK_EQ(n, 3);
	CHECK_EQ(bel_pool_add_region(p, 1 * M2, M2, &slot, &first, &n), 0);
	CHECK_EQ(slot, 2);
	CHECK_EQ(first, 9 * M2);
	CHECK_EQ(bel_pool_map_size(p), 10 * M2);
	/* Fill every slot, then -ENOSPC. */
	for (i = 3; i < BELUGA_MAX_REGIONS; i++) {
		CHECK_EQ(bel_pool_add_region(p, M2, 0, &slot, &first, &n), 0);
		CHECK_EQ(slot, i);
	}
	CHECK_EQ(bel_pool_add_region(p, M2, 0, &slot, &first, &n), -ENOSPC);
	CHECK_EQ(p->nr_regions, BELUGA_MAX_REGIONS);
	CHECK_EQ(stats_of(p).total_blocks, 5 + 3 + 1 + 13);
	check_pool(p);
	/* Removing all regions resets the block size. */
	for (i = 0; i < BELUGA_MAX_REGIONS; i++)
		CHECK_EQ(bel_pool_remove_region(p, i, false, NULL), 0);
	CHECK_EQ(p->block_size, 0);
	CHECK_EQ(bel_pool_map_size(p), 0);
	CHECK_EQ(bel_pool_add_region(p, 8 * 4096, 4096, &slot, &first, &n), 0);
	CHECK_EQ(slot, 0);
	CHECK_EQ(first, 0);
	CHECK_EQ(n, 8);
	CHECK_EQ(p->block_size, 4096);
	check_pool(p);
	pool_free(p);
}

/*
 * A reserved region (ATTACH before it answers) holds its slot, its offsets
 * and the block size, and is invisible until committed; an aborted one
 * leaves no trace.
 */
static void reserve_commit_abort(void)
{
	struct bel_pool *p = pool_new();
	struct bel_client *c = bel_client_new(p);
	struct bel_region_stats rs;
	u32 slot, s2, n, n2;
	u64 first, f2, off, ro;

	CHECK_EQ(bel_pool_reserve_region(p, 4 * M2, M2, &slot, &first, &n), 0);
	CHECK_EQ(slot, 0);
	CHECK_EQ(first, 0);
	CHECK_EQ(n, 4);
	/* Nothing sees it. */
	CHECK_EQ(p->nr_regions, 0);
	CHECK_EQ(stats_of(p).total_blocks, 0);
	CHECK_EQ(bel_alloc(c, 1, &off), -ENODEV);
	CHECK_EQ(bel_pool_map_size(p), 0);
	CHECK_EQ(bel_pool_find_offset(p, 0, &s2, &ro), -ENOENT);
	CHECK_EQ(bel_region_stats(p, 0, &rs), -ENOENT);
	CHECK_EQ(bel_pool_remove_region(p, 0, true, NULL), -ENOENT);
	/* It holds its slot, its offset span and the block size. */
	CHECK_EQ(bel_pool_add_region(p, M2, 2 * M2, &s2, &f2, &n2), -EINVAL);
	CHECK_EQ(bel_pool_add_region(p, M2, 0, &s2, &f2, &n2), 0);
	CHECK_EQ(s2, 1);
	CHECK_EQ(f2, 4 * M2);
	CHECK_EQ(stats_of(p).total_blocks, 1);
	/* It takes memory errors before it is visible. */
	CHECK_EQ(bel_retire_offset(p, 2 * M2), 1);
	bel_pool_commit_region(p, slot);
	CHECK_EQ(p->nr_regions, 2);
	CHECK_EQ(stats_of(p).total_blocks, 5);
	CHECK_EQ(stats_of(p).retired_blocks, 1);
	CHECK_EQ(stats_of(p).free_blocks, 4);
	CHECK_EQ(bel_region_stats(p, 0, &rs), 0);
	CHECK_EQ(rs.nr_blocks, 4);
	CHECK_EQ(bel_pool_map_size(p), 5 * M2);
	check_pool(p);

	/* Abort: as if never reserved, the slot and span reused. */
	CHECK_EQ(bel_pool_remove_region(p, 0, false, NULL), 0);
	CHECK_EQ(bel_pool_reserve_region(p, 2 * M2, 0, &slot, &first, &n), 0);
	CHECK_EQ(slot, 0);
	bel_pool_abort_region(p, slot);
	CHECK_EQ(p->nr_regions, 1);
	CHECK_EQ(stats_of(p).total_blocks, 1);
	CHECK_EQ(bel_pool_remove_region(p, 1, false, NULL), 0);
	/* The last reservation gone, the block size is free again. */
	CHECK_EQ(bel_pool_reserve_region(p, 2 * M2, M2, &slot, &first, &n), 0);
	CHECK_EQ(p->block_size, M2);
	bel_pool_abort_region(p, slot);
	CHECK_EQ(p->block_size, 0);
	CHECK_EQ(bel_pool_add_region(p, 8 * 4096, 4096, &slot, &first, &n), 0);
	CHECK_EQ(slot, 0);
	CHECK_EQ(first, 0);
	check_pool(p);
	bel_client_release(c);
	pool_free(p);
}

/* Block size that is a multiple of 4 KiB but not a power of two. */
static void odd_block_size(void)
{
	struct bel_pool *p = pool_new();
	struct bel_client *c;
	u64 bs = 3 * 4096 * 5;	/* 60 KiB */
	u64 offs[10], first;
	u32 slot, n, i;

	CHECK_EQ(bel_pool_add_region(p, 7 * bs + 100, bs, &slot, &first, &n), 0);
	CHECK_EQ(n, 7);
	c = bel_client_new(p);
	CHECK_EQ(bel_alloc(c, 7, offs), 0);
	qsort(offs, 7, sizeof(u64), cmp_u64);
	for (i = 0; i < 7; i++)
		CHECK_EQ(offs[i], i * bs);
	/* Not on a block boundary, or past the last block: not blocks. */
	offs[0] = bs + 4096;
	CHECK_EQ(bel_free(c, 1, offs), -EINVAL);
	offs[0] = 7 * bs;
	CHECK_EQ(bel_free(c, 1, offs), -EINVAL);
	bel_client_release(c);
	check_pool(p);
	pool_free(p);
}

static void alloc_round_robin(void)
{
	static const u32 sizes[] = { 3, 5, 8 };
	struct bel_pool *p = pool_with(3, sizes);
	struct bel_client *c = bel_client_new(p);
	/* Expected slot of each successive block. */
	static const u32 want[16] = {
		0, 1, 2, 0, 1, 2, 0, 1, 2,	/* region 0 runs out */
		1, 2, 1, 2,			/* region 1 runs out */
		2, 2, 2,
	};
	u64 offs[16], all[16];
	u32 i, n = 0;

	/* 3 + 2 + 4 + 7: batches keep the rotor across calls. */
	static const u32 batch[] = { 3, 2, 4, 7 };

	for (i = 0; i < 4; i++) {
		u32 j;

		REQUIRE_EQ(bel_alloc(c, batch[i], offs), 0);
		for (j = 0; j < batch[i]; j++, n++) {
			CHECK_EQ(slot_of(p, offs[j]), want[n]);
			all[n] = offs[j];
		}
	}
	/* Every offset distinct, block-aligned, inside its region. */
	qsort(all, 16, sizeof(u64), cmp_u64);
	for (i = 1; i < 16; i++)
		CHECK(all[i] != all[i - 1]);
	for (i = 0; i < 16; i++) {
		struct bel_region *r = &p->regions[slot_of(p, all[i])];

		CHECK_EQ((all[i] - r->first_offset) % BS, 0);
		CHECK((all[i] - r->first_offset) / BS < r->nr_blocks);
		CHECK_EQ(bel_id_to_offset(p, id_of(p, all[i])), all[i]);
	}
	CHECK_EQ(stats_of(p).allocated_blocks, 16);
	CHECK_EQ(stats_of(p).allocs, 16);
	CHECK_EQ(c->nr_allocated, 16);
	teardown(p, c, NULL);
}

static void alloc_all_or_nothing(void)
{
	static const u32 sizes[] = { 4, 6 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	u64 offs[BELUGA_MAX_BATCH + 1];
	struct bel_stats before, after;

	CHECK_EQ(bel_alloc(c, 7, offs), 0);
	before = stats_of(p);
	offs[0] = 12345;
	CHECK_EQ(bel_alloc(c, 4, offs), -ENOSPC);
	CHECK_EQ(offs[0], 12345);
	after = stats_of(p);
	CHECK_EQ(after.free_blocks, 3);
	CHECK_EQ(after.allocated_blocks, 7);
	CHECK_EQ(after.allocs, before.allocs);
	CHECK_EQ(after.alloc_failures, before.alloc_failures + 1);
	CHECK_EQ(c->nr_allocated, 7);
	/* Exactly what is left still works; then exhausted. */
	CHECK_EQ(bel_alloc(c, 3, offs), 0);
	CHECK_EQ(stats_of(p).free_blocks, 0);
	CHECK_EQ(bel_alloc(c, 1, offs), -ENOSPC);
	CHECK_EQ(stats_of(p).alloc_failures, 2);
	/* Bad counts. */
	CHECK_EQ(bel_alloc(c, 0, offs), -EINVAL);
	CHECK_EQ(bel_alloc(c, BELUGA_MAX_BATCH + 1, offs), -EINVAL);
	CHECK_EQ(stats_of(p).alloc_failures, 2);
	check_pool(p);
	check_client(c);
	bel_client_release(c);
	CHECK_EQ(stats_of(p).free_blocks, 10);
	pool_free(p);
}

static void alloc_max_batch(void)
{
	static const u32 sizes[] = { 3000, 2000 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	static u64 offs[BELUGA_MAX_BATCH];
	u32 per[2] = { 0, 0 }, i;

	CHECK_EQ(bel_alloc(c, BELUGA_MAX_BATCH, offs), 0);
	for (i = 0; i < BELUGA_MAX_BATCH; i++)
		per[slot_of(p, offs[i])]++;
	/* Striped until region 1 is dry: 2000 each, the rest from 0. */
	CHECK_EQ(per[1], 2000);
	CHECK_EQ(per[0], BELUGA_MAX_BATCH - 2000);
	CHECK_EQ(bel_alloc(c, 1000, offs), -ENOSPC);
	CHECK_EQ(bel_free(c, BELUGA_MAX_BATCH, offs), 0);
	CHECK_EQ(stats_of(p).free_blocks, 5000);
	CHECK_EQ(stats_of(p).frees, BELUGA_MAX_BATCH);
	teardown(p, c, NULL);
}

static void free_validation(void)
{
	struct bel_pool *p = pool_new();
	struct bel_client *a, *b;
	u64 offs[8], bad[4], first;
	u32 slot, n;

	/* 5 blocks plus a tail that is in the region but no block. */
	CHECK_EQ(bel_pool_add_region(p, 5 * BS + 2048, BS, &slot, &first, &n),
		 0);
	a = bel_client_new(p);
	b = bel_client_new(p);
	CHECK_EQ(bel_alloc(a, 3, offs), 0);
	CHECK_EQ(bel_alloc(b, 1, offs + 3), 0);

	bad[0] = offs[0] + 1;			/* misaligned */
	CHECK_EQ(bel_free(a, 1, bad), -EINVAL);
	bad[0] = 5 * BS;			/* tail, not a block */
	CHECK_EQ(bel_free(a, 1, bad), -EINVAL);
	bad[0] = 64 * M2;			/* no region */
	CHECK_EQ(bel_free(a, 1, bad), -EINVAL);
	bad[0] = offs[3];			/* b's block */
	CHECK_EQ(bel_free(a, 1, bad), -EINVAL);
	/* A FREE block: the one nobody has. */
	bad[0] = 0;
	while (bad[0] == offs[0] || bad[0] == offs[1] || bad[0] == offs[2] ||
	       bad[0] == offs[3])
		bad[0] += BS;
	CHECK_EQ(bel_free(a, 1, bad), -EINVAL);
	/* One bad item anywhere fails the whole batch. */
	bad[0] = offs[0];
	bad[1] = offs[1];
	bad[2] = offs[3];
	CHECK_EQ(bel_free(a, 3, bad), -EINVAL);
	/* Duplicates. */
	bad[2] = offs[0];
	CHECK_EQ(bel_free(a, 3, bad), -EINVAL);
	CHECK_EQ(a->nr_allocated, 3);
	CHECK_EQ(blk(p, offs[0])->owner, a);
	CHECK_EQ(blk(p, offs[1])->owner, a);
	CHECK_EQ(stats_of(p).allocated_blocks, 4);
	CHECK_EQ(stats_of(p).frees, 0);
	check_pool(p);
	check_client(a);
	/* The valid batch. */
	CHECK_EQ(bel_free(a, 2, bad), 0);
	CHECK_EQ(a->nr_allocated, 1);
	CHECK_EQ(stats_of(p).frees, 2);
	CHECK_EQ(bel_free(a, 1, bad), -EINVAL);	/* already freed */
	CHECK_EQ(bel_free(a, 0, bad), -EINVAL);
	CHECK_EQ(bel_free(a, BELUGA_MAX_BATCH + 1, bad), -EINVAL);
	check_pool(p);
	check_client(a);
	check_client(b);
	bel_client_release(a);
	bel_client_release(b);
	CHECK_EQ(stats_of(p).free_blocks, 5);
	CHECK_EQ(stats_of(p).frees, 4);
	pool_free(p);
}

static void remove_region_rules(void)
{
	static const u32 sizes[] = { 4, 4 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	struct bel_region_stats rs;
	u64 off[8], ev, pinned = 0;
	struct beluga_key k;
	u32 i, hits, n0 = 0;

	CHECK_EQ(bel_pool_remove_region(p, 2, false, &ev), -ENOENT);
	CHECK_EQ(bel_pool_remove_region(p, BELUGA_MAX_REGIONS, false, &ev),
		 -ENOENT);
	/* Allocated: busy, with or without evict. */
	CHECK_EQ(bel_alloc(c, 8, off), 0);
	CHECK_EQ(bel_pool_remove_region(p, 0, false, &ev), -EBUSY);
	CHECK_EQ(bel_pool_remove_region(p, 0, true, &ev), -EBUSY);
	CHECK_EQ(ev, 0);
	/* Publish everything in region 0, keys = i. */
	for (i = 0; i < 8; i++) {
		s32 res;

		if (slot_of(p, off[i]) != 0)
			continue;
		k = K(i);
		CHECK_EQ(publish_arrays(c, 5, 1, &off[i], &k, &res, NULL, NULL,
				     NULL), 0);
		CHECK_EQ(res, BELUGA_PUBLISH_OK);
		n0++;
		if (n0 == 1)
			pinned = i;
	}
	CHECK_EQ(n0, 4);
	CHECK_EQ(bel_region_stats(p, 0, &rs), 0);
	CHECK_EQ(rs.published_blocks, 4);
	CHECK_EQ(rs.allocated_blocks, 0);
	CHECK_EQ(bel_pool_remove_region(p, 0, false, &ev), -EBUSY);
	CHECK_EQ(ev, 0);
	CHECK_EQ(stats_of(p).published_blocks, 4);
	/* Pin one: evict takes the other three and it stays busy. */
	k = K(pinned);
	CHECK_EQ(bel_lookup(c, 5, 1, &k, true, off, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(bel_pool_remove_region(p, 0, true, &ev), -EBUSY);
	CHECK_EQ(ev, 3);
	CHECK_EQ(stats_of(p).evictions, 3);
	CHECK_EQ(stats_of(p).published_blocks, 1);
	CHECK_EQ(has_key(c, 5, k), 1);
	check_pool(p);
	/* Released: now evict succeeds. */
	CHECK_EQ(bel_release(c, 1, off), 0);
	CHECK_EQ(bel_pool_remove_region(p, 0, true, &ev), 0);
	CHECK_EQ(ev, 1);
	CHECK_EQ(has_key(c, 5, k), 0);
	CHECK_EQ(bel_region_stats(p, 0, &rs), -ENOENT);
	CHECK_EQ(p->nr_regions, 1);
	CHECK_EQ(stats_of(p).total_blocks, 4);
	CHECK_EQ(stats_of(p).allocated_blocks, 4);
	CHECK_EQ(p->block_size, BS);
	check_pool(p);
	check_client(c);
	/* Region 1 is busy until its blocks are freed. */
	CHECK_EQ(bel_pool_remove_region(p, 1, true, &ev), -EBUSY);
	bel_client_release(c);
	CHECK_EQ(bel_pool_remove_region(p, 1, false, NULL), 0);
	CHECK_EQ(p->nr_regions, 0);
	CHECK_EQ(p->block_size, 0);
	CHECK_EQ(bel_pool_remove_region(p, 1, false, NULL), -ENOENT);
	pool_free(p);
}

static void find_offset_holes(void)
{
	struct bel_pool *p = pool_new();
	u32 slot, n, s;
	u64 first, ro;
	u64 fa, fb, fc, fd, fe;

	/* In 2 MiB units: A [0,1), B [1,6), C one block in [6,7). */
	CHECK_EQ(bel_pool_add_region(p, M2, BS, &slot, &fa, &n), 0);
	CHECK_EQ(bel_pool_add_region(p, 5 * M2, BS, &slot, &fb, &n), 0);
	CHECK_EQ(slot, 1);
	CHECK_EQ(bel_pool_add_region(p, BS, BS, &slot, &fc, &n), 0);
	CHECK_EQ(fa, 0);
	CHECK_EQ(fb, M2);
	CHECK_EQ(fc, 6 * M2);
	CHECK_EQ(bel_pool_map_size(p), 6 * M2 + BS);

	CHECK_EQ(bel_pool_find_offset(p, fb + 3 * BS + 17, &s, &ro), 0);
	CHECK_EQ(s, 1);
	CHECK_EQ(ro, 3 * BS + 17);
	/* Past C's memory (inside its 2 MiB span): nothing. */
	CHECK_EQ(bel_pool_find_offset(p, fc + BS, &s, &ro), -ENOENT);

	CHECK_EQ(bel_pool_remove_region(p, 1, false, NULL), 0);
	CHECK_EQ(bel_pool_find_offset(p, fb, &s, &ro), -ENOENT);
	CHECK_EQ(bel_pool_find_offset(p, fb + 5 * M2 - 1, &s, &ro), -ENOENT);
	CHECK_EQ(bel_pool_find_offset(p, M2 - 1, &s, &ro), 0);
	CHECK_EQ(s, 0);
	CHECK_EQ(ro, M2 - 1);
	CHECK_EQ(bel_pool_find_offset(p, fc + 5, &s, &ro), 0);
	CHECK_EQ(s, 2);
	CHECK_EQ(ro, 5);
	/* The hole stays in the map. */
	CHECK_EQ(bel_pool_map_size(p), 6 * M2 + BS);
	CHECK_EQ(stats_of(p).total_blocks, M2 / BS + 1);

	/* Too big for the 5 MiB hole: placed after C; takes slot 1. */
	CHECK_EQ(bel_pool_add_region(p, 6 * M2, BS, &slot, &fd, &n), 0);
	CHECK_EQ(slot, 1);
	CHECK_EQ(fd, 7 * M2);
	/* Fits the hole: lowest gap. */
	CHECK_EQ(bel_pool_add_region(p, 3 * M2 + BS, BS, &slot, &fe, &n), 0);
	CHECK_EQ(slot, 3);
	CHECK_EQ(fe, M2);
	/* The rest of the hole takes one more 2 MiB region, then the end. */
	CHECK_EQ(bel_pool_add_region(p, M2, BS, &slot, &first, &n), 0);
	CHECK_EQ(first, 5 * M2);
	CHECK_EQ(bel_pool_add_region(p, M2, BS, &slot, &first, &n), 0);
	CHECK_EQ(first, 13 * M2);
	CHECK_EQ(bel_pool_add_region(p, M2, BS, &slot, &first, &n), 0);
	CHECK_EQ(first, 14 * M2);
	CHECK_EQ(bel_pool_find_offset(p, fe + 3 * M2, &s, &ro), 0);
	CHECK_EQ(s, 3);
	CHECK_EQ(bel_pool_find_offset(p, fe + 3 * M2 + BS, &s, &ro), -ENOENT);
	CHECK_EQ(bel_pool_map_size(p), 15 * M2);
	/* Offsets name blocks through the new layout. */
	CHECK_EQ(bel_id_slot(id_of(p, fe + 2 * BS)), 3);
	CHECK_EQ(id_of(p, fe + 3 * M2 + BS), BEL_NONE);
	check_pool(p);
	pool_free(p);
}

static void region_stats_and_invariant(void)
{
	static const u32 sizes[] = { 10, 20 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	struct bel_region_stats r0, r1;
	struct beluga_key keys[4] = { K(1), K(2), K(3), K(4) };
	u64 offs[6];
	s32 res[4];
	u32 ok, ex, fail;
	struct bel_stats s;

	CHECK_EQ(bel_alloc(c, 6, offs), 0);
	CHECK_EQ(publish_arrays(c, 0, 4, offs, keys, res, &ok, &ex, &fail), 0);
	CHECK_EQ(ok, 4);
	CHECK_EQ(bel_region_stats(p, 0, &r0), 0);
	CHECK_EQ(bel_region_stats(p, 1, &r1), 0);
	CHECK_EQ(r0.nr_blocks, 10);
	CHECK_EQ(r1.nr_blocks, 20);
	CHECK_EQ(r0.length, 10 * BS);
	CHECK_EQ(r1.first_offset, M2);
	CHECK_EQ(r0.allocated_blocks + r1.allocated_blocks, 2);
	CHECK_EQ(r0.published_blocks, 2);
	CHECK_EQ(r1.published_blocks, 2);
	CHECK_EQ(r0.free_blocks + r1.free_blocks, 24);
	s = stats_of(p);
	CHECK_EQ(s.total_blocks, 30);
	CHECK_EQ(s.free_blocks + s.allocated_blocks + s.published_blocks, 30);
	CHECK_EQ(s.publishes, 4);
	CHECK_EQ(s.allocs, 6);
	check_pool(p);
	bel_client_release(c);
	s = stats_of(p);
	CHECK_EQ(s.allocated_blocks, 0);
	CHECK_EQ(s.published_blocks, 4);
	CHECK_EQ(s.frees, 2);
	pool_free(p);
}

/*
 * Memory errors: a retired block is never handed out again and never found,
 * whatever state it was in; a held one stays its holder's until let go.
 */
static void retire_blocks(void)
{
	u32 nr = 8;
	struct bel_pool *p = pool_with(1, &nr);
	struct bel_client *c = bel_client_new(p);
	struct beluga_key k1 = K(1), k2 = K(2), k3 = K(3);
	u64 all[8], pub, pinned, held, pin_off, off;
	s32 res = 99;
	u32 hits = 99, i, a, b, f;

	/* A FREE block (index 7, on the free list's tail). */
	CHECK_EQ(bel_retire_offset(p, 7 * BS + 100), 1);
	CHECK_EQ(bel_retire_offset(p, 7 * BS), 0);
	CHECK_EQ(stats_of(p).retired_blocks, 1);
	CHECK_EQ(stats_of(p).free_blocks, 7);
	check_pool(p);
	/* An unpinned PUBLISHED one: unpublished and retired at once. */
	pub = put_key(c, 0, k1);
	CHECK_EQ(bel_retire_offset(p, pub), 1);
	CHECK_EQ(has_key(c, 0, k1), 0);
	CHECK_EQ(stats_of(p).published_blocks, 0);
	check_pool(p);
	/* A pinned PUBLISHED one: unpublished now, retired at RELEASE. */
	pinned = put_key(c, 0, k2);
	CHECK_EQ(bel_lookup(c, 0, 1, &k2, true, &pin_off, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(bel_retire_offset(p, pinned), 1);
	CHECK_EQ(has_key(c, 0, k2), 0);
	CHECK_EQ(stats_of(p).pinned_blocks, 1);
	check_pool(p);
	CHECK_EQ(bel_release(c, 1, &pin_off), 0);
	CHECK_EQ(blk(p, pinned)->state, BEL_BLOCK_RETIRED);
	check_pool(p);
	/* An ALLOCATED one: PUBLISH answers -EIO and retires it. */
	CHECK_EQ(bel_alloc(c, 1, &held), 0);
	CHECK_EQ(bel_retire_offset(p, held), 1);
	CHECK_EQ(blk(p, held)->state, BEL_BLOCK_ALLOCATED);
	CHECK_EQ(stats_of(p).retired_blocks, 3);
	check_pool(p);
	CHECK_EQ(publish_arrays(c, 0, 1, &held, &k3, &res, &a, &b, &f), 0);
	CHECK_EQ(res, -EIO);
	CHECK_EQ(f, 1);
	CHECK_EQ(has_key(c, 0, k3), 0);
	CHECK_EQ(blk(p, held)->state, BEL_BLOCK_RETIRED);
	CHECK_EQ(stats_of(p).retired_blocks, 4);
	check_pool(p);
	/* ALLOC of the whole pool: only the 4 good blocks exist. */
	CHECK_EQ(bel_alloc(c, 5, all), -ENOSPC);
	CHECK_EQ(bel_alloc(c, 4, all), 0);
	for (i = 0; i < 4; i++)
		CHECK(all[i] != 7 * BS && all[i] != pub && all[i] != pinned &&
		      all[i] != held);
	/* An ALLOCATED one retired, then freed, and one freed at close. */
	CHECK_EQ(bel_retire_offset(p, all[0]), 1);
	CHECK_EQ(bel_free(c, 1, &all[0]), 0);
	CHECK_EQ(bel_retire_offset(p, all[1]), 1);
	check_pool(p);
	bel_client_release(c);
	c = bel_client_new(p);
	CHECK_EQ(stats_of(p).free_blocks, 2);
	CHECK_EQ(stats_of(p).retired_blocks, 6);
	CHECK_EQ(bel_alloc(c, 3, all), -ENOSPC);
	CHECK_EQ(bel_retire_offset(p, 8 * BS), -ENOENT);
	check_pool(p);
	/* Retired blocks do not keep the region from going. */
	bel_client_release(c);
	CHECK_EQ(bel_pool_remove_region(p, 0, false, NULL), 0);
	off = 0;
	CHECK_EQ(bel_retire_offset(p, off), -ENOENT);
	pool_free(p);
}

/* Counters handed over from elsewhere (a shared pool's host that left). */
static void add_counters(void)
{
	u32 blocks[] = { 4 };
	struct bel_pool *p = pool_with(1, blocks);
	struct bel_client *c = bel_client_new(p);
	struct bel_stats add = {
		.total_blocks = 100, .free_blocks = 100, .pins = 100,
		.allocs = 1, .frees = 2, .publishes = 3, .publish_races = 4,
		.lookups = 5, .lookup_keys = 6, .lookup_hits = 7,
		.releases = 8, .evictions = 9, .alloc_failures = 10,
	};
	struct bel_stats s;
	u64 off;

	CHECK_EQ(bel_alloc(c, 1, &off), 0);
	bel_pool_add_counters(p, &add.counters);
	bel_pool_add_counters(p, &add.counters);
	s = stats_of(p);
	/* Occupancy stays the pool's own. */
	CHECK_EQ(s.total_blocks, 4);
	CHECK_EQ(s.free_blocks, 3);
	CHECK_EQ(s.allocated_blocks, 1);
	CHECK_EQ(s.pins, 0);
	CHECK_EQ(s.allocs, 3);
	CHECK_EQ(s.frees, 4);
	CHECK_EQ(s.publishes, 6);
	CHECK_EQ(s.publish_races, 8);
	CHECK_EQ(s.lookups, 10);
	CHECK_EQ(s.lookup_keys, 12);
	CHECK_EQ(s.lookup_hits, 14);
	CHECK_EQ(s.releases, 16);
	CHECK_EQ(s.evictions, 18);
	CHECK_EQ(s.alloc_failures, 20);
	check_pool(p);
	bel_client_release(c);
	pool_free(p);
}

int main(void)
{
	TAP_RUN(empty_pool);
	TAP_RUN(add_region_validation);
	TAP_RUN(reserve_commit_abort);
	TAP_RUN(odd_block_size);
	TAP_RUN(alloc_round_robin);
	TAP_RUN(alloc_all_or_nothing);
	TAP_RUN(alloc_max_batch);
	TAP_RUN(free_validation);
	TAP_RUN(remove_region_rules);
	TAP_RUN(find_offset_holes);
	TAP_RUN(region_stats_and_invariant);
	TAP_RUN(retire_blocks);
	TAP_RUN(add_counters);
	return tap_done();
}
