/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The binary layout of <linux/beluga.h>: every struct's size and every
 * field's offset, as compile-time assertions, and the list of the
 * commands' argument structs. Not installed. It is compiled where the ABI
 * is compiled on each side: by the module (kmod/ioctl.c), by the userspace
 * kselftests (tests/kselftest/beluga_test.h) and by the host tests' fake
 * kernel (tests/userspace/fake_kernel.c), so that a change to a struct
 * that moves a field, or a compiler that lays one out differently, fails
 * the build instead of reaching a caller. Structs only grow at the end: a
 * new field is a new line here, and no existing offset ever changes (a
 * struct's size line follows its last field).
 *
 * The includer provides static_assert() and offsetof() (the kernel's
 * <linux/build_bug.h> and <linux/stddef.h>, or C11's <assert.h> and
 * <stddef.h>).
 */
#ifndef BELUGA_LAYOUT_H
#define BELUGA_LAYOUT_H

#include <linux/beluga.h>

/*
 * BELUGA_IOCTL_ARGS(F) - the commands' argument structs, each once:
 * F(name) for struct beluga_<name>. It makes the unions that hold any
 * command's argument (the module's dispatcher, the host tests' fake
 * kernel, the kselftests' raw buffer), so that a new command's struct is
 * added here once, like a STATS field in BELUGA_STATS_FIELDS. A line per
 * struct, not per command: FREE and RELEASE share struct beluga_blocks,
 * and a union holds a member once. The command tables of the module and
 * of the fake kernel pair each command with its member of that union, so
 * a struct missing here fails their build.
 * BELUGA_IOCTL_ARG_MEMBER(name) is that member.
 */
#define BELUGA_IOCTL_ARGS(F)						\
	F(info)								\
	F(stats)							\
	F(alloc)							\
	F(blocks)							\
	F(publish)							\
	F(lookup)							\
	F(attach)							\
	F(detach)							\
	F(evict)							\
	F(region_info)							\
	F(hosts)								\
	F(index_map)							\
	F(watchdog)							\
	F(device_range)

#define BELUGA_IOCTL_ARG_MEMBER(name)	struct beluga_##name name;

#define BELUGA_LAYOUT_SIZE(s, n) \
	static_assert(sizeof(struct s) == (n), #s " is " #n " bytes")
#define BELUGA_LAYOUT(s, f, off) \
	static_assert(offsetof(struct s, f) == (off), #s "." #f " at " #off)

BELUGA_LAYOUT_SIZE(beluga_key, 16);
BELUGA_LAYOUT(beluga_key, lo, 0);
BELUGA_LAYOUT(beluga_key, hi, 8);

BELUGA_LAYOUT_SIZE(beluga_info, 48);
BELUGA_LAYOUT(beluga_info, size, 0);
BELUGA_LAYOUT(beluga_info, flags, 4);
BELUGA_LAYOUT(beluga_info, abi_version, 8);
BELUGA_LAYOUT(beluga_info, nr_regions, 12);
BELUGA_LAYOUT(beluga_info, block_size, 16);
BELUGA_LAYOUT(beluga_info, nr_blocks, 24);
BELUGA_LAYOUT(beluga_info, map_size, 32);
BELUGA_LAYOUT(beluga_info, max_batch, 40);
BELUGA_LAYOUT(beluga_info, max_regions, 44);

BELUGA_LAYOUT_SIZE(beluga_stats, 152);
BELUGA_LAYOUT(beluga_stats, size, 0);
BELUGA_LAYOUT(beluga_stats, flags, 4);
BELUGA_LAYOUT(beluga_stats, total_blocks, 8);
BELUGA_LAYOUT(beluga_stats, free_blocks, 16);
BELUGA_LAYOUT(beluga_stats, allocated_blocks, 24);
BELUGA_LAYOUT(beluga_stats, published_blocks, 32);
BELUGA_LAYOUT(beluga_stats, pinned_blocks, 40);
BELUGA_LAYOUT(beluga_stats, pins, 48);
BELUGA_LAYOUT(beluga_stats, clients, 56);
BELUGA_LAYOUT(beluga_stats, allocs, 64);
BELUGA_LAYOUT(beluga_stats, frees, 72);
BELUGA_LAYOUT(beluga_stats, publishes, 80);
BELUGA_LAYOUT(beluga_stats, publish_races, 88);
BELUGA_LAYOUT(beluga_stats, lookups, 96);
BELUGA_LAYOUT(beluga_stats, lookup_keys, 104);
BELUGA_LAYOUT(beluga_stats, lookup_hits, 112);
BELUGA_LAYOUT(beluga_stats, releases, 120);
BELUGA_LAYOUT(beluga_stats, evictions, 128);
BELUGA_LAYOUT(beluga_stats, alloc_failures, 136);
BELUGA_LAYOUT(beluga_stats, retired_blocks, 144);

BELUGA_LAYOUT_SIZE(beluga_evicted_key, 24);
BELUGA_LAYOUT(beluga_evicted_key, ns, 0);
BELUGA_LAYOUT(beluga_evicted_key, key, 8);

BELUGA_LAYOUT_SIZE(beluga_alloc, 40);
BELUGA_LAYOUT(beluga_alloc, size, 0);
BELUGA_LAYOUT(beluga_alloc, flags, 4);
BELUGA_LAYOUT(beluga_alloc, count, 8);
BELUGA_LAYOUT(beluga_alloc, __reserved, 12);
BELUGA_LAYOUT(beluga_alloc, offsets, 16);
BELUGA_LAYOUT(beluga_alloc, evicted, 24);
BELUGA_LAYOUT(beluga_alloc, nr_evicted, 32);
BELUGA_LAYOUT(beluga_alloc, __reserved2, 36);

BELUGA_LAYOUT_SIZE(beluga_blocks, 24);
BELUGA_LAYOUT(beluga_blocks, size, 0);
BELUGA_LAYOUT(beluga_blocks, flags, 4);
BELUGA_LAYOUT(beluga_blocks, count, 8);
BELUGA_LAYOUT(beluga_blocks, __reserved, 12);
BELUGA_LAYOUT(beluga_blocks, offsets, 16);

BELUGA_LAYOUT_SIZE(beluga_publish_item, 32);
BELUGA_LAYOUT(beluga_publish_item, offset, 0);
BELUGA_LAYOUT(beluga_publish_item, key, 8);
BELUGA_LAYOUT(beluga_publish_item, result, 24);
BELUGA_LAYOUT(beluga_publish_item, __reserved, 28);

BELUGA_LAYOUT_SIZE(beluga_publish, 40);
BELUGA_LAYOUT(beluga_publish, size, 0);
BELUGA_LAYOUT(beluga_publish, flags, 4);
BELUGA_LAYOUT(beluga_publish, ns, 8);
BELUGA_LAYOUT(beluga_publish, count, 16);
BELUGA_LAYOUT(beluga_publish, published, 20);
BELUGA_LAYOUT(beluga_publish, exists, 24);
BELUGA_LAYOUT(beluga_publish, failed, 28);
BELUGA_LAYOUT(beluga_publish, items, 32);

BELUGA_LAYOUT_SIZE(beluga_lookup, 40);
BELUGA_LAYOUT(beluga_lookup, size, 0);
BELUGA_LAYOUT(beluga_lookup, flags, 4);
BELUGA_LAYOUT(beluga_lookup, ns, 8);
BELUGA_LAYOUT(beluga_lookup, count, 16);
BELUGA_LAYOUT(beluga_lookup, hits, 20);
BELUGA_LAYOUT(beluga_lookup, keys, 24);
BELUGA_LAYOUT(beluga_lookup, offsets, 32);

BELUGA_LAYOUT_SIZE(beluga_attach, 104);
BELUGA_LAYOUT(beluga_attach, size, 0);
BELUGA_LAYOUT(beluga_attach, flags, 4);
BELUGA_LAYOUT(beluga_attach, backend, 8);
BELUGA_LAYOUT(beluga_attach, node, 12);
BELUGA_LAYOUT(beluga_attach, phys_start, 16);
BELUGA_LAYOUT(beluga_attach, length, 24);
BELUGA_LAYOUT(beluga_attach, block_size, 32);
BELUGA_LAYOUT(beluga_attach, name, 40);
BELUGA_LAYOUT(beluga_attach, region_id, 72);
BELUGA_LAYOUT(beluga_attach, __reserved, 76);
BELUGA_LAYOUT(beluga_attach, first_offset, 80);
BELUGA_LAYOUT(beluga_attach, nr_blocks, 88);
BELUGA_LAYOUT(beluga_attach, host_id, 96);
BELUGA_LAYOUT(beluga_attach, __reserved2, 100);

BELUGA_LAYOUT_SIZE(beluga_detach, 24);
BELUGA_LAYOUT(beluga_detach, size, 0);
BELUGA_LAYOUT(beluga_detach, flags, 4);
BELUGA_LAYOUT(beluga_detach, region_id, 8);
BELUGA_LAYOUT(beluga_detach, __reserved, 12);
BELUGA_LAYOUT(beluga_detach, evicted, 16);

BELUGA_LAYOUT_SIZE(beluga_evict, 48);
BELUGA_LAYOUT(beluga_evict, size, 0);
BELUGA_LAYOUT(beluga_evict, flags, 4);
BELUGA_LAYOUT(beluga_evict, ns, 8);
BELUGA_LAYOUT(beluga_evict, key, 16);
BELUGA_LAYOUT(beluga_evict, evicted, 32);
BELUGA_LAYOUT(beluga_evict, busy, 40);

BELUGA_LAYOUT_SIZE(beluga_region_info, 112);
BELUGA_LAYOUT(beluga_region_info, size, 0);
BELUGA_LAYOUT(beluga_region_info, flags, 4);
BELUGA_LAYOUT(beluga_region_info, region_id, 8);
BELUGA_LAYOUT(beluga_region_info, backend, 12);
BELUGA_LAYOUT(beluga_region_info, node, 16);
BELUGA_LAYOUT(beluga_region_info, mappings, 20);
BELUGA_LAYOUT(beluga_region_info, phys_start, 24);
BELUGA_LAYOUT(beluga_region_info, length, 32);
BELUGA_LAYOUT(beluga_region_info, first_offset, 40);
BELUGA_LAYOUT(beluga_region_info, nr_blocks, 48);
BELUGA_LAYOUT(beluga_region_info, free_blocks, 56);
BELUGA_LAYOUT(beluga_region_info, allocated_blocks, 64);
BELUGA_LAYOUT(beluga_region_info, published_blocks, 72);
BELUGA_LAYOUT(beluga_region_info, name, 80);

BELUGA_LAYOUT_SIZE(beluga_host, 80);
BELUGA_LAYOUT(beluga_host, host_id, 0);
BELUGA_LAYOUT(beluga_host, state, 4);
BELUGA_LAYOUT(beluga_host, flags, 8);
BELUGA_LAYOUT(beluga_host, incarnation, 12);
BELUGA_LAYOUT(beluga_host, heartbeat, 16);
BELUGA_LAYOUT(beluga_host, silent_ns, 24);
BELUGA_LAYOUT(beluga_host, owned, 32);
BELUGA_LAYOUT(beluga_host, name, 40);
BELUGA_LAYOUT(beluga_host, device_fence_ms, 72);
BELUGA_LAYOUT(beluga_host, __reserved, 76);

BELUGA_LAYOUT_SIZE(beluga_hosts, 32);
BELUGA_LAYOUT(beluga_hosts, size, 0);
BELUGA_LAYOUT(beluga_hosts, flags, 4);
BELUGA_LAYOUT(beluga_hosts, count, 8);
BELUGA_LAYOUT(beluga_hosts, __reserved, 12);
BELUGA_LAYOUT(beluga_hosts, hosts, 16);
BELUGA_LAYOUT(beluga_hosts, host_size, 24);
BELUGA_LAYOUT(beluga_hosts, __reserved2, 28);

BELUGA_LAYOUT_SIZE(beluga_index_map, 24);
BELUGA_LAYOUT(beluga_index_map, size, 0);
BELUGA_LAYOUT(beluga_index_map, flags, 4);
BELUGA_LAYOUT(beluga_index_map, offset, 8);
BELUGA_LAYOUT(beluga_index_map, length, 16);

/* The index's mapping (mmap() at BELUGA_INDEX_MAP_OFFSET). */
BELUGA_LAYOUT_SIZE(beluga_index_region, 24);
BELUGA_LAYOUT(beluga_index_region, nr_blocks, 0);
BELUGA_LAYOUT(beluga_index_region, __reserved, 4);
BELUGA_LAYOUT(beluga_index_region, first_offset, 8);
BELUGA_LAYOUT(beluga_index_region, entries, 16);

BELUGA_LAYOUT_SIZE(beluga_index_header, 48 + 24 * BELUGA_MAX_REGIONS);
BELUGA_LAYOUT(beluga_index_header, magic, 0);
BELUGA_LAYOUT(beluga_index_header, seq, 4);
BELUGA_LAYOUT(beluga_index_header, nr_buckets, 8);
BELUGA_LAYOUT(beluga_index_header, hash, 12);
BELUGA_LAYOUT(beluga_index_header, length, 16);
BELUGA_LAYOUT(beluga_index_header, buckets, 24);
BELUGA_LAYOUT(beluga_index_header, block_size, 32);
BELUGA_LAYOUT(beluga_index_header, entry_size, 40);
BELUGA_LAYOUT(beluga_index_header, __reserved, 44);
BELUGA_LAYOUT(beluga_index_header, regions, 48);

BELUGA_LAYOUT_SIZE(beluga_index_entry, 32);
BELUGA_LAYOUT(beluga_index_entry, ns, 0);
BELUGA_LAYOUT(beluga_index_entry, key, 8);
BELUGA_LAYOUT(beluga_index_entry, seq, 24);
BELUGA_LAYOUT(beluga_index_entry, next, 28);

BELUGA_LAYOUT_SIZE(beluga_watchdog, 24);
BELUGA_LAYOUT(beluga_watchdog, size, 0);
BELUGA_LAYOUT(beluga_watchdog, flags, 4);
BELUGA_LAYOUT(beluga_watchdog, timeout_ms, 8);
BELUGA_LAYOUT(beluga_watchdog, answer, 12);
BELUGA_LAYOUT(beluga_watchdog, device_ranges, 16);
BELUGA_LAYOUT(beluga_watchdog, __reserved, 20);

BELUGA_LAYOUT_SIZE(beluga_device_range, 32);
BELUGA_LAYOUT(beluga_device_range, size, 0);
BELUGA_LAYOUT(beluga_device_range, flags, 4);
BELUGA_LAYOUT(beluga_device_range, eventfd, 8);
BELUGA_LAYOUT(beluga_device_range, fence_ms, 12);
BELUGA_LAYOUT(beluga_device_range, offset, 16);
BELUGA_LAYOUT(beluga_device_range, length, 24);

/* The command area of an io_uring command: 16 bytes, a plain SQE's. */
BELUGA_LAYOUT_SIZE(beluga_uring_cmd, 16);
BELUGA_LAYOUT(beluga_uring_cmd, arg, 0);
BELUGA_LAYOUT(beluga_uring_cmd, __reserved, 8);

#undef BELUGA_LAYOUT
#undef BELUGA_LAYOUT_SIZE

#endif /* BELUGA_LAYOUT_H */
