// SPDX-License-Identifier: GPL-2.0
/*
 * The test world: simulator setup, the oracle and device checks.
 */
#include "world.h"

bool g_coherent;
u32 g_w_hosts = W_HOSTS;
u64 g_w_region = W_REGION;
u32 g_switch = 300;
bool g_snapshot = true;
u32 g_evict = 2;
u32 g_writeback = 20;
int g_scale = 1;
u64 g_seed = 1;

bool w_live(struct world *w, int idx)
{
	return idx >= 0 && idx < w->n && !sim_effectively_fenced(w->h[idx]);
}

int w_owner(struct world *w, u32 p)
{
	int i, who = -1;

	for (i = 0; i < w->n; i++) {
		if (!w_live(w, i) || !w->h[i]->mh.part[p].owned)
			continue;
		if (who >= 0)
			return -2;
		who = i;
	}
	return who;
}

/* I1, at every yield: no partition has two live owners. */
static void w_check_owners(struct sim *s, void *arg)
{
	struct world *w = arg;
	u32 p;

	if (!w->geo.max_hosts)
		return;
	for (p = 0; p < w->geo.max_hosts; p++)
		if (w_owner(w, p) == -2)
			sim_violation(s, "partition %u has two owners", p);
}

struct sim_host *w_add(struct world *w, u32 id)
{
	struct sim_host *sh = sim_add_host(w->s, id);

	sh->cfg.block_size = W_BS;
	sh->cfg.max_hosts = g_w_hosts;
	sh->cfg.data_align = 4096;
	sh->cfg.heartbeat_ms = W_HB_MS;
	sh->cfg.lease_ms = W_LEASE_MS;
	sh->cfg.nonce = bel_mix64(w->seed * 131 + (u64)w->n + 7);
	w->h[w->n++] = sh;
	return sh;
}

struct world *w_new(int n, const u32 *ids, u64 seed)
{
	struct world *w = calloc(1, sizeof(*w));
	struct sim_cfg cfg;
	int i;

	if (!w)
		abort();
	memset(&cfg, 0, sizeof(cfg));
	cfg.region_size = g_w_region;
	cfg.coherent = g_coherent;
	cfg.snapshot = g_snapshot;
	cfg.evict_permille = g_evict;
	cfg.writeback_permille = g_writeback;
	cfg.switch_permille = g_switch;
	cfg.step_ns = 1000;
	cfg.seed = seed;
	w->seed = seed;
	w->s = sim_new(&cfg);
	w->s->check = w_check_owners;
	w->s->check_arg = w;
	for (i = 0; i < W_MAXK; i++)
		w->kblock[i] = -1;
	for (i = 0; i < n; i++)
		w_add(w, ids[i]);
	return w;
}

void w_free(struct world *w)
{
	sim_free(w->s);
	free(w);
}

void s_attach(struct sim_host *sh, void *arg)
{
	int *ret = arg;

	*ret = sim_attach(sh);
}

void s_leave(struct sim_host *sh, void *arg)
{
	int *ret = arg;

	*ret = sim_leave(sh);
}

static void w_note_geo(struct world *w)
{
	int i;

	for (i = 0; i < w->n; i++)
		if (w->h[i]->attached) {
			w->geo = w->h[i]->mh.geo;
			return;
		}
}

void w_run(struct world *w, sim_fn *fns, void **args)
{
	int i;

	for (i = 0; i < w->n; i++) {
		if (fns[i])
			sim_set(w->h[i], fns[i], args ? args[i] : NULL, false);
		else if (w->h[i]->attached)
			sim_set(w->h[i], sim_idle_fn, NULL, true);
	}
	sim_run(w->s);
	w_note_geo(w);
}

void w_run1(struct world *w, int i, sim_fn fn, void *arg)
{
	sim_fn fns[SIM_MAX_HOSTS] = { 0 };
	void *args[SIM_MAX_HOSTS] = { 0 };

	fns[i] = fn;
	args[i] = arg;
	w_run(w, fns, args);
}

