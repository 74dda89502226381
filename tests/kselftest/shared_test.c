// SPDX-License-Identifier: GPL-2.0
/*
 * Shared (multi-host) pools from one host: the ATTACH flags SHARED, FORMAT
 * and HOST_ID and their refusals, a single-host round trip on a device-dax
 * range (format, STATS and REGION_INFO as this host's view, publish,
 * lookup, pin, byte-exact read, detach, join again with the keys still
 * there, HOSTS), and a fence: the host stops heartbeating (the debugfs
 * fault attribute mh_stall_heartbeat), fences itself, zaps the mappings
 * (SIGBUS), makes the files opened before stale (-ESTALE), and rejoins with
 * a new incarnation.
 * Two hosts on one pool are tests/multihost's.
 */
#include "beluga_test.h"

#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

#define SH_LEN		(4 * BT_MIB)	/* 2 MiB of metadata, 2 MiB of blocks */
#define SH_BS		(64 * BT_KIB)
#define SH_HOSTS	8		/* the default max_hosts of a format */
/* The module's fault attribute (kernels with CONFIG_FAULT_INJECTION_DEBUG_FS). */
/* Processes retrying LOOKUP while the host rejoins. */
#define SH_RETRIERS	4

/* An attach request for a shared pool on the first BELUGA_TEST_DAX device. */
static int sh_req(struct beluga_attach *a, uint32_t flags, uint32_t host_id)
{
	int r = bt_attach_req(a, BELUGA_BACKEND_DAX, 0, 0, SH_LEN, SH_BS,
			      "bt-shared");

	a->flags = flags;
	a->host_id = host_id;
	return r;
}

/* A request that only the argument checks see (no device behind it). */
static void sh_fake_req(struct beluga_attach *a, int backend)
{
	memset(a, 0, sizeof(*a));
	a->size = sizeof(*a);
	a->backend = backend;
	a->node = backend == BELUGA_BACKEND_DAX ? -1 : 0;
	a->phys_start = backend == BELUGA_BACKEND_DAX ? 1ULL << 40 : 0;
	a->length = SH_LEN;
	a->block_size = SH_BS;
	snprintf(a->name, sizeof(a->name), "bt-shared-fake");
}

static const char *sh_state_name(uint32_t state)
{
	return state == BELUGA_HOST_ACTIVE ? "active" :
	       state == BELUGA_HOST_LEFT ? "left" :
	       state == BELUGA_HOST_NONE ? "none" : "?";
}

/* Host @id's record from HOSTS: its state and incarnation. */
static int sh_host(int id, char *state, size_t len, unsigned int *inc)
{
	struct beluga_host h[BELUGA_MAX_HOSTS];
	int fd = bt_open(O_RDONLY), n;

	if (fd < 0)
		return -errno;
	n = bt_hosts(fd, h, BELUGA_MAX_HOSTS);
	close(fd);
	if (n < 0)
		return n;
	if (id >= n || id >= BELUGA_MAX_HOSTS || h[id].host_id != (uint32_t)id)
		return -ENOENT;
	snprintf(state, len, "%s", sh_state_name(h[id].state));
	*inc = h[id].incarnation;
	return 0;
}

/* Read one byte of @p in a child: 0 when it could, 128 + signal else. */
static int sh_child_read(struct bt_ctx *c, volatile uint8_t *p)
{
	pid_t pid = bt_fork(c);

	if (pid == 0) {
		uint8_t v = *p;

		(void)v;
		_exit(0);
	}
	if (pid < 0)
		return -1;
	return bt_wait(c, pid);
}

FIXTURE(shared) {
	struct bt_ctx c;
};

FIXTURE_SETUP(shared)
{
	bt_ctx_init(&self->c);
	bt_setup_empty(&self->c);
}

FIXTURE_TEARDOWN(shared)
{
	char why[160];

	/* A failed fence test must not leave the heartbeat stalled. */
	if (!access(BT_MH_STALL, F_OK))
		bt_mh_stall(false, why, sizeof(why));
	bt_teardown(&self->c);
}

#define EXPECT_ATTACH(fd, req, want, what) do {				\
	struct beluga_attach __a = (req);				\
	int __r = bt_attach((fd), &__a);				\
	EXPECT_EQ((want), __r) TH_LOG("%s: %s", (what), strerror(-__r)); \
	if (!__r)							\
		bt_detach((fd), __a.region_id, BELUGA_DETACH_EVICT, NULL); \
} while (0)

