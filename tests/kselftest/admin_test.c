// SPDX-License-Identifier: GPL-2.0
/*
 * Administration: ATTACH validation for both backends, block size rules,
 * region slots, DETACH refusals and BELUGA_DETACH_EVICT, EVICT by key and
 * by namespace, EPERM for unprivileged callers, and module unload refused
 * while /dev/beluga is open (plus an opt-in unload/reload cycle).
 */
#include "beluga_test.h"

#include <grp.h>

#ifndef MODULE_INIT_COMPRESSED_FILE
#define MODULE_INIT_COMPRESSED_FILE	4
#endif

/* ------------------------------------------------------------------ */
/* An empty pool; each test attaches what it needs.                     */

FIXTURE(admin) {
	struct bt_ctx c;
};

FIXTURE_SETUP(admin)
{
	bt_ctx_init(&self->c);
	bt_setup_empty(&self->c);
}

FIXTURE_TEARDOWN(admin)
{
	bt_teardown(&self->c);
}

static int nr_regions(int fd)
{
	struct beluga_info info;
	int r = bt_info(fd, &info);

	return r ? r : (int)info.nr_regions;
}

#define EXPECT_ATTACH_ERR(fd, req, want, what) do {			\
	struct beluga_attach __a = (req);				\
	int __r = bt_attach((fd), &__a);				\
	EXPECT_EQ((want), __r) TH_LOG("%s: %s", (what), strerror(-__r)); \
	if (!__r)							\
		bt_detach((fd), __a.region_id, BELUGA_DETACH_EVICT, NULL); \
} while (0)

#define EXPECT_ATTACH_ERR2(fd, req, want1, want2, what) do {		\
	struct beluga_attach __a = (req);				\
	int __r = bt_attach((fd), &__a);				\
	EXPECT_TRUE(__r == (want1) || __r == (want2))			\
		TH_LOG("%s: %s", (what), strerror(-__r));		\
	if (!__r)							\
		bt_detach((fd), __a.region_id, BELUGA_DETACH_EVICT, NULL); \
} while (0)

TEST_F(admin, attach_dax_validation)
{
	struct beluga_attach ok, a;
	struct beluga_region_info ri;
	uint64_t phys, size;
	char names[BT_MAX_DAX][64];
	char why[160];
	int r;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, 2 * BT_REGION_LEN, why,
			   sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_attach_req(&ok, BELUGA_BACKEND_DAX, 0, 0, BT_REGION_LEN,
				   BT_BLOCK_SIZE, "bt-dax"));
	bt_env_dax(names);
	ASSERT_EQ(0, bt_dax_geometry(names[0], &phys, &size));

	a = ok; a.phys_start += BT_PAGE;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "phys_start + 4 KiB");
	a = ok; a.phys_start += BT_MIB;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "phys_start + 1 MiB");
	a = ok; a.length = 0;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "length 0");
	a = ok; a.length = BT_REGION_LEN + BT_PAGE;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "length 2 MiB + 4 KiB");
	a = ok; a.length = BT_MIB;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "length 1 MiB");
	a = ok; a.node = 0;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "DAX with node 0");
	a = ok; a.backend = 0;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "backend 0");
	a = ok; a.backend = 3;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "backend 3");
	a = ok; a.backend = 0xffffffffU;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "backend ~0");
	a = ok; memset(a.name, 'x', sizeof(a.name));
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "name without NUL");
	a = ok; a.block_size = 4097;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "block size 4097");
	a = ok; a.block_size = 2048;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "block size 2048");
	a = ok; a.block_size = 6000;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "block size 6000");
	a = ok; a.block_size = BELUGA_BLOCK_SIZE_MAX * 2;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "block size 2 GiB");
	a = ok; a.block_size = 4 * BT_MIB;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "2 MiB region of 4 MiB blocks");
	/* System RAM at physical 0, and a range running off the device */
	a = ok; a.phys_start = 0;
	EXPECT_ATTACH_ERR2(self->c.fd, a, -EBUSY, -EINVAL, "phys 0 (System RAM)");
	a = ok; a.phys_start = phys + size - BT_REGION_LEN;
	a.length = 2 * BT_REGION_LEN;
	EXPECT_ATTACH_ERR2(self->c.fd, a, -EBUSY, -EINVAL,
			   "range past the end of the device");
	EXPECT_EQ(0, nr_regions(self->c.fd)) TH_LOG("a refused ATTACH attached");

	/* the valid one, then duplicates */
	a = ok;
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("valid ATTACH: %s", strerror(-r));
	EXPECT_LT(a.region_id, BELUGA_MAX_REGIONS);
	EXPECT_EQ(BT_REGION_LEN / BT_BLOCK_SIZE, a.nr_blocks);
	ASSERT_EQ(0, bt_region_info(self->c.fd, a.region_id, &ri));
	EXPECT_EQ(BELUGA_BACKEND_DAX, ri.backend);
	EXPECT_EQ(ok.phys_start, ri.phys_start);
	EXPECT_EQ(BT_REGION_LEN, ri.length);
	EXPECT_EQ(a.first_offset, ri.first_offset);
	EXPECT_EQ(a.nr_blocks, ri.nr_blocks);
	EXPECT_STREQ("bt-dax", ri.name);
	EXPECT_LE(0, ri.node) TH_LOG("DAX region without a NUMA node");

	{
		struct beluga_attach same = ok, name = ok, over = ok;

		snprintf(same.name, sizeof(same.name), "bt-dax-again");
		EXPECT_ATTACH_ERR(self->c.fd, same, -EEXIST, "the same range");
		name.phys_start += BT_REGION_LEN;	/* other range, same name */
		EXPECT_ATTACH_ERR(self->c.fd, name, -EEXIST, "the same name");
		snprintf(over.name, sizeof(over.name), "bt-dax-over");
		over.length = 2 * BT_REGION_LEN;	/* overlaps the first */
		EXPECT_ATTACH_ERR(self->c.fd, over, -EEXIST, "an overlapping range");
	}
	EXPECT_EQ(1, nr_regions(self->c.fd));
	r = bt_detach(self->c.fd, a.region_id, 0, NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH of the idle region: %s", strerror(-r));
	EXPECT_EQ(0, nr_regions(self->c.fd));
	r = bt_region_info(self->c.fd, a.region_id, &ri);
	EXPECT_EQ(-ENOENT, r);
	r = bt_detach(self->c.fd, a.region_id, 0, NULL);
	EXPECT_EQ(-ENOENT, r) TH_LOG("second DETACH: %s", strerror(-r));
}

