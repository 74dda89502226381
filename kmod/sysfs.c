// SPDX-License-Identifier: GPL-2.0
/*
 * sysfs: /sys/class/misc/beluga/ shows the pool, stats/ its counters and
 * regionN/ each attached region. Documented in
 * Documentation/ABI/testing/sysfs-class-misc-beluga.
 *
 * The show functions never take regions_rwsem: DETACH removes a region's
 * directory while holding it, and kobject_del() waits for readers.
 *
 * Who may read: what moves with the pool's use (occupancy, pins, clients,
 * the counters, mapping counts) is root-only (0400), as are physical
 * addresses. The class directory is world-readable, and these numbers
 * would otherwise let any local user watch a tenant's traffic and hit
 * rate, a prompt-cache side channel, without any access to its device
 * node. Mode 0400 rather than a check against the node's permissions:
 * a show function cannot tell which pool's file, if any, the reader could
 * open (udev or an admin may chown the node at any time), and a tenant
 * already gets the same numbers for its own pool through BELUGA_IOC_STATS
 * and REGION_INFO on its node, which its permissions do gate. Geometry
 * (block size, regions, map size, total blocks) stays world-readable.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/device.h>
#include <linux/kobject.h>
#include <linux/slab.h>
#include <linux/sysfs.h>

#include "beluga.h"

/* --- pool attributes ---------------------------------------------------- */

static struct beluga_device *to_beluga(struct device *dev)
{
	/* misc_register() leaves the miscdevice as the device's drvdata. */
	return container_of((struct miscdevice *)dev_get_drvdata(dev),
			    struct beluga_device, misc);
}

/* _kind: RO (0444) for geometry, ADMIN_RO (0400) for what use moves. */
#define BELUGA_STAT_ATTR(_field, _kind)					\
static ssize_t _field##_show(struct device *dev,			\
			     struct device_attribute *attr, char *buf)	\
{									\
	struct bel_stats s;						\
									\
	beluga_pool_stats(to_beluga(dev), &s);				\
	return sysfs_emit(buf, "%llu\n", s._field);			\
}									\
static DEVICE_ATTR_##_kind(_field)

BELUGA_STAT_ATTR(total_blocks, RO);
BELUGA_STAT_ATTR(free_blocks, ADMIN_RO);
BELUGA_STAT_ATTR(allocated_blocks, ADMIN_RO);
BELUGA_STAT_ATTR(published_blocks, ADMIN_RO);
BELUGA_STAT_ATTR(retired_blocks, ADMIN_RO);
BELUGA_STAT_ATTR(pinned_blocks, ADMIN_RO);
BELUGA_STAT_ATTR(pins, ADMIN_RO);
BELUGA_STAT_ATTR(clients, ADMIN_RO);
BELUGA_STAT_ATTR(allocs, ADMIN_RO);
BELUGA_STAT_ATTR(frees, ADMIN_RO);
BELUGA_STAT_ATTR(publishes, ADMIN_RO);
BELUGA_STAT_ATTR(publish_races, ADMIN_RO);
BELUGA_STAT_ATTR(lookups, ADMIN_RO);
BELUGA_STAT_ATTR(lookup_keys, ADMIN_RO);
BELUGA_STAT_ATTR(lookup_hits, ADMIN_RO);
BELUGA_STAT_ATTR(releases, ADMIN_RO);
BELUGA_STAT_ATTR(evictions, ADMIN_RO);
BELUGA_STAT_ATTR(alloc_failures, ADMIN_RO);

static ssize_t block_size_show(struct device *dev,
			       struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n", READ_ONCE(to_beluga(dev)->pool.block_size));
}
static DEVICE_ATTR_RO(block_size);

static ssize_t nr_regions_show(struct device *dev,
			       struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%u\n", READ_ONCE(to_beluga(dev)->pool.nr_regions));
}
static DEVICE_ATTR_RO(nr_regions);

static ssize_t map_size_show(struct device *dev,
			     struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%llu\n", bel_pool_map_size(&to_beluga(dev)->pool));
}
static DEVICE_ATTR_RO(map_size);

