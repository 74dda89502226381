// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: handles, error reporting, and the single-struct commands
 * (INFO, STATS, REGION_INFO, ATTACH, DETACH, EVICT).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "internal.h"

static int bel_real_ioctl(int fd, unsigned long request, void *arg)
{
	return ioctl(fd, request, arg);
}

int (*bel_ioctl)(int fd, unsigned long request, void *arg) = bel_real_ioctl;

/*
 * The last-error message, one per thread (like dlerror()): a handle shared
 * by threads would otherwise have its message overwritten by another
 * thread's failure between a call and the caller reading it.
 */
static _Thread_local char bel_thread_errmsg[BEL_ERRMSG_LEN];

int bel_fail(struct beluga *b, int err, const char *fmt, ...)
{
	char msg[BEL_ERRMSG_LEN];
	va_list ap;

	(void)b;
	/* Format aside first: an argument may be the current message. */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(bel_thread_errmsg, msg, sizeof(msg));
	return err;
}

BEL_EXPORT const char *beluga_last_error(const struct beluga *b)
{
	(void)b;
	return bel_thread_errmsg;
}

BEL_EXPORT const char *beluga_strerror(int err)
{
	if (err < 0)
		err = -err;
	/* The meaning each errno has in Beluga, where it is more specific. */
	switch (err) {
	case 0:
		return "success";
	case ENOENT:
		return "not found (module not loaded, or no such region, key or dax device)";
	case ENODEV:
		return "no memory region is attached to the pool (or the NUMA node is offline)";
	case ENOSPC:
		return "pool full: no free or evictable block, or no free region slot";
	case EBUSY:
		return "busy: mapped, pinned, in use, or not bound to device_dax";
	case EPERM:
		return "operation not permitted: needs CAP_SYS_ADMIN, or block not owned";
	case EBADF:
		return "handle is read-only: open with O_RDWR to allocate or publish";
	case ENOTTY:
		return "not a Beluga device, or a command this module does not know";
	case EPROTO:
		return "the module's ABI version differs from the library's";
	case EEXIST:
		return "already attached, or the range overlaps an attached region";
	case E2BIG:
		return "batch too large, or a struct with unknown nonzero fields";
	case ENOSYS:
		return "CUDA runtime not available";
	case EOPNOTSUPP:
		return "not supported (multi-range dax device, or architecture)";
	case ENOLINK:
		return "no watchdog daemon (beluga-watchdogd) is registered with the shared pool";
	case ESTALE:
		return "the host fenced itself from the shared pool: open the device again";
	default:
		return strerror(err);
	}
}

int bel_ioctl_call(struct beluga *b, unsigned long request, void *arg)
{
	int ret;

	do {
		ret = bel_ioctl(b->fd, request, arg);
	} while (ret < 0 && errno == EINTR);
	return ret < 0 ? -errno : 0;
}

/* The fix for a region id that names no region. */
#define FIX_REGION_ID	"give the id of an attached region"

int bel_fail_common(struct beluga *b, int err, const char *what)
{
	switch (-err) {
	case ENODEV:
		return bel_fail(b, err, "%s: no region attached: " BEL_FIX_ATTACH, what);
	case EPERM:
		return bel_fail(b, err, "%s: needs CAP_SYS_ADMIN: run as root", what);
	case EBADF:
		return bel_fail(b, err,
				"%s: %s was opened read-only: open it with O_RDWR",
				what, b->path);
	case ENOTTY:
		return bel_fail(b, err,
				"%s: the loaded module does not know this command: "
				"load a module matching libbeluga (ABI %d)",
				what, BELUGA_ABI_VERSION);
	case E2BIG:
		return bel_fail(b, err,
				"%s: the module rejected a batch or struct as too large: "
				"the module is older than libbeluga; update the module",
				what);
	case EFAULT:
		return bel_fail(b, err, "%s: bad buffer address passed to the library: "
				"pass arrays that hold every item counted", what);
	case EINVAL:
		return bel_fail(b, err,
				"%s: the module rejected the arguments (EINVAL): "
				"check offsets, flags and counts", what);
	default:
		return bel_fail(b, err, "%s: %s: " BEL_FIX_DMESG, what, beluga_strerror(err));
	}
}

