// SPDX-License-Identifier: GPL-2.0
/*
 * belprobe: facts about the portable core that no timing loop shows.
 *
 *   belprobe [--env E] [--out DIR] [--quick] [--calls N] [--lens 4096]
 *
 * 1. Lock hold times. The core is built here with every pthread mutex call
 *    wrapped (lockwrap.h), so each hold of the pool lock (bel_pool.lock,
 *    a spinlock in the module), of a client's mutex, and of any other
 *    spinlock (a client's LRU log, the LRU's shards) is timed. For LOOKUP of
 *    4096 keys (count-only and pinned), RELEASE of 4096 and ALLOC of 4096
 *    on a full pool (each evicting 4096) + PUBLISH of 4096, it records the
 *    longest hold of each lock in each call: median, min and max over
 *    --calls calls (default 31). This is the "before" figure for a read
 *    path that does not serialise on one lock (issue 11).
 * 2. The pool lock's longest hold in an evicting ALLOC (second review,
 *    findings 3 and 4): with 1, 100 and 5,000 clients (--quick: 1 and 100)
 *    whose LRU logs each hold 1,023 entries, and on a pool of 262,144
 *    blocks all pinned (the first ALLOC, which parks them, and the next).
 *    The figure is bounded by design whatever the count; the entries
 *    merged and blocks looked at are printed beside it.
 * 3. The kernel's metadata bytes per block: sizeof(struct bel_block) plus
 *    the index's bucket array (a power of two at least the number of
 *    blocks, a struct bel_bucket each) per block, for pools of 1K to 256K blocks,
 *    printed with the derivation. The module compiles the same header, so
 *    these are its sizes on this architecture.
 *
 * Runs on the host; one thread, pinned, so that a hold is the work done
 * under the lock plus whatever preemption the host inflicts (median taken).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bel_core.h"
#include "core_publish.h"

/* ---- the timing wrappers -------------------------------------------- */

#define HELD_MAX 8

static struct {
	pthread_mutex_t *m;
	u64 t0;
} held[HELD_MAX];
static int nheld;

/* Longest hold since the last reset: the pool lock, the mutex, the rest. */
static pthread_mutex_t *watch_pool, *watch_client;
static u64 max_pool, max_client, max_other;

int lh_lock(pthread_mutex_t *m)
{
	int ret = (pthread_mutex_lock)(m);

	if (!ret && nheld < HELD_MAX) {
		held[nheld].m = m;
		held[nheld].t0 = now_ns();
		nheld++;
	}
	return ret;
}

int lh_unlock(pthread_mutex_t *m)
{
	u64 t = now_ns();
	int i;

	for (i = nheld - 1; i >= 0; i--) {
		if (held[i].m != m)
			continue;
		t -= held[i].t0;
		if (m == watch_pool && t > max_pool)
			max_pool = t;
		if (m == watch_client && t > max_client)
			max_client = t;
		if (m != watch_pool && m != watch_client && t > max_other)
			max_other = t;
		held[i] = held[--nheld];
		break;
	}
	return (pthread_mutex_unlock)(m);
}

/* ---- lock holds -------------------------------------------------------- */

#define PROBE_NS 5
#define PROBE_TAG 0x9206EULL

enum { P_COUNT, P_PIN, P_RELEASE, P_ALLOC_PUB, NR_P };
static const char *pname[NR_P] = { "lookup_count", "lookup_pin", "release",
				   "alloc_publish" };

static void rec_three(const char *key, double *v, int n)
{
	char k[64];

	rec_num(key, median(v, n));
	snprintf(k, sizeof(k), "%s_min", key);
	rec_num(k, v[0]);
	snprintf(k, sizeof(k), "%s_max", key);
	rec_num(k, v[n - 1]);
}