/* Refusals decided from the arguments alone: no device needed. */
TEST_F(shared, attach_flags_validation)
{
	struct beluga_attach dax, node, a;
	struct beluga_info info;
	uint32_t bit;

	sh_fake_req(&dax, BELUGA_BACKEND_DAX);
	sh_fake_req(&node, BELUGA_BACKEND_NODE);

	/* bit 0 and every bit above HOST_ID are unknown */
	for (bit = 0; bit < 32; bit++) {
		uint32_t f = 1U << bit;

		if (f == BELUGA_ATTACH_SHARED || f == BELUGA_ATTACH_FORMAT ||
		    f == BELUGA_ATTACH_HOST_ID)
			continue;
		a = dax;
		a.flags = BELUGA_ATTACH_SHARED | f;
		EXPECT_ATTACH(self->c.fd, a, -EINVAL, "SHARED + unknown flag");
		a = dax;
		a.flags = f;
		EXPECT_ATTACH(self->c.fd, a, -EINVAL, "unknown flag alone");
	}
	a = dax;
	a.flags = BELUGA_ATTACH_HOST_ID;
	a.host_id = 1;
	EXPECT_ATTACH(self->c.fd, a, -EINVAL, "HOST_ID without SHARED");
	a = dax;
	a.flags = BELUGA_ATTACH_FORMAT;
	EXPECT_ATTACH(self->c.fd, a, -EINVAL, "FORMAT without SHARED");
	a = dax;
	a.flags = BELUGA_ATTACH_FORMAT | BELUGA_ATTACH_HOST_ID;
	EXPECT_ATTACH(self->c.fd, a, -EINVAL, "FORMAT|HOST_ID without SHARED");
	a = dax;
	a.host_id = 1;
	EXPECT_ATTACH(self->c.fd, a, -EINVAL, "reserved (host_id) set, no flags");
	a = dax;
	a.flags = BELUGA_ATTACH_SHARED;
	a.host_id = 1;
	EXPECT_ATTACH(self->c.fd, a, -EINVAL, "SHARED, host_id without HOST_ID");
	a = node;
	a.flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID;
	EXPECT_ATTACH(self->c.fd, a, -EINVAL, "SHARED on a node region");
	a = node;
	a.flags = BELUGA_ATTACH_SHARED;
	EXPECT_ATTACH(self->c.fd, a, -EINVAL, "SHARED on a node region, no id");
	ASSERT_EQ(0, bt_info(self->c.fd, &info));
	EXPECT_EQ(0, info.nr_regions) TH_LOG("a refused ATTACH attached");
}

/* The host id range and the one-region rule, on a real device. */
TEST_F(shared, attach_refusals)
{
	struct beluga_attach a, b;
	char why[160], param[32] = "";
	int r, fd;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 16));
	/* 16 ids at most in any pool */
	EXPECT_ATTACH(self->c.fd, a, -ERANGE, "host_id 16");
	a.host_id = 0xffffffffU;
	EXPECT_ATTACH(self->c.fd, a, -ERANGE, "host_id ~0");
	/* this format has 8 */
	a.host_id = SH_HOSTS;
	EXPECT_ATTACH(self->c.fd, a, -ERANGE, "host_id 8 of a pool of 8");

	/* no id at all: the module parameter is -1 unless set */
	fd = open("/sys/module/beluga/parameters/host_id", O_RDONLY);
	if (fd >= 0) {
		if (read(fd, param, sizeof(param) - 1) < 0)
			param[0] = 0;
		close(fd);
	}
	if (atoi(param) < 0) {
		ASSERT_EQ(0, sh_req(&b, BELUGA_ATTACH_SHARED, 0));
		EXPECT_ATTACH(self->c.fd, b, -EINVAL, "SHARED without any host id");
	}

	/* a shared pool is alone in its pool */
	ASSERT_EQ(0, bt_attach_req(&b, BELUGA_BACKEND_DAX, 0, SH_LEN,
				   BT_REGION_LEN, SH_BS, "bt-local"));
	r = bt_attach(self->c.fd, &b);
	ASSERT_EQ(0, r) TH_LOG("local region: %s", strerror(-r));
	a.host_id = 0;
	EXPECT_ATTACH(self->c.fd, a, -EBUSY, "SHARED into a pool with a region");
	ASSERT_EQ(0, bt_detach(self->c.fd, b.region_id, 0, NULL));

	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("shared attach: %s", strerror(-r));
	EXPECT_ATTACH(self->c.fd, b, -EBUSY, "a local region next to a shared");
	ASSERT_EQ(0, sh_req(&b, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID, 1));
	EXPECT_ATTACH(self->c.fd, b, -EBUSY, "a second shared attach");
	{
		struct beluga_evict ev = { .size = sizeof(ev) };

		r = bt_ioctl(self->c.fd, BELUGA_IOC_EVICT, &ev);
		EXPECT_EQ(-EOPNOTSUPP, r) TH_LOG("EVICT: %s", strerror(-r));
	}
	EXPECT_EQ(0, bt_detach(self->c.fd, a.region_id, 0, NULL));
}

static void sh_stats_view(struct __test_metadata *_metadata, int fd,
			  uint32_t region, uint64_t nr, uint64_t alloc,
			  uint64_t pub, uint64_t pinned)
{
	struct beluga_region_info ri;
	struct beluga_stats st;

	ASSERT_EQ(0, bt_stats(fd, &st));
	/* one host owns every partition: the view covers the whole pool */
	EXPECT_EQ(nr, st.total_blocks);
	EXPECT_EQ(alloc, st.allocated_blocks);
	EXPECT_EQ(pub, st.published_blocks);
	EXPECT_EQ(nr - alloc - pub, st.free_blocks);
	EXPECT_EQ(pinned, st.pinned_blocks);
	EXPECT_EQ(pinned, st.pins);
	ASSERT_EQ(0, bt_region_info(fd, region, &ri));
	EXPECT_EQ(nr, ri.nr_blocks);
	EXPECT_EQ(st.free_blocks, ri.free_blocks);
	EXPECT_EQ(alloc, ri.allocated_blocks);
	EXPECT_EQ(pub, ri.published_blocks);
}

#define SH_VIEW(fd, region, nr, alloc, pub, pinned) \
	sh_stats_view(_metadata, fd, region, nr, alloc, pub, pinned)

/*
 * A shared region shows in /proc/iomem as "beluga:bt-shared" over exactly
 * its range while attached, like a local one (admin_test), links to its
 * device-dax instance in sysfs, and shows neither after DETACH.
 */
