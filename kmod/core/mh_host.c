// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-host: heartbeat, liveness, and the ownership of partitions (claim,
 * release, rebuild at takeover). See Documentation/multihost.md, section 6.
 *
 * Liveness is judged by each host on its own clock: another host is dead
 * when its heartbeat counter has not moved for a lease; that is sticky for
 * the incarnation. A host whose own heartbeat is older than lease/2 stores
 * nothing any more (bel_mh_fenced_now()), so by the time anyone acts on its
 * death it has stopped writing.
 *
 * Partition ownership without compare-and-swap: the claimant sets the bit
 * in its own record, flushes, fences, and re-reads every other record
 * after invalidating; if another host that is alive in its view has the
 * bit too, it withdraws. Two racing claimants cannot both miss each other.
 */
#include "bel_mh_internal.h"

void bel_mh_view_update(struct bel_mh_host *h, u32 x,
			const struct bel_mh_host_rec *r, u64 now)
{
	struct bel_mh_view *v = &h->view[x];
	u32 inc = le32_to_cpu(r->incarnation);
	u64 hb = le64_to_cpu(r->heartbeat);

	if (inc != v->inc) {
		/* A new life: whatever we concluded about the old one ends. */
		v->inc = inc;
		v->hb = hb;
		v->changed_at = now;
		v->dead = false;
	} else if (hb != v->hb) {
		v->hb = hb;
		v->changed_at = now;
	}
	v->state = le32_to_cpu(r->state);
	v->owned = le32_to_cpu(r->owned);
	v->flags = le32_to_cpu(r->flags);
	bel_mh_view_retire(v, r);
	if (v->state == BEL_MH_HOST_ACTIVE && !v->dead &&
	    now - v->changed_at > bel_mh_dead_after_ns(h, v->flags))
		v->dead = true;
}

/*
 * A silent host's devices may still write into the pool until its watchdog
 * (or whatever fence it declared) has stopped them: W after its own fence,
 * which comes at most lease/2 after the last heartbeat anyone saw. The
 * extra half lease covers the clocks' drift and the observer's tick.
 */
u64 bel_mh_dead_after_ns(const struct bel_mh_host *h, u32 flags)
{
	u64 lease = h->geo.lease_ns;

	if (!(flags & BEL_MH_REC_DEVICE_PINS))
		return lease;
	return lease + (u64)(flags >> BEL_MH_REC_FENCE_SHIFT) * 1000000ULL +
	       lease / 2;
}

void bel_mh_observe(struct bel_mh_host *h)
{
	u32 x;

	for (x = 0; x < h->geo.max_hosts; x++) {
		struct bel_mh_host_rec r;

		if (x == h->id)
			continue;
		BEL_MH_GET(h, I_REC_OBSERVE, bel_mh_rec_off(&h->geo, x), &r,
			   sizeof(r));
		bel_mh_view_update(h, x, &r, bel_mh_now(h));
	}
}

bool bel_mh_alive(const struct bel_mh_host *h, u32 id)
{
	const struct bel_mh_view *v;

	if (id == h->id)
		return h->joined && !BEL_READ(h->fenced);
	v = &h->view[id];
	return v->state == BEL_MH_HOST_ACTIVE && !v->dead;
}

bool bel_mh_writer_dead(const struct bel_mh_host *h, u32 w, u32 winc)
{
	const struct bel_mh_view *v;

	if (w >= h->geo.max_hosts)
		return true;
	if (w == h->id)
		return winc != le32_to_cpu(h->rec.incarnation);
	v = &h->view[w];
	if ((s32)(winc - v->inc) < 0)
		return true;		/* an older incarnation */
	if (winc == v->inc)
		return v->dead || v->state != BEL_MH_HOST_ACTIVE;
	return false;			/* newer than our view: alive */
}

