// SPDX-License-Identifier: GPL-2.0
/*
 * mmap() of /dev/beluga: the whole offset space MAP_SHARED, refusals
 * (MAP_PRIVATE, beyond map_size), aliases of the same block, the mapping
 * count of REGION_INFO through VMA splits, fork and mremap, and 2 MiB
 * aligned placement on device-dax.
 */
#include "beluga_test.h"

#define BT_PMD	(2 * BT_MIB)

FIXTURE(map) {
	struct bt_ctx c;
	uint64_t ns;
};

FIXTURE_VARIANT(map) {
	int backend;
};

FIXTURE_VARIANT_ADD(map, node) {
	.backend = BELUGA_BACKEND_NODE,
};

FIXTURE_VARIANT_ADD(map, dax) {
	.backend = BELUGA_BACKEND_DAX,
};

FIXTURE_SETUP(map)
{
	if (!bt_setup(&self->c, variant->backend, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->ns = bt_ns(0x3a9);
}

FIXTURE_TEARDOWN(map)
{
	bt_teardown(&self->c);
}

static int mappings_of(struct bt_ctx *c)
{
	struct beluga_region_info ri;
	int r = bt_region_info(c->fd, c->att[0].region_id, &ri);

	return r ? r : (int)ri.mappings;
}

TEST_F(map, whole_pool_read_write)
{
	char *p, *q;
	uint64_t o;
	int fd2;

	p = bt_map(&self->c);
	EXPECT_EQ(1, mappings_of(&self->c));
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	ASSERT_LE(o + BT_BLOCK_SIZE, self->c.map_len);
	bt_fill(p + o, 4096, 0xabc);
	EXPECT_EQ(-1, bt_check(p + o, 4096, 0xabc));
	/* the last bytes of the last block are reachable too */
	p[self->c.map_len - 1] = 0x5a;
	EXPECT_EQ(0x5a, p[self->c.map_len - 1]);

	/* a second file maps the same memory */
	fd2 = bt_open(O_RDONLY);
	ASSERT_LE(0, fd2);
	q = mmap(NULL, self->c.map_len, PROT_READ, MAP_SHARED, fd2, 0);
	ASSERT_NE(MAP_FAILED, q) TH_LOG("read-only mapping: %s", strerror(errno));
	EXPECT_EQ(2, mappings_of(&self->c));
	EXPECT_EQ(-1, bt_check(q + o, 4096, 0xabc));
	EXPECT_EQ(0x5a, q[self->c.map_len - 1]);
	munmap(q, self->c.map_len);
	close(fd2);
	EXPECT_EQ(1, mappings_of(&self->c));
	bt_unmap(&self->c);
	EXPECT_EQ(0, mappings_of(&self->c));
}

TEST_F(map, private_refused)
{
	void *p;

	p = mmap(NULL, self->c.info.map_size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE, self->c.fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno) TH_LOG("MAP_PRIVATE rw: %s", strerror(errno));
	p = mmap(NULL, BT_PAGE, PROT_READ, MAP_PRIVATE, self->c.fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno) TH_LOG("MAP_PRIVATE ro: %s", strerror(errno));
	EXPECT_EQ(0, mappings_of(&self->c));
}

/* "-ENXIO the range reaches past map_size" */
#define EXPECT_MMAP_REFUSED(p, what) do {				\
	EXPECT_EQ(MAP_FAILED, (p)) TH_LOG("%s: mapped", what);		\
	if ((p) != MAP_FAILED)						\
		munmap((p), BT_PAGE);					\
	else								\
		EXPECT_EQ(ENXIO, errno)					\
			TH_LOG("%s: %s", what, strerror(errno));	\
} while (0)

TEST_F(map, beyond_map_size_refused)
{
	uint64_t ms = self->c.info.map_size;
	void *p;

	p = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, self->c.fd, ms);
	EXPECT_MMAP_REFUSED(p, "offset == map_size");
	p = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, self->c.fd, ms + BT_MIB);
	EXPECT_MMAP_REFUSED(p, "offset past map_size");
	p = mmap(NULL, ms + BT_PAGE, PROT_READ, MAP_SHARED, self->c.fd, 0);
	EXPECT_MMAP_REFUSED(p, "length map_size + 4096");
	p = mmap(NULL, 2 * BT_PAGE, PROT_READ, MAP_SHARED, self->c.fd,
		 ms - BT_PAGE);
	EXPECT_MMAP_REFUSED(p, "last page + one more");
	p = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, self->c.fd,
		 (off_t)0x7ffffffffffff000LL);
	EXPECT_MMAP_REFUSED(p, "huge offset");
	EXPECT_EQ(0, mappings_of(&self->c)) TH_LOG("a refused mmap was counted");
	/* the last page itself is fine */
	p = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, self->c.fd, ms - BT_PAGE);
	ASSERT_NE(MAP_FAILED, p) TH_LOG("last page: %s", strerror(errno));
	munmap(p, BT_PAGE);
}

