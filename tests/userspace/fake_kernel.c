// SPDX-License-Identifier: GPL-2.0
/*
 * In-process stand-in for beluga.ko; see fake_kernel.h. The pool is the
 * module's own portable core (kmod/core: pool.c, client.c, index.c, lru.c,
 * pins.c, linked in by the Makefile), so the library's tests run against
 * the real allocation, publish, lookup, pin and eviction semantics. What
 * this file adds is the module's ioctl layer, in kmod/ioctl.c's shape and
 * in the uapi header's error order (its "Common errors" list): the command
 * table, the size rules of copy_struct_from_user(), flags, reserved
 * fields, counts, then the pool. It has no memory behind the offsets (the
 * test's device file backs the mapping), no capabilities (the caller is
 * root), and one client. The index's copy (INDEX_MAP) is the core's, in
 * plain memory that the library's mmap hook is handed instead of a
 * mapping.
 *
 * With BELUGA_FAKE_CXL, the pool is a real shared one instead: this
 * process joins the multi-host pool in that file as a host of its own
 * (fake_mh.c), as the module joins one in a CXL range, and the block
 * commands run the multi-host protocol; processes that name the same file
 * share the pool as hosts do.
 *
 * Otherwise a shared pool is faked as far as userspace can tell one: HOSTS answers
 * the records a test gave (fake.hosts), and with records, DEVICE_RANGE and
 * WATCHDOG follow a shared pool's rules (no watchdog link: -ENOLINK; a
 * live host that ignores device leases: -EPROTO; fenced: -ESTALE, and
 * HOLD while ranges are declared), and mmap() notes whether a mapping
 * would take pins. ATTACH of a shared pool is still refused (the module
 * needs a CXL range). The state that the module keeps per open file (a
 * device range, the watchdog link) lasts, as there, until the file is
 * released: its last close, after its last mapping. The fake marks the
 * file with an OFD lock, which lives exactly that long (mappings hold the
 * file), and asks the lock whether the file is still there.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "bel_core.h"
#include "bel_index_copy.h"
#include "beluga_layout.h"	/* uapi/, not installed */
#include "fake_kernel.h"
#include "fake_mh.h"
#include "internal.h"

/* What ATTACH was given for a region: the core knows only its blocks. */
struct fake_region {
	bool used;
	char name[BELUGA_NAME_LEN];
	enum beluga_backend backend;
	int node;
	uint64_t phys_start;
	uint64_t length;
};

struct fake_kernel fake;

static struct bel_pool pool;
static struct bel_client *client;
static struct fake_region regions[BELUGA_MAX_REGIONS];

static int fake_ioctl(int fd, unsigned long request, void *arg);

/*
 * The index's copies INDEX_MAP made, newest first: kept until the next
 * reset, as the module keeps a sealed copy while it is mapped. A copy
 * still mapped at the reset (a handle that outlives it, as a Python Pool
 * can) is kept on the orphans until its munmap(), as the module's pages
 * outlive their pool while mapped: the reader of a later lookup must not
 * read freed memory.
 */
struct fake_copy {
	struct bel_index_copy copy;
	void *mem;
	uint64_t size;
	unsigned int mapped;	/* fake_mmap()s not yet unmapped */
	struct fake_copy *older;
};

static struct fake_copy *copies, *orphans;

static void *fake_mmap(void *addr, size_t len, int prot, int flags, int fd,
		       off_t off);
static int fake_munmap(void *addr, size_t len);

static void fake_copies_free(void)
{
	while (copies) {
		struct fake_copy *c = copies;

		copies = c->older;
		if (c->mapped) {
			c->older = orphans;
			orphans = c;
			continue;
		}
		free(c->mem);
		free(c);
	}
}

static void fake_pool_down(void)
{
	u32 slot;

	if (!client)
		return;
	bel_client_release(client);
	client = NULL;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++)
		if (regions[slot].used)
			bel_pool_remove_region(&pool, slot, true, NULL);
	bel_pool_destroy(&pool);
	fake_copies_free();
}

static void fake_files_forget(void);

void fake_kernel_reset(uint64_t block_size, uint32_t max_batch)
{
	fake_mh_leave();
	fake_pool_down();
	fake_files_forget();
	memset(&fake, 0, sizeof(fake));
	memset(regions, 0, sizeof(regions));
	if (bel_pool_init(&pool) || !(client = bel_client_new(&pool))) {
		fprintf(stderr, "fake_kernel: out of memory\n");
		abort();
	}
	fake.abi_version = BELUGA_ABI_VERSION;
	fake.max_batch = max_batch;
	fake.block_size = block_size;
	fake.fail_cmd = -1;
	bel_ioctl = fake_ioctl;
	bel_mmap = fake_mmap;
	bel_munmap = fake_munmap;
}

__attribute__((destructor)) static void fake_kernel_exit(void)
{
	fake_mh_leave();
	fake_pool_down();
}

uint64_t fake_kernel_count(int state)
{
	struct bel_stats s;

	bel_pool_stats(&pool, &s);
	switch (state) {
	case BEL_BLOCK_FREE:
		return s.free_blocks;
	case BEL_BLOCK_ALLOCATED:
		return s.allocated_blocks;
	case BEL_BLOCK_PUBLISHED:
		return s.published_blocks;
	}
	return 0;
}

unsigned int fake_kernel_calls(unsigned int cmd)
{
	return cmd < 16 ? fake.calls_of[cmd] : 0;
}

int fake_kernel_add_region(const char *name, enum beluga_backend backend, int node,
			   uint64_t phys_start, uint64_t length)
{
	u64 first_offset;
	u32 slot, nr_blocks;
	int i, ret;

	for (i = 0; i < BELUGA_MAX_REGIONS; i++)
		if (regions[i].used && !strcmp(regions[i].name, name))
			return -EEXIST;
	ret = bel_pool_add_region(&pool, length, pool.nr_regions ? 0 : fake.block_size,
				  &slot, &first_offset, &nr_blocks);
	if (ret)
		return ret;
	regions[slot] = (struct fake_region){
		.used = true, .backend = backend, .node = node,
		.phys_start = phys_start, .length = length,
	};
	snprintf(regions[slot].name, sizeof(regions[slot].name), "%s", name);
	return (int)slot;
}

