// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * libbeluga: device leases of a shared pool. The watchdog daemon's link
 * (BELUGA_IOC_WATCHDOG) and the device ranges engines declare before
 * their devices pin the mapping (BELUGA_IOC_DEVICE_RANGE).
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

/* The fix for a shared pool whose host has no watchdog daemon. */
#define FIX_WATCHDOGD	"start beluga-watchdogd (or load the module with mh_allow_gup=1)"

static int watchdog_fail(struct beluga *b, int err, uint32_t flags, uint32_t timeout_ms)
{
	switch (-err) {
	case EINVAL:
		if (flags == BELUGA_WATCHDOG_REGISTER)
			return bel_fail(b, err, "watchdog timeout %" PRIu32 " ms is outside 1..%u ms: "
					"give the hardware watchdog's timeout (WDIOC_GETTIMEOUT) "
					"in milliseconds", timeout_ms, BELUGA_WATCHDOG_MAX_MS);
		break;
	case EBUSY:
		return bel_fail(b, err, "%s has a watchdog daemon registered already (another "
				"beluga-watchdogd runs), or device ranges declared under another "
				"watchdog timeout hold it: stop the other daemon, or keep the timeout "
				"the ranges were given (belugactl status shows W)", b->path);
	case ENOLINK:
		return bel_fail(b, err, "this handle of %s is not the pool's watchdog link: "
				"register on it first (beluga_watchdog_register()); the link ends "
				"when the handle that registered is closed", b->path);
	case ENOTTY:
		return bel_fail(b, err, "%s: the loaded module predates the watchdog link "
				"(BELUGA_IOC_WATCHDOG): load a module of this release (libbeluga %s)",
				b->path, LIBBELUGA_VERSION);
	}
	return bel_fail_common(b, err, "WATCHDOG");
}

static int watchdog_call(struct beluga *b, uint32_t flags, uint32_t timeout_ms,
			 uint32_t *answer, uint32_t *device_ranges)
{
	struct beluga_watchdog req;
	int ret;

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.flags = flags;
	req.timeout_ms = timeout_ms;
	ret = bel_ioctl_call(b, BELUGA_IOC_WATCHDOG, &req);
	if (ret)
		return watchdog_fail(b, ret, flags, timeout_ms);
	if (answer)
		*answer = req.answer;
	if (device_ranges)
		*device_ranges = req.device_ranges;
	return 0;
}

BEL_EXPORT int beluga_watchdog_register(struct beluga *b, uint32_t timeout_ms)
{
	return watchdog_call(b, BELUGA_WATCHDOG_REGISTER, timeout_ms, NULL, NULL);
}

BEL_EXPORT int beluga_watchdog_query(struct beluga *b, uint32_t *answer,
				     uint32_t *device_ranges)
{
	return watchdog_call(b, BELUGA_WATCHDOG_QUERY, 0, answer, device_ranges);
}

static int range_fail(struct beluga *b, int err, uint64_t offset, uint64_t length, int eventfd)
{
	switch (-err) {
	case EINVAL:
		return bel_fail(b, err, "device range %#" PRIx64 "+%#" PRIx64 " (eventfd %d) "
				"refused: give a page aligned offset and a page aligned, nonzero "
				"length, and an eventfd or -1", offset, length, eventfd);
	case EBADF:
		return bel_fail(b, err, "fd %d is not an eventfd: pass one made by eventfd(2), "
				"or -1 for none", eventfd);
	case ENXIO:
		return bel_fail(b, err, "device range %#" PRIx64 "+%#" PRIx64 " reaches past the "
				"pool's mapping: declare a range within map_size (beluga_info())",
				offset, length);
	case EBUSY:
		return bel_fail(b, err, "this handle of %s declared a device range already (one "
				"per open file, until it is closed): open another handle for "
				"another range", b->path);
	case ESTALE:
		return bel_fail(b, err, "the host fenced itself from the shared pool on %s (or "
				"is rejoining), or this handle was opened before the fence: close "
				"the handle, open the device again, and retry", b->path);
	case ENOLINK:
		return bel_fail(b, err, "no watchdog daemon registered with the shared pool on "
				"%s, so its devices may not pin it: " FIX_WATCHDOGD, b->path);
	case EPROTO:
		return bel_fail(b, err, "a live host of the shared pool on %s runs a module that "
				"ignores device leases (on-media format older than 1.3; dmesg names "
				"it) and would reuse this host's blocks after one lease: upgrade "
				"that host's module first", b->path);
	case ENOTTY:
		return bel_fail(b, err, "%s: the loaded module predates device ranges "
				"(BELUGA_IOC_DEVICE_RANGE): load a module of this release "
				"(libbeluga %s)", b->path, LIBBELUGA_VERSION);
	}
	return bel_fail_common(b, err, "DEVICE_RANGE");
}

