// SPDX-License-Identifier: GPL-2.0
/*
 * The io_uring commands (uapi/linux/beluga.h, "io_uring commands"):
 * ALLOC, FREE, PUBLISH, LOOKUP and RELEASE as IORING_OP_URING_CMD.
 *
 *   - one scenario of every command, successes and per-item and whole-call
 *     errors, run through the ioctls and through a ring on equal states:
 *     the results, answers and pool changes are equal; through a plain
 *     ring, an SQPOLL ring, io_uring's workers (IOSQE_ASYNC), a 128-byte
 *     SQE ring, a registered file, and on a shared pool (whose commands
 *     io_uring must move to a worker: the -EAGAIN path);
 *   - batches: 64 LOOKUP+PIN in one submission, then 64 RELEASE;
 *   - ownership: the file owns the pins, not the ring; a ring and its file
 *     closed with pins and allocations outstanding leak nothing, also when
 *     the file was registered, and when a process dies with an SQPOLL ring;
 *   - the SQE's own errors, and their order: -ENOTTY, -EOPNOTSUPP, -EINVAL,
 *     then the ioctl's (-EBADF, -EFAULT for a NULL struct pointer).
 * Every error case of the ioctls is also run through the ring by
 * abi_ring_test (abi_test.c with BT_VIA_RING).
 */
#define BT_VIA_RING
#include "beluga_test.h"

/* The scenario's keys and blocks: one pass uses SC_BLOCKS blocks at most. */
#define SC_KEYS		3
#define SC_BLOCKS	4
#define SC_STEPS	16

/* What one pass of the scenario saw. */
struct sc_pass {
	int r[SC_STEPS];		/* each step's result */
	uint32_t hits[SC_STEPS];
	struct beluga_publish pub;	/* PUBLISH's answer */
	int32_t item_res[5];
	bool offsets_ok[SC_STEPS];	/* the answer's offsets were the right blocks */
	struct beluga_stats st0, st1;	/* around the pass */
	int steps;
};

/*
 * Every command, through bt_ioctl(): with bt_ring_via.off the ioctls, else
 * the ring the caller chose. Keys of namespace @ns only, so that two
 * passes in two namespaces start from equal states. @other is another
 * file of the pool, holding one block of its own (@foreign).
 */
static void sc_run(struct bt_ctx *c, uint64_t ns, uint64_t foreign,
		   struct sc_pass *p)
{
	struct beluga_key k[SC_KEYS + 1];
	struct beluga_publish_item it[5];
	uint64_t o[SC_BLOCKS], got[SC_KEYS + 1], two[2], bad = 12345;
	int n = 0, i;

	memset(p, 0, sizeof(*p));
	for (i = 0; i <= SC_KEYS; i++)
		k[i] = bt_key(ns, i + 1);
	bt_stats(c->fd, &p->st0);

	/* ALLOC: three blocks, answered in the array */
	memset(o, 0xff, sizeof(o));
	p->r[n] = bt_alloc(c->fd, 3, o);
	p->offsets_ok[n] = bt_is_block(c, o[0]) && bt_is_block(c, o[1]) &&
			   bt_is_block(c, o[2]);
	n++;
	/* PUBLISH: OK, OK, EXISTS, not a block, another file's block */
	memset(it, 0, sizeof(it));
	it[0] = (struct beluga_publish_item){ .offset = o[0], .key = k[0] };
	it[1] = (struct beluga_publish_item){ .offset = o[1], .key = k[1] };
	it[2] = (struct beluga_publish_item){ .offset = o[2], .key = k[0] };
	it[3] = (struct beluga_publish_item){ .offset = bad, .key = k[2] };
	it[4] = (struct beluga_publish_item){ .offset = foreign, .key = k[2] };
	for (i = 0; i < 5; i++)
		it[i].result = 0x7eadbeef;
	p->r[n++] = bt_publish(c->fd, ns, it, 5, &p->pub);
	for (i = 0; i < 5; i++)
		p->item_res[i] = it[i].result;
	/* LOOKUP count-only: the leading run of k0 k1 (k2 was refused) */
	p->r[n] = bt_lookup(c->fd, ns, k, SC_KEYS, NULL, 0, &p->hits[n]);
	n++;
	/* LOOKUP+PIN: two pins, on the published blocks */
	memset(got, 0, sizeof(got));
	p->r[n] = bt_lookup(c->fd, ns, k, SC_KEYS, got, BELUGA_LOOKUP_PIN,
			    &p->hits[n]);
	p->offsets_ok[n] = got[0] == o[0] && got[1] == o[1] && !got[2];
	n++;
	/* RELEASE: both pins, then one too many (nothing changes) */
	p->r[n++] = bt_release(c->fd, 2, got);
	p->r[n++] = bt_release(c->fd, 1, got);
	/* FREE: a published block, a duplicate, then a plain free */
	p->r[n++] = bt_free(c->fd, 1, &o[0]);
	p->r[n] = bt_alloc(c->fd, 1, &o[3]);
	p->offsets_ok[n] = bt_is_block(c, o[3]);
	n++;
	two[0] = two[1] = o[3];
	p->r[n++] = bt_free(c->fd, 2, two);
	p->r[n++] = bt_free(c->fd, 1, &o[3]);
	/* whole-call errors: the count, PIN without offsets, the pointer */
	p->r[n] = bt_lookup(c->fd, ns, k, 0, NULL, 0, &p->hits[n]);
	n++;
	p->r[n] = bt_lookup(c->fd, ns, k, BELUGA_MAX_BATCH + 1, NULL, 0,
			    &p->hits[n]);
	n++;
	p->r[n] = bt_lookup(c->fd, ns, k, 1, NULL, BELUGA_LOOKUP_PIN,
			    &p->hits[n]);
	n++;
	p->r[n++] = bt_alloc(c->fd, 1, NULL);
	p->r[n++] = bt_release(c->fd, 1, &foreign);
	p->steps = n;
	bt_stats(c->fd, &p->st1);
}