/* The module's beluga_batch_bytes(), with the fake's own max_batch. */
static int batch_ok(u32 count)
{
	if (!count)
		return -EINVAL;
	if (count > BELUGA_MAX_BATCH || count > fake.max_batch)
		return -E2BIG;
	return 0;
}

/* Step 6: an array the kernel would copy must at least be a pointer. */
static int array_ok(u64 uptr)
{
	return uptr ? 0 : -EFAULT;
}

/* Step 7. */
static int pool_ready(void)
{
	return pool.nr_regions || fake_mh_joined() ? 0 : -ENODEV;
}

/* The size of the pool's mapping, local or shared. */
static uint64_t pool_map_size(void)
{
	const struct bel_mh_geo *g = fake_mh_geo();

	return fake_mh_joined() ? (uint64_t)g->nr_blocks * g->block_size :
				  bel_pool_map_size(&pool);
}

/* kmod/mh.c's beluga_mh_stats(): this host's view of a shared pool. */
static void pool_stats(struct bel_stats *s)
{
	struct bel_mh_stats ms;

	bel_pool_stats(&pool, s);
	if (!fake_mh_joined())
		return;
	fake_mh_stats(&ms);
	/* The core has no region here: the pool's blocks are the shared pool's. */
	s->total_blocks = ms.total_blocks;
	bel_mh_stats_to_pool(&ms, s);
}

static int cmd_info(int fd, void *arg)
{
	struct beluga_info *info = arg;
	struct bel_stats s;

	if (info->flags)
		return -EINVAL;
	pool_stats(&s);
	info->abi_version = fake.abi_version;
	info->nr_regions = fake_mh_joined() ? 1 : pool.nr_regions;
	info->block_size = fake_mh_joined() ? fake_mh_geo()->block_size : pool.block_size;
	info->nr_blocks = s.total_blocks;
	info->map_size = pool_map_size();
	info->max_batch = fake.max_batch;
	info->max_regions = BELUGA_MAX_REGIONS;
	/* Keep the test's device file as large as the mapping. */
	if (info->map_size)
		(void)!ftruncate(fd, (off_t)info->map_size);
	return 0;
}

static int cmd_stats(int fd, void *arg)
{
	struct beluga_stats *out = arg;
	struct bel_stats s;

	(void)fd;
	if (out->flags)
		return -EINVAL;
	pool_stats(&s);
	bel_stats_to_uapi(&s, out);
	return 0;
}

/* Size of the caller's struct in the call being served (ALLOC's, HOSTS' V1 callers). */
static uint32_t call_usize;

static int cmd_alloc(int fd, void *arg)
{
	struct beluga_alloc *a = arg;
	bool report = a->flags & BELUGA_ALLOC_EVICTED;
	u32 nr_evicted = 0;
	int ret;

	(void)fd;
	/*
	 * Step 5, as the module: flags and reserved fields, the count, then
	 * the evicted array with the flag and only with it, in a struct
	 * that has room for nr_evicted.
	 */
	if ((a->flags & ~BELUGA_ALLOC_EVICTED) || a->__reserved || a->__reserved2)
		return -EINVAL;
	ret = batch_ok(a->count);
	if (!ret && (report != !!a->evicted ||
		     (report && call_usize < offsetof(struct beluga_alloc, nr_evicted) +
				sizeof(a->nr_evicted))))
		ret = -EINVAL;
	if (!ret)
		ret = array_ok(a->offsets);
	if (!ret && report)
		ret = array_ok(a->evicted);
	if (!ret)
		ret = pool_ready();
	if (ret)
		return ret;
	if (fake_mh_joined())
		ret = fake_mh_alloc(a->count, (u64 *)(uintptr_t)a->offsets,
				    report ? (struct beluga_evicted_key *)(uintptr_t)a->evicted : NULL,
				    report ? &nr_evicted : NULL);
	else
		ret = bel_alloc_evicting(client, a->count, (u64 *)(uintptr_t)a->offsets,
					 report ? (struct beluga_evicted_key *)(uintptr_t)a->evicted :
						  NULL,
					 report ? &nr_evicted : NULL);
	a->nr_evicted = nr_evicted;
	return ret;
}

static int cmd_block_list(void *arg, bool release)
{
	struct beluga_blocks *a = arg;
	const u64 *offsets = (const u64 *)(uintptr_t)a->offsets;
	int ret;

	if (a->flags || a->__reserved)
		return -EINVAL;
	ret = batch_ok(a->count);
	if (!ret)
		ret = array_ok(a->offsets);
	if (!ret)
		ret = pool_ready();
	if (ret)
		return ret;
	if (fake_mh_joined())
		return release ? fake_mh_release(a->count, offsets) :
				 fake_mh_free(a->count, offsets);
	return release ? bel_release(client, a->count, offsets) :
			 bel_free(client, a->count, offsets);
}

static int cmd_free(int fd, void *arg)
{
	(void)fd;
	return cmd_block_list(arg, false);
}

static int cmd_release(int fd, void *arg)
{
	(void)fd;
	return cmd_block_list(arg, true);
}

static int cmd_publish(int fd, void *arg)
{
	struct beluga_publish *p = arg;
	struct beluga_publish_item *items = (struct beluga_publish_item *)(uintptr_t)p->items;
	u32 i;
	int ret;

	(void)fd;
	p->published = p->exists = p->failed = 0;
	if (p->flags)
		return -EINVAL;
	ret = batch_ok(p->count);
	if (!ret)
		ret = array_ok(p->items);
	if (ret)
		return ret;
	for (i = 0; i < p->count; i++)
		if (items[i].__reserved)
			return -EINVAL;
	ret = pool_ready();
	if (ret)
		return ret;
	/* The core takes the uapi's items, as in the module. */
	if (fake_mh_joined())
		return fake_mh_publish(p->ns, p->count, items, &p->published, &p->exists,
				       &p->failed);
	return bel_publish(client, p->ns, p->count, items, &p->published,
			   &p->exists, &p->failed);
}

/* BELUGA_FAKE_LOOKUP_SKEW: the block after the right one, as a broken kernel might. */
static u64 skewed(u64 offset)
{
	u64 region_offset, next = offset + pool.block_size;
	u32 slot;

	if (!bel_pool_find_offset(&pool, next, &slot, &region_offset))
		return next;
	for (slot = 0; slot < BELUGA_MAX_REGIONS; slot++)
		if (pool.regions[slot].present)
			return pool.regions[slot].first_offset;
	return offset;
}

