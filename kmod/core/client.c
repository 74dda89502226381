// SPDX-License-Identifier: GPL-2.0
/*
 * Per-client bookkeeping and the block operations a client performs.
 *
 * A client (one open file) owns the blocks it has ALLOCATED, kept on a
 * doubly linked list through bel_block.prev/next, and the pins it holds,
 * kept in the pin table of bel_pins.h (pins.c). Both are
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

/* --- the pin table (bel_pins.h) ---------------------------------------- */

/*
 * Make room for @more new distinct pins. Called with client->mutex held
 * and pool->lock not held: it may sleep. Only this client's calls, which
 * the mutex excludes, change the table, so the old one can be read without
 * the pool lock; the swap takes it for whoever inspects clients under it.
 */
static int bel_pin_reserve(struct bel_client *c, u32 more)
{
	struct bel_pin_table next;
	int ret = bel_pins_prepare(&c->pins, more, &next);

	if (ret || !next.capacity)
		return ret;
	bel_spin_lock(&c->pool->lock);
	bel_pins_swap(&c->pins, &next);
	bel_spin_unlock(&c->pool->lock);
	bel_pins_free(&next);
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
		if (b->retired)
			bel_put_free_locked(pool, id);	/* -> RETIRED */
		else
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

/*
 * Let the CPUs waiting on the pool lock in, and let the scheduler run,
 * between two chunks of a long walk. Called and returns with the lock held.
 */
static void bel_pool_pause_locked(struct bel_pool *pool)
{
	bel_spin_unlock(&pool->lock);
	bel_cond_resched();
	bel_spin_lock(&pool->lock);
}

/*
 * Return everything @c holds. Runs in process context (file release) and
 * may sleep. The walk drops the pool lock every BEL_SCAN_CHUNK items, and
 * the state is consistent at every drop: each block goes back whole (list,
 * region and pool counters in one step), and the client's counters
 * (nr_allocated, nr_pins, pins.used) always describe what is still left.
 * Between chunks no call of @c can run (its mutex is held and its file is
 * gone), so nothing probes its pin table while emptied slots break probe
 * chains; the blocks it still owns or pins keep their regions busy, so
 * no region holding them can go away; pinned blocks stay off the LRU, so no
 * eviction takes them; a block retired meanwhile keeps its pins and goes
 * to RETIRED when the last one is dropped here, as at any release.
 */
void bel_client_release(struct bel_client *c)
{
	struct bel_pool *pool = c->pool;
	u32 budget = BEL_SCAN_CHUNK;
	u32 i;

	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	while (c->alloc_head != BEL_NONE) {
		u32 id = c->alloc_head;

		bel_owned_del_locked(c, id);
		bel_put_free_locked(pool, id);
		pool->stats.frees++;
		if (!--budget) {
			bel_pool_pause_locked(pool);
			budget = BEL_SCAN_CHUNK;
		}
	}
	/* The table's size is stable: only calls of @c resize it. */
	for (i = 0; i < c->pins.capacity; i++) {
		if (c->pins.ids[i] != BEL_PINS_EMPTY) {
			bel_unpin_block_locked(pool, c->pins.ids[i],
					       c->pins.counts[i]);
			c->nr_pins -= c->pins.counts[i];
			c->pins.ids[i] = BEL_PINS_EMPTY;
			c->pins.counts[i] = 0;
			c->pins.used--;
		}
		if (!--budget) {
			bel_pool_pause_locked(pool);
			budget = BEL_SCAN_CHUNK;
		}
	}
	BEL_ASSERT(!c->nr_allocated && !c->nr_pins && !c->pins.used);
	pool->stats.clients--;
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);

	bel_pins_free(&c->pins);
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
		struct beluga_publish_item *items, u32 *published, u32 *exists,
		u32 *failed)
{
	struct bel_pool *pool = c->pool;
	u32 n_ok = 0, n_exists = 0, n_failed = 0;
	u32 i;

	if (!bel_count_ok(count) || !items)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	for (i = 0; i < count; i++) {
		struct bel_region *r;
		struct bel_block *b;
		u32 id = bel_offset_to_id_locked(pool, items[i].offset);

		if (id == BEL_NONE) {
			items[i].result = -EINVAL;
			n_failed++;
			continue;
		}
		b = bel_block_of(pool, id);
		if (b->state != BEL_BLOCK_ALLOCATED || b->owner != c) {
			items[i].result = -EPERM;
			n_failed++;
			continue;
		}
		bel_owned_del_locked(c, id);
		if (b->retired) {
			/* A memory error hit it: gone, never published. */
			bel_put_free_locked(pool, id);
			pool->stats.frees++;
			items[i].result = -EIO;
			n_failed++;
			continue;
		}
		if (bel_index_find_locked(pool, ns, &items[i].key) != BEL_NONE) {
			/* Lost the race (or an earlier item won it): dedup. */
			bel_put_free_locked(pool, id);
			pool->stats.frees++;
			pool->stats.publish_races++;
			items[i].result = BELUGA_PUBLISH_EXISTS;
			n_exists++;
			continue;
		}
		r = &pool->regions[bel_id_slot(id)];
		r->nr_allocated--;
		r->nr_published++;
		b->state = BEL_BLOCK_PUBLISHED;
		b->owner = NULL;
		b->ns = ns;
		b->key = items[i].key;
		b->pins = 0;
		bel_index_insert_locked(pool, id);
		/* Publishing counts as use: newest end of the LRU. */
		bel_lru_add_locked(pool, id);
		pool->stats.publishes++;
		items[i].result = BELUGA_PUBLISH_OK;
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
			bel_pins_add(&c->pins, id);
			c->nr_pins++;
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
		pos = id == BEL_NONE ? BEL_PINS_EMPTY :
				       bel_pins_find(&c->pins, id);
		if (pos == BEL_PINS_EMPTY || !c->pins.counts[pos]) {
			for (j = 0; j < i; j++) {
				id = bel_offset_to_id_locked(pool, offsets[j]);
				c->pins.counts[bel_pins_find(&c->pins, id)]++;
			}
			bel_spin_unlock(&pool->lock);
			bel_mutex_unlock(&c->mutex);
			return -EINVAL;
		}
		c->pins.counts[pos]--;
	}
	/* Now apply to the blocks and drop the entries that reached zero. */
	for (i = 0; i < count; i++) {
		id = bel_offset_to_id_locked(pool, offsets[i]);
		bel_unpin_block_locked(pool, id, 1);
		c->nr_pins--;
		pos = bel_pins_find(&c->pins, id);
		if (pos != BEL_PINS_EMPTY && !c->pins.counts[pos])
			bel_pins_del_at(&c->pins, pos);
	}
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);
	return 0;
}
