// SPDX-License-Identifier: GPL-2.0
/*
 * The LRU: every PUBLISHED block that is not retired, in the order of its
 * last use, split into BEL_LRU_SHARDS doubly linked lists (through
 * bel_block.prev/next) each sorted by bel_block.used, oldest at its head.
 * A PUBLISHED block is on no free list and no client list, so prev/next
 * are free for this use. Which blocks are on it (in_lru) changes under the
 * pool lock and the shard's lock; their order and their shard under the
 * shards' locks alone.
 *
 * What counts as use: PUBLISH, and the RELEASE of a block's last pin (a
 * pinned block cannot be evicted; a count-only LOOKUP is no use). RELEASE
 * runs without the pool lock. Why a log rather than a CLOCK bit or a lock:
 * a CLOCK approximation would change which blocks are evicted (the replay
 * compares the hit ratio with an exact LRU, and the unit model checks
 * exact order), and a lock taken per RELEASE is the serialisation this
 * design removes. So:
 *   - LOOKUP with pin leaves the block where it is. Eviction skips pinned
 *     blocks, and parks those it meets on a list of their own
 *     (BEL_LRU_PARKED) that no eviction walks: each pinned block costs an
 *     eviction one visit per pin, not one per ALLOC, however many ALLOCs
 *     fail on a pool whose blocks are all pinned. The release of the last
 *     pin takes it back to its place by time, as for any block (a merge
 *     treats the parked list as one more shard); a pin dropped as no use
 *     (t 0) takes it back at its old place (bel_lru_unpark()).
 *   - RELEASE of a last pin appends (block, time) to its client's LRU log,
 *     a client-local buffer under the client's own spinlock, deduplicated
 *     per block, so a client that pins and releases the same blocks over
 *     and over keeps one entry each.
 *   - A client whose log is full merges it itself: it moves each block to
 *     its place by time in the client's own shard (its home), taking it
 *     off another shard first if need be (bel_lru_log_merge()). Why
 *     shards, and why a home: with one list under the pool lock, the
 *     merges of all clients were one serial section; with shards by block
 *     id, they ran at once but each wrote the links of blocks that other
 *     clients' lookups were reading. Two workers releasing distinct blocks
 *     did 1.4-1.6x the work of one either way (bench/ conc, disjoint
 *     chains, host core); with homes, a client's blocks link to its own.
 *   - Eviction (ALLOC) merges every log first, then takes the oldest of
 *     the shards' heads, one victim at a time (bel_lru_claim_locked()).
 *     Both bound the work of one pool-lock hold: the merge lets the lock
 *     go every BEL_SCAN_CHUNK entries, at client granularity, and the
 *     claim stops after parking BEL_SCAN_CHUNK blocks, puts back what it
 *     claimed, and the ALLOC lets the lock go and starts again.
 * Each shard is sorted by time, whatever the order the logs are merged
 * in, so the order after a merge is exactly what moving each block at its
 * RELEASE would have given, for calls that do not overlap in time; a
 * RELEASE concurrent with an eviction may land behind a later use.
 */
#include "bel_internal.h"

/* --- one shard, its lock held ------------------------------------------ */

/* @n more (or fewer) blocks in transit; see pool->lru_in_transit. */
static void bel_lru_transit(struct bel_pool *pool, s32 n)
{
	u32 v = BEL_READ(pool->lru_in_transit);

	for (;;) {
		u32 old = bel_cmpxchg32(&pool->lru_in_transit, v, v + (u32)n);

		if (old == v)
			return;
		v = old;
	}
}

/* Take @id out of its shard's list. */
static void bel_lru_unlink(struct bel_pool *pool, struct bel_lru_shard *sh,
			   struct bel_block *b)
{
	if (b->prev != BEL_NONE)
		bel_block_of(pool, b->prev)->next = b->next;
	else
		sh->head = b->next;
	if (b->next != BEL_NONE)
		bel_block_of(pool, b->next)->prev = b->prev;
	else
		sh->tail = b->prev;
	b->prev = BEL_NONE;
	b->next = BEL_NONE;
}

/* Link @id in after @after (BEL_NONE: at the head). */
static void bel_lru_link_after(struct bel_pool *pool,
			       struct bel_lru_shard *sh, u32 id,
			       struct bel_block *b, u32 after)
{
	u32 next = after == BEL_NONE ? sh->head :
				       bel_block_of(pool, after)->next;

