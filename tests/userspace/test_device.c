// SPDX-License-Identifier: GPL-2.0
/*
 * Device leases against the fake kernel: BELUGA_IOC_WATCHDOG and
 * BELUGA_IOC_DEVICE_RANGE in the uapi's error order, on a pool that is not
 * shared and on one the fake makes shared (host records); HOSTS in both
 * record sizes; and libbeluga's calls over them (beluga_watchdog_*,
 * beluga_device_range(), beluga_hosts()), their messages included.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "libbeluga.h"
#include "fake_kernel.h"
#include "internal.h"
#include "../lib/tap.h"

#define BS	65536ULL
#define NR_BLOCKS	8

static char dev_path[FAKE_DEVICE_PATH_LEN];

static int raw(int fd, unsigned long request, void *arg)
{
	return bel_ioctl(fd, request, arg) ? -errno : 0;
}

static void reset(int with_region)
{
	fake_kernel_reset(BS, BELUGA_MAX_BATCH);
	if (with_region)
		fake_kernel_add_region("dax0.0", BELUGA_BACKEND_DAX, -1, 0x390000000ULL,
				       NR_BLOCKS * BS);
}

static struct beluga *open_pool(int flags)
{
	struct beluga *b = NULL;

	if (beluga_open(dev_path, flags, &b)) {
		printf("# beluga_open: %s\n", beluga_last_error(NULL));
		exit(1);
	}
	return b;
}

/* A shared pool as the fake shows one: this host (id 1) and a peer (id 0). */
static void make_shared(uint32_t peer_flags)
{
	fake.nr_hosts = 2;
	memset(fake.hosts, 0, sizeof(fake.hosts));
	fake.hosts[0].host_id = 0;
	fake.hosts[0].state = BELUGA_HOST_ACTIVE;
	fake.hosts[0].flags = peer_flags;
	fake.hosts[1].host_id = 1;
	fake.hosts[1].state = BELUGA_HOST_ACTIVE;
	fake.hosts[1].flags = BELUGA_HOST_ALIVE | BELUGA_HOST_SELF | BELUGA_HOST_LEASE_AWARE;
	snprintf(fake.hosts[1].name, sizeof(fake.hosts[1].name), "self");
}

static struct beluga_watchdog wd_req(uint32_t flags, uint32_t timeout_ms)
{
	return (struct beluga_watchdog){ .size = sizeof(struct beluga_watchdog),
					 .flags = flags, .timeout_ms = timeout_ms };
}

static struct beluga_device_range range_req(uint64_t offset, uint64_t length, int efd)
{
	return (struct beluga_device_range){ .size = sizeof(struct beluga_device_range),
					     .eventfd = efd, .offset = offset,
					     .length = length };
}

static void test_watchdog_abi(void)
{
	struct beluga_watchdog w;
	int fd = open(dev_path, O_RDWR), fd2 = open(dev_path, O_RDONLY), ret;

	reset(1);
	w = wd_req(0, 0);
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL, "watchdog: no flag is -EINVAL");
	w = wd_req(BELUGA_WATCHDOG_REGISTER | BELUGA_WATCHDOG_QUERY, 1000);
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL, "watchdog: both flags are -EINVAL");
	w = wd_req(4, 1000);
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL, "watchdog: an unknown flag is -EINVAL");
	w = wd_req(BELUGA_WATCHDOG_REGISTER, 0);
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL, "watchdog: REGISTER with W 0 is -EINVAL");
	w = wd_req(BELUGA_WATCHDOG_REGISTER, BELUGA_WATCHDOG_MAX_MS + 1);
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL,
		   "watchdog: REGISTER with W above the maximum is -EINVAL");
	w = wd_req(BELUGA_WATCHDOG_QUERY, 5);
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL,
		   "watchdog: QUERY with a timeout is -EINVAL");
	w = wd_req(BELUGA_WATCHDOG_REGISTER, 1000);
	w.__reserved = 1;
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL,
		   "watchdog: a nonzero reserved field is -EINVAL");
	w = wd_req(BELUGA_WATCHDOG_REGISTER, 1000);
	w.size = BELUGA_WATCHDOG_SIZE_V1 - 4;
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -EINVAL, "watchdog: a size below V1 is -EINVAL");
	w = wd_req(BELUGA_WATCHDOG_QUERY, 0);
	tap_result(raw(fd, BELUGA_IOC_WATCHDOG, &w) == -ENOLINK,
		   "watchdog: QUERY before any REGISTER is -ENOLINK");
	w = wd_req(BELUGA_WATCHDOG_REGISTER, BELUGA_WATCHDOG_MAX_MS);
	tap_result(!raw(fd, BELUGA_IOC_WATCHDOG, &w) && w.answer == BELUGA_WATCHDOG_FEED &&
		   w.timeout_ms == BELUGA_WATCHDOG_MAX_MS && !w.device_ranges,
		   "watchdog: REGISTER with the maximum W answers FEED, no ranges");
	w = wd_req(BELUGA_WATCHDOG_REGISTER, 2000);
	tap_result(!raw(fd, BELUGA_IOC_WATCHDOG, &w) && w.timeout_ms == 2000,
		   "watchdog: the link may REGISTER again with another W (no ranges hold it)");
	w = wd_req(BELUGA_WATCHDOG_QUERY, 0);
	ret = raw(fd, BELUGA_IOC_WATCHDOG, &w);
	tap_result(!ret && w.answer == BELUGA_WATCHDOG_FEED && w.timeout_ms == 2000,
		   "watchdog: QUERY on the link answers FEED and the registered W (%u)", w.timeout_ms);
	w = wd_req(BELUGA_WATCHDOG_REGISTER, 2000);
	tap_result(raw(fd2, BELUGA_IOC_WATCHDOG, &w) == -EBUSY,
		   "watchdog: REGISTER from a second file while the link lives is -EBUSY");
	w = wd_req(BELUGA_WATCHDOG_QUERY, 0);
	tap_result(raw(fd2, BELUGA_IOC_WATCHDOG, &w) == -ENOLINK,
		   "watchdog: QUERY from a file that is not the link is -ENOLINK");
	close(fd);
	w = wd_req(BELUGA_WATCHDOG_REGISTER, 3000);
	tap_result(!raw(fd2, BELUGA_IOC_WATCHDOG, &w),
		   "watchdog: once the link's file is closed, a read-only file may REGISTER");
	close(fd2);
}