TEST_F(admin, attach_node_validation)
{
	struct beluga_attach ok, a, b;
	struct beluga_region_info ri;
	char why[160], want[BELUGA_NAME_LEN];
	int r;

	if (!bt_backend_ok(BELUGA_BACKEND_NODE, 0, 0, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_attach_req(&ok, BELUGA_BACKEND_NODE, 0, 0, BT_REGION_LEN,
				   BT_BLOCK_SIZE, NULL));

	a = ok; a.phys_start = 0x390000000ULL;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "NODE with phys_start");
	a = ok; a.length = 0;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "length 0");
	a = ok; a.length = BT_REGION_LEN + 1;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "length not page aligned");
	a = ok; a.length = 64 * BT_KIB; a.block_size = 0;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL,
			  "64 KiB with the default 2 MiB block size");
	a = ok; a.node = 1000;
	EXPECT_ATTACH_ERR(self->c.fd, a, -ENODEV, "node 1000");
	a = ok; a.node = -1;
	EXPECT_ATTACH_ERR2(self->c.fd, a, -EINVAL, -ENODEV, "NODE with node -1");
	a = ok; memset(a.name, 'n', sizeof(a.name));
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "name without NUL");
	a = ok; a.block_size = 4096 + 512;
	EXPECT_ATTACH_ERR(self->c.fd, a, -EINVAL, "block size 4608");
	EXPECT_EQ(0, nr_regions(self->c.fd)) TH_LOG("a refused ATTACH attached");

	/* an empty name becomes node<N>; a second one clashes by name */
	a = ok;
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("NODE ATTACH: %s", strerror(-r));
	ASSERT_EQ(0, bt_region_info(self->c.fd, a.region_id, &ri));
	snprintf(want, sizeof(want), "node%d", ok.node);
	EXPECT_STREQ(want, ri.name);
	EXPECT_EQ(BELUGA_BACKEND_NODE, ri.backend);
	EXPECT_EQ(ok.node, ri.node);
	EXPECT_EQ(0, ri.phys_start);
	EXPECT_EQ(BT_REGION_LEN, ri.length);
	b = ok;
	EXPECT_ATTACH_ERR(self->c.fd, b, -EEXIST, "a second unnamed region of the node");
	/* with another name, a second region from the same node is fine */
	b = ok;
	snprintf(b.name, sizeof(b.name), "bt-node-second");
	r = bt_attach(self->c.fd, &b);
	EXPECT_EQ(0, r) TH_LOG("second named NODE region: %s", strerror(-r));
	EXPECT_EQ(r ? 1 : 2, nr_regions(self->c.fd));
}

TEST_F(admin, attach_node_enomem)
{
	struct beluga_attach a;
	char why[160];

	if (!bt_backend_ok(BELUGA_BACKEND_NODE, 0, 0, why, sizeof(why)))
		SKIP(return, "%s", why);
	/* far more than any test guest has */
	ASSERT_EQ(0, bt_attach_req(&a, BELUGA_BACKEND_NODE, 0, 0, 1ULL << 40,
				   BT_BLOCK_SIZE, "bt-huge"));
	EXPECT_ATTACH_ERR(self->c.fd, a, -ENOMEM, "1 TiB from one node");
	EXPECT_EQ(0, nr_regions(self->c.fd));
}

/* Block size: default for the first region, inherited, then enforced. */
TEST_F(admin, block_size_rules)
{
	int backend = bt_pick_backend(BT_ANY_BACKEND);
	struct beluga_attach a0, a1, a2;
	struct beluga_info info;
	char why[160];
	uint64_t len = 2 * BELUGA_BLOCK_SIZE_DEFAULT;
	int r;

	if (!bt_backend_ok(backend, 0, 3 * len, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_attach_req(&a0, backend, 0, 0, len, 0, "bt-bs0"));
	r = bt_attach(self->c.fd, &a0);
	ASSERT_EQ(0, r) TH_LOG("ATTACH with block size 0: %s", strerror(-r));
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	EXPECT_EQ(BELUGA_BLOCK_SIZE_DEFAULT, info.block_size);
	EXPECT_EQ(2, a0.nr_blocks);

	/* 0 again: the pool's size */
	ASSERT_EQ(0, bt_attach_req(&a1, backend, 0, len, len, 0, "bt-bs1"));
	r = bt_attach(self->c.fd, &a1);
	EXPECT_EQ(0, r) TH_LOG("second ATTACH with block size 0: %s",
			       strerror(-r));
	/* a different size: refused */
	ASSERT_EQ(0, bt_attach_req(&a2, backend, 0, 2 * len, len, 64 * BT_KIB,
				   "bt-bs2"));
	r = bt_attach(self->c.fd, &a2);
	EXPECT_EQ(-EINVAL, r) TH_LOG("block size mismatch: %s", strerror(-r));
	/* the same size, explicitly: fine */
	a2.block_size = BELUGA_BLOCK_SIZE_DEFAULT;
	r = bt_attach(self->c.fd, &a2);
	EXPECT_EQ(0, r) TH_LOG("explicit matching block size: %s", strerror(-r));

	/* with every region gone the pool forgets its block size */
	ASSERT_EQ(0, bt_reset_pool());
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	EXPECT_EQ(0, info.block_size);
	EXPECT_EQ(0, info.nr_regions);
	ASSERT_EQ(0, bt_attach_req(&a0, backend, 0, 0, len, 64 * BT_KIB, "bt-bs3"));
	r = bt_attach(self->c.fd, &a0);
	EXPECT_EQ(0, r) TH_LOG("new block size after the pool emptied: %s",
			       strerror(-r));
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	EXPECT_EQ(64 * BT_KIB, info.block_size);
}

/* All BELUGA_MAX_REGIONS slots in use: -ENOSPC. */
TEST_F(admin, slots_full_enospc)
{
	int backend = bt_pick_backend(BT_ANY_BACKEND);
	uint64_t len = backend == BELUGA_BACKEND_NODE ? 256 * BT_KIB : BT_REGION_LEN;
	struct beluga_attach a;
	uint32_t seen = 0;
	char why[160], name[32];
	int i, r;

	if (!bt_backend_ok(backend, 0, (BELUGA_MAX_REGIONS + 1) * len, why,
			   sizeof(why)))
		SKIP(return, "%s", why);
	for (i = 0; i < BELUGA_MAX_REGIONS; i++) {
		snprintf(name, sizeof(name), "bt-slot%d", i);
		ASSERT_EQ(0, bt_attach_req(&a, backend, 0, i * len, len, BT_PAGE,
					   name));
		r = bt_attach(self->c.fd, &a);
		ASSERT_EQ(0, r) TH_LOG("ATTACH %d: %s", i, strerror(-r));
		ASSERT_LT(a.region_id, BELUGA_MAX_REGIONS);
		EXPECT_FALSE(seen & (1U << a.region_id))
			TH_LOG("slot %u handed out twice", a.region_id);
		seen |= 1U << a.region_id;
	}
	EXPECT_EQ(BELUGA_MAX_REGIONS, nr_regions(self->c.fd));
	snprintf(name, sizeof(name), "bt-slot%d", i);
	ASSERT_EQ(0, bt_attach_req(&a, backend, 0, i * len, len, BT_PAGE, name));
	r = bt_attach(self->c.fd, &a);
	EXPECT_EQ(-ENOSPC, r) TH_LOG("ATTACH with all slots used: %s",
				     strerror(-r));
	EXPECT_EQ(BELUGA_MAX_REGIONS, nr_regions(self->c.fd));
}

/* ------------------------------------------------------------------ */
/* One region attached.                                                  */

FIXTURE(region) {
	struct bt_ctx c;
	uint64_t ns;
};

FIXTURE_SETUP(region)
{
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->ns = bt_ns(0xad1);
}

FIXTURE_TEARDOWN(region)
{
	bt_teardown(&self->c);
}

static int publish_n(int fd, uint64_t ns, int n, uint64_t salt, uint64_t *o)
{
	int32_t res;
	int i, r;

	r = bt_alloc(fd, n, o);
	if (r)
		return r;
	for (i = 0; i < n; i++) {
		r = bt_publish1(fd, ns, o[i], bt_key(salt, i), &res);
		if (r || res != BELUGA_PUBLISH_OK)
			return r ? r : -EEXIST;
	}
	return 0;
}

TEST_F(region, detach_refusals_and_evict)
{
	uint32_t id = self->c.att[0].region_id;
	struct beluga_key k0 = bt_key(self->ns, 0), k1 = bt_key(self->ns, 1);
	struct beluga_region_info ri;
	uint64_t o[2], a, got, evicted;
	uint32_t hits;
	char *p;
	int r;

	/* an allocated block */
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &a));
	r = bt_detach(self->c.fd, id, 0, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("allocated block: %s", strerror(-r));
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("allocated block, EVICT: %s", strerror(-r));
	ASSERT_EQ(0, bt_free(self->c.fd, 1, &a));

	/* published blocks without EVICT */
	ASSERT_EQ(0, publish_n(self->c.fd, self->ns, 2, self->ns, o));
	r = bt_detach(self->c.fd, id, 0, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("published blocks: %s", strerror(-r));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, k0));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, k1));

	/* a pinned block, even with EVICT */
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, &k0, 1, &got,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("pinned block, EVICT: %s", strerror(-r));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, k0))
		TH_LOG("a pinned block was evicted");
	ASSERT_EQ(0, bt_release(self->c.fd, 1, &got));
	/* (whether k1 was evicted by the refused call is not specified) */
	if (!bt_present(self->c.fd, self->ns, k1))
		TH_LOG("note: the refused DETACH_EVICT evicted the unpinned block");

	/* a mapping */
	p = bt_map(&self->c);
	p[0] = 1;
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("mapped: %s", strerror(-r));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, k0));
	bt_unmap(&self->c);

	/* idle but published: EVICT detaches and says how many */
	ASSERT_EQ(0, bt_region_info(self->c.fd, id, &ri));
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, &evicted);
	ASSERT_EQ(0, r) TH_LOG("DETACH_EVICT of an idle region: %s", strerror(-r));
	EXPECT_EQ(ri.published_blocks, evicted);
	EXPECT_EQ(0, nr_regions(self->c.fd));
	r = bt_alloc(self->c.fd, 1, &a);
	EXPECT_EQ(-ENODEV, r) TH_LOG("ALLOC after the last DETACH: %s",
				     strerror(-r));
}

