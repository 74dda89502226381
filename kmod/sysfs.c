// SPDX-License-Identifier: GPL-2.0
/*
 * sysfs: /sys/class/misc/beluga/ shows the pool, stats/ its counters and
 * regionN/ each attached region, one value per file; the pool's device
 * sends a uevent when a region is attached or detached. Documented in
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

#include "beluga_glue.h"

/* --- pool attributes ---------------------------------------------------- */

static struct beluga_device *to_beluga(struct device *dev)
{
	/* misc_register() leaves the miscdevice as the device's drvdata. */
	return container_of((struct miscdevice *)dev_get_drvdata(dev),
			    struct beluga_device, misc);
}

/*
 * One file per field of STATS (BELUGA_STATS_FIELDS): geometry and
 * occupancy in the pool's directory, counters in stats/. Each attribute
 * knows its field's offset in struct bel_stats and its kind, and is listed
 * in both groups below; each group's is_visible shows it only where it
 * belongs, world-readable (0444) for geometry, root-only (0400) otherwise.
 */
struct beluga_stat_attr {
	struct device_attribute dattr;
	size_t offset;			/* of the field in struct bel_stats */
	int kind;			/* BELUGA_STAT_* */
};

static ssize_t beluga_stat_show(struct device *dev,
				struct device_attribute *attr, char *buf)
{
	const struct beluga_stat_attr *sa =
		container_of(attr, struct beluga_stat_attr, dattr);
	struct bel_stats s;
	u64 v;

	beluga_pool_stats(to_beluga(dev), &s);
	memcpy(&v, (const char *)&s + sa->offset, sizeof(v));
	return sysfs_emit(buf, "%llu\n", v);
}

#define BELUGA_STAT_ATTR(_name, _kind, _help)				\
static struct beluga_stat_attr beluga_stat_attr_##_name = {		\
	.dattr = __ATTR(_name, 0400, beluga_stat_show, NULL),		\
	.offset = offsetof(struct bel_stats, _name),			\
	.kind = BELUGA_STAT_##_kind,					\
};
BELUGA_STATS_FIELDS(BELUGA_STAT_ATTR)

#undef BELUGA_STAT_ATTR

#define BELUGA_STAT_ATTR_PTR(_name, _kind, _help)			\
	&beluga_stat_attr_##_name.dattr.attr,
#define BELUGA_STAT_INDEX(_name, _kind, _help)	BELUGA_STAT_INDEX_##_name,
enum { BELUGA_STATS_FIELDS(BELUGA_STAT_INDEX) BELUGA_NR_STAT_ATTRS };
#undef BELUGA_STAT_INDEX

/* The STATS files of the pool's directory (@counters false) or stats/. */
static umode_t beluga_stat_visible(struct attribute *attr, int n,
				   bool counters)
{
	const struct beluga_stat_attr *sa;
	bool counter;

	if (n >= BELUGA_NR_STAT_ATTRS)
		return counters ? attr->mode : 0;
	sa = container_of(attr, struct beluga_stat_attr, dattr.attr);
	counter = sa->kind == BELUGA_STAT_COUNTER;
	if (counter != counters)
		return 0;
	return sa->kind == BELUGA_STAT_GEOMETRY ? 0444 : 0400;
}

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
	&dev_attr_attaching.attr,
	NULL,
};

static const struct attribute_group beluga_pool_group = {
	.attrs = beluga_pool_attrs,
};

static struct attribute *beluga_pool_stat_attrs[] = {
	BELUGA_STATS_FIELDS(BELUGA_STAT_ATTR_PTR)
	NULL,
};

static umode_t beluga_pool_stat_visible(struct kobject *kobj,
					struct attribute *attr, int n)
{
	return beluga_stat_visible(attr, n, false);
}

static const struct attribute_group beluga_pool_stats_group = {
	.attrs = beluga_pool_stat_attrs,
	.is_visible = beluga_pool_stat_visible,
};

/* The counters, then the fault counters that STATS does not carry. */
static struct attribute *beluga_stats_attrs[] = {
	BELUGA_STATS_FIELDS(BELUGA_STAT_ATTR_PTR)
	&dev_attr_pte_faults.attr,
	&dev_attr_pmd_faults.attr,
	NULL,
};

static umode_t beluga_stats_visible(struct kobject *kobj,
				    struct attribute *attr, int n)
{
	return beluga_stat_visible(attr, n, true);
}

static const struct attribute_group beluga_stats_group = {
	.name = "stats",
	.attrs = beluga_stats_attrs,
	.is_visible = beluga_stats_visible,
};

const struct attribute_group *beluga_dev_groups[] = {
	&beluga_pool_group,
	&beluga_pool_stats_group,
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
 * A KOBJ_CHANGE uevent of the pool's device when a region comes or goes,
 * so that udev rules and monitors see attach and detach:
 *   BELUGA_EVENT=attach|detach BELUGA_POOL=beluga BELUGA_REGION=N
 *   BELUGA_REGION_NAME=dax0.0 BELUGA_BACKEND=dax|node
 * On the device, not on regionN: the region is a bare kobject, and the
 * device kset's uevent filter drops the events of anything but a device.
 * A failure to send is only logged: the region's state does not depend
 * on whether anyone listens.
 */
static void beluga_region_uevent(struct beluga_region *region,
				 const char *event)
{
	struct device *dev = region->dev->misc.this_device;
	char ev[32], pool[32], slot[32], name[24 + BELUGA_NAME_LEN], be[32];
	char *envp[6] = { ev, pool, slot, name, be, NULL };
	int ret;

	snprintf(ev, sizeof(ev), "BELUGA_EVENT=%s", event);
	snprintf(pool, sizeof(pool), "BELUGA_POOL=%s", region->dev->name);
	snprintf(slot, sizeof(slot), "BELUGA_REGION=%u", region->slot);
	snprintf(name, sizeof(name), "BELUGA_REGION_NAME=%s", region->name);
	snprintf(be, sizeof(be), "BELUGA_BACKEND=%s",
		 region->backend == BELUGA_BACKEND_DAX ? "dax" : "node");
	ret = kobject_uevent_env(&dev->kobj, KOBJ_CHANGE, envp);
	if (ret)
		dev_dbg(dev, "uevent %s of region %u: %d\n", event,
			region->slot, ret);
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
	if (ret)
		return ret;
	if (region->dax_dev) {
		ret = sysfs_create_link(&region->kobj, &region->dax_dev->kobj,
					"dax");
		if (ret) {
			kobject_del(&region->kobj);
			return ret;
		}
	}
	beluga_region_uevent(region, "attach");
	return 0;
}

void beluga_region_sysfs_del(struct beluga_region *region)
{
	if (region->dax_dev)
		sysfs_remove_link(&region->kobj, "dax");
	kobject_del(&region->kobj);
	beluga_region_uevent(region, "detach");
}
