// SPDX-License-Identifier: GPL-2.0
/*
 * ioctl dispatch. Each command's struct starts with its own size; the
 * dispatcher copies it in with copy_struct_from_user() (accepting older and
 * newer userspace), checks permissions, runs the command and copies the
 * struct back up to the smaller of the two sizes. Batch arrays are copied
 * into kernel buffers before the core runs, and results are copied out
 * after; when a copy-out fails, state changes are undone, or, where the uapi
 * says the call took effect, reported. Pool commands run through the
 * pool's struct beluga_pool_ops: the single-host core or a shared pool.
 * No user memory is touched while ops_rwsem or a global mutex is held: a
 * user buffer that stalls (userfaultfd, a FUSE mapping) holds up nothing
 * but its own caller.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/fs.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "beluga.h"
#include "beluga_trace.h"

union beluga_ioctl_buf {
	struct beluga_info info;
	struct beluga_stats stats;
	struct beluga_alloc alloc;
	struct beluga_blocks blocks;
	struct beluga_publish publish;
	struct beluga_lookup lookup;
	struct beluga_attach attach;
	struct beluga_detach detach;
	struct beluga_evict evict;
	struct beluga_region_info region_info;
	struct beluga_hosts hosts;
};

/* One call: the user's struct as copied in, and where it goes back. */
struct beluga_ucmd {
	union beluga_ioctl_buf buf;
	void __user *uarg;
	size_t out_len;		/* min(the user's size, the kernel's) */
	bool responded;
};

/*
 * Write the struct back now, while the command can still be undone: a
 * command that commits after its output is in place never takes effect
 * behind an -EFAULT (the late copy fails only if another thread unmaps the
 * struct during the call, or under fault injection).
 */