/* Blocks allocated or pinned by another file keep the region too. */
TEST_F(region, detach_busy_from_other_file)
{
	uint32_t id = self->c.att[0].region_id;
	struct beluga_key k = bt_key(self->ns, 0);
	uint64_t o, got;
	uint32_t hits;
	int fd2, r;

	ASSERT_EQ(0, publish_n(self->c.fd, self->ns, 1, self->ns, &o));
	fd2 = bt_open(O_RDONLY);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, bt_lookup(fd2, self->ns, &k, 1, &got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(1, hits);
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(-EBUSY, r) TH_LOG("pinned by another file: %s", strerror(-r));
	close(fd2);	/* drops the pin */
	r = bt_detach(self->c.fd, id, BELUGA_DETACH_EVICT, NULL);
	EXPECT_EQ(0, r) TH_LOG("after the pinning file closed: %s", strerror(-r));
}

/* Detaching one region leaves the other working. */
TEST_F(region, detach_one_of_two)
{
	struct beluga_attach *a0 = &self->c.att[0], a1;
	struct beluga_info info;
	uint64_t o0[2], o1[2], o[4], evicted;
	char why[160];
	int r, i, backend = self->c.backend;

	if (backend == BELUGA_BACKEND_NODE)
		r = bt_attach_req(&a1, backend, 0, 0, BT_REGION_LEN,
				  BT_BLOCK_SIZE, "bt-second");
	else if (bt_backend_ok(backend, 0, 2 * BT_REGION_LEN, why, sizeof(why)))
		r = bt_attach_req(&a1, backend, 0, BT_REGION_LEN, BT_REGION_LEN,
				  BT_BLOCK_SIZE, "bt-second");
	else
		SKIP(return, "%s", why);
	ASSERT_EQ(0, r);
	r = bt_attach(self->c.fd, &a1);
	ASSERT_EQ(0, r) TH_LOG("second ATTACH: %s", strerror(-r));
	self->c.att[1] = a1;
	self->c.nr = 2;
	ASSERT_EQ(0, bt_info(self->c.fd, &self->c.info));

	/* two published blocks in each region (allocation alternates) */
	ASSERT_EQ(0, publish_n(self->c.fd, self->ns, 4, self->ns, o));
	for (i = 0; i < 4; i++)
		ASSERT_LE(0, bt_region_of(&self->c, o[i]));
	o0[0] = o0[1] = o1[0] = o1[1] = 0;
	{
		int n0 = 0, n1 = 0;

		for (i = 0; i < 4; i++) {
			if (bt_region_of(&self->c, o[i]) == 0 && n0 < 2)
				o0[n0++] = o[i];
			else if (n1 < 2)
				o1[n1++] = o[i];
		}
		ASSERT_EQ(2, n0) TH_LOG("round robin did not use both regions");
	}
	r = bt_detach(self->c.fd, a0->region_id, BELUGA_DETACH_EVICT, &evicted);
	ASSERT_EQ(0, r) TH_LOG("DETACH_EVICT of region 0: %s", strerror(-r));
	EXPECT_EQ(2, evicted);
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	EXPECT_EQ(1, info.nr_regions);
	EXPECT_EQ(a1.nr_blocks, info.nr_blocks);
	EXPECT_LE(a1.first_offset + a1.nr_blocks * BT_BLOCK_SIZE, info.map_size);
	/* keys in the surviving region are still there, the others gone */
	for (i = 0; i < 4; i++) {
		int want = bt_region_of(&self->c, o[i]) == 1;

		EXPECT_EQ(want, bt_present(self->c.fd, self->ns,
					   bt_key(self->ns, i)));
	}
	/* new blocks come from the survivor */
	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o0));
	EXPECT_EQ(1, bt_region_of(&self->c, o0[0]));
	EXPECT_EQ(1, bt_region_of(&self->c, o0[1]));
	ASSERT_EQ(0, bt_free(self->c.fd, 2, o0));
	(void)o1;
}