	b->prev = after;
	b->next = next;
	if (after == BEL_NONE)
		sh->head = id;
	else
		bel_block_of(pool, after)->next = id;
	if (next == BEL_NONE)
		sh->tail = id;
	else
		bel_block_of(pool, next)->prev = id;
}

/*
 * The last block at or before @from (BEL_NONE: the tail) whose stamp is
 * not after @t: where a block used at @t goes, behind blocks used at the
 * same time. Usually the tail itself.
 */
static u32 bel_lru_place(struct bel_pool *pool, struct bel_lru_shard *sh,
			 u32 from, u64 t)
{
	u32 at = from == BEL_NONE ? sh->tail : from;

	while (at != BEL_NONE && bel_block_of(pool, at)->used > t)
		at = bel_block_of(pool, at)->prev;
	return at;
}

/*
 * Lock the shard @b is on and return it; for a block not on the LRU
 * (in_lru, stable under this lock for a caller holding the pool lock),
 * the shard it was last on. Waits while a merge moves @b between shards
 * (the pattern of lock_timer_base() and TIMER_MIGRATING), so a caller
 * must hold no block in transit itself: two merges would wait on each
 * other.
 */
static struct bel_lru_shard *bel_lru_lock_block(struct bel_pool *pool,
						struct bel_block *b)
	__acquires(&pool->lru->lock)
{
	for (;;) {
		u32 s = BEL_READ(b->lru_shard);

		if (s != BEL_LRU_MOVING) {
			struct bel_lru_shard *sh = &pool->lru[s];

			bel_spin_lock(&sh->lock);
			if (b->lru_shard == s)
				return sh;
			bel_spin_unlock(&sh->lock);
		}
		bel_cpu_relax();
	}
}

/* --- the pool's writers, under the pool lock --------------------------- */

void bel_lru_add_locked(struct bel_pool *pool, const u32 *ids,
			const u64 *t, u32 n, u32 shard)
{
	struct bel_lru_shard *sh = &pool->lru[shard];
	u32 i;

	bel_spin_lock(&sh->lock);
	for (i = 0; i < n; i++) {
		struct bel_block *b = bel_block_of(pool, ids[i]);

		BEL_ASSERT(b->state == BEL_BLOCK_PUBLISHED && !b->in_lru);
		b->used = t[i];
		bel_lru_link_after(pool, sh, ids[i], b,
				   bel_lru_place(pool, sh, BEL_NONE, t[i]));
		BEL_WRITE(b->lru_shard, shard);
		/* A merge that sees it on the LRU sees its shard (acquires). */
		bel_store_release(&b->in_lru, 1);
	}
	bel_spin_unlock(&sh->lock);
}

void bel_lru_del_locked(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	struct bel_lru_shard *sh = bel_lru_lock_block(pool, b);

	BEL_ASSERT(b->in_lru);
	if (b->in_lru) {
		bel_lru_unlink(pool, sh, b);
		b->in_lru = 0;
	}
	bel_spin_unlock(&sh->lock);
}

/* Its shard's lock held: @b (on the LRU) was used at @t. */
static void bel_lru_move(struct bel_pool *pool, struct bel_lru_shard *sh,
			 u32 id, struct bel_block *b, u64 t)
{
	if (t <= b->used)
		return;
	bel_lru_unlink(pool, sh, b);
	b->used = t;
	bel_lru_link_after(pool, sh, id, b, bel_lru_place(pool, sh, BEL_NONE, t));
}

/* Its shard's lock held: @b, met pinned by a claim, waits parked. */
static void bel_lru_park(struct bel_pool *pool, struct bel_lru_shard *sh,
			 u32 id, struct bel_block *b)
{
	struct bel_lru_shard *pk = &pool->lru[BEL_LRU_PARKED];

	bel_lru_unlink(pool, sh, b);
	bel_spin_lock(&pk->lock);
	bel_lru_link_after(pool, pk, id, b, pk->tail);
	BEL_WRITE(b->lru_shard, BEL_LRU_PARKED);
	bel_spin_unlock(&pk->lock);
}

/*
 * The eviction's view of the shards' heads: each head's stamp, read under
 * its shard's lock and read again only for the shard a victim came from.
 * A merge meanwhile only moves blocks to newer places (or adds, with a
 * stamp from before this eviction, a block the eviction then misses), so
 * the cached head of another shard is at worst older than the real one,
 * and taking from it reads it again. One lock hold per run of victims
 * from one shard, not one per shard per victim.
 */
