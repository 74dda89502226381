/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Test helpers: pools of small regions, and a structural check that walks
 * every list of the core and compares it with every counter. White box on
 * purpose: it reads the core's internals, so a bookkeeping slip shows up at
 * the step that made it rather than much later.
 */
#ifndef BEL_TEST_HELPERS_H
#define BEL_TEST_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../lib/tap.h"
#include "bel_internal.h"

#define BS 4096ULL		/* block size of the test pools */

static inline struct bel_pool *pool_new(void)
{
	struct bel_pool *p = calloc(1, sizeof(*p));

	if (!p)
		abort();
	bel_pool_init(p);
	return p;
}

static inline void pool_free(struct bel_pool *p)
{
	bel_pool_destroy(p);
	free(p);
}

/* Add a region of @nr blocks of BS bytes; returns its slot or aborts. */
static inline u32 add_blocks(struct bel_pool *p, u32 nr)
{
	u32 slot, n;
	u64 first;
	int ret = bel_pool_add_region(p, nr * BS, BS, &slot, &first, &n);

	if (ret || n != nr) {
		fprintf(stderr, "# add_blocks(%u): %d\n", nr, ret);
		abort();
	}
	return slot;
}

/* A pool with regions of the given block counts, BS each. */
static inline struct bel_pool *pool_with(int nr, const u32 *blocks)
{
	struct bel_pool *p = pool_new();
	int i;

	for (i = 0; i < nr; i++)
		add_blocks(p, blocks[i]);
	return p;
}

static inline struct beluga_key K(u64 lo)
{
	struct beluga_key k = { .lo = lo, .hi = 0 };

	return k;
}

static inline struct beluga_key K2(u64 lo, u64 hi)
{
	struct beluga_key k = { .lo = lo, .hi = hi };

	return k;
}

static inline struct bel_stats stats_of(struct bel_pool *p)
{
	struct bel_stats s;

	bel_pool_stats(p, &s);
	return s;
}

/* Block id behind @off, checked against the public arithmetic. */
static inline u32 id_of(struct bel_pool *p, u64 off)
{
	u32 id;

	bel_spin_lock(&p->lock);
	id = bel_offset_to_id_locked(p, off);
	bel_spin_unlock(&p->lock);
	return id;
}

static inline u32 slot_of(struct bel_pool *p, u64 off)
{
	return bel_id_slot(id_of(p, off));
}

static inline struct bel_block *blk(struct bel_pool *p, u64 off)
{
	return bel_block_of(p, id_of(p, off));
}

/*
 * PUBLISH of parallel arrays, the way most cases here are written: builds
 * the uapi's items for bel_publish() and hands each result back in @res.
 * A count the core refuses reaches it as is (the arrays may be shorter).
 */
static inline int publish_arrays(struct bel_client *c, u64 ns, u32 n,
				 const u64 *offs,
				 const struct beluga_key *keys, s32 *res,
				 u32 *ok, u32 *ex, u32 *fail)
{
	struct beluga_publish_item one = { 0 }, *items = &one;
	u32 i;
	int ret;

	if (!n || n > BELUGA_MAX_BATCH)
		return bel_publish(c, ns, n, items, ok, ex, fail);
	items = calloc(n, sizeof(*items));
	if (!items)
		abort();
	for (i = 0; i < n; i++) {
		items[i].offset = offs[i];
		items[i].key = keys[i];
	}
	ret = bel_publish(c, ns, n, items, ok, ex, fail);
	for (i = 0; !ret && i < n; i++)
		res[i] = items[i].result;
	free(items);
	return ret;
}

/* Allocate and publish one block under (ns, key); returns its offset. */
static inline u64 put_key(struct bel_client *c, u64 ns, struct beluga_key k)
{
	u64 off = ~0ULL;
	s32 res = 99;
	u32 a, b, f;

	if (bel_alloc(c, 1, &off) ||
	    publish_arrays(c, ns, 1, &off, &k, &res, &a, &b, &f) ||
	    res != BELUGA_PUBLISH_OK) {
		fprintf(stderr, "# put_key failed (res %d)\n", res);
		abort();
	}
	return off;
}

/* hits of a count-only probe of one key */
static inline u32 has_key(struct bel_client *c, u64 ns, struct beluga_key k)
{
	u32 hits = 99;

	if (bel_lookup(c, ns, 1, &k, false, NULL, &hits))
		abort();
	return hits;
}

