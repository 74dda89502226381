// SPDX-License-Identifier: GPL-2.0
/*
 * Close of a big client: bel_client_release() drops the pool lock every
 * BEL_SCAN_CHUNK items, and the pool is consistent at every drop. Built
 * with BEL_TEST_LOCK_HOOK (Makefile), so bel_spin_lock() calls the hook
 * below before each acquisition, with the lock free: it counts the
 * acquisitions made during the release and, at each one after the first,
 * checks the whole pool and lets another client work.
 */
#include "helpers.h"

/* Above two chunks of allocations and of pins. */
#define NR_ALLOC	(2 * BEL_SCAN_CHUNK + 100)
#define NR_PUB		(2 * BEL_SCAN_CHUNK + 100)
#define NR_DOUBLE	10	/* keys the closing client pins twice */

static struct {
	struct bel_pool *pool;
	struct bel_client *closing, *other;
	bool active, busy;
	u32 used0;		/* closing's pin-table entries at the start */
	u64 acquisitions, last_progress, max_step;
	u64 frees, releases;	/* done by @other between chunks */
} w;

static void other_works(void)
{
	struct beluga_key k = K(NR_PUB - 1);
	u64 off, pin;
	u32 hits = 0;

	/* A block freed by the closing client may come back here. */
	CHECK_EQ(bel_alloc(w.other, 1, &off), 0);
	CHECK_EQ(bel_free(w.other, 1, &off), 0);
	w.frees++;
	/* A block the closing client still pins or has let go. */
	CHECK_EQ(bel_lookup(w.other, 0, 1, &k, true, &pin, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(bel_release(w.other, 1, &pin), 0);
	w.releases++;
}

void bel_test_before_spin_lock(bel_spinlock_t *l)
{
	u64 progress;

	if (!w.active || w.busy || l != &w.pool->lock)
		return;
	if (++w.acquisitions == 1)
		return;		/* release() taking it the first time */
	w.busy = true;
	/* Items returned by the chunk that just ended. */
	progress = (NR_ALLOC - w.closing->nr_allocated) +
		   (w.used0 - w.closing->pins.used);
	if (progress - w.last_progress > w.max_step)
		w.max_step = progress - w.last_progress;
	w.last_progress = progress;
	check_pool(w.pool);
	check_client(w.closing);
	other_works();
	check_client(w.other);
	w.busy = false;
}

static void fill(struct bel_client *c, u32 n, u64 *offs)
{
	u32 i, step;

	for (i = 0; i < n; i += step) {
		step = n - i < BELUGA_MAX_BATCH ? n - i : BELUGA_MAX_BATCH;
		REQUIRE(bel_alloc(c, step, offs + i) == 0);
	}
}

static void big_client_release_chunked(void)
{
	static u64 offs[NR_ALLOC > NR_PUB ? NR_ALLOC : NR_PUB];
	static struct beluga_key keys[NR_PUB];
	static s32 results[NR_PUB];
	u32 sizes[] = { NR_ALLOC + NR_PUB + 16 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *o = bel_client_new(p);
	struct bel_client *c = bel_client_new(p);
	struct bel_stats before, s;
	u64 c_pins, expected;
	u32 i, step, hits;

	/* @o publishes NR_PUB keys; @c pins them all, some twice. */
	for (i = 0; i < NR_PUB; i++)
		keys[i] = K(i);
	fill(o, NR_PUB, offs);
	for (i = 0; i < NR_PUB; i += step) {
		step = NR_PUB - i < BELUGA_MAX_BATCH ? NR_PUB - i :
						       BELUGA_MAX_BATCH;
		REQUIRE(publish_arrays(o, 0, step, offs + i, keys + i,
				    results + i, NULL, NULL, NULL) == 0);
		CHECK_EQ(bel_lookup(c, 0, step, keys + i, true, offs,
				    &hits), 0);
		CHECK_EQ(hits, step);
	}
	CHECK_EQ(bel_lookup(c, 0, NR_DOUBLE, keys, true, offs, &hits), 0);
	/* @o shares one pin with @c; it must survive @c's close. */
	CHECK_EQ(bel_lookup(o, 0, 1, keys, true, offs, &hits), 0);
	/* @c holds NR_ALLOC blocks ALLOCATED. */
	fill(c, NR_ALLOC, offs);
	check_pool(p);
	check_client(c);
	c_pins = c->nr_pins;
	CHECK_EQ(c_pins, NR_PUB + NR_DOUBLE);
	CHECK_EQ(c->pins.used, NR_PUB);

	before = stats_of(p);
	memset(&w, 0, sizeof(w));
	w.pool = p;
	w.closing = c;
	w.other = o;
	w.used0 = c->pins.used;
	/* One pause per BEL_SCAN_CHUNK items: blocks and pin-table slots. */
	expected = 1 + (NR_ALLOC + (u64)c->pins.capacity) / BEL_SCAN_CHUNK;
	w.active = true;
	bel_client_release(c);
	w.active = false;

	CHECK(w.acquisitions >= expected);
	CHECK(w.max_step <= BEL_SCAN_CHUNK);
	CHECK(w.last_progress >= NR_ALLOC + NR_PUB - BEL_SCAN_CHUNK);
	printf("# release took the pool lock %llu times (at least %llu)\n",
	       (unsigned long long)w.acquisitions,
	       (unsigned long long)expected);

	/* Exact accounting: @c's part is gone, @o's pin and data stay. */
	s = stats_of(p);
	CHECK_EQ(s.clients, before.clients - 1);
	CHECK_EQ(s.allocated_blocks, 0);
	CHECK_EQ(s.published_blocks, NR_PUB);
	CHECK_EQ(s.free_blocks, s.total_blocks - NR_PUB);
	CHECK_EQ(s.pins, 1);
	CHECK_EQ(s.pinned_blocks, 1);
	CHECK_EQ(s.frees, before.frees + NR_ALLOC + w.frees);
	CHECK_EQ(s.releases, before.releases + c_pins + w.releases);
	CHECK_EQ(s.evictions, before.evictions);
	CHECK(blk(p, offs[0])->state == BEL_BLOCK_FREE);
	check_pool(p);
	check_client(o);
	CHECK_EQ(o->nr_pins, 1);
	bel_client_release(o);
	s = stats_of(p);
	CHECK_EQ(s.pins, 0);
	CHECK_EQ(s.pinned_blocks, 0);
	check_pool(p);
	pool_free(p);
}

int main(void)
{
	TAP_RUN(big_client_release_chunked);
	return tap_done();
}
