// SPDX-License-Identifier: GPL-2.0
/*
 * Per-client bookkeeping and the block operations a client performs.
 *
 * A client (one open file) owns the blocks it has ALLOCATED, kept on a
 * doubly linked list through bel_block.prev/next under pool->lock, and
 * the pins it holds, kept in the pin table of bel_pins.h (pins.c).
 * client->mutex serialises one client's calls, and only they change its
 * pin table, its counters and its LRU log's contents: so the table needs
 * no pool lock, and bel_lookup() sizes it first, may sleep doing so, and
 * finds the room still there afterwards.
 *
 * LOOKUP and RELEASE take no pool-wide lock (bel_core.h, index.c, lru.c).
 * Pins are counted in the block (bel_block.pins, compare-and-exchange)
 * and in the client's table; the table is what RELEASE and close check a
 * client's releases against, so no client can drop another's pins.
 *
 * Lock order: client->mutex, then pool->lock, then a client's log lock.
 */
#include "bel_index_read.h"

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

/* Single writer (the client's calls): a plain add, marked for readers. */
static void bel_count(u64 *counter, s64 n)
{
	BEL_WRITE(*counter, *counter + (u64)n);
}

/* Drop @n pins of @b without any lock; the count left. */
static u32 bel_pins_sub(struct bel_block *b, u32 n)
{
	u32 v = BEL_READ(b->pins);

	for (;;) {
		u32 old;

		BEL_ASSERT(v >= n && v != BEL_PINS_DEAD);
		old = bel_cmpxchg32(&b->pins, v, v - n);
		if (old == v)
			return v - n;
		v = old;
	}
}

/*
 * A retired PUBLISHED block lost its last pin: it becomes RETIRED. The
 * claim decides between this and bel_retire_offset() when both see the
 * last pin go.
 */
static void bel_retired_unpinned(struct bel_pool *pool, u32 id)
{
	struct bel_block *b;

	bel_spin_lock(&pool->lock);
	b = bel_block_of(pool, id);
	if (b->state == BEL_BLOCK_PUBLISHED && b->retired &&
	    bel_claim_locked(b))
		bel_put_free_locked(pool, id);
	bel_spin_unlock(&pool->lock);
}

/*
 * Without the pool lock: drop one pin of each of @ids (@n of them), which
 * @c held. Blocks left without pins are logged for the LRU, @ids[i] at
 * @t + i, so that the LRU keeps the order of the call (@t 0 for a pin
 * taken by mistake: that is no use of the block).
 */
static void bel_unpin(struct bel_client *c, const u32 *ids, u32 n, u64 t)
{
	struct bel_pool *pool = c->pool;
	u32 idle[64];
	u64 stamps[64];
	u32 i, nidle = 0;

	for (i = 0; i < n; i++) {
		struct bel_block *b = bel_block_of(pool, ids[i]);

		if (bel_pins_sub(b, 1))
			continue;
		bel_count(&c->counts.pinned_blocks, -1);
		/* After the cmpxchg's barrier: see bel_retire_offset(). */
		if (BEL_READ(b->retired)) {
			bel_retired_unpinned(pool, ids[i]);
			continue;
		}
		if (!t) {
			/* No use: it stays where it is, unless parked. */
			bel_lru_unpark(c, ids[i]);
			continue;
		}
		idle[nidle] = ids[i];
		stamps[nidle++] = t + i;
		if (nidle == 64) {
			bel_lru_log(c, idle, stamps, nidle);
			nidle = 0;
		}
	}
	if (nidle)
		bel_lru_log(c, idle, stamps, nidle);
}

/*
 * Under the pool lock (close): drop @n pins of a block; at zero it moves
 * to its place in the LRU for @t at once.
 */
static void bel_unpin_block_locked(struct bel_client *c, u32 id, u32 n,
				   u64 t)
{
	struct bel_pool *pool = c->pool;
	struct bel_block *b = bel_block_of(pool, id);

	BEL_ASSERT(b->state == BEL_BLOCK_PUBLISHED);
	if (!n)
		return;
	bel_count(&c->counts.pins, -(s64)n);
	bel_count(&c->counts.releases, n);
	if (bel_pins_sub(b, n))
		return;
	bel_count(&c->counts.pinned_blocks, -1);
	if (BEL_READ(b->retired)) {
		if (bel_claim_locked(b))
			bel_put_free_locked(pool, id);	/* -> RETIRED */
		return;
	}
	bel_lru_touch_locked(c, id, t);
}

