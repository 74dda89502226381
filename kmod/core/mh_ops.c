// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-host block operations: alloc, free, publish, lookup (+pin),
 * release, eviction, and the retirement of blocks with memory errors. See
 * Documentation/multihost.md, section 5.
 *
 * Each host allocates only from partitions it owns, and alone writes their
 * index. Publish dedup across hosts and pins against eviction both use the
 * store-buffer pattern: write the own record, flush, fence, then read the
 * other side's after invalidating. Lines of owned partitions are read
 * without invalidating: this host is their only writer since it took them
 * over (bel_mh_rebuild() invalidated them then).
 *
 * Every function here runs with h->lock held.
 */
#include "bel_mh_internal.h"

enum bel_mh_race {
	BEL_MH_PROCEED = 0,
	BEL_MH_WAIT,		/* a higher tentative or an eviction: wait */
	BEL_MH_YIELD,		/* a lower tentative: withdraw, then wait */
	BEL_MH_LOST,		/* published elsewhere */
};

/* Wait loops give up after this many leases (a live racer resolves fast). */
#define BEL_MH_WAIT_LEASES	2
/* Victims tried per eviction before giving up (remote pins). */
#define BEL_MH_EVICT_TRIES	16

u32 bel_mh_get_head(struct bel_mh_host *h, u32 p, u32 bucket, int site)
{
	__le32 v;

	bel_mh_load(h, site, bel_mh_bucket_off(&h->geo, p, bucket), &v,
		    sizeof(v));
	return bel_mh_link_dec(v);
}

void bel_mh_set_head(struct bel_mh_host *h, u32 p, u32 bucket, u32 block,
		     int site)
{
	__le32 v = bel_mh_link_enc(block);

	bel_mh_put(h, site, bel_mh_bucket_off(&h->geo, p, bucket), &v,
		   sizeof(v));
}

u32 bel_mh_ent_bucket(const struct bel_mh_host *h,
		      const struct bel_mh_entry *e)
{
	return bel_mh_bucket_of(&h->geo, le64_to_cpu(e->ns),
				le64_to_cpu(e->key_lo), le64_to_cpu(e->key_hi));
}

static bool bel_mh_ent_is(const struct bel_mh_entry *e, u64 ns,
			  const struct beluga_key *key)
{
	return le64_to_cpu(e->ns) == ns && le64_to_cpu(e->key_lo) == key->lo &&
	       le64_to_cpu(e->key_hi) == key->hi;
}

static bool bel_mh_ent_live(u32 st)
{
	return st == BEL_MH_ENT_TENTATIVE || st == BEL_MH_ENT_PUBLISHED ||
	       st == BEL_MH_ENT_EVICTING;
}

/*
 * Walk the chain of (ns, key) in partition @p: the state of its entry (the
 * block in *@blk, the contents in *@e), or EMPTY when there is none. Foreign
 * partitions are read after invalidating, at @site. *@sure is false when
 * the walk may have been diverted (an entry of another bucket, a link out
 * of the partition, too many steps): the owner unlinked and reused an entry
 * under us, so a miss proves nothing and the caller retries. A hit is
 * always real: the entry held the key when we read it.
 */
static u32 bel_mh_probe(struct bel_mh_host *h, u32 p, int site, u64 ns,
			const struct beluga_key *key, u32 *blk,
			struct bel_mh_entry *e, bool *sure)
{
	struct bel_mh_part *pt = &h->part[p];
	int s = pt->owned ? 0 : site;
	u32 bkt = bel_mh_bucket_of(&h->geo, ns, key->lo, key->hi);
	u32 n, steps = 0;

	*sure = true;
	n = bel_mh_get_head(h, p, bkt, s);
	while (n != BEL_MH_NONE) {
		u32 st;

		if (n < pt->first || n >= pt->first + pt->nr ||
		    steps++ > pt->nr)
			break;
		bel_mh_load(h, s, bel_mh_ent_off(&h->geo, n), e, sizeof(*e));
		st = le32_to_cpu(e->state);
		if (!bel_mh_ent_live(st))
			break;
		if (bel_mh_ent_is(e, ns, key)) {
			*blk = n;
			return st;
		}
		if (bel_mh_ent_bucket(h, e) != bkt)
			break;
		n = bel_mh_link_dec(e->next);
	}
	if (n != BEL_MH_NONE)
		*sure = false;
	return BEL_MH_ENT_EMPTY;
}

/*
 * Unlink the entry @e of block @b from its chain in owned partition @p;
 * the one line that changes (the bucket head or the predecessor's link) is
 * written and flushed at @site. The entry keeps its contents.
 */
static void bel_mh_unlink(struct bel_mh_host *h, u32 p, u32 b,
			  const struct bel_mh_entry *e, int site)
{
	u32 bkt = bel_mh_ent_bucket(h, e);
	u32 prev = BEL_MH_NONE, steps = 0;
	struct bel_mh_entry pe;
	u32 n;

	/* Fenced: nothing would be stored, and a store before may be missing. */
	if (bel_mh_fenced_now(h))
		return;
	n = bel_mh_get_head(h, p, bkt, 0);
	while (n != BEL_MH_NONE && n != b && steps++ <= h->part[p].nr) {
		bel_mh_read(h, bel_mh_ent_off(&h->geo, n), &pe, sizeof(pe));
		prev = n;
		n = bel_mh_link_dec(pe.next);
	}
	if (n != b) {
		BEL_ASSERT(0);
		return;
	}
	if (prev == BEL_MH_NONE) {
		bel_mh_set_head(h, p, bkt, bel_mh_link_dec(e->next), site);
		return;
	}
	pe.next = e->next;
	bel_mh_put(h, site, bel_mh_ent_off(&h->geo, prev), &pe, sizeof(pe));
}