static void s_settle(struct sim_host *sh, void *arg)
{
	sim_idle(sh, *(u64 *)arg);
}

void w_settle(struct world *w, u64 ns)
{
	sim_fn fns[SIM_MAX_HOSTS] = { 0 };
	void *args[SIM_MAX_HOSTS] = { 0 };
	int i;

	for (i = 0; i < w->n; i++)
		if (w->h[i]->attached) {
			fns[i] = s_settle;
			args[i] = &ns;
		}
	w_run(w, fns, args);
}

/* --- keys, payloads ---------------------------------------------------------- */

struct beluga_key w_key(u32 k)
{
	struct beluga_key key;

	key.lo = (u64)k * 0x9e3779b97f4a7c15ULL ^ 0x1234;
	key.hi = k;
	return key;
}

void w_pattern(u32 k, u32 writer, u8 *buf)
{
	u32 i;

	for (i = 0; i < W_BS / 8; i++) {
		u64 v = bel_mix64((u64)k * 1000003ULL + writer * 7919ULL +
				     i);

		memcpy(buf + i * 8, &v, 8);
	}
}

/* --- device inspection ---------------------------------------------------------- */

static u32 w_first(struct world *w, u32 p)
{
	return (u32)((u64)p * w->geo.nr_blocks / w->geo.max_hosts);
}

static bool w_ent_key(const struct bel_mh_entry *e, u32 k)
{
	struct beluga_key key = w_key(k);

	return le64_to_cpu(e->ns) == W_NS && le64_to_cpu(e->key_lo) == key.lo &&
	       le64_to_cpu(e->key_hi) == key.hi;
}

/*
 * Walk every chain of partition @p in the device: call @fn for each linked
 * entry. Returns false (and reports) when a chain is malformed.
 */
static bool w_dev_walk(struct world *w, u32 p,
		       void (*fn)(struct world *w, u32 p, u32 b,
				  const struct bel_mh_entry *e, void *arg),
		       void *arg)
{
	u32 first = w_first(w, p), end = w_first(w, p + 1), i;

	for (i = 0; i < w->geo.buckets; i++) {
		__le32 v;
		u32 n, steps = 0;

		sim_dev_read(w->s, bel_mh_bucket_off(&w->geo, p, i), &v,
			     sizeof(v));
		n = bel_mh_link_dec(v);
		while (n != BEL_MH_NONE) {
			struct bel_mh_entry e;

			if (n < first || n >= end || steps++ > end - first) {
				sim_violation(w->s, "partition %u bucket %u: bad chain at %u",
					      p, i, n);
				return false;
			}
			sim_dev_read(w->s, bel_mh_ent_off(&w->geo, n), &e,
				     sizeof(e));
			if (bel_mh_bucket_of(&w->geo, le64_to_cpu(e.ns),
					     le64_to_cpu(e.key_lo),
					     le64_to_cpu(e.key_hi)) != i) {
				sim_violation(w->s, "partition %u bucket %u: entry %u of another bucket",
					      p, i, n);
				return false;
			}
			fn(w, p, n, &e, arg);
			n = bel_mh_link_dec(e.next);
		}
	}
	return true;
}

struct w_find {
	u32 k;
	u32 want_block;		/* BEL_MH_NONE: any */
	bool evicting_ok;
	int n;
	u32 block;
	u32 writer;
};

static void w_find_fn(struct world *w, u32 p, u32 b,
		      const struct bel_mh_entry *e, void *arg)
{
	struct w_find *f = arg;
	u32 st = le32_to_cpu(e->state);

	(void)w;
	(void)p;
	if (!w_ent_key(e, f->k))
		return;
	if (st != BEL_MH_ENT_PUBLISHED &&
	    !(f->evicting_ok && st == BEL_MH_ENT_EVICTING))
		return;
	if (f->want_block != BEL_MH_NONE && b != f->want_block)
		return;
	f->n++;
	f->block = b;
	f->writer = le32_to_cpu(e->writer);
}

