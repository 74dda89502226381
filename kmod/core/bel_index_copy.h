/* SPDX-License-Identifier: GPL-2.0 OR LGPL-2.1-or-later */
/*
 * The index's copy: the key index of a single-host pool written a second
 * time, into memory that userspace maps read-only, so that a count-only
 * LOOKUP runs in the caller's address space with no system call (uapi:
 * "The index, mapped read-only"). Why a copy rather than the index
 * itself: a block's index words share its cache line, and so its page,
 * with its pins, owner pointer and LRU links, which no reader outside the
 * kernel may see; and the copy costs nothing to a pool that nobody maps.
 *
 * Writers: index.c writes the copy under the pool lock, next to each write
 * of the index, in the same order (key and link, then an even sequence,
 * then the bucket; an odd sequence before a link changes), so a reader of
 * the copy validates exactly as a reader of the index does, with the same
 * step (bel_walk_step(), bel_index_read.h). The copy covers the regions
 * present when it was made and the bucket array of that moment: a change
 * of either (a region committed or removed, a rehash) seals it instead of
 * following it (its header's seq becomes odd for good), and the pool
 * forgets it. Its memory belongs to the caller of bel_index_copy_start()
 * (the glue: pages userspace maps; tests: their own buffer), which frees
 * it after a seal, when nobody maps it any more.
 *
 * Readers: bel_index_copy_get() below, compiled into libbeluga, the unit
 * tests and nothing in the module (the module reads the index itself).
 * This file needs nothing of the core but bel_index_walk.h, and is dual
 * licensed as that one is, for libbeluga.
 */
#ifndef BEL_INDEX_COPY_H
#define BEL_INDEX_COPY_H

#include "bel_index_walk.h"

struct bel_pool;

/*
 * The core's spelling of struct beluga_index_entry (uapi), with the core's
 * word types, so that the walk's step takes a block and an entry alike;
 * index.c asserts that the two lay out the same.
 */
struct bel_index_entry {
	u64 ns;
	struct beluga_key key;
	u32 seq;
	u32 next;
};

/* Where the bucket array starts: the header has its own page. */
#define BEL_INDEX_COPY_BUCKETS	4096U

/* The pool's view of its live copy (bel_pool.copy), under the pool lock. */
struct bel_index_copy {
	struct beluga_index_header *hdr;	/* the copy's first byte */
	u32 *buckets;
	struct bel_index_entry *entries[BELUGA_MAX_REGIONS];
};

/*
 * Bytes a copy of the pool's index needs now (0: no region present). The
 * regions may change before bel_index_copy_start(), which then says so.
 */
u64 bel_index_copy_size(struct bel_pool *pool);

/*
 * Make @mem (@size bytes, zeroed, 64-byte aligned) the pool's live copy,
 * described by @copy, which stays the caller's too: lay it out, fill it
 * from the index under the pool lock and have every later write of the
 * index write it as well. A live copy already there is sealed first.
 * -EAGAIN: the regions changed since bel_index_copy_size(), @size is too
 * small (nothing done: size and allocate again); -ENODEV: no region.
 */
int bel_index_copy_start(struct bel_pool *pool, struct bel_index_copy *copy,
			 void *mem, u64 size);

/* Is @copy the pool's live copy (not sealed)? */
bool bel_index_copy_live(struct bel_pool *pool,
			 const struct bel_index_copy *copy);

/* Seal the pool's live copy, if any; the pool forgets it. */
void bel_index_copy_seal(struct bel_pool *pool);
void bel_index_copy_seal_locked(struct bel_pool *pool);

/* --- the reader --------------------------------------------------------- */

#ifdef BEL_TEST_COPY_WALK_HOOK
/* Unit tests only, as bel_walk_hook(): runs as a walk reaches entry @id. */
void bel_test_at_copy_walk(const struct beluga_index_header *hdr, u32 id);
#define bel_copy_walk_hook(hdr, id)	bel_test_at_copy_walk(hdr, id)
#else
#define bel_copy_walk_hook(hdr, id)	do { (void)(hdr); (void)(id); } while (0)
#endif

/* Results of bel_index_copy_get() besides 0 (a miss) and 1 (a hit). */
#define BEL_COPY_UNSURE		(-EAGAIN)

/*
 * Does @hdr, @length bytes as mapped, look like a copy this reader can
 * walk? Its geometry is fixed for its life, so this is checked once, at
 * mmap() time, and every id the kernel writes stays inside it; the walk
 * still checks ids, as a mapping is only as good as the kernel behind it.
 */
