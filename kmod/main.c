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
 *   beluga.pools=2
 *
 * pools=N creates N independent pools, /dev/beluga, /dev/beluga1, ...,
 * each with its own regions, keys and file permissions: the way to keep
 * tenants apart. dax= and node= attach to the first pool.
 *
 * Device-dax ranges are given by physical address and size (from
 * /sys/bus/dax/devices/daxX.Y/resource and size): a module has no supported
 * way to resolve a dax device by name. "belugactl apply", run by the
 * beluga.service unit, attaches by device name instead.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/fs_context.h>
#include <linux/init.h>
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/mount.h>
#include <linux/pseudo_fs.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "beluga_glue.h"

#define BELUGA_MAX_POOLS	16

struct beluga_device *beluga_pools;
int beluga_nr_pools;
/* Serialises ATTACH and DETACH across pools (beluga_glue.h). */
DEFINE_MUTEX(beluga_claim_mutex);

/*
 * Set (release) once init can no longer fail; open() reads it (acquire)
 * and refuses until then. The device nodes exist before the module-
 * parameter ATTACH runs, and when init fails the module is freed whatever
 * references its files hold: no file may be open by then.
 */
static bool beluga_ready;

bool beluga_accepting_opens(void)
{
	/* Pairs with the release in beluga_init(): the pools are set up. */
	return smp_load_acquire(&beluga_ready);
}

static unsigned int pools = 1;
module_param(pools, uint, 0444);
MODULE_PARM_DESC(pools, "Independent pools (device nodes) to create, 1-16 (default 1)");

static char *block_size;
module_param(block_size, charp, 0444);
MODULE_PARM_DESC(block_size, "Block size of regions attached at load, e.g. 2M (default 2M)");

static char *dax;
module_param(dax, charp, 0444);
MODULE_PARM_DESC(dax, "Device-dax ranges to attach at load: START:SIZE[:NAME][,...]");

static char *node;
module_param(node, charp, 0444);
MODULE_PARM_DESC(node, "NUMA node memory to attach at load: NODE:SIZE[,...]");

/*
 * An internal file system holding one inode per pool. Every file opened on
 * a pool's device node maps through that inode's address_space, whatever
 * device node it was opened through, so that one unmap_mapping_range()
 * reaches every mapping of the pool (a fenced shared pool, mh.c). No
 * .owner: the mount lives from load to unload and must not pin the module.
 */
#define BELUGA_FS_MAGIC		0x42454c55	/* "BELU" */

static int beluga_fs_init_fs_context(struct fs_context *fc)
{
	return init_pseudo(fc, BELUGA_FS_MAGIC) ? 0 : -ENOMEM;
}

static struct file_system_type beluga_fs_type = {
	.name = "beluga",
	.init_fs_context = beluga_fs_init_fs_context,
	.kill_sb = kill_anon_super,
};

static struct vfsmount *beluga_fs_mnt;
static int beluga_fs_count;

static const struct file_operations beluga_fops = {
	.owner = THIS_MODULE,
	.open = beluga_open,
	.release = beluga_release,
	.unlocked_ioctl = beluga_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.uring_cmd = beluga_uring_cmd,
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

static int beluga_attach_param(struct beluga_device *dev, const char *param,
			       const char *list, enum beluga_backend backend,
			       u64 bsize)
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
		ret = beluga_region_attach(dev, &arg);
		if (ret) {
			/*
			 * A warning: the load fails with @ret, and the cause
			 * is the parameter (a range or size the machine does
			 * not have), not a fault of the module.
			 */
			pr_warn("%s=: attaching '%s' failed: %d; the module is not loaded\n",
				param, arg.name, ret);
			break;
		}
	}
	kfree(copy);
	return ret;
}

static int beluga_attach_params(struct beluga_device *dev)
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
		ret = beluga_attach_param(dev, "dax", dax, BELUGA_BACKEND_DAX,
					  bsize);
		if (ret)
			return ret;
	}
	if (node) {
		ret = beluga_attach_param(dev, "node", node,
					  BELUGA_BACKEND_NODE, bsize);
		if (ret)
			return ret;
	}
	return 0;
}