/* Is pin word @w of host @x a pin that an evictor must respect? */
static bool bel_mh_pin_counts(const struct bel_mh_host *h, u32 x, u32 w)
{
	const struct bel_mh_view *v = &h->view[x];

	if (!w)
		return false;
	if ((s32)(w - v->inc) < 0)
		return false;		/* left by an older incarnation */
	if (w == v->inc)
		return !v->dead;
	return true;			/* a newer incarnation than we know */
}

static bool bel_mh_put_pin(struct bel_mh_host *h, u32 b, u32 w, int site)
{
	__le32 word = cpu_to_le32(w);

	return bel_mh_put(h, site, bel_mh_pin_off(&h->geo, h->id, b), &word,
			  sizeof(word));
}

/* --- allocation and eviction --------------------------------------------- */

/*
 * Take a free block from the partition in use, moving on to the next owned
 * one only when it runs dry: consecutive blocks of a chain then share a
 * partition, which is where LOOKUP probes first for the next key.
 */
static u32 bel_mh_take_free(struct bel_mh_host *h)
{
	u32 n = h->geo.max_hosts;
	u32 i;

	for (i = 0; i < n; i++) {
		u32 p = (h->rotor + i) % n;
		struct bel_mh_part *pt = &h->part[p];

		if (pt->owned && !pt->releasing && pt->nr_free) {
			h->rotor = p;
			return bel_mh_free_pop(h, p);
		}
	}
	return BEL_MH_NONE;
}

/*
 * Claim PUBLISHED block @b of owned partition @p (not pinned here) for
 * eviction: mark it EVICTING, flush, fence, then read every other host's
 * pin word for it after invalidating. A pin (or a fence) -> roll back,
 * false. Else true: the block stays EVICTING, off the LRU, until
 * bel_mh_evict_finish() or bel_mh_evict_undo().
 */
static bool bel_mh_evict_mark(struct bel_mh_host *h, u32 p, u32 b)
{
	u64 off = bel_mh_ent_off(&h->geo, b);
	struct bel_mh_entry e;
	bool pinned = false;
	u32 x;

	bel_mh_read(h, off, &e, sizeof(e));
	e.state = cpu_to_le32(BEL_MH_ENT_EVICTING);
	BEL_MH_PUT(h, F_ENT_EVICTING, off, &e, sizeof(e));
	bel_mh_fence(h);

	for (x = 0; x < h->geo.max_hosts && !pinned; x++) {
		__le32 w;

		if (x == h->id)
			continue;
		BEL_MH_GET(h, I_EVICT_PINS, bel_mh_pin_off(&h->geo, x, b), &w,
			   sizeof(w));
		pinned = bel_mh_pin_counts(h, x, le32_to_cpu(w));
	}
	bel_mh_lru_del(h, p, b);
	if (pinned || bel_mh_usable(h)) {
		e.state = cpu_to_le32(BEL_MH_ENT_PUBLISHED);
		BEL_MH_PUT(h, F_ENT_ROLLBACK, off, &e, sizeof(e));
		bel_mh_lru_add(h, p, b);
		return false;
	}
	return true;
}

/* EVICTING block @b goes back to PUBLISHED, newest end of the LRU. */
static void bel_mh_evict_undo(struct bel_mh_host *h, u32 b)
{
	u64 off = bel_mh_ent_off(&h->geo, b);
	struct bel_mh_entry e;

	bel_mh_read(h, off, &e, sizeof(e));
	e.state = cpu_to_le32(BEL_MH_ENT_PUBLISHED);
	BEL_MH_PUT(h, F_ENT_ROLLBACK, off, &e, sizeof(e));
	bel_mh_lru_add(h, bel_mh_part_of(h, b), b);
}

/*
 * EVICTING block @b is unlinked (a tombstone) and free. Its (ns, key) go to
 * @out when not NULL: the entry read here is the last that names them.
 */
static void bel_mh_evict_finish(struct bel_mh_host *h, u32 b,
				struct beluga_evicted_key *out)
{
	u32 p = bel_mh_part_of(h, b);
	struct bel_mh_entry e;

	bel_mh_read(h, bel_mh_ent_off(&h->geo, b), &e, sizeof(e));
	bel_trace_mh_evict(h, b, le64_to_cpu(e.ns), le64_to_cpu(e.key_lo),
			   le64_to_cpu(e.key_hi));
	if (out) {
		out->ns = le64_to_cpu(e.ns);
		out->key.lo = le64_to_cpu(e.key_lo);
		out->key.hi = le64_to_cpu(e.key_hi);
	}
	bel_mh_unlink(h, p, b, &e, BEL_MH_F_ENT_UNLINK);
	h->part[p].nr_published--;
	bel_mh_free_push(h, p, b);
	h->opstats.evictions++;
}

/* The oldest block on the LRUs of the partitions we allocate from. */
static u32 bel_mh_lru_oldest(struct bel_mh_host *h, u32 *part)
{
	u32 b = BEL_MH_NONE, p;

	for (p = 0; p < h->geo.max_hosts; p++) {
		struct bel_mh_part *pt = &h->part[p];

		if (!pt->owned || pt->releasing || pt->lru_head == BEL_MH_NONE)
			continue;
		if (b == BEL_MH_NONE ||
		    h->blk_stamp[pt->lru_head] < h->blk_stamp[b]) {
			b = pt->lru_head;
			*part = p;
		}
	}
	return b;
}

/*
 * Evict @need blocks, least recently used first, or none (all or
 * nothing): claim them all, then free them all, or roll every claim back
 * when remote pins keep too many (BEL_MH_EVICT_TRIES misses) or the host
 * fences itself. @victims holds @need entries of scratch space (ALLOC's
 * offset array, which it fills afterwards). With @evicted (room for
 * @need) the (ns, key) of each victim, in the order claimed: oldest first.
 */
static int bel_mh_evict_n(struct bel_mh_host *h, u32 need, u64 *victims,
			  struct beluga_evicted_key *evicted)
{
	u32 n = 0, misses = 0, i, p = 0, b;
	int ret = 0;