/*
 * Walk everything under the lock and compare with the counters. Returns
 * the number of problems found (each also reported through CHECK).
 */
static inline int check_pool(struct bel_pool *p)
{
	int before = tap_case_failures;
	u64 free_n = 0, alloc_n = 0, pub_n = 0, pinned = 0, pins = 0;
	u64 lru_n = 0, lru_idle = 0, chained = 0, total = 0, ret_n = 0;
	u64 unindexed = 0;
	u32 slot, i, id, prev, steps;
	struct bel_stats s;

	bel_spin_lock(&p->lock);
	/* RELEASE logs its LRU moves per client; apply them first. */
	bel_lru_merge_locked(p);
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		struct bel_region *r = &p->regions[slot];
		u32 nf = 0, na = 0, np = 0, nr = 0;

		if (!r->present)
			continue;
		total += r->nr_blocks;
		for (i = 0; i < r->nr_blocks; i++) {
			struct bel_block *b = &r->blocks[i];

			id = bel_block_id(slot, i);
			switch (b->state) {
			case BEL_BLOCK_FREE:
				nf++;
				CHECK(!b->pins && !b->in_lru && !b->owner);
				break;
			case BEL_BLOCK_ALLOCATED:
				na++;
				CHECK(!b->pins && !b->in_lru && b->owner);
				break;
			case BEL_BLOCK_PUBLISHED:
				np++;
				CHECK(!b->owner);
				if (b->retired) {
					/* Unpublished; RETIRED at last pin. */
					CHECK(b->pins && !b->in_lru);
					CHECK(bel_index_find_locked(p, b->ns,
								    &b->key) != id);
					unindexed++;
				} else {
					CHECK_EQ(bel_index_find_locked(p, b->ns,
								       &b->key),
						 id);
					/* Pinned or not: on the LRU. */
					CHECK(b->in_lru);
				}
				pins += b->pins;
				pinned += !!b->pins;
				break;
			case BEL_BLOCK_RETIRED:
				nr++;
				CHECK(b->retired && !b->pins && !b->in_lru &&
				      !b->owner);
				break;
			default:
				CHECK(0);
			}
		}
		CHECK_EQ(nf, r->nr_free);
		CHECK_EQ(na, r->nr_allocated);
		CHECK_EQ(np, r->nr_published);
		CHECK_EQ(nr, r->nr_retired);
		CHECK_EQ(r->nr_free + r->nr_allocated + r->nr_published + nr,
			 r->nr_blocks);
		/* The free list holds exactly the FREE blocks. */
		steps = 0;
		for (i = r->free_head; i != BEL_NONE && steps <= r->nr_blocks;
		     i = r->blocks[i].next, steps++)
			CHECK_EQ(r->blocks[i].state, BEL_BLOCK_FREE);
		CHECK_EQ(steps, r->nr_free);
		free_n += nf;
		alloc_n += na;
		pub_n += np;
		ret_n += nr;
	}
	/*
	 * LRU: each shard holds the blocks that say so, published and indexed,
	 * linked both ways, in time order; together exactly the published
	 * blocks that are not retired, pinned or not.
	 */
	for (slot = 0; slot < BEL_LRU_SHARDS; slot++) {
		u64 last = 0;

		prev = BEL_NONE;
		steps = 0;
		for (id = p->lru[slot].head; id != BEL_NONE && steps <= total;
		     id = bel_block_of(p, id)->next, steps++) {
			struct bel_block *b = bel_block_of(p, id);

			CHECK_EQ(b->lru_shard, slot);
			CHECK(b->in_lru && b->state == BEL_BLOCK_PUBLISHED &&
			      !b->retired);
			CHECK_EQ(b->prev, prev);
			CHECK(b->used >= last);
			last = b->used;
			prev = id;
			lru_idle += !b->pins;
		}
		CHECK_EQ(p->lru[slot].tail, prev);
		lru_n += steps;
	}
	/*
	 * Parked: blocks an eviction met pinned, in no order. Once every log
	 * is merged, each still has a pin, or its last release would have
	 * taken it back.
	 */
	prev = BEL_NONE;
	steps = 0;
	for (id = p->lru[BEL_LRU_PARKED].head; id != BEL_NONE && steps <= total;
	     id = bel_block_of(p, id)->next, steps++) {
		struct bel_block *b = bel_block_of(p, id);

		CHECK_EQ(b->lru_shard, BEL_LRU_PARKED);
		CHECK(b->in_lru && b->state == BEL_BLOCK_PUBLISHED &&
		      !b->retired);
		CHECK(b->pins);
		CHECK_EQ(b->prev, prev);
		prev = id;
	}
	CHECK_EQ(p->lru[BEL_LRU_PARKED].tail, prev);
	lru_n += steps;
	CHECK_EQ(lru_idle, pub_n - pinned);
	CHECK_EQ(lru_n, pub_n - unindexed);
	for (i = 0; i < p->nr_buckets; i++) {
		const struct bel_bucket *bk = &p->buckets[i];
		u32 at = 0, cached[3] = { bk->head, bk->second, bk->third };

		/* Stable, and its cache the chain's first blocks. */
		CHECK_EQ(bk->seq & 1, 0);
		for (id = bk->head; at < 3; at++) {
			CHECK_EQ(cached[at], id);
			if (id == BEL_NONE)
				break;
			if (at < 2)
				CHECK(bk->keys[at].ns == bel_block_of(p, id)->ns &&
				      bk->keys[at].key.lo == bel_block_of(p, id)->key.lo &&
				      bk->keys[at].key.hi == bel_block_of(p, id)->key.hi);
			id = bel_block_of(p, id)->hash_next;
		}
		for (id = bk->head; id != BEL_NONE && chained <= total;
		     id = bel_block_of(p, id)->hash_next)
			chained++;
	}
	CHECK_EQ(chained, pub_n - unindexed);
	if (p->nr_regions)
		CHECK(p->nr_buckets >= (total < (1U << 28) ? total : 1U << 28));
	bel_spin_unlock(&p->lock);

	bel_pool_stats(p, &s);
	CHECK_EQ(s.pinned_blocks, pinned);
	CHECK_EQ(s.pins, pins);
	CHECK_EQ(s.total_blocks, total);
	CHECK_EQ(s.free_blocks, free_n);
	CHECK_EQ(s.allocated_blocks, alloc_n);
	CHECK_EQ(s.published_blocks, pub_n);
	CHECK_EQ(s.retired_blocks, ret_n);
	CHECK_EQ(s.total_blocks, s.free_blocks + s.allocated_blocks +
		 s.published_blocks + s.retired_blocks);
	return tap_case_failures - before;
}

