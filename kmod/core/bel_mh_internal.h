/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Beluga multi-host: what the protocol's files (mh_format.c, mh_host.c,
 * mh_ops.c) share and nothing else should use: the accessor layer through
 * which every access to shared metadata goes, layout helpers, partition
 * lists and bucket chains. The simulator's white-box tests
 * (tests/unit/mh) include it too.
 */
#ifndef BEL_MH_INTERNAL_H
#define BEL_MH_INTERNAL_H

#include "bel_mh.h"

/* --- flush and invalidate sites (bel_mh_sites[]) ------------------------- */

#ifdef BEL_MH_TESTING
/* The one disabled site, or BEL_MH_SITE_NONE. Defined by the simulator. */
extern int bel_mh_site_off;
static inline bool bel_mh_site_on(int site)
{
	return site != bel_mh_site_off;
}
#else
static inline bool bel_mh_site_on(int site)
{
	(void)site;
	return true;
}
#endif

/* --- accessors: the only way the protocol touches shared metadata ------- */

static inline u64 bel_mh_nlines(u64 off, u64 len)
{
	if (!len)
		return 0;
	return ((off + len - 1) / BEL_MH_LINE) - off / BEL_MH_LINE + 1;
}

static inline void bel_mh_read(struct bel_mh_host *h, u64 off, void *dst,
			       u32 len)
{
	h->cnt.reads += bel_mh_nlines(off, len);
	h->ops->read(h->priv, off, dst, len);
}

/*
 * Write then flush: every store to the pool, one a host may depend on.
 * The fence is checked once, before the write; a store that passed it is
 * always flushed at once, even if the deadline passes in between: a
 * dirty line cannot be taken back, only written back now or at a time the
 * hardware chooses (an eviction, the next invalidate, long after another
 * host has reused the line). Written back now, it reaches the device
 * before the lease ends, as long as the stall between check and flush
 * stays below lease - fence (Documentation/multihost.md, section 1). False when
 * the store was dropped because the host is fenced.
 */
static inline bool bel_mh_put(struct bel_mh_host *h, int site, u64 off,
			      const void *src, u32 len)
{
	if (bel_mh_fenced_now(h))
		return false;
	h->cnt.writes += bel_mh_nlines(off, len);
	h->ops->write(h->priv, off, src, len);
	if (bel_mh_site_on(site)) {
		h->cnt.flushes += bel_mh_nlines(off, len);
		h->ops->flush(h->priv, site, off, len);
	}
	return true;
}

/*
 * Invalidate, so that the next read comes from the device. Not subject to
 * the fence: every store is flushed by bel_mh_put(), so the lines dropped
 * here are clean and nothing is written back.
 */
static inline void bel_mh_inval_at(struct bel_mh_host *h, int site, u64 off,
				   u64 len)
{
	if (!bel_mh_site_on(site))
		return;
	h->cnt.invals += bel_mh_nlines(off, len);
	h->ops->inval(h->priv, site, off, len);
}

static inline void bel_mh_fence(struct bel_mh_host *h)
{
	h->cnt.fences++;
	h->ops->fence(h->priv);
}