static int w_dev_find(struct world *w, struct w_find *f)
{
	u32 p;

	for (p = 0; p < w->geo.max_hosts; p++)
		w_dev_walk(w, p, w_find_fn, f);
	return f->n;
}

int w_dev_published(struct world *w, u32 k, u32 *block, u32 *writer)
{
	struct w_find f = { .k = k, .want_block = BEL_MH_NONE };

	w_dev_find(w, &f);
	if (f.n && block)
		*block = f.block;
	if (f.n && writer)
		*writer = f.writer;
	return f.n;
}

struct w_blk {
	u32 b;
	bool found;
	u32 k;
	u32 st;
};

static void w_blk_fn(struct world *w, u32 p, u32 b,
		     const struct bel_mh_entry *e, void *arg)
{
	struct w_blk *x = arg;

	(void)w;
	(void)p;
	if (b != x->b)
		return;
	x->found = true;
	x->k = (u32)le64_to_cpu(e->key_hi);
	x->st = le32_to_cpu(e->state);
}

/* Is block @b linked into a chain of the device index? */
static bool w_dev_block_live(struct world *w, u32 b, u32 *k_out, u32 *st_out)
{
	struct w_blk x = { .b = b };
	u32 p;

	for (p = 0; p < w->geo.max_hosts; p++)
		w_dev_walk(w, p, w_blk_fn, &x);
	*k_out = x.k;
	*st_out = x.st;
	return x.found;
}

u32 w_dev_ent_state(struct world *w, u32 b)
{
	struct bel_mh_entry e;

	sim_dev_read(w->s, bel_mh_ent_off(&w->geo, b), &e, sizeof(e));
	return le32_to_cpu(e.state);
}

/* --- oracle ------------------------------------------------------------------ */

static void w_oracle_alloc(struct world *w, struct sim_host *sh, u32 b)
{
	u32 k, st;
	int x;

	if (b >= W_MAXB) {
		sim_violation(w->s, "block %u out of range", b);
		return;
	}
	if (w->bretired[b])
		sim_violation(w->s, "host %u was handed retired block %u",
			      sh->host_id, b);
	if (w->bstate[b] == 1 && w->bhost[b] != sh->idx &&
	    w_live(w, w->bhost[b]))
		sim_violation(w->s, "block %u allocated to two hosts (%d, %d)",
			      b, w->bhost[b], sh->idx);
	if (w->bstate[b] == 2) {
		for (x = 0; x < w->n; x++)
			if (w->pins[x][b] && w_live(w, x))
				sim_violation(w->s, "block %u pinned by host %u was handed out by host %u",
					      b, w->h[x]->host_id, sh->host_id);
		if (w->kblock[w->bkey[b]] == (s32)b)
			w->kblock[w->bkey[b]] = -1;
	}
	if (w_dev_block_live(w, b, &k, &st))
		sim_violation(w->s, "host %u was handed block %u which the device still maps (key %u, state %u)",
			      sh->host_id, b, k, st);
	w->bstate[b] = 1;
	w->bhost[b] = (int8_t)sh->idx;
}

int w_alloc1(struct world *w, struct sim_host *sh, int ci, u32 *b)
{
	u64 off;
	int ret = bel_mh_alloc(&sh->cl[ci], 1, &off, NULL, NULL);

	if (!ret) {
		*b = w_blk(sh, off);
		w_oracle_alloc(w, sh, *b);
	}
	return ret;
}

int w_alloc_evicting(struct world *w, struct sim_host *sh, int ci, u32 n,
		     u32 *b, struct beluga_evicted_key *ev, u32 *nr_ev)
{
	u64 off[8];
	u32 i;
	int ret;

	if (n > 8)
		return -EINVAL;
	ret = bel_mh_alloc(&sh->cl[ci], n, off, ev, nr_ev);
	for (i = 0; !ret && i < n; i++) {
		b[i] = w_blk(sh, off[i]);
		w_oracle_alloc(w, sh, b[i]);
	}
	return ret;
}

