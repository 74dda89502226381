// SPDX-License-Identifier: GPL-2.0
/*
 * Multi-host: the on-media layout, superblock checks, format, and the
 * attach (format or join) and leave of a host. See Documentation/multihost.md,
 * sections 4 and 6.
 *
 * Format without compare-and-swap: a host that finds no valid superblock
 * writes its format intent (its own line), flushes, fences and reads every
 * other intent after invalidating. If it sees another fresh intent it
 * withdraws and backs off by host id; otherwise it formats. Of two racing
 * hosts at least one sees the other, so they never both format. An intent
 * that has not changed for a lease is stale (its host died while
 * formatting) and is ignored.
 */
#include "bel_mh_internal.h"

const struct bel_mh_site_info bel_mh_sites[BEL_MH_NR_SITES] = {
	[BEL_MH_SITE_NONE] = { "NONE", "no site" },
	[BEL_MH_F_INTENT_SET] = { "F_INTENT_SET", "flush format intent" },
	[BEL_MH_F_INTENT_CLEAR] = { "F_INTENT_CLEAR", "flush format intent withdrawal" },
	[BEL_MH_F_FMT_ZERO] = { "F_FMT_ZERO", "flush zeroed metadata at format" },
	[BEL_MH_F_SUPER] = { "F_SUPER", "flush superblock at format" },
	[BEL_MH_F_REC_HB] = { "F_REC_HB", "flush own host record (join, heartbeat, release)" },
	[BEL_MH_F_REC_CLAIM] = { "F_REC_CLAIM", "flush partition claim" },
	[BEL_MH_F_REC_LEAVE] = { "F_REC_LEAVE", "flush host record LEFT" },
	[BEL_MH_F_REC_DEVICE] = { "F_REC_DEVICE", "flush host record device lease" },
	[BEL_MH_F_PIN] = { "F_PIN", "flush pin word" },
	[BEL_MH_F_UNPIN] = { "F_UNPIN", "flush pin word clear" },
	[BEL_MH_F_ENT_TENTATIVE] = { "F_ENT_TENTATIVE", "flush tentative index entry" },
	[BEL_MH_F_ENT_LINK] = { "F_ENT_LINK", "flush bucket head linking a new entry" },
	[BEL_MH_F_ENT_COMMIT] = { "F_ENT_COMMIT", "flush published index entry" },
	[BEL_MH_F_ENT_WITHDRAW] = { "F_ENT_WITHDRAW", "flush unlink of a withdrawn entry" },
	[BEL_MH_F_ENT_EVICTING] = { "F_ENT_EVICTING", "flush evicting index entry" },
	[BEL_MH_F_ENT_ROLLBACK] = { "F_ENT_ROLLBACK", "flush eviction rollback" },
	[BEL_MH_F_ENT_UNLINK] = { "F_ENT_UNLINK", "flush unlink of an evicted entry" },
	[BEL_MH_F_ENT_REBUILD] = { "F_ENT_REBUILD", "flush entry repaired at takeover" },
	[BEL_MH_F_ENT_RETIRE] = { "F_ENT_RETIRE", "flush unlink, RETIRED entry" },
	[BEL_MH_F_PAYLOAD] = { "F_PAYLOAD", "flush block payload" },
	[BEL_MH_I_SUPER] = { "I_SUPER", "invalidate superblock" },
	[BEL_MH_I_INTENT] = { "I_INTENT", "invalidate format intents" },
	[BEL_MH_I_REC_OBSERVE] = { "I_REC_OBSERVE", "invalidate host records (observe)" },
	[BEL_MH_I_REC_CLAIM] = { "I_REC_CLAIM", "invalidate host records (claim check)" },
	[BEL_MH_I_PROBE] = { "I_PROBE", "invalidate index lines (lookup)" },
	[BEL_MH_I_PUB_PRE] = { "I_PUB_PRE", "invalidate index lines (publish pre-check)" },
	[BEL_MH_I_PUB_CHECK] = { "I_PUB_CHECK", "invalidate index lines (publish race check)" },
	[BEL_MH_I_PIN_CHECK] = { "I_PIN_CHECK", "invalidate index entry (pin validation)" },
	[BEL_MH_I_EVICT_PINS] = { "I_EVICT_PINS", "invalidate pin words (eviction)" },
	[BEL_MH_I_REBUILD] = { "I_REBUILD", "invalidate index at takeover" },
	[BEL_MH_I_RETIRED_SCAN] = { "I_RETIRED_SCAN", "invalidate entries (takeover scan)" },
	[BEL_MH_I_RETIRE_CHECK] = { "I_RETIRE_CHECK", "invalidate entry (retire done?)" },
	[BEL_MH_I_PAYLOAD] = { "I_PAYLOAD", "invalidate block payload before read" },
};

