// SPDX-License-Identifier: GPL-2.0
/*
 * Memory errors: a published block is poisoned with madvise(MADV_HWPOISON)
 * (the kernel's memory_failure(), as for a real uncorrectable error). The
 * process touching it gets SIGBUS BUS_MCEERR_AR with the address, the block
 * is retired (STATS retired_blocks, sysfs), LOOKUP no longer finds its key,
 * ALLOC of the whole pool never hands it out, and the other blocks work.
 *
 * Device-dax pages are signalled and unmapped by memory_failure() itself
 * (the module stamps folio->mapping/index); node pages are not (it ignores
 * non-LRU pages), so for them the test only checks what the module does at
 * the next fault. The poisoned page stays poisoned until the guest reboots:
 * the test uses the last 8 MiB of the first device-dax, which no other test
 * touches. ATTACH's clear of a device-dax range leaves the poisoned page
 * alone, as seen through /dev/daxX.Y after DETACH (the emulated error does
 * not make the memory unreadable). poison_shared does the same on a shared
 * (multi-host) pool, whose blocks the multi-host protocol retires.
 */
#include <setjmp.h>
#include <signal.h>
#include <sys/mount.h>

#include "beluga_test.h"

#define PZ_BS		(2 * BT_MIB)	/* a device-dax folio: one block */
#define PZ_LEN		(4 * PZ_BS)
#define PZ_BLOCKS	(PZ_LEN / PZ_BS)

#ifndef MADV_HWPOISON
#define MADV_HWPOISON	100
#endif
#ifndef BUS_MCEERR_AR
#define BUS_MCEERR_AR	4
#endif

static sigjmp_buf pz_jmp;
static volatile sig_atomic_t pz_signals;
static siginfo_t pz_info;

static void pz_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	pz_info = *si;
	pz_signals++;
	siglongjmp(pz_jmp, 1);
}

/*
 * The end of both fixtures' setup: the blocks retired already (earlier
 * runs' poison in the range, found by ATTACH's scan) and the SIGBUS
 * handler, which their teardowns restore. 0 or -errno.
 */
static int pz_arm(struct bt_ctx *c, uint64_t *retired0, struct sigaction *old)
{
	struct sigaction sa = { 0 };
	struct beluga_stats st;
	int r = bt_stats(c->fd, &st);

	if (r)
		return r;
	*retired0 = st.retired_blocks;
	sa.sa_sigaction = pz_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGBUS, &sa, old) ? -errno : 0;
}

/*
 * The end of both fixtures' setup: the pool's info, the namespace, the
 * retired count before the test and the SIGBUS handler.
 */
static int pz_ready(struct bt_ctx *c, uint64_t salt, uint64_t *ns,
		    uint64_t *retired0, struct sigaction *old)
{
	int r = bt_info(c->fd, &c->info);

	if (r)
		return r;
	*ns = bt_ns(salt);
	return pz_arm(c, retired0, old);
}

/*
 * Both poison tests' blocks: @bad and @good published, each in a block of
 * its own filled from @seed and @seed + 1. 0, a negative errno, or the
 * PUBLISH result that was not BELUGA_PUBLISH_OK.
 */
static int pz_publish_pair(struct bt_ctx *c, char *p, uint64_t ns,
			   struct beluga_key bad, struct beluga_key good,
			   uint64_t seed, uint64_t *o_bad, uint64_t *o_good)
{
	int32_t res;
	int r;

	r = bt_alloc(c->fd, 1, o_bad);
	if (!r)
		r = bt_alloc(c->fd, 1, o_good);
	if (r)
		return r;
	bt_fill(p + *o_bad, 4096, seed);
	bt_fill(p + *o_good, 4096, seed + 1);
	r = bt_publish1(c->fd, ns, *o_bad, bad, &res);
	if (!r && res == BELUGA_PUBLISH_OK)
		r = bt_publish1(c->fd, ns, *o_good, good, &res);
	if (r)
		return r;
	return res == BELUGA_PUBLISH_OK ? 0 : res;
}

/* Read one byte at @p; true if that raised SIGBUS (pz_info has it). */
static bool pz_touch_bus(volatile char *p)
{
	int before = pz_signals;

	if (sigsetjmp(pz_jmp, 1) == 0)
		(void)*p;
	return pz_signals != before;
}

