// SPDX-License-Identifier: GPL-2.0
/*
 * The index, mapped read-only (uapi: "The index, mapped read-only"), and
 * the count-only LOOKUP that runs on it with no system call. The reader
 * is the module's own (kmod/core/bel_index_copy.h, as libbeluga compiles
 * it), falling back to LOOKUP when it is unsure, as libbeluga does.
 *   - the ioctl's and mmap()'s rules: offset, length, read-only, flags,
 *     an empty pool;
 *   - answers equal LOOKUP's, before and after evictions and reuse;
 *   - processes probing a key that another file pins throughout, through
 *     their own mappings, while a writer keeps evicting and reusing the
 *     blocks around it and the parent ATTACHes and DETACHes a second
 *     region (each seals the copy; the probers map the new one): no miss;
 *   - a mapping outlives its regions, its copy and its file: after
 *     DETACH it reads a sealed copy, every page of it, and never faults;
 *     DETACH is not kept away by it.
 */
#include "beluga_test.h"
#include "bel_index_copy.h"	/* -DBEL_ENV_NO_RCU (Makefile) */

/* One mapping of the copy. */
struct idx {
	const struct beluga_index_header *hdr;
	size_t len;
};

/* INDEX_MAP, then mmap() it read-only: 0 or -errno. */
static int idx_map(int fd, struct idx *m)
{
	struct beluga_index_map req = { .size = sizeof(req) };
	void *p;
	int r;

	r = bt_ioctl(fd, BELUGA_IOC_INDEX_MAP, &req);
	if (r)
		return r;
	if (req.offset != BELUGA_INDEX_MAP_OFFSET || !req.length)
		return -EPROTO;
	p = mmap(NULL, req.length, PROT_READ, MAP_SHARED, fd, (off_t)req.offset);
	if (p == MAP_FAILED)
		return -errno;
	if (!bel_index_copy_usable(p, req.length)) {
		munmap(p, req.length);
		return -EPROTO;
	}
	m->hdr = p;
	m->len = req.length;
	return 0;
}

static void idx_unmap(struct idx *m)
{
	if (m->hdr)
		munmap((void *)m->hdr, m->len);
	m->hdr = NULL;
}

static bool idx_sealed(const struct idx *m)
{
	return __atomic_load_n(&m->hdr->seq, __ATOMIC_ACQUIRE) & 1;
}

/* The copy's answer for one key: 1, 0 or BEL_COPY_UNSURE. */
static int idx_present(const struct idx *m, uint64_t ns, struct beluga_key k)
{
	u32 hits = 0;
	int r = bel_index_copy_lookup(m->hdr, ns, 1, &k, &hits);

	return r ? r : (int)hits;
}

#define READERS		3
#define PROBE_SECONDS	3
#define ROUNDS		30	/* ATTACH/DETACH rounds of the parent */

/* Shared with the children (MAP_SHARED | MAP_ANONYMOUS). */
struct shared {
	volatile int stop;
	volatile long hits[READERS], misses[READERS], unsure[READERS];
	volatile long remaps[READERS], published;
	char err[READERS + 1][200];
};

FIXTURE(index_map) {
	struct bt_ctx c;
	uint64_t ns;
	struct shared *sh;
};

