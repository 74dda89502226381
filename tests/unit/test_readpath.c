// SPDX-License-Identifier: GPL-2.0
/*
 * The read path without the pool lock (kmod/core/index.c, client.c, lru.c).
 * Built with BEL_TEST_LOCK_HOOK (Makefile): the hook counts acquisitions of
 * the pool lock.
 *   1. LOOKUP (count-only, with offsets, with pins), RELEASE and the page
 *      fault's offset lookup take the pool lock zero times; so does a
 *      RELEASE that fills its client's LRU log and merges it, and the LRU
 *      order after such merges is still exact.
 *   2. Threads, one client each, LOOKUP+PIN and RELEASE runs of more
 *      distinct shared blocks than one LRU log holds, so that their merges
 *      move the same blocks between their LRU shards at once, while a
 *      writer evicts and republishes; the LRU is whole and sorted after.
 *   3. Threads, one client each, LOOKUP+PIN chains that share a hot head
 *      and check, through a shadow of the blocks' contents, that a pinned
 *      block keeps its bytes while a writer thread republishes and ALLOCs
 *      (evicting) and an admin thread evicts namespaces and removes and
 *      re-adds a region, all at once.
 */
#include "helpers.h"

static struct bel_pool *lock_pool;
static u64 lock_count;

void bel_test_before_spin_lock(bel_spinlock_t *l)
{
	if (lock_pool && l == &lock_pool->lock)
		__atomic_add_fetch(&lock_count, 1, __ATOMIC_RELAXED);
}

