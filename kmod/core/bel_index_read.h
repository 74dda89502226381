/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The index's lock-free read side (index.c's header comment describes the
 * protocol), inline because LOOKUP runs it once per key: an out-of-line
 * call with seven arguments, and the bucket array and rehash sequence
 * read again for every key, were a third of a count-only LOOKUP's
 * instructions. A LOOKUP reads the index's view (bel_live_view) once and
 * again only after a restart. Used by client.c; writers stay in index.c.
 */
#ifndef BEL_INDEX_READ_H
#define BEL_INDEX_READ_H

#include "bel_internal.h"
#include "bel_index_walk.h"

#ifdef BEL_TEST_WALK_HOOK
/*
 * Unit tests only (tests/unit/Makefile; never the module): the test
 * defines this hook, which runs as a lock-free walk reaches block @id,
 * before the walk reads it, so that a test can change the index at
 * exactly that point of a LOOKUP.
 */
void bel_test_at_walk(struct bel_pool *pool, u32 id);
#define bel_walk_hook(pool, id)	bel_test_at_walk(pool, id)
#else
#define bel_walk_hook(pool, id)	do { (void)(pool); (void)(id); } while (0)
#endif

/* The slow path of bel_index_get(): the key under the pool lock. */
u32 bel_index_get_locked(struct bel_pool *pool, u64 ns,
			 const struct beluga_key *key, bool pin,
			 bool *first, int *err);

/*
 * What one LOOKUP reads of the index once, not per key: the bucket array,
 * its mask and the rehash sequence they belong to. Under the RCU read
 * section an older array stays valid memory; a hit found through a chain
 * in it is validated by the block's seq, and a hit on a bucket's cache of
 * its chain's keys, or a miss, is only believed while pool->index_seq
 * still equals @iseq (else the view is read again): a rehash leaves the
 * old array's buckets as they were, and writers change only the new one.
 */
struct bel_live_view {
	struct bel_bucket *buckets;	/* NULL: no buckets when read */
	u32 mask;
	u32 iseq;
};

/*
 * The bucket array and its size as one reader may use them: the size is
 * read first, and a rehash stores the (larger) new array before its size,
 * so a reader never indexes past the array it holds.
 */
static inline struct bel_bucket *bel_buckets_read(struct bel_pool *pool,
						  u32 *nr)
{
	*nr = BEL_READ(pool->nr_buckets);
	bel_smp_rmb();
	return BEL_READ(pool->buckets);
}

/* A block reached through a link, for a lock-free reader. */
static inline struct bel_block *bel_block_rcu(struct bel_pool *pool, u32 id)
{
	struct bel_block *blocks;

	blocks = BEL_READ(pool->regions[bel_id_slot(id)].blocks);
	return &blocks[bel_id_index(id)];
}

static inline void bel_index_view_read(struct bel_pool *pool,
				       struct bel_live_view *v)
{
	u32 nr;

	v->iseq = bel_load_acquire(&pool->index_seq);
	v->buckets = bel_buckets_read(pool, &nr);
	if (!nr)
		v->buckets = NULL;
	v->mask = nr ? nr - 1 : 0;
}

static inline bool bel_bucket_key_is(const struct bel_bucket_key *bk, u64 ns,
				     const struct beluga_key *key)
{
	return BEL_READ(bk->ns) == ns && BEL_READ(bk->key.lo) == key->lo &&
	       BEL_READ(bk->key.hi) == key->hi;
}

/*
 * A count-only probe's answer from bucket @bk as read (its sequence is
 * checked by the caller): the id of (@ns, @key) when the bucket caches it
 * (*@next BEL_NONE), else BEL_NONE and in *@next the block to walk on
 * from (BEL_NONE: the chain holds no more).
 */
static inline u32 bel_bucket_probe(const struct bel_bucket *bk, u64 ns,
				   const struct beluga_key *key, u32 *next)
{
	u32 head = BEL_READ(bk->head), second = BEL_READ(bk->second);

	*next = BEL_NONE;
	if (head == BEL_NONE)
		return BEL_NONE;
	if (bel_bucket_key_is(&bk->keys[0], ns, key))
		return head;
	if (second == BEL_NONE)
		return BEL_NONE;
	if (bel_bucket_key_is(&bk->keys[1], ns, key))
		return second;
	*next = BEL_READ(bk->third);
	return BEL_NONE;
}

static inline void bel_index_prefetch(const struct bel_live_view *v, u64 hash)
{
	if (v->buckets)
		bel_prefetch(&v->buckets[(u32)hash & v->mask]);
}

/*
 * The first block the probe of (@ns, @key) will read, once its bucket is
 * in: a pinned probe's head; a count-only probe's third block, unless the
 * bucket caches the key (a hint: read without the bucket's sequence).
 */
