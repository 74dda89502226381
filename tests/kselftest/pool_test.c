// SPDX-License-Identifier: GPL-2.0
/*
 * Pool semantics: geometry, ALLOC/FREE, PUBLISH/LOOKUP/RELEASE, per-item
 * publish results, ownership by open file, LRU eviction under pressure,
 * and round-robin striping across regions. Each test runs on a NUMA-node
 * region and on a device-dax region (variants node / dax).
 */
#include "beluga_test.h"

#define NBLK_MAX	64

FIXTURE(pool) {
	struct bt_ctx c;
	uint64_t ns;
	uint64_t total;		/* blocks in the pool */
	uint64_t bs;
};

FIXTURE_VARIANT(pool) {
	int backend;
};

FIXTURE_VARIANT_ADD(pool, node) {
	.backend = BELUGA_BACKEND_NODE,
};

FIXTURE_VARIANT_ADD(pool, dax) {
	.backend = BELUGA_BACKEND_DAX,
};

FIXTURE_SETUP(pool)
{
	if (!bt_setup(&self->c, variant->backend, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->ns = bt_ns(0x9001);
	self->total = self->c.att[0].nr_blocks;
	self->bs = self->c.info.block_size;
	ASSERT_LE(4, self->total);
	ASSERT_GE(NBLK_MAX, self->total)
		TH_LOG("the tests assume a small pool (2 MiB of 64 KiB blocks)");
}

FIXTURE_TEARDOWN(pool)
{
	bt_teardown(&self->c);
}

TEST_F(pool, geometry)
{
	const struct beluga_attach *a = &self->c.att[0];
	struct beluga_region_info ri;
	struct beluga_stats st;
	struct beluga_info *in = &self->c.info;

	ASSERT_EQ(BT_BLOCK_SIZE, in->block_size);
	EXPECT_EQ(1, in->nr_regions);
	EXPECT_EQ(a->nr_blocks, in->nr_blocks);
	EXPECT_LE(a->nr_blocks * BT_BLOCK_SIZE, BT_REGION_LEN);
	EXPECT_LE(a->first_offset + a->nr_blocks * BT_BLOCK_SIZE, in->map_size);
	EXPECT_EQ(0, in->map_size % BT_PAGE);
	EXPECT_LT(a->region_id, BELUGA_MAX_REGIONS);

	ASSERT_EQ(0, bt_region_info(self->c.fd, a->region_id, &ri));
	EXPECT_EQ(variant->backend, ri.backend);
	EXPECT_EQ(a->first_offset, ri.first_offset);
	EXPECT_EQ(a->nr_blocks, ri.nr_blocks);
	EXPECT_EQ(BT_REGION_LEN, ri.length);
	EXPECT_EQ(a->nr_blocks, ri.free_blocks);
	EXPECT_EQ(0, ri.allocated_blocks);
	EXPECT_EQ(0, ri.published_blocks);
	EXPECT_EQ(0, ri.mappings);
	EXPECT_STREQ(a->name, ri.name);
	if (variant->backend == BELUGA_BACKEND_DAX) {
		EXPECT_EQ(a->phys_start, ri.phys_start);
	} else {
		EXPECT_EQ(0, ri.phys_start);
		EXPECT_EQ(a->node, ri.node);
	}

	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	ASSERT_STATS_CONSISTENT(st);
	EXPECT_EQ(a->nr_blocks, st.total_blocks);
	EXPECT_EQ(a->nr_blocks, st.free_blocks);
	EXPECT_EQ(0, st.allocated_blocks);
	EXPECT_EQ(0, st.published_blocks);
	EXPECT_EQ(0, st.pins);
	EXPECT_LE(1, st.clients);
}

TEST_F(pool, alloc_free)
{
	struct beluga_stats s0, s1;
	struct beluga_region_info ri;
	uint64_t o[4];
	int i, j;

	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	ASSERT_EQ(0, bt_alloc(self->c.fd, 4, o));
	for (i = 0; i < 4; i++) {
		ASSERT_TRUE(bt_is_block(&self->c, o[i]))
			TH_LOG("offset 0x%llx is not a block of the region",
			       (unsigned long long)o[i]);
		for (j = 0; j < i; j++)
			ASSERT_NE(o[j], o[i]) TH_LOG("block handed out twice");
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_STATS_CONSISTENT(s1);
	EXPECT_EQ(s0.free_blocks - 4, s1.free_blocks);
	EXPECT_EQ(4, s1.allocated_blocks);
	EXPECT_EQ(s0.allocs + 4, s1.allocs);
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[0].region_id, &ri));
	EXPECT_EQ(4, ri.allocated_blocks);

	ASSERT_EQ(0, bt_free(self->c.fd, 4, o));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.free_blocks, s1.free_blocks);
	EXPECT_EQ(0, s1.allocated_blocks);
	EXPECT_EQ(s0.frees + 4, s1.frees);
}

