/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The portable core of Beluga: block allocator, key index, LRU and per-client
 * bookkeeping. It knows nothing about memory, files or user pointers: it
 * manages block *numbers* and the offsets that name them. The kernel glue
 * (and the userspace tests) give it kernel-side arrays and copy to and from
 * userspace around the calls.
 *
 * Files:
 *   pool.c    regions, block table, free lists, round-robin allocation,
 *             eviction, statistics
 *   index.c   hash index (namespace, key) -> block
 *   lru.c     least-recently-used list of published, unpinned blocks
 *   client.c  per-client allocation list and pin table, release on close
 *
 * Locking: one bel_spinlock_t in struct bel_pool protects every block, list,
 * the index, the counters and every client's pin table. Nothing sleeps under
 * it. Calls that may need memory (adding a region, growing a client's pin
 * table, creating a client) allocate before taking it. Each client also has
 * a bel_mutex_t that serialises that client's calls, so that capacity
 * reserved before taking the pool lock is still there inside it.
 *
 * Errors are negative errno values, as in the uapi header.
 */
#ifndef BEL_CORE_H
#define BEL_CORE_H

#include "bel_env.h"
#include "bel_pins.h"
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

/* One block's metadata. Every field is protected by bel_pool.lock. */
struct bel_block {
	u64 ns;
	struct beluga_key key;
	struct bel_client *owner;	/* ALLOCATED: the owning client */
	u32 prev;			/* free list, owner's list or LRU */
	u32 next;
	u32 hash_next;			/* PUBLISHED: index bucket chain */
	u32 pins;			/* PUBLISHED: pins of all clients */
	u8 state;			/* enum bel_block_state */
	u8 in_lru;
	/*
	 * A memory error hit it while a client still held it (ALLOCATED, or
	 * PUBLISHED and pinned): it becomes RETIRED instead of FREE when
	 * that client lets go. A retired PUBLISHED block is out of the index.
	 */
	u8 retired;
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

/* Occupancy and counters, the same fields as struct beluga_stats. */
struct bel_stats {
	u64 total_blocks;
	u64 free_blocks;
	u64 allocated_blocks;
	u64 published_blocks;
	u64 pinned_blocks;
	u64 pins;
	u64 clients;
	u64 allocs;
	u64 frees;
	u64 publishes;
	u64 publish_races;
	u64 lookups;
	u64 lookup_keys;
	u64 lookup_hits;
	u64 releases;
	u64 evictions;
	u64 alloc_failures;
	u64 retired_blocks;
};

struct bel_region_stats {
	u64 first_offset;
	u64 length;
	u64 nr_blocks;
	u64 free_blocks;
	u64 allocated_blocks;
	u64 published_blocks;
};

struct bel_pool {
	/*
	 * Protects regions[], every bel_block, the LRU, the index, the
	 * counters in stats, nr_clients and every client's alloc list and pin
	 * table.
	 */
	bel_spinlock_t lock;
	u64 block_size;			/* 0 while no region is present */
	u32 nr_regions;			/* present ones */
	u32 nr_reserved;		/* reserved, not yet committed */
	u32 rotor;			/* next slot to allocate from */
	struct bel_region regions[BELUGA_MAX_REGIONS];

	/* index.c */
	u32 *buckets;			/* heads of hash chains, BEL_NONE */
	u32 nr_buckets;			/* power of two, or 0 */

	/* lru.c: published blocks with pins == 0; head is the oldest */
	u32 lru_head;
	u32 lru_tail;

	struct bel_stats stats;		/* occupancy fields derived on read */
};

/* Per-client state; every field but 'mutex' is protected by pool->lock. */
struct bel_client {
	struct bel_pool *pool;
	bel_mutex_t mutex;		/* serialises this client's calls */
	u32 alloc_head;			/* ALLOCATED blocks, via prev/next */
	u32 nr_allocated;
	struct bel_pin_table pins;	/* block id -> pins held */
	u64 nr_pins;			/* pins held, with multiplicity */
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
void bel_pool_add_counters(struct bel_pool *pool, const struct bel_stats *c);
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
 * the pool has no region.
 */
int bel_alloc(struct bel_client *client, u32 count, u64 *offsets);

/* All-or-nothing: each offset must be ALLOCATED by @client. -EINVAL. */
int bel_free(struct bel_client *client, u32 count, const u64 *offsets);

/*
 * Publish @count (offset, key) pairs under @ns. Per item: results[i] is
 * BELUGA_PUBLISH_OK, BELUGA_PUBLISH_EXISTS (key present: the block is
 * freed) or -EINVAL (not a block offset) / -EPERM (not ALLOCATED by
 * @client), leaving that block unchanged. Counts go to the three out
 * parameters. Always returns 0 for a valid count.
 */
int bel_publish(struct bel_client *client, u64 ns, u32 count,
		const u64 *offsets, const struct beluga_key *keys,
		s32 *results, u32 *published, u32 *exists, u32 *failed);

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
 * A block whose pins reach zero joins the LRU at the MRU end.
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