/* Zeroes written at format, a page at a time. */
static const u8 bel_mh_zero[4096];

u32 bel_mh_csum(const void *buf, u32 len)
{
	const u8 *p = buf;
	u64 h = 0x6a09e667f3bcc908ULL ^ len;
	u32 i;

	for (i = 0; i + 8 <= len; i += 8) {
		u64 w;

		memcpy(&w, p + i, 8);
		h = bel_mix64(h ^ w) + 0x9e3779b97f4a7c15ULL;
	}
	for (; i < len; i++)
		h = bel_mix64(h ^ p[i]);
	return (u32)(h ^ (h >> 32));
}

static u64 bel_mh_roundup(u64 x, u64 align)
{
	return (x + align - 1) & ~(align - 1);
}

static u64 bel_mh_pow2_at_least(u64 x)
{
	u64 r = 1;

	while (r < x)
		r <<= 1;
	return r;
}

static bool bel_mh_is_pow2(u64 x)
{
	return x && !(x & (x - 1));
}

int bel_mh_layout(u64 region_size, const struct bel_mh_config *cfg,
		  struct bel_mh_geo *g)
{
	u64 bs = cfg->block_size ? cfg->block_size : BELUGA_BLOCK_SIZE_DEFAULT;
	u64 align = cfg->data_align ? cfg->data_align : BEL_MH_DEF_DATA_ALIGN;
	u32 hosts = cfg->max_hosts ? cfg->max_hosts : BEL_MH_DEF_HOSTS;
	u32 hb = cfg->heartbeat_ms ? cfg->heartbeat_ms : BEL_MH_DEF_HEARTBEAT_MS;
	u32 lease = cfg->lease_ms ? cfg->lease_ms : BEL_MH_DEF_LEASE_MS;
	u64 n, per, end;
	int rounds;

	memset(g, 0, sizeof(*g));
	if (bs < BELUGA_BLOCK_SIZE_MIN || bs > BELUGA_BLOCK_SIZE_MAX ||
	    bs % BELUGA_BLOCK_SIZE_MIN)
		return -EINVAL;
	if (!hosts || hosts > BEL_MH_MAX_HOSTS)
		return -EINVAL;
	if (!bel_mh_is_pow2(align) || align < 4096)
		return -EINVAL;
	/* A heartbeat must fit several times into half a lease. */
	if (!hb || lease < 4 * hb || lease > BEL_MH_MAX_LEASE_MS ||
	    hb < cfg->min_heartbeat_ms)
		return -EINVAL;

	g->region_size = region_size;
	g->block_size = bs;
	g->data_align = align;
	g->max_hosts = hosts;
	g->heartbeat_ns = (u64)hb * 1000000ULL;
	g->lease_ns = (u64)lease * 1000000ULL;
	g->host_off = BEL_MH_HOST_OFF;
	g->pin_off = BEL_MH_HOST_OFF + 4096;	/* 64 records at most */

	/*
	 * The metadata size depends on the number of blocks and the other way
	 * round: start from the upper bound and shrink until it fits. Each
	 * round only lowers n, and a smaller n never needs more metadata.
	 */
	n = bel_div64(region_size, bs);
	if (n > 0xfffffff0ULL)
		n = 0xfffffff0ULL;
	for (rounds = 0; rounds < 64; rounds++) {
		u64 fit, nb;

		g->pin_stride = bel_mh_roundup(n * 4, 4096);
		per = bel_div64(n + hosts - 1, hosts);
		/* Chains of 1/2 an entry on average. */
		nb = bel_mh_pow2_at_least(per * 2 < 16 ? 16 : per * 2);
		g->buckets = (u32)nb;
		g->bucket_stride = bel_mh_roundup(nb * 4, BEL_MH_LINE);
		g->index_off = g->pin_off + hosts * g->pin_stride;
		g->bucket_off = bel_mh_roundup(g->index_off + n * BEL_MH_LINE,
					       4096);
		end = g->bucket_off + hosts * g->bucket_stride;
		g->data_off = bel_mh_roundup(end, align);
		fit = g->data_off >= region_size ? 0 :
		      bel_div64(region_size - g->data_off, bs);
		if (fit >= n)
			break;
		n = fit;
	}
	if (n < hosts)
		return -EINVAL;
	g->nr_blocks = (u32)n;
	return 0;
}

