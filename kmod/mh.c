// SPDX-License-Identifier: GPL-2.0
/*
 * Shared (multi-host) pools: the pool ops table of a pool that one host
 * shares with others (beluga_shared_pool_ops: attach and leave, STATS,
 * the fence's checks at mmap and fault, the retirement of blocks with
 * memory errors, the block commands), and the
 * kernel's implementation of the portable protocol's environment
 * (core/bel_mh.h, Documentation/multihost.md). Built only with BELUGA_SHARED=y
 * (Kbuild); nothing else in the glue knows a shared pool's state.
 *
 * The shared region is mapped write-back with memremap(); every access to
 * shared metadata goes through the accessors below:
 *   read/write  plain copies through that mapping
 *   flush       CLWB (or CLFLUSHOPT) of every line: arch_wb_cache_pmem()
 *   inval       CLFLUSHOPT (or CLFLUSH) of every line: clflush_cache_range()
 *   fence       mb() (MFENCE)
 *   now_ns      this host's monotonic clock, counting suspend
 *   relax       a short sleep: wait loops run with the host mutex held
 *   resched     cond_resched(): long walks let other work (the heartbeat) run
 *   killed      fatal_signal_pending(): the waits of ATTACH are killable
 * and two delayed works keep the host alive: the heartbeat (spinlock only,
 * never delayed by a long operation) and the maintenance tick (liveness,
 * partition claims, rebuilds).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/fault-inject.h>
#include <linux/io.h>
#include <linux/mm.h>
#include <linux/random.h>
#include <linux/slab.h>
#include <linux/utsname.h>
#include <linux/ktime.h>
#include <linux/libnvdimm.h>
#include <linux/math64.h>
#include <linux/moduleparam.h>
#include <linux/sizes.h>
#include <linux/sort.h>
#include <linux/timekeeping.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include <asm/cacheflush.h>

#include "beluga_glue.h"
#include "beluga_trace.h"
#include "core/bel_mh.h"

/* One host's membership in a pool shared by several hosts. */
struct beluga_mh {
	struct bel_mh_host host;
	void *base;			/* the shared region, mapped WB */
	u64 size;
	struct delayed_work hb_work;	/* heartbeat: rec_lock only */
	struct delayed_work tick_work;	/* maintenance: the host mutex */
	struct beluga_device *dev;
	struct bel_mh_config cfg;	/* of the attach: a rejoin reuses it */
	unsigned long period;		/* heartbeat period, jiffies */
	bool running;
	/* The tick saw the host fenced: zapped, rejoining (tick only). */
	bool fenced;
	/* A rejoin failed: the pool stays down until DETACH (tick only). */
	bool rejoin_failed;
	/* Joined: @host is valid (written under the pool's ops_rwsem). */
	bool joined;
	/* The pool's geometry, for a rejoin's check (first_offset: cfg). */
	u64 block_size;
	u32 nr_blocks;
	/* The shared region: its pages are scanned for outside references. */
	struct beluga_region *region;
	/*
	 * The own record carries a device lease taken by a declaration
	 * (devlease.c): under the device's devlease_mutex; the rejoin, which
	 * needs no range declared, clears it under ops_rwsem.
	 */
	bool lease_held;
	/* The devices were told about an unaware host (tick only). */
	bool unsafe_signalled;
	/* The fenced host waits for its devices (tick only; logged once). */
	bool devices_logged;
};

/* A pool's shared-pool state, from load to unload (beluga_device.mh). */
struct beluga_mh_pool {
	/*
	 * The host, while a shared region is attached: set with the pool's
	 * ops (under the same locks), stable under ops_rwsem.
	 */
	struct beluga_mh *cur;
	/* +1 at every shared attach and rejoin (ops_rwsem, for writing). */
	u32 gen;
	/*
	 * Protects @fence_epoch: +1 (under the write lock) each time the
	 * host fences itself; a shared region's page faults check it under
	 * the read lock, so that none inserts a page after the fence's
	 * unmap_mapping_range(). Files opened before the last fence are
	 * stale (beluga_mh_file.fence_epoch).
	 */
	struct rw_semaphore fence_rwsem;
	u32 fence_epoch;
	/*
	 * The last answer for the watchdog daemon (true: HOLD), written by
	 * the tick and by each QUERY that got ops_rwsem; read by a QUERY
	 * that could not (READ_ONCE/WRITE_ONCE).
	 */
	bool watchdog_hold;
};

/* A file's part in its pool's shared pools (beluga_file.mh). */
struct beluga_mh_file {
	/* Protects @client and @gen: the client is valid while @gen matches. */
	struct mutex lock;
	struct bel_mh_client client;
	u32 gen;
	/*
	 * The pool's @gen when this file declared its device range under
	 * the shared pool's device lease (0: none): its mappings are
	 * pinnable only in that attach of the pool. Under devlease_mutex.
	 */
	u32 range_gen;
	/*
	 * The pool's fence_epoch at open(). Older than the pool's: a fence
	 * of the shared pool's host dropped this file's allocations and
	 * pins; its block commands fail with -ESTALE and its mappings raise
	 * SIGBUS until it is closed.
	 */
	u32 fence_epoch;
};

static int beluga_host_id = -1;
module_param_named(host_id, beluga_host_id, int, 0444);
MODULE_PARM_DESC(host_id, "This host's id in shared pools, 0-15, unique in the rack (default -1: none; ATTACH may give one)");

/*
 * Format-time only: a joining host takes the pool's values from its
 * superblock. Both are checked at ATTACH: a heartbeat of at least
 * BELUGA_MH_MIN_HEARTBEAT_MS, a lease of at least 4 heartbeats and at most
 * BEL_MH_MAX_LEASE_MS (-EINVAL otherwise); pools formatted elsewhere with
 * timings outside these bounds are refused at join.
 */
#define BELUGA_MH_MIN_HEARTBEAT_MS	10U
static unsigned int beluga_mh_heartbeat_ms;
module_param_named(mh_heartbeat_ms, beluga_mh_heartbeat_ms, uint, 0444);
MODULE_PARM_DESC(mh_heartbeat_ms, "Heartbeat period of shared pools this host formats, in ms (default 0: 100)");
static unsigned int beluga_mh_lease_ms;
module_param_named(mh_lease_ms, beluga_mh_lease_ms, uint, 0444);
MODULE_PARM_DESC(mh_lease_ms, "Lease of shared pools this host formats, in ms, at least 4 heartbeats (default 0: 2000)");