TEST_F(pool, alloc_all_or_nothing)
{
	uint64_t o[NBLK_MAX + 1];
	struct beluga_stats s0, s1;
	uint64_t i, j;
	int r;

	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	r = bt_alloc(self->c.fd, self->total + 1, o);
	ASSERT_EQ(-ENOSPC, r) TH_LOG("ALLOC of total+1: %s", strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_OCCUPANCY_EQ(s0, s1);
	EXPECT_EQ(s0.alloc_failures + 1, s1.alloc_failures);

	ASSERT_EQ(0, bt_alloc(self->c.fd, self->total, o));
	for (i = 0; i < self->total; i++)
		for (j = 0; j < i; j++)
			ASSERT_NE(o[i], o[j]);
	r = bt_alloc(self->c.fd, 1, &o[self->total]);
	ASSERT_EQ(-ENOSPC, r) TH_LOG("ALLOC from a full pool: %s", strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(0, s1.free_blocks);
	EXPECT_EQ(self->total, s1.allocated_blocks);
	ASSERT_EQ(0, bt_free(self->c.fd, self->total, o));
}

TEST_F(pool, free_rules)
{
	int fd2 = bt_open(O_RDWR);
	uint64_t o[3], other, pub, list[2];
	struct beluga_stats s0, s1;
	int32_t res;
	int r;

	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, bt_alloc(self->c.fd, 3, o));
	ASSERT_EQ(0, bt_alloc(fd2, 1, &other));
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &pub));
	ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, pub, bt_key(self->ns, 1),
				 &res));
	ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));

	/* not on a block boundary, past the pool, another file's, published */
	list[0] = o[0] + 8;
	r = bt_free(self->c.fd, 1, list);
	EXPECT_EQ(-EINVAL, r) TH_LOG("misaligned offset: %s", strerror(-r));
	list[0] = self->c.info.map_size + self->bs * 16;
	r = bt_free(self->c.fd, 1, list);
	EXPECT_EQ(-EINVAL, r) TH_LOG("offset past the pool: %s", strerror(-r));
	r = bt_free(self->c.fd, 1, &other);
	EXPECT_EQ(-EINVAL, r) TH_LOG("another file's block: %s", strerror(-r));
	r = bt_free(self->c.fd, 1, &pub);
	EXPECT_EQ(-EINVAL, r) TH_LOG("published block: %s", strerror(-r));
	/* all or nothing: one good and one bad offset frees neither */
	list[0] = o[0];
	list[1] = other;
	r = bt_free(self->c.fd, 2, list);
	EXPECT_EQ(-EINVAL, r) TH_LOG("good+bad: %s", strerror(-r));
	/* the same block twice in one call is not two allocations */
	list[0] = o[1];
	list[1] = o[1];
	r = bt_free(self->c.fd, 2, list);
	EXPECT_EQ(-EINVAL, r) TH_LOG("duplicate offset: %s", strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_OCCUPANCY_EQ(s0, s1);

	/* the good blocks are still ours: freed exactly once */
	ASSERT_EQ(0, bt_free(self->c.fd, 3, o));
	r = bt_free(self->c.fd, 1, &o[0]);
	EXPECT_EQ(-EINVAL, r) TH_LOG("double free: %s", strerror(-r));
	ASSERT_EQ(0, bt_free(fd2, 1, &other));
	close(fd2);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(0, s1.allocated_blocks);
	EXPECT_EQ(1, s1.published_blocks);
}

/* Allocate @n blocks and publish them as a chain, one call per block. */
static int publish_chain(int fd, uint64_t ns, int n, uint64_t salt,
			 uint64_t *offs, struct beluga_key *keys)
{
	int i, r;
	int32_t res;

	r = bt_alloc(fd, n, offs);
	if (r)
		return r;
	for (i = 0; i < n; i++) {
		keys[i] = bt_key(salt, i);
		r = bt_publish1(fd, ns, offs[i], keys[i], &res);
		if (r)
			return r;
		if (res != BELUGA_PUBLISH_OK)
			return -EEXIST;
	}
	return 0;
}

TEST_F(pool, publish_lookup_chain)
{
	struct beluga_publish_item it[6];
	struct beluga_key k[6];
	struct beluga_publish p;
	struct beluga_stats s0, s1;
	uint64_t o[6], got[6];
	uint32_t hits;
	int i;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 6, o));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	memset(it, 0, sizeof(it));
	for (i = 0; i < 6; i++) {
		k[i] = bt_key(self->ns, i);
		it[i].offset = o[i];
		it[i].key = k[i];
		it[i].result = 0x55;
	}
	ASSERT_EQ(0, bt_publish(self->c.fd, self->ns, it, 6, &p));
	EXPECT_EQ(6, p.published);
	EXPECT_EQ(0, p.exists);
	EXPECT_EQ(0, p.failed);
	for (i = 0; i < 6; i++)
		EXPECT_EQ(BELUGA_PUBLISH_OK, it[i].result);

	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_STATS_CONSISTENT(s1);
	EXPECT_EQ(6, s1.published_blocks);
	EXPECT_EQ(0, s1.allocated_blocks);
	EXPECT_EQ(s0.publishes + 6, s1.publishes);

	s0 = s1;
	memset(got, 0xff, sizeof(got));
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, k, 6, got, 0, &hits));
	ASSERT_EQ(6, hits);
	for (i = 0; i < 6; i++)
		EXPECT_EQ(o[i], got[i]) TH_LOG("key %d maps to another block", i);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.lookups + 1, s1.lookups);
	EXPECT_EQ(s0.lookup_keys + 6, s1.lookup_keys);
	EXPECT_EQ(s0.lookup_hits + 6, s1.lookup_hits);
	EXPECT_EQ(0, s1.pins) TH_LOG("a lookup without PIN pinned something");
}

