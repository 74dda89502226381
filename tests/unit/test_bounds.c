// SPDX-License-Identifier: GPL-2.0
/*
 * The work an eviction does under the pool lock is bounded (second module
 * review, findings 3, 4 and 7). Built with BEL_TEST_LOCK_HOOK (Makefile):
 * the hook runs before each acquisition of a lock, so the work counted
 * between two acquisitions of the pool lock (pool->lru_claim_visits,
 * pool->lru_merged) is the work of one hold.
 *   1. An ALLOC on a pool whose blocks are all pinned looks at no more than
 *      one chunk of blocks per hold, and the next ALLOC at almost none: a
 *      pinned block the claim met waits off the eviction's lists until its
 *      last pin goes.
 *   2. Many clients whose LRU logs are nearly full: the evicting ALLOC
 *      merges them in holds of at most one chunk (plus one log), and still
 *      evicts exactly the least recently used block.
 *   3. The use of a block is the release of its last pin, not the pin
 *      (finding 6: the uapi header now says so).
 *   4. Blocks that a merge moves between LRU shards are still seen by a
 *      claim: ALLOC of every evictable block never answers -ENOSPC while a
 *      releaser's merges move hundreds of blocks at once.
 */
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include "helpers.h"

static struct {
	struct bel_pool *pool;
	bool active;
	u64 holds;
	u64 visits0, merged0;		/* counters at the last acquisition */
	u64 max_visits, max_merged;	/* most work in one hold */
} h;

void bel_test_before_spin_lock(bel_spinlock_t *l)
{
	struct bel_pool *p = h.pool;

	if (!h.active || l != &p->lock)
		return;
	/* The lock is free: the counters hold the last hold's work. */
	if (p->lru_claim_visits - h.visits0 > h.max_visits)
		h.max_visits = p->lru_claim_visits - h.visits0;
	if (p->lru_merged - h.merged0 > h.max_merged)
		h.max_merged = p->lru_merged - h.merged0;
	h.visits0 = p->lru_claim_visits;
	h.merged0 = p->lru_merged;
	h.holds++;
}

static void watch(struct bel_pool *p)
{
	memset(&h, 0, sizeof(h));
	h.pool = p;
	h.visits0 = p->lru_claim_visits;
	h.merged0 = p->lru_merged;
	h.active = true;
}

/* Stop watching; the last hold ended with the call watched. */
static void unwatch(void)
{
	bel_test_before_spin_lock(&h.pool->lock);
	h.active = false;
}

/* Publish keys K(first..first+n) through @c, in batches. */
static void publish_run(struct bel_client *c, u32 first, u32 n)
{
	static u64 offs[BELUGA_MAX_BATCH];
	static struct beluga_key keys[BELUGA_MAX_BATCH];
	static s32 res[BELUGA_MAX_BATCH];
	u32 done, i, a, b, f;

	for (done = 0; done < n; done += i) {
		u32 batch = n - done < BELUGA_MAX_BATCH ? n - done :
							  BELUGA_MAX_BATCH;

		REQUIRE_EQ(bel_alloc(c, batch, offs), 0);
		for (i = 0; i < batch; i++)
			keys[i] = K(first + done + i);
		REQUIRE_EQ(publish_arrays(c, 0, batch, offs, keys, res, &a,
					  &b, &f), 0);
		REQUIRE_EQ(a, batch);
	}
}

/* LOOKUP+PIN keys K(first..first+n) through @c; offsets into @offs. */
static void pin_run(struct bel_client *c, u32 first, u32 n, u64 *offs)
{
	static struct beluga_key keys[BELUGA_MAX_BATCH];
	u32 done, i, hits;

	for (done = 0; done < n; done += i) {
		u32 batch = n - done < BELUGA_MAX_BATCH ? n - done :
							  BELUGA_MAX_BATCH;

		for (i = 0; i < batch; i++)
			keys[i] = K(first + done + i);
		REQUIRE_EQ(bel_lookup(c, 0, batch, keys, true, offs + done,
				      &hits), 0);
		REQUIRE_EQ(hits, batch);
	}
}

static void release_run(struct bel_client *c, u32 n, const u64 *offs)
{
	u32 done, batch;

	for (done = 0; done < n; done += batch) {
		batch = n - done < BELUGA_MAX_BATCH ? n - done :
						      BELUGA_MAX_BATCH;
		REQUIRE_EQ(bel_release(c, batch, offs + done), 0);
	}
}

