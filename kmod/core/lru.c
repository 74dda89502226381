// SPDX-License-Identifier: GPL-2.0
/*
 * The LRU: a doubly linked list, through bel_block.prev/next, of PUBLISHED
 * blocks in the order of their last use; its head is the oldest. A
 * PUBLISHED block is on no free list and no client list, so prev/next are
 * free for this use. The list itself changes only under pool->lock.
 *
 * What counts as use: PUBLISH, and the RELEASE of a block's last pin (a
 * pinned block cannot be evicted; a count-only LOOKUP is no use). RELEASE
 * runs without the pool lock, so it cannot move the block itself. Why a
 * log rather than a CLOCK bit or a lock: a CLOCK approximation would
 * change which blocks are evicted (the replay compares the hit ratio with
 * an exact LRU, and the unit model checks exact order), and a lock taken
 * per RELEASE is the serialisation this design removes. So:
 *   - LOOKUP with pin leaves the block where it is. Eviction skips pinned
 *     blocks, and takes those it meets off the list (they come back when
 *     their last pin goes).
 *   - RELEASE of a last pin appends (block, time) to its client's LRU log,
 *     a client-local buffer under the client's own spinlock, deduplicated
 *     per block, so a client that pins and releases the same blocks over
 *     and over keeps one entry each.
 *   - Before a writer uses the LRU's order or appends to it (ALLOC that
 *     evicts, PUBLISH, close), it merges all logs into the list in time
 *     order (bel_lru_merge_locked()). A client whose log is full merges.
 * The list's order after a merge is then exactly what moving each block
 * at its RELEASE would have given, for calls that do not overlap in time;
 * a RELEASE concurrent with a merge may land behind a later use.
 */
#include "bel_internal.h"

void bel_lru_add_locked(struct bel_pool *pool, u32 id, u64 t)
{
	struct bel_block *b = bel_block_of(pool, id);

	BEL_ASSERT(b->state == BEL_BLOCK_PUBLISHED && !b->in_lru);
	b->prev = pool->lru_tail;
	b->next = BEL_NONE;
	if (pool->lru_tail != BEL_NONE)
		bel_block_of(pool, pool->lru_tail)->next = id;
	else
		pool->lru_head = id;
	pool->lru_tail = id;
	b->in_lru = 1;
	b->used = t;
}

void bel_lru_del_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);

	BEL_ASSERT(b->in_lru);
	if (b->prev != BEL_NONE)
		bel_block_of(pool, b->prev)->next = b->next;
	else
		pool->lru_head = b->next;
	if (b->next != BEL_NONE)
		bel_block_of(pool, b->next)->prev = b->prev;
	else
		pool->lru_tail = b->prev;
	b->prev = BEL_NONE;
	b->next = BEL_NONE;
	b->in_lru = 0;
}

/* --- the clients' logs -------------------------------------------------- */

/* The dedup map is 4-way set associative: an id may sit in 4 slots. */
#define BEL_LRU_WAYS	4U

static u32 bel_lru_map_slot(u32 id)
{
	return (u32)(((u64)id * 0x9e3779b97f4a7c15ULL) >> 40) &
	       (BEL_LRU_MAP - BEL_LRU_WAYS);
}

/* Index of @id's entry in @l->e, or BEL_NONE. */
static u32 bel_lru_map_find(const struct bel_lru_log *l, u32 id)
{
	u32 set = bel_lru_map_slot(id), w;

	for (w = 0; w < BEL_LRU_WAYS; w++) {
		u32 j = l->map[set + w];

		if (j < l->n && l->e[j].id == id)
			return j;
	}
	return BEL_NONE;
}

/* Point a slot of @id's set at entry @j, preferring one that is stale. */
static void bel_lru_map_set(struct bel_lru_log *l, u32 id, u32 j)
{
	u32 set = bel_lru_map_slot(id), w;

	for (w = 0; w < BEL_LRU_WAYS; w++) {
		u32 k = l->map[set + w];

		if (k >= l->n || l->e[k].id == BEL_NONE || k == j)
			break;
	}
	l->map[set + (w < BEL_LRU_WAYS ? w : 0)] = j;
}

int bel_lru_log_init(struct bel_client *c)
{
	struct bel_lru_log *l = &c->log;

	l->e = bel_calloc(BEL_LRU_LOG, sizeof(*l->e));
	l->spare = bel_calloc(BEL_LRU_LOG, sizeof(*l->spare));
	l->map = bel_calloc(BEL_LRU_MAP, sizeof(*l->map));
	if (!l->e || !l->spare || !l->map) {
		bel_lru_log_free(c);
		return -ENOMEM;
	}
	bel_spin_init(&l->lock);
	return 0;
}