/* A client's own list and pin table against its counters. */
static inline int check_client(struct bel_client *c)
{
	int before = tap_case_failures;
	struct bel_pool *p = c->pool;
	u64 owned = 0, pins = 0, used = 0;
	u32 id, i;

	bel_spin_lock(&p->lock);
	for (id = c->alloc_head; id != BEL_NONE && owned <= (1U << 31);
	     id = bel_block_of(p, id)->next) {
		struct bel_block *b = bel_block_of(p, id);

		CHECK(b->state == BEL_BLOCK_ALLOCATED && b->owner == c);
		owned++;
	}
	CHECK_EQ(owned, c->nr_allocated);
	for (i = 0; i < c->pins.capacity; i++) {
		struct bel_block *b;

		if (c->pins.ids[i] == BEL_NONE)
			continue;
		used++;
		pins += c->pins.counts[i];
		CHECK(c->pins.counts[i] > 0);
		b = bel_block_of(p, c->pins.ids[i]);
		CHECK(b->state == BEL_BLOCK_PUBLISHED);
		CHECK(b->pins >= c->pins.counts[i]);
	}
	CHECK_EQ(used, c->pins.used);
	CHECK_EQ(pins, c->nr_pins);
	CHECK(c->pins.used * 2 <= c->pins.capacity || !c->pins.capacity);
	bel_spin_unlock(&p->lock);
	return tap_case_failures - before;
}

/* Order-independent comparison helper for u64 arrays. */
/*
 * The usual end of a test: check the pool and its clients (@b may be
 * NULL), release the clients, free the pool.
 */
static inline void teardown(struct bel_pool *p, struct bel_client *a,
			    struct bel_client *b)
{
	check_pool(p);
	check_client(a);
	if (b)
		check_client(b);
	bel_client_release(a);
	if (b)
		bel_client_release(b);
	pool_free(p);
}

static inline int cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

#endif /* BEL_TEST_HELPERS_H */
