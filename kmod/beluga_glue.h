/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Beluga kernel glue: what the thin layer around the portable core shares.
 *
 *   main.c    module load/unload, parameters, the misc device
 *   region.c  claiming memory: device-dax ranges and NUMA-node pages
 *   client.c  per-open-file state
 *   ioctl.c   ioctl and io_uring dispatch, and the commands
 *   mmap.c    mapping the pool, page faults
 *   poison.c  memory errors: finding the mappers, retiring blocks
 *   sysfs.c   pool and region attributes, region uevents
 *   debugfs.c the host table for humans, the test-only fault attribute
 *   trace.c   tracepoints of the block lifecycle (beluga_trace.h)
 *   pool_ops.c  the pool ops table: how the glue reaches a pool's kind;
 *             the single-host pool's table (the portable core)
 *   mh.c      the shared (multi-host) pool's table: attach and leave,
 *             accessors to shared CXL memory, heartbeat, tick, fence;
 *             built only with BELUGA_SHARED=y (Kbuild)
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
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/workqueue.h>

#include "core/bel_core.h"
#include "compat.h"

struct dev_pagemap;
struct io_uring_cmd;
struct vm_area_struct;

struct beluga_device;
struct beluga_file;
struct beluga_pool_ops;
struct beluga_mh_pool;
struct beluga_mh_file;

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
	/*
	 * The ops of the pool kind it was attached as (the pool's @ops
	 * while it is attached); fixed from ATTACH on, so that its faults
	 * and sysfs attributes need no pool lock to find them.
	 */
	const struct beluga_pool_ops *ops;
	/* Bytes before the first block (a shared pool's metadata); else 0. */
	u64 data_off;
	/* DAX: device_dax's page map, referenced while attached. */
	struct dev_pagemap *pgmap;
	/*
	 * DAX: Beluga's entry in /proc/iomem ("<pool>:<name>"), in the tree
	 * from the claim until the unclaim; @iomem_name is its name.
	 */
	struct resource iomem;
	char iomem_name[16 + 1 + BELUGA_NAME_LEN];
	/*
	 * DAX: the device-dax instance the range belongs to, referenced
	 * from the claim until the unclaim, target of the region's "dax"
	 * link in sysfs; NULL when it could not be found.
	 */
	struct device *dax_dev;
	/* On beluga_preparing from ATTACH's claim to its commit (region.c). */
	struct list_head preparing;
	/*
	 * Reserved in the pool by an ATTACH that has not answered and
	 * committed yet; a shared one holds its joined pool in @mh until
	 * its attach_commit makes it the device's (mh.c). Both under
	 * beluga_claim_mutex.
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
	 * The pool's kind (pool_ops.c): the single-host core, or a shared
	 * (multi-host) pool while one is attached, which is then the pool's
	 * one region. Written with beluga_claim_mutex held and ops_rwsem and
	 * regions_rwsem both held for writing; read under any of them.
	 */
	const struct beluga_pool_ops *ops;
	/*
	 * Keeps @ops, and the state behind it, from changing. Readers: the
	 * block commands (around the operation only, never while they copy
	 * from or to user memory: ioctl.c), STATS, EVICT, REGION_INFO, sysfs
	 * (a region's attributes only try it: DETACH waits for them).
	 * Writers: ATTACH of a shared pool, DETACH, unload, a shared pool's
	 * rejoin. Taken after beluga_claim_mutex and before regions_rwsem.
	 */
	struct rw_semaphore ops_rwsem;
	/*
	 * Block commands fail with -ESTALE now, before they take ops_rwsem
	 * (WRITE_ONCE; a fenced shared pool rejoining, mh.c), so that callers
	 * retrying cannot starve the rejoin's down_write_trylock().
	 */
	bool down;
	/* Shared-pool state of this pool, load to unload (mh.c); or NULL. */
	struct beluga_mh_pool *mh;
	/*
	 * Every file of the pool maps through this inode's address_space
	 * (main.c), so that a fence can zap all mappings at once.
	 */
	struct inode *inode;
	/*
	 * Protects @index, the pool's newest copy of its index for
	 * userspace (index_map.c; live or sealed), or NULL. Taken after
	 * mmap_lock (mmap()) and before ops_rwsem and the pool's lock.
	 */
	struct mutex index_mutex;
	struct beluga_index_mem *index;
	/*
	 * Device leases (devlease.c). @devlease_lock protects @watchdog (the
	 * watchdog daemon's file, or NULL), @watchdog_ms (its W),
	 * @device_ranges (the files that declared one, by their range_node)
	 * and @nr_device_ranges; taken last, never held across a sleep.
	 * @devlease_mutex serialises declarations with the end of a shared
	 * pool's device lease: taken before ops_rwsem; the shared pool's
	 * tick only tries it (DETACH cancels the tick under ops_rwsem).
	 */
	spinlock_t devlease_lock;
	struct beluga_file *watchdog;
	u32 watchdog_ms;
	struct list_head device_ranges;
	u32 nr_device_ranges;
	struct mutex devlease_mutex;	/* see above */
};

