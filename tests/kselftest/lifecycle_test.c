// SPDX-License-Identifier: GPL-2.0
/*
 * Lifetimes across processes and files: a writer process publishes blocks
 * that separate reader processes (forked with their own open, or exec'd)
 * read back byte for byte; read-only opens; cleanup of allocations, pins
 * and mappings on SIGKILL and on exit; a mapping or a dup() keeping the
 * file (and so its allocations) alive.
 */
#include "beluga_test.h"

#define NCHAIN		4
#define DATA_LEN	BT_BLOCK_SIZE	/* bytes checked per block */

static uint64_t block_seed(uint64_t ns, int i)
{
	return bt_mix64(ns ^ ((uint64_t)i << 40));
}

/*
 * The reader: open read-only, map read-only, pin the chain, compare the
 * bytes, release. Returns 0 or a distinct non-zero code (also used as the
 * exit status of the exec'd reader).
 */
static int reader(uint64_t ns, int n)
{
	struct beluga_key keys[NCHAIN];
	struct beluga_info info;
	uint64_t offs[NCHAIN];
	uint32_t hits;
	char *map;
	int fd, i, r;

	if (n > NCHAIN)
		return 2;
	fd = bt_open(O_RDONLY);
	if (fd < 0)
		return 3;
	if (bt_info(fd, &info))
		return 4;
	map = mmap(NULL, info.map_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return 5;
	for (i = 0; i < n; i++)
		keys[i] = bt_key(ns, i);
	r = bt_lookup(fd, ns, keys, n, offs, BELUGA_LOOKUP_PIN, &hits);
	if (r)
		return 6;
	if (hits != (uint32_t)n) {
		fprintf(stderr, "# reader: %u hits of %d\n", hits, n);
		return 7;
	}
	for (i = 0; i < n; i++) {
		long bad;

		if (offs[i] + DATA_LEN > info.map_size)
			return 8;
		bad = bt_check(map + offs[i], DATA_LEN, block_seed(ns, i));
		if (bad >= 0) {
			fprintf(stderr, "# reader: block %d differs at word %ld\n",
				i, bad);
			return 9;
		}
	}
	if (bt_release(fd, n, offs))
		return 10;
	munmap(map, info.map_size);
	close(fd);
	return 0;
}

/* The writer: own open, allocate, write, publish the chain, exit. */
static int writer(uint64_t ns, int n)
{
	struct beluga_publish_item it[NCHAIN];
	struct beluga_publish p;
	struct beluga_info info;
	uint64_t offs[NCHAIN];
	char *map;
	int fd, i;

	fd = bt_open(O_RDWR);
	if (fd < 0 || bt_info(fd, &info))
		return 3;
	map = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		   fd, 0);
	if (map == MAP_FAILED)
		return 5;
	if (bt_alloc(fd, n, offs))
		return 6;
	memset(it, 0, sizeof(it));
	for (i = 0; i < n; i++) {
		bt_fill(map + offs[i], DATA_LEN, block_seed(ns, i));
		it[i].offset = offs[i];
		it[i].key = bt_key(ns, i);
	}
	if (bt_publish(fd, ns, it, n, &p) || p.published != (uint32_t)n)
		return 7;
	/* exit without unmapping or closing: the kernel cleans up */
	return 0;
}

FIXTURE(life) {
	struct bt_ctx c;
	uint64_t ns;
};

FIXTURE_VARIANT(life) {
	int backend;
};

FIXTURE_VARIANT_ADD(life, node) {
	.backend = BELUGA_BACKEND_NODE,
};

FIXTURE_VARIANT_ADD(life, dax) {
	.backend = BELUGA_BACKEND_DAX,
};

FIXTURE_SETUP(life)
{
	if (!bt_setup(&self->c, variant->backend, BT_REGION_LEN, BT_BLOCK_SIZE))
		return;
	self->ns = bt_ns(0x11fe);
}

FIXTURE_TEARDOWN(life)
{
	bt_teardown(&self->c);
}

static int run_writer(struct bt_ctx *c, uint64_t ns)
{
	pid_t pid = bt_fork(c);

	if (pid == 0)
		_exit(writer(ns, NCHAIN));
	return pid < 0 ? -1 : bt_wait(c, pid);
}

TEST_F(life, writer_then_forked_reader)
{
	struct beluga_stats st;
	pid_t pid;
	int r;

	r = run_writer(&self->c, self->ns);
	ASSERT_EQ(0, r) TH_LOG("writer failed with code %d", r);
	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(reader(self->ns, NCHAIN));
	r = bt_wait(&self->c, pid);
	ASSERT_EQ(0, r) TH_LOG("reader failed with code %d", r);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	ASSERT_STATS_CONSISTENT(st);
	EXPECT_EQ(NCHAIN, st.published_blocks);
	EXPECT_EQ(0, st.allocated_blocks);
	EXPECT_EQ(0, st.pins);
	EXPECT_EQ(1, st.clients);
}