TEST_F(pool, lookup_leading_run)
{
	struct beluga_key k[5], q[6];
	uint64_t o[5], got[6];
	struct beluga_key miss = bt_key(self->ns, 999);
	struct beluga_stats s0, s1;
	uint32_t hits;

	ASSERT_EQ(0, publish_chain(self->c.fd, self->ns, 5, self->ns, o, k));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));

	/* K0 K1 miss K3: only the leading run counts */
	q[0] = k[0]; q[1] = k[1]; q[2] = miss; q[3] = k[3];
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, q, 4, got, 0, &hits));
	EXPECT_EQ(2, hits);
	EXPECT_EQ(o[0], got[0]);
	EXPECT_EQ(o[1], got[1]);
	/* a miss first: nothing */
	q[0] = miss; q[1] = k[0];
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, q, 2, got, 0, &hits));
	EXPECT_EQ(0, hits);
	/* all five then a miss */
	memcpy(q, k, sizeof(k));
	q[5] = miss;
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, q, 6, NULL, 0, &hits));
	EXPECT_EQ(5, hits);
	/* with PIN: one pin per hit, only on the leading run */
	q[0] = k[0]; q[1] = k[1]; q[2] = miss; q[3] = k[3];
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, q, 4, got,
			       BELUGA_LOOKUP_PIN, &hits));
	EXPECT_EQ(2, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(2, s1.pins);
	EXPECT_EQ(2, s1.pinned_blocks);
	EXPECT_EQ(s0.lookups + 4, s1.lookups);
	EXPECT_EQ(s0.lookup_keys + 4 + 2 + 6 + 4, s1.lookup_keys);
	EXPECT_EQ(s0.lookup_hits + 2 + 0 + 5 + 2, s1.lookup_hits);
	ASSERT_EQ(0, bt_release(self->c.fd, 2, got));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(0, s1.pins);
	EXPECT_EQ(0, s1.pinned_blocks);
	EXPECT_EQ(s0.releases + 2, s1.releases);
}

TEST_F(pool, namespaces_are_separate)
{
	uint64_t ns2 = self->ns ^ 0x1234567ULL;
	struct beluga_key k = bt_key(self->ns, 42), k2;
	uint64_t o[2], got;
	uint32_t hits;
	int32_t res;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o));
	ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, o[0], k, &res));
	ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	EXPECT_EQ(0, bt_present(self->c.fd, ns2, k));
	/* the same key in another namespace is a different entry */
	ASSERT_EQ(0, bt_publish1(self->c.fd, ns2, o[1], k, &res));
	EXPECT_EQ(BELUGA_PUBLISH_OK, res);
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns2, &k, 1, &got, 0, &hits));
	ASSERT_EQ(1, hits);
	EXPECT_EQ(o[1], got);
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, &k, 1, &got, 0, &hits));
	ASSERT_EQ(1, hits);
	EXPECT_EQ(o[0], got);
	/* keys differing only in the high half are different */
	k2 = k;
	k2.hi ^= 1;
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, k2));
}