static int cmd_lookup(int fd, void *arg)
{
	struct beluga_lookup *l = arg;
	bool pin = l->flags & BELUGA_LOOKUP_PIN;
	u64 *offsets = (u64 *)(uintptr_t)l->offsets;
	u32 i, hits = 0;
	int ret;

	(void)fd;
	if (l->flags & ~BELUGA_LOOKUP_PIN)
		return -EINVAL;
	ret = batch_ok(l->count);
	if (ret)
		return ret;
	if (pin && !offsets)
		return -EINVAL;
	ret = array_ok(l->keys);
	if (!ret)
		ret = pool_ready();
	if (!ret && fake_mh_joined())
		ret = fake_mh_lookup(l->ns, l->count,
				     (const struct beluga_key *)(uintptr_t)l->keys, pin,
				     offsets, &hits);
	else if (!ret)
		ret = bel_lookup(client, l->ns, l->count,
				 (const struct beluga_key *)(uintptr_t)l->keys, pin,
				 offsets, &hits);
	if (ret)
		return ret;
	for (i = 0; offsets && fake.lookup_skew && i < hits; i++)
		offsets[i] = skewed(offsets[i]);
	l->hits = hits;
	return 0;
}

/* BELUGA_FAKE_ATTACHING and BELUGA_FAKE_ATTACH_MS (fake_kernel.h). */
static const char *attaching_file;
static unsigned long attach_ms;

/* How often the fake's "attaching" moves on. */
#define FAKE_ATTACH_TICK_MS	50

static uint64_t fake_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Replace @path whole with @text: a reader never sees half a line. */
static void write_whole(const char *path, const char *text)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.new", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fputs(text, f);
	if (fclose(f) || rename(tmp, path))
		unlink(tmp);
}

/*
 * The module's step 1 of ATTACH (kmod/region.c): the range is zeroed (a
 * node's memory allocated) before the region joins the pool, and the
 * pool's sysfs "attaching" shows "NAME DONE LENGTH" meanwhile. Here that
 * takes attach_ms of wall-clock time (whatever the machine's load), DONE
 * growing with it, and the attribute is a file.
 */
static void fake_prepare_region(const char *name, uint64_t length)
{
	const struct timespec tick = { .tv_nsec = FAKE_ATTACH_TICK_MS * 1000000L };
	uint64_t start = fake_now_ms(), t;
	char line[128];

	if (!attaching_file || !attach_ms)
		return;
	while ((t = fake_now_ms() - start) < attach_ms) {
		snprintf(line, sizeof(line), "%s %llu %llu\n", name,
			 (unsigned long long)(length / attach_ms * t), (unsigned long long)length);
		write_whole(attaching_file, line);
		nanosleep(&tick, NULL);
	}
	write_whole(attaching_file, "");
}

/* kmod/region.c's beluga_attach_validate(), then the pool. */
static int cmd_attach(int fd, void *arg)
{
	const uint32_t shared_flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_FORMAT |
				      BELUGA_ATTACH_HOST_ID;
	struct beluga_attach *a = arg;
	size_t namelen = strnlen(a->name, sizeof(a->name));
	struct bel_region *r;
	int slot;

	if (a->flags & ~shared_flags)
		return -EINVAL;
	if (a->flags && !(a->flags & BELUGA_ATTACH_SHARED))
		return -EINVAL;
	if (a->__reserved || a->__reserved2)
		return -EINVAL;
	if (!(a->flags & BELUGA_ATTACH_HOST_ID) && a->host_id)
		return -EINVAL;
	if ((a->flags & BELUGA_ATTACH_SHARED) && a->backend != BELUGA_BACKEND_DAX)
		return -EINVAL;
	if (namelen == sizeof(a->name))
		return -EINVAL;
	switch (a->backend) {
	case BELUGA_BACKEND_DAX:
		if (a->node != -1 || !namelen)
			return -EINVAL;
		/* The module claims the range in device-dax's 2 MiB units. */
		if ((a->phys_start | a->length) % BELUGA_DAX_ALIGN)
			return -EINVAL;
		break;
	case BELUGA_BACKEND_NODE:
		if (a->phys_start || a->node < 0)
			return -EINVAL;
		if (!namelen)
			snprintf(a->name, sizeof(a->name), "node%d", a->node);
		break;
	default:
		return -EINVAL;
	}
	if (!a->length)
		return -EINVAL;
	if (a->block_size &&
	    (a->block_size < BELUGA_BLOCK_SIZE_MIN || a->block_size > BELUGA_BLOCK_SIZE_MAX ||
	     a->block_size % 4096))
		return -EINVAL;
	/*
	 * ATTACH makes no shared pools here (the module would need a CXL
	 * range: BELUGA_FAKE_CXL joins one at start), nor adds a region to
	 * one, as the module refuses.
	 */
	if (a->flags & BELUGA_ATTACH_SHARED)
		return -EINVAL;
	if (fake_mh_joined())
		return -EBUSY;
	if (a->block_size && !pool.nr_regions)
		fake.block_size = a->block_size;
	else if (a->block_size && a->block_size != pool.block_size)
		return -EINVAL;
	fake_prepare_region(a->name, a->length);
	slot = fake_kernel_add_region(a->name, (enum beluga_backend)a->backend, a->node,
				      a->phys_start, a->length);
	if (slot < 0)
		return slot;
	r = &pool.regions[slot];
	a->region_id = (uint32_t)slot;
	a->first_offset = r->first_offset;
	a->nr_blocks = r->nr_blocks;
	/* Let the test's device file back the whole mapping. */
	if (ftruncate(fd, (off_t)bel_pool_map_size(&pool)) && errno != EINVAL)
		return -errno;
	return 0;
}

static int cmd_detach(int fd, void *arg)
{
	struct beluga_detach *d = arg;
	u64 evicted = 0;
	int ret;

	(void)fd;
	if ((d->flags & ~BELUGA_DETACH_EVICT) || d->__reserved)
		return -EINVAL;
	d->evicted = 0;
	if (d->region_id >= BELUGA_MAX_REGIONS || !regions[d->region_id].used)
		return -ENOENT;
	ret = bel_pool_remove_region(&pool, d->region_id, d->flags & BELUGA_DETACH_EVICT,
				     &evicted);
	d->evicted = evicted;
	if (!ret)
		regions[d->region_id].used = false;
	return ret;
}