/* A block mapped on its own aliases the same block in the whole mapping. */
TEST_F(map, block_mapping_aliases_pool_mapping)
{
	char *p = bt_map(&self->c), *q;
	uint64_t o[2];

	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o));
	q = mmap(NULL, BT_BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
		 self->c.fd, o[1]);
	ASSERT_NE(MAP_FAILED, q) TH_LOG("mmap of one block: %s", strerror(errno));
	bt_fill(p + o[1], 1024, 11);
	EXPECT_EQ(-1, bt_check(q, 1024, 11));
	bt_fill(q + BT_BLOCK_SIZE - 1024, 1024, 12);
	EXPECT_EQ(-1, bt_check(p + o[1] + BT_BLOCK_SIZE - 1024, 1024, 12));
	/* and not the other block */
	bt_fill(p + o[0], 64, 13);
	EXPECT_NE(-1, bt_check(q, 64, 13));
	munmap(q, BT_BLOCK_SIZE);
}

/* MADV_DONTNEED drops page table entries, never the pool's memory. */
TEST_F(map, dontneed_keeps_bytes)
{
	char *p = bt_map(&self->c);
	uint64_t o;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	bt_fill(p + o, 2048, 77);
	ASSERT_EQ(0, madvise(p, self->c.map_len, MADV_DONTNEED));
	EXPECT_EQ(-1, bt_check(p + o, 2048, 77));
}

