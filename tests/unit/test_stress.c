// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-threaded stress: NTHREADS threads, each driving two clients with a
 * seeded random mix of every operation on a small, contended pool. Beside
 * the core, the threads keep shadow state in atomics that the core must
 * never contradict:
 *   owner[b]    which client holds block b ALLOCATED; ALLOC must never hand
 *               out a block some client still owns;
 *   pinned[b]   pins the threads hold; ALLOC must never hand out a block
 *               with pins (pinned-and-free);
 *   content[b]  what the writer stored before PUBLISH; a reader holding a
 *               pin must always find the content of the key it looked up
 *               (a pinned block is never evicted and reused).
 * and the occupancy invariant free + allocated + published == total is
 * sampled while everything runs.
 */
#include <pthread.h>
#include "helpers.h"

#define NTHREADS	4
#define NOPS		100000
#define NKEYS		160
#define MAXOWN		48
#define MAXPIN		128

static const u32 sizes[] = { 40, 72, 100 };
#define NBLK	(40 + 72 + 100)

static struct bel_pool *pool;
static u64 first[3];
static int owner[NBLK];
static int pinned[NBLK];
static u64 content[NBLK];
static int violations;
static u64 samples;

static int dense(u64 off)
{
	int s, base = 0;

	for (s = 0; s < 3; s++) {
		if (off >= first[s] && off < first[s] + sizes[s] * BS &&
		    (off - first[s]) % BS == 0)
			return base + (int)((off - first[s]) / BS);
		base += sizes[s];
	}
	return -1;
}

static u64 tagof(u64 ns, struct beluga_key k)
{
	return bel_mix64(ns * 1000003 + k.lo + 1);
}

static void violation(const char *what, int t, u64 off)
{
	__atomic_add_fetch(&violations, 1, __ATOMIC_RELAXED);
	fprintf(stderr, "# thread %d: %s (offset %llu)\n", t, what,
		(unsigned long long)off);
}

struct cl {
	struct bel_client *c;
	int tag;
	u64 own[MAXOWN];
	u32 nown;
	u64 pin[MAXPIN];
	u32 npin;
};

struct worker {
	int t;
	unsigned int rng;
	struct cl cl[2];
};

static u32 rnd(struct worker *w, u32 n)
{
	return (u32)rand_r(&w->rng) % n;
}

static void do_alloc(struct worker *w, struct cl *c)
{
	u64 offs[8];
	u32 n = 1 + rnd(w, 8), i;
	int ret;

	if (c->nown + n > MAXOWN)
		return;
	ret = bel_alloc(c->c, n, offs);
	if (ret == -ENOSPC)
		return;
	if (ret) {
		violation("alloc failed", w->t, ret);
		return;
	}
	for (i = 0; i < n; i++) {
		int d = dense(offs[i]);
		int prev;

		if (d < 0) {
			violation("alloc returned a bad offset", w->t, offs[i]);
			continue;
		}
		prev = __atomic_exchange_n(&owner[d], c->tag, __ATOMIC_SEQ_CST);
		if (prev)
			violation("block owned twice", w->t, offs[i]);
		if (__atomic_load_n(&pinned[d], __ATOMIC_SEQ_CST))
			violation("pinned block allocated", w->t, offs[i]);
		c->own[c->nown++] = offs[i];
	}
}

/* Take up to @max owned offsets out of c->own, clearing their owner. */
static u32 take_owned(struct worker *w, struct cl *c, u64 *offs, u32 max)
{
	u32 n = 0;

	while (c->nown && n < max) {
		u32 i = rnd(w, c->nown);
		int d = dense(c->own[i]);

		offs[n++] = c->own[i];
		c->own[i] = c->own[--c->nown];
		if (__atomic_exchange_n(&owner[d], 0, __ATOMIC_SEQ_CST) !=
		    c->tag)
			violation("owned block lost its owner", w->t, offs[n - 1]);
	}
	return n;
}

static void do_free(struct worker *w, struct cl *c)
{
	u64 offs[8];
	u32 n = take_owned(w, c, offs, 1 + rnd(w, 8));

	if (n && bel_free(c->c, n, offs))
		violation("free of owned blocks failed", w->t, offs[0]);
}

static void do_publish(struct worker *w, struct cl *c)
{
	u64 offs[8];
	struct beluga_key keys[8];
	s32 res[8];
	u32 n, i, ok, ex, fail;
	u64 ns = rnd(w, 2);

	/* Write the "payload" while still the owner, then publish. */
	for (i = 0; i < c->nown && i < 8; i++) {
		keys[i] = K(rnd(w, NKEYS));
		__atomic_store_n(&content[dense(c->own[c->nown - 1 - i])],
				 tagof(ns, keys[i]), __ATOMIC_SEQ_CST);
	}
	/* take_owned picks at random: take from the tail in order instead. */
	n = i;
	for (i = 0; i < n; i++) {
		u64 off = c->own[--c->nown];

		offs[i] = off;
		if (__atomic_exchange_n(&owner[dense(off)], 0,
					__ATOMIC_SEQ_CST) != c->tag)
			violation("owned block lost its owner", w->t, off);
	}
	if (!n)
		return;
	if (publish_arrays(c->c, ns, n, offs, keys, res, &ok, &ex, &fail) ||
	    fail || ok + ex != n)
		violation("publish of owned blocks failed", w->t, offs[0]);
}

