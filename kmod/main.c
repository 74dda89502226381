// SPDX-License-Identifier: GPL-2.0
/*
 * Beluga: a KV-cache block pool on CXL memory, served by /dev/beluga.
 *
 * Module load registers the misc device and attaches the regions named by
 * the module parameters, so that a pool can be configured at boot:
 *
 *   beluga.block_size=2M
 *   beluga.dax=0x390000000:256M:dax0.0,0x3a0000000:256M:dax1.0
 *   beluga.node=1:192M
 *
 * Device-dax ranges are given by physical address and size (from
 * /sys/bus/dax/devices/daxX.Y/resource and size): a module has no supported
 * way to resolve a dax device by name. "belugactl apply", run by the
 * beluga.service unit, attaches by device name instead.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "beluga.h"

struct beluga_device beluga_dev;

static char *block_size;
module_param(block_size, charp, 0444);
MODULE_PARM_DESC(block_size, "Block size of regions attached at load, e.g. 2M (default 2M)");

static char *dax;
module_param(dax, charp, 0444);
MODULE_PARM_DESC(dax, "Device-dax ranges to attach at load: START:SIZE[:NAME][,...]");

static char *node;
module_param(node, charp, 0444);
MODULE_PARM_DESC(node, "NUMA node memory to attach at load: NODE:SIZE[,...]");

static const struct file_operations beluga_fops = {
	.owner = THIS_MODULE,
	.open = beluga_open,
	.release = beluga_release,
	.unlocked_ioctl = beluga_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = beluga_mmap,
	.get_unmapped_area = beluga_get_unmapped_area,
};

/* Parses "A:B[:NAME]" with memparse() numbers; NAME may be absent. */
static int beluga_parse_entry(char *entry, u64 *a, u64 *b, char **name)
{
	char *end;

	*a = memparse(entry, &end);
	if (end == entry || *end != ':')
		return -EINVAL;
	entry = end + 1;
	*b = memparse(entry, &end);
	if (end == entry || (*end && *end != ':'))
		return -EINVAL;
	*name = *end ? end + 1 : NULL;
	return 0;
}

static int beluga_attach_param(const char *param, const char *list,
			       enum beluga_backend backend, u64 bsize)
{
	char *copy, *cursor, *entry;
	int ret = 0;

	copy = kstrdup(list, GFP_KERNEL);
	if (!copy)
		return -ENOMEM;
	cursor = copy;
	while ((entry = strsep(&cursor, ",")) != NULL) {
		struct beluga_attach arg = {
			.size = sizeof(arg),
			.backend = backend,
			.block_size = bsize,
			.node = -1,
		};
		char *name;
		u64 a, b;

		if (!*entry)
			continue;
		ret = beluga_parse_entry(entry, &a, &b, &name);
		if (ret) {
			pr_err("%s=: cannot parse '%s'; expected %s\n", param,
			       entry, backend == BELUGA_BACKEND_DAX ?
			       "START:SIZE[:NAME]" : "NODE:SIZE");
			break;
		}
		if (backend == BELUGA_BACKEND_DAX) {
			arg.phys_start = a;
			if (!name)
				name = entry;	/* the START text */
		} else {
			arg.node = a;
		}
		arg.length = b;
		if (name)
			strscpy(arg.name, name, sizeof(arg.name));
		ret = beluga_region_attach(&arg);
		if (ret) {
			pr_err("%s=: attaching '%s' failed: %d\n", param,
			       arg.name, ret);
			break;
		}
	}
	kfree(copy);
	return ret;
}

static int beluga_attach_params(void)
{
	u64 bsize = 0;
	char *end;
	int ret;

	if (block_size) {
		bsize = memparse(block_size, &end);
		if (*end || !bsize) {
			pr_err("block_size=%s: not a size\n", block_size);
			return -EINVAL;
		}
	}
	if (dax) {
		ret = beluga_attach_param("dax", dax, BELUGA_BACKEND_DAX, bsize);
		if (ret)
			return ret;
	}
	if (node) {
		ret = beluga_attach_param("node", node, BELUGA_BACKEND_NODE,
					  bsize);
		if (ret)
			return ret;
	}
	return 0;
}

static int __init beluga_init(void)
{
	int ret;

	ret = bel_pool_init(&beluga_dev.pool);
	if (ret)
		return ret;
	init_rwsem(&beluga_dev.regions_rwsem);
	atomic64_set(&beluga_dev.pte_faults, 0);
	atomic64_set(&beluga_dev.pmd_faults, 0);

	beluga_dev.misc.minor = MISC_DYNAMIC_MINOR;
	beluga_dev.misc.name = "beluga";
	beluga_dev.misc.fops = &beluga_fops;
	beluga_dev.misc.groups = beluga_dev_groups;
	/* Opening needs group or other permission set by udev rules. */
	beluga_dev.misc.mode = 0600;

	ret = misc_register(&beluga_dev.misc);
	if (ret)
		goto err_pool;

	ret = beluga_attach_params();
	if (ret)
		goto err_detach;
	pr_info("ready: /dev/beluga, ABI %d\n", BELUGA_ABI_VERSION);
	return 0;

err_detach:
	beluga_region_detach_all();
	misc_deregister(&beluga_dev.misc);
err_pool:
	bel_pool_destroy(&beluga_dev.pool);
	return ret;
}

static void __exit beluga_exit(void)
{
	/* No file is open: each one holds a reference on this module. */
	beluga_region_detach_all();
	misc_deregister(&beluga_dev.misc);
	bel_pool_destroy(&beluga_dev.pool);
}

module_init(beluga_init);
module_exit(beluga_exit);

MODULE_DESCRIPTION("Beluga: KV-cache block pool on CXL memory");
MODULE_LICENSE("GPL");
MODULE_VERSION("1.0");