static ssize_t abi_version_show(struct device *dev,
				struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%d\n", BELUGA_ABI_VERSION);
}
static DEVICE_ATTR_RO(abi_version);

static ssize_t pte_faults_show(struct device *dev,
			       struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&to_beluga(dev)->pte_faults));
}
static DEVICE_ATTR_ADMIN_RO(pte_faults);

static ssize_t pmd_faults_show(struct device *dev,
			       struct device_attribute *attr, char *buf)
{
	return sysfs_emit(buf, "%lld\n", atomic64_read(&to_beluga(dev)->pmd_faults));
}
static DEVICE_ATTR_ADMIN_RO(pmd_faults);

static ssize_t hosts_show(struct device *dev, struct device_attribute *attr,
			  char *buf)
{
	return beluga_mh_hosts_show(to_beluga(dev), buf);
}
static DEVICE_ATTR_RO(hosts);

static ssize_t attaching_show(struct device *dev,
			      struct device_attribute *attr, char *buf)
{
	return beluga_region_attaching_show(to_beluga(dev), buf);
}
static DEVICE_ATTR_RO(attaching);

static struct attribute *beluga_pool_attrs[] = {
	&dev_attr_abi_version.attr,
	&dev_attr_block_size.attr,
	&dev_attr_nr_regions.attr,
	&dev_attr_map_size.attr,
	&dev_attr_total_blocks.attr,
	&dev_attr_free_blocks.attr,
	&dev_attr_allocated_blocks.attr,
	&dev_attr_published_blocks.attr,
	&dev_attr_retired_blocks.attr,
	&dev_attr_pinned_blocks.attr,
	&dev_attr_pins.attr,
	&dev_attr_clients.attr,
	&dev_attr_hosts.attr,
	&dev_attr_attaching.attr,
	NULL,
};

static const struct attribute_group beluga_pool_group = {
	.attrs = beluga_pool_attrs,
};

static struct attribute *beluga_stats_attrs[] = {
	&dev_attr_allocs.attr,
	&dev_attr_frees.attr,
	&dev_attr_publishes.attr,
	&dev_attr_publish_races.attr,
	&dev_attr_lookups.attr,
	&dev_attr_lookup_keys.attr,
	&dev_attr_lookup_hits.attr,
	&dev_attr_releases.attr,
	&dev_attr_evictions.attr,
	&dev_attr_alloc_failures.attr,
	&dev_attr_pte_faults.attr,
	&dev_attr_pmd_faults.attr,
	NULL,
};

static const struct attribute_group beluga_stats_group = {
	.name = "stats",
	.attrs = beluga_stats_attrs,
};

const struct attribute_group *beluga_dev_groups[] = {
	&beluga_pool_group,
	&beluga_stats_group,
	NULL,
};

/* --- region attributes -------------------------------------------------- */

struct beluga_region_attr {
	struct attribute attr;
	ssize_t (*show)(struct beluga_region *region, char *buf);
};

static struct beluga_region *to_region(struct kobject *kobj)
{
	return container_of(kobj, struct beluga_region, kobj);
}

static ssize_t beluga_region_attr_show(struct kobject *kobj,
				       struct attribute *attr, char *buf)
{
	struct beluga_region_attr *ra =
		container_of(attr, struct beluga_region_attr, attr);

	return ra->show(to_region(kobj), buf);
}

static const struct sysfs_ops beluga_region_sysfs_ops = {
	.show = beluga_region_attr_show,
};

/* _mode: 0444 for geometry, 0400 for what use moves and addresses. */
#define BELUGA_REGION_ATTR(_name, _mode)				\
static struct beluga_region_attr region_attr_##_name = {		\
	.attr = { .name = __stringify(_name), .mode = _mode },		\
	.show = region_##_name##_show,					\
}

static ssize_t region_name_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%s\n", r->name);
}
BELUGA_REGION_ATTR(name, 0444);

static ssize_t region_backend_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%s\n",
			  r->backend == BELUGA_BACKEND_DAX ? "dax" : "node");
}
BELUGA_REGION_ATTR(backend, 0444);

static ssize_t region_node_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%d\n", r->node);
}
BELUGA_REGION_ATTR(node, 0444);

