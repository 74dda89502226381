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

#include "beluga_glue.h"

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
	INIT_LIST_HEAD(&bf->range_node);
	bf->client = bel_client_new(&dev->pool);
	if (!bf->client)
		goto err_free;
	/* Its part in the pool's shared pools, when the module has them. */
	if (beluga_mh_file_open(bf))
		goto err_client;
	file->private_data = bf;
	/* One address_space per pool, whatever node it was opened through. */
	file->f_mapping = dev->inode->i_mapping;
	/* Offsets reach far past any file size; the mapping is not seekable. */
	return nonseekable_open(inode, file);

err_client:
	bel_client_release(bf->client);
err_free:
	kfree(bf);
	return -ENOMEM;
}

int beluga_release(struct inode *inode, struct file *file)
{
	struct beluga_file *bf = file->private_data;

	beluga_devlease_file_release(bf);
	beluga_mh_file_release(bf);
	bel_client_release(bf->client);
	kfree(bf);
	return 0;
}
