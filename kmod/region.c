// SPDX-License-Identifier: GPL-2.0
/*
 * Claiming memory for the pool.
 *
 * Device-dax: the range must belong to a device-dax instance that is bound
 * to the device_dax driver. That driver created the range's struct pages
 * (a MEMORY_DEVICE_GENERIC page map); Beluga takes a reference on the page
 * map for as long as the region is attached and inserts the same pages into
 * its own mappings, exactly as device_dax does. Those mappings therefore
 * behave like device-dax mappings: FOLL_LONGTERM pins work (RDMA, CUDA host
 * registration, io_uring), and 2 MiB page table entries can be used. The
 * range is cleared at ATTACH (a shared pool's data area at FORMAT instead),
 * so that no pool sees what an earlier pool or user left in it.
 *
 * NUMA node: order-9 pages (falling back to order 0) are taken from the node
 * with __GFP_THISNODE, zeroed, split into order-0 pages so that each can be
 * mapped and reference counted on its own, and kept until detach.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/device.h>
#include <linux/gfp.h>
#include <linux/io.h>
#include <linux/ioport.h>
#include <linux/memremap.h>
#include <linux/mm.h>
#include <linux/nodemask.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/random.h>
#include <linux/sizes.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/sysfs.h>
#include <linux/utsname.h>

#include "beluga.h"

#define BELUGA_NODE_CHUNK_ORDER	9	/* 2 MiB with 4 KiB pages */
#define BELUGA_CLEAR_CHUNK	SZ_2M	/* cleared between reschedules */

/*
 * Regions that an ATTACH has reserved and prepares with no lock held
 * (clearing a device-dax range, allocating node memory): their names and
 * ranges count as taken. Changed under beluga_claim_mutex and
 * beluga_preparing_lock; read under either (sysfs takes the spinlock, so
 * that a long shared ATTACH holding the mutex does not stall it).
 */
static LIST_HEAD(beluga_preparing);
static DEFINE_SPINLOCK(beluga_preparing_lock);

static bool beluga_ranges_overlap(u64 a, u64 alen, u64 b, u64 blen)
{
	return a < b + blen && b < a + alen;
}

/*
 * Does anyone hold a reference on a folio of a device-dax region? An idle
 * MEMORY_DEVICE_GENERIC folio has refcount 1 (mm/mm_init.c,
 * __init_zone_device_page: only the PRIVATE and COHERENT types start at
 * 0), and Beluga's mappings insert devmap PFNs without taking references,
 * as device_dax does. More is a get_user_pages() reference or pin, taken
 * through a Beluga mapping or through /dev/daxX.Y before the ATTACH.
 */
static bool beluga_dax_pages_busy(struct beluga_region *region)
{
	unsigned long pfn = PHYS_PFN(region->phys_start);
	unsigned long end = pfn + (region->length >> PAGE_SHIFT);
	unsigned long steps = 0;

	while (pfn < end) {
		struct folio *folio = page_folio(pfn_to_page(pfn));

		/* memory_failure() may keep a reference to a poisoned page. */
		if (folio_ref_count(folio) != 1 && !folio_test_hwpoison(folio))
			return true;
		pfn = folio_pfn(folio) + folio_nr_pages(folio);
		if (!(++steps % 4096))
			cond_resched();
	}
	return false;
}

/*
 * A page of the region is still referenced by someone other than Beluga:
 * a FOLL_LONGTERM pin taken through a mapping that is gone now (an io_uring
 * fixed buffer, an RDMA memory region). Detaching then would hand that memory
 * to someone else while a device may still write to it.
 */
int beluga_region_pages_busy(struct beluga_region *region)
{
	unsigned long i;

	if (region->backend == BELUGA_BACKEND_DAX)
		return beluga_dax_pages_busy(region);

	for (i = 0; i < region->nr_pages; i++) {
		if (page_ref_count(region->pages[i]) != 1 &&
		    !PageHWPoison(region->pages[i]))
			return true;
		if (!((i + 1) % 4096))
			cond_resched();
	}
	return false;
}