static void *beluga_mh_addr(void *priv, u64 off)
{
	struct beluga_mh *mh = priv;

	return (u8 *)mh->base + off;
}

/* Every access is checked against the mapping: a bug must not scribble. */
static bool beluga_mh_in_range(struct beluga_mh *mh, u64 off, u64 len)
{
	return off <= mh->size && len <= mh->size - off;
}

static void beluga_mh_read(void *priv, u64 off, void *dst, u32 len)
{
	struct beluga_mh *mh = priv;

	if (WARN_ON_ONCE(!beluga_mh_in_range(mh, off, len))) {
		memset(dst, 0, len);
		return;
	}
	/*
	 * Every host reads every host record at each tick: with a plain
	 * memcpy, one poisoned line would be a kernel-mode machine check on
	 * all of them. A failed copy is corrupt metadata: the bytes become
	 * all-ones (no magic or checksum accepts them) and the host fences
	 * itself at once, so that nothing computed from them is ever stored
	 * to the pool (bel_mh_put()); the tick then rejoins, rebuilding its
	 * view from the pool, or keeps the pool down while the line is bad.
	 */
	if (copy_mc_to_kernel(dst, beluga_mh_addr(priv, off), len)) {
		memset(dst, 0xff, len);
		WRITE_ONCE(mh->host.fenced, true);
		pr_err_ratelimited("shared pool: memory error reading metadata at offset 0x%llx; fenced\n",
				   off);
	}
}

static void beluga_mh_write(void *priv, u64 off, const void *src, u32 len)
{
	struct beluga_mh *mh = priv;

	if (WARN_ON_ONCE(!beluga_mh_in_range(mh, off, len)))
		return;
	memcpy(beluga_mh_addr(priv, off), src, len);
}

/* clflush_cache_range() takes an unsigned int: split huge ranges. */
#define BELUGA_MH_CHUNK	SZ_1G

static void beluga_mh_flush(void *priv, int site, u64 off, u64 len)
{
	struct beluga_mh *mh = priv;

	if (WARN_ON_ONCE(!beluga_mh_in_range(mh, off, len)))
		return;
	while (len) {
		u64 n = min_t(u64, len, BELUGA_MH_CHUNK);

		arch_wb_cache_pmem(beluga_mh_addr(priv, off), n);
		off += n;
		len -= n;
	}
}

static void beluga_mh_inval(void *priv, int site, u64 off, u64 len)
{
	struct beluga_mh *mh = priv;

	if (WARN_ON_ONCE(!beluga_mh_in_range(mh, off, len)))
		return;
	while (len) {
		u32 n = (u32)min_t(u64, len, BELUGA_MH_CHUNK);

		clflush_cache_range(beluga_mh_addr(priv, off), n);
		off += n;
		len -= n;
	}
}

static void beluga_mh_fence(void *priv)
{
	/*
	 * The write-backs above complete before the loads that follow, which
	 * the store-buffer pattern of Documentation/multihost.md (rule 5) relies on.
	 */
	mb();
}

static u64 beluga_mh_now_ns(void *priv)
{
	return ktime_get_boottime_ns();
}

static void beluga_mh_relax(void *priv)
{
	usleep_range(500, 1000);
}

static void beluga_mh_resched(void *priv)
{
	cond_resched();
}

/* The caller of ATTACH was killed: its waits end (not the tick's rejoin). */
static bool beluga_mh_killed(void *priv)
{
	return fatal_signal_pending(current);
}

static const struct bel_mh_mem_ops beluga_mh_mem_ops = {
	.read = beluga_mh_read,
	.write = beluga_mh_write,
	.flush = beluga_mh_flush,
	.inval = beluga_mh_inval,
	.fence = beluga_mh_fence,
	.now_ns = beluga_mh_now_ns,
	.relax = beluga_mh_relax,
	.resched = beluga_mh_resched,
	.killed = beluga_mh_killed,
};

/* Map [@start, @start + @size) write-back, for the accessors. */
static int beluga_mh_map(struct beluga_mh *mh, phys_addr_t start, u64 size)
{
	mh->base = memremap(start, size, MEMREMAP_WB);
	if (!mh->base)
		return -ENOMEM;
	mh->size = size;
	return 0;
}

static void beluga_mh_unmap(struct beluga_mh *mh)
{
	if (mh->base)
		memunmap(mh->base);
	mh->base = NULL;
	mh->size = 0;
}

/*
 * A fence cannot revoke pins that devices hold (Documentation/multihost.md,
 * section 10), so shared-pool mappings refuse get_user_pages() unless the
 * operator, who then provides fencing outside the host, allows it at load.
 */
static bool beluga_mh_allow_gup;
module_param_named(mh_allow_gup, beluga_mh_allow_gup, bool, 0444);
MODULE_PARM_DESC(mh_allow_gup, "Let get_user_pages() pin every shared-pool mapping (RDMA, io_uring fixed buffers, cudaHostRegister, O_DIRECT); only where something outside the host stops its devices within mh_device_fence_ms of losing its lease (default N: only declared device ranges, under a watchdog)");
/*
 * With mh_allow_gup: the time the operator's outside fence needs to stop
 * the host's devices, put into its record as a device lease from the
 * join on (0: none, the other hosts wait one lease).
 */
static unsigned int beluga_mh_device_fence_ms;
module_param_named(mh_device_fence_ms, beluga_mh_device_fence_ms, uint, 0444);
MODULE_PARM_DESC(mh_device_fence_ms, "With mh_allow_gup: ms the host's devices may go on after its fence; other hosts wait that much longer (default 0)");

#ifdef CONFIG_FAULT_INJECTION_DEBUG_FS
/*
 * Testing only: a heartbeat or maintenance tick that this fault attribute
 * fails is skipped, as if the host had stalled; a host whose heartbeats
 * all fail for half a lease fences itself. debugfs:
 * beluga/mh_stall_heartbeat/ (Documentation/fault-injection): for
 * example probability 100, times -1, verbose 0 to stall, then
 * probability 0 to let the host rejoin.
 */
