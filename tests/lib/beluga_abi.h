/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The ABI helpers that Beluga's in-guest test programs share (the
 * kselftests, the reliability tests and the ioctl fuzzer): raw ioctl
 * wrappers on <linux/beluga.h> returning 0 or -errno, reproducible keys and
 * block patterns, and device-dax geometry from sysfs. No library on top of
 * the ABI, no test harness: each suite brings its own.
 */
#ifndef BELUGA_TEST_ABI_H
#define BELUGA_TEST_ABI_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/beluga.h>

#define BT_KIB		1024ULL
#define BT_MIB		(1024ULL * 1024ULL)
#define BT_PAGE		4096ULL

static inline uint64_t bt_mix64(uint64_t x)
{
	/* splitmix64 finaliser: a fixed, seedless mixing function */
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* A reproducible key; never all-zero. */
static inline struct beluga_key bt_key(uint64_t a, uint64_t b)
{
	struct beluga_key k;

	k.lo = bt_mix64(a * 0x100000001b3ULL + b) | 1;
	k.hi = bt_mix64(k.lo ^ (b << 17) ^ a);
	return k;
}

static inline bool bt_key_eq(struct beluga_key a, struct beluga_key b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/* Fill / check a buffer with a pattern derived from @seed. */
static inline void bt_fill(volatile void *dst, size_t len, uint64_t seed)
{
	volatile uint64_t *p = dst;
	size_t i;

	for (i = 0; i < len / 8; i++)
		p[i] = bt_mix64(seed + i);
}

/* Returns -1 when the pattern matches, else the index of the first bad word. */
static inline long bt_check(const volatile void *src, size_t len, uint64_t seed)
{
	const volatile uint64_t *p = src;
	size_t i;

	for (i = 0; i < len / 8; i++)
		if (p[i] != bt_mix64(seed + i))
			return (long)i;
	return -1;
}

#ifdef BT_VIA_RING
#include "beluga_ring.h"
#endif

/*
 * A command, 0 or -errno. Built with BT_VIA_RING, the commands that
 * io_uring takes go through it instead (beluga_ring.h, abi_ring_test).
 */
static inline int bt_ioctl(int fd, unsigned long cmd, void *arg)
{
#ifdef BT_VIA_RING
	if (bt_ring_routes(cmd))
		return bt_ring_transport(fd, cmd, arg);
#endif
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

/* BELUGA_DEV names another pool's device node (pools=N), else /dev/beluga. */
static inline const char *bt_dev_path(void)
{
	const char *dev = getenv("BELUGA_DEV");

	return dev && *dev ? dev : BELUGA_DEVICE_PATH;
}

static inline int bt_open(int flags)
{
	return open(bt_dev_path(), flags | O_CLOEXEC);
}

static inline int bt_info(int fd, struct beluga_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	return bt_ioctl(fd, BELUGA_IOC_INFO, info);
}

static inline int bt_stats(int fd, struct beluga_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	return bt_ioctl(fd, BELUGA_IOC_STATS, st);
}

static inline int bt_alloc(int fd, uint32_t count, uint64_t *offsets)
{
	struct beluga_alloc a = {
		.size = sizeof(a),
		.count = count,
		.offsets = (uintptr_t)offsets,
	};

	return bt_ioctl(fd, BELUGA_IOC_ALLOC, &a);
}

/*
 * ALLOC with BELUGA_ALLOC_EVICTED: the keys it evicted in @ev (room for
 * @count), their number in *@nr. *@nr goes in as the struct's nr_evicted
 * (which the kernel ignores) and comes back as the struct holds it after
 * the call: unchanged when the call failed (the struct is not written).
 */
static inline int bt_alloc_evicted(int fd, uint32_t count, uint64_t *offsets,
				   struct beluga_evicted_key *ev, uint32_t *nr)
{
	struct beluga_alloc a = {
		.size = sizeof(a),
		.flags = BELUGA_ALLOC_EVICTED,
		.count = count,
		.offsets = (uintptr_t)offsets,
		.evicted = (uintptr_t)ev,
		.nr_evicted = *nr,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_ALLOC, &a);

	*nr = a.nr_evicted;
	return r;
}

static inline int bt_blocks(int fd, unsigned long cmd, uint32_t count,
			    const uint64_t *offsets)
{
	struct beluga_blocks b = {
		.size = sizeof(b),
		.count = count,
		.offsets = (uintptr_t)offsets,
	};

	return bt_ioctl(fd, cmd, &b);
}

static inline int bt_free(int fd, uint32_t count, const uint64_t *offsets)
{
	return bt_blocks(fd, BELUGA_IOC_FREE, count, offsets);
}

static inline int bt_release(int fd, uint32_t count, const uint64_t *offsets)
{
	return bt_blocks(fd, BELUGA_IOC_RELEASE, count, offsets);
}

static inline int bt_publish(int fd, uint64_t ns,
			     struct beluga_publish_item *items, uint32_t count,
			     struct beluga_publish *out)
{
	struct beluga_publish p = {
		.size = sizeof(p),
		.ns = ns,
		.count = count,
		.items = (uintptr_t)items,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_PUBLISH, &p);

	if (out)
		*out = p;
	return r;
}

/* Publish one block; *result gets the per-item result. */
static inline int bt_publish1(int fd, uint64_t ns, uint64_t offset,
			      struct beluga_key key, int32_t *result)
{
	struct beluga_publish_item it = {
		.offset = offset,
		.key = key,
		.result = 0x7eadbeef,
	};
	int r = bt_publish(fd, ns, &it, 1, NULL);

	if (result)
		*result = it.result;
	return r;
}

static inline int bt_lookup(int fd, uint64_t ns, const struct beluga_key *keys,
			    uint32_t count, uint64_t *offsets, uint32_t flags,
			    uint32_t *hits)
{
	struct beluga_lookup l = {
		.size = sizeof(l),
		.flags = flags,
		.ns = ns,
		.count = count,
		.hits = 0xdeadbeef,
		.keys = (uintptr_t)keys,
		.offsets = (uintptr_t)offsets,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_LOOKUP, &l);

	if (hits)
		*hits = l.hits;
	return r;
}

static inline int bt_region_info(int fd, uint32_t id,
				 struct beluga_region_info *ri)
{
	memset(ri, 0, sizeof(*ri));
	ri->size = sizeof(*ri);
	ri->region_id = id;
	return bt_ioctl(fd, BELUGA_IOC_REGION_INFO, ri);
}

/*
 * HOSTS into @hosts[@max]: the number of records the pool has (which may
 * exceed @max: -EMSGSIZE is folded in), or -errno.
 */
static inline int bt_hosts(int fd, struct beluga_host *hosts, uint32_t max)
{
	struct beluga_hosts h = {
		.size = sizeof(h),
		.count = max,
		.hosts = (uintptr_t)hosts,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_HOSTS, &h);

	return r && r != -EMSGSIZE ? r : (int)h.count;
}

/*
 * WATCHDOG with @flags (BELUGA_WATCHDOG_REGISTER or _QUERY) and
 * @timeout_ms; the answer in *@out when it is not NULL (also on errors:
 * what the struct holds then).
 */
static inline int bt_watchdog(int fd, uint32_t flags, uint32_t timeout_ms,
			      struct beluga_watchdog *out)
{
	struct beluga_watchdog wd = {
		.size = sizeof(wd),
		.flags = flags,
		.timeout_ms = timeout_ms,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_WATCHDOG, &wd);

	if (out)
		*out = wd;
	return r;
}

/*
 * DEVICE_RANGE of [@offset, @offset + @length) with @eventfd (-1: none);
 * the answer's fence_ms in *@fence_ms when it is not NULL.
 */
static inline int bt_device_range(int fd, int eventfd, uint64_t offset,
				  uint64_t length, uint32_t *fence_ms)
{
	struct beluga_device_range dr = {
		.size = sizeof(dr),
		.eventfd = eventfd,
		.fence_ms = 0,
		.offset = offset,
		.length = length,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_DEVICE_RANGE, &dr);

	if (fence_ms)
		*fence_ms = dr.fence_ms;
	return r;
}

static inline int bt_detach(int fd, uint32_t id, uint32_t flags,
			    uint64_t *evicted)
{
	struct beluga_detach d = {
		.size = sizeof(d),
		.flags = flags,
		.region_id = id,
		.evicted = 0xdeadbeefULL,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_DETACH, &d);

	if (evicted)
		*evicted = d.evicted;
	return r;
}

static inline int bt_evict_key(int fd, uint64_t ns, struct beluga_key key,
			       struct beluga_evict *out)
{
	struct beluga_evict e = {
		.size = sizeof(e),
		.ns = ns,
		.key = key,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_EVICT, &e);

	if (out)
		*out = e;
	return r;
}

static inline int bt_evict_ns(int fd, uint64_t ns, struct beluga_evict *out)
{
	struct beluga_evict e = {
		.size = sizeof(e),
		.flags = BELUGA_EVICT_NAMESPACE,
		.ns = ns,
	};
	int r = bt_ioctl(fd, BELUGA_IOC_EVICT, &e);

	if (out)
		*out = e;
	return r;
}

static inline int bt_read_sysfs_u64(const char *path, uint64_t *val)
{
	char buf[64];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	errno = 0;
	*val = strtoull(buf, NULL, 0);	/* resource is hex "0x...", size decimal */
	return errno ? -errno : 0;
}

/*
 * Geometry of device-dax @name: the 2 MiB aligned part of its range.
 * Returns 0, or -errno when sysfs cannot be read.
 */
static inline int bt_dax_geometry(const char *name, uint64_t *phys,
				  uint64_t *size)
{
	char path[256];
	uint64_t start = 0, len = 0, astart;
	int r;

	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/resource", name);
	r = bt_read_sysfs_u64(path, &start);
	if (r)
		return r;
	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/size", name);
	r = bt_read_sysfs_u64(path, &len);
	if (r)
		return r;
	astart = (start + BELUGA_DAX_ALIGN - 1) & ~(BELUGA_DAX_ALIGN - 1);
	if (astart - start >= len)
		return -ERANGE;
	len -= astart - start;
	len &= ~(BELUGA_DAX_ALIGN - 1);
	*phys = astart;
	*size = len;
	return 0;
}

/* Write @val to a sysfs or debugfs file: 0, -errno, or -EIO if short. */
static inline int bt_write_str(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, val, strlen(val));
	close(fd);
	if (n < 0)
		return -errno;
	return n == (ssize_t)strlen(val) ? 0 : -EIO;
}

#endif /* BELUGA_TEST_ABI_H */