TEST_F(region, evict_by_key)
{
	struct beluga_key k0 = bt_key(self->ns, 0), k1 = bt_key(self->ns, 1);
	struct beluga_stats s0, s1;
	struct beluga_evict e;
	uint64_t o[3], got;
	uint32_t hits;
	int r;

	ASSERT_EQ(0, publish_n(self->c.fd, self->ns, 3, self->ns, o));
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, &k1, 1, &got,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));

	r = bt_evict_key(self->c.fd, self->ns, k0, &e);
	ASSERT_EQ(0, r) TH_LOG("EVICT present key: %s", strerror(-r));
	EXPECT_EQ(1, e.evicted);
	EXPECT_EQ(0, e.busy);
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, k0));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.evictions + 1, s1.evictions);
	EXPECT_EQ(s0.published_blocks - 1, s1.published_blocks);
	EXPECT_EQ(s0.free_blocks + 1, s1.free_blocks);

	r = bt_evict_key(self->c.fd, self->ns, k1, &e);
	EXPECT_EQ(-EBUSY, r) TH_LOG("EVICT pinned key: %s", strerror(-r));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, k1));
	r = bt_evict_key(self->c.fd, self->ns, k0, &e);
	EXPECT_EQ(-ENOENT, r) TH_LOG("EVICT evicted key: %s", strerror(-r));
	r = bt_evict_key(self->c.fd, self->ns, bt_key(self->ns, 77), &e);
	EXPECT_EQ(-ENOENT, r) TH_LOG("EVICT unknown key: %s", strerror(-r));
	r = bt_evict_key(self->c.fd, self->ns + 1, bt_key(self->ns, 2), &e);
	EXPECT_EQ(-ENOENT, r) TH_LOG("EVICT key of another namespace: %s",
				     strerror(-r));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, bt_key(self->ns, 2)));
	ASSERT_EQ(0, bt_release(self->c.fd, 1, &got));
	r = bt_evict_key(self->c.fd, self->ns, k1, &e);
	EXPECT_EQ(0, r) TH_LOG("EVICT after release: %s", strerror(-r));
}

TEST_F(region, evict_namespace)
{
	uint64_t nsa = self->ns, nsb = self->ns ^ 0xb0b;
	struct beluga_key ka[5];
	struct beluga_evict e;
	struct beluga_stats s0, s1;
	uint64_t oa[5], ob[2], got[2];
	uint32_t hits;
	int i, r;

	ASSERT_EQ(0, publish_n(self->c.fd, nsa, 5, nsa, oa));
	ASSERT_EQ(0, publish_n(self->c.fd, nsb, 2, nsb, ob));
	for (i = 0; i < 5; i++)
		ka[i] = bt_key(nsa, i);
	ASSERT_EQ(0, bt_lookup(self->c.fd, nsa, ka, 2, got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(2, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));

	r = bt_evict_ns(self->c.fd, nsa, &e);
	ASSERT_EQ(0, r) TH_LOG("EVICT_NAMESPACE: %s", strerror(-r));
	EXPECT_EQ(3, e.evicted);
	EXPECT_EQ(2, e.busy);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.evictions + 3, s1.evictions);
	EXPECT_EQ(s0.published_blocks - 3, s1.published_blocks);
	for (i = 0; i < 5; i++)
		EXPECT_EQ(i < 2, bt_present(self->c.fd, nsa, ka[i]));
	/* the other namespace is untouched */
	EXPECT_EQ(1, bt_present(self->c.fd, nsb, bt_key(nsb, 0)));
	EXPECT_EQ(1, bt_present(self->c.fd, nsb, bt_key(nsb, 1)));

	ASSERT_EQ(0, bt_release(self->c.fd, 2, got));
	r = bt_evict_ns(self->c.fd, nsa, &e);
	ASSERT_EQ(0, r);
	EXPECT_EQ(2, e.evicted);
	EXPECT_EQ(0, e.busy);
	/* an empty namespace: nothing to do, no error */
	r = bt_evict_ns(self->c.fd, nsa, &e);
	ASSERT_EQ(0, r);
	EXPECT_EQ(0, e.evicted);
	EXPECT_EQ(0, e.busy);
}

/* Without CAP_SYS_ADMIN: admin commands fail with EPERM, others work. */
TEST_F(region, unprivileged_eperm)
{
	struct beluga_attach extra;
	struct beluga_key k = bt_key(self->ns, 0);
	uint64_t o;
	pid_t pid;
	int r;

	ASSERT_EQ(0, publish_n(self->c.fd, self->ns, 1, self->ns, &o));
	/* a second region an admin could attach */
	if (self->c.backend == BELUGA_BACKEND_NODE)
		r = bt_attach_req(&extra, BELUGA_BACKEND_NODE, 0, 0,
				  BT_REGION_LEN, BT_BLOCK_SIZE, "bt-eperm");
	else
		r = bt_attach_req(&extra, BELUGA_BACKEND_DAX, 0, BT_REGION_LEN,
				  BT_REGION_LEN, BT_BLOCK_SIZE, "bt-eperm");
	ASSERT_EQ(0, r);

	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct beluga_info info;
		struct beluga_stats st;
		struct beluga_evict e;
		uint64_t a;
		int fd = self->c.fd, fd2;

		CHILD_CHECK(setgroups(0, NULL) == 0);
		CHILD_CHECK(setresgid(65534, 65534, 65534) == 0);
		CHILD_CHECK(setresuid(65534, 65534, 65534) == 0);
		/* the inherited (root-opened) file still needs the capability */
		CHILD_CHECK(bt_attach(fd, &extra) == -EPERM);
		CHILD_CHECK(bt_detach(fd, self->c.att[0].region_id,
				      BELUGA_DETACH_EVICT, NULL) == -EPERM);
		CHILD_CHECK(bt_evict_key(fd, self->ns, k, &e) == -EPERM);
		CHILD_CHECK(bt_evict_ns(fd, self->ns, &e) == -EPERM);
		/* non-admin commands are fine */
		CHILD_CHECK(bt_info(fd, &info) == 0);
		CHILD_CHECK(bt_stats(fd, &st) == 0);
		CHILD_CHECK(bt_present(fd, self->ns, k) == 1);
		CHILD_CHECK(bt_alloc(fd, 1, &a) == 0);
		CHILD_CHECK(bt_free(fd, 1, &a) == 0);
		/* a file of its own, if the device node lets it open one */
		fd2 = bt_open(O_RDONLY);
		if (fd2 >= 0) {
			CHILD_CHECK(bt_attach(fd2, &extra) == -EPERM);
			CHILD_CHECK(bt_evict_ns(fd2, self->ns, &e) == -EPERM);
			close(fd2);
		}
		_exit(0);
	}
	r = bt_wait(&self->c, pid);
	ASSERT_EQ(0, r) TH_LOG("unprivileged child failed (%d)", r);
	EXPECT_EQ(1, nr_regions(self->c.fd));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, k));
}

/* ------------------------------------------------------------------ */
/* The module.                                                           */

static long delete_module(const char *name, unsigned int flags)
{
	return syscall(SYS_delete_module, name, flags);
}

static int load_module(const char *path)
{
	size_t len = strlen(path);
	unsigned int flags = 0;
	int fd, r;

	if ((len > 3 && !strcmp(path + len - 3, ".xz")) ||
	    (len > 4 && !strcmp(path + len - 4, ".zst")) ||
	    (len > 3 && !strcmp(path + len - 3, ".gz")))
		flags = MODULE_INIT_COMPRESSED_FILE;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = syscall(SYS_finit_module, fd, "", flags);
	r = r ? -errno : 0;
	close(fd);
	return r;
}