/* VMA splits by munmap and mprotect keep the mapping count honest. */
TEST_F(map, split_vmas_counted)
{
	char *p = bt_map(&self->c);
	size_t len = self->c.map_len;
	int r;

	ASSERT_LE(4 * BT_PAGE, len);
	/* cut off the first page, make a hole in the middle */
	ASSERT_EQ(0, munmap(p, BT_PAGE));
	ASSERT_EQ(0, mprotect(p + 2 * BT_PAGE, BT_PAGE, PROT_READ));
	p[BT_PAGE] = 1;
	EXPECT_LE(1, mappings_of(&self->c));
	r = bt_detach(self->c.fd, self->c.att[0].region_id, BELUGA_DETACH_EVICT,
		      NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("DETACH while a split mapping lives: %s",
				    strerror(-r));
	/* unmap the pieces one by one */
	ASSERT_EQ(0, munmap(p + 2 * BT_PAGE, BT_PAGE));
	EXPECT_LE(1, mappings_of(&self->c));
	ASSERT_EQ(0, munmap(p + BT_PAGE, BT_PAGE));
	EXPECT_LE(1, mappings_of(&self->c));
	r = bt_detach(self->c.fd, self->c.att[0].region_id, BELUGA_DETACH_EVICT,
		      NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("DETACH while the tail is mapped: %s",
				    strerror(-r));
	ASSERT_EQ(0, munmap(p + 3 * BT_PAGE, len - 3 * BT_PAGE));
	self->c.map = NULL;
	EXPECT_EQ(0, mappings_of(&self->c));
	r = bt_detach(self->c.fd, self->c.att[0].region_id, 0, NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH after every piece is gone: %s",
			       strerror(-r));
}

/* A fork()ed copy of a mapping counts; its exit does not drop ours. */
TEST_F(map, fork_copies_counted)
{
	char *p = bt_map(&self->c);
	int go[2], ready[2], r;
	pid_t pid;
	char ch;

	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(ready));
	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		p[0] = 42;
		CHILD_CHECK(write(ready[1], "r", 1) == 1);
		CHILD_CHECK(read(go[0], &ch, 1) == 1);
		_exit(0);
	}
	ASSERT_EQ(1, read(ready[0], &ch, 1));
	EXPECT_EQ(2, mappings_of(&self->c));
	EXPECT_EQ(42, p[0]) TH_LOG("the child's store is not visible");
	ASSERT_EQ(1, write(go[1], "g", 1));
	ASSERT_EQ(0, bt_wait(&self->c, pid));
	EXPECT_EQ(1, mappings_of(&self->c));
	r = bt_detach(self->c.fd, self->c.att[0].region_id, BELUGA_DETACH_EVICT,
		      NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("DETACH while the parent still maps: %s",
				    strerror(-r));
	bt_unmap(&self->c);
	EXPECT_EQ(0, mappings_of(&self->c));
}

/* mremap() moving the mapping keeps it counted once and working. */
TEST_F(map, mremap_move)
{
	char *p = bt_map(&self->c), *q, *dst;
	size_t len = self->c.map_len;
	uint64_t o;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	bt_fill(p + o, 512, 5);
	dst = mmap(NULL, len + BT_PMD, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	ASSERT_NE(MAP_FAILED, dst);
	q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	if (q == MAP_FAILED) {
		/* refusing to move is acceptable; the old mapping must stay */
		TH_LOG("mremap refused: %s", strerror(errno));
		munmap(dst, len + BT_PMD);
		EXPECT_EQ(1, mappings_of(&self->c));
		EXPECT_EQ(-1, bt_check(p + o, 512, 5));
		return;
	}
	self->c.map = q;
	EXPECT_EQ(1, mappings_of(&self->c));
	EXPECT_EQ(-1, bt_check(q + o, 512, 5));
	munmap(dst + len, BT_PMD);
	bt_unmap(&self->c);
	EXPECT_EQ(0, mappings_of(&self->c));
}

/* Touch @addr in a child; returns its status (128 + signal when killed). */
static int touch_in_child(struct bt_ctx *c, volatile char *addr, bool write)
{
	pid_t pid = bt_fork(c);

	if (pid == 0) {
		if (write)
			*addr = 1;
		else
			(void)*addr;
		_exit(0);
	}
	return pid < 0 ? -1 : bt_wait(c, pid);
}

/*
 * "A mapping reaches the regions attached when it was made; pages in holes
 * or in regions attached later raise SIGBUS: map again after ATTACH."
 */
TEST_F(map, holes_and_later_regions_sigbus)
{
	struct beluga_attach a1, a0 = self->c.att[0];
	struct beluga_info info;
	char why[160], *p, *q;
	int r;

	if (variant->backend == BELUGA_BACKEND_NODE)
		r = bt_attach_req(&a1, BELUGA_BACKEND_NODE, 0, 0, BT_REGION_LEN,
				  BT_BLOCK_SIZE, "bt-hole1");
	else if (bt_backend_ok(BELUGA_BACKEND_DAX, 0, 2 * BT_REGION_LEN, why,
			       sizeof(why)))
		r = bt_attach_req(&a1, BELUGA_BACKEND_DAX, 0, BT_REGION_LEN,
				  BT_REGION_LEN, BT_BLOCK_SIZE, "bt-hole1");
	else
		SKIP(return, "%s", why);
	ASSERT_EQ(0, r);
	ASSERT_EQ(0, bt_attach(self->c.fd, &a1));
	/* detach the first region: a hole where it was */
	r = bt_detach(self->c.fd, a0.region_id, 0, NULL);
	ASSERT_EQ(0, r) TH_LOG("DETACH of the idle first region: %s",
			       strerror(-r));
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	ASSERT_EQ(1, info.nr_regions);
	ASSERT_LE(a1.first_offset + a1.nr_blocks * BT_BLOCK_SIZE, info.map_size);
	if (a1.first_offset < BT_PAGE)
		SKIP(return, "the second region starts at offset 0: no hole");

	p = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 self->c.fd, 0);
	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap over a hole: %s", strerror(errno));
	self->c.map = p;
	self->c.map_len = info.map_size;
	r = touch_in_child(&self->c, p, false);
	EXPECT_EQ(128 + SIGBUS, r) TH_LOG("read in the hole: status %d", r);
	r = touch_in_child(&self->c, p + a1.first_offset, true);
	EXPECT_EQ(0, r) TH_LOG("store into the live region: status %d", r);

	/* a region attached now is not reached by the old mapping */
	memset(a0.name, 0, sizeof(a0.name));
	snprintf(a0.name, sizeof(a0.name), "bt-hole0");
	r = bt_attach(self->c.fd, &a0);
	ASSERT_EQ(0, r) TH_LOG("re-ATTACH: %s", strerror(-r));
	if (a0.first_offset + BT_PAGE <= info.map_size) {
		r = touch_in_child(&self->c, p + a0.first_offset, false);
		EXPECT_EQ(128 + SIGBUS, r)
			TH_LOG("old mapping into a later region: status %d", r);
	}
	/* a new mapping reaches it */
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	q = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 self->c.fd, 0);
	ASSERT_NE(MAP_FAILED, q);
	r = touch_in_child(&self->c, q + a0.first_offset, true);
	EXPECT_EQ(0, r) TH_LOG("new mapping into the new region: status %d", r);
	munmap(q, info.map_size);
}