static char self_exe[PATH_MAX];

TEST_F(life, writer_then_exec_reader)
{
	char nsbuf[32], nbuf[8];
	pid_t pid;
	int r;

	if (access(self_exe, X_OK))
		SKIP(return, "cannot re-execute this test binary (%.200s): %s",
		     self_exe, strerror(errno));
	r = run_writer(&self->c, self->ns);
	ASSERT_EQ(0, r) TH_LOG("writer failed with code %d", r);
	snprintf(nsbuf, sizeof(nsbuf), "%llx", (unsigned long long)self->ns);
	snprintf(nbuf, sizeof(nbuf), "%d", NCHAIN);
	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		execl(self_exe, self_exe, "--beluga-reader", nsbuf, nbuf,
		      (char *)NULL);
		_exit(99);
	}
	r = bt_wait(&self->c, pid);
	ASSERT_NE(99, r) TH_LOG("exec of %s failed", self_exe);
	ASSERT_EQ(0, r) TH_LOG("exec'd reader failed with code %d", r);
}

/*
 * Writer and reader run at the same time: every key the reader finds must
 * already carry its complete bytes.
 */
TEST_F(life, concurrent_reader_sees_complete_blocks)
{
	pid_t wpid, rpid;
	int r;

	rpid = bt_fork(&self->c);
	ASSERT_LE(0, rpid);
	if (rpid == 0) {
		struct beluga_key keys[NCHAIN];
		struct beluga_info info;
		uint64_t offs[NCHAIN];
		uint32_t hits = 0;
		long polls;
		char *map;
		int fd, i;

		fd = bt_open(O_RDONLY);
		CHILD_CHECK(fd >= 0);
		CHILD_CHECK(bt_info(fd, &info) == 0);
		map = mmap(NULL, info.map_size, PROT_READ, MAP_SHARED, fd, 0);
		CHILD_CHECK(map != MAP_FAILED);
		for (i = 0; i < NCHAIN; i++)
			keys[i] = bt_key(self->ns, i);
		/* bounded number of polls, not a time limit */
		for (polls = 0; polls < 2000000 && hits < NCHAIN; polls++) {
			CHILD_CHECK(bt_lookup(fd, self->ns, keys, NCHAIN, offs,
					      BELUGA_LOOKUP_PIN, &hits) == 0);
			for (i = 0; i < (int)hits; i++)
				CHILD_CHECK(bt_check(map + offs[i], DATA_LEN,
					block_seed(self->ns, i)) == -1);
			if (hits)
				CHILD_CHECK(bt_release(fd, hits, offs) == 0);
			if (hits < NCHAIN)
				sched_yield();
		}
		CHILD_CHECK(hits == NCHAIN);
		_exit(0);
	}
	wpid = bt_fork(&self->c);
	ASSERT_LE(0, wpid);
	if (wpid == 0) {
		/* publish one block at a time */
		struct beluga_info info;
		uint64_t off;
		int32_t res;
		char *map;
		int fd, i;

		fd = bt_open(O_RDWR);
		CHILD_CHECK(fd >= 0);
		CHILD_CHECK(bt_info(fd, &info) == 0);
		map = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE,
			   MAP_SHARED, fd, 0);
		CHILD_CHECK(map != MAP_FAILED);
		for (i = 0; i < NCHAIN; i++) {
			CHILD_CHECK(bt_alloc(fd, 1, &off) == 0);
			bt_fill(map + off, DATA_LEN, block_seed(self->ns, i));
			CHILD_CHECK(bt_publish1(fd, self->ns, off,
						bt_key(self->ns, i), &res) == 0);
			CHILD_CHECK(res == BELUGA_PUBLISH_OK);
			sched_yield();
		}
		_exit(0);
	}
	r = bt_wait(&self->c, wpid);
	EXPECT_EQ(0, r) TH_LOG("writer failed");
	r = bt_wait(&self->c, rpid);
	EXPECT_EQ(0, r) TH_LOG("reader failed");
}