static DECLARE_FAULT_ATTR(beluga_mh_stall_attr);

static bool beluga_mh_stalled(void)
{
	return should_fail(&beluga_mh_stall_attr, 1);
}

void beluga_mh_debugfs_init(struct dentry *root)
{
	fault_create_debugfs_attr("mh_stall_heartbeat", root,
				  &beluga_mh_stall_attr);
}
#else
/*
 * Kernels without fault injection (Debian's): the same directory with
 * only "probability": 0 runs, anything else skips every heartbeat and
 * tick (the multi-host guests' watchdog scenario stalls hosts this way).
 */
static u32 beluga_mh_stall_probability;

static bool beluga_mh_stalled(void)
{
	return READ_ONCE(beluga_mh_stall_probability);
}

void beluga_mh_debugfs_init(struct dentry *root)
{
	struct dentry *dir = debugfs_create_dir("mh_stall_heartbeat", root);

	debugfs_create_u32("probability", 0600, dir,
			   &beluga_mh_stall_probability);
}
#endif

/* The heartbeat period of the pool, fixed at attach. */
static unsigned long beluga_mh_period(struct beluga_mh *mh)
{
	return mh->period;
}

static void beluga_mh_hb_fn(struct work_struct *work)
{
	struct beluga_mh *mh = container_of(to_delayed_work(work),
					    struct beluga_mh, hb_work);

	if (!beluga_mh_stalled())
		bel_mh_heartbeat(&mh->host);
	/* Fenced: let the tick zap and rejoin now, not a period later. */
	if (bel_mh_fenced_now(&mh->host) && READ_ONCE(mh->running))
		mod_delayed_work(system_unbound_wq, &mh->tick_work, 0);
	else if (READ_ONCE(mh->running))
		queue_delayed_work(system_highpri_wq, &mh->hb_work,
				   beluga_mh_period(mh));
}

/*
 * A host goes (leave, rejoin): its counters become the pool's, which run
 * since load whatever kind the pool is later (ops_rwsem held for writing).
 */
static void beluga_mh_retire_ops(struct beluga_device *dev,
				 struct bel_mh_host *h)
{
	bel_pool_add_counters(&dev->pool, &h->opstats);
}

/*
 * The host fenced itself (its lease ran out: it stores nothing any more,
 * and other hosts may soon reuse the blocks it pinned). Make every file
 * opened so far stale and zap every mapping of the pool, so that no
 * process reads a reused block through a pin that is gone: their faults
 * raise SIGBUS from now on (mmap.c), their block commands fail with
 * -ESTALE. Process context: the tick work.
 */
static void beluga_mh_zap(struct beluga_mh *mh)
{
	struct beluga_device *dev = mh->dev;
	struct beluga_mh_pool *mp = dev->mh;

	down_write(&mp->fence_rwsem);
	WRITE_ONCE(mp->fence_epoch, mp->fence_epoch + 1);
	up_write(&mp->fence_rwsem);
	unmap_mapping_range(dev->inode->i_mapping, 0, 0, 1);
}

/*
 * Rejoin after a fence: drop the fenced host's state and join again with a
 * new incarnation (after its old record has been silent for a lease), never
 * formatting. Needs ops_rwsem for writing, which DETACH and unload hold
 * while they cancel this work: only tried, -EAGAIN retries at the next
 * tick. Block commands wait meanwhile (a lease and more). Any other error
 * is final: the pool stays down (-ESTALE) until DETACH; a pool formatted
 * again meanwhile (another uuid or geometry) is refused before this host
 * writes anything into it.
 */
static int beluga_mh_rejoin(struct beluga_mh *mh)
{
	struct beluga_device *dev = mh->dev;
	struct bel_mh_config cfg = mh->cfg;
	int ret;

	if (!down_write_trylock(&dev->ops_rwsem))
		return -EAGAIN;
	cancel_delayed_work_sync(&mh->hb_work);
	/* The same pool or nothing: checked before anything is written. */
	cfg.expect_identity = true;
	memcpy(cfg.expect_uuid, mh->host.geo.uuid, sizeof(cfg.expect_uuid));
	cfg.expect_nr_blocks = mh->nr_blocks;
	cfg.block_size = mh->block_size;
	beluga_mh_retire_ops(dev, &mh->host);
	bel_mh_destroy(&mh->host);
	mh->joined = false;
	/* The files' clients belonged to the old host: forget them. */
	dev->mh->gen++;

	cfg.format = false;
	cfg.join_only = true;
	ret = bel_mh_attach(&mh->host, &beluga_mh_mem_ops, mh, mh->size, &cfg);
	if (ret) {
		pr_err("host %u could not rejoin its shared pool (%d): %s; detach it\n",
		       cfg.host_id, ret, mh->host.why ? mh->host.why : "?");
	} else {
		mh->joined = true;
		/* The new record has no device lease of a declaration. */
		mh->lease_held = false;
		pr_notice("host %u rejoined its shared pool as incarnation %u\n",
			  cfg.host_id, le32_to_cpu(mh->host.rec.incarnation));
		queue_delayed_work(system_highpri_wq, &mh->hb_work,
				   beluga_mh_period(mh));
	}
	up_write(&dev->ops_rwsem);
	return ret;
}

/*
 * Devices may still reach the pool: a declared range is not closed yet,
 * or a page of the region is referenced from outside (a pin outlives its
 * mapping and file). Tick, or ops_rwsem held.
 */
static bool beluga_mh_devices_held(struct beluga_mh *mh)
{
	return beluga_devlease_nr_ranges(mh->dev) ||
	       beluga_region_pages_busy(mh->region);
}

/*
 * The tick of a host that holds its lease: end the record's device lease
 * once no device can reach the pool, and tell the devices to let go when
 * a host that ignores device leases is alive in the pool.
 */