static int beluga_dax_claim(struct beluga_region *region)
{
	u64 start = region->phys_start, len = region->length;
	struct dev_pagemap *pgmap;
	int i;

	if (!IS_ALIGNED(start, BELUGA_DAX_ALIGN) ||
	    !IS_ALIGNED(len, BELUGA_DAX_ALIGN) || start + len < start)
		return -EINVAL;
	if (region_intersects(start, len, IORESOURCE_SYSTEM_RAM,
			      IORES_DESC_NONE) != REGION_DISJOINT)
		return -EBUSY;

	pgmap = get_dev_pagemap(PHYS_PFN(start), NULL);
	if (!pgmap)
		return -EBUSY;
	if (pgmap->type != MEMORY_DEVICE_GENERIC)
		goto busy;
	/* The whole range must lie inside one range of the same page map. */
	for (i = 0; i < pgmap->nr_range; i++) {
		const struct range *r = &pgmap->ranges[i];

		if (start >= r->start && start + len - 1 <= r->end)
			break;
	}
	if (i == pgmap->nr_range)
		goto busy;

	/* A pin from an earlier user would outlive the range's move here. */
	if (beluga_dax_pages_busy(region))
		goto busy;

	region->pgmap = pgmap;
	region->node = phys_to_target_node(start);
	if (region->node == NUMA_NO_NODE)
		region->node = memory_add_physaddr_to_nid(start);
	return 0;
busy:
	put_dev_pagemap(pgmap);
	return -EBUSY;
}

/*
 * Device-dax memory holds what its last user left there: the blocks of a
 * pool it was detached from (another tenant's), or the data of a
 * /dev/daxX.Y user before Beluga. Clear it before any of it is mapped or
 * allocated. Node memory comes zeroed from the page allocator.
 */
static int beluga_dax_clear(struct beluga_region *region)
{
	u64 done, len;
	void *base;

	base = memremap(region->phys_start, region->length, MEMREMAP_WB);
	if (!base)
		return -ENOMEM;
	for (done = 0; done < region->length; done += len) {
		len = min_t(u64, BELUGA_CLEAR_CHUNK, region->length - done);
		memset(base + done, 0, len);
		atomic64_set(&region->prepared, done + len);
		if (fatal_signal_pending(current)) {
			memunmap(base);
			return -EINTR;
		}
		cond_resched();
	}
	memunmap(base);
	return 0;
}

static void beluga_node_free_pages(struct beluga_region *region)
{
	unsigned long i;

	for (i = 0; i < region->nr_pages; i++) {
		if (region->pages[i])
			put_page(region->pages[i]);
	}
	kvfree(region->pages);
	region->pages = NULL;
}

/*
 * Pages of @node that the module can take: those of its kernel zones.
 * Memory onlined into ZONE_MOVABLE (what daxctl's system-ram mode and
 * memory hotplug usually pick for CXL memory) cannot be used: the pages
 * are kept for as long as the region is attached and may be pinned
 * FOLL_LONGTERM through the mappings, which movable memory must not be.
 */
static unsigned long beluga_node_kernel_pages(int node)
{
	struct pglist_data *pgdat = NODE_DATA(node);
	unsigned long pages = 0;
	int z;

	for (z = 0; z < ZONE_MOVABLE; z++)
		pages += zone_managed_pages(&pgdat->node_zones[z]);
	return pages;
}