/* Why open(2) of @path failed, and what to do about it. */
static int open_fail(const char *path, int accmode, int err)
{
	switch (-err) {
	case ENOENT:
		if (!strcmp(path, BELUGA_DEVICE_PATH))
			return bel_fail(NULL, err, "%s not found: " BEL_FIX_LOAD_MODULE, path);
		return bel_fail(NULL, err, "%s not found: " BEL_FIX_LOAD_MODULE ", or check "
				"the path (the module's pools=N makes %s, %s1 ... %s<N-1>)",
				path, BELUGA_DEVICE_PATH, BELUGA_DEVICE_PATH, BELUGA_DEVICE_PATH);
	case ENXIO:
	case ENODEV:
		return bel_fail(NULL, err, "%s has no driver behind it: " BEL_FIX_LOAD_MODULE,
				path);
	case EACCES:
	case EPERM:
	case EROFS:
		return bel_fail(NULL, err, "no permission to open %s %s: join the group "
				"the node belongs to (`usermod -aG beluga $USER`, then log in "
				"again; `make install` installs the udev rule that gives the "
				"beluga group read-write), or run as root", path,
				accmode == O_RDWR ? "read-write" : "read-only");
	default:
		return bel_fail(NULL, err, "cannot open %s: %s: check the path", path,
				strerror(-err));
	}
}

BEL_EXPORT int beluga_open(const char *path, int flags, struct beluga **out)
{
	struct beluga_info info;
	struct beluga *b;
	int accmode = flags & O_ACCMODE;
	int fd, ret;

	if (!out)
		return bel_fail(NULL, -EINVAL, "beluga_open: no place for the handle (out is NULL)");
	*out = NULL;
	if ((flags & ~(O_ACCMODE | O_CLOEXEC)) ||
	    (accmode != O_RDWR && accmode != O_RDONLY))
		return bel_fail(NULL, -EINVAL,
				"beluga_open: flags must be O_RDWR or O_RDONLY (got %#x)",
				(unsigned int)flags);
	if (!path || !*path)
		path = getenv("BELUGA_DEVICE");
	if (!path || !*path)
		path = BELUGA_DEVICE_PATH;

	fd = open(path, accmode | O_CLOEXEC);
	if (fd < 0)
		return open_fail(path, accmode, -errno);

	b = calloc(1, sizeof(*b));
	if (!b) {
		close(fd);
		return bel_fail(NULL, -ENOMEM, "beluga_open: out of memory for the handle: "
				"free memory and retry");
	}
	b->fd = fd;
	b->flags = accmode;
	b->range_eventfd = -1;
	b->own_eventfd = -1;
	snprintf(b->path, sizeof(b->path), "%s", path);

	/* Make sure this is Beluga, and a Beluga we can talk to. */
	memset(&info, 0, sizeof(info));
	info.size = sizeof(info);
	ret = bel_ioctl_call(b, BELUGA_IOC_INFO, &info);
	if (ret == -ENOTTY || ret == -EINVAL) {
		bel_fail(NULL, -ENOTTY, "%s is not a Beluga device (INFO ioctl failed): give "
			 "the path of %s (or %sN), or " BEL_FIX_LOAD_MODULE, path,
			 BELUGA_DEVICE_PATH, BELUGA_DEVICE_PATH);
		ret = -ENOTTY;
		goto err;
	}
	if (ret) {
		bel_fail(NULL, ret, "%s: INFO failed: %s: " BEL_FIX_DMESG, path,
			 beluga_strerror(ret));
		goto err;
	}
	if (info.abi_version != BELUGA_ABI_VERSION) {
		ret = bel_fail(NULL, -EPROTO,
			       "%s speaks Beluga ABI %u but libbeluga speaks ABI %u: "
			       "install a module and library from the same release",
			       path, info.abi_version, BELUGA_ABI_VERSION);
		goto err;
	}
	b->max_batch = info.max_batch;
	if (!b->max_batch || b->max_batch > BELUGA_MAX_BATCH)
		b->max_batch = BELUGA_MAX_BATCH;
	*out = b;
	return 0;
err:
	close(fd);
	free(b);
	return ret;
}

