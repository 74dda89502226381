// SPDX-License-Identifier: GPL-2.0
/*
 * The device lease of shared pools (issue 21; uapi/linux/beluga.h,
 * BELUGA_IOC_WATCHDOG, BELUGA_IOC_DEVICE_RANGE and "Pins of a shared pool"
 * under BELUGA_IOC_ATTACH), from one host:
 *   - both commands' refusals, in the header's order;
 *   - a pool that is not shared: DEVICE_RANGE answers fence_ms 0 and never
 *     signals, the watchdog is told FEED and counts no range there;
 *   - a shared pool: DEVICE_RANGE needs a registered watchdog (-ENOLINK),
 *     then answers W and puts the device lease (W) into this host's record
 *     (HOSTS: BELUGA_HOST_DEVICE_PINS, device_fence_ms), and the lease ends
 *     with the last range, which lasts until its file is released (the
 *     last close, after the last mapping); HOSTS records of both sizes;
 *   - the pins it allows: the mappings that the declaring file makes
 *     afterwards inside its range take long-term pins (an io_uring fixed
 *     buffer where io_uring takes file-backed memory, 6.5 on; an AF_XDP
 *     umem everywhere), O_DIRECT and vmsplice(); mappings made before the
 *     declaration, by another file or reaching outside the range still
 *     refuse them (-EFAULT);
 *   - the fence: with a range declared and pinned, a stalled heartbeat
 *     signals the range's eventfd, the watchdog is told HOLD (also while
 *     DETACH attempts come and go) and the host stays out of the pool
 *     until the pin is dropped and the range's file closed; then FEED,
 *     and the host rejoins without the device lease. Without a range the
 *     watchdog is fed through the fence.
 * The fence tests stall the heartbeat with the module's debugfs knob
 * beluga/mh_stall_heartbeat (a fault attribute where the kernel has fault
 * injection, else its "probability" file alone), as shared_test's do.
 * Two hosts on one pool, and the hardware watchdog itself, are
 * tests/multihost's.
 */
#include "beluga_test.h"

#include <grp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/if_xdp.h>
#include <linux/io_uring.h>

#define DL_LEN		(4 * BT_MIB)	/* 2 MiB of metadata, 2 MiB of blocks */
#define DL_BS		(64 * BT_KIB)
/* W, the watchdog timeout the test registers as its own daemon. */
#define DL_W_MS		1000U
#define DL_PATTERN	0x6c

static int dl_errno(long r)
{
	return r < 0 ? -errno : (int)r;
}