TEST_F(pool, publish_item_results)
{
	int fd2 = bt_open(O_RDWR);
	struct beluga_publish_item it[7];
	struct beluga_publish p;
	struct beluga_stats s0, s1;
	uint64_t o[3], other, freed;
	int i;

	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, bt_alloc(self->c.fd, 3, o));
	ASSERT_EQ(0, bt_alloc(fd2, 1, &other));
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &freed));
	ASSERT_EQ(0, bt_free(self->c.fd, 1, &freed));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));

	memset(it, 0, sizeof(it));
	for (i = 0; i < 7; i++)
		it[i].key = bt_key(self->ns, 100 + i);
	it[0].offset = o[0];			/* OK */
	it[1].offset = o[0] + 64;		/* not a block: -EINVAL */
	it[2].offset = other;			/* another file's: -EPERM */
	it[3].offset = freed;			/* FREE block: -EPERM */
	it[4].offset = o[1];			/* same key as item 0: EXISTS */
	it[4].key = it[0].key;
	it[5].offset = o[0];			/* published by item 0: -EPERM */
	it[6].offset = o[2];			/* OK */
	ASSERT_EQ(0, bt_publish(self->c.fd, self->ns, it, 7, &p));
	EXPECT_EQ(BELUGA_PUBLISH_OK, it[0].result);
	EXPECT_EQ(-EINVAL, it[1].result);
	EXPECT_EQ(-EPERM, it[2].result);
	EXPECT_EQ(-EPERM, it[3].result);
	EXPECT_EQ(BELUGA_PUBLISH_EXISTS, it[4].result);
	EXPECT_EQ(-EPERM, it[5].result);
	EXPECT_EQ(BELUGA_PUBLISH_OK, it[6].result);
	EXPECT_EQ(2, p.published);
	EXPECT_EQ(1, p.exists);
	EXPECT_EQ(4, p.failed);

	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_STATS_CONSISTENT(s1);
	EXPECT_EQ(s0.published_blocks + 2, s1.published_blocks);
	/* o[0] and o[2] published, o[1] freed by the lost race */
	EXPECT_EQ(s0.allocated_blocks - 3, s1.allocated_blocks);
	EXPECT_EQ(s0.free_blocks + 1, s1.free_blocks);
	EXPECT_EQ(s0.publishes + 2, s1.publishes);
	EXPECT_EQ(s0.publish_races + 1, s1.publish_races);
	EXPECT_EQ(s0.frees + 1, s1.frees);
	/* the failed items left their blocks alone */
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, it[2].key));
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, it[3].key));
	EXPECT_EQ(0, bt_free(fd2, 1, &other));
	/* o[1] is not ours any more */
	EXPECT_EQ(-EINVAL, bt_free(self->c.fd, 1, &o[1]));
	close(fd2);
}

TEST_F(pool, publish_exists_frees_loser)
{
	struct beluga_key k = bt_key(self->ns, 7);
	struct beluga_stats s0, s1;
	uint64_t o[2], got;
	uint32_t hits;
	int32_t res;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o));
	ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, o[0], k, &res));
	ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, o[1], k, &res));
	ASSERT_EQ(BELUGA_PUBLISH_EXISTS, res);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.allocated_blocks - 1, s1.allocated_blocks);
	EXPECT_EQ(s0.free_blocks + 1, s1.free_blocks);
	EXPECT_EQ(s0.published_blocks, s1.published_blocks);
	EXPECT_EQ(s0.publish_races + 1, s1.publish_races);
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, &k, 1, &got, 0, &hits));
	ASSERT_EQ(1, hits);
	EXPECT_EQ(o[0], got) TH_LOG("the first publisher must keep the key");
}

TEST_F(pool, pin_release_rules)
{
	int fd2 = bt_open(O_RDWR);
	struct beluga_key k[2];
	struct beluga_stats s0, s1;
	uint64_t o[2], got[2], list[3];
	uint32_t hits;
	int r;

	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, publish_chain(self->c.fd, self->ns, 2, self->ns, o, k));
	/* pin k0 twice and k1 once */
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, k, 2, got,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(2, hits);
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, k, 1, got,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	EXPECT_EQ(3, s0.pins);
	EXPECT_EQ(2, s0.pinned_blocks);

	/* more often than pinned: nothing released */
	list[0] = o[1]; list[1] = o[1];
	r = bt_release(self->c.fd, 2, list);
	EXPECT_EQ(-EINVAL, r) TH_LOG("o1 twice, pinned once: %s", strerror(-r));
	list[0] = o[0]; list[1] = o[0]; list[2] = o[0];
	r = bt_release(self->c.fd, 3, list);
	EXPECT_EQ(-EINVAL, r) TH_LOG("o0 thrice, pinned twice: %s", strerror(-r));
	/* another file holds no pins */
	r = bt_release(fd2, 1, &o[0]);
	EXPECT_EQ(-EINVAL, r) TH_LOG("release by another file: %s", strerror(-r));
	/* not a block */
	list[0] = o[0] + 4096;
	r = bt_release(self->c.fd, 1, list);
	EXPECT_EQ(-EINVAL, r) TH_LOG("not a block offset: %s", strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_OCCUPANCY_EQ(s0, s1);

	/* an offset listed as often as it is pinned */
	list[0] = o[0]; list[1] = o[1]; list[2] = o[0];
	ASSERT_EQ(0, bt_release(self->c.fd, 3, list));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(0, s1.pins);
	EXPECT_EQ(0, s1.pinned_blocks);
	EXPECT_EQ(s0.releases + 3, s1.releases);
	r = bt_release(self->c.fd, 1, &o[0]);
	EXPECT_EQ(-EINVAL, r) TH_LOG("release of an unpinned block: %s",
				     strerror(-r));
	close(fd2);
}

