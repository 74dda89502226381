// SPDX-License-Identifier: GPL-2.0
/*
 * Regions, the block table, free lists, round-robin allocation, eviction
 * and statistics.
 *
 * Each region owns an array of struct bel_block, one per block, and a free
 * list singly linked through bel_block.next by region-local index. A block
 * id is the region slot in the high bits and that index in the low bits; a
 * block offset, the name userspace sees, is the region's first_offset plus
 * index * block_size.
 *
 * The offset space: every region starts on a BEL_REGION_OFFSET_ALIGN
 * boundary and reserves its length rounded up to that boundary, placed in
 * the lowest gap that fits, so that detaching a region leaves a hole that a
 * later region of the same size or smaller can reuse.
 *
 * Lock-free readers of regions[] (LOOKUP and RELEASE inside an RCU read
 * section, page faults through bel_pool_find_offset()) see a region only
 * once 'present' is set, with a release store after its fields. Removal
 * clears 'present', waits for an RCU grace period, and only then clears
 * the fields and frees the block array; until then the slot and its span
 * of the offset space stay taken ('blocks' not NULL), so no reader can
 * take one region's offsets for another's.
 */
#include "bel_internal.h"
#include "bel_index_copy.h"

static u64 bel_region_span(const struct bel_region *r)
{
	return (r->length + BEL_REGION_OFFSET_ALIGN - 1) &
	       ~(BEL_REGION_OFFSET_ALIGN - 1);
}

int bel_pool_init(struct bel_pool *pool)
{
	u32 s;

	memset(pool, 0, sizeof(*pool));
	bel_spin_init(&pool->lock);
	for (s = 0; s <= BEL_LRU_PARKED; s++) {
		pool->lru[s].head = BEL_NONE;
		pool->lru[s].tail = BEL_NONE;
	}
	for (s = 0; s < BEL_LRU_SHARDS; s++)
		bel_spin_init(&pool->lru[s].lock);
	/* Its own lock class: a claim takes it inside a shard's lock. */
	bel_spin_init(&pool->lru[BEL_LRU_PARKED].lock);
	return 0;
}

void bel_pool_destroy(struct bel_pool *pool)
{
	u32 slot;

	bel_index_copy_seal(pool);

	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		bel_kvfree(pool->regions[slot].blocks);
		pool->regions[slot].blocks = NULL;
		pool->regions[slot].present = false;
		pool->regions[slot].reserved = false;
	}
	bel_kvfree(pool->buckets);
	pool->buckets = NULL;
	pool->nr_buckets = 0;
	pool->nr_regions = 0;
	pool->nr_reserved = 0;
	pool->block_size = 0;
	for (slot = 0; slot <= BEL_LRU_PARKED; slot++)
		bel_spin_destroy(&pool->lru[slot].lock);
	bel_spin_destroy(&pool->lock);
}

/* The slot is in use: present, or removed but not yet torn down. */
static bool bel_slot_taken(const struct bel_region *r)
{
	return r->present || r->blocks;
}

static u32 bel_nr_taken_locked(struct bel_pool *pool)
{
	u32 slot, n = 0;

	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++)
		n += bel_slot_taken(&pool->regions[slot]);
	return n;
}

static u64 bel_total_blocks_locked(struct bel_pool *pool)
{
	u64 total = 0;
	u32 slot;

	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++)
		if (bel_slot_taken(&pool->regions[slot]))
			total += pool->regions[slot].nr_blocks;
	return total;
}

u64 bel_nr_free_locked(struct bel_pool *pool)
{
	u64 n = 0;
	u32 slot;

	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++)
		if (pool->regions[slot].present)
			n += pool->regions[slot].nr_free;
	return n;
}

/* Lowest BEL_REGION_OFFSET_ALIGN-aligned start of a free span of @span. */
static u64 bel_place_locked(struct bel_pool *pool, u64 span)
{
	u64 start = 0;
	bool moved = true;
	u32 slot;

	/*
	 * Regions never overlap, and a candidate that overlaps a region
	 * cannot start before that region's end, so hopping to the end of
	 * whatever overlaps until nothing does finds the lowest gap. Each
	 * hop passes one region, so this ends after at most
	 * BELUGA_MAX_REGIONS + 1 rounds.
	 */
	while (moved) {
		moved = false;
		for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
			const struct bel_region *r = &pool->regions[slot];
			u64 end;

			if (!bel_slot_taken(r))
				continue;
			end = r->first_offset + bel_region_span(r);
			if (start < end && r->first_offset < start + span) {
				start = end;
				moved = true;
			}
		}
	}
	return start;
}