/* --- 1. an all-pinned pool --------------------------------------------- */

#define NPIN	(3 * BEL_SCAN_CHUNK + 100)

static void all_pinned_alloc_is_bounded(void)
{
	static const u32 sizes[] = { NPIN / 2, NPIN - NPIN / 2 };
	static u64 offs[NPIN];
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	u64 off, first_max;
	struct beluga_key k;

	publish_run(w, 0, NPIN);
	pin_run(r, 0, NPIN, offs);

	watch(p);
	CHECK_EQ(bel_alloc(w, 1, &off), -ENOSPC);
	unwatch();
	first_max = h.max_visits;
	printf("# %u blocks, all pinned: the first ALLOC looked at %llu in %llu holds (at most %llu in one)\n",
	       NPIN, (unsigned long long)p->lru_claim_visits,
	       (unsigned long long)h.holds, (unsigned long long)first_max);
	/* One chunk of parked blocks, and the one victim it looked for. */
	CHECK(first_max <= BEL_SCAN_CHUNK + 1);

	watch(p);
	CHECK_EQ(bel_alloc(w, 1, &off), -ENOSPC);
	unwatch();
	printf("# the second ALLOC looked at %llu\n",
	       (unsigned long long)h.max_visits);
	CHECK(h.max_visits <= BEL_LRU_SHARDS);
	check_pool(p);

	/* One block let go: the next ALLOC finds exactly that one. */
	CHECK_EQ(bel_release(r, 1, &offs[NPIN / 2]), 0);
	watch(p);
	CHECK_EQ(bel_alloc(w, 1, &off), 0);
	unwatch();
	printf("# after one RELEASE, ALLOC looked at %llu\n",
	       (unsigned long long)h.max_visits);
	CHECK_EQ(off, offs[NPIN / 2]);
	CHECK(h.max_visits <= BEL_LRU_SHARDS + 1);
	k = K(NPIN / 2);
	CHECK_EQ(has_key(w, 0, k), 0);
	CHECK_EQ(bel_free(w, 1, &off), 0);

	/* Every pin let go: all of them evictable again, oldest first. */
	release_run(r, NPIN / 2, offs);
	release_run(r, NPIN - NPIN / 2 - 1, offs + NPIN / 2 + 1);
	check_pool(p);
	/* One block is free (the one evicted above): two more go. */
	CHECK_EQ(bel_alloc(w, 3, offs), 0);
	CHECK_EQ(has_key(w, 0, K(0)), 0);
	CHECK_EQ(has_key(w, 0, K(1)), 0);
	CHECK_EQ(has_key(w, 0, K(2)), 1);
	CHECK_EQ(bel_free(w, 3, offs), 0);
	teardown(p, w, r);
}

/* --- 2. many logs, one evicting ALLOC ---------------------------------- */

#define NCLIENTS	40
#define NUSED		(BEL_LRU_LOG - 1)	/* a log that merged nothing yet */
#define NBLOCKS		2048

static void merge_under_lock_is_bounded(void)
{
	static const u32 sizes[] = { NBLOCKS / 2, NBLOCKS / 2 };
	static u64 offs[NUSED];
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *c[NCLIENTS];
	u64 off;
	int i;

	publish_run(w, 0, NBLOCKS);
	/* Each client uses the same NUSED keys; its log keeps them all. */
	for (i = 0; i < NCLIENTS; i++) {
		c[i] = bel_client_new(p);
		pin_run(c[i], 0, NUSED, offs);
		release_run(c[i], NUSED, offs);
		CHECK_EQ(c[i]->log.n, NUSED);
	}
	watch(p);
	CHECK_EQ(bel_alloc(w, 1, &off), 0);
	unwatch();
	printf("# %d clients x %u log entries: one evicting ALLOC merged at most %llu entries in one hold, %llu holds\n",
	       NCLIENTS, NUSED, (unsigned long long)h.max_merged,
	       (unsigned long long)h.holds);
	CHECK(h.max_merged <= BEL_SCAN_CHUNK + BEL_LRU_LOG);
	/* The least recently used: the first key nobody used since. */
	CHECK_EQ(has_key(w, 0, K(NUSED)), 0);
	CHECK_EQ(has_key(w, 0, K(NUSED + 1)), 1);
	CHECK_EQ(has_key(w, 0, K(0)), 1);
	CHECK_EQ(bel_free(w, 1, &off), 0);
	check_pool(p);
	for (i = 0; i < NCLIENTS; i++)
		bel_client_release(c[i]);
	teardown(p, w, NULL);
}

