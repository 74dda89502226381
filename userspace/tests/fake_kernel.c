// SPDX-License-Identifier: GPL-2.0
/*
 * In-process stand-in for beluga.ko; see fake_kernel.h. Deliberately
 * simple (linear scans, one client), but strict about the ABI: sizes,
 * flags, reserved fields and batch bounds are checked like the module
 * documents, so that the library is tested against the contract.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_kernel.h"
#include "internal.h"

enum { B_FREE, B_ALLOC, B_PUB, B_GONE };

struct fake_block {
	uint8_t state;
	uint32_t pins;
	uint64_t ns;
	struct beluga_key key;
	uint64_t lru;		/* last use; smaller is older */
};

struct fake_region {
	int used;
	char name[BELUGA_NAME_LEN];
	enum beluga_backend backend;
	int node;
	uint64_t phys_start, length, first_offset;
	uint32_t nr_blocks, first_block;
};

struct fake_kernel fake;

static struct fake_block blocks[FAKE_MAX_BLOCKS];
static uint32_t nr_blocks;		/* block slots ever created */
static uint64_t map_size;
static uint64_t lru_clock;
static struct fake_region regions[BELUGA_MAX_REGIONS];
static struct beluga_stats st;

static int fake_ioctl(int fd, unsigned long request, void *arg);

void fake_kernel_reset(uint64_t block_size, uint32_t max_batch)
{
	memset(&fake, 0, sizeof(fake));
	memset(blocks, 0, sizeof(blocks));
	memset(regions, 0, sizeof(regions));
	memset(&st, 0, sizeof(st));
	nr_blocks = 0;
	map_size = 0;
	lru_clock = 0;
	fake.abi_version = BELUGA_ABI_VERSION;
	fake.max_batch = max_batch;
	fake.block_size = block_size;
	fake.fail_cmd = -1;
	bel_ioctl = fake_ioctl;
}

uint64_t fake_kernel_count(int state)
{
	uint64_t n = 0;
	uint32_t i;

	for (i = 0; i < nr_blocks; i++)
		n += blocks[i].state == state;
	return n;
}

unsigned int fake_kernel_calls(unsigned int cmd)
{
	return cmd < 16 ? fake.calls_of[cmd] : 0;
}

int fake_kernel_add_region(const char *name, enum beluga_backend backend, int node,
			   uint64_t phys_start, uint64_t length)
{
	uint64_t n = length / fake.block_size;
	int slot, i;

	for (i = 0; i < BELUGA_MAX_REGIONS; i++)
		if (regions[i].used && !strcmp(regions[i].name, name))
			return -EEXIST;
	for (slot = 0; slot < BELUGA_MAX_REGIONS && regions[slot].used; slot++)
		;
	if (slot == BELUGA_MAX_REGIONS)
		return -ENOSPC;
	if (!n)
		return -EINVAL;
	if (nr_blocks + n > FAKE_MAX_BLOCKS)
		return -ENOMEM;
	regions[slot] = (struct fake_region){
		.used = 1, .backend = backend, .node = node, .phys_start = phys_start,
		.length = length, .first_offset = map_size, .nr_blocks = (uint32_t)n,
		.first_block = nr_blocks,
	};
	snprintf(regions[slot].name, sizeof(regions[slot].name), "%s", name);
	for (i = 0; i < (int)n; i++)
		blocks[nr_blocks + i] = (struct fake_block){ .state = B_FREE };
	nr_blocks += (uint32_t)n;
	map_size += n * fake.block_size;
	return slot;
}

/* Block index of @offset, or -1 when it is not a block of a live region. */
static long block_of(uint64_t offset)
{
	int r;

	if (!fake.block_size || offset % fake.block_size)
		return -1;
	for (r = 0; r < BELUGA_MAX_REGIONS; r++) {
		const struct fake_region *g = &regions[r];

		if (g->used && offset >= g->first_offset &&
		    offset < g->first_offset + (uint64_t)g->nr_blocks * fake.block_size)
			return g->first_block + (long)((offset - g->first_offset) / fake.block_size);
	}
	return -1;
}

static uint64_t offset_of(uint32_t idx)
{
	int r;

	for (r = 0; r < BELUGA_MAX_REGIONS; r++) {
		const struct fake_region *g = &regions[r];

		if (g->used && idx >= g->first_block && idx < g->first_block + g->nr_blocks)
			return g->first_offset + (uint64_t)(idx - g->first_block) * fake.block_size;
	}
	return UINT64_MAX;
}