TEST_F(pool, close_returns_allocations_and_pins)
{
	struct beluga_key k[2];
	struct beluga_stats s0, s1, s2;
	uint64_t o[2], a[3], got[2];
	uint32_t hits;
	int fd2;

	ASSERT_EQ(0, publish_chain(self->c.fd, self->ns, 2, self->ns, o, k));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	fd2 = bt_open(O_RDWR);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, bt_alloc(fd2, 3, a));
	ASSERT_EQ(0, bt_lookup(fd2, self->ns, k, 2, got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(2, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.clients + 1, s1.clients);
	EXPECT_EQ(3, s1.allocated_blocks);
	EXPECT_EQ(2, s1.pins);
	ASSERT_EQ(0, close(fd2));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s2));
	ASSERT_OCCUPANCY_EQ(s0, s2);
	EXPECT_EQ(s0.clients, s2.clients);
	EXPECT_EQ(s1.frees + 3, s2.frees);
	EXPECT_EQ(s1.releases + 2, s2.releases);
	/* published blocks are not owned by their publisher */
	EXPECT_EQ(2, s2.published_blocks);
}

TEST_F(pool, published_outlive_publisher)
{
	int fd2 = bt_open(O_RDWR), fd3;
	struct beluga_key k[3];
	uint64_t o[3], got[3];
	uint32_t hits;
	int i;

	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, publish_chain(fd2, self->ns, 3, self->ns, o, k));
	ASSERT_EQ(0, close(fd2));
	fd3 = bt_open(O_RDONLY);
	ASSERT_LE(0, fd3);
	ASSERT_EQ(0, bt_lookup(fd3, self->ns, k, 3, got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(3, hits);
	for (i = 0; i < 3; i++)
		EXPECT_EQ(o[i], got[i]);
	close(fd3);
}

/* A child created by fork() shares the file and so its allocations. */
TEST_F(pool, fork_shares_ownership)
{
	uint64_t *shared = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct beluga_stats st;
	pid_t pid;

	ASSERT_NE(MAP_FAILED, shared);
	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		CHILD_CHECK(bt_alloc(self->c.fd, 1, shared) == 0);
		_exit(0);
	}
	ASSERT_EQ(0, bt_wait(&self->c, pid));
	/* the child's exit did not return the block: the file is still open */
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(1, st.allocated_blocks);
	/* and the parent owns it */
	EXPECT_EQ(0, bt_free(self->c.fd, 1, shared));
	munmap(shared, BT_PAGE);
}

/*
 * Fill the pool with published blocks (LRU order = publish order), pin the
 * four oldest, then ALLOC 8 more than are free: the 8 least recently used
 * unpinned blocks are evicted; pinned blocks keep their keys and bytes.
 */
TEST_F(pool, eviction_lru_spares_pinned)
{
	const int npin = 4, nnew = 8;
	uint64_t n = self->total, i;
	uint64_t o[NBLK_MAX], got[NBLK_MAX], fresh[8];
	struct beluga_key k[NBLK_MAX];
	struct beluga_stats s0, s1;
	char *map = bt_map(&self->c);
	uint32_t hits;
	int32_t res;

	ASSERT_LE(npin + nnew + 2, n);
	ASSERT_EQ(0, bt_alloc(self->c.fd, n, o));
	for (i = 0; i < n; i++) {
		k[i] = bt_key(self->ns, i);
		bt_fill(map + o[i], 256, k[i].lo);
		ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, o[i], k[i], &res));
		ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	}
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, k, npin, got,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(npin, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	ASSERT_EQ(0, s0.free_blocks);
	ASSERT_EQ(n, s0.published_blocks);

	ASSERT_EQ(0, bt_alloc(self->c.fd, nnew, fresh))
		TH_LOG("ALLOC must evict unpinned published blocks");
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_STATS_CONSISTENT(s1);
	EXPECT_EQ(s0.evictions + nnew, s1.evictions);
	EXPECT_EQ(n - nnew, s1.published_blocks);
	EXPECT_EQ(nnew, s1.allocated_blocks);
	EXPECT_EQ(npin, s1.pinned_blocks);

	/* the evicted ones are the oldest unpinned: keys npin..npin+nnew-1 */
	for (i = 0; i < n; i++) {
		int want = (i >= (uint64_t)npin && i < (uint64_t)(npin + nnew)) ?
			   0 : 1;

		EXPECT_EQ(want, bt_present(self->c.fd, self->ns, k[i]))
			TH_LOG("key %llu: LRU order not respected",
			       (unsigned long long)i);
	}
	/* new blocks never alias a pinned one; overwrite them all */
	for (i = 0; i < (uint64_t)nnew; i++) {
		int j;

		for (j = 0; j < npin; j++)
			ASSERT_NE(got[j], fresh[i]) TH_LOG("pinned block reused");
		bt_fill(map + fresh[i], 256, 0xdead0000 + i);
	}
	/* pinned blocks keep their keys, offsets and bytes */
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, k, npin, o, 0, &hits));
	ASSERT_EQ(npin, hits);
	for (i = 0; i < (uint64_t)npin; i++) {
		EXPECT_EQ(got[i], o[i]);
		EXPECT_EQ(-1, bt_check(map + got[i], 256, k[i].lo))
			TH_LOG("pinned block %llu lost its bytes",
			       (unsigned long long)i);
	}
	ASSERT_EQ(0, bt_release(self->c.fd, npin, got));
	ASSERT_EQ(0, bt_free(self->c.fd, nnew, fresh));
}

