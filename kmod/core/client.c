// SPDX-License-Identifier: GPL-2.0
/*
 * Per-client bookkeeping and the block operations a client performs.
 *
 * A client (one open file) owns the blocks it has ALLOCATED, kept on a
 * doubly linked list through bel_block.prev/next, and the pins it holds,
 * kept in a small open-addressing table (linear probing, load at most one
 * half, backward-shift deletion so there are no tombstones). Both are
 * protected by pool->lock. client->mutex serialises one client's calls:
 * only they change its pin table, so bel_lookup() can size the table with
 * the mutex held and the pool lock dropped, and find the room still there
 * once it takes the lock.
 *
 * Lock order: client->mutex, then pool->lock.
 */
#include "bel_internal.h"

/* --- the owner's list of ALLOCATED blocks ------------------------------ */

static void bel_owned_add_locked(struct bel_client *c, u32 id)
{
	struct bel_pool *pool = c->pool;
	struct bel_block *b = bel_block_of(pool, id);

	b->prev = BEL_NONE;
	b->next = c->alloc_head;
	if (c->alloc_head != BEL_NONE)
		bel_block_of(pool, c->alloc_head)->prev = id;
	c->alloc_head = id;
	c->nr_allocated++;
}

static void bel_owned_del_locked(struct bel_client *c, u32 id)
{
	struct bel_pool *pool = c->pool;
	struct bel_block *b = bel_block_of(pool, id);

	if (b->prev != BEL_NONE)
		bel_block_of(pool, b->prev)->next = b->next;
	else
		c->alloc_head = b->next;
	if (b->next != BEL_NONE)
		bel_block_of(pool, b->next)->prev = b->prev;
	b->prev = BEL_NONE;
	b->next = BEL_NONE;
	c->nr_allocated--;
}

/* --- the pin table ---------------------------------------------------- */

static u32 bel_pin_home(u32 id, u32 mask)
{
	/* Fibonacci hashing: ids of different regions share low bits. */
	return (u32)(((u64)id * 0x9e3779b97f4a7c15ULL) >> 32) & mask;
}

/* Position of @id in the table, or BEL_NONE. */
static u32 bel_pin_find(const struct bel_client *c, u32 id)
{
	u32 mask, pos;

	if (!c->pin_capacity)
		return BEL_NONE;
	mask = c->pin_capacity - 1;
	for (pos = bel_pin_home(id, mask); c->pin_ids[pos] != BEL_NONE;
	     pos = (pos + 1) & mask)
		if (c->pin_ids[pos] == id)
			return pos;
	return BEL_NONE;
}

/* Insert @id, known to be absent; the table has room (load <= 1/2). */
static void bel_pin_insert(u32 *ids, u32 *counts, u32 capacity, u32 id,
			   u32 count)
{
	u32 mask = capacity - 1;
	u32 pos = bel_pin_home(id, mask);

	while (ids[pos] != BEL_NONE)
		pos = (pos + 1) & mask;
	ids[pos] = id;
	counts[pos] = count;
}

static void bel_pin_add_locked(struct bel_client *c, u32 id)
{
	u32 pos = bel_pin_find(c, id);

	if (pos != BEL_NONE) {
		c->pin_counts[pos]++;
	} else {
		BEL_ASSERT((u64)(c->pin_used + 1) * 2 <= c->pin_capacity);
		bel_pin_insert(c->pin_ids, c->pin_counts, c->pin_capacity,
			       id, 1);
		c->pin_used++;
	}
	c->nr_pins++;
}

/* Empty slot @pos and pull later members of its probe run back into it. */
static void bel_pin_del_at(struct bel_client *c, u32 pos)
{
	u32 mask = c->pin_capacity - 1;
	u32 hole = pos, j = pos;

	for (;;) {
		u32 home;

		c->pin_ids[hole] = BEL_NONE;
		c->pin_counts[hole] = 0;
		for (;;) {
			j = (j + 1) & mask;
			if (c->pin_ids[j] == BEL_NONE) {
				c->pin_used--;
				return;
			}
			home = bel_pin_home(c->pin_ids[j], mask);
			/* Stays put when home lies cyclically in (hole, j]. */
			if (hole <= j ? (hole < home && home <= j)
				      : (hole < home || home <= j))
				continue;
			break;
		}
		c->pin_ids[hole] = c->pin_ids[j];
		c->pin_counts[hole] = c->pin_counts[j];
		hole = j;
	}
}