static struct bel_block *bel_blocks_new(u32 nr_blocks)
{
	struct bel_block *blocks;
	u32 i;

	blocks = bel_calloc_lines(nr_blocks, sizeof(*blocks));
	if (!blocks)
		return NULL;
	/* Free list in index order: a fresh region hands out index 0 first. */
	for (i = 0; i < nr_blocks; i++) {
		blocks[i].prev = BEL_NONE;
		blocks[i].next = i + 1 < nr_blocks ? i + 1 : BEL_NONE;
		blocks[i].hash_next = BEL_NONE;
		blocks[i].seq = 1;	/* not in the index */
	}
	return blocks;
}

static u32 bel_buckets_for(u64 nr_blocks)
{
	u64 n = bel_roundup_pow2(nr_blocks);

	return n > BEL_MAX_BUCKETS ? BEL_MAX_BUCKETS : (u32)n;
}

int bel_pool_reserve_region(struct bel_pool *pool, u64 length,
			    u64 block_size, u32 *slot_out, u64 *first_offset,
			    u32 *nr_blocks_out)
{
	struct bel_block *blocks;
	struct bel_region *r;
	struct bel_bucket *buckets, *old;
	u32 nr_buckets, want, slot;
	u64 bs, n, total;

	if (block_size && (block_size < BELUGA_BLOCK_SIZE_MIN ||
			   block_size > BELUGA_BLOCK_SIZE_MAX ||
			   block_size % BELUGA_BLOCK_SIZE_MIN))
		return -EINVAL;

retry:
	/* Size everything under the lock, allocate outside it, re-check. */
	bel_spin_lock(&pool->lock);
	bs = block_size ? block_size : pool->block_size;
	if (!bs)
		bs = BELUGA_BLOCK_SIZE_DEFAULT;
	if (pool->block_size && bs != pool->block_size) {
		bel_spin_unlock(&pool->lock);
		return -EINVAL;
	}
	if (bel_nr_taken_locked(pool) >= BELUGA_MAX_REGIONS) {
		bel_spin_unlock(&pool->lock);
		return -ENOSPC;
	}
	total = bel_total_blocks_locked(pool);
	nr_buckets = pool->nr_buckets;
	bel_spin_unlock(&pool->lock);

	if (length < bs)
		return -EINVAL;
	n = bel_div64(length, bs);
	if (n > BEL_MAX_REGION_BLOCKS ||
	    n * sizeof(struct bel_block) > BEL_ALLOC_MAX_BYTES)
		return -EINVAL;

	blocks = bel_blocks_new((u32)n);
	if (!blocks)
		return -ENOMEM;
	want = bel_buckets_for(total + n);
	buckets = NULL;
	if (want > nr_buckets) {
		buckets = bel_buckets_new(want);
		if (!buckets) {
			bel_kvfree(blocks);
			return -ENOMEM;
		}
		nr_buckets = want;
	}

	bel_spin_lock(&pool->lock);
	/* Another region may have come or gone meanwhile. */
	if ((pool->block_size && pool->block_size != bs) ||
	    (!block_size && !pool->block_size &&
	     bs != BELUGA_BLOCK_SIZE_DEFAULT) ||
	    pool->nr_regions >= BELUGA_MAX_REGIONS ||
	    bel_nr_taken_locked(pool) >= BELUGA_MAX_REGIONS ||
	    bel_buckets_for(bel_total_blocks_locked(pool) + n) >
	    (buckets ? nr_buckets : pool->nr_buckets)) {
		bel_spin_unlock(&pool->lock);
		bel_kvfree(buckets);
		bel_kvfree(blocks);
		goto retry;
	}

	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++)
		if (!bel_slot_taken(&pool->regions[slot]))
			break;
	r = &pool->regions[slot];
	memset(r, 0, sizeof(*r));
	r->length = length;
	BEL_WRITE(r->first_offset, bel_place_locked(pool, bel_region_span(r)));
	BEL_WRITE(r->length, length);
	BEL_WRITE(r->nr_blocks, (u32)n);
	r->nr_free = (u32)n;
	r->free_head = 0;
	BEL_WRITE(r->blocks, blocks);
	/* Reserved, not present: no reader, ALLOC or count sees it yet. */
	r->reserved = true;
	pool->nr_reserved++;
	/* Fixed from now on: a region attached meanwhile must match it. */
	BEL_WRITE(pool->block_size, bs);

	old = buckets;
	if (buckets && nr_buckets > pool->nr_buckets)
		old = bel_index_rehash_locked(pool, buckets, nr_buckets);

	*slot_out = slot;
	*first_offset = r->first_offset;
	*nr_blocks_out = r->nr_blocks;
	bel_spin_unlock(&pool->lock);

	/* Readers may still walk the old array. */
	if (old && old != buckets) {
		bel_synchronize_rcu();
		bel_kvfree(old);
	} else {
		bel_kvfree(old);
	}
	return 0;
}