/* A mapping made before a second region was attached does not cover it. */
TEST_F(map, second_region_needs_new_mapping)
{
	struct beluga_attach a2;
	char why[160];
	char *p = bt_map(&self->c), *q;
	struct beluga_region_info ri;
	struct beluga_info info;
	int r;

	if (variant->backend == BELUGA_BACKEND_NODE)
		r = bt_attach_req(&a2, BELUGA_BACKEND_NODE, 0, 0, BT_REGION_LEN,
				  BT_BLOCK_SIZE, "bt-map2");
	else if (bt_backend_ok(BELUGA_BACKEND_DAX, 0, 2 * BT_REGION_LEN, why,
			       sizeof(why)))
		r = bt_attach_req(&a2, BELUGA_BACKEND_DAX, 0, BT_REGION_LEN,
				  BT_REGION_LEN, BT_BLOCK_SIZE, "bt-map2");
	else
		SKIP(return, "%s", why);
	ASSERT_EQ(0, r);
	r = bt_attach(self->c.fd, &a2);
	ASSERT_EQ(0, r) TH_LOG("second ATTACH: %s", strerror(-r));
	ASSERT_EQ(0, bt_region_info(self->c.fd, a2.region_id, &ri));
	EXPECT_EQ(0, ri.mappings) TH_LOG("the old mapping cannot cover it");
	/* the new region can be detached while the first is mapped */
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	ASSERT_LE(a2.first_offset + a2.nr_blocks * BT_BLOCK_SIZE, info.map_size);
	q = mmap(NULL, a2.nr_blocks * BT_BLOCK_SIZE, PROT_READ | PROT_WRITE,
		 MAP_SHARED, self->c.fd, a2.first_offset);
	ASSERT_NE(MAP_FAILED, q) TH_LOG("mmap of the second region: %s",
					strerror(errno));
	q[0] = 7;
	ASSERT_EQ(0, bt_region_info(self->c.fd, a2.region_id, &ri));
	EXPECT_EQ(1, ri.mappings);
	EXPECT_EQ(1, mappings_of(&self->c))
		TH_LOG("a mapping of region 2 must not count in region 1");
	munmap(q, a2.nr_blocks * BT_BLOCK_SIZE);
	r = bt_detach(self->c.fd, a2.region_id, 0, NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH of the unmapped second region: %s",
			       strerror(-r));
	p[0] = 1;	/* the first mapping still works */
}

/* ------------------------------------------------------------------ */
/* Device-dax placement.                                                 */

FIXTURE(daxmap) {
	struct bt_ctx c;
};

FIXTURE_SETUP(daxmap)
{
	if (!bt_setup(&self->c, BELUGA_BACKEND_DAX, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
}

FIXTURE_TEARDOWN(daxmap)
{
	bt_teardown(&self->c);
}

/* Device-dax: a 2 MiB aligned hint gives a 2 MiB aligned mapping. */
TEST_F(daxmap, aligned_hint)
{
	size_t len = self->c.info.map_size;
	char *res, *hint, *p;
	uint64_t o;

	ASSERT_LE(BT_PMD, len);
	ASSERT_EQ(0, self->c.att[0].first_offset % BT_PMD);
	/* find a free, aligned spot, then give it back and use it as a hint */
	res = mmap(NULL, len + 2 * BT_PMD, PROT_NONE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, res);
	hint = (char *)(((uintptr_t)res + BT_PMD - 1) & ~(uintptr_t)(BT_PMD - 1));
	munmap(res, len + 2 * BT_PMD);
	p = mmap(hint, len, PROT_READ | PROT_WRITE, MAP_SHARED, self->c.fd, 0);
	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap with hint: %s", strerror(errno));
	self->c.map = p;
	self->c.map_len = len;
	EXPECT_EQ(0, (uintptr_t)p % BT_PMD)
		TH_LOG("mapping at %p is not 2 MiB aligned (hint %p)", p, hint);
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	bt_fill(p + o, 256, 99);
	EXPECT_EQ(-1, bt_check(p + o, 256, 99));
	bt_unmap(&self->c);

	/*
	 * Without a hint: "the kernel picks a 2 MiB aligned address for
	 * mappings of 2 MiB or more at a 2 MiB aligned offset".
	 */
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, self->c.fd, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, (uintptr_t)p % BT_PMD)
		TH_LOG("mapping without a hint at %p is not 2 MiB aligned", p);
	munmap(p, len);
	/* the same for a 2 MiB piece at a 2 MiB aligned offset */
	p = mmap(NULL, BT_PMD, PROT_READ, MAP_SHARED, self->c.fd,
		 self->c.att[0].first_offset);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, (uintptr_t)p % BT_PMD)
		TH_LOG("2 MiB mapping at %p is not 2 MiB aligned", p);
	munmap(p, BT_PMD);
}

TEST_HARNESS_MAIN
