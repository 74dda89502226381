// SPDX-License-Identifier: GPL-2.0
/*
 * Shared (multi-host) pools from one host: the ATTACH flags SHARED, FORMAT
 * and HOST_ID and their refusals, a single-host round trip on a device-dax
 * range (format, STATS and REGION_INFO as this host's view, publish,
 * lookup, pin, byte-exact read, detach, join again with the keys still
 * there), and a fence: the host stops heartbeating (the mh_stall_heartbeat
 * module parameter), fences itself, zaps the mappings (SIGBUS), makes the
 * files opened before stale (-ESTALE), and rejoins with a new incarnation.
 * Two hosts on one pool are tests/multihost's.
 */
#include "beluga_test.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

#define SH_LEN		(4 * BT_MIB)	/* 2 MiB of metadata, 2 MiB of blocks */
#define SH_BS		(64 * BT_KIB)
#define SH_HOSTS	8		/* the default max_hosts of a format */
#define SH_STALL	"/sys/module/beluga/parameters/mh_stall_heartbeat"
/* Processes retrying LOOKUP while the host rejoins. */
#define SH_RETRIERS	4
#define SH_HOSTS_ATTR	"/sys/class/misc/beluga/hosts"

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

/* The "hosts" line of host @id: its state and incarnation. */
static int sh_host(int id, char *state, size_t len, unsigned int *inc)
{
	char buf[2048], st[16], *line, *save = NULL;
	int fd = open(SH_HOSTS_ATTR, O_RDONLY | O_CLOEXEC), x;
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = 0;
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (sscanf(line, "%d %15s %u", &x, st, inc) == 3 && x == id) {
			snprintf(state, len, "%s", st);
			return 0;
		}
	}
	return -ENOENT;
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
	/* A failed fence test must not leave the heartbeat stalled. */
	bt_write_str(SH_STALL, "N");
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
 * Review finding 3: a fence cannot revoke pins that devices hold, so a
 * shared pool's mappings refuse get_user_pages() (unless mh_allow_gup):
 * process_vm_readv() of them fails with EFAULT, while the same call on an
 * ordinary buffer works (and tells a kernel without the syscall, such as
 * the debug kernel without CONFIG_CROSS_MEMORY_ATTACH, to skip).
 */
TEST_F_TIMEOUT(shared, no_pins_of_shared_mappings, 120)
{
	struct beluga_attach a;
	char why[160], allow[8] = "";
	uint8_t *map, buf[64];
	struct iovec local = { buf, sizeof(buf) }, remote;
	uint64_t off;
	FILE *gup;
	ssize_t n;
	int r;

	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, SH_LEN, why, sizeof(why)))
		SKIP(return, "%s", why);
	gup = fopen("/sys/module/beluga/parameters/mh_allow_gup", "r");
	if (!gup)
		SKIP(return, "mh_allow_gup: %s (module without it)",
		     strerror(errno));
	if (!fgets(allow, sizeof(allow), gup))
		allow[0] = 0;
	fclose(gup);
	if (allow[0] == 'Y')
		SKIP(return, "loaded with mh_allow_gup=1");
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
	if (access(SH_STALL, W_OK))
		SKIP(return, "%s: %s (module without the test hook)", SH_STALL,
		     strerror(errno));
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
	ASSERT_EQ(0, bt_write_str(SH_STALL, "Y"));
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
	ASSERT_EQ(0, bt_write_str(SH_STALL, "N"));

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