static void read_path_takes_no_pool_lock(void)
{
	static const u32 sizes[] = { 64, 64 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	struct beluga_key keys[32];
	u64 offs[32], got[32], ro;
	u32 hits, i, slot;
	int round;

	for (i = 0; i < 32; i++) {
		keys[i] = K(i);
		offs[i] = put_key(w, 0, keys[i]);
	}
	/* Warm up: the pin table's first growth may take it, once. */
	CHECK_EQ(bel_lookup(r, 0, 32, keys, true, got, &hits), 0);
	CHECK_EQ(bel_release(r, 32, got), 0);

	lock_pool = p;
	lock_count = 0;
	for (round = 0; round < 100; round++) {
		CHECK_EQ(bel_lookup(r, 0, 32, keys, false, NULL, &hits), 0);
		CHECK_EQ(hits, 32);
		CHECK_EQ(bel_lookup(r, 0, 32, keys, false, got, &hits), 0);
		CHECK_EQ(got[31], offs[31]);
		CHECK_EQ(bel_lookup(r, 0, 32, keys, true, got, &hits), 0);
		CHECK_EQ(hits, 32);
		CHECK_EQ(bel_release(r, 32, got), 0);
		CHECK_EQ(bel_pool_find_offset(p, offs[5] + 100, &slot, &ro), 0);
	}
	lock_pool = NULL;
	printf("# pool lock taken %llu times by 100 rounds of the read path\n",
	       (unsigned long long)lock_count);
	CHECK_EQ(lock_count, 0);
	/* The releases above are used: the LRU still sees them in order. */
	check_pool(p);
	check_client(r);
	teardown(p, w, r);
}

/* More distinct blocks than one LRU log holds, released in reverse. */
#define MANY	(BEL_LRU_LOG * 3 - 100)

static void full_log_merges_without_pool_lock(void)
{
	static const u32 sizes[] = { MANY / 2 + 64, MANY / 2 + 64 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	static struct beluga_key keys[64];
	static u64 offs[MANY];
	static u32 order[MANY + 128];
	u64 got[64];
	u32 hits, i, j, n, total;

	for (i = 0; i < MANY; i++)
		offs[i] = put_key(w, 0, K(i));
	/* The pin table's first growth takes the pool lock, once. */
	for (j = 0; j < 64; j++)
		keys[j] = K(j);
	CHECK_EQ(bel_lookup(r, 0, 64, keys, true, got, &hits), 0);
	CHECK_EQ(bel_release(r, 64, got), 0);
	lock_pool = p;
	lock_count = 0;
	/* Newest key first: the LRU's order becomes the reverse of PUBLISH. */
	for (i = 0; i < MANY; i += n) {
		n = MANY - i < 64 ? MANY - i : 64;
		for (j = 0; j < n; j++)
			keys[j] = K(MANY - 1 - i - j);
		CHECK_EQ(bel_lookup(r, 0, n, keys, true, got, &hits), 0);
		CHECK_EQ(hits, n);
		CHECK_EQ(bel_release(r, n, got), 0);
	}
	lock_pool = NULL;
	printf("# %u releases (%u log merges) took the pool lock %llu times\n",
	       MANY, MANY / BEL_LRU_LOG, (unsigned long long)lock_count);
	CHECK_EQ(lock_count, 0);
	check_pool(p);
	bel_spin_lock(&p->lock);
	bel_lru_merge_locked(p);
	total = bel_lru_order_locked(p, order, MANY + 128);
	bel_spin_unlock(&p->lock);
	CHECK_EQ(total, MANY);
	for (i = 0; i < MANY && i < total; i++)
		if (bel_id_to_offset(p, order[i]) != offs[MANY - 1 - i]) {
			CHECK_EQ(bel_id_to_offset(p, order[i]),
				 offs[MANY - 1 - i]);
			break;
		}
	teardown(p, w, r);
}

/* --- the stress ---------------------------------------------------------- */

#define NB		48		/* blocks per region, 2 regions */
#define READERS		3
#define CHAIN		4		/* hot head + 3 of the reader's own */
#define ITERS		20000

static struct bel_pool *sp;
/* "Bytes" of each block: its key. Regions start on 2 MiB boundaries. */
#define SPAN		(BEL_REGION_OFFSET_ALIGN / BS)
static u64 shadow[2 * SPAN];
static int stop, failures;

static u32 dense(u64 off)
{
	return (u32)(off / BS);
}

static struct beluga_key chain_key(int r, int j)
{
	return K(j ? 1000 + (u64)r * CHAIN + (u64)j : 7);
}

static void fail(const char *what, u64 off)
{
	if (__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED) < 10)
		fprintf(stderr, "# %s (offset 0x%llx)\n", what,
			(unsigned long long)off);
}

static void *reader(void *arg)
{
	int me = (int)(long)arg, it, j;
	struct bel_client *c = bel_client_new(sp);
	struct beluga_key keys[CHAIN];
	u64 offs[CHAIN];
	u32 hits;

	for (j = 0; j < CHAIN; j++)
		keys[j] = chain_key(me, j);
	for (it = 0; it < ITERS; it++) {
		if (bel_lookup(c, 0, CHAIN, keys, true, offs, &hits)) {
			fail("LOOKUP failed", 0);
			break;
		}
		for (j = 0; j < (int)hits; j++)
			if (__atomic_load_n(&shadow[dense(offs[j])],
					    __ATOMIC_ACQUIRE) != keys[j].lo)
				fail("a pinned block holds another key", offs[j]);
		sched_yield();
		for (j = 0; j < (int)hits; j++)
			if (__atomic_load_n(&shadow[dense(offs[j])],
					    __ATOMIC_ACQUIRE) != keys[j].lo)
				fail("a pinned block changed", offs[j]);
		if (hits && bel_release(c, hits, offs))
			fail("RELEASE failed", offs[0]);
		/* A count-only probe of the same chain, now and then. */
		if (!(it % 8) &&
		    bel_lookup(c, 0, CHAIN, keys, false, NULL, &hits))
			fail("count-only LOOKUP failed", 0);
	}
	bel_client_release(c);
	return NULL;
}

/*
 * Publish @k in a fresh block, its "bytes" in the shadow written first
 * when @shadowed (the pools of the hot-head stress fit in it).
 */
static void publish(struct bel_client *c, struct beluga_key k, bool shadowed)
{
	u64 off;
	s32 res;
	u32 a, b, f;

	if (bel_alloc(c, 1, &off))
		return;			/* ENOSPC: everything pinned */
	if (shadowed)
		__atomic_store_n(&shadow[dense(off)], k.lo, __ATOMIC_RELEASE);
	if (publish_arrays(c, 0, 1, &off, &k, &res, &a, &b, &f) ||
	    (res != BELUGA_PUBLISH_OK && res != BELUGA_PUBLISH_EXISTS))
		fail("PUBLISH failed", off);
}

static void *writer(void *arg)
{
	struct bel_client *c = bel_client_new(sp);
	u64 extra[8];
	int r, j, i;

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		for (r = 0; r < READERS; r++)
			for (j = 0; j < CHAIN; j++)
				if (!has_key(c, 0, chain_key(r, j)))
					publish(c, chain_key(r, j), true);
		/* Pressure: evicts the oldest unpinned blocks. */
		if (!bel_alloc(c, 8, extra)) {
			for (i = 0; i < 8; i++)
				__atomic_store_n(&shadow[dense(extra[i])],
						 ~0ULL, __ATOMIC_RELEASE);
			if (bel_free(c, 8, extra))
				fail("FREE failed", extra[0]);
		}
	}
	bel_client_release(c);
	return NULL;
}

static void *admin(void *arg)
{
	u64 ev, first;
	u32 slot, n;
	int ret;

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		bel_evict_ns(sp, 0, NULL);
		ret = bel_pool_remove_region(sp, 1, true, &ev);
		if (ret == 0) {
			ret = bel_pool_add_region(sp, NB * BS, BS, &slot,
						  &first, &n);
			if (ret || slot != 1 || first + NB * BS >
			    sizeof(shadow) / sizeof(shadow[0]) * BS)
				fail("re-adding the region failed", first);
		} else if (ret != -EBUSY) {
			fail("removing the region failed", 0);
		}
		sched_yield();
	}
	return NULL;
}