static int beluga_pool_register(struct beluga_device *dev, int id)
{
	int ret;

	ret = bel_pool_init(&dev->pool);
	if (ret)
		return ret;
	dev->inode = alloc_anon_inode(beluga_fs_mnt->mnt_sb);
	if (IS_ERR(dev->inode)) {
		ret = PTR_ERR(dev->inode);
		goto err_pool;
	}
	/*
	 * A device-dax inode to memory_failure() (fs/dax.c dax_lock_folio():
	 * IS_DAX and S_ISCHR of folio->mapping->host; poison.c). GUP's
	 * vma_is_fsdax() looks at the misc device's inode instead, also a
	 * char device, so FOLL_LONGTERM pins stay allowed.
	 */
	dev->inode->i_mode |= S_IFCHR;
	dev->inode->i_flags |= S_DAX;
	init_rwsem(&dev->regions_rwsem);
	init_rwsem(&dev->ops_rwsem);
	mutex_init(&dev->index_mutex);
	beluga_devlease_init(dev);
	/* Single-host until a shared ATTACH (pool_ops.c). */
	dev->ops = &beluga_local_pool_ops;
	ret = beluga_mh_pool_init(dev);
	if (ret)
		goto err_inode;
	atomic64_set(&dev->pte_faults, 0);
	atomic64_set(&dev->pmd_faults, 0);
	if (id)
		snprintf(dev->name, sizeof(dev->name), "beluga%d", id);
	else
		strscpy(dev->name, "beluga", sizeof(dev->name));

	dev->misc.minor = MISC_DYNAMIC_MINOR;
	dev->misc.name = dev->name;
	dev->misc.fops = &beluga_fops;
	dev->misc.groups = beluga_dev_groups;
	/* Root only until udev rules or the operator grant more. */
	dev->misc.mode = 0600;

	ret = misc_register(&dev->misc);
	if (ret)
		goto err_mh;
	return 0;

err_mh:
	beluga_mh_pool_exit(dev);
err_inode:
	iput(dev->inode);
err_pool:
	bel_pool_destroy(&dev->pool);
	return ret;
}

/* No file is open: each one holds a reference on this module. */
static void beluga_pool_unregister(struct beluga_device *dev)
{
	beluga_region_detach_all(dev);
	misc_deregister(&dev->misc);
	beluga_mh_pool_exit(dev);
	iput(dev->inode);
	beluga_index_exit(dev);
	bel_pool_destroy(&dev->pool);
}

static int __init beluga_init(void)
{
	int ret;

	if (pools < 1 || pools > BELUGA_MAX_POOLS) {
		pr_err("pools=%u: must be 1 to %d\n", pools, BELUGA_MAX_POOLS);
		return -EINVAL;
	}
	ret = simple_pin_fs(&beluga_fs_type, &beluga_fs_mnt, &beluga_fs_count);
	if (ret)
		return ret;
	beluga_pools = kcalloc(pools, sizeof(*beluga_pools), GFP_KERNEL);
	if (!beluga_pools) {
		ret = -ENOMEM;
		goto err_fs;
	}

	beluga_debugfs_init();
	for (beluga_nr_pools = 0; beluga_nr_pools < pools; beluga_nr_pools++) {
		ret = beluga_pool_register(&beluga_pools[beluga_nr_pools],
					   beluga_nr_pools);
		if (ret)
			goto err_pools;
		beluga_debugfs_add_pool(&beluga_pools[beluga_nr_pools]);
	}

	ret = beluga_attach_params(&beluga_pools[0]);
	if (ret)
		goto err_pools;
	/* Pairs with beluga_accepting_opens(): init is complete. */
	smp_store_release(&beluga_ready, true);
	pr_info("ready: %d pool(s), /dev/beluga, ABI %d\n", beluga_nr_pools,
		BELUGA_ABI_VERSION);
	return 0;

err_pools:
	/* First: its files point into the pools. */
	beluga_debugfs_exit();
	while (beluga_nr_pools--)
		beluga_pool_unregister(&beluga_pools[beluga_nr_pools]);
	kfree(beluga_pools);
err_fs:
	simple_release_fs(&beluga_fs_mnt, &beluga_fs_count);
	return ret;
}

static void __exit beluga_exit(void)
{
	beluga_debugfs_exit();
	while (beluga_nr_pools--)
		beluga_pool_unregister(&beluga_pools[beluga_nr_pools]);
	kfree(beluga_pools);
	simple_release_fs(&beluga_fs_mnt, &beluga_fs_count);
}

module_init(beluga_init);
module_exit(beluga_exit);

MODULE_DESCRIPTION("Beluga: KV-cache block pool on CXL memory");
MODULE_LICENSE("GPL");
MODULE_VERSION(BELUGA_VERSION);