	while (n < need) {
		if (n && !(n % BEL_MH_RESCHED_EVERY))
			bel_mh_resched(h);
		b = bel_mh_lru_oldest(h, &p);
		ret = bel_mh_usable(h);
		if (ret || b == BEL_MH_NONE)
			break;
		if (bel_mh_evict_mark(h, p, b))
			victims[n++] = b;
		else if (++misses >= BEL_MH_EVICT_TRIES)
			break;
	}
	if (n < need) {
		for (i = 0; i < n; i++)
			bel_mh_evict_undo(h, (u32)victims[i]);
		return ret ? ret : -ENOSPC;
	}
	for (i = 0; i < n; i++)
		bel_mh_evict_finish(h, (u32)victims[i],
				    evicted ? &evicted[i] : NULL);
	return 0;
}

static void bel_mh_retire_unlinked(struct bel_mh_host *h, u32 p, u32 b);
static bool bel_mh_retire_queued(const struct bel_mh_host *h, u32 b);

/* A client lets go of ALLOCATED block @b: free, or RETIRED if it is bad. */
static void bel_mh_free_block(struct bel_mh_host *h, struct bel_mh_client *c,
			      u32 b)
{
	u32 p = bel_mh_part_of(h, b);

	h->blk_owner[b] = NULL;
	h->part[p].nr_allocated--;
	h->nr_allocated--;
	c->nr_allocated--;
	if (h->blk_bad[b]) {
		h->blk_bad[b] = 0;
		bel_mh_retire_unlinked(h, p, b);
		return;
	}
	bel_mh_free_push(h, p, b);
}

/* --- block naming: the mapping's offsets, as in the uapi ---------------- */

void bel_mh_set_map_base(struct bel_mh_host *h, u64 map_base)
{
	bel_mutex_lock(&h->lock);
	h->cfg.map_base = map_base;
	bel_mutex_unlock(&h->lock);
}

int bel_mh_block_at(const struct bel_mh_host *h, u64 off, u32 *b)
{
	u64 n;

	if (off < h->cfg.map_base || !h->geo.block_size)
		return -EINVAL;
	n = bel_div64(off - h->cfg.map_base, h->geo.block_size);
	if (n >= h->geo.nr_blocks ||
	    off - h->cfg.map_base != n * h->geo.block_size)
		return -EINVAL;
	*b = (u32)n;
	return 0;
}

u64 bel_mh_offset_of(const struct bel_mh_host *h, u32 b)
{
	return h->cfg.map_base + (u64)b * h->geo.block_size;
}

/* Block at @off, or BEL_MH_NONE, which every check below refuses. */
static u32 bel_mh_block_or_none(const struct bel_mh_host *h, u64 off)
{
	u32 b;

	return bel_mh_block_at(h, off, &b) ? BEL_MH_NONE : b;
}

/* --- alloc, free ----------------------------------------------------------- */

int bel_mh_alloc(struct bel_mh_client *c, u32 count, u64 *offsets,
		 struct beluga_evicted_key *evicted, u32 *nr_evicted)
{
	struct bel_mh_host *h = c->host;
	u32 i, n = 0;
	int ret;

	if (!count || count > BELUGA_MAX_BATCH || !evicted != !nr_evicted)
		return -EINVAL;
	bel_mutex_lock(&h->lock);
	ret = bel_mh_usable(h);
	if (!ret) {
		u64 nr_free = 0, nr_lru = 0;
		u32 p;

		for (p = 0; p < h->geo.max_hosts; p++)
			if (h->part[p].owned && !h->part[p].releasing) {
				nr_free += h->part[p].nr_free;
				nr_lru += h->part[p].nr_lru;
			}
		/* All or nothing: decide before evicting anything. */
		if (nr_free + nr_lru < count) {
			ret = -ENOSPC;
		} else if (nr_free < count) {
			n = count - (u32)nr_free;
			ret = bel_mh_evict_n(h, n, offsets, evicted);
		}
	}
	for (i = 0; !ret && i < count; i++) {
		u32 b = bel_mh_take_free(h);

		if (b == BEL_MH_NONE) {
			BEL_ASSERT(0);
			ret = -ENOSPC;
			break;
		}
		h->blk_state[b] = BEL_MH_BLK_ALLOCATED;
		h->blk_owner[b] = c;
		h->part[bel_mh_part_of(h, b)].nr_allocated++;
		h->nr_allocated++;
		c->nr_allocated++;
		offsets[i] = bel_mh_offset_of(h, b);
	}
	if (ret)
		while (i--)
			bel_mh_free_block(h, c,
					  bel_mh_block_or_none(h, offsets[i]));
	if (!ret)
		h->opstats.allocs += count;
	else if (ret == -ENOSPC)
		h->opstats.alloc_failures++;
	bel_mutex_unlock(&h->lock);
	/* Evictions are all or nothing; a failed ALLOC names none. */
	if (nr_evicted)
		*nr_evicted = ret ? 0 : n;
	return ret;
}

static bool bel_mh_owns_alloc(struct bel_mh_host *h, struct bel_mh_client *c,
			      u32 b)
{
	return b < h->geo.nr_blocks &&
	       h->blk_state[b] == BEL_MH_BLK_ALLOCATED && h->blk_owner[b] == c;
}

bool bel_mh_client_owns(struct bel_mh_client *c, u64 off)
{
	struct bel_mh_host *h = c->host;
	bool owns;

	bel_mutex_lock(&h->lock);
	owns = h->joined && h->blk_state &&
	       bel_mh_owns_alloc(h, c, bel_mh_block_or_none(h, off));
	bel_mutex_unlock(&h->lock);
	return owns;
}

