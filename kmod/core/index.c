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
 * Cache lines: a bucket (struct bel_bucket) is one line and holds its
 * chain's head and a cache of the chain's first two blocks' ids and keys
 * and of the third's id, rewritten from the chain under the bucket's own
 * sequence whenever the chain changes; a block is one line too. So a
 * count-only probe whose key is one of the first two of its chain
 * touches one line, the bucket's, and one further down starts its walk
 * at the third block; a pinned probe walks from the head, as it must
 * touch its block. With at least as many buckets as blocks, about 90% of
 * keys are among the first two of their chain (at one block per bucket,
 * chain lengths are Poisson: (1 - 1/e) + (1 - 2/e) = 0.90 of the keys).
 * Why a cache in front of the chains rather than open
 * addressing with the keys only in the table: the links and pins stay in
 * the blocks, whose lifetimes, mapped copy and reuse checks do not
 * change, for 60 more bytes a bucket. A chain lookup prefetches the
 * buckets of the keys ahead of the one it walks, and the blocks it will
 * read (client.c), so that those misses overlap.
 *
 * The read side is inline, in bel_index_read.h.
 *
 * A pool may also have a live copy of its index in memory that userspace
 * maps (bel_index_copy.h): each writer below writes it too, in the order
 * it writes the index, and a rehash seals it.
 */
#include "bel_index_read.h"
#include "bel_index_copy.h"

/* struct bel_index_entry is the uapi's struct beluga_index_entry. */
static_assert(sizeof(struct bel_index_entry) ==
	      sizeof(struct beluga_index_entry), "index entry size");
static_assert(offsetof(struct bel_index_entry, ns) ==
	      offsetof(struct beluga_index_entry, ns), "index entry ns");
static_assert(offsetof(struct bel_index_entry, key) ==
	      offsetof(struct beluga_index_entry, key), "index entry key");
static_assert(offsetof(struct bel_index_entry, seq) ==
	      offsetof(struct beluga_index_entry, seq), "index entry seq");
static_assert(offsetof(struct bel_index_entry, next) ==
	      offsetof(struct beluga_index_entry, next), "index entry next");
static_assert(BELUGA_INDEX_SLOT_SHIFT == BEL_SLOT_SHIFT, "slot shift");
static_assert(BELUGA_INDEX_NONE == BEL_NONE, "no block");
static_assert(sizeof(struct beluga_index_header) <= BEL_INDEX_COPY_BUCKETS,
	      "index header page");
/* Every block's offset, 2 MiB alignment of regions included, lies below. */
static_assert((u64)BELUGA_MAX_REGIONS * BEL_MAX_REGION_BLOCKS *
	      BELUGA_BLOCK_SIZE_MAX * 2 <= BELUGA_INDEX_MAP_OFFSET,
	      "index map offset");

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

/* --- the index's copy (bel_index_copy.h) --------------------------------- */

/* The copy's entry of block @id, or NULL when no copy covers it. */
static struct bel_index_entry *bel_copy_entry(struct bel_pool *pool, u32 id)
{
	struct bel_index_copy *copy = pool->copy;
	u32 slot = bel_id_slot(id);

	if (!copy || !copy->entries[slot] ||
	    bel_id_index(id) >= copy->hdr->regions[slot].nr_blocks)
		return NULL;
	return &copy->entries[slot][bel_id_index(id)];
}

/*
 * Block @id was inserted at the head of bucket @h: the same in the copy,
 * in the same order. A block the copy does not cover (none: a region
 * committed after the copy seals it) would make it wrong: seal it then.
 */
static void bel_copy_insert_locked(struct bel_pool *pool, struct bel_block *b,
				   u32 id, u32 h)
{
	struct bel_index_entry *e;

	if (!pool->copy)
		return;
	e = bel_copy_entry(pool, id);
	if (!e) {
		BEL_ASSERT(e);
		bel_index_copy_seal_locked(pool);
		return;
	}
	BEL_WRITE(e->ns, b->ns);
	BEL_WRITE(e->key.lo, b->key.lo);
	BEL_WRITE(e->key.hi, b->key.hi);
	BEL_WRITE(e->next, b->hash_next);
	bel_store_release(&e->seq, b->seq);
	bel_store_release(&pool->copy->buckets[h], id);
}

/* Block @id's sequence changed (odd: it is leaving the index). */
static void bel_copy_seq_locked(struct bel_pool *pool, struct bel_block *b,
				u32 id)
{
	struct bel_index_entry *e = bel_copy_entry(pool, id);

	if (e)
		BEL_WRITE(e->seq, b->seq);
	else if (pool->copy)
		bel_index_copy_seal_locked(pool);
}