u32 bel_mh_designated(const struct bel_mh_host *h, u32 p)
{
	u32 best = BEL_MH_NONE;
	u64 best_w = 0;
	u32 x;

	if (bel_mh_alive(h, p))
		return p;
	/* Rendezvous hashing: only the orphans of a changed host move. */
	for (x = 0; x < h->geo.max_hosts; x++) {
		u64 w;

		if (!bel_mh_alive(h, x))
			continue;
		w = bel_mix64(((u64)p << 32 | x) ^ 0x2545f4914f6cdd1dULL);
		if (best == BEL_MH_NONE || w > best_w) {
			best = x;
			best_w = w;
		}
	}
	return best;
}

int bel_mh_usable(struct bel_mh_host *h)
{
	if (!h->joined)
		return -ENODEV;
	return bel_mh_fenced_now(h) ? -ESTALE : 0;
}

/* Write and flush the own record (rec_lock held). */
static void bel_mh_put_rec_locked(struct bel_mh_host *h, int site)
{
	u64 off = bel_mh_rec_off(&h->geo, h->id);

	bel_mh_put(h, site, off, &h->rec, sizeof(h->rec));
}

void bel_mh_heartbeat(struct bel_mh_host *h)
{
	u64 now;

	bel_spin_lock(&h->rec_lock);
	if (h->joined && !bel_mh_fenced_now(h)) {
		now = bel_mh_now(h);
		h->rec.heartbeat = cpu_to_le64(le64_to_cpu(h->rec.heartbeat) +
					       1);
		bel_mh_put_rec_locked(h, BEL_MH_F_REC_HB);
		BEL_WRITE(h->last_hb, now);
	}
	bel_spin_unlock(&h->rec_lock);
}

/* A live host that would reuse our blocks after one lease, if any. */
static u32 bel_mh_unaware_peer(const struct bel_mh_host *h)
{
	u32 x;

	for (x = 0; x < h->geo.max_hosts; x++)
		if (x != h->id && bel_mh_alive(h, x) &&
		    !(h->view[x].flags & BEL_MH_REC_LEASE_AWARE))
			return x;
	return BEL_MH_NONE;
}

int bel_mh_device_lease(struct bel_mh_host *h, bool pins, u32 fence_ms)
{
	u32 flags = BEL_MH_REC_LEASE_AWARE;
	int ret = 0;

	if (pins && (!fence_ms || fence_ms > BEL_MH_REC_FENCE_MAX_MS)) {
		h->why = "device lease: W out of range";
		return -ERANGE;
	}
	if (pins)
		flags |= BEL_MH_REC_DEVICE_PINS |
			 fence_ms << BEL_MH_REC_FENCE_SHIFT;
	bel_mutex_lock(&h->lock);
	if (!h->joined) {
		ret = -ESTALE;
		goto out;
	}
	if (pins) {
		/* A fresh look: a host may have joined since the last tick. */
		bel_mh_observe(h);
		if (bel_mh_unaware_peer(h) != BEL_MH_NONE) {
			h->why = "a live host ignores device leases (format before 1.3)";
			ret = -EPROTO;
			goto out;
		}
	}
	/*
	 * The heartbeat moves with the lease, so that a host that goes
	 * silent right after this store is timed by every observer from a
	 * heartbeat they read together with the lease.
	 */
	bel_spin_lock(&h->rec_lock);
	if (bel_mh_fenced_now(h)) {
		ret = -ESTALE;
	} else {
		h->rec.flags = cpu_to_le32(flags);
		h->rec.heartbeat = cpu_to_le64(le64_to_cpu(h->rec.heartbeat) +
					       1);
		bel_mh_put_rec_locked(h, BEL_MH_F_REC_DEVICE);
		BEL_WRITE(h->last_hb, bel_mh_now(h));
	}
	bel_spin_unlock(&h->rec_lock);
out:
	bel_mutex_unlock(&h->lock);
	return ret;
}