void bel_pool_commit_region(struct bel_pool *pool, u32 slot)
{
	struct bel_region *r = &pool->regions[slot];

	bel_spin_lock(&pool->lock);
	r->reserved = false;
	pool->nr_reserved--;
	/* The index's copy covers the regions it was made with only. */
	bel_index_copy_seal_locked(pool);
	/* Fields first: lock-free readers test 'present' first. */
	bel_store_release(&r->present, true);
	pool->nr_regions++;
	bel_spin_unlock(&pool->lock);
}

/*
 * The last region gone, committed, reserved or still being torn down:
 * the block size is free.
 */
static void bel_pool_forget_block_size_locked(struct bel_pool *pool)
{
	if (!pool->nr_regions && !bel_nr_taken_locked(pool))
		BEL_WRITE(pool->block_size, 0);
}

void bel_pool_abort_region(struct bel_pool *pool, u32 slot)
{
	struct bel_region *r = &pool->regions[slot];
	struct bel_block *blocks;

	bel_spin_lock(&pool->lock);
	blocks = r->blocks;
	memset(r, 0, sizeof(*r));
	pool->nr_reserved--;
	bel_pool_forget_block_size_locked(pool);
	bel_spin_unlock(&pool->lock);
	bel_kvfree(blocks);
}

int bel_pool_add_region(struct bel_pool *pool, u64 length, u64 block_size,
			u32 *slot, u64 *first_offset, u32 *nr_blocks)
{
	int ret;

	ret = bel_pool_reserve_region(pool, length, block_size, slot,
				      first_offset, nr_blocks);
	if (!ret)
		bel_pool_commit_region(pool, *slot);
	return ret;
}

/*
 * Evict the unpinned PUBLISHED blocks of @slot (all of them, or those of
 * namespace @ns when @match_ns), dropping the lock every BEL_SCAN_CHUNK
 * blocks so that a big region does not stall the other CPUs. Called and
 * returns with the lock held. Stops early if the region goes away.
 */
static void bel_evict_scan_locked(struct bel_pool *pool, u32 slot,
				  bool match_ns, u64 ns, u64 *evicted,
				  u64 *busy)
{
	struct bel_region *r = &pool->regions[slot];
	struct bel_block *blocks = r->blocks;
	u32 i = 0;

	while (r->present && r->blocks == blocks && i < r->nr_blocks) {
		u32 end = r->nr_blocks - i > BEL_SCAN_CHUNK ?
			  i + BEL_SCAN_CHUNK : r->nr_blocks;

		for (; i < end; i++) {
			struct bel_block *b = &blocks[i];

			if (b->state != BEL_BLOCK_PUBLISHED)
				continue;
			if (match_ns && b->ns != ns)
				continue;
			if (b->retired || !bel_claim_locked(b)) {
				if (busy)
					(*busy)++;
				continue;
			}
			bel_evict_block_locked(pool, bel_block_id(slot, i));
			(*evicted)++;
		}
		if (i < r->nr_blocks) {
			bel_spin_unlock(&pool->lock);
			bel_spin_lock(&pool->lock);
		}
	}
}