static void lock_holds(u32 len, int calls)
{
	u64 nblocks = 65536;
	struct bel_pool *pool = core_pool_new(nblocks, 4096);
	struct bel_client *c = bel_client_new(pool);
	struct beluga_key *keys = xcalloc(len, sizeof(*keys));
	struct beluga_key *fresh = xcalloc(len, sizeof(*fresh));
	u64 *offs = xcalloc(len, sizeof(u64)), *aoffs = xcalloc(len, sizeof(u64));
	struct beluga_publish_item *res = xcalloc(len, sizeof(*res));
	double vp[NR_P][64], vc[NR_P][64], vo[NR_P][64];
	u64 i, ctr = 0, filled = 0;
	u32 ok, ex, fail, hits;
	int k, p;

	watch_pool = &pool->lock;
	watch_client = &c->mutex;
	/* The chain, then fill the pool so that every ALLOC evicts. */
	while (filled < nblocks) {
		u32 n = nblocks - filled > len ? len : (u32)(nblocks - filled);

		if (bel_alloc(c, n, aoffs))
			die("probe: ALLOC while filling");
		for (i = 0; i < n; i++)
			fresh[i] = mkkey(PROBE_TAG, filled + i);
		if (bench_core_publish(c, PROBE_NS, n, aoffs, fresh, res, &ok,
				       &ex, &fail) || ok != n)
			die("probe: PUBLISH while filling");
		filled += n;
	}
	ctr = filled;
	for (k = 0; k < calls; k++) {
		/* The chain: the most recently published keys, refreshed. */
		for (i = 0; i < len; i++)
			keys[i] = mkkey(PROBE_TAG, ctr - len + i);
		for (p = 0; p < NR_P; p++) {
			int ret = 0;

			max_pool = max_client = max_other = 0;
			switch (p) {
			case P_COUNT:
				ret = bel_lookup(c, PROBE_NS, len, keys, false,
						 NULL, &hits);
				break;
			case P_PIN:
				ret = bel_lookup(c, PROBE_NS, len, keys, true,
						 offs, &hits);
				break;
			case P_RELEASE:
				ret = bel_release(c, len, offs);
				break;
			case P_ALLOC_PUB:
				ret = bel_alloc(c, len, aoffs);
				for (i = 0; !ret && i < len; i++)
					fresh[i] = mkkey(PROBE_TAG, ctr++);
				if (!ret)
					ret = bench_core_publish(c, PROBE_NS,
							len, aoffs, fresh, res,
							&ok, &ex, &fail);
				break;
			}
			if (ret || ((p == P_COUNT || p == P_PIN) && hits != len))
				die("probe: %s of %u failed (%d, hits %u)",
				    pname[p], len, ret, hits);
			vp[p][k] = (double)max_pool;
			vc[p][k] = (double)max_client;
			vo[p][k] = (double)max_other;
		}
	}
	printf("\n== lock holds (%s): longest hold per call, %d calls, pool of %llu blocks, %u keys ==\n",
	       opt.env, calls, (unsigned long long)nblocks, len);
	printf("%-16s %12s %12s %12s   %14s %14s\n", "operation",
	       "pool lock ns", "(min", "max)", "client mutex ns",
	       "other locks ns");
	for (p = 0; p < NR_P; p++) {
		rec_begin("lockhold");
		rec_str("backend", "core");
		rec_str("op", pname[p]);
		rec_int("n", len);
		rec_int("blocks", (long long)nblocks);
		rec_int("runs", calls);
		rec_three("pool_lock_ns", vp[p], calls);
		rec_three("client_mutex_ns", vc[p], calls);
		rec_three("other_lock_ns", vo[p], calls);
		rec_end();
		printf("%-16s %12.0f %12.0f %12.0f   %14.0f %14.0f\n", pname[p],
		       median(vp[p], calls), vp[p][0], vp[p][calls - 1],
		       median(vc[p], calls), median(vo[p], calls));
	}
	bel_client_release(c);
	core_pool_free(pool);
	free(keys);
	free(fresh);
	free(offs);
	free(aoffs);
	free(res);
}

/* ---- eviction's holds -------------------------------------------------- */

#define EVICT_NS 6
#define LOG_FILL (BEL_LRU_LOG - 1)	/* a log that has not merged itself */

/* Publish keys 0..n of EVICT_NS through @c. */
static void evict_fill(struct bel_client *c, u64 n)
{
	static u64 offs[BELUGA_MAX_BATCH];
	static struct beluga_key keys[BELUGA_MAX_BATCH];
	static struct beluga_publish_item res[BELUGA_MAX_BATCH];
	u64 done, i;
	u32 ok, ex, fail;

	for (done = 0; done < n; done += i) {
		u32 b = n - done > BELUGA_MAX_BATCH ? BELUGA_MAX_BATCH :
						      (u32)(n - done);

		if (bel_alloc(c, b, offs))
			die("probe: ALLOC while filling");
		for (i = 0; i < b; i++)
			keys[i] = mkkey(PROBE_TAG, done + i);
		if (bench_core_publish(c, EVICT_NS, b, offs, keys, res, &ok,
				       &ex, &fail) || ok != b)
			die("probe: PUBLISH while filling");
	}
}

