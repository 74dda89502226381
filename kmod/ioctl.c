// SPDX-License-Identifier: GPL-2.0
/*
 * ioctl and io_uring dispatch, the way iommufd's is built. Each command's
 * struct starts with its own size; the dispatcher checks who may ask,
 * copies the struct in with copy_struct_from_user() (accepting older and
 * newer userspace) and runs the command. An io_uring command
 * (IORING_OP_URING_CMD) carries the ioctl's number and argument in its
 * SQE and runs through the same dispatcher, so the two cannot differ.
 * The command answers the caller itself, when its answer is complete,
 * with beluga_ucmd_respond(): the struct goes back up to the smaller of
 * the two sizes. Batch arrays are copied into kernel
 * buffers before the core runs, and results are copied out after. What a
 * command has done by the time its answer turns out not to be writable is
 * in the uapi header, with each command; ATTACH answers before the new
 * region becomes visible, so nothing of it is left then. Block commands
 * run through the pool's struct beluga_pool_ops: the single-host core or
 * a shared pool. No user memory is touched while ops_rwsem or a global
 * mutex is held: a user buffer that stalls (userfaultfd, a FUSE mapping)
 * holds up nothing but its own caller.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/build_bug.h>
#include <linux/capability.h>
#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/stddef.h>
#include <linux/uaccess.h>

#include "beluga_glue.h"
#include "beluga_trace.h"
#include BELUGA_IO_URING_CMD_H
/* The uapi structs' sizes and offsets, asserted at build time. */
#include "beluga_layout.h"

/* Any command's struct (BELUGA_IOCTL_ARGS in beluga_layout.h). */
union beluga_ioctl_buf {
	BELUGA_IOCTL_ARGS(BELUGA_IOCTL_ARG_MEMBER)
};

/* One call: the caller, its struct as copied in, and where the answer goes. */
struct beluga_ucmd {
	struct beluga_file *bf;
	void __user *ubuffer;
	u32 user_size;		/* the struct's size as the caller knows it */
	void *cmd;		/* the kernel's copy of the struct */
	/*
	 * An io_uring command issued with IO_URING_F_NONBLOCK: it must not
	 * wait long (beluga_ucmd_ops_begin()).
	 */
	bool nonblock;
};

/*
 * Answer the caller: copy the struct back, as much of it as both sides
 * know. Each command calls it once its answer is complete, like
 * iommufd_ucmd_respond(); a command with nothing to answer never does.
 */
static int beluga_ucmd_respond(struct beluga_ucmd *ucmd, size_t cmd_len)
{
	if (copy_to_user(ucmd->ubuffer, ucmd->cmd,
			 min_t(size_t, ucmd->user_size, cmd_len)))
		return -EFAULT;
	return 0;
}

/* Validates a batch count and returns the array's byte size. */
static int beluga_batch_bytes(u32 count, size_t elem, size_t *bytes)
{
	if (!count)
		return -EINVAL;
	if (count > BELUGA_MAX_BATCH)
		return -E2BIG;
	*bytes = (size_t)count * elem;
	return 0;
}

/*
 * Pool commands check the pool last: every error about the arguments comes
 * first (uapi: the common errors' order), so a malformed call fails the same
 * way whether or not a region is attached.
 */
static int beluga_pool_ready(struct beluga_file *bf)
{
	if (!READ_ONCE(bf->dev->pool.nr_regions))
		return -ENODEV;
	/*
	 * A pool that is down (a fenced shared pool, rejoining): fail before
	 * ops_rwsem, which the rejoin takes for writing with a trylock that
	 * busy callers would otherwise starve.
	 */
	if (READ_ONCE(bf->dev->down))
		return -ESTALE;
	return 0;
}

/*
 * The pool's ops for a block command, with ops_rwsem held for reading; or
 * ERR_PTR(-EAGAIN) for an io_uring command issued with IO_URING_F_NONBLOCK
 * that would have to wait: io_uring then issues it again, from the start,
 * in one of its worker threads, where it may block. Nothing has changed
 * by then (the arrays copied in are copied again), so the command runs
 * once.
 *
 * Why not punt every ring command to a worker: a hop to another thread per
 * command costs more than the system call the ring saves. Why not run all
 * of them inline: the submitter (or the SQPOLL thread, which serves every
 * request of its rings) would then sleep behind a writer of ops_rwsem
 * (ATTACH or DETACH of a shared region, a shared pool's rejoin) and
 * behind a shared pool's commands, which wait for other hosts with the
 * host mutex held. What stays inline is what the ioctl's caller would
 * wait for too, and briefly: the pool's spinlock, the file's own mutex
 * (held by its other commands only), GFP_KERNEL allocations, and page
 * faults on the caller's buffers, which io_uring's own requests take
 * inline as well. beluga_undo() waits for ops_rwsem even then: it runs
 * after the command changed the pool, too late to start again.
 */