/*
 * Make room for @more new distinct pins. Called with client->mutex held
 * and pool->lock not held: it may sleep. Only this client's calls, which
 * the mutex excludes, change the table, so the old one can be read without
 * the pool lock; the swap takes it for whoever inspects clients under it.
 */
static int bel_pin_reserve(struct bel_client *c, u32 more)
{
	u64 need = ((u64)c->pin_used + more) * 2;
	u32 *ids, *counts, *old_ids, *old_counts;
	u32 cap, i;

	if (need <= c->pin_capacity)
		return 0;
	need = bel_roundup_pow2(need);
	if (need < BEL_MIN_PIN_SLOTS)
		need = BEL_MIN_PIN_SLOTS;
	if (need > BEL_MAX_PIN_SLOTS)
		return -ENOMEM;
	cap = (u32)need;
	ids = bel_calloc(cap, sizeof(*ids));
	counts = bel_calloc(cap, sizeof(*counts));
	if (!ids || !counts) {
		bel_kvfree(ids);
		bel_kvfree(counts);
		return -ENOMEM;
	}
	memset(ids, 0xff, (size_t)cap * sizeof(*ids));
	for (i = 0; i < c->pin_capacity; i++)
		if (c->pin_ids[i] != BEL_NONE)
			bel_pin_insert(ids, counts, cap, c->pin_ids[i],
				       c->pin_counts[i]);

	bel_spin_lock(&c->pool->lock);
	old_ids = c->pin_ids;
	old_counts = c->pin_counts;
	c->pin_ids = ids;
	c->pin_counts = counts;
	c->pin_capacity = cap;
	bel_spin_unlock(&c->pool->lock);

	bel_kvfree(old_ids);
	bel_kvfree(old_counts);
	return 0;
}

/* Drop @n pins of a block; at zero it becomes evictable, newest first. */
static void bel_unpin_block_locked(struct bel_pool *pool, u32 id, u32 n)
{
	struct bel_block *b = bel_block_of(pool, id);

	BEL_ASSERT(b->state == BEL_BLOCK_PUBLISHED && b->pins >= n);
	if (!n)
		return;
	b->pins -= n;
	pool->stats.pins -= n;
	pool->stats.releases += n;
	if (!b->pins) {
		pool->stats.pinned_blocks--;
		bel_lru_add_locked(pool, id);
	}
}

/* --- clients ----------------------------------------------------------- */

struct bel_client *bel_client_new(struct bel_pool *pool)
{
	struct bel_client *c = bel_calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->pool = pool;
	bel_mutex_init(&c->mutex);
	c->alloc_head = BEL_NONE;
	bel_spin_lock(&pool->lock);
	pool->stats.clients++;
	bel_spin_unlock(&pool->lock);
	return c;
}

void bel_client_release(struct bel_client *c)
{
	struct bel_pool *pool = c->pool;
	u32 i;

	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	while (c->alloc_head != BEL_NONE) {
		u32 id = c->alloc_head;

		bel_owned_del_locked(c, id);
		bel_put_free_locked(pool, id);
		pool->stats.frees++;
	}
	for (i = 0; i < c->pin_capacity; i++) {
		if (c->pin_ids[i] == BEL_NONE)
			continue;
		bel_unpin_block_locked(pool, c->pin_ids[i], c->pin_counts[i]);
		c->nr_pins -= c->pin_counts[i];
		c->pin_ids[i] = BEL_NONE;
		c->pin_counts[i] = 0;
	}
	c->pin_used = 0;
	pool->stats.clients--;
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);

	bel_kvfree(c->pin_ids);
	bel_kvfree(c->pin_counts);
	bel_mutex_destroy(&c->mutex);
	bel_kvfree(c);
}

static bool bel_count_ok(u32 count)
{
	return count && count <= BELUGA_MAX_BATCH;
}