/* LOOKUP+PIN keys 0..n (n <= BELUGA_MAX_BATCH) into @offs. */
static void evict_pin(struct bel_client *c, u64 first, u32 n, u64 *offs)
{
	static struct beluga_key keys[BELUGA_MAX_BATCH];
	u32 i, hits;

	for (i = 0; i < n; i++)
		keys[i] = mkkey(PROBE_TAG, first + i);
	if (bel_lookup(c, EVICT_NS, n, keys, true, offs, &hits) || hits != n)
		die("probe: LOOKUP+PIN of %u: %u hits", n, hits);
}

static void evict_rec(const char *what, u64 clients, u64 entries,
		      u64 blocks, double *v, int n)
{
	rec_begin("evicthold");
	rec_str("backend", "core");
	rec_str("case", what);
	rec_int("clients", (long long)clients);
	rec_int("log_entries", (long long)entries);
	rec_int("blocks", (long long)blocks);
	rec_int("runs", n);
	rec_three("pool_lock_ns", v, n);
	rec_end();
	printf("%-22s %8llu %10llu %8llu %12.0f %12.0f %12.0f\n", what,
	       (unsigned long long)clients, (unsigned long long)entries,
	       (unsigned long long)blocks, median(v, n), v[0], v[n - 1]);
}

static void eviction_holds(int rounds)
{
	static const u64 fleet[] = { 1, 100, 5000 };
	u64 nblocks = 2048, pinned = 262144, i;
	int f, k, nfleet = opt.quick ? 2 : 3;
	u64 *offs = xcalloc(pinned, sizeof(u64)), off;
	double v[2][64];

	printf("\n== the pool lock's longest hold in an evicting ALLOC (%s), %d rounds ==\n",
	       opt.env, rounds);
	printf("%-22s %8s %10s %8s %12s %12s %12s\n", "case", "clients",
	       "log ents", "blocks", "hold ns", "(min", "max)");
	for (f = 0; f < nfleet; f++) {
		struct bel_pool *pool = core_pool_new(nblocks, 4096);
		struct bel_client *w = bel_client_new(pool);
		struct bel_client **cl = xcalloc(fleet[f], sizeof(*cl));

		watch_pool = &pool->lock;
		watch_client = NULL;
		evict_fill(w, nblocks);
		for (i = 0; i < fleet[f]; i++)
			if (!(cl[i] = bel_client_new(pool)))
				die("probe: out of memory at client %llu",
				    (unsigned long long)i);
		for (k = 0; k < rounds; k++) {
			/* Each log fills with the same LOG_FILL keys. */
			for (i = 0; i < fleet[f]; i++) {
				evict_pin(cl[i], 0, LOG_FILL, offs);
				if (bel_release(cl[i], LOG_FILL, offs))
					die("probe: RELEASE");
			}
			max_pool = 0;
			if (bel_alloc(w, 1, &off) || bel_free(w, 1, &off))
				die("probe: evicting ALLOC");
			v[0][k] = (double)max_pool;
		}
		evict_rec("merge_logs", fleet[f], fleet[f] * LOG_FILL, nblocks,
			  v[0], rounds);
		for (i = 0; i < fleet[f]; i++)
			bel_client_release(cl[i]);
		bel_client_release(w);
		core_pool_free(pool);
		free(cl);
	}
	for (k = 0; k < rounds; k++) {
		struct bel_pool *pool = core_pool_new(pinned, 4096);
		struct bel_client *w = bel_client_new(pool);
		struct bel_client *r = bel_client_new(pool);

		watch_pool = &pool->lock;
		evict_fill(w, pinned);
		for (i = 0; i < pinned; i += BELUGA_MAX_BATCH)
			evict_pin(r, i, BELUGA_MAX_BATCH, offs + i);
		max_pool = 0;
		if (bel_alloc(w, 1, &off) != -ENOSPC)
			die("probe: ALLOC on an all-pinned pool did not fail");
		v[0][k] = (double)max_pool;
		max_pool = 0;
		if (bel_alloc(w, 1, &off) != -ENOSPC)
			die("probe: ALLOC on an all-pinned pool did not fail");
		v[1][k] = (double)max_pool;
		bel_client_release(r);
		bel_client_release(w);
		core_pool_free(pool);
	}
	evict_rec("all_pinned_first", 2, 0, pinned, v[0], rounds);
	evict_rec("all_pinned_next", 2, 0, pinned, v[1], rounds);
	watch_pool = NULL;
	free(offs);
}