static int nr_live_regions(void)
{
	int r, n = 0;

	for (r = 0; r < BELUGA_MAX_REGIONS; r++)
		n += regions[r].used;
	return n;
}

static long find_key(uint64_t ns, const struct beluga_key *key)
{
	uint32_t i;

	for (i = 0; i < nr_blocks; i++)
		if (blocks[i].state == B_PUB && blocks[i].ns == ns &&
		    blocks[i].key.lo == key->lo && blocks[i].key.hi == key->hi)
			return i;
	return -1;
}

/* The least recently used unpinned published block, or -1. */
static long lru_victim(void)
{
	long best = -1;
	uint32_t i;

	for (i = 0; i < nr_blocks; i++)
		if (blocks[i].state == B_PUB && !blocks[i].pins &&
		    (best < 0 || blocks[i].lru < blocks[best].lru))
			best = i;
	return best;
}

static void log_call(unsigned int cmd, uint32_t count)
{
	if (cmd < 16)
		fake.calls_of[cmd]++;
	if (fake.nr_calls < FAKE_LOG_LEN)
		fake.log[fake.nr_calls] = (struct fake_call){ .cmd = cmd, .count = count };
	fake.nr_calls++;
}

static int do_alloc(struct beluga_alloc *a)
{
	uint64_t *out = (uint64_t *)(uintptr_t)a->offsets;
	uint64_t avail = 0;
	uint32_t i, n = 0;

	if (a->flags || a->__reserved || !a->count)
		return -EINVAL;
	if (a->count > BELUGA_MAX_BATCH || a->count > fake.max_batch)
		return -E2BIG;
	for (i = 0; i < nr_blocks; i++)
		avail += blocks[i].state == B_FREE ||
			 (blocks[i].state == B_PUB && !blocks[i].pins);
	if (avail < a->count) {
		st.alloc_failures++;
		return -ENOSPC;
	}
	for (i = 0; i < nr_blocks && n < a->count; i++)
		if (blocks[i].state == B_FREE) {
			blocks[i].state = B_ALLOC;
			out[n++] = offset_of(i);
		}
	while (n < a->count) {
		long v = lru_victim();

		blocks[v].state = B_ALLOC;
		st.evictions++;
		out[n++] = offset_of((uint32_t)v);
	}
	st.allocs += n;
	return 0;
}

static int do_blocks(struct beluga_blocks *a, int release)
{
	const uint64_t *offs = (const uint64_t *)(uintptr_t)a->offsets;
	uint32_t i, j;

	if (a->flags || a->__reserved || !a->count)
		return -EINVAL;
	if (a->count > BELUGA_MAX_BATCH || a->count > fake.max_batch)
		return -E2BIG;
	/* Validate everything first: all or nothing. */
	for (i = 0; i < a->count; i++) {
		long b = block_of(offs[i]);
		uint32_t times = 0;

		if (b < 0)
			return -EINVAL;
		if (!release && blocks[b].state != B_ALLOC)
			return -EINVAL;
		for (j = 0; j < a->count; j++)
			times += offs[j] == offs[i];
		if (release && blocks[b].pins < times)
			return -EINVAL;
		if (!release && times > 1)
			return -EINVAL;
	}
	for (i = 0; i < a->count; i++) {
		long b = block_of(offs[i]);

		if (release) {
			blocks[b].pins--;
			fake.nr_pins--;
			st.releases++;
		} else {
			blocks[b].state = B_FREE;
			st.frees++;
		}
	}
	return 0;
}

static int do_publish(struct beluga_publish *p)
{
	struct beluga_publish_item *items = (struct beluga_publish_item *)(uintptr_t)p->items;
	uint32_t i;

	if (p->flags || !p->count)
		return -EINVAL;
	if (p->count > BELUGA_MAX_BATCH || p->count > fake.max_batch)
		return -E2BIG;
	for (i = 0; i < p->count; i++)
		if (items[i].__reserved)
			return -EINVAL;
	p->published = p->exists = p->failed = 0;
	for (i = 0; i < p->count; i++) {
		long b = block_of(items[i].offset);

		if (b < 0) {
			items[i].result = -EINVAL;
		} else if (blocks[b].state != B_ALLOC) {
			items[i].result = -EPERM;
		} else if (find_key(p->ns, &items[i].key) >= 0) {
			items[i].result = BELUGA_PUBLISH_EXISTS;
			blocks[b].state = B_FREE;
			st.frees++;
			st.publish_races++;
		} else {
			blocks[b].state = B_PUB;
			blocks[b].ns = p->ns;
			blocks[b].key = items[i].key;
			blocks[b].lru = ++lru_clock;
			items[i].result = BELUGA_PUBLISH_OK;
			st.publishes++;
		}
		if (items[i].result == BELUGA_PUBLISH_OK)
			p->published++;
		else if (items[i].result == BELUGA_PUBLISH_EXISTS)
			p->exists++;
		else
			p->failed++;
	}
	return 0;
}