void bel_lru_log_free(struct bel_client *c)
{
	struct bel_lru_log *l = &c->log;

	if (l->e && l->spare && l->map)
		bel_spin_destroy(&l->lock);
	bel_kvfree(l->e);
	bel_kvfree(l->spare);
	bel_kvfree(l->map);
	l->e = NULL;
	l->spare = NULL;
	l->map = NULL;
}

/* Drop superseded entries, keeping the order; the map follows. */
static void bel_lru_log_compact(struct bel_lru_log *l)
{
	u32 i, k = 0;

	for (i = 0; i < l->n; i++) {
		if (l->e[i].id == BEL_NONE)
			continue;
		l->e[k] = l->e[i];
		k++;
	}
	l->n = k;
	l->dead = 0;
	/* Every slot is stale now but for what is set again here. */
	for (i = 0; i < BEL_LRU_MAP; i++)
		l->map[i] = BEL_NONE;
	for (i = 0; i < l->n; i++)
		bel_lru_map_set(l, l->e[i].id, i);
}

/* Append one entry, the log's lock held; false when it is full. */
static bool bel_lru_log_one(struct bel_lru_log *l, u32 id, u64 t)
{
	u32 j = bel_lru_map_find(l, id);

	if (j != BEL_NONE) {
		if (!t)
			return true;	/* a real entry moves it anyway */
		l->e[j].id = BEL_NONE;
		l->dead++;
	}
	/* Compact only when that frees a good part; else merge. */
	if (l->n == BEL_LRU_LOG && l->dead >= BEL_LRU_LOG / 4)
		bel_lru_log_compact(l);
	if (l->n == BEL_LRU_LOG)
		return false;
	l->e[l->n].t = t;
	l->e[l->n].id = id;
	l->n++;
	bel_lru_map_set(l, id, l->n - 1);
	return true;
}

void bel_lru_log(struct bel_client *c, const u32 *ids, u32 n, u64 t)
{
	struct bel_lru_log *l = &c->log;
	u32 i = 0;

	while (i < n) {
		bel_spin_lock(&l->lock);
		while (i < n && bel_lru_log_one(l, ids[i], t))
			i++;
		bel_spin_unlock(&l->lock);
		/* Full of distinct blocks: merge, which empties it. */
		if (i < n)
			bel_lru_merge(c->pool);
	}
}

/* One log entry: @id lost its last pin at @t. */
static void bel_lru_apply_locked(struct bel_pool *pool, u32 id, u64 t)
{
	struct bel_region *r = &pool->regions[bel_id_slot(id)];
	struct bel_block *b;

	/* The block may have gone since, even with its region. */
	if (!r->present || bel_id_index(id) >= r->nr_blocks)
		return;
	b = &r->blocks[bel_id_index(id)];
	if (b->state != BEL_BLOCK_PUBLISHED || b->retired)
		return;
	if (b->in_lru) {
		/* Older than its place (or an earlier life of it): stays. */
		if (t <= b->used)
			return;
		bel_lru_del_locked(pool, id);
	}
	bel_lru_add_locked(pool, id, t > b->used ? t : b->used);
}

void bel_lru_merge_locked(struct bel_pool *pool)
{
	struct bel_client *c, *list = NULL;

	/* Take each log's buffer, leaving it the empty spare. */
	for (c = pool->clients; c; c = c->next_client) {
		struct bel_lru_log *l = &c->log;

		bel_spin_lock(&l->lock);
		if (l->n) {
			struct bel_lru_entry *e = l->e;

			l->e = l->spare;
			l->spare = e;
			l->spare_n = l->n;
			l->spare_pos = 0;
			l->n = 0;
			l->dead = 0;
			l->merge_next = list;
			list = c;
		}
		bel_spin_unlock(&l->lock);
	}
	/* Each buffer is in time order: merge them, oldest first. */
	for (;;) {
		struct bel_lru_log *best = NULL;

		for (c = list; c; c = c->log.merge_next) {
			struct bel_lru_log *l = &c->log;

			while (l->spare_pos < l->spare_n &&
			       l->spare[l->spare_pos].id == BEL_NONE)
				l->spare_pos++;
			if (l->spare_pos < l->spare_n &&
			    (!best || l->spare[l->spare_pos].t <
				      best->spare[best->spare_pos].t))
				best = l;
		}
		if (!best)
			break;
		bel_lru_apply_locked(pool, best->spare[best->spare_pos].id,
				     best->spare[best->spare_pos].t);
		best->spare_pos++;
	}
	for (c = list; c; c = c->log.merge_next)
		c->log.spare_n = 0;
}

void bel_lru_merge(struct bel_pool *pool)
{
	bel_spin_lock(&pool->lock);
	bel_lru_merge_locked(pool);
	bel_spin_unlock(&pool->lock);
}
