/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared between the portable core's files (pool.c, index.c, lru.c,
 * client.c). Not part of the API the kernel glue uses: everything here whose
 * name ends in _locked expects pool->lock to be held by the caller.
 */
#ifndef BEL_INTERNAL_H
#define BEL_INTERNAL_H

#include "bel_core.h"
#include "bel_hash.h"

/*
 * kvcalloc() refuses (and warns about) anything above INT_MAX bytes; stay
 * below that for every metadata array so that no request of a user can
 * trigger that warning.
 */
#define BEL_ALLOC_MAX_BYTES	0x7fffffffULL

/*
 * Items (blocks, pin-table slots) a long walk visits per hold of the pool
 * lock: the administrative scans (pool.c) and a client's release
 * (client.c) drop the lock after this many so that the other CPUs waiting
 * on it are not stalled by a walk over a big pool.
 */
#define BEL_SCAN_CHUNK	4096U

/* Hash buckets: a power of two, at least the blocks, at most this. */
#define BEL_MAX_BUCKETS		0x10000000U	/* 2^28 */

/* Smallest power of two >= @x (x <= 2^63); 1 for 0. */
static inline u64 bel_roundup_pow2(u64 x)
{
	u64 r = 1;

	while (r < x)
		r <<= 1;
	return r;
}

/* --- pool.c ----------------------------------------------------------- */

/* Block id of @offset, or BEL_NONE when it names no block of a region. */
u32 bel_offset_to_id_locked(struct bel_pool *pool, u64 offset);
/* The same without the lock, inside bel_rcu_read_lock() (pool.c). */
u32 bel_offset_to_id(struct bel_pool *pool, u64 offset);
/* Offset of block @id; under the lock, or while its region cannot go. */
u64 bel_id_to_offset(struct bel_pool *pool, u32 id);

/*
 * Claim an unpinned PUBLISHED block for eviction: pins 0 -> BEL_PINS_DEAD,
 * which no LOOKUP can pin past. False when it is pinned (or briefly held
 * by a reader that is about to drop it).
 */
static inline bool bel_claim_locked(struct bel_block *b)
{
	return bel_cmpxchg32(&b->pins, 0, BEL_PINS_DEAD) == 0;
}

/* Undo a claim that an all-or-nothing caller does not use. */
static inline void bel_unclaim_locked(struct bel_block *b)
{
	bel_store_release(&b->pins, 0);
}

/* Claimed PUBLISHED block -> FREE: out of the index and the LRU. */
void bel_evict_block_locked(struct bel_pool *pool, u32 id);
/* Any not-yet-FREE block, already off every list but the index -> FREE. */
void bel_put_free_locked(struct bel_pool *pool, u32 id);
/*
 * Take one FREE block off a free list, round robin across regions, and
 * make it ALLOCATED to @owner (not yet on the owner's list). BEL_NONE when
 * no region has a free block.
 */
u32 bel_take_free_locked(struct bel_pool *pool, struct bel_client *owner);
/* Blocks on the free lists. */
u64 bel_nr_free_locked(struct bel_pool *pool);

/* --- index.c ---------------------------------------------------------- */

u32 bel_index_find_locked(struct bel_pool *pool, u64 ns,
			  const struct beluga_key *key);
/* The block's ns and key are set; the key must not be present yet. */
void bel_index_insert_locked(struct bel_pool *pool, u32 id);
void bel_index_remove_locked(struct bel_pool *pool, u32 id);
/* @nr empty buckets, line-aligned; freed with bel_kvfree(). */
struct bel_bucket *bel_buckets_new(u32 nr);
/*
 * Move every entry into @buckets (@nr_buckets, a power of two, from
 * bel_buckets_new()) and return the old array, which the caller frees
 * unlocked.
 */
struct bel_bucket *bel_index_rehash_locked(struct bel_pool *pool,
					   struct bel_bucket *buckets,
					   u32 nr_buckets);

/* --- lru.c ------------------------------------------------------------ */

/*
 * Under the pool lock. Add @n PUBLISHED blocks @ids to @shard, @ids[i] at
 * its place for stamp @t[i] (the newest end unless a later stamp is
 * already there); take one off.
 */
void bel_lru_add_locked(struct bel_pool *pool, const u32 *ids,
			const u64 *t, u32 n, u32 shard);
void bel_lru_del_locked(struct bel_pool *pool, u32 id);
/*
 * A block on the LRU lost its last pin of @c at @t, under the pool lock:
 * to its place in @c's home shard, unless it is newer.
 */
void bel_lru_touch_locked(struct bel_client *c, u32 id, u64 t);
/*
 * Without the pool lock, in an RCU read section: a block lost a pin that
 * was no use (a LOOKUP's mistake or undo) and may have no pins left. If
 * an eviction parked it, it goes back to its old place; else nothing.
 */
void bel_lru_unpark(struct bel_client *c, u32 id);

/*
 * Eviction, under the pool lock, after bel_lru_merge_locked(): claim up
 * to @need unpinned blocks, oldest first, and take them off the LRU.
 * Pinned blocks met on the way are parked until their last pin goes,
 * each taking one from *@budget; at 0 the claim stops early. Returns how
 * many were claimed; they are linked through bel_block.next from
 * *@victims, oldest first. bel_lru_unclaim_locked() puts them all back
 * as they were.
 */
u32 bel_lru_claim_locked(struct bel_pool *pool, u32 need, u32 *victims,
			 u32 *budget);
void bel_lru_unclaim_locked(struct bel_pool *pool, u32 victims);
/*
 * Under the pool lock: wait until no block is between two LRU lists
 * (a merge moving it), so that a claim after it sees every block.
 */
void bel_lru_wait_transit_locked(struct bel_pool *pool);

/*
 * The whole order, oldest first, into @ids (at most @max); how many
 * blocks are on the LRU. Ties between shards go to the lower shard, as
 * in eviction. For checks and tests.
 */
u32 bel_lru_order_locked(struct bel_pool *pool, u32 *ids, u32 max);

/*
 * Merge every client's LRU log into the LRU. Eviction does this first,
 * under the pool lock, so that it sees every earlier RELEASE. May sleep:
 * it lets the pool lock go between clients every BEL_SCAN_CHUNK entries
 * (bel_pool_pause_locked()).
 */
void bel_lru_merge_locked(struct bel_pool *pool);
/*
 * Under the pool lock, before @c leaves pool->clients: merges that let
 * the lock go skip it, and its own log goes to the LRU.
 */
void bel_lru_client_gone_locked(struct bel_client *c);

/*
 * Let the CPUs waiting on the pool lock in, and let the scheduler run,
 * between two chunks of a long walk. Called and returns with the lock
 * held; process context only (client.c).
 */
void bel_pool_pause_locked(struct bel_pool *pool);
/*
 * Record that the @n blocks @ids lost their last pin, @ids[i] at @t[i]
 * (in increasing order). Called by @c's own calls, without the pool lock;
 * merges @c's log into the LRU's shards when it is full.
 */
void bel_lru_log(struct bel_client *c, const u32 *ids, const u64 *t, u32 n);
int bel_lru_log_init(struct bel_client *c);
void bel_lru_log_free(struct bel_client *c);

#endif /* BEL_INTERNAL_H */