static const struct beluga_pool_ops *
beluga_ucmd_ops_begin(struct beluga_ucmd *ucmd)
{
	struct beluga_device *dev = ucmd->bf->dev;
	const struct beluga_pool_ops *ops;

	if (!ucmd->nonblock)
		return beluga_pool_ops_begin(dev);
	ops = beluga_pool_ops_trybegin(dev);
	if (!ops)
		return ERR_PTR(-EAGAIN);
	if (!ops->block_cmds_quick) {
		beluga_pool_ops_end(dev);
		return ERR_PTR(-EAGAIN);
	}
	return ops;
}

static void *beluga_copy_array_in(u64 uptr, u32 count, size_t elem)
{
	size_t bytes;
	void *buf;
	int ret;

	ret = beluga_batch_bytes(count, elem, &bytes);
	if (ret)
		return ERR_PTR(ret);
	buf = kvmalloc(bytes, GFP_KERNEL);
	if (!buf)
		return ERR_PTR(-ENOMEM);
	if (copy_from_user(buf, u64_to_user_ptr(uptr), bytes)) {
		kvfree(buf);
		return ERR_PTR(-EFAULT);
	}
	return buf;
}

/*
 * The caller never learnt the result of an ALLOC (@release false: free the
 * blocks) or a LOOKUP+PIN (@release true: drop the pins). One item at a
 * time: another thread of the same file may have freed or released some
 * of them already (it can read or guess the offsets), and those must not
 * keep the rest. If the pool the command ran on has gone meanwhile (a
 * shared pool left), its allocations and pins went with it.
 */
static void beluga_undo(struct beluga_file *bf,
			const struct beluga_pool_ops *ran, u32 count,
			const u64 *offsets, bool release)
{
	const struct beluga_pool_ops *ops;
	u32 i;

	ops = beluga_pool_ops_begin(bf->dev);
	for (i = 0; ops == ran && i < count; i++) {
		if (release)
			ops->release(bf, 1, &offsets[i]);
		else
			ops->free(bf, 1, &offsets[i]);
		if (!((i + 1) % 256))
			cond_resched();
	}
	beluga_pool_ops_end(bf->dev);
}

static int beluga_cmd_info(struct beluga_ucmd *ucmd)
{
	struct beluga_info *info = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	struct bel_stats stats;

	if (info->flags)
		return -EINVAL;
	bel_pool_stats(&bf->dev->pool, &stats);
	info->abi_version = BELUGA_ABI_VERSION;
	info->nr_regions = READ_ONCE(bf->dev->pool.nr_regions);
	info->block_size = READ_ONCE(bf->dev->pool.block_size);
	info->nr_blocks = stats.total_blocks;
	info->map_size = bel_pool_map_size(&bf->dev->pool);
	info->max_batch = BELUGA_MAX_BATCH;
	info->max_regions = BELUGA_MAX_REGIONS;
	return beluga_ucmd_respond(ucmd, sizeof(*info));
}

static int beluga_cmd_stats(struct beluga_ucmd *ucmd)
{
	struct beluga_stats *out = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	struct bel_stats s;

	if (out->flags)
		return -EINVAL;
	beluga_pool_stats(bf->dev, &s);
	bel_stats_to_uapi(&s, out);
	return beluga_ucmd_respond(ucmd, sizeof(*out));
}

/*
 * An output array is an argument: check that it takes the answer before
 * the pool is touched, by writing its own bytes back (@buf: scratch of
 * @bytes). A later failure (another thread unmaps it) is undone by the
 * caller.
 */
static int beluga_check_writable(u64 uptr, void *buf, size_t bytes)
{
	if (copy_from_user(buf, u64_to_user_ptr(uptr), bytes) ||
	    copy_to_user(u64_to_user_ptr(uptr), buf, bytes))
		return -EFAULT;
	return 0;
}

/*
 * ALLOC's answer, in the uapi's order: the offsets, then with
 * BELUGA_ALLOC_EVICTED the keys it evicted and the struct (nr_evicted).
 */
static int beluga_alloc_answer(struct beluga_ucmd *ucmd, const u64 *offsets,
			       const struct beluga_evicted_key *evicted,
			       u32 nr_evicted)
{
	struct beluga_alloc *arg = ucmd->cmd;

	if (copy_to_user(u64_to_user_ptr(arg->offsets), offsets,
			 (size_t)arg->count * sizeof(*offsets)))
		return -EFAULT;
	if (!evicted)
		return 0;
	if (nr_evicted &&
	    copy_to_user(u64_to_user_ptr(arg->evicted), evicted,
			 (size_t)nr_evicted * sizeof(*evicted)))
		return -EFAULT;
	arg->nr_evicted = nr_evicted;
	return beluga_ucmd_respond(ucmd, sizeof(*arg));
}

