/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Beluga multi-host: several hosts share one CXL region without cache
 * coherence and without cross-host atomics. See Documentation/multihost.md.
 *
 * This header is the API of the portable protocol, as the kernel glue
 * (kmod/mh.c) and the userspace simulator (tests/unit/mh) use it: the
 * environment a host runs in (memory accessors, clock), a host and its
 * clients, the block operations. The on-media format is in
 * bel_mh_format.h; what only the mh files share (the accessor layer,
 * layout helpers, partition lists) is in bel_mh_internal.h. Like the rest
 * of the core it depends on bel_env.h only, so it compiles into the kernel
 * module and into the simulator.
 *
 * Files:
 *   mh_format.c  layout, superblock check, format, attach/join/leave
 *   mh_host.c    heartbeat, liveness, partition claim/release/rebuild
 *   mh_ops.c     alloc, free, publish, lookup (+pin), release, evict,
 *                retire (memory errors)
 */
#ifndef BEL_MH_H
#define BEL_MH_H

#include "bel_env.h"
#include "bel_hash.h"
#include "bel_pins.h"
#include "bel_stats.h"
#include "bel_mh_format.h"
#include <linux/beluga.h>

/* --- flush and invalidate sites ----------------------------------------- */

/*
 * Every flush and every invalidate of shared metadata has a site number,
 * so that a test build can disable exactly one and show that some test
 * notices (tests/unit/mh, "make mutate"). bel_mh_sites[] names them.
 */
enum bel_mh_site {
	BEL_MH_SITE_NONE = 0,
	BEL_MH_F_INTENT_SET,
	BEL_MH_F_INTENT_CLEAR,
	BEL_MH_F_FMT_ZERO,
	BEL_MH_F_SUPER,
	BEL_MH_F_REC_HB,
	BEL_MH_F_REC_CLAIM,
	BEL_MH_F_REC_LEAVE,
	BEL_MH_F_REC_DEVICE,
	BEL_MH_F_PIN,
	BEL_MH_F_UNPIN,
	BEL_MH_F_ENT_TENTATIVE,
	BEL_MH_F_ENT_LINK,
	BEL_MH_F_ENT_COMMIT,
	BEL_MH_F_ENT_WITHDRAW,
	BEL_MH_F_ENT_EVICTING,
	BEL_MH_F_ENT_ROLLBACK,
	BEL_MH_F_ENT_UNLINK,
	BEL_MH_F_ENT_REBUILD,
	BEL_MH_F_ENT_RETIRE,
	BEL_MH_F_PAYLOAD,
	BEL_MH_I_SUPER,
	BEL_MH_I_INTENT,
	BEL_MH_I_REC_OBSERVE,
	BEL_MH_I_REC_CLAIM,
	BEL_MH_I_PROBE,
	BEL_MH_I_PUB_PRE,
	BEL_MH_I_PUB_CHECK,
	BEL_MH_I_PIN_CHECK,
	BEL_MH_I_EVICT_PINS,
	BEL_MH_I_REBUILD,
	BEL_MH_I_RETIRED_SCAN,
	BEL_MH_I_RETIRE_CHECK,
	BEL_MH_I_PAYLOAD,
	BEL_MH_NR_SITES
};

struct bel_mh_site_info {
	const char *name;	/* "F_PIN": F flushes, I invalidates */
	const char *desc;
};

extern const struct bel_mh_site_info bel_mh_sites[BEL_MH_NR_SITES];

/* --- the environment: memory accessors, clock --------------------------- */

/*
 * How one host reaches the shared region. Offsets are bytes from the start
 * of the region. The kernel implements read/write as plain copies through
 * its mapping, flush as CLWB of every line (arch_wb_cache_pmem), inval as
 * CLFLUSHOPT of every line (clflush_cache_range), fence as mb(). The
 * simulator implements them over a private cache model per host.
 *
 * relax() is called in wait loops (with the host mutex held); it may sleep.
 * resched() is a preemption point in long walks (cond_resched(), which
 * lets the heartbeat work run on this CPU); it may sleep.
 * now_ns() is this host's monotonic clock. killed() (may be NULL) says
 * that the caller got a fatal signal: the waits of attach then end with
 * -EINTR.
 */