/* The two passes are equal: results, answers, and what changed. */
#define ASSERT_PASSES_EQ(a, b, what) do {				\
	int __i;							\
	ASSERT_EQ((a)->steps, (b)->steps);				\
	for (__i = 0; __i < (a)->steps; __i++) {			\
		EXPECT_EQ((a)->r[__i], (b)->r[__i])			\
			TH_LOG("%s: step %d: ioctl %s, ring %s", what,	\
			       __i, strerror(-(a)->r[__i]),		\
			       strerror(-(b)->r[__i]));			\
		EXPECT_EQ((a)->hits[__i], (b)->hits[__i])		\
			TH_LOG("%s: step %d: hits", what, __i);		\
		EXPECT_EQ((a)->offsets_ok[__i], (b)->offsets_ok[__i])	\
			TH_LOG("%s: step %d: offsets", what, __i);	\
	}								\
	for (__i = 0; __i < 5; __i++)					\
		EXPECT_EQ((a)->item_res[__i], (b)->item_res[__i])	\
			TH_LOG("%s: PUBLISH item %d", what, __i);	\
	EXPECT_EQ((a)->pub.published, (b)->pub.published);		\
	EXPECT_EQ((a)->pub.exists, (b)->pub.exists);			\
	EXPECT_EQ((a)->pub.failed, (b)->pub.failed);			\
	EXPECT_EQ((a)->st1.allocated_blocks - (a)->st0.allocated_blocks,\
		  (b)->st1.allocated_blocks - (b)->st0.allocated_blocks);\
	EXPECT_EQ((a)->st1.published_blocks - (a)->st0.published_blocks,\
		  (b)->st1.published_blocks - (b)->st0.published_blocks);\
	EXPECT_EQ((a)->st1.free_blocks - (a)->st0.free_blocks,		\
		  (b)->st1.free_blocks - (b)->st0.free_blocks);		\
	EXPECT_EQ((a)->st1.pins, (a)->st0.pins);			\
	EXPECT_EQ((b)->st1.pins, (b)->st0.pins);			\
} while (0)

/* What the ioctl pass must have seen, so that equal is also right. */
#define ASSERT_PASS_AS_DOCUMENTED(a) do {				\
	static const int __want[] = {					\
		0, 0, 0, 0, 0, -EINVAL, -EINVAL, 0, -EINVAL, 0,		\
		-EINVAL, -E2BIG, -EINVAL, -EFAULT, -EINVAL,		\
	};								\
	int __i;							\
	ASSERT_EQ(ARRAY_SIZE(__want), (a)->steps);			\
	for (__i = 0; __i < (a)->steps; __i++)				\
		EXPECT_EQ(__want[__i], (a)->r[__i])			\
			TH_LOG("ioctl step %d: %s", __i,		\
			       strerror(-(a)->r[__i]));			\
	EXPECT_TRUE((a)->offsets_ok[0]);				\
	EXPECT_EQ(2, (a)->hits[2]);					\
	EXPECT_EQ(2, (a)->hits[3]);					\
	EXPECT_TRUE((a)->offsets_ok[3]);				\
	EXPECT_EQ(BELUGA_PUBLISH_OK, (a)->item_res[0]);			\
	EXPECT_EQ(BELUGA_PUBLISH_OK, (a)->item_res[1]);			\
	EXPECT_EQ(BELUGA_PUBLISH_EXISTS, (a)->item_res[2]);		\
	EXPECT_GT(0, (a)->item_res[3]);					\
	EXPECT_GT(0, (a)->item_res[4]);					\
	EXPECT_EQ(2, (a)->pub.published);				\
	EXPECT_EQ(1, (a)->pub.exists);					\
	EXPECT_EQ(2, (a)->pub.failed);					\
} while (0)

FIXTURE(ring) {
	struct bt_ctx c;
	int other;		/* another file, holding @foreign */
	uint64_t foreign;
	struct io_uring ring;
	bool have_ring;
};