int bel_alloc(struct bel_client *c, u32 count, u64 *offsets)
{
	struct bel_pool *pool = c->pool;
	u64 nr_free;
	u32 i;
	int ret = 0;

	if (!bel_count_ok(count) || !offsets)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	if (!pool->nr_regions) {
		ret = -ENODEV;
		goto out;
	}
	nr_free = bel_nr_free_locked(pool);
	if (nr_free < count) {
		/* All or nothing: decide before evicting anything. */
		if (nr_free + bel_nr_evictable_locked(pool) < count) {
			pool->stats.alloc_failures++;
			ret = -ENOSPC;
			goto out;
		}
		for (; nr_free < count; nr_free++)
			bel_evict_block_locked(pool,
					       bel_lru_oldest_locked(pool));
	}
	for (i = 0; i < count; i++) {
		u32 id = bel_take_free_locked(pool, c);

		bel_owned_add_locked(c, id);
		offsets[i] = bel_id_to_offset(pool, id);
	}
	pool->stats.allocs += count;
out:
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);
	return ret;
}

/* The block named by @offset when @c has it ALLOCATED, else BEL_NONE. */
static u32 bel_owned_id_locked(struct bel_client *c, u64 offset)
{
	u32 id = bel_offset_to_id_locked(c->pool, offset);
	struct bel_block *b;

	if (id == BEL_NONE)
		return BEL_NONE;
	b = bel_block_of(c->pool, id);
	if (b->state != BEL_BLOCK_ALLOCATED || b->owner != c)
		return BEL_NONE;
	return id;
}

int bel_free(struct bel_client *c, u32 count, const u64 *offsets)
{
	struct bel_pool *pool = c->pool;
	u32 i, j;

	if (!bel_count_ok(count) || !offsets)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	/*
	 * Validate first. Clearing the owner of each block checked marks it,
	 * so an offset listed twice fails the second time round; on failure
	 * the marks are put back and nothing has changed.
	 */
	for (i = 0; i < count; i++) {
		u32 id = bel_owned_id_locked(c, offsets[i]);

		if (id == BEL_NONE) {
			for (j = 0; j < i; j++) {
				id = bel_offset_to_id_locked(pool, offsets[j]);
				bel_block_of(pool, id)->owner = c;
			}
			bel_spin_unlock(&pool->lock);
			bel_mutex_unlock(&c->mutex);
			return -EINVAL;
		}
		bel_block_of(pool, id)->owner = NULL;
	}
	for (i = 0; i < count; i++) {
		u32 id = bel_offset_to_id_locked(pool, offsets[i]);

		bel_owned_del_locked(c, id);
		bel_put_free_locked(pool, id);
	}
	pool->stats.frees += count;
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);
	return 0;
}

int bel_publish(struct bel_client *c, u64 ns, u32 count,
		const u64 *offsets, const struct beluga_key *keys,
		s32 *results, u32 *published, u32 *exists, u32 *failed)
{
	struct bel_pool *pool = c->pool;
	u32 n_ok = 0, n_exists = 0, n_failed = 0;
	u32 i;

	if (!bel_count_ok(count) || !offsets || !keys || !results)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	for (i = 0; i < count; i++) {
		struct bel_region *r;
		struct bel_block *b;
		u32 id = bel_offset_to_id_locked(pool, offsets[i]);

		if (id == BEL_NONE) {
			results[i] = -EINVAL;
			n_failed++;
			continue;
		}
		b = bel_block_of(pool, id);
		if (b->state != BEL_BLOCK_ALLOCATED || b->owner != c) {
			results[i] = -EPERM;
			n_failed++;
			continue;
		}
		bel_owned_del_locked(c, id);
		if (bel_index_find_locked(pool, ns, &keys[i]) != BEL_NONE) {
			/* Lost the race (or an earlier item won it): dedup. */
			bel_put_free_locked(pool, id);
			pool->stats.frees++;
			pool->stats.publish_races++;
			results[i] = BELUGA_PUBLISH_EXISTS;
			n_exists++;
			continue;
		}
		r = &pool->regions[bel_id_slot(id)];
		r->nr_allocated--;
		r->nr_published++;
		b->state = BEL_BLOCK_PUBLISHED;
		b->owner = NULL;
		b->ns = ns;
		b->key = keys[i];
		b->pins = 0;
		bel_index_insert_locked(pool, id);
		/* Publishing counts as use: newest end of the LRU. */
		bel_lru_add_locked(pool, id);
		pool->stats.publishes++;
		results[i] = BELUGA_PUBLISH_OK;
		n_ok++;
	}
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);
	if (published)
		*published = n_ok;
	if (exists)
		*exists = n_exists;
	if (failed)
		*failed = n_failed;
	return 0;
}