struct bel_mh_mem_ops {
	void (*read)(void *priv, u64 off, void *dst, u32 len);
	void (*write)(void *priv, u64 off, const void *src, u32 len);
	void (*flush)(void *priv, int site, u64 off, u64 len);
	void (*inval)(void *priv, int site, u64 off, u64 len);
	void (*fence)(void *priv);
	u64 (*now_ns)(void *priv);
	void (*relax)(void *priv);
	void (*resched)(void *priv);
	bool (*killed)(void *priv);
};

/* Accesses made through the accessor layer, in lines (or calls). */
struct bel_mh_counters {
	u64 reads;		/* lines read */
	u64 writes;		/* lines written */
	u64 flushes;		/* lines flushed */
	u64 invals;		/* lines invalidated */
	u64 fences;
};

/* --- the host ------------------------------------------------------------ */

struct bel_mh_config {
	u32 host_id;		/* 0 .. max_hosts - 1, unique in the rack */
	u64 block_size;		/* join: 0 accepts the pool's; format: 0 = 2 MiB */
	bool format;		/* reformat even a valid pool (explicit) */
	bool join_only;		/* never format: a rejoin after a fence */
	/*
	 * A rejoin: the pool must still be the one this host left (same
	 * uuid, same number of blocks; block_size above is checked too),
	 * else -EINVAL before anything is written.
	 */
	bool expect_identity;
	u8 expect_uuid[16];
	u32 expect_nr_blocks;
	/*
	 * Offset of block 0 in the pool's mapping (/dev/beluga): the block
	 * commands name blocks by offset, as the uapi and the single-host
	 * core do, and block b is at map_base + b * block_size. Set with
	 * bel_mh_set_map_base() once the mapping has a place for the pool.
	 */
	u64 map_base;
	/* Used only when this host formats: */
	u32 max_hosts;		/* 0 = BEL_MH_DEF_HOSTS */
	u64 data_align;		/* 0 = BEL_MH_DEF_DATA_ALIGN */
	u32 heartbeat_ms;	/* 0 = default */
	u32 lease_ms;		/* 0 = default */
	u64 nonce;		/* random, nonzero: uuid and format intent */
	/*
	 * The shortest heartbeat this host can keep (0: 1 ms): a pool with a
	 * shorter one is refused at join, and so is formatting with one.
	 */
	u32 min_heartbeat_ms;
	char name[24];		/* shown by status */
	/*
	 * Devices of this host may hold pins on the pool from the join on
	 * (an operator's outside fence, mh_allow_gup), and stop within this
	 * many ms of a fence: the record carries the device lease from the
	 * start (bel_mh_device_lease() sets one later). 0: none.
	 */
	u32 device_fence_ms;
};

/* Decoded, checked superblock. */
struct bel_mh_geo {
	u64 region_size;
	u64 block_size;
	u64 data_off;
	u64 data_align;
	u32 nr_blocks;
	u32 max_hosts;
	u32 buckets;
	u64 host_off;
	u64 pin_off;
	u64 pin_stride;
	u64 index_off;
	u64 bucket_off;
	u64 bucket_stride;
	u64 heartbeat_ns;
	u64 lease_ns;
	u8 uuid[16];
};

/* Another host as this host sees it. */
struct bel_mh_view {
	u32 state;		/* enum bel_mh_host_state, as last read */
	u32 inc;
	u32 owned;
	u64 hb;
	u64 changed_at;		/* our clock when (inc, hb) last changed */
	bool dead;		/* lease expired for incarnation @inc */
	u32 flags;		/* its record's BEL_MH_REC_*, as last read */
	/* Its retire requests, as last read (BEL_MH_NONE: empty slot). */
	u32 retire[BEL_MH_RETIRE_SLOTS];
};

