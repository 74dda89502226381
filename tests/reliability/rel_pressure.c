// SPDX-License-Identifier: GPL-2.0
/*
 * rel_pressure: pinned blocks stay intact while the pool is under pressure.
 *
 *   pinned_checksum      readers verify every block they pin while writers
 *                        force eviction and an admin evicts namespaces
 *                        (node region, or dax without a test node)
 *   pinned_checksum_dax  the same on a device-dax region
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h); the harness's
 * options (-l lists the tests, -t NAME runs one). See README.md.
 */
#include "rel_test.h"

/* Readers check every pinned block while writers churn the pool. */
static bool t_pinned_checksum(bool dax)
{
	int fd = bt_open(O_RDWR), nreaders = 3, nwriters = 2;
	uint64_t ns = ns_unique(dax ? 0xc5d : 0xc5);
	struct beluga_info info;
	pid_t pids[8];
	int np = 0, bad = 0;
	double end = rel_now() + (dax ? 4.0 : 6.0);

	REQUIRE(fd >= 0 && bt_info(fd, &info) == 0, "open/INFO");
	for (int i = 0; i < nreaders + nwriters + 1; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			struct rel_rng rng = { (uint64_t)i * 7919 };
			int cfd = bt_open(O_RDWR);
			uint8_t *map = rel_map(cfd, info.map_size, PROT_READ | PROT_WRITE);
			uint64_t verified = 0;

			if (cfd < 0 || !map)
				_exit(2);
			while (rel_now() < end) {
				if (i < nreaders) {
					struct beluga_key keys[8];
					uint64_t offs[8];
					uint32_t hits = 0;
					int k0 = (int)rel_below(&rng, 96);

					for (int k = 0; k < 8; k++)
						keys[k] = bt_key(ns, (uint64_t)(k0 + k) % 96);
					if (bt_lookup(cfd, ns, keys, 8, offs, BELUGA_LOOKUP_PIN,
						       &hits))
						_exit(3);
					for (int pass = 0; pass < 2; pass++) {
						for (uint32_t h = 0; h < hits; h++) {
							long w = bt_check(map + offs[h], info.block_size,
									   rel_key_seed(ns, keys[h]));
							if (w >= 0) {
								printf("# reader %d: block 0x%llx (key %d) "
								       "corrupted at word %ld while pinned\n",
								       i, (rel_ull)offs[h],
								       (k0 + (int)h) % 96, w);
								_exit(1);
							}
							verified++;
						}
						sched_yield();	/* let the writers evict */
					}
					if (hits && bt_release(cfd, hits, offs))
						_exit(4);
				} else if (i < nreaders + nwriters) {
					uint64_t off;
					int k = (int)rel_below(&rng, 96);
					struct beluga_key key = bt_key(ns, (uint64_t)k);
					int32_t res;

					if (bt_alloc(cfd, 1, &off))
						continue;	/* -ENOSPC: all pinned */
					bt_fill(map + off, info.block_size, rel_key_seed(ns, key));
					if (bt_publish1(cfd, ns, off, key, &res))
						_exit(5);
				} else {
					rel_msleep(30);
					rel_evict_ns(cfd, ns, NULL, NULL);
				}
			}
			if (i < nreaders)
				printf("# reader %d verified %llu pinned blocks\n", i,
				       (rel_ull)verified);
			fflush(stdout);
			_exit(0);
		}
		pids[np++] = pid;
	}
	for (int i = 0; i < np; i++) {
		int r = reap(pids[i]);

		if (r) {
			rel_diag("process %d exited with %d", i, r);
			bad++;
		}
	}
	REQUIRE(!bad, "a reader saw a pinned block change (or a call failed)");
	{
		struct beluga_stats s;

		bt_stats(fd, &s);
		rel_diag("evictions so far: %llu", (rel_ull)s.evictions);
	}
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	return true;
}

FIXTURE_REL(pressure);

TEST_F_TIMEOUT(pressure, pinned_checksum, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_pinned_checksum(false));
}

TEST_F_TIMEOUT(pressure, pinned_checksum_dax, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL | REL_DAX))
		return;
	REL_ASSERT(t_pinned_checksum(true));
}

TEST_HARNESS_MAIN
