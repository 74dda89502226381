// SPDX-License-Identifier: GPL-2.0
/*
 * The key index: a chained hash table from (namespace, key) to the id of
 * the PUBLISHED block that holds it. Chains run through bel_block.hash_next,
 * so the index needs no memory of its own beyond the bucket array, which
 * pool.c sizes (a power of two, at least the number of blocks) and
 * replaces, allocated beforehand, when regions are added. Everything here
 * runs under pool->lock.
 */
#include "bel_internal.h"

/* The bucket of (@ns, @key): bel_hash.h says why the hash mixes. */
static u32 bel_hash(const struct bel_pool *pool, u64 ns,
		    const struct beluga_key *key)
{
	return (u32)bel_key_hash(ns, key->lo, key->hi) & (pool->nr_buckets - 1);
}

static bool bel_key_eq(const struct bel_block *b, u64 ns,
		       const struct beluga_key *key)
{
	return b->ns == ns && b->key.lo == key->lo && b->key.hi == key->hi;
}

u32 bel_index_find_locked(struct bel_pool *pool, u64 ns,
			  const struct beluga_key *key)
{
	u32 id;

	if (!pool->nr_buckets)
		return BEL_NONE;
	id = pool->buckets[bel_hash(pool, ns, key)];
	while (id != BEL_NONE) {
		struct bel_block *b = bel_block_of(pool, id);

		if (bel_key_eq(b, ns, key))
			return id;
		id = b->hash_next;
	}
	return BEL_NONE;
}

void bel_index_insert_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 h = bel_hash(pool, b->ns, &b->key);

	b->hash_next = pool->buckets[h];
	pool->buckets[h] = id;
}

void bel_index_remove_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 *link = &pool->buckets[bel_hash(pool, b->ns, &b->key)];

	while (*link != BEL_NONE && *link != id)
		link = &bel_block_of(pool, *link)->hash_next;
	BEL_ASSERT(*link == id);
	if (*link == id)
		*link = b->hash_next;
	b->hash_next = BEL_NONE;
}

u32 *bel_index_rehash_locked(struct bel_pool *pool, u32 *buckets,
			     u32 nr_buckets)
{
	u32 *old = pool->buckets;
	u32 old_nr = pool->nr_buckets;
	u32 i;

	pool->buckets = buckets;
	pool->nr_buckets = nr_buckets;
	for (i = 0; i < old_nr; i++) {
		u32 id = old[i];

		while (id != BEL_NONE) {
			u32 next = bel_block_of(pool, id)->hash_next;

			bel_index_insert_locked(pool, id);
			id = next;
		}
	}
	return old;
}