BEL_EXPORT void beluga_close(struct beluga *b)
{
	if (!b)
		return;
	beluga_unmap(b);
	beluga_index_unmap(b);
	close(b->fd);
	if (b->own_eventfd >= 0)
		close(b->own_eventfd);
	free(b);
}

BEL_EXPORT int beluga_fd(const struct beluga *b)
{
	return b->fd;
}

BEL_EXPORT int beluga_info(struct beluga *b, struct beluga_info *info)
{
	int ret;

	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	ret = bel_ioctl_call(b, BELUGA_IOC_INFO, info);
	return ret ? bel_fail_common(b, ret, "INFO") : 0;
}

BEL_EXPORT int beluga_stats(struct beluga *b, struct beluga_stats *stats)
{
	int ret;

	memset(stats, 0, sizeof(*stats));
	stats->size = sizeof(*stats);
	ret = bel_ioctl_call(b, BELUGA_IOC_STATS, stats);
	return ret ? bel_fail_common(b, ret, "STATS") : 0;
}

BEL_EXPORT int beluga_region_info(struct beluga *b, uint32_t region_id,
				  struct beluga_region_info *ri)
{
	int ret;

	memset(ri, 0, sizeof(*ri));
	ri->size = sizeof(*ri);
	ri->region_id = region_id;
	ret = bel_ioctl_call(b, BELUGA_IOC_REGION_INFO, ri);
	if (ret == -ENOENT)
		return bel_fail(b, ret, "no region in slot %u: " FIX_REGION_ID, region_id);
	return ret ? bel_fail_common(b, ret, "REGION_INFO") : 0;
}

/*
 * HOSTS with records of @rec_size bytes (BELUGA_HOST_SIZE_V1 or _V2) at
 * @hosts. A module that predates the second version refuses the longer
 * struct (-E2BIG): then V1 records are asked for, and spread out to
 * @rec_size with the new fields 0.
 */
int bel_hosts(struct beluga *b, void *hosts, unsigned int max, size_t rec_size)
{
	struct beluga_hosts req;
	unsigned char *v1 = NULL;
	unsigned int i, n;
	int ret;

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.count = max;
	req.hosts = (uintptr_t)hosts;
	req.host_size = (uint32_t)rec_size;
	ret = bel_ioctl_call(b, BELUGA_IOC_HOSTS, &req);
	if (ret == -E2BIG && rec_size != BELUGA_HOST_SIZE_V1) {
		if (max) {
			v1 = calloc(max, BELUGA_HOST_SIZE_V1);
			if (!v1)
				return bel_fail(b, -ENOMEM, "HOSTS: out of memory for %u records: "
						"free memory and retry", max);
		}
		memset(&req, 0, sizeof(req));
		req.size = BELUGA_HOSTS_SIZE_V1;
		req.count = max;
		req.hosts = (uintptr_t)v1;
		ret = bel_ioctl_call(b, BELUGA_IOC_HOSTS, &req);
		n = req.count < max ? req.count : max;
		for (i = 0; (!ret || ret == -EMSGSIZE) && i < n; i++) {
			unsigned char *rec = (unsigned char *)hosts + (size_t)i * rec_size;

			memset(rec, 0, rec_size);
			memcpy(rec, v1 + (size_t)i * BELUGA_HOST_SIZE_V1, BELUGA_HOST_SIZE_V1);
		}
		free(v1);
	}
	/* -EMSGSIZE: @max records were written, req.count says how many exist. */
	if (!ret || ret == -EMSGSIZE)
		return (int)req.count;
	return bel_fail_common(b, ret, "HOSTS");
}