BEL_EXPORT int beluga_device_range(struct beluga *b, uint64_t offset, uint64_t length,
				   int eventfd, uint32_t *fence_ms)
{
	struct beluga_device_range req;
	int ret;

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	req.eventfd = eventfd;
	req.offset = offset;
	req.length = length;
	ret = bel_ioctl_call(b, BELUGA_IOC_DEVICE_RANGE, &req);
	if (ret)
		return range_fail(b, ret, offset, length, eventfd);
	b->range_declared = 1;
	b->range_offset = offset;
	b->range_length = length;
	b->range_fence_ms = req.fence_ms;
	b->range_eventfd = eventfd;
	if (fence_ms)
		*fence_ms = req.fence_ms;
	return 0;
}

BEL_EXPORT int beluga_device_eventfd(const struct beluga *b)
{
	if (!b->range_declared || b->range_eventfd < 0)
		return bel_fail(NULL, -ENOENT, "%s has no device range with an eventfd: the pool "
				"is not shared, or nothing was registered (beluga_cuda_register(), "
				"beluga_device_range())", b->path);
	return b->range_eventfd;
}

BEL_EXPORT uint32_t beluga_device_fence_ms(const struct beluga *b)
{
	return b->range_declared ? b->range_fence_ms : 0;
}

/* 1 when the pool behind @b is shared (it has host records), 0 if not, or -errno. */
static int pool_shared(struct beluga *b)
{
	struct beluga_hosts req;
	int ret;

	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	ret = bel_ioctl_call(b, BELUGA_IOC_HOSTS, &req);
	/* A module without HOSTS, or without its second version, has no device leases. */
	if (ret == -ENOTTY || ret == -E2BIG)
		return 0;
	/* Room for none: -EMSGSIZE, with the number of records. */
	if (ret && ret != -EMSGSIZE)
		return bel_fail_common(b, ret, "HOSTS");
	return req.count > 0;
}

int bel_device_prepare(struct beluga *b)
{
	int ret;

	if (!b->map_base || b->map_pinnable)
		return 0;
	ret = pool_shared(b);
	if (ret <= 0)
		return ret;
	if (b->range_declared) {
		if (b->range_offset || b->range_length < b->map_length)
			return bel_fail(b, -ENXIO, "the device range this handle of %s declared "
					"(%#" PRIx64 "+%#" PRIx64 ") does not cover its mapping "
					"(%zu bytes; the pool grew since): open a new handle and "
					"register that one", b->path, b->range_offset,
					b->range_length, b->map_length);
	} else {
		if (b->own_eventfd < 0) {
			b->own_eventfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
			if (b->own_eventfd < 0)
				return bel_fail(b, -errno, "cannot make the eventfd of the device "
						"range: %s: raise the open files limit (ulimit -n)",
						strerror(errno));
		}
		ret = beluga_device_range(b, 0, b->map_length, b->own_eventfd, NULL);
		/*
		 * A module that predates device ranges pins a shared pool only
		 * with mh_allow_gup=1: try, as before; cudaHostRegister says.
		 */
		if (ret == -ENOTTY)
			return 0;
		if (ret)
			return ret;
	}
	return bel_map_again(b);
}
