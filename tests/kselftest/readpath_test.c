// SPDX-License-Identifier: GPL-2.0
/*
 * The lock-free read path under fire, with processes (one open file each):
 *   - readers LOOKUP+PIN a chain whose head all of them share (the hot
 *     key) and a tail of their own, check the bytes of every pinned block
 *     they can see through their mapping twice across a yield, RELEASE;
 *   - a writer republishes whatever was evicted and ALLOCs/FREEs extra
 *     blocks so that ALLOC keeps evicting;
 *   - the parent ATTACHes a second region that no reader maps and DETACHes
 *     it with EVICT again and again, while the writer's blocks and the
 *     readers' pins come and go in it.
 * A pinned block must never be evicted, reused or detached: its bytes
 * never change while the pin is held, RELEASE of every pin succeeds, and
 * at the end no pin is left. Children report through a shared page.
 *
 * And no false misses (second review, finding 2): read-only readers
 * probe a key that another file pins throughout, count-only, for a few
 * seconds while a writer ALLOCs (each ALLOC evicts: the pool is full) and
 * publishes fresh keys, so that the blocks ahead of the key in its chain
 * keep being evicted and reused under keys of other buckets; every probe
 * must hit.
 */
#include "beluga_test.h"

#define READERS		3
#define CHAIN		4	/* hot head + 3 keys of the reader's own */
#define READ_ITERS	1500
#define DETACH_ROUNDS	40

/* Shared with the children (MAP_SHARED | MAP_ANONYMOUS). */
struct shared {
	volatile int stop;
	volatile long hits[READERS], misses[READERS];
	volatile long republished, enospc;
	char err[READERS + 1][200];
};

FIXTURE(readpath) {
	struct bt_ctx c;
	uint64_t ns;
	char *map;		/* region 0 only: mapped before region 1 */
	size_t map_len;
	struct shared *sh;
};

FIXTURE_SETUP(readpath)
{
	/* 32 blocks of 64 KiB: small enough that ALLOC has to evict */
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->ns = bt_ns(0x3ead);
	self->map = bt_map(&self->c);
	self->map_len = self->c.map_len;
	self->sh = mmap(NULL, sizeof(*self->sh), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->sh);
	memset(self->sh, 0, sizeof(*self->sh));
}

FIXTURE_TEARDOWN(readpath)
{
	if (self->sh && self->sh != MAP_FAILED)
		munmap(self->sh, sizeof(*self->sh));
	bt_teardown(&self->c);
}

/* Key j of reader r's chain; j == 0 is the hot head, shared by all. */
static struct beluga_key chain_key(uint64_t ns, int r, int j)
{
	return bt_key(ns, j ? 1000 + r * CHAIN + j : 0);
}

static int reader(FIXTURE_DATA(readpath) *self, int me)
{
	struct beluga_key keys[CHAIN];
	uint64_t offs[CHAIN], gen[CHAIN];
	struct bt_tag seen;
	char *err = self->sh->err[me];
	int fd = bt_open(O_RDWR), it, j, r;
	uint32_t hits;

	if (fd < 0) {
		snprintf(err, 200, "open: %s", strerror(errno));
		return 1;
	}
	for (j = 0; j < CHAIN; j++)
		keys[j] = chain_key(self->ns, me, j);
	for (it = 0; it < READ_ITERS; it++) {
		r = bt_lookup(fd, self->ns, keys, CHAIN, offs,
			      BELUGA_LOOKUP_PIN, &hits);
		if (r || hits > CHAIN) {
			snprintf(err, 200, "LOOKUP: %d hits %u", r, hits);
			return 1;
		}
		if (hits)
			self->sh->hits[me]++;
		else
			self->sh->misses[me]++;
		for (j = 0; j < (int)hits; j++) {
			if (offs[j] % BT_BLOCK_SIZE) {
				snprintf(err, 200, "key %d at 0x%llx: no block",
					 j, (unsigned long long)offs[j]);
				return 1;
			}
			if (offs[j] + sizeof(struct bt_tag) > self->map_len)
				continue;	/* region 1: not mapped */
			if (!bt_tag_ok((struct bt_tag *)(self->map + offs[j]),
				       keys[j], &seen)) {
				snprintf(err, 200, "key %d pinned at 0x%llx holds another block's bytes",
					 j, (unsigned long long)offs[j]);
				return 1;
			}
			gen[j] = seen.gen;
		}
		sched_yield();
		for (j = 0; j < (int)hits; j++) {
			if (offs[j] + sizeof(struct bt_tag) > self->map_len)
				continue;
			if (!bt_tag_ok((struct bt_tag *)(self->map + offs[j]),
				       keys[j], &seen) || seen.gen != gen[j]) {
				snprintf(err, 200, "key %d at 0x%llx changed while pinned",
					 j, (unsigned long long)offs[j]);
				return 1;
			}
		}
		if (hits && (r = bt_release(fd, hits, offs))) {
			snprintf(err, 200, "RELEASE of %u pins: %s", hits,
				 strerror(-r));
			return 1;
		}
	}
	close(fd);
	return 0;
}