static int do_lookup(struct beluga_lookup *l)
{
	const struct beluga_key *keys = (const struct beluga_key *)(uintptr_t)l->keys;
	uint64_t *offs = (uint64_t *)(uintptr_t)l->offsets;
	uint32_t i;

	if ((l->flags & ~BELUGA_LOOKUP_PIN) || !l->count)
		return -EINVAL;
	if (l->count > BELUGA_MAX_BATCH || l->count > fake.max_batch)
		return -E2BIG;
	if ((l->flags & BELUGA_LOOKUP_PIN) && !offs)
		return -EINVAL;
	st.lookups++;
	st.lookup_keys += l->count;
	for (i = 0; i < l->count; i++) {
		long b = find_key(l->ns, &keys[i]);

		if (b < 0)
			break;
		if (offs)
			offs[i] = offset_of(fake.lookup_skew ? (uint32_t)(b + 1) % nr_blocks : (uint32_t)b);
		if (l->flags & BELUGA_LOOKUP_PIN) {
			blocks[b].pins++;
			blocks[b].lru = ++lru_clock;
			fake.nr_pins++;
		}
	}
	l->hits = i;
	st.lookup_hits += i;
	return 0;
}

static int do_attach(int fd, struct beluga_attach *a)
{
	int slot;

	if (a->flags || a->__reserved)
		return -EINVAL;
	if (a->block_size && nr_live_regions() && a->block_size != fake.block_size)
		return -EINVAL;
	if (a->block_size && !nr_live_regions())
		fake.block_size = a->block_size;
	if (a->backend == BELUGA_BACKEND_DAX) {
		if (a->node != -1 || (a->phys_start | a->length) % BELUGA_DAX_ALIGN)
			return -EINVAL;
	} else if (a->backend == BELUGA_BACKEND_NODE) {
		if (a->phys_start || a->node < 0)
			return -EINVAL;
		if (!a->name[0])
			snprintf(a->name, sizeof(a->name), "node%d", a->node);
	} else {
		return -EINVAL;
	}
	slot = fake_kernel_add_region(a->name, (enum beluga_backend)a->backend, a->node,
				      a->phys_start, a->length);
	if (slot < 0)
		return slot;
	a->region_id = (uint32_t)slot;
	a->first_offset = regions[slot].first_offset;
	a->nr_blocks = regions[slot].nr_blocks;
	/* Let the test's "device" file back the whole mapping. */
	if (ftruncate(fd, (off_t)map_size) && errno != EINVAL)
		return -errno;
	return 0;
}

static int do_detach(struct beluga_detach *d)
{
	struct fake_region *g;
	uint32_t i;

	if ((d->flags & ~BELUGA_DETACH_EVICT) || d->__reserved)
		return -EINVAL;
	if (d->region_id >= BELUGA_MAX_REGIONS || !regions[d->region_id].used)
		return -ENOENT;
	g = &regions[d->region_id];
	for (i = g->first_block; i < g->first_block + g->nr_blocks; i++) {
		if (blocks[i].state == B_ALLOC || blocks[i].pins)
			return -EBUSY;
		if (blocks[i].state == B_PUB && !(d->flags & BELUGA_DETACH_EVICT))
			return -EBUSY;
	}
	d->evicted = 0;
	for (i = g->first_block; i < g->first_block + g->nr_blocks; i++) {
		if (blocks[i].state == B_PUB) {
			d->evicted++;
			st.evictions++;
		}
		blocks[i].state = B_GONE;
	}
	g->used = 0;
	return 0;
}