/* After the pool's setup: the other file, its block, and the ring. */
static void ring_setup_rest(struct __test_metadata *_metadata,
			    FIXTURE_DATA(ring) *self)
{
	int r;

	self->other = bt_open(O_RDWR);
	ASSERT_LE(0, self->other);
	bt_ring_via.off = true;
	ASSERT_EQ(0, bt_alloc(self->other, 1, &self->foreign));
	bt_ring_via.off = false;
	r = io_uring_queue_init(64, &self->ring, 0);
	if (r == -ENOSYS || r == -EPERM)
		SKIP(return, "io_uring is not available here: %s", strerror(-r));
	ASSERT_EQ(0, r) TH_LOG("io_uring_queue_init: %s", strerror(-r));
	self->have_ring = true;
}

static void ring_ctx_teardown(struct __test_metadata *_metadata,
			  FIXTURE_DATA(ring) *self)
{
	bt_ring_via = (struct bt_ring_via){ 0 };
	if (self->have_ring)
		io_uring_queue_exit(&self->ring);
	self->have_ring = false;
	if (self->other >= 0)
		close(self->other);
	self->other = -1;
	bt_teardown(&self->c);
}

FIXTURE_SETUP(ring)
{
	self->other = -1;
	self->have_ring = false;
	bt_ring_via = (struct bt_ring_via){ 0 };
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	ring_setup_rest(_metadata, self);
}

FIXTURE_TEARDOWN(ring)
{
	ring_ctx_teardown(_metadata, self);
}

/* The scenario through the ioctls, then through the ring as chosen. */
static void twin(struct __test_metadata *_metadata, FIXTURE_DATA(ring) *self,
		 struct io_uring *ring, uint8_t sqe_flags, const char *what)
{
	struct sc_pass by_ioctl, by_ring;

	bt_ring_via.off = true;
	sc_run(&self->c, bt_ns(1), self->foreign, &by_ioctl);
	ASSERT_PASS_AS_DOCUMENTED(&by_ioctl);
	bt_ring_via = (struct bt_ring_via){
		.ring = ring, .sqe_flags = sqe_flags,
	};
	sc_run(&self->c, bt_ns(2), self->foreign, &by_ring);
	bt_ring_via = (struct bt_ring_via){ 0 };
	ASSERT_PASSES_EQ(&by_ioctl, &by_ring, what);
}

TEST_F(ring, twin_plain)
{
	twin(_metadata, self, &self->ring, 0, "plain ring");
}

/* io_uring's workers: the commands run in a kernel thread, blocking. */
TEST_F(ring, twin_iowq)
{
	twin(_metadata, self, &self->ring, IOSQE_ASYNC, "IOSQE_ASYNC");
}

/* The twin through an SQPOLL ring of its own. */
static void twin_sqpoll(struct __test_metadata *_metadata,
			FIXTURE_DATA(ring) *self, const char *what)
{
	struct io_uring_params prm = {
		.flags = IORING_SETUP_SQPOLL,
		.sq_thread_idle = 200,
	};
	struct io_uring sq;
	int r;

	r = io_uring_queue_init_params(16, &sq, &prm);
	ASSERT_EQ(0, r) TH_LOG("SQPOLL ring: %s", strerror(-r));
	twin(_metadata, self, &sq, 0, what);
	io_uring_queue_exit(&sq);
}

/* The SQPOLL thread submits: no system call on the submitting side. */
TEST_F(ring, twin_sqpoll)
{
	twin_sqpoll(_metadata, self, "SQPOLL");
}

/* A 128-byte SQE: the command area's other 64 bytes are zero here. */
TEST_F(ring, twin_sqe128)
{
	struct io_uring sq;
	int r;

	r = io_uring_queue_init(16, &sq, IORING_SETUP_SQE128);
	ASSERT_EQ(0, r) TH_LOG("SQE128 ring: %s", strerror(-r));
	twin(_metadata, self, &sq, 0, "SQE128");
	io_uring_queue_exit(&sq);
}

/*
 * The file registered with the ring, at the index of its own number (the
 * other slots empty), so that the scenario's STATS ioctls and its ring
 * commands name it alike.
 */
TEST_F(ring, twin_registered_file)
{
	int fds[64], i;

	ASSERT_GT(64, self->c.fd);
	for (i = 0; i < 64; i++)
		fds[i] = i == self->c.fd ? self->c.fd : -1;
	ASSERT_EQ(0, io_uring_register_files(&self->ring, fds, 64));
	twin(_metadata, self, &self->ring, IOSQE_FIXED_FILE, "registered file");
	ASSERT_EQ(0, io_uring_unregister_files(&self->ring));
}

