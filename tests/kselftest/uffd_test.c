// SPDX-License-Identifier: GPL-2.0
/*
 * Block commands whose user buffers stall, made with userfaultfd: a page
 * registered for missing-page faults and not served keeps the kernel's
 * copy from or to it waiting for as long as the test likes.
 *   - A LOOKUP stalled reading its keys holds up nothing but itself: a
 *     shared ATTACH onto the same pool (refused, -EBUSY) and the DETACH of
 *     another region complete meanwhile (the copies run outside mh_rwsem
 *     and every global mutex). Then the fault is served and the LOOKUP
 *     finishes with the keys it was given.
 *   - ALLOC and LOOKUP+PIN whose results cannot be written (-EFAULT) give
 *     back what they took item by item, also when another thread of the
 *     same file freed or released some of it while the copy stalled.
 * The only waits are bounded polls for something to happen (a hang
 * guard), never a timing condition.
 */
#include "beluga_test.h"

#include <poll.h>
#include <pthread.h>
#include <linux/userfaultfd.h>

/* How long an operation that must not be blocked may take: a hang guard. */
#define UF_GUARD_MS	30000

FIXTURE(uffd) {
	struct bt_ctx c;
	int uffd;
	char *page;		/* registered, never populated until served */
};

FIXTURE_SETUP(uffd)
{
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;

	self->uffd = -1;
	self->page = MAP_FAILED;
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (self->uffd < 0)
		SKIP(return, "userfaultfd: %s", strerror(errno));
	ASSERT_EQ(0, ioctl(self->uffd, UFFDIO_API, &api))
		TH_LOG("UFFDIO_API: %s", strerror(errno));
	self->page = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->page);
	memset(&reg, 0, sizeof(reg));
	reg.range.start = (uintptr_t)self->page;
	reg.range.len = BT_PAGE;
	reg.mode = UFFDIO_REGISTER_MODE_MISSING;
	ASSERT_EQ(0, ioctl(self->uffd, UFFDIO_REGISTER, &reg))
		TH_LOG("UFFDIO_REGISTER: %s", strerror(errno));
}

FIXTURE_TEARDOWN(uffd)
{
	if (self->uffd >= 0)
		close(self->uffd);
	if (self->page != MAP_FAILED)
		munmap(self->page, BT_PAGE);
	bt_teardown(&self->c);
}

/* Wait for the kernel to fault on the page: the copy is stalled now. */
static int uf_wait_fault(int uffd)
{
	struct pollfd p = { .fd = uffd, .events = POLLIN };
	struct uffd_msg msg;
	int r = poll(&p, 1, UF_GUARD_MS);

	if (r <= 0)
		return r ? -errno : -ETIMEDOUT;
	if (read(uffd, &msg, sizeof(msg)) != sizeof(msg))
		return -EIO;
	return msg.event == UFFD_EVENT_PAGEFAULT ? 0 : -EPROTO;
}

/* Serve the fault with @src's page. */
static int uf_serve(int uffd, void *page, const void *src)
{
	struct uffdio_copy cp = {
		.dst = (uintptr_t)page,
		.src = (uintptr_t)src,
		.len = BT_PAGE,
	};

	return ioctl(uffd, UFFDIO_COPY, &cp) ? -errno : 0;
}

/*
 * Make the stalled copy fail: the page goes away, then the registration
 * (closing the userfaultfd wakes the waiter, which finds no mapping).
 */
static void uf_fail(int *uffd, char **page)
{
	munmap(*page, BT_PAGE);
	*page = MAP_FAILED;
	close(*uffd);
	*uffd = -1;
}

/* One ioctl on a thread, and whether it finished. */
struct uf_call {
	pthread_t thread;
	int fd;
	unsigned long cmd;
	void *arg;
	int ret;
	volatile int done;
};

static void *uf_call_thread(void *p)
{
	struct uf_call *c = p;

	c->ret = bt_ioctl(c->fd, c->cmd, c->arg);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int uf_start(struct uf_call *c, int fd, unsigned long cmd, void *arg)
{
	c->fd = fd;
	c->cmd = cmd;
	c->arg = arg;
	c->ret = 0;
	c->done = 0;
	return pthread_create(&c->thread, NULL, uf_call_thread, c);
}

/* Poll for the call to finish, for at most @ms: true when it did. */
static bool uf_finished(struct uf_call *c, int ms)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	int waited;

	for (waited = 0; waited < ms; waited += 10) {
		if (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE))
			return true;
		nanosleep(&ts, NULL);
	}
	return __atomic_load_n(&c->done, __ATOMIC_ACQUIRE);
}

