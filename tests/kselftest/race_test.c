// SPDX-License-Identifier: GPL-2.0
/*
 * Races between files, with threads:
 *   - two threads PUBLISH the same key with different blocks: exactly one
 *     wins (BELUGA_PUBLISH_OK), the other gets BELUGA_PUBLISH_EXISTS and
 *     its block is freed; many rounds;
 *   - LOOKUP+PIN against admin EVICT of the same key, and against ALLOC
 *     pressure that evicts: a pinned block is never evicted or reused, so
 *     its bytes never change while the pin is held.
 * Threads never use ASSERT/EXPECT; they report through their structs.
 */
#include "beluga_test.h"

#include <pthread.h>

#define ROUNDS		256
#define PIN_ITERS	3000

/* ------------------------------------------------------------------ */

FIXTURE(race) {
	struct bt_ctx c;
	uint64_t ns;
};

FIXTURE_SETUP(race)
{
	/* 2 MiB of 4 KiB blocks: room for every round's winner */
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_PAGE))
		return;
	self->ns = bt_ns(0x7ace);
	ASSERT_LE(ROUNDS + 2, self->c.att[0].nr_blocks);
}

FIXTURE_TEARDOWN(race)
{
	bt_teardown(&self->c);
}

struct publisher {
	pthread_t thread;
	pthread_barrier_t *barrier;
	int fd;
	uint64_t ns;
	uint64_t off[ROUNDS];
	int32_t res[ROUNDS];
	char err[160];
};

static void *publisher_fn(void *arg)
{
	struct publisher *p = arg;
	int i, r;

	for (i = 0; i < ROUNDS; i++) {
		r = bt_alloc(p->fd, 1, &p->off[i]);
		if (r) {
			snprintf(p->err, sizeof(p->err), "round %d: ALLOC: %s",
				 i, strerror(-r));
			p->res[i] = r;
		}
		pthread_barrier_wait(p->barrier);
		if (r)
			continue;
		r = bt_publish1(p->fd, p->ns, p->off[i], bt_key(p->ns, i),
				&p->res[i]);
		if (r) {
			snprintf(p->err, sizeof(p->err), "round %d: PUBLISH: %s",
				 i, strerror(-r));
			p->res[i] = r;
		}
	}
	return NULL;
}

TEST_F_TIMEOUT(race, publish_same_key, 120)
{
	static struct publisher pub[2];
	pthread_barrier_t barrier;
	struct beluga_stats s0, s1;
	int i, t, wins[2] = { 0, 0 };

	ASSERT_EQ(0, pthread_barrier_init(&barrier, NULL, 2));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	for (t = 0; t < 2; t++) {
		memset(&pub[t], 0, sizeof(pub[t]));
		pub[t].barrier = &barrier;
		pub[t].ns = self->ns;
		pub[t].fd = bt_open(O_RDWR);
		ASSERT_LE(0, pub[t].fd);
	}
	for (t = 0; t < 2; t++)
		ASSERT_EQ(0, pthread_create(&pub[t].thread, NULL, publisher_fn,
					    &pub[t]));
	for (t = 0; t < 2; t++)
		pthread_join(pub[t].thread, NULL);
	for (t = 0; t < 2; t++)
		ASSERT_EQ(0, pub[t].err[0]) TH_LOG("thread %d: %s", t, pub[t].err);

	for (i = 0; i < ROUNDS; i++) {
		int32_t a = pub[0].res[i], b = pub[1].res[i];
		int w = a == BELUGA_PUBLISH_OK ? 0 : 1;
		struct beluga_key k = bt_key(self->ns, i);
		uint64_t got;
		uint32_t hits;

		ASSERT_TRUE((a == BELUGA_PUBLISH_OK && b == BELUGA_PUBLISH_EXISTS) ||
			    (a == BELUGA_PUBLISH_EXISTS && b == BELUGA_PUBLISH_OK))
			TH_LOG("round %d: results %d and %d", i, a, b);
		wins[w]++;
		ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, &k, 1, &got, 0,
				       &hits));
		ASSERT_EQ(1, hits);
		EXPECT_EQ(pub[w].off[i], got)
			TH_LOG("round %d: the key maps to the loser's block", i);
		/* the loser's block went back to the pool, not to the loser */
		EXPECT_EQ(-EINVAL, bt_free(pub[1 - w].fd, 1, &pub[1 - w].off[i]));
	}
	TH_LOG("wins: %d / %d", wins[0], wins[1]);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	ASSERT_STATS_CONSISTENT(s1);
	EXPECT_EQ(s0.published_blocks + ROUNDS, s1.published_blocks);
	EXPECT_EQ(0, s1.allocated_blocks);
	EXPECT_EQ(s0.publish_races + ROUNDS, s1.publish_races);
	EXPECT_EQ(s0.publishes + ROUNDS, s1.publishes);
	EXPECT_EQ(s0.frees + ROUNDS, s1.frees);
	for (t = 0; t < 2; t++)
		close(pub[t].fd);
	pthread_barrier_destroy(&barrier);
}

/* ------------------------------------------------------------------ */
/* Pins against eviction.                                                */

FIXTURE(pressure) {
	struct bt_ctx c;
	uint64_t ns;
	char *map;
};

FIXTURE_SETUP(pressure)
{
	/* 32 blocks: small enough that ALLOC has to evict */
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->ns = bt_ns(0x9e55);
	self->map = bt_map(&self->c);
}

FIXTURE_TEARDOWN(pressure)
{
	bt_teardown(&self->c);
}

#define NKEYS	12

struct pinner {
	pthread_t thread;
	int fd;
	uint64_t ns;
	char *map;
	volatile int *stop;
	long hits, misses, iters;
	char err[200];
};