static int beluga_node_claim(struct beluga_region *region)
{
	const gfp_t gfp = GFP_HIGHUSER | __GFP_THISNODE | __GFP_ZERO |
			  __GFP_NOWARN | __GFP_RETRY_MAYFAIL;
	unsigned long nr = region->length >> PAGE_SHIFT, i = 0;
	unsigned int order = BELUGA_NODE_CHUNK_ORDER;
	int node = region->node;

	if (region->phys_start || !IS_ALIGNED(region->length, PAGE_SIZE) ||
	    !region->length)
		return -EINVAL;
	if (node < 0 || node >= MAX_NUMNODES || !node_state(node, N_MEMORY))
		return -ENODEV;
	/* More than the node's kernel zones have can never succeed. */
	if (nr > beluga_node_kernel_pages(node)) {
		if (nr <= node_present_pages(node))
			pr_warn("%s: node %d has its memory in ZONE_MOVABLE, which cannot be pinned: online it into a kernel zone (online_kernel, or daxctl reconfigure-device --no-movable)\n",
				region->name, node);
		return -ENOMEM;
	}

	region->pages = kvcalloc(nr, sizeof(*region->pages),
				 GFP_KERNEL | __GFP_NOWARN);
	if (!region->pages)
		return -ENOMEM;
	region->nr_pages = nr;

	while (i < nr) {
		struct page *page;
		unsigned long j;

		if (nr - i < (1UL << order))
			order = 0;
		page = alloc_pages_node(node, gfp, order);
		if (!page && order) {
			/* Fragmented: carry on with single pages. */
			order = 0;
			continue;
		}
		if (!page)
			goto nomem;
		if (order)
			split_page(page, order);
		for (j = 0; j < (1UL << order); j++)
			region->pages[i + j] = nth_page(page, j);
		i += 1UL << order;
		atomic64_set(&region->prepared, (u64)i << PAGE_SHIFT);
		if (fatal_signal_pending(current))
			goto interrupted;
		cond_resched();
	}
	return 0;

nomem:
	beluga_node_free_pages(region);
	return -ENOMEM;
interrupted:
	beluga_node_free_pages(region);
	return -EINTR;
}

static void beluga_region_unclaim(struct beluga_region *region)
{
	beluga_poison_detach(region);
	if (region->backend == BELUGA_BACKEND_DAX)
		put_dev_pagemap(region->pgmap);
	else
		beluga_node_free_pages(region);
}

/*
 * Under beluga_claim_mutex, which keeps every pool's regions[] and the
 * regions being prepared still. Names are unique within a pool; a
 * device-dax range can be claimed by one region of one pool only.
 */
static int beluga_check_unique(struct beluga_device *dev,
			       const struct beluga_region *new)
{
	int i, p;

	const struct beluga_region *r;

	for (i = 0; i < BELUGA_MAX_REGIONS; i++) {
		r = dev->regions[i];
		if (r && !strcmp(r->name, new->name))
			return -EEXIST;
	}
	list_for_each_entry(r, &beluga_preparing, preparing) {
		if (r->dev == dev && !strcmp(r->name, new->name))
			return -EEXIST;
		if (r->backend == BELUGA_BACKEND_DAX &&
		    new->backend == BELUGA_BACKEND_DAX &&
		    beluga_ranges_overlap(r->phys_start, r->length,
					  new->phys_start, new->length))
			return -EEXIST;
	}
	if (new->backend != BELUGA_BACKEND_DAX)
		return 0;
	/* beluga_claim_mutex keeps every pool's regions[] still. */
	for (p = 0; p < beluga_nr_pools; p++) {
		struct beluga_device *other = &beluga_pools[p];

		for (i = 0; i < BELUGA_MAX_REGIONS; i++) {
			r = other->regions[i];
			if (r && r->backend == BELUGA_BACKEND_DAX &&
			    beluga_ranges_overlap(r->phys_start, r->length,
						  new->phys_start,
						  new->length))
				break;
		}
		if (i < BELUGA_MAX_REGIONS)
			return -EEXIST;
	}
	return 0;
}

/*
 * ATTACH's fields (steps 5 and 8 of the uapi's common errors), in the
 * current layout: the ioctl has moved a first-layout host id already.
 */
