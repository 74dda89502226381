// SPDX-License-Identifier: GPL-2.0
/*
 * The index's buckets cache their chain's first two blocks (ids and keys)
 * and the third's id (index.c, "Cache lines"): a count-only LOOKUP of a
 * key among the first two of its chain is answered from the bucket,
 * without reading a block, and one further down walks from the third.
 * Built with BEL_TEST_WALK_HOOK (Makefile): bel_test_at_walk() counts the
 * blocks a lock-free walk reads.
 *   1. cached_hit_reads_no_block: count-only LOOKUP of the first and the
 *      second key of a chain reads no block, of the fourth two (the third
 *      and it), a miss in a chain of two none; LOOKUP+PIN walks from the
 *      head.
 *   2. bucket_follows_its_chain: the cache follows inserts, removals at
 *      each place of the chain, and a rehash (check_pool() compares every
 *      bucket with its chain).
 *   3. torn_head_is_never_a_hit: a writer keeps making A, then B, the
 *      head of one bucket; readers probe C, which is A's lo with B's hi
 *      and in that bucket too, and was never published: a reader that
 *      took A's lo and B's hi from two different heads would report C.
 *      No probe may hit; probes of A and B do hit now and then.
 */
#include <unistd.h>
#include "chain_reuse.h"

static struct {
	struct bel_pool *pool;		/* NULL: not counting */
	u32 visits;
} walk;

void bel_test_at_walk(struct bel_pool *pool, u32 id)
{
	(void)id;
	if (pool == walk.pool)
		walk.visits++;
}

/* Blocks read by a LOOKUP of @k (@pin: with a pin, released after). */
static u32 visits_of(struct bel_pool *p, struct bel_client *c,
		     struct beluga_key k, bool pin, u32 *hits)
{
	u64 off = ~0ULL;

	walk.pool = p;
	walk.visits = 0;
	*hits = 99;
	CHECK_EQ(bel_lookup(c, 0, 1, &k, pin, pin ? &off : NULL, hits), 0);
	walk.pool = NULL;
	if (pin && *hits == 1)
		CHECK_EQ(bel_release(c, 1, &off), 0);
	return walk.visits;
}