static void test_range_abi(void)
{
	int fd = open(dev_path, O_RDWR), fd2 = open(dev_path, O_RDONLY);
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	long page = sysconf(_SC_PAGESIZE);
	struct beluga_device_range r;

	reset(0);
	r = range_req(0, (uint64_t)page, -1);
	r.flags = 1;
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -EINVAL, "range: flags are -EINVAL");
	r = range_req(512, (uint64_t)page, -1);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -EINVAL,
		   "range: an unaligned offset is -EINVAL");
	r = range_req(0, 100, -1);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -EINVAL,
		   "range: an unaligned length is -EINVAL");
	r = range_req(0, 0, -1);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -EINVAL, "range: length 0 is -EINVAL");
	r = range_req(0, (uint64_t)page, -2);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -EINVAL,
		   "range: an eventfd below -1 is -EINVAL");
	r = range_req(0, (uint64_t)page, fd2);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -EBADF,
		   "range: an fd that is not an eventfd is -EBADF, before -ENODEV");
	r = range_req(0, (uint64_t)page, efd);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -ENODEV,
		   "range: no region attached is -ENODEV");
	reset(1);
	r = range_req(0, NR_BLOCKS * BS + (uint64_t)page, efd);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -ENXIO,
		   "range: a range past map_size is -ENXIO");
	r = range_req(0, NR_BLOCKS * BS, efd);
	r.fence_ms = 77;
	tap_result(!raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) && r.fence_ms == 0 &&
		   fake_kernel_device_ranges() == 1,
		   "range: a pool that is not shared accepts it without a watchdog, W 0");
	r = range_req(0, (uint64_t)page, -1);
	tap_result(raw(fd, BELUGA_IOC_DEVICE_RANGE, &r) == -EBUSY,
		   "range: a second range on the same file is -EBUSY");
	tap_result(!raw(fd2, BELUGA_IOC_DEVICE_RANGE, &r) && fake_kernel_device_ranges() == 2,
		   "range: another file (read-only) declares its own");
	close(fd2);
	tap_result(fake_kernel_device_ranges() == 1, "range: closing a file ends its range");
	close(fd);
	close(efd);
	tap_result(fake_kernel_device_ranges() == 0, "range: the last one too");
}