u32 bel_mh_part_of(const struct bel_mh_host *h, u32 block)
{
	u32 p;

	for (p = h->geo.max_hosts - 1; p > 0; p--)
		if (block >= h->part[p].first)
			break;
	return p;
}

/* One step of a wait of the attach: -EINTR once the caller is killed. */
static int bel_mh_relax(struct bel_mh_host *h)
{
	if (h->ops->killed && h->ops->killed(h->priv)) {
		h->why = "interrupted by a fatal signal";
		return -EINTR;
	}
	h->ops->relax(h->priv);
	return 0;
}

/* Wait @ns on this host's clock, relaxing. */
static int bel_mh_wait(struct bel_mh_host *h, u64 ns)
{
	u64 t0 = bel_mh_now(h);
	int ret = 0;

	while (!ret && bel_mh_now(h) - t0 < ns)
		ret = bel_mh_relax(h);
	return ret;
}

static void bel_mh_encode_super(const struct bel_mh_geo *g, u64 nonce,
				struct bel_mh_super *sb)
{
	u64 u0 = bel_mix64(nonce ^ 0x5555aaaa5555aaaaULL);
	u64 u1 = bel_mix64(u0 ^ g->region_size);

	memset(sb, 0, sizeof(*sb));
	sb->magic = cpu_to_le64(BEL_MH_MAGIC);
	sb->version_major = cpu_to_le32(BEL_MH_VERSION_MAJOR);
	sb->version_minor = cpu_to_le32(BEL_MH_VERSION_MINOR);
	memcpy(sb->uuid, &u0, 8);
	memcpy(sb->uuid + 8, &u1, 8);
	sb->region_size = cpu_to_le64(g->region_size);
	sb->block_size = cpu_to_le64(g->block_size);
	sb->data_off = cpu_to_le64(g->data_off);
	sb->nr_blocks = cpu_to_le64(g->nr_blocks);
	sb->max_hosts = cpu_to_le32(g->max_hosts);
	sb->buckets = cpu_to_le32(g->buckets);
	sb->host_off = cpu_to_le64(g->host_off);
	sb->pin_off = cpu_to_le64(g->pin_off);
	sb->pin_stride = cpu_to_le64(g->pin_stride);
	sb->index_off = cpu_to_le64(g->index_off);
	sb->bucket_off = cpu_to_le64(g->bucket_off);
	sb->bucket_stride = cpu_to_le64(g->bucket_stride);
	sb->heartbeat_ms =
		cpu_to_le32((u32)bel_div64(g->heartbeat_ns, 1000000));
	sb->lease_ms = cpu_to_le32((u32)bel_div64(g->lease_ns, 1000000));
	sb->data_align = cpu_to_le64(g->data_align);
	sb->hash = cpu_to_le32(BEL_MH_HASH_MIX64);
	sb->csum = cpu_to_le32(bel_mh_csum(sb,
					   offsetof(struct bel_mh_super, csum)));
}