bool bel_mh_device_lease_unsafe(struct bel_mh_host *h)
{
	bool unsafe;

	bel_mutex_lock(&h->lock);
	unsafe = h->joined &&
		 (le32_to_cpu(h->rec.flags) & BEL_MH_REC_DEVICE_PINS) &&
		 bel_mh_unaware_peer(h) != BEL_MH_NONE;
	bel_mutex_unlock(&h->lock);
	return unsafe;
}

/* Drop partition @p from the own record (the next heartbeat stores it). */
static void bel_mh_rec_clear_owned(struct bel_mh_host *h, u32 p)
{
	bel_spin_lock(&h->rec_lock);
	h->rec.owned = cpu_to_le32(le32_to_cpu(h->rec.owned) & ~(1U << p));
	bel_spin_unlock(&h->rec_lock);
}

/* --- per-partition lists (owned partitions only) ------------------------ */

void bel_mh_lru_add(struct bel_mh_host *h, u32 p, u32 b)
{
	struct bel_mh_part *pt = &h->part[p];

	h->blk_stamp[b] = ++h->lru_clock;
	h->blk_next[b] = BEL_MH_NONE;
	h->blk_prev[b] = pt->lru_tail;
	if (pt->lru_tail != BEL_MH_NONE)
		h->blk_next[pt->lru_tail] = b;
	else
		pt->lru_head = b;
	pt->lru_tail = b;
	pt->nr_lru++;
}

void bel_mh_lru_del(struct bel_mh_host *h, u32 p, u32 b)
{
	struct bel_mh_part *pt = &h->part[p];

	if (h->blk_prev[b] != BEL_MH_NONE)
		h->blk_next[h->blk_prev[b]] = h->blk_next[b];
	else
		pt->lru_head = h->blk_next[b];
	if (h->blk_next[b] != BEL_MH_NONE)
		h->blk_prev[h->blk_next[b]] = h->blk_prev[b];
	else
		pt->lru_tail = h->blk_prev[b];
	h->blk_next[b] = BEL_MH_NONE;
	h->blk_prev[b] = BEL_MH_NONE;
	pt->nr_lru--;
}

void bel_mh_free_push(struct bel_mh_host *h, u32 p, u32 b)
{
	struct bel_mh_part *pt = &h->part[p];

	h->blk_state[b] = BEL_MH_BLK_FREE;
	h->blk_prev[b] = BEL_MH_NONE;
	h->blk_next[b] = pt->free_head;
	pt->free_head = b;
	pt->nr_free++;
}

u32 bel_mh_free_pop(struct bel_mh_host *h, u32 p)
{
	struct bel_mh_part *pt = &h->part[p];
	u32 b = pt->free_head;

	if (b == BEL_MH_NONE)
		return b;
	pt->free_head = h->blk_next[b];
	h->blk_next[b] = BEL_MH_NONE;
	pt->nr_free--;
	return b;
}

/* Forget an owned partition's DRAM state (after release or on fence). */
static void bel_mh_drop_part(struct bel_mh_host *h, u32 p)
{
	struct bel_mh_part *pt = &h->part[p];
	u32 b;

	for (b = pt->first; b < pt->first + pt->nr; b++) {
		h->blk_state[b] = BEL_MH_BLK_FREE;
		h->blk_bad[b] = 0;
		h->blk_next[b] = BEL_MH_NONE;
		h->blk_prev[b] = BEL_MH_NONE;
	}
	pt->owned = false;
	pt->releasing = false;
	pt->free_head = BEL_MH_NONE;
	pt->lru_head = BEL_MH_NONE;
	pt->lru_tail = BEL_MH_NONE;
	pt->nr_lru = 0;
	pt->nr_free = 0;
	pt->nr_allocated = 0;
	pt->nr_published = 0;
	pt->nr_retired = 0;
}