static int load_module_params(const char *path, const char *params)
{
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = syscall(SYS_finit_module, fd, params, 0);
	r = r ? -errno : 0;
	close(fd);
	return r;
}

/* Open @path once it appears (devtmpfs); -errno after ~5 s. */
static int wait_for_device_path(const char *path)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };
	int i, fd;

	for (i = 0; i < 250; i++) {
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0)
			return fd;
		nanosleep(&ts, NULL);
	}
	return -errno;
}

static int wait_for_device(void)
{
	return wait_for_device_path(BELUGA_DEVICE_PATH);
}

/* The module tests are opt-in: BELUGA_TEST_KO names the module file. */
#define SKIP_WITHOUT_TEST_KO(ko) do {					\
	if (!(ko) || !*(ko))						\
		SKIP(return, "BELUGA_TEST_KO not set");			\
	if (access((ko), R_OK))						\
		SKIP(return, "BELUGA_TEST_KO=%.200s: %s", (ko), strerror(errno)); \
} while (0)

/*
 * Unload the module (no file may be open) and load @ko with @params. When
 * that load fails, the module is loaded again without parameters, so that
 * the rest of the suite has one. 0 or -errno, and @step names what failed.
 */
static int reload_with(const char *ko, const char *params, const char **step)
{
	int r;

	*step = "unload with no open file";
	if (delete_module("beluga", O_NONBLOCK))
		return -errno;
	r = load_module_params(ko, params);
	if (r) {
		*step = load_module_params(ko, "") ? "finit_module with the parameters "
			"(and the reload without them failed too)" :
			"finit_module with the parameters";
	}
	return r;
}

/*
 * Back to the module without parameters for the rest of the suite: unload
 * it if it is loaded, load it plain, wait for /dev/beluga. 0 or -errno, and
 * @step names what failed.
 */