BEL_EXPORT int beluga_hosts(struct beluga *b, struct beluga_host *hosts, unsigned int max)
{
	return bel_hosts(b, hosts, max, sizeof(*hosts));
}

/* Explain an ATTACH failure; @what names the region for the operator. */
static int attach_fail(struct beluga *b, int err, const struct beluga_attach *req,
		       const char *what)
{
	switch (-err) {
	case EEXIST:
		return bel_fail(b, err,
				"%s is already attached, or overlaps an attached region: "
				"detach that region first, or attach another range", what);
	case EBUSY:
		return bel_fail(b, err,
				"the module refused %s: the range is not device-dax memory "
				"bound to device_dax, or is System RAM: " BEL_FIX_DEVDAX,
				what, what);
	case ENOSPC:
		return bel_fail(b, err,
				"cannot attach %s: all %d region slots are in use: detach one",
				what, BELUGA_MAX_REGIONS);
	case ENOMEM:
		return bel_fail(b, err,
				"node %d has not %" PRIu64 " bytes free for %s: attach less, "
				"or free memory on that node (see /sys/devices/system/node/node%d/meminfo)",
				req->node, (uint64_t)req->length, what, req->node);
	case ENODEV:
		if (req->backend == BELUGA_BACKEND_NODE)
			return bel_fail(b, err,
					"NUMA node %d is not online: give a node that "
					"/sys/devices/system/node/online lists", req->node);
		break;
	case EINVAL:
		return bel_fail(b, err,
				"the module rejected %s: block size %" PRIu64
				" must be a multiple of 4 KiB in [4K, 1G] and equal the pool's, "
				"and the region must hold at least one block and be 2 MiB aligned",
				what, (uint64_t)req->block_size);
	}
	return bel_fail_common(b, err, "ATTACH");
}

/*
 * Hand the caller the request with the kernel's answer. A block size of 0
 * asked for "the pool's"; report the one the region got, so callers can
 * print sizes without another INFO.
 */
static void attach_done(struct beluga *b, const struct beluga_attach *req,
			struct beluga_attach *out)
{
	struct beluga_info info;

	if (!out)
		return;
	*out = *req;
	if (!out->block_size && !beluga_info(b, &info))
		out->block_size = info.block_size;
}

/* ATTACH failures that only a shared (multi-host) attach can have. */
static int attach_shared_fail(struct beluga *b, int err, const char *what)
{
	switch (-err) {
	case EUCLEAN:
		return bel_fail(b, err, "the shared pool on %s is corrupt (superblock "
				"checksum): attach with --format to start over", what);
	case EPROTONOSUPPORT:
		return bel_fail(b, err, "the shared pool on %s has an on-media version this "
				"module does not know: upgrade the module, or --format", what);
	case ERANGE:
		return bel_fail(b, err, "the host id is too large for the shared pool on %s "
				"(its max_hosts): see dmesg", what);
	case EADDRINUSE:
		return bel_fail(b, err, "another live host uses this host id on %s: give "
				"every host its own id (--host-id or beluga.host_id=)", what);
	case EBUSY:
		return bel_fail(b, err, "cannot attach %s shared: the pool has a region "
				"already, the range is not device-dax memory, or --format while "
				"other hosts are alive: see dmesg", what);
	case EINVAL:
		return bel_fail(b, err, "the module refused %s shared: no host id "
				"(--host-id or beluga.host_id=), or the pool's geometry or block "
				"size differs: see dmesg", what);
	}
	return 0;
}