/*
 * Take over partition @p: walk every chain of its index after invalidating
 * (the previous owner wrote it) and repair what a dead owner left in
 * flight: a TENTATIVE entry is unlinked (its publish never finished), an
 * EVICTING one goes back to PUBLISHED (the block was not freed yet). Then
 * every other entry of the partition is read after invalidating: a RETIRED
 * one keeps its block out of service (a memory error, format 1.2). Every
 * other block without a linked PUBLISHED entry is free. Entries are never
 * moved, so readers of other hosts walking the chains meanwhile stay
 * correct.
 */
static void bel_mh_rebuild(struct bel_mh_host *h, u32 p)
{
	struct bel_mh_part *pt = &h->part[p];
	const int rd = BEL_MH_I_REBUILD;
	const int wr = BEL_MH_F_ENT_REBUILD;
	u64 max_seq = 0;
	u32 i, b;

	bel_mh_drop_part(h, p);
	for (i = 0; i < h->geo.buckets; i++) {
		struct bel_mh_entry pe, e;
		u32 prev = BEL_MH_NONE, steps = 0;
		u32 n;

		/* Millions of buckets in a large pool: let others run. */
		if (i && !(i % BEL_MH_RESCHED_EVERY))
			bel_mh_resched(h);
		n = bel_mh_get_head(h, p, i, rd);

		memset(&pe, 0, sizeof(pe));
		memset(&e, 0, sizeof(e));
		while (n != BEL_MH_NONE) {
			u32 st = BEL_MH_ENT_EMPTY, next;
			bool bad;

			bad = n < pt->first || n >= pt->first + pt->nr ||
			      steps++ >= pt->nr ||
			      h->blk_state[n] == BEL_MH_BLK_PUBLISHED;
			if (!bad) {
				bel_mh_load(h, rd, bel_mh_ent_off(&h->geo, n),
					    &e, sizeof(e));
				st = le32_to_cpu(e.state);
				bad = (st != BEL_MH_ENT_TENTATIVE &&
				       st != BEL_MH_ENT_PUBLISHED &&
				       st != BEL_MH_ENT_EVICTING) ||
				      bel_mh_ent_bucket(h, &e) != i;
			}
			/* Garbage: cut the chain there. */
			next = bad ? BEL_MH_NONE : bel_mh_link_dec(e.next);
			if (bad || st == BEL_MH_ENT_TENTATIVE) {
				if (prev == BEL_MH_NONE) {
					bel_mh_set_head(h, p, i, next, wr);
				} else {
					pe.next = bel_mh_link_enc(next);
					BEL_MH_PUT(h, F_ENT_REBUILD,
						   bel_mh_ent_off(&h->geo, prev),
						   &pe, sizeof(pe));
				}
				if (bad)
					break;
				n = next;
				continue;
			}
			if (st == BEL_MH_ENT_EVICTING) {
				e.state = cpu_to_le32(BEL_MH_ENT_PUBLISHED);
				BEL_MH_PUT(h, F_ENT_REBUILD,
					   bel_mh_ent_off(&h->geo, n), &e,
					   sizeof(e));
			}
			h->blk_state[n] = BEL_MH_BLK_PUBLISHED;
			pt->nr_published++;
			if (le64_to_cpu(e.seq) > max_seq)
				max_seq = le64_to_cpu(e.seq);
			if (!h->blk_pins[n])
				bel_mh_lru_add(h, p, n);
			prev = n;
			pe = e;
			n = next;
		}
	}
	/*
	 * RETIRED entries are linked nowhere: one line per block, read once
	 * per takeover (a 2 MiB block costs 64 bytes of it).
	 */
	for (b = pt->first; b < pt->first + pt->nr; b++) {
		struct bel_mh_entry e;

		if (b > pt->first &&
		    !((b - pt->first) % BEL_MH_RESCHED_EVERY))
			bel_mh_resched(h);
		if (h->blk_state[b] == BEL_MH_BLK_PUBLISHED)
			continue;
		BEL_MH_GET(h, I_RETIRED_SCAN, bel_mh_ent_off(&h->geo, b), &e,
			   sizeof(e));
		if (le32_to_cpu(e.state) == BEL_MH_ENT_RETIRED &&
		    le32_to_cpu(e.block) == b) {
			h->blk_state[b] = BEL_MH_BLK_RETIRED;
			pt->nr_retired++;
		}
	}
	/* Push in reverse so that the lowest block is handed out first. */
	for (b = pt->first + pt->nr; b-- > pt->first;)
		if (h->blk_state[b] == BEL_MH_BLK_FREE)
			bel_mh_free_push(h, p, b);
	pt->next_seq = max_seq + 1;
	pt->owned = true;
}