/* A second region of the fixture's backend, to DETACH while stalled. */
static int uf_attach_second(struct bt_ctx *c, struct beluga_attach *a)
{
	int r = bt_attach_req(a, c->backend, 0, BT_REGION_LEN, BT_REGION_LEN,
			      BT_BLOCK_SIZE, c->backend == BELUGA_BACKEND_NODE ?
			      "bt-node1" : "bt-dax-second");

	return r ? r : bt_attach(c->fd, a);
}

/*
 * A read-only opener's LOOKUP sleeps in the copy of its keys. Before the
 * fix it held mh_rwsem (read) meanwhile: a shared ATTACH onto the pool
 * waited for the write side while holding beluga_claim_mutex, and every
 * ATTACH and DETACH of every pool queued behind it.
 */
TEST_F_TIMEOUT(uffd, stalled_keys_block_no_admin, 120)
{
	struct uf_call look, admin, detach;
	struct beluga_attach second, sh;
	struct beluga_lookup lk;
	struct beluga_detach dt;
	uint64_t ns = bt_ns(5), o, got = 0;
	struct beluga_key key = bt_key(ns, 1), *keys;
	bool admin_done, detach_done;
	int32_t res;
	int ro, r;

	/* the key's block in region 0, then a second region, idle */
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	ASSERT_EQ(0, bt_publish1(self->c.fd, ns, o, key, &res));
	ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	r = uf_attach_second(&self->c, &second);
	if (r == -ERANGE)
		SKIP(return, "the dax device has no room for a second region");
	ASSERT_EQ(0, r) TH_LOG("second region: %s", strerror(-r));

	ro = bt_open(O_RDONLY);
	ASSERT_LE(0, ro);
	memset(&lk, 0, sizeof(lk));
	lk.size = sizeof(lk);
	lk.ns = ns;
	lk.count = 1;
	lk.keys = (uintptr_t)self->page;
	lk.offsets = (uintptr_t)&got;
	lk.flags = BELUGA_LOOKUP_PIN;
	ASSERT_EQ(0, uf_start(&look, ro, BELUGA_IOC_LOOKUP, &lk));
	r = uf_wait_fault(self->uffd);
	ASSERT_EQ(0, r) TH_LOG("the LOOKUP never faulted on its keys: %s",
			       strerror(-r));

	/* a shared ATTACH onto the pool: refused, but it must get to say so */
	memset(&sh, 0, sizeof(sh));
	sh.size = sizeof(sh);
	sh.flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID;
	sh.backend = BELUGA_BACKEND_DAX;
	sh.node = -1;
	sh.phys_start = 1ULL << 40;	/* refused before any claim */
	sh.length = 4 * BT_MIB;
	snprintf(sh.name, sizeof(sh.name), "bt-uffd-shared");
	ASSERT_EQ(0, uf_start(&admin, self->c.fd, BELUGA_IOC_ATTACH, &sh));
	admin_done = uf_finished(&admin, UF_GUARD_MS);
	/* and a DETACH of the other region, which needs beluga_claim_mutex */
	memset(&dt, 0, sizeof(dt));
	dt.size = sizeof(dt);
	dt.region_id = second.region_id;
	ASSERT_EQ(0, uf_start(&detach, self->c.fd, BELUGA_IOC_DETACH, &dt));
	detach_done = uf_finished(&detach, UF_GUARD_MS);

	/* now let the LOOKUP read its key, whatever happened above */
	keys = aligned_alloc(BT_PAGE, BT_PAGE);
	ASSERT_NE(NULL, keys);
	memset(keys, 0, BT_PAGE);
	keys[0] = key;
	ASSERT_EQ(0, uf_serve(self->uffd, self->page, keys));
	ASSERT_TRUE(uf_finished(&look, UF_GUARD_MS))
		TH_LOG("the LOOKUP did not finish after its fault was served");
	pthread_join(look.thread, NULL);
	EXPECT_EQ(0, look.ret) TH_LOG("LOOKUP: %s", strerror(-look.ret));
	EXPECT_EQ(1, lk.hits);
	EXPECT_EQ(o, got);
	EXPECT_TRUE(uf_finished(&admin, UF_GUARD_MS));
	EXPECT_TRUE(uf_finished(&detach, UF_GUARD_MS));
	pthread_join(admin.thread, NULL);
	pthread_join(detach.thread, NULL);

	EXPECT_TRUE(admin_done) TH_LOG("a shared ATTACH onto the pool waited "
				       "for a LOOKUP stalled in its key copy");
	EXPECT_TRUE(detach_done) TH_LOG("DETACH of another region waited for "
					"a LOOKUP stalled in its key copy");
	EXPECT_EQ(-EBUSY, admin.ret) TH_LOG("shared ATTACH next to a region: "
					    "%s", strerror(-admin.ret));
	EXPECT_EQ(0, detach.ret) TH_LOG("DETACH: %s", strerror(-detach.ret));
	if (look.ret == 0 && lk.hits == 1)
		EXPECT_EQ(0, bt_release(ro, 1, &got));
	close(ro);
	free(keys);
}