/* Check a superblock with a valid magic; fill h->geo. */
static int bel_mh_check_super(struct bel_mh_host *h,
			      const struct bel_mh_super *sb, u64 region_size)
{
	struct bel_mh_config c;
	struct bel_mh_geo want;
	struct bel_mh_geo *g = &h->geo;

	if (bel_mh_csum(sb, offsetof(struct bel_mh_super, csum)) !=
	    le32_to_cpu(sb->csum)) {
		h->why = "superblock checksum mismatch: corrupt pool (format to start over)";
		return -EUCLEAN;
	}
	if (le32_to_cpu(sb->version_major) != BEL_MH_VERSION_MAJOR) {
		h->why = "unsupported on-media format version";
		return -EPROTONOSUPPORT;
	}
	/* Every host must find a key in the bucket its publisher chose. */
	if (le32_to_cpu(sb->hash) != BEL_MH_HASH_MIX64) {
		h->why = "unsupported on-media bucket hash";
		return -EPROTONOSUPPORT;
	}
	memset(g, 0, sizeof(*g));
	g->region_size = le64_to_cpu(sb->region_size);
	g->block_size = le64_to_cpu(sb->block_size);
	g->data_off = le64_to_cpu(sb->data_off);
	g->data_align = le64_to_cpu(sb->data_align);
	g->nr_blocks = (u32)le64_to_cpu(sb->nr_blocks);
	g->max_hosts = le32_to_cpu(sb->max_hosts);
	g->buckets = le32_to_cpu(sb->buckets);
	g->host_off = le64_to_cpu(sb->host_off);
	g->pin_off = le64_to_cpu(sb->pin_off);
	g->pin_stride = le64_to_cpu(sb->pin_stride);
	g->index_off = le64_to_cpu(sb->index_off);
	g->bucket_off = le64_to_cpu(sb->bucket_off);
	g->bucket_stride = le64_to_cpu(sb->bucket_stride);
	g->heartbeat_ns = (u64)le32_to_cpu(sb->heartbeat_ms) * 1000000ULL;
	g->lease_ns = (u64)le32_to_cpu(sb->lease_ms) * 1000000ULL;
	memcpy(g->uuid, sb->uuid, sizeof(g->uuid));

	if (g->region_size != region_size) {
		h->why = "geometry mismatch: pool formatted for another region size";
		return -EINVAL;
	}
	if (h->cfg.block_size && h->cfg.block_size != g->block_size) {
		h->why = "geometry mismatch: the pool has another block size";
		return -EINVAL;
	}
	if (!g->max_hosts || g->max_hosts > BEL_MH_MAX_HOSTS) {
		h->why = "geometry mismatch: bad host count in the superblock";
		return -EINVAL;
	}
	/* Timings this host can keep, within the bounds of the format. */
	if (le32_to_cpu(sb->heartbeat_ms) < h->cfg.min_heartbeat_ms ||
	    le32_to_cpu(sb->lease_ms) > BEL_MH_MAX_LEASE_MS ||
	    le32_to_cpu(sb->lease_ms) < 4 * le32_to_cpu(sb->heartbeat_ms)) {
		h->why = "the pool's heartbeat or lease is out of range for this host";
		return -EINVAL;
	}
	/* The layout must be exactly the one this module computes. */
	memset(&c, 0, sizeof(c));
	c.block_size = g->block_size;
	c.max_hosts = g->max_hosts;
	c.data_align = g->data_align;
	c.heartbeat_ms = le32_to_cpu(sb->heartbeat_ms);
	c.lease_ms = le32_to_cpu(sb->lease_ms);
	if (bel_mh_layout(region_size, &c, &want) ||
	    want.data_off != g->data_off || want.nr_blocks != g->nr_blocks ||
	    want.buckets != g->buckets ||
	    want.host_off != g->host_off || want.pin_off != g->pin_off ||
	    want.pin_stride != g->pin_stride ||
	    want.index_off != g->index_off ||
	    want.bucket_off != g->bucket_off ||
	    want.bucket_stride != g->bucket_stride ||
	    le64_to_cpu(sb->nr_blocks) != g->nr_blocks) {
		h->why = "geometry mismatch: unexpected layout in the superblock";
		return -EINVAL;
	}
	if (h->cfg.expect_identity &&
	    (memcmp(g->uuid, h->cfg.expect_uuid, sizeof(g->uuid)) ||
	     g->nr_blocks != h->cfg.expect_nr_blocks)) {
		h->why = "the pool was formatted again meanwhile";
		return -EINVAL;
	}
	if (h->id >= g->max_hosts) {
		h->why = "host id out of range for this pool (max_hosts)";
		return -ERANGE;
	}
	return 0;
}

static u64 bel_mh_intent_off(u32 id)
{
	return BEL_MH_INTENT_OFF + (u64)id * BEL_MH_LINE;
}

static u64 bel_mh_cfg_lease_ns(const struct bel_mh_config *cfg)
{
	return (u64)(cfg->lease_ms ? cfg->lease_ms : BEL_MH_DEF_LEASE_MS) *
	       1000000ULL;
}