FIXTURE_SETUP(index_map)
{
	/* 32 blocks of 64 KiB: ALLOC evicts soon */
	if (!bt_setup(&self->c, BT_ANY_BACKEND, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->ns = bt_ns(0x1d3a);
	self->sh = mmap(NULL, sizeof(*self->sh), PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->sh);
	memset(self->sh, 0, sizeof(*self->sh));
}

FIXTURE_TEARDOWN(index_map)
{
	if (self->sh && self->sh != MAP_FAILED) {
		self->sh->stop = 1;
		munmap(self->sh, sizeof(*self->sh));
	}
	bt_teardown(&self->c);
}

TEST_F(index_map, ioctl_and_mmap_rules)
{
	struct beluga_index_map req = { .size = sizeof(req) };
	struct idx m = { 0 }, ro = { 0 };
	int rofd, r;
	void *p;

	req.flags = 1;
	EXPECT_EQ(-EINVAL, bt_ioctl(self->c.fd, BELUGA_IOC_INDEX_MAP, &req));
	/* mmap() before any INDEX_MAP: no copy yet */
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->c.fd,
		 (off_t)BELUGA_INDEX_MAP_OFFSET);
	if (p != MAP_FAILED) {
		/* an earlier test of this pool made one: that is allowed */
		munmap(p, 4096);
	}
	req.flags = 0;
	ASSERT_EQ(0, bt_ioctl(self->c.fd, BELUGA_IOC_INDEX_MAP, &req));
	EXPECT_EQ(BELUGA_INDEX_MAP_OFFSET, req.offset);
	EXPECT_LT(4096, req.length);

	errno = 0;
	p = mmap(NULL, req.length, PROT_READ | PROT_WRITE, MAP_SHARED,
		 self->c.fd, (off_t)req.offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EACCES, errno);
	p = mmap(NULL, req.length, PROT_READ, MAP_PRIVATE, self->c.fd,
		 (off_t)req.offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->c.fd,
		 (off_t)(req.offset + 4096));
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(ENXIO, errno);
	p = mmap(NULL, ((req.length + 4095) & ~4095ULL) + 4096, PROT_READ,
		 MAP_SHARED, self->c.fd, (off_t)req.offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(ENXIO, errno);

	ASSERT_EQ(0, idx_map(self->c.fd, &m));
	EXPECT_EQ(BELUGA_INDEX_MAGIC, m.hdr->magic);
	EXPECT_EQ(0, m.hdr->seq);
	EXPECT_EQ(BT_BLOCK_SIZE, m.hdr->block_size);
	EXPECT_EQ(self->c.att[0].nr_blocks,
		  m.hdr->regions[self->c.att[0].region_id].nr_blocks);
	/* read-only for good */
	EXPECT_EQ(-1, mprotect((void *)m.hdr, m.len, PROT_READ | PROT_WRITE));
	EXPECT_EQ(EACCES, errno);

	/* a read-only file maps it too, the same copy */
	rofd = bt_open(O_RDONLY);
	ASSERT_LE(0, rofd);
	ASSERT_EQ(0, idx_map(rofd, &ro));
	EXPECT_EQ(m.len, ro.len);
	EXPECT_EQ(0, memcmp(m.hdr, ro.hdr, sizeof(*m.hdr)));
	idx_unmap(&ro);
	close(rofd);
	idx_unmap(&m);

	/* an empty pool has no index to map */
	bt_ctx_teardown(&self->c);
	r = bt_reset_pool();
	ASSERT_EQ(0, r);
	self->c.fd = bt_open(O_RDWR);
	ASSERT_LE(0, self->c.fd);
	memset(&req, 0, sizeof(req));
	req.size = sizeof(req);
	EXPECT_EQ(-ENODEV, bt_ioctl(self->c.fd, BELUGA_IOC_INDEX_MAP, &req));
}

TEST_F(index_map, answers_equal_lookup)
{
	struct beluga_key k;
	struct idx m = { 0 };
	int i, wrong = 0, unsure = 0, r, want;

	for (i = 0; i < 20; i++)
		ASSERT_EQ(0, bt_publish_tagged(self->c.fd, NULL, 0, self->ns,
					       bt_key(self->ns, i), 1));
	ASSERT_EQ(0, idx_map(self->c.fd, &m));
	/* evictions and reuse after the copy was made: it follows them */
	for (i = 0; i < 20; i += 3) {
		k = bt_key(self->ns, i);
		ASSERT_EQ(0, bt_evict_key(self->c.fd, self->ns, k, NULL));
	}
	for (i = 100; i < 140; i++)	/* past the pool's 32 blocks: evicts */
		ASSERT_EQ(0, bt_publish_tagged(self->c.fd, NULL, 0, self->ns,
					       bt_key(self->ns, i), 1));
	for (i = 0; i < 160; i++) {
		k = bt_key(self->ns, i);
		r = idx_present(&m, self->ns, k);
		want = bt_present(self->c.fd, self->ns, k);
		unsure += r == BEL_COPY_UNSURE;
		wrong += r != want;
		/* the same key in another namespace: never there */
		wrong += idx_present(&m, self->ns + 1, k) != 0;
	}
	TH_LOG("160 keys in 2 namespaces: %d answers differ from LOOKUP, %d unsure",
	       wrong, unsure);
	EXPECT_EQ(0, wrong);
	EXPECT_EQ(0, m.hdr->seq);
	idx_unmap(&m);
}

/*
 * Probe @k on the copy through a read-only file of its own; unsure
 * answers ask LOOKUP, and a sealed copy is mapped anew.
 */
static int prober(FIXTURE_DATA(index_map) *self, int me, struct beluga_key k)
{
	char *err = self->sh->err[me];
	long hits = 0, misses = 0, unsure = 0, remaps = 0;
	int fd = bt_open(O_RDONLY), r;
	struct idx m = { 0 };

	if (fd < 0 || (r = idx_map(fd, &m))) {
		snprintf(err, 200, "open or map: %s", strerror(errno));
		return 1;
	}
	while (!self->sh->stop) {
		r = idx_present(&m, self->ns, k);
		if (r == BEL_COPY_UNSURE) {
			unsure++;
			if (idx_sealed(&m)) {
				struct idx fresh = { 0 };

				/* -ENODEV or -ENXIO: sealed again meanwhile */
				if (!idx_map(fd, &fresh)) {
					idx_unmap(&m);
					m = fresh;
					remaps++;
				}
			}
			r = bt_present(fd, self->ns, k);
			if (r < 0) {
				snprintf(err, 200, "LOOKUP: %s", strerror(-r));
				return 1;
			}
		}
		if (r)
			hits++;
		else
			misses++;
	}
	self->sh->hits[me] = hits;
	self->sh->misses[me] = misses;
	self->sh->unsure[me] = unsure;
	self->sh->remaps[me] = remaps;
	idx_unmap(&m);
	close(fd);
	return 0;
}

/* Fresh keys, one block each: once the pool is full each ALLOC evicts. */
static int evicting_writer(FIXTURE_DATA(index_map) *self)
{
	int fd = bt_open(O_RDWR), r;
	uint64_t gen = 1;

	if (fd < 0)
		return 1;
	while (!self->sh->stop) {
		r = bt_publish_tagged(fd, NULL, 0, self->ns,
				      bt_key(self->ns, 1000000 + gen), gen);
		gen++;
		if (r && r != -ENOSPC) {
			snprintf(self->sh->err[READERS], 200, "publish: %s",
				 strerror(-r));
			return 1;
		}
		self->sh->published += !r;
	}
	close(fd);
	return 0;
}

TEST_F_TIMEOUT(index_map, pinned_key_never_missed_across_evictions_reuse_and_detach,
	       180)
{
	struct beluga_key k = bt_key(self->ns, 1);
	long lookups = 0, misses = 0, unsure = 0, remaps = 0;
	struct beluga_attach second, a;
	struct beluga_stats s0, st;
	int holder, i, status, rounds = 0, busy = 0;
	bool attached = false;
	pid_t kids[READERS + 1];
	uint64_t held, evicted;
	uint32_t hits;
	double end;

	ASSERT_EQ(0, bt_publish_tagged(self->c.fd, NULL, 0, self->ns, k, 1));
	holder = bt_open(O_RDONLY);
	ASSERT_LE(0, holder);
	ASSERT_EQ(0, bt_lookup(holder, self->ns, &k, 1, &held,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	/* the second region: the next range of the same device (or node) */
	ASSERT_EQ(0, bt_attach_req(&second, self->c.backend, 0, BT_REGION_LEN,
				   BT_REGION_LEN, BT_BLOCK_SIZE,
				   self->c.backend == BELUGA_BACKEND_NODE ?
				   "bt-node1" : NULL));
	for (i = 0; i <= READERS; i++) {
		kids[i] = bt_fork(&self->c);
		ASSERT_LE(0, kids[i]);
		if (!kids[i])
			_exit(i < READERS ? prober(self, i, k) :
			      evicting_writer(self));
	}
	/*
	 * Each ATTACH and each DETACH seals the copy the probers read. A
	 * DETACH kept busy by the writer's blocks in flight stays attached
	 * for the next round.
	 */
	for (end = bt_now_s() + PROBE_SECONDS; bt_now_s() < end && rounds < ROUNDS;) {
		int r;

		if (!attached) {
			a = second;
			r = bt_attach(self->c.fd, &a);
			ASSERT_EQ(0, r) TH_LOG("ATTACH: %s", strerror(-r));
			attached = true;
			usleep(20000);
		}
		r = bt_detach_retry(self->c.fd, a.region_id,
				    BELUGA_DETACH_EVICT, &evicted, 2000);
		if (r == -EBUSY)
			busy++;
		else
			ASSERT_EQ(0, r) TH_LOG("DETACH: %s", strerror(-r));
		attached = r == -EBUSY;
		rounds++;
	}
	while (bt_now_s() < end)
		usleep(100000);
	self->sh->stop = 1;
	for (i = 0; i <= READERS; i++) {
		status = bt_wait(&self->c, kids[i]);
		EXPECT_EQ(0, status) TH_LOG("%s %d: %s",
					    i < READERS ? "prober" : "writer",
					    i, self->sh->err[i]);
		if (i < READERS) {
			lookups += self->sh->hits[i] + self->sh->misses[i];
			misses += self->sh->misses[i];
			unsure += self->sh->unsure[i];
			remaps += self->sh->remaps[i];
		}
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	TH_LOG("%ld lookups of a pinned key on the mapped index: %ld misses, %ld asked of LOOKUP, %ld remaps; %d ATTACH/DETACH rounds (%d busy), %ld publishes, %llu evictions",
	       lookups, misses, unsure, remaps, rounds, busy,
	       self->sh->published,
	       (unsigned long long)(st.evictions - s0.evictions));
	EXPECT_EQ(0, misses);
	EXPECT_LT(0, lookups);
	/* most answers came from the copy, not from LOOKUP */
	EXPECT_LT(unsure, lookups);
	EXPECT_LT(0, remaps);
	EXPECT_LT(s0.evictions, st.evictions);
	ASSERT_EQ(0, bt_release(holder, 1, &held));
	close(holder);
}

TEST_F(index_map, mapping_outlives_its_region_and_file)
{
	struct beluga_key k = bt_key(self->ns, 7);
	struct beluga_attach second;
	struct idx m = { 0 }, fresh = { 0 };
	volatile const char *page;
	uint64_t evicted;
	unsigned long sum = 0;
	size_t off;
	int fd, r;

	ASSERT_EQ(0, bt_attach_req(&second, self->c.backend, 0, BT_REGION_LEN,
				   BT_REGION_LEN, BT_BLOCK_SIZE,
				   self->c.backend == BELUGA_BACKEND_NODE ?
				   "bt-node1" : NULL));
	ASSERT_EQ(0, bt_attach(self->c.fd, &second));
	ASSERT_EQ(0, bt_publish_tagged(self->c.fd, NULL, 0, self->ns, k, 1));
	fd = bt_open(O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, idx_map(fd, &m));
	EXPECT_EQ(second.nr_blocks, m.hdr->regions[second.region_id].nr_blocks);
	EXPECT_EQ(1, idx_present(&m, self->ns, k));
	/* the file goes; the mapping stays */
	close(fd);

	/* DETACH is not kept away by the index's mapping; it seals it */
	r = bt_detach(self->c.fd, second.region_id, BELUGA_DETACH_EVICT,
		      &evicted);
	ASSERT_EQ(0, r) TH_LOG("DETACH: %s", strerror(-r));
	EXPECT_TRUE(idx_sealed(&m));
	EXPECT_EQ(BEL_COPY_UNSURE, idx_present(&m, self->ns, k));
	/* every page still reads, the detached region's entries too */
	for (off = 0; off < m.len; off += 4096) {
		page = (const char *)m.hdr + off;
		sum += page[0];
	}
	TH_LOG("read %zu bytes of a sealed copy after DETACH (sum %lu)", m.len,
	       sum);

	/* a new copy: live, one region; the old mapping still reads */
	ASSERT_EQ(0, idx_map(self->c.fd, &fresh));
	EXPECT_FALSE(idx_sealed(&fresh));
	EXPECT_EQ(0, fresh.hdr->regions[second.region_id].nr_blocks);
	r = idx_present(&fresh, self->ns, k);
	EXPECT_EQ(bt_present(self->c.fd, self->ns, k), r);
	EXPECT_EQ(BELUGA_INDEX_MAGIC, m.hdr->magic);
	idx_unmap(&m);
	idx_unmap(&fresh);
}

TEST_HARNESS_MAIN