/* The link after @prev (BEL_NONE: bucket @h's head) became @next. */
static void bel_copy_unlink_locked(struct bel_pool *pool, u32 h, u32 prev,
				   u32 next)
{
	struct bel_index_entry *e;

	if (!pool->copy)
		return;
	if (prev == BEL_NONE) {
		BEL_WRITE(pool->copy->buckets[h], next);
		return;
	}
	e = bel_copy_entry(pool, prev);
	if (e)
		BEL_WRITE(e->next, next);
	else
		bel_index_copy_seal_locked(pool);
}

void bel_index_copy_seal_locked(struct bel_pool *pool)
{
	struct bel_index_copy *copy = pool->copy;

	if (!copy)
		return;
	/* Odd for good: a reader's miss across it is not believed. */
	bel_store_release(&copy->hdr->seq, copy->hdr->seq | 1);
	pool->copy = NULL;
}

void bel_index_copy_seal(struct bel_pool *pool)
{
	bel_spin_lock(&pool->lock);
	bel_index_copy_seal_locked(pool);
	bel_spin_unlock(&pool->lock);
}

bool bel_index_copy_live(struct bel_pool *pool,
			 const struct bel_index_copy *copy)
{
	bool live;

	bel_spin_lock(&pool->lock);
	live = pool->copy == copy;
	bel_spin_unlock(&pool->lock);
	return live;
}

/*
 * Lay a copy of the pool's present regions and buckets out in @hdr; its
 * length (0: no region present).
 */
static u64 bel_copy_layout_locked(struct bel_pool *pool,
				  struct beluga_index_header *hdr)
{
	u64 at;
	u32 slot;

	if (!pool->nr_regions || !pool->nr_buckets)
		return 0;
	hdr->nr_buckets = pool->nr_buckets;
	hdr->buckets = BEL_INDEX_COPY_BUCKETS;
	at = hdr->buckets + (u64)pool->nr_buckets * sizeof(u32);
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &pool->regions[slot];
		struct beluga_index_region *cr = &hdr->regions[slot];

		if (!r->present) {
			cr->nr_blocks = 0;
			cr->first_offset = 0;
			cr->entries = 0;
			continue;
		}
		at = (at + 63) & ~63ULL;
		cr->nr_blocks = r->nr_blocks;
		cr->first_offset = r->first_offset;
		cr->entries = at;
		at += (u64)r->nr_blocks * sizeof(struct bel_index_entry);
	}
	hdr->length = at;
	return at;
}

u64 bel_index_copy_size(struct bel_pool *pool)
{
	struct beluga_index_header hdr;
	u64 size;

	bel_spin_lock(&pool->lock);
	size = bel_copy_layout_locked(pool, &hdr);
	bel_spin_unlock(&pool->lock);
	return size;
}

int bel_index_copy_start(struct bel_pool *pool, struct bel_index_copy *copy,
			 void *mem, u64 size)
{
	struct beluga_index_header *hdr = mem;
	u64 length;
	u32 slot, i;

	if (size < BEL_INDEX_COPY_BUCKETS)
		return -EAGAIN;
	bel_spin_lock(&pool->lock);
	length = bel_copy_layout_locked(pool, hdr);
	if (!length || length > size) {
		bel_spin_unlock(&pool->lock);
		return length ? -EAGAIN : -ENODEV;
	}
	hdr->magic = BELUGA_INDEX_MAGIC;
	hdr->hash = BELUGA_INDEX_HASH_MIX64;
	hdr->block_size = pool->block_size;
	hdr->entry_size = sizeof(struct bel_index_entry);
	copy->hdr = hdr;
	copy->buckets = (u32 *)((char *)mem + hdr->buckets);
	for (i = 0; i < pool->nr_buckets; i++)
		copy->buckets[i] = pool->buckets[i].head;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &pool->regions[slot];
		struct bel_index_entry *e;

		copy->entries[slot] = NULL;
		if (!hdr->regions[slot].nr_blocks)
			continue;
		e = (struct bel_index_entry *)((char *)mem +
					       hdr->regions[slot].entries);
		copy->entries[slot] = e;
		for (i = 0; i < r->nr_blocks; i++) {
			const struct bel_block *b = &r->blocks[i];

			e[i].ns = b->ns;
			e[i].key = b->key;
			e[i].seq = b->seq;
			e[i].next = b->hash_next;
		}
	}
	bel_index_copy_seal_locked(pool);
	/* Nobody maps it before this returns: the lock orders the rest. */
	pool->copy = copy;
	bel_spin_unlock(&pool->lock);
	return 0;
}

/* --- the index ------------------------------------------------------------ */