static int cmd_evict(int fd, void *arg)
{
	struct beluga_evict *e = arg;
	u64 busy = 0;
	int ret;

	(void)fd;
	if (e->flags & ~BELUGA_EVICT_NAMESPACE)
		return -EINVAL;
	if ((e->flags & BELUGA_EVICT_NAMESPACE) && (e->key.lo || e->key.hi))
		return -EINVAL;
	/* A shared pool has no EVICT (uapi). */
	if (fake_mh_joined())
		return -EOPNOTSUPP;
	if (e->flags & BELUGA_EVICT_NAMESPACE) {
		e->evicted = bel_evict_ns(&pool, e->ns, &busy);
		e->busy = busy;
		return 0;
	}
	ret = bel_evict_key(&pool, e->ns, &e->key);
	e->evicted = ret ? 0 : 1;
	e->busy = ret == -EBUSY ? 1 : 0;
	return ret;
}

static int cmd_region_info(int fd, void *arg)
{
	struct beluga_region_info *ri = arg;
	const struct fake_region *g;
	struct bel_region_stats rs;

	(void)fd;
	if (ri->flags)
		return -EINVAL;
	if (ri->region_id >= BELUGA_MAX_REGIONS || !regions[ri->region_id].used ||
	    bel_region_stats(&pool, ri->region_id, &rs))
		return -ENOENT;
	g = &regions[ri->region_id];
	ri->backend = g->backend;
	ri->node = g->node;
	ri->mappings = 0;
	ri->phys_start = g->phys_start;
	ri->length = g->length;
	ri->first_offset = rs.first_offset;
	ri->nr_blocks = rs.nr_blocks;
	ri->free_blocks = rs.free_blocks;
	ri->allocated_blocks = rs.allocated_blocks;
	ri->published_blocks = rs.published_blocks;
	memcpy(ri->name, g->name, sizeof(ri->name));
	return 0;
}

/*
 * ---- State per open file: device ranges and the watchdog link ----------
 *
 * The module keeps both on the file and drops them at its release. The
 * fake marks the open file description with an OFD read lock on a byte of
 * its own (far past the end of the device file, never reused in the
 * process): the lock goes when the description is released, mappings
 * included, and another description can see whether it is still there.
 */
struct fake_mark {
	off_t byte;		/* 0: none */
	char path[256];		/* the device file, to look at the lock from outside */
	dev_t dev;
	ino_t ino;
};

#define FAKE_MAX_RANGES		64
#define FAKE_MARK_FIRST		(1LL << 40)

struct fake_range {
	struct fake_mark mark;
	uint64_t offset, length;
	int eventfd;		/* the fake's own reference, or -1 */
	/*
	 * Under the record's device lease (a shared pool with the daemon):
	 * counted, signalled and waited for. A local pool's, or one under
	 * mh_allow_gup=1, is not (kmod/devlease.c).
	 */
	bool counted;
};

static struct fake_range ranges[FAKE_MAX_RANGES];
static struct fake_mark watchdog_link;
static uint32_t ranges_fence_ms;	/* the W the declared ranges were given */
static off_t next_mark = FAKE_MARK_FIRST;
/* BELUGA_FAKE_LEASE (fake_kernel.h). */
static const char *lease_file;

static int mark_take(int fd, struct fake_mark *m)
{
	struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_len = 1 };
	char proc[64];
	struct stat st;
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, m->path, sizeof(m->path) - 1);
	if (n < 0 || fstat(fd, &st))
		return -errno;
	m->path[n] = '\0';
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	fl.l_start = next_mark;
	if (fcntl(fd, F_OFD_SETLK, &fl))
		return -errno;
	m->byte = next_mark++;
	return 0;
}

/* Whether the file that took @m is still open (some description holds the lock). */
static bool mark_alive(const struct fake_mark *m)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = m->byte,
			    .l_len = 1 };
	bool alive;
	int fd;

	if (!m->byte)
		return false;
	fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	alive = !fcntl(fd, F_OFD_GETLK, &fl) && fl.l_type != F_UNLCK;
	close(fd);
	return alive;
}

/* Whether @fd is the file that took @m: its own lock does not conflict with it. */
static bool mark_mine(int fd, const struct fake_mark *m)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = m->byte,
			    .l_len = 1 };
	struct stat st;

	if (fstat(fd, &st) || st.st_dev != m->dev || st.st_ino != m->ino || !mark_alive(m))
		return false;
	return !fcntl(fd, F_OFD_GETLK, &fl) && fl.l_type == F_UNLCK;
}

/* Forget the ranges whose files were released; count the rest (@counted: only those). */
static unsigned int ranges_count(bool counted)
{
	unsigned int i, n = 0;

	for (i = 0; i < FAKE_MAX_RANGES; i++) {
		struct fake_range *r = &ranges[i];

		if (!r->mark.byte)
			continue;
		if (mark_alive(&r->mark)) {
			n += !counted || r->counted;
			continue;
		}
		if (r->eventfd >= 0)
			close(r->eventfd);
		memset(r, 0, sizeof(*r));
	}
	return n;
}

/* The ranges under the device lease: what WATCHDOG counts and waits for. */
static unsigned int ranges_live(void)
{
	return ranges_count(true);
}

static struct fake_range *range_of(int fd)
{
	unsigned int i;

	for (i = 0; i < FAKE_MAX_RANGES; i++)
		if (ranges[i].mark.byte && mark_mine(fd, &ranges[i].mark))
			return &ranges[i];
	return NULL;
}

static void fake_files_forget(void)
{
	unsigned int i;

	for (i = 0; i < FAKE_MAX_RANGES; i++)
		if (ranges[i].mark.byte && ranges[i].eventfd >= 0)
			close(ranges[i].eventfd);
	memset(ranges, 0, sizeof(ranges));
	memset(&watchdog_link, 0, sizeof(watchdog_link));
	ranges_fence_ms = 0;
}

unsigned int fake_kernel_device_ranges(void)
{
	return ranges_count(false);
}