int bel_mh_try_claim(struct bel_mh_host *h, u32 p)
{
	u32 bit = 1U << p;
	bool conflict = false;
	u32 x;

	bel_spin_lock(&h->rec_lock);
	h->rec.owned = cpu_to_le32(le32_to_cpu(h->rec.owned) | bit);
	bel_mh_put_rec_locked(h, BEL_MH_F_REC_CLAIM);
	bel_spin_unlock(&h->rec_lock);
	bel_mh_fence(h);

	for (x = 0; x < h->geo.max_hosts; x++) {
		struct bel_mh_host_rec r;

		if (x == h->id)
			continue;
		BEL_MH_GET(h, I_REC_CLAIM, bel_mh_rec_off(&h->geo, x), &r,
			   sizeof(r));
		bel_mh_view_update(h, x, &r, bel_mh_now(h));
		if ((le32_to_cpu(r.owned) & bit) && bel_mh_alive(h, x))
			conflict = true;
	}
	if (conflict || bel_mh_usable(h)) {
		/* The next heartbeat publishes the withdrawal. */
		bel_mh_rec_clear_owned(h, p);
		h->part[p].backoff = 1 + h->id;
		return -EBUSY;
	}
	bel_mh_rebuild(h, p);
	return 0;
}

/* Is partition @p held by a host (not us) that is alive in our view? */
static bool bel_mh_held_elsewhere(const struct bel_mh_host *h, u32 p)
{
	u32 x;

	for (x = 0; x < h->geo.max_hosts; x++)
		if (x != h->id && (h->view[x].owned & (1U << p)) &&
		    bel_mh_alive(h, x))
			return true;
	return false;
}

void bel_mh_tick(struct bel_mh_host *h)
{
	u32 p;

	bel_mutex_lock(&h->lock);
	if (bel_mh_usable(h)) {
		bel_mutex_unlock(&h->lock);
		return;
	}
	bel_mh_observe(h);
	for (p = 0; p < h->geo.max_hosts; p++) {
		struct bel_mh_part *pt = &h->part[p];
		u32 d = bel_mh_designated(h, p);

		if (pt->owned) {
			pt->releasing = d != h->id;
			/* Drained: hand it over (published by the heartbeat). */
			if (pt->releasing && !pt->nr_allocated) {
				bel_mh_drop_part(h, p);
				bel_mh_rec_clear_owned(h, p);
			}
			continue;
		}
		if (d != h->id)
			continue;
		if (pt->backoff) {
			pt->backoff--;
			continue;
		}
		if (!bel_mh_held_elsewhere(h, p))
			bel_mh_try_claim(h, p);
	}
	bel_mh_serve_retires(h);
	bel_mutex_unlock(&h->lock);
	/* Also stores the own retire requests as they are now. */
	bel_mh_heartbeat(h);
}

int bel_mh_release_part(struct bel_mh_host *h, u32 p)
{
	int ret;

	if (p >= h->geo.max_hosts)
		return -EINVAL;
	bel_mutex_lock(&h->lock);
	ret = bel_mh_usable(h);
	if (!ret && (!h->part[p].owned || h->part[p].nr_allocated))
		ret = -EBUSY;
	if (!ret) {
		bel_mh_drop_part(h, p);
		bel_mh_rec_clear_owned(h, p);
	}
	bel_mutex_unlock(&h->lock);
	if (!ret)
		bel_mh_heartbeat(h);
	return ret;
}