/* The pools, from the pools= module parameter; pool 0 is /dev/beluga. */
extern struct beluga_device *beluga_pools;
extern int beluga_nr_pools;

/* The pool's number: N of /dev/belugaN, 0 for /dev/beluga (tracepoints). */
static inline int beluga_pool_id(const struct beluga_device *dev)
{
	return dev - beluga_pools;
}

/*
 * Serialises ATTACH and DETACH across all pools, so that a device-dax range
 * is never claimed by two pools. Taken before a pool's regions_rwsem.
 */
extern struct mutex beluga_claim_mutex;

/* Per open file. */
struct beluga_file {
	struct beluga_device *dev;
	struct bel_client *client;
	/* Its state in the pool's shared pools (mh.c); or NULL. */
	struct beluga_mh_file *mh;
	/*
	 * Its device range (devlease.c): [range_start, range_end) of the
	 * mapping, fixed once @has_range is set (release; read with
	 * acquire, without a lock); @range_efd is signalled when the devices
	 * must let go (may be NULL). A range under a shared pool's device
	 * lease (@range_counted) is on dev->device_ranges by @range_node.
	 */
	bool has_range;
	bool range_counted;
	u64 range_start;
	u64 range_end;
	struct eventfd_ctx *range_efd;
	struct list_head range_node;
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
/* For the attach ops, with beluga_claim_mutex and regions_rwsem held: */
int beluga_region_claim_locked(struct beluga_device *dev,
			       struct beluga_region *region);
void beluga_region_unclaim(struct beluga_region *region);
int beluga_region_alone_locked(struct beluga_device *dev,
			       const struct beluga_region *region);
int beluga_region_reserve_locked(struct beluga_device *dev,
				 struct beluga_region *region, u64 length,
				 u64 block_size);
void beluga_region_unreserve_locked(struct beluga_device *dev,
				    struct beluga_region *region);
void beluga_region_commit_locked(struct beluga_device *dev,
				 struct beluga_region *region);
int beluga_local_attach(struct beluga_device *dev,
			struct beluga_region *region, struct beluga_attach *arg);
void beluga_local_attach_abort(struct beluga_device *dev,
			       struct beluga_region *region);

/* main.c: false until module init has succeeded */
bool beluga_accepting_opens(void);

/* client.c */
int beluga_open(struct inode *inode, struct file *file);
int beluga_release(struct inode *inode, struct file *file);

/*
 * The pool ops table: what differs between the kinds of pool. The glue
 * calls through the pool's (struct beluga_device.ops) instead of asking
 * which kind it is: the single-host core (beluga_local_pool_ops,
 * pool_ops.c) or a shared multi-host pool (beluga_shared_pool_ops, mh.c).
 * Block commands take offsets in and out; the ioctl layer validates and
 * copies. A failed block command changes nothing; publish answers per
 * item in @results. A NULL hook: nothing to do (mmap, fault_begin,
 * fault_end, detach), or -EOPNOTSUPP (evict).
 */
struct beluga_pool_ops {
	/*
	 * ATTACH in three steps (region.c, beluga_attach_prepare()). attach
	 * claims @region (allocated, named, from @arg) and reserves it in
	 * @dev's pool (a shared pool is joined here): it holds its slot,
	 * offsets and sysfs directory, but nothing can map, allocate, count
	 * or detach it. Takes beluga_claim_mutex and the pool's locks
	 * itself. After the answer, attach_commit makes it the pool's and
	 * cannot fail, or attach_abort (the answer could not be written)
	 * tears it down; both with beluga_claim_mutex, ops_rwsem (when the
	 * kind has a detach step) and regions_rwsem held for writing.
	 */
	int (*attach)(struct beluga_device *dev, struct beluga_region *region,
		      struct beluga_attach *arg);
	void (*attach_commit)(struct beluga_device *dev,
			      struct beluga_region *region);
	void (*attach_abort)(struct beluga_device *dev,
			     struct beluga_region *region);
	/*
	 * DETACH, before @region leaves the core (beluga_claim_mutex,
	 * ops_rwsem and regions_rwsem held for writing): -EBUSY keeps it,
	 * unless @unloading (no file is open).
	 */
	int (*detach)(struct beluga_device *dev, struct beluga_region *region,
		      bool unloading);
	/* STATS and sysfs (ops_rwsem held for reading). */
	void (*stats)(struct beluga_device *dev, struct bel_stats *s);
	/* @region's occupancy (ops_rwsem held for reading). */
	int (*region_stats)(struct beluga_region *region,
			    struct bel_region_stats *rs);
	/* mmap() of the pool (regions_rwsem held): refuse, or add flags. */
	int (*mmap)(struct beluga_file *bf, struct vm_area_struct *vma);
	/*
	 * A fault may insert a page of @region: false raises SIGBUS. Between
	 * a true fault_begin and fault_end the page is inserted.
	 */
	bool (*fault_begin)(struct beluga_file *bf, struct beluga_region *region);
	void (*fault_end)(struct beluga_file *bf, struct beluga_region *region);
	/* A memory error hit @len bytes at @region_offset: retire blocks. */
	void (*retire)(struct beluga_region *region, u64 region_offset,
		       u64 len);
	/*
	 * Block commands (ops_rwsem held for reading). ALLOC names what it
	 * evicted in @evicted (room for @count) and *@nr_evicted when both
	 * are set (BELUGA_ALLOC_EVICTED); NULL, NULL when not asked.
	 */
	int (*alloc)(struct beluga_file *bf, u32 count, u64 *offsets,
		     struct beluga_evicted_key *evicted, u32 *nr_evicted);
	int (*free)(struct beluga_file *bf, u32 count, const u64 *offsets);
	int (*release)(struct beluga_file *bf, u32 count, const u64 *offsets);
	int (*publish)(struct beluga_file *bf, u64 ns, u32 count,
		       struct beluga_publish_item *items, u32 *published,
		       u32 *exists, u32 *failed);
	int (*lookup)(struct beluga_file *bf, u64 ns, u32 count,
		      const struct beluga_key *keys, bool pin, u64 *offsets,
		      u32 *hits);
	int (*evict)(struct beluga_device *dev, struct beluga_evict *arg);
	/*
	 * The block commands wait for nothing but short lock holds, so an
	 * io_uring command may run them inline, where it must not block
	 * (ioctl.c). False: they may wait long (a shared pool's wait for
	 * other hosts), and io_uring runs them in a worker thread.
	 */
	bool block_cmds_quick;
	/*
	 * BELUGA_IOC_INDEX_MAP is served (index_map.c): the index is the
	 * core's, in this host's memory. False: -EOPNOTSUPP.
	 */
	bool index_copy;
};

/* pool_ops.c */
extern const struct beluga_pool_ops beluga_local_pool_ops;
/* The pool's ops, with ops_rwsem held for reading until _end(). */
const struct beluga_pool_ops *beluga_pool_ops_begin(struct beluga_device *dev);
/* The same, or NULL at once when a writer holds ops_rwsem. */
const struct beluga_pool_ops *beluga_pool_ops_trybegin(struct beluga_device *dev);
void beluga_pool_ops_end(struct beluga_device *dev);
/* STATS and the stats/ attributes, through the pool's ops. */
void beluga_pool_stats(struct beluga_device *dev, struct bel_stats *s);

/* ioctl.c */
long beluga_ioctl(struct file *file, unsigned int cmd, unsigned long arg);
int beluga_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags);