static inline bool bel_index_copy_usable(const struct beluga_index_header *hdr,
					 u64 length)
{
	u32 nr = hdr->nr_buckets;
	u32 slot;

	if (length < sizeof(*hdr) || hdr->magic != BELUGA_INDEX_MAGIC ||
	    hdr->hash != BELUGA_INDEX_HASH_MIX64 ||
	    hdr->entry_size != sizeof(struct bel_index_entry) ||
	    hdr->length > length || !nr || (nr & (nr - 1)) ||
	    hdr->buckets % sizeof(u32) || hdr->buckets > hdr->length ||
	    (u64)nr * sizeof(u32) > hdr->length - hdr->buckets)
		return false;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct beluga_index_region *r = &hdr->regions[slot];

		if (r->nr_blocks &&
		    (r->entries % 8 || r->entries > hdr->length ||
		     (u64)r->nr_blocks * sizeof(struct bel_index_entry) >
		     hdr->length - r->entries))
			return false;
	}
	return true;
}

static inline void bel_index_copy_view(const struct beluga_index_header *hdr,
				       struct bel_index_view *v)
{
	v->iseq = bel_load_acquire(&hdr->seq);
	v->buckets = (u32 *)((char *)hdr + hdr->buckets);
	v->mask = hdr->nr_buckets - 1;
}

/* The entry of block @id, or NULL when the copy has none. */
static inline const struct bel_index_entry *
bel_index_copy_entry(const struct beluga_index_header *hdr, u32 id)
{
	u32 slot = id >> BELUGA_INDEX_SLOT_SHIFT;
	u32 index = id & ((1U << BELUGA_INDEX_SLOT_SHIFT) - 1);

	if (slot >= BELUGA_MAX_REGIONS ||
	    index >= hdr->regions[slot].nr_blocks)
		return NULL;
	return (const struct bel_index_entry *)((const char *)hdr +
						hdr->regions[slot].entries) +
	       index;
}

/*
 * bel_index_get() without pins on a mapped copy: 1 when (@ns, @key) was in
 * the index at some moment of the call, 0 when it was out of it at some
 * moment (so a key indexed throughout is always found), BEL_COPY_UNSURE
 * when the copy is sealed, or a key restarted BEL_INDEX_RETRIES times
 * (where bel_index_get() takes the pool lock, a userspace reader asks the
 * kernel). @v is read by bel_index_copy_view() once per LOOKUP and again
 * here after a restart; @hdr passed bel_index_copy_usable().
 */
static inline int bel_index_copy_get(const struct beluga_index_header *hdr,
				     struct bel_index_view *v, u64 ns,
				     const struct beluga_key *key, u64 hash)
{
	unsigned int tries;

	for (tries = 0; tries < BEL_INDEX_RETRIES; tries++) {
		u32 id, seq;

		if (v->iseq & 1)
			return BEL_COPY_UNSURE;	/* sealed: the kernel knows */
		id = bel_load_acquire(&v->buckets[(u32)hash & v->mask]);
		while (id != BELUGA_INDEX_NONE) {
			const struct bel_index_entry *e;
			enum bel_walk_step step;

			bel_copy_walk_hook(hdr, id);
			e = bel_index_copy_entry(hdr, id);
			if (!e)
				return BEL_COPY_UNSURE;
			step = bel_walk_step(&e->seq, &e->ns, &e->key, &e->next,
					     v->mask, ns, key, hash, &seq, &id);
			if (step == BEL_WALK_HIT)
				return 1;
			if (step == BEL_WALK_RESTART)
				goto restart;
		}
		/* A miss counts only if the copy was not sealed meanwhile. */
		bel_smp_rmb();
		if (BEL_READ(hdr->seq) == v->iseq)
			return 0;
restart:
		bel_index_copy_view(hdr, v);
	}
	return BEL_COPY_UNSURE;
}

/*
 * A count-only LOOKUP of @count chained @keys on a mapped copy: the
 * length of their leading run found in *@hits, and 0; or BEL_COPY_UNSURE
 * with *@hits the keys settled before the one it could not (the caller
 * asks the kernel from there on).
 */
static inline int bel_index_copy_lookup(const struct beluga_index_header *hdr,
					u64 ns, u32 count,
					const struct beluga_key *keys,
					u32 *hits)
{
	struct bel_index_view v;
	u32 i;

	bel_index_copy_view(hdr, &v);
	for (i = 0; i < count; i++) {
		int r = bel_index_copy_get(hdr, &v, ns, &keys[i],
					   bel_key_hash(ns, keys[i].lo,
							keys[i].hi));

		if (r != 1) {
			*hits = i;
			return r == 0 ? 0 : r;
		}
	}
	*hits = count;
	return 0;
}

#endif /* BEL_INDEX_COPY_H */