static int beluga_attach_validate(const struct beluga_attach *arg)
{
	const u32 shared_flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_FORMAT |
				 BELUGA_ATTACH_HOST_ID;
	size_t namelen = strnlen(arg->name, sizeof(arg->name));

	if (arg->flags & ~shared_flags)
		return -EINVAL;
	if (arg->flags && !(arg->flags & BELUGA_ATTACH_SHARED))
		return -EINVAL;
	if (arg->__reserved || arg->__reserved2)
		return -EINVAL;
	if (!(arg->flags & BELUGA_ATTACH_HOST_ID) && arg->host_id)
		return -EINVAL;
	if ((arg->flags & BELUGA_ATTACH_SHARED) &&
	    arg->backend != BELUGA_BACKEND_DAX)
		return -EINVAL;
	if (namelen == sizeof(arg->name))
		return -EINVAL;
	switch (arg->backend) {
	case BELUGA_BACKEND_DAX:
		if (arg->node != -1 || !namelen)
			return -EINVAL;
		break;
	case BELUGA_BACKEND_NODE:
		if (arg->phys_start || arg->node < 0)
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	if (!arg->length)
		return -EINVAL;
	if (arg->block_size &&
	    (arg->block_size < BELUGA_BLOCK_SIZE_MIN ||
	     arg->block_size > BELUGA_BLOCK_SIZE_MAX ||
	     !IS_ALIGNED(arg->block_size, PAGE_SIZE)))
		return -EINVAL;
	return 0;
}

/*
 * Shared: map the claimed range, join (or format) the multi-host pool in
 * it and start its heartbeat. Returns the bytes and block size of its data
 * area, which is what the offset space shows.
 */
static int beluga_shared_join(struct beluga_region *region,
			      const struct beluga_attach *arg,
			      struct beluga_mh **mhp, u64 *data_len, u64 *bs)
{
	struct bel_mh_config cfg = {};
	struct beluga_mh *mh;
	const char *why;
	s64 id;
	int ret;

	id = arg->flags & BELUGA_ATTACH_HOST_ID ? (s64)arg->host_id :
						  (s64)READ_ONCE(beluga_host_id);
	if (id < 0 || id >= BEL_MH_MAX_HOSTS) {
		pr_warn("%s: shared attach needs a host id 0-%u (beluga.host_id= or the ATTACH call)\n",
			region->name, BEL_MH_MAX_HOSTS - 1);
		return id < 0 ? -EINVAL : -ERANGE;
	}
	mh = kzalloc(sizeof(*mh), GFP_KERNEL);
	if (!mh)
		return -ENOMEM;
	mh->dev = region->dev;
	ret = beluga_mh_map(mh, region->phys_start, region->length);
	if (ret)
		goto out_free;

	cfg.host_id = (u32)id;
	cfg.block_size = arg->block_size;
	cfg.format = arg->flags & BELUGA_ATTACH_FORMAT;
	cfg.heartbeat_ms = READ_ONCE(beluga_mh_heartbeat_ms);
	cfg.lease_ms = READ_ONCE(beluga_mh_lease_ms);
	cfg.nonce = get_random_u64() | 1;
	strscpy(cfg.name, utsname()->nodename, sizeof(cfg.name));
	ret = beluga_mh_start(mh, &cfg, &why);
	if (ret) {
		pr_warn("%s: shared attach as host %u refused (%d): %s\n",
			region->name, cfg.host_id, ret, why ? why : "?");
		goto out_unmap;
	}
	*data_len = (u64)mh->host.geo.nr_blocks * mh->host.geo.block_size;
	*bs = mh->host.geo.block_size;
	region->data_off = mh->host.geo.data_off;
	region->shared = true;
	*mhp = mh;
	pr_info("%s: joined shared pool as host %u%s: %u blocks of %llu bytes, metadata %llu bytes\n",
		region->name, cfg.host_id,
		mh->host.formatted ? " (formatted it)" : "",
		mh->host.geo.nr_blocks, mh->host.geo.block_size,
		mh->host.geo.data_off);
	return 0;

out_unmap:
	beluga_mh_unmap(mh);
out_free:
	kfree(mh);
	return ret;
}

/* Undo beluga_shared_join(): leave the pool (no client holds anything). */
static void beluga_shared_leave(struct beluga_mh *mh)
{
	beluga_mh_stop(mh, true);
	beluga_mh_unmap(mh);
	kfree(mh);
}

/*
 * ATTACH in the order iommufd creates an object (answer, then finalize):
 *
 *   1. A local region is claimed and made ready (a device-dax range
 *      cleared, node memory allocated) with no lock held, since that takes
 *      seconds for a large region: ATTACH and DETACH of every pool, and
 *      mmap() of this one, go on meanwhile.
 *   2. Under beluga_claim_mutex it is reserved: a shared region joins its
 *      multi-host pool, the core holds its slot and offsets
 *      (bel_pool_reserve_region()), its poisoned pages are retired and its
 *      sysfs directory is made (the last step that can fail). Nothing of
 *      it can be mapped, allocated, looked up, counted or detached yet.
 *   3. The ioctl answers the caller with the region's id and offsets.
 *   4. Commit publishes it in the pool, which cannot fail; or, when the
 *      answer could not be written, abort tears it down without it ever
 *      having been visible.
 *
 * From step 1 to step 4 the region is on beluga_preparing, which keeps its
 * name and range taken (and, for a shared region, its pool to itself).
 */

/* Under beluga_claim_mutex: @region is no longer being prepared. */
static void beluga_region_prepared(struct beluga_region *region)
{
	spin_lock(&beluga_preparing_lock);
	list_del_init(&region->preparing);
	spin_unlock(&beluga_preparing_lock);
}

static void beluga_region_preparing(struct beluga_region *region)
{
	spin_lock(&beluga_preparing_lock);
	list_add(&region->preparing, &beluga_preparing);
	spin_unlock(&beluga_preparing_lock);
}

/*
 * sysfs "attaching": one line per region of @dev that an ATTACH is
 * preparing, "NAME DONE LENGTH" in bytes. Its blocks appear once DONE
 * reaches LENGTH and the ATTACH returns.
 */
ssize_t beluga_region_attaching_show(struct beluga_device *dev, char *buf)
{
	const struct beluga_region *r;
	int len = 0;

	spin_lock(&beluga_preparing_lock);
	list_for_each_entry(r, &beluga_preparing, preparing) {
		if (r->dev == dev)
			len += sysfs_emit_at(buf, len, "%s %lld %llu\n", r->name,
					     (long long)atomic64_read(&r->prepared),
					     r->length);
	}
	spin_unlock(&beluga_preparing_lock);
	return len;
}

/* Step 1 of a local region. */
static int beluga_region_claim_local(struct beluga_device *dev,
				     struct beluga_region *region)
{
	bool dax = region->backend == BELUGA_BACKEND_DAX;
	int ret;

	mutex_lock(&beluga_claim_mutex);
	ret = beluga_check_unique(dev, region);
	if (!ret && dax)
		ret = beluga_dax_claim(region);
	if (!ret)
		beluga_region_preparing(region);
	mutex_unlock(&beluga_claim_mutex);
	if (ret)
		return ret;

	ret = dax ? beluga_dax_clear(region) : beluga_node_claim(region);
	if (!ret)
		return 0;
	mutex_lock(&beluga_claim_mutex);
	beluga_region_prepared(region);
	mutex_unlock(&beluga_claim_mutex);
	if (dax)
		put_dev_pagemap(region->pgmap);
	return ret;
}

/*
 * Under beluga_claim_mutex. A shared pool is one region, alone in its pool:
 * no shared region may come to a pool that has a region (attached, or
 * reserved by an ATTACH that has not committed yet), and no region to a
 * pool with a shared one (the same two cases).
 */
static int beluga_check_shared_alone(struct beluga_device *dev,
				     const struct beluga_region *new,
				     bool shared)
{
	const struct beluga_region *r;

	if (dev->mh || (shared && READ_ONCE(dev->pool.nr_regions)))
		return -EBUSY;
	list_for_each_entry(r, &beluga_preparing, preparing) {
		if (r == new || r->dev != dev || !r->reserved)
			continue;
		if (shared || r->shared)
			return -EBUSY;
	}
	return 0;
}

/* Takes the locks of step 2, 4 and abort. */
static void beluga_attach_lock(struct beluga_device *dev, bool shared)
{
	mutex_lock(&beluga_claim_mutex);
	/*
	 * dev->mh changes only under beluga_claim_mutex and, for the block
	 * commands, mh_rwsem: a single-host attach leaves it alone and does
	 * not hold the block commands up.
	 */
	if (shared)
		down_write(&dev->mh_rwsem);
	down_write(&dev->regions_rwsem);
}

static void beluga_attach_unlock(struct beluga_device *dev, bool shared)
{
	up_write(&dev->regions_rwsem);
	if (shared)
		up_write(&dev->mh_rwsem);
	mutex_unlock(&beluga_claim_mutex);
}

/* Step 2, under beluga_attach_lock(). */
static int beluga_region_reserve(struct beluga_device *dev,
				 struct beluga_region *region,
				 const struct beluga_attach *arg)
{
	bool shared = arg->flags & BELUGA_ATTACH_SHARED;
	struct beluga_mh *mh = NULL;
	u64 length = region->length, block_size = arg->block_size;
	int ret;

	ret = beluga_check_shared_alone(dev, region, shared);
	if (ret && shared)
		return ret;
	if (ret)
		goto out_unclaim;
	if (shared) {
		/* The pool's own data: cleared at FORMAT, never at a join. */
		ret = beluga_check_unique(dev, region);
		if (ret)
			return ret;
		ret = beluga_dax_claim(region);
		if (ret)
			return ret;
		ret = beluga_shared_join(region, arg, &mh, &length,
					 &block_size);
		if (ret)
			goto out_unclaim;
	}

	ret = bel_pool_reserve_region(&dev->pool, length, block_size,
				      &region->slot, &region->first_offset,
				      &region->nr_blocks);
	if (ret)
		goto out_leave;
	if (mh && region->nr_blocks != mh->host.geo.nr_blocks) {
		ret = -EINVAL;
		goto out_abort;
	}
	beluga_poison_attach(region);
	ret = beluga_region_sysfs_add(region);
	if (ret)
		goto out_abort;

	if (mh) {
		mh->first_offset = region->first_offset;
		mh->block_size = block_size;
		mh->nr_blocks = region->nr_blocks;
		region->mh = mh;
		atomic64_set(&region->prepared, region->length);
		beluga_region_preparing(region);
	}
	region->reserved = true;
	return 0;

out_abort:
	bel_pool_abort_region(&dev->pool, region->slot);
out_leave:
	if (mh)
		beluga_shared_leave(mh);
out_unclaim:
	beluga_region_unclaim(region);
	if (!shared)
		beluga_region_prepared(region);
	return ret;
}

int beluga_attach_prepare(struct beluga_device *dev, struct beluga_attach *arg,
			  struct beluga_region **prepared)
{
	bool shared = arg->flags & BELUGA_ATTACH_SHARED;
	struct beluga_region *region;
	int ret;

	ret = beluga_attach_validate(arg);
	if (ret)
		return ret;

	region = beluga_region_alloc();
	if (!region)
		return -ENOMEM;
	region->dev = dev;
	region->backend = arg->backend;
	region->node = arg->node;
	region->phys_start = arg->phys_start;
	region->length = arg->length;
	atomic_set(&region->mappings, 0);
	INIT_LIST_HEAD(&region->preparing);
	atomic64_set(&region->prepared, 0);
	if (arg->name[0])
		strscpy(region->name, arg->name, sizeof(region->name));
	else
		snprintf(region->name, sizeof(region->name), "node%d",
			 arg->node);

	if (!shared) {
		ret = beluga_region_claim_local(dev, region);
		if (ret) {
			beluga_region_put(region);
			return ret;
		}
	}

	beluga_attach_lock(dev, shared);
	ret = beluga_region_reserve(dev, region, arg);
	beluga_attach_unlock(dev, shared);
	if (ret) {
		beluga_region_put(region);
		return ret;
	}
	arg->region_id = region->slot;
	arg->first_offset = region->first_offset;
	arg->nr_blocks = region->nr_blocks;
	*prepared = region;
	return 0;
}

/* The caller's reference goes to regions[]: DETACH may free @region after. */
void beluga_attach_commit(struct beluga_region *region)
{
	struct beluga_device *dev = region->dev;
	struct beluga_mh *mh = region->mh;

	beluga_attach_lock(dev, mh);
	beluga_region_prepared(region);
	region->reserved = false;
	region->mh = NULL;
	dev->regions[region->slot] = region;
	if (mh) {
		dev->mh = mh;
		dev->mh_gen++;
	}
	bel_pool_commit_region(&dev->pool, region->slot);
	dev_info(dev->misc.this_device,
		 "attached %s as region %u: %llu bytes, %u blocks at offset 0x%llx\n",
		 region->name, region->slot, region->length, region->nr_blocks,
		 region->first_offset);
	beluga_attach_unlock(dev, mh);
}

void beluga_attach_abort(struct beluga_region *region)
{
	struct beluga_device *dev = region->dev;
	struct beluga_mh *mh = region->mh;

	beluga_attach_lock(dev, mh);
	beluga_region_prepared(region);
	/* Waits for sysfs readers, which never take regions_rwsem. */
	beluga_region_sysfs_del(region);
	bel_pool_abort_region(&dev->pool, region->slot);
	if (mh)
		beluga_shared_leave(mh);
	beluga_region_unclaim(region);
	beluga_attach_unlock(dev, mh);
	beluga_region_put(region);
}

int beluga_region_attach(struct beluga_device *dev, struct beluga_attach *arg)
{
	struct beluga_region *region;
	int ret;

	ret = beluga_attach_prepare(dev, arg, &region);
	if (!ret)
		beluga_attach_commit(region);
	return ret;
}

/*
 * Under regions_rwsem, for writing. @unloading: no file is open any more, so
 * the core holds no allocation or pin; pages still pinned from outside (an
 * io_uring buffer that outlived its mapping) cannot stop a module unload.
 * Dropping Beluga's own references is still safe then: node pages stay
 * allocated until the last pin goes, and device_dax owns the dax pages.
 */
static int beluga_detach_locked(struct beluga_device *dev, u32 slot,
				bool evict, u64 *evicted, bool unloading)
{
	struct beluga_region *region;
	int ret;

	if (slot >= BELUGA_MAX_REGIONS || !dev->regions[slot])
		return -ENOENT;
	region = dev->regions[slot];

	/* mmap() holds regions_rwsem while it counts, so this is stable. */
	if (atomic_read(&region->mappings))
		return -EBUSY;
	if (beluga_region_pages_busy(region)) {
		if (!unloading)
			return -EBUSY;
		pr_notice("%s: pages still pinned at unload; left to their pinners\n",
			  region->name);
	}

	/* Shared: leave the pool first; the core holds nothing in it. */
	if (dev->mh) {
		ret = beluga_mh_stop(dev->mh, unloading);
		if (ret)
			return ret;
		beluga_mh_unmap(dev->mh);
		kfree(dev->mh);
		dev->mh = NULL;
		pr_info("%s: left the shared pool\n", region->name);
	}

	ret = bel_pool_remove_region(&dev->pool, slot, evict, evicted);
	if (ret)
		return ret;

	dev->regions[slot] = NULL;
	dev_info(dev->misc.this_device, "detached %s (region %u)\n",
		 region->name, slot);
	/* Waits for sysfs readers, which never take regions_rwsem. */
	beluga_region_sysfs_del(region);
	beluga_region_unclaim(region);
	beluga_region_put(region);
	return 0;
}

int beluga_region_detach(struct beluga_device *dev, u32 slot, bool evict,
			 u64 *evicted)
{
	bool shared;
	int ret;

	mutex_lock(&beluga_claim_mutex);
	/* Stable under beluga_claim_mutex; see beluga_attach_lock(). */
	shared = dev->mh;
	if (shared)
		down_write(&dev->mh_rwsem);
	down_write(&dev->regions_rwsem);
	ret = beluga_detach_locked(dev, slot, evict, evicted, false);
	up_write(&dev->regions_rwsem);
	if (shared)
		up_write(&dev->mh_rwsem);
	mutex_unlock(&beluga_claim_mutex);
	return ret;
}

/*
 * Module unload: no file is open (each holds a module reference), so no
 * mapping, allocation or pin can exist. Published blocks are dropped.
 */
void beluga_region_detach_all(struct beluga_device *dev)
{
	u32 slot;

	mutex_lock(&beluga_claim_mutex);
	down_write(&dev->mh_rwsem);
	down_write(&dev->regions_rwsem);
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		if (!dev->regions[slot])
			continue;
		if (beluga_detach_locked(dev, slot, true, NULL, true))
			dev_err(dev->misc.this_device,
				"region %u still in use at unload\n", slot);
	}
	up_write(&dev->regions_rwsem);
	up_write(&dev->mh_rwsem);
	mutex_unlock(&beluga_claim_mutex);
}