/*
 * @n stamps for the LRU, t to t + @n - 1, after every earlier one of
 * this client; t is returned.
 */
static u64 bel_stamps(struct bel_client *c, u32 n)
{
	u64 t = bel_now_ns();

	if (t <= c->last_stamp)
		t = c->last_stamp + 1;
	c->last_stamp = t + n - 1;
	return t;
}

static u64 bel_stamp(struct bel_client *c)
{
	return bel_stamps(c, 1);
}

/* --- clients ----------------------------------------------------------- */

struct bel_client *bel_client_new(struct bel_pool *pool)
{
	struct bel_client *c = bel_calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->pool = pool;
	if (bel_lru_log_init(c)) {
		bel_kvfree(c);
		return NULL;
	}
	bel_mutex_init(&c->mutex);
	c->alloc_head = BEL_NONE;
	bel_spin_lock(&pool->lock);
	c->lru_home = pool->next_lru_home++ % BEL_LRU_SHARDS;
	c->next_client = pool->clients;
	if (pool->clients)
		pool->clients->prev_client = c;
	pool->clients = c;
	pool->stats.clients++;
	bel_spin_unlock(&pool->lock);
	return c;
}

void bel_pool_pause_locked(struct bel_pool *pool)
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
 * no region holding them can go away; eviction cannot claim the blocks
 * it still pins; a block retired meanwhile keeps its pins and goes
 * to RETIRED when the last one is dropped here, as at any release.
 */
void bel_client_release(struct bel_client *c)
{
	struct bel_pool *pool = c->pool;
	u32 budget = BEL_SCAN_CHUNK;
	u64 t;
	u32 i;

	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	t = bel_stamp(c);
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
			bel_unpin_block_locked(c, c->pins.ids[i],
					       c->pins.counts[i], t);
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
	/* What its log still holds goes to the LRU before the log goes. */
	bel_lru_client_gone_locked(c);
	pool->stats.lookups += c->counts.lookups;
	pool->stats.lookup_keys += c->counts.lookup_keys;
	pool->stats.lookup_hits += c->counts.lookup_hits;
	pool->stats.releases += c->counts.releases;
	pool->stats.pins += c->counts.pins;
	pool->stats.pinned_blocks += c->counts.pinned_blocks;
	if (c->prev_client)
		c->prev_client->next_client = c->next_client;
	else
		pool->clients = c->next_client;
	if (c->next_client)
		c->next_client->prev_client = c->prev_client;
	pool->stats.clients--;
	bel_spin_unlock(&pool->lock);
	bel_mutex_unlock(&c->mutex);

	bel_pins_free(&c->pins);
	bel_lru_log_free(c);
	bel_mutex_destroy(&c->mutex);
	bel_kvfree(c);
}

static bool bel_count_ok(u32 count)
{
	return count && count <= BELUGA_MAX_BATCH;
}

/* Looks an ALLOC takes at the LRU after a short first one. */
#define BEL_CLAIM_PASSES	1

int bel_alloc_evicting(struct bel_client *c, u32 count, u64 *offsets,
		       struct beluga_evicted_key *evicted, u32 *nr_evicted)
{
	struct bel_pool *pool = c->pool;
	u32 i, n = 0;
	u64 nr_free;
	int ret = 0;