/*
 * The answer is the offsets array, and with BELUGA_ALLOC_EVICTED the
 * evicted array and nr_evicted; without the flag the struct is only read
 * (a caller may pass a read-only one).
 */
static int beluga_cmd_alloc(struct beluga_ucmd *ucmd)
{
	const struct beluga_pool_ops *ops;
	struct beluga_alloc *arg = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	bool want_evicted = arg->flags & BELUGA_ALLOC_EVICTED;
	struct beluga_evicted_key *evicted = NULL;
	size_t bytes, ev_bytes = 0;
	u32 nr_evicted = 0;
	u64 *offsets;
	int ret;

	if ((arg->flags & ~BELUGA_ALLOC_EVICTED) || arg->__reserved ||
	    arg->__reserved2)
		return -EINVAL;
	/* The count before the rules on other fields (uapi: error order). */
	ret = beluga_batch_bytes(arg->count, sizeof(*offsets), &bytes);
	if (ret)
		return ret;
	/*
	 * The evicted array with the flag, and only with it. A caller whose
	 * struct stops short of nr_evicted could not be told how many keys
	 * were written: the flag needs BELUGA_ALLOC_SIZE_V2.
	 */
	if (want_evicted != !!arg->evicted ||
	    (want_evicted && ucmd->user_size <
	     offsetofend(struct beluga_alloc, nr_evicted)))
		return -EINVAL;
	offsets = kvmalloc(bytes, GFP_KERNEL);
	if (!offsets)
		return -ENOMEM;
	if (want_evicted) {
		/*
		 * Before any lock: the core fills it under the pool's
		 * spinlock (or a shared pool's host mutex), where nothing may
		 * sleep on an allocation or a user copy.
		 */
		ev_bytes = (size_t)arg->count * sizeof(*evicted);
		evicted = kvmalloc(ev_bytes, GFP_KERNEL);
		if (!evicted) {
			ret = -ENOMEM;
			goto out;
		}
	}
	ret = beluga_check_writable(arg->offsets, offsets, bytes);
	if (!ret && evicted)
		ret = beluga_check_writable(arg->evicted, evicted, ev_bytes);
	if (ret)
		goto out;
	ret = beluga_pool_ready(bf);
	if (ret)
		goto out;
	ops = beluga_ucmd_ops_begin(ucmd);
	if (IS_ERR(ops)) {
		ret = PTR_ERR(ops);
		goto out;
	}
	ret = ops->alloc(bf, arg->count, offsets, evicted,
			 evicted ? &nr_evicted : NULL);
	beluga_pool_ops_end(bf->dev);
	trace_beluga_alloc(beluga_pool_id(bf->dev), arg->count,
			   ret ? 0 : offsets[0], ret);
	if (ret)
		goto out;
	ret = beluga_alloc_answer(ucmd, offsets, evicted, nr_evicted);
	/*
	 * The caller never learnt the offsets: give them back. What the
	 * ALLOC evicted stays evicted (uapi).
	 */
	if (ret)
		beluga_undo(bf, ops, arg->count, offsets, false);
out:
	kvfree(evicted);
	kvfree(offsets);
	return ret;
}

/*
 * FREE and RELEASE: the same all-or-nothing list of offsets, and nothing
 * to answer.
 */
static int beluga_cmd_block_list(struct beluga_ucmd *ucmd, bool release)
{
	const struct beluga_pool_ops *ops;
	struct beluga_blocks *arg = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	u64 *offsets;
	int ret;

	if (arg->flags || arg->__reserved)
		return -EINVAL;
	offsets = beluga_copy_array_in(arg->offsets, arg->count,
				       sizeof(*offsets));
	if (IS_ERR(offsets))
		return PTR_ERR(offsets);
	ret = beluga_pool_ready(bf);
	if (ret)
		goto out;
	ops = beluga_ucmd_ops_begin(ucmd);
	if (IS_ERR(ops)) {
		ret = PTR_ERR(ops);
		goto out;
	}
	if (release)
		ret = ops->release(bf, arg->count, offsets);
	else
		ret = ops->free(bf, arg->count, offsets);
	beluga_pool_ops_end(bf->dev);
	if (release)
		trace_beluga_release(beluga_pool_id(bf->dev), arg->count,
				     offsets[0], ret);
	else
		trace_beluga_free(beluga_pool_id(bf->dev), arg->count,
				  offsets[0], ret);
out:
	kvfree(offsets);
	return ret;
}