u32 bel_index_find_locked(struct bel_pool *pool, u64 ns,
			  const struct beluga_key *key)
{
	u32 id;

	if (!pool->nr_buckets)
		return BEL_NONE;
	id = pool->buckets[bel_hash(pool, ns, key)].head;
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

struct bel_bucket *bel_buckets_new(u32 nr)
{
	struct bel_bucket *buckets = bel_calloc_lines(nr, sizeof(*buckets));
	u32 i;

	if (!buckets)
		return NULL;
	for (i = 0; i < nr; i++)
		buckets[i].head = BEL_NONE;	/* seq 0: even, stable */
	return buckets;
}

/*
 * Bucket @bk's chain now starts at block @head (BEL_NONE: it is empty):
 * the head, and the cache of the chain's first blocks read anew from the
 * chain's links, under the bucket's sequence, which readers read around
 * them. Called after every change to the chain, before the pool lock is
 * let go, so that no cache outlives a block's stay in the chain.
 */
static void bel_bucket_set(struct bel_pool *pool, struct bel_bucket *bk,
			   u32 head)
{
	u32 ids[3], id = head, i;

	for (i = 0; i < 3; i++) {
		ids[i] = id;
		if (id != BEL_NONE)
			id = bel_block_of(pool, id)->hash_next;
	}
	BEL_WRITE(bk->seq, bk->seq + 1);
	bel_smp_wmb();
	BEL_WRITE(bk->head, ids[0]);
	BEL_WRITE(bk->second, ids[1]);
	BEL_WRITE(bk->third, ids[2]);
	for (i = 0; i < 2 && ids[i] != BEL_NONE; i++) {
		const struct bel_block *b = bel_block_of(pool, ids[i]);

		BEL_WRITE(bk->keys[i].ns, b->ns);
		BEL_WRITE(bk->keys[i].key.lo, b->key.lo);
		BEL_WRITE(bk->keys[i].key.hi, b->key.hi);
	}
	bel_store_release(&bk->seq, bk->seq + 1);
}

void bel_index_insert_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 h = bel_hash(pool, b->ns, &b->key);

	BEL_ASSERT(b->seq & 1 || !b->seq);
	BEL_WRITE(b->hash_next, pool->buckets[h].head);
	/* Key and link before the even sequence, the block before its head. */
	bel_store_release(&b->seq, (b->seq | 1) + 1);
	bel_bucket_set(pool, &pool->buckets[h], id);
	bel_copy_insert_locked(pool, b, id, h);
}

void bel_index_remove_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 h = bel_hash(pool, b->ns, &b->key);
	struct bel_bucket *bk = &pool->buckets[h];
	u32 prev = BEL_NONE;
	u32 *link;

	/* Odd before any link changes, so readers on it restart. */
	BEL_WRITE(b->seq, b->seq + 1);
	bel_copy_seq_locked(pool, b, id);
	bel_smp_wmb();
	if (bk->head == id) {
		bel_bucket_set(pool, bk, b->hash_next);
		bel_copy_unlink_locked(pool, h, BEL_NONE, b->hash_next);
	} else {
		link = &bk->head;
		while (*link != BEL_NONE && *link != id) {
			prev = *link;
			link = &bel_block_of(pool, prev)->hash_next;
		}
		BEL_ASSERT(*link == id);
		if (*link == id) {
			BEL_WRITE(*link, b->hash_next);
			bel_copy_unlink_locked(pool, h, prev, b->hash_next);
		}
		bel_bucket_set(pool, bk, bk->head);	/* it may cache @id */
	}
	BEL_WRITE(b->hash_next, BEL_NONE);
	bel_copy_unlink_locked(pool, h, id, BEL_NONE);
}

/* Rehash's own insertion: the block stays indexed, its sequence stays. */
static void bel_index_move_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	u32 h = bel_hash(pool, b->ns, &b->key);

	BEL_WRITE(b->hash_next, pool->buckets[h].head);
	bel_bucket_set(pool, &pool->buckets[h], id);
}

struct bel_bucket *bel_index_rehash_locked(struct bel_pool *pool,
					   struct bel_bucket *buckets,
					   u32 nr_buckets)
{
	struct bel_bucket *old = pool->buckets;
	u32 old_nr = pool->nr_buckets;
	u32 i;

	/* The copy has the old array's geometry: its readers ask the kernel. */
	bel_index_copy_seal_locked(pool);
	BEL_WRITE(pool->index_seq, pool->index_seq + 1);
	bel_smp_wmb();
	/* The array before its size: see bel_buckets_read(). */
	BEL_WRITE(pool->buckets, buckets);
	bel_smp_wmb();
	BEL_WRITE(pool->nr_buckets, nr_buckets);
	for (i = 0; i < old_nr; i++) {
		u32 id = old[i].head;

		while (id != BEL_NONE) {
			u32 next = bel_block_of(pool, id)->hash_next;

			bel_index_move_locked(pool, id);
			id = next;
		}
	}
	bel_store_release(&pool->index_seq, pool->index_seq + 1);
	return old;
}
