// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-process stress: four worker processes, each with its own open file,
 * run a few thousand random operations (ALLOC, PUBLISH, FREE, LOOKUP with
 * and without PIN, RELEASE) over a shared key space in a pool small enough
 * that ALLOC keeps evicting. A fifth process polls STATS all along.
 * Checked:
 *   - every STATS snapshot: free + allocated + published == total,
 *     pinned_blocks <= published and <= pins, counters never go backwards;
 *   - every pinned block holds the bytes written for its key, before and
 *     after other operations (a pinned block is never reused);
 *   - at the end: no allocation or pin left (one worker exits without
 *     cleaning up), allocs == frees + publishes over the run, and releases
 *     equal the pins the workers took.
 */
#include "beluga_test.h"

#define NWORKERS	4
#define OPS		3000
#define NKEYS		256
#define MAXHELD		8

struct shared {
	volatile int done;
	struct {
		long ops, allocs, enospc, published, exists, frees, pins,
		     releases, lookups, hits;
		char err[200];
	} w[NWORKERS];
	long snapshots;
	char reader_err[200];
};

FIXTURE(stress) {
	struct bt_ctx c;
	uint64_t ns;
	struct shared *sh;
};

FIXTURE_VARIANT(stress) {
	int backend;
};

FIXTURE_VARIANT_ADD(stress, node) {
	.backend = BELUGA_BACKEND_NODE,
};

FIXTURE_VARIANT_ADD(stress, dax) {
	.backend = BELUGA_BACKEND_DAX,
};

FIXTURE_SETUP(stress)
{
	/* 4 MiB of 32 KiB blocks: 128 blocks for 256 keys */
	if (!bt_setup(&self->c, variant->backend, 2 * BT_REGION_LEN, 32 * BT_KIB))
		return;
	self->ns = bt_ns(0x57e55);
	self->sh = mmap(NULL, sizeof(*self->sh), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->sh);
	memset(self->sh, 0, sizeof(*self->sh));
}

FIXTURE_TEARDOWN(stress)
{
	bt_teardown(&self->c);
}

#define WFAIL(fmt, ...) do {						\
	snprintf(me->err, sizeof(me->err), "op %ld: " fmt, me->ops,	\
		 ##__VA_ARGS__);					\
	return 1;							\
} while (0)