static int beluga_cmd_free(struct beluga_ucmd *ucmd)
{
	return beluga_cmd_block_list(ucmd, false);
}

static int beluga_cmd_release(struct beluga_ucmd *ucmd)
{
	return beluga_cmd_block_list(ucmd, true);
}

static int beluga_cmd_publish(struct beluga_ucmd *ucmd)
{
	const struct beluga_pool_ops *ops;
	struct beluga_publish *arg = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	struct beluga_publish_item *items;
	int ret, err;
	u32 i;

	arg->published = 0;
	arg->exists = 0;
	arg->failed = 0;
	if (arg->flags)
		return -EINVAL;
	items = beluga_copy_array_in(arg->items, arg->count, sizeof(*items));
	if (IS_ERR(items))
		return PTR_ERR(items);
	for (i = 0; i < arg->count; i++) {
		if (items[i].__reserved) {
			ret = -EINVAL;
			goto out;
		}
	}
	ret = beluga_pool_ready(bf);
	if (ret)
		goto out;
	ops = beluga_ucmd_ops_begin(ucmd);
	if (IS_ERR(ops)) {
		ret = PTR_ERR(ops);
		goto out;
	}
	/* Both cores take the uapi's items and write each one's result. */
	ret = ops->publish(bf, arg->ns, arg->count, items, &arg->published,
			   &arg->exists, &arg->failed);
	beluga_pool_ops_end(bf->dev);
	if (ret)
		goto out;
	trace_beluga_publish(beluga_pool_id(bf->dev), arg->ns, arg->count,
			     arg->published, arg->exists, arg->failed, ret);
	/*
	 * Publishing cannot be undone: the keys are visible already. So the
	 * answer is written as far as it can be, the counters first.
	 */
	ret = beluga_ucmd_respond(ucmd, sizeof(*arg));
	err = copy_to_user(u64_to_user_ptr(arg->items), items,
			   (size_t)arg->count * sizeof(*items)) ? -EFAULT : 0;
	if (!ret)
		ret = err;
out:
	kvfree(items);
	return ret;
}

static int beluga_cmd_lookup(struct beluga_ucmd *ucmd)
{
	const struct beluga_pool_ops *ops;
	struct beluga_lookup *arg = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	bool pin = arg->flags & BELUGA_LOOKUP_PIN;
	struct beluga_key *keys;
	u64 *offsets = NULL;
	u32 hits = 0;
	size_t bytes;
	int ret;

	if (arg->flags & ~BELUGA_LOOKUP_PIN)
		return -EINVAL;
	/* The count before the rules on other fields (uapi: error order). */
	ret = beluga_batch_bytes(arg->count, sizeof(*keys), &bytes);
	if (ret)
		return ret;
	if (pin && !arg->offsets)
		return -EINVAL;
	keys = beluga_copy_array_in(arg->keys, arg->count, sizeof(*keys));
	if (IS_ERR(keys))
		return PTR_ERR(keys);
	ret = beluga_pool_ready(bf);
	if (ret)
		goto out;
	if (arg->offsets) {
		offsets = kvmalloc_array(arg->count, sizeof(*offsets),
					 GFP_KERNEL);
		if (!offsets) {
			ret = -ENOMEM;
			goto out;
		}
	}
	ops = beluga_ucmd_ops_begin(ucmd);
	if (IS_ERR(ops)) {
		ret = PTR_ERR(ops);
		goto out;
	}
	ret = ops->lookup(bf, arg->ns, arg->count, keys, pin, offsets, &hits);
	beluga_pool_ops_end(bf->dev);
	trace_beluga_lookup(beluga_pool_id(bf->dev), arg->ns, arg->count,
			    ret ? 0 : hits, pin, ret);
	if (ret)
		goto out;
	if (offsets && hits &&
	    copy_to_user(u64_to_user_ptr(arg->offsets), offsets,
			 (size_t)hits * sizeof(*offsets))) {
		ret = -EFAULT;
	} else {
		arg->hits = hits;
		ret = beluga_ucmd_respond(ucmd, sizeof(*arg));
	}
	/* The caller never learnt what it pinned: let go of it. */
	if (ret && pin && hits)
		beluga_undo(bf, ops, hits, offsets, true);
out:
	kvfree(offsets);
	kvfree(keys);
	return ret;
}

/*
 * ATTACH's first layout (BELUGA_ATTACH_SIZE_V1) carried the host id in the
 * 32 bits that are __reserved now; a caller of that size still puts it
 * there. Returns whether @cmd came in that layout.
 */