int fake_kernel_fence(void)
{
	const uint64_t one = 1;
	unsigned int i;
	int n = 0;

	fake.fenced = 1;
	ranges_live();
	for (i = 0; i < FAKE_MAX_RANGES; i++)
		if (ranges[i].mark.byte && ranges[i].counted && ranges[i].eventfd >= 0 &&
		    write(ranges[i].eventfd, &one, sizeof(one)) == sizeof(one))
			n++;
	return n;
}

void fake_kernel_unfence(void)
{
	fake.fenced = 0;
}

static bool pool_shared(void)
{
	return fake.nr_hosts > 0 || fake_mh_joined();
}

/*
 * BELUGA_FAKE_LEASE=FILE, read at each call that needs it: "fresh N [W]"
 * or "fenced N [W]", the host's lease, N device ranges of other
 * processes, and the W they were declared under (a daemon that left
 * registered it). No file: fresh, none.
 */
static void lease_from_file(void)
{
	unsigned int n = 0, w = 0;
	char state[16] = "";
	FILE *f;

	if (!lease_file)
		return;
	f = fopen(lease_file, "r");
	if (f) {
		if (fscanf(f, "%15s %u %u", state, &n, &w) < 1)
			state[0] = '\0';
		fclose(f);
	}
	fake.fenced = !strcmp(state, "fenced");
	fake.outside_ranges = n;
	if (w && !fake.watchdog_ms)
		fake.watchdog_ms = w;
}

/* kmod's answer: FEED unless the host fenced while devices may reach the pool. */
static uint32_t watchdog_answer(uint32_t nr_ranges)
{
	if (!pool_shared() || !pool.nr_regions || !fake.fenced || !nr_ranges)
		return BELUGA_WATCHDOG_FEED;
	return BELUGA_WATCHDOG_HOLD;
}

static int cmd_watchdog(int fd, void *arg)
{
	struct beluga_watchdog *w = arg;
	bool reg = w->flags == BELUGA_WATCHDOG_REGISTER, mine;
	uint32_t nr_ranges;
	int ret;

	if ((!reg && w->flags != BELUGA_WATCHDOG_QUERY) || w->__reserved)
		return -EINVAL;
	if (reg && (!w->timeout_ms || w->timeout_ms > BELUGA_WATCHDOG_MAX_MS))
		return -EINVAL;
	if (!reg && w->timeout_ms)
		return -EINVAL;
	lease_from_file();
	nr_ranges = ranges_live() + fake.outside_ranges;
	mine = mark_mine(fd, &watchdog_link);
	if (reg) {
		if (!mine && mark_alive(&watchdog_link))
			return -EBUSY;
		/* 0: other processes' ranges under a W the fake was not told. */
		if (nr_ranges && fake.watchdog_ms && w->timeout_ms != fake.watchdog_ms)
			return -EBUSY;
		if (!mine) {
			ret = mark_take(fd, &watchdog_link);
			if (ret)
				return ret;
		}
		fake.watchdog_ms = w->timeout_ms;
	} else if (!mine) {
		return -ENOLINK;
	}
	w->timeout_ms = fake.watchdog_ms;
	w->answer = watchdog_answer(nr_ranges);
	w->device_ranges = nr_ranges;
	return 0;
}

/* Whether @fd is an eventfd, as eventfd_ctx_fdget() decides. */
static bool is_eventfd(int fd)
{
	char proc[64], target[64];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = '\0';
	return !strcmp(target, "anon_inode:[eventfd]");
}

static int cmd_device_range(int fd, void *arg)
{
	struct beluga_device_range *d = arg;
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), map_size;
	struct fake_range *r = NULL;
	uint32_t fence_ms = 0, i;
	bool counted = false;
	int ret;

	if (d->flags || (d->offset | d->length) % page || !d->length || d->eventfd < -1)
		return -EINVAL;
	if (d->eventfd >= 0 && !is_eventfd(d->eventfd))
		return -EBADF;
	ret = pool_ready();
	if (ret)
		return ret;
	map_size = pool_map_size();
	if (d->offset >= map_size || d->length > map_size - d->offset)
		return -ENXIO;
	if (range_of(fd))
		return -EBUSY;
	if (pool_shared()) {
		lease_from_file();
		if (fake.fenced)
			return -ESTALE;
		/* mh_allow_gup=1: the operator's fence; the record has its W from the join. */
		if (fake.allow_gup_fence_ms) {
			fence_ms = fake.allow_gup_fence_ms;
		} else if (mark_alive(&watchdog_link)) {
			fence_ms = fake.watchdog_ms;
			counted = true;
		} else {
			return -ENOLINK;
		}
		for (i = 0; counted && i < fake.nr_hosts; i++)
			if ((fake.hosts[i].flags & BELUGA_HOST_ALIVE) &&
			    !(fake.hosts[i].flags & BELUGA_HOST_LEASE_AWARE))
				return -EPROTO;
	}
	ranges_live();
	for (i = 0; i < FAKE_MAX_RANGES && !r; i++)
		if (!ranges[i].mark.byte)
			r = &ranges[i];
	if (!r)
		return -ENOMEM;
	ret = mark_take(fd, &r->mark);
	if (ret)
		return ret;
	r->offset = d->offset;
	r->length = d->length;
	r->eventfd = d->eventfd >= 0 ? fcntl(d->eventfd, F_DUPFD_CLOEXEC, 0) : -1;
	r->counted = counted;
	if (counted)
		ranges_fence_ms = fence_ms;
	d->fence_ms = fence_ms;
	return 0;
}

/*
 * A shared pool's host records, as the test set them (fake.hosts), in the
 * record size the caller asked for. This host's record carries the device
 * lease while ranges are declared, as the module writes it to the pool.
 */
