// SPDX-License-Identifier: GPL-2.0
/*
 * The pool ops table (struct beluga_pool_ops, beluga_glue.h): one seam between
 * the glue and the kinds of pool. A pool runs on the single-host portable
 * core, the table below, until an ATTACH makes it a shared multi-host pool
 * (mh.c, beluga_shared_pool_ops), and again after that region's DETACH.
 * ioctl.c, mmap.c, sysfs.c, poison.c and region.c call through the pool's
 * table, or through a region's (the table it was attached with), and do
 * not ask which kind a pool is.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/rwsem.h>

#include "beluga_glue.h"

/*
 * The pool's ops, with ops_rwsem held for reading so that the pool's kind
 * cannot change while a block command runs. Only the operation runs under
 * the lock: the ioctl layer copies the arrays in before and out after.
 */
const struct beluga_pool_ops *beluga_pool_ops_begin(struct beluga_device *dev)
{
	down_read(&dev->ops_rwsem);
	return dev->ops;
}

const struct beluga_pool_ops *beluga_pool_ops_trybegin(struct beluga_device *dev)
{
	if (!down_read_trylock(&dev->ops_rwsem))
		return NULL;
	return dev->ops;
}

void beluga_pool_ops_end(struct beluga_device *dev)
{
	up_read(&dev->ops_rwsem);
}

/*
 * STATS and the stats/ attributes: the core's snapshot, or for a shared
 * pool this host's view of it (mh.c). Counters run since load, across
 * the kinds the pool has been.
 */
void beluga_pool_stats(struct beluga_device *dev, struct bel_stats *s)
{
	beluga_pool_ops_begin(dev)->stats(dev, s);
	beluga_pool_ops_end(dev);
}

/* --- the single-host pool: the portable core ---------------------------- */

static void beluga_local_stats(struct beluga_device *dev, struct bel_stats *s)
{
	bel_pool_stats(&dev->pool, s);
}

static int beluga_local_region_stats(struct beluga_region *region,
				     struct bel_region_stats *rs)
{
	return bel_region_stats(&region->dev->pool, region->slot, rs);
}

/* Retire the blocks that overlap @len bytes at @region_offset. */
static void beluga_local_retire(struct beluga_region *region,
				u64 region_offset, u64 len)
{
	struct beluga_device *dev = region->dev;
	u64 bs = dev->pool.block_size;
	u64 end = min_t(u64, region_offset + len,
			(u64)region->nr_blocks * bs);
	u64 off;

	for (off = round_down(region_offset, bs); off < end; off += bs)
		if (bel_retire_offset(&dev->pool, region->first_offset + off) > 0)
			dev_warn_ratelimited(dev->misc.this_device,
					     "%s: memory error: block at offset 0x%llx retired\n",
					     region->name,
					     region->first_offset + off);
}

static int beluga_local_alloc(struct beluga_file *bf, u32 count, u64 *offsets,
			      struct beluga_evicted_key *evicted,
			      u32 *nr_evicted)
{
	return bel_alloc_evicting(bf->client, count, offsets, evicted,
				  nr_evicted);
}

static int beluga_local_free(struct beluga_file *bf, u32 count,
			     const u64 *offsets)
{
	return bel_free(bf->client, count, offsets);
}

static int beluga_local_release(struct beluga_file *bf, u32 count,
				const u64 *offsets)
{
	return bel_release(bf->client, count, offsets);
}

static int beluga_local_publish(struct beluga_file *bf, u64 ns, u32 count,
				struct beluga_publish_item *items,
				u32 *published, u32 *exists, u32 *failed)
{
	return bel_publish(bf->client, ns, count, items, published, exists,
			   failed);
}

static int beluga_local_lookup(struct beluga_file *bf, u64 ns, u32 count,
			       const struct beluga_key *keys, bool pin,
			       u64 *offsets, u32 *hits)
{
	return bel_lookup(bf->client, ns, count, keys, pin, offsets, hits);
}

static int beluga_local_evict(struct beluga_device *dev,
			      struct beluga_evict *arg)
{
	int ret;

	if (arg->flags & BELUGA_EVICT_NAMESPACE) {
		arg->evicted = bel_evict_ns(&dev->pool, arg->ns, &arg->busy);
		return 0;
	}
	ret = bel_evict_key(&dev->pool, arg->ns, &arg->key);
	arg->evicted = ret ? 0 : 1;
	arg->busy = ret == -EBUSY ? 1 : 0;
	return ret;
}

/*
 * Every region's pages are served as they are, with no fence to check:
 * mmap, fault_begin, fault_end and detach have nothing to do.
 */
const struct beluga_pool_ops beluga_local_pool_ops = {
	.attach = beluga_local_attach,
	.attach_commit = beluga_region_commit_locked,
	.attach_abort = beluga_local_attach_abort,
	.stats = beluga_local_stats,
	.region_stats = beluga_local_region_stats,
	.retire = beluga_local_retire,
	.alloc = beluga_local_alloc,
	.free = beluga_local_free,
	.release = beluga_local_release,
	.publish = beluga_local_publish,
	.lookup = beluga_local_lookup,
	.evict = beluga_local_evict,
	/* The pool's spinlock, and the file's mutex (its own commands). */
	.block_cmds_quick = true,
	.index_copy = true,
};
