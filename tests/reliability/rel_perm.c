// SPDX-License-Identifier: GPL-2.0
/*
 * rel_perm: permissions, namespaces and separate pools (tenants).
 *
 *   perm_unpriv      a non-root uid cannot ATTACH, DETACH or EVICT
 *   perm_readonly    without write access: no ALLOC/FREE/PUBLISH, no
 *                    writable mapping; LOOKUP and read mappings work
 *   ns_keys          namespaces separate keys, not memory
 *   pools_isolation  with pools=N: a tenant that can open only pool A
 *                    cannot find, pin, map or read pool B's blocks
 *
 * Environment: BELUGA_TEST_NODE, BELUGA_TEST_DAX (see rel.h); the harness's
 * options (-l lists the tests, -t NAME runs one). See README.md.
 */
#include "rel_test.h"

#define NOBODY 65534

static int drop_to(uid_t uid, gid_t gid)
{
	if (setgroups(0, NULL) || setgid(gid) || setuid(uid))
		return -errno;
	return 0;
}

static bool t_perm_unpriv(void)
{
	const char *dev = bt_dev_path();
	struct stat st;
	pid_t pid;
	int r;

	REQUIRE(stat(dev, &st) == 0, "stat %s", dev);
	REQUIRE(chmod(dev, 0666) == 0, "chmod");
	pid = fork();
	if (pid == 0) {
		struct beluga_attach a;
		struct beluga_evict e = { .size = sizeof(e), .ns = 1, .key = { 1, 1 } };
		struct beluga_detach d = { .size = sizeof(d), .region_id = 0 };
		struct beluga_stats s;
		uint64_t off;
		int fd;

		if (drop_to(NOBODY, NOBODY))
			_exit(20);
		fd = bt_open(O_RDWR);
		if (fd < 0)
			_exit(21);
		memset(&a, 0, sizeof(a));
		a.size = sizeof(a);
		a.backend = BELUGA_BACKEND_NODE;
		a.node = rel_env_node() < 0 ? 0 : rel_env_node();
		a.length = 2 * BT_MIB;
		if (rel_attach(fd, &a) != -EPERM)
			_exit(1);
		if (bt_ioctl(fd, BELUGA_IOC_DETACH, &d) != -EPERM)
			_exit(2);
		if (bt_ioctl(fd, BELUGA_IOC_EVICT, &e) != -EPERM)
			_exit(3);
		e.flags = BELUGA_EVICT_NAMESPACE;
		e.key.lo = e.key.hi = 0;
		if (bt_ioctl(fd, BELUGA_IOC_EVICT, &e) != -EPERM)
			_exit(4);
		/* what an ordinary writer may do still works */
		if (bt_stats(fd, &s) || bt_alloc(fd, 1, &off) || bt_free(fd, 1, &off))
			_exit(5);
		_exit(0);
	}
	r = reap(pid);
	chmod(dev, st.st_mode & 07777);
	REQUIRE(r == 0, "unprivileged child: status %d (1: ATTACH, 2: DETACH, 3: EVICT, "
		"4: EVICT namespace were not -EPERM; 5: a normal call failed; 2x: setup)", r);
	return true;
}

