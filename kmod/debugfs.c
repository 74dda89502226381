// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs: what is for humans and for tests, not an ABI.
 *   beluga/<pool>/hosts           a shared pool's host table, one line a
 *                                 host (BELUGA_IOC_HOSTS is the ABI)
 *   beluga/mh_stall_heartbeat/    fault attribute that stalls shared-pool
 *                                 heartbeats (mh.c; kernels with
 *                                 CONFIG_FAULT_INJECTION_DEBUG_FS)
 * debugfs is root-only by default; nothing here is needed to run a pool,
 * and a failure to create a file only loses that file.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/debugfs.h>
#include <linux/math64.h>
#include <linux/seq_file.h>
#include <linux/slab.h>

#include "beluga_glue.h"

static struct dentry *beluga_debugfs_root;

static const char *const beluga_host_state_names[] = {
	[BELUGA_HOST_NONE] = "none",
	[BELUGA_HOST_ACTIVE] = "active",
	[BELUGA_HOST_LEFT] = "left",
};

/*
 * One line per host record, as this host sees it; empty without a shared
 * pool:
 *   ID STATE INCARNATION HEARTBEAT OWNED(hex) alive|dead SILENT_MS self|- NAME
 */
static int beluga_hosts_show(struct seq_file *m, void *unused)
{
	struct beluga_device *dev = m->private;
	struct beluga_host *hosts;
	int n, i;

	hosts = kcalloc(BELUGA_MAX_HOSTS, sizeof(*hosts), GFP_KERNEL);
	if (!hosts)
		return -ENOMEM;
	n = beluga_mh_hosts(dev, hosts);
	for (i = 0; i < n; i++) {
		const struct beluga_host *h = &hosts[i];
		const char *state = h->state < ARRAY_SIZE(beluga_host_state_names) ?
				    beluga_host_state_names[h->state] : "?";

		seq_printf(m, "%u %s %u %llu %llx %s %llu %s %s\n", h->host_id,
			   state, h->incarnation, h->heartbeat, h->owned,
			   h->flags & BELUGA_HOST_ALIVE ? "alive" : "dead",
			   div_u64(h->silent_ns, NSEC_PER_MSEC),
			   h->flags & BELUGA_HOST_SELF ? "self" : "-",
			   h->name[0] ? h->name : "-");
	}
	kfree(hosts);
	return n < 0 ? n : 0;
}
DEFINE_SHOW_ATTRIBUTE(beluga_hosts);

void beluga_debugfs_init(void)
{
	beluga_debugfs_root = debugfs_create_dir(KBUILD_MODNAME, NULL);
	beluga_mh_debugfs_init(beluga_debugfs_root);
}

void beluga_debugfs_exit(void)
{
	debugfs_remove(beluga_debugfs_root);
}

/* beluga/<pool>/; removed with the root at unload. */
void beluga_debugfs_add_pool(struct beluga_device *dev)
{
	struct dentry *dir = debugfs_create_dir(dev->name, beluga_debugfs_root);

	debugfs_create_file("hosts", 0400, dir, dev, &beluga_hosts_fops);
}