TEST_F(shared, claim_in_proc_iomem)
{
	char names[BT_MAX_DAX][64];
	struct beluga_region_info ri;
	struct beluga_attach a;
	uint64_t start = 0, end = 0;
	char why[160];
	int r;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	if (geteuid())
		SKIP(return, "needs root: /proc/iomem shows zeros to others");
	ASSERT_EQ(0, bt_iomem_find("beluga:bt-shared", &start, &end));
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 3));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("shared attach with FORMAT: %s", strerror(-r));
	ASSERT_EQ(0, bt_region_info(self->c.fd, a.region_id, &ri));
	EXPECT_EQ(1, bt_iomem_find("beluga:bt-shared", &start, &end));
	EXPECT_EQ(ri.phys_start, start);
	EXPECT_EQ(ri.phys_start + ri.length - 1, end);
	ASSERT_LT(0, bt_env_dax(names));
	EXPECT_EQ(1, bt_region_dax_link(a.region_id, names[0]))
		TH_LOG("region%u/dax does not lead to %s", a.region_id,
		       names[0]);
	EXPECT_EQ(0, bt_detach(self->c.fd, a.region_id, BELUGA_DETACH_EVICT,
			       NULL));
	EXPECT_EQ(0, bt_iomem_find("beluga:bt-shared", &start, &end));
}

TEST_F_TIMEOUT(shared, single_host_round_trip, 180)
{
	struct beluga_attach a;
	struct beluga_key k[3];
	uint64_t off[3], got[3], ns = bt_ns(71);
	struct beluga_stats st0, st;
	char why[160], state[16];
	unsigned int inc = 0;
	uint32_t hits = 0;
	int32_t res;
	uint8_t *map;
	int r, i;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st0));
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 3));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("shared attach with FORMAT: %s", strerror(-r));
	/* the metadata takes the first 2 MiB, so fewer blocks than local */
	ASSERT_LT(0, a.nr_blocks);
	ASSERT_GT(SH_LEN / SH_BS, a.nr_blocks);
	ASSERT_EQ(0, sh_host(3, state, sizeof(state), &inc));
	EXPECT_STREQ("active", state);
	EXPECT_LE(1, inc);
	SH_VIEW(self->c.fd, a.region_id, a.nr_blocks, 0, 0, 0);

	ASSERT_EQ(0, bt_info(self->c.fd, &self->c.info));
	EXPECT_EQ(SH_BS, self->c.info.block_size);
	EXPECT_EQ(a.nr_blocks, self->c.info.nr_blocks);
	map = bt_map(&self->c);

	ASSERT_EQ(0, bt_alloc(self->c.fd, 3, off));
	SH_VIEW(self->c.fd, a.region_id, a.nr_blocks, 3, 0, 0);
	for (i = 0; i < 3; i++) {
		ASSERT_TRUE(off[i] >= a.first_offset &&
			    off[i] < a.first_offset + a.nr_blocks * SH_BS);
		k[i] = bt_key(ns, 100 + i);
		bt_fill(map + off[i], 4096, 1000 + i);
	}
	for (i = 0; i < 2; i++) {
		r = bt_publish1(self->c.fd, ns, off[i], k[i], &res);
		ASSERT_EQ(0, r) TH_LOG("PUBLISH: %s", strerror(-r));
		EXPECT_EQ(BELUGA_PUBLISH_OK, res);
	}
	/* the same key again: lost the race, the block is freed */
	r = bt_publish1(self->c.fd, ns, off[2], k[0], &res);
	ASSERT_EQ(0, r);
	EXPECT_EQ(BELUGA_PUBLISH_EXISTS, res);
	SH_VIEW(self->c.fd, a.region_id, a.nr_blocks, 0, 2, 0);

	k[2] = bt_key(ns, 999);		/* never published: ends the run */
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, k, 3, NULL, 0, &hits));
	EXPECT_EQ(2, hits);
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, k, 3, got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(2, hits);
	for (i = 0; i < 2; i++) {
		EXPECT_EQ(off[i], got[i]);
		EXPECT_EQ(-1, bt_check(map + got[i], 4096, 1000 + i));
	}
	SH_VIEW(self->c.fd, a.region_id, a.nr_blocks, 0, 2, 2);
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(st0.publishes + 2, st.publishes);
	EXPECT_EQ(st0.publish_races + 1, st.publish_races);
	EXPECT_EQ(st0.allocs + 3, st.allocs);
	EXPECT_EQ(st0.lookups + 2, st.lookups);
	EXPECT_EQ(st0.lookup_hits + 4, st.lookup_hits);

	/* DETACH: refused while pinned or mapped */
	EXPECT_EQ(-EBUSY, bt_detach(self->c.fd, a.region_id, 0, NULL));
	ASSERT_EQ(0, bt_release(self->c.fd, 2, got));
	EXPECT_EQ(-EBUSY, bt_detach(self->c.fd, a.region_id, 0, NULL));
	bt_unmap(&self->c);
	r = bt_detach(self->c.fd, a.region_id, 0, NULL);
	ASSERT_EQ(0, r) TH_LOG("DETACH (clean leave): %s", strerror(-r));

	/* the last host left: joining again finds the keys */
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID,
			    3));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("join again: %s", strerror(-r));
	ASSERT_EQ(0, sh_host(3, state, sizeof(state), &inc));
	EXPECT_LE(2, inc) TH_LOG("a join takes a new incarnation");
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, k, 3, NULL, 0, &hits));
	EXPECT_EQ(2, hits);
	SH_VIEW(self->c.fd, a.region_id, a.nr_blocks, 0, 2, 0);
	EXPECT_EQ(0, bt_detach(self->c.fd, a.region_id, 0, NULL));

	/* FORMAT starts over, keys and bytes: the data area is cleared */
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 3));
	ASSERT_EQ(0, bt_attach(self->c.fd, &a));
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, k, 3, NULL, 0, &hits));
	EXPECT_EQ(0, hits);
	ASSERT_EQ(0, bt_info(self->c.fd, &self->c.info));
	map = bt_map(&self->c);
	for (i = 0; i < 3; i++) {
		uint64_t b;

		for (b = 0; b < 4096 && !map[off[i] + b]; b++)
			;
		EXPECT_EQ(4096, b) TH_LOG("block %d keeps byte %llu of the "
					  "pool formatted over", i,
					  (unsigned long long)b);
	}
	bt_unmap(&self->c);
	EXPECT_EQ(0, bt_detach(self->c.fd, a.region_id, 0, NULL));
}