static inline void bel_index_prefetch_head(struct bel_pool *pool,
					   const struct bel_live_view *v,
					   u64 hash, u64 ns,
					   const struct beluga_key *key,
					   bool pin)
{
	const struct bel_bucket *bk;
	u32 id;

	if (!v->buckets)
		return;
	bk = &v->buckets[(u32)hash & v->mask];
	if (pin)
		id = BEL_READ(bk->head);
	else
		bel_bucket_probe(bk, ns, key, &id);
	if (id != BEL_NONE)
		bel_prefetch(bel_block_rcu(pool, id));
}

/* Pin once unless the block is being evicted; the old count, or < 0. */
static inline s64 bel_pin_try(struct bel_block *b)
{
	u32 v = BEL_READ(b->pins);

	for (;;) {
		u32 old;

		if (v == BEL_PINS_DEAD)
			return -ENOENT;
		if (v > BEL_MAX_PINS)
			return -EOVERFLOW;
		old = bel_cmpxchg32(&b->pins, v, v + 1);
		if (old == v)
			return v;
		v = old;
	}
}

/*
 * Without the pool lock, inside bel_rcu_read_lock(): the block of (ns,
 * key), whose bel_key_hash() is @hash, or BEL_NONE. @v is the LOOKUP's
 * view, read once by bel_index_view_read() in the same read section and
 * read again here after a restart. Every block it returns was in the
 * index under (ns, key) at some moment during the call, and BEL_NONE
 * means that (ns, key) was out of the index at some moment of it, so a
 * key indexed throughout is always found. With @pin it is pinned once,
 * and *@first says whether that pin was its first. *@err (0 on entry)
 * becomes -EOVERFLOW when the pin count is full (BEL_NONE returned), or
 * -EAGAIN when the block was pinned but had left the index meanwhile: the
 * caller drops that pin and asks again.
 *
 * A count-only probe whose key its bucket caches is answered from the
 * bucket alone: its sequence, even and unchanged around the ids and keys,
 * says that they were the chain's together, and an unchanged index_seq
 * that the bucket was the live array's; any other walks on from the
 * third block (or misses where the chain has no third).
 */
static inline u32 bel_index_get(struct bel_pool *pool,
				struct bel_live_view *v, u64 ns,
				const struct beluga_key *key, u64 hash,
				bool pin, bool *first, int *err)
{
	unsigned int tries;
	u32 id;

	for (tries = 0; tries < BEL_INDEX_RETRIES; tries++) {
		const struct bel_bucket *bk;
		u32 bseq, cached;

		if (v->iseq & 1) {
			bel_index_view_read(pool, v);
			if (v->iseq & 1)
				break;	/* a rehash runs: wait on its lock */
		}
		id = BEL_NONE;
		cached = BEL_NONE;
		if (v->buckets) {
			bk = &v->buckets[(u32)hash & v->mask];
			bseq = bel_load_acquire(&bk->seq);
			if (bseq & 1)
				goto restart;	/* a writer changes it */
			if (pin)
				id = BEL_READ(bk->head);
			else
				cached = bel_bucket_probe(bk, ns, key, &id);
			bel_smp_rmb();
			if (BEL_READ(bk->seq) != bseq)
				goto restart;
		}
		if (cached != BEL_NONE) {
			bel_smp_rmb();
			if (BEL_READ(pool->index_seq) == v->iseq)
				return cached;
			goto restart;
		}
		while (id != BEL_NONE) {
			struct bel_block *b;
			enum bel_walk_step step;
			u32 seq;

			bel_walk_hook(pool, id);
			b = bel_block_rcu(pool, id);
			step = bel_walk_step(&b->seq, &b->ns, &b->key,
					     &b->hash_next, v->mask, ns, key,
					     hash, &seq, &id);
			if (step == BEL_WALK_RESTART)
				goto restart;
			if (step == BEL_WALK_NEXT)
				continue;
			if (pin) {
				s64 old = bel_pin_try(b);

				if (old == -EOVERFLOW) {
					*err = -EOVERFLOW;
					return BEL_NONE;
				}
				if (old < 0)
					goto restart;	/* being evicted */
				*first = !old;
				/* The cmpxchg was a full barrier. */
				if (BEL_READ(b->seq) != seq) {
					/* A later use of it: caller drops. */
					*err = -EAGAIN;
				}
			}
			return id;
		}
		/* A miss counts only if no rehash moved links meanwhile. */
		bel_smp_rmb();
		if (BEL_READ(pool->index_seq) == v->iseq)
			return BEL_NONE;
restart:
		bel_index_view_read(pool, v);
	}
	id = bel_index_get_locked(pool, ns, key, pin, first, err);
	bel_index_view_read(pool, v);
	return id;
}

#endif /* BEL_INDEX_READ_H */