TEST_F(life, rdonly_rules)
{
	struct beluga_stats s0, s1;
	struct beluga_info info;
	struct beluga_region_info ri;
	struct beluga_key k = bt_key(self->ns, 1);
	uint64_t o[2], got;
	uint32_t hits;
	int32_t res;
	char *rw = bt_map(&self->c), *ro;
	int fd, r;

	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, o));
	bt_fill(rw + o[0], 1024, 31);
	ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, o[0], k, &res));
	ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	fd = bt_open(O_RDONLY);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, bt_stats(fd, &s0));

	r = bt_alloc(fd, 1, &got);
	EXPECT_EQ(-EBADF, r) TH_LOG("ALLOC read-only: %s", strerror(-r));
	r = bt_free(fd, 1, &o[1]);
	EXPECT_EQ(-EBADF, r) TH_LOG("FREE read-only: %s", strerror(-r));
	r = bt_publish1(fd, self->ns, o[1], bt_key(self->ns, 2), &res);
	EXPECT_EQ(-EBADF, r) TH_LOG("PUBLISH read-only: %s", strerror(-r));
	ASSERT_EQ(0, bt_stats(fd, &s1));
	ASSERT_OCCUPANCY_EQ(s0, s1);
	EXPECT_EQ(0, bt_present(fd, self->ns, bt_key(self->ns, 2)));

	/* reading commands work */
	EXPECT_EQ(0, bt_info(fd, &info));
	EXPECT_EQ(0, bt_region_info(fd, self->c.att[0].region_id, &ri));
	ASSERT_EQ(0, bt_lookup(fd, self->ns, &k, 1, &got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(1, hits);
	EXPECT_EQ(o[0], got);
	ASSERT_EQ(0, bt_stats(fd, &s1));
	EXPECT_EQ(1, s1.pins);
	EXPECT_EQ(0, bt_release(fd, 1, &got));

	/* mapping: read-only only */
	ro = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	EXPECT_EQ(MAP_FAILED, ro);
	EXPECT_EQ(EACCES, errno) TH_LOG("writable map of a read-only file: %s",
				       strerror(errno));
	ro = mmap(NULL, info.map_size, PROT_READ, MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, ro) TH_LOG("read-only map: %s", strerror(errno));
	EXPECT_EQ(-1, bt_check(ro + o[0], 1024, 31));
	r = mprotect(ro, info.map_size, PROT_READ | PROT_WRITE);
	EXPECT_EQ(-1, r);
	EXPECT_EQ(EACCES, errno) TH_LOG("mprotect to writable: %s",
				       strerror(errno));
	munmap(ro, info.map_size);
	close(fd);
}

/* A store through a read-only mapping faults. */
TEST_F(life, rdonly_store_faults)
{
	pid_t pid;
	int r;

	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct beluga_info info;
		volatile char *ro;
		int fd = bt_open(O_RDONLY);

		CHILD_CHECK(fd >= 0 && bt_info(fd, &info) == 0);
		ro = mmap(NULL, info.map_size, PROT_READ, MAP_SHARED, fd, 0);
		CHILD_CHECK(ro != MAP_FAILED);
		(void)ro[0];
		ro[0] = 1;	/* must raise SIGSEGV */
		_exit(0);
	}
	r = bt_wait(&self->c, pid);
	EXPECT_EQ(128 + SIGSEGV, r) TH_LOG("child status %d", r);
}

/*
 * A child allocates, publishes, pins and maps, then dies (SIGKILL or a
 * plain exit without cleaning up). Everything it owned comes back; what it
 * published stays published.
 */