int bel_mh_free(struct bel_mh_client *c, u32 count, const u64 *offsets)
{
	struct bel_mh_host *h = c->host;
	u32 i, j;
	int ret;

	if (!count || count > BELUGA_MAX_BATCH)
		return -EINVAL;
	bel_mutex_lock(&h->lock);
	ret = bel_mh_usable(h);
	for (i = 0; !ret && i < count; i++) {
		if (!bel_mh_owns_alloc(h, c, bel_mh_block_or_none(h, offsets[i])))
			ret = -EINVAL;
		for (j = 0; !ret && j < i; j++)
			if (offsets[j] == offsets[i])
				ret = -EINVAL;
	}
	for (i = 0; !ret && i < count; i++)
		bel_mh_free_block(h, c, bel_mh_block_or_none(h, offsets[i]));
	if (!ret)
		h->opstats.frees += count;
	bel_mutex_unlock(&h->lock);
	return ret;
}

/* --- publish --------------------------------------------------------------- */

/*
 * After our TENTATIVE entry is in the device: look for (ns, key) in every
 * partition we do not own (our own ones cannot race: they are serialised
 * by h->lock). *@wp, *@ws, *@we: the entry to wait for on YIELD.
 */
static enum bel_mh_race bel_mh_race_check(struct bel_mh_host *h, u64 ns,
					  const struct beluga_key *key,
					  u32 *wp, struct bel_mh_entry *we)
{
	enum bel_mh_race verdict = BEL_MH_PROCEED;
	u32 q;

	for (q = 0; q < h->geo.max_hosts; q++) {
		struct bel_mh_entry e;
		u32 st, w, blk;
		bool sure;

		if (h->part[q].owned)
			continue;
		st = bel_mh_probe(h, q, BEL_MH_I_PUB_CHECK, ns, key, &blk, &e,
				  &sure);
		if (st == BEL_MH_ENT_PUBLISHED)
			return BEL_MH_LOST;
		if (st == BEL_MH_ENT_EVICTING || !sure) {
			/* Resolves within the other host's operation. */
			if (verdict < BEL_MH_WAIT)
				verdict = BEL_MH_WAIT;
			continue;
		}
		if (st != BEL_MH_ENT_TENTATIVE)
			continue;
		w = le32_to_cpu(e.writer);
		if (bel_mh_writer_dead(h, w, le32_to_cpu(e.writer_inc)))
			continue;
		if (w < h->id) {
			/* The lower host id wins: make way. */
			verdict = BEL_MH_YIELD;
			*wp = q;
			*we = e;
		} else if (verdict < BEL_MH_WAIT) {
			/* It withdraws if it saw us, or commits: wait. */
			verdict = BEL_MH_WAIT;
		}
	}
	return verdict;
}

/* Is the lower host's tentative entry @was in partition @p resolved? */
static bool bel_mh_resolved(struct bel_mh_host *h, u32 p, u64 ns,
			    const struct beluga_key *key,
			    const struct bel_mh_entry *was)
{
	struct bel_mh_entry e;
	u32 st, blk;
	bool sure;

	st = bel_mh_probe(h, p, BEL_MH_I_PUB_CHECK, ns, key, &blk, &e, &sure);
	if (st == BEL_MH_ENT_EMPTY)
		return sure;
	if (st != BEL_MH_ENT_TENTATIVE || e.writer != was->writer ||
	    e.writer_inc != was->writer_inc || e.seq != was->seq)
		return true;
	return bel_mh_writer_dead(h, le32_to_cpu(e.writer),
				  le32_to_cpu(e.writer_inc));
}

static s32 bel_mh_publish_one(struct bel_mh_host *h, struct bel_mh_client *c,
			      u64 ns, const struct beluga_key *key, u32 b)
{
	u64 deadline = bel_mh_now(h) + BEL_MH_WAIT_LEASES * h->geo.lease_ns;
	u64 off = bel_mh_ent_off(&h->geo, b);
	struct bel_mh_entry e, we;
	u32 p, q, bkt, blk, wp = 0;
	bool sure;
	int ret;

	if (b >= h->geo.nr_blocks)
		return -EINVAL;
	if (!bel_mh_owns_alloc(h, c, b))
		return -EPERM;
	/* A memory error hit it: out of service, no longer the caller's. */
	if (h->blk_bad[b]) {
		bel_mh_free_block(h, c, b);
		return -EIO;
	}
	p = bel_mh_part_of(h, b);
	bkt = bel_mh_bucket_of(&h->geo, ns, key->lo, key->hi);
	memset(&we, 0, sizeof(we));

restart:
	ret = bel_mh_usable(h);
	if (ret)
		return ret;
	/* 1. Present anywhere already? */
	for (q = 0; q < h->geo.max_hosts; q++) {
		if (bel_mh_probe(h, q, BEL_MH_I_PUB_PRE, ns, key, &blk, &e,
				 &sure) == BEL_MH_ENT_PUBLISHED) {
			bel_mh_free_block(h, c, b);
			h->opstats.publish_races++;
			h->opstats.frees++;
			return BELUGA_PUBLISH_EXISTS;
		}
	}

	/* 2. Announce: a TENTATIVE entry at the head of its chain. */
	memset(&e, 0, sizeof(e));
	e.state = cpu_to_le32(BEL_MH_ENT_TENTATIVE);
	e.block = cpu_to_le32(b);
	e.ns = cpu_to_le64(ns);
	e.key_lo = cpu_to_le64(key->lo);
	e.key_hi = cpu_to_le64(key->hi);
	e.seq = cpu_to_le64(h->part[p].next_seq++);
	e.writer = cpu_to_le32(h->id);
	e.writer_inc = h->rec.incarnation;
	e.next = bel_mh_link_enc(bel_mh_get_head(h, p, bkt, 0));
	BEL_MH_PUT(h, F_ENT_TENTATIVE, off, &e, sizeof(e));
	bel_mh_set_head(h, p, bkt, b, BEL_MH_F_ENT_LINK);
	bel_mh_fence(h);

	/* 3. Did anyone else announce or publish the key? */
	for (;;) {
		enum bel_mh_race r = bel_mh_race_check(h, ns, key, &wp, &we);

		if (r == BEL_MH_PROCEED) {
			/*
			 * Fenced meanwhile: the announcement may never have
			 * reached the device, and other hosts may soon adopt
			 * the partition. The block stays allocated.
			 */
			e.state = cpu_to_le32(BEL_MH_ENT_PUBLISHED);
			if (!BEL_MH_PUT(h, F_ENT_COMMIT, off, &e, sizeof(e)))
				return -ESTALE;
			h->blk_owner[b] = NULL;
			h->blk_state[b] = BEL_MH_BLK_PUBLISHED;
			h->part[p].nr_allocated--;
			h->part[p].nr_published++;
			h->nr_allocated--;
			c->nr_allocated--;
			if (!h->blk_pins[b])
				bel_mh_lru_add(h, p, b);
			h->opstats.publishes++;
			return BELUGA_PUBLISH_OK;
		}
		if (r == BEL_MH_LOST) {
			bel_mh_unlink(h, p, b, &e, BEL_MH_F_ENT_WITHDRAW);
			bel_mh_free_block(h, c, b);
			h->opstats.publish_races++;
			h->opstats.frees++;
			return BELUGA_PUBLISH_EXISTS;
		}
		ret = bel_mh_usable(h);
		if (ret)
			return ret;
		if (r == BEL_MH_YIELD || bel_mh_now(h) > deadline) {
			bel_mh_unlink(h, p, b, &e, BEL_MH_F_ENT_WITHDRAW);
			break;
		}
		/* WAIT */
		h->ops->relax(h->priv);
		bel_mh_observe(h);
	}

	/* Withdrawn: wait for the lower host's entry, then start over. */
	while (bel_mh_now(h) <= deadline && !bel_mh_usable(h)) {
		if (bel_mh_resolved(h, wp, ns, key, &we))
			goto restart;
		h->ops->relax(h->priv);
		bel_mh_observe(h);
	}
	ret = bel_mh_usable(h);
	return ret ? ret : -EAGAIN;
}