static void test_shared(void)
{
	struct beluga *b, *wd, *b2;
	struct beluga_host hosts[BELUGA_MAX_HOSTS];
	uint32_t fence_ms = 1, answer = 0, nr = 9;
	long page = sysconf(_SC_PAGESIZE);
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), ret;
	uint64_t count = 0;
	struct pollfd pfd;

	reset(1);
	make_shared(BELUGA_HOST_ALIVE | BELUGA_HOST_LEASE_AWARE);
	b = open_pool(O_RDWR);
	ret = beluga_device_range(b, 0, NR_BLOCKS * BS, efd, &fence_ms);
	tap_result(ret == -ENOLINK && strstr(beluga_last_error(b), "start beluga-watchdogd") &&
		   strstr(beluga_last_error(b), "mh_allow_gup=1"),
		   "shared: no watchdog daemon is -ENOLINK, naming the fix (%s)",
		   beluga_last_error(b));
	tap_result(beluga_device_eventfd(b) == -ENOENT && beluga_device_fence_ms(b) == 0,
		   "shared: a refused range leaves the handle without one");
	fake.allow_gup_fence_ms = 45000;
	ret = beluga_device_range(b, 0, (uint64_t)page, -1, &fence_ms);
	tap_result(!ret && fence_ms == 45000,
		   "shared: with mh_allow_gup=1 it needs no daemon; W is mh_device_fence_ms (%u)",
		   fence_ms);
	beluga_close(b);
	fake.allow_gup_fence_ms = 0;

	wd = open_pool(O_RDONLY);
	ret = beluga_watchdog_query(wd, &answer, &nr);
	tap_result(ret == -ENOLINK && strstr(beluga_last_error(wd), "not the pool's watchdog link"),
		   "lib: query before register is -ENOLINK with the fix (%s)", beluga_last_error(wd));
	ret = beluga_watchdog_register(wd, 0);
	tap_result(ret == -EINVAL && strstr(beluga_last_error(wd), "outside 1..16777215 ms"),
		   "lib: W 0 is refused naming the range (%s)", beluga_last_error(wd));
	tap_result(!beluga_watchdog_register(wd, 8000) &&
		   !beluga_watchdog_query(wd, &answer, &nr) && answer == BELUGA_WATCHDOG_FEED &&
		   nr == 0, "lib: register, then query answers FEED with no ranges");
	b2 = open_pool(O_RDWR);
	ret = beluga_watchdog_register(b2, 8000);
	tap_result(ret == -EBUSY && strstr(beluga_last_error(b2), "another beluga-watchdogd"),
		   "lib: a second daemon is -EBUSY (%s)", beluga_last_error(b2));

	b = open_pool(O_RDWR);
	ret = beluga_device_range(b, 0, NR_BLOCKS * BS, efd, &fence_ms);
	tap_result(!ret && fence_ms == 8000 &&
		   beluga_device_eventfd(b) == efd && beluga_device_fence_ms(b) == 8000,
		   "shared: with the daemon registered the range is declared with its W (%u ms)",
		   fence_ms);
	ret = beluga_hosts(b, hosts, BELUGA_MAX_HOSTS);
	tap_result(ret == 2 && (hosts[1].flags & BELUGA_HOST_DEVICE_PINS) &&
		   hosts[1].device_fence_ms == 8000 &&
		   !(hosts[0].flags & BELUGA_HOST_DEVICE_PINS) && !hosts[0].device_fence_ms,
		   "shared: this host's record carries the device lease, the peer's not");
	ret = beluga_device_range(b, 0, (uint64_t)page, -1, NULL);
	tap_result(ret == -EBUSY && strstr(beluga_last_error(b), "one per open file"),
		   "lib: a second range on a handle is -EBUSY (%s)", beluga_last_error(b));
	ret = beluga_watchdog_register(wd, 9000);
	tap_result(ret == -EBUSY, "watchdog: another W while a range holds the old one is -EBUSY");
	tap_result(!beluga_watchdog_register(wd, 8000), "watchdog: the same W is fine");

	tap_result(fake_kernel_fence() == 1, "fence: the range's eventfd is signalled");
	pfd = (struct pollfd){ .fd = efd, .events = POLLIN };
	tap_result(poll(&pfd, 1, 0) == 1 && read(efd, &count, sizeof(count)) == sizeof(count) &&
		   count == 1, "fence: the eventfd is readable and holds 1");
	ret = beluga_watchdog_query(wd, &answer, &nr);
	tap_result(!ret && answer == BELUGA_WATCHDOG_HOLD && nr == 1, "fence: with a range declared the daemon is told HOLD (%u ranges)", nr);
	ret = beluga_device_range(b2, 0, (uint64_t)page, -1, NULL);
	tap_result(ret == -ESTALE && strstr(beluga_last_error(b2), "open the device again"),
		   "fence: a new range is -ESTALE (%s)", beluga_last_error(b2));
	beluga_close(b);
	tap_result(!beluga_watchdog_query(wd, &answer, &nr) && answer == BELUGA_WATCHDOG_FEED &&
		   nr == 0, "fence: once the range's file is closed, FEED again");
	fake_kernel_unfence();
	ret = beluga_hosts(b2, hosts, BELUGA_MAX_HOSTS);
	tap_result(ret == 2 && !(hosts[1].flags & BELUGA_HOST_DEVICE_PINS),
		   "shared: the device lease ends with the last range");

	make_shared(BELUGA_HOST_ALIVE);		/* the peer runs a 1.2 module */
	ret = beluga_device_range(b2, 0, (uint64_t)page, -1, NULL);
	tap_result(ret == -EPROTO && strstr(beluga_last_error(b2), "ignores device leases"),
		   "shared: a live peer that ignores device leases is -EPROTO (%s)",
		   beluga_last_error(b2));
	make_shared(BELUGA_HOST_LEASE_AWARE);	/* the same peer, dead */
	tap_result(!beluga_device_range(b2, 0, (uint64_t)page, -1, NULL),
		   "shared: a dead one does not count");
	beluga_close(b2);
	beluga_close(wd);
	close(efd);
}