static void beluga_mh_devlease_tick(struct beluga_mh *mh)
{
	struct beluga_device *dev = mh->dev;

	if (!READ_ONCE(mh->lease_held))
		return;
	if (bel_mh_device_lease_unsafe(&mh->host)) {
		if (!mh->unsafe_signalled) {
			pr_warn("host %u: a host that ignores device leases (format before 1.3) joined the pool: device ranges signalled; their devices must let go\n",
				mh->host.id);
			beluga_devlease_signal(dev);
		}
		mh->unsafe_signalled = true;
	} else {
		mh->unsafe_signalled = false;
	}
	if (beluga_devlease_nr_ranges(dev) ||
	    !mutex_trylock(&dev->devlease_mutex))
		return;
	if (!beluga_mh_devices_held(mh) &&
	    !bel_mh_device_lease(&mh->host, false, 0))
		mh->lease_held = false;
	mutex_unlock(&dev->devlease_mutex);
}

static void beluga_mh_tick_fn(struct work_struct *work)
{
	struct beluga_mh *mh = container_of(to_delayed_work(work),
					    struct beluga_mh, tick_work);
	/* The stall test hook stops the tick too: it heartbeats. */
	bool stalled = beluga_mh_stalled();
	bool held;
	int ret;

	if (mh->rejoin_failed)
		return;
	if (!mh->fenced) {
		if (!stalled)
			bel_mh_tick(&mh->host);
		if (bel_mh_fenced_now(&mh->host)) {
			pr_warn("host %u lost its lease: fenced; mappings zapped, files opened so far are stale; rejoining\n",
				mh->host.id);
			WRITE_ONCE(mh->fenced, true);
			WRITE_ONCE(mh->dev->down, true);
			beluga_mh_zap(mh);
			/* Devices are not zapped: tell them to let go. */
			beluga_devlease_signal(mh->dev);
			mh->devices_logged = false;
			trace_beluga_fence(beluga_pool_id(mh->dev), mh->host.id,
					   READ_ONCE(mh->dev->mh->fence_epoch));
		} else if (!stalled) {
			beluga_mh_devlease_tick(mh);
		}
	}
	/*
	 * Not before the devices let go: the new incarnation ends what the
	 * others concluded about the old one, pins and all. Meanwhile the
	 * watchdog daemon is told HOLD, and the host resets within W.
	 */
	held = mh->fenced && beluga_mh_devices_held(mh);
	WRITE_ONCE(mh->dev->mh->watchdog_hold, held);
	if (held) {
		if (!mh->devices_logged)
			pr_warn("host %u: fenced while devices may reach the pool (device ranges declared, or pages pinned): not rejoining until they let go; the watchdog resets the host if they do not\n",
				mh->host.id);
		mh->devices_logged = true;
	} else if (mh->fenced && !stalled) {
		ret = beluga_mh_rejoin(mh);
		if (!ret) {
			WRITE_ONCE(mh->fenced, false);
			WRITE_ONCE(mh->dev->down, false);
		} else if (ret != -EAGAIN) {
			mh->rejoin_failed = true;
		}
	}
	if (READ_ONCE(mh->running) && !mh->rejoin_failed)
		queue_delayed_work(system_unbound_wq, &mh->tick_work,
				   beluga_mh_period(mh));
}

/*
 * Join the pool in the mapped region (formatting it if needed) and start
 * the heartbeat and the tick. On failure *why says why (may be NULL).
 */
static int beluga_mh_start(struct beluga_mh *mh,
			   const struct bel_mh_config *cfg, const char **why)
{
	struct bel_mh_config c = *cfg;
	int ret;

	*why = NULL;
	/* A few jiffies at least: the heartbeat is a delayed work. */
	c.min_heartbeat_ms = BELUGA_MH_MIN_HEARTBEAT_MS;
	ret = bel_mh_attach(&mh->host, &beluga_mh_mem_ops, mh, mh->size, &c);
	if (ret) {
		*why = mh->host.why;
		return ret;
	}
	mh->cfg = c;
	mh->period = max_t(unsigned long, 1,
			   msecs_to_jiffies(div_u64(mh->host.geo.heartbeat_ns,
						    NSEC_PER_MSEC)));
	mh->joined = true;
	INIT_DELAYED_WORK(&mh->hb_work, beluga_mh_hb_fn);
	INIT_DELAYED_WORK(&mh->tick_work, beluga_mh_tick_fn);
	mh->fenced = false;
	mh->rejoin_failed = false;
	WRITE_ONCE(mh->dev->down, false);
	WRITE_ONCE(mh->running, true);
	queue_delayed_work(system_highpri_wq, &mh->hb_work,
			   beluga_mh_period(mh));
	queue_delayed_work(system_unbound_wq, &mh->tick_work,
			   beluga_mh_period(mh));
	return 0;
}

/*
 * With ops_rwsem held for writing (the tick's rejoin cannot run then, so it
 * queues no heartbeat). The heartbeat may kick the tick: cancel it first.
 */
static void beluga_mh_stop_works(struct beluga_mh *mh)
{
	WRITE_ONCE(mh->running, false);
	cancel_delayed_work_sync(&mh->hb_work);
	cancel_delayed_work_sync(&mh->tick_work);
}

/*
 * Clean leave: -EBUSY (and still running) while clients hold allocations
 * or pins, unless @force (module unload: no client exists). A fenced host
 * leaves nothing behind in the pool: its record goes silent.
 */
static int beluga_mh_stop(struct beluga_mh *mh, bool force)
{
	int ret;

	beluga_mh_stop_works(mh);
	/* A failed rejoin left nothing to leave. */
	if (!mh->joined) {
		WRITE_ONCE(mh->dev->down, false);
		return 0;
	}
	ret = bel_mh_leave(&mh->host);
	if (ret == -EBUSY && !force) {
		WRITE_ONCE(mh->running, true);
		queue_delayed_work(system_highpri_wq, &mh->hb_work, 0);
		queue_delayed_work(system_unbound_wq, &mh->tick_work,
				   beluga_mh_period(mh));
		return ret;
	}
	beluga_mh_retire_ops(mh->dev, &mh->host);
	bel_mh_destroy(&mh->host);
	mh->joined = false;
	WRITE_ONCE(mh->dev->down, false);
	return 0;
}

/*
 * The pool's blocks start at @first_offset of the mapping: the core names
 * them by offset from then on, in this attach and in any rejoin.
 */