int bel_mh_publish(struct bel_mh_client *c, u64 ns, u32 count,
		   struct beluga_publish_item *items, u32 *published,
		   u32 *exists, u32 *failed)
{
	struct bel_mh_host *h = c->host;
	u32 i, n_ok = 0, n_exists = 0;
	int ret;

	if (!count || count > BELUGA_MAX_BATCH)
		return -EINVAL;
	bel_mutex_lock(&h->lock);
	ret = bel_mh_usable(h);
	for (i = 0; !ret && i < count; i++) {
		s32 r = bel_mh_publish_one(h, c, ns, &items[i].key,
					   bel_mh_block_or_none(h, items[i].offset));

		items[i].result = r;
		n_ok += r == BELUGA_PUBLISH_OK;
		n_exists += r == BELUGA_PUBLISH_EXISTS;
	}
	bel_mutex_unlock(&h->lock);
	if (ret)
		return ret;
	if (published)
		*published = n_ok;
	if (exists)
		*exists = n_exists;
	if (failed)
		*failed = count - n_ok - n_exists;
	return 0;
}

/* --- lookup, pins ------------------------------------------------------- */

/*
 * Find a PUBLISHED entry of (ns, key): first in partition @hint (where the
 * previous key of the chain was), then in owned partitions, then in the
 * rest. Returns the partition or BEL_MH_NONE.
 */
static u32 bel_mh_find(struct bel_mh_host *h, u64 ns,
		       const struct beluga_key *key, u32 hint, u32 *blk,
		       struct bel_mh_entry *e)
{
	u32 n = h->geo.max_hosts;
	u32 seen = 0, round, p, tries;
	bool sure;

	if (hint != BEL_MH_NONE) {
		if (bel_mh_probe(h, hint, BEL_MH_I_PROBE, ns, key, blk, e,
				 &sure) == BEL_MH_ENT_PUBLISHED)
			return hint;
		/* A diverted walk is retried below like any other. */
		if (sure)
			seen |= 1U << hint;
	}
	for (round = 0; round < 2; round++) {
		for (p = 0; p < n; p++) {
			if ((seen & (1U << p)) ||
			    (round == 0 && !h->part[p].owned))
				continue;
			seen |= 1U << p;
			/* A diverted walk is retried a few times. */
			for (tries = 0; tries < 4; tries++) {
				if (bel_mh_probe(h, p, BEL_MH_I_PROBE, ns, key,
						 blk, e, &sure) ==
				    BEL_MH_ENT_PUBLISHED)
					return p;
				if (sure)
					break;
			}
		}
	}
	return BEL_MH_NONE;
}

/* Room for @more new distinct pins of @c (h->lock held; may sleep). */
static int bel_mh_client_reserve(struct bel_mh_client *c, u32 more)
{
	struct bel_pin_table next;
	int ret = bel_pins_prepare(&c->pins, more, &next);

	if (ret || !next.capacity)
		return ret;
	bel_pins_swap(&c->pins, &next);
	bel_pins_free(&next);
	return 0;
}

static bool bel_mh_same_entry(const struct bel_mh_entry *a,
			      const struct bel_mh_entry *b)
{
	return a->block == b->block && a->ns == b->ns &&
	       a->key_lo == b->key_lo && a->key_hi == b->key_hi &&
	       a->seq == b->seq;
}

/*
 * Pin block @b of the entry @e just found in partition @p: announce the
 * pin, then check that the entry is still the same PUBLISHED one. An entry
 * being evicted is EVICTING; an evicted one is unlinked and never goes back
 * to PUBLISHED without a new sequence number. 1: not pinned (a miss);
 * -EOVERFLOW: the block's pin count is at its cap; -ESTALE: the host
 * fenced itself meanwhile, so the pin may be invisible to other hosts.
 */
