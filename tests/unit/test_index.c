// SPDX-License-Identifier: GPL-2.0
/* PUBLISH, LOOKUP, dedup, namespaces, the hash, the LRU and eviction. */
#include "helpers.h"

static void publish_lookup(void)
{
	static const u32 sizes[] = { 8, 8 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	struct beluga_key keys[4] = { K(1), K(2), K(3), K(4) };
	struct beluga_key q[4];
	u64 offs[4], got[4];
	s32 res[4];
	u32 ok = 9, ex = 9, fail = 9, hits, i;
	struct bel_stats s;

	CHECK_EQ(bel_alloc(c, 4, offs), 0);
	CHECK_EQ(publish_arrays(c, 7, 4, offs, keys, res, &ok, &ex, &fail), 0);
	CHECK_EQ(ok, 4);
	CHECK_EQ(ex, 0);
	CHECK_EQ(fail, 0);
	for (i = 0; i < 4; i++)
		CHECK_EQ(res[i], BELUGA_PUBLISH_OK);
	CHECK_EQ(c->nr_allocated, 0);

	memset(got, 0xee, sizeof(got));
	CHECK_EQ(bel_lookup(c, 7, 4, keys, false, got, &hits), 0);
	CHECK_EQ(hits, 4);
	for (i = 0; i < 4; i++)
		CHECK_EQ(got[i], offs[i]);
	/* Leading run only. */
	q[0] = K(1);
	q[1] = K(2);
	q[2] = K(99);
	q[3] = K(4);
	memset(got, 0xee, sizeof(got));
	CHECK_EQ(bel_lookup(c, 7, 4, q, false, got, &hits), 0);
	CHECK_EQ(hits, 2);
	CHECK_EQ(got[1], offs[1]);
	CHECK_EQ(got[2], 0xeeeeeeeeeeeeeeeeULL);
	q[0] = K(99);
	CHECK_EQ(bel_lookup(c, 7, 4, q, false, NULL, &hits), 0);
	CHECK_EQ(hits, 0);
	/* Wrong namespace. */
	CHECK_EQ(bel_lookup(c, 8, 4, keys, false, NULL, &hits), 0);
	CHECK_EQ(hits, 0);
	/* Bad arguments. */
	CHECK_EQ(bel_lookup(c, 7, 0, keys, false, NULL, &hits), -EINVAL);
	CHECK_EQ(bel_lookup(c, 7, BELUGA_MAX_BATCH + 1, keys, false, NULL,
			    &hits), -EINVAL);
	CHECK_EQ(bel_lookup(c, 7, 1, keys, true, NULL, &hits), -EINVAL);
	CHECK_EQ(publish_arrays(c, 7, 0, offs, keys, res, &ok, &ex, &fail),
		 -EINVAL);
	CHECK_EQ(publish_arrays(c, 7, BELUGA_MAX_BATCH + 1, offs, keys, res, &ok,
			     &ex, &fail), -EINVAL);

	s = stats_of(p);
	CHECK_EQ(s.lookups, 4);
	CHECK_EQ(s.lookup_keys, 16);
	CHECK_EQ(s.lookup_hits, 6);
	CHECK_EQ(s.publishes, 4);
	CHECK_EQ(s.published_blocks, 4);
	CHECK_EQ(s.pins, 0);
	teardown(p, c, NULL);
}

static void dedup(void)
{
	static const u32 sizes[] = { 16 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *a = bel_client_new(p);
	struct bel_client *b = bel_client_new(p);
	struct beluga_key keys[4] = { K(10), K(11), K(10), K(12) };
	u64 offs[4], mine, got;
	s32 res[4];
	u32 ok, ex, fail, hits;
	struct bel_stats s;

	mine = put_key(a, 0, K(11));
	/* b loses on 11 (published by a) and on the second 10 (own item 0). */
	CHECK_EQ(bel_alloc(b, 4, offs), 0);
	CHECK_EQ(publish_arrays(b, 0, 4, offs, keys, res, &ok, &ex, &fail), 0);
	CHECK_EQ(res[0], BELUGA_PUBLISH_OK);
	CHECK_EQ(res[1], BELUGA_PUBLISH_EXISTS);
	CHECK_EQ(res[2], BELUGA_PUBLISH_EXISTS);
	CHECK_EQ(res[3], BELUGA_PUBLISH_OK);
	CHECK_EQ(ok, 2);
	CHECK_EQ(ex, 2);
	CHECK_EQ(fail, 0);
	/* The losers' blocks are free again, the winners' unchanged. */
	CHECK_EQ(blk(p, offs[1])->state, BEL_BLOCK_FREE);
	CHECK_EQ(blk(p, offs[2])->state, BEL_BLOCK_FREE);
	CHECK_EQ(b->nr_allocated, 0);
	CHECK_EQ(bel_lookup(b, 0, 1, &keys[1], false, &got, &hits), 0);
	CHECK_EQ(got, mine);
	CHECK_EQ(bel_lookup(b, 0, 1, &keys[0], false, &got, &hits), 0);
	CHECK_EQ(got, offs[0]);
	s = stats_of(p);
	CHECK_EQ(s.publish_races, 2);
	CHECK_EQ(s.frees, 2);
	CHECK_EQ(s.publishes, 3);
	CHECK_EQ(s.published_blocks, 3);
	CHECK_EQ(s.free_blocks, 13);
	/* Freed blocks cannot be published or freed again. */
	CHECK_EQ(publish_arrays(b, 0, 1, &offs[1], &keys[3], res, &ok, &ex,
			     &fail), 0);
	CHECK_EQ(res[0], -EPERM);
	CHECK_EQ(fail, 1);
	teardown(p, a, b);
}

static void namespaces_and_hi(void)
{
	static const u32 sizes[] = { 32 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *c = bel_client_new(p);
	struct beluga_key variants[4] = {
		K2(5, 0), K2(5, 1), K2(5, 1ULL << 63), K2(0, 5),
	};
	u64 offs[3][4], got;
	u32 ns, i, j, hits;

	for (ns = 0; ns < 3; ns++)
		for (i = 0; i < 4; i++)
			offs[ns][i] = put_key(c, ns * 0x100000000ULL,
					      variants[i]);
	/* Twelve distinct entries, each found where it was put. */
	for (ns = 0; ns < 3; ns++)
		for (i = 0; i < 4; i++) {
			CHECK_EQ(bel_lookup(c, ns * 0x100000000ULL, 1,
					    &variants[i], false, &got, &hits),
				 0);
			CHECK_EQ(hits, 1);
			CHECK_EQ(got, offs[ns][i]);
			for (j = 0; j < 4; j++)
				if (j != i || ns)
					CHECK(offs[ns][i] != offs[0][j] ||
					      (ns == 0 && i == j));
		}
	CHECK_EQ(has_key(c, 3 * 0x100000000ULL, variants[0]), 0);
	CHECK_EQ(has_key(c, 1, variants[0]), 0);
	CHECK_EQ(has_key(c, 0, K2(1, 5)), 0);
	/* Evicting one ns entry leaves the others. */
	CHECK_EQ(bel_evict_key(p, 0x100000000ULL, &variants[1]), 0);
	CHECK_EQ(has_key(c, 0x100000000ULL, variants[1]), 0);
	CHECK_EQ(has_key(c, 0, variants[1]), 1);
	CHECK_EQ(has_key(c, 0x200000000ULL, variants[1]), 1);
	CHECK_EQ(has_key(c, 0x100000000ULL, variants[2]), 1);
	check_pool(p);
	bel_client_release(c);
	pool_free(p);
}

static void publish_errors(void)
{
	static const u32 sizes[] = { 8 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *a = bel_client_new(p);
	struct bel_client *b = bel_client_new(p);
	struct beluga_key keys[5] = { K(1), K(2), K(3), K(4), K(5) };
	u64 offs[5], pub;
	s32 res[5];
	u32 ok, ex, fail;

	pub = put_key(a, 0, K(100));
	CHECK_EQ(bel_alloc(a, 2, offs), 0);
	CHECK_EQ(bel_alloc(b, 1, &offs[2]), 0);
	offs[3] = offs[0] + 512;	/* misaligned */
	offs[4] = pub;			/* already published */
	CHECK_EQ(publish_arrays(a, 0, 5, offs, keys, res, &ok, &ex, &fail), 0);
	CHECK_EQ(res[0], BELUGA_PUBLISH_OK);
	CHECK_EQ(res[1], BELUGA_PUBLISH_OK);
	CHECK_EQ(res[2], -EPERM);	/* b's block */
	CHECK_EQ(res[3], -EINVAL);
	CHECK_EQ(res[4], -EPERM);
	CHECK_EQ(ok, 2);
	CHECK_EQ(ex, 0);
	CHECK_EQ(fail, 3);
	/* The failed items changed nothing. */
	CHECK_EQ(blk(p, offs[2])->state, BEL_BLOCK_ALLOCATED);
	CHECK_EQ(blk(p, offs[2])->owner, b);
	CHECK_EQ(has_key(a, 0, K(3)), 0);
	CHECK_EQ(has_key(a, 0, K(5)), 0);
	CHECK_EQ(has_key(a, 0, K(100)), 1);
	/* The same block twice in one call: the second is -EPERM. */
	CHECK_EQ(bel_alloc(a, 1, offs), 0);
	offs[1] = offs[0];
	CHECK_EQ(publish_arrays(a, 0, 2, offs, &keys[2], res, &ok, &ex, &fail),
		 0);
	CHECK_EQ(res[0], BELUGA_PUBLISH_OK);
	CHECK_EQ(res[1], -EPERM);
	CHECK_EQ(has_key(a, 0, K(4)), 0);
	CHECK_EQ(stats_of(p).publish_races, 0);
	teardown(p, a, b);
}

/*
 * Small integer keys (trace hash ids) and keys that differ only in hi or
 * ns must spread over the buckets: no chain much longer than a random
 * hash would give.
 */
static void hash_spread(void)
{
	static const u32 sizes[] = { 16384, 16384 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	static u64 offs[BELUGA_MAX_BATCH];
	static struct beluga_key keys[BELUGA_MAX_BATCH];
	static s32 res[BELUGA_MAX_BATCH];
	u32 i, j, ok, ex, fail, longest = 0, used = 0;

	for (i = 0; i < 8; i++) {
		REQUIRE_EQ(bel_alloc(c, BELUGA_MAX_BATCH, offs), 0);
		for (j = 0; j < BELUGA_MAX_BATCH; j++) {
			u32 n = i * BELUGA_MAX_BATCH + j;

			/* Half small ints, a quarter hi-only, a quarter ns. */
			keys[j] = n < 16384 ? K(n) :
				  n < 24576 ? K2(0, n) : K(n & 0xff);
		}
		REQUIRE_EQ(publish_arrays(c, i >= 6 ? i : 0, BELUGA_MAX_BATCH,
				       offs, keys, res, &ok, &ex, &fail), 0);
		if (i < 6)
			CHECK_EQ(ok, BELUGA_MAX_BATCH);
		else
			CHECK_EQ(ok, 256);
	}
	CHECK(p->nr_buckets >= 32768);
	for (i = 0; i < p->nr_buckets; i++) {
		u32 len = 0, id;

		for (id = p->buckets[i].head; id != BEL_NONE;
		     id = bel_block_of(p, id)->hash_next)
			len++;
		used += !!len;
		if (len > longest)
			longest = len;
	}
	/* ~25100 keys in 32768 buckets: random gives ~8 at most. */
	fprintf(stderr, "# buckets %u used %u longest chain %u\n",
		p->nr_buckets, used, longest);
	CHECK(longest <= 12);
	CHECK(used > 15000);
	check_pool(p);
	bel_client_release(c);
	pool_free(p);
}

static void rehash_on_add(void)
{
	static const u32 sizes[] = { 100 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *c = bel_client_new(p);
	u64 offs[100], got;
	u32 i, hits, before;

	for (i = 0; i < 100; i++)
		offs[i] = put_key(c, 3, K(i * 7919));
	before = p->nr_buckets;
	CHECK_EQ(before, 128);
	add_blocks(p, 1000);
	CHECK_EQ(p->nr_buckets, 2048);
	for (i = 0; i < 100; i++) {
		struct beluga_key k = K(i * 7919);

		CHECK_EQ(bel_lookup(c, 3, 1, &k, false, &got, &hits), 0);
		CHECK_EQ(hits, 1);
		CHECK_EQ(got, offs[i]);
	}
	/* Adding a small region does not need a bigger table. */
	add_blocks(p, 10);
	CHECK_EQ(p->nr_buckets, 2048);
	check_pool(p);
	bel_client_release(c);
	pool_free(p);
}

/* Fill a pool of @n blocks with keys 0..n-1 published in order. */
static void fill(struct bel_client *c, u32 n, u64 *offs)
{
	u32 i;

	for (i = 0; i < n; i++)
		offs[i] = put_key(c, 0, K(i));
}

static void lru_order(void)
{
	static const u32 sizes[] = { 4, 4 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	u64 offs[8], a[3], got;
	struct beluga_key k;
	u32 hits, i;

	fill(c, 8, offs);
	CHECK_EQ(stats_of(p).free_blocks, 0);
	/* Oldest published goes first. */
	CHECK_EQ(bel_alloc(c, 1, a), 0);
	CHECK_EQ(a[0], offs[0]);
	CHECK_EQ(has_key(c, 0, K(0)), 0);
	CHECK_EQ(stats_of(p).evictions, 1);
	/* A probe without pin does not count as use. */
	CHECK_EQ(has_key(c, 0, K(1)), 1);
	/* Pin + release of key 1 makes it the newest. */
	k = K(1);
	CHECK_EQ(bel_lookup(c, 0, 1, &k, true, &got, &hits), 0);
	CHECK_EQ(got, offs[1]);
	CHECK_EQ(bel_release(c, 1, &got), 0);
	CHECK_EQ(bel_alloc(c, 2, a), 0);
	CHECK_EQ(has_key(c, 0, K(1)), 1);
	CHECK_EQ(has_key(c, 0, K(2)), 0);
	CHECK_EQ(has_key(c, 0, K(3)), 0);
	qsort(a, 2, sizeof(u64), cmp_u64);
	CHECK_EQ(a[0], offs[2] < offs[3] ? offs[2] : offs[3]);
	CHECK_EQ(a[1], offs[2] < offs[3] ? offs[3] : offs[2]);
	/* Remaining order: 4 5 6 7 1. */
	CHECK_EQ(bel_alloc(c, 3, a), 0);
	for (i = 4; i <= 6; i++)
		CHECK_EQ(has_key(c, 0, K(i)), 0);
	CHECK_EQ(has_key(c, 0, K(7)), 1);
	CHECK_EQ(has_key(c, 0, K(1)), 1);
	CHECK_EQ(stats_of(p).evictions, 6);
	/* Free blocks are used before anything is evicted. */
	CHECK_EQ(bel_free(c, 3, a), 0);
	CHECK_EQ(bel_alloc(c, 3, a), 0);
	CHECK_EQ(stats_of(p).evictions, 6);
	CHECK_EQ(has_key(c, 0, K(7)), 1);
	teardown(p, c, NULL);
}

static void pinned_never_evicted(void)
{
	static const u32 sizes[] = { 3, 3 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	struct beluga_key keys[6] = { K(0), K(1), K(2), K(3), K(4), K(5) };
	u64 offs[6], pins[6], a[2];
	struct bel_stats before;
	u32 hits;

	fill(c, 6, offs);
	/* Pin keys 0..4 (the five oldest); only key 5 is evictable. */
	CHECK_EQ(bel_lookup(r, 0, 5, keys, true, pins, &hits), 0);
	CHECK_EQ(hits, 5);
	CHECK_EQ(stats_of(p).pinned_blocks, 5);
	CHECK_EQ(stats_of(p).pins, 5);
	before = stats_of(p);
	CHECK_EQ(bel_alloc(c, 2, a), -ENOSPC);
	CHECK_EQ(has_key(c, 0, K(5)), 1);	/* not evicted for nothing */
	CHECK_EQ(stats_of(p).evictions, before.evictions);
	CHECK_EQ(stats_of(p).alloc_failures, before.alloc_failures + 1);
	CHECK_EQ(bel_alloc(c, 1, a), 0);
	CHECK_EQ(a[0], offs[5]);
	CHECK_EQ(bel_alloc(c, 1, a), -ENOSPC);
	/* Admin eviction honours pins too. */
	CHECK_EQ(bel_evict_key(p, 0, &keys[0]), -EBUSY);
	CHECK_EQ(bel_evict_key(p, 0, &keys[5]), -ENOENT);
	CHECK_EQ(has_key(c, 0, K(0)), 1);
	/* Release two; they become evictable, in release order. */
	CHECK_EQ(bel_release(r, 1, &pins[3]), 0);
	CHECK_EQ(bel_release(r, 1, &pins[1]), 0);
	CHECK_EQ(bel_alloc(c, 1, a), 0);
	CHECK_EQ(a[0], offs[3]);
	CHECK_EQ(bel_alloc(c, 1, a), 0);
	CHECK_EQ(a[0], offs[1]);
	CHECK_EQ(bel_alloc(c, 1, a), -ENOSPC);
	check_pool(p);
	check_client(r);
	check_client(c);
	bel_client_release(r);
	CHECK_EQ(stats_of(p).pins, 0);
	CHECK_EQ(stats_of(p).releases, 5);
	/* Pins gone: keys 0, 2, 4 are evictable now. */
	CHECK_EQ(bel_alloc(c, 3, pins), 0);
	CHECK_EQ(stats_of(p).published_blocks, 0);
	check_pool(p);
	bel_client_release(c);
	pool_free(p);
}

static void evict_admin(void)
{
	static const u32 sizes[] = { 8, 8 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *c = bel_client_new(p);
	struct beluga_key k;
	u64 off, busy = 99;
	u32 i, hits;

	for (i = 0; i < 10; i++)
		put_key(c, i % 2, K(i));
	k = K(3);
	CHECK_EQ(bel_lookup(c, 1, 1, &k, true, &off, &hits), 0);
	k = K(5);
	CHECK_EQ(bel_lookup(c, 1, 1, &k, true, &off, &hits), 0);
	CHECK_EQ(bel_evict_ns(p, 1, &busy), 3);
	CHECK_EQ(busy, 2);
	CHECK_EQ(has_key(c, 1, K(3)), 1);
	CHECK_EQ(has_key(c, 1, K(1)), 0);
	CHECK_EQ(has_key(c, 0, K(0)), 1);
	CHECK_EQ(stats_of(p).published_blocks, 7);
	CHECK_EQ(stats_of(p).evictions, 3);
	CHECK_EQ(bel_evict_ns(p, 9, &busy), 0);
	CHECK_EQ(busy, 0);
	k = K(2);
	CHECK_EQ(bel_evict_key(p, 0, &k), 0);
	CHECK_EQ(bel_evict_key(p, 0, &k), -ENOENT);
	CHECK_EQ(has_key(c, 0, K(2)), 0);
	CHECK_EQ(bel_evict_ns(p, 0, NULL), 4);
	CHECK_EQ(stats_of(p).published_blocks, 2);
	CHECK_EQ(stats_of(p).evictions, 8);
	check_pool(p);
	bel_client_release(c);
	CHECK_EQ(bel_evict_ns(p, 1, &busy), 2);
	CHECK_EQ(busy, 0);
	CHECK_EQ(stats_of(p).free_blocks, 16);
	check_pool(p);
	pool_free(p);
}

int main(void)
{
	TAP_RUN(publish_lookup);
	TAP_RUN(dedup);
	TAP_RUN(namespaces_and_hi);
	TAP_RUN(publish_errors);
	TAP_RUN(hash_spread);
	TAP_RUN(rehash_on_add);
	TAP_RUN(lru_order);
	TAP_RUN(pinned_never_evicted);
	TAP_RUN(evict_admin);
	return tap_done();
}
