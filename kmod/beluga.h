/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Beluga kernel glue: what the thin layer around the portable core shares.
 *
 *   main.c    module load/unload, parameters, the misc device
 *   region.c  claiming memory: device-dax ranges and NUMA-node pages
 *   client.c  per-open-file state
 *   ioctl.c   ioctl dispatch and the commands
 *   mmap.c    mapping the pool, page faults
 *   poison.c  memory errors: finding the mappers, retiring blocks
 *   sysfs.c   pool and region attributes
 *   mh.c      multi-host: accessors to shared CXL memory, heartbeat, tick
 *   core/     allocator, index, LRU, client bookkeeping (also userspace)
 */
#ifndef BELUGA_GLUE_H
#define BELUGA_GLUE_H

#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/kobject.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/rwsem.h>
#include <linux/types.h>
#include <linux/workqueue.h>

#include "core/bel_core.h"
#include "core/bel_mh.h"
#include "compat.h"

struct dev_pagemap;

struct beluga_device;

/* One claimed memory region. */
struct beluga_region {
	struct kobject kobj;		/* /sys/class/misc/<pool>/regionN */
	struct beluga_device *dev;	/* the pool it belongs to */
	u32 slot;
	enum beluga_backend backend;
	int node;
	char name[BELUGA_NAME_LEN];
	phys_addr_t phys_start;		/* DAX */
	u64 length;
	u64 first_offset;		/* in the mapping, from the core */
	u32 nr_blocks;
	/* A shared (multi-host) pool's region; fixed while attached. */
	bool shared;
	/* Shared: bytes of metadata before the first block; else 0. */
	u64 data_off;
	/* DAX: device_dax's page map, referenced while attached. */
	struct dev_pagemap *pgmap;
	/* On beluga_preparing from ATTACH's claim to its commit (region.c). */
	struct list_head preparing;
	/*
	 * Reserved in the pool by an ATTACH that has not answered and
	 * committed yet; a shared one holds its joined pool in @mh until
	 * the commit makes it the device's. beluga_claim_mutex.
	 */
	bool reserved;
	struct beluga_mh *mh;
	/* Bytes cleared or allocated so far while preparing (sysfs). */
	atomic64_t prepared;
	/* NODE: one order-0 page per PAGE_SIZE of the region. */
	struct page **pages;
	unsigned long nr_pages;
	/* Live VMAs whose mapping covers this region. */
	atomic_t mappings;
};

/*
 * One pool: a device node (/dev/beluga, /dev/beluga1, ...) with its own
 * regions, index and permissions. Separate pools are how tenants are kept
 * apart; namespaces inside one pool separate keys, not memory.
 */
struct beluga_device {
	struct miscdevice misc;
	char name[16];
	struct bel_pool pool;
	/*
	 * Serialises ATTACH, DETACH and mmap() against each other, and
	 * protects regions[] (the pointers; a region's contents are fixed
	 * once attached, but 'mappings'). Readers: mmap(), REGION_INFO.
	 * Writers: ATTACH, DETACH, module unload. Taken after mmap_lock
	 * when called from mmap(), after beluga_claim_mutex otherwise.
	 */
	struct rw_semaphore regions_rwsem;
	struct beluga_region *regions[BELUGA_MAX_REGIONS];
	/* Page faults served, by entry size; sysfs shows them. */
	atomic64_t pte_faults;
	atomic64_t pmd_faults;
	/*
	 * Shared (multi-host) pool: @mh is set while one is attached; the
	 * pool then has that one region only, and the block commands go to
	 * the multi-host protocol. Readers: the block commands (whole
	 * command), STATS, REGION_INFO, close(), sysfs (a region's
	 * attributes only try it: DETACH waits for them). The block
	 * commands hold it around the operation only, never while they
	 * copy from or to user memory (ioctl.c). Writers: a shared
	 * ATTACH, the DETACH of a shared region, unload; @mh also changes
	 * only under beluga_claim_mutex. Taken after beluga_claim_mutex and
	 * before regions_rwsem.
	 */
	struct rw_semaphore mh_rwsem;
	struct beluga_mh *mh;
	/*
	 * The shared pool's host is fenced or rejoining (WRITE_ONCE by its
	 * tick, cleared at attach and stop): block commands fail with
	 * -ESTALE before they take mh_rwsem, so that callers retrying
	 * cannot starve the rejoin's down_write_trylock().
	 */
	bool mh_down;
	u32 mh_gen;			/* +1 at every shared attach */
	/* Counters of shared-pool hosts gone since load (mh_rwsem). */
	struct bel_mh_opstats mh_past;
	/*
	 * Every file of the pool maps through this inode's address_space
	 * (main.c), so that a fence can zap all mappings at once.
	 */
	struct inode *inode;
	/*
	 * Protects @fence_epoch: +1 (under the write lock) each time the
	 * shared pool's host fences itself; a shared region's page faults
	 * check it under the read lock, so that none inserts a page after
	 * the fence's unmap_mapping_range(). Files opened before the last
	 * fence are stale (beluga_file.fence_epoch).
	 */
	struct rw_semaphore fence_rwsem;
	u32 fence_epoch;
};