/*
 * Whether this module refuses pins of shared mappings: 0 when it does
 * (mh_allow_gup=0, the default), else -ENOENT with the reason to skip.
 */
static int sh_gup_refused(char *why, size_t len)
{
	char allow[8] = "";
	FILE *gup = fopen("/sys/module/beluga/parameters/mh_allow_gup", "r");

	if (!gup) {
		snprintf(why, len, "mh_allow_gup: %s (module without it)",
			 strerror(errno));
		return -ENOENT;
	}
	if (!fgets(allow, sizeof(allow), gup))
		allow[0] = 0;
	fclose(gup);
	if (allow[0] == 'Y') {
		snprintf(why, len, "loaded with mh_allow_gup=1");
		return -ENOENT;
	}
	return 0;
}

/*
 * Review finding 3: a fence cannot revoke pins that devices hold, so a
 * shared pool's mappings refuse get_user_pages() (unless mh_allow_gup):
 * process_vm_readv() of them fails with EFAULT, while the same call on an
 * ordinary buffer works (and tells a kernel without the syscall, such as
 * the debug kernel without CONFIG_CROSS_MEMORY_ATTACH, to skip).
 */
TEST_F_TIMEOUT(shared, no_pins_of_shared_mappings, 120)
{
	struct beluga_attach a;
	char why[160];
	uint8_t *map, buf[64];
	struct iovec local = { buf, sizeof(buf) }, remote;
	uint64_t off;
	ssize_t n;
	int r;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	if (sh_gup_refused(why, sizeof(why)))
		SKIP(return, "%s", why);
	{
		uint8_t plain[64] = { 0x33 };
		struct iovec src = { plain, sizeof(plain) };

		n = process_vm_readv(getpid(), &local, 1, &src, 1, 0);
		if (n < 0 && errno == ENOSYS)
			SKIP(return, "process_vm_readv(): %s (kernel without "
			     "CONFIG_CROSS_MEMORY_ATTACH)", strerror(errno));
		ASSERT_EQ((ssize_t)sizeof(plain), n)
			TH_LOG("process_vm_readv() of a plain buffer: %s",
			       strerror(errno));
	}
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 0));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("shared attach: %s", strerror(-r));
	map = bt_map(&self->c);
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &off));
	memset(map + off, 0x5a, 4096);
	remote.iov_base = map + off;
	remote.iov_len = sizeof(buf);
	n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
	EXPECT_EQ(-1, n) TH_LOG("process_vm_readv() pinned a shared-pool page");
	EXPECT_EQ(EFAULT, errno);
	/* The CPU reaches the block as usual. */
	EXPECT_EQ(0x5a, map[off + 17]);
	ASSERT_EQ(0, bt_free(self->c.fd, 1, &off));
	bt_unmap(&self->c);
	r = bt_detach(self->c.fd, a.region_id, 0, NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH: %s", strerror(-r));
}

/*
 * Review 2, finding 1: the refusal must hold on get_user_pages_fast() too,
 * which walks the page tables without looking at the VMA. Every test
 * below faults a shared block in first (so that a page-table entry
 * exists for the fast path to find), then asks the kernel for a reference
 * to it in one of the ways that do not need FOLL_LONGTERM, through two
 * mappings: the whole pool, where the module may use 2 MiB entries, and
 * the block alone, which is mapped with 4 KiB entries. Each is refused
 * with EFAULT, the bytes stay as the CPU wrote them, and the same call on
 * an ordinary page works (so the refusal is the pool's).
 */
#define SH_PIN_FILL	0x5a
#define SH_PIN_LEN	4096
#define SH_PMD_FAULTS	"/sys/class/misc/beluga/stats/pmd_faults"

struct sh_pin {
	struct beluga_attach a;
	uint64_t off;
	uint8_t *blk;		/* the block alone */
	uint8_t *target[2];	/* the block in the pool mapping, and alone */
};

static const char *const sh_pin_names[2] = {
	"the block in a mapping of the whole pool",
	"a mapping of the block alone",
};

/*
 * A formatted shared pool with one allocated block, faulted in through
 * both mappings and filled with SH_PIN_FILL. False when the test skips
 * (the reason is given) or failed.
 */
static bool __sh_pin_setup(struct __test_metadata *_metadata,
			   struct bt_ctx *c, struct sh_pin *p)
{
	uint64_t pmd0 = 0, pmd1 = 0;
	char why[160];
	int r;