static int cmd_hosts(int fd, void *arg)
{
	struct beluga_hosts *h = arg;
	uint32_t nr_out, rec = h->host_size, i, nr_ranges;

	(void)fd;
	if (h->flags || h->__reserved || h->__reserved2)
		return -EINVAL;
	if (call_usize < offsetof(struct beluga_hosts, host_size) + sizeof(h->host_size))
		rec = BELUGA_HOST_SIZE_V1;
	else if (!rec)
		rec = BELUGA_HOST_SIZE_V2;
	else if (rec != BELUGA_HOST_SIZE_V1 && rec != BELUGA_HOST_SIZE_V2)
		return -EINVAL;
	if (fake_mh_joined()) {
		struct beluga_host recs[BELUGA_MAX_HOSTS];
		uint32_t nr = (uint32_t)fake_mh_hosts(recs, BELUGA_MAX_HOSTS);

		nr_out = nr < h->count ? nr : h->count;
		if (nr_out && !h->hosts)
			return -EFAULT;
		for (i = 0; i < nr_out; i++)
			memcpy((char *)(uintptr_t)h->hosts + (size_t)i * rec, &recs[i], rec);
		nr_out = h->count;
		h->count = nr;
		return nr > nr_out ? -EMSGSIZE : 0;
	}
	nr_out = fake.nr_hosts < h->count ? fake.nr_hosts : h->count;
	if (nr_out && !h->hosts)
		return -EFAULT;
	nr_ranges = nr_out ? ranges_live() : 0;
	for (i = 0; i < nr_out; i++) {
		struct beluga_host one = fake.hosts[i];

		if ((one.flags & BELUGA_HOST_SELF) && (nr_ranges || fake.allow_gup_fence_ms)) {
			one.flags |= BELUGA_HOST_DEVICE_PINS;
			one.device_fence_ms = nr_ranges ? ranges_fence_ms : fake.allow_gup_fence_ms;
		}
		memcpy((char *)(uintptr_t)h->hosts + (size_t)i * rec, &one, rec);
	}
	nr_out = h->count;
	h->count = fake.nr_hosts;
	return fake.nr_hosts > nr_out ? -EMSGSIZE : 0;
}