static int attach_dax_req(struct beluga *b, const char *dax, uint64_t block_size,
			  uint32_t flags, uint32_t host_id, struct beluga_attach *out)
{
	struct beluga_dax_device dev;
	struct beluga_attach req;
	const char *name;
	int ret;

	name = bel_dax_basename(dax);
	if (!name)
		return bel_fail(b, -EINVAL,
				"'%s' is not a dax device: expected daxX.Y or /dev/daxX.Y",
				dax ? dax : "(null)");
	ret = beluga_dax_probe(name, &dev);
	if (ret)
		return ret;	/* beluga_dax_probe() recorded the message */

	switch (dev.mode) {
	case BELUGA_DAX_DEVDAX:
		break;
	case BELUGA_DAX_SYSTEM_RAM:
		return bel_fail(b, -EBUSY, "%s is online as System RAM (kmem): " BEL_FIX_DEVDAX,
				dev.name, dev.name);
	case BELUGA_DAX_UNBOUND:
		return bel_fail(b, -EBUSY, "%s is not bound to device_dax: " BEL_FIX_DEVDAX
				" (or `echo %s > /sys/bus/dax/drivers/device_dax/new_id`)",
				dev.name, dev.name, dev.name);
	default:
		return bel_fail(b, -EBUSY, "%s is bound to driver '%s', not device_dax: "
				BEL_FIX_DEVDAX, dev.name, dev.driver, dev.name);
	}
	if (dev.nr_ranges > 1)
		return bel_fail(b, -EOPNOTSUPP,
				"%s is made of %u physical ranges (mapping0..mapping%u) but Beluga "
				"attaches one contiguous range: recreate it as one range "
				"(`daxctl destroy-device %s`, then `daxctl create-device -s SIZE`)",
				dev.name, dev.nr_ranges, dev.nr_ranges - 1, dev.name);
	if (!dev.size)
		return bel_fail(b, -EINVAL, "%s has size 0: give it capacity with "
				"`daxctl create-device` or `daxctl reconfigure-device -s SIZE %s`",
				dev.name, dev.name);
	if ((dev.start | dev.size) & (BELUGA_DAX_ALIGN - 1))
		return bel_fail(b, -EINVAL,
				"%s range %#" PRIx64 "+%#" PRIx64 " is not 2 MiB aligned: "
				"recreate the device with `daxctl create-device -a 2M`",
				dev.name, dev.start, dev.size);

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.backend = BELUGA_BACKEND_DAX;
	req.node = -1;
	req.phys_start = dev.start;
	req.length = dev.size;
	req.block_size = block_size;
	req.flags = flags;
	req.host_id = host_id;
	snprintf(req.name, sizeof(req.name), "%s", dev.name);
	ret = bel_ioctl_call(b, BELUGA_IOC_ATTACH, &req);
	if (ret && (flags & BELUGA_ATTACH_SHARED) && attach_shared_fail(b, ret, dev.name))
		return ret;
	if (ret)
		return attach_fail(b, ret, &req, dev.name);
	attach_done(b, &req, out);
	return 0;
}

BEL_EXPORT int beluga_attach_dax(struct beluga *b, const char *dax,
				 uint64_t block_size, struct beluga_attach *out)
{
	return attach_dax_req(b, dax, block_size, 0, 0, out);
}

BEL_EXPORT int beluga_attach_dax_shared(struct beluga *b, const char *dax,
					uint64_t block_size, int host_id, unsigned int flags,
					struct beluga_attach *out)
{
	uint32_t req_flags = BELUGA_ATTACH_SHARED;

	if (flags & ~LIBBELUGA_SHARED_FORMAT)
		return bel_fail(b, -EINVAL, "attach %s: unknown flags 0x%x: pass 0 or "
				"LIBBELUGA_SHARED_FORMAT",
				dax ? dax : "(null)", flags & ~LIBBELUGA_SHARED_FORMAT);
	if (flags & LIBBELUGA_SHARED_FORMAT)
		req_flags |= BELUGA_ATTACH_FORMAT;
	if (host_id >= 0)
		req_flags |= BELUGA_ATTACH_HOST_ID;
	return attach_dax_req(b, dax, block_size, req_flags,
			      host_id >= 0 ? (uint32_t)host_id : 0, out);
}

