// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel backend: raw ioctls of <linux/beluga.h> on /dev/beluga, and
 * the admin side (attach and detach a region for one section).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench.h"

bool kernel_available(void)
{
	return access(BELUGA_DEVICE_PATH, R_OK | W_OK) == 0;
}

static int kopen(void)
{
	int fd = open(BELUGA_DEVICE_PATH, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		die("open %s: %s", BELUGA_DEVICE_PATH, strerror(errno));
	return fd;
}

static int xioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static int read_sysfs_u64(const char *path, u64 *v)
{
	char buf[64];
	FILE *f = fopen(path, "r");

	if (!f)
		return -errno;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	*v = strtoull(buf, NULL, 0);
	return 0;
}

static int dax_geometry(const char *spec, char *name, size_t len, u64 *start,
			u64 *size)
{
	const char *dev = spec + 4, *base;
	char path[256];
	u64 s = 0, z = 0;

	base = strrchr(dev, '/');
	base = base ? base + 1 : dev;
	snprintf(name, len, "%s", base);
	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/resource", base);
	if (read_sysfs_u64(path, &s))
		return -ENOENT;
	snprintf(path, sizeof(path), "/sys/bus/dax/devices/%s/size", base);
	if (read_sysfs_u64(path, &z))
		return -ENOENT;
	*start = s;
	*size = z;
	return 0;
}

u64 dax_spec_size(const char *spec)
{
	char name[64];
	u64 s, z;

	if (strncmp(spec, "dax:", 4) || dax_geometry(spec, name, sizeof(name),
						    &s, &z))
		return 0;
	return z;
}

/* A crashed earlier section may have left a region: start clean. */
static void detach_leftovers(int fd)
{
	struct beluga_info info = { .size = sizeof(info) };
	u32 slot;

	if (xioctl(fd, BELUGA_IOC_INFO, &info) || !info.nr_regions)
		return;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		struct beluga_detach d = {
			.size = sizeof(d),
			.flags = BELUGA_DETACH_EVICT,
			.region_id = slot,
		};
		int ret = xioctl(fd, BELUGA_IOC_DETACH, &d);

		if (!ret)
			note("detached a region left in slot %u", slot);
		else if (ret != -ENOENT)
			note("leftover region %u cannot be detached: %s", slot,
			     strerror(-ret));
	}
}

int kregion_attach(struct kregion *r, const char *spec, u64 bytes, u64 bs)
{
	struct beluga_attach a = { .size = sizeof(a) };
	int ret;

	memset(r, 0, sizeof(*r));
	r->admin_fd = kopen();
	detach_leftovers(r->admin_fd);
	a.block_size = bs;
	if (!strncmp(spec, "dax:", 4)) {
		char name[64];

		if (dax_geometry(spec, name, sizeof(name), &r->dax_start,
				 &r->dax_size))
			die("%s: no such device-dax instance in /sys/bus/dax/devices",
			    spec + 4);
		snprintf(r->dax_path, sizeof(r->dax_path), "%s", spec + 4);
		a.backend = BELUGA_BACKEND_DAX;
		a.node = -1;
		a.phys_start = r->dax_start;
		a.length = bytes ? (bytes + BELUGA_DAX_ALIGN - 1) &
				   ~(BELUGA_DAX_ALIGN - 1) : r->dax_size;
		if (a.length > r->dax_size)
			die("%s has %llu bytes, %llu wanted", spec + 4,
			    (unsigned long long)r->dax_size,
			    (unsigned long long)a.length);
		snprintf(a.name, sizeof(a.name), "%.31s", name);
	} else if (!strncmp(spec, "node:", 5)) {
		a.backend = BELUGA_BACKEND_NODE;
		a.node = atoi(spec + 5);
		a.length = bytes;
		snprintf(a.name, sizeof(a.name), "bench-node%d", a.node);
	} else {
		die("bad pool spec '%s' (dax:/dev/daxX.Y or node:N)", spec);
	}
	ret = xioctl(r->admin_fd, BELUGA_IOC_ATTACH, &a);
	if (ret) {
		note("ATTACH %s length %llu block_size %llu: %s", spec,
		     (unsigned long long)a.length, (unsigned long long)bs,
		     strerror(-ret));
		close(r->admin_fd);
		return ret;
	}
	r->attached = true;
	r->region_id = a.region_id;
	r->nr_blocks = a.nr_blocks;
	r->first_offset = a.first_offset;
	r->block_size = bs;
	r->length = a.length;
	return 0;
}

void kregion_detach(struct kregion *r)
{
	struct beluga_detach d = {
		.size = sizeof(d),
		.flags = BELUGA_DETACH_EVICT,
		.region_id = r->region_id,
	};
	int ret;

	if (!r->attached)
		return;
	ret = xioctl(r->admin_fd, BELUGA_IOC_DETACH, &d);
	if (ret)
		note("DETACH region %u: %s (module bug or a leaked mapping?)",
		     r->region_id, strerror(-ret));
	r->attached = false;
	close(r->admin_fd);
}

/* ---- the client ------------------------------------------------------ */

int kernel_info(struct bk *b, struct beluga_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	return xioctl(b->fd, BELUGA_IOC_INFO, info);
}