/* Many commands per submission, each completion its own. */
TEST_F(ring, batch_64_pins_then_64_releases)
{
	enum { N = 64, KEYS = 4 };
	static struct beluga_lookup lk[N];
	static struct beluga_blocks rel[N];
	static uint64_t got[N][KEYS];
	struct beluga_key k[KEYS];
	struct beluga_stats st;
	uint64_t ns = bt_ns(3), o[KEYS];
	int i, r, seen;

	bt_ring_via.off = true;
	ASSERT_EQ(0, bt_alloc(self->c.fd, KEYS, o));
	for (i = 0; i < KEYS; i++) {
		int32_t res;

		k[i] = bt_key(ns, i);
		ASSERT_EQ(0, bt_publish1(self->c.fd, ns, o[i], k[i], &res));
		ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	}
	for (i = 0; i < N; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);

		ASSERT_NE(NULL, sqe);
		lk[i] = (struct beluga_lookup){
			.size = sizeof(lk[i]), .flags = BELUGA_LOOKUP_PIN,
			.ns = ns, .count = KEYS, .keys = (uintptr_t)k,
			.offsets = (uintptr_t)got[i],
		};
		bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_LOOKUP, &lk[i]);
		sqe->user_data = i;
	}
	r = io_uring_submit_and_wait(&self->ring, N);
	ASSERT_EQ(N, r) TH_LOG("submit: %s", strerror(-r));
	for (seen = 0; seen < N; seen++) {
		struct io_uring_cqe *cqe;

		ASSERT_EQ(0, io_uring_wait_cqe(&self->ring, &cqe));
		EXPECT_EQ(0, cqe->res) TH_LOG("LOOKUP %llu: %s",
					      (unsigned long long)cqe->user_data,
					      strerror(-cqe->res));
		io_uring_cqe_seen(&self->ring, cqe);
	}
	for (i = 0; i < N; i++) {
		EXPECT_EQ(KEYS, lk[i].hits);
		EXPECT_EQ(0, memcmp(got[i], o, sizeof(o)));
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(N * KEYS, st.pins);
	EXPECT_EQ(KEYS, st.pinned_blocks);

	for (i = 0; i < N; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);

		ASSERT_NE(NULL, sqe);
		rel[i] = (struct beluga_blocks){
			.size = sizeof(rel[i]), .count = KEYS,
			.offsets = (uintptr_t)got[i],
		};
		bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_RELEASE, &rel[i]);
		sqe->user_data = i;
	}
	r = io_uring_submit_and_wait(&self->ring, N);
	ASSERT_EQ(N, r);
	for (seen = 0; seen < N; seen++) {
		struct io_uring_cqe *cqe;

		ASSERT_EQ(0, io_uring_wait_cqe(&self->ring, &cqe));
		EXPECT_EQ(0, cqe->res);
		io_uring_cqe_seen(&self->ring, cqe);
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(0, st.pins);
}

/* The pins belong to the file the command named, not to the ring. */
TEST_F(ring, pins_belong_to_the_file)
{
	struct beluga_key k = bt_key(bt_ns(4), 1);
	uint64_t o, got = 0, ns = bt_ns(4);
	uint32_t hits = 0;
	int32_t res;

	bt_ring_via.off = true;
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	ASSERT_EQ(0, bt_publish1(self->c.fd, ns, o, k, &res));
	bt_ring_via = (struct bt_ring_via){ .ring = &self->ring };
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, &k, 1, &got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(1, hits);
	/* not the other file's, through the ring or not */
	EXPECT_EQ(-EINVAL, bt_release(self->other, 1, &got));
	bt_ring_via.off = true;
	EXPECT_EQ(-EINVAL, bt_release(self->other, 1, &got));
	/* the file's, through the ioctl */
	EXPECT_EQ(0, bt_release(self->c.fd, 1, &got));
}

/* Until STATS shows @pins pins and @allocated allocated blocks (~10 s). */
static int wait_for_stats(int fd, uint64_t pins, uint64_t allocated,
			  struct beluga_stats *st)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int i, r;

	for (i = 0; i < 500; i++) {
		r = bt_stats(fd, st);
		if (r)
			return r;
		if (st->pins == pins && st->allocated_blocks == allocated)
			return 0;
		nanosleep(&ts, NULL);
	}
	return -ETIMEDOUT;
}

/* Within ~10 s of @when, the pins and allocations of @st0 again. */
#define EXPECT_STATS_BACK_TO(fd, st0, when) do {			\
	struct beluga_stats __st;					\
	int __r = wait_for_stats(fd, (st0).pins, (st0).allocated_blocks, \
				 &__st);				\
	EXPECT_EQ(0, __r)						\
		TH_LOG("10 s after %s: %llu pins (want %llu), %llu "	\
		       "allocated (want %llu)", when,			\
		       (unsigned long long)__st.pins,			\
		       (unsigned long long)(st0).pins,			\
		       (unsigned long long)__st.allocated_blocks,	\
		       (unsigned long long)(st0).allocated_blocks);	\
} while (0)

/*
 * Pins and allocations made through a ring on a registered file: closing
 * the file keeps them (the ring holds it); closing the ring too returns
 * them all (asynchronously: io_uring drops its reference after the
 * close).
 */