static int do_evict(struct beluga_evict *e)
{
	uint32_t i;
	long b;

	if (e->flags & ~BELUGA_EVICT_NAMESPACE)
		return -EINVAL;
	e->evicted = e->busy = 0;
	if (e->flags & BELUGA_EVICT_NAMESPACE) {
		if (e->key.lo || e->key.hi)
			return -EINVAL;
		for (i = 0; i < nr_blocks; i++) {
			if (blocks[i].state != B_PUB || blocks[i].ns != e->ns)
				continue;
			if (blocks[i].pins) {
				e->busy++;
				continue;
			}
			blocks[i].state = B_FREE;
			e->evicted++;
			st.evictions++;
		}
		return 0;
	}
	b = find_key(e->ns, &e->key);
	if (b < 0)
		return -ENOENT;
	if (blocks[b].pins)
		return -EBUSY;
	blocks[b].state = B_FREE;
	e->evicted = 1;
	st.evictions++;
	return 0;
}

static void fill_stats(struct beluga_stats *out)
{
	uint32_t i;

	st.total_blocks = st.free_blocks = st.allocated_blocks = st.published_blocks = 0;
	st.pinned_blocks = 0;
	for (i = 0; i < nr_blocks; i++) {
		if (blocks[i].state == B_GONE)
			continue;
		st.total_blocks++;
		st.free_blocks += blocks[i].state == B_FREE;
		st.allocated_blocks += blocks[i].state == B_ALLOC;
		st.published_blocks += blocks[i].state == B_PUB;
		st.pinned_blocks += blocks[i].pins > 0;
	}
	st.pins = fake.nr_pins;
	st.clients = 1;
	memcpy((char *)out + 8, (char *)&st + 8, sizeof(st) - 8);
}

static int do_region_info(struct beluga_region_info *ri)
{
	const struct fake_region *g;
	uint32_t i;

	if (ri->flags)
		return -EINVAL;
	if (ri->region_id >= BELUGA_MAX_REGIONS || !regions[ri->region_id].used)
		return -ENOENT;
	g = &regions[ri->region_id];
	ri->backend = g->backend;
	ri->node = g->node;
	ri->mappings = 0;
	ri->phys_start = g->phys_start;
	ri->length = g->length;
	ri->first_offset = g->first_offset;
	ri->nr_blocks = g->nr_blocks;
	ri->free_blocks = ri->allocated_blocks = ri->published_blocks = 0;
	for (i = g->first_block; i < g->first_block + g->nr_blocks; i++) {
		ri->free_blocks += blocks[i].state == B_FREE;
		ri->allocated_blocks += blocks[i].state == B_ALLOC;
		ri->published_blocks += blocks[i].state == B_PUB;
	}
	memcpy(ri->name, g->name, sizeof(ri->name));
	return 0;
}

/* The count of a command's argument, for the call log. */
static uint32_t arg_count(unsigned int cmd, void *arg)
{
	switch (cmd) {
	case BELUGA_CMD_ALLOC:
		return ((struct beluga_alloc *)arg)->count;
	case BELUGA_CMD_FREE:
	case BELUGA_CMD_RELEASE:
		return ((struct beluga_blocks *)arg)->count;
	case BELUGA_CMD_PUBLISH:
		return ((struct beluga_publish *)arg)->count;
	case BELUGA_CMD_LOOKUP:
		return ((struct beluga_lookup *)arg)->count;
	default:
		return 0;
	}
}