static u64 bel_mh_cfg_hb_ns(const struct bel_mh_config *cfg)
{
	return (u64)(cfg->heartbeat_ms ? cfg->heartbeat_ms :
		     BEL_MH_DEF_HEARTBEAT_MS) * 1000000ULL;
}

static void bel_mh_put_intent(struct bel_mh_host *h, int site, u64 nonce)
{
	struct bel_mh_intent it;

	memset(&it, 0, sizeof(it));
	if (nonce) {
		it.nonce = cpu_to_le64(nonce);
		it.progress = cpu_to_le64(++h->intent_progress);
	}
	bel_mh_put(h, site, bel_mh_intent_off(h->id), &it, sizeof(it));
}

/* 0: this host may format; -EAGAIN: another fresh intent, withdrawn. */
static int bel_mh_intent_try(struct bel_mh_host *h)
{
	u64 lease = bel_mh_cfg_lease_ns(&h->cfg);
	u64 nonce = h->cfg.nonce | 1;
	bool conflict = false;
	u32 x;

	bel_mh_put_intent(h, BEL_MH_F_INTENT_SET, nonce);
	bel_mh_fence(h);
	for (x = 0; x < BEL_MH_MAX_HOSTS; x++) {
		struct bel_mh_intent it;
		u64 n, p, now;

		if (x == h->id)
			continue;
		BEL_MH_GET(h, I_INTENT, bel_mh_intent_off(x), &it, sizeof(it));
		n = le64_to_cpu(it.nonce);
		p = le64_to_cpu(it.progress);
		now = bel_mh_now(h);
		if (!n) {
			h->intent_seen[x].nonce = 0;
			continue;
		}
		if (n != h->intent_seen[x].nonce ||
		    p != h->intent_seen[x].progress) {
			h->intent_seen[x].nonce = n;
			h->intent_seen[x].progress = p;
			h->intent_seen[x].since = now;
			conflict = true;
		} else if (now - h->intent_seen[x].since < lease) {
			conflict = true;
		}
		/* else: unchanged for a lease, its host died: ignore */
	}
	if (!conflict)
		return 0;
	bel_mh_put_intent(h, BEL_MH_F_INTENT_CLEAR, 0);
	return -EAGAIN;
}

/*
 * With an explicit format of a valid pool: refuse while any host record is
 * ACTIVE and its heartbeat moves within a lease.
 */
static int bel_mh_wait_no_live_hosts(struct bel_mh_host *h, u64 lease)
{
	u64 hb[BEL_MH_MAX_HOSTS];
	u32 inc[BEL_MH_MAX_HOSTS];
	u32 st[BEL_MH_MAX_HOSTS];
	u64 t0 = bel_mh_now(h);
	bool first = true;
	u32 x;

	memset(hb, 0, sizeof(hb));
	memset(inc, 0, sizeof(inc));
	memset(st, 0, sizeof(st));
	for (;;) {
		bool any_active = false;

		for (x = 0; x < BEL_MH_MAX_HOSTS; x++) {
			struct bel_mh_host_rec r;
			u64 off = BEL_MH_HOST_OFF + (u64)x * BEL_MH_LINE;

			if (x == h->id)
				continue;
			BEL_MH_GET(h, I_REC_OBSERVE, off, &r, sizeof(r));
			if (!first && st[x] == BEL_MH_HOST_ACTIVE &&
			    le32_to_cpu(r.state) == BEL_MH_HOST_ACTIVE &&
			    (hb[x] != le64_to_cpu(r.heartbeat) ||
			     inc[x] != le32_to_cpu(r.incarnation))) {
				h->why = "another host is attached to this pool: detach it first";
				return -EBUSY;
			}
			if (first || st[x] != le32_to_cpu(r.state)) {
				st[x] = le32_to_cpu(r.state);
				hb[x] = le64_to_cpu(r.heartbeat);
				inc[x] = le32_to_cpu(r.incarnation);
			}
			if (st[x] == BEL_MH_HOST_ACTIVE)
				any_active = true;
		}
		first = false;
		if (!any_active || bel_mh_now(h) - t0 > lease)
			return 0;
		if (bel_mh_relax(h))
			return -EINTR;
	}
}