/* DRAM state of one partition; meaningful while @owned. */
struct bel_mh_part {
	bool owned;
	bool releasing;		/* no longer ours to keep: drain, release */
	u32 first;		/* blocks [first, first + nr) */
	u32 nr;
	u32 free_head;		/* free list through blk_next */
	u32 nr_free;
	u32 lru_head;		/* PUBLISHED blocks, oldest first */
	u32 lru_tail;
	u32 nr_lru;		/* blocks on the LRU (evictable here) */
	u32 nr_allocated;
	u32 nr_published;
	u32 nr_retired;		/* RETIRED blocks (memory errors) */
	u64 next_seq;
	u32 backoff;		/* ticks to wait before claiming again */
};

enum bel_mh_blk_state {
	BEL_MH_BLK_FREE = 0,	/* or not in an owned partition */
	BEL_MH_BLK_ALLOCATED,
	BEL_MH_BLK_PUBLISHED,
	BEL_MH_BLK_RETIRED,	/* its entry is RETIRED: out of service */
};

/* Blocks with a memory error a host remembers until their owner retired them. */
#define BEL_MH_RETIRE_QUEUE	64U

/*
 * This host's view of the pool (bel_mh_stats()): what it knows without
 * reading other hosts' partitions. free + allocated + published + retired
 * is the number of blocks in the partitions it owns, not the pool's total.
 */
struct bel_mh_stats {
	u64 total_blocks;	/* of the whole pool */
	u64 owned_blocks;	/* in partitions this host owns */
	u64 free_blocks;	/* free in owned partitions */
	u64 allocated_blocks;	/* allocated by this host's clients */
	u64 published_blocks;	/* published in owned partitions */
	u64 pinned_blocks;	/* blocks this host pins, any partition */
	u64 pins;		/* pins of this host's clients */
	u64 retired_blocks;	/* RETIRED in owned partitions */
	u64 retire_pending;	/* memory errors found here, not retired yet */
	u32 owned;		/* bitmask of owned partitions */
	struct bel_counters ops;	/* this host's, since it attached */
};

struct bel_mh_client;

struct bel_mh_host {
	const struct bel_mh_mem_ops *ops;
	void *priv;
	struct bel_mh_config cfg;
	struct bel_mh_geo geo;
	u32 id;

	/* Serialises every operation and the maintenance tick; may sleep. */
	bel_mutex_t lock;
	/* Protects rec and last_hb: the heartbeat takes only this. */
	bel_spinlock_t rec_lock;
	struct bel_mh_host_rec rec;	/* image of the own record */
	u64 last_hb;			/* our clock at the last heartbeat */
	u64 fence_ns;			/* lease / 2 */
	bool joined;
	bool leased;			/* writes are subject to the lease */
	bool fenced;			/* stopped writing; must rejoin */
	bool formatted;			/* this attach formatted the pool */

	/* Format intents of the other ids as last seen (attach only). */
	struct {
		u64 nonce;
		u64 progress;
		u64 since;
	} intent_seen[BEL_MH_MAX_HOSTS];
	u64 intent_progress;

	struct bel_mh_view view[BEL_MH_MAX_HOSTS];
	struct bel_mh_part part[BEL_MH_MAX_HOSTS];
	u32 rotor;			/* next partition to allocate from */
	u64 lru_clock;

	/* Per block of the pool (geo.nr_blocks entries). */
	u32 *blk_next;			/* free list / LRU links */
	u32 *blk_prev;
	u64 *blk_stamp;			/* PUBLISHED: LRU stamp */
	u32 *blk_pins;			/* this host's pins on the block */
	u8 *blk_state;			/* enum bel_mh_blk_state */
	/* ALLOCATED with a memory error: RETIRED when its owner lets go. */
	u8 *blk_bad;
	struct bel_mh_client **blk_owner;	/* ALLOCATED: owner */

	/*
	 * Blocks in which this host found a memory error, until their
	 * entries read RETIRED; the first BEL_MH_RETIRE_SLOTS are the
	 * requests in the own record (rec.retire).
	 */
	u32 retire_q[BEL_MH_RETIRE_QUEUE];
	u32 nr_retire_q;

