// SPDX-License-Identifier: GPL-2.0
/*
 * The index's copy (kmod/core/bel_index_copy.h), the memory userspace maps
 * for LOOKUPs with no system call, and its reader bel_index_copy_get(),
 * which libbeluga compiles as it is here. Built with
 * BEL_TEST_COPY_WALK_HOOK (Makefile): the reader calls
 * bel_test_at_copy_walk() below as its walk reaches each entry, before it
 * reads the entry.
 *   1. copy_follows_index: after publishes, evictions, reuse and frees,
 *      the copy's buckets and entries equal the index's words, and the
 *      reader answers every key as the core's LOOKUP does.
 *   2. evicted_entry_restarts: the walk reaches the head of K's chain,
 *      which the hook evicts (its sequence becomes odd) before the reader
 *      reads it: the reader restarts from the bucket and finds K.
 *   3. pinned_key_found_across_reuse (and into an empty bucket): the head
 *      is evicted, reused and published under a key of another bucket
 *      before the reader reads it, as in test_falsemiss: the end-of-walk
 *      bucket check restarts the walk and K is found.
 *   4. seal_on_region_change: an ATTACH (region added) or DETACH seals the
 *      copy: the reader answers BEL_COPY_UNSURE, also for a miss that
 *      began before the seal, the pool stops writing the sealed copy, and
 *      a new copy is live and right.
 *   5. pinned_key_found_under_reuse: readers of the copy probe K (pinned
 *      throughout) for a few seconds while a writer evicts and reuses the
 *      blocks ahead of it in its chain; no answer may be a miss (an unsure
 *      one is asked of the core's LOOKUP, as libbeluga asks the kernel).
 */
#include <unistd.h>
#include "chain_reuse.h"
#include "bel_index_copy.h"

/* A copy in plain memory, as the glue's pages would be. */
struct test_copy {
	struct bel_index_copy copy;
	void *mem;
	u64 size;
};

static void copy_start(struct bel_pool *p, struct test_copy *tc)
{
	int ret;

	do {
		tc->size = bel_index_copy_size(p);
		REQUIRE(tc->size > 0);
		REQUIRE_EQ(posix_memalign(&tc->mem, 4096, tc->size), 0);
		memset(tc->mem, 0, tc->size);
		ret = bel_index_copy_start(p, &tc->copy, tc->mem, tc->size);
		if (ret)
			free(tc->mem);
	} while (ret == -EAGAIN);
	REQUIRE_EQ(ret, 0);
	REQUIRE(bel_index_copy_usable(tc->copy.hdr, tc->size));
}

static const struct beluga_index_header *hdr_of(struct test_copy *tc)
{
	return tc->copy.hdr;
}

/* The reader's answer for one key: 1, 0 or BEL_COPY_UNSURE. */
static int copy_has(struct test_copy *tc, u64 ns, struct beluga_key k)
{
	u32 hits = 99;
	int r = bel_index_copy_lookup(hdr_of(tc), ns, 1, &k, &hits);

	return r ? r : (int)hits;
}

/* The copy's words equal the index's, bucket by bucket, block by block. */
static void check_copy(struct bel_pool *p, struct test_copy *tc)
{
	const struct beluga_index_header *h = hdr_of(tc);
	u32 i, slot, bad = 0;

	REQUIRE(p->copy == &tc->copy);
	CHECK_EQ(h->seq, 0);
	CHECK_EQ(h->nr_buckets, p->nr_buckets);
	for (i = 0; i < p->nr_buckets; i++)
		bad += tc->copy.buckets[i] != p->buckets[i].head;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++) {
		const struct bel_region *r = &p->regions[slot];

		if (!r->present)
			continue;
		CHECK_EQ(h->regions[slot].nr_blocks, r->nr_blocks);
		for (i = 0; i < r->nr_blocks; i++) {
			const struct bel_block *b = &r->blocks[i];
			const struct bel_index_entry *e =
				&tc->copy.entries[slot][i];

			bad += e->seq != b->seq;
			/* Key and link count only while indexed. */
			if (!(b->seq & 1))
				bad += e->ns != b->ns ||
				       e->key.lo != b->key.lo ||
				       e->key.hi != b->key.hi ||
				       e->next != b->hash_next;
		}
	}
	CHECK_EQ(bad, 0);
}