/* mmap.c */
int beluga_mmap(struct file *file, struct vm_area_struct *vma);

/* index_map.c */
struct beluga_index_mem;
int beluga_index_map(struct beluga_device *dev, struct beluga_index_map *arg);
int beluga_index_mmap(struct file *file, struct vm_area_struct *vma);
/* Unload: the pool's reference on its copy (mappings keep theirs). */
void beluga_index_exit(struct beluga_device *dev);
unsigned long beluga_get_unmapped_area(struct file *file, unsigned long addr,
				       unsigned long len, unsigned long pgoff,
				       unsigned long flags);

/* beluga_mh_device_lease(): the range needs no lease, and is not counted. */
#define BELUGA_RANGE_LOCAL	1

/*
 * mh.c: shared (multi-host) pools, when built in (BELUGA_SHARED=y). The
 * pool and file hooks set up and tear down what a pool or file needs to
 * take part in shared pools; without them, ATTACH with
 * BELUGA_ATTACH_SHARED fails with -EOPNOTSUPP.
 */
#ifdef BELUGA_SHARED
extern const struct beluga_pool_ops beluga_shared_pool_ops;
int beluga_mh_pool_init(struct beluga_device *dev);
void beluga_mh_pool_exit(struct beluga_device *dev);
int beluga_mh_file_open(struct beluga_file *bf);
void beluga_mh_file_release(struct beluga_file *bf);
/* BELUGA_IOC_HOSTS, debugfs "hosts": room for BELUGA_MAX_HOSTS records. */
int beluga_mh_hosts(struct beluga_device *dev, struct beluga_host *out);
/*
 * A device range of @bf is being declared (devlease_mutex held): on a
 * shared pool the host's record takes the device lease with the watchdog's
 * W (*@fence_ms), 0; BELUGA_RANGE_LOCAL where no lease is needed (a local
 * pool, W = 0; mh_allow_gup, the operator's W), -errno.
 */
