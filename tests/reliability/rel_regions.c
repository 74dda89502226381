// SPDX-License-Identifier: GPL-2.0
/*
 * rel_regions: regions while they are mapped, attached and detached.
 *
 *   detach_mapped       DETACH is refused while mapped, even after close()
 *   attach_detach_race  ATTACH while another process DETACHes every slot:
 *                       documented errors only, an empty pool at the end
 *   mapping_counts      the region's mapping count equals the process's VMAs
 *                       through splits, merges, mremap, madvise and fork
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h); the harness's
 * options (-l lists the tests, -t NAME runs one). See README.md.
 */
#include "rel_test.h"

static bool t_detach_mapped(void)
{
	int fd = bt_open(O_RDWR), afd = bt_open(O_RDWR), r;
	struct beluga_region_info ri;
	uint32_t slot = UINT32_MAX;
	void *map;

	REQUIRE(fd >= 0 && afd >= 0, "open");
	for (uint32_t s = 0; s < BELUGA_MAX_REGIONS && slot == UINT32_MAX; s++)
		if (bt_region_info(afd, s, &ri) == 0)
			slot = s;
	REQUIRE(slot != UINT32_MAX, "no region");
	map = rel_map(fd, REGION, PROT_READ);
	REQUIRE(map, "mmap");
	r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == -EBUSY, "DETACH while mapped: %s (want -EBUSY)", en(r));
	close(fd);
	r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == -EBUSY, "DETACH while mapped by a closed file: %s", en(r));
	munmap(map, REGION);
	r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
	REQUIRE(r == 0, "DETACH after the last munmap: %s", en(r));
	close(afd);
	return true;
}

/*
 * ATTACH racing DETACH of the same slot: a child detaches every slot in a
 * loop while the parent attaches and detaches small node regions. The
 * kernel must not touch a region after it dropped its locks (the fuzzer
 * found ATTACH logging through a region another process had just freed:
 * KASAN slab-use-after-free); the lane's log scan catches that. Here:
 * every call answers a documented error and the pool ends empty.
 */
/* 2 MiB of the test node, or of the first dax device without one. */
static int attach_small(int fd, const char *name, struct beluga_attach *a)
{
	int r = rel_attach_node(fd, 2 * BT_MIB, BSIZE, name, a);

	if (r == -ENOENT)
		r = rel_attach_dax(fd, 0, 0, 2 * BT_MIB, BSIZE, name, a);
	return r;
}

static bool t_attach_detach_race(void)
{
	int fd = bt_open(O_RDWR), r, st, attached = 0, lost = 0;
	struct beluga_attach a;
	double end;
	pid_t pid;

	REQUIRE(fd >= 0, "open");
	REQUIRE(rel_reset_pool_fd(fd, 2000) == 0, "empty the pool first");
	r = attach_small(fd, "race-probe", &a);
	REQUIRE(r == 0, "ATTACH of a small region: %s", en(r));
	REQUIRE(rel_detach(fd, a.region_id, BELUGA_DETACH_EVICT) == 0, "DETACH");
	pid = fork();
	REQUIRE(pid >= 0, "fork");
	if (pid == 0) {
		end = rel_now() + 3.0;
		while (rel_now() < end)
			for (uint32_t s = 0; s < 4; s++) {
				r = rel_detach(fd, s, BELUGA_DETACH_EVICT);
				if (r && r != -ENOENT && r != -EBUSY)
					_exit(1);
			}
		_exit(0);
	}
	end = rel_now() + 3.0;
	while (rel_now() < end) {
		r = attach_small(fd, "race", &a);
		if (r == -EBUSY)	/* still detaching the last one */
			continue;
		REQUIRE(r == 0, "ATTACH during the DETACH loop: %s", en(r));
		attached++;
		r = rel_detach(fd, a.region_id, BELUGA_DETACH_EVICT);
		if (r == -ENOENT)
			lost++;		/* the child was first */
		else
			REQUIRE(r == 0, "DETACH of the parent's region: %s", en(r));
	}
	REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		"the detaching child saw an undocumented error");
	REQUIRE(nr_regions(fd) == 0, "%u region(s) left after the race", nr_regions(fd));
	rel_diag("attach-detach-race: %d attaches, %d detached by the other process first",
		 attached, lost);
	close(fd);
	return true;
}

/* VMAs of this process that map the pool device, from /proc/self/maps. */
static int maps_of_dev(void)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, bt_dev_path()))
			n++;
	fclose(f);
	return n;
}