FIXTURE(poison) {
	struct bt_ctx c;
	uint64_t ns;
	uint64_t retired0;	/* retired at ATTACH: earlier tests' poison */
	struct sigaction old;
};

FIXTURE_VARIANT(poison) {
	int backend;
};

FIXTURE_VARIANT_ADD(poison, node) {
	.backend = BELUGA_BACKEND_NODE,
};

FIXTURE_VARIANT_ADD(poison, dax) {
	.backend = BELUGA_BACKEND_DAX,
};

FIXTURE_SETUP(poison)
{
	uint64_t phys, size;
	char names[BT_MAX_DAX][64];
	char why[160];
	uint64_t skip = 0;
	int r;

	bt_ctx_init(&self->c);
	if (!bt_backend_ok(variant->backend, 0, PZ_LEN, why, sizeof(why))) {
		SKIP(return, "%s", why);
	}
	if (variant->backend == BELUGA_BACKEND_DAX) {
		ASSERT_LT(0, bt_env_dax(names));
		ASSERT_EQ(0, bt_dax_geometry(names[0], &phys, &size));
		skip = size - PZ_LEN;
	}
	bt_setup_empty(&self->c);
	self->c.backend = variant->backend;
	ASSERT_EQ(0, bt_attach_req(&self->c.att[0], variant->backend, 0, skip,
				   PZ_LEN, PZ_BS, "bt-poison"));
	r = bt_attach(self->c.fd, &self->c.att[0]);
	ASSERT_EQ(0, r) TH_LOG("ATTACH: %s", strerror(-r));
	self->c.nr = 1;
	ASSERT_EQ(0, pz_ready(&self->c, 0x9015, &self->ns, &self->retired0,
			      &self->old));
}

FIXTURE_TEARDOWN(poison)
{
	sigaction(SIGBUS, &self->old, NULL);
	bt_teardown(&self->c);
}

static uint64_t pz_sysfs_retired(void)
{
	uint64_t v = ~0ULL;

	bt_read_sysfs_u64("/sys/class/misc/beluga/retired_blocks", &v);
	return v;
}