static void dl_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void dl_msleep(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* The lease of the pools this module formats (mh_lease_ms; 0: 2000). */
static unsigned int dl_lease_ms(void)
{
	uint64_t v = 0;

	if (bt_read_sysfs_u64("/sys/module/beluga/parameters/mh_lease_ms", &v) ||
	    v == 0)
		return 2000;
	return (unsigned int)v;
}

/* Was the module loaded with mh_allow_gup=1 (every shared mapping pins)? */
static bool dl_allow_gup(void)
{
	char v[8] = "";
	FILE *f = fopen("/sys/module/beluga/parameters/mh_allow_gup", "re");

	if (!f)
		return false;
	if (!fgets(v, sizeof(v), f))
		v[0] = 0;
	fclose(f);
	return v[0] == 'Y' || v[0] == '1';
}


/* This host's record (HOSTS, BELUGA_HOST_SELF): 0, -ENOENT, -errno. */
static int dl_self(int fd, struct beluga_host *self)
{
	struct beluga_host h[BELUGA_MAX_HOSTS];
	int n, i;

	n = bt_hosts(fd, h, BELUGA_MAX_HOSTS);
	if (n < 0)
		return n;
	for (i = 0; i < n && i < BELUGA_MAX_HOSTS; i++) {
		if (h[i].flags & BELUGA_HOST_SELF) {
			*self = h[i];
			return 0;
		}
	}
	return -ENOENT;
}

/* The watchdog's answer to QUERY through @fd, or -errno. */
static int dl_query(int fd, struct beluga_watchdog *out)
{
	struct beluga_watchdog wd;
	int r = bt_watchdog(fd, BELUGA_WATCHDOG_QUERY, 0, &wd);

	if (out)
		*out = wd;
	return r ? r : (int)wd.answer;
}

static const char *dl_answer(int a)
{
	return a == BELUGA_WATCHDOG_FEED ? "FEED" :
	       a == BELUGA_WATCHDOG_HOLD ? "HOLD" :
	       a < 0 ? strerror(-a) : "?";
}

/*
 * WATCHDOG through @fd in a child that runs as uid 65534 (no capability):
 * what it returned, as 0 or -errno; -1000 when the child failed.
 */
static int dl_unpriv_watchdog(int fd, uint32_t flags, uint32_t ms)
{
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		if (setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(200);
		_exit(-bt_watchdog(fd, flags, ms, NULL));
	}
	if (pid < 0)
		return -1000;
	st = bt_wait(NULL, pid);
	return st >= 0 && st < 128 ? -st : -1000;
}

/* Is @efd readable within @ms? 1 yes (its count in *@count), 0, -errno. */
static int dl_eventfd_wait(int efd, int ms, uint64_t *count)
{
	struct pollfd p = { .fd = efd, .events = POLLIN };
	int r;

	do {
		r = poll(&p, 1, ms);
	} while (r < 0 && errno == EINTR);
	if (r <= 0)
		return r < 0 ? -errno : 0;
	if (read(efd, count, sizeof(*count)) != sizeof(*count))
		return -errno;
	return 1;
}

/* ------------------------------------------------------------------ */
/* Long-term pins: an io_uring fixed buffer, an AF_XDP umem.            */

/*
 * Register [@addr, +@len) as the fixed buffer of a new ring (*@ring, left
 * open for the caller to unregister): 0 or the registration's -errno.
 * *@setup_err is io_uring_setup()'s errno when no ring could be made.
 */
static int dl_ring_pin(void *addr, size_t len, int *ring, int *setup_err)
{
	struct io_uring_params prm;
	struct iovec v = { addr, len };
	int fd, r;

	memset(&prm, 0, sizeof(prm));
	*ring = -1;
	*setup_err = 0;
	fd = (int)syscall(__NR_io_uring_setup, 4, &prm);
	if (fd < 0) {
		*setup_err = errno;
		return -errno;
	}
	r = dl_errno(syscall(__NR_io_uring_register, fd,
			     IORING_REGISTER_BUFFERS, &v, 1));
	if (r) {
		close(fd);
		return r;
	}
	*ring = fd;
	return 0;
}

static int dl_ring_unpin(int ring)
{
	return dl_errno(syscall(__NR_io_uring_register, ring,
				IORING_UNREGISTER_BUFFERS, NULL, 0));
}

/* Does this kernel's io_uring take file-backed buffers (6.5 on)? */
static bool dl_uring_takes_files(void)
{
	int kv = bt_kernel_version();

	return !kv || kv >= 605;
}

/* ------------------------------------------------------------------ */
/* Refusals and a pool that is not shared.                              */

FIXTURE(devlease) {
	struct bt_ctx c;
	int fd2;		/* a second O_RDWR file */
	int efd;		/* an eventfd */
	int pfd[2];		/* a pipe: files that are no eventfd */
};

FIXTURE_SETUP(devlease)
{
	bt_ctx_init(&self->c);
	self->fd2 = -1;
	self->pfd[0] = self->pfd[1] = -1;
	self->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_LE(0, self->efd) TH_LOG("eventfd: %s", strerror(errno));
	ASSERT_EQ(0, pipe2(self->pfd, O_CLOEXEC));
	bt_setup_empty(&self->c);
	self->fd2 = bt_open(O_RDWR);
	ASSERT_LE(0, self->fd2);
}

FIXTURE_TEARDOWN(devlease)
{
	dl_close(&self->fd2);
	dl_close(&self->efd);
	dl_close(&self->pfd[0]);
	dl_close(&self->pfd[1]);
	bt_teardown(&self->c);
}

/*
 * WATCHDOG's rules, on an empty pool (it needs none): the capability, then
 * the struct, exactly one flag, timeout_ms, reserved; then one link per
 * pool (-EBUSY), QUERY only through it (-ENOLINK), until its file closes.
 */
TEST_F(devlease, watchdog_refusals)
{
	struct beluga_watchdog wd;
	int fd = self->c.fd, r, rofd;
	unsigned int i;

	/* 2. no CAP_SYS_ADMIN: -EPERM, before every field, also a QUERY */
	r = dl_unpriv_watchdog(fd, BELUGA_WATCHDOG_REGISTER, DL_W_MS);
	EXPECT_EQ(-EPERM, r) TH_LOG("REGISTER without CAP_SYS_ADMIN: %s",
				    strerror(-r));
	r = dl_unpriv_watchdog(fd, BELUGA_WATCHDOG_QUERY, 0);
	EXPECT_EQ(-EPERM, r) TH_LOG("QUERY without CAP_SYS_ADMIN: %s",
				    strerror(-r));
	r = dl_unpriv_watchdog(fd, 0, 0);
	EXPECT_EQ(-EPERM, r) TH_LOG("no flag, without CAP_SYS_ADMIN: %s",
				    strerror(-r));

	/* 5. exactly one of the two flags */
	{
		const uint32_t bad[] = {
			0, BELUGA_WATCHDOG_REGISTER | BELUGA_WATCHDOG_QUERY,
			1U << 2, BELUGA_WATCHDOG_REGISTER | 1U << 2,
			BELUGA_WATCHDOG_QUERY | 1U << 31,
		};

		for (i = 0; i < ARRAY_SIZE(bad); i++) {
			r = bt_watchdog(fd, bad[i], DL_W_MS, NULL);
			EXPECT_EQ(-EINVAL, r) TH_LOG("flags 0x%x: %s", bad[i],
						     strerror(-r));
		}
	}
	/* REGISTER's W: 1 .. BELUGA_WATCHDOG_MAX_MS */
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, 0, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("REGISTER for 0 ms: %s", strerror(-r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, BELUGA_WATCHDOG_MAX_MS + 1,
			NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("REGISTER above the maximum: %s",
				     strerror(-r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, ~0U, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("REGISTER for ~0 ms: %s", strerror(-r));
	/* QUERY passes no timeout; before -ENOLINK */
	r = bt_watchdog(fd, BELUGA_WATCHDOG_QUERY, 1, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("QUERY with a timeout: %s", strerror(-r));
	memset(&wd, 0, sizeof(wd));
	wd.size = sizeof(wd);
	wd.flags = BELUGA_WATCHDOG_REGISTER;
	wd.timeout_ms = DL_W_MS;
	wd.__reserved = 1;
	r = bt_ioctl(fd, BELUGA_IOC_WATCHDOG, &wd);
	EXPECT_EQ(-EINVAL, r) TH_LOG("__reserved 1: %s", strerror(-r));
	/* input fields that are only answers are not checked */
	memset(&wd, 0, sizeof(wd));
	wd.size = sizeof(wd);
	wd.flags = BELUGA_WATCHDOG_QUERY;
	wd.answer = 77;
	wd.device_ranges = 77;
	r = bt_ioctl(fd, BELUGA_IOC_WATCHDOG, &wd);
	EXPECT_EQ(-ENOLINK, r) TH_LOG("QUERY, no link registered: %s",
				      strerror(-r));

	/* the link: this file, until it closes; a read-only file may be it */
	rofd = bt_open(O_RDONLY);
	ASSERT_LE(0, rofd);
	r = bt_watchdog(rofd, BELUGA_WATCHDOG_REGISTER, DL_W_MS, &wd);
	ASSERT_EQ(0, r) TH_LOG("REGISTER through an O_RDONLY file: %s",
			       strerror(-r));
	EXPECT_EQ(DL_W_MS, wd.timeout_ms);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, wd.answer);
	r = dl_query(rofd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY of an empty pool: %s",
						  dl_answer(r));
	EXPECT_EQ(DL_W_MS, wd.timeout_ms);
	EXPECT_EQ(0, wd.device_ranges);
	EXPECT_EQ(0, wd.__reserved);
	/* a root task through the link without the capability: -EPERM */
	r = dl_unpriv_watchdog(rofd, BELUGA_WATCHDOG_QUERY, 0);
	EXPECT_EQ(-EPERM, r) TH_LOG("QUERY of the link without CAP_SYS_ADMIN: %s",
				    strerror(-r));

	/* another file: -EBUSY to REGISTER, -ENOLINK to QUERY, after the fields */
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, DL_W_MS, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("second REGISTER, another file: %s",
				    strerror(-r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, DL_W_MS + 1, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("second REGISTER, another W: %s",
				    strerror(-r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, 0, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("second REGISTER for 0 ms: %s", strerror(-r));
	r = dl_query(fd, NULL);
	EXPECT_EQ(-ENOLINK, r) TH_LOG("QUERY from another file: %s",
				      dl_answer(r));
	r = bt_watchdog(fd, BELUGA_WATCHDOG_QUERY, 5, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("QUERY with a timeout, another file: %s",
				     strerror(-r));
	r = dl_unpriv_watchdog(fd, BELUGA_WATCHDOG_REGISTER, DL_W_MS);
	EXPECT_EQ(-EPERM, r) TH_LOG("REGISTER without CAP_SYS_ADMIN while a "
				    "link is registered: %s", strerror(-r));

	/* the registration ends at close: another file registers, any W */
	close(rofd);
	r = bt_watchdog(fd, BELUGA_WATCHDOG_REGISTER, BELUGA_WATCHDOG_MAX_MS,
			&wd);
	EXPECT_EQ(0, r) TH_LOG("REGISTER after the link closed: %s",
			       strerror(-r));
	EXPECT_EQ(BELUGA_WATCHDOG_MAX_MS, wd.timeout_ms);
	r = dl_query(fd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY: %s", dl_answer(r));
	EXPECT_EQ(BELUGA_WATCHDOG_MAX_MS, wd.timeout_ms);
	r = dl_query(self->fd2, NULL);
	EXPECT_EQ(-ENOLINK, r) TH_LOG("QUERY from a third file: %s",
				      dl_answer(r));
	/* a file that holds no link closes without ending the link */
	close(self->fd2);
	self->fd2 = -1;
	r = dl_query(fd, NULL);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY after another file "
						  "closed: %s", dl_answer(r));
}

/* DEVICE_RANGE's own rules on an empty pool: every one before -ENODEV. */
TEST_F(devlease, device_range_refusals_empty_pool)
{
	struct beluga_device_range dr;
	int fd = self->c.fd, r;
	uint32_t fence = 0xdead;

	/* 5. flags, alignment, length 0, eventfd below -1 */
	memset(&dr, 0, sizeof(dr));
	dr.size = sizeof(dr);
	dr.eventfd = -1;
	dr.length = BT_PAGE;
	dr.flags = 1;
	r = bt_ioctl(fd, BELUGA_IOC_DEVICE_RANGE, &dr);
	EXPECT_EQ(-EINVAL, r) TH_LOG("flags 1: %s", strerror(-r));
	dr.flags = 1U << 31;
	r = bt_ioctl(fd, BELUGA_IOC_DEVICE_RANGE, &dr);
	EXPECT_EQ(-EINVAL, r) TH_LOG("flags 1 << 31: %s", strerror(-r));
	r = bt_device_range(fd, -1, 1, BT_PAGE, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("offset 1: %s", strerror(-r));
	r = bt_device_range(fd, -1, BT_PAGE + 512, BT_PAGE, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("offset not page aligned: %s", strerror(-r));
	r = bt_device_range(fd, -1, 0, BT_PAGE - 1, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("length 4095: %s", strerror(-r));
	r = bt_device_range(fd, -1, 0, BT_PAGE + 8, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("length not page aligned: %s", strerror(-r));
	r = bt_device_range(fd, -1, 0, 0, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("length 0: %s", strerror(-r));
	r = bt_device_range(fd, -1, BT_PAGE, 0, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("length 0 at a page: %s", strerror(-r));
	r = bt_device_range(fd, -2, 0, BT_PAGE, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("eventfd -2: %s", strerror(-r));
	r = bt_device_range(fd, INT32_MIN, 0, BT_PAGE, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("eventfd INT32_MIN: %s", strerror(-r));
	/* the fields before the eventfd: a pipe and length 0 */
	r = bt_device_range(fd, self->pfd[0], 0, 0, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("length 0 and a pipe: %s", strerror(-r));
	r = bt_device_range(fd, self->pfd[0], 1, BT_PAGE, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("offset 1 and a pipe: %s", strerror(-r));

	/* 8. an fd that is no eventfd: -EBADF, before the pool's -ENODEV */
	r = bt_device_range(fd, self->pfd[0], 0, BT_PAGE, NULL);
	EXPECT_EQ(-EBADF, r) TH_LOG("eventfd a pipe: %s", strerror(-r));
	r = bt_device_range(fd, fd, 0, BT_PAGE, NULL);
	EXPECT_EQ(-EBADF, r) TH_LOG("eventfd the /dev/beluga file itself: %s",
				    strerror(-r));
	r = bt_device_range(fd, 1000, 0, BT_PAGE, NULL);
	EXPECT_EQ(-EBADF, r) TH_LOG("eventfd a closed descriptor: %s",
				    strerror(-r));
	r = bt_device_range(fd, self->pfd[0], 1ULL << 46, BT_PAGE, NULL);
	EXPECT_EQ(-EBADF, r) TH_LOG("a pipe and a range past map_size: %s",
				    strerror(-r));
	/* then the pool */
	r = bt_device_range(fd, self->efd, 0, BT_PAGE, &fence);
	EXPECT_EQ(-ENODEV, r) TH_LOG("no region attached: %s", strerror(-r));
	r = bt_device_range(fd, -1, 1ULL << 46, BT_PAGE, NULL);
	EXPECT_EQ(-ENODEV, r) TH_LOG("no region, a range past map_size: %s",
				     strerror(-r));
	/* nothing was declared: a region later, and the file declares once */
	{
		struct beluga_attach a;
		char why[160];

		if (!bt_backend_ok(bt_pick_backend(BT_ANY_BACKEND), 0,
				   BT_REGION_LEN, why, sizeof(why)))
			SKIP(return, "%s", why);
		ASSERT_EQ(0, bt_attach_req(&a, bt_pick_backend(BT_ANY_BACKEND),
					   0, 0, BT_REGION_LEN, BT_BLOCK_SIZE,
					   "bt-devlease"));
		r = bt_attach(fd, &a);
		ASSERT_EQ(0, r) TH_LOG("ATTACH: %s", strerror(-r));
		r = bt_device_range(fd, -1, 0, BT_PAGE, &fence);
		EXPECT_EQ(0, r) TH_LOG("the first range of the file, after the "
				       "refused ones: %s", strerror(-r));
		EXPECT_EQ(0, fence);
	}
}

/*
 * A pool that is not shared: any file declares one range (fence_ms 0,
 * and no signal ever), -ENXIO past map_size, -EBUSY for a second; the
 * watchdog is told FEED, and counts none of them (nothing to wait for:
 * the module's choice, kmod/devlease.c; the header says "declared on the
 * pool").
 */
TEST_F_TIMEOUT(devlease, local_pool, 60)
{
	struct beluga_watchdog wd;
	uint64_t map_size, cnt = 0, off;
	int rofd = -1, wdfd = -1, r;
	uint32_t fence = 0xdead;
	uint8_t *p;

	/* bt_setup() opens c.fd itself */
	dl_close(&self->c.fd);
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	map_size = self->c.info.map_size;
	ASSERT_LT(0, map_size);

	/* the range's end: map_size at most, no wrap */
	r = bt_device_range(self->fd2, -1, map_size, BT_PAGE, NULL);
	EXPECT_EQ(-ENXIO, r) TH_LOG("offset map_size: %s", strerror(-r));
	r = bt_device_range(self->fd2, -1, map_size - BT_PAGE, 2 * BT_PAGE, NULL);
	EXPECT_EQ(-ENXIO, r) TH_LOG("a page past map_size: %s", strerror(-r));
	r = bt_device_range(self->fd2, -1, 0, map_size + BT_PAGE, NULL);
	EXPECT_EQ(-ENXIO, r) TH_LOG("length map_size + 4096: %s", strerror(-r));
	r = bt_device_range(self->fd2, -1, BT_PAGE, ~0ULL & ~(BT_PAGE - 1),
			    NULL);
	EXPECT_EQ(-ENXIO, r) TH_LOG("a length whose end wraps: %s",
				    strerror(-r));
	r = bt_device_range(self->fd2, self->pfd[1], map_size, BT_PAGE, NULL);
	EXPECT_EQ(-EBADF, r) TH_LOG("a pipe, past map_size: %s", strerror(-r));

	/* the whole pool, with an eventfd: fence_ms 0 */
	r = bt_device_range(self->fd2, self->efd, 0, map_size, &fence);
	ASSERT_EQ(0, r) TH_LOG("DEVICE_RANGE of the whole pool: %s",
			       strerror(-r));
	EXPECT_EQ(0, fence) TH_LOG("a pool that is not shared has no fence");
	/* one per file; the range checks come first */
	r = bt_device_range(self->fd2, -1, 0, BT_PAGE, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("second range of a file: %s", strerror(-r));
	r = bt_device_range(self->fd2, -1, map_size, BT_PAGE, NULL);
	EXPECT_EQ(-ENXIO, r) TH_LOG("second range past map_size: %s",
				    strerror(-r));
	r = bt_device_range(self->fd2, -1, 0, 0, NULL);
	EXPECT_EQ(-EINVAL, r) TH_LOG("second range of length 0: %s",
				     strerror(-r));
	/* a read-only file may declare one too */
	rofd = bt_open(O_RDONLY);
	ASSERT_LE(0, rofd);
	off = self->c.att[0].first_offset;
	r = bt_device_range(rofd, -1, off, BT_BLOCK_SIZE, &fence);
	EXPECT_EQ(0, r) TH_LOG("DEVICE_RANGE through O_RDONLY: %s",
			       strerror(-r));
	EXPECT_EQ(0, fence);

	/* mapped after the declaration, the range pins like any local page */
	p = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 self->fd2, 0);
	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap: %s", strerror(errno));
	memset(p + off, DL_PATTERN, BT_PAGE);
	{
		uint8_t got[64];
		struct iovec l = { got, sizeof(got) };
		struct iovec rm = { p + off, sizeof(got) };
		ssize_t n = process_vm_readv(getpid(), &l, 1, &rm, 1, 0);

		if (n < 0 && errno == ENOSYS) {
			TH_LOG("process_vm_readv(): ENOSYS, not checked");
		} else {
			EXPECT_EQ((ssize_t)sizeof(got), n)
				TH_LOG("process_vm_readv() of a local pool: %s",
				       strerror(errno));
		}
	}

	/* the daemon: FEED, and no range to wait for on a local pool */
	wdfd = bt_open(O_RDONLY);
	ASSERT_LE(0, wdfd);
	r = bt_watchdog(wdfd, BELUGA_WATCHDOG_REGISTER, DL_W_MS, &wd);
	ASSERT_EQ(0, r) TH_LOG("REGISTER: %s", strerror(-r));
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, wd.answer);
	r = dl_query(wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY, a local pool with "
						  "ranges: %s", dl_answer(r));
	EXPECT_EQ(0, wd.device_ranges) TH_LOG("local ranges counted");
	close(rofd);
	rofd = -1;
	close(self->fd2);
	self->fd2 = -1;
	EXPECT_EQ(DL_PATTERN, p[off + 7]);
	munmap(p, map_size);
	r = dl_query(wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r);

	/* no signal ever comes on a pool that is not shared */
	r = dl_eventfd_wait(self->efd, 0, &cnt);
	EXPECT_EQ(0, r) TH_LOG("the eventfd was signalled (%llu)",
			       (unsigned long long)cnt);
	close(wdfd);
}

/* ------------------------------------------------------------------ */
/* Shared pools.                                                        */

FIXTURE(shared) {
	struct bt_ctx c;
	struct beluga_attach a;
	bool attached;
	int wdfd;		/* the test's own watchdog link */
	int rfd;		/* the file that declares the device range */
	int efd;		/* its eventfd */
	int ring, xsk;		/* the long-term pins */
	void *maps[4];		/* mappings to unmap */
	size_t lens[4];
	unsigned int lease_ms;
};

FIXTURE_SETUP(shared)
{
	char why[160];

	bt_ctx_init(&self->c);
	self->attached = false;
	self->wdfd = self->rfd = self->ring = self->xsk = -1;
	memset(self->maps, 0, sizeof(self->maps));
	self->lease_ms = dl_lease_ms();
	self->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_LE(0, self->efd);
	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, DL_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	bt_setup_empty(&self->c);
}

FIXTURE_TEARDOWN(shared)
{
	char why[160];
	unsigned int i;

	/* a failed fence test must not leave the heartbeat stalled */
	if (!access(BT_MH_STALL, F_OK))
		bt_mh_stall(false, why, sizeof(why));
	if (self->ring >= 0)
		dl_ring_unpin(self->ring);
	dl_close(&self->ring);
	dl_close(&self->xsk);
	for (i = 0; i < ARRAY_SIZE(self->maps); i++)
		if (self->maps[i])
			munmap(self->maps[i], self->lens[i]);
	dl_close(&self->rfd);
	dl_close(&self->wdfd);
	dl_close(&self->efd);
	bt_teardown(&self->c);
}

/* Format a shared pool on the first device-dax, as host @id. */
static bool __dl_attach(struct __test_metadata *_metadata,
			FIXTURE_DATA(shared) *self, uint32_t id)
{
	int r;

	ASSERT_EQ(0, bt_attach_req(&self->a, BELUGA_BACKEND_DAX, 0, 0, DL_LEN,
				   DL_BS, "bt-devlease"));
	self->a.flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			BELUGA_ATTACH_FORMAT;
	self->a.host_id = id;
	r = bt_attach(self->c.fd, &self->a);
	if (r == -EOPNOTSUPP)
		SKIP(return false, "a module built without shared pools");
	ASSERT_EQ(0, r) TH_LOG("shared ATTACH: %s", strerror(-r));
	self->attached = true;
	ASSERT_EQ(0, bt_info(self->c.fd, &self->c.info));
	return true;
}

#define dl_attach(self, id) __dl_attach(_metadata, self, id)

/* Map [@off, +@len) of @fd into slot @slot of the fixture's mappings. */
static uint8_t *__dl_map(struct __test_metadata *_metadata,
			 FIXTURE_DATA(shared) *self, unsigned int slot, int fd,
			 uint64_t off, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       (off_t)off);

	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap of [%llu, +%zu): %s",
					(unsigned long long)off, len,
					strerror(errno));
	self->maps[slot] = p;
	self->lens[slot] = len;
	return p;
}

#define dl_map(self, slot, fd, off, len) \
	__dl_map(_metadata, self, slot, fd, off, len)

static void dl_unmap(FIXTURE_DATA(shared) *self, unsigned int slot)
{
	if (self->maps[slot])
		munmap(self->maps[slot], self->lens[slot]);
	self->maps[slot] = NULL;
}

/*
 * (a) Without a watchdog daemon a shared pool refuses device ranges
 * (-ENOLINK, after the range's own checks); its record carries no lease.
 */
TEST_F_TIMEOUT(shared, no_watchdog_no_range, 60)
{
	struct beluga_host me;
	int r;

	if (dl_allow_gup())
		SKIP(return, "loaded with mh_allow_gup=1: ranges need no daemon");
	if (!dl_attach(self, 1))
		return;
	ASSERT_EQ(0, dl_self(self->c.fd, &me));
	EXPECT_EQ(BELUGA_HOST_ALIVE | BELUGA_HOST_SELF | BELUGA_HOST_LEASE_AWARE,
		  me.flags) TH_LOG("flags 0x%x", me.flags);
	EXPECT_EQ(0, me.device_fence_ms);
	EXPECT_EQ(0, me.__reserved);

	r = bt_device_range(self->c.fd, -1, self->c.info.map_size, BT_PAGE,
			    NULL);
	EXPECT_EQ(-ENXIO, r) TH_LOG("past map_size, no daemon: %s",
				    strerror(-r));
	r = bt_device_range(self->c.fd, 0x7fffffff, 0, BT_PAGE, NULL);
	EXPECT_EQ(-EBADF, r) TH_LOG("no eventfd, no daemon: %s", strerror(-r));
	r = bt_device_range(self->c.fd, self->efd, self->a.first_offset, DL_BS,
			    NULL);
	EXPECT_EQ(-ENOLINK, r) TH_LOG("no watchdog daemon: %s", strerror(-r));
	/* refused, so not declared: the file may still declare one */
	ASSERT_EQ(0, dl_self(self->c.fd, &me));
	EXPECT_EQ(0, me.flags & BELUGA_HOST_DEVICE_PINS);
	/* a daemon registered after the refusal: the same file declares */
	self->wdfd = bt_open(O_RDONLY);
	ASSERT_LE(0, self->wdfd);
	ASSERT_EQ(0, bt_watchdog(self->wdfd, BELUGA_WATCHDOG_REGISTER, DL_W_MS,
				 NULL));
	r = bt_device_range(self->c.fd, -1, self->a.first_offset, DL_BS, NULL);
	EXPECT_EQ(0, r) TH_LOG("with a daemon, after the refusal: %s",
			       strerror(-r));
	/* c.fd holds a range until the teardown closes it */
}

/* Wait up to @ms for this host's record to carry (or not) the lease. */
static int dl_wait_pins(int fd, bool pins, unsigned int ms,
			struct beluga_host *me)
{
	unsigned int t;
	int r = -ETIMEDOUT;

	for (t = 0; t <= ms; t += 50) {
		r = dl_self(fd, me);
		if (!r && !!(me->flags & BELUGA_HOST_DEVICE_PINS) == pins)
			return 0;
		dl_msleep(50);
	}
	return r ? r : -ETIMEDOUT;
}

/*
 * (b) With the test as the watchdog daemon: DEVICE_RANGE answers W, the
 * record carries the device lease while a range is open (also one of a
 * read-only file), and loses it when the last one closes; a daemon that
 * comes back must keep W while ranges hold it.
 */
TEST_F_TIMEOUT(shared, range_declares_the_lease, 60)
{
	struct beluga_watchdog wd;
	struct beluga_host me;
	uint32_t fence = 0;
	int r, rofd, wd2;
	uint8_t *p;

	if (!dl_attach(self, 1))
		return;
	self->wdfd = bt_open(O_RDONLY);
	ASSERT_LE(0, self->wdfd);
	ASSERT_EQ(0, bt_watchdog(self->wdfd, BELUGA_WATCHDOG_REGISTER, DL_W_MS,
				 NULL));
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY, fresh heartbeat: %s",
						  dl_answer(r));
	EXPECT_EQ(0, wd.device_ranges);

	self->rfd = bt_open(O_RDWR);
	ASSERT_LE(0, self->rfd);
	r = bt_device_range(self->rfd, self->efd, self->a.first_offset, DL_BS,
			    &fence);
	ASSERT_EQ(0, r) TH_LOG("DEVICE_RANGE with a daemon: %s", strerror(-r));
	EXPECT_EQ(DL_W_MS, fence) TH_LOG("fence_ms is the daemon's W");
	/* the record says so before the call returned */
	ASSERT_EQ(0, dl_self(self->c.fd, &me));
	EXPECT_EQ(BELUGA_HOST_ALIVE | BELUGA_HOST_SELF | BELUGA_HOST_DEVICE_PINS |
		  BELUGA_HOST_LEASE_AWARE, me.flags) TH_LOG("flags 0x%x", me.flags);
	EXPECT_EQ(DL_W_MS, me.device_fence_ms);
	r = bt_device_range(self->rfd, -1, self->a.first_offset, DL_BS, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("a second range of the file: %s",
				    strerror(-r));
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r);
	EXPECT_EQ(1, wd.device_ranges);
	EXPECT_EQ(DL_W_MS, wd.timeout_ms);

	/* a read-only file's range, the whole pool */
	rofd = bt_open(O_RDONLY);
	ASSERT_LE(0, rofd);
	r = bt_device_range(rofd, -1, 0, self->c.info.map_size, &fence);
	EXPECT_EQ(0, r) TH_LOG("DEVICE_RANGE through O_RDONLY: %s", strerror(-r));
	EXPECT_EQ(DL_W_MS, fence);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(2, wd.device_ranges);

	/*
	 * The daemon goes and comes back: while ranges hold W, another W is
	 * refused (-EBUSY), the same W accepted.
	 */
	dl_close(&self->wdfd);
	wd2 = bt_open(O_RDONLY);
	ASSERT_LE(0, wd2);
	r = bt_watchdog(wd2, BELUGA_WATCHDOG_REGISTER, DL_W_MS + 500, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("REGISTER with another W while ranges hold "
				    "the old one: %s", strerror(-r));
	r = bt_watchdog(wd2, BELUGA_WATCHDOG_REGISTER, DL_W_MS, NULL);
	EXPECT_EQ(0, r) TH_LOG("REGISTER with the same W: %s", strerror(-r));
	self->wdfd = wd2;
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r);
	EXPECT_EQ(2, wd.device_ranges);

	/* a range lasts until its file is released: after its last mapping */
	close(rofd);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(1, wd.device_ranges) TH_LOG("the read-only file closed");
	p = dl_map(self, 1, self->rfd, self->a.first_offset, DL_BS);
	memset(p, DL_PATTERN, BT_PAGE);
	dl_close(&self->rfd);
	dl_msleep(500);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(1, wd.device_ranges) TH_LOG("closed, still mapped");
	ASSERT_EQ(0, dl_self(self->c.fd, &me));
	EXPECT_TRUE(me.flags & BELUGA_HOST_DEVICE_PINS)
		TH_LOG("the range's file is closed but still mapped");
	EXPECT_EQ(DL_PATTERN, p[BT_PAGE - 1]);
	/* the lease ends with the last range */
	dl_unmap(self, 1);
	r = dl_wait_pins(self->c.fd, false, 3000, &me);
	EXPECT_EQ(0, r) TH_LOG("the record keeps the device lease after the "
			       "last range closed (flags 0x%x)", me.flags);
	EXPECT_EQ(0, me.device_fence_ms);
	EXPECT_TRUE(me.flags & BELUGA_HOST_LEASE_AWARE);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r);
	EXPECT_EQ(0, wd.device_ranges);
	/* with no range left, any W */
	dl_close(&self->wdfd);
	wd2 = bt_open(O_RDONLY);
	ASSERT_LE(0, wd2);
	r = bt_watchdog(wd2, BELUGA_WATCHDOG_REGISTER, DL_W_MS + 500, NULL);
	EXPECT_EQ(0, r) TH_LOG("REGISTER with another W, no range: %s",
			       strerror(-r));
	self->wdfd = wd2;
	/* the eventfd never fired: nothing fenced */
	{
		uint64_t cnt = 0;

		EXPECT_EQ(0, dl_eventfd_wait(self->efd, 0, &cnt));
	}
}

/*
 * HOSTS in both record sizes: @host_size V1 (72 bytes a record), V2 and 0
 * (80), others -EINVAL; a caller of the first struct layout gets V1.
 */
TEST_F_TIMEOUT(shared, hosts_record_sizes, 60)
{
	uint8_t buf[BELUGA_MAX_HOSTS * BELUGA_HOST_SIZE_V2 + 64];
	struct beluga_hosts q;
	uint32_t sizes[] = { BELUGA_HOST_SIZE_V1, BELUGA_HOST_SIZE_V2, 0 };
	unsigned int i, j, n;
	int r;

	if (!dl_attach(self, 2))
		return;
	for (i = 0; i <= ARRAY_SIZE(sizes); i++) {
		/* the last round: the first layout, host_size past its size */
		bool v1 = i == ARRAY_SIZE(sizes);
		uint32_t rs = v1 || sizes[i] == BELUGA_HOST_SIZE_V1 ?
			      BELUGA_HOST_SIZE_V1 : BELUGA_HOST_SIZE_V2;

		memset(buf, 0xa5, sizeof(buf));
		memset(&q, 0, sizeof(q));
		q.size = v1 ? BELUGA_HOSTS_SIZE_V1 : sizeof(q);
		q.count = BELUGA_MAX_HOSTS;
		q.hosts = (uintptr_t)buf;
		q.host_size = v1 ? 99 : sizes[i];
		r = bt_ioctl(self->c.fd, BELUGA_IOC_HOSTS, &q);
		ASSERT_EQ(0, r) TH_LOG("HOSTS, record size %u%s: %s", rs,
				       v1 ? " (first layout)" : "", strerror(-r));
		n = q.count;
		ASSERT_LT(2, n);
		ASSERT_GE(BELUGA_MAX_HOSTS, n);
		for (j = 0; j < n; j++) {
			struct beluga_host h;

			memset(&h, 0, sizeof(h));
			memcpy(&h, buf + j * rs, rs);
			EXPECT_EQ(j, h.host_id) TH_LOG("record %u of size %u", j, rs);
			if (j == 2) {
				EXPECT_EQ(BELUGA_HOST_ACTIVE, h.state);
				EXPECT_TRUE(h.flags & BELUGA_HOST_SELF);
			}
			if (rs == BELUGA_HOST_SIZE_V2) {
				EXPECT_EQ(0, h.device_fence_ms);
				EXPECT_EQ(0, h.__reserved);
			}
		}
		/* nothing written past the last record */
		EXPECT_EQ(0xa5, buf[n * rs]) TH_LOG("record size %u: byte %u "
						    "written", rs, n * rs);
	}
	/* other record sizes, and __reserved2 */
	{
		const uint32_t bad[] = { 1, 64, BELUGA_HOST_SIZE_V1 + 1,
					 BELUGA_HOST_SIZE_V2 - 4,
					 BELUGA_HOST_SIZE_V2 + 8, 4096 };

		for (i = 0; i < ARRAY_SIZE(bad); i++) {
			memset(&q, 0, sizeof(q));
			q.size = sizeof(q);
			q.count = BELUGA_MAX_HOSTS;
			q.hosts = (uintptr_t)buf;
			q.host_size = bad[i];
			r = bt_ioctl(self->c.fd, BELUGA_IOC_HOSTS, &q);
			EXPECT_EQ(-EINVAL, r) TH_LOG("host_size %u: %s", bad[i],
						     strerror(-r));
		}
		memset(&q, 0, sizeof(q));
		q.size = sizeof(q);
		q.count = BELUGA_MAX_HOSTS;
		q.hosts = (uintptr_t)buf;
		q.__reserved2 = 1;
		r = bt_ioctl(self->c.fd, BELUGA_IOC_HOSTS, &q);
		EXPECT_EQ(-EINVAL, r) TH_LOG("__reserved2 1: %s", strerror(-r));
	}
}

/*
 * (c) The mappings a declaring file makes afterwards inside its range are
 * pinnable: the fixture's setup for the pin tests. Slot 0: the block
 * mapped by rfd before the declaration; 1: after it; 2: by another file
 * (c.fd); 3: the whole pool by rfd after it (reaches outside the range).
 */
static bool __dl_pins_setup(struct __test_metadata *_metadata,
			    FIXTURE_DATA(shared) *self, uint64_t *blk)
{
	uint32_t fence = 0;
	unsigned int i;
	int r;

	if (!dl_attach(self, 0))
		return false;
	self->wdfd = bt_open(O_RDONLY);
	ASSERT_LE(0, self->wdfd);
	ASSERT_EQ(0, bt_watchdog(self->wdfd, BELUGA_WATCHDOG_REGISTER, DL_W_MS,
				 NULL));
	self->rfd = bt_open(O_RDWR);
	ASSERT_LE(0, self->rfd);
	ASSERT_EQ(0, bt_alloc(self->rfd, 1, blk));
	dl_map(self, 0, self->rfd, *blk, DL_BS);
	r = bt_device_range(self->rfd, self->efd, *blk, DL_BS, &fence);
	ASSERT_EQ(0, r) TH_LOG("DEVICE_RANGE of the block: %s", strerror(-r));
	EXPECT_EQ(DL_W_MS, fence);
	dl_map(self, 1, self->rfd, *blk, DL_BS);
	dl_map(self, 2, self->c.fd, *blk, DL_BS);
	dl_map(self, 3, self->rfd, 0, self->c.info.map_size);
	/* fault every page in: the fast path finds entries to pin */
	for (i = 0; i < 4; i++) {
		uint8_t *p = self->maps[i];

		if (i == 3)
			p += *blk;
		memset(p, DL_PATTERN, BT_PAGE);
	}
	return true;
}

#define dl_pins_setup(self, blk) __dl_pins_setup(_metadata, self, blk)

/* The block's bytes in mapping @slot. */
static uint8_t *dl_blk(FIXTURE_DATA(shared) *self, unsigned int slot,
		       uint64_t blk)
{
	return (uint8_t *)self->maps[slot] + (slot == 3 ? blk : 0);
}

static const char *const dl_slot_name[4] = {
	"the range's file, mapped before the declaration",
	"the range's file, mapped after the declaration",
	"another file",
	"the range's file, the whole pool mapped after the declaration",
};

/*
 * io_uring fixed buffers (FOLL_LONGTERM): only slot 1 takes them. Before
 * 6.5 io_uring refuses every file-backed buffer (shared_test checks the
 * refusals there; range_pins_xdp_odirect the range's long-term pins).
 */
TEST_F_TIMEOUT(shared, range_uring_buffer, 60)
{
	bool gup = dl_allow_gup();
	uint64_t blk;
	unsigned int i;
	int r, ring, e;

	if (!dl_uring_takes_files())
		SKIP(return, "Linux %d.%d io_uring refuses fixed buffers on "
		     "file-backed memory (EOPNOTSUPP, after pinning them): "
		     "range_pins_xdp_odirect shows the range's long-term pins "
		     "with an AF_XDP umem", bt_kernel_version() / 100,
		     bt_kernel_version() % 100);
	if (!dl_pins_setup(self, &blk))
		return;
	for (i = 0; i < 4; i++) {
		r = dl_ring_pin(dl_blk(self, i, blk), BT_PAGE, &ring, &e);
		if (e)
			SKIP(return, "io_uring_setup(): %s (io_uring left out "
			     "or disabled)", strerror(e));
		if (ring >= 0) {
			EXPECT_EQ(0, dl_ring_unpin(ring));
			close(ring);
		}
		if (i == 1 || gup) {
			EXPECT_EQ(0, r) TH_LOG("fixed buffer of %s: %s",
					       dl_slot_name[i], strerror(-r));
		} else {
			EXPECT_EQ(-EFAULT, r) TH_LOG("fixed buffer of %s: %s",
						     dl_slot_name[i], strerror(-r));
		}
	}
}

/*
 * AF_XDP umems (FOLL_LONGTERM, every kernel), O_DIRECT reads into the
 * block (BELUGA_TEST_BLKDEV), vmsplice() and process_vm_readv(): slot 1
 * takes them all, the others refuse them (-EFAULT).
 */
TEST_F_TIMEOUT(shared, range_pins_xdp_odirect, 60)
{
	const char *dev = getenv("BELUGA_TEST_BLKDEV");
	bool gup = dl_allow_gup();
	int dfd = -1, pfd[2], s, r;
	uint8_t *plain, got[64];
	uint64_t blk;
	unsigned int i;
	ssize_t n;

	if (!dl_pins_setup(self, &blk))
		return;
	plain = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, plain);
	if (dev && *dev) {
		dfd = open(dev, O_RDWR | O_DIRECT | O_CLOEXEC);
		ASSERT_LE(0, dfd) TH_LOG("%s O_DIRECT: %s", dev, strerror(errno));
		memset(plain, 0xd7, BT_PAGE);
		ASSERT_EQ((ssize_t)BT_PAGE, pwrite(dfd, plain, BT_PAGE, 0))
			TH_LOG("O_DIRECT write of %s: %s", dev, strerror(errno));
	} else {
		TH_LOG("BELUGA_TEST_BLKDEV not set: no O_DIRECT part");
	}
	ASSERT_EQ(0, pipe2(pfd, O_CLOEXEC));
	for (i = 0; i < 4; i++) {
		uint8_t *t = dl_blk(self, i, blk);
		bool ok = i == 1 || gup;
		struct iovec v = { t, BT_PAGE };
		struct iovec l = { got, sizeof(got) };

		/* AF_XDP umem */
		r = bt_xdp_umem_pin(t, BT_PAGE, &s);
		if (r == -EAFNOSUPPORT || r == -ENOPROTOOPT) {
			TH_LOG("AF_XDP unavailable: %s", strerror(-r));
		} else if (ok) {
			EXPECT_EQ(0, r) TH_LOG("AF_XDP umem of %s: %s",
					       dl_slot_name[i], strerror(-r));
		} else {
			EXPECT_NE(0, r) TH_LOG("AF_XDP umem of %s registered",
					       dl_slot_name[i]);
		}
		if (s >= 0)
			close(s);

		/* O_DIRECT read into the block */
		if (dfd >= 0) {
			errno = 0;
			n = pread(dfd, t, BT_PAGE, 0);
			if (ok) {
				EXPECT_EQ((ssize_t)BT_PAGE, n)
					TH_LOG("O_DIRECT read into %s: %s",
					       dl_slot_name[i], strerror(errno));
				EXPECT_EQ(0xd7, t[BT_PAGE - 1]);
			} else {
				EXPECT_EQ(-1, n) TH_LOG("O_DIRECT read into %s: "
							"%zd bytes", dl_slot_name[i], n);
				EXPECT_EQ(EFAULT, errno);
				EXPECT_EQ(DL_PATTERN, t[BT_PAGE - 1]);
			}
			memset(t, DL_PATTERN, BT_PAGE);
		}

		/* vmsplice(): the pipe holds the page itself */
		errno = 0;
		n = vmsplice(pfd[1], &v, 1, 0);
		if (ok) {
			EXPECT_EQ((ssize_t)BT_PAGE, n)
				TH_LOG("vmsplice() of %s: %s", dl_slot_name[i],
				       strerror(errno));
			if (n > 0)
				EXPECT_EQ(n, read(pfd[0], plain, (size_t)n));
			EXPECT_EQ(DL_PATTERN, plain[9]);
		} else {
			EXPECT_EQ(-1, n) TH_LOG("vmsplice() of %s: %zd", dl_slot_name[i], n);
			EXPECT_EQ(EFAULT, errno);
			if (n > 0)
				EXPECT_EQ(n, read(pfd[0], plain, (size_t)n));
		}

		/* process_vm_readv() */
		errno = 0;
		v.iov_len = sizeof(got);
		n = process_vm_readv(getpid(), &l, 1, &v, 1, 0);
		if (n < 0 && errno == ENOSYS)
			continue;
		if (ok) {
			EXPECT_EQ((ssize_t)sizeof(got), n)
				TH_LOG("process_vm_readv() of %s: %s",
				       dl_slot_name[i], strerror(errno));
		} else {
			EXPECT_EQ(-1, n) TH_LOG("process_vm_readv() of %s: %zd",
						dl_slot_name[i], n);
		}
	}
	close(pfd[0]);
	close(pfd[1]);
	if (dfd >= 0)
		close(dfd);
	munmap(plain, BT_PAGE);
}

/* Wait up to @ms for a LOOKUP through a new file to give @want. */
static int dl_wait_lookup(int want, unsigned int ms)
{
	struct beluga_key k = bt_key(0xd1, 1);
	unsigned int t;
	uint32_t hits;
	int r = -ETIMEDOUT, fd;

	for (t = 0; t <= ms; t += 100) {
		fd = bt_open(O_RDONLY);
		if (fd < 0)
			return -errno;
		r = bt_lookup(fd, 0xd1, &k, 1, NULL, 0, &hits);
		close(fd);
		if (r == want)
			return r;
		dl_msleep(100);
	}
	return r;
}

/*
 * The fence with a device range declared and pinned (an io_uring fixed
 * buffer where io_uring takes file-backed memory, else an AF_XDP umem):
 * the setup of the fence tests, up to the eventfd's signal, with the
 * heartbeat stalled (until bt_mh_stall(false)). The block in *@blk, the
 * record before the stall in *@me0. False when it skipped.
 */
static bool __dl_fence_pinned(struct __test_metadata *_metadata,
			      FIXTURE_DATA(shared) *self, uint64_t *blk,
			      struct beluga_host *me0)
{
	unsigned int lease = self->lease_ms;
	struct beluga_watchdog wd;
	uint64_t cnt = 0;
	const char *kind;
	double t0, t_sig;
	char why[160];
	uint8_t *p;
	int r, e;

	if (bt_mh_stall(false, why, sizeof(why)))
		SKIP(return false, "%s", why);
	if (!dl_attach(self, 0))
		return false;
	self->wdfd = bt_open(O_RDONLY);
	ASSERT_LE(0, self->wdfd);
	ASSERT_EQ(0, bt_watchdog(self->wdfd, BELUGA_WATCHDOG_REGISTER, DL_W_MS,
				 NULL));
	self->rfd = bt_open(O_RDWR);
	ASSERT_LE(0, self->rfd);
	ASSERT_EQ(0, bt_alloc(self->rfd, 1, blk));
	ASSERT_EQ(0, bt_device_range(self->rfd, self->efd, *blk, DL_BS, NULL));
	p = dl_map(self, 1, self->rfd, *blk, DL_BS);
	memset(p, DL_PATTERN, BT_PAGE);
	/* the devices' pin */
	r = dl_ring_pin(p, BT_PAGE, &self->ring, &e);
	kind = "an io_uring fixed buffer";
	if (r == -EOPNOTSUPP || e) {
		TH_LOG("io_uring fixed buffer: %s; an AF_XDP umem instead",
		       strerror(e ? e : -r));
		r = bt_xdp_umem_pin(p, BT_PAGE, &self->xsk);
		kind = "an AF_XDP umem";
		if (r == -EAFNOSUPPORT || r == -ENOPROTOOPT)
			SKIP(return false, "neither an io_uring fixed buffer on "
			     "this mapping nor AF_XDP (%s)", strerror(-r));
	}
	ASSERT_EQ(0, r) TH_LOG("%s on the range: %s", kind, strerror(-r));
	ASSERT_EQ(0, dl_self(self->c.fd, me0));
	EXPECT_TRUE(me0->flags & BELUGA_HOST_DEVICE_PINS);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY before the stall: %s",
						  dl_answer(r));

	/* the stall: the eventfd fires at the fence, half a lease on */
	t0 = bt_now_s();
	ASSERT_EQ(0, bt_mh_stall(true, why, sizeof(why))) TH_LOG("%s", why);
	r = dl_eventfd_wait(self->efd, 10 * lease, &cnt);
	t_sig = bt_now_s() - t0;
	ASSERT_EQ(1, r) TH_LOG("the range's eventfd, %u ms after the stall: %s",
			       10 * lease, r ? strerror(-r) : "not signalled");
	EXPECT_LE(1, cnt);
	TH_LOG("eventfd signalled %.2f s after the stall began (lease %u ms), "
	       "with %s held", t_sig, lease, kind);
	/* the fence comes half a lease on, seen at the next tick */
	EXPECT_GE(2.0 * lease / 1000.0, t_sig)
		TH_LOG("signalled later than a lease after the fence was due");
	return true;
}

#define dl_fence_pinned(self, blk, me0) \
	__dl_fence_pinned(_metadata, self, blk, me0)

/*
 * The devices let go (the pin, the mapping, then the range's file): FEED
 * (an AF_XDP umem goes asynchronously), and the host rejoins. 0, or the
 * LOOKUP's error 30 s on.
 */
static int __dl_let_go(struct __test_metadata *_metadata,
		       FIXTURE_DATA(shared) *self)
{
	struct beluga_watchdog wd;
	unsigned int t;
	double t0;
	int r = 0;

	if (self->ring >= 0) {
		EXPECT_EQ(0, dl_ring_unpin(self->ring));
		dl_close(&self->ring);
	}
	dl_close(&self->xsk);
	dl_unmap(self, 1);
	dl_close(&self->rfd);
	t0 = bt_now_s();
	for (t = 0; t <= 10000; t += 50) {
		r = dl_query(self->wdfd, &wd);
		if (r == BELUGA_WATCHDOG_FEED)
			break;
		dl_msleep(50);
	}
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY 10 s after the range's "
						  "file closed: %s", dl_answer(r));
	EXPECT_EQ(0, wd.device_ranges);
	TH_LOG("FEED %.2f s after the range's file closed", bt_now_s() - t0);
	r = dl_wait_lookup(0, 30000);
	TH_LOG("rejoined %.2f s after the range's file closed: %s",
	       bt_now_s() - t0, r ? strerror(-r) : "yes");
	return r;
}

#define dl_let_go(self) __dl_let_go(_metadata, self)

/*
 * (d) The fence with a pinned range: the eventfd fires within about a
 * lease of the stall; the watchdog is told HOLD, and the host stays out of
 * the pool, while the pin or the range is held; once both are gone, FEED,
 * and the host rejoins with a new incarnation and no device lease.
 */
TEST_F_TIMEOUT(shared, fence_holds_until_devices_let_go, 180)
{
	unsigned int lease = self->lease_ms, hold_ms, t;
	struct beluga_watchdog wd;
	struct beluga_host me, me0;
	uint64_t blk;
	char why[160];
	int r, fd;

	if (!dl_fence_pinned(self, &blk, &me0))
		return;
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_HOLD, r) TH_LOG("QUERY, fenced with the pin "
						  "held: %s", dl_answer(r));
	EXPECT_EQ(1, wd.device_ranges);
	/* fenced: block commands and new ranges refused at once */
	r = dl_wait_lookup(-ESTALE, 0);
	EXPECT_EQ(-ESTALE, r) TH_LOG("LOOKUP of a new file, fenced: %s",
				     strerror(-r));
	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	r = bt_device_range(fd, -1, blk, DL_BS, NULL);
	EXPECT_EQ(-ESTALE, r) TH_LOG("DEVICE_RANGE of a new file, fenced: %s",
				     strerror(-r));
	close(fd);

	/*
	 * The heartbeat runs again, but the pin is held: no rejoin for
	 * longer than a rejoin takes (the old record's device lease, lease +
	 * W + lease / 2, and a second more), and the watchdog is told HOLD.
	 */
	ASSERT_EQ(0, bt_mh_stall(false, why, sizeof(why))) TH_LOG("%s", why);
	hold_ms = lease + DL_W_MS + lease / 2 + 1000;
	for (t = 0; t <= hold_ms; t += 250) {
		r = dl_query(self->wdfd, NULL);
		if (r != BELUGA_WATCHDOG_HOLD)
			break;
		r = dl_wait_lookup(-ESTALE, 0);
		if (r != -ESTALE)
			break;
		dl_msleep(250);
	}
	EXPECT_GT(t, hold_ms) TH_LOG("%u ms after the heartbeat resumed, with "
				     "the pin held: %s", t, r < 0 ?
				     strerror(-r) : dl_answer(r));
	if (!dl_self(self->c.fd, &me))
		TH_LOG("HOSTS while held: own record incarnation %u, flags 0x%x",
		       me.incarnation, me.flags);
	else
		TH_LOG("HOSTS while held: no own record");

	/* the devices let go: the pin, then the mapping; the range is open */
	if (self->ring >= 0) {
		EXPECT_EQ(0, dl_ring_unpin(self->ring));
		dl_close(&self->ring);
	}
	dl_close(&self->xsk);
	dl_unmap(self, 1);
	dl_msleep(lease / 2);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_HOLD, r) TH_LOG("QUERY, unpinned but the "
						  "range's file open: %s",
						  dl_answer(r));
	EXPECT_EQ(1, wd.device_ranges);
	EXPECT_EQ(-ESTALE, dl_wait_lookup(-ESTALE, 0));

	/* the file closes: FEED, then the rejoin */
	r = dl_let_go(self);
	ASSERT_EQ(0, r) TH_LOG("LOOKUP of a new file 30 s after the devices "
			       "let go: %s", strerror(-r));
	ASSERT_EQ(0, dl_self(self->c.fd, &me));
	EXPECT_LT(me0.incarnation, me.incarnation);
	EXPECT_EQ(0, me.flags & BELUGA_HOST_DEVICE_PINS)
		TH_LOG("rejoined with the device lease (flags 0x%x)", me.flags);
	EXPECT_EQ(0, me.device_fence_ms);
	EXPECT_TRUE(me.flags & BELUGA_HOST_LEASE_AWARE);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY after the rejoin: %s",
						  dl_answer(r));
	/* a new file declares again, after the rejoin */
	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	r = bt_device_range(fd, -1, self->a.first_offset, DL_BS, NULL);
	EXPECT_EQ(0, r) TH_LOG("DEVICE_RANGE after the rejoin: %s", strerror(-r));
	close(fd);
}

/*
 * While the devices of a fenced host still pin the pool, DETACH attempts
 * (an operator's, refused: the region is mapped and pinned) must not turn
 * HOLD into FEED: each FEED lets the daemon pet the watchdog for another
 * W, so a retried DETACH would keep the host from its reset while its
 * devices write into blocks the other hosts reuse.
 */
TEST_F_TIMEOUT(shared, hold_not_fed_by_detach_attempts, 180)
{
	unsigned int feeds = 0, holds = 0, other = 0;
	struct beluga_host me0;
	char why[160];
	uint64_t blk;
	double end;
	pid_t pid;
	int r;

	if (!dl_fence_pinned(self, &blk, &me0))
		return;
	ASSERT_EQ(0, bt_mh_stall(false, why, sizeof(why))) TH_LOG("%s", why);
	r = dl_query(self->wdfd, NULL);
	ASSERT_EQ(BELUGA_WATCHDOG_HOLD, r) TH_LOG("QUERY, fenced with the pin "
						  "held: %s", dl_answer(r));
	pid = bt_fork(&self->c);
	if (pid == 0) {
		double until = bt_now_s() + 2.0;
		int f = bt_open(O_RDONLY);

		CHILD_CHECK(f >= 0);
		while (bt_now_s() < until) {
			r = bt_detach(f, self->a.region_id, 0, NULL);
			CHILD_CHECK(r == -EBUSY);
		}
		_exit(0);
	}
	ASSERT_LE(0, pid);
	end = bt_now_s() + 2.0;
	while (bt_now_s() < end) {
		r = dl_query(self->wdfd, NULL);
		if (r == BELUGA_WATCHDOG_FEED)
			feeds++;
		else if (r == BELUGA_WATCHDOG_HOLD)
			holds++;
		else
			other++;
	}
	EXPECT_EQ(0, bt_wait(&self->c, pid))
		TH_LOG("a DETACH of the held pool did not fail with EBUSY");
	TH_LOG("QUERY while DETACH was retried for 2 s: %u HOLD, %u FEED, "
	       "%u errors", holds, feeds, other);
	EXPECT_EQ(0, feeds) TH_LOG("FEED while the devices still pin the pool "
				   "of a fenced host");
	EXPECT_EQ(0, other);
	EXPECT_EQ(0, dl_let_go(self));
}

/*
 * (e) No device range: the watchdog is fed through the fence (nothing
 * outside the host can still reach the pool once its mappings are zapped).
 */
TEST_F_TIMEOUT(shared, fence_without_range_feeds, 120)
{
	unsigned int lease = self->lease_ms, t;
	struct beluga_watchdog wd;
	struct beluga_host me;
	uint64_t blk;
	char why[160];
	uint8_t *p;
	int r;

	if (bt_mh_stall(false, why, sizeof(why)))
		SKIP(return, "%s", why);
	if (!dl_attach(self, 0))
		return;
	self->wdfd = bt_open(O_RDONLY);
	ASSERT_LE(0, self->wdfd);
	ASSERT_EQ(0, bt_watchdog(self->wdfd, BELUGA_WATCHDOG_REGISTER, DL_W_MS,
				 NULL));
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &blk));
	p = dl_map(self, 0, self->c.fd, blk, DL_BS);
	memset(p, DL_PATTERN, BT_PAGE);
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r);
	EXPECT_EQ(0, wd.device_ranges);

	ASSERT_EQ(0, bt_mh_stall(true, why, sizeof(why))) TH_LOG("%s", why);
	for (t = 0; t <= 10 * lease; t += 100) {
		r = bt_alloc(self->c.fd, 1, &blk);
		if (r == -ESTALE)
			break;
		if (!r)
			bt_free(self->c.fd, 1, &blk);
		dl_msleep(100);
	}
	ASSERT_EQ(-ESTALE, r) TH_LOG("no fence %u ms after the stall: %s",
				     10 * lease, strerror(-r));
	/*
	 * Stalled and fenced, nothing to wait for: FEED, within a moment
	 * (the zap of the mappings follows the fence), then for a lease.
	 */
	for (t = 0; t <= 1000; t += 50) {
		r = dl_query(self->wdfd, &wd);
		if (r == BELUGA_WATCHDOG_FEED)
			break;
		dl_msleep(50);
	}
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY 1 s into the fence: %s",
						  dl_answer(r));
	for (t = 0; t <= lease; t += 100) {
		r = dl_query(self->wdfd, &wd);
		EXPECT_EQ(BELUGA_WATCHDOG_FEED, r) TH_LOG("QUERY %u ms into the "
							  "fence: %s", t,
							  dl_answer(r));
		if (r != BELUGA_WATCHDOG_FEED)
			break;
		dl_msleep(100);
	}
	ASSERT_EQ(0, bt_mh_stall(false, why, sizeof(why))) TH_LOG("%s", why);
	r = dl_wait_lookup(0, 30000);
	EXPECT_EQ(0, r) TH_LOG("no rejoin: %s", strerror(-r));
	r = dl_query(self->wdfd, &wd);
	EXPECT_EQ(BELUGA_WATCHDOG_FEED, r);
	ASSERT_EQ(0, dl_self(self->c.fd, &me));
	EXPECT_EQ(0, me.flags & BELUGA_HOST_DEVICE_PINS);
	dl_unmap(self, 0);
}

TEST_HARNESS_MAIN