static bool beluga_attach_from_v1(struct beluga_ucmd *ucmd)
{
	struct beluga_attach *cmd = ucmd->cmd;

	if (ucmd->user_size >= offsetofend(struct beluga_attach, host_id))
		return false;
	/* Sizes that cut host_id: what they hold of it is not a host id. */
	if (cmd->flags & BELUGA_ATTACH_HOST_ID) {
		cmd->host_id = cmd->__reserved;
		cmd->__reserved = 0;
	}
	return true;
}

/*
 * Prepare, answer, commit: the region is built but invisible while the
 * caller is answered, so a caller that cannot be answered (-EFAULT) leaves
 * no region behind, and no one ever saw one.
 */
static int beluga_cmd_attach(struct beluga_ucmd *ucmd)
{
	struct beluga_attach *cmd = ucmd->cmd;
	struct beluga_region *region;
	bool v1;
	int ret;

	v1 = beluga_attach_from_v1(ucmd);
	ret = beluga_attach_prepare(ucmd->bf->dev, cmd, &region);
	if (ret)
		return ret;
	/* The caller's own bytes back where it put them. */
	if (v1 && (cmd->flags & BELUGA_ATTACH_HOST_ID))
		cmd->__reserved = cmd->host_id;
	ret = beluga_ucmd_respond(ucmd, sizeof(*cmd));
	if (ret) {
		beluga_attach_abort(region);
		return ret;
	}
	beluga_attach_commit(region);
	return 0;
}

/* Once it ran, DETACH answers whatever the result: evictions stand. */
static int beluga_cmd_detach(struct beluga_ucmd *ucmd)
{
	struct beluga_detach *arg = ucmd->cmd;
	int ret, err;

	if ((arg->flags & ~BELUGA_DETACH_EVICT) || arg->__reserved)
		return -EINVAL;
	arg->evicted = 0;
	ret = beluga_region_detach(ucmd->bf->dev, arg->region_id,
				   arg->flags & BELUGA_DETACH_EVICT,
				   &arg->evicted);
	err = beluga_ucmd_respond(ucmd, sizeof(*arg));
	return err ? err : ret;
}

/*
 * The pool's kind is state: it comes after the arguments. Once the pool's
 * evict ran, EVICT answers whatever the result (-ENOENT, -EBUSY: @busy).
 */
static int beluga_cmd_evict(struct beluga_ucmd *ucmd)
{
	const struct beluga_pool_ops *ops;
	struct beluga_evict *arg = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	int ret, err;

	if (arg->flags & ~BELUGA_EVICT_NAMESPACE)
		return -EINVAL;
	if ((arg->flags & BELUGA_EVICT_NAMESPACE) && (arg->key.lo || arg->key.hi))
		return -EINVAL;
	ops = beluga_pool_ops_begin(bf->dev);
	ret = ops->evict ? ops->evict(bf->dev, arg) : -EOPNOTSUPP;
	beluga_pool_ops_end(bf->dev);
	if (ret == -EOPNOTSUPP)
		return ret;
	err = beluga_ucmd_respond(ucmd, sizeof(*arg));
	return err ? err : ret;
}

static int beluga_cmd_region_info(struct beluga_ucmd *ucmd)
{
	struct beluga_region_info *arg = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	struct beluga_region *region;
	struct bel_region_stats rs;
	u32 slot = arg->region_id;
	int ret = -ENOENT;

	if (arg->flags)
		return -EINVAL;
	if (slot >= BELUGA_MAX_REGIONS)
		return -ENOENT;

	/* ops_rwsem: a shared region's counts come from its host. */
	beluga_pool_ops_begin(bf->dev);
	down_read(&bf->dev->regions_rwsem);
	region = bf->dev->regions[slot];
	if (!region || region->ops->region_stats(region, &rs))
		goto out;
	arg->backend = region->backend;
	arg->node = region->node;
	arg->mappings = atomic_read(&region->mappings);
	arg->phys_start = region->phys_start;
	arg->length = region->length;
	arg->first_offset = rs.first_offset;
	arg->nr_blocks = rs.nr_blocks;
	arg->free_blocks = rs.free_blocks;
	arg->allocated_blocks = rs.allocated_blocks;
	arg->published_blocks = rs.published_blocks;
	memcpy(arg->name, region->name, sizeof(arg->name));
	ret = 0;
out:
	up_read(&bf->dev->regions_rwsem);
	beluga_pool_ops_end(bf->dev);
	if (ret)
		return ret;
	return beluga_ucmd_respond(ucmd, sizeof(*arg));
}

/*
 * The records are gathered under ops_rwsem into a kernel buffer and copied
 * out after it is dropped. -EMSGSIZE answers the struct too: its @count
 * says how many records there are.
 */
