/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The portable core of Beluga: block allocator, key index, LRU and per-client
 * bookkeeping. It knows nothing about memory, files or user pointers: it
 * manages block *numbers* (bel_block_id()) and the offsets that name them:
 * every call names a block by its offset in the pool's mapping, as the
 * uapi does, and so does the shared pool's core (bel_mh.h). The kernel glue
 * (and the userspace tests) give it kernel-side arrays and copy to and from
 * userspace around the calls.
 *
 * Files:
 *   pool.c    regions, block table, free lists, round-robin allocation,
 *             eviction, statistics
 *   index.c   hash index (namespace, key) -> block
 *   lru.c     least-recently-used order of published blocks, in shards
 *   client.c  per-client allocation list and pin table, release on close
 *
 * Locking. One bel_spinlock_t in struct bel_pool serialises the writers:
 * ALLOC (and the eviction it does), FREE, PUBLISH, administrative eviction,
 * regions, memory errors and close. It protects the block states, the free
 * lists, which blocks are on the LRU, the index's links and the counters in
 * pool->stats. The LRU's order has locks of its own (struct bel_lru_shard).
 * Nothing sleeps under it. The read path does not take it:
 *   - LOOKUP walks the index under an RCU read section and validates each
 *     block it passes with the block's index sequence (bel_block.seq),
 *     and pins with a compare-and-exchange on bel_block.pins that fails
 *     once an evictor has claimed the block (index.c, client.c);
 *   - RELEASE drops pins with atomics and records the blocks that became
 *     unpinned in its client's LRU log. A full log is merged into the LRU
 *     by its own client, under the locks of the LRU's shards, not the
 *     pool lock (lru.c);
 *   - a client's pin table and read-side counters belong to the client
 *     (its mutex), so no two clients write the same cache line for them;
 *   - page faults find their region without a lock (pool.c).
 * Calls that may need memory (adding a region, growing a client's pin
 * table, creating a client) allocate before taking the pool lock. Each
 * client's bel_mutex_t serialises that client's calls, so that capacity
 * reserved before taking a lock is still there inside it.
 *
 * Errors are negative errno values, as in the uapi header.
 */
#ifndef BEL_CORE_H
#define BEL_CORE_H

#include "bel_env.h"
#include "bel_pins.h"
#include "bel_stats.h"
#include <linux/beluga.h>

/* Block ids: region slot in the high bits, index inside the region low. */
#define BEL_SLOT_SHIFT		27
#define BEL_MAX_REGION_BLOCKS	(1U << BEL_SLOT_SHIFT)
#define BEL_NONE		0xffffffffU

/* Offset space of each new region starts on this boundary (2 MiB pages). */
#define BEL_REGION_OFFSET_ALIGN	(2ULL << 20)

enum bel_block_state {
	BEL_BLOCK_FREE = 0,
	BEL_BLOCK_ALLOCATED,
	BEL_BLOCK_PUBLISHED,
	/* A memory error hit it: on no list, never handed out again. */
	BEL_BLOCK_RETIRED,
};

struct bel_client;
struct bel_index_copy;

/* bel_block.pins while a writer evicts the block: no pin can be taken. */
#define BEL_PINS_DEAD		0xffffffffU

/*
 * One block's metadata: 64 bytes, one cache line, so that a probe that
 * reaches a block touches one line for its key, its link and its pins.
 * Written under bel_pool.lock, except 'pins' (atomic, see below). The
 * lock-free readers read ns, key, seq, hash_next and pins only, through
 * BEL_READ() and with the validation described at 'seq'.
 */