static int worker(struct shared *sh, int id, uint64_t ns)
{
	struct { uint64_t off; int key; } held[MAXHELD], pinned[MAXHELD];
	typeof(&sh->w[0]) me = &sh->w[id];
	unsigned int seed = 1000 + id * 7919;
	int nheld = 0, npinned = 0, fd, i, r;
	struct beluga_info info;
	uint64_t gen = (uint64_t)id << 48;
	char *map;

	fd = bt_open(O_RDWR);
	if (fd < 0)
		WFAIL("open: %s", strerror(errno));
	if (bt_info(fd, &info))
		WFAIL("INFO");
	map = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		   fd, 0);
	if (map == MAP_FAILED)
		WFAIL("mmap: %s", strerror(errno));

	for (me->ops = 0; me->ops < OPS; me->ops++) {
		int op = rand_r(&seed) % 100;

		if (op < 30) {			/* ALLOC 1..3 */
			uint64_t o[3];
			int n = 1 + rand_r(&seed) % 3;

			if (nheld + n > MAXHELD)
				continue;
			r = bt_alloc(fd, n, o);
			if (r == -ENOSPC) {
				me->enospc++;
				continue;
			}
			if (r)
				WFAIL("ALLOC %d: %s", n, strerror(-r));
			for (i = 0; i < n; i++) {
				int k = rand_r(&seed) % NKEYS;

				if (o[i] + sizeof(struct bt_tag) > info.map_size)
					WFAIL("ALLOC gave offset 0x%llx",
					      (unsigned long long)o[i]);
				bt_tag_write((struct bt_tag *)(map + o[i]),
					     bt_key(ns, k), ++gen);
				held[nheld].off = o[i];
				held[nheld].key = k;
				nheld++;
			}
			me->allocs += n;
		} else if (op < 50) {		/* PUBLISH one */
			int32_t res;

			if (!nheld)
				continue;
			nheld--;
			r = bt_publish1(fd, ns, held[nheld].off,
					bt_key(ns, held[nheld].key), &res);
			if (r)
				WFAIL("PUBLISH: %s", strerror(-r));
			if (res == BELUGA_PUBLISH_OK)
				me->published++;
			else if (res == BELUGA_PUBLISH_EXISTS)
				me->exists++;
			else
				WFAIL("PUBLISH of an own block: result %d", res);
		} else if (op < 60) {		/* FREE one */
			if (!nheld)
				continue;
			nheld--;
			r = bt_free(fd, 1, &held[nheld].off);
			if (r)
				WFAIL("FREE: %s", strerror(-r));
			me->frees++;
		} else if (op < 85) {		/* LOOKUP + PIN a short chain */
			struct beluga_key k[3];
			uint64_t o[3];
			int kk[3], n = 1 + rand_r(&seed) % 3;
			uint32_t hits;

			if (npinned + n > MAXHELD)
				continue;
			kk[0] = rand_r(&seed) % NKEYS;
			for (i = 0; i < n; i++) {
				kk[i] = (kk[0] + i) % NKEYS;
				k[i] = bt_key(ns, kk[i]);
			}
			r = bt_lookup(fd, ns, k, n, o, BELUGA_LOOKUP_PIN, &hits);
			if (r)
				WFAIL("LOOKUP PIN: %s", strerror(-r));
			if (hits > (uint32_t)n)
				WFAIL("LOOKUP: %u hits for %d keys", hits, n);
			me->lookups++;
			me->hits += hits;
			me->pins += hits;
			for (i = 0; i < (int)hits; i++) {
				if (!bt_tag_ok((struct bt_tag *)(map + o[i]),
					       k[i], NULL))
					WFAIL("key %d pinned at 0x%llx: wrong bytes",
					      kk[i], (unsigned long long)o[i]);
				pinned[npinned].off = o[i];
				pinned[npinned].key = kk[i];
				npinned++;
			}
		} else if (op < 95) {		/* RELEASE one, checking first */
			if (!npinned)
				continue;
			i = rand_r(&seed) % npinned;
			if (!bt_tag_ok((struct bt_tag *)(map + pinned[i].off),
				       bt_key(ns, pinned[i].key), NULL))
				WFAIL("key %d at 0x%llx changed while pinned",
				      pinned[i].key,
				      (unsigned long long)pinned[i].off);
			r = bt_release(fd, 1, &pinned[i].off);
			if (r)
				WFAIL("RELEASE: %s", strerror(-r));
			pinned[i] = pinned[--npinned];
			me->releases++;
		} else {			/* count-only probe */
			struct beluga_key k[4];
			uint32_t hits;
			int k0 = rand_r(&seed) % NKEYS;

			for (i = 0; i < 4; i++)
				k[i] = bt_key(ns, (k0 + i) % NKEYS);
			r = bt_lookup(fd, ns, k, 4, NULL, 0, &hits);
			if (r)
				WFAIL("LOOKUP probe: %s", strerror(-r));
			if (hits > 4)
				WFAIL("probe: %u hits for 4 keys", hits);
			me->lookups++;
			me->hits += hits;
		}
	}
	/* the last worker leaves everything to close-on-exit */
	if (id == NWORKERS - 1)
		return 0;
	for (i = 0; i < npinned; i++) {
		if (!bt_tag_ok((struct bt_tag *)(map + pinned[i].off),
			       bt_key(ns, pinned[i].key), NULL))
			WFAIL("final check: key %d changed while pinned",
			      pinned[i].key);
		if (bt_release(fd, 1, &pinned[i].off))
			WFAIL("final RELEASE");
		me->releases++;
	}
	for (i = 0; i < nheld; i++) {
		if (bt_free(fd, 1, &held[i].off))
			WFAIL("final FREE");
		me->frees++;
	}
	munmap(map, info.map_size);
	close(fd);
	return 0;
}