static int bel_mh_pin(struct bel_mh_host *h, struct bel_mh_client *c, u32 p,
		      u32 b, const struct bel_mh_entry *e)
{
	if (b >= h->geo.nr_blocks || bel_mh_part_of(h, b) != p)
		return 1;
	if (h->blk_pins[b] > BEL_MAX_PINS)
		return -EOVERFLOW;
	if (!h->blk_pins[b]) {
		/* A pin word that never reached the device protects nothing. */
		if (!bel_mh_put_pin(h, b, le32_to_cpu(h->rec.incarnation),
				    BEL_MH_F_PIN))
			return -ESTALE;
		if (!h->part[p].owned) {
			struct bel_mh_entry now;

			bel_mh_fence(h);
			BEL_MH_GET(h, I_PIN_CHECK, bel_mh_ent_off(&h->geo, b),
				   &now, sizeof(now));
			/* Fenced meanwhile: evictors may not respect the pin. */
			if (bel_mh_usable(h)) {
				bel_mh_put_pin(h, b, 0, BEL_MH_F_UNPIN);
				return -ESTALE;
			}
			if (le32_to_cpu(now.state) != BEL_MH_ENT_PUBLISHED ||
			    !bel_mh_same_entry(&now, e)) {
				bel_mh_put_pin(h, b, 0, BEL_MH_F_UNPIN);
				return 1;
			}
		} else if (h->blk_state[b] == BEL_MH_BLK_PUBLISHED) {
			bel_mh_lru_del(h, p, b);
		}
		h->nr_pinned++;
	}
	h->blk_pins[b]++;
	h->nr_pins++;
	bel_pins_add(&c->pins, b);
	c->nr_pins++;
	return 0;
}

static void bel_mh_unpin(struct bel_mh_host *h, u32 b, u32 n)
{
	u32 p;

	if (!n)
		return;
	h->nr_pins -= n;
	h->opstats.releases += n;
	h->blk_pins[b] -= n;
	if (h->blk_pins[b])
		return;
	h->nr_pinned--;
	bel_mh_put_pin(h, b, 0, BEL_MH_F_UNPIN);
	p = bel_mh_part_of(h, b);
	if (h->part[p].owned && h->blk_state[b] == BEL_MH_BLK_PUBLISHED)
		bel_mh_lru_add(h, p, b);
}

/* Drop one pin of @b that @c holds (known to hold). */
static void bel_mh_client_unpin(struct bel_mh_host *h,
				struct bel_mh_client *c, u32 b)
{
	u32 pos = bel_pins_find(&c->pins, b);

	if (--c->pins.counts[pos] == 0)
		bel_pins_del_at(&c->pins, pos);
	c->nr_pins--;
	bel_mh_unpin(h, b, 1);
}

int bel_mh_lookup(struct bel_mh_client *c, u64 ns, u32 count,
		  const struct beluga_key *keys, bool pin, u64 *offsets,
		  u32 *hits)
{
	struct bel_mh_host *h = c->host;
	u32 hint = BEL_MH_NONE;
	u32 i;
	int ret;

	if (!count || count > BELUGA_MAX_BATCH || (pin && !offsets))
		return -EINVAL;
	bel_mutex_lock(&h->lock);
	ret = bel_mh_usable(h);
	if (!ret && pin)
		ret = bel_mh_client_reserve(c, count);
	for (i = 0; !ret && i < count; i++) {
		struct bel_mh_entry e;
		u32 p, b;

		if (i && !(i % BEL_MH_RESCHED_EVERY))
			bel_mh_resched(h);
		p = bel_mh_find(h, ns, &keys[i], hint, &b, &e);
		if (p == BEL_MH_NONE)
			break;
		/* Its owner has not retired it yet: a miss here already. */
		if (h->nr_retire_q && bel_mh_retire_queued(h, b))
			break;
		if (pin) {
			ret = bel_mh_pin(h, c, p, b, &e);
			if (ret > 0) {
				ret = 0;
				break;
			}
			if (ret)
				break;
		}
		if (offsets)
			offsets[i] = bel_mh_offset_of(h, b);
		hint = p;
	}
	if (ret && pin)
		/* All or nothing: drop the pins this call took. */
		while (i--)
			bel_mh_client_unpin(h, c,
					    bel_mh_block_or_none(h, offsets[i]));
	*hits = ret ? 0 : i;
	if (!ret) {
		h->opstats.lookups++;
		h->opstats.lookup_keys += count;
		h->opstats.lookup_hits += i;
	}
	bel_mutex_unlock(&h->lock);
	return ret;
}

int bel_mh_release(struct bel_mh_client *c, u32 count, const u64 *offsets)
{
	struct bel_mh_host *h = c->host;
	u32 i, j, pos;
	int ret = 0;

	if (!count || count > BELUGA_MAX_BATCH)
		return -EINVAL;
	bel_mutex_lock(&h->lock);
	/*
	 * All or nothing, in O(count): take each listed pin off the client's
	 * table, leaving emptied entries in place, so that a block listed
	 * more often than it is pinned finds a zero count; on failure put
	 * back what was taken.
	 */
	for (i = 0; i < count; i++) {
		u32 b;

		if (bel_mh_block_at(h, offsets[i], &b))
			pos = BEL_PINS_EMPTY;
		else
			pos = bel_pins_find(&c->pins, b);
		if (pos == BEL_PINS_EMPTY || !c->pins.counts[pos]) {
			for (j = 0; j < i; j++)
				c->pins.counts[bel_pins_find(&c->pins,
					bel_mh_block_or_none(h, offsets[j]))]++;
			ret = -EINVAL;
			goto out;
		}
		c->pins.counts[pos]--;
	}
	for (i = 0; i < count; i++) {
		u32 b = bel_mh_block_or_none(h, offsets[i]);

		bel_mh_unpin(h, b, 1);
		c->nr_pins--;
		pos = bel_pins_find(&c->pins, b);
		if (pos != BEL_PINS_EMPTY && !c->pins.counts[pos])
			bel_pins_del_at(&c->pins, pos);
	}
out:
	bel_mutex_unlock(&h->lock);
	return ret;
}