int bel_pool_remove_region(struct bel_pool *pool, u32 slot, bool evict,
			   u64 *evicted)
{
	struct bel_region *r;
	struct bel_block *blocks;
	u64 n = 0;

	if (evicted)
		*evicted = 0;
	if (slot >= BELUGA_MAX_REGIONS)
		return -ENOENT;

	bel_spin_lock(&pool->lock);
	r = &pool->regions[slot];
	if (!r->present) {
		bel_spin_unlock(&pool->lock);
		return -ENOENT;
	}
	if (evict) {
		blocks = r->blocks;
		bel_evict_scan_locked(pool, slot, false, 0, &n, NULL);
		if (evicted)
			*evicted = n;
		if (!r->present || r->blocks != blocks) {
			/* Removed by another caller while unlocked. */
			bel_spin_unlock(&pool->lock);
			return -ENOENT;
		}
	}
	/* A pinned block is PUBLISHED, so this also covers pins. */
	if (r->nr_allocated || r->nr_published) {
		bel_spin_unlock(&pool->lock);
		return -EBUSY;
	}
	/*
	 * Nothing of it is in the index or pinned. Unpublish the region,
	 * then wait for every reader that may still hold one of its block
	 * ids (a stale link, a RELEASE's offset lookup, an LRU log entry
	 * being written), then tear it down. The slot stays taken meanwhile.
	 */
	blocks = r->blocks;
	/* Its readers fall back to LOOKUP, which knows the region is gone. */
	bel_index_copy_seal_locked(pool);
	BEL_WRITE(r->present, false);
	pool->nr_regions--;
	bel_spin_unlock(&pool->lock);

	bel_synchronize_rcu();

	bel_spin_lock(&pool->lock);
	/* Log entries naming its blocks are dropped: it is not present. */
	bel_lru_merge_locked(pool);
	memset(r, 0, sizeof(*r));
	bel_pool_forget_block_size_locked(pool);
	bel_spin_unlock(&pool->lock);

	bel_kvfree(blocks);
	return 0;
}

/*
 * Lock-free: page faults call this, and a pool-wide lock there would
 * serialise every fault of every process. See the top of this file for
 * why a region seen present has stable fields for the RCU read section.
 */
int bel_pool_find_offset(struct bel_pool *pool, u64 offset, u32 *slot_out,
			 u64 *region_offset)
{
	int ret = -ENOENT;
	u32 slot;

	bel_rcu_read_lock();
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &pool->regions[slot];
		u64 first;

		if (!bel_load_acquire(&r->present))
			continue;
		first = BEL_READ(r->first_offset);
		if (offset >= first && offset - first < BEL_READ(r->length)) {
			*slot_out = slot;
			*region_offset = offset - first;
			ret = 0;
			break;
		}
	}
	bel_rcu_read_unlock();
	return ret;
}

void bel_pool_stats(struct bel_pool *pool, struct bel_stats *out)
{
	struct bel_client *c;
	u32 slot;

	bel_spin_lock(&pool->lock);
	*out = pool->stats;
	/* The read path's counters live in the clients (bel_core.h). */
	for (c = pool->clients; c; c = c->next_client) {
		out->lookups += BEL_READ(c->counts.lookups);
		out->lookup_keys += BEL_READ(c->counts.lookup_keys);
		out->lookup_hits += BEL_READ(c->counts.lookup_hits);
		out->releases += BEL_READ(c->counts.releases);
		out->pins += BEL_READ(c->counts.pins);
		out->pinned_blocks += BEL_READ(c->counts.pinned_blocks);
	}
	out->total_blocks = 0;
	out->free_blocks = 0;
	out->allocated_blocks = 0;
	out->published_blocks = 0;
	out->retired_blocks = 0;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &pool->regions[slot];

		if (!r->present)
			continue;
		out->total_blocks += r->nr_blocks;
		out->free_blocks += r->nr_free;
		out->allocated_blocks += r->nr_allocated;
		out->published_blocks += r->nr_published;
		out->retired_blocks += r->nr_retired;
	}
	/*
	 * The clients' counters are read while they may be in a call, so
	 * the sums trail by the operations in flight, and a pin transfer
	 * between clients (one pins first, another releases last) can make
	 * the pinned-block sum dip below zero for a moment. Keep it within
	 * what is certainly true, as percpu_counter_sum_positive() does: no
	 * more blocks pinned than published, at least one pin each. With no
	 * call in flight the sums are exact.
	 */
	if ((s64)out->pinned_blocks < 0)
		out->pinned_blocks = 0;
	if (out->pinned_blocks > out->published_blocks)
		out->pinned_blocks = out->published_blocks;
	if ((s64)out->pins < 0)
		out->pins = 0;
	if (out->pins < out->pinned_blocks)
		out->pins = out->pinned_blocks;
	bel_spin_unlock(&pool->lock);
}

void bel_pool_add_counters(struct bel_pool *pool,
			   const struct bel_counters *c)
{
	bel_spin_lock(&pool->lock);
	bel_counters_add(&pool->stats.counters, c);
	bel_spin_unlock(&pool->lock);
}