/*
 * A host's name as status shows it: the bytes up to the first NUL, with
 * every byte that is not printable ASCII or is a space made '?'. The name
 * comes from another host's record: a peer must not forge status lines.
 */
static void bel_mh_copy_name(char *dst, const char *src, u32 len)
{
	u32 i;

	for (i = 0; i < len && src[i]; i++)
		dst[i] = src[i] > ' ' && src[i] < 0x7f ? src[i] : '?';
	for (; i < len; i++)
		dst[i] = 0;
}

static void bel_mh_host_info_flags(struct bel_mh_host_info *i, u32 flags)
{
	i->lease_aware = flags & BEL_MH_REC_LEASE_AWARE;
	i->device_pins = flags & BEL_MH_REC_DEVICE_PINS;
	i->device_fence_ms = i->device_pins ?
			     flags >> BEL_MH_REC_FENCE_SHIFT : 0;
}

void bel_mh_host_info_to_uapi(const struct bel_mh_host_info *x, u32 id,
			      struct beluga_host *out)
{
	memset(out, 0, sizeof(*out));
	out->host_id = id;
	out->state = x->state;
	out->flags = (x->alive ? BELUGA_HOST_ALIVE : 0) |
		     (x->self ? BELUGA_HOST_SELF : 0) |
		     (x->device_pins ? BELUGA_HOST_DEVICE_PINS : 0) |
		     (x->lease_aware ? BELUGA_HOST_LEASE_AWARE : 0);
	out->device_fence_ms = x->device_fence_ms;
	out->incarnation = x->incarnation;
	out->heartbeat = x->heartbeat;
	out->silent_ns = x->silent_ns;
	out->owned = x->owned;
	memcpy(out->name, x->name, sizeof(x->name));
}

int bel_mh_hosts(struct bel_mh_host *h, struct bel_mh_host_info *out,
		 u32 max)
{
	u64 now, last_hb;
	u32 x, n = 0;

	bel_mutex_lock(&h->lock);
	if (!h->joined) {
		bel_mutex_unlock(&h->lock);
		return -ENODEV;
	}
	now = bel_mh_now(h);
	for (x = 0; x < h->geo.max_hosts && n < max; x++, n++) {
		struct bel_mh_host_info *i = &out[n];
		const struct bel_mh_view *v = &h->view[x];

		memset(i, 0, sizeof(*i));
		i->self = x == h->id;
		i->alive = bel_mh_alive(h, x);
		if (i->self) {
			bel_mh_host_info_flags(i, le32_to_cpu(h->rec.flags));
			i->state = le32_to_cpu(h->rec.state);
			i->incarnation = le32_to_cpu(h->rec.incarnation);
			i->heartbeat = le64_to_cpu(h->rec.heartbeat);
			i->owned = le32_to_cpu(h->rec.owned);
			/* The heartbeat runs beside this: it may be newer than now. */
			last_hb = BEL_READ(h->last_hb);
			i->silent_ns = now > last_hb ? now - last_hb : 0;
			bel_mh_copy_name(i->name, h->rec.name,
					 sizeof(i->name));
		} else {
			struct bel_mh_host_rec r;

			BEL_MH_GET(h, I_REC_OBSERVE,
				   bel_mh_rec_off(&h->geo, x), &r, sizeof(r));
			bel_mh_view_update(h, x, &r, now);
			i->state = v->state;
			i->incarnation = v->inc;
			i->heartbeat = v->hb;
			i->owned = v->owned;
			bel_mh_host_info_flags(i, v->flags);
			i->alive = bel_mh_alive(h, x);
			i->silent_ns = now - v->changed_at;
			bel_mh_copy_name(i->name, r.name, sizeof(i->name));
		}
	}
	bel_mutex_unlock(&h->lock);
	return (int)n;
}