void w_write(struct world *w, struct sim_host *sh, u32 b, u32 k)
{
	u8 buf[W_BS];

	(void)w;
	w_pattern(k, sh->host_id, buf);
	bel_mh_payload_write(&sh->mh, b, 0, buf, W_BS);
}

s32 w_publish(struct world *w, struct sim_host *sh, int ci, u32 k, u32 b)
{
	struct beluga_publish_item it = { .offset = w_off(sh, b), .key = w_key(k),
					  .result = -1000 };
	s32 r;
	int ret;

	ret = bel_mh_publish(&sh->cl[ci], W_NS, 1, &it, NULL, NULL, NULL);
	if (ret)
		return ret;
	r = it.result;
	if (b >= W_MAXB || k >= W_MAXK) {
		sim_violation(w->s, "publish of block %u key %u", b, k);
		return r;
	}
	if (r == BELUGA_PUBLISH_OK) {
		s32 old = w->kblock[k];
		int n = w_dev_published(w, k, NULL, NULL);

		if (n != 1)
			sim_violation(w->s, "key %u has %d published entries after host %u won",
				      k, n, sh->host_id);
		if (old >= 0 && old != (s32)b && w->bstate[old] == 2 &&
		    w->bkey[old] == k)
			w->bstate[old] = 0;
		w->kblock[k] = (s32)b;
		w->bstate[b] = 2;
		w->bkey[b] = k;
	} else if (r == BELUGA_PUBLISH_EXISTS) {
		w->bstate[b] = 0;
	}
	return r;
}

s32 w_put(struct world *w, struct sim_host *sh, int ci, u32 k, u32 *b)
{
	u32 blk;
	int ret = w_alloc1(w, sh, ci, &blk);

	if (ret)
		return ret;
	w_write(w, sh, blk, k);
	if (b)
		*b = blk;
	return w_publish(w, sh, ci, k, blk);
}

static void w_check_bytes(struct world *w, struct sim_host *sh, u32 k,
			  u32 b, u32 writer)
{
	u8 want[W_BS], got[W_BS];

	w_pattern(k, writer, want);
	bel_mh_payload_read(&sh->mh, b, 0, got, W_BS);
	if (memcmp(want, got, W_BS))
		sim_violation(w->s, "host %u read wrong bytes in block %u for key %u (writer %u)",
			      sh->host_id, b, k, writer);
}

/* Check a pinned hit on @b for key @k against the device and the oracle. */
static void w_check_hit(struct world *w, struct sim_host *sh, u32 k, u32 b)
{
	struct w_find f = { .k = k, .want_block = b, .evicting_ok = true };

	if (!w_dev_find(w, &f)) {
		sim_violation(w->s, "host %u pinned block %u for key %u but the device does not map it",
			      sh->host_id, b, k);
		return;
	}
	if (w->bretired[b])
		sim_violation(w->s, "host %u found retired block %u (key %u)",
			      sh->host_id, b, k);
	if (w->kblock[k] >= 0 && w->kblock[k] != (s32)b)
		sim_violation(w->s, "key %u: host %u got block %u, the winner published %d",
			      k, sh->host_id, b, w->kblock[k]);
	/* Publishes of crashed hosts were never reported: learn them. */
	w->kblock[k] = (s32)b;
	w->bstate[b] = 2;
	w->bkey[b] = k;
	w_check_bytes(w, sh, k, b, f.writer);
}

bool w_pin(struct world *w, struct sim_host *sh, int ci, u32 k, u32 *b)
{
	struct beluga_key key = w_key(k);
	u32 hits = 0, blk;
	u64 off = ~0ULL;
	int ret;

	if (b)
		*b = BEL_MH_NONE;
	ret = bel_mh_lookup(&sh->cl[ci], W_NS, 1, &key, true, &off, &hits);
	if (ret || !hits)
		return false;
	blk = w_blk(sh, off);
	if (blk >= W_MAXB || k >= W_MAXK) {
		sim_violation(w->s, "pinned block %u key %u", blk, k);
		return false;
	}
	w->pins[sh->idx][blk]++;
	w_check_hit(w, sh, k, blk);
	if (b)
		*b = blk;
	return true;
}