/* The pools, from the pools= module parameter; pool 0 is /dev/beluga. */
extern struct beluga_device *beluga_pools;
extern int beluga_nr_pools;
/*
 * Serialises ATTACH and DETACH across all pools, so that a device-dax range
 * is never claimed by two pools. Taken before a pool's regions_rwsem.
 */
extern struct mutex beluga_claim_mutex;

/* Per open file. */
struct beluga_file {
	struct beluga_device *dev;
	struct bel_client *client;
	/* Shared pool: this file's client, valid while mh_gen matches. */
	struct mutex mh_lock;
	struct bel_mh_client mh_client;
	u32 mh_gen;
	/*
	 * The pool's fence_epoch at open(). Older than the pool's: a fence
	 * of the shared pool's host dropped this file's allocations and
	 * pins; its block commands fail with -ESTALE and its mappings raise
	 * SIGBUS until it is closed.
	 */
	u32 fence_epoch;
};

static inline struct beluga_device *beluga_file_dev(struct file *file)
{
	return ((struct beluga_file *)file->private_data)->dev;
}

/* region.c */
/*
 * ATTACH: prepare builds the region and fills @arg's out fields, but
 * nothing can see or use the region until commit (which cannot fail);
 * abort, instead, tears it down. beluga_region_attach() does both steps.
 */
int beluga_attach_prepare(struct beluga_device *dev, struct beluga_attach *arg,
			  struct beluga_region **prepared);
void beluga_attach_commit(struct beluga_region *region);
void beluga_attach_abort(struct beluga_region *region);
int beluga_region_attach(struct beluga_device *dev, struct beluga_attach *arg);
int beluga_region_detach(struct beluga_device *dev, u32 slot, bool evict,
			 u64 *evicted);
void beluga_region_detach_all(struct beluga_device *dev);
ssize_t beluga_region_attaching_show(struct beluga_device *dev, char *buf);
int beluga_region_pages_busy(struct beluga_region *region);

/* main.c: false until module init has succeeded */
bool beluga_accepting_opens(void);

/* client.c */
int beluga_open(struct inode *inode, struct file *file);
int beluga_release(struct inode *inode, struct file *file);

/*
 * A file's block commands, on the pool's single-host core (client.c) or on
 * a shared multi-host pool (mh.c, called with the device's mh_rwsem held
 * for reading). Offsets in and out; the ioctl layer validates and copies.
 * A failed call changes nothing; publish answers per item in @results.
 */
struct beluga_block_ops {
	int (*alloc)(struct beluga_file *bf, u32 count, u64 *offsets);
	int (*free)(struct beluga_file *bf, u32 count, const u64 *offsets);
	int (*release)(struct beluga_file *bf, u32 count, const u64 *offsets);
	int (*publish)(struct beluga_file *bf, u64 ns, u32 count,
		       const u64 *offsets, const struct beluga_key *keys,
		       s32 *results);
	int (*lookup)(struct beluga_file *bf, u64 ns, u32 count,
		      const struct beluga_key *keys, bool pin, u64 *offsets,
		      u32 *hits);
};

extern const struct beluga_block_ops beluga_local_block_ops;
extern const struct beluga_block_ops beluga_mh_block_ops;