TEST_F(poison, poisoned_block_is_retired)
{
	struct beluga_key bad = { .lo = 0xbad, .hi = 1 };
	struct beluga_key good = { .lo = 0x600d, .hi = 1 };
	uint64_t o_bad, o_good, got[PZ_BLOCKS], off;
	volatile char *target;
	struct beluga_stats st;
	uint32_t hits = 99, i, good_n;
	char names[BT_MAX_DAX][64], path[96];
	uint64_t rel, phys, size;
	char *p, *dmap;
	bool bus;
	int r, dfd;

	p = bt_map(&self->c);
	ASSERT_EQ(0, pz_publish_pair(&self->c, p, self->ns, bad, good, 1,
				     &o_bad, &o_good));

	/* Poison one page in the middle of the block, mapped and touched. */
	target = p + o_bad + 5 * BT_PAGE;
	ASSERT_FALSE(pz_touch_bus(target));
	/* what ATTACH's clear must leave alone once the page is poisoned */
	bt_fill((char *)target, BT_PAGE, 77);
	rel = o_bad - self->c.att[0].first_offset;
	pz_info.si_code = 0;
	if (sigsetjmp(pz_jmp, 1) == 0) {
		r = madvise((void *)target, BT_PAGE, MADV_HWPOISON);
		if (r && (errno == EPERM || errno == EINVAL)) {
			SKIP(return, "madvise(MADV_HWPOISON): %s (needs root and "
			     "CONFIG_MEMORY_FAILURE)", strerror(errno));
		}
		if (variant->backend == BELUGA_BACKEND_DAX) {
			ASSERT_EQ(0, r) TH_LOG("MADV_HWPOISON: %s", strerror(errno));
		} else {
			TH_LOG("node page: MADV_HWPOISON returned %d (%s), no signal",
			       r, r ? strerror(errno) : "ok");
		}
	}
	if (variant->backend == BELUGA_BACKEND_DAX) {
		/*
		 * memory_failure() found this process through the pool
		 * inode's mappings: SIGBUS for the folio (the block) that
		 * holds the page, which it also unmapped everywhere.
		 */
		ASSERT_EQ(1, pz_signals) TH_LOG("no SIGBUS from memory_failure()");
		EXPECT_EQ(BUS_MCEERR_AR, pz_info.si_code);
		EXPECT_LE((uintptr_t)p + o_bad, (uintptr_t)pz_info.si_addr);
		EXPECT_GE((uintptr_t)target, (uintptr_t)pz_info.si_addr);
		EXPECT_LT((uintptr_t)target, (uintptr_t)pz_info.si_addr +
			  (1UL << pz_info.si_addr_lsb));
	}
	/* Node pages stay mapped; make the next touch fault. */
	ASSERT_EQ(0, madvise(p + o_bad, PZ_BS, MADV_DONTNEED));

	/* The next touch faults: SIGBUS at the very address, block retired. */
	pz_info.si_code = 0;
	bus = pz_touch_bus(target + 0x123);
	ASSERT_TRUE(bus) TH_LOG("touching the poisoned page: no SIGBUS");
	EXPECT_EQ(BUS_MCEERR_AR, pz_info.si_code);
	EXPECT_EQ((uintptr_t)(target + 0x123), (uintptr_t)pz_info.si_addr);
	EXPECT_EQ(12, pz_info.si_addr_lsb);
	/* Another page of the same block (the whole folio, on dax) too. */
	if (variant->backend == BELUGA_BACKEND_DAX)
		EXPECT_TRUE(pz_touch_bus(p + o_bad));

	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0 + 1, st.retired_blocks);
	EXPECT_EQ(1, st.published_blocks);
	EXPECT_EQ(PZ_BLOCKS, st.total_blocks);
	ASSERT_STATS_CONSISTENT(st);
	EXPECT_EQ(self->retired0 + 1, pz_sysfs_retired());

	/* LOOKUP no longer returns it; the other key is still there. */
	EXPECT_EQ(0, bt_lookup(self->c.fd, self->ns, &bad, 1, &off,
			       BELUGA_LOOKUP_PIN, &hits));
	EXPECT_EQ(0, hits);
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, good));
	EXPECT_EQ(-1, bt_check(p + o_good, 4096, 2));

	/* ALLOC of the whole pool: the good blocks (evicting 'good'), never it. */
	good_n = PZ_BLOCKS - 1 - (uint32_t)self->retired0;
	ASSERT_LT(0, good_n);
	EXPECT_EQ(-ENOSPC, bt_alloc(self->c.fd, good_n + 1, got));
	ASSERT_EQ(0, bt_alloc(self->c.fd, good_n, got));
	for (i = 0; i < good_n; i++) {
		EXPECT_NE(o_bad, got[i]);
		/* ... and they work. */
		bt_fill(p + got[i] + PZ_BS - 4096, 4096, 10 + i);
		EXPECT_FALSE(pz_touch_bus(p + got[i]));
	}
	for (i = 0; i < good_n; i++)
		EXPECT_EQ(-1, bt_check(p + got[i] + PZ_BS - 4096, 4096, 10 + i));
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, good));
	EXPECT_EQ(0, bt_free(self->c.fd, good_n, got));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0 + 1, st.retired_blocks);
	EXPECT_EQ(good_n, st.free_blocks);
	ASSERT_STATS_CONSISTENT(st);

	/*
	 * Device-dax: the page stays poisoned after DETACH; ATTACH of the
	 * same range finds it and retires the block again.
	 */
	bt_unmap(&self->c);
	if (variant->backend != BELUGA_BACKEND_DAX)
		return;
	ASSERT_EQ(0, bt_detach(self->c.fd, self->c.att[0].region_id, 0, NULL));
	self->c.nr = 0;
	r = bt_attach(self->c.fd, &self->c.att[0]);
	ASSERT_EQ(0, r) TH_LOG("ATTACH again: %s", strerror(-r));
	self->c.nr = 1;
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0 + 1, st.retired_blocks);
	ASSERT_EQ(0, bt_alloc(self->c.fd, good_n, got));
	EXPECT_EQ(-ENOSPC, bt_alloc(self->c.fd, 1, &off));
	for (i = 0; i < good_n; i++)
		EXPECT_NE(o_bad, got[i]);
	EXPECT_EQ(0, bt_free(self->c.fd, good_n, got));

	/*
	 * That ATTACH cleared the range but for the poisoned folio (a store
	 * to bad memory risks another machine check): seen through
	 * /dev/daxX.Y once detached, the page still holds what was written
	 * before the error. A region with a retired block detaches.
	 */
	ASSERT_EQ(0, bt_detach(self->c.fd, self->c.att[0].region_id, 0, NULL));
	self->c.nr = 0;
	ASSERT_LT(0, bt_env_dax(names));
	ASSERT_EQ(0, bt_dax_geometry(names[0], &phys, &size));
	snprintf(path, sizeof(path), "/dev/%s", names[0]);
	dfd = open(path, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, dfd) TH_LOG("open %s: %s", path, strerror(errno));
	dmap = mmap(NULL, PZ_BS, PROT_READ, MAP_SHARED, dfd,
		    (off_t)(size - PZ_LEN + rel));
	close(dfd);
	if (dmap == MAP_FAILED && errno == EINVAL)
		SKIP(return, "mmap of %s: EINVAL (no CONFIG_FS_DAX)", path);
	ASSERT_NE(MAP_FAILED, dmap) TH_LOG("mmap %s: %s", path, strerror(errno));
	if (pz_touch_bus(dmap + 5 * BT_PAGE)) {
		munmap(dmap, PZ_BS);
		SKIP(return, "device_dax refuses the poisoned folio: SIGBUS");
	}
	EXPECT_EQ(-1, bt_check(dmap + 5 * BT_PAGE, BT_PAGE, 77))
		TH_LOG("ATTACH wrote over the poisoned page");
	munmap(dmap, PZ_BS);
}