void bel_mh_client_init(struct bel_mh_host *h, struct bel_mh_client *c)
{
	memset(c, 0, sizeof(*c));
	c->host = h;
}

/* Blocks of the pool scanned per hold of h->lock when a client closes. */
#define BEL_MH_SCAN_CHUNK	4096U

void bel_mh_client_release(struct bel_mh_client *c)
{
	struct bel_mh_host *h = c->host;
	u32 b = 0, end, i;

	/*
	 * The client's allocations are found by scanning the block table,
	 * a chunk per hold of the host mutex: the client is closing, so
	 * nothing else changes what it owns meanwhile.
	 */
	bel_mutex_lock(&h->lock);
	/* After a leave or a crash the block table is gone: nothing to do. */
	while (h->blk_state && c->nr_allocated && b < h->geo.nr_blocks) {
		end = h->geo.nr_blocks - b > BEL_MH_SCAN_CHUNK ?
		      b + BEL_MH_SCAN_CHUNK : h->geo.nr_blocks;
		for (; b < end; b++)
			if (bel_mh_owns_alloc(h, c, b)) {
				bel_mh_free_block(h, c, b);
				h->opstats.frees++;
			}
		bel_mutex_unlock(&h->lock);
		bel_mh_resched(h);
		bel_mutex_lock(&h->lock);
	}
	for (i = 0; i < c->pins.capacity; i++) {
		if (c->pins.ids[i] == BEL_PINS_EMPTY)
			continue;
		if (h->blk_pins)
			bel_mh_unpin(h, c->pins.ids[i], c->pins.counts[i]);
		if (i && !(i % BEL_MH_SCAN_CHUNK)) {
			bel_mutex_unlock(&h->lock);
			bel_mh_resched(h);
			bel_mutex_lock(&h->lock);
		}
	}
	bel_mutex_unlock(&h->lock);
	bel_mh_client_forget(c);
}

void bel_mh_client_forget(struct bel_mh_client *c)
{
	bel_pins_free(&c->pins);
	c->nr_pins = 0;
	c->nr_allocated = 0;
}

void bel_mh_stats(struct bel_mh_host *h, struct bel_mh_stats *out)
{
	u32 p;

	memset(out, 0, sizeof(*out));
	bel_mutex_lock(&h->lock);
	out->total_blocks = h->geo.nr_blocks;
	out->ops = h->opstats;
	if (h->joined) {
		for (p = 0; p < h->geo.max_hosts; p++) {
			const struct bel_mh_part *pt = &h->part[p];

			if (!pt->owned)
				continue;
			out->owned |= 1U << p;
			out->owned_blocks += pt->nr;
			out->free_blocks += pt->nr_free;
			out->published_blocks += pt->nr_published;
			out->retired_blocks += pt->nr_retired;
		}
		out->allocated_blocks = h->nr_allocated;
		out->pinned_blocks = h->nr_pinned;
		out->pins = h->nr_pins;
		out->retire_pending = h->nr_retire_q;
	}
	bel_mutex_unlock(&h->lock);
}

void bel_mh_stats_to_pool(const struct bel_mh_stats *ms, struct bel_stats *s)
{
	s->free_blocks = ms->free_blocks;
	s->allocated_blocks = ms->allocated_blocks;
	s->published_blocks = ms->published_blocks;
	s->retired_blocks = ms->retired_blocks;
	s->pinned_blocks = ms->pinned_blocks;
	s->pins = ms->pins;
	bel_counters_add(&s->counters, &ms->ops);
}

/* --- memory errors: retired blocks -------------------------------------- */

static bool bel_mh_retire_queued(const struct bel_mh_host *h, u32 b)
{
	u32 i;

	for (i = 0; i < h->nr_retire_q; i++)
		if (h->retire_q[i] == b)
			return true;
	return false;
}

/*
 * Block @b of owned partition @p, linked nowhere and on no list, goes out
 * of service: its entry is written RETIRED (one line, flushed), which
 * every later owner's rebuild finds. Nothing else rewrites the entry: the
 * block is never handed out again.
 */
static void bel_mh_retire_unlinked(struct bel_mh_host *h, u32 p, u32 b)
{
	struct bel_mh_entry e;

	memset(&e, 0, sizeof(e));
	e.state = cpu_to_le32(BEL_MH_ENT_RETIRED);
	e.block = cpu_to_le32(b);
	e.writer = cpu_to_le32(h->id);
	e.writer_inc = h->rec.incarnation;
	BEL_MH_PUT(h, F_ENT_RETIRE, bel_mh_ent_off(&h->geo, b), &e, sizeof(e));
	h->blk_state[b] = BEL_MH_BLK_RETIRED;
	h->part[p].nr_retired++;
	/* An own request for it is served. */
	if (h->nr_retire_q && bel_mh_retire_queued(h, b)) {
		u32 i, n = 0;

		for (i = 0; i < h->nr_retire_q; i++)
			if (h->retire_q[i] != b)
				h->retire_q[n++] = h->retire_q[i];
		h->nr_retire_q = n;
		bel_mh_retire_slots_sync(h);
	}
}

/* Unlink FREE block @b from owned partition @p's free list. */
static void bel_mh_free_list_del(struct bel_mh_host *h, u32 p, u32 b)
{
	struct bel_mh_part *pt = &h->part[p];
	u32 *link = &pt->free_head;
	u32 steps = 0;

	/* A walk: memory errors are rare, a second link costs every block. */
	while (*link != BEL_MH_NONE && *link != b && steps++ <= pt->nr)
		link = &h->blk_next[*link];
	if (*link != b) {
		BEL_ASSERT(0);
		return;
	}
	*link = h->blk_next[b];
	h->blk_next[b] = BEL_MH_NONE;
	pt->nr_free--;
}

