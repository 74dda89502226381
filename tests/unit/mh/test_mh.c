// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-host scenarios over the simulator (TAP). Every scenario runs with
 * the non-coherent cache model unless --coherent is given; rounds use
 * seeds derived from --seed, printed on failure.
 *
 *   test_mh [--coherent] [--seed N] [--scale N] [--only NAME]
 *           [--disable-site N|NAME] [--list-sites] [--tag TAG]
 *
 * --disable-site turns one flush/invalidate site of the protocol into a
 * no-op (the mutation check, see mutate.sh). --tag appends ":TAG" to every
 * result name, so that several runs in one TAP stream stay distinct.
 */
#include <getopt.h>
#include "world.h"
#include "../../lib/tap.h"

#define W_CHECK_CLEAN(w) do {						\
	if ((w)->s->violations) {					\
		fprintf(stderr, "# %s:%d: seed %llu: %d violation(s), first: %s\n", \
			__FILE__, __LINE__,				\
			(unsigned long long)(w)->seed,			\
			(w)->s->violations, (w)->s->first_violation);	\
		tap_case_failures++;					\
		(w)->s->violations = 0;					\
	}								\
} while (0)

#define CHECK_SEED(w, cond) do {					\
	if (!(cond)) {							\
		fprintf(stderr, "# %s:%d: seed %llu: CHECK(%s) failed\n", \
			__FILE__, __LINE__,				\
			(unsigned long long)(w)->seed, #cond);		\
		tap_case_failures++;					\
	}								\
} while (0)

static u32 g_round;

static u64 seed_of(u32 test, u32 round)
{
	return bel_mix64(g_seed * 1000003ULL + test * 1009ULL + round);
}

static int rounds(int base)
{
	int r = base * g_scale;

	return r < 1 ? 1 : r;
}

/* Attach hosts 0..n-1 one after the other; all must succeed. */
static struct world *w_up(int n, const u32 *ids, u64 seed)
{
	struct world *w = w_new(n, ids, seed);
	int i, ret;

	for (i = 0; i < n; i++) {
		ret = -1;
		w_run1(w, i, s_attach, &ret);
		CHECK_SEED(w, ret == 0);
	}
	w_settle(w, 3 * W_MS);
	return w;
}

static const u32 ids3[] = { 0, 1, 2 };

/* --- attach, format, refusals ----------------------------------------------- */

struct hosts_arg {
	struct bel_mh_host_info info[BEL_MH_MAX_HOSTS];
	int n;
};

static void s_hosts(struct sim_host *sh, void *arg)
{
	struct hosts_arg *a = arg;

	sim_maybe_tick(sh);
	a->n = bel_mh_hosts(&sh->mh, a->info, BEL_MH_MAX_HOSTS);
}