/* --- the hook -------------------------------------------------------------- */

enum hook_act { HOOK_NONE, HOOK_EVICT, HOOK_REUSE };

static struct {
	enum hook_act act;
	struct bel_pool *pool;
	struct bel_client *writer;
	u32 victim;
	u64 victim_off;
	struct beluga_key x, y;
	bool fired;
	u32 visits;			/* entries the walk reached */
} hk;

void bel_test_at_copy_walk(const struct beluga_index_header *hdr, u32 id)
{
	u64 off = ~0ULL;
	s32 res = 99;
	u32 ok, ex, fail;

	(void)hdr;
	hk.visits++;
	if (hk.act == HOOK_NONE || id != hk.victim || hk.fired)
		return;
	hk.fired = true;
	CHECK_EQ(bel_evict_key(hk.pool, 0, &hk.x), 0);
	if (hk.act != HOOK_REUSE)
		return;
	CHECK_EQ(bel_alloc(hk.writer, 1, &off), 0);
	CHECK_EQ(off, hk.victim_off);	/* the only free block */
	CHECK_EQ(publish_arrays(hk.writer, 0, 1, &off, &hk.y, &res, &ok, &ex,
				&fail), 0);
	CHECK_EQ(res, BELUGA_PUBLISH_OK);
}

#define SMALL		64
#define PINNED		1
#define FIRST_X		2
#define FIRST_Y		1000
#define FIRST_FILLER	1000000

/* --- 1 --------------------------------------------------------------------- */