static int beluga_cmd_hosts(struct beluga_ucmd *ucmd)
{
	struct beluga_hosts *arg = ucmd->cmd;
	struct beluga_file *bf = ucmd->bf;
	struct beluga_host *hosts;
	u32 nr_out, host_size, i;
	int n, ret, err;

	if (arg->flags || arg->__reserved || arg->__reserved2)
		return -EINVAL;
	/* The records' version: the caller's, from its struct's. */
	host_size = arg->host_size;
	if (ucmd->user_size < BELUGA_HOSTS_SIZE_V2)
		host_size = BELUGA_HOST_SIZE_V1;
	else if (!host_size)
		host_size = BELUGA_HOST_SIZE_V2;
	if (host_size != BELUGA_HOST_SIZE_V1 &&
	    host_size != BELUGA_HOST_SIZE_V2)
		return -EINVAL;
	hosts = kcalloc(BELUGA_MAX_HOSTS, sizeof(*hosts), GFP_KERNEL);
	if (!hosts)
		return -ENOMEM;
	n = beluga_mh_hosts(bf->dev, hosts);
	if (n < 0) {
		ret = n;
		goto out;
	}
	/* Packed in the caller's record size (at most the kernel's). */
	for (i = 1; i < (u32)n && host_size < sizeof(*hosts); i++)
		memmove((u8 *)hosts + (size_t)i * host_size, &hosts[i],
			host_size);
	nr_out = min_t(u32, n, arg->count);
	if (nr_out && copy_to_user(u64_to_user_ptr(arg->hosts), hosts,
				   (size_t)nr_out * host_size)) {
		ret = -EFAULT;
		goto out;
	}
	ret = (u32)n > arg->count ? -EMSGSIZE : 0;
	arg->count = n;
	err = beluga_ucmd_respond(ucmd, sizeof(*arg));
	if (err)
		ret = err;
out:
	kfree(hosts);
	return ret;
}

/* The pool's index copy, for lookups with no system call (index_map.c). */
static int beluga_cmd_index_map(struct beluga_ucmd *ucmd)
{
	struct beluga_index_map *arg = ucmd->cmd;
	int ret;

	if (arg->flags)
		return -EINVAL;
	ret = beluga_index_map(ucmd->bf->dev, arg);
	if (ret)
		return ret;
	return beluga_ucmd_respond(ucmd, sizeof(*arg));
}

/* The host's watchdog daemon: its link, and whether it may pet (devlease.c). */
static int beluga_cmd_watchdog(struct beluga_ucmd *ucmd)
{
	struct beluga_watchdog *arg = ucmd->cmd;
	int ret;

	if (arg->__reserved)
		return -EINVAL;
	if (arg->flags == BELUGA_WATCHDOG_REGISTER) {
		if (!arg->timeout_ms ||
		    arg->timeout_ms > BELUGA_WATCHDOG_MAX_MS)
			return -EINVAL;
	} else if (arg->flags != BELUGA_WATCHDOG_QUERY || arg->timeout_ms) {
		return -EINVAL;
	}
	ret = beluga_devlease_watchdog(ucmd->bf, arg);
	if (ret)
		return ret;
	return beluga_ucmd_respond(ucmd, sizeof(*arg));
}

/* A device range: pinnable mappings under a device lease (devlease.c). */
static int beluga_cmd_device_range(struct beluga_ucmd *ucmd)
{
	struct beluga_device_range *arg = ucmd->cmd;
	struct eventfd_ctx *efd = NULL;
	int ret;

	if (arg->flags || !arg->length || !PAGE_ALIGNED(arg->offset) ||
	    !PAGE_ALIGNED(arg->length) || arg->eventfd < -1)
		return -EINVAL;
	if (arg->eventfd >= 0) {
		efd = eventfd_ctx_fdget(arg->eventfd);
		if (IS_ERR(efd))
			return -EBADF;
	}
	ret = beluga_devlease_range(ucmd->bf, arg, efd);
	if (ret) {
		if (efd)
			eventfd_ctx_put(efd);
		return ret;
	}
	/* The range stays declared whatever the answer: uapi. */
	return beluga_ucmd_respond(ucmd, sizeof(*arg));
}

/* Who may ask: checked before the struct is read. */
#define BELUGA_OP_ADMIN		BIT(0)	/* CAP_SYS_ADMIN */
#define BELUGA_OP_WRITE		BIT(1)	/* a file opened for writing */
/* Also an io_uring command (uapi: "io_uring commands"). */
#define BELUGA_OP_RING		BIT(2)

struct beluga_ioctl_op {
	int (*execute)(struct beluga_ucmd *ucmd);
	size_t size;		/* the kernel's struct */
	size_t min_size;	/* the first version's */
	unsigned int flags;	/* BELUGA_OP_* */
};