static int fake_dispatch(int fd, unsigned long request, void *arg)
{
	static const uint32_t min_size[] = {
		[BELUGA_CMD_INFO] = BELUGA_INFO_SIZE_V1,
		[BELUGA_CMD_STATS] = BELUGA_STATS_SIZE_V1,
		[BELUGA_CMD_ALLOC] = BELUGA_ALLOC_SIZE_V1,
		[BELUGA_CMD_FREE] = BELUGA_BLOCKS_SIZE_V1,
		[BELUGA_CMD_PUBLISH] = BELUGA_PUBLISH_SIZE_V1,
		[BELUGA_CMD_LOOKUP] = BELUGA_LOOKUP_SIZE_V1,
		[BELUGA_CMD_RELEASE] = BELUGA_BLOCKS_SIZE_V1,
		[BELUGA_CMD_ATTACH] = BELUGA_ATTACH_SIZE_V1,
		[BELUGA_CMD_DETACH] = BELUGA_DETACH_SIZE_V1,
		[BELUGA_CMD_EVICT] = BELUGA_EVICT_SIZE_V1,
		[BELUGA_CMD_REGION_INFO] = BELUGA_REGION_INFO_SIZE_V1,
	};
	unsigned int cmd = (unsigned int)(request & 0xff);
	uint32_t size;

	if (request != (unsigned long)_IO(BELUGA_TYPE, cmd) || cmd > BELUGA_CMD_REGION_INFO)
		return -ENOTTY;
	/* Like the module: the writing commands need a file opened for writing. */
	if ((cmd == BELUGA_CMD_ALLOC || cmd == BELUGA_CMD_FREE || cmd == BELUGA_CMD_PUBLISH) &&
	    (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	memcpy(&size, arg, sizeof(size));
	if (size < min_size[cmd])
		return -EINVAL;
	log_call(cmd, arg_count(cmd, arg));
	if ((int)cmd == fake.fail_cmd && fake.calls_of[cmd] == fake.fail_nth)
		return -fake.fail_errno;
	if (cmd != BELUGA_CMD_INFO && cmd != BELUGA_CMD_STATS && cmd != BELUGA_CMD_ATTACH &&
	    cmd != BELUGA_CMD_REGION_INFO && cmd != BELUGA_CMD_DETACH && !nr_live_regions())
		return -ENODEV;

	switch (cmd) {
	case BELUGA_CMD_INFO: {
		struct beluga_info *i = arg;

		if (i->flags)
			return -EINVAL;
		i->abi_version = fake.abi_version;
		i->nr_regions = (uint32_t)nr_live_regions();
		i->block_size = i->nr_regions ? fake.block_size : 0;
		i->nr_blocks = nr_blocks - fake_kernel_count(B_GONE);
		i->map_size = map_size;
		i->max_batch = fake.max_batch;
		i->max_regions = BELUGA_MAX_REGIONS;
		/* Keep the backing file as large as the mapping. */
		if (map_size)
			(void)!ftruncate(fd, (off_t)map_size);
		return 0;
	}
	case BELUGA_CMD_STATS:
		if (((struct beluga_stats *)arg)->flags)
			return -EINVAL;
		fill_stats(arg);
		return 0;
	case BELUGA_CMD_ALLOC:
		return do_alloc(arg);
	case BELUGA_CMD_FREE:
		return do_blocks(arg, 0);
	case BELUGA_CMD_RELEASE:
		return do_blocks(arg, 1);
	case BELUGA_CMD_PUBLISH:
		return do_publish(arg);
	case BELUGA_CMD_LOOKUP:
		return do_lookup(arg);
	case BELUGA_CMD_ATTACH:
		return do_attach(fd, arg);
	case BELUGA_CMD_DETACH:
		return do_detach(arg);
	case BELUGA_CMD_EVICT:
		return do_evict(arg);
	case BELUGA_CMD_REGION_INFO:
		return do_region_info(arg);
	}
	return -ENOTTY;
}

static int fake_ioctl(int fd, unsigned long request, void *arg)
{
	int ret = fake_dispatch(fd, request, arg);

	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return 0;
}

/*
 * Tools linked with this file (the check build's belugactl-fake and
 * beluga-demo-fake) switch to the fake when BELUGA_FAKE_KERNEL is set.
 */
__attribute__((constructor)) static void fake_kernel_from_env(void)
{
	const char *regions_env = getenv("BELUGA_FAKE_REGIONS");
	const char *bs = getenv("BELUGA_FAKE_BLOCK_SIZE");
	const char *mb = getenv("BELUGA_FAKE_MAX_BATCH");
	uint64_t dax_phys = 0x390000000ULL;
	char list[512], *tok, *save;

	if (!getenv("BELUGA_FAKE_KERNEL"))
		return;
	fake_kernel_reset(bs ? strtoull(bs, NULL, 0) : 65536,
			  mb ? (uint32_t)strtoul(mb, NULL, 0) : BELUGA_MAX_BATCH);
	fake.lookup_skew = getenv("BELUGA_FAKE_LOOKUP_SKEW") != NULL;
	if (!regions_env)
		return;
	snprintf(list, sizeof(list), "%s", regions_env);
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');
		uint64_t len;
		char *end;

		if (!colon)
			continue;
		*colon = '\0';
		len = strtoull(colon + 1, &end, 10);
		switch (*end) {
		case 'K': len <<= 10; break;
		case 'M': len <<= 20; break;
		case 'G': len <<= 30; break;
		}
		if (!strncmp(tok, "node", 4)) {
			fake_kernel_add_region(tok, BELUGA_BACKEND_NODE, atoi(tok + 4), 0, len);
		} else {
			fake_kernel_add_region(tok, BELUGA_BACKEND_DAX, -1, dax_phys, len);
			dax_phys += len;
		}
	}
}