/*
 * ALLOC of every block, its offsets array on the stalled page. Meanwhile
 * another thread of the same file frees one of the blocks (it knows them
 * all: the file holds the whole region), then the copy fails. The undo
 * must give back the other blocks; before the fix it failed as a whole
 * and they stayed allocated until close().
 */
TEST_F_TIMEOUT(uffd, alloc_undo_after_partial_free, 120)
{
	uint64_t n = self->c.att[0].nr_blocks, first = self->c.att[0].first_offset;
	struct beluga_stats st;
	struct beluga_alloc al;
	struct uf_call call;
	int r;

	ASSERT_GE(BT_PAGE / sizeof(uint64_t), n);
	memset(&al, 0, sizeof(al));
	al.size = sizeof(al);
	al.count = n;
	al.offsets = (uintptr_t)self->page;
	ASSERT_EQ(0, uf_start(&call, self->c.fd, BELUGA_IOC_ALLOC, &al));
	r = uf_wait_fault(self->uffd);
	ASSERT_EQ(0, r) TH_LOG("ALLOC never faulted on its offsets: %s",
			       strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	ASSERT_EQ(n, st.allocated_blocks);
	r = bt_free(self->c.fd, 1, &first);
	EXPECT_EQ(0, r) TH_LOG("FREE of a block the stalled ALLOC took: %s",
			       strerror(-r));

	uf_fail(&self->uffd, &self->page);
	ASSERT_TRUE(uf_finished(&call, UF_GUARD_MS));
	pthread_join(call.thread, NULL);
	EXPECT_EQ(-EFAULT, call.ret) TH_LOG("ALLOC into a vanished page: %s",
					    strerror(-call.ret));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(0, st.allocated_blocks) TH_LOG("%llu blocks stayed allocated "
						 "after the -EFAULT undo",
						 (unsigned long long)st.allocated_blocks);
	EXPECT_EQ(n, st.free_blocks);
}

/*
 * LOOKUP+PIN of two keys, its offsets array on the stalled page. Another
 * thread of the file releases one of the two pins (it published the
 * blocks, so it knows them), then the copy fails: the other pin must go
 * too.
 */
TEST_F_TIMEOUT(uffd, lookup_pin_undo_after_partial_release, 120)
{
	uint64_t ns = bt_ns(9), o[2];
	struct beluga_key k[2] = { bt_key(ns, 1), bt_key(ns, 2) };
	struct beluga_stats st;
	struct beluga_lookup lk;
	struct uf_call call;
	int32_t res;
	int r, i;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o));
	for (i = 0; i < 2; i++) {
		ASSERT_EQ(0, bt_publish1(self->c.fd, ns, o[i], k[i], &res));
		ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	}
	memset(&lk, 0, sizeof(lk));
	lk.size = sizeof(lk);
	lk.flags = BELUGA_LOOKUP_PIN;
	lk.ns = ns;
	lk.count = 2;
	lk.keys = (uintptr_t)k;
	lk.offsets = (uintptr_t)self->page;
	ASSERT_EQ(0, uf_start(&call, self->c.fd, BELUGA_IOC_LOOKUP, &lk));
	r = uf_wait_fault(self->uffd);
	ASSERT_EQ(0, r) TH_LOG("LOOKUP never faulted on its offsets: %s",
			       strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	ASSERT_EQ(2, st.pins);
	r = bt_release(self->c.fd, 1, &o[1]);
	EXPECT_EQ(0, r) TH_LOG("RELEASE of a pin the stalled LOOKUP took: %s",
			       strerror(-r));

	uf_fail(&self->uffd, &self->page);
	ASSERT_TRUE(uf_finished(&call, UF_GUARD_MS));
	pthread_join(call.thread, NULL);
	EXPECT_EQ(-EFAULT, call.ret) TH_LOG("LOOKUP into a vanished page: %s",
					    strerror(-call.ret));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(0, st.pins) TH_LOG("%llu pins stayed after the -EFAULT undo",
				     (unsigned long long)st.pins);
	EXPECT_EQ(0, st.pinned_blocks);
}

TEST_HARNESS_MAIN