struct bel_block {
	u64 ns;
	struct beluga_key key;
	/*
	 * Index sequence: even while the block is in the index under
	 * (ns, key), odd while it is not; +1 at every insertion and removal.
	 * A reader that saw the same even value before and after reading
	 * the key and hash_next read them from one published state.
	 */
	u32 seq;
	u32 hash_next;			/* index bucket chain */
	/*
	 * Pins of all clients. Changed with bel_cmpxchg32() by LOOKUP and
	 * RELEASE without the pool lock; BEL_PINS_DEAD only under the pool
	 * lock, from an evictor's claim (0 -> DEAD) to the block's return to
	 * a free list (-> 0), so no pin is ever taken of a block on its way
	 * out. 0 on FREE and ALLOCATED blocks but for a reader's brief pin of
	 * a block it then finds changed and drops again.
	 */
	u32 pins;
	u8 state;			/* enum bel_block_state */
	/* On its LRU shard: pool lock and the shard's lock to change. */
	u8 in_lru;
	/*
	 * A memory error hit it while a client still held it (ALLOCATED, or
	 * PUBLISHED and pinned): it becomes RETIRED instead of FREE when
	 * that client lets go. A retired PUBLISHED block is out of the index.
	 */
	u8 retired;
	/*
	 * On the LRU: the shard it is on, or BEL_LRU_MOVING while a merge
	 * takes it from one shard to another (lru.c).
	 */
	u8 lru_shard;
	/*
	 * On the LRU: the stamp (bel_now_ns()) of its last use, its place
	 * in its shard's order. 'used', 'prev' and 'next' of a block on the
	 * LRU belong to its shard's lock.
	 */
	u64 used;
	struct bel_client *owner;	/* ALLOCATED: the owning client */
	u32 prev;			/* free list, owner's list or LRU */
	u32 next;
};

struct bel_region {
	bool present;			/* in the pool: allocatable, counted */
	/*
	 * Reserved by bel_pool_reserve_region(): its slot, offset span and
	 * block table exist, but nothing sees it until it is committed.
	 */
	bool reserved;
	u64 first_offset;		/* offset of block 0 in the mapping */
	u64 length;			/* bytes of memory behind the region */
	u32 nr_blocks;
	u32 nr_free;
	u32 nr_allocated;
	u32 nr_published;
	u32 nr_retired;			/* RETIRED blocks */
	u32 free_head;			/* singly linked through bel_block.next */
	struct bel_block *blocks;
};

struct bel_region_stats {
	u64 first_offset;
	u64 length;
	u64 nr_blocks;
	u64 free_blocks;
	u64 allocated_blocks;
	u64 published_blocks;
};

/*
 * The LRU in shards, so that clients merging their logs (lru.c) neither
 * wait on one lock nor write each other's blocks: each client moves the
 * blocks it releases to a shard of its own (its home). Each shard is
 * ordered by bel_block.used, so the order over all shards is exact
 * without merging them.
 */
#define BEL_LRU_SHARDS		16U
/*
 * pool->lru[] and bel_block.lru_shard: pinned blocks that an eviction met,
 * parked off the shards it walks until their last pin goes (lru.c).
 */
#define BEL_LRU_PARKED		BEL_LRU_SHARDS
#define BEL_LRU_MOVING		0xffU	/* bel_block.lru_shard: in transit */

/*
 * Where a merge of every client's log (bel_lru_merge_locked()) goes on
 * after it let the pool lock go: a client that closes meanwhile moves the
 * cursors that point at it (bel_lru_cursors_skip_locked()).
 */
struct bel_lru_cursor {
	struct bel_client *next;
	struct bel_lru_cursor *link;	/* pool->merge_cursors */
};

struct bel_lru_shard {
	/*
	 * Protects head, tail, and 'used', 'prev', 'next' and 'lru_shard'
	 * of the blocks on this shard. Taken inside the pool lock and inside
	 * a client's log lock. Inside a shard's lock only the parked list's
	 * may be taken (a claim parking a block); none inside that one.
	 */
	bel_spinlock_t lock;
	u32 head;			/* oldest, or BEL_NONE */
	u32 tail;			/* newest */
};

/* The key a bucket caches for one of its chain's first blocks. */
struct bel_bucket_key {
	u64 ns;
	struct beluga_key key;
};

/*
 * A hash bucket of the index (index.c): its chain's head and, beside it,
 * a cache of the chain's first two blocks (their ids and keys) and the
 * third's id, so that a count-only probe whose key is among the first two
 * reads this one line, and one further down starts at the third block.
 * One line. Written under the pool lock: @seq odd while anything in it
 * changes; lock-free readers read @seq before and after the rest.
 */
struct bel_bucket {
	u32 seq;
	u32 head;			/* the chain: block id, or BEL_NONE */
	u32 second;			/* cache: head's hash_next */
	u32 third;			/* cache: second's hash_next */
	struct bel_bucket_key keys[2];	/* cache: head's, second's */
};