static int beluga_respond(union beluga_ioctl_buf *u)
{
	struct beluga_ucmd *ucmd = container_of(u, struct beluga_ucmd, buf);

	ucmd->responded = true;
	if (copy_to_user(ucmd->uarg, &ucmd->buf, ucmd->out_len))
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

static int beluga_cmd_info(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	struct beluga_info *info = &u->info;
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
	return 0;
}

static int beluga_cmd_stats(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	struct beluga_stats *out = &u->stats;
	struct bel_stats s;

	if (out->flags)
		return -EINVAL;
	beluga_pool_stats(bf->dev, &s);
	out->total_blocks = s.total_blocks;
	out->free_blocks = s.free_blocks;
	out->allocated_blocks = s.allocated_blocks;
	out->published_blocks = s.published_blocks;
	out->pinned_blocks = s.pinned_blocks;
	out->pins = s.pins;
	out->clients = s.clients;
	out->allocs = s.allocs;
	out->frees = s.frees;
	out->publishes = s.publishes;
	out->publish_races = s.publish_races;
	out->lookups = s.lookups;
	out->lookup_keys = s.lookup_keys;
	out->lookup_hits = s.lookup_hits;
	out->releases = s.releases;
	out->evictions = s.evictions;
	out->alloc_failures = s.alloc_failures;
	out->retired_blocks = s.retired_blocks;
	return 0;
}

static int beluga_cmd_alloc(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	const struct beluga_pool_ops *ops;
	struct beluga_alloc *arg = &u->alloc;
	size_t bytes;
	u64 *offsets;
	int ret;

	if (arg->flags || arg->__reserved)
		return -EINVAL;
	ret = beluga_batch_bytes(arg->count, sizeof(*offsets), &bytes);
	if (ret)
		return ret;
	offsets = kvmalloc(bytes, GFP_KERNEL);
	if (!offsets)
		return -ENOMEM;
	/*
	 * The output array is an argument: check that it takes the offsets
	 * before the pool is, by writing its own bytes back. A late failure
	 * (another thread unmaps it) is undone below.
	 */
	if (copy_from_user(offsets, u64_to_user_ptr(arg->offsets), bytes) ||
	    copy_to_user(u64_to_user_ptr(arg->offsets), offsets, bytes)) {
		ret = -EFAULT;
		goto out;
	}
	ret = beluga_pool_ready(bf);
	if (ret)
		goto out;
	ops = beluga_pool_ops_begin(bf->dev);
	ret = ops->alloc(bf, arg->count, offsets);
	beluga_pool_ops_end(bf->dev);
	trace_beluga_alloc(beluga_pool_id(bf->dev), arg->count,
			   ret ? 0 : offsets[0], ret);
	if (ret)
		goto out;
	if (copy_to_user(u64_to_user_ptr(arg->offsets), offsets, bytes)) {
		/* The caller never learnt the offsets: give them back. */
		beluga_undo(bf, ops, arg->count, offsets, false);
		ret = -EFAULT;
	}
out:
	kvfree(offsets);
	return ret;
}

/* FREE and RELEASE: the same all-or-nothing list of offsets. */
static int beluga_cmd_block_list(struct beluga_file *bf,
				 union beluga_ioctl_buf *u, bool release)
{
	const struct beluga_pool_ops *ops;
	struct beluga_blocks *arg = &u->blocks;
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
	ops = beluga_pool_ops_begin(bf->dev);
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

static int beluga_cmd_free(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	return beluga_cmd_block_list(bf, u, false);
}

static int beluga_cmd_release(struct beluga_file *bf,
			      union beluga_ioctl_buf *u)
{
	return beluga_cmd_block_list(bf, u, true);
}

static int beluga_cmd_publish(struct beluga_file *bf,
			      union beluga_ioctl_buf *u)
{
	struct beluga_publish *arg = &u->publish;
	struct beluga_publish_item *items;
	struct beluga_key *keys = NULL;
	u64 *offsets = NULL;
	s32 *results = NULL;
	int ret;
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
	ret = -ENOMEM;
	keys = kvmalloc_array(arg->count, sizeof(*keys), GFP_KERNEL);
	offsets = kvmalloc_array(arg->count, sizeof(*offsets), GFP_KERNEL);
	results = kvmalloc_array(arg->count, sizeof(*results), GFP_KERNEL);
	if (!keys || !offsets || !results)
		goto out;
	for (i = 0; i < arg->count; i++) {
		offsets[i] = items[i].offset;
		keys[i] = items[i].key;
	}
	ret = beluga_pool_ops_begin(bf->dev)->publish(bf, arg->ns,
						      arg->count, offsets,
						      keys, results);
	beluga_pool_ops_end(bf->dev);
	if (ret)
		goto out;
	for (i = 0; i < arg->count; i++) {
		items[i].result = results[i];
		if (results[i] == BELUGA_PUBLISH_OK)
			arg->published++;
		else if (results[i] == BELUGA_PUBLISH_EXISTS)
			arg->exists++;
		else
			arg->failed++;
	}
	trace_beluga_publish(beluga_pool_id(bf->dev), arg->ns, arg->count,
			     arg->published, arg->exists, arg->failed, ret);
	/*
	 * Publishing cannot be undone: the keys are visible already. The
	 * dispatcher still copies the counters back on -EFAULT.
	 */
	if (copy_to_user(u64_to_user_ptr(arg->items), items,
			 (size_t)arg->count * sizeof(*items)))
		ret = -EFAULT;
out:
	kvfree(results);
	kvfree(offsets);
	kvfree(keys);
	kvfree(items);
	return ret;
}

static int beluga_cmd_lookup(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	const struct beluga_pool_ops *ops;
	struct beluga_lookup *arg = &u->lookup;
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
	ops = beluga_pool_ops_begin(bf->dev);
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
		ret = beluga_respond(u);
	}
	/* The caller never learnt what it pinned: let go of it. */
	if (ret && pin && hits)
		beluga_undo(bf, ops, hits, offsets, true);
out:
	kvfree(offsets);
	kvfree(keys);
	return ret;
}

static int beluga_cmd_attach(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	struct beluga_region *region;
	int ret;

	ret = beluga_region_attach(bf->dev, &u->attach, &region);
	if (ret)
		return ret;
	ret = beluga_respond(u);
	if (!ret) {
		beluga_region_put(region);
		return 0;
	}
	/*
	 * The caller never learnt the region's id: take the region back. A
	 * client that allocated from it in the meantime keeps it (-EBUSY),
	 * which the uapi documents.
	 */
	beluga_region_undo_attach(bf->dev, region);
	return ret;
}

static int beluga_cmd_detach(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	struct beluga_detach *arg = &u->detach;

	if ((arg->flags & ~BELUGA_DETACH_EVICT) || arg->__reserved)
		return -EINVAL;
	arg->evicted = 0;
	return beluga_region_detach(bf->dev, arg->region_id, arg->flags & BELUGA_DETACH_EVICT,
			     &arg->evicted);
}

static int beluga_cmd_evict(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	const struct beluga_pool_ops *ops;
	struct beluga_evict *arg = &u->evict;
	int ret;

	if (arg->flags & ~BELUGA_EVICT_NAMESPACE)
		return -EINVAL;
	if ((arg->flags & BELUGA_EVICT_NAMESPACE) && (arg->key.lo || arg->key.hi))
		return -EINVAL;
	/* The pool's kind is state: it comes after the arguments. */
	ops = beluga_pool_ops_begin(bf->dev);
	ret = ops->evict ? ops->evict(bf->dev, arg) : -EOPNOTSUPP;
	beluga_pool_ops_end(bf->dev);
	return ret;
}

static int beluga_cmd_region_info(struct beluga_file *bf,
				  union beluga_ioctl_buf *u)
{
	struct beluga_region_info *arg = &u->region_info;
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
	return ret;
}

/*
 * The records are gathered under mh_rwsem into a kernel buffer and copied
 * out after it is dropped. -EMSGSIZE answers the struct too: its @count
 * says how many records there are.
 */
static int beluga_cmd_hosts(struct beluga_file *bf, union beluga_ioctl_buf *u)
{
	struct beluga_hosts *arg = &u->hosts;
	struct beluga_host *hosts;
	u32 nr_out;
	int n, ret;

	if (arg->flags || arg->__reserved)
		return -EINVAL;
	hosts = kcalloc(BELUGA_MAX_HOSTS, sizeof(*hosts), GFP_KERNEL);
	if (!hosts)
		return -ENOMEM;
	n = beluga_mh_hosts(bf->dev, hosts);
	if (n < 0) {
		ret = n;
		goto out;
	}
	nr_out = min_t(u32, n, arg->count);
	if (nr_out && copy_to_user(u64_to_user_ptr(arg->hosts), hosts,
				   (size_t)nr_out * sizeof(*hosts))) {
		ret = -EFAULT;
		goto out;
	}
	ret = (u32)n > arg->count ? -EMSGSIZE : 0;
	arg->count = n;
	if (beluga_respond(u))
		ret = -EFAULT;
out:
	kfree(hosts);
	return ret;
}

/* What a command needs before it runs. */
#define BELUGA_OP_ADMIN		BIT(0)	/* CAP_SYS_ADMIN */
#define BELUGA_OP_WRITE		BIT(1)	/* a file opened for writing */
/*
 * May have taken effect even when it fails (PUBLISH whose results cannot be
 * written, DETACH_EVICT that evicted but stayed busy): copy the struct's
 * counters back on error too.
 */
#define BELUGA_OP_EFFECTIVE	BIT(2)
/* Nothing in the struct is output: it is not written back. */
#define BELUGA_OP_IN_ONLY	BIT(3)

struct beluga_ioctl_op {
	int (*execute)(struct beluga_file *bf, union beluga_ioctl_buf *u);
	size_t size;		/* the kernel's struct */
	size_t min_size;	/* the first version's */
	unsigned int flags;	/* BELUGA_OP_* */
};

#define BELUGA_OP(_cmd, _fn, _struct, _flags)				\
	[BELUGA_CMD_##_cmd] = {						\
		.execute = _fn,						\
		.size = sizeof(struct _struct),				\
		.min_size = BELUGA_##_cmd##_SIZE_V1,			\
		.flags = _flags,					\
	}

/* FREE and RELEASE share struct beluga_blocks. */
#define BELUGA_FREE_SIZE_V1	BELUGA_BLOCKS_SIZE_V1
#define BELUGA_RELEASE_SIZE_V1	BELUGA_BLOCKS_SIZE_V1

static const struct beluga_ioctl_op beluga_ops[] = {
	BELUGA_OP(INFO, beluga_cmd_info, beluga_info, 0),
	BELUGA_OP(STATS, beluga_cmd_stats, beluga_stats, 0),
	BELUGA_OP(ALLOC, beluga_cmd_alloc, beluga_alloc,
		  BELUGA_OP_WRITE | BELUGA_OP_IN_ONLY),
	BELUGA_OP(FREE, beluga_cmd_free, beluga_blocks,
		  BELUGA_OP_WRITE | BELUGA_OP_IN_ONLY),
	BELUGA_OP(PUBLISH, beluga_cmd_publish, beluga_publish,
		  BELUGA_OP_WRITE | BELUGA_OP_EFFECTIVE),
	BELUGA_OP(LOOKUP, beluga_cmd_lookup, beluga_lookup, 0),
	BELUGA_OP(RELEASE, beluga_cmd_release, beluga_blocks,
		  BELUGA_OP_IN_ONLY),
	BELUGA_OP(ATTACH, beluga_cmd_attach, beluga_attach, BELUGA_OP_ADMIN),
	BELUGA_OP(DETACH, beluga_cmd_detach, beluga_detach,
		  BELUGA_OP_ADMIN | BELUGA_OP_EFFECTIVE),
	BELUGA_OP(EVICT, beluga_cmd_evict, beluga_evict,
		  BELUGA_OP_ADMIN | BELUGA_OP_EFFECTIVE),
	BELUGA_OP(REGION_INFO, beluga_cmd_region_info, beluga_region_info, 0),
	BELUGA_OP(HOSTS, beluga_cmd_hosts, beluga_hosts, 0),
};

long beluga_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct beluga_file *bf = file->private_data;
	void __user *uarg = (void __user *)arg;
	const struct beluga_ioctl_op *op;
	struct beluga_ucmd ucmd = { .uarg = uarg };
	union beluga_ioctl_buf *buf = &ucmd.buf;
	unsigned int nr = _IOC_NR(cmd);
	u32 usize;
	int ret;

	/* Only the exact _IO() encodings are ours. */
	if (nr >= ARRAY_SIZE(beluga_ops) || cmd != _IO(BELUGA_TYPE, nr))
		return -ENOTTY;
	op = &beluga_ops[nr];

	/* Who may ask comes before what is asked. */
	if ((op->flags & BELUGA_OP_ADMIN) && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	if ((op->flags & BELUGA_OP_WRITE) && !(file->f_mode & FMODE_WRITE))
		return -EBADF;

	if (get_user(usize, (u32 __user *)uarg))
		return -EFAULT;
	if (usize < op->min_size)
		return -EINVAL;
	/* Bounds the zero check of unknown trailing bytes, as clone3() does. */
	if (usize > PAGE_SIZE)
		return -E2BIG;
	ret = copy_struct_from_user(buf, op->size, uarg, usize);
	if (ret)
		return ret;
	ucmd.out_len = min_t(size_t, usize, op->size);
	/*
	 * Fail a struct the results cannot be written to before anything
	 * takes effect: writing its own bytes back changes nothing.
	 */
	if (!(op->flags & BELUGA_OP_IN_ONLY) &&
	    copy_to_user(uarg, buf, ucmd.out_len))
		return -EFAULT;

	ret = op->execute(bf, buf);
	if (ucmd.responded || (op->flags & BELUGA_OP_IN_ONLY))
		return ret;
	if (ret && !(op->flags & BELUGA_OP_EFFECTIVE))
		return ret;
	if (copy_to_user(uarg, buf, ucmd.out_len))
		return -EFAULT;
	return ret;
}