/*
 * A block that a file holds when the error is found stays that file's
 * until it lets go: PUBLISH then answers -EIO and the block is retired.
 */
TEST_F(poison, held_block_retired_when_let_go)
{
	struct beluga_key k = { .lo = 0x4e1d, .hi = 2 };
	struct beluga_stats st;
	volatile char *target;
	uint64_t o;
	int32_t res = 99;
	char *p;
	int r;

	p = bt_map(&self->c);
	ASSERT_EQ(0, bt_alloc(self->c.fd, 1, &o));
	target = p + o;
	ASSERT_FALSE(pz_touch_bus(target));
	if (sigsetjmp(pz_jmp, 1) == 0) {
		r = madvise((void *)target, BT_PAGE, MADV_HWPOISON);
		if (r && (errno == EPERM || errno == EINVAL)) {
			SKIP(return, "madvise(MADV_HWPOISON): %s", strerror(errno));
		}
	}
	ASSERT_EQ(0, madvise(p + o, PZ_BS, MADV_DONTNEED));
	ASSERT_TRUE(pz_touch_bus(target));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0, st.retired_blocks);
	EXPECT_EQ(1, st.allocated_blocks);
	ASSERT_EQ(0, bt_publish1(self->c.fd, self->ns, o, k, &res));
	EXPECT_EQ(-EIO, res);
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, k));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0 + 1, st.retired_blocks);
	EXPECT_EQ(0, st.allocated_blocks);
	EXPECT_EQ(PZ_BLOCKS - 1 - self->retired0, st.free_blocks);
	ASSERT_STATS_CONSISTENT(st);
	bt_unmap(&self->c);
}

/*
 * A shared (multi-host) pool, one host: the multi-host protocol retires the
 * block (format 1.2). 2 MiB blocks, one device-dax folio each, in a range
 * of the first device-dax that no other test touches (the 24 MiB below
 * the last 8 MiB the fixture above uses): 2 MiB of metadata and
 * BELUGA_MAX_HOSTS' default of 8 partitions need 9 blocks at least. The
 * host owns every partition, so the block is retired at once, and STATS
 * counts it. Shared mappings refuse get_user_pages(), its fast path too
 * (VM_IO and special entries, unless mh_allow_gup=1), so MADV_HWPOISON
 * fails with EFAULT and the test injects the error through hwpoison-inject
 * (debugfs corrupt-pfn, module hwpoison_inject) at the page's pfn. The
 * memory_failure() of that path finds no mapper of a special entry
 * (kmod/poison.c): the test drops the mapping and the next touch faults.
 */
#define PZS_LEN		(24 * BT_MIB)
#define PZS_SKIP	(PZS_LEN + PZ_LEN)	/* from the end of the device */
#define PZS_INJECT	"/sys/kernel/debug/hwpoison/corrupt-pfn"

FIXTURE(poison_shared) {
	struct bt_ctx c;
	struct beluga_attach a;
	uint64_t ns;
	uint64_t retired0;
	struct sigaction old;
};