#define BEL_MH_INVAL(h, site, off, len) \
	bel_mh_inval_at(h, BEL_MH_##site, off, len)

/* Invalidate then read: a line another host may have written. */
static inline void bel_mh_get(struct bel_mh_host *h, int site, u64 off,
			      void *dst, u32 len)
{
	bel_mh_inval_at(h, site, off, len);
	bel_mh_read(h, off, dst, len);
}

#define BEL_MH_PUT(h, site, off, src, len) \
	bel_mh_put(h, BEL_MH_##site, off, src, len)
#define BEL_MH_GET(h, site, off, dst, len) \
	bel_mh_get(h, BEL_MH_##site, off, dst, len)

/* Read, after invalidating at @site unless it is 0 (a line we write). */
static inline void bel_mh_load(struct bel_mh_host *h, int site, u64 off,
			       void *dst, u32 len)
{
	if (site)
		bel_mh_inval_at(h, site, off, len);
	bel_mh_read(h, off, dst, len);
}

/* Chain links: block + 1, 0 for none. */
static inline u32 bel_mh_link_dec(__le32 v)
{
	u32 x = le32_to_cpu(v);

	return x ? x - 1 : BEL_MH_NONE;
}

static inline __le32 bel_mh_link_enc(u32 b)
{
	return cpu_to_le32(b == BEL_MH_NONE ? 0 : b + 1);
}

/* A preemption point of a long walk (the host mutex may be held). */
static inline void bel_mh_resched(struct bel_mh_host *h)
{
	h->ops->resched(h->priv);
}

static inline u64 bel_mh_now(struct bel_mh_host *h)
{
	return h->ops->now_ns(h->priv);
}

/* --- small helpers shared by the mh files ------------------------------- */

static inline u64 bel_mh_rec_off(const struct bel_mh_geo *g, u32 id)
{
	return g->host_off + (u64)id * BEL_MH_LINE;
}

static inline u64 bel_mh_pin_off(const struct bel_mh_geo *g, u32 id,
				 u32 block)
{
	return g->pin_off + (u64)id * g->pin_stride + (u64)block * 4;
}

static inline u64 bel_mh_ent_off(const struct bel_mh_geo *g, u32 block)
{
	return g->index_off + (u64)block * BEL_MH_LINE;
}

static inline u64 bel_mh_bucket_off(const struct bel_mh_geo *g, u32 part,
				    u32 bucket)
{
	return g->bucket_off + (u64)part * g->bucket_stride +
	       (u64)bucket * 4;
}

/* Bucket of (ns, key): the same in every partition (format: hash). */
static inline u32 bel_mh_bucket_of(const struct bel_mh_geo *g, u64 ns,
				   u64 key_lo, u64 key_hi)
{
	return (u32)bel_key_hash(ns, key_lo, key_hi) & (g->buckets - 1);
}

/* The partition holding @block. */
u32 bel_mh_part_of(const struct bel_mh_host *h, u32 block);

/* --- mh_format.c --------------------------------------------------------- */

/*
 * Compute a layout for @region_size and the format parameters of @cfg.
 * -EINVAL when the region cannot hold the metadata and one block per
 * partition.
 */
int bel_mh_layout(u64 region_size, const struct bel_mh_config *cfg,
		  struct bel_mh_geo *geo);

/* --- mh_host.c ----------------------------------------------------------- */

/* Alive in this host's view (itself: while joined and not fenced). */
bool bel_mh_alive(const struct bel_mh_host *h, u32 id);
/* Designated owner of partition @p in this host's view, or BEL_MH_NONE. */
u32 bel_mh_designated(const struct bel_mh_host *h, u32 p);

/* One claim attempt of partition @p (h->lock held): 0 or -EBUSY. */
int bel_mh_try_claim(struct bel_mh_host *h, u32 p);
/*
 * Give up owned partition @p now (-EBUSY while this host has blocks of it
 * ALLOCATED). The tick may claim it again if it is designated to us.
 */
int bel_mh_release_part(struct bel_mh_host *h, u32 p);

/* --- internal, shared between the mh files ----------------------------- */

/* A record's retire requests into a view (block numbers, or BEL_MH_NONE). */
static inline void bel_mh_view_retire(struct bel_mh_view *v,
				      const struct bel_mh_host_rec *r)
{
	u32 s;

	for (s = 0; s < BEL_MH_RETIRE_SLOTS; s++)
		v->retire[s] = bel_mh_link_dec(r->retire[s]);
}

/*
 * The tick, h->lock held: retire the blocks of owned partitions that any
 * record asks for, and drop the own requests whose entries read RETIRED.
 */
void bel_mh_serve_retires(struct bel_mh_host *h);
/* Copy the first queued requests into the own record (takes rec_lock). */
void bel_mh_retire_slots_sync(struct bel_mh_host *h);

void bel_mh_view_update(struct bel_mh_host *h, u32 x,
			const struct bel_mh_host_rec *r, u64 now);
/* Invalidate and read every other host's record; update the views. */
void bel_mh_observe(struct bel_mh_host *h);
/* 0, -ENODEV (not joined) or -ESTALE (fenced). */
int bel_mh_usable(struct bel_mh_host *h);
/* Owned partition @p: its LRU of unpinned PUBLISHED blocks, free list. */
void bel_mh_lru_add(struct bel_mh_host *h, u32 p, u32 b);
void bel_mh_lru_del(struct bel_mh_host *h, u32 p, u32 b);
void bel_mh_free_push(struct bel_mh_host *h, u32 p, u32 b);
u32 bel_mh_free_pop(struct bel_mh_host *h, u32 p);
/* Bucket heads of partition @p: read (invalidating at @site unless 0). */
u32 bel_mh_get_head(struct bel_mh_host *h, u32 p, u32 bucket, int site);
void bel_mh_set_head(struct bel_mh_host *h, u32 p, u32 bucket, u32 block,
		     int site);
u32 bel_mh_ent_bucket(const struct bel_mh_host *h,
		      const struct bel_mh_entry *e);
/* Is writer (@w, @winc) of an entry dead in this host's view? */
bool bel_mh_writer_dead(const struct bel_mh_host *h, u32 w, u32 winc);

#endif /* BEL_MH_INTERNAL_H */