static bool same_key(const struct beluga_key *a, const struct beluga_key *b)
{
	return a->lo == b->lo && a->hi == b->hi;
}

/*
 * BELUGA_ALLOC_EVICTED: an ALLOC that evicts names what it evicted, (ns,
 * key) least recently used first, across namespaces, never a pinned
 * block; one that finds free blocks names nothing; one that fails
 * (-ENOSPC) evicts nothing and leaves the struct as it was.
 */
TEST_F(pool, eviction_reports_keys)
{
	const uint32_t nnew = 3;
	uint64_t n = self->total, i, ns[NBLK_MAX];
	uint64_t o[NBLK_MAX], pin, fresh[NBLK_MAX];
	struct beluga_evicted_key ev[NBLK_MAX];
	struct beluga_key k[NBLK_MAX];
	struct beluga_stats s0, s1;
	uint32_t hits, nr, j;
	int32_t res;
	int r;

	ASSERT_LE(nnew + 2, n);
	/* free blocks: nothing evicted, nr_evicted 0 */
	nr = 77;
	ASSERT_EQ(0, bt_alloc_evicted(self->c.fd, 2, o, ev, &nr));
	EXPECT_EQ(0, nr);
	ASSERT_EQ(0, bt_free(self->c.fd, 2, o));

	/* the pool full of published keys, two namespaces in turn */
	ASSERT_EQ(0, bt_alloc(self->c.fd, n, o));
	for (i = 0; i < n; i++) {
		ns[i] = i % 2 ? bt_ns(0x9002) : self->ns;
		k[i] = bt_key(ns[i], i);
		ASSERT_EQ(0, bt_publish1(self->c.fd, ns[i], o[i], k[i], &res));
		ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	}
	/* the oldest pinned: passed over */
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns[0], &k[0], 1, &pin,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	ASSERT_EQ(0, s0.free_blocks);

	nr = 77;
	r = bt_alloc_evicted(self->c.fd, nnew, fresh, ev, &nr);
	ASSERT_EQ(0, r) TH_LOG("ALLOC EVICTED on a full pool: %s",
			       strerror(-r));
	ASSERT_EQ(nnew, nr);
	for (j = 0; j < nr; j++) {
		EXPECT_EQ(ns[j + 1], ev[j].ns) TH_LOG("entry %u: ns", j);
		EXPECT_TRUE(same_key(&k[j + 1], &ev[j].key))
			TH_LOG("entry %u: not key %u, the LRU's next", j, j + 1);
		EXPECT_EQ(0, bt_present(self->c.fd, ns[j + 1], k[j + 1]));
	}
	EXPECT_EQ(1, bt_present(self->c.fd, ns[0], k[0]));
	EXPECT_EQ(1, bt_present(self->c.fd, ns[nnew + 1], k[nnew + 1]));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.evictions + nnew, s1.evictions);

	/* more than free plus evictable: -ENOSPC, nothing evicted or said */
	nr = 77;
	r = bt_alloc_evicted(self->c.fd, n, o, ev, &nr);
	ASSERT_EQ(-ENOSPC, r) TH_LOG("ALLOC EVICTED of the whole pool: %s",
				     strerror(-r));
	EXPECT_EQ(77, nr) TH_LOG("the struct was written on -ENOSPC");
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	EXPECT_EQ(s1.evictions, s0.evictions);
	ASSERT_OCCUPANCY_EQ(s1, s0);
	for (i = nnew + 1; i < n; i++)
		EXPECT_EQ(1, bt_present(self->c.fd, ns[i], k[i]));

	ASSERT_EQ(0, bt_release(self->c.fd, 1, &pin));
	ASSERT_EQ(0, bt_free(self->c.fd, nnew, fresh));
}

/* With everything pinned or allocated, ALLOC fails and changes nothing. */
TEST_F(pool, eviction_enospc_when_all_pinned)
{
	uint64_t n = self->total;
	uint64_t o[NBLK_MAX], got[NBLK_MAX], x[2];
	struct beluga_key k[NBLK_MAX];
	struct beluga_stats s0, s1;
	uint32_t hits;
	int r;

	/* half published and pinned, half allocated */
	ASSERT_EQ(0, publish_chain(self->c.fd, self->ns, n / 2, self->ns, o, k));
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, k, n / 2, got,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(n / 2, hits);
	ASSERT_EQ(0, bt_alloc(self->c.fd, n - n / 2, o));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	ASSERT_EQ(0, s0.free_blocks);

	r = bt_alloc(self->c.fd, 1, x);
	ASSERT_EQ(-ENOSPC, r) TH_LOG("ALLOC with all blocks pinned: %s",
				     strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_OCCUPANCY_EQ(s0, s1);
	EXPECT_EQ(s0.evictions, s1.evictions);
	EXPECT_EQ(s0.alloc_failures + 1, s1.alloc_failures);

	/* release one pin: exactly one block becomes evictable */
	ASSERT_EQ(0, bt_release(self->c.fd, 1, got));
	r = bt_alloc(self->c.fd, 2, x);
	ASSERT_EQ(-ENOSPC, r) TH_LOG("ALLOC 2 with 1 evictable: %s", strerror(-r));
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, x));
	EXPECT_EQ(got[0], x[0]) TH_LOG("the only evictable block was not used");
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, k[0]));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, k[1]));
}

