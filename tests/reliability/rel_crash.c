// SPDX-License-Identifier: GPL-2.0
/*
 * rel_crash: processes that die mid-operation, and who owns what.
 *
 *   kill_alloc      SIGKILL between ALLOC and PUBLISH leaks nothing
 *   kill_batch      SIGKILL at random points of batch loops leaks nothing
 *   fork_ownership  a child shares the parent's file description: its
 *                   allocations and pins; everything returns only when the
 *                   last reference (fd or mapping, in any process) is gone
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h); the harness's
 * options (-l lists the tests, -t NAME runs one). See README.md.
 */
#include "rel_test.h"

static bool t_kill_alloc(void)
{
	int fd = bt_open(O_RDWR), p[2];
	struct beluga_stats s0, s;
	char c;
	pid_t pid;

	REQUIRE(fd >= 0 && bt_stats(fd, &s0) == 0, "open/STATS");
	REQUIRE(pipe(p) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		int cfd = bt_open(O_RDWR);
		uint64_t offs[8];
		uint8_t *map;

		if (cfd < 0 || bt_alloc(cfd, 8, offs))
			_exit(1);
		map = rel_map(cfd, offs[7] + BSIZE, PROT_READ | PROT_WRITE);
		if (!map)
			_exit(2);
		for (int i = 0; i < 8; i++)
			bt_fill(map + offs[i], BSIZE, i);
		/* written, not yet published: now die */
		if (write(p[1], "x", 1) != 1)
			_exit(3);
		pause();
		_exit(0);
	}
	close(p[1]);
	REQUIRE(read(p[0], &c, 1) == 1, "the child did not get to ALLOC (status %d)",
		reap(pid));
	close(p[0]);
	REQUIRE(bt_stats(fd, &s) == 0 && s.allocated_blocks == s0.allocated_blocks + 8 &&
		s.clients == s0.clients + 1, "the child's 8 blocks are not allocated");
	kill(pid, SIGKILL);
	REQUIRE(reap(pid) == 128 + SIGKILL, "child status");
	if (!quiet(fd, s0.clients, "after SIGKILL between ALLOC and PUBLISH"))
		return false;
	REQUIRE(bt_stats(fd, &s) == 0 && s.free_blocks == s0.free_blocks,
		"free blocks %llu, was %llu", (rel_ull)s.free_blocks, (rel_ull)s0.free_blocks);
	close(fd);
	return true;
}

static bool t_kill_batch(void)
{
	int fd = bt_open(O_RDWR);
	struct beluga_stats s0;
	struct rel_rng rng = { 0xba7c4ULL };
	uint64_t ns = ns_unique(0xba7c4);

	REQUIRE(fd >= 0 && bt_stats(fd, &s0) == 0, "open/STATS");
	for (int round = 0; round < 24; round++) {
		pid_t pid = fork();

		if (pid == 0) {
			int cfd = bt_open(O_RDWR);
			struct rel_rng r2 = { (uint64_t)round };
			struct beluga_publish_item it[64];
			struct beluga_key keys[64];
			uint64_t offs[64], pins[64];
			uint32_t hits;

			for (;;) {
				uint32_t n = 16 + (uint32_t)rel_below(&r2, 48);

				if (bt_alloc(cfd, n, offs) == 0) {
					memset(it, 0, sizeof(it));
					for (uint32_t i = 0; i < n; i++) {
						it[i].offset = offs[i];
						it[i].key = bt_key(ns, rel_below(&r2, 512));
					}
					bt_publish(cfd, ns, it, n, NULL);
				}
				for (uint32_t i = 0; i < 64; i++)
					keys[i] = bt_key(ns, rel_below(&r2, 512));
				if (bt_lookup(cfd, ns, keys, 64, pins, BELUGA_LOOKUP_PIN,
					       &hits) == 0 && hits && rel_one_in(&r2, 2))
					bt_release(cfd, hits, pins);
			}
		}
		rel_msleep(1 + (unsigned int)rel_below(&rng, 60));
		kill(pid, SIGKILL);
		REQUIRE(reap(pid) == 128 + SIGKILL, "batch child did not die by SIGKILL");
		if (!quiet(fd, s0.clients, "after SIGKILL during batch calls"))
			return false;
	}
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	return true;
}