TEST_F(ring, closed_ring_and_file_leak_nothing)
{
	struct beluga_key k = bt_key(bt_ns(5), 1);
	uint64_t o, got[8], ns = bt_ns(5), mine[2];
	struct beluga_stats st0, st;
	struct io_uring r2;
	uint32_t hits = 0;
	int32_t res;
	int fd2, i;

	bt_ring_via.off = true;
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	ASSERT_EQ(0, bt_publish1(self->c.fd, ns, o, k, &res));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st0));

	fd2 = bt_open(O_RDWR);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, io_uring_queue_init(8, &r2, 0));
	ASSERT_EQ(0, io_uring_register_files(&r2, &fd2, 1));
	bt_ring_via = (struct bt_ring_via){
		.ring = &r2, .sqe_flags = IOSQE_FIXED_FILE,
	};
	for (i = 0; i < 8; i++) {
		ASSERT_EQ(0, bt_lookup(0, ns, &k, 1, &got[i],
				       BELUGA_LOOKUP_PIN, &hits));
		ASSERT_EQ(1, hits);
	}
	ASSERT_EQ(0, bt_alloc(0, 2, mine));
	bt_ring_via = (struct bt_ring_via){ .off = true };
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(st0.pins + 8, st.pins);
	EXPECT_EQ(st0.allocated_blocks + 2, st.allocated_blocks);

	/* the file closed, still registered: everything stays */
	close(fd2);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(st0.pins + 8, st.pins) TH_LOG("the ring's file lost its pins");
	EXPECT_EQ(st0.allocated_blocks + 2, st.allocated_blocks);

	/* the ring closed too: nothing stays */
	io_uring_queue_exit(&r2);
	EXPECT_STATS_BACK_TO(self->c.fd, st0, "the ring's close");
}

/* The same for a process that dies with an SQPOLL ring and its file open. */
TEST_F(ring, process_dies_with_sqpoll_ring_leaks_nothing)
{
	struct beluga_key k = bt_key(bt_ns(6), 1);
	uint64_t o, ns = bt_ns(6);
	struct beluga_stats st0;
	int32_t res;
	pid_t pid;

	bt_ring_via.off = true;
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	ASSERT_EQ(0, bt_publish1(self->c.fd, ns, o, k, &res));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st0));

	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct io_uring_params prm = {
			.flags = IORING_SETUP_SQPOLL,
			.sq_thread_idle = 1000,
		};
		struct io_uring sq;
		uint64_t got[4], mine[3];
		uint32_t hits = 0;
		int fd = bt_open(O_RDWR), i;

		CHILD_CHECK(fd >= 0);
		CHILD_CHECK(io_uring_queue_init_params(8, &sq, &prm) == 0);
		bt_ring_via = (struct bt_ring_via){ .ring = &sq };
		for (i = 0; i < 4; i++) {
			CHILD_CHECK(bt_lookup(fd, ns, &k, 1, &got[i],
					      BELUGA_LOOKUP_PIN, &hits) == 0);
			CHILD_CHECK(hits == 1);
		}
		CHILD_CHECK(bt_alloc(fd, 3, mine) == 0);
		_exit(0);	/* no close, no RELEASE, no FREE */
	}
	ASSERT_EQ(0, bt_wait(&self->c, pid));
	EXPECT_STATS_BACK_TO(self->c.fd, st0, "the exit");
}

#define EV_MAX	256

/*
 * BELUGA_ALLOC_EVICTED through the ring: the free blocks taken and
 * published in order (through the ioctls), an ALLOC with the flag through
 * @ring names the two oldest keys, as the ioctl does (pool_test). The
 * ring also answers the flag's argument errors as the ioctl does: no
 * array (-EINVAL), an unmapped one (-EFAULT, nothing allocated).
 */
static void evicted_via_ring(struct __test_metadata *_metadata,
			     FIXTURE_DATA(ring) *self, struct io_uring *ring)
{
	static uint64_t o[EV_MAX];
	struct beluga_evicted_key ev[2];
	const uint64_t ns = bt_ns(3);
	struct beluga_stats s0, s1;
	uint64_t fresh[2];
	uint32_t n = 0, nr, i;
	int32_t res;
	void *hole;
	int r;

	bt_ring_via.off = true;
	while (n < EV_MAX && bt_alloc(self->c.fd, 1, &o[n]) == 0)
		n++;
	ASSERT_LT(n, EV_MAX);
	ASSERT_LE(3, n);
	for (i = 0; i < n; i++) {
		ASSERT_EQ(0, bt_publish1(self->c.fd, ns, o[i], bt_key(ns, i),
					 &res));
		ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	}
	bt_ring_via = (struct bt_ring_via){ .ring = ring };

	nr = 77;
	r = bt_alloc_evicted(self->c.fd, 2, fresh, NULL, &nr);
	EXPECT_EQ(-EINVAL, r) TH_LOG("ring: the flag without an array: %s",
				     strerror(-r));
	hole = bt_unmapped_page();
	ASSERT_NE(NULL, hole);
	bt_stats(self->c.fd, &s0);
	r = bt_alloc_evicted(self->c.fd, 2, fresh, hole, &nr);
	EXPECT_EQ(-EFAULT, r) TH_LOG("ring: an unmapped evicted array: %s",
				     strerror(-r));
	munmap(hole, BT_PAGE);
	bt_stats(self->c.fd, &s1);
	EXPECT_EQ(s0.allocated_blocks, s1.allocated_blocks);
	EXPECT_EQ(s0.evictions, s1.evictions);
	EXPECT_EQ(77, nr);

	r = bt_alloc_evicted(self->c.fd, 2, fresh, ev, &nr);
	ASSERT_EQ(0, r) TH_LOG("ring: ALLOC EVICTED: %s", strerror(-r));
	ASSERT_EQ(2, nr);
	for (i = 0; i < 2; i++) {
		EXPECT_EQ(ns, ev[i].ns);
		EXPECT_EQ(bt_key(ns, i).lo, ev[i].key.lo);
		EXPECT_EQ(bt_key(ns, i).hi, ev[i].key.hi);
	}
	bt_ring_via.off = true;
	EXPECT_EQ(0, bt_present(self->c.fd, ns, bt_key(ns, 0)));
	EXPECT_EQ(0, bt_present(self->c.fd, ns, bt_key(ns, 1)));
	EXPECT_EQ(1, bt_present(self->c.fd, ns, bt_key(ns, 2)));
	ASSERT_EQ(0, bt_free(self->c.fd, 2, fresh));
	bt_ring_via = (struct bt_ring_via){ 0 };
}

