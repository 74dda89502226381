// SPDX-License-Identifier: GPL-2.0
/*
 * The in-process backend: the portable core (kmod/core/{pool,index,lru,client}.c, the very code
 * the module runs) called directly. No transport, no copies of the key
 * arrays: the cost of the algorithm and its lock alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bel_core.h"
#include "core_publish.h"

struct bel_pool *core_pool_new(u64 nr_blocks, u64 bs)
{
	struct bel_pool *p = xcalloc(1, sizeof(*p));
	u32 slot, n;
	u64 first;
	int ret;

	bel_pool_init(p);
	ret = bel_pool_add_region(p, nr_blocks * bs, bs, &slot, &first, &n);
	if (ret)
		die("core: adding a region of %llu blocks: %s",
		    (unsigned long long)nr_blocks, strerror(-ret));
	return p;
}

void core_pool_free(struct bel_pool *p)
{
	bel_pool_destroy(p);
	free(p);
}

static struct bel_client *cl(struct bk *b)
{
	return b->priv;
}

static int c_floor(struct bk *b)
{
	(void)b;
	return 0;
}

static int c_lookup(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		    bool pin, u64 *offsets, u32 *hits)
{
	return bel_lookup(cl(b), ns, n, keys, pin, offsets, hits);
}

static int c_alloc(struct bk *b, u32 n, u64 *offsets)
{
	return bel_alloc(cl(b), n, offsets);
}

static int c_publish(struct bk *b, u64 ns, u32 n, const u64 *offsets,
		     const struct beluga_key *keys, u32 *ok, u32 *exists)
{
	u32 failed = 0;
	int ret = bench_core_publish(cl(b), ns, n, offsets, keys, b->scratch, ok,
			      exists, &failed);

	return ret ? ret : failed ? -EPROTO : 0;
}

static int c_release(struct bk *b, u32 n, const u64 *offsets)
{
	return bel_release(cl(b), n, offsets);
}

static int c_free(struct bk *b, u32 n, const u64 *offsets)
{
	return bel_free(cl(b), n, offsets);
}

static int c_get(struct bk *b, u64 ns, u32 n, const struct beluga_key *keys,
		 void *dst, u32 *hits)
{
	u32 h, i;
	int ret = bel_lookup(cl(b), ns, n, keys, true, b->offs, &h);

	if (ret)
		return ret;
	if (b->map)
		for (i = 0; i < h; i++)
			memcpy((u8 *)dst + (u64)i * b->block_size,
			       b->map + b->offs[i], b->block_size);
	*hits = h;
	return h ? bel_release(cl(b), h, b->offs) : 0;
}

static void c_close(struct bk *b)
{
	bel_client_release(cl(b));
	free(b->scratch);
	free(b->offs);
	free(b);
}

struct bk *core_open(struct bel_pool *p, u8 *arena)
{
	struct bk *b = xcalloc(1, sizeof(*b));

	b->name = "core";
	b->fd = -1;
	b->priv = bel_client_new(p);
	if (!b->priv)
		die("bel_client_new: out of memory");
	b->block_size = p->block_size;
	b->map = arena;
	b->floor = c_floor;
	b->lookup = c_lookup;
	b->alloc = c_alloc;
	b->publish = c_publish;
	b->release = c_release;
	b->free = c_free;
	b->get = c_get;
	b->close = c_close;
	b->scratch = xcalloc(BELUGA_MAX_BATCH,
			     sizeof(struct beluga_publish_item));
	b->offs = xcalloc(BELUGA_MAX_BATCH, sizeof(u64));
	return b;
}