int kernel_stats(struct bk *b, struct beluga_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->size = sizeof(*st);
	return xioctl(b->fd, BELUGA_IOC_STATS, st);
}

/*
 * The syscall floor: an ioctl the module refuses at once (an unknown
 * command number: -ENOTTY before it reads anything). It costs what every
 * command costs to get in and out of the module and nothing else.
 * BELUGA_IOC_INFO is measured as well: it takes the pool lock twice.
 */
#define BELUGA_IOC_FLOOR	_IO(BELUGA_TYPE, 0x7f)

static int k_floor(struct bk *b)
{
	return ioctl(b->fd, BELUGA_IOC_FLOOR, NULL) == -1 && errno == ENOTTY ?
	       0 : -EPROTO;
}

int kernel_info_op(struct bk *b)
{
	struct beluga_info info = { .size = sizeof(info) };

	return xioctl(b->fd, BELUGA_IOC_INFO, &info);
}

static int k_lookup(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		    bool pin, u64 *offsets, u32 *hits)
{
	struct beluga_lookup l = {
		.size = sizeof(l),
		.flags = pin ? BELUGA_LOOKUP_PIN : 0,
		.ns = ns,
		.count = n,
		.keys = (u64)(uintptr_t)keys,
		.offsets = (u64)(uintptr_t)offsets,
	};
	int ret = xioctl(b->fd, BELUGA_IOC_LOOKUP, &l);

	if (!ret && hits)
		*hits = l.hits;
	return ret;
}

static int k_alloc(struct bk *b, u32 n, u64 *offsets)
{
	struct beluga_alloc a = {
		.size = sizeof(a),
		.count = n,
		.offsets = (u64)(uintptr_t)offsets,
	};

	return xioctl(b->fd, BELUGA_IOC_ALLOC, &a);
}

static int k_publish(struct bk *b, u64 ns, u32 n, const u64 *offsets,
		     const struct beluga_key *keys, u32 *ok, u32 *exists)
{
	struct beluga_publish_item *it = b->scratch;
	struct beluga_publish p = {
		.size = sizeof(p),
		.ns = ns,
		.count = n,
		.items = (u64)(uintptr_t)it,
	};
	u32 i;
	int ret;

	for (i = 0; i < n; i++) {
		it[i].offset = offsets[i];
		it[i].key = keys[i];
		it[i].result = 0;
		it[i].__reserved = 0;
	}
	ret = xioctl(b->fd, BELUGA_IOC_PUBLISH, &p);
	if (ret)
		return ret;
	if (p.failed)
		return -EPROTO;
	if (ok)
		*ok = p.published;
	if (exists)
		*exists = p.exists;
	return 0;
}

static int k_blocks(struct bk *b, unsigned long cmd, u32 n, const u64 *offsets)
{
	struct beluga_blocks bl = {
		.size = sizeof(bl),
		.count = n,
		.offsets = (u64)(uintptr_t)offsets,
	};

	return xioctl(b->fd, cmd, &bl);
}

static int k_release(struct bk *b, u32 n, const u64 *offsets)
{
	return k_blocks(b, BELUGA_IOC_RELEASE, n, offsets);
}

static int k_free(struct bk *b, u32 n, const u64 *offsets)
{
	return k_blocks(b, BELUGA_IOC_FREE, n, offsets);
}

/* The zero-copy read: pin, copy from the mapping, unpin. */
static int k_get(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		 void *dst, u32 *hits)
{
	u32 h, i;
	int ret = k_lookup(b, ns, n, keys, true, b->offs, &h);

	if (ret)
		return ret;
	for (i = 0; i < h; i++)
		memcpy((u8 *)dst + (u64)i * b->block_size,
		       b->map + b->offs[i], b->block_size);
	*hits = h;
	return h ? k_release(b, h, b->offs) : 0;
}

static void k_close(struct bk *b)
{
	if (b->map)
		munmap(b->map, b->map_size);
	close(b->fd);
	free(b->scratch);
	free(b->offs);
	free(b);
}

struct bk *kernel_open(bool map)
{
	struct bk *b = xcalloc(1, sizeof(*b));
	struct beluga_info info;
	int ret;

	b->name = "kernel";
	b->fd = kopen();
	b->floor = k_floor;
	b->lookup = k_lookup;
	b->alloc = k_alloc;
	b->publish = k_publish;
	b->release = k_release;
	b->free = k_free;
	b->get = k_get;
	b->close = k_close;
	b->scratch = xcalloc(BELUGA_MAX_BATCH,
			     sizeof(struct beluga_publish_item));
	b->offs = xcalloc(BELUGA_MAX_BATCH, sizeof(u64));
	ret = kernel_info(b, &info);
	if (ret)
		die("BELUGA_IOC_INFO: %s", strerror(-ret));
	b->block_size = info.block_size;
	if (map) {
		b->map_size = info.map_size;
		b->map = mmap(NULL, b->map_size, PROT_READ | PROT_WRITE,
			      MAP_SHARED, b->fd, 0);
		if (b->map == MAP_FAILED)
			die("mmap of /dev/beluga (%llu bytes): %s",
			    (unsigned long long)b->map_size, strerror(errno));
	}
	return b;
}
