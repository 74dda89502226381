// SPDX-License-Identifier: GPL-2.0
/*
 * The LRU: a doubly linked list, through bel_block.prev/next, of the
 * PUBLISHED blocks that nobody pins. Only those may be evicted, so the list
 * holds exactly the evictable blocks; its head is the oldest. A PUBLISHED
 * block is on no free list and no client list, so prev/next are free for
 * this use. Everything here runs under pool->lock.
 */
#include "bel_internal.h"

void bel_lru_add_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);

	BEL_ASSERT(b->state == BEL_BLOCK_PUBLISHED && !b->pins && !b->in_lru);
	b->prev = pool->lru_tail;
	b->next = BEL_NONE;
	if (pool->lru_tail != BEL_NONE)
		bel_block_of(pool, pool->lru_tail)->next = id;
	else
		pool->lru_head = id;
	pool->lru_tail = id;
	b->in_lru = 1;
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