int beluga_mh_device_lease(struct beluga_file *bf, u32 *fence_ms);
/* The watchdog daemon must not pet: devices may outlive a fence. */
bool beluga_mh_watchdog_hold(struct beluga_device *dev);
struct dentry;
/* The fault attribute that stalls the heartbeat, under @root (debugfs.c). */
void beluga_mh_debugfs_init(struct dentry *root);
#define BELUGA_SHARED_POOL_OPS	(&beluga_shared_pool_ops)
#else
static inline int beluga_mh_pool_init(struct beluga_device *dev)
{
	return 0;
}

static inline void beluga_mh_pool_exit(struct beluga_device *dev)
{
}

static inline int beluga_mh_file_open(struct beluga_file *bf)
{
	return 0;
}

static inline void beluga_mh_file_release(struct beluga_file *bf)
{
}

/* No shared pool can be attached: it has no host records. */
static inline int beluga_mh_hosts(struct beluga_device *dev,
				  struct beluga_host *out)
{
	return 0;
}

/* Every pool is local: its mappings are pinnable without a fence. */
static inline int beluga_mh_device_lease(struct beluga_file *bf,
					 u32 *fence_ms)
{
	*fence_ms = 0;
	return BELUGA_RANGE_LOCAL;
}

static inline bool beluga_mh_watchdog_hold(struct beluga_device *dev)
{
	return false;
}

struct dentry;
static inline void beluga_mh_debugfs_init(struct dentry *root)
{
}

#define BELUGA_SHARED_POOL_OPS	NULL
#endif

/* devlease.c: device leases (BELUGA_IOC_WATCHDOG, BELUGA_IOC_DEVICE_RANGE) */
struct eventfd_ctx;
void beluga_devlease_init(struct beluga_device *dev);
int beluga_devlease_watchdog(struct beluga_file *bf,
			     struct beluga_watchdog *arg);
int beluga_devlease_range(struct beluga_file *bf,
			  struct beluga_device_range *arg,
			  struct eventfd_ctx *efd);
void beluga_devlease_file_release(struct beluga_file *bf);
/* Declared ranges of files not yet released. */
u32 beluga_devlease_nr_ranges(struct beluga_device *dev);
/* The watchdog daemon's W, 0 when none is registered. */
u32 beluga_devlease_watchdog_ms(struct beluga_device *dev);
/* A fence: every range's eventfd is signalled. */
void beluga_devlease_signal(struct beluga_device *dev);
/* @vma (being made by mmap() of @bf) lies inside @bf's device range. */
bool beluga_devlease_pinnable(struct beluga_file *bf,
			      struct vm_area_struct *vma);

/* poison.c */
/* After the region joined the pool; before any fault can reach it. */
void beluga_poison_attach(struct beluga_region *region);
void beluga_poison_detach(struct beluga_region *region);
/* Zero a dax range at ATTACH but its poisoned pages; returns those. */
unsigned long beluga_poison_clear(const struct beluga_region *region,
				  void *base, u64 off, u64 len);
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

/* debugfs.c */
void beluga_debugfs_init(void);
void beluga_debugfs_exit(void);
void beluga_debugfs_add_pool(struct beluga_device *dev);

#endif /* BELUGA_GLUE_H */