static void beluga_mh_set_map_base(struct beluga_mh *mh, u64 first_offset)
{
	mh->cfg.map_base = first_offset;
	bel_mh_set_map_base(&mh->host, first_offset);
}

/*
 * Write a block's bytes back from this CPU's caches before it is published:
 * a writer that forgot to would otherwise publish stale memory to the other
 * hosts (Documentation/multihost.md, section 10).
 */
static void beluga_mh_flush_block(struct beluga_mh *mh, u32 block)
{
	u64 off = bel_mh_block_off(&mh->host.geo, block);
	u64 left = mh->block_size;

	/* Blocks may be 1 GiB: reschedule every 2 MiB of CLWB. */
	while (left) {
		u64 n = min_t(u64, left, SZ_2M);

		beluga_mh_flush(mh, BEL_MH_F_PAYLOAD, off, n);
		off += n;
		left -= n;
		cond_resched();
	}
}

/*
 * This file's client of the shared pool (ops_rwsem held for reading, so
 * the host is stable). A client left from an earlier shared attach holds
 * nothing any more (DETACH needs that): start it afresh.
 * -ESTALE: the file was opened before the host last fenced itself, or the
 * host could not rejoin the pool after a fence.
 */
static struct bel_mh_client *beluga_mh_client(struct beluga_file *bf)
{
	struct beluga_mh_pool *mp = bf->dev->mh;
	struct beluga_mh_file *mf = bf->mh;

	if (!mp->cur->joined ||
	    mf->fence_epoch != READ_ONCE(mp->fence_epoch))
		return ERR_PTR(-ESTALE);
	mutex_lock(&mf->lock);
	if (mf->gen != mp->gen) {
		bel_mh_client_forget(&mf->client);
		bel_mh_client_init(&mp->cur->host, &mf->client);
		mf->gen = mp->gen;
	}
	mutex_unlock(&mf->lock);
	return &mf->client;
}

int beluga_mh_file_open(struct beluga_file *bf)
{
	struct beluga_mh_file *mf;

	mf = kzalloc(sizeof(*mf), GFP_KERNEL);
	if (!mf)
		return -ENOMEM;
	mutex_init(&mf->lock);
	mf->fence_epoch = READ_ONCE(bf->dev->mh->fence_epoch);
	bf->mh = mf;
	return 0;
}

/* close(): give back what the file holds in the shared pool. */
void beluga_mh_file_release(struct beluga_file *bf)
{
	struct beluga_device *dev = bf->dev;
	struct beluga_mh_file *mf = bf->mh;

	down_read(&dev->ops_rwsem);
	if (mf->gen && dev->mh->cur && mf->gen == dev->mh->gen)
		bel_mh_client_release(&mf->client);
	else
		bel_mh_client_forget(&mf->client);
	up_read(&dev->ops_rwsem);
	mutex_destroy(&mf->lock);
	kfree(mf);
}

int beluga_mh_pool_init(struct beluga_device *dev)
{
	dev->mh = kzalloc(sizeof(*dev->mh), GFP_KERNEL);
	if (!dev->mh)
		return -ENOMEM;
	init_rwsem(&dev->mh->fence_rwsem);
	return 0;
}

/* Unload: every region is detached, no file is open. */
void beluga_mh_pool_exit(struct beluga_device *dev)
{
	kfree(dev->mh);
	dev->mh = NULL;
}

/*
 * The tracepoint hook of the shared pool's core (core/bel_env.h): one
 * evicted block, under the host mutex.
 */
void bel_env_trace_mh_evict(struct bel_mh_host *h, u32 block, u64 ns,
			    u64 key_lo, u64 key_hi)
{
	struct beluga_mh *mh = container_of(h, struct beluga_mh, host);

	trace_beluga_evict(beluga_pool_id(mh->dev), bel_mh_offset_of(h, block),
			   ns, key_lo, key_hi);
}

/* The uapi's host records mirror the core's. */
static_assert((int)BELUGA_HOST_NONE == (int)BEL_MH_HOST_NONE &&
	      (int)BELUGA_HOST_ACTIVE == (int)BEL_MH_HOST_ACTIVE &&
	      (int)BELUGA_HOST_LEFT == (int)BEL_MH_HOST_LEFT);
static_assert(BELUGA_MAX_HOSTS == BEL_MH_MAX_HOSTS);
static_assert(sizeof_field(struct bel_mh_host_info, name) <
	      sizeof_field(struct beluga_host, name));

/*
 * BELUGA_IOC_HOSTS and the debugfs "hosts" table: the records of the
 * attached shared pool as this host sees it, into @out (room for
 * BELUGA_MAX_HOSTS). Their number, 0 without a joined shared pool, or
 * -ENOMEM. No user memory is touched here: ops_rwsem is held.
 */
int beluga_mh_hosts(struct beluga_device *dev, struct beluga_host *out)
{
	struct bel_mh_host_info *info;
	struct beluga_mh *mh;
	int n = 0, i;

	info = kcalloc(BEL_MH_MAX_HOSTS, sizeof(*info), GFP_KERNEL);
	if (!info)
		return -ENOMEM;
	down_read(&dev->ops_rwsem);
	mh = dev->mh->cur;
	if (mh && mh->joined)
		n = bel_mh_hosts(&mh->host, info, BEL_MH_MAX_HOSTS);
	up_read(&dev->ops_rwsem);
	for (i = 0; i < n; i++)
		bel_mh_host_info_to_uapi(&info[i], i, &out[i]);
	kfree(info);
	/* Not joined (-ENODEV from the core): no records. */
	return max(n, 0);
}

/*
 * This host's view of the pool (ops_rwsem held): the core never sees a
 * shared pool's blocks. Free and published blocks of the partitions this
 * host owns, blocks allocated by its files, blocks it pins. Blocks of
 * partitions other hosts own are in total_blocks only. All zero while a
 * failed rejoin keeps the pool down.
 */
static void beluga_mh_host_stats(struct beluga_mh *mh, struct bel_mh_stats *ms)
{
	memset(ms, 0, sizeof(*ms));
	if (mh->joined)
		bel_mh_stats(&mh->host, ms);
}