/*
 * Finding 6: the uapi header's rule of use. A pinned at t1, B published at
 * t2, A's pin released at t3: B is the least recently used.
 */
static void last_release_is_the_use(void)
{
	static const u32 sizes[] = { 2 };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	struct beluga_key a = K(1);
	u64 pin, off;
	u32 hits;

	put_key(w, 0, a);
	CHECK_EQ(bel_lookup(r, 0, 1, &a, true, &pin, &hits), 0);
	CHECK_EQ(hits, 1);
	put_key(w, 0, K(2));
	CHECK_EQ(bel_release(r, 1, &pin), 0);
	CHECK_EQ(bel_alloc(w, 1, &off), 0);
	CHECK_EQ(has_key(w, 0, K(2)), 0);
	CHECK_EQ(has_key(w, 0, a), 1);
	CHECK_EQ(bel_free(w, 1, &off), 0);
	teardown(p, w, r);
}

/* --- 4. blocks in transit ----------------------------------------------- */

#define TBLOCKS		1200
#define TRUN		64		/* the releaser pins at most this many */
#define TSECS		3

static struct bel_pool *tp;
static int tstop;

static void *releaser(void *arg)
{
	struct bel_client *c = bel_client_new(tp);
	static struct beluga_key keys[TRUN];
	u64 offs[TRUN], rnd = 7;
	u32 hits, j;

	(void)arg;
	while (!__atomic_load_n(&tstop, __ATOMIC_ACQUIRE)) {
		u64 first;

		rnd = rnd * 6364136223846793005ULL + 1442695040888963407ULL;
		first = (rnd >> 33) % TBLOCKS;
		for (j = 0; j < TRUN; j++)
			keys[j] = K((first + j) % TBLOCKS);
		if (bel_lookup(c, 0, TRUN, keys, true, offs, &hits))
			break;
		if (hits && bel_release(c, hits, offs))
			break;
	}
	bel_client_release(c);
	return NULL;
}

static void claim_sees_blocks_in_transit(void)
{
	static const u32 sizes[] = { TBLOCKS / 2, TBLOCKS / 2 };
	static u64 offs[TBLOCKS];
	struct bel_client *w;
	pthread_t t;
	time_t end;
	u64 rounds = 0, enospc = 0;
	u32 i;

	tp = pool_with(2, sizes);
	w = bel_client_new(tp);
	tstop = 0;
	REQUIRE_EQ(pthread_create(&t, NULL, releaser, NULL), 0);
	end = time(NULL) + TSECS;
	while (time(NULL) < end) {
		/* Republish whatever the last round evicted. */
		for (i = 0; i < TBLOCKS; i++)
			if (!has_key(w, 0, K(i))) {
				u64 off;
				s32 res;
				u32 a, b, f;
				struct beluga_key k = K(i);

				if (bel_alloc(w, 1, &off))
					break;
				REQUIRE_EQ(publish_arrays(w, 0, 1, &off, &k,
							  &res, &a, &b, &f), 0);
			}
		/* All but what the releaser may pin: must never fail. */
		if (bel_alloc(w, TBLOCKS - TRUN, offs) == -ENOSPC) {
			struct bel_stats st = stats_of(tp);

			fprintf(stderr, "# ENOSPC: free %llu published %llu pinned %llu\n",
				(unsigned long long)st.free_blocks,
				(unsigned long long)st.published_blocks,
				(unsigned long long)st.pinned_blocks);
			enospc++;
		}
		else
			REQUIRE_EQ(bel_free(w, TBLOCKS - TRUN, offs), 0);
		rounds++;
	}
	__atomic_store_n(&tstop, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
	printf("# %llu rounds of ALLOC(%u) of %u blocks against a releaser: %llu -ENOSPC\n",
	       (unsigned long long)rounds, TBLOCKS - TRUN, TBLOCKS,
	       (unsigned long long)enospc);
	CHECK(rounds > 10);
	CHECK_EQ(enospc, 0);
	check_pool(tp);
	bel_client_release(w);
	pool_free(tp);
}

int main(void)
{
	TAP_RUN(all_pinned_alloc_is_bounded);
	TAP_RUN(merge_under_lock_is_bounded);
	TAP_RUN(last_release_is_the_use);
	TAP_RUN(claim_sees_blocks_in_transit);
	return tap_done();
}