struct bel_pool {
	/*
	 * Serialises the writers (see the top of this file). Protects
	 * regions[] (read without it by LOOKUP, RELEASE and page faults, see
	 * pool.c), every bel_block but 'pins' and the LRU order's fields
	 * (struct bel_lru_shard), which blocks are on the LRU, the index's
	 * links (read under RCU), the counters in stats, the list of clients
	 * and every client's alloc list.
	 */
	bel_spinlock_t lock;
	u64 block_size;			/* 0 while no region is present */
	u32 nr_regions;			/* present ones */
	u32 nr_reserved;		/* reserved, not yet committed */
	u32 rotor;			/* next slot to allocate from */
	struct bel_region regions[BELUGA_MAX_REGIONS];

	/* index.c */
	struct bel_bucket *buckets;	/* heads of hash chains */
	u32 nr_buckets;			/* power of two, or 0; only grows */
	/* Odd while a rehash moves the chains to a new bucket array. */
	u32 index_seq;
	/*
	 * The live copy of the index that userspace maps, or NULL
	 * (bel_index_copy.h); under the lock, like the index's links.
	 */
	struct bel_index_copy *copy;

	/*
	 * lru.c: every published, unretired block, in the order of its last
	 * use (publish, or the release of its last pin), in shards. A
	 * shard's head is its oldest; the pool's oldest is the oldest of the
	 * heads.
	 */
	struct bel_lru_shard lru[BEL_LRU_SHARDS + 1];	/* + parked */
	u32 next_lru_home;		/* the next client's home shard */
	/* Merges of every client's log that dropped this lock meanwhile. */
	struct bel_lru_cursor *merge_cursors;
	/*
	 * Work done under the pool lock by eviction, for the unit tests and
	 * the probe (bench/probe.c): LRU blocks an eviction's claim looked
	 * at, and client log entries merged while holding this lock.
	 */
	u64 lru_claim_visits;
	u64 lru_merged;
	/*
	 * Blocks a merge has taken off one LRU list and not yet linked into
	 * another (BEL_LRU_MOVING): changed with bel_cmpxchg32() under the
	 * lock of the list they leave or join. An eviction short of victims
	 * waits for 0 and looks again, so that no block in transit is missed.
	 */
	u32 lru_in_transit;

	/* Clients, for the LRU logs and the counters they keep. */
	struct bel_client *clients;

	/*
	 * Occupancy fields derived on read; the read-path counters (struct
	 * bel_read_counts) of clients that have closed are added here.
	 */
	struct bel_stats stats;
};

/*
 * The counters of the read path, kept per client so that LOOKUP and
 * RELEASE of different clients write no shared line. Written by the
 * client's own calls (its mutex), read by bel_pool_stats() with
 * BEL_READ(); the pool's count is the sum over the clients plus what
 * closed clients left in pool->stats.
 */
struct bel_read_counts {
	u64 lookups;
	u64 lookup_keys;
	u64 lookup_hits;
	u64 releases;
	u64 pins;
	u64 pinned_blocks;		/* 0 -> 1 transitions minus 1 -> 0 */
};

/*
 * A client's LRU log: blocks whose last pin it released, with the time,
 * not yet moved to their place in the LRU. The client merges its own log
 * when it is full, and writers that use the LRU's order (eviction) merge
 * every log first (lru.c), so that eviction order is exact LRU for every
 * sequence of calls that do not overlap in time.
 */
#define BEL_LRU_LOG		1024U	/* entries per buffer */
#define BEL_LRU_MAP		2048U	/* dedup slots, a power of two */

struct bel_lru_entry {
	u64 t;				/* bel_now_ns() */
	u32 id;				/* BEL_NONE: superseded */
	u32 pad;
};

struct bel_lru_log {
	/*
	 * Protects n, dead, e, the map and spare: taken by the client to
	 * append and to merge its full log, and by a writer's merge of all
	 * logs (pool lock first). Shard locks are taken inside it.
	 */
	bel_spinlock_t lock;
	u32 n;
	u32 dead;			/* entries superseded since */
	struct bel_lru_entry *e;
	u32 *map;			/* id hash -> index in e, for dedup */
	/* A merge's scratch: e's entries grouped by shard. */
	struct bel_lru_entry *spare;
};