static void do_lookup(struct worker *w, struct cl *c, bool pin)
{
	struct beluga_key keys[8];
	u64 offs[8];
	u32 n = 1 + rnd(w, 8), i, hits;
	u64 ns = rnd(w, 2);
	u32 start = rnd(w, NKEYS);

	if (pin && c->npin + n > MAXPIN)
		pin = false;
	for (i = 0; i < n; i++)
		keys[i] = K((start + i) % NKEYS);
	if (bel_lookup(c->c, ns, n, keys, pin, offs, &hits) || hits > n) {
		violation("lookup failed", w->t, 0);
		return;
	}
	if (!pin)
		return;
	for (i = 0; i < hits; i++) {
		int d = dense(offs[i]);

		if (d < 0) {
			violation("lookup returned a bad offset", w->t, offs[i]);
			continue;
		}
		__atomic_add_fetch(&pinned[d], 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&content[d], __ATOMIC_SEQ_CST) !=
		    tagof(ns, keys[i]))
			violation("pinned block has foreign content", w->t,
				  offs[i]);
		if (__atomic_load_n(&owner[d], __ATOMIC_SEQ_CST))
			violation("pinned block is owned", w->t, offs[i]);
		c->pin[c->npin++] = offs[i];
	}
}

static void do_release(struct worker *w, struct cl *c)
{
	u64 offs[8];
	u32 n = 0, max = 1 + rnd(w, 8);

	while (c->npin && n < max) {
		u32 i = rnd(w, c->npin);

		offs[n++] = c->pin[i];
		c->pin[i] = c->pin[--c->npin];
		__atomic_sub_fetch(&pinned[dense(offs[n - 1])], 1,
				   __ATOMIC_SEQ_CST);
	}
	if (n && bel_release(c->c, n, offs))
		violation("release of held pins failed", w->t, offs[0]);
}

static void do_reopen(struct worker *w, struct cl *c)
{
	u64 offs[MAXOWN];
	u32 i;

	take_owned(w, c, offs, MAXOWN);
	for (i = 0; i < c->npin; i++)
		__atomic_sub_fetch(&pinned[dense(c->pin[i])], 1,
				   __ATOMIC_SEQ_CST);
	c->npin = 0;
	bel_client_release(c->c);
	c->c = bel_client_new(pool);
	if (!c->c)
		abort();
}

static void sample(struct worker *w)
{
	struct bel_stats s = stats_of(pool);

	if (s.total_blocks != NBLK ||
	    s.free_blocks + s.allocated_blocks + s.published_blocks !=
	    s.total_blocks || s.pinned_blocks > s.published_blocks ||
	    s.pins < s.pinned_blocks)
		violation("stats invariant broken", w->t, 0);
	__atomic_add_fetch(&samples, 1, __ATOMIC_RELAXED);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	u32 op, i;

	for (i = 0; i < NOPS; i++) {
		struct cl *c = &w->cl[rnd(w, 2)];

		op = rnd(w, 100);
		if (op < 28)
			do_alloc(w, c);
		else if (op < 33)
			do_free(w, c);
		else if (op < 50)
			do_publish(w, c);
		else if (op < 72)
			do_lookup(w, c, true);
		else if (op < 80)
			do_lookup(w, c, false);
		else if (op < 95)
			do_release(w, c);
		else if (op < 96) {
			struct beluga_key k = K(rnd(w, NKEYS));

			bel_evict_key(pool, rnd(w, 2), &k);
		} else if (op < 97) {
			do_reopen(w, c);
		} else {
			sample(w);
		}
	}
	do_reopen(w, &w->cl[0]);
	do_reopen(w, &w->cl[1]);
	return NULL;
}

static void stress(void)
{
	static struct worker ws[NTHREADS];
	pthread_t th[NTHREADS];
	struct bel_stats s;
	int t, i;

	pool = pool_new();
	for (i = 0; i < 3; i++) {
		u32 slot, n;

		REQUIRE_EQ(bel_pool_add_region(pool, sizes[i] * BS, BS, &slot,
					       &first[i], &n), 0);
	}
	for (t = 0; t < NTHREADS; t++) {
		ws[t].t = t;
		ws[t].rng = 1000 + t;
		for (i = 0; i < 2; i++) {
			ws[t].cl[i].c = bel_client_new(pool);
			ws[t].cl[i].tag = t * 2 + i + 1;
		}
	}
	for (t = 0; t < NTHREADS; t++)
		REQUIRE_EQ(pthread_create(&th[t], NULL, run, &ws[t]), 0);
	for (t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	CHECK_EQ(violations, 0);
	CHECK(samples > 0);
	s = stats_of(pool);
	printf("# %d threads x %d ops: allocs %llu publishes %llu races %llu "
	       "evictions %llu enospc %llu pins-released %llu\n",
	       NTHREADS, NOPS, (unsigned long long)s.allocs,
	       (unsigned long long)s.publishes,
	       (unsigned long long)s.publish_races,
	       (unsigned long long)s.evictions,
	       (unsigned long long)s.alloc_failures,
	       (unsigned long long)s.releases);
	/* The run must have been contended to mean anything. */
	CHECK(s.evictions > 0 && s.publish_races > 0 && s.alloc_failures > 0);
	check_pool(pool);
	for (t = 0; t < NTHREADS; t++)
		for (i = 0; i < 2; i++) {
			check_client(ws[t].cl[i].c);
			bel_client_release(ws[t].cl[i].c);
		}
	s = stats_of(pool);
	CHECK_EQ(s.clients, 0);
	CHECK_EQ(s.pins, 0);
	CHECK_EQ(s.allocated_blocks, 0);
	CHECK_EQ(s.allocs, s.frees + s.publishes);
	bel_evict_ns(pool, 0, NULL);
	bel_evict_ns(pool, 1, NULL);
	CHECK_EQ(stats_of(pool).free_blocks, NBLK);
	CHECK_EQ(stats_of(pool).evictions, s.evictions + s.published_blocks);
	check_pool(pool);
	pool_free(pool);
}

int main(void)
{
	TAP_RUN(stress);
	return tap_done();
}