static void copy_follows_index(void)
{
	static const u32 sizes[] = { SMALL, SMALL / 2 };
	struct bel_pool *p = pool_with(2, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *r = bel_client_new(p);
	struct test_copy tc;
	u64 off[8];
	u32 i, wrong = 0;

	for (i = 0; i < 40; i++)
		put_key(w, 0, K(i));
	copy_start(p, &tc);
	check_copy(p, &tc);
	/* Evictions, reuse (ALLOC past the free blocks), frees, namespaces. */
	for (i = 0; i < 10; i++) {
		struct beluga_key gone = K(3 * i);

		CHECK_EQ(bel_evict_key(p, 0, &gone), 0);
	}
	for (i = 100; i < 160; i++)
		put_key(w, i & 1, K(i));
	CHECK_EQ(bel_alloc(w, 8, off), 0);
	CHECK_EQ(bel_free(w, 8, off), 0);
	check_copy(p, &tc);
	for (i = 0; i < 200; i++) {
		wrong += copy_has(&tc, 0, K(i)) != (int)has_key(r, 0, K(i));
		wrong += copy_has(&tc, 1, K(i)) != (int)has_key(r, 1, K(i));
	}
	CHECK_EQ(wrong, 0);
	teardown(p, w, r);
	free(tc.mem);
}

/* --- 2 and 3 ---------------------------------------------------------------- */

/*
 * K pinned, X ahead of it in its bucket's chain; the hook acts on X as the
 * reader's walk reaches it. @act HOOK_EVICT: X leaves the index (its
 * sequence odd). HOOK_REUSE: X's block is then reused for Y of another
 * bucket, empty (@empty) or not.
 */
static void lookup_across(enum hook_act act, bool empty)
{
	static const u32 sizes[] = { SMALL };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *w = bel_client_new(p);
	struct bel_client *holder = bel_client_new(p);
	struct beluga_key k = K(PINNED);
	struct test_copy tc;
	u64 held;
	u32 hits, i, bk;
	int got;

	for (i = 0; i < SMALL - 2; i++)
		put_key(w, 0, K(FIRST_FILLER + i));
	put_key(w, 0, k);
	CHECK_EQ(bel_lookup(holder, 0, 1, &k, true, &held, &hits), 0);
	REQUIRE_EQ(hits, 1);
	bk = bucket_of(p, k);
	hk.x = key_in(p, FIRST_X, bk, true);
	hk.y = key_elsewhere(p, FIRST_Y, bk, empty);
	hk.victim_off = put_key(w, 0, hk.x);
	hk.victim = id_of(p, hk.victim_off);
	REQUIRE_EQ(p->buckets[bk].head, hk.victim);
	REQUIRE_EQ(stats_of(p).free_blocks, 0);
	copy_start(p, &tc);
	REQUIRE_EQ(tc.copy.buckets[bk], hk.victim);

	hk.pool = p;
	hk.writer = w;
	hk.fired = false;
	hk.visits = 0;
	hk.act = act;
	got = copy_has(&tc, 0, k);
	hk.act = HOOK_NONE;
	printf("# copy reader across %s of its chain's head%s: answer %d after %u visits\n",
	       act == HOOK_EVICT ? "an eviction" : "a reuse",
	       act == HOOK_EVICT ? "" : empty ? " into an empty bucket" :
	       " into an occupied bucket", got, hk.visits);
	CHECK(hk.fired);
	CHECK_EQ(got, 1);
	/*
	 * Restarted from the bucket: X, (Y's chain,) then K, the head now.
	 * Without the restart the walk ends at X's block: a miss in 1 visit.
	 */
	CHECK(hk.visits >= 2);
	if (act == HOOK_REUSE)
		CHECK_EQ(copy_has(&tc, 0, hk.y), 1);
	CHECK_EQ(copy_has(&tc, 0, hk.x), 0);
	check_copy(p, &tc);
	CHECK_EQ(bel_release(holder, 1, &held), 0);
	check_client(holder);
	bel_client_release(holder);
	teardown(p, w, NULL);
	free(tc.mem);
}

static void evicted_entry_restarts(void)
{
	lookup_across(HOOK_EVICT, false);
}

static void pinned_key_found_across_reuse(void)
{
	lookup_across(HOOK_REUSE, false);
}

static void pinned_key_found_across_reuse_into_empty_bucket(void)
{
	lookup_across(HOOK_REUSE, true);
}

/* --- 4 --------------------------------------------------------------------- */

static void seal_on_region_change(void)
{
	static const u32 sizes[] = { SMALL };
	struct bel_pool *p = pool_with(1, sizes);
	struct bel_client *w = bel_client_new(p);
	struct beluga_key absent = K(99), k3 = K(3);
	struct test_copy tc, fresh;
	struct bel_index_view v;
	void *frozen;
	u32 slot, i;
	u64 ev;

	for (i = 0; i < 16; i++)
		put_key(w, 0, K(i));
	copy_start(p, &tc);
	CHECK_EQ(copy_has(&tc, 0, K(3)), 1);
	CHECK_EQ(copy_has(&tc, 0, K(99)), 0);

	/* A miss whose walk began before the seal is not believed. */
	bel_index_copy_view(hdr_of(&tc), &v);
	slot = add_blocks(p, SMALL);	/* more blocks: also a rehash */
	CHECK(p->copy == NULL);
	CHECK_EQ(hdr_of(&tc)->seq & 1, 1);
	CHECK_EQ(bel_index_copy_get(hdr_of(&tc), &v, 0, &absent,
				    bel_key_hash(0, absent.lo, absent.hi)),
		 BEL_COPY_UNSURE);
	CHECK_EQ(copy_has(&tc, 0, K(3)), BEL_COPY_UNSURE);
	CHECK(!bel_index_copy_live(p, &tc.copy));

	/* The pool no longer writes it. */
	frozen = malloc(tc.size);
	REQUIRE(frozen);
	memcpy(frozen, tc.mem, tc.size);
	for (i = 16; i < 80; i++)
		put_key(w, 0, K(i));
	CHECK_EQ(bel_evict_key(p, 0, &k3), 0);
	CHECK_EQ(memcmp(frozen, tc.mem, tc.size), 0);

	/* A new copy covers both regions. */
	copy_start(p, &fresh);
	CHECK(bel_index_copy_live(p, &fresh.copy));
	check_copy(p, &fresh);
	CHECK_EQ(copy_has(&fresh, 0, K(70)), 1);
	CHECK_EQ(copy_has(&fresh, 0, K(3)), 0);

	/* DETACH seals it too (the region's blocks evicted first). */
	CHECK_EQ(bel_pool_remove_region(p, slot, true, &ev), 0);
	CHECK(ev > 0);
	CHECK(p->copy == NULL);
	CHECK_EQ(copy_has(&fresh, 0, K(70)), BEL_COPY_UNSURE);
	teardown(p, w, NULL);
	free(frozen);
	free(tc.mem);
	free(fresh.mem);
}

/* --- 5 --------------------------------------------------------------------- */

#define STRESS_BLOCKS	256
#define STRESS_READERS	4
#define STRESS_SECONDS	3

static struct {
	struct bel_pool *pool;
	struct test_copy tc;
	struct beluga_key k;
	struct chain_reuse cr;
	u64 lookups[STRESS_READERS], misses[STRESS_READERS];
	u64 unsure[STRESS_READERS];
} sx;

static void *probe_pinned(void *arg)
{
	long me = (long)arg;
	struct bel_client *c = bel_client_new(sx.pool);
	u64 n = 0, missed = 0, unsure = 0;

	while (!__atomic_load_n(&sx.cr.stop, __ATOMIC_RELAXED)) {
		int r = copy_has(&sx.tc, 0, sx.k);

		if (r == BEL_COPY_UNSURE) {
			unsure++;
			r = (int)has_key(c, 0, sx.k);
		}
		missed += r != 1;
		n++;
	}
	sx.lookups[me] = n;
	sx.misses[me] = missed;
	sx.unsure[me] = unsure;
	bel_client_release(c);
	return NULL;
}

static void pinned_key_found_under_reuse(void)
{
	static const u32 sizes[] = { STRESS_BLOCKS };
	struct bel_client *w, *holder;
	u64 held, lookups = 0, misses = 0, unsure = 0;
	u32 hits;
	long t;

	sx.pool = pool_with(1, sizes);
	w = bel_client_new(sx.pool);
	holder = bel_client_new(sx.pool);
	sx.k = K(PINNED);
	put_key(w, 0, sx.k);
	CHECK_EQ(bel_lookup(holder, 0, 1, &sx.k, true, &held, &hits), 0);
	REQUIRE_EQ(hits, 1);
	sx.cr.pool = sx.pool;
	chain_reuse_keys(&sx.cr, sx.k, FIRST_X, FIRST_Y);
	copy_start(sx.pool, &sx.tc);
	chain_reuse_stress(&sx.cr, probe_pinned, STRESS_READERS, STRESS_SECONDS);
	for (t = 0; t < STRESS_READERS; t++) {
		lookups += sx.lookups[t];
		misses += sx.misses[t];
		unsure += sx.unsure[t];
	}
	printf("# %llu count-only lookups on the copy of a key pinned throughout in %d s: %llu misses, %llu asked of the core\n",
	       (unsigned long long)lookups, STRESS_SECONDS,
	       (unsigned long long)misses, (unsigned long long)unsure);
	CHECK(lookups > 0);
	CHECK_EQ(misses, 0);
	CHECK(stats_of(sx.pool).evictions > 0);
	check_copy(sx.pool, &sx.tc);
	CHECK_EQ(bel_release(holder, 1, &held), 0);
	check_client(holder);
	bel_client_release(holder);
	check_pool(sx.pool);
	check_client(w);
	bel_client_release(w);
	pool_free(sx.pool);
	free(sx.tc.mem);
}

int main(void)
{
	TAP_RUN(copy_follows_index);
	TAP_RUN(evicted_entry_restarts);
	TAP_RUN(pinned_key_found_across_reuse);
	TAP_RUN(pinned_key_found_across_reuse_into_empty_bucket);
	TAP_RUN(seal_on_region_change);
	TAP_RUN(pinned_key_found_under_reuse);
	return tap_done();
}
