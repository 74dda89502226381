// SPDX-License-Identifier: GPL-2.0
/*
 * The key index: a chained hash table from (namespace, key) to the id of
 * the PUBLISHED block that holds it. Chains run through bel_block.hash_next,
 * so the index needs no memory of its own beyond the bucket array, which
 * pool.c sizes (a power of two, at least the number of blocks) and
 * replaces, allocated beforehand, when regions are added.
 *
 * Writers (insert, remove, rehash) hold pool->lock. Readers (LOOKUP) hold
 * no lock: they run inside an RCU read section, which keeps the bucket
 * array and the block arrays they reach from being freed (pool.c frees
 * both only after bel_synchronize_rcu()). Why RCU plus per-block
 * validation rather than sharded locks or a seqlock over the whole index:
 * readers then write nothing shared while they walk, so lookups of
 * different workers do not bounce any line but the pins of the blocks
 * they pin, and a writer never waits for readers on its hot path.
 *
 * Blocks are reused without waiting for readers (an evicted block may be
 * handed out at once), so a reader may be standing on a block that has
 * left its chain, or joined another. Each block carries an index
 * sequence (bel_block.seq, even while indexed): a reader reads it before
 * and after the key and the link, and restarts the key from its bucket
 * when it changed or is odd. Removal makes it odd before touching the link,
 * insertion sets the key and the link before making it even. A rehash
 * moves links without touching block sequences; it makes pool->index_seq
 * odd while it runs, and a miss seen across a change of it is retried.
 * After BEL_INDEX_RETRIES restarts a key is looked up under the pool lock,
 * so a reader cannot be kept walking by writers.
 *
 * Cache lines: a bucket is 4 bytes (16 per line) and a block is one line,
 * so a probe that hits at the head of its chain touches two lines; a chain
 * lookup prefetches the buckets of the keys ahead of the one it walks
 * (client.c), so that those misses overlap.
 *
 * The read side is inline, in bel_index_read.h.
 */
#include "bel_index_read.h"

/* The bucket of (@ns, @key): bel_hash.h says why the hash mixes. */
static u32 bel_hash_of(u32 nr_buckets, u64 ns, const struct beluga_key *key)
{
	return (u32)bel_key_hash(ns, key->lo, key->hi) & (nr_buckets - 1);
}

static u32 bel_hash(const struct bel_pool *pool, u64 ns,
		    const struct beluga_key *key)
{
	return bel_hash_of(pool->nr_buckets, ns, key);
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

/* Under the pool lock: no claim can be in progress (claims hold it). */
u32 bel_index_get_locked(struct bel_pool *pool, u64 ns,
				const struct beluga_key *key, bool pin,
				bool *first, int *err)
{
	u32 id;
	s64 old;

	bel_spin_lock(&pool->lock);
	id = bel_index_find_locked(pool, ns, key);
	if (id != BEL_NONE && pin) {
		old = bel_pin_try(bel_block_of(pool, id));
		if (old < 0) {
			*err = (int)old;
			id = BEL_NONE;
		} else {
			*first = !old;
		}
	}
	bel_spin_unlock(&pool->lock);
	return id;
}

void bel_index_insert_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 h = bel_hash(pool, b->ns, &b->key);

	BEL_ASSERT(b->seq & 1 || !b->seq);
	BEL_WRITE(b->hash_next, pool->buckets[h]);
	/* Key and link before the even sequence, the block before its head. */
	bel_store_release(&b->seq, (b->seq | 1) + 1);
	bel_store_release(&pool->buckets[h], id);
}

void bel_index_remove_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 *link = &pool->buckets[bel_hash(pool, b->ns, &b->key)];

	/* Odd before any link changes, so readers on it restart. */
	BEL_WRITE(b->seq, b->seq + 1);
	bel_smp_wmb();
	while (*link != BEL_NONE && *link != id)
		link = &bel_block_of(pool, *link)->hash_next;
	BEL_ASSERT(*link == id);
	if (*link == id)
		BEL_WRITE(*link, b->hash_next);
	BEL_WRITE(b->hash_next, BEL_NONE);
}

/* Rehash's own insertion: the block stays indexed, its sequence stays. */
static void bel_index_move_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 h = bel_hash(pool, b->ns, &b->key);

	BEL_WRITE(b->hash_next, pool->buckets[h]);
	bel_store_release(&pool->buckets[h], id);
}

u32 *bel_index_rehash_locked(struct bel_pool *pool, u32 *buckets,
			     u32 nr_buckets)
{
	u32 *old = pool->buckets;
	u32 old_nr = pool->nr_buckets;
	u32 i;

	BEL_WRITE(pool->index_seq, pool->index_seq + 1);
	bel_smp_wmb();
	/* The array before its size: see bel_buckets_read(). */
	BEL_WRITE(pool->buckets, buckets);
	bel_smp_wmb();
	BEL_WRITE(pool->nr_buckets, nr_buckets);
	for (i = 0; i < old_nr; i++) {
		u32 id = old[i];

		while (id != BEL_NONE) {
			u32 next = bel_block_of(pool, id)->hash_next;

			bel_index_move_locked(pool, id);
			id = next;
		}
	}
	bel_store_release(&pool->index_seq, pool->index_seq + 1);
	return old;
}