/*
 * PUBLISH key @base + @gen, which no reader asks for, tagged where @map
 * (the fixture's mapping, or NULL) reaches it: 1 when published, 0 on
 * ENOSPC (counted), -1 on any other error (the writer's message set).
 */
static int publish_filler(FIXTURE_DATA(readpath) *self, int fd, char *map,
			  uint64_t base, uint64_t gen)
{
	int r = bt_publish_tagged(fd, map, map ? self->map_len : 0, self->ns,
				  bt_key(self->ns, base + gen), gen);

	if (r == -ENOSPC) {
		self->sh->enospc++;
		return 0;
	}
	if (r) {
		snprintf(self->sh->err[READERS], 200, "publish filler: %s",
			 strerror(-r));
		return -1;
	}
	return 1;
}

static int writer(FIXTURE_DATA(readpath) *self)
{
	char *err = self->sh->err[READERS];
	int fd = bt_open(O_RDWR), rd, j, r;
	uint64_t gen = 1, extra[8];

	if (fd < 0) {
		snprintf(err, 200, "open: %s", strerror(errno));
		return 1;
	}
	while (!self->sh->stop) {
		for (rd = 0; rd < READERS; rd++) {
			for (j = 0; j < CHAIN; j++) {
				struct beluga_key k = chain_key(self->ns, rd, j);

				r = bt_present(fd, self->ns, k);
				if (r < 0) {
					snprintf(err, 200, "probe: %s",
						 strerror(-r));
					return 1;
				}
				if (r)
					continue;
				r = bt_publish_tagged(fd, self->map,
						      self->map_len, self->ns,
						      k, gen++);
				if (r == -ENOSPC) {
					self->sh->enospc++;
					continue;
				}
				if (r) {
					snprintf(err, 200, "publish: %s",
						 strerror(-r));
					return 1;
				}
				self->sh->republished++;
			}
		}
		/* Fillers nobody reads fill the pool, so ALLOC evicts. */
		for (j = 0; j < 8; j++) {
			if (publish_filler(self, fd, self->map, 1000000,
					   gen++) < 0)
				return 1;
		}
		/* Pressure: these evict the oldest unpinned keys. */
		r = bt_alloc(fd, 8, extra);
		if (r == -ENOSPC) {
			self->sh->enospc++;
		} else if (r) {
			snprintf(err, 200, "ALLOC: %s", strerror(-r));
			return 1;
		} else if ((r = bt_free(fd, 8, extra))) {
			snprintf(err, 200, "FREE: %s", strerror(-r));
			return 1;
		}
	}
	close(fd);
	return 0;
}

TEST_F_TIMEOUT(readpath, pins_hold_against_alloc_evict_detach, 600)
{
	struct beluga_attach b;
	struct beluga_stats s0, st;
	pid_t kids[READERS + 1];
	long detached = 0, busy = 0, hits = 0;
	uint64_t evicted;
	int i, r, status;

	ASSERT_EQ(0, bt_attach_req(&b, self->c.backend, 0, BT_REGION_LEN,
				   BT_REGION_LEN, BT_BLOCK_SIZE,
				   self->c.backend == BELUGA_BACKEND_NODE ?
				   "bt-node1" : NULL));
	ASSERT_EQ(0, bt_attach(self->c.fd, &b));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	for (i = 0; i <= READERS; i++) {
		kids[i] = bt_fork(&self->c);
		ASSERT_LE(0, kids[i]);
		if (!kids[i])
			_exit(i < READERS ? reader(self, i) : writer(self));
	}
	/* Detach the region nobody maps, with EVICT, and bring it back. */
	for (i = 0; i < DETACH_ROUNDS; i++) {
		r = bt_detach(self->c.fd, b.region_id, BELUGA_DETACH_EVICT,
			      &evicted);
		if (r == -EBUSY) {
			busy++;
		} else {
			ASSERT_EQ(0, r) TH_LOG("DETACH: %s", strerror(-r));
			detached++;
			ASSERT_EQ(0, bt_attach(self->c.fd, &b));
		}
		usleep(20000);
	}
	for (i = 0; i < READERS; i++) {
		status = bt_wait(&self->c, kids[i]);
		EXPECT_EQ(0, status) TH_LOG("reader %d: %s", i,
					    self->sh->err[i]);
		hits += self->sh->hits[i];
	}
	self->sh->stop = 1;
	status = bt_wait(&self->c, kids[READERS]);
	EXPECT_EQ(0, status) TH_LOG("writer: %s", self->sh->err[READERS]);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	TH_LOG("chain hits %ld, republished %ld, ENOSPC %ld, detached %ld, busy %ld, evictions %llu",
	       hits, self->sh->republished, self->sh->enospc, detached, busy,
	       (unsigned long long)(st.evictions - s0.evictions));
	EXPECT_LT(0, hits);
	EXPECT_LT(s0.evictions, st.evictions);

	/* Every pin was released: nothing is pinned, the pool is whole. */
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	ASSERT_STATS_CONSISTENT(st);
	EXPECT_EQ(0, st.pins);
	EXPECT_EQ(0, st.pinned_blocks);
	EXPECT_EQ(0, st.allocated_blocks);
	ASSERT_EQ(0, bt_detach(self->c.fd, b.region_id, BELUGA_DETACH_EVICT,
			       &evicted));
}