/* ------------------------------------------------------------------ */
/* Striping: two regions, allocations alternate between them.            */

FIXTURE(stripe) {
	struct bt_ctx c;
};

FIXTURE_VARIANT(stripe) {
	int backend;
};

FIXTURE_VARIANT_ADD(stripe, node) {
	.backend = BELUGA_BACKEND_NODE,
};

FIXTURE_VARIANT_ADD(stripe, dax) {
	.backend = BELUGA_BACKEND_DAX,
};

FIXTURE_SETUP(stripe)
{
	char why[160];
	int r, idx = 0;
	uint64_t skip = 0;

	if (!bt_setup(&self->c, variant->backend, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	if (variant->backend == BELUGA_BACKEND_DAX) {
		/* a second device if listed, else a second slice of the first */
		if (bt_backend_ok(BELUGA_BACKEND_DAX, 1, BT_REGION_LEN, why,
				  sizeof(why)))
			idx = 1;
		else if (bt_backend_ok(BELUGA_BACKEND_DAX, 0, 2 * BT_REGION_LEN,
				       why, sizeof(why)))
			skip = BT_REGION_LEN;
		else
			SKIP(return, "second dax region: %s", why);
		ASSERT_EQ(0, bt_attach_req(&self->c.att[1], BELUGA_BACKEND_DAX,
					   idx, skip, BT_REGION_LEN,
					   BT_BLOCK_SIZE, "bt-stripe1"));
	} else {
		ASSERT_EQ(0, bt_attach_req(&self->c.att[1], BELUGA_BACKEND_NODE,
					   0, 0, BT_REGION_LEN, BT_BLOCK_SIZE,
					   "bt-stripe1"));
	}
	r = bt_attach(self->c.fd, &self->c.att[1]);
	ASSERT_EQ(0, r) TH_LOG("second ATTACH: %s", strerror(-r));
	self->c.nr = 2;
	ASSERT_EQ(0, bt_info(self->c.fd, &self->c.info));
	ASSERT_EQ(2, self->c.info.nr_regions);
}

FIXTURE_TEARDOWN(stripe)
{
	bt_teardown(&self->c);
}

TEST_F(stripe, regions_disjoint)
{
	const struct beluga_attach *a = self->c.att;
	uint64_t bs = self->c.info.block_size;

	EXPECT_NE(a[0].region_id, a[1].region_id);
	EXPECT_TRUE(a[0].first_offset + a[0].nr_blocks * bs <= a[1].first_offset ||
		    a[1].first_offset + a[1].nr_blocks * bs <= a[0].first_offset)
		TH_LOG("offset ranges of the two regions overlap");
	EXPECT_EQ(a[0].nr_blocks + a[1].nr_blocks, self->c.info.nr_blocks);
	EXPECT_LE(a[1].first_offset + a[1].nr_blocks * bs, self->c.info.map_size);
}

TEST_F(stripe, single_allocs_alternate)
{
	uint64_t o[8];
	int i, prev = -1, cnt[2] = { 0, 0 };

	for (i = 0; i < 8; i++) {
		int reg;

		ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o[i]));
		reg = bt_region_of(&self->c, o[i]);
		ASSERT_LE(0, reg);
		cnt[reg]++;
		if (prev >= 0)
			EXPECT_NE(prev, reg)
				TH_LOG("alloc %d came from the same region as "
				       "the one before", i);
		prev = reg;
	}
	EXPECT_EQ(4, cnt[0]);
	EXPECT_EQ(4, cnt[1]);
	ASSERT_EQ(0, bt_free(self->c.fd, 8, o));
}

TEST_F(stripe, batch_alloc_alternates)
{
	struct beluga_region_info r0, r1;
	uint64_t o[8];
	int i;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 8, o));
	for (i = 1; i < 8; i++)
		EXPECT_NE(bt_region_of(&self->c, o[i - 1]),
			  bt_region_of(&self->c, o[i]))
			TH_LOG("offsets %d and %d of one batch share a region",
			       i - 1, i);
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[0].region_id, &r0));
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[1].region_id, &r1));
	EXPECT_EQ(4, r0.allocated_blocks);
	EXPECT_EQ(4, r1.allocated_blocks);
	ASSERT_EQ(0, bt_free(self->c.fd, 8, o));
}