/*
 * Retire block @b of owned partition @p now, whatever its state: true
 * when this call changed something (an ALLOCATED block is only marked, to
 * be retired when its client lets go).
 */
static bool bel_mh_retire_owned(struct bel_mh_host *h, u32 p, u32 b)
{
	struct bel_mh_entry e;

	switch (h->blk_state[b]) {
	case BEL_MH_BLK_FREE:
		bel_mh_free_list_del(h, p, b);
		bel_mh_retire_unlinked(h, p, b);
		return true;
	case BEL_MH_BLK_ALLOCATED:
		if (h->blk_bad[b])
			return false;
		h->blk_bad[b] = 1;
		return true;
	case BEL_MH_BLK_PUBLISHED:
		/*
		 * Unlinked first: a RETIRED entry left in a chain by a fence
		 * between the two stores would cut the chain at the next
		 * rebuild. Pins, this host's or others', stay until released.
		 */
		bel_mh_read(h, bel_mh_ent_off(&h->geo, b), &e, sizeof(e));
		bel_mh_unlink(h, p, b, &e, BEL_MH_F_ENT_RETIRE);
		if (!h->blk_pins[b])
			bel_mh_lru_del(h, p, b);
		h->part[p].nr_published--;
		bel_mh_retire_unlinked(h, p, b);
		return true;
	default:
		return false;
	}
}

/* Is the own request for block @b served: does its entry read RETIRED? */
static bool bel_mh_retire_done(struct bel_mh_host *h, u32 b)
{
	struct bel_mh_entry e;

	if (h->part[bel_mh_part_of(h, b)].owned)
		return h->blk_state[b] == BEL_MH_BLK_RETIRED;
	BEL_MH_GET(h, I_RETIRE_CHECK, bel_mh_ent_off(&h->geo, b), &e,
		   sizeof(e));
	return le32_to_cpu(e.state) == BEL_MH_ENT_RETIRED &&
	       le32_to_cpu(e.block) == b;
}

void bel_mh_retire_slots_sync(struct bel_mh_host *h)
{
	u32 s;

	bel_spin_lock(&h->rec_lock);
	for (s = 0; s < BEL_MH_RETIRE_SLOTS; s++)
		h->rec.retire[s] = s < h->nr_retire_q ?
				   bel_mh_link_enc(h->retire_q[s]) : 0;
	bel_spin_unlock(&h->rec_lock);
}

void bel_mh_serve_retires(struct bel_mh_host *h)
{
	u32 x, s, i, n = 0;

	for (x = 0; x < h->geo.max_hosts; x++) {
		if (x == h->id)
			continue;
		for (s = 0; s < BEL_MH_RETIRE_SLOTS; s++) {
			u32 b = h->view[x].retire[s];
			u32 p;

			if (b >= h->geo.nr_blocks)
				continue;
			p = bel_mh_part_of(h, b);
			if (h->part[p].owned)
				bel_mh_retire_owned(h, p, b);
		}
	}
	if (!h->nr_retire_q)
		return;
	for (i = 0; i < h->nr_retire_q; i++) {
		u32 b = h->retire_q[i];
		u32 p = bel_mh_part_of(h, b);

		if (h->part[p].owned)
			bel_mh_retire_owned(h, p, b);
		if (!bel_mh_retire_done(h, b))
			h->retire_q[n++] = b;
	}
	if (n != h->nr_retire_q) {
		h->nr_retire_q = n;
		bel_mh_retire_slots_sync(h);
	}
}

int bel_mh_retire(struct bel_mh_host *h, u32 block)
{
	bool news = false, asked = false;
	int ret;
	u32 p;

	bel_mutex_lock(&h->lock);
	ret = bel_mh_usable(h);
	if (!ret && block >= h->geo.nr_blocks)
		ret = -EINVAL;
	if (ret)
		goto out;
	p = bel_mh_part_of(h, block);
	if (h->part[p].owned)
		news = bel_mh_retire_owned(h, p, block);
	/*
	 * Remembered until the entry reads RETIRED, also in an own partition:
	 * an ALLOCATED block is retired only when let go, and a partition
	 * may move to another host before.
	 */
	if (!bel_mh_retire_queued(h, block) && !bel_mh_retire_done(h, block)) {
		if (h->nr_retire_q == BEL_MH_RETIRE_QUEUE) {
			ret = -ENOSPC;
			goto out;
		}
		h->retire_q[h->nr_retire_q++] = block;
		asked = !news;
		if (h->nr_retire_q <= BEL_MH_RETIRE_SLOTS)
			bel_mh_retire_slots_sync(h);
	}
	if (news)
		ret = BEL_MH_RETIRED_NOW;
	else if (asked)
		ret = BEL_MH_RETIRE_ASKED;
out:
	bel_mutex_unlock(&h->lock);
	/* The request reaches the device now, not a heartbeat later. */
	if (asked)
		bel_mh_heartbeat(h);
	return ret;
}

/* --- payload --------------------------------------------------------------- */

void bel_mh_payload_write(struct bel_mh_host *h, u32 block, u64 off,
			  const void *src, u32 len)
{
	u64 o = bel_mh_block_off(&h->geo, block) + off;

	BEL_MH_PUT(h, F_PAYLOAD, o, src, len);
	bel_mh_fence(h);
}

void bel_mh_payload_read(struct bel_mh_host *h, u32 block, u64 off,
			 void *dst, u32 len)
{
	u64 o = bel_mh_block_off(&h->geo, block) + off;

	BEL_MH_INVAL(h, I_PAYLOAD, o, len);
	bel_mh_read(h, o, dst, len);
}
