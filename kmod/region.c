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
 * Who else can reach a claimed range: the instance stays bound to
 * device_dax, so /dev/daxX.Y can still be opened, mapped and written by
 * whoever may open it (root only by default; udev rules can widen that).
 * The pool's blocks are immutable only if nobody does, and the module
 * cannot see a plain mapping of the node (device_dax takes no page
 * references for it; ATTACH refuses only pinned pages). belugactl guards
 * the node: it refuses to attach an instance that another process holds
 * open or mapped (unless --force), and keeps the node mode 0000 while the
 * range is attached. Beluga's claim is visible, not enforced: from the
 * claim until the detach, /proc/iomem shows a "<pool>:<region>" entry over
 * exactly the range (around the outermost entry of the same range when the
 * range is a whole instance: device_dax's "daxX.Y", or the CXL region
 * above it; inside "daxX.Y" when it is part of one), and the region's sysfs
 * directory links to the instance ("dax").
 *
 * The upstream shape is a dax bus driver that owns the range's page map,
 * as device_dax and kmem do (a DAXDRV_BELUGA_TYPE), so that /dev/daxX.Y
 * goes away while Beluga has the range. An out-of-tree module cannot be
 * one today: __dax_driver_register() is exported, but struct
 * dax_device_driver and struct dev_dax are declared in drivers/dax/bus.h
 * and dax-private.h, which kernel headers packages do not ship (Debian's
 * for 6.1 and 6.12 have no drivers/dax/), and copying them is not an
 * option. Documentation/dax-ownership.md has the details.
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
#include <linux/kobject.h>
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

#include "beluga_glue.h"

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

/*
 * Show the claim in /proc/iomem. device_dax holds a busy "daxX.Y" resource
 * over its range, so request_mem_region() would conflict; insert_resource()
 * places the entry around a resource of exactly the same range (the
 * outermost such one, on 6.1 as on 6.12) or inside one that contains it, and
 * remove_resource() gives the children back to the parent. The entry is
 * not IORESOURCE_BUSY, so that release_mem_region() of device_dax's own
 * entry still finds it beneath Beluga's. Called under beluga_claim_mutex,
 * which keeps two Beluga entries from overlapping.
 *
 * Node regions get no entry: their pages come from the page allocator,
 * scattered over the node's System RAM, which iomem already shows as such;
 * there is no range of Beluga's to name.
 */
static int beluga_dax_iomem_insert(struct beluga_region *region)
{
	struct resource *res = &region->iomem;
	int ret;

	snprintf(region->iomem_name, sizeof(region->iomem_name), "%s:%s",
		 region->dev->name, region->name);
	memset(res, 0, sizeof(*res));
	res->start = region->phys_start;
	res->end = region->phys_start + region->length - 1;
	res->name = region->iomem_name;
	res->flags = IORESOURCE_MEM;
	res->desc = IORES_DESC_NONE;
	ret = insert_resource(&iomem_resource, res);
	if (ret)
		pr_warn("%s: cannot enter %pa+%#llx into /proc/iomem: it straddles another entry\n",
			region->name, &region->phys_start, region->length);
	return ret;
}

/*
 * The name of device_dax's busy resource over the claimed range, which is
 * the instance's device name (dev_dax_probe() requests each range under
 * dev_name()): the parent of Beluga's entry when the range is part of an
 * instance, else the first busy entry below it that holds the range.
 * Read without the resource lock, which is not exported: nothing in this
 * part of the tree can change while it is read, since beluga_claim_mutex
 * keeps other Beluga entries out, and device_dax releases its resource
 * only after its page map's references are gone, one of them the claim's.
 */
static const char *beluga_dax_res_name(const struct beluga_region *region)
{
	const struct resource *res = region->iomem.parent;

	if (res && (res->flags & IORESOURCE_BUSY))
		return res->name;
	res = region->iomem.child;
	while (res) {
		if (region->phys_start < res->start ||
		    region->phys_start > res->end) {
			res = res->sibling;
			continue;
		}
		if (res->flags & IORESOURCE_BUSY)
			return res->name;
		res = res->child;
	}
	return NULL;
}

/*
 * The device-dax instance that owns the claimed range, with a reference,
 * for the region's "dax" link in sysfs; NULL if it cannot be told. The
 * dax bus type is private to drivers/dax, so bus_find_device() is out of
 * reach: look for a device of that name on the "dax" bus in the kset that
 * every struct device belongs to (the misc device's), the way
 * kset_find_obj() looks, but past devices of other buses that share the
 * name (libnvdimm's "daxX.Y" on the nd bus, the parent of device-dax's).
 */