/*
 * @_member is the command's struct in union beluga_ioctl_buf (so a struct
 * that is not in the union does not compile); @_v1_end is the last field
 * of its first version, as @_member.field: older callers pass at least
 * that much.
 */
#define BELUGA_IOCTL_OP(_cmd, _fn, _member, _v1_end, _flags)		\
	[BELUGA_CMD_##_cmd] = {						\
		.execute = _fn,						\
		.size = sizeof_field(union beluga_ioctl_buf, _member),	\
		.min_size = offsetofend(union beluga_ioctl_buf, _v1_end),	\
		.flags = _flags,					\
	}

static const struct beluga_ioctl_op beluga_ops[] = {
	BELUGA_IOCTL_OP(INFO, beluga_cmd_info, info, info.max_regions, 0),
	BELUGA_IOCTL_OP(STATS, beluga_cmd_stats, stats, stats.alloc_failures,
			0),
	BELUGA_IOCTL_OP(ALLOC, beluga_cmd_alloc, alloc, alloc.offsets,
			BELUGA_OP_WRITE | BELUGA_OP_RING),
	BELUGA_IOCTL_OP(FREE, beluga_cmd_free, blocks, blocks.offsets,
			BELUGA_OP_WRITE | BELUGA_OP_RING),
	BELUGA_IOCTL_OP(PUBLISH, beluga_cmd_publish, publish, publish.items,
			BELUGA_OP_WRITE | BELUGA_OP_RING),
	BELUGA_IOCTL_OP(LOOKUP, beluga_cmd_lookup, lookup, lookup.offsets,
			BELUGA_OP_RING),
	BELUGA_IOCTL_OP(RELEASE, beluga_cmd_release, blocks, blocks.offsets,
			BELUGA_OP_RING),
	BELUGA_IOCTL_OP(ATTACH, beluga_cmd_attach, attach, attach.nr_blocks,
			BELUGA_OP_ADMIN),
	BELUGA_IOCTL_OP(DETACH, beluga_cmd_detach, detach, detach.evicted,
			BELUGA_OP_ADMIN),
	BELUGA_IOCTL_OP(EVICT, beluga_cmd_evict, evict, evict.busy,
			BELUGA_OP_ADMIN),
	BELUGA_IOCTL_OP(REGION_INFO, beluga_cmd_region_info, region_info,
			region_info.name, 0),
	BELUGA_IOCTL_OP(HOSTS, beluga_cmd_hosts, hosts, hosts.hosts, 0),
	BELUGA_IOCTL_OP(INDEX_MAP, beluga_cmd_index_map, index_map,
			index_map.length, 0),
	BELUGA_IOCTL_OP(WATCHDOG, beluga_cmd_watchdog, watchdog,
			watchdog.__reserved, BELUGA_OP_ADMIN),
	BELUGA_IOCTL_OP(DEVICE_RANGE, beluga_cmd_device_range, device_range,
			device_range.length, 0),
};

/* The first versions' sizes that the uapi header documents. */
static_assert(offsetofend(struct beluga_info, max_regions) ==
	      BELUGA_INFO_SIZE_V1);
static_assert(offsetofend(struct beluga_stats, alloc_failures) ==
	      BELUGA_STATS_SIZE_V1);
static_assert(offsetofend(struct beluga_stats, retired_blocks) ==
	      BELUGA_STATS_SIZE_V2);
static_assert(offsetofend(struct beluga_alloc, offsets) ==
	      BELUGA_ALLOC_SIZE_V1);
static_assert(offsetofend(struct beluga_alloc, __reserved2) ==
	      BELUGA_ALLOC_SIZE_V2);
static_assert(offsetofend(struct beluga_blocks, offsets) ==
	      BELUGA_BLOCKS_SIZE_V1);
static_assert(offsetofend(struct beluga_publish, items) ==
	      BELUGA_PUBLISH_SIZE_V1);
static_assert(offsetofend(struct beluga_lookup, offsets) ==
	      BELUGA_LOOKUP_SIZE_V1);
static_assert(offsetofend(struct beluga_attach, nr_blocks) ==
	      BELUGA_ATTACH_SIZE_V1);
static_assert(offsetofend(struct beluga_attach, __reserved2) ==
	      BELUGA_ATTACH_SIZE_V2);
static_assert(offsetofend(struct beluga_detach, evicted) ==
	      BELUGA_DETACH_SIZE_V1);
static_assert(offsetofend(struct beluga_evict, busy) ==
	      BELUGA_EVICT_SIZE_V1);
static_assert(offsetofend(struct beluga_region_info, name) ==
	      BELUGA_REGION_INFO_SIZE_V1);