static void test_format_join(void)
{
	struct world *w = w_new(2, ids3, seed_of(1, 0));
	struct hosts_arg ha;
	int r0 = -1, r1 = -1;

	w_run1(w, 0, s_attach, &r0);
	w_run1(w, 1, s_attach, &r1);
	CHECK_EQ(r0, 0);
	CHECK_EQ(r1, 0);
	CHECK(w->h[0]->mh.formatted);
	CHECK(!w->h[1]->mh.formatted);
	CHECK(!memcmp(w->h[0]->mh.geo.uuid, w->h[1]->mh.geo.uuid, 16));
	CHECK(w->h[0]->mh.geo.nr_blocks >= 60);
	CHECK_EQ(w->h[0]->mh.geo.nr_blocks, w->h[1]->mh.geo.nr_blocks);
	w_settle(w, 4 * W_MS);
	CHECK_EQ(w_owner(w, 0), 0);
	CHECK_EQ(w_owner(w, 1), 1);
	CHECK(w_owner(w, 2) >= 0 && w_owner(w, 3) >= 0);
	w_run1(w, 1, s_hosts, &ha);
	CHECK_EQ(ha.n, W_HOSTS);
	CHECK(ha.info[0].alive && ha.info[1].alive && ha.info[1].self);
	CHECK(!ha.info[2].alive && !ha.info[3].alive);
	CHECK_EQ(ha.info[2].state, BEL_MH_HOST_NONE);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Review finding 16: a peer's name comes from its record; status shows it
 * with every non-printable byte and space replaced, so that it cannot
 * forge lines or fields of the "hosts" table.
 */
static void test_host_names(void)
{
	struct world *w = w_new(2, ids3, seed_of(32, 0));
	static const char evil[24] = "a b\n0 active 9\t\x7f\xff";
	struct hosts_arg ha;
	int r0 = -1, r1 = -1;
	u32 i;

	memcpy(w->h[1]->cfg.name, evil, sizeof(evil));
	w_run1(w, 0, s_attach, &r0);
	w_run1(w, 1, s_attach, &r1);
	CHECK_EQ(r0, 0);
	CHECK_EQ(r1, 0);
	w_settle(w, 2 * W_MS);
	w_run1(w, 0, s_hosts, &ha);
	CHECK_EQ(ha.n, W_HOSTS);
	CHECK(!strcmp(ha.info[1].name, "a?b?0?active?9???"));
	for (i = 0; i < sizeof(ha.info[1].name); i++)
		CHECK(!ha.info[1].name[i] || (ha.info[1].name[i] > ' ' &&
					      ha.info[1].name[i] < 0x7f));
	CHECK(!strcmp(ha.info[0].name, "host0"));
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

static void test_concurrent_format(void)
{
	int r, i;

	for (r = 0; r < rounds(12); r++) {
		struct world *w = w_new(3, ids3, seed_of(2, r));
		sim_fn fns[SIM_MAX_HOSTS] = { s_attach, s_attach, s_attach };
		int rets[3] = { -1, -1, -1 };
		void *args[SIM_MAX_HOSTS] = { &rets[0], &rets[1], &rets[2] };
		u64 t0 = w->s->clock;
		int formatted = 0;

		w_run(w, fns, args);
		for (i = 0; i < 3; i++) {
			CHECK_SEED(w, rets[i] == 0);
			formatted += w->h[i]->mh.formatted;
			CHECK_SEED(w, !memcmp(w->h[i]->mh.geo.uuid,
					      w->h[0]->mh.geo.uuid, 16));
		}
		CHECK_SEED(w, formatted == 1);
		/* Nobody waited for a stale intent. */
		CHECK_SEED(w, w->s->clock - t0 < W_LEASE);
		w_settle(w, 3 * W_MS);
		w_final_check(w);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

struct raw_attach {
	u64 size;
	int ret;
};

static void s_attach_size(struct sim_host *sh, void *arg)
{
	struct raw_attach *a = arg;
	struct bel_mh_host tmp;

	a->ret = bel_mh_attach(&tmp, &sim_ops, sh, a->size, &sh->cfg);
	if (!a->ret) {
		bel_mh_leave(&tmp);
		bel_mh_destroy(&tmp);
	}
}

static void test_refuse_mismatch(void)
{
	struct world *w = w_new(2, ids3, seed_of(3, 0));
	struct bel_mh_super sb, bad;
	struct raw_attach ra;
	struct sim_host *h5;
	int r = -1;

	w_run1(w, 0, s_attach, &r);
	CHECK_EQ(r, 0);
	sim_dev_read(w->s, 0, &sb, sizeof(sb));

	/* An unknown major version, checksum intact. */
	bad = sb;
	bad.version_major = cpu_to_le32(2);
	bad.csum = cpu_to_le32(bel_mh_csum(&bad, offsetof(struct bel_mh_super,
							  csum)));
	memcpy(w->s->mem, &bad, sizeof(bad));
	w_run1(w, 1, s_attach, &r);
	CHECK_EQ(r, -EPROTONOSUPPORT);
	CHECK(w->h[1]->mh.why && strstr(w->h[1]->mh.why, "version"));

	/* An unknown bucket hash, checksum intact: keys would be missed. */
	bad = sb;
	bad.hash = cpu_to_le32(BEL_MH_HASH_MIX64 + 1);
	bad.csum = cpu_to_le32(bel_mh_csum(&bad, offsetof(struct bel_mh_super,
							  csum)));
	memcpy(w->s->mem, &bad, sizeof(bad));
	w_run1(w, 1, s_attach, &r);
	CHECK_EQ(r, -EPROTONOSUPPORT);
	CHECK(w->h[1]->mh.why && strstr(w->h[1]->mh.why, "hash"));

	/* A corrupt superblock. */
	bad = sb;
	bad.nr_blocks = cpu_to_le64(le64_to_cpu(sb.nr_blocks) ^ 4);
	memcpy(w->s->mem, &bad, sizeof(bad));
	w_run1(w, 1, s_attach, &r);
	CHECK_EQ(r, -EUCLEAN);
	CHECK(w->h[1]->mh.why && strstr(w->h[1]->mh.why, "checksum"));
	memcpy(w->s->mem, &sb, sizeof(sb));

	/* Another block size, another region size, a host id too big. */
	w->h[1]->cfg.block_size = 8192;
	w_run1(w, 1, s_attach, &r);
	CHECK_EQ(r, -EINVAL);
	CHECK(w->h[1]->mh.why && strstr(w->h[1]->mh.why, "block size"));
	w->h[1]->cfg.block_size = W_BS;
	ra.size = W_REGION - 4096;
	ra.ret = -1;
	w_run1(w, 1, s_attach_size, &ra);
	CHECK_EQ(ra.ret, -EINVAL);
	h5 = w_add(w, 5);
	w_run1(w, h5->idx, s_attach, &r);
	CHECK_EQ(r, -ERANGE);

	/* The pool is untouched: a correct host still joins. */
	w_run1(w, 1, s_attach, &r);
	CHECK_EQ(r, 0);
	CHECK(!w->h[1]->mh.formatted);
	w_settle(w, 3 * W_MS);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * The bucket hash is on-media format: pinned to fixed vectors, so that a
 * change to bel_key_hash() fails here instead of splitting a pool between
 * modules that disagree on where a key lives (bel_hash.h).
 */
static void test_bucket_hash(void)
{
	static const struct {
		u64 ns, lo, hi, hash;
	} v[] = {
		{ 0, 0, 0, 0 },
		{ 0, 1, 0, 0xb456bcfc34c2cb2cULL },
		{ 1, 0, 0, 0x6393d51c06c618dcULL },
		{ 0, 0, 1, 0x7d6e4ac38b2b1be2ULL },
		{ 7, 0x123456789abcdef0ULL, 0xfedcba9876543210ULL,
		  0x7e4aff14d40fcaafULL },
	};
	struct bel_mh_geo g = { .buckets = 1U << 20 };
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		CHECK_EQ(bel_key_hash(v[i].ns, v[i].lo, v[i].hi), v[i].hash);
		CHECK_EQ(bel_mh_bucket_of(&g, v[i].ns, v[i].lo, v[i].hi),
			 (u32)v[i].hash & (g.buckets - 1));
	}
}

/*
 * Format 1.1 added the hash field in what 1.0 left reserved (zero), 1.2
 * the retire requests of host records (zero before): a pool formatted by
 * a 1.0 module (minor 0, hash 0) still joins.
 */
static void test_format_1_0_joins(void)
{
	struct world *w = w_new(2, ids3, seed_of(40, 0));
	struct bel_mh_super sb;
	int r = -1;

	w_run1(w, 0, s_attach, &r);
	CHECK_EQ(r, 0);
	sim_dev_read(w->s, 0, &sb, sizeof(sb));
	CHECK_EQ(le32_to_cpu(sb.version_major), BEL_MH_VERSION_MAJOR);
	CHECK_EQ(le32_to_cpu(sb.version_minor), BEL_MH_VERSION_MINOR);
	CHECK_EQ(BEL_MH_VERSION_MINOR, 3);
	CHECK_EQ(le32_to_cpu(sb.hash), BEL_MH_HASH_MIX64);
	sb.version_minor = cpu_to_le32(0);
	sb.hash = 0;
	sb.csum = cpu_to_le32(bel_mh_csum(&sb, offsetof(struct bel_mh_super,
							csum)));
	memcpy(w->s->mem, &sb, sizeof(sb));
	w_run1(w, 1, s_attach, &r);
	CHECK_EQ(r, 0);
	CHECK(!w->h[1]->mh.formatted);
	w_settle(w, 3 * W_MS);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Both cores name blocks by their offset in the pool's mapping. With the
 * pool placed at 1 GiB: every offset the core hands out is a block start
 * at or past the base, and an offset below the base, inside a block or
 * past the last block names no block (-EINVAL, nothing changes), as in
 * the single-host core.
 */
static void s_map_base(struct sim_host *sh, void *arg)
{
	const u64 base = 1ULL << 30;
	struct bel_mh_client *c = &sh->cl[0];
	struct bel_mh_host *h = &sh->mh;
	struct beluga_publish_item it[3];
	struct beluga_key key = w_key(77);
	u64 offs[2], got = 0, bad;
	u32 ok = 9, ex = 9, failed = 9, hits = 0, b;

	(void)arg;
	bel_mh_set_map_base(h, base);
	REQUIRE_EQ(bel_mh_alloc(c, 2, offs, NULL, NULL), 0);
	CHECK(offs[0] >= base && offs[1] >= base);
	CHECK_EQ((offs[0] - base) % W_BS, 0);
	CHECK_EQ(bel_mh_block_at(h, offs[0], &b), 0);
	CHECK_EQ(bel_mh_offset_of(h, b), offs[0]);
	CHECK_EQ(h->blk_state[b], BEL_MH_BLK_ALLOCATED);

	/* No block: below the base, inside a block, past the last one. */
	bad = offs[0] - base;
	CHECK_EQ(bel_mh_free(c, 1, &bad), -EINVAL);
	bad = offs[0] + W_BS / 2;
	CHECK_EQ(bel_mh_free(c, 1, &bad), -EINVAL);
	bad = base + (u64)h->geo.nr_blocks * W_BS;
	CHECK_EQ(bel_mh_block_at(h, bad, &b), -EINVAL);
	CHECK_EQ(c->nr_allocated, 2);

	/* PUBLISH takes the uapi's items: a bad offset fails its item only. */
	memset(it, 0, sizeof(it));
	it[0].offset = offs[0];
	it[0].key = key;
	it[1].offset = offs[1] + 1;
	it[1].key = w_key(78);
	it[2].offset = offs[1];
	it[2].key = key;
	REQUIRE_EQ(bel_mh_publish(c, W_NS, 3, it, &ok, &ex, &failed), 0);
	CHECK_EQ(it[0].result, BELUGA_PUBLISH_OK);
	CHECK_EQ(it[1].result, -EINVAL);
	CHECK_EQ(it[2].result, BELUGA_PUBLISH_EXISTS);
	CHECK(ok == 1 && ex == 1 && failed == 1);

	REQUIRE_EQ(bel_mh_lookup(c, W_NS, 1, &key, true, &got, &hits), 0);
	CHECK_EQ(hits, 1);
	CHECK_EQ(got, offs[0]);
	bad = got - base;
	CHECK_EQ(bel_mh_release(c, 1, &bad), -EINVAL);
	CHECK_EQ(bel_mh_release(c, 1, &got), 0);
	CHECK_EQ(c->nr_pins, 0);
	CHECK_EQ(c->nr_allocated, 0);
	bel_mh_set_map_base(h, 0);
}

static void test_map_base(void)
{
	struct world *w = w_up(1, ids3, seed_of(41, 0));

	w_run1(w, 0, s_map_base, NULL);
	W_CHECK_CLEAN(w);
	w_free(w);
}

static void test_reformat_busy(void)
{
	struct world *w = w_up(1, ids3, seed_of(4, 0));
	struct sim_host *h1 = w_add(w, 1);
	int r = -1;

	h1->cfg.format = true;
	w_run1(w, h1->idx, s_attach, &r);
	CHECK_EQ(r, -EBUSY);
	W_CHECK_CLEAN(w);
	w_free(w);
}

static void test_duplicate_id(void)
{
	struct world *w = w_up(1, ids3, seed_of(5, 0));
	struct sim_host *dup = w_add(w, 0);
	int r = -1;

	w_run1(w, dup->idx, s_attach, &r);
	CHECK_EQ(r, -EADDRINUSE);
	CHECK(w_live(w, 0));
	W_CHECK_CLEAN(w);
	w_free(w);
}

/* --- publish, lookup, read ------------------------------------------------------ */

struct pubs {
	struct world *w;
	u32 base;
	u32 n;
	s32 res[16];
	u32 hits[SIM_MAX_HOSTS];
};

static void s_publish_own(struct sim_host *sh, void *arg)
{
	struct pubs *a = arg;
	u32 i;

	for (i = 0; i < a->n; i++) {
		sim_maybe_tick(sh);
		CHECK_EQ(w_put(a->w, sh, 0, a->base + 100 * sh->host_id + i,
			       NULL), BELUGA_PUBLISH_OK);
	}
}

/* Pin every host's chain, check bytes, release. */
static void s_read_all(struct sim_host *sh, void *arg)
{
	struct pubs *a = arg;
	int x;

	for (x = 0; x < a->w->n; x++) {
		u32 ks[16], b[16], i, hits = 0;

		sim_maybe_tick(sh);
		for (i = 0; i < a->n; i++) {
			ks[i] = a->base + 100 * a->w->h[x]->host_id + i;
			if (w_pin(a->w, sh, 1, ks[i], &b[i]))
				hits++;
			else
				break;
		}
		a->hits[sh->idx] += hits;
		for (i = 0; i < hits; i++)
			w_release(a->w, sh, 1, b[i]);
		/* The count-only probe agrees. */
		CHECK_EQ(w_probe(a->w, sh, ks, a->n), hits);
	}
}

static void test_cross_host_rw(void)
{
	struct world *w = w_up(3, ids3, seed_of(6, 0));
	sim_fn fns[SIM_MAX_HOSTS] = { s_publish_own, s_publish_own,
				      s_publish_own };
	struct pubs a = { .w = w, .base = 1000, .n = 5 };
	void *args[SIM_MAX_HOSTS] = { &a, &a, &a };
	int i;

	w_run(w, fns, args);
	for (i = 0; i < 3; i++)
		fns[i] = s_read_all;
	w_run(w, fns, args);
	for (i = 0; i < 3; i++)
		CHECK_EQ(a.hits[i], 15);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

struct race {
	struct world *w;
	u32 keys[4];
	s32 res[SIM_MAX_HOSTS][4];
	u32 blk[SIM_MAX_HOSTS][4];
};

static void s_race(struct sim_host *sh, void *arg)
{
	struct race *a = arg;
	u32 i;

	for (i = 0; i < 4; i++) {
		u32 b;

		a->res[sh->idx][i] = -1000;
		if (w_alloc1(a->w, sh, 0, &b))
			continue;
		w_write(a->w, sh, b, a->keys[i]);
		a->blk[sh->idx][i] = b;
		a->res[sh->idx][i] = w_publish(a->w, sh, 0, a->keys[i], b);
		sim_maybe_tick(sh);
	}
}

static void s_race_read(struct sim_host *sh, void *arg)
{
	struct race *a = arg;
	u32 i, b;

	for (i = 0; i < 4; i++) {
		bool hit = w_pin(a->w, sh, 1, a->keys[i], &b);

		CHECK_SEED(a->w, hit);
		if (hit)
			w_release(a->w, sh, 1, b);
	}
}

static void test_publish_race(void)
{
	int r, i, n;

	for (n = 2; n <= 3; n++)
		for (r = 0; r < rounds(15); r++) {
			struct world *w = w_up(n, ids3, seed_of(7 + n, r));
			sim_fn fns[SIM_MAX_HOSTS] = { 0 };
			void *args[SIM_MAX_HOSTS] = { 0 };
			struct race a;
			int k;

			memset(&a, 0, sizeof(a));
			a.w = w;
			for (k = 0; k < 4; k++)
				a.keys[k] = 5000 + r * 10 + k;
			for (i = 0; i < n; i++) {
				fns[i] = s_race;
				args[i] = &a;
			}
			w_run(w, fns, args);
			for (k = 0; k < 4; k++) {
				int ok = 0, exists = 0;

				for (i = 0; i < n; i++) {
					ok += a.res[i][k] == BELUGA_PUBLISH_OK;
					exists += a.res[i][k] ==
						  BELUGA_PUBLISH_EXISTS;
				}
				CHECK_SEED(w, ok == 1 && exists == n - 1);
				CHECK_SEED(w, w_dev_published(w, a.keys[k], NULL,
							      NULL) == 1);
			}
			for (i = 0; i < n; i++)
				fns[i] = s_race_read;
			w_run(w, fns, args);
			w_final_check(w);
			W_CHECK_CLEAN(w);
			w_free(w);
		}
}

/* --- pins against eviction -------------------------------------------------------- */

struct pinev {
	struct world *w;
	u32 key;
	u32 blk;
	u32 cap;
	u32 got;
	bool hit;
	int step;
};

static u32 owned_blocks(struct sim_host *sh)
{
	u32 p, n = 0;

	for (p = 0; p < sh->mh.geo.max_hosts; p++)
		if (sh->mh.part[p].owned)
			n += sh->mh.part[p].nr;
	return n;
}

/*
 * Issue 18: an ALLOC that evicts on a shared pool names its victims, (ns,
 * key) oldest first, never the block it pins; one that finds free blocks
 * names none; one that fails names none and evicts nothing.
 */
static void s_alloc_evicted(struct sim_host *sh, void *arg)
{
	struct world *w = arg;
	struct beluga_evicted_key ev[8];
	u32 i, n = owned_blocks(sh), b[8], pinned, nr = 99, k;

	REQUIRE_EQ(w_alloc_evicting(w, sh, 0, 2, b, ev, &nr), 0);
	CHECK_EQ(nr, 0);
	w_free_block(w, sh, 0, b[0]);
	w_free_block(w, sh, 0, b[1]);
	for (i = 0; i < n; i++)
		REQUIRE_EQ(w_put(w, sh, 0, 700 + i, NULL), BELUGA_PUBLISH_OK);
	REQUIRE(w_pin(w, sh, 0, 700, &pinned));
	REQUIRE_EQ(w_alloc_evicting(w, sh, 0, 2, b, ev, &nr), 0);
	REQUIRE_EQ(nr, 2);
	for (i = 0; i < 2; i++) {
		k = 701 + i;
		CHECK_EQ(ev[i].ns, W_NS);
		CHECK(ev[i].key.lo == w_key(k).lo && ev[i].key.hi == w_key(k).hi);
		CHECK_EQ(w_dev_published(w, k, NULL, NULL), 0);
	}
	CHECK_EQ(w_dev_published(w, 700, NULL, NULL), 1);
	w_free_block(w, sh, 0, b[0]);
	w_free_block(w, sh, 0, b[1]);
	/* More than free plus evictable: -ENOSPC, nothing named or gone. */
	nr = 99;
	CHECK_EQ(w_alloc_evicting(w, sh, 0, n < 8 ? n : 8, b, ev, &nr),
		 n < 8 ? -ENOSPC : 0);
	if (n < 8) {
		CHECK_EQ(nr, 0);
		CHECK_EQ(w_dev_published(w, 703, NULL, NULL), 1);
	}
	w_release(w, sh, 0, pinned);
}

static void test_alloc_evicted(void)
{
	struct world *w = w_up(1, ids3, seed_of(97, 0));

	w_run1(w, 0, s_alloc_evicted, w);
	w_settle(w, 3 * W_MS);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

static void s_pinev_a(struct sim_host *sh, void *arg)
{
	struct pinev *a = arg;
	u32 i;

	if (a->step == 0) {
		CHECK_EQ(w_put(a->w, sh, 0, a->key, &a->blk),
			 BELUGA_PUBLISH_OK);
		return;
	}
	if (a->step == 1) {
		/* Fill everything we own twice over: eviction must skip the pin. */
		a->cap = owned_blocks(sh);
		for (i = 0; i < 2 * a->cap; i++) {
			sim_maybe_tick(sh);
			if (w_put(a->w, sh, 0, 20000 + i, NULL) !=
			    BELUGA_PUBLISH_OK) {
				CHECK_SEED(a->w, 0);
				break;
			}
		}
		return;
	}
	a->got = w_alloc_all(a->w, sh, 2);
}

static void s_pinev_b(struct sim_host *sh, void *arg)
{
	struct pinev *a = arg;
	u32 b;

	if (a->step == 0) {
		a->hit = w_pin(a->w, sh, 0, a->key, &b);
		CHECK_SEED(a->w, a->hit && b == a->blk);
		return;
	}
	/* Still there, still ours, bytes intact; then let go. */
	CHECK_SEED(a->w, w_probe(a->w, sh, &a->key, 1) == 1);
	w_reverify(a->w, sh, a->key, a->blk);
	if (w_pin(a->w, sh, 1, a->key, &b)) {
		CHECK_SEED(a->w, b == a->blk);
		w_release(a->w, sh, 1, b);
	} else {
		CHECK_SEED(a->w, 0);
	}
	w_release(a->w, sh, 0, a->blk);
}

static void test_pin_blocks_eviction(void)
{
	struct world *w = w_up(2, ids3, seed_of(10, 0));
	struct pinev a = { .w = w, .key = 77 };

	w_run1(w, 0, s_pinev_a, &a);
	w_run1(w, 1, s_pinev_b, &a);
	a.step = 1;
	w_run1(w, 0, s_pinev_a, &a);
	w_run1(w, 1, s_pinev_b, &a);
	a.step = 2;
	w_run1(w, 0, s_pinev_a, &a);
	/* After the release, every block host 0 owns can be had. */
	CHECK_EQ(a.got, a.cap);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Review finding 1: a read-only opener pins one key over and over. The
 * client's pin memory stays bounded by the distinct blocks it pins, a
 * RELEASE of a full batch costs O(batch) table probes however many pins
 * are held, a long LOOKUP reaches preemption points (so the heartbeat
 * runs and the host keeps its lease), and a pin count at its cap answers
 * -EOVERFLOW with nothing pinned.
 */
struct flood {
	struct world *w;
	u32 blk;
	u32 rounds;
};

static void s_flood_put(struct sim_host *sh, void *arg)
{
	struct flood *a = arg;

	CHECK_EQ(w_put(a->w, sh, 0, 5, &a->blk), BELUGA_PUBLISH_OK);
	CHECK_EQ(w_put(a->w, sh, 0, 6, NULL), BELUGA_PUBLISH_OK);
}

static void s_flood_pin(struct sim_host *sh, void *arg)
{
	static struct beluga_key keys[BELUGA_MAX_BATCH];
	static u64 offs[BELUGA_MAX_BATCH];
	struct flood *a = arg;
	struct bel_mh_client *c = &sh->cl[0];
	struct bel_mh_host *h = &sh->mh;
	u32 i, r, hits, saved, b;
	u64 probes, rescheds;
	int ret;

	for (i = 0; i < BELUGA_MAX_BATCH; i++)
		keys[i] = w_key(5);
	for (r = 0; r < a->rounds; r++) {
		sim_maybe_tick(sh);
		rescheds = sh->rescheds;
		hits = 0;
		ret = bel_mh_lookup(c, W_NS, BELUGA_MAX_BATCH, keys, true,
				    offs, &hits);
		REQUIRE_EQ(ret, 0);
		REQUIRE_EQ(hits, BELUGA_MAX_BATCH);
		CHECK(sh->rescheds - rescheds >=
		      BELUGA_MAX_BATCH / BEL_MH_RESCHED_EVERY - 1);
	}
	CHECK(!h->fenced);
	CHECK_EQ(c->nr_pins, (u64)a->rounds * BELUGA_MAX_BATCH);
	CHECK_EQ(h->blk_pins[a->blk], a->rounds * BELUGA_MAX_BATCH);
	/* One distinct block: the table is sized by one batch, not by pins. */
	CHECK_EQ(c->pins.used, 1);
	CHECK(c->pins.capacity <= 4 * BELUGA_MAX_BATCH);

	/* RELEASE of a batch: O(batch) probes, whatever is held. */
	for (i = 0; i < BELUGA_MAX_BATCH; i++)
		offs[i] = w_off(sh, a->blk);
	for (r = 0; r < a->rounds; r++) {
		probes = c->pins.probes;
		REQUIRE_EQ(bel_mh_release(c, BELUGA_MAX_BATCH, offs), 0);
		CHECK(c->pins.probes - probes <= 4 * BELUGA_MAX_BATCH);
	}
	CHECK_EQ(c->nr_pins, 0);
	CHECK_EQ(c->pins.used, 0);
	CHECK_EQ(h->blk_pins[a->blk], 0);
	/* Listed more often than pinned: -EINVAL, nothing changes. */
	REQUIRE(w_pin(a->w, sh, 0, 5, &b));
	CHECK_EQ(bel_mh_release(c, 2, offs), -EINVAL);
	CHECK_EQ(c->nr_pins, 1);
	w_release(a->w, sh, 0, b);

	/* A pin count at its cap: -EOVERFLOW, and the call pins nothing. */
	saved = h->blk_pins[a->blk];
	h->blk_pins[a->blk] = BEL_MAX_PINS + 1;
	keys[0] = w_key(6);
	keys[1] = w_key(5);
	hits = 99;
	ret = bel_mh_lookup(c, W_NS, 2, keys, true, offs, &hits);
	CHECK_EQ(ret, -EOVERFLOW);
	CHECK_EQ(hits, 0);
	CHECK_EQ(h->blk_pins[a->blk], BEL_MAX_PINS + 1);
	h->blk_pins[a->blk] = saved;
	CHECK_EQ(c->nr_pins, 0);
	CHECK_EQ(c->pins.used, 0);
	CHECK_EQ(h->nr_pins, 0);
	CHECK_EQ(h->nr_pinned, 0);
}

static void test_pin_flood(void)
{
	struct world *w = w_up(2, ids3, seed_of(26, 0));
	struct flood a = { .w = w, .rounds = 16 };

	w_run1(w, 1, s_flood_put, &a);
	w_run1(w, 0, s_flood_pin, &a);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Review finding 11: an ALLOC that cannot be met evicts nothing. Host 0
 * fills what it owns with published keys, host 1 pins two of them (which
 * host 0 learns only when it tries to evict them), and host 0's own client
 * pins one; then ALLOCs of every owned block fail, and every key is still
 * there.
 */
struct aon {
	struct world *w;
	u32 cap;
	u32 b1, b2, b0;
	int r_local, r_remote;
	u32 found;
};

static void s_aon_fill(struct sim_host *sh, void *arg)
{
	struct aon *a = arg;
	u32 i;

	a->cap = owned_blocks(sh);
	for (i = 0; i < a->cap; i++) {
		sim_maybe_tick(sh);
		CHECK_EQ(w_put(a->w, sh, 0, 30000 + i, NULL),
			 BELUGA_PUBLISH_OK);
	}
}

static void s_aon_pin_remote(struct sim_host *sh, void *arg)
{
	struct aon *a = arg;

	CHECK_SEED(a->w, w_pin(a->w, sh, 0, 30000 + 3, &a->b1));
	CHECK_SEED(a->w, w_pin(a->w, sh, 0, 30000 + 5, &a->b2));
}

static void s_aon_alloc(struct sim_host *sh, void *arg)
{
	static u64 offs[W_MAXB];
	struct aon *a = arg;
	u32 i, b;

	/* Remote pins only: the LRU looks long enough, eviction finds out. */
	a->r_remote = bel_mh_alloc(&sh->cl[1], a->cap, offs, NULL, NULL);
	/* A local pin: refused before evicting. */
	CHECK_SEED(a->w, w_pin(a->w, sh, 0, 30000 + 7, &a->b0));
	a->r_local = bel_mh_alloc(&sh->cl[1], a->cap, offs, NULL, NULL);
	w_release(a->w, sh, 0, a->b0);
	a->found = 0;
	for (i = 0; i < a->cap; i++) {
		u32 k = 30000 + i;

		if (w_probe(a->w, sh, &k, 1) == 1)
			a->found++;
	}
	/* What can be had still can: all but the two pinned remotely. */
	CHECK_SEED(a->w, bel_mh_alloc(&sh->cl[1], a->cap - 2, offs, NULL, NULL) == 0);
	for (i = 0; i < a->cap - 2; i++)
		w_free_block(a->w, sh, 1, w_blk(sh, offs[i]));
	(void)b;
}

static void s_aon_release(struct sim_host *sh, void *arg)
{
	struct aon *a = arg;

	w_release(a->w, sh, 0, a->b1);
	w_release(a->w, sh, 0, a->b2);
}

static void test_alloc_all_or_nothing(void)
{
	struct world *w = w_up(2, ids3, seed_of(29, 0));
	struct aon a = { .w = w };

	w_run1(w, 0, s_aon_fill, &a);
	w_run1(w, 1, s_aon_pin_remote, &a);
	w_run1(w, 0, s_aon_alloc, &a);
	CHECK_EQ(a.r_remote, -ENOSPC);
	CHECK_EQ(a.r_local, -ENOSPC);
	/* Only the last ALLOC, which could be met, evicted. */
	CHECK_EQ(a.found, a.cap);
	CHECK_EQ(w->h[0]->mh.opstats.evictions, a.cap - 2);
	w_run1(w, 1, s_aon_release, &a);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

struct churn {
	struct world *w;
	u32 next_key;		/* keys published so far: [first, next) */
	u32 first;
	u32 iters;
	u32 cap;
	u32 pinned_hits;
};

static void s_churn_writer(struct sim_host *sh, void *arg)
{
	struct churn *a = arg;
	u32 i;

	for (i = 0; i < a->iters; i++) {
		s32 r;

		sim_maybe_tick(sh);
		r = w_put(a->w, sh, 0, a->next_key, NULL);
		if (r == BELUGA_PUBLISH_OK)
			a->next_key++;
	}
}

static void s_churn_reader(struct sim_host *sh, void *arg)
{
	struct churn *a = arg;
	u32 i;

	for (i = 0; i < a->iters; i++) {
		u32 span = a->next_key - a->first, k, b;

		sim_maybe_tick(sh);
		if (!span)
			continue;
		/* Recent keys: the ones the writer's eviction is after. */
		k = a->next_key - 1 -
		    (u32)(sim_rand(a->w->s) % (span < a->cap ? span : a->cap));
		if (!w_pin(a->w, sh, 0, k, &b))
			continue;
		a->pinned_hits++;
		sim_sleep(sh, 1000 * (1 + sim_rand(a->w->s) % 50));
		w_reverify(a->w, sh, k, b);
		w_release(a->w, sh, 0, b);
	}
}

static void test_pin_evict_race(void)
{
	int r;

	for (r = 0; r < rounds(6); r++) {
		struct world *w = w_up(3, ids3, seed_of(11, r));
		sim_fn fns[SIM_MAX_HOSTS] = { s_churn_writer, s_churn_reader,
					      s_churn_reader };
		struct churn a = { .w = w, .first = 30000,
				   .next_key = 30000 };
		void *args[SIM_MAX_HOSTS] = { &a, &a, &a };

		a.cap = owned_blocks(w->h[0]);
		a.iters = a.cap;
		w_run1(w, 0, s_churn_writer, &a);
		a.iters = 3 * a.cap;
		w_run(w, fns, args);
		CHECK_SEED(w, a.pinned_hits > 0);
		w_final_check(w);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

/*
 * A pinner whose pin reaches the device late (stalled between its store and
 * its flush) while the owner evicts the block: its validation must see the
 * eviction, not its own cached copy of the entry.
 */
struct pinval {
	struct world *w;
	u32 key;
	u32 cap;
	bool hit;
	s32 put;
};

static void s_pinval_fill(struct sim_host *sh, void *arg)
{
	struct pinval *a = arg;
	u32 i;

	a->cap = owned_blocks(sh);
	for (i = 0; i < a->cap; i++)
		CHECK_EQ(w_put(a->w, sh, 0, a->key + i, NULL),
			 BELUGA_PUBLISH_OK);
}

static void s_pinval_pinner(struct sim_host *sh, void *arg)
{
	struct pinval *a = arg;
	u32 b;

	sh->trig_site = BEL_MH_F_PIN;
	sh->trig_nth = 1;
	sh->trig_hits = 0;
	sh->trig_before = true;
	sh->trig_stall_ns = W_MS;
	a->hit = w_pin(a->w, sh, 0, a->key, &b);
	if (a->hit)
		w_release(a->w, sh, 0, b);
}

static void s_pinval_evictor(struct sim_host *sh, void *arg)
{
	struct pinval *a = arg;

	sim_sleep(sh, 300000);
	/* Evicts the oldest key, the one being pinned. */
	a->put = w_put(a->w, sh, 0, a->key + 1000, NULL);
}

static void test_pin_validation(void)
{
	struct world *w = w_up(2, ids3, seed_of(23, 0));
	struct pinval a = { .w = w, .key = 50000 };
	sim_fn fns[SIM_MAX_HOSTS] = { s_pinval_evictor, s_pinval_pinner };
	void *args[SIM_MAX_HOSTS] = { &a, &a };

	w_run1(w, 0, s_pinval_fill, &a);
	/* The pin must arrive late: no write-back of it by chance meanwhile. */
	w->s->cfg.writeback_permille = 0;
	w_run(w, fns, args);
	CHECK_EQ(a.put, BELUGA_PUBLISH_OK);
	/* Coherent: the pin is seen at once and the eviction backs off. */
	CHECK(g_coherent || !a.hit);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/* --- stale views ------------------------------------------------------------------- */

struct stale {
	struct world *w;
	u32 key;
	u32 key2;
	u32 blk;
	int step;
	s32 res;
};

/* Host 0 takes blocks until it gets @blk back (evicting), frees the rest. */
static bool take_back(struct world *w, struct sim_host *sh, u32 blk)
{
	u32 got[W_MAXB], n = 0, i;
	bool found = false;

	while (n < W_MAXB && w_alloc1(w, sh, 0, &got[n]) == 0) {
		if (got[n++] == blk) {
			found = true;
			break;
		}
	}
	for (i = 0; i < n; i++)
		if (got[i] != blk)
			w_free_block(w, sh, 0, got[i]);
	return found;
}

static void s_stale_a(struct sim_host *sh, void *arg)
{
	struct stale *a = arg;
	u32 b;

	switch (a->step) {
	case 0:
		CHECK_EQ(w_put(a->w, sh, 0, a->key, &a->blk),
			 BELUGA_PUBLISH_OK);
		break;
	case 1:
		/* Evict the key by taking its block back. */
		CHECK_SEED(a->w, take_back(a->w, sh, a->blk));
		if (a->key2) {
			w_write(a->w, sh, a->blk, a->key2);
			CHECK_EQ(w_publish(a->w, sh, 0, a->key2, a->blk),
				 BELUGA_PUBLISH_OK);
		} else {
			w_free_block(a->w, sh, 0, a->blk);
		}
		break;
	case 2:
		CHECK_SEED(a->w, w_pin(a->w, sh, 0, a->key2 ? a->key2 : a->key,
				       &b));
		w_release(a->w, sh, 0, b);
		break;
	}
}

static void s_stale_b(struct sim_host *sh, void *arg)
{
	struct stale *a = arg;
	u32 b;

	if (a->step == 0) {
		/* Read the key once: its lines are now in our cache. */
		CHECK_SEED(a->w, w_pin(a->w, sh, 0, a->key, &b));
		w_release(a->w, sh, 0, b);
		return;
	}
	if (a->key2) {
		/* The same block now holds another key's bytes. */
		CHECK_SEED(a->w, w_pin(a->w, sh, 0, a->key2, &b));
		CHECK_SEED(a->w, b == a->blk);
		w_release(a->w, sh, 0, b);
		CHECK_SEED(a->w, w_probe(a->w, sh, &a->key, 1) == 0);
		return;
	}
	/* The key is gone: publishing it again must succeed. */
	a->res = w_put(a->w, sh, 0, a->key, NULL);
	CHECK_EQ(a->res, BELUGA_PUBLISH_OK);
}

static void run_stale(u32 key2, u32 test)
{
	struct world *w = w_up(2, ids3, seed_of(test, 0));
	struct stale a = { .w = w, .key = 31, .key2 = key2 };

	w_run1(w, 0, s_stale_a, &a);
	w_run1(w, 1, s_stale_b, &a);
	a.step = 1;
	w_run1(w, 0, s_stale_a, &a);
	w_run1(w, 1, s_stale_b, &a);
	a.step = 2;
	w_run1(w, 0, s_stale_a, &a);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/* A host that saw a key must not take its stale copy for the truth. */
static void test_republish_after_evict(void)
{
	run_stale(0, 12);
}

/* A reader that read a block must see the next key's bytes in it. */
static void test_block_reuse_read(void)
{
	run_stale(32, 13);
}

/* Tombstones must not pile up in the device: remote misses stay cheap. */
static void s_probe_miss(struct sim_host *sh, void *arg)
{
	u64 *invals = arg;
	u64 before = sh->mh.cnt.invals;
	u32 i;

	for (i = 0; i < 50; i++) {
		u32 k = 900000 + i;

		sim_maybe_tick(sh);
		CHECK_EQ(w_probe(NULL, sh, &k, 1), 0);
	}
	*invals = sh->mh.cnt.invals - before;
}

static void test_probe_chains(void)
{
	struct world *w = w_up(2, ids3, seed_of(14, 0));
	struct churn a = { .w = w, .first = 40000, .next_key = 40000 };
	u64 invals = 0;

	a.cap = owned_blocks(w->h[0]);
	a.iters = 8 * a.cap;
	w_run1(w, 0, s_churn_writer, &a);
	w_run1(w, 1, s_probe_miss, &invals);
	/* Partitions of host 0 read remotely, < 3 lines each on average. */
	CHECK_SEED(w, invals < 50 * 3 * (W_HOSTS - 1));
	if (invals >= 50 * 3 * (W_HOSTS - 1))
		fprintf(stderr, "# %llu lines for 50 misses\n",
			(unsigned long long)invals);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/* --- partition claims --------------------------------------------------------------- */

static void s_release_parts(struct sim_host *sh, void *arg)
{
	u32 p;

	(void)arg;
	for (p = 0; p < W_HOSTS; p++)
		if (p != sh->host_id && sh->mh.part[p].owned)
			CHECK_EQ(bel_mh_release_part(&sh->mh, p), 0);
}

static void s_claim(struct sim_host *sh, void *arg)
{
	int *won = arg;
	u32 p;

	/* Look at the other host once: a stale copy must not be trusted. */
	bel_mutex_lock(&sh->mh.lock);
	bel_mh_observe(&sh->mh);
	bel_mutex_unlock(&sh->mh.lock);
	for (p = 0; p < W_HOSTS; p++) {
		if (p == 1 || p == 2)
			continue;
		bel_mutex_lock(&sh->mh.lock);
		if (bel_mh_try_claim(&sh->mh, p) == 0)
			won[p]++;
		bel_mutex_unlock(&sh->mh.lock);
	}
}

static void test_claim_race(void)
{
	static const u32 ids12[] = { 1, 2 };
	int r;

	for (r = 0; r < rounds(15); r++) {
		struct world *w = w_up(2, ids12, seed_of(15, r));
		sim_fn fns[SIM_MAX_HOSTS] = { s_release_parts,
					      s_release_parts };
		int won[W_HOSTS] = { 0 };
		void *args[SIM_MAX_HOSTS] = { won, won };

		w_run(w, fns, args);
		CHECK_SEED(w, w_owner(w, 0) == -1 && w_owner(w, 3) == -1);
		fns[0] = s_claim;
		fns[1] = s_claim;
		w_run(w, fns, args);
		CHECK_SEED(w, won[0] <= 1 && won[3] <= 1);
		w_settle(w, 6 * W_MS);
		w_final_check(w);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

/* --- failures ------------------------------------------------------------------------ */

struct death {
	struct world *w;
	u32 nkeys;		/* setup keys per host: 10*id + i */
	u32 pinned_blk;
	u32 lookups_missed;
	u32 lookups;
	u32 got[SIM_MAX_HOSTS];
	int round;
};

static void s_setup_keys(struct sim_host *sh, void *arg)
{
	struct death *a = arg;
	u32 i;

	for (i = 0; i < a->nkeys; i++)
		CHECK_EQ(w_put(a->w, sh, 0, 10 * sh->host_id + i, NULL),
			 BELUGA_PUBLISH_OK);
}

/* Host 0 pins host 1's first key and never lets go. */
static void s_pin10(struct sim_host *sh, void *arg)
{
	struct death *a = arg;

	CHECK_SEED(a->w, w_pin(a->w, sh, 1, 10, &a->pinned_blk));
}

/* Host 0's workload until it is killed. */
static void s_victim(struct sim_host *sh, void *arg)
{
	struct death *a = arg;
	u32 n = 0, na = 0, i, b;

	/* Less than it owns: the setup keys must not be evicted. */
	for (i = 0; i < 100000; i++) {
		u64 op = sim_rand(a->w->s) % 4;

		sim_maybe_tick(sh);
		if (op == 0 && n < 8) {
			w_put(a->w, sh, 0, 1000 + 100 * a->round + n, NULL);
			n++;
		} else if (op == 1 && na < 4 && w_alloc1(a->w, sh, 2, &b) == 0) {
			w_write(a->w, sh, b, 777);
			na++;
		} else if (op == 2) {
			u32 k = 10 * (1 + sim_rand(a->w->s) % 2) +
				(u32)(sim_rand(a->w->s) % a->nkeys);

			if (w_pin(a->w, sh, 3, k, &b))
				w_release(a->w, sh, 3, b);
		} else {
			sim_sleep(sh, 50000);
		}
	}
}

/* Survivors: host 0's keys must be found all along. */
static void s_survivor(struct sim_host *sh, void *arg)
{
	struct death *a = arg;
	u64 end = sh->sim->clock + 3 * W_LEASE;

	while (sh->sim->clock < end) {
		u32 k = (u32)(sim_rand(a->w->s) % a->nkeys), b;

		sim_maybe_tick(sh);
		a->lookups++;
		if (w_pin(a->w, sh, 0, k, &b))
			w_release(a->w, sh, 0, b);
		else
			a->lookups_missed++;
		sim_sleep(sh, 200000);
	}
}

static void s_alloc_all(struct sim_host *sh, void *arg)
{
	struct death *a = arg;

	a->got[sh->idx] = w_alloc_all(a->w, sh, 2);
}

/* Every survivor takes all it owns: together that must be every block. */
static void check_reclaim(struct world *w, struct death *a)
{
	u32 total = 0;
	int i;

	w_settle(w, 3 * W_MS);
	for (i = 0; i < w->n; i++) {
		if (!w_live(w, i))
			continue;
		a->got[i] = 0;
		w_run1(w, i, s_alloc_all, a);
		total += a->got[i];
	}
	CHECK_SEED(w, total == w->geo.nr_blocks);
	if (total != w->geo.nr_blocks)
		fprintf(stderr, "# reclaimed %u of %u blocks\n", total,
			w->geo.nr_blocks);
}

static void test_host_death(void)
{
	int r;

	for (r = 0; r < rounds(8); r++) {
		struct world *w = w_up(3, ids3, seed_of(16, r));
		sim_fn fns[SIM_MAX_HOSTS] = { s_setup_keys, s_setup_keys,
					      s_setup_keys };
		struct death a = { .w = w, .nkeys = 3, .round = r };
		void *args[SIM_MAX_HOSTS] = { &a, &a, &a };
		struct hosts_arg ha;

		w_run(w, fns, args);
		w_run1(w, 0, s_pin10, &a);
		/* Somewhere in the first lease of the survivors' watch. */
		w->h[0]->kill_at_clock = w->s->clock + 1 +
					 sim_rand(w->s) % W_LEASE;
		fns[0] = s_victim;
		fns[1] = s_survivor;
		fns[2] = s_survivor;
		w_run(w, fns, args);
		CHECK_SEED(w, w->h[0]->killed);
		CHECK_SEED(w, a.lookups > 20 && a.lookups_missed == 0);
		if (a.lookups_missed || a.lookups <= 20)
			fprintf(stderr, "# %u of %u lookups missed\n", a.lookups_missed, a.lookups);
		w_run1(w, 1, s_hosts, &ha);
		CHECK_SEED(w, !ha.info[0].alive && ha.info[2].alive);
		/* Host 0's pin and allocations are void: all comes back. */
		check_reclaim(w, &a);
		w_final_check(w);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

struct site_kill {
	struct world *w;
	int site;
	u32 key;
};

static void s_site_victim(struct sim_host *sh, void *arg)
{
	struct site_kill *a = arg;
	u32 i, b;

	switch (a->site) {
	case BEL_MH_F_REC_CLAIM:
		/* Dies claiming its home partition back after joining. */
		if (sim_attach(sh) == 0)
			sim_idle(sh, 10 * W_MS);
		break;
	case BEL_MH_F_PIN:
		w_pin(a->w, sh, 0, 10, &b);
		break;
	case BEL_MH_F_ENT_EVICTING:
	case BEL_MH_F_ENT_UNLINK:
		/* Fill what we own; the next allocation evicts key 0. */
		for (i = 0; i < 2 * owned_blocks(sh); i++) {
			sim_maybe_tick(sh);
			w_put(a->w, sh, 0, 500 + i, NULL);
		}
		break;
	default:
		w_put(a->w, sh, 0, a->key, NULL);
		break;
	}
}

static void s_site_after(struct sim_host *sh, void *arg)
{
	struct site_kill *a = arg;
	u32 i, b, k;

	/*
	 * Whatever host 0 had published is still served, but for the key
	 * its eviction took out (the oldest, key 0) once the unlink was in
	 * the device; an interrupted eviction was rolled back.
	 */
	for (i = 0; i < 3; i++) {
		if (i == 0 && a->site == BEL_MH_F_ENT_UNLINK) {
			CHECK_SEED(a->w, w_probe(a->w, sh, &i, 1) == 0);
			continue;
		}
		if (w_pin(a->w, sh, 0, i, &b))
			w_release(a->w, sh, 0, b);
		else
			CHECK_SEED(a->w, 0);
	}
	/* The key host 0 was publishing can be published (or is there). */
	k = a->key;
	if (w_put(a->w, sh, 0, k, NULL) < 0)
		CHECK_SEED(a->w, 0);
	CHECK_SEED(a->w, w_pin(a->w, sh, 1, k, &b));
	w_release(a->w, sh, 1, b);
}

static void s_host0_keys(struct sim_host *sh, void *arg)
{
	struct site_kill *a = arg;
	u32 i;

	for (i = 0; sh->host_id == 0 && i < 3; i++)
		CHECK_EQ(w_put(a->w, sh, 0, i, NULL), BELUGA_PUBLISH_OK);
	if (sh->host_id == 1)
		CHECK_EQ(w_put(a->w, sh, 0, 10, NULL), BELUGA_PUBLISH_OK);
}

static void test_kill_at_sites(void)
{
	static const int sites[] = {
		BEL_MH_F_PAYLOAD, BEL_MH_F_ENT_TENTATIVE, BEL_MH_F_ENT_COMMIT,
		BEL_MH_F_ENT_EVICTING, BEL_MH_F_ENT_UNLINK, BEL_MH_F_PIN,
		BEL_MH_F_REC_CLAIM,
	};
	u32 i;

	for (i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
		struct world *w = w_up(3, ids3, seed_of(17, i));
		struct site_kill a = { .w = w, .site = sites[i], .key = 600 };
		struct death d = { .w = w };
		sim_fn fns[SIM_MAX_HOSTS] = { s_host0_keys, s_host0_keys };
		void *args[SIM_MAX_HOSTS] = { &a, &a };
		int fails = tap_case_failures;

		if (getenv("MH_DEBUG"))
			fprintf(stderr, "# site %s\n",
				bel_mh_sites[sites[i]].name);
		w_run(w, fns, args);
		if (sites[i] == BEL_MH_F_REC_CLAIM) {
			/* Leave cleanly, come back, die while claiming. */
			int r = -1;

			w_run1(w, 0, s_leave, &r);
			CHECK_EQ(r, 0);
			w_settle(w, 3 * W_MS);
		}
		w->h[0]->trig_site = sites[i];
		w->h[0]->trig_nth = 1;
		w->h[0]->trig_hits = 0;
		w->h[0]->trig_stall_ns = 0;
		w_run1(w, 0, s_site_victim, &a);
		CHECK_SEED(w, w->h[0]->killed);
		w_settle(w, 2 * W_LEASE);
		if (sites[i] != BEL_MH_F_REC_CLAIM)
			w_run1(w, 1, s_site_after, &a);
		check_reclaim(w, &d);
		w_final_check(w);
		if (w->s->violations || tap_case_failures > fails)
			fprintf(stderr, "# (killed after site %s)\n",
				bel_mh_sites[sites[i]].name);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

struct rejoin {
	struct world *w;
	int ret;
	u32 inc;
	u32 blk;
};

static void s_rejoin(struct sim_host *sh, void *arg)
{
	struct rejoin *a = arg;

	a->ret = sim_attach(sh);
	a->inc = le32_to_cpu(sh->mh.rec.incarnation);
}

static void s_after_rejoin(struct sim_host *sh, void *arg)
{
	struct rejoin *a = arg;
	u32 i, b;

	for (i = 0; i < 3; i++) {
		CHECK_SEED(a->w, w_pin(a->w, sh, 0, i, &b));
		w_release(a->w, sh, 0, b);
		CHECK_SEED(a->w, w_pin(a->w, sh, 0, 10 + i, &b));
		w_release(a->w, sh, 0, b);
	}
	CHECK_EQ(w_put(a->w, sh, 0, 99, &a->blk), BELUGA_PUBLISH_OK);
}

static void s_keys_by_id(struct sim_host *sh, void *arg)
{
	struct world *w = arg;
	u32 i;

	for (i = 0; i < 3; i++)
		CHECK_EQ(w_put(w, sh, 0, 10 * sh->host_id + i, NULL),
			 BELUGA_PUBLISH_OK);
}

static void test_rejoin(void)
{
	struct world *w = w_up(2, ids3, seed_of(18, 0));
	sim_fn fns[SIM_MAX_HOSTS] = { s_keys_by_id, s_keys_by_id };
	void *args[SIM_MAX_HOSTS] = { w, w };
	struct rejoin a = { .w = w, .ret = -1 };
	struct death d = { .w = w };
	u32 inc0 = le32_to_cpu(w->h[0]->mh.rec.incarnation);

	w_run(w, fns, args);
	sim_kill(w->h[0]);
	w_settle(w, 2 * W_MS);
	CHECK(w->h[0]->killed);
	w_settle(w, 2 * W_LEASE);
	CHECK_EQ(w_owner(w, 0), 1);
	w_run1(w, 0, s_rejoin, &a);
	CHECK_EQ(a.ret, 0);
	CHECK_EQ(a.inc, inc0 + 1);
	/* The adopter hands the home partition back. */
	w_settle(w, 5 * W_MS);
	CHECK_EQ(w_owner(w, 0), 0);
	w_run1(w, 0, s_after_rejoin, &a);
	CHECK(a.blk < w->h[0]->mh.part[1].first);
	check_reclaim(w, &d);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

struct stall {
	struct world *w;
	s32 first;
	int second;
	s32 other;
};

static void s_stalled(struct sim_host *sh, void *arg)
{
	struct stall *a = arg;
	u32 b;

	sh->trig_site = BEL_MH_F_ENT_TENTATIVE;
	sh->trig_nth = 1;
	sh->trig_hits = 0;
	sh->trig_stall_ns = 3 * W_LEASE;
	a->first = w_put(a->w, sh, 0, 4242, NULL);
	a->second = w_alloc1(a->w, sh, 1, &b);
}

static void s_stall_other(struct sim_host *sh, void *arg)
{
	struct stall *a = arg;

	sim_idle(sh, W_LEASE + W_LEASE / 2);
	a->other = w_put(a->w, sh, 0, 4242, NULL);
	sim_idle(sh, 2 * W_LEASE);
}

static void s_drop_rejoin(struct sim_host *sh, void *arg)
{
	int *ret = arg;

	sim_drop(sh);
	*ret = sim_attach(sh);
}

/*
 * The heartbeat runs beside every operation (it takes only rec_lock): one
 * that lands between the self-fence check's read of the clock and its
 * read of last_hb must not fence the host (an age below zero, as a u64).
 * Seen in the fake kernel's shared pool, whose heartbeat and tick threads
 * wake together, as kmod/mh.c's two works do.
 */
static struct bel_mh_host *race_host;

static u64 race_now_ns(void *priv)
{
	(void)priv;
	/* The heartbeat thread stores a time read just after ours. */
	BEL_WRITE(race_host->last_hb, 1600);
	return 1500;
}

static void test_heartbeat_beside_fence_check(void)
{
	static const struct bel_mh_mem_ops ops = { .now_ns = race_now_ns };
	static struct bel_mh_host h;

	memset(&h, 0, sizeof(h));
	h.ops = &ops;
	h.leased = true;
	h.fence_ns = 1000000000ULL;
	h.last_hb = 1000;
	race_host = &h;
	CHECK(!bel_mh_fenced_now(&h));
	CHECK(!h.fenced);
}

static void test_stall_fence(void)
{
	struct world *w = w_up(2, ids3, seed_of(19, 0));
	sim_fn fns[SIM_MAX_HOSTS] = { s_stalled, s_stall_other };
	struct stall a = { .w = w };
	void *args[SIM_MAX_HOSTS] = { &a, &a };
	struct death d = { .w = w };
	int ret = -1;

	w_run(w, fns, args);
	/* The stalled host noticed and stored nothing (the sim checks). */
	CHECK_EQ(a.second, -ESTALE);
	CHECK_EQ(a.other, BELUGA_PUBLISH_OK);
	CHECK(w->h[0]->mh.fenced);
	CHECK_EQ(w_dev_published(w, 4242, NULL, NULL), 1);
	w_run1(w, 0, s_drop_rejoin, &ret);
	CHECK_EQ(ret, 0);
	check_reclaim(w, &d);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Issue 21, the device lease: a host whose devices may pin blocks says so
 * in its record with W, and the others hold it alive for lease + W +
 * lease/2 of silence, not one lease; its next incarnation waits as long.
 * Host 0 pins a key of host 1's partition, declares devices (or not, in
 * the control round) and crashes at once, before another heartbeat could
 * carry the record out of its cache. Host 1 notes when it holds host 0
 * dead (from then on it may reuse the pinned block).
 */
#define DEV_W_MS	(2U * W_LEASE_MS)

struct dev_lease {
	struct world *w;
	bool declare;
	int ret;
	u64 t_declared;		/* clock after the lease reached the media */
	u64 t_dead;		/* host 1 held host 0 dead */
	u32 b;
};

static void s_dev_put10(struct sim_host *sh, void *arg)
{
	struct dev_lease *a = arg;

	CHECK_EQ(w_put(a->w, sh, 0, 10, NULL), BELUGA_PUBLISH_OK);
}

static void s_dev_victim(struct sim_host *sh, void *arg)
{
	struct dev_lease *a = arg;

	sim_maybe_tick(sh);
	REQUIRE(w_pin(a->w, sh, 0, 10, &a->b));
	if (a->declare)
		a->ret = bel_mh_device_lease(&sh->mh, true, DEV_W_MS);
	a->t_declared = sh->sim->clock;
	sh->kill_pending = true;
	sim_yield(sh);
}

static void s_dev_watch(struct sim_host *sh, void *arg)
{
	struct dev_lease *a = arg;

	while (!a->t_dead && (!a->t_declared ||
			      sh->sim->clock < a->t_declared + 10 * W_LEASE)) {
		sim_idle(sh, W_MS / 10);
		if (a->t_declared && !bel_mh_alive(&sh->mh, 0))
			a->t_dead = sh->sim->clock;
	}
}

static void s_dev_rejoin(struct sim_host *sh, void *arg)
{
	u64 *took = arg;
	u64 t0 = sh->sim->clock;
	int ret = sim_attach(sh);

	CHECK_EQ(ret, 0);
	*took = sh->sim->clock - t0;
}

static void test_device_lease(void)
{
	const u64 lease = W_LEASE, dev_w = (u64)DEV_W_MS * W_MS;
	int declare;

	for (declare = 0; declare < 2; declare++) {
		struct world *w = w_up(2, ids3, seed_of(41, declare));
		sim_fn fns[SIM_MAX_HOSTS] = { s_dev_victim, s_dev_watch };
		struct dev_lease a = { .w = w, .declare = declare };
		void *args[SIM_MAX_HOSTS] = { &a, &a };
		struct hosts_arg ha;
		u64 took = 0;

		w_run1(w, 1, s_dev_put10, &a);
		w_run(w, fns, args);
		CHECK(w->h[0]->killed);
		CHECK_EQ(a.ret, 0);
		REQUIRE(a.t_dead);
		fprintf(stderr, "# device lease %s: host 0 held dead %.1f ms after it declared (lease %.0f ms, W %.0f ms)\n",
			declare ? "declared" : "not declared",
			(double)(a.t_dead - a.t_declared) / W_MS,
			(double)lease / W_MS, (double)dev_w / W_MS);
		if (declare) {
			CHECK(a.t_dead - a.t_declared > lease + dev_w);
			/* ... and not much later: W is finite. */
			CHECK(a.t_dead - a.t_declared <=
			      lease + dev_w + lease / 2 + 2 * W_MS);
		} else {
			CHECK(a.t_dead - a.t_declared < lease + dev_w);
		}
		w_run1(w, 1, s_hosts, &ha);
		CHECK(ha.info[1].lease_aware && !ha.info[1].device_pins);
		CHECK_EQ(ha.info[0].device_pins, declare);
		CHECK_EQ(ha.info[0].device_fence_ms, declare ? DEV_W_MS : 0);
		/* The next incarnation waits as long as the peers did. */
		w_run1(w, 0, s_dev_rejoin, &took);
		if (declare)
			CHECK(took > lease + dev_w);
		else
			CHECK(took < lease + dev_w);
		w_final_check(w);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

static void s_dev_declare(struct sim_host *sh, void *arg)
{
	struct dev_lease *a = arg;

	sim_maybe_tick(sh);
	a->ret = bel_mh_device_lease(&sh->mh, true, DEV_W_MS);
}

static void s_dev_unsafe(struct sim_host *sh, void *arg)
{
	bool *unsafe = arg;

	sim_idle(sh, 3 * W_MS);
	*unsafe = bel_mh_device_lease_unsafe(&sh->mh);
}

/*
 * A host of format 1.2 (no LEASE_AWARE in its record) reuses after one
 * lease: no device lease is granted while one is alive, and a lease taken
 * before it joined is reported unsafe, so that the devices let go.
 */
static void test_device_lease_compat(void)
{
	struct world *w = w_up(2, ids3, seed_of(42, 0));
	struct dev_lease a = { .w = w };
	bool unsafe = true;

	w_run1(w, 0, s_dev_declare, &a);
	CHECK_EQ(a.ret, 0);
	w_run1(w, 0, s_dev_unsafe, &unsafe);
	CHECK(!unsafe);
	w_run1(w, 0, s_dev_declare, &a);
	CHECK_EQ(a.ret, 0);
	/* Host 1 now writes its record as a 1.2 module does. */
	w->h[1]->mh.rec.flags = 0;
	w_settle(w, 3 * W_MS);
	w_run1(w, 0, s_dev_unsafe, &unsafe);
	CHECK(unsafe);
	w_run1(w, 0, s_dev_declare, &a);
	CHECK_EQ(a.ret, -EPROTO);
	/* W out of range. */
	CHECK_EQ(bel_mh_device_lease(&w->h[0]->mh, true, 0), -ERANGE);
	CHECK_EQ(bel_mh_device_lease(&w->h[0]->mh, true,
				     BEL_MH_REC_FENCE_MAX_MS + 1), -ERANGE);
	w->h[1]->mh.rec.flags = cpu_to_le32(BEL_MH_REC_LEASE_AWARE);
	w_settle(w, 3 * W_MS);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Review finding 2: the host stalls right after a store of shared metadata
 * reached its cache and before the flush, past its fence deadline but
 * within its lease (an interrupt, an SMI, a preempted vCPU). The dirty line
 * must reach the device at once or never: a line left dirty is written
 * back by the hardware whenever it likes, or by the first invalidate after
 * the rejoin, over what the adopter of the partition wrote meanwhile.
 */
struct store_stall {
	struct world *w;
	u32 area;		/* 0: index entries, 1: bucket heads */
	s32 first;
	int ret;
};

static void s_store_stall(struct sim_host *sh, void *arg)
{
	struct store_stall *a = arg;
	const struct bel_mh_geo *g = &sh->mh.geo;

	/* The stall ends past lease/2 since this heartbeat, within the lease. */
	bel_mh_heartbeat(&sh->mh);
	if (a->area == 0) {
		sh->trig_write_lo = g->index_off;
		sh->trig_write_hi = g->index_off + (u64)g->nr_blocks * 64;
	} else {
		sh->trig_write_lo = g->bucket_off;
		sh->trig_write_hi = g->bucket_off + g->bucket_stride * g->max_hosts;
	}
	sh->trig_write_stall_ns = W_LEASE / 2 + W_LEASE / 4;
	a->first = w_put(a->w, sh, 0, 4343, NULL);
	sh->trig_write_stall_ns = 0;
}

static void s_store_adopter(struct sim_host *sh, void *arg)
{
	struct store_stall *a = arg;
	u32 i;

	/* Adopt the stalled host's partition, then use every block of it. */
	sim_idle(sh, 2 * W_LEASE);
	for (i = 0; i < 2 * W_MAXB / 16; i++) {
		sim_maybe_tick(sh);
		w_put(a->w, sh, 0, 7000 + i, NULL);
	}
	sim_idle(sh, W_LEASE);
}

static void s_store_rejoin(struct sim_host *sh, void *arg)
{
	struct store_stall *a = arg;
	u32 i, b;

	sim_drop(sh);
	a->ret = sim_attach(sh);
	if (a->ret)
		return;
	sim_idle(sh, 3 * W_MS);
	for (i = 0; i < 40; i++) {
		sim_maybe_tick(sh);
		if (w_pin(a->w, sh, 0, 7000 + i, &b))
			w_release(a->w, sh, 0, b);
	}
	sim_idle(sh, W_LEASE);
}

static void test_stall_in_store(void)
{
	u32 area;

	for (area = 0; area < 2; area++) {
		struct world *w = w_up(2, ids3, seed_of(27, area));
		struct store_stall a = { .w = w, .area = area, .ret = -1 };
		sim_fn fns[SIM_MAX_HOSTS] = { s_store_stall, s_store_adopter };
		void *args[SIM_MAX_HOSTS] = { &a, &a };

		w_run(w, fns, args);
		CHECK_SEED(w, a.first == -ESTALE);
		CHECK_SEED(w, w->h[0]->mh.fenced);
		w_run1(w, 0, s_store_rejoin, &a);
		CHECK_SEED(w, a.ret == 0);
		w_settle(w, W_LEASE);
		w_final_check(w);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

/*
 * Review finding 8: the host fences itself between announcing a pin of a
 * foreign block and checking the entry. Other hosts may not respect that
 * pin: LOOKUP must not report it (-ESTALE, nothing pinned).
 */
struct pin_fence {
	struct world *w;
	int ret;
	u32 hits;
};

static void s_pin_fence_put(struct sim_host *sh, void *arg)
{
	struct pin_fence *a = arg;

	CHECK_EQ(w_put(a->w, sh, 0, 4545, NULL), BELUGA_PUBLISH_OK);
}

static void s_pin_fence(struct sim_host *sh, void *arg)
{
	struct pin_fence *a = arg;
	struct beluga_key key = w_key(4545);
	u64 off = ~0ULL;

	bel_mh_heartbeat(&sh->mh);
	sh->trig_site = BEL_MH_F_PIN;
	sh->trig_nth = 1;
	sh->trig_hits = 0;
	sh->trig_stall_ns = W_LEASE / 2 + W_LEASE / 4;
	a->hits = 99;
	a->ret = bel_mh_lookup(&sh->cl[0], W_NS, 1, &key, true, &off,
			       &a->hits);
	sh->trig_site = 0;
}

static void test_pin_fenced(void)
{
	struct world *w = w_up(2, ids3, seed_of(28, 0));
	struct pin_fence a = { .w = w };
	int ret = -1;

	w_run1(w, 1, s_pin_fence_put, &a);
	w_run1(w, 0, s_pin_fence, &a);
	CHECK_EQ(a.ret, -ESTALE);
	CHECK_EQ(a.hits, 0);
	CHECK_EQ(w->h[0]->mh.nr_pins, 0);
	CHECK_EQ(w->h[0]->cl[0].nr_pins, 0);
	w_run1(w, 0, s_drop_rejoin, &ret);
	CHECK_EQ(ret, 0);
	w_settle(w, 3 * W_MS);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Review finding 14: while host 0 is fenced, the pool is formatted again.
 * Its rejoin, which expects the pool it left, must refuse before writing
 * anything: its host record and format intent stay as the new pool has
 * them.
 */
static void s_reformat(struct sim_host *sh, void *arg)
{
	int *ret = arg;

	sim_drop(sh);
	sh->cfg.format = true;
	*ret = sim_attach(sh);
	sh->cfg.format = false;
}

static void s_rejoin_expect(struct sim_host *sh, void *arg)
{
	int *ret = arg;

	sim_drop(sh);
	*ret = sim_attach(sh);
}

static void test_rejoin_reformatted(void)
{
	struct world *w = w_up(2, ids3, seed_of(30, 0));
	struct sim_host *h0 = w->h[0];
	struct bel_mh_host_rec before, after;
	u8 ib[64], ia[64];
	u64 rec_off, int_off = BEL_MH_INTENT_OFF;
	int r1 = -1, r0 = -1;

	/* Host 0 goes silent (fenced, as if stalled) ... */
	h0->mh.fenced = true;
	w_settle(w, 2 * W_LEASE);
	/* ... and host 1 formats the pool again meanwhile. */
	w_run1(w, 1, s_leave, &r1);
	CHECK_EQ(r1, 0);
	w_run1(w, 1, s_reformat, &r1);
	CHECK_EQ(r1, 0);
	w_settle(w, 2 * W_MS);
	rec_off = bel_mh_rec_off(&w->h[1]->mh.geo, 0);
	sim_dev_read(w->s, rec_off, &before, sizeof(before));
	sim_dev_read(w->s, int_off, ib, sizeof(ib));
	h0->cfg.join_only = true;
	h0->cfg.expect_identity = true;
	memcpy(h0->cfg.expect_uuid, h0->mh.geo.uuid, 16);
	h0->cfg.expect_nr_blocks = h0->mh.geo.nr_blocks;
	w_run1(w, 0, s_rejoin_expect, &r0);
	CHECK_EQ(r0, -EINVAL);
	sim_dev_read(w->s, rec_off, &after, sizeof(after));
	sim_dev_read(w->s, int_off, ia, sizeof(ia));
	CHECK(!memcmp(&before, &after, sizeof(before)));
	CHECK(!memcmp(ib, ia, sizeof(ib)));
	CHECK(!h0->attached);
	/* Without the expectation it is a plain join of the new pool. */
	h0->cfg.expect_identity = false;
	w_run1(w, 0, s_attach, &r0);
	CHECK_EQ(r0, 0);
	w_settle(w, 3 * W_MS);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Review finding 17: the takeover's rebuild walks every bucket of a
 * partition, and a client's close scans every block; both pass preemption
 * points (so the kernel's heartbeat work runs) in a pool with many.
 */
static void s_long_close(struct sim_host *sh, void *arg)
{
	u64 *rescheds = arg;
	u64 off;
	int i;

	for (i = 0; i < 8; i++)
		CHECK_EQ(bel_mh_alloc(&sh->cl[2], 1, &off, NULL, NULL), 0);
	*rescheds = sh->rescheds;
	bel_mh_client_release(&sh->cl[2]);
	*rescheds = sh->rescheds - *rescheds;
	bel_mh_client_init(&sh->mh, &sh->cl[2]);
}

static void test_long_walks(void)
{
	u64 saved = g_w_region, rescheds = 0;
	struct world *w;
	u32 buckets;

	g_w_region = 48ULL << 20;	/* 4 partitions of 2^10 buckets */
	w = w_up(1, ids3, seed_of(31, 0));
	g_w_region = saved;
	buckets = w->h[0]->mh.geo.buckets;
	CHECK(buckets >= 4 * BEL_MH_RESCHED_EVERY);
	/* Four rebuilds at attach (every partition is ours). */
	CHECK(w->h[0]->rescheds >=
	      4 * (buckets / BEL_MH_RESCHED_EVERY - 1));
	CHECK(!w->h[0]->mh.fenced);
	w_run1(w, 0, s_long_close, &rescheds);
	CHECK(rescheds >= 1);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/*
 * Review finding 13: timings are bounded (a lease read from media, or
 * asked for at format, of at most BEL_MH_MAX_LEASE_MS; a heartbeat no
 * shorter than the joining host can keep), and the waits of attach end
 * with -EINTR when the caller is killed.
 */
struct killable {
	int ret;
	u64 took;
};

static void s_attach_timed(struct sim_host *sh, void *arg)
{
	struct killable *a = arg;
	u64 t0 = sh->sim->clock;

	a->ret = sim_attach(sh);
	a->took = sh->sim->clock - t0;
}

static void test_attach_bounds(void)
{
	struct world *w = w_new(2, ids3, seed_of(33, 0));
	struct killable a = { .ret = 1 };
	u32 lease = w->h[0]->cfg.lease_ms;

	/* A lease beyond the bound cannot be formatted. */
	w->h[0]->cfg.lease_ms = BEL_MH_MAX_LEASE_MS + 1;
	w_run1(w, 0, s_attach_timed, &a);
	CHECK_EQ(a.ret, -EINVAL);
	w->h[0]->cfg.lease_ms = lease;
	w_run1(w, 0, s_attach_timed, &a);
	CHECK_EQ(a.ret, 0);
	/* A host that cannot keep the pool's 1 ms heartbeat is refused. */
	w->h[1]->cfg.min_heartbeat_ms = 2;
	w_run1(w, 1, s_attach_timed, &a);
	CHECK_EQ(a.ret, -EINVAL);
	CHECK(!strcmp(w->h[1]->mh.why ? w->h[1]->mh.why : "",
		      "the pool's heartbeat or lease is out of range for this host"));
	w->h[1]->cfg.min_heartbeat_ms = 0;
	w_run1(w, 1, s_attach_timed, &a);
	CHECK_EQ(a.ret, 0);
	w_settle(w, 3 * W_MS);
	/* Host 0 dies; its next attach waits a lease, unless it is killed. */
	sim_kill(w->h[0]);
	w_settle(w, W_MS);
	CHECK(w->h[0]->killed);
	w->h[0]->fatal_signal = true;
	w_run1(w, 0, s_attach_timed, &a);
	CHECK_EQ(a.ret, -EINTR);
	CHECK(a.took < W_LEASE / 4);
	w->h[0]->fatal_signal = false;
	w_run1(w, 0, s_attach_timed, &a);
	CHECK_EQ(a.ret, 0);
	CHECK(a.took >= W_LEASE);
	w_settle(w, 3 * W_MS);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/* --- leaving ------------------------------------------------------------------------- */

struct leave {
	struct world *w;
	u32 pin_blk;
	int busy;
	int ret;
};

static void s_leave_busy(struct sim_host *sh, void *arg)
{
	struct leave *a = arg;
	u32 b;

	CHECK_SEED(a->w, w_pin(a->w, sh, 0, 0, &b));
	a->busy = bel_mh_leave(&sh->mh);
	w_release(a->w, sh, 0, b);
	a->ret = sim_leave(sh);
}

static void s_pin_key0(struct sim_host *sh, void *arg)
{
	struct leave *a = arg;

	CHECK_SEED(a->w, w_pin(a->w, sh, 0, 0, &a->pin_blk));
}

static void s_after_leave(struct sim_host *sh, void *arg)
{
	struct leave *a = arg;
	u32 i, x, b;

	for (x = 0; x < 3; x++)
		for (i = 0; i < 3; i++) {
			CHECK_SEED(a->w, w_pin(a->w, sh, 1, 10 * x + i, &b));
			w_release(a->w, sh, 1, b);
		}
	if (sh->host_id == 1) {
		w_reverify(a->w, sh, 0, a->pin_blk);
		w_release(a->w, sh, 0, a->pin_blk);
	}
}

static void test_clean_leave(void)
{
	struct world *w = w_up(3, ids3, seed_of(20, 0));
	sim_fn fns[SIM_MAX_HOSTS] = { s_keys_by_id, s_keys_by_id,
				      s_keys_by_id };
	void *args[SIM_MAX_HOSTS] = { w, w, w };
	struct leave a = { .w = w, .busy = 1, .ret = -1 };
	struct death d = { .w = w };

	w_run(w, fns, args);
	w_run1(w, 1, s_pin_key0, &a);
	w_run1(w, 2, s_leave_busy, &a);
	CHECK_EQ(a.busy, -EBUSY);
	CHECK_EQ(a.ret, 0);
	/* Its partition moves at once, without waiting for a lease. */
	w_settle(w, 3 * W_MS);
	CHECK(w_owner(w, 2) == 0 || w_owner(w, 2) == 1);
	w_run1(w, 0, s_after_leave, &a);
	w_run1(w, 1, s_after_leave, &a);
	check_reclaim(w, &d);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

static void s_count_keys(struct sim_host *sh, void *arg)
{
	u32 *hits = arg;
	u32 i, x, b;

	*hits = 0;
	for (x = 0; x < 2; x++)
		for (i = 0; i < 3; i++) {
			u32 k = 10 * x + i;

			if (w_probe(NULL, sh, &k, 1) == 1)
				(*hits)++;
		}
	(void)b;
}

static void s_verify_keys(struct sim_host *sh, void *arg)
{
	struct world *w = arg;
	u32 i, x, b;

	for (x = 0; x < 2; x++)
		for (i = 0; i < 3; i++) {
			CHECK_SEED(w, w_pin(w, sh, 0, 10 * x + i, &b));
			w_release(w, sh, 0, b);
		}
}

static void test_last_leave_reuse(void)
{
	struct world *w = w_up(2, ids3, seed_of(21, 0));
	sim_fn fns[SIM_MAX_HOSTS] = { s_keys_by_id, s_keys_by_id };
	void *args[SIM_MAX_HOSTS] = { w, w };
	struct sim_host *h2 = w_add(w, 2);
	int r0 = -1, r1 = -1, r = -1;
	u32 hits = 99;

	w_run(w, fns, args);
	w_run1(w, 1, s_leave, &r1);
	w_run1(w, 0, s_leave, &r0);
	CHECK_EQ(r0, 0);
	CHECK_EQ(r1, 0);
	/* The next attach reuses the pool and finds every key. */
	w_run1(w, h2->idx, s_attach, &r);
	CHECK_EQ(r, 0);
	CHECK(!h2->mh.formatted);
	w_settle(w, 3 * W_MS);
	w_run1(w, h2->idx, s_verify_keys, w);
	w_final_check(w);
	w_run1(w, h2->idx, s_leave, &r);
	CHECK_EQ(r, 0);
	/* Reformat on request: everything is gone. */
	w->h[0]->cfg.format = true;
	w_run1(w, 0, s_attach, &r);
	CHECK_EQ(r, 0);
	CHECK(w->h[0]->mh.formatted);
	memset(w->kblock, 0xff, sizeof(w->kblock));
	memset(w->bstate, 0, sizeof(w->bstate));
	w->h[1]->cfg.format = false;
	w_run1(w, 1, s_attach, &r);
	CHECK_EQ(r, 0);
	w_settle(w, 3 * W_MS);
	w_run1(w, 1, s_count_keys, &hits);
	CHECK_EQ(hits, 0);
	w_final_check(w);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/* --- everything at once ------------------------------------------------------------------ */

struct rnd {
	struct world *w;
	u32 held[SIM_MAX_HOSTS][8];
	u32 held_key[SIM_MAX_HOSTS][8];
	u32 nheld[SIM_MAX_HOSTS];
	u32 alloc[SIM_MAX_HOSTS][8];
	u32 nalloc[SIM_MAX_HOSTS];
	int iters;
};

static void s_random(struct sim_host *sh, void *arg)
{
	struct rnd *a = arg;
	int i = sh->idx, it;

	for (it = 0; it < a->iters; it++) {
		u64 op = sim_rand(a->w->s) % 6;
		u32 k = 60000 + (u32)(sim_rand(a->w->s) % 40), b;

		sim_maybe_tick(sh);
		if (op == 0 || op == 1) {
			w_put(a->w, sh, 0, k, NULL);
		} else if (op == 2 && a->nheld[i] < 8) {
			if (w_pin(a->w, sh, 1, k, &b)) {
				a->held[i][a->nheld[i]] = b;
				a->held_key[i][a->nheld[i]++] = k;
			}
		} else if (op == 3 && a->nheld[i]) {
			u32 j = (u32)(sim_rand(a->w->s) % a->nheld[i]);

			w_reverify(a->w, sh, a->held_key[i][j],
				   a->held[i][j]);
			w_release(a->w, sh, 1, a->held[i][j]);
			a->held[i][j] = a->held[i][--a->nheld[i]];
			a->held_key[i][j] = a->held_key[i][a->nheld[i]];
		} else if (op == 4 && a->nalloc[i] < 8) {
			if (w_alloc1(a->w, sh, 2, &b) == 0)
				a->alloc[i][a->nalloc[i]++] = b;
		} else if (op == 5 && a->nalloc[i]) {
			b = a->alloc[i][--a->nalloc[i]];
			if (sim_rand(a->w->s) % 2) {
				w_free_block(a->w, sh, 2, b);
			} else {
				w_write(a->w, sh, b, k);
				w_publish(a->w, sh, 2, k, b);
			}
		}
	}
	while (a->nheld[i]) {
		a->nheld[i]--;
		w_release(a->w, sh, 1, a->held[i][a->nheld[i]]);
	}
	while (a->nalloc[i])
		w_free_block(a->w, sh, 2, a->alloc[i][--a->nalloc[i]]);
}

static void test_random_workload(void)
{
	int r;

	for (r = 0; r < rounds(5); r++) {
		struct world *w = w_up(3, ids3, seed_of(22, r));
		sim_fn fns[SIM_MAX_HOSTS] = { s_random, s_random, s_random };
		struct rnd a;
		void *args[SIM_MAX_HOSTS] = { &a, &a, &a };

		memset(&a, 0, sizeof(a));
		a.w = w;
		a.iters = 150;
		w_run(w, fns, args);
		w_final_check(w);
		W_CHECK_CLEAN(w);
		w_free(w);
	}
}

/* --- main --------------------------------------------------------------------------------- */

/* --- memory errors: retired blocks (format 1.2) ------------------------------ */

struct retire {
	struct world *w;
	u32 blk[4];		/* blocks of keys 700.. (published by host 0) */
	u32 free_blk;		/* a free block of partition 0 */
	u32 alloc_blk;		/* allocated by host 0 when retired */
	u32 pinned;		/* host 1's pin on blk[0] */
	int ret[4];
	s32 pub;
	struct bel_mh_stats st[SIM_MAX_HOSTS];
	u32 got[SIM_MAX_HOSTS];	/* w_alloc_all */
	u32 hits[SIM_MAX_HOSTS];
};

static void s_ret_stats(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;

	sim_maybe_tick(sh);
	bel_mh_stats(&sh->mh, &a->st[sh->idx]);
}

/* Count-only lookup of keys 700..703 on this host. */
static void s_ret_probe(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;
	u32 i, n = 0;

	sim_maybe_tick(sh);
	for (i = 0; i < 4; i++) {
		u32 k = 700 + i;

		n += w_probe(a->w, sh, &k, 1);
	}
	a->hits[sh->idx] = n;
}

/* Everything this host can allocate (evicting what it owns), then freed. */
static void s_ret_alloc_all(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;

	sim_maybe_tick(sh);
	a->got[sh->idx] = w_alloc_all(a->w, sh, 2);
}

/*
 * After a takeover: host @h, the adopter, counts @retired blocks, finds
 * @hits of keys 700..703, and can allocate all @nr blocks but the retired.
 */
static void ret_check_adopted(struct world *w, struct retire *a, int h, u32 retired,
			      u32 hits, u32 nr)
{
	w_run1(w, h, s_ret_stats, a);
	CHECK_EQ(a->st[h].retired_blocks, retired);
	w_run1(w, h, s_ret_probe, a);
	CHECK_EQ(a->hits[h], hits);
	w_run1(w, h, s_ret_alloc_all, a);
	CHECK_EQ(a->got[h], nr - retired);
	w_final_check(w);
}

/*
 * Every one of the first @nh hosts allocates all it can, in turn; together
 * they get @want blocks (all but the retired ones).
 */
static void ret_check_alloc_all(struct world *w, struct retire *a, int nh,
				u32 want)
{
	u32 got = 0;
	int i;

	for (i = 0; i < nh; i++) {
		a->got[i] = 0;
		w_run1(w, i, s_ret_alloc_all, a);
		got += a->got[i];
	}
	CHECK_EQ(got, want);
	w_final_check(w);
}

/* Host 0: keys 700..703 in its home partition, a free and an allocated block. */
static void s_ret_setup(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;
	u32 i;

	for (i = 0; i < 4; i++)
		CHECK_EQ(w_put(a->w, sh, 0, 700 + i, &a->blk[i]),
			 BELUGA_PUBLISH_OK);
	CHECK_EQ(w_alloc1(a->w, sh, 1, &a->alloc_blk), 0);
	a->free_blk = sh->mh.part[0].free_head;
	CHECK(a->free_blk < sh->mh.part[0].first + sh->mh.part[0].nr);
	for (i = 0; i < 4; i++)
		CHECK(a->blk[i] < sh->mh.part[1].first);
}

/* Host 1 pins key 700 (host 0's partition) and keeps the pin. */
static void s_ret_pin(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;

	CHECK(w_pin(a->w, sh, 0, 700, &a->pinned));
	CHECK_EQ(a->pinned, a->blk[0]);
}

/* Host 0, the owner, learns of errors in a published, a free, an allocated block. */
static void s_ret_owner(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;
	struct bel_mh_stats st;
	u32 k = 700;

	a->ret[0] = bel_mh_retire(&sh->mh, a->blk[0]);
	a->ret[1] = bel_mh_retire(&sh->mh, a->free_blk);
	a->ret[2] = bel_mh_retire(&sh->mh, a->alloc_blk);
	a->ret[3] = bel_mh_retire(&sh->mh, a->blk[0]);
	/* Gone from the index at once. */
	CHECK_EQ(w_probe(a->w, sh, &k, 1), 0);
	bel_mh_stats(&sh->mh, &st);
	CHECK_EQ(st.retired_blocks, 2);
	CHECK_EQ(st.allocated_blocks, 1);
	/* The allocated one: PUBLISH answers -EIO, and it is out too. */
	a->pub = w_publish(a->w, sh, 1, 799, a->alloc_blk);
	a->w->bstate[a->alloc_blk] = 0;
	bel_mh_stats(&sh->mh, &st);
	CHECK_EQ(st.retired_blocks, 3);
	CHECK_EQ(st.allocated_blocks, 0);
	CHECK_EQ(st.retire_pending, 0);
	a->w->bretired[a->blk[0]] = 1;
	a->w->bretired[a->free_blk] = 1;
	a->w->bretired[a->alloc_blk] = 1;
}

static void s_ret_release(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;
	u64 off = w_off(sh, a->pinned);

	/* The pin outlived the retirement; it is released as any other. */
	CHECK_EQ(bel_mh_release(&sh->cl[0], 1, &off), 0);
	a->w->pins[sh->idx][a->pinned]--;
}

static void s_ret_rejoin(struct sim_host *sh, void *arg)
{
	int *ret = arg;

	*ret = sim_attach(sh);
}

/*
 * The owner of a partition retires a published block (another host pins
 * it), a free one and an allocated one. None is found by LOOKUP on any
 * host or handed out by any ALLOC, STATS counts them, and they stay
 * retired when the owner dies and a survivor takes the partition over,
 * when the owner comes back and takes it back, and after every host left
 * and joined again.
 */
static void test_retire_owned(void)
{
	struct world *w = w_up(2, ids3, seed_of(41, 0));
	struct retire a = { .w = w };
	u32 nr = w->geo.nr_blocks;
	int ret = -1, i;

	w_run1(w, 0, s_ret_setup, &a);
	w_run1(w, 1, s_ret_pin, &a);
	w_run1(w, 0, s_ret_owner, &a);
	CHECK_EQ(a.ret[0], BEL_MH_RETIRED_NOW);
	CHECK_EQ(a.ret[1], BEL_MH_RETIRED_NOW);
	CHECK_EQ(a.ret[2], BEL_MH_RETIRED_NOW);
	CHECK_EQ(a.ret[3], 0);
	CHECK_EQ(a.pub, -EIO);
	CHECK_EQ(w_dev_ent_state(w, a.blk[0]), BEL_MH_ENT_RETIRED);
	CHECK_EQ(w_dev_ent_state(w, a.free_blk), BEL_MH_ENT_RETIRED);
	CHECK_EQ(w_dev_ent_state(w, a.alloc_blk), BEL_MH_ENT_RETIRED);
	CHECK_EQ(w_dev_published(w, 700, NULL, NULL), 0);
	CHECK_EQ(w_dev_published(w, 799, NULL, NULL), 0);
	for (i = 0; i < 2; i++) {
		w_run1(w, i, s_ret_probe, &a);
		CHECK_EQ(a.hits[i], 3);
	}
	w_run1(w, 1, s_ret_release, &a);
	w_settle(w, 2 * W_MS);
	w_final_check(w);

	/* The owner dies; host 1 takes partition 0 over. */
	sim_kill(w->h[0]);
	w_settle(w, 2 * W_LEASE);
	CHECK_EQ(w_owner(w, 0), 1);
	ret_check_adopted(w, &a, 1, 3, 3, nr);

	/* It comes back and takes its home partition back. */
	w_run1(w, 0, s_ret_rejoin, &ret);
	CHECK_EQ(ret, 0);
	w_settle(w, 5 * W_MS);
	CHECK_EQ(w_owner(w, 0), 0);
	w_run1(w, 0, s_ret_stats, &a);
	w_run1(w, 1, s_ret_stats, &a);
	CHECK_EQ(a.st[0].retired_blocks, 3);
	CHECK_EQ(a.st[1].retired_blocks, 0);
	ret_check_alloc_all(w, &a, 2, nr - 3);

	/* Every host leaves; the pool is joined again. */
	for (i = 0; i < 2; i++) {
		ret = -1;
		w_run1(w, i, s_leave, &ret);
		CHECK_EQ(ret, 0);
	}
	for (i = 0; i < 2; i++) {
		ret = -1;
		w_run1(w, i, s_attach, &ret);
		CHECK_EQ(ret, 0);
	}
	w_settle(w, 5 * W_MS);
	w_run1(w, 0, s_ret_stats, &a);
	CHECK_EQ(a.st[0].retired_blocks, 3);
	ret_check_alloc_all(w, &a, 2, nr - 3);
	W_CHECK_CLEAN(w);
	w_free(w);
}

/* Host 0 frees the block that s_ret_setup left allocated. */
static void s_ret_free_alloc(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;

	w_free_block(a->w, sh, 1, a->alloc_blk);
}

/* Hosts 1 and 2 look up key 700 (so its entry is in their caches). */
static void s_ret_look(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;
	u32 b;

	CHECK(w_pin(a->w, sh, 0, 700, &b));
	w_release(a->w, sh, 0, b);
	CHECK(w_pin(a->w, sh, 0, 701, &b));
	w_release(a->w, sh, 0, b);
}

/* Host 1 finds errors in blocks of host 0's partition: it asks. */
static void s_ret_ask(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;
	struct bel_mh_stats st;
	u32 k = 700;

	a->ret[0] = bel_mh_retire(&sh->mh, a->blk[0]);
	a->ret[1] = bel_mh_retire(&sh->mh, a->blk[0]);
	/* This host no longer returns it, before the owner acts. */
	CHECK_EQ(w_probe(a->w, sh, &k, 1), 0);
	bel_mh_stats(&sh->mh, &st);
	CHECK_EQ(st.retire_pending, 1);
}

/* Host 2 asks for key 701's block, and dies before anyone acts. */
static void s_ret_ask_die(struct sim_host *sh, void *arg)
{
	struct retire *a = arg;

	a->ret[2] = bel_mh_retire(&sh->mh, a->blk[1]);
	sim_kill(sh);
	sim_idle(sh, W_MS);
}

/*
 * A host that finds a memory error in another host's partition asks the
 * owner through its record: the owner retires the block at its next tick
 * (also when the asking host died meanwhile), the asking host stops
 * asking once the entry reads RETIRED, no host finds either block, and
 * they stay retired when the owner dies, its partition is taken over, and
 * it rejoins.
 */
static void test_retire_remote(void)
{
	struct world *w = w_up(3, ids3, seed_of(42, 0));
	struct retire a = { .w = w };
	u32 nr = w->geo.nr_blocks;
	int ret = -1, i, adopter;

	w_run1(w, 0, s_ret_setup, &a);
	/* Its allocation would hold partition 0 back from a takeover. */
	w_run1(w, 0, s_ret_free_alloc, &a);
	w_run1(w, 1, s_ret_look, &a);
	w_run1(w, 2, s_ret_look, &a);
	w_run1(w, 1, s_ret_ask, &a);
	CHECK_EQ(a.ret[0], BEL_MH_RETIRE_ASKED);
	CHECK_EQ(a.ret[1], 0);
	w_run1(w, 2, s_ret_ask_die, &a);
	CHECK_EQ(a.ret[2], BEL_MH_RETIRE_ASKED);
	CHECK(w->h[2]->killed);
	/* A few ticks: the owner retires both, host 1 sees it done. */
	w_settle(w, 4 * W_MS);
	CHECK_EQ(w_dev_ent_state(w, a.blk[0]), BEL_MH_ENT_RETIRED);
	CHECK_EQ(w_dev_ent_state(w, a.blk[1]), BEL_MH_ENT_RETIRED);
	a.w->bretired[a.blk[0]] = 1;
	a.w->bretired[a.blk[1]] = 1;
	w_run1(w, 1, s_ret_stats, &a);
	CHECK_EQ(a.st[1].retire_pending, 0);
	w_run1(w, 0, s_ret_stats, &a);
	CHECK_EQ(a.st[0].retired_blocks, 2);
	for (i = 0; i < 2; i++) {
		w_run1(w, i, s_ret_probe, &a);
		CHECK_EQ(a.hits[i], 2);
	}
	w_settle(w, 2 * W_LEASE);

	/* The owner dies: the adopter's rebuild finds both RETIRED. */
	sim_kill(w->h[0]);
	w_settle(w, 2 * W_LEASE);
	adopter = w_owner(w, 0);
	CHECK_EQ(adopter, 1);
	ret_check_adopted(w, &a, adopter, 2, 2, nr);

	/* The owner and the dead asker come back. */
	for (i = 0; i < 3; i += 2) {
		ret = -1;
		w_run1(w, i, s_ret_rejoin, &ret);
		CHECK_EQ(ret, 0);
	}
	w_settle(w, 5 * W_MS);
	CHECK_EQ(w_owner(w, 0), 0);
	w_run1(w, 0, s_ret_stats, &a);
	CHECK_EQ(a.st[0].retired_blocks, 2);
	/* Keys 702 and 703 went with host 1's ALLOC of everything. */
	for (i = 0; i < 3; i++) {
		w_run1(w, i, s_ret_probe, &a);
		CHECK_EQ(a.hits[i], 0);
	}
	ret_check_alloc_all(w, &a, 3, nr - 2);
	W_CHECK_CLEAN(w);
	w_free(w);
}

struct test {
	const char *name;
	void (*fn)(void);
};

#define T(fn) { #fn, fn }
static const struct test tests[] = {
	T(test_format_join),
	T(test_host_names),
	T(test_concurrent_format),
	T(test_refuse_mismatch),
	T(test_bucket_hash),
	T(test_format_1_0_joins),
	T(test_map_base),
	T(test_reformat_busy),
	T(test_duplicate_id),
	T(test_cross_host_rw),
	T(test_publish_race),
	T(test_pin_blocks_eviction),
	T(test_alloc_evicted),
	T(test_pin_evict_race),
	T(test_pin_flood),
	T(test_alloc_all_or_nothing),
	T(test_pin_validation),
	T(test_republish_after_evict),
	T(test_block_reuse_read),
	T(test_probe_chains),
	T(test_claim_race),
	T(test_host_death),
	T(test_kill_at_sites),
	T(test_rejoin),
	T(test_stall_fence),
	T(test_heartbeat_beside_fence_check),
	T(test_device_lease),
	T(test_device_lease_compat),
	T(test_stall_in_store),
	T(test_pin_fenced),
	T(test_rejoin_reformatted),
	T(test_long_walks),
	T(test_attach_bounds),
	T(test_clean_leave),
	T(test_last_leave_reuse),
	T(test_retire_owned),
	T(test_retire_remote),
	T(test_random_workload),
};

static int parse_site(const char *arg)
{
	int i;

	for (i = 1; i < BEL_MH_NR_SITES; i++)
		if (!strcmp(arg, bel_mh_sites[i].name))
			return i;
	i = atoi(arg);
	if (i <= 0 || i >= BEL_MH_NR_SITES) {
		fprintf(stderr, "unknown site '%s'\n", arg);
		exit(2);
	}
	return i;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "coherent", no_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 's' },
		{ "scale", required_argument, NULL, 'n' },
		{ "only", required_argument, NULL, 'o' },
		{ "disable-site", required_argument, NULL, 'd' },
		{ "list-sites", no_argument, NULL, 'l' },
		{ "tag", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	const char *only = NULL, *tag = NULL;
	char name[128];
	size_t i;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			g_coherent = true;
			break;
		case 's':
			g_seed = strtoull(optarg, NULL, 0);
			break;
		case 'n':
			g_scale = atoi(optarg);
			break;
		case 'o':
			only = optarg;
			break;
		case 't':
			tag = optarg;
			break;
		case 'd':
			bel_mh_site_off = parse_site(optarg);
			/* Hold stale lines as long as the hardware may. */
			g_evict = 0;
			g_writeback = 0;
			break;
		case 'l':
			for (c = 1; c < BEL_MH_NR_SITES; c++)
				printf("%d %s %s\n", c, bel_mh_sites[c].name,
				       bel_mh_sites[c].desc);
			return 0;
		default:
			return 2;
		}
	}
	printf("# multi-host protocol, %s mode, seed %llu%s%s\n",
	       g_coherent ? "coherent" : "non-coherent",
	       (unsigned long long)g_seed,
	       bel_mh_site_off ? ", disabled site " : "",
	       bel_mh_site_off ? bel_mh_sites[bel_mh_site_off].name : "");
	(void)g_round;
	for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (!only || strstr(tests[i].name, only)) {
			/* Unique result names when one TAP stream has several runs. */
			snprintf(name, sizeof(name), "%s%s%s", tests[i].name + 5,
				 tag ? ":" : "", tag ? tag : "");
			tap_run(name, tests[i].fn);
		}
	return tap_done();
}
