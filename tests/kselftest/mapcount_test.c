// SPDX-License-Identifier: GPL-2.0
/*
 * REGION_INFO's @mappings as uapi/linux/beluga.h defines it: a VMA counts
 * in the regions its range covered when mmap() made it, for as long as it
 * lives. Pieces of a split or shrunk mapping keep counting there (so
 * DETACH stays -EBUSY until every piece is gone), and growing a mapping
 * with mremap() adds no region (its pages there raise SIGBUS, and DETACH
 * of that region is allowed).
 */
#include "beluga_test.h"

FIXTURE(mapcount) {
	struct bt_ctx c;
	struct beluga_region_info ri[2];	/* region A, region B */
	uint64_t span;		/* bytes from A's first offset to B's end */
};

FIXTURE_SETUP(mapcount)
{
	char why[160];
	int i, r;

	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	/* a second region right after the first in the offset space */
	if (self->c.backend == BELUGA_BACKEND_NODE)
		r = bt_attach_req(&self->c.att[1], BELUGA_BACKEND_NODE, 0, 0,
				  BT_REGION_LEN, BT_BLOCK_SIZE, "bt-node1");
	else if (bt_backend_ok(BELUGA_BACKEND_DAX, 0, 2 * BT_REGION_LEN, why,
			       sizeof(why)))
		r = bt_attach_req(&self->c.att[1], BELUGA_BACKEND_DAX, 0,
				  BT_REGION_LEN, BT_REGION_LEN, BT_BLOCK_SIZE,
				  "bt-dax-b");
	else
		SKIP(return, "%s", why);
	ASSERT_EQ(0, r);
	r = bt_attach(self->c.fd, &self->c.att[1]);
	ASSERT_EQ(0, r) TH_LOG("second region: %s", strerror(-r));
	self->c.nr = 2;
	for (i = 0; i < 2; i++) {
		r = bt_region_info(self->c.fd, self->c.att[i].region_id,
				   &self->ri[i]);
		ASSERT_EQ(0, r);
	}
	ASSERT_EQ(self->ri[0].first_offset + self->ri[0].length,
		  self->ri[1].first_offset)
		TH_LOG("the regions are not adjacent in the offset space");
	self->span = self->ri[1].first_offset + self->ri[1].length -
		     self->ri[0].first_offset;
}

FIXTURE_TEARDOWN(mapcount)
{
	bt_teardown(&self->c);
}

/* REGION_INFO mappings of region @i (0: A, 1: B), or -errno. */
static int count_of(FIXTURE_DATA(mapcount) *self, int i)
{
	struct beluga_region_info ri;
	int r = bt_region_info(self->c.fd, self->c.att[i].region_id, &ri);

	return r ? r : (int)ri.mappings;
}

static char *map_at(FIXTURE_DATA(mapcount) *self, uint64_t off, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		       self->c.fd, (off_t)off);

	return p == MAP_FAILED ? NULL : p;
}

/* Split by munmap(): the piece left over A still counts in B. */
TEST_F(mapcount, split_piece_keeps_counting)
{
	size_t lenA = self->ri[0].length;
	char *p = map_at(self, self->ri[0].first_offset, self->span);
	int r;

	ASSERT_NE(NULL, p) TH_LOG("mmap: %s", strerror(errno));
	EXPECT_EQ(1, count_of(self, 0));
	EXPECT_EQ(1, count_of(self, 1));
	ASSERT_EQ(0, munmap(p + lenA, self->span - lenA));
	/* nothing maps B any more, but the piece came from a mapping of it */
	EXPECT_EQ(1, count_of(self, 0));
	EXPECT_EQ(1, count_of(self, 1));
	r = bt_detach(self->c.fd, self->c.att[1].region_id, 0, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("DETACH of B: %s", strerror(-r));
	p[0] = 1;	/* the piece still works over A */
	ASSERT_EQ(0, munmap(p, lenA));
	EXPECT_EQ(0, count_of(self, 0));
	EXPECT_EQ(0, count_of(self, 1));
}

/* Shrunk by mremap(): the same as a split. */
TEST_F(mapcount, mremap_shrink_keeps_counting)
{
	size_t lenA = self->ri[0].length;
	char *p = map_at(self, self->ri[0].first_offset, self->span);
	char *q;

	ASSERT_NE(NULL, p) TH_LOG("mmap: %s", strerror(errno));
	q = mremap(p, self->span, lenA, 0);
	ASSERT_NE(MAP_FAILED, q) TH_LOG("mremap shrink: %s", strerror(errno));
	EXPECT_EQ(1, count_of(self, 0));
	EXPECT_EQ(1, count_of(self, 1));
	EXPECT_EQ(-EBUSY, bt_detach(self->c.fd, self->c.att[1].region_id, 0,
				    NULL));
	ASSERT_EQ(0, munmap(q, lenA));
	EXPECT_EQ(0, count_of(self, 0));
	EXPECT_EQ(0, count_of(self, 1));
}

/* Moved by mremap(): counted once, in the same regions. */
TEST_F(mapcount, mremap_move_counts_once)
{
	char *p = map_at(self, self->ri[0].first_offset, self->span);
	char *dst, *q;

	ASSERT_NE(NULL, p) TH_LOG("mmap: %s", strerror(errno));
	/* a free range to move to */
	dst = mmap(NULL, self->span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	ASSERT_NE(MAP_FAILED, dst);
	q = mremap(p, self->span, self->span, MREMAP_MAYMOVE | MREMAP_FIXED,
		   dst);
	ASSERT_EQ(dst, q) TH_LOG("mremap move: %s", strerror(errno));
	EXPECT_EQ(1, count_of(self, 0));
	EXPECT_EQ(1, count_of(self, 1));
	q[self->span - 1] = 1;	/* B's last byte, through the moved mapping */
	ASSERT_EQ(0, munmap(q, self->span));
	EXPECT_EQ(0, count_of(self, 0));
	EXPECT_EQ(0, count_of(self, 1));
}

/*
 * Grown by mremap() over B: not counted in B, its pages there raise
 * SIGBUS, and B may be detached under it.
 */
TEST_F(mapcount, mremap_grow_adds_no_region)
{
	size_t lenA = self->ri[0].length;
	char *p = map_at(self, self->ri[0].first_offset, lenA);
	char *q;
	pid_t pid;
	int r;

	ASSERT_NE(NULL, p) TH_LOG("mmap: %s", strerror(errno));
	EXPECT_EQ(1, count_of(self, 0));
	EXPECT_EQ(0, count_of(self, 1));
	q = mremap(p, lenA, self->span, MREMAP_MAYMOVE);
	ASSERT_NE(MAP_FAILED, q) TH_LOG("mremap grow: %s", strerror(errno));
	EXPECT_EQ(1, count_of(self, 0));
	EXPECT_EQ(0, count_of(self, 1));
	q[0] = 1;	/* A still works */
	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		volatile char *b = q + lenA;

		(void)*b;	/* B's first byte: SIGBUS */
		_exit(0);
	}
	r = bt_wait(&self->c, pid);
	EXPECT_EQ(128 + SIGBUS, r) TH_LOG("reading B through the grown "
					  "mapping: child status %d", r);
	/* no mapping counts in B: it can go */
	r = bt_detach(self->c.fd, self->c.att[1].region_id, 0, NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH of B under the grown mapping: %s",
			       strerror(-r));
	EXPECT_EQ(1, count_of(self, 0));
	ASSERT_EQ(0, munmap(q, self->span));
	EXPECT_EQ(0, count_of(self, 0));
}

TEST_HARNESS_MAIN