/* STATS and the stats/ attributes (ops_rwsem held for reading). */
static void beluga_mh_stats(struct beluga_device *dev, struct bel_stats *s)
{
	struct bel_mh_stats ms;

	/* Counters of the hosts gone since load, and the core's own. */
	bel_pool_stats(&dev->pool, s);
	beluga_mh_host_stats(dev->mh->cur, &ms);
	bel_mh_stats_to_pool(&ms, s);
}

/* REGION_INFO and sysfs of the shared region: the occupancy of STATS. */
static int beluga_mh_region_stats(struct beluga_region *region,
				  struct bel_region_stats *rs)
{
	struct beluga_device *dev = region->dev;
	struct bel_mh_stats ms;
	int ret;

	ret = bel_region_stats(&dev->pool, region->slot, rs);
	if (ret)
		return ret;
	beluga_mh_host_stats(dev->mh->cur, &ms);
	rs->free_blocks = ms.free_blocks;
	rs->allocated_blocks = ms.allocated_blocks;
	rs->published_blocks = ms.published_blocks;
	return 0;
}

/*
 * --- mapping a shared pool -----------------------------------------------
 *
 * A fence cannot revoke pins that devices hold (Documentation/multihost.md,
 * section 10), so shared-pool mappings refuse get_user_pages() unless the
 * operator, who then provides fencing outside the host, allows it at load:
 * VM_IO refuses the slow path, and it makes mmap.c map the pages with
 * special entries, which the fast path leaves to the slow one.
 * A file opened before a fence of the host is stale: mmap() fails, and its
 * faults raise SIGBUS. mmap() runs under regions_rwsem, which keeps the pool's
 * ops and host.
 */
static int beluga_mh_mmap(struct beluga_file *bf, struct vm_area_struct *vma)
{
	if (bf->mh->fence_epoch != READ_ONCE(bf->dev->mh->fence_epoch))
		return -ESTALE;
	if (!beluga_mh_allow_gup &&
	    !(beluga_devlease_pinnable(bf, vma) &&
	      READ_ONCE(bf->mh->range_gen) == READ_ONCE(bf->dev->mh->gen)))
		vm_flags_set(vma, VM_IO);
	return 0;
}

int beluga_mh_device_lease(struct beluga_file *bf, u32 *fence_ms)
{
	struct beluga_device *dev = bf->dev;
	struct beluga_mh *mh;
	u32 w;
	int ret;

	*fence_ms = 0;
	down_read(&dev->ops_rwsem);
	mh = dev->mh->cur;
	ret = mh ? 0 : BELUGA_RANGE_LOCAL;
	if (!mh)
		goto out;
	if (!mh->joined || READ_ONCE(dev->down) ||
	    bf->mh->fence_epoch != READ_ONCE(dev->mh->fence_epoch)) {
		ret = -ESTALE;
		goto out;
	}
	/* The operator's fence: the record has carried its W since the join. */
	if (beluga_mh_allow_gup) {
		*fence_ms = mh->cfg.device_fence_ms;
		ret = BELUGA_RANGE_LOCAL;
		goto out;
	}
	w = beluga_devlease_watchdog_ms(dev);
	if (!w) {
		ret = -ENOLINK;
		goto out;
	}
	ret = bel_mh_device_lease(&mh->host, true, w);
	if (ret == -EPROTO)
		pr_warn("host %u: device range refused: %s\n", mh->host.id,
			mh->host.why);
	if (ret)
		goto out;
	mh->lease_held = true;
	bf->mh->range_gen = dev->mh->gen;
	*fence_ms = w;
out:
	up_read(&dev->ops_rwsem);
	return ret;
}

/*
 * The watchdog may be fed while the host holds its lease (it stores and
 * its devices may write: the others wait for it), or once nothing can
 * reach the pool from outside after a fence.
 */
bool beluga_mh_watchdog_hold(struct beluga_device *dev)
{
	struct beluga_mh *mh;
	bool hold = false;

	/*
	 * The daemon must never wait long: a rejoin holds ops_rwsem while
	 * it waits for its old record's silence, longer than W. While a
	 * writer holds it, the last verdict stands (the tick's or the last
	 * QUERY's): a rejoin starts only after the tick saw nothing reach
	 * the pool (FEED), and a DETACH retried in a loop on a fenced host
	 * with pinned pages must not feed the watchdog either.
	 */
	if (!down_read_trylock(&dev->ops_rwsem))
		return READ_ONCE(dev->mh->watchdog_hold);
	mh = dev->mh->cur;
	if (mh && (!mh->joined || READ_ONCE(mh->fenced) ||
		   bel_mh_fenced_now(&mh->host)))
		hold = beluga_mh_devices_held(mh);
	WRITE_ONCE(dev->mh->watchdog_hold, hold);
	up_read(&dev->ops_rwsem);
	return hold;
}

/*
 * A fault runs under fence_rwsem (read), so that beluga_mh_zap() bumps
 * the epoch under the write lock, then zaps every mapping of the pool,
 * and no fault inserts a page in between.
 */
static bool beluga_mh_fault_begin(struct beluga_file *bf,
				  struct beluga_region *region)
{
	struct beluga_mh_pool *mp = region->dev->mh;

	down_read(&mp->fence_rwsem);
	if (bf->mh->fence_epoch == mp->fence_epoch)
		return true;
	up_read(&mp->fence_rwsem);
	return false;
}

static void beluga_mh_fault_end(struct beluga_file *bf,
				struct beluga_region *region)
{
	up_read(&region->dev->mh->fence_rwsem);
}

/*
 * --- memory errors ---------------------------------------------------------
 *
 * poison.c found a poisoned page (a fault on it, or ATTACH's scan): the
 * block goes out of service on every host through the protocol
 * (bel_mh_retire(): RETIRED in the pool's index when this host owns the
 * block's partition, a request in its host record for the owner
 * otherwise).
 */