int bel_region_stats(struct bel_pool *pool, u32 slot,
		     struct bel_region_stats *out)
{
	const struct bel_region *r;

	if (slot >= BELUGA_MAX_REGIONS)
		return -ENOENT;
	bel_spin_lock(&pool->lock);
	r = &pool->regions[slot];
	if (!r->present) {
		bel_spin_unlock(&pool->lock);
		return -ENOENT;
	}
	out->first_offset = r->first_offset;
	out->length = r->length;
	out->nr_blocks = r->nr_blocks;
	out->free_blocks = r->nr_free;
	out->allocated_blocks = r->nr_allocated;
	out->published_blocks = r->nr_published;
	bel_spin_unlock(&pool->lock);
	return 0;
}

u64 bel_pool_map_size(struct bel_pool *pool)
{
	u64 size = 0;
	u32 slot;

	bel_spin_lock(&pool->lock);
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &pool->regions[slot];

		if (r->present && r->first_offset + r->length > size)
			size = r->first_offset + r->length;
	}
	bel_spin_unlock(&pool->lock);
	return size;
}

u32 bel_offset_to_id(struct bel_pool *pool, u64 offset)
{
	u64 bs = BEL_READ(pool->block_size);
	u32 slot;

	if (!bs)
		return BEL_NONE;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &pool->regions[slot];
		u64 first, rel, index;

		if (!bel_load_acquire(&r->present))
			continue;
		first = BEL_READ(r->first_offset);
		if (offset < first)
			continue;
		rel = offset - first;
		if (rel >= BEL_READ(r->length))
			continue;
		index = bel_div64(rel, bs);
		if (index * bs != rel || index >= BEL_READ(r->nr_blocks))
			return BEL_NONE;
		return bel_block_id(slot, (u32)index);
	}
	return BEL_NONE;
}

u32 bel_offset_to_id_locked(struct bel_pool *pool, u64 offset)
{
	u32 slot;

	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &pool->regions[slot];
		u64 rel, index;

		if (!r->present || offset < r->first_offset)
			continue;
		rel = offset - r->first_offset;
		if (rel >= r->length)
			continue;
		/* Regions never overlap: this one or none. */
		index = bel_div64(rel, pool->block_size);
		if (index * pool->block_size != rel || index >= r->nr_blocks)
			return BEL_NONE;
		return bel_block_id(slot, (u32)index);
	}
	return BEL_NONE;
}

/* Also lock-free: a region stays whole while a reader may use its ids. */
u64 bel_id_to_offset(struct bel_pool *pool, u32 id)
{
	return BEL_READ(pool->regions[bel_id_slot(id)].first_offset) +
	       (u64)bel_id_index(id) * BEL_READ(pool->block_size);
}

void bel_put_free_locked(struct bel_pool *pool, u32 id)
{
	struct bel_region *r = &pool->regions[bel_id_slot(id)];
	struct bel_block *b = &r->blocks[bel_id_index(id)];

	/* pins: see bel_block; only a claimed block's is ours to reset. */
	BEL_ASSERT(!b->in_lru);
	if (b->state == BEL_BLOCK_ALLOCATED)
		r->nr_allocated--;
	else if (b->state == BEL_BLOCK_PUBLISHED)
		r->nr_published--;
	else
		return;
	b->state = BEL_BLOCK_FREE;
	b->owner = NULL;
	/* Out of the index (seq odd): readers no longer compare these. */
	BEL_WRITE(b->ns, 0);
	BEL_WRITE(b->key.lo, 0);
	BEL_WRITE(b->key.hi, 0);
	BEL_WRITE(b->hash_next, BEL_NONE);
	b->prev = BEL_NONE;
	b->used = 0;
	if (b->pins == BEL_PINS_DEAD)
		bel_store_release(&b->pins, 0);
	if (b->retired) {
		b->state = BEL_BLOCK_RETIRED;
		b->next = BEL_NONE;
		r->nr_retired++;
		return;
	}
	b->next = r->free_head;
	r->free_head = bel_id_index(id);
	r->nr_free++;
}

void bel_evict_block_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);

	BEL_ASSERT(b->state == BEL_BLOCK_PUBLISHED &&
		   b->pins == BEL_PINS_DEAD);
	bel_trace_evict(pool, bel_id_to_offset(pool, id), b->ns, b->key.lo,
			b->key.hi);
	if (b->in_lru)
		bel_lru_del_locked(pool, id);
	bel_index_remove_locked(pool, id);
	bel_put_free_locked(pool, id);
	pool->stats.evictions++;
}

