// SPDX-License-Identifier: GPL-2.0
/* Client bookkeeping: pins with multiplicity, RELEASE, close. */
#include "helpers.h"

static void release_on_close(void)
{
	static const u32 sizes[] = { 10, 6 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *owner = bel_client_new(p);
	struct bel_client *c = bel_client_new(p);
	struct beluga_key keys[3] = { K(1), K(2), K(3) };
	struct bel_stats init, s;
	u64 offs[8], pins[3];
	u32 hits;

	init = stats_of(p);
	CHECK_EQ(init.clients, 2);
	put_key(owner, 0, K(1));
	put_key(owner, 0, K(2));
	/* c: 5 allocated, 1 published by itself, 3 pins. */
	CHECK_EQ(bel_alloc(c, 5, offs), 0);
	put_key(c, 0, K(3));
	CHECK_EQ(bel_lookup(c, 0, 3, keys, true, pins, &hits), 0);
	CHECK_EQ(hits, 3);
	CHECK_EQ(bel_lookup(c, 0, 1, keys, true, pins, &hits), 0);
	s = stats_of(p);
	CHECK_EQ(s.allocated_blocks, 5);
	CHECK_EQ(s.pins, 4);
	CHECK_EQ(s.pinned_blocks, 3);
	CHECK_EQ(c->nr_pins, 4);
	CHECK_EQ(c->pins.used, 3);
	check_client(c);

	bel_client_release(c);
	s = stats_of(p);
	CHECK_EQ(s.clients, 1);
	CHECK_EQ(s.allocated_blocks, 0);
	CHECK_EQ(s.published_blocks, 3);	/* published data stays */
	CHECK_EQ(s.pins, 0);
	CHECK_EQ(s.pinned_blocks, 0);
	CHECK_EQ(s.frees, 5);
	CHECK_EQ(s.releases, 4);
	check_pool(p);
	/* All evictable again: the pool can be drained to its start. */
	CHECK_EQ(bel_evict_ns(p, 0, NULL), 3);
	bel_client_release(owner);
	s = stats_of(p);
	CHECK_EQ(s.free_blocks, init.free_blocks);
	CHECK_EQ(s.total_blocks, init.total_blocks);
	CHECK_EQ(s.clients, 0);
	check_pool(p);
	pool_free(p);
}

static void pins_multiplicity(void)
{
	static const u32 sizes[] = { 4 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *a = bel_client_new(p);
	struct bel_client *b = bel_client_new(p);
	struct beluga_key k = K(42), kk[3] = { K(42), K(42), K(42) };
	u64 off, got[3], tmp[4];
	u32 hits, i;

	off = put_key(a, 0, k);
	/* a pins 3 times (one call with the key thrice), b twice. */
	CHECK_EQ(bel_lookup(a, 0, 3, kk, true, got, &hits), 0);
	CHECK_EQ(hits, 3);
	for (i = 0; i < 3; i++)
		CHECK_EQ(got[i], off);
	CHECK_EQ(bel_lookup(b, 0, 1, &k, true, got, &hits), 0);
	CHECK_EQ(bel_lookup(b, 0, 1, &k, true, got, &hits), 0);
	CHECK_EQ(blk(p, off)->pins, 5);
	CHECK_EQ(a->nr_pins, 3);
	CHECK_EQ(a->pins.used, 1);
	CHECK_EQ(b->nr_pins, 2);
	CHECK_EQ(stats_of(p).pinned_blocks, 1);
	CHECK_EQ(stats_of(p).pins, 5);
	/* a may release three, not four, in any split. */
	tmp[0] = tmp[1] = tmp[2] = tmp[3] = off;
	CHECK_EQ(bel_release(a, 4, tmp), -EINVAL);
	CHECK_EQ(a->nr_pins, 3);
	CHECK_EQ(blk(p, off)->pins, 5);
	CHECK_EQ(bel_release(a, 2, tmp), 0);
	CHECK_EQ(bel_release(a, 2, tmp), -EINVAL);
	CHECK_EQ(bel_release(a, 1, tmp), 0);
	CHECK_EQ(bel_release(a, 1, tmp), -EINVAL);
	CHECK_EQ(a->pins.used, 0);
	CHECK_EQ(blk(p, off)->pins, 2);
	/* Still pinned by b: not evictable. */
	CHECK_EQ(bel_evict_key(p, 0, &k), -EBUSY);
	CHECK_EQ(bel_alloc(a, 4, tmp), -ENOSPC);
	tmp[1] = off ^ 4096;			/* another block */
	CHECK_EQ(bel_release(b, 2, tmp), -EINVAL);
	CHECK_EQ(b->nr_pins, 2);
	tmp[0] = tmp[1] = off;
	CHECK_EQ(bel_release(b, 2, tmp), 0);
	CHECK_EQ(stats_of(p).pins, 0);
	CHECK_EQ(stats_of(p).pinned_blocks, 0);
	CHECK_EQ(stats_of(p).releases, 5);
	CHECK_EQ(bel_alloc(a, 4, tmp), 0);	/* evicts key 42 */
	CHECK_EQ(has_key(a, 0, k), 0);
	teardown(p, a, b);
}

static void release_all_or_nothing(void)
{
	static const u32 sizes[] = { 8 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *a = bel_client_new(p);
	struct bel_client *b = bel_client_new(p);
	struct beluga_key keys[3] = { K(1), K(2), K(3) };
	u64 o[3], rel[4], got[3];
	u32 hits, i;

	for (i = 0; i < 3; i++)
		o[i] = put_key(a, 0, keys[i]);
	CHECK_EQ(bel_lookup(a, 0, 2, keys, true, got, &hits), 0);
	CHECK_EQ(bel_lookup(b, 0, 3, keys, true, got, &hits), 0);
	/* a pins 1 and 2 once; b pins 1, 2, 3 once. */
	rel[0] = o[0];
	rel[1] = o[1];
	rel[2] = o[2];				/* only b pins it */
	CHECK_EQ(bel_release(a, 3, rel), -EINVAL);
	rel[2] = o[0];				/* a duplicate too many */
	CHECK_EQ(bel_release(a, 3, rel), -EINVAL);
	rel[2] = o[0] + 4096 * 100;		/* not a block */
	CHECK_EQ(bel_release(a, 3, rel), -EINVAL);
	rel[2] = o[1] + 1;			/* misaligned */
	CHECK_EQ(bel_release(a, 3, rel), -EINVAL);
	CHECK_EQ(bel_release(a, 0, rel), -EINVAL);
	CHECK_EQ(bel_release(a, BELUGA_MAX_BATCH + 1, rel), -EINVAL);
	/* Nothing moved. */
	CHECK_EQ(a->nr_pins, 2);
	CHECK_EQ(a->pins.used, 2);
	CHECK_EQ(blk(p, o[0])->pins, 2);
	CHECK_EQ(blk(p, o[1])->pins, 2);
	CHECK_EQ(blk(p, o[2])->pins, 1);
	CHECK_EQ(stats_of(p).releases, 0);
	CHECK_EQ(stats_of(p).pins, 5);
	check_pool(p);
	check_client(a);
	/* Duplicates that match the pins exactly are fine. */
	CHECK_EQ(bel_lookup(a, 0, 1, keys, true, got, &hits), 0);
	rel[0] = o[0];
	rel[1] = o[1];
	rel[2] = o[0];
	CHECK_EQ(bel_release(a, 3, rel), 0);
	CHECK_EQ(a->nr_pins, 0);
	CHECK_EQ(a->pins.used, 0);
	CHECK_EQ(blk(p, o[0])->pins, 1);
	CHECK_EQ(stats_of(p).releases, 3);
	check_client(a);
	check_client(b);
	check_pool(p);
	bel_client_release(a);
	bel_client_release(b);
	CHECK_EQ(stats_of(p).pins, 0);
	check_pool(p);
	pool_free(p);
}

/* Thousands of distinct pins: table growth and backward-shift deletion. */
static void pin_table_growth(void)
{
	static const u32 sizes[] = { 3000, 3000, 1000 };
	struct bel_pool *p = pool_with(3, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *c = bel_client_new(p);
	static struct beluga_key keys[7000];
	static u64 offs[7000], got[7000], order[7000];
	static s32 res[BELUGA_MAX_BATCH];
	u32 i, n, hits, ok, ex, fail;
	unsigned int seed = 12345;

	for (i = 0; i < 7000; i += n) {
		n = 7000 - i < BELUGA_MAX_BATCH ? 7000 - i : BELUGA_MAX_BATCH;
		REQUIRE_EQ(bel_alloc(w, n, offs + i), 0);
	}
	for (i = 0; i < 7000; i++)
		keys[i] = K2(i, 0xabcdef);
	for (i = 0; i < 7000; i += n) {
		n = 7000 - i < BELUGA_MAX_BATCH ? 7000 - i : BELUGA_MAX_BATCH;
		REQUIRE_EQ(publish_arrays(w, 1, n, offs + i, keys + i, res, &ok,
				       &ex, &fail), 0);
		CHECK_EQ(ok, n);
	}
	/* Pin all of them in chunks of 1000; every other key twice. */
	for (i = 0; i < 7000; i += 1000) {
		REQUIRE_EQ(bel_lookup(c, 1, 1000, keys + i, true, got + i,
				      &hits), 0);
		CHECK_EQ(hits, 1000);
	}
	for (i = 0; i < 7000; i += 2)
		REQUIRE_EQ(bel_lookup(c, 1, 1, keys + i, true, got, &hits), 0);
	CHECK_EQ(c->pins.used, 7000);
	CHECK_EQ(c->nr_pins, 10500);
	CHECK(c->pins.capacity >= 14000);
	CHECK_EQ(stats_of(p).pinned_blocks, 7000);
	check_client(c);
	/* Release one pin of each, shuffled, in batches of up to 700. */
	for (i = 0; i < 7000; i++)
		order[i] = offs[i];
	for (i = 6999; i > 0; i--) {
		u32 j = rand_r(&seed) % (i + 1);
		u64 t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (i = 0; i < 7000; i += 700) {
		REQUIRE_EQ(bel_release(c, 700, order + i), 0);
		if (check_client(c))
			return;
	}
	CHECK_EQ(c->pins.used, 3500);
	CHECK_EQ(c->nr_pins, 3500);
	/* Every pin left is one of the even keys, findable. */
	for (i = 0; i < 7000; i++) {
		u32 id = id_of(p, offs[i]);
		u32 j, found = 0;

		for (j = 0; j < c->pins.capacity; j++)
			if (c->pins.ids[j] == id)
				found += c->pins.counts[j];
		REQUIRE_EQ(found, i % 2 ? 0 : 1);
	}
	check_pool(p);
	bel_client_release(c);
	CHECK_EQ(stats_of(p).pins, 0);
	CHECK_EQ(stats_of(p).pinned_blocks, 0);
	CHECK_EQ(stats_of(p).releases, 10500);
	check_pool(p);
	bel_client_release(w);
	pool_free(p);
}

/* A pin count near its limit makes LOOKUP refuse, changing nothing. */
static void pin_overflow(void)
{
	static const u32 sizes[] = { 4 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *c = bel_client_new(p);
	struct beluga_key keys[2] = { K(1), K(2) };
	struct bel_stats s;
	u64 o1, got[2];
	u32 hits = 77;

	put_key(c, 0, keys[0]);
	o1 = put_key(c, 0, keys[1]);
	CHECK_EQ(bel_lookup(c, 0, 1, &keys[1], true, got, &hits), 0);
	/* Pretend billions of pins are held (by someone not tracked). */
	blk(p, o1)->pins = BEL_MAX_PINS + 1;
	s = stats_of(p);
	hits = 77;
	CHECK_EQ(bel_lookup(c, 0, 2, keys, true, got, &hits), -EOVERFLOW);
	CHECK_EQ(hits, 77);
	CHECK_EQ(blk(p, o1)->pins, BEL_MAX_PINS + 1);
	CHECK_EQ(c->nr_pins, 1);
	CHECK_EQ(stats_of(p).lookups, s.lookups);
	CHECK_EQ(stats_of(p).pinned_blocks, 1);
	/* Count-only probes still work. */
	CHECK_EQ(bel_lookup(c, 0, 2, keys, false, NULL, &hits), 0);
	CHECK_EQ(hits, 2);
	blk(p, o1)->pins = 1;
	CHECK_EQ(bel_release(c, 1, &o1), 0);
	teardown(p, c, NULL);
}

static void foreign_blocks(void)
{
	static const u32 sizes[] = { 8 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *a = bel_client_new(p);
	struct bel_client *b = bel_client_new(p);
	struct beluga_key k = K(9);
	u64 off, pub, got;
	s32 res;
	u32 hits;

	CHECK_EQ(bel_alloc(a, 1, &off), 0);
	CHECK_EQ(bel_free(b, 1, &off), -EINVAL);
	CHECK_EQ(publish_arrays(b, 0, 1, &off, &k, &res, NULL, NULL, NULL), 0);
	CHECK_EQ(res, -EPERM);
	CHECK_EQ(bel_release(b, 1, &off), -EINVAL);
	CHECK_EQ(blk(p, off)->owner, a);
	pub = put_key(a, 0, K(10));
	/* A published block belongs to nobody: FREE refuses it. */
	CHECK_EQ(bel_free(a, 1, &pub), -EINVAL);
	k = K(10);
	CHECK_EQ(bel_lookup(a, 0, 1, &k, true, &got, &hits), 0);
	CHECK_EQ(bel_release(b, 1, &got), -EINVAL);
	CHECK_EQ(bel_release(a, 1, &got), 0);
	teardown(p, a, b);
}

/*
 * An ALLOC that evicts names what it evicted: (ns, key) of each victim,
 * least recently used first, whoever published it; pinned blocks are
 * passed over; an ALLOC that fails, or one that finds free blocks, names
 * nothing (issue 18: vLLM's removal events).
 */
static void alloc_reports_evicted(void)
{
	static const u32 sizes[] = { 4 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *a = bel_client_new(p);
	struct bel_client *b = bel_client_new(p);
	struct beluga_evicted_key ev[4];
	struct beluga_key k1 = K(1), k2 = K(2);
	u64 tmp[4], got, off1;
	u32 n = 99, hits;

	CHECK_EQ(bel_alloc_evicting(a, 1, tmp, ev, NULL), -EINVAL);
	CHECK_EQ(bel_alloc_evicting(a, 1, tmp, NULL, &n), -EINVAL);
	/* Free blocks: nothing evicted, and n says so. */
	CHECK_EQ(bel_alloc_evicting(a, 2, tmp, ev, &n), 0);
	CHECK_EQ(n, 0);
	CHECK_EQ(bel_free(a, 2, tmp), 0);
	off1 = put_key(a, 7, k1);	/* oldest */
	put_key(b, 9, k2);		/* another ns, another file */
	put_key(a, 7, K(3));
	put_key(a, 7, K(4));		/* newest: the pool is full */
	/* k1 pinned: passed over; k2 and K(3) go, oldest first. */
	CHECK_EQ(bel_lookup(b, 7, 1, &k1, true, &got, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(bel_alloc_evicting(a, 2, tmp, ev, &n), 0);
	CHECK_EQ(n, 2);
	CHECK_EQ(ev[0].ns, 9);
	CHECK(ev[0].key.lo == k2.lo && ev[0].key.hi == k2.hi);
	CHECK_EQ(ev[1].ns, 7);
	CHECK_EQ(ev[1].key.lo, 3);
	CHECK_EQ(has_key(b, 9, k2), 0);
	CHECK_EQ(has_key(a, 7, K(3)), 0);
	CHECK_EQ(has_key(a, 7, k1), 1);
	/* Too few evictable blocks: -ENOSPC, nothing evicted or named. */
	n = 99;
	CHECK_EQ(bel_alloc_evicting(a, 2, tmp + 2, ev, &n), -ENOSPC);
	CHECK_EQ(n, 0);
	CHECK_EQ(has_key(a, 7, K(4)), 1);
	CHECK_EQ(bel_release(b, 1, &off1), 0);
	teardown(p, a, b);
}

int main(void)
{
	TAP_RUN(release_on_close);
	TAP_RUN(pins_multiplicity);
	TAP_RUN(release_all_or_nothing);
	TAP_RUN(pin_table_growth);
	TAP_RUN(pin_overflow);
	TAP_RUN(foreign_blocks);
	TAP_RUN(alloc_reports_evicted);
	return tap_done();
}
