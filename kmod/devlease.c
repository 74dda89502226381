// SPDX-License-Identifier: GPL-2.0
/*
 * Device leases (uapi: BELUGA_IOC_WATCHDOG, BELUGA_IOC_DEVICE_RANGE;
 * Documentation/multihost.md, section 10). A fence zaps CPU mappings, but
 * devices that pinned a shared pool's pages (cudaHostRegister, ibv_reg_mr)
 * keep reaching them; only a reset of the host stops their DMA. So devices
 * may pin a shared pool only through a declared device range, and only
 * while a watchdog daemon pets a hardware watchdog for the host:
 *
 *   - a device range makes the declaring file's later mappings of it
 *     pinnable, and puts a device lease with W (the watchdog's timeout)
 *     into the host's record, so that the other hosts wait lease + W +
 *     lease/2 of silence before they reuse what the host held (mh.c,
 *     core/mh_host.c);
 *   - at a fence each range's eventfd is signalled, and the daemon is told
 *     HOLD (stop petting) until every range is closed and no page of the
 *     pool is referenced from outside: the devices let go in time, or the
 *     host is reset within W.
 *
 * This file keeps the pool's side of both commands (the daemon's link, the
 * ranges and their files); what is a shared pool's (the record, the
 * fence, the rejoin) is in mh.c. On a pool that is not shared every
 * mapping is pinnable already: a range then only answers W = 0.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/eventfd.h>
#include <linux/mm.h>
#include <linux/spinlock.h>

#include "beluga_glue.h"

void beluga_devlease_init(struct beluga_device *dev)
{
	spin_lock_init(&dev->devlease_lock);
	mutex_init(&dev->devlease_mutex);
	INIT_LIST_HEAD(&dev->device_ranges);
}

u32 beluga_devlease_nr_ranges(struct beluga_device *dev)
{
	return READ_ONCE(dev->nr_device_ranges);
}

/* The registered daemon's W, or 0 when none is registered. */
u32 beluga_devlease_watchdog_ms(struct beluga_device *dev)
{
	u32 ms;

	spin_lock(&dev->devlease_lock);
	ms = dev->watchdog ? dev->watchdog_ms : 0;
	spin_unlock(&dev->devlease_lock);
	return ms;
}

/* The devices must let go: signal every declared range's eventfd. */
void beluga_devlease_signal(struct beluga_device *dev)
{
	struct beluga_file *bf;

	spin_lock(&dev->devlease_lock);
	list_for_each_entry(bf, &dev->device_ranges, range_node)
		if (bf->range_efd)
			beluga_eventfd_signal(bf->range_efd);
	spin_unlock(&dev->devlease_lock);
}

bool beluga_devlease_pinnable(struct beluga_file *bf,
			      struct vm_area_struct *vma)
{
	u64 start = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;

	/* Paired with the release in beluga_devlease_range(). */
	if (!smp_load_acquire(&bf->has_range))
		return false;
	return start >= bf->range_start && start + len <= bf->range_end;
}

int beluga_devlease_watchdog(struct beluga_file *bf,
			     struct beluga_watchdog *arg)
{
	struct beluga_device *dev = bf->dev;
	int ret = 0;

	if (arg->flags & BELUGA_WATCHDOG_REGISTER) {
		spin_lock(&dev->devlease_lock);
		if ((dev->watchdog && dev->watchdog != bf) ||
		    (dev->nr_device_ranges &&
		     arg->timeout_ms != dev->watchdog_ms)) {
			ret = -EBUSY;
		} else {
			dev->watchdog = bf;
			dev->watchdog_ms = arg->timeout_ms;
		}
		spin_unlock(&dev->devlease_lock);
		if (ret)
			return ret;
	} else {
		spin_lock(&dev->devlease_lock);
		if (dev->watchdog != bf)
			ret = -ENOLINK;
		arg->timeout_ms = dev->watchdog_ms;
		spin_unlock(&dev->devlease_lock);
		if (ret)
			return ret;
	}
	arg->answer = beluga_mh_watchdog_hold(dev) ? BELUGA_WATCHDOG_HOLD :
						      BELUGA_WATCHDOG_FEED;
	arg->device_ranges = beluga_devlease_nr_ranges(dev);
	return 0;
}

/*
 * Declare @bf's device range (the struct's fields are checked, and @efd
 * is the caller's eventfd or NULL). On success the range owns @efd.
 */
int beluga_devlease_range(struct beluga_file *bf,
			  struct beluga_device_range *arg,
			  struct eventfd_ctx *efd)
{
	struct beluga_device *dev = bf->dev;
	u32 fence_ms = 0;
	u64 map_size;
	int ret;

	down_read(&dev->regions_rwsem);
	map_size = bel_pool_map_size(&dev->pool);
	up_read(&dev->regions_rwsem);
	if (!map_size)
		return -ENODEV;
	if (arg->offset >= map_size || arg->length > map_size - arg->offset)
		return -ENXIO;

	/* Serialises declarations with the end of the lease (mh.c's tick). */
	mutex_lock(&dev->devlease_mutex);
	if (bf->has_range) {
		ret = -EBUSY;
		goto out;
	}
	/* A shared pool: the record's device lease, on the media first. */
	ret = beluga_mh_device_lease(bf, &fence_ms);
	if (ret < 0)
		goto out;
	bf->range_start = arg->offset;
	bf->range_end = arg->offset + arg->length;
	bf->range_efd = efd;
	/* Only ranges under a device lease are signalled and waited for. */
	if (ret != BELUGA_RANGE_LOCAL) {
		spin_lock(&dev->devlease_lock);
		list_add(&bf->range_node, &dev->device_ranges);
		dev->nr_device_ranges++;
		bf->range_counted = true;
		spin_unlock(&dev->devlease_lock);
	}
	ret = 0;
	/* The range before the flag: mmap() reads them without a lock. */
	smp_store_release(&bf->has_range, true);
	arg->fence_ms = fence_ms;
out:
	mutex_unlock(&dev->devlease_mutex);
	return ret;
}

/* close(): the file's range ends; a daemon's link ends. */
void beluga_devlease_file_release(struct beluga_file *bf)
{
	struct beluga_device *dev = bf->dev;
	bool orphaned = false;

	spin_lock(&dev->devlease_lock);
	if (bf->range_counted) {
		list_del(&bf->range_node);
		dev->nr_device_ranges--;
	}
	if (dev->watchdog == bf) {
		dev->watchdog = NULL;
		orphaned = dev->nr_device_ranges;
	}
	spin_unlock(&dev->devlease_lock);
	if (bf->range_efd)
		eventfd_ctx_put(bf->range_efd);
	if (orphaned)
		pr_warn("%s: the watchdog daemon left while device ranges are declared: unless it disarmed its watchdog, the host resets within %u ms\n",
			dev->name, dev->watchdog_ms);
}
