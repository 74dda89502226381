/* SPDX-License-Identifier: GPL-2.0 OR LGPL-2.1-or-later */
/*
 * The lock-free walk of a hash chain, one step at a time: what both
 * readers of the index share, the module's LOOKUP (bel_index_get(),
 * bel_index_read.h) on the index itself, and userspace's count-only
 * LOOKUP (bel_index_copy_get(), bel_index_copy.h) on the index's copy
 * that it maps. index.c's header comment describes the protocol.
 *
 * Dual licensed, with bel_env.h, bel_hash.h and bel_index_copy.h, because
 * libbeluga (LGPL-2.1-or-later) compiles these four files as they are,
 * so that there is one reader, not one per side. They need nothing else
 * of the core.
 */
#ifndef BEL_INDEX_WALK_H
#define BEL_INDEX_WALK_H

#include "bel_env.h"
#include "bel_hash.h"
#include <linux/beluga.h>

/*
 * Restarts of one key before a reader stops walking: the kernel's takes
 * the pool lock then, a userspace reader asks the kernel.
 */
#define BEL_INDEX_RETRIES	16

/*
 * What one count-only LOOKUP on the index's mapped copy reads of it once,
 * not per key: the copy's bucket array, its mask and the copy's sequence
 * (its header's, odd once the copy is sealed). A miss is only believed
 * while that sequence still equals @iseq. The module's own reader has the
 * same for the index itself (struct bel_live_view, bel_index_read.h).
 */
struct bel_index_view {
	u32 *buckets;		/* NULL: no buckets when read */
	u32 mask;
	u32 iseq;
};

/*
 * Did a walk for @hash that ran out of links end on another bucket's
 * chain? @bns, @blo, @bhi are the key of the last block it validated,
 * the one whose link was BELUGA_INDEX_NONE, as read inside that block's seq window.
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
 * writers keep one BELUGA_INDEX_NONE. Checking every hop costs a hash on each
 * mismatching hop of hits as well (callgrind: 20 more instructions a key,
 * +14%, on make bench's 64-key count-only LOOKUP of 16K blocks); checking
 * the end costs one hash per miss of a non-empty bucket and nothing on a
 * hit, as markers would.
 * It holds on an older view during a rehash: arrays only grow, so blocks
 * of a new array's chain share one bucket under the old mask too, and a
 * miss across a rehash is retried anyway.
 */
static inline bool bel_walk_ended_elsewhere(u32 mask, u64 hash, u64 bns,
					    u64 blo, u64 bhi)
{
	return ((u32)bel_key_hash(bns, blo, bhi) ^ (u32)hash) & mask;
}

enum bel_walk_step {
	BEL_WALK_NEXT,		/* not this one: go on to *@next */
	BEL_WALK_HIT,		/* the key, in the index at *@seq */
	BEL_WALK_RESTART,	/* changed under the walk: from the bucket */
};

/*
 * One step of a lock-free walk for (@ns, @key), whose bel_key_hash() is
 * @hash, in a bucket array of mask @mask, on the index words of one block: the block itself
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
	      const u32 *nextp, u32 mask, u64 ns,
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
	if (link == BELUGA_INDEX_NONE &&
	    bel_walk_ended_elsewhere(mask, hash, bns, blo, bhi))
		return BEL_WALK_RESTART;	/* reused elsewhere */
	*next = link;
	return BEL_WALK_NEXT;
}

#endif /* BEL_INDEX_WALK_H */