/*
 * The region's mapping count follows every VMA operation: splits by munmap,
 * mprotect and madvise, merges back, mremap (move, grow, shrink,
 * MREMAP_DONTUNMAP), fork. It must equal the number of VMAs at each step and
 * reach zero, so that DETACH works again.
 */
static bool t_mapping_counts(void)
{
	int fd = bt_open(O_RDWR), afd = bt_open(O_RDWR), step = 0, r;
	const size_t len = 8 * BT_PAGE;
	uint8_t *p, *q;
	pid_t pid;

	REQUIRE(fd >= 0 && afd >= 0, "open");
#define COUNT_OK(what) do {							\
		int m = mappings0(afd), v = maps_of_dev();			\
		step++;								\
		REQUIRE(m == v, "step %d (%s): region counts %d mappings, the "	\
			"process has %d VMAs of %s", step, what, m, v, bt_dev_path()); \
	} while (0)
	p = rel_map(fd, len, PROT_READ | PROT_WRITE);
	REQUIRE(p, "mmap");
	COUNT_OK("mmap");
	REQUIRE(mprotect(p + 2 * BT_PAGE, BT_PAGE, PROT_READ) == 0, "mprotect");
	COUNT_OK("mprotect splits one page out");
	REQUIRE(mprotect(p + 2 * BT_PAGE, BT_PAGE, PROT_READ | PROT_WRITE) == 0, "mprotect");
	COUNT_OK("mprotect back (may merge)");
	REQUIRE(madvise(p + 4 * BT_PAGE, BT_PAGE, MADV_DONTFORK) == 0, "madvise");
	COUNT_OK("MADV_DONTFORK splits");
	{
		/* the count is the region's, over both processes */
		int vp = maps_of_dev();

		pid = fork();
		if (pid == 0)
			_exit(mappings0(afd) == vp + maps_of_dev() ? 0 : 1);
		REQUIRE(reap(pid) == 0, "in the forked child the count was not the parent's "
			"%d VMAs plus the child's (MADV_DONTFORK page not copied)", vp);
	}
	COUNT_OK("after the child exited");
	REQUIRE(madvise(p + 4 * BT_PAGE, BT_PAGE, MADV_DOFORK) == 0, "madvise");
	COUNT_OK("MADV_DOFORK (may merge)");
	REQUIRE(madvise(p, len, MADV_DONTNEED) == 0, "MADV_DONTNEED");
	COUNT_OK("MADV_DONTNEED");
	q = mremap(p + 6 * BT_PAGE, 2 * BT_PAGE, BT_PAGE, 0);
	REQUIRE(q != MAP_FAILED, "mremap shrink: %s", strerror(errno));
	COUNT_OK("mremap shrinks the tail");
	q = mremap(p, BT_PAGE, 3 * BT_PAGE, MREMAP_MAYMOVE);
	REQUIRE(q != MAP_FAILED, "mremap grow+move: %s", strerror(errno));
	COUNT_OK("mremap moves and grows the first page");
	{
		void *d = mremap(p + BT_PAGE, BT_PAGE, BT_PAGE,
				 MREMAP_MAYMOVE | 4 /* MREMAP_DONTUNMAP */);

		COUNT_OK(d == MAP_FAILED ? "MREMAP_DONTUNMAP (refused)" : "MREMAP_DONTUNMAP");
		if (d != MAP_FAILED)
			munmap(d, BT_PAGE);
		COUNT_OK("munmap of the DONTUNMAP copy");
	}
	munmap(q, 3 * BT_PAGE);
	COUNT_OK("munmap of the moved part");
	munmap(p, len);
	COUNT_OK("munmap of the rest");
	REQUIRE(mappings0(afd) == 0, "count %d after every VMA is gone", mappings0(afd));
	close(fd);
	{
		struct beluga_region_info ri;
		uint32_t slot = 0;

		while (slot < BELUGA_MAX_REGIONS && bt_region_info(afd, slot, &ri))
			slot++;
		r = rel_detach(afd, slot, BELUGA_DETACH_EVICT);
		REQUIRE(r == 0, "DETACH after every mapping is gone: %s", en(r));
	}
	close(afd);
#undef COUNT_OK
	return true;
}

FIXTURE_REL(regions);

TEST_F_TIMEOUT(regions, detach_mapped, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_detach_mapped());
}

TEST_F_TIMEOUT(regions, attach_detach_race, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, 0))
		return;
	REL_ASSERT(t_attach_detach_race());
}

TEST_F_TIMEOUT(regions, mapping_counts, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_mapping_counts());
}

TEST_HARNESS_MAIN