TEST_F(ring, alloc_evicted)
{
	evicted_via_ring(_metadata, self, &self->ring);
}

/*
 * A shared pool: its block commands wait for other hosts, so a ring
 * command issued IO_URING_F_NONBLOCK returns -EAGAIN before it changed
 * anything and io_uring runs it again in a worker. The results must be
 * the ioctl's all the same.
 */
FIXTURE(shared) {
	FIXTURE_DATA(ring) r;
};

#define SH_LEN	(4 * BT_MIB)	/* 2 MiB of metadata, 2 MiB of blocks */

FIXTURE_SETUP(shared)
{
	struct bt_ctx *c = &self->r.c;
	char why[160];
	int r;

	self->r.other = -1;
	self->r.have_ring = false;
	bt_ring_via = (struct bt_ring_via){ 0 };
	bt_ctx_init(c);
	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "a shared pool needs device-dax: %s", why);
	bt_setup_empty(c);
	ASSERT_EQ(0, bt_attach_req(&c->att[0], BELUGA_BACKEND_DAX, 0, 0, SH_LEN,
				   BT_BLOCK_SIZE, "bt-ring-shared"));
	c->att[0].flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			  BELUGA_ATTACH_FORMAT;
	c->att[0].host_id = 2;
	r = bt_attach(c->fd, &c->att[0]);
	ASSERT_EQ(0, r) TH_LOG("shared ATTACH: %s", strerror(-r));
	c->nr = 1;
	c->backend = BELUGA_BACKEND_DAX;
	ASSERT_EQ(0, bt_info(c->fd, &c->info));
	ring_setup_rest(_metadata, &self->r);
}

FIXTURE_TEARDOWN(shared)
{
	ring_ctx_teardown(_metadata, &self->r);
}

TEST_F_TIMEOUT(shared, twin_plain, 120)
{
	twin(_metadata, &self->r, &self->r.ring, 0, "shared pool, plain ring");
}

/* The evictions a shared pool's ALLOC names, through a worker. */
TEST_F_TIMEOUT(shared, alloc_evicted, 120)
{
	evicted_via_ring(_metadata, &self->r, &self->r.ring);
}

TEST_F_TIMEOUT(shared, twin_sqpoll, 120)
{
	twin_sqpoll(_metadata, &self->r, "shared pool, SQPOLL");
}

/* ------------------------------------------------------------------ */
/* The SQE's own errors (uapi: "Errors of the SQE itself").             */

/* One raw SQE, prepared by the caller, through @ring: the completion's res. */
static int ring_raw(struct io_uring *ring, struct io_uring_sqe *sqe)
{
	bool reaped;

	sqe->user_data = BT_RING_TAG;
	return bt_ring_reap1(ring, NULL, &reaped);
}

/* A valid LOOKUP+PIN of the fixture's foreign-free key, for breaking. */
struct bad_env {
	struct beluga_lookup lk;
	struct beluga_key k;
	uint64_t got;
	uint64_t ns;
};

static void bad_env_init(struct bt_ctx *c, struct bad_env *e)
{
	uint64_t o;
	int32_t res;

	e->ns = bt_ns(7);
	e->k = bt_key(e->ns, 1);
	bt_ring_via.off = true;
	bt_alloc(c->fd, 1, &o);
	bt_publish1(c->fd, e->ns, o, e->k, &res);
	e->lk = (struct beluga_lookup){
		.size = sizeof(e->lk), .flags = BELUGA_LOOKUP_PIN, .ns = e->ns,
		.count = 1, .keys = (uintptr_t)&e->k,
		.offsets = (uintptr_t)&e->got,
	};
}

TEST_F(ring, bad_sqe_unknown_cmd_op_enotty)
{
	const uint32_t bad[] = {
		0,
		_IO(BELUGA_TYPE, BELUGA_CMD_DEVICE_RANGE + 1),
		_IO(BELUGA_TYPE, 0xff),
		_IO(BELUGA_TYPE - 1, BELUGA_CMD_LOOKUP),
		_IOWR(BELUGA_TYPE, BELUGA_CMD_LOOKUP, struct beluga_lookup),
		_IOC(_IOC_NONE, BELUGA_TYPE, BELUGA_CMD_LOOKUP, 40),
		_IO('X', 0),
	};
	struct bad_env e;
	struct beluga_stats st0, st;
	unsigned int i;

	bad_env_init(&self->c, &e);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st0));
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);
		int r;

		bt_ring_prep(sqe, self->c.fd, bad[i], &e.lk);
		r = ring_raw(&self->ring, sqe);
		EXPECT_EQ(-ENOTTY, r) TH_LOG("cmd_op 0x%x: %s", bad[i],
					     strerror(-r));
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(st0.pins, st.pins);
}

