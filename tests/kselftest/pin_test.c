// SPDX-License-Identifier: GPL-2.0
/*
 * FOLL_LONGTERM pinning of pool mappings, the property GPU and RDMA
 * registration need, proven without a GPU:
 *   - io_uring fixed buffers on pool blocks, with READ_FIXED from a pipe and
 *     WRITE_FIXED to a memfd going through them (Linux >= 6.5: older
 *     io_uring refuses every file-backed buffer that is not shmem or
 *     hugetlbfs, device-dax included, and the test SKIPs with that reason);
 *   - AF_XDP umem registration (pin_user_pages(FOLL_LONGTERM)), on every
 *     kernel.
 * While such pins outlive the mapping, DETACH must be refused (EBUSY); once
 * they are dropped (asynchronously), DETACH succeeds. A device-dax range
 * pinned through /dev/daxX.Y before ATTACH is refused (EBUSY) likewise.
 */
#include "beluga_test.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/if_xdp.h>
#include <liburing.h>


FIXTURE(pin) {
	struct bt_ctx c;
};

FIXTURE_VARIANT(pin) {
	int backend;
};

FIXTURE_VARIANT_ADD(pin, node) {
	.backend = BELUGA_BACKEND_NODE,
};

FIXTURE_VARIANT_ADD(pin, dax) {
	.backend = BELUGA_BACKEND_DAX,
};

FIXTURE_SETUP(pin)
{
	if (!bt_setup(&self->c, variant->backend, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
}

FIXTURE_TEARDOWN(pin)
{
	bt_teardown(&self->c);
}

/* Run one SQE and return its CQE result. */
static int ring_run(struct io_uring *ring)
{
	struct io_uring_cqe *cqe;
	int r;

	r = io_uring_submit(ring);
	if (r != 1)
		return r < 0 ? r : -EIO;
	r = io_uring_wait_cqe(ring, &cqe);
	if (r)
		return r;
	r = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return r;
}

static int region_mappings(struct bt_ctx *c)
{
	struct beluga_region_info ri;
	int r = bt_region_info(c->fd, c->att[0].region_id, &ri);

	return r ? r : (int)ri.mappings;
}

TEST_F(pin, io_uring_fixed_buffers)
{
	const size_t len = 4096;
	uint32_t id = self->c.att[0].region_id;
	char *map = bt_map(&self->c), *buf;
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	struct iovec iov[2];
	uint64_t o[2];
	int pfd[2], mfd, r, kv = bt_kernel_version();

	r = io_uring_queue_init(8, &ring, 0);
	if (r == -ENOSYS || r == -EPERM)
		SKIP(return, "io_uring unavailable: %s", strerror(-r));
	ASSERT_EQ(0, r) TH_LOG("io_uring_queue_init: %s", strerror(-r));

	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o));
	iov[0].iov_base = map + o[0];
	iov[0].iov_len = BT_BLOCK_SIZE;
	iov[1].iov_base = map + o[1];
	iov[1].iov_len = BT_BLOCK_SIZE;
	r = io_uring_register_buffers(&ring, iov, 2);
	if (r == -EOPNOTSUPP && kv && kv < 605) {
		io_uring_queue_exit(&ring);
		SKIP(return, "Linux %d.%d io_uring refuses fixed buffers on any "
		     "file-backed mapping but shmem/hugetlbfs (EOPNOTSUPP); "
		     "the AF_XDP test proves FOLL_LONGTERM pinning here",
		     kv / 100, kv % 100);
	}
	ASSERT_EQ(0, r) TH_LOG("io_uring_register_buffers on pool blocks: %s",
			       strerror(-r));

	/* pipe -> block 0 through READ_FIXED */
	ASSERT_EQ(0, pipe(pfd));
	buf = malloc(len);
	ASSERT_NE(NULL, buf);
	bt_fill(buf, len, 0x1111);
	ASSERT_EQ((ssize_t)len, write(pfd[1], buf, len));
	sqe = io_uring_get_sqe(&ring);
	ASSERT_NE(NULL, sqe);
	io_uring_prep_read_fixed(sqe, pfd[0], map + o[0], len, 0, 0);
	r = ring_run(&ring);
	ASSERT_EQ((int)len, r) TH_LOG("READ_FIXED into a pool block: %s",
				      r < 0 ? strerror(-r) : "short");
	EXPECT_EQ(-1, bt_check(map + o[0], len, 0x1111));

	/* block 1 -> memfd through WRITE_FIXED */
	mfd = memfd_create("beluga-pin", MFD_CLOEXEC);
	ASSERT_LE(0, mfd);
	bt_fill(map + o[1], len, 0x2222);
	sqe = io_uring_get_sqe(&ring);
	ASSERT_NE(NULL, sqe);
	io_uring_prep_write_fixed(sqe, mfd, map + o[1], len, 0, 1);
	r = ring_run(&ring);
	ASSERT_EQ((int)len, r) TH_LOG("WRITE_FIXED from a pool block: %s",
				      r < 0 ? strerror(-r) : "short");
	memset(buf, 0, len);
	ASSERT_EQ((ssize_t)len, pread(mfd, buf, len, 0));
	EXPECT_EQ(-1, bt_check(buf, len, 0x2222));

	/* pinned pages outlive the mapping: DETACH must wait for them */
	ASSERT_EQ(0, bt_free(self->c.fd, 2, o));
	bt_unmap(&self->c);
	EXPECT_EQ(0, region_mappings(&self->c));
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("DETACH with io_uring buffers registered "
				    "after munmap: %s", strerror(-r));

	ASSERT_EQ(0, io_uring_unregister_buffers(&ring));
	io_uring_queue_exit(&ring);
	r = bt_detach_retry(self->c.fd, id, BELUGA_DETACH_EVICT, NULL, 10000);
	EXPECT_EQ(0, r) TH_LOG("DETACH after the buffers were unregistered: %s",
			       strerror(-r));
	close(mfd);
	close(pfd[0]);
	close(pfd[1]);
	free(buf);
}