int bel_lookup(struct bel_client *c, u64 ns, u32 count,
	       const struct beluga_key *keys, bool pin, u64 *offsets,
	       u32 *hits)
{
	struct bel_pool *pool = c->pool;
	bool overflow = false;
	u32 i, n;
	int ret;

	if (!bel_count_ok(count) || !keys || (pin && !offsets))
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	if (pin) {
		/* At most @count new distinct pins; may sleep here. */
		ret = bel_pin_reserve(c, count);
		if (ret) {
			bel_mutex_unlock(&c->mutex);
			return ret;
		}
	}
	bel_spin_lock(&pool->lock);
	for (n = 0; n < count; n++) {
		u32 id = bel_index_find_locked(pool, ns, &keys[n]);

		if (id == BEL_NONE)
			break;
		if (pin) {
			/* Ids for now; offsets once nothing can fail. */
			offsets[n] = id;
			if (bel_block_of(pool, id)->pins > BEL_MAX_PINS)
				overflow = true;
		} else if (offsets) {
			offsets[n] = bel_id_to_offset(pool, id);
		}
	}
	if (overflow) {
		/* A pin count would wrap; refuse rather than lose a pin. */
		bel_spin_unlock(&pool->lock);
		bel_mutex_unlock(&c->mutex);
		return -EOVERFLOW;
	}
	if (pin) {
		for (i = 0; i < n; i++) {
			u32 id = (u32)offsets[i];
			struct bel_block *b = bel_block_of(pool, id);

			if (!b->pins++) {
				/* Off the LRU until the last pin goes. */
				bel_lru_del_locked(pool, id);
				pool->stats.pinned_blocks++;
			}
			pool->stats.pins++;
			bel_pin_add_locked(c, id);
			offsets[i] = bel_id_to_offset(pool, id);
		}
	}
	pool->stats.lookups++;
	pool->stats.lookup_keys += count;
	pool->stats.lookup_hits += n;
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);
	if (hits)
		*hits = n;
	return 0;
}

int bel_release(struct bel_client *c, u32 count, const u64 *offsets)
{
	struct bel_pool *pool = c->pool;
	u32 i, j, id, pos;

	if (!bel_count_ok(count) || !offsets)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	/*
	 * Take the pins off the client's table first, leaving emptied
	 * entries in place: an offset listed more often than it is pinned
	 * then finds a zero count. On failure, put back what was taken.
	 */
	for (i = 0; i < count; i++) {
		id = bel_offset_to_id_locked(pool, offsets[i]);
		pos = id == BEL_NONE ? BEL_NONE : bel_pin_find(c, id);
		if (pos == BEL_NONE || !c->pin_counts[pos]) {
			for (j = 0; j < i; j++) {
				id = bel_offset_to_id_locked(pool, offsets[j]);
				c->pin_counts[bel_pin_find(c, id)]++;
			}
			bel_spin_unlock(&pool->lock);
			bel_mutex_unlock(&c->mutex);
			return -EINVAL;
		}
		c->pin_counts[pos]--;
	}
	/* Now apply to the blocks and drop the entries that reached zero. */
	for (i = 0; i < count; i++) {
		id = bel_offset_to_id_locked(pool, offsets[i]);
		bel_unpin_block_locked(pool, id, 1);
		c->nr_pins--;
		pos = bel_pin_find(c, id);
		if (pos != BEL_NONE && !c->pin_counts[pos])
			bel_pin_del_at(c, pos);
	}
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);
	return 0;
}
