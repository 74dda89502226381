// SPDX-License-Identifier: GPL-2.0
/*
 * Per-open-file state. Every allocation and pin belongs to the struct file,
 * so ownership follows the file's lifetime: release() runs once the last
 * reference is gone (close, exit, SIGKILL, and only after every mapping of
 * the file is unmapped) and returns everything the file still holds.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/fs.h>
#include <linux/slab.h>

#include "beluga.h"

int beluga_open(struct inode *inode, struct file *file)
{
	/* The misc core leaves the miscdevice in private_data for open(). */
	struct beluga_device *dev = container_of(file->private_data,
						 struct beluga_device, misc);
	struct beluga_file *bf;

	/* Module init has not finished, and may still fail (main.c). */
	if (!beluga_accepting_opens())
		return -ENODEV;
	bf = kzalloc(sizeof(*bf), GFP_KERNEL);
	if (!bf)
		return -ENOMEM;
	bf->dev = dev;
	mutex_init(&bf->mh_lock);
	bf->client = bel_client_new(&dev->pool);
	if (!bf->client) {
		kfree(bf);
		return -ENOMEM;
	}
	bf->fence_epoch = READ_ONCE(dev->fence_epoch);
	file->private_data = bf;
	/* One address_space per pool, whatever node it was opened through. */
	file->f_mapping = dev->inode->i_mapping;
	/* Offsets reach far past any file size; the mapping is not seekable. */
	return nonseekable_open(inode, file);
}

int beluga_release(struct inode *inode, struct file *file)
{
	struct beluga_file *bf = file->private_data;

	beluga_mh_client_close(bf);
	bel_client_release(bf->client);
	mutex_destroy(&bf->mh_lock);
	kfree(bf);
	return 0;
}

/* --- block commands on the single-host core ----------------------------- */

static int beluga_local_alloc(struct beluga_file *bf, u32 count, u64 *offsets)
{
	return bel_alloc(bf->client, count, offsets);
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

const struct beluga_block_ops beluga_local_block_ops = {
	.alloc = beluga_local_alloc,
	.free = beluga_local_free,
	.release = beluga_local_release,
	.publish = beluga_local_publish,
	.lookup = beluga_local_lookup,
};