static struct device *beluga_dax_find_device(struct beluga_region *region)
{
	struct device *misc = region->dev->misc.this_device;
	struct device *found = NULL;
	struct kobject *k;
	const char *name;
	struct kset *all;

	name = beluga_dax_res_name(region);
	all = misc ? misc->kobj.kset : NULL;
	if (!name || !all)
		return NULL;
	spin_lock(&all->list_lock);
	list_for_each_entry(k, &all->list, entry) {
		struct device *dev = kobj_to_dev(k);

		if (!kobject_name(k) || strcmp(kobject_name(k), name) ||
		    !dev->bus || strcmp(dev->bus->name, "dax"))
			continue;
		if (kobject_get_unless_zero(k)) {
			found = dev;
			break;
		}
	}
	spin_unlock(&all->list_lock);
	return found;
}

static int beluga_dax_claim(struct beluga_region *region)
{
	u64 start = region->phys_start, len = region->length;
	struct dev_pagemap *pgmap;
	int i, ret;

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

	ret = beluga_dax_iomem_insert(region);
	if (ret)
		goto out_put;
	region->dax_dev = beluga_dax_find_device(region);
	if (!region->dax_dev)
		pr_notice("%s: no device-dax instance found for %pa+%#llx: the region gets no \"dax\" link in sysfs\n",
			  region->name, &region->phys_start, region->length);

	region->pgmap = pgmap;
	region->node = phys_to_target_node(start);
	if (region->node == NUMA_NO_NODE)
		region->node = memory_add_physaddr_to_nid(start);
	return 0;
busy:
	ret = -EBUSY;
out_put:
	put_dev_pagemap(pgmap);
	return ret;
}

/* Undo beluga_dax_claim(). */
static void beluga_dax_unclaim(struct beluga_region *region)
{
	put_device(region->dax_dev);
	region->dax_dev = NULL;
	remove_resource(&region->iomem);
	put_dev_pagemap(region->pgmap);
	region->pgmap = NULL;
}

/*
 * Device-dax memory holds what its last user left there: the blocks of a
 * pool it was detached from (another tenant's), or the data of a
 * /dev/daxX.Y user before Beluga. Clear it before any of it is mapped or
 * allocated. Node memory comes zeroed from the page allocator.
 */