static bool t_fork_ownership(void)
{
	int fd = bt_open(O_RDWR), afd = bt_open(O_RDWR), r;
	struct beluga_stats s0, s;
	uint64_t a[2], pin, ns = ns_unique(0xf0), base;
	struct beluga_key key = bt_key(ns, 1);
	uint32_t hits;
	uint8_t *map;
	int32_t res;
	pid_t pid;

	REQUIRE(fd >= 0 && afd >= 0 && bt_stats(afd, &s0) == 0, "open/STATS");
	base = s0.clients - 1;		/* without fd: afd and whoever else */
	/* a published key, pinned by fd; two blocks allocated by fd */
	REQUIRE(bt_alloc(fd, 1, &pin) == 0, "ALLOC");
	map = rel_map(fd, REGION, PROT_READ | PROT_WRITE);
	REQUIRE(map, "mmap: %s", strerror(errno));
	bt_fill(map + pin, BSIZE, 0xf0f0);
	REQUIRE(bt_publish1(fd, ns, pin, key, &res) == 0 && res == 0, "PUBLISH");
	REQUIRE(bt_lookup(fd, ns, &key, 1, &pin, BELUGA_LOOKUP_PIN, &hits) == 0 &&
		hits == 1, "LOOKUP+PIN");
	REQUIRE(bt_alloc(fd, 2, a) == 0, "ALLOC 2");
	REQUIRE(mappings0(afd) == 1, "mappings %d, want 1", mappings0(afd));

	/* 1. the child shares the description: it may free and release them */
	pid = fork();
	if (pid == 0) {
		uint64_t b;
		int own;

		if (mappings0(fd) != 2)		/* the VMA was copied: vm_open */
			_exit(10);
		if (bt_check(map + pin, BSIZE, 0xf0f0) >= 0)
			_exit(11);
		if (bt_alloc(fd, 1, &b))	/* stays with the shared file */
			_exit(14);
		if (bt_free(fd, 1, &a[0]))	/* the parent's allocation */
			_exit(12);
		if (bt_release(fd, 1, &pin))	/* the parent's pin */
			_exit(13);
		/* a fresh open is a different owner */
		own = bt_open(O_RDWR);
		if (own < 0 || bt_free(own, 1, &a[1]) != -EINVAL)
			_exit(15);
		close(own);
		/* hand b to the parent through the exit status */
		_exit(b / BSIZE < 100 ? 100 + (int)(b / BSIZE) : 99);
	}
	r = reap(pid);
	REQUIRE(r >= 99, "fork child step failed with status %d (10: mapping count, 11: "
		"bytes, 12: FREE of parent's block, 13: RELEASE of parent's pin, 14: ALLOC, "
		"15: a new open could free the parent's block)", r);
	REQUIRE(mappings0(afd) == 1, "mappings after the child's exit: %d, want 1",
		mappings0(afd));
	REQUIRE(bt_stats(afd, &s) == 0, "STATS");
	/* a[1] and the child's block are still allocated to the shared file */
	REQUIRE(s.allocated_blocks == s0.allocated_blocks + 2 && s.pins == s0.pins,
		"after the child: allocated %llu (want %llu), pins %llu (want %llu)",
		(rel_ull)s.allocated_blocks, (rel_ull)s0.allocated_blocks + 2,
		(rel_ull)s.pins, (rel_ull)s0.pins);
	REQUIRE(bt_free(fd, 1, &a[0]) == -EINVAL, "the child's FREE did not stick");
	REQUIRE(bt_release(fd, 1, &pin) == -EINVAL, "the child's RELEASE did not stick");
	if (r >= 100) {
		uint64_t b = (uint64_t)(r - 100) * BSIZE;

		REQUIRE(bt_free(fd, 1, &b) == 0, "the parent cannot FREE the child's "
			"allocation 0x%llx", (rel_ull)b);
		REQUIRE(bt_alloc(fd, 1, &b) == 0, "ALLOC");
	}

	/* 2. the last reference decides: parent closes, a child keeps it open */
	int p1[2], p2[2];
	char c;

	REQUIRE(pipe(p1) == 0 && pipe(p2) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		close(p1[0]);
		close(p2[1]);
		if (write(p1[1], "r", 1) != 1)
			_exit(1);
		if (read(p2[0], &c, 1) != 1)	/* wait for the parent to close */
			_exit(2);
		_exit(0);	/* the last reference goes with us */
	}
	close(p1[1]);
	close(p2[0]);
	REQUIRE(read(p1[0], &c, 1) == 1, "child");
	munmap(map, REGION);
	close(fd);
	rel_msleep(50);
	REQUIRE(bt_stats(afd, &s) == 0 && s.allocated_blocks == s0.allocated_blocks + 2 &&
		s.clients == base + 1,
		"the parent closed, a child still holds the file: allocated %llu (want "
		"%llu), clients %llu (want %llu)", (rel_ull)s.allocated_blocks,
		(rel_ull)s0.allocated_blocks + 2, (rel_ull)s.clients, (rel_ull)base + 1);
	REQUIRE(write(p2[1], "x", 1) == 1, "pipe");
	REQUIRE(reap(pid) == 0, "child 2");
	close(p1[0]);
	close(p2[1]);
	if (!quiet(afd, base, "after the last reference"))
		return false;

	/* 3. a mapping alone keeps the file (and its blocks) alive */
	fd = bt_open(O_RDWR);
	REQUIRE(fd >= 0 && bt_alloc(fd, 2, a) == 0, "ALLOC");
	map = rel_map(fd, REGION, PROT_READ);
	REQUIRE(map, "mmap");
	close(fd);
	REQUIRE(bt_stats(afd, &s) == 0 && s.allocated_blocks == s0.allocated_blocks + 2 &&
		s.clients == base + 1,
		"closed fd with a live mapping: allocated %llu (want %llu), clients %llu",
		(rel_ull)s.allocated_blocks, (rel_ull)s0.allocated_blocks + 2,
		(rel_ull)s.clients);
	munmap(map, REGION);
	if (!quiet(afd, base, "after munmap of the last mapping"))
		return false;
	rel_evict_ns(afd, ns, NULL, NULL);
	close(afd);
	return true;
}

FIXTURE_REL(crash);

TEST_F_TIMEOUT(crash, kill_alloc, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_kill_alloc());
}

TEST_F_TIMEOUT(crash, kill_batch, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_kill_batch());
}

TEST_F_TIMEOUT(crash, fork_ownership, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_fork_ownership());
}

TEST_HARNESS_MAIN
