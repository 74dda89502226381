/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Keys placed in the index's buckets on purpose, and a writer that keeps
 * evicting the blocks ahead of a key in its chain and reusing them under
 * keys of other buckets: the case of the second review's finding 2,
 * shared by the tests of the lock-free readers (test_falsemiss.c, the
 * kernel's; test_index_copy.c, the mapped copy's).
 */
#ifndef BEL_TEST_CHAIN_REUSE_H
#define BEL_TEST_CHAIN_REUSE_H

#include <pthread.h>
#include <unistd.h>

#include "helpers.h"

static inline u32 bucket_of(struct bel_pool *p, struct beluga_key k)
{
	return (u32)bel_key_hash(0, k.lo, k.hi) & (p->nr_buckets - 1);
}

/* The first key K(@from...) whose bucket is (@same) or is not @bucket. */
static inline struct beluga_key key_in(struct bel_pool *p, u64 from,
				       u32 bucket, bool same)
{
	u64 i;

	for (i = from; (bucket_of(p, K(i)) == bucket) != same; i++)
		;
	return K(i);
}

/* The first K(@from...) of another bucket than @bucket, empty or not. */
static inline struct beluga_key key_elsewhere(struct bel_pool *p, u64 from,
					      u32 bucket, bool empty)
{
	u64 i;
	u32 b;

	for (i = from;; i++) {
		b = bucket_of(p, K(i));
		if (b != bucket && (p->buckets[b].head == BEL_NONE) == empty)
			return K(i);
	}
}

#define REUSE_SAME_KEYS		4	/* X_i: keys of K's bucket, ahead of it */
#define REUSE_OTHER_KEYS	8	/* Y_j: keys of other buckets than K's */

struct chain_reuse {
	struct bel_pool *pool;
	struct beluga_key x[REUSE_SAME_KEYS], other[REUSE_OTHER_KEYS];
	int stop;
};

/* X_i of @k's bucket from K(@from_x), Y_j of other buckets from K(@from_y). */
static inline void chain_reuse_keys(struct chain_reuse *cr, struct beluga_key k,
				    u64 from_x, u64 from_y)
{
	u32 bk = bucket_of(cr->pool, k), j;

	cr->x[0] = key_in(cr->pool, from_x, bk, true);
	for (j = 1; j < REUSE_SAME_KEYS; j++)
		cr->x[j] = key_in(cr->pool, cr->x[j - 1].lo + 1, bk, true);
	cr->other[0] = key_in(cr->pool, from_y, bk, false);
	for (j = 1; j < REUSE_OTHER_KEYS; j++)
		cr->other[j] = key_in(cr->pool, cr->other[j - 1].lo + 1, bk,
				      false);
}

/*
 * A thread (@arg: struct chain_reuse) until ->stop. Evicted blocks are
 * reused at once (the free list is LIFO): X_i's block goes to Y_j in
 * another bucket, then back to X_i at the head of K's.
 */
static inline void *chain_reuse_writer(void *arg)
{
	struct chain_reuse *cr = arg;
	struct bel_client *c = bel_client_new(cr->pool);
	u32 i, j = 0;

	for (i = 0; i < REUSE_SAME_KEYS; i++)
		put_key(c, 0, cr->x[i]);
	i = 0;
	while (!__atomic_load_n(&cr->stop, __ATOMIC_RELAXED)) {
		if (bel_evict_key(cr->pool, 0, &cr->x[i]))
			abort();
		put_key(c, 0, cr->other[j]);
		if (bel_evict_key(cr->pool, 0, &cr->other[j]))
			abort();
		put_key(c, 0, cr->x[i]);
		j = (j + 1) % REUSE_OTHER_KEYS;
		i = (i + 1) % REUSE_SAME_KEYS;
	}
	bel_client_release(c);
	return NULL;
}

/*
 * The stress both readers' tests run: the writer above against @nr
 * @reader threads (each gets its index, 0..@nr-1, as its argument) for
 * @seconds; returns once all have stopped.
 */
static inline void chain_reuse_stress(struct chain_reuse *cr,
				      void *(*reader)(void *), long nr,
				      unsigned int seconds)
{
	pthread_t rd[nr], wr;
	long t;

	cr->stop = 0;
	REQUIRE_EQ(pthread_create(&wr, NULL, chain_reuse_writer, cr), 0);
	for (t = 0; t < nr; t++)
		REQUIRE_EQ(pthread_create(&rd[t], NULL, reader, (void *)t), 0);
	sleep(seconds);
	__atomic_store_n(&cr->stop, 1, __ATOMIC_RELAXED);
	for (t = 0; t < nr; t++)
		pthread_join(rd[t], NULL);
	pthread_join(wr, NULL);
}

#endif /* BEL_TEST_CHAIN_REUSE_H */
