// SPDX-License-Identifier: GPL-2.0
/*
 * Microbenchmark of the core's lookup path, single-threaded, no
 * sanitizers: ns per key for pools of 1K, 16K and 256K published blocks,
 * as JSON lines on stdout (one per case), for the benchmark suite.
 *
 * Keys are small integers in key.lo with hi = 0, like the hash ids of
 * the traces. Each LOOKUP asks for a run of 'batch' consecutive keys
 * starting at a random published one, so every key hits (modes "probe",
 * "offsets" and "pin"; "pin" includes the RELEASE of the pins), or for
 * keys never published (mode "miss", one key per call).
 *
 *   bench_core [min_seconds_per_case]   (default 0.2)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "bel_core.h"

#define BS	4096ULL
#define BATCH	64

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "bench_core: %s: %d\n", what, err);
	exit(1);
}

static void fill(struct bel_client *c, u32 nblocks)
{
	static u64 offs[BELUGA_MAX_BATCH];
	static struct beluga_publish_item items[BELUGA_MAX_BATCH];
	u32 i, j, n, ok, ex, fail;
	int err;

	for (i = 0; i < nblocks; i += n) {
		n = nblocks - i < BELUGA_MAX_BATCH ? nblocks - i :
		    BELUGA_MAX_BATCH;
		err = bel_alloc(c, n, offs);
		if (err)
			die("alloc", err);
		for (j = 0; j < n; j++) {
			items[j].offset = offs[j];
			items[j].key.lo = i + j;
			items[j].key.hi = 0;
		}
		err = bel_publish(c, 1, n, items, &ok, &ex, &fail);
		if (err || ok != n)
			die("publish", err ? err : -1);
	}
}

enum mode { PROBE, OFFSETS, PIN, MISS };
static const char *const mode_name[] = { "probe", "offsets", "pin", "miss" };

static void run(struct bel_client *c, u32 nblocks, enum mode mode,
		double min_s)
{
	struct beluga_key keys[BATCH];
	u64 offs[BATCH];
	u32 batch = mode == MISS ? 1 : BATCH;
	u64 calls = 0, nkeys = 0, hits_total = 0;
	unsigned int seed = 42;
	double t0, t;
	u32 i, hits;
	int err;

	t0 = now();
	do {
		/* 256 calls between clock reads keep the clock out of it. */
		for (i = 0; i < 256; i++) {
			u32 start = (u32)rand_r(&seed) % (nblocks - batch + 1);
			u32 k;

			for (k = 0; k < batch; k++) {
				keys[k].lo = mode == MISS ? nblocks + start + k :
					     start + k;
				keys[k].hi = 0;
			}
			err = bel_lookup(c, 1, batch, keys, mode == PIN,
					 mode == OFFSETS || mode == PIN ?
					 offs : NULL, &hits);
			if (err)
				die("lookup", err);
			if (mode == PIN && hits) {
				err = bel_release(c, hits, offs);
				if (err)
					die("release", err);
			}
			hits_total += hits;
			nkeys += batch;
			calls++;
		}
		t = now() - t0;
	} while (t < min_s);
	printf("{\"bench\":\"core_lookup\",\"mode\":\"%s\",\"blocks\":%u,"
	       "\"batch\":%u,\"calls\":%llu,\"keys\":%llu,"
	       "\"hit_rate\":%.3f,\"ns_per_key\":%.1f,\"ns_per_call\":%.1f}\n",
	       mode_name[mode], nblocks, batch, (unsigned long long)calls,
	       (unsigned long long)nkeys, (double)hits_total / nkeys,
	       t * 1e9 / nkeys, t * 1e9 / calls);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const u32 sizes[] = { 1024, 16384, 262144 };
	double min_s = argc > 1 ? atof(argv[1]) : 0.2;
	u32 i;

	for (i = 0; i < 3; i++) {
		struct bel_pool *pool = calloc(1, sizeof(*pool));
		struct bel_client *c;
		u64 first;
		u32 slot, n;
		int err, mode;

		if (!pool)
			die("calloc", -ENOMEM);
		bel_pool_init(pool);
		err = bel_pool_add_region(pool, sizes[i] * BS, BS, &slot,
					  &first, &n);
		if (err)
			die("add_region", err);
		c = bel_client_new(pool);
		if (!c)
			die("client", -ENOMEM);
		fill(c, sizes[i]);
		for (mode = PROBE; mode <= MISS; mode++)
			run(c, sizes[i], mode, min_s);
		bel_client_release(c);
		bel_pool_destroy(pool);
		free(pool);
	}
	return 0;
}