static bool t_perm_readonly(void)
{
	const char *dev = bt_dev_path();
	struct stat st;
	uint64_t off, ns = ns_unique(0x40);
	struct beluga_key key = bt_key(ns, 1);
	int fd = bt_open(O_RDWR), r;
	int32_t res;
	pid_t pid;

	REQUIRE(fd >= 0 && stat(dev, &st) == 0, "open/stat");
	REQUIRE(bt_alloc(fd, 1, &off) == 0 && bt_publish1(fd, ns, off, key, &res) == 0 &&
		res == 0, "publish a key as root");
	REQUIRE(chmod(dev, 0644) == 0, "chmod");
	pid = fork();
	if (pid == 0) {
		uint64_t o2, pin;
		uint32_t hits;
		void *p;
		int rfd;

		if (drop_to(NOBODY, NOBODY))
			_exit(20);
		if (bt_open(O_RDWR) >= 0 || errno != EACCES)
			_exit(1);
		if (bt_open(O_WRONLY) >= 0 || errno != EACCES)
			_exit(2);
		rfd = bt_open(O_RDONLY);
		if (rfd < 0)
			_exit(3);
		if (bt_alloc(rfd, 1, &o2) != -EBADF)
			_exit(4);
		if (bt_free(rfd, 1, &off) != -EBADF)
			_exit(5);
		if (bt_publish1(rfd, ns, off, bt_key(ns, 2), NULL) != -EBADF)
			_exit(6);
		p = mmap(NULL, BT_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
		if (p != MAP_FAILED || errno != EACCES)
			_exit(7);
		p = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, rfd, 0);
		if (p == MAP_FAILED)
			_exit(8);
		if (mprotect(p, BT_PAGE, PROT_READ | PROT_WRITE) == 0 || errno != EACCES)
			_exit(9);
		/* readers: LOOKUP, pin and release work on a read-only file */
		if (bt_lookup(rfd, ns, &key, 1, &pin, BELUGA_LOOKUP_PIN, &hits) || hits != 1 ||
		    pin != off || bt_release(rfd, 1, &pin))
			_exit(10);
		_exit(0);
	}
	r = reap(pid);
	chmod(dev, st.st_mode & 07777);
	rel_evict_ns(fd, ns, NULL, NULL);
	close(fd);
	REQUIRE(r == 0, "read-only child: status %d (1-2: write open allowed, 3: read open "
		"refused, 4-6: ALLOC/FREE/PUBLISH not -EBADF, 7: writable mmap, 8: read "
		"mmap refused, 9: mprotect added write, 10: LOOKUP+PIN/RELEASE failed)", r);
	/* root with an O_RDONLY file: the same rules */
	fd = bt_open(O_RDONLY);
	REQUIRE(fd >= 0, "open O_RDONLY");
	r = bt_alloc(fd, 1, &off);
	close(fd);
	REQUIRE(r == -EBADF, "root ALLOC on an O_RDONLY file: %s", en(r));
	return true;
}

static bool t_ns_keys(void)
{
	int fd = bt_open(O_RDWR), rfd = bt_open(O_RDONLY);
	uint64_t a = ns_unique(0xa), b = a ^ 1, off, got;
	struct beluga_key key = bt_key(42, 42);
	uint32_t hits = 0;
	int32_t res;
	uint8_t *map, *rmap;

	REQUIRE(fd >= 0 && rfd >= 0, "open");
	REQUIRE(bt_alloc(fd, 1, &off) == 0, "ALLOC");
	map = rel_map(fd, REGION, PROT_READ | PROT_WRITE);
	REQUIRE(map, "mmap");
	bt_fill(map + off, BSIZE, 0x5ec);
	REQUIRE(bt_publish1(fd, a, off, key, &res) == 0 && res == 0, "PUBLISH in ns A");
	REQUIRE(bt_lookup(rfd, b, &key, 1, &got, 0, &hits) == 0 && hits == 0,
		"the key of namespace A was found in namespace B");
	REQUIRE(bt_lookup(rfd, a, &key, 1, &got, 0, &hits) == 0 && hits == 1 && got == off,
		"the key is not found in its own namespace");
	/* same key in B is a different entry: no EXISTS */
	REQUIRE(bt_alloc(fd, 1, &got) == 0 && bt_publish1(fd, b, got, key, &res) == 0 &&
		res == BELUGA_PUBLISH_OK, "the same key in namespace B: result %d", res);
	/* memory is not separated: any file of the pool maps and reads A's block */
	rmap = rel_map(rfd, REGION, PROT_READ);
	REQUIRE(rmap && bt_check(rmap + off, BSIZE, 0x5ec) < 0,
		"a reader of the pool could not read namespace A's bytes (documented: "
		"namespaces separate keys, not memory)");
	munmap(rmap, REGION);
	munmap(map, REGION);
	rel_evict_ns(fd, a, NULL, NULL);
	rel_evict_ns(fd, b, NULL, NULL);
	close(fd);
	close(rfd);
	return true;
}

/* ------------------------------------------------------------------ */
/* Separate pools                                                       */

static int nr_pools(void)
{
	uint64_t v = 0;

	if (bt_read_sysfs_u64("/sys/module/beluga/parameters/pools", &v))
		return -1;
	return (int)v;
}