	memset(p, 0, sizeof(*p));
	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return false, "%s", why);
	if (sh_gup_refused(why, sizeof(why)))
		SKIP(return false, "%s", why);
	EXPECT_EQ(0, sh_req(&p->a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 0));
	r = bt_attach(c->fd, &p->a);
	EXPECT_EQ(0, r) TH_LOG("shared attach: %s", strerror(-r));
	if (r)
		return false;
	EXPECT_EQ(0, bt_info(c->fd, &c->info));
	c->map = mmap(NULL, c->info.map_size, PROT_READ | PROT_WRITE,
		      MAP_SHARED, c->fd, 0);
	EXPECT_NE(MAP_FAILED, c->map) TH_LOG("mmap: %s", strerror(errno));
	if (c->map == MAP_FAILED) {
		c->map = NULL;
		return false;
	}
	c->map_len = c->info.map_size;
	EXPECT_EQ(0, bt_alloc(c->fd, 1, &p->off));
	p->blk = mmap(NULL, SH_BS, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd,
		      (off_t)p->off);
	EXPECT_NE(MAP_FAILED, p->blk) TH_LOG("mmap of the block: %s",
					     strerror(errno));
	if (p->blk == MAP_FAILED) {
		p->blk = NULL;
		return false;
	}
	bt_read_sysfs_u64(SH_PMD_FAULTS, &pmd0);
	p->target[0] = (uint8_t *)c->map + p->off;
	p->target[1] = p->blk;
	memset(p->target[0], SH_PIN_FILL, SH_PIN_LEN);
	memset(p->target[1], SH_PIN_FILL, SH_PIN_LEN);
	bt_read_sysfs_u64(SH_PMD_FAULTS, &pmd1);
	TH_LOG("block at offset %llu; 2 MiB entries made for it: %llu",
	       (unsigned long long)p->off, (unsigned long long)(pmd1 - pmd0));
	return true;
}

#define sh_pin_setup(c, p) __sh_pin_setup(_metadata, c, p)

/* Bytes of @t that are not SH_PIN_FILL any more. */
static int sh_pin_changed(const uint8_t *t)
{
	int i, n = 0;

	for (i = 0; i < SH_PIN_LEN; i++)
		n += t[i] != SH_PIN_FILL;
	return n;
}

/*
 * The block's mappings go, the block is freed and the pool detaches: no
 * reference on its pages is left (DETACH refuses a pinned range, -EBUSY).
 */
static void __sh_pin_done(struct __test_metadata *_metadata,
			  struct bt_ctx *c, struct sh_pin *p)
{
	int r;

	if (p->blk)
		munmap(p->blk, SH_BS);
	p->blk = NULL;
	bt_unmap(c);
	EXPECT_EQ(0, bt_free(c->fd, 1, &p->off));
	r = bt_detach_retry(c->fd, p->a.region_id, 0, NULL, 10000);
	EXPECT_EQ(0, r) TH_LOG("DETACH: %s (a reference to the block's pages "
			       "is left)", strerror(-r));
}

#define sh_pin_done(c, p) __sh_pin_done(_metadata, c, p)

/*
 * O_DIRECT read from a block device into a shared block: the block layer
 * takes the user pages with pin_user_pages_fast() (6.12) or
 * get_user_pages_fast() (6.1) and the device writes into them, whenever
 * its I/O completes. BELUGA_TEST_BLKDEV names a block device whose first
 * 4 KiB the test may overwrite (the guests load brd: /dev/ram0).
 */
TEST_F_TIMEOUT(shared, odirect_read_into_shared_block_refused, 120)
{
	const char *dev = getenv("BELUGA_TEST_BLKDEV");
	struct sh_pin p;
	uint8_t *plain;
	ssize_t n;
	int fd, i;

	if (!dev || !*dev)
		SKIP(return, "BELUGA_TEST_BLKDEV is not set: no block device "
		     "for O_DIRECT (the guests load brd for /dev/ram0)");
	fd = open(dev, O_RDWR | O_DIRECT | O_CLOEXEC);
	ASSERT_LE(0, fd) TH_LOG("%s with O_DIRECT: %s", dev, strerror(errno));
	plain = mmap(NULL, SH_PIN_LEN, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, plain);
	/* The device holds 0xc3 bytes; an ordinary page reads them. */
	memset(plain, 0xc3, SH_PIN_LEN);
	ASSERT_EQ(SH_PIN_LEN, pwrite(fd, plain, SH_PIN_LEN, 0))
		TH_LOG("O_DIRECT write to %s: %s", dev, strerror(errno));
	memset(plain, 0, SH_PIN_LEN);
	ASSERT_EQ(SH_PIN_LEN, pread(fd, plain, SH_PIN_LEN, 0))
		TH_LOG("O_DIRECT read of %s into an ordinary page: %s", dev,
		       strerror(errno));
	ASSERT_EQ(0xc3, plain[SH_PIN_LEN - 1]);
	munmap(plain, SH_PIN_LEN);

	if (!sh_pin_setup(&self->c, &p)) {
		close(fd);
		return;
	}
	for (i = 0; i < 2; i++) {
		errno = 0;
		n = pread(fd, p.target[i], SH_PIN_LEN, 0);
		EXPECT_EQ(-1, n)
			TH_LOG("O_DIRECT read into %s: %zd bytes; the device "
			       "wrote %d bytes of it through a reference to "
			       "the shared-pool page", sh_pin_names[i], n,
			       sh_pin_changed(p.target[i]));
		EXPECT_EQ(EFAULT, errno) TH_LOG("%s: %s", sh_pin_names[i],
						strerror(errno));
		EXPECT_EQ(0, sh_pin_changed(p.target[i]));
		memset(p.target[i], SH_PIN_FILL, SH_PIN_LEN);
	}
	close(fd);
	sh_pin_done(&self->c, &p);
}

/*
 * vmsplice() of a shared block into a pipe: the pipe keeps references to
 * the pages themselves (get_user_pages_fast()) until it is read, for any
 * length of time, and the reader then gets whatever the block holds at
 * that moment, after a fence another host's bytes.
 */