/* When one region is full, allocation continues from the other. */
TEST_F(stripe, full_region_is_skipped)
{
	uint64_t n0 = self->c.att[0].nr_blocks, n1 = self->c.att[1].nr_blocks;
	uint64_t o[2 * NBLK_MAX];
	struct beluga_region_info r0, r1;

	ASSERT_GE(2 * NBLK_MAX, n0 + n1);
	ASSERT_EQ(0, bt_alloc(self->c.fd, n0 + n1, o));
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[0].region_id, &r0));
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[1].region_id, &r1));
	EXPECT_EQ(0, r0.free_blocks);
	EXPECT_EQ(0, r1.free_blocks);
	EXPECT_EQ(n0, r0.allocated_blocks);
	EXPECT_EQ(n1, r1.allocated_blocks);
	ASSERT_EQ(0, bt_free(self->c.fd, n0 + n1, o));
}

/* One mapping over both regions counts in both. */
TEST_F(stripe, mapping_counts_in_each_region)
{
	struct beluga_region_info r0, r1;
	char *p = bt_map(&self->c);
	uint64_t o[2];

	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[0].region_id, &r0));
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[1].region_id, &r1));
	EXPECT_EQ(1, r0.mappings);
	EXPECT_EQ(1, r1.mappings);
	/* both regions are reachable through it */
	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o));
	EXPECT_NE(bt_region_of(&self->c, o[0]), bt_region_of(&self->c, o[1]));
	bt_fill(p + o[0], 256, 1);
	bt_fill(p + o[1], 256, 2);
	EXPECT_EQ(-1, bt_check(p + o[0], 256, 1));
	EXPECT_EQ(-1, bt_check(p + o[1], 256, 2));
	bt_unmap(&self->c);
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[0].region_id, &r0));
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[1].region_id, &r1));
	EXPECT_EQ(0, r0.mappings);
	EXPECT_EQ(0, r1.mappings);
}

/* ------------------------------------------------------------------ */
/* Full-size batches: BELUGA_MAX_BATCH blocks through every command.     */

FIXTURE(bigbatch) {
	struct bt_ctx c;
};

FIXTURE_SETUP(bigbatch)
{
	/* 16 MiB of 4 KiB blocks = 4096 = BELUGA_MAX_BATCH */
	if (!bt_setup(&self->c, BT_ANY_BACKEND, 16 * BT_MIB, BT_PAGE))
		return;
	ASSERT_EQ(BELUGA_MAX_BATCH, self->c.att[0].nr_blocks);
}

FIXTURE_TEARDOWN(bigbatch)
{
	bt_teardown(&self->c);
}

TEST_F_TIMEOUT(bigbatch, max_batch_round_trip, 120)
{
	const uint32_t n = BELUGA_MAX_BATCH;
	uint64_t ns = bt_ns(0xb16), *o, *got;
	struct beluga_publish_item *it;
	struct beluga_key *k;
	struct beluga_publish p;
	struct beluga_stats st;
	struct beluga_evict e;
	uint32_t i, hits;
	int fd2;

	o = calloc(n, sizeof(*o));
	got = calloc(n, sizeof(*got));
	it = calloc(n, sizeof(*it));
	k = calloc(n, sizeof(*k));
	ASSERT_TRUE(o && got && it && k);

	ASSERT_EQ(0, bt_alloc(self->c.fd, n, o));
	for (i = 0; i < n; i++) {
		ASSERT_TRUE(bt_is_block(&self->c, o[i]));
		k[i] = bt_key(ns, i);
		it[i].offset = o[i];
		it[i].key = k[i];
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(0, st.free_blocks);
	ASSERT_EQ(0, bt_publish(self->c.fd, ns, it, n, &p));
	EXPECT_EQ(n, p.published);
	for (i = 0; i < n; i++)
		ASSERT_EQ(BELUGA_PUBLISH_OK, it[i].result) TH_LOG("item %u", i);
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, k, n, got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(n, hits);
	for (i = 0; i < n; i++)
		ASSERT_EQ(o[i], got[i]) TH_LOG("key %u", i);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(n, st.pins);
	EXPECT_EQ(n, st.pinned_blocks);

	/* a second file pins them all too; the first lets go */
	fd2 = bt_open(O_RDONLY);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, bt_lookup(fd2, ns, k, n, got, BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(n, hits);
	ASSERT_EQ(0, bt_release(self->c.fd, n, o));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(n, st.pins);
	EXPECT_EQ(n, st.pinned_blocks);
	EXPECT_EQ(-ENOSPC, bt_alloc(self->c.fd, 1, got));
	close(fd2);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(0, st.pins);
	ASSERT_EQ(0, bt_evict_ns(self->c.fd, ns, &e));
	EXPECT_EQ(n, e.evicted);
	EXPECT_EQ(0, e.busy);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(n, st.free_blocks);
	free(o);
	free(got);
	free(it);
	free(k);
}

TEST_HARNESS_MAIN