/* Zero [start, end) in page-sized stores, flushing each. */
static void bel_mh_zero_range(struct bel_mh_host *h, u64 start, u64 end)
{
	u64 off = start;
	u32 pages = 0;

	while (off < end) {
		u32 len = end - off > sizeof(bel_mh_zero) ?
			  (u32)sizeof(bel_mh_zero) : (u32)(end - off);

		BEL_MH_PUT(h, F_FMT_ZERO, off, bel_mh_zero, len);
		off += len;
		/* Show progress so that nobody takes the intent for stale. */
		if (++pages % 1024 == 0) {
			bel_mh_put_intent(h, BEL_MH_F_INTENT_SET,
					  h->cfg.nonce | 1);
			bel_mh_relax(h);
		}
	}
}

static int bel_mh_format(struct bel_mh_host *h, u64 region_size)
{
	struct bel_mh_super sb;
	struct bel_mh_geo g;
	int ret;

	ret = bel_mh_layout(region_size, &h->cfg, &g);
	if (ret) {
		h->why = "cannot format: bad block size, lease < 4 heartbeats, or region too small";
		return ret;
	}
	if (h->id >= g.max_hosts) {
		h->why = "host id out of range for this pool (max_hosts)";
		return -ERANGE;
	}
	/* Every metadata area first, the superblock last. */
	bel_mh_zero_range(h, g.host_off, g.data_off);
	/*
	 * The data area too: no block of the new pool may show what an old
	 * pool or an earlier user of the range left there.
	 */
	bel_mh_zero_range(h, g.data_off,
			  g.data_off + (u64)g.nr_blocks * g.block_size);
	bel_mh_encode_super(&g, h->cfg.nonce, &sb);
	BEL_MH_PUT(h, F_SUPER, BEL_MH_SB_OFF, &sb, sizeof(sb));
	bel_mh_fence(h);
	h->geo = g;
	memcpy(h->geo.uuid, sb.uuid, sizeof(sb.uuid));
	h->formatted = true;
	return 0;
}

/* Find a valid superblock, or format; fills h->geo. */
static int bel_mh_format_or_check(struct bel_mh_host *h, u64 region_size)
{
	bool force = h->cfg.format;
	u32 attempts;
	int ret;

	for (attempts = 0; attempts < 1000000; attempts++) {
		struct bel_mh_super sb;
		bool valid;

		BEL_MH_GET(h, I_SUPER, BEL_MH_SB_OFF, &sb, sizeof(sb));
		valid = le64_to_cpu(sb.magic) == BEL_MH_MAGIC;
		if (valid && !force)
			return bel_mh_check_super(h, &sb, region_size);
		if (h->cfg.join_only) {
			h->why = "no pool to join any more (its superblock is gone)";
			return -ENOENT;
		}
		if (valid && force) {
			u64 lease = bel_mh_cfg_lease_ns(&h->cfg);

			if (!bel_mh_check_super(h, &sb, region_size))
				lease = h->geo.lease_ns;
			ret = bel_mh_wait_no_live_hosts(h, lease);
			if (ret)
				return ret;
		}
		ret = bel_mh_intent_try(h);
		if (ret == -EAGAIN) {
			/* Lower ids retry sooner, so one of them wins. */
			if (bel_mh_wait(h, (u64)(1 + h->id) *
					   bel_mh_cfg_hb_ns(&h->cfg)))
				return -EINTR;
			continue;
		}
		/*
		 * Someone may have formatted between our look at the
		 * superblock and our intent; a formatter writes the
		 * superblock before it withdraws its intent, so it is
		 * visible now.
		 */
		if (!force) {
			BEL_MH_GET(h, I_SUPER, BEL_MH_SB_OFF, &sb, sizeof(sb));
			if (le64_to_cpu(sb.magic) == BEL_MH_MAGIC) {
				bel_mh_put_intent(h, BEL_MH_F_INTENT_CLEAR, 0);
				continue;
			}
		}
		ret = bel_mh_format(h, region_size);
		bel_mh_put_intent(h, BEL_MH_F_INTENT_CLEAR, 0);
		return ret;
	}
	h->why = "could not format: other hosts kept formatting";
	return -EBUSY;
}