/* Per-client state. */
struct bel_client {
	struct bel_pool *pool;
	/*
	 * Serialises this client's calls. Protects the pin table, nr_pins,
	 * counts and last_stamp, which only this client's calls change (a
	 * table swap also takes the pool lock, for check helpers).
	 */
	bel_mutex_t mutex;
	u32 alloc_head;			/* ALLOCATED blocks: pool->lock */
	u32 nr_allocated;		/* pool->lock */
	struct bel_pin_table pins;	/* block id -> pins held */
	u64 nr_pins;			/* pins held, with multiplicity */
	u64 last_stamp;			/* its last LRU stamp */
	u32 lru_home;			/* its LRU shard (lru.c) */
	struct bel_read_counts counts;
	struct bel_lru_log log;
	struct bel_client *next_client;	/* pool->clients: pool->lock */
	struct bel_client *prev_client;
};

/* --- pool.c ------------------------------------------------------------ */

int bel_pool_init(struct bel_pool *pool);
/* All clients must have been released; regions are dropped without checks. */
void bel_pool_destroy(struct bel_pool *pool);

/*
 * Add a region of @length bytes. @block_size 0 means the pool's, or
 * BELUGA_BLOCK_SIZE_DEFAULT when the pool is empty. Picks the lowest free
 * slot and the lowest gap in the offset space (BEL_REGION_OFFSET_ALIGN
 * aligned) that fits. May sleep.
 * -EINVAL: bad block size, a size mismatch, or shorter than one block;
 * -ENOSPC: no free slot; -ENOMEM.
 */
int bel_pool_add_region(struct bel_pool *pool, u64 length, u64 block_size,
			u32 *slot, u64 *first_offset, u32 *nr_blocks);

/*
 * bel_pool_add_region() in two steps, for a caller that must answer before
 * the region becomes visible (ATTACH answers its caller first). Reserve
 * builds the region and holds its slot, its offset span and the pool's
 * block size, with the same errors as bel_pool_add_region(); nothing of it
 * can be allocated, looked up, counted or found by offset until commit.
 * A reserved region takes memory errors (bel_retire_offset()). Commit
 * cannot fail; abort drops the reservation as if it had never been made.
 */
int bel_pool_reserve_region(struct bel_pool *pool, u64 length, u64 block_size,
			    u32 *slot, u64 *first_offset, u32 *nr_blocks);
void bel_pool_commit_region(struct bel_pool *pool, u32 slot);
void bel_pool_abort_region(struct bel_pool *pool, u32 slot);

/*
 * Remove the region in @slot. -ENOENT: no such region. -EBUSY: a block is
 * ALLOCATED or pinned, or PUBLISHED without @evict. With @evict, unpinned
 * published blocks are evicted first (count in *@evicted, may be NULL) and
 * the region is removed only when nothing remains; if it stays busy, the
 * evictions stand and -EBUSY is returned. May sleep (frees memory).
 * When the last region goes, block_size returns to 0.
 */
int bel_pool_remove_region(struct bel_pool *pool, u32 slot, bool evict,
			   u64 *evicted);

/*
 * Which region holds mapping offset @offset: its slot and the byte offset
 * inside the region's memory. -ENOENT when @offset is in no region (a hole
 * or past the end). Offsets inside a region but not on a block boundary are
 * still found: this serves page faults, not block naming.
 */
int bel_pool_find_offset(struct bel_pool *pool, u64 offset, u32 *slot,
			 u64 *region_offset);

/* One consistent snapshot of occupancy and counters. */
void bel_pool_stats(struct bel_pool *pool, struct bel_stats *out);
/*
 * Add the counters of @c (allocs .. alloc_failures; not the occupancy) to
 * the pool's: work done on the pool elsewhere, by a shared pool's host that
 * left (kmod/mh.c), so that the pool's counters still run since load.
 */
void bel_pool_add_counters(struct bel_pool *pool,
			   const struct bel_counters *c);
int bel_region_stats(struct bel_pool *pool, u32 slot,
		     struct bel_region_stats *out);

/* Bytes of offset space needed to reach every present region. */
u64 bel_pool_map_size(struct bel_pool *pool);

/* --- client.c ---------------------------------------------------------- */

/* May sleep. NULL on -ENOMEM. Counts in stats.clients. */
struct bel_client *bel_client_new(struct bel_pool *pool);
/*
 * Frees every block the client still has ALLOCATED and drops every pin it
 * holds (counted in stats.frees and stats.releases), then frees the client.
 * May sleep: it drops the pool lock and reschedules every BEL_SCAN_CHUNK
 * items, so call it from process context with no spinlock held.
 */