static int beluga_dax_clear(struct beluga_region *region)
{
	unsigned long skipped = 0;
	u64 done, len;
	void *base;

	base = memremap(region->phys_start, region->length, MEMREMAP_WB);
	if (!base)
		return -ENOMEM;
	for (done = 0; done < region->length; done += len) {
		len = min_t(u64, BELUGA_CLEAR_CHUNK, region->length - done);
		/* Known-poisoned pages are left alone (poison.c). */
		skipped += beluga_poison_clear(region, base, done, len);
		atomic64_set(&region->prepared, done + len);
		if (fatal_signal_pending(current)) {
			memunmap(base);
			return -EINTR;
		}
		cond_resched();
	}
	memunmap(base);
	if (skipped)
		pr_warn("%s: %lu poisoned pages not cleared; their blocks are retired\n",
			region->name, skipped);
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

void beluga_region_unclaim(struct beluga_region *region)
{
	beluga_poison_detach(region);
	if (region->backend == BELUGA_BACKEND_DAX)
		beluga_dax_unclaim(region);
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
 * ATTACH in the order iommufd creates an object (answer, then finalize),
 * through the pool ops of the kind asked for:
 *
 *   1. A local region is claimed and made ready (a device-dax range
 *      cleared, node memory allocated) with no lock held, since that takes
 *      seconds for a large region: ATTACH and DETACH of every pool, and
 *      mmap() of this one, go on meanwhile. A shared region is not: its
 *      range is the pool's own data, which a join must keep.
 *   2. ops->attach, under beluga_claim_mutex and the pool's locks,
 *      reserves it: a shared region joins its multi-host pool, the core
 *      holds its slot and offsets (bel_pool_reserve_region()), its
 *      poisoned pages are retired and its sysfs directory is made (the
 *      last step that can fail). Nothing of it can be mapped, allocated,
 *      looked up, counted or detached yet.
 *   3. The ioctl answers the caller with the region's id and offsets.
 *   4. ops->attach_commit publishes it in the pool, which cannot fail; or,
 *      when the answer could not be written, ops->attach_abort tears it
 *      down without it ever having been visible.
 *
 * From step 1 (a shared region: step 2) to step 4 the region is on
 * beluga_preparing, which keeps its name and range taken.
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
static int beluga_region_prepare(struct beluga_device *dev,
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
		beluga_dax_unclaim(region);
	return ret;
}

/*
 * For the attach ops, under beluga_claim_mutex: a region that is claimed
 * here, with the pool's locks held, rather than prepared first (a shared
 * pool's range, whose data a join must keep).
 */
int beluga_region_claim_locked(struct beluga_device *dev,
			       struct beluga_region *region)
{
	int ret;

	ret = beluga_check_unique(dev, region);
	if (!ret && region->backend == BELUGA_BACKEND_DAX)
		ret = beluga_dax_claim(region);
	return ret;
}

/*
 * Under beluga_claim_mutex: may @region, of the kind region->ops, come to
 * @dev's pool? A shared pool is one region, alone in its pool: no shared
 * region may come to a pool that has a region (attached, or reserved by an
 * ATTACH that has not committed yet), and no region to a pool with a
 * shared one (the same two cases). -EBUSY if not.
 */
int beluga_region_alone_locked(struct beluga_device *dev,
			       const struct beluga_region *region)
{
	bool shared = region->ops != &beluga_local_pool_ops;
	const struct beluga_region *r;

	if (dev->ops != &beluga_local_pool_ops)
		return -EBUSY;
	if (shared && (READ_ONCE(dev->pool.nr_regions) ||
		       READ_ONCE(dev->pool.nr_reserved)))
		return -EBUSY;
	list_for_each_entry(r, &beluga_preparing, preparing) {
		if (r == region || r->dev != dev || !r->reserved)
			continue;
		if (shared || r->ops != &beluga_local_pool_ops)
			return -EBUSY;
	}
	return 0;
}

/*
 * Step 2, under beluga_claim_mutex and regions_rwsem (write): reserve
 * @length bytes of blocks of @block_size (0: the pool's) for the claimed
 * @region in the core and make its sysfs directory. Nothing of it can be
 * reached before beluga_region_commit_locked().
 */
int beluga_region_reserve_locked(struct beluga_device *dev,
				 struct beluga_region *region, u64 length,
				 u64 block_size)
{
	int ret;

	ret = bel_pool_reserve_region(&dev->pool, length, block_size,
				      &region->slot, &region->first_offset,
				      &region->nr_blocks);
	if (ret)
		return ret;
	beluga_poison_attach(region);
	ret = beluga_region_sysfs_add(region);
	if (ret) {
		bel_pool_abort_region(&dev->pool, region->slot);
		return ret;
	}
	/* A shared region comes to the list only now (a local one is on it). */
	if (list_empty(&region->preparing))
		beluga_region_preparing(region);
	region->reserved = true;
	return 0;
}

/* Undo beluga_region_reserve_locked() (the region was never visible). */
void beluga_region_unreserve_locked(struct beluga_device *dev,
				    struct beluga_region *region)
{
	beluga_region_prepared(region);
	region->reserved = false;
	/* Waits for sysfs readers, which never take regions_rwsem. */
	beluga_region_sysfs_del(region);
	bel_pool_abort_region(&dev->pool, region->slot);
}

/*
 * Step 4 of every kind: make the reserved @region the pool's (regions[],
 * the core's blocks). Cannot fail. The reference the ATTACH allocated it
 * with becomes the pool's: a DETACH may free it once the locks are
 * dropped.
 */
void beluga_region_commit_locked(struct beluga_device *dev,
				 struct beluga_region *region)
{
	beluga_region_prepared(region);
	region->reserved = false;
	dev->regions[region->slot] = region;
	bel_pool_commit_region(&dev->pool, region->slot);
	dev_info(dev->misc.this_device,
		 "attached %s as region %u: %llu bytes, %u blocks at offset 0x%llx\n",
		 region->name, region->slot, region->length, region->nr_blocks,
		 region->first_offset);
}

/* The attach op of the single-host pool (beluga_local_pool_ops). */
int beluga_local_attach(struct beluga_device *dev,
			struct beluga_region *region, struct beluga_attach *arg)
{
	int ret;

	ret = beluga_region_prepare(dev, region);
	if (ret)
		return ret;

	/*
	 * dev->ops changes only under beluga_claim_mutex and, for the block
	 * commands, ops_rwsem: a single-host attach leaves ops_rwsem alone
	 * and does not hold the block commands up.
	 */
	mutex_lock(&beluga_claim_mutex);
	down_write(&dev->regions_rwsem);
	/* A pool of another kind (a shared pool) came meanwhile. */
	ret = beluga_region_alone_locked(dev, region);
	if (ret)
		goto out_unclaim;
	ret = beluga_region_reserve_locked(dev, region, region->length,
					   arg->block_size);
	if (ret)
		goto out_unclaim;
	up_write(&dev->regions_rwsem);
	mutex_unlock(&beluga_claim_mutex);
	return 0;

out_unclaim:
	beluga_region_prepared(region);
	beluga_region_unclaim(region);
	up_write(&dev->regions_rwsem);
	mutex_unlock(&beluga_claim_mutex);
	return ret;
}

/* The attach_abort op of the single-host pool. */
void beluga_local_attach_abort(struct beluga_device *dev,
			       struct beluga_region *region)
{
	beluga_region_unreserve_locked(dev, region);
	beluga_region_unclaim(region);
}

/*
 * The pool kind an ATTACH asks for: a shared pool with
 * BELUGA_ATTACH_SHARED, which a module built without shared pools
 * (BELUGA_SHARED=n) does not have.
 */
static const struct beluga_pool_ops *
beluga_attach_ops(const struct beluga_attach *arg)
{
	if (arg->flags & BELUGA_ATTACH_SHARED)
		return BELUGA_SHARED_POOL_OPS;
	return &beluga_local_pool_ops;
}

int beluga_attach_prepare(struct beluga_device *dev, struct beluga_attach *arg,
			  struct beluga_region **prepared)
{
	const struct beluga_pool_ops *ops;
	struct beluga_region *region;
	int ret;

	ret = beluga_attach_validate(arg);
	if (ret)
		return ret;
	ops = beluga_attach_ops(arg);
	if (!ops)
		return -EOPNOTSUPP;

	region = beluga_region_alloc();
	if (!region)
		return -ENOMEM;
	region->dev = dev;
	region->ops = ops;
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

	ret = ops->attach(dev, region, arg);
	if (ret) {
		beluga_region_put(region);
		return ret;
	}
	/* Reserved: nothing else can see @region, let alone free it. */
	arg->region_id = region->slot;
	arg->first_offset = region->first_offset;
	arg->nr_blocks = region->nr_blocks;
	*prepared = region;
	return 0;
}

/*
 * The locks of step 4. A kind with a detach step (a shared pool) changes
 * the pool's ops at its commit and abort: the block commands stop
 * meanwhile; else they go on.
 */
static void beluga_attach_lock(struct beluga_region *region)
{
	mutex_lock(&beluga_claim_mutex);
	if (region->ops->detach)
		down_write(&region->dev->ops_rwsem);
	down_write(&region->dev->regions_rwsem);
}

static void beluga_attach_unlock(struct beluga_region *region)
{
	up_write(&region->dev->regions_rwsem);
	if (region->ops->detach)
		up_write(&region->dev->ops_rwsem);
	mutex_unlock(&beluga_claim_mutex);
}

void beluga_attach_commit(struct beluga_region *region)
{
	beluga_attach_lock(region);
	region->ops->attach_commit(region->dev, region);
	beluga_attach_unlock(region);
}

void beluga_attach_abort(struct beluga_region *region)
{
	beluga_attach_lock(region);
	region->ops->attach_abort(region->dev, region);
	beluga_attach_unlock(region);
	beluga_region_put(region);
}

/* Both steps, for the regions attached at module load. */
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

	/* The pool's kind lets go first (a shared pool is left). */
	if (dev->ops->detach) {
		ret = dev->ops->detach(dev, region, unloading);
		if (ret)
			return ret;
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
	bool stop_ops;
	int ret;

	mutex_lock(&beluga_claim_mutex);
	/*
	 * dev->ops is stable under beluga_claim_mutex. A kind with a detach
	 * step (a shared pool) changes the pool's ops: the block commands
	 * stop meanwhile; else they go on (beluga_local_attach()).
	 */
	stop_ops = dev->ops->detach;
	if (stop_ops)
		down_write(&dev->ops_rwsem);
	down_write(&dev->regions_rwsem);
	ret = beluga_detach_locked(dev, slot, evict, evicted, false);
	up_write(&dev->regions_rwsem);
	if (stop_ops)
		up_write(&dev->ops_rwsem);
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
	down_write(&dev->ops_rwsem);
	down_write(&dev->regions_rwsem);
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		if (!dev->regions[slot])
			continue;
		if (beluga_detach_locked(dev, slot, true, NULL, true))
			dev_err(dev->misc.this_device,
				"region %u still in use at unload\n", slot);
	}
	up_write(&dev->regions_rwsem);
	up_write(&dev->ops_rwsem);
	mutex_unlock(&beluga_claim_mutex);
}