static void cached_hit_reads_no_block(void)
{
	static const u32 sizes[] = { 64 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	struct beluga_key k[4];	/* the chain will be k3, k2, k1, k0 */
	u32 bk, hits, i;
	u64 off = 0;

	k[0] = K(1);
	bk = bucket_of(p, k[0]);
	for (i = 1; i < 4; i++)
		k[i] = key_in(p, k[i - 1].lo + 1, bk, true);
	put_key(w, 0, k[0]);
	put_key(w, 0, k[1]);
	/* A chain of two: both cached, a miss reads nothing either. */
	CHECK_EQ(visits_of(p, r, k[1], false, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(visits_of(p, r, k[0], false, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(visits_of(p, r, k[3], false, &hits), 0);
	CHECK_EQ(hits, 0);
	put_key(w, 0, k[2]);
	off = put_key(w, 0, k[3]);
	REQUIRE_EQ(p->buckets[bk].head, id_of(p, off));	/* inserted at the head */
	CHECK_EQ(visits_of(p, r, k[3], false, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(visits_of(p, r, k[2], false, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(visits_of(p, r, k[1], false, &hits), 1);	/* the third */
	CHECK_EQ(hits, 1);
	CHECK_EQ(visits_of(p, r, k[0], false, &hits), 2);
	CHECK_EQ(hits, 1);
	/* A miss walks on from the third to the chain's end. */
	CHECK_EQ(visits_of(p, r, key_in(p, k[3].lo + 1, bk, true), false, &hits), 2);
	CHECK_EQ(hits, 0);
	CHECK_EQ(visits_of(p, r, key_elsewhere(p, 1000, bk, true), false, &hits), 0);
	CHECK_EQ(hits, 0);
	/* A pinned probe walks from the head: it pins the block. */
	CHECK_EQ(visits_of(p, r, k[3], true, &hits), 1);
	CHECK_EQ(hits, 1);
	CHECK_EQ(visits_of(p, r, k[2], true, &hits), 2);
	CHECK_EQ(hits, 1);
	teardown(p, w, r);
}

static void bucket_follows_its_chain(void)
{
	static const u32 sizes[] = { 64 }, more[] = { 256 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	struct beluga_key k[5];
	u32 bk, i, before;

	k[0] = K(1);
	bk = bucket_of(p, k[0]);
	for (i = 1; i < 5; i++)
		k[i] = key_in(p, k[i - 1].lo + 1, bk, true);
	for (i = 0; i < 5; i++) {
		put_key(w, 0, k[i]);	/* the chain is k4 ... k0 */
		CHECK_EQ(check_pool(p), 0);
	}
	/* Out of every place: fourth, third, second, head, the last one. */
	CHECK_EQ(bel_evict_key(p, 0, &k[1]), 0);
	CHECK_EQ(check_pool(p), 0);
	CHECK_EQ(bel_evict_key(p, 0, &k[2]), 0);
	CHECK_EQ(check_pool(p), 0);
	CHECK_EQ(bel_evict_key(p, 0, &k[3]), 0);
	CHECK_EQ(check_pool(p), 0);
	CHECK_EQ(p->buckets[bk].third, BEL_NONE);	/* k4, k0 */
	CHECK_EQ(bel_evict_key(p, 0, &k[4]), 0);
	CHECK_EQ(check_pool(p), 0);
	CHECK_EQ(p->buckets[bk].second, BEL_NONE);	/* k0 */
	for (i = 1; i < 5; i++)
		CHECK_EQ(has_key(r, 0, k[i]), 0);
	CHECK_EQ(has_key(r, 0, k[0]), 1);
	CHECK_EQ(bel_evict_key(p, 0, &k[0]), 0);
	CHECK_EQ(p->buckets[bk].head, BEL_NONE);
	CHECK_EQ(has_key(r, 0, k[0]), 0);
	for (i = 0; i < 48; i++)
		put_key(w, 0, K(100 + i));
	before = p->nr_buckets;
	add_blocks(p, more[0]);			/* rehash into a larger array */
	CHECK(p->nr_buckets > before);
	CHECK_EQ(check_pool(p), 0);
	for (i = 0; i < 48; i++)
		CHECK_EQ(has_key(r, 0, K(100 + i)), 1);
	teardown(p, w, r);
}

/* --- the stress ---------------------------------------------------------- */

#define TORN_READERS	3
#define TORN_SECONDS	2

static struct {
	struct bel_pool *pool;
	struct beluga_key a, b, c;
	int stop;
	u64 lookups[TORN_READERS], false_hits[TORN_READERS];
	u64 a_hits[TORN_READERS], b_hits[TORN_READERS];
} tx;

static void *probe_torn(void *arg)
{
	long me = (long)arg;
	struct bel_client *c = bel_client_new(tx.pool);
	u64 n = 0;

	while (!__atomic_load_n(&tx.stop, __ATOMIC_RELAXED)) {
		tx.false_hits[me] += has_key(c, 0, tx.c);
		tx.a_hits[me] += has_key(c, 0, tx.a);
		tx.b_hits[me] += has_key(c, 0, tx.b);
		n++;
	}
	tx.lookups[me] = n;
	bel_client_release(c);
	return NULL;
}

/* A with any lo, then B whose hi, with A's lo, is C, all in one bucket. */
static void torn_keys(struct bel_pool *p)
{
	u64 hi, lo;
	u32 bk;

	tx.a = K2(7, 1);
	bk = bucket_of(p, tx.a);
	for (hi = 2; bucket_of(p, K2(tx.a.lo, hi)) != bk; hi++)
		;
	tx.c = K2(tx.a.lo, hi);
	for (lo = tx.a.lo + 1; bucket_of(p, K2(lo, hi)) != bk; lo++)
		;
	tx.b = K2(lo, hi);
}

static void torn_head_is_never_a_hit(void)
{
	static const u32 sizes[] = { 64 };
	u64 lookups = 0, false_hits = 0, a_hits = 0, b_hits = 0, rounds = 0;
	struct bel_client *w;
	pthread_t t[TORN_READERS];
	time_t end;
	long i;

	tx.pool = pool_with(1, sizes);
	w = bel_client_new(tx.pool);
	torn_keys(tx.pool);
	REQUIRE_EQ(bucket_of(tx.pool, tx.b), bucket_of(tx.pool, tx.a));
	REQUIRE_EQ(bucket_of(tx.pool, tx.c), bucket_of(tx.pool, tx.a));
	for (i = 0; i < TORN_READERS; i++)
		REQUIRE_EQ(pthread_create(&t[i], NULL, probe_torn, (void *)i), 0);
	end = time(NULL) + TORN_SECONDS;
	while (time(NULL) < end) {
		put_key(w, 0, tx.a);
		CHECK_EQ(bel_evict_key(tx.pool, 0, &tx.a), 0);
		put_key(w, 0, tx.b);
		CHECK_EQ(bel_evict_key(tx.pool, 0, &tx.b), 0);
		rounds++;
	}
	__atomic_store_n(&tx.stop, 1, __ATOMIC_RELAXED);
	for (i = 0; i < TORN_READERS; i++) {
		pthread_join(t[i], NULL);
		lookups += tx.lookups[i];
		false_hits += tx.false_hits[i];
		a_hits += tx.a_hits[i];
		b_hits += tx.b_hits[i];
	}
	printf("# %llu rounds of A then B at the head; %llu probes each of C, A, B: %llu, %llu, %llu hits\n",
	       (unsigned long long)rounds, (unsigned long long)lookups,
	       (unsigned long long)false_hits, (unsigned long long)a_hits,
	       (unsigned long long)b_hits);
	CHECK(lookups > 0 && rounds > 0);
	CHECK_EQ(false_hits, 0);
	CHECK(a_hits > 0 && b_hits > 0);
	check_pool(tx.pool);
	check_client(w);
	bel_client_release(w);
	pool_free(tx.pool);
}

int main(void)
{
	TAP_RUN(cached_hit_reads_no_block);
	TAP_RUN(bucket_follows_its_chain);
	TAP_RUN(torn_head_is_never_a_hit);
	return tap_done();
}