static void readers_against_writers(void)
{
	static const u32 sizes[] = { NB, NB };
	pthread_t rd[READERS], wr, ad;
	struct bel_stats s;
	long t;

	sp = pool_with(2, sizes);
	stop = 0;
	failures = 0;
	REQUIRE_EQ(pthread_create(&wr, NULL, writer, NULL), 0);
	REQUIRE_EQ(pthread_create(&ad, NULL, admin, NULL), 0);
	for (t = 0; t < READERS; t++)
		REQUIRE_EQ(pthread_create(&rd[t], NULL, reader, (void *)t), 0);
	for (t = 0; t < READERS; t++)
		pthread_join(rd[t], NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(wr, NULL);
	pthread_join(ad, NULL);
	CHECK_EQ(failures, 0);
	s = stats_of(sp);
	printf("# %d readers x %d chain lookups: hits %llu of %llu keys, evictions %llu\n",
	       READERS, ITERS, (unsigned long long)s.lookup_hits,
	       (unsigned long long)s.lookup_keys,
	       (unsigned long long)s.evictions);
	CHECK(s.lookup_hits > 0);
	CHECK(s.evictions > 0);
	CHECK_EQ(s.pins, 0);
	CHECK_EQ(s.pinned_blocks, 0);
	CHECK_EQ(s.allocated_blocks, 0);
	check_pool(sp);
	pool_free(sp);
}

/* --- merges against merges ---------------------------------------------- */

#define MKEYS		(3 * BEL_LRU_LOG)
#define MRUN		64
#define MITERS		3000

static void *merging_reader(void *arg)
{
	struct bel_client *c = bel_client_new(sp);
	u64 rnd = 0x9E3779B97F4A7C15ULL * ((u64)(long)arg + 1), offs[MRUN];
	struct beluga_key keys[MRUN];
	u32 hits;
	int it, j;

	for (it = 0; it < MITERS; it++) {
		u64 first;

		rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
		first = (rnd >> 33) % MKEYS;
		for (j = 0; j < MRUN; j++)
			keys[j] = K((first + (u64)j) % MKEYS);
		if (bel_lookup(c, 0, MRUN, keys, true, offs, &hits)) {
			fail("LOOKUP failed", 0);
			break;
		}
		if (hits && bel_release(c, hits, offs))
			fail("RELEASE failed", offs[0]);
	}
	bel_client_release(c);
	return NULL;
}

static void *evicting_writer(void *arg)
{
	struct bel_client *c = bel_client_new(sp);
	u64 rnd = 12345, extra[8];
	int i;

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		/* Pressure: evicts the oldest unpinned blocks... */
		if (!bel_alloc(c, 8, extra) && bel_free(c, 8, extra))
			fail("FREE failed", extra[0]);
		/* ... and some of them come back. */
		for (i = 0; i < 8; i++) {
			struct beluga_key k;

			rnd = rnd * 6364136223846793005ULL + 1;
			k = K((rnd >> 33) % MKEYS);
			if (!has_key(c, 0, k))
				publish(c, k, false);
		}
	}
	bel_client_release(c);
	return NULL;
}

static void merges_against_merges(void)
{
	static const u32 sizes[] = { MKEYS / 2, MKEYS / 2 };
	struct bel_client *w;
	pthread_t rd[READERS], wr;
	struct bel_stats s;
	long t;
	u32 i;

	sp = pool_with(2, sizes);
	w = bel_client_new(sp);
	for (i = 0; i < MKEYS; i++)
		publish(w, K(i), false);
	bel_client_release(w);
	stop = 0;
	failures = 0;
	REQUIRE_EQ(pthread_create(&wr, NULL, evicting_writer, NULL), 0);
	for (t = 0; t < READERS; t++)
		REQUIRE_EQ(pthread_create(&rd[t], NULL, merging_reader,
					  (void *)t), 0);
	for (t = 0; t < READERS; t++)
		pthread_join(rd[t], NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(wr, NULL);
	CHECK_EQ(failures, 0);
	s = stats_of(sp);
	printf("# %d readers x %d runs of %d: hits %llu, evictions %llu\n",
	       READERS, MITERS, MRUN, (unsigned long long)s.lookup_hits,
	       (unsigned long long)s.evictions);
	/* Each reader's log filled and merged many times. */
	CHECK(s.lookup_hits > (u64)READERS * 4 * BEL_LRU_LOG);
	CHECK(s.evictions > 0);
	CHECK_EQ(s.pins, 0);
	check_pool(sp);
	pool_free(sp);
}

int main(void)
{
	TAP_RUN(read_path_takes_no_pool_lock);
	TAP_RUN(full_log_merges_without_pool_lock);
	TAP_RUN(readers_against_writers);
	TAP_RUN(merges_against_merges);
	return tap_done();
}