static int stats_reader(struct shared *sh, uint64_t total)
{
	struct beluga_stats st, prev;
	int fd = bt_open(O_RDONLY);

#define RFAIL(fmt, ...) do {						\
	snprintf(sh->reader_err, sizeof(sh->reader_err),		\
		 "snapshot %ld: " fmt, sh->snapshots, ##__VA_ARGS__);	\
	return 1;							\
} while (0)

	if (fd < 0)
		RFAIL("open: %s", strerror(errno));
	memset(&prev, 0, sizeof(prev));
	do {
		if (bt_stats(fd, &st))
			RFAIL("STATS: %s", strerror(errno));
		if (st.total_blocks != total)
			RFAIL("total %llu, expected %llu",
			      (unsigned long long)st.total_blocks,
			      (unsigned long long)total);
		if (st.free_blocks + st.allocated_blocks + st.published_blocks !=
		    st.total_blocks)
			RFAIL("free %llu + allocated %llu + published %llu != %llu",
			      (unsigned long long)st.free_blocks,
			      (unsigned long long)st.allocated_blocks,
			      (unsigned long long)st.published_blocks,
			      (unsigned long long)st.total_blocks);
		if (st.pinned_blocks > st.published_blocks ||
		    st.pinned_blocks > st.pins)
			RFAIL("pinned_blocks %llu, published %llu, pins %llu",
			      (unsigned long long)st.pinned_blocks,
			      (unsigned long long)st.published_blocks,
			      (unsigned long long)st.pins);
		if (st.allocs < prev.allocs || st.frees < prev.frees ||
		    st.publishes < prev.publishes ||
		    st.evictions < prev.evictions ||
		    st.releases < prev.releases || st.lookups < prev.lookups)
			RFAIL("a counter went backwards");
		if (st.lookup_hits > st.lookup_keys)
			RFAIL("lookup_hits > lookup_keys");
		prev = st;
		sh->snapshots++;
		sched_yield();
	} while (!sh->done);
	close(fd);
	return 0;
#undef RFAIL
}

TEST_F_TIMEOUT(stress, four_processes, 300)
{
	struct shared *sh = self->sh;
	struct beluga_stats s0, s1;
	pid_t pids[NWORKERS], rpid;
	long pins = 0, releases_seen;
	int i, r;

	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	rpid = bt_fork(&self->c);
	ASSERT_LE(0, rpid);
	if (rpid == 0)
		_exit(stats_reader(sh, s0.total_blocks));
	for (i = 0; i < NWORKERS; i++) {
		pids[i] = bt_fork(&self->c);
		ASSERT_LE(0, pids[i]);
		if (pids[i] == 0)
			_exit(worker(sh, i, self->ns));
	}
	for (i = 0; i < NWORKERS; i++) {
		r = bt_wait(&self->c, pids[i]);
		EXPECT_EQ(0, r) TH_LOG("worker %d: status %d: %s", i, r,
				       sh->w[i].err);
	}
	sh->done = 1;
	r = bt_wait(&self->c, rpid);
	EXPECT_EQ(0, r) TH_LOG("STATS reader: %s", sh->reader_err);
	EXPECT_LT(0, sh->snapshots);

	for (i = 0; i < NWORKERS; i++) {
		TH_LOG("worker %d: %ld ops, %ld blocks allocated (%ld ENOSPC), "
		       "%ld published, %ld lost races, %ld freed, %ld pins, "
		       "%ld lookups with %ld hits", i, sh->w[i].ops,
		       sh->w[i].allocs, sh->w[i].enospc, sh->w[i].published,
		       sh->w[i].exists, sh->w[i].frees, sh->w[i].pins,
		       sh->w[i].lookups, sh->w[i].hits);
		pins += sh->w[i].pins;
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	TH_LOG("reader took %ld snapshots; %llu evictions", sh->snapshots,
	       (unsigned long long)(s1.evictions - s0.evictions));
	ASSERT_STATS_CONSISTENT(s1);
	EXPECT_EQ(0, s1.allocated_blocks) TH_LOG("allocations leaked");
	EXPECT_EQ(0, s1.pins) TH_LOG("pins leaked");
	EXPECT_EQ(0, s1.pinned_blocks);
	EXPECT_EQ(s0.clients, s1.clients);
	/* every block allocated left ALLOCATED by FREE/lost race/close or PUBLISH */
	EXPECT_EQ(s1.allocs - s0.allocs,
		  (s1.frees - s0.frees) + (s1.publishes - s0.publishes));
	/* every pin taken was dropped by RELEASE or on close */
	releases_seen = s1.releases - s0.releases;
	EXPECT_EQ(pins, releases_seen);
	EXPECT_EQ(s1.published_blocks - s0.published_blocks,
		  (s1.publishes - s0.publishes) - (s1.evictions - s0.evictions));
	EXPECT_LT(s0.evictions, s1.evictions)
		TH_LOG("the pool never ran full: the test is too gentle");
}

TEST_HARNESS_MAIN