static int reload_plain(const char *ko, const char **step)
{
	int r, fd;

	*step = "unload";
	if (!access("/sys/module/beluga", F_OK) && delete_module("beluga", O_NONBLOCK))
		return -errno;
	*step = "reload without parameters";
	r = load_module_params(ko, "");
	if (r)
		return r;
	*step = "open " BELUGA_DEVICE_PATH " after the reload";
	fd = wait_for_device();
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

TEST_F(admin, rmmod_refused_while_open)
{
	const char *ko = getenv("BELUGA_TEST_KO");
	long r;
	int e;

	r = delete_module("beluga", O_NONBLOCK);
	e = errno;
	if (r == 0) {
		/* it must not have gone; put it back if we can */
		int lr = ko ? load_module(ko) : -ENOENT;

		ASSERT_NE(0, r) TH_LOG("the module unloaded while /dev/beluga "
				       "was open (reload: %s)", strerror(-lr));
	}
	if (e == ENOENT)
		SKIP(return, "no module named beluga is loaded (built in?)");
	EXPECT_TRUE(e == EWOULDBLOCK || e == EBUSY)
		TH_LOG("delete_module with an open file: %s", strerror(e));
	/* still working */
	EXPECT_EQ(0, nr_regions(self->c.fd));
}

/*
 * Opt-in (BELUGA_TEST_KO): with no file open, the module unloads even
 * with a region attached and published blocks, and loads again empty.
 */
TEST(module_unload_reload)
{
	const char *ko = getenv("BELUGA_TEST_KO");
	struct beluga_attach a;
	struct beluga_info info;
	int backend = bt_pick_backend(BT_ANY_BACKEND);
	char why[160];
	uint64_t o;
	int32_t res;
	int fd, r;

	SKIP_WITHOUT_TEST_KO(ko);
	if (!bt_backend_ok(backend, 0, BT_REGION_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_reset_pool());
	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bt_attach_req(&a, backend, 0, 0, BT_REGION_LEN,
				   BT_BLOCK_SIZE, "bt-unload"));
	ASSERT_EQ(0, bt_attach(fd, &a));
	ASSERT_EQ(0, bt_alloc(fd, 1, &o));
	ASSERT_EQ(0, bt_publish1(fd, 1, o, bt_key(1, 1), &res));
	ASSERT_EQ(0, close(fd));

	r = delete_module("beluga", O_NONBLOCK) ? -errno : 0;
	ASSERT_EQ(0, r) TH_LOG("unload with no open file: %s", strerror(-r));
	fd = bt_open(O_RDWR);
	EXPECT_GT(0, fd) TH_LOG("/dev/beluga still opens after unload");
	if (fd >= 0)
		close(fd);
	r = load_module(ko);
	ASSERT_EQ(0, r) TH_LOG("finit_module(%s): %s -- the rest of the suite "
			       "has no module", ko, strerror(-r));
	fd = wait_for_device();
	ASSERT_LE(0, fd) TH_LOG("/dev/beluga after reload: %s", strerror(-fd));
	ASSERT_EQ(0, bt_info(fd, &info));
	EXPECT_EQ(0, info.nr_regions);
	EXPECT_EQ(0, info.block_size);
	close(fd);
}

/*
 * Opt-in (BELUGA_TEST_KO): reload with pools=2 (and, with a test node, a
 * region attached by the node= and block_size= parameters). The two pools
 * share nothing, and a device-dax range is never claimed by both. Then
 * reload with no parameters.
 */
TEST(module_pools_param)
{
	const char *ko = getenv("BELUGA_TEST_KO");
	const char *step;
	const char *p1 = BELUGA_DEVICE_PATH "1";
	struct beluga_info i0, i1;
	struct beluga_attach a;
	char params[128], why[160];
	struct stat sb;
	int node, fd0 = -1, fd1 = -1, r;
	bool have_node = bt_env_node(&node) == 0;
	bool have_dax = bt_backend_ok(BELUGA_BACKEND_DAX, 0, BT_REGION_LEN, why,
				      sizeof(why));
	uint64_t o;
	int32_t res;

	SKIP_WITHOUT_TEST_KO(ko);
	ASSERT_EQ(0, bt_reset_pool());
	if (have_node)
		snprintf(params, sizeof(params),
			 "pools=2 block_size=64K node=%d:2M", node);
	else
		snprintf(params, sizeof(params), "pools=2");
	r = reload_with(ko, params, &step);
	ASSERT_EQ(0, r) TH_LOG("%s (%s, \"%s\"): %s", step, ko, params, strerror(-r));
	fd0 = wait_for_device();
	ASSERT_LE(0, fd0);
	fd1 = wait_for_device_path(p1);
	EXPECT_LE(0, fd1) TH_LOG("%s after loading with pools=2: %s", p1,
				 strerror(-fd1));
	if (fd1 >= 0) {
		ASSERT_EQ(0, bt_info(fd0, &i0));
		ASSERT_EQ(0, bt_info(fd1, &i1));
		EXPECT_EQ(have_node ? 1 : 0, i0.nr_regions)
			TH_LOG("node= parameter did not attach to pool 0");
		if (have_node)
			EXPECT_EQ(64 * BT_KIB, i0.block_size);
		EXPECT_EQ(0, i1.nr_regions) TH_LOG("pool 1 sees pool 0's region");
		EXPECT_EQ(-ENODEV, bt_alloc(fd1, 1, &o));
		if (have_dax) {
			/* one range, two pools: the second claim is refused */
			ASSERT_EQ(0, bt_attach_req(&a, BELUGA_BACKEND_DAX, 0, 0,
						   BT_REGION_LEN, BT_BLOCK_SIZE,
						   "bt-pool1"));
			r = bt_attach(fd1, &a);
			EXPECT_EQ(0, r) TH_LOG("ATTACH dax to pool 1: %s",
					       strerror(-r));
			snprintf(a.name, sizeof(a.name), "bt-pool0");
			a.block_size = 0;
			r = bt_attach(fd0, &a);
			EXPECT_TRUE(r == -EEXIST || r == -EBUSY)
				TH_LOG("the same dax range in pool 0 too: %s",
				       strerror(-r));
			if (!r)
				bt_detach(fd0, a.region_id, BELUGA_DETACH_EVICT,
					  NULL);
		}
		if (have_node) {
			/* keys are per pool */
			struct beluga_key k = bt_key(5, 5);

			ASSERT_EQ(0, bt_alloc(fd0, 1, &o));
			ASSERT_EQ(0, bt_publish1(fd0, 5, o, k, &res));
			EXPECT_EQ(1, bt_present(fd0, 5, k));
			if (have_dax)
				EXPECT_EQ(0, bt_present(fd1, 5, k))
					TH_LOG("pool 1 finds pool 0's key");
		}
		close(fd1);
		EXPECT_EQ(0, bt_reset_pool_path(p1));
	}
	close(fd0);
	EXPECT_EQ(0, bt_reset_pool());

	r = reload_plain(ko, &step);
	ASSERT_EQ(0, r) TH_LOG("%s: %s -- the rest of the suite has no module",
			       step, strerror(-r));
	EXPECT_NE(0, stat(p1, &sb)) TH_LOG("%s outlived pools=2", p1);
}

/*
 * Opt-in (BELUGA_TEST_KO and BELUGA_TEST_SINGLE_KO, the module built with
 * BELUGA_SHARED=n): the single-host module has no shared pools. A shared
 * ATTACH fails with -EOPNOTSUPP once its fields passed their checks (a bad
 * one is still -EINVAL), attaches nothing, and the module has none of the
 * shared pools' parameters; a local region attaches as ever. Then the
 * plain module again, where the same ATTACH gets past that check.
 */
TEST(module_single_host)
{
	const char *ko = getenv("BELUGA_TEST_KO");
	const char *single = getenv("BELUGA_TEST_SINGLE_KO");
	int backend = bt_pick_backend(BT_ANY_BACKEND);
	struct beluga_attach a, shared;
	struct beluga_info info;
	char why[160];
	int fd, r;

	if (!ko || !*ko || !single || !*single)
		SKIP(return, "BELUGA_TEST_KO or BELUGA_TEST_SINGLE_KO not set");
	if (access(ko, R_OK) || access(single, R_OK))
		SKIP(return, "%.200s or %.200s: %s", ko, single, strerror(errno));
	ASSERT_EQ(0, bt_reset_pool());
	r = delete_module("beluga", O_NONBLOCK) ? -errno : 0;
	ASSERT_EQ(0, r) TH_LOG("unload: %s", strerror(-r));
	r = load_module(single);
	if (r) {
		int r2 = load_module(ko);

		ASSERT_EQ(0, r) TH_LOG("finit_module(%s): %s (plain module "
				       "again: %s)", single, strerror(-r),
				       strerror(-r2));
	}
	fd = wait_for_device();
	ASSERT_LE(0, fd) TH_LOG("/dev/beluga of the single-host module: %s",
				strerror(-fd));

	/* No device behind it: only the argument checks and the kind see it. */
	memset(&shared, 0, sizeof(shared));
	shared.size = sizeof(shared);
	shared.flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID;
	shared.backend = BELUGA_BACKEND_DAX;
	shared.node = -1;
	shared.phys_start = 1ULL << 40;
	shared.length = 4 * BT_MIB;
	snprintf(shared.name, sizeof(shared.name), "bt-single-shared");
	a = shared;
	r = bt_attach(fd, &a);
	EXPECT_EQ(-EOPNOTSUPP, r) TH_LOG("shared ATTACH on the single-host "
					 "module: %s", strerror(-r));
	a = shared;
	a.backend = BELUGA_BACKEND_NODE;
	a.node = 0;
	a.phys_start = 0;
	r = bt_attach(fd, &a);
	EXPECT_EQ(-EINVAL, r) TH_LOG("shared ATTACH of a node region (fields "
				     "come first): %s", strerror(-r));
	ASSERT_EQ(0, bt_info(fd, &info));
	EXPECT_EQ(0, info.nr_regions) TH_LOG("a refused ATTACH attached");
	EXPECT_NE(0, access("/sys/module/beluga/parameters/host_id", F_OK))
		TH_LOG("the single-host module has the host_id parameter");
	if (bt_backend_ok(backend, 0, BT_REGION_LEN, why, sizeof(why))) {
		ASSERT_EQ(0, bt_attach_req(&a, backend, 0, 0, BT_REGION_LEN,
					   BT_BLOCK_SIZE, "bt-single"));
		r = bt_attach(fd, &a);
		EXPECT_EQ(0, r) TH_LOG("local ATTACH on the single-host "
				       "module: %s", strerror(-r));
		if (!r)
			EXPECT_EQ(0, bt_detach(fd, a.region_id,
					       BELUGA_DETACH_EVICT, NULL));
	} else {
		TH_LOG("no local region attached: %s", why);
	}
	close(fd);

	/* back to the plain module for the rest of the suite */
	r = delete_module("beluga", O_NONBLOCK) ? -errno : 0;
	ASSERT_EQ(0, r) TH_LOG("unload: %s", strerror(-r));
	r = load_module(ko);
	ASSERT_EQ(0, r) TH_LOG("reload: %s -- the rest of the suite has no "
			       "module", strerror(-r));
	fd = wait_for_device();
	ASSERT_LE(0, fd);
	a = shared;
	r = bt_attach(fd, &a);
	EXPECT_NE(-EOPNOTSUPP, r) TH_LOG("the plain module refuses shared "
					 "pools");
	if (!r)
		bt_detach(fd, a.region_id, BELUGA_DETACH_EVICT, NULL);
	close(fd);
}

/* ------------------------------------------------------------------ */
/* Tenants' bytes: a range moved or attached again shows nothing old.    */

/*
 * Attach @a through @fd, write recognisable bytes (seeded by @seed) at the
 * start and the end of every block, publish them all, then DETACH with
 * EVICT: a tenant that leaves its KV cache behind. 0 or -errno.
 */
static int scribble_and_detach(int fd, struct beluga_attach *a, uint64_t seed)
{
	struct beluga_info info;
	uint64_t o, ns = bt_ns(seed), i;
	int32_t res;
	char *map;
	int r;

	r = bt_attach(fd, a);
	if (r)
		return r;
	if (bt_info(fd, &info))
		return -EIO;
	map = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   0);
	if (map == MAP_FAILED)
		return -errno;
	for (i = 0; i < a->nr_blocks; i++) {
		r = bt_alloc(fd, 1, &o);
		if (r)
			break;
		bt_fill(map + o, 512, seed + i);
		bt_fill(map + o + info.block_size - 512, 512, seed + i);
		r = bt_publish1(fd, ns, o, bt_key(ns, i), &res);
		if (r || res != BELUGA_PUBLISH_OK) {
			r = r ? r : -EPROTO;
			break;
		}
	}
	munmap(map, info.map_size);
	if (r)
		return r;
	return bt_detach(fd, a->region_id, BELUGA_DETACH_EVICT, NULL);
}