TEST_F_TIMEOUT(shared, vmsplice_of_shared_block_refused, 120)
{
	uint8_t plain[SH_PIN_LEN], got[SH_PIN_LEN];
	struct iovec v = { plain, sizeof(plain) };
	struct sh_pin p;
	int pfd[2], i;
	ssize_t n;

	memset(plain, 0x11, sizeof(plain));
	ASSERT_EQ(0, pipe(pfd));
	n = vmsplice(pfd[1], &v, 1, 0);
	ASSERT_EQ(SH_PIN_LEN, n) TH_LOG("vmsplice() of an ordinary page: %s",
					strerror(errno));
	ASSERT_EQ(SH_PIN_LEN, read(pfd[0], got, sizeof(got)));

	if (!sh_pin_setup(&self->c, &p)) {
		close(pfd[0]);
		close(pfd[1]);
		return;
	}
	for (i = 0; i < 2; i++) {
		v.iov_base = p.target[i];
		v.iov_len = SH_PIN_LEN;
		errno = 0;
		n = vmsplice(pfd[1], &v, 1, 0);
		EXPECT_EQ(-1, n) TH_LOG("vmsplice() of %s took a reference to "
					"the shared-pool page (%zd bytes)",
					sh_pin_names[i], n);
		EXPECT_EQ(EFAULT, errno) TH_LOG("%s: %s", sh_pin_names[i],
						strerror(errno));
		if (n > 0) {
			/* What the pipe holds is the page, not a copy. */
			p.target[i][0] = 0xa5;
			EXPECT_EQ(n, read(pfd[0], got, (size_t)n));
			TH_LOG("%s: written after the vmsplice(), read from "
			       "the pipe: 0x%02x", sh_pin_names[i], got[0]);
			p.target[i][0] = SH_PIN_FILL;
		}
	}
	close(pfd[0]);
	close(pfd[1]);
	sh_pin_done(&self->c, &p);
}

/*
 * Register @len bytes at @addr as an io_uring fixed buffer
 * (IORING_REGISTER_BUFFERS: a FOLL_LONGTERM pin) in a ring of its own:
 * 0, -errno of the registration, or -ENOSYS/-EPERM when no ring could be
 * made (io_uring left out or disabled).
 */
static int sh_uring_register(void *addr, size_t len, int *setup_err)
{
	struct io_uring_params prm;
	struct iovec v = { addr, len };
	int ring, r;

	memset(&prm, 0, sizeof(prm));
	*setup_err = 0;
	ring = (int)syscall(__NR_io_uring_setup, 4, &prm);
	if (ring < 0) {
		*setup_err = errno;
		return -errno;
	}
	r = (int)syscall(__NR_io_uring_register, ring,
			 IORING_REGISTER_BUFFERS, &v, 1);
	r = r < 0 ? -errno : 0;
	close(ring);
	return r;
}

/*
 * io_uring fixed buffers are the long-term pins of the finding's first
 * review: refused by the fast path's own FOLL_LONGTERM check today, and
 * they must stay refused (EFAULT) whatever entries map the block.
 */
TEST_F_TIMEOUT(shared, uring_buffer_of_shared_block_refused, 120)
{
	struct sh_pin p;
	uint8_t *plain;
	int i, r, setup_err;

	plain = mmap(NULL, SH_PIN_LEN, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, plain);
	memset(plain, 1, SH_PIN_LEN);
	r = sh_uring_register(plain, SH_PIN_LEN, &setup_err);
	munmap(plain, SH_PIN_LEN);
	if (setup_err)
		SKIP(return, "io_uring_setup(): %s (io_uring left out or "
		     "disabled)", strerror(setup_err));
	ASSERT_EQ(0, r) TH_LOG("fixed buffer of an ordinary page: %s",
			       strerror(-r));

	if (!sh_pin_setup(&self->c, &p))
		return;
	for (i = 0; i < 2; i++) {
		r = sh_uring_register(p.target[i], SH_PIN_LEN, &setup_err);
		EXPECT_EQ(-EFAULT, r) TH_LOG("fixed buffer of %s: %s",
					     sh_pin_names[i], strerror(-r));
		EXPECT_EQ(0, sh_pin_changed(p.target[i]));
	}
	sh_pin_done(&self->c, &p);
}

/*
 * HOSTS on a shared pool: every record of the pool (its max_hosts), this
 * host's alive and marked SELF, the others unused; -EMSGSIZE with the
 * number when the array is short, -EFAULT when it cannot be written.
 */
/*
 * BELUGA_ALLOC_EVICTED on a shared pool: the ALLOC that evicts names its
 * victims (this host's partitions), oldest first, in two namespaces; the
 * pinned oldest is passed over.
 */