static void beluga_mh_retire_range(struct beluga_mh *mh,
				   struct beluga_region *region,
				   u64 region_offset, u64 len)
{
	u64 bs = mh->host.geo.block_size;
	u64 end = min_t(u64, region_offset + len, (u64)mh->nr_blocks * bs);
	u64 off;
	int ret;

	for (off = round_down(region_offset, bs); off < end; off += bs) {
		ret = bel_mh_retire(&mh->host, (u32)div64_u64(off, bs));
		if (ret == BEL_MH_RETIRED_NOW)
			pr_warn_ratelimited("%s: memory error: shared block at offset 0x%llx retired\n",
					    region->name, region->first_offset + off);
		else if (ret == BEL_MH_RETIRE_ASKED)
			pr_warn_ratelimited("%s: memory error: shared block at offset 0x%llx; its partition's owner is asked to retire it\n",
					    region->name, region->first_offset + off);
		else if (ret < 0)
			pr_warn_ratelimited("%s: memory error: shared block at offset 0x%llx not retired yet (%d); the next fault tries again\n",
					    region->name, region->first_offset + off,
					    ret);
	}
}

/*
 * The retire op. During ATTACH's scan (beluga_region_reserve_locked()) the
 * attach holds ops_rwsem for writing and the joined host waits in
 * region->mh; from a fault (poison.c, no pool lock held) ops_rwsem for
 * reading keeps the device's host. mh->nr_blocks is set before either.
 */
static void beluga_mh_retire(struct beluga_region *region, u64 region_offset,
			     u64 len)
{
	struct beluga_device *dev = region->dev;
	struct beluga_mh *mh = region->mh;

	if (mh) {
		beluga_mh_retire_range(mh, region, region_offset, len);
		return;
	}
	down_read(&dev->ops_rwsem);
	mh = dev->mh->cur;
	if (mh && mh->joined)
		beluga_mh_retire_range(mh, region, region_offset, len);
	up_read(&dev->ops_rwsem);
}

/* --- attach and leave ----------------------------------------------------- */

/*
 * Map the claimed range, join (or format) the multi-host pool in it and
 * start its heartbeat.
 */
static int beluga_mh_join(struct beluga_region *region,
			  const struct beluga_attach *arg,
			  struct beluga_mh **mhp)
{
	struct bel_mh_config cfg = {};
	struct beluga_mh *mh;
	const char *why;
	s64 id;
	int ret;

	id = arg->flags & BELUGA_ATTACH_HOST_ID ? (s64)arg->host_id :
						  (s64)READ_ONCE(beluga_host_id);
	if (id < 0 || id >= BEL_MH_MAX_HOSTS) {
		pr_warn("%s: shared attach needs a host id 0-%u (beluga.host_id= or the ATTACH call)\n",
			region->name, BEL_MH_MAX_HOSTS - 1);
		return id < 0 ? -EINVAL : -ERANGE;
	}
	mh = kzalloc(sizeof(*mh), GFP_KERNEL);
	if (!mh)
		return -ENOMEM;
	mh->dev = region->dev;
	ret = beluga_mh_map(mh, region->phys_start, region->length);
	if (ret)
		goto out_free;

	cfg.host_id = (u32)id;
	cfg.block_size = arg->block_size;
	cfg.format = arg->flags & BELUGA_ATTACH_FORMAT;
	cfg.heartbeat_ms = READ_ONCE(beluga_mh_heartbeat_ms);
	cfg.lease_ms = READ_ONCE(beluga_mh_lease_ms);
	if (beluga_mh_allow_gup)
		cfg.device_fence_ms = READ_ONCE(beluga_mh_device_fence_ms);
	cfg.nonce = get_random_u64() | 1;
	strscpy(cfg.name, utsname()->nodename, sizeof(cfg.name));
	ret = beluga_mh_start(mh, &cfg, &why);
	if (ret) {
		pr_warn("%s: shared attach as host %u refused (%d): %s\n",
			region->name, cfg.host_id, ret, why ? why : "?");
		goto out_unmap;
	}
	region->data_off = mh->host.geo.data_off;
	*mhp = mh;
	pr_info("%s: joined shared pool as host %u%s: %u blocks of %llu bytes, metadata %llu bytes\n",
		region->name, cfg.host_id,
		mh->host.formatted ? " (formatted it)" : "",
		mh->host.geo.nr_blocks, mh->host.geo.block_size,
		mh->host.geo.data_off);
	return 0;

out_unmap:
	beluga_mh_unmap(mh);
out_free:
	kfree(mh);
	return ret;
}

/* Leave the pool (-EBUSY while clients hold something, unless @force). */
static int beluga_mh_leave(struct beluga_mh *mh, bool force)
{
	int ret;

	ret = beluga_mh_stop(mh, force);
	if (ret)
		return ret;
	beluga_mh_unmap(mh);
	kfree(mh);
	return 0;
}

/*
 * The attach op: a shared pool is one region, alone in its pool. Its
 * range is the pool's own data, cleared at FORMAT and never at a join, so
 * it is claimed with the locks held, not prepared first. The pool is
 * joined here, before the ATTACH answers, and the region reserved; the
 * joined pool waits in region->mh, out of the block commands' reach,
 * until beluga_mh_attach_commit() makes it the device's. The offset space
 * shows the data area only.
 */
static int beluga_mh_attach(struct beluga_device *dev,
			    struct beluga_region *region,
			    struct beluga_attach *arg)
{
	struct beluga_mh *mh;
	u64 length;
	int ret;

	mutex_lock(&beluga_claim_mutex);
	down_write(&dev->ops_rwsem);
	down_write(&dev->regions_rwsem);
	ret = beluga_region_alone_locked(dev, region);
	if (ret)
		goto out_unlock;
	ret = beluga_region_claim_locked(dev, region);
	if (ret)
		goto out_unlock;
	ret = beluga_mh_join(region, arg, &mh);
	if (ret)
		goto out_unclaim;
	length = (u64)mh->host.geo.nr_blocks * mh->host.geo.block_size;
	mh->region = region;
	mh->block_size = mh->host.geo.block_size;
	mh->nr_blocks = mh->host.geo.nr_blocks;
	/* The reserve's poison scan retires through it (beluga_mh_retire()). */
	region->mh = mh;
	ret = beluga_region_reserve_locked(dev, region, length,
					   mh->host.geo.block_size);
	if (ret)
		goto out_leave;
	if (region->nr_blocks != mh->host.geo.nr_blocks) {
		ret = -EINVAL;
		goto out_unreserve;
	}
	beluga_mh_set_map_base(mh, region->first_offset);
	/* Nothing to clear: "attaching" shows it complete. */
	atomic64_set(&region->prepared, region->length);
	up_write(&dev->regions_rwsem);
	up_write(&dev->ops_rwsem);
	mutex_unlock(&beluga_claim_mutex);
	return 0;

out_unreserve:
	beluga_region_unreserve_locked(dev, region);
out_leave:
	region->mh = NULL;
	/* No client can hold anything in it yet. */
	beluga_mh_leave(mh, true);
out_unclaim:
	beluga_region_unclaim(region);
out_unlock:
	up_write(&dev->regions_rwsem);
	up_write(&dev->ops_rwsem);
	mutex_unlock(&beluga_claim_mutex);
	return ret;
}