void bel_mh_free_dram(struct bel_mh_host *h)
{
	bel_kvfree(h->blk_next);
	bel_kvfree(h->blk_prev);
	bel_kvfree(h->blk_stamp);
	bel_kvfree(h->blk_pins);
	bel_kvfree(h->blk_state);
	bel_kvfree(h->blk_bad);
	bel_kvfree(h->blk_owner);
	h->blk_next = NULL;
	h->blk_prev = NULL;
	h->blk_stamp = NULL;
	h->blk_pins = NULL;
	h->blk_state = NULL;
	h->blk_bad = NULL;
	h->blk_owner = NULL;
}

static int bel_mh_alloc_dram(struct bel_mh_host *h)
{
	u32 n = h->geo.nr_blocks;
	u32 p, i;

	h->blk_next = bel_calloc(n, sizeof(*h->blk_next));
	h->blk_prev = bel_calloc(n, sizeof(*h->blk_prev));
	h->blk_stamp = bel_calloc(n, sizeof(*h->blk_stamp));
	h->blk_pins = bel_calloc(n, sizeof(*h->blk_pins));
	h->blk_state = bel_calloc(n, sizeof(*h->blk_state));
	h->blk_bad = bel_calloc(n, sizeof(*h->blk_bad));
	h->blk_owner = bel_calloc(n, sizeof(*h->blk_owner));
	if (!h->blk_next || !h->blk_prev || !h->blk_stamp ||
	    !h->blk_pins || !h->blk_state || !h->blk_bad || !h->blk_owner) {
		bel_mh_free_dram(h);
		h->why = "out of memory for the block table";
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		h->blk_next[i] = BEL_MH_NONE;
		h->blk_prev[i] = BEL_MH_NONE;
	}
	for (p = 0; p < h->geo.max_hosts; p++) {
		struct bel_mh_part *pt = &h->part[p];

		memset(pt, 0, sizeof(*pt));
		pt->first = (u32)bel_div64((u64)p * n, h->geo.max_hosts);
		pt->nr = (u32)bel_div64((u64)(p + 1) * n,
					    h->geo.max_hosts) - pt->first;
		pt->free_head = BEL_MH_NONE;
		pt->lru_head = BEL_MH_NONE;
		pt->lru_tail = BEL_MH_NONE;
	}
	return 0;
}

static int bel_mh_join(struct bel_mh_host *h)
{
	struct bel_mh_host_rec own;
	u64 own_off = bel_mh_rec_off(&h->geo, h->id);
	u64 t0;
	u32 x, inc;
	int ret;

	ret = bel_mh_alloc_dram(h);
	if (ret)
		return ret;
	memset(&own, 0, sizeof(own));

	/* First look at every host, the own record included. */
	t0 = bel_mh_now(h);
	for (x = 0; x < h->geo.max_hosts; x++) {
		struct bel_mh_host_rec r;
		struct bel_mh_view *v = &h->view[x];

		BEL_MH_GET(h, I_REC_OBSERVE, bel_mh_rec_off(&h->geo, x), &r,
			   sizeof(r));
		v->state = le32_to_cpu(r.state);
		v->inc = le32_to_cpu(r.incarnation);
		v->owned = le32_to_cpu(r.owned);
		v->hb = le64_to_cpu(r.heartbeat);
		v->changed_at = t0;
		v->dead = false;
		v->flags = le32_to_cpu(r.flags);
		bel_mh_view_retire(v, &r);
		if (x == h->id)
			own = r;
	}

	/*
	 * A record left ACTIVE: our previous incarnation died, or another
	 * machine runs with this id. Wait until it has been silent for as
	 * long as the other hosts wait before they hold it dead (a lease,
	 * more with a device lease: its devices may still write); a
	 * heartbeat that moves meanwhile is a duplicate.
	 */
	if (le32_to_cpu(own.state) == BEL_MH_HOST_ACTIVE) {
		for (;;) {
			struct bel_mh_host_rec r;

			if (bel_mh_relax(h)) {
				bel_mh_free_dram(h);
				return -EINTR;
			}
			BEL_MH_GET(h, I_REC_OBSERVE, own_off, &r, sizeof(r));
			if (r.heartbeat != own.heartbeat ||
			    r.incarnation != own.incarnation) {
				h->why = "another live host uses this host id";
				bel_mh_free_dram(h);
				return -EADDRINUSE;
			}
			if (bel_mh_now(h) - t0 >
			    bel_mh_dead_after_ns(h, le32_to_cpu(own.flags)))
				break;
		}
	}

	inc = le32_to_cpu(own.incarnation) + 1;
	if (!inc)
		inc = 1;
	memset(&h->rec, 0, sizeof(h->rec));
	h->rec.state = cpu_to_le32(BEL_MH_HOST_ACTIVE);
	h->rec.incarnation = cpu_to_le32(inc);
	h->rec.flags = cpu_to_le32(BEL_MH_REC_LEASE_AWARE);
	if (h->cfg.device_fence_ms)
		h->rec.flags = cpu_to_le32(BEL_MH_REC_LEASE_AWARE |
					   BEL_MH_REC_DEVICE_PINS |
					   h->cfg.device_fence_ms <<
					   BEL_MH_REC_FENCE_SHIFT);
	memcpy(h->rec.name, h->cfg.name, sizeof(h->rec.name));
	/*
	 * Retire requests of the previous incarnation that no owner served
	 * yet: the memory errors are still there.
	 */
	h->nr_retire_q = 0;
	for (x = 0; x < BEL_MH_RETIRE_SLOTS; x++) {
		u32 b = bel_mh_link_dec(own.retire[x]);

		if (b < h->geo.nr_blocks)
			h->retire_q[h->nr_retire_q++] = b;
	}
	for (x = 0; x < h->nr_retire_q; x++)
		h->rec.retire[x] = bel_mh_link_enc(h->retire_q[x]);
	h->view[h->id].inc = inc;
	h->view[h->id].state = BEL_MH_HOST_ACTIVE;
	h->fence_ns = h->geo.lease_ns / 2;
	h->last_hb = bel_mh_now(h);
	h->fenced = false;
	h->leased = true;
	h->joined = true;
	bel_mh_heartbeat(h);
	return 0;
}