/*
 * Offset of the first nonzero byte a read-only opener of @path sees in the
 * region @a, or -1 when it is all zero (or -2 on an error).
 */
static long long first_nonzero(const char *path, const struct beluga_attach *a,
			       uint64_t block_size)
{
	uint64_t len = a->nr_blocks * block_size, i;
	const volatile uint8_t *map;
	long long at = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -2;
	map = mmap(NULL, a->first_offset + len, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return -2;
	for (i = 0; i < len; i++) {
		if (map[a->first_offset + i]) {
			at = (long long)i;
			break;
		}
	}
	munmap((void *)map, a->first_offset + len);
	return at;
}

/*
 * The same pool, after DETACH and ATTACH of the same device-dax range:
 * every byte reads zero, so the next user of the range, in any pool,
 * sees nothing of the last. Before the fix the published bytes were all
 * still there.
 */
TEST(dax_reattach_shows_no_old_bytes)
{
	struct beluga_attach a;
	char why[160];
	long long at;
	int fd, r;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, BT_REGION_LEN, why,
			   sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_reset_pool());
	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bt_attach_req(&a, BELUGA_BACKEND_DAX, 0, 0, BT_REGION_LEN,
				   BT_BLOCK_SIZE, "bt-tenant-a"));
	r = scribble_and_detach(fd, &a, 0x5eed);
	ASSERT_EQ(0, r) TH_LOG("tenant A's round: %s", strerror(-r));
	r = bt_attach(fd, &a);
	ASSERT_EQ(0, r) TH_LOG("ATTACH again: %s", strerror(-r));
	at = first_nonzero(BELUGA_DEVICE_PATH, &a, BT_BLOCK_SIZE);
	EXPECT_EQ(-1, at) TH_LOG("byte %lld of the region attached again is "
				 "not zero: the last user's data", at);
	EXPECT_EQ(0, bt_detach(fd, a.region_id, BELUGA_DETACH_EVICT, NULL));
	close(fd);
}

/*
 * While a device-dax range is in a pool, /proc/iomem names it
 * "<pool>:<region>" over exactly the region's range (here a 2 MiB part of
 * an instance, nested inside device_dax's "daxX.Y" entry), and the
 * region's sysfs directory links to the instance; after DETACH both are
 * gone. Only 2 MiB, because ATTACH clears the range first: a whole
 * 256 MiB instance of emulated CXL takes 20-30 s under TCG (the guest
 * smoke attaches whole instances and checks their entries). The fixture's
 * teardown detaches the region when a check fails midway.
 */
TEST_F_TIMEOUT(admin, dax_claim_in_proc_iomem, 120)
{
	const char *entry = "beluga:bt-iomem";
	char names[BT_MAX_DAX][64], why[160], link[128];
	uint64_t phys, size, start = 0, end = 0;
	struct beluga_region_info ri;
	struct beluga_attach a;
	struct stat st;
	int r;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, 2 * BT_REGION_LEN, why,
			   sizeof(why)))
		SKIP(return, "%s", why);
	if (geteuid())
		SKIP(return, "needs root: /proc/iomem shows zeros to others");
	ASSERT_LT(0, bt_env_dax(names));
	ASSERT_EQ(0, bt_dax_geometry(names[0], &phys, &size));
	ASSERT_EQ(0, bt_iomem_find(entry, &start, &end))
		TH_LOG("\"%s\" is in /proc/iomem before ATTACH", entry);
	ASSERT_EQ(0, bt_attach_req(&a, BELUGA_BACKEND_DAX, 0, BT_REGION_LEN,
				   BT_REGION_LEN, BT_BLOCK_SIZE, "bt-iomem"));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("ATTACH of 2 MiB of %s: %s", names[0],
			       strerror(-r));
	ASSERT_EQ(0, bt_region_info(self->c.fd, a.region_id, &ri));
	EXPECT_EQ(phys + BT_REGION_LEN, ri.phys_start);
	EXPECT_EQ(1, bt_iomem_find(entry, &start, &end))
		TH_LOG("no single \"%s\" entry in /proc/iomem", entry);
	EXPECT_EQ(ri.phys_start, start);
	EXPECT_EQ(ri.phys_start + ri.length - 1, end);
	r = bt_region_dax_link(a.region_id, names[0]);
	EXPECT_EQ(1, r) TH_LOG("region%u/dax does not lead to %s: %s",
			       a.region_id, names[0],
			       r < 0 ? strerror(-r) : "another device");

	ASSERT_EQ(0, bt_detach(self->c.fd, a.region_id, BELUGA_DETACH_EVICT,
			       NULL));
	EXPECT_EQ(0, bt_iomem_find(entry, &start, &end))
		TH_LOG("\"%s\" is still in /proc/iomem after DETACH", entry);
	snprintf(link, sizeof(link), "/sys/class/misc/beluga/region%u/dax",
		 a.region_id);
	EXPECT_NE(0, lstat(link, &st)) TH_LOG("%s outlived DETACH", link);
}

/*
 * Opt-in (BELUGA_TEST_KO): reload with pools=2; tenant A fills and
 * publishes a device-dax range in pool 0 and detaches it with EVICT, the
 * admin attaches the range to pool 1, and a read-only opener of pool 1
 * must find no trace of A (finding 5 of the review). Then reload plain.
 */
TEST(module_pools_moved_range_is_clear)
{
	const char *ko = getenv("BELUGA_TEST_KO");
	const char *step;
	const char *p1 = BELUGA_DEVICE_PATH "1";
	struct beluga_attach a;
	char why[160];
	long long at;
	int fd0, fd1, r;

	SKIP_WITHOUT_TEST_KO(ko);
	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, BT_REGION_LEN, why,
			   sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_reset_pool());
	r = reload_with(ko, "pools=2", &step);
	ASSERT_EQ(0, r) TH_LOG("%s (%s, pools=2): %s", step, ko, strerror(-r));
	fd0 = wait_for_device();
	ASSERT_LE(0, fd0);
	fd1 = wait_for_device_path(p1);
	EXPECT_LE(0, fd1) TH_LOG("%s: %s", p1, strerror(-fd1));
	if (fd1 >= 0) {
		ASSERT_EQ(0, bt_attach_req(&a, BELUGA_BACKEND_DAX, 0, 0,
					   BT_REGION_LEN, BT_BLOCK_SIZE,
					   "bt-tenant-a"));
		r = scribble_and_detach(fd0, &a, 0xa11ce);
		EXPECT_EQ(0, r) TH_LOG("tenant A in pool 0: %s", strerror(-r));
		snprintf(a.name, sizeof(a.name), "bt-tenant-b");
		r = bt_attach(fd1, &a);
		EXPECT_EQ(0, r) TH_LOG("the range in pool 1: %s", strerror(-r));
		if (!r) {
			at = first_nonzero(p1, &a, BT_BLOCK_SIZE);
			EXPECT_EQ(-1, at) TH_LOG("pool 1 reads tenant A's byte "
						 "at %lld of the range", at);
		}
		close(fd1);
		EXPECT_EQ(0, bt_reset_pool_path(p1));
	}
	close(fd0);
	EXPECT_EQ(0, bt_reset_pool());
	r = reload_plain(ko, &step);
	ASSERT_EQ(0, r) TH_LOG("%s: %s -- the rest of the suite has no module",
			       step, strerror(-r));
}