	u32 nr_allocated;		/* ALLOCATED blocks of all clients */
	u64 nr_pins;			/* pins of all clients */
	u32 nr_pinned;			/* blocks with blk_pins != 0 */
	struct bel_counters opstats;	/* operations since attach */
	struct bel_mh_counters cnt;
	const char *why;		/* reason of the last refusal */
};

/*
 * One open file: its allocations and pins (released on close). The pins
 * are (block, count) pairs, so their memory grows with the distinct
 * blocks pinned, never with the number of pins.
 */
struct bel_mh_client {
	struct bel_mh_host *host;
	u32 nr_allocated;
	u64 nr_pins;			/* pins held, with multiplicity */
	struct bel_pin_table pins;	/* block -> pins held */
};

/* Long walks under the host mutex reschedule every this many steps. */
#define BEL_MH_RESCHED_EVERY	256U

#define BEL_MH_NONE	0xffffffffU

/*
 * Self-fence: once the own heartbeat is older than lease/2, this host stores
 * nothing new in the pool, because the other hosts may act on its lease
 * expiry from lease on. Checked once per store (bel_mh_put()), before it.
 */
static inline bool bel_mh_fenced_now(struct bel_mh_host *h)
{
	u64 last_hb;

	if (!h->leased)
		return false;
	if (BEL_READ(h->fenced))
		return true;
	/*
	 * The heartbeat first, the clock after: the heartbeat runs beside
	 * this (it takes only rec_lock), and a heartbeat stored between a
	 * clock read and a later read of last_hb would make the difference
	 * negative, a huge u64: a fence of a host that just heartbeat.
	 */
	last_hb = BEL_READ(h->last_hb);
	if (h->ops->now_ns(h->priv) - last_hb > h->fence_ns) {
		BEL_WRITE(h->fenced, true);
		return true;
	}
	return false;
}

/* Byte offset of block @block in the region. */
static inline u64 bel_mh_block_off(const struct bel_mh_geo *g, u32 block)
{
	return g->data_off + (u64)block * g->block_size;
}

/* --- mh_format.c --------------------------------------------------------- */

/*
 * Attach host cfg->host_id to the region: format it when it carries no
 * valid superblock (or cfg->format), else check the superblock and join.
 * May sleep (waits up to a lease for a previous incarnation or, with
 * cfg->format, for the other hosts to be gone). On failure h->why says why:
 *   -EUCLEAN          superblock checksum mismatch (corrupt pool)
 *   -EPROTONOSUPPORT  unknown on-media major version
 *   -EINVAL           geometry mismatch (region size, block size, layout),
 *                     timings out of range (min_heartbeat_ms, 4 heartbeats
 *                     to a lease, BEL_MH_MAX_LEASE_MS), or not the
 *                     expected pool (cfg->expect_identity)
 *   -ERANGE           host id >= the pool's max_hosts
 *   -EADDRINUSE       another live host uses this host id
 *   -EBUSY            cfg->format while other hosts are alive
 *   -ENOENT           cfg->join_only and no valid superblock
 *   -EINTR            ops->killed() while waiting
 *   -ENOMEM
 * After success, call bel_mh_tick() periodically (every heartbeat period)
 * and bel_mh_heartbeat() at least as often.
 */
int bel_mh_attach(struct bel_mh_host *h, const struct bel_mh_mem_ops *ops,
		  void *priv, u64 region_size,
		  const struct bel_mh_config *cfg);

/*
 * Clean leave: -EBUSY while a client holds allocations or pins. Releases
 * every partition, writes LEFT. The host may then be destroyed.
 */
int bel_mh_leave(struct bel_mh_host *h);

/* Free DRAM state; writes nothing to the pool (after leave, fence, crash). */
void bel_mh_destroy(struct bel_mh_host *h);

/*
 * Free only the block tables, touching no lock: part of bel_mh_destroy(),
 * and the simulator's crash of a host whose locks may still be held.
 */