int bel_mh_attach(struct bel_mh_host *h, const struct bel_mh_mem_ops *ops,
		  void *priv, u64 region_size,
		  const struct bel_mh_config *cfg)
{
	int ret;

	memset(h, 0, sizeof(*h));
	h->ops = ops;
	h->priv = priv;
	h->cfg = *cfg;
	h->id = cfg->host_id;
	bel_mutex_init(&h->lock);
	bel_spin_init(&h->rec_lock);

	if (cfg->host_id >= BEL_MH_MAX_HOSTS) {
		h->why = "host id out of range";
		ret = -ERANGE;
		goto fail;
	}
	if (cfg->device_fence_ms > BEL_MH_REC_FENCE_MAX_MS) {
		h->why = "device lease: W out of range";
		ret = -ERANGE;
		goto fail;
	}
	ret = bel_mh_format_or_check(h, region_size);
	if (ret)
		goto fail;
	ret = bel_mh_join(h);
	if (ret)
		goto fail;
	/* Take the home partition now if nobody holds it. */
	bel_mh_tick(h);
	return 0;
fail:
	bel_spin_destroy(&h->rec_lock);
	bel_mutex_destroy(&h->lock);
	return ret;
}

int bel_mh_leave(struct bel_mh_host *h)
{
	u32 p;

	bel_mutex_lock(&h->lock);
	if (!h->joined) {
		bel_mutex_unlock(&h->lock);
		return -ENODEV;
	}
	if (h->nr_allocated || h->nr_pins) {
		bel_mutex_unlock(&h->lock);
		h->why = "clients of this host hold allocations or pins";
		return -EBUSY;
	}
	for (p = 0; p < h->geo.max_hosts; p++)
		h->part[p].owned = false;
	bel_spin_lock(&h->rec_lock);
	h->rec.owned = 0;
	h->rec.state = cpu_to_le32(BEL_MH_HOST_LEFT);
	BEL_MH_PUT(h, F_REC_LEAVE, bel_mh_rec_off(&h->geo, h->id), &h->rec,
		   sizeof(h->rec));
	h->joined = false;
	h->leased = false;
	bel_spin_unlock(&h->rec_lock);
	bel_mutex_unlock(&h->lock);
	return 0;
}

void bel_mh_destroy(struct bel_mh_host *h)
{
	bel_mh_free_dram(h);
	h->joined = false;
	bel_spin_destroy(&h->rec_lock);
	bel_mutex_destroy(&h->lock);
}