u32 bel_take_free_locked(struct bel_pool *pool, struct bel_client *owner)
{
	u32 i;

	/*
	 * Round robin: start at the slot after the one that gave the last
	 * block, so consecutive blocks of one allocation alternate between
	 * regions (and devices) wherever more than one has free blocks.
	 */
	for (i = 0; i < BELUGA_MAX_REGIONS; i++) {
		u32 slot = (pool->rotor + i) % BELUGA_MAX_REGIONS;
		struct bel_region *r = &pool->regions[slot];
		struct bel_block *b;
		u32 index;

		if (!r->present || !r->nr_free)
			continue;
		index = r->free_head;
		b = &r->blocks[index];
		r->free_head = b->next;
		r->nr_free--;
		r->nr_allocated++;
		b->state = BEL_BLOCK_ALLOCATED;
		b->owner = owner;
		b->next = BEL_NONE;
		pool->rotor = (slot + 1) % BELUGA_MAX_REGIONS;
		return bel_block_id(slot, index);
	}
	return BEL_NONE;
}

int bel_evict_key(struct bel_pool *pool, u64 ns, const struct beluga_key *key)
{
	int ret = 0;
	u32 id;

	bel_spin_lock(&pool->lock);
	id = bel_index_find_locked(pool, ns, key);
	if (id == BEL_NONE)
		ret = -ENOENT;
	else if (!bel_claim_locked(bel_block_of(pool, id)))
		ret = -EBUSY;
	else
		bel_evict_block_locked(pool, id);
	bel_spin_unlock(&pool->lock);
	return ret;
}

u64 bel_evict_ns(struct bel_pool *pool, u64 ns, u64 *busy)
{
	u64 evicted = 0, pinned = 0;
	u32 slot;

	bel_spin_lock(&pool->lock);
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++)
		if (pool->regions[slot].present)
			bel_evict_scan_locked(pool, slot, true, ns, &evicted,
					      &pinned);
	bel_spin_unlock(&pool->lock);
	if (busy)
		*busy = pinned;
	return evicted;
}

/* Unlink FREE block @index from its region's singly linked free list. */
static void bel_free_list_del_locked(struct bel_region *r, u32 index)
{
	u32 *link = &r->free_head;

	while (*link != BEL_NONE && *link != index)
		link = &r->blocks[*link].next;
	BEL_ASSERT(*link == index);
	if (*link == index)
		*link = r->blocks[index].next;
	r->blocks[index].next = BEL_NONE;
	r->nr_free--;
}

int bel_retire_offset(struct bel_pool *pool, u64 offset)
{
	struct bel_region *r = NULL;
	struct bel_block *b;
	u64 index = 0;
	u32 slot, id;
	int ret = 1;

	bel_spin_lock(&pool->lock);
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		r = &pool->regions[slot];
		/* A reserved region: ATTACH retires its poison before commit. */
		if (bel_slot_taken(r) && offset >= r->first_offset) {
			index = bel_div64(offset - r->first_offset,
					  pool->block_size);
			if (index < r->nr_blocks)
				break;
		}
	}
	if (slot == BELUGA_MAX_REGIONS) {
		bel_spin_unlock(&pool->lock);
		return -ENOENT;
	}
	id = bel_block_id(slot, (u32)index);
	b = &r->blocks[index];
	if (b->retired) {
		ret = 0;
		goto out;
	}
	BEL_WRITE(b->retired, 1);
	switch (b->state) {
	case BEL_BLOCK_FREE:
		/*
		 * A walk of the free list: memory errors are rare, and a
		 * second link per block would cost every pool its memory.
		 */
		bel_free_list_del_locked(r, (u32)index);
		b->state = BEL_BLOCK_RETIRED;
		r->nr_retired++;
		break;
	case BEL_BLOCK_PUBLISHED:
		bel_index_remove_locked(pool, id);
		if (b->in_lru)
			bel_lru_del_locked(pool, id);
		/*
		 * 'retired' is set before the claim (a full barrier), and a
		 * RELEASE reads it after dropping a pin: if this claim fails,
		 * the one dropping the last pin sees it (client.c).
		 */
		if (bel_claim_locked(b))
			bel_put_free_locked(pool, id);
		break;
	default:
		/* ALLOCATED: RETIRED when its owner lets go of it. */
		break;
	}
out:
	bel_spin_unlock(&pool->lock);
	return ret;
}
