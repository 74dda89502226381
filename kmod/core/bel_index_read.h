/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The index's lock-free read side (index.c's header comment describes the
 * protocol), inline because LOOKUP runs it once per key: an out-of-line
 * call with seven arguments, and the bucket array and rehash sequence
 * read again for every key, were a third of a count-only LOOKUP's
 * instructions. A LOOKUP reads the index's view (bel_index_view) once and
 * again only after a restart. Used by client.c; writers stay in index.c.
 */
#ifndef BEL_INDEX_READ_H
#define BEL_INDEX_READ_H

#include "bel_internal.h"

/* Restarts of one key before bel_index_get() takes the pool lock. */
#define BEL_INDEX_RETRIES	16

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
 * The bucket array and its size as one reader may use them: the size is
 * read first, and a rehash stores the (larger) new array before its size,
 * so a reader never indexes past the array it holds.
 */
static inline u32 *bel_buckets_read(struct bel_pool *pool, u32 *nr)
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

/*
 * What one LOOKUP reads of the index once, not per key: the bucket array,
 * its mask and the rehash sequence they belong to. Under the RCU read
 * section an older array stays valid memory; a hit found through it is
 * validated by the block's seq as before, and a miss is only believed
 * while pool->index_seq still equals @iseq (else the view is read again).
 */
struct bel_index_view {
	u32 *buckets;		/* NULL: no buckets when read */
	u32 mask;
	u32 iseq;
};

static inline void bel_index_view_read(struct bel_pool *pool,
				       struct bel_index_view *v)
{
	u32 nr;

	v->iseq = bel_load_acquire(&pool->index_seq);
	v->buckets = bel_buckets_read(pool, &nr);
	if (!nr)
		v->buckets = NULL;
	v->mask = nr ? nr - 1 : 0;
}

static inline void bel_index_prefetch(const struct bel_index_view *v, u64 hash)
{
	if (v->buckets)
		bel_prefetch(&v->buckets[(u32)hash & v->mask]);
}

static inline void bel_index_prefetch_head(struct bel_pool *pool,
					   const struct bel_index_view *v,
					   u64 hash)
{
	u32 id;

	if (!v->buckets)
		return;
	id = bel_load_acquire(&v->buckets[(u32)hash & v->mask]);
	if (id != BEL_NONE)
		bel_prefetch(bel_block_rcu(pool, id));
}

/*
 * Did a walk for @hash that ran out of links end on another bucket's
 * chain? @bns, @blo, @bhi are the key of the last block it validated,
 * the one whose link was BEL_NONE, as read inside that block's seq window.
 *
 * Blocks are reused without a grace period: between reading a link and
 * reading the block it leads to, the block can be evicted, handed out
 * again and published under a key of another bucket. Its seq is then even
 * and stable, it validates, and its link leads the walk into that other
 * chain, whose end would pass for a miss of a key that never left the
 * index (second review, finding 2). Checking the chain's last block is
 * enough: blocks join a chain only at its head, so a key that stays in
 * bucket B throughout stays further down B's chain than any block the
 * walk validates in B, and a walk that ends on B's last block has passed
 * it. This is hlist_nulls' check (Documentation/RCU/rculist_nulls.rst),
 * with the bucket taken from the last block's key instead of an end
 * marker.
 *
 * Why not nulls markers themselves, or the same check on every
 * mismatching hop: markers would make every insertion and removal at a
 * chain's end, the rehash and each walk under the pool lock write or
 * know the bucket's marker, where this check is the reader's alone and
 * writers keep one BEL_NONE. Checking every hop costs a hash on each
 * mismatching hop of hits as well (callgrind: 20 more instructions a key,
 * +14%, on make bench's 64-key count-only LOOKUP of 16K blocks); checking
 * the end costs one hash per miss of a non-empty bucket and nothing on a
 * hit, as markers would.
 * It holds on an older view during a rehash: arrays only grow, so blocks
 * of a new array's chain share one bucket under the old mask too, and a
 * miss across a rehash is retried anyway.
 */
static inline bool bel_walk_ended_elsewhere(const struct bel_index_view *v,
					    u64 hash, u64 bns, u64 blo,
					    u64 bhi)
{
	return ((u32)bel_key_hash(bns, blo, bhi) ^ (u32)hash) & v->mask;
}

enum bel_walk_step {
	BEL_WALK_NEXT,		/* not this one: go on to *@next */
	BEL_WALK_HIT,		/* the key, in the index at *@seq */
	BEL_WALK_RESTART,	/* changed under the walk: from the bucket */
};

/*
 * One step of a lock-free walk for (@ns, @key), whose bel_key_hash() is
 * @hash, on the index words of one block: the block itself
 * (bel_index_get()) or its entry in a mapped copy of the index
 * (bel_index_copy_get(), bel_index_copy.h); one function for both, so
 * that the kernel and a userspace reader validate alike. The sequence is
 * read before and after the key and the link; odd or changed, the walk
 * restarts, and so it does when a chain ends on a block of another bucket
 * (bel_walk_ended_elsewhere()). On a hit *@seq is the sequence the key
 * was read under; on BEL_WALK_NEXT *@next is the link.
 */
static inline enum bel_walk_step
bel_walk_step(const u32 *seqp, const u64 *nsp, const struct beluga_key *keyp,
	      const u32 *nextp, const struct bel_index_view *v, u64 ns,
	      const struct beluga_key *key, u64 hash, u32 *seq, u32 *next)
{
	u64 bns, blo, bhi;
	u32 s, link;

	s = bel_load_acquire(seqp);
	if (s & 1)
		return BEL_WALK_RESTART;	/* left the index */
	bns = BEL_READ(*nsp);
	blo = BEL_READ(keyp->lo);
	bhi = BEL_READ(keyp->hi);
	link = BEL_READ(*nextp);
	bel_smp_rmb();
	if (BEL_READ(*seqp) != s)
		return BEL_WALK_RESTART;
	if (bns == ns && blo == key->lo && bhi == key->hi) {
		*seq = s;
		return BEL_WALK_HIT;
	}
	if (link == BEL_NONE &&
	    bel_walk_ended_elsewhere(v, hash, bns, blo, bhi))
		return BEL_WALK_RESTART;	/* reused elsewhere */
	*next = link;
	return BEL_WALK_NEXT;
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
 */
static inline u32 bel_index_get(struct bel_pool *pool,
				struct bel_index_view *v, u64 ns,
				const struct beluga_key *key, u64 hash,
				bool pin, bool *first, int *err)
{
	unsigned int tries;
	u32 id;

	for (tries = 0; tries < BEL_INDEX_RETRIES; tries++) {
		if (v->iseq & 1) {
			bel_index_view_read(pool, v);
			if (v->iseq & 1)
				break;	/* a rehash runs: wait on its lock */
		}
		id = v->buckets ? bel_load_acquire(&v->buckets[(u32)hash & v->mask])
				: BEL_NONE;
		while (id != BEL_NONE) {
			struct bel_block *b;
			enum bel_walk_step step;
			u32 seq;

			bel_walk_hook(pool, id);
			b = bel_block_rcu(pool, id);
			step = bel_walk_step(&b->seq, &b->ns, &b->key,
					     &b->hash_next, v, ns, key, hash,
					     &seq, &id);
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