void w_reverify(struct world *w, struct sim_host *sh, u32 k, u32 b)
{
	struct w_find f = { .k = k, .want_block = b, .evicting_ok = true };

	if (!w_dev_find(w, &f)) {
		sim_violation(w->s, "pinned key %u (block %u) vanished", k, b);
		return;
	}
	w_check_bytes(w, sh, k, b, f.writer);
}

void w_release(struct world *w, struct sim_host *sh, int ci, u32 b)
{
	u64 off;

	if (b == BEL_MH_NONE)
		return;		/* after a failed pin, already reported */
	if (b >= W_MAXB) {
		sim_violation(w->s, "release of block %u", b);
		return;
	}
	/* The caller stops relying on the pin when it asks to drop it. */
	if (w->pins[sh->idx][b])
		w->pins[sh->idx][b]--;
	off = w_off(sh, b);
	if (bel_mh_release(&sh->cl[ci], 1, &off))
		w->pins[sh->idx][b]++;
}

u32 w_probe(struct world *w, struct sim_host *sh, const u32 *ks, u32 n)
{
	struct beluga_key keys[64];
	u32 hits = 0, i;

	(void)w;
	for (i = 0; i < n && i < 64; i++)
		keys[i] = w_key(ks[i]);
	if (bel_mh_lookup(&sh->cl[0], W_NS, i, keys, false, NULL, &hits))
		return 0;
	return hits;
}

void w_free_block(struct world *w, struct sim_host *sh, int ci, u32 b)
{
	u64 off = w_off(sh, b);

	if (bel_mh_free(&sh->cl[ci], 1, &off) == 0 && b < W_MAXB)
		w->bstate[b] = 0;
}

u32 w_alloc_all(struct world *w, struct sim_host *sh, int ci)
{
	u32 got[W_MAXB];
	u32 n = 0, i;

	while (n < W_MAXB && w_alloc1(w, sh, ci, &got[n]) == 0)
		n++;
	for (i = 0; i < n; i++)
		w_free_block(w, sh, ci, got[i]);
	return n;
}

/* --- quiescence ------------------------------------------------------------------ */

struct w_final {
	struct bel_mh_host *h;
	u32 linked;
	u8 seen[W_MAXB];
};

static void w_final_fn(struct world *w, u32 p, u32 b,
		       const struct bel_mh_entry *e, void *arg)
{
	struct w_final *f = arg;
	u32 st = le32_to_cpu(e->state);

	f->linked++;
	if (st != BEL_MH_ENT_PUBLISHED || le32_to_cpu(e->block) != b ||
	    f->h->blk_state[b] != BEL_MH_BLK_PUBLISHED || f->seen[b]++)
		sim_violation(w->s, "partition %u: stray entry of block %u (state %u)",
			      p, b, st);
	else if (w_dev_published(w, (u32)le64_to_cpu(e->key_hi), NULL,
				 NULL) != 1)
		sim_violation(w->s, "key %llu published twice",
			      (unsigned long long)le64_to_cpu(e->key_hi));
}