TEST_F_TIMEOUT(shared, alloc_names_evicted, 120)
{
	const uint64_t ns[2] = { bt_ns(0x5e1), bt_ns(0x5e2) };
	struct beluga_evicted_key ev[2];
	static uint64_t o[256];
	struct beluga_attach a;
	struct beluga_key k0;
	uint64_t fresh[2], pin;
	uint32_t n = 0, i, nr, hits;
	char why[160];
	int32_t res;
	int r;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 2));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("shared attach: %s", strerror(-r));

	/* every block this host can take, published in order */
	while (n < 256 && bt_alloc(self->c.fd, 1, &o[n]) == 0)
		n++;
	ASSERT_LT(n, 256);
	ASSERT_LE(4, n);
	for (i = 0; i < n; i++) {
		ASSERT_EQ(0, bt_publish1(self->c.fd, ns[i % 2], o[i],
					 bt_key(ns[i % 2], i), &res));
		ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	}
	k0 = bt_key(ns[0], 0);
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns[0], &k0, 1, &pin,
			       BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);

	nr = 77;
	r = bt_alloc_evicted(self->c.fd, 2, fresh, ev, &nr);
	ASSERT_EQ(0, r) TH_LOG("ALLOC EVICTED: %s", strerror(-r));
	ASSERT_EQ(2, nr);
	for (i = 0; i < 2; i++) {
		struct beluga_key k = bt_key(ns[(i + 1) % 2], i + 1);

		EXPECT_EQ(ns[(i + 1) % 2], ev[i].ns) TH_LOG("entry %u", i);
		EXPECT_EQ(k.lo, ev[i].key.lo) TH_LOG("entry %u", i);
		EXPECT_EQ(k.hi, ev[i].key.hi) TH_LOG("entry %u", i);
		EXPECT_EQ(0, bt_present(self->c.fd, ev[i].ns, k));
	}
	EXPECT_EQ(1, bt_present(self->c.fd, ns[0], k0));
	EXPECT_EQ(1, bt_present(self->c.fd, ns[1], bt_key(ns[1], 3)));
	ASSERT_EQ(0, bt_release(self->c.fd, 1, &pin));
	ASSERT_EQ(0, bt_free(self->c.fd, 2, fresh));
}

TEST_F_TIMEOUT(shared, hosts_ioctl, 120)
{
	struct beluga_host h[BELUGA_MAX_HOSTS + 1];
	struct beluga_hosts q;
	struct beluga_attach a;
	char why[160];
	void *hole;
	int r, i;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 2));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("shared attach: %s", strerror(-r));

	memset(h, 0xa5, sizeof(h));
	r = bt_hosts(self->c.fd, h, BELUGA_MAX_HOSTS + 1);
	ASSERT_EQ(SH_HOSTS, r) TH_LOG("HOSTS: %s", r < 0 ? strerror(-r) : "");
	for (i = 0; i < SH_HOSTS; i++) {
		EXPECT_EQ(i, h[i].host_id);
		if (i == 2) {
			EXPECT_EQ(BELUGA_HOST_ACTIVE, h[i].state);
			/* a 1.3 module honours device leases; it has none */
			EXPECT_EQ(BELUGA_HOST_ALIVE | BELUGA_HOST_SELF |
				  BELUGA_HOST_LEASE_AWARE, h[i].flags);
			EXPECT_EQ(0, h[i].device_fence_ms);
			EXPECT_LE(1, h[i].incarnation);
			EXPECT_NE(0, h[i].owned) TH_LOG("the only host owns partitions");
		} else {
			EXPECT_EQ(BELUGA_HOST_NONE, h[i].state) TH_LOG("record %d", i);
			EXPECT_EQ(0, h[i].flags & BELUGA_HOST_SELF);
		}
		EXPECT_EQ(0, h[i].name[BELUGA_NAME_LEN - 1]);
	}
	EXPECT_EQ(0xa5a5a5a5U, h[SH_HOSTS].host_id) TH_LOG("written past the records");

	/* room for 3 of 8: 3 written, -EMSGSIZE, the count says 8 */
	memset(h, 0xa5, sizeof(h));
	q = (struct beluga_hosts){ .size = sizeof(q), .count = 3,
				   .hosts = (uintptr_t)h };
	r = bt_ioctl(self->c.fd, BELUGA_IOC_HOSTS, &q);
	EXPECT_EQ(-EMSGSIZE, r) TH_LOG("HOSTS with room for 3: %s", strerror(-r));
	EXPECT_EQ(SH_HOSTS, q.count);
	EXPECT_EQ(2, h[2].host_id);
	EXPECT_EQ(0xa5a5a5a5U, h[3].host_id) TH_LOG("written past the room");
	/* room for none: the number only */
	q = (struct beluga_hosts){ .size = sizeof(q) };
	r = bt_ioctl(self->c.fd, BELUGA_IOC_HOSTS, &q);
	EXPECT_EQ(-EMSGSIZE, r);
	EXPECT_EQ(SH_HOSTS, q.count);

	/* an array that cannot be written: -EFAULT, the struct unchanged */
	hole = bt_unmapped_page();
	ASSERT_NE(NULL, hole);
	q = (struct beluga_hosts){ .size = sizeof(q), .count = BELUGA_MAX_HOSTS,
				   .hosts = (uintptr_t)hole };
	r = bt_ioctl(self->c.fd, BELUGA_IOC_HOSTS, &q);
	EXPECT_EQ(-EFAULT, r) TH_LOG("HOSTS into a hole: %s", strerror(-r));
	EXPECT_EQ(BELUGA_MAX_HOSTS, q.count);

	/* sysfs holds one value per file: the old table is gone */
	EXPECT_NE(0, access("/sys/class/misc/beluga/hosts", F_OK));

	r = bt_detach(self->c.fd, a.region_id, 0, NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH: %s", strerror(-r));
	EXPECT_EQ(0, bt_hosts(self->c.fd, h, BELUGA_MAX_HOSTS))
		TH_LOG("no records once the shared pool is detached");
}