BEL_EXPORT int beluga_attach_node(struct beluga *b, int node, uint64_t bytes,
				  uint64_t block_size, struct beluga_attach *out)
{
	struct beluga_attach req;
	char what[32];
	int ret;

	if (node < 0)
		return bel_fail(b, -EINVAL, "NUMA node %d is invalid: give a node number >= 0", node);
	if (!bytes)
		return bel_fail(b, -EINVAL, "attach node%d: give the bytes to reserve (e.g. --size 1G)",
				node);
	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.backend = BELUGA_BACKEND_NODE;
	req.node = node;
	req.length = bytes;
	req.block_size = block_size;
	snprintf(what, sizeof(what), "node%d", node);
	ret = bel_ioctl_call(b, BELUGA_IOC_ATTACH, &req);
	if (ret)
		return attach_fail(b, ret, &req, what);
	attach_done(b, &req, out);
	return 0;
}

BEL_EXPORT int beluga_detach(struct beluga *b, uint32_t region_id, unsigned int flags,
			     uint64_t *evicted)
{
	int evict = !!(flags & BELUGA_DETACH_EVICT);
	struct beluga_detach req;
	int ret;

	if (flags & ~(unsigned int)BELUGA_DETACH_EVICT)
		return bel_fail(b, -EINVAL, "detach region %u: unknown flags 0x%x: pass 0 or "
				"BELUGA_DETACH_EVICT", region_id,
				flags & ~(unsigned int)BELUGA_DETACH_EVICT);
	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.flags = flags;
	req.region_id = region_id;
	ret = bel_ioctl_call(b, BELUGA_IOC_DETACH, &req);
	switch (-ret) {
	case 0:
		if (evicted)
			*evicted = req.evicted;
		return 0;
	case ENOENT:
		return bel_fail(b, ret, "no region in slot %u: " FIX_REGION_ID, region_id);
	case EBUSY:
		return bel_fail(b, ret,
				"region %u is busy: a process maps it, or it has allocated or "
				"pinned blocks%s: stop the processes that use the pool%s", region_id,
				evict ? "" : ", or published blocks",
				evict ? "" : ", or evict its published blocks first");
	default:
		return bel_fail_common(b, ret, "DETACH");
	}
}

BEL_EXPORT int beluga_evict_key(struct beluga *b, uint64_t ns,
				const struct beluga_key *key)
{
	struct beluga_evict req;
	int ret;

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.ns = ns;
	req.key = *key;
	ret = bel_ioctl_call(b, BELUGA_IOC_EVICT, &req);
	switch (-ret) {
	case 0:
		return 0;
	case ENOENT:
		return bel_fail(b, ret, "key %016" PRIx64 "%016" PRIx64
				" is not present in namespace %" PRIu64 ": check the key and "
				"the namespace (an evicted key is gone already)",
				(uint64_t)key->hi, (uint64_t)key->lo, ns);
	case EBUSY:
		return bel_fail(b, ret, "key %016" PRIx64 "%016" PRIx64
				" is pinned by a reader: retry when it is released",
				(uint64_t)key->hi, (uint64_t)key->lo);
	default:
		return bel_fail_common(b, ret, "EVICT");
	}
}

BEL_EXPORT int beluga_evict_ns(struct beluga *b, uint64_t ns, uint64_t *evicted,
			       uint64_t *busy)
{
	struct beluga_evict req;
	int ret;

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.flags = BELUGA_EVICT_NAMESPACE;
	req.ns = ns;
	ret = bel_ioctl_call(b, BELUGA_IOC_EVICT, &req);
	if (ret)
		return bel_fail_common(b, ret, "EVICT");
	if (evicted)
		*evicted = req.evicted;
	if (busy)
		*busy = req.busy;
	return 0;
}