void bel_mh_free_dram(struct bel_mh_host *h);

/* --- mh_host.c ----------------------------------------------------------- */

/*
 * Advance the heartbeat (write + flush the own record), or self-fence when
 * the previous heartbeat is older than lease/2. Takes only rec_lock: it
 * must run even while an operation holds the host mutex.
 */
void bel_mh_heartbeat(struct bel_mh_host *h);

/*
 * Maintenance, every heartbeat period: observe the other hosts, release
 * partitions that are no longer ours, claim and rebuild those that are
 * designated to us, then heartbeat.
 */
void bel_mh_tick(struct bel_mh_host *h);

/* Status of every host id, as this host sees it now. */
struct bel_mh_host_info {
	u32 state;
	u32 device_fence_ms;	/* W of its device lease; 0: none */
	bool device_pins;	/* its devices may hold pins */
	bool lease_aware;	/* it honours device leases (1.3) */
	u32 incarnation;
	u64 heartbeat;
	u32 owned;
	bool alive;
	bool self;
	u64 silent_ns;		/* since its heartbeat last moved */
	char name[24];		/* printable, no spaces, NUL padded */
};

int bel_mh_hosts(struct bel_mh_host *h, struct bel_mh_host_info *out,
		 u32 max);
/* Host @id's status as the uapi's record (BELUGA_IOC_HOSTS). */
void bel_mh_host_info_to_uapi(const struct bel_mh_host_info *x, u32 id,
			      struct beluga_host *out);

/*
 * The device lease (Documentation/multihost.md, section 10): with @pins,
 * this host's devices may hold pins on the pool, and stop within
 * @fence_ms of a fence; the own record says so, on the media, before this
 * returns 0 (the caller lets devices pin only after it). Other hosts then
 * wait bel_mh_dead_after_ns() of silence before they reuse what this host
 * holds. Without @pins the lease ends: call it only once no device holds
 * a pin any more. Errors: -ESTALE fenced or not joined; -EPROTO (with
 * @pins) a live host of the pool does not honour device leases (a module
 * older than format 1.3: h->why names it); -ERANGE @fence_ms above
 * BEL_MH_REC_FENCE_MAX_MS or 0 with @pins.
 */
int bel_mh_device_lease(struct bel_mh_host *h, bool pins, u32 fence_ms);

/*
 * True while the own record carries a device lease and some live host of
 * the pool does not honour it (it joined later): the devices must let go
 * now (as at a fence), since that host reuses after one lease.
 */
bool bel_mh_device_lease_unsafe(struct bel_mh_host *h);

/*
 * How long a host whose record carries @flags must be silent before the
 * others hold it dead: the lease, plus its devices' W and half a lease of
 * slack with a device lease.
 */
u64 bel_mh_dead_after_ns(const struct bel_mh_host *h, u32 flags);

/* --- mh_ops.c ------------------------------------------------------------ */

void bel_mh_client_init(struct bel_mh_host *h, struct bel_mh_client *c);
/* Frees the client's allocations and drops its pins (close). */
void bel_mh_client_release(struct bel_mh_client *c);
/* Frees a client's DRAM state only: its host is gone (rejoin, crash). */
void bel_mh_client_forget(struct bel_mh_client *c);

/*
 * The block operations, with the single-host core's signatures: blocks are
 * named by their offset in the pool's mapping (cfg.map_base), which each
 * call turns into a block number of the pool (block_at below); an offset
 * that names no block fails like one the single-host core rejects. Besides
 * the errors of the single-host core: -ESTALE when the host is fenced (it
 * must rejoin), -ENODEV before attach. bel_mh_alloc() names what it
 * evicted as bel_alloc_evicting() does (@evicted and @nr_evicted both
 * NULL, or both set): victims of this host's partitions, oldest first.
 */
int bel_mh_alloc(struct bel_mh_client *c, u32 count, u64 *offsets,
		 struct beluga_evicted_key *evicted, u32 *nr_evicted);