/* HOSTS: V1 callers get 72-byte records, V2 80-byte ones; the library's fallback. */
static void test_hosts_versions(void)
{
	unsigned char buf[4 * BELUGA_HOST_SIZE_V2];
	struct beluga_host hosts[2];
	struct beluga_hosts h;
	struct beluga *b;
	int fd = open(dev_path, O_RDONLY), ret;

	reset(1);
	make_shared(BELUGA_HOST_ALIVE | BELUGA_HOST_LEASE_AWARE | BELUGA_HOST_DEVICE_PINS);
	fake.hosts[0].device_fence_ms = 12000;
	memset(&h, 0, sizeof(h));
	h.size = BELUGA_HOSTS_SIZE_V1;
	h.count = 2;
	h.hosts = (uintptr_t)buf;
	memset(buf, 0xa5, sizeof(buf));
	ret = raw(fd, BELUGA_IOC_HOSTS, &h);
	tap_result(!ret && h.count == 2 &&
		   buf[BELUGA_HOST_SIZE_V1 + offsetof(struct beluga_host, host_id)] == 1 &&
		   buf[2 * BELUGA_HOST_SIZE_V1] == 0xa5,
		   "hosts: a V1 caller gets two 72-byte records, nothing after them");
	memset(&h, 0, sizeof(h));
	h.size = sizeof(h);
	h.count = 2;
	h.hosts = (uintptr_t)buf;
	h.host_size = BELUGA_HOST_SIZE_V1;
	memset(buf, 0xa5, sizeof(buf));
	tap_result(!raw(fd, BELUGA_IOC_HOSTS, &h) && buf[BELUGA_HOST_SIZE_V1] == 1 &&
		   buf[2 * BELUGA_HOST_SIZE_V1] == 0xa5, "hosts: host_size 72 gets 72-byte records");
	h.host_size = 0;
	memset(buf, 0xa5, sizeof(buf));
	tap_result(!raw(fd, BELUGA_IOC_HOSTS, &h) && buf[BELUGA_HOST_SIZE_V2] == 1 &&
		   ((struct beluga_host *)buf)->device_fence_ms == 12000 &&
		   buf[2 * BELUGA_HOST_SIZE_V2] == 0xa5,
		   "hosts: host_size 0 gets 80-byte records with the device lease");
	h.host_size = 76;
	tap_result(raw(fd, BELUGA_IOC_HOSTS, &h) == -EINVAL, "hosts: another host_size is -EINVAL");
	h.host_size = BELUGA_HOST_SIZE_V2;
	h.__reserved2 = 1;
	tap_result(raw(fd, BELUGA_IOC_HOSTS, &h) == -EINVAL, "hosts: __reserved2 is -EINVAL");
	close(fd);

	/* A module of the first version refuses the longer struct: V1 records, spread. */
	b = open_pool(O_RDONLY);
	fake.fail_cmd = BELUGA_CMD_HOSTS;
	fake.fail_nth = fake_kernel_calls(BELUGA_CMD_HOSTS) + 1;
	fake.fail_errno = E2BIG;
	memset(hosts, 0xa5, sizeof(hosts));
	ret = beluga_hosts(b, hosts, 2);
	tap_result(ret == 2 && hosts[1].host_id == 1 && !strcmp(hosts[1].name, "self") &&
		   hosts[0].device_fence_ms == 0 && hosts[0].__reserved == 0,
		   "lib: against a module without V2 records, V1 ones with the new fields 0");
	beluga_close(b);
}

int main(void)
{
	if (fake_device_create(dev_path))
		return 1;
	test_watchdog_abi();
	test_range_abi();
	test_shared();
	test_hosts_versions();
	unlink(dev_path);
	return tap_done();
}