static int pzs_attach(struct bt_ctx *c, struct beluga_attach *a, bool format)
{
	char names[BT_MAX_DAX][64];
	uint64_t phys, size;
	int r;

	if (bt_env_dax(names) < 1)
		return -ENOENT;
	r = bt_dax_geometry(names[0], &phys, &size);
	if (r)
		return r;
	r = bt_attach_req(a, BELUGA_BACKEND_DAX, 0, size - PZS_SKIP, PZS_LEN,
			  PZ_BS, "bt-poison-sh");
	if (r)
		return r;
	a->flags = BELUGA_ATTACH_SHARED | BELUGA_ATTACH_HOST_ID |
		   (format ? BELUGA_ATTACH_FORMAT : 0);
	a->host_id = 0;
	r = bt_attach(c->fd, a);
	if (!r) {
		c->att[0] = *a;
		c->nr = 1;
	}
	return r;
}

FIXTURE_SETUP(poison_shared)
{
	char names[BT_MAX_DAX][64];
	uint64_t phys, size;
	char why[160];
	int r;

	bt_ctx_init(&self->c);
	if (!bt_backend_ok(BELUGA_BACKEND_DAX, 0, PZS_SKIP, why, sizeof(why))) {
		SKIP(return, "%s", why);
	}
	ASSERT_LT(0, bt_env_dax(names));
	ASSERT_EQ(0, bt_dax_geometry(names[0], &phys, &size));
	/* Other tests use the first 40 MiB or so: stay clear of them. */
	if (size < 128 * BT_MIB) {
		SKIP(return, "%s is too small (%llu bytes)", names[0],
		     (unsigned long long)size);
	}
	bt_setup_empty(&self->c);
	self->c.backend = BELUGA_BACKEND_DAX;
	r = pzs_attach(&self->c, &self->a, true);
	if (r == -EOPNOTSUPP) {
		SKIP(return, "module built without shared pools");
	}
	ASSERT_EQ(0, r) TH_LOG("shared ATTACH with FORMAT: %s", strerror(-r));
	ASSERT_EQ(0, pz_ready(&self->c, 0x9016, &self->ns, &self->retired0,
			      &self->old));
}

FIXTURE_TEARDOWN(poison_shared)
{
	sigaction(SIGBUS, &self->old, NULL);
	bt_teardown(&self->c);
}

/* The pfn behind a mapped address (/proc/self/pagemap; root). */
static int pzs_pfn(const void *addr, uint64_t *pfn)
{
	uint64_t ent = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = pread(fd, &ent, sizeof(ent),
		  (off_t)((uintptr_t)addr / BT_PAGE) * sizeof(ent));
	close(fd);
	if (n != sizeof(ent))
		return -EIO;
	if (!(ent & (1ULL << 63)))
		return -ENOENT;
	*pfn = ent & ((1ULL << 55) - 1);
	return *pfn ? 0 : -EPERM;
}

/* memory_failure() of the page at @addr through hwpoison-inject. */
static int pzs_inject(const void *addr)
{
	char buf[32];
	uint64_t pfn;
	int fd, r, len;

	r = pzs_pfn(addr, &pfn);
	if (r)
		return r;
	if (access(PZS_INJECT, F_OK))
		mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL);
	fd = open(PZS_INJECT, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	len = snprintf(buf, sizeof(buf), "0x%llx\n", (unsigned long long)pfn);
	r = write(fd, buf, len) == len ? 0 : -errno;
	close(fd);
	return r;
}