struct bel_lru_heads {
	u64 t[BEL_LRU_SHARDS];		/* ~0: empty, or nothing before now */
};

/* Under @s's lock: its head's stamp, if before @now. */
static void bel_lru_head_read(struct bel_pool *pool, struct bel_lru_heads *h,
			      u32 s, u64 now)
{
	u32 head = pool->lru[s].head;

	h->t[s] = ~0ULL;
	if (head != BEL_NONE && bel_block_of(pool, head)->used < now)
		h->t[s] = bel_block_of(pool, head)->used;
}

/* The shard of the oldest cached head (ties: the lower shard), or none. */
static u32 bel_lru_oldest_shard(const struct bel_lru_heads *h)
{
	u32 s, best = BEL_LRU_SHARDS;

	for (s = 0; s < BEL_LRU_SHARDS; s++)
		if (h->t[s] != ~0ULL &&
		    (best == BEL_LRU_SHARDS || h->t[s] < h->t[best]))
			best = s;
	return best;
}

/*
 * One pass over the shards: the eviction's "now", a stamp after every
 * block's on the LRU (a stamp may run ahead of the clock), and each
 * head's stamp, dropped again where it is not before that "now".
 */
static u64 bel_lru_heads_init(struct bel_pool *pool, struct bel_lru_heads *h)
{
	u64 now = bel_now_ns();
	u32 s;

	for (s = 0; s < BEL_LRU_SHARDS; s++) {
		struct bel_lru_shard *sh = &pool->lru[s];

		bel_spin_lock(&sh->lock);
		if (sh->tail != BEL_NONE &&
		    bel_block_of(pool, sh->tail)->used >= now)
			now = bel_block_of(pool, sh->tail)->used + 1;
		bel_lru_head_read(pool, h, s, ~0ULL);
		bel_spin_unlock(&sh->lock);
	}
	/* Filtered once "now" is final: it only grows in the pass. */
	for (s = 0; s < BEL_LRU_SHARDS; s++)
		if (h->t[s] >= now)
			h->t[s] = ~0ULL;
	return now;
}

u32 bel_lru_claim_locked(struct bel_pool *pool, u32 need, u32 *victims,
			 u32 *budget)
{
	u32 got = 0, last = BEL_NONE, s;
	struct bel_lru_heads h;
	u64 now = bel_lru_heads_init(pool, &h);

	*victims = BEL_NONE;
	while (got < need && *budget) {
		struct bel_lru_shard *sh;
		u64 next_t;
		u32 next;

		s = bel_lru_oldest_shard(&h);
		if (s == BEL_LRU_SHARDS)
			break;	/* nothing left older than this call */
		/* This shard's heads go while older than the next shard's. */
		h.t[s] = ~0ULL;
		next = bel_lru_oldest_shard(&h);
		next_t = next == BEL_LRU_SHARDS ? ~0ULL : h.t[next];
		sh = &pool->lru[s];
		bel_spin_lock(&sh->lock);
		while (got < need && *budget) {
			u32 id = sh->head;
			struct bel_block *b;

			if (id == BEL_NONE)
				break;
			b = bel_block_of(pool, id);
			if (b->used >= now || b->used > next_t ||
			    (b->used == next_t && next < s))
				break;
			pool->lru_claim_visits++;
			if (!bel_claim_locked(b)) {
				/* Pinned: its last release moves it back. */
				bel_lru_park(pool, sh, id, b);
				(*budget)--;
				continue;
			}
			bel_lru_unlink(pool, sh, b);
			b->in_lru = 0;
			/* Claimed (pins DEAD), off the LRU: no merge touches it. */
			if (last == BEL_NONE)
				*victims = id;
			else
				bel_block_of(pool, last)->next = id;
			last = id;
			got++;
		}
		bel_lru_head_read(pool, &h, s, now);
		bel_spin_unlock(&sh->lock);
	}
	return got;
}

/* Back at its shard's head (or behind an older block a merge put there). */
static void bel_lru_unclaim_one(struct bel_pool *pool, u32 id)
{
	struct bel_block *b = bel_block_of(pool, id);
	struct bel_lru_shard *sh = &pool->lru[b->lru_shard];
	u32 at = BEL_NONE, next;

	bel_spin_lock(&sh->lock);
	for (next = sh->head; next != BEL_NONE &&
	     bel_block_of(pool, next)->used <= b->used;
	     next = bel_block_of(pool, next)->next)
		at = next;
	bel_lru_link_after(pool, sh, id, b, at);
	bel_store_release(&b->in_lru, 1);
	bel_spin_unlock(&sh->lock);
	bel_unclaim_locked(b);
}