/* ioctl.c */
long beluga_ioctl(struct file *file, unsigned int cmd, unsigned long arg);

/* mmap.c */
int beluga_mmap(struct file *file, struct vm_area_struct *vma);
unsigned long beluga_get_unmapped_area(struct file *file, unsigned long addr,
				       unsigned long len, unsigned long pgoff,
				       unsigned long flags);

/* mh.c: one host's membership in a pool shared by several hosts. */
struct beluga_mh {
	struct bel_mh_host host;
	void *base;			/* the shared region, mapped WB */
	u64 size;
	struct delayed_work hb_work;	/* heartbeat: rec_lock only */
	struct delayed_work tick_work;	/* maintenance: the host mutex */
	struct beluga_device *dev;
	struct bel_mh_config cfg;	/* of the attach: a rejoin reuses it */
	unsigned long period;		/* heartbeat period, jiffies */
	bool running;
	/* The tick saw the host fenced: zapped, rejoining (tick only). */
	bool fenced;
	/* A rejoin failed: the pool stays down until DETACH (tick only). */
	bool rejoin_failed;
	/* Joined: @host is valid (written under the pool's mh_rwsem). */
	bool joined;
	/* Where the blocks are in the pool's offset space. */
	u64 first_offset;
	u64 block_size;
	u32 nr_blocks;
};

extern int beluga_host_id;
extern unsigned int beluga_mh_heartbeat_ms;
extern unsigned int beluga_mh_lease_ms;
extern const struct bel_mh_mem_ops beluga_mh_mem_ops;
int beluga_mh_map(struct beluga_mh *mh, phys_addr_t start, u64 size);
void beluga_mh_unmap(struct beluga_mh *mh);
int beluga_mh_start(struct beluga_mh *mh, const struct bel_mh_config *cfg,
		    const char **why);
bool beluga_mh_file_stale(struct beluga_file *bf);
/* Mappings of @dev's pool refuse get_user_pages() (a shared pool). */
bool beluga_mh_refuse_gup(struct beluga_device *dev);
/* Block commands of the shared pool fail now (fenced, rejoining). */
static inline bool beluga_mh_down(struct beluga_device *dev)
{
	return READ_ONCE(dev->mh_down);
}

int beluga_mh_stop(struct beluga_mh *mh, bool force);
bool beluga_mh_block(const struct beluga_mh *mh, u64 offset, u32 *block);
u64 beluga_mh_offset(const struct beluga_mh *mh, u32 block);
void beluga_mh_flush_block(struct beluga_mh *mh, u32 block);
struct bel_mh_client *beluga_mh_client(struct beluga_file *bf);
void beluga_mh_client_close(struct beluga_file *bf);
ssize_t beluga_mh_hosts_show(struct beluga_device *dev, char *buf);
void beluga_stats(struct beluga_device *dev, struct bel_stats *s);
void beluga_mh_region_stats(struct beluga_device *dev,
			    struct bel_region_stats *rs);

/* The pool's block commands: shared while a shared region is attached. */
static inline const struct beluga_block_ops *
beluga_block_ops(const struct beluga_device *dev)
{
	return dev->mh ? &beluga_mh_block_ops : &beluga_local_block_ops;
}

/* poison.c */
/* After the region joined the pool; before any fault can reach it. */
void beluga_poison_attach(struct beluga_region *region);
void beluga_poison_detach(struct beluga_region *region);
/* Fault on @page at @region_offset: poisoned? Then its block is retired. */
bool beluga_poison_fault(struct beluga_region *region, u64 region_offset,
			 struct page *page);
bool beluga_poison_in_range(unsigned long pfn, unsigned long nr);

/* sysfs.c */
extern const struct attribute_group *beluga_dev_groups[];
/* A region's memory is owned by its kobject: free with beluga_region_put. */
struct beluga_region *beluga_region_alloc(void);
void beluga_region_get(struct beluga_region *region);
void beluga_region_put(struct beluga_region *region);
int beluga_region_sysfs_add(struct beluga_region *region);
void beluga_region_sysfs_del(struct beluga_region *region);

#endif /* BELUGA_GLUE_H */