static void die_with_state(struct __test_metadata *_metadata,
			   FIXTURE_DATA(life) *self, bool sigkill)
{
	struct beluga_key pk[2], ck[2];
	struct beluga_stats s0, s1, s2;
	struct beluga_region_info ri;
	uint64_t po[2];
	int ready[2], r, i;
	int32_t res;
	pid_t pid;
	char ch;

	/* two keys of the parent's for the child to pin */
	ASSERT_EQ(0, bt_alloc(self->c.fd, 2, po));
	for (i = 0; i < 2; i++) {
		pk[i] = bt_key(self->ns, 100 + i);
		ck[i] = bt_key(self->ns, 200 + i);
		ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, po[i], pk[i], &res));
		ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	ASSERT_EQ(0, pipe(ready));

	pid = bt_fork(&self->c);
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct beluga_info info;
		uint64_t o[4], got[2];
		uint32_t hits;
		char *map;
		int fd = bt_open(O_RDWR);

		CHILD_CHECK(fd >= 0 && bt_info(fd, &info) == 0);
		map = mmap(NULL, info.map_size, PROT_READ | PROT_WRITE,
			   MAP_SHARED, fd, 0);
		CHILD_CHECK(map != MAP_FAILED);
		CHILD_CHECK(bt_alloc(fd, 4, o) == 0);
		for (i = 0; i < 4; i++)
			bt_fill(map + o[i], 128, i);
		for (i = 0; i < 2; i++) {
			CHILD_CHECK(bt_publish1(fd, self->ns, o[i], ck[i],
						&res) == 0);
			CHILD_CHECK(res == BELUGA_PUBLISH_OK);
		}
		CHILD_CHECK(bt_lookup(fd, self->ns, pk, 2, got,
				      BELUGA_LOOKUP_PIN, &hits) == 0);
		CHILD_CHECK(hits == 2);
		CHILD_CHECK(bt_lookup(fd, self->ns, ck, 1, got,
				      BELUGA_LOOKUP_PIN, &hits) == 0);
		CHILD_CHECK(hits == 1);
		CHILD_CHECK(write(ready[1], "r", 1) == 1);
		if (sigkill)
			for (;;)
				pause();
		_exit(0);
	}
	close(ready[1]);
	ASSERT_EQ(1, read(ready[0], &ch, 1)) TH_LOG("child failed to set up");
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	if (sigkill) {
		EXPECT_EQ(s0.allocated_blocks + 2, s1.allocated_blocks);
		EXPECT_EQ(s0.published_blocks + 2, s1.published_blocks);
		EXPECT_EQ(s0.pins + 3, s1.pins);
		EXPECT_EQ(s0.clients + 1, s1.clients);
		ASSERT_EQ(0, kill(pid, SIGKILL));
		r = bt_wait(&self->c, pid);
		EXPECT_EQ(128 + SIGKILL, r);
	} else {
		r = bt_wait(&self->c, pid);
		EXPECT_EQ(0, r);
	}
	ASSERT_EQ(0, bt_stats(self->c.fd, &s2));
	ASSERT_STATS_CONSISTENT(s2);
	EXPECT_EQ(s0.allocated_blocks, s2.allocated_blocks)
		TH_LOG("the dead child's allocations leaked");
	EXPECT_EQ(s0.pins, s2.pins) TH_LOG("the dead child's pins leaked");
	EXPECT_EQ(s0.pinned_blocks, s2.pinned_blocks);
	EXPECT_EQ(s0.clients, s2.clients);
	EXPECT_EQ(s0.published_blocks + 2, s2.published_blocks)
		TH_LOG("what the child published must stay published");
	EXPECT_EQ(s0.free_blocks - 2, s2.free_blocks);
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, ck[0]));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, ck[1]));
	ASSERT_EQ(0, bt_region_info(self->c.fd, self->c.att[0].region_id, &ri));
	EXPECT_EQ(0, ri.mappings) TH_LOG("the dead child's mapping is counted");
	/* nothing is left that would keep the region busy */
	r = bt_detach(self->c.fd, self->c.att[0].region_id, BELUGA_DETACH_EVICT,
		      NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH after the child died: %s", strerror(-r));
}

TEST_F(life, sigkill_returns_everything)
{
	die_with_state(_metadata, self, true);
}

TEST_F(life, exit_returns_everything)
{
	die_with_state(_metadata, self, false);
}

/* A mapping holds the file: its allocations live until the munmap. */
TEST_F(life, mapping_keeps_file_alive)
{
	struct beluga_stats s0, s1;
	uint64_t o[2];
	char *p;
	int fd;

	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	p = mmap(NULL, self->c.info.map_size, PROT_READ | PROT_WRITE,
		 MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, bt_alloc(fd, 2, o));
	ASSERT_EQ(0, close(fd));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.allocated_blocks + 2, s1.allocated_blocks)
		TH_LOG("closing the fd must not release while a mapping holds the file");
	bt_fill(p + o[1], 64, 8);	/* the blocks are still ours to write */
	munmap(p, self->c.info.map_size);
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.allocated_blocks, s1.allocated_blocks);
	EXPECT_EQ(s0.clients, s1.clients);
}

/* dup() shares the file description: the last close releases. */
TEST_F(life, dup_shares_file)
{
	struct beluga_stats s0, s1;
	uint64_t o;
	int fd, fd2;

	ASSERT_EQ(0, bt_stats(self->c.fd, &s0));
	fd = bt_open(O_RDWR);
	ASSERT_LE(0, fd);
	fd2 = dup(fd);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, bt_alloc(fd, 1, &o));
	ASSERT_EQ(0, close(fd));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.allocated_blocks + 1, s1.allocated_blocks);
	EXPECT_EQ(s0.clients + 1, s1.clients);
	/* the duplicate owns it */
	EXPECT_EQ(0, bt_free(fd2, 1, &o));
	ASSERT_EQ(0, bt_alloc(fd2, 1, &o));
	ASSERT_EQ(0, close(fd2));
	ASSERT_EQ(0, bt_stats(self->c.fd, &s1));
	EXPECT_EQ(s0.allocated_blocks, s1.allocated_blocks);
	EXPECT_EQ(s0.clients, s1.clients);
}

int main(int argc, char **argv)
{
	ssize_t n;

	if (argc == 4 && !strcmp(argv[1], "--beluga-reader"))
		return reader(strtoull(argv[2], NULL, 16), atoi(argv[3]));
	n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n > 0)
		self_exe[n] = 0;
	else
		snprintf(self_exe, sizeof(self_exe), "%s", argv[0]);
	return test_harness_run(argc, argv);
}