#define TENANT_A 1000
#define TENANT_B 1001

/*
 * Tenant B (uid 1001) owns /dev/beluga1, tenant A (uid 1000) /dev/beluga.
 * B publishes a secret; A must not find, pin, map or read it.
 */
static int pools_tenant_b(uint64_t ns, struct beluga_key key, uint64_t *off_out)
{
	int fd, r;
	uint64_t off;
	uint8_t *map;
	struct beluga_info info;
	int32_t res;

	fd = open("/dev/beluga1", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = bt_alloc(fd, 1, &off);
	if (r)
		return r;
	if (bt_info(fd, &info))
		return -EIO;
	map = rel_map(fd, info.map_size, PROT_READ | PROT_WRITE);
	if (!map)
		return -errno;
	bt_fill(map + off, BSIZE, 0xb5ec4e7);
	r = bt_publish1(fd, ns, off, key, &res);
	if (r || res)
		return r ? r : -EPROTO;
	munmap(map, info.map_size);
	*off_out = off;
	/* the key stays published after close (published blocks are the pool's) */
	close(fd);
	return 0;
}

static bool t_pools_isolation(bool *skipped)
{
	uint64_t ns = ns_unique(0xb00), off = 0;
	struct beluga_key key = bt_key(ns, 7);
	struct stat st0, st1;
	int fd0, fd1, r, p[2];
	pid_t pid;

	*skipped = false;
	if (nr_pools() < 0 || access("/dev/beluga1", F_OK)) {
		*skipped = true;
		snprintf(why, sizeof(why), "%s", nr_pools() < 0 ?
			 "beluga.ko has no pools= parameter (separate pools not implemented)" :
			 "only one pool: load beluga.ko with pools=2 to test tenant isolation");
		return false;
	}
	fd0 = bt_open(O_RDWR);
	fd1 = open("/dev/beluga1", O_RDWR | O_CLOEXEC);
	REQUIRE(fd0 >= 0 && fd1 >= 0, "open both pools: %s", strerror(errno));
	REQUIRE(rel_reset_pool_fd(fd1, 3000) == 0, "empty pool 1");
	/* pool 0 keeps its fixture region; pool 1 gets its own */
	r = rel_attach_node(fd1, REGION, BSIZE, "tenant-b", NULL);
	if (r == -ENOENT)
		r = rel_attach_dax(fd1, 1, 0, REGION, BSIZE, "tenant-b", NULL);
	REQUIRE(r == 0, "ATTACH to pool 1: %s", en(r));
	/* one device-dax range cannot be claimed by two pools */
	{
		struct beluga_region_info ri;

		for (uint32_t s = 0; s < BELUGA_MAX_REGIONS; s++)
			if (bt_region_info(fd0, s, &ri) == 0 && ri.backend == BELUGA_BACKEND_DAX) {
				struct beluga_attach a = { .size = sizeof(a),
					.backend = BELUGA_BACKEND_DAX, .node = -1,
					.phys_start = ri.phys_start, .length = ri.length };

				snprintf(a.name, sizeof(a.name), "steal");
				r = rel_attach(fd1, &a);
				REQUIRE(r == -EEXIST, "pool 1 attached pool 0's dax range: %s", en(r));
				break;
			}
	}
	REQUIRE(stat("/dev/beluga", &st0) == 0 && stat("/dev/beluga1", &st1) == 0, "stat");
	REQUIRE(chown("/dev/beluga", TENANT_A, TENANT_A) == 0 && chmod("/dev/beluga", 0600) == 0 &&
		chown("/dev/beluga1", TENANT_B, TENANT_B) == 0 && chmod("/dev/beluga1", 0600) == 0,
		"chown/chmod per tenant");

	/* tenant B publishes */
	REQUIRE(pipe(p) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		if (drop_to(TENANT_B, TENANT_B))
			_exit(20);
		r = pools_tenant_b(ns, key, &off);
		if (r)
			_exit(21);
		if (write(p[1], &off, sizeof(off)) != sizeof(off))
			_exit(22);
		_exit(0);
	}
	close(p[1]);
	r = read(p[0], &off, sizeof(off)) == sizeof(off) ? 0 : -1;
	close(p[0]);
	REQUIRE(reap(pid) == 0 && r == 0, "tenant B could not publish in its own pool");

	/* tenant A looks for it */
	pid = fork();
	if (pid == 0) {
		struct beluga_info info;
		uint64_t got;
		uint32_t hits = 9;
		uint8_t *map;
		int fd;

		if (drop_to(TENANT_A, TENANT_A))
			_exit(20);
		if (open("/dev/beluga1", O_RDWR) >= 0 || errno != EACCES)
			_exit(1);
		if (open("/dev/beluga1", O_RDONLY) >= 0 || errno != EACCES)
			_exit(2);
		fd = bt_open(O_RDWR);
		if (fd < 0)
			_exit(3);
		if (bt_lookup(fd, ns, &key, 1, &got, BELUGA_LOOKUP_PIN, &hits) || hits != 0)
			_exit(4);
		if (bt_info(fd, &info))
			_exit(5);
		/* A's offset space covers A's regions only */
		map = mmap(NULL, BT_PAGE, PROT_READ, MAP_SHARED, fd,
			   (off_t)(info.map_size + 64 * BT_MIB));
		if (map != MAP_FAILED)
			_exit(6);
		map = rel_map(fd, info.map_size, PROT_READ);
		if (!map)
			_exit(7);
		/* nowhere in A's mapping are B's bytes */
		for (uint64_t o = 0; o + BSIZE <= info.map_size; o += BSIZE) {
			struct beluga_region_info ri;
			bool in = false;

			for (uint32_t s = 0; s < BELUGA_MAX_REGIONS; s++)
				if (bt_region_info(fd, s, &ri) == 0 && o >= ri.first_offset &&
				    o + BSIZE <= ri.first_offset + ri.nr_blocks * info.block_size)
					in = true;
			if (in && bt_check(map + o, 64, 0xb5ec4e7) < 0)
				_exit(8);
		}
		_exit(0);
	}
	r = reap(pid);
	chown("/dev/beluga", st0.st_uid, st0.st_gid);
	chmod("/dev/beluga", st0.st_mode & 07777);
	chown("/dev/beluga1", st1.st_uid, st1.st_gid);
	chmod("/dev/beluga1", st1.st_mode & 07777);
	REQUIRE(r == 0, "tenant A: status %d (1-2: opened B's device, 3: cannot open its "
		"own, 4: found B's key, 5: INFO, 6: mapped past its own map_size, 7: mmap, "
		"8: read B's bytes through its own device)", r);
	/* and the key really is there, in B's pool */
	{
		uint32_t hits = 0;
		uint64_t got;

		REQUIRE(bt_lookup(fd1, ns, &key, 1, &got, 0, &hits) == 0 && hits == 1 &&
			got == off, "B's key is not in pool 1");
		REQUIRE(bt_lookup(fd0, ns, &key, 1, &got, 0, &hits) == 0 && hits == 0,
			"B's key is visible in pool 0 (as root)");
	}
	{
		uint64_t v0 = 0, v1 = 0;

		bt_read_sysfs_u64("/sys/class/misc/beluga/published_blocks", &v0);
		bt_read_sysfs_u64("/sys/class/misc/beluga1/published_blocks", &v1);
		REQUIRE(v1 >= 1, "/sys/class/misc/beluga1/published_blocks is %llu",
			(rel_ull)v1);
	}
	rel_reset_pool_fd(fd1, 3000);
	close(fd0);
	close(fd1);
	return true;
}

FIXTURE_REL(perm);

TEST_F_TIMEOUT(perm, perm_unpriv, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_perm_unpriv());
}

TEST_F_TIMEOUT(perm, perm_readonly, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_perm_readonly());
}

TEST_F_TIMEOUT(perm, ns_keys, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	REL_ASSERT(t_ns_keys());
}

TEST_F_TIMEOUT(perm, pools_isolation, REL_TIMEOUT)
{
	if (!rel_setup(_metadata, REL_POOL))
		return;
	bool skipped = false, ok = t_pools_isolation(&skipped);

	if (!ok && skipped)
		SKIP(return, "%s", why);
	REL_ASSERT(ok);
}

TEST_HARNESS_MAIN