/* bel_mh_stats() of every live host agrees with its block table. */
static void w_stats_check(struct world *w)
{
	u64 owned = 0;
	int i;

	for (i = 0; i < w->n; i++) {
		struct bel_mh_host *h = &w->h[i]->mh;
		struct bel_mh_stats st;
		u64 pins = 0, pinned = 0;
		u32 b;

		if (!w_live(w, i))
			continue;
		bel_mh_stats(h, &st);
		for (b = 0; b < h->geo.nr_blocks; b++) {
			pins += h->blk_pins[b];
			pinned += !!h->blk_pins[b];
		}
		if (st.total_blocks != h->geo.nr_blocks ||
		    st.free_blocks + st.allocated_blocks +
		    st.published_blocks + st.retired_blocks != st.owned_blocks ||
		    st.pins != pins || st.pinned_blocks != pinned ||
		    st.allocated_blocks != h->nr_allocated)
			sim_violation(w->s, "host %d stats: total %llu owned %llu free %llu allocated %llu published %llu pins %llu/%llu pinned %llu/%llu",
				      i, (unsigned long long)st.total_blocks,
				      (unsigned long long)st.owned_blocks,
				      (unsigned long long)st.free_blocks,
				      (unsigned long long)st.allocated_blocks,
				      (unsigned long long)st.published_blocks,
				      (unsigned long long)st.pins,
				      (unsigned long long)pins,
				      (unsigned long long)st.pinned_blocks,
				      (unsigned long long)pinned);
		owned += st.owned_blocks;
	}
	if (owned != w->geo.nr_blocks)
		sim_violation(w->s, "live hosts own %llu blocks of %u",
			      (unsigned long long)owned, w->geo.nr_blocks);
}

void w_final_check(struct world *w)
{
	struct bel_mh_geo *g = &w->geo;
	u32 p, b;
	int live = 0, i;

	for (i = 0; i < w->n; i++)
		live += w_live(w, i);
	if (!live || !g->max_hosts)
		return;
	for (p = 0; p < g->max_hosts; p++) {
		int o = w_owner(w, p);
		struct bel_mh_host *h;
		struct bel_mh_part *pt;
		struct w_final *f;
		u32 nf = 0, na = 0, np = 0, nr = 0, walk = 0;

		if (o < 0) {
			sim_violation(w->s, "partition %u has %s owner", p,
				      o == -1 ? "no" : "more than one");
			continue;
		}
		h = &w->h[o]->mh;
		pt = &h->part[p];
		for (b = pt->first; b < pt->first + pt->nr; b++) {
			if (h->blk_state[b] == BEL_MH_BLK_FREE)
				nf++;
			else if (h->blk_state[b] == BEL_MH_BLK_ALLOCATED)
				na++;
			else if (h->blk_state[b] == BEL_MH_BLK_PUBLISHED)
				np++;
			else
				nr++;
			/* RETIRED in the owner's table and in the device, or neither. */
			if ((h->blk_state[b] == BEL_MH_BLK_RETIRED) !=
			    (w_dev_ent_state(w, b) == BEL_MH_ENT_RETIRED))
				sim_violation(w->s, "block %u: owner state %u, device entry %u",
					      b, h->blk_state[b],
					      w_dev_ent_state(w, b));
			if (b < W_MAXB && w->bretired[b] &&
			    h->blk_state[b] != BEL_MH_BLK_RETIRED)
				sim_violation(w->s, "retired block %u is back in service (state %u)",
					      b, h->blk_state[b]);
		}
		for (b = pt->free_head; b != BEL_MH_NONE && walk <= pt->nr;
		     b = h->blk_next[b])
			walk++;
		if (walk != nf || nf != pt->nr_free ||
		    nf + na + np + nr != pt->nr || np != pt->nr_published ||
		    na != pt->nr_allocated || nr != pt->nr_retired)
			sim_violation(w->s, "partition %u accounting: free %u (list %u, count %u) allocated %u/%u published %u/%u retired %u/%u of %u",
				      p, nf, walk, pt->nr_free, na,
				      pt->nr_allocated, np, pt->nr_published,
				      nr, pt->nr_retired, pt->nr);
		/* The device chains hold exactly the owner's published blocks. */
		f = calloc(1, sizeof(*f));
		if (!f)
			abort();
		f->h = h;
		w_dev_walk(w, p, w_final_fn, f);
		if (f->linked != np)
			sim_violation(w->s, "partition %u: %u entries linked, owner has %u published",
				      p, f->linked, np);
		free(f);
	}
	w_stats_check(w);
}