int bel_mh_free(struct bel_mh_client *c, u32 count, const u64 *offsets);
/* Block @b of the pool, if it has offset @off: 0, else -EINVAL. */
int bel_mh_block_at(const struct bel_mh_host *h, u64 off, u32 *b);
u64 bel_mh_offset_of(const struct bel_mh_host *h, u32 b);
/* Where the pool's blocks start in the mapping (before any block command). */
void bel_mh_set_map_base(struct bel_mh_host *h, u64 map_base);
/* Has @c the block at @off ALLOCATED (a PUBLISH of it may succeed)? */
bool bel_mh_client_owns(struct bel_mh_client *c, u64 off);
/*
 * The uapi's item array, like bel_publish(). Per item, in @result:
 * BELUGA_PUBLISH_OK, BELUGA_PUBLISH_EXISTS (the block is freed), -EINVAL /
 * -EPERM (block unchanged), -EAGAIN (a racing publish of another host did
 * not resolve within two leases; block unchanged). Counts go to the three
 * out parameters (each may be NULL) when the call returns 0.
 */
int bel_mh_publish(struct bel_mh_client *c, u64 ns, u32 count,
		   struct beluga_publish_item *items, u32 *published,
		   u32 *exists, u32 *failed);
/*
 * With @pin, @offsets is required, and -EOVERFLOW (nothing pinned) when a
 * block's pin count on this host would pass BEL_MAX_PINS.
 */
int bel_mh_lookup(struct bel_mh_client *c, u64 ns, u32 count,
		  const struct beluga_key *keys, bool pin, u64 *offsets,
		  u32 *hits);
int bel_mh_release(struct bel_mh_client *c, u32 count, const u64 *offsets);

/*
 * A memory error hit block @block (a block number of the pool): take it out
 * of service on every host. In a partition this host owns, at once: a free
 * block leaves the free list, a published one is unlinked from the index
 * (LOOKUP no longer finds it on any host), and the entry is written
 * RETIRED; a block a client of this host has ALLOCATED becomes RETIRED
 * when the client lets go (FREE, close, or PUBLISH, whose item answers
 * -EIO). In another host's partition, the request goes into this host's
 * record, and that partition's owner (or whoever takes it over) retires
 * the block at its next tick; meanwhile this host's LOOKUP no longer
 * returns it. Pins of any host on a retired block stay until they are
 * released: nothing hands the block out again, so what a pinner maps
 * cannot change under it. A RETIRED entry survives takeovers, rejoins and
 * the last host's leave; FORMAT clears it (Documentation/multihost.md,
 * section 5). Returns BEL_MH_RETIRED_NOW or BEL_MH_RETIRE_ASKED for news,
 * 0 when the block was retired or asked for already, -EINVAL (no such
 * block), -ENOSPC (BEL_MH_RETIRE_QUEUE requests wait already: try again
 * at the next fault), -ENODEV, -ESTALE. May sleep.
 */
#define BEL_MH_RETIRED_NOW	1
#define BEL_MH_RETIRE_ASKED	2
int bel_mh_retire(struct bel_mh_host *h, u32 block);

/* This host's view of the pool, one snapshot under the host mutex. */
void bel_mh_stats(struct bel_mh_host *h, struct bel_mh_stats *out);
/*
 * STATS of a shared pool: @s's occupancy becomes this host's view @ms
 * (its owned partitions' free, published and retired blocks, its
 * allocations and pins); @ms's counters are added to @s's.
 */
void bel_mh_stats_to_pool(const struct bel_mh_stats *ms, struct bel_stats *s);

/*
 * Payload helpers for CPU access through the accessor layer: write +
 * flush, and invalidate + read. The kernel leaves payloads to userspace
 * (Documentation/multihost.md, section 10); the simulator uses these.
 */
void bel_mh_payload_write(struct bel_mh_host *h, u32 block, u64 off,
			  const void *src, u32 len);
void bel_mh_payload_read(struct bel_mh_host *h, u32 block, u64 off,
			 void *dst, u32 len);

#endif /* BEL_MH_H */