	if (!bel_count_ok(count) || !offsets || !evicted != !nr_evicted)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	if (!pool->nr_regions) {
		ret = -ENODEV;
		goto out;
	}
	nr_free = bel_nr_free_locked(pool);
	if (nr_free < count) {
		u32 need, victims, id, budget, passes = 0;

		/*
		 * All or nothing: claim the victims, oldest first, before
		 * evicting any. A claim stops LOOKUP pinning the block and
		 * takes it off the LRU; pinned blocks met on the way are
		 * parked (lru.c). The merge and a claim that parks a chunk
		 * let the lock go; no victim is held claimed meanwhile, so
		 * whatever ran meanwhile saw the pool as it was.
		 */
		bel_lru_merge_locked(pool);
		for (;;) {
			if (!pool->nr_regions) {
				ret = -ENODEV;
				goto out;
			}
			nr_free = bel_nr_free_locked(pool);
			need = nr_free < count ? count - (u32)nr_free : 0;
			budget = BEL_SCAN_CHUNK;
			if (bel_lru_claim_locked(pool, need, &victims,
						 &budget) == need)
				break;
			bel_lru_unclaim_locked(pool, victims);
			if (!budget) {
				bel_pool_pause_locked(pool);
				continue;
			}
			/*
			 * Short: look once more after the blocks that merges
			 * had in transit landed, and the pins let go during
			 * this pass were merged (finding 7 of the second
			 * review).
			 */
			if (passes++ == BEL_CLAIM_PASSES) {
				pool->stats.alloc_failures++;
				ret = -ENOSPC;
				goto out;
			}
			bel_lru_wait_transit_locked(pool);
			bel_lru_merge_locked(pool);
		}
		/* Oldest first: bel_lru_claim_locked() links them so. */
		for (id = victims; id != BEL_NONE; ) {
			struct bel_block *b = bel_block_of(pool, id);
			u32 next = b->next;

			if (evicted) {
				evicted[n].ns = b->ns;
				evicted[n].key = b->key;
				n++;
			}
			bel_evict_block_locked(pool, id);
			id = next;
		}
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
	if (nr_evicted)
		*nr_evicted = n;
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
	u32 n_ok = 0, n_exists = 0, n_failed = 0, n_lru = 0;
	u32 lru_ids[64];
	u64 lru_t[64];
	u64 now;
	u32 i;

	if (!bel_count_ok(count) || !items)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_spin_lock(&pool->lock);
	/* One stamp per item: the LRU keeps them in the call's order. */
	now = bel_stamps(c, count);
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
		/* Not indexed yet (seq odd): readers skip these. */
		BEL_WRITE(b->ns, ns);
		BEL_WRITE(b->key.lo, items[i].key.lo);
		BEL_WRITE(b->key.hi, items[i].key.hi);
		bel_index_insert_locked(pool, id);
		/* Publishing counts as use: newest end of the LRU. */
		lru_ids[n_lru] = id;
		lru_t[n_lru++] = now + i;
		if (n_lru == 64) {
			bel_lru_add_locked(pool, lru_ids, lru_t, n_lru,
					   c->lru_home);
			n_lru = 0;
		}
		pool->stats.publishes++;
		items[i].result = BELUGA_PUBLISH_OK;
		n_ok++;
	}
	if (n_lru)
		bel_lru_add_locked(pool, lru_ids, lru_t, n_lru, c->lru_home);
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

/* Keys ahead of the one being walked whose buckets are prefetched. */
#define BEL_PREFETCH_AHEAD	8

int bel_lookup(struct bel_client *c, u64 ns, u32 count,
	       const struct beluga_key *keys, bool pin, u64 *offsets,
	       u32 *hits)
{
	struct bel_pool *pool = c->pool;
	u64 hash[BEL_PREFETCH_AHEAD];
	struct bel_live_view view;
	int err = 0;
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
	bel_rcu_read_lock();
	bel_index_view_read(pool, &view);
	/* Each key's hash once: for its prefetch, then for its walk. */
	for (i = 0; i < count && i < BEL_PREFETCH_AHEAD; i++) {
		hash[i] = bel_key_hash(ns, keys[i].lo, keys[i].hi);
		bel_index_prefetch(&view, hash[i]);
	}
	for (n = 0; n < count; n++) {
		u32 ahead = n + BEL_PREFETCH_AHEAD;
		u64 h = hash[n % BEL_PREFETCH_AHEAD];
		bool first;
		u32 id;

		/*
		 * Two stages: the bucket of the key 8 ahead, and the head
		 * block of the key 4 ahead, whose bucket arrived meanwhile.
		 */
		if (ahead < count) {
			hash[ahead % BEL_PREFETCH_AHEAD] =
				bel_key_hash(ns, keys[ahead].lo, keys[ahead].hi);
			bel_index_prefetch(&view,
					   hash[ahead % BEL_PREFETCH_AHEAD]);
		}
		ahead = n + BEL_PREFETCH_AHEAD / 2;
		if (ahead < count)
			bel_index_prefetch_head(pool, &view,
						hash[ahead % BEL_PREFETCH_AHEAD],
						ns, &keys[ahead], pin);
		do {
			first = false;
			err = 0;
			id = bel_index_get(pool, &view, ns, &keys[n], h, pin, &first,
					   &err);
			if (first)
				bel_count(&c->counts.pinned_blocks, 1);
			/* Pinned a block that changed: no use of it. */
			if (err == -EAGAIN)
				bel_unpin(c, &id, 1, 0);
		} while (err == -EAGAIN);
		if (id == BEL_NONE)
			break;
		if (pin)
			offsets[n] = id;	/* ids until nothing can fail */
		else if (offsets)
			offsets[n] = bel_id_to_offset(pool, id);
	}
	if (err == -EOVERFLOW) {
		/* A pin count would wrap; undo, refuse rather than lose one. */
		for (i = 0; i < n; i++) {
			u32 id = (u32)offsets[i];

			bel_unpin(c, &id, 1, 0);
		}
		bel_rcu_read_unlock();
		bel_mutex_unlock(&c->mutex);
		return -EOVERFLOW;
	}
	if (pin) {
		for (i = 0; i < n; i++) {
			u32 id = (u32)offsets[i];

			bel_pins_add(&c->pins, id);
			offsets[i] = bel_id_to_offset(pool, id);
		}
		c->nr_pins += n;
		bel_count(&c->counts.pins, n);
	}
	bel_count(&c->counts.lookups, 1);
	bel_count(&c->counts.lookup_keys, count);
	bel_count(&c->counts.lookup_hits, n);
	bel_rcu_read_unlock();
	bel_mutex_unlock(&c->mutex);
	if (hits)
		*hits = n;
	return 0;
}

int bel_release(struct bel_client *c, u32 count, const u64 *offsets)
{
	struct bel_pool *pool = c->pool;
	u32 i, j, id, pos, k = 0;
	u32 ids[64];
	u64 t;

	if (!bel_count_ok(count) || !offsets)
		return -EINVAL;
	bel_mutex_lock(&c->mutex);
	bel_rcu_read_lock();
	/*
	 * Take the pins off the client's table first, leaving emptied
	 * entries in place: an offset listed more often than it is pinned
	 * then finds a zero count. On failure, put back what was taken.
	 */
	for (i = 0; i < count; i++) {
		id = bel_offset_to_id(pool, offsets[i]);
		pos = id == BEL_NONE ? BEL_PINS_EMPTY :
				       bel_pins_find(&c->pins, id);
		if (pos == BEL_PINS_EMPTY || !c->pins.counts[pos]) {
			for (j = 0; j < i; j++) {
				id = bel_offset_to_id(pool, offsets[j]);
				c->pins.counts[bel_pins_find(&c->pins, id)]++;
			}
			bel_rcu_read_unlock();
			bel_mutex_unlock(&c->mutex);
			return -EINVAL;
		}
		c->pins.counts[pos]--;
	}
	/* Now apply to the blocks and drop the entries that reached zero. */
	t = bel_stamps(c, count);
	for (i = 0; i < count; i++) {
		id = bel_offset_to_id(pool, offsets[i]);
		pos = bel_pins_find(&c->pins, id);
		if (pos != BEL_PINS_EMPTY && !c->pins.counts[pos])
			bel_pins_del_at(&c->pins, pos);
		ids[k++] = id;
		if (k == 64 || i + 1 == count) {
			bel_unpin(c, ids, k, t + i + 1 - k);
			k = 0;
		}
	}
	c->nr_pins -= count;
	bel_count(&c->counts.pins, -(s64)count);
	bel_count(&c->counts.releases, count);
	bel_rcu_read_unlock();
	bel_mutex_unlock(&c->mutex);
	return 0;
}