/* ---- bytes per block ------------------------------------------------- */

static void bytes_per_block(void)
{
	static const u64 sizes[] = { 1024, 16384, 262144, 4194304 };
	size_t i;

	printf("\n== the module's metadata per block (struct sizes of this build, x86-64) ==\n");
	/* the fields from the struct itself, so the text cannot go stale */
	printf("struct bel_block: %zu bytes, %zu-byte aligned (ns %zu, key %zu, seq %zu, hash_next %zu, "
	       "pins %zu,\n                  state/in_lru/retired/pad 4 x %zu, used %zu, owner %zu, "
	       "prev/next 2 x %zu)\n",
	       sizeof(struct bel_block), _Alignof(struct bel_block),
	       sizeof(((struct bel_block *)0)->ns), sizeof(((struct bel_block *)0)->key),
	       sizeof(((struct bel_block *)0)->seq), sizeof(((struct bel_block *)0)->hash_next),
	       sizeof(((struct bel_block *)0)->pins), sizeof(((struct bel_block *)0)->state),
	       sizeof(((struct bel_block *)0)->used), sizeof(((struct bel_block *)0)->owner),
	       sizeof(((struct bel_block *)0)->prev));
	printf("index: one struct bel_bucket (%zu bytes: the chain's head and a copy of its key) per bucket,\n"
	       "       buckets = the power of two >= blocks (pool.c)\n", sizeof(struct bel_bucket));
	printf("%10s %10s %12s %14s %16s\n", "blocks", "buckets", "block B", "bucket B/block",
	       "total B/block");
	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		struct bel_pool *p = core_pool_new(sizes[i], 4096);
		double per = (double)p->nr_buckets * sizeof(struct bel_bucket) / sizes[i];

		printf("%10llu %10u %12zu %14.2f %16.2f\n",
		       (unsigned long long)sizes[i], p->nr_buckets,
		       sizeof(struct bel_block), per,
		       sizeof(struct bel_block) + per);
		rec_begin("memory");
		rec_int("blocks", (long long)sizes[i]);
		rec_int("buckets", p->nr_buckets);
		rec_int("block_struct_bytes", (long long)sizeof(struct bel_block));
		rec_int("bucket_struct_bytes", (long long)sizeof(struct bel_bucket));
		rec_num("bucket_bytes_per_block", per);
		rec_num("bytes_per_block", sizeof(struct bel_block) + per);
		rec_num("of_4k_block", (sizeof(struct bel_block) + per) / 4096);
		rec_num("of_2m_block", (sizeof(struct bel_block) + per) / (2 << 20));
		rec_end();
		core_pool_free(p);
	}
	printf("not per block: struct bel_pool (%zu B), and per client a pin table of 8 bytes per slot\n"
	       "(a power of two >= twice the distinct blocks it pins) and struct bel_client (%zu B)\n",
	       sizeof(struct bel_pool), sizeof(struct bel_client));
}

int main(int argc, char **argv)
{
	int i, calls = 31;
	u64 lens[4] = { 4096 };
	int nlens = 1, l;
	cpu_set_t set;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			opt.quick = true;
			calls = 5;
		} else if (i + 1 < argc && !strcmp(argv[i], "--env")) {
			opt.env = argv[++i];
		} else if (i + 1 < argc && !strcmp(argv[i], "--out")) {
			opt.out_dir = argv[++i];
		} else if (i + 1 < argc && !strcmp(argv[i], "--calls")) {
			calls = atoi(argv[++i]);
		} else if (i + 1 < argc && !strcmp(argv[i], "--lens")) {
			nlens = parse_list(argv[++i], lens, 4);
		} else {
			die("usage: belprobe [--env E] [--out DIR] [--quick] [--calls N] [--lens 4096]");
		}
	}
	if (calls < 1 || calls > 64)
		die("--calls: 1..64");
	if (!sched_getaffinity(0, sizeof(set), &set)) {
		int cpu;

		for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set); cpu++)
			;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		sched_setaffinity(0, sizeof(set), &set);
	}
	out_open("probe");
	for (l = 0; l < nlens; l++)
		lock_holds((u32)lens[l], calls);
	eviction_holds(opt.quick ? 2 : 5);
	bytes_per_block();
	out_close();
	return 0;
}