TEST_F(ring, bad_sqe_command_not_on_the_ring_eopnotsupp)
{
	static const unsigned long cmds[] = {
		BELUGA_IOC_INFO, BELUGA_IOC_STATS, BELUGA_IOC_ATTACH,
		BELUGA_IOC_DETACH, BELUGA_IOC_EVICT, BELUGA_IOC_REGION_INFO,
		BELUGA_IOC_HOSTS, BELUGA_IOC_INDEX_MAP, BELUGA_IOC_WATCHDOG,
		BELUGA_IOC_DEVICE_RANGE,
	};
	struct beluga_info info;
	union bt_argbuf buf;
	unsigned int i;
	int r;

	for (i = 0; i < ARRAY_SIZE(cmds); i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);

		/*
		 * a valid struct where one is easy: DETACH of the region,
		 * REGISTER of a watchdog, a device range of one page
		 */
		memset(&buf, 0, sizeof(buf));
		if (cmds[i] == BELUGA_IOC_DETACH) {
			buf.detach.size = sizeof(buf.detach);
			buf.detach.flags = BELUGA_DETACH_EVICT;
			buf.detach.region_id = self->c.att[0].region_id;
		} else if (cmds[i] == BELUGA_IOC_WATCHDOG) {
			buf.watchdog.size = sizeof(buf.watchdog);
			buf.watchdog.flags = BELUGA_WATCHDOG_REGISTER;
			buf.watchdog.timeout_ms = 3000;
		} else if (cmds[i] == BELUGA_IOC_DEVICE_RANGE) {
			buf.device_range.size = sizeof(buf.device_range);
			buf.device_range.eventfd = -1;
			buf.device_range.length = BT_PAGE;
		} else {
			buf.w[0] = 256;
		}
		bt_ring_prep(sqe, self->c.fd, cmds[i], &buf);
		r = ring_raw(&self->ring, sqe);
		EXPECT_EQ(-EOPNOTSUPP, r) TH_LOG("cmd_op 0x%lx: %s", cmds[i],
						 strerror(-r));
	}
	/* nothing ran: the region is still there */
	bt_ring_via.off = true;
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	EXPECT_EQ(1, info.nr_regions);
	/* the file is no watchdog link, and has declared no device range */
	memset(&buf, 0, sizeof(buf));
	buf.watchdog.size = sizeof(buf.watchdog);
	buf.watchdog.flags = BELUGA_WATCHDOG_QUERY;
	r = bt_ioctl(self->c.fd, BELUGA_IOC_WATCHDOG, &buf);
	EXPECT_EQ(-ENOLINK, r) TH_LOG("WATCHDOG QUERY after the ring's "
				      "REGISTER: %s", strerror(-r));
	memset(&buf, 0, sizeof(buf));
	buf.device_range.size = sizeof(buf.device_range);
	buf.device_range.eventfd = -1;
	buf.device_range.length = BT_PAGE;
	r = bt_ioctl(self->c.fd, BELUGA_IOC_DEVICE_RANGE, &buf);
	EXPECT_EQ(0, r) TH_LOG("DEVICE_RANGE after the ring's: %s",
			       strerror(-r));
}

TEST_F(ring, bad_sqe_reserved_einval)
{
	const uint64_t values[] = { 1, 1ULL << 63, ~0ULL };
	struct beluga_stats st0, st;
	struct bad_env e;
	unsigned int i;
	int r;

	bad_env_init(&self->c, &e);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st0));
	for (i = 0; i < ARRAY_SIZE(values); i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);

		bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_LOOKUP, &e.lk);
		bt_ring_area(sqe)->__reserved = values[i];
		r = ring_raw(&self->ring, sqe);
		EXPECT_EQ(-EINVAL, r) TH_LOG("__reserved 0x%llx: %s",
					     (unsigned long long)values[i],
					     strerror(-r));
	}
	/* io_uring's own: the word after cmd_op */
	{
		struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);

		bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_LOOKUP, &e.lk);
		sqe->__pad1 = 1;
		r = ring_raw(&self->ring, sqe);
		EXPECT_EQ(-EINVAL, r) TH_LOG("__pad1: %s", strerror(-r));
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(st0.pins, st.pins) TH_LOG("a refused SQE pinned");
}

/* IORING_URING_CMD_FIXED: the commands take no registered buffer. */
TEST_F(ring, bad_sqe_fixed_buffer_einval)
{
	struct io_uring_sqe *sqe;
	struct bad_env e;
	struct iovec iov;
	int r;

	/* anonymous memory: 6.1 registers no file-backed page (.data, .bss) */
	iov.iov_len = BT_PAGE;
	iov.iov_base = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, iov.iov_base);
	bad_env_init(&self->c, &e);
	r = io_uring_register_buffers(&self->ring, &iov, 1);
	ASSERT_EQ(0, r) TH_LOG("io_uring_register_buffers: %s", strerror(-r));
	sqe = io_uring_get_sqe(&self->ring);
	bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_LOOKUP, &e.lk);
	sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
	sqe->buf_index = 0;
	r = ring_raw(&self->ring, sqe);
	EXPECT_EQ(-EINVAL, r) TH_LOG("IORING_URING_CMD_FIXED: %s", strerror(-r));
	ASSERT_EQ(0, io_uring_unregister_buffers(&self->ring));
	munmap(iov.iov_base, BT_PAGE);
}