TEST_F(pin, af_xdp_umem)
{
	uint32_t id = self->c.att[0].region_id;
	char *map = bt_map(&self->c);
	int s, r;

	/* the whole pool, every page of it pinned */
	r = bt_xdp_umem_pin(map, self->c.map_len, &s);
	if (r == -EAFNOSUPPORT || r == -ENOPROTOOPT)
		SKIP(return, "AF_XDP unavailable: %s", strerror(-r));
	ASSERT_EQ(0, r) TH_LOG("XDP_UMEM_REG over the pool mapping "
			       "(pin_user_pages FOLL_LONGTERM): %s", strerror(-r));
	/* the mapping still works while pinned */
	bt_fill(map, 128, 3);
	EXPECT_EQ(-1, bt_check(map, 128, 3));

	bt_unmap(&self->c);
	EXPECT_EQ(0, region_mappings(&self->c));
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("DETACH with the pool pinned by an AF_XDP "
				    "umem after munmap: %s", strerror(-r));
	close(s);
	/* the umem is released asynchronously after close() */
	r = bt_detach_retry(self->c.fd, id, BELUGA_DETACH_EVICT, NULL, 10000);
	EXPECT_EQ(0, r) TH_LOG("DETACH after the umem socket closed: %s",
			       strerror(-r));
}

/* A pin on one block of the region is enough to keep it. */
TEST_F(pin, af_xdp_single_block)
{
	uint32_t id = self->c.att[0].region_id;
	char *map = bt_map(&self->c);
	uint64_t o;
	int s, r;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	r = bt_xdp_umem_pin(map + o, BT_BLOCK_SIZE, &s);
	if (r == -EAFNOSUPPORT || r == -ENOPROTOOPT)
		SKIP(return, "AF_XDP unavailable: %s", strerror(-r));
	ASSERT_EQ(0, r) TH_LOG("XDP_UMEM_REG of one block: %s", strerror(-r));
	ASSERT_EQ(0, bt_free(self->c.fd, 1, &o));
	bt_unmap(&self->c);
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("DETACH with one block pinned: %s",
				    strerror(-r));
	close(s);
	r = bt_detach_retry(self->c.fd, id, BELUGA_DETACH_EVICT, NULL, 10000);
	EXPECT_EQ(0, r) TH_LOG("DETACH after unpin: %s", strerror(-r));
}

/*
 * A page of a device-dax range pinned through /dev/daxX.Y before ATTACH
 * (a leftover RDMA registration of an earlier user): the pin would outlive
 * any later DETACH, so ATTACH refuses the range (-EBUSY) until it is gone.
 * Before the fix ATTACH took the pinned refcount as the idle baseline.
 */
TEST(attach_refuses_pinned_dax)
{
	char names[BT_MAX_DAX][64], path[96], why[160];
	struct beluga_attach a;
	int dfd, fd, s, r;
	void *p;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, BT_REGION_LEN, why,
			   sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_reset_pool());
	ASSERT_LT(0, bt_env_dax(names));
	snprintf(path, sizeof(path), "/dev/%s", names[0]);
	dfd = open(path, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd) TH_LOG("open %s: %s", path, strerror(errno));
	p = mmap(NULL, BT_REGION_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0);
	if (p == MAP_FAILED && errno == EINVAL) {
		close(dfd);
		/* device_dax's check_vma() needs IS_DAX(), i.e. CONFIG_FS_DAX */
		SKIP(return, "mmap of %s: EINVAL (a kernel without "
		     "CONFIG_FS_DAX cannot map device-dax)", path);
	}
	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap %s: %s", path, strerror(errno));
	r = bt_xdp_umem_pin(p, BT_REGION_LEN, &s);
	if (r == -EAFNOSUPPORT || r == -ENOPROTOOPT) {
		munmap(p, BT_REGION_LEN);
		close(dfd);
		SKIP(return, "AF_XDP unavailable: %s", strerror(-r));
	}
	ASSERT_EQ(0, r) TH_LOG("XDP_UMEM_REG over %s: %s", path, strerror(-r));
	/* the pin outlives the mapping and the file, as an MR would */
	munmap(p, BT_REGION_LEN);
	close(dfd);

	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bt_attach_req(&a, BELUGA_BACKEND_DAX, 0, 0, BT_REGION_LEN,
				   BT_BLOCK_SIZE, "bt-prepinned"));
	r = bt_attach(fd, &a);
	EXPECT_EQ(-EBUSY, r) TH_LOG("ATTACH of a dax range pinned by an AF_XDP "
				    "umem: %s", strerror(-r));
	if (!r)
		bt_detach(fd, a.region_id, BELUGA_DETACH_EVICT, NULL);
	close(s);
	/* the umem goes asynchronously after close(): retry for ~10 s */
	for (int i = 0; i < 500; i++) {
		struct timespec ts = { 0, 20 * 1000 * 1000 };

		r = bt_attach(fd, &a);
		if (r != -EBUSY)
			break;
		nanosleep(&ts, NULL);
	}
	EXPECT_EQ(0, r) TH_LOG("ATTACH once the pin is gone: %s", strerror(-r));
	if (!r)
		EXPECT_EQ(0, bt_detach(fd, a.region_id, BELUGA_DETACH_EVICT,
				       NULL));
	close(fd);
}

TEST_HARNESS_MAIN