/* Pin a random key, check its bytes twice across a yield, release. */
static void *pinner_fn(void *arg)
{
	struct pinner *p = arg;
	unsigned int seed = 12345;
	struct bt_tag a, b;

	while (p->iters < PIN_ITERS || !__atomic_load_n(p->stop, __ATOMIC_ACQUIRE)) {
		int i = rand_r(&seed) % NKEYS;
		struct beluga_key k = bt_key(p->ns, i);
		uint64_t off;
		uint32_t hits;
		int r;

		if (p->iters > 50 * PIN_ITERS)
			break;	/* the other side is stuck: stop anyway */
		p->iters++;
		r = bt_lookup(p->fd, p->ns, &k, 1, &off, BELUGA_LOOKUP_PIN, &hits);
		if (r) {
			snprintf(p->err, sizeof(p->err), "LOOKUP: %s", strerror(-r));
			break;
		}
		if (!hits) {
			p->misses++;
			continue;
		}
		p->hits++;
		if (!bt_tag_ok((struct bt_tag *)(p->map + off), k, &a)) {
			snprintf(p->err, sizeof(p->err),
				 "key %d pinned at 0x%llx holds %llx/%llx gen %llu",
				 i, (unsigned long long)off,
				 (unsigned long long)a.lo,
				 (unsigned long long)a.hi,
				 (unsigned long long)a.gen);
			break;
		}
		sched_yield();
		if (!bt_tag_ok((struct bt_tag *)(p->map + off), k, &b) ||
		    b.gen != a.gen) {
			snprintf(p->err, sizeof(p->err),
				 "key %d at 0x%llx changed while pinned "
				 "(gen %llu -> %llu)", i,
				 (unsigned long long)off,
				 (unsigned long long)a.gen,
				 (unsigned long long)b.gen);
			break;
		}
		r = bt_release(p->fd, 1, &off);
		if (r) {
			snprintf(p->err, sizeof(p->err), "RELEASE: %s",
				 strerror(-r));
			break;
		}
	}
	return NULL;
}

/* Publish key @i with a fresh generation (republish after eviction). */
static int publish_key(FIXTURE_DATA(pressure) *self, int fd, int i,
		       uint64_t gen)
{
	return bt_publish_tagged(fd, self->map, self->c.map_len, self->ns,
				 bt_key(self->ns, i), gen);
}

static void run_pin_race(struct __test_metadata *_metadata,
			 FIXTURE_DATA(pressure) *self, bool admin_evict)
{
	static struct pinner pn;
	volatile int stop = 0;
	struct beluga_stats s0, s1;
	uint64_t gen = 1;
	long evicted = 0, busy = 0, enospc = 0, it;
	unsigned int seed = 777;
	int fd, i, r;

	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	for (i = 0; i < NKEYS; i++)
		ASSERT_EQ(0, publish_key(self, fd, i, gen++));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));

	memset(&pn, 0, sizeof(pn));
	pn.fd = bt_open(O_RDONLY);
	ASSERT_LE(0, pn.fd);
	pn.ns = self->ns;
	pn.map = self->map;
	pn.stop = &stop;
	ASSERT_EQ(0, pthread_create(&pn.thread, NULL, pinner_fn, &pn));

	for (it = 0; it < PIN_ITERS; it++) {
		if (admin_evict) {
			struct beluga_evict e;

			i = rand_r(&seed) % NKEYS;
			r = bt_evict_key(fd, self->ns, bt_key(self->ns, i), &e);
			if (r == 0) {
				evicted++;
				r = publish_key(self, fd, i, gen++);
			} else if (r == -EBUSY || r == -ENOENT) {
				busy += r == -EBUSY;
				r = 0;
			}
		} else {
			/* take more than is free, scribble, give back */
			uint64_t o[24];
			int n = 8 + rand_r(&seed) % 16, j;

			r = bt_alloc(fd, n, o);
			if (r == -ENOSPC) {
				enospc++;
				r = 0;
			} else if (r == 0) {
				for (j = 0; j < n; j++)
					memset(self->map + o[j], 0xa5,
					       sizeof(struct bt_tag));
				r = bt_free(fd, n, o);
			}
			/* bring evicted keys back now and then */
			for (j = 0; !r && j < NKEYS && it % 8 == 0; j++)
				if (bt_present(fd, self->ns,
					       bt_key(self->ns, j)) == 0)
					r = publish_key(self, fd, j, gen++);
			if (r == -ENOSPC)
				r = 0;
		}
		if (r) {
			TH_LOG("iteration %ld: %s", it, strerror(-r));
			break;
		}
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_join(pn.thread, NULL);
	EXPECT_EQ(PIN_ITERS, it);
	EXPECT_EQ(0, pn.err[0]) TH_LOG("pinner: %s", pn.err);
	EXPECT_LT(0, pn.hits) TH_LOG("the pinner never found a key");
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	TH_LOG("pinner: %ld hits, %ld misses; EVICT: %ld evicted, %ld busy; "
	       "ALLOC: %ld ENOSPC; pool evictions %llu", pn.hits, pn.misses,
	       evicted, busy, enospc,
	       (unsigned long long)(s1.evictions - s0.evictions));

	ASSERT_STATS_CONSISTENT(s1);
	EXPECT_EQ(0, s1.pins);
	EXPECT_EQ(0, s1.allocated_blocks);
	EXPECT_LT(s0.evictions, s1.evictions) TH_LOG("nothing was ever evicted");
	close(pn.fd);
	close(fd);
}

TEST_F_TIMEOUT(pressure, pin_vs_admin_evict, 180)
{
	run_pin_race(_metadata, self, true);
}

TEST_F_TIMEOUT(pressure, pin_vs_alloc_eviction, 180)
{
	run_pin_race(_metadata, self, false);
}

TEST_HARNESS_MAIN