/*
 * The attach_commit op: the joined pool becomes the device's. region->mh
 * is cleared before the region becomes visible: a fault's retire then
 * finds the host through the device, under ops_rwsem.
 */
static void beluga_mh_attach_commit(struct beluga_device *dev,
				    struct beluga_region *region)
{
	dev->mh->cur = region->mh;
	region->mh = NULL;
	beluga_region_commit_locked(dev, region);
	dev->mh->gen++;
	dev->ops = &beluga_shared_pool_ops;
}

/*
 * The attach_abort op: the answer could not be written; leave the pool,
 * in which no client can hold anything yet.
 */
static void beluga_mh_attach_abort(struct beluga_device *dev,
				   struct beluga_region *region)
{
	beluga_region_unreserve_locked(dev, region);
	beluga_mh_leave(region->mh, true);
	region->mh = NULL;
	beluga_region_unclaim(region);
}

/* The detach op: leave the pool first; the core holds nothing in it. */
static int beluga_mh_detach(struct beluga_device *dev,
			    struct beluga_region *region, bool unloading)
{
	int ret;

	ret = beluga_mh_leave(dev->mh->cur, unloading);
	if (ret)
		return ret;
	dev->mh->cur = NULL;
	dev->ops = &beluga_local_pool_ops;
	pr_info("%s: left the shared pool\n", region->name);
	return 0;
}

/*
 * --- block commands of a shared pool ----------------------------------------
 * Called with ops_rwsem held for reading, the pool shared. The core takes
 * the mapping's offsets and the uapi's publish items, like the single-host
 * core.
 */

static int beluga_mh_alloc(struct beluga_file *bf, u32 count, u64 *offsets,
			   struct beluga_evicted_key *evicted, u32 *nr_evicted)
{
	struct bel_mh_client *c = beluga_mh_client(bf);

	if (IS_ERR(c))
		return PTR_ERR(c);
	return bel_mh_alloc(c, count, offsets, evicted, nr_evicted);
}

static int beluga_mh_free(struct beluga_file *bf, u32 count,
			  const u64 *offsets)
{
	struct bel_mh_client *c = beluga_mh_client(bf);

	return IS_ERR(c) ? PTR_ERR(c) : bel_mh_free(c, count, offsets);
}

static int beluga_mh_release(struct beluga_file *bf, u32 count,
			     const u64 *offsets)
{
	struct bel_mh_client *c = beluga_mh_client(bf);

	return IS_ERR(c) ? PTR_ERR(c) : bel_mh_release(c, count, offsets);
}

static int beluga_mh_cmp_offset(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

/*
 * Write back the payload of each distinct block of @items that the file
 * has allocated, once: the others fail their PUBLISH item, and a list of
 * 4096 copies of one offset must not cost 4096 block flushes.
 */
static int beluga_mh_flush_owned(struct beluga_mh *mh, struct bel_mh_client *c,
				 u32 count,
				 const struct beluga_publish_item *items)
{
	u64 *sorted;
	u32 i, b;

	sorted = kvmalloc_array(count, sizeof(*sorted), GFP_KERNEL);
	if (!sorted)
		return -ENOMEM;
	for (i = 0; i < count; i++)
		sorted[i] = items[i].offset;
	sort(sorted, count, sizeof(*sorted), beluga_mh_cmp_offset, NULL);
	for (i = 0; i < count; i++) {
		if (i && sorted[i] == sorted[i - 1])
			continue;
		if (bel_mh_client_owns(c, sorted[i]) &&
		    !bel_mh_block_at(&mh->host, sorted[i], &b))
			beluga_mh_flush_block(mh, b);
	}
	kvfree(sorted);
	return 0;
}

static int beluga_mh_publish(struct beluga_file *bf, u64 ns, u32 count,
			     struct beluga_publish_item *items,
			     u32 *published, u32 *exists, u32 *failed)
{
	struct bel_mh_client *c = beluga_mh_client(bf);
	int ret;

	if (IS_ERR(c))
		return PTR_ERR(c);
	ret = beluga_mh_flush_owned(bf->dev->mh->cur, c, count, items);
	if (ret)
		return ret;
	/* The payload is in the device before any index entry names it. */
	mb();
	return bel_mh_publish(c, ns, count, items, published, exists, failed);
}

static int beluga_mh_lookup(struct beluga_file *bf, u64 ns, u32 count,
			    const struct beluga_key *keys, bool pin,
			    u64 *offsets, u32 *hits)
{
	struct bel_mh_client *c = beluga_mh_client(bf);

	if (IS_ERR(c))
		return PTR_ERR(c);
	return bel_mh_lookup(c, ns, count, keys, pin, offsets, hits);
}

/* No evict: -EOPNOTSUPP (uapi). */
const struct beluga_pool_ops beluga_shared_pool_ops = {
	.attach = beluga_mh_attach,
	.attach_commit = beluga_mh_attach_commit,
	.attach_abort = beluga_mh_attach_abort,
	.detach = beluga_mh_detach,
	.stats = beluga_mh_stats,
	.region_stats = beluga_mh_region_stats,
	.mmap = beluga_mh_mmap,
	.fault_begin = beluga_mh_fault_begin,
	.fault_end = beluga_mh_fault_end,
	.retire = beluga_mh_retire,
	.alloc = beluga_mh_alloc,
	.free = beluga_mh_free,
	.release = beluga_mh_release,
	.publish = beluga_mh_publish,
	.lookup = beluga_mh_lookup,
};
