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