/*
 * While ATTACH clears a device-dax range, the pool's "attaching" sysfs
 * attribute shows it as "NAME DONE LENGTH" with DONE growing up to LENGTH;
 * once ATTACH has returned the attribute is empty. How many samples fall
 * inside the clearing depends on the memory's speed, so only what each
 * sample says is checked.
 */
TEST(attach_progress_in_sysfs)
{
	const char *attr = "/sys/class/misc/beluga/attaching";
	const uint64_t len = 16 * BT_MIB;
	unsigned long long done, total, last = 0;
	struct beluga_attach a;
	char why[160], buf[512], name[64];
	int fd, afd, samples = 0, lines = 0, st, r;
	pid_t pid;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, len, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_reset_pool());
	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bt_attach_req(&a, BELUGA_BACKEND_DAX, 0, 0, len,
				   BT_BLOCK_SIZE, "bt-progress"));
	fflush(NULL);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(bt_attach(fd, &a) ? 1 : 0);
	while (waitpid(pid, &st, WNOHANG) == 0) {
		ssize_t n;

		afd = open(attr, O_RDONLY | O_CLOEXEC);
		ASSERT_LE(0, afd) TH_LOG("%s: %s", attr, strerror(errno));
		n = read(afd, buf, sizeof(buf) - 1);
		close(afd);
		ASSERT_LE(0, n);
		buf[n < 0 ? 0 : n] = 0;
		samples++;
		if (!n)
			continue;
		lines++;
		ASSERT_EQ(3, sscanf(buf, "%63s %llu %llu", name, &done, &total))
			TH_LOG("attaching: '%s'", buf);
		EXPECT_STREQ("bt-progress", name);
		EXPECT_EQ(len, total);
		EXPECT_LE(done, total);
		EXPECT_LE(last, done) TH_LOG("progress went back");
		last = done;
	}
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
		TH_LOG("ATTACH of %llu bytes failed", (unsigned long long)len);
	afd = open(attr, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, afd);
	EXPECT_EQ(0, read(afd, buf, sizeof(buf))) TH_LOG("attaching still "
							 "shows a region "
							 "after ATTACH");
	close(afd);
	EXPECT_EQ(1, nr_regions(fd));
	TH_LOG("%d of %d samples saw the clearing", lines, samples);
	r = bt_reset_pool();
	EXPECT_EQ(0, r);
	close(fd);
}

/* ------------------------------------------------------------------ */
/* Module init that fails while someone opens the device.               */

struct opener_state {
	volatile int started;
	volatile int stop;
	volatile int opens;
	volatile int maps;
};

/* Child: open and map /dev/beluga as fast as it can, keep what it gets. */
static void opener_loop(struct opener_state *st)
{
	int fds[64], nfd = 0, i;
	void *maps[64];
	int nmap = 0;

	st->started = 1;
	while (!st->stop) {
		int fd = open(BELUGA_DEVICE_PATH, O_RDWR | O_CLOEXEC);
		void *p;

		if (fd < 0)
			continue;
		st->opens++;
		p = mmap(NULL, 2 * BT_MIB, PROT_READ, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED) {
			st->maps++;
			if (nmap < 64)
				maps[nmap++] = p;
		}
		if (nfd < 64)
			fds[nfd++] = fd;
		else
			close(fd);
	}
	/* before the fix: these call into the freed module */
	for (i = 0; i < nmap; i++)
		munmap(maps[i], 2 * BT_MIB);
	for (i = 0; i < nfd; i++)
		close(fds[i]);
	_exit(0);
}

/*
 * Opt-in (BELUGA_TEST_KO): module init fails in its module-parameter
 * ATTACH (the second entry asks for more than there is) while a process
 * keeps opening and mapping /dev/beluga (finding 12). The failed module is
 * freed whatever its files hold, so no open may succeed before init has
 * finished: before the fix, files opened in that window called into freed
 * module code at close() (an oops; the child dies of a signal).
 */
TEST(module_init_failure_with_opener)
{
	const char *ko = getenv("BELUGA_TEST_KO");
	const char *step;
	struct opener_state *st;
	char params[160], why[160];
	uint64_t phys, size;
	char names[BT_MAX_DAX][64];
	pid_t pid;
	int node, r, status;

	SKIP_WITHOUT_TEST_KO(ko);
	if (bt_env_node(&node) == 0) {
		/* 16 MiB to allocate and zero first: a window of some length */
		snprintf(params, sizeof(params), "node=%d:16M:bt-a,%d:1T:bt-b", node,
			 node);
	} else if (bt_backend_ok(BELUGA_BACKEND_DAX, 0, 16 * BT_MIB, why,
				 sizeof(why)) && bt_env_dax(names) > 0 &&
		   bt_dax_geometry(names[0], &phys, &size) == 0) {
		/* 16 MiB to clear, then a misaligned length (-EINVAL) */
		snprintf(params, sizeof(params),
			 "dax=0x%" PRIx64 ":16M:bt-a,0x%" PRIx64 ":1M:bt-b",
			 phys, (uint64_t)(phys + 16 * BT_MIB));
	} else {
		SKIP(return, "neither BELUGA_TEST_NODE nor a dax device");
	}
	ASSERT_EQ(0, bt_reset_pool());
	st = mmap(NULL, sizeof(*st), PROT_READ | PROT_WRITE,
		  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, st);
	memset(st, 0, sizeof(*st));
	r = delete_module("beluga", O_NONBLOCK) ? -errno : 0;
	ASSERT_EQ(0, r) TH_LOG("unload with no open file: %s", strerror(-r));

	fflush(NULL);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		opener_loop(st);
	while (!st->started)
		sched_yield();
	r = load_module_params(ko, params);
	st->stop = 1;
	waitpid(pid, &status, 0);

	EXPECT_NE(0, r) TH_LOG("finit_module(\"%s\") succeeded", params);
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
		TH_LOG("the opener died (%s %d) closing files of the module "
		       "that failed to load", WIFSIGNALED(status) ?
		       "signal" : "status", WIFSIGNALED(status) ?
		       WTERMSIG(status) : WEXITSTATUS(status));
	EXPECT_EQ(0, st->opens) TH_LOG("%d opens (%d mmaps) of /dev/beluga "
				       "succeeded during the failing init",
				       st->opens, st->maps);
	munmap(st, sizeof(*st));

	r = reload_plain(ko, &step);
	ASSERT_EQ(0, r) TH_LOG("%s: %s -- the rest of the suite has no module",
			       step, strerror(-r));
}

TEST_HARNESS_MAIN