void bel_lru_unclaim_locked(struct bel_pool *pool, u32 victims)
{
	u32 id = victims;

	while (id != BEL_NONE) {
		u32 next = bel_block_of(pool, id)->next;

		bel_lru_unclaim_one(pool, id);
		id = next;
	}
}

u32 bel_lru_order_locked(struct bel_pool *pool, u32 *ids, u32 max)
{
	u32 at[BEL_LRU_SHARDS], s, n = 0;

	for (s = 0; s < BEL_LRU_SHARDS; s++)
		at[s] = pool->lru[s].head;
	for (;;) {
		u32 best = BEL_LRU_SHARDS;

		for (s = 0; s < BEL_LRU_SHARDS; s++)
			if (at[s] != BEL_NONE &&
			    (best == BEL_LRU_SHARDS ||
			     bel_block_of(pool, at[s])->used <
			     bel_block_of(pool, at[best])->used))
				best = s;
		if (best == BEL_LRU_SHARDS)
			return n;
		if (n < max)
			ids[n] = at[best];
		n++;
		at[best] = bel_block_of(pool, at[best])->next;
	}
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

/*
 * A block named by a log entry, or NULL when its region has gone since
 * (the caller is in an RCU read section or holds the pool lock).
 */
static struct bel_block *bel_lru_block(struct bel_pool *pool, u32 id)
{
	struct bel_region *r = &pool->regions[bel_id_slot(id)];

	if (!bel_load_acquire(&r->present) ||
	    bel_id_index(id) >= BEL_READ(r->nr_blocks))
		return NULL;
	return &BEL_READ(r->blocks)[bel_id_index(id)];
}

/* bel_lru_entry.pad during a merge: what step 1 did with the entry. */
enum { BEL_LRU_HOME, BEL_LRU_TAKEN, BEL_LRU_LATE };

/*
 * Step 3 of bel_lru_log_merge(), and a use under the pool lock: one
 * block, wherever it is now, to its place for @t in @home. A parked
 * block always leaves the parked list, for the later of @t and its last
 * use. Holds no block in transit when it may wait.
 */
static void bel_lru_move_home(struct bel_pool *pool, u32 home, u32 id,
			      struct bel_block *b, u64 t)
{
	struct bel_lru_shard *sh = bel_lru_lock_block(pool, b);
	struct bel_lru_shard *to = &pool->lru[home];
	bool parked = sh == &pool->lru[BEL_LRU_PARKED];

	/* Off the LRU since, or just published elsewhere: a later use. */
	if (!bel_load_acquire(&b->in_lru) ||
	    &pool->lru[BEL_READ(b->lru_shard)] != sh) {
		bel_spin_unlock(&sh->lock);
		return;
	}
	if (!parked && (sh == to || t <= b->used)) {
		bel_lru_move(pool, sh, id, b, t);
		bel_spin_unlock(&sh->lock);
		return;
	}
	bel_lru_unlink(pool, sh, b);
	if (t > b->used)
		b->used = t;
	t = b->used;
	BEL_WRITE(b->lru_shard, BEL_LRU_MOVING);
	bel_lru_transit(pool, 1);
	bel_spin_unlock(&sh->lock);
	bel_spin_lock(&to->lock);
	bel_lru_link_after(pool, to, id, b, bel_lru_place(pool, to, BEL_NONE, t));
	BEL_WRITE(b->lru_shard, home);
	bel_lru_transit(pool, -1);
	bel_spin_unlock(&to->lock);
}

/*
 * Step 1: take the blocks of @e[0..@n), all found on shard @s when
 * grouped, off it. @orig is the log, whose entries get the outcome.
 */
static void bel_lru_take(struct bel_pool *pool, u32 s,
			 const struct bel_lru_entry *e, u32 n,
			 struct bel_lru_entry *orig)
{
	struct bel_lru_shard *sh = &pool->lru[s];
	u32 i, taken = 0;

	bel_spin_lock(&sh->lock);
	for (i = 0; i < n; i++) {
		struct bel_lru_entry *o = &orig[e[i].pad];
		struct bel_block *b = bel_lru_block(pool, o->id);

		if (!b) {
			o->id = BEL_NONE;	/* its region went meanwhile */
			continue;
		}
		if (!bel_load_acquire(&b->in_lru) || b->lru_shard != s) {
			o->pad = BEL_LRU_LATE;	/* moved meanwhile */
			continue;
		}
		if (o->t <= b->used) {
			/* A later use is recorded; parked, it goes all the same. */
			if (s == BEL_LRU_PARKED)
				o->pad = BEL_LRU_LATE;
			else
				o->id = BEL_NONE;
			continue;
		}
		bel_lru_unlink(pool, sh, b);
		b->used = o->t;
		BEL_WRITE(b->lru_shard, BEL_LRU_MOVING);
		o->pad = BEL_LRU_TAKEN;
		taken++;
	}
	/* Counted before the lock goes: see pool->lru_in_transit. */
	if (taken)
		bel_lru_transit(pool, taken);
	bel_spin_unlock(&sh->lock);
}

/*
 * Empty @c's log into the LRU, the log's lock held, moving each block to
 * its place by time in @c's home shard:
 *   1. blocks found on other shards are taken off them (BEL_LRU_MOVING),
 *      one lock hold per shard: the entries are grouped by shard first,
 *      in the spare buffer;
 *   2. under the home's lock, newest first from the tail backwards, each
 *      taken block and each block already home goes to its place: each
 *      entry's place is at or before the last one's, so this is one pass
 *      over the shard however many entries other clients merged meanwhile;
 *   3. blocks that another merge moved between the grouping and step 1 or
 *      2 go one by one.
 * Steps 1 and 2 never wait on a block in transit (two merges would wait
 * on each other's); step 3 may, holding none.
 */
static void bel_lru_log_merge(struct bel_client *c)
{
	struct bel_lru_log *l = &c->log;
	struct bel_pool *pool = c->pool;
	struct bel_lru_shard *home = &pool->lru[c->lru_home];
	/* Groups: the shards, the parked list, then blocks in transit. */
	u32 start[BEL_LRU_PARKED + 3] = { 0 }, pos[BEL_LRU_PARKED + 2];
	u32 i, s, at = BEL_NONE, landed = 0;
	bool front = false;

	/* Group by the shard each block is on now (moving: the last group). */
	for (i = 0; i < l->n; i++) {
		struct bel_block *b = l->e[i].id == BEL_NONE ? NULL :
				      bel_lru_block(pool, l->e[i].id);

		if (!b || !bel_load_acquire(&b->in_lru)) {
			l->e[i].id = BEL_NONE;
			continue;
		}
		s = BEL_READ(b->lru_shard);
		l->e[i].pad = s == BEL_LRU_MOVING ? BEL_LRU_PARKED + 1 : s;
		start[l->e[i].pad + 1]++;
	}
	for (s = 0; s <= BEL_LRU_PARKED + 1; s++) {
		start[s + 1] += start[s];
		pos[s] = start[s];
	}
	for (i = 0; i < l->n; i++) {
		if (l->e[i].id == BEL_NONE)
			continue;
		s = l->e[i].pad;
		l->spare[pos[s]].id = l->e[i].id;
		l->spare[pos[s]++].pad = i;
		l->e[i].pad = s == c->lru_home ? BEL_LRU_HOME :
			      s == BEL_LRU_PARKED + 1 ? BEL_LRU_LATE :
			      BEL_LRU_TAKEN;
	}
	/* 1. */
	for (s = 0; s <= BEL_LRU_PARKED; s++)
		if (s != c->lru_home && start[s + 1] > start[s])
			bel_lru_take(pool, s, l->spare + start[s],
				     start[s + 1] - start[s], l->e);
	/* 2. at: the cursor; front: every place left is the head. */
	bel_spin_lock(&home->lock);
	for (i = l->n; i--; ) {
		struct bel_lru_entry *e = &l->e[i];
		struct bel_block *b;

		if (e->id == BEL_NONE || e->pad == BEL_LRU_LATE)
			continue;
		landed += e->pad == BEL_LRU_TAKEN;
		b = bel_lru_block(pool, e->id);
		if (!b) {
			e->id = BEL_NONE;	/* taken only from a live region */
			continue;
		}
		if (e->pad == BEL_LRU_HOME) {
			if (!bel_load_acquire(&b->in_lru) ||
			    b->lru_shard != c->lru_home) {
				e->pad = BEL_LRU_LATE;	/* moved meanwhile */
				continue;
			}
			if (e->t <= b->used)
				continue;
			if (at == e->id) {
				at = b->prev;
				front = at == BEL_NONE;
			}
			bel_lru_unlink(pool, home, b);
			b->used = e->t;
		}
		if (!front) {
			at = bel_lru_place(pool, home, at, e->t);
			front = at == BEL_NONE;
		}
		bel_lru_link_after(pool, home, e->id, b, at);
		BEL_WRITE(b->lru_shard, c->lru_home);
	}
	if (landed)
		bel_lru_transit(pool, -(s32)landed);
	bel_spin_unlock(&home->lock);
	/* 3. */
	for (i = 0; i < l->n; i++) {
		struct bel_block *b;

		if (l->e[i].id == BEL_NONE || l->e[i].pad != BEL_LRU_LATE)
			continue;
		b = bel_lru_block(pool, l->e[i].id);
		if (b)
			bel_lru_move_home(pool, c->lru_home, l->e[i].id, b,
					  l->e[i].t);
	}
	/* The map's slots all point at or past n = 0 now: stale. */
	l->n = 0;
	l->dead = 0;
}

void bel_lru_log(struct bel_client *c, const u32 *ids, const u64 *t, u32 n)
{
	struct bel_lru_log *l = &c->log;
	u32 i = 0;

	bel_spin_lock(&l->lock);
	while (i < n) {
		if (bel_lru_log_one(l, ids[i], t[i]))
			i++;
		else
			bel_lru_log_merge(c);	/* full of distinct blocks */
	}
	bel_spin_unlock(&l->lock);
}

void bel_lru_wait_transit_locked(struct bel_pool *pool)
{
	/*
	 * Merges take no pool lock, and hold a spinlock (a log's, or the
	 * pool's for a close) all the while a block is in transit: each
	 * one in flight ends by itself, without sleeping.
	 */
	while (bel_load_acquire(&pool->lru_in_transit))
		bel_cpu_relax();
}

void bel_lru_touch_locked(struct bel_client *c, u32 id, u64 t)
{
	struct bel_block *b = bel_block_of(c->pool, id);

	BEL_ASSERT(b->in_lru);
	bel_lru_move_home(c->pool, c->lru_home, id, b, t);
}

void bel_lru_unpark(struct bel_client *c, u32 id)
{
	struct bel_block *b = bel_lru_block(c->pool, id);

	/*
	 * Not parked: stays where it is (t 0 is no use). Under the log's
	 * lock, as a merge: a block in transit is never held by a task that
	 * can be preempted while an eviction waits for it with the pool
	 * lock held (bel_lru_wait_transit_locked()).
	 */
	if (b) {
		bel_spin_lock(&c->log.lock);
		bel_lru_move_home(c->pool, c->lru_home, id, b, 0);
		bel_spin_unlock(&c->log.lock);
	}
}

/* Merge one client's log, the pool lock held; how many entries it had. */
static u32 bel_lru_merge_one_locked(struct bel_client *c)
{
	u32 n;

	bel_spin_lock(&c->log.lock);
	n = c->log.n;
	c->pool->lru_merged += n;
	if (n)
		bel_lru_log_merge(c);
	bel_spin_unlock(&c->log.lock);
	return n;
}

void bel_lru_merge_locked(struct bel_pool *pool)
{
	struct bel_lru_cursor cur = { .next = pool->clients };
	struct bel_lru_cursor **pp;
	u32 budget = BEL_SCAN_CHUNK;

	cur.link = pool->merge_cursors;
	pool->merge_cursors = &cur;
	while (cur.next) {
		struct bel_client *c = cur.next;
		u32 n;

		cur.next = c->next_client;
		n = bel_lru_merge_one_locked(c) + 1;
		if (n < budget) {
			budget -= n;
		} else if (cur.next) {
			/* A close meanwhile moves the cursor past itself. */
			bel_pool_pause_locked(pool);
			budget = BEL_SCAN_CHUNK;
		}
	}
	for (pp = &pool->merge_cursors; *pp != &cur; pp = &(*pp)->link)
		;
	*pp = cur.link;
}

void bel_lru_client_gone_locked(struct bel_client *c)
{
	struct bel_lru_cursor *cur;

	for (cur = c->pool->merge_cursors; cur; cur = cur->link)
		if (cur->next == c)
			cur->next = c->next_client;
	bel_lru_merge_one_locked(c);
}