/* kmod/index_map.c's: the live copy, made now if there is none. */
static int cmd_index_map(int fd, void *arg)
{
	struct beluga_index_map *m = arg;
	struct fake_copy *c = copies;
	int ret;

	(void)fd;
	if (m->flags)
		return -EINVAL;
	/* A shared pool has no such mapping (uapi). */
	if (fake_mh_joined())
		return -EOPNOTSUPP;
	if (!c || !bel_index_copy_live(&pool, &c->copy)) {
		c = calloc(1, sizeof(*c));
		if (!c)
			return -ENOMEM;
		do {
			free(c->mem);
			c->size = bel_index_copy_size(&pool);
			if (!c->size) {
				free(c);
				return -ENODEV;
			}
			c->mem = calloc(1, c->size);
			if (!c->mem) {
				free(c);
				return -ENOMEM;
			}
			ret = bel_index_copy_start(&pool, &c->copy, c->mem,
						   c->size);
		} while (ret == -EAGAIN);
		if (ret) {
			free(c->mem);
			free(c);
			return ret;
		}
		c->older = copies;
		copies = c;
	}
	m->offset = BELUGA_INDEX_MAP_OFFSET;
	m->length = c->copy.hdr->length;
	return 0;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ	22	/* Linux 5.14 */
#define MADV_POPULATE_WRITE	23
#endif
#define FAKE_TMPFS_MAGIC	0x01021994

/*
 * The pool's data: the test's device file, populated at once when it is
 * memory (tmpfs). The module maps memory that exists, with 2 MiB faults
 * (kmod/mmap.c); a sparse tmpfs file would instead allocate, zero and map
 * each 4 KiB page at its first write, which made a KVStore store into
 * fresh pool blocks run at about 1 GB/s and charged the fake's page faults
 * to the code under measurement. A file on a disk file system is left as
 * it is (populating it for writing would write it back to disk): the
 * tests' pools live there and nothing times them. Populating is an
 * optimisation: a kernel without MADV_POPULATE_* just faults later.
 */
static void *fake_map_pool(void *addr, size_t len, int prot, int flags, int fd,
			   off_t off)
{
	const struct fake_range *r;
	struct statfs fs;
	void *p = fake_mh_joined() ? fake_mh_map(addr, len, prot, flags, (uint64_t)off) :
				     mmap(addr, len, prot, flags, fd, off);

	if (p == MAP_FAILED)
		return p;
	if (!fstatfs(fd, &fs) && fs.f_type == FAKE_TMPFS_MAGIC)
		(void)madvise(p, len, (prot & PROT_WRITE) ? MADV_POPULATE_WRITE :
					 MADV_POPULATE_READ);
	/*
	 * Pins take a shared pool's mapping only when the file declared a
	 * device range covering it before mmap() (or with mh_allow_gup=1):
	 * the module decides when it makes the mapping.
	 */
	r = pool_shared() && !fake.allow_gup_fence_ms ? range_of(fd) : NULL;
	fake.pool_maps++;
	fake.last_map = p;
	fake.last_map_length = len;
	fake.last_map_pinnable = !pool_shared() || fake.allow_gup_fence_ms ||
				 (r && (uint64_t)off >= r->offset &&
				  (uint64_t)off - r->offset + len <= r->length);
	return p;
}

/* kmod/index_map.c's mmap(): the live copy itself stands for the pages. */
static void *fake_mmap(void *addr, size_t len, int prot, int flags, int fd,
		       off_t off)
{
	if ((uint64_t)off != BELUGA_INDEX_MAP_OFFSET)
		return fake_map_pool(addr, len, prot, flags, fd, off);
	if (!(flags & MAP_SHARED)) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	if (prot & PROT_WRITE) {
		errno = EACCES;
		return MAP_FAILED;
	}
	if (!copies || !bel_index_copy_live(&pool, &copies->copy)) {
		errno = ENODEV;
		return MAP_FAILED;
	}
	if (len > copies->size) {
		errno = ENXIO;
		return MAP_FAILED;
	}
	fake.index_maps++;
	copies->mapped++;
	return copies->mem;
}

static int fake_munmap(void *addr, size_t len)
{
	struct fake_copy *c, **link;

	for (c = copies; c; c = c->older)
		if (c->mem == addr) {
			c->mapped--;
			return 0;
		}
	for (link = &orphans; (c = *link); link = &c->older)
		if (c->mem == addr) {
			if (!--c->mapped) {
				*link = c->older;
				free(c->mem);
				free(c);
			}
			return 0;
		}
	return munmap(addr, len);
}

/* kmod/ioctl.c's command table, less what the fake does not model. */
#define OP_WRITE	1u	/* a file opened for writing */
#define OP_EFFECTIVE	2u	/* the struct is written back on error too */

struct fake_op {
	int (*execute)(int fd, void *arg);
	size_t size;
	size_t min_size;
	unsigned int flags;
};

/* Any command's struct (BELUGA_IOCTL_ARGS in beluga_layout.h). */
union fake_arg {
	BELUGA_IOCTL_ARGS(BELUGA_IOCTL_ARG_MEMBER)
};

/* @_member is the command's struct in union fake_arg, as in the module. */
#define FAKE_OP(_cmd, _fn, _member, _min, _flags)				\
	[BELUGA_CMD_##_cmd] = { .execute = _fn,					\
				.size = sizeof(((union fake_arg *)0)->_member),	\
				.min_size = _min, .flags = _flags }

static const struct fake_op fake_ops[] = {
	FAKE_OP(INFO, cmd_info, info, BELUGA_INFO_SIZE_V1, 0),
	FAKE_OP(STATS, cmd_stats, stats, BELUGA_STATS_SIZE_V1, 0),
	FAKE_OP(ALLOC, cmd_alloc, alloc, BELUGA_ALLOC_SIZE_V1, OP_WRITE),
	FAKE_OP(FREE, cmd_free, blocks, BELUGA_BLOCKS_SIZE_V1, OP_WRITE),
	FAKE_OP(PUBLISH, cmd_publish, publish, BELUGA_PUBLISH_SIZE_V1,
		OP_WRITE | OP_EFFECTIVE),
	FAKE_OP(LOOKUP, cmd_lookup, lookup, BELUGA_LOOKUP_SIZE_V1, 0),
	FAKE_OP(RELEASE, cmd_release, blocks, BELUGA_BLOCKS_SIZE_V1, 0),
	FAKE_OP(ATTACH, cmd_attach, attach, BELUGA_ATTACH_SIZE_V1, 0),
	FAKE_OP(DETACH, cmd_detach, detach, BELUGA_DETACH_SIZE_V1, OP_EFFECTIVE),
	FAKE_OP(EVICT, cmd_evict, evict, BELUGA_EVICT_SIZE_V1, OP_EFFECTIVE),
	FAKE_OP(REGION_INFO, cmd_region_info, region_info,
		BELUGA_REGION_INFO_SIZE_V1, 0),
	/* Effective: -EMSGSIZE answers the struct too. */
	FAKE_OP(HOSTS, cmd_hosts, hosts, BELUGA_HOSTS_SIZE_V1, OP_EFFECTIVE),
	FAKE_OP(INDEX_MAP, cmd_index_map, index_map, BELUGA_INDEX_MAP_SIZE_V1,
		0),
	FAKE_OP(WATCHDOG, cmd_watchdog, watchdog, BELUGA_WATCHDOG_SIZE_V1, 0),
	FAKE_OP(DEVICE_RANGE, cmd_device_range, device_range,
		BELUGA_DEVICE_RANGE_SIZE_V1, 0),
};

/* The count of a command's argument, for the call log. */
static uint32_t arg_count(unsigned int cmd, const void *arg)
{
	switch (cmd) {
	case BELUGA_CMD_ALLOC:
		return ((const struct beluga_alloc *)arg)->count;
	case BELUGA_CMD_FREE:
	case BELUGA_CMD_RELEASE:
		return ((const struct beluga_blocks *)arg)->count;
	case BELUGA_CMD_PUBLISH:
		return ((const struct beluga_publish *)arg)->count;
	case BELUGA_CMD_LOOKUP:
		return ((const struct beluga_lookup *)arg)->count;
	default:
		return 0;
	}
}

/*
 * Step 8: whether the command answers in its struct. FREE, RELEASE and
 * ALLOC without BELUGA_ALLOC_EVICTED only read theirs, which may be
 * read-only memory.
 */
static bool answers_in_struct(unsigned int cmd, const union fake_arg *arg)
{
	switch (cmd) {
	case BELUGA_CMD_ALLOC:
		return arg->alloc.flags & BELUGA_ALLOC_EVICTED;
	case BELUGA_CMD_FREE:
	case BELUGA_CMD_RELEASE:
		return false;
	default:
		return true;
	}
}

static void log_call(unsigned int cmd, uint32_t count)
{
	if (cmd < 16)
		fake.calls_of[cmd]++;
	if (fake.nr_calls < FAKE_LOG_LEN)
		fake.log[fake.nr_calls] = (struct fake_call){ .cmd = cmd, .count = count };
	fake.nr_calls++;
}

/* The uapi header's common errors, steps 1-4, then the command (5-8). */
static int fake_dispatch(int fd, unsigned long request, void *uarg)
{
	union fake_arg buf;
	unsigned int nr = (unsigned int)(request & 0xff);
	const struct fake_op *op;
	uint32_t usize;
	size_t i, out_len, known_size;
	int ret;

	if (nr >= sizeof(fake_ops) / sizeof(fake_ops[0]) ||
	    request != (unsigned long)_IO(BELUGA_TYPE, nr) || !fake_ops[nr].execute)
		return -ENOTTY;
	op = &fake_ops[nr];
	/* Step 2 passes: the fake's caller is root. Step 3: */
	if ((op->flags & OP_WRITE) && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	if (!uarg)
		return -EFAULT;
	memcpy(&usize, uarg, sizeof(usize));
	if (usize < op->min_size)
		return -EINVAL;
	if (usize > 4096)
		return -E2BIG;
	known_size = op->size;
	if (nr == BELUGA_CMD_ALLOC && fake.alloc_v1)
		known_size = BELUGA_ALLOC_SIZE_V1;
	for (i = known_size; i < usize; i++)
		if (((const unsigned char *)uarg)[i])
			return -E2BIG;
	out_len = usize < known_size ? usize : known_size;
	memset(&buf, 0, sizeof(buf));
	memcpy(&buf, uarg, out_len);

	log_call(nr, arg_count(nr, &buf));
	if ((int)nr == fake.fail_cmd && fake.calls_of[nr] == fake.fail_nth)
		return -fake.fail_errno;
	call_usize = usize;
	ret = op->execute(fd, &buf);
	{
		/* Pins are counted per client now (kmod/core/bel_core.h). */
		struct bel_stats st;

		pool_stats(&st);
		fake.nr_pins = st.pins;
	}
	if ((!ret || (op->flags & OP_EFFECTIVE)) && answers_in_struct(nr, &buf))
		memcpy(uarg, &buf, out_len);
	return ret;
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
 * BELUGA_FAKE_HOSTS: a file of host records, one a line, in the debugfs
 * "hosts" table's format (kmod/debugfs.c), with two optional fields:
 *   ID STATE INCARNATION HEARTBEAT OWNED_HEX alive|dead SILENT_MS self|- NAME|-
 *   [W_MS|- aware|old]
 * W_MS: the record's device lease (BELUGA_HOST_DEVICE_PINS with that W);
 * old: a host whose module ignores device leases (no
 * BELUGA_HOST_LEASE_AWARE; aware, the default, has it).
 */
static void fake_hosts_from_file(const char *path)
{
	char line[256], state[16], alive[16], self[16], name[64], pins[16], aware[16];
	unsigned long long hb, silent, owned;
	unsigned int id, inc;
	int nr_fields;
	FILE *f;

	if (!path || !(f = fopen(path, "r")))
		return;
	while (fake.nr_hosts < BELUGA_MAX_HOSTS && fgets(line, sizeof(line), f)) {
		struct beluga_host *h = &fake.hosts[fake.nr_hosts];

		strcpy(pins, "-");
		strcpy(aware, "aware");
		nr_fields = sscanf(line, "%u %15s %u %llu %llx %15s %llu %15s %63s %15s %15s", &id,
				   state, &inc, &hb, &owned, alive, &silent, self, name, pins,
				   aware);
		if (nr_fields < 9)
			continue;
		memset(h, 0, sizeof(*h));
		h->host_id = id;
		h->state = !strcmp(state, "active") ? BELUGA_HOST_ACTIVE :
			   !strcmp(state, "left") ? BELUGA_HOST_LEFT : BELUGA_HOST_NONE;
		h->incarnation = inc;
		h->heartbeat = hb;
		h->owned = owned;
		h->silent_ns = silent * 1000000ULL;
		h->flags = (!strcmp(alive, "alive") ? BELUGA_HOST_ALIVE : 0) |
			   (!strcmp(self, "self") ? BELUGA_HOST_SELF : 0) |
			   (strcmp(aware, "old") ? BELUGA_HOST_LEASE_AWARE : 0);
		if (strcmp(pins, "-")) {
			h->flags |= BELUGA_HOST_DEVICE_PINS;
			h->device_fence_ms = (uint32_t)strtoul(pins, NULL, 10);
		}
		if (strcmp(name, "-"))
			snprintf(h->name, sizeof(h->name), "%.*s", (int)sizeof(h->name) - 1, name);
		fake.nr_hosts++;
	}
	fclose(f);
}

/* "64M", "1G", "4096": bytes. */
static uint64_t parse_length(const char *text)
{
	char *end;
	uint64_t len = strtoull(text, &end, 10);

	switch (*end) {
	case 'K': return len << 10;
	case 'M': return len << 20;
	case 'G': return len << 30;
	}
	return len;
}

/*
 * BELUGA_FAKE_CXL=FILE:LENGTH: join the shared pool in FILE as host
 * BELUGA_FAKE_HOST_ID, as the module does at a shared ATTACH; a host that
 * formats it makes room for BELUGA_FAKE_CXL_HOSTS hosts with a lease of
 * BELUGA_FAKE_CXL_LEASE_MS (0 or unset: the module's defaults).
 */
static void fake_mh_from_env(const char *spec)
{
	const char *id = getenv("BELUGA_FAKE_HOST_ID");
	const char *hosts = getenv("BELUGA_FAKE_CXL_HOSTS");
	const char *lease = getenv("BELUGA_FAKE_CXL_LEASE_MS");
	char path[512], *colon;
	const char *why;
	int ret;

	snprintf(path, sizeof(path), "%s", spec);
	colon = strrchr(path, ':');
	if (!colon || !id) {
		fprintf(stderr, "fake_kernel: BELUGA_FAKE_CXL is FILE:LENGTH, with BELUGA_FAKE_HOST_ID set: no shared pool\n");
		return;
	}
	*colon = '\0';
	ret = fake_mh_join(path, parse_length(colon + 1), fake.block_size,
			   (uint32_t)strtoul(id, NULL, 0),
			   hosts ? (uint32_t)strtoul(hosts, NULL, 0) : 0,
			   lease ? (uint32_t)strtoul(lease, NULL, 0) : 0, &why);
	if (ret)
		fprintf(stderr, "fake_kernel: joining the shared pool in %s as host %s failed (%s): %s\n",
			path, id, strerror(-ret), why ? why : "?");
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
	attaching_file = getenv("BELUGA_FAKE_ATTACHING");
	if (getenv("BELUGA_FAKE_ATTACH_MS"))
		attach_ms = strtoul(getenv("BELUGA_FAKE_ATTACH_MS"), NULL, 0);
	fake_hosts_from_file(getenv("BELUGA_FAKE_HOSTS"));
	if (getenv("BELUGA_FAKE_ALLOW_GUP"))
		fake.allow_gup_fence_ms = (uint32_t)strtoul(getenv("BELUGA_FAKE_ALLOW_GUP"),
							    NULL, 0);
	lease_file = getenv("BELUGA_FAKE_LEASE");
	if (getenv("BELUGA_FAKE_CXL")) {
		fake_mh_from_env(getenv("BELUGA_FAKE_CXL"));
		return;
	}
	if (!regions_env)
		return;
	snprintf(list, sizeof(list), "%s", regions_env);
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');
		uint64_t len;

		if (!colon)
			continue;
		*colon = '\0';
		len = parse_length(colon + 1);
		if (!strncmp(tok, "node", 4)) {
			fake_kernel_add_region(tok, BELUGA_BACKEND_NODE, atoi(tok + 4), 0, len);
		} else {
			fake_kernel_add_region(tok, BELUGA_BACKEND_DAX, -1, dax_phys, len);
			dax_phys += len;
		}
	}
}

int fake_device_create(char *path)
{
	int fd;

	snprintf(path, FAKE_DEVICE_PATH_LEN, "/tmp/beluga-test-dev.XXXXXX");
	fd = mkstemp(path);
	if (fd < 0) {
		perror("mkstemp");
		return -1;
	}
	close(fd);
	return 0;
}