TEST_F_TIMEOUT(poison_shared, poisoned_shared_block_is_retired, 240)
{
	struct beluga_key bad = { .lo = 0x5bad, .hi = 3 };
	struct beluga_key good = { .lo = 0x5600d, .hi = 3 };
	uint64_t o_bad, o_good, got[64], off;
	volatile char *target;
	struct beluga_stats st;
	uint32_t hits = 99, i, good_n;
	const char *how = "MADV_HWPOISON";
	char *p;
	int r;

	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	ASSERT_STATS_CONSISTENT(st);
	ASSERT_LT(self->retired0 + 2, st.total_blocks);
	ASSERT_GE(64, st.total_blocks);
	p = bt_map(&self->c);
	ASSERT_EQ(0, pz_publish_pair(&self->c, p, self->ns, bad, good, 3,
				     &o_bad, &o_good));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, bad));

	/* Poison a page in the middle of the published block, mapped. */
	target = p + o_bad + 7 * BT_PAGE;
	ASSERT_FALSE(pz_touch_bus(target));
	pz_signals = 0;
	if (sigsetjmp(pz_jmp, 1) == 0) {
		r = madvise((void *)target, BT_PAGE, MADV_HWPOISON);
		if (r && errno == EFAULT) {
			/* VM_IO and special entries: no get_user_pages() of it. */
			how = "hwpoison-inject";
			r = pzs_inject((const void *)target);
			if (r) {
				SKIP(return, "MADV_HWPOISON: EFAULT (VM_IO mapping); "
				     PZS_INJECT ": %s", strerror(-r));
			}
		} else if (r && (errno == EPERM || errno == EINVAL)) {
			SKIP(return, "madvise(MADV_HWPOISON): %s (needs root and "
			     "CONFIG_MEMORY_FAILURE)", strerror(errno));
		} else {
			ASSERT_EQ(0, r) TH_LOG("MADV_HWPOISON: %s", strerror(errno));
		}
	}
	TH_LOG("poisoned with %s; %d SIGBUS from memory_failure()", how,
	       (int)pz_signals);
	/* memory_failure() unmapped the folio; drop what may be left. */
	madvise(p + o_bad, PZ_BS, MADV_DONTNEED);

	/* The next touch faults: SIGBUS at the very address, block retired. */
	pz_info.si_code = 0;
	ASSERT_TRUE(pz_touch_bus(target + 0x321))
		TH_LOG("touching the poisoned page: no SIGBUS");
	EXPECT_EQ(BUS_MCEERR_AR, pz_info.si_code);
	EXPECT_EQ((uintptr_t)(target + 0x321), (uintptr_t)pz_info.si_addr);
	EXPECT_EQ(12, pz_info.si_addr_lsb);

	/* Taken out of service by the protocol, counted. */
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0 + 1, st.retired_blocks);
	EXPECT_EQ(1, st.published_blocks);
	ASSERT_STATS_CONSISTENT(st);
	EXPECT_EQ(self->retired0 + 1, pz_sysfs_retired());

	/* LOOKUP no longer returns it; the other key is still there. */
	EXPECT_EQ(0, bt_lookup(self->c.fd, self->ns, &bad, 1, &off,
			       BELUGA_LOOKUP_PIN, &hits));
	EXPECT_EQ(0, hits);
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, bad));
	EXPECT_EQ(1, bt_present(self->c.fd, self->ns, good));
	EXPECT_EQ(-1, bt_check(p + o_good, 4096, 4));

	/* ALLOC of the whole pool: every other block (evicting 'good'), never it. */
	good_n = (uint32_t)(st.total_blocks - 1 - self->retired0);
	EXPECT_EQ(-ENOSPC, bt_alloc(self->c.fd, good_n + 1, got));
	ASSERT_EQ(0, bt_alloc(self->c.fd, good_n, got));
	for (i = 0; i < good_n; i++)
		EXPECT_NE(o_bad, got[i]);
	EXPECT_EQ(0, bt_present(self->c.fd, self->ns, good));
	EXPECT_EQ(0, bt_free(self->c.fd, good_n, got));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0 + 1, st.retired_blocks);
	EXPECT_EQ(good_n, st.free_blocks);
	ASSERT_STATS_CONSISTENT(st);
	bt_unmap(&self->c);

	/* Leave and join again (no FORMAT): still out of service. */
	ASSERT_EQ(0, bt_detach(self->c.fd, self->c.att[0].region_id,
			       BELUGA_DETACH_EVICT, NULL));
	self->c.nr = 0;
	r = pzs_attach(&self->c, &self->a, false);
	ASSERT_EQ(0, r) TH_LOG("shared ATTACH (join): %s", strerror(-r));
	ASSERT_EQ(0, bt_stats(self->c.fd, &st));
	EXPECT_EQ(self->retired0 + 1, st.retired_blocks);
	ASSERT_STATS_CONSISTENT(st);
	EXPECT_EQ(-ENOSPC, bt_alloc(self->c.fd, good_n + 1, got));
	ASSERT_EQ(0, bt_alloc(self->c.fd, good_n, got));
	for (i = 0; i < good_n; i++)
		EXPECT_NE(o_bad, got[i]);
	EXPECT_EQ(0, bt_free(self->c.fd, good_n, got));
}

TEST_HARNESS_MAIN