/* A 128-byte SQE: the rest of its command area is reserved. */
TEST_F(ring, bad_sqe128_tail_einval)
{
	const unsigned int pokes[] = { 16, 40, 79 };
	struct bad_env e;
	struct io_uring sq;
	unsigned int i;
	int r;

	bad_env_init(&self->c, &e);
	ASSERT_EQ(0, io_uring_queue_init(8, &sq, IORING_SETUP_SQE128));
	for (i = 0; i < ARRAY_SIZE(pokes); i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&sq);

		memset(sqe, 0, 128);
		bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_LOOKUP, &e.lk);
		sqe->cmd[pokes[i]] = 1;
		r = ring_raw(&sq, sqe);
		EXPECT_EQ(-EINVAL, r) TH_LOG("command area byte %u: %s",
					     pokes[i], strerror(-r));
	}
	io_uring_queue_exit(&sq);
}

/* An IOPOLL ring: io_uring's -EOPNOTSUPP, the commands having no polled completion. */
TEST_F(ring, iopoll_ring_eopnotsupp)
{
	struct io_uring_sqe *sqe;
	struct bad_env e;
	struct io_uring sq;
	int r;

	bad_env_init(&self->c, &e);
	ASSERT_EQ(0, io_uring_queue_init(8, &sq, IORING_SETUP_IOPOLL));
	sqe = io_uring_get_sqe(&sq);
	bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_LOOKUP, &e.lk);
	r = ring_raw(&sq, sqe);
	EXPECT_EQ(-EOPNOTSUPP, r) TH_LOG("IOPOLL ring: %s", strerror(-r));
	io_uring_queue_exit(&sq);
}

TEST_F(ring, bad_sqe_null_struct_efault)
{
	static const unsigned long cmds[] = {
		BELUGA_IOC_ALLOC, BELUGA_IOC_FREE, BELUGA_IOC_PUBLISH,
		BELUGA_IOC_LOOKUP, BELUGA_IOC_RELEASE,
	};
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(cmds); i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&self->ring);
		int r;

		bt_ring_prep(sqe, self->c.fd, cmds[i], NULL);
		r = ring_raw(&self->ring, sqe);
		EXPECT_EQ(-EFAULT, r) TH_LOG("cmd_op 0x%lx, arg 0: %s",
					     cmds[i], strerror(-r));
	}
}

/*
 * Two broken rules: the SQE's come first, in the uapi's order, then the
 * ioctl's (the file mode before the struct).
 */
TEST_F(ring, bad_sqe_order)
{
	struct beluga_alloc a = { .size = sizeof(a), .count = 1 };
	struct io_uring_sqe *sqe;
	uint64_t o;
	int rofd, r;

	a.offsets = (uintptr_t)&o;
	rofd = bt_open(O_RDONLY);
	ASSERT_LE(0, rofd);

	/* unknown number, reserved: -ENOTTY */
	sqe = io_uring_get_sqe(&self->ring);
	bt_ring_prep(sqe, self->c.fd, _IO(BELUGA_TYPE, 0x40), &a);
	bt_ring_area(sqe)->__reserved = 1;
	EXPECT_EQ(-ENOTTY, ring_raw(&self->ring, sqe));
	/* a command the ring refuses, reserved: -EOPNOTSUPP */
	sqe = io_uring_get_sqe(&self->ring);
	bt_ring_prep(sqe, self->c.fd, BELUGA_IOC_STATS, &a);
	bt_ring_area(sqe)->__reserved = 1;
	EXPECT_EQ(-EOPNOTSUPP, ring_raw(&self->ring, sqe));
	/* reserved on a read-only file, arg 0: -EINVAL */
	sqe = io_uring_get_sqe(&self->ring);
	bt_ring_prep(sqe, rofd, BELUGA_IOC_ALLOC, NULL);
	bt_ring_area(sqe)->__reserved = 1;
	EXPECT_EQ(-EINVAL, ring_raw(&self->ring, sqe));
	/* ALLOC on a read-only file, arg 0: -EBADF (step 3 before 4) */
	sqe = io_uring_get_sqe(&self->ring);
	bt_ring_prep(sqe, rofd, BELUGA_IOC_ALLOC, NULL);
	r = ring_raw(&self->ring, sqe);
	EXPECT_EQ(-EBADF, r) TH_LOG("read-only ALLOC: %s", strerror(-r));
	/* LOOKUP needs no writable file */
	sqe = io_uring_get_sqe(&self->ring);
	bt_ring_prep(sqe, rofd, BELUGA_IOC_LOOKUP, NULL);
	EXPECT_EQ(-EFAULT, ring_raw(&self->ring, sqe));
	close(rofd);
}

TEST_HARNESS_MAIN