static_assert(offsetofend(struct beluga_hosts, hosts) ==
	      BELUGA_HOSTS_SIZE_V1);
static_assert(offsetofend(struct beluga_index_map, length) ==
	      BELUGA_INDEX_MAP_SIZE_V1);
static_assert(offsetofend(struct beluga_hosts, __reserved2) ==
	      BELUGA_HOSTS_SIZE_V2);
static_assert(offsetofend(struct beluga_host, name) == BELUGA_HOST_SIZE_V1);
static_assert(sizeof(struct beluga_host) == BELUGA_HOST_SIZE_V2);
static_assert(offsetofend(struct beluga_watchdog, __reserved) ==
	      BELUGA_WATCHDOG_SIZE_V1);
static_assert(offsetofend(struct beluga_device_range, length) ==
	      BELUGA_DEVICE_RANGE_SIZE_V1);

/* The command of number @cmd, or NULL: only the exact _IO() encodings. */
static const struct beluga_ioctl_op *beluga_op_of(unsigned int cmd)
{
	unsigned int nr = _IOC_NR(cmd);

	if (nr >= ARRAY_SIZE(beluga_ops) || cmd != _IO(BELUGA_TYPE, nr))
		return NULL;
	return &beluga_ops[nr];
}

/*
 * The common steps of both entries, after the command number (uapi: the
 * common errors, steps 2 to 4), then the command.
 */
static int beluga_ucmd_dispatch(struct file *file,
				const struct beluga_ioctl_op *op,
				void __user *ubuffer, bool nonblock)
{
	union beluga_ioctl_buf buf;
	struct beluga_ucmd ucmd = {
		.bf = file->private_data,
		.ubuffer = ubuffer,
		.cmd = &buf,
		.nonblock = nonblock,
	};
	int ret;

	/* Who may ask comes before what is asked. */
	if ((op->flags & BELUGA_OP_ADMIN) && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	if ((op->flags & BELUGA_OP_WRITE) && !(file->f_mode & FMODE_WRITE))
		return -EBADF;

	if (get_user(ucmd.user_size, (u32 __user *)ucmd.ubuffer))
		return -EFAULT;
	if (ucmd.user_size < op->min_size)
		return -EINVAL;
	/* Bounds the zero check of unknown trailing bytes, as clone3() does. */
	if (ucmd.user_size > PAGE_SIZE)
		return -E2BIG;
	ret = copy_struct_from_user(&buf, op->size, ucmd.ubuffer,
				    ucmd.user_size);
	if (ret)
		return ret;
	return op->execute(&ucmd);
}

long beluga_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	const struct beluga_ioctl_op *op = beluga_op_of(cmd);

	if (!op)
		return -ENOTTY;
	return beluga_ucmd_dispatch(file, op, (void __user *)arg, false);
}

/*
 * IORING_OP_URING_CMD: the SQE's cmd_op is the ioctl's number, and its
 * command area a struct beluga_uring_cmd pointing to the ioctl's struct
 * (uapi: "io_uring commands"). The command completes here: its return
 * value is the completion's result, never -EIOCBQUEUED.
 *
 * The command area may be the SQE in the ring, which userspace can
 * rewrite meanwhile: each field is read once. In io_uring's worker threads
 * and its SQPOLL thread, the user copies reach the submitter's memory:
 * those threads share its mm (SQPOLL: the ring creator's), as for every
 * io_uring request. The capability of BELUGA_OP_ADMIN would be the
 * request's credentials, which io_uring installs there too; no ring
 * command needs it.
 */
int beluga_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags)
{
	const struct beluga_uring_cmd *area = beluga_uring_cmd_area(ioucmd);
	const struct beluga_ioctl_op *op = beluga_op_of(ioucmd->cmd_op);
	u64 arg;

	if (!op)
		return -ENOTTY;
	if (!(op->flags & BELUGA_OP_RING))
		return -EOPNOTSUPP;
	if (ioucmd->flags & IORING_URING_CMD_FIXED)
		return -EINVAL;
	if (READ_ONCE(area->__reserved))
		return -EINVAL;
	/* A 128-byte SQE's command area: 80 bytes, the rest reserved. */
	if ((issue_flags & IO_URING_F_SQE128) &&
	    memchr_inv((const u8 *)area + sizeof(*area), 0,
		       2 * sizeof(struct io_uring_sqe) -
		       offsetof(struct io_uring_sqe, cmd) - sizeof(*area)))
		return -EINVAL;
	arg = READ_ONCE(area->arg);
	return beluga_ucmd_dispatch(ioucmd->file, op, u64_to_user_ptr(arg),
				    issue_flags & IO_URING_F_NONBLOCK);
}