/*
 * How long the readers probe the pinned key: a time, not a count of
 * lookups, since a TCG guest does far fewer lookups a second than KVM.
 */
#define PROBE_SECONDS	3

/* Count-only LOOKUPs of @k through a file of its own, until stop. */
static int prober(FIXTURE_DATA(readpath) *self, int me, struct beluga_key k)
{
	char *err = self->sh->err[me];
	int fd = bt_open(O_RDONLY), r;
	long hits = 0, misses = 0;

	if (fd < 0) {
		snprintf(err, 200, "open: %s", strerror(errno));
		return 1;
	}
	while (!self->sh->stop) {
		r = bt_present(fd, self->ns, k);
		if (r < 0) {
			snprintf(err, 200, "LOOKUP: %s", strerror(-r));
			return 1;
		}
		if (r)
			hits++;
		else
			misses++;
	}
	self->sh->hits[me] = hits;
	self->sh->misses[me] = misses;
	close(fd);
	return 0;
}

/* ALLOC (evicting once the pool is full) and PUBLISH of fresh keys. */
static int evicting_writer(FIXTURE_DATA(readpath) *self)
{
	int fd = bt_open(O_RDWR), r;
	uint64_t gen = 1;

	if (fd < 0) {
		snprintf(self->sh->err[READERS], 200, "open: %s",
			 strerror(errno));
		return 1;
	}
	while (!self->sh->stop) {
		r = publish_filler(self, fd, NULL, 2000000, gen++);
		if (r < 0)
			return 1;
		self->sh->republished += r;
	}
	close(fd);
	return 0;
}

TEST_F_TIMEOUT(readpath, pinned_key_never_missed_against_evicting_writer, 120)
{
	struct beluga_key k = bt_key(self->ns, 1);
	struct beluga_stats s0, st;
	pid_t kids[READERS + 1];
	long lookups = 0, misses = 0;
	uint64_t held, off = 0;
	uint32_t hits;
	double end;
	int holder, i, status;

	ASSERT_EQ(0, bt_publish_tagged(self->c.fd, NULL, 0, self->ns, k, 1));
	holder = bt_open(O_RDONLY);
	ASSERT_LE(0, holder) TH_LOG("open: %s", strerror(errno));
	ASSERT_EQ(0, bt_lookup(holder, self->ns, &k, 1, &held,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	for (i = 0; i <= READERS; i++) {
		kids[i] = bt_fork(&self->c);
		ASSERT_LE(0, kids[i]);
		if (!kids[i])
			_exit(i < READERS ? prober(self, i, k) :
			      evicting_writer(self));
	}
	for (end = bt_now_s() + PROBE_SECONDS; bt_now_s() < end;)
		usleep(100000);
	self->sh->stop = 1;
	for (i = 0; i <= READERS; i++) {
		status = bt_wait(&self->c, kids[i]);
		EXPECT_EQ(0, status) TH_LOG("%s %d: %s",
					    i < READERS ? "reader" : "writer",
					    i, self->sh->err[i]);
		if (i < READERS) {
			lookups += self->sh->hits[i] + self->sh->misses[i];
			misses += self->sh->misses[i];
		}
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	TH_LOG("%ld count-only lookups of a key pinned throughout, %ld misses; %ld publishes, %llu evictions, ENOSPC %ld",
	       lookups, misses, self->sh->republished,
	       (unsigned long long)(st.evictions - s0.evictions),
	       self->sh->enospc);
	EXPECT_EQ(0, misses);
	EXPECT_LT(0, lookups);
	EXPECT_LT(s0.evictions, st.evictions);
	/* The pin held it throughout: still there, in the same block. */
	ASSERT_EQ(0, bt_lookup(self->c.fd, self->ns, &k, 1, &off, 0, &hits));
	EXPECT_EQ(1, hits);
	EXPECT_EQ(held, off);
	ASSERT_EQ(0, bt_release(holder, 1, &held));
	close(holder);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(0, st.pins);
	EXPECT_EQ(0, st.allocated_blocks);
}

TEST_HARNESS_MAIN