static ssize_t region_phys_start_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%#llx\n", (u64)r->phys_start);
}
BELUGA_REGION_ATTR(phys_start, 0400);

static ssize_t region_length_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%llu\n", r->length);
}
BELUGA_REGION_ATTR(length, 0444);

static ssize_t region_first_offset_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%#llx\n", r->first_offset);
}
BELUGA_REGION_ATTR(first_offset, 0444);

static ssize_t region_nr_blocks_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%u\n", r->nr_blocks);
}
BELUGA_REGION_ATTR(nr_blocks, 0444);

static ssize_t region_mappings_show(struct beluga_region *r, char *buf)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&r->mappings));
}
BELUGA_REGION_ATTR(mappings, 0400);

/*
 * Through the region's pool ops (a shared region's counts come from its
 * host), under ops_rwsem, which DETACH holds while it waits for sysfs
 * readers: only tried.
 */
static int beluga_region_stats(struct beluga_region *r,
			       struct bel_region_stats *rs)
{
	int ret;

	if (!down_read_trylock(&r->dev->ops_rwsem))
		return -EBUSY;
	ret = r->ops->region_stats(r, rs);
	up_read(&r->dev->ops_rwsem);
	return ret;
}

#define BELUGA_REGION_STAT_ATTR(_field)					\
static ssize_t region_##_field##_show(struct beluga_region *r, char *buf) \
{									\
	struct bel_region_stats rs;					\
	int ret = beluga_region_stats(r, &rs);				\
									\
	if (ret)							\
		return ret == -EBUSY ? ret : -ENODEV;			\
	return sysfs_emit(buf, "%llu\n", rs._field);			\
}									\
BELUGA_REGION_ATTR(_field, 0400)

BELUGA_REGION_STAT_ATTR(free_blocks);
BELUGA_REGION_STAT_ATTR(allocated_blocks);
BELUGA_REGION_STAT_ATTR(published_blocks);

static struct attribute *beluga_region_attrs[] = {
	&region_attr_name.attr,
	&region_attr_backend.attr,
	&region_attr_node.attr,
	&region_attr_phys_start.attr,
	&region_attr_length.attr,
	&region_attr_first_offset.attr,
	&region_attr_nr_blocks.attr,
	&region_attr_mappings.attr,
	&region_attr_free_blocks.attr,
	&region_attr_allocated_blocks.attr,
	&region_attr_published_blocks.attr,
	NULL,
};
ATTRIBUTE_GROUPS(beluga_region);

static void beluga_region_kobj_release(struct kobject *kobj)
{
	kfree(to_region(kobj));
}

static const struct kobj_type beluga_region_ktype = {
	.release = beluga_region_kobj_release,
	.sysfs_ops = &beluga_region_sysfs_ops,
	.default_groups = beluga_region_groups,
};

struct beluga_region *beluga_region_alloc(void)
{
	struct beluga_region *region;

	region = kzalloc(sizeof(*region), GFP_KERNEL);
	if (region)
		kobject_init(&region->kobj, &beluga_region_ktype);
	return region;
}

void beluga_region_get(struct beluga_region *region)
{
	kobject_get(&region->kobj);
}

void beluga_region_put(struct beluga_region *region)
{
	kobject_put(&region->kobj);
}

/*
 * regionN/dax links a device-dax region to its instance
 * (/sys/bus/dax/devices/daxX.Y), so that the driver model shows whose
 * range the pool uses; the claim holds a reference on the device.
 */
int beluga_region_sysfs_add(struct beluga_region *region)
{
	int ret;

	ret = kobject_add(&region->kobj,
			  &region->dev->misc.this_device->kobj,
			  "region%u", region->slot);
	if (ret || !region->dax_dev)
		return ret;
	ret = sysfs_create_link(&region->kobj, &region->dax_dev->kobj, "dax");
	if (ret)
		kobject_del(&region->kobj);
	return ret;
}

void beluga_region_sysfs_del(struct beluga_region *region)
{
	if (region->dax_dev)
		sysfs_remove_link(&region->kobj, "dax");
	kobject_del(&region->kobj);
}