void bel_client_release(struct bel_client *client);

/*
 * All-or-nothing allocation of @count blocks (1..BELUGA_MAX_BATCH),
 * round-robin across regions, evicting LRU blocks when the free lists run
 * short. Writes their offsets to @offsets. -ENOSPC (counted in
 * alloc_failures) when even eviction cannot supply @count; -ENODEV when
 * the pool has no region. With @evicted (room for @count entries) the
 * (ns, key) of each block it evicted, least recently used first, and their
 * number in *@nr_evicted (0 on failure: nothing is evicted then).
 */
int bel_alloc_evicting(struct bel_client *client, u32 count, u64 *offsets,
		       struct beluga_evicted_key *evicted, u32 *nr_evicted);

static inline int bel_alloc(struct bel_client *client, u32 count, u64 *offsets)
{
	return bel_alloc_evicting(client, count, offsets, NULL, NULL);
}

/* All-or-nothing: each offset must be ALLOCATED by @client. -EINVAL. */
int bel_free(struct bel_client *client, u32 count, const u64 *offsets);

/*
 * Publish the uapi's @count items (offset, key) under @ns. Per item,
 * @result is BELUGA_PUBLISH_OK, BELUGA_PUBLISH_EXISTS (key present: the
 * block is freed), -EIO (a memory error retired the block), or -EINVAL
 * (not a block offset) / -EPERM (not ALLOCATED by @client), leaving that
 * block unchanged. Counts go to the three out parameters (each may be
 * NULL). Always returns 0 for a valid count. @__reserved is not looked at.
 */
int bel_publish(struct bel_client *client, u64 ns, u32 count,
		struct beluga_publish_item *items, u32 *published, u32 *exists,
		u32 *failed);

/*
 * Longest leading run of @keys present under @ns. With @pin, each hit is
 * pinned once for @client and moved to the MRU end; its offset goes to
 * @offsets. Without @pin, @offsets may be NULL; when not NULL the hits'
 * offsets are written but nothing is pinned or touched.
 * -ENOMEM when the pin table cannot grow (nothing pinned then).
 */
int bel_lookup(struct bel_client *client, u64 ns, u32 count,
	       const struct beluga_key *keys, bool pin, u64 *offsets,
	       u32 *hits);

/*
 * All-or-nothing: drop one pin of @client per listed offset. -EINVAL when
 * an offset is not a block or is listed more often than @client pins it.
 * A block whose pins reach zero takes the LRU's newest place.
 */
int bel_release(struct bel_client *client, u32 count, const u64 *offsets);

/* --- eviction by administrators (pool.c) ------------------------------ */

/* -ENOENT: not present; -EBUSY: pinned. */
int bel_evict_key(struct bel_pool *pool, u64 ns, const struct beluga_key *key);
/* Evicts every unpinned block of @ns; returns how many, *busy the rest. */
u64 bel_evict_ns(struct bel_pool *pool, u64 ns, u64 *busy);

/* --- memory errors (pool.c) ------------------------------------------- */

/*
 * Take the block that holds mapping offset @offset (anywhere inside it)
 * out of service after a memory error: its key is unpublished at once, so
 * LOOKUP no longer finds it, and it never returns to a free list. A FREE or
 * unpinned PUBLISHED block is RETIRED now; an ALLOCATED or pinned one when
 * its holder frees, publishes, releases or closes. Returns 1 when the block
 * was newly retired, 0 when it already was, -ENOENT when @offset is in no
 * block.
 */
int bel_retire_offset(struct bel_pool *pool, u64 offset);

/* --- internal, shared between the core's files ------------------------ */

static inline u32 bel_block_id(u32 slot, u32 index)
{
	return (slot << BEL_SLOT_SHIFT) | index;
}

static inline u32 bel_id_slot(u32 id)
{
	return id >> BEL_SLOT_SHIFT;
}

static inline u32 bel_id_index(u32 id)
{
	return id & (BEL_MAX_REGION_BLOCKS - 1);
}

static inline struct bel_block *bel_block_of(struct bel_pool *pool, u32 id)
{
	return &pool->regions[bel_id_slot(id)].blocks[bel_id_index(id)];
}

#endif /* BEL_CORE_H */