TEST_F_TIMEOUT(shared, fence_zaps_and_rejoins, 240)
{
	struct beluga_attach a;
	uint64_t ns = bt_ns(72), off, got;
	struct beluga_key k = bt_key(ns, 7);
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	unsigned int inc0 = 0, inc = 0;
	char why[160], state[16];
	uint32_t hits = 0;
	int32_t res;
	uint8_t *map, *map2;
	int r, i, fd2 = -1;
	pid_t retriers[SH_RETRIERS];

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	if (bt_mh_stall(false, why, sizeof(why)))
		SKIP(return, "%s", why);
	ASSERT_EQ(0, sh_req(&a, BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
			    BELUGA_ATTACH_FORMAT, 0));
	r = bt_attach(self->c.fd, &a);
	ASSERT_EQ(0, r) TH_LOG("shared attach: %s", strerror(-r));
	ASSERT_EQ(0, sh_host(0, state, sizeof(state), &inc0));
	map = bt_map(&self->c);
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &off));
	bt_fill(map + off, 4096, 72);
	ASSERT_EQ(0, bt_publish1(self->c.fd, ns, off, k, &res));
	ASSERT_EQ(BELUGA_PUBLISH_OK, res);
	ASSERT_EQ(0, bt_lookup(self->c.fd, ns, &k, 1, &got, BELUGA_LOOKUP_PIN,
			       &hits));
	ASSERT_EQ(1, hits);
	EXPECT_EQ(0, sh_child_read(&self->c, map + got));

	/* stop the heartbeat: the host fences itself after half a lease */
	ASSERT_EQ(0, bt_mh_stall(true, why, sizeof(why))) TH_LOG("%s", why);
	for (i = 0; i < 300; i++) {	/* 30 s */
		r = bt_lookup(self->c.fd, ns, &k, 1, NULL, 0, &hits);
		if (r)
			break;
		nanosleep(&ts, NULL);
	}
	EXPECT_EQ(-ESTALE, r) TH_LOG("LOOKUP of a fenced host: %s", strerror(-r));
	/* the zap runs right after the fence is seen: give it a moment */
	for (i = 0; i < 50 && sh_child_read(&self->c, map + got) == 0; i++)
		nanosleep(&ts, NULL);
	EXPECT_EQ(128 + SIGBUS, sh_child_read(&self->c, map + got))
		TH_LOG("a mapping of a fenced pool must raise SIGBUS");
	ASSERT_EQ(0, bt_mh_stall(false, why, sizeof(why))) TH_LOG("%s", why);

	/*
	 * Callers retrying without a pause on new files must not starve the
	 * rejoin (review finding 7): each stops at its first hit, or after
	 * 40 s.
	 */
	for (i = 0; i < SH_RETRIERS; i++) {
		retriers[i] = fork();
		ASSERT_LE(0, retriers[i]);
		if (!retriers[i]) {
			time_t end = time(NULL) + 40;
			int f = bt_open(O_RDONLY);

			while (f >= 0 && time(NULL) < end &&
			       bt_lookup(f, ns, &k, 1, NULL, 0, &hits))
				;
			_exit(0);
		}
	}
	/* a new file works once the host rejoined (after a lease) */
	fd2 = bt_open(O_RDWR);
	ASSERT_LE(0, fd2);
	for (i = 0; i < 300; i++) {	/* 30 s */
		r = bt_lookup(fd2, ns, &k, 1, NULL, 0, &hits);
		if (!r)
			break;
		nanosleep(&ts, NULL);
	}
	for (i = 0; i < SH_RETRIERS; i++)
		waitpid(retriers[i], NULL, 0);
	ASSERT_EQ(0, r) TH_LOG("LOOKUP after the rejoin, with %d callers retrying: %s",
			       SH_RETRIERS, strerror(-r));
	EXPECT_EQ(1, hits) TH_LOG("the published key survives the fence");
	ASSERT_EQ(0, sh_host(0, state, sizeof(state), &inc));
	EXPECT_STREQ("active", state);
	EXPECT_LT(inc0, inc) TH_LOG("the rejoin takes a new incarnation");

	/* the file opened before the fence stays stale */
	EXPECT_EQ(-ESTALE, bt_lookup(self->c.fd, ns, &k, 1, NULL, 0, &hits));
	EXPECT_EQ(-ESTALE, bt_release(self->c.fd, 1, &got));
	EXPECT_EQ(-ESTALE, bt_alloc(self->c.fd, 1, &off));
	EXPECT_EQ(128 + SIGBUS, sh_child_read(&self->c, map + got));
	map2 = mmap(NULL, self->c.info.map_size, PROT_READ, MAP_SHARED,
		    self->c.fd, 0);
	EXPECT_EQ(MAP_FAILED, map2);
	EXPECT_EQ(ESTALE, errno);
	if (map2 != MAP_FAILED)
		munmap(map2, self->c.info.map_size);

	/* the new file maps and reads the block */
	ASSERT_EQ(0, bt_lookup(fd2, ns, &k, 1, &got, BELUGA_LOOKUP_PIN, &hits));
	ASSERT_EQ(1, hits);
	map2 = mmap(NULL, self->c.info.map_size, PROT_READ, MAP_SHARED, fd2, 0);
	ASSERT_NE(MAP_FAILED, map2) TH_LOG("mmap after the rejoin: %s",
					   strerror(errno));
	EXPECT_EQ(-1, bt_check(map2 + got, 4096, 72));
	EXPECT_EQ(0, sh_child_read(&self->c, map2 + got));
	munmap(map2, self->c.info.map_size);
	ASSERT_EQ(0, bt_release(fd2, 1, &got));
	close(fd2);

	/* the stale file's mapping still counts: unmap, then DETACH */
	bt_unmap(&self->c);
	r = bt_detach(self->c.fd, a.region_id, 0, NULL);
	EXPECT_EQ(0, r) TH_LOG("DETACH after the rejoin: %s", strerror(-r));
}

TEST_HARNESS_MAIN
